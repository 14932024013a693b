/* PTX fallback: parameter layouts from the `.entry name(.param ..., ...)` lists of PTX text,
 * laid out with PTX's rules (each parameter at its alignment: .align N, else its type's size). */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct lexer {
  const char *text;
  size_t size, at;
};

static void skip_space(struct lexer *lx) {
  while (lx->at < lx->size) {
    char c = lx->text[lx->at];
    if (isspace((unsigned char)c)) {
      lx->at++;
    } else if (c == '/' && lx->at + 1 < lx->size && lx->text[lx->at + 1] == '/') {
      while (lx->at < lx->size && lx->text[lx->at] != '\n') lx->at++;
    } else if (c == '/' && lx->at + 1 < lx->size && lx->text[lx->at + 1] == '*') {
      lx->at += 2;
      while (lx->at + 1 < lx->size && !(lx->text[lx->at] == '*' && lx->text[lx->at + 1] == '/'))
        lx->at++;
      lx->at = lx->at + 2 < lx->size ? lx->at + 2 : lx->size;
    } else {
      return;
    }
  }
}

static bool ident_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '$' || c == '%' || c == '.';
}

/* Next token: an identifier/directive (may start with '.') or one punctuation character. */
static size_t next_token(struct lexer *lx, const char **start) {
  skip_space(lx);
  *start = lx->text + lx->at;
  if (lx->at >= lx->size) return 0;
  size_t begin = lx->at;
  if (ident_char(lx->text[lx->at])) {
    while (lx->at < lx->size && ident_char(lx->text[lx->at])) lx->at++;
  } else {
    lx->at++;
  }
  return lx->at - begin;
}

static bool token_is(const char *t, size_t n, const char *word) {
  return n == strlen(word) && memcmp(t, word, n) == 0;
}

/* Size in bytes of a PTX fundamental type token such as .u64, .f16x2, .b8; 0 if not one. */
static uint32_t type_size(const char *t, size_t n, bool *is_float) {
  if (n < 3 || t[0] != '.') return 0;
  size_t i = 1;
  while (i < n && isalpha((unsigned char)t[i])) i++;
  size_t letters = i - 1;
  if (letters == 0 || letters > 2 || i == n) return 0;
  uint32_t bits = 0;
  while (i < n && isdigit((unsigned char)t[i])) bits = bits * 10 + (uint32_t)(t[i++] - '0');
  uint32_t lanes = 1;
  if (i + 1 < n + 1 && i < n && t[i] == 'x') {
    lanes = 0;
    for (i++; i < n && isdigit((unsigned char)t[i]); i++) lanes = lanes * 10 + (uint32_t)(t[i] - '0');
  }
  if (i != n || bits % 8 || bits == 0 || bits > 128 || lanes == 0 || lanes > 8) return 0;
  *is_float = t[1] == 'f' || (t[1] == 'b' && letters == 2);
  return bits / 8 * lanes;
}

static uint32_t parse_number(const char *t, size_t n, bool *ok) {
  uint64_t v = 0;
  *ok = n > 0 && n < 10;
  for (size_t i = 0; i < n && *ok; i++) {
    if (!isdigit((unsigned char)t[i])) *ok = false;
    v = v * 10 + (uint64_t)(t[i] - '0');
  }
  return (uint32_t)v;
}

/* Parse one `.param ...` declaration; the lexer stands after `.param`. */
static int parse_param(struct lexer *lx, uint32_t *cursor, struct kparam_param *out) {
  uint32_t align = 0, elem = 0, count = 1;
  bool is_float = false, is_ptr = false, named = false, ok;
  const char *t;
  size_t n;
  for (;;) {
    size_t save = lx->at;
    n = next_token(lx, &t);
    if (n == 0) return -EBADMSG;
    if (token_is(t, n, ",") || token_is(t, n, ")")) {
      lx->at = save;
      break;
    }
    if (token_is(t, n, ".align")) {
      n = next_token(lx, &t);
      align = parse_number(t, n, &ok);
      if (!ok || align == 0 || (align & (align - 1)) || align > 4096) return -EBADMSG;
    } else if (token_is(t, n, ".ptr")) {
      is_ptr = true;
    } else if (t[0] == '.' && type_size(t, n, &is_float)) {
      elem = type_size(t, n, &is_float);
    } else if (t[0] == '.') {
      continue; /* state space of a .ptr, or another attribute we do not need */
    } else if (token_is(t, n, "[")) {
      n = next_token(lx, &t);
      count = parse_number(t, n, &ok);
      if (!ok || count == 0) return -EBADMSG;
      n = next_token(lx, &t);
      if (!token_is(t, n, "]")) return -EBADMSG;
    } else {
      named = true;
    }
  }
  if (!elem || !named || (uint64_t)elem * count > KPARAM_MAX_PARAM_BYTES) return -EBADMSG;
  if (!align) align = elem;
  uint32_t offset = (*cursor + align - 1) & ~(align - 1);
  out->offset = offset;
  out->size = elem * count;
  /* Like .nv.info, PTX types say nothing reliable about C++ types (a struct of one double is
   * an .f64, a pointer a .u64): only an explicit .ptr is taken as a kind. */
  out->kind = is_ptr ? KPARAM_KIND_POINTER : KPARAM_KIND_UNKNOWN;
  *cursor = offset + out->size;
  return *cursor > KPARAM_MAX_PARAM_BYTES ? -EBADMSG : 0;
}

static int parse_entry(struct lexer *lx, struct kparam_layout *layout) {
  const char *t;
  size_t n = next_token(lx, &t);
  if (n == 0 || !ident_char(t[0]) || t[0] == '.') return -EBADMSG;
  memset(layout, 0, sizeof *layout);
  layout->name = strndup(t, n);
  if (!layout->name) return -ENOMEM;
  size_t save = lx->at;
  n = next_token(lx, &t);
  if (!token_is(t, n, "(")) {
    lx->at = save; /* an entry without a parameter list */
    return 0;
  }
  size_t capacity = 0;
  uint32_t cursor = 0;
  for (;;) {
    n = next_token(lx, &t);
    if (token_is(t, n, ")")) break;
    if (layout->count && token_is(t, n, ",")) n = next_token(lx, &t);
    if (!token_is(t, n, ".param") || layout->count >= KPARAM_MAX_PARAMS) goto bad;
    if (layout->count == capacity) {
      capacity = capacity ? capacity * 2 : 8;
      struct kparam_param *grown = realloc(layout->params, capacity * sizeof *grown);
      if (!grown) {
        layout_free(layout);
        return -ENOMEM;
      }
      layout->params = grown;
    }
    struct kparam_param *p = &layout->params[layout->count];
    p->ordinal = layout->count;
    if (parse_param(lx, &cursor, p)) goto bad;
    layout->count++;
  }
  layout->param_bytes = cursor;
  return 0;
bad:
  layout_free(layout);
  return -EBADMSG;
}

bool ptx_is_text(const void *p, size_t size) {
  const char *s = p;
  /* nvcc's PTX starts with a comment banner or a directive. */
  return p && size >= 2 && ((s[0] == '/' && s[1] == '/') || s[0] == '.' || s[0] == '\n');
}

int ptx_parse(const char *text, size_t size, struct kparam_layout_list *out, size_t *error_offset) {
  struct lexer lx = {text, size, 0};
  *error_offset = 0;
  const char *t;
  size_t n;
  while ((n = next_token(&lx, &t)) != 0) {
    if (t[0] == '\0') break; /* PTX in a fatbin is NUL-terminated and padded */
    if (!token_is(t, n, ".entry")) continue;
    size_t at = (size_t)(t - text);
    struct kparam_layout layout;
    int rc = parse_entry(&lx, &layout);
    if (rc == 0) {
      rc = layout_list_push(out, &layout);
      if (rc) layout_free(&layout);
    }
    if (rc) {
      *error_offset = at;
      return rc;
    }
  }
  return 0;
}
