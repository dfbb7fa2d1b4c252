#!/usr/bin/env python3
"""sprout-serve under concurrent load: wrk at 1/4/16/64/256 connections (run as root).

    bench/serve/sweep.py [--bin target/release/sprout-serve] [-d 5] [--clients 1,4,16,64,256]
                         [--paths hot,zygote,roundrobin] [--wrk-threads N] [--json FILE]

Needs wrk (Debian: apt-get install wrk). One engine per path, on a private config (see
bench.py's Engine), with max_queue_per_handler raised so that every request queues rather
than being answered 503 (that limit is tested in crates/serve/tests):

  hot         one echo handler, max_per_handler = 8: requests beyond 8 in flight queue
  zygote      one echo handler with reuse = false: every request forks a new sandbox
  roundrobin  200 echo handlers, requests cycling over them (wrk's two threads cycle in step,
              so up to two sandboxes per handler: give it max_sandboxes = 512 and a memory
              budget to match, or it measures LRU thrashing of a too-small cache)

Per point: req/s, latency p50/p99/p99.9 (wrk, ms), non-2xx answers, the engine's CPU
(utime+stime over the run, in CPUs), wrk's own CPU (near --wrk-threads: the client is the limit) and RSS (VmRSS after, VmHWM), and the engine's counters
over the point (/metrics): sandboxes started, evicted, requests served hot / warm / by a new
sandbox, and the sandboxes cached after it (/status). The warm path (a frozen
sandbox thawed per request) is not in the sweep: under constant load nothing stays idle long
enough to freeze; bench.py measures it.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import ECHO, Engine, warn_if_stale  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def proc_cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def proc_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


WRK_THREADS = 2


def wrk(port, clients, secs, env):
    threads = max(1, min(WRK_THREADS, clients))
    cmd = ["wrk", "-t%d" % threads, "-c%d" % clients, "-d%ds" % secs, "--timeout", "30s",
           "-s", os.path.join(HERE, "sweep.lua"), "http://127.0.0.1:%d" % port]
    out = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("SWEEP "))
    return {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}


def counters(eng):
    """The engine's own counters (/metrics): sandboxes started, sandboxes evicted, requests
    served by each start path."""
    c = {"starts": 0, "evictions": 0, "hot": 0, "warm": 0, "new": 0}
    for l in eng.get("/metrics")[1].decode().splitlines():
        if l.startswith("sprout_serve_sandboxes_started_total"):
            c["starts"] += int(float(l.split()[-1]))
        elif l.startswith("sprout_serve_evictions_total "):
            c["evictions"] = int(float(l.split()[-1]))
        elif l.startswith("sprout_serve_requests_total{") and 'status="200"' in l:
            p = l.split('path="')[1].split('"')[0]
            c[p if p in ("hot", "warm") else "new"] += int(float(l.split()[-1]))
    return c


def point(eng, path, clients, secs, env):
    pid = eng.proc.pid
    k0 = counters(eng)
    c0, t0 = proc_cpu_s(pid), time.time()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    w = wrk(eng.port, clients, secs, env)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    c1, t1 = proc_cpu_s(pid), time.time()
    # wrk's own CPU (the only child that ends during the point): near --wrk-threads CPUs means
    # the client, not the engine, sets the rate.
    client = (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime) / (t1 - t0)
    k1 = counters(eng)
    k = {n: k1[n] - k0[n] for n in k0}
    total = eng.status()["sandboxes"]["total"]
    r = {"path": path, "clients": clients, "rps": w["requests"] / (w["duration_us"] / 1e6),
         "p50_ms": w["p50"] / 1e3, "p99_ms": w["p99"] / 1e3, "p999_ms": w["p999"] / 1e3,
         "non2xx": w["non2xx"], "timeouts": w["timeouts"],
         "engine_cpus": (c1 - c0) / (t1 - t0), "client_cpus": client, "engine_rss_mib": proc_kib(pid, "VmRSS:") / 1024,
         "engine_hwm_mib": proc_kib(pid, "VmHWM:") / 1024,
         "load1": os.getloadavg()[0], "starts": k["starts"], "evictions": k["evictions"],
         "served_hot": k["hot"], "served_warm": k["warm"], "served_new": k["new"],
         "sandboxes_after": total}
    print("%-10s c=%-4d %9.0f req/s  p50 %7.2f  p99 %7.2f  p99.9 %7.2f ms  non2xx %-5d engine %.2f CPU, RSS %.1f MiB (peak %.1f)  wrk %.2f CPU  load %.1f" % (
        path, clients, r["rps"], r["p50_ms"], r["p99_ms"], r["p999_ms"], r["non2xx"],
        r["engine_cpus"], r["engine_rss_mib"], r["engine_hwm_mib"], client, r["load1"]), flush=True)
    print("%-10s c=%-4d   starts %d, evictions %d; served hot %d, warm %d, new sandbox %d; %d sandboxes after" % (
        path, clients, k["starts"], k["evictions"], k["hot"], k["warm"], k["new"], total), flush=True)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "..", "target", "release", "sprout-serve"))
    ap.add_argument("-d", type=int, default=5, help="seconds per point")
    ap.add_argument("--clients", default="1,4,16,64,256")
    ap.add_argument("--paths", default="hot,zygote,roundrobin")
    ap.add_argument("--json")
    ap.add_argument("--wrk-threads", type=int, default=2,
                    help="wrk threads (at most one per connection; 2 on the 2-core development host)")
    ap.add_argument("--config", action="append", default=[], help="extra engine config line")
    ap.add_argument("--no-queue-config", action="store_true",
                    help="leave max_queue_per_handler out (an engine from before it existed)")
    a = ap.parse_args()
    global WRK_THREADS
    WRK_THREADS = max(1, a.wrk_threads)
    warn_if_stale(a.bin)
    clients = [int(c) for c in a.clients.split(",")]
    common = "timeout_ms = 30000\nsandbox_log = \"/dev/null\"\n"
    if not a.no_queue_config:
        common += "max_queue_per_handler = 4096\n"
    common += "".join(l + "\n" for l in a.config)
    rows = []
    for path in a.paths.split(","):
        eng = Engine(a.bin, "sweep-" + path, common)
        try:
            eng.wait_zygotes()
            env = {}
            if path == "hot":
                eng.add("echo", ECHO)
                env["SWEEP_PATH"] = "/run/echo"
            elif path == "zygote":
                src = os.path.join(eng.dir, "src", "fresh")
                os.makedirs(src, exist_ok=True)
                with open(os.path.join(src, "handler.toml"), "w") as f:
                    f.write("reuse = false\n")
                eng.add("fresh", ECHO)
                env["SWEEP_PATH"] = "/run/fresh"
            else:
                for i in range(1, 201):
                    eng.add("h%d" % i, ECHO)
                env["SWEEP_HANDLERS"] = "200"
            # Warm-up: sandboxes (and the 200 handlers' first starts) before measuring.
            wrk(eng.port, 4, 2, env)
            for c in clients:
                rows.append(point(eng, path, c, a.d, env))
        finally:
            eng.stop()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
