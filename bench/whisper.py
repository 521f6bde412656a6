"""Whisper tiny.en's real-time factor through the capability server vs CTranslate2 called directly.

(a) direct: what a caller of CTranslate2 does by hand: the WAV decoded, resampled and turned into
    log-mel windows (the same numpy front end; CTranslate2 takes features, not audio), then
    `ctranslate2.models.Whisper.generate` on the N files' windows in one call, greedy, int8 on CPU;
(b) served: N concurrent requests (contract JSON, base64 WAV) into the `TranscriptionServer` a
    worker runs, whose dynamic batcher groups them: WAV decoding, resampling, features, the same
    generate, segments and the contract's checks included.
Real-time factor here: seconds of audio transcribed per second of wall time (higher is better).
The files are espeak-ng sentences joined to about 20 s each (espeak-ng must be installed).
    .venv/bin/python -m bench.whisper [--files 1 4] [--rounds 2]
Target: (b)/(a) ≥ 0.9 at 1 and 4 concurrent files.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import tempfile
import time
import wave
from pathlib import Path
from typing import Any

import ctranslate2
import msgspec
import numpy as np

from nodeagent.adapters.audio import decode_wav, resample
from nodeagent.adapters.whisper import WhisperConfig, WhisperTokens, WhisperTranscriptionAdapter
from nodeagent.adapters.whisper_features import SAMPLE_RATE, log_mel_window, windows
from nodeagent.models.whisper import pull_whisper_tiny_en
from nodeagent.runtimes.base import RuntimeOptions
from nodeagent.runtimes.ctranslate2 import MAX_TOKENS, CTranslate2Whisper
from nodeagent.settings import DEFAULT_CPU_THREADS
from nodeagent.worker.speech_server import TranscriptionServer
from streams.contracts import TranscriptionInput
from tests.support.espeak import joined, spoken

SENTENCES = [
    "Please call me tomorrow morning.",
    "I would like a cup of coffee with milk.",
    "We will meet at the train station at noon.",
    "The weather is sunny and warm today.",
]


def recordings(count: int) -> list[bytes]:
    """`count` different files of about 20 s (the sentences rotated, so no two are the same)."""
    return [joined([spoken(SENTENCES[(i + k) % 4]) for k in range(6)], pause_s=1.0) for i in range(count)]


def seconds_of(recording: bytes) -> float:
    with wave.open(io.BytesIO(recording), "rb") as reader:
        return reader.getnframes() / reader.getframerate()


def direct(model: Any, start: int, files: list[bytes]) -> float:
    """Wall seconds of features and one batched generate for the files' windows."""
    started = time.perf_counter()
    rows = [
        log_mel_window(window)
        for f in files
        for window in windows(resample(decode_wav(f), SAMPLE_RATE).samples)
    ]
    features = ctranslate2.StorageView.from_array(np.stack(rows))
    model.generate(features, [[start]] * len(rows), beam_size=1, max_length=MAX_TOKENS)
    return time.perf_counter() - started


async def served(server: TranscriptionServer, files: list[bytes]) -> float:
    payloads = [
        msgspec.json.encode(TranscriptionInput(audio_base64=base64.b64encode(f).decode("ascii")))
        for f in files
    ]
    started = time.perf_counter()
    await asyncio.gather(*(server.serve(payload) for payload in payloads))
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    folder = pull_whisper_tiny_en(Path(tempfile.mkdtemp()) / "whisper", install_missing=False)
    threads = DEFAULT_CPU_THREADS
    runtime = CTranslate2Whisper()
    runtime.load(folder / "model.bin", RuntimeOptions(intra_op_threads=threads))
    tokens = WhisperTokens(folder / "tokenizer.json")
    server = TranscriptionServer(WhisperTranscriptionAdapter(tokens, WhisperConfig()), runtime, 8)
    raw = ctranslate2.models.Whisper(str(folder), device="cpu", compute_type="int8", intra_threads=threads)
    print(f"whisper tiny.en, CPU int8, {threads} threads")
    for count in args.files:
        files = recordings(count)
        audio_s = sum(seconds_of(f) for f in files)
        direct_s = min(direct(raw, tokens.start, files) for _ in range(args.rounds))
        served_s = min([await served(server, files) for _ in range(args.rounds)])
        print(
            f"{count} file(s), {audio_s:.1f} s of audio: direct RTF {audio_s / direct_s:.2f}, "
            f"served RTF {audio_s / served_s:.2f}, served/direct {direct_s / served_s:.2f} (target ≥ 0.9)"
        )
    await server.close()


if __name__ == "__main__":
    asyncio.run(main())
