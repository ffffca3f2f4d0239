"""A supervisor on one node, the session on another (issue 51), through the channel layer (Redis), as ending a
session from another node goes.

The supervise WebSocket's node (A) identifies the supervisor as it would for a session of its own, then asks the
session's group and the call's group (``supervise.join``, with the supervisor as a
:meth:`realtime.access.owner.Caller.as_message` and a reply channel of A's). The node that holds the session
(B) decides with the same owner rule (:meth:`Owner.supervises`) and seats a :class:`RemoteSupervisor`, a
transport whose events go to A's channel; it answers ``supervise.joined`` with its mailbox's channel, where A
then sends the supervisor's frames (``supervise.frame``) and its leaving (``supervise.leave``). A refusal is not
answered: A tells its supervisor what an unknown id gets once nobody answered in :data:`JOIN_TIMEOUT_S`, the
wait an unknown id, a refused one and a session of A's own that refuses alike take. Per listener, the channel
layer carries every event the supervisor gets (the caller's audio, 50 a second, and the agent's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from channels.layers import BaseChannelLayer, get_channel_layer

from realtime.access.owner import Caller, Owner
from realtime.live.transport import ServerEvent, Transport
from realtime.node import cluster
from realtime.protocol.close_codes import CLOSE_POLICY
from realtime.protocol.events import server_event
from realtime.protocol.session import render

if TYPE_CHECKING:
    from realtime.live.mailbox import Mailbox
    from realtime.live.supervision import Desk
    from realtime.protocol.session.config import SessionConfig

logger = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 1.0  # how long the asking node waits for the node that holds the session
RELAY_QUEUE = 1000  # events on their way to a remote supervisor (20 s of the caller's audio); past it, it is closed
SEND_TIMEOUT_S = 2.0


class RemoteSupervisor:
    """The transport of a supervisor seated from another node: its events queued, then sent to that node's channel
    in order by a task of their own, so that the channel layer never holds up the session."""

    def __init__(self, layer: BaseChannelLayer, reply_to: str) -> None:
        self.layer, self.reply_to = layer, reply_to
        self._queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=RELAY_QUEUE)
        self.task: asyncio.Task[None] | None = None

    async def send_event(self, event: ServerEvent) -> None:
        self._put({"type": cluster.SUPERVISE_EVENT, "event": event.to_wire()})

    async def close(self, code: int, reason: str) -> None:
        """What is queued (the error that says why it closes) goes first, then the close, both sent from here at
        once (the session's end may have stopped the pump already); then the pump stops."""
        queued = []
        while not self._queue.empty():
            if (message := self._queue.get_nowait()) is not None:
                queued.append(message)
        closing = {"type": cluster.SUPERVISE_CLOSE, "code": code, "reason": reason}
        with contextlib.suppress(Exception):
            for message in [*queued, closing]:
                await asyncio.wait_for(self.layer.send(self.reply_to, message), SEND_TIMEOUT_S)
        self._put(None)

    def _put(self, message: dict[str, Any] | None) -> None:
        try:
            self._queue.put_nowait(message)
        except asyncio.QueueFull:  # the other node does not keep up: it is told to close, once the queue drains
            logger.warning("a remote supervisor does not keep up; closing it")

    async def pump(self) -> None:
        while (message := await self._queue.get()) is not None:
            try:
                await asyncio.wait_for(self.layer.send(self.reply_to, message), SEND_TIMEOUT_S)
            except Exception:
                logger.warning("a remote supervisor could not be sent %s", message.get("type"))


class RemoteSupervision:
    """The mailbox's supervise messages, on the node that holds :class:`realtime.live.core.SessionCore`."""

    id: str
    owner: Owner
    ended: bool
    desk: Desk
    mailbox: Mailbox
    session: SessionConfig

    if TYPE_CHECKING:

        async def supervise(self, transport: Transport, caller: Caller) -> None: ...

        def unfollow(self, follower: Transport) -> None: ...

        async def receive_supervisor(self, transport: Transport, text: str | None, size: int) -> None: ...

        def supervisor_state(self) -> ServerEvent: ...

        def spawn(self, coro: Any, name: str) -> None: ...  # realtime.live.core

    async def supervised_from_afar(self, message: dict[str, Any]) -> None:
        """``supervise.join``: seats the supervisor another node identified, if the owner rule lets it; a refusal
        is not answered (the asker answers as for an unknown id when nobody does)."""
        reply_to, caller = message.get("reply_to"), Caller.from_message(message.get("caller"))
        layer = self.mailbox.layer
        if not isinstance(reply_to, str) or not reply_to or layer is None or self.ended:
            return
        if not self.owner.supervises(caller) or reply_to in self.desk.remote:
            return
        remote = RemoteSupervisor(layer, reply_to)
        self.desk.remote[reply_to] = remote
        await layer.send(reply_to, {"type": cluster.SUPERVISE_JOINED, "mailbox": self.mailbox.channel})
        self.spawn(remote.pump(), "remote-supervisor")
        await self.supervise(remote, caller)
        await remote.send_event(ServerEvent.of(server_event("session.created", session=render.as_ga(self.session))))
        await remote.send_event(self.supervisor_state())

    async def frame_from_afar(self, message: dict[str, Any]) -> None:
        """``supervise.frame``: one frame of a remote supervisor's socket."""
        remote = self.desk.remote.get(str(message.get("seat") or ""))
        text, size = message.get("text"), message.get("size")
        if remote is not None and (text is None or isinstance(text, str)) and isinstance(size, int):
            await self.receive_supervisor(remote, text, size)

    async def left_from_afar(self, message: dict[str, Any]) -> None:
        """``supervise.leave``: a remote supervisor's socket closed."""
        remote = self.desk.remote.pop(str(message.get("seat") or ""), None)
        if remote is not None:
            self.unfollow(remote)
            await remote.close(CLOSE_POLICY, "left")


class SupervisorRelay:
    """The asking node's side: a supervise WebSocket here whose session another node holds."""

    def __init__(self, layer: BaseChannelLayer, channel: str, mailbox: str, transport: Transport) -> None:
        self.layer, self.channel, self.mailbox, self.transport = layer, channel, mailbox, transport
        self.task: asyncio.Task[None] | None = None

    @classmethod
    async def join(cls, session_or_call_id: str, caller: Caller, transport: Transport) -> SupervisorRelay | None:
        """Asks whichever node holds the session (by its id or its call's) to seat ``caller``; None when no node
        seats it within :data:`JOIN_TIMEOUT_S` (none holds it, or the owner rule refused)."""
        layer = get_channel_layer()
        if layer is None:
            await asyncio.sleep(JOIN_TIMEOUT_S)  # as long as a refusal takes with a channel layer
            return None
        channel = await layer.new_channel()
        ask = {"type": cluster.SUPERVISE_JOIN, "caller": caller.as_message(), "reply_to": channel}
        for group in (cluster.session_group(session_or_call_id), cluster.call_group(session_or_call_id)):
            await layer.group_send(group, ask)
        try:
            answer = await asyncio.wait_for(layer.receive(channel), JOIN_TIMEOUT_S)
        except TimeoutError:
            return None
        if answer.get("type") != cluster.SUPERVISE_JOINED or not isinstance(answer.get("mailbox"), str):
            return None
        relay = cls(layer, channel, answer["mailbox"], transport)
        relay.task = asyncio.create_task(relay._relay(), name=f"supervise-relay-{session_or_call_id}")
        return relay

    async def _relay(self) -> None:
        """The other node's events to this socket, until it says the seat is closed."""
        while True:
            message = await self.layer.receive(self.channel)
            if message.get("type") == cluster.SUPERVISE_EVENT and isinstance(message.get("event"), dict):
                await self.transport.send_event(ServerEvent.of(message["event"]))
            elif message.get("type") == cluster.SUPERVISE_CLOSE:
                await self.transport.close(int(message.get("code") or CLOSE_POLICY), str(message.get("reason") or ""))
                return

    async def receive(self, text: str | None, size: int) -> None:
        """One frame of the supervisor's socket, to the node that holds the session."""
        await self.layer.send(
            self.mailbox, {"type": cluster.SUPERVISE_FRAME, "seat": self.channel, "text": text, "size": size}
        )

    async def leave(self) -> None:
        if self.task is not None:
            self.task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                self.layer.send(self.mailbox, {"type": cluster.SUPERVISE_LEAVE, "seat": self.channel}), SEND_TIMEOUT_S
            )
