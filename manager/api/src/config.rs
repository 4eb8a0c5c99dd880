//! Configuration as code: the whole host as a plan TOML (`GET /api/v1/config`) and a plan TOML applied as a diff (`PUT /api/v1/config`, `?dry_run=1`).
//!
//! Export writes the schema of `vm-configs/` (docs/CONFIG.md): `[board]`
//! (this host's CPU count and RAM) and one `[[partition]]` per partition
//! in index order, every field written out (lifecycle too; the management
//! partition without `restart`/`restart_limit`, which it may not carry),
//! images named by content, `kernel = "image:<sha256>"`. The bearer
//! token is never written: an import without `token`/`token_sha256` keeps
//! the management partition's. [`parse_toml`] reads that text back into
//! plan entries with the build's own code (`pinfold_config::parse`,
//! `Config::check_static`, `PartitionConfig::plan_entry`), so an import
//! is refused with exactly the sentence and field the build-time check
//! gives, and `export -> parse` is the identity on plans (property-tested).
//!
//! An import is a [`Diff`] against the partitions that exist, by name:
//! created, changed (any field of the plan entry differs), deleted,
//! unchanged. It is checked whole before anything is applied: the TOML
//! and every rule (400/409 naming the field), the images (400 naming
//! `kernel`/`initrd`), the management partition and the boot-only fields
//! `management`, `pci_host_bridge`, `token`, `config_store` and `api_tls` (409
//! naming the field), and
//! that every changed or deleted partition is stopped or crashed (409
//! naming the partition: a running one is never stopped behind the
//! operator's back). Then it is applied in the order that lets freed
//! resources be reused in one import: deletes, then changes, then
//! creates (and the created ones with `autostart` are started). If the
//! hypervisor refuses a step half-way (RAM it has not got, another writer
//! racing this one), every step already made is undone in reverse order
//! and the answer says so.

use pinfold_abi::{ImageInfo, ImageKind, PartitionPlan, PartitionState, Transition};
use pinfold_config::{KernelFormat, KernelPlan, RestartMode, Size};
use sha2::Digest;

use crate::backend::{Backend, HvError};
use crate::{json, ApiError, Router};

/// The Content-Type of an exported configuration.
pub const TOML: &str = "application/toml";
/// Largest configuration `PUT /api/v1/config` takes.
pub const CONFIG_MAX_BYTES: usize = 64 * 1024;
/// How an exported plan names an image: `image:<sha256 hex>`.
pub const IMAGE_PREFIX: &str = "image:";

/// A partition as it exists now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    pub index: u32,
    pub state: PartitionState,
    pub plan: PartitionPlan,
}

/// The host an export describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostShape {
    pub cpus: u32,
    pub ram_bytes: u64,
}

// ---------------------------------------------------------------------------
// Export
// ---------------------------------------------------------------------------

/// A TOML basic string.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A size as the schema reads it: `"256MiB"`, or a byte count.
fn size(bytes: u64) -> String {
    let text = Size(bytes).to_string();
    if text.ends_with("bytes") {
        bytes.to_string()
    } else {
        quote(&text)
    }
}

fn list(items: &[u32]) -> String {
    let items: Vec<String> = items.iter().map(u32::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// `image:<sha256>` for image `id`, or an error naming the field.
fn image_ref(images: &[ImageInfo], id: u32, field: &str, who: &str) -> Result<String, ApiError> {
    images
        .iter()
        .find(|i| i.id == id)
        .and_then(|i| i.sha256)
        .map(|d| quote(&format!("{IMAGE_PREFIX}{}", json::hex(&d))))
        .ok_or_else(|| {
            ApiError::hypervisor(
                500,
                format!("partition \"{who}\": {field}: image {id} has no SHA-256 to export it by"),
            )
        })
}

/// The plan TOML of the whole host.
pub fn export(
    host: &HostShape,
    partitions: &[Existing],
    images: &[ImageInfo],
) -> Result<String, ApiError> {
    let mut out = String::new();
    out.push_str("# Pinfold host configuration (GET /api/v1/config); docs/CONFIG.md.\n");
    out.push_str("# Images are named by their SHA-256 (POST /api/v1/images to add one).\n\n");
    out.push_str("[board]\n");
    out.push_str("name = \"this-host\"\n");
    out.push_str(&format!("cpus = {}\n", host.cpus));
    out.push_str(&format!("memory = {}\n", size(host.ram_bytes)));
    for p in partitions {
        let plan = &p.plan;
        let name = &plan.name;
        out.push_str("\n[[partition]]\n");
        out.push_str(&format!("name = {}\n", quote(name)));
        out.push_str(&format!("cpus = {}\n", list(&plan.cpus)));
        out.push_str(&format!("memory = {}\n", size(plan.ram_size)));
        out.push_str(&format!(
            "kernel = {}\n",
            image_ref(images, plan.kernel.image, "kernel", name)?
        ));
        out.push_str(&format!(
            "kernel_format = {}\n",
            match plan.kernel.format {
                KernelFormat::LinuxImage => "\"linux\"",
                KernelFormat::Raw => "\"raw\"",
            }
        ));
        if let Some(initrd) = plan.initrd {
            out.push_str(&format!(
                "initrd = {}\n",
                image_ref(images, initrd, "initrd", name)?
            ));
        }
        out.push_str(&format!("bootargs = {}\n", quote(&plan.bootargs)));
        out.push_str(&format!("console_input = {}\n", plan.console.input));
        out.push_str(&format!("autostart = {}\n", plan.autostart));
        out.push_str(&format!("management = {}\n", plan.management));
        out.push_str(&format!("pci_host_bridge = {}\n", plan.pci_host_bridge));
        if !plan.pci.is_empty() {
            let functions: Vec<String> = plan.pci.iter().map(|a| quote(&a.to_string())).collect();
            out.push_str(&format!("pci = [{}]\n", functions.join(", ")));
        }
        out.push_str(&format!("pmu = {}\n", plan.pmu));
        if plan.gic != pinfold_config::GicSetting::Auto {
            out.push_str(&format!("gic = {}\n", quote(plan.gic.name())));
        }
        if let Some(url) = &plan.config_store {
            out.push_str(&format!("config_store = {}\n", quote(url)));
        }
        if !plan.api_tls {
            out.push_str("api_tls = false\n");
        }
        let life = &plan.lifecycle;
        if !plan.management {
            out.push_str(&format!(
                "restart = {}\n",
                match life.restart {
                    RestartMode::Never => "\"never\"",
                    RestartMode::OnCrash => "\"on-crash\"",
                    RestartMode::Always => "\"always\"",
                }
            ));
            out.push_str(&format!("restart_limit = {}\n", life.restart_limit));
        }
        out.push_str(&format!("watchdog_s = {}\n", life.watchdog_s));
        out.push_str(&format!(
            "shutdown_timeout_s = {}\n",
            life.shutdown_timeout_s
        ));
        for d in &plan.devices {
            out.push_str("\n[[partition.device]]\n");
            out.push_str(&format!("name = {}\n", quote(&d.name)));
            let mmio: Vec<String> = d
                .mmio
                .iter()
                .map(|m| format!("{{ base = 0x{:x}, size = {} }}", m.base, size(m.size)))
                .collect();
            out.push_str(&format!("mmio = [{}]\n", mmio.join(", ")));
            out.push_str(&format!("spis = {}\n", list(&d.spis)));
            if let Some(c) = &d.compatible {
                out.push_str(&format!("compatible = {}\n", quote(c)));
            }
            if let Some(h) = &d.host_node {
                out.push_str(&format!("host_node = {}\n", quote(h)));
            }
        }
    }
    Ok(out)
}

/// The `ETag` of an exported configuration: its text's SHA-256, quoted.
pub fn etag(text: &str) -> String {
    format!("\"{}\"", json::hex(&sha2::Sha256::digest(text.as_bytes())))
}

// ---------------------------------------------------------------------------
// Import: parse and check
// ---------------------------------------------------------------------------

/// A build-time check's refusal, as the API answers it.
fn rejection_error(r: pinfold_config::Rejection) -> ApiError {
    let e = if r.conflict() {
        ApiError::conflict(r.to_string())
    } else {
        ApiError::bad_request(r.to_string())
    };
    e.with_field(r.field)
}

/// The image `text` (`image:<sha256>`) names: a sealed image of `kind`.
fn resolve_image(
    images: &[ImageInfo],
    text: &str,
    kind: ImageKind,
    field: &str,
    who: &str,
) -> Result<u32, ApiError> {
    let bad = |what: String| {
        ApiError::bad_request(format!("partition \"{who}\": {field}: {what}")).with_field(field)
    };
    let hex = text.strip_prefix(IMAGE_PREFIX).ok_or_else(|| {
        bad(format!(
            "{text:?} is not an image of this host; write \"{IMAGE_PREFIX}<sha256>\" \
             (see GET /api/v1/images)"
        ))
    })?;
    let digest = json::parse_sha256(hex)
        .ok_or_else(|| bad(format!("{hex:?} is not a SHA-256 (64 hex digits)")))?;
    let found: Vec<&ImageInfo> = images
        .iter()
        .filter(|i| i.sealed && i.sha256 == Some(digest))
        .collect();
    match found.iter().find(|i| i.kind == kind) {
        Some(i) => Ok(i.id),
        None => match found.first() {
            Some(i) => Err(bad(format!(
                "image {} ({hex}) is not {}",
                i.id,
                match kind {
                    ImageKind::Kernel => "a kernel",
                    ImageKind::Initrd => "an initrd",
                    ImageKind::Dtb => "a DTB",
                }
            ))),
            None => Err(bad(format!(
                "no image with SHA-256 {hex} on this host (upload it first: POST /api/v1/images)"
            ))),
        },
    }
}

/// Reads an imported TOML into plan entries, in file order, checked by the
/// build's own rules against `host` and with images resolved against
/// `images`. `token` is the management partition's token digest now, kept
/// when the TOML gives none.
pub fn parse_toml(
    text: &str,
    host: &HostShape,
    images: &[ImageInfo],
    token: Option<[u8; 32]>,
) -> Result<Vec<PartitionPlan>, ApiError> {
    let config = pinfold_config::parse(text)
        .map_err(|e| ApiError::bad_request(format!("the configuration is not a plan: {e}")))?;
    if config.board.cpus != host.cpus {
        return Err(ApiError::bad_request(format!(
            "board: cpus: this host has {} CPUs, the configuration says {}",
            host.cpus, config.board.cpus
        ))
        .with_field("cpus"));
    }
    // What does not depend on images: the same checks as the build's.
    config.check_static().map_err(|e| match e {
        pinfold_config::ConfigError::Partition(r) => rejection_error(r),
        other => {
            let e = ApiError::bad_request(other.to_string());
            match other.field() {
                Some(f) => e.with_field(f),
                None => e,
            }
        }
    })?;
    let mut out = Vec::with_capacity(config.partitions.len());
    for p in &config.partitions {
        let kernel_text = p.kernel.to_string_lossy();
        let kernel = resolve_image(images, &kernel_text, ImageKind::Kernel, "kernel", &p.name)?;
        let initrd = match &p.initrd {
            Some(path) => Some(resolve_image(
                images,
                &path.to_string_lossy(),
                ImageKind::Initrd,
                "initrd",
                &p.name,
            )?),
            None => None,
        };
        let format = match p.kernel_format {
            // No file to probe here: an image of this host is a Linux
            // Image unless the plan says raw (export always says which).
            pinfold_config::ImageFormat::Auto | pinfold_config::ImageFormat::Linux => {
                KernelFormat::LinuxImage
            }
            pinfold_config::ImageFormat::Raw => KernelFormat::Raw,
        };
        let mut plan = p.plan_entry(
            KernelPlan {
                image: kernel,
                format,
            },
            initrd,
        );
        if plan.management && plan.token_sha256.is_none() {
            plan.token_sha256 = token;
        }
        out.push(plan);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Import: the diff
// ---------------------------------------------------------------------------

/// What an import does, by partition name (each list in plan order).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Diff {
    pub created: Vec<String>,
    pub changed: Vec<String>,
    pub deleted: Vec<String>,
    pub unchanged: Vec<String>,
}

/// One step of an import, in the order it is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
// A few steps per import: the size of a Change (two plans) does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Step {
    Delete {
        index: u32,
        old: PartitionPlan,
    },
    Change {
        index: u32,
        old: PartitionPlan,
        new: PartitionPlan,
    },
    Create {
        new: PartitionPlan,
    },
}

/// The first field (as the TOML names it) in which `a` and `b` differ.
pub fn first_difference(a: &PartitionPlan, b: &PartitionPlan) -> Option<&'static str> {
    let fields: [(&'static str, bool); 22] = [
        ("name", a.name == b.name),
        ("cpus", a.cpus == b.cpus),
        ("memory", a.ram_size == b.ram_size),
        ("kernel", a.kernel.image == b.kernel.image),
        ("kernel_format", a.kernel.format == b.kernel.format),
        ("initrd", a.initrd == b.initrd),
        ("bootargs", a.bootargs == b.bootargs),
        ("console_input", a.console == b.console),
        ("autostart", a.autostart == b.autostart),
        ("management", a.management == b.management),
        ("pci_host_bridge", a.pci_host_bridge == b.pci_host_bridge),
        ("pci", a.pci == b.pci),
        ("token", a.token_sha256 == b.token_sha256),
        ("pmu", a.pmu == b.pmu),
        ("restart", a.lifecycle.restart == b.lifecycle.restart),
        (
            "restart_limit",
            a.lifecycle.restart_limit == b.lifecycle.restart_limit,
        ),
        (
            "watchdog_s",
            a.lifecycle.watchdog_s == b.lifecycle.watchdog_s,
        ),
        (
            "shutdown_timeout_s",
            a.lifecycle.shutdown_timeout_s == b.lifecycle.shutdown_timeout_s,
        ),
        ("devices", a.devices == b.devices),
        ("config_store", a.config_store == b.config_store),
        ("api_tls", a.api_tls == b.api_tls),
        ("gic", a.gic == b.gic),
    ];
    fields
        .iter()
        .find(|(_, same)| !same)
        .map(|(field, _)| *field)
}

/// The diff from `existing` to `target` and its steps (deletes, changes,
/// creates), or why it may not be applied: the management partition
/// deleted or changed, a boot-only field changed, a changed or deleted
/// partition not stopped (409, naming the field or the partition).
pub fn plan_diff(
    existing: &[Existing],
    target: &[PartitionPlan],
) -> Result<(Diff, Vec<Step>), ApiError> {
    plan_diff_states(existing, target, true)
}

/// [`plan_diff`]; `check_state` false leaves out the check that changed
/// and deleted partitions are stopped (the restore at start stops them).
pub fn plan_diff_states(
    existing: &[Existing],
    target: &[PartitionPlan],
    check_state: bool,
) -> Result<(Diff, Vec<Step>), ApiError> {
    let mut diff = Diff::default();
    let mut deletes = Vec::new();
    let mut changes = Vec::new();
    let mut creates = Vec::new();
    let stoppable = |e: &Existing, verb: &str| {
        if !check_state || e.state.allows(Transition::Configure) {
            Ok(())
        } else {
            Err(ApiError::conflict(format!(
                "partition \"{}\": the import would {verb} it, but it is {} (stop it first)",
                e.plan.name,
                json::State::from(e.state).as_str()
            )))
        }
    };
    for e in existing {
        if target.iter().any(|t| t.name == e.plan.name) {
            continue;
        }
        if e.plan.management {
            return Err(ApiError::conflict(format!(
                "partition \"{}\": name: the management partition serving this API cannot be \
                 deleted by an import (it is missing from the configuration)",
                e.plan.name
            ))
            .with_field("name"));
        }
        stoppable(e, "delete")?;
        diff.deleted.push(e.plan.name.clone());
        deletes.push(Step::Delete {
            index: e.index,
            old: e.plan.clone(),
        });
    }
    for t in target {
        let Some(e) = existing.iter().find(|e| e.plan.name == t.name) else {
            diff.created.push(t.name.clone());
            creates.push(Step::Create { new: t.clone() });
            continue;
        };
        let Some(field) = first_difference(&e.plan, t) else {
            diff.unchanged.push(t.name.clone());
            continue;
        };
        if e.plan.management {
            return Err(ApiError::conflict(format!(
                "partition \"{}\": {field}: the management partition serving this API cannot be \
                 changed by an import",
                t.name
            ))
            .with_field(field));
        }
        for (boot_only, same) in [
            ("management", e.plan.management == t.management),
            (
                "pci_host_bridge",
                e.plan.pci_host_bridge == t.pci_host_bridge,
            ),
            ("token", e.plan.token_sha256 == t.token_sha256),
            ("config_store", e.plan.config_store == t.config_store),
            ("api_tls", e.plan.api_tls == t.api_tls),
        ] {
            if !same {
                return Err(ApiError::conflict(format!(
                    "partition \"{}\": {boot_only}: is set at boot only and cannot be changed \
                     by an import",
                    t.name
                ))
                .with_field(boot_only));
            }
        }
        stoppable(e, "change")?;
        diff.changed.push(t.name.clone());
        changes.push(Step::Change {
            index: e.index,
            old: e.plan.clone(),
            new: t.clone(),
        });
    }
    let mut steps = deletes;
    steps.extend(changes);
    steps.extend(creates);
    Ok((diff, steps))
}

// ---------------------------------------------------------------------------
// The router's part
// ---------------------------------------------------------------------------

/// What an applied step left, to undo it.
enum Undo {
    Recreate(PartitionPlan),
    Reconfigure(u32, PartitionPlan),
    Destroy(u32, String),
}

/// `?dry_run=1` (also `true`, `yes`; `0`/`false`/absent: apply).
pub(crate) fn parse_dry_run(query: &str) -> Result<bool, ApiError> {
    let mut dry = false;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, "1"));
        match key {
            "dry_run" => {
                dry = match value {
                    "1" | "true" | "yes" | "" => true,
                    "0" | "false" | "no" => false,
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "dry_run must be 1 or 0, not {other:?}"
                        ))
                        .with_field("dry_run"))
                    }
                }
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter {other:?}; known: dry_run"
                ))
                .with_field(other))
            }
        }
    }
    Ok(dry)
}

impl<B: Backend> Router<B> {
    /// Every partition with its plan, in index order, and the host.
    fn config_state(&mut self) -> Result<(HostShape, Vec<Existing>, Vec<ImageInfo>), ApiError> {
        let info = self
            .backend
            .host_info()
            .map_err(|e| ApiError::from_call(e, "HOST_INFO"))?;
        let mut parts = self.partitions()?;
        parts.sort_by_key(|p| p.index);
        let mut existing = Vec::with_capacity(parts.len());
        for p in parts {
            let detail = self
                .backend
                .detail(p.index)
                .map_err(|e| ApiError::from_call(e, &p.name))?;
            existing.push(Existing {
                index: p.index,
                state: p.state,
                plan: detail.plan,
            });
        }
        let images = self.hv_images()?;
        Ok((
            HostShape {
                cpus: info.cpu_count,
                ram_bytes: info.ram_bytes,
            },
            existing,
            images,
        ))
    }

    /// The exported configuration and its ETag.
    pub fn export_config(&mut self) -> Result<(String, String), ApiError> {
        let (host, existing, images) = self.config_state()?;
        let text = export(&host, &existing, &images)?;
        let tag = etag(&text);
        Ok((text, tag))
    }

    pub(crate) fn get_config(&mut self) -> Result<crate::Response, ApiError> {
        let (text, tag) = self.export_config()?;
        let mut resp = crate::Response::new(200, TOML, text.into_bytes());
        resp.headers.push(("ETag", tag));
        Ok(resp)
    }

    /// The diff `text` would make, every check but the partitions' states.
    pub fn preview_import(&mut self, text: &str) -> Result<Diff, ApiError> {
        let (host, existing, images) = self.config_state()?;
        let token = existing
            .iter()
            .find(|e| e.plan.management)
            .and_then(|e| e.plan.token_sha256);
        let target = parse_toml(text, &host, &images, token)?;
        plan_diff_states(&existing, &target, false).map(|(diff, _)| diff)
    }

    /// `PUT /api/v1/config`: checks the whole configuration, then applies
    /// it as a diff (unless `dry_run`); the diff, with the new ETag.
    pub fn import_config(
        &mut self,
        text: &str,
        if_match: Option<&str>,
        dry_run: bool,
    ) -> Result<(Diff, String), ApiError> {
        let (host, existing, images) = self.config_state()?;
        let now = etag(&export(&host, &existing, &images)?);
        if !crate::runtime::if_match_ok(if_match, &now) {
            return Err(ApiError::precondition_failed(format!(
                "the configuration changed since you read it (its ETag is now {now})"
            )));
        }
        let token = existing
            .iter()
            .find(|e| e.plan.management)
            .and_then(|e| e.plan.token_sha256);
        let target = parse_toml(text, &host, &images, token)?;
        let (diff, steps) = plan_diff(&existing, &target)?;
        if dry_run || steps.is_empty() {
            return Ok((diff, now));
        }
        self.apply_steps(&steps)?;
        // Started once every step is in: a created partition with autostart.
        for step in &steps {
            if let Step::Create { new } = step {
                if new.autostart {
                    if let Ok(p) = self.lookup(&new.name) {
                        let _ = self.backend.start(p.index);
                    }
                }
            }
        }
        self.record(
            "config",
            None,
            &format!(
                "configuration imported: created [{}], changed [{}], deleted [{}]",
                diff.created.join(", "),
                diff.changed.join(", "),
                diff.deleted.join(", ")
            ),
        );
        let (text, tag) = self.export_config()?;
        let _ = text;
        Ok((diff, tag))
    }

    /// Applies `steps` in order; on the first refusal undoes the applied
    /// ones in reverse and answers the refusal, saying what was undone.
    fn apply_steps(&mut self, steps: &[Step]) -> Result<(), ApiError> {
        let mut undo: Vec<Undo> = Vec::new();
        for step in steps {
            let result = match step {
                Step::Delete { index, old } => self
                    .backend
                    .destroy(*index)
                    .map(|()| undo.push(Undo::Recreate(old.clone())))
                    .map_err(|e| ApiError::from_call(e, &format!("delete {}", old.name))),
                Step::Change { index, old, new } => match self.backend.configure(*index, new) {
                    Ok(()) => {
                        undo.push(Undo::Reconfigure(*index, old.clone()));
                        Ok(())
                    }
                    Err(e) => Err(self.import_plan_error(e, new)),
                },
                Step::Create { new } => match self.backend.create(new) {
                    Ok(index) => {
                        undo.push(Undo::Destroy(index, new.name.clone()));
                        Ok(())
                    }
                    Err(e) => Err(self.import_plan_error(e, new)),
                },
            };
            if let Err(mut err) = result {
                let steps = undo.len();
                let mut failed = Vec::new();
                while let Some(u) = undo.pop() {
                    let outcome = match &u {
                        Undo::Recreate(plan) => self
                            .backend
                            .create(plan)
                            .map(|_| ())
                            .map_err(|e| format!("re-creating {}: {e:?}", plan.name)),
                        Undo::Reconfigure(index, plan) => self
                            .backend
                            .configure(*index, plan)
                            .map_err(|e| format!("restoring {}: {e:?}", plan.name)),
                        Undo::Destroy(index, name) => self
                            .backend
                            .destroy(*index)
                            .map_err(|e| format!("deleting {name}: {e:?}")),
                    };
                    if let Err(f) = outcome {
                        failed.push(f);
                    }
                }
                if failed.is_empty() {
                    err.detail.push_str(&format!(
                        " (the import stopped there; the {steps} step(s) already applied were \
                         undone, nothing changed)"
                    ));
                } else {
                    err.status = 500;
                    err.code = "hypervisor_error";
                    err.detail.push_str(&format!(
                        " (the import stopped there; undoing the {steps} step(s) already applied \
                         failed: {}; see GET /api/v1/config for what is now)",
                        failed.join("; ")
                    ));
                }
                self.record("config", None, &format!("import refused: {}", err.detail));
                return Err(err);
            }
        }
        Ok(())
    }

    fn import_plan_error(&mut self, err: HvError, plan: &PartitionPlan) -> ApiError {
        crate::runtime::plan_error(self, err, plan)
    }
}
