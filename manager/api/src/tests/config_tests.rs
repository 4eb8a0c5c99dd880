//! Host tests of configuration as code: export -> parse is the identity on plans (property over generated plans), and `GET`/`PUT /api/v1/config` through the FakeBackend: the diff and its order, dry runs, If-Match, refusals that change nothing, and the rollback of an import refused half-way.

use super::*;
use crate::config::{self, Existing, HostShape};
use pinfold_abi::{ImageInfo, ImageKind, PartitionPlan};
use pinfold_config::{DevicePlan, KernelFormat, KernelPlan, LifecyclePlan, MmioRange, RestartMode};

const BOOTARGS: &str = "console=ttyAMA0 earlycon=pl011,0x09000000";

fn image(id: u32, kind: ImageKind, byte: u8) -> ImageInfo {
    ImageInfo {
        id,
        kind,
        size: 64,
        written: 64,
        sealed: true,
        sha256: Some([byte; 32]),
        used_by: Vec::new(),
        boot: id < 2,
    }
}

/// The bytes of the small uploaded kernel, image 7, and their SHA-256.
pub(super) fn small_kernel() -> Vec<u8> {
    let mut k: Vec<u8> = (0..64u8).collect();
    k[56..60].copy_from_slice(b"ARM\x64");
    k
}

pub(super) fn small_digest() -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(small_kernel()).into()
}

pub(super) fn small_sha() -> String {
    json::hex(&small_digest())
}

pub(super) fn sha(byte: u8) -> String {
    json::hex(&[byte; 32])
}

/// The fake as the default QEMU plan: mgmt on CPU 0 (management, PCI host
/// bridge, the token), alpha on 1 (stopped here), beta on 2 and 3
/// (stopped); kernel image 0, initrd image 1 (the boot bundle's), and a
/// small uploaded kernel, image 7.
pub(super) fn config_router() -> Router<FakeBackend> {
    let mut r = router();
    let b = r.backend_mut();
    let mut initrd = image(1, ImageKind::Initrd, 0x22);
    initrd.boot = true;
    b.images.push((initrd, vec![0; 64]));
    let mut small = (b.images[0].0.clone(), small_kernel());
    small.0 = image(7, ImageKind::Kernel, 0);
    small.0.boot = false;
    small.0.sha256 = Some(small_digest());
    b.images.push(small);
    b.next_image = 8;
    for (index, cpus) in [(MGMT, vec![0]), (ALPHA, vec![1]), (BETA, vec![2, 3])] {
        let s = b.partitions.iter_mut().find(|p| p.index == index).unwrap();
        s.cpus = cpus.clone();
        s.state = if index == MGMT {
            PartitionState::Running
        } else {
            PartitionState::Stopped
        };
        let mut plan = PartitionPlan::new(
            s.name.clone(),
            cpus,
            s.ram_bytes,
            KernelPlan {
                image: 0,
                format: KernelFormat::LinuxImage,
            },
        );
        if index == MGMT {
            plan.management = true;
            plan.pci_host_bridge = true;
            plan.token_sha256 = Some(token_digest(TOKEN.as_bytes()));
            plan.autostart = true;
        } else {
            plan.initrd = Some(1);
            plan.bootargs = BOOTARGS.to_string();
        }
        b.plans.insert(index, plan);
    }
    r
}

pub(super) fn put(body: &str, query: &str, if_match: Option<&str>) -> Request {
    let mut headers = vec![("Authorization".into(), format!("Bearer {TOKEN}"))];
    if let Some(tag) = if_match {
        headers.push(("If-Match".into(), tag.to_string()));
    }
    Request {
        method: "PUT".into(),
        path: format!("/api/v1/config{query}"),
        headers,
        body: body.as_bytes().to_vec(),
        peer: None,
    }
}

pub(super) fn export(r: &mut Router<FakeBackend>) -> (String, String) {
    let resp = r.handle(&get("/api/v1/config"));
    assert_eq!(resp.status, 200, "{}", text(&resp));
    assert_eq!(resp.content_type, config::TOML);
    (text(&resp), resp.header("ETag").expect("ETag").to_string())
}

/// The calls that change partitions, in order.
fn changes(b: &FakeBackend) -> Vec<String> {
    b.calls
        .iter()
        .filter(|c| {
            ["create", "configure", "destroy", "start"]
                .iter()
                .any(|v| c.starts_with(v))
        })
        .cloned()
        .collect()
}

/// The exported text with alpha deleted, gamma created on alpha's CPU from
/// image 7 and beta's bootargs changed.
pub(super) fn changed_plan(exported: &str) -> String {
    let mut parts: Vec<&str> = exported.split("\n[[partition]]\n").collect();
    let alpha = parts
        .iter()
        .position(|p| p.starts_with("name = \"alpha\""))
        .unwrap();
    parts.remove(alpha);
    let mut out = parts.join("\n[[partition]]\n");
    out = out.replace(BOOTARGS, "console=ttyAMA0 quiet");
    out.push_str(&format!(
        "\n[[partition]]\nname = \"gamma\"\ncpus = [1]\nmemory = \"64MiB\"\nkernel = \"image:{}\"\n\
         kernel_format = \"raw\"\nautostart = true\n",
        small_sha()
    ));
    out
}

#[test]
fn get_config_is_the_plan_toml_with_images_by_sha256_and_an_etag() {
    let mut r = config_router();
    let (text, tag) = export(&mut r);
    assert!(text.contains("[board]\n"), "{text}");
    assert!(text.contains("cpus = 4\n"), "{text}");
    assert!(
        text.contains(&format!("kernel = \"image:{}\"", sha(0x11))),
        "{text}"
    );
    assert!(
        text.contains(&format!("initrd = \"image:{}\"", sha(0x22))),
        "{text}"
    );
    // The token is never exported; mgmt carries no restart policy.
    assert!(!text.contains("token"), "{text}");
    let mgmt = text
        .split("[[partition]]")
        .find(|p| p.contains("name = \"mgmt\""))
        .unwrap();
    assert!(!mgmt.contains("restart"), "{mgmt}");
    // In index order (beta 2, mgmt 5, alpha 9), the hypervisor's.
    let beta = text.find("\"beta\"").unwrap();
    assert!(beta < text.find("\"mgmt\"").unwrap(), "{text}");
    assert_eq!(tag, config::etag(&text));
    // The text is a plan the build-time parser takes.
    pinfold_config::parse(&text).expect("the export parses");
    // Unchanged on a second read.
    assert_eq!(export(&mut r).1, tag);
}

#[test]
fn importing_the_export_changes_nothing() {
    let mut r = config_router();
    let (text, tag) = export(&mut r);
    let resp = r.handle(&put(&text, "", Some(&tag)));
    assert_eq!(resp.status, 200, "{}", self::text(&resp));
    let body = body_json(&resp);
    assert_eq!(body["unchanged"], json!(["beta", "mgmt", "alpha"]));
    assert_eq!(body["created"], json!([]));
    assert!(changes(r.backend()).is_empty());
}

#[test]
fn dry_run_answers_the_diff_and_applies_nothing_then_the_import_applies_it_in_order() {
    let mut r = config_router();
    let (text, tag) = export(&mut r);
    let new = changed_plan(&text);
    let resp = r.handle(&put(&new, "?dry_run=1", Some(&tag)));
    assert_eq!(resp.status, 200, "{}", self::text(&resp));
    let want = json!({"created": ["gamma"], "changed": ["beta"], "deleted": ["alpha"],
        "unchanged": ["mgmt"], "dry_run": true});
    assert_eq!(body_json(&resp), want);
    assert!(changes(r.backend()).is_empty(), "{:?}", r.backend().calls);
    assert_eq!(export(&mut r).1, tag);

    let resp = r.handle(&put(&new, "", Some(&tag)));
    assert_eq!(resp.status, 200, "{}", self::text(&resp));
    assert_eq!(body_json(&resp)["dry_run"], json!(false));
    // Deletes first (alpha's CPU 1 is then free for gamma), changes, creates,
    // then the created one with autostart is started.
    assert_eq!(
        changes(r.backend()),
        vec![
            format!("destroy {ALPHA}"),
            format!("configure {BETA}"),
            "create gamma".to_string(),
            "start 20".to_string(),
        ]
    );
    let (after, new_tag) = export(&mut r);
    assert_eq!(resp.header("ETag"), Some(new_tag.as_str()));
    assert_ne!(new_tag, tag);
    assert!(!after.contains("\"alpha\""), "{after}");
    assert!(after.contains("name = \"gamma\""), "{after}");
    assert!(
        after.contains("bootargs = \"console=ttyAMA0 quiet\""),
        "{after}"
    );
    // Importing what was exported after the change is a no-op.
    let resp = r.handle(&put(&after, "", Some(&new_tag)));
    assert_eq!(
        body_json(&resp)["unchanged"],
        json!(["beta", "mgmt", "gamma"])
    );
}

#[test]
fn a_stale_if_match_is_412_and_changes_nothing() {
    let mut r = config_router();
    let (text, _) = export(&mut r);
    let resp = r.handle(&put(&changed_plan(&text), "", Some("\"0000\"")));
    assert_eq!(resp.status, 412, "{}", self::text(&resp));
    assert_eq!(error_code(&resp), "precondition_failed");
    assert!(changes(r.backend()).is_empty());
}

#[test]
fn put_config_needs_the_token() {
    let mut r = config_router();
    let (text, _) = export(&mut r);
    let mut req = put(&text, "", None);
    req.headers.clear();
    assert_eq!(r.handle(&req).status, 401);
}

fn refused(r: &mut Router<FakeBackend>, body: &str) -> (u16, String, String) {
    let before = export(r);
    let resp = r.handle(&put(body, "", None));
    assert!(changes(r.backend()).is_empty(), "{:?}", r.backend().calls);
    assert_eq!(export(r), before, "nothing changed");
    let detail = body_json(&resp)["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let field = body_json(&resp)["field"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (resp.status, field, detail)
}

#[test]
fn an_invalid_import_is_refused_naming_the_field_as_the_build_does_and_changes_nothing() {
    let mut r = config_router();
    let (text, _) = export(&mut r);
    // A CPU of beta's: the build-time check's sentence, word for word.
    let overlap = changed_plan(&text).replace(
        "cpus = [1]\nmemory = \"64MiB\"",
        "cpus = [2]\nmemory = \"64MiB\"",
    );
    let build = pinfold_config::parse(&overlap)
        .unwrap()
        .check_static()
        .unwrap_err()
        .to_string();
    let (status, field, detail) = refused(&mut r, &overlap);
    assert_eq!((status, field.as_str()), (409, "cpus"), "{detail}");
    assert_eq!(detail, build);
    assert_eq!(
        detail,
        "partition \"gamma\": cpus: CPU 2 is also used by partition \"beta\""
    );
    // A name twice.
    let twice = changed_plan(&text).replace("name = \"gamma\"", "name = \"beta\"");
    let (status, field, detail) = refused(&mut r, &twice);
    assert_eq!((status, field.as_str()), (409, "name"), "{detail}");
    // Not TOML of the schema: a typo'd field.
    let (status, _, detail) = refused(&mut r, &text.replace("watchdog_s", "watchdog"));
    assert_eq!(status, 400);
    assert!(detail.contains("watchdog"), "{detail}");
    // An image this host lacks.
    let missing = changed_plan(&text).replace(&small_sha(), &sha(0x78));
    let (status, field, detail) = refused(&mut r, &missing);
    assert_eq!((status, field.as_str()), (400, "kernel"), "{detail}");
    assert!(
        detail.starts_with("partition \"gamma\": kernel: no image with SHA-256"),
        "{detail}"
    );
    // An initrd image named as a kernel.
    let kind = changed_plan(&text).replace(&small_sha(), &sha(0x22));
    let (status, field, _) = refused(&mut r, &kind);
    assert_eq!((status, field.as_str()), (400, "kernel"));
    // Another board.
    let (status, field, _) = refused(&mut r, &text.replace("cpus = 4\n", "cpus = 8\n"));
    assert_eq!((status, field.as_str()), (400, "cpus"));
}

#[test]
fn the_management_partition_and_boot_only_fields_are_409_naming_the_field() {
    let mut r = config_router();
    let (text, _) = export(&mut r);
    let mgmt_end = text.find("\n[[partition]]\nname = \"alpha\"").unwrap();
    let (mgmt, rest) = text.split_at(mgmt_end);
    let smaller = mgmt.replace("memory = \"256MiB\"", "memory = \"128MiB\"");
    let (status, field, detail) = refused(&mut r, &format!("{smaller}{rest}"));
    assert_eq!((status, field.as_str()), (409, "memory"), "{detail}");
    assert!(detail.contains("management partition"), "{detail}");
    // mgmt missing from the configuration (another takes its role).
    let without = text.replacen("name = \"mgmt\"", "name = \"mgmt2\"", 1);
    let (status, field, detail) = refused(&mut r, &without);
    assert_eq!((status, field.as_str()), (409, "name"), "{detail}");
    // Another token.
    let token = format!("{mgmt}\ntoken = \"another-token-0123456789\"{rest}");
    let (status, field, detail) = refused(&mut r, &token);
    assert_eq!((status, field.as_str()), (409, "token"), "{detail}");
    // The PCI host bridge taken from mgmt.
    let bridge = text.replacen("pci_host_bridge = true", "pci_host_bridge = false", 1);
    let (status, field, _) = refused(&mut r, &bridge);
    assert_eq!((status, field.as_str()), (409, "pci_host_bridge"));
    // A boot-only field of another partition: beta made a management one.
    let beta = text
        .replacen("management = false", "management = true", 1)
        .replacen("restart = \"never\"\nrestart_limit = 0\n", "", 1);
    let (status, field, detail) = refused(&mut r, &beta);
    assert_eq!((status, field.as_str()), (409, "management"), "{detail}");
}

#[test]
fn a_running_partition_is_not_changed_or_deleted_409_naming_it() {
    let mut r = config_router();
    r.backend_mut()
        .set_state(BETA, PartitionState::Running)
        .unwrap();
    let (text, _) = export(&mut r);
    let (status, _, detail) = refused(&mut r, &changed_plan(&text));
    assert_eq!(status, 409);
    assert!(
        detail.starts_with("partition \"beta\": the import would change it, but it is running"),
        "{detail}"
    );
    r.backend_mut()
        .set_state(BETA, PartitionState::Stopped)
        .unwrap();
    r.backend_mut()
        .set_state(ALPHA, PartitionState::Running)
        .unwrap();
    let (status, _, detail) = refused(&mut r, &changed_plan(&text));
    assert_eq!(status, 409);
    assert!(
        detail.contains("\"alpha\": the import would delete it"),
        "{detail}"
    );
}

#[test]
fn a_step_refused_half_way_undoes_the_steps_before_it() {
    let mut r = config_router();
    let (text, tag) = export(&mut r);
    // gamma needs 64 MiB; after alpha's 256 MiB come back, leave less.
    r.backend_mut().free_ram = 0;
    let big = changed_plan(&text).replace("memory = \"64MiB\"", "memory = \"512MiB\"");
    let resp = r.handle(&put(&big, "", Some(&tag)));
    assert_eq!(resp.status, 409, "{}", self::text(&resp));
    let detail = body_json(&resp)["detail"].as_str().unwrap().to_string();
    assert!(detail.contains("\"gamma\": memory"), "{detail}");
    assert!(
        detail.contains("2 step(s) already applied were undone"),
        "{detail}"
    );
    assert_eq!(body_json(&resp)["field"], json!("memory"));
    let calls = changes(r.backend());
    assert_eq!(
        calls,
        vec![
            format!("destroy {ALPHA}"),
            format!("configure {BETA}"),
            "create gamma".to_string(),
            format!("configure {BETA}"),
            "create alpha".to_string(),
        ]
    );
    // The configuration reads as before (alpha has a new index; the export
    // is in index order, so compare as a set of partitions).
    let (after, _) = export(&mut r);
    let mut a: Vec<&str> = after.split("[[partition]]").collect();
    let mut b: Vec<&str> = text.split("[[partition]]").collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
}

// ---------------------------------------------------------------------------
// export -> parse is the identity on plans
// ---------------------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn text(&mut self, max: u64) -> String {
        const PIECES: &[&str] = &[
            "a",
            "Z",
            "0",
            " ",
            "=",
            "\"",
            "\\",
            "'",
            "\t",
            "\n",
            "\r",
            "\u{1}",
            "\u{7f}",
            "é",
            "日本",
            "#",
            "[",
            "]",
            "{",
            "}",
            ",",
            "console=ttyAMA0",
            "\\\"",
        ];
        (0..self.below(max))
            .map(|_| PIECES[self.below(PIECES.len() as u64) as usize])
            .collect()
    }
}

/// A valid host of 16 CPUs split into 1..=5 partitions (mgmt first), with
/// images 0..4 (kernels 0, 1; initrds 2, 3).
fn random_host(rng: &mut Rng) -> (HostShape, Vec<Existing>, Vec<ImageInfo>) {
    let images = vec![
        image(0, ImageKind::Kernel, 0xa0),
        image(1, ImageKind::Kernel, 0xa1),
        image(2, ImageKind::Initrd, 0xa2),
        image(3, ImageKind::Initrd, 0xa3),
    ];
    let mut cpus: Vec<u32> = (0..16).collect();
    let count = 1 + rng.below(5) as usize;
    let mut parts = Vec::new();
    let mut whole_bridge = false;
    for i in 0..count {
        let n = 1 + rng.below(3) as usize;
        let mine: Vec<u32> = (0..n)
            .filter_map(|_| {
                if cpus.is_empty() {
                    None
                } else {
                    Some(cpus.remove(rng.below(cpus.len() as u64) as usize))
                }
            })
            .collect();
        let name = if i == 0 {
            "mgmt".to_string()
        } else {
            format!("p{i}-{}", rng.below(1000))
        };
        let mut plan = PartitionPlan::new(
            name,
            mine,
            (1 + rng.below(600)) * (2 << 20),
            KernelPlan {
                image: rng.below(2) as u32,
                format: if rng.below(2) == 0 {
                    KernelFormat::LinuxImage
                } else {
                    KernelFormat::Raw
                },
            },
        );
        plan.bootargs = rng.text(12);
        plan.initrd = match rng.below(3) {
            0 => None,
            k => Some(1 + k as u32),
        };
        plan.autostart = rng.below(2) == 0;
        plan.pmu = rng.below(2) == 0;
        plan.console.input = i == 1;
        if i > 0 && !whole_bridge && rng.below(2) == 0 {
            // Each partition its own functions (device = its index).
            plan.pci = (0..=rng.below(2))
                .map(|f| pinfold_config::PciAddress {
                    segment: 0,
                    bus: 0,
                    device: i as u8,
                    function: f as u8,
                })
                .collect();
        }
        if i == 0 {
            plan.management = true;
            plan.pci_host_bridge = rng.below(2) == 0;
            whole_bridge = plan.pci_host_bridge;
            plan.token_sha256 = Some([0x5a; 32]);
            if rng.below(2) == 0 {
                plan.config_store =
                    Some(format!("http://10.0.2.2:{}/hosts/h/", rng.below(60000) + 1));
            }
        } else {
            let restart = [
                RestartMode::Never,
                RestartMode::OnCrash,
                RestartMode::Always,
            ][rng.below(3) as usize];
            plan.lifecycle = LifecyclePlan {
                restart,
                restart_limit: if restart == RestartMode::Never {
                    0
                } else {
                    rng.below(10) as u32
                },
                watchdog_s: rng.below(120) as u32,
                shutdown_timeout_s: 1 + rng.below(300) as u32,
            };
            for d in 0..rng.below(3) {
                let base = 0x1000_0000 + (i as u64) * 0x100_0000 + d * 0x10_0000;
                plan.devices.push(DevicePlan {
                    name: format!("dev{d}@x"),
                    mmio: (0..rng.below(3))
                        .map(|k| MmioRange {
                            base: base + k * 0x1_0000,
                            size: [0x1000, 0x3000, 0x1_0000][rng.below(3) as usize],
                        })
                        .collect(),
                    spis: vec![100 + (i as u32) * 20 + d as u32 * 3],
                    compatible: (rng.below(2) == 0).then(|| "arm,pl011\"x".to_string()),
                    host_node: (rng.below(2) == 0).then(|| format!("/soc/dev@{d}")),
                });
            }
        }
        parts.push(Existing {
            index: i as u32 * 3 + 1,
            state: PartitionState::Stopped,
            plan,
        });
    }
    (
        HostShape {
            cpus: 16,
            ram_bytes: 8 << 30,
        },
        parts,
        images,
    )
}

#[test]
fn export_then_parse_is_the_identity_on_generated_plans() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..300 {
        let (host, parts, images) = random_host(&mut rng);
        let text = config::export(&host, &parts, &images).expect("exports");
        let back = config::parse_toml(&text, &host, &images, Some([0x5a; 32]))
            .unwrap_or_else(|e| panic!("case {case}: {}\n{text}", e.detail));
        let want: Vec<PartitionPlan> = parts.iter().map(|p| p.plan.clone()).collect();
        assert_eq!(back, want, "case {case}:\n{text}");
        // And the diff against itself is all unchanged.
        let (diff, steps) = config::plan_diff(&parts, &back).expect("diff");
        assert!(steps.is_empty(), "case {case}");
        assert_eq!(diff.unchanged.len(), parts.len());
    }
}

type Edit = Box<dyn Fn(&mut PartitionPlan)>;

#[test]
fn first_difference_names_every_field() {
    let (_, parts, _) = random_host(&mut Rng(7));
    let base = parts[0].plan.clone();
    let mut seen = Vec::new();
    let edits: Vec<Edit> = vec![
        Box::new(|p| p.name.push('x')),
        Box::new(|p| p.cpus.push(99)),
        Box::new(|p| p.ram_size += 2 << 20),
        Box::new(|p| p.kernel.image += 1),
        Box::new(|p| {
            p.kernel.format = match p.kernel.format {
                KernelFormat::Raw => KernelFormat::LinuxImage,
                KernelFormat::LinuxImage => KernelFormat::Raw,
            }
        }),
        Box::new(|p| p.initrd = Some(9)),
        Box::new(|p| p.bootargs.push('x')),
        Box::new(|p| p.console.input = !p.console.input),
        Box::new(|p| p.autostart = !p.autostart),
        Box::new(|p| p.management = !p.management),
        Box::new(|p| p.pci_host_bridge = !p.pci_host_bridge),
        Box::new(|p| {
            p.pci.push(pinfold_config::PciAddress {
                segment: 0,
                bus: 0,
                device: 2,
                function: 0,
            })
        }),
        Box::new(|p| p.token_sha256 = None),
        Box::new(|p| p.pmu = !p.pmu),
        Box::new(|p| p.lifecycle.restart = RestartMode::Always),
        Box::new(|p| p.lifecycle.restart_limit += 1),
        Box::new(|p| p.lifecycle.watchdog_s += 1),
        Box::new(|p| p.lifecycle.shutdown_timeout_s += 1),
        Box::new(|p| p.devices.push(parts_device())),
        Box::new(|p| p.config_store = Some("http://x/".into())),
    ];
    for edit in &edits {
        let mut p = base.clone();
        edit(&mut p);
        seen.push(config::first_difference(&base, &p).expect("differs"));
    }
    assert_eq!(
        seen,
        vec![
            "name",
            "cpus",
            "memory",
            "kernel",
            "kernel_format",
            "initrd",
            "bootargs",
            "console_input",
            "autostart",
            "management",
            "pci_host_bridge",
            "pci",
            "token",
            "pmu",
            "restart",
            "restart_limit",
            "watchdog_s",
            "shutdown_timeout_s",
            "devices",
            "config_store"
        ]
    );
    assert_eq!(config::first_difference(&base, &base), None);
}

fn parts_device() -> DevicePlan {
    DevicePlan {
        name: "x".into(),
        mmio: Vec::new(),
        spis: Vec::new(),
        compatible: None,
        host_node: None,
    }
}
