//! Host tests of the REST layer: routing, auth, every error, console offsets, metrics, the OpenAPI document, and HvcBackend over the real dispatcher.

use super::*;
use pinfold_abi::{
    AbiVersion, CpuOwner, ExitCounts, HostInfo, PartitionDetail, PartitionState, VcpuInfo,
    VcpuPower,
};
use serde_json::{json, Value};

mod config_tests;
mod redfish_tests;
mod runtime_tests;
mod store_tests;

const TOKEN: &str = "s3cret-token";
/// Indices deliberately differ from list positions.
const MGMT: u32 = 5;
const ALPHA: u32 = 9;
const BETA: u32 = 2;

static FILES: &[StaticFile] = &[
    (
        "/index.html",
        "text/html; charset=utf-8",
        b"<html>pinfold</html>",
    ),
    ("/assets/app.js", "text/javascript", b"console.log(1)"),
];

struct FakeBackend {
    partitions: Vec<PartitionSummary>,
    /// ALPHA's console; positions start at `console_base`.
    console: Vec<u8>,
    console_base: u64,
    /// The last console_read's (offset, out.len()).
    last_read: Option<(u64, usize)>,
    written: Vec<u8>,
    calls: Vec<String>,
    /// When set, start/stop/restart fail with this.
    fail_transitions: Option<CallError>,
    /// When set, every listing fails with this.
    fail_list: Option<CallError>,
    /// Console input: most bytes one call takes (None: all).
    input_per_call: Option<usize>,
    /// Console input: room left in the guest's input queue (None: endless);
    /// each pause frees `input_drain` bytes of it, as a guest reading would.
    input_room: Option<usize>,
    input_drain: usize,
    /// Console writes so far, and the one (1-based) that fails, if any.
    writes: usize,
    fail_write: Option<usize>,
    /// Pauses the router asked for.
    pauses: usize,
    /// WALL_CLOCK's answer.
    clock: Result<u64, CallError>,
    /// (3.0) Plan entries by index (absent: one made up from the summary).
    plans: std::collections::BTreeMap<u32, pinfold_abi::PartitionPlan>,
    /// (3.0) Images, with their bytes.
    images: Vec<(pinfold_abi::ImageInfo, Vec<u8>)>,
    next_image: u32,
    next_index: u32,
    /// Free RAM a new partition's memory can come from.
    free_ram: u64,
    /// The largest IMAGE_WRITE seen, and the most one call takes.
    largest_write: usize,
    write_limit: usize,
    /// The hypervisor's event log (EVENTS_READ gives at most 2 per call).
    hv_events: Vec<pinfold_abi::Event>,
    /// A stop ends in `stopped` at once (else `stopping`, for good).
    stop_completes: bool,
    /// (3.3) GIC_INFO's answer (None: a GICv3 host, every partition
    /// `Gicv3`); HOST_INFO's `gic_version` is its version.
    gic: Option<pinfold_abi::GicReport>,
}

fn summary(index: u32, name: &str, state: PartitionState, management: bool) -> PartitionSummary {
    PartitionSummary {
        index,
        name: name.to_string(),
        state,
        cpus: vec![index],
        ram_bytes: 268_435_456,
        uptime_ns: 5_000_000_000,
        boot_count: 1,
        management,
        state_since_ms: None,
        restarts: 0,
        last_crash: None,
    }
}

impl FakeBackend {
    fn new() -> Self {
        FakeBackend {
            partitions: vec![
                summary(MGMT, "mgmt", PartitionState::Running, true),
                summary(ALPHA, "alpha", PartitionState::Running, false),
                summary(BETA, "beta", PartitionState::Stopped, false),
            ],
            console: b"login: ".to_vec(),
            console_base: 100,
            last_read: None,
            written: Vec::new(),
            calls: Vec::new(),
            fail_transitions: None,
            fail_list: None,
            input_per_call: None,
            input_room: None,
            input_drain: 0,
            writes: 0,
            fail_write: None,
            pauses: 0,
            clock: Ok(1_796_132_700_250),
            plans: std::collections::BTreeMap::new(),
            // The boot bundle's kernel, which every built-in partition boots.
            images: vec![(
                pinfold_abi::ImageInfo {
                    id: 0,
                    kind: pinfold_abi::ImageKind::Kernel,
                    size: 64,
                    written: 64,
                    sealed: true,
                    sha256: Some([0x11; 32]),
                    used_by: Vec::new(),
                    boot: true,
                },
                {
                    let mut k = vec![0; 64];
                    k[56..60].copy_from_slice(b"ARM\x64");
                    k
                },
            )],
            next_image: 1,
            next_index: 20,
            free_ram: 1 << 30,
            largest_write: 0,
            write_limit: pinfold_abi::MAX_BUFFER_LEN as usize,
            hv_events: Vec::new(),
            stop_completes: false,
            gic: None,
        }
    }

    /// The plan entry of `index`: the stored one, or one made from its
    /// summary (kernel image 0, the boot bundle's).
    fn plan_of(&self, index: u32) -> Option<pinfold_abi::PartitionPlan> {
        if let Some(plan) = self.plans.get(&index) {
            return Some(plan.clone());
        }
        let s = self.partitions.iter().find(|p| p.index == index)?;
        let mut plan = pinfold_abi::PartitionPlan::new(
            s.name.clone(),
            s.cpus.clone(),
            s.ram_bytes,
            pinfold_config::KernelPlan {
                image: 0,
                format: pinfold_config::KernelFormat::LinuxImage,
            },
        );
        plan.management = s.management;
        Some(plan)
    }

    /// The plan rules the hypervisor applies: pinfold_config's rules (the
    /// build-time check's sentences) against every other partition, then
    /// the kernel/initrd images.
    fn check_plan(
        &self,
        plan: &pinfold_abi::PartitionPlan,
        except: Option<u32>,
    ) -> Result<(), crate::HvError> {
        let reject = |field: &str, problem: String, conflict: bool| {
            Err(crate::HvError::Rejected(pinfold_abi::Rejection {
                field: field.to_string(),
                message: format!("partition \"{}\": {field}: {problem}", plan.name),
                conflict,
            }))
        };
        let others: Vec<pinfold_abi::PartitionPlan> = self
            .partitions
            .iter()
            .filter(|p| Some(p.index) != except)
            .filter_map(|p| self.plan_of(p.index))
            .collect();
        let refs: Vec<&pinfold_abi::PartitionPlan> = others.iter().collect();
        // The fake's partitions sit on CPUs up to 9.
        let host = pinfold_config::rules::HostLimits {
            board: "fake",
            cpus: 16,
        };
        if let Err(r) = pinfold_config::rules::check_partition(plan, &refs, &host) {
            return Err(crate::HvError::Rejected(pinfold_abi::Rejection {
                message: r.to_string(),
                conflict: r.conflict(),
                field: r.field,
            }));
        }
        let image = |id: u32| self.images.iter().find(|(i, _)| i.id == id);
        match image(plan.kernel.image) {
            Some((info, data)) if info.kind == pinfold_abi::ImageKind::Kernel && info.sealed => {
                if plan.kernel.format == pinfold_config::KernelFormat::LinuxImage
                    && data.get(56..60) != Some(b"ARM\x64")
                {
                    return reject(
                        "kernel",
                        format!(
                            "image {} lacks the arm64 Image magic \"ARM\\x64\" at byte 56 (kernel_format = \"linux\")",
                            info.id
                        ),
                        false,
                    );
                }
            }
            _ => {
                return reject(
                    "kernel",
                    format!("no kernel image {}", plan.kernel.image),
                    false,
                )
            }
        }
        Ok(())
    }

    fn image_mut(&mut self, id: u32) -> Result<&mut (pinfold_abi::ImageInfo, Vec<u8>), CallError> {
        self.images
            .iter_mut()
            .find(|(i, _)| i.id == id)
            .ok_or(CallError::Refused(AbiError::NotFound))
    }

    fn set_state(&mut self, index: u32, state: PartitionState) -> Result<(), CallError> {
        let p = self
            .partitions
            .iter_mut()
            .find(|p| p.index == index)
            .ok_or(CallError::Refused(AbiError::NotFound))?;
        p.state = state;
        Ok(())
    }

    fn transition(&mut self, what: &str, index: u32, to: PartitionState) -> Result<(), CallError> {
        self.calls.push(format!("{what} {index}"));
        if let Some(err) = self.fail_transitions {
            return Err(err);
        }
        self.set_state(index, to)
    }
}

impl Backend for FakeBackend {
    fn abi_version(&mut self) -> Result<AbiVersion, CallError> {
        Ok(pinfold_abi::ABI_VERSION)
    }

    fn host_info(&mut self) -> Result<HostInfo, CallError> {
        Ok(HostInfo {
            version: "0.1.0".to_string(),
            gic_version: self.gic.as_ref().map_or(3, |g| g.host.version),
            cpu_count: 4,
            ram_bytes: 2_147_483_648,
            uptime_ns: 12_345_678_901,
            cpus: vec![
                CpuOwner {
                    cpu: 0,
                    partition: Some(MGMT),
                },
                CpuOwner {
                    cpu: 1,
                    partition: Some(ALPHA),
                },
                CpuOwner {
                    cpu: 2,
                    partition: Some(BETA),
                },
                CpuOwner {
                    cpu: 3,
                    partition: None,
                },
            ],
        })
    }

    fn gic_info(&mut self) -> Result<pinfold_abi::GicReport, CallError> {
        if let Some(report) = &self.gic {
            return Ok(report.clone());
        }
        Ok(pinfold_abi::GicReport {
            host: pinfold_abi::GicHost {
                version: 3,
                its_count: 1,
                lpis: true,
                probed: true,
                ..Default::default()
            },
            partitions: self
                .partitions
                .iter()
                .map(|p| pinfold_abi::PartitionGic {
                    index: p.index,
                    interface: pinfold_abi::GicInterface::Gicv3,
                })
                .collect(),
        })
    }

    fn partitions(&mut self) -> Result<Vec<PartitionSummary>, CallError> {
        match self.fail_list {
            Some(err) => Err(err),
            None => Ok(self.partitions.clone()),
        }
    }

    fn detail(&mut self, index: u32) -> Result<PartitionDetail, CallError> {
        let summary = self
            .partitions
            .iter()
            .find(|p| p.index == index)
            .cloned()
            .ok_or(CallError::Refused(AbiError::NotFound))?;
        let plan = self.plan_of(index).expect("summary has a plan");
        Ok(PartitionDetail {
            summary,
            faults: 0,
            vcpus: vec![VcpuInfo {
                vcpu: 0,
                cpu: index,
                power: VcpuPower::OnPending,
                exits: ExitCounts {
                    mmio: 10,
                    sysreg: 3,
                    hvc: 2,
                    irq: 500,
                    abort: 0,
                    other: 0,
                },
                injected: 480,
            }],
            plan,
            pci: fake_pci(index),
        })
    }

    fn start(&mut self, index: u32) -> Result<(), CallError> {
        self.transition("start", index, PartitionState::Running)
    }

    fn stop(&mut self, index: u32) -> Result<(), CallError> {
        let to = if self.stop_completes {
            PartitionState::Stopped
        } else {
            PartitionState::Stopping
        };
        self.transition("stop", index, to)
    }

    fn restart(&mut self, index: u32) -> Result<(), CallError> {
        self.transition("restart", index, PartitionState::Running)
    }

    fn shutdown(&mut self, index: u32) -> Result<(), CallError> {
        self.transition("shutdown", index, PartitionState::ShuttingDown)
    }

    fn console_read(
        &mut self,
        index: u32,
        offset: u64,
        out: &mut [u8],
    ) -> Result<ConsoleRead, CallError> {
        if index != ALPHA {
            return Err(CallError::Refused(AbiError::NotFound));
        }
        self.last_read = Some((offset, out.len()));
        let end = self.console_base + self.console.len() as u64;
        let start = offset.clamp(self.console_base, end);
        let from = (start - self.console_base) as usize;
        let len = (self.console.len() - from).min(out.len());
        out[..len].copy_from_slice(&self.console[from..from + len]);
        Ok(ConsoleRead {
            len,
            next: start + len as u64,
            dropped: start.saturating_sub(offset),
        })
    }

    fn console_write(&mut self, index: u32, bytes: &[u8]) -> Result<usize, CallError> {
        if index != ALPHA {
            return Err(CallError::Refused(AbiError::NotFound));
        }
        self.writes += 1;
        if self.fail_write == Some(self.writes) {
            return Err(CallError::Refused(AbiError::BadAddress));
        }
        let mut n = bytes.len();
        if let Some(per_call) = self.input_per_call {
            n = n.min(per_call);
        }
        if let Some(room) = self.input_room.as_mut() {
            n = n.min(*room);
            *room -= n;
        }
        self.written.extend_from_slice(&bytes[..n]);
        Ok(n)
    }

    fn pause(&mut self, _: std::time::Duration) {
        self.pauses += 1;
        if let Some(room) = self.input_room.as_mut() {
            *room += self.input_drain;
        }
    }

    fn wall_clock_ms(&mut self) -> Result<u64, CallError> {
        self.clock
    }

    fn image_create(&mut self, kind: pinfold_abi::ImageKind, size: u64) -> Result<u32, CallError> {
        self.calls.push(format!("image_create {size}"));
        if size == 0 {
            return Err(CallError::Refused(AbiError::InvalidParameters));
        }
        if size > 512 << 20 {
            return Err(CallError::Refused(AbiError::NoResources));
        }
        let id = self.next_image;
        self.next_image += 1;
        self.images.push((
            pinfold_abi::ImageInfo {
                id,
                kind,
                size,
                written: 0,
                sealed: false,
                sha256: None,
                used_by: Vec::new(),
                boot: false,
            },
            vec![0; size as usize],
        ));
        Ok(id)
    }

    fn image_write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<usize, CallError> {
        self.largest_write = self.largest_write.max(bytes.len());
        let limit = self.write_limit;
        let (info, data) = self.image_mut(id)?;
        if info.sealed {
            return Err(CallError::Refused(AbiError::Conflict));
        }
        let n = bytes.len().min(limit);
        let end = offset as usize + n;
        if end > data.len() {
            return Err(CallError::Refused(AbiError::InvalidParameters));
        }
        data[offset as usize..end].copy_from_slice(&bytes[..n]);
        info.written = info.written.max(end as u64);
        Ok(n)
    }

    fn image_read(&mut self, id: u32, offset: u64, out: &mut [u8]) -> Result<usize, CallError> {
        let (info, data) = self.image_mut(id)?;
        if !info.sealed {
            return Err(CallError::Refused(AbiError::Conflict));
        }
        let start = usize::try_from(offset)
            .ok()
            .filter(|&o| o <= data.len())
            .ok_or(CallError::Refused(AbiError::InvalidParameters))?;
        let n = (data.len() - start).min(out.len());
        out[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }

    fn image_seal(&mut self, id: u32, sha256: Option<[u8; 32]>) -> Result<(), crate::HvError> {
        use sha2::Digest;
        let (info, data) = self.image_mut(id)?;
        let digest: [u8; 32] = sha2::Sha256::digest(&data[..]).into();
        let problem = if info.written < info.size {
            Some((
                "body",
                format!(
                    "image {id} is incomplete: {} of {} bytes",
                    info.written, info.size
                ),
            ))
        } else {
            // The hypervisor's sentence (hv::images::ImageStore::seal).
            sha256.filter(|d| *d != digest).map(|want| {
                (
                    "sha256",
                    format!(
                        "image {id}: its SHA-256 is {}, not {}",
                        crate::json::hex(&digest),
                        crate::json::hex(&want)
                    ),
                )
            })
        };
        if let Some((field, message)) = problem {
            // A refused image is discarded.
            self.images.retain(|(i, _)| i.id != id);
            return Err(crate::HvError::Rejected(pinfold_abi::Rejection {
                field: field.into(),
                message,
                conflict: false,
            }));
        }
        info.sealed = true;
        info.sha256 = Some(digest);
        Ok(())
    }

    fn image_delete(&mut self, id: u32) -> Result<(), CallError> {
        self.calls.push(format!("image_delete {id}"));
        let used = self
            .images()
            .map(|list| list.iter().any(|i| i.id == id && !i.used_by.is_empty()))?;
        self.image_mut(id)?;
        if used {
            return Err(CallError::Refused(AbiError::Conflict));
        }
        self.images.retain(|(i, _)| i.id != id);
        Ok(())
    }

    fn images(&mut self) -> Result<Vec<pinfold_abi::ImageInfo>, CallError> {
        let plans: Vec<(u32, pinfold_abi::PartitionPlan)> = self
            .partitions
            .iter()
            .filter_map(|p| self.plan_of(p.index).map(|plan| (p.index, plan)))
            .collect();
        Ok(self
            .images
            .iter()
            .map(|(info, _)| {
                let mut info = info.clone();
                info.used_by = plans
                    .iter()
                    .filter(|(_, p)| p.kernel.image == info.id || p.initrd == Some(info.id))
                    .map(|(i, _)| *i)
                    .collect();
                info
            })
            .collect())
    }

    fn create(&mut self, plan: &pinfold_abi::PartitionPlan) -> Result<u32, crate::HvError> {
        self.calls.push(format!("create {}", plan.name));
        self.check_plan(plan, None)?;
        if plan.ram_size > self.free_ram {
            return Err(CallError::Refused(AbiError::NoResources).into());
        }
        self.free_ram -= plan.ram_size;
        let index = self.next_index;
        self.next_index += 1;
        let mut s = summary(index, &plan.name, PartitionState::Stopped, false);
        s.cpus = plan.cpus.clone();
        s.ram_bytes = plan.ram_size;
        s.boot_count = 0;
        s.uptime_ns = 0;
        self.partitions.push(s);
        self.plans.insert(index, plan.clone());
        Ok(index)
    }

    fn configure(
        &mut self,
        index: u32,
        plan: &pinfold_abi::PartitionPlan,
    ) -> Result<(), crate::HvError> {
        self.calls.push(format!("configure {index}"));
        let old = self
            .plan_of(index)
            .ok_or(CallError::Refused(AbiError::NotFound))?;
        self.check_plan(plan, Some(index))?;
        if plan.ram_size > self.free_ram + old.ram_size {
            return Err(CallError::Refused(AbiError::NoResources).into());
        }
        self.free_ram = self.free_ram + old.ram_size - plan.ram_size;
        let s = self
            .partitions
            .iter_mut()
            .find(|p| p.index == index)
            .expect("has a plan");
        if !s.state.allows(Transition::Configure) {
            return Err(CallError::Refused(AbiError::Conflict).into());
        }
        s.name = plan.name.clone();
        s.cpus = plan.cpus.clone();
        s.ram_bytes = plan.ram_size;
        self.plans.insert(index, plan.clone());
        Ok(())
    }

    fn destroy(&mut self, index: u32) -> Result<(), CallError> {
        self.calls.push(format!("destroy {index}"));
        let s = self
            .partitions
            .iter()
            .find(|p| p.index == index)
            .ok_or(CallError::Refused(AbiError::NotFound))?;
        if !s.state.allows(Transition::Configure) {
            return Err(CallError::Refused(AbiError::Conflict));
        }
        self.free_ram += s.ram_bytes;
        self.partitions.retain(|p| p.index != index);
        self.plans.remove(&index);
        Ok(())
    }

    fn resources(&mut self) -> Result<pinfold_abi::Resources, CallError> {
        use pinfold_abi::{RamOwner, RamRange};
        let mut ram = vec![RamRange {
            base: 0x4000_0000,
            size: 64 << 20,
            owner: RamOwner::Hypervisor,
        }];
        let mut base = 0x4400_0000;
        for p in &self.partitions {
            ram.push(RamRange {
                base,
                size: p.ram_bytes,
                owner: RamOwner::Partition(p.index),
            });
            base += p.ram_bytes;
        }
        ram.push(RamRange {
            base,
            size: self.free_ram,
            owner: RamOwner::Free,
        });
        ram.push(RamRange {
            base: 0x1_0000_0000,
            size: 8 << 20,
            owner: RamOwner::Scrubbing { left: 2 << 20 },
        });
        let owner = |cpu: u32| {
            self.partitions
                .iter()
                .find(|p| p.cpus.contains(&cpu))
                .map(|p| p.index)
        };
        Ok(pinfold_abi::Resources {
            cpus: (0..4)
                .map(|cpu| CpuOwner {
                    cpu,
                    partition: owner(cpu),
                })
                .collect(),
            ram,
            largest_free: self.free_ram,
            images_bytes: self.images.iter().map(|(i, _)| i.size).sum(),
            devices: vec![
                pinfold_abi::DeviceOwner {
                    node: "/pl011@9040000".into(),
                    base: 0x904_0000,
                    size: 0x1000,
                    partition: Some(ALPHA),
                    hypervisor: false,
                },
                pinfold_abi::DeviceOwner {
                    node: "/intc@8000000".into(),
                    base: 0x800_0000,
                    size: 0x1_0000,
                    partition: None,
                    hypervisor: true,
                },
                pinfold_abi::DeviceOwner {
                    node: "/pl061@9030000".into(),
                    base: 0x903_0000,
                    size: 0x1000,
                    partition: None,
                    hypervisor: false,
                },
            ],
        })
    }

    fn events(&mut self, seq: u64) -> Result<(Vec<pinfold_abi::Event>, u64, u64), CallError> {
        let got: Vec<_> = self
            .hv_events
            .iter()
            .filter(|e| e.seq >= seq)
            .take(2)
            .cloned()
            .collect();
        let end = self.hv_events.last().map_or(0, |e| e.seq + 1);
        let next = got.last().map_or(end.max(seq), |e| e.seq + 1);
        Ok((got, next, 0))
    }
}

/// The fake's PCI functions, as the default plan has them: a
/// virtio-net-pci each (mgmt 00:01.0, alpha 00:02.0, beta 00:03.0), and
/// beta also an NVMe controller (00:04.0, not a NIC).
fn fake_pci(index: u32) -> Vec<pinfold_abi::PciFunction> {
    let f = |device, device_id, class| pinfold_abi::PciFunction {
        bus: 0,
        device,
        function: 0,
        vendor_id: if class == 0x02_00_00 { 0x1af4 } else { 0x1b36 },
        device_id,
        class,
    };
    match index {
        MGMT => vec![f(1, 0x1041, 0x02_00_00)],
        ALPHA => vec![f(2, 0x1041, 0x02_00_00)],
        BETA => vec![f(3, 0x1041, 0x02_00_00), f(4, 0x0010, 0x01_08_02)],
        _ => Vec::new(),
    }
}

fn hv_event(seq: u64, partition: &str, message: &str) -> pinfold_abi::Event {
    pinfold_abi::Event {
        seq,
        unix_ms: Some(1_796_132_700_000 + seq * 1000),
        kind: pinfold_abi::EventKind::State,
        partition: Some((BETA, partition.to_string())),
        message: message.to_string(),
    }
}

fn router() -> Router<FakeBackend> {
    Router::new(
        FakeBackend::new(),
        Some(token_digest(TOKEN.as_bytes())),
        FILES,
    )
}

/// A GET with the operator (boot) token; [`anon_get`] has none.
fn get(path: &str) -> Request {
    Request {
        method: "GET".into(),
        path: path.into(),
        headers: vec![("Authorization".into(), format!("Bearer {TOKEN}"))],
        ..Request::default()
    }
}

fn anon_get(path: &str) -> Request {
    Request {
        method: "GET".into(),
        path: path.into(),
        ..Request::default()
    }
}

fn with_token(mut req: Request, token: &str) -> Request {
    req.headers
        .retain(|(k, _)| !k.eq_ignore_ascii_case("authorization"));
    req.headers
        .push(("Authorization".into(), format!("Bearer {token}")));
    req
}

fn with_header(mut req: Request, name: &str, value: &str) -> Request {
    req.headers.push((name.into(), value.into()));
    req
}

/// A router that can make credentials, and a viewer token it made.
fn router_with_viewer() -> (Router<FakeBackend>, String) {
    let mut r = router();
    r.seed_credentials([7; 32]);
    let resp = r.handle(&post(
        "/api/v1/auth/credentials",
        r#"{"role":"viewer","name":"dash"}"#,
    ));
    assert_eq!(resp.status, 201, "{}", String::from_utf8_lossy(&resp.body));
    let token = body_json(&resp)["token"].as_str().unwrap().to_string();
    (r, token)
}

fn post(path: &str, body: &str) -> Request {
    Request {
        method: "POST".into(),
        path: path.into(),
        headers: vec![("Authorization".into(), format!("Bearer {TOKEN}"))],
        body: body.as_bytes().to_vec(),
        peer: None,
    }
}

fn body_json(resp: &Response) -> Value {
    serde_json::from_slice(&resp.body).expect("JSON body")
}

fn error_code(resp: &Response) -> String {
    body_json(resp)["error"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn text(resp: &Response) -> String {
    String::from_utf8(resp.body.clone()).expect("UTF-8")
}

// ---------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------

#[test]
fn host_reports_the_contract_shape_with_owner_names_and_null_for_unowned_cpu() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/host"));

    assert_eq!(resp.status, 200);
    assert_eq!(resp.content_type, "application/json");
    assert_eq!(
        body_json(&resp),
        json!({"version":"0.1.0","abi_version":"3.3","gic_version":3,"cpu_count":4,
               "ram_bytes":2147483648u64,"uptime_ms":12345,"time":"2026-12-01T13:45:00Z",
               "cpus":[{"cpu":0,"partition":"mgmt"},{"cpu":1,"partition":"alpha"},
                       {"cpu":2,"partition":"beta"},{"cpu":3,"partition":null}],
               "gic":{"version":3,"revision":"v3","its_count":1,"lpis":true,
                      "direct_vlpi":false,"direct_vsgi":false,"probed":true,
                      "irs_count":null,"gcie_legacy":null}})
    );
}

/// A GICv5 host as GIC_INFO reports it: two IRSes, one ITS, LPIs,
/// GCIE_LEGACY; alpha asked for `gic = "v3"` (the GICv3-compatible
/// interface), mgmt and beta for `auto` (GICv5).
fn gicv5_host(r: &mut Router<FakeBackend>) {
    let b = r.backend_mut();
    let mut alpha = b.plan_of(ALPHA).expect("alpha's plan");
    alpha.gic = pinfold_config::GicSetting::V3;
    b.plans.insert(ALPHA, alpha);
    b.gic = Some(pinfold_abi::GicReport {
        host: pinfold_abi::GicHost {
            version: 5,
            its_count: 1,
            lpis: true,
            probed: true,
            irs_count: 2,
            gcie_legacy: true,
            ..Default::default()
        },
        partitions: [
            (MGMT, pinfold_abi::GicInterface::Gicv5),
            (ALPHA, pinfold_abi::GicInterface::Gicv3),
            (BETA, pinfold_abi::GicInterface::Gicv5),
        ]
        .map(|(index, interface)| pinfold_abi::PartitionGic { index, interface })
        .to_vec(),
    });
}

#[test]
fn a_gicv5_host_shows_its_irses_and_gcie_legacy_and_each_partition_its_interface() {
    let mut r = router();
    gicv5_host(&mut r);

    let host = body_json(&r.handle(&get("/api/v1/host")));
    let list = body_json(&r.handle(&get("/api/v1/partitions")));
    let beta = body_json(&r.handle(&get("/api/v1/partitions/beta")));

    assert_eq!(host["gic_version"], 5);
    assert_eq!(
        host["gic"],
        json!({"version":5,"revision":"v5","its_count":1,"lpis":true,
               "direct_vlpi":false,"direct_vsgi":false,"probed":true,
               "irs_count":2,"gcie_legacy":true})
    );
    let interfaces: Vec<(&str, &str, &str)> = list["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default(),
                p["gic_interface"].as_str().unwrap_or_default(),
                p["config"]["gic"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        interfaces,
        [
            ("mgmt", "gicv5", "auto"),
            ("alpha", "gicv3", "v3"),
            ("beta", "gicv5", "auto")
        ]
    );
    assert_eq!(beta["gic_interface"], "gicv5");
}

#[test]
fn host_time_is_null_when_the_hypervisor_has_no_clock() {
    let mut r = router();
    r.backend_mut().clock = Err(CallError::Refused(AbiError::NotSupported));

    let resp = r.handle(&get("/api/v1/host"));

    assert_eq!(resp.status, 200);
    assert_eq!(body_json(&resp)["time"], serde_json::Value::Null);
}

#[test]
fn date_header_is_imf_fixdate_from_the_wall_clock() {
    let mut r = router();

    assert_eq!(
        r.date_header().as_deref(),
        Some("Tue, 01 Dec 2026 13:45:00 GMT")
    );
    r.backend_mut().clock = Err(CallError::Refused(AbiError::NotFound));
    assert_eq!(r.date_header(), None, "no clock: no Date header");
}

#[test]
fn partitions_list_has_the_contract_fields() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/partitions"));

    assert_eq!(resp.status, 200);
    assert_eq!(
        body_json(&resp)["partitions"][1],
        json!({"name":"alpha","state":"running","cpus":[9],"ram_bytes":268435456,
               "uptime_ms":5000,"boot_count":1,"management":false,
               "state_since":null,"restarts":0,"last_crash":null,"gic_interface":"gicv3",
               "config":{"cpus":[9],"memory_mib":256,"kernel":"0","kernel_format":"linux",
                         "initrd":null,"bootargs":"","autostart":false,"restart":"never",
                         "restart_limit":0,"watchdog_s":0,"shutdown_timeout_s":30,"devices":[],
                         "pci":[],"gic":"auto"}})
    );
}

#[test]
fn a_crashed_partition_shows_when_it_changed_state_and_why_it_crashed() {
    let mut r = router();
    {
        let p = &mut r.backend_mut().partitions[1];
        p.state = PartitionState::Crashed;
        p.state_since_ms = Some(1_796_132_700_000);
        p.restarts = 2;
        p.last_crash = Some(pinfold_abi::CrashInfo {
            unix_ms: Some(1_796_132_699_000),
            reason: "watchdog".into(),
        });
    }

    let resp = r.handle(&get("/api/v1/partitions/alpha"));

    let body = body_json(&resp);
    assert_eq!(body["state"], "crashed");
    assert_eq!(body["state_since"], "2026-12-01T13:45:00Z");
    assert_eq!(body["restarts"], 2);
    assert_eq!(
        body["last_crash"],
        json!({"time": "2026-12-01T13:44:59Z", "reason": "watchdog"})
    );
}

#[test]
fn partition_detail_adds_faults_and_vcpus() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/partitions/alpha"));

    let body = body_json(&resp);
    assert_eq!(resp.status, 200);
    assert_eq!(body["name"], "alpha");
    assert_eq!(body["faults"], 0);
    assert_eq!(
        body["vcpus"][0],
        json!({"vcpu":0,"cpu":9,"state":"on_pending",
               "exits":{"mmio":10,"sysreg":3,"hvc":2,"irq":500,"abort":0,"other":0},
               "injected":480})
    );
}

#[test]
fn percent_encoded_partition_name_is_decoded() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/partitions/%61lpha"));

    assert_eq!(resp.status, 200);
}

#[test]
fn malformed_percent_escape_in_name_is_400() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/partitions/al%zzpha"));

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (400, "bad_request")
    );
}

#[test]
fn trailing_slash_routes_like_the_bare_path() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/partitions/"));

    assert_eq!(resp.status, 200);
}

#[test]
fn unknown_partition_is_404_not_found() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/partitions/gamma"));

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (404, "not_found")
    );
}

#[test]
fn unknown_api_route_is_404_not_found() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/partitions/alpha/reboot-now"));

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (404, "not_found")
    );
}

#[test]
fn api_path_is_never_served_from_static_files() {
    let mut r = router();

    let resp = r.handle(&get("/api/v2/index.html"));

    assert_eq!(resp.status, 404);
    assert_eq!(resp.content_type, "application/json");
}

#[test]
fn wrong_method_on_known_route_is_405() {
    let mut r = router();

    let cases = [
        Request {
            method: "PUT".into(),
            ..get("/api/v1/partitions/alpha")
        },
        post("/api/v1/host", ""),
        get("/api/v1/partitions/alpha/start"),
    ];

    for req in cases {
        let resp = r.handle(&req);
        assert_eq!(
            (resp.status, error_code(&resp).as_str()),
            (405, "method_not_allowed"),
            "{req:?}"
        );
    }
}

#[test]
fn error_body_has_exactly_error_and_detail() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/nope"));

    let body = body_json(&resp);
    let keys: Vec<&String> = body.as_object().expect("object").keys().collect();
    assert_eq!(keys, vec!["detail", "error"]);
    assert!(!body["detail"].as_str().unwrap_or_default().is_empty());
}

#[test]
fn hypervisor_call_failure_is_500_hypervisor_error() {
    let mut r = router();
    r.backend_mut().fail_list = Some(CallError::Refused(AbiError::BadAddress));

    let resp = r.handle(&get("/api/v1/partitions"));

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (500, "hypervisor_error")
    );
}

#[test]
fn hypervisor_without_the_call_is_503_hypervisor_error() {
    let mut r = router();
    r.backend_mut().fail_list = Some(CallError::Refused(AbiError::NotSupported));

    let resp = r.handle(&get("/api/v1/partitions"));

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (503, "hypervisor_error")
    );
}

// ---------------------------------------------------------------------------
// Static files and the OpenAPI document
// ---------------------------------------------------------------------------

#[test]
fn root_serves_index_html() {
    let mut r = router();

    let resp = r.handle(&get("/"));

    assert_eq!(resp.status, 200);
    assert_eq!(resp.content_type, "text/html; charset=utf-8");
    assert_eq!(resp.body, b"<html>pinfold</html>");
}

#[test]
fn static_file_is_served_with_its_content_type() {
    let mut r = router();

    let resp = r.handle(&get("/assets/app.js?v=3"));

    assert_eq!((resp.status, resp.content_type), (200, "text/javascript"));
}

#[test]
fn missing_static_file_is_404() {
    let mut r = router();

    let resp = r.handle(&get("/assets/missing.css"));

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (404, "not_found")
    );
}

#[test]
fn a_405_says_allow() {
    let mut r = router();

    let resp = r.handle(&Request {
        method: "PUT".into(),
        ..get("/api/v1/partitions/alpha")
    });
    assert_eq!(resp.status, 405);
    assert_eq!(resp.header("allow"), Some("GET, HEAD, PATCH, DELETE"));
    let resp = r.handle(&get("/api/v1/partitions/alpha/start"));
    assert_eq!(resp.header("allow"), Some("POST"));
    let resp = r.handle(&post("/index.html", ""));
    assert_eq!(resp.header("allow"), Some("GET, HEAD"));
}

#[test]
fn head_is_answered_wherever_get_is_without_a_token() {
    let mut r = router();

    for path in [
        "/api/v1/partitions",
        "/api/v1/host",
        "/metrics",
        "/index.html",
    ] {
        let want = r.handle(&get(path));
        let got = r.handle(&Request {
            method: "HEAD".into(),
            ..get(path)
        });
        assert_eq!(got.status, want.status, "{path}");
        assert_eq!(got.status, 200, "{path}");
        assert_eq!(got.content_type, want.content_type, "{path}");
    }
    let resp = r.handle(&Request {
        method: "HEAD".into(),
        ..get("/api/v1/partitions/alpha/start")
    });
    assert_eq!(resp.status, 405);
}

#[test]
fn state_changes_refuse_a_body_that_is_not_empty() {
    let mut r = router();

    for op in ["start", "stop", "restart", "shutdown"] {
        for body in ["garbage", "{\"force\":true}", "[]", "{", "\u{0}"] {
            let resp = r.handle(&post(&format!("/api/v1/partitions/beta/{op}"), body));
            assert_eq!(resp.status, 400, "{op} {body:?}");
            assert!(text(&resp).contains("takes no body"), "{}", text(&resp));
        }
    }
    assert_eq!(
        r.handle(&post("/api/v1/partitions/beta/start", " {} "))
            .status,
        202
    );
    let mut r = router();
    assert_eq!(
        r.handle(&post("/api/v1/partitions/beta/start", "\n"))
            .status,
        202
    );
}

#[test]
fn post_to_a_static_path_is_405() {
    let mut r = router();

    let resp = r.handle(&post("/index.html", ""));

    assert_eq!(resp.status, 405);
}

#[test]
fn openapi_document_is_served_and_is_openapi_3() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/openapi.json"));

    assert_eq!(resp.status, 200);
    assert!(body_json(&resp)["openapi"]
        .as_str()
        .unwrap_or_default()
        .starts_with("3.0"));
}

fn openapi() -> Value {
    serde_json::from_str(OPENAPI_JSON).expect("openapi.json parses")
}

#[test]
fn every_route_is_in_the_openapi_document() {
    let doc = openapi();

    for route in ROUTES {
        let op = &doc["paths"][route.pattern][route.method.to_ascii_lowercase()];
        assert!(
            op.is_object(),
            "{} {} missing from openapi.json",
            route.method,
            route.pattern
        );
    }
}

/// Operations of the contract the router does not serve yet carry
/// `"x-pinfold-pending": true`; the integrator removes the mark as each
/// route lands.
fn pending(op: &Value) -> bool {
    op["x-pinfold-pending"].as_bool() == Some(true)
}

#[test]
fn every_openapi_operation_is_a_route() {
    let doc = openapi();
    let paths = doc["paths"].as_object().expect("paths");

    for (path, item) in paths {
        for (method, op) in item.as_object().expect("path item") {
            if method == "parameters" || method.starts_with("x-") || pending(op) {
                continue;
            }
            let upper = method.to_ascii_uppercase();
            assert!(
                ROUTES
                    .iter()
                    .any(|r| r.pattern == path && r.method == upper),
                "openapi.json documents {upper} {path}, which the router lacks"
            );
        }
    }
}

#[test]
fn no_served_route_is_marked_pending() {
    let doc = openapi();

    for route in ROUTES {
        let op = &doc["paths"][route.pattern][route.method.to_ascii_lowercase()];
        assert!(
            !pending(op),
            "{} {} is served: remove its \"x-pinfold-pending\" mark from openapi.json",
            route.method,
            route.pattern
        );
    }
}

#[test]
fn every_route_in_the_table_reaches_its_endpoint() {
    // The router must route by ROUTES alone: each pattern, with a name
    // filled in, parses to an action (not 404/405).
    for route in ROUTES {
        let path = route
            .pattern
            .replace("{name}", "alpha")
            .replace("{id}", "1");
        let body = match (route.endpoint, route.method) {
            (Endpoint::Console, _) => r#"{"data":"x"}"#,
            (Endpoint::Partitions | Endpoint::Partition, "POST" | "PATCH") => "{}",
            (Endpoint::ImageFetch, _) => r#"{"url":"http://h/x","kind":"kernel"}"#,
            (Endpoint::Credentials, "POST") => r#"{"role":"viewer"}"#,
            _ => "",
        };
        let req = Request {
            method: route.method.into(),
            path,
            headers: vec![],
            body: body.as_bytes().to_vec(),
            peer: None,
        };

        assert!(parse(&req).is_ok(), "{} {}", route.method, route.pattern);
    }
}

#[test]
fn every_openapi_schema_reference_resolves() {
    let doc = openapi();
    let text = OPENAPI_JSON;
    let mut rest = text;
    while let Some(at) = rest.find("\"$ref\": \"#/components/") {
        let tail = &rest[at + "\"$ref\": \"#/components/".len()..];
        let end = tail.find('"').expect("closing quote");
        let mut node = &doc["components"];
        for part in tail[..end].split('/') {
            node = &node[part];
        }
        assert!(node.is_object(), "dangling $ref {}", &tail[..end]);
        rest = &tail[end..];
    }
}

#[test]
fn every_get_that_refuses_an_anonymous_caller_documents_401_and_its_security() {
    let doc = openapi();
    let mut r = router();
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        let Some(op) = ops.get("get") else { continue };
        let concrete = path.replace("{name}", "beta").replace("{id}", "0");
        let resp = r.handle(&anon_get(&concrete));
        if resp.status != 401 {
            continue;
        }
        assert!(
            op["responses"].get("401").is_some(),
            "GET {path} answers an anonymous caller 401 but openapi.json does not document it"
        );
        assert!(
            op.get("security").is_some(),
            "GET {path} needs a credential but openapi.json names no security for it"
        );
    }
}

#[test]
fn openapi_documents_every_error_code_the_router_emits() {
    let doc = openapi();
    let codes: Vec<&str> = doc["components"]["schemas"]["Error"]["properties"]["error"]["enum"]
        .as_array()
        .expect("enum")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();

    for code in [
        "bad_request",
        "unauthorized",
        "not_found",
        "method_not_allowed",
        "conflict",
        "too_large",
        "hypervisor_error",
    ] {
        assert!(codes.contains(&code), "{code}");
    }
    // And those of the HTTP server's own refusals (manager/http).
    for status in [400, 408, 411, 413, 417, 431, 503, 505] {
        let code = pinfold_manager_http::error_code(status);
        assert!(codes.contains(&code), "{status} {code}");
    }
}

// ---------------------------------------------------------------------------
// Authentication
// ---------------------------------------------------------------------------

#[test]
fn post_without_token_is_401_and_reaches_no_backend() {
    let mut r = router();
    let req = Request {
        headers: vec![],
        ..post("/api/v1/partitions/beta/start", "")
    };

    let resp = r.handle(&req);

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (401, "unauthorized")
    );
    assert!(r.backend().calls.is_empty());
}

#[test]
fn post_with_wrong_token_is_401() {
    let mut r = router();
    let req = Request {
        headers: vec![("Authorization".into(), "Bearer s3cret-tokeN".into())],
        ..post("/api/v1/partitions/beta/start", "")
    };

    assert_eq!(r.handle(&req).status, 401);
}

#[test]
fn post_with_basic_auth_scheme_is_401() {
    let mut r = router();
    let req = Request {
        headers: vec![("Authorization".into(), format!("Basic {TOKEN}"))],
        ..post("/api/v1/partitions/beta/start", "")
    };

    assert_eq!(r.handle(&req).status, 401);
}

#[test]
fn header_name_and_bearer_scheme_are_case_insensitive() {
    let mut r = router();
    let req = Request {
        headers: vec![("authorization".into(), format!("bearer {TOKEN}"))],
        ..post("/api/v1/partitions/beta/start", "")
    };

    assert_eq!(r.handle(&req).status, 202);
}

#[test]
fn empty_configured_token_refuses_every_post() {
    let mut r = Router::new(FakeBackend::new(), None, FILES);
    let req = Request {
        headers: vec![("Authorization".into(), "Bearer ".into())],
        ..post("/api/v1/partitions/beta/start", "")
    };

    assert_eq!(r.handle(&req).status, 401);
}

#[test]
fn unauthenticated_post_to_unknown_partition_is_401_not_404() {
    let mut r = router();
    let req = Request {
        headers: vec![],
        ..post("/api/v1/partitions/gamma/stop", "")
    };

    assert_eq!(r.handle(&req).status, 401);
}

#[test]
fn unauthenticated_oversized_body_is_401_before_413() {
    let mut r = router();
    let big = "x".repeat(MAX_BODY_BYTES + 1);
    let req = Request {
        headers: vec![],
        ..post("/api/v1/partitions/alpha/console", &big)
    };

    assert_eq!(r.handle(&req).status, 401);
}

#[test]
fn reads_need_a_credential_but_static_files_host_and_openapi_do_not() {
    let mut r = router();

    for path in [
        "/api/v1/partitions",
        "/api/v1/partitions/alpha/console",
        "/api/v1/partitions/alpha/console/history",
        "/api/v1/events",
        "/api/v1/events/stream",
        "/metrics",
        "/api/v1/images",
        "/api/v1/auth/whoami",
    ] {
        assert_eq!(r.handle(&anon_get(path)).status, 401, "{path}");
        assert_eq!(r.handle(&get(path)).status, 200, "{path}");
    }
    for path in ["/", "/api/v1/host", "/api/v1/openapi.json"] {
        assert_eq!(r.handle(&anon_get(path)).status, 200, "{path}");
    }
}

#[test]
fn a_viewer_reads_everything_but_changes_nothing_and_is_logged() {
    let (mut r, viewer) = router_with_viewer();

    for path in [
        "/api/v1/partitions",
        "/api/v1/partitions/alpha/console",
        "/api/v1/events",
        "/metrics",
    ] {
        assert_eq!(
            r.handle(&with_token(get(path), &viewer)).status,
            200,
            "{path}"
        );
    }
    let resp = r.handle(&with_token(
        post("/api/v1/partitions/beta/start", ""),
        &viewer,
    ));
    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (403, "forbidden")
    );
    assert!(body_json(&resp)["detail"]
        .as_str()
        .unwrap()
        .contains("needs the operator role; credential c1 is a viewer"));
    assert!(!r.backend().calls.iter().any(|c| c.starts_with("start")));
    let listed = r.handle(&with_token(get("/api/v1/auth/credentials"), &viewer));
    assert_eq!(listed.status, 403);
    let whoami = body_json(&r.handle(&with_token(get("/api/v1/auth/whoami"), &viewer)));
    assert_eq!(whoami, json!({"id": "c1", "role": "viewer"}));
    let events = body_json(&r.handle(&get("/api/v1/events")));
    let refused: Vec<&Value> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "login_refused")
        .collect();
    assert!(
        refused
            .iter()
            .any(|e| e["message"].as_str().unwrap().contains("viewer c1")),
        "{refused:?}"
    );
    let made: Vec<&Value> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "config")
        .collect();
    assert!(made.iter().any(|e| e["message"]
        .as_str()
        .unwrap()
        .contains("operator boot made viewer credential c1 (dash)")));
}

#[test]
fn credentials_are_listed_without_secrets_rotated_and_revoked() {
    let (mut r, viewer) = router_with_viewer();

    let list = body_json(&r.handle(&get("/api/v1/auth/credentials")));
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert!(!list.to_string().contains(&viewer));
    assert_eq!(list[0]["id"], "boot");
    assert_eq!(
        list[1],
        json!({"id": "c1", "name": "dash", "role": "viewer", "since": "2026-12-01T13:45:00Z"})
    );

    let rotated = r.handle(&post("/api/v1/auth/credentials/c1/rotate", ""));
    assert_eq!(rotated.status, 200);
    let new_token = body_json(&rotated)["token"].as_str().unwrap().to_string();
    assert_ne!(new_token, viewer);
    assert_eq!(
        r.handle(&with_token(get("/api/v1/partitions"), &viewer))
            .status,
        401
    );
    assert_eq!(
        r.handle(&with_token(get("/api/v1/partitions"), &new_token))
            .status,
        200
    );

    let mut del = post("/api/v1/auth/credentials/c1", "");
    del.method = "DELETE".into();
    assert_eq!(r.handle(&del).status, 200);
    assert_eq!(
        r.handle(&with_token(get("/api/v1/partitions"), &new_token))
            .status,
        401
    );
    assert_eq!(r.handle(&del).status, 404);

    let mut boot = post("/api/v1/auth/credentials/boot", "");
    boot.method = "DELETE".into();
    let last = r.handle(&boot);
    assert_eq!((last.status, error_code(&last).as_str()), (409, "conflict"));
}

#[test]
fn the_boot_token_can_be_rotated_and_the_old_one_stops_working() {
    let mut r = router();
    r.seed_credentials([9; 32]);

    let rotated = r.handle(&post("/api/v1/auth/credentials/boot/rotate", ""));
    assert_eq!(rotated.status, 200);
    let token = body_json(&rotated)["token"].as_str().unwrap().to_string();
    assert_eq!(token.len(), 64);
    assert_eq!(r.handle(&get("/api/v1/partitions")).status, 401);
    assert_eq!(
        r.handle(&with_token(get("/api/v1/partitions"), &token))
            .status,
        200
    );
}

#[test]
fn without_entropy_no_credential_is_made_and_the_reason_is_given() {
    let mut r = router();

    let resp = r.handle(&post("/api/v1/auth/credentials", r#"{"role":"viewer"}"#));

    assert_eq!(resp.status, 503);
    assert!(body_json(&resp)["detail"]
        .as_str()
        .unwrap()
        .contains("no entropy source"));
    let resp = r.handle(&post("/api/v1/auth/credentials/boot/rotate", ""));
    assert_eq!(resp.status, 503);
    assert_eq!(r.handle(&get("/api/v1/partitions")).status, 200);
}

#[test]
fn a_credential_request_names_the_bad_field() {
    let mut r = router();
    r.seed_credentials([1; 32]);
    for (body, field) in [
        (r#"{"role":"admin"}"#, "role"),
        (r#"{"role":"viewer","name":"a\nb"}"#, "name"),
        (r#"{"role":"viewer","extra":1}"#, "body"),
        ("", "body"),
    ] {
        let resp = r.handle(&post("/api/v1/auth/credentials", body));
        assert_eq!(resp.status, 400, "{body}");
        assert_eq!(body_json(&resp)["field"], field, "{body}");
    }
}

fn from(mut req: Request, peer: &str) -> Request {
    req.peer = Some(peer.parse().expect("an address"));
    req
}

#[test]
fn a_guesser_is_throttled_by_its_address_and_the_right_token_elsewhere_works() {
    let mut r = router();
    for _ in 0..crate::auth::FAIL_LIMIT + 5 {
        let resp = r.handle(&from(
            with_token(get("/api/v1/partitions"), "guess"),
            "10.0.2.2",
        ));
        assert!(matches!(resp.status, 401 | 429), "{}", resp.status);
    }
    // The guesser, even with the right token, waits out its window.
    let resp = r.handle(&from(get("/api/v1/partitions"), "10.0.2.2"));
    assert_eq!(resp.status, 429);
    assert!(body_json(&resp)["detail"]
        .as_str()
        .unwrap()
        .contains("from 10.0.2.2"));
    // Another address is not held back.
    assert_eq!(
        r.handle(&from(get("/api/v1/partitions"), "192.168.1.7"))
            .status,
        200
    );
    assert_eq!(
        r.handle(&from(get("/api/v1/partitions"), "::1")).status,
        200
    );
    // The refusals name the address in their events.
    let events = body_json(&r.handle(&get("/api/v1/events")));
    assert!(events.to_string().contains("from 10.0.2.2"), "{events}");
}

#[test]
fn guessers_from_many_addresses_meet_the_global_ceiling() {
    let mut r = router();
    for n in 0..crate::auth::FAIL_GLOBAL_LIMIT {
        let peer = format!("10.1.0.{}", n % 50);
        r.handle(&from(with_token(get("/api/v1/partitions"), "guess"), &peer));
    }
    let resp = r.handle(&from(get("/api/v1/partitions"), "192.168.1.7"));
    assert_eq!(resp.status, 429);
    assert!(body_json(&resp)["detail"]
        .as_str()
        .unwrap()
        .contains("from all clients"));
}

#[test]
fn failed_tokens_past_the_limit_are_throttled_even_the_right_one() {
    let mut r = router();
    for _ in 0..crate::auth::FAIL_LIMIT {
        assert_eq!(
            r.handle(&with_token(get("/api/v1/partitions"), "guess"))
                .status,
            401
        );
    }
    let resp = r.handle(&get("/api/v1/partitions"));
    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (429, "too_many_requests")
    );
    assert!(resp.header("Retry-After").is_some());
    // What is open stays open.
    assert_eq!(r.handle(&anon_get("/api/v1/host")).status, 200);
}

#[test]
fn a_foreign_host_is_refused_and_ours_are_answered() {
    let mut r = router();
    r.hosts.names.push("pinfold.example".into());
    for host in [
        "127.0.0.1:18460",
        "localhost:8080",
        "10.0.2.15",
        "[::1]:80",
        "pinfold.example",
    ] {
        assert_eq!(
            r.handle(&with_header(get("/api/v1/partitions"), "Host", host))
                .status,
            200,
            "{host}"
        );
    }
    for host in ["evil.example", "evil.example:18460"] {
        let resp = r.handle(&with_header(anon_get("/"), "Host", host));
        assert_eq!(
            (resp.status, error_code(&resp).as_str()),
            (421, "misdirected"),
            "{host}"
        );
        let resp = r.handle(&with_header(
            get("/api/v1/partitions/alpha/console"),
            "Host",
            host,
        ));
        assert_eq!(resp.status, 421);
    }
}

#[test]
fn a_mutation_from_another_origin_is_refused() {
    let mut r = router();
    let cross = with_header(
        with_header(
            post("/api/v1/partitions/beta/start", ""),
            "Host",
            "127.0.0.1:18460",
        ),
        "Origin",
        "http://evil.example",
    );
    let resp = r.handle(&cross);
    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (403, "forbidden")
    );
    assert!(r.backend().calls.is_empty());
    let same = with_header(
        with_header(
            post("/api/v1/partitions/beta/start", ""),
            "Host",
            "127.0.0.1:18460",
        ),
        "Origin",
        "http://127.0.0.1:18460",
    );
    assert_eq!(r.handle(&same).status, 202);
}

#[test]
fn the_management_partitions_console_input_is_refused() {
    let mut r = router();

    let resp = r.handle(&post(
        "/api/v1/partitions/mgmt/console",
        r#"{"data":"poweroff\n"}"#,
    ));

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (403, "forbidden")
    );
    assert!(!r
        .backend()
        .calls
        .iter()
        .any(|c| c.starts_with("console_write")));
}

// ---------------------------------------------------------------------------
// State transitions
// ---------------------------------------------------------------------------

#[test]
fn start_of_stopped_partition_is_202_with_its_new_state() {
    let mut r = router();

    let resp = r.handle(&post("/api/v1/partitions/beta/start", ""));

    assert_eq!(resp.status, 202);
    assert_eq!(body_json(&resp), json!({"name":"beta","state":"running"}));
    assert_eq!(r.backend().calls, vec![format!("start {BETA}")]);
}

#[test]
fn stop_reports_stopping_while_the_hypervisor_is_still_stopping() {
    let mut r = router();

    let resp = r.handle(&post("/api/v1/partitions/alpha/stop", "{}"));

    assert_eq!(body_json(&resp), json!({"name":"alpha","state":"stopping"}));
}

#[test]
fn start_of_running_partition_is_409_without_asking_the_hypervisor() {
    let mut r = router();

    let resp = r.handle(&post("/api/v1/partitions/alpha/start", ""));

    assert_eq!((resp.status, error_code(&resp).as_str()), (409, "conflict"));
    assert!(r.backend().calls.is_empty());
}

#[test]
fn stop_of_stopped_or_stopping_partition_is_409() {
    for state in [PartitionState::Stopped, PartitionState::Stopping] {
        let mut r = router();
        let _ = r.backend_mut().set_state(ALPHA, state);

        let resp = r.handle(&post("/api/v1/partitions/alpha/stop", ""));

        assert_eq!(resp.status, 409, "{state:?}");
    }
}

#[test]
fn any_transition_of_the_management_partition_is_409() {
    for op in ["start", "stop", "restart"] {
        let mut r = router();

        let resp = r.handle(&post(&format!("/api/v1/partitions/mgmt/{op}"), ""));

        assert_eq!(resp.status, 409, "{op}");
        assert!(r.backend().calls.is_empty());
    }
}

#[test]
fn hypervisor_conflict_after_a_race_is_409() {
    let mut r = router();
    r.backend_mut().fail_transitions = Some(CallError::Refused(AbiError::Conflict));

    let resp = r.handle(&post("/api/v1/partitions/alpha/restart", ""));

    assert_eq!((resp.status, error_code(&resp).as_str()), (409, "conflict"));
}

#[test]
fn transition_of_unknown_partition_is_404() {
    let mut r = router();

    let resp = r.handle(&post("/api/v1/partitions/gamma/restart", ""));

    assert_eq!(resp.status, 404);
}

#[test]
fn transition_body_that_is_not_json_is_refused_and_nothing_happens() {
    let mut r = router();

    let resp = r.handle(&post("/api/v1/partitions/beta/start", "not json at all"));

    assert_eq!(resp.status, 400);
    // The partition was not started: a start now is accepted.
    let resp = r.handle(&post("/api/v1/partitions/beta/start", ""));
    assert_eq!(resp.status, 202);
}

// ---------------------------------------------------------------------------
// Console
// ---------------------------------------------------------------------------

#[test]
fn console_read_without_offset_starts_at_zero() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/partitions/alpha/console"));

    // The fake's ring starts at position 100: 100 bytes were dropped.
    assert_eq!(
        body_json(&resp),
        json!({"offset":0,"next":107,"dropped":100,"data":"login: "})
    );
    assert_eq!(r.backend().last_read.map(|(o, _)| o), Some(0));
}

#[test]
fn console_read_passes_offset_and_returns_next() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/partitions/alpha/console?offset=103"));

    assert_eq!(
        body_json(&resp),
        json!({"offset":103,"next":107,"dropped":0,"data":"in: "})
    );
}

#[test]
fn console_read_at_the_end_returns_no_data_and_same_next() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/partitions/alpha/console?offset=107"));

    assert_eq!(
        body_json(&resp),
        json!({"offset":107,"next":107,"dropped":0,"data":""})
    );
}

#[test]
fn console_read_asks_for_at_most_16_kib() {
    let mut r = router();

    r.handle(&get("/api/v1/partitions/alpha/console"));

    assert_eq!(
        r.backend().last_read.map(|(_, len)| len),
        Some(CONSOLE_READ_MAX)
    );
}

#[test]
fn console_read_ignores_other_query_parameters() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/partitions/alpha/console?follow=1&offset=104"));

    assert_eq!(body_json(&resp)["offset"], 104);
}

#[test]
fn the_largest_console_offset_is_i64_max() {
    let mut r = router();

    let resp = r.handle(&get(&format!(
        "/api/v1/partitions/alpha/console?offset={}",
        i64::MAX
    )));

    assert_eq!(resp.status, 200);
    let resp = r.handle(&get("/api/v1/events?since=9223372036854775808"));
    assert_eq!(resp.status, 400);
}

#[test]
fn bad_console_offsets_are_400() {
    for query in [
        "offset=abc",
        "offset=-1",
        "offset=",
        "offset=18446744073709551616",
        "offset=9223372036854775808",
        "offset=1.5",
    ] {
        let mut r = router();

        let resp = r.handle(&get(&format!("/api/v1/partitions/alpha/console?{query}")));

        assert_eq!(
            (resp.status, error_code(&resp).as_str()),
            (400, "bad_request"),
            "{query}"
        );
    }
}

#[test]
fn console_bytes_that_are_not_utf8_are_replaced() {
    let mut r = router();
    r.backend_mut().console = vec![b'a', 0xFF, b'b'];

    let resp = r.handle(&get("/api/v1/partitions/alpha/console?offset=100"));

    assert_eq!(body_json(&resp)["data"], "a\u{FFFD}b");
}

#[test]
fn utf8_character_cut_at_chunk_end_is_held_back_for_the_next_read() {
    let mut r = router();
    // "é" is C3 A9; the ring currently ends after C3.
    r.backend_mut().console = vec![b'o', b'k', 0xC3];

    let resp = r.handle(&get("/api/v1/partitions/alpha/console?offset=100"));

    assert_eq!(
        body_json(&resp),
        json!({"offset":100,"next":102,"dropped":0,"data":"ok"})
    );
}

#[test]
fn utf8_prefix_keeps_complete_multibyte_characters() {
    assert_eq!(utf8_complete_prefix("aé".as_bytes()), 3);
    assert_eq!(utf8_complete_prefix(&[b'a', 0xE2, 0x82]), 1);
    assert_eq!(utf8_complete_prefix(&[0xF0, 0x9F, 0x98, 0x80]), 4);
    assert_eq!(utf8_complete_prefix(&[b'a', 0x80]), 2);
}

#[test]
fn console_read_of_unknown_partition_is_404() {
    let mut r = router();

    assert_eq!(
        r.handle(&get("/api/v1/partitions/gamma/console")).status,
        404
    );
}

#[test]
fn console_write_sends_the_data_bytes_and_returns_accepted() {
    let mut r = router();

    let resp = r.handle(&post(
        "/api/v1/partitions/alpha/console",
        r#"{"data":"ls\n"}"#,
    ));

    assert_eq!(resp.status, 202);
    assert_eq!(body_json(&resp), json!({"accepted":3,"remaining":0}));
    assert_eq!(r.backend().written, b"ls\n");
}

/// 4 KiB of distinct lines, so reordering or loss shows.
fn paste() -> String {
    (0..64)
        .map(|i| format!("{i:02}{}\n", "x".repeat(61)))
        .collect()
}

fn post_console(r: &mut Router<FakeBackend>, data: &str) -> Response {
    let body = json!({ "data": data }).to_string();
    r.handle(&post("/api/v1/partitions/alpha/console", &body))
}

#[test]
fn console_write_of_4_kib_through_a_32_byte_queue_arrives_whole_and_in_order() {
    let mut r = router();
    // An emulated PL011: 32 bytes of room, which the guest drains between tries.
    r.backend_mut().input_room = Some(32);
    r.backend_mut().input_drain = 32;
    let data = paste();
    assert_eq!(data.len(), CONSOLE_WRITE_MAX);

    let resp = post_console(&mut r, &data);

    assert_eq!(resp.status, 202);
    assert_eq!(body_json(&resp), json!({"accepted":4096,"remaining":0}));
    assert_eq!(r.backend().written, data.as_bytes());
}

#[test]
fn console_write_offers_at_most_a_chunk_per_call_and_continues_where_the_last_stopped() {
    let mut r = router();
    r.backend_mut().input_per_call = Some(100);
    let data = paste();

    let resp = post_console(&mut r, &data);

    assert_eq!(body_json(&resp)["accepted"], 4096);
    assert_eq!(r.backend().written, data.as_bytes());
    // 100 bytes per call: 41 calls, and a pause after each short one.
    assert_eq!(r.backend().writes, 41);
    assert_eq!(r.backend().pauses, 40);
}

#[test]
fn console_write_to_a_full_queue_waits_a_bounded_time_and_says_nothing_was_taken() {
    let mut r = router();
    r.backend_mut().input_room = Some(0);

    let resp = post_console(&mut r, "ls\n");

    assert_eq!(resp.status, 202);
    assert_eq!(body_json(&resp), json!({"accepted":0,"remaining":3}));
    assert!(r.backend().written.is_empty());
    let pauses = r.backend().pauses as u32;
    assert_eq!(CONSOLE_WRITE_RETRY * pauses, CONSOLE_WRITE_WAIT);
}

#[test]
fn console_write_that_stalls_midway_reports_the_prefix_taken() {
    let mut r = router();
    // Room for 40 bytes, and the guest never reads again.
    r.backend_mut().input_room = Some(40);
    let data = paste();

    let resp = post_console(&mut r, &data);

    assert_eq!(resp.status, 202);
    assert_eq!(body_json(&resp), json!({"accepted":40,"remaining":4056}));
    assert_eq!(r.backend().written, &data.as_bytes()[..40]);
}

#[test]
fn console_write_failing_after_some_bytes_went_in_reports_them() {
    let mut r = router();
    r.backend_mut().input_per_call = Some(32);
    r.backend_mut().fail_write = Some(3);

    let resp = post_console(&mut r, &paste());

    assert_eq!(body_json(&resp), json!({"accepted":64,"remaining":4032}));
}

#[test]
fn console_write_failing_at_once_is_an_error() {
    let mut r = router();
    r.backend_mut().fail_write = Some(1);

    let resp = post_console(&mut r, "ls\n");

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (500, "hypervisor_error")
    );
}

#[test]
fn console_write_with_malformed_json_is_400() {
    let mut r = router();

    let resp = r.handle(&post("/api/v1/partitions/alpha/console", r#"{"data": "ls"#));

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (400, "bad_request")
    );
    assert!(r.backend().written.is_empty());
}

#[test]
fn console_write_without_data_field_is_400() {
    let mut r = router();

    let resp = r.handle(&post(
        "/api/v1/partitions/alpha/console",
        r#"{"text":"ls"}"#,
    ));

    assert_eq!(resp.status, 400);
}

#[test]
fn console_write_of_exactly_4_kib_is_accepted() {
    let mut r = router();
    let body = json!({"data": "a".repeat(CONSOLE_WRITE_MAX)}).to_string();

    assert_eq!(
        r.handle(&post("/api/v1/partitions/alpha/console", &body))
            .status,
        202
    );
}

#[test]
fn console_write_over_4_kib_is_413() {
    let mut r = router();
    let body = json!({"data": "a".repeat(CONSOLE_WRITE_MAX + 1)}).to_string();

    let resp = r.handle(&post("/api/v1/partitions/alpha/console", &body));

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (413, "too_large")
    );
    assert!(r.backend().written.is_empty());
}

#[test]
fn body_over_the_request_limit_is_413_before_parsing() {
    let mut r = router();
    let body = "{".repeat(MAX_BODY_BYTES + 1);

    let resp = r.handle(&post("/api/v1/partitions/alpha/console", &body));

    assert_eq!(resp.status, 413);
}

#[test]
fn console_write_to_unknown_partition_is_404() {
    let mut r = router();

    assert_eq!(
        r.handle(&post("/api/v1/partitions/gamma/console", r#"{"data":"x"}"#))
            .status,
        404
    );
}

// ---------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------

#[test]
fn metrics_use_the_prometheus_text_content_type() {
    let mut r = router();

    let resp = r.handle(&get("/metrics"));

    assert_eq!(
        (resp.status, resp.content_type),
        (200, "text/plain; version=0.0.4; charset=utf-8")
    );
}

#[test]
fn metrics_contain_the_contract_samples() {
    let mut r = router();

    let body = text(&r.handle(&get("/metrics")));

    for line in [
        "pinfold_partition_state{partition=\"alpha\"} 1",
        "pinfold_partition_state{partition=\"beta\"} 0",
        "pinfold_partition_uptime_seconds{partition=\"alpha\"} 5.0",
        "pinfold_vcpu_exits_total{partition=\"alpha\",vcpu=\"0\",class=\"mmio\"} 10",
        "pinfold_vcpu_exits_total{partition=\"alpha\",vcpu=\"0\",class=\"irq\"} 500",
        "pinfold_vcpu_injected_total{partition=\"alpha\",vcpu=\"0\"} 480",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing {line:?} in\n{body}"
        );
    }
}

#[test]
fn metrics_show_the_managers_heap_and_console_histories() {
    static HEAP: crate::memory::HeapCounters = crate::memory::HeapCounters::new();
    HEAP.allocated(4096);
    HEAP.allocated(1000);
    HEAP.freed(1000);
    let mut r = router();
    r.heap = Some(&HEAP);
    r.histories.get("alpha").append(&[b'x'; 300], 300, 0);

    let body = text(&r.handle(&get("/metrics")));

    for line in [
        "pinfold_manager_heap_bytes 4096",
        "pinfold_manager_heap_peak_bytes 5096",
        "pinfold_manager_heap_allocations 1",
        "pinfold_manager_console_histories 1",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing {line:?} in\n{body}"
        );
    }
    let history: usize = body
        .lines()
        .find_map(|l| l.strip_prefix("pinfold_manager_console_history_bytes "))
        .and_then(|v| v.parse().ok())
        .expect("history bytes");
    assert!(
        (300..=crate::events::HISTORY_BYTES).contains(&history),
        "{history}"
    );
}

#[test]
fn metrics_without_counting_allocator_leave_the_heap_out() {
    let mut r = router();

    let body = text(&r.handle(&get("/metrics")));

    assert!(!body.contains("pinfold_manager_heap_bytes"));
    assert!(body
        .lines()
        .any(|l| l == "pinfold_manager_console_histories 0"));
}

#[test]
fn stopping_partition_metric_is_2() {
    let mut r = router();
    let _ = r.backend_mut().set_state(ALPHA, PartitionState::Stopping);

    let body = text(&r.handle(&get("/metrics")));

    assert!(body.contains("pinfold_partition_state{partition=\"alpha\"} 2\n"));
}

#[test]
fn every_metric_sample_follows_its_type_line_and_is_well_formed() {
    let mut r = router();

    let body = text(&r.handle(&get("/metrics")));

    let mut typed: Vec<String> = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(kind == "gauge" || kind == "counter", "{line}");
            typed.push(name.to_string());
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        // `name{labels} value`, or `name value` for a sample without labels.
        let (name, value) = match line.split_once('{') {
            Some((name, rest)) => (name, rest.rsplit_once("} ").expect("labels then value").1),
            None => line.split_once(' ').expect("name then value"),
        };
        assert_eq!(typed.last().map(String::as_str), Some(name), "{line}");
        assert!(value.parse::<f64>().is_ok(), "{line}");
        if name.ends_with("_total") {
            assert!(value.parse::<u64>().is_ok(), "counter {line}");
        }
    }
    assert!(body.ends_with('\n'));
}

// ---------------------------------------------------------------------------
// HvcBackend over the real dispatcher
// ---------------------------------------------------------------------------

mod hvc {
    use super::*;
    use pinfold_hv::addr::{Ipa, IpaRange};
    use pinfold_hv::console::RingRead;
    use pinfold_hv::hypercall::{dispatch, GuestMemory, GuestMemoryFault, Manage};

    const RAM_BASE: u64 = 0x4000_0000;
    /// The shared buffer sits 0x3000 into RAM, so IPA and offset differ.
    const BUF_OFFSET: usize = 0x3000;

    /// The management partition's RAM and the hypervisor behind it.
    struct Machine {
        ram: Vec<u8>,
        buf_len: usize,
        hv: FakeHv,
        is_management: bool,
    }

    struct Ram<'a>(&'a mut Vec<u8>);

    impl GuestMemory for Ram<'_> {
        fn ram_range(&self) -> IpaRange {
            IpaRange::new(RAM_BASE, self.0.len() as u64)
        }
        fn write(&mut self, ipa: Ipa, bytes: &[u8]) -> Result<(), GuestMemoryFault> {
            let at = (ipa.0 - RAM_BASE) as usize;
            self.0
                .get_mut(at..at + bytes.len())
                .ok_or(GuestMemoryFault)?
                .copy_from_slice(bytes);
            Ok(())
        }
        fn read(&self, ipa: Ipa, out: &mut [u8]) -> Result<(), GuestMemoryFault> {
            let at = (ipa.0 - RAM_BASE) as usize;
            out.copy_from_slice(self.0.get(at..at + out.len()).ok_or(GuestMemoryFault)?);
            Ok(())
        }
    }

    /// Manage over the REST tests' FakeBackend, so both layers share data.
    struct FakeHv(FakeBackend);

    impl FakeHv {
        /// A copy for the `&self` calls (the fake's Backend takes `&mut`).
        fn snapshot(&self) -> FakeBackend {
            FakeBackend {
                partitions: self.0.partitions.clone(),
                plans: self.0.plans.clone(),
                images: self.0.images.clone(),
                free_ram: self.0.free_ram,
                ..FakeBackend::new()
            }
        }
    }

    fn status(err: CallError) -> AbiError {
        match err {
            CallError::Refused(e) => e,
            _ => AbiError::InvalidParameters,
        }
    }

    fn refusal(err: crate::HvError) -> pinfold_hv::hypercall::Refusal {
        use pinfold_hv::hypercall::Refusal;
        match err {
            crate::HvError::Rejected(r) => Refusal::Rejected(r),
            crate::HvError::Call(e) => Refusal::Status(status(e)),
        }
    }

    impl Manage for FakeHv {
        fn image_create(
            &mut self,
            kind: pinfold_abi::ImageKind,
            size: u64,
        ) -> Result<u32, AbiError> {
            self.0.image_create(kind, size).map_err(status)
        }
        fn image_read(&mut self, id: u32, offset: u64, out: &mut [u8]) -> Result<usize, AbiError> {
            self.0.image_read(id, offset, out).map_err(|e| match e {
                CallError::Refused(err) => err,
                _ => AbiError::NotFound,
            })
        }
        fn image_write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<usize, AbiError> {
            self.0.image_write(id, offset, bytes).map_err(status)
        }
        fn image_seal(
            &mut self,
            id: u32,
            digest: Option<[u8; 32]>,
        ) -> Result<(), pinfold_hv::hypercall::Refusal> {
            self.0.image_seal(id, digest).map_err(refusal)
        }
        fn image_delete(&mut self, id: u32) -> Result<(), AbiError> {
            self.0.image_delete(id).map_err(status)
        }
        fn images(&self) -> Vec<pinfold_abi::ImageInfo> {
            self.snapshot().images().unwrap_or_default()
        }
        fn create(
            &mut self,
            plan: pinfold_abi::PartitionPlan,
        ) -> Result<u32, pinfold_hv::hypercall::Refusal> {
            self.0.create(&plan).map_err(refusal)
        }
        fn configure(
            &mut self,
            index: u32,
            plan: pinfold_abi::PartitionPlan,
        ) -> Result<(), pinfold_hv::hypercall::Refusal> {
            self.0.configure(index, &plan).map_err(refusal)
        }
        fn destroy(&mut self, index: u32) -> Result<(), AbiError> {
            self.0.destroy(index).map_err(status)
        }
        fn resources(&self) -> Option<pinfold_abi::Resources> {
            self.snapshot().resources().ok()
        }
        fn host_info(&self) -> HostInfo {
            FakeBackend::new().host_info().expect("fake")
        }
        fn gic_info(&self) -> Option<pinfold_abi::GicReport> {
            FakeBackend::new().gic_info().ok()
        }
        fn partitions(&self) -> Vec<PartitionSummary> {
            self.0.partitions.clone()
        }
        fn detail(&self, index: u32) -> Option<PartitionDetail> {
            self.snapshot().detail(index).ok()
        }
        fn start(&mut self, index: u32) -> Result<(), AbiError> {
            self.0.start(index).map_err(|_| AbiError::NotFound)
        }
        fn stop(&mut self, index: u32) -> Result<(), AbiError> {
            self.0.stop(index).map_err(|_| AbiError::NotFound)
        }
        fn restart(&mut self, index: u32) -> Result<(), AbiError> {
            self.0.restart(index).map_err(|_| AbiError::NotFound)
        }
        fn console_read(&self, index: u32, offset: u64, out: &mut [u8]) -> Option<RingRead> {
            let mut copy = FakeBackend {
                console: self.0.console.clone(),
                ..FakeBackend::new()
            };
            let r = copy.console_read(index, offset, out).ok()?;
            Some(RingRead {
                len: r.len,
                next: r.next,
                dropped: r.dropped,
            })
        }
        fn console_write(&mut self, index: u32, bytes: &[u8]) -> Option<usize> {
            self.0.console_write(index, bytes).ok()
        }

        fn token_digest(&self) -> [u8; 32] {
            token_digest(b"t")
        }
        fn report(&mut self, _: pinfold_abi::ManagerStatus, _: &[u8]) {}
        fn pci_functions(&self) -> Vec<pinfold_abi::PciFunction> {
            Vec::new()
        }
        fn wall_clock_ms(&self) -> Option<u64> {
            self.0.clock.ok()
        }
        fn events(&self, seq: u64, _: usize) -> Option<(Vec<pinfold_abi::Event>, u64, u64)> {
            FakeBackend {
                hv_events: self.0.hv_events.clone(),
                ..FakeBackend::new()
            }
            .events(seq)
            .ok()
        }
    }

    impl Hypercall for Machine {
        fn hvc(&mut self, regs: [u64; 6]) -> [u64; 4] {
            dispatch(
                self.is_management,
                &regs,
                &mut Ram(&mut self.ram),
                &mut self.hv,
            )
        }
        fn buffer_ipa(&self) -> u64 {
            RAM_BASE + BUF_OFFSET as u64
        }
        fn buffer(&mut self) -> &mut [u8] {
            &mut self.ram[BUF_OFFSET..BUF_OFFSET + self.buf_len]
        }
    }

    fn machine_router(buf_len: usize, is_management: bool) -> Router<HvcBackend<Machine>> {
        let machine = Machine {
            ram: vec![0; 0x2_0000],
            buf_len,
            hv: FakeHv(FakeBackend::new()),
            is_management,
        };
        Router::new(
            HvcBackend::new(machine),
            Some(token_digest(TOKEN.as_bytes())),
            FILES,
        )
    }

    #[test]
    fn partitions_come_through_the_hypercall_abi() {
        let mut r = machine_router(0x1_0000, true);

        let resp = r.handle(&get("/api/v1/partitions"));

        let names: Vec<Value> = body_json(&resp)["partitions"]
            .as_array()
            .expect("list")
            .iter()
            .map(|p| p["name"].clone())
            .collect();
        assert_eq!(names, vec![json!("mgmt"), json!("alpha"), json!("beta")]);
    }

    #[test]
    fn host_comes_through_the_hypercall_abi_with_abi_version() {
        let mut r = machine_router(0x1_0000, true);

        let resp = r.handle(&get("/api/v1/host"));

        assert_eq!(body_json(&resp)["abi_version"], "3.3");
        assert_eq!(body_json(&resp)["time"], "2026-12-01T13:45:00Z");
        assert_eq!(body_json(&resp)["gic"]["revision"], "v3");
        assert_eq!(body_json(&resp)["gic"]["its_count"], 1);
        assert_eq!(body_json(&resp)["cpus"][1]["partition"], "alpha");
    }

    #[test]
    fn image_read_comes_through_the_hypercall_abi_in_buffer_sized_pieces() {
        // A buffer of 16 bytes: the 64-byte boot kernel takes four calls.
        let mut r = machine_router(16, true);
        let want = r.backend_mut().hc_mut().hv.0.images[0].1.clone();
        let mut back = Vec::new();
        let mut out = [0u8; 100];
        loop {
            let n = r
                .backend_mut()
                .image_read(0, back.len() as u64, &mut out)
                .expect("read");
            assert!(n <= 16);
            if n == 0 {
                break;
            }
            back.extend_from_slice(&out[..n]);
        }
        assert_eq!(back, want);
        assert_eq!(
            r.backend_mut().image_read(0, 65, &mut out),
            Err(CallError::Refused(AbiError::InvalidParameters))
        );
        let mut not_mgmt = machine_router(16, false);
        assert!(not_mgmt.backend_mut().image_read(0, 0, &mut out).is_err());
    }

    #[test]
    fn console_round_trips_through_the_hypercall_abi() {
        let mut r = machine_router(0x1_0000, true);

        let read = r.handle(&get("/api/v1/partitions/alpha/console?offset=100"));
        let write = r.handle(&post(
            "/api/v1/partitions/alpha/console",
            r#"{"data":"root\n"}"#,
        ));

        assert_eq!(body_json(&read)["data"], "login: ");
        assert_eq!(body_json(&write), json!({"accepted":5,"remaining":0}));
    }

    #[test]
    fn start_goes_through_the_hypercall_abi() {
        let mut r = machine_router(0x1_0000, true);

        let resp = r.handle(&post("/api/v1/partitions/beta/start", ""));

        assert_eq!(body_json(&resp), json!({"name":"beta","state":"running"}));
    }

    #[test]
    fn buffer_too_small_for_the_reply_is_500() {
        let mut r = machine_router(8, true);

        let resp = r.handle(&get("/api/v1/partitions"));

        assert_eq!(
            (resp.status, error_code(&resp).as_str()),
            (500, "hypervisor_error")
        );
    }

    #[test]
    fn events_come_through_the_hypercall_abi() {
        let mut r = machine_router(0x1_0000, true);
        r.backend_mut().hc_mut().hv.0.hv_events =
            (0..5).map(|s| hv_event(s, "beta", "stopped")).collect();

        let resp = r.handle(&get("/api/v1/events"));

        let seqs: Vec<u64> = body_json(&resp)["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, [1000, 2000, 3000, 4000, 5000]);
        assert_eq!(body_json(&resp)["events"][0]["partition"], "beta");
    }

    #[test]
    fn manager_not_recognised_as_management_is_503() {
        let mut r = machine_router(0x1_0000, false);

        let resp = r.handle(&get("/api/v1/host"));

        assert_eq!(resp.status, 503);
    }

    fn upload_through(r: &mut Router<HvcBackend<Machine>>, kind: &str, data: &[u8]) -> Response {
        let mut req = post(&format!("/api/v1/images?kind={kind}&name=k"), "");
        req.body = data.to_vec();
        req.headers
            .push(("Content-Length".into(), data.len().to_string()));
        r.handle(&req)
    }

    fn kernel_bytes(len: usize) -> Vec<u8> {
        let mut data: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
        data[56..60].copy_from_slice(b"ARM\x64");
        data
    }

    #[test]
    fn upload_goes_through_image_create_write_and_seal_in_buffer_sized_writes() {
        let mut r = machine_router(0x4000, true);
        let data = kernel_bytes(50_000);

        let resp = upload_through(&mut r, "kernel", &data);

        assert_eq!(resp.status, 201, "{}", text(&resp));
        let hv = &r.backend_mut().hc_mut().hv.0;
        let (info, bytes) = hv.images.iter().find(|(i, _)| i.id == 1).expect("image 1");
        assert!(info.sealed);
        assert_eq!(bytes, &data);
        assert_eq!(hv.largest_write, 0x4000, "one shared buffer per call");
    }

    #[test]
    fn create_and_delete_go_through_the_hypercall_abi() {
        let mut r = machine_router(0x1_0000, true);
        assert_eq!(
            upload_through(&mut r, "kernel", &kernel_bytes(4096)).status,
            201
        );

        let created = r.handle(&post(
            "/api/v1/partitions",
            r#"{"name":"gamma","cpus":[3],"memory_mib":64,"kernel":"1","bootargs":"quiet"}"#,
        ));
        let resources = r.handle(&get("/api/v1/resources"));
        let deleted = r.handle(&Request {
            method: "DELETE".into(),
            ..post("/api/v1/partitions/gamma", "")
        });

        assert_eq!(created.status, 201, "{}", text(&created));
        assert_eq!(body_json(&created)["config"]["bootargs"], "quiet");
        assert_eq!(body_json(&resources)["cpus"][3]["partition"], "gamma");
        let devices = &body_json(&resources)["devices"];
        let owners: Vec<(&str, &str)> = devices
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["name"].as_str().unwrap(), d["owner"].as_str().unwrap()))
            .collect();
        assert_eq!(
            owners,
            [
                ("/pl011@9040000", "partition"),
                ("/intc@8000000", "hypervisor"),
                ("/pl061@9030000", "free")
            ]
        );
        assert_eq!(devices[1]["partition"], serde_json::Value::Null);
        assert_eq!(deleted.status, 204);
        assert!(r.backend_mut().hc_mut().hv.0.plans.is_empty());
    }

    #[test]
    fn rejection_comes_back_through_the_buffer_as_409_naming_the_field() {
        let mut r = machine_router(0x1_0000, true);
        assert_eq!(
            upload_through(&mut r, "kernel", &kernel_bytes(4096)).status,
            201
        );

        let resp = r.handle(&post(
            "/api/v1/partitions",
            r#"{"name":"gamma","cpus":[2],"memory_mib":64,"kernel":"1"}"#,
        ));

        assert_eq!(
            (resp.status, body_json(&resp)["field"].as_str()),
            (409, Some("cpus"))
        );
        // The plan is at the start of the whole buffer and the Rejection
        // written over it has room for its whole sentence.
        assert_eq!(
            body_json(&resp)["detail"],
            r#"partition "gamma": cpus: CPU 2 is also used by partition "beta""#
        );
        assert!(r.backend_mut().hc_mut().hv.0.plans.is_empty());
    }

    #[test]
    fn no_resources_through_the_hypercall_abi_is_409_naming_memory() {
        let mut r = machine_router(0x1_0000, true);
        assert_eq!(
            upload_through(&mut r, "kernel", &kernel_bytes(4096)).status,
            201
        );

        let resp = r.handle(&post(
            "/api/v1/partitions",
            r#"{"name":"gamma","cpus":[3],"memory_mib":8192,"kernel":"1"}"#,
        ));

        assert_eq!(
            (resp.status, body_json(&resp)["field"].as_str()),
            (409, Some("memory"))
        );
    }
}

// ---------------------------------------------------------------------------
// Events, the stream, console history
// ---------------------------------------------------------------------------

fn event_seqs(resp: &Response) -> Vec<u64> {
    body_json(resp)["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect()
}

#[test]
fn events_merge_the_hypervisors_with_refused_logins_and_config_changes() {
    let mut r = router();
    r.backend_mut().hv_events = vec![hv_event(0, "beta", "stopped by the manager")];
    let mut bad = post("/api/v1/partitions/beta/start", "");
    bad.headers = vec![("Authorization".into(), "Bearer nope".into())];
    assert_eq!(r.handle(&bad).status, 401);
    r.backend_mut()
        .hv_events
        .push(hv_event(1, "beta", "running (boot 2)"));
    let config = r.record("config", Some("beta"), "bootargs changed");

    let resp = r.handle(&get("/api/v1/events"));

    assert_eq!(resp.status, 200);
    let body = body_json(&resp);
    assert_eq!(event_seqs(&resp), [1000, 1001, 2000, 2001]);
    assert_eq!(config, Some(2001));
    assert_eq!(
        body["events"][1],
        json!({"seq": 1001, "time": "2026-12-01T13:45:00Z", "kind": "login_refused",
               "partition": null, "message": "POST /api/v1/partitions/beta/start: wrong token"})
    );
    assert_eq!(
        body["events"][0],
        json!({"seq": 1000, "time": "2026-12-01T13:45:00Z", "kind": "state",
               "partition": "beta", "message": "stopped by the manager"})
    );
    assert_eq!(body["next"], 2002);
    let later = r.handle(&get("/api/v1/events?since=2001"));
    assert_eq!(event_seqs(&later), [2001]);
}

#[test]
fn a_storm_of_refused_logins_is_a_few_events() {
    let mut r = router();
    let mut bad = post("/api/v1/partitions/beta/start", "");
    bad.headers.clear();
    for _ in 0..100 {
        assert_eq!(r.handle(&bad).status, 401);
    }
    let resp = r.handle(&get("/api/v1/events"));
    assert_eq!(event_seqs(&resp).len(), events::LOGIN_BURST as usize);
}

#[test]
fn events_since_must_be_a_number() {
    let mut r = router();
    let resp = r.handle(&get("/api/v1/events?since=x"));
    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (400, "bad_request")
    );
}

#[test]
fn the_stream_starts_after_last_event_id_and_frames_every_event() {
    let mut r = router();
    r.backend_mut().hv_events = (0..3).map(|s| hv_event(s, "beta", "x")).collect();
    let mut req = get("/api/v1/events/stream");
    req.headers.push(("Last-Event-ID".into(), "1000".into()));

    let mut stream = r.open_stream(&req).expect("a stream");
    let first = stream.poll(&r.events, std::time::Instant::now()).unwrap();
    let whole = r.handle(&req);

    assert!(
        first.starts_with("id: 2000\nevent: state\ndata: {\"seq\":2000,"),
        "{first}"
    );
    assert_eq!(first.matches("\n\n").count(), 2, "events 2000 and 3000");
    assert_eq!(whole.content_type, EVENT_STREAM);
    assert_eq!(String::from_utf8(whole.body).unwrap(), first);
    let mut bad = get("/api/v1/events/stream");
    bad.headers.push(("Last-Event-ID".into(), "abc".into()));
    assert_eq!(r.open_stream(&bad).unwrap_err().status, 400);
}

#[test]
fn the_web_uis_stream_reader_opens_the_stream_with_a_viewers_bearer_token_until_it_is_revoked() {
    // The web UI reads the stream with fetch() (an EventSource cannot send
    // the header): a viewer's token and Last-Event-ID open it from there.
    let (mut r, viewer) = router_with_viewer();
    r.backend_mut().hv_events = (0..3).map(|s| hv_event(s, "beta", "x")).collect();
    let req = with_header(
        with_token(get("/api/v1/events/stream"), &viewer),
        "Last-Event-ID",
        "2000",
    );

    let mut stream = r.open_stream(&req).expect("a viewer's stream");
    let first = stream.poll(&r.events, std::time::Instant::now()).unwrap();
    assert!(first.starts_with("id: 3000\n"), "{first}");
    assert_eq!(
        r.open_stream(&anon_get("/api/v1/events/stream"))
            .unwrap_err()
            .status,
        401
    );
    assert_eq!(
        r.open_stream(&with_token(get("/api/v1/events/stream"), "nope"))
            .unwrap_err()
            .status,
        401
    );
    let mut del = post("/api/v1/auth/credentials/c1", "");
    del.method = "DELETE".into();
    assert_eq!(r.handle(&del).status, 200);
    assert_eq!(r.open_stream(&req).unwrap_err().status, 401);
}

#[test]
fn the_console_history_is_a_text_download_with_everything_kept() {
    let mut r = router();
    r.follow_consoles();
    r.backend_mut().console.extend_from_slice(b"root\r\n");

    let resp = r.handle(&get("/api/v1/partitions/alpha/console/history"));

    assert_eq!(resp.status, 200);
    assert_eq!(resp.content_type, "text/plain; charset=utf-8");
    assert_eq!(
        resp.headers,
        [(
            "Content-Disposition",
            "attachment; filename=\"alpha-console.log\"".to_string()
        )]
    );
    // The fake's ring starts at position 100: what was before is lost.
    assert_eq!(
        text(&resp),
        "\r\n[pinfold-manager: 100 bytes of console output lost]\r\nlogin: root\r\n"
    );
    let again = r.handle(&get("/api/v1/partitions/alpha/console/history"));
    assert_eq!(text(&again), text(&resp), "nothing read twice");
    let missing = r.handle(&get("/api/v1/partitions/nope/console/history"));
    assert_eq!(missing.status, 404);
}

#[test]
fn host_pci_lists_every_partitions_functions_with_class_and_owner() {
    let (mut r, viewer) = router_with_viewer();
    let resp = r.handle(&with_token(get("/api/v1/host/pci"), &viewer));
    assert_eq!(resp.status, 200);
    let body = body_json(&resp);
    assert_eq!(
        body,
        json!({"functions": [
            {"bdf": "0000:00:01.0", "vendor_device": "1af4:1041", "class": "020000", "owner": "mgmt"},
            {"bdf": "0000:00:02.0", "vendor_device": "1af4:1041", "class": "020000", "owner": "alpha"},
            {"bdf": "0000:00:03.0", "vendor_device": "1af4:1041", "class": "020000", "owner": "beta"},
            {"bdf": "0000:00:04.0", "vendor_device": "1b36:0010", "class": "010802", "owner": "beta"},
        ]})
    );
    let mut anon = get("/api/v1/host/pci");
    anon.headers.clear();
    assert_eq!(r.handle(&anon).status, 401);
}
