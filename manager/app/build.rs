//! Links the post-processed Hermit kernel (`libhermit.a`) that the xtask
//! built, embeds the web UI's built files (`web-ui/dist`) as a table of
//! `(url path, content type, bytes)`, and embeds the API's TLS certificate
//! and key (`cert.der`, `key.der` from the directory the xtask names; none:
//! the manager serves plain HTTP and says so).

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process;

/// Set by `tools/xtask/src/hermit.rs` to the directory holding `libhermit.a`.
const LIBHERMIT_DIR: &str = "PINFOLD_LIBHERMIT_DIR";
/// Set by the xtask to the web UI's `dist` directory (optional).
const WEB_UI_DIST: &str = "PINFOLD_WEB_UI_DIST";
/// Set by the xtask's lint step (`cargo clippy`, nothing is linked) when
/// `libhermit.a` has not been built yet.
const CHECK_ONLY: &str = "PINFOLD_MANAGER_CHECK_ONLY";
/// Set by the xtask to the directory holding the management API's
/// certificate (`cert.der`) and PKCS#8 key (`key.der`); unset: plain HTTP
/// (the plan's `api_tls = false`, or a lint run).
const TLS_DIR: &str = "PINFOLD_MANAGER_TLS_DIR";
/// Set by the xtask to the directory of `libpinfold_ring_asm.a`.
const RING_ASM_DIR: &str = "PINFOLD_RING_ASM_DIR";

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" => "application/json",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn embed_web_ui() {
    println!("cargo:rerun-if-env-changed={WEB_UI_DIST}");
    let mut table = String::from("&[\n");
    if let Some(dist) = env::var_os(WEB_UI_DIST) {
        let dist = PathBuf::from(dist);
        println!("cargo:rerun-if-changed={}", dist.display());
        let mut files = Vec::new();
        collect(&dist, &mut files);
        for file in files {
            let Ok(rel) = file.strip_prefix(&dist) else {
                continue;
            };
            println!("cargo:rerun-if-changed={}", file.display());
            let _ = writeln!(
                table,
                "    (\"/{}\", \"{}\", include_bytes!({:?})),",
                rel.display(),
                content_type(&file),
                file.display()
            );
        }
    }
    table.push(']');
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default()).join("web_ui.rs");
    if let Err(err) = fs::write(&out, table) {
        eprintln!("writing {}: {err}", out.display());
        process::exit(1);
    }
}

fn embed_tls() {
    println!("cargo:rerun-if-env-changed={TLS_DIR}");
    let mut text = String::from("None");
    if let Some(dir) = env::var_os(TLS_DIR) {
        let (cert, key) = (
            Path::new(&dir).join("cert.der"),
            Path::new(&dir).join("key.der"),
        );
        for file in [&cert, &key] {
            if !file.is_file() {
                eprintln!("{TLS_DIR}: {} does not exist", file.display());
                process::exit(1);
            }
            println!("cargo:rerun-if-changed={}", file.display());
        }
        text = format!(
            "Some((include_bytes!({:?}).as_slice(), include_bytes!({:?}).as_slice()))",
            cert.display(),
            key.display()
        );
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default()).join("tls.rs");
    if let Err(err) = fs::write(&out, text) {
        eprintln!("writing {}: {err}", out.display());
        process::exit(1);
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={LIBHERMIT_DIR}");
    println!("cargo:rerun-if-env-changed={CHECK_ONLY}");
    embed_web_ui();
    embed_tls();
    // A host `cargo check` of this crate, or a lint run, has nothing to link.
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("hermit")
        || env::var_os(CHECK_ONLY).is_some()
    {
        return;
    }
    let Some(dir) = env::var_os(LIBHERMIT_DIR) else {
        eprintln!("{LIBHERMIT_DIR} is not set: build the manager with `cargo xtask`");
        process::exit(1);
    };
    let library = Path::new(&dir).join("libhermit.a");
    if !library.is_file() {
        eprintln!(
            "{} does not exist: build the manager with `cargo xtask`",
            library.display()
        );
        process::exit(1);
    }
    println!("cargo:rerun-if-changed={}", library.display());
    println!(
        "cargo:rustc-link-search=native={}",
        Path::new(&dir).display()
    );
    println!("cargo:rustc-link-lib=static=hermit");
    // ring's aarch64 assembly, which ring's own build leaves out for Hermit
    // (tools/xtask/src/hermit.rs, `ring_asm`).
    println!("cargo:rerun-if-env-changed={RING_ASM_DIR}");
    let Some(asm) = env::var_os(RING_ASM_DIR) else {
        eprintln!("{RING_ASM_DIR} is not set: build the manager with `cargo xtask`");
        process::exit(1);
    };
    println!(
        "cargo:rerun-if-changed={}",
        Path::new(&asm).join("libpinfold_ring_asm.a").display()
    );
    println!(
        "cargo:rustc-link-search=native={}",
        Path::new(&asm).display()
    );
    println!("cargo:rustc-link-lib=static=pinfold_ring_asm");
}
