/*
 * scripts/musl-open.c: open(2) for the musl build of sprout without musl's extra system call.
 * musl's open() follows every successful open with O_CLOEXEC by fcntl(fd, F_SETFD,
 * FD_CLOEXEC), for kernels older than 2.6.23 that ignored the flag; sprout needs a far newer
 * kernel, and opens nearly every file with O_CLOEXEC (Rust's std does), so that fcntl was 31
 * of the ~490 system calls of a `run` (strace -f -c, 2026-12-01). scripts/build.sh links this
 * with --wrap=open and --wrap=open64 (musl's internal opens, fopen's included, are not
 * affected) after scripts/open-check.c has checked it.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

int __wrap_open(const char *path, int flags, ...)
{
	mode_t mode = 0;

	if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	/* syscall() reads longs: every argument widened explicitly. */
	return (int)syscall(SYS_open, (long)path, (long)(flags | O_LARGEFILE), (long)mode);
}

/* The same function under musl's large-file name (musl's own open64 is an alias of open). */
int __wrap_open64(const char *path, int flags, ...) __attribute__((alias("__wrap_open")));
