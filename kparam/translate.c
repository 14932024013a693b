/* Translation of launch arguments through a plan: the caller's storage is never written; a
 * parameter with a replaced word is copied to scratch and passed from there. */
#include "internal.h"

#include <errno.h>
#include <string.h>

int kparam_translate_args(const struct kparam_plan *plan, void **args_in, void **args_out,
                          void *scratch, size_t scratch_size, kparam_translate_fn fn, void *ctx) {
  return kparam_translate_args_inline(plan, args_in, args_out, scratch, scratch_size, fn, ctx);
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
