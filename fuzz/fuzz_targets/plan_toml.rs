//! The plan's TOML parser and validation (the build host's `cargo xtask
//! build`): any text is parsed or refused with an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(config) = pinfold_config::parse(text) {
            let _ = config.validate(std::path::Path::new("/nonexistent"));
        }
    }
});
