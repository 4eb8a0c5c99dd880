//! Host tests of the configuration store: what is written after a change and in which order (images first, `If-None-Match: *`, then `If-Match` with the last ETag), a 412 from another writer, and the restore at start through a fake store.

use super::config_tests::{changed_plan, config_router, export, put, small_digest, small_sha};
use super::*;
use crate::store::{self, Got, StoreHttp, Synced};
use sha2::Digest;
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Mutex;

const URL: &str = "http://10.0.2.2:18402/hosts/qemu/";

/// An in-memory store with the xtask store's rules: strong ETags (the
/// quoted SHA-256), `If-Match`, `If-None-Match: *`, 412.
#[derive(Default)]
struct FakeStore {
    files: BTreeMap<String, Vec<u8>>,
    /// "METHOD url [header=value ...]" per request.
    log: Vec<String>,
    /// GETs that fail to connect before the store answers (a network
    /// not up yet).
    unreachable_gets: usize,
}

fn tag(bytes: &[u8]) -> String {
    format!("\"{}\"", json::hex(&sha2::Sha256::digest(bytes)))
}

impl StoreHttp for FakeStore {
    fn get(&mut self, url: &str) -> std::io::Result<Got> {
        self.log.push(format!("GET {url}"));
        if self.unreachable_gets > 0 {
            self.unreachable_gets -= 1;
            return Err(std::io::Error::other("connection refused"));
        }
        Ok(match self.files.get(url) {
            Some(bytes) => Got {
                status: 200,
                etag: Some(tag(bytes)),
                len: bytes.len() as u64,
                body: Box::new(std::io::Cursor::new(bytes.clone())),
            },
            None => Got {
                status: 404,
                etag: None,
                len: 0,
                body: Box::new(std::io::empty()),
            },
        })
    }

    fn head(&mut self, url: &str) -> std::io::Result<u16> {
        self.log.push(format!("HEAD {url}"));
        Ok(if self.files.contains_key(url) {
            200
        } else {
            404
        })
    }

    fn put(
        &mut self,
        url: &str,
        headers: &[(&str, String)],
        len: u64,
        body: &mut dyn std::io::Read,
    ) -> std::io::Result<(u16, Option<String>)> {
        let h: Vec<String> = headers.iter().map(|(k, v)| format!("{k}={v}")).collect();
        self.log.push(format!("PUT {url} {}", h.join(" ")));
        let mut bytes = Vec::new();
        body.take(len).read_to_end(&mut bytes)?;
        let current = self.files.get(url).map(|b| tag(b));
        for (k, v) in headers {
            let ok = match *k {
                "If-Match" => current.as_deref() == Some(v.as_str()),
                "If-None-Match" => current.is_none(),
                _ => true,
            };
            if !ok {
                return Ok((412, current));
            }
        }
        let t = tag(&bytes);
        let status = if current.is_some() { 204 } else { 201 };
        self.files.insert(url.to_string(), bytes);
        Ok((status, Some(t)))
    }
}

fn shared(mut r: Router<FakeBackend>) -> Mutex<Router<FakeBackend>> {
    let mgmt = r.backend().plans.get(&MGMT).cloned().unwrap();
    let mut with_store = mgmt;
    with_store.config_store = Some(URL.to_string());
    r.backend_mut().plans.insert(MGMT, with_store);
    assert_eq!(r.init_store().as_deref(), Some(URL));
    Mutex::new(r)
}

fn config_url() -> String {
    format!("{URL}config.toml")
}

#[test]
fn the_api_speaks_https_unless_the_management_plan_says_api_tls_false() {
    let mut r = config_router();
    assert!(r.api_tls());
    let mut plain = r.backend().plans.get(&MGMT).cloned().unwrap();
    plain.api_tls = false;
    r.backend_mut().plans.insert(MGMT, plain);
    assert!(!r.api_tls());
    // A plan that cannot be read never means plain HTTP.
    r.backend_mut().plans.clear();
    assert!(r.api_tls());
}

#[test]
fn a_change_is_written_images_first_then_config_toml_with_if_match() {
    let router = shared(config_router());
    let mut fake = FakeStore::default();
    // First: nothing stored yet, so If-None-Match: *.
    assert_eq!(
        store::sync_once(&router, &mut fake),
        Synced::Written { images: 0 }
    );
    assert_eq!(
        fake.log,
        vec![format!("PUT {} If-None-Match=*", config_url())]
    );
    let first = tag(&fake.files[&config_url()]);
    // Unchanged: nothing written.
    assert_eq!(store::sync_once(&router, &mut fake), Synced::Nothing);
    assert_eq!(fake.log.len(), 1);
    // The import creates gamma from uploaded image 7: its bytes go first.
    let (text, etag) = export(&mut router.lock().unwrap());
    let resp = router
        .lock()
        .unwrap()
        .handle(&put(&changed_plan(&text), "", Some(&etag)));
    assert_eq!(resp.status, 200);
    fake.log.clear();
    assert_eq!(
        store::sync_once(&router, &mut fake),
        Synced::Written { images: 1 }
    );
    let image_url = format!("{URL}images/{}", small_sha());
    assert_eq!(
        fake.log,
        vec![
            format!("HEAD {image_url}"),
            format!("PUT {image_url} If-None-Match=*"),
            format!("PUT {} If-Match={first}", config_url()),
        ]
    );
    let want = router.lock().unwrap().backend().images[2].1.clone();
    assert_eq!(fake.files[&image_url], want, "the image's bytes, read back");
    let (now, _) = export(&mut router.lock().unwrap());
    assert_eq!(fake.files[&config_url()], now.as_bytes());
    let status = router.lock().unwrap().store.clone();
    assert_eq!(status.etag, Some(tag(now.as_bytes())));
    assert_eq!(status.images_written, 1);
    assert!(!status.conflict);
    // GET /api/v1/config/store shows it.
    let resp = router.lock().unwrap().handle(&get("/api/v1/config/store"));
    assert_eq!(body_json(&resp)["url"], URL);
    assert_eq!(body_json(&resp)["images_written"], 1);
}

#[test]
fn another_writer_is_a_412_nothing_is_overwritten_and_writing_stops() {
    let router = shared(config_router());
    let mut fake = FakeStore::default();
    store::sync_once(&router, &mut fake);
    // Someone else writes config.toml meanwhile.
    fake.files
        .insert(config_url(), b"# another host's writer\n".to_vec());
    router
        .lock()
        .unwrap()
        .backend_mut()
        .plans
        .get_mut(&BETA)
        .unwrap()
        .bootargs = "x".into();
    assert_eq!(store::sync_once(&router, &mut fake), Synced::Conflict);
    assert_eq!(fake.files[&config_url()], b"# another host's writer\n");
    let status = router.lock().unwrap().store.clone();
    assert!(status.conflict);
    assert!(status
        .last_result
        .unwrap()
        .contains("another writer changed it"),);
    let events = router.lock().unwrap().handle(&get("/api/v1/events"));
    assert!(
        text(&events).contains("configuration store:"),
        "{}",
        text(&events)
    );
    fake.log.clear();
    assert_eq!(store::sync_once(&router, &mut fake), Synced::Nothing);
    assert!(fake.log.is_empty());
}

#[test]
fn restore_fetches_the_missing_images_and_applies_the_stored_configuration() {
    // Host A: the change, written to the store.
    let a = shared(config_router());
    let mut fake = FakeStore::default();
    let (text, etag) = export(&mut a.lock().unwrap());
    let resp = a
        .lock()
        .unwrap()
        .handle(&put(&changed_plan(&text), "", Some(&etag)));
    assert_eq!(resp.status, 200);
    store::sync_once(&a, &mut fake);
    let (after, _) = export(&mut a.lock().unwrap());

    // Host B after a reboot: the boot plan again (alpha running, as the
    // hypervisor autostarts it), without the uploaded image.
    let mut b = config_router();
    b.backend_mut().images.retain(|(i, _)| i.id != 7);
    b.backend_mut()
        .set_state(ALPHA, PartitionState::Running)
        .unwrap();
    b.backend_mut()
        .set_state(BETA, PartitionState::Running)
        .unwrap();
    b.backend_mut().stop_completes = true;
    let b = shared(b);
    let sentence = store::restore(&b, &mut fake);
    assert!(
        sentence.starts_with(&format!(
            "restored {}: created [gamma], changed [beta], deleted [alpha], unchanged [mgmt]; 1 image(s) fetched",
            config_url()
        )),
        "{sentence}"
    );
    let (restored, _) = export(&mut b.lock().unwrap());
    // The same partitions (indices differ: compare the entries as a set).
    let mut x: Vec<&str> = restored.split("[[partition]]").collect();
    let mut y: Vec<&str> = after.split("[[partition]]").collect();
    x.sort();
    y.sort();
    assert_eq!(x, y);
    let calls = changes_of(b.lock().unwrap().backend());
    assert_eq!(
        calls,
        vec![
            format!("stop {ALPHA}"),
            format!("stop {BETA}"),
            format!("destroy {ALPHA}"),
            format!("configure {BETA}"),
            "create gamma".to_string(),
            "start 20".to_string(),
            format!("start {BETA}"),
        ]
    );
    // The image came back byte for byte, under its SHA-256.
    let image = b
        .lock()
        .unwrap()
        .backend()
        .images
        .iter()
        .find(|(i, _)| i.sha256 == Some(small_digest()))
        .map(|(_, d)| d.clone());
    assert_eq!(image, Some(a.lock().unwrap().backend().images[2].1.clone()));
    assert!(b.lock().unwrap().store.restored.is_some());
}

#[test]
fn restore_asks_again_while_the_store_cannot_be_reached() {
    let router = shared(config_router());
    let mut fake = FakeStore {
        unreachable_gets: 2,
        ..FakeStore::default()
    };
    let sentence = store::restore(&router, &mut fake);
    assert!(sentence.contains("nothing stored yet"), "{sentence}");
    assert_eq!(fake.log.len(), 3, "{:?}", fake.log);
}

#[test]
fn restore_with_nothing_stored_leaves_the_boot_plan() {
    let router = shared(config_router());
    let mut fake = FakeStore::default();
    let sentence = store::restore(&router, &mut fake);
    assert!(sentence.contains("nothing stored yet"), "{sentence}");
    assert!(changes_of(router.lock().unwrap().backend()).is_empty());
}

#[test]
fn a_stored_configuration_naming_an_image_the_store_lacks_is_not_applied() {
    let a = shared(config_router());
    let mut fake = FakeStore::default();
    let (text, etag) = export(&mut a.lock().unwrap());
    a.lock()
        .unwrap()
        .handle(&put(&changed_plan(&text), "", Some(&etag)));
    store::sync_once(&a, &mut fake);
    fake.files.retain(|k, _| !k.contains("/images/"));
    let mut b = config_router();
    b.backend_mut().images.retain(|(i, _)| i.id != 7);
    let b = shared(b);
    let sentence = store::restore(&b, &mut fake);
    assert!(sentence.contains("answered 404"), "{sentence}");
    assert!(changes_of(b.lock().unwrap().backend()).is_empty());
}

fn changes_of(b: &FakeBackend) -> Vec<String> {
    b.calls
        .iter()
        .filter(|c| {
            ["create", "configure", "destroy", "start", "stop"]
                .iter()
                .any(|v| c.starts_with(v))
        })
        .cloned()
        .collect()
}

#[test]
fn credentials_are_written_hashes_only_and_restored_after_a_restart() {
    let a = shared(config_router());
    a.lock().unwrap().seed_credentials([9; 32]);
    let mut fake = FakeStore::default();
    let (viewer, revoked) = {
        let mut r = a.lock().unwrap();
        let (_, v) = r
            .credentials
            .create(auth::Role::Viewer, "dash", None)
            .unwrap();
        let (_, g) = r.credentials.create(auth::Role::Viewer, "", None).unwrap();
        r.credentials.revoke("c2").unwrap();
        (v, g)
    };
    store::sync_once(&a, &mut fake);
    let cred_url = format!("{URL}credentials.json");
    let stored = String::from_utf8(fake.files[&cred_url].clone()).unwrap();
    assert!(
        !stored.contains(&viewer) && !stored.contains(&revoked),
        "{stored}"
    );
    assert!(fake
        .log
        .iter()
        .any(|l| l == &format!("PUT {cred_url} If-None-Match=*")));
    // Unchanged: not written again; changed: written with If-Match.
    let puts = |f: &FakeStore| {
        f.log
            .iter()
            .filter(|l| l.starts_with(&format!("PUT {cred_url}")))
            .count()
    };
    store::sync_once(&a, &mut fake);
    assert_eq!(puts(&fake), 1);
    a.lock().unwrap().credentials.rotate("c1", None).unwrap();
    store::sync_once(&a, &mut fake);
    assert_eq!(puts(&fake), 2);
    assert!(fake
        .log
        .iter()
        .any(|l| l.starts_with(&format!("PUT {cred_url} If-Match=\""))));
    // A rotation since: the viewer's first token is gone, in the store too.
    let rotated = {
        let mut r = a.lock().unwrap();
        let (_, t) = r.credentials.rotate("c1", None).unwrap();
        t
    };
    store::sync_once(&a, &mut fake);

    // The manager restarts: a new router, the boot digest only.
    let b = shared(config_router());
    assert!(b.lock().unwrap().credentials.check(&rotated).is_none());
    let sentence = store::restore_credentials(&b, &mut fake);
    assert!(sentence.contains("2 credential(s) restored"), "{sentence}");
    let r = b.lock().unwrap();
    assert_eq!(r.credentials.check(&rotated).unwrap().id, "c1");
    assert!(r.credentials.check(&viewer).is_none());
    assert!(r.credentials.check(&revoked).is_none());
    assert!(r.credentials.check(TOKEN).is_some());
    drop(r);
    // Restored, so nothing to write back.
    let before = puts(&fake);
    store::sync_once(&b, &mut fake);
    assert_eq!(puts(&fake), before);
}

#[test]
fn a_broken_credentials_file_leaves_the_boot_credential() {
    let b = shared(config_router());
    let mut fake = FakeStore::default();
    fake.files.insert(
        format!("{URL}credentials.json"),
        b"{\"version\":1}".to_vec(),
    );
    let sentence = store::restore_credentials(&b, &mut fake);
    assert!(
        sentence.contains("next_id") && sentence.contains("boot credential stands"),
        "{sentence}"
    );
    assert!(b.lock().unwrap().credentials.check(TOKEN).is_some());
    let empty = shared(config_router());
    let sentence = store::restore_credentials(&empty, &mut FakeStore::default());
    assert!(sentence.contains("nothing stored yet"), "{sentence}");
}
