"""The complexity gate (`tools/complexity.py`): radon's count, conditional expressions and boolean operators
included, with a ceiling of 20 for every function in `app/` outside its named allowances."""

from __future__ import annotations

from pathlib import Path

from support.tools import load_tool

gate = load_tool("tools/complexity.py")

SAMPLE = """
def record(a, b, c):
    x = 1 if a else 2                  # +1 conditional expression
    if a and b or c:                   # +1 if, +2 boolean operands beyond the first
        pass
    elif b:                            # +1
        pass
    for i in range(3):                 # +1 for, +1 for's else
        pass
    else:
        pass
    try:
        pass
    except ValueError:                 # +1
        pass
    ys = [i for i in a if i if i > 1]  # +1 comprehension, +2 ifs
    f = lambda v: v if v else 0        # +1: a lambda counts where it is
    def inner(v):                      # scored on its own
        return v if v else 0
    return x, ys, f, inner

class K:
    def m(self, v):
        match v:                       # +2: two cases besides the wildcard
            case 1:
                return 1
            case 2:
                return 2
            case _:
                return 0
"""


def test_the_score_counts_what_radon_counts() -> None:
    got = {name: score for name, _, score in gate.scores(SAMPLE)}
    # record: 1 + 1 + (1 + 2) + 1 + (1 + 1) + 1 + (1 + 2) + 1 = 13; inner: 1 + 1; K.m: 1 + 2
    assert got == {"record": 13, "record.inner": 2, "K.m": 3}


def test_the_gate_fails_above_the_ceiling_and_keeps_allowances_exact(tmp_path: Path) -> None:
    body = "\n".join(f"    if v == {i}:\n        return {i}" for i in range(21))
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "m.py").write_text(
        f"def big(v):\n{body}\n    return 0\n\ndef small(v):\n    return v\n"
    )
    assert gate.check(tmp_path, {}) == [f"app/m.py:1: big complexity 22 > {gate.CEILING}"]
    assert gate.check(tmp_path, {"app/m.py": {"big": 22}}) == []
    assert gate.check(tmp_path, {"app/m.py": {"big": 21}}) == [
        "app/m.py:1: big complexity 22, above its allowance 21"
    ]
    assert gate.check(tmp_path, {"app/m.py": {"big": 22, "small": 5}}) == [
        "app/m.py:46: small is now 1: remove it from ALLOWED"  # def big, 21 x 2 lines of ifs, return, blank
    ]
    assert gate.check(tmp_path, {"app/m.py": {"big": 22, "gone": 30}}) == [
        "app/m.py: gone is in ALLOWED but no longer exists"
    ]


def test_the_repository_passes_the_gate() -> None:
    assert gate.check() == []
