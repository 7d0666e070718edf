/* LD_PRELOAD shim for test_lccl_ptrace_scope.py: makes process_vm_readv/writev obey Yama's
 * ptrace_scope (read from /proc/sys/kernel/yama/ptrace_scope, which the test fakes) on a kernel
 * built without Yama, for a process without CAP_SYS_PTRACE (a container's root has none). Under
 * scope 1 (Ubuntu's default) a process may read another only when it is that process's
 * ancestor, or when that process named it (or an ancestor of it) with prctl(PR_SET_PTRACER), or
 * named any process (PR_SET_PTRACER_ANY); under 2 and 3 never (without the capability).
 *
 * FAKE_YAMA_DIR holds the state the kernel would: "<pid>.ptracer" is what <pid> named (a pid, or
 * -1 for any), and "<pid>.log" lists what <pid> did, one line per call:
 *   ptracer <arg>            prctl(PR_SET_PTRACER, arg)
 *   read|write <peer> <n>    a process_vm_readv/writev of n bytes that succeeded
 *   refused read|write <peer>
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif

static void state_path(char* path, size_t size, pid_t pid, const char* what) {
  snprintf(path, size, "%s/%d.%s", getenv("FAKE_YAMA_DIR"), (int)pid, what);
}

static void log_line(const char* format, ...) {
  char path[4096];
  state_path(path, sizeof path, getpid(), "log");
  FILE* file = fopen(path, "a");
  if (file == NULL) return;
  va_list args;
  va_start(args, format);
  vfprintf(file, format, args);
  va_end(args);
  fputc('\n', file);
  fclose(file);
}

static pid_t parent_of(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE* file = fopen(path, "r");
  if (file == NULL) return 0;
  int ppid = 0;
  /* "pid (comm) state ppid": comm may hold spaces, so skip to the last ')'. */
  char line[4096];
  if (fgets(line, sizeof line, file) != NULL) {
    char* end = strrchr(line, ')');
    if (end != NULL) sscanf(end + 1, " %*c %d", &ppid);
  }
  fclose(file);
  return (pid_t)ppid;
}

static int is_ancestor(pid_t ancestor, pid_t pid) {
  for (pid_t p = pid; p > 1; p = parent_of(p)) {
    if (p == ancestor) return 1;
  }
  return 0;
}

/* The scope as the process would see it: absent (no Yama) reads as 0. */
static int ptrace_scope(void) {
  FILE* file = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (file == NULL) return 0;
  int scope = 0;
  if (fscanf(file, "%d", &scope) != 1) scope = 0;
  fclose(file);
  return scope;
}

static int may_reach(pid_t target) {
  const int scope = ptrace_scope();
  if (scope != 1) return scope == 0; /* 2 needs CAP_SYS_PTRACE, which we play without; 3: never */
  const pid_t self = getpid();
  if (is_ancestor(self, target)) return 1;
  char path[4096];
  state_path(path, sizeof path, target, "ptracer");
  FILE* file = fopen(path, "r");
  if (file == NULL) return 0;
  long named = 0;
  const int read = fscanf(file, "%ld", &named);
  fclose(file);
  return read == 1 && (named == -1 || is_ancestor((pid_t)named, self));
}

int prctl(int option, ...) {
  va_list args;
  va_start(args, option);
  unsigned long arg[4];
  for (int i = 0; i < 4; ++i) arg[i] = va_arg(args, unsigned long);
  va_end(args);
  if (option == PR_SET_PTRACER) {
    const long named = (long)arg[0];
    log_line("ptracer %ld", named);
    char path[4096];
    state_path(path, sizeof path, getpid(), "ptracer");
    if (named == 0) {
      unlink(path);
      return 0;
    }
    FILE* file = fopen(path, "w");
    if (file == NULL) return -1;
    fprintf(file, "%ld\n", named);
    fclose(file);
    return 0;
  }
  int (*real)(int, ...) = (int (*)(int, ...))dlsym(RTLD_NEXT, "prctl");
  return real(option, arg[0], arg[1], arg[2], arg[3]);
}

typedef ssize_t (*vm_call)(pid_t, const struct iovec*, unsigned long, const struct iovec*,
                           unsigned long, unsigned long);

static ssize_t guarded(const char* name, pid_t pid, const struct iovec* local,
                       unsigned long liovcnt, const struct iovec* remote, unsigned long riovcnt,
                       unsigned long flags) {
  const char* verb = name[11] == 'r' ? "read" : "write";
  if (!may_reach(pid)) {
    log_line("refused %s %d", verb, (int)pid);
    errno = EPERM;
    return -1;
  }
  vm_call real = (vm_call)dlsym(RTLD_NEXT, name);
  const ssize_t moved = real(pid, local, liovcnt, remote, riovcnt, flags);
  if (moved >= 0) log_line("%s %d %zd", verb, (int)pid, moved);
  return moved;
}

ssize_t process_vm_readv(pid_t pid, const struct iovec* local, unsigned long liovcnt,
                         const struct iovec* remote, unsigned long riovcnt, unsigned long flags) {
  return guarded("process_vm_readv", pid, local, liovcnt, remote, riovcnt, flags);
}

ssize_t process_vm_writev(pid_t pid, const struct iovec* local, unsigned long liovcnt,
                          const struct iovec* remote, unsigned long riovcnt, unsigned long flags) {
  return guarded("process_vm_writev", pid, local, liovcnt, remote, riovcnt, flags);
}
