"""The four stage kinds of a unit (VAD, STT, LM, TTS), each behind :class:`Stage`."""
