//! The image-size section: the EL2 ELF's sections (`llvm-size -A`) and the
//! sizes of the flat images.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::Section;

/// Section sizes of the EL2 ELF, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageSize {
    /// `.text*` and `.head` (the arm64 Image header, which holds the first
    /// branch).
    pub text: u64,
    pub rodata: u64,
    /// `.data*` and `.got*`.
    pub data: u64,
    /// Other loaded sections: the dynamic relocations the image applies to
    /// itself at boot and their symbol tables.
    pub other: u64,
    pub bss: u64,
}

impl ImageSize {
    /// Bytes that must be loaded: everything but BSS and non-loaded sections.
    pub fn loadable(&self) -> u64 {
        self.text + self.rodata + self.data + self.other
    }
}

/// Sections that are in the ELF file but never loaded.
const NOT_LOADED: [&str; 6] = [
    ".debug",
    ".comment",
    ".symtab",
    ".strtab",
    ".shstrtab",
    ".note.GNU-stack",
];

/// Parses `llvm-size -A` output (`section size addr` rows, then `Total`).
pub fn parse_llvm_size(text: &str) -> Result<ImageSize, String> {
    let mut size = ImageSize::default();
    let mut rows = 0;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(name), Some(bytes)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !name.starts_with('.') {
            // The file name, the header and `Total`.
            continue;
        }
        let bytes: u64 = bytes
            .parse()
            .map_err(|_| format!("section {name} has size `{bytes}`, not a number"))?;
        rows += 1;
        let bucket = if NOT_LOADED.iter().any(|p| name.starts_with(p)) {
            continue;
        } else if [".bss", ".sbss", ".tbss"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            &mut size.bss
        } else if name.starts_with(".text") || name == ".head" {
            &mut size.text
        } else if name.starts_with(".rodata") {
            &mut size.rodata
        } else if name.starts_with(".data") || name.starts_with(".got") {
            &mut size.data
        } else {
            &mut size.other
        };
        *bucket += bytes;
    }
    if rows == 0 {
        return Err("no `.section size addr` rows".into());
    }
    Ok(size)
}

/// The section as the report shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeSection {
    pub method: String,
    pub image: ImageSize,
    /// The flat EL2 image (BSS included as zeros).
    pub el2_bin_bytes: u64,
    /// The final image: EL2 image plus the default plan's payload.
    pub pinfold_bin_bytes: u64,
}

impl Section for SizeSection {
    fn key(&self) -> &'static str {
        "image_size"
    }

    fn text(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "== Image size ==");
        let _ = writeln!(t, "method: {}", self.method);
        let image = &self.image;
        for (name, bytes) in [
            ("text (.head + .text)", image.text),
            ("rodata", image.rodata),
            ("data", image.data),
            ("other loaded (.rela.dyn, .dyn*)", image.other),
            ("loadable total", image.loadable()),
            ("bss", image.bss),
            ("pinfold-el2.bin (flat, BSS as zeros)", self.el2_bin_bytes),
            (
                "pinfold.bin (EL2 + default payload)",
                self.pinfold_bin_bytes,
            ),
        ] {
            let _ = writeln!(
                t,
                "{name:<38} {bytes:>12} bytes {:>10.1} KiB",
                bytes as f64 / 1024.0
            );
        }
        t
    }

    fn json(&self) -> Value {
        json!({
            "method": self.method,
            "text_bytes": self.image.text,
            "rodata_bytes": self.image.rodata,
            "data_bytes": self.image.data,
            "other_loadable_bytes": self.image.other,
            "loadable_bytes": self.image.loadable(),
            "bss_bytes": self.image.bss,
            "pinfold_el2_bin_bytes": self.el2_bin_bytes,
            "pinfold_bin_bytes": self.pinfold_bin_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLVM_SIZE: &str = "\
target/aarch64-unknown-none-softfloat/release/pinfold  :
section               size     addr
.head                   64        0
.text               119872     2048
.rodata               7856   122880
.rela.dyn             4440   130736
.dynsym                 24   135176
.dynamic               208   135256
.data                15456   139264
.bss               4734976   155648
.debug_info         785809        0
.comment                19        0
Total              7245327
";

    #[test]
    fn llvm_size_sections_are_bucketed_by_name() {
        let size = parse_llvm_size(LLVM_SIZE);

        assert_eq!(
            size,
            Ok(ImageSize {
                text: 64 + 119_872,
                rodata: 7856,
                data: 15_456,
                other: 4440 + 24 + 208,
                bss: 4_734_976,
            })
        );
    }

    #[test]
    fn loadable_excludes_bss_and_debug_sections() {
        let size = parse_llvm_size(LLVM_SIZE).unwrap_or_default();

        assert_eq!(
            size.loadable(),
            64 + 119_872 + 7856 + 15_456 + 4440 + 24 + 208
        );
    }

    #[test]
    fn llvm_size_without_sections_is_an_error() {
        assert!(parse_llvm_size("llvm-size: error: no such file").is_err());
    }

    #[test]
    fn llvm_size_with_non_numeric_size_is_an_error() {
        assert!(parse_llvm_size(".text  lots  0").is_err());
    }

    #[test]
    fn json_has_every_size_and_the_loadable_sum() {
        let section = SizeSection {
            method: "m".into(),
            image: parse_llvm_size(LLVM_SIZE).unwrap_or_default(),
            el2_bin_bytes: 1,
            pinfold_bin_bytes: 2,
        };

        let json = section.json();

        assert_eq!(json["loadable_bytes"], json!(147_920));
        assert_eq!(json["bss_bytes"], json!(4_734_976));
        assert_eq!(json["pinfold_bin_bytes"], json!(2));
        assert!(section.text().contains("loadable total"));
    }
}
