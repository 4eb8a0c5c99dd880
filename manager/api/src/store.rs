//! The configuration kept across host reboots at an HTTP store (the management partition's `config_store` URL, a directory): written after every change, read back and applied at manager start.
//!
//! Hermit 0.11 has no block driver, so the manager keeps the host's
//! configuration where the boot bundle comes from. Layout under the URL:
//! `config.toml` (the export, `GET /api/v1/config`), `images/<sha256>`
//! (every image a partition names that the boot bundle does not carry) and
//! `credentials.json` (the credentials' digests, never a token:
//! [`sync_credentials`] writes it when they changed, with `If-Match`;
//! [`restore_credentials`] reads it back at start, after the
//! configuration).
//!
//! [`sync_once`] (the app's follower thread, about once a second) exports
//! the configuration; when it differs from the one last written it first
//! writes the images it names that the store lacks (`HEAD`, then `PUT` with
//! `If-None-Match: *`, the bytes read back from the hypervisor with
//! IMAGE_READ one buffer per router lock, so the API is served meanwhile),
//! then `config.toml` with `If-Match: <the ETag last written or read>` (or
//! `If-None-Match: *` when the store had none). A 412 means another writer
//! changed it: the manager does not overwrite it, stops writing, records a
//! `config` event and shows it in [`StoreStatus`] (`GET
//! /api/v1/config/store`) until it restarts.
//!
//! [`restore`] (once, at manager start): `GET config.toml`; if there is
//! one, the images it names that the hypervisor lacks are downloaded from
//! `images/<sha256>` into the hypervisor (SHA-256 checked, as a fetch),
//! then it is applied with the import code ([`Router::import_config`]);
//! then, applied or not, CONFIG_APPLIED tells the hypervisor to start the
//! autostart partitions it held at boot (a plan with a `config_store`:
//! they wait for this, at most `pinfold_hv::lifecycle::HOLD_S`), so a
//! partition deleted before the reboot never runs after it. Should a boot
//! plan partition run anyway (the hold timed out, an old hypervisor), those
//! the stored configuration changes or deletes are stopped first, and a
//! changed one that was running is started again afterwards.
//!
//! The store is trusted only as far as an import is: a stored
//! configuration is checked by the same rules, and the hypervisor's
//! isolation holds whatever it says (docs/DEPLOY.md, trust model).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pinfold_abi::{PartitionState, Transition};
use serde::Serialize;

use crate::backend::Backend;
use crate::config::IMAGE_PREFIX;
use crate::runtime::UploadSpec;
use crate::{json, Router};

/// How long a store request may take to connect and per read or write.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long restore keeps trying a store it cannot reach.
const RESTORE_WAIT: Duration = Duration::from_secs(20);
/// How long restore waits for a partition it stopped to be stopped.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// What `GET /api/v1/config/store` shows.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct StoreStatus {
    /// The store (the management partition's `config_store`), or null.
    pub url: Option<String>,
    /// The ETag of `config.toml` in the store as last read or written.
    pub etag: Option<String>,
    /// When `config.toml` was last written (RFC 3339), or null.
    pub last_write: Option<String>,
    /// What the last store operation came to, in a sentence.
    pub last_result: Option<String>,
    /// Another writer changed `config.toml`: the manager no longer writes.
    pub conflict: bool,
    /// What the restore at start did, in a sentence.
    pub restored: Option<String>,
    /// Images written to the store since the manager started.
    pub images_written: u64,
    /// The ETag of the configuration (`GET /api/v1/config`) last written.
    #[serde(skip)]
    pub synced: Option<String>,
    /// Images known to be in the store (SHA-256 hex).
    #[serde(skip)]
    pub stored_images: BTreeSet<String>,
    /// The ETag of `credentials.json` in the store as last read or written.
    #[serde(skip)]
    pub credentials_etag: Option<String>,
    /// The credentials' generation last written or read.
    #[serde(skip)]
    pub credentials_synced: Option<u64>,
}

/// A GET's answer.
pub struct Got {
    pub status: u16,
    pub etag: Option<String>,
    pub len: u64,
    pub body: Box<dyn Read + Send>,
}

/// The HTTP the store needs (a fake in tests).
pub trait StoreHttp {
    fn get(&mut self, url: &str) -> std::io::Result<Got>;
    fn head(&mut self, url: &str) -> std::io::Result<u16>;
    /// PUT `len` bytes of `body` with extra `headers`; status and ETag.
    fn put(
        &mut self,
        url: &str,
        headers: &[(&str, String)],
        len: u64,
        body: &mut dyn Read,
    ) -> std::io::Result<(u16, Option<String>)>;
}

/// [`StoreHttp`] over plain TCP, one request per connection.
pub struct TcpStore;

fn io_err(why: String) -> std::io::Error {
    std::io::Error::other(why)
}

impl TcpStore {
    fn exchange(
        &mut self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        body: Option<(u64, &mut dyn Read)>,
    ) -> std::io::Result<(u16, Option<String>, u64, BufReader<TcpStream>)> {
        let parsed = crate::fetch::parse_url(url)
            .ok_or_else(|| io_err(format!("{url:?} is not an http:// URL")))?;
        let addr = parsed
            .authority
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io_err(format!("cannot resolve {}", parsed.authority)))?;
        let stream = TcpStream::connect_timeout(&addr, STORE_TIMEOUT)?;
        // Hermit 0.11 refuses socket timeouts (InvalidInput), as fetch.rs
        // found: best effort.
        let _ = stream.set_read_timeout(Some(STORE_TIMEOUT));
        let _ = stream.set_write_timeout(Some(STORE_TIMEOUT));
        let mut head = format!(
            "{method} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: pinfold-manager\r\nConnection: close\r\n",
            parsed.target, parsed.authority
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some((len, _)) = &body {
            head.push_str(&format!(
                "Content-Type: application/octet-stream\r\nContent-Length: {len}\r\n"
            ));
        }
        head.push_str("\r\n");
        let mut w = &stream;
        w.write_all(head.as_bytes())?;
        if let Some((len, reader)) = body {
            let copied = std::io::copy(&mut reader.take(len), &mut w)?;
            if copied != len {
                return Err(io_err(format!(
                    "the body ended after {copied} of {len} bytes"
                )));
            }
        }
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let status = line
            .strip_prefix("HTTP/1.")
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| io_err(format!("not an HTTP response: {:?}", line.trim_end())))?;
        let (mut etag, mut len) = (None, 0);
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                break;
            }
            if let Some((k, v)) = line.trim_end().split_once(':') {
                if k.trim().eq_ignore_ascii_case("etag") {
                    etag = Some(v.trim().to_string());
                } else if k.trim().eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        Ok((status, etag, len, reader))
    }
}

impl StoreHttp for TcpStore {
    fn get(&mut self, url: &str) -> std::io::Result<Got> {
        let (status, etag, len, reader) = self.exchange("GET", url, &[], None)?;
        Ok(Got {
            status,
            etag,
            len,
            body: Box::new(reader.take(len)),
        })
    }

    fn head(&mut self, url: &str) -> std::io::Result<u16> {
        self.exchange("HEAD", url, &[], None).map(|(s, ..)| s)
    }

    fn put(
        &mut self,
        url: &str,
        headers: &[(&str, String)],
        len: u64,
        body: &mut dyn Read,
    ) -> std::io::Result<(u16, Option<String>)> {
        self.exchange("PUT", url, headers, Some((len, body)))
            .map(|(s, e, ..)| (s, e))
    }
}

/// An image's bytes read back from the hypervisor, one IMAGE_READ buffer
/// per router lock.
struct ImageReader<'a, B: Backend> {
    router: &'a Mutex<Router<B>>,
    id: u32,
    offset: u64,
    buf: Vec<u8>,
    pos: usize,
    filled: usize,
}

impl<B: Backend> Read for ImageReader<'_, B> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.filled {
            let mut r = self.router.lock().unwrap_or_else(|p| p.into_inner());
            let n = r
                .backend_mut()
                .image_read(self.id, self.offset, &mut self.buf)
                .map_err(|e| io_err(format!("IMAGE_READ {}: {e:?}", self.id)))?;
            drop(r);
            self.offset += n as u64;
            self.pos = 0;
            self.filled = n;
            if n == 0 {
                return Ok(0);
            }
        }
        let n = out.len().min(self.filled - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// What one [`sync_once`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Synced {
    /// No store, a conflict, or nothing changed.
    Nothing,
    /// `config.toml` written (this many images first).
    Written { images: usize },
    /// Another writer: not overwritten.
    Conflict,
    /// The store could not be reached or refused (retried next time).
    Failed(String),
}

fn join(base: &str, rest: &str) -> String {
    format!("{}{rest}", base)
}

/// Writes `credentials.json` (the credentials' digests, never a token:
/// `auth::Credentials::export`) if they changed since last time, with
/// `If-Match` like `config.toml`; a 412 stops all writes the same way.
pub fn sync_credentials<B: Backend, H: StoreHttp>(
    router: &Mutex<Router<B>>,
    http: &mut H,
) -> Synced {
    let (target, text, generation, condition) = {
        let r = router.lock().unwrap_or_else(|p| p.into_inner());
        let Some(url) = r.store.url.clone() else {
            return Synced::Nothing;
        };
        let generation = r.credentials.generation();
        // Nothing made, rotated or revoked yet: nothing to keep (the
        // hypervisor's boot credential is its own).
        let untouched = generation == 0 && r.store.credentials_synced.is_none();
        if untouched || r.store.conflict || r.store.credentials_synced == Some(generation) {
            return Synced::Nothing;
        }
        let condition = match &r.store.credentials_etag {
            Some(etag) => ("If-Match", etag.clone()),
            None => ("If-None-Match", "*".to_string()),
        };
        (
            join(&url, "credentials.json"),
            r.credentials.export(),
            generation,
            condition,
        )
    };
    let result = http.put(
        &target,
        &[(condition.0, condition.1.clone())],
        text.len() as u64,
        &mut text.as_bytes(),
    );
    let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
    match result {
        Ok((200..=299, etag)) => {
            r.store.credentials_etag = etag;
            r.store.credentials_synced = Some(generation);
            r.store.last_result = Some(format!("credentials.json written ({} bytes)", text.len()));
            Synced::Written { images: 0 }
        }
        Ok((status, _)) => put_refused(&mut r, &target, &condition, Ok(status)),
        Err(e) => put_refused(&mut r, &target, &condition, Err(e)),
    }
}

/// At manager start, after the configuration: the credentials kept in
/// `credentials.json`, if any, replace the boot ones (so a token made,
/// rotated or revoked through the API survives a manager restart and a
/// host reboot). A sentence saying what happened.
pub fn restore_credentials<B: Backend, H: StoreHttp>(
    router: &Mutex<Router<B>>,
    http: &mut H,
) -> String {
    let Some(url) = router
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .store
        .url
        .clone()
    else {
        return "no configuration store".into();
    };
    let target = join(&url, "credentials.json");
    let got = match http.get(&target) {
        Ok(got) => got,
        Err(e) => return format!("GET {target}: {e}; the boot credential stands"),
    };
    if got.status == 404 {
        return format!("{target}: nothing stored yet; the boot credential stands");
    }
    if got.status != 200 {
        return format!(
            "GET {target} answered {}; the boot credential stands",
            got.status
        );
    }
    let mut text = String::new();
    if let Err(e) = got.body.take(64 * 1024).read_to_string(&mut text) {
        return format!("GET {target}: {e}; the boot credential stands");
    }
    let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
    r.store.credentials_etag = got.etag;
    let sentence = match r.credentials.import(&text) {
        Ok(()) => format!(
            "{} credential(s) restored from {target}",
            r.credentials.list().len()
        ),
        Err(e) => format!("{e}; not restored, the boot credential stands"),
    };
    let generation = r.credentials.generation();
    r.store.credentials_synced = Some(generation);
    r.record("config", None, &format!("configuration store: {sentence}"));
    sentence
}
/// A conditional PUT of `target` that did not succeed: a 412 is another
/// writer's change (no more writes until the manager restarts, recorded as
/// an event), anything else a failure kept as the store's last result.
fn put_refused<B: Backend>(
    r: &mut Router<B>,
    target: &str,
    condition: &(&str, String),
    outcome: std::io::Result<u16>,
) -> Synced {
    let why = match outcome {
        Ok(412) => {
            let why = format!(
                "{target}: another writer changed it ({} {} did not hold); not overwritten, no \
                 more writes until the manager restarts",
                condition.0, condition.1
            );
            r.store.conflict = true;
            r.store.last_result = Some(why.clone());
            r.record("config", None, &format!("configuration store: {why}"));
            return Synced::Conflict;
        }
        Ok(status) => format!("PUT {target} answered {status}"),
        Err(e) => format!("PUT {target}: {e}"),
    };
    r.store.last_result = Some(why.clone());
    Synced::Failed(why)
}

/// Writes the configuration to the store if it changed since last time
/// (the credentials first: [`sync_credentials`]).
pub fn sync_once<B: Backend, H: StoreHttp>(router: &Mutex<Router<B>>, http: &mut H) -> Synced {
    match sync_credentials(router, http) {
        Synced::Nothing | Synced::Written { .. } => {}
        other => return other,
    }
    // Under the lock: what to write.
    let (url, text, tag, images, condition) = {
        let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
        let Some(url) = r.store.url.clone() else {
            return Synced::Nothing;
        };
        if r.store.conflict {
            return Synced::Nothing;
        }
        let Ok((text, tag)) = r.export_config() else {
            return Synced::Nothing;
        };
        if r.store.synced.as_deref() == Some(tag.as_str()) {
            return Synced::Nothing;
        }
        let images = r.store_images_needed(&text);
        let condition = match &r.store.etag {
            Some(etag) => ("If-Match", etag.clone()),
            None => ("If-None-Match", "*".to_string()),
        };
        (url, text, tag, images, condition)
    };
    let fail = |router: &Mutex<Router<B>>, why: String| {
        let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
        r.store.last_result = Some(why.clone());
        Synced::Failed(why)
    };
    let mut written = 0;
    for (id, sha, size) in images {
        let target = join(&url, &format!("images/{sha}"));
        match http.head(&target) {
            Ok(200) => {}
            Ok(_) => {
                let mut reader = ImageReader {
                    router,
                    id,
                    offset: 0,
                    buf: vec![0; pinfold_abi::MAX_BUFFER_LEN as usize],
                    pos: 0,
                    filled: 0,
                };
                match http.put(
                    &target,
                    &[("If-None-Match", "*".to_string())],
                    size,
                    &mut reader,
                ) {
                    // 412: it is there already (another writer, same bytes).
                    Ok((200..=299 | 412, _)) => written += 1,
                    Ok((status, _)) => {
                        return fail(router, format!("PUT {target} answered {status}"))
                    }
                    Err(e) => return fail(router, format!("PUT {target}: {e}")),
                }
            }
            Err(e) => return fail(router, format!("HEAD {target}: {e}")),
        }
        let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
        r.store.stored_images.insert(sha);
    }
    let target = join(&url, "config.toml");
    let result = http.put(
        &target,
        &[(condition.0, condition.1.clone())],
        text.len() as u64,
        &mut text.as_bytes(),
    );
    let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
    r.store.images_written += written as u64;
    match result {
        Ok((200..=299, etag)) => {
            r.store.etag = etag;
            r.store.synced = Some(tag);
            r.store.last_write = r
                .backend_mut()
                .wall_clock_ms()
                .ok()
                .map(crate::time::rfc3339);
            r.store.last_result = Some(format!(
                "config.toml written ({} bytes, {written} image(s) first)",
                text.len()
            ));
            Synced::Written { images: written }
        }
        Ok((status, _)) => put_refused(&mut r, &target, &condition, Ok(status)),
        Err(e) => put_refused(&mut r, &target, &condition, Err(e)),
    }
}

/// The `image:<sha256>` references of a plan TOML: (kind, sha256 hex).
fn image_refs(text: &str) -> Vec<(json::ImageKind, String)> {
    let Ok(config) = pinfold_config::parse(text) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in &config.partitions {
        let mut add = |kind, path: &std::path::Path| {
            if let Some(hex) = path.to_string_lossy().strip_prefix(IMAGE_PREFIX) {
                out.push((kind, hex.to_ascii_lowercase()));
            }
        };
        add(json::ImageKind::Kernel, &p.kernel);
        if let Some(initrd) = &p.initrd {
            add(json::ImageKind::Initrd, initrd);
        }
    }
    out
}

impl<B: Backend> Router<B> {
    /// Whether the API speaks HTTPS: the management partition's
    /// `api_tls` (true unless its plan says false; true too when the plan
    /// cannot be read, so an error never means plain HTTP).
    pub fn api_tls(&mut self) -> bool {
        let Ok(parts) = self.backend.partitions() else {
            return true;
        };
        let Some(mgmt) = parts.iter().find(|p| p.management) else {
            return true;
        };
        self.backend
            .detail(mgmt.index)
            .map_or(true, |d| d.plan.api_tls)
    }

    /// Reads the management partition's `config_store` from its plan entry
    /// (PARTITION_INFO) into [`StoreStatus::url`]; the URL, if any.
    pub fn init_store(&mut self) -> Option<String> {
        let parts = self.backend.partitions().ok()?;
        let mgmt = parts.iter().find(|p| p.management)?;
        let url = self.backend.detail(mgmt.index).ok()?.plan.config_store;
        self.store.url = url.clone();
        url
    }

    /// The images `text` names that the boot bundle does not carry and the
    /// store is not known to have: (id, sha256 hex, size).
    fn store_images_needed(&mut self, text: &str) -> Vec<(u32, String, u64)> {
        let images = self.hv_images().unwrap_or_default();
        let mut out: Vec<(u32, String, u64)> = Vec::new();
        for (_, sha) in image_refs(text) {
            if self.store.stored_images.contains(&sha) || out.iter().any(|(_, s, _)| *s == sha) {
                continue;
            }
            let found = images
                .iter()
                .find(|i| i.sealed && i.sha256.map(|d| json::hex(&d)) == Some(sha.clone()));
            if let Some(i) = found {
                if !i.boot {
                    out.push((i.id, sha, i.size));
                }
            }
        }
        out
    }
}

/// Stops `names` (those running) and waits until each is stopped; the
/// ones that were running.
fn stop_all<B: Backend>(router: &Mutex<Router<B>>, names: &[String]) -> Vec<String> {
    let mut stopped = Vec::new();
    {
        let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
        let Ok(parts) = r.backend_mut().partitions() else {
            return stopped;
        };
        for p in parts {
            if names.contains(&p.name) && !p.state.allows(Transition::Configure) {
                if p.state != PartitionState::Stopping {
                    let _ = r.backend_mut().stop(p.index);
                }
                stopped.push(p.name.clone());
            }
        }
    }
    let deadline = Instant::now() + STOP_WAIT;
    while Instant::now() < deadline {
        let all_stopped = {
            let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
            r.backend_mut().partitions().is_ok_and(|parts| {
                parts
                    .iter()
                    .filter(|p| stopped.contains(&p.name))
                    .all(|p| p.state.allows(Transition::Configure))
            })
        };
        if all_stopped {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stopped
}

/// At manager start: reads `config.toml` from the store and applies it
/// (its images downloaded first). A sentence saying what happened.
pub fn restore<B: Backend, H: StoreHttp>(router: &Mutex<Router<B>>, http: &mut H) -> String {
    let started = Instant::now();
    let result = restore_inner(router, http);
    let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
    let sentence = match result {
        Ok(s) => s,
        Err(s) => s,
    };
    let sentence = format!("{sentence} ({} ms)", started.elapsed().as_millis());
    // Applied or not, the partitions the hypervisor held at boot for this
    // may start now (a store that failed does not keep the host dark).
    let _ = r.backend_mut().config_applied();
    if r.store.url.is_some() {
        r.record("config", None, &format!("configuration store: {sentence}"));
        r.store.restored = Some(sentence.clone());
    }
    sentence
}

fn restore_inner<B: Backend, H: StoreHttp>(
    router: &Mutex<Router<B>>,
    http: &mut H,
) -> Result<String, String> {
    let Some(url) = router
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .store
        .url
        .clone()
    else {
        return Ok("no configuration store".into());
    };
    let target = join(&url, "config.toml");
    // The network may not be up yet when the manager starts (DHCP): a
    // store that cannot be reached is asked again for RESTORE_WAIT.
    let deadline = Instant::now() + RESTORE_WAIT;
    let got = loop {
        match http.get(&target) {
            Ok(got) => break got,
            Err(e) if Instant::now() >= deadline => return Err(format!("GET {target}: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    };
    if got.status == 404 {
        return Ok(format!(
            "{target}: nothing stored yet; the boot plan stands"
        ));
    }
    if got.status != 200 {
        return Err(format!("GET {target} answered {}", got.status));
    }
    let mut text = String::new();
    got.body
        .take(crate::config::CONFIG_MAX_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("GET {target}: {e}"))?;
    router.lock().unwrap_or_else(|p| p.into_inner()).store.etag = got.etag.clone();
    // The images it names that the hypervisor lacks.
    let have: Vec<String> = {
        let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
        r.hv_images()
            .unwrap_or_default()
            .iter()
            .filter(|i| i.sealed)
            .filter_map(|i| i.sha256.map(|d| json::hex(&d)))
            .collect()
    };
    let mut fetched = 0;
    let mut done: Vec<String> = Vec::new();
    for (kind, sha) in image_refs(&text) {
        if have.contains(&sha) || done.contains(&sha) {
            continue;
        }
        let image_url = join(&url, &format!("images/{sha}"));
        let got = http
            .get(&image_url)
            .map_err(|e| format!("GET {image_url}: {e}"))?;
        if got.status != 200 {
            return Err(format!(
                "GET {image_url} answered {}: the stored configuration names an image the store \
                 lacks; not applied",
                got.status
            ));
        }
        let spec = UploadSpec {
            kind,
            name: Some(format!("store-{}", &sha[..12.min(sha.len())])),
            sha256: json::parse_sha256(&sha),
            size: got.len,
        };
        let mut body = got.body;
        crate::runtime::upload_from(router, &spec, &mut body)
            .map_err(|e| format!("{image_url}: {}", e.detail))?;
        fetched += 1;
        done.push(sha.clone());
        router
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .store
            .stored_images
            .insert(sha);
    }
    // Stop what the stored configuration changes or deletes (a dry run
    // tells which), apply it, start again what was running and changed.
    let diff = {
        let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
        r.preview_import(&text)
            .map_err(|e| format!("not applied: {}", e.detail))?
    };
    let mut touched = diff.changed.clone();
    touched.extend(diff.deleted.iter().cloned());
    let was_running = stop_all(router, &touched);
    let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
    let (diff, _) = r
        .import_config(&text, None, false)
        .map_err(|e| format!("not applied: {}", e.detail))?;
    for name in diff.changed.iter().filter(|n| was_running.contains(n)) {
        if let Ok(p) = r.lookup(name) {
            let _ = r.backend_mut().start(p.index);
        }
    }
    Ok(format!(
        "restored {target}: created [{}], changed [{}], deleted [{}], unchanged [{}]; {fetched} \
         image(s) fetched",
        diff.created.join(", "),
        diff.changed.join(", "),
        diff.deleted.join(", "),
        diff.unchanged.join(", ")
    ))
}
