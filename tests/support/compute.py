"""Helpers shared by the compute-buffer tests (not a test module)."""

from __future__ import annotations

from typing import Any

from fitplan.core.memory.compute import ComputeInputs


def compute_inputs(*, n_kv_base: int, n_kv_swa: int = 0, **kw: Any) -> ComputeInputs:
    """One ubatch of 512 tokens, all of them outputs, FA on, f16 caches, unless the test says otherwise."""
    base: dict[str, Any] = dict(n_tok=512, n_out=512, n_kv_base=n_kv_base, n_kv_swa=n_kv_swa, flash_attn=True,
                                cache_type_k="f16", cache_type_v="f16")  # fmt: skip
    base.update(kw)
    return ComputeInputs(**base)


def parts(buf: Any) -> dict[str, int]:
    """A compute buffer's named parts, label -> bytes."""
    return {p.label: p.bytes for p in buf.parts}


def assert_curve_matches_evaluate(plan: Any, cells: list[int], n_kv_swa: int = 0) -> None:
    """The curve's vectorised totals (`ComputePlan.totals_array`) equal `evaluate` at each of `cells` (with
    `n_kv_swa` SWA cells), on every device."""
    import numpy as np

    nb = np.array(cells, dtype=np.int64)
    rows = plan.totals_array(nb, np.full_like(nb, n_kv_swa))
    for i, n in enumerate(cells):
        assert rows[-1][i] == plan.evaluate(n, n_kv_swa)[-1].bytes
