"""JSON Schema to llama.cpp grammar (GBNF), with the integer bounds that llama-cpp-python's converter leaves out.

llama-cpp-python's ``json_schema_to_gbnf`` holds an integer to its type only: ``minimum``,
``maximum``, ``exclusiveMinimum`` and ``exclusiveMaximum`` are ignored (its source says so), so a
call could carry ``"party_size": 40`` where the tool allows 1 to 20. Here an integer with bounds
becomes a grammar of exactly the numbers in range, written without leading zeros as JSON has
them: split by number of digits, then by leading digit, as a range is turned into a regular
expression. Numbers with a fraction keep the converter's rule (their bounds are not held).
"""

from __future__ import annotations

import json
import math
from typing import Any


def integer_range(low: int | None, high: int | None) -> str:
    """A GBNF expression matching exactly the JSON integers from ``low`` to ``high`` (None: no bound)."""
    if low is not None and high is not None and low > high:
        raise ValueError(f"no integer lies between {low} and {high}")
    alternatives: list[str] = []
    if low is None or low < 0:  # the negatives: "-" and the magnitudes from 1 (or -high) to -low
        magnitudes = _naturals(1 if high is None or high >= 0 else -high, None if low is None else -low)
        alternatives += [f'"-" {alt}' for alt in magnitudes]
    if high is None or high >= 0:
        alternatives += _naturals(0 if low is None or low < 0 else low, high)
    return " | ".join(f"({alt})" for alt in alternatives)


def _naturals(low: int, high: int | None) -> list[str]:
    """Alternatives matching the whole numbers from ``low`` (>= 0) to ``high`` (None: no bound)."""
    alternatives: list[str] = []
    top = len(str(high)) if high is not None else len(str(low))
    for length in range(len(str(low)), top + 1):
        start = low if length == len(str(low)) else 10 ** (length - 1)
        end = high if high is not None and length == len(str(high)) else 10 ** length - 1
        alternatives += _same_length(str(start), str(end))
    if high is None:  # every number longer than the longest written out above
        alternatives.append("[1-9]" + " [0-9]" * top + " [0-9]*")
    return alternatives


def _same_length(low: str, high: str) -> list[str]:
    """Alternatives matching the numbers from ``low`` to ``high``, two digit strings of one length."""
    if len(low) == 1:
        return [f"[{low}-{high}]"]
    if low[0] == high[0]:
        return [f'"{low[0]}" {alt}' for alt in _same_length(low[1:], high[1:])]
    rest = len(low) - 1
    alternatives = [f'"{low[0]}" {alt}' for alt in _same_length(low[1:], "9" * rest)]
    if int(low[0]) + 1 <= int(high[0]) - 1:
        alternatives.append(f"[{int(low[0]) + 1}-{int(high[0]) - 1}]" + " [0-9]" * rest)
    alternatives += [f'"{high[0]}" {alt}' for alt in _same_length("0" * rest, high[1:])]
    return alternatives


def integer_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    """The lowest and highest integer ``schema`` allows (draft 4 booleans and draft 6+ numbers alike)."""
    low, high = schema.get("minimum"), schema.get("maximum")
    low = None if low is None else math.ceil(low)
    high = None if high is None else math.floor(high)
    exclusive_low, exclusive_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if exclusive_low is True and low is not None and low == schema.get("minimum"):
        low += 1
    elif isinstance(exclusive_low, (int, float)) and not isinstance(exclusive_low, bool):
        bound = math.floor(exclusive_low) + 1
        low = bound if low is None else max(low, bound)
    if exclusive_high is True and high is not None and high == schema.get("maximum"):
        high -= 1
    elif isinstance(exclusive_high, (int, float)) and not isinstance(exclusive_high, bool):
        bound = math.ceil(exclusive_high) - 1
        high = bound if high is None else min(high, bound)
    return low, high


def json_schema_to_gbnf(schema: str, prop_order: list[str] | None = None) -> str:
    """llama-cpp-python's conversion, with integer bounds held (see the module's docstring)."""
    from llama_cpp.llama_grammar import RESERVED_NAMES, SchemaConverter

    class BoundedConverter(SchemaConverter):  # type: ignore[misc]
        def visit(self, node: dict[str, Any], name: str) -> str:
            low, high = integer_bounds(node) if node.get("type") == "integer" else (None, None)
            if (low, high) != (None, None):
                rule_name = name + "-" if name in RESERVED_NAMES else name or "root"
                return self._add_rule(rule_name, f"({integer_range(low, high)}) space")
            return super().visit(node, name)

    converter = BoundedConverter(prop_order={key: index for index, key in enumerate(prop_order or [])},
                                 allow_fetch=False, dotall=False, raw_pattern=False)
    converter.visit(converter.resolve_refs(json.loads(schema), "stdin"), "")
    return converter.format_grammar()
