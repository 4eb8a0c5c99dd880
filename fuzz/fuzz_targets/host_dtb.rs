//! The host DTB reader: any blob firmware could hand over is read or
//! refused with an error, never a panic; a read one yields host resources
//! the isolation check can use, and every window it names has an end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinfold_hv::dtb::{host_resources, parse_host_dtb};

fuzz_target!(|data: &[u8]| {
    if let Ok(info) = parse_host_dtb(data) {
        let host = host_resources(&info, &[(0x4000_0000, 0x20_0000)]);
        for d in &host.devices {
            let _ = d.base.checked_add(d.size);
        }
        let _ = pinfold_config::isolation::check_isolation(&[], &host);
    }
});
