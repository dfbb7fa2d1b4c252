//! POSIX resource limits (process.rlimits).

use oci_spec::runtime::{PosixRlimit, PosixRlimitType};

use crate::{Error, Result};

use rustix::process::{Resource, Rlimit};

/// Config name ("RLIMIT_NOFILE") of an rlimit type.
pub fn rlimit_name(t: PosixRlimitType) -> &'static str {
    use PosixRlimitType::*;
    match t {
        RlimitCpu => "RLIMIT_CPU",
        RlimitFsize => "RLIMIT_FSIZE",
        RlimitData => "RLIMIT_DATA",
        RlimitStack => "RLIMIT_STACK",
        RlimitCore => "RLIMIT_CORE",
        RlimitRss => "RLIMIT_RSS",
        RlimitNproc => "RLIMIT_NPROC",
        RlimitNofile => "RLIMIT_NOFILE",
        RlimitMemlock => "RLIMIT_MEMLOCK",
        RlimitAs => "RLIMIT_AS",
        RlimitLocks => "RLIMIT_LOCKS",
        RlimitSigpending => "RLIMIT_SIGPENDING",
        RlimitMsgqueue => "RLIMIT_MSGQUEUE",
        RlimitNice => "RLIMIT_NICE",
        RlimitRtprio => "RLIMIT_RTPRIO",
        RlimitRttime => "RLIMIT_RTTIME",
    }
}

fn resource(t: PosixRlimitType) -> Resource {
    use PosixRlimitType::*;
    match t {
        RlimitCpu => Resource::Cpu,
        RlimitFsize => Resource::Fsize,
        RlimitData => Resource::Data,
        RlimitStack => Resource::Stack,
        RlimitCore => Resource::Core,
        RlimitRss => Resource::Rss,
        RlimitNproc => Resource::Nproc,
        RlimitNofile => Resource::Nofile,
        RlimitMemlock => Resource::Memlock,
        RlimitAs => Resource::As,
        RlimitLocks => Resource::Locks,
        RlimitSigpending => Resource::Sigpending,
        RlimitMsgqueue => Resource::Msgqueue,
        RlimitNice => Resource::Nice,
        RlimitRtprio => Resource::Rtprio,
        RlimitRttime => Resource::Rttime,
    }
}

/// soft <= hard for each entry, and no type listed twice (the runtime spec requires an error
/// for duplicates).
pub fn validate_rlimits(rlimits: &[PosixRlimit]) -> Result<()> {
    for (i, r) in rlimits.iter().enumerate() {
        let name = rlimit_name(r.typ());
        if r.soft() > r.hard() {
            return Err(Error::invalid(format!(
                "process.rlimits: {name}: soft limit {} is greater than hard limit {}",
                r.soft(),
                r.hard()
            )));
        }
        if rlimits[..i].iter().any(|o| o.typ() == r.typ()) {
            return Err(Error::invalid(format!(
                "process.rlimits: {name} is listed more than once"
            )));
        }
    }
    Ok(())
}

/// `(type, soft, hard)` triples as a list for [`set_rlimits`] (the serve engine's helper
/// processes set fixed limits of their own).
pub fn rlimit_list(list: &[(PosixRlimitType, u64, u64)]) -> Vec<PosixRlimit> {
    list.iter()
        .map(|&(t, soft, hard)| {
            oci_spec::runtime::PosixRlimitBuilder::default()
                .typ(t)
                .soft(soft)
                .hard(hard)
                .build()
                .expect("every field of a PosixRlimit is given")
        })
        .collect()
}

/// See [`crate::set_rlimits`]. Raising a hard limit needs CAP_SYS_RESOURCE.
pub fn set_rlimits(rlimits: &[PosixRlimit]) -> Result<()> {
    validate_rlimits(rlimits)?;
    for r in rlimits {
        // prlimit64(0, ...), what libc's setrlimit calls; u64::MAX is RLIM_INFINITY.
        let lim = Rlimit {
            current: Some(r.soft()),
            maximum: Some(r.hard()),
        };
        rustix::process::setrlimit(resource(r.typ()), lim)
            .map_err(|e| Error::sys(format!("process.rlimits: {}", rlimit_name(r.typ())), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use oci_spec::runtime::PosixRlimitBuilder;

    fn rl(t: PosixRlimitType, soft: u64, hard: u64) -> PosixRlimit {
        PosixRlimitBuilder::default()
            .typ(t)
            .soft(soft)
            .hard(hard)
            .build()
            .unwrap()
    }

    fn getrlimit(t: PosixRlimitType) -> (u64, u64) {
        let l = rustix::process::getrlimit(resource(t));
        (l.current.unwrap_or(u64::MAX), l.maximum.unwrap_or(u64::MAX))
    }

    #[test]
    fn names_match_serde() {
        use PosixRlimitType::*;
        for t in [
            RlimitCpu,
            RlimitFsize,
            RlimitData,
            RlimitStack,
            RlimitCore,
            RlimitRss,
            RlimitNproc,
            RlimitNofile,
            RlimitMemlock,
            RlimitAs,
            RlimitLocks,
            RlimitSigpending,
            RlimitMsgqueue,
            RlimitNice,
            RlimitRtprio,
            RlimitRttime,
        ] {
            assert_eq!(t.to_string(), rlimit_name(t));
        }
        assert_eq!(resource(RlimitNofile) as u32, 7);
        assert_eq!(resource(RlimitRttime) as u32, 15);
    }

    #[test]
    fn validation() {
        let e = validate_rlimits(&[rl(PosixRlimitType::RlimitNofile, 10, 5)])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "process.rlimits: RLIMIT_NOFILE: soft limit 10 is greater than hard limit 5"
        );
        let e = validate_rlimits(&[
            rl(PosixRlimitType::RlimitNofile, 1, 5),
            rl(PosixRlimitType::RlimitCore, 0, 0),
            rl(PosixRlimitType::RlimitNofile, 1, 5),
        ])
        .unwrap_err()
        .to_string();
        assert_eq!(e, "process.rlimits: RLIMIT_NOFILE is listed more than once");
        validate_rlimits(&[]).unwrap();
    }

    #[test]
    fn set_in_child() {
        let (_, nofile_hard) = getrlimit(PosixRlimitType::RlimitNofile);
        let (_, core_hard) = getrlimit(PosixRlimitType::RlimitCore);
        in_child(move || {
            let nofile_soft = nofile_hard.min(1000) - 1;
            set_rlimits(&[
                rl(
                    PosixRlimitType::RlimitNofile,
                    nofile_soft,
                    nofile_hard.min(1000),
                ),
                rl(PosixRlimitType::RlimitCore, 0, core_hard.min(4096)),
                rl(PosixRlimitType::RlimitCpu, 3600, 7200),
            ])
            .map_err(|e| e.to_string())?;
            check_eq(
                "nofile",
                getrlimit(PosixRlimitType::RlimitNofile),
                (nofile_soft, nofile_hard.min(1000)),
            )?;
            check_eq(
                "core",
                getrlimit(PosixRlimitType::RlimitCore),
                (0, core_hard.min(4096)),
            )?;
            let limits = std::fs::read_to_string("/proc/self/limits").map_err(|e| e.to_string())?;
            let line = limits
                .lines()
                .find(|l| l.starts_with("Max open files"))
                .unwrap_or("")
                .to_string();
            let want = format!("{} {} files", nofile_soft, nofile_hard.min(1000));
            if line
                .split_whitespace()
                .skip(3)
                .collect::<Vec<_>>()
                .join(" ")
                != want
            {
                return Err(format!("/proc/self/limits: {line:?}, want {want:?}"));
            }
            let line = limits
                .lines()
                .find(|l| l.starts_with("Max cpu time"))
                .unwrap_or("")
                .to_string();
            if line
                .split_whitespace()
                .skip(3)
                .collect::<Vec<_>>()
                .join(" ")
                != "3600 7200 seconds"
            {
                return Err(format!("/proc/self/limits: {line:?}"));
            }
            Ok(())
        });
    }

    #[test]
    fn raising_hard_limit_without_cap_sys_resource_names_field() {
        in_child(|| {
            // Drop CAP_SYS_RESOURCE (this host's runtime may not hold it anyway), lower the hard
            // limit, then try to raise it back.
            let mut s = crate::caps::capget().map_err(|e| e.to_string())?;
            s.effective &= !(1 << 24);
            crate::caps::capset(&s).map_err(|e| e.to_string())?;
            set_rlimits(&[rl(PosixRlimitType::RlimitNofile, 64, 128)])
                .map_err(|e| e.to_string())?;
            let e = set_rlimits(&[rl(PosixRlimitType::RlimitNofile, 64, 256)])
                .unwrap_err()
                .to_string();
            if !e.starts_with("process.rlimits: RLIMIT_NOFILE: Operation not permitted") {
                return Err(format!("unexpected error: {e}"));
            }
            Ok(())
        });
    }
}
