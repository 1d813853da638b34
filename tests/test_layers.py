"""The layering of the package, read from its source.

* No pure module (all but ``aio``, ``agent``, ``cli``, the SQLite store and
  ``check-host``'s driver) imports asyncio, sqlite3, the asyncio layer, the
  agent layer, the commands, the SQLite store or an optional dependency, not
  even inside a function.
* The layers above the pure core are ranked: the I/O layer (``aio``, the
  SQLite store, ``check-host``'s live runs), then the agent layer (``agent``,
  with the built-in agents and the serving runtime), then the commands
  (``cli``).  No module imports one of a higher rank, type-only imports and
  imports inside functions included.
* No two subpackages have names that differ only by a plural ``s``.
* The host core's modules import each other without a cycle, type-only
  imports included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "agenthost_protocol"
IO_LAYERS = ("aio", "agent", "cli")
IO_MODULES = ("__main__.py", "sqlite_store.py", "asgi.py",
              # check-host's live runs: threads, sockets, processes (the checks are pure)
              "hostcheck/driver.py", "hostcheck/machine.py")
# rank of each layer above the pure core (0); a module imports none of a higher rank
RANKS = {"aio": 1, "asgi": 1, "sqlite_store": 1, "hostcheck": 1, "agent": 2, "cli": 3}
FORBIDDEN = ("asyncio", "sqlite3", "websockets", "acp", "orjson_never_required")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, absolute, anywhere in it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            found.add(prefix)
            found.update(f"{prefix}.{alias.name}" for alias in node.names)
    return found


def pure_modules() -> list[Path]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in IO_LAYERS or str(relative) in IO_MODULES:
            continue
        out.append(path)
    return out


@pytest.mark.parametrize("path", pure_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_modules_import_no_io(path: Path) -> None:
    bad = sorted(
        name for name in imports_of(path)
        if name.split(".")[0] in FORBIDDEN
        or name.split(".")[:2] in [[PACKAGE.name, layer] for layer in IO_LAYERS]
        or name.startswith(f"{PACKAGE.name}.sqlite_store")
    )
    assert bad == [], f"{path.relative_to(PACKAGE)} imports {bad}"


def rank_of(module: str) -> int:
    parts = module.split(".")
    if parts[0] != PACKAGE.name or len(parts) < 2:
        return 0
    return RANKS.get(parts[1], 0)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_higher_layer(path: Path) -> None:
    mine = rank_of(module_name(path))
    above = sorted(name for name in imports_of(path) if rank_of(name) > mine)
    assert above == [], f"{path.relative_to(PACKAGE)} (rank {mine}) imports {above}"


def test_the_ranks_name_what_is_there() -> None:
    # a renamed layer must not leave its rule behind, checking nothing
    for name in RANKS:
        assert (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file(), name


def test_no_two_packages_differ_by_a_plural() -> None:
    names = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    twins = sorted(name for name in names if f"{name}s" in names)
    assert twins == []


def test_the_host_core_has_no_import_cycle() -> None:
    host = PACKAGE / "host"
    # the package's __init__ gathers the modules: it is no part of a cycle among them
    modules = {module_name(p): p for p in host.glob("*.py") if p.name != "__init__.py"}
    graph = {
        name: {other for other in imports_of(path) if other in modules and other != name}
        for name, path in modules.items()
    }
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                raise AssertionError(" -> ".join([*trail, node, nxt]))
            if nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [])
