from __future__ import annotations

from pathlib import Path

import numpy as np

from pipelines.backends.piper_tts import default_voice_path


def test_the_default_voice_is_the_packaged_joe_voice():
    path = Path(default_voice_path())
    assert path.is_file()
    assert Path(f"{path}.json").is_file()


def test_the_default_voice_speaks_audibly_at_its_rate(piper_engine):
    chunks = list(piper_engine.synthesize("Hello there. How are you today?"))
    assert piper_engine.sample_rate == 22050
    for chunk in chunks:
        assert len(chunk) > piper_engine.sample_rate // 4
        assert np.abs(chunk).max() > 0.05
