#!/usr/bin/env python3
"""The complexity gate: every function in `app/` at cyclomatic complexity 20 or below.

The score is radon's (`radon cc`), counted from the syntax tree: 1, plus one for each `if`, `elif`, conditional
expression (`a if c else b`), `for`, `while` (and their `else`), `except` (and a `try`'s `else`), `assert`,
comprehension `for` and its `if`s, `case` (but the wildcard), and each `and`/`or` beyond the first operand. A
nested function is scored on its own and adds nothing to the function around it; a lambda's expression counts in
the function that holds it. (ruff's mccabe leaves out conditional expressions and boolean operators, so a
function that builds a record out of twenty `x if c else y` passes it.)

A function may be let above the ceiling only by naming it in `ALLOWED` with its score, which may only fall: a
function that rises above its score, an entry whose function is gone or is now within the ceiling, fails the
gate, so the list stays exact. The list is empty.

    python tools/complexity.py [--all]     # --all: print every function over 10
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CEILING = 20

#: file -> {qualified function name: its score}: functions let above the ceiling while they are being split, whose
#: scores may only fall. Empty: every function in `app/` is at the ceiling or below.
ALLOWED: dict[str, dict[str, int]] = {}


def _decisions(node: ast.AST) -> int:
    """Decision points of `node` itself (radon's ComplexityVisitor)."""
    match node:
        case ast.If() | ast.IfExp():
            return 1
        case ast.BoolOp(values=values):
            return len(values) - 1
        case ast.Try(handlers=handlers, orelse=orelse) | ast.TryStar(handlers=handlers, orelse=orelse):
            return len(handlers) + bool(orelse)
        case ast.For(orelse=orelse) | ast.AsyncFor(orelse=orelse) | ast.While(orelse=orelse):
            return 1 + bool(orelse)
        case ast.comprehension(ifs=ifs):
            return 1 + len(ifs)
        case ast.Assert():
            return 1
        case ast.Match(cases=cases):
            wildcard = any(isinstance(c.pattern, ast.MatchAs) and c.pattern.pattern is None for c in cases)
            return max(0, len(cases) - wildcard)
    return 0


def _score(func: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    total = 1
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue  # scored on its own
        total += _decisions(node)
        stack.extend(ast.iter_child_nodes(node))
    return total


def scores(source: str) -> Iterator[tuple[str, int, int]]:
    """(qualified name, line, score) of every function and method in `source`, nested ones included."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                yield name, child.lineno, _score(child)
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(source), "")


def check(root: Path = ROOT, allowed: dict[str, dict[str, int]] | None = None) -> list[str]:
    """What breaks the gate, one line each (empty: it passes)."""
    allowed = ALLOWED if allowed is None else allowed
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    for path in sorted((root / "app").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        allowance = allowed.get(rel, {})
        for name, line, score in scores(path.read_text(encoding="utf-8")):
            limit = allowance.get(name)
            if limit is not None:
                seen.add((rel, name))
                if score > limit:
                    problems.append(f"{rel}:{line}: {name} complexity {score}, above its allowance {limit}")
                elif score <= CEILING:
                    problems.append(f"{rel}:{line}: {name} is now {score}: remove it from ALLOWED")
            elif score > CEILING:
                problems.append(f"{rel}:{line}: {name} complexity {score} > {CEILING}")
    for rel, names in allowed.items():
        problems.extend(
            f"{rel}: {name} is in ALLOWED but no longer exists" for name in names if (rel, name) not in seen
        )
    return problems


def main() -> int:
    if "--all" in sys.argv[1:]:
        for path in sorted((ROOT / "app").rglob("*.py")):
            for name, line, score in scores(path.read_text(encoding="utf-8")):
                if score > 10:
                    print(f"{score:3d}  {path.relative_to(ROOT).as_posix()}:{line} {name}")
    problems = check()
    for p in problems:
        print(p)
    n = sum(len(v) for v in ALLOWED.values())
    print(
        f"complexity: {'ok' if not problems else f'{len(problems)} over'} (ceiling {CEILING}; {n} allowed above)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
