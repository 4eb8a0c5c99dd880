//! Host tests of the Redfish service (`redfish`) through the FakeBackend: every resource, the auth mapping and sessions, every Reset mapping, and every error in the Redfish format with its Base message id, leaving nothing changed.

use super::*;
use std::sync::Mutex;

fn rf(method: &str, path: &str, body: &str) -> Request {
    Request {
        method: method.into(),
        path: path.into(),
        headers: vec![("X-Auth-Token".into(), TOKEN.into())],
        body: body.as_bytes().to_vec(),
        peer: None,
    }
}

fn rf_get(path: &str) -> Request {
    rf("GET", path, "")
}

fn basic(user: &str, password: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = format!("{user}:{password}").into_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

fn without_auth(mut req: Request) -> Request {
    req.headers.retain(|(k, _)| {
        !k.eq_ignore_ascii_case("x-auth-token") && !k.eq_ignore_ascii_case("authorization")
    });
    req
}

/// The Redfish error's first MessageId, checked to be well formed.
fn message_id(resp: &Response) -> String {
    let v = body_json(resp);
    let code = v["error"]["code"].as_str().expect("error.code").to_string();
    assert!(v["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
    let first = &v["error"]["@Message.ExtendedInfo"][0];
    assert_eq!(first["MessageId"], json!(code), "{v}");
    assert!(first["Message"].as_str().is_some(), "{v}");
    code
}

fn state_of(r: &mut Router<FakeBackend>, index: u32) -> (PartitionState, u32) {
    let p = r
        .backend()
        .partitions
        .iter()
        .find(|p| p.index == index)
        .unwrap()
        .clone();
    (p.state, p.boot_count)
}

#[test]
fn service_root_and_versions_are_open_and_link_every_service() {
    let mut r = router();
    let resp = r.handle(&anon_get("/redfish"));
    assert_eq!(resp.status, 200);
    assert_eq!(body_json(&resp), json!({"v1": "/redfish/v1/"}));
    for path in ["/redfish/v1", "/redfish/v1/"] {
        let resp = r.handle(&anon_get(path));
        assert_eq!(resp.status, 200, "{path}");
        assert_eq!(resp.header("OData-Version"), Some("4.0"));
        assert!(resp.header("ETag").is_some_and(|t| t.starts_with("W/\"")));
        let v = body_json(&resp);
        assert_eq!(v["@odata.type"], "#ServiceRoot.v1_16_0.ServiceRoot");
        assert_eq!(v["@odata.id"], "/redfish/v1");
        assert_eq!(
            v["@odata.context"],
            "/redfish/v1/$metadata#ServiceRoot.ServiceRoot"
        );
        assert_eq!(v["RedfishVersion"], redfish::REDFISH_VERSION);
        for svc in [
            "Systems",
            "Chassis",
            "Managers",
            "SessionService",
            "AccountService",
            "EventService",
        ] {
            let link = v[svc]["@odata.id"].as_str().unwrap().to_string();
            let got = r.handle(&rf_get(&link));
            assert_eq!(got.status, 200, "{link}: {}", text(&got));
        }
        assert_eq!(
            v["Links"]["Sessions"]["@odata.id"],
            "/redfish/v1/SessionService/Sessions"
        );
    }
}

#[test]
fn odata_document_and_metadata_name_every_schema_used() {
    let mut r = router();
    let resp = r.handle(&anon_get("/redfish/v1/odata"));
    assert_eq!(resp.status, 200);
    let v = body_json(&resp);
    assert_eq!(v["@odata.context"], "/redfish/v1/$metadata");
    assert!(v["value"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "Systems" && e["url"] == "/redfish/v1/Systems"));

    let resp = r.handle(&anon_get("/redfish/v1/$metadata"));
    assert_eq!(resp.status, 200);
    assert_eq!(resp.content_type, "application/xml");
    let xml = text(&resp);
    assert!(xml.contains("Extends=\"ServiceRoot.v1_16_0.ServiceContainer\""));
    // Every @odata.type served must be in a referenced namespace.
    let mut types = Vec::new();
    let mut stack = vec!["/redfish/v1".to_string()];
    let mut seen = std::collections::BTreeSet::new();
    r.handle(&rf(
        "POST",
        "/redfish/v1/SessionService/Sessions",
        &format!(r#"{{"UserName":"boot","Password":"{TOKEN}"}}"#),
    ));
    while let Some(uri) = stack.pop() {
        if !seen.insert(uri.clone()) {
            continue;
        }
        let resp = r.handle(&rf_get(&uri));
        assert_eq!(resp.status, 200, "{uri}: {}", text(&resp));
        let v = body_json(&resp);
        types.push(v["@odata.type"].as_str().unwrap().to_string());
        collect_links(&v, &mut stack);
    }
    assert!(seen.len() > 20, "walked {seen:?}");
    for t in types {
        let t = t.trim_start_matches('#');
        let ns = &t[..t.rfind('.').unwrap()];
        assert!(
            xml.contains(&format!("Namespace=\"{ns}\"")),
            "{ns} is not referenced by $metadata"
        );
    }
}

/// Every `@odata.id` under /redfish/v1 in `v` (but the action targets and
/// the event stream, which are not GET resources of a type).
fn collect_links(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                if k == "@odata.id" {
                    if let Some(s) = x.as_str() {
                        out.push(s.to_string());
                    }
                } else {
                    collect_links(x, out);
                }
            }
        }
        Value::Array(list) => list.iter().for_each(|x| collect_links(x, out)),
        _ => {}
    }
}

#[test]
fn systems_list_every_partition_and_mark_the_management_one() {
    let mut r = router();
    let v = body_json(&r.handle(&rf_get("/redfish/v1/Systems")));
    assert_eq!(v["Members@odata.count"], 3);
    let ids: Vec<&str> = v["Members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["@odata.id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "/redfish/v1/Systems/mgmt",
            "/redfish/v1/Systems/alpha",
            "/redfish/v1/Systems/beta"
        ]
    );
    let mgmt = body_json(&r.handle(&rf_get("/redfish/v1/Systems/mgmt")));
    assert_eq!(mgmt["Oem"]["Pinfold"]["Management"], true);
    assert!(mgmt.get("Actions").is_none(), "no Reset offered: {mgmt}");
    let alpha = body_json(&r.handle(&rf_get("/redfish/v1/Systems/alpha")));
    assert_eq!(alpha["Oem"]["Pinfold"]["Management"], false);
}

#[test]
fn a_system_reports_power_status_cpus_memory_boot_and_reset() {
    let mut r = router();
    r.backend_mut().partitions[1].cpus = vec![1, 3];
    let v = body_json(&r.handle(&rf_get("/redfish/v1/Systems/alpha")));
    assert_eq!(v["@odata.type"], "#ComputerSystem.v1_20_0.ComputerSystem");
    assert_eq!(v["Id"], "alpha");
    assert_eq!(v["PowerState"], "On");
    assert_eq!(v["Status"], json!({"State": "Enabled", "Health": "OK"}));
    assert_eq!(v["ProcessorSummary"]["Count"], 2);
    // The schema's ProcessorSummary has no Oem (the validator refuses one).
    assert!(v["ProcessorSummary"].get("Oem").is_none());
    assert_eq!(
        v["Oem"]["Pinfold"]["VcpuToPcpu"],
        json!([{"Vcpu": 0, "Pcpu": 1}, {"Vcpu": 1, "Pcpu": 3}])
    );
    assert_eq!(v["MemorySummary"]["TotalSystemMemoryGiB"], json!(0.25));
    assert_eq!(v["Boot"]["BootSourceOverrideTarget"], "None");
    assert_eq!(
        v["Boot"]["BootSourceOverrideTarget@Redfish.AllowableValues"],
        json!(["None", "UefiHttp"])
    );
    assert_eq!(v["Boot"]["HttpBootUri"], Value::Null);
    assert_eq!(v["SerialConsole"]["SSH"]["ServiceEnabled"], false);
    assert_eq!(
        v["Oem"]["Pinfold"]["ConsoleUri"],
        "/api/v1/partitions/alpha/console"
    );
    let reset = &v["Actions"]["#ComputerSystem.Reset"];
    assert_eq!(
        reset["target"],
        "/redfish/v1/Systems/alpha/Actions/ComputerSystem.Reset"
    );
    assert_eq!(
        reset["ResetType@Redfish.AllowableValues"],
        json!([
            "On",
            "ForceOff",
            "GracefulShutdown",
            "ForceRestart",
            "GracefulRestart",
            "PowerCycle"
        ])
    );
    let info = body_json(&r.handle(&rf_get("/redfish/v1/Systems/alpha/ResetActionInfo")));
    assert_eq!(
        info["Parameters"][0]["AllowableValues"],
        reset["ResetType@Redfish.AllowableValues"]
    );

    let procs = body_json(&r.handle(&rf_get("/redfish/v1/Systems/alpha/Processors")));
    assert_eq!(procs["Members@odata.count"], 2);
    let p1 = body_json(&r.handle(&rf_get("/redfish/v1/Systems/alpha/Processors/1")));
    assert_eq!(p1["Oem"]["Pinfold"], json!({"Vcpu": 1, "Pcpu": 3}));
    assert_eq!(p1["InstructionSet"], "ARM-A64");
    let resp = r.handle(&rf_get("/redfish/v1/Systems/alpha/Processors/2"));
    assert_eq!(resp.status, 404);
    assert_eq!(message_id(&resp), "Base.1.15.0.ResourceNotFound");

    let mem = body_json(&r.handle(&rf_get("/redfish/v1/Systems/alpha/Memory/ram")));
    assert_eq!(mem["CapacityMiB"], 256);
    let nics = body_json(&r.handle(&rf_get("/redfish/v1/Systems/alpha/EthernetInterfaces")));
    assert_eq!(nics["Members@odata.count"], 1);
}

#[test]
fn ethernet_interfaces_are_the_owned_functions_of_class_02() {
    let mut r = router();
    let nics = body_json(&r.handle(&rf_get("/redfish/v1/Systems/beta/EthernetInterfaces")));
    // beta's NVMe controller (00:04.0, class 010802) is not a NIC.
    assert_eq!(nics["Members@odata.count"], 1);
    assert_eq!(
        nics["Members"],
        json!([{"@odata.id": "/redfish/v1/Systems/beta/EthernetInterfaces/0000:00:03.0"}])
    );
    let resp = r.handle(&rf_get(
        "/redfish/v1/Systems/beta/EthernetInterfaces/0000:00:03.0",
    ));
    assert_eq!(resp.status, 200);
    let nic = body_json(&resp);
    assert_eq!(
        nic["@odata.type"],
        "#EthernetInterface.v1_9_0.EthernetInterface"
    );
    assert_eq!(nic["Id"], "0000:00:03.0");
    assert_eq!(
        nic["InterfaceEnabled"], false,
        "beta is stopped in the fake"
    );
    assert_eq!(
        nic["Status"],
        json!({"State": "StandbyOffline", "Health": "OK"})
    );
    assert_eq!(nic["Oem"]["Pinfold"]["PciAddress"], "0000:00:03.0");
    assert_eq!(nic["Oem"]["Pinfold"]["VendorDevice"], "1af4:1041");
    assert!(nic.get("MACAddress").is_none(), "the MAC is not known");
    // Percent-encoded colons name the same interface.
    let enc = r.handle(&rf_get(
        "/redfish/v1/Systems/beta/EthernetInterfaces/0000%3A00%3A03.0",
    ));
    assert_eq!(enc.status, 200);
    for other in ["0000:00:04.0", "0000:00:02.0"] {
        let resp = r.handle(&rf_get(&format!(
            "/redfish/v1/Systems/beta/EthernetInterfaces/{other}"
        )));
        assert_eq!(resp.status, 404, "{other}");
        assert_eq!(message_id(&resp), "Base.1.15.0.ResourceNotFound");
    }
    // A running partition's interface is enabled.
    assert_eq!(reset(&mut r, "beta", "On").status, 204);
    let nic = body_json(&r.handle(&rf_get(
        "/redfish/v1/Systems/beta/EthernetInterfaces/0000:00:03.0",
    )));
    assert_eq!(nic["InterfaceEnabled"], true);
    assert_eq!(nic["Status"]["State"], "Enabled");
}

#[test]
fn power_state_and_status_follow_the_lifecycle() {
    use PartitionState as S;
    let cases = [
        (S::Running, "On", "Enabled", "OK"),
        (S::Starting, "PoweringOn", "Starting", "OK"),
        (S::Stopping, "PoweringOff", "Enabled", "OK"),
        (S::ShuttingDown, "PoweringOff", "Enabled", "OK"),
        (S::Stopped, "Off", "StandbyOffline", "OK"),
        (S::Crashed, "Off", "StandbyOffline", "Critical"),
    ];
    for (state, power, st, health) in cases {
        let mut r = router();
        r.backend_mut().partitions[2].state = state;
        let v = body_json(&r.handle(&rf_get("/redfish/v1/Systems/beta")));
        assert_eq!(v["PowerState"], power, "{state:?}");
        assert_eq!(v["Status"]["State"], st, "{state:?}");
        assert_eq!(v["Status"]["Health"], health, "{state:?}");
    }
    let mut r = router();
    r.backend_mut().partitions[2].last_crash = Some(pinfold_abi::CrashInfo {
        unix_ms: None,
        reason: "watchdog".into(),
    });
    r.backend_mut().partitions[2].state = S::Running;
    let v = body_json(&r.handle(&rf_get("/redfish/v1/Systems/beta")));
    assert_eq!(v["Status"]["Health"], "Warning");
    assert_eq!(v["Oem"]["Pinfold"]["LastCrash"], "watchdog");
}

#[test]
fn chassis_manager_accounts_roles_and_event_service() {
    let (mut r, _viewer) = router_with_viewer();
    let c = body_json(&r.handle(&rf_get("/redfish/v1/Chassis/host")));
    assert_eq!(c["Links"]["ComputerSystems"].as_array().unwrap().len(), 3);
    let m = body_json(&r.handle(&rf_get("/redfish/v1/Managers/manager")));
    assert_eq!(m["Oem"]["Pinfold"]["Partition"], "mgmt");
    assert_eq!(m["FirmwareVersion"], "0.1.0");
    let accounts = body_json(&r.handle(&rf_get("/redfish/v1/AccountService/Accounts")));
    assert_eq!(accounts["Members@odata.count"], 2);
    let boot = r.handle(&rf_get("/redfish/v1/AccountService/Accounts/boot"));
    let v = body_json(&boot);
    assert_eq!(v["RoleId"], "Administrator");
    assert_eq!(v["Password"], Value::Null);
    assert!(!text(&boot).contains(TOKEN));
    let c1 = body_json(&r.handle(&rf_get("/redfish/v1/AccountService/Accounts/c1")));
    assert_eq!(c1["RoleId"], "ReadOnly");
    assert_eq!(c1["Name"], "dash");
    let ro = body_json(&r.handle(&rf_get("/redfish/v1/AccountService/Roles/ReadOnly")));
    assert_eq!(ro["IsPredefined"], true);
    let es = body_json(&r.handle(&rf_get("/redfish/v1/EventService")));
    assert_eq!(es["ServerSentEventUri"], "/redfish/v1/EventService/SSE");
}

#[test]
fn etag_on_every_get_and_if_none_match_answers_304() {
    let mut r = router();
    let first = r.handle(&rf_get("/redfish/v1/Systems/beta"));
    let tag = first.header("ETag").unwrap().to_string();
    let again = r.handle(&with_header(
        rf_get("/redfish/v1/Systems/beta"),
        "If-None-Match",
        &tag,
    ));
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    r.backend_mut().partitions[2].state = PartitionState::Running;
    let changed = r.handle(&with_header(
        rf_get("/redfish/v1/Systems/beta"),
        "If-None-Match",
        &tag,
    ));
    assert_eq!(changed.status, 200);
    assert_ne!(changed.header("ETag").unwrap(), tag);
}

#[test]
fn sessions_log_in_list_authenticate_and_log_out() {
    let mut r = router();
    r.seed_credentials([3; 32]);
    let login = without_auth(rf(
        "POST",
        "/redfish/v1/SessionService/Sessions",
        &format!(r#"{{"UserName":"boot","Password":"{TOKEN}"}}"#),
    ));
    let resp = r.handle(&login);
    assert_eq!(resp.status, 201, "{}", text(&resp));
    let token = resp.header("X-Auth-Token").unwrap().to_string();
    assert_eq!(token.len(), 64);
    let location = resp.header("Location").unwrap().to_string();
    assert_eq!(location, "/redfish/v1/SessionService/Sessions/1");
    assert_eq!(body_json(&resp)["UserName"], "boot");

    let with = |method: &str, path: &str| {
        let mut q = without_auth(rf(method, path, ""));
        q.headers.push(("X-Auth-Token".into(), token.clone()));
        q
    };
    let list = body_json(&r.handle(&with("GET", "/redfish/v1/SessionService/Sessions")));
    assert_eq!(list["Members"][0]["@odata.id"], json!(location));
    assert_eq!(r.handle(&with("GET", &location)).status, 200);
    let resp = r.handle(&with("DELETE", &location));
    assert_eq!(resp.status, 204);
    let resp = r.handle(&with("GET", "/redfish/v1/Systems"));
    assert_eq!(resp.status, 401);
    assert_eq!(message_id(&resp), "Base.1.15.0.NoValidSession");
    assert_eq!(r.redfish.sessions(), 0);
}

#[test]
fn a_session_ends_with_its_credential() {
    let (mut r, viewer) = router_with_viewer();
    let resp = r.handle(&without_auth(rf(
        "POST",
        "/redfish/v1/SessionService/Sessions",
        &format!(r#"{{"UserName":"c1","Password":"{viewer}"}}"#),
    )));
    assert_eq!(resp.status, 201);
    let token = resp.header("X-Auth-Token").unwrap().to_string();
    let mut q = without_auth(rf_get("/redfish/v1/Systems"));
    q.headers.push(("X-Auth-Token".into(), token));
    assert_eq!(r.handle(&q).status, 200);
    let resp = r.handle(&Request {
        method: "DELETE".into(),
        path: "/api/v1/auth/credentials/c1".into(),
        headers: vec![("Authorization".into(), format!("Bearer {TOKEN}"))],
        ..Request::default()
    });
    assert_eq!(resp.status, 200);
    assert_eq!(r.handle(&q).status, 401);
}

#[test]
fn login_refusals_name_the_field_or_the_credentials() {
    let mut r = router();
    r.seed_credentials([3; 32]);
    let post = |body: &str| without_auth(rf("POST", "/redfish/v1/SessionService/Sessions", body));
    let resp = r.handle(&post(r#"{"UserName":"boot"}"#));
    assert_eq!(resp.status, 400);
    assert_eq!(message_id(&resp), "Base.1.15.0.PropertyMissing");
    assert!(text(&resp).contains("Password"));
    let resp = r.handle(&post("{"));
    assert_eq!(resp.status, 400);
    assert_eq!(message_id(&resp), "Base.1.15.0.MalformedJSON");
    // The right token under another credential's id is not a login.
    let resp = r.handle(&post(&format!(
        r#"{{"UserName":"c9","Password":"{TOKEN}"}}"#
    )));
    assert_eq!(resp.status, 401);
    assert_eq!(message_id(&resp), "Base.1.15.0.NoValidSession");
    let resp = r.handle(&post(r#"{"UserName":"boot","Password":"nope"}"#));
    assert_eq!(resp.status, 401);
    assert_eq!(r.redfish.sessions(), 0);
    let kinds: Vec<String> = r
        .events
        .since(0, 100)
        .events
        .iter()
        .map(|e| e.kind.clone())
        .collect();
    assert!(
        kinds.iter().filter(|k| *k == "login_refused").count() >= 2,
        "{kinds:?}"
    );
}

#[test]
fn basic_auth_maps_credential_id_and_token() {
    let (mut r, viewer) = router_with_viewer();
    let q = |auth: String| Request {
        method: "GET".into(),
        path: "/redfish/v1/Systems".into(),
        headers: vec![("Authorization".into(), auth)],
        ..Request::default()
    };
    assert_eq!(r.handle(&q(basic("boot", TOKEN))).status, 200);
    assert_eq!(r.handle(&q(basic("c1", &viewer))).status, 200);
    let resp = r.handle(&q(basic("boot", &viewer)));
    assert_eq!(resp.status, 401);
    assert_eq!(
        resp.header("WWW-Authenticate"),
        Some("Basic realm=\"pinfold\"")
    );
    assert_eq!(r.handle(&q("Basic !!!".into())).status, 401);
    assert_eq!(r.handle(&q(format!("Bearer {TOKEN}"))).status, 200);
    let resp = r.handle(&without_auth(rf_get("/redfish/v1/Systems")));
    assert_eq!(resp.status, 401);
    assert_eq!(message_id(&resp), "Base.1.15.0.NoValidSession");
}

#[test]
fn base64_decodes_padded_unpadded_and_refuses_garbage() {
    assert_eq!(redfish::base64_decode("Ym9vdDp4").unwrap(), b"boot:x");
    assert_eq!(redfish::base64_decode("YQ==").unwrap(), b"a");
    assert_eq!(redfish::base64_decode("YWI").unwrap(), b"ab");
    assert!(redfish::base64_decode("Y").is_none());
    assert!(redfish::base64_decode("Y===").is_none());
    assert!(redfish::base64_decode("a*bc").is_none());
}

#[test]
fn a_wrong_session_token_is_refused_and_throttled() {
    let mut r = router();
    let mut q = without_auth(rf_get("/redfish/v1/Systems/beta"));
    q.headers.push(("X-Auth-Token".into(), "wrong".into()));
    let resp = r.handle(&q);
    assert_eq!(resp.status, 401);
    assert_eq!(message_id(&resp), "Base.1.15.0.NoValidSession");
    for _ in 0..auth::FAIL_LIMIT {
        r.handle(&q);
    }
    let resp = r.handle(&rf_get("/redfish/v1/Systems/beta"));
    assert_eq!(resp.status, 429, "the right token too, past the limit");
    assert!(resp.header("Retry-After").is_some());
}

#[test]
fn a_viewer_reads_but_may_not_reset_or_list_accounts() {
    let (mut r, viewer) = router_with_viewer();
    let as_viewer = |mut q: Request| {
        q = without_auth(q);
        q.headers.push(("X-Auth-Token".into(), viewer.clone()));
        q
    };
    assert_eq!(
        r.handle(&as_viewer(rf_get("/redfish/v1/Systems/beta")))
            .status,
        200
    );
    let resp = r.handle(&as_viewer(rf(
        "POST",
        "/redfish/v1/Systems/beta/Actions/ComputerSystem.Reset",
        r#"{"ResetType":"On"}"#,
    )));
    assert_eq!(resp.status, 403);
    assert_eq!(message_id(&resp), "Base.1.15.0.InsufficientPrivilege");
    assert_eq!(state_of(&mut r, BETA).0, PartitionState::Stopped);
    let resp = r.handle(&as_viewer(rf_get("/redfish/v1/AccountService/Accounts")));
    assert_eq!(resp.status, 403);
}

fn reset(r: &mut Router<FakeBackend>, name: &str, reset_type: &str) -> Response {
    r.handle(&rf(
        "POST",
        &format!("/redfish/v1/Systems/{name}/Actions/ComputerSystem.Reset"),
        &format!(r#"{{"ResetType":"{reset_type}"}}"#),
    ))
}

#[test]
fn each_reset_type_maps_onto_the_lifecycle() {
    use PartitionState as S;
    // (from, reset type, the call made (None: nothing), state after)
    let cases: [(S, &str, Option<&str>, S); 14] = [
        (S::Stopped, "On", Some("start"), S::Running),
        (S::Running, "On", None, S::Running),
        (S::Running, "ForceOff", Some("stop"), S::Stopping),
        (S::Stopped, "ForceOff", None, S::Stopped),
        (
            S::Running,
            "GracefulShutdown",
            Some("shutdown"),
            S::ShuttingDown,
        ),
        (S::Crashed, "GracefulShutdown", None, S::Crashed),
        (S::Running, "ForceRestart", Some("restart"), S::Running),
        (S::Stopped, "ForceRestart", Some("start"), S::Running),
        (S::Running, "PowerCycle", Some("restart"), S::Running),
        (S::Crashed, "PowerCycle", Some("start"), S::Running),
        (
            S::Running,
            "GracefulRestart",
            Some("shutdown"),
            S::ShuttingDown,
        ),
        (S::Stopped, "GracefulRestart", Some("start"), S::Running),
        (S::ShuttingDown, "ForceOff", Some("stop"), S::Stopping),
        (S::Starting, "On", None, S::Starting),
    ];
    for (from, kind, call, to) in cases {
        let mut r = router();
        r.backend_mut().partitions[2].state = from;
        let resp = reset(&mut r, "beta", kind);
        assert_eq!(resp.status, 204, "{from:?} {kind}: {}", text(&resp));
        let calls = r.backend().calls.clone();
        match call {
            Some(c) => assert_eq!(calls, [format!("{c} {BETA}")], "{from:?} {kind}"),
            None => assert!(calls.is_empty(), "{from:?} {kind}: {calls:?}"),
        }
        assert_eq!(state_of(&mut r, BETA).0, to, "{from:?} {kind}");
    }
}

#[test]
fn graceful_restart_starts_the_partition_once_it_is_off() {
    let mut r = router();
    r.backend_mut().partitions[2].state = PartitionState::Running;
    assert_eq!(reset(&mut r, "beta", "GracefulRestart").status, 204);
    assert_eq!(r.redfish.pending_starts(), [BETA]);
    // Still shutting down: nothing yet.
    r.follow_consoles();
    assert_eq!(r.backend().calls, [format!("shutdown {BETA}")]);
    // The guest powered off: the follower starts it.
    r.backend_mut().partitions[2].state = PartitionState::Stopped;
    r.follow_consoles();
    assert_eq!(
        r.backend().calls,
        [format!("shutdown {BETA}"), format!("start {BETA}")]
    );
    assert_eq!(state_of(&mut r, BETA).0, PartitionState::Running);
    assert!(r.redfish.pending_starts().is_empty());
}

#[test]
fn a_force_off_cancels_a_graceful_restart() {
    let mut r = router();
    r.backend_mut().partitions[2].state = PartitionState::Running;
    assert_eq!(reset(&mut r, "beta", "GracefulRestart").status, 204);
    assert_eq!(reset(&mut r, "beta", "ForceOff").status, 204);
    assert!(r.redfish.pending_starts().is_empty());
    r.backend_mut().partitions[2].state = PartitionState::Stopped;
    r.follow_consoles();
    assert_eq!(state_of(&mut r, BETA).0, PartitionState::Stopped);
}

#[test]
fn bad_resets_are_redfish_errors_and_change_nothing() {
    let mut r = router();
    let before = (state_of(&mut r, BETA), state_of(&mut r, MGMT));
    let resp = reset(&mut r, "beta", "Nmi");
    assert_eq!(resp.status, 400);
    assert_eq!(
        message_id(&resp),
        "Base.1.15.0.ActionParameterValueNotInList"
    );
    let v = body_json(&resp);
    assert_eq!(
        v["error"]["@Message.ExtendedInfo"][0]["MessageArgs"],
        json!(["Nmi", "ResetType", "ComputerSystem.Reset"])
    );
    let resp = r.handle(&rf(
        "POST",
        "/redfish/v1/Systems/beta/Actions/ComputerSystem.Reset",
        r#"{"ResetType":7}"#,
    ));
    assert_eq!(
        message_id(&resp),
        "Base.1.15.0.ActionParameterValueNotInList"
    );
    let resp = r.handle(&rf(
        "POST",
        "/redfish/v1/Systems/beta/Actions/ComputerSystem.Reset",
        "{}",
    ));
    assert_eq!(resp.status, 400);
    assert_eq!(message_id(&resp), "Base.1.15.0.ActionParameterMissing");
    let resp = reset(&mut r, "mgmt", "ForceRestart");
    assert_eq!(resp.status, 400);
    assert_eq!(message_id(&resp), "Base.1.15.0.ActionNotSupported");
    let resp = reset(&mut r, "gamma", "On");
    assert_eq!(resp.status, 404);
    assert_eq!(message_id(&resp), "Base.1.15.0.ResourceNotFound");
    // Stopping: a graceful shutdown is not possible.
    r.backend_mut().partitions[1].state = PartitionState::Stopping;
    let resp = reset(&mut r, "alpha", "GracefulShutdown");
    assert_eq!(resp.status, 409);
    assert_eq!(message_id(&resp), "Base.1.15.0.GeneralError");
    r.backend_mut().partitions[1].state = PartitionState::Running;
    assert!(r.backend().calls.is_empty(), "{:?}", r.backend().calls);
    assert_eq!((state_of(&mut r, BETA), state_of(&mut r, MGMT)), before);
}

#[test]
fn a_failed_lifecycle_call_is_a_redfish_error() {
    let mut r = router();
    r.backend_mut().fail_transitions = Some(CallError::Refused(AbiError::Conflict));
    let resp = reset(&mut r, "beta", "On");
    assert_eq!(resp.status, 409);
    assert_eq!(message_id(&resp), "Base.1.15.0.GeneralError");
}

#[test]
fn patch_of_a_read_only_property_is_property_not_writable() {
    let mut r = router();
    let before = text(&r.handle(&rf_get("/redfish/v1/Systems/beta")));
    let resp = r.handle(&rf(
        "PATCH",
        "/redfish/v1/Systems/beta",
        r#"{"AssetTag":"x","Boot":{"BootSourceOverrideMode":"UEFI"}}"#,
    ));
    assert_eq!(resp.status, 400);
    assert_eq!(message_id(&resp), "Base.1.15.0.PropertyNotWritable");
    let v = body_json(&resp);
    let info = v["error"]["@Message.ExtendedInfo"].as_array().unwrap();
    assert_eq!(info.len(), 2);
    assert_eq!(info[0]["RelatedProperties"], json!(["/AssetTag"]));
    assert_eq!(
        info[1]["RelatedProperties"],
        json!(["/Boot/BootSourceOverrideMode"])
    );
    assert_eq!(text(&r.handle(&rf_get("/redfish/v1/Systems/beta"))), before);
    assert!(r.backend().calls.is_empty());
    let resp = r.handle(&rf("PATCH", "/redfish/v1/Systems/beta", "[1]"));
    assert_eq!(message_id(&resp), "Base.1.15.0.MalformedJSON");
}

#[test]
fn unknown_resources_and_methods_are_404_and_405() {
    let mut r = router();
    for path in [
        "/redfish/v2",
        "/redfish/v1/Nothing",
        "/redfish/v1/Systems/gamma",
        "/redfish/v1/Systems/beta/Memory/rom",
        "/redfish/v1/Systems/beta/EthernetInterfaces/eth0",
        "/redfish/v1/Chassis/other",
        "/redfish/v1/Managers/bmc",
        "/redfish/v1/SessionService/Sessions/99",
        "/redfish/v1/AccountService/Accounts/c77",
        "/redfish/v1/AccountService/Roles/Operator",
        "/redfish/v1/Systems/mgmt/ResetActionInfo",
    ] {
        let resp = r.handle(&rf_get(path));
        assert_eq!(resp.status, 404, "{path}");
        assert_eq!(message_id(&resp), "Base.1.15.0.ResourceNotFound", "{path}");
    }
    let resp = r.handle(&rf("DELETE", "/redfish/v1/Systems/beta", ""));
    assert_eq!(resp.status, 405);
    assert_eq!(message_id(&resp), "Base.1.15.0.OperationNotAllowed");
    assert_eq!(resp.header("Allow"), Some("GET, HEAD, PATCH"));
    let resp = r.handle(&rf("PATCH", "/redfish/v1/Chassis/host", "{}"));
    assert_eq!(resp.status, 405);
    let resp = r.handle(&rf_get(
        "/redfish/v1/Systems/beta/Actions/ComputerSystem.Reset",
    ));
    assert_eq!(resp.status, 405);
    assert_eq!(resp.header("Allow"), Some("POST"));
}

#[test]
fn host_and_origin_checks_apply_to_redfish() {
    let mut r = router();
    let resp = r.handle(&with_header(
        rf_get("/redfish/v1/Systems"),
        "Host",
        "evil.example",
    ));
    assert_eq!(resp.status, 421);
    assert!(body_json(&resp)["error"]["code"]
        .as_str()
        .unwrap()
        .starts_with("Base."));
    let q = with_header(
        with_header(
            rf(
                "POST",
                "/redfish/v1/Systems/beta/Actions/ComputerSystem.Reset",
                r#"{"ResetType":"On"}"#,
            ),
            "Host",
            "127.0.0.1:8443",
        ),
        "Origin",
        "https://evil.example",
    );
    let resp = r.handle(&q);
    assert_eq!(resp.status, 403);
    assert_eq!(state_of(&mut r, BETA).0, PartitionState::Stopped);
}

/// The frames of an SSE body: (`id:`, the `data:` JSON).
fn sse_events(body: &str) -> Vec<(u64, Value)> {
    body.split("\n\n")
        .filter(|f| !f.trim().is_empty() && !f.starts_with(':') && !f.starts_with("retry"))
        .map(|f| {
            let id = f
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .expect("an id line")
                .parse()
                .unwrap();
            let data = f
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .expect("a data line");
            (id, serde_json::from_str(data).unwrap())
        })
        .collect()
}

fn hv_fault(seq: u64, message: &str) -> pinfold_abi::Event {
    pinfold_abi::Event {
        kind: pinfold_abi::EventKind::Fault,
        ..hv_event(seq, "beta", message)
    }
}

#[test]
fn the_event_service_stream_is_the_event_log_as_redfish_events() {
    let mut r = router();
    r.backend_mut().hv_events = vec![
        hv_event(0, "beta", "running (boot 2)"),
        hv_event(1, "beta", "stopped by the manager"),
        hv_fault(2, "data abort at 0x9000000 (contained)"),
        hv_event(3, "beta", "crashed (watchdog)"),
    ];
    let resp = r.handle(&rf_get("/redfish/v1/EventService/SSE"));
    assert_eq!(resp.status, 200);
    assert_eq!(resp.content_type, EVENT_STREAM);
    let events = sse_events(&text(&resp));
    let ids: Vec<u64> = events.iter().map(|e| e.0).collect();
    assert_eq!(ids, [1000, 2000, 3000, 4000]);
    // A state change: beta powered off, at the event's time.
    let (_, off) = &events[1];
    assert_eq!(off["@odata.type"], "#Event.v1_3_0.Event");
    assert_eq!(off["Id"], "2000");
    assert_eq!(off["Context"], "pinfold-sse");
    let rec = &off["Events"][0];
    assert_eq!(rec["EventType"], "StatusChange");
    assert_eq!(rec["EventId"], "2000");
    assert_eq!(rec["EventTimestamp"], "2026-12-01T13:45:01Z");
    assert_eq!(rec["Severity"], "OK");
    assert_eq!(rec["MessageId"], "ResourceEvent.1.4.2.ResourcePoweredOff");
    assert_eq!(rec["MessageArgs"], json!(["beta"]));
    assert_eq!(rec["Message"], "The resource 'beta' has powered off.");
    assert_eq!(
        rec["OriginOfCondition"]["@odata.id"],
        "/redfish/v1/Systems/beta"
    );
    assert_eq!(rec["Oem"]["Pinfold"]["Detail"], "stopped by the manager");
    assert_eq!(
        events[0].1["Events"][0]["MessageId"],
        "ResourceEvent.1.4.2.ResourcePoweredOn"
    );
    // A contained fault: an alert naming the error.
    let rec = &events[2].1["Events"][0];
    assert_eq!(rec["EventType"], "Alert");
    assert_eq!(rec["Severity"], "Warning");
    assert_eq!(
        rec["MessageId"],
        "ResourceEvent.1.4.2.ResourceErrorsDetected"
    );
    assert_eq!(
        rec["MessageArgs"],
        json!(["Status", "data abort at 0x9000000 (contained)"])
    );
    assert_eq!(
        rec["OriginOfCondition"]["@odata.id"],
        "/redfish/v1/Systems/beta"
    );
    // A crash: health Critical.
    let rec = &events[3].1["Events"][0];
    assert_eq!(
        rec["MessageId"],
        "ResourceEvent.1.4.2.ResourceStatusChangedCritical"
    );
    assert_eq!(rec["Severity"], "Critical");
}

#[test]
fn the_event_service_stream_resumes_after_last_event_id() {
    let mut r = router();
    r.backend_mut().hv_events = (0..3).map(|s| hv_event(s, "beta", "stopped")).collect();
    let mut q = rf_get("/redfish/v1/EventService/SSE");
    q.headers.push(("Last-Event-ID".into(), "2000".into()));
    let ids: Vec<u64> = sse_events(&text(&r.handle(&q)))
        .iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(ids, [3000]);
    // The server's open stream frames the same way.
    let mut stream = r.open_stream(&q).expect("a stream");
    let chunk = stream.poll(&r.events, Instant::now()).expect("an event");
    let got = sse_events(&chunk);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, 3000);
    assert_eq!(
        got[0].1["Events"][0]["MessageId"],
        "ResourceEvent.1.4.2.ResourcePoweredOff"
    );
    // The REST stream keeps its own frames.
    let mut rest = get("/api/v1/events/stream");
    rest.headers.push(("Last-Event-ID".into(), "2000".into()));
    let resp = r.handle(&rest);
    assert_eq!(sse_events(&text(&resp))[0].1["kind"], "state");
}

#[test]
fn a_refused_login_streams_as_an_unauthorized_uri() {
    let mut r = router();
    let mut bad = post("/api/v1/partitions/beta/start", "");
    bad.headers.clear();
    assert_eq!(r.handle(&bad).status, 401);
    let events = sse_events(&text(&r.handle(&rf_get("/redfish/v1/EventService/SSE"))));
    let rec = &events.last().expect("the refusal").1["Events"][0];
    assert_eq!(rec["MessageId"], "Base.1.15.0.ResourceAtUriUnauthorized");
    assert_eq!(rec["MessageArgs"][0], "/api/v1/partitions/beta/start");
    assert_eq!(
        rec["OriginOfCondition"]["@odata.id"],
        "/redfish/v1/SessionService"
    );
}

#[test]
fn the_event_service_stream_needs_a_credential() {
    let mut r = router();
    r.record("config", Some("beta"), "hello");
    let events = sse_events(&text(&r.handle(&rf_get("/redfish/v1/EventService/SSE"))));
    let rec = &events[0].1["Events"][0];
    assert_eq!(rec["MessageId"], "ResourceEvent.1.4.2.ResourceChanged");
    assert_eq!(rec["Oem"]["Pinfold"]["Detail"], "hello");
    let refused = r.open_stream(&without_auth(rf_get("/redfish/v1/EventService/SSE")));
    let resp = refused.expect_err("no credential");
    assert_eq!(resp.status, 401);
    assert_eq!(message_id(&resp), "Base.1.15.0.NoValidSession");
}

#[test]
fn a_reset_is_an_event_naming_who_asked() {
    let mut r = router();
    assert_eq!(reset(&mut r, "beta", "On").status, 204);
    let list = r.events.since(0, 100);
    assert!(
        list.events.iter().any(|e| e
            .message
            .contains("operator boot Redfish ComputerSystem.Reset On")),
        "{:?}",
        list.events
    );
}

#[test]
fn redfish_paths_are_not_in_the_openapi_document() {
    let doc: Value = serde_json::from_str(OPENAPI_JSON).unwrap();
    assert!(doc["paths"]
        .as_object()
        .unwrap()
        .keys()
        .all(|k| !k.starts_with("/redfish")));
}

#[test]
fn state_events_become_the_resource_event_registrys_messages() {
    let event = |kind: &str, message: &str| crate::events::ApiEvent {
        seq: 7,
        time: None,
        kind: kind.into(),
        partition: Some("beta".into()),
        message: message.into(),
    };
    for (state, id, text, severity) in [
        (
            "running",
            "ResourcePoweredOn",
            "The resource 'beta' has powered on.",
            "OK",
        ),
        (
            "stopped (asked)",
            "ResourcePoweredOff",
            "The resource 'beta' has powered off.",
            "OK",
        ),
        (
            "shutting down",
            "ResourcePoweringOff",
            "The resource 'beta' is powering off.",
            "OK",
        ),
        (
            "crashed: watchdog",
            "ResourceStatusChangedCritical",
            "The health of resource 'beta' has changed to Critical.",
            "Critical",
        ),
    ] {
        let v = crate::redfish::event_resource(&event("state", state));
        let record = &v["Events"][0];
        assert_eq!(
            record["MessageId"],
            format!("ResourceEvent.1.4.2.{id}"),
            "{state}"
        );
        assert_eq!(record["Message"], text, "{state}");
        assert_eq!(record["Severity"], severity, "{state}");
        assert_eq!(
            record["OriginOfCondition"]["@odata.id"],
            "/redfish/v1/Systems/beta"
        );
    }
    // A fault is not a power change even if its text starts like one.
    let v = crate::redfish::event_resource(&event("fault", "running out of budget"));
    assert_eq!(
        v["Events"][0]["MessageId"],
        "ResourceEvent.1.4.2.ResourceErrorsDetected"
    );
}

// ---------------------------------------------------------------------------
// Boot override and HTTP boot (httpboot)
// ---------------------------------------------------------------------------

/// An arm64 Image: the magic at offset 56, then filler.
fn arm64_image(len: usize, seed: u8) -> Vec<u8> {
    let mut data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed)).collect();
    data[56..60].copy_from_slice(b"ARM\x64");
    data
}

/// Serves `files` (path, body) on localhost to any number of GETs, 404
/// for other paths; the base URL.
fn boot_server(files: Vec<(&'static str, Vec<u8>)>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        use std::io::{BufRead, BufReader, Write};
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut request = String::new();
            let _ = reader.read_line(&mut request);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut stream = reader.into_inner();
            match files.iter().find(|(p, _)| *p == path) {
                Some((_, body)) => {
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                    let _ = stream.write_all(head.as_bytes());
                    let _ = stream.write_all(body);
                }
                None => {
                    let _ =
                        stream.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
                }
            }
        }
    });
    base
}

fn patch_boot(r: &mut Router<FakeBackend>, name: &str, boot: Value) -> Response {
    r.handle(&rf(
        "PATCH",
        &format!("/redfish/v1/Systems/{name}"),
        &json!({ "Boot": boot }).to_string(),
    ))
}

fn system_json(r: &mut Router<FakeBackend>, name: &str) -> Value {
    body_json(&r.handle(&rf_get(&format!("/redfish/v1/Systems/{name}"))))
}

#[test]
fn a_patch_sets_the_http_boot_override_and_the_system_shows_it() {
    let mut r = router();
    let before = system_json(&mut r, "beta");
    assert_eq!(before["Boot"]["BootSourceOverrideTarget"], "None");
    assert_eq!(
        before["Boot"]["BootSourceOverrideTarget@Redfish.AllowableValues"],
        json!(["None", "UefiHttp"])
    );

    let resp = patch_boot(
        &mut r,
        "beta",
        json!({"BootSourceOverrideTarget": "UefiHttp", "HttpBootUri": "http://10.0.2.2:8000/beta/boot.json"}),
    );

    assert_eq!(resp.status, 200, "{}", text(&resp));
    let v = body_json(&resp);
    assert_eq!(v["Boot"]["BootSourceOverrideTarget"], "UefiHttp");
    // A target alone enables it for the next boot.
    assert_eq!(v["Boot"]["BootSourceOverrideEnabled"], "Once");
    assert_eq!(
        v["Boot"]["HttpBootUri"],
        "http://10.0.2.2:8000/beta/boot.json"
    );
    assert_eq!(system_json(&mut r, "beta")["Boot"], v["Boot"]);
    assert!(r.backend().calls.is_empty(), "{:?}", r.backend().calls);
    assert!(r
        .events
        .since(0, 1000)
        .events
        .iter()
        .any(|e| e.message.contains("Redfish boot override to UefiHttp")));
    // Back to None disables it.
    let resp = patch_boot(&mut r, "beta", json!({"BootSourceOverrideTarget": "None"}));
    assert_eq!(
        body_json(&resp)["Boot"]["BootSourceOverrideEnabled"],
        "Disabled"
    );
}

#[test]
fn bad_boot_patches_are_redfish_errors_and_change_nothing() {
    let mut r = router();
    let good = json!({"BootSourceOverrideTarget": "UefiHttp", "BootSourceOverrideEnabled": "Continuous", "HttpBootUri": "http://h/k"});
    assert_eq!(patch_boot(&mut r, "beta", good).status, 200);
    let before = system_json(&mut r, "beta")["Boot"].clone();
    let cases = [
        (
            json!({"BootSourceOverrideTarget": "Pxe"}),
            "PropertyValueNotInList",
        ),
        (
            json!({"BootSourceOverrideEnabled": "Always"}),
            "PropertyValueNotInList",
        ),
        (
            json!({"BootSourceOverrideEnabled": 1}),
            "PropertyValueTypeError",
        ),
        (
            json!({"HttpBootUri": "https://h/k"}),
            "PropertyValueFormatError",
        ),
        (json!({"HttpBootUri": null}), "PropertyValueConflict"),
        (
            json!({"BootSourceOverrideMode": "UEFI"}),
            "PropertyNotWritable",
        ),
    ];
    for (boot, id) in cases {
        let resp = patch_boot(&mut r, "beta", boot.clone());
        assert_eq!(resp.status, 400, "{boot}: {}", text(&resp));
        assert_eq!(message_id(&resp), format!("Base.1.15.0.{id}"), "{boot}");
        assert_eq!(system_json(&mut r, "beta")["Boot"], before, "{boot}");
    }
    // The management partition's boot is not writable.
    let resp = patch_boot(
        &mut r,
        "mgmt",
        json!({"BootSourceOverrideTarget": "UefiHttp", "HttpBootUri": "http://h/k"}),
    );
    assert_eq!(message_id(&resp), "Base.1.15.0.PropertyNotWritable");
    assert_eq!(
        system_json(&mut r, "mgmt")["Boot"]["BootSourceOverrideTarget"],
        "None"
    );
    // A stale If-Match: 412.
    let mut req = rf(
        "PATCH",
        "/redfish/v1/Systems/beta",
        r#"{"Boot":{"HttpBootUri":"http://h/other"}}"#,
    );
    req.headers
        .push(("If-Match".into(), "W/\"0123456789abcdef\"".into()));
    let resp = r.handle(&req);
    assert_eq!(resp.status, 412, "{}", text(&resp));
    assert_eq!(message_id(&resp), "Base.1.15.0.PreconditionFailed");
    // The current ETag is accepted.
    let tag = r
        .handle(&rf_get("/redfish/v1/Systems/beta"))
        .headers
        .iter()
        .find(|(k, _)| *k == "ETag")
        .map(|(_, v)| v.clone())
        .expect("etag");
    req.headers.last_mut().expect("if-match").1 = tag;
    assert_eq!(r.handle(&req).status, 200);
    assert!(r.backend().calls.is_empty(), "{:?}", r.backend().calls);
}

fn beta_plan(r: &mut Router<FakeBackend>) -> pinfold_abi::PartitionPlan {
    r.backend().plan_of(BETA).expect("beta's plan")
}

#[test]
fn a_force_restart_with_the_override_boots_the_fetched_kernel_once() {
    let kernel = arm64_image(70_000, 3);
    let base = boot_server(vec![("/beta/Image", kernel.clone())]);
    let router = Mutex::new(router());
    let mut r = router.lock().unwrap();
    r.backend_mut().partitions[2].state = PartitionState::Running;
    let plan_before = beta_plan(&mut r);
    let uri = format!("{base}/beta/Image");
    assert_eq!(
        patch_boot(
            &mut r,
            "beta",
            json!({"BootSourceOverrideTarget": "UefiHttp", "HttpBootUri": uri})
        )
        .status,
        200
    );

    assert_eq!(reset(&mut r, "beta", "ForceRestart").status, 204);

    // Powered off, not restarted; Redfish shows it powering on.
    assert_eq!(r.backend().calls, [format!("stop {BETA}")]);
    r.backend_mut().partitions[2].state = PartitionState::Stopped;
    let v = system_json(&mut r, "beta");
    assert_eq!(v["PowerState"], "PoweringOn");
    assert_eq!(v["Oem"]["Pinfold"]["HttpBoot"]["State"], "Waiting");
    drop(r);
    crate::httpboot::run(&router);
    let mut r = router.lock().unwrap();
    let plan = beta_plan(&mut r);
    assert_ne!(plan.kernel.image, plan_before.kernel.image);
    let stored = r
        .backend()
        .images
        .iter()
        .find(|(i, _)| i.id == plan.kernel.image)
        .map(|(_, d)| d.clone())
        .expect("the fetched kernel");
    assert_eq!(stored, kernel);
    assert_eq!(
        plan.initrd, plan_before.initrd,
        "a bare kernel keeps the initrd"
    );
    assert_eq!(plan.bootargs, plan_before.bootargs);
    assert_eq!(state_of(&mut r, BETA).0, PartitionState::Running);
    assert_eq!(r.backend().calls.last().unwrap(), &format!("start {BETA}"));
    let v = system_json(&mut r, "beta");
    assert_eq!(v["PowerState"], "On");
    assert_eq!(v["Oem"]["Pinfold"]["HttpBoot"]["State"], "Booted");
    assert_eq!(
        v["Oem"]["Pinfold"]["HttpBoot"]["KernelImage"],
        plan.kernel.image.to_string()
    );
    // Once: the override is used up.
    assert_eq!(v["Boot"]["BootSourceOverrideTarget"], "None");
    assert_eq!(v["Boot"]["BootSourceOverrideEnabled"], "Disabled");
    // The next restart is an ordinary one.
    let calls = r.backend().calls.len();
    assert_eq!(reset(&mut r, "beta", "ForceRestart").status, 204);
    assert_eq!(r.backend().calls[calls..], [format!("restart {BETA}")]);
}

#[test]
fn a_manifest_boots_kernel_initrd_and_bootargs_and_continuous_replaces_the_last_images() {
    let kernel = arm64_image(9_000, 5);
    let initrd = vec![0x1f; 5_000];
    let digest = |d: &[u8]| {
        use sha2::Digest;
        crate::json::hex(&sha2::Sha256::digest(d))
    };
    let manifest = json!({
        "kernel": "Image", "initrd": "/initrd.gz", "bootargs": "console=ttyAMA0 http",
        "kernel_sha256": digest(&kernel), "initrd_sha256": digest(&initrd),
    });
    let base = boot_server(vec![
        ("/b/boot.json", manifest.to_string().into_bytes()),
        ("/b/Image", kernel.clone()),
        ("/initrd.gz", initrd.clone()),
    ]);
    let router = Mutex::new(router());
    let mut r = router.lock().unwrap();
    let boot = json!({"BootSourceOverrideTarget": "UefiHttp", "BootSourceOverrideEnabled": "Continuous", "HttpBootUri": format!("{base}/b/boot.json")});
    assert_eq!(patch_boot(&mut r, "beta", boot).status, 200);
    let mut booted = Vec::new();
    for _ in 0..2 {
        // beta is off: On boots it over HTTP.
        assert_eq!(reset(&mut r, "beta", "On").status, 204);
        drop(r);
        crate::httpboot::run(&router);
        r = router.lock().unwrap();
        let plan = beta_plan(&mut r);
        assert_eq!(plan.bootargs, "console=ttyAMA0 http");
        let initrd_id = plan.initrd.expect("an initrd");
        let data = |r: &mut Router<FakeBackend>, id: u32| {
            r.backend()
                .images
                .iter()
                .find(|(i, _)| i.id == id)
                .map(|(_, d)| d.clone())
        };
        assert_eq!(data(&mut r, plan.kernel.image), Some(kernel.clone()));
        assert_eq!(data(&mut r, initrd_id), Some(initrd.clone()));
        assert_eq!(state_of(&mut r, BETA).0, PartitionState::Running);
        booted.push((plan.kernel.image, initrd_id));
        assert_eq!(
            system_json(&mut r, "beta")["Boot"]["BootSourceOverrideEnabled"],
            "Continuous"
        );
        assert_eq!(reset(&mut r, "beta", "ForceOff").status, 204);
        r.backend_mut().partitions[2].state = PartitionState::Stopped;
    }
    // The second boot fetched afresh and the first boot's images are gone.
    assert_ne!(booted[0], booted[1]);
    let ids: Vec<u32> = r.backend().images.iter().map(|(i, _)| i.id).collect();
    assert!(
        !ids.contains(&booted[0].0) && !ids.contains(&booted[0].1),
        "{ids:?}"
    );
}

#[test]
fn a_failed_http_boot_leaves_the_partition_off_and_unchanged() {
    let kernel = arm64_image(4_000, 7);
    let manifest = json!({"kernel": "Image", "kernel_sha256": "00".repeat(32)});
    let base = boot_server(vec![
        ("/boot.json", manifest.to_string().into_bytes()),
        ("/Image", kernel),
        (
            "/bad.json",
            b"{\"kernel\": \"Image\", \"cmdline\": \"x\"}".to_vec(),
        ),
    ]);
    for (path, why) in [
        ("/boot.json", "SHA-256"),
        ("/missing", "404"),
        ("/bad.json", "not a boot manifest"),
    ] {
        let router = Mutex::new(router());
        let mut r = router.lock().unwrap();
        let plan_before = beta_plan(&mut r);
        let images_before = r.backend().images.len();
        let boot =
            json!({"BootSourceOverrideTarget": "UefiHttp", "HttpBootUri": format!("{base}{path}")});
        assert_eq!(patch_boot(&mut r, "beta", boot).status, 200);
        assert_eq!(reset(&mut r, "beta", "On").status, 204);
        drop(r);
        crate::httpboot::run(&router);
        let mut r = router.lock().unwrap();
        assert_eq!(state_of(&mut r, BETA).0, PartitionState::Stopped, "{path}");
        assert_eq!(beta_plan(&mut r), plan_before, "{path}");
        assert_eq!(
            r.backend().images.len(),
            images_before,
            "{path}: no image left behind"
        );
        let v = system_json(&mut r, "beta");
        let report = &v["Oem"]["Pinfold"]["HttpBoot"];
        assert_eq!(report["State"], "Failed", "{path}: {report}");
        assert!(
            report["Message"].as_str().unwrap().contains(why),
            "{path}: {report}"
        );
        assert_eq!(v["PowerState"], "Off");
        // A Once override that did not boot stays set.
        assert_eq!(v["Boot"]["BootSourceOverrideTarget"], "UefiHttp");
        assert!(r
            .events
            .since(0, 1000)
            .events
            .iter()
            .any(|e| e.message.contains("HTTP boot of beta") && e.message.contains("failed")));
    }
}

#[test]
fn a_force_off_cancels_a_waiting_http_boot() {
    let base = boot_server(vec![("/Image", arm64_image(4_000, 9))]);
    let router = Mutex::new(router());
    let mut r = router.lock().unwrap();
    r.backend_mut().partitions[2].state = PartitionState::Running;
    let boot =
        json!({"BootSourceOverrideTarget": "UefiHttp", "HttpBootUri": format!("{base}/Image")});
    assert_eq!(patch_boot(&mut r, "beta", boot).status, 200);
    assert_eq!(reset(&mut r, "beta", "GracefulRestart").status, 204);
    assert_eq!(r.backend().calls, [format!("shutdown {BETA}")]);
    assert!(
        r.redfish.pending_starts().is_empty(),
        "the HTTP boot starts it, not the follower"
    );
    assert_eq!(reset(&mut r, "beta", "ForceOff").status, 204);
    r.backend_mut().partitions[2].state = PartitionState::Stopped;
    let images = r.backend().images.len();
    drop(r);
    crate::httpboot::run(&router);
    let mut r = router.lock().unwrap();
    assert_eq!(state_of(&mut r, BETA).0, PartitionState::Stopped);
    assert_eq!(r.backend().images.len(), images);
    assert_eq!(
        system_json(&mut r, "beta")["Oem"]["Pinfold"]["HttpBoot"],
        Value::Null
    );
}
