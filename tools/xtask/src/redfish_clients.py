"""The `redfish` boot case's client side: OpenStack's sushy against Pinfold's
Redfish service, compared with the REST API after every step, then the bad
inputs (each a Redfish error, nothing changed).

Run by tools/xtask/src/redfish_checks.rs inside target/redfish-venv as
`python redfish_clients.py BASE_URL USER TOKEN`; prints one `ok ...` line
per check and exits non-zero with a `FAIL ...` line at the first failure.
The last line is `summary {json}`.

`python redfish_clients.py BASE_URL USER TOKEN httpboot URL` instead boots
beta over HTTP the way Ironic's redfish-https boot does: sushy sets the
Boot override (UefiHttp, Once, HttpBootUri URL) and force-restarts beta;
the partition must come back on with its boot count one higher, the
system's Oem.Pinfold.HttpBoot must say Booted, and the Once override must
be used up. The last line is `summary {json}` with the booted images.
"""

import json
import sys
import time

import requests
import sushy
import urllib3

urllib3.disable_warnings()

BASE, USER, TOKEN = sys.argv[1], sys.argv[2], sys.argv[3]
REST = {"Authorization": "Bearer " + TOKEN}
WAIT = 120


def fail(why):
    print("FAIL " + why, flush=True)
    sys.exit(1)


def rest(name):
    r = requests.get(BASE + "/api/v1/partitions/" + name, headers=REST, verify=False, timeout=30)
    if r.status_code != 200:
        fail("REST GET %s answered %d" % (name, r.status_code))
    s = r.json()
    return s["state"], s["boot_count"]


# The REST state -> the Redfish PowerState (docs/REDFISH.md).
POWER = {"running": "On", "starting": "PoweringOn", "stopping": "PoweringOff",
         "shutting_down": "PoweringOff", "stopped": "Off", "crashed": "Off"}


def wait_power(system, want, what):
    deadline = time.time() + WAIT
    while True:
        system.refresh()
        if system.power_state == want:
            state, boots = rest(system.identity)
            if POWER[state] != want.value:
                fail("%s: sushy says %s, REST says %s" % (what, want, state))
            return state, boots
        if time.time() > deadline:
            fail("%s: still %s after %d s (want %s)" % (what, system.power_state, WAIT, want.value))
        time.sleep(0.5)


def main():
    root = sushy.Sushy(BASE + "/redfish/v1", username=USER, password=TOKEN, verify=False)
    systems = root.get_system_collection()
    names = sorted(m.split("/")[-1] for m in systems.members_identities)
    print("ok sushy lists %d systems: %s" % (len(names), ", ".join(names)), flush=True)
    for name in names:
        s = systems.get_member("/redfish/v1/Systems/" + name)
        state, _ = rest(name)
        if s.power_state is None or s.power_state.value != POWER[state]:
            fail("%s: sushy power state %s, REST state %s" % (name, s.power_state, state))
        print("ok %s: power %s = REST %s" % (name, s.power_state.value, state), flush=True)
    beta = root.get_system("/redfish/v1/Systems/beta")
    allowed = sorted(v.value for v in beta.get_allowed_reset_system_values())
    print("ok beta allows %s" % ", ".join(allowed), flush=True)
    _, boots0 = rest("beta")

    beta.reset_system(sushy.RESET_FORCE_OFF)
    state, boots = wait_power(beta, sushy.POWER_STATE_OFF, "ForceOff")
    print("ok ForceOff: sushy off, REST %s, boot_count %d" % (state, boots), flush=True)
    beta.reset_system(sushy.RESET_ON)
    state, boots1 = wait_power(beta, sushy.POWER_STATE_ON, "On")
    if boots1 != boots0 + 1:
        fail("On: boot_count %d, want %d" % (boots1, boots0 + 1))
    print("ok On: sushy on, REST %s, boot_count %d -> %d" % (state, boots0, boots1), flush=True)
    beta.reset_system(sushy.RESET_FORCE_RESTART)
    deadline = time.time() + WAIT
    while True:
        state, boots2 = rest("beta")
        if boots2 == boots1 + 1 and state == "running":
            break
        if time.time() > deadline:
            fail("ForceRestart: REST %s boot_count %d, want running %d" % (state, boots2, boots1 + 1))
        time.sleep(0.5)
    wait_power(beta, sushy.POWER_STATE_ON, "ForceRestart")
    print("ok ForceRestart: sushy on, REST %s, boot_count %d -> %d" % (state, boots1, boots2), flush=True)

    bad_inputs()
    print("summary " + json.dumps({"systems": names, "beta_boots": [boots0, boots1, boots2]}), flush=True)


def expect_error(resp, status, message_id, what):
    if resp.status_code != status:
        fail("%s: answered %d, want %d: %s" % (what, resp.status_code, status, resp.text[:300]))
    try:
        err = resp.json()["error"]
        got = err["@Message.ExtendedInfo"][0]["MessageId"]
    except (ValueError, KeyError, IndexError) as e:
        fail("%s: not a Redfish error body (%s): %s" % (what, e, resp.text[:300]))
    if got != message_id or err["code"] != message_id:
        fail("%s: MessageId %s, want %s" % (what, got, message_id))
    print("ok %s: %d %s" % (what, status, got), flush=True)


def bad_inputs():
    r = requests.post(BASE + "/redfish/v1/SessionService/Sessions", verify=False, timeout=30,
                      json={"UserName": USER, "Password": TOKEN})
    if r.status_code != 201 or "X-Auth-Token" not in r.headers:
        fail("session login answered %d" % r.status_code)
    session = {"X-Auth-Token": r.headers["X-Auth-Token"]}
    location = r.headers["Location"]
    before = {n: rest(n) for n in ("mgmt", "beta")}
    reset = BASE + "/redfish/v1/Systems/%s/Actions/ComputerSystem.Reset"
    expect_error(requests.post(reset % "beta", headers=session, verify=False, timeout=30,
                               json={"ResetType": "Nmi"}),
                 400, "Base.1.15.0.ActionParameterValueNotInList", "unknown ResetType Nmi")
    expect_error(requests.post(reset % "mgmt", headers=session, verify=False, timeout=30,
                               json={"ResetType": "ForceRestart"}),
                 400, "Base.1.15.0.ActionNotSupported", "ForceRestart of the management partition")
    expect_error(requests.post(reset % "beta", headers={"X-Auth-Token": "0" * 64}, verify=False,
                               timeout=30, json={"ResetType": "ForceOff"}),
                 401, "Base.1.15.0.NoValidSession", "ForceOff with a wrong session token")
    expect_error(requests.patch(BASE + "/redfish/v1/Systems/beta", headers=session, verify=False,
                                timeout=30, json={"PowerState": "Off"}),
                 400, "Base.1.15.0.PropertyNotWritable", "PATCH of PowerState")
    expect_error(requests.patch(BASE + "/redfish/v1/Systems/beta", headers=session, verify=False,
                                timeout=30, json={"Boot": {"BootSourceOverrideTarget": "Pxe"}}),
                 400, "Base.1.15.0.PropertyValueNotInList", "PATCH of an unoffered boot target")
    expect_error(requests.patch(BASE + "/redfish/v1/Systems/beta", headers=session, verify=False,
                                timeout=30, json={"Boot": {"BootSourceOverrideTarget": "UefiHttp",
                                                           "HttpBootUri": "https://h/Image"}}),
                 400, "Base.1.15.0.PropertyValueFormatError", "PATCH of an https HttpBootUri")
    time.sleep(1)
    after = {n: rest(n) for n in ("mgmt", "beta")}
    if after != before:
        fail("bad input changed something: %s -> %s" % (before, after))
    print("ok nothing changed: %s" % after, flush=True)
    r = requests.delete(BASE + location, headers=session, verify=False, timeout=30)
    if r.status_code != 204:
        fail("logout answered %d" % r.status_code)
    r = requests.get(BASE + "/redfish/v1/Systems", headers=session, verify=False, timeout=30)
    expect_error(r, 401, "Base.1.15.0.NoValidSession", "the session after logout")


def http_boot(url):
    root = sushy.Sushy(BASE + "/redfish/v1", username=USER, password=TOKEN, verify=False)
    beta = root.get_system("/redfish/v1/Systems/beta")
    allowed = beta.get_allowed_system_boot_source_values()
    if sushy.BOOT_SOURCE_TARGET_UEFI_HTTP not in allowed:
        fail("beta does not offer UefiHttp: %s" % allowed)
    state0, boots0 = rest("beta")
    if state0 != "running":
        fail("beta is %s before the HTTP boot" % state0)
    beta.set_system_boot_options(target=sushy.BOOT_SOURCE_TARGET_UEFI_HTTP,
                                 enabled=sushy.BOOT_SOURCE_ENABLED_ONCE, http_boot_uri=url)
    beta.refresh()
    if beta.boot.target != sushy.BOOT_SOURCE_TARGET_UEFI_HTTP or beta.boot.http_boot_uri != url:
        fail("after set_system_boot_options: target %s, uri %s" % (beta.boot.target,
                                                                   beta.boot.http_boot_uri))
    print("ok sushy set beta's boot override: UefiHttp Once %s" % url, flush=True)
    started = time.time()
    beta.reset_system(sushy.RESET_FORCE_RESTART)
    seen = set()
    deadline = time.time() + WAIT
    while True:
        beta.refresh()
        seen.add(beta.power_state.value)
        state, boots = rest("beta")
        if state == "running" and boots == boots0 + 1 and beta.power_state == sushy.POWER_STATE_ON:
            break
        if time.time() > deadline:
            fail("HTTP boot: REST %s boot_count %d, sushy %s" % (state, boots, beta.power_state))
        time.sleep(0.25)
    print("ok ForceRestart booted over HTTP in %.1f s: power states seen %s, boot_count %d -> %d"
          % (time.time() - started, ", ".join(sorted(seen)), boots0, boots), flush=True)
    r = requests.get(BASE + "/redfish/v1/Systems/beta", headers=REST, verify=False, timeout=30)
    report = r.json()["Oem"]["Pinfold"]["HttpBoot"]
    if report.get("State") != "Booted" or report.get("Uri") != url:
        fail("Oem.Pinfold.HttpBoot: %s" % report)
    if beta.boot.target != sushy.BOOT_SOURCE_TARGET_NONE or \
            beta.boot.enabled != sushy.BOOT_SOURCE_ENABLED_DISABLED:
        fail("the Once override was not used up: %s %s" % (beta.boot.target, beta.boot.enabled))
    print("ok Oem.Pinfold.HttpBoot %s; the Once override is used up (None, Disabled)" % report,
          flush=True)
    print("summary " + json.dumps({"kernel": report["KernelImage"],
                                   "initrd": report.get("InitrdImage")}), flush=True)


if len(sys.argv) > 5 and sys.argv[4] == "httpboot":
    http_boot(sys.argv[5])
else:
    main()
