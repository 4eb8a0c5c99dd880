//! Host tests of the config schema, its rules and the payload builder.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::*;

/// A throwaway workspace root in the temp dir holding fake image files.
struct Root {
    dir: PathBuf,
}

impl Root {
    fn new() -> Root {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pinfold-config-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create temp root");
        Root { dir }
    }

    /// A root with `kernel` (a Linux Image), `raw` (no magic) and `initrd`.
    fn with_images() -> Root {
        let root = Root::new();
        root.write("kernel", &linux_image(2 * Size::MIB));
        root.write("raw", b"a raw kernel without the arm64 Image header");
        root.write("initrd", b"fake initramfs");
        root
    }

    fn write(&self, relative: &str, bytes: &[u8]) {
        let path = self.dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        std::fs::write(path, bytes).expect("write fake image");
    }

    fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fake arm64 Image: a 64-byte header with the magic and `image_size`,
/// then a few bytes that are not code.
fn linux_image(image_size: u64) -> Vec<u8> {
    let mut image = vec![0u8; 64];
    image[16..24].copy_from_slice(&image_size.to_le_bytes());
    image[56..60].copy_from_slice(b"ARM\x64");
    image.extend_from_slice(b"not really a kernel");
    image
}

const BOARD: &str = r#"
[board]
name = "qemu-virt"
cpus = 4
memory = "2GiB"
"#;

/// A board plus partitions written in the test.
fn config(partitions: &str) -> Config {
    parse(&format!("{BOARD}{partitions}")).expect("test TOML parses")
}

fn rejected(root: &Root, partitions: &str) -> ConfigError {
    config(partitions)
        .validate(root.path())
        .expect_err("config must be rejected")
}

/// Asserts the error is about `partition`'s `field` and says so.
fn assert_names(error: &ConfigError, partition: &str, field: &str) {
    assert_eq!(error.partition(), Some(partition), "{error}");
    assert_eq!(error.field(), Some(field), "{error}");
    let prefix = format!("partition \"{partition}\": {field}: ");
    assert!(error.to_string().starts_with(&prefix), "{error}");
}

const ALPHA: &str = r#"
[[partition]]
name = "alpha"
cpus = [1]
memory = "256MiB"
kernel = "kernel"
"#;

// ---- sizes and parsing ----------------------------------------------------

#[test]
fn size_spellings_parse_to_bytes() {
    let cases = [
        ("256MiB", 256 * Size::MIB),
        ("2GiB", 2 * Size::GIB),
        ("512M", 512 * Size::MIB),
        ("1G", Size::GIB),
        ("64K", 64 * Size::KIB),
        ("1TiB", Size::TIB),
        ("4096", 4096),
        ("16 MiB", 16 * Size::MIB),
    ];

    for (text, bytes) in cases {
        assert_eq!(text.parse::<Size>(), Ok(Size(bytes)), "{text}");
    }
}

#[test]
fn size_refuses_decimal_units() {
    let parsed = "512MB".parse::<Size>();

    assert_eq!(
        parsed,
        Err(SizeError::UnknownUnit {
            text: "512MB".into(),
            unit: "MB".into()
        })
    );
}

#[test]
fn size_refuses_overflow() {
    let parsed = "20000000TiB".parse::<Size>();

    assert!(matches!(parsed, Err(SizeError::Overflow(_))), "{parsed:?}");
}

#[test]
fn size_displays_in_largest_exact_unit() {
    let shown = [Size(2 * Size::GIB), Size(3 * Size::MIB), Size(4097)].map(|s| s.to_string());

    assert_eq!(shown, ["2GiB", "3MiB", "4097 bytes"]);
}

#[test]
fn integer_memory_is_bytes() {
    let config = config(
        r#"
[[partition]]
name = "alpha"
cpus = [1]
memory = 4194304
kernel = "kernel"
"#,
    );

    assert_eq!(config.partitions[0].memory, Size(4 * Size::MIB));
}

#[test]
fn optional_fields_take_their_defaults() {
    let config = config(ALPHA);

    let alpha = &config.partitions[0];
    assert_eq!(alpha.initrd, None);
    assert_eq!(alpha.bootargs, "");
    assert_eq!(alpha.kernel_format, ImageFormat::Auto);
    assert!(!alpha.console_input);
    assert!(alpha.autostart);
    assert!(!alpha.management);
    assert!(alpha.pmu);
    assert!(alpha.devices.is_empty());
}

#[test]
fn unknown_field_is_a_syntax_error_naming_it() {
    let text = format!("{BOARD}{ALPHA}cpu_count = 2\n");

    let error = parse(&text).expect_err("typo must be rejected");

    assert!(matches!(error, ConfigError::Syntax { .. }), "{error}");
    assert!(error.to_string().contains("cpu_count"), "{error}");
}

#[test]
fn bad_size_is_a_syntax_error_naming_the_field() {
    let text = format!("{BOARD}{}", ALPHA.replace("\"256MiB\"", "\"256MB\""));

    let error = parse(&text).expect_err("decimal unit must be rejected");

    let message = error.to_string();
    assert!(message.contains("memory"), "{message}");
    assert!(message.contains("MB"), "{message}");
}

#[test]
fn missing_kernel_is_a_syntax_error_naming_the_field() {
    let text = format!("{BOARD}{}", ALPHA.replace("kernel = \"kernel\"", ""));

    let error = parse(&text).expect_err("kernel is required");

    assert!(error.to_string().contains("kernel"), "{error}");
}

#[test]
fn load_names_the_file_in_syntax_errors() {
    let root = Root::new();
    root.write(
        "bad.toml",
        b"[board]\nname = \"qemu-virt\"\ncpus = \"four\"\n",
    );
    let path = root.path().join("bad.toml");

    let error = load(&path).expect_err("wrong type must be rejected");

    assert!(
        error.to_string().starts_with(&path.display().to_string()),
        "{error}"
    );
}

#[test]
fn load_reports_a_missing_config_file() {
    let root = Root::new();

    let error = load(&root.path().join("absent.toml")).expect_err("no file");

    assert!(matches!(error, ConfigError::Read { .. }), "{error}");
}

// ---- board ----------------------------------------------------------------

#[test]
fn board_memory_not_a_multiple_of_2mib_is_rejected() {
    let root = Root::with_images();
    let text = format!("{}{ALPHA}", BOARD.replace("\"2GiB\"", "\"3M\""));

    let error = parse(&text)
        .expect("parses")
        .validate(root.path())
        .expect_err("rejected");

    assert_eq!(error.field(), Some("memory"));
    assert!(
        error
            .to_string()
            .starts_with("board: memory: 3MiB is not a multiple of 2MiB"),
        "{error}"
    );
}

#[test]
fn board_without_cpus_is_rejected() {
    let root = Root::with_images();
    let text = format!("{}{ALPHA}", BOARD.replace("cpus = 4", "cpus = 0"));

    let error = parse(&text)
        .expect("parses")
        .validate(root.path())
        .expect_err("rejected");

    assert!(
        matches!(error.problem(), Some(Problem::NoBoardCpus)),
        "{error}"
    );
    assert!(error.to_string().starts_with("board: cpus: "), "{error}");
}

#[test]
fn config_without_partitions_is_rejected() {
    let root = Root::with_images();

    let error = config("").validate(root.path()).expect_err("rejected");

    assert!(matches!(error, ConfigError::NoPartitions), "{error}");
}

// ---- names ----------------------------------------------------------------

#[test]
fn duplicate_partition_name_is_rejected() {
    let root = Root::with_images();

    let error = rejected(&root, &format!("{ALPHA}{}", ALPHA.replace("[1]", "[2]")));

    assert_names(&error, "alpha", "name");
    assert!(
        matches!(error.problem(), Some(Problem::NameDuplicate)),
        "{error}"
    );
}

#[test]
fn name_longer_than_name_max_is_rejected() {
    let root = Root::with_images();
    let long = "a".repeat(NAME_MAX + 1);

    let error = rejected(&root, &ALPHA.replace("\"alpha\"", &format!("\"{long}\"")));

    assert_names(&error, &long, "name");
    assert!(
        matches!(
            error.problem(),
            Some(Problem::NameTooLong { len: 16, max: 15 })
        ),
        "{error}"
    );
}

#[test]
fn name_with_uppercase_is_rejected() {
    let root = Root::with_images();

    let error = rejected(&root, &ALPHA.replace("\"alpha\"", "\"Alpha\""));

    assert_names(&error, "Alpha", "name");
    assert!(
        matches!(
            error.problem(),
            Some(Problem::NameCharacter { ch: 'A', .. })
        ),
        "{error}"
    );
}

#[test]
fn empty_name_is_rejected() {
    let root = Root::with_images();

    let error = rejected(&root, &ALPHA.replace("\"alpha\"", "\"\""));

    assert_names(&error, "", "name");
    assert!(
        matches!(error.problem(), Some(Problem::NameEmpty)),
        "{error}"
    );
}

// ---- CPUs -----------------------------------------------------------------

#[test]
fn cpu_in_two_partitions_is_rejected() {
    let root = Root::with_images();
    let beta = ALPHA.replace("alpha", "beta").replace("[1]", "[2, 1]");

    let error = rejected(&root, &format!("{ALPHA}{beta}"));

    assert_names(&error, "beta", "cpus");
    assert_eq!(
        error.to_string(),
        "partition \"beta\": cpus: CPU 1 is also used by partition \"alpha\""
    );
}

#[test]
fn cpu_beyond_the_board_is_rejected() {
    let root = Root::with_images();

    let error = rejected(
        &root,
        &ALPHA.replace("alpha", "gamma").replace("[1]", "[7]"),
    );

    assert_names(&error, "gamma", "cpus");
    assert_eq!(
        error.to_string(),
        "partition \"gamma\": cpus: CPU 7 does not exist (board qemu-virt has 4 CPUs)"
    );
}

#[test]
fn cpu_numbered_like_the_board_count_is_rejected() {
    let root = Root::with_images();

    let error = rejected(&root, &ALPHA.replace("[1]", "[4]"));

    assert_names(&error, "alpha", "cpus");
    assert!(
        matches!(error.problem(), Some(Problem::CpuMissing { cpu: 4, .. })),
        "{error}"
    );
}

#[test]
fn cpu_listed_twice_in_one_partition_is_rejected() {
    let root = Root::with_images();

    let error = rejected(&root, &ALPHA.replace("[1]", "[1, 1]"));

    assert_names(&error, "alpha", "cpus");
    assert!(
        matches!(error.problem(), Some(Problem::CpuRepeated { cpu: 1 })),
        "{error}"
    );
}

#[test]
fn empty_cpu_list_is_rejected() {
    let root = Root::with_images();

    let error = rejected(&root, &ALPHA.replace("[1]", "[]"));

    assert_names(&error, "alpha", "cpus");
    assert!(matches!(error.problem(), Some(Problem::NoCpus)), "{error}");
}

#[test]
fn more_vcpus_than_redistributor_frames_is_rejected() {
    let root = Root::with_images();
    let cpus: Vec<String> = (0..124).map(|cpu| cpu.to_string()).collect();
    let text = format!(
        "{}{}",
        BOARD.replace("cpus = 4", "cpus = 200"),
        ALPHA.replace("[1]", &format!("[{}]", cpus.join(", ")))
    );

    let error = parse(&text)
        .expect("parses")
        .validate(root.path())
        .expect_err("rejected");

    assert_names(&error, "alpha", "cpus");
    assert!(
        matches!(
            error.problem(),
            Some(Problem::TooManyVcpus {
                count: 124,
                max: 123
            })
        ),
        "{error}"
    );
}

// ---- memory ---------------------------------------------------------------

#[test]
fn partitions_beyond_board_memory_are_rejected() {
    let root = Root::with_images();
    let beta = ALPHA
        .replace("alpha", "beta")
        .replace("[1]", "[2, 3]")
        .replace("256MiB", "1792MiB");

    let error = rejected(&root, &format!("{ALPHA}{beta}"));

    assert_names(&error, "beta", "memory");
    let message = error.to_string();
    assert!(
        message.starts_with("partition \"beta\": memory: 2GiB of partitions plus the hypervisor's reserve (66MiB) do not fit in the board's 2GiB"),
        "{message}"
    );
}

#[test]
fn partitions_filling_board_memory_minus_reserve_are_accepted() {
    let root = Root::with_images();
    // Reserve: 64 MiB plus the (small) payload rounded up to 2 MiB.
    let beta = ALPHA
        .replace("alpha", "beta")
        .replace("[1]", "[2, 3]")
        .replace("256MiB", "1726MiB");

    let result = config(&format!("{ALPHA}{beta}")).validate(root.path());

    assert!(result.is_ok(), "{result:?}");
}

#[test]
fn payload_size_counts_towards_the_reserve() {
    let root = Root::with_images();
    root.write("big", &vec![0x5a; (2 * Size::MIB) as usize]);
    let beta = ALPHA
        .replace("alpha", "beta")
        .replace("[1]", "[2, 3]")
        .replace("256MiB", "1726MiB")
        .replace("\"kernel\"", "\"big\"");

    let error = rejected(&root, &format!("{ALPHA}{beta}"));

    assert_names(&error, "beta", "memory");
    assert!(
        matches!(error.problem(), Some(Problem::MemoryExhausted { reserve, .. }) if *reserve == Size(68 * Size::MIB)),
        "{error}"
    );
}

#[test]
fn memory_not_a_multiple_of_2mib_is_rejected() {
    let root = Root::with_images();

    let error = rejected(&root, &ALPHA.replace("\"256MiB\"", "\"255MiB\""));

    assert_names(&error, "alpha", "memory");
    assert!(
        matches!(error.problem(), Some(Problem::MemoryUnaligned { .. })),
        "{error}"
    );
}

#[test]
fn memory_below_2mib_is_rejected() {
    let root = Root::with_images();

    let error = rejected(&root, &ALPHA.replace("\"256MiB\"", "0"));

    assert_names(&error, "alpha", "memory");
    assert!(
        matches!(error.problem(), Some(Problem::MemoryTooSmall { .. })),
        "{error}"
    );
}

#[test]
fn kernel_and_initrd_larger_than_partition_memory_are_rejected() {
    let root = Root::new();
    root.write("kernel", &linux_image(3 * Size::MIB));
    root.write("initrd", b"initrd");

    let error = rejected(
        &root,
        &ALPHA.replace("\"256MiB\"", "\"2MiB\"").replace(
            "kernel = \"kernel\"",
            "kernel = \"kernel\"\ninitrd = \"initrd\"",
        ),
    );

    assert_names(&error, "alpha", "memory");
    assert!(
        matches!(
            error.problem(),
            Some(Problem::ImagesDoNotFit {
                fit: fit::FitError::KernelOverlapsDtb { .. },
                ..
            })
        ),
        "{error}"
    );
}

#[test]
fn kernel_ending_exactly_at_the_dtb_area_is_accepted() {
    let root = Root::new();
    // 8 MiB of RAM: the DTB area starts at 6 MiB.
    root.write("kernel", &linux_image(6 * Size::MIB));

    let result = config(&ALPHA.replace("\"256MiB\"", "\"8MiB\"")).validate(root.path());

    assert!(result.is_ok(), "{result:?}");
}

#[test]
fn kernel_one_byte_into_the_dtb_area_is_rejected() {
    let root = Root::new();
    root.write("kernel", &linux_image(6 * Size::MIB + 1));

    let error = rejected(&root, &ALPHA.replace("\"256MiB\"", "\"8MiB\""));

    assert_names(&error, "alpha", "memory");
    assert!(error.to_string().contains("past the DTB area"), "{error}");
}

#[test]
fn initrd_that_does_not_fit_below_the_dtb_area_is_rejected() {
    let root = Root::new();
    root.write("kernel", &linux_image(4 * Size::MIB));
    // Would fit the old check (4 + 3 < 8 MiB) but not below the DTB area.
    root.write("initrd", &vec![0u8; 3 * Size::MIB as usize]);

    let error = rejected(
        &root,
        &ALPHA.replace("\"256MiB\"", "\"8MiB\"").replace(
            "kernel = \"kernel\"",
            "kernel = \"kernel\"\ninitrd = \"initrd\"",
        ),
    );

    assert_names(&error, "alpha", "memory");
    assert!(
        matches!(
            error.problem(),
            Some(Problem::ImagesDoNotFit {
                fit: fit::FitError::InitrdOverlapsKernel { .. },
                ..
            })
        ),
        "{error}"
    );
}

// ---- images ---------------------------------------------------------------

#[test]
fn missing_kernel_file_is_rejected() {
    let root = Root::with_images();

    let error = rejected(
        &root,
        &ALPHA.replace("\"kernel\"", "\"target/guest/linux/Image\""),
    );

    assert_names(&error, "alpha", "kernel");
    assert_eq!(
        error.to_string(),
        "partition \"alpha\": kernel: file target/guest/linux/Image not found"
    );
}

#[test]
fn missing_initrd_file_is_rejected() {
    let root = Root::with_images();

    let error = rejected(
        &root,
        &ALPHA.replace(
            "kernel = \"kernel\"",
            "kernel = \"kernel\"\ninitrd = \"nope.cpio\"",
        ),
    );

    assert_names(&error, "alpha", "initrd");
    assert!(
        matches!(error.problem(), Some(Problem::FileMissing { .. })),
        "{error}"
    );
}

#[test]
fn kernel_path_naming_a_directory_is_rejected() {
    let root = Root::with_images();
    std::fs::create_dir_all(root.path().join("dir")).expect("mkdir");

    let error = rejected(&root, &ALPHA.replace("\"kernel\"", "\"dir\""));

    assert_names(&error, "alpha", "kernel");
    assert!(
        matches!(error.problem(), Some(Problem::NotAFile { .. })),
        "{error}"
    );
}

#[test]
fn empty_kernel_file_is_rejected() {
    let root = Root::with_images();
    root.write("empty", b"");

    let error = rejected(&root, &ALPHA.replace("\"kernel\"", "\"empty\""));

    assert_names(&error, "alpha", "kernel");
    assert!(
        matches!(error.problem(), Some(Problem::FileEmpty { .. })),
        "{error}"
    );
}

#[test]
fn linux_format_without_image_magic_is_rejected() {
    let root = Root::with_images();
    let text = ALPHA.replace(
        "kernel = \"kernel\"",
        "kernel = \"raw\"\nkernel_format = \"linux\"",
    );

    let error = rejected(&root, &text);

    assert_names(&error, "alpha", "kernel_format");
    assert!(
        matches!(error.problem(), Some(Problem::NotLinuxImage { .. })),
        "{error}"
    );
}

#[test]
fn absolute_kernel_path_ignores_the_root() {
    let images = Root::with_images();
    let elsewhere = Root::new();
    let kernel = images.path().join("kernel");
    let text = ALPHA.replace("\"kernel\"", &format!("{:?}", kernel.display().to_string()));

    let result = config(&text).validate(elsewhere.path());

    assert!(result.is_ok(), "{result:?}");
}

// ---- bootargs -------------------------------------------------------------

#[test]
fn bootargs_too_long_for_linux_are_rejected() {
    let root = Root::with_images();
    let long = "x".repeat(LINUX_COMMAND_LINE_SIZE);

    let error = rejected(&root, &format!("{ALPHA}bootargs = \"{long}\"\n"));

    assert_names(&error, "alpha", "bootargs");
    assert!(
        matches!(
            error.problem(),
            Some(Problem::BootargsTooLong {
                len: 2048,
                max: 2047
            })
        ),
        "{error}"
    );
}

#[test]
fn bootargs_are_the_guests_own_whatever_they_say() {
    // The partition's identity is a DT property now; nothing is appended,
    // so any string Linux accepts is the guest's (even this one).
    let root = Root::with_images();
    let text = format!("{ALPHA}bootargs = \"pinfold.partition=beta\"\n");

    let result = config(&text).validate(root.path());

    assert!(result.is_ok(), "{result:?}");
}

#[test]
fn bootargs_of_exactly_the_linux_limit_are_accepted() {
    let root = Root::with_images();
    let long = "x".repeat(LINUX_COMMAND_LINE_SIZE - 1);

    let result = config(&format!("{ALPHA}bootargs = \"{long}\"\n")).validate(root.path());

    assert!(result.is_ok(), "{result:?}");
}

// ---- roles ----------------------------------------------------------------

#[test]
fn second_console_input_partition_is_rejected() {
    let root = Root::with_images();
    let alpha = format!("{ALPHA}console_input = true\n");
    let beta = alpha.replace("alpha", "beta").replace("[1]", "[2]");

    let error = rejected(&root, &format!("{alpha}{beta}"));

    assert_names(&error, "beta", "console_input");
    assert!(
        error
            .to_string()
            .contains("partition \"alpha\" already takes console input"),
        "{error}"
    );
}

#[test]
fn second_management_partition_is_rejected() {
    let root = Root::with_images();
    let alpha = format!("{ALPHA}management = true\n");
    let beta = alpha.replace("alpha", "beta").replace("[1]", "[2]");

    let error = rejected(&root, &format!("{alpha}{beta}"));

    assert_names(&error, "beta", "management");
    assert!(
        matches!(error.problem(), Some(Problem::ManagementTaken { other }) if other == "alpha"),
        "{error}"
    );
}

#[test]
fn second_partition_asking_for_the_pci_host_bridge_is_rejected() {
    let root = Root::with_images();
    let alpha = format!("{ALPHA}pci_host_bridge = true\n");
    let beta = alpha.replace("alpha", "beta").replace("[1]", "[2]");

    let error = rejected(&root, &format!("{alpha}{beta}"));

    assert_names(&error, "beta", "pci_host_bridge");
    assert!(
        matches!(error.problem(), Some(Problem::PciHostBridgeTaken { other }) if other == "alpha"),
        "{error}"
    );
}

#[test]
fn token_on_a_partition_that_is_not_management_is_rejected() {
    let root = Root::with_images();
    let alpha = format!("{ALPHA}token = \"0123456789abcdef0123\"\n");

    let error = rejected(&root, &alpha);

    assert_names(&error, "alpha", "token");
    assert!(
        matches!(error.problem(), Some(Problem::TokenWithoutManagement)),
        "{error}"
    );
}

#[test]
fn short_token_is_rejected() {
    let root = Root::with_images();
    let alpha = format!("{ALPHA}management = true\ntoken = \"short\"\n");

    let error = rejected(&root, &alpha);

    assert_names(&error, "alpha", "token");
    assert!(
        matches!(error.problem(), Some(Problem::BadToken)),
        "{error}"
    );
}

#[test]
fn token_and_token_sha256_together_are_rejected() {
    let root = Root::with_images();
    let alpha = format!(
        "{ALPHA}management = true\ntoken = \"0123456789abcdef0123\"\ntoken_sha256 = \"{}\"\n",
        "ab".repeat(32)
    );

    let error = rejected(&root, &alpha);

    assert_names(&error, "alpha", "token_sha256");
    assert!(
        matches!(error.problem(), Some(Problem::TokenTwice)),
        "{error}"
    );
}

#[test]
fn token_sha256_that_is_not_64_hex_digits_is_rejected() {
    let root = Root::with_images();
    for bad in ["ab".repeat(31), "zz".repeat(32), "ab".repeat(33)] {
        let alpha = format!("{ALPHA}management = true\ntoken_sha256 = \"{bad}\"\n");

        let error = rejected(&root, &alpha);

        assert_names(&error, "alpha", "token_sha256");
        assert!(
            matches!(error.problem(), Some(Problem::BadTokenDigest)),
            "{bad}: {error}"
        );
    }
}

#[test]
fn malformed_token_sha256_on_a_partition_that_is_not_management_is_rejected_as_misplaced() {
    let root = Root::with_images();
    let alpha = format!("{ALPHA}token_sha256 = \"zz\"\n");

    let error = rejected(&root, &alpha);

    assert_names(&error, "alpha", "token_sha256");
    assert!(
        matches!(error.problem(), Some(Problem::TokenWithoutManagement)),
        "{error}"
    );
}

#[test]
fn a_token_is_checked_after_the_cpus_and_before_the_pci_host_bridge() {
    let root = Root::with_images();
    let mgmt = "[[partition]]\nname = \"mgmt\"\ncpus = [0]\nmemory = \"64MiB\"\nkernel = \"kernel\"\npci_host_bridge = true\n";
    let bad_token = "management = true\npci_host_bridge = true\ntoken = \"short\"\n";

    let cpus_first = rejected(
        &root,
        &format!("{mgmt}{}{bad_token}", ALPHA.replace("[1]", "[9]")),
    );
    let token_next = rejected(&root, &format!("{mgmt}{ALPHA}{bad_token}"));

    assert_names(&cpus_first, "alpha", "cpus");
    assert_names(&token_next, "alpha", "token");
}

#[test]
fn the_plan_blob_carries_only_the_tokens_digest() {
    let root = default_images();
    let mut config = load(&default_config_path()).expect("default.toml parses");
    config.partitions[0].token = Some("0123456789abcdef0123".into());

    let payload = config.build_payload(root.path()).expect("payload");

    let plan = Plan::decode(&payload).expect("decodes");
    assert_eq!(
        plan.partitions[0].token_sha256,
        Some(crate::bundle::token_digest(b"0123456789abcdef0123"))
    );
    let needle = b"0123456789abcdef0123";
    assert!(!payload.windows(needle.len()).any(|w| w == needle));
}

#[test]
fn token_sha256_goes_into_the_plan_as_given() {
    let root = default_images();
    let mut config = load(&default_config_path()).expect("default.toml parses");
    config.partitions[0].token_sha256 = Some("0f".repeat(32));

    let payload = config.build_payload(root.path()).expect("payload");

    let plan = Plan::decode(&payload).expect("decodes");
    assert_eq!(plan.partitions[0].token_sha256, Some([0x0f; 32]));
}

// ---- devices --------------------------------------------------------------

/// `partition` (CPU `cpu`) owning one device.
fn with_device(partition: &str, cpu: u32, device: &str, body: &str) -> String {
    format!(
        "{}\n[[partition.device]]\nname = \"{device}\"\n{body}\n",
        ALPHA
            .replace("alpha", partition)
            .replace("[1]", &format!("[{cpu}]"))
    )
}

#[test]
fn spi_in_two_partitions_is_rejected() {
    let alpha = with_device("alpha", 1, "uart1", "spis = [40]");
    let beta = with_device("beta", 2, "uart2", "spis = [41, 40]");
    let root = Root::with_images();

    let error = rejected(&root, &format!("{alpha}{beta}"));

    assert_names(&error, "beta", "device \"uart2\": spis");
    assert!(
        error
            .to_string()
            .ends_with("SPI 40 is also used by partition \"alpha\""),
        "{error}"
    );
}

#[test]
fn spi_listed_twice_by_one_partition_is_rejected() {
    let root = Root::with_images();

    let error = rejected(&root, &with_device("alpha", 1, "uart1", "spis = [40, 40]"));

    assert_names(&error, "alpha", "device \"uart1\": spis");
    assert!(
        matches!(error.problem(), Some(Problem::SpiRepeated { spi: 40 })),
        "{error}"
    );
}

#[test]
fn intid_below_the_spi_range_is_rejected() {
    let root = Root::with_images();

    let error = rejected(&root, &with_device("alpha", 1, "timer", "spis = [27]"));

    assert_names(&error, "alpha", "device \"timer\": spis");
    assert!(
        matches!(error.problem(), Some(Problem::SpiOutOfRange { spi: 27 })),
        "{error}"
    );
}

#[test]
fn intid_above_the_spi_range_is_rejected() {
    let root = Root::with_images();

    let error = rejected(&root, &with_device("alpha", 1, "dev", "spis = [1020]"));

    assert_names(&error, "alpha", "device \"dev\": spis");
    assert!(
        matches!(error.problem(), Some(Problem::SpiOutOfRange { spi: 1020 })),
        "{error}"
    );
}

#[test]
fn the_emulated_uart_spi_is_rejected() {
    let root = Root::with_images();

    let error = rejected(&root, &with_device("alpha", 1, "uart", "spis = [33]"));

    assert_names(&error, "alpha", "device \"uart\": spis");
    assert!(
        matches!(error.problem(), Some(Problem::SpiReserved { spi: 33 })),
        "{error}"
    );
}

#[test]
fn overlapping_device_mmio_is_rejected() {
    let alpha = with_device(
        "alpha",
        1,
        "rtc",
        "mmio = [{ base = 0x09010000, size = 0x2000 }]",
    );
    let beta = with_device(
        "beta",
        2,
        "gpio",
        "mmio = [{ base = 0x09011000, size = 0x1000 }]",
    );
    let root = Root::with_images();

    let error = rejected(&root, &format!("{alpha}{beta}"));

    assert_names(&error, "beta", "device \"gpio\": mmio");
    assert!(
        matches!(error.problem(), Some(Problem::MmioOverlap { other, other_device, .. }) if other == "alpha" && other_device == "rtc"),
        "{error}"
    );
}

#[test]
fn adjacent_device_mmio_is_accepted() {
    let alpha = with_device(
        "alpha",
        1,
        "rtc",
        "mmio = [{ base = 0x09010000, size = 0x1000 }]",
    );
    let beta = with_device(
        "beta",
        2,
        "gpio",
        "mmio = [{ base = 0x09011000, size = \"4K\" }]",
    );
    let root = Root::with_images();

    let result = config(&format!("{alpha}{beta}")).validate(root.path());

    assert!(result.is_ok(), "{result:?}");
}

#[test]
fn device_mmio_over_the_guest_gic_is_rejected() {
    let root = Root::with_images();

    let error = rejected(
        &root,
        &with_device(
            "alpha",
            1,
            "gic",
            "mmio = [{ base = 0x08000000, size = 0x1000 }]",
        ),
    );

    assert_names(&error, "alpha", "device \"gic\": mmio");
    assert!(
        matches!(
            error.problem(),
            Some(Problem::MmioGuestMap {
                region: "GIC distributor",
                ..
            })
        ),
        "{error}"
    );
}

#[test]
fn device_mmio_over_guest_ram_is_rejected() {
    let root = Root::with_images();

    let error = rejected(
        &root,
        &with_device(
            "alpha",
            1,
            "mem",
            "mmio = [{ base = 0x4fff0000, size = 0x10000 }]",
        ),
    );

    assert_names(&error, "alpha", "device \"mem\": mmio");
    assert!(
        matches!(
            error.problem(),
            Some(Problem::MmioGuestMap { region: "RAM", .. })
        ),
        "{error}"
    );
}

#[test]
fn unaligned_device_mmio_is_rejected() {
    let root = Root::with_images();

    let error = rejected(
        &root,
        &with_device(
            "alpha",
            1,
            "rtc",
            "mmio = [{ base = 0x09010800, size = 0x1000 }]",
        ),
    );

    assert_names(&error, "alpha", "device \"rtc\": mmio");
    assert!(
        matches!(error.problem(), Some(Problem::MmioUnaligned { .. })),
        "{error}"
    );
}

#[test]
fn empty_device_mmio_is_rejected() {
    let root = Root::with_images();

    let error = rejected(
        &root,
        &with_device(
            "alpha",
            1,
            "rtc",
            "mmio = [{ base = 0x09010000, size = 0 }]",
        ),
    );

    assert_names(&error, "alpha", "device \"rtc\": mmio");
    assert!(
        matches!(error.problem(), Some(Problem::MmioEmpty { .. })),
        "{error}"
    );
}

#[test]
fn device_name_with_a_space_is_rejected() {
    let root = Root::with_images();

    let error = rejected(&root, &with_device("alpha", 1, "my uart", "spis = [40]"));

    assert_names(&error, "alpha", "device[0]: name");
    assert!(
        matches!(
            error.problem(),
            Some(Problem::NameCharacter { ch: ' ', .. })
        ),
        "{error}"
    );
}

// ---- the default config ---------------------------------------------------

fn default_config_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu-virt/default.toml")
}

/// A root holding fake versions of the images the default config names.
fn default_images() -> Root {
    let root = Root::new();
    root.write("target/guest/linux/Image", &linux_image(32 * Size::MIB));
    root.write("target/guest/initramfs-net.cpio.gz", b"fake initramfs");
    root.write("target/pinfold/manager.bin", &linux_image(2 * Size::MIB));
    root
}

#[test]
fn default_config_validates_against_fake_images() {
    let root = default_images();
    let config = load(&default_config_path()).expect("default.toml parses");

    let result = config.validate(root.path());

    assert!(result.is_ok(), "{result:?}");
}

#[test]
fn default_config_gives_cpu_0_and_a_nic_to_each_partition_and_the_console_to_beta() {
    let config = load(&default_config_path()).expect("default.toml parses");

    let cpus: Vec<u32> = config
        .partitions
        .iter()
        .flat_map(|p| p.cpus.clone())
        .collect();
    let input: Vec<&str> = config
        .partitions
        .iter()
        .filter(|p| p.console_input)
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(cpus, [0, 1, 2, 3]);
    assert_eq!(input, ["beta"]);
    let mgmt = &config.partitions[0];
    assert_eq!(
        (mgmt.name.as_str(), mgmt.cpus.as_slice()),
        ("mgmt", &[0][..])
    );
    assert!(mgmt.management);
    // Per function: no partition has the whole bridge, each its own NIC.
    assert!(config.partitions.iter().all(|p| !p.pci_host_bridge));
    assert!(config.partitions[1..].iter().all(|p| !p.management));
    let pci: Vec<Vec<String>> = config
        .partitions
        .iter()
        .map(|p| p.pci.iter().map(ToString::to_string).collect())
        .collect();
    assert_eq!(pci, [["0000:00:01.0"], ["0000:00:02.0"], ["0000:00:03.0"]]);
}

// ---- payload --------------------------------------------------------------

#[test]
fn payload_plan_round_trips_through_decode() {
    let root = default_images();
    let config = load(&default_config_path()).expect("default.toml parses");

    let payload = config.build_payload(root.path()).expect("payload");

    let plan = Plan::decode(&payload).expect("decodes");
    let names: Vec<&str> = plan.partitions.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["mgmt", "alpha", "beta"]);
    assert_eq!(plan.partitions[2].cpus, [2, 3]);
    assert_eq!(plan.partitions[2].ram_size, 512 * Size::MIB);
    assert!(plan.partitions[2].console.input);
    assert!(plan.partitions[0].management && !plan.partitions[0].pci_host_bridge);
    assert!(plan.partitions[1].autostart);
}

#[test]
fn payload_stores_a_shared_kernel_once() {
    let root = default_images();
    let config = load(&default_config_path()).expect("default.toml parses");

    let payload = config.build_payload(root.path()).expect("payload");

    let plan = Plan::decode(&payload).expect("decodes");
    // The manager image, and one copy of the kernel and initramfs that
    // alpha and beta share.
    assert_eq!(plan.images.len(), 3);
    assert_eq!(plan.partitions[1].kernel, plan.partitions[2].kernel);
    assert_eq!(plan.partitions[1].initrd, plan.partitions[2].initrd);
    assert_ne!(plan.partitions[0].kernel, plan.partitions[1].kernel);
}

#[test]
fn payload_dedups_two_spellings_of_one_file() {
    let root = Root::with_images();
    let beta = ALPHA
        .replace("alpha", "beta")
        .replace("[1]", "[2]")
        .replace("\"kernel\"", "\"./sub/../kernel\"");
    std::fs::create_dir_all(root.path().join("sub")).expect("mkdir");

    let payload = config(&format!("{ALPHA}{beta}"))
        .build_payload(root.path())
        .expect("payload");

    let plan = Plan::decode(&payload).expect("decodes");
    assert_eq!(plan.images.len(), 1);
}

#[test]
fn payload_images_are_aligned_and_hold_the_file_bytes() {
    let root = Root::with_images();
    let text = ALPHA.replace(
        "kernel = \"kernel\"",
        "kernel = \"kernel\"\ninitrd = \"initrd\"",
    );

    let payload = config(&text).build_payload(root.path()).expect("payload");

    let plan = Plan::decode(&payload).expect("decodes");
    let kernel = plan.partitions[0].kernel.image;
    let initrd = plan.partitions[0].initrd.expect("initrd");
    assert!(plan
        .images
        .iter()
        .all(|image| image.offset % IMAGE_ALIGN == 0));
    assert_eq!(
        plan.image(&payload, kernel),
        Some(&linux_image(2 * Size::MIB)[..])
    );
    assert_eq!(plan.image(&payload, initrd), Some(&b"fake initramfs"[..]));
}

#[test]
fn kernel_format_auto_detects_linux_and_raw() {
    let root = Root::with_images();
    let beta = ALPHA
        .replace("alpha", "beta")
        .replace("[1]", "[2]")
        .replace("\"kernel\"", "\"raw\"");

    let payload = config(&format!("{ALPHA}{beta}"))
        .build_payload(root.path())
        .expect("payload");

    let plan = Plan::decode(&payload).expect("decodes");
    assert_eq!(plan.partitions[0].kernel.format, KernelFormat::LinuxImage);
    assert_eq!(plan.partitions[1].kernel.format, KernelFormat::Raw);
}

#[test]
fn kernel_format_raw_overrides_the_magic() {
    let root = Root::with_images();
    let text = format!("{ALPHA}kernel_format = \"raw\"\n");

    let payload = config(&text).build_payload(root.path()).expect("payload");

    let plan = Plan::decode(&payload).expect("decodes");
    assert_eq!(plan.partitions[0].kernel.format, KernelFormat::Raw);
}

#[test]
fn payload_carries_devices_and_roles() {
    let root = Root::with_images();
    let text = format!(
        "{ALPHA}management = true\nautostart = false\npmu = false\n\
         [[partition.device]]\nname = \"rtc\"\n\
         mmio = [{{ base = 0x09010000, size = \"4KiB\" }}]\nspis = [34]\n\
         compatible = \"arm,pl031\"\nhost_node = \"/pl031@9010000\"\n"
    );

    let payload = config(&text).build_payload(root.path()).expect("payload");

    let alpha = &Plan::decode(&payload).expect("decodes").partitions[0];
    assert!(alpha.management);
    assert!(!alpha.autostart);
    assert!(!alpha.pmu);
    assert_eq!(
        alpha.devices,
        [DevicePlan {
            name: "rtc".into(),
            mmio: vec![MmioRange {
                base: 0x0901_0000,
                size: 0x1000
            }],
            spis: vec![34],
            compatible: Some("arm,pl031".into()),
            host_node: Some("/pl031@9010000".into()),
        }]
    );
}

#[test]
fn device_compatible_with_a_nul_is_rejected() {
    let root = Root::with_images();
    let text = format!(
        "{ALPHA}[[partition.device]]\nname = \"rtc\"\ncompatible = \"arm,pl031\\u0000x\"\n"
    );

    let error = rejected(&root, &text);

    assert_names(&error, "alpha", "device \"rtc\": compatible");
}

#[test]
fn device_host_node_that_is_not_an_absolute_path_is_rejected() {
    let root = Root::with_images();
    let text = format!("{ALPHA}[[partition.device]]\nname = \"rtc\"\nhost_node = \"pl031\"\n");

    let error = rejected(&root, &text);

    assert_names(&error, "alpha", "device \"rtc\": host_node");
    assert!(error.to_string().contains("absolute"), "{error}");
}

// ---- lifecycle ------------------------------------------------------------

#[test]
fn lifecycle_fields_reach_the_plan() {
    let root = Root::with_images();
    let toml = format!(
        "{ALPHA}restart = \"on-crash\"\nrestart_limit = 3\nwatchdog_s = 5\nshutdown_timeout_s = 20\n"
    );

    let payload = config(&toml).build_payload(root.path()).expect("payload");

    let plan = Plan::decode(&payload).expect("decodes");
    assert_eq!(
        plan.partitions[0].lifecycle,
        LifecyclePlan {
            restart: RestartMode::OnCrash,
            restart_limit: 3,
            watchdog_s: 5,
            shutdown_timeout_s: 20,
        }
    );
}

#[test]
fn without_lifecycle_fields_the_defaults_apply() {
    let root = Root::with_images();

    let payload = config(ALPHA).build_payload(root.path()).expect("payload");

    let plan = Plan::decode(&payload).expect("decodes");
    assert_eq!(plan.partitions[0].lifecycle, LifecyclePlan::default());
}

#[test]
fn an_unknown_restart_mode_is_a_syntax_error_naming_the_key() {
    let error = parse(&format!("{BOARD}{ALPHA}restart = \"sometimes\"\n")).unwrap_err();

    let message = error.to_string();
    assert!(message.contains("restart"), "{message}");
    assert!(message.contains("on-crash"), "{message}");
}

#[test]
fn lifecycle_rules_name_their_field() {
    let root = Root::with_images();
    let mgmt = "[[partition]]\nname = \"mgmt\"\ncpus = [0]\nmemory = \"64MiB\"\nkernel = \"raw\"\nmanagement = true\n";
    let cases = [
        (format!("{mgmt}restart = \"never\"\n"), "mgmt", "restart"),
        (
            format!("{mgmt}restart_limit = 2\n"),
            "mgmt",
            "restart_limit",
        ),
        (
            format!("{ALPHA}restart_limit = 2\n"),
            "alpha",
            "restart_limit",
        ),
        (format!("{ALPHA}watchdog_s = 3601\n"), "alpha", "watchdog_s"),
        (
            format!("{ALPHA}shutdown_timeout_s = 0\n"),
            "alpha",
            "shutdown_timeout_s",
        ),
    ];
    for (toml, partition, field) in cases {
        let error = rejected(&root, &toml);
        assert_names(&error, partition, field);
    }
    assert_eq!(
        rejected(&root, &format!("{ALPHA}restart_limit = 2\n")).to_string(),
        "partition \"alpha\": restart_limit: has no effect with restart = \"never\"; set restart = \"on-crash\" or \"always\""
    );
}

#[test]
fn the_emulated_watchdog_spi_and_frames_are_rejected() {
    let root = Root::with_images();

    let spi = rejected(&root, &with_device("alpha", 1, "w", "spis = [92]"));
    let mmio = rejected(
        &root,
        &with_device(
            "alpha",
            1,
            "w",
            "mmio = [{ base = 0x090c0000, size = 0x1000 }]",
        ),
    );

    assert!(
        matches!(spi.problem(), Some(Problem::SpiReserved { spi: 92 })),
        "{spi}"
    );
    assert!(
        mmio.to_string().contains("SBSA watchdog refresh frame"),
        "{mmio}"
    );
}

// ---- pci ------------------------------------------------------------------

#[test]
fn pci_functions_parse_as_segment_bus_device_function() {
    let config = config(&format!(
        "{ALPHA}pci = [\"0000:00:02.0\", \"0000:1f:1e.7\"]\n"
    ));
    let pci = &config.partitions[0].pci;
    assert_eq!(
        pci,
        &[
            PciAddress {
                segment: 0,
                bus: 0,
                device: 2,
                function: 0
            },
            PciAddress {
                segment: 0,
                bus: 0x1f,
                device: 0x1e,
                function: 7
            }
        ]
    );
    assert_eq!(pci[1].to_string(), "0000:1f:1e.7");
}

#[test]
fn a_malformed_pci_function_is_a_syntax_error_naming_the_entry() {
    for bad in [
        "00:02.0",
        "0000:00:20.0",
        "0000:00:02.8",
        "0000:0:02.0",
        "0000:00:02",
        "x",
    ] {
        let error = parse(&format!(
            "{BOARD}{ALPHA}pci = [\"0000:00:01.0\", \"{bad}\"]\n"
        ))
        .expect_err(bad);
        let text = error.to_string();
        assert!(text.contains("pci[1]") && text.contains(bad), "{text}");
    }
}

#[test]
fn a_pci_function_two_partitions_name_is_rejected_naming_the_entry() {
    let root = Root::with_images();
    let alpha = format!("{ALPHA}pci = [\"0000:00:02.0\"]\n");
    let beta = format!(
        "{}pci = [\"0000:00:03.0\", \"0000:00:02.0\"]\n",
        ALPHA.replace("alpha", "beta").replace("[1]", "[2]")
    );

    let error = rejected(&root, &format!("{alpha}{beta}"));

    assert_names(&error, "beta", "pci[1]");
    assert!(
        error
            .to_string()
            .ends_with("0000:00:02.0 is already assigned to partition \"alpha\""),
        "{error}"
    );
}

// ---- gic ------------------------------------------------------------------

#[test]
fn gic_defaults_to_auto_and_travels_in_the_payload() {
    let root = Root::with_images();
    assert_eq!(config(ALPHA).partitions[0].gic, GicSetting::Auto);

    let text = format!("{ALPHA}gic = \"v5\"\n");
    let payload = config(&text).build_payload(root.path()).expect("payload");

    let alpha = &Plan::decode(&payload).expect("decodes").partitions[0];
    assert_eq!(alpha.gic, GicSetting::V5);
}

#[test]
fn gic_value_outside_auto_v3_v5_is_a_syntax_error_naming_the_field() {
    let text = format!("{BOARD}{ALPHA}gic = \"v4\"\n");

    let error = parse(&text).expect_err("v4 is no interface");

    let message = error.to_string();
    assert!(matches!(error, ConfigError::Syntax { .. }), "{message}");
    assert!(message.contains("gic"), "{message}");
    assert!(message.contains("v4"), "{message}");
}

#[test]
fn gic_setting_names_parse_back() {
    for g in GicSetting::ALL {
        assert_eq!(GicSetting::parse(g.name()), Some(g));
    }
    assert_eq!(GicSetting::parse("gicv3"), None);
}
