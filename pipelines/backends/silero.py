"""Silero VAD on onnxruntime: one shared session, per-session recurrent state."""

from __future__ import annotations

import logging

import numpy as np

from ._paths import package_dir

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
FRAME_SAMPLES = 512
CONTEXT_SAMPLES = 64


def default_model_path() -> str:
    """The ``silero_vad.onnx`` shipped in the ``silero_vad`` package."""
    return str(package_dir("silero_vad") / "data" / "silero_vad.onnx")


class SileroVadModel:
    """The loaded ONNX model; ``InferenceSession.run`` is safe to call from many threads."""

    def __init__(self, model_path: str | None = None) -> None:
        import onnxruntime

        self.model_path = model_path or default_model_path()
        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(
            self.model_path, sess_options=opts, providers=["CPUExecutionProvider"]
        )
        logger.info("Loaded Silero VAD from %s", self.model_path)

    def new_state(self) -> SileroVadState:
        """A fresh per-session state bound to this model."""
        return SileroVadState(self)

    def _run(self, x: np.ndarray, state: np.ndarray) -> tuple[float, np.ndarray]:
        out, new_state = self._session.run(
            None,
            {"input": x, "state": state, "sr": np.array(SAMPLE_RATE, dtype=np.int64)},
        )
        return float(out[0][0]), new_state


class SileroVadState:
    """Per-session context (last 64 samples) and RNN state, as silero's ``OnnxWrapper`` keeps."""

    def __init__(self, model: SileroVadModel) -> None:
        self._model = model
        self.reset()

    def reset(self) -> None:
        """Forget everything heard so far (a new session or utterance)."""
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros((1, CONTEXT_SAMPLES), dtype=np.float32)

    def prob(self, frame: np.ndarray) -> float:
        """Speech probability of one 512-sample float32 frame of 16 kHz mono audio."""
        frame = np.asarray(frame, dtype=np.float32).reshape(-1)
        if frame.shape[0] != FRAME_SAMPLES:
            raise ValueError(f"Silero VAD needs {FRAME_SAMPLES} samples per frame, got {frame.shape[0]}")
        x = np.concatenate([self._context, frame[np.newaxis, :]], axis=1)
        p, self._state = self._model._run(x, self._state)
        self._context = x[:, -CONTEXT_SAMPLES:]
        return p
