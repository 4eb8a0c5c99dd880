//! `cargo xtask test`: tier 1 runs the host unit tests; tier 2 onward boot
//! the hypervisor under QEMU and check what its partitions print and what
//! its management partition answers.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::api_checks::{self, Stack};
use crate::build::{Builder, DEFAULT_CONFIG};
use crate::cmd;
use crate::deploy_checks;
use crate::error::XtaskError;
use crate::harness::{log_tail, number_after, Line, QemuRun};
use crate::qemu::{qemu_command, Extra};
use crate::runtime_checks;
use crate::Workspace;

/// What `cargo xtask test` was asked to run.
#[derive(Debug, Default)]
pub struct Options {
    /// Tier 1 only.
    pub host_only: bool,
    /// Only the tests with these names (comma-separated).
    pub only: Option<String>,
}

/// A test's verdict: `Ok` with notes to print, or `Err` with why it failed.
type Outcome = api_checks::Outcome;

struct Case {
    name: &'static str,
    /// 1 = host unit tests; 2+ = QEMU boots.
    tier: u8,
    /// Runs on the one shared boot of the default plan (booting it if no
    /// earlier case did) rather than on a boot of its own.
    shares_default: bool,
    run: fn(&mut Context<'_>) -> Outcome,
}

/// Cases run only when `--only` names them, each with why it is not in the
/// default run. None today: `load` was here while a few first requests of
/// its 100-client connect burst went unanswered, which QEMU's forwarder
/// lost on the host (its listen backlog of 1; crate::hostfwd raises it;
/// docs/MANAGER.md, "The HTTP server").
const OPT_IN: [&str; 0] = [];

/// The tests, in the order they run. The cases sharing the default boot
/// come one after another and in this order: `net-partitions` right after
/// `boot-default` (alpha's and beta's first boots: it leaves a DHCP lease
/// and an httpd in each, which later restarts drop), `msi` right after it
/// (alpha's httpd is its traffic), `api-restart`,
/// `events-console` and `web-ui` each restart beta, `api-errors` checks that refused calls changed nothing,
/// `console-paste` comes after `web-ui` (its 8 KiB of echo would push
/// beta's UP line off the browser's screen; it waits for beta's shell after
/// web-ui's restart), `runtime` deletes alpha and creates it again at its
/// end, `web-ui-live` does the same through the UI (after the others, so a
/// failure half-way cannot take alpha from them), `throttle` holds every
/// host client back for its 10 s window (it waits it out), `schemathesis`
/// reads everything and changes nothing (a viewer it makes and revokes),
/// `redfish` powers beta off and on and restarts it through Redfish
/// clients (running again at its end), `load` restarts beta
/// every 5 s under load, `mgmt-restart` kills the manager twice and so
/// comes last.
const CASES: [Case; 39] = [
    Case {
        name: "host",
        tier: 1,
        shares_default: false,
        run: host_tests,
    },
    Case {
        name: "fuzz",
        tier: 1,
        shares_default: false,
        run: |ctx| crate::fuzz::test_case(ctx.ws),
    },
    Case {
        name: "boot-default",
        tier: 2,
        shares_default: true,
        run: boot_default,
    },
    Case {
        name: "net-partitions",
        tier: 2,
        shares_default: true,
        run: |ctx| crate::net_checks::net_partitions(ctx.stack()?),
    },
    Case {
        name: "msi",
        tier: 2,
        shares_default: true,
        run: |ctx| crate::net_checks::msi(ctx.stack()?),
    },
    Case {
        name: "api-list",
        tier: 2,
        shares_default: true,
        run: |ctx| api_checks::api_list(ctx.stack()?),
    },
    Case {
        name: "api-restart",
        tier: 2,
        shares_default: true,
        run: |ctx| api_checks::api_restart(ctx.stack()?),
    },
    Case {
        name: "events-console",
        tier: 2,
        shares_default: true,
        run: |ctx| {
            let ws = ctx.ws;
            crate::event_checks::events_console(ws, ctx.stack()?)
        },
    },
    Case {
        name: "api-errors",
        tier: 2,
        shares_default: true,
        run: |ctx| api_checks::api_errors(ctx.stack()?),
    },
    Case {
        name: "api-concurrency",
        tier: 2,
        shares_default: true,
        run: |ctx| api_checks::api_concurrency(ctx.stack()?),
    },
    Case {
        name: "hvctl",
        tier: 2,
        shares_default: true,
        run: |ctx| {
            let ws = ctx.ws;
            api_checks::hvctl_list(ws, ctx.stack()?)
        },
    },
    Case {
        name: "tls",
        tier: 2,
        shares_default: true,
        run: |ctx| {
            let ws = ctx.ws;
            crate::tls_checks::tls(ws, ctx.stack()?)
        },
    },
    Case {
        name: "web-ui",
        tier: 2,
        shares_default: true,
        run: |ctx| {
            let ws = ctx.ws;
            api_checks::web_ui(ws, ctx.stack()?)
        },
    },
    Case {
        name: "console-paste",
        tier: 2,
        shares_default: true,
        run: |ctx| {
            let ws = ctx.ws;
            api_checks::console_paste(ws, ctx.stack()?)
        },
    },
    Case {
        name: "runtime",
        tier: 2,
        shares_default: true,
        run: |ctx| {
            let ws = ctx.ws;
            runtime_checks::runtime(ws, ctx.stack()?)
        },
    },
    Case {
        name: "web-ui-live",
        tier: 2,
        shares_default: true,
        run: |ctx| {
            let ws = ctx.ws;
            api_checks::web_ui_live(ws, ctx.stack()?)
        },
    },
    Case {
        name: "throttle",
        tier: 2,
        shares_default: true,
        run: |ctx| crate::mgmtx_checks::throttle(ctx.stack()?),
    },
    Case {
        name: "schemathesis",
        tier: 2,
        shares_default: true,
        run: |ctx| {
            let ws = ctx.ws;
            let log = ctx.log_path();
            crate::mgmtx_checks::schemathesis(ws, ctx.stack()?, &log)
        },
    },
    Case {
        name: "redfish",
        tier: 2,
        shares_default: true,
        run: |ctx| {
            let ws = ctx.ws;
            let log = ctx.log_path();
            crate::redfish_checks::redfish(ws, ctx.stack()?, &log)
        },
    },
    Case {
        name: "load",
        tier: 2,
        shares_default: true,
        run: |ctx| crate::load_checks::load_case(ctx.stack()?),
    },
    Case {
        name: "mgmt-restart",
        tier: 2,
        shares_default: true,
        run: |ctx| api_checks::mgmt_restart(ctx.stack()?),
    },
    Case {
        name: "config",
        tier: 2,
        shares_default: false,
        run: config_case,
    },
    Case {
        name: "mgmt-no-nic",
        tier: 2,
        shares_default: false,
        run: mgmt_no_nic,
    },
    Case {
        name: "entropy",
        tier: 2,
        shares_default: false,
        run: entropy,
    },
    Case {
        name: "isolation",
        tier: 2,
        shares_default: false,
        run: isolation,
    },
    Case {
        name: "lifecycle",
        tier: 2,
        shares_default: false,
        run: lifecycle,
    },
    Case {
        name: "hostile",
        tier: 2,
        shares_default: false,
        run: hostile,
    },
    Case {
        name: "smmu-isolation",
        tier: 2,
        shares_default: false,
        run: smmu_isolation,
    },
    Case {
        name: "gicv4",
        tier: 2,
        shares_default: false,
        run: gicv4,
    },
    Case {
        name: "hostile-plans",
        tier: 2,
        shares_default: false,
        run: |ctx| {
            let dir = ctx.ws.root.join("target/pinfold/test-logs");
            crate::hostile_plans::hostile_plans(ctx.ws, &mut ctx.builder, &dir)
        },
    },
    Case {
        name: "uboot",
        tier: 2,
        shares_default: false,
        run: uboot,
    },
    Case {
        name: "pxe-uboot",
        tier: 2,
        shares_default: false,
        run: |ctx| deploy_checks::pxe_uboot(ctx.deploy()),
    },
    Case {
        name: "bundle-refused",
        tier: 2,
        shares_default: false,
        run: |ctx| deploy_checks::bundle_refused(ctx.deploy()),
    },
    Case {
        name: "pxe-uefi-dt",
        tier: 2,
        shares_default: false,
        run: |ctx| deploy_checks::pxe_uefi_dt(ctx.deploy()),
    },
    Case {
        name: "pxe-uefi-acpi",
        tier: 2,
        shares_default: false,
        run: |ctx| deploy_checks::pxe_uefi_acpi(ctx.deploy()),
    },
    Case {
        name: "uefi-http",
        tier: 2,
        shares_default: false,
        run: |ctx| deploy_checks::uefi_http(ctx.deploy()),
    },
    Case {
        name: "uefi-el1",
        tier: 2,
        shares_default: false,
        run: |ctx| deploy_checks::uefi_el1(ctx.deploy()),
    },
    Case {
        name: "uboot-dhcp",
        tier: 2,
        shares_default: false,
        run: uboot_dhcp,
    },
    Case {
        name: "pxe-grub",
        tier: 2,
        shares_default: false,
        run: |ctx| deploy_checks::pxe_grub(ctx.deploy()),
    },
];

/// U-Boot for QEMU virt (Debian's u-boot-qemu).
const UBOOT: &str = "/usr/lib/u-boot/qemu_arm64/u-boot.bin";
/// Where QEMU puts our image for U-Boot: not the RAM base, so the image's
/// self-relocation is exercised (the other tests run it at 0x4000_0000).
const UBOOT_LOAD_ADDR: u64 = 0x5000_0000;

/// Tier 2: firmware starts the image the way a server's U-Boot would
/// (`booti`, the arm64 Image header honoured, DTB from the firmware) at an
/// address other than RAM's base; the partitions boot as under `-kernel`.
fn uboot(ctx: &mut Context<'_>) -> Outcome {
    let built = ctx
        .builder
        .build(
            Path::new("vm-configs/qemu-virt/test-isolation.toml"),
            "test-uboot.bin",
        )
        .map_err(|err| format!("build failed: {err}"))?;
    let extra = Extra {
        firmware: Some((UBOOT.into(), UBOOT_LOAD_ADDR)),
        ..Extra::default()
    };
    let cmd = qemu_command(&built.board, &built.image, &extra);
    let mut qemu = QemuRun::spawn(cmd, &ctx.log_path()).map_err(|err| err.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(240);
    expect(&qemu, "U-Boot 20", 0, deadline)?;
    // Stop autoboot (any key), then boot our image with U-Boot's own DTB.
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(500));
        qemu.send(b"\n").map_err(|err| err.to_string())?;
    }
    qemu.send(format!("booti {UBOOT_LOAD_ADDR:#x} - ${{fdtcontroladdr}}\n").as_bytes())
        .map_err(|err| err.to_string())?;
    let banner = expect(&qemu, "pinfold: Pinfold v", 0, deadline)?;
    let site = expect(&qemu, "irq call site guest @", banner.index, deadline)?;
    let at = site
        .text
        .split('@')
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .and_then(|hex| u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok())
        .ok_or_else(|| format!("no address in `{}`", site.text))?;
    if !(UBOOT_LOAD_ADDR..UBOOT_LOAD_ADDR + (64 << 20)).contains(&at)
        || !site.text.ends_with(", ok)")
    {
        return Err(format!(
            "the image did not run relocated where U-Boot started it: `{}`",
            site.text
        ));
    }
    expect(&qemu, "[probe] PROBE done", banner.index, deadline)?;
    let up = expect(&qemu, "[steady] PINFOLD-GUEST-UP", banner.index, deadline)?;
    Ok(vec![format!(
        "booti at {UBOOT_LOAD_ADDR:#x}: code ran at {at:#x}, steady up {:.1} s after QEMU start",
        up.at.as_secs_f64()
    )])
}

/// The MAC QEMU gives the first NIC (52:54:00:12:34:56, QEMU's default).
const QEMU_NIC_MAC: &str = "52:54:00:12:34:56";

/// Tier 2: the management NIC works after firmware used it. U-Boot brings
/// up the virtio-net function (`dhcp` on QEMU's user network: it assigns
/// BARs, enables the function, negotiates, posts receive buffers and sets
/// DRIVER_OK), then `booti` starts the default plan; the manager's REST API
/// must answer through that same NIC.
fn uboot_dhcp(ctx: &mut Context<'_>) -> Outcome {
    let built = ctx
        .builder
        .build(Path::new(DEFAULT_CONFIG), "test-uboot-dhcp.bin")
        .map_err(|err| format!("build failed: {err}"))?;
    api_checks::port_is_free()?;
    let extra = Extra {
        firmware: Some((UBOOT.into(), UBOOT_LOAD_ADDR)),
        ..Extra::default()
    };
    let cmd = qemu_command(&built.board, &built.image, &extra);
    let mut qemu = QemuRun::spawn(cmd, &ctx.log_path()).map_err(|err| err.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(240);
    expect(&qemu, "U-Boot 20", 0, deadline)?;
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(500));
        qemu.send(b"\n").map_err(|err| err.to_string())?;
    }
    // U-Boot's own network use: no TFTP file needed, only the lease.
    qemu.send(b"setenv autoload no; dhcp\n")
        .map_err(|err| err.to_string())?;
    let bound = expect(&qemu, "DHCP client bound to address", 0, deadline)?;
    // The prompt comes back after the lease line; typing earlier loses keys.
    std::thread::sleep(Duration::from_secs(1));
    // The lease U-Boot took is for the MAC it used: unless that is the
    // NIC's own, the manager's lease is another address than the one the
    // forward points at (U-Boot's legacy virtio driver reads a wrong MAC).
    qemu.send(b"printenv ethaddr\n")
        .map_err(|err| err.to_string())?;
    let mac = expect(&qemu, "ethaddr=", bound.index, deadline)?;
    if !mac.text.ends_with(&format!("ethaddr={QEMU_NIC_MAC}")) {
        return Err(format!(
            "U-Boot used `{}`, not the NIC's {QEMU_NIC_MAC}: its DHCP lease holds the address \
             the forward points at (docs/MANAGER.md, The NIC, whatever firmware did with it)",
            mac.text
        ));
    }
    std::thread::sleep(Duration::from_millis(500));
    qemu.send(format!("booti {UBOOT_LOAD_ADDR:#x} - ${{fdtcontroladdr}}\n").as_bytes())
        .map_err(|err| err.to_string())?;
    expect(&qemu, "pinfold: Pinfold v", bound.index, deadline)?;
    let mut stack = Stack::new(qemu);
    let answered = stack.first_answer()?;
    let list = api_checks::list_partitions()?;
    api_checks::check_listed(&list, "mgmt", &[0])?;
    Ok(vec![format!(
        "U-Boot's DHCP bound at {:.1} s; the manager answered through the same NIC at {:.1} s",
        bound.at.as_secs_f64(),
        answered.as_secs_f64()
    )])
}

/// Tier 2: crash and hang detection, a restart policy and the graceful
/// shutdown's deadline on one boot of test-lifecycle.toml
/// (`api_checks::lifecycle`).
fn lifecycle(ctx: &mut Context<'_>) -> Outcome {
    api_checks::port_is_free()?;
    let qemu = ctx.boot("vm-configs/qemu-virt/test-lifecycle.toml")?;
    let mut stack = Stack::new(qemu);
    api_checks::lifecycle(&mut stack)
}

/// Tier 2: the hostile-guest suite beside a Linux that must keep printing
/// with its RAM intact, the fault count checked through the API, on one
/// boot of test-hostile.toml (`hostile_checks`).
fn hostile(ctx: &mut Context<'_>) -> Outcome {
    api_checks::port_is_free()?;
    let qemu = ctx.boot("vm-configs/qemu-virt/test-hostile.toml")?;
    let mut stack = Stack::new(qemu);
    crate::hostile_checks::hostile(&mut stack)
}

/// Tier 2: test-smmu-dma.toml on QEMU 10 with an SMMUv3 doing stage 2 in
/// front of the host bridge (`provision::qemu_10`, docs/DEVICES.md): the
/// hypervisor programs it before any partition starts, binds each
/// partition's PCI functions to its stage 2 (its VMID), and the manager's
/// NIC, whose every DMA now goes through that stage 2, serves the API; the
/// stats line shows the bound streams and no DMA fault. Then Linux `dma`
/// drives QEMU's `edu` DMA engine (00:02.0) into its own RAM (no event)
/// and into Linux `steady`'s RAM (stopped, `dma`'s faults), and `steady`'s
/// RAM checksum stays `ram=ok` (`dma_checks`). Last, `dma`'s virtio-net
/// takes MSI-X through its virtual ITS behind the SMMU ([`msi_behind_smmu`]).
/// The management NIC of `smmu-isolation`: QEMU's virtio devices bypass
/// the IOMMU unless `iommu_platform=on` (VIRTIO_F_ACCESS_PLATFORM), so
/// without it the case would pass with any stream table entry.
const SMMU_NIC: &str = "virtio-net-pci,disable-legacy=on,iommu_platform=on";
/// `dma`'s DMA engine in `smmu-isolation`: QEMU's edu, whose default
/// `dma_mask` (28 bits) would fold the foreign addresses into low memory.
const SMMU_DMA_DEVICE: &str = "edu,addr=0x2,dma_mask=0xffffffffffffffff";
/// The SR-IOV PF of `smmu-isolation` (QEMU 10's igb: 8 VFs, First VF
/// Offset 0x80, Stride 2): `dma` owns its VF 0, 00:13.0.
const SMMU_SRIOV_PF: &str = "igb,addr=0x3";

fn smmu_isolation(ctx: &mut Context<'_>) -> Outcome {
    api_checks::port_is_free()?;
    let q10 = crate::provision::qemu_10(ctx.ws).map_err(|err| err.to_string())?;
    let built = ctx
        .builder
        .build(
            Path::new("vm-configs/qemu-virt/test-smmu-dma.toml"),
            "test-smmu-dma.bin",
        )
        .map_err(|err| format!("build failed: {err}"))?;
    let extra = Extra {
        smmu: Some(q10),
        nic_model: Some(SMMU_NIC.into()),
        args: [
            "-device".into(),
            SMMU_DMA_DEVICE.into(),
            "-device".into(),
            SMMU_SRIOV_PF.into(),
        ]
        .into_iter()
        .chain(smmu_msi_nic_args())
        .collect(),
        ..Extra::default()
    };
    // 00:02.0 is `dma`'s edu, not a partition NIC; its NIC is
    // [`SMMU_MSI_NIC`], which goes through the SMMU.
    let board = crate::qemu::Board {
        partition_nics: crate::qemu::NicSlots::NONE,
        ..built.board
    };
    let cmd = qemu_command(&board, &built.image, &extra);
    let qemu = QemuRun::spawn(cmd, &ctx.log_path()).map_err(|err| err.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(300);
    let programmed = expect(&qemu, "smmu: SMMUv3 programmed", 0, deadline)?;
    let bound = qemu
        .wait_for("the manager's streams bound", 0, deadline, |l| {
            l.contains("PCI stream(s) translated by the SMMU") && l.contains("partition mgmt: ")
        })
        .map_err(|err| err.to_string())?;
    if bound.index < programmed.index {
        return Err("streams were bound before the SMMU was programmed".into());
    }
    let mut stack = Stack::new(qemu);
    let answered = stack.first_answer()?;
    let list = api_checks::list_partitions()?;
    api_checks::check_listed(&list, "mgmt", &[0])?;
    let from = stack.qemu.lines().len();
    stack.qemu.send(b"\x01s").map_err(|err| err.to_string())?;
    let smmu = expect(&stack.qemu, "pinfold: stats smmu streams=", from, deadline)?;
    let mgmt = expect(
        &stack.qemu,
        "pinfold: stats partition=mgmt ",
        from,
        deadline,
    )?;
    let streams = number_after(&smmu.text, "streams=").unwrap_or(0);
    if streams == 0 || number_after(&smmu.text, "events=") != Some(0) {
        return Err(format!(
            "expected bound streams and no DMA fault: `{}`",
            smmu.text
        ));
    }
    // Its faults may hold a refused BAR write (Hermit sizes BAR5's high
    // half with all-ones and writes the result back: a `PciConfig` fault
    // under a `pci` list), never a DMA fault.
    if !mgmt.text.contains(" state=1 ")
        || stack
            .qemu
            .lines()
            .iter()
            .any(|l| l.text.contains("partition mgmt: DMA fault"))
    {
        return Err(format!(
            "the manager is not running or had a DMA fault: `{}`",
            mgmt.text
        ));
    }
    let mut notes = vec![format!(
        "QEMU 10 SMMUv3 stage 2: {streams} stream(s) translated; the API answered through mgmt's NIC at {:.1} s; no DMA fault",
        answered.as_secs_f64()
    )];
    notes.extend(crate::dma_checks::foreign_dma(&mut stack)?);
    notes.extend(msi_behind_smmu(&mut stack, deadline)?);
    Ok(notes)
}

/// Tier 2: the default plan on a GICv4.0 (`-M ...,gic-version=4`): the
/// hypervisor turns direct vLPIs on (`its: GICv4.0: ...`), alpha's and
/// beta's NICs get DHCP leases and serve pages (`net-partitions`), and
/// alpha's MSI-X counts rise with no physical LPI taken at EL2 for it
/// (`msi` with `lpis=0` on its stats line): each MSI went to its resident
/// vPE without an exit.
fn gicv4(ctx: &mut Context<'_>) -> Outcome {
    api_checks::port_is_free()?;
    let built = ctx
        .builder
        .build(Path::new(crate::build::DEFAULT_CONFIG), "test-gicv4.bin")
        .map_err(|err| format!("build failed: {err}"))?;
    let extra = Extra {
        gicv4: true,
        ..Extra::default()
    };
    let cmd = qemu_command(&built.board, &built.image, &extra);
    let qemu = QemuRun::spawn(cmd, &ctx.log_path()).map_err(|err| err.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(300);
    let on = expect(
        &qemu,
        "its: GICv4.0: partitions' MSIs are direct vLPIs",
        0,
        deadline,
    )?;
    let mut stack = Stack::new(qemu);
    let mut notes = vec![on.text.trim().to_string()];
    notes.extend(crate::net_checks::net_partitions(&mut stack)?);
    notes.extend(crate::net_checks::msi_checked(&mut stack, true)?);
    notes.push(gicv4_restart(&mut stack, deadline)?);
    notes.extend(crate::net_checks::msi_checked(&mut stack, true)?);
    Ok(notes)
}

/// A restart of alpha on the GICv4.0 boot: its vCPU's vPE is put (made
/// non-resident) and its devices unmapped; the new boot's EnableLPIs makes
/// the same vPE resident again on a zeroed pending table, after which
/// `msi_checked` sees its MSIs arrive directly once more.
fn gicv4_restart(stack: &mut Stack, deadline: Instant) -> Result<String, String> {
    let token = stack.token(deadline)?;
    let resident =
        |l: &str| l.contains("partition alpha: vCPU 0's vPE ") && l.contains(" resident");
    let before = stack
        .qemu
        .lines()
        .iter()
        .filter(|l| resident(&l.text))
        .count();
    let cursor = api_checks::console_end("alpha")?;
    let from = stack.qemu.lines().len();
    api_checks::call_json(
        &crate::http::Request::post("/api/v1/partitions/alpha/restart", Some(&token), None),
        202,
    )?;
    api_checks::follow_console_until(
        "alpha",
        cursor,
        &format!("{}alpha ", api_checks::UP_MARKER),
        deadline,
    )?;
    let again = stack
        .qemu
        .wait_for("alpha's vPE resident again", from, deadline, |l| {
            resident(l)
        })
        .map_err(|err| err.to_string())?;
    Ok(format!(
        "restart of alpha: its vPE made resident again ({} lines before, `{}`)",
        before,
        again.text.trim()
    ))
}

/// `dma`'s NIC in `smmu-isolation` (00:04.0): its DMA, and so its MSI-X
/// writes, go through the SMMU (`iommu_platform=on`; QEMU sends a PCI
/// function's MSI through its bus-master address space, the SMMU's).
const SMMU_MSI_NIC: (u8, &str) = (
    4,
    "virtio-net-pci,disable-legacy=on,iommu_platform=on,addr=0x4",
);

/// The QEMU arguments of [`SMMU_MSI_NIC`], on a user network of its own
/// with port 80 forwarded like every partition NIC's.
fn smmu_msi_nic_args() -> [String; 4] {
    let (device, model) = SMMU_MSI_NIC;
    let port = crate::qemu::partition_nic_port(crate::qemu::manager_port(), device);
    [
        "-device".into(),
        format!("{model},netdev=dnet"),
        "-netdev".into(),
        format!("user,id=dnet,hostfwd=tcp:127.0.0.1:{port}-:80"),
    ]
}

/// MSI behind the SMMU: `dma` was given a virtual ITS whose doorbell page
/// is mapped in its DMA stage 2 only (its boot line says so), its NIC's
/// MSI-X counts rise while pages are fetched through it, and none of those
/// writes was an SMMU fault.
fn msi_behind_smmu(stack: &mut Stack, deadline: Instant) -> Result<Vec<String>, String> {
    let path = expect(&stack.qemu, "partition dma: MSI ", 0, deadline)?;
    if !path.text.contains("in the SMMU's stage 2 only") {
        return Err(format!(
            "dma's MSIs do not go through the SMMU: `{}`",
            path.text
        ));
    }
    let token = stack.token(deadline)?;
    let from = stack.qemu.lines().len();
    let port = crate::qemu::partition_nic_port(crate::qemu::manager_port(), SMMU_MSI_NIC.0);
    let (lines, before, after) = crate::net_checks::msi_rises("dma", port, &token, deadline)?;
    let nic = "(00:04.0)";
    if let Some(fault) = stack.qemu.lines()[from..]
        .iter()
        .find(|l| l.text.contains("DMA fault") && l.text.contains(nic))
    {
        return Err(format!("dma's NIC faulted at the SMMU: `{}`", fault.text));
    }
    Ok(vec![
        format!("`{}`", path.text.trim()),
        format!(
            "dma's NIC {nic} behind the SMMU: {lines} ITS-MSI lines, {before} -> {after} interrupts over page fetches, no SMMU fault"
        ),
    ])
}

/// The manager's line when no NIC it drives is there.
const NO_NIC: &str = "[mgmt] pinfold-manager: no supported network device (found ";

/// Tier 2: the management NIC is an e1000, which Hermit does not drive. The
/// manager says so, listing the PCI functions it has, tells the hypervisor,
/// and stays up: its console answers `status`, the hypervisor's stats line
/// shows the partition running with `manager=no-network-device`, and
/// nothing was restarted.
fn mgmt_no_nic(ctx: &mut Context<'_>) -> Outcome {
    let built = ctx
        .builder
        .build(
            Path::new("vm-configs/qemu-virt/test-mgmt.toml"),
            "test-mgmt-no-nic.bin",
        )
        .map_err(|err| format!("build failed: {err}"))?;
    let extra = Extra {
        nic_model: Some("e1000".into()),
        ..Extra::default()
    };
    let cmd = qemu_command(&built.board, &built.image, &extra);
    let mut qemu = QemuRun::spawn(cmd, &ctx.log_path()).map_err(|err| err.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(180);
    let said = expect(&qemu, NO_NIC, 0, deadline)?;
    if !said.text.contains("8086:100e") {
        return Err(format!("the e1000 is not in `{}`", said.text));
    }
    let heard = expect(
        &qemu,
        "partition mgmt: manager reports no-network-device: no supported network device (found ",
        0,
        deadline,
    )?;
    // Its console still works (the poll runs every 50 ms).
    std::thread::sleep(Duration::from_secs(1));
    let from = qemu.lines().len();
    qemu.send(b"status\r").map_err(|err| err.to_string())?;
    let status = expect(
        &qemu,
        "[mgmt] pinfold-manager: status: no-network-device: no supported network device",
        from,
        deadline,
    )?;
    qemu.send(b"\x01s").map_err(|err| err.to_string())?;
    let stats = expect(&qemu, "pinfold: stats partition=mgmt ", from, deadline)?;
    if !stats.text.contains(" state=1 ")
        || !stats.text.contains(" manager=no-network-device restarts=0")
    {
        return Err(format!(
            "the hypervisor does not show a running manager without a NIC: `{}`",
            stats.text
        ));
    }
    if let Some(line) = qemu.lines().iter().find(|l| {
        l.text.contains("partition mgmt: powered off") || l.text.contains("mgmt stopped (")
    }) {
        return Err(format!("the manager went down: `{}`", line.text));
    }
    Ok(vec![
        format!("{:.1} s: `{}`", said.at.as_secs_f64(), said.text),
        format!("hypervisor: `{}`", heard.text),
        format!("console: `{}`", status.text),
        format!("stats: `{}`", stats.text),
    ])
}

/// Boot entropy: two boots of the default plan print different tokens
/// (each from the hypervisor's DRBG over QEMU's fresh rng-seed), and a
/// boot without any source (`dtb-randomness=off`: no rng-seed; the
/// cortex-a72 has no RNDR; no UEFI) makes no token, the manager no
/// credential, and both say why.
fn entropy(ctx: &mut Context<'_>) -> Outcome {
    let built = ctx
        .builder
        .build(Path::new(DEFAULT_CONFIG), "test-entropy.bin")
        .map_err(|err| format!("build failed: {err}"))?;
    let mut tokens = Vec::new();
    let mut notes = Vec::new();
    for _ in 0..2 {
        api_checks::port_is_free()?;
        let cmd = qemu_command(&built.board, &built.image, &Extra::default());
        let qemu = QemuRun::spawn(cmd, &ctx.log_path()).map_err(|err| err.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(120);
        let sources = expect(&qemu, "pinfold: entropy: ", 0, deadline)?;
        if !sources.text.contains("rng-seed 32 bytes") {
            return Err(format!("QEMU's rng-seed was not used: `{}`", sources.text));
        }
        let line = expect(&qemu, "pinfold: management token: ", 0, deadline)?;
        let token = api_checks::parse_token(&line.text)
            .ok_or_else(|| format!("no hex token in `{}`", line.text))?;
        if token.len() != 32 {
            return Err(format!("the token is not 128 bits: `{}`", line.text));
        }
        tokens.push(token);
        notes.push(format!("`{}`", sources.text.trim()));
        drop(qemu);
    }
    if tokens[0] == tokens[1] {
        return Err(format!("two boots made the same token {}", tokens[0]));
    }
    notes.push(format!(
        "two boots, two tokens: {} / {}",
        tokens[0], tokens[1]
    ));

    api_checks::port_is_free()?;
    let extra = Extra {
        args: vec!["-machine".into(), "dtb-randomness=off".into()],
        ..Extra::default()
    };
    let cmd = qemu_command(&built.board, &built.image, &extra);
    let qemu = QemuRun::spawn(cmd, &ctx.log_path()).map_err(|err| err.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(180);
    let none = expect(&qemu, "pinfold: entropy: none", 0, deadline)?;
    let no_token = expect(&qemu, "pinfold: management token: none", 0, deadline)?;
    let refused = expect(
        &qemu,
        "[mgmt] pinfold-manager: the hypervisor found no entropy source at boot",
        0,
        deadline,
    )?;
    notes.push(format!("`{}`", none.text.trim()));
    notes.push(format!("`{}`", no_token.text.trim()));
    notes.push(format!("`{}`", refused.text.trim()));
    Ok(notes)
}

/// The log of the shared default boot.
const DEFAULT_LOG: &str = "boot-default";

/// Lines of the log shown under a failure.
const TAIL_LINES: usize = 40;

struct Context<'w> {
    ws: &'w Workspace,
    builder: Builder<'w>,
    name: &'static str,
    /// Whether the current case runs on the shared default boot.
    shares_default: bool,
    /// The shared boot of the default plan, once a case started it.
    stack: Option<Stack>,
    /// Why the shared boot could not be started, so later cases do not try
    /// (and wait) again.
    stack_failed: Option<String>,
    /// The `cargo xtask pxe` tree the deployment tests boot from, once made.
    tree: Option<crate::pxe::Tree>,
}

impl<'w> Context<'w> {
    /// The console log of the current case's boot.
    fn log_path(&self) -> std::path::PathBuf {
        let name = if self.shares_default {
            DEFAULT_LOG
        } else {
            self.name
        };
        self.ws
            .root
            .join("target/pinfold/test-logs")
            .join(format!("{name}.log"))
    }

    /// What the deployment tests need of the context.
    fn deploy(&mut self) -> deploy_checks::Deploy<'_, 'w> {
        deploy_checks::Deploy {
            log: self.log_path(),
            ws: self.ws,
            builder: &mut self.builder,
            tree: &mut self.tree,
        }
    }

    /// The shared boot of the default plan, booting it on first use.
    fn stack(&mut self) -> Result<&mut Stack, String> {
        if let Some(why) = &self.stack_failed {
            return Err(format!("the default plan did not boot: {why}"));
        }
        if self.stack.is_none() {
            match self.boot_stack() {
                Ok(stack) => self.stack = Some(stack),
                Err(why) => {
                    self.stack_failed = Some(why.clone());
                    return Err(why);
                }
            }
        }
        self.stack
            .as_mut()
            .ok_or_else(|| "the default plan's boot vanished".to_string())
    }

    fn boot_stack(&mut self) -> Result<Stack, String> {
        let built = self
            .builder
            .build(
                Path::new(DEFAULT_CONFIG),
                &format!("test-{DEFAULT_LOG}.bin"),
            )
            .map_err(|err| format!("build failed: {err}"))?;
        api_checks::port_is_free()?;
        let cmd = qemu_command(&built.board, &built.image, &Extra::default());
        let qemu = QemuRun::spawn(cmd, &self.log_path()).map_err(|err| err.to_string())?;
        Ok(Stack::new(qemu))
    }

    /// Builds `config` into its own image and boots it.
    fn boot(&mut self, config: &str) -> Result<QemuRun, String> {
        let built = self
            .builder
            .build(Path::new(config), &format!("test-{}.bin", self.name))
            .map_err(|err| format!("build failed: {err}"))?;
        let cmd = qemu_command(&built.board, &built.image, &Extra::default());
        QemuRun::spawn(cmd, &self.log_path()).map_err(|err| err.to_string())
    }
}

/// `config`: two boots of the default plan over one configuration store.
fn config_case(ctx: &mut Context<'_>) -> Outcome {
    let log = ctx.log_path();
    let log2 = log.with_file_name("config-reboot.log");
    crate::config_checks::config(ctx.ws, &mut ctx.builder, &log, &log2)
}

/// Names accepted by `--only`.
pub fn names() -> Vec<&'static str> {
    CASES.iter().map(|case| case.name).collect()
}

/// Runs the selected tests, prints a verdict per test and the closing
/// `N passed, M failed` line.
pub fn run(ws: &Workspace, options: &Options) -> Result<(), XtaskError> {
    let only: Option<Vec<&str>> = options
        .only
        .as_deref()
        .map(|only| only.split(',').collect());
    for name in only.iter().flatten() {
        if !names().contains(name) {
            return Err(XtaskError::Usage(format!(
                "unknown test `{name}`; tests: {}",
                names().join(", ")
            )));
        }
    }
    let selected: Vec<&Case> = CASES
        .iter()
        .filter(|case| match &only {
            Some(only) => only.contains(&case.name),
            None => (!options.host_only || case.tier == 1) && !OPT_IN.contains(&case.name),
        })
        .collect();
    let mut ctx = Context {
        ws,
        builder: Builder::new(ws),
        name: "",
        shares_default: false,
        stack: None,
        stack_failed: None,
        tree: None,
    };
    let (mut passed, mut failed) = (0usize, 0usize);
    for case in selected {
        ctx.name = case.name;
        ctx.shares_default = case.shares_default;
        if !case.shares_default {
            // Its own boot: stop the shared one (CPU time, the manager port).
            ctx.stack = None;
        }
        if !case.shares_default || (ctx.stack.is_none() && ctx.stack_failed.is_none()) {
            // A stale log from an earlier run must not be shown for this one
            // (but a failed shared boot's log stays for the later cases).
            let _ = std::fs::remove_file(ctx.log_path());
        }
        let started = Instant::now();
        let outcome = (case.run)(&mut ctx);
        let seconds = started.elapsed().as_secs_f64();
        match outcome {
            Ok(notes) => {
                for note in notes {
                    println!("  {}: {note}", case.name);
                }
                println!("PASS {} ({seconds:.1} s)", case.name);
                passed += 1;
            }
            Err(why) => {
                println!("FAIL {}: {why}", case.name);
                let log = ctx.log_path();
                let tail = log_tail(&log, TAIL_LINES);
                if !tail.is_empty() {
                    println!("  last {} lines of {}:", tail.len(), ws.relative(&log));
                    for line in tail {
                        println!("  | {line}");
                    }
                }
                failed += 1;
                if case.tier == 1 {
                    // Boot tests on top of broken units only add noise.
                    break;
                }
            }
        }
    }
    ctx.stack = None;
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        Ok(())
    } else {
        Err(XtaskError::TestsFailed { failed })
    }
}

/// The crates that only build for aarch64 bare metal, linted on that target.
const BARE_METAL_CRATES: [&str; 4] = [
    "platform",
    "tools/test-guest",
    "tools/guest-rootfs/pipebench",
    "manager/loader",
];

/// Tier 1: the host tools installed when missing (`Provisioner::host_tools`:
/// packages, the bare-metal target, clippy/rustfmt/llvm-tools), then
/// `cargo test` of the workspace's default members, then what the
/// house declares: `cargo fmt --check` over the workspace and `cargo clippy
/// -D warnings` for the host crates and for the bare-metal crates on their
/// target (the EL2 image also with the bench's ablation features), and both
/// for the Hermit application (its own workspace) with its pinned nightly.
/// An unformatted file or a clippy warning fails the tier.
fn host_tests(ctx: &mut Context<'_>) -> Outcome {
    let root = &ctx.ws.root;
    let fail = |what: &str, err: XtaskError| format!("{what}: {err}");
    // The bare-metal lints below need the aarch64 target and clippy before
    // any boot case has built an image (a fresh machine has neither).
    crate::provision::Provisioner::new()
        .host_tools()
        .map_err(|e| fail("installing the host tools", e))?;
    cmd::run(
        cmd::cargo()
            .current_dir(root)
            .args(["test", "--features", "pinfold-config/std"]),
    )
    .map_err(|e| fail("cargo test", e))?;
    cmd::run(
        cmd::cargo()
            .current_dir(root)
            .args(["fmt", "--all", "--check"]),
    )
    .map_err(|e| fail("cargo fmt --check (run `cargo fmt --all`)", e))?;
    cmd::run(cmd::cargo().current_dir(root).args([
        "clippy",
        "--all-targets",
        "--features",
        "pinfold-config/std",
        "--",
        "-D",
        "warnings",
    ]))
    .map_err(|e| fail("cargo clippy (host crates)", e))?;
    for krate in BARE_METAL_CRATES {
        cmd::run(cmd::cargo().current_dir(root.join(krate)).args([
            "clippy",
            "--release",
            "--target",
            crate::provision::BARE_TARGET,
            "--",
            "-D",
            "warnings",
        ]))
        .map_err(|e| {
            fail(
                &format!("cargo clippy ({krate}, {})", crate::provision::BARE_TARGET),
                e,
            )
        })?;
    }
    // The bench's ablations are features of the EL2 image: linted too, so
    // they build when the bench needs them.
    cmd::run(cmd::cargo().current_dir(root.join("platform")).args([
        "clippy",
        "--release",
        "--target",
        crate::provision::BARE_TARGET,
        "--features",
        &crate::bench::ABLATIONS.map(|a| a.feature).join(","),
        "--",
        "-D",
        "warnings",
    ]))
    .map_err(|e| fail("cargo clippy (platform, ablation features)", e))?;
    crate::hermit::lint_app(root).map_err(|e| format!("manager/app lints: {e}"))?;
    Ok(vec![String::from(
        "cargo test, cargo fmt --check, cargo clippy -D warnings (host, bare-metal and Hermit crates) clean",
    )])
}

/// Waits for a line containing `needle`, starting at line `from`.
fn expect(qemu: &QemuRun, needle: &str, from: usize, deadline: Instant) -> Result<Line, String> {
    qemu.wait_for(&format!("`{needle}`"), from, deadline, |line| {
        line.contains(needle)
    })
    .map_err(|err| err.to_string())
}

/// Waits for a guest's UP marker and checks its timer interrupt count.
fn expect_guest_up(
    qemu: &QemuRun,
    name: &str,
    cpus: u32,
    deadline: Instant,
) -> Result<Line, String> {
    let marker = format!("[{name}] PINFOLD-GUEST-UP name={name} cpus={cpus} timer_irqs=");
    let line = expect(qemu, &marker, 0, deadline)?;
    match number_after(&line.text, "timer_irqs=") {
        Some(count) if count > 0 => Ok(line),
        Some(_) => Err(format!("{name} saw no timer interrupts: `{}`", line.text)),
        None => Err(format!(
            "{name}'s marker has no timer_irqs count: `{}`",
            line.text
        )),
    }
}

/// The line the guest's init prints with its /proc/cmdline.
const CMDLINE_MARKER: &str = "PINFOLD-GUEST-CMDLINE name=";
/// The line the guest's init prints with Linux's `hw perfevents:` line.
const PMU_MARKER: &str = "PINFOLD-GUEST-PMU name=";
/// What Linux's arm_pmu driver prints once it probed (drivers/perf/arm_pmu.c:
/// "hw perfevents: enabled with %s PMU driver, %d counters available%s").
const PMU_PROBED: &str = "hw perfevents: enabled with ";

/// Whether `line` is `name`'s init reporting exactly `bootargs` as its
/// kernel command line.
fn cmdline_is(line: &str, name: &str, bootargs: &str) -> bool {
    let prefix = format!("[{name}] {CMDLINE_MARKER}{name} ");
    line.split_once(&prefix)
        .is_some_and(|(_, cmdline)| cmdline.trim_end() == bootargs.trim())
}

/// The PMU driver and counter count in `name`'s PMU line, if Linux's
/// PMU driver probed.
fn pmu_probed(line: &str, name: &str) -> Option<(String, u32)> {
    let prefix = format!("[{name}] {PMU_MARKER}{name} {PMU_PROBED}");
    let (_, rest) = line.split_once(&prefix)?;
    let (driver, rest) = rest.split_once(" PMU driver, ")?;
    let counters = rest.split_whitespace().next()?.parse().ok()?;
    rest.contains("counters available")
        .then(|| (driver.to_string(), counters))
}

/// The plan's bootargs of partition `name` in the default config.
fn default_bootargs(ctx: &Context<'_>, name: &str) -> Result<String, String> {
    let config = pinfold_config::load(&ctx.ws.resolve(Path::new(DEFAULT_CONFIG)))
        .map_err(|err| err.to_string())?;
    config
        .partitions
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.bootargs.clone())
        .ok_or_else(|| format!("{DEFAULT_CONFIG} has no partition {name}"))
}

/// Tier 2: the default plan boots both Linux partitions with working timers,
/// their kernel command lines exactly the plan's bootargs (the name comes
/// from the DTB), the hot path took no lock shared between CPUs, and
/// Linux's PMU driver probed in both.
fn boot_default(ctx: &mut Context<'_>) -> Outcome {
    let bootargs = [
        ("alpha", default_bootargs(ctx, "alpha")?),
        ("beta", default_bootargs(ctx, "beta")?),
    ];
    let qemu = &mut ctx.stack()?.qemu;
    let deadline = Instant::now() + Duration::from_secs(240);

    let alpha = expect_guest_up(qemu, "alpha", 1, deadline)?;
    let beta = expect_guest_up(qemu, "beta", 2, deadline)?;
    for (name, args) in &bootargs {
        let line = expect(
            qemu,
            &format!("[{name}] {CMDLINE_MARKER}{name} "),
            0,
            deadline,
        )?;
        if !cmdline_is(&line.text, name, args) {
            return Err(format!(
                "{name}'s kernel command line is not the plan's bootargs `{args}`: `{}`",
                line.text
            ));
        }
    }
    let from = qemu.lines().len();
    // Ctrl-A s: the hypervisor monitor prints its statistics.
    qemu.send(b"\x01s").map_err(|err| err.to_string())?;
    let stats = expect(
        qemu,
        "pinfold: stats hot_path_cross_cpu_locks=",
        from,
        deadline,
    )?;

    if number_after(&stats.text, "hot_path_cross_cpu_locks=") != Some(0) {
        return Err(format!(
            "the hot path took cross-CPU locks: `{}`",
            stats.text
        ));
    }
    let mut notes = vec![format!(
        "alpha up at {:.1} s, beta up at {:.1} s after QEMU start",
        alpha.at.as_secs_f64(),
        beta.at.as_secs_f64()
    )];
    // Needs the platform to show PMUVer and forward PPI 23 (hv::pmu).
    for name in ["alpha", "beta"] {
        let line = expect(qemu, &format!("[{name}] {PMU_MARKER}{name}"), 0, deadline)?;
        match pmu_probed(&line.text, name) {
            Some((driver, counters)) => {
                notes.push(format!("{name}: {driver} PMU, {counters} counters"))
            }
            None => {
                return Err(format!(
                    "{name}'s Linux did not probe its PMU driver: `{}`",
                    line.text
                ))
            }
        }
    }
    Ok(notes)
}

/// Probe checks that must each print a refusal. `pmu-el2-time` (the
/// hypervisor's EL2 time is not in the guest's cycle counter) needs the
/// platform to apply `hv::pmu` (MDCR_EL2, PMU traps).
const PROBE_CHECKS: [&str; 8] = [
    "read-outside-ram",
    "write-outside-ram",
    "enable-foreign-spi",
    "psci-cpu-on-foreign",
    "smc",
    "mgmt-call",
    "mgmt-bad-buffer",
    "pmu-el2-time",
];

/// The probe's line saying its cycle counter counts (it owns its CPU's PMU).
const PMU_COUNTS: &str = "[probe] PROBE pmu-cycles: counts";

/// Whether `line` is the probe reporting that `check` was refused.
fn is_refusal(line: &str, check: &str) -> bool {
    line.contains("[probe] PROBE ")
        && line
            .split_whitespace()
            .any(|word| word.trim_end_matches([':', ',']) == check)
        && line.contains("refused")
}

fn escaped_line(lines: &[Line]) -> Option<&Line> {
    lines
        .iter()
        .find(|line| line.text.contains("] PROBE ") && line.text.contains("ESCAPED"))
}

/// Tier 2: a partition cannot reach outside itself, and neither a hostile
/// probe nor a panicking Linux stops the others.
fn isolation(ctx: &mut Context<'_>) -> Outcome {
    let qemu = ctx.boot("vm-configs/qemu-virt/test-isolation.toml")?;
    let deadline = Instant::now() + Duration::from_secs(300);

    let done = expect(&qemu, "[probe] PROBE done", 0, deadline)?;
    let lines = qemu.lines();
    if let Some(line) = escaped_line(&lines) {
        return Err(format!("the probe escaped: `{}`", line.text));
    }
    for check in PROBE_CHECKS {
        if !lines[..=done.index]
            .iter()
            .any(|line| is_refusal(&line.text, check))
        {
            return Err(format!(
                "no `[probe] PROBE {check} ... refused` line before PROBE done"
            ));
        }
    }
    if !lines[..=done.index]
        .iter()
        .any(|line| line.text.contains(PMU_COUNTS))
    {
        return Err(format!("no `{PMU_COUNTS}` line before PROBE done"));
    }
    // The same probe as the management partition: its management calls are
    // answered, but a buffer past the end of its RAM is still refused.
    let mgmt_done = expect(&qemu, "[mgmtprobe] PROBE done", 0, deadline)?;
    let mgmt_lines = qemu.lines();
    let mgmt_lines = &mgmt_lines[..=mgmt_done.index];
    if !mgmt_lines
        .iter()
        .any(|l| l.text.contains("[mgmtprobe] PROBE mgmt-call: allowed"))
    {
        return Err("the management probe's ABI_VERSION call was not answered".into());
    }
    if !mgmt_lines.iter().any(|l| {
        l.text
            .contains("[mgmtprobe] PROBE mgmt-bad-buffer: refused")
            && l.text.contains("BAD_ADDRESS")
    }) {
        return Err(
            "the management probe's out-of-RAM buffer was not refused with BAD_ADDRESS".into(),
        );
    }
    let panicking = expect(&qemu, "[crash] PINFOLD-GUEST-PANICKING", 0, deadline)?;
    let panic = qemu
        .wait_for(
            "a `[crash] ` line with `Kernel panic`",
            panicking.index,
            deadline,
            |line| line.contains("[crash] ") && line.contains("Kernel panic"),
        )
        .map_err(|err| err.to_string())?;

    let after = done.index.max(panic.index) + 1;
    let first = expect(&qemu, "[steady] PINFOLD-GUEST-ALIVE", after, deadline)?;
    let second = expect(
        &qemu,
        "[steady] PINFOLD-GUEST-ALIVE",
        first.index + 1,
        deadline,
    )?;
    let alive = expect(&qemu, "[probe] PROBE alive", after, deadline)?;

    if let Some(line) = escaped_line(&qemu.lines()) {
        return Err(format!("the probe escaped: `{}`", line.text));
    }
    Ok(vec![format!(
        "probe done at {:.1} s, crash panicked at {:.1} s, steady alive at {:.1} s and {:.1} s, probe alive at {:.1} s",
        done.at.as_secs_f64(),
        panic.at.as_secs_f64(),
        first.at.as_secs_f64(),
        second.at.as_secs_f64(),
        alive.at.as_secs_f64()
    )])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_needs_the_probe_prefix_the_check_and_refused() {
        assert!(is_refusal("[probe] PROBE smc refused (SMC trapped)", "smc"));
        assert!(!is_refusal("[probe] PROBE smc ESCAPED", "smc"));
        assert!(!is_refusal("[steady] PROBE smc refused", "smc"));
    }

    #[test]
    fn refusal_accepts_a_colon_after_the_check_name() {
        let line =
            "[probe] PROBE psci-cpu-on-foreign: refused (CPU_ON MPIDR 2 -> INVALID_PARAMETERS)";

        assert!(is_refusal(line, "psci-cpu-on-foreign"));
    }

    #[test]
    fn refusal_matches_whole_check_names_only() {
        assert!(!is_refusal(
            "[probe] PROBE read-outside-ram-2 refused",
            "read-outside-ram"
        ));
    }

    #[test]
    fn escaped_line_is_found_only_in_probe_output() {
        let line = |text: &str, index| Line {
            index,
            at: Duration::ZERO,
            text: text.into(),
        };
        let lines = vec![
            line("[steady] ESCAPED", 0),
            line("[probe] PROBE smc ESCAPED", 1),
        ];

        assert_eq!(escaped_line(&lines).map(|l| l.index), Some(1));
        assert!(escaped_line(&lines[..1]).is_none());
    }

    #[test]
    fn cmdline_must_be_exactly_the_bootargs() {
        let line = "[alpha] PINFOLD-GUEST-CMDLINE name=alpha console=ttyAMA0 quiet\r";

        assert!(cmdline_is(line, "alpha", "console=ttyAMA0 quiet"));
        assert!(!cmdline_is(line, "alpha", "console=ttyAMA0"));
        assert!(!cmdline_is(line, "beta", "console=ttyAMA0 quiet"));
    }

    #[test]
    fn cmdline_with_an_appended_partition_name_is_not_the_bootargs() {
        let line =
            "[alpha] PINFOLD-GUEST-CMDLINE name=alpha console=ttyAMA0 pinfold.partition=alpha";

        assert!(!cmdline_is(line, "alpha", "console=ttyAMA0"));
    }

    #[test]
    fn pmu_probed_reads_driver_and_counters_from_linux_line() {
        let line = "[beta] PINFOLD-GUEST-PMU name=beta hw perfevents: enabled with \
                    armv8_cortex_a72 PMU driver, 7 counters available";

        assert_eq!(
            pmu_probed(line, "beta"),
            Some(("armv8_cortex_a72".to_string(), 7))
        );
    }

    #[test]
    fn pmu_not_probed_when_linux_printed_nothing() {
        assert_eq!(
            pmu_probed("[beta] PINFOLD-GUEST-PMU name=beta ", "beta"),
            None
        );
        assert_eq!(
            pmu_probed(
                "[beta] PINFOLD-GUEST-PMU name=beta hw perfevents: no PMU",
                "beta"
            ),
            None
        );
    }

    #[test]
    fn pmu_el2_time_refusal_is_a_probe_check() {
        let line = "[probe] PROBE pmu-el2-time: refused (EL2 time not counted: ...)";

        assert!(PROBE_CHECKS.iter().any(|check| is_refusal(line, check)));
        assert!(!is_refusal(
            "[probe] PROBE pmu-el2-time: ESCAPED (...)",
            "pmu-el2-time"
        ));
    }

    #[test]
    fn test_names_are_unique() {
        let mut names = names();
        names.sort();
        names.dedup();

        assert_eq!(names.len(), CASES.len());
    }
}
