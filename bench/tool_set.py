"""The tools and requests of the function-calling benchmarks, and the results a client gives back.

Seven tools of different shapes (free strings, bounded integers, enums, a
number, an optional field, a pattern, an array of objects), 32 requests that
each call one of them with known arguments, 16 that need no tool, 8 that need
two calls in sequence and 8 whose call gets an error back.

:func:`tool_result` is the client's side: a plausible result for any call
(canned per tool, echoing the call's own arguments where a reply would), with
the key facts an answer in words should carry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

UNITS = ["kilometers", "miles", "meters", "feet", "kilograms", "pounds", "celsius", "fahrenheit", "liters", "gallons"]

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "book_table",
        "description": "Book a table at a restaurant.",
        "parameters": {
            "type": "object",
            "properties": {
                "restaurant": {"type": "string", "description": "Name of the restaurant"},
                "party_size": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Number of people"},
                "time": {
                    "type": "string",
                    "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$",
                    "description": "Time of the booking, 24-hour HH:MM",
                },
            },
            "required": ["restaurant", "party_size", "time"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "get_order_status",
        "description": "Look up the delivery status of an order.",
        "parameters": {
            "type": "object",
            "properties": {
                "order_id": {
                    "type": "string",
                    "pattern": "^[0-9]{3,10}$",
                    "description": "The order number, digits only",
                },
            },
            "required": ["order_id"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "convert_units",
        "description": "Convert a quantity from one unit to another.",
        "parameters": {
            "type": "object",
            "properties": {
                "value": {"type": "number"},
                "from_unit": {"type": "string", "enum": UNITS},
                "to_unit": {"type": "string", "enum": UNITS},
            },
            "required": ["value", "from_unit", "to_unit"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "set_timer",
        "description": "Start a countdown timer.",
        "parameters": {
            "type": "object",
            "properties": {
                "minutes": {"type": "integer", "minimum": 0, "maximum": 600},
                "label": {"type": "string", "description": "What the timer is for"},
            },
            "required": ["minutes"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "send_message",
        "description": "Send a text message to a contact.",
        "parameters": {
            "type": "object",
            "properties": {
                "recipient": {"type": "string", "description": "Name of the contact"},
                "text": {"type": "string", "description": "The message"},
            },
            "required": ["recipient", "text"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "add_to_shopping_list",
        "description": "Add items to the shopping list.",
        "parameters": {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}},
                        "required": ["name", "quantity"],
                        "additionalProperties": False,
                    },
                },
            },
            "required": ["items"],
            "additionalProperties": False,
        },
    },
]


@dataclass(frozen=True)
class Request:
    """A user request; ``tool`` is None when no tool should be called.

    ``expect`` holds the arguments that must be right: strings compare
    case-insensitively by containment (the model may write "Luigi's" or
    "Luigi's restaurant"), numbers compare equal.
    """

    text: str
    tool: str | None = None
    expect: dict[str, Any] = field(default_factory=dict)
    then: Call | None = None  # the second call, due once the first call's result is back
    error: str | None = None  # the first call gets ``{"error": error}`` back instead of a result

    @property
    def kind(self) -> str:
        """``tool``, ``chat``, ``two calls`` or ``error``."""
        if self.tool is None:
            return "chat"
        return "two calls" if self.then else "error" if self.error else "tool"

    @property
    def calls(self) -> list[Call]:
        """The calls the request needs, in order."""
        return [Call(self.tool, self.expect), *([self.then] if self.then else [])] if self.tool else []


@dataclass(frozen=True)
class Call:
    """A call a request needs: the function and the arguments that must be right (as in :class:`Request`)."""

    tool: str
    expect: dict[str, Any] = field(default_factory=dict)


TOOL_REQUESTS: list[Request] = [
    Request(
        "Book a table for four at Luigi's at 19:30.",
        "book_table",
        {"restaurant": "luigi", "party_size": 4, "time": "19:30"},
    ),
    Request(
        "Please reserve a table at Sakura for two people at 20:00.",
        "book_table",
        {"restaurant": "sakura", "party_size": 2, "time": "20:00"},
    ),
    Request(
        "Get me a table for six at The Oak at 18:00.",
        "book_table",
        {"restaurant": "oak", "party_size": 6, "time": "18:00"},
    ),
    Request(
        "Can you book Bella Napoli for three people at 21:15?",
        "book_table",
        {"restaurant": "bella napoli", "party_size": 3, "time": "21:15"},
    ),
    Request("Where is my order 48213?", "get_order_status", {"order_id": "48213"}),
    Request("What is the status of order number 99107?", "get_order_status", {"order_id": "99107"}),
    Request("Has order 31555 shipped yet?", "get_order_status", {"order_id": "31555"}),
    Request("Track my order 700421 please.", "get_order_status", {"order_id": "700421"}),
    Request(
        "Convert 10 kilometers to miles.", "convert_units", {"value": 10, "from_unit": "kilometers", "to_unit": "miles"}
    ),
    Request(
        "How many pounds is 5 kilograms?", "convert_units", {"value": 5, "from_unit": "kilograms", "to_unit": "pounds"}
    ),
    Request(
        "Convert 100 fahrenheit to celsius.",
        "convert_units",
        {"value": 100, "from_unit": "fahrenheit", "to_unit": "celsius"},
    ),
    Request("What is 3 gallons in liters?", "convert_units", {"value": 3, "from_unit": "gallons", "to_unit": "liters"}),
    Request("Convert 200 meters to feet.", "convert_units", {"value": 200, "from_unit": "meters", "to_unit": "feet"}),
    Request("Set a timer for 10 minutes.", "set_timer", {"minutes": 10}),
    Request("Start a 25 minute timer for the pizza.", "set_timer", {"minutes": 25, "label": "pizza"}),
    Request("Set a timer for 5 minutes for the eggs.", "set_timer", {"minutes": 5, "label": "eggs"}),
    Request("Timer for 45 minutes please.", "set_timer", {"minutes": 45}),
    Request("What's the weather in Paris?", "get_weather", {"city": "paris"}),
    Request("Is it raining in London right now?", "get_weather", {"city": "london"}),
    Request("What is the weather like in Tokyo in celsius?", "get_weather", {"city": "tokyo", "unit": "celsius"}),
    Request("How hot is it in Phoenix in fahrenheit?", "get_weather", {"city": "phoenix", "unit": "fahrenheit"}),
    Request("Tell me the weather in Berlin.", "get_weather", {"city": "berlin"}),
    Request("Send a message to Anna saying I will be late.", "send_message", {"recipient": "anna", "text": "late"}),
    Request("Text Bob that dinner is ready.", "send_message", {"recipient": "bob", "text": "dinner"}),
    Request("Message Carla: see you at the station.", "send_message", {"recipient": "carla", "text": "station"}),
    Request(
        "Send David a message that the meeting moved to Monday.",
        "send_message",
        {"recipient": "david", "text": "monday"},
    ),
    Request(
        "Add two bottles of milk to my shopping list.",
        "add_to_shopping_list",
        {"items": [{"name": "milk", "quantity": 2}]},
    ),
    Request("Put six eggs on the shopping list.", "add_to_shopping_list", {"items": [{"name": "egg", "quantity": 6}]}),
    Request(
        "Add three apples to the shopping list.", "add_to_shopping_list", {"items": [{"name": "apple", "quantity": 3}]}
    ),
    Request(
        "Add one loaf of bread to my shopping list.",
        "add_to_shopping_list",
        {"items": [{"name": "bread", "quantity": 1}]},
    ),
    Request(
        "Book a table at Chez Marie for eight at 19:00.",
        "book_table",
        {"restaurant": "chez marie", "party_size": 8, "time": "19:00"},
    ),
    Request("What's the weather in Madrid?", "get_weather", {"city": "madrid"}),
]

CHAT_REQUESTS: list[Request] = [
    Request("Hello, how are you today?"),
    Request("Tell me a short joke."),
    Request("What is the capital of France?"),
    Request("Who wrote Romeo and Juliet?"),
    Request("Thank you, that was helpful."),
    Request("What is two plus two?"),
    Request("Can you recommend a good book?"),
    Request("What do bees make?"),
    Request("Say something nice about cats."),
    Request("How many legs does a spider have?"),
    Request("What color is the sky?"),
    Request("Good night!"),
    Request("Why is the ocean salty?"),
    Request("Name a fruit that is yellow."),
    Request("What is your name?"),
    Request("Explain what a rainbow is in one sentence."),
]


TWO_CALL_REQUESTS: list[Request] = [
    Request(
        "What's the weather in Paris, and then book a table for two at Luigi's at 20:00?",
        "get_weather",
        {"city": "paris"},
        then=Call("book_table", {"restaurant": "luigi", "party_size": 2, "time": "20:00"}),
    ),
    Request(
        "Check the weather in Oslo and then convert 20 miles to kilometers.",
        "get_weather",
        {"city": "oslo"},
        then=Call("convert_units", {"value": 20, "from_unit": "miles", "to_unit": "kilometers"}),
    ),
    Request(
        "Where is my order 48213? Then text Anna that it is on its way.",
        "get_order_status",
        {"order_id": "48213"},
        then=Call("send_message", {"recipient": "anna"}),
    ),
    Request(
        "Set a timer for 15 minutes, and then add two lemons to my shopping list.",
        "set_timer",
        {"minutes": 15},
        then=Call("add_to_shopping_list", {"items": [{"name": "lemon", "quantity": 2}]}),
    ),
    Request(
        "What's the weather in Rome? Then send Bob a message saying bring an umbrella.",
        "get_weather",
        {"city": "rome"},
        then=Call("send_message", {"recipient": "bob", "text": "umbrella"}),
    ),
    Request(
        "Book a table for four at Sakura at 19:00, and then text Carla that dinner is at seven.",
        "book_table",
        {"restaurant": "sakura", "party_size": 4, "time": "19:00"},
        then=Call("send_message", {"recipient": "carla"}),
    ),
    Request(
        "Convert 5 kilograms to pounds, then set a timer for 30 minutes.",
        "convert_units",
        {"value": 5, "from_unit": "kilograms", "to_unit": "pounds"},
        then=Call("set_timer", {"minutes": 30}),
    ),
    Request(
        "Has order 31555 shipped? Then add three apples to my shopping list.",
        "get_order_status",
        {"order_id": "31555"},
        then=Call("add_to_shopping_list", {"items": [{"name": "apple", "quantity": 3}]}),
    ),
]

ERROR_REQUESTS: list[Request] = [
    Request("What's the weather in Atlantis?", "get_weather", {"city": "atlantis"}, error="city not found"),
    Request(
        "Book a table for two at Nopa at 20:00.",
        "book_table",
        {"restaurant": "nopa", "party_size": 2, "time": "20:00"},
        error="the booking system is down",
    ),
    Request("Where is my order 11111?", "get_order_status", {"order_id": "11111"}, error="order not found"),
    Request("Send a message to Zed saying hello.", "send_message", {"recipient": "zed"}, error="no contact named Zed"),
    Request("Set a timer for 20 minutes.", "set_timer", {"minutes": 20}, error="the timer service is unavailable"),
    Request(
        "Add four bananas to my shopping list.",
        "add_to_shopping_list",
        {"items": [{"name": "banana", "quantity": 4}]},
        error="the shopping list could not be reached",
    ),
    Request(
        "Convert 12 liters to gallons.",
        "convert_units",
        {"value": 12, "from_unit": "liters", "to_unit": "gallons"},
        error="the conversion service failed",
    ),
    Request("Tell me the weather in Lisbon.", "get_weather", {"city": "lisbon"}, error="the weather service is down"),
]


@dataclass(frozen=True)
class ToolResult:
    """What the client sends back for a call (``output``, JSON text) and the key facts an answer should carry:
    each fact is a number (said as digits or words) or words separated by ``|`` (any of them will do)."""

    output: str
    facts: tuple[int | str, ...]
    error: bool = False


# Conversion factors to a base unit per dimension (temperatures apart).
_FACTORS = {
    "kilometers": 1000.0,
    "miles": 1609.344,
    "meters": 1.0,
    "feet": 0.3048,
    "kilograms": 1.0,
    "pounds": 0.45359237,
    "liters": 1.0,
    "gallons": 3.785411784,
}


def tool_result(name: str, arguments: dict[str, Any], error: str | None = None) -> ToolResult:
    """A plausible result for a call of ``name`` (any function, right or wrong), or ``{"error": error}``."""
    if error:
        return ToolResult(json.dumps({"error": error}), (), error=True)
    text = lambda key, default: str(arguments.get(key) or default)  # noqa: E731
    if name == "get_weather":
        return _result(
            {"city": text("city", "Paris"), "conditions": "sunny", "temperature": 21, "unit": "celsius"},
            "sunny|sun",
            21,
        )
    if name == "book_table":
        return _result(
            {
                "status": "confirmed",
                "restaurant": text("restaurant", "the restaurant"),
                "time": text("time", "19:00"),
                "table": 12,
            },
            "confirmed|booked|reserved|reservation",
            12,
        )
    if name == "get_order_status":
        return _result(
            {"order_id": text("order_id", "48213"), "status": "shipped", "expected_delivery": "Friday"},
            "shipped|on its way|on the way",
            "friday",
        )
    if name == "convert_units":
        value, converted = _converted(arguments)
        return _result(
            {
                "value": arguments.get("value", value),
                "from_unit": text("from_unit", "meters"),
                "to_unit": text("to_unit", "feet"),
                "result": round(converted, 1),
            },
            int(converted),
        )
    if name == "set_timer":
        minutes = arguments.get("minutes") if isinstance(arguments.get("minutes"), int) else 10
        return _result(
            {"status": "started", "minutes": minutes, "label": text("label", "timer")}, "started|set|running", minutes
        )
    if name == "send_message":
        recipient = text("recipient", "your contact")
        return _result({"status": "sent", "recipient": recipient}, "sent|delivered", recipient.split()[0].lower())
    if name == "add_to_shopping_list":
        items = arguments.get("items") if isinstance(arguments.get("items"), list) else []
        names = [str(i.get("name")) for i in items if isinstance(i, dict) and i.get("name")]
        return _result(
            {"status": "added", "items": names, "items_on_list": 7},
            "added|on your list|on the list",
            *(n.lower().rstrip("s") for n in names),
        )
    return _result({"status": "done"}, "done")


def _result(output: dict[str, Any], *facts: int | str) -> ToolResult:
    return ToolResult(json.dumps(output), facts)


def _converted(arguments: dict[str, Any]) -> tuple[float, float]:
    value = arguments.get("value")
    value = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 1.0
    source, target = arguments.get("from_unit"), arguments.get("to_unit")
    if (source, target) == ("celsius", "fahrenheit"):
        return value, value * 9 / 5 + 32
    if (source, target) == ("fahrenheit", "celsius"):
        return value, (value - 32) * 5 / 9
    if source in _FACTORS and target in _FACTORS:
        return value, value * _FACTORS[source] / _FACTORS[target]
    return value, value


def arguments_match(expect: dict[str, Any], arguments: dict[str, Any]) -> bool:
    """Whether ``arguments`` carry every expected value (see :class:`Request`)."""
    return all(_value_matches(value, arguments.get(key)) for key, value in expect.items())


def _value_matches(expected: Any, got: Any) -> bool:
    if isinstance(expected, str):
        return isinstance(got, str) and expected.lower() in got.lower()
    if isinstance(expected, bool) or expected is None:
        return got == expected
    if isinstance(expected, (int, float)):
        return isinstance(got, (int, float)) and not isinstance(got, bool) and float(got) == float(expected)
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(_value_matches(e, g) for e, g in zip(expected, got))
        )
    if isinstance(expected, dict):
        return isinstance(got, dict) and arguments_match(expected, got)
    return got == expected
