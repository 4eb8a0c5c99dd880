//! The configuration store for QEMU: a small HTTP/1.1 file server over one directory with conditional writes, so the manager can keep its configuration (and images) across runs (docs/DEPLOY.md, "Configuration store").
//!
//! `GET`/`HEAD` answer the file with a strong `ETag` (the quoted SHA-256 of
//! its bytes); `PUT` writes it (the body needs a `Content-Length`, at most
//! [`MAX_PUT_BYTES`]) honouring `If-Match: "<etag>"` (412 unless the file
//! has that ETag now) and `If-None-Match: *` (412 if the file exists),
//! answering 201 (new) or 204 (replaced) with the new `ETag`. A write goes
//! to a temporary file renamed over the old one, under one lock, so the
//! check and the write cannot interleave with another writer's. Paths are
//! `/`-separated names of `[A-Za-z0-9._-]` (no `..`, nothing hidden);
//! anything else is 400. One thread per connection, one request per
//! connection (`Connection: close`).

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

/// Largest PUT body taken (an image).
pub const MAX_PUT_BYTES: u64 = 512 << 20;

/// A running store; it serves until the process ends.
pub struct Store {
    pub port: u16,
    pub dir: PathBuf,
}

impl Store {
    /// Serves `dir` (created if missing) on 127.0.0.1:`port` (0: any free
    /// port) in background threads.
    pub fn serve(dir: &Path, port: u16) -> std::io::Result<Store> {
        fs::create_dir_all(dir)?;
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let port = listener.local_addr()?.port();
        let root = Arc::new(dir.to_path_buf());
        let lock = Arc::new(Mutex::new(()));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let root = Arc::clone(&root);
                let lock = Arc::clone(&lock);
                std::thread::spawn(move || {
                    let _ = handle(stream, &root, &lock);
                });
            }
        });
        Ok(Store {
            port,
            dir: dir.to_path_buf(),
        })
    }
}

/// The store's port for a manager port: two above it (so each engineer's
/// `PINFOLD_MANAGER_PORT` gets its own store).
pub fn store_port(manager_port: u16) -> u16 {
    manager_port.wrapping_add(2)
}

/// Names a store on the QEMU host (`http://10.0.2.2:PORT/hosts/BOARD/`)
/// in the plan's management partition, unless it names one already or has
/// no management partition; the URL the manager will use, if we named it.
pub fn name_in_plan(plan: &mut pinfold_config::Config, port: u16) -> Option<String> {
    let board = plan.board.name.clone();
    let mgmt = plan.partitions.iter_mut().find(|p| p.management)?;
    if mgmt.config_store.is_some() {
        return None;
    }
    let url = format!("http://10.0.2.2:{port}/hosts/{board}/");
    mgmt.config_store = Some(url.clone());
    Some(url)
}

/// The quoted SHA-256 of `bytes`.
pub fn etag_of(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// The file a request path names, or None if the path is not allowed.
fn file_of(root: &Path, path: &str) -> Option<PathBuf> {
    let path = path.split('?').next()?;
    let rel = path.strip_prefix('/')?;
    let mut out = root.to_path_buf();
    for seg in rel.split('/') {
        let ok = !seg.is_empty()
            && !seg.starts_with('.')
            && seg
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !ok {
            return None;
        }
        out.push(seg);
    }
    Some(out)
}

struct Head {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn read_head(r: &mut impl BufRead) -> std::io::Result<Option<Head>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
        return Ok(None);
    };
    let (method, path) = (method.to_string(), path.to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
        if headers.len() > 100 {
            return Ok(None);
        }
    }
    Ok(Some(Head {
        method,
        path,
        headers,
    }))
}

fn reply(
    w: &mut impl Write,
    status: u16,
    reason: &str,
    headers: &[(&str, String)],
    body: &[u8],
    send_body: bool,
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {reason}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    w.write_all(head.as_bytes())?;
    if send_body {
        w.write_all(body)?;
    }
    w.flush()
}

/// Whether `If-Match` (a list, or `*`) admits `current` (None: no file).
fn if_match_ok(header: &str, current: Option<&str>) -> bool {
    header.split(',').map(str::trim).any(|c| match current {
        Some(tag) => c == "*" || c == tag,
        None => false,
    })
}

fn handle(stream: TcpStream, root: &Path, lock: &Mutex<()>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    let mut w = stream.try_clone()?;
    let mut r = BufReader::new(stream);
    let Some(head) = read_head(&mut r)? else {
        return Ok(());
    };
    let Some(file) = file_of(root, &head.path) else {
        return reply(&mut w, 400, "Bad Request", &[], b"bad path\n", true);
    };
    match head.method.as_str() {
        "GET" | "HEAD" => {
            let send = head.method == "GET";
            match fs::read(&file) {
                Ok(bytes) if file.is_file() => {
                    let tag = etag_of(&bytes);
                    if head
                        .header("if-none-match")
                        .is_some_and(|h| if_match_ok(h, Some(&tag)))
                    {
                        return reply(&mut w, 304, "Not Modified", &[("ETag", tag)], b"", false);
                    }
                    reply(&mut w, 200, "OK", &[("ETag", tag)], &bytes, send)
                }
                _ => reply(&mut w, 404, "Not Found", &[], b"not found\n", send),
            }
        }
        "PUT" => {
            let Some(len) = head
                .header("content-length")
                .and_then(|v| v.parse::<u64>().ok())
            else {
                return reply(
                    &mut w,
                    411,
                    "Length Required",
                    &[],
                    b"Content-Length\n",
                    true,
                );
            };
            if len > MAX_PUT_BYTES {
                return reply(&mut w, 413, "Payload Too Large", &[], b"too large\n", true);
            }
            let mut body = Vec::with_capacity(len as usize);
            (&mut r).take(len).read_to_end(&mut body)?;
            if body.len() as u64 != len {
                return reply(&mut w, 400, "Bad Request", &[], b"body cut short\n", true);
            }
            let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
            let current = fs::read(&file).ok().map(|b| etag_of(&b));
            if let Some(h) = head.header("if-match") {
                if !if_match_ok(h, current.as_deref()) {
                    let tag = current.clone().unwrap_or_default();
                    return reply(
                        &mut w,
                        412,
                        "Precondition Failed",
                        &[("ETag", tag)],
                        b"If-Match: the file changed\n",
                        true,
                    );
                }
            }
            if head
                .header("if-none-match")
                .is_some_and(|h| h.trim() == "*")
                && current.is_some()
            {
                let tag = current.clone().unwrap_or_default();
                return reply(
                    &mut w,
                    412,
                    "Precondition Failed",
                    &[("ETag", tag)],
                    b"If-None-Match: * but the file exists\n",
                    true,
                );
            }
            if let Some(dir) = file.parent() {
                fs::create_dir_all(dir)?;
            }
            let tmp = file.with_extension("pinfold-tmp");
            fs::write(&tmp, &body)?;
            fs::rename(&tmp, &file)?;
            let tag = etag_of(&body);
            let (status, reason) = if current.is_some() {
                (204, "No Content")
            } else {
                (201, "Created")
            };
            reply(&mut w, status, reason, &[("ETag", tag)], b"", true)
        }
        _ => reply(
            &mut w,
            405,
            "Method Not Allowed",
            &[("Allow", "GET, HEAD, PUT".into())],
            b"",
            true,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hvctl::http::{request_full, request_typed, Endpoint};

    fn store() -> (Store, Endpoint) {
        let dir = std::env::temp_dir().join(format!(
            "pinfold-store-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&dir);
        let s = Store::serve(&dir, 0).expect("serve");
        let ep = Endpoint::parse(&format!("http://127.0.0.1:{}", s.port)).expect("url");
        (s, ep)
    }

    fn put(ep: &Endpoint, path: &str, extra: &[(&str, &str)], body: &[u8]) -> (u16, String) {
        let r = request_typed(
            ep,
            "PUT",
            path,
            None,
            extra,
            "application/octet-stream",
            body,
        )
        .expect("put");
        (r.status, r.header("etag").unwrap_or_default().to_string())
    }

    #[test]
    fn run_names_a_store_two_ports_up_unless_the_plan_has_one() {
        let text = "[board]\nname = \"qemu-virt\"\ncpus = 2\nmemory = \"1GiB\"\n\n\
                    [[partition]]\nname = \"mgmt\"\ncpus = [0]\nmemory = \"64MiB\"\n\
                    kernel = \"k\"\nmanagement = true\n";
        let mut plan = pinfold_config::parse(text).expect("plan");
        assert_eq!(store_port(18400), 18402);
        assert_eq!(
            name_in_plan(&mut plan, 18402).as_deref(),
            Some("http://10.0.2.2:18402/hosts/qemu-virt/")
        );
        assert_eq!(
            plan.partitions[0].config_store.as_deref(),
            Some("http://10.0.2.2:18402/hosts/qemu-virt/")
        );
        // Named already (a real store): left alone.
        assert_eq!(name_in_plan(&mut plan, 1), None);
        assert!(plan.check_static().is_ok());
    }

    #[test]
    fn put_with_if_none_match_creates_once_then_412() {
        let (s, ep) = store();
        let (status, tag) = put(
            &ep,
            "/hosts/a/config.toml",
            &[("If-None-Match", "*")],
            b"v1",
        );
        assert_eq!((status, tag.as_str()), (201, etag_of(b"v1").as_str()));
        let (status, _) = put(
            &ep,
            "/hosts/a/config.toml",
            &[("If-None-Match", "*")],
            b"v2",
        );
        assert_eq!(status, 412);
        assert_eq!(
            fs::read(s.dir.join("hosts/a/config.toml")).expect("file"),
            b"v1"
        );
    }

    #[test]
    fn put_with_if_match_replaces_only_the_version_read() {
        let (_s, ep) = store();
        let (_, v1) = put(&ep, "/config.toml", &[], b"v1");
        let (status, v2) = put(&ep, "/config.toml", &[("If-Match", &v1)], b"v2");
        assert_eq!((status, v2.as_str()), (204, etag_of(b"v2").as_str()));
        // A second writer still holding v1 is refused, and told the ETag now.
        let (status, now) = put(&ep, "/config.toml", &[("If-Match", &v1)], b"v3");
        assert_eq!((status, now.as_str()), (412, v2.as_str()));
        let got = request_full(&ep, "GET", "/config.toml", None, &[], None).expect("get");
        assert_eq!((got.status, got.body.as_slice()), (200, &b"v2"[..]));
        assert_eq!(got.header("etag"), Some(v2.as_str()));
        // If-Match on a file that does not exist is 412 too.
        let (status, _) = put(&ep, "/other.toml", &[("If-Match", &v1)], b"x");
        assert_eq!(status, 412);
    }

    /// One raw request; the whole reply (the server closes the connection).
    fn raw(port: u16, request: &str) -> String {
        let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        c.write_all(request.as_bytes()).expect("send");
        let mut out = String::new();
        c.read_to_string(&mut out).expect("read");
        out
    }

    #[test]
    fn head_and_get_of_a_missing_file_are_404_and_bad_paths_400() {
        let (s, ep) = store();
        let head = raw(s.port, "HEAD /images/abc HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 404 "), "{head}");
        put(&ep, "/images/abc", &[], b"bytes");
        let head = raw(s.port, "HEAD /images/abc HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        assert!(
            head.contains(&format!("ETag: {}", etag_of(b"bytes"))),
            "{head}"
        );
        assert!(head.ends_with("\r\n\r\n"), "no body after a HEAD: {head}");
        for bad in ["/../etc/passwd", "/.hidden", "/a//b", "/a%2fb"] {
            let r = request_full(&ep, "GET", bad, None, &[], None).expect("get");
            assert_eq!(r.status, 400, "{bad}");
        }
    }
}
