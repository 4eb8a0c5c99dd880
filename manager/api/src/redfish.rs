//! The Redfish service under `/redfish` (DSP0266 1.x): every partition a ComputerSystem, so fleet tools (Ironic, Ansible, sushy) drive Pinfold as they drive a BMC.
//!
//! [`Router::handle`](crate::Router::handle) hands every path under
//! `/redfish` here before its own route table: Redfish has its own schema
//! (CSDL at `/redfish/v1/$metadata`), so these routes are not in
//! `openapi.json`. Same server, TLS, `Host`/`Origin` checks, credentials,
//! roles and failure throttle as the REST API.
//!
//! - **Resources.** `/redfish` (versions), the service root, the OData
//!   service document, `$metadata`; `Systems` (one ComputerSystem per
//!   partition, by name; the management partition is marked in
//!   `Oem.Pinfold` and its resets are refused), each with `Processors`
//!   (one per vCPU), `Memory` (one region), `EthernetInterfaces` (one
//!   per owned PCI function of class 02xxxx, from PARTITION_INFO's `pci`,
//!   Id = its BDF; no MACAddress: the hypervisor does not read it), the
//!   `ComputerSystem.Reset` action and its ActionInfo; `Chassis/host`;
//!   `Managers/manager` (the management partition); `SessionService` and
//!   its `Sessions`; `AccountService` (read only: the credential list, no
//!   secrets) with `Accounts` and `Roles`; `EventService` whose
//!   `ServerSentEventUri` streams the REST API's event log as Redfish
//!   `Event` resources ([`event_resource`]; `id:` = the event's sequence
//!   number, so `Last-Event-ID` resumes; `$filter` is not supported).
//! - **Auth.** Open: `/redfish`, `/redfish/v1`, `odata`, `$metadata`, and
//!   POST `Sessions` (the login). Else one of: `X-Auth-Token` (a session
//!   token, or any REST API bearer token), `Authorization: Basic`
//!   (UserName = a credential's id such as `boot` or `c1`, Password = its
//!   token), `Authorization: Bearer`. A session (POST {UserName,
//!   Password}) gets a token from the credential DRBG, kept as its SHA-256
//!   only, with the credential's role; it ends on DELETE, after
//!   [`SESSION_TIMEOUT`] unused, or when its credential is revoked. GET
//!   needs the viewer role (ReadOnly), actions the operator role
//!   (Administrator); `Accounts` needs operator like the credential list.
//! - **Reset.** On = start, ForceOff = stop, GracefulShutdown = the power
//!   button (shutdown), ForceRestart and PowerCycle = restart (start when
//!   off), GracefulRestart = shutdown, then start once it is off (the
//!   follower finishes it: [`finish_pending`]). A reset that is already
//!   true (On when on, ForceOff or GracefulShutdown when off) succeeds
//!   doing nothing, as fleet tools expect.
//! - **Boot.** A system's PATCH sets its `Boot` override (target `None` or
//!   `UefiHttp`, `Once`/`Continuous`, `HttpBootUri`); every other property
//!   is read only. While `UefiHttp` is set, a reset that powers the
//!   partition on powers it off instead and queues an HTTP boot
//!   ([`crate::httpboot`]: the manager fetches the kernel or boot manifest
//!   and starts the partition on it).
//! - **Errors** are Redfish error bodies with a Base registry
//!   `MessageId` ([`REGISTRY`]); every GET has an `ETag` (a digest of the
//!   body; `If-None-Match` with it answers 304) and every answer
//!   `OData-Version: 4.0`.

use std::time::{Duration, Instant};

use pinfold_abi::{PartitionState, PartitionSummary, Transition};
use serde_json::{json, Map, Value};

use crate::auth::{Actor, Role};
use crate::{split_target, token_digest, ApiError, Backend, Request, Response, Router};

/// The Base message registry the error `MessageId`s come from.
pub const REGISTRY: &str = "Base.1.15.0";
/// The Redfish protocol version the service root states.
pub const REDFISH_VERSION: &str = "1.17.0";
/// A session ends after this long unused.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(1800);
/// Most sessions open at once.
pub const MAX_SESSIONS: usize = 64;
/// The Reset types offered, in the order `ResetType@Redfish.AllowableValues`
/// lists them.
pub const RESET_TYPES: [&str; 6] = [
    "On",
    "ForceOff",
    "GracefulShutdown",
    "ForceRestart",
    "GracefulRestart",
    "PowerCycle",
];
/// The URI of the event stream (`EventService.ServerSentEventUri`).
pub const SSE_URI: &str = "/redfish/v1/EventService/SSE";

const JSON_UTF8: &str = "application/json; charset=utf-8";
const XML: &str = "application/xml";

// Schema versions, one place (docs/REDFISH.md lists them).
const T_ROOT: &str = "#ServiceRoot.v1_16_0.ServiceRoot";
const T_SYSTEMS: &str = "#ComputerSystemCollection.ComputerSystemCollection";
const T_SYSTEM: &str = "#ComputerSystem.v1_20_0.ComputerSystem";
const T_PROCESSORS: &str = "#ProcessorCollection.ProcessorCollection";
const T_PROCESSOR: &str = "#Processor.v1_18_0.Processor";
const T_MEMORIES: &str = "#MemoryCollection.MemoryCollection";
const T_MEMORY: &str = "#Memory.v1_17_0.Memory";
const T_NICS: &str = "#EthernetInterfaceCollection.EthernetInterfaceCollection";
const T_NIC: &str = "#EthernetInterface.v1_9_0.EthernetInterface";
const T_ACTION_INFO: &str = "#ActionInfo.v1_4_0.ActionInfo";
const T_CHASSIS_C: &str = "#ChassisCollection.ChassisCollection";
const T_CHASSIS: &str = "#Chassis.v1_23_0.Chassis";
const T_MANAGERS: &str = "#ManagerCollection.ManagerCollection";
const T_MANAGER: &str = "#Manager.v1_18_0.Manager";
const T_SESSION_SERVICE: &str = "#SessionService.v1_1_8.SessionService";
const T_SESSIONS: &str = "#SessionCollection.SessionCollection";
const T_SESSION: &str = "#Session.v1_6_0.Session";
const T_ACCOUNT_SERVICE: &str = "#AccountService.v1_13_0.AccountService";
const T_ACCOUNTS: &str = "#ManagerAccountCollection.ManagerAccountCollection";
const T_ACCOUNT: &str = "#ManagerAccount.v1_10_0.ManagerAccount";
const T_ROLES: &str = "#RoleCollection.RoleCollection";
const T_ROLE: &str = "#Role.v1_3_1.Role";
const T_EVENT_SERVICE: &str = "#EventService.v1_10_0.EventService";
/// What the EventService stream sends (Event 1.3: `EventType` per record
/// is deprecated there but still stated, for older clients).
pub const T_EVENT: &str = "#Event.v1_3_0.Event";
/// The registry the stream's event `MessageId`s come from.
pub const EVENT_REGISTRY: &str = "ResourceEvent.1.4.2";
/// The `Context` of every streamed Event (there are no subscriptions to
/// name one).
pub const EVENT_CONTEXT: &str = "pinfold-sse";

/// Every schema `$metadata` references: (namespace file, namespaces).
const SCHEMAS: &[(&str, &[&str])] = &[
    ("RedfishExtensions_v1", &["RedfishExtensions.v1_0_0"]),
    ("Resource_v1", &["Resource", "Resource.v1_0_0"]),
    ("ServiceRoot_v1", &["ServiceRoot", "ServiceRoot.v1_16_0"]),
    ("ComputerSystemCollection_v1", &["ComputerSystemCollection"]),
    (
        "ComputerSystem_v1",
        &["ComputerSystem", "ComputerSystem.v1_20_0"],
    ),
    ("ProcessorCollection_v1", &["ProcessorCollection"]),
    ("Processor_v1", &["Processor", "Processor.v1_18_0"]),
    ("MemoryCollection_v1", &["MemoryCollection"]),
    ("Memory_v1", &["Memory", "Memory.v1_17_0"]),
    (
        "EthernetInterfaceCollection_v1",
        &["EthernetInterfaceCollection"],
    ),
    (
        "EthernetInterface_v1",
        &["EthernetInterface", "EthernetInterface.v1_9_0"],
    ),
    ("ActionInfo_v1", &["ActionInfo", "ActionInfo.v1_4_0"]),
    ("ChassisCollection_v1", &["ChassisCollection"]),
    ("Chassis_v1", &["Chassis", "Chassis.v1_23_0"]),
    ("ManagerCollection_v1", &["ManagerCollection"]),
    ("Manager_v1", &["Manager", "Manager.v1_18_0"]),
    (
        "SessionService_v1",
        &["SessionService", "SessionService.v1_1_8"],
    ),
    ("SessionCollection_v1", &["SessionCollection"]),
    ("Session_v1", &["Session", "Session.v1_6_0"]),
    (
        "AccountService_v1",
        &["AccountService", "AccountService.v1_13_0"],
    ),
    ("ManagerAccountCollection_v1", &["ManagerAccountCollection"]),
    (
        "ManagerAccount_v1",
        &["ManagerAccount", "ManagerAccount.v1_10_0"],
    ),
    ("RoleCollection_v1", &["RoleCollection"]),
    ("Role_v1", &["Role", "Role.v1_3_1"]),
    ("EventService_v1", &["EventService", "EventService.v1_10_0"]),
];

/// Whether `path` (no query) is the Redfish service's.
pub fn is_redfish(path: &str) -> bool {
    path == "/redfish" || path.starts_with("/redfish/")
}

/// One session: its token's digest, never the token.
#[derive(Debug, Clone)]
struct Session {
    id: String,
    digest: [u8; 32],
    /// The credential it was opened with, and that credential's role.
    actor: Actor,
    last_used: Instant,
}

/// What the Redfish service keeps between requests.
#[derive(Debug, Default)]
pub struct State {
    sessions: Vec<Session>,
    next_session: u32,
    /// GracefulRestart: partitions (by index) to start once they are off.
    pending_start: Vec<u32>,
    /// Each partition's `Boot` override and HTTP boot ([`crate::httpboot`]).
    pub(crate) boot: crate::httpboot::HttpBoot,
}

impl State {
    /// Sessions open now.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Partitions a GracefulRestart will start once they are off.
    pub fn pending_starts(&self) -> &[u32] {
        &self.pending_start
    }

    fn expire(&mut self, now: Instant) {
        self.sessions
            .retain(|s| now.duration_since(s.last_used) < SESSION_TIMEOUT);
    }
}

/// A refusal in Redfish terms: status, Base message id and sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RfError {
    pub status: u16,
    /// The message key in [`REGISTRY`] (`ResourceNotFound`, ...).
    pub key: &'static str,
    pub message: String,
    pub args: Vec<String>,
    /// The JSON pointers of the properties at fault.
    pub related: Vec<String>,
    /// Headers and further messages (boxed: errors travel in `Result`s).
    extra: Box<Extra>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Extra {
    /// `Allow` (405), `WWW-Authenticate` (401), `Retry-After`.
    headers: Vec<(&'static str, String)>,
    /// More messages (PATCH: one per property): key, sentence, pointers.
    more: Vec<(String, String, Vec<String>)>,
}

impl RfError {
    fn new(status: u16, key: &'static str, message: impl Into<String>) -> Self {
        RfError {
            status,
            key,
            message: message.into(),
            args: Vec::new(),
            related: Vec::new(),
            extra: Box::default(),
        }
    }

    fn args(mut self, args: &[&str]) -> Self {
        self.args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    fn related(mut self, pointer: &str) -> Self {
        self.related.push(pointer.to_string());
        self
    }

    fn not_found(kind: &str, name: &str) -> Self {
        RfError::new(
            404,
            "ResourceNotFound",
            format!("The requested resource of type {kind} named '{name}' was not found."),
        )
        .args(&[kind, name])
    }

    fn no_session(why: &str) -> Self {
        let mut e = RfError::new(
            401,
            "NoValidSession",
            format!("There is no valid session established with the implementation: {why}."),
        );
        e.extra
            .headers
            .push(("WWW-Authenticate", "Basic realm=\"pinfold\"".to_string()));
        e
    }

    fn privilege(needed: Role, actor: &Actor) -> Self {
        RfError::new(
            403,
            "InsufficientPrivilege",
            format!(
                "There are insufficient privileges for the account or credentials associated \
                 with the current session to perform the requested operation: this needs the \
                 {} role; credential {} is a {}.",
                needed.name(),
                actor.id,
                actor.role.name()
            ),
        )
    }

    fn method(method: &str, path: &str, allow: &str) -> Self {
        let mut e = RfError::new(
            405,
            "OperationNotAllowed",
            format!(
                "The HTTP method is not allowed on this resource: {method} on {path}; \
                 allowed: {allow}."
            ),
        );
        e.extra.headers.push(("Allow", allow.to_string()));
        e
    }

    fn malformed(why: &str) -> Self {
        RfError::new(
            400,
            "MalformedJSON",
            format!(
                "The request body submitted was malformed JSON and could not be parsed by the \
                 receiving service: {why}."
            ),
        )
    }

    fn general(status: u16, message: impl Into<String>) -> Self {
        RfError::new(status, "GeneralError", message)
    }

    /// An [`ApiError`] of the shared checks (Host, Origin, throttle,
    /// backend) in Redfish form.
    fn from_api(e: ApiError) -> Self {
        let mut r = match e.status {
            404 => RfError::new(404, "ResourceNotFound", e.detail.clone()),
            401 => RfError::no_session(&e.detail),
            403 => RfError::new(403, "InsufficientPrivilege", e.detail.clone()),
            409 => RfError::general(409, e.detail.clone()),
            429 | 503 => RfError::new(e.status, "ServiceTemporarilyUnavailable", e.detail.clone()),
            s if s >= 500 => RfError::new(s, "InternalError", e.detail.clone()),
            s => RfError::general(s, e.detail.clone()),
        };
        if let Some(secs) = e.retry_after {
            r.extra.headers.push(("Retry-After", secs.to_string()));
        }
        r
    }

    fn id(&self) -> String {
        format!("{REGISTRY}.{}", self.key)
    }

    pub fn to_response(&self) -> Response {
        let mut info = vec![json!({
            "@odata.type": "#Message.v1_1_1.Message",
            "MessageId": self.id(),
            "Message": self.message,
            "MessageArgs": self.args,
            "RelatedProperties": self.related,
            "Severity": if self.status >= 500 { "Critical" } else { "Warning" },
            "Resolution": resolution(self.key),
        })];
        for (key, message, related) in &self.extra.more {
            info.push(json!({
                "@odata.type": "#Message.v1_1_1.Message",
                "MessageId": format!("{REGISTRY}.{key}"),
                "Message": message,
                "RelatedProperties": related,
                "Severity": "Warning",
                "Resolution": resolution(key),
            }));
        }
        let body = json!({
            "error": {
                "code": self.id(),
                "message": self.message,
                "@Message.ExtendedInfo": info,
            }
        });
        let mut resp = reply(self.status, &body);
        resp.headers.extend(self.extra.headers.iter().cloned());
        resp
    }
}

/// The registry's resolution sentence for `key`.
fn resolution(key: &str) -> &'static str {
    match key {
        "ResourceNotFound" => "Provide a valid resource identifier and resubmit the request.",
        "NoValidSession" => {
            "Establish a session before attempting any operations, or give valid credentials."
        }
        "InsufficientPrivilege" => {
            "Either abandon the operation or change the associated access rights and resubmit \
             the request if the operation failed."
        }
        "OperationNotAllowed" => "None.",
        "MalformedJSON" => "Ensure that the request body is valid JSON and resubmit the request.",
        "ActionParameterValueNotInList" => {
            "Choose a value from the enumeration list that the implementation can support and \
             resubmit the request if the operation failed."
        }
        "ActionParameterMissing" => {
            "Supply the action with the required parameter in the request body when the \
             request is resubmitted."
        }
        "ActionNotSupported" => {
            "The action supplied cannot be resubmitted to the implementation. Perhaps the \
             action was invalid, the wrong resource was the target or the implementation \
             documentation may be of assistance."
        }
        "PropertyNotWritable" => {
            "Remove the property from the request body and resubmit the request if the \
             operation failed."
        }
        "PropertyMissing" => {
            "Ensure that the property is in the request body and has a valid value and \
             resubmit the request if the operation failed."
        }
        "PropertyValueNotInList" => {
            "Choose a value from the enumeration list that the implementation can support and \
             resubmit the request if the operation failed."
        }
        "PropertyValueTypeError" | "PropertyValueFormatError" => {
            "Correct the value for the property in the request body and resubmit the request if \
             the operation failed."
        }
        "PropertyValueConflict" => "No resolution is required.",
        "PreconditionFailed" => "Try the operation again using the appropriate ETag.",
        "CreateLimitReachedForResource" => {
            "Either delete resources and resubmit the request if the operation failed or do \
             not resubmit the request."
        }
        _ => "None.",
    }
}

/// A JSON answer with the headers every Redfish answer has.
fn reply(status: u16, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    let mut resp = Response::new(status, JSON_UTF8, bytes);
    resp.headers.push(("OData-Version", "4.0".to_string()));
    resp.headers.push(("Cache-Control", "no-cache".to_string()));
    resp
}

fn no_content() -> Response {
    let mut resp = Response::new(204, JSON_UTF8, Vec::new());
    resp.headers.push(("OData-Version", "4.0".to_string()));
    resp
}

/// `@odata.context` for a type `#Ns.vX.Entity` (or `#Ns.Entity`).
fn context(odata_type: &str) -> String {
    let t = odata_type.trim_start_matches('#');
    let ns = t.split('.').next().unwrap_or(t);
    let entity = t.rsplit('.').next().unwrap_or(t);
    format!("/redfish/v1/$metadata#{ns}.{entity}")
}

/// A resource: `@odata.id`, `@odata.type`, `@odata.context`, then `rest`.
fn resource(id: &str, odata_type: &str, rest: Value) -> Value {
    let mut map = Map::new();
    map.insert("@odata.id".into(), json!(id));
    map.insert("@odata.type".into(), json!(odata_type));
    map.insert("@odata.context".into(), json!(context(odata_type)));
    if let Value::Object(fields) = rest {
        map.extend(fields);
    }
    Value::Object(map)
}

fn collection(id: &str, odata_type: &str, name: &str, members: &[String]) -> Value {
    let links: Vec<Value> = members.iter().map(|m| json!({"@odata.id": m})).collect();
    resource(
        id,
        odata_type,
        json!({
            "Name": name,
            "Members@odata.count": links.len(),
            "Members": links,
        }),
    )
}

fn link(id: &str) -> Value {
    json!({ "@odata.id": id })
}

/// The Redfish PowerState of a life-cycle state.
pub fn power_state(state: PartitionState) -> &'static str {
    match state {
        PartitionState::Running => "On",
        PartitionState::Starting => "PoweringOn",
        PartitionState::Stopping | PartitionState::ShuttingDown => "PoweringOff",
        PartitionState::Stopped | PartitionState::Crashed => "Off",
    }
}

/// `Status` of a partition: State from its life-cycle state, Health from
/// it and its last crash.
fn status(p: &PartitionSummary) -> Value {
    let state = match p.state {
        PartitionState::Running | PartitionState::Stopping | PartitionState::ShuttingDown => {
            "Enabled"
        }
        PartitionState::Starting => "Starting",
        PartitionState::Stopped | PartitionState::Crashed => "StandbyOffline",
    };
    let health = match (p.state, &p.last_crash) {
        (PartitionState::Crashed, _) => "Critical",
        (_, Some(_)) => "Warning",
        _ => "OK",
    };
    json!({ "State": state, "Health": health })
}

/// The Ethernet controllers (PCI class 02xxxx) partition `p` owns, as
/// its PARTITION_INFO (ABI 3.2) lists them; none when the call fails.
fn nics<B: Backend>(router: &mut Router<B>, p: &PartitionSummary) -> Vec<pinfold_abi::PciFunction> {
    router
        .backend
        .detail(p.index)
        .map(|d| {
            d.pci
                .into_iter()
                .filter(|f| f.class >> 16 == 0x02)
                .collect()
        })
        .unwrap_or_default()
}

/// One EthernetInterface: an assigned NIC function. No `MACAddress`: the
/// MAC is in the device (virtio-net's config space, set on QEMU's command
/// line), which the hypervisor does not read; it only reports the config
/// header's IDs and class.
fn nic(p: &PartitionSummary, f: &pinfold_abi::PciFunction) -> Value {
    let bdf = crate::json::pci_bdf(f);
    let on = matches!(
        p.state,
        PartitionState::Running | PartitionState::Stopping | PartitionState::ShuttingDown
    );
    resource(
        &format!("{}/EthernetInterfaces/{bdf}", system_uri(&p.name)),
        T_NIC,
        json!({
            "Id": bdf,
            "Name": format!("{} NIC {bdf}", p.name),
            "Description": "A host PCI Ethernet function assigned to the partition (its \
                            guest drives it); the MAC address is the device's, not known \
                            to the hypervisor",
            "InterfaceEnabled": on,
            "Status": {
                "State": if on { "Enabled" } else { "StandbyOffline" },
                "Health": "OK",
            },
            "Oem": { "Pinfold": {
                "PciAddress": bdf,
                "VendorDevice": format!("{:04x}:{:04x}", f.vendor_id, f.device_id),
                "Class": format!("{:06x}", f.class & 0x00ff_ffff),
            } },
        }),
    )
}

const OK_STATUS: fn() -> Value = || json!({"State": "Enabled", "Health": "OK"});

/// What the request path names, under `/redfish/v1` (no trailing `/`).
enum Target<'a> {
    Versions,
    Root,
    OData,
    Metadata,
    Systems,
    System(&'a str),
    Processors(&'a str),
    Processor(&'a str, &'a str),
    Memories(&'a str),
    Memory(&'a str, &'a str),
    Nics(&'a str),
    Nic(&'a str, &'a str),
    Reset(&'a str),
    ResetInfo(&'a str),
    ChassisList,
    Chassis(&'a str),
    Managers,
    Manager(&'a str),
    SessionService,
    Sessions,
    Session(&'a str),
    AccountService,
    Accounts,
    Account(&'a str),
    Roles,
    Role(&'a str),
    EventService,
    EventStream,
    Unknown,
}

fn target(path: &str) -> Target<'_> {
    let path = if path.len() > 1 {
        path.strip_suffix('/').unwrap_or(path)
    } else {
        path
    };
    if path == "/redfish" {
        return Target::Versions;
    }
    let Some(rest) = path.strip_prefix("/redfish/v1") else {
        return Target::Unknown;
    };
    let segs: Vec<&str> = rest.split('/').skip(1).collect();
    use Target as T;
    match segs.as_slice() {
        [] => T::Root,
        ["odata"] => T::OData,
        ["$metadata"] => T::Metadata,
        ["Systems"] => T::Systems,
        ["Systems", s] => T::System(s),
        ["Systems", s, "Processors"] => T::Processors(s),
        ["Systems", s, "Processors", p] => T::Processor(s, p),
        ["Systems", s, "Memory"] => T::Memories(s),
        ["Systems", s, "Memory", m] => T::Memory(s, m),
        ["Systems", s, "EthernetInterfaces"] => T::Nics(s),
        ["Systems", s, "EthernetInterfaces", n] => T::Nic(s, n),
        ["Systems", s, "Actions", "ComputerSystem.Reset"] => T::Reset(s),
        ["Systems", s, "ResetActionInfo"] => T::ResetInfo(s),
        ["Chassis"] => T::ChassisList,
        ["Chassis", c] => T::Chassis(c),
        ["Managers"] => T::Managers,
        ["Managers", m] => T::Manager(m),
        ["SessionService"] => T::SessionService,
        ["SessionService", "Sessions"] => T::Sessions,
        ["SessionService", "Sessions", s] => T::Session(s),
        ["AccountService"] => T::AccountService,
        ["AccountService", "Accounts"] => T::Accounts,
        ["AccountService", "Accounts", a] => T::Account(a),
        ["AccountService", "Roles"] => T::Roles,
        ["AccountService", "Roles", r] => T::Role(r),
        ["EventService"] => T::EventService,
        ["EventService", "SSE"] => T::EventStream,
        _ => T::Unknown,
    }
}

/// The methods a target takes (HEAD wherever GET).
fn allowed(t: &Target<'_>) -> &'static str {
    match t {
        Target::Reset(_) => "POST",
        Target::Sessions => "GET, HEAD, POST",
        Target::Session(_) => "GET, HEAD, DELETE",
        Target::System(_) => "GET, HEAD, PATCH",
        _ => "GET, HEAD",
    }
}

/// Answers one request under `/redfish`.
pub fn handle<B: Backend>(router: &mut Router<B>, req: &Request) -> Response {
    match try_handle(router, req) {
        Ok(resp) => resp,
        Err(e) => e.to_response(),
    }
}

fn try_handle<B: Backend>(router: &mut Router<B>, req: &Request) -> Result<Response, RfError> {
    let (path, query) = split_target(&req.path);
    let method = if req.method == "HEAD" {
        "GET"
    } else {
        req.method.as_str()
    };
    let t = target(path);
    if let Target::Unknown = t {
        return Err(RfError::not_found("Resource", path));
    }
    let allow = allowed(&t);
    if !allow.split(", ").any(|m| m == method) {
        return Err(RfError::method(&req.method, path, allow));
    }
    router.check_host_origin(req).map_err(RfError::from_api)?;
    if req.body.len() > crate::MAX_BODY_BYTES {
        return Err(RfError::general(
            413,
            format!(
                "The request body is {} bytes; at most {}.",
                req.body.len(),
                crate::MAX_BODY_BYTES
            ),
        ));
    }
    // Open to anyone: the service's own description, and the login.
    let open = matches!(
        (&t, method),
        (
            Target::Versions | Target::Root | Target::OData | Target::Metadata,
            "GET"
        ) | (Target::Sessions, "POST")
    );
    let actor = if open {
        None
    } else {
        let actor = authenticate(router, req)?;
        let needed = match (&t, method) {
            (Target::Accounts | Target::Account(_), "GET") => Role::Operator,
            (_, "GET") => Role::Viewer,
            // Logging out: any session may end itself (checked there).
            (Target::Session(_), "DELETE") => Role::Viewer,
            _ => Role::Operator,
        };
        if actor.role < needed {
            let e = RfError::privilege(needed, &actor);
            router.login_refused(req, &format!("{actor}: {}", e.message));
            return Err(e);
        }
        router.actor = Some(actor.clone());
        Some(actor)
    };
    match method {
        "GET" => {
            if let Target::EventStream = t {
                return event_stream_whole(router, req, query);
            }
            let resp = get(router, &t, path)?;
            Ok(with_etag(req, resp))
        }
        "POST" => match t {
            Target::Sessions => create_session(router, req),
            Target::Reset(name) => reset(router, name, &req.body),
            _ => Err(RfError::method(&req.method, path, allow)),
        },
        "DELETE" => match t {
            Target::Session(id) => delete_session(router, id, actor.as_ref()),
            _ => Err(RfError::method(&req.method, path, allow)),
        },
        "PATCH" => match t {
            Target::System(name) => patch_system(router, name, req),
            _ => Err(RfError::method(&req.method, path, allow)),
        },
        _ => Err(RfError::method(&req.method, path, allow)),
    }
}

/// Adds the `ETag` (a digest of the body) and answers 304 when the client
/// already has it.
fn with_etag(req: &Request, mut resp: Response) -> Response {
    let tag = etag(&resp.body);
    let matched = req
        .header("if-none-match")
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    if matched {
        resp.status = 304;
        resp.body.clear();
    }
    resp.headers.push(("ETag", tag));
    resp
}

/// A resource's ETag: a digest of its body (weak: the JSON's bytes, not
/// its meaning).
fn etag(body: &[u8]) -> String {
    let digest = token_digest(body);
    format!("W/\"{}\"", crate::json::hex(&digest[..8]))
}

/// Who the request is from: `X-Auth-Token` (a session's or a REST
/// token), else `Authorization` Basic or Bearer. Every failure counts
/// against the client's throttle and is a `login_refused` event.
fn authenticate<B: Backend>(router: &mut Router<B>, req: &Request) -> Result<Actor, RfError> {
    let now = Instant::now();
    if let Some(why) = router.credentials.throttled(req.peer, now) {
        let mut e = ApiError::new(429, "too_many_requests", why.sentence(req.peer));
        e.retry_after = Some(why.retry_after());
        router.login_refused(req, &e.detail);
        return Err(RfError::from_api(e));
    }
    let found = match (req.header("x-auth-token"), req.header("authorization")) {
        (Some(token), _) => Some(check_token(router, token.trim(), now)),
        (None, Some(auth)) => {
            let auth = auth.trim();
            match auth.split_once(' ') {
                Some((scheme, rest)) if scheme.eq_ignore_ascii_case("basic") => {
                    Some(check_basic(router, rest.trim()))
                }
                Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => {
                    Some(router.credentials.check(rest.trim()))
                }
                _ => {
                    let e = RfError::no_session("Authorization must be Basic or Bearer");
                    router.login_refused(req, &e.message);
                    return Err(e);
                }
            }
        }
        (None, None) => None,
    };
    match found {
        Some(Some(actor)) => Ok(actor),
        Some(None) => {
            router.credentials.failed(req.peer, now);
            let e = RfError::no_session("wrong X-Auth-Token or credentials");
            router.login_refused(req, &e.message);
            Err(e)
        }
        None => {
            let e = RfError::no_session(
                "no X-Auth-Token, and no Authorization: Basic (credential id and token)",
            );
            router.login_refused(req, &e.message);
            Err(e)
        }
    }
}

/// A session token (bumping its last use) or a REST API token. The
/// session's credential must still exist.
fn check_token<B: Backend>(router: &mut Router<B>, token: &str, now: Instant) -> Option<Actor> {
    router.redfish.expire(now);
    let digest = token_digest(token.as_bytes());
    let mut hit = None;
    for (i, s) in router.redfish.sessions.iter().enumerate() {
        if crate::constant_time_eq(&digest, &s.digest) && hit.is_none() {
            hit = Some(i);
        }
    }
    if let Some(i) = hit {
        if !router.credentials.has(&router.redfish.sessions[i].actor.id) {
            router.redfish.sessions.remove(i);
            return None;
        }
        let s = &mut router.redfish.sessions[i];
        s.last_used = now;
        return Some(s.actor.clone());
    }
    router.credentials.check(token)
}

/// `UserName:Password` as a credential id and its token.
fn check_login<B: Backend>(router: &Router<B>, user: &str, password: &str) -> Option<Actor> {
    router
        .credentials
        .check(password)
        .filter(|a| crate::constant_time_eq(a.id.as_bytes(), user.as_bytes()))
}

fn check_basic<B: Backend>(router: &Router<B>, encoded: &str) -> Option<Actor> {
    let decoded = base64_decode(encoded)?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    check_login(router, user, password)
}

/// Standard base64 (RFC 4648 section 4, padding optional), as HTTP Basic
/// uses it; None when malformed.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = text.trim_end_matches('=').as_bytes();
    if bytes.len() % 4 == 1 || text.len() - bytes.len() > 2 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c)? << (18 - 6 * i);
        }
        let n = chunk.len() - 1;
        for i in 0..n {
            out.push((acc >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

// ---------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------

fn partitions<B: Backend>(router: &mut Router<B>) -> Result<Vec<PartitionSummary>, RfError> {
    router.partitions().map_err(RfError::from_api)
}

fn find<B: Backend>(router: &mut Router<B>, name: &str) -> Result<PartitionSummary, RfError> {
    let name = crate::percent_decode(name).unwrap_or_else(|| name.to_string());
    partitions(router)?
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| RfError::not_found("ComputerSystem", &name))
}

fn system_uri(name: &str) -> String {
    format!("/redfish/v1/Systems/{name}")
}

const CHASSIS_URI: &str = "/redfish/v1/Chassis/host";
const MANAGER_URI: &str = "/redfish/v1/Managers/manager";

fn get<B: Backend>(
    router: &mut Router<B>,
    t: &Target<'_>,
    path: &str,
) -> Result<Response, RfError> {
    let body = match *t {
        Target::Versions => json!({ "v1": "/redfish/v1/" }),
        Target::Metadata => {
            let mut resp = Response::new(200, XML, metadata().into_bytes());
            resp.headers.push(("OData-Version", "4.0".to_string()));
            return Ok(resp);
        }
        Target::Root => service_root(router),
        Target::OData => odata(),
        Target::Systems => {
            let members: Vec<String> = partitions(router)?
                .iter()
                .map(|p| system_uri(&p.name))
                .collect();
            collection(
                "/redfish/v1/Systems",
                T_SYSTEMS,
                "Computer System Collection",
                &members,
            )
        }
        Target::System(name) => system(router, name)?,
        Target::Processors(name) => {
            let p = find(router, name)?;
            let base = format!("{}/Processors", system_uri(&p.name));
            let members: Vec<String> = (0..p.cpus.len()).map(|i| format!("{base}/{i}")).collect();
            collection(&base, T_PROCESSORS, "Processor Collection", &members)
        }
        Target::Processor(name, id) => {
            let p = find(router, name)?;
            let vcpu: usize = id
                .parse()
                .ok()
                .filter(|&i: &usize| i < p.cpus.len())
                .ok_or_else(|| RfError::not_found("Processor", id))?;
            processor(&p, vcpu)
        }
        Target::Memories(name) => {
            let p = find(router, name)?;
            let base = format!("{}/Memory", system_uri(&p.name));
            collection(
                &base,
                T_MEMORIES,
                "Memory Collection",
                &[format!("{base}/ram")],
            )
        }
        Target::Memory(name, id) => {
            let p = find(router, name)?;
            if id != "ram" {
                return Err(RfError::not_found("Memory", id));
            }
            resource(
                &format!("{}/Memory/ram", system_uri(&p.name)),
                T_MEMORY,
                json!({
                    "Id": "ram",
                    "Name": format!("{} RAM", p.name),
                    "Description": "The partition's RAM: one contiguous region of host memory, \
                                    mapped at guest address 0x40000000",
                    "MemoryType": "DRAM",
                    "CapacityMiB": p.ram_bytes >> 20,
                    "Status": status(&p),
                }),
            )
        }
        Target::Nics(name) => {
            let p = find(router, name)?;
            let base = format!("{}/EthernetInterfaces", system_uri(&p.name));
            let members: Vec<String> = nics(router, &p)
                .iter()
                .map(|f| format!("{base}/{}", crate::json::pci_bdf(f)))
                .collect();
            collection(&base, T_NICS, "Ethernet Interface Collection", &members)
        }
        Target::Nic(name, id) => {
            let p = find(router, name)?;
            let id = crate::percent_decode(id).unwrap_or_else(|| id.to_string());
            let f = nics(router, &p)
                .into_iter()
                .find(|f| crate::json::pci_bdf(f) == id)
                .ok_or_else(|| RfError::not_found("EthernetInterface", &id))?;
            nic(&p, &f)
        }
        Target::ResetInfo(name) => {
            let p = find(router, name)?;
            if p.management {
                return Err(RfError::not_found("ActionInfo", "ResetActionInfo"));
            }
            resource(
                &format!("{}/ResetActionInfo", system_uri(&p.name)),
                T_ACTION_INFO,
                json!({
                    "Id": "ResetActionInfo",
                    "Name": "Reset Action Info",
                    "Parameters": [{
                        "Name": "ResetType",
                        "Required": true,
                        "DataType": "String",
                        "AllowableValues": RESET_TYPES,
                    }],
                }),
            )
        }
        Target::ChassisList => collection(
            "/redfish/v1/Chassis",
            T_CHASSIS_C,
            "Chassis Collection",
            &[CHASSIS_URI.to_string()],
        ),
        Target::Chassis(id) => {
            if id != "host" {
                return Err(RfError::not_found("Chassis", id));
            }
            chassis(router)?
        }
        Target::Managers => collection(
            "/redfish/v1/Managers",
            T_MANAGERS,
            "Manager Collection",
            &[MANAGER_URI.to_string()],
        ),
        Target::Manager(id) => {
            if id != "manager" {
                return Err(RfError::not_found("Manager", id));
            }
            manager(router)?
        }
        Target::SessionService => resource(
            "/redfish/v1/SessionService",
            T_SESSION_SERVICE,
            json!({
                "Id": "SessionService",
                "Name": "Session Service",
                "ServiceEnabled": true,
                "SessionTimeout": SESSION_TIMEOUT.as_secs(),
                "Sessions": link("/redfish/v1/SessionService/Sessions"),
                "Status": OK_STATUS(),
            }),
        ),
        Target::Sessions => {
            router.redfish.expire(Instant::now());
            let members: Vec<String> = router
                .redfish
                .sessions
                .iter()
                .map(|s| format!("/redfish/v1/SessionService/Sessions/{}", s.id))
                .collect();
            collection(
                "/redfish/v1/SessionService/Sessions",
                T_SESSIONS,
                "Session Collection",
                &members,
            )
        }
        Target::Session(id) => {
            router.redfish.expire(Instant::now());
            let s = router
                .redfish
                .sessions
                .iter()
                .find(|s| s.id == id)
                .ok_or_else(|| RfError::not_found("Session", id))?;
            session_json(s)
        }
        Target::AccountService => resource(
            "/redfish/v1/AccountService",
            T_ACCOUNT_SERVICE,
            json!({
                "Id": "AccountService",
                "Name": "Account Service",
                "Description": "The management API's credentials, read only: UserName is a \
                                credential id, its password the credential's token",
                "ServiceEnabled": true,
                "LocalAccountAuth": "Enabled",
                "MinPasswordLength": 1,
                "Accounts": link("/redfish/v1/AccountService/Accounts"),
                "Roles": link("/redfish/v1/AccountService/Roles"),
                "Status": OK_STATUS(),
            }),
        ),
        Target::Accounts => {
            let members: Vec<String> = router
                .credentials
                .list()
                .iter()
                .map(|c| format!("/redfish/v1/AccountService/Accounts/{}", c.id))
                .collect();
            collection(
                "/redfish/v1/AccountService/Accounts",
                T_ACCOUNTS,
                "Account Collection",
                &members,
            )
        }
        Target::Account(id) => {
            let c = router
                .credentials
                .list()
                .iter()
                .find(|c| c.id == id)
                .ok_or_else(|| RfError::not_found("ManagerAccount", id))?;
            let role = role_id(c.role);
            resource(
                &format!("/redfish/v1/AccountService/Accounts/{}", c.id),
                T_ACCOUNT,
                json!({
                    "Id": c.id,
                    "Name": c.name,
                    "UserName": c.id,
                    "Password": null,
                    "RoleId": role,
                    "Enabled": true,
                    "Locked": false,
                    "AccountTypes": ["Redfish"],
                    "Links": { "Role": link(&format!("/redfish/v1/AccountService/Roles/{role}")) },
                }),
            )
        }
        Target::Roles => collection(
            "/redfish/v1/AccountService/Roles",
            T_ROLES,
            "Role Collection",
            &[
                "/redfish/v1/AccountService/Roles/Administrator".to_string(),
                "/redfish/v1/AccountService/Roles/ReadOnly".to_string(),
            ],
        ),
        Target::Role(id) => {
            let privileges: &[&str] = match id {
                "Administrator" => &[
                    "Login",
                    "ConfigureManager",
                    "ConfigureUsers",
                    "ConfigureSelf",
                    "ConfigureComponents",
                ],
                "ReadOnly" => &["Login", "ConfigureSelf"],
                _ => return Err(RfError::not_found("Role", id)),
            };
            resource(
                &format!("/redfish/v1/AccountService/Roles/{id}"),
                T_ROLE,
                json!({
                    "Id": id,
                    "Name": id,
                    "RoleId": id,
                    "Description": if id == "ReadOnly" {
                        "A viewer credential: reads everything"
                    } else {
                        "An operator credential: reads and changes everything"
                    },
                    "IsPredefined": true,
                    "AssignedPrivileges": privileges,
                }),
            )
        }
        Target::EventService => resource(
            "/redfish/v1/EventService",
            T_EVENT_SERVICE,
            json!({
                "Id": "EventService",
                "Name": "Event Service",
                "Description": "Server-Sent Events of the management API's event log, \
                                each a Redfish Event (ResourceEvent registry); no push \
                                subscriptions, no $filter",
                "ServiceEnabled": true,
                "ServerSentEventUri": SSE_URI,
                "Status": OK_STATUS(),
            }),
        ),
        Target::Reset(_) | Target::EventStream | Target::Unknown => {
            return Err(RfError::not_found("Resource", path))
        }
    };
    Ok(reply(200, &body))
}

/// Pinfold's roles under the names of Redfish's predefined ones.
fn role_id(role: Role) -> &'static str {
    match role {
        Role::Operator => "Administrator",
        Role::Viewer => "ReadOnly",
    }
}

fn service_root<B: Backend>(router: &mut Router<B>) -> Value {
    let version = router
        .backend
        .host_info()
        .map(|h| h.version)
        .unwrap_or_default();
    resource(
        "/redfish/v1",
        T_ROOT,
        json!({
            "Id": "RootService",
            "Name": "Pinfold Redfish Service",
            "RedfishVersion": REDFISH_VERSION,
            "Vendor": "Pinfold",
            "Product": format!("Pinfold hypervisor {version}"),
            "Systems": link("/redfish/v1/Systems"),
            "Chassis": link("/redfish/v1/Chassis"),
            "Managers": link("/redfish/v1/Managers"),
            "SessionService": link("/redfish/v1/SessionService"),
            "AccountService": link("/redfish/v1/AccountService"),
            "EventService": link("/redfish/v1/EventService"),
            "Links": { "Sessions": link("/redfish/v1/SessionService/Sessions") },
            "ProtocolFeaturesSupported": {
                "ExcerptQuery": false,
                "ExpandQuery": { "ExpandAll": false, "Levels": false, "Links": false, "NoLinks": false },
                "FilterQuery": false,
                "OnlyMemberQuery": false,
                "SelectQuery": false,
            },
        }),
    )
}

fn odata() -> Value {
    let entries = [
        ("Service", "/redfish/v1/"),
        ("Systems", "/redfish/v1/Systems"),
        ("Chassis", "/redfish/v1/Chassis"),
        ("Managers", "/redfish/v1/Managers"),
        ("SessionService", "/redfish/v1/SessionService"),
        ("AccountService", "/redfish/v1/AccountService"),
        ("EventService", "/redfish/v1/EventService"),
        ("Sessions", "/redfish/v1/SessionService/Sessions"),
    ];
    let value: Vec<Value> = entries
        .iter()
        .map(|(name, url)| json!({ "name": name, "kind": "Singleton", "url": url }))
        .collect();
    json!({ "@odata.context": "/redfish/v1/$metadata", "value": value })
}

/// The CSDL document: a reference to every DMTF schema the service uses,
/// and the service's entity container.
pub fn metadata() -> String {
    let mut out = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <edmx:Edmx xmlns:edmx=\"http://docs.oasis-open.org/odata/ns/edmx\" Version=\"4.0\">\n",
    );
    for (file, namespaces) in SCHEMAS {
        out.push_str(&format!(
            "  <edmx:Reference Uri=\"http://redfish.dmtf.org/schemas/v1/{file}.xml\">\n"
        ));
        for ns in *namespaces {
            out.push_str(&format!("    <edmx:Include Namespace=\"{ns}\"/>\n"));
        }
        out.push_str("  </edmx:Reference>\n");
    }
    out.push_str(
        "  <edmx:DataServices>\n    <Schema xmlns=\"http://docs.oasis-open.org/odata/ns/edm\" \
         Namespace=\"Service\">\n      <EntityContainer Name=\"Service\" \
         Extends=\"ServiceRoot.v1_16_0.ServiceContainer\"/>\n    </Schema>\n  \
         </edmx:DataServices>\n</edmx:Edmx>\n",
    );
    out
}

fn system<B: Backend>(router: &mut Router<B>, name: &str) -> Result<Value, RfError> {
    let p = find(router, name)?;
    let uri = system_uri(&p.name);
    let detail = router.backend.detail(p.index).ok();
    let vcpus: Vec<Value> = p
        .cpus
        .iter()
        .enumerate()
        .map(|(v, c)| json!({ "Vcpu": v, "Pcpu": c }))
        .collect();
    // ProcessorSummary has no Oem property in the schema: the vCPU to
    // physical CPU pinning is the system's Oem.Pinfold.VcpuToPcpu.
    let mut oem = json!({
        "Management": p.management,
        "VcpuToPcpu": vcpus,
        "LifecycleState": crate::json::State::from(p.state).as_str(),
        "BootCount": p.boot_count,
        "Restarts": p.restarts,
        "LastCrash": p.last_crash.as_ref().map(|c| c.reason.clone()),
        "ConsoleUri": format!("/api/v1/partitions/{}/console", p.name),
        "RestUri": format!("/api/v1/partitions/{}", p.name),
    });
    if let Some(d) = &detail {
        oem["Bootargs"] = json!(d.plan.bootargs);
        oem["Autostart"] = json!(d.plan.autostart);
    }
    let boot = &router.redfish.boot;
    // An HTTP boot under way: the partition is off while its images are
    // fetched, and powering on as far as Redfish is concerned.
    let fetching = boot.pending(p.index)
        && matches!(p.state, PartitionState::Stopped | PartitionState::Crashed);
    let (power, mut status) = (
        if fetching {
            "PoweringOn"
        } else {
            power_state(p.state)
        },
        status(&p),
    );
    if fetching {
        status["State"] = json!("Starting");
    }
    let boot_json = if p.management {
        json!({
            "BootSourceOverrideEnabled": "Disabled",
            "BootSourceOverrideTarget": "None",
            "BootSourceOverrideTarget@Redfish.AllowableValues": ["None"],
        })
    } else {
        oem["HttpBoot"] = boot.report(p.index, &p.name);
        boot.get(p.index, &p.name).to_json()
    };
    let mut body = json!({
        "Id": p.name,
        "Name": p.name,
        "Description": if p.management {
            "Pinfold's management partition: it serves this API; its resets are refused"
        } else {
            "A Pinfold partition: pinned physical CPUs and dedicated RAM"
        },
        "SystemType": "VirtuallyPartitioned",
        "Manufacturer": "Pinfold",
        "Model": "Pinfold partition",
        "PowerState": power,
        "Status": status,
        "ProcessorSummary": {
            "Count": p.cpus.len(),
            "LogicalProcessorCount": p.cpus.len(),
        },
        "MemorySummary": {
            "TotalSystemMemoryGiB": p.ram_bytes as f64 / (1u64 << 30) as f64,
        },
        "Processors": link(&format!("{uri}/Processors")),
        "Memory": link(&format!("{uri}/Memory")),
        "EthernetInterfaces": link(&format!("{uri}/EthernetInterfaces")),
        "SerialConsole": {
            "MaxConcurrentSessions": 0,
            "IPMI": { "ServiceEnabled": false },
            "SSH": { "ServiceEnabled": false },
            "Telnet": { "ServiceEnabled": false },
        },
        "Boot": boot_json,
        "Links": {
            "Chassis": [link(CHASSIS_URI)],
            "ManagedBy": [link(MANAGER_URI)],
        },
        "Oem": { "Pinfold": oem },
    });
    if !p.management {
        body["Actions"] = json!({
            "#ComputerSystem.Reset": {
                "target": format!("{uri}/Actions/ComputerSystem.Reset"),
                "ResetType@Redfish.AllowableValues": RESET_TYPES,
                "@Redfish.ActionInfo": format!("{uri}/ResetActionInfo"),
            }
        });
    }
    Ok(resource(&uri, T_SYSTEM, body))
}

fn processor(p: &PartitionSummary, vcpu: usize) -> Value {
    resource(
        &format!("{}/Processors/{vcpu}", system_uri(&p.name)),
        T_PROCESSOR,
        json!({
            "Id": vcpu.to_string(),
            "Name": format!("{} vCPU {vcpu}", p.name),
            "Description": format!("vCPU {vcpu}, pinned to physical CPU {}", p.cpus[vcpu]),
            "ProcessorType": "CPU",
            "ProcessorArchitecture": "ARM",
            "InstructionSet": "ARM-A64",
            "TotalCores": 1,
            "TotalThreads": 1,
            "Status": status(p),
            "Oem": { "Pinfold": { "Vcpu": vcpu, "Pcpu": p.cpus[vcpu] } },
        }),
    )
}

fn chassis<B: Backend>(router: &mut Router<B>) -> Result<Value, RfError> {
    let parts = partitions(router)?;
    let systems: Vec<Value> = parts.iter().map(|p| link(&system_uri(&p.name))).collect();
    let info = router.backend.host_info().ok();
    Ok(resource(
        CHASSIS_URI,
        T_CHASSIS,
        json!({
            "Id": "host",
            "Name": "Pinfold host",
            "Description": "The machine Pinfold partitions",
            "ChassisType": "Other",
            "PowerState": "On",
            "Status": OK_STATUS(),
            "Oem": { "Pinfold": {
                "CpuCount": info.as_ref().map(|h| h.cpu_count),
                "RamBytes": info.as_ref().map(|h| h.ram_bytes),
                "GicVersion": info.as_ref().map(|h| h.gic_version),
            } },
            "Links": {
                "ComputerSystems": systems,
                "ManagedBy": [link(MANAGER_URI)],
            },
        }),
    ))
}

fn manager<B: Backend>(router: &mut Router<B>) -> Result<Value, RfError> {
    let parts = partitions(router)?;
    let systems: Vec<Value> = parts.iter().map(|p| link(&system_uri(&p.name))).collect();
    let mgmt = parts.iter().find(|p| p.management).map(|p| p.name.clone());
    let version = router.backend.host_info().map(|h| h.version).ok();
    let now = router
        .backend
        .wall_clock_ms()
        .ok()
        .map(crate::time::rfc3339);
    let mut body = json!({
        "Id": "manager",
        "Name": "Pinfold manager",
        "Description": "The management partition's manager: the REST API and this service",
        "ManagerType": "Service",
        "FirmwareVersion": version,
        "Status": OK_STATUS(),
        "PowerState": "On",
        "Links": {
            "ManagerForServers": systems,
            "ManagerForChassis": [link(CHASSIS_URI)],
        },
        "Oem": { "Pinfold": { "Partition": mgmt } },
    });
    if let Some(now) = now {
        body["DateTime"] = json!(now);
    }
    Ok(resource(MANAGER_URI, T_MANAGER, body))
}

fn session_json(s: &Session) -> Value {
    resource(
        &format!("/redfish/v1/SessionService/Sessions/{}", s.id),
        T_SESSION,
        json!({
            "Id": s.id,
            "Name": format!("Session {}", s.id),
            "UserName": s.actor.id,
            "Password": null,
            "SessionType": "Redfish",
        }),
    )
}

/// The SSE URI asked through [`handle`] (not the server's open stream):
/// what is kept, whole, as Redfish Event frames.
fn event_stream_whole<B: Backend>(
    router: &mut Router<B>,
    req: &Request,
    query: &str,
) -> Result<Response, RfError> {
    let since = crate::stream_cursor(req, query).map_err(RfError::from_api)?;
    router.poll_events();
    let list = router.events.since(since, crate::events::EVENTS_KEPT);
    let body: String = list.events.iter().map(event_frame).collect();
    let mut resp = Response::new(200, crate::EVENT_STREAM, body.into_bytes());
    resp.headers.push(("Cache-Control", "no-cache".to_string()));
    Ok(resp)
}

/// One event log entry as a Redfish `Event` resource ([`T_EVENT`]): its
/// `Id` and `EventId` the event's sequence number, `MessageId` from
/// [`EVENT_REGISTRY`] (or Base for a refused login) chosen by the kind
/// and, for `state`, by how the hypervisor's text begins; the manager's
/// own text is kept in `Oem.Pinfold`.
pub fn event_resource(e: &crate::events::ApiEvent) -> Value {
    let name = e.partition.as_deref();
    let who = name.unwrap_or("manager");
    let m = &e.message;
    // A power change: (state prefix, MessageId key, the message's verb).
    const POWER: [(&str, &str, &str); 3] = [
        ("running", "ResourcePoweredOn", "has powered on"),
        ("stopped", "ResourcePoweredOff", "has powered off"),
        ("shutting down", "ResourcePoweringOff", "is powering off"),
    ];
    let power = POWER
        .iter()
        .find(|(prefix, _, _)| e.kind == "state" && m.starts_with(prefix));
    // (EventType, MessageId key, args, Severity, Message)
    let (event_type, key, args, severity, message): (&str, &str, Vec<String>, &str, String) =
        match (e.kind.as_str(), power) {
            (_, Some(&(_, key, verb))) => (
                "StatusChange",
                key,
                vec![who.into()],
                "OK",
                format!("The resource '{who}' {verb}."),
            ),
            ("state", _) if m.starts_with("crashed") => (
                "StatusChange",
                "ResourceStatusChangedCritical",
                vec![who.into(), "Critical".into()],
                "Critical",
                format!("The health of resource '{who}' has changed to Critical."),
            ),
            ("state", _) => (
                "StatusChange",
                "ResourceStateChanged",
                vec![who.into(), m.clone()],
                "OK",
                format!("The state of resource '{who}' has changed to {m}."),
            ),
            ("fault", _) => (
                "Alert",
                "ResourceErrorsDetected",
                vec!["Status".into(), m.clone()],
                "Warning",
                format!("The resource property Status has detected errors of type '{m}'."),
            ),
            ("login_refused", _) => {
                // "METHOD PATH[ from PEER]: why" (Router::login_refused).
                let (what, why) = m.split_once(": ").unwrap_or((m.as_str(), ""));
                let uri = what.split(' ').nth(1).unwrap_or(what);
                return event_json(
                    e,
                    "Alert",
                    &format!("{REGISTRY}.ResourceAtUriUnauthorized"),
                    vec![uri.into(), why.into()],
                    "Critical",
                    format!(
                        "While accessing the resource at {uri}, the service received an \
                         authorization error {why}."
                    ),
                    "/redfish/v1/SessionService",
                );
            }
            _ => (
                "ResourceUpdated",
                "ResourceChanged",
                Vec::new(),
                "OK",
                "One or more resource properties have changed.".into(),
            ),
        };
    let origin = name.map_or_else(|| MANAGER_URI.to_string(), system_uri);
    event_json(
        e,
        event_type,
        &format!("{EVENT_REGISTRY}.{key}"),
        args,
        severity,
        message,
        &origin,
    )
}

#[allow(clippy::too_many_arguments)]
fn event_json(
    e: &crate::events::ApiEvent,
    event_type: &str,
    message_id: &str,
    args: Vec<String>,
    severity: &str,
    message: String,
    origin: &str,
) -> Value {
    let mut record = json!({
        "MemberId": "0",
        "EventType": event_type,
        "EventId": e.seq.to_string(),
        "Severity": severity,
        "Message": message,
        "MessageId": message_id,
        "MessageArgs": args,
        "OriginOfCondition": { "@odata.id": origin },
        "Oem": { "Pinfold": {
            "Kind": e.kind,
            "Partition": e.partition,
            "Detail": e.message,
        } },
    });
    if let Some(t) = &e.time {
        record["EventTimestamp"] = json!(t);
    }
    json!({
        "@odata.type": T_EVENT,
        "Id": e.seq.to_string(),
        "Name": "Pinfold event",
        "Context": EVENT_CONTEXT,
        "Events": [record],
    })
}

/// One event as an EventService SSE frame: `id:` the sequence number (so
/// `Last-Event-ID` resumes), `data:` the [`event_resource`] on one line.
pub fn event_frame(e: &crate::events::ApiEvent) -> String {
    format!("id: {}\ndata: {}\n\n", e.seq, event_resource(e))
}

/// Opens the EventService stream for the server (like
/// [`Router::open_stream`] for the REST one), after the same checks.
pub fn open_stream<B: Backend>(
    router: &mut Router<B>,
    req: &Request,
) -> Result<crate::events::EventStream, Response> {
    let (path, query) = split_target(&req.path);
    if !matches!(target(path), Target::EventStream) || req.method != "GET" {
        return Err(RfError::not_found("Resource", path).to_response());
    }
    router
        .check_host_origin(req)
        .map_err(|e| RfError::from_api(e).to_response())?;
    authenticate(router, req).map_err(|e| e.to_response())?;
    let since = crate::stream_cursor(req, query).map_err(|e| RfError::from_api(e).to_response())?;
    router.poll_events();
    Ok(crate::events::EventStream::framed(
        since,
        Instant::now(),
        event_frame,
    ))
}

// ---------------------------------------------------------------------------
// Changes
// ---------------------------------------------------------------------------

fn body_object(body: &[u8]) -> Result<Map<String, Value>, RfError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(RfError::malformed("the body must be a JSON object")),
        Err(e) => Err(RfError::malformed(&e.to_string())),
    }
}

fn create_session<B: Backend>(router: &mut Router<B>, req: &Request) -> Result<Response, RfError> {
    let now = Instant::now();
    if let Some(why) = router.credentials.throttled(req.peer, now) {
        let mut e = ApiError::new(429, "too_many_requests", why.sentence(req.peer));
        e.retry_after = Some(why.retry_after());
        router.login_refused(req, &e.detail);
        return Err(RfError::from_api(e));
    }
    let body = body_object(&req.body)?;
    let field = |name: &'static str| -> Result<String, RfError> {
        body.get(name)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| {
                RfError::new(
                    400,
                    "PropertyMissing",
                    format!(
                        "The property {name} is a required property and must be included in \
                         the request (a string)."
                    ),
                )
                .args(&[name])
                .related(&format!("/{name}"))
            })
    };
    let user = field("UserName")?;
    let password = field("Password")?;
    let Some(actor) = check_login(router, &user, &password) else {
        router.credentials.failed(req.peer, now);
        let e = RfError::no_session(
            "wrong UserName or Password (UserName is a credential id, Password its token)",
        );
        router.login_refused(req, &e.message);
        return Err(e);
    };
    router.redfish.expire(now);
    if router.redfish.sessions.len() >= MAX_SESSIONS {
        return Err(RfError::new(
            400,
            "CreateLimitReachedForResource",
            format!(
                "The create operation failed because the resource has reached the limit of \
                 possible resources: at most {MAX_SESSIONS} sessions; delete one first."
            ),
        ));
    }
    let token = router
        .credentials
        .session_token()
        .map_err(|e| RfError::new(503, "ServiceTemporarilyUnavailable", e.sentence()))?;
    router.redfish.next_session += 1;
    let session = Session {
        id: router.redfish.next_session.to_string(),
        digest: token_digest(token.as_bytes()),
        actor: actor.clone(),
        last_used: now,
    };
    let body = session_json(&session);
    let location = format!("/redfish/v1/SessionService/Sessions/{}", session.id);
    router.redfish.sessions.push(session);
    router.actor = Some(actor.clone());
    router.record_auth(&format!("opened Redfish session {location}"));
    let mut resp = reply(201, &body);
    resp.headers.push(("X-Auth-Token", token));
    resp.headers.push(("Location", location));
    Ok(resp)
}

fn delete_session<B: Backend>(
    router: &mut Router<B>,
    id: &str,
    actor: Option<&Actor>,
) -> Result<Response, RfError> {
    let index = router
        .redfish
        .sessions
        .iter()
        .position(|s| s.id == id)
        .ok_or_else(|| RfError::not_found("Session", id))?;
    if let Some(actor) = actor {
        // A viewer ends only sessions of its own credential.
        if actor.role < Role::Operator && router.redfish.sessions[index].actor.id != actor.id {
            return Err(RfError::privilege(Role::Operator, actor));
        }
    }
    router.redfish.sessions.remove(index);
    router.record_auth(&format!("closed Redfish session {id}"));
    Ok(no_content())
}

/// The properties of a ComputerSystem a PATCH may set: the `Boot`
/// override ([`crate::httpboot`]), on a partition other than the
/// management one. Anything else is PropertyNotWritable (one message per
/// property, nested ones by JSON pointer); a bad value is
/// PropertyValueNotInList / PropertyValueTypeError /
/// PropertyValueFormatError, a `UefiHttp` target without a URI
/// PropertyValueConflict, a stale `If-Match` PreconditionFailed. Nothing
/// changes unless everything is accepted; then 200 with the system.
const WRITABLE: [&str; 3] = [
    "Boot/BootSourceOverrideTarget",
    "Boot/BootSourceOverrideEnabled",
    "Boot/HttpBootUri",
];

fn patch_system<B: Backend>(
    router: &mut Router<B>,
    name: &str,
    req: &Request,
) -> Result<Response, RfError> {
    let p = find(router, name)?;
    let map = body_object(&req.body)?;
    let mut props = Vec::new();
    for (k, v) in &map {
        match v {
            Value::Object(inner) if !inner.is_empty() => {
                props.extend(inner.keys().map(|i| format!("{k}/{i}")))
            }
            _ => props.push(k.clone()),
        }
    }
    if props.is_empty() {
        return Err(RfError::malformed("the body names no property"));
    }
    let read_only: Vec<&String> = props
        .iter()
        .filter(|q| p.management || !WRITABLE.contains(&q.as_str()))
        .collect();
    if let Some(first) = read_only.first() {
        let sentence = |q: &str| {
            format!("The property {q} is a read only property and cannot be assigned a value.")
        };
        let mut e = RfError::new(400, "PropertyNotWritable", sentence(first))
            .args(&[first])
            .related(&format!("/{first}"));
        for q in &read_only[1..] {
            e.extra.more.push((
                "PropertyNotWritable".to_string(),
                sentence(q),
                vec![format!("/{q}")],
            ));
        }
        return Err(e);
    }
    if let Some(want) = req.header("if-match").map(str::trim).filter(|t| *t != "*") {
        let tag = etag(&reply(200, &system(router, name)?).body);
        let bare = |t: &str| t.trim_start_matches("W/").to_string();
        if !want.split(',').any(|t| bare(t.trim()) == bare(&tag)) {
            return Err(RfError::new(
                412,
                "PreconditionFailed",
                format!(
                    "The ETag supplied did not match the ETag required to change this \
                     resource: {name}'s is now {tag}."
                ),
            ));
        }
    }
    let boot = map
        .get("Boot")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let old = router.redfish.boot.get(p.index, &p.name);
    let mut new = old.clone();
    let text_of = |key: &str| -> Result<Option<String>, RfError> {
        match boot.get(key) {
            None => Ok(None),
            Some(Value::String(t)) => Ok(Some(t.clone())),
            Some(v) => Err(RfError::new(
                400,
                "PropertyValueTypeError",
                format!(
                    "The value '{v}' for the property {key} is not a type that the property \
                     can accept."
                ),
            )
            .args(&[&v.to_string(), key])
            .related(&format!("/Boot/{key}"))),
        }
    };
    let not_in_list = |key: &str, value: &str| {
        RfError::new(
            400,
            "PropertyValueNotInList",
            format!(
                "The value '{value}' for the property {key} is not in the list of acceptable \
                 values."
            ),
        )
        .args(&[value, key])
        .related(&format!("/Boot/{key}"))
    };
    let target = text_of("BootSourceOverrideTarget")?;
    if let Some(t) = &target {
        if !crate::httpboot::TARGETS.contains(&t.as_str()) {
            return Err(not_in_list("BootSourceOverrideTarget", t));
        }
        new.http = t == "UefiHttp";
    }
    match text_of("BootSourceOverrideEnabled")? {
        Some(e) => {
            new.enabled = crate::httpboot::Enabled::parse(&e)
                .ok_or_else(|| not_in_list("BootSourceOverrideEnabled", &e))?;
        }
        // Choosing a target alone enables it for the next boot (None
        // disables), as BMCs do.
        None => match target.as_deref() {
            Some("UefiHttp") if new.enabled == crate::httpboot::Enabled::Disabled => {
                new.enabled = crate::httpboot::Enabled::Once
            }
            Some("None") => new.enabled = crate::httpboot::Enabled::Disabled,
            _ => {}
        },
    }
    match boot.get("HttpBootUri") {
        None => {}
        Some(Value::Null) => new.uri = None,
        Some(_) => {
            let uri = text_of("HttpBootUri")?.unwrap_or_default();
            if crate::fetch::parse_url(&uri).is_none() {
                return Err(RfError::new(
                    400,
                    "PropertyValueFormatError",
                    format!(
                        "The value '{uri}' for the property HttpBootUri is not a format that \
                         the property can accept: the manager fetches http://HOST[:PORT]/PATH \
                         URLs (no https, no user info)."
                    ),
                )
                .args(&[&uri, "HttpBootUri"])
                .related("/Boot/HttpBootUri"));
            }
            new.uri = Some(uri);
        }
    }
    if new.http && new.enabled != crate::httpboot::Enabled::Disabled && new.uri.is_none() {
        return Err(RfError::new(
            400,
            "PropertyValueConflict",
            "The property BootSourceOverrideTarget could not be written because its value would \
             conflict with the value of the HttpBootUri property: UefiHttp needs an HttpBootUri \
             (there is no DHCP server to name one).",
        )
        .args(&["BootSourceOverrideTarget", "HttpBootUri"])
        .related("/Boot/HttpBootUri"));
    }
    if new != old {
        router.redfish.boot.set(p.index, &p.name, new.clone());
        let who = router.actor_name();
        let what = if new.http {
            format!(
                "UefiHttp {} ({})",
                new.uri.as_deref().unwrap_or("-"),
                new.enabled.as_str()
            )
        } else {
            "None".to_string()
        };
        router.record(
            "config",
            Some(&p.name),
            &format!("{who} set {}'s Redfish boot override to {what}", p.name),
        );
    }
    Ok(with_etag(
        &Request::default(),
        reply(200, &system(router, name)?),
    ))
}

/// What a ResetType does to a partition in `state`: the lifecycle call,
/// nothing (already so), or a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetPlan {
    Call(Transition),
    /// GracefulRestart: shut down, then start once off.
    ShutdownThenStart,
    /// Already as asked.
    Nothing,
    /// Not possible now (e.g. a graceful shutdown while it is stopping).
    Refused,
}

/// The one mapping of ResetType to the lifecycle (docs/REDFISH.md).
pub fn plan_reset(reset: &str, state: PartitionState) -> Option<ResetPlan> {
    use PartitionState as S;
    use ResetPlan as P;
    let off = matches!(state, S::Stopped | S::Crashed);
    Some(match reset {
        "On" if off => P::Call(Transition::Start),
        "On" if matches!(state, S::Running | S::Starting) => P::Nothing,
        "On" => P::Refused,
        "ForceOff" if off || state == S::Stopping => P::Nothing,
        "ForceOff" => P::Call(Transition::Stop),
        "GracefulShutdown" if off => P::Nothing,
        "GracefulShutdown" if state == S::Running => P::Call(Transition::Shutdown),
        "GracefulShutdown" => P::Refused,
        "ForceRestart" | "PowerCycle" if off => P::Call(Transition::Start),
        "ForceRestart" | "PowerCycle" if state == S::Stopping => P::Refused,
        "ForceRestart" | "PowerCycle" => P::Call(Transition::Restart),
        "GracefulRestart" if off => P::Call(Transition::Start),
        "GracefulRestart" if state == S::Running => P::ShutdownThenStart,
        "GracefulRestart" => P::Refused,
        _ => return None,
    })
}

fn reset<B: Backend>(router: &mut Router<B>, name: &str, body: &[u8]) -> Result<Response, RfError> {
    let p = find(router, name)?;
    if p.management {
        return Err(RfError::new(
            400,
            "ActionNotSupported",
            format!(
                "The action ComputerSystem.Reset is not supported by the resource: {} is the \
                 management partition serving this API.",
                p.name
            ),
        )
        .args(&["ComputerSystem.Reset"]));
    }
    let body = if body.trim_ascii().is_empty() {
        Map::new()
    } else {
        body_object(body)?
    };
    let Some(value) = body.get("ResetType") else {
        return Err(RfError::new(
            400,
            "ActionParameterMissing",
            "The action ComputerSystem.Reset requires the parameter ResetType to be present in \
             the request body.",
        )
        .args(&["ComputerSystem.Reset", "ResetType"])
        .related("/ResetType"));
    };
    let text = value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_string);
    let not_in_list = || {
        RfError::new(
            400,
            "ActionParameterValueNotInList",
            format!(
                "The value '{text}' for the parameter ResetType in the action \
                 ComputerSystem.Reset is not in the list of acceptable values ({}).",
                RESET_TYPES.join(", ")
            ),
        )
        .args(&[&text, "ResetType", "ComputerSystem.Reset"])
        .related("/ResetType")
    };
    if value.as_str().is_none() {
        return Err(not_in_list());
    }
    let plan = plan_reset(&text, p.state).ok_or_else(not_in_list)?;
    // A reset that powers the partition on boots it over HTTP while its
    // Boot override says so: powered off now (if on), started by the HTTP
    // boot thread once the images are in ([`crate::httpboot`]). Any other
    // reset that changes the power cancels an HTTP boot under way.
    let powers_on = matches!(
        plan,
        ResetPlan::Call(Transition::Start | Transition::Restart) | ResetPlan::ShutdownThenStart
    );
    if plan != ResetPlan::Nothing {
        router.redfish.boot.cancel(p.index);
    }
    if powers_on && router.redfish.boot.get(p.index, &p.name).active() {
        let off = match plan {
            ResetPlan::Call(Transition::Restart) => Some(Transition::Stop),
            ResetPlan::ShutdownThenStart => Some(Transition::Shutdown),
            _ => None,
        };
        if let Some(op) = off {
            router
                .change_state(&p.name, op)
                .map_err(RfError::from_api)?;
        }
        router.redfish.pending_start.retain(|&i| i != p.index);
        router.redfish.boot.queue(p.index, &p.name);
        let uri = router
            .redfish
            .boot
            .get(p.index, &p.name)
            .uri
            .unwrap_or_default();
        let who = router.actor_name();
        router.record(
            "config",
            Some(&p.name),
            &format!("{who} Redfish ComputerSystem.Reset {text}: HTTP boot from {uri}"),
        );
        return Ok(no_content());
    }
    let op = match plan {
        ResetPlan::Nothing => return Ok(no_content()),
        ResetPlan::Refused => {
            return Err(RfError::general(
                409,
                format!(
                    "ResetType {text} is not possible now: {} is {}.",
                    p.name,
                    crate::json::State::from(p.state).as_str()
                ),
            ))
        }
        ResetPlan::Call(op) => op,
        ResetPlan::ShutdownThenStart => Transition::Shutdown,
    };
    router
        .change_state(&p.name, op)
        .map_err(RfError::from_api)?;
    if plan == ResetPlan::ShutdownThenStart && !router.redfish.pending_start.contains(&p.index) {
        router.redfish.pending_start.push(p.index);
    }
    if matches!(op, Transition::Stop | Transition::Start) {
        // A later force reset overrides a graceful restart under way.
        router.redfish.pending_start.retain(|&i| i != p.index);
    }
    router.record(
        "config",
        Some(&p.name),
        &format!(
            "{} Redfish ComputerSystem.Reset {text}",
            router.actor_name()
        ),
    );
    Ok(no_content())
}

/// Finishes GracefulRestarts: each partition whose shutdown has ended
/// (stopped or crashed) is started; one that is running again (started by
/// someone else) or gone is dropped. The follower calls it about once a
/// second ([`Router::follow_consoles`]).
pub fn finish_pending<B: Backend>(router: &mut Router<B>) {
    if router.redfish.pending_start.is_empty() {
        return;
    }
    let Ok(parts) = router.backend.partitions() else {
        return;
    };
    let pending = std::mem::take(&mut router.redfish.pending_start);
    for index in pending {
        match parts.iter().find(|p| p.index == index).map(|p| p.state) {
            Some(PartitionState::Stopped | PartitionState::Crashed) => {
                let _ = router.backend.start(index);
            }
            Some(PartitionState::ShuttingDown | PartitionState::Stopping) => {
                router.redfish.pending_start.push(index);
            }
            _ => {}
        }
    }
}
