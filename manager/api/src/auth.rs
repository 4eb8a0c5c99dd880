//! Credentials and roles: who may do what, decided before anything else
//! about a request ([`Router::handle`](crate::Router) calls [`Policy`] and
//! [`Credentials`] first).
//!
//! - **Roles.** `viewer` reads everything the API serves (partitions,
//!   console output and history, events and their stream, metrics,
//!   images, resources); `operator` also changes things (every POST, PUT,
//!   PATCH, DELETE) and manages credentials. Open without a credential:
//!   the web UI's static files, `GET /api/v1/host` (version and health)
//!   and `GET /api/v1/openapi.json` (the contract) ([`required_role`]).
//! - **Credentials.** Bearer tokens, held only as SHA-256 digests. The boot
//!   credential (`boot`, operator) is the one the hypervisor hands over
//!   (MGMT_TOKEN_DIGEST: the plan's, the bundle's, or the token it made at
//!   boot and printed once). More are made here from a ChaCha20 DRBG seeded
//!   from the hypervisor's ENTROPY call: 32 random bytes as 64 hex digits,
//!   shown once in the reply that makes them. Without entropy (the
//!   hypervisor found no source) none is made. Any credential may be
//!   rotated (new token, same id and role) or revoked at run time; the
//!   last operator credential cannot be revoked (nobody could make a new
//!   one without a reboot).
//! - **Kept across restarts** with a configuration store: [`Credentials::export`]
//!   (digests only) and [`Credentials::import`] (`store.rs`,
//!   `credentials.json`); the hypervisor's boot digest is kept only once
//!   rotated or revoked, so the next boot's own token works.
//! - **Failed attempts** are counted per client address (the server puts
//!   the peer's address in [`Request::peer`](crate::Request)) in a window
//!   ([`FAIL_LIMIT`] per [`FAIL_WINDOW`]); past the limit every request
//!   from that address that presents a credential is answered 429 with
//!   `Retry-After` until its window ends, right or wrong, so one guesser
//!   runs at most that fast and the right token from another address still
//!   works. The table keeps [`FAIL_CLIENTS`] addresses; a new one when it
//!   is full takes the place of the one whose window ended, else of the
//!   one that failed least recently (so a guesser cannot grow it). Over all
//!   addresses at most [`FAIL_GLOBAL_LIMIT`] failures per window are
//!   tolerated (a guesser with many addresses, or one that cycles the
//!   table): past that every client is answered 429 until the window ends.
//!   A request without a peer address (tests) counts as one client.
//! - **Host and Origin.** A request's `Host` must be an IP literal
//!   (v4 or bracketed v6, any port), `localhost`, or a configured name
//!   ([`HostPolicy`]): a DNS-rebinding page reaches the manager under its
//!   own name and is refused (421). A mutation that carries `Origin` must
//!   come from the same host (403): another site's page cannot post.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

use crate::{constant_time_eq, token_digest, Endpoint};

/// Failed credential checks tolerated per window from one address.
pub const FAIL_LIMIT: u32 = 10;
/// Failed credential checks tolerated per window from all addresses.
pub const FAIL_GLOBAL_LIMIT: u32 = 100;
/// Client addresses whose failures are kept.
pub const FAIL_CLIENTS: usize = 64;
/// The window failed checks are counted in.
pub const FAIL_WINDOW: Duration = Duration::from_secs(10);
/// Most credentials kept (the boot one included).
pub const MAX_CREDENTIALS: usize = 32;
/// Longest credential name.
pub const MAX_NAME_LEN: usize = 64;

/// What a credential may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Viewer,
    Operator,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "viewer" => Some(Role::Viewer),
            "operator" => Some(Role::Operator),
            _ => None,
        }
    }
}

/// The role a request needs: None for what is open to anyone.
pub fn required_role(method: &str, endpoint: Option<Endpoint>) -> Option<Role> {
    // HEAD is routed like GET and needs what GET needs.
    let method = if method == "HEAD" { "GET" } else { method };
    match (method, endpoint) {
        // The web UI's files: the page itself asks for a token.
        ("GET", None) => None,
        ("GET", Some(Endpoint::Host | Endpoint::OpenApi)) => None,
        ("GET", Some(Endpoint::Credentials | Endpoint::Credential)) => Some(Role::Operator),
        ("GET", Some(_)) => Some(Role::Viewer),
        _ => Some(Role::Operator),
    }
}

/// One credential: never the token, only its digest.
#[derive(Debug, Clone)]
pub struct Credential {
    /// Public id (`boot`, `c1`, `c2`, ...), never reused in a run.
    pub id: String,
    pub name: String,
    pub role: Role,
    digest: [u8; 32],
    /// When it was made or last rotated (Unix ms), if the host has a clock.
    pub since_ms: Option<u64>,
}

/// Who a request came from, once its credential checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub id: String,
    pub role: Role,
}

impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.role.name(), self.id)
    }
}

/// Why no credential is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MakeError {
    /// No entropy: the sentence says so.
    NoEntropy,
    TooMany,
    NotFound,
    /// Revoking it would leave no operator.
    LastOperator,
}

impl MakeError {
    pub fn sentence(&self) -> String {
        match self {
            MakeError::NoEntropy => "no credential can be generated: the hypervisor found no \
                 entropy source at boot (no /chosen/rng-seed, no EFI_RNG_PROTOCOL, no RNDR)"
                .to_string(),
            MakeError::TooMany => {
                format!("at most {MAX_CREDENTIALS} credentials; revoke one first")
            }
            MakeError::NotFound => "no credential with that id".to_string(),
            MakeError::LastOperator => {
                "the last operator credential cannot be revoked (rotate it instead)".to_string()
            }
        }
    }
}

/// Every credential the manager accepts, and the DRBG that makes tokens.
pub struct Credentials {
    list: Vec<Credential>,
    rng: Option<ChaCha20Rng>,
    next_id: u32,
    failures: Throttle,
    /// Bumped by every change of the list (made, rotated, revoked,
    /// imported): what the configuration store compares to know it must
    /// write `credentials.json` again.
    generation: u64,
    /// The boot credential was rotated here (so its digest is no longer
    /// the hypervisor's and is kept with the others).
    boot_rotated: bool,
}

impl Credentials {
    /// `boot`: the hypervisor's digest (None: there is none, for want of
    /// entropy and of a plan token). `seed`: 32 bytes from ENTROPY (None:
    /// no source; nothing is ever generated).
    pub fn new(boot: Option<[u8; 32]>, seed: Option<[u8; 32]>) -> Credentials {
        Credentials {
            list: boot
                .map(|digest| Credential {
                    id: "boot".to_string(),
                    name: "boot token".to_string(),
                    role: Role::Operator,
                    digest,
                    since_ms: None,
                })
                .into_iter()
                .collect(),
            rng: seed.map(ChaCha20Rng::from_seed),
            next_id: 1,
            failures: Throttle::default(),
            generation: 0,
            boot_rotated: false,
        }
    }

    /// The same credentials, new ones made from `seed` from now on.
    pub fn with_seed(mut self, seed: [u8; 32]) -> Credentials {
        self.rng = Some(ChaCha20Rng::from_seed(seed));
        self
    }

    pub fn list(&self) -> &[Credential] {
        &self.list
    }

    pub fn can_generate(&self) -> bool {
        self.rng.is_some()
    }

    /// The credential `token` is, if any (every digest compared in
    /// constant time, so timing tells nothing about which or how much).
    pub fn check(&self, token: &str) -> Option<Actor> {
        let presented = token_digest(token.as_bytes());
        let mut found = None;
        for c in &self.list {
            if constant_time_eq(&presented, &c.digest) && found.is_none() {
                found = Some(Actor {
                    id: c.id.clone(),
                    role: c.role,
                });
            }
        }
        found
    }

    /// A Redfish session token (`redfish`): 32 bytes from the same DRBG
    /// as credential tokens, as 64 hex digits; the caller keeps only its
    /// digest.
    pub fn session_token(&mut self) -> Result<String, MakeError> {
        self.token()
    }

    /// Whether credential `id` still exists (a session ends with it).
    pub fn has(&self, id: &str) -> bool {
        self.list.iter().any(|c| c.id == id)
    }

    fn token(&mut self) -> Result<String, MakeError> {
        let rng = self.rng.as_mut().ok_or(MakeError::NoEntropy)?;
        let mut bytes = [0u8; 32];
        rng.fill_bytes(&mut bytes);
        Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// A new credential: it and its token (shown once).
    pub fn create(
        &mut self,
        role: Role,
        name: &str,
        now_ms: Option<u64>,
    ) -> Result<(Credential, String), MakeError> {
        if self.list.len() >= MAX_CREDENTIALS {
            return Err(MakeError::TooMany);
        }
        let token = self.token()?;
        let id = format!("c{}", self.next_id);
        self.next_id += 1;
        let c = Credential {
            name: if name.is_empty() {
                id.clone()
            } else {
                name.to_string()
            },
            id,
            role,
            digest: token_digest(token.as_bytes()),
            since_ms: now_ms,
        };
        self.list.push(c.clone());
        self.generation += 1;
        Ok((c, token))
    }

    /// A new token for credential `id` (same id, name and role); the old
    /// token stops working at once.
    pub fn rotate(
        &mut self,
        id: &str,
        now_ms: Option<u64>,
    ) -> Result<(Credential, String), MakeError> {
        let index = self
            .list
            .iter()
            .position(|c| c.id == id)
            .ok_or(MakeError::NotFound)?;
        let token = self.token()?;
        let c = &mut self.list[index];
        c.digest = token_digest(token.as_bytes());
        c.since_ms = now_ms;
        let c = c.clone();
        self.boot_rotated |= c.id == "boot";
        self.generation += 1;
        Ok((c, token))
    }

    /// Remove credential `id`; its token stops working at once.
    pub fn revoke(&mut self, id: &str) -> Result<Credential, MakeError> {
        let index = self
            .list
            .iter()
            .position(|c| c.id == id)
            .ok_or(MakeError::NotFound)?;
        let operators = self
            .list
            .iter()
            .filter(|c| c.role == Role::Operator)
            .count();
        if self.list[index].role == Role::Operator && operators == 1 {
            return Err(MakeError::LastOperator);
        }
        self.generation += 1;
        Ok(self.list.remove(index))
    }

    /// Changes so far (see the field).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every credential as `credentials.json` keeps them: ids, names,
    /// roles, SHA-256 digests (hex) and times, never a token, and the next
    /// id (so ids are never reused across restarts).
    pub fn export(&self) -> String {
        let boot = match self.list.iter().find(|c| c.id == "boot") {
            None => "revoked",
            Some(_) if self.boot_rotated => "stored",
            Some(_) => "hypervisor",
        };
        let list: Vec<serde_json::Value> = self
            .list
            .iter()
            // The hypervisor's own boot digest is not kept: the next boot
            // may have another token (one generated at boot), and that
            // one must work.
            .filter(|c| c.id != "boot" || boot == "stored")
            .map(|c| {
                serde_json::json!({
                    "id": c.id,
                    "name": c.name,
                    "role": c.role.name(),
                    "sha256": crate::json::hex(&c.digest),
                    "since_ms": c.since_ms,
                })
            })
            .collect();
        serde_json::json!({
            "version": 1,
            "boot": boot,
            "next_id": self.next_id,
            "credentials": list,
        })
        .to_string()
    }

    /// Replaces every credential with an [`export`](Self::export)ed list
    /// (the boot one included: a rotated or revoked boot token stays so).
    /// Refused, naming the field, unless it is well formed with at least
    /// one operator, at most [`MAX_CREDENTIALS`] and unique ids; the list
    /// is unchanged then.
    pub fn import(&mut self, text: &str) -> Result<(), String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("credentials.json: {e}"))?;
        if v["version"] != 1 {
            return Err("credentials.json: version: must be 1".into());
        }
        let next_id = v["next_id"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or("credentials.json: next_id: must be a u32")?;
        let items = v["credentials"]
            .as_array()
            .ok_or("credentials.json: credentials: must be an array")?;
        if items.len() > MAX_CREDENTIALS {
            return Err(format!(
                "credentials.json: credentials: {} entries; at most {MAX_CREDENTIALS}",
                items.len()
            ));
        }
        let mut list = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let field = |name: &str| format!("credentials.json: credentials[{i}].{name}");
            let text_of = |name: &str| {
                item[name]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{}: must be a string", field(name)))
            };
            let id = text_of("id")?;
            if id.is_empty()
                || id.len() > MAX_NAME_LEN
                || list.iter().any(|c: &Credential| c.id == id)
            {
                return Err(format!("{}: empty, too long or not unique", field("id")));
            }
            let name = text_of("name")?;
            if name.chars().count() > MAX_NAME_LEN {
                return Err(format!("{}: longer than {MAX_NAME_LEN}", field("name")));
            }
            let role = Role::parse(&text_of("role")?)
                .ok_or_else(|| format!("{}: viewer or operator", field("role")))?;
            let hex = text_of("sha256")?;
            let mut digest = [0u8; 32];
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("{}: 64 hex digits", field("sha256")));
            }
            for (k, byte) in digest.iter_mut().enumerate() {
                *byte = u8::from_str_radix(&hex[2 * k..2 * k + 2], 16)
                    .map_err(|_| format!("{}: 64 hex digits", field("sha256")))?;
            }
            let since_ms = match &item["since_ms"] {
                serde_json::Value::Null => None,
                n => Some(
                    n.as_u64()
                        .ok_or_else(|| format!("{}: a u64 or null", field("since_ms")))?,
                ),
            };
            list.push(Credential {
                id,
                name,
                role,
                digest,
                since_ms,
            });
        }
        let boot = v["boot"].as_str().unwrap_or("");
        match boot {
            // The hypervisor's boot credential of this boot stands.
            "hypervisor" => {
                if list.iter().any(|c| c.id == "boot") {
                    return Err(
                        "credentials.json: boot: \"hypervisor\" with a stored boot entry".into(),
                    );
                }
                if let Some(current) = self.list.iter().find(|c| c.id == "boot") {
                    list.insert(0, current.clone());
                }
            }
            "stored" | "revoked" => {
                if list.iter().any(|c| c.id == "boot") != (boot == "stored") {
                    return Err(format!(
                        "credentials.json: boot: {boot:?} does not match the list"
                    ));
                }
            }
            _ => return Err("credentials.json: boot: hypervisor, stored or revoked".into()),
        }
        if !list.iter().any(|c| c.role == Role::Operator) {
            return Err("credentials.json: credentials: no operator among them".into());
        }
        self.list = list;
        self.boot_rotated = boot == "stored";
        self.next_id = self.next_id.max(next_id);
        self.generation += 1;
        Ok(())
    }

    /// Whether checks from `peer` are suspended at `now` (too many
    /// failures from it, or from everyone): why, and the seconds until
    /// they resume.
    pub fn throttled(&self, peer: Option<IpAddr>, now: Instant) -> Option<Throttled> {
        self.failures.throttled(peer, now)
    }

    /// Count a failed check from `peer` at `now`.
    pub fn failed(&mut self, peer: Option<IpAddr>, now: Instant) {
        self.failures.fail(peer, now);
    }

    /// How many client addresses the throttle holds (at most
    /// [`FAIL_CLIENTS`]).
    pub fn throttle_clients(&self) -> usize {
        self.failures.clients.len()
    }
}

/// Why checks are suspended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throttled {
    /// This address failed [`FAIL_LIMIT`] times in its window.
    Client { retry_after: u64 },
    /// All addresses together failed [`FAIL_GLOBAL_LIMIT`] times.
    Global { retry_after: u64 },
}

impl Throttled {
    pub fn retry_after(self) -> u64 {
        match self {
            Throttled::Client { retry_after } | Throttled::Global { retry_after } => retry_after,
        }
    }

    /// The 429's sentence.
    pub fn sentence(self, peer: Option<IpAddr>) -> String {
        match self {
            Throttled::Client { retry_after } => format!(
                "more than {FAIL_LIMIT} failed credentials from {} in {} s: try again in {retry_after} s",
                peer.map_or_else(|| "this client".to_string(), |p| p.to_string()),
                FAIL_WINDOW.as_secs()
            ),
            Throttled::Global { retry_after } => format!(
                "more than {FAIL_GLOBAL_LIMIT} failed credentials from all clients in {} s: \
                 try again in {retry_after} s",
                FAIL_WINDOW.as_secs()
            ),
        }
    }
}

/// The failed checks per client address (a bounded table) and over all.
#[derive(Debug, Default)]
struct Throttle {
    /// (address, its window, its last failure).
    clients: Vec<(Option<IpAddr>, FailureWindow, Instant)>,
    global: FailureWindow,
}

impl Throttle {
    fn fail(&mut self, peer: Option<IpAddr>, now: Instant) {
        self.global.fail(now);
        if let Some(entry) = self.clients.iter_mut().find(|(p, _, _)| *p == peer) {
            entry.1.fail(now);
            entry.2 = now;
            return;
        }
        if self.clients.len() >= FAIL_CLIENTS {
            // An address whose window ended first, else the one that
            // failed least recently.
            let victim = self
                .clients
                .iter()
                .position(|(_, w, _)| !w.current(now))
                .or_else(|| {
                    self.clients
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, (_, _, last))| *last)
                        .map(|(i, _)| i)
                });
            if let Some(i) = victim {
                self.clients.swap_remove(i);
            }
        }
        let mut window = FailureWindow::default();
        window.fail(now);
        self.clients.push((peer, window, now));
    }

    fn throttled(&self, peer: Option<IpAddr>, now: Instant) -> Option<Throttled> {
        if let Some(retry_after) = self.global.throttled(now, FAIL_GLOBAL_LIMIT) {
            return Some(Throttled::Global { retry_after });
        }
        self.clients
            .iter()
            .find(|(p, _, _)| *p == peer)
            .and_then(|(_, w, _)| w.throttled(now, FAIL_LIMIT))
            .map(|retry_after| Throttled::Client { retry_after })
    }
}

/// Failed checks in the current window.
#[derive(Debug, Default)]
struct FailureWindow {
    start: Option<Instant>,
    count: u32,
}

impl FailureWindow {
    fn fail(&mut self, now: Instant) {
        match self.start {
            Some(s) if now.duration_since(s) < FAIL_WINDOW => self.count += 1,
            _ => {
                self.start = Some(now);
                self.count = 1;
            }
        }
    }

    /// Whether its window is still running at `now`.
    fn current(&self, now: Instant) -> bool {
        self.start
            .is_some_and(|s| now.duration_since(s) < FAIL_WINDOW)
    }

    fn throttled(&self, now: Instant, limit: u32) -> Option<u64> {
        let start = self.start?;
        let elapsed = now.duration_since(start);
        (self.count >= limit && elapsed < FAIL_WINDOW)
            .then(|| (FAIL_WINDOW - elapsed).as_secs().max(1))
    }
}

/// Which `Host` values the manager answers.
#[derive(Debug, Clone, Default)]
pub struct HostPolicy {
    /// Names besides IP literals and `localhost` (lowercase, no port).
    pub names: Vec<String>,
}

impl HostPolicy {
    /// Whether `host` (a Host header: name or address, optional port) is
    /// one of ours.
    pub fn allows(&self, host: &str) -> bool {
        let name = host_name(host);
        if name.is_empty() {
            return false;
        }
        if name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok() {
            return true;
        }
        if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
            return v6.parse::<std::net::Ipv6Addr>().is_ok();
        }
        self.names.iter().any(|n| n.eq_ignore_ascii_case(name))
    }
}

/// The name part of a Host header (`[::1]:8080` -> `[::1]`, `a:80` -> `a`).
fn host_name(host: &str) -> &str {
    let host = host.trim();
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => &host[..=end],
            None => "",
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Whether an `Origin` header names the same host as `host` (scheme http
/// or https; "null" and anything else is foreign).
pub fn same_origin(origin: &str, host: &str) -> bool {
    let origin = origin.trim();
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    rest.is_some_and(|r| r.trim_end_matches('/').eq_ignore_ascii_case(host.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_need_a_viewer_changes_an_operator_and_a_few_things_are_open() {
        assert_eq!(required_role("GET", None), None);
        assert_eq!(required_role("GET", Some(Endpoint::Host)), None);
        assert_eq!(required_role("GET", Some(Endpoint::OpenApi)), None);
        for e in [
            Endpoint::Partitions,
            Endpoint::Console,
            Endpoint::ConsoleHistory,
            Endpoint::Events,
            Endpoint::EventStream,
            Endpoint::Metrics,
            Endpoint::Images,
            Endpoint::Whoami,
        ] {
            assert_eq!(required_role("GET", Some(e)), Some(Role::Viewer), "{e:?}");
        }
        assert_eq!(
            required_role("GET", Some(Endpoint::Credentials)),
            Some(Role::Operator)
        );
        for m in ["POST", "PUT", "PATCH", "DELETE"] {
            assert_eq!(
                required_role(m, Some(Endpoint::Console)),
                Some(Role::Operator)
            );
            assert_eq!(required_role(m, None), Some(Role::Operator));
        }
    }

    #[test]
    fn made_tokens_are_64_hex_digits_and_differ_with_the_seed() {
        let mut a = Credentials::new(None, Some([1; 32]));
        let mut b = Credentials::new(None, Some([2; 32]));
        let (_, ta) = a.create(Role::Viewer, "", None).unwrap();
        let (_, tb) = b.create(Role::Viewer, "", None).unwrap();
        assert_eq!(ta.len(), 64);
        assert!(ta.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(ta, tb);
        let (_, ta2) = a.create(Role::Viewer, "", None).unwrap();
        assert_ne!(ta, ta2);
    }

    #[test]
    fn without_entropy_nothing_is_made_but_the_boot_token_works() {
        let boot = token_digest(b"boot-secret");
        let mut c = Credentials::new(Some(boot), None);
        assert!(!c.can_generate());
        assert_eq!(
            c.create(Role::Operator, "x", None).unwrap_err(),
            MakeError::NoEntropy
        );
        assert_eq!(c.rotate("boot", None).unwrap_err(), MakeError::NoEntropy);
        assert!(MakeError::NoEntropy
            .sentence()
            .contains("no entropy source"));
        assert_eq!(
            c.check("boot-secret"),
            Some(Actor {
                id: "boot".into(),
                role: Role::Operator
            })
        );
        assert_eq!(c.check("boot-secre"), None);
    }

    #[test]
    fn rotate_replaces_the_token_and_revoke_removes_it() {
        let boot = token_digest(b"boot-secret");
        let mut c = Credentials::new(Some(boot), Some([3; 32]));
        let (v, vt) = c.create(Role::Viewer, "dash", Some(5)).unwrap();
        assert_eq!((v.id.as_str(), v.name.as_str()), ("c1", "dash"));
        assert_eq!(c.check(&vt).unwrap().role, Role::Viewer);
        let (_, vt2) = c.rotate("c1", None).unwrap();
        assert_eq!(c.check(&vt), None);
        assert_eq!(c.check(&vt2).unwrap().id, "c1");
        let (_, bt) = c.rotate("boot", None).unwrap();
        assert_eq!(c.check("boot-secret"), None);
        assert_eq!(c.check(&bt).unwrap().role, Role::Operator);
        c.revoke("c1").unwrap();
        assert_eq!(c.check(&vt2), None);
        assert_eq!(c.revoke("c1").unwrap_err(), MakeError::NotFound);
        assert_eq!(c.revoke("boot").unwrap_err(), MakeError::LastOperator);
        let (o, _) = c.create(Role::Operator, "", None).unwrap();
        assert_eq!(o.id, "c2");
        c.revoke("boot").unwrap();
        assert_eq!(c.check(&bt), None);
    }

    #[test]
    fn exported_credentials_come_back_hashes_only_with_rotations_and_revocations() {
        let boot = token_digest(b"boot-secret");
        let mut a = Credentials::new(Some(boot), Some([5; 32]));
        let (_, viewer) = a.create(Role::Viewer, "dash", Some(7)).unwrap();
        let (_, gone) = a.create(Role::Viewer, "", None).unwrap();
        let (_, op) = a.create(Role::Operator, "ops", None).unwrap();
        let (_, rotated_boot) = a.rotate("boot", None).unwrap();
        a.revoke("c2").unwrap();
        let g = a.generation();
        assert_eq!(g, 5);
        let text = a.export();
        for secret in [&viewer, &gone, &op, &rotated_boot] {
            assert!(!text.contains(secret.as_str()), "a token in {text}");
        }
        // A restarted manager: the hypervisor's boot digest, a new seed.
        let mut b = Credentials::new(Some(boot), Some([6; 32]));
        b.import(&text).unwrap();
        assert_eq!(b.check(&viewer).unwrap().id, "c1");
        assert_eq!(b.check(&op).unwrap().role, Role::Operator);
        assert_eq!(b.check(&rotated_boot).unwrap().id, "boot");
        assert_eq!(b.check("boot-secret"), None, "the rotation holds");
        assert_eq!(b.check(&gone), None, "the revocation holds");
        assert_eq!(b.list()[0].since_ms, None);
        assert_eq!(
            b.list().iter().find(|c| c.id == "c1").unwrap().since_ms,
            Some(7)
        );
        // Ids are not reused.
        let (next, _) = b.create(Role::Viewer, "", None).unwrap();
        assert_eq!(next.id, "c4");
    }

    #[test]
    fn an_unrotated_boot_token_is_the_next_boots_own() {
        let mut a = Credentials::new(Some(token_digest(b"first-boot")), Some([5; 32]));
        let (_, viewer) = a.create(Role::Viewer, "", None).unwrap();
        let text = a.export();
        assert!(text.contains("\"boot\":\"hypervisor\""), "{text}");
        // The next boot generated another token.
        let mut b = Credentials::new(Some(token_digest(b"second-boot")), None);
        b.import(&text).unwrap();
        assert!(b.check("second-boot").is_some());
        assert!(b.check("first-boot").is_none());
        assert!(b.check(&viewer).is_some());
        // A revoked boot credential stays revoked.
        let (_, op) = a.create(Role::Operator, "", None).unwrap();
        a.revoke("boot").unwrap();
        let mut c = Credentials::new(Some(token_digest(b"second-boot")), None);
        c.import(&a.export()).unwrap();
        assert!(c.check("second-boot").is_none());
        assert!(c.check(&op).is_some());
    }

    #[test]
    fn a_bad_credentials_file_is_refused_naming_the_field_and_changes_nothing() {
        let mut c = Credentials::new(Some(token_digest(b"t")), None);
        let ok = c.export();
        for (text, field) in [
            ("{", "credentials.json"),
            (r#"{"version":2}"#, "version"),
            (r#"{"version":1,"next_id":-1,"credentials":[]}"#, "next_id"),
            (
                r#"{"version":1,"boot":"revoked","next_id":1,"credentials":[]}"#,
                "no operator",
            ),
            (
                r#"{"version":1,"boot":"revoked","next_id":1,"credentials":[{"id":"a","name":"","role":"root","sha256":"00","since_ms":null}]}"#,
                "credentials[0].role",
            ),
            (
                r#"{"version":1,"boot":"revoked","next_id":1,"credentials":[{"id":"a","name":"","role":"operator","sha256":"00","since_ms":null}]}"#,
                "credentials[0].sha256",
            ),
        ] {
            let e = c.import(text).unwrap_err();
            assert!(e.contains(field), "{text}: {e}");
        }
        assert_eq!(c.export(), ok);
        assert!(c.check("t").is_some());
    }

    #[test]
    fn the_list_is_bounded() {
        let mut c = Credentials::new(None, Some([4; 32]));
        for _ in 0..MAX_CREDENTIALS {
            c.create(Role::Viewer, "", None).unwrap();
        }
        assert_eq!(
            c.create(Role::Viewer, "", None).unwrap_err(),
            MakeError::TooMany
        );
    }

    fn ip(n: u32) -> Option<IpAddr> {
        Some(IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n)))
    }

    fn client(retry_after: u64) -> Option<Throttled> {
        Some(Throttled::Client { retry_after })
    }

    #[test]
    fn failures_past_the_limit_throttle_until_the_window_ends() {
        let mut c = Credentials::new(None, None);
        let t0 = Instant::now();
        for _ in 0..FAIL_LIMIT - 1 {
            c.failed(None, t0);
        }
        assert_eq!(c.throttled(None, t0), None);
        c.failed(None, t0);
        assert_eq!(c.throttled(None, t0), client(10));
        assert_eq!(
            c.throttled(None, t0 + Duration::from_millis(9_500)),
            client(1)
        );
        assert_eq!(c.throttled(None, t0 + FAIL_WINDOW), None);
        c.failed(None, t0 + FAIL_WINDOW);
        assert_eq!(c.throttled(None, t0 + FAIL_WINDOW), None);
    }

    #[test]
    fn a_guesser_is_throttled_alone() {
        let mut c = Credentials::new(None, None);
        let t0 = Instant::now();
        for _ in 0..FAIL_LIMIT * 3 {
            c.failed(ip(1), t0);
        }
        assert_eq!(c.throttled(ip(1), t0), client(10));
        assert_eq!(c.throttled(ip(2), t0), None);
        assert_eq!(c.throttled(None, t0), None);
        assert!(c
            .throttled(ip(1), t0)
            .unwrap()
            .sentence(ip(1))
            .contains("from 10.0.0.1"));
    }

    #[test]
    fn the_table_is_bounded_and_keeps_the_guessers_it_holds() {
        let mut c = Credentials::new(None, None);
        let t0 = Instant::now();
        for _ in 0..FAIL_LIMIT {
            c.failed(ip(0), t0);
        }
        // 63 more addresses fill the table, each failing once, later.
        for n in 1..FAIL_CLIENTS as u32 {
            c.failed(ip(n), t0 + Duration::from_millis(u64::from(n)));
        }
        assert_eq!(c.throttle_clients(), FAIL_CLIENTS);
        // A new address takes the place of the one that failed least
        // recently: the guesser's (its window is still running).
        let t1 = t0 + Duration::from_secs(1);
        c.failed(ip(1000), t1);
        assert_eq!(c.throttle_clients(), FAIL_CLIENTS);
        assert_eq!(c.throttled(ip(0), t1), None, "evicted: forgotten");
        // Entries whose window ended go first.
        let t2 = t0 + FAIL_WINDOW + Duration::from_millis(10);
        for _ in 0..FAIL_LIMIT {
            c.failed(ip(2000), t2);
        }
        assert_eq!(c.throttle_clients(), FAIL_CLIENTS);
        assert_eq!(c.throttled(ip(2000), t2), client(10));
        c.failed(ip(3000), t2);
        assert_eq!(c.throttled(ip(2000), t2), client(10), "kept");
    }

    #[test]
    fn many_addresses_together_reach_the_global_ceiling() {
        let mut c = Credentials::new(None, None);
        let t0 = Instant::now();
        // Each address stays under its own limit.
        for n in 0..FAIL_GLOBAL_LIMIT {
            c.failed(ip(n % 20), t0);
        }
        assert_eq!(
            c.throttled(ip(500), t0),
            Some(Throttled::Global { retry_after: 10 })
        );
        assert!(Throttled::Global { retry_after: 3 }
            .sentence(None)
            .contains("from all clients"));
        assert_eq!(c.throttled(ip(500), t0 + FAIL_WINDOW), None);
    }

    #[test]
    fn hosts_ip_literals_localhost_and_configured_names() {
        let p = HostPolicy {
            names: vec!["pinfold.example".into()],
        };
        for ok in [
            "127.0.0.1:18460",
            "10.0.2.15",
            "localhost:8080",
            "LOCALHOST",
            "[::1]:8080",
            "[fe80::1]",
            "pinfold.example:8080",
            "PINFOLD.example",
        ] {
            assert!(p.allows(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.example",
            "127.0.0.1.evil.example",
            "[::1",
            "[not-v6]:80",
            "localhost.evil",
            "pinfold.example.evil",
        ] {
            assert!(!p.allows(bad), "{bad}");
        }
    }

    #[test]
    fn origin_must_be_the_same_host() {
        assert!(same_origin("http://127.0.0.1:18460", "127.0.0.1:18460"));
        assert!(same_origin("https://pinfold.example", "pinfold.example"));
        assert!(!same_origin("http://evil.example", "127.0.0.1:18460"));
        assert!(!same_origin("null", "127.0.0.1:18460"));
        assert!(!same_origin("http://127.0.0.1:18461", "127.0.0.1:18460"));
    }
}
