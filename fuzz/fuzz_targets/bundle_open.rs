//! Opening a signed boot bundle (the boot loader's initrd): any bytes are
//! opened or refused, never a panic; what opens is inside the input and is
//! then decoded as a plan. The key is a fixed test key, so a mutated input
//! almost never opens: the checks before the signature are what is fuzzed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinfold_config::bundle::open;

fuzz_target!(|data: &[u8]| {
    let key = [7u8; 32];
    if let Ok(payload) = open(data, &key) {
        assert!(payload.len() <= data.len());
        let _ = pinfold_config::Plan::decode(payload);
    }
});
