#!/usr/bin/python3
"""A fake org.freedesktop.systemd1 for sprout's systemd cgroup driver test.

It answers the part of systemd's D-Bus API that OCI runtimes use (StartTransientUnit,
StopUnit, ResetFailedUnit, GetUnit, SetUnitProperties, JobRemoved, the Version property) on a private
dbus-daemon, and does with cgroups what systemd would, but only below the TEST
PROCESS'S OWN cgroup:

- at start it makes <own cgroup>/<tag>/init.scope in every mounted hierarchy and moves
  itself there, like systemd (PID 1) lives in /init.scope: the runtime finds systemd's
  root as "the systemd process's cgroup minus init.scope";
- StartTransientUnit makes <root>/<slice path>/<unit> in the hierarchies systemd manages
  on a hybrid/v1 host (unified, name=systemd, memory, cpu, cpuacct, pids, blkio,
  devices; on pure v2 the one tree), writes the resource properties, moves the PIDs in
  and emits JobRemoved(id, job, unit, "done") after replying;
- StopUnit kills what is left in the scope (only container processes the test started),
  removes the scope's (and the slices' it made) directories, emits JobRemoved;
- every call is appended as one JSON line to --log, so the test can check exactly which
  properties the runtime sent.

Test hooks: a unit name containing "dbuserr" gets an InvalidArgs error reply; one
containing "jobfail" gets a job that ends with result "failed".

Usage: fake_systemd.py --address ADDR --tag NAME --log FILE --ready FILE
On SIGTERM/SIGINT: stops every unit, moves itself back, removes <own>/<tag>, exits.
"""

import argparse
import errno
import json
import os
import signal
import sys
import time

import dbus
import dbus.bus
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

ROOT = "/sys/fs/cgroup"
IFACE = "org.freedesktop.systemd1.Manager"
PATH = "/org/freedesktop/systemd1"
INFINITY = 2**64 - 1
# The manager's Version property (org.freedesktop.DBus.Properties.Get): a systemd new enough
# for every property runc sends (CPUQuotaPeriodUSec, AllowedCPUs, CPUWeight=0).
VERSION = "257.9-fake"
MANAGED = {"unified", "name=systemd", "memory", "cpu", "cpuacct", "pids", "blkio", "devices"}


def is_cgroup2(p):
    return (" %s cgroup2 " % p) in open("/proc/self/mounts").read()


def hierarchies():
    """[(names set, mount dir, own path)] from /proc/self/cgroup."""
    out = []
    v2 = is_cgroup2(ROOT)
    for line in open("/proc/self/cgroup").read().splitlines():
        _, ctrls, path = line.split(":", 2)
        if ctrls == "":
            mount = ROOT if v2 else os.path.join(ROOT, "unified")
            names = {"unified"}
        elif ctrls == "name=systemd":
            mount, names = os.path.join(ROOT, "systemd"), {"name=systemd"}
        else:
            mount, names = os.path.join(ROOT, ctrls), set(ctrls.split(","))
        if os.path.isdir(mount):
            out.append((names, mount, path))
    return out


def write(path, value):
    with open(path, "w") as f:
        f.write(str(value))


def copy_cpuset(d):
    parent = os.path.dirname(d)
    for f in ("cpuset.cpus", "cpuset.mems"):
        try:
            write(os.path.join(d, f), open(os.path.join(parent, f)).read().strip())
        except OSError:
            pass


def expand_slice(s):
    if s == "-.slice":
        return ""
    stem = s[: -len(".slice")]
    parts, acc = [], ""
    for c in stem.split("-"):
        acc = c if not acc else acc + "-" + c
        parts.append(acc + ".slice")
    return "/".join(parts)


def plain(v):
    if isinstance(v, dbus.Boolean):
        return bool(v)
    if isinstance(v, (dbus.Array, list)):
        return [plain(x) for x in v]
    if isinstance(v, (dbus.Struct, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, str):
        return str(v)
    if isinstance(v, int):
        return int(v)
    return repr(v)


class Fake(dbus.service.Object):
    def __init__(self, bus, log, hiers, tag):
        super().__init__(bus, PATH)
        self.log_path = log
        self.tag = tag
        self.units = {}  # name -> {"dirs": [...], "state": "active"|"failed", "made": [...]}
        self.jobs = 0
        # (names, mount, systemd root dir) per hierarchy
        self.roots = []
        self.orig = []
        for names, mount, own in hiers:
            base = os.path.join(mount, own.lstrip("/"), tag)
            init = os.path.join(base, "init.scope")
            for d in (base, init):
                os.mkdir(d)
                if "cpuset" in names:
                    copy_cpuset(d)
            write(os.path.join(init, "cgroup.procs"), os.getpid())
            self.roots.append((names, mount, base))
            self.orig.append(os.path.join(mount, own.lstrip("/")))

    def log(self, **kw):
        with open(self.log_path, "a") as f:
            f.write(json.dumps(kw) + "\n")

    def managed(self):
        return [(n, m, b) for n, m, b in self.roots if n & MANAGED]

    def job(self, unit, result):
        self.jobs += 1
        jid = self.jobs
        path = "%s/job/%d" % (PATH, jid)
        # Emitted after the method reply went out, as systemd does.
        GLib.idle_add(lambda: (self.JobRemoved(jid, path, unit, result), False)[1])
        return dbus.ObjectPath(path)

    def apply(self, dirs, props):
        for names, d in dirs:
            def set_(f, v):
                p = os.path.join(d, f)
                if os.path.exists(p):
                    write(p, v)
            if "memory" in names:
                for k in ("MemoryLimit", "MemoryMax"):
                    if k in props:
                        v = int(props[k])
                        set_("memory.limit_in_bytes", -1 if v == INFINITY else v)
                        set_("memory.max", "max" if v == INFINITY else v)
            if "cpu" in names:
                if "CPUShares" in props:
                    set_("cpu.shares", int(props["CPUShares"]))
                if "CPUQuotaPerSecUSec" in props:
                    v = int(props["CPUQuotaPerSecUSec"])
                    period = int(props.get("CPUQuotaPeriodUSec", 100000))
                    set_("cpu.cfs_period_us", period)
                    set_("cpu.cfs_quota_us", -1 if v == INFINITY else v * period // 1000000)
            if "pids" in names and "TasksMax" in props:
                v = int(props["TasksMax"])
                set_("pids.max", "max" if v == INFINITY else v)

    @dbus.service.method(IFACE, in_signature="ssa(sv)a(sa(sv))", out_signature="o")
    def StartTransientUnit(self, name, mode, props, aux):
        props = {str(k): v for k, v in props}
        self.log(method="StartTransientUnit", name=str(name), mode=str(mode),
                 props={k: plain(v) for k, v in props.items()}, aux=plain(aux))
        if "dbuserr" in name:
            raise dbus.exceptions.DBusException(
                "fake systemd refuses %s" % name, name="org.freedesktop.DBus.Error.InvalidArgs")
        if name in self.units:
            raise dbus.exceptions.DBusException(
                "Unit %s was already loaded or has a fragment file." % name,
                name="org.freedesktop.systemd1.UnitExists")
        if name.endswith(".slice"):
            rel = expand_slice(str(name))
        else:
            rel = os.path.join(expand_slice(str(props.get("Slice", "system.slice"))), str(name))
        dirs, made = [], []
        for names, _mount, base in self.managed():
            d = base
            for c in rel.split("/"):
                d = os.path.join(d, c)
                if not os.path.isdir(d):
                    os.mkdir(d)
                    made.append(d)
                    if "cpuset" in names:
                        copy_cpuset(d)
            dirs.append((names, d))
        self.apply(dirs, props)
        for pid in props.get("PIDs", []):
            for _names, d in dirs:
                write(os.path.join(d, "cgroup.procs"), int(pid))
        failed = "jobfail" in name
        self.units[str(name)] = {"dirs": dirs, "made": made,
                                 "state": "failed" if failed else "active"}
        return self.job(str(name), "failed" if failed else "done")

    def remove(self, u):
        for _names, d in u["dirs"]:
            procs = os.path.join(d, "cgroup.procs")
            deadline = time.time() + 5
            while os.path.exists(procs) and time.time() < deadline:
                pids = [int(p) for p in open(procs).read().split()]
                if not pids:
                    break
                for p in pids:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.01)
        scopes = {d for _n, d in u["dirs"]}
        for d in sorted(set(u["made"]) | scopes, key=len, reverse=True):
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError as e:
                # A slice still used by another unit stays, as in systemd.
                if d in scopes or e.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    raise

    def no_such(self, name):
        return dbus.exceptions.DBusException(
            "Unit %s not loaded." % name, name="org.freedesktop.systemd1.NoSuchUnit")

    @dbus.service.method(IFACE, in_signature="ss", out_signature="o")
    def StopUnit(self, name, mode):
        name = str(name)
        self.log(method="StopUnit", name=name, mode=str(mode))
        u = self.units.get(name)
        if u is None:
            raise self.no_such(name)
        self.remove(u)
        del self.units[name]
        return self.job(name, "done")

    @dbus.service.method(IFACE, in_signature="s", out_signature="")
    def ResetFailedUnit(self, name):
        name = str(name)
        self.log(method="ResetFailedUnit", name=name)
        u = self.units.get(name)
        if u is None:
            raise self.no_such(name)
        if u["state"] == "failed":
            self.remove(u)
            del self.units[name]

    @dbus.service.method(IFACE, in_signature="s", out_signature="o")
    def GetUnit(self, name):
        name = str(name)
        if name not in self.units:
            raise self.no_such(name)
        return dbus.ObjectPath("%s/unit/%s" % (PATH, name.replace("-", "_2d").replace(".", "_2e")))

    @dbus.service.method(IFACE, in_signature="sba(sv)", out_signature="")
    def SetUnitProperties(self, name, runtime, props):
        name = str(name)
        props = {str(k): v for k, v in props}
        self.log(method="SetUnitProperties", name=name, runtime=bool(runtime),
                 props={k: plain(v) for k, v in props.items()})
        u = self.units.get(name)
        if u is None:
            raise self.no_such(name)
        self.apply(u["dirs"], props)

    @dbus.service.method("org.freedesktop.DBus.Properties", in_signature="ss", out_signature="v")
    def Get(self, iface, name):
        self.log(method="Get", interface=str(iface), property=str(name))
        if str(iface) == IFACE and str(name) == "Version":
            return dbus.String(VERSION, variant_level=1)
        raise dbus.exceptions.DBusException(
            "no property %s.%s in this fake" % (iface, name),
            name="org.freedesktop.DBus.Error.UnknownProperty")

    @dbus.service.signal(IFACE, signature="uoss")
    def JobRemoved(self, id, job, unit, result):
        pass

    def shutdown(self):
        for u in list(self.units.values()):
            try:
                self.remove(u)
            except OSError:
                pass
        self.units.clear()
        for (names, _m, base), orig in zip(self.roots, self.orig):
            try:
                write(os.path.join(orig, "cgroup.procs"), os.getpid())
            except OSError:
                pass
        for _names, _m, base in self.roots:
            for dirpath, dirnames, _files in sorted(os.walk(base), key=lambda t: -len(t[0])):
                try:
                    os.rmdir(dirpath)
                except OSError as e:
                    print("fake-systemd: cannot remove %s: %s" % (dirpath, e), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--ready", required=True)
    a = ap.parse_args()
    DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(a.address)
    fake = Fake(bus, a.log, hierarchies(), a.tag)
    loop = GLib.MainLoop()

    def stop(*_):
        fake.shutdown()
        loop.quit()
        return False

    GLib.unix_signal_add(GLib.PRIORITY_HIGH, signal.SIGTERM, stop)
    GLib.unix_signal_add(GLib.PRIORITY_HIGH, signal.SIGINT, stop)
    try:
        _name = dbus.service.BusName("org.freedesktop.systemd1", bus, do_not_queue=True)
        roots = {}
        for names, _m, base in fake.roots:
            for n in names:
                roots[n] = base
        tmp = a.ready + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(), "roots": roots}, f)
        os.rename(tmp, a.ready)
        loop.run()
    except BaseException:
        fake.shutdown()
        raise


if __name__ == "__main__":
    main()
