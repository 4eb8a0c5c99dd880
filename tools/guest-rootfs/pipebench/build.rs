//! Links the workload as a Linux user program: entry `_start`, no libc.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // Only the aarch64 bare-metal target links this as a Linux program; a
    // host `cargo check` of the workspace must not try to.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo:rustc-link-arg-bins=--entry=_start");
        // The kernel ignores section headers; keep the file small.
        println!("cargo:rustc-link-arg-bins=--build-id=none");
    }
}
