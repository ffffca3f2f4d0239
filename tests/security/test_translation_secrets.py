"""Translation sessions' credentials (issue 55): ``POST /v1/realtime/translations/client_secrets`` mints an ``ek_``
secret as the voice agent's route does (the same callers, lifetimes and limits) that opens one translation session
and nothing else; a voice agent's secret does not open a translation, another key's session is not reachable;
the session's record and the admin say it is a translation, its phrases side by side."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from realtime.access import auth
from realtime.admin.translation import kind_of, phrases
from realtime.models import ClientSecret, RealtimeSession
from realtime.node import cluster, runtime
from tests.security.conftest import bearer, close_code, connect
from tests.support.conformance import check_translation, decode
from tests.support.speech import pcm16_chunks, silence, tone

pytestmark = pytest.mark.django_db(transaction=True)

TRANSLATIONS = "/v1/realtime/translations"


def mint(key: str | None, body: dict | None = None, path: str = f"{TRANSLATIONS}/client_secrets"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}
    return Client().post(path, data=json.dumps(body or {}), content_type="application/json", **headers)


async def amint(key: str | None, body: dict | None = None, path: str = f"{TRANSLATIONS}/client_secrets") -> dict:
    response = await sync_to_async(mint)(key, body, path)
    assert response.status_code == 200, response.content
    return response.json()


async def next_translation(comm, timeout: float = 10) -> dict:
    return check_translation(json.loads(await comm.receive_from(timeout=timeout)))


async def until(comm, kind: str, timeout: float = 10) -> dict:
    while (event := await next_translation(comm, timeout))["type"] != kind:
        pass
    return event


def test_the_route_answers_in_the_sdks_shape_and_checks_the_settings(api_key):
    from openai.types.realtime import RealtimeTranslationClientSecretCreateResponse

    body = {
        "expires_after": {"anchor": "created_at", "seconds": 120},
        "session": {
            "model": "gpt-realtime-translate",
            "audio": {"output": {"language": "en"}, "input": {"transcription": {"model": "whisper-1"}}},
        },
    }
    response = mint(api_key, body)
    assert response.status_code == 200, response.content
    minted = RealtimeTranslationClientSecretCreateResponse.model_validate(response.json())
    assert minted.value.startswith("ek_") and minted.session.type == "translation"
    assert minted.session.audio.input is not None and minted.session.audio.input.transcription is not None
    secret = ClientSecret.objects.get()
    assert auth.secret_kind(secret.session_config) == auth.TRANSLATION
    # bad input: OpenAI's error, the param named; nothing minted
    for session, param in [
        ({"audio": {"output": {"language": "xx"}}}, "session.audio.output.language"),
        ({"type": "realtime"}, "session.type"),
        ({"instructions": "Translate nicely."}, "session.instructions"),
        ({"model": 7}, "session.model"),
    ]:
        bad = mint(api_key, {"session": session})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == param, bad.content
    assert mint(api_key, {"expires_after": {"seconds": 5}}).json()["error"]["param"] == "expires_after.seconds"
    assert mint(None).status_code == 401 and mint("sk-s2s-wrong").status_code == 401
    assert Client().get(f"{TRANSLATIONS}/client_secrets").status_code == 405
    assert ClientSecret.objects.count() == 1


async def test_a_translation_secret_opens_one_translation_session_with_its_settings(loopback_pool, api_key):
    minted = await amint(
        api_key, {"session": {"model": "gpt-realtime-translate", "audio": {"input": {"transcription": {"model": "x"}}}}}
    )
    comm, _ = await connect(subprotocols=["realtime", f"openai-insecure-api-key.{minted['value']}"], path=TRANSLATIONS)
    created = await next_translation(comm)
    assert created["type"] == "session.created"
    assert created["session"]["audio"]["input"]["transcription"] == {"model": "x"}
    for chunk in pcm16_chunks(tone(0.6), chunk_ms=200):
        await comm.send_to(text_data=json.dumps({"type": "session.input_audio_buffer.append", "audio": chunk}))
    await comm.send_to(text_data=json.dumps({"type": "session.close"}))
    await until(comm, "session.closed")
    assert await close_code(comm) == 1000
    again, _ = await connect(bearer(minted["value"]), path=TRANSLATIONS)  # spent
    assert (await next_translation(again))["error"]["code"] == "invalid_api_key"
    assert await close_code(again) == 1008
    runtime.current().writer.flush(10)
    record = await RealtimeSession.objects.aget(id=created["session"]["id"])
    assert kind_of(record) == "translation" and record.principal.startswith("client_secret:")
    rows = await sync_to_async(phrases)(record)  # the admin's side by side: source, then its translation
    assert len(rows) == 1 and rows[0]["source"].startswith("audio de") and rows[0]["translation"].startswith("audio of")
    assert loopback_pool.free_units() == 2


async def test_a_voice_agents_secret_opens_no_translation_and_a_translations_no_voice_agent(loopback_pool, api_key):
    """Each is refused as an unknown secret is (the same error and close), and stays unspent for its own route."""
    voice = await amint(api_key, {"session": {"type": "realtime"}}, "/v1/realtime/client_secrets")
    translation = await amint(api_key, {"session": {"model": "gpt-realtime-translate"}})
    unknown, _ = await connect(bearer("ek_nothing"), path=TRANSLATIONS)
    expected = (await next_translation(unknown))["error"]
    assert await close_code(unknown) == 1008
    wrong, _ = await connect(bearer(voice["value"]), path=TRANSLATIONS)
    assert (await next_translation(wrong))["error"] == expected
    assert await close_code(wrong) == 1008
    wrong, _ = await connect(bearer(translation["value"]))
    assert decode(await wrong.receive_from(timeout=5))["error"] == expected
    assert await close_code(wrong) == 1008
    assert loopback_pool.free_units() == 2  # nothing claimed
    assert not await ClientSecret.objects.filter(used_at__isnull=False).aexists()
    # each still opens its own kind
    right, _ = await connect(bearer(translation["value"]), path=TRANSLATIONS)
    assert (await next_translation(right))["type"] == "session.created"
    other, _ = await connect(bearer(voice["value"]))
    assert decode(await other.receive_from(timeout=5))["type"] == "session.created"
    for comm in (right, other, unknown, wrong):
        await comm.disconnect()


async def test_a_translation_session_is_its_owners_only_and_deleting_its_key_ends_it_and_no_other(
    loopback_pool, api_key
):
    """A stranger (another key) hanging it up by id gets an unknown id's answer and the session goes on;
    the stranger's key deleted leaves it alone; its own key deleted ends it."""
    from realtime.models import ApiKey

    comm, _ = await connect(bearer(api_key), path=TRANSLATIONS)
    session_id = (await next_translation(comm))["session"]["id"]
    stranger_row, stranger = await sync_to_async(auth.create_api_key)("stranger")
    answered = await sync_to_async(Client().delete)(
        f"/v1/realtime/calls/{session_id}", HTTP_AUTHORIZATION=f"Bearer {stranger}"
    )
    unknown = await sync_to_async(Client().delete)(
        "/v1/realtime/calls/rtc_nothing", HTTP_AUTHORIZATION=f"Bearer {stranger}"
    )
    assert answered.status_code == unknown.status_code == 404
    assert answered.json()["error"]["code"] == unknown.json()["error"]["code"]
    await sync_to_async(ApiKey.objects.filter(pk=stranger_row.pk).delete)()
    await comm.send_to(text_data=json.dumps({"type": "session.update", "session": {}}))
    assert (await next_translation(comm))["type"] == "session.updated"  # still live
    await sync_to_async(ApiKey.objects.filter(name="tests").delete)()
    error = await until(comm, "error")
    assert error["error"]["code"] == "invalid_api_key" and "revoked" in error["error"]["message"]
    assert await close_code(comm) == 1008
    await comm.disconnect()


async def test_a_translation_session_without_audio_ends_at_the_idle_limit(loopback_pool, settings):
    settings.S2S_IDLE_TIMEOUT_S = 1
    comm, _ = await connect(path=TRANSLATIONS)
    assert (await next_translation(comm))["type"] == "session.created"
    error = await until(comm, "error", timeout=5)
    assert error["error"]["code"] == "session_idle_timeout"
    assert await close_code(comm) == 1008
    assert loopback_pool.free_units() == 2


async def test_audio_keeps_a_translation_session_alive_past_the_idle_limit(loopback_pool, settings):
    settings.S2S_IDLE_TIMEOUT_S = 1
    comm, _ = await connect(path=TRANSLATIONS)
    assert (await next_translation(comm))["type"] == "session.created"
    for chunk in pcm16_chunks(silence(1.6), chunk_ms=200):  # silence is audio: the speaker is there
        await comm.send_to(text_data=json.dumps({"type": "session.input_audio_buffer.append", "audio": chunk}))
        await comm.receive_nothing(timeout=0.2)
    assert loopback_pool.free_units() == 1
    await comm.disconnect()


async def test_the_slot_board_says_translation_beside_the_transport(loopback_pool, admin_client):
    comm, _ = await connect(path=TRANSLATIONS)
    session_id = (await next_translation(comm))["session"]["id"]
    runtime.current().writer.flush(10)
    await sync_to_async(cluster.publish)(loopback_pool, runtime.current().started_at)  # the heartbeat's snapshot
    board = await sync_to_async(admin_client.get)("/admin/realtime/node/board.json")
    slots = [slot for node in board.json()["nodes"] for slot in node["slots"] if slot.get("session_id") == session_id]
    assert slots and slots[0]["transport"].endswith("translation"), board.json()
    listed = await sync_to_async(admin_client.get)("/admin/realtime/realtimesession/?kind=translation")
    assert session_id in listed.content.decode()
    voice = await sync_to_async(admin_client.get)("/admin/realtime/realtimesession/?kind=realtime")
    assert session_id not in voice.content.decode()
    page = await sync_to_async(admin_client.get)(f"/admin/realtime/realtimesession/{session_id}/change/")
    assert page.status_code == 200 and "translation" in page.content.decode()
    await comm.disconnect()
