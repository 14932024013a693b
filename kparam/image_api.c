/* The public image API (kparam_image_*): a whole fatbin parsed eagerly into plans sorted by
 * name, for the cudaw-kparam tool and tests. The registry uses image.c lazily instead. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct kparam_image {
  struct image *image;
  struct kparam_plan **plans;
  size_t count;
};

struct name_list {
  const char **names;
  size_t count, capacity;
  bool failed;
};

static void collect(void *ctx, const char *name) {
  struct name_list *list = ctx;
  if (list->count == list->capacity) {
    size_t capacity = list->capacity ? list->capacity * 2 : 64;
    const char **grown = realloc(list->names, capacity * sizeof *grown);
    if (!grown) {
      list->failed = true;
      return;
    }
    list->names = grown;
    list->capacity = capacity;
  }
  list->names[list->count++] = name;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int kparam_image_parse(const void *data, size_t size, const char *label, int prefer_sm,
                       struct kparam_image **out) {
  if (!data || !out) return -EINVAL;
  *out = NULL;
  struct kparam_image *result = calloc(1, sizeof *result);
  if (!result) return -ENOMEM;
  int rc = image_open(data, size, label, &result->image);
  if (result->image) {
    int parse_rc = image_parse_all(result->image);
    if (rc == 0) rc = parse_rc;
  }
  struct name_list names = {0};
  if (result->image) image_each_name(result->image, collect, &names);
  if (names.failed) rc = -ENOMEM;
  if (names.count) qsort(names.names, names.count, sizeof names.names[0], by_name);
  result->plans = calloc(names.count ? names.count : 1, sizeof *result->plans);
  if (!result->plans) rc = -ENOMEM;
  for (size_t i = 0; result->plans && i < names.count; i++) {
    if (i && strcmp(names.names[i], names.names[i - 1]) == 0) continue;
    enum kparam_source source;
    int sm;
    const struct kparam_layout *layout =
        image_lookup(result->image, names.names[i], prefer_sm, &source, &sm);
    struct kparam_plan *plan = layout ? plan_build(layout, source, sm) : NULL;
    if (!plan) {
      rc = -ENOMEM;
      break;
    }
    result->plans[result->count++] = plan;
  }
  free(names.names);
  if (rc == -ENOMEM) {
    kparam_image_free(result);
    return rc;
  }
  *out = result;
  return rc;
}

size_t kparam_image_kernel_count(const struct kparam_image *image) {
  return image ? image->count : 0;
}

const struct kparam_plan *kparam_image_kernel(const struct kparam_image *image, size_t i) {
  return image && i < image->count ? image->plans[i] : NULL;
}

const struct kparam_plan *kparam_image_find(const struct kparam_image *image, const char *name) {
  size_t lo = 0, hi = image && name ? image->count : 0;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int cmp = strcmp(image->plans[mid]->name, name);
    if (cmp == 0) return image->plans[mid];
    if (cmp < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

void kparam_image_stats(const struct kparam_image *image, size_t *entries, size_t *cubins,
                        size_t *ptx) {
  if (image && image->image) {
    image_counts(image->image, entries, cubins, ptx);
    return;
  }
  if (entries) *entries = 0;
  if (cubins) *cubins = 0;
  if (ptx) *ptx = 0;
}

void kparam_image_free(struct kparam_image *image) {
  if (!image) return;
  for (size_t i = 0; i < image->count; i++) plan_free(image->plans[i]);
  free(image->plans);
  image_close(image->image);
  free(image);
}
