"""Reading ahead: the words of a turn still being spoken evaluated into the LM's cache, so that when the turn
ends only its last words are left to read (``UserWordsSoFar``, ``LmStage._read_ahead``, ``LlamaCppLM.prefill``)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pipelines.backends._llama_adapter import held_tokens
from pipelines.config import SessionSettings
from pipelines.loopback import FakeLanguageModel
from pipelines.messages import HistoryItem, UserTurn, UserWordsSoFar
from pipelines.stages.base import SessionContext
from pipelines.stages.lm import LmStage

SYSTEM = {"role": "system", "content": "You are a helpful voice assistant. Answer briefly."}


class ReadingFakeLM(FakeLanguageModel):
    """The FAKE model, keeping the prompts it was asked to read ahead, and the prefix each came with."""

    def __init__(self) -> None:
        self.read: list[tuple[list[dict], object]] = []

    def prefill(self, messages, tools=(), prefix=None, stop=None) -> int:
        self.read.append((messages, prefix))
        return len(messages)

    def new_prefix_cache(self) -> object:
        return object()


def stage(model: FakeLanguageModel, **settings) -> LmStage:
    context = SessionContext()
    context.reset(1)
    context.settings = SessionSettings(instructions="Answer.", **settings)
    lm = LmStage(context, model)
    lm.history["item_0"] = HistoryItem("item_0", "user", "hello")
    return lm


def test_the_words_so_far_are_read_with_the_answers_prompt_and_leave_the_history_as_it_was():
    model = ReadingFakeLM()
    lm = stage(model)
    before = dict(lm.history)
    tokens_before = lm.history_tokens
    out = list(lm.process(UserWordsSoFar(generation=1, item_id="item_1", text="What color is the")))
    assert out == []  # nothing for the TTS
    ((messages, prefix),) = model.read
    assert messages[0] == {"role": "system", "content": "Answer."}
    assert messages[-1] == {"role": "user", "content": "What color is the"}
    assert prefix is lm._prefix
    assert lm.history == before and lm.history_tokens == tokens_before
    # The turn itself, when it ends, goes in as always.
    done = list(
        lm.process(UserTurn(generation=1, item_id="item_1", text="What color is the sky?", create_response=False))
    )
    assert done == [] and lm.history["item_1"].text == "What color is the sky?"


def test_nothing_is_read_ahead_without_an_answer_to_come_or_an_engine_that_keeps_a_cache():
    from pipelines.config import TurnDetection

    model = ReadingFakeLM()
    lm = stage(model, turn_detection=TurnDetection(create_response=False))
    list(lm.process(UserWordsSoFar(generation=1, item_id="item_1", text="What color")))
    assert model.read == []
    plain = stage(FakeLanguageModel())  # no prefill, no cache: the message is taken and dropped
    assert list(plain.process(UserWordsSoFar(generation=1, item_id="item_1", text="What color"))) == []


def test_new_instructions_are_read_when_they_come_not_when_the_next_turn_ends():
    from pipelines.messages import ReadAhead

    model = ReadingFakeLM()
    lm = stage(model)
    lm.context.settings = SessionSettings(instructions="Speak like a pirate.")
    assert list(lm.process(ReadAhead(generation=1))) == []
    ((messages, prefix),) = model.read
    assert messages == [{"role": "system", "content": "Speak like a pirate."}, {"role": "user", "content": "hello"}]
    assert prefix is lm._prefix


def test_a_function_s_result_is_read_before_its_response_is_asked_for_unless_a_message_waits():
    from pipelines.messages import AddItem, FunctionCallItem, FunctionCallOutputItem

    model = ReadingFakeLM()
    lm = stage(model)
    call = FunctionCallItem("item_1", "call_1", "get_weather", '{"city": "Paris"}')
    list(lm.process(AddItem(generation=1, item=call)))
    assert model.read == []  # a call the client sends is kept, not read: its result comes next
    result = FunctionCallOutputItem("item_2", "call_1", '{"temperature_c": 21}')
    list(lm.process(AddItem(generation=1, item=result)))
    ((messages, _),) = model.read
    assert messages[-1]["role"] == "tool" and "21" in messages[-1]["content"]
    lm.waiting = lambda: True  # the response.create is already there: it reads the prompt itself, at once
    list(lm.process(AddItem(generation=1, item=FunctionCallOutputItem("item_3", "call_1", "{}"))))
    assert len(model.read) == 1


def test_reading_ahead_stops_once_a_message_waits_for_the_lm_thread():
    from pipelines.messages import ReadAhead

    stops: list[bool] = []

    class StoppingFakeLM(ReadingFakeLM):
        """FAKE: reads until ``stop()`` says so, noting each answer."""

        def prefill(self, messages, tools=(), prefix=None, stop=None) -> int:
            for _ in range(3):
                stops.append(stop())
            return 0

    lm = stage(StoppingFakeLM())
    waiting = iter([False, False, True])
    lm.waiting = lambda: next(waiting, True)
    list(lm.process(ReadAhead(generation=1)))
    assert stops == [False, True, True]  # the check before reading, then one chunk, then the message


def test_a_turn_that_called_a_function_is_read_while_the_client_runs_it():
    from pipelines.config import FunctionTool
    from pipelines.messages import ResponseEnd, ResponseRequest

    model = ReadingFakeLM()
    tool = FunctionTool("get_weather", "The weather in a city.")
    lm = stage(model, tools=(tool,))
    lm.history["item_0"] = HistoryItem("item_0", "user", "call get_weather")
    request = ResponseRequest.from_settings(lm.context.settings, 1)
    out = list(lm.process(request))
    assert isinstance(out[-1], ResponseEnd) and out[-1].status == "completed"
    ((messages, _),) = model.read
    assert "get_weather" in str(messages[-1])  # the call is in the prompt read, ready for its result


@pytest.fixture(scope="module")
def smol():
    from pipelines.backends.llama_cpp_lm import LlamaCppLM
    from pipelines.backends.transformers_lm import default_model

    folder, name = default_model()
    return LlamaCppLM(str(Path(folder) / name), threads=1, n_ctx=1024)


def test_llama_cpp_reads_ahead_into_the_conversations_context_and_the_answer_reads_only_the_rest(smol):
    """Real llama.cpp (SmolLM2-135M): after reading "What is the capital of", the answer to the whole
    question takes every token of that prompt from the cache but the template's end (the context is new:
    without reading ahead nothing would be cached)."""
    so_far = [SYSTEM, {"role": "user", "content": "What is the capital of"}]
    final = [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]
    prefix = smol.new_prefix_cache()
    read = smol.prefill(so_far, prefix=prefix)
    assert read == len(smol.encode_chat(so_far))
    stream = smol.generate_stream(final, 8, 0.0, prefix=prefix)
    assert "".join(stream)
    ahead = smol.encode_chat(so_far)
    common = next(i for i, (a, b) in enumerate(zip(ahead, smol.encode_chat(final))) if a != b)
    assert stream.cached_tokens == common
    assert common >= len(ahead) - 8  # all but the template's end of the turn ("<|im_end|>", the answer's header)
    assert smol.prefill(so_far, prefix=None) == 0


def test_with_tools_the_turns_own_context_and_the_answer_after_results_are_read_ahead():
    """Real llama.cpp (SmolLM2-135M, two contexts per conversation as the server gives): a later turn whose
    call has its result; ``auto`` decides on the turn alone (its own context) and, after results, answers
    from it with ``ANSWER_FROM_RESULTS``: the turn is read there before the response is asked for, and the
    whole conversation in the other context for the next turn."""
    from pipelines.backends.llama_cpp_lm import ANSWER_FROM_RESULTS, LlamaCppLM
    from pipelines.backends.transformers_lm import default_model
    from pipelines.config import FunctionTool

    folder, name = default_model()
    smol = LlamaCppLM(str(Path(folder) / name), threads=1, n_ctx=1024, max_contexts=2)

    weather = FunctionTool("get_weather", "The weather in a city.", {"type": "object", "properties": {}})
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {}}}
    conversation = [
        SYSTEM,
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi, how can I help?"},
        {"role": "user", "content": "What is the weather?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny"},
    ]
    turn = [SYSTEM, *conversation[3:]]
    prefix = smol.new_prefix_cache()
    whole = smol.encode_chat(conversation, [weather])
    assert smol.prefill(conversation, [weather], prefix) == len(whole) + len(smol.encode_chat(turn, [weather]))
    assert held_tokens(prefix.turn.context) == smol.encode_chat(turn, [weather])  # decides, then answers
    assert held_tokens(prefix.context) == whole  # for the next turn
    # A first turn: one context decides and answers, the answer's note read ahead too.
    first = smol.new_prefix_cache()
    smol.prefill(turn, [weather], first)
    assert held_tokens(first.context) == smol.encode_chat([*turn, ANSWER_FROM_RESULTS], [weather])
    # While the client runs the function there is no result yet: the conversation as it is.
    waiting = smol.new_prefix_cache()
    smol.prefill(conversation[:-1], [weather], waiting)
    assert held_tokens(waiting.context) == smol.encode_chat(conversation[:-1], [weather])


class SaysSoFar:
    """A FAKE transcriber: whatever it is set to say."""

    def __init__(self) -> None:
        self.text = ""

    def transcribe(self, audio, language=None, prompt=None) -> str:
        return self.text


def test_a_partial_transcript_sends_its_words_but_the_newest_to_the_lm():
    from pipelines.messages import PartialUtterance
    from pipelines.stages.stt import SttStage

    context = SessionContext()
    context.reset(1)
    transcriber = SaysSoFar()
    stt = SttStage(context, transcriber)
    partial = PartialUtterance(generation=1, item_id="item_1", samples=bytes(6400))

    transcriber.text = "What"
    assert not [m for m in stt.process(partial) if isinstance(m, UserWordsSoFar)]  # one word: maybe cut off
    transcriber.text = "What color is the sk"
    (ahead,) = [m for m in stt.process(partial) if isinstance(m, UserWordsSoFar)]
    assert (ahead.item_id, ahead.text, ahead.generation) == ("item_1", "What color is the", 1)


def test_reading_ahead_takes_chunks_of_about_its_time_growing_at_most_twofold():
    from pipelines.backends.llama_cpp_lm import READ_AHEAD_S, READ_AHEAD_TOKENS, next_chunk

    assert next_chunk(4, READ_AHEAD_S / 10, 256) == 8  # quick: twice the last, no more
    assert next_chunk(64, READ_AHEAD_S / 2, 256) == 128
    assert next_chunk(128, READ_AHEAD_S / 10, 256) == 256  # never past the batch
    assert next_chunk(32, READ_AHEAD_S * 2, 256) == 16  # slow (a busy machine): smaller
    assert next_chunk(8, READ_AHEAD_S * 100, 256) == READ_AHEAD_TOKENS


def test_reading_ahead_stops_a_few_tokens_after_the_turn_ends_and_keeps_what_it_read(smol):
    from pipelines.backends.llama_cpp_lm import READ_AHEAD_TOKENS

    so_far = [SYSTEM, {"role": "user", "content": "Tell me about the history of the city of Rome"}]
    asked: list[int] = []
    ids = smol.encode_chat(so_far)
    (context,) = smol.contexts.free
    held = held_tokens(context)  # an earlier test's prompt: its system part is shared
    cached = next((i for i, (a, b) in enumerate(zip(held, ids)) if a != b), min(len(held), len(ids)))
    prefix = smol.new_prefix_cache()
    reader = threading.current_thread()  # the turn is seen to end between two chunks (the reader looks then)

    def stop() -> bool:
        return threading.current_thread() is reader and (asked.append(1) or len(asked) > 2)

    read = smol.prefill(so_far, prefix=prefix, stop=stop)
    # Two chunks, then the turn ended: the first of READ_AHEAD_TOKENS, the second at most twice that.
    assert 2 * READ_AHEAD_TOKENS <= read <= 3 * READ_AHEAD_TOKENS
    assert cached + read < len(ids)
    assert smol.prefill(so_far, prefix=prefix) == len(ids) - cached - read  # the rest, not all again


def test_a_chunk_read_ahead_stops_part_way_when_told_and_the_context_keeps_what_it_held_before_it(smol, monkeypatch):
    """Real llama.cpp: ``interruptible`` ends an evaluation between its steps once ``stop()`` says so (looked
    at by its own thread while llama.cpp computes); the context then holds the tokens it held before the
    stopped batch, and reads on from there to the logits of a context that read the same batches unstopped.
    A batch that gives way stops when a step due sooner waits for a core; one that does not is read whole."""
    import numpy as np

    from pipelines import cpu
    from pipelines.backends._llama_abort import interruptible

    ids = smol.tokens("The quick brown fox jumps over the lazy dog. " * 60)[:400]
    (context,) = [smol.contexts.acquire(None)]
    try:
        context.reset()
        context.eval(ids[:100])
        with interruptible(context, lambda: True) as evaluate:
            assert not evaluate(ids[100:356], False)  # stopped at once: the watcher looks within milliseconds
        assert context.n_tokens == 100
        with interruptible(context, lambda: False) as evaluate:
            assert evaluate(ids[100:300], True)  # nothing waits for a core: read whole
        context.eval(ids[300:301])
        logits = np.ctypeslib.as_array(llama_logits(context), shape=(context.n_vocab(),)).copy()
        monkeypatch.setattr(cpu.current(), "wanted_before", lambda due: True)  # a step due sooner always waits
        with interruptible(context, lambda: False) as evaluate:
            assert not evaluate(ids[301:400], True)  # a long chunk gives way
            assert context.n_tokens == 301
            assert evaluate(ids[301:305], False)  # a short one does not
        context.reset()  # the same batches, none stopped
        for start, end in ((0, 100), (100, 300), (300, 301)):
            context.eval(ids[start:end])
        fresh = np.ctypeslib.as_array(llama_logits(context), shape=(context.n_vocab(),))
        assert np.array_equal(logits, fresh)
    finally:
        smol.contexts.release(context, None)


def llama_logits(context):
    import llama_cpp

    return llama_cpp.llama_get_logits_ith(context.ctx, -1)


def test_the_vad_marks_the_turn_ending_when_it_speculates_and_clears_it_when_speech_goes_on():
    import numpy as np

    from pipelines import audio
    from pipelines.loopback import FakeEnergyVad
    from pipelines.messages import AudioIn
    from pipelines.stages.vad import VadStage
    from tests.support.speech import silence, tone

    context = SessionContext()
    context.reset(1)
    vad = VadStage(context, FakeEnergyVad(), partial_every_ms=0, speculate_after_ms=96, min_interrupt_ms=0)
    vad.setup()

    def feed(samples) -> list:
        data = audio.encode(samples, audio.PCM)
        return [m for at in range(0, len(data), 960) for m in vad.process(AudioIn(1, data[at : at + 960], audio.PCM))]

    feed(np.concatenate([silence(0.1), tone(0.5)]))
    assert not context.turn_ending.is_set()
    feed(silence(0.2))  # past speculate_after_ms, before the window closes
    assert context.turn_ending.is_set()
    feed(tone(0.3))  # the user goes on
    assert not context.turn_ending.is_set()
