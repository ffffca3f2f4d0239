"""The items of one session's conversation, in order, under the session's caps.

``Items`` holds what the client sees (``realtime.item`` dicts, shaped in ``events``), the size of
each item's text (the caps count it), the user audio kept for ``conversation.item.retrieve``,
and each spoken reply's audio as it was sent, which ``conversation.item.truncate`` cuts to what
was heard, for as long as its item is in the conversation. It also says what the LM reads of an
item. It knows neither responses nor the pipeline.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field
from typing import Any

from pipelines import audio, messages as m
from pipelines.ids import new_id
from realtime.protocol.client_items import ClientItem, ItemReference
from realtime.protocol.wire import EventError

Event = dict[str, Any]


@dataclass(frozen=True)
class Caps:
    """How much conversation one session may hold: items, text per item, text in all.

    Only client requests are refused when a cap is reached (with an ``error``; the
    session goes on); what the server itself adds (transcripts, answers) is counted.
    """

    max_items: int = 4096
    max_item_bytes: int = 256 * 1024
    max_total_bytes: int = 8 * 1024 * 1024
    # User audio kept for ``conversation.item.retrieve`` (16 kHz float32, 64 KB a second): past it, the
    # oldest items' audio is let go (they are retrieved with their transcript, without audio). 8 MiB is about
    # two minutes: the longest item's audio, as base64 PCM at 24 kHz, stays well within the send buffer.
    max_audio_bytes: int = 8 * 1024 * 1024


def text_bytes(text: str | None) -> int:
    return len(text.encode("utf-8", "surrogatepass")) if text else 0


@dataclass
class Speech:
    """A spoken reply as the client was sent it: how much audio, and each sentence with the ms it starts at."""

    output_format: str
    audio_bytes: int = 0
    sentences: list[tuple[str, int]] = field(default_factory=list)

    @property
    def audio_ms(self) -> int:
        return audio.duration_ms(self.audio_bytes, self.output_format)

    def sent(self, size: int, transcript: str) -> None:
        """``size`` more bytes of audio went out, starting ``transcript`` (empty: the same sentence goes on)."""
        if transcript:
            self.sentences.append((transcript, self.audio_ms))
        self.audio_bytes += size

    def heard(self, audio_end_ms: int) -> str:
        """The part the user heard up to ``audio_end_ms``: whole sentences, then words in proportion."""
        kept: list[str] = []
        starts = [start for _, start in self.sentences] + [self.audio_ms]
        for (sentence, start), end in zip(self.sentences, starts[1:]):
            if audio_end_ms >= end:
                kept.append(sentence)
            elif audio_end_ms > start:
                words = sentence.split()
                share = (audio_end_ms - start) / max(1, end - start)
                kept.append(" ".join(words[: int(len(words) * share)]))
                break
            else:
                break
        return " ".join(part for part in kept if part)


class Items(Mapping[str, Event]):
    """The conversation's items by id, in conversation order (read it as a mapping; change it by its methods)."""

    def __init__(self, caps: Caps) -> None:
        self.caps = caps
        self._items: dict[str, Event] = {}
        self.text_bytes = 0  # UTF-8 bytes of text in all items
        self._sizes: dict[str, int] = {}
        # user item id -> its audio: (bytes, their format; None: the pipeline's 16 kHz float32)
        self._audio: dict[str, tuple[bytes, str | None]] = {}
        self.audio_bytes = 0
        self._speech: dict[str, Speech] = {}  # assistant audio item id -> the reply's audio as it was sent

    # --- reading ------------------------------------------------------------------------

    def __getitem__(self, item_id: str) -> Event:
        return self._items[item_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __reversed__(self) -> Iterator[str]:
        return reversed(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def keys(self) -> KeysView[str]:
        return self._items.keys()

    def values(self) -> ValuesView[Event]:
        return self._items.values()

    def items(self) -> ItemsView[str, Event]:
        return self._items.items()

    def find(self, item_id: str, param: str = "item_id") -> Event:
        """The item; raises ``item_not_found`` (naming ``param``) when the conversation has none by that id."""
        if item_id not in self._items:
            raise EventError("item_not_found", f"Item with id '{item_id}' not found.", param)
        return self._items[item_id]

    def last_id(self) -> str | None:
        return next(reversed(self._items), None)

    def previous_of(self, item_id: str) -> str | None:
        """The id of the item right before ``item_id`` (None: it is first, or not here)."""
        keys = list(self._items)
        at = keys.index(item_id) if item_id in keys else 0
        return keys[at - 1] if at > 0 else None

    def audio_of(self, item_id: str) -> tuple[bytes, str | None] | None:
        """A user item's audio while it is kept: (bytes, their format; None: the pipeline's 16 kHz float32)."""
        return self._audio.get(item_id)

    def speech_of(self, item_id: str) -> Speech | None:
        """The audio a reply's item was spoken with (None: not an assistant item with audio)."""
        return self._speech.get(item_id)

    # --- changing -----------------------------------------------------------------------

    def put(self, item: Event, previous: str | None = None) -> None:
        """Places ``item`` right after ``previous`` (None: last), or replaces the item of the same id."""
        self._items = m.insert_after(self._items, item["id"], item, previous)

    def remove(self, item_id: str) -> None:
        del self._items[item_id]
        self._drop_audio(item_id)
        self._speech.pop(item_id, None)
        self.account(item_id, 0)

    def account(self, item_id: str, size: int) -> None:
        """Counts an item's text (0: the item is gone) in the conversation's total."""
        self.text_bytes += size - self._sizes.pop(item_id, 0)
        if size and item_id in self._items:
            self._sizes[item_id] = size

    def spoken(self, item_id: str, speech: Speech) -> None:
        """Keeps the reply's audio beside its item, for a truncation while the item is here."""
        self._speech[item_id] = speech

    def keep_audio(self, item_id: str, data: bytes, audio_format: str | None) -> None:
        """Keeps a user item's audio for retrieval; the oldest go when the session's audio cap is passed."""
        if not data or len(data) > self.caps.max_audio_bytes:
            return
        self._audio[item_id] = (data, audio_format)
        self.audio_bytes += len(data)
        while self.audio_bytes > self.caps.max_audio_bytes:
            self._drop_audio(next(iter(self._audio)))

    def _drop_audio(self, item_id: str) -> None:
        data, _ = self._audio.pop(item_id, (b"", None))
        self.audio_bytes -= len(data)

    # --- the caps -----------------------------------------------------------------------

    def check_size(self, item: ClientItem, param: str) -> int:
        """The item's text in bytes; raises ``string_above_max_length`` past the per-item limit."""
        size = (
            text_bytes(item.output)
            + text_bytes(item.arguments)
            + text_bytes(item.name)
            + sum(text_bytes(part.text) for part in item.content)
        )
        if size > self.caps.max_item_bytes:
            raise EventError(
                "string_above_max_length",
                f"Invalid '{param}': its text is {size} bytes, the limit is {self.caps.max_item_bytes} bytes per item.",
                param,
            )
        return size

    def check_room(self, size: int) -> None:
        """Raises ``conversation_too_large`` when one more item of ``size`` bytes of text would pass a cap."""
        if len(self._items) >= self.caps.max_items:
            raise EventError(
                "conversation_too_large",
                f"The conversation holds {len(self._items)} items, the limit is "
                f"{self.caps.max_items}: delete items (conversation.item.delete) before adding more.",
                "item",
            )
        if self.text_bytes + size > self.caps.max_total_bytes:
            raise EventError(
                "conversation_too_large",
                f"The conversation holds {self.text_bytes} bytes of text; with "
                f"this item it would pass the limit of {self.caps.max_total_bytes}. Delete items "
                "(conversation.item.delete) before adding more.",
                "item",
            )

    def response_input(
        self, entries: tuple[ClientItem | ItemReference, ...]
    ) -> tuple[tuple[m.HistoryEntry, ...], dict[str, bytes]]:
        """A response's own context: referenced items of the conversation, and items given inline.

        Also the inline audio to transcribe before the response starts: clip id -> audio.
        """
        if len(entries) > self.caps.max_items:
            raise EventError(
                "array_above_max_length",
                f"Invalid 'response.input': {len(entries)} items, the limit is {self.caps.max_items}.",
                "response.input",
            )
        out: list[m.HistoryEntry] = []
        clips: dict[str, bytes] = {}
        total = 0
        for index, entry in enumerate(entries):
            if isinstance(entry, ItemReference):
                out.append(stored_history(self.find(entry.id, f"response.input[{index}].id")))
                continue
            total += self.check_size(entry, f"response.input[{index}]")
            if total > self.caps.max_total_bytes:
                raise EventError(
                    "string_above_max_length",
                    f"Invalid 'response.input': its text passes the limit of {self.caps.max_total_bytes} bytes.",
                    "response.input",
                )
            if entry.audio is not None:  # transcribed first, under an id the conversation never shows
                clip_id = new_id("item")
                clips[clip_id] = entry.audio
                out.append(m.HistoryItem(clip_id, entry.role, entry.text))
            elif (history := history_item(entry.id or new_id("item"), entry)) is not None:
                out.append(history)
        return tuple(out), clips


# --- what the LM reads of an item ------------------------------------------------------------


def history_item(item_id: str, item: ClientItem) -> m.HistoryEntry | None:
    """What the LM's history keeps of a client item (None: nothing to read, e.g. audio still to transcribe)."""
    if item.type == "function_call_output":
        return m.FunctionCallOutputItem(item_id, item.call_id or "", item.output or "")
    if item.type == "function_call":
        return m.FunctionCallItem(item_id, item.call_id or "", item.name or "", item.arguments or "")
    return m.HistoryItem(item_id, item.role, item.text) if item.text else None


def stored_history(item: Event) -> m.HistoryEntry:
    """An item of the conversation as the LM reads it (for a response's ``input`` that references it)."""
    if item["type"] == "function_call":
        return m.FunctionCallItem(item["id"], item.get("call_id") or "", item["name"], item["arguments"])
    if item["type"] == "function_call_output":
        return m.FunctionCallOutputItem(item["id"], item["call_id"], item["output"])
    return m.HistoryItem(item["id"], item.get("role", "user"), item_text(item))


def item_text(item: Event) -> str:
    """The text an item holds: its parts' text or transcripts, a call's arguments, a call's output."""
    if item["type"] == "function_call":
        return item["name"] + item["arguments"]
    if item["type"] == "function_call_output":
        return item["output"]
    if item["type"] in ("mcp_call", "mcp_approval_request"):
        return item["name"] + item["arguments"] + (item.get("output") or "")
    return " ".join(p.get("text") or p.get("transcript") or "" for p in item.get("content", []))
