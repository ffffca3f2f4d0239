"""On-disk cache of dequantized GGUF checkpoints, written atomically."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_CACHE_ROOT = Path("~/.cache/s2s/lm")


def cache_key(gguf_path: Path) -> str:
    """``<stem>-<hash>``; the hash covers path, size and mtime, so a changed file misses."""
    st = gguf_path.stat()
    raw = f"{gguf_path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    return f"{gguf_path.stem}-{hashlib.sha256(raw.encode()).hexdigest()[:16]}"


def cached_gguf_folder(gguf_path: Path, cache_root: str | None = None) -> Path | None:
    """Folder of safetensors + tokenizer converted from ``gguf_path``, built on first use.

    Returns None when the cache cannot be written (read-only disk): the caller
    then loads the GGUF directly. Two processes may race to build it; each
    writes a private temp dir and renames it, and the loser drops its copy.
    """
    root = Path(cache_root).expanduser() if cache_root else DEFAULT_CACHE_ROOT.expanduser()
    final = root / cache_key(gguf_path)
    if (final / "config.json").is_file():
        return final
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
    except OSError:
        logger.warning("LM cache %s is not writable; loading the GGUF directly", root)
        return None
    try:
        logger.info("Converting %s into %s (first load only)", gguf_path, final)
        _convert(gguf_path, tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "config.json").is_file():
                raise
            logger.info("Another process filled %s first", final)
    except Exception:
        logger.exception("Could not cache %s; loading the GGUF directly", gguf_path)
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _convert(gguf_path: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    # The weights are plain tensors once dequantized; drop the GGUF marker so
    # save_pretrained accepts them and the cache loads as an ordinary checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
