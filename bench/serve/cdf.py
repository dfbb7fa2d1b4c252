#!/usr/bin/env python3
"""Latency CDF plot of a bench.py --json result, as a PNG, with the standard library only.

    bench/serve/cdf.py RESULT.json OUT.png

One curve per start path (engine-side latency, log-scaled x axis from 0.05 ms to 5 s, y from
0 to 1). The colours are printed on stdout (the picture has no text but the decade labels,
in ms: 0.1 1 10 100 1000).
"""

import json
import math
import struct
import sys
import zlib

W, H = 900, 420
L, R, T, B = 50, 20, 15, 35  # margins
X0, X1 = math.log10(0.05), math.log10(5000.0)
COLORS = {
    "hot": (31, 119, 180),
    "warm": (255, 127, 14),
    "zygote": (44, 160, 44),
    "zygote burst": (152, 223, 138),
    "cold": (214, 39, 40),
    "cold burst": (255, 152, 150),
    "heavy hot": (148, 103, 189),
    "heavy warm": (197, 176, 213),
    "heavy zygote": (140, 86, 75),
    "heavy cold": (227, 119, 194),
    "runc run": (80, 80, 80),
    "python3 -I -S": (188, 189, 34),
}
# 3x5 digits for the axis labels.
DIGITS = {
    "0": ["111", "101", "101", "101", "111"], "1": ["010", "110", "010", "010", "111"],
    "5": ["111", "100", "111", "001", "111"], ".": ["000", "000", "000", "000", "010"],
}


def main():
    res = json.load(open(sys.argv[1]))
    px = [[(255, 255, 255)] * W for _ in range(H)]

    def put(x, y, c):
        if 0 <= x < W and 0 <= y < H:
            px[y][x] = c

    def xpos(ms):
        return L + (math.log10(max(ms, 0.05)) - X0) / (X1 - X0) * (W - L - R)

    def ypos(q):
        return H - B - q * (H - T - B)

    grid = (225, 225, 225)
    for dec in [0.1, 1, 10, 100, 1000]:
        x = int(round(xpos(dec)))
        for y in range(T, H - B):
            put(x, y, grid)
        label = ("%g" % dec)
        lx = x - len(label) * 2
        for i, ch in enumerate(label):
            for r, row in enumerate(DIGITS.get(ch, DIGITS["0"]) if ch in DIGITS else []):
                for c, bit in enumerate(row):
                    if bit == "1":
                        for dy in range(2):
                            for dx in range(2):
                                put(lx + i * 8 + c * 2 + dx, H - B + 8 + r * 2 + dy, (0, 0, 0))
    for q in [0.25, 0.5, 0.75, 1.0]:
        y = int(round(ypos(q)))
        for x in range(L, W - R):
            put(x, y, grid)
    for x in range(L, W - R):
        put(x, H - B, (0, 0, 0))
    for y in range(T, H - B + 1):
        put(L, y, (0, 0, 0))
    for r in res["results"]:
        xs = r.get("engine_us")
        c = COLORS.get(r.get("path"))
        if not xs or c is None:
            continue
        n = len(xs)
        prev = None
        for i, us in enumerate(xs):
            pt = (xpos(us / 1000.0), ypos((i + 1) / n))
            if prev is not None:
                # a step: horizontal to the new x at the old height, then up
                for a, b in ((prev, (pt[0], prev[1])), ((pt[0], prev[1]), pt)):
                    steps = int(max(abs(b[0] - a[0]), abs(b[1] - a[1]))) + 1
                    for k in range(steps + 1):
                        x = a[0] + (b[0] - a[0]) * k / steps
                        y = a[1] + (b[1] - a[1]) * k / steps
                        for d in (0, 1):
                            put(int(round(x)), int(round(y)) + d, c)
            prev = pt
        print("%-14s rgb%s  n=%d  p50 %.3f ms" % (r["path"], c, n, xs[n // 2] / 1000.0))
    raw = b"".join(b"\x00" + bytes(v for p in row for v in p) for row in px)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    open(sys.argv[2], "wb").write(png)


if __name__ == "__main__":
    main()
