"""`modelforge backup FILE` and `modelforge restore FILE`: the event log to a file and back."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
from pathlib import Path
from typing import Any

from tqdm import tqdm


def register(sub: Any) -> None:
    made = sub.add_parser("backup", help="write a snapshot of the event streams to a file, with its digest")
    made.add_argument("file", type=Path, help="the backup file to write (a tar archive)")
    made.set_defaults(handler=_cmd_backup)
    back = sub.add_parser(
        "restore", help="restore the event streams from a backup into a deployment without them"
    )
    back.add_argument("file", type=Path, help="a file `modelforge backup` wrote")
    back.set_defaults(handler=_cmd_restore)


async def _backup(file: Path) -> None:
    from eventstore.backup import backup
    from eventstore.connection import CLI_CONNECT_S, connect

    connection = await connect(None, "modelforge-backup", first_connect_s=CLI_CONNECT_S)
    try:
        with tqdm(unit="B", unit_scale=True, desc="snapshot") as bar:
            manifest = await backup(connection.client, file, bar.update)
    finally:
        await connection.close()
    for entry in manifest.streams:
        print(
            f"{entry.stream:<12} {entry.messages} messages up to sequence {entry.last_seq}, {entry.size} bytes"
        )
    print(f"{file}  sha256 {_sha256(file)}")


async def _restore(file: Path) -> None:
    from eventstore.backup import read_manifest, restore
    from eventstore.connection import CLI_CONNECT_S, connect

    total = sum(entry.size for entry in read_manifest(file).streams)
    connection = await connect(None, "modelforge-restore", first_connect_s=CLI_CONNECT_S)
    try:
        with tqdm(total=total, unit="B", unit_scale=True, desc="restore") as bar:
            manifest = await restore(connection.client, file, bar.update)
    finally:
        await connection.close()
    for entry in manifest.streams:
        print(f"{entry.stream:<12} restored: {entry.messages} messages up to sequence {entry.last_seq}")


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as data:
        while chunk := data.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _cmd_backup(args: argparse.Namespace) -> int:
    asyncio.run(_backup(args.file))
    return 0


def _cmd_restore(args: argparse.Namespace) -> int:
    from eventstore.backup import BackupFailed

    try:
        asyncio.run(_restore(args.file))
    except BackupFailed as refused:
        print(f"modelforge restore: {refused}")
        return 2
    return 0
