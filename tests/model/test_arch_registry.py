"""The architecture registry is the only place that knows architectures by name."""

from __future__ import annotations

import ast

import pytest

from fitplan.core.model import archs
from fitplan.core.model.archs import registry
from support.models import REPO

APP = REPO / "app" / "fitplan"
REGISTRY = APP / "core" / "model" / "archs"
#: The GGUF header defines the projector file type by its pseudo-architecture (`MMPROJ_ARCHITECTURE`).
FILE_FORMAT = APP / "core" / "gguf" / "header.py"
#: Measured error bands are recorded per architecture: looking them up by name is reading data, not a rule.
MEASUREMENTS = APP / "core" / "estimate" / "accuracy.py"


def test_every_known_architecture_has_a_record() -> None:
    assert set(archs.ARCHITECTURES) == set(archs.KNOWN_ARCHITECTURES)
    for name, rec in archs.ARCHITECTURES.items():
        assert rec.name == name
        assert rec.known


def test_every_table_names_known_architectures_only() -> None:
    assert len(archs.NAME_TABLES) > 30  # the tables were collected (a broken filter would pass an empty loop)
    for table, names in archs.NAME_TABLES.items():
        unknown = names - archs.KNOWN_ARCHITECTURES
        assert not unknown, f"{table} names unknown architectures: {sorted(unknown)}"


def test_unknown_architecture_gets_generic_traits() -> None:
    rec = archs.traits_of("llama-next")
    assert not rec.known
    assert rec.memory.layout is archs.MemoryLayout.KV
    assert rec.hparams.swa.rule is archs.SwaRule.NONE


@pytest.mark.parametrize(
    ("name", "layout"),
    [
        ("llama", archs.MemoryLayout.KV),
        ("bert", archs.MemoryLayout.NONE),
        ("mamba2", archs.MemoryLayout.RECURRENT),
        ("qwen3next", archs.MemoryLayout.HYBRID),
        ("deepseek32", archs.MemoryLayout.DSA),
        ("dots3note", archs.MemoryLayout.DSA_ISWA),
        ("minimax-m3", archs.MemoryLayout.MSA),
        ("deepseek4", archs.MemoryLayout.DSV4),
    ],
)
def test_memory_layout_per_create_memory(name: str, layout: archs.MemoryLayout) -> None:
    # src/llama-model.cpp:llama_model::create_memory's branches, one architecture of each
    assert archs.traits_of(name).memory.layout is layout


def _architecture_tests(tree: ast.AST) -> list[int]:
    """Lines that compare an `architecture` value (or a variable named `arch`) or look it up in a table."""

    def is_arch(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "architecture") or (
            isinstance(node, ast.Name) and node.id in ("arch", "architecture")
        )

    def names_arch(node: ast.Compare) -> bool:
        # comparing two architectures (the shards of one split set) names none
        sides = (node.left, *node.comparators)
        return any(is_arch(x) for x in sides) and not all(is_arch(x) for x in sides)

    lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            ops_ok = all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)
            if ops_ok and names_arch(node):
                lines.append(node.lineno)
        elif (isinstance(node, ast.Subscript) and is_arch(node.slice)) or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and is_arch(node.args[0])
        ):
            lines.append(node.lineno)
    return lines


def test_no_architecture_name_test_outside_the_registry() -> None:
    found: list[str] = []
    for path in sorted(APP.rglob("*.py")):
        if REGISTRY in path.parents or path in (FILE_FORMAT, MEASUREMENTS):
            continue
        for line in _architecture_tests(ast.parse(path.read_text(encoding="utf-8"))):
            found.append(f"{path.relative_to(APP)}:{line}")
    assert found == []


def test_the_scan_finds_an_architecture_test() -> None:
    # the checker itself: a planted comparison and a table lookup are found
    tree = ast.parse("if profile.architecture == 'llama':\n    x = TABLE[profile.architecture]\n")
    assert _architecture_tests(tree) == [1, 2]
    assert _architecture_tests(ast.parse("same = a.architecture == b.architecture")) == []
    assert registry.MMPROJ_ARCHITECTURE == "clip"
