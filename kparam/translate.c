/* Translation of launch arguments through a plan: the caller's storage is never written; a
 * parameter with a replaced word is copied to scratch and passed from there. */
#include "internal.h"

#include <errno.h>
#include <string.h>

int kparam_translate_args(const struct kparam_plan *plan, void **args_in, void **args_out,
                          void *scratch, size_t scratch_size, kparam_translate_fn fn, void *ctx) {
  if (!plan || !fn || (plan->param_count && (!args_in || !args_out))) return -EINVAL;
  if (plan->source == KPARAM_SOURCE_OPAQUE) return -ENOTSUP;
  for (uint32_t i = 0; i < plan->param_count; i++) args_out[i] = args_in[i];
  int replaced = 0;
  size_t used = 0;
  uint32_t copied_param = UINT32_MAX; /* the param whose copy is at the end of scratch */
  for (uint32_t w = 0; w < plan->word_count; w++) {
    const struct kparam_word *word = &plan->words[w];
    const struct kparam_param *param = &plan->params[word->param];
    const unsigned char *source = args_out[word->param];
    if (!source) return -EINVAL;
    uint64_t value;
    memcpy(&value, source + word->offset_in_param, sizeof value);
    int rc = fn(ctx, &value);
    if (rc < 0) return rc;
    if (rc == 0) continue;
    if (copied_param != word->param) { /* words come grouped by param, in order */
      size_t bytes = (param->size + 7u) & ~(size_t)7u;
      if (!scratch || scratch_size - used < bytes || used > scratch_size) return -ENOSPC;
      unsigned char *copy = (unsigned char *)scratch + used;
      memcpy(copy, args_in[word->param], param->size);
      args_out[word->param] = copy;
      used += bytes;
      copied_param = word->param;
    }
    memcpy((unsigned char *)args_out[word->param] + word->offset_in_param, &value, sizeof value);
    replaced++;
  }
  return replaced;
}

int kparam_translate_buffer(const struct kparam_plan *plan, void *packed_params, size_t size,
                            kparam_translate_fn fn, void *ctx) {
  if (!plan || !fn || (size && !packed_params)) return -EINVAL;
  if (plan->source == KPARAM_SOURCE_OPAQUE) return -ENOTSUP;
  if (size < plan->param_bytes) return -EINVAL;
  int replaced = 0;
  for (uint32_t w = 0; w < plan->word_count; w++) {
    const struct kparam_word *word = &plan->words[w];
    size_t at = (size_t)plan->params[word->param].offset + word->offset_in_param;
    if (at + 8 > size) return -EINVAL;
    uint64_t value;
    memcpy(&value, (unsigned char *)packed_params + at, sizeof value);
    int rc = fn(ctx, &value);
    if (rc < 0) return rc;
    if (rc == 0) continue;
    memcpy((unsigned char *)packed_params + at, &value, sizeof value);
    replaced++;
  }
  return replaced;
}
