//! The emulated ARM PrimeCell PL061 GPIO every partition sees, with its
//! line [`POWER_LINE`] wired to a power button (a `gpio-keys` DT node with
//! `linux,code = KEY_POWER`, as QEMU `virt` wires its PL061): the graceful
//! shutdown presses it (line high) and `lifecycle` releases it at its
//! next check, half a second later at most, as a finger would.
//!
//! Registers (ARM DDI 0190, PL061 TRM, 3.3): GPIODATA at 0x000-0x3FC,
//! address-masked (bits [9:2] of the offset select the bits a read returns
//! and a write changes); GPIODIR 0x400; GPIOIS 0x404 (1 = level); GPIOIBE
//! 0x408 (both edges); GPIOIEV 0x40C (1 = rising edge / high level); GPIOIE
//! 0x410 (1 = enabled); GPIORIS 0x414, GPIOMIS 0x418 (read-only); GPIOIC
//! 0x41C (write 1 to clear an edge); GPIOAFSEL 0x420; the PrimeCell
//! identification registers at 0xFE0-0xFFC (Linux's AMBA bus reads them
//! before binding the driver). Pure state: the caller hands the level of
//! the interrupt line ([`Pl061::irq_level`]) to the distributor.

/// The power button's line.
pub const POWER_LINE: u32 = 3;

const GPIODIR: u64 = 0x400;
const GPIOIS: u64 = 0x404;
const GPIOIBE: u64 = 0x408;
const GPIOIEV: u64 = 0x40c;
const GPIOIE: u64 = 0x410;
const GPIORIS: u64 = 0x414;
const GPIOMIS: u64 = 0x418;
const GPIOIC: u64 = 0x41c;
const GPIOAFSEL: u64 = 0x420;

/// PeriphID0..3 (0xFE0..0xFEC) and PCellID0..3 (0xFF0..0xFFC): part 0x061,
/// designer 0x41 (ARM), revision 0; the PrimeCell preamble.
const ID: [u8; 8] = [0x61, 0x10, 0x04, 0x00, 0x0d, 0xf0, 0x05, 0xb1];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pl061 {
    /// Input levels driven from outside (the button).
    input: u8,
    /// Output values the guest wrote.
    out: u8,
    dir: u8,
    is: u8,
    ibe: u8,
    iev: u8,
    ie: u8,
    /// Edge-latched (and level) raw interrupt status.
    ris: u8,
    afsel: u8,
}

impl Pl061 {
    pub const fn new() -> Self {
        Pl061 {
            input: 0,
            out: 0,
            dir: 0,
            is: 0,
            ibe: 0,
            iev: 0,
            ie: 0,
            ris: 0,
            afsel: 0,
        }
    }

    /// The pins as the guest reads them: outputs as written, inputs as
    /// driven.
    fn pins(&self) -> u8 {
        self.out & self.dir | self.input & !self.dir
    }

    fn level_status(&self) -> u8 {
        let pins = self.pins();
        // Level-sensitive lines: active when at the level IEV selects.
        self.is & !(pins ^ self.iev)
    }

    fn raw(&self) -> u8 {
        self.ris & !self.is | self.level_status()
    }

    /// The combined interrupt line (GPIOINTR).
    pub fn irq_level(&self) -> bool {
        self.raw() & self.ie != 0
    }

    /// Drive input line `line` to `high` (the button).
    pub fn set_input(&mut self, line: u32, high: bool) {
        let bit = 1u8 << (line & 7);
        let old = self.input & bit != 0;
        if old == high {
            return;
        }
        self.input = if high {
            self.input | bit
        } else {
            self.input & !bit
        };
        if self.dir & bit != 0 || self.is & bit != 0 {
            return;
        }
        let fires = self.ibe & bit != 0 || (self.iev & bit != 0) == high;
        if fires {
            self.ris |= bit;
        }
    }

    pub fn read(&self, offset: u64) -> u32 {
        let v = match offset {
            0x000..=0x3fc => self.pins() & (offset >> 2) as u8,
            GPIODIR => self.dir,
            GPIOIS => self.is,
            GPIOIBE => self.ibe,
            GPIOIEV => self.iev,
            GPIOIE => self.ie,
            GPIORIS => self.raw(),
            GPIOMIS => self.raw() & self.ie,
            GPIOAFSEL => self.afsel,
            0xfe0..=0xffc => ID[((offset - 0xfe0) / 4) as usize],
            _ => 0,
        };
        u32::from(v)
    }

    pub fn write(&mut self, offset: u64, value: u32) {
        let v = value as u8;
        match offset {
            0x000..=0x3fc => {
                let mask = (offset >> 2) as u8 & self.dir;
                self.out = self.out & !mask | v & mask;
            }
            GPIODIR => self.dir = v,
            GPIOIS => self.is = v,
            GPIOIBE => self.ibe = v,
            GPIOIEV => self.iev = v,
            GPIOIE => self.ie = v,
            GPIOIC => self.ris &= !v,
            GPIOAFSEL => self.afsel = v,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    const BIT: u32 = 1 << POWER_LINE;

    /// What Linux's pl061 + gpio-keys do for the power key: input, both
    /// edges, enabled.
    fn as_gpio_keys_sets_it_up() -> Pl061 {
        let mut g = Pl061::new();
        g.write(GPIODIR, 0);
        g.write(GPIOIS, 0);
        g.write(GPIOIBE, BIT);
        g.write(GPIOIE, BIT);
        g
    }

    #[test]
    fn the_primecell_id_is_a_pl061s() {
        let g = Pl061::new();
        let id: Vec<u32> = (0..8).map(|i| g.read(0xfe0 + 4 * i)).collect();

        assert_eq!(id, [0x61, 0x10, 0x04, 0x00, 0x0d, 0xf0, 0x05, 0xb1]);
    }

    #[test]
    fn a_press_raises_the_line_until_cleared_and_data_shows_the_key_down() {
        let mut g = as_gpio_keys_sets_it_up();

        g.set_input(POWER_LINE, true);

        assert!(g.irq_level());
        assert_eq!(g.read(GPIOMIS), BIT);
        assert_eq!(
            g.read(u64::from(BIT) << 2),
            BIT,
            "GPIODATA masked by the address"
        );
        assert_eq!(g.read(1 << 2), 0, "other bits masked out");
        g.write(GPIOIC, BIT);
        assert!(!g.irq_level());
        g.set_input(POWER_LINE, false);
        assert!(g.irq_level(), "the release is an edge too");
        g.write(GPIOIC, BIT);
        assert_eq!(g.read(0x3fc), 0);
    }

    #[test]
    fn a_masked_or_rising_only_line_ignores_what_it_should() {
        let mut g = Pl061::new();
        g.write(GPIOIEV, BIT);
        g.set_input(POWER_LINE, true);
        assert!(!g.irq_level(), "not enabled");
        assert_eq!(g.read(GPIORIS), BIT);
        g.write(GPIOIC, BIT);
        g.write(GPIOIE, BIT);

        g.set_input(POWER_LINE, false);

        assert!(!g.irq_level(), "a falling edge on a rising-only line");
    }

    #[test]
    fn a_level_line_follows_the_pin() {
        let mut g = Pl061::new();
        g.write(GPIOIS, BIT);
        g.write(GPIOIEV, BIT);
        g.write(GPIOIE, BIT);

        g.set_input(POWER_LINE, true);
        assert!(g.irq_level());
        g.write(GPIOIC, BIT);
        assert!(g.irq_level(), "a level is not cleared by GPIOIC");
        g.set_input(POWER_LINE, false);
        assert!(!g.irq_level());
    }

    #[test]
    fn outputs_read_back_what_was_written_under_the_address_mask() {
        let mut g = Pl061::new();
        g.write(GPIODIR, 0x03);

        g.write(0x3fc, 0xff);
        g.write(0x1 << 2, 0x00);

        assert_eq!(g.read(0x3fc), 0x02);
    }
}
