//! The emulated PL011 and the console line assembler under any register
//! accesses and input: never panics, and the receive FIFO never reports
//! more room than it has.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinfold_hv::console::{LinePrefixer, Pl011};

fuzz_target!(|data: &[u8]| {
    let mut uart = Pl011::new();
    let mut lines = LinePrefixer::new("fuzz");
    let mut sent = 0usize;
    for op in data.chunks(8) {
        if op.len() < 8 {
            break;
        }
        let offset = u64::from(u16::from_le_bytes([op[1], op[2]]) & 0xfff);
        let width = [1u8, 2, 4, 8][usize::from(op[3] & 3)];
        let value = u64::from(u32::from_le_bytes(op[4..8].try_into().unwrap()));
        match op[0] % 4 {
            0 => {
                let _ = uart.read(offset, width);
            }
            1 => uart.write(offset, width, value, &mut |b| {
                sent += 1;
                lines.feed(b, &mut |_| {});
            }),
            2 => {
                let room = uart.rx_room();
                let took = uart.push_rx(op[4]);
                assert_eq!(took, room > 0, "push_rx with room {room}");
            }
            _ => {
                let _ = uart.irq_level();
                lines.flush(&mut |_| {});
            }
        }
    }
    let _ = lines.ends_with_prompt();
});
