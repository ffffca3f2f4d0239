"""The ``loopback`` profile: FAKE engines for protocol and pool tests and transport benchmarks.

Nothing here is a model. The fake VAD calls loud frames speech; the fake STT
describes the turn's length; the fake LM answers with a fixed rule
("You said: ..."), calls a tool when told to ("call get_weather {"city": "Paris"}",
or any offered tool when the tool choice requires one) and reads a tool result
back ("The tool said: ..."); the fake TTS plays the user's last turn back (an echo), or
a tone as long as the text when there is nothing to echo.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from pipelines import audio
from pipelines.interfaces import Cancel
from pipelines.messages import FunctionTool, ToolChoice
from pipelines.stages.base import SessionContext
from pipelines.tool_calls import CALL_CLOSE, call_head
from pipelines.translation import TARGETS, Heard, TranslationEngines, Translations


class _Memory:
    """The last user turn of one unit, shared by that unit's fake STT and fake TTS.

    It remembers the session (generation) the turn came from: a turn of a session
    that has ended is never echoed to the next one.
    """

    def __init__(self, context: SessionContext | None = None) -> None:
        self.context = context
        self.last_turn: np.ndarray | None = None
        self._generation: int | None = None
        self._lock = threading.Lock()

    def _current(self) -> int | None:
        return self.context.generation if self.context is not None else None

    def remember(self, turn: np.ndarray) -> None:
        with self._lock:
            self.last_turn, self._generation = turn, self._current()

    def take(self) -> np.ndarray | None:
        with self._lock:
            turn, self.last_turn = self.last_turn, None
            return turn if self._generation == self._current() else None


class FakeEnergyVadState:
    def prob(self, frame: np.ndarray) -> float:
        rms = float(np.sqrt(np.mean(np.square(frame)))) if len(frame) else 0.0
        return min(1.0, rms * 20.0)  # threshold 0.5 = RMS 0.025, about -32 dBFS

    def reset(self) -> None:
        pass


class FakeEnergyVad:
    def new_state(self) -> FakeEnergyVadState:
        return FakeEnergyVadState()


class FakeTranscriber:
    def __init__(self, memory: _Memory) -> None:
        self.memory = memory

    def transcribe(self, audio_16k: np.ndarray, language: str | None = None, prompt: str | None = None) -> str:
        self.memory.remember(audio_16k)
        return f"audio of {len(audio_16k) / audio.PIPELINE_RATE:.2f} seconds"

    def transcribe_words(
        self, audio_16k: np.ndarray, language: str | None = None, prompt: str | None = None
    ) -> tuple[tuple[str, float], ...]:
        """The fake transcript, every word certain (log probability 0)."""
        return tuple((" " + word, 0.0) for word in self.transcribe(audio_16k, language, prompt).split())


class FakeStream:
    def __init__(self, words: list[str], input_tokens: int, cancel: Cancel | None, delay_s: float) -> None:
        self.words, self.input_tokens, self.output_tokens = words, input_tokens, 0
        self.cancel, self.delay_s = cancel, delay_s

    def __iter__(self) -> Iterator[str]:
        for i, word in enumerate(self.words):
            if self.cancel is not None and self.cancel.is_set():
                return
            if self.delay_s:
                time.sleep(self.delay_s)
            self.output_tokens += 1
            yield word if i == 0 else " " + word


class FakeLanguageModel:
    """Replies "You said: <last user text>." one word at a time; a "slow" user text slows it down.

    With tools: "call NAME ARGS" (ARGS optional JSON) makes it call NAME ("call A {}; call B {}": A and B, in
    parallel, or A alone without ``parallel_tool_calls``), and a
    ``required`` or named tool choice makes it call that tool (or the first) with
    ``{}``; after a tool result (with the choice ``auto``) it answers "The tool said: <result>.". It checks
    nothing against the schemas: it is a fake.
    """

    context_length = 4096

    def count_tokens(self, messages: list[dict[str, Any]], tools: Sequence[FunctionTool] = ()) -> int:
        return sum(len(str(m.get("content", "")).split()) + 4 for m in messages) + 20 * len(tools)

    def generate_stream(
        self,
        messages: list[dict[str, Any]],
        max_new_tokens: int,
        temperature: float,
        cancel: Cancel | None = None,
        tools: Sequence[FunctionTool] = (),
        tool_choice: ToolChoice = ToolChoice(),
        parallel_tool_calls: bool = True,
        **_options: Any,
    ) -> FakeStream:
        last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        if last_user.startswith("fail"):
            raise RuntimeError("the fake language model was asked to fail")
        words = f"You said: {last_user}.".split()
        answered = bool(messages) and messages[-1]["role"] == "tool"  # a result to read, not a call to repeat
        requests = last_user.split("; ") if parallel_tool_calls else last_user.split("; ")[:1]
        calls = (
            []
            if answered and tool_choice.mode == "auto"
            else [call for text in requests if (call := self._call(text, tools, tool_choice)) is not None]
        )
        call = "\n".join(calls) or None
        if call is not None:
            words = call.split(" ")
        elif answered:
            words = f"The tool said: {messages[-1]['content']}.".split()
        delay = 0.0
        if last_user.startswith("slow"):  # long, slow answers to test cancelling mid-response: about 4 s for the
            words = words + ["and so on."] * 200  # default cap of 96 tokens
            delay = 0.04
        return FakeStream(words[:max_new_tokens], self.count_tokens(messages, tools), cancel, delay)

    @staticmethod
    def _call(text: str, tools: Sequence[FunctionTool], choice: ToolChoice) -> str | None:
        """The call text the fake writes, in the real format, or None."""
        if not tools or choice.mode == "none":
            return None
        name, _, arguments = text.removeprefix("call ").partition(" ") if text.startswith("call ") else ("", "", "")
        if choice.mode == "function":
            name = choice.name
        elif choice.mode == "required" and name not in {t.name for t in tools}:
            name = tools[0].name
        if name not in {t.name for t in tools}:
            return None
        return call_head(name) + (arguments.strip() or "{}") + "}\n" + CALL_CLOSE


class FakeSynthesizer:
    """Echoes the unit's last user turn once; otherwise a 440 Hz tone, 60 ms per word (divided by the speed)."""

    sample_rate = audio.PIPELINE_RATE

    def __init__(self, memory: _Memory) -> None:
        self.memory = memory

    def synthesize(self, text: str, cancel: Cancel | None = None, speed: float = 1.0) -> Iterator[np.ndarray]:
        echo = self.memory.take()
        if echo is not None and len(echo):
            yield echo
            return
        n = int(self.sample_rate * 0.06 * max(1, len(text.split())) / speed)
        t = np.arange(n, dtype=np.float32) / self.sample_rate
        yield (0.2 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)


def loopback_engines(
    context: SessionContext | None = None,
) -> tuple[FakeEnergyVad, FakeTranscriber, FakeLanguageModel, FakeSynthesizer]:
    """Fresh fakes for one unit (the echo memory is per unit and knows the unit's current session)."""
    memory = _Memory(context)
    return FakeEnergyVad(), FakeTranscriber(memory), FakeLanguageModel(), FakeSynthesizer(memory)


class FakeTranslator:
    """Says how long the phrase was, "in Spanish" (the source) and in English (the translation)."""

    def translate(self, audio_16k: np.ndarray, with_source: bool = False, language: str | None = None) -> Heard:
        seconds = len(audio_16k) / audio.PIPELINE_RATE
        source = f"audio de {seconds:.2f} segundos" if with_source else ""
        return Heard("es", source, f"audio of {seconds:.2f} seconds")

    def hear(self, audio_16k: np.ndarray, language: str | None = None) -> Heard:
        return Heard("es", f"audio de {len(audio_16k) / audio.PIPELINE_RATE:.2f} segundos", "")


def loopback_translations() -> Translations:
    """FAKE translation engines: the energy VAD, :class:`FakeTranslator`, a tone for the voice."""
    return Translations(
        lambda: TranslationEngines(FakeEnergyVad(), FakeTranslator(), FakeSynthesizer(_Memory()), targets=TARGETS)
    )
