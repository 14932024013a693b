/* Where control sockets live (<run dir>/<pid>.sock, beside <pid>.state: what the process last
 * said of itself), creating that directory safely, and removing the files of processes that are
 * gone. Used by the library and by cudaw-ctl. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

int ckpt_default_run_dir(char *buf, size_t len) {
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  int n;
  if (xdg && xdg[0] == '/') n = snprintf(buf, len, "%s/cudaw", xdg);
  else if (geteuid() == 0) n = snprintf(buf, len, "/run/cudaw");
  else n = snprintf(buf, len, "/tmp/cudaw-%u", (unsigned)geteuid());
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int ckpt_socket_path(const char *dir, pid_t pid, char *buf, size_t len) {
  struct sockaddr_un addr;
  if (len > sizeof addr.sun_path) len = sizeof addr.sun_path;
  int n = snprintf(buf, len, "%s/%ld.sock", dir, (long)pid);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int ckpt_run_dir_prepare(const char *dir, char *reason, size_t reason_len) {
  struct stat st;
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    int err = errno;
    snprintf(reason, reason_len, "cannot create run dir %s: %s", dir, strerror(err));
    return -err;
  }
  if (lstat(dir, &st) != 0) {
    int err = errno;
    snprintf(reason, reason_len, "run dir %s: %s", dir, strerror(err));
    return -err;
  }
  if (S_ISLNK(st.st_mode)) { /* planted by someone, perhaps: never followed */
    snprintf(reason, reason_len, "run dir %s is a symbolic link; not followed (name the "
             "directory itself)", dir);
    return -ELOOP;
  }
  if (!S_ISDIR(st.st_mode)) {
    snprintf(reason, reason_len, "run dir %s is not a directory", dir);
    return -ENOTDIR;
  }
  /* Someone else's directory could hold a socket that impersonates ours. */
  if (st.st_uid != geteuid()) {
    snprintf(reason, reason_len, "run dir %s belongs to uid %u, not to us (uid %u)", dir,
             (unsigned)st.st_uid, (unsigned)geteuid());
    return -EPERM;
  }
  /* Others could plant or replace <pid>.sock names in a directory they may write to. It is not
   * ours to chmod (it may be /tmp-like on purpose): refuse. */
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(reason, reason_len, "run dir %s is writable by %s (mode %03o); use a directory only "
             "its owner can write to", dir, st.st_mode & S_IWOTH ? "everyone" : "its group",
             (unsigned)(st.st_mode & 07777));
    return -EPERM;
  }
  return 0;
}

int ckpt_pid_alive(pid_t pid) {
  if (pid <= 0) return 0;
  return kill(pid, 0) == 0 || errno != ESRCH;
}

int ckpt_state_path(const char *socket_path, char *buf, size_t len) {
  size_t n = strlen(socket_path);
  if (n < 5 || strcmp(socket_path + n - 5, ".sock") != 0) return -EINVAL;
  int written = snprintf(buf, len, "%.*s.state", (int)(n - 5), socket_path);
  return written < 0 || (size_t)written >= len ? -ENAMETOOLONG : 0;
}

/* The pid of "<pid><suffix>", 0 if the name is not one. */
static pid_t name_pid(const char *name, const char *suffix) {
  char *end;
  errno = 0;
  long pid = strtol(name, &end, 10);
  if (errno || end == name || pid <= 0 || strcmp(end, suffix) != 0) return 0;
  return (pid_t)pid;
}

pid_t ckpt_socket_name_pid(const char *name) { return name_pid(name, ".sock"); }

int ckpt_clean_stale(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int removed = 0;
  struct dirent *entry;
  while ((entry = readdir(d))) {
    pid_t state_pid = name_pid(entry->d_name, ".state");
    if (state_pid && !ckpt_pid_alive(state_pid)) { /* last-known file of a gone process */
      char path[PATH_MAX];
      struct stat st;
      if (snprintf(path, sizeof path, "%s/%s", dir, entry->d_name) < (int)sizeof path &&
          lstat(path, &st) == 0 && S_ISREG(st.st_mode))
        unlink(path);
      continue;
    }
    pid_t pid = ckpt_socket_name_pid(entry->d_name);
    if (!pid || ckpt_pid_alive(pid)) continue;
    char path[sizeof ((struct sockaddr_un *)0)->sun_path];
    if (ckpt_socket_path(dir, pid, path, sizeof path) != 0) continue;
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && unlink(path) == 0) removed++;
  }
  closedir(d);
  return removed;
}
