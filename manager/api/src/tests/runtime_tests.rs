//! Host tests of run-time partitions, resources and images through the FakeBackend: every route, every error, and that a refused request leaves nothing behind.

use super::*;
use std::io::Read;
use std::sync::{Arc, Mutex};

fn with_auth(method: &str, path: &str, body: &[u8]) -> Request {
    Request {
        method: method.into(),
        path: path.into(),
        headers: vec![("Authorization".into(), format!("Bearer {TOKEN}"))],
        body: body.to_vec(),
        peer: None,
    }
}

fn patch(path: &str, body: &str) -> Request {
    with_auth("PATCH", path, body.as_bytes())
}

fn delete(path: &str) -> Request {
    with_auth("DELETE", path, b"")
}

/// A kernel image: the arm64 Image magic at offset 56, then filler.
fn kernel(len: usize) -> Vec<u8> {
    let mut data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    data[56..60].copy_from_slice(b"ARM\x64");
    data
}

fn upload_req(query: &str, data: &[u8]) -> Request {
    let mut req = with_auth("POST", &format!("/api/v1/images?{query}"), data);
    req.headers
        .push(("Content-Length".into(), data.len().to_string()));
    req
}

/// Uploads `data` as `kind`; the new image's id.
fn upload(r: &mut Router<FakeBackend>, kind: &str, data: &[u8]) -> String {
    let resp = r.handle(&upload_req(&format!("kind={kind}&name=test"), data));
    assert_eq!(resp.status, 201, "{}", text(&resp));
    body_json(&resp)["id"].as_str().expect("id").to_string()
}

/// The bytes of each image uploaded (not the boot bundle's).
fn uploads(b: &FakeBackend) -> Vec<Vec<u8>> {
    b.images
        .iter()
        .filter(|(i, _)| !i.boot)
        .map(|(_, d)| d.clone())
        .collect()
}

fn field(resp: &Response) -> String {
    body_json(resp)["field"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn detail(resp: &Response) -> String {
    body_json(resp)["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A router with a kernel and an initrd uploaded; their ids.
fn with_images() -> (Router<FakeBackend>, String, String) {
    let mut r = router();
    let k = upload(&mut r, "kernel", &kernel(4096));
    let i = upload(&mut r, "initrd", &[1, 2, 3, 4]);
    (r, k, i)
}

fn create_body(name: &str, cpus: &str, kernel: &str) -> String {
    format!(r#"{{"name":"{name}","cpus":{cpus},"memory_mib":256,"kernel":"{kernel}"}}"#)
}

fn partition_count(r: &Router<FakeBackend>) -> usize {
    r.backend().partitions.len()
}

// ---------------------------------------------------------------------------
// Create
// ---------------------------------------------------------------------------

#[test]
fn create_is_201_stopped_with_location_config_and_etag() {
    let (mut r, k, i) = with_images();

    let resp = r.handle(&post(
        "/api/v1/partitions",
        &format!(
            r#"{{"name":"gamma","cpus":[1,3],"memory_mib":256,"kernel":"{k}","initrd":{i},
                "bootargs":"console=ttyAMA0","restart":"on-crash","restart_limit":3,
                "watchdog_s":5,"shutdown_timeout_s":10}}"#
        ),
    ));

    assert_eq!(resp.status, 201, "{}", text(&resp));
    assert_eq!(resp.header("Location"), Some("/api/v1/partitions/gamma"));
    let body = body_json(&resp);
    assert_eq!(body["state"], "stopped");
    assert_eq!(
        body["config"],
        json!({"cpus":[1,3],"memory_mib":256,"kernel":k,"kernel_format":"linux","initrd":i,
               "bootargs":"console=ttyAMA0","autostart":false,"restart":"on-crash",
               "restart_limit":3,"watchdog_s":5,"shutdown_timeout_s":10,"devices":[],"pci":[],
               "gic":"auto"})
    );
    let plan = r.backend().plans.values().next().expect("a plan").clone();
    assert_eq!(plan.ram_size, 256 << 20);
    assert_eq!(plan.lifecycle.watchdog_s, 5);
    assert_eq!(resp.header("ETag"), Some(runtime::etag(&plan).as_str()));
}

#[test]
fn create_takes_gic_and_refuses_a_value_that_is_no_interface_naming_gic() {
    let (mut r, k, _) = with_images();

    let bad = r.handle(&post(
        "/api/v1/partitions",
        &format!(r#"{{"name":"gamma","cpus":[1],"memory_mib":256,"kernel":"{k}","gic":"v4"}}"#),
    ));
    assert_eq!(bad.status, 400, "{}", text(&bad));
    let body = body_json(&bad);
    assert_eq!(body["field"], "gic");
    assert_eq!(
        body["detail"],
        "partition \"gamma\": gic: \"v4\" is not \"auto\", \"v3\" or \"v5\""
    );
    assert!(r.backend().plans.is_empty(), "nothing created");

    let ok = r.handle(&post(
        "/api/v1/partitions",
        &format!(r#"{{"name":"gamma","cpus":[1],"memory_mib":256,"kernel":"{k}","gic":"v3"}}"#),
    ));
    assert_eq!(ok.status, 201, "{}", text(&ok));
    assert_eq!(body_json(&ok)["config"]["gic"], "v3");
    let plan = r.backend().plans.values().next().expect("a plan").clone();
    assert_eq!(plan.gic, pinfold_config::GicSetting::V3);
}

fn create_with_pci(name: &str, cpus: &str, kernel: &str, pci: &str) -> String {
    format!(r#"{{"name":"{name}","cpus":{cpus},"memory_mib":256,"kernel":"{kernel}","pci":{pci}}}"#)
}

#[test]
fn create_with_pci_functions_puts_them_in_the_plan_and_shows_them() {
    let (mut r, k, _) = with_images();

    let resp = r.handle(&post(
        "/api/v1/partitions",
        &create_with_pci("gamma", "[3]", &k, r#"["0000:00:02.0","0000:00:03.1"]"#),
    ));

    assert_eq!(resp.status, 201, "{}", text(&resp));
    assert_eq!(
        body_json(&resp)["config"]["pci"],
        json!(["0000:00:02.0", "0000:00:03.1"])
    );
    let plan = r.backend().plans.values().next().expect("a plan").clone();
    let functions: Vec<String> = plan.pci.iter().map(ToString::to_string).collect();
    assert_eq!(functions, ["0000:00:02.0", "0000:00:03.1"]);
    let listed = body_json(&r.handle(&get("/api/v1/partitions/gamma")));
    assert_eq!(
        listed["config"]["pci"],
        json!(["0000:00:02.0", "0000:00:03.1"])
    );
}

#[test]
fn create_with_a_malformed_pci_entry_is_400_naming_its_index_and_leaves_nothing() {
    let (mut r, k, _) = with_images();
    let before = partition_count(&r);

    for (list, index, shown) in [
        (r#"["0000:00:02.0","00:03.0"]"#, 1, r#""00:03.0""#),
        (r#"["0000:00:20.0"]"#, 0, r#""0000:00:20.0""#),
        (r#"[2]"#, 0, "2"),
    ] {
        let resp = r.handle(&post(
            "/api/v1/partitions",
            &create_with_pci("gamma", "[3]", &k, list),
        ));

        assert_eq!(
            (resp.status, field(&resp)),
            (400, format!("pci[{index}]")),
            "{list}: {}",
            text(&resp)
        );
        assert_eq!(
            detail(&resp),
            format!(
                "partition \"gamma\": pci[{index}]: {shown} is not a PCI function \
                 \"SSSS:BB:DD.F\" (hex, e.g. \"0000:00:02.0\")"
            )
        );
    }
    let resp = r.handle(&post(
        "/api/v1/partitions",
        &create_with_pci("gamma", "[3]", &k, r#""0000:00:02.0""#),
    ));
    assert_eq!((resp.status, field(&resp).as_str()), (400, "pci"));
    assert_eq!(partition_count(&r), before);
    assert!(r.backend().plans.is_empty());
}

#[test]
fn a_pci_function_another_partition_has_is_409_naming_it_until_moved_by_patch() {
    let (mut r, k, _) = with_images();
    let gamma = r.handle(&post(
        "/api/v1/partitions",
        &create_with_pci("gamma", "[3]", &k, r#"["0000:00:02.0"]"#),
    ));
    assert_eq!(gamma.status, 201, "{}", text(&gamma));

    let resp = r.handle(&post(
        "/api/v1/partitions",
        &create_with_pci("delta", "[4]", &k, r#"["0000:00:04.0","0000:00:02.0"]"#),
    ));
    assert_eq!(
        (
            resp.status,
            error_code(&resp).as_str(),
            field(&resp).as_str()
        ),
        (409, "conflict", "pci[1]"),
        "{}",
        text(&resp)
    );
    assert_eq!(
        detail(&resp),
        r#"partition "delta": pci[1]: 0000:00:02.0 is already assigned to partition "gamma""#
    );

    // gamma gives 00:02.0 up (a PATCH of the stopped partition): delta can
    // have it.
    let moved = r.handle(&patch(
        "/api/v1/partitions/gamma",
        r#"{"pci":["0000:00:05.0"]}"#,
    ));
    assert_eq!(moved.status, 200, "{}", text(&moved));
    assert_eq!(body_json(&moved)["config"]["pci"], json!(["0000:00:05.0"]));
    let resp = r.handle(&post(
        "/api/v1/partitions",
        &create_with_pci("delta", "[4]", &k, r#"["0000:00:02.0"]"#),
    ));
    assert_eq!(resp.status, 201, "{}", text(&resp));
    // And back: gamma cannot take it while delta has it.
    let back = r.handle(&patch(
        "/api/v1/partitions/gamma",
        r#"{"pci":["0000:00:02.0"]}"#,
    ));
    assert_eq!((back.status, field(&back).as_str()), (409, "pci[0]"));
}

#[test]
fn create_with_autostart_starts_it() {
    let (mut r, k, _) = with_images();
    let body =
        format!(r#"{{"name":"gamma","cpus":[1],"memory_mib":64,"kernel":"{k}","autostart":true}}"#);

    let resp = r.handle(&post("/api/v1/partitions", &body));

    assert_eq!(resp.status, 201, "{}", text(&resp));
    assert_eq!(body_json(&resp)["state"], "running");
    assert!(r.backend().calls.iter().any(|c| c == "start 20"));
}

#[test]
fn create_on_a_cpu_another_partition_has_is_409_naming_cpus_and_leaves_nothing() {
    let (mut r, k, _) = with_images();
    let before = partition_count(&r);

    let resp = r.handle(&post(
        "/api/v1/partitions",
        &create_body("gamma", "[1,2]", &k),
    ));

    assert_eq!(
        (
            resp.status,
            error_code(&resp).as_str(),
            field(&resp).as_str()
        ),
        (409, "conflict", "cpus")
    );
    assert_eq!(
        detail(&resp),
        r#"partition "gamma": cpus: CPU 2 is also used by partition "beta""#
    );
    assert_eq!(partition_count(&r), before);
    assert!(r.backend().plans.is_empty());
}

#[test]
fn create_with_more_ram_than_is_free_is_409_naming_memory() {
    let (mut r, k, _) = with_images();
    let before = partition_count(&r);
    let body = format!(r#"{{"name":"gamma","cpus":[1],"memory_mib":4096,"kernel":"{k}"}}"#);

    let resp = r.handle(&post("/api/v1/partitions", &body));

    assert_eq!((resp.status, field(&resp).as_str()), (409, "memory"));
    assert_eq!(
        detail(&resp),
        r#"partition "gamma": memory: 4096 MiB does not fit in the free RAM (the largest free block is 1024 MiB)"#
    );
    assert_eq!(partition_count(&r), before);
}

#[test]
fn create_with_a_name_taken_is_409_naming_name() {
    let (mut r, k, _) = with_images();
    let before = partition_count(&r);

    let resp = r.handle(&post(
        "/api/v1/partitions",
        &create_body("alpha", "[1]", &k),
    ));

    assert_eq!((resp.status, field(&resp).as_str()), (409, "name"));
    assert_eq!(partition_count(&r), before);
}

#[test]
fn create_with_an_initrd_as_kernel_is_400_naming_kernel() {
    let (mut r, _, i) = with_images();

    let resp = r.handle(&post(
        "/api/v1/partitions",
        &create_body("gamma", "[1]", &i),
    ));

    assert_eq!(
        (
            resp.status,
            error_code(&resp).as_str(),
            field(&resp).as_str()
        ),
        (400, "bad_request", "kernel")
    );
    assert_eq!(
        detail(&resp),
        format!(r#"partition "gamma": kernel: image {i} is an initrd, not a kernel"#)
    );
    assert!(r.backend().plans.is_empty());
}

#[test]
fn create_with_no_such_image_is_400_naming_kernel() {
    let (mut r, _, _) = with_images();

    let resp = r.handle(&post(
        "/api/v1/partitions",
        &create_body("gamma", "[1]", "77"),
    ));

    assert_eq!((resp.status, field(&resp).as_str()), (400, "kernel"));
}

#[test]
fn hypervisor_rejection_of_a_field_on_its_own_is_400_with_its_sentence() {
    let (mut r, k, _) = with_images();
    let body = format!(r#"{{"name":"gamma","cpus":[1],"memory_mib":3,"kernel":"{k}"}}"#);

    let resp = r.handle(&post("/api/v1/partitions", &body));

    assert_eq!((resp.status, field(&resp).as_str()), (400, "memory"));
    assert_eq!(
        detail(&resp),
        r#"partition "gamma": memory: 3MiB is not a multiple of 2MiB"#
    );
}

#[test]
fn a_lifecycle_value_the_rules_refuse_is_400_with_the_builds_sentence() {
    let (mut r, k, _) = with_images();
    let cases = [
        (
            r#""watchdog_s":4000"#,
            "watchdog_s",
            r#"partition "gamma": watchdog_s: 4000 is out of range: 0 (off) or 1..=3600 seconds"#,
        ),
        (
            r#""shutdown_timeout_s":0"#,
            "shutdown_timeout_s",
            r#"partition "gamma": shutdown_timeout_s: 0 is out of range: 1..=3600 seconds"#,
        ),
        (
            r#""restart":"never","restart_limit":2"#,
            "restart_limit",
            r#"partition "gamma": restart_limit: has no effect with restart = "never"; set restart = "on-crash" or "always""#,
        ),
    ];
    for (extra, want_field, sentence) in cases {
        let body =
            format!(r#"{{"name":"gamma","cpus":[1],"memory_mib":64,"kernel":"{k}",{extra}}}"#);

        let resp = r.handle(&post("/api/v1/partitions", &body));

        assert_eq!((resp.status, field(&resp).as_str()), (400, want_field));
        assert_eq!(detail(&resp), sentence);
    }
    assert_eq!(
        r.handle(&get("/api/v1/partitions/gamma")).status,
        404,
        "nothing created"
    );
}

#[test]
fn create_with_an_unknown_field_is_400_naming_it() {
    let (mut r, k, _) = with_images();
    let body = format!(r#"{{"name":"gamma","cpus":[1],"memory_mib":64,"kernel":"{k}","cpu":[2]}}"#);

    let resp = r.handle(&post("/api/v1/partitions", &body));

    assert_eq!((resp.status, field(&resp).as_str()), (400, "cpu"));
    assert!(
        detail(&resp).starts_with("unknown field \"cpu\""),
        "{}",
        detail(&resp)
    );
    assert!(r.backend().calls.iter().all(|c| !c.starts_with("create")));
}

#[test]
fn create_missing_a_required_field_or_with_a_wrong_type_names_it() {
    let mut r = router();
    let cases = [
        (r#"{"name":"g","cpus":[1],"memory_mib":64}"#, "kernel"),
        (r#"{"name":"g","memory_mib":64,"kernel":"1"}"#, "cpus"),
        (r#"{"name":"g","cpus":[1],"kernel":"1"}"#, "memory"),
        (r#"{"cpus":[1],"memory_mib":64,"kernel":"1"}"#, "name"),
        (
            r#"{"name":"g","cpus":"1","memory_mib":64,"kernel":"1"}"#,
            "cpus",
        ),
        (
            r#"{"name":"g","cpus":[1],"memory_mib":-1,"kernel":"1"}"#,
            "memory",
        ),
        (
            r#"{"name":"g","cpus":[1],"memory_mib":64,"kernel":"x"}"#,
            "kernel",
        ),
        (
            r#"{"name":"g","cpus":[1],"memory_mib":64,"kernel":"1","restart":"sometimes"}"#,
            "restart",
        ),
        (
            r#"{"name":"g","cpus":[1],"memory_mib":64,"kernel":"1","kernel_format":"elf"}"#,
            "kernel_format",
        ),
    ];

    for (body, want) in cases {
        let resp = r.handle(&post("/api/v1/partitions", body));
        assert_eq!((resp.status, field(&resp).as_str()), (400, want), "{body}");
    }
    assert!(r.backend().plans.is_empty());
}

#[test]
fn create_without_a_token_is_401() {
    let mut r = router();
    let req = Request {
        method: "POST".into(),
        path: "/api/v1/partitions".into(),
        body: br#"{"name":"g"}"#.to_vec(),
        ..Request::default()
    };

    assert_eq!(r.handle(&req).status, 401);
}

#[test]
fn list_carries_each_partitions_config() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/partitions"));

    assert_eq!(
        body_json(&resp)["partitions"][2]["config"]["cpus"],
        json!([2])
    );
}

// ---------------------------------------------------------------------------
// Change and delete
// ---------------------------------------------------------------------------

#[test]
fn get_partition_has_the_etag_of_its_config() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/partitions/beta"));

    let plan = r.backend().plan_of(BETA).expect("plan");
    let tag = resp.header("ETag").expect("ETag");
    assert_eq!(tag, runtime::etag(&plan));
    assert_eq!(tag.len(), 66, "quoted SHA-256 hex: {tag}");
}

#[test]
fn patch_changes_bootargs_and_memory_of_a_stopped_partition() {
    let mut r = router();
    let tag = r
        .handle(&get("/api/v1/partitions/beta"))
        .header("ETag")
        .expect("etag")
        .to_string();
    let mut req = patch(
        "/api/v1/partitions/beta",
        r#"{"bootargs":"quiet","memory_mib":128}"#,
    );
    req.headers.push(("If-Match".into(), tag.clone()));

    let resp = r.handle(&req);

    assert_eq!(resp.status, 200, "{}", text(&resp));
    assert_eq!(body_json(&resp)["config"]["bootargs"], "quiet");
    assert_eq!(body_json(&resp)["config"]["memory_mib"], 128);
    assert_eq!(body_json(&resp)["ram_bytes"], 128 << 20);
    assert_ne!(
        resp.header("ETag"),
        Some(tag.as_str()),
        "new config, new tag"
    );
}

#[test]
fn patch_with_a_stale_etag_is_412_and_changes_nothing() {
    let mut r = router();
    let mut req = patch("/api/v1/partitions/beta", r#"{"bootargs":"quiet"}"#);
    req.headers.push(("If-Match".into(), "\"0000\"".into()));

    let resp = r.handle(&req);

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (412, "precondition_failed")
    );
    assert!(r
        .backend()
        .calls
        .iter()
        .all(|c| !c.starts_with("configure")));
}

#[test]
fn patch_renames_and_the_old_name_is_gone() {
    let mut r = router();

    let resp = r.handle(&patch("/api/v1/partitions/beta", r#"{"name":"delta"}"#));

    assert_eq!(resp.status, 200, "{}", text(&resp));
    assert_eq!(body_json(&resp)["name"], "delta");
    assert_eq!(r.handle(&get("/api/v1/partitions/beta")).status, 404);
}

#[test]
fn patch_of_a_running_or_management_partition_is_409_and_of_none_404() {
    let mut r = router();

    let running = r.handle(&patch("/api/v1/partitions/alpha", r#"{"bootargs":"x"}"#));
    let mgmt = r.handle(&patch("/api/v1/partitions/mgmt", r#"{"bootargs":"x"}"#));
    let none = r.handle(&patch("/api/v1/partitions/zeta", r#"{"bootargs":"x"}"#));

    assert_eq!(running.status, 409);
    assert_eq!(
        detail(&running),
        "cannot change alpha: it is running (stop it first)"
    );
    assert_eq!(mgmt.status, 409);
    assert_eq!(none.status, 404);
}

#[test]
fn patch_of_a_crashed_partition_is_allowed() {
    let mut r = router();
    r.backend_mut()
        .set_state(BETA, PartitionState::Crashed)
        .expect("beta");

    let resp = r.handle(&patch("/api/v1/partitions/beta", r#"{"bootargs":"x"}"#));

    assert_eq!(resp.status, 200, "{}", text(&resp));
}

#[test]
fn patch_onto_another_partitions_cpu_is_409_naming_cpus_and_keeps_the_old_config() {
    let (mut r, k, _) = with_images();
    let gamma = r.handle(&post(
        "/api/v1/partitions",
        &create_body("gamma", "[1]", &k),
    ));
    assert_eq!(gamma.status, 201);

    let resp = r.handle(&patch("/api/v1/partitions/beta", r#"{"cpus":[1]}"#));

    assert_eq!((resp.status, field(&resp).as_str()), (409, "cpus"));
    assert_eq!(r.backend().plan_of(BETA).expect("plan").cpus, vec![2]);
}

#[test]
fn delete_of_a_stopped_partition_is_204_and_frees_its_cpu() {
    let (mut r, k, _) = with_images();

    let resp = r.handle(&delete("/api/v1/partitions/beta"));
    let again = r.handle(&post(
        "/api/v1/partitions",
        &create_body("gamma", "[2]", &k),
    ));

    assert_eq!(resp.status, 204);
    assert!(resp.body.is_empty());
    assert_eq!(r.handle(&get("/api/v1/partitions/beta")).status, 404);
    assert_eq!(again.status, 201, "CPU 2 is free again: {}", text(&again));
}

#[test]
fn delete_of_a_running_or_management_partition_is_409_with_stale_etag_412() {
    let mut r = router();
    let mut stale = delete("/api/v1/partitions/beta");
    stale.headers.push(("If-Match".into(), "\"abc\"".into()));

    assert_eq!(r.handle(&delete("/api/v1/partitions/alpha")).status, 409);
    assert_eq!(r.handle(&delete("/api/v1/partitions/mgmt")).status, 409);
    assert_eq!(r.handle(&stale).status, 412);
    assert!(r.backend().calls.iter().all(|c| !c.starts_with("destroy")));
}

#[test]
fn delete_without_a_token_is_401() {
    let mut r = router();
    let req = Request {
        method: "DELETE".into(),
        path: "/api/v1/partitions/beta".into(),
        ..Request::default()
    };

    assert_eq!(r.handle(&req).status, 401);
}

// ---------------------------------------------------------------------------
// Resources
// ---------------------------------------------------------------------------

#[test]
fn resources_name_the_owners() {
    let mut r = router();

    let resp = r.handle(&get("/api/v1/resources"));

    assert_eq!(resp.status, 200);
    let body = body_json(&resp);
    assert_eq!(body["cpus"][2], json!({"cpu":2,"partition":"beta"}));
    assert_eq!(body["cpus"][0], json!({"cpu":0,"partition":null}));
    assert_eq!(
        body["memory"]["ranges"][0],
        json!({"base":0x4000_0000u64,"size":64u64<<20,"owner":"hypervisor","partition":null})
    );
    assert_eq!(body["memory"]["ranges"][1]["owner"], "partition");
    assert_eq!(body["memory"]["ranges"][1]["partition"], "mgmt");
    assert_eq!(body["memory"]["free_bytes"], 1u64 << 30);
    assert_eq!(body["memory"]["largest_free_bytes"], 1u64 << 30);
    assert_eq!(
        body["devices"][0],
        json!({"name":"/pl011@9040000","base":0x904_0000,"size":4096,"owner":"partition","partition":"alpha"})
    );
    assert_eq!(body["devices"][1]["owner"], "hypervisor");
    assert_eq!(body["devices"][1]["partition"], Value::Null);
    assert_eq!(body["devices"][2]["owner"], "free");
    let ranges = body["memory"]["ranges"].as_array().unwrap();
    let scrubbing = ranges.last().unwrap();
    assert_eq!(
        *scrubbing,
        json!({"base":0x1_0000_0000u64,"size":8u64<<20,"owner":"scrubbing","partition":null,"left_bytes":2u64<<20})
    );
    assert!(
        ranges
            .iter()
            .all(|r| r["owner"] == "scrubbing" || r.get("left_bytes").is_none()),
        "left_bytes only on scrubbing ranges"
    );
}

// ---------------------------------------------------------------------------
// Images
// ---------------------------------------------------------------------------

#[test]
fn upload_is_201_ready_with_its_sha256_and_is_listed() {
    use sha2::Digest;
    let mut r = router();
    let data = kernel(200_000);
    let sha = json::hex(&sha2::Sha256::digest(&data));

    let resp = r.handle(&upload_req(
        &format!("kind=kernel&name=vmlinuz%2D6.1&sha256={sha}"),
        &data,
    ));

    assert_eq!(resp.status, 201, "{}", text(&resp));
    assert_eq!(
        body_json(&resp),
        json!({"id":"1","name":"vmlinuz-6.1","kind":"kernel","size":200000,"received":200000,
               "state":"ready","error":null,"sha256":sha,"used_by":[],"boot":false})
    );
    assert_eq!(resp.header("Location"), Some("/api/v1/images/1"));
    assert_eq!(uploads(r.backend())[0], data);
    let list = r.handle(&get("/api/v1/images"));
    assert_eq!(body_json(&list)["images"][0]["name"], "boot-0");
    assert_eq!(
        body_json(&list)["images"][0]["used_by"],
        json!(["mgmt", "alpha", "beta"])
    );
    assert_eq!(body_json(&list)["images"][1]["name"], "vmlinuz-6.1");
}

#[test]
fn upload_writes_at_most_one_chunk_per_call_and_continues_after_a_short_write() {
    let mut r = router();
    r.backend_mut().write_limit = 1000;
    let data = kernel(300_000);

    let resp = r.handle(&upload_req("kind=kernel", &data));

    assert_eq!(resp.status, 201, "{}", text(&resp));
    assert_eq!(uploads(r.backend())[0], data);
    assert!(r.backend().largest_write <= UPLOAD_CHUNK);
    assert_eq!(r.backend().largest_write, UPLOAD_CHUNK);
}

#[test]
fn upload_without_content_length_is_411_and_creates_nothing() {
    let mut r = router();
    let req = with_auth("POST", "/api/v1/images?kind=kernel", &kernel(100));

    let resp = r.handle(&req);

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (411, "length_required")
    );
    assert!(uploads(r.backend()).is_empty());
}

#[test]
fn upload_over_the_limit_is_413_before_any_write() {
    let mut r = router();
    let mut req = upload_req("kind=initrd", b"");
    req.headers[1].1 = (MAX_IMAGE_BYTES + 1).to_string();

    let resp = r.handle(&req);

    assert_eq!(
        (resp.status, error_code(&resp).as_str()),
        (413, "too_large")
    );
    assert!(r
        .backend()
        .calls
        .iter()
        .all(|c| !c.starts_with("image_create")));
}

#[test]
fn upload_cut_short_is_400_naming_body_and_leaves_no_image() {
    let mut r = router();
    let mut req = upload_req("kind=initrd", &[7; 5000]);
    req.headers[1].1 = "9000".into();

    let resp = r.handle(&req);

    assert_eq!((resp.status, field(&resp).as_str()), (400, "body"));
    assert_eq!(
        detail(&resp),
        "body: the body ended after 5000 of 9000 bytes"
    );
    assert!(uploads(r.backend()).is_empty());
    let failed = r.handle(&get("/api/v1/images/1"));
    assert_eq!(body_json(&failed)["state"], "failed");
    assert_eq!(body_json(&failed)["received"], 5000);
}

#[test]
fn upload_with_a_wrong_sha256_is_400_naming_sha256_and_leaves_no_image() {
    let mut r = router();
    let wrong = "ab".repeat(32);

    let resp = r.handle(&upload_req(
        &format!("kind=initrd&sha256={wrong}"),
        &[1; 100],
    ));

    assert_eq!((resp.status, field(&resp).as_str()), (400, "sha256"));
    assert!(
        detail(&resp).ends_with(&format!("not {wrong}")),
        "{}",
        detail(&resp)
    );
    assert!(uploads(r.backend()).is_empty());
}

#[test]
fn create_with_a_kernel_that_is_not_an_arm64_image_is_400_naming_kernel_and_leaves_nothing() {
    let mut r = router();
    // Any bytes upload as a kernel (a raw one has no header to check).
    let raw = upload(&mut r, "kernel", &[0; 4096]);

    let linux = r.handle(&post(
        "/api/v1/partitions",
        &create_body("gamma", "[1]", &raw),
    ));
    let as_raw = r.handle(&post(
        "/api/v1/partitions",
        &format!(
            r#"{{"name":"delta","cpus":[1],"memory_mib":64,"kernel":"{raw}","kernel_format":"raw"}}"#
        ),
    ));

    assert_eq!((linux.status, field(&linux).as_str()), (400, "kernel"));
    assert_eq!(
        detail(&linux),
        format!(
            r#"partition "gamma": kernel: image {raw} lacks the arm64 Image magic "ARM\x64" at byte 56 (kernel_format = "linux")"#
        )
    );
    assert_eq!(as_raw.status, 201, "{}", text(&as_raw));
    assert_eq!(r.backend().plans.len(), 1, "only delta");
}

#[test]
fn upload_query_errors_name_the_parameter() {
    let mut r = router();
    let cases = [
        ("name=x", "kind"),
        ("kind=bios", "kind"),
        ("kind=kernel&sha256=12", "sha256"),
        ("kind=kernel&colour=red", "colour"),
    ];

    for (query, want) in cases {
        let resp = r.handle(&upload_req(query, &[1; 10]));
        assert_eq!((resp.status, field(&resp).as_str()), (400, want), "{query}");
    }
    assert!(uploads(r.backend()).is_empty());
}

#[test]
fn image_used_by_a_partition_cannot_be_deleted_an_unused_one_can() {
    let (mut r, k, i) = with_images();
    let resp = r.handle(&post(
        "/api/v1/partitions",
        &create_body("gamma", "[1]", &k),
    ));
    assert_eq!(resp.status, 201);

    let used = r.handle(&delete(&format!("/api/v1/images/{k}")));
    let unused = r.handle(&delete(&format!("/api/v1/images/{i}")));

    assert_eq!(used.status, 409);
    assert_eq!(detail(&used), format!("image {k} is used by gamma"));
    assert_eq!(unused.status, 204);
    assert_eq!(r.handle(&get(&format!("/api/v1/images/{i}"))).status, 404);
    assert_eq!(
        body_json(&r.handle(&get(&format!("/api/v1/images/{k}"))))["used_by"],
        json!(["gamma"])
    );
}

#[test]
fn image_id_that_is_not_a_number_is_400_and_unknown_404() {
    let mut r = router();

    assert_eq!(r.handle(&get("/api/v1/images/abc")).status, 400);
    assert_eq!(r.handle(&get("/api/v1/images/9")).status, 404);
}

/// A body that, before each read, checks that the router is not locked and
/// reads the image's progress through the API, as another connection would.
struct Watching {
    data: Vec<u8>,
    at: usize,
    router: Arc<Mutex<Router<FakeBackend>>>,
    seen: Vec<u64>,
}

impl Read for Watching {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.at > 0 {
            let mut r = self
                .router
                .try_lock()
                .expect("the router is not locked while the body is read");
            let resp = r.handle(&get("/api/v1/images/1"));
            assert_eq!(body_json(&resp)["state"], "uploading");
            self.seen
                .push(body_json(&resp)["received"].as_u64().expect("received"));
        }
        let n = out.len().min(self.data.len() - self.at).min(10_000);
        out[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

fn shared() -> Arc<Mutex<Router<FakeBackend>>> {
    Arc::new(Mutex::new(router()))
}

#[test]
fn streamed_upload_shows_its_progress_to_other_requests_and_holds_one_chunk() {
    let router = shared();
    let data = kernel(3 * UPLOAD_CHUNK + 123);
    let mut head = upload_req("kind=kernel&name=big", b"");
    head.headers[1].1 = data.len().to_string();
    let mut body = Watching {
        data: data.clone(),
        at: 0,
        router: router.clone(),
        seen: Vec::new(),
    };

    let resp = serve(&router, head, &mut body);

    assert_eq!(resp.status, 201, "{}", text(&resp));
    let r = router.lock().expect("lock");
    assert_eq!(uploads(r.backend())[0], data);
    assert_eq!(r.backend().largest_write, UPLOAD_CHUNK);
    assert!(
        body.seen.contains(&(UPLOAD_CHUNK as u64)),
        "{:?}",
        body.seen
    );
    assert!(
        body.seen.contains(&(3 * UPLOAD_CHUNK as u64)),
        "{:?}",
        body.seen
    );
}

#[test]
fn serve_refuses_an_upload_without_a_token_before_reading_the_body() {
    let router = shared();
    let head = Request {
        method: "POST".into(),
        path: "/api/v1/images?kind=kernel".into(),
        headers: vec![("Content-Length".into(), "10".into())],
        body: Vec::new(),
        peer: None,
    };
    let mut body: &[u8] = b"0123456789";

    let resp = serve(&router, head, &mut body);

    assert_eq!(resp.status, 401);
    assert_eq!(body.len(), 10, "body untouched");
}

#[test]
fn serve_hands_other_requests_to_the_router_with_their_body() {
    let router = shared();
    let head = Request {
        body: Vec::new(),
        ..patch("/api/v1/partitions/beta", "")
    };
    let mut body: &[u8] = br#"{"bootargs":"via serve"}"#;

    let resp = serve(&router, head, &mut body);

    assert_eq!(resp.status, 200, "{}", text(&resp));
    assert_eq!(body_json(&resp)["config"]["bootargs"], "via serve");
}

// ---------------------------------------------------------------------------
// Fetch
// ---------------------------------------------------------------------------

/// Serves one HTTP response on localhost: (status line, Content-Length,
/// body bytes actually sent).
fn file_server(status: &'static str, length: Option<usize>, body: Vec<u8>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!(
        "http://{}/images/vmlinuz",
        listener.local_addr().expect("addr")
    );
    std::thread::spawn(move || {
        use std::io::{BufRead, BufReader, Write};
        let (stream, _) = listener.accept().expect("accept");
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
            line.clear();
        }
        let mut stream = reader.into_inner();
        let mut head = format!("HTTP/1.1 {status}\r\n");
        if let Some(n) = length {
            head.push_str(&format!("Content-Length: {n}\r\n"));
        }
        head.push_str("\r\n");
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(&body);
    });
    url
}

fn fetch(router: &Arc<Mutex<Router<FakeBackend>>>, body: &str) -> Response {
    let head = with_auth("POST", "/api/v1/images/fetch", b"");
    let mut reader = body.as_bytes();
    serve(router, head, &mut reader)
}

/// Polls the image until it is no longer uploading.
fn settle(router: &Arc<Mutex<Router<FakeBackend>>>, id: &str) -> Value {
    for _ in 0..200 {
        let resp = router
            .lock()
            .expect("lock")
            .handle(&get(&format!("/api/v1/images/{id}")));
        let body = body_json(&resp);
        if body["state"] != "uploading" {
            return body;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("image {id} still uploading");
}

#[test]
fn fetch_is_202_uploading_and_becomes_ready() {
    let router = shared();
    let data = kernel(150_000);
    let url = file_server("200 OK", Some(data.len()), data.clone());

    let resp = fetch(
        &router,
        &format!(r#"{{"url":"{url}","kind":"kernel","name":"net"}}"#),
    );

    assert_eq!(resp.status, 202, "{}", text(&resp));
    assert_eq!(body_json(&resp)["state"], "uploading");
    assert_eq!(body_json(&resp)["size"], 150_000);
    let done = settle(&router, "1");
    assert_eq!(done["state"], "ready", "{done}");
    assert_eq!(done["name"], "net");
    assert_eq!(uploads(router.lock().expect("lock").backend())[0], data);
}

#[test]
fn fetch_cut_short_fails_naming_url_and_leaves_no_image() {
    let router = shared();
    let url = file_server("200 OK", Some(10_000), vec![1; 4000]);

    let resp = fetch(&router, &format!(r#"{{"url":"{url}","kind":"initrd"}}"#));

    assert_eq!(resp.status, 202, "{}", text(&resp));
    let done = settle(&router, "1");
    assert_eq!(done["state"], "failed");
    assert_eq!(
        done["error"],
        "url: the download ended after 4000 of 10000 bytes"
    );
    assert!(uploads(router.lock().expect("lock").backend()).is_empty());
}

#[test]
fn fetch_with_a_wrong_sha256_fails_naming_sha256() {
    let router = shared();
    let url = file_server("200 OK", Some(100), vec![1; 100]);
    let wrong = "cd".repeat(32);

    let resp = fetch(
        &router,
        &format!(r#"{{"url":"{url}","kind":"initrd","sha256":"{wrong}"}}"#),
    );

    assert_eq!(resp.status, 202);
    let done = settle(&router, "1");
    assert_eq!(done["state"], "failed");
    assert!(uploads(router.lock().expect("lock").backend()).is_empty());
}

#[test]
fn fetch_of_a_missing_file_or_bad_url_is_400_naming_url_at_once() {
    let router = shared();
    let missing = file_server("404 Not Found", Some(0), Vec::new());
    let chunked = file_server("200 OK", None, b"5\r\nhello\r\n0\r\n\r\n".to_vec());

    for url in [
        missing.as_str(),
        chunked.as_str(),
        "https://example.org/x",
        "http://127.0.0.1:1/x",
    ] {
        let resp = fetch(&router, &format!(r#"{{"url":"{url}","kind":"kernel"}}"#));
        assert_eq!(
            (resp.status, field(&resp).as_str()),
            (400, "url"),
            "{url}: {}",
            text(&resp)
        );
    }
    let bad_kind = fetch(&router, r#"{"url":"http://h/x","kind":"rom"}"#);
    let unknown = fetch(&router, r#"{"url":"http://h/x","kind":"kernel","md5":"x"}"#);
    assert_eq!((bad_kind.status, field(&bad_kind).as_str()), (400, "kind"));
    assert_eq!((unknown.status, field(&unknown).as_str()), (400, "md5"));
    assert!(uploads(router.lock().expect("lock").backend()).is_empty());
}

#[test]
fn fetch_without_a_token_is_401() {
    let router = shared();
    let head = Request {
        method: "POST".into(),
        path: "/api/v1/images/fetch".into(),
        ..Request::default()
    };

    let resp = serve(
        &router,
        head,
        &mut &br#"{"url":"http://h/x","kind":"kernel"}"#[..],
    );

    assert_eq!(resp.status, 401);
}
