"""JSON Schema to llama.cpp grammar (GBNF), with the numeric bounds that llama-cpp-python's converter leaves out.

llama-cpp-python's ``json_schema_to_gbnf`` holds a number to its type only: ``minimum``,
``maximum``, ``exclusiveMinimum`` and ``exclusiveMaximum`` are ignored (its source says so), so a
call could carry ``"party_size": 40`` where the tool allows 1 to 20. Here an integer with bounds
becomes a grammar of exactly the numbers in range, written without leading zeros as JSON has
them: split by number of digits, then by leading digit, as a range is turned into a regular
expression. A ``number`` with bounds becomes the decimals in range with at most
``FRACTION_DIGITS`` digits after the point (more where a bound has more), without an exponent:
the same construction on the number scaled to an integer, split at the point.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

FRACTION_DIGITS = 6  # digits after the point a bounded number may have (at least)


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
        end = high if high is not None and length == len(str(high)) else 10**length - 1
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


def number_range(low: int | None, high: int | None, places: int) -> str:
    """A GBNF expression matching exactly the JSON decimals from ``low`` to ``high`` tenths-to-the-``places``
    (None: no bound), with at most ``places`` digits after the point and no exponent."""
    if low is not None and high is not None and low > high:
        raise ValueError(f"no number with {places} decimals lies between {low}e-{places} and {high}e-{places}")
    alternatives: list[str] = []
    if low is None or low < 0:  # the negatives: "-" and the magnitudes from one unit (or -high) to -low
        magnitudes = _decimals(1 if high is None or high >= 0 else -high, None if low is None else -low, places)
        alternatives += [f'"-" {alt}' for alt in magnitudes]
    if high is None or high >= 0:
        alternatives += _decimals(0 if low is None or low < 0 else low, high, places)
    return " | ".join(f"({alt})" for alt in alternatives)


def _decimals(low: int, high: int | None, places: int) -> list[str]:
    """Alternatives matching the decimals from ``low`` (>= 0) to ``high`` (None: no bound) in units of
    ``10 ** -places``: a whole part without leading zeros, then at most ``places`` digits after a point."""
    unit = 10**places
    low_whole, low_part = divmod(low, unit)
    if high is not None and high // unit == low_whole:
        return _with_fraction([f'"{low_whole}"'], low_part, high % unit, places)
    alternatives = _with_fraction([f'"{low_whole}"'], low_part, unit - 1, places)
    if high is None:
        alternatives += _with_fraction(_naturals(low_whole + 1, None), 0, unit - 1, places)
        return alternatives
    high_whole, high_part = divmod(high, unit)
    if low_whole + 1 <= high_whole - 1:
        alternatives += _with_fraction(_naturals(low_whole + 1, high_whole - 1), 0, unit - 1, places)
    return alternatives + _with_fraction([f'"{high_whole}"'], 0, high_part, places)


def _with_fraction(wholes: list[str], first: int, last: int, places: int) -> list[str]:
    """Each of ``wholes`` followed by a fraction from ``first`` to ``last`` (units of ``10 ** -places``):
    none (when ``first`` is 0), or a point and 1 to ``places`` digits."""
    fractions = []
    for digits in range(1, places + 1):
        step = 10 ** (places - digits)
        smallest, largest = -(-first // step), last // step  # the digit strings of this length in range
        if smallest > largest:
            continue
        if (smallest, largest) == (0, 10**digits - 1):
            fractions.append(" ".join(["[0-9]"] * digits))
        else:
            fractions += _same_length(str(smallest).zfill(digits), str(largest).zfill(digits))
    suffix = ""
    if fractions:
        suffix = ' ("." (' + " | ".join(f"({alt})" for alt in fractions) + "))" + ("?" if first == 0 else "")
    elif first != 0:
        return []
    return [f"({whole}){suffix}" for whole in wholes]


def integer_bounds(schema: dict[str, Any], scale: int = 1) -> tuple[int | None, int | None]:
    """The lowest and highest integer ``schema`` allows (draft 4 booleans and draft 6+ numbers alike); with
    ``scale``, of the allowed numbers times ``scale`` (the bounds of a decimal in units of ``1 / scale``)."""

    def scaled(bound: Any) -> Decimal | None:
        return None if bound is None or isinstance(bound, bool) else Decimal(repr(bound)) * scale

    minimum, maximum = scaled(schema.get("minimum")), scaled(schema.get("maximum"))
    low = None if minimum is None else math.ceil(minimum)
    high = None if maximum is None else math.floor(maximum)
    exclusive_low, exclusive_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    above, below = scaled(exclusive_low), scaled(exclusive_high)  # draft 6+: numbers; draft 4's booleans: None
    if exclusive_low is True and low is not None and low == minimum:
        low += 1
    elif above is not None:
        low = math.floor(above) + 1 if low is None else max(low, math.floor(above) + 1)
    if exclusive_high is True and high is not None and high == maximum:
        high -= 1
    elif below is not None:
        high = math.ceil(below) - 1 if high is None else min(high, math.ceil(below) - 1)
    return low, high


def number_places(schema: dict[str, Any]) -> int:
    """Digits after the point a bounded ``number`` of ``schema`` may have: ``FRACTION_DIGITS``, or as many
    as its most precise bound."""
    bounds = [schema.get(key) for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")]
    exponents = [
        Decimal(repr(b)).normalize().as_tuple().exponent
        for b in bounds
        if isinstance(b, (int, float)) and not isinstance(b, bool)
    ]
    return max([FRACTION_DIGITS, *(-e for e in exponents if isinstance(e, int))])


def json_schema_to_gbnf(schema: str, prop_order: list[str] | None = None) -> str:
    """llama-cpp-python's conversion, with the bounds of integers and numbers held (see the module's docstring)."""
    from llama_cpp.llama_grammar import RESERVED_NAMES, SchemaConverter

    class BoundedConverter(SchemaConverter):
        def visit(self, node: dict[str, Any], name: str) -> str:
            rule_name = name + "-" if name in RESERVED_NAMES else name or "root"
            if node.get("type") == "integer":
                low, high = integer_bounds(node)
                if (low, high) != (None, None):
                    return self._add_rule(rule_name, f"({integer_range(low, high)}) space")
            if node.get("type") == "number":
                places = number_places(node)
                low, high = integer_bounds(node, 10**places)
                if (low, high) != (None, None):
                    return self._add_rule(rule_name, f"({number_range(low, high, places)}) space")
            return super().visit(node, name)

    converter = BoundedConverter(
        prop_order={key: index for index, key in enumerate(prop_order or [])},
        allow_fetch=False,
        dotall=False,
        raw_pattern=False,
    )
    converter.visit(converter.resolve_refs(json.loads(schema), "stdin"), "")
    return converter.format_grammar()
