//! On-disk cache of compiled filters: `<cache_dir>/<hex key>`.
//!
//! Entry format (integers little-endian):
//!
//! ```text
//!  0..8   magic "SPRTBPF\0"
//!  8..12  format version (FORMAT_VERSION)
//! 12..16  seccomp(2) filter flags
//! 16..20  payload length in bytes (a multiple of 8, at most BPF_MAXINSNS * 8)
//! 20..24  reserved, 0
//! 24..56  the entry's key (must equal the key it is looked up by)
//! 56..88  SHA-256 of bytes 0..56 followed by the payload
//! 88..    payload: the raw `struct sock_filter` array (native endian)
//! ```
//!
//! Any mismatch (size, magic, version, flags, length, key, checksum, owner) is a miss: the caller
//! recompiles and overwrites. Writes go to a unique temporary name in the same directory and are
//! renamed into place, so readers only ever see whole entries and concurrent starts are safe;
//! there is no fsync (the state lives on tmpfs, and a torn entry fails its checksum anyway).
//! The directory is bounded (`MAX_ENTRIES`, `MAX_BYTES`) with LRU eviction by mtime: a hit
//! touches the entry's mtime, an insert evicts the oldest entries when over the bound.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use crate::compile::{BPF_MAXINSNS, KNOWN_FLAGS};
use crate::sha256::Sha256;

pub const MAGIC: [u8; 8] = *b"SPRTBPF\0";
pub const FORMAT_VERSION: u32 = 1;
pub const HEADER_LEN: usize = 88;
/// Default bound on the number of entries.
pub const MAX_ENTRIES: usize = 64;
/// Default bound on the total size of the entries.
pub const MAX_BYTES: u64 = 16 << 20;
/// Temporary files left behind by a crashed writer are removed after this long.
const STALE_TMP: Duration = Duration::from_secs(600);
const TMP_PREFIX: &str = ".tmp-";

fn checksum(header: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(&header[..56]);
    h.update(payload);
    h.finish()
}

/// Serialises one entry.
pub fn encode(key: &[u8; 32], flags: u32, payload: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(HEADER_LEN + payload.len());
    buf.extend_from_slice(&MAGIC);
    buf.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    buf.extend_from_slice(&flags.to_le_bytes());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&0u32.to_le_bytes());
    buf.extend_from_slice(key);
    let sum = checksum(&buf, payload);
    buf.extend_from_slice(&sum);
    buf.extend_from_slice(payload);
    buf
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Validates one entry; returns its flags and payload.
pub fn decode<'a>(buf: &'a [u8], key: &[u8; 32]) -> Option<(u32, &'a [u8])> {
    if buf.len() < HEADER_LEN + 8 || buf.len() > HEADER_LEN + BPF_MAXINSNS * 8 {
        return None;
    }
    let (header, payload) = buf.split_at(HEADER_LEN);
    if header[..8] != MAGIC || le32(header, 8) != FORMAT_VERSION {
        return None;
    }
    let flags = le32(header, 12);
    let len = le32(header, 16) as usize;
    if flags & !KNOWN_FLAGS != 0
        || le32(header, 20) != 0
        || len != payload.len()
        || !len.is_multiple_of(8)
    {
        return None;
    }
    if header[24..56] != key[..] || header[56..88] != checksum(header, payload) {
        return None;
    }
    Some((flags, payload))
}

/// Looks `key` up. Returns the validated entry's flags and filter; touches its mtime (LRU).
/// Every failure is a miss.
pub fn lookup(
    dir: &Path,
    key_hex: &str,
    key: &[u8; 32],
) -> Option<(u32, Box<[libc::sock_filter]>)> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir.join(key_hex))
        .ok()?;
    let md = file.metadata().ok()?;
    let size = md.len() as usize;
    // SAFETY: geteuid(2) takes no arguments, touches no memory and always succeeds.
    let euid = unsafe { libc::geteuid() };
    if !md.is_file() || md.uid() != euid || size > HEADER_LEN + BPF_MAXINSNS * 8 {
        return None;
    }
    let mut buf = vec![0u8; size];
    file.read_exact(&mut buf).ok()?;
    let (flags, payload) = decode(&buf, key)?;
    let filter = crate::compile::bytes_to_filter(payload)?;
    touch(&file);
    Some((flags, filter))
}

/// Sets the entry's mtime to now (the LRU clock). Failure is harmless.
fn touch(file: &File) {
    // SAFETY: valid fd; a null `times` means "now" for both timestamps.
    unsafe { libc::futimens(file.as_raw_fd(), std::ptr::null()) };
}

fn tmp_name(key_hex: &str) -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{TMP_PREFIX}{key_hex}-{}-{}-{nanos}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates the cache directory (mode 0700) if needed.
pub fn ensure_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Stores an entry atomically, then evicts down to the default bounds. On error the temporary
/// file is removed and the error returned (callers ignore it: the cache is an optimisation).
pub fn store(
    dir: &Path,
    key_hex: &str,
    key: &[u8; 32],
    flags: u32,
    payload: &[u8],
) -> io::Result<()> {
    store_with_limits(dir, key_hex, key, flags, payload, MAX_ENTRIES, MAX_BYTES)
}

/// [`store`] with explicit bounds.
pub fn store_with_limits(
    dir: &Path,
    key_hex: &str,
    key: &[u8; 32],
    flags: u32,
    payload: &[u8],
    max_entries: usize,
    max_bytes: u64,
) -> io::Result<()> {
    ensure_dir(dir)?;
    let entry = encode(key, flags, payload);
    let tmp = dir.join(tmp_name(key_hex));
    let res = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(&entry)?;
        drop(f);
        fs::rename(&tmp, dir.join(key_hex))
    })();
    if let Err(e) = res {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    evict(dir, max_entries, max_bytes, Some(key_hex))
}

fn is_key_name(name: &[u8]) -> bool {
    name.len() == 64 && name.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Removes the least recently used entries until at most `max_entries` entries of at most
/// `max_bytes` in total remain (never `keep`, the entry just written), and temporary files
/// older than ten minutes. Files that are not cache entries are left alone.
pub fn evict(dir: &Path, max_entries: usize, max_bytes: u64, keep: Option<&str>) -> io::Result<()> {
    let now = SystemTime::now();
    let mut entries: Vec<(SystemTime, u64, std::ffi::OsString)> = Vec::new();
    for de in fs::read_dir(dir)? {
        let Ok(de) = de else { continue };
        let name = de.file_name();
        let Ok(md) = de.metadata() else { continue }; // lstat; vanished => skip
        let mtime = md.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if name.as_bytes().starts_with(TMP_PREFIX.as_bytes()) {
            if now.duration_since(mtime).is_ok_and(|age| age > STALE_TMP) {
                let _ = fs::remove_file(de.path());
            }
            continue;
        }
        if !is_key_name(name.as_bytes()) || !md.is_file() {
            continue;
        }
        entries.push((mtime, md.len(), name));
    }
    let mut count = entries.len();
    let mut bytes: u64 = entries.iter().map(|e| e.1).sum();
    if count <= max_entries && bytes <= max_bytes {
        return Ok(());
    }
    // Oldest first; ties broken by name so that concurrent evictors agree.
    entries.sort();
    for (_, size, name) in entries {
        if count <= max_entries && bytes <= max_bytes {
            break;
        }
        if keep.is_some_and(|k| OsStr::new(k) == name) {
            continue;
        }
        match fs::remove_file(dir.join(&name)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {} // a concurrent evictor won
            Err(e) => return Err(e),
        }
        count -= 1;
        bytes -= size;
    }
    Ok(())
}
