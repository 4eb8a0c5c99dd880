//! Partitions made, changed and destroyed while the machine runs, and the
//! images they boot: what the management calls PARTITION_CREATE,
//! _CONFIGURE, _DESTROY, IMAGE_* and RESOURCES decide. The hypervisor stays
//! the only authority on resources: every request is checked here with the
//! same rules the build-time plan check runs (`pinfold_config::rules`,
//! against every partition that exists), the same isolation rule the boot
//! ran (`pinfold_config::isolation`, against the host), and the same image
//! placement (`fit`), whatever the manager checked before. The plan's
//! `gic` is checked against the host's GIC as at boot, and the GICv5
//! interface is boot-plan only (its VM in the IRS is planned once, at
//! boot: `vgic5::plan_boot_virs`).
//!
//! All of it runs under the pool lock (`System::pool`), so two decisions
//! never interleave; a partition's RAM comes from the free pool and, when
//! the partition is destroyed or replaced and no CPU holds it any more,
//! goes to the scrub queue (`scrub`), not to the free pool: it is zeroed
//! in 2 MiB steps after the call answered (`System::scrub_step`, from idle
//! CPUs and after each management call) and is free only once wholly
//! zeroed. A create that would need RAM still being zeroed is refused with
//! a sentence saying so (it never waits: the call stays short and the
//! caller retries); a change that can only fit in its own old RAM zeroes
//! it at once, as the only case that waits. Only a stopped or crashed
//! partition is changed or destroyed; a changed one carries over its
//! console, counts and lifecycle record (`Partition::carry_over`).

use crate::addr::PhysAddr;
use crate::exit::Hw;
use crate::hypercall::Refusal;
use crate::lockstat::LockPath;
use crate::partition::Partition;
use crate::scrub::SCRUB_CHUNK;
use crate::stage2::Stage2;
use crate::system::{Pool, System};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use pinfold_abi::EventKind;
use pinfold_abi::{
    AbiError, CpuOwner, DeviceOwner, ImageInfo, ImageKind, RamOwner, RamRange, Rejection,
    Resources, Transition,
};
use pinfold_config::fit::{place_images, IMAGE_HEADER_LEN};
use pinfold_config::isolation::{DeviceRegion, HostResources};
use pinfold_config::rules::{check_partition, HostLimits};
use pinfold_config::{KernelFormat, PartitionPlan};
use pinfold_vboard::RAM_ALIGN;

/// Offset and value of the arm64 Image magic ("ARM\x64").
const IMAGE_MAGIC_OFFSET: usize = 56;
const IMAGE_MAGIC: [u8; 4] = *b"ARM\x64";

fn rejected(plan: &PartitionPlan, field: &str, message: String, conflict: bool) -> Refusal {
    Refusal::Rejected(Rejection {
        field: field.to_string(),
        message: format!("partition \"{}\": {field}: {message}", plan.name),
        conflict,
    })
}

impl System {
    /// What only the boot plan may give, and the rules every plan obeys,
    /// checked against every partition but `replacing`.
    fn check_plan(
        &self,
        pool: &Pool,
        plan: &PartitionPlan,
        replacing: Option<usize>,
        hw: &impl Hw,
    ) -> Result<(), Refusal> {
        for (set, field) in [
            (plan.management, "management"),
            (plan.pci_host_bridge, "pci_host_bridge"),
            (plan.token_sha256.is_some(), "token_sha256"),
        ] {
            if set {
                return Err(rejected(
                    plan,
                    field,
                    String::from("only the boot plan can set it"),
                    false,
                ));
            }
        }
        let existing = self.partitions();
        let others: Vec<&PartitionPlan> = existing
            .iter()
            .filter(|p| Some(p.index) != replacing)
            .map(|p| &p.plan)
            .collect();
        let limits = HostLimits {
            board: "this host",
            cpus: self.cpus.len() as u32,
        };
        let refused = |r: pinfold_config::rules::Rejection| {
            Refusal::Rejected(Rejection {
                field: r.field.clone(),
                message: r.to_string(),
                conflict: r.conflict(),
            })
        };
        check_partition(plan, &others, &limits).map_err(refused)?;
        let gic = crate::gichost::interface_for(plan, &self.host.gic.found).map_err(refused)?;
        // The vIRS (each gicv5 partition's VM in the IRS, its SPIs assigned
        // to it) is planned once at boot (`vgic5::plan_boot_virs`) and not
        // torn down or re-planned at run time: a gicv5 partition made or
        // changed now would have no VM, or inherit a destroyed one's.
        if gic == crate::vgic5::GicInterface::V5 {
            return Err(rejected(
                plan,
                "gic",
                String::from(
                    "a partition with the GICv5 interface can only be in the boot plan: its VM in the IRS is set up once at boot; ask for gic = \"v3\" (on a host with FEAT_GCIE_LEGACY) or put it in the plan",
                ),
                false,
            ));
        }
        let mut all: Vec<PartitionPlan> = others.into_iter().cloned().collect();
        all.push(plan.clone());
        if let Err(e) = pinfold_config::isolation::check_isolation(&all, &self.resources) {
            return Err(rejected(plan, "devices", e.to_string(), true));
        }
        self.check_images(pool, plan, hw)
    }

    /// The kernel and initrd exist, are sealed, are of their kind, and fit
    /// the RAM as the load will place them.
    fn check_images(&self, pool: &Pool, plan: &PartitionPlan, hw: &impl Hw) -> Result<(), Refusal> {
        let image = |id: u32, kind: ImageKind, field: &str| {
            let missing =
                |what: &str| Err(rejected(plan, field, format!("image {id} {what}"), false));
            match pool.images.get(id) {
                None => missing("does not exist"),
                Some(i) if !i.sealed() => missing("is not complete (not sealed)"),
                Some(i) if i.kind != kind => missing(&format!("is a {} image", i.kind.name())),
                Some(_) => Ok(pool.images.view(id)),
            }
        };
        let kernel = image(plan.kernel.image, ImageKind::Kernel, "kernel")?
            .ok_or(AbiError::InvalidParameters)?;
        let initrd = match plan.initrd {
            Some(id) => {
                Some(image(id, ImageKind::Initrd, "initrd")?.ok_or(AbiError::InvalidParameters)?)
            }
            None => None,
        };
        let mut head = [0u8; IMAGE_HEADER_LEN];
        let n = kernel.head(hw, &mut head);
        if plan.kernel.format == KernelFormat::LinuxImage
            && head.get(IMAGE_MAGIC_OFFSET..IMAGE_MAGIC_OFFSET + 4) != Some(&IMAGE_MAGIC[..])
        {
            return Err(rejected(
                plan,
                "kernel",
                format!(
                    "image {} lacks the arm64 Image magic \"ARM\\x64\" at byte 56 (kernel_format = \"linux\")",
                    plan.kernel.image
                ),
                false,
            ));
        }
        place_images(
            &head[..n],
            kernel.len(),
            plan.kernel.format,
            initrd.map(|i| i.len()),
            plan.ram_size,
        )
        .map_err(|fit| {
            rejected(
                plan,
                "memory",
                format!(
                    "{} is too small: {fit}",
                    pinfold_config::rules::Size(plan.ram_size)
                ),
                false,
            )
        })?;
        Ok(())
    }

    /// PARTITION_CREATE: a new stopped partition from `plan` in the lowest
    /// free slot (started at once if it says `autostart`).
    pub fn create_partition(
        &self,
        plan: PartitionPlan,
        hw: &mut impl Hw,
        me: usize,
    ) -> Result<u32, Refusal> {
        let mut pool = self.pool.lock(LockPath::Management);
        self.reap(&mut pool, hw);
        self.check_plan(&pool, &plan, None, hw)?;
        let index = (0..self.slot_count())
            .find(|&i| self.partition(i).is_none())
            .ok_or_else(|| {
                rejected(
                    &plan,
                    "name",
                    format!("this host holds at most {} partitions", self.slot_count()),
                    true,
                )
            })?;
        let p = self.build(&mut pool, index, &plan, hw)?;
        drop(pool);
        self.install(p.clone());
        self.program_partition_spis(&p, hw);
        hw.log(format_args!(
            "partition {}: created: {}",
            p.name,
            p.placement()
        ));
        if let Some(line) = p.msi_line() {
            hw.log(format_args!("{line}"));
        }
        self.event(
            hw,
            EventKind::Config,
            Some(&p),
            format_args!("created: CPUs {:?}, {} MiB", p.plan.cpus, p.ram_size >> 20),
        );
        if p.plan.autostart {
            let _ = self.start_partition(&p, hw, me);
        }
        Ok(index as u32)
    }

    /// RAM, tables and the partition object for `plan` in slot `index`.
    fn build(
        &self,
        pool: &mut Pool,
        index: usize,
        plan: &PartitionPlan,
        hw: &mut impl Hw,
    ) -> Result<Arc<Partition>, Refusal> {
        let largest = pool.free.largest(RAM_ALIGN);
        if plan.ram_size > largest && !pool.scrub.is_empty() {
            let mut after = pool.free.clone();
            for d in pool.scrub.ranges() {
                after.give_back(d.base, d.size);
            }
            if plan.ram_size <= after.largest(RAM_ALIGN) {
                return Err(rejected(
                    plan,
                    "memory",
                    format!(
                        "{} do not fit yet: the largest free block of host RAM is {} and {} of freed RAM are still being scrubbed (zeroed before reuse); retry once RESOURCES shows no RAM \"scrubbing\"",
                        pinfold_config::rules::Size(plan.ram_size),
                        pinfold_config::rules::Size(largest),
                        pinfold_config::rules::Size(pool.scrub.left())
                    ),
                    true,
                ));
            }
        }
        if plan.ram_size > largest {
            return Err(rejected(
                plan,
                "memory",
                format!(
                    "{} do not fit: the largest free block of host RAM is {}",
                    pinfold_config::rules::Size(plan.ram_size),
                    pinfold_config::rules::Size(largest)
                ),
                true,
            ));
        }
        let existing = self.partitions();
        let mut held = crate::partition::pci_held(
            &self.pci_functions,
            existing.iter().filter(|p| p.index != index).map(|p| &**p),
        );
        held.its = self.its.as_ref();
        held.vsgi = self.vsgi.is_some();
        let tables = hw.tables();
        let mut p = Partition::build(
            index,
            plan,
            &self.host,
            &mut pool.free,
            tables,
            self.locks,
            &held,
        )
        .map_err(|e| match e {
            crate::partition::SetupError::Pci(a) => {
                let conflict = matches!(
                    a.problem,
                    crate::vpci::AssignProblem::IntxShared { .. }
                        | crate::vpci::AssignProblem::NoRoom { .. }
                );
                let field = format!("pci[{}]", a.index);
                let mut r = rejected(plan, &field, String::new(), conflict);
                if let Refusal::Rejected(rej) = &mut r {
                    rej.message = format!("partition \"{}\": {a}", plan.name);
                }
                r
            }
            crate::partition::SetupError::Gic(reason) => {
                rejected(plan, "gic", String::from(reason), false)
            }
            e => rejected(plan, "memory", e.to_string(), true),
        })?;
        p.events = Some(self.events.clone());
        Ok(Arc::new(p))
    }

    /// PARTITION_CONFIGURE: replace stopped partition `index` by one built
    /// from `plan`, in the same slot (same index and VMID); its console
    /// history, boot count and fault count carry over. Nothing changes if
    /// the new plan is refused.
    pub fn configure_partition(
        &self,
        index: usize,
        plan: PartitionPlan,
        hw: &mut impl Hw,
    ) -> Result<(), Refusal> {
        let mut pool = self.pool.lock(LockPath::Management);
        self.reap(&mut pool, hw);
        let current = self.partition(index).ok_or(AbiError::NotFound)?;
        if !current.state().abi().allows(Transition::Configure) || !current.all_off() {
            return Err(AbiError::Conflict.into());
        }
        drop(current);
        self.check_plan(&pool, &plan, Some(index), hw)?;
        // The new RAM may overlap the old (same size, same place): take the
        // old partition out first, and put it back if the new one cannot be
        // built.
        let old = self.uninstall(index).ok_or(AbiError::NotFound)?;
        let old = match wait_unique(old) {
            Ok(old) => old,
            Err(old) => {
                // Back as it was: a change either happens or not at all.
                hw.log(format_args!(
                    "partition {}: still held by a CPU; not changed",
                    old.name
                ));
                self.install(old);
                return Err(AbiError::Conflict.into());
            }
        };
        self.release(&mut pool, &old, hw);
        let mut built = self.build(&mut pool, index, &plan, hw);
        if built.is_err() && !pool.scrub.is_empty() {
            // It fits only in RAM being scrubbed (its own, most likely):
            // zero it now, the one case where a call waits for the scrub.
            self.scrub_all(&mut pool, hw);
            built = self.build(&mut pool, index, &plan, hw);
        }
        match built {
            Ok(new) => {
                new.carry_over(&old);
                drop(old);
                self.install(new.clone());
                self.program_partition_spis(&new, hw);
                hw.log(format_args!(
                    "partition {}: changed: {}",
                    new.name,
                    new.placement()
                ));
                if let Some(line) = new.msi_line() {
                    hw.log(format_args!("{line}"));
                }
                self.event(
                    hw,
                    EventKind::Config,
                    Some(&new),
                    format_args!(
                        "changed: CPUs {:?}, {} MiB",
                        new.plan.cpus,
                        new.ram_size >> 20
                    ),
                );
                Ok(())
            }
            Err(e) => {
                // Its RAM was scrubbed and given back (the retry above
                // zeroed the queue); rebuild it as it was.
                match self.build(&mut pool, index, &old.plan.clone(), hw) {
                    Ok(again) => {
                        again.carry_over(&old);
                        self.install(again.clone());
                        self.program_partition_spis(&again, hw);
                    }
                    // Its own RAM was just given back, so this needs heap
                    // for tables that is not there: say so, never silently.
                    Err(_) => hw.log(format_args!(
                        "partition {}: the change was refused and the partition could not be rebuilt as it was: it is gone",
                        old.name
                    )),
                }
                Err(e)
            }
        }
    }

    /// PARTITION_DESTROY: take stopped partition `index` out; its RAM goes
    /// to the scrub queue (free once zeroed, after this call answered), its
    /// CPUs, SPIs and devices are free.
    pub fn destroy_partition(&self, index: usize, hw: &mut impl Hw) -> Result<(), AbiError> {
        let mut pool = self.pool.lock(LockPath::Management);
        self.reap(&mut pool, hw);
        let p = self.partition(index).ok_or(AbiError::NotFound)?;
        if !p.state().abi().allows(Transition::Configure) || !p.all_off() {
            return Err(AbiError::Conflict);
        }
        drop(p);
        let p = self.uninstall(index).ok_or(AbiError::NotFound)?;
        for &intid in &p.spis {
            hw.spi(
                LockPath::PhysDist,
                crate::exit::SpiOp::Enable {
                    intid,
                    enable: false,
                },
            );
        }
        if p.gic == crate::vgic5::GicInterface::V5 {
            // Its SPIs back to the physical domain and its VM out of the
            // vIRS, so a partition later given one of them receives it.
            let vm = p.index as u16;
            hw.virs_apply(vm, &crate::vgic5::release_virs(vm, &p.spis));
        }
        hw.log(format_args!(
            "partition {}: destroyed; its {} MiB of RAM are scrubbed (in the background) before reuse",
            p.name,
            p.ram_size >> 20
        ));
        self.event(hw, EventKind::Config, Some(&p), format_args!("destroyed"));
        match wait_unique(p) {
            Ok(p) => self.release(&mut pool, &p, hw),
            Err(p) => pool.graveyard.push(p),
        }
        Ok(())
    }

    /// Release the partitions in the graveyard nobody holds any more.
    fn reap(&self, pool: &mut Pool, hw: &mut impl Hw) {
        let graves = core::mem::take(&mut pool.graveyard);
        for p in graves {
            if Arc::strong_count(&p) == 1 {
                self.release(pool, &p, hw);
            } else {
                pool.graveyard.push(p);
            }
        }
    }

    /// Queue `p`'s RAM for scrubbing and give its stage-2 tables back, then
    /// wake its CPUs (idle now) to scrub. `p` is out of its slot and no CPU
    /// holds it.
    fn release(&self, pool: &mut Pool, p: &Partition, hw: &mut impl Hw) {
        // Its functions reset before its RAM is scrubbed and reused.
        self.reset_pci(p, hw, "delete");
        // Every vCPU is put: its vPEs (direct vLPIs) can be unmapped.
        crate::its::release_vpes(self.its.as_ref(), p);
        // Its vSGI vPEs (GICv4.1) likewise, their tables freed.
        crate::vsgi::release(self, p);
        // No device DMA through its tables or into its RAM from here on.
        self.smmu_release(hw, p.index);
        pool.scrub.push(p.ram.0, p.ram_size);
        self.scrub_left.fetch_add(p.ram_size, Ordering::Release);
        Stage2::from_root(p.stage2_root).release(hw.tables());
        if p.dma_root != p.stage2_root {
            Stage2::from_root(p.dma_root).release(hw.tables());
        }
        let me = hw.cpu_index();
        for v in &p.vcpus {
            self.kick(hw, me, v.pcpu);
        }
    }

    /// Zero one chunk of the oldest dirty range; a range wholly zeroed
    /// goes to the free pool. Under the pool lock.
    fn scrub_chunk(&self, pool: &mut Pool, hw: &mut impl Hw) {
        let Some((base, len)) = pool.scrub.next_chunk(SCRUB_CHUNK) else {
            return;
        };
        hw.zero(PhysAddr(base), len);
        self.scrub_left.fetch_sub(len, Ordering::Release);
        if let Some((base, size)) = pool.scrub.zeroed(len) {
            pool.free.give_back(base, size);
            hw.log(format_args!(
                "scrub: {} MiB at {base:#x} zeroed and free",
                size >> 20
            ));
        }
    }

    /// Zero everything queued, now.
    fn scrub_all(&self, pool: &mut Pool, hw: &mut impl Hw) {
        while !pool.scrub.is_empty() {
            self.scrub_chunk(pool, hw);
        }
    }

    /// One bounded scrub step (at most [`SCRUB_CHUNK`] bytes), waiting for
    /// the pool lock; the bytes still to zero after it. Every management
    /// call runs one after its answer, so the queue drains even when no
    /// CPU is idle.
    pub fn scrub_step(&self, hw: &mut impl Hw) -> u64 {
        if self.scrub_left.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let mut pool = self.pool.lock(LockPath::Management);
        self.scrub_chunk(&mut pool, hw);
        pool.scrub.left()
    }

    /// The idle loop's step: nothing (and no lock) when nothing is queued;
    /// a step if the pool lock is free. True while RAM is left to zero, so
    /// the idle loop comes back instead of waiting for an interrupt.
    pub fn idle_scrub(&self, hw: &mut impl Hw) -> bool {
        if self.scrub_left.load(Ordering::Acquire) == 0 {
            return false;
        }
        match self.pool.try_lock(LockPath::Management) {
            Some(mut pool) => {
                self.scrub_chunk(&mut pool, hw);
                !pool.scrub.is_empty()
            }
            None => true,
        }
    }

    /// RESOURCES: who holds every CPU, every range of host RAM and every
    /// device region.
    pub fn resources(&self) -> Resources {
        let pool = self.pool.lock(LockPath::Management);
        let partitions = self.partitions();
        let cpus = (0..self.cpus.len() as u32)
            .map(|cpu| CpuOwner {
                cpu,
                partition: self.assigned(cpu as usize).map(|id| id.partition as u32),
            })
            .collect();
        let mut ram: Vec<RamRange> = Vec::new();
        for &(base, size) in pool.free.ranges() {
            ram.push(RamRange {
                base,
                size,
                owner: RamOwner::Free,
            });
        }
        for d in pool.scrub.ranges() {
            ram.push(RamRange {
                base: d.base,
                size: d.size,
                owner: RamOwner::Scrubbing { left: d.left() },
            });
        }
        for (base, size) in pool.images.ram_blocks() {
            ram.push(RamRange {
                base,
                size,
                owner: RamOwner::Images,
            });
        }
        for p in &partitions {
            ram.push(RamRange {
                base: p.ram.0,
                size: p.ram_size,
                owner: RamOwner::Partition(p.index as u32),
            });
        }
        ram.sort_unstable_by_key(|r| r.base);
        // What is in neither list is the hypervisor's (or reserved).
        let mut all = Vec::new();
        for &(base, size) in &self.host.memory {
            let end = base + size;
            let mut at = base;
            for r in ram.iter().filter(|r| r.base >= base && r.base < end) {
                if r.base > at {
                    all.push(RamRange {
                        base: at,
                        size: r.base - at,
                        owner: RamOwner::Hypervisor,
                    });
                }
                all.push(*r);
                at = at.max(r.base + r.size);
            }
            if at < end {
                all.push(RamRange {
                    base: at,
                    size: end - at,
                    owner: RamOwner::Hypervisor,
                });
            }
        }
        let plans: Vec<(u32, &PartitionPlan)> = partitions
            .iter()
            .map(|p| (p.index as u32, &p.plan))
            .collect();
        let devices = self
            .resources
            .devices
            .iter()
            .map(|d| device_owner(d, &self.resources, &plans))
            .collect();
        Resources {
            cpus,
            ram: all,
            largest_free: pool.free.largest(RAM_ALIGN),
            images_bytes: pool.images.ram_bytes(),
            devices,
        }
    }

    pub fn image_create(&self, kind: ImageKind, size: u64) -> Result<u32, AbiError> {
        let mut pool = self.pool.lock(LockPath::Management);
        let Pool { free, images, .. } = &mut *pool;
        images.create(kind, size, free)
    }

    pub fn image_write(
        &self,
        id: u32,
        offset: u64,
        bytes: &[u8],
        hw: &mut impl Hw,
    ) -> Result<usize, AbiError> {
        self.pool
            .lock(LockPath::Management)
            .images
            .write(id, offset, bytes, hw)
    }

    /// IMAGE_READ: bytes of a sealed image (`ImageStore::read`).
    pub fn image_read(
        &self,
        id: u32,
        offset: u64,
        out: &mut [u8],
        hw: &impl Hw,
    ) -> Result<usize, AbiError> {
        self.pool
            .lock(LockPath::Management)
            .images
            .read(id, offset, out, hw)
    }

    pub fn image_seal(
        &self,
        id: u32,
        digest: Option<[u8; 32]>,
        hw: &mut impl Hw,
    ) -> Result<(), Refusal> {
        let mut pool = self.pool.lock(LockPath::Management);
        let Pool { free, images, .. } = &mut *pool;
        images.seal(id, digest, hw, free)
    }

    /// IMAGE_DELETE: CONFLICT while a partition's plan names it.
    pub fn image_delete(&self, id: u32, hw: &mut impl Hw) -> Result<(), AbiError> {
        let mut pool = self.pool.lock(LockPath::Management);
        if !self.users_of(id).is_empty() {
            return Err(AbiError::Conflict);
        }
        let Pool { free, images, .. } = &mut *pool;
        images.delete(id, hw, free)
    }

    pub fn images(&self) -> Vec<ImageInfo> {
        let pool = self.pool.lock(LockPath::Management);
        pool.images.info(|id| self.users_of(id))
    }

    /// The partitions whose plan names image `id`.
    fn users_of(&self, id: u32) -> Vec<u32> {
        self.partitions()
            .iter()
            .filter(|p| p.plan.kernel.image == id || p.plan.initrd == Some(id))
            .map(|p| p.index as u32)
            .collect()
    }
}

/// Who holds device region `d`: the partition (index) whose plan passes
/// it through or, for the PCIe host bridge's windows, whose plan sets
/// `pci_host_bridge`; else the hypervisor when it keeps it (a GIC frame,
/// its own ranges and console UART, a host bridge no partition owns: only
/// the boot plan can give one); else nobody (free to pass through).
pub fn device_owner(
    d: &DeviceRegion,
    host: &HostResources,
    plans: &[(u32, &PartitionPlan)],
) -> DeviceOwner {
    let hits = |b: u64, s: u64| b < d.base + d.size && d.base < b + s;
    let any = |ranges: &[(u64, u64)]| ranges.iter().any(|&(b, s)| hits(b, s));
    let pcie = any(&host.pcie);
    let passed = plans.iter().find(|(_, plan)| {
        plan.devices
            .iter()
            .any(|dev| dev.mmio.iter().any(|m| hits(m.base, m.size)))
    });
    let bridge = plans.iter().find(|(_, plan)| pcie && plan.pci_host_bridge);
    let partition = passed.or(bridge).map(|&(index, _)| index);
    DeviceOwner {
        node: d.node.clone(),
        base: d.base,
        size: d.size,
        partition,
        hypervisor: partition.is_none() && (pcie || any(&host.gic) || any(&host.hypervisor)),
    }
}

/// `p` once no CPU holds it any more (a put drops its clone right after
/// the vCPU reads as off); `Err(p)`, still held, if that takes longer than
/// a moment.
fn wait_unique(p: Arc<Partition>) -> Result<Arc<Partition>, Arc<Partition>> {
    for _ in 0..1_000_000 {
        if Arc::strong_count(&p) == 1 {
            return Ok(p);
        }
        core::hint::spin_loop();
    }
    Err(p)
}

impl Partition {
    /// What a changed partition keeps of the one it replaces: its console
    /// (history and input), boot and fault counts, and of its lifecycle
    /// its state (stopped or crashed) with its time, its restart count and
    /// its last crash; its restart policy, watchdog and GPIO are the new
    /// plan's, from reset.
    fn carry_over(&self, old: &Partition) {
        use core::sync::atomic::Ordering::Relaxed;
        let mut new_console = self.console.lock(LockPath::Management);
        let mut old_console = old.console.lock(LockPath::Management);
        core::mem::swap(&mut new_console.ring, &mut old_console.ring);
        self.boot_count.store(old.boot_count.load(Relaxed), Relaxed);
        self.faults.store(old.faults.load(Relaxed), Relaxed);
        self.life.carry_over(&old.life);
    }
}
