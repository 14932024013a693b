/* Shared helpers for cudaw's test programs: exit 0 pass, 1 fail, 77 skipped (reason printed). */
#ifndef CUDAW_TEST_H
#define CUDAW_TEST_H

#include <stdio.h>
#include <stdlib.h>

#define TEST_SKIP_CODE 77

#define test_fail(...)                                                                 \
  do {                                                                                 \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                               \
    fprintf(stderr, __VA_ARGS__);                                                      \
    fputc('\n', stderr);                                                               \
    exit(1);                                                                           \
  } while (0)

#define test_skip(...)                                                                 \
  do {                                                                                 \
    printf("skipped: ");                                                               \
    printf(__VA_ARGS__);                                                               \
    putchar('\n');                                                                     \
    exit(TEST_SKIP_CODE);                                                              \
  } while (0)

/* CHECK(cond) or CHECK(cond, fmt, ...): fail with the message unless cond holds. */
#define CHECK(cond, ...)                                                               \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      fprintf(stderr, "FAIL %s:%d: check '%s' failed:", __FILE__, __LINE__, #cond);    \
      fprintf(stderr, " " __VA_ARGS__);                                                \
      fputc('\n', stderr);                                                             \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

/* CHECK_EQ for integers; prints both values. */
#define CHECK_EQ(a, b)                                                                 \
  do {                                                                                 \
    long long va_ = (long long)(a), vb_ = (long long)(b);                              \
    if (va_ != vb_) test_fail("%s == %lld, expected %s == %lld", #a, va_, #b, vb_);    \
  } while (0)

#endif
