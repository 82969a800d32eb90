"""The cache of compiled dataclass methods (`core.base.codecache`): a class built from cached code is the class
`dataclasses` builds, a second process compiles nothing, and a damaged or unwritable file only costs the time."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fitplan.core.base import codecache
from fitplan.core.base.codecache import CodeCache


@pytest.fixture
def routed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[CodeCache]]:
    """`dataclasses.exec` pointed at the cache the test puts first in the list (restored afterwards)."""
    caches: list[CodeCache] = []

    def route(source: object, globals: dict[str, object] | None = None, locals: object = None) -> None:
        caches[0].exec(source, globals, locals)

    monkeypatch.setattr(dataclasses, "exec", route, raising=False)
    yield caches


def make_class() -> type:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Point:
        x: int
        y: float = 1.5
        tags: tuple[str, ...] = ()

    return Point


def test_the_core_installs_the_cache() -> None:
    assert codecache._installed is not None
    assert dataclasses.exec == codecache._installed.exec  # type: ignore[attr-defined]


@pytest.fixture
def writes_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def test_a_cached_class_is_the_class_dataclasses_builds(
    routed: list[CodeCache], tmp_path: Path, writes_bytecode: None
) -> None:
    path = tmp_path / "methods.marshal"
    routed.append(CodeCache(path))
    first = make_class()
    assert routed[0].compiled >= 6  # __init__, __repr__, __eq__, __hash__, __setattr__, __delattr__
    routed[0].save()
    assert path.is_file()

    routed[0] = CodeCache(path)  # the next process
    second = make_class()
    assert routed[0].compiled == 0
    for name in ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__"):
        assert getattr(first, name).__code__.co_code == getattr(second, name).__code__.co_code, name
    p = second(2, tags=("a",))
    assert repr(p).endswith("Point(x=2, y=1.5, tags=('a',))")
    assert p == second(2, 1.5, ("a",)) and hash(p) == hash(second(2, 1.5, ("a",)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3  # type: ignore[misc]
    # compiled as dataclasses compiles it: no `from __future__ import annotations` inherited from the cache's module
    assert second.__init__.__annotations__["return"] is None  # type: ignore[misc]


def test_a_damaged_file_is_compiled_again(
    routed: list[CodeCache], tmp_path: Path, writes_bytecode: None
) -> None:
    path = tmp_path / "methods.marshal"
    path.write_bytes(b"\xffnot marshal data")
    routed.append(CodeCache(path))
    assert routed[0].loaded == {}
    point = make_class()
    assert routed[0].compiled >= 6 and point(1).x == 1
    routed[0].save()
    assert CodeCache(path).loaded  # rewritten whole


def test_an_unwritable_folder_costs_only_the_time(
    routed: list[CodeCache], tmp_path: Path, writes_bytecode: None
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    routed.append(CodeCache(blocker / "sub" / "methods.marshal"))  # a folder below a file cannot be made
    make_class()
    routed[0].save()
    assert not (blocker / "sub").exists() and list(tmp_path.iterdir()) == [blocker]


def test_a_start_after_a_start_compiles_no_method_of_the_core() -> None:
    """Fresh interpreters importing the planner: once one has run, the next takes every method from the file."""
    probe = (
        "from fitplan.core.base import codecache; import fitplan.core.plan.planner; "
        "c = codecache._installed; print(c.compiled, len(c.used))"
    )

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def start() -> tuple[int, int]:
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
        )
        compiled, used = done.stdout.split()
        return int(compiled), int(used)

    start()
    compiled, used = start()
    assert compiled == 0
    assert used > 600  # six methods or so for each of the hundred-odd frozen dataclasses the planner imports


def test_no_file_where_python_writes_no_bytecode(
    routed: list[CodeCache], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # PYTHONDONTWRITEBYTECODE, python -B
    path = tmp_path / "methods.marshal"
    routed.append(CodeCache(path))
    make_class()
    routed[0].save()
    assert routed[0].compiled and not path.exists()
