/* libelf's error state, replacing the elf_error.o that cmake/ThirdParty.cmake drops from libelf.a
 * (it uses local-exec TLS, which cannot go into a shared object). Same contract, our own code. */
#include "internal.h"

#include <stdio.h>

static _Thread_local int last_error;

/* libelf's internal error numbers; we only need to tell success from failure. */
KPARAM_HIDDEN void __libelf_seterrno(int value);
KPARAM_HIDDEN int elf_errno(void);
KPARAM_HIDDEN const char *elf_errmsg(int error);

void __libelf_seterrno(int value) { last_error = value; }

/* Returns the current error and clears it, as libelf documents. */
int elf_errno(void) {
  int value = last_error;
  last_error = 0;
  return value;
}

/* error 0: the current error or NULL if none; -1: the current error; otherwise that error. */
const char *elf_errmsg(int error) {
  static _Thread_local char buffer[48];
  int value = error;
  if (error == 0 || error == -1) {
    value = last_error;
    if (value == 0) return error == 0 ? NULL : "no error";
  }
  if (value == 0) return "no error";
  snprintf(buffer, sizeof buffer, "libelf error %d", value);
  return buffer;
}
