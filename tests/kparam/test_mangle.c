/* Description: kparam_demangle_kinds decodes pointers, references, cv-qualifiers, builtins,
 * classes, templates, substitutions (S_, S0_), nested names and template parameters into
 * parameter kinds, and rejects extern "C" names and garbage without crashing. */
#include <string.h>

#include "kparam.h"
#include "../common/test.h"

static void expect(const char *name, const char *kinds) {
  enum kparam_kind got[32];
  int n = kparam_demangle_kinds(name, got, 32);
  if (n != (int)strlen(kinds)) test_fail("%s: %d params, expected %zu", name, n, strlen(kinds));
  for (int i = 0; i < n; i++) {
    char c = got[i] == KPARAM_KIND_POINTER ? 'P'
             : got[i] == KPARAM_KIND_SCALAR  ? 'S'
             : got[i] == KPARAM_KIND_AGGREGATE ? 'A'
                                               : 'U';
    if (c != kinds[i]) test_fail("%s: param %d is %s, expected %c", name, i,
                                 kparam_kind_name(got[i]), kinds[i]);
  }
}

int main(void) {
  expect("_Z4axpyfPKfPfi", "SPPS");
  expect("_Z8noparamsv", "");
  expect("_Z7scalarscsixfd", "SSSSSS");
  expect("_Z5subst2S1S_PfS0_PKfS2_", "AAPPPP");
  expect("_ZN2ns6nestedEPf2S1", "PA");
  expect("_Z4fillIfEvPT_S0_i", "PSS");
  expect("_Z5applyI10AddFunctorEvT_Pfi", "APS");
  expect("_Z1fRKiOS_", "PP");                       /* references */
  expect("_Z1fPVKd", "P");                           /* cv-qualified pointee */
  expect("_ZN3foo3barIiEEvNS_3bazIfEEPS2_", "AP");   /* nested templates */
  expect("_Z1fSt6vectorIiSaIiEE", "A");              /* std abbreviations */
  expect("_Z1fPFviEPi", "PP");                       /* function pointer */
  expect("_Z1fDv4_fDhDF16_", "ASS");                  /* vector, half */
  expect("_Z1fM1AFviEi", "SS");                      /* member pointer */
  expect("_Z1fN1a1bE", "A");
  expect("_ZL6staticPi", "P");
  enum kparam_kind k[4];
  CHECK(kparam_demangle_kinds("_Z1fIJifEEvDpT_", k, 4) < 0, "pack expansions are not decoded");
  CHECK(kparam_demangle_kinds("c_kernel", k, 4) < 0, "extern C is not decodable");
  CHECK(kparam_demangle_kinds("_Z", k, 4) < 0, "truncated");
  CHECK(kparam_demangle_kinds("_Z1", k, 4) < 0, "truncated name");
  CHECK(kparam_demangle_kinds("_Z99999999999x", k, 4) < 0, "huge length");
  CHECK(kparam_demangle_kinds("_Z1fS9_", k, 4) < 0, "bad substitution");
  char deep[4096] = "_Z1f";
  for (int i = 4; i < 4000; i++) deep[i] = 'P';
  deep[4000] = 'i';
  CHECK(kparam_demangle_kinds(deep, k, 4) < 0, "depth limit");
  printf("ok\n");
  return 0;
}
