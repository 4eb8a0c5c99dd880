//! `POST /api/v1/images/fetch`: the manager downloads an image over plain HTTP/1.1 (std::net, so it runs on Hermit) and streams it into the hypervisor from a background thread.
//!
//! The request is answered once the server's response head is in (a bad
//! URL, a refused connection, a status other than 200 or a missing
//! Content-Length is a 400 naming `url`, at once), with 202 and the image
//! in state `uploading`; its progress and outcome are the image's record
//! (`GET /api/v1/images/{id}`). Redirects are not followed; a chunked
//! response without Content-Length is refused (IMAGE_CREATE needs the
//! size before the first byte).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::backend::Backend;
use crate::json;
use crate::runtime::{fetch_begin, fetch_stream, parse_fetch, UploadSpec};
use crate::{ApiError, Request, Response, Router};

/// Longest wait for the connection and for each read.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Stack of a download thread (Hermit takes every stack from RAM; the
/// chunk buffer is on the heap).
pub const FETCH_STACK_BYTES: usize = 128 * 1024;

/// Where to GET: `host:port` and the request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    pub authority: String,
    pub target: String,
}

/// Parses `http://host[:port][/path]` (no https, no userinfo).
pub fn parse_url(url: &str) -> Option<HttpUrl> {
    let rest = url.strip_prefix("http://")?;
    let (authority, target) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') || target.contains(char::is_whitespace) {
        return None;
    }
    let has_port = authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && !authority.ends_with(']');
    Some(HttpUrl {
        authority: if has_port {
            authority.to_string()
        } else {
            format!("{authority}:80")
        },
        target: target.to_string(),
    })
}

fn url_error(detail: String) -> ApiError {
    ApiError::bad_request(format!("url: {detail}")).with_field("url")
}

/// Connects, sends the GET and reads the response head: the body reader
/// and its Content-Length.
pub fn open(url: &str) -> Result<(BufReader<TcpStream>, u64), ApiError> {
    let parsed = parse_url(url)
        .ok_or_else(|| url_error(format!("{url:?} is not an http://HOST[:PORT]/PATH URL")))?;
    let addr = parsed
        .authority
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| url_error(format!("cannot resolve {}", parsed.authority)))?;
    let stream = TcpStream::connect_timeout(&addr, FETCH_TIMEOUT)
        .map_err(|e| url_error(format!("cannot connect to {}: {e}", parsed.authority)))?;
    let _ = stream.set_read_timeout(Some(FETCH_TIMEOUT));
    let _ = stream.set_write_timeout(Some(FETCH_TIMEOUT));
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: pinfold-manager\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        parsed.target, parsed.authority
    );
    (&stream)
        .write_all(request.as_bytes())
        .map_err(|e| url_error(format!("sending the request failed: {e}")))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| url_error(format!("no response: {e}")))?;
    let status = line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| url_error(format!("not an HTTP response: {:?}", line.trim_end())))?;
    if status != 200 {
        return Err(url_error(format!(
            "GET {url} answered {} (only 200 is taken; redirects are not followed)",
            line.trim_end()
                .trim_start_matches(|c: char| !c.is_whitespace())
                .trim()
        )));
    }
    let mut length = None;
    loop {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .map_err(|e| url_error(format!("the response head broke off: {e}")))?;
        let header = line.trim_end();
        if n == 0 || header.is_empty() {
            break;
        }
        if let Some((k, v)) = header.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                length = v.trim().parse::<u64>().ok();
            }
        }
    }
    let length = length.ok_or_else(|| {
        url_error(format!(
            "GET {url} sent no Content-Length (a chunked download cannot be sized in advance)"
        ))
    })?;
    Ok((reader, length))
}

/// Starts a fetch: 202 with the new image, the download continuing in a
/// thread that holds the router's lock once per chunk.
pub fn start<B: Backend + Send + 'static>(
    router: &Arc<Mutex<Router<B>>>,
    head: &Request,
) -> Result<Response, ApiError> {
    let req = {
        let mut r = router.lock().unwrap_or_else(|p| p.into_inner());
        r.authorize(head)?;
        parse_fetch(&head.body)?
    };
    let kind = json::ImageKind::parse(&req.kind).ok_or_else(|| {
        ApiError::bad_request(format!(
            "kind: must be kernel, initrd or dtb, not {:?}",
            req.kind
        ))
        .with_field("kind")
    })?;
    let sha256 = match &req.sha256 {
        None => None,
        Some(text) => Some(json::parse_sha256(text).ok_or_else(|| {
            ApiError::bad_request(format!("sha256: must be 64 hex digits, not {text:?}"))
                .with_field("sha256")
        })?),
    };
    // Network waits happen without the router's lock.
    let (mut reader, size) = open(&req.url)?;
    let spec = UploadSpec {
        kind,
        name: req.name.clone(),
        sha256,
        size,
    };
    let (id, resp) = fetch_begin(router, &spec)?;
    let shared = Arc::clone(router);
    let spawned = std::thread::Builder::new()
        .stack_size(FETCH_STACK_BYTES)
        .spawn(move || {
            let mut body = (&mut reader).take(spec.size);
            fetch_stream(&shared, &spec, id, &mut body);
        });
    if let Err(e) = spawned {
        let err = ApiError::hypervisor(503, format!("cannot start the download: {e}"));
        crate::runtime::fetch_abort(router, id, &err);
        return Err(err);
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_without_port_gets_80_and_path_defaults_to_root() {
        assert_eq!(
            parse_url("http://10.0.2.2"),
            Some(HttpUrl {
                authority: "10.0.2.2:80".into(),
                target: "/".into()
            })
        );
        assert_eq!(
            parse_url("http://h:8000/a/b?c=d"),
            Some(HttpUrl {
                authority: "h:8000".into(),
                target: "/a/b?c=d".into()
            })
        );
    }

    #[test]
    fn https_and_userinfo_urls_are_refused() {
        assert_eq!(parse_url("https://h/x"), None);
        assert_eq!(parse_url("http://u:p@h/x"), None);
        assert_eq!(parse_url("ftp://h/x"), None);
        assert_eq!(parse_url("http:///x"), None);
    }
}
