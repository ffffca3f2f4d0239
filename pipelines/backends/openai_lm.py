"""The LM on an existing serving engine, through the OpenAI Chat Completions API.

vLLM, SGLang, llama.cpp's server and Ollama all serve ``/v1/chat/completions``
with streaming. The stream gives the same interface as ``LMStream``: text
pieces, then token counts (from the engine's ``usage``). Tools go to the
engine natively; its streamed ``tool_calls`` are written into the text in the
call format the LM stage reads (``pipelines.tool_calls``: ``<tool_call>``, the name and the
arguments as JSON, ``</tool_call>``). Connection errors, timeouts and 4xx/5xx
answers raise ``LMEngineError`` (the response ends ``failed``); after a few in a
row the circuit breaker refuses calls for a while instead of hammering the engine.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator, Sequence
from typing import Any

from pipelines.config import ENGINE_DEFAULTS
from pipelines.tool_calls import CALL_SEPARATOR, CALL_TAIL, call_head, tool_schema

from ._breaker import CircuitBreaker, CircuitOpenError

logger = logging.getLogger(__name__)

CHARS_PER_TOKEN = 3.0  # a conservative estimate: the engine's tokenizer is not at hand


class LMEngineError(RuntimeError):
    """The serving engine could not answer (down, slow, or an error status)."""


def tool_param(tool: Any) -> dict[str, Any]:
    """A ``FunctionTool`` (or an already-shaped dict) as a Chat Completions ``tools`` entry."""
    if isinstance(tool, dict):
        return tool if "function" in tool else {"type": "function", "function": tool}
    return tool_schema(tool)


def tool_choice_param(choice: Any) -> Any:
    """A ``ToolChoice`` (mode auto | none | required | function) as Chat Completions' ``tool_choice``."""
    if choice is None or isinstance(choice, (str, dict)):
        return choice
    if choice.mode == "function":
        return {"type": "function", "function": {"name": choice.name}}
    return choice.mode


def wire_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as the API takes them: call arguments as JSON text, tool results by call id."""
    out: list[dict[str, Any]] = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {**call, "function": {**call["function"], "arguments": _json_text(call["function"]["arguments"])}}
                for call in message["tool_calls"]
            ]
            message["content"] = message.get("content") or None
        if message.get("role") == "tool":
            message.pop("name", None)
        out.append(message)
    return out


def _json_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


class OpenAIChatLM:
    """A ``LanguageModel`` served elsewhere. Thread-safe: units share one client and one breaker."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "",
        context_length: int = ENGINE_DEFAULTS.lm_context_length,
        timeout_s: float = ENGINE_DEFAULTS.lm_timeout_s,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        from openai import OpenAI

        if not base_url:
            raise ValueError("the OpenAI LM backend needs a base URL (S2S_LM_BASE_URL)")
        self.base_url = base_url
        self.model = model
        self.context_length = context_length
        # Retries are the breaker's business: a retry storm is what it prevents.
        self._client = OpenAI(base_url=base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=0)
        self.breaker = breaker or CircuitBreaker(f"the LM engine at {base_url}")
        logger.info("LM on the serving engine at %s, model %r", base_url, model)

    def count_tokens(self, messages: list[dict[str, Any]], tools: Sequence[Any] = ()) -> int:
        """An upper estimate from the characters (the engine's tokenizer is not here)."""
        chars = len(json.dumps(messages)) + (len(json.dumps([tool_param(t) for t in tools])) if tools else 0)
        return math.ceil(chars / CHARS_PER_TOKEN)

    def generate_stream(
        self,
        messages: list[dict[str, Any]],
        max_new_tokens: int,
        temperature: float = 0.8,
        cancel: Any = None,
        seed: int | None = None,
        tools: Sequence[Any] = (),
        tool_choice: Any = None,
        parallel_tool_calls: bool = True,
        **_options: Any,
    ) -> OpenAIStream:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": wire_messages(messages),
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if seed is not None:
            request["seed"] = seed
        if tools:
            request["tools"] = [tool_param(t) for t in tools]
            if tool_choice is not None:
                request["tool_choice"] = tool_choice_param(tool_choice)
            request["parallel_tool_calls"] = parallel_tool_calls
        return OpenAIStream(self, request, cancel)


class OpenAIStream:
    """Iterate for text pieces (calls included, in the call format); then the counts and ``finish_reason``."""

    def __init__(self, owner: OpenAIChatLM, request: dict[str, Any], cancel: Any) -> None:
        self._owner = owner
        self._request = request
        self._cancel = cancel
        self.input_tokens = 0
        self.output_tokens = 0
        self.cached_tokens = 0
        self.finish_reason: str | None = None
        self._pieces = 0
        self._reported = False  # the engine sent usage

    def __iter__(self) -> Iterator[str]:
        breaker = self._owner.breaker
        try:
            breaker.before_call()
        except CircuitOpenError as exc:
            raise LMEngineError(str(exc)) from None
        try:
            response = self._owner._client.chat.completions.create(**self._request)
        except Exception as exc:
            _count(breaker, exc)
            raise LMEngineError(_describe(exc, self._owner.base_url)) from exc
        try:
            yield from self._read(response)
        except Exception as exc:
            _count(breaker, exc)
            raise LMEngineError(_describe(exc, self._owner.base_url)) from exc
        finally:
            response.close()
        breaker.succeeded()
        if not self._reported:  # an engine without streamed usage (llama.cpp's Python server): estimates
            self.input_tokens = self._owner.count_tokens(self._request["messages"], self._request.get("tools", ()))
            self.output_tokens = self._pieces  # one streamed piece is about one token

    def _read(self, response: Any) -> Iterator[str]:
        calls: dict[int, bool] = {}  # call index -> its head was written
        open_call: int | None = None
        for chunk in response:
            if self._cancel is not None and self._cancel.is_set():
                self.finish_reason = "cancelled"
                return
            if chunk.usage is not None:
                self._usage(chunk.usage)
            for choice in chunk.choices[:1]:
                delta = choice.delta
                if delta.content:
                    if open_call is not None:
                        yield CALL_TAIL
                        open_call = None
                    self._pieces += 1
                    yield delta.content
                for call in delta.tool_calls or ():
                    if call.index != open_call:
                        if open_call is not None:
                            yield CALL_TAIL + CALL_SEPARATOR
                        open_call = call.index
                    if not calls.get(call.index):
                        name = call.function.name if call.function else ""
                        calls[call.index] = True
                        yield call_head(name or "")
                    if call.function and call.function.arguments:
                        self._pieces += 1
                        yield call.function.arguments
                if choice.finish_reason:
                    self.finish_reason = "length" if choice.finish_reason == "length" else "stop"
        if open_call is not None:
            yield CALL_TAIL
        if self.finish_reason is None:
            self.finish_reason = "stop"

    def _usage(self, usage: Any) -> None:
        self._reported = True
        self.input_tokens = usage.prompt_tokens or 0
        self.output_tokens = usage.completion_tokens or 0
        details = getattr(usage, "prompt_tokens_details", None)
        self.cached_tokens = (getattr(details, "cached_tokens", 0) or 0) if details is not None else 0


def _count(breaker: CircuitBreaker, exc: Exception) -> None:
    """A fault of the engine (unreachable, slow, 5xx, overloaded) counts against it; a refused request does not."""
    import openai

    if isinstance(exc, openai.APIStatusError) and exc.status_code < 500 and exc.status_code != 429:
        breaker.succeeded()  # it answered: it is up, the request was at fault
    else:
        breaker.failed()


def _describe(exc: Exception, base_url: str) -> str:
    """A message that says what went wrong with the engine, for the response's error."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return f"the LM engine at {base_url} did not answer in time"
    if isinstance(exc, openai.APIConnectionError):
        return f"the LM engine at {base_url} cannot be reached ({exc.__cause__ or exc})"
    if isinstance(exc, openai.APIStatusError):
        return f"the LM engine at {base_url} answered {exc.status_code}: {exc.message}"
    return f"the LM engine at {base_url} failed: {type(exc).__name__}: {exc}"


__all__ = ["LMEngineError", "OpenAIChatLM", "OpenAIStream", "tool_choice_param", "tool_param", "wire_messages"]
