"""Flip the guest kernel's perf_sched_events static key about once a second (vm.sh stress-textpoke).

A per-task software perf event (context switches of this process) turns the key on when it is
opened; the kernel turns it off again about a second after the last one is closed. Each flip
patches __schedule with text_poke_bp (int3 first), the step multi-threaded TCG in QEMU < 10
gets wrong. Prints the number of open/close cycles.
"""
import ctypes
import os
import struct
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
SYS_PERF_EVENT_OPEN = 298  # x86_64
attr = bytearray(128)
struct.pack_into("IIQ", attr, 0, 1, 128, 3)  # PERF_TYPE_SOFTWARE, size, PERF_COUNT_SW_CONTEXT_SWITCHES
buf = ctypes.create_string_buffer(bytes(attr), 128)
secs = float(sys.argv[1]) if len(sys.argv) > 1 else 120
n = 0
t0 = time.time()
while time.time() - t0 < secs:
    fd = libc.syscall(SYS_PERF_EVENT_OPEN, buf, 0, -1, -1, 0)
    if fd < 0:
        sys.exit(f"perf_event_open: errno {ctypes.get_errno()}")
    time.sleep(0.05)
    os.close(fd)
    n += 1
    time.sleep(1.1)
print(f"textpoke-stress: {n} open/close cycles in {secs:.0f} s")
