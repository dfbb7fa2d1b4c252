#!/usr/bin/env python3
"""sprout-serve start-path benchmark (stdlib only; run as root).

    bench/serve/bench.py [--bin target/release/sprout-serve] [--heavy] [--runc] [-n 500]

Starts its own engine(s) on a private config (loopback port, run dir, cgroup name), registers a
trivial echo handler (and with --heavy an import-heavy numpy+pandas one), then measures per
start path, engine-side (x-sprout-engine-us: request in -> reply out, HTTP parsing excluded)
and client-side (http.client keep-alive round trip):

  hot     back-to-back requests to one handler (idle sandbox running)
  warm    requests spaced past freeze_after_ms (frozen sandbox thawed)
  warmc   the same from --threads clients at once, each with its own handler
  zygote  first request to each of N identical handlers (fork from the zygote)
  cold    same with zygotes = false (fresh python per sandbox)
  rate    new sandboxes per second: first requests to N handlers from C client threads, with
          the CPU per sandbox of the pool cgroups (zygotes + sandboxes, cpuacct), the engine
          and this client, and the page faults of the pool cgroups (memory.stat)
  runc    baseline: `runc run` of python3 -c per request (--runc)

--config 'LINE' adds engine config (both engines), e.g. to compare one option in one binary.
--json FILE keeps every sample; bench/serve/cdf.py FILE OUT.png draws the latency CDFs.

Also reports python3 -I -S start time and the memory charged to frozen idle sandboxes.
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ECHO = "def f(event):\n    return {'echo': event}\n"
HEAVY = "import numpy as np\nimport pandas as pd\ndef f(event):\n    df = pd.DataFrame({'x': np.arange(10)})\n    return {'sum': int(df.x.sum())}\n"
HEAVY_REQ = "numpy==1.26.4\npandas==2.2.3\npython-dateutil==2.9.0.post0\nsix==1.16.0\npytz==2024.2\ntzdata==2024.2\n"


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def summary(name, eng_us, cli_us):
    r = {"path": name, "n": len(eng_us),
         "engine_p50_ms": pct(eng_us, 50) / 1000, "engine_p99_ms": pct(eng_us, 99) / 1000,
         "client_p50_ms": pct(cli_us, 50) / 1000, "client_p99_ms": pct(cli_us, 99) / 1000}
    print("%-14s n=%-5d engine p50 %8.3f ms  p99 %8.3f ms | client p50 %8.3f ms  p99 %8.3f ms" % (
        name, r["n"], r["engine_p50_ms"], r["engine_p99_ms"], r["client_p50_ms"], r["client_p99_ms"]), flush=True)
    r["engine_us"] = sorted(eng_us)  # raw samples, for the CDF plot (bench/serve/cdf.py)
    return r


def warn_if_stale(binary):
    """An engine older than its sources (or than the zygote it runs, read from python/ at run
    time) measures old code, or fails on a protocol change with a puzzling zygote error."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        built = os.stat(binary).st_mtime
    except OSError:
        raise SystemExit("bench.py: no engine at %s (build it: scripts/build.sh --workspace)" % binary)
    srcs = [os.path.join(repo, "python", "sprout_zygote.py")]
    for d in ("crates/serve/src", "crates/runtime/src", "crates/cgroups/src"):
        full = os.path.join(repo, d)
        srcs += [os.path.join(full, f) for f in os.listdir(full)] if os.path.isdir(full) else []
    newer = [p for p in srcs if os.path.exists(p) and os.stat(p).st_mtime > built]
    if newer:
        print("bench.py: WARNING: %s is older than %d source file(s), e.g. %s: rebuild "
              "(scripts/build.sh --workspace)" % (binary, len(newer), os.path.relpath(newer[0], repo)),
              file=sys.stderr)


class Engine:
    def __init__(self, binary, name, extra=""):
        self.binary = binary
        self.cg_name = "sprout-serve-bench-%s" % name
        self.dir = tempfile.mkdtemp(prefix="sprout-serve-bench-%s-" % name)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.cfg = os.path.join(self.dir, "config.toml")
        with open(self.cfg, "w") as f:
            f.write('listen = "127.0.0.1:%d"\nregistry = "%s/registry"\npackage_cache = "%s"\n'
                    'run_dir = "/run/sprout-serve-bench-%s"\ncgroup_name = "sprout-serve-bench-%s"\n%s\n'
                    % (self.port, self.dir, os.environ.get("SPROUT_BENCH_PKG_CACHE", "/var/tmp/sprout-serve-bench-packages"),
                       name, name, extra))
        self.log = open(os.path.join(self.dir, "daemon.log"), "w")
        self.proc = subprocess.Popen([binary, "--config", self.cfg], stdout=self.log, stderr=self.log)
        for _ in range(500):
            try:
                if self.get("/healthz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.02)
        else:
            raise SystemExit("engine did not start; see %s" % self.log.name)
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port)

    def add(self, name, code, req=None):
        src = os.path.join(self.dir, "src", name)
        os.makedirs(src, exist_ok=True)
        with open(os.path.join(src, "f.py"), "w") as f:
            f.write(code)
        if req:
            with open(os.path.join(src, "requirements.txt"), "w") as f:
                f.write(req)
        subprocess.run([self.binary, "--config", self.cfg, "handler", "add", name, src], check=True, stdout=subprocess.DEVNULL)

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()

    def post(self, handler, body=b"{}", conn=None):
        c = conn or self.conn
        t = time.perf_counter()
        c.request("POST", "/run/" + handler, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        cli = (time.perf_counter() - t) * 1e6
        if r.status != 200:
            raise RuntimeError("%s: %d %s" % (handler, r.status, data[:300]))
        return int(r.getheader("x-sprout-engine-us")), cli, r.getheader("x-sprout-path")

    def status(self):
        return json.loads(self.get("/status")[1])

    def wait_zygotes(self, n=1, timeout=120):
        t = time.time()
        while time.time() - t < timeout:
            zs = self.status()["zygotes"]
            if sum(1 for z in zs if z["state"] == "ready") >= n:
                return
            if any(z["state"] == "failed" for z in zs):
                raise RuntimeError("zygote failed: %s" % zs)
            time.sleep(0.05)
        raise RuntimeError("zygote not ready: %s" % self.status()["zygotes"])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if os.environ.get("SPROUT_BENCH_KEEP"):
            print("engine dir kept: %s" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


OTHER = {}


def run_path(eng, handler, n, expect, gap=0.0):
    """Requests whose start path was not `expect` (e.g. a hot sandbox frozen under load
    between two requests) are left out of the sample and counted in OTHER."""
    eu, cu = [], []
    for _ in range(n):
        if gap:
            time.sleep(gap)
        e, c, p = eng.post(handler)
        if p != expect:
            OTHER[(expect, p)] = OTHER.get((expect, p), 0) + 1
            continue
        eu.append(e)
        cu.append(c)
    return eu, cu


def warm_concurrent(eng, prefix, threads, n_each, gap=0.15):
    """The warm path under concurrency: `threads` clients, each with its own handler and
    keep-alive connection, each request spaced past freeze_after_ms so that every one thaws a
    frozen sandbox while the other clients' thaws are under way."""
    for i in range(threads):
        eng.add("%s%d" % (prefix, i), ECHO)
        eng.post("%s%d" % (prefix, i))
    eu, cu = [], []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def worker(i):
        conn = http.client.HTTPConnection("127.0.0.1", eng.port)
        start.wait()
        for _ in range(n_each):
            time.sleep(gap)
            e, c, p = eng.post("%s%d" % (prefix, i), conn=conn)
            with lock:
                if p != "warm":
                    OTHER[("warm", p)] = OTHER.get(("warm", p), 0) + 1
                    continue
                eu.append(e)
                cu.append(c)
        conn.close()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return eu, cu


def first_requests(eng, prefix, n, code, expect, req=None, gap=0.0):
    for i in range(n):
        eng.add("%s%d" % (prefix, i), code, req)
    eu, cu = [], []
    for i in range(n):
        if gap:
            time.sleep(gap)
        e, c, p = eng.post("%s%d" % (prefix, i))
        if p != expect:
            OTHER[(expect, p)] = OTHER.get((expect, p), 0) + 1
            continue
        eu.append(e)
        cu.append(c)
    return eu, cu


def cpu_ms(eng):
    """CPU used so far (ms): the pool cgroups (zygotes + sandboxes: the engine's cgroup_name
    directory in the cpuacct hierarchy) and the engine process itself (all threads)."""
    pool = None
    faults = None
    try:
        with open("/proc/%d/cgroup" % eng.proc.pid) as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if "memory" in ctrls.split(","):
                    m = "/sys/fs/cgroup/memory%s/%s/memory.stat" % (path.rstrip("/"), eng.cg_name)
                    if os.path.exists(m):
                        with open(m) as g:
                            for st in g:
                                if st.startswith("total_pgfault "):
                                    faults = int(st.split()[1])
                if ctrls == "" and not os.path.isdir("/sys/fs/cgroup/cpuacct") and not os.path.isdir("/sys/fs/cgroup/cpu,cpuacct"):
                    # pure v2: cpu.stat's usage_usec and memory.stat's pgfault
                    d = "/sys/fs/cgroup%s/%s" % (path.rstrip("/"), eng.cg_name)
                    for fn, key, scale in (("cpu.stat", "usage_usec ", 1e3), ("memory.stat", "pgfault ", None)):
                        if os.path.exists(os.path.join(d, fn)):
                            with open(os.path.join(d, fn)) as g:
                                for st in g:
                                    if st.startswith(key):
                                        v = int(st.split()[1])
                                        if scale:
                                            pool = v / scale
                                        else:
                                            faults = v
                if "cpuacct" in ctrls.split(","):
                    for d in ("cpuacct", "cpu,cpuacct"):
                        u = "/sys/fs/cgroup/%s%s/%s/cpuacct.usage" % (d, path.rstrip("/"), eng.cg_name)
                        if os.path.exists(u):
                            with open(u) as g:
                                pool = int(g.read()) / 1e6
                            break
    except OSError:
        pass
    with open("/proc/%d/stat" % eng.proc.pid) as f:
        st = f.read().rsplit(")", 1)[1].split()
    engine = (int(st[11]) + int(st[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")
    return pool, engine, faults


def rate(eng, prefix, n, threads):
    for i in range(n):
        eng.add("%s%d" % (prefix, i), ECHO)
    cpu0 = cpu_ms(eng)
    self0 = os.times()
    idx = iter(range(n))
    lock = threading.Lock()
    paths = {}

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", eng.port)
        while True:
            with lock:
                i = next(idx, None)
            if i is None:
                return
            _, _, p = eng.post("%s%d" % (prefix, i), conn=conn)
            with lock:
                paths[p] = paths.get(p, 0) + 1

    t = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    dt = time.perf_counter() - t
    cpu1 = cpu_ms(eng)
    self1 = os.times()
    client = (self1.user + self1.system - self0.user - self0.system) * 1000.0
    pool = (cpu1[0] - cpu0[0]) / n if cpu0[0] is not None and cpu1[0] is not None else float("nan")
    engine = (cpu1[1] - cpu0[1]) / n
    faults = (cpu1[2] - cpu0[2]) / n if cpu0[2] is not None and cpu1[2] is not None else float("nan")
    print("%-14s %d new sandboxes in %.2f s = %.0f /s (%s); per sandbox: CPU of the pool cgroups %.2f ms "
          "(page faults %.0f), engine %.2f ms, bench client %.2f ms; load %s" % (
              "rate", n, dt, n / dt, paths, pool, faults, engine, client / n,
              " ".join(open("/proc/loadavg").read().split()[:3])), flush=True)
    return {"path": "rate", "n": n, "seconds": dt, "per_second": n / dt, "paths": paths,
            "cpu_ms_per_sandbox": {"pool": pool, "engine": engine, "client": client / n},
            "page_faults_per_sandbox": faults}


def python_start(py="/usr/bin/python3", n=30):
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([py, "-I", "-S", "-c", "pass"], check=True)
        xs.append((time.perf_counter() - t) * 1e6)
    r = summary("python3 -I -S", xs, xs)
    return r


def python_first_byte(py="/usr/bin/python3", n=30):
    """Python's own start as the cold path sees it: spawn -> first byte written, after the same
    imports as the sandbox init (posix, _json), without the interpreter's exit."""
    xs = []
    code = "import posix, _json; posix.write(1, b'x'); posix.close(1)"
    for _ in range(n):
        t = time.perf_counter()
        p = subprocess.Popen([py, "-I", "-S", "-c", code], stdout=subprocess.PIPE)
        p.stdout.read(1)
        xs.append((time.perf_counter() - t) * 1e6)
        p.wait()
    return summary("python 1st byte", xs, xs)


def runc_baseline(n):
    runc = shutil.which("runc")
    if not runc:
        print("runc not found; skipping baseline")
        return None
    b = tempfile.mkdtemp(prefix="sprout-serve-bench-runc-")
    os.makedirs(os.path.join(b, "rootfs"))
    spec = json.loads(subprocess.run([runc, "spec", "--bundle", b], check=True) and open(os.path.join(b, "config.json")).read())
    for d in ["usr", "lib", "lib64", "bin"]:
        host = "/" + d
        dst = os.path.join(b, "rootfs", d)
        if os.path.islink(host):
            os.symlink(os.readlink(host), dst)
        elif os.path.isdir(host):
            os.makedirs(dst)
            spec["mounts"].append({"destination": "/" + d, "type": "bind", "source": host, "options": ["rbind", "ro"]})
    spec["process"]["terminal"] = False
    spec["process"]["args"] = ["/usr/bin/python3", "-I", "-S", "-c", "import json; print(json.dumps({'echo': {}}))"]
    spec["root"]["readonly"] = True
    with open(os.path.join(b, "config.json"), "w") as f:
        json.dump(spec, f)
    xs = []
    for i in range(n):
        cid = "sprout-serve-bench-%d-%d" % (os.getpid(), i)
        t = time.perf_counter()
        subprocess.run([runc, "run", "--bundle", b, cid], check=True, stdout=subprocess.DEVNULL)
        xs.append((time.perf_counter() - t) * 1e6)
    shutil.rmtree(b, ignore_errors=True)
    return summary("runc run", xs, xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/sprout-serve",
                    help="the engine (default: what scripts/build.sh --workspace builds)")
    ap.add_argument("-n", type=int, default=1000, help="hot requests")
    ap.add_argument("--new", type=int, default=100, help="new sandboxes per zygote/cold run")
    ap.add_argument("--heavy", action="store_true", help="also numpy+pandas from PyPI")
    ap.add_argument("--runc", action="store_true")
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--threads", type=int, default=4, help="client threads of the rate runs")
    ap.add_argument("--config", default="", help="extra top-level engine config (TOML lines, e.g. 'zygote_learn_prewarm = false'), for both engines")
    ap.add_argument("--sandbox-config", default="", help="extra [sandbox] lines for both engines, e.g. 'network_ns = false'")
    ap.add_argument("--only", help="comma-separated subset: python,hot,warm,warmc,zygote,burst,rate,cold,coldrate (default: all)")
    a = ap.parse_args()
    warn_if_stale(a.bin)
    only = set(a.only.split(",")) if a.only else None

    def want(x):
        return only is None or x in only
    res = {"results": [], "loadavg_start": open("/proc/loadavg").read().split()[:3]}
    out = res["results"]
    if want("python"):
        out.append(python_start())
        out.append(python_first_byte())

    xc = a.config.replace("\\n", "\n") + "\n"
    sc = a.sandbox_config.replace("\\n", "\n") + "\n"
    eng = Engine(a.bin, "z", xc + "freeze_after_ms = 50\nmax_sandboxes = 1024\nmemory_budget_mb = 8192\npool_prealloc = 64\n[sandbox]\nmemory_mb = 256\n" + sc)
    try:
        eng.wait_zygotes()
        eng.add("echo", ECHO)
        eng.post("echo")
        if want("hot"):
            out.append(summary("hot", *run_path(eng, "echo", a.n, "hot")))
        if want("warm"):
            out.append(summary("warm", *run_path(eng, "echo", min(a.n, 200), "warm", gap=0.15)))
        if want("warmc"):
            # the warm path with `--threads` clients thawing their own sandboxes at once
            out.append(summary("warm x%d" % a.threads, *warm_concurrent(eng, "w", a.threads, 50)))
        # Spaced: the zygote has refilled its spares (forked ahead) between requests.
        if want("zygote"):
            out.append(summary("zygote", *first_requests(eng, "z", a.new, ECHO, "zygote", gap=0.05)))
        # Back to back: spares run out, each start forks synchronously (cgroup join included).
        if want("burst"):
            out.append(summary("zygote burst", *first_requests(eng, "zb", a.new, ECHO, "zygote")))
        time.sleep(0.3)
        st = eng.status()
        fz = st["memory"]["frozen_sandbox_bytes"]
        if fz and want("zygote"):
            res["frozen_idle_bytes_p50"] = statistics.median(fz)
            res["frozen_idle_bytes_max"] = max(fz)
            print("frozen idle sandboxes: %d, memory charged p50 %.2f MiB max %.2f MiB" % (
                len(fz), statistics.median(fz) / 2**20, max(fz) / 2**20))
        if want("rate"):
            out.append(rate(eng, "r", a.new * 2, a.threads))
        if a.heavy:
            eng.add("heavy0", HEAVY, HEAVY_REQ)
            t = time.perf_counter()
            e, c, p = eng.post("heavy0")
            print("heavy first request (install + cold import): %.1f s via %s" % (time.perf_counter() - t, p))
            eng.wait_zygotes(2, timeout=300)
            out.append(summary("heavy hot", *run_path(eng, "heavy0", a.n // 4, "hot")))
            out.append(summary("heavy warm", *run_path(eng, "heavy0", 50, "warm", gap=0.15)))
            out.append(summary("heavy zygote", *first_requests(eng, "hz", 30, HEAVY, "zygote", HEAVY_REQ, gap=0.1)))
    finally:
        eng.stop()

    eng = Engine(a.bin, "c", xc + "zygotes = false\nmax_sandboxes = 1024\nmemory_budget_mb = 8192\npool_prealloc = 64\n[sandbox]\n" + sc)
    try:
        # Spaced like the zygote run (pre-made namespaces/cgroups are refilled between starts).
        if want("cold"):
            out.append(summary("cold", *first_requests(eng, "c", a.new, ECHO, "cold", gap=0.05)))
        if want("coldburst"):
            out.append(summary("cold burst", *first_requests(eng, "cb", a.new, ECHO, "cold")))
        if want("coldrate"):
            r = rate(eng, "cr", a.new * 2, a.threads)
            r["path"] = "cold rate"
            out.append(r)
        if a.heavy:
            out.append(summary("heavy cold", *first_requests(eng, "hc", 10, HEAVY, "cold", HEAVY_REQ)))
    finally:
        eng.stop()
    if a.runc:
        r = runc_baseline(30)
        if r:
            out.append(r)
    if OTHER:
        print("left out (expected path, got): %s" % OTHER)
    res["left_out"] = {"%s->%s" % k: v for k, v in OTHER.items()}
    res["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
