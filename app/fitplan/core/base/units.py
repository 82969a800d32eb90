"""Byte units, the one padding rule (GGML_PAD) every size in fitplan is rounded with, and how a context length and
a size are written for people."""

from __future__ import annotations

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30


def pad(n: int, align: int) -> int:
    """GGML_PAD: `n` rounded up to a multiple of `align`."""
    return (n + align - 1) // align * align


def fmt_ctx(n: int) -> str:
    """A context length for people: 32K, 10M, 1,000 (K and M are 1024 and 1024 x 1024 tokens)."""
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    return f"{n:,}"


def fmt_gib(n: int | float) -> str:
    """A size in GiB with one decimal: 22.0 GiB."""
    return f"{n / GIB:.1f} GiB"
