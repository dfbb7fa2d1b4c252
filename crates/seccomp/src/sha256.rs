//! SHA-256 (FIPS 180-4) for the cache key and the cache entries' checksum: a thin wrapper over
//! the `sha2` crate (RustCrypto), which uses the x86_64 SHA extensions when the CPU has them
//! (detected once at run time by `cpufeatures`) and a portable block function otherwise.
//!
//! Until 2026-11-25 this file was a hand-written SHA-256 (334 lines, with its own SHA-NI block
//! function). The switch was measured (bench/results/sha256-2026-11-25.md) and the digests are
//! the same bytes: the key and checksum tests in canon.rs pin values computed with the old code,
//! so cache entries written by an older sprout are still found.

use sha2::Digest;

/// Streaming SHA-256 state.
#[derive(Clone, Default)]
pub struct Sha256(sha2::Sha256);

impl Sha256 {
    pub fn new() -> Self {
        Sha256(sha2::Sha256::new())
    }

    /// Feeds `data` into the hash.
    #[inline]
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// Finishes the hash and returns the 32-byte digest.
    pub fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }

    /// One-shot digest.
    pub fn digest(data: &[u8]) -> [u8; 32] {
        sha2::Sha256::digest(data).into()
    }
}

/// Lower-case hex of a digest.
pub fn hex(digest: &[u8; 32]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 15)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(data: &[u8]) -> String {
        hex(&Sha256::digest(data))
    }

    /// FIPS 180-4 / NIST example vectors: the digest bytes the cache was keyed with before the
    /// switch to `sha2` are the ones it is keyed with now.
    #[test]
    fn known_vectors() {
        assert_eq!(
            h(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            h(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            h(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        let million_a = vec![b'a'; 1_000_000];
        assert_eq!(
            h(&million_a),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        );
    }

    /// The canonical serialiser feeds many tiny writes: any split of the input gives the
    /// one-shot digest, including splits across the 64-byte block boundary and the 55/56-byte
    /// padding boundary.
    #[test]
    fn streaming_matches_one_shot() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let one = Sha256::digest(&data);
        for chunk in [1usize, 3, 55, 56, 63, 64, 65, 1000] {
            let mut s = Sha256::new();
            for c in data.chunks(chunk) {
                s.update(c);
            }
            assert_eq!(s.finish(), one, "chunk {chunk}");
        }
        for len in [55usize, 56, 63, 64, 119, 120] {
            let mut s = Sha256::default();
            s.update(&data[..len]);
            assert_eq!(
                s.clone().finish(),
                Sha256::digest(&data[..len]),
                "len {len}"
            );
        }
    }

    #[test]
    fn hex_is_lower_case_and_64_long() {
        let d: [u8; 32] = std::array::from_fn(|i| (i * 9) as u8);
        let s = hex(&d);
        assert_eq!(s.len(), 64);
        assert!(s.starts_with("0009121b242d363f"));
        assert!(s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    }
}
