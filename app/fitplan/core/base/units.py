"""Byte units and the one padding rule (GGML_PAD) every size in fitplan is rounded with."""

from __future__ import annotations

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30


def pad(n: int, align: int) -> int:
    """GGML_PAD: `n` rounded up to a multiple of `align`."""
    return (n + align - 1) // align * align
