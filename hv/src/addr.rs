//! Address kinds: host physical addresses and guest physical addresses (IPAs)
//! are distinct types so that one is never used as the other by accident.

/// A host physical address (what the MMU's stage 2 output and EL2 see).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PhysAddr(pub u64);

/// An intermediate physical address: a guest's view of its physical memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ipa(pub u64);

impl PhysAddr {
    pub const fn add(self, bytes: u64) -> Self {
        PhysAddr(self.0 + bytes)
    }
    pub const fn is_aligned(self, align: u64) -> bool {
        self.0 & (align - 1) == 0
    }
}

impl Ipa {
    pub const fn add(self, bytes: u64) -> Self {
        Ipa(self.0 + bytes)
    }
    pub const fn is_aligned(self, align: u64) -> bool {
        self.0 & (align - 1) == 0
    }
}

/// A half-open range of IPAs `[base, base + size)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpaRange {
    pub base: Ipa,
    pub size: u64,
}

impl IpaRange {
    pub const fn new(base: u64, size: u64) -> Self {
        IpaRange {
            base: Ipa(base),
            size,
        }
    }
    pub const fn contains(&self, ipa: Ipa) -> bool {
        ipa.0 >= self.base.0 && ipa.0 - self.base.0 < self.size
    }
    /// Whether `[ipa, ipa + len)` lies wholly inside the range.
    pub fn contains_span(&self, ipa: Ipa, len: u64) -> bool {
        match ipa.0.checked_add(len) {
            Some(end) => ipa.0 >= self.base.0 && end <= self.base.0 + self.size,
            None => false,
        }
    }
    pub const fn offset_of(&self, ipa: Ipa) -> u64 {
        ipa.0 - self.base.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_at_end_of_range_is_inside_but_one_byte_more_is_not() {
        let r = IpaRange::new(0x4000_0000, 0x1000);
        assert!(r.contains_span(Ipa(0x4000_0F00), 0x100));
        assert!(!r.contains_span(Ipa(0x4000_0F00), 0x101));
        assert!(!r.contains_span(Ipa(u64::MAX - 1), 4));
        assert!(!r.contains(Ipa(0x3FFF_FFFF)));
    }
}
