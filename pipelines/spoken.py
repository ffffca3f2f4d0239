"""Text as a reader sees it and as a voice says it.

The transcript keeps what a reader expects ("2,600,000 people", "21 °C"); the text the TTS engine
reads has numbers, units and symbols in words ("two million six hundred thousand people",
"twenty-one degrees Celsius"), so no voice spells out digits or skips a sign. Numbers in words come
from ``num2words``; what is ours is finding them in running text. English only, as the default voice is.
"""

from __future__ import annotations

import re

from num2words import num2words

NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_SPLIT_GROUPS = re.compile(r"\b(\d{1,3}), (\d{3}(?:,\d{3})+)\b")  # "2, 600,000": one number with a stray space

CURRENCIES = {"$": ("dollar", "cent"), "€": ("euro", "cent"), "£": ("pound", "penny")}
SCALES = ("thousand", "million", "billion", "trillion")
UNITS = {  # after a number; (singular, plural)
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "mph": ("mile per hour", "miles per hour"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
    "km": ("kilometer", "kilometers"),
    "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"),
    "kg": ("kilogram", "kilograms"),
    "mg": ("milligram", "milligrams"),
    "ml": ("milliliter", "milliliters"),
    "kW": ("kilowatt", "kilowatts"),
    "GB": ("gigabyte", "gigabytes"),
    "MB": ("megabyte", "megabytes"),
    "TB": ("terabyte", "terabytes"),
    "ft": ("foot", "feet"),
    "lbs": ("pound", "pounds"),
    "lb": ("pound", "pounds"),
    "mi": ("mile", "miles"),
    "m": ("meter", "meters"),
    "g": ("gram", "grams"),
    "l": ("liter", "liters"),
    "L": ("liter", "liters"),
}
SYMBOLS = {"&": "and", "+": "plus", "=": "equals", "×": "times", "@": "at", "#": "number", "~": "about"}

_CURRENCY = re.compile(rf"([$€£])\s?({NUMBER})(?:\s?({'|'.join(SCALES)})\b)?")
_PERCENT = re.compile(rf"({NUMBER})\s?%")
_DEGREES = re.compile(rf"(-?)({NUMBER})\s?°\s?([CF])?\b")
_UNIT = re.compile(rf"({NUMBER})\s?({'|'.join(re.escape(u) for u in UNITS)})(?![\w/])")
_TIME = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)\b")
_ORDINAL = re.compile(r"\b(\d+)(st|nd|rd|th)\b")
_RANGE = re.compile(rf"\b({NUMBER})\s?[-–]\s?({NUMBER})\b")
_DECADE = re.compile(r"(?<![\d,.])(1[1-9]\d0|20\d0)'?s\b")
_YEAR = re.compile(r"(?<![\d,.])(1[1-9]\d\d|20\d\d)(?![\d,.]\d)(?!\s?%)")
_NEGATIVE = re.compile(rf"(?<![\w)])-({NUMBER})")
_NUMBER = re.compile(rf"(?<![\w.]){NUMBER}")
_SYMBOL = re.compile("|".join(re.escape(s) for s in SYMBOLS))
_SPACES = re.compile(r"\s+")

# Markdown a model writes for the eye, which a voice would read out ("number number Safety", "asterisk"):
# what each mark stands for is kept (a heading's words, a link's text), the mark itself is not said.
_MARKUP = [
    (re.compile(r"```[^\n`]*\n?|`"), ""),  # code fences and inline code marks
    (re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)"), r"\1"),  # [text](url), ![alt](src)
    (re.compile(r"(?m)^[ \t]*#{1,6}[ \t]+"), ""),  # headings
    (re.compile(r"(?m)^[ \t]*>[ \t]?"), ""),  # quotes
    (re.compile(r"(?m)^[ \t]*(?:[-*+•]|\d+[.)])[ \t]+"), ""),  # list items, bulleted or numbered
    (re.compile(r"(?m)^[ \t]*(?:[-*_][ \t]*){3,}$"), ""),  # rules
    (re.compile(r"\*{1,3}|(?<!\w)_{1,3}|_{1,3}(?!\w)|~~"), ""),  # emphasis and strike-through marks
    (re.compile(r"(?m)^[ \t]*\|?(?:[ \t]*:?-{3,}:?[ \t]*\|)+(?:[ \t]*:?-{3,}:?[ \t]*)?$"), ""),  # a table's rule
    (re.compile(r"(?m)^[ \t]*\||\|[ \t]*$"), ""),  # a table row's outer bars
    (re.compile(r"[ \t]*\|[ \t]*"), ", "),  # between its cells
]


def for_reading(text: str) -> str:
    """The transcript's form: the answer as written, a number split by a stray space joined again."""
    return _SPLIT_GROUPS.sub(r"\1,\2", text)


def without_markup(text: str) -> str:
    """``text`` without the marks of Markdown (headings, emphasis, lists, links, code, tables), its words kept."""
    for pattern, replacement in _MARKUP:
        text = pattern.sub(replacement, text)
    return text


def for_speech(text: str) -> str:
    """What the voice reads: no markup, and numbers, amounts, units, times and symbols in words."""
    text = without_markup(for_reading(text))
    text = _CURRENCY.sub(_currency, text)
    text = _PERCENT.sub(lambda m: f"{words(m.group(1))} percent", text)
    text = _DEGREES.sub(_degrees, text)
    text = _UNIT.sub(_unit, text)
    text = _TIME.sub(_time, text)
    text = _ORDINAL.sub(lambda m: num2words(int(m.group(1)), to="ordinal"), text)
    text = _RANGE.sub(lambda m: f"{m.group(1)} to {m.group(2)}", text)
    text = _DECADE.sub(_decade, text)
    text = _YEAR.sub(lambda m: _clean(num2words(int(m.group(1)), to="year")), text)
    text = _NEGATIVE.sub(lambda m: f"minus {words(m.group(1))}", text)
    text = _NUMBER.sub(lambda m: words(m.group(0)), text)
    text = _SYMBOL.sub(lambda m: f" {SYMBOLS[m.group(0)]} ", text)
    return _SPACES.sub(" ", text).strip()


def words(number: str) -> str:
    """``"2,600,000"`` -> ``"two million six hundred thousand"``; ``"3.5"`` -> ``"three point five"``."""
    plain = number.replace(",", "")
    return _clean(num2words(float(plain) if "." in plain else int(plain)))


def _clean(spoken: str) -> str:
    return spoken.replace(",", "")  # num2words writes "two million, six hundred": no pause inside a number


def _value(number: str) -> float:
    return float(number.replace(",", ""))


def _currency(match: re.Match[str]) -> str:
    sign, number, scale = match.groups()
    unit, small = CURRENCIES[sign]
    if scale:
        return f"{words(number)} {scale} {unit}s"
    whole, _, cents = number.replace(",", "").partition(".")
    said = f"{words(whole)} {unit}{'' if whole == '1' else 's'}"
    if cents and int(cents[:2].ljust(2, "0")):
        count = int(cents[:2].ljust(2, "0"))
        plural = "pence" if small == "penny" else "cents"
        said += f" and {words(str(count))} {small if count == 1 else plural}"
    return said


def _degrees(match: re.Match[str]) -> str:
    minus, number, scale = match.groups()
    value = words(number)
    said = f"{'minus ' if minus else ''}{value} degree{'' if _value(number) == 1 and not minus else 's'}"
    return said + {"C": " Celsius", "F": " Fahrenheit", None: ""}[scale]


def _unit(match: re.Match[str]) -> str:
    number, unit = match.groups()
    one, many = UNITS[unit]
    return f"{words(number)} {one if _value(number) == 1 else many}"


def _decade(match: re.Match[str]) -> str:
    year = _clean(num2words(int(match.group(1)), to="year"))  # "nineteen ninety"
    return year[:-1] + "ies" if year.endswith("y") else year + "s"


def _time(match: re.Match[str]) -> str:
    hour, minute = int(match.group(1)), int(match.group(2))
    if minute == 0:
        return f"{num2words(hour)} o'clock"
    return f"{num2words(hour)} {'oh ' if minute < 10 else ''}{_clean(num2words(minute))}"
