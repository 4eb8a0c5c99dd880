//! Run-time partitions (`runtime`) against the fake hardware of the exit
//! tests: what a create, change or destroy may take, what it refuses (with
//! the build-time check's field and sentence), and what it gives back.

use super::*;
use crate::hypercall::Refusal;
use pinfold_abi::{AbiError, ImageKind, RamOwner};

/// The standard system without `alpha`: CPUs 1 and 2 are free.
fn spare() -> &'static System {
    let sys = system_with(|plan| {
        plan.partitions.remove(0);
    });
    for p in sys.partitions() {
        p.set_state(State::Stopped, 0);
    }
    sys
}

fn plan(name: &str, cpus: &[u32], mib: u64) -> PartitionPlan {
    PartitionPlan::new(
        name.into(),
        cpus.to_vec(),
        mib << 20,
        KernelPlan {
            image: 0,
            format: KernelFormat::Raw,
        },
    )
}

fn rejection(r: Result<u32, Refusal>) -> pinfold_abi::Rejection {
    match r {
        Err(Refusal::Rejected(r)) => r,
        other => panic!("not a rejection: {other:?}"),
    }
}

#[test]
fn a_partition_created_on_free_cpus_owns_them_and_its_ram() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let before = sys.resources();

    let index = sys
        .create_partition(plan("gamma", &[1, 2], 128), &mut hw, 0)
        .unwrap() as usize;

    let p = sys.partition(index).unwrap();
    assert_eq!(p.name, "gamma");
    assert_eq!(p.state(), State::Stopped, "not autostarted");
    assert_eq!(
        sys.assigned(2).map(|id| (id.partition, id.vcpu)),
        Some((index, 1))
    );
    let after = sys.resources();
    assert_eq!(after.cpus[1].partition, Some(index as u32));
    assert!(after
        .ram
        .iter()
        .any(|r| r.owner == RamOwner::Partition(index as u32)
            && r.base == p.ram.0
            && r.size == 128 << 20));
    assert_eq!(after.largest_free + (128 << 20), before.largest_free);
}

#[test]
fn a_cpu_another_partition_owns_is_refused_as_the_build_refuses_it() {
    let sys = spare();
    let mut hw = FakeHw::new();

    let r = rejection(sys.create_partition(plan("gamma", &[2, 3], 64), &mut hw, 0));

    assert_eq!(r.field, "cpus");
    assert_eq!(
        r.message,
        "partition \"gamma\": cpus: CPU 3 is also used by partition \"beta\""
    );
    assert!(r.conflict);
    assert!(sys.assigned(2).is_none(), "nothing half-created");
    assert_eq!(sys.partitions().len(), 2);
}

#[test]
fn a_taken_name_too_much_ram_and_boot_only_fields_are_refused_naming_the_field() {
    let sys = spare();
    let mut hw = FakeHw::new();

    let taken = rejection(sys.create_partition(plan("beta", &[1], 64), &mut hw, 0));
    assert_eq!((taken.field.as_str(), taken.conflict), ("name", true));

    let huge = rejection(sys.create_partition(plan("gamma", &[1], 8 << 10), &mut hw, 0));
    assert_eq!(huge.field, "memory");
    assert!(
        huge.message.contains("largest free block"),
        "{}",
        huge.message
    );

    let mut mgmt = plan("gamma", &[1], 64);
    mgmt.management = true;
    let m = rejection(sys.create_partition(mgmt, &mut hw, 0));
    assert_eq!(m.field, "management");

    let mut odd = plan("gamma", &[1], 3);
    odd.ram_size = 3 << 20;
    assert_eq!(
        rejection(sys.create_partition(odd, &mut hw, 0)).field,
        "memory"
    );
    assert_eq!(sys.partitions().len(), 2);
    assert!(hw.zeroed.is_empty());
}

#[test]
fn gic_v5_on_this_gicv3_host_is_refused_naming_gic_and_v3_gets_the_gicv3_interface() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let mut v5 = plan("gamma", &[1], 64);
    v5.gic = pinfold_config::GicSetting::V5;

    let r = rejection(sys.create_partition(v5, &mut hw, 0));
    assert_eq!(r.field, "gic");
    assert_eq!(
        r.message,
        "partition \"gamma\": gic: gic = \"v5\" needs a GICv5 host; this host has a GICv3"
    );
    assert!(!r.conflict);
    assert_eq!(sys.partitions().len(), 2, "nothing created");

    let mut v3 = plan("gamma", &[1], 64);
    v3.gic = pinfold_config::GicSetting::V3;
    let index = sys.create_partition(v3, &mut hw, 0).unwrap() as usize;
    assert_eq!(
        sys.partition(index).unwrap().gic,
        crate::vgic5::GicInterface::V3
    );
}

#[test]
fn a_kernel_that_is_not_an_image_or_does_not_exist_is_refused() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let mut linux = plan("gamma", &[1], 64);
    linux.kernel.format = KernelFormat::LinuxImage;

    let r = rejection(sys.create_partition(linux, &mut hw, 0));
    assert_eq!(r.field, "kernel");
    assert!(
        r.message.contains("lacks the arm64 Image magic"),
        "{}",
        r.message
    );

    let mut missing = plan("gamma", &[1], 64);
    missing.kernel.image = 7;
    let r = rejection(sys.create_partition(missing, &mut hw, 0));
    assert_eq!(
        r.message,
        "partition \"gamma\": kernel: image 7 does not exist"
    );
}

#[test]
fn destroy_scrubs_the_ram_frees_cpus_and_tables_and_the_next_create_reuses_them() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let index = sys
        .create_partition(plan("gamma", &[1, 2], 128), &mut hw, 0)
        .unwrap() as usize;
    let ram = sys.partition(index).unwrap().ram.0;
    let tables = hw.tables.live();
    assert!(tables > 0);

    sys.destroy_partition(index, &mut hw).unwrap();

    assert!(hw.zeroed.is_empty(), "the call answers before any zeroing");
    assert_eq!(hw.tables.live(), 0, "every table given back");
    assert!(sys.partition(index).is_none());
    assert!(sys.assigned(1).is_none() && sys.assigned(2).is_none());
    let scrubbing = sys.resources();
    assert!(scrubbing.ram.iter().any(|r| r.base == ram
        && r.size == 128 << 20
        && r.owner == RamOwner::Scrubbing { left: 128 << 20 }));
    // Its CPUs (idle now) are woken to scrub.
    assert!(hw.sgis.iter().any(|&(m, i)| m == 0x101 && i == SGI_MAILBOX));
    assert!(hw.sgis.iter().any(|&(m, i)| m == 0x102 && i == SGI_MAILBOX));
    let mut steps = 0;
    while sys.scrub_step(&mut hw) > 0 {
        steps += 1;
    }
    assert_eq!(steps + 1, 64, "128 MiB in 2 MiB steps");
    assert!(hw
        .zeroed
        .iter()
        .all(|&(_, len)| len == crate::scrub::SCRUB_CHUNK));
    assert_eq!(hw.zeroed.first(), Some(&(ram, 2 << 20)));
    assert_eq!(hw.zeroed.iter().map(|z| z.1).sum::<u64>(), 128 << 20);
    assert_eq!(sys.scrub_step(&mut hw), 0, "nothing left");
    assert_eq!(hw.zeroed.len(), 64, "and no more zeroing");
    let again = sys
        .create_partition(plan("delta", &[2], 128), &mut hw, 0)
        .unwrap() as usize;
    assert_eq!(again, index, "the lowest free slot");
    assert_eq!(
        sys.partition(again).unwrap().ram.0,
        ram,
        "the same block again"
    );
}

#[test]
fn a_running_partition_or_the_managers_cannot_be_destroyed_or_changed() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let beta = sys
        .partitions()
        .into_iter()
        .find(|p| p.name == "beta")
        .unwrap();
    beta.set_state(State::Running, 0);

    assert_eq!(
        sys.destroy_partition(beta.index, &mut hw),
        Err(AbiError::Conflict)
    );
    assert!(matches!(
        sys.configure_partition(beta.index, plan("beta", &[3], 64), &mut hw),
        Err(Refusal::Status(AbiError::Conflict))
    ));
    assert_eq!(sys.destroy_partition(9, &mut hw), Err(AbiError::NotFound));
}

#[test]
fn a_change_keeps_the_index_and_console_history_and_a_refused_one_changes_nothing() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let index = sys
        .create_partition(plan("gamma", &[1], 64), &mut hw, 0)
        .unwrap() as usize;
    sys.partition(index)
        .unwrap()
        .console
        .lock(LockPath::Management)
        .ring
        .push(b"first boot\n");

    let mut bigger = plan("gamma", &[1, 2], 256);
    bigger.bootargs = "console=ttyAMA0 quiet".into();
    sys.configure_partition(index, bigger, &mut hw).unwrap();

    let p = sys.partition(index).unwrap();
    assert_eq!((p.ram_size, p.vcpus.len()), (256 << 20, 2));
    assert_eq!(p.plan.bootargs, "console=ttyAMA0 quiet");
    let mut out = [0u8; 64];
    let read = p.console.lock(LockPath::Management).ring.read(0, &mut out);
    assert_eq!(&out[..read.len], b"first boot\n");
    assert_eq!(sys.assigned(2).map(|id| id.partition), Some(index));

    let clash = sys.configure_partition(index, plan("gamma", &[3], 64), &mut hw);
    assert!(matches!(clash, Err(Refusal::Rejected(ref r)) if r.field == "cpus"));
    assert_eq!(sys.partition(index).unwrap().ram_size, 256 << 20);
}

#[test]
fn an_uploaded_image_boots_a_new_partition_and_cannot_be_deleted_while_named() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let mut kernel = vec![0u8; 4096];
    kernel[56..60].copy_from_slice(b"ARM\x64");
    let id = sys.image_create(ImageKind::Kernel, 4096).unwrap();
    sys.image_write(id, 0, &kernel[..1000], &mut hw).unwrap();
    sys.image_write(id, 1000, &kernel[1000..], &mut hw).unwrap();
    sys.image_seal(id, Some(pinfold_config::bundle::sha256(&kernel)), &mut hw)
        .unwrap();
    let mut linux = plan("gamma", &[1], 64);
    linux.kernel = KernelPlan {
        image: id,
        format: KernelFormat::LinuxImage,
    };

    let index = sys.create_partition(linux, &mut hw, 0).unwrap();

    assert_eq!(sys.image_delete(id, &mut hw), Err(AbiError::Conflict));
    let info = sys.images().into_iter().find(|i| i.id == id).unwrap();
    assert_eq!(info.used_by, [index]);
    assert!(info.sealed && !info.boot);
    sys.destroy_partition(index as usize, &mut hw).unwrap();
    assert_eq!(sys.image_delete(id, &mut hw), Ok(()));
}

#[test]
fn an_unsealed_image_or_one_of_the_wrong_kind_cannot_be_booted() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let open = sys.image_create(ImageKind::Kernel, 16).unwrap();
    let mut p = plan("gamma", &[1], 64);
    p.kernel.image = open;
    assert!(rejection(sys.create_partition(p, &mut hw, 0))
        .message
        .contains("not complete"));

    let initrd = sys.image_create(ImageKind::Initrd, 16).unwrap();
    sys.image_write(initrd, 0, &[1; 16], &mut hw).unwrap();
    sys.image_seal(initrd, None, &mut hw).unwrap();
    let mut p = plan("gamma", &[1], 64);
    p.kernel.image = initrd;
    assert!(rejection(sys.create_partition(p, &mut hw, 0))
        .message
        .contains("is a initrd image"));
}

// --- lifecycle of partitions created at run time -------------------------

#[test]
fn a_partition_created_at_run_time_is_watched_and_restarted_as_its_plan_says() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let mut watched = plan("gamma", &[1], 64);
    watched.lifecycle.watchdog_s = 2;
    watched.lifecycle.restart = pinfold_config::RestartMode::OnCrash;
    let index = sys.create_partition(watched, &mut hw, 0).unwrap() as usize;
    let p = sys.partition(index).unwrap();

    sys.start_partition(&p, &mut hw, 0).unwrap();
    let mut cpu = Cpu::new(sys, 1);
    let boot = idle_work(sys, &mut cpu, &mut hw).expect("vCPU 0 boots");
    load(sys, &mut cpu, &mut hw, &boot);

    assert_eq!(p.state(), State::Running);
    assert_eq!(hw.wakeup, Some(hw.now + HALF_S), "its CPU checks it");
    let dtb = loaded_dtb(&hw, &p);
    let fdt = fdt::Fdt::new(&dtb).expect("parses");
    assert!(fdt.find_node("/watchdog@90b0000").is_some());
    assert!(fdt.find_node("/gpio-keys/poweroff").is_some());
    sys.crash_partition(&p, &mut hw, 1, "test");
    assert_eq!(p.state(), State::Crashed);
    assert_eq!(
        idle_deadline(sys, &cpu),
        Some(hw.now + 1000),
        "on-crash: restarted after 1 s"
    );
}

#[test]
fn a_run_time_plan_breaking_a_lifecycle_rule_is_refused_with_the_builds_sentence() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let mut long = plan("gamma", &[1], 64);
    long.lifecycle.watchdog_s = 4000;
    let r = rejection(sys.create_partition(long, &mut hw, 0));
    assert_eq!(r.field, "watchdog_s");
    assert_eq!(
        r.message,
        "partition \"gamma\": watchdog_s: 4000 is out of range: 0 (off) or 1..=3600 seconds"
    );
    assert!(!r.conflict);

    let mut wdog_spi = plan("gamma", &[1], 64);
    wdog_spi.devices.push(pinfold_config::DevicePlan {
        name: "d".into(),
        mmio: Vec::new(),
        spis: vec![92],
        compatible: None,
        host_node: None,
    });
    let r = rejection(sys.create_partition(wdog_spi, &mut hw, 0));
    assert_eq!(r.field, "device \"d\": spis");
    assert!(sys.assigned(1).is_none(), "nothing created");
}

#[test]
fn a_changed_crashed_partition_keeps_its_state_restart_count_and_last_crash() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let mut restarting = plan("gamma", &[1], 64);
    restarting.lifecycle.restart = pinfold_config::RestartMode::OnCrash;
    let index = sys.create_partition(restarting, &mut hw, 0).unwrap() as usize;
    let old = sys.partition(index).unwrap();
    sys.start_partition(&old, &mut hw, 0).unwrap();
    hw.now = 4000;
    sys.crash_partition(&old, &mut hw, 0, "watchdog");
    assert_eq!(
        (old.life.restarts(), old.life.restart_due().is_some()),
        (1, true)
    );
    drop(old);

    sys.configure_partition(index, plan("gamma", &[1, 2], 128), &mut hw)
        .unwrap();

    let p = sys.partition(index).unwrap();
    assert_eq!((p.state(), p.life.since()), (State::Crashed, 4000));
    assert_eq!(p.life.restarts(), 1);
    let crash = p.life.inner.lock(LockPath::Management).last_crash.clone();
    assert_eq!(
        crash.map(|c| (c.at, c.reason)),
        Some((4000, "watchdog".into()))
    );
    assert_eq!(
        p.life.restart_due(),
        None,
        "a change drops the pending restart"
    );
    sys.destroy_partition(index, &mut hw).unwrap();
    assert!(sys.partition(index).is_none(), "a crashed partition can go");
}

#[test]
fn create_change_and_destroy_are_config_events_and_a_new_partition_records_its_faults() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let index = sys
        .create_partition(plan("gamma", &[1, 2], 128), &mut hw, 0)
        .unwrap() as usize;
    let gamma = sys.partition(index).unwrap();
    crate::exit::fault(
        &gamma,
        &mut hw,
        crate::ratelimit::FaultKind::Other,
        format_args!("a test fault"),
    );
    drop(gamma);
    sys.configure_partition(index, plan("gamma", &[1, 2], 64), &mut hw)
        .unwrap();
    sys.destroy_partition(index, &mut hw).unwrap();

    let got: Vec<(pinfold_abi::EventKind, String)> = sys
        .events
        .read(0, 64 * 1024, |_| None)
        .events
        .into_iter()
        .filter(|e| e.partition.as_ref().is_some_and(|p| p.1 == "gamma"))
        .map(|e| (e.kind, e.message))
        .collect();
    use pinfold_abi::EventKind::{Config, Fault};
    assert_eq!(
        got,
        [
            (Config, "created: CPUs [1, 2], 128 MiB".to_string()),
            (Fault, "a test fault".to_string()),
            (Config, "changed: CPUs [1, 2], 64 MiB".to_string()),
            (Config, "destroyed".to_string()),
        ]
    );
}

#[test]
fn a_change_while_a_cpu_still_holds_the_partition_is_refused_and_changes_nothing() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let index = sys
        .create_partition(plan("gamma", &[1], 64), &mut hw, 0)
        .unwrap() as usize;
    // A CPU that has not dropped its clone yet (a put in flight).
    let held = sys.partition(index).unwrap();

    let r = sys.configure_partition(index, plan("gamma", &[1, 2], 128), &mut hw);

    assert!(
        matches!(r, Err(Refusal::Status(AbiError::Conflict))),
        "{r:?}"
    );
    let p = sys.partition(index).expect("still there");
    assert!(Arc::ptr_eq(&p, &held));
    assert_eq!(sys.assigned(1).map(|id| id.partition), Some(index));
    assert!(hw.zeroed.is_empty(), "nothing scrubbed");
}

#[test]
fn image_read_gives_a_sealed_images_bytes_within_bounds_only() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
    let id = sys.image_create(ImageKind::Initrd, 5000).unwrap();
    sys.image_write(id, 0, &bytes[..3000], &mut hw).unwrap();
    let mut out = [0u8; 4096];
    // Still being written: refused.
    assert_eq!(
        sys.image_read(id, 0, &mut out, &hw),
        Err(AbiError::Conflict)
    );
    sys.image_write(id, 3000, &bytes[3000..], &mut hw).unwrap();
    sys.image_seal(id, None, &mut hw).unwrap();
    // Read back in buffer-sized pieces, the last one short, then 0 at the end.
    let mut back = Vec::new();
    loop {
        let n = sys
            .image_read(id, back.len() as u64, &mut out, &hw)
            .unwrap();
        if n == 0 {
            break;
        }
        back.extend_from_slice(&out[..n]);
    }
    assert_eq!(back, bytes);
    assert_eq!(
        sys.image_read(id, 5001, &mut out, &hw),
        Err(AbiError::InvalidParameters)
    );
    assert_eq!(
        sys.image_read(id, u64::MAX, &mut out, &hw),
        Err(AbiError::InvalidParameters)
    );
    assert_eq!(
        sys.image_read(999, 0, &mut out, &hw),
        Err(AbiError::NotFound)
    );
    // A boot bundle image reads from the payload.
    let boot = sys.images().into_iter().find(|i| i.boot).unwrap();
    let n = sys.image_read(boot.id, 0, &mut out, &hw).unwrap();
    assert_eq!(n as u64, boot.size.min(4096));
}

#[test]
fn with_a_config_store_autostart_is_held_until_config_applied_or_its_time() {
    let sys = system_with(|plan| {
        for p in &mut plan.partitions {
            if p.management {
                p.config_store = Some("http://10.0.2.2:18402/hosts/x/".into());
            }
        }
    });
    assert!(sys.has_config_store());
    assert!(!system().has_config_store());
    let mut hw = FakeHw::new();
    for p in sys.partitions() {
        p.set_state(State::Stopped, 0);
    }
    let parts = sys.partitions();
    let alpha = parts.iter().find(|p| p.name == "alpha").unwrap();
    let beta = parts.iter().find(|p| p.name == "beta").unwrap();
    sys.hold_autostart(alpha, 1000);
    sys.hold_autostart(beta, 1000);
    assert_eq!(alpha.life.restart_due(), Some(1000));
    // The timeout path: due at 1000 and not before (the idle loop's check).
    assert!(!sys.take_restart_due(beta, 999));
    assert!(sys.take_restart_due(beta, 1000));
    // beta started by its hold's timeout has run: CONFIG_APPLIED leaves it.
    beta.boot_count.store(1, Ordering::Release);
    // CONFIG_APPLIED: alpha (held, never ran) starts now; once only.
    assert_eq!(sys.release_held(&mut hw, 0), 1);
    assert!(alpha.state() != State::Stopped, "{:?}", alpha.state());
    assert_eq!(alpha.life.restart_due(), None);
    assert_eq!(sys.release_held(&mut hw, 0), 0);
}

/// RAM that only a scrubbing range can give: the create is refused, saying
/// so, until the last chunk is zeroed, and then sees nothing of the old
/// owner's data. Fails if RAM goes to the free pool before it is zeroed.
#[test]
fn a_create_racing_the_scrub_is_refused_until_the_ram_is_wholly_zeroed() {
    let sys = spare();
    let mut hw = FakeHw::sparse();
    let size = sys.resources().largest_free;
    let mib = size >> 20;
    let gamma = sys
        .create_partition(plan("gamma", &[1], mib), &mut hw, 0)
        .unwrap() as usize;
    let ram = sys.partition(gamma).unwrap().ram.0;
    // The old owner's data in every chunk, first and last byte.
    let chunk = crate::scrub::SCRUB_CHUNK;
    for at in (ram..ram + size).step_by(chunk as usize) {
        hw.write(PhysAddr(at), &[0x5a]);
        hw.write(PhysAddr(at + chunk - 1), &[0xa5]);
    }
    assert_eq!(hw.nonzero_in(ram, size) as u64, 2 * size / chunk);
    sys.destroy_partition(gamma, &mut hw).unwrap();

    let mut refused = 0u64;
    let delta = loop {
        match sys.create_partition(plan("delta", &[2], mib), &mut hw, 0) {
            Ok(index) => break index as usize,
            Err(r) => {
                let r = rejection(Err(r));
                assert_eq!((r.field.as_str(), r.conflict), ("memory", true));
                assert!(r.message.contains("still being scrubbed"), "{}", r.message);
                refused += 1;
                let left = sys.resources().ram.iter().find_map(|r| match r.owner {
                    RamOwner::Scrubbing { left } => Some(left),
                    _ => None,
                });
                assert_eq!(left, Some(size - (refused - 1) * chunk));
                assert!(sys.scrub_step(&mut hw) < size, "a step zeroes");
            }
        }
    };
    assert_eq!(
        refused,
        size / chunk,
        "refused until the last chunk is zeroed"
    );
    let p = sys.partition(delta).unwrap();
    assert_eq!(p.ram.0, ram, "the scrubbed block");
    assert_eq!(hw.nonzero_in(ram, size), 0, "none of gamma's data");
}

#[test]
fn the_idle_loop_scrubs_without_the_lock_when_nothing_is_queued_and_never_waits_for_it() {
    let sys = spare();
    let mut hw = FakeHw::on_cpu(1);
    let taken = |sys: &System| sys.locks.count(LockPath::Management);
    let before = taken(sys);
    assert!(!sys.idle_scrub(&mut hw), "nothing to do");
    assert_eq!(taken(sys), before, "and no lock taken for it");

    let index = sys
        .create_partition(plan("gamma", &[1], 4), &mut hw, 0)
        .unwrap() as usize;
    sys.destroy_partition(index, &mut hw).unwrap();
    hw.zeroed.clear();
    {
        let _busy = sys.pool.lock(LockPath::Management);
        assert!(sys.idle_scrub(&mut hw), "pending: comes back later");
        assert!(hw.zeroed.is_empty(), "without waiting for the lock");
    }
    assert!(sys.idle_scrub(&mut hw), "2 of 4 MiB zeroed");
    assert!(!sys.idle_scrub(&mut hw), "all zeroed");
    assert_eq!(hw.zeroed.len(), 2);
    assert!(!sys
        .resources()
        .ram
        .iter()
        .any(|r| matches!(r.owner, RamOwner::Scrubbing { .. })));
}

#[test]
fn a_change_that_fits_only_in_its_own_old_ram_zeroes_it_at_once() {
    let sys = spare();
    let mut hw = FakeHw::sparse();
    let mib = sys.resources().largest_free >> 20;
    let index = sys
        .create_partition(plan("gamma", &[1], mib), &mut hw, 0)
        .unwrap() as usize;
    let ram = sys.partition(index).unwrap().ram.0;
    hw.write(PhysAddr(ram + 4096), &[0x77]);

    sys.configure_partition(index, plan("gamma", &[1, 2], mib), &mut hw)
        .unwrap();

    let p = sys.partition(index).unwrap();
    assert_eq!((p.ram.0, p.vcpus.len()), (ram, 2));
    assert_eq!(hw.nonzero_in(ram, mib << 20), 0, "zeroed before reuse");
    assert!(!sys
        .resources()
        .ram
        .iter()
        .any(|r| matches!(r.owner, RamOwner::Scrubbing { .. })));
}

#[test]
fn a_change_with_room_elsewhere_moves_and_scrubs_the_old_ram_later() {
    let sys = spare();
    let mut hw = FakeHw::new();
    let index = sys
        .create_partition(plan("gamma", &[1], 64), &mut hw, 0)
        .unwrap() as usize;
    let old = sys.partition(index).unwrap().ram.0;

    sys.configure_partition(index, plan("gamma", &[1], 64), &mut hw)
        .unwrap();

    assert!(hw.zeroed.is_empty(), "the call did not zero");
    assert_ne!(sys.partition(index).unwrap().ram.0, old);
    assert!(sys
        .resources()
        .ram
        .iter()
        .any(|r| r.base == old && r.owner == RamOwner::Scrubbing { left: 64 << 20 }));
}

#[test]
fn devices_the_hypervisor_keeps_or_a_partition_holds_are_not_free() {
    use crate::runtime::device_owner;
    use pinfold_config::isolation::{DeviceRegion, HostResources};
    let region = |node: &str, base: u64| DeviceRegion {
        node: node.into(),
        base,
        size: 0x1000,
    };
    let host = HostResources {
        devices: vec![
            region("/intc@8000000", 0x800_0000),
            region("/pl011@9000000", 0x900_0000),
            region("/pcie@10000000", 0x1000_0000),
            region("/pl061@9030000", 0x903_0000),
            region("/pl011@9040000", 0x904_0000),
        ],
        gic: vec![(0x800_0000, 0x1_0000)],
        hypervisor: vec![(0x900_0000, 0x1000)],
        pcie: vec![(0x1000_0000, 0x1000_0000)],
        ..Default::default()
    };
    let mut mgmt = plan("mgmt", &[0], 64);
    mgmt.pci_host_bridge = true;
    let mut uart = plan("uart", &[1], 64);
    uart.devices.push(pinfold_config::DevicePlan {
        name: "uart1".into(),
        mmio: vec![pinfold_config::MmioRange {
            base: 0x904_0000,
            size: 0x1000,
        }],
        spis: Vec::new(),
        compatible: None,
        host_node: None,
    });
    let owners = |plans: &[(u32, &PartitionPlan)]| -> Vec<(Option<u32>, bool)> {
        host.devices
            .iter()
            .map(|d| {
                let o = device_owner(d, &host, plans);
                (o.partition, o.hypervisor)
            })
            .collect()
    };

    assert_eq!(
        owners(&[(0, &mgmt), (1, &uart)]),
        [
            (None, true),
            (None, true),
            (Some(0), false),
            (None, false),
            (Some(1), false)
        ]
    );
    // With no partition owning the bridge, it is still not free.
    assert_eq!(
        owners(&[]),
        [
            (None, true),
            (None, true),
            (None, true),
            (None, false),
            (None, false)
        ]
    );
}

#[test]
fn a_pci_function_moves_to_a_run_time_partition_only_once_its_holder_is_gone() {
    use crate::pci::Bdf;
    use crate::vpci::{BarSpace, HostBar, HostFunction};
    let nic = pinfold_config::plan::PciAddress {
        segment: 0,
        bus: 0,
        device: 2,
        function: 0,
    };
    let (sys, mut hw) = smmu_system_with(
        |plan| {
            // CPU 3 free for the new partitions.
            plan.partitions.retain(|p| p.name != "beta");
            plan.partitions[0].pci = alloc::vec![nic];
        },
        alloc::vec![HostFunction {
            bdf: Bdf {
                bus: 0,
                dev: 2,
                func: 0,
            },
            vendor: 0x1af4,
            device: 0x1041,
            class: 0x02_0000,
            bridge: false,
            pin: 0,
            bars: alloc::vec![HostBar {
                reg: 1,
                space: BarSpace::Mem32,
                prefetchable: false,
                size: 0x1000,
            }],
            caps: Vec::new(),
            msi_vectors: 3,
            vf: None,
        }],
    );
    for p in sys.partitions() {
        p.set_state(State::Stopped, 0);
    }
    let alpha = sys.partitions().into_iter().find(|p| p.name == "alpha");
    let alpha = alpha.expect("alpha").index;
    let mut gamma = plan("gamma", &[3], 64);
    gamma.pci = alloc::vec![nic];

    let r = rejection(sys.create_partition(gamma.clone(), &mut hw, 0));
    assert_eq!(r.field, "pci[0]");
    assert_eq!(
        r.message,
        "partition \"gamma\": pci[0]: 0000:00:02.0 is already assigned to partition \"alpha\""
    );
    assert!(r.conflict);

    sys.destroy_partition(alpha, &mut hw).unwrap();
    let index = sys.create_partition(gamma, &mut hw, 0).unwrap() as usize;
    let p = sys.partition(index).unwrap();
    assert!(p.vpci.is_some(), "gamma got 00:02.0");
    assert_eq!(p.ram_ipa, p.ram.0, "IPA == PA with a function");
    // Its MSI path is said on the log as at boot (no host ITS here).
    assert!(
        hw.log
            .iter()
            .any(|l| l.starts_with("partition gamma: INTx only")),
        "{:?}",
        hw.log
    );

    let mut delta = plan("delta", &[1], 64);
    delta.pci = alloc::vec![nic];
    let r = rejection(sys.create_partition(delta, &mut hw, 0));
    assert_eq!((r.field.as_str(), r.conflict), ("pci[0]", true));
    assert!(r
        .message
        .ends_with("is already assigned to partition \"gamma\""));
}

#[test]
fn a_boot_plan_entry_asking_for_gic_v5_on_a_gicv3_host_is_not_created() {
    let sys = system_with(|plan| plan.partitions[1].gic = pinfold_config::GicSetting::V5);

    let names: Vec<String> = sys.partitions().iter().map(|p| p.name.clone()).collect();
    assert_eq!(names, ["alpha", "mgmt"]);
    assert!(sys
        .partitions()
        .iter()
        .all(|p| p.gic == crate::vgic5::GicInterface::V3));
    assert_eq!(
        crate::partition::SetupError::Gic("needs a GICv5 host").to_string(),
        "gic: needs a GICv5 host"
    );
}

/// alpha given 00:02.0 (a virtio NIC that, in the fake's configuration
/// space, has no reset method), stopped, with bus mastering and MSI left
/// on as a running driver leaves them; the address of the function's MSI
/// Message Control (only the reset clears its enable: `vpci::program`
/// writes COMMAND and the BARs, never MSI).
fn alpha_with_a_function() -> (&'static System, FakeHw, Arc<Partition>, u64) {
    let nic = crate::pci::Bdf {
        bus: 0,
        dev: 2,
        func: 0,
    };
    let (sys, mut hw) = smmu_system_with(alpha_gets_00_02_0, alloc::vec![nic_function(nic)]);
    for p in sys.partitions() {
        p.set_state(State::Stopped, 0);
    }
    let alpha = sys
        .partitions()
        .into_iter()
        .find(|p| p.name == "alpha")
        .expect("alpha");
    let ecam = 0x40_1000_0000 + nic.ecam_offset(0);
    hw.put_function(ecam, 0x1af4, 0x1041, 0x02_0000, 0x0007);
    (sys, hw, alpha, ecam + 0x42)
}

/// Where in `trace` the reset cleared MSI Enable at `msi_control`.
fn reset_at(trace: &[Traced], msi_control: u64) -> Option<usize> {
    trace.iter().position(|t| {
        matches!(*t, Traced::ConfigWrite { pa, value, .. } if pa == msi_control && value & 1 == 0)
    })
}

#[test]
fn a_deleted_partitions_functions_are_reset_before_its_ram_is_scrubbed() {
    let (sys, mut hw, alpha, msi_control) = alpha_with_a_function();
    let (index, ram, size) = (alpha.index, alpha.ram.0, alpha.ram_size);
    drop(alpha);

    sys.destroy_partition(index, &mut hw).unwrap();
    while sys.scrub_step(&mut hw) > 0 {}

    let reset = reset_at(&hw.trace, msi_control).expect("its function was reset");
    let first_zero = hw
        .trace
        .iter()
        .position(|t| matches!(*t, Traced::Zero { pa, len } if pa < ram + size && pa + len > ram))
        .expect("its RAM was scrubbed");
    assert!(
        reset < first_zero,
        "reset at {reset}, scrub from {first_zero}"
    );
    assert!(hw.log_has("partition alpha (delete): pci 00:02.0"));
}

#[test]
fn a_restarted_partitions_functions_are_reset_before_its_images_are_written() {
    let (sys, mut hw, alpha, msi_control) = alpha_with_a_function();
    let (ram, size) = (alpha.ram.0, alpha.ram_size);

    sys.start_partition(&alpha, &mut hw, 1).unwrap();

    let reset = reset_at(&hw.trace, msi_control).expect("its function was reset");
    let first_write = hw
        .trace
        .iter()
        .position(|t| matches!(*t, Traced::RamWrite { pa, .. } if (ram..ram + size).contains(&pa)))
        .expect("its images were written");
    assert!(
        reset < first_write,
        "reset at {reset}, first RAM write at {first_write}"
    );
    assert!(hw.log_has("partition alpha (start): pci 00:02.0"));
}

/// The vIRS is planned once at boot: on a GICv5 host a partition made (or
/// changed) at run time with the GICv5 interface is refused naming `gic`,
/// and nothing is created; the GICv3-compatible interface is still given.
#[test]
fn a_gicv5_partition_at_run_time_is_refused_naming_gic() {
    let sys = super::gicv5_system(true, |plan| {
        plan.partitions.remove(0);
    });
    for p in sys.partitions() {
        p.set_state(State::Stopped, 0);
    }
    let mut hw = FakeHw::new();
    let before = sys.partitions().len();

    let r = rejection(sys.create_partition(plan("gamma", &[1], 64), &mut hw, 0));
    assert_eq!(r.field, "gic");
    assert!(r.message.starts_with("partition \"gamma\": gic: a partition with the GICv5 interface can only be in the boot plan"), "{}", r.message);
    assert_eq!(sys.partitions().len(), before, "nothing created");
    assert!(hw.zeroed.is_empty());

    let mut v3 = plan("gamma", &[1], 64);
    v3.gic = pinfold_config::GicSetting::V3;
    let index = sys.create_partition(v3, &mut hw, 0).unwrap() as usize;
    assert_eq!(
        sys.partition(index).unwrap().gic,
        crate::vgic5::GicInterface::V3
    );
}

/// A destroyed boot partition with the GICv5 interface gives its SPIs back
/// to the physical domain and its VM up (`vgic5::release_virs`), so a
/// `gicv3` partition later given one of them receives it; a `gicv3` one
/// has nothing in the vIRS.
#[test]
fn destroying_a_gicv5_partition_releases_its_vm_and_spis_in_the_irs() {
    // alpha (0) gicv3, beta (1) gicv5 with SPI 40 (core INTID 72).
    let sys = super::gicv5_system(true, |plan| {
        plan.partitions[0].gic = pinfold_config::GicSetting::V3;
        plan.partitions[1].devices.push(pinfold_config::DevicePlan {
            name: "dev".into(),
            mmio: vec![pinfold_config::MmioRange {
                base: 0x904_0000,
                size: 0x1000,
            }],
            spis: vec![72],
            compatible: None,
            host_node: None,
        });
    });
    for p in sys.partitions() {
        p.set_state(State::Stopped, 0);
    }
    let mut hw = FakeHw::new();

    sys.destroy_partition(0, &mut hw).unwrap();
    let after_gicv3 = hw.virs_applied.len();
    sys.destroy_partition(1, &mut hw).unwrap();

    assert_eq!(after_gicv3, 0, "a gicv3 partition has no VM");
    assert_eq!(
        hw.virs_applied,
        [(
            1,
            vec![
                crate::vgic5::VirsOp::ReleaseSpi { spi: 40 },
                crate::vgic5::VirsOp::UnmapVm { vm: 1 }
            ]
        )]
    );
    let mut v3 = plan("gamma", &[3], 64);
    v3.gic = pinfold_config::GicSetting::V3;
    v3.devices.push(pinfold_config::DevicePlan {
        name: "dev".into(),
        mmio: vec![],
        spis: vec![72],
        compatible: None,
        host_node: None,
    });
    let gamma = sys.create_partition(v3, &mut hw, 0).unwrap() as usize;
    assert_eq!(sys.partition(gamma).unwrap().spis, [72], "the SPI is free");
}
