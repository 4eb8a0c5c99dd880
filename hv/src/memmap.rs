//! Host physical memory at boot: where the loaded image keeps its payload
//! and heap (`image_layout`), and the RAM the DTB describes minus what is
//! already used (the image with its payload and heap, the host DTB,
//! reserved regions), handed out in aligned blocks top-down for partition
//! RAM.

use alloc::vec::Vec;

/// The EL2 heap: boot and partition (re)start allocations (the parsed host
/// description, partition objects, stage-2 tables, guest DTBs). It is the
/// uninitialised tail of the loaded image, after the payload: the xtask
/// adds it to the arm64 Image header's `image_size`, so a loader that
/// honours the header (QEMU, U-Boot `booti`) keeps it free, and it is
/// neither in the file nor cleared at boot.
pub const EL2_HEAP_SIZE: u64 = 4 << 20;
/// Alignment of the payload and of the heap after it.
pub const IMAGE_TAIL_ALIGN: u64 = 4096;

/// Where the parts of the loaded image are (all host physical, identity
/// mapped at EL2):
///
/// ```text
/// image_start  code, data, BSS (the flat image)
/// payload      plan + partition images, appended by the xtask
/// heap         EL2_HEAP_SIZE bytes, image_start + image_size - EL2_HEAP_SIZE
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLayout {
    /// (start, length) of the payload; the length includes the padding up
    /// to the heap.
    pub payload: (u64, u64),
    /// (start, length) of the heap.
    pub heap: (u64, u64),
}

/// The layout of an image loaded at `image_start` whose payload starts at
/// `payload_start` and whose header says it needs `image_size` bytes. None
/// when `image_size` leaves no aligned heap after the payload (an image not
/// assembled by the xtask).
pub fn image_layout(image_start: u64, payload_start: u64, image_size: u64) -> Option<ImageLayout> {
    let image_end = image_start.checked_add(image_size)?;
    let heap_start = image_end.checked_sub(EL2_HEAP_SIZE)?;
    if heap_start < payload_start
        || payload_start < image_start
        || heap_start % IMAGE_TAIL_ALIGN != 0
    {
        return None;
    }
    Some(ImageLayout {
        payload: (payload_start, heap_start - payload_start),
        heap: (heap_start, EL2_HEAP_SIZE),
    })
}

/// Free ranges `(base, size)`.
#[derive(Clone)]
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

    /// Return `[base, base + size)` (taken before, and already scrubbed by
    /// the caller), merged with its free neighbours. False, and nothing
    /// changed, if any of it is free already (a double free).
    pub fn give_back(&mut self, base: u64, size: u64) -> bool {
        let Some(end) = base.checked_add(size) else {
            return false;
        };
        if size == 0 || self.ranges.iter().any(|&(b, s)| base < b + s && b < end) {
            return false;
        }
        let (mut base, mut end) = (base, end);
        self.ranges.retain(|&(b, s)| {
            if b + s == base {
                base = b;
                false
            } else if b == end {
                end = b + s;
                false
            } else {
                true
            }
        });
        self.ranges.push((base, end - base));
        self.ranges.sort_unstable();
        true
    }

    /// The largest block `take_top(_, align)` could give.
    pub fn largest(&self, align: u64) -> u64 {
        self.ranges
            .iter()
            .map(|&(b, s)| {
                let start = b.next_multiple_of(align);
                (b + s).saturating_sub(start) & !(align - 1)
            })
            .max()
            .unwrap_or(0)
    }

    /// Bytes free in all.
    pub fn total(&self) -> u64 {
        self.ranges.iter().map(|r| r.1).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_given_back_merges_with_both_neighbours_and_can_be_taken_again() {
        let mut free = FreeMemory::new(&[(0x4000_0000, 64 * MIB)], &[]);
        let a = free.take_top(8 * MIB, 2 * MIB).unwrap();
        let b = free.take_top(8 * MIB, 2 * MIB).unwrap();
        assert!(free.give_back(a, 8 * MIB));
        assert_eq!(free.largest(2 * MIB), 48 * MIB);
        assert!(free.give_back(b, 8 * MIB));

        assert_eq!(free.ranges(), &[(0x4000_0000, 64 * MIB)]);
        assert_eq!(free.take_top(64 * MIB, 2 * MIB), Some(0x4000_0000));
    }

    #[test]
    fn giving_back_free_memory_is_refused() {
        let mut free = FreeMemory::new(&[(0x4000_0000, 64 * MIB)], &[]);
        let a = free.take_top(8 * MIB, 2 * MIB).unwrap();

        assert!(!free.give_back(a - MIB, 2 * MIB));
        assert!(!free.give_back(0x4000_0000, MIB));
        assert_eq!(free.total(), 56 * MIB);
    }

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    #[test]
    fn heap_is_the_tail_of_image_size_after_the_payload() {
        let image = GIB + 2 * MIB;
        let payload = image + 0x44000;
        let size = 0x44000 + 0x7000 + EL2_HEAP_SIZE;

        let layout = image_layout(image, payload, size).expect("layout");

        assert_eq!(layout.payload, (payload, 0x7000));
        assert_eq!(layout.heap, (payload + 0x7000, EL2_HEAP_SIZE));
    }

    #[test]
    fn image_size_without_room_for_the_heap_has_no_layout() {
        let image = GIB;
        let payload = image + 0x44000;

        assert_eq!(image_layout(image, payload, 0), None);
        assert_eq!(image_layout(image, payload, 0x45000), None);
        assert_eq!(
            image_layout(image, payload, 0x44000 + EL2_HEAP_SIZE - 1),
            None
        );
        assert_eq!(
            image_layout(u64::MAX - 10, u64::MAX - 5, EL2_HEAP_SIZE),
            None
        );
    }

    #[test]
    fn an_unaligned_heap_has_no_layout() {
        let image = GIB;

        assert_eq!(
            image_layout(image, image + 0x1000, 0x1800 + EL2_HEAP_SIZE),
            None
        );
    }

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
