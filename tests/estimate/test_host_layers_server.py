"""The first GPU's buffer where it runs host layers' multiplications and attention (op offload) under llama-server's
reserve of one output row, so the layer phase and not the logits sets it: the standin grid's `-server` cases
(`tools/groundtruth/record.py` standin_settings, the CUDA stand-in) for the MoE models whose host layers copy their
Q matrix, expert matrices and cache views in (`PlanBuilder._host_cache_attention`, `HostCacheAttention`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from support.tools import load_tool

report = load_tool("tools/accuracy_report.py")

MIB = 1 << 20
MODELS = ("gpt-oss-20b", "gpt-oss-120b", "qwen3-30b-a3b", "qwen3-next-80b-a3b")


def _server_cases(model: str) -> list[Any]:
    """The `-server` cases with host layers (`-ngl`), not those with every layer on the GPU and the experts in host
    memory (`-cmoe`, held by tests/estimate/test_accuracy_gpu.py)."""
    doc = json.loads((report.FIXTURES / "standin" / f"{model}.json").read_text())
    header = report.FIXTURES / doc["model"]["header"]
    return [
        report.run_case("standin", model, header, c)
        for c in doc["cases"]
        if str(c["id"]).endswith("-server") and "-cmoe-" not in str(c["id"])
    ]


@pytest.mark.parametrize("model", MODELS)
def test_host_layers_second_q_and_expert_copies(model: str) -> None:
    """At 32768 cells the peak is a host layer's first expert copy right above the mask, which lies above the K
    and V views' copies, which lie above Q: where Q lands is the Q matrix's copy's doing (a Q bias or norm makes a
    second Q, in the copy's freed space where it fits there, else above the product; qwen3-next's gated product
    stays live under it), and the experts' products go into the freed views' space. Recorded (MiB): gpt-oss-20b
    261.0, gpt-oss-120b 664.4, qwen3-30b-a3b 290.0, qwen3-next-80b-a3b 557.0, the same at the partial -ngl and over
    two devices; before, the FFN as one block above the mask and Q where a host layer's V copy puts it: 307.5,
    710.9, 321.5 and 590.0. At 4096 cells (the attention's copies smaller than the FFN's) within 2%."""
    cases = _server_cases(model)
    assert len(cases) == 5 and not [r.key for r in cases if r.error]
    for r in cases:
        real, est = {d.name: d.compute for d in r.devices}["CUDA0"]
        if "c32768" in r.case:
            assert abs(est - real) < MIB // 10, (r.key, real / MIB, est / MIB)
        else:
            assert abs(est - real) <= 0.02 * real, (r.key, real / MIB, est / MIB)
