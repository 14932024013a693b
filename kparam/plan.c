/* Layouts and plans: a plan is a layout with parameter kinds and the precomputed list of 8-byte
 * words that may hold device pointers, so that a launch only walks that list. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void layout_free(struct kparam_layout *layout) {
  free(layout->name);
  free(layout->params);
  memset(layout, 0, sizeof *layout);
}

int layout_list_push(struct kparam_layout_list *list, struct kparam_layout *layout) {
  if (list->count == list->capacity) {
    size_t capacity = list->capacity ? list->capacity * 2 : 16;
    struct kparam_layout *grown = realloc(list->items, capacity * sizeof *grown);
    if (!grown) return -ENOMEM;
    list->items = grown;
    list->capacity = capacity;
  }
  list->items[list->count++] = *layout;
  return 0;
}

void layout_list_free(struct kparam_layout_list *list) {
  for (size_t i = 0; i < list->count; i++) layout_free(&list->items[i]);
  free(list->items);
  memset(list, 0, sizeof *list);
}

/* Words of a parameter at an 8-aligned position in the packed buffer; calls add() for each. */
static uint32_t count_words(const struct kparam_param *p) {
  if (p->kind == KPARAM_KIND_SCALAR || p->size < 8) return 0;
  uint32_t first = (8 - p->offset % 8) % 8;
  return first + 8 > p->size ? 0 : (p->size - first) / 8;
}

/* A plan in one allocation: the struct, then params, words and the name. */
static struct kparam_plan *plan_alloc(const char *name, uint32_t params, uint32_t words) {
  size_t name_len = strlen(name ? name : "") + 1;
  size_t bytes = sizeof(struct kparam_plan) + params * sizeof(struct kparam_param) +
                 words * sizeof(struct kparam_word) + name_len;
  struct kparam_plan *plan = calloc(1, bytes);
  if (!plan) return NULL;
  struct kparam_param *param_array = (struct kparam_param *)(plan + 1);
  struct kparam_word *word_array = (struct kparam_word *)(param_array + params);
  char *name_copy = (char *)(word_array + words);
  memcpy(name_copy, name ? name : "", name_len);
  plan->name = name_copy;
  plan->params = param_array;
  plan->words = word_array;
  plan->param_count = params;
  plan->word_count = words;
  return plan;
}

struct kparam_plan *plan_opaque(const char *name) {
  return plan_alloc(name, 0, 0); /* calloc: source OPAQUE, nothing to translate */
}

struct kparam_plan *plan_build(const struct kparam_layout *layout, enum kparam_source source,
                               int sm_arch) {
  uint32_t count = layout->count;
  enum kparam_kind stack_kinds[64], *kinds = stack_kinds;
  if (count > 64 && !(kinds = malloc(count * sizeof *kinds))) return NULL;
  int decoded = kparam_demangle_kinds(layout->name, kinds, count);
  bool use_decoded = decoded >= 0 && (uint32_t)decoded == count;

  struct kparam_param tmp_param;
  uint32_t words = 0;
  for (uint32_t i = 0; i < count; i++) {
    tmp_param = layout->params[i];
    if (use_decoded) tmp_param.kind = kinds[i];
    if (tmp_param.kind == KPARAM_KIND_POINTER && tmp_param.size != 8)
      tmp_param.kind = KPARAM_KIND_UNKNOWN; /* not what the name says: be conservative */
    words += count_words(&tmp_param);
  }
  struct kparam_plan *plan = plan_alloc(layout->name, count, words);
  if (!plan) {
    if (kinds != stack_kinds) free(kinds);
    return NULL;
  }
  struct kparam_param *params = (struct kparam_param *)plan->params;
  struct kparam_word *word_array = (struct kparam_word *)plan->words;
  uint32_t w = 0;
  size_t scratch = 0;
  for (uint32_t i = 0; i < count; i++) {
    params[i] = layout->params[i];
    if (use_decoded) params[i].kind = kinds[i];
    if (params[i].kind == KPARAM_KIND_POINTER && params[i].size != 8)
      params[i].kind = KPARAM_KIND_UNKNOWN;
    uint32_t n = count_words(&params[i]);
    uint32_t first = (8 - params[i].offset % 8) % 8;
    for (uint32_t k = 0; k < n; k++) word_array[w++] = (struct kparam_word){i, first + 8 * k};
    if (n) scratch += (params[i].size + 7u) & ~7u;
  }
  if (kinds != stack_kinds) free(kinds);
  plan->source = source;
  plan->sm_arch = sm_arch;
  plan->param_bytes = layout->param_bytes;
  plan->scratch_bytes = scratch;
  plan->needs_translation = words > 0;
  return plan;
}

void plan_free(struct kparam_plan *plan) { free(plan); }

const char *kparam_kind_name(enum kparam_kind kind) {
  switch (kind) {
  case KPARAM_KIND_POINTER: return "pointer";
  case KPARAM_KIND_SCALAR: return "scalar";
  case KPARAM_KIND_AGGREGATE: return "aggregate";
  default: return "unknown";
  }
}

const char *kparam_source_name(enum kparam_source source) {
  switch (source) {
  case KPARAM_SOURCE_CUBIN_EXACT: return "cubin-exact";
  case KPARAM_SOURCE_CUBIN_OTHER_ARCH: return "cubin-other-arch";
  case KPARAM_SOURCE_PTX: return "ptx";
  case KPARAM_SOURCE_HOST_STUB: return "host-stub";
  case KPARAM_SOURCE_DRIVER: return "driver";
  default: return "opaque";
  }
}
