//! The set bits of a word, lowest first: the one loop the mailbox's slots, the
//! SGI fan-out and the redistributor's bank writes share. Each step is a
//! trailing-zero count and a clear of the lowest bit, so a sparse word costs
//! what it holds, not its width.

/// Iterator over the indices of the set bits of a word, in ascending order.
#[derive(Clone, Copy, Debug)]
pub struct Ones(u64);

/// The indices of the bits set in `bits`, lowest first.
#[inline(always)]
pub const fn ones(bits: u64) -> Ones {
    Ones(bits)
}

impl Iterator for Ones {
    type Item = u32;

    #[inline(always)]
    fn next(&mut self) -> Option<u32> {
        if self.0 == 0 {
            return None;
        }
        let i = self.0.trailing_zeros();
        self.0 &= self.0 - 1;
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn every_set_bit_once_lowest_first() {
        assert_eq!(ones(0).collect::<Vec<_>>(), []);
        assert_eq!(ones(0b1011_0000_0001).collect::<Vec<_>>(), [0, 8, 9, 11]);
        assert_eq!(ones(1 << 63).collect::<Vec<_>>(), [63]);
        assert_eq!(ones(u64::MAX).count(), 64);
    }
}
