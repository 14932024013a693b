/* spank_cudaw: a Slurm SPANK plugin that runs a job's tasks under cudaw, as `cudaw run` does
 * (LD_PRELOAD and LD_LIBRARY_PATH to cudaw's libcudart, CUDAW_* in the environment), gives a job
 * with shards of a GPU the matching share of its memory, and makes a suspended job release its
 * device memory (CUDAW_SUSPEND=release). Jobs that ask for nothing are left untouched.
 * Configuration (plugstack.conf arguments) and options: docs/slurm.md. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/slurm.h> /* SLURM_BATCH_SCRIPT */
#include <slurm/spank.h>

#include "gres_shards.h"
#include "node_gpus.h"
#include "size.h" /* the library's own parser of CUDAW_MEM_LIMIT */

SPANK_PLUGIN(cudaw, 1);

#ifndef CUDAW_SPANK_LIBDIR
#define CUDAW_SPANK_LIBDIR "/usr/local/lib/cudaw"
#endif
#ifndef CUDAW_SPANK_BINDIR
#define CUDAW_SPANK_BINDIR "/usr/local/bin"
#endif
#ifndef CUDAW_SPANK_LIB_NAME
#define CUDAW_SPANK_LIB_NAME "libcudart.so.13"
#endif
/* The install layout, relative to the plugin's own folder (<libdir>/cudaw, beside the library):
 * where the programs are. CMake computes it from its install rules. */
#ifndef CUDAW_SPANK_BINDIR_FROM_PLUGIN
#define CUDAW_SPANK_BINDIR_FROM_PLUGIN "../../bin"
#endif

/* What one job asked for, merged from plugstack.conf's defaults and the job's options. */
struct request {
  bool enabled;           /* --cudaw (or implied by another option, a partition, shards) */
  bool share;             /* --cudaw-share */
  char mem[64];           /* --cudaw-mem, CUDAW_MEM_LIMIT */
  char vmem[16];          /* --cudaw-vmem, CUDAW_VMEM */
  bool suspend_release;   /* --cudaw-suspend=release (default) or keep */
  char checkpoint_dir[256]; /* --cudaw-checkpoint-dir: requeue with the job's state (see below) */
};

/* plugstack.conf arguments (the site's choices). */
static struct {
  char libdir[PATH_MAX];  /* libdir=; else the plugin's own folder, else CUDAW_SPANK_LIBDIR */
  char bindir[PATH_MAX];  /* bindir=; else from the plugin's folder, else CUDAW_SPANK_BINDIR */
  char partitions[512];   /* partitions=a,b or all: jobs there run under cudaw without --cudaw */
  bool shard_jobs;        /* shards=on: jobs with shards run under cudaw, limited to their share */
  unsigned shards_per_gpu; /* shards_per_gpu=M; 0: read gres.conf */
  char gres_conf[PATH_MAX];
  bool system_cudawd;     /* cudawd=system: sharing jobs of every user join the node's cudawd */
  char system_dir[96];     /* system_dir=: its socket's directory, root's, 0755 */
  char cudawd_host_memory[32]; /* cudawd_host_memory=: the pool of the cudawd it starts */
  char cudawd_quantum[16];  /* cudawd_quantum=: its turn length, seconds */
  char device_memory[32];   /* device_memory=: the GPUs' memory where NVML cannot tell */
  struct request defaults;
} site = {"", "", "", false, 0, "", false, "/run/cudaw", "", "", "", {false, false, "", "", true, ""}};

static struct request job;

enum option_id { OPT_CUDAW = 1, OPT_SHARE, OPT_MEM, OPT_VMEM, OPT_SUSPEND, OPT_CHECKPOINT_DIR };

/* A device of this size stands in for the unknown one when a percentage is checked at
 * submission: any positive value up to 100% passes, as it will on the node. */
#define NOMINAL_DEVICE_BYTES (1ull << 40)

/* "4G", "1.5GiB", "8192M", "123456", "25%": exactly what CUDAW_MEM_LIMIT takes (vmem_parse_size,
 * the library's own parser). Whether the size fits the GPU is known only on the node. */
static bool valid_size(const char *text) {
  uint64_t bytes;
  return vmem_parse_size(text, NOMINAL_DEVICE_BYTES, &bytes) == 0;
}

/* cudawd's --quantum: seconds, more than 0, at most a day (as cudawd checks it). */
static bool valid_seconds(const char *text) {
  char *end;
  double value = strtod(text, &end);
  return end != text && !*end && value > 0 && value <= 86400;
}

static bool valid_vmem(const char *text) {
  return !strcmp(text, "auto") || !strcmp(text, "remap") || !strcmp(text, "translate") ||
         !strcmp(text, "off");
}

static bool valid_suspend(const char *text) {
  return !strcmp(text, "release") || !strcmp(text, "keep");
}

static int option_seen(int val, const char *optarg, int remote) {
  (void)remote;
  job.enabled = true;
  switch (val) {
    case OPT_CUDAW:
      return 0;
    case OPT_SHARE:
      job.share = true;
      return 0;
    case OPT_MEM:
      if (!optarg || !valid_size(optarg) || strlen(optarg) >= sizeof job.mem) {
        slurm_error("cudaw: --cudaw-mem=%s: expected a size (4G, 1.5GiB, 8192M) or a "
                    "percentage (25%%)", optarg ? optarg : "");
        return -1;
      }
      snprintf(job.mem, sizeof job.mem, "%s", optarg);
      return 0;
    case OPT_VMEM:
      if (!optarg || !valid_vmem(optarg)) {
        slurm_error("cudaw: --cudaw-vmem=%s: expected auto, remap, translate or off",
                    optarg ? optarg : "");
        return -1;
      }
      snprintf(job.vmem, sizeof job.vmem, "%s", optarg);
      return 0;
    case OPT_SUSPEND:
      if (!optarg || !valid_suspend(optarg)) {
        slurm_error("cudaw: --cudaw-suspend=%s: expected release or keep", optarg ? optarg : "");
        return -1;
      }
      job.suspend_release = optarg[0] == 'r';
      return 0;
    case OPT_CHECKPOINT_DIR:
      if (!optarg || optarg[0] != '/' || strlen(optarg) >= sizeof job.checkpoint_dir) {
        slurm_error("cudaw: --cudaw-checkpoint-dir=%s: expected an absolute directory",
                    optarg ? optarg : "");
        return -1;
      }
      snprintf(job.checkpoint_dir, sizeof job.checkpoint_dir, "%s", optarg);
      return 0;
    default:
      return -1;
  }
}

static struct spank_option options[] = {
    {"cudaw", NULL, "run the job's CUDA programs under cudaw", 0, OPT_CUDAW, option_seen},
    {"cudaw-share", NULL, "under cudaw, sharing the node's GPUs through cudawd", 0, OPT_SHARE,
     option_seen},
    {"cudaw-mem", "SIZE|PERCENT", "under cudaw, with this much device memory per GPU (4G, 25%)",
     1, OPT_MEM, option_seen},
    {"cudaw-vmem", "POLICY", "under cudaw, with this virtual memory policy (auto, remap, "
     "translate, off)", 1, OPT_VMEM, option_seen},
    {"cudaw-suspend", "release|keep", "under cudaw: on suspend, release the device memory "
     "(default) or keep it", 1, OPT_SUSPEND, option_seen},
    {"cudaw-checkpoint-dir", "DIR", "under cudaw: on requeue, continue from the job's state in "
     "DIR (needs CRIU on the nodes; otherwise a plain requeue, logged)", 1, OPT_CHECKPOINT_DIR,
     option_seen},
    SPANK_OPTIONS_TABLE_END};

/* key=value arguments from plugstack.conf. */
static int parse_arguments(int ac, char **av) {
  for (int i = 0; i < ac; i++) {
    const char *arg = av[i], *value = strchr(arg, '=');
    if (!value) {
      slurm_error("cudaw: plugstack.conf argument '%s' is not key=value", arg);
      return -1;
    }
    size_t key_len = (size_t)(value - arg);
    value++;
#define KEY(name) (key_len == sizeof(name) - 1 && !strncmp(arg, name, key_len))
#define COPY(field)                                                                     \
  do {                                                                                  \
    if (strlen(value) >= sizeof(field)) goto bad;                                      \
    snprintf(field, sizeof(field), "%s", value);                                        \
  } while (0)
    if (KEY("libdir")) COPY(site.libdir);
    else if (KEY("bindir")) COPY(site.bindir);
    else if (KEY("partitions")) COPY(site.partitions);
    else if (KEY("gres_conf")) COPY(site.gres_conf);
    else if (KEY("cudawd")) {
      if (strcmp(value, "user") && strcmp(value, "system")) goto bad;
      site.system_cudawd = value[0] == 's';
    } else if (KEY("system_dir")) {
      if (value[0] != '/' || strlen(value) > 80) goto bad; /* <dir>/cudawd.sock must fit */
      COPY(site.system_dir);
    }
    else if (KEY("shards")) {
      if (strcmp(value, "on") && strcmp(value, "off")) goto bad;
      site.shard_jobs = value[1] == 'n';
    } else if (KEY("shards_per_gpu")) {
      char *end;
      unsigned long count = strtoul(value, &end, 10);
      if (*end || count == 0 || count > 100000) goto bad;
      site.shards_per_gpu = (unsigned)count;
    } else if (KEY("cudawd_host_memory")) {
      if (strcmp(value, "off") && !valid_size(value)) goto bad;
      COPY(site.cudawd_host_memory);
    } else if (KEY("cudawd_quantum")) {
      if (!valid_seconds(value)) goto bad;
      COPY(site.cudawd_quantum);
    } else if (KEY("device_memory")) {
      uint64_t bytes;
      if (vmem_parse_size(value, 0, &bytes) != 0) goto bad; /* bytes, not a percentage */
      COPY(site.device_memory);
    } else if (KEY("mem")) {
      if (!valid_size(value)) goto bad;
      COPY(site.defaults.mem);
    } else if (KEY("vmem")) {
      if (!valid_vmem(value)) goto bad;
      COPY(site.defaults.vmem);
    } else if (KEY("share")) {
      if (strcmp(value, "0") && strcmp(value, "1")) goto bad;
      site.defaults.share = value[0] == '1';
    } else if (KEY("suspend")) {
      if (!valid_suspend(value)) goto bad;
      site.defaults.suspend_release = value[0] == 'r';
    } else {
      goto bad;
    }
    continue;
  bad:
    slurm_error("cudaw: plugstack.conf argument '%s' is not valid (see docs/slurm.md)", arg);
    return -1;
#undef KEY
#undef COPY
  }
  return 0;
}

static bool file_exists(const char *dir, const char *name, int mode) {
  char path[PATH_MAX * 2];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, mode) == 0;
}

/* libdir and bindir where plugstack.conf does not name them: the plugin's own folder when the
 * library is there (the install puts both in <libdir>/cudaw; the build tree both in lib/), and
 * the programs where the install layout (or the build tree: ../bin) puts them from there; else
 * the folders chosen at configure time. */
static void locate_install(void) {
  Dl_info self;
  char here[PATH_MAX] = "";
  if (dladdr((void *)locate_install, &self) && self.dli_fname && realpath(self.dli_fname, here)) {
    char *slash = strrchr(here, '/');
    if (slash) *slash = '\0';
  }
  if (!site.libdir[0]) {
    if (here[0] && file_exists(here, CUDAW_SPANK_LIB_NAME, R_OK))
      snprintf(site.libdir, sizeof site.libdir, "%s", here);
    else
      snprintf(site.libdir, sizeof site.libdir, "%s", CUDAW_SPANK_LIBDIR);
  }
  if (!site.bindir[0]) {
    const char *relative[] = {CUDAW_SPANK_BINDIR_FROM_PLUGIN, "../bin"};
    for (size_t i = 0; here[0] && !site.bindir[0] && i < 2; i++) {
      char dir[PATH_MAX + 64];
      snprintf(dir, sizeof dir, "%s/%s", here, relative[i]);
      if (file_exists(dir, "cudawd", X_OK) && strlen(dir) < sizeof site.bindir)
        snprintf(site.bindir, sizeof site.bindir, "%s", dir);
    }
    if (!site.bindir[0]) snprintf(site.bindir, sizeof site.bindir, "%s", CUDAW_SPANK_BINDIR);
  }
}

int slurm_spank_init(spank_t sp, int ac, char **av) {
  site.libdir[0] = site.bindir[0] = '\0';
  if (parse_arguments(ac, av) != 0) return -1;
  locate_install();
  /* Arguments may change the defaults: the job starts from them, its options go on top. */
  job = site.defaults;
  spank_context_t context = spank_context();
  if (context != S_CTX_LOCAL && context != S_CTX_REMOTE && context != S_CTX_ALLOCATOR) return 0;
  for (struct spank_option *o = options; o->name; o++)
    if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
      slurm_error("cudaw: cannot register --%s", o->name);
      return -1;
    }
  return 0;
}

static bool job_env(spank_t sp, const char *name, char *buf, int len) {
  return spank_getenv(sp, name, buf, len) == ESPANK_SUCCESS && buf[0];
}

static bool in_list(const char *list, const char *item) {
  size_t n = strlen(item);
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && !strncmp(p, item, n)) return true;
    p += len;
    if (*p == ',') p++;
  }
  return false;
}

/* Prepend value to the task's variable, separated by ':'. */
static int prepend(spank_t sp, const char *name, const char *value) {
  char old[8192], joined[8192 + PATH_MAX + 2];
  if (job_env(sp, name, old, sizeof old)) {
    if (in_list(old, value) || !strncmp(old, value, strlen(value))) return 0; /* already first */
    snprintf(joined, sizeof joined, "%s:%s", value, old);
  } else {
    snprintf(joined, sizeof joined, "%s", value);
  }
  return spank_setenv(sp, name, joined, 1) == ESPANK_SUCCESS ? 0 : -1;
}

/* The gres.conf that slurmd reads: the plugstack argument, else next to slurm.conf. */
static void gres_conf_path(char *out, size_t len) {
  if (site.gres_conf[0]) {
    snprintf(out, len, "%s", site.gres_conf);
    return;
  }
  const char *conf = getenv("SLURM_CONF");
  if (conf && *conf && strrchr(conf, '/')) {
    snprintf(out, len, "%.*s/gres.conf", (int)(strrchr(conf, '/') - conf), conf);
    return;
  }
  snprintf(out, len, "/etc/slurm/gres.conf");
}

/* CUDAW_MEM_LIMIT for a job with SLURM_SHARDS_ON_NODE=N shards: N/M of the GPU as a percentage
 * (cudaw turns it into bytes of the device it runs on). 1: set, 0: not a shard job, -1: cannot. */
static int shard_limit(spank_t sp, char *limit, size_t len) {
  char text[32];
  if (!job_env(sp, "SLURM_SHARDS_ON_NODE", text, sizeof text)) return 0;
  char *end;
  unsigned long shards = strtoul(text, &end, 10);
  if (*end || shards == 0) return 0;
  unsigned per_gpu = site.shards_per_gpu;
  char path[PATH_MAX], why[256] = "";
  if (!per_gpu) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char *dot = strchr(host, '.');
    if (dot) *dot = '\0';
    gres_conf_path(path, sizeof path);
    if (gres_shards_per_gpu(path, host, &per_gpu, why, sizeof why) != 0) {
      slurm_error("cudaw: %lu shards but no limit: %s (or set shards_per_gpu= in "
                  "plugstack.conf)", shards, why);
      return -1;
    }
  }
  if (shards > per_gpu) shards = per_gpu;
  snprintf(limit, len, "%.6f%%", 100.0 * (double)shards / (double)per_gpu);
  slurm_debug("cudaw: %lu of %u shards: CUDAW_MEM_LIMIT=%s", shards, per_gpu, limit);
  return 1;
}

/* Is this job to run under cudaw: its options, its partition, or its shards (site choices). */
static bool wanted(spank_t sp) {
  if (job.enabled) return true;
  char text[256];
  if (site.partitions[0] && job_env(sp, "SLURM_JOB_PARTITION", text, sizeof text) &&
      (!strcmp(site.partitions, "all") || in_list(site.partitions, text)))
    return true;
  return site.shard_jobs && job_env(sp, "SLURM_SHARDS_ON_NODE", text, sizeof text);
}

/* The run dir both the tasks and cudawd use: the job's CUDAW_RUN_DIR, else /tmp/cudaw-<uid>
 * (slurmstepd's tasks have no XDG_RUNTIME_DIR of their own), or with the system cudawd
 * <system_dir>/<uid>, which the plugin made the user's (task_init_privileged). */
static void run_dir(spank_t sp, char *out, size_t len) {
  if (job_env(sp, "CUDAW_RUN_DIR", out, (int)len)) return;
  if (site.system_cudawd && job.share)
    snprintf(out, len, "%s/%u", site.system_dir, (unsigned)getuid());
  else
    snprintf(out, len, "/tmp/cudaw-%u", (unsigned)getuid());
  spank_setenv(sp, "CUDAW_RUN_DIR", out, 1);
}

static bool cudawd_answers(const char *path) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof addr.sun_path) return false;
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  bool answers = fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
  if (fd >= 0) close(fd);
  return answers;
}

/* --cudaw-share: start the user's cudawd on this node unless one answers (detached: it serves
 * the user's later jobs too; with proctrack/cgroup it ends with this job's step). With
 * cudawd=system, the node's cudawd (root, `cudawd --system`; its unit file is the better way).
 * Its environment is defined here, not inherited: slurmstepd's is slurmd's (whatever started
 * slurmd, with CUDAW_* of its own perhaps), and a job's must not reach a daemon that serves other
 * jobs (or, for the system one, runs as root). Its settings come from plugstack.conf. */
static void ensure_cudawd(const char *dir, bool system) {
  char sock[PATH_MAX + 16], log[PATH_MAX + 16], daemon[PATH_MAX + 16];
  snprintf(sock, sizeof sock, "%s/cudawd.sock", dir);
  snprintf(log, sizeof log, "%s/cudawd.log", dir);
  snprintf(daemon, sizeof daemon, "%s/cudawd", site.bindir);
  if (cudawd_answers(sock)) return;
  if (mkdir(dir, system ? 0755 : 0700) != 0 && errno != EEXIST) {
    slurm_error("cudaw: cannot create %s: %s", dir, strerror(errno));
    return;
  }
  if (system) slurm_info("cudaw: starting the node's cudawd (%s --system, log %s)", daemon, log);
  pid_t child = fork();
  if (child < 0) return;
  if (child == 0) {
    if (setsid() < 0 || fork() != 0) _exit(0);
    /* slurmstepd blocks signals in its threads and exec keeps the mask: without this, cudawd
     * would ignore SIGTERM for good. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int signal_number = 1; signal_number < NSIG; signal_number++)
      if (signal_number != SIGKILL && signal_number != SIGSTOP) signal(signal_number, SIG_DFL);
    int null_fd = open("/dev/null", O_RDONLY), log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (null_fd >= 0) dup2(null_fd, 0);
    if (log_fd >= 0) {
      dup2(log_fd, 1);
      dup2(log_fd, 2);
    }
    clearenv();
    setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
    setenv("LC_ALL", "C", 1);
    setenv("CUDAW_RUN_DIR", dir, 1);
    setenv("CUDAW_SCHED_SOCKET", sock, 1);
    const char *argv[8];
    int n = 0;
    argv[n++] = "cudawd";
    if (system) argv[n++] = "--system";
    if (site.cudawd_host_memory[0]) {
      argv[n++] = "--host-memory";
      argv[n++] = site.cudawd_host_memory;
    }
    if (site.cudawd_quantum[0]) {
      argv[n++] = "--quantum";
      argv[n++] = site.cudawd_quantum;
    }
    argv[n] = NULL;
    execv(daemon, (char *const *)argv);
    _exit(127);
  }
  waitpid(child, NULL, 0);
  for (int i = 0; i < 100 && !cudawd_answers(sock); i++) usleep(50000);
  if (!cudawd_answers(sock))
    slurm_error("cudaw: cudawd (%s) did not start, see %s; the job runs unshared", daemon, log);
}

/* <system_dir>/<uid>: the user's own run dir on a node with a system cudawd (its programs'
 * control sockets; the user's alone, and made by root in root's directory, so that no other user
 * can take the name first as in /tmp). 0 or -1 (logged). */
static int user_run_dir(uid_t uid, gid_t gid, char *out, size_t len) {
  snprintf(out, len, "%s/%u", site.system_dir, (unsigned)uid);
  if (mkdir(out, 0700) != 0 && errno != EEXIST) {
    slurm_error("cudaw: cannot create %s: %s", out, strerror(errno));
    return -1;
  }
  struct stat st;
  if (lstat(out, &st) != 0 || !S_ISDIR(st.st_mode) ||
      (st.st_uid != uid && (st.st_uid != 0 || chown(out, uid, gid) != 0)) ||
      ((st.st_mode & 0777) != 0700 && chmod(out, 0700) != 0)) {
    slurm_error("cudaw: %s is not a directory of uid %u that the plugin can make its own; the "
                "job's programs get no control socket", out, (unsigned)uid);
    return -1;
  }
  return 0;
}

static char requeue_note[1024]; /* set in slurmstepd, printed by the first task */

/* --cudaw-checkpoint-dir: a requeue that keeps the job's state needs `cudaw-ctl dump` (CRIU)
 * when Slurm requeues the job, and a restore where it starts again. This version does not do
 * that yet: the job is requeued as Slurm does it (it starts over), and the job's log says why,
 * with what `criu check` answers on this node (Debian 12's CRIU 3.17 does not start on 6.x
 * kernels). Once per step, in slurmstepd, as root (criu check needs it). */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av) {
  (void)ac;
  (void)av;
  if (!spank_remote(sp) || !job.checkpoint_dir[0]) return 0;
  char criu[PATH_MAX] = "criu", command[PATH_MAX + 32], line[256], first_error[256] = "";
  job_env(sp, "CUDAW_CRIU", criu, sizeof criu);
  if (strchr(criu, '\'') || strchr(criu, '\n')) snprintf(criu, sizeof criu, "criu");
  snprintf(command, sizeof command, "'%s' check 2>&1", criu);
  FILE *out = popen(command, "r");
  while (out && fgets(line, sizeof line, out))
    if (!first_error[0] && (strstr(line, "Error") || strstr(line, "not found")) &&
        !strstr(line, "exited, status")) { /* that one only says a helper of criu failed */
      line[strcspn(line, "\n")] = '\0';
      snprintf(first_error, sizeof first_error, "%s", line);
    }
  int status = out ? pclose(out) : -1;
  const char *why = status == 0  ? "criu check passes, but requeue with state is not in this "
                                   "version of the plugin yet"
                    : first_error[0] ? first_error
                                     : "criu is not installed or cannot run";
  snprintf(requeue_note, sizeof requeue_note, "cudaw: --cudaw-checkpoint-dir=%s: requeue with "
           "the job's state is not available (%s): if this job is requeued it starts over (a "
           "plain requeue)", job.checkpoint_dir, why);
  slurm_info("%s", requeue_note); /* slurmd's log; the job's own output gets it at task_init */
  return 0;
}

/* In the task, as root, before it becomes the user: the node's cudawd and the user's run dir
 * under it (cudawd=system). */
int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av) {
  (void)ac;
  (void)av;
  if (!spank_remote(sp) || !wanted(sp) || !job.share || !site.system_cudawd) return 0;
  uid_t uid;
  gid_t gid;
  char dir[PATH_MAX];
  if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS) {
    slurm_error("cudaw: cannot read the job's uid and gid");
    return 0;
  }
  ensure_cudawd(site.system_dir, true);
  if (!job_env(sp, "CUDAW_RUN_DIR", dir, sizeof dir)) user_run_dir(uid, gid, dir, sizeof dir);
  return 0;
}

/* Refuses (said on the task's stderr, the job's output, and in slurmd's log) or lets it pass. */
static int refuse(const char *format, ...) __attribute__((format(printf, 1, 2)));
static int refuse(const char *format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  vsnprintf(line, sizeof line, format, args);
  va_end(args);
  fprintf(stderr, "%s\n", line);
  slurm_error("%s", line);
  return -1;
}

/* A --cudaw-mem (or mem=) in bytes larger than this node's GPUs would limit nothing: refused
 * before the task runs. The GPUs' size: device_memory= in plugstack.conf, else NVML; where
 * neither tells (the emulated device without device_memory=), not checked. 0 or -1 (refused). */
static int check_mem_fits(void) {
  uint64_t limit, device = 0;
  if (!job.mem[0] || strchr(job.mem, '%') || vmem_parse_size(job.mem, 0, &limit) != 0) return 0;
  char why[160] = "";
  const char *source = "device_memory= in plugstack.conf";
  if (site.device_memory[0]) {
    vmem_parse_size(site.device_memory, 0, &device); /* checked with the arguments */
  } else if (node_gpus_largest_memory(&device, why, sizeof why) == 0) {
    source = "NVML";
  } else {
    slurm_debug("cudaw: --cudaw-mem=%s not checked against the GPUs' memory: %s (set "
                "device_memory= in plugstack.conf)", job.mem, why);
    return 0;
  }
  if (limit <= device) return 0;
  return refuse("cudaw: --cudaw-mem=%s is more than this node's GPU memory (%.2f GiB, from %s): "
                "the limit would limit nothing; the task is not started", job.mem,
                (double)device / (1 << 30), source);
}

/* The batch script's step: its shell runs the script, not CUDA. */
static bool batch_step(spank_t sp) {
  uint32_t step = 0;
  return spank_get_item(sp, S_JOB_STEPID, &step) == ESPANK_SUCCESS && step == SLURM_BATCH_SCRIPT;
}

/* In the task, as the user, before exec: what `cudaw run` does, plus the job's settings. In the
 * batch step only LD_LIBRARY_PATH: the shell and the tools it runs stay without cudaw (no
 * preload, no joining cudawd), a program it runs that loads libcudart.so.13 by name gets cudaw,
 * and srun's steps inside the script are preloaded as usual. */
int slurm_spank_task_init(spank_t sp, int ac, char **av) {
  (void)ac;
  (void)av;
  if (!spank_remote(sp) || !wanted(sp)) return 0;
  if (check_mem_fits() != 0) return -1;
  char lib[PATH_MAX + 64];
  snprintf(lib, sizeof lib, "%s/%s", site.libdir, CUDAW_SPANK_LIB_NAME);
  if (access(lib, R_OK) != 0) {
    slurm_error("cudaw: %s: %s; the job runs without cudaw (looked beside the plugin, then in "
                "%s; set libdir= in plugstack.conf)", lib, strerror(errno), CUDAW_SPANK_LIBDIR);
    return 0;
  }
  bool batch = batch_step(sp);
  if (prepend(sp, "LD_LIBRARY_PATH", site.libdir) || (!batch && prepend(sp, "LD_PRELOAD", lib))) {
    slurm_error("cudaw: cannot set the task's environment");
    return -1;
  }
  if (batch) /* said, so that a program that needs the preload does not run without it unseen */
    fprintf(stderr, "cudaw: the batch script is not preloaded: run its CUDA programs with srun "
            "(run directly, a program gets cudaw only if it finds libcudart.so.N through "
            "LD_LIBRARY_PATH; PyTorch does not)\n");
  char limit[64], dir[PATH_MAX];
  if (job.mem[0]) spank_setenv(sp, "CUDAW_MEM_LIMIT", job.mem, 1);
  else if (shard_limit(sp, limit, sizeof limit) == 1) spank_setenv(sp, "CUDAW_MEM_LIMIT", limit, 1);
  if (job.vmem[0]) spank_setenv(sp, "CUDAW_VMEM", job.vmem, 1);
  if (job.suspend_release) spank_setenv(sp, "CUDAW_SUSPEND", "release", 1);
  if (job.share) spank_setenv(sp, "CUDAW_SHARE", "1", 1);
  uint32_t task_id = 0;
  if (requeue_note[0] && spank_get_item(sp, S_TASK_GLOBAL_ID, &task_id) == ESPANK_SUCCESS &&
      task_id == 0)
    fprintf(stderr, "%s\n", requeue_note); /* the task's stderr: the job's output */
  if (job.share && site.system_cudawd) {
    char sock[PATH_MAX + 16];
    snprintf(sock, sizeof sock, "%s/cudawd.sock", site.system_dir);
    spank_setenv(sp, "CUDAW_SCHED_SOCKET", sock, 1);
  }
  run_dir(sp, dir, sizeof dir);
  return 0;
}

/* Once per step on the node, as the user, before the tasks start: cudawd for sharing jobs. */
int slurm_spank_user_init(spank_t sp, int ac, char **av) {
  (void)ac;
  (void)av;
  if (!spank_remote(sp) || !wanted(sp) || !job.share || site.system_cudawd) return 0;
  char dir[PATH_MAX];
  run_dir(sp, dir, sizeof dir);
  ensure_cudawd(dir, false);
  return 0;
}
