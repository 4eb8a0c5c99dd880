//! The SMMUs in the running system: found from the host description,
//! programmed at boot before any partition starts, their streams bound to
//! the partitions that own the functions behind them, released when a
//! partition goes, and their event queues drained into the owning
//! partition's fault count and the log (rate-limited like every fault).
//!
//! Several SMMUv3s: the host bridge's `iommu-map` (or the IORT root
//! complex's ID mappings) may send ranges of requester IDs to different
//! SMMUs. Each SMMU it names is programmed on its own ([`SmmuUnit`], its
//! `iommu-map` entries only, its register layout from the host device's
//! `SmmuModel`), and a function's stream is bound on the SMMU whose
//! entries cover its requester ID, nowhere else.

use super::{Binding, FunctionOwners, IdMap, Smmu, SmmuError};
use crate::exit::Hw;
use crate::lockstat::LockPath;
use crate::partition::Partition;
use crate::pci::Bdf;
use crate::ratelimit::{FaultKind, FaultLog, Verdict};
use crate::system::System;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

/// One programmed SMMU and how the host bridge's requester IDs reach it.
pub struct SmmuUnit {
    pub smmu: Smmu,
    /// Its register frame.
    pub base: u64,
    /// The host bridge's `iommu-map` entries into it.
    pub maps: Vec<IdMap>,
}

/// The programmed SMMUs, in the order the `iommu-map` first names them.
pub struct SmmuState {
    pub units: Vec<SmmuUnit>,
    /// Rate limit of the lines about streams no partition owns.
    unowned: FaultLog,
}

/// The distinct SMMU frames `maps` names, in order of first mention.
pub fn smmu_bases(maps: &[crate::dtb::PciIommuMap]) -> Vec<u64> {
    let mut bases: Vec<u64> = Vec::new();
    for m in maps {
        if !bases.contains(&m.iommu_base) {
            bases.push(m.iommu_base);
        }
    }
    bases
}

/// Today's ownership model: the partition that owns the host bridge owns
/// every requester ID on its buses. Per-function assignment replaces this
/// one query.
impl FunctionOwners for System {
    fn owner(&self, stream: u16) -> Option<Binding> {
        let bridge = self.host.pcie.as_ref()?;
        let bus = u32::from(stream >> 8);
        if bus < bridge.bus_range.0 || bus > bridge.bus_range.1 {
            return None;
        }
        let partitions = self.partitions();
        // A function assigned by a plan's `pci` list is that partition's
        // (`vpci`); every other one behind the bridge is the whole
        // bridge's owner's, if a partition has it.
        partitions
            .iter()
            .find(|p| {
                p.vpci
                    .as_ref()
                    .is_some_and(|v| v.bdfs().iter().any(|&b| b.rid() == stream))
            })
            .or_else(|| partitions.iter().find(|p| p.plan.pci_host_bridge))
            .map(|p| binding_of(p))
    }
}

fn binding_of(p: &Partition) -> Binding {
    Binding {
        partition: p.index,
        vmid: p.vmid,
        stage2_root: p.dma_root,
    }
}

impl System {
    /// At boot, before any partition starts: every SMMU the host bridge's
    /// `iommu-map` names, each programmed with every stream aborting.
    /// Ok(false) when the host has none (DMA is then untranslated:
    /// docs/DEVICES.md) or the platform cannot reach any. An SMMU the map
    /// names but the host does not describe as `arm,smmu-v3` (or the
    /// platform cannot reach) is skipped and reported: the requester IDs
    /// behind it are not translated. One that refuses to be programmed
    /// fails the whole call (the ones already programmed keep aborting
    /// every stream: fail safe).
    pub fn smmu_init(&self, hw: &mut impl Hw, vtcr: u64) -> Result<bool, SmmuError> {
        let Some(bridge) = self.host.pcie.as_ref() else {
            return Ok(false);
        };
        let mut units = Vec::new();
        for base in smmu_bases(&bridge.iommu_map) {
            let Some(model) = self
                .host
                .smmus_v3()
                .find(|d| d.regs.first().map(|r| r.0) == Some(base))
                .map(|d| d.smmu_model)
            else {
                hw.report(format_args!(
                    "smmu: the host bridge's iommu-map names {base:#x}, which is not an \
                     arm,smmu-v3 of the host: its requester IDs are not translated"
                ));
                continue;
            };
            let maps = bridge
                .iommu_map
                .iter()
                .filter(|m| m.iommu_base == base)
                .map(|m| IdMap {
                    rid_base: m.rid_base,
                    sid_base: m.sid_base,
                    len: m.len,
                })
                .collect();
            let Some((regs, mem)) = hw.smmu_io(base) else {
                continue;
            };
            let smmu = Smmu::init(regs, mem, vtcr, model)?;
            units.push(SmmuUnit { smmu, base, maps });
        }
        if units.is_empty() {
            return Ok(false);
        }
        *self.smmu.lock(LockPath::Management) = Some(SmmuState {
            units,
            unowned: FaultLog::new(),
        });
        self.smmu_on.store(true, Ordering::Release);
        Ok(true)
    }

    /// The frames of the programmed SMMUs (empty without one).
    pub fn smmu_frames(&self) -> Vec<u64> {
        if !self.smmu_on.load(Ordering::Acquire) {
            return Vec::new();
        }
        let guard = self.smmu.lock(LockPath::Management);
        guard
            .as_ref()
            .map(|st| st.units.iter().map(|u| u.base).collect())
            .unwrap_or_default()
    }

    /// `p` (re)starts owning `functions` (found behind its host bridge,
    /// quiesced): its old streams abort, then each function's stream
    /// translates through the stage 2 the ownership query names. Returns
    /// how many streams were bound.
    pub fn smmu_bind(
        &self,
        hw: &mut impl Hw,
        p: &Partition,
        functions: &[Bdf],
    ) -> Result<u32, SmmuError> {
        if !self.smmu_on.load(Ordering::Acquire) {
            return Ok(0);
        }
        let mut guard = self.smmu.lock(LockPath::Management);
        let Some(st) = guard.as_mut() else {
            return Ok(0);
        };
        let mut bound = 0;
        for unit in &mut st.units {
            let Some((regs, mem)) = hw.smmu_io(unit.base) else {
                continue;
            };
            unit.smmu.release_partition(regs, mem, p.index)?;
            // Only the functions whose requester IDs this SMMU's map covers.
            bound += unit.smmu.bind_functions(
                regs,
                mem,
                &unit.maps,
                functions.iter().map(|&b| b.rid()),
                self,
            )?;
        }
        Ok(bound)
    }

    /// Partition `index` is going (deleted, changed): its streams abort
    /// and its VMID's walks are invalidated before its RAM and tables are
    /// reused.
    pub fn smmu_release(&self, hw: &mut impl Hw, index: usize) {
        if !self.smmu_on.load(Ordering::Acquire) {
            return;
        }
        let mut guard = self.smmu.lock(LockPath::Management);
        let Some(st) = guard.as_mut() else { return };
        for unit in &mut st.units {
            let Some((regs, mem)) = hw.smmu_io(unit.base) else {
                continue;
            };
            if let Err(e) = unit.smmu.release_partition(regs, mem, index) {
                hw.report(format_args!(
                    "smmu {:#x}: releasing partition {index}'s streams: {e}",
                    unit.base
                ));
            }
        }
    }

    /// Drains the event queue (the management calls and the stats line
    /// do; no SMMU interrupt is used): each fault is its partition's,
    /// counted and logged (rate-limited), or the hypervisor's for a stream
    /// nobody owns. Returns how many records were read.
    pub fn smmu_poll(&self, hw: &mut impl Hw) -> u32 {
        if !self.smmu_on.load(Ordering::Acquire) {
            return 0;
        }
        // A management call on another CPU is draining: it will see ours.
        let Some(mut guard) = self.smmu.try_lock(LockPath::Management) else {
            return 0;
        };
        let Some(st) = guard.as_mut() else { return 0 };
        let mut events = 0;
        for i in 0..st.units.len() {
            events += self.smmu_poll_unit(hw, st, i);
        }
        events
    }

    /// [`System::smmu_poll`] of one SMMU.
    fn smmu_poll_unit(&self, hw: &mut impl Hw, st: &mut SmmuState, i: usize) -> u32 {
        let unit = &mut st.units[i];
        let Some((regs, mem)) = hw.smmu_io(unit.base) else {
            return 0;
        };
        let mut faults = Vec::new();
        let drained = unit.smmu.poll_events(regs, mem, |f| faults.push(f));
        let maps = unit.maps.clone();
        let base = unit.base;
        let (now, freq) = (hw.now(), hw.counter_frequency());
        for f in faults {
            let e = f.event;
            let source = super::sid_to_rid(&maps, e.sid).map(|r| Bdf {
                bus: (r >> 8) as u8,
                dev: ((r >> 3) & 0x1f) as u8,
                func: (r & 7) as u8,
            });
            let dir = if e.read { "read" } else { "write" };
            match f.partition.and_then(|i| self.partition(i)) {
                Some(p) => {
                    if let Verdict::Print { suppressed } = p.fault(FaultKind::Dma, now, freq) {
                        let line = alloc::format!(
                            "DMA fault: {} stream {:#x}{} {dir} at IPA {:#x} stopped by the SMMU{}",
                            e.kind.name(),
                            e.sid,
                            source.map(|b| alloc::format!(" ({b})")).unwrap_or_default(),
                            e.addr,
                            if suppressed > 0 {
                                alloc::format!(" ({suppressed} more of this kind suppressed)")
                            } else {
                                alloc::string::String::new()
                            }
                        );
                        hw.report(format_args!("partition {}: {line}", p.name));
                        p.fault_event(hw, format_args!("{line}"));
                    }
                }
                None => {
                    if let Verdict::Print { .. } = st.unowned.check(FaultKind::Dma, now, freq) {
                        hw.report(format_args!(
                            "smmu {base:#x}: {} from stream {:#x} no partition owns: aborted",
                            e.kind.name(),
                            e.sid
                        ));
                    }
                }
            }
        }
        if drained.overflowed {
            hw.report(format_args!(
                "smmu {base:#x}: event queue overflowed: DMA faults were lost"
            ));
        }
        drained.events
    }

    /// The SMMUs' counters summed, for the stats line: (events, overflows,
    /// bound streams).
    pub fn smmu_stats(&self) -> Option<(u64, u64, usize)> {
        if !self.smmu_on.load(Ordering::Acquire) {
            return None;
        }
        let guard = self.smmu.lock(LockPath::Management);
        let st = guard.as_ref()?;
        Some(st.units.iter().fold((0, 0, 0), |(e, o, b), u| {
            (
                e + u.smmu.stats.events,
                o + u.smmu.stats.overflows,
                b + u.smmu.bound_count(),
            )
        }))
    }
}
