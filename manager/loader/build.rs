//! Links the loader at its load address and points it at the Hermit application ELF to embed.

use std::env;
use std::fs;
use std::path::PathBuf;

/// Set by `tools/xtask/src/hermit.rs` to the application ELF built for
/// aarch64-unknown-hermit.
const APP_ELF: &str = "PINFOLD_MANAGER_APP_ELF";

fn main() {
    let dir = env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    println!("cargo:rerun-if-changed=link.ld");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={APP_ELF}");
    // Only the bare-metal build uses the script; a host `cargo check` of the
    // workspace must not link x86_64 code with it.
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo:rustc-link-arg-bins=-T{dir}/link.ld");
    }
    // Without an application (a plain `cargo build` of the workspace) embed
    // an empty file: the loader then reports that it has nothing to boot.
    let elf = match env::var_os(APP_ELF) {
        Some(path) => PathBuf::from(path),
        None => {
            let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_else(|| ".".into()));
            let empty = out.join("no-app.elf");
            if let Err(err) = fs::write(&empty, b"") {
                println!("cargo:warning=cannot write {}: {err}", empty.display());
            }
            empty
        }
    };
    println!("cargo:rerun-if-changed={}", elf.display());
    println!("cargo:rustc-env=PINFOLD_APP_ELF_PATH={}", elf.display());
}
