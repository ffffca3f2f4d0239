"""Live translation (``/v1/realtime/translations``): how soon a phrase's translation is heard, and how right it is.

Starts ``manage.py serve`` with the real default models (one unit) and opens one translation session per
language, each fed espeak-ng's speech of the same five sentences (Spanish, French, German, Italian: ``--languages``)
in 200 ms frames at real-time pace, as a microphone sends them, with a pause after each phrase, then
``session.close``. A frame is sent when its 200 ms have passed (a microphone's frame is whole only then).

- **End of phrase to first translated audio**: from the moment the phrase's last sample was spoken (its place in
  the stream, on the client's clock) to the first ``session.output_audio.delta`` of that phrase (the server's
  ``elapsed_ms`` says which phrase it ended). It holds the pause the server waits for before it cuts a phrase
  (``pipelines.translation.PAUSE_MS``), Whisper's translate task and the voice's first audio.
- **Words**: each sentence has key words its English must hold (``cat`` and ``house`` or ``home``); the share
  found in the phrase's translation, and the share of the reference translation's words found (a bag of words:
  a looser measure, which a right but differently worded translation lowers).

Run: ``python bench/translation.py`` (``--rounds 2`` sessions per language, ``--no-write``); prints markdown and
rewrites its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf
import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, pct, write_section  # noqa: E402
from pipelines import audio  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402

BEGIN, END = "<!-- translation:begin -->", "<!-- translation:end -->"
RATE = 24000
FRAME_S = 0.2
PAUSE_S = 1.2  # after each phrase: a speaker's breath, longer than the server's cut (400 ms)

# Each language's sentences: (what espeak-ng says, the English reference, the key words: each a tuple of the
# acceptable forms, one of which the translation must hold).
Sentence = tuple[str, str, tuple[tuple[str, ...], ...]]
CAT, DOG, HOSPITAL, BEACH, COLD = (
    (("cat",), ("house", "home")),
    (("black",), ("dog",)),
    (("where",), ("hospital",)),
    (("tomorrow",), ("beach", "sea")),
    (("water",), ("cold",)),
)
SENTENCES: dict[str, list[Sentence]] = {
    "es": [
        ("El gato está en la casa.", "The cat is in the house.", CAT),
        ("Yo tengo un perro negro.", "I have a black dog.", DOG),
        ("¿Dónde está el hospital?", "Where is the hospital?", HOSPITAL),
        ("Mañana vamos a la playa.", "Tomorrow we are going to the beach.", BEACH),
        ("El agua está muy fría.", "The water is very cold.", COLD),
    ],
    "fr": [
        ("Le chat est dans la maison.", "The cat is in the house.", CAT),
        ("J'ai un chien noir.", "I have a black dog.", DOG),
        ("Où est l'hôpital ?", "Where is the hospital?", HOSPITAL),
        ("Demain, nous allons à la plage.", "Tomorrow we are going to the beach.", BEACH),
        ("L'eau est très froide.", "The water is very cold.", COLD),
    ],
    "de": [
        ("Die Katze ist im Haus.", "The cat is in the house.", CAT),
        ("Ich habe einen schwarzen Hund.", "I have a black dog.", DOG),
        ("Wo ist das Krankenhaus?", "Where is the hospital?", HOSPITAL),
        ("Morgen gehen wir an den Strand.", "Tomorrow we are going to the beach.", BEACH),
        ("Das Wasser ist sehr kalt.", "The water is very cold.", COLD),
    ],
    "it": [
        ("Il gatto è in casa.", "The cat is at home.", CAT),
        ("Ho un cane nero.", "I have a black dog.", DOG),
        ("Dov'è l'ospedale?", "Where is the hospital?", HOSPITAL),
        ("Domani andiamo al mare.", "Tomorrow we are going to the sea.", BEACH),
        ("L'acqua è molto fredda.", "The water is very cold.", COLD),
    ],
}
NAMES = {"es": "Spanish", "fr": "French", "de": "German", "it": "Italian"}


def espeak(text: str, voice: str, folder: Path) -> np.ndarray:
    """``text`` spoken by espeak-ng (150 words a minute), float32 at 24 kHz, without its leading and trailing
    silence."""
    path = folder / "phrase.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "-w", str(path), text], check=True)
    samples, rate = sf.read(path, dtype="float32")
    samples = audio.resample(samples, rate, RATE)
    loud = np.flatnonzero(np.abs(samples) > 0.01)
    return samples[loud[0] : loud[-1] + 1] if loud.size else samples


def words(text: str) -> list[str]:
    return [w.strip(".,!?;:\"'¿¡").lower() for w in text.split() if w.strip(".,!?;:\"'¿¡")]


@dataclass
class Phrase:
    language: str
    sentence: Sentence
    ends_at_s: float  # where its last sample is in the stream
    translation: str = ""
    first_audio_s: float | None = None  # end of the phrase to its first translated audio

    @property
    def keys_found(self) -> tuple[int, int]:
        heard = set(words(self.translation))
        keys = self.sentence[2]
        return sum(1 for forms in keys if heard & set(forms)), len(keys)

    @property
    def reference_found(self) -> tuple[int, int]:
        heard, reference = set(words(self.translation)), words(self.sentence[1])
        return sum(1 for w in reference if w in heard), len(reference)


@dataclass
class Session:
    phrases: list[Phrase] = field(default_factory=list)
    events: int = 0


async def translate(server: LiveServer, language: str, folder: Path) -> Session:
    """One session: the language's sentences streamed at real-time pace, the outputs timed and attributed."""
    pieces, phrases, at = [np.zeros(int(0.5 * RATE), np.float32)], [], 0.5
    for sentence in SENTENCES[language]:
        speech = espeak(sentence[0], language, folder)
        at += len(speech) / RATE
        phrases.append(Phrase(language, sentence, at))
        pieces += [speech, np.zeros(int(PAUSE_S * RATE), np.float32)]
        at += PAUSE_S
    stream = np.concatenate(pieces)
    frame = int(FRAME_S * RATE)
    session = Session(phrases)
    async with websockets.connect(f"{server.ws}/translations?model=gpt-realtime-translate", max_size=None) as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        started = time.monotonic()

        async def read() -> None:
            while True:
                event = json.loads(await ws.recv())
                session.events += 1
                kind = event["type"]
                if kind == "session.closed":
                    return
                if kind == "error":
                    print("error:", event["error"], file=sys.stderr)
                if kind not in ("session.output_transcript.delta", "session.output_audio.delta"):
                    continue
                phrase = owner(phrases, event["elapsed_ms"] / 1000)
                if kind == "session.output_transcript.delta":
                    phrase.translation += event["delta"]
                elif phrase.first_audio_s is None:
                    phrase.first_audio_s = time.monotonic() - started - phrase.ends_at_s

        reader = asyncio.create_task(read())
        for index in range(0, len(stream), frame):
            due = started + (index + frame) / RATE  # a microphone's frame is whole once its time has passed
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            chunk = audio.encode(stream[index : index + frame], audio.PCM)
            await ws.send(
                json.dumps({"type": "session.input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()})
            )
        await ws.send(json.dumps({"type": "session.close"}))
        await asyncio.wait_for(reader, 120)
    return session


def owner(phrases: list[Phrase], elapsed_s: float) -> Phrase:
    """The phrase the server cut at ``elapsed_s`` of input: the last one that ended before it."""
    ended = [p for p in phrases if p.ends_at_s <= elapsed_s + 0.05]
    return ended[-1] if ended else phrases[0]


def section(phrases: list[Phrase], command: str, load: float) -> str:
    timed = [p.first_audio_s for p in phrases if p.first_audio_s is not None]
    rows = []
    for language in dict.fromkeys(p.language for p in phrases):
        mine = [p for p in phrases if p.language == language]
        latency = [p.first_audio_s for p in mine if p.first_audio_s is not None]
        keys = [sum(x) for x in zip(*(p.keys_found for p in mine), strict=True)]
        ref = [sum(x) for x in zip(*(p.reference_found for p in mine), strict=True)]
        figures = f"{pct(latency, 50) * 1000:.0f} | {pct(latency, 95) * 1000:.0f}" if latency else "– | –"
        rows.append(
            f"| {NAMES[language]} | {len(mine)} | {len(latency)} | {figures} | "
            f"{keys[0]}/{keys[1]} ({100 * keys[0] / keys[1]:.0f} %) | {100 * ref[0] / ref[1]:.0f} % |"
        )
    total_keys = [sum(x) for x in zip(*(p.keys_found for p in phrases), strict=True)]
    examples = "\n".join(
        f"- {NAMES[p.language]}: “{p.sentence[0]}” → “{p.translation.strip() or '(nothing)'}”"
        for p in phrases
        if p.sentence is SENTENCES[p.language][0] or p.keys_found[0] < p.keys_found[1]
    )
    overall = (
        f"p50 **{pct(timed, 50) * 1000:.0f} ms**, p95 **{pct(timed, 95) * 1000:.0f} ms** over {len(timed)} phrases"
        if timed
        else "no phrase was heard"
    )
    return f"""{BEGIN}
## Live translation: end of a phrase to its first translated audio, and its words (`bench/translation.py`)

{dt.date.today().isoformat()}, {platform.machine()}, {os.cpu_count()} cores; {machine_load(load)}. Real default
models, one unit: Silero cuts the phrases (a 400 ms pause), the multilingual Whisper base translates each into
English (its translate task, the speaker's language kept once it is sure of it), Piper speaks it. espeak-ng's
speech of five sentences per language, streamed in 200 ms frames at real-time pace with {PAUSE_S:g} s between
phrases; one session per language and round. Timed on the client's clock from the phrase's last spoken sample to
its first `session.output_audio.delta`: {overall}; key words found {total_keys[0]}/{total_keys[1]}.

| language | phrases | timed | first audio p50 (ms) | p95 (ms) | key words | reference words |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}

The translations (each language's first sentence, and every one that missed a key word):

{examples}

The latency holds the server's wait for the end of the phrase (400 ms of silence after the last speech frame,
and the VAD's own lag), then Whisper's decoding of the whole phrase and Piper's first audio: a phrase is
translated whole, so the time grows with its length. Re-run: `{command}`.
{END}"""


async def run(languages: list[str], rounds: int) -> list[Phrase]:
    with tempfile.TemporaryDirectory() as tmp:
        server = LiveServer(Path(tmp), env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": "1"})
        server.start(ready_timeout=900)
        try:
            phrases: list[Phrase] = []
            # a first session loads the translation models (once per process): not timed
            await translate(server, languages[0], Path(tmp))
            for _ in range(rounds):
                for language in languages:
                    session = await translate(server, language, Path(tmp))
                    phrases += session.phrases
                    for phrase in session.phrases:
                        late = "–" if phrase.first_audio_s is None else f"{phrase.first_audio_s * 1000:.0f} ms"
                        print(f"{language} {late:>8}  {phrase.sentence[0]} → {phrase.translation.strip()}")
            return phrases
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--languages", nargs="+", default=list(SENTENCES), choices=list(SENTENCES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    phrases = asyncio.run(run(args.languages, args.rounds))
    command = ("python bench/translation.py " + shlex.join(sys.argv[1:])).strip()
    text = section(phrases, command, os.getloadavg()[0])
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
