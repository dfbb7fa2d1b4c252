//! Canonical serialisation of an OCI seccomp profile, streamed straight into SHA-256, and the
//! cache key derived from it.
//!
//! Every field of `LinuxSeccomp` is fed in, in a fixed order, with explicit tags for enum values
//! (not Rust discriminants, which could change between oci-spec releases), `Option` presence
//! tags and length prefixes, so that no two different profiles serialise to the same bytes.
//! Per-rule `errnoRet` and `defaultErrnoRet` are part of it (crun's cache forgets `errnoRet` and
//! reuses a stale filter; we must not). Argument conditions are kept in the order given.

use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompFilterFlag, LinuxSeccompOperator,
};

use crate::sha256::{hex, Sha256};

/// Bump when the canonical form, the meaning of a cache entry or the compiled form of a profile
/// changes (2: libseccomp's binary-tree layout, SCMP_FLTATR_CTL_OPTIMIZE = 2; 3: compact.rs;
/// 4: the ENOSYS stub of enosys.rs in front of the program).
const KEY_FORMAT: u32 = 4;

/// Stable tag of an action.
pub(crate) fn action_tag(a: LinuxSeccompAction) -> u8 {
    match a {
        LinuxSeccompAction::ScmpActKill => 1,
        LinuxSeccompAction::ScmpActKillThread => 2,
        LinuxSeccompAction::ScmpActKillProcess => 3,
        LinuxSeccompAction::ScmpActTrap => 4,
        LinuxSeccompAction::ScmpActErrno => 5,
        LinuxSeccompAction::ScmpActNotify => 6,
        LinuxSeccompAction::ScmpActTrace => 7,
        LinuxSeccompAction::ScmpActLog => 8,
        LinuxSeccompAction::ScmpActAllow => 9,
    }
}

fn flag_tag(f: LinuxSeccompFilterFlag) -> u8 {
    match f {
        LinuxSeccompFilterFlag::SeccompFilterFlagLog => 1,
        LinuxSeccompFilterFlag::SeccompFilterFlagTsync => 2,
        LinuxSeccompFilterFlag::SeccompFilterFlagSpecAllow => 3,
        LinuxSeccompFilterFlag::SeccompFilterFlagWaitKillableRecv => 4,
    }
}

fn op_tag(o: LinuxSeccompOperator) -> u8 {
    match o {
        LinuxSeccompOperator::ScmpCmpNe => 1,
        LinuxSeccompOperator::ScmpCmpLt => 2,
        LinuxSeccompOperator::ScmpCmpLe => 3,
        LinuxSeccompOperator::ScmpCmpEq => 4,
        LinuxSeccompOperator::ScmpCmpGe => 5,
        LinuxSeccompOperator::ScmpCmpGt => 6,
        LinuxSeccompOperator::ScmpCmpMaskedEq => 7,
    }
}

fn arch_tag(a: Arch) -> u32 {
    // The enum is #[repr(u32)] with the libseccomp/audit values, which are stable ABI.
    a as u32
}

/// A thin writer that feeds typed, unambiguous fields into the hasher.
struct Canon(Sha256);

impl Canon {
    #[inline]
    fn u8(&mut self, v: u8) {
        self.0.update(&[v]);
    }
    #[inline]
    fn u32(&mut self, v: u32) {
        self.0.update(&v.to_le_bytes());
    }
    #[inline]
    fn u64(&mut self, v: u64) {
        self.0.update(&v.to_le_bytes());
    }
    /// A length or count. Profiles are far below 4 GiB; saturate rather than wrap so that no
    /// two different inputs can collide through truncation (such a profile cannot compile).
    #[inline]
    fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    #[inline]
    fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        self.0.update(b);
    }
    #[inline]
    fn opt_u32(&mut self, v: Option<u32>) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                self.u32(v);
            }
        }
    }
    #[inline]
    fn opt_u64(&mut self, v: Option<u64>) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                self.u64(v);
            }
        }
    }
}

/// Feeds the canonical form of `profile` into `h`.
pub(crate) fn hash_profile(h: Sha256, profile: &LinuxSeccomp) -> Sha256 {
    let mut c = Canon(h);
    c.u8(b'D');
    c.u8(action_tag(profile.default_action()));
    c.opt_u32(profile.default_errno_ret());

    c.u8(b'A');
    match profile.architectures() {
        None => c.u8(0),
        Some(v) => {
            c.u8(1);
            c.len(v.len());
            for a in v {
                c.u32(arch_tag(*a));
            }
        }
    }

    c.u8(b'F');
    match profile.flags() {
        None => c.u8(0),
        Some(v) => {
            c.u8(1);
            c.len(v.len());
            for f in v {
                c.u8(flag_tag(*f));
            }
        }
    }

    c.u8(b'L');
    match profile.listener_path() {
        None => c.u8(0),
        Some(p) => {
            c.u8(1);
            c.bytes(std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()));
        }
    }
    c.u8(b'M');
    match profile.listener_metadata() {
        None => c.u8(0),
        Some(m) => {
            c.u8(1);
            c.bytes(m.as_bytes());
        }
    }

    c.u8(b'S');
    match profile.syscalls() {
        None => c.u8(0),
        Some(rules) => {
            c.u8(1);
            c.len(rules.len());
            for r in rules {
                c.u8(b'R');
                c.len(r.names().len());
                for n in r.names() {
                    c.bytes(n.as_bytes());
                }
                c.u8(action_tag(r.action()));
                c.opt_u32(r.errno_ret());
                match r.args() {
                    None => c.u8(0),
                    Some(args) => {
                        c.u8(1);
                        c.len(args.len());
                        for a in args {
                            c.u64(a.index() as u64);
                            c.u64(a.value());
                            c.opt_u64(a.value_two());
                            c.u8(op_tag(a.op()));
                        }
                    }
                }
            }
        }
    }
    c.u8(b'E');
    c.0
}

/// Everything besides the profile that changes the compiled program or the entry format.
pub(crate) fn hash_environment(h: Sha256, libseccomp: (u32, u32, u32)) -> Sha256 {
    let mut c = Canon(h);
    c.bytes(b"sprout-seccomp cache key");
    c.u32(KEY_FORMAT);
    c.u32(crate::cache::FORMAT_VERSION);
    c.u32(crate::compile::OPTIMIZE);
    c.u32(crate::compact::VERSION);
    c.bytes(env!("CARGO_PKG_VERSION").as_bytes());
    c.bytes(std::env::consts::ARCH.as_bytes());
    c.u8(u8::from(cfg!(target_endian = "little")));
    c.u32(libseccomp.0);
    c.u32(libseccomp.1);
    c.u32(libseccomp.2);
    c.0
}

/// Raw cache key of `profile` (SHA-256 of the environment and the canonical profile).
pub fn key_bytes(profile: &LinuxSeccomp) -> [u8; 32] {
    let h = hash_environment(Sha256::new(), crate::compile::libseccomp_version());
    hash_profile(h, profile).finish()
}

/// Hex cache key of `profile`: the file name of its entry in the cache directory.
pub fn key(profile: &LinuxSeccomp) -> String {
    hex(&key_bytes(profile))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of `profile` with a fixed libseccomp version, so that the test does not depend
    /// on the host's libseccomp.
    fn pinned_key(profile: &LinuxSeccomp) -> String {
        let h = hash_environment(Sha256::new(), (2, 5, 4));
        hex(&hash_profile(h, profile).finish())
    }

    fn small_profile() -> LinuxSeccomp {
        serde_json::from_value(serde_json::json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "defaultErrnoRet": 1,
            "architectures": ["SCMP_ARCH_X86_64"],
            "syscalls": [
                {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
                {"names": ["kill"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13, "args": [
                    {"index": 1, "value": 9, "op": "SCMP_CMP_EQ"}]}
            ]
        }))
        .unwrap()
    }

    /// Cache entries written by an earlier build stay valid only if the key of a profile keeps
    /// its exact bytes: this pins them (computed with the hand-written SHA-256 that sprout used
    /// until 2026-11-25, before the `sha2` crate). A deliberate change of the canonical form
    /// bumps KEY_FORMAT and updates these values; the crate version and the architecture are
    /// part of the key, hence the pinned values hold for this version on x86_64.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn key_of_fixed_profiles_is_pinned() {
        assert_eq!(env!("CARGO_PKG_VERSION"), "0.1.0", "update the pinned keys");
        assert_eq!(
            pinned_key(&small_profile()),
            "d5fbf43fef00cb5e4339d91de0ea29a64d8ab27df5feb7bbbf5d02645a1e48c1"
        );
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/podman-default.json");
        let spec: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let podman: LinuxSeccomp =
            serde_json::from_value(spec["linux"]["seccomp"].clone()).unwrap();
        assert_eq!(
            pinned_key(&podman),
            "2e877c3cf8c866a58fbf5a286d1306e4ed03c8906d8c04e9cfe86b0194753b5e"
        );
    }

    /// A cache entry's checksum (SHA-256 of its header and payload) keeps its bytes too, or
    /// every entry written by an earlier build would be a miss.
    #[test]
    fn entry_checksum_is_pinned() {
        let payload: Vec<u8> = (0u8..64).collect();
        let entry = crate::cache::encode(&[7; 32], 0, &payload);
        let sum: [u8; 32] = entry[56..88].try_into().unwrap();
        assert_eq!(
            hex(&sum),
            "6e3a5866e94882afb53ba30c66d23fbe347a754e9e034371154924bba9506567"
        );
        assert!(crate::cache::decode(&entry, &[7; 32]).is_some());
    }

    /// The public key is the pinned computation with the host's libseccomp version.
    #[test]
    fn key_is_the_environment_then_the_profile() {
        let p = small_profile();
        let h = hash_environment(Sha256::new(), crate::compile::libseccomp_version());
        assert_eq!(key(&p), hex(&hash_profile(h, &p).finish()));
        assert_eq!(key(&p), key(&small_profile()));
        assert_eq!(key_bytes(&p).len(), 32);
    }
}
