//! Host tests of `rules::check_partition` through its `no_std` API alone:
//! each rule, `Rejection::conflict`, and candidates checked against
//! partitions that already exist (the run-time case).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use crate::plan::{ConsolePlan, DevicePlan, KernelFormat, KernelPlan, MmioRange, PartitionPlan};
use crate::rules::*;

const HOST: HostLimits = HostLimits {
    board: "qemu-virt",
    cpus: 4,
};
const MIB: u64 = Size::MIB;

/// A valid partition on `cpus` with 64 MiB and nothing else.
fn partition(name: &str, cpus: &[u32]) -> PartitionPlan {
    PartitionPlan {
        name: name.into(),
        cpus: cpus.to_vec(),
        ram_size: 64 * MIB,
        kernel: KernelPlan {
            image: 0,
            format: KernelFormat::LinuxImage,
        },
        initrd: None,
        bootargs: "console=ttyAMA0".into(),
        console: ConsolePlan { input: false },
        devices: Vec::new(),
        management: false,
        pci_host_bridge: false,
        pci: Vec::new(),
        token_sha256: None,
        autostart: true,
        pmu: true,
        lifecycle: Default::default(),
        config_store: None,
        api_tls: true,
        gic: crate::plan::GicSetting::Auto,
    }
}

fn device(name: &str, mmio: &[(u64, u64)], spis: &[u32]) -> DevicePlan {
    DevicePlan {
        name: name.into(),
        mmio: mmio
            .iter()
            .map(|&(base, size)| MmioRange { base, size })
            .collect(),
        spis: spis.to_vec(),
        compatible: None,
        host_node: None,
    }
}

fn with_devices(mut plan: PartitionPlan, devices: Vec<DevicePlan>) -> PartitionPlan {
    plan.devices = devices;
    plan
}

/// Checks `candidate` alone.
fn alone(candidate: &PartitionPlan) -> Result<(), Rejection> {
    check_partition(candidate, &[], &HOST)
}

/// The rejection of `candidate` alone, with its field and message.
fn rejected(candidate: &PartitionPlan) -> Rejection {
    alone(candidate).expect_err("the candidate must be rejected")
}

fn rejected_beside(candidate: &PartitionPlan, others: &[&PartitionPlan]) -> Rejection {
    check_partition(candidate, others, &HOST).expect_err("the candidate must be rejected")
}

/// Asserts the rejection names `field` and prints `message` after it.
fn assert_rejects(rejection: &Rejection, field: &str, message: &str) {
    assert_eq!(rejection.field, field, "{rejection}");
    assert_eq!(rejection.problem.to_string(), message, "{rejection}");
}

// ---- accepted ------------------------------------------------------------

#[test]
fn a_valid_partition_is_accepted_alone_and_beside_others() {
    let mgmt = PartitionPlan {
        management: true,
        pci_host_bridge: true,
        pci: Vec::new(),
        token_sha256: Some([7; 32]),
        ..partition("mgmt", &[0])
    };
    let alpha = with_devices(
        partition("alpha", &[1]),
        vec![device("rtc", &[(0x0901_0000, 0x1000)], &[34])],
    );
    let beta = PartitionPlan {
        console: ConsolePlan { input: true },
        ..with_devices(
            partition("beta", &[2, 3]),
            vec![device("gpio", &[(0x0901_1000, 0x1000)], &[35])],
        )
    };

    assert_eq!(alone(&mgmt), Ok(()));
    assert_eq!(check_partition(&beta, &[&mgmt, &alpha], &HOST), Ok(()));
}

#[test]
fn the_message_is_partition_field_problem() {
    let rejection = rejected(&partition("alpha", &[]));

    assert_eq!(
        rejection.to_string(),
        "partition \"alpha\": cpus: the list is empty; a partition needs at least one CPU"
    );
    assert!(!rejection.conflict());
}

#[test]
fn the_first_rule_broken_is_reported_in_order() {
    // Bad name, no CPU and 1 MiB: the name is checked first.
    let candidate = PartitionPlan {
        ram_size: MIB,
        ..partition("Alpha", &[])
    };

    assert_eq!(rejected(&candidate).field, "name");
}

// ---- name ----------------------------------------------------------------

#[test]
fn an_empty_name_is_rejected() {
    assert_rejects(&rejected(&partition("", &[1])), "name", "the name is empty");
}

#[test]
fn a_name_longer_than_name_max_is_rejected() {
    let rejection = rejected(&partition("abcdefghijklmnop", &[1]));

    assert_rejects(
        &rejection,
        "name",
        "the name has 16 bytes, at most 15 are allowed",
    );
    assert!(alone(&partition("abcdefghijklmno", &[1])).is_ok());
}

#[test]
fn a_name_outside_its_alphabet_is_rejected() {
    assert_rejects(
        &rejected(&partition("al.pha", &[1])),
        "name",
        "the name contains '.'; only [a-z0-9_-] are allowed",
    );
}

#[test]
fn a_name_an_existing_partition_has_is_a_conflict() {
    let alpha = partition("alpha", &[1]);

    let rejection = rejected_beside(&partition("alpha", &[2]), &[&alpha]);

    assert_rejects(&rejection, "name", "the name is used twice");
    assert!(rejection.conflict());
}

// ---- cpus ----------------------------------------------------------------

#[test]
fn a_cpu_the_host_lacks_is_rejected() {
    let rejection = rejected(&partition("alpha", &[1, 4]));

    assert_rejects(
        &rejection,
        "cpus",
        "CPU 4 does not exist (board qemu-virt has 4 CPUs)",
    );
    assert!(!rejection.conflict());
}

#[test]
fn a_cpu_listed_twice_is_rejected() {
    assert_rejects(
        &rejected(&partition("alpha", &[1, 2, 1])),
        "cpus",
        "CPU 1 is listed twice",
    );
}

#[test]
fn more_vcpus_than_the_redistributor_region_holds_are_rejected() {
    let big = HostLimits {
        board: "big",
        cpus: 200,
    };
    let cpus: Vec<u32> = (0..124).collect();

    let rejection = check_partition(&partition("alpha", &cpus), &[], &big).unwrap_err();

    assert_rejects(
        &rejection,
        "cpus",
        "124 vCPUs, but the guest redistributor region holds at most 123",
    );
    assert!(check_partition(&partition("alpha", &cpus[..123]), &[], &big).is_ok());
}

#[test]
fn a_cpu_an_existing_partition_runs_on_is_a_conflict() {
    let beta = partition("beta", &[2, 3]);

    let rejection = rejected_beside(&partition("gamma", &[1, 3]), &[&beta]);

    assert_rejects(
        &rejection,
        "cpus",
        "CPU 3 is also used by partition \"beta\"",
    );
    assert!(rejection.conflict());
}

// ---- memory --------------------------------------------------------------

#[test]
fn ram_below_2mib_is_rejected() {
    let candidate = PartitionPlan {
        ram_size: MIB,
        ..partition("alpha", &[1])
    };

    assert_rejects(
        &rejected(&candidate),
        "memory",
        "1MiB is less than the minimum of 2MiB",
    );
}

#[test]
fn ram_not_a_multiple_of_2mib_is_rejected() {
    let candidate = PartitionPlan {
        ram_size: 3 * MIB,
        ..partition("alpha", &[1])
    };

    assert_rejects(
        &rejected(&candidate),
        "memory",
        "3MiB is not a multiple of 2MiB",
    );
}

#[test]
fn sizes_show_in_their_largest_exact_unit() {
    let shown: Vec<String> = [2 * Size::GIB, 3 * MIB, 4097, 0]
        .iter()
        .map(|&bytes| Size(bytes).to_string())
        .collect();

    assert_eq!(shown, ["2GiB", "3MiB", "4097 bytes", "0 bytes"]);
}

// ---- bootargs ------------------------------------------------------------

#[test]
fn bootargs_longer_than_linux_takes_are_rejected() {
    let mut candidate = partition("alpha", &[1]);
    candidate.bootargs = "x".repeat(LINUX_COMMAND_LINE_SIZE - 1);
    assert!(alone(&candidate).is_ok());

    candidate.bootargs.push('x');

    assert_rejects(
        &rejected(&candidate),
        "bootargs",
        "2048 bytes, Linux accepts at most 2047",
    );
}

#[test]
fn bootargs_with_a_nul_are_rejected() {
    let mut candidate = partition("alpha", &[1]);
    candidate.bootargs = "quiet\0root=/dev/vda".into();

    assert_rejects(&rejected(&candidate), "bootargs", "contains a NUL byte");
}

// ---- roles ---------------------------------------------------------------

#[test]
fn console_input_an_existing_partition_takes_is_a_conflict() {
    let beta = PartitionPlan {
        console: ConsolePlan { input: true },
        ..partition("beta", &[2])
    };
    let candidate = PartitionPlan {
        console: ConsolePlan { input: true },
        ..partition("gamma", &[3])
    };

    let rejection = rejected_beside(&candidate, &[&beta]);

    assert_rejects(
        &rejection,
        "console_input",
        "partition \"beta\" already takes console input; at most one partition may",
    );
    assert!(rejection.conflict());
}

#[test]
fn a_second_management_partition_is_a_conflict() {
    let mgmt = PartitionPlan {
        management: true,
        ..partition("mgmt", &[0])
    };
    let candidate = PartitionPlan {
        management: true,
        ..partition("gamma", &[3])
    };

    let rejection = rejected_beside(&candidate, &[&mgmt]);

    assert_rejects(
        &rejection,
        "management",
        "partition \"mgmt\" is already the management partition; at most one may be",
    );
    assert!(rejection.conflict());
}

#[test]
fn the_pci_host_bridge_an_existing_partition_has_is_a_conflict() {
    let mgmt = PartitionPlan {
        pci_host_bridge: true,
        pci: Vec::new(),
        ..partition("mgmt", &[0])
    };
    let candidate = PartitionPlan {
        pci_host_bridge: true,
        pci: Vec::new(),
        ..partition("gamma", &[3])
    };

    let rejection = rejected_beside(&candidate, &[&mgmt]);

    assert_rejects(
        &rejection,
        "pci_host_bridge",
        "the PCIe host bridge is already passed to partition \"mgmt\"",
    );
    assert!(rejection.conflict());
}

#[test]
fn a_token_without_management_is_rejected() {
    let candidate = PartitionPlan {
        token_sha256: Some([1; 32]),
        ..partition("alpha", &[1])
    };

    let rejection = rejected(&candidate);

    assert_rejects(
        &rejection,
        "token_sha256",
        "only the management partition has a token",
    );
    assert!(!rejection.conflict());
}

// ---- devices: names and DT fields ---------------------------------------

#[test]
fn a_device_without_a_name_is_rejected() {
    let candidate = with_devices(partition("alpha", &[1]), vec![device("", &[], &[])]);

    assert_rejects(
        &rejected(&candidate),
        "device[0]: name",
        "the name is empty",
    );
}

#[test]
fn a_device_name_outside_the_dt_alphabet_is_rejected() {
    let candidate = with_devices(
        partition("alpha", &[1]),
        vec![device("rtc", &[], &[]), device("my rtc", &[], &[])],
    );

    assert_rejects(
        &rejected(&candidate),
        "device[1]: name",
        "the name contains ' '; only [A-Za-z0-9,._+@-] are allowed",
    );
}

#[test]
fn two_devices_of_one_partition_with_one_name_are_not_a_conflict() {
    let candidate = with_devices(
        partition("alpha", &[1]),
        vec![device("rtc", &[], &[]), device("rtc", &[], &[])],
    );

    let rejection = rejected(&candidate);

    assert_rejects(&rejection, "device[1]: name", "the name is used twice");
    assert!(!rejection.conflict());
}

#[test]
fn a_device_name_another_partition_uses_is_fine() {
    let alpha = with_devices(partition("alpha", &[1]), vec![device("rtc", &[], &[])]);
    let candidate = with_devices(partition("beta", &[2]), vec![device("rtc", &[], &[])]);

    assert_eq!(check_partition(&candidate, &[&alpha], &HOST), Ok(()));
}

#[test]
fn a_bad_compatible_is_rejected() {
    for bad in ["", "arm,pl031\0x"] {
        let mut rtc = device("rtc", &[], &[]);
        rtc.compatible = Some(bad.into());
        let candidate = with_devices(partition("alpha", &[1]), vec![rtc]);

        assert_rejects(
            &rejected(&candidate),
            "device \"rtc\": compatible",
            "must be a non-empty string without NUL bytes",
        );
    }
}

#[test]
fn a_host_node_that_is_not_an_absolute_path_is_rejected() {
    let mut rtc = device("rtc", &[], &[]);
    rtc.host_node = Some("pl031@9010000".into());
    let candidate = with_devices(partition("alpha", &[1]), vec![rtc]);

    assert_rejects(
        &rejected(&candidate),
        "device \"rtc\": host_node",
        "\"pl031@9010000\" is not an absolute device tree path (/node/child, no NUL)",
    );
}

// ---- devices: SPIs --------------------------------------------------------

#[test]
fn intids_outside_the_spi_range_are_rejected() {
    for spi in [SPI_FIRST - 1, SPI_LAST + 1] {
        let candidate = with_devices(partition("alpha", &[1]), vec![device("dev", &[], &[spi])]);

        assert_rejects(
            &rejected(&candidate),
            "device \"dev\": spis",
            &alloc::format!("INTID {spi} is not an SPI (SPIs are 32..=1019)"),
        );
    }
}

#[test]
fn the_emulated_uart_spi_is_rejected() {
    let candidate = with_devices(partition("alpha", &[1]), vec![device("uart", &[], &[33])]);

    assert_rejects(
        &rejected(&candidate),
        "device \"uart\": spis",
        "SPI 33 is an emulated device's interrupt in every partition (PL011 33, SBSA watchdog 92, PL061 GPIO 93)",
    );
}

#[test]
fn the_watchdog_and_gpio_spis_and_frames_are_rejected() {
    for spi in [92, 93] {
        let candidate = with_devices(partition("alpha", &[1]), vec![device("d", &[], &[spi])]);
        let rejection = rejected(&candidate);
        assert_eq!(rejection.field, "device \"d\": spis", "{rejection}");
        assert_eq!(rejection.problem, Problem::SpiReserved { spi });
    }
    let regions = [
        (pinfold_vboard::GUEST_GPIO_BASE, "PL061 GPIO"),
        (
            pinfold_vboard::GUEST_WDOG_CONTROL_BASE,
            "SBSA watchdog control frame",
        ),
        (
            pinfold_vboard::GUEST_WDOG_REFRESH_BASE,
            "SBSA watchdog refresh frame",
        ),
    ];
    for (base, name) in regions {
        let candidate = with_devices(
            partition("alpha", &[1]),
            vec![device("d", &[(base, 0x1000)], &[])],
        );
        let rejection = rejected(&candidate);
        assert_eq!(rejection.field, "device \"d\": mmio", "{rejection}");
        assert!(
            matches!(rejection.problem, Problem::MmioGuestMap { region, .. } if region == name),
            "{rejection}"
        );
    }
}

#[test]
fn lifecycle_rules_name_their_field() {
    use crate::plan::RestartMode;
    let mut mgmt = partition("mgmt", &[0]);
    mgmt.management = true;
    let cases: [(PartitionPlan, &str, &str); 6] = [
        (
            {
                let mut p = mgmt.clone();
                p.lifecycle.restart = RestartMode::Always;
                p
            },
            "restart",
            "the management partition always restarts (with back-off); remove this field",
        ),
        (
            {
                let mut p = mgmt.clone();
                p.lifecycle.restart_limit = 2;
                p
            },
            "restart_limit",
            "the management partition always restarts (with back-off); remove this field",
        ),
        (
            {
                let mut p = partition("alpha", &[1]);
                p.lifecycle.restart_limit = 2;
                p
            },
            "restart_limit",
            "has no effect with restart = \"never\"; set restart = \"on-crash\" or \"always\"",
        ),
        (
            {
                let mut p = partition("alpha", &[1]);
                p.lifecycle.watchdog_s = 3601;
                p
            },
            "watchdog_s",
            "3601 is out of range: 0 (off) or 1..=3600 seconds",
        ),
        (
            {
                let mut p = partition("alpha", &[1]);
                p.lifecycle.shutdown_timeout_s = 0;
                p
            },
            "shutdown_timeout_s",
            "0 is out of range: 1..=3600 seconds",
        ),
        (
            {
                let mut p = partition("alpha", &[1]);
                p.lifecycle.shutdown_timeout_s = 3601;
                p
            },
            "shutdown_timeout_s",
            "3601 is out of range: 1..=3600 seconds",
        ),
    ];
    for (candidate, field, message) in cases {
        assert_rejects(&rejected(&candidate), field, message);
    }
    let mut ok = partition("alpha", &[1]);
    ok.lifecycle.restart = RestartMode::OnCrash;
    ok.lifecycle.restart_limit = 3;
    ok.lifecycle.watchdog_s = 3600;
    alone(&ok).expect("a valid lifecycle");
}

#[test]
fn an_spi_listed_twice_by_one_partition_is_not_a_conflict() {
    let one_device = with_devices(
        partition("alpha", &[1]),
        vec![device("uart1", &[], &[40, 40])],
    );
    let two_devices = with_devices(
        partition("alpha", &[1]),
        vec![device("uart1", &[], &[40]), device("uart2", &[], &[41, 40])],
    );

    let first = rejected(&one_device);
    let second = rejected(&two_devices);

    assert_rejects(&first, "device \"uart1\": spis", "SPI 40 is listed twice");
    assert_rejects(&second, "device \"uart2\": spis", "SPI 40 is listed twice");
    assert!(!first.conflict() && !second.conflict());
}

#[test]
fn an_spi_an_existing_partition_owns_is_a_conflict() {
    let alpha = with_devices(partition("alpha", &[1]), vec![device("uart1", &[], &[40])]);
    let candidate = with_devices(partition("beta", &[2]), vec![device("uart2", &[], &[40])]);

    let rejection = rejected_beside(&candidate, &[&alpha]);

    assert_rejects(
        &rejection,
        "device \"uart2\": spis",
        "SPI 40 is also used by partition \"alpha\"",
    );
    assert!(rejection.conflict());
}

// ---- devices: MMIO --------------------------------------------------------

fn with_window(base: u64, size: u64) -> PartitionPlan {
    with_devices(
        partition("alpha", &[1]),
        vec![device("rtc", &[(base, size)], &[])],
    )
}

#[test]
fn an_empty_window_is_rejected() {
    assert_rejects(
        &rejected(&with_window(0x0901_0000, 0)),
        "device \"rtc\": mmio",
        "range at 0x9010000 has size 0",
    );
}

#[test]
fn a_window_off_4kib_pages_is_rejected() {
    for (base, size) in [(0x0901_0800, 0x1000), (0x0901_0000, 0x800)] {
        assert_rejects(
            &rejected(&with_window(base, size)),
            "device \"rtc\": mmio",
            &alloc::format!(
                "range {base:#x}+{size:#x} is not 4KiB aligned (stage 2 maps whole pages)"
            ),
        );
    }
}

#[test]
fn a_window_that_wraps_is_rejected() {
    assert_rejects(
        &rejected(&with_window(0xffff_ffff_ffff_f000, 0x2000)),
        "device \"rtc\": mmio",
        "range 0xfffffffffffff000+0x2000 wraps past the end of the address space",
    );
}

#[test]
fn a_window_over_the_guest_map_is_rejected() {
    let cases = [
        (0x0800_f000, "GIC distributor at 0x8000000+0x10000"),
        (
            0x080b_0000,
            "GIC redistributor region at 0x80a0000+0xf60000",
        ),
        (0x0900_0000, "PL011 at 0x9000000+0x1000"),
        // The partition's own 64 MiB of RAM.
        (0x43ff_f000, "RAM at 0x40000000+0x4000000"),
    ];
    for (base, region) in cases {
        assert_rejects(
            &rejected(&with_window(base, 0x1000)),
            "device \"rtc\": mmio",
            &alloc::format!("range {base:#x}+0x1000 overlaps the guest's {region}"),
        );
    }
    // Just past this partition's RAM is free.
    assert!(alone(&with_window(0x4400_0000, 0x1000)).is_ok());
}

#[test]
fn windows_of_two_own_devices_overlapping_are_not_a_conflict() {
    let candidate = with_devices(
        partition("alpha", &[1]),
        vec![
            device("rtc", &[(0x0901_0000, 0x2000)], &[]),
            device("gpio", &[(0x0902_0000, 0x1000), (0x0901_1000, 0x1000)], &[]),
        ],
    );

    let rejection = rejected(&candidate);

    assert_rejects(
        &rejection,
        "device \"gpio\": mmio",
        "range 0x9011000+0x1000 overlaps device \"rtc\" of partition \"alpha\"",
    );
    assert!(!rejection.conflict());
}

#[test]
fn two_windows_of_one_device_overlapping_are_rejected() {
    let candidate = with_devices(
        partition("alpha", &[1]),
        vec![device(
            "rtc",
            &[(0x0901_0000, 0x2000), (0x0901_1000, 0x1000)],
            &[],
        )],
    );

    assert_rejects(
        &rejected(&candidate),
        "device \"rtc\": mmio",
        "range 0x9011000+0x1000 overlaps device \"rtc\" of partition \"alpha\"",
    );
}

#[test]
fn a_window_overlapping_an_existing_partitions_is_a_conflict() {
    let alpha = with_window(0x0901_0000, 0x2000);
    let candidate = with_devices(
        partition("beta", &[2]),
        vec![device("gpio", &[(0x0901_1000, 0x1000)], &[])],
    );

    let rejection = rejected_beside(&candidate, &[&alpha]);

    assert_rejects(
        &rejection,
        "device \"gpio\": mmio",
        "range 0x9011000+0x1000 overlaps device \"rtc\" of partition \"alpha\"",
    );
    assert!(rejection.conflict());
}

#[test]
fn adjacent_windows_are_accepted() {
    let alpha = with_window(0x0901_0000, 0x1000);
    let candidate = with_devices(
        partition("beta", &[2]),
        vec![device("gpio", &[(0x0901_1000, 0x1000)], &[])],
    );

    assert_eq!(check_partition(&candidate, &[&alpha], &HOST), Ok(()));
}

// ---- run time: a candidate against the partitions that exist -------------

#[test]
fn a_candidate_clashing_with_any_existing_partition_is_a_conflict_naming_it() {
    let mgmt = PartitionPlan {
        management: true,
        ..partition("mgmt", &[0])
    };
    let alpha = with_devices(
        partition("alpha", &[1]),
        vec![device("rtc", &[(0x0901_0000, 0x1000)], &[34])],
    );
    let existing = [&mgmt, &alpha];
    let free = || {
        with_devices(
            partition("gamma", &[2, 3]),
            vec![device("gpio", &[(0x0903_0000, 0x1000)], &[39])],
        )
    };
    assert_eq!(check_partition(&free(), &existing, &HOST), Ok(()));

    let mut cpu = free();
    cpu.cpus = vec![2, 0];
    let mut spi = free();
    spi.devices[0].spis = vec![39, 34];
    let mut mmio = free();
    mmio.devices[0].mmio[0].base = 0x0901_0000;
    let mut name = free();
    name.name = "alpha".into();
    let cases = [
        (cpu, "cpus", "CPU 0 is also used by partition \"mgmt\""),
        (
            spi,
            "device \"gpio\": spis",
            "SPI 34 is also used by partition \"alpha\"",
        ),
        (
            mmio,
            "device \"gpio\": mmio",
            "range 0x9010000+0x1000 overlaps device \"rtc\" of partition \"alpha\"",
        ),
        (name, "name", "the name is used twice"),
    ];
    for (candidate, field, message) in cases {
        let rejection = rejected_beside(&candidate, &existing);

        assert_rejects(&rejection, field, message);
        assert!(rejection.conflict(), "{rejection}");
        assert_eq!(rejection.partition, candidate.name);
    }
}

#[test]
fn a_partition_changed_at_run_time_is_checked_against_the_others_only() {
    // Changing alpha: the caller passes every partition but alpha itself,
    // so alpha keeping its own CPU, SPI and window is no clash.
    let alpha = with_devices(
        partition("alpha", &[1]),
        vec![device("rtc", &[(0x0901_0000, 0x1000)], &[34])],
    );
    let beta = partition("beta", &[2]);
    let mut changed = alpha.clone();
    changed.ram_size = 128 * MIB;
    changed.bootargs = "console=ttyAMA0 quiet".to_string();

    assert_eq!(check_partition(&changed, &[&beta], &HOST), Ok(()));
}

#[test]
fn a_config_store_is_the_management_partitions_and_an_http_directory_url() {
    let host = HostLimits {
        board: "qemu-virt",
        cpus: 4,
    };
    let mut mgmt = partition("mgmt", &[0]);
    mgmt.management = true;
    for good in [
        "http://10.0.2.2:8082/hosts/qemu/",
        "http://boot.example/",
        "http://[fe80::1]:80/a/b/",
    ] {
        mgmt.config_store = Some(good.into());
        assert_eq!(check_partition(&mgmt, &[], &host), Ok(()), "{good}");
    }
    for bad in [
        "https://10.0.2.2/x/",
        "http://10.0.2.2:8082/hosts/qemu",
        "http:///x/",
        "http://host:99999/x/",
        "http://host:port/x/",
        "http://user@host/x/",
        "http://host/a b/",
        "http://host/?q=/",
        "ftp://host/",
    ] {
        mgmt.config_store = Some(bad.into());
        let err = check_partition(&mgmt, &[], &host).unwrap_err();
        assert_eq!(err.field, "config_store", "{bad}");
        assert_eq!(
            err.problem,
            Problem::ConfigStoreBad { url: bad.into() },
            "{bad}"
        );
        assert!(err.to_string().starts_with(&format!(
            "partition \"mgmt\": config_store: {bad:?} is not an http:// URL"
        )));
    }
    let mut alpha = partition("alpha", &[1]);
    alpha.config_store = Some("http://10.0.2.2/x/".into());
    let err = check_partition(&alpha, &[], &host).unwrap_err();
    assert_eq!(
        (err.field.as_str(), err.problem),
        ("config_store", Problem::ConfigStoreWithoutManagement)
    );
}

#[test]
fn api_tls_false_is_the_management_partitions_alone() {
    let mut alpha = partition("alpha", &[1]);
    alpha.api_tls = false;
    let err = check_partition(&alpha, &[], &HOST).unwrap_err();
    assert_eq!(
        (err.field.as_str(), err.problem.clone()),
        ("api_tls", Problem::ApiTlsWithoutManagement)
    );
    assert!(err.to_string().contains("api_tls"), "{err}");
}

fn function(device: u8) -> crate::plan::PciAddress {
    crate::plan::PciAddress {
        segment: 0,
        bus: 0,
        device,
        function: 0,
    }
}

#[test]
fn pci_functions_are_checked_for_segment_repeats_and_other_owners() {
    let alpha = PartitionPlan {
        pci: vec![function(2)],
        ..partition("alpha", &[1])
    };
    let mut other_segment = function(3);
    other_segment.segment = 1;
    let cases = [
        (
            vec![function(3), other_segment],
            "pci[1]",
            "0001:00:03.0: only segment 0000 (the host's one PCIe host bridge) is supported",
            false,
        ),
        (
            vec![function(3), function(3)],
            "pci[1]",
            "0000:00:03.0 is named twice",
            false,
        ),
        (
            vec![function(2)],
            "pci[0]",
            "0000:00:02.0 is already assigned to partition \"alpha\"",
            true,
        ),
    ];
    for (pci, field, message, conflict) in cases {
        let candidate = PartitionPlan {
            pci,
            ..partition("beta", &[2])
        };
        let rejection = rejected_beside(&candidate, &[&alpha]);
        assert_rejects(&rejection, field, message);
        assert_eq!(rejection.conflict(), conflict, "{rejection}");
    }
    let fine = PartitionPlan {
        pci: vec![function(3), function(4)],
        ..partition("beta", &[2])
    };
    assert!(check_partition(&fine, &[&alpha], &HOST).is_ok());
}

#[test]
fn functions_and_the_whole_host_bridge_exclude_each_other() {
    let whole = PartitionPlan {
        pci_host_bridge: true,
        ..partition("mgmt", &[0])
    };
    let alpha = PartitionPlan {
        pci: vec![function(2)],
        ..partition("alpha", &[1])
    };
    let rejection = rejected_beside(&alpha, &[&whole]);
    assert_eq!(rejection.field, "pci");
    assert!(rejection.conflict());
    let rejection = rejected_beside(&whole, &[&alpha]);
    assert_eq!(rejection.field, "pci_host_bridge");
    let both = PartitionPlan {
        pci_host_bridge: true,
        ..alpha.clone()
    };
    assert_eq!(rejected_beside(&both, &[]).field, "pci");
}
