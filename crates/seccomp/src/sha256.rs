//! A small, dependency-free streaming SHA-256 (FIPS 180-4).
//!
//! Used for the cache key and for the cache entries' checksum. The inputs are small (a canonical
//! profile of a few KiB, a BPF program of a few KiB), so a compact implementation is plenty; on
//! x86_64 CPUs with the SHA extensions the block function uses them (detected once at run time).

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

const H0: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// Streaming SHA-256 state.
#[derive(Clone)]
pub struct Sha256 {
    state: [u32; 8],
    buf: [u8; 64],
    buf_len: usize,
    total: u64,
}

impl Default for Sha256 {
    fn default() -> Self {
        Self::new()
    }
}

impl Sha256 {
    pub fn new() -> Self {
        Sha256 {
            state: H0,
            buf: [0; 64],
            buf_len: 0,
            total: 0,
        }
    }

    /// Feeds `data` into the hash.
    #[inline]
    pub fn update(&mut self, mut data: &[u8]) {
        self.total = self.total.wrapping_add(data.len() as u64);
        // Fast path for the many tiny writes of the canonical serialiser.
        if self.buf_len + data.len() < 64 {
            self.buf[self.buf_len..self.buf_len + data.len()].copy_from_slice(data);
            self.buf_len += data.len();
            return;
        }
        if self.buf_len > 0 {
            let take = 64 - self.buf_len;
            self.buf[self.buf_len..].copy_from_slice(&data[..take]);
            data = &data[take..];
            let block = self.buf;
            compress(&mut self.state, &block);
            self.buf_len = 0;
        }
        let full = data.len() / 64 * 64;
        if full > 0 {
            compress(&mut self.state, &data[..full]);
        }
        let rest = &data[full..];
        self.buf[..rest.len()].copy_from_slice(rest);
        self.buf_len = rest.len();
    }

    /// Finishes the hash and returns the 32-byte digest.
    pub fn finish(mut self) -> [u8; 32] {
        let bits = self.total.wrapping_mul(8);
        let mut pad = [0u8; 72];
        pad[0] = 0x80;
        // Pad so that, with the 8 length bytes, the message is a multiple of 64 bytes.
        let pad_len = if self.buf_len < 56 {
            56 - self.buf_len
        } else {
            120 - self.buf_len
        };
        pad[pad_len..pad_len + 8].copy_from_slice(&bits.to_be_bytes());
        self.update(&pad[..pad_len + 8]);
        debug_assert_eq!(self.buf_len, 0);
        let mut out = [0u8; 32];
        for (i, w) in self.state.iter().enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
        }
        out
    }

    /// One-shot digest.
    pub fn digest(data: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(data);
        h.finish()
    }
}

/// Lower-case hex of a digest.
pub fn hex(digest: &[u8; 32]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    s
}

/// Compresses whole 64-byte blocks.
fn compress(state: &mut [u32; 8], blocks: &[u8]) {
    debug_assert_eq!(blocks.len() % 64, 0);
    #[cfg(target_arch = "x86_64")]
    {
        if shani::available() {
            // SAFETY: the CPU supports the SHA, SSE2, SSSE3 and SSE4.1 instructions (checked above).
            unsafe { shani::compress(state, blocks) };
            return;
        }
    }
    compress_soft(state, blocks)
}

fn compress_soft(state: &mut [u32; 8], blocks: &[u8]) {
    for block in blocks.chunks_exact(64) {
        let mut w = [0u32; 64];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([
                block[4 * i],
                block[4 * i + 1],
                block[4 * i + 2],
                block[4 * i + 3],
            ]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = *state;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = h
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            h = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (s, v) in state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
            *s = s.wrapping_add(v);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod shani {
    use core::arch::x86_64::*;
    use std::sync::atomic::{AtomicU8, Ordering};

    static AVAILABLE: AtomicU8 = AtomicU8::new(0); // 0 unknown, 1 no, 2 yes

    #[inline]
    pub fn available() -> bool {
        match AVAILABLE.load(Ordering::Relaxed) {
            2 => true,
            1 => false,
            _ => {
                let yes = detect();
                AVAILABLE.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
                yes
            }
        }
    }

    /// SHA + SSSE3 + SSE4.1 (SSE2 is part of x86_64), straight from three CPUID leaves.
    /// Not `is_x86_feature_detected!`: std's first call reads every leaf it knows (8+ CPUID
    /// instructions), and CPUID traps to the hypervisor in a VM: ~44 µs of each `sprout run`
    /// on the development host (perf), against ~15 µs for these three. These extensions use
    /// only XMM registers, which every x86_64 kernel saves, so no XGETBV check is needed.
    fn detect() -> bool {
        // Leaf 7 is read only if leaf 0 says it exists.
        if __cpuid(0).eax < 7 {
            return false;
        }
        let ecx1 = __cpuid(1).ecx;
        let ebx7 = __cpuid_count(7, 0).ebx;
        ecx1 & (1 << 9) != 0 && ecx1 & (1 << 19) != 0 && ebx7 & (1 << 29) != 0
    }

    #[cfg(test)]
    pub fn detect_matches_std() -> bool {
        detect()
            == (std::is_x86_feature_detected!("sha")
                && std::is_x86_feature_detected!("ssse3")
                && std::is_x86_feature_detected!("sse4.1"))
    }

    /// Round constants `K[i..i + 4]` as one vector.
    ///
    /// # Safety
    ///
    /// `i + 4 <= 64` (`K` has 64 entries); the callers pass i = 0, 4, .., 60.
    #[inline(always)]
    unsafe fn k(i: usize) -> __m128i {
        // SAFETY: by the contract above `K[i..i + 4]` is in bounds: 16 readable bytes, and
        // _mm_loadu_si128 has no alignment requirement. SSE2 is part of x86_64.
        unsafe { _mm_loadu_si128(super::K.as_ptr().add(i).cast::<__m128i>()) }
    }

    /// The Intel SHA extensions block function (after Intel's reference code). Hashes every
    /// whole 64-byte block of `blocks` into `state` (a trailing partial block is ignored).
    ///
    /// # Safety
    ///
    /// The CPU must support the SHA, SSE2, SSSE3 and SSE4.1 instructions ([`available`]
    /// returned true); running it elsewhere is undefined behaviour (an illegal instruction at
    /// best).
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    pub unsafe fn compress(state: &mut [u32; 8], blocks: &[u8]) {
        let mask = _mm_set_epi64x(
            0x0c0d_0e0f_0809_0a0bu64 as i64,
            0x0405_0607_0001_0203u64 as i64,
        );
        // state: a b c d e f g h -> ABEF / CDGH layout
        // SAFETY: `state` is 8 u32 = 32 readable bytes: the unaligned loads read bytes 0..16
        // (d c b a) and 16..32 (h g f e).
        let (mut tmp, mut state1) = unsafe {
            (
                _mm_loadu_si128(state.as_ptr().cast::<__m128i>()),
                _mm_loadu_si128(state.as_ptr().add(4).cast::<__m128i>()),
            )
        };
        tmp = _mm_shuffle_epi32(tmp, 0xB1); // c d a b
        state1 = _mm_shuffle_epi32(state1, 0x1B); // e f g h
        let mut state0 = _mm_alignr_epi8(tmp, state1, 8); // a b e f
        state1 = _mm_blend_epi16(state1, tmp, 0xF0); // c d g h

        for block in blocks.chunks_exact(64) {
            let abef_save = state0;
            let cdgh_save = state1;
            let p = block.as_ptr().cast::<__m128i>();
            // SAFETY: chunks_exact(64) gives exactly 64 readable bytes: the four unaligned
            // 16-byte loads at p, p+1, p+2, p+3 (in __m128i units) stay inside `block`.
            let (mut w0, mut w1, mut w2, mut w3) = unsafe {
                (
                    _mm_shuffle_epi8(_mm_loadu_si128(p), mask),
                    _mm_shuffle_epi8(_mm_loadu_si128(p.add(1)), mask),
                    _mm_shuffle_epi8(_mm_loadu_si128(p.add(2)), mask),
                    _mm_shuffle_epi8(_mm_loadu_si128(p.add(3)), mask),
                )
            };

            // Rounds 0..16 use the message words directly; 16..64 use the schedule.
            let mut i = 0;
            while i < 16 {
                let w = [w0, w1, w2, w3][i / 4];
                // SAFETY: i is 0, 4, 8 or 12 here, so i + 4 <= 64.
                let msg = _mm_add_epi32(w, unsafe { k(i) });
                state1 = _mm_sha256rnds2_epu32(state1, state0, msg);
                state0 = _mm_sha256rnds2_epu32(state0, state1, _mm_shuffle_epi32(msg, 0x0E));
                i += 4;
            }
            while i < 64 {
                // next = sha256msg2(sha256msg1(w0, w1) + alignr(w3, w2, 4), w3)
                let t = _mm_add_epi32(_mm_sha256msg1_epu32(w0, w1), _mm_alignr_epi8(w3, w2, 4));
                let next = _mm_sha256msg2_epu32(t, w3);
                w0 = w1;
                w1 = w2;
                w2 = w3;
                w3 = next;
                // SAFETY: i is 16, 20, .., 60 here, so i + 4 <= 64.
                let msg = _mm_add_epi32(next, unsafe { k(i) });
                state1 = _mm_sha256rnds2_epu32(state1, state0, msg);
                state0 = _mm_sha256rnds2_epu32(state0, state1, _mm_shuffle_epi32(msg, 0x0E));
                i += 4;
            }
            state0 = _mm_add_epi32(state0, abef_save);
            state1 = _mm_add_epi32(state1, cdgh_save);
        }

        tmp = _mm_shuffle_epi32(state0, 0x1B); // f e b a
        state1 = _mm_shuffle_epi32(state1, 0xB1); // d c h g
        state0 = _mm_blend_epi16(tmp, state1, 0xF0); // d c b a
        state1 = _mm_alignr_epi8(state1, tmp, 8); // h g f e
                                                  // SAFETY: `state` is 32 writable bytes, borrowed mutably: the unaligned stores write
                                                  // bytes 0..16 and 16..32 of it.
        unsafe {
            _mm_storeu_si128(state.as_mut_ptr().cast::<__m128i>(), state0);
            _mm_storeu_si128(state.as_mut_ptr().add(4).cast::<__m128i>(), state1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(data: &[u8]) -> String {
        hex(&Sha256::digest(data))
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn own_cpu_detection_agrees_with_std() {
        assert!(shani::detect_matches_std());
    }

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

    #[test]
    fn soft_and_accelerated_agree_and_streaming_matches() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let one = Sha256::digest(&data);
        // Byte-at-a-time and odd-sized chunks.
        for chunk in [1usize, 3, 63, 64, 65, 1000] {
            let mut s = Sha256::new();
            for c in data.chunks(chunk) {
                s.update(c);
            }
            assert_eq!(s.finish(), one, "chunk {chunk}");
        }
        let mut st = H0;
        compress_soft(&mut st, &data[..64 * 150]);
        let mut st2 = H0;
        compress(&mut st2, &data[..64 * 150]);
        assert_eq!(st, st2);
    }
}
