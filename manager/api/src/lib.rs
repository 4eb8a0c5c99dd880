//! The manager's REST API: HTTP requests parsed into a typed [`Action`], checked, and carried out over a [`Backend`] (management hypercalls in the real manager, a fake in tests).
//!
//! The contract with the web UI and hvctl is `openapi.json` beside this
//! crate (served at `/api/v1/openapi.json`); a test keeps it and [`ROUTES`]
//! in step. The HTTP server itself is the caller's (tiny_http on Hermit):
//! it hands [`Router::handle`] a [`Request`] and sends back the
//! [`Response`]. The caller should stop reading a body after
//! [`MAX_BODY_BYTES`] + 1 bytes; longer bodies are answered 413 anyway.
//!
//! Checks run in this order, so that each error means one thing:
//! 404/405 (no such route or method), then who is asking (`auth`: 421 for
//! a `Host` that is not ours, 403 for a mutation from another `Origin`,
//! 429 after too many failed credentials, 401 without the right bearer
//! token, 403 for a role that may not), 413/400 (body or query), then the
//! backend's 404 (no such partition) and 409 (transition not allowed).
#![forbid(unsafe_code)]

pub mod auth;
pub mod backend;
pub mod config;
pub mod events;
pub mod fetch;
pub mod httpboot;
pub mod json;
pub mod memory;
pub mod metrics;
pub mod redfish;
mod runtime;
pub mod store;
#[cfg(test)]
mod tests;
pub mod time;

use std::time::{Duration, Instant};

use pinfold_abi::{AbiError, CallError, PartitionSummary, Transition};

pub use backend::{Backend, ConsoleRead, HvError, HvcBackend, Hypercall};
pub use runtime::{serve, ImageMeta, MAX_IMAGE_BYTES, UPLOAD_CHUNK};

/// The OpenAPI 3.0 document describing every route in [`ROUTES`].
pub const OPENAPI_JSON: &str = include_str!("../openapi.json");

/// Most console bytes one GET returns.
pub const CONSOLE_READ_MAX: usize = 16 * 1024;
/// Most bytes one console POST may send (the `data` string, UTF-8).
pub const CONSOLE_WRITE_MAX: usize = 4 * 1024;
/// Most bytes offered to the hypervisor in one CONSOLE_WRITE: a console
/// POST is written in calls of at most this much, each continuing where the
/// partition's input queue stopped taking bytes (an emulated PL011 takes 32
/// at a time), so each call copies little.
pub const CONSOLE_WRITE_CHUNK: usize = 512;
/// Pause before writing again when the partition took less than offered.
pub const CONSOLE_WRITE_RETRY: Duration = Duration::from_millis(1);
/// Longest a console POST waits for the partition to make room: after this
/// much pausing (or wall time) it answers with what was taken so far.
pub const CONSOLE_WRITE_WAIT: Duration = Duration::from_secs(2);
/// Largest request body accepted at all (a 4 KiB `data` string can grow to
/// six times that when every byte is a `\u00XX` escape, plus the wrapper).
pub const MAX_BODY_BYTES: usize = 6 * CONSOLE_WRITE_MAX + 64;

const JSON: &str = "application/json";
const TEXT_PLAIN: &str = "text/plain; charset=utf-8";
/// Server-Sent Events (`GET /api/v1/events/stream`).
pub const EVENT_STREAM: &str = "text/event-stream";
/// Most events one `GET /api/v1/events` returns.
pub const EVENTS_PER_REPLY: usize = 256;

/// A partition name as it may stand in a quoted filename (plan names are
/// `[a-z0-9_-]`; anything else becomes `_`).
fn filename_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// An HTTP request as the server hands it over.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    /// "GET", "POST", ... (case-sensitive, as HTTP methods are).
    pub method: String,
    /// The request target: path and optional `?query`.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The client's address, as the server accepted the connection (None:
    /// not known). The failed-token throttle counts per address.
    pub peer: Option<std::net::IpAddr>,
}

/// An HTTP response to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// Headers besides Content-Type (`ETag`, `Location`, `Content-Disposition`).
    pub headers: Vec<(&'static str, String)>,
}

impl Response {
    pub fn new(status: u16, content_type: &'static str, body: Vec<u8>) -> Self {
        Response {
            status,
            content_type,
            body,
            headers: Vec::new(),
        }
    }

    /// The value of header `name` (case-insensitive), if set.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Request {
    /// The value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One file of the web UI: URL path (e.g. "/index.html"), Content-Type,
/// bytes. `GET /` serves "/index.html".
pub type StaticFile = (&'static str, &'static str, &'static [u8]);

/// What a request asks for, once routed and parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    GetHost,
    /// `GET /api/v1/host/pci`.
    GetHostPci,
    ListPartitions,
    GetPartition {
        name: String,
    },
    ChangeState {
        name: String,
        op: Transition,
    },
    ReadConsole {
        name: String,
        offset: u64,
    },
    WriteConsole {
        name: String,
        data: Vec<u8>,
    },
    /// (ABI 3.0) `POST /api/v1/partitions`.
    CreatePartition {
        patch: runtime::ConfigPatch,
    },
    /// `PATCH /api/v1/partitions/{name}`.
    ChangePartition {
        name: String,
        patch: runtime::ConfigPatch,
        if_match: Option<String>,
    },
    /// `DELETE /api/v1/partitions/{name}`.
    DeletePartition {
        name: String,
        if_match: Option<String>,
    },
    GetResources,
    ListImages,
    GetImage {
        id: u32,
    },
    DeleteImage {
        id: u32,
    },
    /// `POST /api/v1/images?...`: the body is the image (streamed by
    /// [`serve`]; [`Router::handle`] takes it from the request).
    UploadImage {
        query: String,
    },
    /// `POST /api/v1/images/fetch` (only [`serve`] can start the download).
    FetchImage {
        request: json::FetchRequest,
    },
    /// `GET /api/v1/config`: the whole host as a plan TOML.
    GetConfig,
    /// `GET /api/v1/config/store`: the configuration store's status.
    GetConfigStore,
    /// `PUT /api/v1/config`: a plan TOML applied as a diff.
    PutConfig {
        text: String,
        if_match: Option<String>,
        dry_run: bool,
    },
    /// The whole retained console history, as a file.
    ConsoleHistory {
        name: String,
    },
    /// Events from sequence number `since` on.
    ListEvents {
        since: u64,
    },
    /// The event stream (served whole here: what is kept from `since` on;
    /// the manager's server keeps it open instead, [`Router::open_stream`]).
    EventStream {
        since: u64,
    },
    Metrics,
    OpenApi,
    /// A web UI file, by URL path.
    StaticFile {
        path: String,
    },
    /// The credential the request came with.
    Whoami,
    ListCredentials,
    CreateCredential {
        role: auth::Role,
        name: String,
    },
    RotateCredential {
        id: String,
    },
    RevokeCredential {
        id: String,
    },
}

/// The API endpoints, one per OpenAPI path item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Host,
    HostPci,
    Partitions,
    Partition,
    Start,
    Stop,
    Restart,
    Shutdown,
    Console,
    ConsoleHistory,
    Events,
    EventStream,
    Metrics,
    OpenApi,
    Resources,
    Images,
    ImageFetch,
    Image,
    /// `GET /api/v1/auth/whoami`.
    Whoami,
    /// `GET`/`POST /api/v1/auth/credentials`.
    Credentials,
    /// `DELETE /api/v1/auth/credentials/{id}`.
    Credential,
    /// `POST /api/v1/auth/credentials/{id}/rotate`.
    CredentialRotate,
    Config,
    ConfigStore,
}

/// A method and path pattern the router serves; `{name}` (a partition
/// name) and `{id}` (an image id) match one path segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub method: &'static str,
    pub pattern: &'static str,
    pub endpoint: Endpoint,
}

const fn route(method: &'static str, pattern: &'static str, endpoint: Endpoint) -> Route {
    Route {
        method,
        pattern,
        endpoint,
    }
}

/// Every API route. The router matches against this table and nothing
/// else, so the OpenAPI test over it covers what the router does. Paths
/// outside `/api/` and `/metrics` are the web UI's static files.
pub const ROUTES: &[Route] = &[
    route("GET", "/api/v1/host", Endpoint::Host),
    route("GET", "/api/v1/host/pci", Endpoint::HostPci),
    route("GET", "/api/v1/partitions", Endpoint::Partitions),
    route("POST", "/api/v1/partitions", Endpoint::Partitions),
    route("GET", "/api/v1/partitions/{name}", Endpoint::Partition),
    route("PATCH", "/api/v1/partitions/{name}", Endpoint::Partition),
    route("DELETE", "/api/v1/partitions/{name}", Endpoint::Partition),
    route("POST", "/api/v1/partitions/{name}/start", Endpoint::Start),
    route("POST", "/api/v1/partitions/{name}/stop", Endpoint::Stop),
    route(
        "POST",
        "/api/v1/partitions/{name}/restart",
        Endpoint::Restart,
    ),
    route(
        "POST",
        "/api/v1/partitions/{name}/shutdown",
        Endpoint::Shutdown,
    ),
    route(
        "GET",
        "/api/v1/partitions/{name}/console",
        Endpoint::Console,
    ),
    route(
        "POST",
        "/api/v1/partitions/{name}/console",
        Endpoint::Console,
    ),
    route("GET", "/api/v1/resources", Endpoint::Resources),
    route("GET", "/api/v1/images", Endpoint::Images),
    route("POST", "/api/v1/images", Endpoint::Images),
    route("POST", "/api/v1/images/fetch", Endpoint::ImageFetch),
    route("GET", "/api/v1/images/{id}", Endpoint::Image),
    route("DELETE", "/api/v1/images/{id}", Endpoint::Image),
    route(
        "GET",
        "/api/v1/partitions/{name}/console/history",
        Endpoint::ConsoleHistory,
    ),
    route("GET", "/api/v1/events", Endpoint::Events),
    route("GET", "/api/v1/events/stream", Endpoint::EventStream),
    route("GET", "/api/v1/config", Endpoint::Config),
    route("PUT", "/api/v1/config", Endpoint::Config),
    route("GET", "/api/v1/config/store", Endpoint::ConfigStore),
    route("GET", "/metrics", Endpoint::Metrics),
    route("GET", "/api/v1/openapi.json", Endpoint::OpenApi),
    route("GET", "/api/v1/auth/whoami", Endpoint::Whoami),
    route("GET", "/api/v1/auth/credentials", Endpoint::Credentials),
    route("POST", "/api/v1/auth/credentials", Endpoint::Credentials),
    route(
        "DELETE",
        "/api/v1/auth/credentials/{name}",
        Endpoint::Credential,
    ),
    route(
        "POST",
        "/api/v1/auth/credentials/{name}/rotate",
        Endpoint::CredentialRotate,
    ),
];

/// A request the API refuses: status, short code and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub detail: String,
    /// The field at fault, for field-level errors (the plan field as the
    /// build-time TOML check names it).
    pub field: Option<String>,
    /// Seconds for a `Retry-After` header (429).
    pub retry_after: Option<u64>,
    /// A 405's `Allow` header: the methods the route takes.
    pub allow: Option<String>,
}

impl ApiError {
    fn new(status: u16, code: &'static str, detail: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            detail: detail.into(),
            field: None,
            retry_after: None,
            allow: None,
        }
    }
    pub fn forbidden(detail: impl Into<String>) -> Self {
        ApiError::new(403, "forbidden", detail)
    }
    /// The same error, naming `field`.
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
    pub fn bad_request(detail: impl Into<String>) -> Self {
        ApiError::new(400, "bad_request", detail)
    }
    pub fn precondition_failed(detail: impl Into<String>) -> Self {
        ApiError::new(412, "precondition_failed", detail)
    }
    pub fn length_required(detail: impl Into<String>) -> Self {
        ApiError::new(411, "length_required", detail)
    }
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        ApiError::new(401, "unauthorized", detail)
    }
    pub fn not_found(detail: impl Into<String>) -> Self {
        ApiError::new(404, "not_found", detail)
    }
    /// 405, with the `Allow` header listing `allowed`.
    pub fn method_not_allowed(detail: impl Into<String>, allowed: &str) -> Self {
        ApiError {
            allow: Some(allowed.to_string()),
            ..ApiError::new(405, "method_not_allowed", detail)
        }
    }
    pub fn conflict(detail: impl Into<String>) -> Self {
        ApiError::new(409, "conflict", detail)
    }
    pub fn too_large(detail: impl Into<String>) -> Self {
        ApiError::new(413, "too_large", detail)
    }
    pub fn hypervisor(status: u16, detail: impl Into<String>) -> Self {
        ApiError::new(status, "hypervisor_error", detail)
    }

    /// A backend failure, in the API's terms.
    fn from_call(err: CallError, what: &str) -> Self {
        match err {
            CallError::Refused(AbiError::NotFound) => {
                ApiError::not_found(format!("{what}: no such partition"))
            }
            CallError::Refused(AbiError::Conflict) => ApiError::conflict(format!(
                "{what}: not allowed in the partition's current state"
            )),
            // The hypervisor does not offer the call (or does not take us
            // for the management partition): nothing a retry would fix here,
            // but the service as a whole is unavailable.
            CallError::Refused(AbiError::NotSupported) => {
                ApiError::hypervisor(503, format!("{what}: {err}"))
            }
            _ => ApiError::hypervisor(500, format!("{what}: {err}")),
        }
    }

    pub fn to_response(&self) -> Response {
        let body = json::FieldErrorBody {
            error: self.code.to_string(),
            detail: self.detail.clone(),
            field: self.field.clone(),
        };
        let mut resp = json_response(self.status, &body);
        if let Some(secs) = self.retry_after {
            resp.headers.push(("Retry-After", secs.to_string()));
        }
        if let Some(allow) = &self.allow {
            resp.headers.push(("Allow", allow.clone()));
        }
        resp
    }
}

/// Partition `index`'s interface name in a GIC_INFO report ("gicv3").
fn interface_of(gic: Option<&pinfold_abi::GicReport>, index: u32) -> Option<String> {
    gic?.partitions
        .iter()
        .find(|p| p.index == index)
        .map(|p| p.interface.name().to_string())
}

fn json_response<T: serde::Serialize>(status: u16, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => Response::new(status, JSON, body),
        // Our body types always serialise; say so rather than panic.
        Err(e) => Response::new(
            500,
            JSON,
            format!("{{\"error\":\"hypervisor_error\",\"detail\":\"serialising the reply failed: {e}\"}}")
                .into_bytes(),
        ),
    }
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

/// Splits a request target into path and query.
fn split_target(target: &str) -> (&str, &str) {
    match target.split_once('?') {
        Some((path, query)) => (path, query),
        None => (target, ""),
    }
}

/// Decodes `%XX` escapes; `None` when malformed or not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Matches `path` against a pattern, returning the `{name}` or `{id}`
/// segment.
fn match_pattern<'a>(pattern: &str, path: &'a str) -> Option<Option<&'a str>> {
    let mut name = None;
    let mut segs = path.split('/');
    for want in pattern.split('/') {
        let got = segs.next()?;
        if want.starts_with('{') {
            if got.is_empty() {
                return None;
            }
            name = Some(got);
        } else if want != got {
            return None;
        }
    }
    segs.next().is_none().then_some(name)
}

/// What the route table says about a request target.
enum Matched<'a> {
    Api {
        endpoint: Endpoint,
        name: Option<&'a str>,
    },
    Static,
}

/// Finds the endpoint for `method` and `path`: 404 for an unknown API path,
/// 405 (with `Allow`) for a known one with the wrong method. HEAD is
/// answered wherever GET is (the server sends the head only).
fn match_route<'a>(method: &str, path: &'a str) -> Result<Matched<'a>, ApiError> {
    let method = if method == "HEAD" { "GET" } else { method };
    // "/api/v1/partitions/" is "/api/v1/partitions".
    let path = if path.len() > 1 {
        path.strip_suffix('/').unwrap_or(path)
    } else {
        path
    };
    let candidates: Vec<(&Route, Option<&str>)> = ROUTES
        .iter()
        .filter_map(|r| match_pattern(r.pattern, path).map(|name| (r, name)))
        .collect();
    if let Some((r, name)) = candidates.iter().find(|(r, _)| r.method == method) {
        return Ok(Matched::Api {
            endpoint: r.endpoint,
            name: *name,
        });
    }
    if !candidates.is_empty() {
        let mut allowed: Vec<&str> = Vec::new();
        for (r, _) in &candidates {
            allowed.push(r.method);
            if r.method == "GET" {
                allowed.push("HEAD");
            }
        }
        let allowed = allowed.join(", ");
        return Err(ApiError::method_not_allowed(
            format!("{method} is not allowed on {path}; allowed: {allowed}"),
            &allowed,
        ));
    }
    if path == "/api" || path.starts_with("/api/") {
        return Err(ApiError::not_found(format!("no API route {path}")));
    }
    if method != "GET" {
        return Err(ApiError::method_not_allowed(
            format!("{method} is not allowed on {path}; allowed: GET, HEAD"),
            "GET, HEAD",
        ));
    }
    Ok(Matched::Static)
}

/// The `offset` query parameter (default 0).
fn parse_offset(query: &str) -> Result<u64, ApiError> {
    let mut offset = 0;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key == "offset" {
            // At most i64::MAX, what clients with signed 64-bit integers
            // (JSON in JavaScript aside) can say back.
            offset = percent_decode(value)
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|&v| i64::try_from(v).is_ok())
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "offset must be an integer from 0 to {}, not {value:?}",
                        i64::MAX
                    ))
                })?;
        }
    }
    Ok(offset)
}

fn parse_console_input(body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let input: json::ConsoleInput = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("body must be {{\"data\": \"...\"}}: {e}")))?;
    if input.data.len() > CONSOLE_WRITE_MAX {
        return Err(ApiError::too_large(format!(
            "console input is {} bytes; at most {CONSOLE_WRITE_MAX} per request",
            input.data.len()
        )));
    }
    Ok(input.data.into_bytes())
}

/// Routes and parses a request into an [`Action`] (no authentication:
/// that is [`Router::handle`]'s, and comes before body checks).
pub fn parse(req: &Request) -> Result<Action, ApiError> {
    let (path, query) = split_target(&req.path);
    let matched = match_route(&req.method, path)?;
    build_action(req, matched, path, query)
}

fn build_action(
    req: &Request,
    matched: Matched<'_>,
    path: &str,
    query: &str,
) -> Result<Action, ApiError> {
    // An image upload's body is the image (streamed by `serve`).
    let is_upload = matches!(
        matched,
        Matched::Api {
            endpoint: Endpoint::Images,
            ..
        }
    ) && req.method == "POST";
    let limit = body_limit(&matched);
    if req.body.len() > limit && !is_upload {
        return Err(ApiError::too_large(format!(
            "request body is {} bytes; at most {limit}",
            req.body.len()
        )));
    }
    let (endpoint, raw_name) = match matched {
        Matched::Static => {
            return Ok(Action::StaticFile {
                path: path.to_string(),
            })
        }
        Matched::Api { endpoint, name } => (endpoint, name),
    };
    let name = match raw_name {
        Some(raw) => percent_decode(raw)
            .ok_or_else(|| ApiError::bad_request(format!("malformed partition name {raw:?}")))?,
        None => String::new(),
    };
    let if_match = || req.header("if-match").map(str::to_string);
    let image_id = |name: &str| {
        name.parse::<u32>().map_err(|_| {
            ApiError::bad_request(format!("image id must be a decimal u32, not {name:?}"))
        })
    };
    Ok(match endpoint {
        Endpoint::Host => Action::GetHost,
        Endpoint::HostPci => Action::GetHostPci,
        Endpoint::Partitions if req.method == "POST" => Action::CreatePartition {
            patch: runtime::ConfigPatch::parse(&req.body, None)?,
        },
        Endpoint::Partitions => Action::ListPartitions,
        Endpoint::Partition if req.method == "PATCH" => Action::ChangePartition {
            patch: runtime::ConfigPatch::parse(&req.body, Some(&name))?,
            name,
            if_match: if_match(),
        },
        Endpoint::Partition if req.method == "DELETE" => Action::DeletePartition {
            name,
            if_match: if_match(),
        },
        Endpoint::Partition => Action::GetPartition { name },
        Endpoint::Resources => Action::GetResources,
        Endpoint::Images if req.method == "POST" => Action::UploadImage {
            query: query.to_string(),
        },
        Endpoint::Images => Action::ListImages,
        Endpoint::ImageFetch => Action::FetchImage {
            request: runtime::parse_fetch(&req.body)?,
        },
        Endpoint::Image if req.method == "DELETE" => Action::DeleteImage {
            id: image_id(&name)?,
        },
        Endpoint::Image => Action::GetImage {
            id: image_id(&name)?,
        },
        Endpoint::Start | Endpoint::Stop | Endpoint::Restart | Endpoint::Shutdown
            if !is_empty_body(&req.body) =>
        {
            return Err(ApiError::bad_request(format!(
                "{} takes no body (or {{}}), not {:?}",
                path.rsplit('/').next().unwrap_or(""),
                String::from_utf8_lossy(&req.body[..req.body.len().min(64)])
            )));
        }
        Endpoint::Start => Action::ChangeState {
            name,
            op: Transition::Start,
        },
        Endpoint::Stop => Action::ChangeState {
            name,
            op: Transition::Stop,
        },
        Endpoint::Restart => Action::ChangeState {
            name,
            op: Transition::Restart,
        },
        Endpoint::Shutdown => Action::ChangeState {
            name,
            op: Transition::Shutdown,
        },
        Endpoint::Console if req.method == "POST" => Action::WriteConsole {
            name,
            data: parse_console_input(&req.body)?,
        },
        Endpoint::Console => Action::ReadConsole {
            name,
            offset: parse_offset(query)?,
        },
        Endpoint::ConsoleHistory => Action::ConsoleHistory { name },
        Endpoint::Events => Action::ListEvents {
            since: parse_since(query)?,
        },
        Endpoint::EventStream => Action::EventStream {
            since: stream_cursor(req, query)?,
        },
        Endpoint::Config if req.method == "PUT" => Action::PutConfig {
            text: String::from_utf8(req.body.clone()).map_err(|_| {
                ApiError::bad_request("the configuration must be UTF-8 TOML").with_field("body")
            })?,
            if_match: if_match(),
            dry_run: config::parse_dry_run(query)?,
        },
        Endpoint::Config => Action::GetConfig,
        Endpoint::ConfigStore => Action::GetConfigStore,
        Endpoint::Metrics => Action::Metrics,
        Endpoint::OpenApi => Action::OpenApi,
        Endpoint::Whoami => Action::Whoami,
        Endpoint::Credentials if req.method == "POST" => {
            let (role, name) = json::parse_credential_request(&req.body)?;
            Action::CreateCredential { role, name }
        }
        Endpoint::Credentials => Action::ListCredentials,
        Endpoint::Credential => Action::RevokeCredential { id: name },
        Endpoint::CredentialRotate => Action::RotateCredential { id: name },
    })
}

/// A state change's body: nothing, whitespace, or an empty JSON object.
fn is_empty_body(body: &[u8]) -> bool {
    let text = body.trim_ascii();
    if text.is_empty() {
        return true;
    }
    matches!(
        serde_json::from_slice::<serde_json::Value>(text),
        Ok(serde_json::Value::Object(map)) if map.is_empty()
    )
}

/// The largest body a route takes: a configuration may be larger than
/// the other JSON bodies ([`config::CONFIG_MAX_BYTES`]).
fn body_limit(matched: &Matched<'_>) -> usize {
    match matched {
        Matched::Api {
            endpoint: Endpoint::Config,
            ..
        } => config::CONFIG_MAX_BYTES,
        _ => MAX_BODY_BYTES,
    }
}

/// The `since` query parameter (default 0).
fn parse_since(query: &str) -> Result<u64, ApiError> {
    let mut since = 0;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key == "since" {
            since = percent_decode(value)
                .and_then(|v| events::parse_cursor(&v))
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "since must be a non-negative integer, not {value:?}"
                    ))
                })?;
        }
    }
    Ok(since)
}

/// Where a stream starts: after its `Last-Event-ID` (a reconnecting
/// EventSource), else at `since` (default 0: everything kept).
fn stream_cursor(req: &Request, query: &str) -> Result<u64, ApiError> {
    let last = req
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("last-event-id"))
        .map(|(_, v)| v.as_str());
    match last {
        Some(v) => events::parse_cursor(v).map(|id| id + 1).ok_or_else(|| {
            ApiError::bad_request(format!("Last-Event-ID must be a u64, not {v:?}"))
        }),
        None => parse_since(query),
    }
}

// ---------------------------------------------------------------------------
// The router
// ---------------------------------------------------------------------------

/// Serves the API over a [`Backend`].
pub struct Router<B: Backend> {
    backend: B,
    /// What the manager knows of images beyond the hypervisor's list:
    /// names, upload progress, failures (by image id).
    images: std::collections::BTreeMap<u32, ImageMeta>,
    /// Every credential accepted (digests only) and the DRBG for new ones.
    pub credentials: auth::Credentials,
    /// The `Host` names answered besides IP literals and localhost.
    pub hosts: auth::HostPolicy,
    /// Who the request being executed came from.
    actor: Option<auth::Actor>,
    static_files: &'static [StaticFile],
    /// The hypervisor's events merged with the manager's own.
    pub events: events::EventLog,
    /// Every partition's console history ([`Router::follow_consoles`]).
    pub histories: events::Histories,
    logins: events::LoginLimiter,
    /// The app's heap counters (its counting global allocator), for
    /// `/metrics`; None when nothing counts (host tests).
    pub heap: Option<&'static memory::HeapCounters>,
    /// The configuration store (`store`): its URL and what was last done.
    pub store: store::StoreStatus,
    /// The Redfish service's sessions and pending two-step resets.
    pub redfish: redfish::State,
}

impl<B: Backend> Router<B> {
    /// `token_digest`: the boot credential's (operator) SHA-256, from the
    /// hypervisor. None matches nothing, so a manager started without one
    /// refuses everything that needs a credential. New credentials need
    /// [`Router::seed_credentials`] first.
    pub fn new(
        backend: B,
        token_digest: Option<[u8; 32]>,
        static_files: &'static [StaticFile],
    ) -> Self {
        Router {
            backend,
            images: std::collections::BTreeMap::new(),
            credentials: auth::Credentials::new(token_digest, None),
            hosts: auth::HostPolicy::default(),
            actor: None,
            static_files,
            events: events::EventLog::new(),
            histories: events::Histories::new(),
            heap: None,
            logins: events::LoginLimiter::default(),
            store: store::StoreStatus::default(),
            redfish: redfish::State::default(),
        }
    }

    /// Seeds the DRBG new credentials are made from (32 bytes of the
    /// hypervisor's ENTROPY call); without it none is made.
    pub fn seed_credentials(&mut self, seed: [u8; 32]) {
        let boot = std::mem::replace(&mut self.credentials, auth::Credentials::new(None, None));
        self.credentials = boot.with_seed(seed);
    }

    /// Records one of the manager's own events (`kind`: `config`,
    /// `login_refused`, ...; the API's names), after taking in the
    /// hypervisor's newer ones so that the order is right. The one call
    /// for every part of the manager that has something to report (a
    /// partition created, changed or deleted: `config`).
    pub fn record(&mut self, kind: &str, partition: Option<&str>, message: &str) -> Option<u64> {
        self.poll_events();
        let now = self.backend.wall_clock_ms().ok();
        self.events.record(kind, partition, message, now)
    }

    /// Takes in the hypervisor's events newer than those already read
    /// (EVENTS_READ, as many calls as it takes, at most 16 per poll).
    pub fn poll_events(&mut self) {
        for _ in 0..16 {
            let from = self.events.hv_next();
            match self.backend.events(from) {
                Ok((list, next, _dropped)) => {
                    self.events.ingest(&list, next);
                    if list.is_empty() || next <= from {
                        return;
                    }
                }
                // A hypervisor without the call: the manager's own only.
                Err(_) => return,
            }
        }
    }

    /// Reads every partition's console on from where its history stopped
    /// (the manager's follower thread calls this about once a second).
    pub fn follow_consoles(&mut self) {
        let Ok(parts) = self.backend.partitions() else {
            return;
        };
        for p in parts {
            self.follow_console(p.index, &p.name);
        }
        redfish::finish_pending(self);
    }

    fn follow_console(&mut self, index: u32, name: &str) {
        let mut buf = vec![0u8; 4 * CONSOLE_READ_MAX];
        // Bounded: a partition printing faster than this is read on the
        // next round (the hypervisor's ring counts what it overwrote).
        for _ in 0..16 {
            let cursor = self.histories.get(name).cursor;
            let Ok(read) = self.backend.console_read(index, cursor, &mut buf) else {
                return;
            };
            let len = read.len.min(buf.len());
            self.histories
                .get(name)
                .append(&buf[..len], read.next, read.dropped);
            if len == 0 {
                return;
            }
        }
    }

    /// Where an event stream asked for by `req` starts, once routed and
    /// authorised like any request (the error response otherwise); the
    /// caller then sends [`events::EventStream::poll`]'s frames on it.
    pub fn open_stream(&mut self, req: &Request) -> Result<events::EventStream, Response> {
        let (path, query) = split_target(&req.path);
        if redfish::is_redfish(path) {
            return redfish::open_stream(self, req);
        }
        let result = match_route(&req.method, path).and_then(|m| {
            self.admit(req, &m)?;
            build_action(req, m, path, query)
        });
        match result {
            Ok(Action::EventStream { since }) => {
                self.poll_events();
                Ok(events::EventStream::new(since, Instant::now()))
            }
            Ok(_) => Err(ApiError::not_found("not the event stream").to_response()),
            Err(e) => Err(e.to_response()),
        }
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// Answers one request.
    /// The `Date` header for a response sent now (IMF-fixdate, from the
    /// hypervisor's WALL_CLOCK); None when the hypervisor has no clock
    /// (ABI < 2.2, or a host without UEFI GetTime or a PL031).
    pub fn date_header(&mut self) -> Option<String> {
        self.backend.wall_clock_ms().ok().map(time::imf_fixdate)
    }

    pub fn handle(&mut self, req: &Request) -> Response {
        match self.try_handle(req) {
            Ok(resp) => resp,
            Err(err) => err.to_response(),
        }
    }

    fn try_handle(&mut self, req: &Request) -> Result<Response, ApiError> {
        let (path, query) = split_target(&req.path);
        if redfish::is_redfish(path) {
            return Ok(redfish::handle(self, req));
        }
        let matched = match_route(&req.method, path)?;
        self.actor = self.admit(req, &matched)?;
        let action = build_action(req, matched, path, query)?;
        if let Action::UploadImage { query } = action {
            let mut body = &req.body[..];
            return Ok(runtime::drive_upload(self, req, &query, &mut body));
        }
        self.execute(action)
    }

    /// A `login_refused` event for a request refused 401 (rate limited:
    /// [`events::LOGIN_BURST`] per [`events::LOGIN_WINDOW`]).
    fn login_refused(&mut self, req: &Request, why: &str) {
        let Some(suppressed) = self.logins.check(Instant::now()) else {
            return;
        };
        let (path, _) = split_target(&req.path);
        let from = req.peer.map(|p| format!(" from {p}")).unwrap_or_default();
        let mut message = format!("{} {path}{from}: {why}", req.method);
        if suppressed > 0 {
            message.push_str(&format!(" ({suppressed} more refused before, not listed)"));
        }
        self.record("login_refused", None, &message);
    }

    /// Who may ask (see `auth`): `Host`, then `Origin` on a mutation, then
    /// the failure throttle, the bearer token and its role. Ok(None) for
    /// what is open to anyone; every refusal of a credential or role is a
    /// `login_refused` event.
    fn admit(
        &mut self,
        req: &Request,
        matched: &Matched<'_>,
    ) -> Result<Option<auth::Actor>, ApiError> {
        self.check_host_origin(req)?;
        let endpoint = match matched {
            Matched::Api { endpoint, .. } => Some(*endpoint),
            Matched::Static => None,
        };
        let Some(needed) = auth::required_role(&req.method, endpoint) else {
            return Ok(None);
        };
        let now = Instant::now();
        if let Some(why) = self.credentials.throttled(req.peer, now) {
            let mut e = ApiError::new(429, "too_many_requests", why.sentence(req.peer));
            e.retry_after = Some(why.retry_after());
            self.login_refused(req, &e.detail);
            return Err(e);
        }
        let token = match bearer(req) {
            Ok(t) => t,
            Err(e) => {
                self.login_refused(req, &e.detail);
                return Err(e);
            }
        };
        let Some(actor) = self.credentials.check(token) else {
            self.credentials.failed(req.peer, now);
            let e = ApiError::unauthorized("wrong token");
            self.login_refused(req, &e.detail);
            return Err(e);
        };
        if actor.role < needed {
            let e = ApiError::forbidden(format!(
                "this needs the {} role; credential {} is a {}",
                needed.name(),
                actor.id,
                actor.role.name()
            ));
            self.login_refused(req, &format!("{actor}: {}", e.detail));
            return Err(e);
        }
        Ok(Some(actor))
    }

    /// `Host` (421 unless ours) and, on a mutation, `Origin` (403 unless
    /// the same host): the first checks of every request, REST or Redfish.
    fn check_host_origin(&self, req: &Request) -> Result<(), ApiError> {
        // No Host at all is an HTTP/1.0 client, never a browser.
        let host = req.header("host");
        if let Some(host) = host {
            if !self.hosts.allows(host) {
                return Err(ApiError::new(
                    421,
                    "misdirected",
                    format!("Host {host:?} is not one of this manager's names or addresses"),
                ));
            }
        }
        if req.method != "GET" && req.method != "HEAD" {
            if let Some(origin) = req.header("origin") {
                if !host.is_some_and(|h| auth::same_origin(origin, h)) {
                    return Err(ApiError::forbidden(format!(
                        "Origin {origin:?} is not this manager's: cross-site requests are refused"
                    )));
                }
            }
        }
        Ok(())
    }

    /// [`Router::admit`] for a request routed elsewhere (an upload, a
    /// fetch): Ok once it may go on.
    pub fn authorize(&mut self, req: &Request) -> Result<(), ApiError> {
        let (path, _) = split_target(&req.path);
        let matched = match_route(&req.method, path)?;
        self.actor = self.admit(req, &matched)?;
        Ok(())
    }

    /// Carries out an action that has passed every check.
    pub fn execute(&mut self, action: Action) -> Result<Response, ApiError> {
        match action {
            Action::GetHost => {
                let abi = self
                    .backend
                    .abi_version()
                    .map_err(|e| ApiError::from_call(e, "ABI_VERSION"))?;
                let info = self
                    .backend
                    .host_info()
                    .map_err(|e| ApiError::from_call(e, "HOST_INFO"))?;
                let parts = self.partitions()?;
                let mut host = json::Host::new(&info, abi, &parts);
                // A hypervisor without the call (ABI < 2.2) or a clock: null.
                host.time = self.backend.wall_clock_ms().ok().map(time::rfc3339);
                // A hypervisor without GIC_INFO (ABI < 3.3): null.
                host.gic = self
                    .backend
                    .gic_info()
                    .ok()
                    .map(|g| json::GicHost::from(&g.host));
                Ok(json_response(200, &host))
            }
            Action::GetHostPci => {
                let mut functions = Vec::new();
                for p in self.partitions()? {
                    let d = self
                        .backend
                        .detail(p.index)
                        .map_err(|e| ApiError::from_call(e, &p.name))?;
                    functions.extend(
                        d.pci
                            .iter()
                            .map(|f| json::PciFunction::new(f, Some(&p.name))),
                    );
                }
                functions.sort_by(|a, b| a.bdf.cmp(&b.bdf));
                Ok(json_response(200, &json::HostPci { functions }))
            }
            Action::ListPartitions => {
                let mut partitions = Vec::new();
                let gic = self.backend.gic_info().ok();
                for p in self.partitions()? {
                    let mut json = json::Partition::from(&p);
                    json.gic_interface = interface_of(gic.as_ref(), p.index);
                    // Its config, when the hypervisor hands out plans (3.0).
                    json.config = self
                        .backend
                        .detail(p.index)
                        .ok()
                        .map(|d| json::Config::from_plan(&d.plan));
                    partitions.push(json);
                }
                Ok(json_response(200, &json::PartitionList { partitions }))
            }
            Action::GetPartition { name } => {
                let index = self.lookup(&name)?.index;
                let detail = self
                    .backend
                    .detail(index)
                    .map_err(|e| ApiError::from_call(e, &name))?;
                let mut body = json::PartitionDetailJson::from(&detail);
                body.summary.gic_interface =
                    interface_of(self.backend.gic_info().ok().as_ref(), index);
                let mut resp = json_response(200, &body);
                resp.headers.push(("ETag", runtime::etag(&detail.plan)));
                Ok(resp)
            }
            Action::CreatePartition { patch } => self.create_partition(patch),
            Action::ChangePartition {
                name,
                patch,
                if_match,
            } => self.change_partition(&name, patch, if_match.as_deref()),
            Action::DeletePartition { name, if_match } => {
                self.delete_partition(&name, if_match.as_deref())
            }
            Action::GetConfig => self.get_config(),
            Action::GetConfigStore => Ok(json_response(200, &self.store)),
            Action::PutConfig {
                text,
                if_match,
                dry_run,
            } => {
                let (diff, tag) = self.import_config(&text, if_match.as_deref(), dry_run)?;
                let mut resp = json_response(200, &json::ImportResult::new(diff, dry_run));
                resp.headers.push(("ETag", tag));
                Ok(resp)
            }
            Action::GetResources => self.resources(),
            Action::ListImages => self.list_images(),
            Action::GetImage { id } => self.get_image(id),
            Action::DeleteImage { id } => self.delete_image(id),
            // Routed to runtime::drive_upload before execute.
            Action::UploadImage { .. } => Err(ApiError::hypervisor(
                500,
                "an image upload reached execute: it is streamed by serve()",
            )),
            Action::FetchImage { .. } => Err(ApiError::hypervisor(
                503,
                "POST /api/v1/images/fetch needs the shared router (pinfold_manager_api::serve)",
            )),
            Action::ChangeState { name, op } => self.change_state(&name, op),
            Action::ReadConsole { name, offset } => self.read_console(&name, offset),
            Action::WriteConsole { name, data } => {
                let target = self.lookup(&name)?;
                if target.management {
                    return Err(ApiError::forbidden(format!(
                        "{name} is the management partition: its console input is refused over \
                         the API (use the host console)"
                    )));
                }
                let index = target.index;
                let accepted = self
                    .write_console(index, &data)
                    .map_err(|e| ApiError::from_call(e, &name))?;
                Ok(json_response(
                    202,
                    &json::Accepted {
                        accepted: accepted as u64,
                        remaining: (data.len() - accepted) as u64,
                    },
                ))
            }
            Action::ConsoleHistory { name } => {
                let index = self.lookup(&name)?.index;
                self.follow_console(index, &name);
                let text =
                    String::from_utf8_lossy(&self.histories.get(&name).to_vec()).into_owned();
                let mut resp = Response::new(200, TEXT_PLAIN, text.into_bytes());
                resp.headers.push((
                    "Content-Disposition",
                    format!(
                        "attachment; filename=\"{}-console.log\"",
                        filename_safe(&name)
                    ),
                ));
                Ok(resp)
            }
            Action::ListEvents { since } => {
                self.poll_events();
                Ok(json_response(
                    200,
                    &self.events.since(since, EVENTS_PER_REPLY),
                ))
            }
            Action::EventStream { since } => {
                self.poll_events();
                let list = self.events.since(since, events::EVENTS_KEPT);
                let body: String = list.events.iter().map(events::sse_frame).collect();
                let mut resp = Response::new(200, EVENT_STREAM, body.into_bytes());
                resp.headers.push(("Cache-Control", "no-cache".to_string()));
                Ok(resp)
            }
            Action::Metrics => {
                let mut details = Vec::new();
                for p in self.partitions()? {
                    let d = self
                        .backend
                        .detail(p.index)
                        .map_err(|e| ApiError::from_call(e, &p.name))?;
                    details.push(d);
                }
                let memory = memory::ManagerMemory {
                    heap: self.heap.map(memory::HeapCounters::read),
                    history_bytes: self.histories.reserved(),
                    histories: self.histories.len(),
                    events: self.events.len(),
                };
                Ok(Response::new(
                    200,
                    metrics::CONTENT_TYPE,
                    metrics::render(&details, &memory).into_bytes(),
                ))
            }
            Action::OpenApi => Ok(Response::new(200, JSON, OPENAPI_JSON.as_bytes().to_vec())),
            Action::StaticFile { path } => self.static_file(&path),
            Action::Whoami => {
                let actor = self.actor.clone();
                let (id, role) = actor
                    .map(|a| (a.id, a.role.name()))
                    .unwrap_or_else(|| (String::new(), ""));
                Ok(json_response(200, &json::Whoami { id, role }))
            }
            Action::ListCredentials => {
                let list: Vec<json::CredentialInfo> = self
                    .credentials
                    .list()
                    .iter()
                    .map(json::CredentialInfo::from)
                    .collect();
                Ok(json_response(200, &list))
            }
            Action::CreateCredential { role, name } => {
                let now = self.backend.wall_clock_ms().ok();
                let (c, token) = self
                    .credentials
                    .create(role, &name, now)
                    .map_err(credential_error)?;
                self.record_auth(&format!(
                    "made {} credential {} ({})",
                    c.role.name(),
                    c.id,
                    c.name
                ));
                let mut resp = json_response(201, &json::NewCredential::new(&c, token));
                resp.headers
                    .push(("Location", format!("/api/v1/auth/credentials/{}", c.id)));
                Ok(resp)
            }
            Action::RotateCredential { id } => {
                let now = self.backend.wall_clock_ms().ok();
                let (c, token) = self
                    .credentials
                    .rotate(&id, now)
                    .map_err(credential_error)?;
                self.record_auth(&format!("rotated {} credential {}", c.role.name(), c.id));
                Ok(json_response(200, &json::NewCredential::new(&c, token)))
            }
            Action::RevokeCredential { id } => {
                let c = self.credentials.revoke(&id).map_err(credential_error)?;
                self.record_auth(&format!("revoked {} credential {}", c.role.name(), c.id));
                Ok(json_response(
                    200,
                    &serde_json::json!({"id": c.id, "revoked": true}),
                ))
            }
        }
    }

    /// Who the request being executed came from, for an event's text.
    pub(crate) fn actor_name(&self) -> String {
        self.actor
            .as_ref()
            .map_or_else(|| "nobody".to_string(), |a| a.to_string())
    }

    /// A `config` event for a credential change, naming who made it.
    fn record_auth(&mut self, what: &str) {
        let by = self.actor_name();
        self.record("config", None, &format!("{by} {what}"));
    }

    fn partitions(&mut self) -> Result<Vec<PartitionSummary>, ApiError> {
        self.backend
            .partitions()
            .map_err(|e| ApiError::from_call(e, "LIST_PARTITIONS"))
    }

    fn lookup(&mut self, name: &str) -> Result<PartitionSummary, ApiError> {
        self.partitions()?
            .into_iter()
            .find(|p| p.name == name)
            .ok_or_else(|| ApiError::not_found(format!("no partition named {name:?}")))
    }

    fn change_state(&mut self, name: &str, op: Transition) -> Result<Response, ApiError> {
        let verb = match op {
            Transition::Start => "start",
            Transition::Stop => "stop",
            Transition::Restart => "restart",
            Transition::Shutdown => "shut down",
            Transition::Configure => "change",
        };
        let p = self.lookup(name)?;
        if p.management {
            return Err(ApiError::conflict(format!(
                "cannot {verb} {name}: it is the management partition serving this API"
            )));
        }
        if !p.state.allows(op) {
            let state = json::State::from(p.state).as_str();
            return Err(ApiError::conflict(format!(
                "cannot {verb} {name}: it is {state}"
            )));
        }
        let result = match op {
            Transition::Start => self.backend.start(p.index),
            Transition::Stop => self.backend.stop(p.index),
            Transition::Restart => self.backend.restart(p.index),
            Transition::Shutdown => self.backend.shutdown(p.index),
            // Not routed here: configuration has its own endpoints.
            Transition::Configure => Err(pinfold_abi::CallError::Refused(
                pinfold_abi::AbiError::NotSupported,
            )),
        };
        result.map_err(|e| ApiError::from_call(e, &format!("{verb} {name}")))?;
        // Report the state the hypervisor now has (a stop may still be
        // under way); if the partition vanished, the state we asked for.
        let state = self
            .partitions()?
            .into_iter()
            .find(|q| q.index == p.index)
            .map(|q| json::State::from(q.state))
            .unwrap_or(match op {
                Transition::Stop => json::State::Stopping,
                Transition::Shutdown => json::State::ShuttingDown,
                Transition::Configure => json::State::Stopped,
                Transition::Start | Transition::Restart => json::State::Running,
            });
        Ok(json_response(
            202,
            &json::TransitionResult {
                name: name.to_string(),
                state,
            },
        ))
    }

    /// Writes `data` to console input in order, in calls of at most
    /// [`CONSOLE_WRITE_CHUNK`] bytes, each starting where the last one
    /// stopped; pauses [`CONSOLE_WRITE_RETRY`] whenever the partition took
    /// less than offered, and gives up after [`CONSOLE_WRITE_WAIT`] of
    /// pausing or of wall time. Returns how many bytes were taken (a
    /// prefix). A call failing after some bytes went in ends the write with
    /// those, so the answer never hides input the partition has.
    fn write_console(&mut self, index: u32, data: &[u8]) -> Result<usize, CallError> {
        let started = Instant::now();
        let mut sent = 0;
        let mut paused = Duration::ZERO;
        while sent < data.len() {
            let end = data.len().min(sent + CONSOLE_WRITE_CHUNK);
            let taken = match self.backend.console_write(index, &data[sent..end]) {
                // More than offered would be a broken reply: count what was offered.
                Ok(n) => n.min(end - sent),
                Err(e) if sent == 0 => return Err(e),
                Err(_) => break,
            };
            sent += taken;
            if sent < end {
                if paused >= CONSOLE_WRITE_WAIT || started.elapsed() >= CONSOLE_WRITE_WAIT {
                    break;
                }
                self.backend.pause(CONSOLE_WRITE_RETRY);
                paused += CONSOLE_WRITE_RETRY;
            }
        }
        Ok(sent)
    }

    fn read_console(&mut self, name: &str, offset: u64) -> Result<Response, ApiError> {
        let index = self.lookup(name)?.index;
        let mut buf = vec![0u8; CONSOLE_READ_MAX];
        let read = self
            .backend
            .console_read(index, offset, &mut buf)
            .map_err(|e| ApiError::from_call(e, name))?;
        let got = &buf[..read.len.min(buf.len())];
        // Hold back a UTF-8 sequence cut at the end of this chunk so the
        // next read returns it whole instead of two replacement characters.
        let keep = utf8_complete_prefix(got);
        let next = read.next.saturating_sub((got.len() - keep) as u64);
        let chunk = json::ConsoleChunk {
            offset,
            next,
            dropped: read.dropped,
            data: String::from_utf8_lossy(&got[..keep]).into_owned(),
        };
        Ok(json_response(200, &chunk))
    }

    fn static_file(&self, path: &str) -> Result<Response, ApiError> {
        let wanted = if path == "/" || path.is_empty() {
            "/index.html"
        } else {
            path
        };
        let wanted = wanted.trim_start_matches('/');
        self.static_files
            .iter()
            .find(|(p, _, _)| p.trim_start_matches('/') == wanted)
            .map(|(_, content_type, bytes)| Response::new(200, content_type, bytes.to_vec()))
            .ok_or_else(|| ApiError::not_found(format!("no file {path}")))
    }
}

/// Length of `bytes` without a trailing, incomplete UTF-8 sequence. Only a
/// cut sequence is held back; invalid bytes elsewhere pass through (and
/// become U+FFFD), so a guest writing garbage cannot stall the reader.
fn utf8_complete_prefix(bytes: &[u8]) -> usize {
    // A sequence is at most 4 bytes: look back for its lead byte.
    for back in 1..=bytes.len().min(3) {
        let b = bytes[bytes.len() - back];
        if b & 0xC0 == 0x80 {
            continue; // continuation byte
        }
        let needed = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return bytes.len(),
        };
        return if needed > back {
            bytes.len() - back
        } else {
            bytes.len()
        };
    }
    bytes.len()
}

/// Compares without an early exit, so response time does not reveal how
/// much of a guessed token was right.
/// SHA-256 of a bearer token, as the hypervisor hands it over.
pub fn token_digest(token: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token).into()
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(req: &Request) -> Result<&str, ApiError> {
    let header = req
        .header("authorization")
        .map(str::trim)
        .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer <token>"))?;
    // The scheme name is case-insensitive (RFC 7235 2.1).
    match header.split_once(' ') {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => Ok(rest.trim()),
        _ => Err(ApiError::unauthorized(
            "Authorization must use the Bearer scheme",
        )),
    }
}

/// A refused credential change in the API's terms.
fn credential_error(e: auth::MakeError) -> ApiError {
    match e {
        auth::MakeError::NoEntropy => ApiError::hypervisor(503, e.sentence()),
        auth::MakeError::TooMany | auth::MakeError::LastOperator => {
            ApiError::conflict(e.sentence())
        }
        auth::MakeError::NotFound => ApiError::not_found(e.sentence()),
    }
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
