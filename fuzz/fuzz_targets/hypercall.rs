//! The management hypercall ABI, decode and dispatch: any X0..X5 from any
//! caller, over guest RAM whose bytes are the input's (so request buffers
//! hold fuzzed requests). Never panics; a caller that is not the management
//! partition always gets NOT_SUPPORTED; nothing is written outside the
//! caller's RAM (the fake refuses such copies and the test fails).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinfold_abi::{
    AbiError, CpuOwner, HostInfo, ManagerStatus, PartitionDetail, PartitionPlan, PartitionState,
    PartitionSummary, PciFunction,
};
use pinfold_hv::addr::{Ipa, IpaRange};
use pinfold_hv::console::RingRead;
use pinfold_hv::hypercall::{dispatch, GuestMemory, GuestMemoryFault, Manage, Refusal};

const RAM_BASE: u64 = 0x4000_0000;
const RAM_SIZE: u64 = 0x1_0000;

struct Ram(Vec<u8>);

impl Ram {
    fn span(&self, ipa: Ipa, len: usize) -> Result<core::ops::Range<usize>, GuestMemoryFault> {
        let start = ipa.0.checked_sub(RAM_BASE).ok_or(GuestMemoryFault)? as usize;
        let end = start.checked_add(len).ok_or(GuestMemoryFault)?;
        assert!(
            end as u64 <= RAM_SIZE,
            "copy past the caller's RAM: {ipa:?}+{len}"
        );
        Ok(start..end)
    }
}

impl GuestMemory for Ram {
    fn ram_range(&self) -> IpaRange {
        IpaRange::new(RAM_BASE, RAM_SIZE)
    }
    fn write(&mut self, ipa: Ipa, bytes: &[u8]) -> Result<(), GuestMemoryFault> {
        let r = self.span(ipa, bytes.len())?;
        self.0[r].copy_from_slice(bytes);
        Ok(())
    }
    fn read(&self, ipa: Ipa, out: &mut [u8]) -> Result<(), GuestMemoryFault> {
        let r = self.span(ipa, out.len())?;
        out.copy_from_slice(&self.0[r]);
        Ok(())
    }
}

struct Hv;

fn summary(index: u32) -> PartitionSummary {
    PartitionSummary {
        index,
        name: format!("p{index}"),
        state: if index == 0 {
            PartitionState::Running
        } else {
            PartitionState::Stopped
        },
        cpus: vec![index],
        ram_bytes: 64 << 20,
        uptime_ns: 1,
        boot_count: 1,
        management: index == 0,
        state_since_ms: None,
        restarts: 0,
        last_crash: None,
    }
}

impl Manage for Hv {
    fn host_info(&self) -> HostInfo {
        HostInfo {
            version: "fuzz".into(),
            gic_version: 3,
            cpu_count: 2,
            ram_bytes: 1 << 30,
            uptime_ns: 1,
            cpus: vec![CpuOwner {
                cpu: 0,
                partition: Some(0),
            }],
        }
    }
    fn partitions(&self) -> Vec<PartitionSummary> {
        vec![summary(0), summary(1)]
    }
    fn detail(&self, index: u32) -> Option<PartitionDetail> {
        (index < 2).then(|| PartitionDetail {
            summary: summary(index),
            faults: 0,
            vcpus: Vec::new(),
            plan: PartitionPlan::new(
                "p".into(),
                vec![index],
                64 << 20,
                pinfold_config::KernelPlan {
                    image: 0,
                    format: pinfold_config::KernelFormat::Raw,
                },
            ),
            pci: Vec::new(),
        })
    }
    fn start(&mut self, index: u32) -> Result<(), AbiError> {
        if index < 2 {
            Ok(())
        } else {
            Err(AbiError::NotFound)
        }
    }
    fn stop(&mut self, index: u32) -> Result<(), AbiError> {
        self.start(index)
    }
    fn restart(&mut self, index: u32) -> Result<(), AbiError> {
        self.start(index)
    }
    fn console_read(&self, index: u32, offset: u64, out: &mut [u8]) -> Option<RingRead> {
        (index < 2).then(|| {
            let len = out.len().min(16);
            out[..len].fill(b'x');
            RingRead {
                len,
                next: offset.saturating_add(len as u64),
                dropped: 0,
            }
        })
    }
    fn console_write(&mut self, index: u32, bytes: &[u8]) -> Option<usize> {
        (index < 2).then_some(bytes.len().min(8))
    }
    fn token_digest(&self) -> [u8; 32] {
        [1; 32]
    }
    fn report(&mut self, _status: ManagerStatus, _detail: &[u8]) {}
    fn pci_functions(&self) -> Vec<PciFunction> {
        Vec::new()
    }
    fn wall_clock_ms(&self) -> Option<u64> {
        Some(1)
    }
    fn create(&mut self, _plan: PartitionPlan) -> Result<u32, Refusal> {
        Ok(2)
    }
    fn configure(&mut self, index: u32, _plan: PartitionPlan) -> Result<(), Refusal> {
        self.start(index).map_err(Refusal::from)
    }
}

fn reg(data: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    for (k, slot) in b.iter_mut().enumerate() {
        *slot = data.get(1 + i * 8 + k).copied().unwrap_or(0);
    }
    u64::from_le_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    let Some(&head) = data.first() else {
        return;
    };
    let mut regs = [0u64; 6];
    for (i, r) in regs.iter_mut().enumerate() {
        *r = reg(data, i);
    }
    // Mostly Pinfold function IDs, buffers mostly inside the fake RAM.
    if head & 1 == 1 {
        regs[0] = 0x8600_0000 | (regs[0] & 0x4000_00ff);
    }
    if head & 2 == 2 {
        regs[1] = RAM_BASE + (regs[1] % RAM_SIZE);
        regs[2] %= 2 * RAM_SIZE;
    }
    let mut ram = vec![0u8; RAM_SIZE as usize];
    let body = data.get(49..).unwrap_or(&[]);
    let n = body.len().min(ram.len());
    ram[..n].copy_from_slice(&body[..n]);
    let mut mem = Ram(ram);
    let management = head & 4 == 4;
    let out = dispatch(management, &regs, &mut mem, &mut Hv);
    if !management {
        assert_eq!(out[0] as i64, AbiError::NotSupported.code());
    }
    let _ = pinfold_abi::Request::decode(&regs);
});
