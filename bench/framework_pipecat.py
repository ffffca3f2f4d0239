"""One spoken tool turn through pipecat's ``OpenAIRealtimeLLMService``, for bench/framework_tools.py.

Runs with the interpreter of .venv-pipecat (``make pipecat-deps``: pipecat-ai wants protobuf<7, the server
protobuf 7), so it imports nothing of the project. A pipeline as a pipecat bot has it (the user aggregator, the
service, an output, the assistant aggregator), the session's instructions, tools and server VAD in the service's
``session_properties``, the tool's handler registered with the service. It streams the microphone (a 24 kHz
PCM16 file, then silence, as a live microphone goes on) at real-time pace, answers the call through its handler
and waits for the spoken answer:

    .venv-pipecat/bin/python bench/framework_pipecat.py ws://127.0.0.1:PORT/v1/realtime TURN.json

``TURN.json`` holds ``instructions``, ``tools`` (Realtime API function tools), ``turn_detection``, ``audio``
(the PCM file), ``result`` (the function's output, JSON) and ``greet``: whether the bot speaks first (an
``LLMRunFrame`` before the microphone, as pipecat's examples start a conversation). It prints one JSON line: the clock
(``time.monotonic``, the same on every process of the machine) when the handler gave the result and when the
answer's first audio reached the output, the call, and every warning and error pipecat logged.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    LLMFullResponseEndFrame,
    LLMRunFrame,
    TTSAudioRawFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import FunctionCallParams
from pipecat.services.openai.realtime import events
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner

RATE = 24000
FRAME = RATE // 50 * 2  # 20 ms of PCM16
TIMEOUT_S = 90


class Output(FrameProcessor):
    """Stands where ``transport.output()`` does: the first audio after the result, and the responses' ends."""

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__()
        self.report = report
        self.ended = asyncio.Event()  # a response has ended (the greeting, when the bot speaks first)
        self.answered = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame) and "result_at" in self.report:
            self.report.setdefault("first_audio_at", time.monotonic())
        elif isinstance(frame, LLMFullResponseEndFrame):
            self.ended.set()
            if "first_audio_at" in self.report:
                self.answered.set()
        await self.push_frame(frame, direction)


async def microphone(worker: PipelineWorker, pcm: bytes, stop: asyncio.Event) -> None:
    """The file's audio, then silence until ``stop``, in 20 ms frames at real-time pace."""
    start, sent = time.monotonic(), 0
    while not stop.is_set():
        chunk = pcm[sent * FRAME : (sent + 1) * FRAME] or bytes(FRAME)
        await worker.queue_frame(InputAudioRawFrame(audio=chunk.ljust(FRAME, b"\0"), sample_rate=RATE, num_channels=1))
        sent += 1
        await asyncio.sleep(max(0.0, start + sent * 0.02 - time.monotonic()))


async def turn(url: str, spec: dict[str, Any], pcm: bytes, report: dict[str, Any]) -> None:
    turn_detection = events.TurnDetection(**{k: v for k, v in spec["turn_detection"].items() if k != "type"})
    properties = events.SessionProperties(
        instructions=spec["instructions"],
        tools=spec["tools"],
        tool_choice="auto",
        output_modalities=["audio"],
        audio=events.AudioConfiguration(input=events.AudioInput(turn_detection=turn_detection)),
    )
    llm = OpenAIRealtimeLLMService(
        api_key="unused", base_url=url, settings=OpenAIRealtimeLLMService.Settings(session_properties=properties)
    )

    async def handler(params: FunctionCallParams) -> None:
        report["call"] = {"name": params.function_name, "arguments": dict(params.arguments)}
        report["result_at"] = time.monotonic()
        await params.result_callback(json.loads(spec["result"]))

    for tool in spec["tools"]:
        llm.register_function(tool["name"], handler)
    user_aggregator, assistant_aggregator = LLMContextAggregatorPair(LLMContext())
    output = Output(report)
    worker = PipelineWorker(
        Pipeline([user_aggregator, llm, output, assistant_aggregator]),
        params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE),
    )

    @worker.event_handler("on_pipeline_error")
    async def on_pipeline_error(worker: PipelineWorker, frame: ErrorFrame) -> None:
        report["problems"].append(f"error frame: {frame.error}")

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    stop = asyncio.Event()
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not llm._api_session_ready:  # the session.update sent at session.created is answered
            if time.monotonic() > deadline or running.done():
                raise TimeoutError("the service's session never became ready")
            await asyncio.sleep(0.01)
        if spec.get("greet"):  # the bot speaks first, as pipecat's examples start: the context goes in with it
            await worker.queue_frames([LLMRunFrame()])
            await asyncio.wait_for(output.ended.wait(), TIMEOUT_S)
        report["ready_at"] = time.monotonic()
        mic = asyncio.create_task(microphone(worker, pcm, stop))
        try:
            await asyncio.wait_for(output.answered.wait(), TIMEOUT_S)
        finally:
            stop.set()
            await mic
        await worker.stop_when_done()
        await asyncio.wait_for(running, 20)
    finally:
        if not running.done():
            await runner.cancel()
            await asyncio.wait_for(running, 20)


def main() -> int:
    report: dict[str, Any] = {"problems": []}
    logger.remove()
    logger.add(lambda message: report["problems"].append(str(message).strip()), level="WARNING")
    try:
        spec = json.loads(Path(sys.argv[2]).read_text())
        asyncio.run(turn(sys.argv[1], spec, Path(spec["audio"]).read_bytes(), report))
    except Exception as exc:  # reported, so the bench shows what happened before it
        report["exception"] = f"{type(exc).__name__}: {exc}"
    sys.stdout.write(json.dumps(report) + "\n")
    return 1 if "exception" in report else 0


if __name__ == "__main__":
    sys.exit(main())
