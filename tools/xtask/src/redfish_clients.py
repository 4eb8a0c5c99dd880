"""The `redfish` boot case's client side: OpenStack's sushy against Pinfold's
Redfish service, compared with the REST API after every step, then the bad
inputs (each a Redfish error, nothing changed).

Run by tools/xtask/src/redfish_checks.rs inside target/redfish-venv as
`python redfish_clients.py BASE_URL USER TOKEN`; prints one `ok ...` line
per check and exits non-zero with a `FAIL ...` line at the first failure.
The last line is `summary {json}`.
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


main()
