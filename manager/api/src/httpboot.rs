//! Redfish HTTP boot of a partition: a `Boot` override `UefiHttp` with `HttpBootUri`, fetched by the manager and booted on the partition's next Redfish power-on.
//!
//! Pinfold has no firmware in a partition to run a UEFI HTTP boot, so the
//! manager does what that firmware would: on a `ComputerSystem.Reset` that
//! powers the partition on (On from off, ForceRestart, PowerCycle,
//! GracefulRestart) while the override is set, the partition is powered off
//! (if on), and [`run`] (the manager's HTTP boot thread, about once a
//! second) GETs `HttpBootUri` over plain HTTP:
//!
//! - an arm64 Linux `Image` (anything not starting with `{`) becomes the
//!   partition's kernel (its initrd and bootargs stay);
//! - a **boot manifest**, a JSON object `{"kernel": URL, "initrd": URL,
//!   "bootargs": "...", "kernel_sha256": HEX, "initrd_sha256": HEX}` (only
//!   `kernel` required; URLs absolute or relative to the manifest's), names
//!   the kernel, initrd and bootargs, each image checked against its
//!   digest when given.
//!
//! The images are streamed into the hypervisor's image store like any
//! fetched image (`runtime::upload_from`), the partition is changed to
//! boot them (the REST API's PATCH: the hypervisor checks them again) and
//! started. They stay its configuration: Pinfold has no other boot device
//! to fall back to, so `Once` means the next power-on fetches and the
//! override then returns to `None`/`Disabled`, and `Continuous` fetches
//! afresh on every Redfish power-on. Images fetched for an earlier HTTP
//! boot of the partition are deleted once no plan names them.
//!
//! A fetch that fails leaves the partition off with its configuration
//! unchanged; the failure is the system's `Oem.Pinfold.HttpBoot` and an
//! event. A ForceOff (or a start by other means) while a boot waits or
//! fetches cancels it; whatever it fetched is deleted.

use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::sync::Mutex;

use pinfold_abi::PartitionState;
use serde_json::{json, Value};

use crate::backend::Backend;
use crate::json::{ImageKind, KernelFormat};
use crate::runtime::{ConfigPatch, UploadSpec};
use crate::{ApiError, Router};

/// The largest boot manifest read.
pub const MANIFEST_MAX_BYTES: u64 = 64 * 1024;

/// `BootSourceOverrideEnabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Enabled {
    #[default]
    Disabled,
    Once,
    Continuous,
}

impl Enabled {
    /// The values offered, in the order `AllowableValues` lists them.
    pub const ALL: [&'static str; 3] = ["Disabled", "Once", "Continuous"];

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "Disabled" => Some(Enabled::Disabled),
            "Once" => Some(Enabled::Once),
            "Continuous" => Some(Enabled::Continuous),
            _ => None,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Enabled::Disabled => "Disabled",
            Enabled::Once => "Once",
            Enabled::Continuous => "Continuous",
        }
    }
}

/// `BootSourceOverrideTarget` values a partition takes.
pub const TARGETS: [&str; 2] = ["None", "UefiHttp"];

/// One partition's `Boot` override.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Override {
    /// Target `UefiHttp` (else `None`).
    pub http: bool,
    pub enabled: Enabled,
    /// `HttpBootUri`.
    pub uri: Option<String>,
}

impl Override {
    /// Whether the next Redfish power-on boots over HTTP.
    pub fn active(&self) -> bool {
        self.http && self.enabled != Enabled::Disabled && self.uri.is_some()
    }

    /// The `Boot` object of the ComputerSystem.
    pub fn to_json(&self) -> Value {
        json!({
            "BootSourceOverrideEnabled": self.enabled.as_str(),
            "BootSourceOverrideEnabled@Redfish.AllowableValues": Enabled::ALL,
            "BootSourceOverrideTarget": if self.http { "UefiHttp" } else { "None" },
            "BootSourceOverrideTarget@Redfish.AllowableValues": TARGETS,
            "HttpBootUri": self.uri,
        })
    }
}

/// Where a partition's HTTP boot is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Asked for; waits for the partition to be off.
    Waiting,
    /// The images are being fetched (attempt number, so a cancelled and
    /// re-queued boot does not take an older fetch's result).
    Fetching(u64),
    /// Booted these images.
    Booted { kernel: u32, initrd: Option<u32> },
    /// Did not boot: why.
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Job {
    name: String,
    uri: String,
    phase: Phase,
}

/// The HTTP boot state of every partition, by index (each entry carries
/// the name it was made for, so a partition created later in a reused
/// slot starts clean).
#[derive(Debug, Default)]
pub struct HttpBoot {
    overrides: BTreeMap<u32, (String, Override)>,
    jobs: BTreeMap<u32, Job>,
    /// The images the partition's last HTTP boot fetched.
    fetched: BTreeMap<u32, (String, Vec<u32>)>,
    attempts: u64,
}

impl HttpBoot {
    /// The override of partition `index` named `name`.
    pub fn get(&self, index: u32, name: &str) -> Override {
        match self.overrides.get(&index) {
            Some((n, o)) if n == name => o.clone(),
            _ => Override::default(),
        }
    }

    pub fn set(&mut self, index: u32, name: &str, o: Override) {
        self.overrides.insert(index, (name.to_string(), o));
    }

    /// Queues an HTTP boot of the partition if its override is set; true
    /// if it did (the caller then powers it off instead of starting it).
    pub fn queue(&mut self, index: u32, name: &str) -> bool {
        let o = self.get(index, name);
        let Some(uri) = o.uri.filter(|_| o.http && o.enabled != Enabled::Disabled) else {
            return false;
        };
        self.jobs.insert(
            index,
            Job {
                name: name.to_string(),
                uri,
                phase: Phase::Waiting,
            },
        );
        true
    }

    /// Drops a waiting or fetching boot (a ForceOff, or a start that does
    /// not boot over HTTP); a finished one's record stays.
    pub fn cancel(&mut self, index: u32) {
        if self.pending(index) {
            self.jobs.remove(&index);
        }
    }

    /// Whether a boot waits or fetches for the partition.
    pub fn pending(&self, index: u32) -> bool {
        self.jobs
            .get(&index)
            .is_some_and(|j| matches!(j.phase, Phase::Waiting | Phase::Fetching(_)))
    }

    /// The partition's last HTTP boot, for `Oem.Pinfold.HttpBoot` (None if
    /// it never had one).
    pub fn report(&self, index: u32, name: &str) -> Value {
        let Some(job) = self.jobs.get(&index).filter(|j| j.name == name) else {
            return Value::Null;
        };
        let (state, extra) = match &job.phase {
            Phase::Waiting => ("Waiting", json!({})),
            Phase::Fetching(_) => ("Fetching", json!({})),
            Phase::Booted { kernel, initrd } => (
                "Booted",
                // Image ids as the REST API writes them (decimal strings).
                json!({
                    "KernelImage": kernel.to_string(),
                    "InitrdImage": initrd.map(|i| i.to_string()),
                }),
            ),
            Phase::Failed(why) => ("Failed", json!({ "Message": why })),
        };
        let mut v = json!({ "State": state, "Uri": job.uri });
        if let (Some(v), Value::Object(extra)) = (v.as_object_mut(), extra) {
            v.extend(extra);
        }
        v
    }

    /// Forgets a partition's state once its slot holds another partition.
    fn forget_others(&mut self, live: &[(u32, String)]) {
        let alive = |i: &u32, n: &String| live.iter().any(|(li, ln)| li == i && ln == n);
        self.overrides.retain(|i, (n, _)| alive(i, n));
        self.jobs.retain(|i, j| alive(i, &j.name));
        self.fetched.retain(|i, (n, _)| alive(i, n));
    }
}

/// What a boot manifest names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub kernel: String,
    #[serde(default)]
    pub initrd: Option<String>,
    #[serde(default)]
    pub bootargs: Option<String>,
    #[serde(default)]
    pub kernel_sha256: Option<String>,
    #[serde(default)]
    pub initrd_sha256: Option<String>,
}

/// `reference` (absolute `http://...`, `/path` on the same server, or a
/// path relative to the manifest's directory) resolved against `base`.
pub fn resolve(base: &str, reference: &str) -> String {
    if reference.contains("://") {
        return reference.to_string();
    }
    let Some(rest) = base.strip_prefix("http://") else {
        return reference.to_string();
    };
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
    if reference.starts_with('/') {
        return format!("http://{authority}{reference}");
    }
    let path = path.split(['?', '#']).next().unwrap_or("/");
    let dir = &path[..=path.rfind('/').unwrap_or(0)];
    format!("http://{authority}{dir}{reference}")
}

fn digest(field: &str, text: &Option<String>) -> Result<Option<[u8; 32]>, ApiError> {
    match text {
        None => Ok(None),
        Some(t) => crate::json::parse_sha256(t).map(Some).ok_or_else(|| {
            ApiError::bad_request(format!("{field}: must be 64 hex digits, not {t:?}"))
                .with_field(field)
        }),
    }
}

/// The images (and bootargs) an HTTP boot fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fetched {
    kernel: u32,
    initrd: Option<u32>,
    bootargs: Option<String>,
}

impl Fetched {
    fn ids(&self) -> Vec<u32> {
        std::iter::once(self.kernel).chain(self.initrd).collect()
    }
}

/// One image from `url` into the store; its id.
fn fetch_image<B: Backend>(
    router: &Mutex<Router<B>>,
    url: &str,
    kind: ImageKind,
    sha256: Option<[u8; 32]>,
    name: String,
) -> Result<u32, ApiError> {
    let (reader, size) = crate::fetch::open(url)?;
    stream_image(router, reader, size, kind, sha256, name)
}

fn stream_image<B: Backend>(
    router: &Mutex<Router<B>>,
    reader: impl Read,
    size: u64,
    kind: ImageKind,
    sha256: Option<[u8; 32]>,
    name: String,
) -> Result<u32, ApiError> {
    let spec = UploadSpec {
        kind,
        name: Some(name),
        sha256,
        size,
    };
    let mut body = reader.take(size);
    crate::runtime::upload_from(router, &spec, &mut body)
}

/// GETs `uri` and stores what it names (a kernel, or a manifest's
/// images); on an error nothing fetched is left behind.
fn fetch_boot<B: Backend>(
    router: &Mutex<Router<B>>,
    uri: &str,
    partition: &str,
) -> Result<Fetched, ApiError> {
    let (mut reader, size) = crate::fetch::open(uri)?;
    let first = reader
        .fill_buf()
        .map_err(|e| ApiError::bad_request(format!("url: reading {uri} failed: {e}")))?
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .copied();
    let label = |what: &str| format!("HTTP boot of {partition}: {what}");
    if first != Some(b'{') {
        let kernel = stream_image(
            router,
            reader,
            size,
            ImageKind::Kernel,
            None,
            label("kernel"),
        )?;
        return Ok(Fetched {
            kernel,
            initrd: None,
            bootargs: None,
        });
    }
    if size > MANIFEST_MAX_BYTES {
        return Err(ApiError::bad_request(format!(
            "url: the boot manifest at {uri} is {size} bytes; at most {MANIFEST_MAX_BYTES}"
        ))
        .with_field("url"));
    }
    let mut text = String::new();
    reader
        .take(size)
        .read_to_string(&mut text)
        .map_err(|e| ApiError::bad_request(format!("url: reading {uri} failed: {e}")))?;
    let manifest: Manifest = serde_json::from_str(&text).map_err(|e| {
        ApiError::bad_request(format!(
            "url: {uri} is not a boot manifest (kernel, initrd, bootargs, kernel_sha256, \
             initrd_sha256): {e}"
        ))
        .with_field("url")
    })?;
    let kernel_sha = digest("kernel_sha256", &manifest.kernel_sha256)?;
    let initrd_sha = digest("initrd_sha256", &manifest.initrd_sha256)?;
    let kernel = fetch_image(
        router,
        &resolve(uri, &manifest.kernel),
        ImageKind::Kernel,
        kernel_sha,
        label("kernel"),
    )?;
    let initrd = match &manifest.initrd {
        None => None,
        Some(r) => {
            let got = fetch_image(
                router,
                &resolve(uri, r),
                ImageKind::Initrd,
                initrd_sha,
                label("initrd"),
            );
            match got {
                Ok(id) => Some(id),
                Err(e) => {
                    delete_images(router, &[kernel]);
                    return Err(e);
                }
            }
        }
    };
    Ok(Fetched {
        kernel,
        initrd,
        bootargs: manifest.bootargs,
    })
}

fn delete_images<B: Backend>(router: &Mutex<Router<B>>, ids: &[u32]) {
    let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
    for &id in ids {
        let _ = r.backend.image_delete(id);
    }
}

/// Takes the next boot whose partition is off: (index, name, URI,
/// attempt). Boots of partitions gone or started meanwhile are dropped.
fn take_ready<B: Backend>(r: &mut Router<B>) -> Option<(u32, String, String, u64)> {
    if !r
        .redfish
        .boot
        .jobs
        .values()
        .any(|j| j.phase == Phase::Waiting)
    {
        return None;
    }
    let parts = r.backend.partitions().ok()?;
    let live: Vec<(u32, String)> = parts.iter().map(|p| (p.index, p.name.clone())).collect();
    r.redfish.boot.forget_others(&live);
    let waiting: Vec<u32> = r
        .redfish
        .boot
        .jobs
        .iter()
        .filter(|(_, j)| j.phase == Phase::Waiting)
        .map(|(i, _)| *i)
        .collect();
    for index in waiting {
        let state = parts.iter().find(|p| p.index == index).map(|p| p.state);
        match state {
            Some(PartitionState::Stopped | PartitionState::Crashed) => {
                let boot = &mut r.redfish.boot;
                boot.attempts += 1;
                let attempt = boot.attempts;
                let job = boot.jobs.get_mut(&index)?;
                job.phase = Phase::Fetching(attempt);
                return Some((index, job.name.clone(), job.uri.clone(), attempt));
            }
            Some(PartitionState::Stopping | PartitionState::ShuttingDown) => {}
            _ => {
                // Started by other means (or gone): not ours to boot.
                r.redfish.boot.jobs.remove(&index);
            }
        }
    }
    None
}

/// Runs the HTTP boots that are ready, one after the other: each fetch
/// without the router's lock (the images stream in one chunk per lock,
/// like uploads), then the change and the start under it. The manager's
/// HTTP boot thread calls it about once a second.
pub fn run<B: Backend>(router: &Mutex<Router<B>>) {
    loop {
        let ready = {
            let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
            take_ready(&mut r)
        };
        let Some((index, name, uri, attempt)) = ready else {
            return;
        };
        let fetched = fetch_boot(router, &uri, &name);
        let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
        let current = r
            .redfish
            .boot
            .jobs
            .get(&index)
            .is_some_and(|j| j.phase == Phase::Fetching(attempt));
        match fetched {
            Ok(f) if !current => {
                for id in f.ids() {
                    let _ = r.backend.image_delete(id);
                }
            }
            Ok(f) => finish(&mut r, index, &name, &uri, f),
            Err(e) => {
                if current {
                    fail(&mut r, index, &name, &uri, &e.detail);
                }
            }
        }
    }
}

fn fail<B: Backend>(r: &mut Router<B>, index: u32, name: &str, uri: &str, why: &str) {
    if let Some(job) = r.redfish.boot.jobs.get_mut(&index) {
        job.phase = Phase::Failed(why.to_string());
    }
    r.record(
        "config",
        Some(name),
        &format!("HTTP boot of {name} from {uri} failed, left off: {why}"),
    );
}

/// Points the partition at the fetched images and starts it.
fn finish<B: Backend>(r: &mut Router<B>, index: u32, name: &str, uri: &str, f: Fetched) {
    let patch = ConfigPatch {
        kernel: Some(f.kernel),
        kernel_format: Some(KernelFormat::Linux),
        initrd: f.initrd.map(Some),
        bootargs: f.bootargs.clone(),
        ..ConfigPatch::default()
    };
    if let Err(e) = r.change_partition(name, patch, None) {
        for id in f.ids() {
            let _ = r.backend.image_delete(id);
        }
        return fail(r, index, name, uri, &e.detail);
    }
    // The images of the HTTP boot before, unless a plan still names them.
    if let Some((n, old)) = r.redfish.boot.fetched.remove(&index) {
        if n == name {
            for id in old {
                let _ = r.backend.image_delete(id);
            }
        }
    }
    r.redfish
        .boot
        .fetched
        .insert(index, (name.to_string(), f.ids()));
    if let Err(e) = r.backend.start(index) {
        let why = format!(
            "the start was refused: {}",
            ApiError::from_call(e, name).detail
        );
        return fail(r, index, name, uri, &why);
    }
    if let Some(job) = r.redfish.boot.jobs.get_mut(&index) {
        job.phase = Phase::Booted {
            kernel: f.kernel,
            initrd: f.initrd,
        };
    }
    let mut o = r.redfish.boot.get(index, name);
    if o.enabled == Enabled::Once {
        o = Override {
            uri: o.uri,
            ..Override::default()
        };
        r.redfish.boot.set(index, name, o);
    }
    let initrd = f
        .initrd
        .map_or_else(String::new, |i| format!(", initrd image {i}"));
    r.record(
        "config",
        Some(name),
        &format!(
            "{name} booted over HTTP from {uri}: kernel image {}{initrd}",
            f.kernel
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_resolve_against_the_manifests_url() {
        let base = "http://10.0.2.2:8000/boot/beta/manifest.json?x=1";
        assert_eq!(
            resolve(base, "Image"),
            "http://10.0.2.2:8000/boot/beta/Image"
        );
        assert_eq!(resolve(base, "/k/Image"), "http://10.0.2.2:8000/k/Image");
        assert_eq!(resolve(base, "http://h/i"), "http://h/i");
        assert_eq!(resolve("http://h", "Image"), "http://h/Image");
    }

    #[test]
    fn only_an_enabled_http_override_with_a_uri_is_active() {
        let uri = Some("http://h/Image".to_string());
        let on = Override {
            http: true,
            enabled: Enabled::Once,
            uri: uri.clone(),
        };
        assert!(on.active());
        assert!(!Override {
            enabled: Enabled::Disabled,
            ..on.clone()
        }
        .active());
        assert!(!Override {
            http: false,
            ..on.clone()
        }
        .active());
        assert!(!Override { uri: None, ..on }.active());
    }
}
