"""Speech made with espeak-ng (Debian's `espeak-ng`, which `./dev test` installs where it can), and
the word error rate a transcript is held to."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import pytest

needs_espeak = pytest.mark.skipif(
    shutil.which("espeak-ng") is None,
    reason="espeak-ng is not installed (apt-get install espeak-ng; `./dev test` does it as root)",
)


def spoken(text: str, words_per_minute: int = 140) -> bytes:
    """`text` said by espeak-ng's American English voice, as a 16-bit mono WAV (22.05 kHz)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "speech.wav"
        subprocess.run(
            ["espeak-ng", "-v", "en-us", "-s", str(words_per_minute), "-w", str(path), text], check=True
        )
        return path.read_bytes()


def joined(recordings: list[bytes], pause_s: float = 1.0) -> bytes:
    """The recordings one after another with `pause_s` of silence between (same format each)."""
    frames, params = [], None
    for recording in recordings:
        with wave.open(io.BytesIO(recording), "rb") as reader:
            params = reader.getparams()
            frames.append(reader.readframes(reader.getnframes()))
    assert params is not None
    silence = b"\0" * (int(params.framerate * pause_s) * params.sampwidth * params.nchannels)
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setparams(params)
        writer.writeframes(silence.join(frames))
    return out.getvalue()


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word-level edit distance over the reference's length (case and punctuation ignored)."""
    ref, hyp = _words(reference), _words(hypothesis)
    previous = list(range(len(hyp) + 1))
    for i, word in enumerate(ref, start=1):
        current = [i]
        for j, other in enumerate(hyp, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (word != other)))
        previous = current
    return previous[-1] / max(1, len(ref))
