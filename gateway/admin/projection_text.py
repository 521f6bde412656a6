"""`modelforge projection status`: the projection status (`GET /admin/v1/projection`) as text."""

from __future__ import annotations

from typing import Any

HEADINGS = ("stream", "checkpoint", "first seq", "last seq", "lag", "projected at")


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(w) if i in (0, len(row) - 1) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _notes(stream: dict[str, Any]) -> list[str]:
    name, notes = stream["stream"], []
    if stream["lag"] < 0:
        notes.append(
            f"{name}: the checkpoint is past the stream's last sequence: the read model was built from"
            " another stream (check that DATABASE_URL and NATS_URL name one deployment)"
        )
    if stream["gone_unread"] > 0:
        notes.append(
            f"{name}: {stream['gone_unread']} message(s) after the checkpoint left the stream unread;"
            " the projector records them as a gap when it reads on"
        )
    return notes


def render(status: dict[str, Any]) -> str:
    streams: list[dict[str, Any]] = status["streams"]
    rows = [HEADINGS] + [
        (
            s["stream"],
            str(s["checkpoint"]),
            str(s["first_seq"]),
            str(s["last_seq"]),
            str(s["lag"]),
            s["projected_at"] or "never",
        )
        for s in streams
    ]
    lines = _table(rows)
    lines += [note for s in streams for note in _notes(s)]
    for halt in status.get("halted", []):  # absent from a gateway older than this CLI
        lines.append(
            f"{halt['stream']}: HALTED at sequence {halt['seq']} ({halt['event_type']}) since"
            f" {halt['halted_at']}: {halt['reason']}"
        )
        lines.append(
            "  nothing after it is applied: fix the cause (or upgrade the projector) and start it;"
            " it resumes at that event"
        )
    gaps: list[dict[str, Any]] = status["gaps"]
    total = status["gaps_total"]
    if not total:
        lines.append("gaps: none recorded")
        return "\n".join(lines)
    shown = f", the newest {len(gaps)} shown" if len(gaps) < total else ""
    lines.append(f"gaps: {total} recorded{shown}")
    for gap in gaps:
        lines.append(
            f"  {gap['stream']} {gap['first_seq']}-{gap['last_seq']} ({gap['count']} message(s))"
            f" detected {gap['detected_at']}: {gap['reason']}"
        )
    return "\n".join(lines)
