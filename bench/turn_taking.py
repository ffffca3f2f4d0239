"""Turn taking: ``semantic_vad`` (Smart Turn v3) against ``server_vad``, in one run.

1. End to end: ``manage.py serve`` with the real pipeline and two sessions, one per mode,
   each utterance going to both in turn (the order alternating). Complete questions: the
   end of the user's speech to the first response audio. Sentences with a pause of 0.8 to
   1.5 s in the middle: how many got a turn cut in the pause (a premature answer).
2. The VAD stage alone (real Silero and Smart Turn, no server), on the same kinds of speech
   rendered anew: per mode and eagerness, premature cuts and how soon a complete question ends.
3. The model: its per-call cost (features + inference on an 8 s window) and how its
   probability for a mid-sentence pause grows as more silence is fed (why it is asked once).
4. The barge-in gate: how much speech Silero hears in backchannels and in interruptions.

Piper speaks the user's side (with its random variation, so each rendering differs).
Run: ``python bench/turn_taking.py`` (``--help``); prints markdown and rewrites the turn-taking
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import websockets  # noqa: E402

from bench.docs import write_section  # noqa: E402
from bench.voice_latency import pct, trimmed  # noqa: E402
from pipelines import audio  # noqa: E402
from pipelines.backends.faster_whisper_stt import WhisperEngine  # noqa: E402
from pipelines.backends.silero import SileroVadModel  # noqa: E402
from pipelines.backends.smart_turn import SmartTurnModel  # noqa: E402
from pipelines.backends.turn_text import EndOfTurnLM  # noqa: E402
from pipelines.config import EngineConfig, SessionSettings, TurnDetection  # noqa: E402
from pipelines.messages import AudioIn, ResponseStarted, SpeechStopped, Utterance  # noqa: E402
from pipelines.stages.base import SessionContext  # noqa: E402
from pipelines.stages.vad import VadStage  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402
from tests.support.speech import pcm16_chunks, silence, spoken, spoken_halves  # noqa: E402

BEGIN, END = "<!-- turn_taking:begin -->", "<!-- turn_taking:end -->"
RATE = 24000
SEND_AHEAD_MS = EngineConfig.semantic_speculate_after_ms  # the silence after which the turn is sent ahead
CHECK_MS = EngineConfig.smart_turn_silence_ms  # the silence after which Smart Turn is asked
COMPLETE = [
    "What is the capital of France?",
    "Tell me a joke.",
    "How are you today?",
    "What time does the store close?",
    "Can you recommend a good book?",
    "How far away is the moon?",
    "What's the weather like tomorrow?",
    "Who wrote Romeo and Juliet?",
    "How do I boil an egg?",
    "Why is the sky blue?",
    "What should I cook for dinner tonight?",
    "Is it going to rain this weekend?",
]
MID_SENTENCE = [
    "I'd like to order a | large pizza with mushrooms.",
    "My phone number is five five five | two three four nine.",
    "Can you tell me about | the history of Rome?",
    "The meeting is on | Tuesday at three.",
    "What I really want to know is | how the engine works.",
    "Could you book a table for | four people at eight?",
    "I think the answer is | probably forty two.",
    "Let me think, the best time would be | around noon.",
    "So what I need from you is | a short summary of the news.",
    "I want to fly from London to | Paris next Friday.",
    "Please remind me to call | my mother tomorrow morning.",
    "I need to buy eggs, milk, | bread and butter.",
]
# Sentences not used when the words' floor (vad.SEMANTIC_TEXT_FLOOR) was chosen: the VAD-stage part reports them apart.
NEW_COMPLETE = [
    "Can you set an alarm for seven?",
    "Where can I park my car?",
    "What's a good name for a cat?",
    "How long should I boil pasta?",
    "Who painted the Mona Lisa?",
    "Could you turn the music down?",
    "What is the tallest mountain in the world?",
    "Do you know any good songs?",
]
NEW_MID_SENTENCE = [
    "My email address is john | at example dot com.",
    "I'm looking for a restaurant that | serves vegan food.",
    "The code for the door is four | seven one two.",
    "Could you send a message to | my brother Tom?",
    "I'd like to cancel my | subscription please.",
    "We need to leave before | the traffic gets bad.",
    "The train to Boston leaves at | half past six.",
    "What I'm trying to say is that | I need more time.",
]
PAUSES_S = (0.8, 1.0, 1.2, 1.5)
MODES = {"server_vad": {"type": "server_vad"}, "semantic_vad": {"type": "semantic_vad", "eagerness": "auto"}}
BACKCHANNELS = ["Mm-hmm.", "Uh-huh.", "Mhm.", "Yeah.", "Okay.", "Right.", "Sure.", "Yes.", "I see."]
INTERRUPTIONS = [
    "Stop, please.",
    "Wait, stop.",
    "Hold on, that is not what I asked.",
    "No, no, I meant the other one.",
    "Sorry, can I ask something else?",
    "Actually, never mind.",
]


# --- 1. end to end ---------------------------------------------------------------------------


class Session:
    """One socket, and how much audio it has sent (the server's audio_end_ms counts from its start)."""

    def __init__(self, ws) -> None:
        self.ws, self.sent = ws, 0  # samples sent

    def position_ms(self, samples: int) -> float:
        """Where, in the session's audio, a point ``samples`` into the next play lies."""
        return (self.sent + samples) * 1000 / RATE

    async def play(self, pieces: list[np.ndarray]) -> tuple[list[dict], list[float]]:
        """Streams ``pieces`` at real-time pace; events until the answer is done; when each piece ended."""
        chunks = [pcm16_chunks(p) for p in pieces]
        ends: list[float] = []
        events: list[dict] = []

        async def send() -> None:
            start, n = time.monotonic(), 0
            for piece in chunks:
                for chunk in piece:
                    n += 1
                    await self.ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
                    await asyncio.sleep(max(0.0, start + n * 0.02 - time.monotonic()))
                ends.append(time.monotonic())

        sender = asyncio.create_task(send())
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    event = json.loads(await asyncio.wait_for(self.ws.recv(), 1.0))
                except TimeoutError:
                    if sender.done() and not _answer_pending(events):
                        break
                    continue
                event["_at"] = time.monotonic()
                events.append(event)
        finally:
            await sender
        self.sent += sum(len(p) for p in pieces)
        return events, ends


def _answer_pending(events: list[dict]) -> bool:
    created = sum(e["type"] == "response.created" for e in events)
    done = sum(e["type"] == "response.done" for e in events)
    stopped = sum(e["type"] == "input_audio_buffer.speech_stopped" for e in events)
    return created > done or stopped > created


async def opened(url: str):
    """A session; no keepalive pings, which an overloaded server answers too late (the socket then closes)."""
    ws = await websockets.connect(url, max_size=None, open_timeout=60, ping_interval=None)
    created = json.loads(await ws.recv())
    assert created["type"] == "session.created", created
    return ws


async def end_to_end(url: str, renderings: int) -> dict[str, dict[str, list]]:
    sessions = {}
    for name, detection in MODES.items():
        ws = await opened(url)
        await ws.send(
            json.dumps(
                {
                    "type": "session.update",
                    "session": {"type": "realtime", "audio": {"input": {"turn_detection": detection}}},
                }
            )
        )
        sessions[name] = Session(ws)
    results: dict[str, dict[str, list]] = {name: {"v2v": [], "stopped": [], "premature": []} for name in MODES}
    try:
        n = 0
        for _ in range(renderings):
            for text in COMPLETE:
                spoken.cache_clear()
                speech = trimmed(text)
                for name in _order(n):
                    # Silence past semantic_vad's longest wait (auto: 4 s), as a live microphone goes on
                    # sending: a question judged unfinished is answered late, and counted so.
                    events, ends = await sessions[name].play([silence(0.3), speech, silence(4.5)])
                    first = next((e["_at"] for e in events if e["type"] == "response.output_audio.delta"), None)
                    stop = next((e["_at"] for e in events if e["type"] == "input_audio_buffer.speech_stopped"), None)
                    if first is not None:
                        results[name]["v2v"].append(first - ends[1])
                    if stop is not None:
                        results[name]["stopped"].append(stop - ends[1])
                n += 1
            for i, text in enumerate(MID_SENTENCE):
                spoken_halves.cache_clear()
                first_half, second_half = spoken_halves(text)
                pause = PAUSES_S[i % len(PAUSES_S)]
                for name in _order(n):
                    session = sessions[name]
                    pause_from = session.position_ms(int(0.3 * RATE) + len(first_half))
                    events, _ = await session.play(
                        [silence(0.3), first_half, silence(pause), second_half, silence(2.0)]
                    )
                    cut = any(
                        e["type"] == "input_audio_buffer.speech_stopped"
                        and pause_from - 100 <= e["audio_end_ms"] < pause_from + pause * 1000
                        for e in events
                    )
                    results[name]["premature"].append(cut)
                    if cut and name != "server_vad":
                        print(f"{name} answered in the pause: {text!r} ({pause} s)", file=sys.stderr, flush=True)
                n += 1
    finally:
        for session in sessions.values():
            await session.ws.close()
    return results


def _order(n: int) -> list[str]:
    return list(MODES) if n % 2 == 0 else list(reversed(MODES))


# --- 2. the VAD stage alone ---------------------------------------------------------------------


def stage_decisions(
    vad: SileroVadModel,
    turn: SmartTurnModel,
    words: tuple[WhisperEngine, EndOfTurnLM],
    renderings: int,
    check_ms: list[int],
    complete: list[str],
    mid_sentence: list[str],
    costs: dict[str, list[float]],
) -> dict[str, dict[str, list]]:
    """Per mode: premature cuts in mid-sentence pauses; for complete questions, the turn's end after the speech's.

    "+ words": the default pipeline, which sends the turn ahead (``semantic_speculate_after_ms``); its transcript (real
    Whisper) is read by the text turn model. Its STT and reading costs go to ``costs``, not into positions."""
    modes: dict[str, tuple[TurnDetection, int, bool]] = {
        "server_vad": (TurnDetection(type="server_vad"), CHECK_MS, False)
    }
    for eagerness in ("high", "auto", "low"):
        for read in (False, True):
            name = f"semantic_vad {eagerness}{' + words' if read else ''}"
            modes[name] = (TurnDetection(type="semantic_vad", eagerness=eagerness), CHECK_MS, read)
    for ms in check_ms:
        for read in (False, True):
            name = f"semantic_vad auto{' + words' if read else ''}, asked at {ms} ms"
            modes[name] = (TurnDetection(type="semantic_vad"), ms, read)
    out: dict[str, dict[str, list]] = {name: {"premature": [], "end_after_ms": []} for name in modes}
    for _ in range(renderings):
        for text in complete:
            spoken.cache_clear()
            speech = trimmed(text)
            for name, (detection, ms, read) in modes.items():
                ends = _stopped(
                    vad, turn, words if read else None, detection, ms, [silence(0.3), speech, silence(9.0)], costs
                )
                speech_end = 300 + len(speech) * 1000 // RATE
                out[name]["end_after_ms"] += [ends[0][1] - speech_end] if ends else []
        for i, text in enumerate(mid_sentence):
            spoken_halves.cache_clear()
            first, second = spoken_halves(text)
            pause = PAUSES_S[i % len(PAUSES_S)]
            pause_from = 300 + len(first) * 1000 // RATE
            for name, (detection, ms, read) in modes.items():
                ends = _stopped(
                    vad,
                    turn,
                    words if read else None,
                    detection,
                    ms,
                    [silence(0.3), first, silence(pause), second, silence(1.0)],
                    costs,
                )
                out[name]["premature"].append(any(pause_from - 100 <= at < pause_from + pause * 1000 for _, at in ends))
    return out


def _stopped(
    vad,
    turn,
    words: tuple[WhisperEngine, EndOfTurnLM] | None,
    detection: TurnDetection,
    check_ms: int,
    pieces: list[np.ndarray],
    costs: dict[str, list[float]],
) -> list[tuple[int, int]]:
    """(audio_end_ms, audio position when the turn was cut) of every turn the stage ends."""
    context = SessionContext()
    context.settings = replace(SessionSettings(), turn_detection=detection)
    stage = VadStage(
        context,
        vad,
        turn_model=turn,
        check_after_ms=check_ms,
        partial_every_ms=0,
        speculate_after_ms=SEND_AHEAD_MS if words else 0,
        min_interrupt_ms=0,
        text_model=_Timed(words[1], costs["words"]) if words else None,
    )
    stage.setup()
    data = audio.encode(np.concatenate(pieces), audio.PCM)
    ends, step = [], 960  # 20 ms chunks
    for n, at in enumerate(range(0, len(data), step), start=1):
        for msg in stage.process(AudioIn(generation=0, data=data[at : at + step], audio_format=audio.PCM)):
            if isinstance(msg, SpeechStopped):
                ends.append((msg.audio_end_ms, n * 20))
            elif isinstance(msg, Utterance) and msg.turn and words:  # what the STT stage does with a turn sent ahead
                started = time.perf_counter()
                context.note_words(msg.turn, words[0].transcribe(np.frombuffer(msg.samples, np.float32)))
                costs["stt"].append((time.perf_counter() - started) * 1000)
    return ends


class _Timed:
    """The text turn model, timing each reading."""

    def __init__(self, reader: EndOfTurnLM, costs: list[float]) -> None:
        self.reader, self.costs = reader, costs

    def finished_probability(self, transcript: str) -> float:
        started = time.perf_counter()
        try:
            return self.reader.finished_probability(transcript)
        finally:
            self.costs.append((time.perf_counter() - started) * 1000)


# --- 3. the model, 4. the barge-in gate ---------------------------------------------------------------


def model_cost(turn: SmartTurnModel, calls: int) -> list[float]:
    rng = np.random.default_rng(0)
    speech = audio.resample(spoken(COMPLETE[0], steady=False), RATE, audio.PIPELINE_RATE)
    costs = []
    for n in range(calls):
        x = np.concatenate([rng.normal(0, 0.01, 16000 * (n % 8)).astype(np.float32), speech])
        started = time.perf_counter()
        turn.probability(x)
        costs.append((time.perf_counter() - started) * 1000)
    return costs


def drift(turn: SmartTurnModel, renderings: int, silences_ms=(100, 200, 400, 800, 1200)) -> dict[int, list[float]]:
    """The model's probability for the first half of each mid-sentence utterance, as the silence after it grows."""
    out: dict[int, list[float]] = {ms: [] for ms in silences_ms}
    for _ in range(renderings):
        for text in MID_SENTENCE:
            spoken_halves.cache_clear()
            first = audio.resample(spoken_halves(text)[0], RATE, audio.PIPELINE_RATE)
            for ms in silences_ms:
                out[ms].append(
                    turn.probability(np.concatenate([np.zeros(4800, np.float32), first, np.zeros(ms * 16, np.float32)]))
                )
    return out


def heard_ms(vad: SileroVadModel, text: str) -> int:
    """Speech the barge-in gate counts for ``text`` said while the assistant speaks (0: never speech).

    Reads the stage's own count as it goes, with a gate too high to open."""
    context = SessionContext()
    context.admit(
        ResponseStarted(
            generation=0,
            response_id="r",
            item_id="i",
            output_modalities=("audio",),
            output_format=audio.PCM,
            voice="alloy",
            out_of_band=False,
        )
    )
    stage = VadStage(context, vad, partial_every_ms=0, speculate_after_ms=0, min_interrupt_ms=10_000)
    stage.setup()
    data = audio.encode(np.concatenate([silence(0.3), spoken(text, steady=False), silence(1.0)]), audio.PCM)
    best = 0
    for at in range(0, len(data), 960):
        list(stage.process(AudioIn(generation=0, data=data[at : at + 960], audio_format=audio.PCM)))
        best = max(best, stage._heard_ms if stage._gated else 0)
    return best


# --- report ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renderings", type=int, default=1, help="renderings of each utterance end to end")
    parser.add_argument(
        "--stage-renderings", type=int, default=3, help="renderings of each utterance for the VAD stage"
    )
    parser.add_argument(
        "--check-ms",
        type=int,
        nargs="*",
        default=[],
        metavar="MS",
        help="also the VAD stage with Smart Turn asked after these silences (auto, with and without words)",
    )
    parser.add_argument("--calls", type=int, default=200, help="model calls timed")
    parser.add_argument("--limit", type=int, default=0, help="only the first N utterances of each kind (a quick check)")
    parser.add_argument("--no-server", action="store_true", help="skip the end-to-end part")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--env", default="", metavar="'ENV=VALUE ...'", help="the end-to-end server's settings beside the defaults"
    )
    args = parser.parse_args()
    if args.limit:
        del COMPLETE[args.limit :], MID_SENTENCE[args.limit :]
    load_before = os.getloadavg()[0]
    e2e = {}
    if not args.no_server:
        server = LiveServer(
            Path(tempfile.mkdtemp(prefix="s2s-turn-bench-")),
            env={
                "S2S_PIPELINE": "real",
                "S2S_POOL_SIZE": "2",
                "S2S_LOG_LEVEL": "warning",
                **dict(item.split("=", 1) for item in shlex.split(args.env)),
            },
        )
        server.start(ready_timeout=900)
        try:
            e2e = asyncio.run(end_to_end(server.ws, args.renderings))
        finally:
            server.stop()
    vad, turn = SileroVadModel(), SmartTurnModel()
    words = (WhisperEngine(), EndOfTurnLM())
    word_costs: dict[str, list[float]] = {"stt": [], "words": []}
    stage = stage_decisions(vad, turn, words, args.stage_renderings, args.check_ms, COMPLETE, MID_SENTENCE, word_costs)
    held_out = stage_decisions(
        vad, turn, words, args.stage_renderings, args.check_ms, NEW_COMPLETE, NEW_MID_SENTENCE, word_costs
    )
    costs = model_cost(turn, args.calls)
    probs = drift(turn, args.stage_renderings)
    gate = {text: heard_ms(vad, text) for text in BACKCHANNELS + INTERRUPTIONS}
    load_after = os.getloadavg()[0]
    text = "\n".join(report(args, e2e, stage, held_out, costs, word_costs, probs, gate, load_before, load_after))
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


def report(args, e2e, stage, held_out, costs, word_costs, probs, gate, load_before, load_after) -> list[str]:
    command = " ".join(["python bench/turn_taking.py", *sys.argv[1:]])
    lines = [
        BEGIN,
        "## Turn taking: semantic_vad (Smart Turn v3) and server_vad",
        "",
        f"`{command}` on {dt.date.today().isoformat()}, {psutil.cpu_count()} CPUs "
        f"({platform.processor() or platform.machine()}), shared with other work: load average {load_before:.1f} "
        f"before / {load_after:.1f} after. Piper speaks the user (random variation on, a new rendering per pass); "
        "a mid-sentence pause is one synthesis cut at a word boundary, with 0.8, 1.0, 1.2 or 1.5 s of silence.",
        "",
    ]
    if e2e:
        lines += [
            "End to end (real pipeline, one session per mode, each utterance to both in turn; `server_vad` at its "
            "defaults, 500 ms; `semantic_vad` eagerness auto). First audio and `speech_stopped` are timed by the "
            "client from the last speech chunk it sent (4.5 s of silence follow each question); a premature answer is a "  # noqa: E501
            "turn cut in the pause." + (f" The server's settings besides the defaults: `{args.env}`." * bool(args.env)),
            "",
            "| mode | questions answered | first audio p50 | first audio p90 | speech_stopped p50 | answered after 1.5 s | premature answers |",  # noqa: E501
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, r in e2e.items():
            lines.append(
                f"| {name} | {len(r['v2v'])} | {pct(r['v2v'], 50) * 1000:.0f} ms | {pct(r['v2v'], 90) * 1000:.0f} ms | "
                f"{pct(r['stopped'], 50) * 1000:.0f} ms | {sum(v > 1.5 for v in r['v2v'])} | "
                f"{sum(r['premature'])} of {len(r['premature'])} |"
            )
    for title, results in (
        ("the sentences above", stage),
        (
            "8 complete and 8 paused sentences not used when the words' "
            "floor was chosen (`NEW_COMPLETE`, `NEW_MID_SENTENCE`)",
            held_out,
        ),
    ):
        lines += [
            "",
            f'The VAD stage alone, {title} (real Silero VAD and Smart Turn; "+ words": the turn sent ahead at '
            f"{SEND_AHEAD_MS} ms of silence is transcribed by Whisper and read by the text turn model; "
            f"{args.stage_renderings} renderings of each utterance; positions in audio time, so the models' costs "
            "are not in them):",
            "",
            "| mode | complete questions: turn ended after the speech, p50 | p90 | waited over 1 s | premature cuts in mid-sentence pauses |",  # noqa: E501
            "|---|---:|---:|---:|---:|",
        ]
        for name, r in results.items():
            ends = r["end_after_ms"]
            lines.append(
                f"| {name} | {pct(ends, 50):.0f} ms | {pct(ends, 90):.0f} ms | {sum(e > 1000 for e in ends)} of {len(ends)} | "  # noqa: E501
                f"{sum(r['premature'])} of {len(r['premature'])} |"
            )
    lines += [
        "",
        f"Reading the words, per pause: Whisper on the turn sent ahead p50 {pct(word_costs['stt'], 50):.0f} ms "
        f"(p99 {pct(word_costs['stt'], 99):.0f} ms, {len(word_costs['stt'])} calls; the STT stage does this anyway "
        f"for the turn sent ahead), the text turn model p50 {pct(word_costs['words'], 50):.0f} ms "
        f"(p99 {pct(word_costs['words'], 99):.0f} ms, {len(word_costs['words'])} calls).",
    ]
    lines += [
        "",
        f"Smart Turn per call (Whisper features + ONNX inference on an 8 s window, one thread, {len(costs)} calls): "
        f"p50 {pct(costs, 50):.0f} ms, p99 {pct(costs, 99):.0f} ms.",
        "",
        "Its probability that a mid-sentence pause is the end of the turn, as more silence follows the first half "
        f"(why it is asked once per pause, at {CHECK_MS} ms, and never again as the silence grows):",
        "",
        "| silence after the first half | median | judged finished (>= 0.5) | sure of it (>= 0.9) |",
        "|---:|---:|---:|---:|",
    ]
    for ms, values in probs.items():
        lines.append(
            f"| {ms} ms | {pct(values, 50):.2f} | {sum(v >= 0.5 for v in values)} of {len(values)} | "
            f"{sum(v >= 0.9 for v in values)} of {len(values)} |"
        )
    lines += [
        "",
        "Speech the barge-in gate hears while the assistant speaks (Silero frames of speech, pauses under "
        "500 ms bridged); `S2S_MIN_INTERRUPT_MS` must lie above the backchannels and below the interruptions:",
        "",
        "| said | kind | speech heard |",
        "|---|---|---:|",
    ]
    lines += [
        f"| {text} | {'backchannel' if text in BACKCHANNELS else 'interruption'} | {ms} ms |"
        for text, ms in gate.items()
    ]
    return lines + [END]


if __name__ == "__main__":
    main()
