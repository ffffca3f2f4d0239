"""The language model stage: holds the conversation and streams responses."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from pipelines import cpu
from pipelines.config import ENGINE_DEFAULTS
from pipelines.ids import new_id
from pipelines.interfaces import KeepsPrefixCache, LanguageModel, ReadsAhead
from pipelines.messages import (
    ROOT,
    AddItem,
    DeleteItem,
    Downstream,
    FunctionCallOutputItem,
    FunctionTool,
    HistoryEntry,
    HistoryItem,
    ReadAhead,
    ResponseEnd,
    ResponseRequest,
    ResponseResume,
    ResponseStarted,
    StageOutput,
    ToolsPending,
    TruncateItem,
    UserTurn,
    UserWordsSoFar,
    insert_after,
)
from pipelines.stages.base import CancelFlag, SessionContext, Stage
from pipelines.stages.lm_output import ResponseOutput, ResponseRun
from pipelines.timeline import Timeline
from pipelines.tool_calls import chat_messages

logger = logging.getLogger(__name__)


class SessionGone(Exception):
    """The response was cancelled or its session ended while its prompt was being built."""


class ContextExceeded(Exception):
    """The conversation does not fit the model's context and the session's truncation is disabled."""


class LmStage(Stage):
    """Holds the conversation for the LM and answers from it.

    The history is bounded in tokens (``max_history_tokens``, default the model's
    context: an older item could never be in a prompt): each item's token count is
    kept beside it, so adding an item, trimming the oldest and fitting a prompt to
    the context take time linear in what they touch, never a recount of the whole
    history per item dropped.
    """

    name = "lm"

    def __init__(
        self,
        context: SessionContext,
        model: LanguageModel,
        max_new_tokens: int = ENGINE_DEFAULTS.lm_max_new_tokens,
        first_piece_words: int = ENGINE_DEFAULTS.first_piece_words,
        max_history_tokens: int = 0,
    ) -> None:
        super().__init__(context)
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.first_piece_words = first_piece_words
        self.max_history_tokens = max_history_tokens or model.context_length
        self.history: dict[str, HistoryEntry] = {}
        self.history_tokens = 0  # the sum of _tokens
        self._tokens: dict[str, int] = {}  # item id -> tokens of its entry as it is now
        self._scaffold: int | None = None  # tokens the chat template adds once per prompt
        # Items the history cap pushed out (a response with truncation disabled cannot be whole without
        # them), and items a ``retention_ratio`` truncation cut off (left out of every later prompt).
        self._lost: set[str] = set()
        self._cut: set[str] = set()
        # speculative turn -> the item ids it added, taken back if the turn is abandoned
        self._speculative: dict[str, list[str]] = {}
        self._paused: dict[str, ResponseRun] = {}  # responses waiting for the results of the server's calls
        self._prefix = self._new_prefix()

    def _new_prefix(self) -> object | None:
        """The conversation's KV cache between turns, where the engine keeps one."""
        return self.model.new_prefix_cache() if isinstance(self.model, KeepsPrefixCache) else None

    def on_session_end(self) -> None:
        self.history = {}
        self._tokens = {}
        self.history_tokens = 0
        self._speculative = {}
        self._paused = {}
        self._lost, self._cut = set(), set()
        self._prefix = self._new_prefix()

    def process(self, msg: Downstream) -> Iterator[StageOutput]:
        self._settle_speculation()
        if isinstance(msg, UserTurn):
            if msg.text:
                self._forget(msg.item_id)  # a later round of the same turn replaces it
                self._keep(HistoryItem(msg.item_id, "user", msg.text))
                if msg.turn:
                    self._speculative[msg.turn] = [msg.item_id]
            if msg.create_response or msg.response is not None:
                req = msg.response or ResponseRequest.from_settings(self.context.settings, msg.generation)
                yield from self._respond(req, msg.turn, msg.timeline)
        elif isinstance(msg, UserWordsSoFar):
            self._read_ahead(msg)
        elif isinstance(msg, ResponseRequest):
            yield from self._respond(msg)
        elif isinstance(msg, ResponseResume):
            yield from self._resume(msg)
        elif isinstance(msg, AddItem):
            self._add(msg)
            if isinstance(msg.item, FunctionCallOutputItem):  # read before its response.create, if that is late
                self._read_next_answer(msg.generation)
        elif isinstance(msg, ReadAhead):
            self._read_next_answer(msg.generation)
        elif isinstance(msg, DeleteItem):
            self._forget(msg.item_id)
            self._lost.discard(msg.item_id)
        elif isinstance(msg, TruncateItem):
            item = self.history.get(msg.item_id)
            if isinstance(item, HistoryItem):
                self._keep(HistoryItem(item.item_id, item.role, msg.text))
        else:
            yield msg

    def _read_ahead(self, msg: UserWordsSoFar) -> None:
        """Evaluates the prompt the turn's answer will have, with the words so far, into the conversation's
        cache (an engine that keeps one, ``prefill``): when the turn ends only its last words are left to read.
        It stops within milliseconds once the turn ends (``turn_ending``): the answer goes first. The
        turn's item is in the history only while the prompt is built."""
        model = self.model
        if not isinstance(model, ReadsAhead) or self._prefix is None or not msg.text:
            return  # no cache to read into, or no words yet
        if self.context.turn_ending.is_set():
            return  # the turn has ended already: its answer is what the LM does next
        settings = self.context.settings
        if not settings.turn_detection.create_response:
            return  # no answer follows the turn on its own: nothing to read ahead for
        req = ResponseRequest.from_settings(settings, msg.generation)
        cancel = CancelFlag(self.context, req.response_id, msg.generation)
        known = self.history.get(msg.item_id)
        self._keep(HistoryItem(msg.item_id, "user", msg.text))
        try:
            messages = self._messages(req, cancel)
        except (SessionGone, ContextExceeded):
            return
        finally:
            self._forget(msg.item_id)
            if known is not None:
                self._keep(known)
        try:
            stop = lambda: cancel.is_set() or self.context.turn_ending.is_set()  # noqa: E731
            model.prefill(messages, req.tools, prefix=self._prefix, stop=stop)
        except Exception:
            logger.exception("reading ahead failed; the turn is read when it ends")

    def _read_next_answer(self, generation: int) -> None:
        """Reads the prompt the next answer starts from (the instructions, the tools, the conversation) into the
        conversation's cache while this thread has nothing else to do: new instructions when they come, not
        when the next turn ends; a turn that called a function while the client runs it, so that the answer
        after the result reads little more than the result. Stops within milliseconds once a message waits
        for this thread (``Stage.waiting``), at a background urgency for the cores (``pipelines.cpu``)."""
        model = self.model
        if not isinstance(model, ReadsAhead) or self._prefix is None or self.waiting():
            return
        req = ResponseRequest.from_settings(self.context.settings, generation)
        cancel = CancelFlag(self.context, req.response_id, generation)
        try:
            messages = self._messages(req, cancel)
        except (SessionGone, ContextExceeded):
            return
        later = time.monotonic() + cpu.BACKGROUND_S
        try:
            with cpu.serving(lambda: later, owner=self.context):
                model.prefill(messages, req.tools, prefix=self._prefix, stop=lambda: cancel.is_set() or self.waiting())
        except Exception:
            logger.exception("reading ahead failed; the next answer reads its prompt itself")

    def _settle_speculation(self) -> None:
        """Forgets confirmed speculative turns and takes back the items of abandoned ones."""
        for turn in list(self._speculative):
            if self.context.turn_abandoned(turn):
                for item_id in self._speculative.pop(turn):
                    self._forget(item_id)
            elif self.context.turn_confirmed(turn):
                del self._speculative[turn]

    def _add(self, msg: AddItem) -> None:
        self._forget(msg.item.item_id)
        previous = msg.previous_item_id
        if previous is None or previous != ROOT and previous not in self.history:
            self._keep(msg.item)  # last: no copy of the history per item
            return
        self.history = insert_after(self.history, msg.item.item_id, msg.item, previous)
        self._count(msg.item)

    # --- the history, bounded in tokens ----------------------------------------------

    def _keep(self, item: HistoryEntry) -> None:
        """Puts ``item`` in the history (last, or in its place when it is there already)."""
        self.history[item.item_id] = item
        self._lost.discard(item.item_id)
        self._count(item)

    def _count(self, item: HistoryEntry) -> None:
        tokens = self._message_tokens(item)
        self.history_tokens += tokens - self._tokens.get(item.item_id, 0)
        self._tokens[item.item_id] = tokens
        while self.history_tokens > self.max_history_tokens and len(self.history) > 1:
            oldest = next(iter(self.history))  # the oldest item goes first
            self._forget(oldest)
            self._lost.add(oldest)

    def _forget(self, item_id: str) -> None:
        self.history.pop(item_id, None)
        self.history_tokens -= self._tokens.pop(item_id, 0)
        self._cut.discard(item_id)

    def _message_tokens(self, item: HistoryEntry) -> int:
        """The tokens ``item`` adds to a prompt: its own count, less what the chat template adds once."""
        messages = chat_messages([item])
        if not messages:
            return 0
        if self._scaffold is None:  # T([m]) = S + w, T([m, m]) = S + 2w
            probe = {"role": "user", "content": "hello"}
            self._scaffold = max(0, 2 * self.model.count_tokens([probe]) - self.model.count_tokens([probe, probe]))
        return max(1, self.model.count_tokens(messages) - self._scaffold)

    def _messages(self, req: ResponseRequest, cancel: CancelFlag) -> list[dict[str, Any]]:
        """The prompt: the instructions and the entries the session's truncation keeps (see ``Truncation``).

        ``auto`` (and, after its cut, ``retention_ratio``) takes the newest entries that fit the
        context with room for the answer. Linear: entries are taken newest first with their kept
        token counts, then the whole prompt is counted once (a few times at most) to settle the
        estimate. Raises :class:`SessionGone` as soon as the response is cancelled or its session
        ends, :class:`ContextExceeded` when truncation is disabled and the conversation does not fit.
        """
        own = req.extra_input is not None
        entries: Sequence[HistoryEntry] = tuple(self.history.values()) if req.extra_input is None else req.extra_input
        system = [{"role": "system", "content": req.instructions}] if req.instructions else []
        budget = self.model.context_length - self._max_tokens(req)
        if req.truncation.type == "disabled":
            return self._whole(req, system, entries, own, budget)
        used = self._prompt_tokens(system, req.tools) if system or req.tools else 0
        if req.truncation.type == "retention_ratio" and not own:
            entries = self._retained(entries, req, budget - used, cancel)
        kept: deque[tuple[HistoryEntry, int]] = deque()
        for item in reversed(entries):  # the oldest go first when the conversation outgrows the context
            if cancel.is_set():
                raise SessionGone
            tokens = self._entry_tokens(item, own)
            if not tokens:
                continue
            if kept and used + tokens > budget:
                break
            kept.appendleft((item, tokens))
            used += tokens
        for _ in range(4):  # the estimate is close; the exact count decides
            if cancel.is_set():
                raise SessionGone
            excess = self._prompt_tokens(system + chat_messages(e for e, _ in kept), req.tools) - budget
            if excess <= 0 or len(kept) <= 1:
                break
            while excess > 0 and len(kept) > 1:
                excess -= kept.popleft()[1]
        return system + chat_messages(e for e, _ in kept)

    def _entry_tokens(self, item: HistoryEntry, own: bool) -> int:
        tokens = None if own else self._tokens.get(item.item_id)
        return self._message_tokens(item) if tokens is None else tokens

    def _whole(
        self,
        req: ResponseRequest,
        system: list[dict[str, Any]],
        entries: Sequence[HistoryEntry],
        own: bool,
        budget: int,
    ) -> list[dict[str, Any]]:
        """Truncation ``disabled``: the whole conversation, or :class:`ContextExceeded`."""
        if not own and self._lost:
            raise ContextExceeded(
                f"The conversation is longer than this server keeps for the model ({self.max_history_tokens} tokens) "
                "and truncation is disabled: delete the oldest items or enable truncation."
            )
        messages = system + chat_messages(entries)
        used = self._prompt_tokens(messages, req.tools)
        if used > budget:
            raise ContextExceeded(
                f"The conversation ({used} tokens with the instructions and tools) does not fit the model's context "
                f"of {self.model.context_length} tokens with room for {self._max_tokens(req)} output tokens, and "
                "truncation is disabled: delete items or enable truncation."
            )
        return messages

    def _retained(
        self, entries: Sequence[HistoryEntry], req: ResponseRequest, room: int, cancel: CancelFlag
    ) -> list[HistoryEntry]:
        """Truncation ``retention_ratio``: the conversation after its cut, moving the cut on an overflow.

        The limit is ``post_instructions`` (never more than ``room``, what the context leaves after the
        instructions and the answer); past it, the oldest entries go until the rest is at most
        ``retention_ratio`` of the limit (the newest entry always stays).
        """
        truncation = req.truncation
        limit = min(truncation.post_instructions or room, room)
        kept = [item for item in entries if item.item_id not in self._cut]
        tokens = []
        for item in kept:
            if cancel.is_set():
                raise SessionGone
            tokens.append(self._entry_tokens(item, own=False))
        total = sum(tokens)
        if total <= limit:
            return kept
        target = truncation.retention_ratio * limit
        start = 0
        while total > target and start < len(kept) - 1:
            total -= tokens[start]
            self._cut.add(kept[start].item_id)
            start += 1
        logger.debug("truncation: %d items cut, %d tokens kept of a limit of %d", start, total, limit)
        return kept[start:]

    def _prompt_tokens(self, messages: list[dict[str, Any]], tools: Sequence[FunctionTool]) -> int:
        return self.model.count_tokens(messages, tools) if tools else self.model.count_tokens(messages)

    def _max_tokens(self, req: ResponseRequest) -> int:
        if req.max_output_tokens is None:
            return self.max_new_tokens
        return max(1, min(req.max_output_tokens, self.max_new_tokens))

    def _respond(self, req: ResponseRequest, turn: str = "", timeline: Timeline | None = None) -> Iterator[StageOutput]:
        run = ResponseRun(req, turn, req.item_id or new_id("item"), timeline=timeline)
        yield ResponseStarted(
            generation=req.generation,
            response_id=req.response_id,
            item_id=run.item_id,
            output_modalities=req.output_modalities,
            output_format=req.output_format,
            voice=req.voice,
            out_of_band=req.out_of_band,
            turn=turn,
        )
        if req.awaiting:  # calls approved earlier run first: the session resumes it with their results
            self._paused[req.response_id] = run
            yield ToolsPending(generation=req.generation, response_id=req.response_id, turn=turn)
            return
        yield from self._generate(run)

    def _resume(self, msg: ResponseResume) -> Iterator[StageOutput]:
        """The results of a paused response's calls: into the conversation, then the next round (or the end)."""
        run = self._paused.pop(msg.response_id, None)
        if run is None:
            return
        for entry in msg.results:
            self._note(run, entry)
        req, gen = run.req, run.req.generation
        cancelled = self.context.cancel_reason(req.response_id, gen, run.turn)
        if msg.finish or cancelled is not None:
            yield self._end(run, "cancelled" if cancelled else "completed", cancelled)
            return
        run.rounds += 1
        yield from self._generate(run)

    def _note(self, run: ResponseRun, entry: HistoryEntry) -> None:
        """Adds a call or a result to the response's context: its own prompt, or the conversation."""
        req = run.req
        if req.out_of_band or req.extra_input is not None:
            kept = tuple(e for e in req.extra_input or () if e.item_id != entry.item_id)
            run.req = replace(req, extra_input=(*kept, entry))
        self._into_conversation(req, run.turn, [entry])

    def _into_conversation(self, req: ResponseRequest, turn: str, entries: list[HistoryEntry]) -> None:
        """Keeps a response's ``entries`` in the conversation (not an out-of-band response's, nor an abandoned
        turn's); a speculative turn's are taken back if it is abandoned later."""
        if req.out_of_band or (turn and self.context.turn_abandoned(turn)):
            return
        for entry in entries:
            self._keep(entry)
            if turn in self._speculative:
                self._speculative[turn].append(entry.item_id)

    def _generate(self, run: ResponseRun) -> Iterator[StageOutput]:
        """One round of generation; it ends the response, or pauses it after calls the server runs."""
        req, turn, gen = run.round_request(), run.turn, run.req.generation
        cancel = CancelFlag(self.context, req.response_id, gen, turn)
        output = ResponseOutput(req, turn, self.first_piece_words, run.timeline)
        status, reason, error_code = "completed", None, None
        stream = None
        try:
            # A response with its own input has its own prompt: it would only displace the conversation's cache.
            own_prompt = req.out_of_band or req.extra_input is not None
            options: dict[str, Any] = {"prefix": self._prefix} if self._prefix is not None and not own_prompt else {}
            if req.tools:
                options.update(
                    tools=req.tools, tool_choice=req.tool_choice, parallel_tool_calls=req.parallel_tool_calls
                )
            stream = self.model.generate_stream(
                self._messages(req, cancel), self._max_tokens(req), req.temperature, cancel, **options
            )
            for piece in self._pieces(stream, cancel):
                if run.first_token_s is None:
                    run.first_token_s = time.perf_counter() - run.started
                    if run.timeline is not None:
                        run.timeline.mark("lm_first_token")
                yield from output.feed(piece)
                if output.repeated:
                    break
            if cancel.is_set():
                status, reason = "cancelled", self.context.cancel_reason(req.response_id, gen, turn)
            if status == "completed" and stream.output_tokens >= self._max_tokens(req):
                status, reason = "incomplete", "max_output_tokens"
            yield from output.finish(completed=status != "cancelled")
        except SessionGone:
            status, reason = "cancelled", self.context.cancel_reason(req.response_id, gen, turn)
        except ContextExceeded as exc:
            status, reason, error_code = "failed", str(exc), "context_length_exceeded"
        except Exception as exc:
            logger.exception("generation failed")
            status, reason = "failed", f"{type(exc).__name__}: {exc}"
        run.tokens.add(stream)
        self._remember(req, turn, run.item_id, output)
        hosted = tuple(call for call in output.calls if call.name in req.hosted)
        if status == "completed" and hosted:
            if req.out_of_band or req.extra_input is not None:  # the next round's prompt has this round in it
                said = [HistoryItem(run.item_id, "assistant", output.text)] if output.text else []
                run.req = replace(run.req, extra_input=(*(run.req.extra_input or ()), *said, *output.calls))
            self._paused[req.response_id] = run
            yield ToolsPending(generation=gen, response_id=req.response_id, calls=hosted, turn=turn)
            return
        yield self._end(run, status, reason, error_code)
        if status == "completed" and req.tools and not (req.out_of_band or req.extra_input is not None):
            # The client runs the calls: their turn is read meanwhile. Or the answer came from the turn's own
            # context (after results): the conversation's reads it now, not when the next request comes.
            self._read_next_answer(gen)

    def _end(self, run: ResponseRun, status: str, reason: str | None, error_code: str | None = None) -> ResponseEnd:
        return ResponseEnd(
            generation=run.req.generation,
            response_id=run.req.response_id,
            status=status,
            reason=reason,
            input_tokens=run.tokens.input,
            output_tokens=run.tokens.output,
            cached_tokens=run.tokens.cached,
            lm_first_token_s=run.first_token_s,
            turn=run.turn,
            error_code=error_code,
            timeline=run.timeline,
        )

    def _remember(self, req: ResponseRequest, turn: str, item_id: str, output: ResponseOutput) -> None:
        """Adds the response's text and finished calls to the conversation (not for out-of-band ones)."""
        entries: list[HistoryEntry] = [HistoryItem(item_id, "assistant", output.text)] if output.text else []
        self._into_conversation(req, turn, entries + list(output.calls))

    @staticmethod
    def _pieces(stream: Iterable[str], cancel: CancelFlag) -> Iterator[str]:
        for piece in stream:
            if cancel.is_set():
                return
            if piece:
                yield piece
