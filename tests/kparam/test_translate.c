/* Description: kparam_translate_args and kparam_translate_buffer replace exactly the words that a
 * callback recognises as virtual pointers (pointer params, aligned words of structs), leave
 * scalars and the caller's argument storage untouched, read no byte outside a parameter (each
 * parameter lives in a malloc block of its exact size, so ASan builds catch overreads), and
 * report opaque plans and short scratch. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kparam.h"
#include "../common/test.h"

#define VIRTUAL_BASE 0x7f0000000000ull
#define VIRTUAL_END 0x7f0100000000ull
#define REAL_OFFSET 0x100000000ull

static int calls;
static int fake_translate(void *ctx, uint64_t *word) {
  (void)ctx;
  calls++;
  if (*word < VIRTUAL_BASE || *word >= VIRTUAL_END) return 0;
  *word += REAL_OFFSET;
  return 1;
}
static int failing_translate(void *ctx, uint64_t *word) {
  (void)ctx;
  (void)word;
  return -EIO;
}

struct with_pointers { int a; uint64_t p; char c; uint64_t q; }; /* 32 bytes */

/* A struct whose padding is zero: its words are read whole, and stack garbage in the padding
 * after `a` or `c` could look like a virtual pointer (it did once in a sanitizer run: rc 3). */
static void fill(struct with_pointers *s, int a, uint64_t p, char c, uint64_t q) {
  memset(s, 0, sizeof *s);
  s->a = a;
  s->p = p;
  s->c = c;
  s->q = q;
}

/* A PTX image standing in for the cubin metadata of one kernel:
 * k(int n, float *p, with_pointers s, long long big, char tail) */
static const char ptx[] =
    "//\n.version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry _Z1kiPf13with_pointersxc(\n"
    "  .param .u32 a0, .param .u64 a1, .param .align 8 .b8 a2[32], .param .u64 a3,\n"
    "  .param .u8 a4\n)\n{ ret; }\n";

static void *copy_of(const void *p, size_t n) {
  void *q = malloc(n);
  memcpy(q, p, n);
  return q;
}

int main(void) {
  struct kparam_image *image;
  CHECK(kparam_image_parse(ptx, sizeof ptx, "test", 90, &image) == 0, "parse PTX");
  const struct kparam_plan *plan = kparam_image_find(image, "_Z1kiPf13with_pointersxc");
  CHECK(plan != NULL, "plan");
  CHECK_EQ(plan->param_count, 5);
  CHECK_EQ(plan->params[2].offset, 16);
  CHECK_EQ(plan->params[4].offset, 56);
  CHECK_EQ(plan->params[1].kind, KPARAM_KIND_POINTER);
  CHECK_EQ(plan->params[2].kind, KPARAM_KIND_AGGREGATE);
  CHECK_EQ(plan->params[3].kind, KPARAM_KIND_SCALAR);
  CHECK_EQ(plan->word_count, 5); /* the pointer and the struct's four words */
  CHECK(plan->needs_translation, "needs translation");

  int n = 7;
  uint64_t p = VIRTUAL_BASE + 0x1000;
  struct with_pointers s;
  fill(&s, 3, VIRTUAL_BASE + 0x2000, 'x', 42);
  long long big = (long long)(VIRTUAL_BASE + 0x3000); /* in range, but a scalar: untouched */
  char tail = 9;
  void *args[5] = {copy_of(&n, 4), copy_of(&p, 8), copy_of(&s, sizeof s), copy_of(&big, 8),
                   copy_of(&tail, 1)};
  void *saved[5];
  memcpy(saved, args, sizeof args);
  void *out[5];
  unsigned char scratch[256];
  int rc = kparam_translate_args(plan, args, out, scratch, sizeof scratch, fake_translate, NULL);
  CHECK_EQ(rc, 2);
  CHECK_EQ(calls, 5);
  CHECK(memcmp(args, saved, sizeof args) == 0, "args_in unchanged");
  CHECK(*(uint64_t *)args[1] == p && memcmp(args[2], &s, sizeof s) == 0, "storage unchanged");
  CHECK(out[0] == args[0] && out[3] == args[3] && out[4] == args[4], "pass-through params");
  CHECK(out[1] != args[1] && out[2] != args[2], "changed params come from scratch");
  CHECK_EQ(*(uint64_t *)out[1], p + REAL_OFFSET);
  struct with_pointers t;
  memcpy(&t, out[2], sizeof t);
  CHECK(t.a == 3 && t.c == 'x' && t.q == 42 && t.p == s.p + REAL_OFFSET, "struct translated");
  CHECK(plan->scratch_bytes >= 40 && plan->scratch_bytes <= sizeof scratch, "scratch size");

  /* Nothing in range: everything passes through, scratch unused. */
  uint64_t outside = 0x1234;
  void *args2[5] = {args[0], copy_of(&outside, 8), args[2], args[3], args[4]};
  struct with_pointers plain;
  fill(&plain, 1, 5, 'y', 6);
  memcpy(args2[2], &plain, sizeof plain);
  CHECK_EQ(kparam_translate_args(plan, args2, out, NULL, 0, fake_translate, NULL), 0);
  CHECK(memcmp(out, args2, sizeof out) == 0, "all passed through");
  memcpy(args[2], &s, sizeof s);

  /* Errors: short scratch, callback failure, opaque plans. */
  CHECK_EQ(kparam_translate_args(plan, args, out, scratch, 8, fake_translate, NULL), -ENOSPC);
  CHECK_EQ(kparam_translate_args(plan, args, out, scratch, 256, failing_translate, NULL), -EIO);

  /* The packed form: same words, in place on a copy. */
  unsigned char packed[64] = {0};
  memcpy(packed + 0, &n, 4);
  memcpy(packed + 8, &p, 8);
  memcpy(packed + 16, &s, sizeof s);
  memcpy(packed + 48, &big, 8);
  memcpy(packed + 56, &tail, 1);
  unsigned char *exact = copy_of(packed, plan->param_bytes);
  CHECK_EQ(kparam_translate_buffer(plan, exact, plan->param_bytes, fake_translate, NULL), 2);
  uint64_t word;
  memcpy(&word, exact + 8, 8);
  CHECK_EQ(word, p + REAL_OFFSET);
  memcpy(&word, exact + 24, 8);
  CHECK_EQ(word, s.p + REAL_OFFSET);
  memcpy(&word, exact + 48, 8);
  CHECK_EQ(word, (uint64_t)big);
  CHECK_EQ(kparam_translate_buffer(plan, exact, plan->param_bytes - 1, fake_translate, NULL),
           -EINVAL);
  free(exact);

  /* An unknown kernel through the registry becomes an opaque plan, never NULL. */
  kparam_module_key key = kparam_register_fatbin(ptx);
  static const char host_fun_bytes[16] = {(char)0xc3}; /* ret: not a launch stub */
  CHECK(kparam_register_function(key, host_fun_bytes, "no_such_kernel") == 0, "register");
  kparam_set_log(NULL);
  const struct kparam_plan *opaque = kparam_plan_for_host_fun(host_fun_bytes);
  CHECK(opaque && opaque->source == KPARAM_SOURCE_OPAQUE, "opaque plan");
  CHECK_EQ(kparam_translate_args(opaque, args, out, scratch, 256, fake_translate, NULL), -ENOTSUP);
  CHECK_EQ(kparam_translate_buffer(opaque, packed, 64, fake_translate, NULL), -ENOTSUP);
  /* Library path: the same PTX loaded as a library. */
  int lib, kernel;
  CHECK(kparam_register_library(&lib, ptx, sizeof ptx) == 0, "library");
  CHECK(kparam_register_library_kernel(&kernel, &lib, "_Z1kiPf13with_pointersxc") == 0, "lib k");
  const struct kparam_plan *lib_plan = kparam_plan_for_kernel(&kernel);
  CHECK(lib_plan && lib_plan->source == KPARAM_SOURCE_PTX && lib_plan->word_count == 5, "lib");
  kparam_unregister_fatbin(key);

  for (int i = 0; i < 5; i++) free(args[i]);
  free(args2[1]);
  kparam_image_free(image);
  printf("ok\n");
  return 0;
}
