//! The on-disk cache: hits, corrupt entries, eviction, unwritable directories, concurrency.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::{entry_path, euid, profile, TempDir};
use serde_json::json;
use sprout_seccomp::{cache, prepare, Source};

fn small(n: u32) -> oci_spec::runtime::LinuxSeccomp {
    profile(json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["getppid"], "action": "SCMP_ACT_ERRNO", "errnoRet": n}]
    }))
}

fn tmp_files(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".tmp"))
        .collect()
}

#[test]
fn miss_then_hit_same_bytes_and_modes() {
    let t = TempDir::new("hit");
    let dir = t.path().join("a/b/cache"); // missing parents are created
    let p = small(42);
    let (a, sa) = prepare(&p, Some(&dir)).unwrap();
    assert_eq!(sa, Source::Compiled);
    let (b, sb) = prepare(&p, Some(&dir)).unwrap();
    assert_eq!(sb, Source::Cache);
    assert_eq!(a.bpf_bytes(), b.bpf_bytes());
    assert_eq!(a.flags(), b.flags());
    assert_eq!(a.wants_listener(), b.wants_listener());
    assert_eq!(
        fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let entry = entry_path(&dir, &p);
    assert_eq!(
        fs::metadata(&entry).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(tmp_files(&dir).is_empty());
    // Entry = header + program.
    assert_eq!(
        fs::metadata(&entry).unwrap().len() as usize,
        cache::HEADER_LEN + a.bpf_bytes().len()
    );
}

#[test]
fn no_cache_dir_always_compiles() {
    let p = small(7);
    for _ in 0..2 {
        let (_, s) = prepare(&p, None).unwrap();
        assert_eq!(s, Source::Compiled);
    }
}

type Corruption = (&'static str, fn(&Path, &Path));

fn corruptions() -> Vec<Corruption> {
    fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
        let mut b = fs::read(path).unwrap();
        f(&mut b);
        fs::write(path, b).unwrap();
    }
    vec![
        ("truncated payload", |p, _| {
            edit(p, |b| b.truncate(b.len() - 8))
        }),
        ("truncated mid-instruction", |p, _| {
            edit(p, |b| b.truncate(b.len() - 3))
        }),
        ("truncated header", |p, _| edit(p, |b| b.truncate(40))),
        ("empty", |p, _| edit(p, |b| b.clear())),
        ("trailing garbage", |p, _| {
            edit(p, |b| b.extend_from_slice(&[0; 8]))
        }),
        ("flipped payload byte", |p, _| {
            edit(p, |b| {
                let i = b.len() - 5;
                b[i] ^= 0x01
            })
        }),
        ("flipped first payload byte", |p, _| {
            edit(p, |b| b[cache::HEADER_LEN] ^= 0x80)
        }),
        ("wrong magic", |p, _| edit(p, |b| b[0] = b'X')),
        ("wrong version", |p, _| edit(p, |b| b[8] ^= 0xff)),
        ("flags changed", |p, _| edit(p, |b| b[12] ^= 0x02)),
        ("length field changed", |p, _| edit(p, |b| b[16] ^= 0x08)),
        ("key field changed", |p, _| edit(p, |b| b[30] ^= 0x01)),
        ("checksum changed", |p, _| edit(p, |b| b[60] ^= 0x01)),
        ("another profile's valid entry", |p, other| {
            fs::copy(other, p).unwrap();
        }),
        ("not owned by us", |p, _| {
            std::os::unix::fs::chown(p, Some(12345), Some(12345)).unwrap()
        }),
        ("symlink to a valid entry", |p, other| {
            fs::remove_file(p).unwrap();
            // even a valid entry behind a symlink is not followed
            let copy = p.with_extension("copy");
            fs::copy(other, &copy).unwrap();
            std::os::unix::fs::symlink(&copy, p).unwrap();
        }),
        ("a directory", |p, _| {
            fs::remove_file(p).unwrap();
            fs::create_dir(p).unwrap();
        }),
    ]
}

#[test]
fn corrupt_entries_are_never_loaded_and_get_recompiled() {
    let t = TempDir::new("corrupt");
    let dir = t.path();
    let p = small(42);
    let other = small(43);
    let fresh = sprout_seccomp::compile_profile(&p).unwrap();
    let (_, s) = prepare(&other, Some(dir)).unwrap();
    assert_eq!(s, Source::Compiled);
    let other_entry = entry_path(dir, &other);
    let entry = entry_path(dir, &p);
    for (name, corrupt) in corruptions() {
        if name == "not owned by us" && euid() != 0 {
            continue; // chown needs root
        }
        let (_, s) = prepare(&p, Some(dir)).unwrap();
        assert!(entry.is_file(), "{name}: entry missing");
        let (_, s2) = prepare(&p, Some(dir)).unwrap();
        assert_eq!(s2, Source::Cache, "{name}: setup (first was {s:?})");
        corrupt(&entry, &other_entry);
        let (got, s) = prepare(&p, Some(dir)).unwrap();
        assert_eq!(s, Source::Compiled, "{name}: corrupt entry was loaded");
        assert_eq!(got.bpf_bytes(), fresh.bpf_bytes(), "{name}");
        if name == "a directory" {
            // rename cannot replace a directory: still a miss every time, never a failure
            fs::remove_dir(&entry).unwrap();
            continue;
        }
        // Overwritten with a good entry: the next start hits.
        let meta = fs::symlink_metadata(&entry).unwrap();
        assert!(meta.is_file(), "{name}: not replaced by a regular file");
        assert_eq!(meta.uid(), euid());
        let (again, s) = prepare(&p, Some(dir)).unwrap();
        assert_eq!(s, Source::Cache, "{name}: not rewritten");
        assert_eq!(again.bpf_bytes(), fresh.bpf_bytes(), "{name}");
    }
    assert!(tmp_files(dir).is_empty());
}

#[test]
fn decode_rejects_what_encode_did_not_write() {
    let key = [7u8; 32];
    let payload: Vec<u8> = (0..64u8).collect();
    let e = cache::encode(&key, 2, &payload);
    assert_eq!(cache::decode(&e, &key), Some((2, &payload[..])));
    assert_eq!(cache::decode(&e, &[8u8; 32]), None);
    for i in 0..e.len() {
        let mut b = e.clone();
        b[i] ^= 0x10;
        assert_eq!(cache::decode(&b, &key), None, "flip at {i} accepted");
    }
    for n in 0..e.len() {
        assert_eq!(
            cache::decode(&e[..n], &key),
            None,
            "truncation to {n} accepted"
        );
    }
    // Unknown filter flags (e.g. TSYNC, which load never passes) are refused.
    let bad = cache::encode(&key, 1, &payload);
    assert_eq!(cache::decode(&bad, &key), None);
    // Payload not a whole number of instructions.
    let bad = cache::encode(&key, 0, &payload[..60]);
    assert_eq!(cache::decode(&bad, &key), None);
}

fn set_mtime(path: &Path, secs: i64) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let ts = [
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
    ];
    // SAFETY: `c` is a NUL-terminated path and `ts` the two timespecs utimensat reads; both
    // outlive the call.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), 0) };
    assert_eq!(rc, 0);
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.len() == 64)
        .collect();
    v.sort();
    v
}

#[test]
fn eviction_keeps_the_default_bound() {
    let t = TempDir::new("bound");
    let dir = t.path();
    let n = cache::MAX_ENTRIES as u32 + 6;
    for i in 0..n {
        let (_, s) = prepare(&small(100 + i), Some(dir)).unwrap();
        assert_eq!(s, Source::Compiled);
        assert!(entries(dir).len() <= cache::MAX_ENTRIES);
    }
    assert_eq!(entries(dir).len(), cache::MAX_ENTRIES);
    // The most recent one is there.
    assert!(entry_path(dir, &small(100 + n - 1)).exists());
}

#[test]
fn eviction_is_lru_by_mtime_and_a_hit_refreshes() {
    let t = TempDir::new("lru");
    let dir = t.path();
    let profiles: Vec<_> = (0..6).map(|i| small(200 + i)).collect();
    for (i, p) in profiles.iter().enumerate() {
        prepare(p, Some(dir)).unwrap();
        set_mtime(&entry_path(dir, p), 1_000_000 + i as i64 * 10); // 0 is the oldest
    }
    // A hit on the oldest makes it the newest.
    let (_, s) = prepare(&profiles[0], Some(dir)).unwrap();
    assert_eq!(s, Source::Cache);
    // A stranger file and a fresh temp file are left alone; a stale temp file is removed.
    fs::write(dir.join("README"), b"not an entry").unwrap();
    fs::write(dir.join(".tmp-fresh"), b"x").unwrap();
    fs::write(dir.join(".tmp-stale"), b"x").unwrap();
    set_mtime(&dir.join(".tmp-stale"), 1_000);
    cache::evict(dir, 3, u64::MAX, None).unwrap();
    let left = entries(dir);
    let want: Vec<String> = {
        let mut v: Vec<String> = [0usize, 4, 5]
            .iter()
            .map(|&i| sprout_seccomp::key(&profiles[i]))
            .collect();
        v.sort();
        v
    };
    assert_eq!(left, want);
    assert!(dir.join("README").exists());
    assert!(dir.join(".tmp-fresh").exists());
    assert!(!dir.join(".tmp-stale").exists());

    // Byte bound: each entry is the same size; allow two.
    let size = fs::metadata(entry_path(dir, &profiles[0])).unwrap().len();
    cache::evict(dir, 100, 2 * size, None).unwrap();
    let left = entries(dir);
    assert_eq!(left.len(), 2);
    assert!(left.contains(&sprout_seccomp::key(&profiles[0])));
    // `keep` survives even when it is the oldest.
    set_mtime(&entry_path(dir, &profiles[0]), 10);
    let k0 = sprout_seccomp::key(&profiles[0]);
    cache::evict(dir, 1, u64::MAX, Some(&k0)).unwrap();
    assert_eq!(entries(dir), vec![k0]);
}

#[test]
fn unwritable_cache_dir_does_not_fail_the_start() {
    let t = TempDir::new("unwritable");
    // The "directory" is below a regular file: creating it fails with ENOTDIR.
    fs::write(t.path().join("file"), b"").unwrap();
    let dir = t.path().join("file/cache");
    let p = small(5);
    let (a, s) = prepare(&p, Some(&dir)).unwrap();
    assert_eq!(s, Source::Compiled);
    assert_eq!(
        a.bpf_bytes(),
        sprout_seccomp::compile_profile(&p).unwrap().bpf_bytes()
    );

    // A read-only directory (EACCES for non-root; root bypasses modes, so this also runs the
    // plain path as root).
    let ro = t.path().join("ro");
    fs::create_dir(&ro).unwrap();
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o500)).unwrap();
    let (_, s) = prepare(&p, Some(&ro)).unwrap();
    assert_eq!(s, Source::Compiled);
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o700)).unwrap();
}

/// ENOSPC: a one-page tmpfs filled to the brim. Needs CAP_SYS_ADMIN; skipped without it.
#[test]
fn full_filesystem_falls_back_and_cleans_up() {
    let t = TempDir::new("enospc");
    let mnt = t.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let c = std::ffi::CString::new(mnt.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: all four pointers are NUL-terminated C strings (three literals, `c`) that
    // outlive the call; the mount is undone by the guard below.
    let rc = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            c.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"size=8k,nr_inodes=16".as_ptr().cast(),
        )
    };
    if rc != 0 {
        eprintln!(
            "skipping: cannot mount tmpfs: {}",
            std::io::Error::last_os_error()
        );
        return;
    }
    struct Umount(std::ffi::CString);
    impl Drop for Umount {
        fn drop(&mut self) {
            // SAFETY: the CString is a NUL-terminated path owned by the guard.
            unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
        }
    }
    let _guard = Umount(c);
    let dir = mnt.join("cache");
    fs::create_dir(&dir).unwrap();
    // Fill it.
    let mut filler = fs::File::create(mnt.join("filler")).unwrap();
    let chunk = vec![0u8; 1024];
    while std::io::Write::write_all(&mut filler, &chunk).is_ok() {}
    drop(filler);
    let p = common::podman_profile();
    let (a, s) = prepare(&p, Some(&dir)).unwrap();
    assert_eq!(s, Source::Compiled);
    assert!(!a.is_empty());
    assert!(
        tmp_files(&dir).is_empty(),
        "temp file left behind: {:?}",
        tmp_files(&dir)
    );
    assert!(!entry_path(&dir, &p).exists());
}

#[test]
fn concurrent_starts_agree() {
    let t = TempDir::new("concurrent");
    let dir = t.path().to_path_buf();
    let p = common::podman_profile();
    let want = sprout_seccomp::compile_profile(&p)
        .unwrap()
        .bpf_bytes()
        .to_vec();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let dir = dir.clone();
            let p = p.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for _ in 0..10 {
                    let (got, _) = prepare(&p, Some(&dir)).unwrap();
                    out.push(got.bpf_bytes().to_vec());
                }
                out
            })
        })
        .collect();
    for th in threads {
        for got in th.join().unwrap() {
            assert_eq!(got, want);
        }
    }
    assert!(tmp_files(&dir).is_empty());
    assert_eq!(prepare(&p, Some(&dir)).unwrap().1, Source::Cache);
}
