/*
 * scripts/musl-memcpy.c: memcpy for the static musl build of sprout. scripts/build.sh links with
 * --wrap=memcpy: every call of memcpy (Rust's, libseccomp's, musl's own) goes to __wrap_memcpy
 * here, and musl's memcpy stays out of the binary.
 *
 * Why: musl's x86_64 memcpy copies byte by byte up to an 8-byte boundary and through the tail,
 * and everything else with `rep movsq`, whose start-up costs tens of cycles. Nearly all of
 * sprout's copies are small: one `run` of the podman-default bundle makes ~2,700 calls in the
 * runtime alone, two thirds of them 16 bytes or less (clap's and serde's vectors and strings),
 * and `perf annotate` put ~200 us of CPU per `run` in musl's memcpy on the 2-core development
 * host (docs/performance.md, "How the binary is built"). Here: sizes up to 16 bytes with two
 * overlapping loads and stores, up to 2 KiB with 16-byte vector moves, larger with `rep movsb`
 * (fast on every x86-64 CPU with ERMS, i.e. since 2012).
 *
 * Built with -fno-builtin -fno-tree-loop-distribute-patterns so that the compiler turns none of
 * this back into a call to memcpy. scripts/memcpy-check.c tests it against a byte loop for every
 * size up to 4 KiB and every alignment of source and destination; build.sh runs it before the
 * link.
 */
#include <stddef.h>
#include <stdint.h>

typedef uint64_t u64u __attribute__((may_alias, aligned(1)));
typedef uint32_t u32u __attribute__((may_alias, aligned(1)));
typedef long long v16u __attribute__((vector_size(16), may_alias, aligned(1)));

void *__wrap_memcpy(void *restrict dst, const void *restrict src, size_t n)
{
	unsigned char *d = dst;
	const unsigned char *s = src;

	if (n <= 16) {
		if (n >= 8) {
			uint64_t a = *(const u64u *)s, b = *(const u64u *)(s + n - 8);
			*(u64u *)d = a;
			*(u64u *)(d + n - 8) = b;
		} else if (n >= 4) {
			uint32_t a = *(const u32u *)s, b = *(const u32u *)(s + n - 4);
			*(u32u *)d = a;
			*(u32u *)(d + n - 4) = b;
		} else if (n) {
			unsigned char a = s[0], b = s[n / 2], c = s[n - 1];
			d[0] = a;
			d[n / 2] = b;
			d[n - 1] = c;
		}
		return dst;
	}
	if (n <= 32) {
		v16u a = *(const v16u *)s, b = *(const v16u *)(s + n - 16);
		*(v16u *)d = a;
		*(v16u *)(d + n - 16) = b;
		return dst;
	}
	if (n <= 2048) {
		/* 32 bytes at a time; the last 32 (loaded first) overlap what the loop wrote. */
		v16u ta = *(const v16u *)(s + n - 32), tb = *(const v16u *)(s + n - 16);
		for (size_t i = 0; i + 32 < n; i += 32) {
			v16u a = *(const v16u *)(s + i), b = *(const v16u *)(s + i + 16);
			*(v16u *)(d + i) = a;
			*(v16u *)(d + i + 16) = b;
		}
		*(v16u *)(d + n - 32) = ta;
		*(v16u *)(d + n - 16) = tb;
		return dst;
	}
	__asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
	return dst;
}
