/*
 * scripts/musl-fortify.c: the one glibc "fortified" entry point that Debian's libseccomp.a
 * (built with _FORTIFY_SOURCE) calls and musl does not have, so that scripts/build.sh can link
 * that archive into the musl build of sprout. libseccomp calls it only when it writes a
 * filter as text (seccomp_export_pfc), which sprout never does; it behaves as fprintf.
 */
#include <stdarg.h>
#include <stdio.h>

int __fprintf_chk(FILE *f, int flag, const char *fmt, ...)
{
	va_list ap;
	int r;

	(void)flag;
	va_start(ap, fmt);
	r = vfprintf(f, fmt, ap);
	va_end(ap);
	return r;
}
