"""Chat language model on llama.cpp (llama-cpp-python), streamed token by token.

GGUF files run as they are (no dequantizing), several times faster than
transformers on a CPU. The engine lends its contexts (``_llama_contexts.LlamaContexts``)
to one generation at a time, each conversation going back to the context that
caches it; a stream (``_llama_stream``) runs on the context it was lent.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pipelines.config import ENGINE_DEFAULTS
from pipelines.errors import PromptTooLongError
from pipelines.interfaces import Cancel
from pipelines.messages import FunctionTool, ToolChoice
from pipelines.tool_calls import plain_messages, tool_schema

from ._assembled import assembled
from ._llama_abort import interruptible
from ._llama_adapter import reuse_prefix, token_text
from ._llama_contexts import ConversationCache, LlamaContexts
from ._llama_plans import ANSWER_FROM_RESULTS, Request, Response, plan
from ._llama_stream import LlamaCppStream, byte_tokens
from ._llama_tools import answered_calls, current_turn

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct-q4_k_m"
# GGUF models joined from PyPI packages, by name (S2S_LM_MODEL=NAME): the default and a larger candidate.
PACKAGED = (DEFAULT_MODEL, "qwen2.5-coder-1.5b-instruct-q4_k_m")

# For GGUF files without a chat template (pretrained base models), by architecture.
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% set role = 'model' if m['role'] == 'assistant' else 'user' %}"
    "{% if m['role'] == 'system' %}{{ '<start_of_turn>user\n' + m['content'] + '\n' }}"
    "{% elif loop.index0 == 1 and messages[0]['role'] == 'system' %}{{ m['content'] + '<end_of_turn>\n' }}"
    "{% else %}{{ '<start_of_turn>' + role + '\n' + m['content'] + '<end_of_turn>\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# Some Qwen2.5 GGUF conversions (Qwen2.5-Coder-1.5B-Instruct's among them) show the model the call's layout with
# doubled braces, ``{{"name": ..., "arguments": ...}}``, which the model then copies. The layout its training used
# (and the tokenizer_config.json of the original model) has single braces.
DOUBLED_CALL_LAYOUT = '{{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}}'


def fixed_template(template: str) -> str:
    """The chat template with the known conversion slips undone (``DOUBLED_CALL_LAYOUT``)."""
    return template.replace(DOUBLED_CALL_LAYOUT, DOUBLED_CALL_LAYOUT[1:-1])


def default_model_path(cache_dir: str | None = None) -> str:
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M, joined from its packages on first use."""
    return str(assembled(DEFAULT_MODEL, cache_dir) / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")


def resolve_gguf(model_path: str | None, gguf_file: str | None = None, cache_dir: str | None = None) -> str:
    """A GGUF file: the default, a packaged model by name (``PACKAGED``), ``model_path`` itself, or ``gguf_file``
    (or the only .gguf) in that folder."""
    if model_path is None:
        return default_model_path(cache_dir)
    if model_path in PACKAGED:
        return str(assembled(model_path, cache_dir) / f"{model_path}.gguf")
    path = Path(model_path).expanduser()
    if gguf_file:
        path = path / gguf_file
    if path.is_dir():
        found = sorted(path.glob("*.gguf"))
        if len(found) != 1:
            raise FileNotFoundError(f"{path} holds {len(found)} .gguf files: name one with S2S_LM_GGUF_FILE")
        path = found[0]
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    return str(path)


# Reading ahead evaluates the prompt in chunks: READ_AHEAD_TOKENS first, then as many as take about READ_AHEAD_S
# (at most twice the last chunk, and the context's batch). A chunk stops part-way, within milliseconds, when the
# answer comes (``_llama_abort.interruptible``), so chunks may be long: a short chunk costs nearly what a long
# one does (each reads all the weights once), so long chunks read new instructions several times faster
# (the figures: docs/benchmarks.md, "Reading ahead outside a turn"). A chunk longer than READ_AHEAD_SHORT_S also
# stops when a step due sooner waits for a core (another session's first words, this one's speech), and the
# next is half as long: on busy cores reading ahead goes on in short chunks, which such a step waits for.
READ_AHEAD_TOKENS = 4
READ_AHEAD_S = 0.25
READ_AHEAD_SHORT_S = 0.05


def next_chunk(size: int, spent_s: float, most: int) -> int:
    """How many tokens reading ahead evaluates next, after ``size`` took ``spent_s``: about ``READ_AHEAD_S``
    worth, at least ``READ_AHEAD_TOKENS``, at most twice ``size`` and ``most``."""
    fits = int(size * READ_AHEAD_S / max(spent_s, 1e-6))
    return max(READ_AHEAD_TOKENS, min(2 * size, most, fits))


class LlamaCppLM:
    """One GGUF model on llama.cpp, shared by many units; up to ``max_contexts`` generations at once.

    With ``answer_model``, a model for each job: this one decides whether to call a function and writes the
    calls, ``answerer`` (the second model) writes every answer in words."""

    def __init__(
        self,
        model_path: str | None = None,
        gguf_file: str | None = None,
        device: str = "cpu",
        n_ctx: int = ENGINE_DEFAULTS.lm_context,
        threads: int = 0,
        max_contexts: int = 1,
        cache_dir: str | None = None,
        chat_template: str | None = None,
        answer_model: str | None = None,
    ) -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.model_path = resolve_gguf(model_path, gguf_file, cache_dir)
        self.device = device
        self.threads = threads or max(1, (os.cpu_count() or 2) // 2)  # llama-cpp-python's own default
        # Every core for a step while nothing else computes (pipelines.cpu); never on a GPU.
        self.adaptive_threads = bool(threads) and not device.startswith("cuda")
        self._options: dict[str, Any] = {
            "n_ctx": n_ctx,
            "n_batch": 256,
            "n_threads": threads or None,
            "n_threads_batch": threads or None,
            "n_gpu_layers": -1 if device.startswith("cuda") else 0,
            "verbose": False,
        }
        first = self._make_context()
        self.contexts = LlamaContexts(self._make_context, first, max_contexts, self.threads, self.adaptive_threads)
        self._tokenizer = first
        byte_tokens(first)  # what a call's grammar is asked about to write its forced text ahead
        self.context_length = first.n_ctx()
        meta = first.metadata
        template = fixed_template(chat_template or meta.get("tokenizer.chat_template") or self._fallback_template(meta))
        bos, eos = first.token_bos(), first.token_eos()
        self._bos_id = bos
        self._bos_text = token_text(first, bos) if bos >= 0 else ""
        self._add_bos = meta.get("tokenizer.ggml.add_bos_token", "false") == "true"
        self.template_has_tools = "tools" in template
        self._format = Jinja2ChatFormatter(
            template, eos_token=token_text(first, eos) if eos >= 0 else "", bos_token=self._bos_text
        )
        logger.info("Loaded LM %s on llama.cpp (%s, context %d)", self.model_path, device, self.context_length)
        self.answerer: LlamaCppLM | None = None  # a second model for answers in words (None: this one answers)
        if answer_model:
            self.answerer = LlamaCppLM(
                answer_model,
                device=device,
                n_ctx=n_ctx,
                threads=threads,
                max_contexts=max_contexts,
                cache_dir=cache_dir,
            )
            logger.info("answers in words come from %s", self.answerer.model_path)

    @staticmethod
    def _fallback_template(meta: dict[str, str]) -> str:
        return GEMMA_TEMPLATE if meta.get("general.architecture", "").startswith("gemma") else CHATML_TEMPLATE

    def _make_context(self) -> Any:
        from llama_cpp import Llama

        return Llama(model_path=self.model_path, **self._options)

    def encode_chat(self, messages: list[dict[str, Any]], tools: Sequence[FunctionTool] = ()) -> list[int]:
        """Token ids of ``messages`` rendered with the chat template, ready for the answer.

        Tools, calls and results go to a template that renders them (Qwen2.5's does, in the Hermes
        format of ``pipelines.tool_calls``); any other template gets them written out as text.
        """
        if self.template_has_tools:
            extra = {"tools": [tool_schema(tool) for tool in tools]} if tools else {}
        else:
            messages, extra = plain_messages(messages, tools), {}
        prompt = self._format(messages=messages, **extra).prompt
        # Tokenizing reads only the model's vocabulary, never a context's state: any context will do.
        ids = self._tokenizer.tokenize(prompt.encode(), add_bos=False, special=True)
        if self._add_bos and self._bos_id >= 0 and (not ids or ids[0] != self._bos_id):
            ids.insert(0, self._bos_id)
        return ids

    def count_tokens(self, messages: list[dict[str, Any]], tools: Sequence[FunctionTool] = ()) -> int:
        return len(self.encode_chat(messages, tools))

    def generate_stream(
        self,
        messages: list[dict[str, Any]],
        max_new_tokens: int,
        temperature: float = 0.8,
        cancel: Cancel | None = None,
        seed: int | None = None,
        prefix: ConversationCache | None = None,
        tools: Sequence[FunctionTool] = (),
        tool_choice: ToolChoice = ToolChoice(),
        parallel_tool_calls: bool = True,
    ) -> Response:
        """Tool calls are written in the Hermes format of ``pipelines.tool_calls``; how each ``tool_choice``
        is held on this engine: ``pipelines.backends._llama_tools``, and made, a plan per ``tool_choice``:
        ``pipelines.backends._llama_plans``. With ``parallel_tool_calls`` a response that calls a tool (``auto``
        or ``required``) may call several, one after the other."""
        request = Request(
            messages, max_new_tokens, temperature, cancel, seed, prefix, tools, tool_choice, parallel_tool_calls
        )
        return plan(self, request)

    def prefill(
        self,
        messages: list[dict[str, Any]],
        tools: Sequence[FunctionTool] = (),
        prefix: ConversationCache | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> int:
        """Evaluates the prompts the next generation over ``messages`` starts from into the conversation's
        contexts (``prefix``), so that it reads only the rest (``_llama_adapter.reuse_prefix``); the tokens evaluated.
        Read ahead while the user speaks (the turn so far) and between turns, in chunks, until ``stop()`` says
        so (within milliseconds, part-way through a chunk: ``interruptible``): what was read by then stays in
        the cache.

        With tools offered, as ``generate_stream`` reads them for ``auto``: the current turn alone on the
        context that decides whether to call (first: the decision comes first; after results in a later turn
        the answer comes from it too), and after results in a first turn the answer's prompt with
        ``ANSWER_FROM_RESULTS``. With a model for answers, the answer's prompt goes to its context. After an
        answer (the last message the assistant's, with no calls), only the conversation's context: the turn that
        decides next is not said yet."""
        if prefix is None:
            return 0
        read = 0
        separate = self.answerer is not None
        turn_over = bool(messages) and messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls")
        if tools and not turn_over:  # once the turn is answered, the next decision is on a turn not yet said
            turn = current_turn(messages)
            later = len(turn) < len(messages)
            if later:  # the decision, and after results the answer too (_llama_plans: Plan.answer_from_the_turn)
                read += self._read(turn, tools, prefix.for_turn(), stop)
            elif separate:  # the decision, from the whole conversation, on this model
                read += self._read(messages, tools, prefix, stop)
            results = bool(messages) and messages[-1]["role"] == "tool" and bool(answered_calls(messages))
            if results and (separate or not later):
                messages = [*messages, ANSWER_FROM_RESULTS]
        if self.answerer is not None:
            return read + self.answerer._read(messages, tools, prefix.for_answers(), stop)
        return read + self._read(messages, tools, prefix, stop)

    def _read(
        self,
        messages: list[dict[str, Any]],
        tools: Sequence[FunctionTool],
        prefix: ConversationCache,
        stop: Callable[[], bool] | None,
    ) -> int:
        """``prefill`` of one prompt into ``prefix``'s context."""
        ids = self.encode_chat(messages, tools)
        if len(ids) >= self.context_length:
            return 0
        stream = LlamaCppStream(self.contexts, ids, 0, 0.0, None, None, prefix)
        context = self.contexts.acquire(prefix)
        read = 0
        stopped = stop or (lambda: False)
        try:
            cached = reuse_prefix(context, ids)
            started = time.perf_counter()
            at, size = cached, READ_AHEAD_TOKENS
            token_s = 0.0  # a token's share of the last chunk's time
            with interruptible(context, stopped) as evaluate:
                while at < len(ids) and not stopped():
                    chunk = ids[at : at + size]
                    long = token_s * len(chunk) > READ_AHEAD_SHORT_S  # a step due sooner would wait long for it
                    began = time.perf_counter()
                    if not stream.run_on_share(context, functools.partial(evaluate, chunk, long)):
                        size = max(READ_AHEAD_TOKENS, size // 2)  # gave way (the cores are busy), or stopped
                        continue
                    spent = time.perf_counter() - began
                    token_s = spent / len(chunk)
                    size = next_chunk(len(chunk), spent, context.n_batch)
                    at += len(chunk)
                    read += len(chunk)
            logger.debug(
                "read ahead: %d of %d tokens (%d cached) in %.0f ms",
                read,
                len(ids) - cached,
                cached,
                (time.perf_counter() - started) * 1000,
            )
            return read
        finally:
            self.contexts.release(context, prefix)

    def tokens(self, text: str) -> list[int]:
        """The token ids of ``text``, markup tokens (``<tool_call>``) as they are."""
        return self._tokenizer.tokenize(text.encode(), add_bos=False, special=True) if text else []

    def fitting(self, ids: list[int]) -> list[int]:
        """``ids``, a prompt that leaves room for at least one token of answer; raises :class:`PromptTooLongError`."""
        if len(ids) >= self.context_length:
            raise PromptTooLongError(f"prompt has {len(ids)} tokens, context is {self.context_length}")
        return ids

    def new_prefix_cache(self) -> ConversationCache:
        return ConversationCache()


__all__ = ["LlamaCppLM", "LlamaCppStream", "ConversationCache", "default_model_path", "resolve_gguf"]
