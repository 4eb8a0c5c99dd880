//! The running system, built at boot: the host description, the partition
//! slots, the public per-CPU state sized from the host's CPU count, the CPU
//! and SPI ownership tables, the free RAM and the images (`images`), the
//! lock statistics, the boot entropy (`entropy`: the DRBG behind the
//! ENTROPY call, the guests' DT seeds and the token) and the management
//! token. Partition
//! lifecycle (start, stop, restart; the PCI quiesce before a host-bridge
//! owner starts, `pci`; states, crashes, restart policies and the watchdog
//! in `lifecycle`, `restart`, `wdog`), the event log's entry point
//! (`System::event`, on `events`) and the boot marker written into a
//! partition's console ring at each start, and the stats line are here;
//! creating, changing and destroying partitions at run time is
//! `runtime`'s. The platform holds one `&'static System`.
//!
//! A partition lives in a slot (its index, the ABI's partition index; VMID
//! = index + 1) as an `Arc<Partition>` that never changes while it exists:
//! a change replaces it. A CPU that runs one of its vCPUs holds a clone for
//! as long as the vCPU is loaded, so the hot paths read the partition with
//! no lock and no reference count traffic; slots are locked only to find a
//! partition on cold paths (a start request, a management call, host UART
//! input, the stats line). Who owns each CPU and SPI is a table of atomics
//! beside the slots.

use crate::clock::WallClock;
use crate::dtb::HostInfo;
use crate::entropy::{Entropy, EntropyInputs, NoEntropy, Sources};
use crate::events::{EventLog, When};
use crate::exit::{Hw, SpiOp, SGI_MAILBOX};
use crate::images::ImageStore;
use crate::lockstat::{CountedLock, LockPath, LockStat};
use crate::memmap::FreeMemory;
use crate::partition::{LoadError, Partition, SetupError, State};
use crate::percpu::{PublicCpu, VcpuId, MAX_CPUS, REQ_START, REQ_STOP};
use crate::scrub::ScrubQueue;
use crate::stage2::TableMemory;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use pinfold_abi::EventKind;
use pinfold_config::isolation::HostResources;
use pinfold_config::Plan;

/// SPI INTIDs the ownership table covers (GICv3: up to 1019).
const SPI_TABLE: usize = 1024;

/// The most partitions (slots): VMIDs are 8 bits and 0 is nobody's, and
/// the SPI owner table holds index + 1 in a byte.
pub const MAX_PARTITIONS: usize = 254;

/// A partition slot: empty, or the partition (see the module comment).
type Slot = CountedLock<Option<Arc<Partition>>>;

/// What run-time configuration decides from, behind one lock: every
/// create, change, destroy and image call takes it for its whole duration,
/// so those decisions are serialised (they are rare, and one decision must
/// see the outcome of the last).
pub struct Pool {
    /// Host RAM no partition, image or hypervisor structure holds.
    pub free: FreeMemory,
    pub images: ImageStore,
    /// Destroyed partitions a CPU still held a clone of when they were
    /// taken out of their slot; their RAM and tables are released once the
    /// clone is gone (`runtime::reap`).
    pub graveyard: Vec<Arc<Partition>>,
    /// Freed RAM being zeroed before it is free again (`scrub`).
    pub scrub: ScrubQueue,
}

pub struct System {
    pub host: HostInfo,
    /// Each physical LPI's route to a partition's vCPU (`vgic::pits`):
    /// the pool's size when the host has an ITS, else empty. Written on
    /// the vITS's slow path, read with one load when an LPI is taken.
    pub lpi_routes: crate::vgic::pits::LpiRoutes,
    slots: Vec<Slot>,
    /// One entry per host CPU the hypervisor drives (at most MAX_CPUS).
    pub cpus: Vec<PublicCpu>,
    /// The vCPU pinned to each CPU: `VcpuId` packed by [`pack`], 0 = none.
    assign: Vec<AtomicU64>,
    /// Owner of each physical SPI (partition index + 1; 0 = nobody).
    spi_owner: Vec<AtomicU8>,
    pub locks: &'static LockStat,
    /// The chip-wide lock a per-CPU interrupt state change takes when the
    /// chip does not declare the lockless capability.
    pub chip_lock: CountedLock<()>,
    pub(crate) pool: CountedLock<Pool>,
    /// Bytes in `Pool::scrub` still to zero, readable without the pool
    /// lock (the idle loop's check).
    pub(crate) scrub_left: AtomicU64,
    /// What pass-through windows are checked against (`isolation`).
    pub(crate) resources: HostResources,
    seed: AtomicU64,
    /// The DRBG seeded from the boot's entropy sources (ENTROPY, the token).
    entropy: CountedLock<Entropy>,
    /// SHA-256 of the management API's bearer token.
    token_digest: [u8; 32],
    /// The token, when the hypervisor made it at boot (no plan gave one):
    /// printed once on the console.
    generated_token: Option<String>,
    /// Counter value when the hypervisor started.
    pub boot_counter: u64,
    /// The time read at boot, if the host had a clock (WALL_CLOCK).
    pub wall_clock: Option<WallClock>,
    /// The event log (`events`): one ring per CPU; partitions hold it too
    /// (`Partition::events`) for the faults their vCPUs record.
    pub events: Arc<EventLog>,
    /// The monitor saw Ctrl-A.
    pub(crate) escape: AtomicBool,
    /// The monitor sends the current line to the management partition
    /// (Ctrl-A m).
    pub(crate) mgmt_line: AtomicBool,
    /// Autostart partitions are held until the manager has applied its
    /// stored configuration (`lifecycle`, CONFIG_APPLIED).
    pub(crate) held: AtomicBool,
    pub version: &'static str,
    /// The SMMUv3 in front of the host bridge, once programmed (`smmu`).
    pub(crate) smmu: CountedLock<Option<crate::smmu::SmmuState>>,
    /// `smmu` is Some: read without its lock.
    pub(crate) smmu_on: AtomicBool,
    /// The functions behind the host bridge, found at boot (`vpci`).
    pub pci_functions: Vec<crate::vpci::HostFunction>,
    /// The physical ITSes, once initialised (`its`): each ITS's command
    /// queue behind its own `phys_its` lock, the LPI pool behind one more;
    /// its GITS_TYPER, routing and whether its MSIs are direct vLPIs
    /// (`ItsSet::direct`) read without a lock.
    pub its: Option<crate::its::ItsSet>,
    /// GICv4.1 direct vSGIs are on (`vsgi`): partitions' vCPUs take vPEs.
    pub vsgi: Option<crate::vsgi::VsgiHost>,
}

/// What the platform hands to [`System::new`].
pub struct BootInputs<'a, T: TableMemory> {
    pub host: HostInfo,
    pub plan: Plan,
    pub payload: &'static [u8],
    /// Host RAM nothing uses yet: partitions and images take from it.
    pub free: FreeMemory,
    /// The isolation check's view of the host (as checked at boot).
    pub resources: HostResources,
    pub tables: &'a mut T,
    pub locks: &'static LockStat,
    pub boot_counter: u64,
    /// The time read at boot ([`crate::clock::choose`]).
    pub wall_clock: Option<WallClock>,
    /// What the platform read from the entropy sources at boot.
    pub entropy: EntropyInputs<'a>,
    pub version: &'static str,
    /// The functions behind the host bridge (`vpci::boot_scan`), when a
    /// partition of the plan assigns any; empty otherwise.
    pub pci_functions: Vec<crate::vpci::HostFunction>,
    /// The physical ITS the platform initialised, if the host has one and
    /// it came up (`its`).
    pub its: Option<crate::its::HostIts>,
}

/// The plan field partition `p`'s SPI `intid` comes from: a device's
/// `spis`, else its PCIe host bridge's or its `pci` functions' INTx.
fn spi_field(p: &Partition, intid: u32) -> &'static str {
    if p.plan.devices.iter().any(|d| d.spis.contains(&intid)) {
        "devices"
    } else if p.plan.pci_host_bridge {
        "pci_host_bridge"
    } else {
        "pci"
    }
}

impl System {
    /// Build every partition of the plan. Partitions that cannot be set up
    /// are reported through `log` and left out; the others still boot.
    pub fn new<T: TableMemory>(
        inputs: BootInputs<'_, T>,
        log: &mut impl FnMut(fmt::Arguments),
    ) -> System {
        let BootInputs {
            host,
            plan,
            payload,
            mut free,
            resources,
            tables,
            locks,
            boot_counter,
            wall_clock,
            entropy,
            version,
            pci_functions,
            its,
        } = inputs;
        let cpu_count = host.cpus.len().min(MAX_CPUS);
        let its = its.map(|i| crate::its::ItsSet::new(i, &host, cpu_count, locks));
        let vsgi = crate::vsgi::VsgiHost::choose(&host.gic.found, its.as_ref(), locks);
        if host.cpus.len() > MAX_CPUS {
            log(format_args!(
                "{} CPUs in the host description; driving the first {} (MAX_CPUS), the rest stay offline",
                host.cpus.len(),
                MAX_CPUS
            ));
        }
        let mut partitions = Vec::new();
        for (index, pp) in plan.partitions.iter().enumerate() {
            if partitions.len() == MAX_PARTITIONS {
                log(format_args!(
                    "partition {} (plan entry {index}): not created: more than {MAX_PARTITIONS} partitions",
                    pp.name
                ));
                continue;
            }
            let mut held = crate::partition::pci_held(&pci_functions, partitions.iter());
            held.its = its.as_ref();
            held.vsgi = vsgi.is_some();
            match Partition::build(partitions.len(), pp, &host, &mut free, tables, locks, &held) {
                Ok(p) => {
                    log(format_args!("partition {}: {}", p.name, p.placement()));
                    if let Some(line) = p.msi_line() {
                        log(format_args!("{line}"));
                    }
                    partitions.push(p);
                }
                Err(e) => log(format_args!(
                    "partition {} (plan entry {index}): not created: {}",
                    pp.name, e as SetupError
                )),
            }
        }
        let cpus = host.cpus[..cpu_count]
            .iter()
            .map(|&m| PublicCpu::new(m))
            .collect();
        let events = Arc::new(EventLog::new(cpu_count, locks));
        for p in &mut partitions {
            p.events = Some(events.clone());
        }
        let slot_count = cpu_count.clamp(1, MAX_PARTITIONS);
        let images = ImageStore::new(&plan, payload);
        let lpis = if its.is_some() {
            crate::vgic::pits::LPI_COUNT
        } else {
            0
        };
        let mut sys = System {
            lpi_routes: crate::vgic::pits::LpiRoutes::new(lpis),
            host,
            slots: (0..slot_count)
                .map(|_| CountedLock::new(None, locks))
                .collect(),
            cpus,
            assign: (0..cpu_count).map(|_| AtomicU64::new(0)).collect(),
            spi_owner: (0..SPI_TABLE).map(|_| AtomicU8::new(0)).collect(),
            locks,
            chip_lock: CountedLock::new((), locks),
            pool: CountedLock::new(
                Pool {
                    free,
                    images,
                    graveyard: Vec::new(),
                    scrub: ScrubQueue::new(),
                },
                locks,
            ),
            scrub_left: AtomicU64::new(0),
            resources,
            seed: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
            entropy: CountedLock::new(Entropy::gather(&entropy), locks),
            token_digest: [0; 32],
            generated_token: None,
            boot_counter,
            wall_clock,
            events,
            escape: AtomicBool::new(false),
            mgmt_line: AtomicBool::new(false),
            held: AtomicBool::new(false),
            version,
            smmu: CountedLock::new(None, locks),
            smmu_on: AtomicBool::new(false),
            pci_functions,
            its,
            vsgi,
        };
        let mixed = sys
            .entropy
            .lock(LockPath::Management)
            .guest_seed(boot_counter);
        sys.add_entropy(&mixed.to_le_bytes());
        let managed = partitions.iter().any(|p| p.plan.management);
        let digest = partitions.iter().find_map(|p| p.plan.token_sha256);
        for p in partitions {
            sys.install(Arc::new(p));
        }
        match digest {
            Some(digest) => sys.token_digest = digest,
            // No management partition: nobody could present a token.
            None if !managed => {}
            // No entropy source: no token (the digest stays all zeros,
            // which MGMT_TOKEN_DIGEST answers as NOT_FOUND).
            None => {
                if let Some(token) = sys.make_token() {
                    sys.token_digest = pinfold_config::bundle::token_digest(token.as_bytes());
                    sys.generated_token = Some(token);
                }
            }
        }
        sys
    }

    /// Put `p` in its slot (which must be empty) and give it its CPUs and
    /// SPIs in the ownership tables.
    pub(crate) fn install(&self, p: Arc<Partition>) {
        for (vcpu, s) in p.vcpus.iter().enumerate() {
            if let Some(slot) = self.assign.get(s.pcpu) {
                slot.store(
                    pack(VcpuId {
                        partition: p.index,
                        vcpu,
                    }),
                    Ordering::Release,
                );
            }
        }
        for &spi in &p.spis {
            if let Some(slot) = self.spi_owner.get(spi as usize) {
                slot.store(p.index as u8 + 1, Ordering::Release);
            }
        }
        if let Some(slot) = self.slots.get(p.index) {
            *slot.lock(LockPath::Management) = Some(p);
        }
    }

    /// Take partition `index` out of its slot and the ownership tables.
    pub(crate) fn uninstall(&self, index: usize) -> Option<Arc<Partition>> {
        let p = self.slots.get(index)?.lock(LockPath::Management).take()?;
        for s in &p.vcpus {
            if let Some(slot) = self.assign.get(s.pcpu) {
                slot.store(0, Ordering::Release);
            }
        }
        for &spi in &p.spis {
            if let Some(slot) = self.spi_owner.get(spi as usize) {
                slot.store(0, Ordering::Release);
            }
        }
        Some(p)
    }

    /// How many slots there are (the most partitions this host can hold).
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Partition `index`, if its slot holds one.
    pub fn partition(&self, index: usize) -> Option<Arc<Partition>> {
        self.slots.get(index)?.lock(LockPath::Management).clone()
    }

    /// Every partition, in index order (a snapshot).
    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.slots
            .iter()
            .filter_map(|s| s.lock(LockPath::Management).clone())
            .collect()
    }

    /// The vCPU pinned to CPU `cpu`.
    pub fn assigned(&self, cpu: usize) -> Option<VcpuId> {
        unpack(self.assign.get(cpu)?.load(Ordering::Acquire))
    }

    /// The partition whose vCPU is pinned to CPU `cpu`.
    pub fn partition_on(&self, cpu: usize) -> Option<Arc<Partition>> {
        self.partition(self.assigned(cpu)?.partition)
    }

    /// The index of the partition that owns physical SPI `intid`.
    pub fn spi_owner(&self, intid: u32) -> Option<usize> {
        match self.spi_owner.get(intid as usize)?.load(Ordering::Acquire) {
            0 => None,
            owner => Some(owner as usize - 1),
        }
    }

    /// The partitions whose interface is GICv5, as the boot's vIRS plan
    /// takes them (`vgic5::VirsMember`), in index order: each vCPU's CPU
    /// (its index and the MPIDR the host description gives it) and the
    /// partition's own SPIs with the plan field each comes from.
    pub fn virs_members(&self) -> Vec<crate::vgic5::VirsMember> {
        self.partitions()
            .iter()
            .filter(|p| p.gic == crate::vgic5::GicInterface::V5)
            .map(|p| crate::vgic5::VirsMember {
                index: p.index,
                name: p.name.clone(),
                cpus: p
                    .vcpus
                    .iter()
                    .map(|v| (v.pcpu, self.host.cpus.get(v.pcpu).copied().unwrap_or(0)))
                    .collect(),
                spis: p
                    .spis
                    .iter()
                    .map(|&intid| (intid, spi_field(p, intid)))
                    .collect(),
            })
            .collect()
    }

    /// On a GICv5 host with several IRSes: every partition's SPIs (any
    /// interface: a `gicv3` partition's SPIs are on an IRS too) in some
    /// IRS's SPI range (`vgic5::irses::IrsRoutes::check_spis`), or the
    /// first that is not refused naming its partition and plan field.
    /// Run at boot, once the IRSes are up and the partitions built.
    pub fn check_irs_spis(
        &self,
        routes: &crate::vgic5::irses::IrsRoutes,
    ) -> Result<(), crate::vgic5::VirsRefusal> {
        let parts = self.partitions();
        let spis: Vec<crate::vgic5::irses::PlanSpi> = parts
            .iter()
            .flat_map(|p| {
                p.spis
                    .iter()
                    .map(move |&intid| (p.name.as_str(), intid, spi_field(p, intid)))
            })
            .collect();
        routes.check_spis(&spis)
    }

    /// The boot's vIRS (`vgic5::plan_boot_virs`) for `members` (what
    /// [`Self::virs_members`] gave), each VM's tables taken from the free
    /// pool (from the top, as the platform's own tables are); the platform
    /// zeroes them and applies the ops. Run once, after the partitions are
    /// built, before any starts.
    pub fn plan_virs(
        &self,
        members: &[crate::vgic5::VirsMember],
        layout: &crate::vgic5::IrsLayout,
        caps: &crate::vgic5::VirsCaps,
    ) -> Result<crate::vgic5::VirsBoot, crate::vgic5::VirsRefusal> {
        let mut pool = self.pool.lock(LockPath::Management);
        crate::vgic5::plan_boot_virs(members, layout, caps, &mut |bytes, align| {
            pool.free.take_top(bytes, align)
        })
    }

    /// Pass-through SPIs start disabled, level, routed to their partition's
    /// first vCPU's CPU; the guest's distributor writes enable and re-route.
    pub fn program_spis(&self, hw: &mut impl Hw) {
        for p in self.partitions() {
            self.program_partition_spis(&p, hw);
        }
    }

    /// [`program_spis`](Self::program_spis) for one partition.
    pub fn program_partition_spis(&self, p: &Partition, hw: &mut impl Hw) {
        let mpidr = self.cpus[p.vcpus[0].pcpu].mpidr.load(Ordering::Relaxed);
        for &intid in &p.spis {
            hw.spi(
                LockPath::PhysDist,
                SpiOp::Enable {
                    intid,
                    enable: false,
                },
            );
            hw.spi(LockPath::PhysDist, SpiOp::SetEdge { intid, edge: false });
            hw.spi(LockPath::PhysDist, SpiOp::Route { intid, mpidr });
        }
    }

    /// Kick CPU `pcpu` to look at its mailbox and requests. Our own CPU
    /// sees them on the way out of this trap or in the idle loop.
    pub fn kick(&self, hw: &mut impl Hw, me: usize, pcpu: usize) {
        if pcpu != me {
            if let Some(c) = self.cpus.get(pcpu) {
                hw.send_sgi(c.mpidr.load(Ordering::Relaxed), SGI_MAILBOX);
            }
        }
    }

    /// Post request bits to CPU `pcpu` and kick it.
    pub fn request(&self, hw: &mut impl Hw, me: usize, pcpu: usize, bits: u32) {
        if let Some(c) = self.cpus.get(pcpu) {
            c.post_request(bits);
            self.kick(hw, me, pcpu);
        }
    }

    /// Record an event about `partition` (None: about the system) on the
    /// ring of the CPU this runs on, at the counter's value now. The one
    /// call every part of the hypervisor makes for an event.
    pub fn event(
        &self,
        hw: &impl Hw,
        kind: EventKind,
        partition: Option<&Partition>,
        args: fmt::Arguments,
    ) -> u64 {
        self.events.record(
            hw.cpu_index(),
            hw.now(),
            kind,
            partition.map(|p| (p.index as u32, p.name.as_str())),
            args,
        )
    }

    /// Wall-clock milliseconds at counter value `counter` (None without a
    /// clock).
    pub fn unix_ms_at(&self, counter: u64, frequency: u64) -> Option<u64> {
        self.wall_clock.map(|c| c.unix_ms_at(counter, frequency))
    }

    /// The line written into `p`'s console ring where boot `boot` starts:
    /// `=== pinfold: NAME boot N at <RFC 3339 UTC, or +<s>s since the
    /// hypervisor started> ===`, on a line of its own.
    pub fn boot_marker(&self, p: &Partition, hw: &impl Hw, boot: u64, now: u64) {
        let when = When {
            unix_ms: self.unix_ms_at(now, hw.counter_frequency()),
            uptime_s: now.saturating_sub(self.boot_counter) / hw.counter_frequency().max(1),
        };
        let mut con = p.console.lock(LockPath::Management);
        let fresh_line = matches!(con.ring.last_byte(), None | Some(b'\n'));
        let line = alloc::format!(
            "{}=== pinfold: {} boot {boot} at {when} ===\r\n",
            if fresh_line { "" } else { "\r\n" },
            p.name
        );
        con.ring.push(line.as_bytes());
    }

    /// Load `p`'s images and boot its vCPU 0 (on its own CPU).
    pub fn start_partition(
        &self,
        p: &Partition,
        hw: &mut impl Hw,
        me: usize,
    ) -> Result<(), LoadError> {
        if p.vpci.is_some() {
            // Its functions are reset (whatever its previous run left
            // running stops before its RAM is written), their BARs put
            // where they were placed, and its filter starts afresh.
            self.reset_pci(p, hw, "start");
            if let (Some(v), Some(bridge)) = (&p.vpci, self.host.pcie.as_ref()) {
                crate::vpci::program(&mut crate::pci::Ecam::new(hw, bridge), &v.assignment);
                *v.ecam.lock(LockPath::Management) = v.fresh.clone();
                // Its functions' DMA goes through its stage 2 (`smmu`).
                self.log_smmu_bind(hw, p, &v.bdfs());
            }
        }
        if p.plan.pci_host_bridge {
            // Whatever firmware or the partition's previous run left
            // running behind its host bridge is stopped and reset first:
            // its drivers start from reset state, and no DMA runs into the
            // RAM its images are about to be copied to.
            if let Some(bridge) = self.host.pcie.as_ref() {
                // A bus reset never reaches a function another partition
                // was given.
                let theirs: Vec<crate::pci::Bdf> = self
                    .partitions()
                    .iter()
                    .filter(|o| o.index != p.index)
                    .filter_map(|o| o.vpci.as_ref())
                    .flat_map(|v| v.bdfs())
                    .collect();
                let found =
                    crate::pci::quiesce_bridge(hw, &p.name, bridge, &|b| theirs.contains(&b));
                // Its functions' DMA goes through its stage 2 from here on
                // (`smmu`); a stream that cannot be bound keeps aborting.
                let bdfs: Vec<crate::pci::Bdf> = found.iter().map(|q| q.bdf).collect();
                self.log_smmu_bind(hw, p, &bdfs);
                *p.pci_found.lock(LockPath::Management) = pci_report(&found);
            }
        }
        *p.report.lock(LockPath::Management) =
            (pinfold_abi::ManagerStatus::Starting, String::new());
        let now = hw.now();
        p.set_state(State::Starting, now);
        // The images a plan names cannot be deleted or changed while it
        // names them (`runtime`), so they are copied without the lock.
        let views = {
            let pool = self.pool.lock(LockPath::Management);
            (
                pool.images.view(p.plan.kernel.image),
                p.plan.initrd.map(|i| pool.images.view(i)),
            )
        };
        let loaded = match views {
            (Some(kernel), None) => p.load(kernel, None, hw, |salt| self.next_seed(salt, now)),
            (Some(kernel), Some(Some(initrd))) => {
                p.load(kernel, Some(initrd), hw, |salt| self.next_seed(salt, now))
            }
            (None, _) => Err(LoadError::KernelMissing),
            (Some(_), Some(None)) => Err(LoadError::InitrdMissing),
        };
        if let Err(e) = loaded {
            hw.log(format_args!("partition {}: cannot start: {e}", p.name));
            p.set_state(State::Stopped, hw.now());
            self.event(
                hw,
                EventKind::State,
                Some(p),
                format_args!("cannot start: {e}"),
            );
            return Err(e);
        }
        // The last run's vPEs (GICv4.1 direct vSGIs) unmapped, every vCPU
        // being off; each vCPU's first load maps its own afresh.
        crate::vsgi::restart(self, p);
        let boot = p.boot_count.fetch_add(1, Ordering::Relaxed) + 1;
        self.boot_marker(p, hw, boot, now);
        self.event(
            hw,
            EventKind::State,
            Some(p),
            format_args!("running (boot {boot})"),
        );
        p.started_at.store(now, Ordering::Relaxed);
        // Lifecycle hook: watchdog armed, no shutdown pending; running once
        // its vCPU 0 enters (`exit::idle_work`).
        self.lifecycle_boot(p, now, hw.counter_frequency());
        self.request(hw, me, p.vcpus[0].pcpu, REQ_START);
        Ok(())
    }

    /// Quiesce and reset `p`'s assigned PCI functions (`vpci`; before its
    /// RAM is reused or scrubbed, and before it starts again), one log line
    /// each; what was found is what PCI_FUNCTIONS reports.
    /// `p`'s functions bound to its stage 2 in the SMMU, said on the log;
    /// a stream that cannot be bound keeps aborting.
    fn log_smmu_bind(&self, hw: &mut impl Hw, p: &Partition, bdfs: &[crate::pci::Bdf]) {
        match self.smmu_bind(hw, p, bdfs) {
            Ok(0) => {}
            Ok(n) => hw.log(format_args!(
                "partition {}: {n} PCI stream(s) translated by the SMMU (VMID {})",
                p.name, p.vmid
            )),
            Err(e) => hw.report(format_args!(
                "partition {}: SMMU stream binding failed, its DMA aborts: {e}",
                p.name
            )),
        }
    }

    /// CPU `cpu` has enabled LPIs on its redistributor (the platform, from
    /// that CPU's bring-up): its collection is mapped on the physical ITS.
    pub fn its_cpu_online(&self, cpu: usize, processor_number: u16, redist_pa: u64) {
        if let Some(its) = self.its.as_ref() {
            its.cpu_online(cpu, processor_number, redist_pa);
        }
    }

    /// Drain up to `vgic5::SWERR_DRAIN_MAX` IRS software error records
    /// (`Hw::virs_swerr`) at a bounded point (before a management call,
    /// the stats report, a doorbell): each one a guest's GIC command caused
    /// is that partition's fault (`FaultKind::Virs`, in its fault count and
    /// log like its other faults; `vgic5::attribute_swerr`: VM = partition
    /// index, a partition with the GICv5 interface), any other is the
    /// hypervisor's own and logged. Returns how many were drained.
    pub fn virs_poll(&self, hw: &mut impl Hw) -> u32 {
        use crate::vgic5::{attribute_swerr, GicInterface, SwerrOwner, SWERR_DRAIN_MAX};
        let mut drained = 0;
        while drained < SWERR_DRAIN_MAX {
            let Some(syndrome) = hw.virs_swerr() else {
                break;
            };
            drained += 1;
            let gicv5 = |i: usize| self.partition(i).is_some_and(|p| p.gic == GicInterface::V5);
            match attribute_swerr(syndrome, gicv5) {
                SwerrOwner::Partition { index, fault } => {
                    if let Some(p) = self.partition(index) {
                        crate::exit::fault(
                            &p,
                            hw,
                            crate::ratelimit::FaultKind::Virs,
                            format_args!("{fault}"),
                        );
                    }
                }
                SwerrOwner::Hypervisor { syndrome } => hw.log(format_args!(
                    "gicv5: IRS software error {syndrome:#x} not from a guest's VM"
                )),
            }
        }
        drained
    }

    pub fn reset_pci(&self, p: &Partition, hw: &mut impl Hw, why: &str) {
        let (Some(v), Some(bridge)) = (&p.vpci, self.host.pcie.as_ref()) else {
            return;
        };
        let mut ecam = crate::pci::Ecam::new(hw, bridge);
        let buses = ecam.buses();
        let done = crate::vpci::reset_functions(&mut ecam, buses, &v.bdfs());
        for q in &done {
            hw.log(format_args!("partition {} ({why}): {q}", p.name));
        }
        // Its functions are quiet: their MSIs' physical state goes too.
        crate::its::reset(self.its.as_ref(), &self.lpi_routes, p);
        *p.pci_found.lock(LockPath::Management) = pci_report(&done);
    }

    /// Stop every vCPU of `p` (the caller puts its own, if it is one).
    pub fn stop_partition(&self, p: &Partition, hw: &mut impl Hw, me: usize) {
        self.stop_partition_for(p, hw, me, "stopped");
    }

    /// [`stop_partition`](Self::stop_partition), saying why in its event
    /// (`stopped by the manager`, `stopped (powered off by the guest)`).
    pub fn stop_partition_for(&self, p: &Partition, hw: &mut impl Hw, me: usize, why: &str) {
        self.event(hw, EventKind::State, Some(p), format_args!("{why}"));
        let now = hw.now();
        p.set_state(State::Stopping, now);
        for s in &p.vcpus {
            if s.pcpu != me {
                self.request(hw, me, s.pcpu, REQ_STOP);
            }
        }
        // No DMA of its functions outlives it.
        self.reset_pci(p, hw, "stop");
        p.set_state(State::Stopped, now);
    }

    /// Wait until every vCPU of `p` has been put (bounded: about one second
    /// of counter time; false if one did not answer).
    pub fn wait_all_off(&self, p: &Partition, hw: &mut impl Hw) -> bool {
        let deadline = hw.now() + hw.counter_frequency();
        while !p.all_off() {
            if hw.now() > deadline {
                return false;
            }
            core::hint::spin_loop();
        }
        true
    }

    /// The second half of a guest's SYSTEM_RESET, after its vCPU was put:
    /// wait for the others, reload, boot again.
    pub fn finish_restart(&self, p: &Partition, hw: &mut impl Hw, me: usize) {
        if !self.wait_all_off(p, hw) {
            hw.log(format_args!(
                "partition {}: a vCPU did not stop in time",
                p.name
            ));
        }
        let _ = self.start_partition(p, hw, me);
    }

    /// Nanoseconds from counter value `start` to now.
    pub fn ns_since(&self, hw: &impl Hw, start: u64) -> u64 {
        let f = hw.counter_frequency() as u128;
        if f == 0 || start == 0 {
            return 0;
        }
        (hw.now().saturating_sub(start) as u128 * 1_000_000_000 / f) as u64
    }

    /// The monitor's stats lines (read by the tests).
    pub fn stats(&self, hw: &mut impl Hw) {
        let exits: u64 = self.cpus.iter().map(|c| c.counters.exits_total()).sum();
        let injected: u64 = self.cpus.iter().map(|c| c.counters.injected_count()).sum();
        let dropped: u64 = self.cpus.iter().map(|c| c.counters.dropped_count()).sum();
        let mut shared = String::new();
        for path in LockPath::ALL {
            let n = self.locks.count(path);
            if n != 0 {
                let _ = fmt::Write::write_fmt(&mut shared, format_args!(" {}={n}", path.name()));
            }
        }
        hw.report(format_args!(
            "stats hot_path_cross_cpu_locks={} exits={exits} injected={injected} dropped={dropped} shared_locks:{shared}",
            self.locks.hot_total(),
        ));
        self.smmu_poll(hw);
        self.virs_poll(hw);
        if let Some((events, overflows, streams)) = self.smmu_stats() {
            hw.report(format_args!(
                "stats smmu streams={streams} events={events} overflows={overflows}"
            ));
        }
        for p in self.partitions() {
            let mut manager = String::new();
            if p.plan.management {
                let report = p.report.lock(LockPath::Management);
                let restarts = p.life.restarts();
                let _ = fmt::Write::write_fmt(
                    &mut manager,
                    format_args!(" manager={} restarts={restarts}", report.0.name()),
                );
            }
            // Physical LPIs taken at EL2 for its vCPUs since they were
            // loaded: its MSIs on the trapped path (0 with direct vLPIs).
            let lpis: u64 = p
                .vcpus
                .iter()
                .filter_map(|v| self.cpus.get(v.pcpu))
                .map(|c| c.counters.lpi_count())
                .sum();
            hw.report(format_args!(
                "stats partition={} state={} boots={} faults={} lpis={lpis}{manager}",
                p.name,
                p.state() as u8,
                p.boot_count.load(Ordering::Relaxed),
                p.faults.load(Ordering::Relaxed)
            ));
        }
    }

    /// SHA-256 of the management API's bearer token.
    pub fn token_digest(&self) -> &[u8; 32] {
        &self.token_digest
    }

    /// The bearer token the hypervisor made at boot because no plan gave
    /// one (None when the plan carries its digest).
    pub fn generated_token(&self) -> Option<&str> {
        self.generated_token.as_deref()
    }

    /// A token of 128 bits from the DRBG, as 32 hex digits; None without
    /// an entropy source.
    fn make_token(&self) -> Option<String> {
        let mut bytes = [0u8; 16];
        self.fill_entropy(&mut bytes).ok()?;
        let mut t = String::new();
        for b in bytes {
            let _ = fmt::Write::write_fmt(&mut t, format_args!("{b:02x}"));
        }
        Some(t)
    }

    /// Random bytes from the boot's DRBG (the ENTROPY call).
    pub fn fill_entropy(&self, out: &mut [u8]) -> Result<(), NoEntropy> {
        self.entropy.lock(LockPath::Management).fill(out)
    }

    /// Which entropy sources the boot found (the boot log line).
    pub fn entropy_sources(&self) -> Sources {
        self.entropy.lock(LockPath::Management).sources()
    }

    /// Whether the management API has a credential at all (the plan's
    /// digest, or a token made at boot).
    pub fn has_token(&self) -> bool {
        self.token_digest != [0; 32]
    }

    /// Mix host entropy into the partitions' seeds.
    pub fn add_entropy(&self, bytes: &[u8]) {
        let mut acc = self.seed.load(Ordering::Relaxed);
        for chunk in bytes.chunks(8) {
            let mut v = [0u8; 8];
            v[..chunk.len()].copy_from_slice(chunk);
            acc = splitmix(acc ^ u64::from_le_bytes(v));
        }
        self.seed.store(acc, Ordering::Relaxed);
    }

    /// A fresh seed (rng-seed, kaslr-seed of a guest DTB; the token).
    pub fn next_seed(&self, salt: u64, now: u64) -> u64 {
        let s = self
            .seed
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        splitmix(s ^ salt ^ now)
    }
}

/// A `VcpuId` in one word (0 = none), for the CPU ownership table.
fn pack(id: VcpuId) -> u64 {
    ((id.partition as u64 + 1) << 32) | id.vcpu as u64
}

fn unpack(word: u64) -> Option<VcpuId> {
    (word != 0).then(|| VcpuId {
        partition: (word >> 32) as usize - 1,
        vcpu: word as u32 as usize,
    })
}

/// SplitMix64's finaliser.
pub fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The functions a quiesce or reset went through, as PCI_FUNCTIONS reports
/// them to the manager.
fn pci_report(done: &[crate::pci::Quiesced]) -> Vec<pinfold_abi::PciFunction> {
    done.iter()
        .map(|q| pinfold_abi::PciFunction {
            bus: q.bdf.bus,
            device: q.bdf.dev,
            function: q.bdf.func,
            vendor_id: q.vendor,
            device_id: q.device,
            class: q.class,
        })
        .collect()
}
