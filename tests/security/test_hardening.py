"""Exhaustion and hardening, each finding at the size it was reproduced with: the conversation's caps,
client secrets, refused handshakes, CSV export, key revocation, the Origin check, bad input, /readyz."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
from datetime import timedelta

import psutil
import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.utils import timezone

from realtime import tasks
from realtime.access import auth
from realtime.models import ApiKey, ClientSecret, EndReason, RealtimeSession, RefusalCount
from realtime.node import runtime
from tests.security.conftest import bearer, close_code, connect, next_event, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

MiB = 1024 * 1024


async def open_session(headers=(), subprotocols=None):
    comm, _ = await connect(headers, subprotocols)
    assert (await next_event(comm))["type"] == "session.created"
    return comm


def text_item(text: str, item_id: str | None = None) -> str:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    if item_id:
        item["id"] = item_id
    return json.dumps({"type": "conversation.item.create", "event_id": "evt_create", "item": item})


async def error_of(comm) -> dict:
    event = await next_event(comm, timeout=15)
    assert event["type"] == "error", event
    return event["error"]


async def still_usable(comm) -> None:
    await comm.send_to(text_data=json.dumps({"type": "conversation.item.retrieve", "item_id": "nope", "event_id": "p"}))
    assert (await error_of(comm))["code"] == "item_not_found"


# --- the conversation's caps --------------------------------------------------------------------------


async def test_100_items_of_5_mib_are_refused_one_by_one_and_memory_stays_flat(loopback_pool, settings):
    settings.S2S_MAX_EVENTS_PER_SECOND = 1000
    comm = await open_session()
    process = psutil.Process(os.getpid())
    frame = text_item("a" * (5 * MiB))
    await comm.send_to(text_data=frame)  # the first one: its buffers are the steady state
    assert (await error_of(comm))["code"] == "string_above_max_length"
    before = process.memory_info().rss
    for _ in range(99):
        await comm.send_to(text_data=frame)
        error = await error_of(comm)
        assert (error["code"], error["param"], error["event_id"]) == ("string_above_max_length", "item", "evt_create")
    grown_mib = (process.memory_info().rss - before) / MiB
    assert grown_mib < 64, f"RSS grew {grown_mib:.0f} MiB over 99 refused 5 MiB items (was +527 MiB before the cap)"
    await still_usable(comm)
    await comm.disconnect()


async def test_the_conversation_total_and_item_count_are_capped_and_deleting_items_makes_room(loopback_pool, settings):
    settings.S2S_MAX_CONVERSATION_BYTES = 64 * 1024
    settings.S2S_MAX_ITEMS = 16
    comm = await open_session()
    for index in range(6):  # 6 x 10 KiB fit in 64 KiB; the 7th does not
        await comm.send_to(text_data=text_item("b" * 10_240, f"big_{index}"))
        await wait_for(comm, "conversation.item.done")
    await comm.send_to(text_data=text_item("b" * 10_240, "big_6"))
    error = await error_of(comm)
    assert (error["code"], error["param"], error["event_id"]) == ("conversation_too_large", "item", "evt_create")
    await comm.send_to(text_data=json.dumps({"type": "conversation.item.delete", "item_id": "big_0"}))
    await wait_for(comm, "conversation.item.deleted")
    await comm.send_to(text_data=text_item("b" * 10_240, "big_6"))
    await wait_for(comm, "conversation.item.done")
    for index in range(10):  # short items up to the count of 16
        await comm.send_to(text_data=text_item("hi", f"short_{index}"))
        await wait_for(comm, "conversation.item.done")
    await comm.send_to(text_data=text_item("hi", "one_too_many"))
    assert (await error_of(comm))["code"] == "conversation_too_large"
    await still_usable(comm)
    await comm.disconnect()


@pytest.mark.parametrize("where", ["session", "response"])
async def test_16_mib_of_instructions_are_refused_not_echoed_and_the_session_goes_on(loopback_pool, where):
    comm = await open_session()
    huge = "i" * (16 * MiB)
    if where == "session":
        event = {"type": "session.update", "event_id": "evt_big", "session": {"type": "realtime", "instructions": huge}}
    else:
        event = {"type": "response.create", "event_id": "evt_big", "response": {"instructions": huge}}
    await comm.send_to(text_data=json.dumps(event))
    error = await error_of(comm)
    assert (error["code"], error["param"], error["event_id"]) == (
        "string_above_max_length",
        f"{where}.instructions",
        "evt_big",
    )
    assert await comm.receive_nothing(timeout=0.3)  # no session.updated echoing 16 MiB back
    await still_usable(comm)
    await comm.disconnect()


# --- bad input answered as client errors -----------------------------------------------------------


async def test_a_100000_deep_json_frame_is_answered_invalid_json_and_the_session_goes_on(loopback_pool):
    comm = await open_session()
    await comm.send_to(text_data='{"type": "session.update", "session": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert (await error_of(comm))["code"] == "invalid_json"
    await still_usable(comm)
    await comm.disconnect()


async def test_an_eagerness_that_is_a_list_is_invalid_value_over_the_socket(loopback_pool):
    comm = await open_session()
    await comm.send_to(
        text_data=json.dumps(
            {
                "type": "session.update",
                "event_id": "evt_e",
                "session": {
                    "type": "realtime",
                    "audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": ["high"]}}},
                },
            }
        )
    )
    error = await error_of(comm)
    assert (error["code"], error["param"], error["event_id"]) == (
        "invalid_value",
        "session.audio.input.turn_detection.eagerness",
        "evt_e",
    )
    await comm.disconnect()


def mint(client, key: str, body: object, **extra):
    return client.post(
        "/v1/realtime/client_secrets",
        data=json.dumps(body) if not isinstance(body, str) else body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
        **extra,
    )


def test_an_eagerness_that_is_a_list_and_deep_json_are_400_when_minting_a_client_secret(client, api_key):
    answer = mint(
        client,
        api_key,
        {
            "session": {
                "type": "realtime",
                "audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": ["high"]}}},
            }
        },
    )
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_value"
    answer = mint(client, api_key, "[" * 100_000 + "]" * 100_000)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_json"


# --- client secrets -------------------------------------------------------------------------------------


def test_a_client_secret_with_2_4_mb_of_session_settings_is_refused_and_stores_nothing(client, api_key):
    answer = mint(
        client,
        api_key,
        {"session": {"type": "realtime", "tools": [{"name": "t" * 100, "description": "d" * 2_400_000}]}},
    )
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "request_too_large"
    answer = mint(client, api_key, {"session": {"type": "realtime", "tools": [{"description": "d" * 300_000}]}})
    assert answer.status_code == 400 and answer.json()["error"] == {
        "message": answer.json()["error"]["message"],
        "type": "invalid_request_error",
        "param": "session",
        "code": "session_too_large",
    }
    assert not ClientSecret.objects.exists()
    assert mint(client, api_key, {"session": {"type": "realtime", "instructions": "Be brief."}}).status_code == 200


def test_expired_client_secrets_are_purged_by_the_retention_job(api_key):
    live, _ = auth.create_client_secret(None, {"instructions": "x" * 1000}, 600)
    expired, _ = auth.create_client_secret(None, {"instructions": "x" * 1000}, 600)
    ClientSecret.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    tasks.purge_old_sessions()
    assert list(ClientSecret.objects.values_list("pk", flat=True)) == [live.pk]


# --- refused handshakes and the CSV export -----------------------------------------------------------


async def test_300_refused_handshakes_are_counted_in_one_row_not_stored_one_row_each(loopback_pool, auth_on):
    rt = runtime.current()
    rt.refusals.flush()
    await sync_to_async(rt.writer.flush)()
    await RefusalCount.objects.all().adelete()
    agent = [(b"user-agent", b"x" * 500)]
    for _ in range(300):
        comm, _ = await connect(agent)
        assert (await error_of(comm))["code"] == "invalid_api_key"
        assert await close_code(comm) == 1008
        await comm.disconnect()
    rt.refusals.flush()
    await sync_to_async(rt.writer.flush)()
    assert not await RealtimeSession.objects.filter(end_reason=EndReason.REJECTED).aexists()
    counts = [row async for row in RefusalCount.objects.filter(reason="invalid_api_key")]
    assert sum(row.count for row in counts) == 300 and len(counts) <= 2  # one row a minute (a minute may turn)
    assert b's2s_connections_refused_total{reason="invalid_api_key"}' in rt.metrics.render()


def test_every_exported_csv_field_is_neutralised_against_formulas(admin_client):
    now = timezone.now()
    RealtimeSession.objects.create(
        id="sess_formula",
        node="=cmd|' /C calc'!A0",
        started_at=now,
        ended_at=now,
        end_reason=EndReason.CLIENT_CLOSED,
        principal="+SUM(1,1)",
        client_addr="-1+1",
        user_agent='=HYPERLINK("http://evil.example","click")',
        model="@SUM(A1)",
    )
    answer = admin_client.post(
        "/admin/realtime/realtimesession/", {"action": "export_csv", "_selected_action": ["sess_formula"]}
    )
    rows = list(csv.DictReader(io.StringIO(answer.content.decode())))
    assert rows[0]["user_agent"] == '\'=HYPERLINK("http://evil.example","click")'
    assert (rows[0]["node"][0], rows[0]["principal"][0], rows[0]["client_addr"][0], rows[0]["model"][0]) == ("'",) * 4
    for value in rows[0].values():
        assert not value.startswith(("=", "+", "-", "@", "\t", "\r"))


# --- revoking or deleting a key ends its live sessions ------------------------------------------------


async def ended_by_revocation(comm) -> None:
    error = await error_of(comm)
    assert error["code"] == "invalid_api_key" and "revoked" in error["message"]
    assert await close_code(comm) == 1008


async def test_revoking_a_key_in_the_admin_ends_its_sessions_and_those_of_its_client_secrets(
    loopback_pool, auth_on, admin_client
):
    key_row, key = await database_sync_to_async(auth.create_api_key)("revoked soon")
    _, secret = await database_sync_to_async(auth.create_client_secret)(key_row, {}, 600)
    by_key = await open_session(bearer(key))
    by_secret = await open_session(bearer(secret))
    answer = await sync_to_async(admin_client.post)(
        "/admin/realtime/apikey/", {"action": "revoke", "_selected_action": [str(key_row.pk)]}
    )
    assert answer.status_code == 302
    await ended_by_revocation(by_key)
    await ended_by_revocation(by_secret)
    for comm in (by_key, by_secret):
        await comm.disconnect()
    for _ in range(50):
        if loopback_pool.free_units() == 2:
            break
        await asyncio.sleep(0.1)
    assert loopback_pool.free_units() == 2


async def test_deleting_a_key_ends_its_live_session_and_no_other(loopback_pool, auth_on):
    key_row, key = await database_sync_to_async(auth.create_api_key)("deleted soon")
    _, other = await database_sync_to_async(auth.create_api_key)("stays")
    comm = await open_session(bearer(key))
    by_other = await open_session(bearer(other))
    await database_sync_to_async(ApiKey.objects.filter(pk=key_row.pk).delete)()
    await ended_by_revocation(comm)
    await still_usable(by_other)
    await comm.disconnect()
    await by_other.disconnect()


# --- the Origin check: scheme, host and port -----------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "host", "allowed_hosts"),
    [
        ("http://127.0.0.1:9999", "127.0.0.1:8000", None),  # another port of the same host
        ("https://127.0.0.1:8000", "127.0.0.1:8000", None),  # another scheme
        ("http://127.0.0.1", "127.0.0.1:8000", None),  # the default port is another port
        ("https://evil.example", "127.0.0.1:8000", ["*"]),  # ALLOWED_HOSTS=* lets no foreign origin in
        ("http://evil.example:8000", "evil.example:8000", None),  # a Host this server does not answer to
    ],
)
async def test_an_origin_that_differs_in_scheme_host_or_port_is_refused(
    loopback_pool, settings, origin, host, allowed_hosts
):
    if allowed_hosts is not None:
        settings.ALLOWED_HOSTS = allowed_hosts
    comm, _ = await connect([(b"origin", origin.encode()), (b"host", host.encode())])
    assert (await error_of(comm))["code"] == "invalid_origin"
    assert await close_code(comm) == 1008
    await comm.disconnect()


async def test_the_same_origin_and_a_trusted_one_connect(loopback_pool, settings):
    settings.ALLOWED_HOSTS = ["*"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://app.example", "https://*.customers.example"]
    for origin in ("http://voice.example:8000", "https://app.example", "https://a.customers.example"):
        comm = await open_session([(b"origin", origin.encode()), (b"host", b"voice.example:8000")])
        await comm.disconnect()


# --- /readyz ------------------------------------------------------------------------------------------


def test_readyz_after_a_failed_start_shows_details_only_to_callers_the_server_knows(
    client, admin_client, api_key, settings
):
    rt = runtime.current()
    rt.install(None)
    rt.start_error = "OSError: /opt/models/secret-path/model.gguf: not found"
    settings.S2S_METRICS_TOKEN = "metrics-token"
    try:
        anonymous = client.get("/readyz")
        assert anonymous.status_code == 503 and anonymous.json() == {"status": "failed"}
        for caller, headers in (
            (client, {"HTTP_AUTHORIZATION": f"Bearer {api_key}"}),
            (client, {"HTTP_AUTHORIZATION": "Bearer metrics-token"}),
            (admin_client, {}),
        ):
            answer = caller.get("/readyz", **headers)
            assert answer.status_code == 503 and "secret-path" in answer.json()["error"]
        assert client.get("/readyz", HTTP_AUTHORIZATION="Bearer sk-s2s-wrong").json() == {"status": "failed"}
    finally:
        rt.start_error = None


# --- SECRET_KEY and the Content-Security-Policy -------------------------------------------------------


def test_serve_refuses_a_public_address_with_the_development_key(settings):
    settings.SECRET_KEY = settings.DEVELOPMENT_SECRET_KEY
    for host in ("0.0.0.0", "::", "192.0.2.10", "voice.example"):
        with pytest.raises(CommandError, match="DJANGO_SECRET_KEY is not set"):
            call_command("serve", "--host", host, "--port", "1")


def test_check_deploy_reports_the_development_key_and_not_a_real_one(settings):
    settings.SECRET_KEY = settings.DEVELOPMENT_SECRET_KEY
    with pytest.raises(SystemCheckError, match="s2s.E001"):
        call_command("check", "--deploy", "--fail-level", "ERROR")
    settings.SECRET_KEY = "k" * 10 + "a-real-and-long-random-secret-key-of-many-characters-0123456789"
    out = io.StringIO()
    call_command("check", "--deploy", "--fail-level", "CRITICAL", stdout=out, stderr=out)
    assert "s2s.E001" not in out.getvalue()


@pytest.mark.parametrize("path", ["/", "/admin/login/"])
def test_the_page_and_the_admin_allow_only_their_own_scripts(client, path):
    policy = client.get(path)["Content-Security-Policy"]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["script-src"] == "'self'" and directives["object-src"] == "'none'"
    assert "unsafe-inline" not in directives["script-src"] and "unsafe-eval" not in policy


async def test_10000_items_then_a_response_and_a_client_gone_after_0_3_s_leave_a_clean_unit(loopback_pool, settings):
    """Reproduces the abandoned response: items past S2S_MAX_ITEMS are refused, the response's work stops
    with the session, and the unit comes back without being quarantined and rebuilt."""
    settings.S2S_MAX_EVENTS_PER_SECOND = 100_000
    settings.S2S_EVENTS_BURST = 100_000
    comm = await open_session()
    for index in range(10_000):
        await comm.send_to(
            text_data=json.dumps(
                {
                    "type": "conversation.item.create",
                    "item": {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": f"short item {index}"}],
                    },
                }
            )
        )
    refused = 0
    for _ in range(2 * 10_000):
        event = await next_event(comm, timeout=60)
        if event["type"] == "error":
            assert event["error"]["code"] == "conversation_too_large"
            refused += 1
        if refused == 10_000 - settings.S2S_MAX_ITEMS:
            break
    assert refused == 10_000 - settings.S2S_MAX_ITEMS
    await comm.send_to(text_data=json.dumps({"type": "response.create"}))
    await asyncio.sleep(0.3)
    await comm.disconnect()
    for _ in range(100):
        if loopback_pool.free_units() == 2:
            break
        await asyncio.sleep(0.1)
    assert loopback_pool.free_units() == 2
    assert all(unit.rebuilds == 0 for unit in loopback_pool.units)


SESSION_FIELDS = [
    ("instructions",),
    ("model",),
    ("temperature",),
    ("max_output_tokens",),
    ("output_modalities",),
    ("type",),
    ("audio", "input", "format"),
    ("audio", "input", "format", "type"),
    ("audio", "input", "format", "rate"),
    ("audio", "input", "transcription"),
    ("audio", "input", "noise_reduction"),
    ("audio", "input", "turn_detection"),
    ("audio", "input", "turn_detection", "type"),
    ("audio", "input", "turn_detection", "eagerness"),
    ("audio", "input", "turn_detection", "threshold"),
    ("audio", "input", "turn_detection", "idle_timeout_ms"),
    ("audio", "input", "turn_detection", "create_response"),
    ("audio", "output", "voice"),
    ("audio", "output", "voice", "id"),
    ("audio", "output", "format"),
]


@pytest.mark.parametrize("value", [["high"], {"a": 1}, [[]]], ids=["list", "object", "nested-list"])
def test_no_session_field_of_the_wrong_shape_gives_a_server_error_when_minting(client, api_key, value):
    for path in SESSION_FIELDS:
        session: dict = {"type": "realtime"}
        node = session
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
        if path[-1] in ("eagerness", "threshold", "idle_timeout_ms", "create_response"):
            node.setdefault("type", "semantic_vad" if path[-1] == "eagerness" else "server_vad")
        answer = mint(client, api_key, {"session": session})
        assert answer.status_code in (200, 400), (path, answer.status_code, answer.content[:200])
