"""pipecat's ``OpenAIRealtimeLLMService`` against this server, as a pipecat bot runs it: a pipeline of the user
aggregator, the service, the output and the assistant aggregator, the tools in the ``LLMContext``, a registered
function, and ``base_url`` pointing here. Run with the interpreter of .venv-pipecat (``make pipecat-deps``;
pipecat-ai wants protobuf<7, the server protobuf 7) by tests/clients/test_pipecat.py:

    OPENAI_API_KEY=KEY SSL_CERT_FILE=ca.pem .venv-pipecat/bin/python turns.py wss://127.0.0.1:PORT/v1/realtime

A tool turn first (the context's user message asks for the tool, the registered function answers, the
model speaks the result: a typed user turn goes in through the context, since the service sends the messages
of a later ``LLMMessagesAppendFrame`` as system items), then a spoken turn (microphone frames, the server's VAD
ends the turn, the reply is spoken). It prints one JSON line: each response's transcript and audio as the
output saw them, the function's calls, the context pipecat kept, every warning and error pipecat logged and
every error frame.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import numpy as np
from loguru import logger
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    LLMFullResponseEndFrame,
    LLMRunFrame,
    TTSAudioRawFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import FunctionCallParams
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner

MIC_RATE = 16000  # a transport's microphone; the service resamples to the API's 24 kHz
OUT_RATE = 24000
TIMEOUT_S = 20
WEATHER = FunctionSchema(
    name="get_weather",
    description="The weather in a city.",
    properties={"city": {"type": "string", "description": "The city"}},
    required=["city"],
)


class Output(FrameProcessor):
    """Stands where ``transport.output()`` does: each response's transcript and audio, one entry per
    ``LLMFullResponseEndFrame``."""

    def __init__(self) -> None:
        super().__init__()
        self.responses: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._text, self._audio_bytes = "", 0

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSTextFrame):
            self._text += frame.text
        elif isinstance(frame, TTSAudioRawFrame):
            self._audio_bytes += len(frame.audio)
        elif isinstance(frame, LLMFullResponseEndFrame):
            seconds = self._audio_bytes / 2 / OUT_RATE
            self.responses.put_nowait({"text": self._text, "audio_s": round(seconds, 3)})
            self._text, self._audio_bytes = "", 0
        await self.push_frame(frame, direction)


def microphone(seconds: float, amplitude: float) -> list[InputAudioRawFrame]:
    """20 ms frames of a 220 Hz tone (the loopback VAD hears anything loud as speech), or of silence."""
    t = np.arange(int(seconds * MIC_RATE)) / MIC_RATE
    pcm = (amplitude * 32767 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
    step = MIC_RATE // 50
    return [
        InputAudioRawFrame(audio=pcm[i : i + step].tobytes(), sample_rate=MIC_RATE, num_channels=1)
        for i in range(0, len(pcm) - step + 1, step)
    ]


def plain(message: Any) -> Any:
    """A context message as JSON can carry it."""
    return json.loads(json.dumps(message, default=str))


async def turns(base_url: str, report: dict[str, Any]) -> None:
    llm = OpenAIRealtimeLLMService(api_key=os.environ["OPENAI_API_KEY"], base_url=base_url)
    calls: list[dict[str, Any]] = report["calls"]

    async def get_weather(params: FunctionCallParams) -> None:
        calls.append({"name": params.function_name, "arguments": dict(params.arguments)})
        await params.result_callback(f"sunny in {params.arguments['city']}")

    llm.register_function("get_weather", get_weather)
    context = LLMContext([{"role": "user", "content": 'call get_weather {"city": "Paris"}'}], ToolsSchema([WEATHER]))
    user_aggregator, assistant_aggregator = LLMContextAggregatorPair(context)
    output = Output()
    worker = PipelineWorker(
        Pipeline([user_aggregator, llm, output, assistant_aggregator]),
        params=PipelineParams(audio_in_sample_rate=MIC_RATE, audio_out_sample_rate=OUT_RATE),
    )

    @worker.event_handler("on_pipeline_error")
    async def on_pipeline_error(worker: PipelineWorker, frame: ErrorFrame) -> None:
        report["error_frames"].append(str(frame.error))

    @user_aggregator.event_handler("on_user_turn_message_added")
    async def on_user_turn_message_added(aggregator: Any, message: Any) -> None:
        report["user_turns"].append(message.content)

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        # the tool turn: the context's question, the function's call, then the result read back
        await worker.queue_frames([LLMRunFrame()])
        report["tool"] = [await asyncio.wait_for(output.responses.get(), TIMEOUT_S) for _ in range(2)]
        # the spoken turn: one second of "speech", then silence until the server's VAD ends the turn
        await worker.queue_frames(microphone(1.0, 0.3) + microphone(1.0, 0.0))
        report["spoken"] = await asyncio.wait_for(output.responses.get(), TIMEOUT_S)
        await asyncio.sleep(0.5)  # the user message is written into the context once the reply has started
        report["context"] = [plain(message) for message in context.get_messages()]
        await worker.stop_when_done()
        await asyncio.wait_for(running, TIMEOUT_S)
    finally:
        if not running.done():
            await runner.cancel()
            await asyncio.wait_for(running, TIMEOUT_S)


def main() -> int:
    report: dict[str, Any] = {"calls": [], "user_turns": [], "error_frames": [], "log_problems": []}
    logger.remove()
    logger.add(sys.stderr, level="DEBUG")
    logger.add(lambda message: report["log_problems"].append(str(message).strip()), level="WARNING")
    try:
        asyncio.run(turns(sys.argv[1], report))
    except Exception as exc:  # reported, so the test shows what happened before it
        report["exception"] = f"{type(exc).__name__}: {exc}"
    sys.stdout.write(json.dumps(report) + "\n")
    return 1 if "exception" in report else 0


if __name__ == "__main__":
    sys.exit(main())
