"""Followers: second, event-only transports on a live call (``/v1/realtime?call_id=``, its owner's only). They
get the session's events but not its audio, and may send client events.

Each follower is kept with the caller it came as (:class:`realtime.access.owner.Caller`), and the session's
mailbox joins the group of that caller's API key: revoking the key (or deleting it) closes the followers it
reaches on whichever node holds the call, as it ends the sessions the key opened."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from realtime.access.owner import Caller, Owner
from realtime.live.mailbox import Mailbox
from realtime.live.transport import Event, ServerEvent, Transport
from realtime.node import cluster
from realtime.protocol.close_codes import CLOSE_NORMAL, CLOSE_POLICY
from realtime.protocol.events import error_event

logger = logging.getLogger(__name__)

FOLLOWER_SKIPS = {"response.output_audio.delta", "response.audio.delta"}  # followers get events, not audio


class Followers:
    """The followers of :class:`realtime.live.core.SessionCore`."""

    id: str
    mailbox: Mailbox
    owner: Owner
    _followers: dict[Transport, Caller]

    if TYPE_CHECKING:

        async def end_revoked(self) -> None: ...

    async def follow(self, follower: Transport, caller: Caller) -> None:
        """Attaches ``follower``, come as ``caller``: it gets the session's events (no audio) and may send client
        events, until it leaves, the session ends, or the caller's API key is revoked."""
        self._followers[follower] = caller
        if caller.api_key_id is not None:
            await self.mailbox.join(cluster.key_group(caller.api_key_id))

    def unfollow(self, follower: Transport) -> None:
        self._followers.pop(follower, None)

    async def key_revoked(self, api_key_id: int | None) -> None:
        """An API key was revoked or deleted: the session ends if the key owns it (or the message does not say
        which key), else only the followers that came with the key or a secret it minted are closed."""
        if api_key_id is None or api_key_id == self.owner.api_key_id:
            await self.end_revoked()
            return
        refused = error_event("invalid_api_key", "The API key of this connection was revoked or deleted.")
        for follower, caller in list(self._followers.items()):
            if caller.api_key_id != api_key_id:
                continue
            self.unfollow(follower)
            logger.info("session %s: a follower's API key was revoked; closed", self.id)
            try:
                await follower.send_event(ServerEvent.of(refused))
                await follower.close(CLOSE_POLICY, "API key revoked")
            except Exception:  # a follower that went away already
                logger.debug("session %s: a revoked follower could not be closed", self.id)

    async def tell_followers(self, event: ServerEvent | Event) -> None:
        """Sends an event to the followers only (one the transport made itself: a key press); never audio."""
        out = event if isinstance(event, ServerEvent) else ServerEvent.of(event)
        if out.type in FOLLOWER_SKIPS:
            return
        for follower in list(self._followers):
            try:
                await follower.send_event(out)
            except Exception:  # a follower that went away must not stop the session's send loop
                logger.debug("session %s: a follower could not be sent %s", self.id, out.type)

    async def close_followers(self) -> None:
        """The session ended: its followers are closed."""
        followers, self._followers = list(self._followers), {}
        for follower in followers:
            await follower.close(CLOSE_NORMAL, "The call ended")
