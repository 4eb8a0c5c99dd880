//! The REST router (`pinfold-manager-api`) on arbitrary requests over a
//! fake hypervisor that never fails: a sequence of requests (method, path,
//! headers, body, and which credential they carry: none, a wrong one, the
//! viewer's, the operator's, or one the run made) goes through
//! `Router::handle`. Never panics; never a 5xx (the backend gave no reason
//! for one); auth is never bypassed: a request without an operator's valid
//! token never reaches a backend call that changes anything, and a 2xx on
//! a route that needs a role came with a token of that role (tracked by a
//! model of the credentials the run made, rotated and revoked).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinfold_abi::{
    AbiError, AbiVersion, CallError, CpuOwner, Event, HostInfo, ImageInfo, ImageKind,
    PartitionDetail, PartitionPlan, PartitionState, PartitionSummary, Resources,
};
use pinfold_manager_api::auth::Role;
use pinfold_manager_api::{Backend, ConsoleRead, HvError, Request, Router, StaticFile};

const OPERATOR: &str = "operator-token-0123456789";
static FILES: &[StaticFile] = &[("/index.html", "text/html", b"<html></html>")];

struct Fake {
    parts: Vec<PartitionSummary>,
    /// Calls that change something, since the last request.
    mutations: Vec<&'static str>,
    images: Vec<ImageInfo>,
}

fn summary(index: u32, name: &str, management: bool) -> PartitionSummary {
    PartitionSummary {
        index,
        name: name.to_string(),
        state: PartitionState::Running,
        cpus: vec![index],
        ram_bytes: 64 << 20,
        uptime_ns: 1_000_000_000,
        boot_count: 1,
        management,
        state_since_ms: None,
        restarts: 0,
        last_crash: None,
    }
}

impl Fake {
    fn index(&self, index: u32) -> Result<usize, CallError> {
        self.parts
            .iter()
            .position(|p| p.index == index)
            .ok_or(CallError::Refused(AbiError::NotFound))
    }
    fn change(&mut self, what: &'static str, index: u32) -> Result<(), CallError> {
        self.index(index)?;
        self.mutations.push(what);
        Ok(())
    }
}

impl Backend for Fake {
    fn abi_version(&mut self) -> Result<AbiVersion, CallError> {
        Ok(pinfold_abi::ABI_VERSION)
    }
    fn host_info(&mut self) -> Result<HostInfo, CallError> {
        Ok(HostInfo {
            version: "0.1.0".into(),
            gic_version: 3,
            cpu_count: 4,
            ram_bytes: 1 << 30,
            uptime_ns: 5,
            cpus: (0..4)
                .map(|cpu| CpuOwner {
                    cpu,
                    partition: (cpu < 3).then_some(cpu),
                })
                .collect(),
        })
    }
    fn partitions(&mut self) -> Result<Vec<PartitionSummary>, CallError> {
        Ok(self.parts.clone())
    }
    fn detail(&mut self, index: u32) -> Result<PartitionDetail, CallError> {
        let s = self.parts[self.index(index)?].clone();
        let mut plan = PartitionPlan::new(
            s.name.clone(),
            s.cpus.clone(),
            s.ram_bytes,
            pinfold_config::KernelPlan {
                image: 0,
                format: pinfold_config::KernelFormat::LinuxImage,
            },
        );
        plan.management = s.management;
        Ok(PartitionDetail {
            summary: s,
            faults: 0,
            vcpus: Vec::new(),
            plan,
            pci: Vec::new(),
        })
    }
    fn start(&mut self, index: u32) -> Result<(), CallError> {
        self.change("start", index)
    }
    fn stop(&mut self, index: u32) -> Result<(), CallError> {
        self.change("stop", index)
    }
    fn restart(&mut self, index: u32) -> Result<(), CallError> {
        self.change("restart", index)
    }
    fn shutdown(&mut self, index: u32) -> Result<(), CallError> {
        self.change("shutdown", index)
    }
    fn console_read(
        &mut self,
        index: u32,
        offset: u64,
        out: &mut [u8],
    ) -> Result<ConsoleRead, CallError> {
        self.index(index)?;
        let text = b"login: ";
        let start = offset.min(text.len() as u64) as usize;
        let len = (text.len() - start).min(out.len());
        out[..len].copy_from_slice(&text[start..start + len]);
        Ok(ConsoleRead {
            len,
            next: (start + len) as u64,
            dropped: 0,
        })
    }
    fn console_write(&mut self, index: u32, bytes: &[u8]) -> Result<usize, CallError> {
        self.change("console_write", index)?;
        Ok(bytes.len())
    }
    fn pause(&mut self, _d: std::time::Duration) {}
    fn wall_clock_ms(&mut self) -> Result<u64, CallError> {
        Ok(1_796_132_700_250)
    }
    fn image_create(&mut self, kind: ImageKind, size: u64) -> Result<u32, CallError> {
        self.mutations.push("image_create");
        if size == 0 || size > 1 << 20 {
            return Err(CallError::Refused(AbiError::InvalidParameters));
        }
        let id = self.images.iter().map(|i| i.id + 1).max().unwrap_or(1);
        self.images.push(ImageInfo {
            id,
            kind,
            size,
            written: 0,
            sealed: false,
            sha256: None,
            used_by: Vec::new(),
            boot: false,
        });
        Ok(id)
    }
    fn image_write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<usize, CallError> {
        self.mutations.push("image_write");
        let img = self
            .images
            .iter_mut()
            .find(|i| i.id == id && !i.sealed)
            .ok_or(CallError::Refused(AbiError::NotFound))?;
        let end = offset
            .checked_add(bytes.len() as u64)
            .filter(|&e| e <= img.size)
            .ok_or(CallError::Refused(AbiError::InvalidParameters))?;
        img.written = img.written.max(end);
        Ok(bytes.len())
    }
    fn image_seal(&mut self, id: u32, _sha256: Option<[u8; 32]>) -> Result<(), HvError> {
        self.mutations.push("image_seal");
        let img = self
            .images
            .iter_mut()
            .find(|i| i.id == id)
            .ok_or(CallError::Refused(AbiError::NotFound))?;
        img.sealed = true;
        Ok(())
    }
    fn image_delete(&mut self, id: u32) -> Result<(), CallError> {
        self.mutations.push("image_delete");
        let at = self
            .images
            .iter()
            .position(|i| i.id == id)
            .ok_or(CallError::Refused(AbiError::NotFound))?;
        self.images.remove(at);
        Ok(())
    }
    fn image_read(&mut self, _id: u32, _offset: u64, _out: &mut [u8]) -> Result<usize, CallError> {
        Ok(0)
    }
    fn images(&mut self) -> Result<Vec<ImageInfo>, CallError> {
        Ok(self.images.clone())
    }
    fn create(&mut self, plan: &PartitionPlan) -> Result<u32, HvError> {
        self.mutations.push("create");
        let index = 10 + self.parts.len() as u32;
        if self.parts.len() >= 8 || self.parts.iter().any(|p| p.name == plan.name) {
            return Err(CallError::Refused(AbiError::Conflict).into());
        }
        let mut s = summary(index, &plan.name, false);
        s.state = PartitionState::Stopped;
        self.parts.push(s);
        Ok(index)
    }
    fn configure(&mut self, index: u32, _plan: &PartitionPlan) -> Result<(), HvError> {
        self.change("configure", index)?;
        Ok(())
    }
    fn destroy(&mut self, index: u32) -> Result<(), CallError> {
        let at = self.index(index)?;
        self.mutations.push("destroy");
        self.parts.remove(at);
        Ok(())
    }
    fn resources(&mut self) -> Result<Resources, CallError> {
        Ok(Resources {
            cpus: Vec::new(),
            ram: Vec::new(),
            largest_free: 256 << 20,
            images_bytes: 0,
            devices: Vec::new(),
        })
    }
    fn events(&mut self, seq: u64) -> Result<(Vec<Event>, u64, u64), CallError> {
        Ok((Vec::new(), seq, 0))
    }
    fn config_applied(&mut self) -> Result<(), CallError> {
        self.mutations.push("config_applied");
        Ok(())
    }
}

/// A credential the model knows: its token, id and role, and whether it
/// still works.
struct Known {
    token: String,
    id: String,
    role: Role,
    valid: bool,
}

const METHODS: [&str; 8] = [
    "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "get",
];
const PATHS: [&str; 16] = [
    "/api/v1/partitions",
    "/api/v1/partitions/alpha",
    "/api/v1/partitions/alpha/start",
    "/api/v1/partitions/alpha/stop",
    "/api/v1/partitions/mgmt/restart",
    "/api/v1/partitions/alpha/console",
    "/api/v1/images",
    "/api/v1/images/1",
    "/api/v1/config",
    "/api/v1/auth/credentials",
    "/api/v1/auth/credentials/c1/rotate",
    "/api/v1/auth/credentials/boot",
    "/api/v1/events",
    "/metrics",
    "/api/v1/host",
    "/api/v1/resources",
];

/// What a route needs, independently of the router's own table: reads of
/// the API need a viewer (credentials an operator), mutations an operator.
fn needed(method: &str, path: &str) -> Option<Role> {
    let path = path.split('?').next().unwrap_or("");
    let api = path.starts_with("/api/") || path == "/metrics" || path.starts_with("/metrics/");
    let read = method == "GET" || method == "HEAD";
    if !read {
        return Some(Role::Operator);
    }
    if !api {
        return None;
    }
    let open = ["/api/v1/host", "/api/v1/openapi.json"];
    if open.iter().any(|o| path == *o || path == format!("{o}/")) {
        return None;
    }
    if path.starts_with("/api/v1/auth/credentials") {
        return Some(Role::Operator);
    }
    Some(Role::Viewer)
}

fuzz_target!(|data: &[u8]| {
    let mut router = Router::new(
        Fake {
            parts: vec![
                summary(0, "mgmt", true),
                summary(1, "alpha", false),
                summary(2, "beta", false),
            ],
            mutations: Vec::new(),
            // The boot bundle's kernel, which every partition boots (a
            // real hypervisor always has it).
            images: vec![ImageInfo {
                id: 0,
                kind: ImageKind::Kernel,
                size: 64,
                written: 64,
                sealed: true,
                sha256: Some([0x11; 32]),
                used_by: vec![0, 1, 2],
                boot: true,
            }],
        },
        Some(pinfold_manager_api::token_digest(OPERATOR.as_bytes())),
        FILES,
    );
    router.seed_credentials([7; 32]);
    let (viewer, viewer_token) = router
        .credentials
        .create(Role::Viewer, "viewer", None)
        .expect("a viewer");
    let mut known = vec![
        Known {
            token: OPERATOR.into(),
            id: "boot".into(),
            role: Role::Operator,
            valid: true,
        },
        Known {
            token: viewer_token,
            id: viewer.id.clone(),
            role: Role::Viewer,
            valid: true,
        },
    ];

    // Requests are separated by 0xff; in each, byte 0 picks the method,
    // byte 1 the path (a fuzzed one past the table), byte 2 the credential,
    // then NUL-separated: path (when fuzzed), header lines, body.
    for record in data.split(|&b| b == 0xff).take(16) {
        if record.len() < 3 {
            continue;
        }
        let method = match METHODS.get(usize::from(record[0] % 10)) {
            Some(m) => m.to_string(),
            None => String::from_utf8_lossy(&record[3..record.len().min(10)]).into_owned(),
        };
        let mut fields = record[3..].split(|&b| b == 0);
        let path = match PATHS.get(usize::from(record[1] % 24)) {
            Some(p) => {
                let suffix = fields.next().unwrap_or(b"");
                format!(
                    "{p}{}",
                    String::from_utf8_lossy(&suffix[..suffix.len().min(2)])
                )
                .replace(|c: char| !c.is_ascii_graphic(), "")
            }
            None => String::from_utf8_lossy(fields.next().unwrap_or(b"/")).into_owned(),
        };
        let mut headers: Vec<(String, String)> = vec![("Host".into(), "127.0.0.1:8080".into())];
        let header_block = fields.next().unwrap_or(b"");
        for line in header_block.split(|&b| b == b'\n').take(8) {
            let line = String::from_utf8_lossy(line);
            if let Some((k, v)) = line.split_once(':') {
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        let body: Vec<u8> = fields.collect::<Vec<_>>().join(&0u8);
        let cred = record[2] % 8;
        let presented: Option<usize> = match cred {
            0 | 1 => None,
            2 => {
                headers.push(("Authorization".into(), "Bearer wrong-token".into()));
                None
            }
            n => {
                let k = usize::from(n - 3) % known.len();
                headers.push(("Authorization".into(), format!("Bearer {}", known[k].token)));
                Some(k)
            }
        };
        // The role the request really carries (a fuzzed Authorization
        // header may carry a token too: it can only be a wrong one, since
        // the fuzzer does not know the tokens).
        let role = presented.filter(|&k| known[k].valid).map(|k| known[k].role);
        let req = Request {
            method: method.clone(),
            path: path.clone(),
            headers,
            body,
            // One of 32 client addresses (the throttle counts per address).
            peer: Some(std::net::IpAddr::from([10, 0, 0, record[2] >> 3])),
        };
        router.backend_mut().mutations.clear();
        let resp = router.handle(&req);
        assert!(
            resp.status < 500,
            "{} {} {method} {path:?} with {role:?}: {}",
            resp.status,
            resp.content_type,
            String::from_utf8_lossy(&resp.body)
        );
        assert!(resp.status >= 200, "status {}", resp.status);
        let mutations = std::mem::take(&mut router.backend_mut().mutations);
        if role != Some(Role::Operator) {
            assert!(
                mutations.is_empty(),
                "{method} {path:?} with {role:?} reached {mutations:?} ({})",
                resp.status
            );
        }
        if (200..300).contains(&resp.status) {
            if let Some(need) = needed(&method, &path) {
                assert!(
                    role.is_some_and(|r| r >= need),
                    "{method} {path:?} answered {} with {role:?}, needs {need:?}",
                    resp.status
                );
            }
            // Keep the model: made, rotated and revoked credentials.
            let p = path.split('?').next().unwrap_or("").trim_end_matches('/');
            let value: serde_json::Value = serde_json::from_slice(&resp.body).unwrap_or_default();
            let token = value["token"].as_str().map(str::to_string);
            let id = value["id"].as_str().map(str::to_string);
            if let (Some(token), Some(id)) = (token, id.clone()) {
                for k in known.iter_mut().filter(|k| k.id == id) {
                    k.valid = false;
                }
                let role = Role::parse(value["role"].as_str().unwrap_or("")).expect("a role");
                known.push(Known {
                    token,
                    id,
                    role,
                    valid: true,
                });
            } else if method == "DELETE" && p.starts_with("/api/v1/auth/credentials/") {
                let id = id.expect("a revoke names the id");
                for k in known.iter_mut().filter(|k| k.id == id) {
                    k.valid = false;
                }
            }
        }
        // And what the router says about each known token agrees.
        for k in &known {
            assert_eq!(
                router.credentials.check(&k.token).is_some(),
                k.valid,
                "credential {} ({:?})",
                k.id,
                k.role
            );
        }
    }
});
