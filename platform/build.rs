//! Links the EL2 image with our linker script (bare-metal aarch64 only).
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "none" {
        println!("cargo:rustc-link-arg-bins=-T{dir}/link.ld");
        println!("cargo:rerun-if-changed={dir}/link.ld");
    }
}
