"""Authentication: API keys, one-use client secrets, Origin checks. A refused connection never claims a unit."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from realtime.access import auth
from realtime.models import ApiKey, ClientSecret, EndReason, RealtimeSession, RefusalCount
from realtime.node import runtime
from tests.security.conftest import bearer, close_code, connect, next_event

pytestmark = pytest.mark.django_db(transaction=True)


async def refused(comm, code="invalid_api_key") -> int:
    event = await next_event(comm)
    assert event["type"] == "error" and event["error"]["code"] == code, event
    return await close_code(comm)


async def test_a_connection_without_credentials_gets_invalid_api_key_and_1008_and_never_claims_a_unit(
    loopback_pool, auth_on
):
    runtime.current().refusals.flush()  # what earlier tests counted goes to their database, not this one
    runtime.current().writer.flush()
    await RefusalCount.objects.all().adelete()
    comm, _ = await connect()
    assert await refused(comm) == 1008
    assert loopback_pool.free_units() == 2
    assert all(unit.sessions_served == 1 for unit in loopback_pool.units)  # the warm-up turn only
    await comm.disconnect()
    runtime.current().writer.flush()
    runtime.current().refusals.flush()
    runtime.current().writer.flush()
    assert not await RealtimeSession.objects.filter(end_reason=EndReason.REJECTED).aexists()
    counted = await RefusalCount.objects.aget(reason="invalid_api_key")
    assert counted.count == 1 and counted.close_code == 1008


async def test_a_wrong_key_and_a_revoked_key_are_refused(loopback_pool, api_key):
    comm, _ = await connect(bearer("sk-s2s-not-a-key"))
    assert await refused(comm) == 1008
    await comm.disconnect()
    await ApiKey.objects.all().aupdate(revoked_at=timezone.now())
    comm, _ = await connect(bearer(api_key))
    assert await refused(comm) == 1008
    await comm.disconnect()
    assert loopback_pool.free_units() == 2


async def test_a_bearer_key_opens_a_session_and_the_session_records_who(loopback_pool, api_key):
    comm, _ = await connect(bearer(api_key))
    created = await next_event(comm)
    assert created["type"] == "session.created"
    assert loopback_pool.free_units() == 1
    await comm.disconnect()
    runtime.current().writer.flush()
    session = await RealtimeSession.objects.aget(id=created["session"]["id"])
    assert session.principal == "api_key:tests"


async def test_the_key_subprotocol_is_accepted_and_only_realtime_is_echoed(loopback_pool, api_key):
    comm, subprotocol = await connect(
        subprotocols=["realtime", f"openai-insecure-api-key.{api_key}", "openai-beta.realtime-v1"]
    )
    assert subprotocol == "realtime"
    created = await next_event(comm, beta=True)  # the beta subprotocol makes it a beta session
    assert created["type"] == "session.created" and created["session"]["input_audio_format"] == "pcm16"
    await comm.disconnect()


def test_only_the_hash_of_a_key_is_stored_and_the_command_prints_the_key_once(auth_on, capsys):
    call_command("create_api_key", "cli user")
    key = capsys.readouterr().out.strip()
    assert key.startswith("sk-s2s-") and len(key) > 40
    stored = ApiKey.objects.get(name="cli user")
    assert stored.key_hash == auth.hash_token(key) and key not in (stored.key_hash, stored.prefix)
    assert auth.verify_api_key(key).name == "cli user"


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://127.0.0.1.evil.example:8000"])
async def test_a_browser_from_another_origin_is_refused(loopback_pool, api_key, origin):
    comm, _ = await connect(bearer(api_key) + [(b"origin", origin.encode())])
    assert await refused(comm, "invalid_origin") == 1008
    assert loopback_pool.free_units() == 2
    await comm.disconnect()


@pytest.mark.parametrize("origin", ["http://localhost:8000", "http://127.0.0.1:8000", "http://[::1]:8000"])
async def test_a_browser_from_an_allowed_host_connects(loopback_pool, api_key, origin):
    host = origin.removeprefix("http://").encode()  # a page of the server itself: same scheme, host and port
    comm, _ = await connect(bearer(api_key) + [(b"origin", origin.encode()), (b"host", host)])
    assert (await next_event(comm))["type"] == "session.created"
    await comm.disconnect()


async def test_origin_is_checked_even_with_authentication_off(loopback_pool):
    comm, _ = await connect([(b"origin", b"https://evil.example")])
    assert await refused(comm, "invalid_origin") == 1008
    await comm.disconnect()


# --- client secrets -----------------------------------------------------------


def mint(key: str | None, body: dict | None = None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}
    return Client().post(
        "/v1/realtime/client_secrets", data=json.dumps(body or {}), content_type="application/json", **headers
    )


def test_client_secrets_returns_openais_ga_shape(api_key):
    response = mint(
        api_key,
        {
            "expires_after": {"anchor": "created_at", "seconds": 60},
            "session": {"type": "realtime", "instructions": "Be brief.", "audio": {"output": {"voice": "marin"}}},
        },
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["value"].startswith("ek_")
    assert abs(body["expires_at"] - (timezone.now().timestamp() + 60)) < 5
    assert body["session"]["instructions"] == "Be brief."
    assert body["session"]["audio"]["output"]["voice"] == "marin"
    assert ClientSecret.objects.get().secret_hash == auth.hash_token(body["value"])


def test_client_secrets_needs_a_key_and_valid_settings(api_key):
    assert mint(None).status_code == 401
    assert mint("sk-s2s-wrong").json()["error"]["code"] == "invalid_api_key"
    bad = mint(api_key, {"session": {"audio": {"output": {"voice": 7}}}})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    assert mint(api_key, {"expires_after": {"seconds": 99999}}).status_code == 400
    assert Client().get("/v1/realtime/client_secrets").status_code == 405


async def test_a_client_secret_opens_exactly_one_session_with_its_settings(loopback_pool, api_key):
    from asgiref.sync import sync_to_async

    value = (await sync_to_async(mint)(api_key, {"session": {"instructions": "Only from the secret."}})).json()["value"]
    comm, subprotocol = await connect(subprotocols=["realtime", f"openai-insecure-api-key.{value}"])
    created = await next_event(comm)
    assert subprotocol == "realtime" and created["type"] == "session.created"
    assert created["session"]["instructions"] == "Only from the secret."
    second, _ = await connect(subprotocols=["realtime", f"openai-insecure-api-key.{value}"])
    assert await refused(second) == 1008
    await second.disconnect()
    await comm.disconnect()
    secret = await ClientSecret.objects.aget()
    assert secret.used_at is not None and secret.session_id == created["session"]["id"]


async def test_a_client_secret_minted_with_a_stored_prompt_opens_a_session_with_its_text(loopback_pool, api_key):
    from asgiref.sync import sync_to_async

    from realtime.models import Prompt, PromptVersion

    prompt = await Prompt.objects.acreate(name="greeter")
    await PromptVersion.objects.acreate(prompt=prompt, version=1, instructions="Greet {{who}}.")
    ref = {"id": prompt.id, "variables": {"who": "Ana"}}
    assert (await sync_to_async(mint)(api_key, {"session": {"prompt": {"id": prompt.id}}})).status_code == 400
    minted = (await sync_to_async(mint)(api_key, {"session": {"prompt": ref}})).json()
    assert minted["session"]["instructions"] == "Greet Ana."
    comm, _ = await connect(subprotocols=["realtime", f"openai-insecure-api-key.{minted['value']}"])
    session = (await next_event(comm))["session"]
    assert (session["instructions"], session["prompt"]) == ("Greet Ana.", ref)
    await comm.disconnect()


async def test_a_client_secret_may_open_a_transcription_session(loopback_pool, api_key):
    from asgiref.sync import sync_to_async

    minted = (
        await sync_to_async(mint)(
            api_key,
            {
                "session": {
                    "type": "transcription",
                    "audio": {"input": {"transcription": {"model": "gpt-4o-mini-transcribe"}}},
                }
            },
        )
    ).json()
    assert minted["session"]["type"] == "transcription"
    comm, _ = await connect(subprotocols=["realtime", f"openai-insecure-api-key.{minted['value']}"])
    session = (await next_event(comm))["session"]
    assert session["type"] == "transcription"
    assert session["audio"]["input"]["transcription"] == {"model": "gpt-4o-mini-transcribe"}
    await comm.disconnect()


async def test_an_expired_client_secret_is_refused(loopback_pool, api_key):
    from asgiref.sync import sync_to_async

    value = (await sync_to_async(mint)(api_key)).json()["value"]
    await ClientSecret.objects.all().aupdate(expires_at=timezone.now() - timedelta(seconds=1))
    comm, _ = await connect(bearer(value))
    assert await refused(comm) == 1008
    await comm.disconnect()
    assert loopback_pool.free_units() == 2


async def test_a_client_secret_refused_for_lack_of_a_unit_stays_usable(loopback_pool, api_key):
    from asgiref.sync import sync_to_async

    value = (await sync_to_async(mint)(api_key)).json()["value"]
    holders = [(await connect(bearer(api_key)))[0] for _ in range(2)]
    for holder in holders:
        assert (await next_event(holder))["type"] == "session.created"
    comm, _ = await connect(bearer(value))
    assert await refused(comm, "session_limit_reached") == 1008
    await comm.disconnect()
    runtime.current().writer.flush()
    await holders[0].disconnect()
    comm, _ = await connect(bearer(value))
    assert (await next_event(comm))["type"] == "session.created"
    for other in (comm, holders[1]):
        await other.disconnect()


def test_a_signed_in_staff_user_mints_secrets_with_a_csrf_token(auth_on, django_user_model):
    staff = django_user_model.objects.create_user("op", password="pw", is_staff=True)
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    assert client.post("/v1/realtime/client_secrets", data="{}", content_type="application/json").status_code == 403
    client.get("/")  # sets the CSRF cookie, as the browser page does
    token = client.cookies["csrftoken"].value
    response = client.post(
        "/v1/realtime/client_secrets", data="{}", content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert response.status_code == 200 and response.json()["value"].startswith("ek_")
