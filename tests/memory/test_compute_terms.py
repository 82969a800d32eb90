"""The compute terms as objects (fitplan.core.memory.compute.terms) and the one evaluator that reads a device's plan
(`device_plan.device_parts`): every term's bytes over arrays of contexts equal its bytes at each context, on every
architecture, and the plan combines its groups by the rules `DevicePlan` states."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from fitplan.core.base.devices import GIB, Device, Machine, Vendor, assumed_gpu, host_device
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.memory.compute import ComputePlan
from fitplan.core.memory.compute.device_plan import DevicePlan, evaluate_plan, total_array
from fitplan.core.memory.compute.terms import FA_COPIES, FFN, SCAN, SCORES, Fixed, LogitsOnTop
from fitplan.core.memory.weights import place_weights
from support.compute import compute_inputs
from support.models import ARCHS, SPARSE, profile_at

HOST = host_device(512 * GIB)
NB = np.array([256, 768, 4096, 33024, 131072], dtype=np.int64)
NS = np.array([256, 512, 1024, 1536, 4608], dtype=np.int64)
MODELS = [
    *sorted(ARCHS.glob("*.gguf")),
    SPARSE / "qwen3-next-80b-a3b.header.gguf",
    SPARSE / "gpt-oss-20b.header.gguf",
]
#: (GPUs, -ngl, flash attention, K/V cache type, sequences, pipeline parallelism)
SETUPS = (
    (0, 0, True, "f16", 1, False),
    (0, 0, False, "q8_0", 2, False),
    (2, 2, True, "q4_0", 1, False),
    (2, 99, False, "f16", 1, False),
    (2, 99, True, "f16", 1, True),
)


def _gpus(n: int) -> tuple[Device, ...]:
    return tuple(dataclasses.replace(assumed_gpu(f"G{i}", 48), backend_name=f"CUDA{i}") for i in range(n))


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name.split(".")[0])
def test_every_term_over_a_curve_equals_it_at_each_context(path: Path) -> None:
    profile = profile_at(path)
    for n_gpu, ngl, fa, ctype, seqs, pp in SETUPS:
        machine = Machine(_gpus(n_gpu), HOST)
        placement = place_weights(profile, LaunchSettings(n_gpu_layers=ngl), machine)
        inputs = compute_inputs(
            n_kv_base=0,
            flash_attn=fa,
            cache_type_k=ctype,
            cache_type_v=ctype if fa else "f16",
            n_seqs=seqs,
            pipeline_parallel=pp,
        )
        plan = ComputePlan(profile, inputs, placement, (Vendor.NVIDIA,) * n_gpu)
        for p in plan.plans:
            for t in p.terms():
                over = t.over(NB, NS)
                assert over.dtype == np.int64
                assert over.tolist() == [t.at(b, w) for b, w in zip(NB.tolist(), NS.tolist(), strict=True)], t
        rows = plan.totals_array(NB, NS)
        for i, (b, w) in enumerate(zip(NB.tolist(), NS.tolist(), strict=True)):
            assert [x.bytes for x in plan.evaluate(b, w)] == rows[:, i].tolist()


def _buffer(p: DevicePlan) -> dict[str, int]:
    """The plan's parts at one context, checked against the curve's total there."""
    buf = evaluate_plan(p, 1000, 0)
    assert total_array(p, np.array([1000]), np.array([0])).tolist() == [buf.bytes]
    return {x.label: x.bytes for x in buf.parts}


def test_the_transient_is_the_larger_of_attention_and_ffn() -> None:
    base = DevicePlan(device=0, layer_phase=True, inputs=(Fixed("blocks", 7),))
    att = dataclasses.replace(base, attention=(Fixed(SCAN, 30), Fixed(SCAN, 20)), ffn=(Fixed(FFN, 25),))
    assert _buffer(att) == {"blocks": 7, SCAN: 30}
    # the FFN on a tie
    tie = dataclasses.replace(att, ffn=(Fixed(FFN, 30),))
    assert _buffer(tie) == {"blocks": 7, FFN: 30}
    # named after the scores when a term that has them is nonzero; CUDA's copies are a part of their own
    scores = dataclasses.replace(
        att, attention=(Fixed(SCAN, 30), Fixed(SCORES, 0)), fa_copies=Fixed(FA_COPIES, 4)
    )
    assert _buffer(scores) == {"blocks": 7, SCAN: 26, FA_COPIES: 4}
    scores = dataclasses.replace(scores, attention=(Fixed(SCAN, 30), Fixed(SCORES, 1)))
    assert _buffer(scores) == {"blocks": 7, SCORES: 26, FA_COPIES: 4}
    # no layers here: no transient
    assert _buffer(dataclasses.replace(att, layer_phase=False)) == {"blocks": 7}


def test_the_buffer_is_the_larger_phase_with_what_is_under_both() -> None:
    layer = DevicePlan(
        device=0,
        layer_phase=True,
        inputs=(Fixed("blocks", 10),),
        ffn=(Fixed(FFN, 20),),
        after=(Fixed("MLA V copy", 3),),
        output=(Fixed("logits", 33),),
        under=(Fixed("op-offload weight copy", 5),),
    )
    assert _buffer(layer) == {"blocks": 10, FFN: 20, "MLA V copy": 3, "op-offload weight copy": 5}
    out = dataclasses.replace(layer, output=(Fixed("logits", 34),))
    assert _buffer(out) == {"logits": 34, "op-offload weight copy": 5}


def test_the_hosts_logits_take_the_transients_place_where_at_least_as_large() -> None:
    host = DevicePlan(device=None, layer_phase=True, inputs=(Fixed("masks", 9),), ffn=(Fixed(FFN, 20),))
    assert _buffer(dataclasses.replace(host, logits=LogitsOnTop(20))) == {"masks": 9, "logits": 20}
    assert _buffer(dataclasses.replace(host, logits=LogitsOnTop(19))) == {"masks": 9, FFN: 20}
    # a host without layers: the logits on the graph inputs
    idle = dataclasses.replace(host, layer_phase=False, logits=LogitsOnTop(5))
    assert _buffer(idle) == {"masks": 9, "logits": 5}
