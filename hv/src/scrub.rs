//! Freed RAM on its way back to the free pool: the scrub queue. A
//! destroyed or replaced partition's RAM is not free: it is queued here
//! ("dirty") and zeroed in bounded chunks ([`SCRUB_CHUNK`]) by
//! `System::scrub_step`, which idle CPUs run from their idle loop and every
//! management call runs once after its answer, so no call stalls for the
//! whole range. A range goes to the free pool only once every byte of it
//! is zeroed: no other owner ever sees the old owner's data. RESOURCES
//! shows queued RAM as `Scrubbing` with the bytes still to zero.
//!
//! The queue lives in the pool (`system::Pool`, under the pool lock);
//! chunks are zeroed with the lock held, so a management call waits at
//! most one chunk for an idle CPU's step.

use alloc::vec::Vec;

/// The most bytes one step zeroes (2 MiB: ~0.1 ms on hardware, tens of ms
/// under TCG).
pub const SCRUB_CHUNK: u64 = 2 << 20;

/// A freed range and how much of it (from its base) is zeroed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dirty {
    pub base: u64,
    pub size: u64,
    pub zeroed: u64,
}

impl Dirty {
    pub fn left(&self) -> u64 {
        self.size - self.zeroed
    }
}

/// The dirty ranges, oldest first.
#[derive(Debug, Default)]
pub struct ScrubQueue {
    ranges: Vec<Dirty>,
}

impl ScrubQueue {
    pub const fn new() -> Self {
        ScrubQueue { ranges: Vec::new() }
    }

    /// Queue `[base, base + size)`, none of it zeroed yet.
    pub fn push(&mut self, base: u64, size: u64) {
        if size > 0 {
            self.ranges.push(Dirty {
                base,
                size,
                zeroed: 0,
            });
        }
    }

    pub fn ranges(&self) -> &[Dirty] {
        &self.ranges
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Bytes still to zero.
    pub fn left(&self) -> u64 {
        self.ranges.iter().map(Dirty::left).sum()
    }

    /// The next chunk to zero (at most `max` bytes of the oldest range).
    pub fn next_chunk(&self, max: u64) -> Option<(u64, u64)> {
        let d = self.ranges.first()?;
        Some((d.base + d.zeroed, d.left().min(max)))
    }

    /// The chunk [`ScrubQueue::next_chunk`] named, `len` bytes, is zeroed:
    /// the whole range `(base, size)` when that finished it (it leaves the
    /// queue and may now be given back).
    pub fn zeroed(&mut self, len: u64) -> Option<(u64, u64)> {
        let d = self.ranges.first_mut()?;
        d.zeroed = (d.zeroed + len).min(d.size);
        if d.zeroed < d.size {
            return None;
        }
        let done = self.ranges.remove(0);
        Some((done.base, done.size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_leaves_the_queue_only_after_its_last_chunk() {
        let mut q = ScrubQueue::new();
        q.push(0x4000_0000, 5 << 20);
        q.push(0x8000_0000, 1 << 20);
        assert_eq!(q.left(), 6 << 20);
        assert_eq!(q.next_chunk(SCRUB_CHUNK), Some((0x4000_0000, 2 << 20)));
        assert_eq!(q.zeroed(2 << 20), None);
        assert_eq!(q.next_chunk(SCRUB_CHUNK), Some((0x4020_0000, 2 << 20)));
        assert_eq!(q.zeroed(2 << 20), None);
        assert_eq!(q.next_chunk(SCRUB_CHUNK), Some((0x4040_0000, 1 << 20)));
        assert_eq!(q.zeroed(1 << 20), Some((0x4000_0000, 5 << 20)));
        assert_eq!(q.left(), 1 << 20);
        assert_eq!(q.next_chunk(SCRUB_CHUNK), Some((0x8000_0000, 1 << 20)));
        assert_eq!(q.zeroed(1 << 20), Some((0x8000_0000, 1 << 20)));
        assert!(q.is_empty());
        assert_eq!(q.next_chunk(SCRUB_CHUNK), None);
    }
}
