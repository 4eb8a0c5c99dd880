//! Run-time partitions (create, change, delete with ETag / If-Match), the resources view, and images: streamed uploads, background fetches, and the manager's per-image progress.
//!
//! The hypervisor is the authority on every rule: a plan it refuses comes
//! back as its Rejection (field and sentence) and becomes a 400 or 409
//! naming that field. The manager only checks what it alone knows (the JSON
//! shape, that an image id names an image of the right kind) and keeps
//! what the hypervisor does not (image names, bytes received, why an
//! upload failed).
//!
//! An upload is streamed: [`serve`] (the app's entry point) reads the body
//! in chunks of at most [`UPLOAD_CHUNK`] bytes and takes the router's lock
//! once per chunk, so other connections are served meanwhile and
//! `GET /api/v1/images/{id}` shows the progress.

use std::io::Read;
use std::sync::{Arc, Mutex};

use pinfold_abi::{AbiError, CallError, ImageInfo, PartitionPlan, RamOwner, Transition};
use pinfold_config::{KernelPlan, LifecyclePlan, RestartMode};
use serde_json::{Map, Value};
use sha2::Digest;

use crate::backend::{Backend, HvError};
use crate::json::{self, ImageState};
use crate::{json_response, match_route, split_target, ApiError, Matched, Request, Response};
use crate::{Endpoint, Router, MAX_BODY_BYTES};

/// Largest image accepted (uploads and fetches), checked against the
/// Content-Length before anything is written.
pub const MAX_IMAGE_BYTES: u64 = 256 << 20;
/// Most image bytes held at once: one IMAGE_WRITE's buffer.
pub const UPLOAD_CHUNK: usize = pinfold_abi::MAX_BUFFER_LEN as usize;
/// Failed uploads the manager remembers (for `GET /api/v1/images/{id}`).
const FAILED_KEPT: usize = 16;

/// What the manager knows of an image the hypervisor does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageMeta {
    pub name: String,
    pub kind: json::ImageKind,
    pub size: u64,
    pub received: u64,
    pub state: ImageState,
    pub error: Option<String>,
}

// ---------------------------------------------------------------------------
// Partition config requests
// ---------------------------------------------------------------------------

/// The fields of a create or change request; absent ones are `None`
/// (`initrd: null` is `Some(None)`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigPatch {
    pub name: Option<String>,
    pub cpus: Option<Vec<u32>>,
    pub memory_mib: Option<u64>,
    pub kernel: Option<u32>,
    pub kernel_format: Option<json::KernelFormat>,
    pub initrd: Option<Option<u32>>,
    pub bootargs: Option<String>,
    pub autostart: Option<bool>,
    pub restart: Option<json::Restart>,
    pub restart_limit: Option<u32>,
    pub watchdog_s: Option<u32>,
    pub shutdown_timeout_s: Option<u32>,
    pub devices: Option<Vec<json::Device>>,
    /// PCI functions (`"SSSS:BB:DD.F"`), checked by the hypervisor against
    /// every partition's functions and windows.
    pub pci: Option<Vec<pinfold_config::PciAddress>>,
    /// The interrupt controller interface asked for; the hypervisor checks
    /// it against the host's GIC.
    pub gic: Option<pinfold_config::GicSetting>,
}

/// The JSON keys a config request may have, in the contract's order.
const CONFIG_KEYS: &[&str] = &[
    "name",
    "cpus",
    "memory_mib",
    "kernel",
    "kernel_format",
    "initrd",
    "bootargs",
    "autostart",
    "restart",
    "restart_limit",
    "watchdog_s",
    "shutdown_timeout_s",
    "devices",
    "pci",
    "gic",
];

/// The plan field (as the TOML check names it) a JSON key sets.
fn plan_field(key: &str) -> &str {
    match key {
        "memory_mib" => "memory",
        other => other,
    }
}

/// `partition "NAME": ` before a sentence, as the build-time check writes.
fn about(name: Option<&str>) -> String {
    name.map(|n| format!("partition \"{n}\": "))
        .unwrap_or_default()
}

/// An image id: a decimal string (as `GET /api/v1/images` gives it) or a
/// JSON integer.
fn image_id(value: &Value) -> Option<u32> {
    match value {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        _ => None,
    }
}

impl ConfigPatch {
    /// Parses a request body; every error names the field. `name` is the
    /// partition a PATCH is about (for the sentences).
    pub fn parse(body: &[u8], name: Option<&str>) -> Result<ConfigPatch, ApiError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("body must be a JSON object: {e}")))?;
        let Value::Object(map) = value else {
            return Err(ApiError::bad_request("body must be a JSON object"));
        };
        let who = map
            .get("name")
            .and_then(Value::as_str)
            .or(name)
            .map(str::to_string);
        Self::from_map(map, who.as_deref())
    }

    fn from_map(map: Map<String, Value>, who: Option<&str>) -> Result<ConfigPatch, ApiError> {
        let mut patch = ConfigPatch::default();
        for (key, value) in map {
            let bad = |what: &str| {
                ApiError::bad_request(format!("{}{}: {what}", about(who), plan_field(&key)))
                    .with_field(plan_field(&key))
            };
            fn typed<T: serde::de::DeserializeOwned>(
                value: Value,
                bad: impl Fn(&str) -> ApiError,
                what: &str,
            ) -> Result<T, ApiError> {
                serde_json::from_value(value).map_err(|e| bad(&format!("must be {what} ({e})")))
            }
            match key.as_str() {
                "name" => patch.name = Some(typed(value, bad, "a string")?),
                "cpus" => patch.cpus = Some(typed(value, bad, "a list of CPU numbers")?),
                "memory_mib" => {
                    patch.memory_mib = Some(typed(value, bad, "a whole number of MiB")?)
                }
                "kernel" => {
                    if value.is_null() {
                        return Err(bad("is required (an image id)"));
                    }
                    patch.kernel = Some(image_id(&value).ok_or_else(|| bad("must be an image id"))?)
                }
                "initrd" => {
                    patch.initrd = Some(if value.is_null() {
                        None
                    } else {
                        Some(image_id(&value).ok_or_else(|| bad("must be an image id or null"))?)
                    })
                }
                "kernel_format" => {
                    patch.kernel_format = Some(typed(value, bad, "\"linux\" or \"raw\"")?)
                }
                "bootargs" => patch.bootargs = Some(typed(value, bad, "a string")?),
                "autostart" => patch.autostart = Some(typed(value, bad, "true or false")?),
                "restart" => {
                    patch.restart =
                        Some(typed(value, bad, "\"never\", \"on-crash\" or \"always\"")?)
                }
                "restart_limit" => {
                    patch.restart_limit = Some(typed(value, bad, "a non-negative integer")?)
                }
                "watchdog_s" => {
                    patch.watchdog_s = Some(typed(value, bad, "a whole number of seconds")?)
                }
                "shutdown_timeout_s" => {
                    patch.shutdown_timeout_s = Some(typed(value, bad, "a whole number of seconds")?)
                }
                "devices" => {
                    patch.devices = Some(typed(
                        value,
                        bad,
                        "a list of {name, mmio, spis, compatible, host_node}",
                    )?)
                }
                "gic" => {
                    let setting = value.as_str().and_then(pinfold_config::GicSetting::parse);
                    patch.gic = Some(setting.ok_or_else(|| {
                        bad(&format!("{value} is not \"auto\", \"v3\" or \"v5\""))
                    })?)
                }
                "pci" => {
                    let list: Vec<Value> = typed(value, bad, "a list of \"SSSS:BB:DD.F\" strings")?;
                    let mut functions = Vec::with_capacity(list.len());
                    for (i, entry) in list.iter().enumerate() {
                        let address = entry
                            .as_str()
                            .and_then(pinfold_config::PciAddress::parse)
                            .ok_or_else(|| {
                                ApiError::bad_request(format!(
                                    "{}pci[{i}]: {entry} is not a PCI function \"SSSS:BB:DD.F\" \
                                     (hex, e.g. \"0000:00:02.0\")",
                                    about(who)
                                ))
                                .with_field(format!("pci[{i}]"))
                            })?;
                        functions.push(address);
                    }
                    patch.pci = Some(functions);
                }
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "unknown field {key:?}; known: {}",
                        CONFIG_KEYS.join(", ")
                    ))
                    .with_field(key))
                }
            }
        }
        Ok(patch)
    }

    /// The new plan entry: `base` with this patch applied.
    fn apply(self, mut plan: PartitionPlan) -> Result<PartitionPlan, ApiError> {
        let who = self.name.clone().unwrap_or_else(|| plan.name.clone());
        if let Some(name) = self.name {
            plan.name = name;
        }
        if let Some(cpus) = self.cpus {
            plan.cpus = cpus;
        }
        if let Some(mib) = self.memory_mib {
            plan.ram_size = mib.checked_mul(1 << 20).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "{}memory: {mib} MiB is too large",
                    about(Some(&who))
                ))
                .with_field("memory")
            })?;
        }
        if let Some(kernel) = self.kernel {
            plan.kernel.image = kernel;
        }
        if let Some(format) = self.kernel_format {
            plan.kernel.format = match format {
                json::KernelFormat::Linux => pinfold_config::KernelFormat::LinuxImage,
                json::KernelFormat::Raw => pinfold_config::KernelFormat::Raw,
            };
        }
        if let Some(initrd) = self.initrd {
            plan.initrd = initrd;
        }
        if let Some(bootargs) = self.bootargs {
            plan.bootargs = bootargs;
        }
        if let Some(autostart) = self.autostart {
            plan.autostart = autostart;
        }
        if let Some(restart) = self.restart {
            plan.lifecycle.restart = match restart {
                json::Restart::Never => RestartMode::Never,
                json::Restart::OnCrash => RestartMode::OnCrash,
                json::Restart::Always => RestartMode::Always,
            };
        }
        if let Some(limit) = self.restart_limit {
            plan.lifecycle.restart_limit = limit;
        }
        if let Some(s) = self.watchdog_s {
            plan.lifecycle.watchdog_s = s;
        }
        if let Some(s) = self.shutdown_timeout_s {
            plan.lifecycle.shutdown_timeout_s = s;
        }
        if let Some(devices) = self.devices {
            plan.devices = devices
                .into_iter()
                .map(|d| pinfold_config::DevicePlan {
                    name: d.name,
                    mmio: d
                        .mmio
                        .into_iter()
                        .map(|m| pinfold_config::MmioRange {
                            base: m.base,
                            size: m.size,
                        })
                        .collect(),
                    spis: d.spis,
                    compatible: d.compatible,
                    host_node: d.host_node,
                })
                .collect();
        }
        if let Some(pci) = self.pci {
            plan.pci = pci;
        }
        if let Some(gic) = self.gic {
            plan.gic = gic;
        }
        Ok(plan)
    }

    /// A new partition's plan: name, cpus, memory_mib and kernel required,
    /// the rest defaulted (stopped until started, restart never, 30 s
    /// shutdown timeout, no watchdog).
    fn into_new_plan(self) -> Result<PartitionPlan, ApiError> {
        let who = self.name.clone();
        let missing = |field: &str, what: &str| {
            ApiError::bad_request(format!(
                "{}{field}: is required ({what})",
                about(who.as_deref())
            ))
            .with_field(field)
        };
        let name = self
            .name
            .clone()
            .ok_or_else(|| missing("name", "a string"))?;
        let cpus = self
            .cpus
            .clone()
            .ok_or_else(|| missing("cpus", "a list of CPU numbers"))?;
        let mib = self
            .memory_mib
            .ok_or_else(|| missing("memory", "memory_mib, a whole number of MiB"))?;
        let kernel = self
            .kernel
            .ok_or_else(|| missing("kernel", "an image id"))?;
        let mut base = PartitionPlan::new(
            name,
            cpus,
            mib << 20,
            KernelPlan {
                image: kernel,
                format: pinfold_config::KernelFormat::LinuxImage,
            },
        );
        base.lifecycle = LifecyclePlan::default();
        self.apply(base)
    }
}

/// The `ETag` of a plan entry: the hex SHA-256 of its postcard encoding,
/// quoted.
pub fn etag(plan: &PartitionPlan) -> String {
    let bytes = pinfold_abi::encode_reply_vec(plan);
    format!("\"{}\"", json::hex(&sha2::Sha256::digest(&bytes)))
}

/// Whether an `If-Match` value matches `tag` (`*`, or one of a
/// comma-separated list; weak tags compare by their opaque part).
pub(crate) fn if_match_ok(if_match: Option<&str>, tag: &str) -> bool {
    let Some(header) = if_match else {
        return true;
    };
    header
        .split(',')
        .map(str::trim)
        .any(|candidate| candidate == "*" || candidate.trim_start_matches("W/") == tag)
}

/// `POST /api/v1/images/fetch`'s body.
pub(crate) fn parse_fetch(body: &[u8]) -> Result<json::FetchRequest, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        let text = e.to_string();
        let field = text
            .strip_prefix("unknown field `")
            .or_else(|| text.strip_prefix("missing field `"))
            .and_then(|rest| rest.split('`').next())
            .map(str::to_string);
        let err = ApiError::bad_request(format!(
            "body must be {{\"url\", \"kind\", \"name\"?, \"sha256\"?}}: {text}"
        ));
        match field {
            Some(f) => err.with_field(f),
            None => err,
        }
    })
}

// ---------------------------------------------------------------------------
// Router: partitions, resources, images
// ---------------------------------------------------------------------------

/// The API's answer to a refused plan: the hypervisor's Rejection (field,
/// sentence; 409 when it clashes with another partition), NO_RESOURCES as
/// 409 on `memory`, other refusals as usual.
pub(crate) fn plan_error<B: Backend>(
    r: &mut Router<B>,
    err: HvError,
    plan: &PartitionPlan,
) -> ApiError {
    match err {
        HvError::Rejected(rejection) => {
            let e = if rejection.conflict {
                ApiError::conflict(rejection.message)
            } else {
                ApiError::bad_request(rejection.message)
            };
            e.with_field(rejection.field)
        }
        HvError::Call(CallError::Refused(AbiError::NoResources)) => {
            let free = r
                .backend
                .resources()
                .map(|res| {
                    format!(
                        " (the largest free block is {} MiB)",
                        res.largest_free >> 20
                    )
                })
                .unwrap_or_default();
            ApiError::conflict(format!(
                "partition \"{}\": memory: {} MiB does not fit in the free RAM{free}",
                plan.name,
                plan.ram_size >> 20
            ))
            .with_field("memory")
        }
        HvError::Call(e) => ApiError::from_call(e, &plan.name),
    }
}

/// "a kernel", "an initrd", "a DTB".
fn a_kind(kind: pinfold_abi::ImageKind) -> &'static str {
    match kind {
        pinfold_abi::ImageKind::Kernel => "a kernel",
        pinfold_abi::ImageKind::Initrd => "an initrd",
        pinfold_abi::ImageKind::Dtb => "a DTB",
    }
}

impl<B: Backend> Router<B> {
    /// A `config` or `image` event in the manager's log. The hypervisor
    /// records its own for partitions created, changed or destroyed, so
    /// those are not recorded twice; image events are only the manager's.
    pub fn record_event(&mut self, kind: &str, partition: Option<&str>, message: &str) {
        if kind != "config" {
            self.record(kind, partition, message);
        }
    }

    /// The hypervisor's images, or none when it lacks the call.
    pub(crate) fn hv_images(&mut self) -> Result<Vec<ImageInfo>, ApiError> {
        match self.backend.images() {
            Ok(list) => Ok(list),
            Err(CallError::Refused(AbiError::NotSupported)) => Ok(Vec::new()),
            Err(e) => Err(ApiError::from_call(e, "LIST_IMAGES")),
        }
    }

    /// 400 naming `kernel`/`initrd` unless the plan's images exist, are
    /// complete and are of that kind.
    fn check_images(&mut self, plan: &PartitionPlan) -> Result<(), ApiError> {
        let images = self.hv_images()?;
        if images.is_empty() {
            return Ok(()); // The hypervisor checks (or lacks images).
        }
        let mut wanted = vec![("kernel", pinfold_abi::ImageKind::Kernel, plan.kernel.image)];
        if let Some(initrd) = plan.initrd {
            wanted.push(("initrd", pinfold_abi::ImageKind::Initrd, initrd));
        }
        for (field, kind, id) in wanted {
            let problem = match images.iter().find(|i| i.id == id) {
                None => Some(format!("no image {id} (see GET /api/v1/images)")),
                Some(i) if i.kind != kind => Some(format!(
                    "image {id} is {}, not {}",
                    a_kind(i.kind),
                    a_kind(kind)
                )),
                Some(i) if !i.sealed => Some(format!("image {id} is still uploading")),
                Some(_) => None,
            };
            if let Some(problem) = problem {
                return Err(ApiError::bad_request(format!(
                    "partition \"{}\": {field}: {problem}",
                    plan.name
                ))
                .with_field(field));
            }
        }
        Ok(())
    }

    /// The partition JSON of index `index` (with its config), and its ETag.
    fn partition_json(&mut self, index: u32, name: &str) -> Result<Response, ApiError> {
        let detail = self
            .backend
            .detail(index)
            .map_err(|e| ApiError::from_call(e, name))?;
        let mut resp = json_response(200, &json::PartitionDetailJson::from(&detail));
        resp.headers.push(("ETag", etag(&detail.plan)));
        Ok(resp)
    }

    pub(crate) fn create_partition(&mut self, patch: ConfigPatch) -> Result<Response, ApiError> {
        let plan = patch.into_new_plan()?;
        self.check_images(&plan)?;
        let index = match self.backend.create(&plan) {
            Ok(index) => index,
            Err(err) => return Err(plan_error(self, err, &plan)),
        };
        self.record_event(
            "config",
            Some(&plan.name),
            &format!("partition {} created", plan.name),
        );
        if plan.autostart {
            // Created either way; the body's state says whether it started.
            let _ = self.backend.start(index);
        }
        let mut resp = self.partition_json(index, &plan.name)?;
        resp.status = 201;
        resp.headers
            .push(("Location", format!("/api/v1/partitions/{}", plan.name)));
        Ok(resp)
    }

    /// The partition `name` if it may be changed or deleted (`verb`) under
    /// `if_match`: 404, 409 (management, state), 412 (ETag).
    fn changeable(
        &mut self,
        name: &str,
        verb: &str,
        if_match: Option<&str>,
    ) -> Result<(u32, PartitionPlan), ApiError> {
        let p = self.lookup(name)?;
        if p.management {
            return Err(ApiError::conflict(format!(
                "cannot {verb} {name}: it is the management partition serving this API"
            )));
        }
        if !p.state.allows(Transition::Configure) {
            let state = json::State::from(p.state).as_str();
            return Err(ApiError::conflict(format!(
                "cannot {verb} {name}: it is {state} (stop it first)"
            )));
        }
        let detail = self
            .backend
            .detail(p.index)
            .map_err(|e| ApiError::from_call(e, name))?;
        let tag = etag(&detail.plan);
        if !if_match_ok(if_match, &tag) {
            return Err(ApiError::precondition_failed(format!(
                "{name}'s config changed since you read it (its ETag is now {tag})"
            )));
        }
        Ok((p.index, detail.plan))
    }

    pub(crate) fn change_partition(
        &mut self,
        name: &str,
        patch: ConfigPatch,
        if_match: Option<&str>,
    ) -> Result<Response, ApiError> {
        let (index, old) = self.changeable(name, "change", if_match)?;
        let plan = patch.apply(old)?;
        self.check_images(&plan)?;
        if let Err(err) = self.backend.configure(index, &plan) {
            return Err(plan_error(self, err, &plan));
        }
        self.record_event(
            "config",
            Some(&plan.name),
            &format!("partition {name} changed"),
        );
        self.partition_json(index, &plan.name)
    }

    pub(crate) fn delete_partition(
        &mut self,
        name: &str,
        if_match: Option<&str>,
    ) -> Result<Response, ApiError> {
        let (index, _) = self.changeable(name, "delete", if_match)?;
        self.backend
            .destroy(index)
            .map_err(|e| ApiError::from_call(e, &format!("delete {name}")))?;
        self.record_event("config", Some(name), &format!("partition {name} deleted"));
        Ok(Response {
            status: 204,
            content_type: crate::JSON,
            body: Vec::new(),
            headers: Vec::new(),
        })
    }

    pub(crate) fn resources(&mut self) -> Result<Response, ApiError> {
        let res = self
            .backend
            .resources()
            .map_err(|e| ApiError::from_call(e, "RESOURCES"))?;
        let parts = self.partitions()?;
        let name_of = |index: u32| {
            parts
                .iter()
                .find(|p| p.index == index)
                .map(|p| p.name.clone())
        };
        let ranges: Vec<json::RamRangeJson> = res
            .ram
            .iter()
            .map(|r| {
                let (owner, partition, left_bytes) = match r.owner {
                    RamOwner::Free => (json::Owner::Free, None, None),
                    RamOwner::Hypervisor => (json::Owner::Hypervisor, None, None),
                    RamOwner::Images => (json::Owner::Images, None, None),
                    RamOwner::Partition(i) => (json::Owner::Partition, name_of(i), None),
                    RamOwner::Scrubbing { left } => (json::Owner::Scrubbing, None, Some(left)),
                };
                json::RamRangeJson {
                    base: r.base,
                    size: r.size,
                    owner,
                    partition,
                    left_bytes,
                }
            })
            .collect();
        let body = json::ResourcesJson {
            cpus: res
                .cpus
                .iter()
                .map(|c| json::Cpu {
                    cpu: c.cpu,
                    partition: c.partition.and_then(name_of),
                })
                .collect(),
            memory: json::Memory {
                total_bytes: res.ram.iter().map(|r| r.size).sum(),
                free_bytes: res
                    .ram
                    .iter()
                    .filter(|r| r.owner == RamOwner::Free)
                    .map(|r| r.size)
                    .sum(),
                largest_free_bytes: res.largest_free,
                ranges,
            },
            images_bytes: res.images_bytes,
            devices: res
                .devices
                .iter()
                .map(|d| json::DeviceUse {
                    name: d.node.clone(),
                    base: d.base,
                    size: d.size,
                    owner: match (d.partition, d.hypervisor) {
                        (Some(_), _) => json::DeviceHolder::Partition,
                        (None, true) => json::DeviceHolder::Hypervisor,
                        (None, false) => json::DeviceHolder::Free,
                    },
                    partition: d.partition.and_then(name_of),
                })
                .collect(),
        };
        Ok(json_response(200, &body))
    }

    /// Every image: the hypervisor's, with what the manager knows, then
    /// the failed uploads it remembers.
    fn image_list(&mut self) -> Result<Vec<json::Image>, ApiError> {
        let hv = self.hv_images()?;
        let parts = self.partitions()?;
        let mut out: Vec<json::Image> = hv
            .iter()
            .map(|info| {
                let meta = self.images.get(&info.id);
                let state = if info.sealed {
                    ImageState::Ready
                } else {
                    meta.map_or(ImageState::Uploading, |m| m.state)
                };
                json::Image {
                    id: info.id.to_string(),
                    name: meta.map(|m| m.name.clone()).unwrap_or_else(|| {
                        if info.boot {
                            format!("boot-{}", info.id)
                        } else {
                            format!("image-{}", info.id)
                        }
                    }),
                    kind: info.kind.into(),
                    size: info.size,
                    received: if info.sealed {
                        info.size
                    } else {
                        meta.map_or(info.written, |m| m.received)
                    },
                    state,
                    error: meta.and_then(|m| m.error.clone()),
                    sha256: info.sha256.map(|d| json::hex(&d)),
                    used_by: info
                        .used_by
                        .iter()
                        .filter_map(|i| parts.iter().find(|p| p.index == *i))
                        .map(|p| p.name.clone())
                        .collect(),
                    boot: info.boot,
                }
            })
            .collect();
        for (id, meta) in &self.images {
            if meta.state == ImageState::Failed && !hv.iter().any(|i| i.id == *id) {
                out.push(json::Image {
                    id: id.to_string(),
                    name: meta.name.clone(),
                    kind: meta.kind,
                    size: meta.size,
                    received: meta.received,
                    state: ImageState::Failed,
                    error: meta.error.clone(),
                    sha256: None,
                    used_by: Vec::new(),
                    boot: false,
                });
            }
        }
        Ok(out)
    }

    pub(crate) fn list_images(&mut self) -> Result<Response, ApiError> {
        let images = self.image_list()?;
        Ok(json_response(200, &json::ImageList { images }))
    }

    fn find_image(&mut self, id: u32) -> Result<json::Image, ApiError> {
        self.image_list()?
            .into_iter()
            .find(|i| i.id == id.to_string())
            .ok_or_else(|| ApiError::not_found(format!("no image {id}")))
    }

    pub(crate) fn get_image(&mut self, id: u32) -> Result<Response, ApiError> {
        let image = self.find_image(id)?;
        Ok(json_response(200, &image))
    }

    pub(crate) fn delete_image(&mut self, id: u32) -> Result<Response, ApiError> {
        let image = self.find_image(id)?;
        if image.boot {
            return Err(ApiError::conflict(format!(
                "image {id} came with the boot bundle and cannot be deleted"
            )));
        }
        if !image.used_by.is_empty() {
            return Err(ApiError::conflict(format!(
                "image {id} is used by {}",
                image.used_by.join(", ")
            )));
        }
        match image.state {
            ImageState::Uploading => {
                return Err(ApiError::conflict(format!("image {id} is still uploading")))
            }
            ImageState::Failed if self.images.contains_key(&id) => {
                // Only the manager's record of a failed upload is left.
                self.images.remove(&id);
            }
            _ => {
                self.backend.image_delete(id).map_err(|e| match e {
                    CallError::Refused(AbiError::Conflict) => {
                        ApiError::conflict(format!("image {id} is in use"))
                    }
                    CallError::Refused(AbiError::NotFound) => {
                        ApiError::not_found(format!("no image {id}"))
                    }
                    e => ApiError::from_call(e, &format!("delete image {id}")),
                })?;
                self.images.remove(&id);
            }
        }
        self.record_event("image", None, &format!("image {id} deleted"));
        Ok(Response {
            status: 204,
            content_type: crate::JSON,
            body: Vec::new(),
            headers: Vec::new(),
        })
    }

    // -- uploads, one step per lock --------------------------------------

    /// A new empty image for `size` bytes, and the manager's record of it.
    fn upload_begin(&mut self, spec: &UploadSpec) -> Result<u32, ApiError> {
        if spec.size > MAX_IMAGE_BYTES {
            return Err(ApiError::too_large(format!(
                "the image is {} bytes; at most {MAX_IMAGE_BYTES}",
                spec.size
            ))
            .with_field("body"));
        }
        let id = self
            .backend
            .image_create(spec.kind.into(), spec.size)
            .map_err(|e| match e {
                CallError::Refused(AbiError::NoResources) => ApiError::too_large(format!(
                    "the hypervisor has no room for a {}-byte image",
                    spec.size
                ))
                .with_field("body"),
                e => ApiError::from_call(e, "IMAGE_CREATE"),
            })?;
        let name = spec.name.clone().unwrap_or_else(|| format!("image-{id}"));
        self.images.insert(
            id,
            ImageMeta {
                name,
                kind: spec.kind,
                size: spec.size,
                received: 0,
                state: ImageState::Uploading,
                error: None,
            },
        );
        Ok(id)
    }

    /// Writes one chunk at `offset`, in as many IMAGE_WRITEs as it takes.
    fn upload_write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<(), ApiError> {
        let mut done = 0;
        while done < bytes.len() {
            let taken = self
                .backend
                .image_write(id, offset + done as u64, &bytes[done..])
                .map_err(|e| ApiError::from_call(e, &format!("IMAGE_WRITE {id}")))?;
            if taken == 0 {
                return Err(ApiError::hypervisor(
                    500,
                    format!(
                        "IMAGE_WRITE {id} took no bytes at offset {}",
                        offset + done as u64
                    ),
                ));
            }
            done += taken;
        }
        if let Some(meta) = self.images.get_mut(&id) {
            meta.received = offset + bytes.len() as u64;
        }
        Ok(())
    }

    /// The upload failed: the image goes, its record says why.
    fn upload_fail(&mut self, id: u32, err: &ApiError) {
        // Gone already when the hypervisor refused to seal it.
        let _ = self.backend.image_delete(id);
        if let Some(meta) = self.images.get_mut(&id) {
            meta.state = ImageState::Failed;
            meta.error = Some(err.detail.clone());
        }
        let failed: Vec<u32> = self
            .images
            .iter()
            .filter(|(_, m)| m.state == ImageState::Failed)
            .map(|(id, _)| *id)
            .collect();
        for old in failed.iter().take(failed.len().saturating_sub(FAILED_KEPT)) {
            self.images.remove(old);
        }
        self.record_event(
            "image",
            None,
            &format!("image {id} refused: {}", err.detail),
        );
    }

    /// Every byte is in: seal (the hypervisor hashes the image and compares
    /// the uploader's SHA-256 if one was given), answer 201. The manager
    /// hashes nothing itself: a second software SHA-256 pass over a 27 MB
    /// kernel cost about 2 s of TCG time per upload (docs/PERFORMANCE.md).
    fn upload_finish(&mut self, id: u32, spec: &UploadSpec) -> Result<Response, ApiError> {
        self.backend
            .image_seal(id, spec.sha256)
            .map_err(|e| match e {
                HvError::Rejected(r) => {
                    let e = if r.conflict {
                        ApiError::conflict(r.message)
                    } else {
                        ApiError::bad_request(r.message)
                    };
                    e.with_field(r.field)
                }
                HvError::Call(e) => ApiError::from_call(e, &format!("IMAGE_SEAL {id}")),
            })?;
        if let Some(meta) = self.images.get_mut(&id) {
            meta.state = ImageState::Ready;
        }
        self.record_event("image", None, &format!("image {id} ready"));
        let image = self.find_image(id)?;
        let mut resp = json_response(201, &image);
        resp.headers
            .push(("Location", format!("/api/v1/images/{id}")));
        Ok(resp)
    }
}

// ---------------------------------------------------------------------------
// Streaming: one lock per chunk
// ---------------------------------------------------------------------------

/// What is being uploaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UploadSpec {
    pub kind: json::ImageKind,
    pub name: Option<String>,
    pub sha256: Option<[u8; 32]>,
    pub size: u64,
}

/// Access to the router for one step: the caller's own (`&mut Router`,
/// in [`Router::handle`]) or a shared one, locked for the step only.
pub(crate) trait Step<B: Backend> {
    fn step<R>(&mut self, f: impl FnOnce(&mut Router<B>) -> R) -> R;
}

impl<B: Backend> Step<B> for &mut Router<B> {
    fn step<R>(&mut self, f: impl FnOnce(&mut Router<B>) -> R) -> R {
        f(self)
    }
}

impl<B: Backend> Step<B> for &Mutex<Router<B>> {
    fn step<R>(&mut self, f: impl FnOnce(&mut Router<B>) -> R) -> R {
        let mut guard = self.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }
}

/// Reads until `buf` is full or the body ends (or fails); bytes read.
fn read_full(body: &mut dyn Read, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        match body.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    got
}

/// The query of `POST /api/v1/images`: kind (required), name, sha256
/// (the size comes from the head).
fn parse_upload_query(query: &str) -> Result<UploadSpec, ApiError> {
    let mut kind = None;
    let mut name = None;
    let mut sha256 = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
        let value = crate::percent_decode(&raw.replace('+', " ")).ok_or_else(|| {
            ApiError::bad_request(format!("malformed escape in {key}")).with_field(key)
        })?;
        match key {
            "kind" => {
                kind = Some(json::ImageKind::parse(&value).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "kind: must be kernel, initrd or dtb, not {value:?}"
                    ))
                    .with_field("kind")
                })?)
            }
            "name" => name = Some(value),
            "sha256" => {
                sha256 = Some(json::parse_sha256(&value).ok_or_else(|| {
                    ApiError::bad_request(format!("sha256: must be 64 hex digits, not {value:?}"))
                        .with_field("sha256")
                })?)
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter {other:?}; known: kind, name, sha256"
                ))
                .with_field(other))
            }
        }
    }
    let kind = kind.ok_or_else(|| {
        ApiError::bad_request("kind: is required (kernel, initrd or dtb)").with_field("kind")
    })?;
    Ok(UploadSpec {
        kind,
        name,
        sha256,
        size: 0,
    })
}

/// `POST /api/v1/images`: checks the head (the caller has authorised it),
/// then streams the body into the hypervisor chunk by chunk.
pub(crate) fn drive_upload<B: Backend, S: Step<B>>(
    mut s: S,
    head: &Request,
    query: &str,
    body: &mut dyn Read,
) -> Response {
    let spec = match upload_spec(head, query) {
        Ok(spec) => spec,
        Err(e) => return e.to_response(),
    };
    match stream(&mut s, &spec, body) {
        Ok(resp) => resp,
        Err(e) => e.to_response(),
    }
}

fn upload_spec(head: &Request, query: &str) -> Result<UploadSpec, ApiError> {
    let spec = parse_upload_query(query)?;
    if head
        .header("transfer-encoding")
        .is_some_and(|v| !v.eq_ignore_ascii_case("identity"))
    {
        return Err(ApiError::length_required(
            "an image upload needs Content-Length (not chunked)",
        ));
    }
    let size = head
        .header("content-length")
        .ok_or_else(|| ApiError::length_required("an image upload needs Content-Length"))?
        .trim()
        .parse::<u64>()
        .map_err(|_| ApiError::bad_request("Content-Length is not a number").with_field("body"))?;
    Ok(UploadSpec { size, ..spec })
}

/// Creates the image, then streams the body into it.
fn stream<B: Backend, S: Step<B>>(
    s: &mut S,
    spec: &UploadSpec,
    body: &mut dyn Read,
) -> Result<Response, ApiError> {
    let id = s.step(|r| r.upload_begin(spec))?;
    stream_into(s, id, spec, body, "body")
}

/// Reads and writes one chunk per step, then seals; a body that ends
/// early (the error names `short_field`), a failed write, a wrong digest
/// or a refused seal deletes the image and leaves its record failed.
fn stream_into<B: Backend, S: Step<B>>(
    s: &mut S,
    id: u32,
    spec: &UploadSpec,
    body: &mut dyn Read,
    short_field: &str,
) -> Result<Response, ApiError> {
    let mut buf = vec![0u8; UPLOAD_CHUNK.min(spec.size.max(1) as usize)];
    let mut offset = 0u64;
    let result = loop {
        if offset == spec.size {
            break s.step(|r| r.upload_finish(id, spec));
        }
        let want = (spec.size - offset).min(buf.len() as u64) as usize;
        let got = read_full(body, &mut buf[..want]);
        if got == 0 {
            break Err(ApiError::bad_request(format!(
                "{short_field}: the {} ended after {offset} of {} bytes",
                if short_field == "url" {
                    "download"
                } else {
                    "body"
                },
                spec.size
            ))
            .with_field(short_field));
        }
        if let Err(e) = s.step(|r| r.upload_write(id, offset, &buf[..got])) {
            break Err(e);
        }
        offset += got as u64;
    };
    if let Err(e) = &result {
        s.step(|r| r.upload_fail(id, e));
    }
    result
}

// ---------------------------------------------------------------------------
// The app's entry point
// ---------------------------------------------------------------------------

/// Serves one request on the shared router: an image upload streamed from
/// `body` (the lock held per chunk), a fetch started in the background,
/// anything else read whole (at most [`MAX_BODY_BYTES`] + 1 bytes) and
/// handed to [`Router::handle`]. `head` is the request without its body.
pub fn serve<B: Backend + Send + 'static>(
    router: &Arc<Mutex<Router<B>>>,
    mut head: Request,
    body: &mut dyn Read,
) -> Response {
    let (path, query) = split_target(&head.path);
    let endpoint = match match_route(&head.method, path) {
        Ok(Matched::Api { endpoint, .. }) => Some(endpoint),
        _ => None,
    };
    let shared: &Mutex<Router<B>> = router;
    match (endpoint, head.method.as_str()) {
        (Some(Endpoint::Images), "POST") => {
            let query = query.to_string();
            if let Err(e) = shared
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .authorize(&head)
            {
                return e.to_response();
            }
            drive_upload(shared, &head, &query, body)
        }
        (Some(Endpoint::ImageFetch), _) => {
            head.body = read_body(body);
            match crate::fetch::start(router, &head) {
                Ok(resp) => resp,
                Err(e) => e.to_response(),
            }
        }
        (Some(Endpoint::Config), _) => {
            head.body = read_body_up_to(body, crate::config::CONFIG_MAX_BYTES);
            shared
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .handle(&head)
        }
        _ => {
            head.body = read_body(body);
            shared
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .handle(&head)
        }
    }
}

fn read_body(body: &mut dyn Read) -> Vec<u8> {
    read_body_up_to(body, MAX_BODY_BYTES)
}

/// At most `limit` + 1 bytes of `body` (one more than allowed: a 413).
fn read_body_up_to(body: &mut dyn Read, limit: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = body.take((limit + 1) as u64).read_to_end(&mut out);
    out
}

/// A background fetch's body, streamed like an upload's.
pub(crate) fn fetch_stream<B: Backend>(
    router: &Mutex<Router<B>>,
    spec: &UploadSpec,
    id: u32,
    body: &mut dyn Read,
) {
    let mut s = router;
    // Success and failure both end in the image's record.
    let _ = stream_into(&mut s, id, spec, body, "url");
}

/// Begins a fetched image: the checks and IMAGE_CREATE of an upload.
pub(crate) fn fetch_begin<B: Backend>(
    router: &Mutex<Router<B>>,
    spec: &UploadSpec,
) -> Result<(u32, Response), ApiError> {
    let mut s = router;
    s.step(|r| {
        let id = r.upload_begin(spec)?;
        let image = r.find_image(id)?;
        let mut resp = json_response(202, &image);
        resp.headers
            .push(("Location", format!("/api/v1/images/{id}")));
        Ok((id, resp))
    })
}

/// A whole image from `body` into a new image (the restore's download
/// from the configuration store): created, streamed one chunk per lock,
/// sealed: its id; the error says why not (the image is then gone).
pub(crate) fn upload_from<B: Backend>(
    router: &Mutex<Router<B>>,
    spec: &UploadSpec,
    body: &mut dyn Read,
) -> Result<u32, ApiError> {
    let mut s = router;
    let id = s.step(|r| r.upload_begin(spec))?;
    stream_into(&mut s, id, spec, body, "url").map(|_| id)
}

/// A fetch that could not go on: the image goes, its record says why.
pub(crate) fn fetch_abort<B: Backend>(router: &Mutex<Router<B>>, id: u32, err: &ApiError) {
    let mut s = router;
    s.step(|r| r.upload_fail(id, err));
}
