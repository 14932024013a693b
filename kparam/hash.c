/* A small open-addressing hash map (64-bit keys, pointer values) for the registry's per-launch
 * lookups. Key 0 marks an empty slot; deletion uses backward shifting, so no tombstones. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static size_t slot_of(const struct hash_map *map, uint64_t key) {
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  return (size_t)(h ^ (h >> 29)) & (map->capacity - 1);
}

void *hash_get(const struct hash_map *map, uint64_t key) {
  if (!map->capacity || !key) return NULL;
  for (size_t i = slot_of(map, key);; i = (i + 1) & (map->capacity - 1)) {
    if (map->keys[i] == key) return map->values[i];
    if (map->keys[i] == 0) return NULL;
  }
}

static int grow(struct hash_map *map) {
  size_t capacity = map->capacity ? map->capacity * 2 : 64;
  struct hash_map bigger = {calloc(capacity, sizeof(uint64_t)), calloc(capacity, sizeof(void *)),
                            capacity, 0};
  if (!bigger.keys || !bigger.values) {
    hash_free(&bigger);
    return -ENOMEM;
  }
  for (size_t i = 0; i < map->capacity; i++)
    if (map->keys[i]) hash_put(&bigger, map->keys[i], map->values[i]);
  hash_free(map);
  *map = bigger;
  return 0;
}

int hash_put(struct hash_map *map, uint64_t key, void *value) {
  if (!key) return -EINVAL;
  if ((map->count + 1) * 4 > map->capacity * 3) {
    int rc = grow(map);
    if (rc) return rc;
  }
  for (size_t i = slot_of(map, key);; i = (i + 1) & (map->capacity - 1)) {
    if (map->keys[i] == key || map->keys[i] == 0) {
      if (map->keys[i] == 0) map->count++;
      map->keys[i] = key;
      map->values[i] = value;
      return 0;
    }
  }
}

void *hash_remove(struct hash_map *map, uint64_t key) {
  if (!map->capacity || !key) return NULL;
  size_t mask = map->capacity - 1, i = slot_of(map, key);
  while (map->keys[i] != key) {
    if (map->keys[i] == 0) return NULL;
    i = (i + 1) & mask;
  }
  void *value = map->values[i];
  /* Shift later members of the probe run back into the hole. */
  for (size_t j = (i + 1) & mask; map->keys[j]; j = (j + 1) & mask) {
    size_t home = slot_of(map, map->keys[j]);
    if (((j - home) & mask) >= ((j - i) & mask)) {
      map->keys[i] = map->keys[j];
      map->values[i] = map->values[j];
      i = j;
    }
  }
  map->keys[i] = 0;
  map->values[i] = NULL;
  map->count--;
  return value;
}

void hash_free(struct hash_map *map) {
  free(map->keys);
  free(map->values);
  map->keys = NULL;
  map->values = NULL;
  map->capacity = map->count = 0;
}

uint64_t hash_string(const char *s) {
  uint64_t h = XXH64(s, strlen(s), 0);
  return h ? h : 1;
}
