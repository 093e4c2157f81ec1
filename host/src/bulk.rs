//! Bulk copies between host memory and linear memories: the one place the kernel moves many
//! bytes, because what that costs depends on where the bytes lie.
//!
//! The host `memmove` (glibc's `rep movsb` path, taken from 2–8 KiB on) runs 15–30× slower
//! on some x86-64 processors (measured: AMD EPYC, glibc 2.36) when the destination lies 1
//! to 15 bytes after the source modulo 4 KiB, and up to 1.4× slower at other offsets under
//! 64. A-stacks and segments are page aligned and the buffers copied to and from them are
//! not, so [`copy`] moves such badly placed copies with its own vector loop; others, and
//! every copy on other processors, go to `memmove`.
//!
//! Linear memories may be written by a guest on another thread while the host copies (a
//! peer's shared A-stack pages): these copies read and write through raw pointers only and
//! never form references to guest memory, and whatever bytes they see are valid `u8`s.
#![allow(
    unsafe_code,
    reason = "copies through raw pointers and the vector loop; every block is argued"
)]

/// Copies `src` into `dst`, of the same length, as [`copy`] does: for writes of results into
/// a client's A-stack or segment, which are page aligned.
///
/// # Panics
/// When the lengths differ.
pub(crate) fn copy_slice(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_slice: lengths differ");
    // SAFETY: both slices are `src.len()` bytes long, and a shared and an exclusive borrow
    // never overlap.
    unsafe { copy(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// Copies shorter than this never reach the host `memmove`'s slow path.
const SLOW_COPY_MIN: usize = 1024;

/// How far after its source (modulo 4 KiB) a destination makes the host `memmove` slow.
const SLOW_GAP: usize = 64;

/// Copies `len` bytes from `src` to `dst`: with the host `memmove`, or with [`by_vectors`]
/// when the destination lies just after the source modulo 4 KiB (see the module docs).
///
/// # Safety
/// As for `std::ptr::copy_nonoverlapping`.
pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    let gap = (dst as usize).wrapping_sub(src as usize) % 4096;
    if len >= SLOW_COPY_MIN && gap != 0 && gap < SLOW_GAP {
        // SAFETY: the caller's promise, passed on.
        unsafe { by_vectors(src, dst, len) }
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
    }
}

/// Copies `len` bytes 128 at a time with unaligned vector loads and stores (32 bytes wide
/// with AVX, else 16), the tail by the host `memmove` (under 128 bytes, which its slow path
/// never takes).
///
/// # Safety
/// As for `std::ptr::copy_nonoverlapping`.
#[cfg(target_arch = "x86_64")]
unsafe fn by_vectors(src: *const u8, dst: *mut u8, len: usize) {
    let done = if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the caller's promise, passed on; the processor has AVX (checked above).
        unsafe { blocks_avx(src, dst, len) }
    } else {
        // SAFETY: the caller's promise, passed on.
        unsafe { blocks_sse2(src, dst, len) }
    };
    // SAFETY: the rest of the caller's ranges.
    unsafe { std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done) }
}

/// Copies the whole 128-byte blocks of `len` bytes with 32-byte AVX moves; the bytes copied.
///
/// # Safety
/// As for `std::ptr::copy_nonoverlapping`, and the processor has AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn blocks_avx(src: *const u8, dst: *mut u8, len: usize) -> usize {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_storeu_si256};
    const BLOCK: usize = 128;
    let blocks = len / BLOCK;
    for b in 0..blocks {
        // SAFETY: `(b + 1) * BLOCK <= len`, so the loads and stores lie in the ranges the
        // caller vouches for; the `loadu`/`storeu` forms take any alignment.
        unsafe {
            let s = src.add(b * BLOCK).cast::<__m256i>();
            let d = dst.add(b * BLOCK).cast::<__m256i>();
            let v = [
                _mm256_loadu_si256(s),
                _mm256_loadu_si256(s.add(1)),
                _mm256_loadu_si256(s.add(2)),
                _mm256_loadu_si256(s.add(3)),
            ];
            for (i, v) in v.into_iter().enumerate() {
                _mm256_storeu_si256(d.add(i), v);
            }
        }
    }
    blocks * BLOCK
}

/// [`blocks_avx`] with SSE2's 16-byte moves, which every x86-64 processor has.
///
/// # Safety
/// As for `std::ptr::copy_nonoverlapping`.
#[cfg(target_arch = "x86_64")]
unsafe fn blocks_sse2(src: *const u8, dst: *mut u8, len: usize) -> usize {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
    const BLOCK: usize = 128;
    let blocks = len / BLOCK;
    for b in 0..blocks {
        // SAFETY: as in `blocks_avx`; SSE2 is part of x86-64.
        unsafe {
            let s = src.add(b * BLOCK).cast::<__m128i>();
            let d = dst.add(b * BLOCK).cast::<__m128i>();
            let mut v = [_mm_loadu_si128(s); 8];
            for (i, v) in v.iter_mut().enumerate().skip(1) {
                *v = _mm_loadu_si128(s.add(i));
            }
            for (i, v) in v.into_iter().enumerate() {
                _mm_storeu_si128(d.add(i), v);
            }
        }
    }
    blocks * BLOCK
}

/// Elsewhere the host `memmove` has no such slow case known here.
///
/// # Safety
/// As for `std::ptr::copy_nonoverlapping`.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn by_vectors(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's promise.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
}

#[cfg(test)]
mod tests {
    use super::copy_slice;

    /// Every placement of the destination within 4 KiB of the source, around the sizes where
    /// the vector loop starts and its tail, copies every byte and nothing more.
    #[test]
    fn copies_are_exact_at_every_placement() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 31 + 7) as u8).collect();
        let mut space = vec![0u8; 4096 + 12_000];
        let base = space.as_ptr() as usize;
        // Offsets of the destination that make it 0..=200 bytes after the source modulo 4 KiB.
        let src_mod = src.as_ptr() as usize % 4096;
        for gap in (0..=200).chain([4000, 4095]) {
            let want = (src_mod + gap) % 4096;
            let off = (want + 4096 - base % 4096) % 4096;
            for len in [0, 1, 63, 1023, 1024, 1025, 4096 + 37, 8999] {
                space.fill(0xee);
                copy_slice(&mut space[off..off + len], &src[..len]);
                assert_eq!(&space[off..off + len], &src[..len], "gap {gap}, len {len}");
                assert!(
                    space[..off].iter().all(|&b| b == 0xee),
                    "gap {gap}, len {len}"
                );
                assert!(
                    space[off + len..].iter().all(|&b| b == 0xee),
                    "gap {gap}, len {len}"
                );
            }
        }
    }
}
