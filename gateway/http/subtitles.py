"""A transcript's timed segments as SubRip (`srt`) and WebVTT (`vtt`) subtitles, as OpenAI's
transcription API renders them."""

from __future__ import annotations

from collections.abc import Sequence

from streams.contracts import TranscriptSegment


def timestamp(seconds: float, decimal: str) -> str:
    """HH:MM:SS followed by `decimal` and milliseconds (SubRip writes a comma, WebVTT a dot)."""
    millis = max(0, round(seconds * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    whole, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{whole:02d}{decimal}{millis:03d}"


def _cues(segments: Sequence[TranscriptSegment], decimal: str) -> list[str]:
    return [
        f"{timestamp(s.start_s, decimal)} --> {timestamp(s.end_s, decimal)}\n{s.text}\n" for s in segments
    ]


def srt(segments: Sequence[TranscriptSegment]) -> str:
    """Numbered cues from 1, each followed by a blank line."""
    return "".join(f"{number}\n{cue}\n" for number, cue in enumerate(_cues(segments, ","), start=1))


def vtt(segments: Sequence[TranscriptSegment]) -> str:
    """The WEBVTT header, then each cue followed by a blank line."""
    return "WEBVTT\n\n" + "".join(f"{cue}\n" for cue in _cues(segments, "."))
