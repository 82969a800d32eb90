"""The comparison with llama-fit-params that `fitplan verify` and the window's Verify button share."""

from __future__ import annotations

from fitplan.core.launch.fit_params import Row, summary


def test_summary_adds_each_device_terms_that_llama_cpp_printed() -> None:
    rows = [
        Row("CUDA0", "weights", 100.0, 90.0),
        Row("CUDA0", "kv + recurrent", 10.0, 10.0),
        Row("Host", "weights", 5.0, None),  # no row of llama.cpp's: left out
    ]
    # CUDA0: 100 + 10 = 110 MiB planned, 90 + 10 = 100 MiB measured: +10.0%
    assert summary(rows) == (
        "Checked with llama-fit-params (weights, KV and compute): CUDA0: planned 110 MiB, llama.cpp 100 MiB (+10.0%)."
    )
    assert summary(rows[2:]) == "llama-fit-params gave no per-device memory to compare with."
