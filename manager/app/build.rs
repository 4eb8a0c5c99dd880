//! Links the post-processed Hermit kernel (`libhermit.a`) that the xtask built.

use std::env;
use std::path::Path;
use std::process;

/// Set by `tools/xtask/src/hermit.rs` to the directory holding `libhermit.a`.
const LIBHERMIT_DIR: &str = "PINFOLD_LIBHERMIT_DIR";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={LIBHERMIT_DIR}");
    // A host `cargo check` of this crate has nothing to link.
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("hermit") {
        return;
    }
    let Some(dir) = env::var_os(LIBHERMIT_DIR) else {
        eprintln!("{LIBHERMIT_DIR} is not set: build the manager with `cargo xtask`");
        process::exit(1);
    };
    let library = Path::new(&dir).join("libhermit.a");
    if !library.is_file() {
        eprintln!("{} does not exist: build the manager with `cargo xtask`", library.display());
        process::exit(1);
    }
    println!("cargo:rerun-if-changed={}", library.display());
    println!("cargo:rustc-link-search=native={}", Path::new(&dir).display());
    println!("cargo:rustc-link-lib=static=hermit");
}
