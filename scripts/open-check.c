/*
 * scripts/open-check.c: checks scripts/musl-open.c (linked with --wrap=open) before
 * scripts/build.sh links it into sprout: the file is created with the mode asked for (under
 * umask 0), O_CLOEXEC is set on the fd, a fd without it has no FD_CLOEXEC, a failure returns -1
 * with errno, O_TMPFILE takes its mode too. Exits non-zero with a line on the first difference.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *what)
{
	fprintf(stderr, "open-check: %s\n", what);
	return 1;
}

int main(void)
{
	char dir[] = "/tmp/open-check.XXXXXX", path[64];
	struct stat st;
	int fd;

	if (!mkdtemp(dir))
		return fail("mkdtemp");
	snprintf(path, sizeof path, "%s/f", dir);
	umask(0);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0604);
	if (fd < 0)
		return fail("create");
	if (fstat(fd, &st) || (st.st_mode & 07777) != 0604)
		return fail("mode of a created file");
	if (!(fcntl(fd, F_GETFD) & FD_CLOEXEC))
		return fail("O_CLOEXEC not set");
	close(fd);
	fd = open(path, O_RDONLY);
	if (fd < 0 || (fcntl(fd, F_GETFD) & FD_CLOEXEC))
		return fail("a plain open");
	close(fd);
	errno = 0;
	if (open(path, O_WRONLY | O_CREAT | O_EXCL, 0600) != -1 || errno != EEXIST)
		return fail("failure without -1 and errno");
	fd = open(dir, O_RDWR | O_TMPFILE | O_CLOEXEC, 0640);
	if (fd >= 0) {
		if (fstat(fd, &st) || (st.st_mode & 07777) != 0640)
			return fail("mode of an O_TMPFILE");
		close(fd);
	}
	unlink(path);
	rmdir(dir);
	return 0;
}
