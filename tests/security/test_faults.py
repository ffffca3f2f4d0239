"""Faults inside one process: a failing stage, a dying stage thread, a client that reads too slowly."""

from __future__ import annotations

import asyncio
import json

import pytest

from pipelines.unit import UnitState
from realtime.models import EndReason, RealtimeSession
from realtime.node import runtime
from realtime.transports import websocket as consumers
from tests.security.conftest import close_code, connect, next_event, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


async def ask(comm, text: str) -> None:
    await comm.send_to(
        text_data=json.dumps(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
            }
        )
    )
    await comm.send_to(text_data=json.dumps({"type": "response.create", "response": {"output_modalities": ["text"]}}))


async def open_session():
    comm, _ = await connect()
    created = await next_event(comm)
    assert created["type"] == "session.created"
    return comm, created["session"]["id"]


def busy_unit(pool):
    return next(unit for unit in pool.units if unit.state is UnitState.BUSY)


async def until_free(pool, count: int, timeout: float = 10) -> None:
    for _ in range(int(timeout / 0.05)):
        if pool.free_units() == count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{pool.free_units()} free units, expected {count}: {pool.snapshot()}")


async def test_a_stage_exception_fails_the_response_with_an_error_and_the_session_goes_on(loopback_pool):
    comm, _ = await open_session()
    unit = busy_unit(loopback_pool)
    await ask(comm, "fail please")  # the FAKE language model raises on this
    done, before = await wait_for(comm, "response.done")
    errors = [e for e in before if e["type"] == "error"]
    assert errors and errors[0]["error"]["type"] == "server_error"
    assert done["response"]["status"] == "failed"
    await ask(comm, "hello again")
    done, before = await wait_for(comm, "response.done")
    assert done["response"]["status"] == "completed"
    assert "hello again" in "".join(e.get("delta", "") for e in before if e["type"] == "response.output_text.delta")
    assert unit.healthy() and unit.rebuilds == 0
    await comm.disconnect()


class FakeThreadDeath(BaseException):
    """Test-only: an exception the stage runner does not catch, so the stage thread dies."""


async def test_a_dead_stage_thread_closes_the_session_with_1011_and_the_unit_is_rebuilt(loopback_pool):
    comm, session_id = await open_session()
    unit = busy_unit(loopback_pool)
    lm = next(stage for stage in unit.stages() if stage.name == "lm")

    def die(msg):
        raise FakeThreadDeath("killed by the test")

    lm.process = die  # test-only fault injection on this unit's LM stage
    await ask(comm, "anything")
    event, _ = await wait_for(comm, "error")
    assert event["error"]["type"] == "server_error" and "lm thread died" in event["error"]["message"]
    assert await close_code(comm) == 1011
    await until_free(loopback_pool, 2)
    assert unit.rebuilds == 1 and unit.healthy()
    runtime.current().writer.flush()
    record = await RealtimeSession.objects.aget(id=session_id)
    assert record.end_reason == EndReason.ERROR and record.close_code == 1011
    # The rebuilt unit serves the next sessions.
    sessions = [await open_session() for _ in range(2)]
    for comm, _ in sessions:
        await ask(comm, "after the rebuild")
        done, _ = await wait_for(comm, "response.done")
        assert done["response"]["status"] == "completed"
        await comm.disconnect()


async def test_an_idle_unit_whose_thread_died_is_rebuilt_before_anyone_gets_it(loopback_pool):
    unit = loopback_pool.units[0]
    unit._wiring.threads[0].join(timeout=0)  # alive
    unit._wiring.dead.append("vad")  # what the runner records when a stage thread dies
    comm, _ = await open_session()
    assert busy_unit(loopback_pool) is loopback_pool.units[1]
    await comm.disconnect()
    await until_free(loopback_pool, 2)
    assert unit.rebuilds == 1 and unit.healthy()


async def test_a_full_send_buffer_closes_the_session_with_1008_and_frees_the_unit(loopback_pool, settings, monkeypatch):
    settings.S2S_SEND_BUFFER_EVENTS = 16
    sent = asyncio.Event()
    original = consumers.RealtimeConsumer.send_event

    async def slow_send(self, event):  # pipeline output meets a transport that does not drain
        if not event.type.startswith("response."):
            return await original(self, event)
        sent.set()
        await asyncio.sleep(3600)

    monkeypatch.setattr(consumers.RealtimeConsumer, "send_event", slow_send)
    comm, session_id = await open_session()
    await ask(comm, "slow answer with many words")
    assert await close_code(comm, timeout=15) == 1008
    await until_free(loopback_pool, 2)
    runtime.current().writer.flush()
    record = await RealtimeSession.objects.aget(id=session_id)
    assert record.end_reason == EndReason.SERVER_CLOSED and record.close_code == 1008


async def test_a_consumer_that_crashes_outside_any_handler_still_gives_its_unit_back(loopback_pool, monkeypatch):
    async def crash(self, text_data=None, bytes_data=None):
        raise RuntimeError("a bug in a handler")

    monkeypatch.setattr(consumers.RealtimeConsumer, "receive", crash)
    comm, session_id = await open_session()
    assert loopback_pool.free_units() == 1
    await comm.send_to(text_data='{"type": "input_audio_buffer.clear"}')
    with pytest.raises(RuntimeError):
        await comm.receive_output(timeout=5)
    await until_free(loopback_pool, 2)
    runtime.current().writer.flush()
    assert (await RealtimeSession.objects.aget(id=session_id)).end_reason == EndReason.ERROR
