"""Noise suppression of the user's audio with RNNoise (xiph), the library the ``pyrnnoise`` wheel ships.

RNNoise is a small recurrent network (its weights are compiled into the library) that
estimates a gain per frequency band every 10 ms at 48 kHz. The library is loaded once per
process; each session gets its own state, so sessions never share the network's memory.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

import numpy as np

from ._paths import model_file, package_dir

logger = logging.getLogger(__name__)

RATE = 48000
FRAME = 480  # 10 ms at 48 kHz, the frame RNNoise works on
# The output lags the input by two frames (measured: the cross-correlation of speech in and out peaks at
# 959-960 samples); the dry signal is delayed as much before it is mixed back (attenuation limit).
DELAY = 2 * FRAME
_FLOAT_P = ctypes.POINTER(ctypes.c_float)


def default_library_path() -> str:
    """``librnnoise.so`` inside the ``pyrnnoise`` package (found without importing it: its
    ``__init__`` needs audiolab, which only its file-to-file command uses)."""
    return str(package_dir("pyrnnoise") / "librnnoise.so")


class RnnoiseModel:
    """The loaded RNNoise library, shared by every unit of the process."""

    rate = RATE

    def __init__(self, library_path: str | None = None) -> None:
        path = model_file(library_path, default_library_path, "RNNoise library", "pyrnnoise", "S2S_DENOISER_LIBRARY")
        lib = ctypes.CDLL(path)
        lib.rnnoise_create.argtypes = [ctypes.c_void_p]
        lib.rnnoise_create.restype = ctypes.c_void_p
        lib.rnnoise_destroy.argtypes = [ctypes.c_void_p]
        lib.rnnoise_destroy.restype = None
        lib.rnnoise_process_frame.argtypes = [ctypes.c_void_p, _FLOAT_P, _FLOAT_P]
        lib.rnnoise_process_frame.restype = ctypes.c_float
        if lib.rnnoise_get_frame_size() != FRAME:
            raise ValueError(f"{path}: RNNoise frame of {lib.rnnoise_get_frame_size()} samples, expected {FRAME}")
        self._lib = lib
        self.path = path
        logger.info("Loaded RNNoise from %s", Path(path).name)

    def new_state(self, attenuation_limit_db: float | None = None) -> RnnoiseState:
        """A denoiser for one stream; ``attenuation_limit_db`` caps how much it may take away (None: no cap)."""
        return RnnoiseState(self._lib, attenuation_limit_db)


class RnnoiseState:
    """One stream's denoiser: takes 48 kHz float32 chunks of any size, returns the denoised samples so far.

    The output runs ``DELAY`` samples behind the input. With an attenuation limit the output is
    ``denoised + g * (dry - denoised)``, ``g = 10 ** (-limit / 20)``: the removed part comes back at
    ``-limit`` dB, so a band is never pushed down by more than the limit.
    """

    def __init__(self, lib: ctypes.CDLL, attenuation_limit_db: float | None) -> None:
        self._lib = lib
        self._state = lib.rnnoise_create(None)
        if not self._state:
            raise MemoryError("rnnoise_create failed")
        self._dry_gain = 0.0 if attenuation_limit_db is None else 10 ** (-attenuation_limit_db / 20)
        self._pending = np.zeros(0, dtype=np.float32)
        self._dry = np.zeros(DELAY, dtype=np.float32)  # the input, delayed to line up with the output
        self._frame = np.zeros(FRAME, dtype=np.float32)
        self._out = np.zeros(FRAME, dtype=np.float32)

    def process(self, chunk: np.ndarray) -> np.ndarray:
        self._pending = np.concatenate([self._pending, chunk.astype(np.float32, copy=False)])
        whole = len(self._pending) // FRAME * FRAME
        if not whole:
            return np.zeros(0, dtype=np.float32)
        frames, self._pending = self._pending[:whole], self._pending[whole:]
        out = np.empty(whole, dtype=np.float32)
        for at in range(0, whole, FRAME):
            # RNNoise works on samples in the int16 range.
            np.multiply(frames[at : at + FRAME], 32768.0, out=self._frame)
            self._lib.rnnoise_process_frame(
                self._state, self._out.ctypes.data_as(_FLOAT_P), self._frame.ctypes.data_as(_FLOAT_P)
            )
            out[at : at + FRAME] = self._out / 32768.0
        if self._dry_gain:
            dry = np.concatenate([self._dry, frames])
            self._dry = dry[whole:]
            out += self._dry_gain * (dry[:whole] - out)
        return out

    def flush(self) -> np.ndarray:
        """What is still inside: the partial frame and the delay line, pushed out with silence."""
        tail = self._pending
        padding = (-len(tail)) % FRAME + DELAY
        return self.process(np.zeros(padding, dtype=np.float32))[: len(tail) + DELAY]

    def close(self) -> None:
        if self._state:
            self._lib.rnnoise_destroy(self._state)
            self._state = None

    def __del__(self) -> None:
        self.close()
