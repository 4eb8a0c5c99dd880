//! Links the probe guest with `link.ld` (a static PIE at 0 that relocates
//! itself).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    println!("cargo:rerun-if-changed=link.ld");
    println!("cargo:rerun-if-changed=build.rs");
    // Only the bare-metal build uses the script; a host `cargo check` of the
    // workspace must not try to link x86_64 code at 0.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo:rustc-link-arg-bins=-T{dir}/link.ld");
        // Keep the linker's relocations in the ELF (not in the raw binary):
        // the xtask checks every absolute address has a RELATIVE entry
        // (tools/xtask/src/pie.rs).
        println!("cargo:rustc-link-arg-bins=--emit-relocs");
    }
}
