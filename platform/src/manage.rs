//! The hypervisor side of the management hypercalls: what the portable
//! dispatcher (`pinfold_hv::hypercall`) asks of the running system.

use crate::arch;
use crate::partition::{self, Partition, STATE_RUNNING, STATE_STOPPED, STATE_STOPPING};
use crate::percpu::{self, CpuLocal, PUBLIC};
use crate::vcpu;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use pinfold_abi::{CpuOwner, ExitCounts, PartitionState, VcpuInfo, VcpuPower};
use pinfold_hv::addr::{Ipa, IpaRange};
use pinfold_hv::console::RingRead;
use pinfold_hv::hypercall::{
    AbiError, GuestMemory, GuestMemoryFault, HostInfo, Manage, PartitionDetail, PartitionSummary,
};
use pinfold_hv::psci::PowerState;

/// The calling partition's RAM, reached through the hypervisor's identity
/// map of host memory.
pub struct CallerRam<'p>(pub &'p Partition);

impl GuestMemory for CallerRam<'_> {
    fn ram_range(&self) -> IpaRange {
        IpaRange::new(self.0.ram_ipa, self.0.ram_size)
    }
    fn write(&mut self, ipa: Ipa, bytes: &[u8]) -> Result<(), GuestMemoryFault> {
        if !self.ram_range().contains_span(ipa, bytes.len() as u64) {
            return Err(GuestMemoryFault);
        }
        let dst = self.0.ram.0 + (ipa.0 - self.0.ram_ipa);
        // SAFETY: the span lies inside the caller's RAM (checked above),
        // which the hypervisor owns and maps at EL2.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, bytes.len()) };
        Ok(())
    }
    fn read(&self, ipa: Ipa, out: &mut [u8]) -> Result<(), GuestMemoryFault> {
        if !self.ram_range().contains_span(ipa, out.len() as u64) {
            return Err(GuestMemoryFault);
        }
        let src = self.0.ram.0 + (ipa.0 - self.0.ram_ipa);
        // SAFETY: as in `write`.
        unsafe { core::ptr::copy_nonoverlapping(src as *const u8, out.as_mut_ptr(), out.len()) };
        Ok(())
    }
}

/// The management operations, run on the management partition's CPU.
pub struct Manager<'c> {
    pub cpu: &'c mut CpuLocal,
}

fn ns_since(start: u64) -> u64 {
    let f = arch::counter_frequency() as u128;
    if f == 0 || start == 0 {
        return 0;
    }
    (arch::counter().saturating_sub(start) as u128 * 1_000_000_000 / f) as u64
}

fn state_of(p: &Partition) -> PartitionState {
    match p.state.load(Ordering::Acquire) {
        STATE_RUNNING => PartitionState::Running,
        STATE_STOPPING => PartitionState::Stopping,
        _ => PartitionState::Stopped,
    }
}

fn summary(p: &Partition) -> PartitionSummary {
    let running = p.state.load(Ordering::Acquire) == STATE_RUNNING;
    PartitionSummary {
        index: p.index as u32,
        name: p.name.clone(),
        state: state_of(p),
        cpus: p.plan.cpus.clone(),
        ram_bytes: p.ram_size,
        uptime_ns: if running {
            ns_since(p.started_at.load(Ordering::Relaxed))
        } else {
            0
        },
        boot_count: p.boot_count.load(Ordering::Relaxed) as u32,
        management: p.plan.management,
    }
}

fn find(index: u32) -> Result<&'static Partition, AbiError> {
    partition::get(index as usize).ok_or(AbiError::NotFound)
}

impl Manage for Manager<'_> {
    fn host_info(&self) -> HostInfo {
        let host = crate::host();
        let cpus = (0..host.cpus.len() as u32)
            .map(|cpu| CpuOwner {
                cpu,
                partition: crate::assigned_vcpu(cpu as usize).map(|id| id.partition as u32),
            })
            .collect();
        HostInfo {
            version: alloc::string::String::from(crate::VERSION),
            gic_version: host.gic.version,
            cpu_count: host.cpus.len() as u32,
            ram_bytes: host.memory.iter().map(|m| m.1).sum(),
            uptime_ns: ns_since(crate::boot_counter()),
            cpus,
        }
    }

    fn partitions(&self) -> Vec<PartitionSummary> {
        partition::all().iter().map(summary).collect()
    }

    fn detail(&self, index: u32) -> Option<PartitionDetail> {
        let p = partition::get(index as usize)?;
        let vcpus = p
            .vcpus
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let public = &PUBLIC[s.pcpu];
                let c = |k: usize| public.exit_class[k].load(Ordering::Relaxed);
                VcpuInfo {
                    vcpu: i as u32,
                    cpu: s.pcpu as u32,
                    power: match s.power.state() {
                        PowerState::On => VcpuPower::On,
                        PowerState::Off => VcpuPower::Off,
                        PowerState::OnPending => VcpuPower::OnPending,
                    },
                    exits: ExitCounts {
                        mmio: c(percpu::EXIT_MMIO),
                        sysreg: c(percpu::EXIT_SYSREG),
                        hvc: c(percpu::EXIT_HVC),
                        irq: c(percpu::EXIT_IRQ),
                        abort: c(percpu::EXIT_ABORT),
                        other: c(percpu::EXIT_OTHER),
                    },
                    injected: public.injected.load(Ordering::Relaxed),
                }
            })
            .collect();
        Some(PartitionDetail {
            summary: summary(p),
            faults: p.faults.load(Ordering::Relaxed),
            vcpus,
        })
    }

    fn start(&mut self, index: u32) -> Result<(), AbiError> {
        let p = find(index)?;
        if p.state.load(Ordering::Acquire) != STATE_STOPPED || !all_off(p) {
            return Err(AbiError::Conflict);
        }
        vcpu::start_partition(p);
        Ok(())
    }

    fn stop(&mut self, index: u32) -> Result<(), AbiError> {
        let p = find(index)?;
        if p.state.load(Ordering::Acquire) != STATE_RUNNING || self.owns_this_cpu(p) {
            return Err(AbiError::Conflict);
        }
        vcpu::stop_partition(p);
        Ok(())
    }

    fn restart(&mut self, index: u32) -> Result<(), AbiError> {
        let p = find(index)?;
        if p.state.load(Ordering::Acquire) != STATE_RUNNING || self.owns_this_cpu(p) {
            return Err(AbiError::Conflict);
        }
        vcpu::stop_partition(p);
        if !vcpu::wait_all_off(p) {
            crate::hvlog!("partition {}: restart: a vCPU did not stop in time", p.name);
        }
        vcpu::start_partition(p);
        Ok(())
    }

    fn console_read(&self, index: u32, offset: u64, out: &mut [u8]) -> Option<RingRead> {
        let p = partition::get(index as usize)?;
        let con = p.console.lock();
        Some(con.ring.read(offset, out))
    }

    fn token(&self) -> alloc::string::String {
        alloc::string::String::from(partition::management_token())
    }

    fn console_write(&mut self, index: u32, bytes: &[u8]) -> Option<usize> {
        let p = partition::get(index as usize)?;
        Some(crate::console::input(self.cpu, p, bytes))
    }
}

impl Manager<'_> {
    fn owns_this_cpu(&self, p: &Partition) -> bool {
        p.vcpus.iter().any(|s| s.pcpu == self.cpu.index)
    }
}

fn all_off(p: &Partition) -> bool {
    p.vcpus.iter().all(|s| s.power.state() == PowerState::Off)
}
