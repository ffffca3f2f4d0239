"""The data channel's advertised maximum message size, enforced while aiortc reassembles a message.

The server's answer says ``a=max-message-size:262144`` (aiortc's ``LOCAL_MAX_MESSAGE_SIZE``), but
aiortc's SCTP transport keeps every fragment of a message until its last one arrives, whatever its
size: a probe's 24 MiB message cost +36 MiB and 55 s before the session could say
``event_too_large``. :class:`BoundedSctpTransport` counts the bytes a stream holds while it
reassembles; when they pass the maximum, the message being built is dropped, and so is whatever
else of it arrives (its TSNs are still acknowledged, so the sender does not retransmit, and an
ordered stream moves past it). The data channel then emits :data:`TOO_LARGE` with the limit,
and the call answers with an ``error`` (the session goes on, as on the WebSocket).

:func:`install` makes aiortc's peer connections build this transport (aiortc creates it inside a
private method of ``RTCPeerConnection``; the one name it looks up is replaced). Written against
aiortc 1.x's ``InboundStream`` and ``_receive_data_chunk``; ``tests/webrtc/test_hardening.py``
sends an oversize message through a real peer connection.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from aiortc import rtcpeerconnection
from aiortc.rtcsctptransport import (
    SCTP_DATA_LAST_FRAG,
    SCTP_DATA_UNORDERED,
    DataChunk,
    InboundStream,
    RTCSctpTransport,
)
from aiortc.utils import uint16_add

logger = logging.getLogger(__name__)

TOO_LARGE = "s2s-message-too-large"  # emitted on the data channel, with the limit in bytes


def _ordered(chunk: DataChunk) -> bool:
    return not chunk.flags & SCTP_DATA_UNORDERED


class BoundedInboundStream(InboundStream):
    """An inbound stream that holds at most ``limit`` bytes of messages being reassembled."""

    reassembly: list[DataChunk]  # aiortc's, set by its __init__
    sequence_number: int

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.held = 0
        self._dropping: set[int] = set()  # ordered messages (stream seq) dropped before their last fragment
        self._skipped: set[int] = set()  # dropped whole: the stream's sequence moves past them

    def add_bounded(self, chunk: DataChunk) -> tuple[bool, int, bool]:
        """Adds ``chunk`` unless its message is being dropped: (added, bytes let go, a message was dropped now)."""
        seq = chunk.stream_seq
        if _ordered(chunk) and seq in self._dropping:
            if chunk.flags & SCTP_DATA_LAST_FRAG:
                self._dropping.discard(seq)
                self._skipped.add(seq)
            return False, 0, False
        self.add_chunk(chunk)
        self.held += len(chunk.user_data)
        if self.held <= self.limit:
            return True, 0, False
        if _ordered(chunk):
            victims = [c for c in self.reassembly if _ordered(c) and c.stream_seq == seq]
            if any(c.flags & SCTP_DATA_LAST_FRAG for c in victims):
                self._skipped.add(seq)
            else:
                self._dropping.add(seq)
        else:
            victims = [c for c in self.reassembly if not _ordered(c)]
        gone = {id(c) for c in victims}
        self.reassembly = [c for c in self.reassembly if id(c) not in gone]
        freed = sum(len(c.user_data) for c in victims)
        self.held -= freed
        return True, freed, True

    def prune_chunks(self, tsn: int) -> int:
        freed = super().prune_chunks(tsn)
        self.held = sum(len(c.user_data) for c in self.reassembly)
        return freed

    def pop_messages(self) -> Iterator[tuple[int, int, bytes]]:
        while True:
            while self.sequence_number in self._skipped:
                self._skipped.discard(self.sequence_number)
                self.sequence_number = uint16_add(self.sequence_number, 1)
            for message in super().pop_messages():
                self.held -= len(message[2])
                yield message
            if self.sequence_number not in self._skipped:
                return


class BoundedSctpTransport(RTCSctpTransport):
    """aiortc's SCTP transport, with :class:`BoundedInboundStream` streams (see the module's docstring)."""

    def _get_inbound_stream(self, stream_id: int) -> InboundStream:
        if stream_id not in self._inbound_streams:
            self._inbound_streams[stream_id] = BoundedInboundStream(self.getCapabilities().maxMessageSize)
        return self._inbound_streams[stream_id]

    async def _receive_data_chunk(self, chunk: DataChunk) -> None:
        """aiortc's own, but a chunk goes through :meth:`BoundedInboundStream.add_bounded`."""
        self._sack_needed = True
        if self._mark_received(chunk.tsn):
            return
        stream = self._get_inbound_stream(chunk.stream_id)
        assert isinstance(stream, BoundedInboundStream)
        added, freed, dropped = stream.add_bounded(chunk)
        if added:
            self._advertised_rwnd -= len(chunk.user_data)
        self._advertised_rwnd += freed
        if dropped:
            logger.info("data channel stream %s: a message over %s bytes was dropped", chunk.stream_id, stream.limit)
            channel = self._data_channels.get(chunk.stream_id)
            if channel is not None:
                channel.emit(TOO_LARGE, stream.limit)
        for message in stream.pop_messages():
            self._advertised_rwnd += len(message[2])
            await self._receive(*message)
        await self._reset_deferred_streams()


def install() -> None:
    """Makes every aiortc peer connection of this process use :class:`BoundedSctpTransport` (idempotent)."""
    rtcpeerconnection.RTCSctpTransport = BoundedSctpTransport
