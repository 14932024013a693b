/* Itanium C++ mangled names: the kind (pointer, scalar, aggregate) of each parameter of a
 * kernel, which .nv.info does not record. Only what kinds need is decoded; anything outside the
 * supported grammar makes the whole name undecodable, and callers then scan conservatively. */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SUBSTITUTIONS 1024
#define MAX_TEMPLATE_ARGS 128
#define MAX_DEPTH 64

/* A kind used only while decoding: a function type, which a kernel cannot take by value. */
#define KIND_FUNCTION ((enum kparam_kind)100)

struct demangler {
  const char *s;
  size_t at, len;
  bool failed;
  int depth;
  enum kparam_kind subs[MAX_SUBSTITUTIONS];
  size_t sub_count;
  enum kparam_kind template_args[MAX_TEMPLATE_ARGS]; /* of the last template-args list */
  size_t template_arg_count;
};

static char peek(const struct demangler *d) { return d->at < d->len ? d->s[d->at] : '\0'; }
static char peek2(const struct demangler *d) { return d->at + 1 < d->len ? d->s[d->at + 1] : '\0'; }
static bool eat(struct demangler *d, char c) {
  if (peek(d) != c) return false;
  d->at++;
  return true;
}
static enum kparam_kind fail(struct demangler *d) {
  d->failed = true;
  d->at = d->len;
  return KPARAM_KIND_UNKNOWN;
}
static void add_sub(struct demangler *d, enum kparam_kind kind) {
  if (d->sub_count < MAX_SUBSTITUTIONS) d->subs[d->sub_count++] = kind;
}

static enum kparam_kind parse_type(struct demangler *d);
static bool parse_encoding(struct demangler *d, enum kparam_kind *kinds, size_t max, int *count);
static void parse_expression(struct demangler *d);

static size_t parse_decimal(struct demangler *d) {
  size_t v = 0;
  if (!isdigit((unsigned char)peek(d))) return (fail(d), 0);
  while (isdigit((unsigned char)peek(d))) {
    v = v * 10 + (size_t)(d->s[d->at++] - '0');
    if (v > d->len) return (fail(d), 0);
  }
  return v;
}

static void parse_source_name(struct demangler *d) {
  size_t n = parse_decimal(d);
  if (d->failed || n == 0 || n > d->len - d->at) {
    fail(d);
    return;
  }
  d->at += n;
}

/* <seq-id> _ in S<seq-id>_ and T<n>_: base 36, empty means 0, else value + 1. */
static size_t parse_seq_id(struct demangler *d) {
  if (eat(d, '_')) return 0;
  size_t v = 0;
  while (isdigit((unsigned char)peek(d)) || isupper((unsigned char)peek(d))) {
    char c = d->s[d->at++];
    v = v * 36 + (size_t)(isdigit((unsigned char)c) ? c - '0' : c - 'A' + 10);
    if (v > MAX_SUBSTITUTIONS) return (fail(d), 0);
  }
  if (!eat(d, '_')) return (fail(d), 0);
  return v + 1;
}

static void skip_abi_tags(struct demangler *d) {
  while (!d->failed && peek(d) == 'B') {
    d->at++;
    parse_source_name(d);
  }
}

/* I <template-arg>+ E; records the kinds of the top-level arguments when record is set. */
static void parse_template_args(struct demangler *d, bool record) {
  enum kparam_kind kinds[MAX_TEMPLATE_ARGS];
  size_t count = 0;
  if (!eat(d, 'I')) {
    fail(d);
    return;
  }
  while (!d->failed && !eat(d, 'E')) {
    enum kparam_kind kind = KPARAM_KIND_UNKNOWN;
    char c = peek(d);
    if (c == 'L') {
      parse_expression(d); /* a literal or an external name: a value, not a type */
    } else if (c == 'X') {
      d->at++;
      parse_expression(d);
      if (!eat(d, 'E')) fail(d);
    } else if (c == 'J') { /* argument pack */
      d->at++;
      while (!d->failed && !eat(d, 'E')) {
        if (peek(d) == 'L') parse_expression(d);
        else if (eat(d, 'X')) { parse_expression(d); if (!eat(d, 'E')) fail(d); }
        else parse_type(d);
      }
    } else if (c == '\0') {
      fail(d);
    } else {
      kind = parse_type(d);
    }
    if (count < MAX_TEMPLATE_ARGS) kinds[count++] = kind;
  }
  if (record && !d->failed) {
    memcpy(d->template_args, kinds, count * sizeof kinds[0]);
    d->template_arg_count = count;
  }
}

/* L <type> <value> E | L _Z <encoding> E | X ... E operands. Values are skipped. */
static void parse_primary(struct demangler *d) {
  d->at++; /* 'L' */
  if (peek(d) == '_' && peek2(d) == 'Z') {
    d->at += 2;
    int unused;
    parse_encoding(d, NULL, 0, &unused);
  } else if (peek(d) == 'Z') {
    d->at++;
    int unused;
    parse_encoding(d, NULL, 0, &unused);
  } else {
    parse_type(d);
    while (!d->failed && peek(d) != 'E' && peek(d) != '\0') d->at++;
  }
  if (!eat(d, 'E')) fail(d);
}

static void parse_expression(struct demangler *d) {
  if (++d->depth > MAX_DEPTH) {
    fail(d);
    return;
  }
  char a = peek(d), b = peek2(d);
  static const char *const unary[] = {"ad", "de", "ng", "nt", "co", "ps", "pp", "mm", "sz", "az"};
  static const char *const binary[] = {"pl", "mi", "ml", "dv", "rm", "an", "or", "eo", "ls", "rs",
                                       "eq", "ne", "lt", "gt", "le", "ge", "aa", "oo", "cm"};
  if (a == 'L') {
    parse_primary(d);
  } else if (a == 'T') {
    d->at++;
    parse_seq_id(d);
  } else if (a == 'f' && b == 'p') {
    d->at += 2;
    while (peek(d) == 'K' || peek(d) == 'V' || peek(d) == 'r') d->at++;
    if (!eat(d, '_')) {
      parse_decimal(d);
      if (!eat(d, '_')) fail(d);
    }
  } else if ((a == 's' || a == 'a') && b == 't') {
    d->at += 2;
    parse_type(d);
  } else if (a == 'c' && b == 'v') {
    d->at += 2;
    parse_type(d);
    parse_expression(d);
  } else if (a == 'q' && b == 'u') {
    d->at += 2;
    parse_expression(d);
    parse_expression(d);
    parse_expression(d);
  } else {
    bool known = false;
    for (size_t i = 0; i < sizeof unary / sizeof unary[0] && !known; i++)
      if (a == unary[i][0] && b == unary[i][1]) {
        d->at += 2;
        if ((a == 'p' || a == 'm') && peek(d) == '_') d->at++;
        parse_expression(d);
        known = true;
      }
    for (size_t i = 0; i < sizeof binary / sizeof binary[0] && !known; i++)
      if (a == binary[i][0] && b == binary[i][1]) {
        d->at += 2;
        parse_expression(d);
        parse_expression(d);
        known = true;
      }
    if (!known) fail(d);
  }
  d->depth--;
}

/* An unqualified name inside a nested or unscoped name. Sets *special for ctors, dtors and
 * conversion operators, whose encodings carry no return type. */
static void parse_unqualified_name(struct demangler *d, bool *special) {
  char a = peek(d), b = peek2(d);
  *special = false;
  if (isdigit((unsigned char)a)) {
    parse_source_name(d);
  } else if (a == 'U' && (b == 't' || b == 'l')) {
    d->at += 2;
    if (b == 'l') { /* closure type: Ul <lambda-sig> E [<number>] _ */
      while (!d->failed && !eat(d, 'E')) parse_type(d);
    }
    while (isdigit((unsigned char)peek(d))) d->at++;
    if (!eat(d, '_')) fail(d);
  } else if ((a == 'C' && b >= '1' && b <= '5') || (a == 'D' && b >= '0' && b <= '5')) {
    d->at += 2;
    *special = true;
  } else if (a == 'c' && b == 'v') {
    d->at += 2;
    parse_type(d);
    *special = true;
  } else if (islower((unsigned char)a) && islower((unsigned char)b)) {
    d->at += 2; /* operator name, e.g. cl for operator() */
  } else if (a == 'L') {
    d->at++; /* internal linkage */
    parse_source_name(d);
  } else {
    fail(d);
  }
  skip_abi_tags(d);
}

/* N [CV] [ref] <prefix> <unqualified-name> E. Every prefix is a substitution candidate; the
 * complete name is one too unless it names the function itself (is_function). */
static void parse_nested_name(struct demangler *d, bool is_function, bool *templated,
                              bool *special) {
  d->at++; /* 'N' */
  while (peek(d) == 'K' || peek(d) == 'V' || peek(d) == 'r' || peek(d) == 'R' || peek(d) == 'O')
    d->at++;
  bool have_prefix = false, prefix_is_substitution = false;
  *templated = false;
  while (!d->failed && !eat(d, 'E')) {
    if (have_prefix && !prefix_is_substitution) add_sub(d, KPARAM_KIND_AGGREGATE);
    prefix_is_substitution = false;
    *templated = false;
    char c = peek(d);
    if (c == 'S' && peek2(d) == 't') {
      d->at += 2; /* std:: is not a substitution candidate */
      continue;
    }
    if (c == 'S') { /* already a candidate: not added again as a prefix */
      d->at++;
      if (islower((unsigned char)peek(d))) d->at++; /* Sa, Sb, Ss, ... */
      else parse_seq_id(d);
      prefix_is_substitution = true;
    } else if (c == 'T') {
      d->at++;
      parse_seq_id(d);
      add_sub(d, KPARAM_KIND_UNKNOWN);
      prefix_is_substitution = true;
    } else if (c == 'I') {
      parse_template_args(d, is_function);
      *templated = true;
    } else if (c == 'D' && (peek2(d) == 't' || peek2(d) == 'T')) {
      fail(d);
      return;
    } else {
      parse_unqualified_name(d, special);
    }
    have_prefix = true;
  }
  if (!is_function) add_sub(d, KPARAM_KIND_AGGREGATE);
}

/* A name used as a type, or the function's name (is_function). Returns its kind. */
static enum kparam_kind parse_name(struct demangler *d, bool is_function, bool *templated,
                                   bool *special) {
  *templated = false;
  *special = false;
  char c = peek(d);
  if (c == 'N') {
    parse_nested_name(d, is_function, templated, special);
    return KPARAM_KIND_AGGREGATE;
  }
  if (c == 'Z') { /* local entity: Z <encoding> E <entity> [<discriminator>] */
    d->at++;
    int unused;
    parse_encoding(d, NULL, 0, &unused);
    if (!eat(d, 'E')) return fail(d);
    if (eat(d, 's')) {
      /* string literal entity */
    } else {
      bool t2, s2;
      if (peek(d) == 'N') parse_nested_name(d, true, &t2, &s2);
      else parse_unqualified_name(d, &s2);
    }
    if (eat(d, '_')) {
      if (eat(d, '_')) { parse_decimal(d); if (!eat(d, '_')) fail(d); }
      else parse_decimal(d);
    }
    if (!is_function) add_sub(d, KPARAM_KIND_AGGREGATE);
    return KPARAM_KIND_AGGREGATE;
  }
  if (c == 'S' && peek2(d) == 't') d->at += 2;
  parse_unqualified_name(d, special);
  if (peek(d) == 'I') {
    add_sub(d, KPARAM_KIND_AGGREGATE); /* the unscoped template name */
    parse_template_args(d, is_function);
    *templated = true;
  }
  if (!is_function) add_sub(d, KPARAM_KIND_AGGREGATE);
  return KPARAM_KIND_AGGREGATE;
}

static enum kparam_kind parse_type(struct demangler *d) {
  if (d->failed) return KPARAM_KIND_UNKNOWN;
  if (++d->depth > MAX_DEPTH) return fail(d);
  enum kparam_kind kind = KPARAM_KIND_UNKNOWN;
  char c = peek(d), c2 = peek2(d);
  bool templated, special;
  if (c && strchr("vbcahstijlmxynofdegwz", c)) {
    d->at++;
    kind = KPARAM_KIND_SCALAR;
  } else if (c == 'D' && c2 && strchr("dehfisuacn", c2)) {
    d->at += 2;
    kind = KPARAM_KIND_SCALAR;
  } else if (c == 'D' && c2 == 'F') { /* DF16_, DF16b */
    d->at += 2;
    parse_decimal(d);
    if (!eat(d, '_') && !eat(d, 'b') && !eat(d, 'x')) fail(d);
    kind = KPARAM_KIND_SCALAR;
  } else if (c == 'D' && c2 == 'v') { /* vector type */
    d->at += 2;
    parse_decimal(d);
    if (!eat(d, '_')) fail(d);
    parse_type(d);
    kind = KPARAM_KIND_AGGREGATE;
    add_sub(d, kind);
  } else if (c == 'D' && c2 == 'p') { /* pack expansion: count no longer matches; give up */
    fail(d);
  } else if (c == 'P' || c == 'R' || c == 'O') {
    d->at++;
    parse_type(d);
    kind = KPARAM_KIND_POINTER;
    add_sub(d, kind);
  } else if (c == 'K' || c == 'V' || c == 'r') {
    while (peek(d) == 'K' || peek(d) == 'V' || peek(d) == 'r') d->at++;
    kind = parse_type(d);
    add_sub(d, kind);
  } else if (c == 'C' || c == 'G') { /* complex, imaginary */
    d->at++;
    parse_type(d);
    kind = KPARAM_KIND_SCALAR;
    add_sub(d, kind);
  } else if (c == 'F') {
    d->at++;
    eat(d, 'Y');
    while (!d->failed && !eat(d, 'E')) {
      if (peek(d) == 'R' && peek2(d) == 'E') { d->at++; continue; }
      if (peek(d) == 'O' && peek2(d) == 'E') { d->at++; continue; }
      parse_type(d);
    }
    kind = KIND_FUNCTION;
    add_sub(d, kind);
  } else if (c == 'A') {
    d->at++;
    if (isdigit((unsigned char)peek(d))) parse_decimal(d);
    else if (peek(d) != '_') parse_expression(d);
    if (!eat(d, '_')) fail(d);
    parse_type(d);
    kind = KPARAM_KIND_AGGREGATE;
    add_sub(d, kind);
  } else if (c == 'M') { /* pointer to member: an offset or a member function, not an address */
    d->at++;
    parse_type(d);
    parse_type(d);
    kind = KPARAM_KIND_SCALAR;
    add_sub(d, kind);
  } else if (c == 'T') {
    d->at++;
    size_t index = parse_seq_id(d);
    kind = index < d->template_arg_count ? d->template_args[index] : KPARAM_KIND_UNKNOWN;
    add_sub(d, kind);
    if (peek(d) == 'I') {
      parse_template_args(d, false);
      kind = KPARAM_KIND_AGGREGATE;
      add_sub(d, kind);
    }
  } else if (c == 'S' && c2 != 't') {
    d->at++;
    if (islower((unsigned char)peek(d))) {
      d->at++;
      kind = KPARAM_KIND_AGGREGATE;
    } else {
      size_t index = parse_seq_id(d);
      kind = index < d->sub_count ? d->subs[index] : (fail(d), KPARAM_KIND_UNKNOWN);
    }
    if (peek(d) == 'I') {
      parse_template_args(d, false);
      kind = KPARAM_KIND_AGGREGATE;
      add_sub(d, kind);
    }
  } else if (c == 'u') { /* vendor extended type */
    d->at++;
    parse_source_name(d);
    kind = KPARAM_KIND_SCALAR;
    add_sub(d, kind);
  } else if (c == 'N' || c == 'Z' || isdigit((unsigned char)c) || c == 'S') {
    kind = parse_name(d, false, &templated, &special);
  } else {
    fail(d);
  }
  d->depth--;
  return d->failed ? KPARAM_KIND_UNKNOWN : kind;
}

/* <name> <bare-function-type>. Stores up to max parameter kinds; *count gets the number. */
static bool parse_encoding(struct demangler *d, enum kparam_kind *kinds, size_t max, int *count) {
  bool templated, special;
  *count = 0;
  if (++d->depth > MAX_DEPTH) return (fail(d), false);
  size_t saved_count = d->template_arg_count;
  enum kparam_kind saved[MAX_TEMPLATE_ARGS];
  memcpy(saved, d->template_args, saved_count * sizeof saved[0]);
  parse_name(d, true, &templated, &special);
  if (templated && !special) parse_type(d); /* the return type of a function template */
  int n = 0;
  bool only_void = false;
  while (!d->failed && peek(d) != '\0' && peek(d) != 'E' && peek(d) != '.') {
    bool is_void = peek(d) == 'v';
    enum kparam_kind kind = parse_type(d);
    if (kind == KIND_FUNCTION) kind = KPARAM_KIND_POINTER;
    if (kinds && (size_t)n < max) kinds[n] = kind;
    only_void = n == 0 && is_void;
    n++;
  }
  if (only_void && n == 1) n = 0;
  *count = n;
  memcpy(d->template_args, saved, saved_count * sizeof saved[0]);
  d->template_arg_count = saved_count;
  d->depth--;
  return !d->failed;
}

int kparam_demangle_kinds(const char *name, enum kparam_kind *kinds, size_t max) {
  if (!name || strncmp(name, "_Z", 2) != 0) return -EINVAL;
  struct demangler *d = calloc(1, sizeof *d);
  if (!d) return -ENOMEM;
  d->s = name;
  d->len = strlen(name);
  d->at = 2;
  int count = 0;
  bool ok = parse_encoding(d, kinds, max, &count);
  bool complete = d->at == d->len || peek(d) == '.';
  free(d);
  return ok && complete ? count : -EINVAL;
}
