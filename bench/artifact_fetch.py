"""An artifact set's trip through the MF_ARTIFACTS bucket against copying its files on one disk.

(a) copy: `shutil.copyfile` of each file to another folder on the same disk — the raw limit of
    moving the bytes on this machine, with nothing between;
(b) put: `artifacts.bucket.put_set` (what `artifacts import` does), chunks acked one by one;
(c) fetch: `artifacts.bucket.get_file` of each file (what an agent's cache does before it verifies).
A set of `--files` files of `--mib` MiB each (random bytes, so nothing compresses); one run each,
a fresh nats-server (from the wheel) in a temporary folder. Prints MB/s and (b)/(a), (c)/(a): the
fetch rate is what `artifact_fetch_bytes_per_s` in the scheduler policy should say of a node.
    .venv/bin/python -m bench.artifact_fetch [--files 4] [--mib 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

from artifacts import build_manifest
from artifacts.bucket import get_file, open_bucket, put_set
from eventstore.connection import connect
from eventstore.provision import provision
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.processes import stop_pid


async def measure(url: str, source: Path, scratch: Path) -> tuple[float, float, float, int]:
    manifest = build_manifest(source)
    started = time.perf_counter()
    copies = scratch / "copies"
    copies.mkdir()
    for entry in manifest.files:
        shutil.copyfile(source / entry.path, copies / entry.path)
    copied = time.perf_counter() - started
    connection = await connect(url, "bench-artifact-fetch")
    try:
        await provision(connection.client)
        started = time.perf_counter()
        await put_set(connection.client, source, manifest)
        put = time.perf_counter() - started
        bucket = await open_bucket(connection.client)
        started = time.perf_counter()
        for entry in manifest.files:
            await get_file(bucket, entry, scratch / "fetched" / entry.path)
        fetched = time.perf_counter() - started
    finally:
        await connection.close()
    return copied, put, fetched, manifest.total_bytes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--mib", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        source = scratch / "set"
        source.mkdir()
        for index in range(args.files):
            (source / f"part-{index}.bin").write_bytes(os.urandom(args.mib << 20))
        server = start_nats(scratch / "nats", detach=False)
        try:
            copied, put, fetched, total = asyncio.run(measure(server.url, source, scratch))
        finally:
            stop_pid(server.pid)
    rate = {
        name: total / seconds / 1e6 for name, seconds in (("copy", copied), ("put", put), ("fetch", fetched))
    }
    print(f"set: {args.files} files, {total / 1e6:.0f} MB")
    for name, mb_s in rate.items():
        print(f"{name:<6} {mb_s:8.1f} MB/s   ({mb_s / rate['copy']:.2f} of copy)")


if __name__ == "__main__":
    main()
