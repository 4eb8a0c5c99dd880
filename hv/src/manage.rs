//! The hypervisor side of the management hypercalls: what the portable
//! dispatcher (`hypercall::dispatch`, which decodes and checks every
//! argument) asks of the running system. Runs on the management partition's
//! CPU, inside its HVC exit.

use crate::console::RingRead;
use crate::exit::{console_input, Hw};
use crate::hypercall::{
    AbiError, HostInfo, ImageInfo, ImageKind, Manage, PartitionDetail, PartitionPlan,
    PartitionSummary, Refusal, Resources,
};
use crate::lockstat::LockPath;
use crate::partition::Partition;
use crate::percpu::CpuState;
use crate::psci::PowerState;
use crate::system::System;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::sync::atomic::Ordering;
use pinfold_abi::{
    CpuOwner, CrashInfo, ExitCounts, ManagerStatus, PartitionState, PciFunction, Transition,
    VcpuInfo, VcpuPower,
};
use pinfold_vboard::ExitClass;

/// The management operations of one call.
pub struct Manager<'a, 's, 'h, H: Hw> {
    pub sys: &'a System,
    pub cpu: &'a mut CpuState<'s>,
    pub hw: &'a RefCell<&'h mut H>,
}

fn state_of(p: &Partition) -> PartitionState {
    p.state().abi()
}

impl<H: Hw> Manager<'_, '_, '_, H> {
    fn find(&self, index: u32) -> Result<Arc<Partition>, AbiError> {
        self.sys.partition(index as usize).ok_or(AbiError::NotFound)
    }

    fn owns_this_cpu(&self, p: &Partition) -> bool {
        p.vcpus.iter().any(|s| s.pcpu == self.cpu.index)
    }

    /// Unix ms at counter value `at` (0: the hypervisor's start), if the
    /// host has a clock.
    fn unix_ms(&self, hw: &H, at: u64) -> Option<u64> {
        let at = if at == 0 { self.sys.boot_counter } else { at };
        self.sys
            .wall_clock
            .map(|c| c.unix_ms_at(at, hw.counter_frequency()))
    }

    fn summary(&self, p: &Partition) -> PartitionSummary {
        let hw = self.hw.borrow();
        let (restarts, last_crash) = {
            let inner = p.life.inner.lock(LockPath::Management);
            (
                inner.policy.restarts(),
                inner.last_crash.as_ref().map(|c| CrashInfo {
                    unix_ms: self.unix_ms(&hw, c.at),
                    reason: c.reason.clone(),
                }),
            )
        };
        PartitionSummary {
            index: p.index as u32,
            name: p.name.clone(),
            state: state_of(p),
            cpus: p.plan.cpus.clone(),
            ram_bytes: p.ram_size,
            uptime_ns: if p.state().is_up() {
                self.sys
                    .ns_since(&**hw, p.started_at.load(Ordering::Relaxed))
            } else {
                0
            },
            boot_count: p.boot_count.load(Ordering::Relaxed) as u32,
            management: p.plan.management,
            state_since_ms: self.unix_ms(&hw, p.life.since()),
            restarts,
            last_crash,
        }
    }
}

impl<H: Hw> Manage for Manager<'_, '_, '_, H> {
    fn host_info(&self) -> HostInfo {
        let host = &self.sys.host;
        let cpus = (0..self.sys.cpus.len() as u32)
            .map(|cpu| CpuOwner {
                cpu,
                partition: self
                    .sys
                    .assigned(cpu as usize)
                    .map(|id| id.partition as u32),
            })
            .collect();
        let hw = self.hw.borrow();
        HostInfo {
            version: String::from(self.sys.version),
            gic_version: host.gic.found.version,
            cpu_count: host.cpus.len() as u32,
            ram_bytes: host.memory.iter().map(|m| m.1).sum(),
            uptime_ns: self.sys.ns_since(&**hw, self.sys.boot_counter),
            cpus,
        }
    }

    fn gic_info(&self) -> Option<pinfold_abi::GicReport> {
        let found = &self.sys.host.gic.found;
        let host = pinfold_abi::GicHost {
            version: found.version,
            v4_1: found.v4_1,
            its_count: found.its_count,
            lpis: found.lpis,
            direct_vlpi: found.direct_vlpi,
            direct_vsgi: found.direct_vsgi,
            probed: found.probed,
            irs_count: found.irs_count,
            gcie_legacy: found.v5.is_some_and(|v5| v5.gcie_legacy),
        };
        let partitions = self
            .sys
            .partitions()
            .iter()
            .map(|p| pinfold_abi::PartitionGic {
                index: p.index as u32,
                interface: match p.gic {
                    crate::vgic5::GicInterface::V3 => pinfold_abi::GicInterface::Gicv3,
                    crate::vgic5::GicInterface::V5 => pinfold_abi::GicInterface::Gicv5,
                },
            })
            .collect();
        Some(pinfold_abi::GicReport { host, partitions })
    }

    fn partitions(&self) -> Vec<PartitionSummary> {
        self.sys
            .partitions()
            .iter()
            .map(|p| self.summary(p))
            .collect()
    }

    fn detail(&self, index: u32) -> Option<PartitionDetail> {
        let p = self.sys.partition(index as usize)?;
        let vcpus = p
            .vcpus
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let c = &self.sys.cpus[s.pcpu].counters;
                VcpuInfo {
                    vcpu: i as u32,
                    cpu: s.pcpu as u32,
                    power: match s.power.state() {
                        PowerState::On => VcpuPower::On,
                        PowerState::Off => VcpuPower::Off,
                        PowerState::OnPending => VcpuPower::OnPending,
                    },
                    exits: ExitCounts {
                        mmio: c.exits_of(ExitClass::Mmio),
                        sysreg: c.exits_of(ExitClass::SysReg),
                        hvc: c.exits_of(ExitClass::Hvc),
                        irq: c.exits_of(ExitClass::Irq),
                        abort: c.exits_of(ExitClass::Abort),
                        other: c.exits_of(ExitClass::Other),
                    },
                    injected: c.injected_count(),
                }
            })
            .collect();
        let pci = p.pci_found.lock(LockPath::Management).clone();
        Some(PartitionDetail {
            summary: self.summary(&p),
            faults: p.faults.load(Ordering::Relaxed),
            vcpus,
            plan: p.plan.clone(),
            pci,
        })
    }

    fn start(&mut self, index: u32) -> Result<(), AbiError> {
        let p = self.find(index)?;
        if !state_of(&p).allows(Transition::Start) || !p.all_off() {
            return Err(AbiError::Conflict);
        }
        self.sys.operator_lifecycle(&p);
        let me = self.cpu.index;
        let _ = self
            .sys
            .start_partition(&p, &mut **self.hw.borrow_mut(), me);
        Ok(())
    }

    fn stop(&mut self, index: u32) -> Result<(), AbiError> {
        let p = self.find(index)?;
        if !state_of(&p).allows(Transition::Stop) || self.owns_this_cpu(&p) {
            return Err(AbiError::Conflict);
        }
        self.sys.operator_lifecycle(&p);
        self.sys.stop_partition_for(
            &p,
            &mut **self.hw.borrow_mut(),
            self.cpu.index,
            "stopped by the manager",
        );
        Ok(())
    }

    fn restart(&mut self, index: u32) -> Result<(), AbiError> {
        let p = self.find(index)?;
        if !state_of(&p).allows(Transition::Restart) || self.owns_this_cpu(&p) {
            return Err(AbiError::Conflict);
        }
        self.sys.operator_lifecycle(&p);
        let me = self.cpu.index;
        let mut hw = self.hw.borrow_mut();
        self.sys
            .stop_partition_for(&p, &mut **hw, me, "stopped by the manager (restart)");
        if !self.sys.wait_all_off(&p, &mut **hw) {
            hw.log(format_args!(
                "partition {}: restart: a vCPU did not stop in time",
                p.name
            ));
        }
        let _ = self.sys.start_partition(&p, &mut **hw, me);
        Ok(())
    }

    fn console_read(&self, index: u32, offset: u64, out: &mut [u8]) -> Option<RingRead> {
        let p = self.sys.partition(index as usize)?;
        let con = p.console.lock(LockPath::Management);
        Some(con.ring.read(offset, out))
    }

    fn console_write(&mut self, index: u32, bytes: &[u8]) -> Option<usize> {
        let p = self.sys.partition(index as usize)?;
        Some(console_input(
            self.sys,
            self.cpu,
            &mut **self.hw.borrow_mut(),
            &p,
            bytes,
        ))
    }

    fn token_digest(&self) -> [u8; 32] {
        *self.sys.token_digest()
    }

    fn entropy(&mut self, out: &mut [u8]) -> Result<(), AbiError> {
        self.sys
            .fill_entropy(out)
            .map_err(|crate::entropy::NoEntropy| AbiError::NotFound)
    }

    fn report(&mut self, status: ManagerStatus, detail: &[u8]) {
        let Some(p) = self.sys.partition_on(self.cpu.index) else {
            return;
        };
        let detail = String::from_utf8_lossy(detail);
        let detail = detail.trim_end();
        let mut report = p.report.lock(LockPath::Management);
        if report.0 == status && report.1 == detail {
            return;
        }
        *report = (status, String::from(detail));
        drop(report);
        self.hw.borrow_mut().log(format_args!(
            "partition {}: manager reports {}: {detail}",
            p.name,
            status.name()
        ));
    }

    fn pci_functions(&self) -> Vec<PciFunction> {
        self.sys
            .partition_on(self.cpu.index)
            .map(|p| p.pci_found.lock(LockPath::Management).clone())
            .unwrap_or_default()
    }

    fn shutdown(&mut self, index: u32) -> Result<(), AbiError> {
        let sys = self.sys;
        let p = self.find(index)?;
        if !state_of(&p).allows(Transition::Shutdown) || self.owns_this_cpu(&p) {
            return Err(AbiError::Conflict);
        }
        sys.press_power_button(&p, &mut **self.hw.borrow_mut(), self.cpu);
        Ok(())
    }

    fn events(&self, seq: u64, max_bytes: usize) -> Option<(Vec<pinfold_abi::Event>, u64, u64)> {
        let freq = self.hw.borrow().counter_frequency();
        let read = self
            .sys
            .events
            .read(seq, max_bytes, |counter| self.sys.unix_ms_at(counter, freq));
        Some((read.events, read.next, read.dropped))
    }

    fn wall_clock_ms(&self) -> Option<u64> {
        let hw = self.hw.borrow();
        self.sys
            .wall_clock
            .map(|c| c.unix_ms_at(hw.now(), hw.counter_frequency()))
    }
    fn image_create(&mut self, kind: ImageKind, size: u64) -> Result<u32, AbiError> {
        self.sys.image_create(kind, size)
    }

    fn image_write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<usize, AbiError> {
        self.sys
            .image_write(id, offset, bytes, &mut **self.hw.borrow_mut())
    }

    fn config_applied(&mut self) -> Result<(), AbiError> {
        let me = self.cpu.index;
        let started = self.sys.release_held(&mut **self.hw.borrow_mut(), me);
        if started > 0 {
            self.hw.borrow_mut().log(format_args!(
                "configuration applied by the manager: {started} held partition(s) started"
            ));
        }
        Ok(())
    }

    fn image_read(&mut self, id: u32, offset: u64, out: &mut [u8]) -> Result<usize, AbiError> {
        self.sys.image_read(id, offset, out, &**self.hw.borrow())
    }

    fn image_seal(&mut self, id: u32, digest: Option<[u8; 32]>) -> Result<(), Refusal> {
        self.sys.image_seal(id, digest, &mut **self.hw.borrow_mut())
    }

    fn image_delete(&mut self, id: u32) -> Result<(), AbiError> {
        self.sys.image_delete(id, &mut **self.hw.borrow_mut())
    }

    fn images(&self) -> Vec<ImageInfo> {
        self.sys.images()
    }

    fn create(&mut self, plan: PartitionPlan) -> Result<u32, Refusal> {
        let me = self.cpu.index;
        self.sys
            .create_partition(plan, &mut **self.hw.borrow_mut(), me)
    }

    fn configure(&mut self, index: u32, plan: PartitionPlan) -> Result<(), Refusal> {
        self.sys
            .configure_partition(index as usize, plan, &mut **self.hw.borrow_mut())
    }

    fn destroy(&mut self, index: u32) -> Result<(), AbiError> {
        self.sys
            .destroy_partition(index as usize, &mut **self.hw.borrow_mut())
    }

    fn resources(&self) -> Option<Resources> {
        Some(self.sys.resources())
    }
}
