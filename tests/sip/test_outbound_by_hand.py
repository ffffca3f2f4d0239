"""Trying a number by hand (issue 52): ``manage.py call`` as a client of the running server's API, and the admin's
"Call a number" for staff with ``realtime.place_outbound_call``; staff without it, and strangers, refused. A real
server (loopback profile, a pool of 2, authentication on) and raw SIP callees (tests/sip/test_outbound.py's)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import requests
from django.contrib.admin.utils import unquote

from realtime.admin.calling import phone_call
from realtime.models import RealtimeSession
from tests.sip.conftest import sip_server, sip_sessions, wait_free
from tests.sip.test_outbound import UNKNOWN_CALL, record
from tests.support.polling import wait_for
from tests.support.server import LiveServer

PASSWORD = "outbound-by-hand-pw"  # noqa: S105 (a test server's staff users)
CALL_PAGE = "/admin/realtime/realtimesession/call/"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    live = sip_server(
        tmp_path_factory.mktemp("sip-outbound-by-hand"),
        S2S_AUTH_REQUIRED="1",
        S2S_SIP_OUTBOUND_ALLOW="sip:*@127.0.0.1:*",
        S2S_SIP_RING_TIMEOUT_S="3",
        S2S_SIP_OUTBOUND_PER_MINUTE="100",
    )
    live.api_key = live.manage("create_api_key", "alice").stdout.strip()  # type: ignore[attr-defined]
    live.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import Permission, User\n"
        f"nobody = User.objects.create_user('nobody', password='{PASSWORD}', is_staff=True)\n"
        "nobody.user_permissions.set(Permission.objects.filter(codename__in="
        "['end_live_session', 'view_realtimesession']))\n"
        f"caller = User.objects.create_user('caller', password='{PASSWORD}', is_staff=True)\n"
        "caller.user_permissions.set(Permission.objects.filter(codename__in="
        "['end_live_session', 'view_realtimesession', 'place_outbound_call']))\n",
    )
    yield live
    live.stop()


def call_command(server: LiveServer, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``manage.py call ...`` as an operator runs it (its own process, the server's URL), bounded."""
    return subprocess.run(
        [sys.executable, "manage.py", "call", *args, "--server", server.http],
        cwd=server.root,
        env={**server.env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def signed_in(server: LiveServer, username: str) -> requests.Session:
    http = requests.Session()
    http.get(f"{server.http}/admin/login/", timeout=10).raise_for_status()
    http.post(
        f"{server.http}/admin/login/?next=/admin/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": http.cookies["csrftoken"]},
        timeout=10,
    )
    assert "sessionid" in http.cookies
    return http


def place_from_the_admin(http: requests.Session, server: LiveServer, **fields: str) -> requests.Response:
    return http.post(
        f"{server.http}{CALL_PAGE}",
        data={"csrfmiddlewaretoken": http.cookies["csrftoken"], **fields},
        headers={"Referer": f"{server.http}{CALL_PAGE}"},
        timeout=30,
    )


# --- manage.py call -------------------------------------------------------------------------------------


def test_manage_call_places_the_call_through_the_api_and_prints_each_status_until_it_ends(server, responders):
    busy = responders("busy")
    done = call_command(server, busy.uri, "--instructions", "Say hello.", "--api-key", server.api_key, "--no-greeting")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("call rtc_")
    assert " dialing" in lines[1] and lines[-1].endswith("busy sip 486 (sip_486)"), lines
    assert busy.requests[0].method == "INVITE"
    row = sip_sessions(server)[0]
    assert (row["principal"], row["direction"]) == ("api_key:alice", "outbound")
    assert row["user_agent"] == "s2s-realtime manage.py call"


def test_manage_call_hangs_up_at_max_seconds_with_the_key_from_the_environment(server, responders):
    ringing = responders("ring")
    done = call_command(server, ringing.uri, "--max-seconds", "1", env={"S2S_API_KEY": server.api_key})
    assert done.returncode == 0, done.stderr
    assert "hanging up" in done.stdout and done.stdout.rstrip().endswith("ended (cancelled)"), done.stdout
    wait_for(lambda: "CANCEL" in ringing.methods(), 5, what="the CANCEL")
    assert wait_free(server, 2) == 2


def test_manage_call_refused_says_why_and_dials_nobody(server, responders):
    outside, inside = responders("busy", host="127.0.0.2"), responders("busy")
    refused = call_command(server, outside.uri, "--api-key", server.api_key)
    assert refused.returncode != 0 and "403 outbound_not_allowed (sip.to)" in refused.stderr
    injected = call_command(server, inside.uri, "--header", "Via=SIP/2.0/UDP 1.2.3.4", "--api-key", server.api_key)
    assert injected.returncode != 0 and "(sip.headers)" in injected.stderr
    stranger = call_command(server, inside.uri, "--api-key", "sk-not-a-key")
    assert stranger.returncode != 0 and "401" in stranger.stderr
    keyless = call_command(server, inside.uri, env={"S2S_API_KEY": ""})
    assert keyless.returncode != 0 and "API key" in keyless.stderr
    time.sleep(0.5)
    assert outside.raw == [] and inside.raw == []


# --- the admin's "Call a number" ------------------------------------------------------------------------


def test_staff_with_the_permission_call_from_the_admin_and_land_on_the_live_session(server, responders):
    ringing = responders("ring")
    http = signed_in(server, "caller")
    listing = http.get(f"{server.http}/admin/realtime/realtimesession/", timeout=10)
    assert CALL_PAGE in listing.text  # the "Call a number" link
    assert http.get(f"{server.http}{CALL_PAGE}", timeout=10).status_code == 200
    landed = place_from_the_admin(http, server, to=ringing.uri, instructions="Confirm the appointment.")
    assert landed.status_code == 200 and "/change/" in landed.url, landed.text[:500]
    call_id = re.search(r"call (rtc_\w+)", landed.text)[1]
    session_id = unquote(landed.url.rstrip("/").split("/")[-2])  # as the admin quotes it (_ is _5F)
    wait_for(lambda: "INVITE" in ringing.methods(), 5, what="the INVITE")
    # The call is staff's: to an API key it does not exist, exactly as an unknown id.
    mine, unknown = record(server, call_id, server.api_key), record(server, UNKNOWN_CALL, server.api_key)
    assert mine[0] == unknown[0] == 404
    assert json.dumps(mine[1]["error"]).replace(call_id, "ID") == json.dumps(unknown[1]["error"]).replace(
        UNKNOWN_CALL, "ID"
    )
    assert wait_free(server, 2, timeout=15) == 2  # the ring timeout (3 s): no_answer, the unit back
    row = next(row for row in sip_sessions(server) if row["id"] == session_id)
    assert (row["principal"], row["direction"]) == ("staff:caller", "outbound")
    wait_for(lambda: next(r for r in sip_sessions(server) if r["id"] == session_id)["call_status"] == "no_answer", 10)


def test_staff_without_the_permission_and_strangers_cannot_call_and_nothing_is_dialled(server, responders):
    callee = responders("busy")
    nobody = signed_in(server, "nobody")
    listing = nobody.get(f"{server.http}/admin/realtime/realtimesession/", timeout=10)
    assert listing.status_code == 200 and CALL_PAGE not in listing.text
    assert nobody.get(f"{server.http}{CALL_PAGE}", timeout=10).status_code == 403
    assert place_from_the_admin(nobody, server, to=callee.uri).status_code == 403
    stranger = requests.Session()
    answer = stranger.post(f"{server.http}{CALL_PAGE}", data={"to": callee.uri}, timeout=10, allow_redirects=False)
    assert answer.status_code in (302, 403)  # to the login page, or CSRF: never a call
    time.sleep(0.5)
    assert callee.raw == []


def test_the_admin_refuses_what_the_api_refuses(server, responders):
    outside = responders("busy", host="127.0.0.2")
    http = signed_in(server, "caller")
    refused = place_from_the_admin(http, server, to=outside.uri)
    assert refused.status_code == 200 and "outbound_not_allowed" in refused.text
    injected = place_from_the_admin(http, server, to=outside.uri.replace("127.0.0.2", "127.0.0.1") + "\r\nX-Evil: 1")
    assert injected.status_code == 200 and "invalid_request" in injected.text
    time.sleep(0.5)
    assert outside.raw == []


def test_the_session_list_shows_a_calls_direction_and_number_as_kept():
    outbound = RealtimeSession(direction="outbound", callee="********4567", call_status="busy", sip_code=486)
    assert phone_call(outbound) == "outbound to ********4567: busy (486)"
    assert phone_call(RealtimeSession(direction="inbound", caller="****1234")) == "inbound from ****1234"
    assert phone_call(RealtimeSession(direction="outbound")) == "outbound to (number not kept)"
    assert phone_call(RealtimeSession()) == "–"
