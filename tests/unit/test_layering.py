"""The layers, kept: which of our packages may import which (README's folder table,
docs/engineering.md). Read from the source with `ast`; every import statement counts, those inside
functions and `TYPE_CHECKING` blocks too: each is a dependency all the same."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("streams", "artifacts", "eventstore", "projections", "gateway", "nodeagent", "modelforge")
# What does I/O, or waits on it: none of it belongs in the pure scheduler.
IO_MODULES = (
    "asyncio", "socket", "ssl", "selectors", "subprocess", "http", "urllib", "io", "os", "pathlib",
    "shutil", "tempfile", "sqlite3", "nats", "psycopg", "psycopg_pool", "starlette", "uvicorn",
    "httpx", "requests", "aiohttp",
)  # fmt: skip


@dataclass(frozen=True)
class Import:
    path: str  # the importing file, relative to the repository
    line: int
    module: str  # the importing module, dotted
    target: str  # the imported module, dotted

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.module} imports {self.target}"


def within(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.Import | ast.ImportFrom, module: str, package: bool, known: set[str]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: from the importing module's package, `level - 1` packages up
        anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if package else 0)]
        base = ".".join([*anchor, *([base] if base else [])])
    for alias in node.names:  # `from pkg import mod` imports the module pkg.mod
        submodule = f"{base}.{alias.name}"
        yield submodule if submodule in known else base


@functools.cache
def all_imports() -> tuple[Import, ...]:
    files = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    known = {_module_of(path) for path in files}
    found: list[Import] = []
    for path in files:
        module, package = _module_of(path), path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                relative = str(path.relative_to(ROOT))
                found += [
                    Import(relative, node.lineno, module, t) for t in _targets(node, module, package, known)
                ]
    return tuple(found)


def imports_from(package: str) -> list[Import]:
    found = [i for i in all_imports() if within(i.module, package)]
    assert found, f"no imports read under {package}: is the reader broken?"
    return found


def ours(target: str) -> bool:
    return within(target, *PACKAGES)


def refused(imports: Iterable[Import], rule: str) -> str:
    return f"{rule}; these break it:\n" + "\n".join(f"  {i}" for i in imports)


def test_streams_imports_nothing_of_ours() -> None:
    bad = [i for i in imports_from("streams") if ours(i.target) and not within(i.target, "streams")]
    assert not bad, refused(bad, "streams is the system's language and imports nothing of ours")


def test_artifacts_imports_only_streams() -> None:
    bad = [
        i
        for i in imports_from("artifacts")
        if ours(i.target) and not within(i.target, "artifacts", "streams")
    ]
    assert not bad, refused(bad, "artifacts imports only streams")


def test_eventstore_imports_only_streams() -> None:
    bad = [
        i
        for i in imports_from("eventstore")
        if ours(i.target) and not within(i.target, "eventstore", "streams")
    ]
    assert not bad, refused(bad, "eventstore imports only streams")


def test_nodeagent_never_imports_gateway_or_projections() -> None:
    bad = [i for i in imports_from("nodeagent") if within(i.target, "gateway", "projections")]
    assert not bad, refused(bad, "the node agent never imports the gateway or the projections")


def test_the_scheduler_imports_nothing_that_does_io() -> None:
    scheduler = "gateway.scheduler"
    bad = [
        i
        for i in imports_from(scheduler)
        if within(i.target, *IO_MODULES) or (ours(i.target) and not within(i.target, scheduler, "streams"))
    ]
    assert not bad, refused(bad, "the scheduler is pure: no I/O, and of ours only itself and streams")


def _cycles(edges: dict[tuple[str, str], Import]) -> list[Import]:
    """One import for each edge that lies on a cycle: an edge a -> b where b reaches a."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = {start}, [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    return [example for (a, b), example in sorted(edges.items()) if reaches(b, a)]


def _edges(imports: Iterable[Import], depth: int) -> dict[tuple[str, str], Import]:
    """Imports between units (a module's first `depth` dotted parts), one example per pair."""
    edges: dict[tuple[str, str], Import] = {}
    for i in imports:
        a, b = (".".join(name.split(".")[:depth]) for name in (i.module, i.target))
        if a != b:
            edges.setdefault((a, b), i)
    return edges


def test_the_gateways_sub_packages_form_no_import_cycle() -> None:
    inside = [i for i in imports_from("gateway") if within(i.target, "gateway")]
    bad = _cycles(_edges(inside, 2))
    assert not bad, refused(bad, "the gateway's sub-packages import each other in one direction only")


def test_our_packages_form_no_import_cycle() -> None:
    bad = _cycles(_edges([i for i in all_imports() if ours(i.target)], 1))
    assert not bad, refused(bad, "our top-level packages import each other in one direction only")
