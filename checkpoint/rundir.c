/* Where control sockets live (<run dir>/<pid>.sock, beside <pid>.state: what the process last
 * said of itself), creating that directory safely, and removing the files of processes that are
 * gone. Used by the library and by cudaw-ctl. */
#define _GNU_SOURCE /* struct ucred */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

/* ---- programs in containers (pid namespaces below ours) ---- */

static int pid_namespace_inode(const char *proc_pid, unsigned long *inode) {
  char path[64];
  struct stat st;
  snprintf(path, sizeof path, "%s/ns/pid", proc_pid);
  if (stat(path, &st) != 0) return -errno;
  *inode = (unsigned long)st.st_ino;
  return 0;
}

/* text with "%n" as inode, "%u" as uid and "%%" as "%". */
static int expand(const char *text, unsigned long inode, uid_t uid, char *out, size_t len) {
  size_t used = 0;
  for (const char *p = text; *p; p++) {
    char piece[24] = {p[0], 0};
    if (p[0] == '%' && p[1] == '%') p++;
    else if (p[0] == '%' && p[1] == 'n') snprintf(piece, sizeof piece, "%lu", inode), p++;
    else if (p[0] == '%' && p[1] == 'u') snprintf(piece, sizeof piece, "%u", (unsigned)uid), p++;
    size_t n = strlen(piece);
    if (used + n >= len) return -ENAMETOOLONG;
    memcpy(out + used, piece, n + 1);
    used += n;
  }
  if (!used && len) out[0] = '\0';
  return 0;
}

int ckpt_run_dir_expand(const char *text, char *out, size_t len) {
  unsigned long inode = 0;
  if (strstr(text, "%n")) {
    int rc = pid_namespace_inode("/proc/self", &inode);
    if (rc) return rc;
  }
  return expand(text, inode, geteuid(), out, len);
}

/* The last NSpid field: the pid in the process's own namespace (the first is ours). */
static pid_t inner_pid(pid_t pid, bool *nested) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
  FILE *f = fopen(path, "r");
  pid_t inner = 0;
  *nested = false;
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "NSpid:", 6) == 0) {
      char *p = line + 6, *end;
      int fields = 0;
      for (long v; (v = strtol(p, &end, 10)), end != p; p = end, fields++) inner = (pid_t)v;
      *nested = fields > 1;
      break;
    }
  fclose(f);
  return inner;
}

/* A process's CUDAW_RUN_DIR as it expands it, from its initial environment ("" if unset). */
static void run_dir_of(pid_t pid, unsigned long inode, uid_t uid, char *out, size_t len) {
  char path[64], env[65536];
  snprintf(path, sizeof path, "/proc/%ld/environ", (long)pid);
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t n = fread(env, 1, sizeof env - 1, f);
  fclose(f);
  env[n] = '\0';
  for (size_t at = 0; at < n; at += strlen(env + at) + 1) {
    const char *var = env + at;
    if (strncmp(var, "CUDAW_RUN_DIR=", 14) != 0 || var[14] != '/') continue;
    if (expand(var + 14, inode, uid, out, len) != 0) out[0] = '\0';
  }
}

/* The process's effective uid as it knows it: its host uid (status) mapped back through its
 * user namespace's uid_map ("inside outside count" lines, outside as we see it). */
static uid_t inner_uid(pid_t pid) {
  char path[64], line[256];
  unsigned long host = 0, inside, outside, count;
  snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
  FILE *f = fopen(path, "r");
  if (!f) return (uid_t)-1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Uid: %*u %lu", &host) == 1) break;
  fclose(f);
  snprintf(path, sizeof path, "/proc/%ld/uid_map", (long)pid);
  if (!(f = fopen(path, "r"))) return (uid_t)host;
  uid_t mapped = (uid_t)-1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%lu %lu %lu", &inside, &outside, &count) == 3 && host >= outside &&
        host - outside < count)
      mapped = (uid_t)(inside + (host - outside));
  fclose(f);
  return mapped;
}

static bool served_by(const char *path, pid_t pid) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct ucred peer = {0};
  socklen_t peer_len = sizeof peer;
  bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
            getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) == 0 && peer.pid == pid;
  if (fd >= 0) close(fd);
  return ok;
}

int ckpt_namespaced_socket(pid_t pid, char *path, size_t len) {
  bool nested;
  pid_t inner = inner_pid(pid, &nested);
  if (!inner || !nested) return -ENOENT;
  char proc[32], dir[160];
  unsigned long inode = 0;
  snprintf(proc, sizeof proc, "/proc/%ld", (long)pid);
  int rc = pid_namespace_inode(proc, &inode);
  if (rc) return rc == -EPERM ? -EACCES : rc;
  run_dir_of(pid, inode, inner_uid(pid), dir, sizeof dir);
  if (!dir[0]) snprintf(dir, sizeof dir, "/run/cudaw"); /* root's default, inside the container */
  /* Through the process's own root: the container's files as it sees them, whatever was
   * mounted from where. */
  int n = snprintf(path, len, "/proc/%ld/root%s/%ld.sock", (long)pid, dir, (long)inner);
  if (n < 0 || (size_t)n >= len) return -ENAMETOOLONG;
  struct stat st;
  if (stat(path, &st) != 0) return errno == EACCES || errno == EPERM ? -EACCES : -ENOENT;
  if (!S_ISSOCK(st.st_mode)) return -ENOENT;
  return served_by(path, pid) ? 0 : -ESRCH;
}

size_t ckpt_container_pids(const char *dir, pid_t *pids, size_t max) {
  DIR *top = opendir(dir);
  if (!top) return 0;
  size_t count = 0;
  struct dirent *entry;
  while ((entry = readdir(top)) && count < max) {
    if (entry->d_name[0] == '.') continue;
    char sub[sizeof ((struct sockaddr_un *)0)->sun_path];
    if (snprintf(sub, sizeof sub, "%s/%s", dir, entry->d_name) >= (int)sizeof sub) continue;
    DIR *d = opendir(sub);
    if (!d) continue;
    struct dirent *sock;
    while ((sock = readdir(d)) && count < max) {
      if (!ckpt_socket_name_pid(sock->d_name)) continue;
      struct sockaddr_un addr = {.sun_family = AF_UNIX};
      if (snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%s", sub, sock->d_name) >=
          (int)sizeof addr.sun_path)
        continue;
      int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      struct ucred peer = {0};
      socklen_t peer_len = sizeof peer;
      if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
          getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) == 0 && peer.pid > 0)
        pids[count++] = peer.pid; /* the server's pid as our namespace knows it: the host pid */
      if (fd >= 0) close(fd);
    }
    closedir(d);
  }
  closedir(top);
  return count;
}
