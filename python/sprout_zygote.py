"""sprout serve: sandbox init and zygote fork server (stdlib only).

Started by the sprout-serve engine with `python3 -I -S sprout_zygote.py MODE FD`:

  sandbox FD   plain cold start. The engine already placed this process in its cgroup,
               chrooted it into the sandbox root, unshared namespaces, dropped privileges and
               loaded the seccomp filter before exec. We only load the handler and serve.
  zygote FD [SCRIPT_FD]
               fork server, root of a user namespace of its own and pid 1 of a pid namespace
               it owns (the engine maps that root to an unprivileged host user; SCRIPT_FD, the
               fd this file was read from, is closed first). FD is the control socket to the
               engine, which has already moved us into our cgroup. The first message is the
               zygote setup (root dir fd + packages to pre-import): the zygote chroots into
               its root (base + its packages) and imports.
               For every "fork" message (carrying a new sandbox socket) it forks a *spare*
               straight into a new pid namespace (unshare(CLONE_NEWPID) + fork + setns back:
               one fork, the spare is pid 1 of its namespace) and answers with its pid. The
               engine moves the spare into a pool cgroup (no cgroup file is ever ours: with
               one, code of a package we imported could move any process it can name) and
               says "placed" on the sandbox socket; the spare unshares ipc/uts and
               waits. When the engine assigns it a handler (setup + the root
               dir fd over the sandbox socket) it chroots into the root, unshares the mount
               (and, if asked, network) namespace, drops the capability bounding set,
               setgroups/setresgid/setresuid, sets no_new_privs, loads the seccomp filter
               and imports the handler: packages the zygote imported are already in memory
               (shared copy-on-write).
               A "zygote" message (carrying the child zygote's control socket and its root dir
               fd) forks a child zygote in a pid namespace of its own (a package it imports
               can name, and signal, nothing outside its own subtree): pid 1 there is a
               holder that only reaps; the child zygote, pid 2, says it is there, waits
               until the engine has placed it in its cgroup, chroots into its root (our packages +
               more), imports only the extra packages and serves forks on its own socket (the
               import-cache tree of SOCK).

Wire format on every socket: 4-byte little-endian length + UTF-8 JSON. File descriptors ride
(SCM_RIGHTS) on the first byte of a message.

Requests:  {"event": <any JSON>}
Replies:   {"ok": true, "result": <JSON>} | {"ok": false, "error": "...", "kind": "raised"}
Ready:     {"ready": true} | {"ready": false, "error": "..."} once the handler is imported.
"""

# `posix`, not `os`: with -S nothing has imported os yet, and `import os` (its pure-Python
# module plus _collections_abc, stat, posixpath) cost a plain cold start ~1.5 ms here; every
# function used below is posix's own. A handler that imports os gets the environment set
# by _set_env (posix.environ is what os.environ is built from).
import posix as os
import sys

# `socket` (and what it pulls in) is imported only by the zygote: a plain cold sandbox talks
# over its raw fd with os.read/os.write, keeping its start-up to python + json + the handler.

def _hdr(n):
    return n.to_bytes(4, "little")


def _unhdr(b):
    return int.from_bytes(b, "little")


def _json_codec():
    """loads/dumps on CPython's C accelerator `_json` directly: `import json` pulls in `re` and
    `enum` (~10 ms of a plain cold start on a busy host). Falls back to the json package."""
    try:
        import _json

        consts = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}

        class Ctx:
            strict = True
            object_hook = None
            object_pairs_hook = None
            parse_float = float
            parse_int = int
            parse_constant = consts.__getitem__
            memo = {}

        scan = _json.make_scanner(Ctx)

        def default(o):
            raise TypeError("Object of type %s is not JSON serializable" % type(o).__name__)

        def loads(b):
            s = b.decode("utf-8") if isinstance(b, (bytes, bytearray)) else b
            try:
                obj, _end = scan(s, 0)
            except StopIteration:
                raise ValueError("invalid JSON") from None
            return obj

        def dumps(obj):
            enc = _json.make_encoder({}, default, _json.encode_basestring_ascii, None, ":", ",", False, False, False)
            return "".join(enc(obj, 0))

        assert loads(b'{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}
        assert dumps({"a": [1, "\u00e9"]}) == '{"a":[1,"\\u00e9"]}'
        return loads, dumps
    except Exception:  # noqa: BLE001
        import json

        return json.loads, lambda o: json.dumps(o, separators=(",", ":"))


_loads, _dumps = _json_codec()


def _read_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("engine closed the socket")
        got += k
    return bytes(buf)


def _read_exact_fd(fd, n):
    chunks = []
    while n:
        b = os.read(fd, n)
        if not b:
            raise EOFError("engine closed the socket")
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


def recv_msg_fd(fd):
    n = _unhdr(_read_exact_fd(fd, 4))
    return _loads(_read_exact_fd(fd, n))


def _write_all_fd(fd, data):
    view = memoryview(data)
    while view:
        k = os.write(fd, view)
        view = view[k:]


def send_msg_fd(fd, obj):
    b = _dumps(obj).encode()
    _write_all_fd(fd, _hdr(len(b)) + b)


def recv_msg(sock, maxfds=0):
    import socket

    fds = []
    if maxfds:
        data, fds, _flags, _addr = socket.recv_fds(sock, 4, maxfds)
        if not data:
            raise EOFError("engine closed the socket")
        if len(data) < 4:
            data += _read_exact(sock, 4 - len(data))
    else:
        data = _read_exact(sock, 4)
    n = _unhdr(data)
    return _loads(_read_exact(sock, n)), fds


def send_msg(sock, obj):
    b = _dumps(obj).encode()
    sock.sendall(_hdr(len(b)) + b)


# ---------------------------------------------------------------- handler loop


# The environment of a zygote once it has imported its packages (what its children inherit).
_ENV = None


def _set_env(env):
    """os.environ = env, touching only what differs (a zygote already runs with the base
    environment: a sandbox then sets one or two keys, not the whole set)."""
    real_os = sys.modules.get("os")
    if real_os is not None and _ENV is not None:
        # A zygote's child: the environment is the zygote's snapshot (plain dicts, no walk
        # through os.environ's encode/decode methods: ~40 copy-on-write faults here).
        for k in [k for k in _ENV if k not in env]:
            del real_os.environ[k]
        for k, v in env.items():
            if _ENV.get(k) != v:
                real_os.environ[k] = v
        return
    if real_os is not None:
        for k in [k for k in real_os.environ if k not in env]:
            del real_os.environ[k]
        for k, v in env.items():
            if real_os.environ.get(k) != v:
                real_os.environ[k] = v
        return
    # No os module yet (a plain cold start): the process environment and posix.environ, which
    # os.environ is built from when a handler imports os.
    pe = os.environ
    want = {k.encode(): v.encode() for k, v in env.items()}
    for k in [k for k in pe if k not in want]:
        os.unsetenv(k)
        del pe[k]
    for k, v in want.items():
        if pe.get(k) != v:
            os.putenv(k, v)
            pe[k] = v


def _cached_code(directory, name, fh):
    """The handler's code object from the .pyc that `handler add` compiled on the host
    (`__pycache__/<name>.<cache tag>.pyc`, timestamp-checked as the import system does), or
    None when there is none this interpreter can use. A fresh interpreter's first compile()
    costs ~0.7 ms even for a one-line module; unmarshalling the same code takes ~2 us."""
    try:
        with open("%s/__pycache__/%s.%s.pyc" % (directory, name, sys.implementation.cache_tag), "rb") as c:
            data = c.read()
    except (OSError, TypeError):  # no file, or cache_tag None (caching disabled)
        return None
    ext = sys.modules.get("_frozen_importlib_external")
    if ext is None or len(data) < 16 or data[:4] != ext.MAGIC_NUMBER or data[4:8] != b"\0\0\0\0":
        return None
    st = os.fstat(fh.fileno())
    if (int.from_bytes(data[8:12], "little") != int(st.st_mtime) & 0xFFFFFFFF
            or int.from_bytes(data[12:16], "little") != st.st_size & 0xFFFFFFFF):
        return None  # f.py changed after it was compiled
    import marshal

    try:
        return marshal.loads(data[16:])
    except (ValueError, EOFError, TypeError):
        return None


def _exec_handler_module(name, paths):
    """Import the handler module straight from the first path entry (/handler/f.py): its
    code from the .pyc compiled at `handler add` (else read and compile it), exec'd into a
    new module registered in sys.modules. The import system's path
    machinery for a new sys.path entry (path hooks, a zipimport attempt, a FileFinder, the
    bytecode-cache probes) cost a forked sandbox more than the compile itself. None when
    there is no such file: the caller falls back to __import__."""
    if not paths or "." in name:
        return None
    path = "%s/%s.py" % (paths[0], name)
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return None
    with fh:
        code = _cached_code(paths[0], name, fh)
        if code is None:
            code = compile(fh.read(), path, "exec", dont_inherit=True)
    mod = type(sys)(name)
    mod.__file__ = path
    sys.modules[name] = mod
    try:
        exec(code, mod.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def load_handler(setup):
    paths = setup.get("paths", [])
    for p in reversed(paths):
        if p not in sys.path:
            sys.path.insert(0, p)
    _set_env(setup.get("env", {}))
    _mark("env")
    name = setup.get("module", "f")
    mod = _exec_handler_module(name, paths)
    if mod is None:
        __import__(name)
        mod = sys.modules[name]
    fn = getattr(mod, setup.get("function", "f"), None)
    if not callable(fn):
        raise RuntimeError("handler module has no callable f(event)")
    return fn


_T_INIT = None


def serve(fd, setup):
    """Load the handler, then answer requests on fd until EOF."""
    cold_trace = None
    if _T_INIT and "t0" in setup:
        # Plain cold start, traced: ms since the engine handed over (CLOCK_MONOTONIC on both
        # sides) when the init script began (exec + interpreter start), when this module was
        # imported, when the setup was read, and (below) when the handler was loaded.
        import time

        t0 = setup["t0"]
        cold_trace = [("interpreter", _T_INIT[0] - t0), ("init_module", _T_INIT[1] - t0), ("setup", time.monotonic() - t0)]
    try:
        fn = load_handler(setup)
    except BaseException as e:  # noqa: BLE001 - report anything, including SystemExit
        send_msg_fd(fd, {"ready": False, "error": "loading handler: %s: %s" % (type(e).__name__, e)})
        os._exit(1)
    ready = {"ready": True}
    if cold_trace is not None:
        import time

        cold_trace.append(("handler", time.monotonic() - setup["t0"]))
        ready["trace"] = [(n, round(t * 1e3, 3)) for n, t in cold_trace]
    if _TRACE:
        _mark("import")
        # (mark, wall ms since fork, CPU ms since fork, minor faults since fork)
        ready["trace"] = [(n, round((t - _T[0][1]) * 1e3, 3), round((c - _T[0][2]) * 1e3, 3), f - _T[0][3]) for n, t, c, f in _T]
    send_msg_fd(fd, ready)
    while True:
        try:
            req = recv_msg_fd(fd)
        except EOFError:
            os._exit(0)
        try:
            result = fn(req.get("event"))
        except Exception as e:  # noqa: BLE001
            import traceback

            tb = traceback.format_exc(limit=8)
            send_msg_fd(fd, {"ok": False, "kind": "raised", "error": "%s: %s" % (type(e).__name__, e), "traceback": tb})
            continue
        try:
            out = _dumps({"ok": True, "result": result}).encode()
        except (TypeError, ValueError, RecursionError) as e:
            send_msg_fd(fd, {"ok": False, "kind": "result", "error": "result is not JSON serialisable: %s" % e})
            continue
        _write_all_fd(fd, _hdr(len(out)) + out)


# ---------------------------------------------------------------- zygote

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
MADV_POPULATE_WRITE = 23
PR_SET_DUMPABLE = 4
# What a zygote keeps (effective and permitted) for forking sandboxes, in the user namespace
# of its own that the engine starts it in: the capabilities count there, never on the host.
# setgroups/setresgid (CAP_SETGID 6), setresuid (CAP_SETUID 7), chroot (CAP_SYS_CHROOT 18),
# unshare/setns/sethostname and a sandbox's /proc (CAP_SYS_ADMIN 21). Not CAP_KILL,
# CAP_SYS_PTRACE, CAP_DAC_OVERRIDE and the others: with those, a package a zygote imports could
# signal, trace or write over the sandboxes and zygotes of other handlers in that namespace.
ZYGOTE_CAPS = (1 << 6) | (1 << 7) | (1 << 18) | (1 << 21)


class _Sys:
    """The few syscalls the stdlib of python 3.11 lacks (unshare, prctl), via ctypes."""

    def __init__(self):
        import ctypes

        self.ctypes = ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        self.SockFprog = SockFprog

    def check(self, r, what):
        if r != 0:
            e = self.ctypes.get_errno()
            raise OSError(e, "%s: %s" % (what, os.strerror(e)))

    def unshare(self, flags):
        self.check(self.libc.unshare(flags), "unshare")

    def setns(self, fd, nstype):
        self.check(self.libc.setns(fd, nstype), "setns")

    def prctl(self, op, a=0, b=0, c=0, d=0):
        c_ul = self.ctypes.c_ulong
        return self.libc.prctl(op, c_ul(a), c_ul(b), c_ul(c), c_ul(d))

    def mount_proc(self):
        flags = 0x2 | 0x4 | 0x8  # MS_NOSUID | MS_NODEV | MS_NOEXEC
        self.check(self.libc.mount(b"proc", b"/proc", b"proc", self.ctypes.c_ulong(flags), None), "mount /proc")

    def prepare_seccomp(self, bpf):
        """Build the sock_fprog once (in the zygote); children only make the prctl call."""
        ctypes = self.ctypes
        self._bpf_buf = ctypes.create_string_buffer(bpf, len(bpf))
        self._prog = self.SockFprog(len(bpf) // 8, ctypes.cast(self._bpf_buf, ctypes.c_void_p))
        self._prog_ref = ctypes.byref(self._prog)

    def seccomp(self, bpf):
        if not bpf:
            return
        if getattr(self, "_prog_ref", None) is None:
            self.prepare_seccomp(bpf)
        r = self.libc.prctl(PR_SET_SECCOMP, self.ctypes.c_ulong(SECCOMP_MODE_FILTER), self._prog_ref, 0, 0)
        self.check(r, "seccomp")

    def keep_caps(self, mask):
        """capset(2): effective and permitted = `mask` (capabilities 0-31), inheritable none."""
        ctypes = self.ctypes

        class Hdr(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                        ("inheritable", ctypes.c_uint32)]

        hdr = Hdr(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit halves
        data = (Data * 2)()
        data[0].effective = data[0].permitted = mask & 0xFFFFFFFF
        self.check(self.libc.capset(ctypes.byref(hdr), data), "capset")

    def drop_bounding_set(self):
        for cap in range(0, 64):
            if self.prctl(PR_CAPBSET_DROP, cap) != 0:
                break

    def populate_write(self, ranges):
        """Pre-fault (copy on write) these (address, length) ranges: MADV_POPULATE_WRITE, as
        if each page were written, without writing; what is not mapped is skipped (EFAULT /
        ENOMEM, not a signal)."""
        madvise = self.libc.madvise
        for a, n in ranges:
            madvise(a, n, MADV_POPULATE_WRITE)

    def warm(self):
        """Resolve the libc symbols children use (ctypes caches them on first access)."""
        for n in ("unshare", "setns", "mount", "prctl"):
            getattr(self.libc, n)
        c = self.ctypes
        self.libc.madvise.argtypes = [c.c_void_p, c.c_size_t, c.c_int]


_T = []


def _mark(name):
    if _TRACE:
        import time

        import resource

        ru = resource.getrusage(resource.RUSAGE_SELF)
        _T.append((name, time.perf_counter(), ru.ru_utime + ru.ru_stime, ru.ru_minflt))


_TRACE = False
# Address ranges the engine learned from the first request of one of our sandboxes (op "hot"):
# spares forked ahead of time pre-fault them (see Engine::learn_prewarm).
_HOT = ()


def early_sandbox(sysc, flags, prewarm=True, hostname="sandbox"):
    """Spare child, right after fork + cgroup join: the namespaces other than pid (the zygote
    forked it straight into a new pid namespace: it is pid 1 there). Runs ahead of any
    request."""
    flags &= ~CLONE_NEWPID
    if flags:
        sysc.unshare(flags)
    _mark("unshare")
    if flags & CLONE_NEWUTS:
        import socket

        socket.sethostname(hostname)
    if prewarm:
        _prewarm()
        _mark("prewarm")
        if _HOT:
            sysc.populate_write(_HOT)
            _mark("hot")


def _prewarm():
    """Walk the paths a handler's import and first request will take, while still a spare:
    the copy-on-write faults (reference counts written into pages shared with the zygote)
    are paid here rather than on the request path."""
    try:
        __import__("_sprout_no_such_module")
    except ImportError:
        pass
    ns = {"__name__": "f"}
    exec(compile("def f(event):\n    return {'echo': event}\n", "/handler/f.py", "exec"), ns)
    _loads(_dumps(ns["f"]({"a": [1, "x", 2.5, None, True, {"b": -1}]})).encode())


def _own_output(fd):
    """The sandbox's stdout/stderr become its own log pipe (the engine drains and tags it):
    until now they were the zygote's. What the inherited buffers still hold goes to the
    zygote's pipe first."""
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001
            pass
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def become_sandbox(sysc, setup, root_fd, bpf):
    """When assigned a handler: chroot into its root, late namespaces (network), identity,
    no_new_privs, seccomp."""
    _mark("assigned")
    os.fchdir(root_fd)
    os.chroot(".")
    os.chdir("/")
    os.close(root_fd)
    _mark("chroot")
    late = int(setup.get("unshare_late", 0))
    if late:
        sysc.unshare(late)
    if late & CLONE_NEWNS:
        # Our own mount namespace and pid namespace (we are its pid 1): a private /proc.
        sysc.mount_proc()
    # The zygote dropped the bounding set and supplementary groups once for all its children
    # (zygote_hardening); checked with one call, redone only if it did not.
    if sysc.prctl(PR_CAPBSET_READ, 21) != 0:  # CAP_SYS_ADMIN still bounded
        sysc.drop_bounding_set()
        os.setgroups([])
    uid = int(setup.get("uid", 65534))
    gid = int(setup.get("gid", 65534))
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    sysc.check(sysc.prctl(PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")
    _mark("identity")
    sysc.seccomp(bpf)
    os.umask(0o022)
    _mark("seccomp")


def zygote_hardening(sysc, bpf, env):
    """Once per zygote instead of once per sandbox: what every child would do the same way.
    The capability bounding set and supplementary groups go (the zygote keeps its effective
    capabilities: chroot, unshare, cgroup joins), no_new_privs is set (nothing here execs
    anything that should gain privileges), the seccomp program is built, the libc symbols
    resolved, the base environment set. Children inherit all of it over fork."""
    sysc.drop_bounding_set()
    os.setgroups([])
    sysc.check(sysc.prctl(PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")
    # Only what forking sandboxes needs, and nobody (but root on the host) may trace us or
    # read our memory: the packages imported next are code of the handlers' choosing.
    sysc.keep_caps(ZYGOTE_CAPS)
    sysc.check(sysc.prctl(PR_SET_DUMPABLE, 0), "dumpable")
    if bpf:
        sysc.prepare_seccomp(bpf)
    sysc.warm()
    if env:
        _set_env(env)


def _import_all(names):
    imported, failed = [], []
    for name in names:
        try:
            __import__(name)
            imported.append(name)
        except BaseException as e:  # noqa: BLE001 - a broken package must not kill the zygote
            failed.append("%s: %s" % (name, e))
    # The paths every sandbox takes (a failing import, compile + exec of a handler module, a
    # JSON round trip) run once here: their first-use allocations and caches are then part
    # of the zygote, shared with every child instead of redone in each.
    _prewarm()
    global _ENV
    real_os = sys.modules.get("os")
    _ENV = dict(real_os.environ) if real_os is not None else None
    import gc

    gc.collect()
    gc.freeze()  # keep pre-imported objects out of the children's GC scans (fewer COW faults)
    return imported, failed


def _enter_root(root_fd):
    # fchdir to a directory outside the current root, then chroot there: how a (root) zygote
    # moves into the root of a child zygote with more packages.
    os.fchdir(root_fd)
    os.chroot(".")
    os.chdir("/")
    os.close(root_fd)


_PIDNS = -1


def _text_ptes(sysc, proc):
    """Let fork copy the page table entries of our code instead of every child faulting them
    in again. fork copies the entries of a mapping only when it has an anon_vma (it has
    anonymous pages); the read-only private file mappings (text and read-only data of
    python and its libraries) have none, so each child took a page fault (with fault-around)
    for every part of python's code it ran again: ~90 of its ~430 faults in the rate run.
    Each such mapping gets an anon_vma here: made writable for a moment, one byte rewritten
    with its own value (that page becomes an anonymous copy, the same bytes), protection
    restored. Mappings the kernel will not make writable (W^X policies) are left as they
    are. Root zygote only (it alone has the host's /proc; its children inherit the result)."""
    fd = os.open("self/maps", os.O_RDONLY, dir_fd=proc)
    try:
        chunks = []
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    ctypes = sysc.ctypes
    mprotect = sysc.libc.mprotect
    mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
        f = line.split()
        # private, not writable, backed by a file: r--p / r-xp
        if len(f) < 6 or not f[5].startswith("/") or f[1][3] != "p" or "w" in f[1] or f[1][0] != "r":
            continue
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        prot = 1 | (4 if f[1][2] == "x" else 0)  # PROT_READ | PROT_EXEC
        if mprotect(lo, hi - lo, prot | 2) != 0:  # + PROT_WRITE
            continue
        b = ctypes.c_ubyte.from_address(lo)
        b.value = b.value
        if mprotect(lo, hi - lo, prot) != 0:
            # Never go on with writable code: this zygote (and all it would fork) stops here.
            os.write(2, b"sprout zygote: cannot make code read-only again; exiting\n")
            os._exit(70)


def zygote(ctl):
    import signal

    global _PIDNS
    # We are pid 1 of the zygotes' pid namespace: of the signals another process in it sends
    # us, only those we handle arrive, and python handles SIGINT (KeyboardInterrupt). Every
    # zygote is the same user, so a package imported by another zygote could end us (and
    # with us every zygote-forked sandbox) with it. Ignored; sandboxes get python's handler
    # back (_spare_child).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The engine moved us into our cgroup before it sent this.
    setup, fds = recv_msg(ctl, 16)
    root_fd = fds[0]
    for fd in fds[1:]:
        os.close(fd)
    # Our own pid namespace (no /proc once chrooted): after forking a sandbox into a new pid
    # namespace, setns back to it resets the namespace our next children are created in.
    _PIDNS = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    # The host's /proc, for our own maps once everything is imported (closed before the
    # first fork: no child ever holds it).
    proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if setup.get("text_ptes") else -1
    _enter_root(root_fd)
    sysc = _Sys()
    bpf = bytes.fromhex(setup.get("seccomp", ""))
    zygote_hardening(sysc, bpf, setup.get("env"))
    for p in reversed(setup.get("paths", [])):
        sys.path.insert(0, p)
    imported, failed = _import_all(setup.get("preload", []))
    if proc >= 0:
        try:
            _text_ptes(sysc, proc)
        except Exception:  # noqa: BLE001 - an optimisation only
            pass
        finally:
            os.close(proc)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # auto-reap forked children
    send_msg(ctl, {"ready": True, "imported": imported, "failed": failed, "pid": os.getpid()})
    zygote_loop(ctl, sysc, bpf)


def _holder(msg, fds, sysc, bpf):
    """Pid 1 of a child zygote's pid namespace: forks the child zygote (pid 2 there) and then
    only reaps, until nothing is left in the namespace. The zygote ending (evicted, failed)
    ends the zygote alone: the sandboxes it forked are orphans of ours and run on, as they
    would in a shared namespace (a namespace's pid 1 exiting kills everything in it)."""
    global _PIDNS
    os.close(_PIDNS)
    _PIDNS = -1
    pid = os.fork()
    if pid == 0:
        zygote_loop(child_zygote(msg, fds), sysc, bpf)
        os._exit(0)
    for fd in fds:
        os.close(fd)
    # SIGCHLD is ignored (inherited from the root zygote): children are reaped as they exit,
    # and wait() returns only once there are none left (orphans are reparented to us).
    while True:
        try:
            os.wait()
        except ChildProcessError:
            os._exit(0)
        except InterruptedError:
            pass


def child_zygote(msg, fds):
    """A zygote forked from this one (SOCK's zygote tree), pid 2 of a pid namespace of its
    own (pid 1 is _holder): the engine moves it into its own cgroup first (what it imports is
    charged there; what it shares with us stays ours), then it moves into a root that also has
    its extra packages, imports only those and serves forks on its own socket."""
    global _HOT, _PIDNS
    ctl_fd, root_fd = fds[0], fds[1]
    # Here (always pid 2 of our namespace): the engine places us, then says so.
    os.write(ctl_fd, b"F")
    _placed_wait(ctl_fd)
    _HOT = ()  # our parent's pages, not ours
    for fd in fds[2:]:
        os.close(fd)
    import socket

    ctl = socket.socket(fileno=ctl_fd)
    try:
        # Our own namespace, to set back after forking each spare into a new one.
        _PIDNS = os.pidfd_open(os.getpid())
        _enter_root(root_fd)
        for p in reversed(msg.get("paths", [])):
            if p not in sys.path:
                sys.path.insert(0, p)
        imported, failed = _import_all(msg.get("preload", []))
        send_msg(ctl, {"ready": True, "imported": imported, "failed": failed, "pid": os.getpid()})
    except BaseException as e:  # noqa: BLE001
        try:
            send_msg(ctl, {"ready": False, "error": "child zygote: %s" % e})
        finally:
            os._exit(1)
    return ctl


def zygote_loop(ctl, sysc, bpf):
    import signal
    import socket

    while True:
        try:
            msg, fds = recv_msg(ctl, MAX_FDS)
        except EOFError:
            os._exit(0)
        op = msg.get("op")
        if op == "hot":
            global _HOT
            for fd in fds:
                os.close(fd)
            _HOT = tuple((int(a), int(n)) for a, n in msg.get("ranges", ()))
            send_msg(ctl, {"ok": True, "ranges": len(_HOT)})
            continue
        if op == "fork":
            _fork_spares(ctl, sysc, bpf, msg, fds)
            continue
        if op != "zygote" or len(fds) < 2:
            for fd in fds:
                os.close(fd)
            send_msg(ctl, {"error": "bad zygote request"})
            continue
        # A child zygote (SOCK's zygote tree), in a pid namespace of its own: code of the
        # packages it imports can name no process of ours, of another zygote, or of a sandbox
        # forked from one (all the same host users: it could signal them). Its pid 1 is a
        # holder (_holder), the zygote its child.
        pid, err = -1, None
        try:
            sysc.unshare(CLONE_NEWPID)
            try:
                pid = os.fork()
            except OSError as e:
                err = "fork: %s" % e
            if pid == 0:
                # Never falls back into our loop.
                try:
                    ctl.close()
                    _holder(msg, fds, sysc, bpf)
                finally:
                    os._exit(0)
            try:
                sysc.setns(_PIDNS, CLONE_NEWPID)
            except OSError:
                os._exit(1)  # every later child would land in its namespace: let the engine restart us
        except OSError as e:
            err = "unshare(CLONE_NEWPID): %s" % e
        for fd in fds:
            os.close(fd)
        send_msg(ctl, {"pid": pid} if pid > 0 else {"error": err})

MAX_FDS = 64  # fds one control message may carry (a batch of spares: a socket each)


def _placed_wait(fd):
    """Wait until the engine has moved us into our cgroup: one byte, b"P", on our socket `fd`
    (raw, ahead of the framed messages; EOF: we were dropped). As little as possible runs
    before it: every page we write until then stays charged to our parent's cgroup."""
    b = os.read(fd, 1)
    if b != b"P":
        if not b:
            os._exit(0)
        raise RuntimeError("not placed: %r" % b)


def _fork_spares(ctl, sysc, bpf, msg, fds):
    """Fork one spare per fd group (msg["nfds"]: how many of `fds` each takes, in order: its
    socket first), each straight into a new pid namespace (the sandbox is
    its pid 1): unshare(CLONE_NEWPID) only sets the namespace of our *next* child, and we setns
    back to ours right after each fork (os.fork cannot take clone flags; a second fork inside
    the child cost a whole Python address-space copy and teardown per sandbox). Several forks
    in one message: what we do per message (receive, decode, reply; Python, and its
    copy-on-write faults after each fork) is paid once per batch. Replies {"pids": [...]} in
    order, with "error" when not all were forked."""
    groups, i = [], 0
    for k in msg.get("nfds") or [len(fds)]:
        groups.append(fds[i : i + int(k)])
        i += int(k)
    if i != len(fds) or not groups or not all(groups):
        for fd in fds:
            os.close(fd)
        send_msg(ctl, {"error": "bad zygote request"})
        return
    newpid = int(msg.get("unshare", 0)) & CLONE_NEWPID
    pids, err = [], None
    for g in groups:
        if newpid:
            try:
                sysc.unshare(CLONE_NEWPID)
            except OSError as e:
                err = "unshare(CLONE_NEWPID): %s" % e
                break
        try:
            pid = os.fork()
        except OSError as e:
            pid, err = -1, "fork: %s" % e
        if pid == 0:
            # A forked child must never fall back into the zygote's loop (it would fork and
            # answer the engine as if it were the zygote). It keeps only its own fds.
            try:
                # First of all, before we touch (copy on write) more of the zygote's pages:
                # wait until the engine has moved us into the sandbox's cgroup. Until then
                # what we dirty is charged to the zygote's cgroup, for as long as it lives.
                _placed_wait(g[0])
                for fd in fds:
                    if fd not in g:
                        os.close(fd)
                _spare_child(ctl, sysc, bpf, msg, g)
            except BaseException:  # noqa: BLE001
                try:
                    import traceback

                    traceback.print_exc()
                finally:
                    os._exit(1)
            os._exit(1)
        if newpid:
            try:
                sysc.setns(_PIDNS, CLONE_NEWPID)
            except OSError:
                os._exit(1)  # every later child would land in a stale namespace: let the engine restart us
        if pid < 0:
            break
        pids.append(pid)
    for fd in fds:
        os.close(fd)
    reply = {"pids": pids}
    if err:
        reply["error"] = err
    send_msg(ctl, reply)


def _spare_child(ctl, sysc, bpf, msg, fds):
    """A freshly forked spare: fds = [sandbox socket]. Never returns."""
    import signal
    import socket

    os.close(_PIDNS)
    for fd in fds[1:]:
        os.close(fd)
    global _TRACE
    _TRACE = bool(msg.get("trace"))
    _mark("fork")
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ctl.close()
    sock = socket.socket(fileno=fds[0])
    fd = fds[0]
    try:
        early_sandbox(sysc, int(msg.get("unshare", 0)), bool(msg.get("prewarm", True)))
        # A spare: wait for a handler (root dir fd + setup), or EOF when discarded.
        setup, rfds = recv_msg(sock, 4)
        if not rfds:
            raise RuntimeError("no root fd")
        if len(rfds) > 1:
            _own_output(rfds[1])
        become_sandbox(sysc, setup, rfds[0], bpf)
    except EOFError:
        os._exit(0)
    except BaseException as e:  # noqa: BLE001
        try:
            send_msg(sock, {"ready": False, "error": "sandbox setup: %s" % e})
        finally:
            os._exit(1)
    sock.detach()
    serve(fd, setup)
    os._exit(0)


def main():
    mode, fd = sys.argv[1], int(sys.argv[2])
    if mode == "zygote":
        import socket

        if len(sys.argv) > 3:
            os.close(int(sys.argv[3]))  # the fd this script was read from

        zygote(socket.socket(fileno=fd))
    elif mode == "sandbox":
        serve(fd, recv_msg_fd(fd))
    else:
        raise SystemExit("usage: sprout_zygote.py zygote|sandbox FD")


if __name__ == "__main__":
    main()
