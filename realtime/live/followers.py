"""Followers: second, event-only transports on a live call (``/v1/realtime?call_id=``, its owner's only). They
get the session's events but not its audio, and may send client events."""

from __future__ import annotations

import logging

from realtime.live.transport import Event, ServerEvent, Transport

logger = logging.getLogger(__name__)

FOLLOWER_SKIPS = {"response.output_audio.delta", "response.audio.delta"}  # followers get events, not audio


class Followers:
    """The followers of :class:`realtime.live.core.SessionCore`."""

    id: str
    _followers: set[Transport]

    def follow(self, follower: Transport) -> None:
        """Attaches ``follower``: it gets the session's events (no audio) and may send client events."""
        self._followers.add(follower)

    def unfollow(self, follower: Transport) -> None:
        self._followers.discard(follower)

    async def tell_followers(self, event: ServerEvent | Event) -> None:
        """Sends an event to the followers only (one the transport made itself: a key press)."""
        out = event if isinstance(event, ServerEvent) else ServerEvent.of(event)
        for follower in list(self._followers):
            try:
                await follower.send_event(out)
            except Exception:  # a follower that went away must not stop the session's send loop
                logger.debug("session %s: a follower could not be sent %s", self.id, out.type)
