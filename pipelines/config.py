"""Configuration dataclasses. Django settings build these; pipelines never read the environment."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TurnDetection:
    """Turn detection of a session. ``type`` None means manual commits only."""

    type: str | None = "server_vad"  # server_vad | semantic_vad | None
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: int | None = None


@dataclass(frozen=True)
class SessionSettings:
    """What the stages of a unit need to know of the current session."""

    input_format: str = "audio/pcm"
    output_format: str = "audio/pcm"
    voice: str = "alloy"
    instructions: str = ""
    output_modalities: tuple[str, ...] = ("audio",)
    max_output_tokens: int | None = None
    temperature: float = 0.8
    turn_detection: TurnDetection = field(default_factory=TurnDetection)
    transcription: bool = True
    transcription_language: str | None = None


@dataclass(frozen=True)
class EngineConfig:
    """Which engines a real pipeline uses, and where their models are."""

    device: str = "auto"  # auto | cpu | cuda
    vad_model: str | None = None
    stt_model: str | None = None
    lm_model: str | None = None
    lm_gguf_file: str | None = None
    lm_cache_dir: str | None = None
    lm_max_new_tokens: int = 128
    tts_backend: str = "piper"  # piper | coqui
    tts_model: str | None = None
    tts_config: str | None = None
    tts_model_name: str | None = None
    tts_speaker: str | None = None
    tts_language: str | None = None
    tts_piper_cuda: bool = False
    # Extra voices: (name, model path) pairs, each loaded once like the default voice.
    extra_voices: tuple[tuple[str, str], ...] = ()
    # Partial transcripts while the user speaks, every this many ms of speech (0: none).
    partial_every_ms: int = 1000
    # Start STT, LM and TTS after this much silence, before the silence window closes (0: never).
    speculate_after_ms: int = 96
    # The first spoken piece of an answer goes to TTS after its first clause or this many words (0: whole clauses only).
    first_piece_words: int = 4
    # OpenAI voice name -> configured voice name; "default" is the configured voice.
    voices: tuple[str, ...] = ("alloy", "ash", "ballad", "cedar", "coral", "echo", "marin", "sage", "shimmer", "verse")
    torch_threads: int = 0

    @property
    def all_voices(self) -> tuple[str, ...]:
        return self.voices + tuple(name for name, _ in self.extra_voices if name not in self.voices)


@dataclass(frozen=True)
class PoolConfig:
    size: int = 2
    profile: str = "real"  # real | loopback
    release_timeout_s: float = 5.0
    queue_size: int = 1000
    engines: EngineConfig = field(default_factory=EngineConfig)
