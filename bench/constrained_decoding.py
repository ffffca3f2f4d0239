"""Compares structured-generation libraries on the default LM: setup, compile, per-token cost, correctness.

For each library importable in this interpreter (xgrammar, llguidance,
outlines-core, lm-format-enforcer), generates the JSON arguments of every tool
of ``bench/tool_set.py`` for two requests with SmolLM2-135M on the CPU, the
token loop written out (one forward pass per token, as the server does), and
times the library's part of each step (computing the allowed-token mask,
applying it, advancing the matcher) against the forward pass. Each output is
checked with ``jsonschema`` against the tool's schema.

The candidates cannot all share one environment (outlines pins its own
dependencies), so the comparison in docs/benchmarks.md was made with one
virtual environment per library over the project's, e.g.::

    python -m venv /tmp/sg/xgrammar
    echo "$PROJECT_VENV/lib/python3.11/site-packages" > /tmp/sg/xgrammar/lib/python3.11/site-packages/p.pth
    /tmp/sg/xgrammar/bin/pip install xgrammar
    /tmp/sg/xgrammar/bin/python bench/constrained_decoding.py --json out-xgrammar.json

Run ``python bench/constrained_decoding.py --help`` for options; it prints a
markdown table (and JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.tool_set import TOOL_REQUESTS, TOOLS  # noqa: E402


class Adapter(ABC):
    """One library behind a small interface: ``compile(schema)``, ``start(grammar)``, ``mask(logits)``, ``accept(id)``."""  # noqa: E501

    name = ""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self.tokenizer, self.vocab_size = tokenizer, vocab_size

    @abstractmethod
    def compile(self, schema: dict[str, Any]) -> Any:
        """Each library implements it."""

    @abstractmethod
    def start(self, grammar: Any, prompt_ids: list[int]) -> None:
        """Each library implements it."""

    @abstractmethod
    def mask(self, logits: Any) -> None:
        """Each library implements it."""

    @abstractmethod
    def accept(self, token: int) -> None:
        """Each library implements it."""


class XGrammar(Adapter):
    name = "xgrammar"

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        super().__init__(tokenizer, vocab_size)
        import xgrammar as xgr

        self.xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.compiler = xgr.GrammarCompiler(info, max_threads=1)
        self.bitmask = xgr.allocate_token_bitmask(1, vocab_size)

    def compile(self, schema):
        return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)

    def start(self, grammar, prompt_ids):
        self.matcher = self.xgr.GrammarMatcher(grammar)

    def mask(self, logits):
        self.matcher.fill_next_token_bitmask(self.bitmask)
        self.xgr.apply_token_bitmask_inplace(logits, self.bitmask)

    def accept(self, token):
        assert self.matcher.accept_token(token)


class LLGuidance(Adapter):
    name = "llguidance"

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        super().__init__(tokenizer, vocab_size)
        import llguidance
        import llguidance.hf
        import torch

        self.ll, self.torch = llguidance, torch
        self.lltok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)
        self.bitmask = torch.full(((vocab_size + 31) // 32,), -1, dtype=torch.int32)
        self.bits = torch.arange(32, dtype=torch.int32)

    def compile(self, schema):
        grammar = self.ll.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
        error = self.ll.LLMatcher.validate_grammar(grammar, self.lltok)
        assert not error, error
        return grammar

    def start(self, grammar, prompt_ids):
        self.matcher = self.ll.LLMatcher(self.lltok, grammar)

    def mask(self, logits):
        self.matcher.unsafe_compute_mask_ptr(self.bitmask.data_ptr(), self.bitmask.numel() * 4)
        # llguidance.torch's applier is torch.compile'd (needs a C compiler at run time); the same in plain torch:
        allowed = ((self.bitmask.unsqueeze(1) >> self.bits) & 1).flatten()[: logits.shape[-1]].bool()
        logits.masked_fill_(~allowed, float("-inf"))

    def accept(self, token):
        assert self.matcher.consume_token(token), self.matcher.get_error()


class OutlinesCore(Adapter):
    name = "outlines-core"

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        super().__init__(tokenizer, vocab_size)
        import outlines_core
        import torch
        from outlines.backends.outlines_core import OutlinesCoreBackend
        from outlines.models.transformers import TransformerTokenizer
        from outlines_core.kernels.torch import allocate_token_bitmask

        self.oc, self.torch = outlines_core, torch
        adapter = TransformerTokenizer(tokenizer)
        self.vocabulary = OutlinesCoreBackend.create_outlines_core_vocabulary(
            adapter.get_vocab(), tokenizer.eos_token_id, tokenizer.eos_token, adapter.convert_token_to_string
        )
        self.bitmask = allocate_token_bitmask(vocab_size)

    def compile(self, schema):
        from outlines_core.json_schema import build_regex_from_schema

        return self.oc.Index(build_regex_from_schema(json.dumps(schema)), self.vocabulary)

    def start(self, grammar, prompt_ids):
        self.guide = self.oc.Guide(grammar)

    def mask(self, logits):
        from outlines_core.kernels.torch import apply_token_bitmask_inplace, fill_next_token_bitmask

        fill_next_token_bitmask(self.guide, self.bitmask)
        apply_token_bitmask_inplace(logits, self.bitmask)

    def accept(self, token):
        if not self.guide.is_finished():  # the end-of-sequence token is not a transition of the index
            self.guide.advance(token_id=token, return_tokens=False)


class FormatEnforcer(Adapter):
    name = "lm-format-enforcer"

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        super().__init__(tokenizer, vocab_size)
        import torch

        self.torch = torch
        self.data = self._tokenizer_data(tokenizer, vocab_size)

    @staticmethod
    def _tokenizer_data(tokenizer: Any, vocab_size: int) -> Any:
        """What ``integrations.transformers.build_token_enforcer_tokenizer_data`` builds; that module
        does not import with transformers 5 (it imports ``transformers.tokenization_utils``)."""
        from lmformatenforcer import TokenEnforcerTokenizerData

        token_0 = tokenizer.encode("0")[-1]
        regular = []
        for token_idx in range(vocab_size):
            if token_idx in tokenizer.all_special_ids:
                continue
            decoded_after_0 = tokenizer.decode([token_0, token_idx])[1:]
            decoded_regular = tokenizer.decode([token_idx])
            regular.append((token_idx, decoded_after_0, len(decoded_after_0) > len(decoded_regular)))

        def decode(tokens: list[int]) -> str:
            return tokenizer.decode(tokens).rstrip("\ufffd")

        return TokenEnforcerTokenizerData(regular, decode, tokenizer.eos_token_id, False, vocab_size)

    def compile(self, schema):

        return schema

    def start(self, grammar, prompt_ids):
        from lmformatenforcer import JsonSchemaParser, TokenEnforcer

        self.enforcer = TokenEnforcer(self.data, JsonSchemaParser(grammar))
        self.sequence = list(prompt_ids)

    def mask(self, logits):
        allowed = self.enforcer.get_allowed_tokens(self.sequence)
        keep = self.torch.full_like(logits, float("-inf"))
        index = self.torch.tensor(list(allowed), dtype=self.torch.long)
        keep[..., index] = 0
        logits.add_(keep)

    def accept(self, token):
        self.sequence.append(token)


ADAPTERS = {cls.name: cls for cls in (XGrammar, LLGuidance, OutlinesCore, FormatEnforcer)}
MODULES = {
    "xgrammar": "xgrammar",
    "llguidance": "llguidance",
    "outlines-core": "outlines_core",
    "lm-format-enforcer": "lmformatenforcer",
}


def available() -> list[str]:
    import importlib.util

    return [name for name, module in MODULES.items() if importlib.util.find_spec(module) is not None]


def prompt_for(lm: Any, tool: dict[str, Any], request: str) -> list[int]:
    system = (
        f"You fill in the arguments of the function {tool['name']}: {tool['description']} "
        f"Its JSON schema: {json.dumps(tool['parameters'])}. Answer with the JSON arguments only."
    )
    return lm.encode_chat([{"role": "system", "content": system}, {"role": "user", "content": request}])


def generate(lm: Any, adapter: Adapter | None, grammar: Any, prompt_ids: list[int], max_tokens: int) -> dict[str, Any]:
    """Greedy decoding with the library in the loop; returns the text and the time split."""
    import torch
    from transformers import DynamicCache

    model, stop = lm.model, lm.stop_ids
    cache, ids = DynamicCache(), torch.tensor([prompt_ids])
    if adapter is not None:
        adapter.start(grammar, prompt_ids)
    out: list[int] = []
    forward_s, library_s = [], []
    for _ in range(max_tokens):
        t0 = time.perf_counter()
        with torch.inference_mode():
            logits = model(input_ids=ids, cache=cache, use_cache=True).logits[:, -1, :].float()
            t1 = time.perf_counter()
            if adapter is not None:
                adapter.mask(logits)
            token = int(logits.argmax(dim=-1))
        t2 = time.perf_counter()
        if adapter is not None:
            adapter.accept(token)
        t3 = time.perf_counter()
        forward_s.append(t1 - t0)
        library_s.append((t2 - t1) + (t3 - t2))
        if token in stop:
            break
        out.append(token)
        ids = torch.tensor([[token]])
    return {"text": lm.tokenizer.decode(out, skip_special_tokens=True), "forward_s": forward_s, "library_s": library_s}


def check(text: str, schema: dict[str, Any]) -> str:
    import jsonschema

    try:
        value = json.loads(text)
    except ValueError:
        return "invalid JSON"
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        return f"schema: {exc.message}"
    return ""


def run_library(lm: Any, name: str, per_tool: int, max_tokens: int) -> dict[str, Any]:
    vocab = lm.model.config.vocab_size
    t0 = time.perf_counter()
    adapter = ADAPTERS[name](lm.tokenizer, vocab) if name != "none" else None
    setup_s = time.perf_counter() - t0
    compile_s, forward, library, failures, outputs = [], [], [], [], []
    for tool in TOOLS:
        t0 = time.perf_counter()
        grammar = adapter.compile(tool["parameters"]) if adapter is not None else None
        compile_s.append(time.perf_counter() - t0)
        requests = [r for r in TOOL_REQUESTS if r.tool == tool["name"]][:per_tool]
        for request in requests:
            result = generate(lm, adapter, grammar, prompt_for(lm, tool, request.text), max_tokens)
            forward += result["forward_s"]
            library += result["library_s"]
            problem = check(result["text"], tool["parameters"])
            if problem and len(result["forward_s"]) >= max_tokens:
                problem = f"cut at {max_tokens} tokens ({problem})"
            outputs.append({"tool": tool["name"], "request": request.text, "text": result["text"], "problem": problem})
            if problem:
                failures.append(problem)
    return {
        "library": name,
        "setup_s": setup_s,
        "compile_ms_median": 1000 * statistics.median(compile_s),
        "compile_ms_max": 1000 * max(compile_s),
        "tokens": len(forward),
        "forward_ms_median": 1000 * statistics.median(forward),
        "library_ms_median": 1000 * statistics.median(library),
        "library_ms_p90": 1000 * sorted(library)[int(0.9 * (len(library) - 1))],
        "valid": len(outputs) - len(failures),
        "outputs": len(outputs),
        "samples": outputs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--libraries", nargs="*", default=None, help="default: every one importable, and 'none'")
    parser.add_argument("--per-tool", type=int, default=2, help="requests per tool")
    parser.add_argument("--max-tokens", type=int, default=60)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    import torch

    from pipelines.backends.transformers_lm import TransformersLM

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    lm = TransformersLM()
    names = args.libraries if args.libraries is not None else ["none", *available()]
    results = [run_library(lm, name, args.per_tool, args.max_tokens) for name in names]
    print(
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads "
        f"{torch.get_num_threads()}\n"
    )
    print(
        "| library | setup s | compile ms (median / max) | forward ms/token | library ms/token (median / p90) | schema-valid |"  # noqa: E501
    )
    print("|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['library']} | {r['setup_s']:.2f} | {r['compile_ms_median']:.1f} / {r['compile_ms_max']:.1f} | "
            f"{r['forward_ms_median']:.1f} | {r['library_ms_median']:.2f} / {r['library_ms_p90']:.2f} | "
            f"{r['valid']}/{r['outputs']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
