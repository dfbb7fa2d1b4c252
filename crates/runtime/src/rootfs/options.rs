//! Mount options: the runtime-spec names, parsed into mount(2) flags, mount_setattr(2)
//! attributes, propagation and the filesystem's own data.

use crate::error::Result;

/// The propagation an option names (`shared`, `rprivate`, ...), as mount(2) flags.
pub fn propagation_flag(s: &str) -> Option<libc::c_ulong> {
    match lookup(s) {
        Some(Effect::Propagation(p)) => Some(p),
        _ => None,
    }
}

/// Parsed mount options: flags for mount(2), the same as mount_setattr attributes for binds,
/// propagation, and the rest as the fs-specific data string.
#[derive(Default, Debug, PartialEq)]
pub struct MountOpts {
    pub flags: libc::c_ulong,
    pub clear: libc::c_ulong,
    pub propagation: Vec<libc::c_ulong>,
    pub data: String,
    pub bind: bool,
    pub recursive: bool,
    /// "rro", "rnosuid"...: attributes applied to every mount of a recursive bind.
    pub rec_attr_set: u64,
    pub rec_attr_clr: u64,
    /// `tmpcopyup`: a tmpfs starts with a copy of the directory it covers (`notmpcopyup`: not).
    pub copyup: bool,
}

pub(super) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(super) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(super) const MOUNT_ATTR_NODEV: u64 = 0x4;
pub(super) const MOUNT_ATTR_NOEXEC: u64 = 0x8;
pub(super) const MOUNT_ATTR__ATIME: u64 = 0x70;
pub(super) const MOUNT_ATTR_NOATIME: u64 = 0x10;
pub(super) const MOUNT_ATTR_STRICTATIME: u64 = 0x20;
pub(super) const MOUNT_ATTR_NODIRATIME: u64 = 0x80;
pub(super) const MOUNT_ATTR_NOSYMFOLLOW: u64 = 0x200000;

/// What one option does.
#[derive(Clone, Copy, Debug)]
enum Effect {
    /// mount(2) flags set, and cleared (for a bind: the same as mount_setattr attributes).
    Flags(libc::c_ulong, libc::c_ulong),
    /// A bind mount; `rbind` takes the submounts too.
    Bind { recursive: bool },
    /// mount_setattr attributes set and cleared on every mount of a bind (`rro`, `rnosuid`...).
    RecAttr(u64, u64),
    /// Mount propagation (mount(2) flags of its own call).
    Propagation(libc::c_ulong),
    /// `tmpcopyup` / `notmpcopyup` (rootfs/copyup.rs).
    CopyUp(bool),
    /// Accepted, done elsewhere: `idmap`/`ridmap` (the runtime id-maps the tree,
    /// crate::idmap).
    Elsewhere,
}

const MS_NOSYMFOLLOW: libc::c_ulong = 0x100;

/// Every option sprout knows, runc's set (`KnownMountOptions`) plus crun's `notmpcopyup`.
/// `features` lists exactly these names; anything else is the filesystem's own data.
const OPTIONS: &[(&str, Effect)] = {
    use libc::{
        MS_DIRSYNC, MS_I_VERSION, MS_LAZYTIME, MS_MANDLOCK, MS_NOATIME, MS_NODEV, MS_NODIRATIME,
        MS_NOEXEC, MS_NOSUID, MS_PRIVATE, MS_RDONLY, MS_REC, MS_RELATIME, MS_REMOUNT, MS_SHARED,
        MS_SILENT, MS_SLAVE, MS_STRICTATIME, MS_SYNCHRONOUS, MS_UNBINDABLE,
    };
    use Effect::{Bind, CopyUp, Elsewhere, Flags, Propagation, RecAttr};
    &[
        ("defaults", Flags(0, 0)),
        ("ro", Flags(MS_RDONLY, 0)),
        ("rw", Flags(0, MS_RDONLY)),
        ("suid", Flags(0, MS_NOSUID)),
        ("nosuid", Flags(MS_NOSUID, 0)),
        ("dev", Flags(0, MS_NODEV)),
        ("nodev", Flags(MS_NODEV, 0)),
        ("exec", Flags(0, MS_NOEXEC)),
        ("noexec", Flags(MS_NOEXEC, 0)),
        ("sync", Flags(MS_SYNCHRONOUS, 0)),
        ("async", Flags(0, MS_SYNCHRONOUS)),
        ("dirsync", Flags(MS_DIRSYNC, 0)),
        ("remount", Flags(MS_REMOUNT, 0)),
        ("mand", Flags(MS_MANDLOCK, 0)),
        ("nomand", Flags(0, MS_MANDLOCK)),
        ("atime", Flags(0, MS_NOATIME)),
        ("noatime", Flags(MS_NOATIME, 0)),
        ("diratime", Flags(0, MS_NODIRATIME)),
        ("nodiratime", Flags(MS_NODIRATIME, 0)),
        ("relatime", Flags(MS_RELATIME, 0)),
        ("norelatime", Flags(0, MS_RELATIME)),
        ("strictatime", Flags(MS_STRICTATIME, 0)),
        ("nostrictatime", Flags(0, MS_STRICTATIME)),
        ("iversion", Flags(MS_I_VERSION, 0)),
        ("noiversion", Flags(0, MS_I_VERSION)),
        ("lazytime", Flags(MS_LAZYTIME, 0)),
        ("nolazytime", Flags(0, MS_LAZYTIME)),
        ("silent", Flags(MS_SILENT, 0)),
        ("loud", Flags(0, MS_SILENT)),
        ("nosymfollow", Flags(MS_NOSYMFOLLOW, 0)),
        ("symfollow", Flags(0, MS_NOSYMFOLLOW)),
        ("bind", Bind { recursive: false }),
        ("rbind", Bind { recursive: true }),
        ("rro", RecAttr(MOUNT_ATTR_RDONLY, 0)),
        ("rrw", RecAttr(0, MOUNT_ATTR_RDONLY)),
        ("rnosuid", RecAttr(MOUNT_ATTR_NOSUID, 0)),
        ("rsuid", RecAttr(0, MOUNT_ATTR_NOSUID)),
        ("rnodev", RecAttr(MOUNT_ATTR_NODEV, 0)),
        ("rdev", RecAttr(0, MOUNT_ATTR_NODEV)),
        ("rnoexec", RecAttr(MOUNT_ATTR_NOEXEC, 0)),
        ("rexec", RecAttr(0, MOUNT_ATTR_NOEXEC)),
        ("rnodiratime", RecAttr(MOUNT_ATTR_NODIRATIME, 0)),
        ("rdiratime", RecAttr(0, MOUNT_ATTR_NODIRATIME)),
        ("rnosymfollow", RecAttr(MOUNT_ATTR_NOSYMFOLLOW, 0)),
        ("rsymfollow", RecAttr(0, MOUNT_ATTR_NOSYMFOLLOW)),
        // The atime modes are an enum: changing one clears the whole field (EINVAL otherwise),
        // and relatime is its 0. `ratime`, `rnostrictatime` (leave noatime / strictatime) go
        // back to relatime; `rnorelatime` leaves the mode as it is (runc clears relatime's 0).
        ("rnoatime", RecAttr(MOUNT_ATTR_NOATIME, MOUNT_ATTR__ATIME)),
        (
            "rstrictatime",
            RecAttr(MOUNT_ATTR_STRICTATIME, MOUNT_ATTR__ATIME),
        ),
        ("rrelatime", RecAttr(0, MOUNT_ATTR__ATIME)),
        ("ratime", RecAttr(0, MOUNT_ATTR__ATIME)),
        ("rnostrictatime", RecAttr(0, MOUNT_ATTR__ATIME)),
        ("rnorelatime", RecAttr(0, 0)),
        ("shared", Propagation(MS_SHARED)),
        ("rshared", Propagation(MS_SHARED | MS_REC)),
        ("slave", Propagation(MS_SLAVE)),
        ("rslave", Propagation(MS_SLAVE | MS_REC)),
        ("private", Propagation(MS_PRIVATE)),
        ("rprivate", Propagation(MS_PRIVATE | MS_REC)),
        ("unbindable", Propagation(MS_UNBINDABLE)),
        ("runbindable", Propagation(MS_UNBINDABLE | MS_REC)),
        ("idmap", Elsewhere),
        ("ridmap", Elsewhere),
        ("tmpcopyup", CopyUp(true)),
        ("notmpcopyup", CopyUp(false)),
    ]
};

fn lookup(name: &str) -> Option<Effect> {
    OPTIONS.iter().find(|(n, _)| *n == name).map(|(_, e)| *e)
}

/// The names of every option sprout knows, sorted (for `features`).
pub fn option_names() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = OPTIONS.iter().map(|(n, _)| *n).collect();
    v.sort_unstable();
    v
}

pub fn parse_options(opts: &[String]) -> Result<MountOpts> {
    let mut o = MountOpts::default();
    for opt in opts {
        match lookup(opt) {
            Some(Effect::Flags(set, clr)) => {
                o.flags = (o.flags | set) & !clr;
                o.clear = (o.clear | clr) & !set;
            }
            Some(Effect::Bind { recursive }) => {
                o.bind = true;
                o.recursive |= recursive;
            }
            Some(Effect::RecAttr(set, clr)) => {
                o.rec_attr_set |= set;
                o.rec_attr_clr |= clr;
            }
            Some(Effect::Propagation(p)) => o.propagation.push(p),
            Some(Effect::CopyUp(on)) => o.copyup = on,
            Some(Effect::Elsewhere) => {}
            None => {
                if !o.data.is_empty() {
                    o.data.push(',');
                }
                o.data.push_str(opt);
            }
        }
    }
    Ok(o)
}

pub(super) fn attr_from_flags(flags: libc::c_ulong) -> u64 {
    let mut a = 0;
    if flags & libc::MS_RDONLY != 0 {
        a |= MOUNT_ATTR_RDONLY;
    }
    if flags & libc::MS_NOSUID != 0 {
        a |= MOUNT_ATTR_NOSUID;
    }
    if flags & libc::MS_NODEV != 0 {
        a |= MOUNT_ATTR_NODEV;
    }
    if flags & libc::MS_NOEXEC != 0 {
        a |= MOUNT_ATTR_NOEXEC;
    }
    if flags & libc::MS_NODIRATIME != 0 {
        a |= MOUNT_ATTR_NODIRATIME;
    }
    if flags & libc::MS_NOATIME != 0 {
        a |= MOUNT_ATTR_NOATIME;
    }
    if flags & libc::MS_STRICTATIME != 0 {
        a |= MOUNT_ATTR_STRICTATIME;
    }
    if flags & MS_NOSYMFOLLOW != 0 {
        a |= MOUNT_ATTR_NOSYMFOLLOW;
    }
    a
}

/// mount_setattr's (attr_set, attr_clr) for a bind mount's options. The atime modes are an
/// enum, not bits: changing it needs the whole MOUNT_ATTR__ATIME in attr_clr (EINVAL otherwise).
pub(super) fn bind_attrs(opts: &MountOpts) -> (u64, u64) {
    const ATIME_MODES: u64 = MOUNT_ATTR__ATIME;
    let set = attr_from_flags(opts.flags) & !ATIME_MODES;
    let mut clr = attr_from_flags(opts.clear) & !ATIME_MODES & !set;
    let mut atime = 0;
    let mut change_atime = false;
    if opts.flags & libc::MS_NOATIME != 0 {
        atime = MOUNT_ATTR_NOATIME;
        change_atime = true;
    } else if opts.flags & libc::MS_STRICTATIME != 0 {
        atime = MOUNT_ATTR_STRICTATIME;
        change_atime = true;
    } else if opts.flags & libc::MS_RELATIME != 0
        || opts.clear & (libc::MS_NOATIME | libc::MS_STRICTATIME) != 0
    {
        change_atime = true; // relatime is the enum's 0
    }
    if change_atime {
        clr |= MOUNT_ATTR__ATIME;
    }
    (set | atime, clr)
}

/// A configured bind mount's own attributes, as runc applies them (the intent of mount(8)'s
/// `--bind -o FLAGS`): when the options name any mount flag, set or clear, the mount gets exactly
/// the flags named, and every other one of ro, nosuid, nodev, noexec and nosymfollow is cleared
/// ("rw" is the default). Its atime stays the source's unless an atime mode or `nodiratime` is
/// named (then, as mount(2): relatime unless noatime, strictatime over both, nodiratime only when
/// named). `None`: no flag named, the mount keeps every flag of its source.
pub(super) fn bind_replace_attrs(opts: &MountOpts) -> Option<(u64, u64)> {
    const PLAIN: u64 = MOUNT_ATTR_RDONLY
        | MOUNT_ATTR_NOSUID
        | MOUNT_ATTR_NODEV
        | MOUNT_ATTR_NOEXEC
        | MOUNT_ATTR_NOSYMFOLLOW;
    const ATIME_SET: libc::c_ulong =
        libc::MS_NOATIME | libc::MS_NODIRATIME | libc::MS_RELATIME | libc::MS_STRICTATIME;
    if opts.flags & !libc::MS_REMOUNT == 0 && opts.clear == 0 {
        return None;
    }
    let mut set = attr_from_flags(opts.flags) & PLAIN;
    let mut clr = PLAIN & !set;
    if opts.flags & ATIME_SET != 0 {
        if opts.flags & libc::MS_STRICTATIME != 0 {
            set |= MOUNT_ATTR_STRICTATIME;
        } else if opts.flags & libc::MS_NOATIME != 0 {
            set |= MOUNT_ATTR_NOATIME;
        }
        if opts.flags & libc::MS_NODIRATIME != 0 {
            set |= MOUNT_ATTR_NODIRATIME;
        }
        clr |= (MOUNT_ATTR__ATIME | MOUNT_ATTR_NODIRATIME) & !set;
        clr |= MOUNT_ATTR__ATIME; // the mode is an enum: changing it clears the whole field
    }
    Some((set, clr))
}

/// statfs(2) `f_flags` of a mount as mount_setattr attributes: the flags a user namespace locks
/// on the mounts it inherits (ro, nosuid, nodev, noexec, the atime mode and nodiratime).
pub(super) fn locked_attrs_from_statfs(f_flags: u64) -> u64 {
    const ST_RDONLY: u64 = 1;
    const ST_NOSUID: u64 = 2;
    const ST_NODEV: u64 = 4;
    const ST_NOEXEC: u64 = 8;
    const ST_NOATIME: u64 = 1024;
    const ST_NODIRATIME: u64 = 2048;
    const ST_RELATIME: u64 = 4096;
    let mut a = 0;
    for (st, attr) in [
        (ST_RDONLY, MOUNT_ATTR_RDONLY),
        (ST_NOSUID, MOUNT_ATTR_NOSUID),
        (ST_NODEV, MOUNT_ATTR_NODEV),
        (ST_NOEXEC, MOUNT_ATTR_NOEXEC),
        (ST_NODIRATIME, MOUNT_ATTR_NODIRATIME),
        (ST_NOATIME, MOUNT_ATTR_NOATIME),
    ] {
        if f_flags & st != 0 {
            a |= attr;
        }
    }
    if f_flags & (ST_NOATIME | ST_RELATIME) == 0 {
        a |= MOUNT_ATTR_STRICTATIME;
    }
    a
}

/// The names of mount_setattr attributes, for messages ("ro, nodev").
pub(super) fn attr_names(a: u64) -> String {
    [
        (MOUNT_ATTR_RDONLY, "ro"),
        (MOUNT_ATTR_NOSUID, "nosuid"),
        (MOUNT_ATTR_NODEV, "nodev"),
        (MOUNT_ATTR_NOEXEC, "noexec"),
        (MOUNT_ATTR_NOATIME, "noatime"),
        (MOUNT_ATTR_STRICTATIME, "strictatime"),
        (MOUNT_ATTR_NODIRATIME, "nodiratime"),
        (MOUNT_ATTR_NOSYMFOLLOW, "nosymfollow"),
    ]
    .iter()
    .filter(|(b, _)| a & b != 0)
    .map(|(_, n)| *n)
    .collect::<Vec<_>>()
    .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn options() {
        let o = parse_options(&s(&[
            "nosuid",
            "noexec",
            "nodev",
            "mode=755",
            "size=65536k",
        ]))
        .unwrap();
        assert_eq!(o.flags, libc::MS_NOSUID | libc::MS_NOEXEC | libc::MS_NODEV);
        assert_eq!(o.data, "mode=755,size=65536k");
        let o = parse_options(&s(&["rbind", "ro", "rprivate"])).unwrap();
        assert!(o.bind && o.recursive);
        assert_eq!(o.flags, libc::MS_RDONLY);
        assert_eq!(o.propagation, vec![libc::MS_PRIVATE | libc::MS_REC]);
        let o = parse_options(&s(&["ro", "rw"])).unwrap();
        assert_eq!(o.flags, 0);
        // idmap/ridmap are no mount data (the runtime id-maps the tree, crate::idmap).
        let o = parse_options(&s(&["rbind", "idmap", "ridmap"])).unwrap();
        assert!(o.bind && o.recursive && o.data.is_empty() && o.flags == 0);
        let o = parse_options(&s(&["rro"])).unwrap();
        assert_eq!(o.rec_attr_set, MOUNT_ATTR_RDONLY);
    }

    #[test]
    fn bind_atime_attrs_clear_the_whole_enum() {
        let o = parse_options(&s(&["bind", "nosuid", "strictatime", "mode=755"])).unwrap();
        assert_eq!(
            bind_attrs(&o),
            (
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_STRICTATIME,
                MOUNT_ATTR__ATIME
            )
        );
        let o = parse_options(&s(&["bind", "relatime", "ro"])).unwrap();
        assert_eq!(bind_attrs(&o), (MOUNT_ATTR_RDONLY, MOUNT_ATTR__ATIME));
        let o = parse_options(&s(&["bind", "rw", "suid"])).unwrap();
        assert_eq!(bind_attrs(&o), (0, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID));
        let o = parse_options(&s(&["bind", "noatime"])).unwrap();
        assert_eq!(bind_attrs(&o), (MOUNT_ATTR_NOATIME, MOUNT_ATTR__ATIME));
    }

    #[test]
    fn bind_flags_replace_the_sources_as_runc() {
        let plain = MOUNT_ATTR_RDONLY
            | MOUNT_ATTR_NOSUID
            | MOUNT_ATTR_NODEV
            | MOUNT_ATTR_NOEXEC
            | MOUNT_ATTR_NOSYMFOLLOW;
        let r = |v: &[&str]| bind_replace_attrs(&parse_options(&s(v)).unwrap());
        // No flag: the source's flags stay (propagation is no flag).
        assert_eq!(r(&["bind"]), None);
        assert_eq!(r(&["rbind", "rprivate"]), None);
        // A clearing flag alone: everything else is cleared too, the atime stays.
        assert_eq!(r(&["bind", "dev"]), Some((0, plain)));
        // The named flags, the rest cleared ("implied rw").
        assert_eq!(
            r(&["bind", "nosuid", "nodev", "rprivate"]),
            Some((
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_NOSYMFOLLOW
            ))
        );
        // "atime"/"norelatime" name no mode: the atime is left alone (mount(8) does the same).
        assert_eq!(r(&["bind", "atime"]), Some((0, plain)));
        // A mode: the whole enum and nodiratime are replaced.
        assert_eq!(
            r(&["bind", "relatime"]),
            Some((0, plain | MOUNT_ATTR__ATIME | MOUNT_ATTR_NODIRATIME))
        );
        assert_eq!(
            r(&["bind", "nodiratime"]),
            Some((MOUNT_ATTR_NODIRATIME, plain | MOUNT_ATTR__ATIME))
        );
        assert_eq!(
            r(&["bind", "noatime", "strictatime"]),
            Some((
                MOUNT_ATTR_STRICTATIME,
                plain | MOUNT_ATTR__ATIME | MOUNT_ATTR_NODIRATIME
            ))
        );
        assert_eq!(
            r(&["bind", "ro", "symfollow"]),
            Some((MOUNT_ATTR_RDONLY, plain & !MOUNT_ATTR_RDONLY))
        );
    }

    #[test]
    fn statfs_flags_to_locked_attrs() {
        // ro,nosuid,relatime
        assert_eq!(
            locked_attrs_from_statfs(1 | 2 | 4096),
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID
        );
        // noatime,nodiratime
        assert_eq!(
            locked_attrs_from_statfs(1024 | 2048),
            MOUNT_ATTR_NOATIME | MOUNT_ATTR_NODIRATIME
        );
        // neither noatime nor relatime: strictatime
        assert_eq!(
            locked_attrs_from_statfs(8),
            MOUNT_ATTR_NOEXEC | MOUNT_ATTR_STRICTATIME
        );
        assert_eq!(
            attr_names(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV),
            "ro, nodev"
        );
    }

    /// `features` lists what the parser knows: each name is an option (no fs data), none twice.
    #[test]
    fn every_listed_option_is_parsed_and_listed_once() {
        let names = option_names();
        for n in &names {
            let o = parse_options(&s(&[n])).unwrap();
            assert!(o.data.is_empty(), "{n} parsed as fs data");
        }
        let mut d = names.clone();
        d.dedup();
        assert_eq!(d.len(), names.len(), "a name listed twice");
        for n in [
            "notmpcopyup",
            "rnostrictatime",
            "lazytime",
            "iversion",
            "ratime",
        ] {
            assert!(names.contains(&n), "{n}");
        }
        assert_eq!(
            parse_options(&s(&["mode=755", "size=1m"])).unwrap().data,
            "mode=755,size=1m"
        );
        let o = parse_options(&s(&["lazytime", "rnostrictatime"])).unwrap();
        assert_eq!(o.flags, libc::MS_LAZYTIME);
        assert_eq!((o.rec_attr_set, o.rec_attr_clr), (0, MOUNT_ATTR__ATIME));
        assert_eq!(
            propagation_flag("rslave"),
            Some(libc::MS_SLAVE | libc::MS_REC)
        );
        assert_eq!(propagation_flag("ro"), None);
    }

    #[test]
    fn attrs() {
        assert_eq!(
            attr_from_flags(libc::MS_RDONLY | libc::MS_NODEV),
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV
        );
    }
}
