"""Every setting a client sends does what it says, or is refused with an ``error`` naming its ``param``.

The pipeline is the FAKE loopback profile: its LM answers "You said: <last user text>.", counts a
message as its words plus 4 tokens (so ``usage.input_tokens`` shows what the prompt held), has a
context of 4096 tokens and gives a response at most 128 tokens. Every event is validated against
the openai SDK's types by the client (tests/support/conformance.py).
"""

from __future__ import annotations

import base64

import pytest
from asgiref.sync import sync_to_async
from django.contrib.admin.utils import quote

from pipelines import audio
from pipelines.config import ENGINE_DEFAULTS
from realtime.models import Prompt, PromptVersion
from tests.support.client import text_item
from tests.support.speech import tone

pytestmark = pytest.mark.django_db(transaction=True)

TEXT = {"output_modalities": ["text"]}
MANUAL = {"audio": {"input": {"turn_detection": None}}}
CAP = ENGINE_DEFAULTS.lm_max_new_tokens  # the loopback LM stage's max_new_tokens: the engine config's default


def words(n: int, word: str = "w") -> str:
    return " ".join([word] * n)


async def add(client, text: str, item_id: str | None = None) -> str:
    item = {**text_item(text), **({"id": item_id} if item_id else {})}
    await client.send("conversation.item.create", item=item)
    return (await client.until("conversation.item.done"))["item"]["id"]


async def answer(client, **response) -> dict:
    """An out-of-band text response over the conversation (it adds nothing to the LM's history)."""
    await client.send("response.create", response={**TEXT, "conversation": "none", **response})
    return (await client.until("response.done", timeout=20))["response"]


async def refused(client, event_type: str, **fields) -> dict:
    event_id = await client.send(event_type, **fields)
    error = await client.error()
    assert error["event_id"] == event_id, error
    return error


# --- truncation -----------------------------------------------------------------------------------


async def test_retention_ratio_cuts_the_oldest_items_to_the_ratio_of_the_limit_and_keeps_the_cut(connect):
    client = await connect()
    await client.update_session(
        instructions="",
        truncation={"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": {"post_instructions": 100}},
    )
    seen = []
    for n in range(5):
        await add(client, words(26, f"w{n}"))  # 30 tokens each
        seen.append((await answer(client))["usage"]["input_tokens"])
    # 30, 60, 90 fit the limit of 100; the 4th item makes 120: the oldest go until at most 50 are left (one
    # item); the 5th adds to what was kept, the cut stays where it was (the prompt's start holds).
    assert seen == [30, 60, 90, 30, 60]


async def test_auto_truncation_keeps_what_fits_the_context(connect):
    client = await connect()
    await client.update_session(instructions="", truncation="auto")
    for n in range(3):
        await add(client, words(26, f"w{n}"))
    assert (await answer(client))["usage"]["input_tokens"] == 90


async def test_disabled_truncation_fails_a_response_whose_conversation_does_not_fit_and_the_session_goes_on(connect):
    client = await connect()
    updated = await client.update_session(instructions="", truncation="disabled")
    assert updated["session"]["truncation"] == "disabled"
    first = await add(client, words(2500, "a"))
    await add(client, words(2500, "b"))  # 5008 tokens: the LM's history (4096) let the first item go
    event_id = await client.send("response.create", response={**TEXT, "conversation": "none"})
    events = await client.collect("response.done", timeout=20)
    done = events[-1]["response"]
    assert done["status"] == "failed"
    assert done["status_details"]["error"]["type"] == "invalid_request_error"
    assert done["status_details"]["error"]["code"] == "context_length_exceeded"
    error = next(e["error"] for e in events if e["type"] == "error")
    assert (error["code"], error["event_id"]) == ("context_length_exceeded", event_id)
    # Deleting the item that could not be kept makes the conversation whole again: it fits.
    await client.send("conversation.item.delete", item_id=first)
    await client.until("conversation.item.deleted")
    assert (await answer(client))["status"] == "incomplete"  # a long echo, cut at the cap: it ran


async def test_disabled_truncation_fails_when_one_item_is_longer_than_the_context(connect):
    client = await connect()
    await client.update_session(instructions="", truncation="disabled")
    await add(client, words(4000))
    done = await answer(client)
    assert (done["status"], done["status_details"]["error"]["code"]) == ("failed", "context_length_exceeded")
    await client.update_session(truncation="auto")
    assert (await answer(client))["status"] != "failed"


@pytest.mark.parametrize(
    ("value", "param"),
    [
        ("bogus", "session.truncation"),
        ({"type": "retention_ratio"}, "session.truncation.retention_ratio"),
        ({"type": "retention_ratio", "retention_ratio": 1.5}, "session.truncation.retention_ratio"),
        ({"type": "retention_ratio", "retention_ratio": "half"}, "session.truncation.retention_ratio"),
        ({"type": "other", "retention_ratio": 0.5}, "session.truncation.type"),
        (
            {"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": {"post_instructions": 4097 - CAP}},
            "session.truncation.token_limits.post_instructions",
        ),  # above the context (4096) less the LM stage's cap
        (
            {"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": {"pre": 1}},
            "session.truncation.token_limits.pre",
        ),
    ],
)
async def test_a_truncation_the_api_does_not_define_or_the_model_cannot_hold_is_refused(connect, value, param):
    client = await connect()
    error = await refused(client, "session.update", session={"type": "realtime", "truncation": value})
    assert error["param"] == param
    assert (await client.update_session())["session"]["truncation"] == "auto"  # nothing was stored


# --- max_output_tokens ------------------------------------------------------------------------------


async def test_max_output_tokens_above_the_servers_cap_is_refused_naming_the_cap(connect):
    client = await connect()
    error = await refused(client, "session.update", session={"type": "realtime", "max_output_tokens": 4096})
    assert (error["code"], error["param"]) == ("integer_above_max_value", "session.max_output_tokens")
    assert str(CAP) in error["message"]
    error = await refused(client, "response.create", response={"max_output_tokens": CAP + 1})
    assert (error["code"], error["param"]) == ("integer_above_max_value", "response.max_output_tokens")
    assert (await client.update_session(max_output_tokens=CAP))["session"]["max_output_tokens"] == CAP
    await add(client, "slow story")
    done = await answer(client)
    assert (done["max_output_tokens"], done["usage"]["output_tokens"]) == (CAP, CAP)


# --- stored prompts ------------------------------------------------------------------------------


@sync_to_async
def stored_prompt() -> str:
    prompt = Prompt.objects.create(name="tour guide")
    PromptVersion.objects.create(prompt=prompt, version=1, instructions="Old {{city}}.")
    PromptVersion.objects.create(
        prompt=prompt, version=2, instructions="Guide {{who}} around {{city}} today.", variables={"city": "Lisbon"}
    )
    return prompt.id


async def test_a_stored_prompt_becomes_the_sessions_instructions_with_its_variables(connect):
    prompt_id = await stored_prompt()
    client = await connect()
    ref = {"id": prompt_id, "variables": {"who": {"type": "input_text", "text": "Ana"}}}
    session = (await client.update_session(prompt=ref))["session"]
    assert session["instructions"] == "Guide Ana around Lisbon today."
    assert session["prompt"] == ref
    await add(client, "hi")
    assert (await answer(client))["usage"]["input_tokens"] == (5 + 4) + (1 + 4)  # the prompt's text was read
    pinned = {"id": prompt_id, "version": "1", "variables": {"city": "Porto"}}
    assert (await client.update_session(prompt=pinned))["session"]["instructions"] == "Old Porto."
    session = (await client.update_session(instructions="Plain."))["session"]
    assert (session["instructions"], session["prompt"]) == ("Plain.", None)  # the prompt no longer holds


async def test_a_response_applies_its_own_stored_prompt(connect):
    prompt_id = await stored_prompt()
    client = await connect()
    await client.update_session(instructions="")
    await add(client, "hi")
    done = await answer(client, prompt={"id": prompt_id, "variables": {"who": "Bo", "city": "Rome"}})
    assert done["usage"]["input_tokens"] == (5 + 4) + (1 + 4)
    assert (await answer(client))["usage"]["input_tokens"] == 1 + 4  # the session's own (empty) instructions


async def test_an_unknown_prompt_version_or_a_missing_variable_is_refused(connect):
    prompt_id = await stored_prompt()
    client = await connect()
    cases = [
        ({"id": "pmpt_nope"}, "session.prompt.id"),
        ({"id": prompt_id, "version": "9"}, "session.prompt.version"),
        ({"id": prompt_id}, "session.prompt.variables.who"),
        ({"id": prompt_id, "variables": {"who": "x", "extra": "y"}}, "session.prompt.variables.extra"),
        (
            {"id": prompt_id, "variables": {"who": {"type": "input_image", "image_url": "x"}}},
            "session.prompt.variables.who.type",
        ),
        ("hello", "session.prompt"),
    ]
    for ref, param in cases:
        error = await refused(client, "session.update", session={"type": "realtime", "prompt": ref})
        assert error["param"] == param, (ref, error)
    error = await refused(client, "response.create", response={"prompt": {"id": "pmpt_nope"}})
    assert error["param"] == "response.prompt.id"
    assert (await client.update_session())["session"]["prompt"] is None


def test_the_prompt_admin_lists_and_searches_prompts(admin_client):
    prompt = Prompt.objects.create(name="tour guide")
    PromptVersion.objects.create(prompt=prompt, version=3, instructions="Guide {{who}}.")
    Prompt.objects.create(name="zebra notes")
    page = admin_client.get("/admin/realtime/prompt/", {"q": "Guide"}).content.decode()
    assert prompt.id in page and "tour guide" in page and "zebra notes" not in page
    assert admin_client.get(f"/admin/realtime/prompt/{quote(prompt.id)}/change/").status_code == 200


# --- refused where nothing here can apply them --------------------------------------------------------


async def test_reasoning_is_refused_as_no_reasoning_model_runs_here(connect):
    client = await connect()
    error = await refused(client, "session.update", session={"type": "realtime", "reasoning": {"effort": "low"}})
    assert (error["code"], error["param"]) == ("unsupported_parameter", "session.reasoning")
    error = await refused(client, "response.create", response={"reasoning": {"effort": "high"}})
    assert error["param"] == "response.reasoning"


@pytest.mark.parametrize(
    ("session", "param"),
    [
        ({"audio": {"output": {"speed": "fast"}}}, "session.audio.output.speed"),
        ({"audio": {"output": {"speed": 3.0}}}, "session.audio.output.speed"),
        ({"tracing": 5}, "session.tracing"),
        ({"tracing": "on"}, "session.tracing"),
        ({"tracing": {"workflow_name": 5}}, "session.tracing.workflow_name"),
        ({"model": ""}, "session.model"),
    ],
)
async def test_values_the_sdk_types_reject_are_never_stored(connect, session, param):
    client = await connect()
    error = await refused(client, "session.update", session={"type": "realtime", **session})
    assert error["param"] == param
    await client.update_session()  # the next session.updated still validates (the client checks it)


@pytest.mark.parametrize(
    ("response", "param"),
    [
        ({"modalities": ["text"]}, "response.modalities"),  # a beta key: unknown to a GA session
        ({"bogus": 1}, "response.bogus"),
        ({"conversation": "conv_other"}, "response.conversation"),
        ({"metadata": {"n": 1}}, "response.metadata.n"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "response.metadata"),
        ({"metadata": {"k" * 65: "v"}}, "response.metadata"),
        ({"metadata": {"k": "v" * 513}}, "response.metadata.k"),
        ({"audio": {"output": {"speed": 1.0}}}, "response.audio.output.speed"),
    ],
)
async def test_a_response_create_the_sdk_would_not_send_is_refused(connect, response, param):
    client = await connect()
    error = await refused(client, "response.create", response=response)
    assert error["param"] == param
    await add(client, "still here")
    assert (await answer(client, metadata={"k": "v"}))["metadata"] == {"k": "v"}


async def test_a_user_text_part_of_type_text_is_refused_as_the_api_does(connect):
    client = await connect()
    error = await refused(
        client,
        "conversation.item.create",
        item={"type": "message", "role": "user", "content": [{"type": "text", "text": "hi"}]},
    )
    assert (error["code"], error["param"]) == ("invalid_value", "item.content[0].type")
    error = await refused(
        client,
        "conversation.item.create",
        item={"type": "message", "role": "system", "content": [{"type": "output_text", "text": "hi"}]},
    )
    assert error["param"] == "item.content[0].type"


# --- conversation.item.retrieve returns user audio ----------------------------------------------------


async def test_a_retrieved_user_audio_item_carries_its_audio_in_the_sessions_input_format(connect):
    client = await connect()
    pcm = audio.encode(tone(0.5), audio.PCM)
    await client.send(
        "conversation.item.create",
        item={
            "id": "item_clip",
            "type": "message",
            "role": "user",
            "content": [{"type": "input_audio", "audio": base64.b64encode(pcm).decode()}],
        },
    )
    await client.until("conversation.item.done")
    await client.send("conversation.item.retrieve", item_id="item_clip")
    part = (await client.until("conversation.item.retrieved"))["item"]["content"][0]
    assert base64.b64decode(part["audio"]) == pcm

    await client.update_session(**MANUAL, output_modalities=["text"])
    await client.append(tone(1.0))
    await client.send("input_audio_buffer.commit")
    item_id = (await client.until("input_audio_buffer.committed"))["item_id"]
    await client.send("conversation.item.retrieve", item_id=item_id)
    part = (await client.until("conversation.item.retrieved"))["item"]["content"][0]
    heard = base64.b64decode(part["audio"])
    assert abs(audio.duration_ms(len(heard), audio.PCM) - 1000) <= 40
    await client.update_session(audio={"input": {"format": {"type": "audio/pcmu"}}})
    await client.send("conversation.item.retrieve", item_id=item_id)
    part = (await client.until("conversation.item.retrieved"))["item"]["content"][0]
    assert abs(len(base64.b64decode(part["audio"])) - 8000) <= 320  # one second at 8 kHz, a byte a sample


async def test_user_audio_kept_for_retrieval_is_capped_and_the_oldest_goes_first(connect, settings):
    settings.S2S_MAX_CONVERSATION_AUDIO_BYTES = 100_000  # two seconds of 24 kHz PCM, not three
    client = await connect()
    pcm = base64.b64encode(audio.encode(tone(1.0), audio.PCM)).decode()
    for name in ("item_a", "item_b", "item_c"):
        await client.send(
            "conversation.item.create",
            item={"id": name, "type": "message", "role": "user", "content": [{"type": "input_audio", "audio": pcm}]},
        )
        await client.until("conversation.item.done")
    kept = {}
    for name in ("item_a", "item_b", "item_c"):
        await client.send("conversation.item.retrieve", item_id=name)
        kept[name] = (await client.until("conversation.item.retrieved"))["item"]["content"][0].get("audio")
    assert kept["item_a"] is None and kept["item_b"] == kept["item_c"] == pcm


# --- defaults, written once ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["server_vad", "semantic_vad"])
def test_each_kind_of_turn_detection_starts_from_the_pipelines_defaults(kind):
    """``pipelines.config.TurnDetection`` holds each default; the session shows and passes on exactly those."""
    from pipelines.config import TurnDetection
    from realtime.protocol.session import render
    from realtime.protocol.session.config import SessionConfig
    from realtime.protocol.session.keys import DEFAULT_TURN_DETECTION, TURN_DETECTION_DEFAULTS

    session = SessionConfig("sess_defaults", "gpt-realtime", ("alloy",))
    assert (DEFAULT_TURN_DETECTION, session.turn_detection) == ("server_vad", TURN_DETECTION_DEFAULTS["server_vad"])
    session.update({"type": "realtime", "audio": {"input": {"turn_detection": {"type": kind}}}}, beta=False)
    assert render.as_ga(session)["audio"]["input"]["turn_detection"] == TURN_DETECTION_DEFAULTS[kind]
    assert session.settings().turn_detection == TurnDetection(type=kind)
    assert TURN_DETECTION_DEFAULTS["server_vad"]["silence_duration_ms"] == TurnDetection().silence_duration_ms
