//! Bulk copies and fills between A-stacks, segments and private memory: the one home of the
//! SDK's byte moving, because what moving bytes costs depends on the engine and on the
//! processor under it.
//!
//! - A `memory.copy` or `memory.fill` is an out-of-line call into the engine and from there
//!   into the host C library: about 50 instructions before the first byte moves, then memory
//!   bandwidth. Only fills of a few bytes are cheaper as stores in the guest.
//! - On some x86-64 processors (measured: AMD EPYC, glibc's `rep movsb` path, from 2 KiB on)
//!   the host's `memmove` is 15–30× slower when the destination lies 1 to about 15 bytes
//!   *after* the source modulo 4 KiB, up to 1.4× at other offsets under 64, and full speed
//!   otherwise. A-stacks and segments are page
//!   aligned and heap buffers are not, so [`copy_bytes`] moves such badly placed copies in
//!   chunks the slow path never takes, and private copies are placed at their source's offset modulo
//!   [`COPY_ALIGN`] where the SDK chooses the placement.

/// Private copies of shared data are placed at the same offset modulo this as their source,
/// which keeps them clear of the host `memmove`'s slow placement (see the module docs).
pub const COPY_ALIGN: usize = 64;

/// Fills of at most this many bytes are stores in the guest, not engine calls.
const INLINE_FILL_MAX: usize = 64;

/// Copies shorter than this never reach the host `memmove`'s slow path (glibc takes
/// `rep movsb` from 2 KiB on at the earliest).
const SLOW_COPY_MIN: usize = 1024;

/// Copies `len` bytes from `src` to `dst` (see the module docs for how).
///
/// # Safety
/// As for `core::ptr::copy_nonoverlapping`: `src` readable and `dst` writable for `len`
/// bytes, the ranges not overlapping.
#[inline]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    let gap = (dst as usize).wrapping_sub(src as usize) % 4096;
    if len >= SLOW_COPY_MIN && gap != 0 && gap < COPY_ALIGN {
        // SAFETY: the caller's promise, passed on.
        unsafe { copy_by_vectors(src, dst, len) };
    } else {
        // SAFETY: the caller's promise.
        unsafe { core::ptr::copy_nonoverlapping(src, dst, len) };
    }
}

/// Copies `len` bytes from `src` to private memory at `dst`, where the copy is often a
/// few bytes (a decoded string, a header name): up to 16 bytes as two overlapping loads and
/// stores of 8, 4 or 1 bytes each, instead of an engine call; [`copy_bytes`] beyond.
///
/// # Safety
/// As for [`copy_bytes`].
#[inline]
pub unsafe fn copy_short(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller vouches for `len` bytes at `src` and `dst`; each arm meets
    // `copy_ends`'s requirement on `len`, or copies byte by byte below `len`.
    unsafe {
        match len {
            8..=16 => copy_ends::<u64>(src, dst, len),
            4..8 => copy_ends::<u32>(src, dst, len),
            0..4 => {
                for i in 0..len {
                    dst.add(i).write(src.add(i).read());
                }
            }
            _ => copy_bytes(src, dst, len),
        }
    }
}

/// Copies `len` bytes as two words of type `W`, the first and the last `size_of::<W>()`
/// bytes (overlapping when `len` is less than two words).
///
/// # Safety
/// As for [`copy_bytes`], and `size_of::<W>() <= len <= 2 * size_of::<W>()`.
#[inline]
unsafe fn copy_ends<W: Copy>(src: *const u8, dst: *mut u8, len: usize) {
    let last = len - core::mem::size_of::<W>();
    // SAFETY: both words lie within the `len` bytes at `src` and at `dst` (the caller's
    // promise on `len`); unaligned accesses are allowed.
    unsafe {
        let (a, b) = (
            src.cast::<W>().read_unaligned(),
            src.add(last).cast::<W>().read_unaligned(),
        );
        dst.cast::<W>().write_unaligned(a);
        dst.add(last).cast::<W>().write_unaligned(b);
    }
}

/// Zeroes `len` bytes at `dst`.
///
/// # Safety
/// `dst` writable for `len` bytes.
#[inline]
pub unsafe fn zero_bytes(dst: *mut u8, len: usize) {
    if len <= INLINE_FILL_MAX {
        for i in 0..len {
            // SAFETY: `i < len`. Volatile stores keep this a loop, not a `memory.fill`.
            unsafe { dst.add(i).write_volatile(0) };
        }
    } else {
        // SAFETY: the caller's promise.
        unsafe { core::ptr::write_bytes(dst, 0, len) };
    }
}

/// The copy behind [`copy_bytes`] for badly placed copies: `memory.copy` a chunk at a
/// time, each below the size from which the host `memmove` takes its slow path, which
/// moves them at full speed whatever their placement. Per 64 KiB that is 64 engine calls,
/// against about 28,000 instructions for the same copy as a loop of wasm vector moves.
///
/// # Safety
/// As for [`copy_bytes`].
#[cold]
#[inline(never)]
unsafe fn copy_by_vectors(src: *const u8, dst: *mut u8, len: usize) {
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done);
        // `black_box` keeps the chunks apart: the compiler would otherwise make this loop
        // one `memory.copy` of the whole range, which is what it exists to avoid.
        let at = core::hint::black_box(done);
        // SAFETY: `[at, at + n)` is inside both ranges (`at + n <= len`), which do not
        // overlap (the caller's promise).
        unsafe { core::ptr::copy_nonoverlapping(src.add(at), dst.add(at), n) };
        done += n;
    }
}

/// The chunk [`copy_by_vectors`] copies at a time: under the host `memmove`'s smallest
/// `rep movsb` threshold (2 KiB, glibc's default without AVX).
const CHUNK: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_length_at_every_relative_placement() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 31 + 7) as u8).collect();
        let mut dst = vec![0u8; 9000 + 4096];
        let lens = (0..=70).chain([1023, 1024, 1025, 4096, 5003]);
        for len in lens {
            for gap in [0usize, 1, 8, 16, 24, 40, 63, 64, 100, 2048] {
                dst.fill(0xee);
                // Place the destination `gap` bytes after the source modulo 4 KiB.
                let base = (src.as_ptr() as usize + gap).wrapping_sub(dst.as_ptr() as usize) % 4096;
                // SAFETY: `base + len <= 4095 + 5003 < dst.len()`; distinct vectors.
                unsafe { copy_bytes(src.as_ptr(), dst.as_mut_ptr().add(base), len) };
                assert_eq!(&dst[base..base + len], &src[..len], "len {len} gap {gap}");
                assert!(dst[..base].iter().all(|&b| b == 0xee), "nothing before");
                assert!(
                    dst[base + len..].iter().all(|&b| b == 0xee),
                    "nothing after"
                );
            }
        }
    }

    #[test]
    fn short_copies_move_exactly_the_range() {
        let src: Vec<u8> = (0..64u8).collect();
        for len in 0..=40 {
            let mut dst = [0xeeu8; 48];
            // SAFETY: both buffers hold at least `len` bytes.
            unsafe { copy_short(src.as_ptr().add(3), dst.as_mut_ptr().add(1), len) };
            assert_eq!(dst[0], 0xee);
            assert_eq!(&dst[1..1 + len], &src[3..3 + len], "len {len}");
            assert!(dst[1 + len..].iter().all(|&b| b == 0xee), "len {len}");
        }
    }

    #[test]
    fn zeroes_exactly_the_range() {
        let mut buf = vec![0xeeu8; 600];
        for len in (0..=80).chain([255, 256, 257, 300]) {
            for at in [0usize, 1, 7, 33] {
                buf.fill(0xee);
                // SAFETY: `at + len <= 33 + 300 < buf.len()`.
                unsafe { zero_bytes(buf.as_mut_ptr().add(at), len) };
                assert!(
                    buf[at..at + len].iter().all(|&b| b == 0),
                    "len {len} at {at}"
                );
                assert!(buf[..at].iter().all(|&b| b == 0xee));
                assert!(buf[at + len..].iter().all(|&b| b == 0xee));
            }
        }
    }
}
