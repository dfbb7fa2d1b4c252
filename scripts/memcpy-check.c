/*
 * scripts/memcpy-check.c: checks scripts/musl-memcpy.c (linked in its place by scripts/build.sh)
 * against a byte loop, for every alignment of source and destination modulo 16: every size up
 * to 640 bytes and around each of the copy's size classes (16, 32, 2048), every 7th size up to
 * 4 KiB, a few larger ones; with guard bytes on both sides of the destination. Prints
 * the first mismatch and exits 1; silent and 0 when all agree.
 *
 *   musl-gcc -O2 -Wl,--wrap=memcpy scripts/memcpy-check.c musl-memcpy.o -o memcpy-check && ./memcpy-check
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64
#define MAXN (64 * 1024 + 100)

static unsigned char src[MAXN + 2 * GUARD], dst[MAXN + 2 * GUARD], want[MAXN + 2 * GUARD];

static int check(size_t n, size_t sa, size_t da)
{
	/* volatile: the reference copy must stay a byte loop, not become a call to memcpy. */
	volatile unsigned char *w = want;
	size_t end = 2 * GUARD + 16 + n;
	for (size_t i = 0; i < end; i++)
		dst[i] = w[i] = (unsigned char)(0xa5 ^ i);
	for (size_t i = 0; i < n; i++)
		w[GUARD + da + i] = src[GUARD + sa + i];
	void *r = memcpy(dst + GUARD + da, src + GUARD + sa, n);
	if (r != dst + GUARD + da) {
		fprintf(stderr, "memcpy-check: n=%zu src+%zu dst+%zu: returned %p, not dst %p\n", n, sa, da, r,
			(void *)(dst + GUARD + da));
		return 1;
	}
	for (size_t i = 0; i < end; i++) {
		if (dst[i] != want[i]) {
			fprintf(stderr, "memcpy-check: n=%zu src+%zu dst+%zu: byte %zd is %#x, not %#x\n", n, sa,
				da, (ssize_t)i - GUARD - (ssize_t)da, dst[i], want[i]);
			return 1;
		}
	}
	return 0;
}

int main(void)
{
	for (size_t i = 0; i < sizeof src; i++)
		src[i] = (unsigned char)(i * 131 + 7);
	static const size_t big[] = { 4095, 4096, 4097, 8191, 12345, 32768, 65536, MAXN - 16 };
	for (size_t sa = 0; sa < 16; sa++) {
		for (size_t da = 0; da < 16; da++) {
			for (size_t n = 0; n <= 4096; n++) {
				int near = n <= 640 || (n >= 2000 && n <= 2100);
				if ((near || n % 7 == 0 || n == 4096) && check(n, sa, da))
					return 1;
			}
			for (size_t k = 0; k < sizeof big / sizeof big[0]; k++)
				if (check(big[k], sa, da))
					return 1;
		}
	}
	return 0;
}
