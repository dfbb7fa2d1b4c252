//! The systemd cgroup driver (`--systemd-cgroup`, `linux.cgroupsPath` = `slice:prefix:name`).
//!
//! The container's cgroup is a transient scope unit `prefix-name.scope` in `slice`, made by
//! systemd itself through its D-Bus API (`org.freedesktop.systemd1.Manager`), as runc and
//! crun do:
//!
//! 1. [`prepare`] (from `Manager::create`): connect to systemd (its private socket
//!    /run/systemd/private as root, else the system bus; rootless, the user's own manager:
//!    `$XDG_RUNTIME_DIR/systemd/private`, else the session bus; `SPROUT_SYSTEMD_BUS`
//!    overrides with the address of a bus that has `org.freedesktop.systemd1` on it) and find
//!    where systemd's tree hangs in each hierarchy: the cgroup of the systemd process,
//!    without a trailing `init.scope` (runc's rule, from /proc/1/cgroup; "/" on an ordinary
//!    host); for a user manager its `ControlGroup` property
//!    (`/user.slice/user-1000.slice/user@1000.service`), which `slice` is relative to.
//!    Nothing is made yet: a scope cannot exist without a process.
//! 2. `Manager::apply` before the unit exists only checks the resources and keeps them.
//! 3. [`start`] (from `Manager::add_pid`, i.e. once the init exists and before it runs):
//!    `StartTransientUnit(name, "replace", properties, [])` with `PIDs=[pid]` (systemd puts
//!    the init into the scope: the placement is systemd's, as with crun), `Delegate=true`,
//!    `Description`, `DefaultDependencies=false`, accounting on, the container's
//!    `org.systemd.property.*` annotations ([`annotations`]), and the resource properties
//!    runc sets ([`props`]: MemoryLimit or MemoryMax/MemoryLow/MemorySwapMax, CPUShares or
//!    CPUWeight, CPUQuotaPerSecUSec rounded up to 10ms, TasksMax, BlockIOWeight or IOWeight,
//!    the device allowlist, the `unified` keys systemd has properties for, and where
//!    systemd's `Version` allows them CPUQuotaPeriodUSec, AllowedCPUs/AllowedMemoryNodes and
//!    CPUWeight=0 for cpu.idle). A
//!    `UnitExists` answer resets the failed unit and retries once (a leftover of a crashed
//!    container). Then wait for the job's `JobRemoved` signal (result "done"), check that
//!    /proc/PID/cgroup shows the scope, make and join the hierarchies systemd does not
//!    manage (cpuset, freezer, ... on v1), and write every resource through cgroupfs, as
//!    runc's systemd manager does after setting the unit's properties.
//! 4. [`stop`] (from `Manager::destroy`): `StopUnit(name, "replace")`, wait for the job,
//!    `ResetFailedUnit(name)` (errors ignored), then rmdir the scope's directories that
//!    systemd did not remove (the unmanaged hierarchies). `NoSuchUnit` is not an error.
//! 5. `update` (a Manager loaded from state.json): `SetUnitProperties(name, true, props)`
//!    then cgroupfs, as runc.

mod annotations;
pub(crate) mod dbus;
mod props;

/// The D-Bus decoder's checks on arbitrary bytes, for the fuzz target (fuzz/, not part of the
/// API): see `dbus::check_decode`.
#[doc(hidden)]
pub use self::dbus::check_decode as fuzz_dbus_decode;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oci_spec::runtime::LinuxResources;
use serde::{Deserialize, Serialize};

use self::dbus::{Addr, Conn, Value};
use self::props::{checked_for_cgroupfs, for_cgroupfs, prop, resource_props, Sd};
use crate::backend::{Backend, Freezer};
use crate::path::SelfCgroup;
use crate::{fs, Error, Layout, Manager, OomEvents, Result, Stats};

/// Environment variable: the D-Bus address (or socket path) of a message bus on which
/// `org.freedesktop.systemd1` answers. Also makes sprout treat systemd as running.
pub const BUS_ENV: &str = "SPROUT_SYSTEMD_BUS";
const PRIVATE_SOCKET: &str = "/run/systemd/private";
const SYSTEM_BUS: &str = "unix:path=/run/dbus/system_bus_socket";
const DEST: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const IFACE: &str = "org.freedesktop.systemd1.Manager";
/// How long one D-Bus call or one job may take (runc waits 30s for a job too).
const TIMEOUT: Duration = Duration::from_secs(30);

/// Whether sprout should talk to systemd: /run/systemd/system exists (sd_booted's test), or
/// [`BUS_ENV`] names a bus.
pub(crate) fn running() -> bool {
    std::env::var_os(BUS_ENV).is_some_and(|v| !v.is_empty())
        || Path::new("/run/systemd/system").is_dir()
}

/// The systemd unit of a container (serialized into state.json with the Manager).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Unit {
    /// `prefix-name.scope` (or `name.slice`).
    pub name: String,
    /// The slice it goes into.
    pub slice: String,
    pub description: String,
    #[serde(skip)]
    pub live: Arc<Mutex<Live>>,
}

/// What one sprout process knows beyond state.json.
#[derive(Debug, Default)]
pub(crate) struct Live {
    /// Made by `Manager::new_in` in this process (a `create`): `apply` defers to `add_pid`.
    /// A Manager loaded from state.json has `false`.
    pub fresh: bool,
    /// The transient unit was started by this process.
    pub started: bool,
    pub conn: Option<Conn>,
    /// Resources given to `apply` before the unit existed.
    pub pending: Option<LinuxResources>,
    /// The `org.systemd.property.*` annotations' properties, for StartTransientUnit.
    pub extra: Vec<Value>,
}

impl Unit {
    pub fn new(name: String, slice: String, container_id: &str) -> Unit {
        Unit {
            name,
            slice,
            description: format!("sprout container {container_id}"),
            live: Arc::new(Mutex::new(Live {
                fresh: true,
                ..Live::default()
            })),
        }
    }

    pub fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_slice(&self) -> bool {
        self.name.ends_with(".slice")
    }

    /// Take the container's `org.systemd.property.*` annotations as extra properties of the
    /// unit it starts (see [`annotations`]); a bad name or value is an error naming it.
    pub(crate) fn set_annotations(
        &self,
        annotations: &std::collections::HashMap<String, String>,
    ) -> Result<()> {
        self.live().extra = annotations::properties(annotations)?;
        Ok(())
    }
}

/// The systemd driver: the unit's life cycle over D-Bus (see the module docs); what systemd
/// leaves to cgroupfs (resources after the unit's properties, the hierarchies it does not
/// manage, the freezer, stats) goes through the cgroupfs driver of the host's layout.
pub(crate) struct Driver;

fn unit_of(m: &Manager) -> &Unit {
    m.systemd
        .as_ref()
        .expect("the systemd driver drives a Manager with a unit")
}

impl Backend for Driver {
    /// [`prepare`]: the scope is made by systemd in `add_pid` (a scope cannot exist without a
    /// process). Where its cgroup exists already (another container's scope of the same name,
    /// a leftover), runc's checks refuse it as with cgroupfs: processes in it, or frozen
    /// (systemd would move the init into the frozen scope and the start would wait for ever).
    fn create(&self, m: &mut Manager, _refuse_frozen: bool) -> Result<()> {
        prepare(m)?;
        crate::cgroupfs::check_existing_empty(m, &[])?;
        crate::cgroupfs::check_existing_not_frozen(m, &[])
    }

    /// Before the unit exists (in `create`) the resources are checked and kept for `add_pid`;
    /// later (`update`) they go to SetUnitProperties, then cgroupfs.
    fn apply(&self, m: &Manager, res: &LinuxResources) -> Result<()> {
        let res = with_current_cpu(m, res);
        // checkBeforeUpdate before systemd is told anything (as runc): SetUnitProperties goes
        // first, and a limit below the usage would have the OOM killer end the container
        // before the cgroupfs write's own check refused it.
        check_memory_before_update(m, &res)?;
        if apply(m, unit_of(m), &res)? {
            return Ok(());
        }
        m.fs_backend().apply(m, &checked_for_cgroupfs(&res))
    }

    /// The first call of a `create` starts the transient unit with `PIDs=[pid]` ([`start`]).
    fn add_pid(&self, m: &Manager, pid: i32) -> Result<()> {
        let u = unit_of(m);
        if must_start(u) {
            return start(m, u, pid);
        }
        m.fs_backend().add_pid(m, pid)
    }

    fn destroy(&self, m: &Manager) -> Result<()> {
        stop(m, unit_of(m))
    }

    fn freezer<'m>(&self, m: &'m Manager) -> Freezer<'m> {
        m.fs_backend().freezer(m)
    }

    fn stats(&self, m: &Manager) -> Result<Stats> {
        m.fs_backend().stats(m)
    }

    fn oom_events(&self, m: &Manager) -> Result<OomEvents> {
        m.fs_backend().oom_events(m)
    }

    /// Not before the unit exists: systemd places the first process.
    fn clone_into(&self, m: &Manager) -> bool {
        !must_start(unit_of(m)) && m.fs_backend().clone_into(m)
    }
}

/// An `update` of the quota alone or of the period alone: the other is the cgroup's current
/// one, which systemd's CPUQuotaPerSecUSec (a rate: quota per period) and the rounded cgroupfs
/// quota need; runc has it from the container's saved config and sends the whole set again.
/// Without it a new period alone would go to systemd as "no quota" (infinity), and systemd
/// would lift the quota. The resources unchanged where both or neither are given, or the
/// cgroup does not exist yet (a `create`).
fn with_current_cpu<'r>(
    m: &Manager,
    res: &'r LinuxResources,
) -> std::borrow::Cow<'r, LinuxResources> {
    use std::borrow::Cow;
    let Some(cpu) = res.cpu().as_ref() else {
        return Cow::Borrowed(res);
    };
    let quota = cpu.quota().filter(|q| *q != 0);
    let period = cpu.period().filter(|p| *p != 0);
    if quota.is_some() == period.is_some() {
        return Cow::Borrowed(res);
    }
    // (quota, period) now: v1 cpu.cfs_quota_us and cpu.cfs_period_us, v2 cpu.max "QUOTA PERIOD"
    // (quota "max": -1).
    let parse_quota = |s: &str| match s.trim() {
        "max" => Some(-1),
        q => q.parse::<i64>().ok(),
    };
    let current = match m.v1_path("cpu") {
        Some(d) => fs::read_at(d, "cpu.cfs_quota_us")
            .ok()
            .and_then(|q| parse_quota(&q))
            .zip(
                fs::read_at(d, "cpu.cfs_period_us")
                    .ok()
                    .and_then(|p| p.trim().parse().ok()),
            ),
        None => m
            .unified_path()
            .and_then(|d| fs::read_at(d, "cpu.max").ok())
            .and_then(|s| {
                let mut it = s.split_whitespace();
                parse_quota(it.next()?).zip(it.next()?.parse::<u64>().ok())
            }),
    };
    let Some((cur_quota, cur_period)) = current else {
        return Cow::Borrowed(res);
    };
    let mut r = res.clone();
    if let Some(c) = r.cpu_mut() {
        if quota.is_none() {
            c.set_quota(Some(cur_quota));
        } else {
            c.set_period(Some(cur_period));
        }
    }
    Cow::Owned(r)
}

/// `memory.checkBeforeUpdate`: refuse a limit (or memory+swap total) at or below what the
/// cgroup uses now, read where the cgroupfs write would (nothing to read before the cgroup
/// exists: a `create`).
fn check_memory_before_update(m: &Manager, res: &LinuxResources) -> Result<()> {
    let Some(mem) = res
        .memory()
        .as_ref()
        .filter(|mem| mem.check_before_update() == Some(true))
    else {
        return Ok(());
    };
    let (dir, file) = match m.v1_path("memory") {
        Some(d) => (d, "memory.usage_in_bytes"),
        None => match m.unified_path() {
            Some(d) => (d, "memory.current"),
            None => return Ok(()),
        },
    };
    crate::resources::check_usage(dir, file, mem.limit(), mem.swap())
}

fn err(msg: impl std::fmt::Display) -> Error {
    Error::Invalid(format!("--systemd-cgroup: {msg}"))
}

/// Where to reach systemd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub addr: Addr,
    /// A message bus (Hello, destinations, AddMatch), not systemd's private socket.
    pub bus: bool,
    /// The user's own systemd manager (`systemd --user`), for a rootless sprout.
    pub user: bool,
}

/// The uid that `id` of this user namespace is on the parent's side, from the namespace's
/// `uid_map` ("inside outside count" lines). `None`: `id` is not mapped.
pub(crate) fn host_id(uid_map: &str, id: u32) -> Option<u32> {
    uid_map.lines().find_map(|l| {
        let f: Vec<u64> = l
            .split_whitespace()
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        let [inside, outside, count] = f[..] else {
            return None;
        };
        let id = u64::from(id);
        (inside <= id && id < inside + count)
            .then(|| u32::try_from(outside + (id - inside)).ok())
            .flatten()
    })
}

/// This process's effective uid as the parent user namespace sees it (the initial one for
/// rootless podman: the user's real uid). The euid itself when it cannot be told.
pub(crate) fn host_euid() -> u32 {
    let euid = rustix::process::geteuid().as_raw();
    std::fs::read_to_string("/proc/self/uid_map")
        .ok()
        .and_then(|m| host_id(&m, euid))
        .unwrap_or(euid)
}

/// Where the user's systemd manager answers, as runc and crun look for it: its private
/// socket `$XDG_RUNTIME_DIR/systemd/private` (direct, no bus daemon: what `systemctl --user`
/// uses), else the session bus (`$DBUS_SESSION_BUS_ADDRESS`, else
/// `unix:path=$XDG_RUNTIME_DIR/bus` when that exists). XDG_RUNTIME_DIR defaults to
/// /run/user/<host uid>. `None`: no user manager to be found.
pub(crate) fn user_target(
    xdg_runtime_dir: Option<&str>,
    session_bus: Option<&str>,
    host_uid: u32,
    exists: impl Fn(&Path) -> bool,
) -> std::result::Result<Option<Target>, String> {
    let dir = match xdg_runtime_dir.filter(|x| !x.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(format!("/run/user/{host_uid}")),
    };
    let private = dir.join("systemd/private");
    if exists(&private) {
        return Ok(Some(Target {
            addr: Addr::Path(private.to_string_lossy().into_owned()),
            bus: false,
            user: true,
        }));
    }
    if let Some(a) = session_bus.filter(|a| !a.is_empty()) {
        return dbus::parse_address(a)
            .map(|addr| {
                Some(Target {
                    addr,
                    bus: true,
                    user: true,
                })
            })
            .map_err(|e| format!("DBUS_SESSION_BUS_ADDRESS: {e}"));
    }
    let bus = dir.join("bus");
    Ok(exists(&bus).then(|| Target {
        addr: Addr::Path(bus.to_string_lossy().into_owned()),
        bus: true,
        user: true,
    }))
}

/// Where to reach systemd: [`BUS_ENV`]; when rootless ([`crate::running_rootless`]) the
/// user's manager ([`user_target`]); else the system manager's private socket
/// /run/systemd/private as root, or the system bus. A rootless sprout with no user manager
/// in sight (root in a user namespace of a container that runs its own systemd: runc's
/// "OwnerUID 0" case) goes to the system manager too.
fn target() -> std::result::Result<Target, String> {
    if let Some(v) = std::env::var_os(BUS_ENV).filter(|v| !v.is_empty()) {
        let v = v.to_string_lossy();
        return dbus::parse_address(&v)
            .map(|addr| Target {
                addr,
                bus: true,
                user: crate::running_rootless(),
            })
            .map_err(|e| format!("{BUS_ENV}: {e}"));
    }
    if crate::running_rootless() {
        let xdg = std::env::var("XDG_RUNTIME_DIR").ok();
        let session = std::env::var("DBUS_SESSION_BUS_ADDRESS").ok();
        if let Some(t) = user_target(xdg.as_deref(), session.as_deref(), host_euid(), |p| {
            p.exists()
        })? {
            return Ok(t);
        }
        if !rustix::process::geteuid().is_root() {
            return Err(format!(
                "rootless, and the user's systemd manager is not to be found (no \
                 $XDG_RUNTIME_DIR/systemd/private, $DBUS_SESSION_BUS_ADDRESS or \
                 $XDG_RUNTIME_DIR/bus; XDG_RUNTIME_DIR={})",
                xdg.as_deref().unwrap_or("(unset)")
            ));
        }
    }
    if rustix::process::geteuid().is_root() && Path::new(PRIVATE_SOCKET).exists() {
        return Ok(Target {
            addr: Addr::Path(PRIVATE_SOCKET.into()),
            bus: false,
            user: false,
        });
    }
    let sys = std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| SYSTEM_BUS.into());
    dbus::parse_address(&sys)
        .map(|addr| Target {
            addr,
            bus: true,
            user: false,
        })
        .map_err(|e| format!("DBUS_SYSTEM_BUS_ADDRESS: {e}"))
}

/// Connect to systemd; on a message bus also subscribe to JobRemoved (AddMatch, and
/// Subscribe: systemd sends its job signals to a bus only while someone is subscribed).
fn connect() -> Result<(Conn, Target)> {
    let t = target().map_err(err)?;
    let addr = &t.addr;
    let who = if t.user {
        "the user's systemd manager"
    } else {
        "systemd"
    };
    let mut c = Conn::connect(addr, t.bus, TIMEOUT, host_euid())
        .map_err(|e| err(format_args!("cannot connect to {who} at {addr}: {e}")))?;
    if t.bus {
        c.call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "AddMatch",
            vec![Value::str(format!(
                "type='signal',sender='{DEST}',path='{PATH}',interface='{IFACE}',member='JobRemoved'"
            ))],
        )
        .map_err(|e| err(format_args!("AddMatch on {addr}: {e}")))?;
        // Best effort: an older or restricted manager still answers the calls.
        let _ = c.call(DEST, PATH, IFACE, "Subscribe", vec![]);
    }
    Ok((c, t))
}

/// The manager's own `ControlGroup` property: the cgroup its units hang below
/// ("/user.slice/user-1000.slice/user@1000.service" for a user manager; runc joins the
/// slice to it the same way).
fn manager_cgroup(c: &mut Conn) -> Option<String> {
    let r = c
        .call(
            DEST,
            PATH,
            "org.freedesktop.DBus.Properties",
            "Get",
            vec![Value::str(IFACE), Value::str("ControlGroup")],
        )
        .ok()?;
    match r.first() {
        Some(Value::Variant(v)) => v.as_str().filter(|s| s.starts_with('/')).map(String::from),
        _ => None,
    }
}

/// systemd's version, the manager's `Version` property ("257.9-1", "v245.4-1.fc32": 257, 245),
/// asked once per process; 0 where it cannot be had (runc's -1: no property that needs a
/// version is sent).
fn version(c: &mut Conn) -> u32 {
    static VERSION: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let r = c.call(
            DEST,
            PATH,
            "org.freedesktop.DBus.Properties",
            "Get",
            vec![Value::str(IFACE), Value::str("Version")],
        );
        match r.ok().as_deref() {
            Some([Value::Variant(v)]) => v.as_str().map_or(0, parse_version),
            _ => 0,
        }
    })
}

/// The leading number of a systemd version string, after any `"` and `v` (0 if none).
pub(crate) fn parse_version(s: &str) -> u32 {
    let t = s.trim_start_matches(['"', 'v']);
    let end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    t[..end].parse().unwrap_or(0)
}

/// The resource properties for `res`; systemd's version asked on `conn` (connecting first if
/// there is none yet) only where a property needs it.
fn props_on(layout: Layout, res: &LinuxResources, conn: &mut Option<Conn>) -> Result<Vec<Value>> {
    let mut ask = || {
        if conn.is_none() {
            *conn = connect().ok().map(|(c, _)| c);
        }
        conn.as_mut().map_or(0, version)
    };
    resource_props(&mut Sd::new(layout, &mut ask), res)
}

/// The pid of the systemd process at the other end.
fn systemd_pid(c: &mut Conn) -> Option<i32> {
    if !c.bus {
        return c.peer_pid();
    }
    let r = c
        .call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "GetConnectionUnixProcessID",
            vec![Value::str(DEST)],
        )
        .ok()?;
    r.first().and_then(Value::as_u32).map(|p| p as i32)
}

/// systemd's root in one hierarchy: its own cgroup there without a trailing `init.scope`.
pub(crate) fn root_of(own: &str) -> &str {
    let t = own.trim_end_matches('/');
    let t = t.strip_suffix("/init.scope").unwrap_or(t);
    if t.is_empty() {
        "/"
    } else {
        t
    }
}

/// `Manager::create` with --systemd-cgroup: connect, and re-root every hierarchy under
/// systemd's own tree. Makes nothing.
pub(crate) fn prepare(m: &mut Manager) -> Result<()> {
    let unit = m.systemd.clone().expect("systemd manager");
    let (mut c, t) = connect()?;
    let own = systemd_pid(&mut c)
        .and_then(|p| fs::read(&PathBuf::from(format!("/proc/{p}/cgroup"))).ok())
        .map(|s| SelfCgroup::parse(&s))
        .unwrap_or_default();
    // A user manager's units hang below its own service's cgroup, which it reports itself
    // (its process may not be visible from here); the hierarchy it tracks processes in.
    let user_root = if t.user { manager_cgroup(&mut c) } else { None };
    // Hierarchies that are not mounted (the cgroupfs `create` drops them the same way).
    m.v1.retain_mut(|h| {
        if h.mount.is_dir() {
            return true;
        }
        match h.alt_mount.take().filter(|a| a.is_dir()) {
            Some(alt) => {
                h.rebase(alt);
                true
            }
            None => false,
        }
    });
    for h in m.v1.iter_mut().chain(m.unified.iter_mut()) {
        let sd = if h.name == "unified" {
            own.unified.as_deref()
        } else {
            own.v1_path(&h.name)
        };
        let tracked = h.name == "name=systemd" || (h.name == "unified" && m.layout == Layout::V2);
        let root = match &user_root {
            Some(r) if tracked => r.as_str(),
            _ => root_of(sd.unwrap_or("/")),
        };
        let rel = h
            .dir
            .strip_prefix(&h.mount)
            .unwrap_or(Path::new(""))
            .to_owned();
        h.base = crate::path::under(&h.mount, root);
        h.dir = h.base.join(rel);
    }
    unit.live().conn = Some(c);
    Ok(())
}

fn conn_or_connect(live: &mut Live) -> Result<Conn> {
    match live.conn.take() {
        Some(c) => Ok(c),
        None => connect().map(|(c, _)| c),
    }
}

/// Wait for JobRemoved of `job`; its result string.
fn wait_job(c: &mut Conn, job: &str, unit: &str) -> Result<String> {
    let deadline = Instant::now() + TIMEOUT;
    let m = c
        .wait_signal(
            deadline,
            &format!("systemd's JobRemoved signal for {unit}"),
            |m| {
                m.member.as_deref() == Some("JobRemoved")
                    && m.body.get(1).and_then(Value::as_str) == Some(job)
            },
        )
        .map_err(err)?;
    Ok(m.body
        .get(3)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string())
}

fn reset_failed(c: &mut Conn, unit: &str) {
    let _ = c.call(DEST, PATH, IFACE, "ResetFailedUnit", vec![Value::str(unit)]);
}

/// Every property of StartTransientUnit for `unit` with `pid` (`None` for a slice unit).
pub(crate) fn start_props(
    sd: &mut Sd,
    unit: &Unit,
    pid: Option<u32>,
    extra: Vec<Value>,
    res: Option<&LinuxResources>,
) -> Result<Vec<Value>> {
    let mut p = vec![prop("Description", Value::str(&unit.description))];
    if unit.is_slice() {
        p.push(prop(
            "Wants",
            Value::Array("s".into(), vec![Value::str(&unit.slice)]),
        ));
    } else {
        p.push(prop("Slice", Value::str(&unit.slice)));
        p.push(prop("Delegate", Value::Bool(true)));
    }
    if let Some(pid) = pid {
        p.push(prop(
            "PIDs",
            Value::Array("u".into(), vec![Value::U32(pid)]),
        ));
    }
    p.push(prop("DefaultDependencies", Value::Bool(false)));
    // Accounting on, so that systemd enables the controllers for the unit (as runc).
    p.push(prop("MemoryAccounting", Value::Bool(true)));
    p.push(prop("CPUAccounting", Value::Bool(true)));
    p.push(prop("TasksAccounting", Value::Bool(true)));
    p.push(prop(
        if sd.v2 {
            "IOAccounting"
        } else {
            "BlockIOAccounting"
        },
        Value::Bool(true),
    ));
    // The annotations' properties after runc's own (as runc), before the resources', which
    // win where both name one (as runc's later SetUnitProperties of the resources does).
    p.extend(extra);
    if let Some(res) = res {
        p.extend(resource_props(sd, res)?);
    }
    Ok(p)
}

/// The StartTransientUnit call's arguments (`ssa(sv)a(sa(sv))`).
pub(crate) fn start_body(name: &str, props: Vec<Value>) -> Vec<Value> {
    vec![
        Value::str(name),
        Value::str("replace"),
        Value::Array("(sv)".into(), props),
        Value::Array("(sa(sv))".into(), vec![]),
    ]
}

/// `Manager::apply` with --systemd-cgroup. `Ok(true)`: kept for [`start`] (the unit does
/// not exist yet); `Ok(false)`: the caller writes cgroupfs (after SetUnitProperties here).
pub(crate) fn apply(m: &Manager, unit: &Unit, res: &LinuxResources) -> Result<bool> {
    let mut live = unit.live();
    if live.fresh && !live.started {
        // Checked now (the errors do not depend on systemd's version), sent by `start`.
        resource_props(&mut Sd::new(m.layout, &mut || 0), res)?;
        live.pending = Some(res.clone());
        return Ok(true);
    }
    let props = props_on(m.layout, res, &mut live.conn)?;
    if !props.is_empty() {
        let mut c = conn_or_connect(&mut live)?;
        c.call(
            DEST,
            PATH,
            IFACE,
            "SetUnitProperties",
            vec![
                Value::str(&unit.name),
                Value::Bool(true),
                Value::Array("(sv)".into(), props),
            ],
        )
        .map_err(|e| err(format_args!("SetUnitProperties of {}: {e}", unit.name)))?;
        live.conn = Some(c);
    }
    Ok(false)
}

/// Whether `add_pid` must start the unit (a `create` that has not done it yet).
pub(crate) fn must_start(unit: &Unit) -> bool {
    let live = unit.live();
    live.fresh && !live.started
}

/// `Manager::add_pid` in a `create`: start the transient unit with `pid` in it, join the
/// other hierarchies and write the resources kept by `apply` through cgroupfs.
pub(crate) fn start(m: &Manager, unit: &Unit, pid: i32) -> Result<()> {
    let mut live = unit.live();
    let pending = live.pending.take();
    let extra = std::mem::take(&mut live.extra);
    let scope_pid = (!unit.is_slice()).then_some(pid as u32);
    let mut c = conn_or_connect(&mut live)?;
    let props = start_props(
        &mut Sd::new(m.layout, &mut || version(&mut c)),
        unit,
        scope_pid,
        extra,
        pending.as_ref(),
    )?;
    let body = start_body(&unit.name, props);
    let mut retried = false;
    let job = loop {
        let r = if retried {
            c.call(DEST, PATH, IFACE, "StartTransientUnit", body.clone())
        } else {
            // While systemd makes the scope and moves the init into it (the init waits for
            // that), load the device program the limits will attach once it is done.
            match c.send_call(DEST, PATH, IFACE, "StartTransientUnit", body.clone()) {
                Ok(s) => {
                    if let Some(d) = pending
                        .as_ref()
                        .and_then(|r| r.devices().as_deref())
                        .filter(|_| m.layout == Layout::V2 && !m.rootless)
                    {
                        crate::ebpf::preload(d);
                    }
                    c.reply(s, "StartTransientUnit")
                }
                Err(e) => Err(e),
            }
        };
        match r {
            Ok(r) => match r.first().and_then(Value::as_str) {
                Some(j) => break j.to_string(),
                None => return Err(err("StartTransientUnit: reply without a job path")),
            },
            Err(dbus::Error::Remote(name, _))
                if name == "org.freedesktop.systemd1.UnitExists" && !retried =>
            {
                // Perhaps the failed leftover of an earlier container: reset, retry once.
                reset_failed(&mut c, &unit.name);
                retried = true;
            }
            Err(e) => {
                return Err(err(format_args!(
                    "StartTransientUnit {} in {}: {e}",
                    unit.name, unit.slice
                )))
            }
        }
    };
    live.started = true;
    let result = wait_job(&mut c, &job, &unit.name)?;
    if result != "done" {
        reset_failed(&mut c, &unit.name);
        live.conn = Some(c);
        return Err(err(format_args!(
            "systemd could not start {}: job result {result:?}",
            unit.name
        )));
    }
    live.conn = Some(c);
    drop(live);
    join(m, unit, pid)?;
    if let Some(res) = pending {
        m.fs_backend().apply(m, &for_cgroupfs(&res))?;
    }
    Ok(())
}

/// After the unit started: check that systemd put `pid` where we expect, then make and
/// join the hierarchies systemd left alone.
fn join(m: &Manager, unit: &Unit, pid: i32) -> Result<()> {
    let cg = fs::read(&PathBuf::from(format!("/proc/{pid}/cgroup")))
        .map(|s| SelfCgroup::parse(&s))
        .map_err(|e| err(format_args!("reading /proc/{pid}/cgroup: {e}")))?;
    let in_hier = |h: &crate::Hier| -> bool {
        let cur = if h.name == "unified" {
            cg.unified.as_deref()
        } else {
            cg.v1_path(&h.name)
        };
        cur.is_some_and(|c| crate::path::under(&h.mount, c) == h.dir)
    };
    // The hierarchy systemd tracks processes in must show the unit.
    let track = m
        .unified
        .as_ref()
        .or_else(|| m.v1.iter().find(|h| h.name == "name=systemd"));
    if let Some(t) = track {
        if !unit.is_slice() && !in_hier(t) {
            return Err(err(format_args!(
                "systemd started {} but pid {pid} is not in {}",
                unit.name,
                t.dir.display()
            )));
        }
    }
    let s = pid.to_string();
    for h in m.v1.iter().chain(m.unified.iter()) {
        if in_hier(h) {
            continue;
        }
        let mut made = Vec::new();
        if !h.dir.is_dir() {
            if !crate::v1::mkdir_hier(h, &mut made)? {
                continue;
            }
            if h.name == "cpuset" {
                crate::v1::cpuset::copy_from_parent(&made)?;
            }
        }
        let p = h.dir.join("cgroup.procs");
        fs::write(&p, s.as_bytes()).map_err(|e| fs::io_err(p, e))?;
    }
    Ok(())
}

/// `Manager::destroy` with --systemd-cgroup: stop the unit, reset it, remove what is left.
pub(crate) fn stop(m: &Manager, unit: &Unit) -> Result<()> {
    let mut live = unit.live();
    if live.fresh && !live.started {
        // A `create` that failed before its unit started (StartTransientUnit refused, e.g.
        // UnitExists: another container's scope of that name): nothing of systemd's or in the
        // scope's directories is ours to stop or remove.
        return Ok(());
    }
    let mut first_err = None;
    match conn_or_connect(&mut live) {
        Ok(mut c) => {
            match c.call(
                DEST,
                PATH,
                IFACE,
                "StopUnit",
                vec![Value::str(&unit.name), Value::str("replace")],
            ) {
                Ok(r) => {
                    if let Some(job) = r.first().and_then(Value::as_str) {
                        if let Err(e) = wait_job(&mut c, job, &unit.name) {
                            first_err = Some(e);
                        }
                    }
                }
                Err(dbus::Error::Remote(name, _))
                    if name == "org.freedesktop.systemd1.NoSuchUnit" => {}
                Err(e) => {
                    first_err = Some(err(format_args!("StopUnit {}: {e}", unit.name)));
                }
            }
            reset_failed(&mut c, &unit.name);
            live.conn = Some(c);
        }
        // systemd is gone: remove what can be removed, report it only if that fails.
        Err(e) => crate::warn(&e.to_string()),
    }
    for h in m.v1.iter().chain(m.unified.iter()) {
        if let Err(e) = fs::rmdir_retry(&h.dir) {
            first_err.get_or_insert(e);
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
