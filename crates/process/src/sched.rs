//! Scheduling-related attributes: OOM score, I/O priority, CPU scheduler, personality.

use oci_spec::runtime::{
    IOPriorityClass, LinuxIOPriority, LinuxPersonality, LinuxPersonalityDomain, LinuxSchedulerFlag,
    LinuxSchedulerPolicy, Scheduler,
};

use crate::{Error, Result};

// ---- oom_score_adj ---------------------------------------------------------------------------

/// -1000 ..= 1000.
pub fn validate_oom_score_adj(score: i32) -> Result<()> {
    if !(-1000..=1000).contains(&score) {
        return Err(Error::invalid(format!(
            "process.oomScoreAdj: {score} is out of range -1000..1000"
        )));
    }
    Ok(())
}

/// Decimal text of `v` in `buf`, without allocating.
fn fmt_i64(v: i64, buf: &mut [u8; 24]) -> &[u8] {
    let mut i = buf.len();
    let neg = v < 0;
    let mut u = v.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

/// Write `data` to a NUL-terminated path with a single write(2).
pub(crate) fn write_file(path: &str, data: &[u8]) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let path = std::ffi::CStr::from_bytes_with_nul(path.as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // The fd is closed when `fd` drops, whatever the write did.
    let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    let n = rustix::io::write(&fd, data)?;
    if n != data.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            "short write",
        ));
    }
    Ok(())
}

/// See [`crate::set_oom_score_adj`]. Written through [`crate::procfs::ProcRoot`]: a mount
/// over /proc or over the file (CVE-2025-52881) is an error, never a write elsewhere.
pub fn set_oom_score_adj(score: i32) -> Result<()> {
    validate_oom_score_adj(score)?;
    let mut buf = [0u8; 24];
    let what = || format!("process.oomScoreAdj: writing {score} to /proc/self/oom_score_adj");
    let proc = crate::procfs::ProcRoot::open().map_err(|e| Error::Sys {
        what: what(),
        source: e,
    })?;
    let rel = format!("{}/oom_score_adj", crate::procfs::thread_dir());
    proc.write(&rel, fmt_i64(i64::from(score), &mut buf))
        .map_err(|e| Error::Sys {
            what: what(),
            source: e,
        })
}

/// Write `score` to /proc/<pid>/oom_score_adj: for a parent that prefers to set it on the child
/// from outside (before the child's pivot_root hides the host /proc, as runc does).
pub fn set_oom_score_adj_pid(pid: libc::pid_t, score: i32) -> Result<()> {
    validate_oom_score_adj(score)?;
    let path = format!("/proc/{pid}/oom_score_adj\0");
    let mut buf = [0u8; 24];
    write_file(&path, fmt_i64(i64::from(score), &mut buf)).map_err(|e| Error::Sys {
        what: format!("process.oomScoreAdj: writing {score} to /proc/{pid}/oom_score_adj"),
        source: e,
    })
}

// ---- I/O priority ----------------------------------------------------------------------------

const IOPRIO_WHO_PROCESS: libc::c_int = 1;
const IOPRIO_CLASS_SHIFT: u32 = 13;

fn ioprio_class(c: IOPriorityClass) -> (u32, &'static str) {
    match c {
        IOPriorityClass::IoprioClassRt => (1, "IOPRIO_CLASS_RT"),
        IOPriorityClass::IoprioClassBe => (2, "IOPRIO_CLASS_BE"),
        IOPriorityClass::IoprioClassIdle => (3, "IOPRIO_CLASS_IDLE"),
    }
}

/// priority must be 0..=7.
pub fn validate_io_priority(prio: &LinuxIOPriority) -> Result<()> {
    let p = prio.priority();
    if !(0..=7).contains(&p) {
        return Err(Error::invalid(format!(
            "process.ioPriority.priority: {p} is out of range 0..7"
        )));
    }
    Ok(())
}

/// The ioprio value (class << 13 | priority) for a validated config.
pub fn ioprio_value(prio: &LinuxIOPriority) -> Result<u32> {
    validate_io_priority(prio)?;
    Ok(ioprio_class(prio.class()).0 << IOPRIO_CLASS_SHIFT | prio.priority() as u32)
}

/// See [`crate::set_io_priority`].
pub fn set_io_priority(prio: &LinuxIOPriority) -> Result<()> {
    let v = ioprio_value(prio)?;
    // SAFETY: integer arguments.
    let r = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0,
            v as libc::c_int,
        )
    };
    if r != 0 {
        return Err(Error::last_os(format!(
            "process.ioPriority: ioprio_set({}, {})",
            ioprio_class(prio.class()).1,
            prio.priority()
        )));
    }
    Ok(())
}

/// ioprio_get(IOPRIO_WHO_PROCESS, 0) of the calling process.
pub fn get_io_priority() -> std::io::Result<u32> {
    // SAFETY: integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r as u32)
}

// ---- scheduler -------------------------------------------------------------------------------

/// struct sched_attr (SCHED_ATTR_SIZE_VER1, 56 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedAttr {
    pub size: u32,
    pub sched_policy: u32,
    pub sched_flags: u64,
    pub sched_nice: i32,
    pub sched_priority: u32,
    pub sched_runtime: u64,
    pub sched_deadline: u64,
    pub sched_period: u64,
    pub sched_util_min: u32,
    pub sched_util_max: u32,
}

pub const SCHED_ATTR_SIZE: u32 = 56;
const _: () = assert!(std::mem::size_of::<SchedAttr>() == SCHED_ATTR_SIZE as usize);

fn policy(p: LinuxSchedulerPolicy) -> (u32, &'static str) {
    use LinuxSchedulerPolicy::*;
    match p {
        SchedOther => (0, "SCHED_OTHER"),
        SchedFifo => (1, "SCHED_FIFO"),
        SchedRr => (2, "SCHED_RR"),
        SchedBatch => (3, "SCHED_BATCH"),
        SchedIso => (4, "SCHED_ISO"),
        SchedIdle => (5, "SCHED_IDLE"),
        SchedDeadline => (6, "SCHED_DEADLINE"),
    }
}

fn sched_flag(f: LinuxSchedulerFlag) -> u64 {
    use LinuxSchedulerFlag::*;
    match f {
        SchedResetOnFork => 0x01,
        SchedFlagReclaim => 0x02,
        SchedFlagDLOverrun => 0x04,
        SchedFlagKeepPolicy => 0x08,
        SchedFlagKeepParams => 0x10,
        SchedFlagUtilClampMin => 0x20,
        SchedFlagUtilClampMax => 0x40,
    }
}

/// Minimum SCHED_DEADLINE runtime the kernel accepts (2^DL_SCALE ns).
const DL_MIN_RUNTIME: u64 = 1 << 10;

/// The checks runc and the kernel make: nice in -20..19; priority 1..99 for SCHED_FIFO/RR and
/// 0 (or absent) otherwise; runtime/deadline/period only for SCHED_DEADLINE, where
/// 1024 <= runtime <= deadline <= period (period 0/absent means period = deadline).
pub fn validate_scheduler(s: &Scheduler) -> Result<()> {
    let (pol, pname) = policy(*s.policy());
    if let Some(n) = *s.nice() {
        if !(-20..=19).contains(&n) {
            return Err(Error::invalid(format!(
                "process.scheduler.nice: {n} is out of range -20..19"
            )));
        }
    }
    let prio = s.priority().unwrap_or(0);
    match pol {
        1 | 2 => {
            if !(1..=99).contains(&prio) {
                return Err(Error::invalid(format!(
                    "process.scheduler.priority: {pname} needs a priority in 1..99, got {prio}"
                )));
            }
        }
        _ => {
            if prio != 0 {
                return Err(Error::invalid(format!(
                    "process.scheduler.priority: only SCHED_FIFO and SCHED_RR take a priority, {pname} must have 0 (got {prio})"
                )));
            }
        }
    }
    let (runtime, deadline, period) = (
        s.runtime().unwrap_or(0),
        s.deadline().unwrap_or(0),
        s.period().unwrap_or(0),
    );
    if pol != 6 {
        for (field, v) in [
            ("runtime", runtime),
            ("deadline", deadline),
            ("period", period),
        ] {
            if v != 0 {
                return Err(Error::invalid(format!(
                    "process.scheduler.{field}: only SCHED_DEADLINE takes runtime/deadline/period ({pname} given)"
                )));
            }
        }
        return Ok(());
    }
    if deadline == 0 {
        return Err(Error::invalid(
            "process.scheduler.deadline: SCHED_DEADLINE needs a non-zero deadline",
        ));
    }
    if deadline >> 63 != 0 || period >> 63 != 0 {
        return Err(Error::invalid(
            "process.scheduler.deadline: deadline and period must be below 2^63 ns",
        ));
    }
    if runtime < DL_MIN_RUNTIME {
        return Err(Error::invalid(format!(
            "process.scheduler.runtime: SCHED_DEADLINE needs a runtime of at least {DL_MIN_RUNTIME} ns, got {runtime}"
        )));
    }
    if runtime > deadline {
        return Err(Error::invalid(format!(
            "process.scheduler.runtime: runtime {runtime} is greater than deadline {deadline}"
        )));
    }
    if period != 0 && deadline > period {
        return Err(Error::invalid(format!(
            "process.scheduler.deadline: deadline {deadline} is greater than period {period}"
        )));
    }
    Ok(())
}

/// The sched_attr that [`set_scheduler`] passes to sched_setattr(2).
pub fn sched_attr(s: &Scheduler) -> Result<SchedAttr> {
    validate_scheduler(s)?;
    let flags = s
        .flags()
        .as_deref()
        .unwrap_or(&[])
        .iter()
        .fold(0u64, |m, f| m | sched_flag(*f));
    Ok(SchedAttr {
        size: SCHED_ATTR_SIZE,
        sched_policy: policy(*s.policy()).0,
        sched_flags: flags,
        sched_nice: s.nice().unwrap_or(0),
        sched_priority: s.priority().unwrap_or(0) as u32,
        sched_runtime: s.runtime().unwrap_or(0),
        sched_deadline: s.deadline().unwrap_or(0),
        sched_period: s.period().unwrap_or(0),
        sched_util_min: 0,
        sched_util_max: 0,
    })
}

/// See [`crate::set_scheduler`].
pub fn set_scheduler(s: &Scheduler) -> Result<()> {
    set_scheduler_of(0, s)
}

/// sched_setattr(2) of `pid` (0: the calling thread).
pub fn set_scheduler_of(pid: libc::pid_t, s: &Scheduler) -> Result<()> {
    let mut attr = sched_attr(s)?;
    // SAFETY: pointer to a live, correctly sized sched_attr.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            pid,
            std::ptr::from_mut::<SchedAttr>(&mut attr),
            0,
        )
    };
    if r != 0 {
        return Err(Error::last_os(format!(
            "process.scheduler: sched_setattr({})",
            policy(*s.policy()).1
        )));
    }
    Ok(())
}

/// sched_getattr(2) of the calling thread.
pub fn get_sched_attr() -> std::io::Result<SchedAttr> {
    let mut attr = SchedAttr::default();
    // SAFETY: pointer to a live sched_attr of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            std::ptr::from_mut::<SchedAttr>(&mut attr),
            SCHED_ATTR_SIZE,
            0,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(attr)
}

// ---- personality -----------------------------------------------------------------------------

const PER_LINUX: u32 = 0x0000;
const PER_LINUX32: u32 = 0x0008;

static PERSONALITY_FLAGS: [(&str, u32); 11] = [
    ("UNAME26", 0x0020000),
    ("ADDR_NO_RANDOMIZE", 0x0040000),
    ("FDPIC_FUNCPTRS", 0x0080000),
    ("MMAP_PAGE_ZERO", 0x0100000),
    ("ADDR_COMPAT_LAYOUT", 0x0200000),
    ("READ_IMPLIES_EXEC", 0x0400000),
    ("ADDR_LIMIT_32BIT", 0x0800000),
    ("SHORT_INODE", 0x1000000),
    ("WHOLE_SECONDS", 0x2000000),
    ("STICKY_TIMEOUTS", 0x4000000),
    ("ADDR_LIMIT_3GB", 0x8000000),
];

/// Bit of a personality(2) flag name from linux/personality.h ("ADDR_NO_RANDOMIZE", any case).
pub fn personality_flag_from_name(name: &str) -> Option<u32> {
    PERSONALITY_FLAGS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| *v)
}

/// The persona value for personality(2); errors on unknown flag names.
pub fn personality_value(p: &LinuxPersonality) -> Result<u32> {
    let mut v = match p.domain() {
        LinuxPersonalityDomain::PerLinux => PER_LINUX,
        LinuxPersonalityDomain::PerLinux32 => PER_LINUX32,
    };
    for f in p.flags().as_deref().unwrap_or(&[]) {
        match personality_flag_from_name(f) {
            Some(bit) => v |= bit,
            None => {
                return Err(Error::invalid(format!(
                    "linux.personality.flags: unsupported personality flag {f:?}"
                )));
            }
        }
    }
    Ok(v)
}

/// Domain LINUX or LINUX32; flags must be personality(2) flag names.
pub fn validate_personality(p: &LinuxPersonality) -> Result<()> {
    personality_value(p).map(|_| ())
}

/// See [`crate::set_personality`].
pub fn set_personality(p: &LinuxPersonality) -> Result<()> {
    let v = personality_value(p)?;
    // SAFETY: integer argument.
    if unsafe { libc::personality(libc::c_ulong::from(v)) } == -1 {
        return Err(Error::last_os(format!(
            "linux.personality: personality({v:#x})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use oci_spec::runtime::{LinuxIOPriorityBuilder, LinuxPersonalityBuilder, SchedulerBuilder};

    #[test]
    fn oom_validation_and_format() {
        assert_eq!(
            validate_oom_score_adj(1001).unwrap_err().to_string(),
            "process.oomScoreAdj: 1001 is out of range -1000..1000"
        );
        validate_oom_score_adj(-1000).unwrap();
        let mut b = [0u8; 24];
        assert_eq!(fmt_i64(0, &mut b), b"0");
        assert_eq!(fmt_i64(-1000, &mut b), b"-1000");
        assert_eq!(fmt_i64(i64::MIN, &mut b), b"-9223372036854775808");
        assert_eq!(fmt_i64(987, &mut b), b"987");
    }

    #[test]
    fn oom_in_child() {
        let cur: i32 = std::fs::read_to_string("/proc/self/oom_score_adj")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        in_child(move || {
            let want = (cur + 123).min(1000);
            set_oom_score_adj(want).map_err(|e| e.to_string())?;
            let got =
                std::fs::read_to_string("/proc/self/oom_score_adj").map_err(|e| e.to_string())?;
            check_eq("oom_score_adj", got.trim().to_string(), want.to_string())
        });
    }

    #[test]
    fn oom_for_pid() {
        let cur: i32 = std::fs::read_to_string("/proc/self/oom_score_adj")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        in_child(move || {
            let want = (cur + 77).min(1000);
            // SAFETY: getpid cannot fail.
            set_oom_score_adj_pid(unsafe { libc::getpid() }, want).map_err(|e| e.to_string())?;
            let got =
                std::fs::read_to_string("/proc/self/oom_score_adj").map_err(|e| e.to_string())?;
            check_eq("oom_score_adj", got.trim().to_string(), want.to_string())
        });
        let e = set_oom_score_adj_pid(i32::MAX, 0).unwrap_err().to_string();
        assert!(
            e.starts_with("process.oomScoreAdj: writing 0 to /proc/2147483647/oom_score_adj: "),
            "{e}"
        );
    }

    #[test]
    fn ioprio_validation() {
        let p = LinuxIOPriorityBuilder::default()
            .class(IOPriorityClass::IoprioClassBe)
            .priority(8)
            .build()
            .unwrap();
        assert_eq!(
            validate_io_priority(&p).unwrap_err().to_string(),
            "process.ioPriority.priority: 8 is out of range 0..7"
        );
        let p = LinuxIOPriorityBuilder::default()
            .class(IOPriorityClass::IoprioClassBe)
            .priority(-1)
            .build()
            .unwrap();
        assert!(validate_io_priority(&p)
            .unwrap_err()
            .to_string()
            .starts_with("process.ioPriority.priority: -1"));
        let p = LinuxIOPriorityBuilder::default()
            .class(IOPriorityClass::IoprioClassIdle)
            .priority(7)
            .build()
            .unwrap();
        assert_eq!(ioprio_value(&p).unwrap(), 3 << 13 | 7);
        let p = LinuxIOPriorityBuilder::default()
            .class(IOPriorityClass::IoprioClassRt)
            .priority(0)
            .build()
            .unwrap();
        assert_eq!(ioprio_value(&p).unwrap(), 1 << 13);
    }

    #[test]
    fn ioprio_in_child() {
        in_child(|| {
            for (class, prio, want) in [
                (IOPriorityClass::IoprioClassBe, 6, 2 << 13 | 6),
                (IOPriorityClass::IoprioClassRt, 3, 1 << 13 | 3),
                (IOPriorityClass::IoprioClassIdle, 0, 3 << 13),
            ] {
                let p = LinuxIOPriorityBuilder::default()
                    .class(class)
                    .priority(prio)
                    .build()
                    .unwrap();
                set_io_priority(&p).map_err(|e| e.to_string())?;
                check_eq(
                    "ioprio_get",
                    get_io_priority().map_err(|e| e.to_string())?,
                    want,
                )?;
            }
            Ok(())
        });
    }

    fn sched(policy: LinuxSchedulerPolicy) -> SchedulerBuilder {
        SchedulerBuilder::default().policy(policy)
    }

    #[test]
    fn scheduler_validation() {
        use LinuxSchedulerPolicy::*;
        let err = |s: Scheduler| validate_scheduler(&s).unwrap_err().to_string();
        assert_eq!(
            err(sched(SchedOther).nice(20).build().unwrap()),
            "process.scheduler.nice: 20 is out of range -20..19"
        );
        assert_eq!(
            err(sched(SchedFifo).build().unwrap()),
            "process.scheduler.priority: SCHED_FIFO needs a priority in 1..99, got 0"
        );
        assert_eq!(
            err(sched(SchedRr).priority(100).build().unwrap()),
            "process.scheduler.priority: SCHED_RR needs a priority in 1..99, got 100"
        );
        assert!(err(sched(SchedBatch).priority(5).build().unwrap())
            .starts_with("process.scheduler.priority: "));
        assert!(err(sched(SchedOther).runtime(5000u64).build().unwrap())
            .starts_with("process.scheduler.runtime: "));
        assert_eq!(
            err(sched(SchedDeadline).runtime(2000u64).build().unwrap()),
            "process.scheduler.deadline: SCHED_DEADLINE needs a non-zero deadline"
        );
        assert_eq!(
            err(sched(SchedDeadline).runtime(100u64).deadline(2000u64).build().unwrap()),
            "process.scheduler.runtime: SCHED_DEADLINE needs a runtime of at least 1024 ns, got 100"
        );
        assert_eq!(
            err(sched(SchedDeadline)
                .runtime(3000u64)
                .deadline(2000u64)
                .build()
                .unwrap()),
            "process.scheduler.runtime: runtime 3000 is greater than deadline 2000"
        );
        assert_eq!(
            err(sched(SchedDeadline)
                .runtime(2000u64)
                .deadline(5000u64)
                .period(4000u64)
                .build()
                .unwrap()),
            "process.scheduler.deadline: deadline 5000 is greater than period 4000"
        );
        validate_scheduler(
            &sched(SchedDeadline)
                .runtime(2000u64)
                .deadline(5000u64)
                .build()
                .unwrap(),
        )
        .unwrap();
        validate_scheduler(&sched(SchedFifo).priority(99).build().unwrap()).unwrap();
        validate_scheduler(&sched(SchedIdle).nice(-20).build().unwrap()).unwrap();

        let a = sched_attr(
            &sched(SchedRr)
                .priority(7)
                .flags(vec![
                    LinuxSchedulerFlag::SchedResetOnFork,
                    LinuxSchedulerFlag::SchedFlagKeepParams,
                ])
                .build()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (a.size, a.sched_policy, a.sched_priority, a.sched_flags),
            (56, 2, 7, 0x11)
        );
    }

    #[test]
    fn scheduler_batch_and_idle_in_child() {
        in_child(|| {
            let s = sched(LinuxSchedulerPolicy::SchedBatch)
                .nice(7)
                .build()
                .unwrap();
            set_scheduler(&s).map_err(|e| e.to_string())?;
            let a = get_sched_attr().map_err(|e| e.to_string())?;
            check_eq("batch policy/nice", (a.sched_policy, a.sched_nice), (3, 7))?;
            // SAFETY: getpriority(2) takes integers only and touches no memory of ours.
            let prio = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            check_eq("getpriority", prio, 7)?;
            let s = sched(LinuxSchedulerPolicy::SchedIdle)
                .flags(vec![LinuxSchedulerFlag::SchedResetOnFork])
                .build()
                .unwrap();
            set_scheduler(&s).map_err(|e| e.to_string())?;
            let a = get_sched_attr().map_err(|e| e.to_string())?;
            check_eq("idle policy", a.sched_policy, 5)?;
            check_eq("reset-on-fork", a.sched_flags & 1, 1)?;
            Ok(())
        });
    }

    #[test]
    fn scheduler_realtime_in_child() {
        in_child(|| {
            let s = sched(LinuxSchedulerPolicy::SchedFifo)
                .priority(10)
                .build()
                .unwrap();
            set_scheduler(&s).map_err(|e| e.to_string())?;
            let a = get_sched_attr().map_err(|e| e.to_string())?;
            check_eq(
                "fifo policy/prio",
                (a.sched_policy, a.sched_priority),
                (1, 10),
            )?;
            let s = sched(LinuxSchedulerPolicy::SchedRr)
                .priority(20)
                .build()
                .unwrap();
            set_scheduler(&s).map_err(|e| e.to_string())?;
            let a = get_sched_attr().map_err(|e| e.to_string())?;
            check_eq(
                "rr policy/prio",
                (a.sched_policy, a.sched_priority),
                (2, 20),
            )?;
            Ok(())
        });
    }

    #[test]
    fn scheduler_deadline_in_child() {
        in_child(|| {
            let s = sched(LinuxSchedulerPolicy::SchedDeadline)
                .runtime(1_000_000u64)
                .deadline(10_000_000u64)
                .period(10_000_000u64)
                .build()
                .unwrap();
            set_scheduler(&s).map_err(|e| e.to_string())?;
            let a = get_sched_attr().map_err(|e| e.to_string())?;
            check_eq(
                "deadline attr",
                (
                    a.sched_policy,
                    a.sched_runtime,
                    a.sched_deadline,
                    a.sched_period,
                ),
                (6, 1_000_000, 10_000_000, 10_000_000),
            )
        });
    }

    #[test]
    fn scheduler_error_names_field() {
        in_child(|| {
            // SCHED_ISO does not exist in mainline Linux: the kernel says EINVAL.
            let s = sched(LinuxSchedulerPolicy::SchedIso).build().unwrap();
            match set_scheduler(&s) {
                Err(e)
                    if e.to_string()
                        .starts_with("process.scheduler: sched_setattr(SCHED_ISO): ") =>
                {
                    Ok(())
                }
                other => Err(format!("unexpected: {other:?}")),
            }
        });
    }

    #[test]
    fn personality_values() {
        let p = LinuxPersonalityBuilder::default()
            .domain(LinuxPersonalityDomain::PerLinux32)
            .build()
            .unwrap();
        assert_eq!(personality_value(&p).unwrap(), 8);
        let p = LinuxPersonalityBuilder::default()
            .domain(LinuxPersonalityDomain::PerLinux)
            .flags(vec!["ADDR_NO_RANDOMIZE".to_string()])
            .build()
            .unwrap();
        assert_eq!(personality_value(&p).unwrap(), 0x0040000);
        let p = LinuxPersonalityBuilder::default()
            .domain(LinuxPersonalityDomain::PerLinux)
            .flags(vec!["BOGUS".to_string()])
            .build()
            .unwrap();
        assert_eq!(
            validate_personality(&p).unwrap_err().to_string(),
            "linux.personality.flags: unsupported personality flag \"BOGUS\""
        );
    }

    #[test]
    fn personality_in_child() {
        in_child(|| {
            let p = LinuxPersonalityBuilder::default()
                .domain(LinuxPersonalityDomain::PerLinux32)
                .build()
                .unwrap();
            set_personality(&p).map_err(|e| e.to_string())?;
            // SAFETY: personality(0xffffffff) only reads the persona (integers, no memory).
            let persona = unsafe { libc::personality(0xffffffff) } as u32;
            check_eq("personality", persona, 8)?;
            let p = LinuxPersonalityBuilder::default()
                .domain(LinuxPersonalityDomain::PerLinux)
                .flags(vec!["addr_no_randomize".to_string()])
                .build()
                .unwrap();
            set_personality(&p).map_err(|e| e.to_string())?;
            // SAFETY: as above.
            let persona = unsafe { libc::personality(0xffffffff) } as u32;
            check_eq("personality", persona, 0x0040000)
        });
    }
}
