//! Host physical memory: what is free after the image, its payload, the
//! host DTB and reserved regions, handed out in aligned chunks (partition
//! RAM top-down, nothing else: the heap is in BSS).

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
