"""The tools and requests of the function-calling benchmarks.

Seven tools of different shapes (free strings, bounded integers, enums, a
number, an optional field, a pattern, an array of objects), 32 requests that
each call one of them with known arguments, and 16 that need no tool.
"""

from __future__ import annotations

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
                "time": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$",
                         "description": "Time of the booking, 24-hour HH:MM"},
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
                "order_id": {"type": "string", "pattern": "^[0-9]{3,10}$", "description": "The order number, digits only"},
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


TOOL_REQUESTS: list[Request] = [
    Request("Book a table for four at Luigi's at 19:30.", "book_table", {"restaurant": "luigi", "party_size": 4, "time": "19:30"}),
    Request("Please reserve a table at Sakura for two people at 20:00.", "book_table", {"restaurant": "sakura", "party_size": 2, "time": "20:00"}),
    Request("Get me a table for six at The Oak at 18:00.", "book_table", {"restaurant": "oak", "party_size": 6, "time": "18:00"}),
    Request("Can you book Bella Napoli for three people at 21:15?", "book_table", {"restaurant": "bella napoli", "party_size": 3, "time": "21:15"}),
    Request("Where is my order 48213?", "get_order_status", {"order_id": "48213"}),
    Request("What is the status of order number 99107?", "get_order_status", {"order_id": "99107"}),
    Request("Has order 31555 shipped yet?", "get_order_status", {"order_id": "31555"}),
    Request("Track my order 700421 please.", "get_order_status", {"order_id": "700421"}),
    Request("Convert 10 kilometers to miles.", "convert_units", {"value": 10, "from_unit": "kilometers", "to_unit": "miles"}),
    Request("How many pounds is 5 kilograms?", "convert_units", {"value": 5, "from_unit": "kilograms", "to_unit": "pounds"}),
    Request("Convert 100 fahrenheit to celsius.", "convert_units", {"value": 100, "from_unit": "fahrenheit", "to_unit": "celsius"}),
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
    Request("Send David a message that the meeting moved to Monday.", "send_message", {"recipient": "david", "text": "monday"}),
    Request("Add two bottles of milk to my shopping list.", "add_to_shopping_list", {"items": [{"name": "milk", "quantity": 2}]}),
    Request("Put six eggs on the shopping list.", "add_to_shopping_list", {"items": [{"name": "egg", "quantity": 6}]}),
    Request("Add three apples to the shopping list.", "add_to_shopping_list", {"items": [{"name": "apple", "quantity": 3}]}),
    Request("Add one loaf of bread to my shopping list.", "add_to_shopping_list", {"items": [{"name": "bread", "quantity": 1}]}),
    Request("Book a table at Chez Marie for eight at 19:00.", "book_table", {"restaurant": "chez marie", "party_size": 8, "time": "19:00"}),
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
        return (isinstance(got, list) and len(got) == len(expected)
                and all(_value_matches(e, g) for e, g in zip(expected, got)))
    if isinstance(expected, dict):
        return isinstance(got, dict) and arguments_match(expected, got)
    return got == expected
