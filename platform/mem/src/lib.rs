//! `memcpy` and `memset` for the EL2 image, replacing compiler_builtins'
//! weak ones on the bare-metal target.
//!
//! The `aarch64-unknown-none*` targets compile with `+strict-align` (the
//! EL2 image runs its first instructions with the MMU off, where every
//! access is Device memory and an unaligned one faults), but
//! compiler_builtins enables its `mem-unaligned` implementation for every
//! aarch64 target: where source and destination disagree in alignment, it
//! reads each source word with `read_unaligned`, which strict alignment
//! turns into eight byte loads and the shifts to join them (22
//! instructions per 8 bytes), and the aligned case moves one word per loop
//! (4 per 8 bytes). Here the aligned case moves 64 bytes per loop (load and
//! store pairs), and the misaligned case reads aligned source words and
//! joins neighbours with two shifts; only the first and last partial words
//! are read byte by byte, so nothing outside the source is ever read and no
//! access is unaligned, MMU or not. Boot copies (partition images, moved
//! partition objects) and clears (stage-2 tables) are its main users.
//!
//! The crate is `no_builtins`, so the compiler never turns these loops back
//! into calls to `memcpy`/`memset`. The routines are portable Rust tested
//! on the build host against every small size and alignment; the exported
//! C symbols exist only on the bare-metal target.
#![no_std]
#![no_builtins]
#![cfg_attr(not(test), deny(missing_docs))]

#[cfg(not(target_endian = "little"))]
compile_error!("the misaligned copy joins words in little-endian order");

const WORD: usize = core::mem::size_of::<usize>();
const MASK: usize = WORD - 1;
/// Below this many bytes a plain byte loop is as quick as the set-up.
const WORDWISE_FROM: usize = 2 * WORD;

/// Copies `n` bytes from `src` to `dst`, front to back.
///
/// # Safety
///
/// `src` is valid for reads and `dst` for writes of `n` bytes, and the two
/// ranges do not overlap (the contract of C's `memcpy`).
pub unsafe fn copy(mut dst: *mut u8, mut src: *const u8, mut n: usize) {
    if n >= WORDWISE_FROM {
        // n >= 2 words, so aligning dst leaves at least one whole word.
        let head = (dst as usize).wrapping_neg() & MASK;
        // SAFETY: head < n bytes of both ranges.
        unsafe { copy_bytes(dst, src, head) };
        dst = dst.wrapping_add(head);
        src = src.wrapping_add(head);
        n -= head;
        let words = n / WORD;
        if src as usize & MASK == 0 {
            // SAFETY: dst and src are word aligned and `words` whole words
            // lie inside both ranges.
            unsafe { copy_aligned_words(dst as *mut usize, src as *const usize, words) };
        } else {
            // SAFETY: dst is word aligned and `words` whole words lie inside
            // both ranges.
            unsafe { copy_misaligned_words(dst as *mut usize, src, words) };
        }
        dst = dst.wrapping_add(words * WORD);
        src = src.wrapping_add(words * WORD);
        n -= words * WORD;
    }
    // SAFETY: what is left of both ranges.
    unsafe { copy_bytes(dst, src, n) };
}

/// Sets `n` bytes at `dst` to `value`.
///
/// # Safety
///
/// `dst` is valid for writes of `n` bytes.
pub unsafe fn set(mut dst: *mut u8, value: u8, mut n: usize) {
    if n >= WORDWISE_FROM {
        let head = (dst as usize).wrapping_neg() & MASK;
        // SAFETY: head < n bytes of the range.
        unsafe { set_bytes(dst, value, head) };
        dst = dst.wrapping_add(head);
        n -= head;
        let words = n / WORD;
        let pattern = usize::from_ne_bytes([value; WORD]);
        let mut at = dst as *mut usize;
        let mut left = words;
        while left >= 4 {
            // SAFETY: four aligned words inside the range.
            unsafe {
                at.write(pattern);
                at.add(1).write(pattern);
                at.add(2).write(pattern);
                at.add(3).write(pattern);
            }
            at = at.wrapping_add(4);
            left -= 4;
        }
        while left > 0 {
            // SAFETY: an aligned word inside the range.
            unsafe { at.write(pattern) };
            at = at.wrapping_add(1);
            left -= 1;
        }
        dst = dst.wrapping_add(words * WORD);
        n -= words * WORD;
    }
    // SAFETY: what is left of the range.
    unsafe { set_bytes(dst, value, n) };
}

/// # Safety
///
/// As for `copy`, over `n` bytes.
#[inline(always)]
unsafe fn copy_bytes(dst: *mut u8, src: *const u8, n: usize) {
    for i in 0..n {
        // SAFETY: i < n, inside both ranges.
        unsafe { dst.add(i).write(src.add(i).read()) };
    }
}

/// # Safety
///
/// As for `set`, over `n` bytes.
#[inline(always)]
unsafe fn set_bytes(dst: *mut u8, value: u8, n: usize) {
    for i in 0..n {
        // SAFETY: i < n, inside the range.
        unsafe { dst.add(i).write(value) };
    }
}

/// # Safety
///
/// `dst` and `src` are word aligned, valid for `words` words, apart.
#[inline(always)]
unsafe fn copy_aligned_words(mut dst: *mut usize, mut src: *const usize, words: usize) {
    let mut left = words;
    while left >= 8 {
        // SAFETY: eight aligned words inside both ranges. Loaded as four
        // pairs, then stored: 64 bytes per pass (4 LDP, 4 STP and 4
        // instructions of loop), the boot's image copies' main loop.
        unsafe {
            let (a, b, c, d) = (
                src.read(),
                src.add(1).read(),
                src.add(2).read(),
                src.add(3).read(),
            );
            let (e, f, g, h) = (
                src.add(4).read(),
                src.add(5).read(),
                src.add(6).read(),
                src.add(7).read(),
            );
            dst.write(a);
            dst.add(1).write(b);
            dst.add(2).write(c);
            dst.add(3).write(d);
            dst.add(4).write(e);
            dst.add(5).write(f);
            dst.add(6).write(g);
            dst.add(7).write(h);
        }
        dst = dst.wrapping_add(8);
        src = src.wrapping_add(8);
        left -= 8;
    }
    while left > 0 {
        // SAFETY: an aligned word inside both ranges.
        unsafe { dst.write(src.read()) };
        dst = dst.wrapping_add(1);
        src = src.wrapping_add(1);
        left -= 1;
    }
}

/// Copies `words` words to the aligned `dst` from `src`, which is not word
/// aligned: each output word joins the tail of one aligned source word and
/// the head of the next.
///
/// # Safety
///
/// `dst` is word aligned and valid for `words` words; `src` (not word
/// aligned) is valid for `words * WORD` bytes; they do not overlap;
/// `words` > 0.
#[inline(always)]
unsafe fn copy_misaligned_words(mut dst: *mut usize, src: *const u8, words: usize) {
    let offset = src as usize & MASK;
    let shift = offset * 8;
    let back = WORD * 8 - shift;
    let mut aligned = src.wrapping_sub(offset) as *const usize;
    // The first aligned word starts before `src`: read only its bytes from
    // `src` on.
    // SAFETY: bytes offset..WORD of that word are the first bytes of src.
    let mut prev = unsafe { partial_word(aligned as *const u8, offset, WORD) };
    // Every aligned source word after that one but the last lies wholly
    // inside the source: the last output word needs only `offset` bytes of
    // the word after it.
    for _ in 1..words {
        aligned = aligned.wrapping_add(1);
        // SAFETY: this aligned word ends at src + k * WORD - offset + WORD
        // for k < words, inside the source.
        let next = unsafe { aligned.read() };
        // SAFETY: an aligned word of the destination.
        unsafe { dst.write((prev >> shift) | (next << back)) };
        dst = dst.wrapping_add(1);
        prev = next;
    }
    aligned = aligned.wrapping_add(1);
    // SAFETY: bytes 0..offset of this word are the last `offset` bytes of
    // the `words * WORD` source bytes.
    let last = unsafe { partial_word(aligned as *const u8, 0, offset) };
    // SAFETY: the last aligned word of the destination.
    unsafe { dst.write((prev >> shift) | (last << back)) };
}

/// The word at the aligned `word` with only bytes `from..to` read (the
/// others are zero).
///
/// # Safety
///
/// Those bytes are valid for reads.
#[inline(always)]
unsafe fn partial_word(word: *const u8, from: usize, to: usize) -> usize {
    let mut value = 0usize;
    for i in from..to {
        // SAFETY: i in from..to, which the caller vouches for.
        value |= usize::from(unsafe { word.add(i).read() }) << (i * 8);
    }
    value
}

/// The C symbols, on the bare-metal target only (a host test binary keeps
/// its C library's).
#[cfg(target_os = "none")]
mod symbols {
    /// C `memcpy`.
    ///
    /// # Safety
    ///
    /// C's contract: both ranges valid for `n` bytes, not overlapping.
    #[no_mangle]
    pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
        // SAFETY: the caller's contract is `copy`'s.
        unsafe { super::copy(dst, src, n) };
        dst
    }

    /// C `memset`.
    ///
    /// # Safety
    ///
    /// C's contract: `dst` valid for `n` bytes.
    #[no_mangle]
    pub unsafe extern "C" fn memset(dst: *mut u8, value: i32, n: usize) -> *mut u8 {
        // SAFETY: the caller's contract is `set`'s; C passes the byte as int.
        unsafe { super::set(dst, value as u8, n) };
        dst
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    const CANARY: u8 = 0xEE;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + 3) as u8 | 1).collect()
    }

    /// Copies `n` bytes from source offset `so` to destination offset `do_`
    /// in canary-filled buffers and checks exactly those bytes changed.
    fn check_copy(n: usize, so: usize, do_: usize) {
        let src = pattern(n + so + 16);
        let mut dst = std::vec![CANARY; n + do_ + 16];
        // SAFETY: both buffers hold offset + n bytes.
        unsafe { copy(dst.as_mut_ptr().add(do_), src.as_ptr().add(so), n) };
        assert!(
            dst[..do_].iter().all(|&b| b == CANARY),
            "before, n={n} so={so} do={do_}"
        );
        assert_eq!(
            &dst[do_..do_ + n],
            &src[so..so + n],
            "n={n} so={so} do={do_}"
        );
        assert!(
            dst[do_ + n..].iter().all(|&b| b == CANARY),
            "after, n={n} so={so} do={do_}"
        );
    }

    #[test]
    fn copy_is_exact_for_every_small_size_and_alignment() {
        for n in 0..160 {
            for so in 0..2 * WORD {
                for do_ in 0..2 * WORD {
                    check_copy(n, so, do_);
                }
            }
        }
    }

    #[test]
    fn copy_is_exact_for_large_misaligned_and_aligned_blocks() {
        for (n, so, do_) in [
            (70_001, 3, 0),
            (65_536, 0, 0),
            (4096 + 5, 1, 7),
            (99_999, 6, 2),
        ] {
            check_copy(n, so, do_);
        }
    }

    #[test]
    fn copy_from_the_end_of_an_exactly_sized_buffer_is_exact() {
        // Sources that end where their allocation ends: the partial-word
        // reads must stop at the last byte (a sanitiser or Miri flags any
        // read beyond; natively the comparison checks the bytes).
        for n in 16..48 {
            for so in 1..WORD {
                let src = pattern(n + so);
                let mut dst = std::vec![CANARY; n];
                // SAFETY: so + n bytes in src, n in dst.
                unsafe { copy(dst.as_mut_ptr(), src.as_ptr().add(so), n) };
                assert_eq!(&dst[..], &src[so..], "n={n} so={so}");
            }
        }
    }

    #[test]
    fn set_is_exact_for_every_small_size_and_alignment() {
        for n in 0..160 {
            for off in 0..2 * WORD {
                let mut buf = std::vec![CANARY; n + off + 16];
                // SAFETY: the buffer holds off + n bytes.
                unsafe { set(buf.as_mut_ptr().add(off), 0x5A, n) };
                assert!(buf[..off].iter().all(|&b| b == CANARY));
                assert!(
                    buf[off..off + n].iter().all(|&b| b == 0x5A),
                    "n={n} off={off}"
                );
                assert!(buf[off + n..].iter().all(|&b| b == CANARY));
            }
        }
    }

    #[test]
    fn set_to_zero_clears_a_large_block() {
        let mut buf = std::vec![CANARY; 10_000];
        // SAFETY: 9_990 bytes from offset 3 are inside the buffer.
        unsafe { set(buf.as_mut_ptr().add(3), 0, 9_990) };
        assert!(buf[3..9_993].iter().all(|&b| b == 0));
        assert_eq!((buf[2], buf[9_993]), (CANARY, CANARY));
    }
}
