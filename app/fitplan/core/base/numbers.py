"""The one parser of numbers written by someone else: flags, GGUF names, HTTP headers, Hub listings, JSON files.

Every number fitplan reads from text it did not write goes through these functions, so each has a bound before it
is converted: at most `MAX_DIGITS` ASCII digits (Python's `int()` refuses 4,300 digits with a ValueError, and accepts
Arabic-Indic digits and underscores that llama.cpp does not), a finite value, and a range the caller states. A
test walks the sources for `int()` and `float()` applied to text anywhere else, and for `json.loads` outside
`loads_json` (`tests/hostile/test_hostile_round2.py`), so a new key cannot skip this module.

`NumberError` is a `ValueError` whose message has no context ("expected a whole number, got '1x'"); the caller
names the flag, key or header in its own one-line error.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "MAX_DIGITS",
    "NumberError",
    "int_or_none",
    "int_reader",
    "is_digits",
    "json_real",
    "loads_json",
    "parse_int",
    "parse_real",
    "real_or_none",
]

#: llama.cpp's flags are 32-bit integers: the usual upper bound of a count or MiB size from a command line.
INT32_MAX = 2**31 - 1
#: More digits than any number fitplan reads has (a uint64 has 20); longer text is refused before conversion.
MAX_DIGITS = 30

_INT = re.compile(r"[+-]?[0-9]{1,30}")  # 30: MAX_DIGITS
_HEX = re.compile(r"[0-9A-Fa-f]{1,30}")
_REAL = re.compile(r"[+-]?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,3})?")
_MAX_SHOWN = 40


class NumberError(ValueError):
    """Text that is not a number in the range asked for; the message says why, without naming the source."""


def _shown(text: str) -> str:
    r = repr(text)
    return r if len(r) <= _MAX_SHOWN else r[: _MAX_SHOWN - 3] + "..."


def _bounded(n: float, lo: float, hi: float) -> None:
    if n < lo:
        raise NumberError(
            f"must be >= {lo:g} (got {n:g})" if isinstance(n, float) else f"must be >= {lo} (got {n})"
        )
    if n > hi:
        raise NumberError(
            f"must be <= {hi:g} (got {n:g})" if isinstance(n, float) else f"must be <= {hi} (got {n})"
        )


def parse_int(text: str, lo: int, hi: int, base: int = 10) -> int:
    """A whole number in [lo, hi] written with ASCII digits (an optional sign, blanks around it allowed);
    `base` 16 reads hexadecimal digits (no `0x`)."""
    s = text.strip() if len(text) <= 4 * MAX_DIGITS else text
    if not (_INT if base == 10 else _HEX).fullmatch(s):
        raise NumberError(f"expected a whole number, got {_shown(text)}")
    n = int(s, base)  # at most MAX_DIGITS digits: never Python's digit limit
    _bounded(n, lo, hi)
    return n


def is_digits(text: str) -> bool:
    """Whether `text` is one or more ASCII digits (`str.isdigit()` is also true of `²` and `١`, which `int()`
    refuses or reads as another number)."""
    return text.isascii() and text.isdigit()


def int_reader(lo: int, hi: int) -> Callable[[str], int]:
    """`parse_int` in [lo, hi] as a one-argument reader (a command-line option's type): refuses with NumberError."""

    def read(text: str) -> int:
        return parse_int(text, lo, hi)

    read.__name__ = f"whole number from {lo} to {hi}"
    return read


def int_or_none(text: str, lo: int, hi: int, base: int = 10) -> int | None:
    """`parse_int`, or None (for names and listings, where a number that cannot be right means "not one of ours")."""
    try:
        return parse_int(text, lo, hi, base)
    except NumberError:
        return None


def parse_real(text: str, lo: float, hi: float) -> float:
    """A finite decimal number in [lo, hi] (`1.5`, `.5`, `1e3`; no nan, inf, hex or underscores)."""
    s = text.strip() if len(text) <= 4 * MAX_DIGITS else text
    if not _REAL.fullmatch(s):
        raise NumberError(f"expected a finite number, got {_shown(text)}")
    x = float(s)
    if not math.isfinite(x):
        raise NumberError(f"{_shown(text)} is not a finite number")
    _bounded(x, lo, hi)
    return x


def real_or_none(text: str, lo: float, hi: float) -> float | None:
    try:
        return parse_real(text, lo, hi)
    except NumberError:
        return None


def _json_int(text: str) -> int | float:
    """A JSON integer: more than MAX_DIGITS digits reads as an infinity, which every field check refuses alone."""
    if len(text.lstrip("-")) > MAX_DIGITS:
        return -math.inf if text.startswith("-") else math.inf
    return int(text, 10)


def loads_json(text: str | bytes) -> Any:
    """`json.loads` with bounded integers (see `_json_int`); too deep a nesting or bad UTF-8 is a ValueError."""
    try:
        return json.loads(text, parse_int=_json_int)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: {exc.reason}") from exc


def json_real(value: object, lo: float = 0.0, hi: float = 1e18) -> float:
    """A number of a parsed JSON document (`loads_json`: a bundled data file's field): an int or a float within
    [lo, hi]; anything else (text, a bool, NaN, an infinity) is a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise ValueError(f"{_shown(repr(value))} is not a number from {lo:g} to {hi:g}")
    return float(value)
