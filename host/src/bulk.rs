//! Bulk copies between host memory and linear memories: the one place the kernel moves many
//! bytes, because what that costs depends on where the bytes lie.
//!
//! The host `memmove` (glibc's `rep movsb` path, taken from 2–8 KiB on) runs 15–30× slower
//! on some x86-64 processors (measured: AMD EPYC, glibc 2.36) when the destination lies 1
//! to 15 bytes after the source modulo 4 KiB, and up to 1.4× slower at other offsets under
//! 64. A-stacks and segments are page aligned and the buffers copied to and from them are
//! not, so [`copy`] moves such badly placed copies in pieces too small for that path (as
//! the guest SDK's `bulk` does); others go to `memmove` whole.
//!
//! Linear memories may be written by a guest on another thread while the host copies (a
//! peer's shared A-stack pages): these copies read and write through raw pointers only and
//! never form references to guest memory, and whatever bytes they see are valid `u8`s.
#![allow(
    unsafe_code,
    reason = "copies through raw pointers; every block is argued"
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

/// Copies `len` bytes from `src` to `dst`: with the host `memmove`, in [`CHUNK`]-byte pieces
/// when the destination lies just after the source modulo 4 KiB (see the module docs).
///
/// # Safety
/// As for `std::ptr::copy_nonoverlapping`.
pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    let gap = (dst as usize).wrapping_sub(src as usize) % 4096;
    if len >= SLOW_COPY_MIN && gap != 0 && gap < SLOW_GAP {
        // SAFETY: the caller's promise, passed on.
        unsafe { by_chunks(src, dst, len) }
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
    }
}

/// The piece [`by_chunks`] copies at a time: under the host `memmove`'s smallest `rep movsb`
/// threshold (2 KiB, glibc's default without AVX), as the guest SDK's `bulk` does too.
const CHUNK: usize = 1024;

/// Copies `len` bytes with the host `memmove`, [`CHUNK`] bytes at a time: pieces that small
/// take its vector path, at full speed whatever their placement (64 KiB at a gap of 8 bytes:
/// 21.7 µs in one call, 1.4 µs in 1 KiB pieces, 1.1–1.5 µs well placed).
///
/// # Safety
/// As for `std::ptr::copy_nonoverlapping`.
unsafe fn by_chunks(src: *const u8, dst: *mut u8, len: usize) {
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done);
        // `black_box` keeps the pieces apart: the compiler would otherwise make the loop one
        // `memmove` of the whole range, which is what it exists to avoid.
        let at = std::hint::black_box(done);
        // SAFETY: `[at, at + n)` lies in both of the caller's ranges (`at + n <= len`).
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), n) };
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::copy_slice;

    /// Every placement of the destination within 4 KiB of the source, around the sizes where
    /// the pieces start and the last one, copies every byte and nothing more.
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
