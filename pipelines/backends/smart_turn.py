"""Smart Turn v3 end-of-turn detection on onnxruntime: one shared session for every unit.

The model reads Whisper log-mel features of the last 8 s of a turn (left-padded
with zeros when shorter, as its authors do) and gives the probability that the
speaker has finished. The ONNX file ships inside the ``pipecat-ai`` wheel,
installed without its dependencies; the ``pipecat`` package is located on disk,
never imported.
"""

from __future__ import annotations

import logging

import numpy as np

from pipelines.errors import ModelLoadError

from ._paths import model_file, package_dir

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
WINDOW_S = 8
WINDOW_SAMPLES = SAMPLE_RATE * WINDOW_S
MODEL_FILE = "smart-turn-v3.2-cpu.onnx"


def default_model_path() -> str:
    """The ``smart-turn-v3.2-cpu.onnx`` shipped in the ``pipecat-ai`` wheel."""
    return str(package_dir("pipecat") / "audio" / "turn" / "smart_turn" / "data" / MODEL_FILE)


def last_window(samples: np.ndarray) -> np.ndarray:
    """The last 8 s of 16 kHz ``samples``, left-padded with zeros to exactly 8 s."""
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)[-WINDOW_SAMPLES:]
    return np.pad(samples, (WINDOW_SAMPLES - len(samples), 0))


class SmartTurnModel:
    """The loaded model. ``InferenceSession.run`` and the feature extractor hold no
    per-call state, so the units' VAD threads call :meth:`probability` at once,
    each holding up only its own unit."""

    def __init__(self, model_path: str | None = None, threads: int = 1) -> None:
        import onnxruntime
        from transformers import WhisperFeatureExtractor

        self.model_path = model_file(
            model_path, default_model_path, "Smart Turn model", "pipecat-ai", "S2S_SMART_TURN_MODEL"
        )
        # Threads that sleep when idle, as Piper's (pipelines/backends/piper_tts.py): a spinning one would
        # take a core from the STT and the LM, which run beside the turn check.
        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = max(1, threads)
        opts.inter_op_num_threads = 1
        opts.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        try:
            self._session = onnxruntime.InferenceSession(
                self.model_path, sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise ModelLoadError(
                f"Smart Turn model at {self.model_path} could not be loaded (S2S_SMART_TURN_MODEL): {exc}"
            ) from exc
        inputs = [i.name for i in self._session.get_inputs()]
        if inputs != ["input_features"]:
            raise ModelLoadError(f"{self.model_path} is not a Smart Turn v3 model (inputs {inputs})")
        # Whisper's log-mel over an 8 s window: 80 mel bins x 800 frames.
        self._features = WhisperFeatureExtractor(chunk_length=WINDOW_S)
        self.probability(np.zeros(SAMPLE_RATE, dtype=np.float32))  # first-call costs now, not in a session
        logger.info("Loaded Smart Turn from %s", self.model_path)

    def probability(self, samples: np.ndarray) -> float:
        """Probability that the turn in 16 kHz float32 ``samples`` is finished (0..1)."""
        features = self._features(
            last_window(samples),
            sampling_rate=SAMPLE_RATE,
            padding="max_length",
            max_length=WINDOW_SAMPLES,
            truncation=True,
            do_normalize=True,
            return_tensors="np",
        ).input_features.astype(np.float32)
        (out,) = self._session.run(None, {"input_features": features})
        return float(np.asarray(out).reshape(-1)[0])
