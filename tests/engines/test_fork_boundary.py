"""Forks plug in behind their protocols (`EngineMemory`, `ForkGraph`, `EngineHooks`): mainline's stages never name
one. The source of `fitplan.core.memory` and `fitplan.core.estimate` is walked: no identifier, attribute or string
(docstrings and comments may cite where a rule comes from) names a fork, and no code there tests the engine."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import fitplan.core

CORE = Path(fitplan.core.__file__).parent
MAINLINE_STAGES = ("memory", "estimate")

#: ik_llama.cpp, beellama.cpp (KVarN) and ollama, as code would spell them
FORK_NAME = re.compile(r"(?i)(?:^|[^a-z])(ik|ik_llama|kvarn\w*|beellama|ollama)(?:[^a-z]|$)")
FORK_ENGINES = {"IK_LLAMA", "BEELLAMA", "OLLAMA"}


def _docstrings(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _words(node: ast.AST) -> list[str]:
    match node:
        case ast.Name(id=name) | ast.Attribute(attr=name) | ast.arg(arg=name):
            return [name]
        case ast.FunctionDef(name=name) | ast.AsyncFunctionDef(name=name) | ast.ClassDef(name=name):
            return [name]
        case ast.keyword(arg=str(name)) | ast.alias(name=name):
            return [name]
        case ast.ImportFrom(module=str(module)):
            return [module]
    return []


def fork_names(source: str) -> list[tuple[int, str]]:
    """(line, word) for every place the source names a fork."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        for word in _words(node):
            if FORK_NAME.search(word):
                found.append((line, word))
        if isinstance(node, ast.Attribute) and node.attr in FORK_ENGINES:
            found.append((line, node.attr))
        text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""
        if text and id(node) not in docs and FORK_NAME.search(text):
            found.append((line, text))
    return found


def test_mainline_stages_name_no_fork() -> None:
    bad = []
    for stage in MAINLINE_STAGES:
        for path in sorted((CORE / stage).rglob("*.py")):
            bad += [f"{path.relative_to(CORE)}:{line}: {word}" for line, word in fork_names(path.read_text())]
    assert bad == [], "mainline names a fork:\n" + "\n".join(bad)


def test_the_walker_finds_fork_names() -> None:
    src = (
        '"""ik_llama.cpp in a docstring is fine."""\n'
        "x = settings.engine is Engine.IK_LLAMA\n"
        "def f(ik_mode: int) -> None: ...\n"
        "y = inputs.kvarn_bits\n"
        'z = "OLLAMA_GPU_OVERHEAD"\n'
        "from fitplan.core.engines.ik import thing\n"
    )
    lines = sorted({line for line, _ in fork_names(src)})
    assert lines == [2, 3, 4, 5, 6]
    assert fork_names("likely = unlike + kind\n") == []
