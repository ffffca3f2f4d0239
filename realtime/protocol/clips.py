"""Responses whose inline ``input`` carries audio: each starts once its clips are transcribed.

The conversation sends each clip through the unit's VAD and STT under an id the client never
sees; this keeps which response waits for which clip, and the transcripts as they come.
"""

from __future__ import annotations

from pipelines import messages as m


class Clips:
    """Responses whose inline ``input`` has audio: each waits for the transcripts of its clips."""

    def __init__(self) -> None:
        # response id -> (its request, clip id -> transcript or None while it is awaited)
        self._waiting: dict[str, tuple[m.ResponseRequest, dict[str, str | None]]] = {}
        self._owner: dict[str, str] = {}  # clip id -> response id

    def hold(self, req: m.ResponseRequest, clips: dict[str, bytes]) -> None:
        self._waiting[req.response_id] = (req, dict.fromkeys(clips))
        self._owner.update(dict.fromkeys(clips, req.response_id))

    def owns(self, clip_id: str) -> bool:
        return clip_id in self._owner

    def transcribed(self, clip_id: str, text: str) -> tuple[m.ResponseRequest, dict[str, str]] | None:
        """Records a transcript; returns the request and all its transcripts once the last one is in."""
        response_id = self._owner.pop(clip_id)
        if response_id not in self._waiting:  # given up: another of its clips failed
            return None
        req, transcripts = self._waiting[response_id]
        transcripts[clip_id] = text
        if any(value is None for value in transcripts.values()):
            return None
        del self._waiting[response_id]
        return req, {key: value or "" for key, value in transcripts.items()}

    def give_up(self, clip_id: str) -> str | None:
        """A clip could not be transcribed: its response is dropped. Returns its id (None: dropped already)."""
        response_id = self._owner.pop(clip_id)
        return response_id if self._waiting.pop(response_id, None) is not None else None
