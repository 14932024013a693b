/* Sizes as users write them (CUDAW_MEM_LIMIT, CUDAW_VA_SIZE and the checkpoint's sizes): one
 * grammar for every option, so that "1.5G" means the same wherever a size is asked for. A file of
 * its own because tools that link no other part of vmem (cudaw-ctl, cudawd) use it too. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vmem.h"

static int suffix_shift(const char *suffix, unsigned *shift) {
  static const char units[] = "KMGT";
  if (*suffix == '\0') {
    *shift = 0;
    return 0;
  }
  char u = *suffix >= 'a' && *suffix <= 'z' ? (char)(*suffix - 'a' + 'A') : *suffix;
  const char *at = u ? strchr(units, u) : NULL;
  if (u == 'B' && suffix[1] == '\0') {
    *shift = 0;
    return 0;
  }
  if (!at) return -EINVAL;
  *shift = 10u * (unsigned)(at - units + 1);
  suffix++;
  if (*suffix == 'i') suffix++;
  if (*suffix == 'B' || *suffix == 'b') suffix++;
  return *suffix == '\0' ? 0 : -EINVAL;
}

int vmem_parse_size(const char *text, uint64_t device_total, uint64_t *out) {
  if (!text || !out) return -EINVAL;
  while (*text == ' ') text++;
  size_t digits = strspn(text, "0123456789."); /* no signs, hex, exponents, nan or inf */
  char *end;
  double value = digits ? strtod(text, &end) : 0;
  if (digits == 0 || end != text + digits || !isfinite(value) || value <= 0) return -EINVAL;
  while (*end == ' ') end++;
  double bytes;
  if (*end == '%') {
    if (end[1] != '\0' || value > 100 || device_total == 0) return -EINVAL;
    bytes = (double)device_total * value / 100.0;
  } else {
    unsigned shift;
    if (suffix_shift(end, &shift)) return -EINVAL;
    bytes = ldexp(value, (int)shift);
  }
  if (bytes < 1 || bytes >= 18446744073709551616.0) return -EINVAL;
  *out = (uint64_t)bytes;
  return 0;
}
