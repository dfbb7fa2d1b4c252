/* bench/clients/rtwrap.c: the runtime as an engine sees it, with a stopwatch around every call.
 *
 * Installed by bench/clients as DIR/<name> (the name an engine sees: sprout, runc, crun), with
 * DIR/real a symlink to the real runtime and DIR/log the log. Each call: spawn DIR/real with the
 * same arguments, stdio and environment, wait for it, append one line
 *
 *     <start s> <end s> <exit status> <argv[1..] joined by spaces>
 *
 * (CLOCK_MONOTONIC, the clock of Python's time.monotonic) to DIR/log with one O_APPEND write,
 * and exit with the runtime's status. The container's init, orphaned when the runtime exits,
 * goes to the nearest child subreaper (conmon, the containerd shim) as it would without the
 * wrapper. SIGTERM/SIGINT/SIGHUP are passed on to the runtime. Its own cost (one more
 * spawn + wait per call) is measured by bench/clients and reported next to the results.
 *
 * With a file DIR/hide-unified, the runtime runs in a mount namespace of the wrapper's own in
 * which the hybrid host's cgroup2 mount at /sys/fs/cgroup/unified is gone (every mount made a
 * slave first, so nothing propagates back to the host): what bench/startup's unshare/umount
 * wrapper does for Debian 12's crun, which refuses a hybrid host whose cgroup2 mount has a
 * controller. That step is done before the stopwatch starts, so the logged call is the runtime's
 * alone, and its time is appended to DIR/prep (<start s> <end s> per call); bench/clients
 * measures its whole cost (with the namespace's teardown at the wrapper's exit) apart.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static volatile pid_t child;

static void relay(int sig) {
    if (child > 0) kill(child, sig);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    char self[4096], real[4200], logp[4200], hidep[4200], prepp[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) { perror("rtwrap: /proc/self/exe"); return 125; }
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (!slash) return 125;
    *slash = 0;
    snprintf(real, sizeof real, "%s/real", self);
    snprintf(logp, sizeof logp, "%s/log", self);
    snprintf(hidep, sizeof hidep, "%s/hide-unified", self);
    snprintf(prepp, sizeof prepp, "%s/prep", self);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = relay;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    double tp = now();
    int hide = access(hidep, F_OK) == 0;
    if (hide) {
        if (unshare(CLONE_NEWNS) < 0) { perror("rtwrap: unshare(CLONE_NEWNS)"); return 125; }
        if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) { perror("rtwrap: make / rslave"); return 125; }
        if (umount2("/sys/fs/cgroup/unified", MNT_DETACH) < 0) { perror("rtwrap: umount /sys/fs/cgroup/unified"); return 125; }
    }
    double t0 = now();
    argv[0] = real;
    pid_t pid;
    int err = posix_spawn(&pid, real, NULL, NULL, argv, environ);
    if (err) { fprintf(stderr, "rtwrap: spawn %s: %s\n", real, strerror(err)); return 125; }
    child = pid;
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) { perror("rtwrap: waitpid"); return 125; }
    double t1 = now();
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);

    char line[8192];
    int len = snprintf(line, sizeof line, "%.6f %.6f %d", t0, t1, code);
    for (int i = 1; i < argc && len < (int)sizeof line - 2; i++)
        len += snprintf(line + len, sizeof line - len, " %s", argv[i]);
    if (len > (int)sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    int fd = open(logp, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, line, len) < 0) { /* the log is best effort; the call's result is not */ }
        close(fd);
    }
    if (hide) {
        len = snprintf(line, sizeof line, "%.6f %.6f\n", tp, t0);
        fd = open(prepp, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) {
            if (write(fd, line, len) < 0) { /* best effort, as the log */ }
            close(fd);
        }
    }
    return code;
}
