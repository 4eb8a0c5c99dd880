//! Host physical memory at boot: the RAM the DTB describes minus what is
//! already used (the image and its payload, the host DTB, reserved
//! regions), handed out in aligned blocks top-down for partition RAM.

use alloc::vec::Vec;

/// Free ranges `(base, size)`.
pub struct FreeMemory {
    ranges: Vec<(u64, u64)>,
}

impl FreeMemory {
    /// `ram` minus every range in `used`.
    pub fn new(ram: &[(u64, u64)], used: &[(u64, u64)]) -> Self {
        let mut ranges: Vec<(u64, u64)> = ram.to_vec();
        for &(ub, us) in used {
            let ue = ub.saturating_add(us);
            let mut next = Vec::new();
            for &(b, s) in &ranges {
                let e = b + s;
                if ue <= b || ub >= e {
                    next.push((b, s));
                    continue;
                }
                if ub > b {
                    next.push((b, ub - b));
                }
                if ue < e {
                    next.push((ue, e - ue));
                }
            }
            ranges = next;
        }
        FreeMemory { ranges }
    }

    /// The free ranges, in no particular order.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }

    /// Take `size` bytes aligned to `align` from the highest free range that
    /// fits.
    pub fn take_top(&mut self, size: u64, align: u64) -> Option<u64> {
        let mut best: Option<(usize, u64)> = None;
        for (i, &(b, s)) in self.ranges.iter().enumerate() {
            let end = b + s;
            if end < size {
                continue;
            }
            let start = (end - size) & !(align - 1);
            if start >= b && best.is_none_or(|(_, bs)| start > bs) {
                best = Some((i, start));
            }
        }
        let (i, start) = best?;
        let (b, s) = self.ranges[i];
        let end = b + s;
        self.ranges.remove(i);
        if start > b {
            self.ranges.push((b, start - b));
        }
        if start + size < end {
            self.ranges.push((start + size, end - start - size));
        }
        Some(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    #[test]
    fn used_ranges_are_cut_out_of_ram() {
        let free = FreeMemory::new(&[(GIB, 2 * GIB)], &[(GIB, 64 * MIB), (2 * GIB, MIB)]);

        assert_eq!(
            free.ranges(),
            &[(GIB + 64 * MIB, GIB - 64 * MIB), (2 * GIB + MIB, GIB - MIB)]
        );
    }

    #[test]
    fn blocks_come_from_the_top_aligned_and_never_overlap() {
        let mut free = FreeMemory::new(&[(GIB, 2 * GIB)], &[(GIB, 64 * MIB)]);

        let a = free.take_top(256 * MIB, 2 * MIB).expect("first");
        let b = free.take_top(512 * MIB, 2 * MIB).expect("second");

        assert_eq!(a, 3 * GIB - 256 * MIB);
        assert_eq!(b, a - 512 * MIB);
        assert_eq!(a % (2 * MIB), 0);
        assert_eq!(b % (2 * MIB), 0);
    }

    #[test]
    fn a_block_larger_than_any_free_range_is_refused() {
        let mut free = FreeMemory::new(&[(GIB, GIB)], &[(GIB + 512 * MIB, MIB)]);

        assert_eq!(free.take_top(600 * MIB, 2 * MIB), None);
        assert!(free.take_top(500 * MIB, 2 * MIB).is_some());
    }

    #[test]
    fn alignment_skips_an_unaligned_tail() {
        let mut free = FreeMemory::new(&[(GIB, GIB)], &[(2 * GIB - MIB, MIB)]);

        let a = free.take_top(2 * MIB, 2 * MIB).expect("block");

        assert_eq!(a, 2 * GIB - 4 * MIB);
    }
}
