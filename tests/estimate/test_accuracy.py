"""The estimator against every llama.cpp recording in tests/fixtures/llamacpp/ (tools/accuracy_report.py).

Targets (from the issue): weights per device exact to the MiB; KV cache and recurrent state byte-exact (to the
log's 0.01 MiB for llama-server recordings); compute within 5% on at least 98% of the cases (the issue asked for
90%) and never more than 10% under; totals never more than 2% under. Cases that miss are listed in the assertion
message. Nothing is skipped: a case the estimator cannot run is a failure, and a case llama.cpp refused must be refused too.
"""

from __future__ import annotations

from importlib import resources
from types import ModuleType
from typing import Any

import pytest

from fitplan.core.estimate import accuracy
from support.models import REPO
from support.tools import load_tool

ROOT = REPO


def _load_report() -> ModuleType:
    return load_tool("tools/accuracy_report.py")


report = _load_report()

#: Refusals that come from the recording setup rather than from the model and settings (the recorder named an RPC
#: buffer type that did not exist in its own run). They are listed, not compared.
RECORDER_ERRORS = ("unknown buffer type",)


@pytest.fixture(scope="module")
def everything() -> Any:
    return report.summarize()


@pytest.fixture(scope="module")
def summary(everything: Any) -> Any:
    """The CPU recordings (CPU builds and loopback RPC devices); the GPU stand-ins are test_accuracy_gpu.py's."""
    return everything.on("cpu")


def _fmt(results) -> str:  # type: ignore[no-untyped-def]
    lines = []
    for r in results:
        detail = "; ".join(
            f"{d.name}: W {d.weights[0] / 2**20:.2f}/{d.weights[1] / 2**20:.2f} "
            f"KV {d.context[0] / 2**20:.2f}/{d.context[1] / 2**20:.2f} "
            f"C {d.compute[0] / 2**20:.2f}/{d.compute[1] / 2**20:.2f}"
            for d in r.devices
        )
        lines.append(f"  {r.key} [{r.architecture}] compute {r.compute_rel:+.1%} {r.error} {detail}")
    return "\n".join(lines)


def test_fixtures_exist(summary: Any) -> None:
    assert report.fixture_files(), "no recordings under tests/fixtures/llamacpp"
    assert len(summary.measured) >= 100


def test_every_case_runs(summary: Any) -> None:
    assert not summary.errors, "estimator failed on:\n" + _fmt(summary.errors)


def test_refused_settings_are_refused(summary: Any) -> None:
    refused = [r for r in summary.results if r.expected_error]
    model_refusals = [r for r in refused if not any(e in r.expected_error for e in RECORDER_ERRORS)]
    not_refused = [r for r in model_refusals if not r.error]
    assert not not_refused, "llama.cpp refused these settings, the estimator accepted them:\n" + _fmt(
        not_refused
    )


def test_weights_exact_to_the_mib(summary: Any) -> None:
    assert not summary.weights_misses, "weights differ by 1 MiB or more:\n" + _fmt(summary.weights_misses)


def test_kv_and_recurrent_state_exact(summary: Any) -> None:
    assert not summary.context_misses, "KV / recurrent state differ:\n" + _fmt(summary.context_misses)


def test_compute_share_within_tolerance(summary: Any) -> None:
    share = summary.compute_share_ok
    msg = (
        f"compute within {report.COMPUTE_TOLERANCE:.0%} on {share:.1%} of {len(summary.measured)} cases "
        f"(target {report.COMPUTE_SHARE:.0%}); misses:\n" + _fmt(summary.compute_misses)
    )
    assert share >= report.COMPUTE_SHARE, msg


def test_compute_never_far_under(summary: Any) -> None:
    assert not summary.compute_far_under, "compute more than 10% under:\n" + _fmt(summary.compute_far_under)


def test_compute_targets_on_realistic_models(summary: Any) -> None:
    """The published-shape models on one backend (sparse grid): the targets hold there, and must keep holding."""
    cases = [r for r in summary.measured if r.grid == "sparse"]
    assert len(cases) >= 100
    misses = [r for r in cases if abs(r.compute_rel) > report.COMPUTE_TOLERANCE]
    far_under = [r for r in cases if r.compute_rel < -report.COMPUTE_MAX_UNDER]
    assert 1 - len(misses) / len(cases) >= report.COMPUTE_SHARE, "misses:\n" + _fmt(misses)
    assert not far_under, "more than 10% under:\n" + _fmt(far_under)
    totals_under = [r for r in cases if r.total_rel < -report.TOTAL_MAX_UNDER]
    assert not totals_under, "totals more than 2% under:\n" + _fmt(totals_under)


def test_totals_never_far_under(summary: Any) -> None:
    """No device's context + compute + output total is more than 2% under llama.cpp's, on every recording."""
    assert not summary.total_far_under, "totals more than 2% under:\n" + _fmt(summary.total_far_under)


def test_kpool_selection_without_flash_attention(summary: Any) -> None:
    """qwen4exp's k-pool selection without flash attention, replayed through the allocator (`KpoolSelection.
    scatter_ops`): compute within 1.1% on every recording without flash attention, c512-c131072 (before: -8.9%
    at c2048 and -6.9% at c8192 with four slots, `-ub 2048`, where `live` and the cumulative sum land above the
    scores, and +5.5% at c131072)."""
    cases = [r for r in summary.measured if r.model == "qwen4exp-moe" and "-faoff-" in r.case]
    assert len(cases) >= 7
    misses = [r for r in cases if abs(r.compute_rel) > 0.011]
    assert not misses, "misses:\n" + _fmt(misses)


def test_glm5_next_first_layer_without_flash_attention(summary: Any) -> None:
    """glm5-next without flash attention, its first layer replayed through the allocator from `q_resid` to the
    selection mask (`KpoolSelection.first_layer`) over what the allocator's lists have under it (one residual
    stream, V's copy in a freed block): compute within 1% on every recording without flash attention,
    c512-c131072 (before: -6.8% at c2048 `-ub 2048`, +2.5% at c32768 with four slots, +1.8% at c8192 with four
    slots)."""
    cases = [r for r in summary.measured if r.model == "glm5-next-moe" and "-faoff-" in r.case]
    assert len(cases) >= 7
    misses = [r for r in cases if abs(r.compute_rel) > 0.01]
    assert not misses, "misses:\n" + _fmt(misses)


def test_totals_never_far_under_on_published_shapes(summary: Any) -> None:
    """Every recording of a published model (all grids but the architecture smoke models, projectors included):
    no device's total is more than 2% under llama.cpp's."""
    cases = [r for r in summary.measured if r.grid not in report.SMOKE_GRIDS]
    assert len(cases) >= 300
    under = [r for r in cases if r.total_rel < -report.TOTAL_MAX_UNDER]
    assert not under, "totals more than 2% under:\n" + _fmt(under)


def test_mamba_hybrid_tails_replayed(summary: Any) -> None:
    """The Mamba-2 hybrids' recordings with flash attention on the host (granitehybrid, nemotron_h, nemotron_h_moe
    smoke models) and every plamo2 recording: the last attention layer's tail and the Mamba block after it are
    replayed through the allocator, compute within 0.1% (before: granitehybrid with two or four slots 4.7% under,
    granitehybrid and nemotron_h with four slots and q4_0 caches 9.2% under, plamo2 3.2% under at five settings)."""
    fa_models = {"granitehybrid-dense", "nemotron_h-dense", "nemotron_h_moe-dense"}
    cases = [
        r
        for r in summary.measured
        if r.model == "plamo2-dense" or (r.model in fa_models and _flash_attention(r))
    ]
    assert len(cases) == 80
    misses = [r for r in cases if abs(r.compute_rel) > 0.001]
    assert not misses, "misses:\n" + _fmt(misses)


def _flash_attention(r: Any) -> bool:
    """Whether a recording ran with flash attention (`-fa on`, or the CPU's `auto`, which resolves to on)."""
    return "fa-off" not in r.case and "faoff" not in r.case


def test_projector_recordings_within_tolerance(summary: Any) -> None:
    """The llama-server recordings with an mmproj (LLaVA MLP, Gemma 3 SigLIP, Qwen2.5-VL): compute within 5%."""
    cases = [r for r in summary.measured if r.grid == "server" and r.case.startswith("mmproj")]
    assert len(cases) == 3
    misses = [r for r in cases if abs(r.compute_rel) > report.COMPUTE_TOLERANCE]
    assert not misses, "misses:\n" + _fmt(misses)


def test_quantized_caches_with_flash_attention(summary: Any) -> None:
    """The `quantkv` recordings (quantized K/V caches with flash attention, contexts 512-8192, `-ub` 512 and 2048,
    1 and 4 slots) of the models whose graphs build the Hadamard rotation of the cache (llama.cpp's
    `build_attn_inp_kv_impl`, `build_attn_inp_kv_iswa`): compute within 1% (before the rotation was modelled:
    up to 17% under). 28 settings per model of the llama family and lfm2moe, 12 (q8_0 only) for the others."""
    full = {"llama-dense", "llama-moe", "qwen3-dense", "mistral3-dense", "lfm2moe-moe"}
    more = {"gemma3-dense", "qwen2-dense", "phi3-dense", "command-r-dense", "gpt-oss-moe", "granite-dense"}
    cases = [r for r in summary.measured if r.grid == "quantkv" and r.model in full | more]
    assert len(cases) == 28 * len(full) + 12 * len(more)
    misses = [r for r in cases if abs(r.compute_rel) > 0.01]
    assert not misses, "misses:\n" + _fmt(misses)


def test_band_data_file_is_what_the_report_generates(everything: Any) -> None:
    """The measured error bands the application reads (fitplan/data/accuracy_bands.json) are the report's
    figures on today's recordings and estimator: a change of either without `--write` fails here."""
    generated = report.bands_json(everything, report.ik_results())
    packaged = resources.files("fitplan").joinpath(accuracy.DATA_PATH).read_text(encoding="utf-8")
    assert packaged == report.BANDS_PATH.read_text(encoding="utf-8")
    assert packaged == generated, "regenerate it: python tools/accuracy_report.py --write"


def test_many_experts_with_mla(summary: Any) -> None:
    """DeepSeek-V3's shape (61 layers, 256 experts in 8 groups, 3 dense layers, MLA with a compressed query) over
    the `wide` sample (contexts 512-131072, 1 and 4 slots, f16 / q8_0 / q4_0 caches, flash attention on and off,
    `-ub` 512 and 2048): compute within 1% (before the absorbed query was replayed through the allocator: 12-16%
    over with flash attention, up to 9% under without)."""
    cases = [r for r in summary.measured if r.grid == "wide" and r.model == "deepseek-v3"]
    assert len(cases) == 30
    misses = [r for r in cases if abs(r.compute_rel) > 0.01]
    assert not misses, "misses:\n" + _fmt(misses)


def test_mamba2_hybrids_with_one_slot(summary: Any) -> None:
    """The Mamba-2 hybrid smoke models (granitehybrid, nemotron_h) over the `wide` sample with one slot: compute
    within 2% (before the Mamba block after the last attention layer was replayed over the freed mask: up to 29%
    over at 4096 cells)."""
    models = {"granitehybrid-dense", "nemotron_h-dense"}
    cases = [r for r in summary.measured if r.grid == "widearchs" and r.model in models and "-np1-" in r.case]
    assert len(cases) == 2 * 18
    misses = [r for r in cases if abs(r.compute_rel) > 0.02]
    assert not misses, "misses:\n" + _fmt(misses)


def test_lfm2_sliding_window_layer_with_flash_attention(summary: Any) -> None:
    """The lfm2 smoke model (a sliding-window attention layer, then a short-conv layer; the residual added into
    the layer input) with flash attention, `quantkv` and `wide` samples: compute within 1% (before its one-block
    FFN hole and the freed token rows next to the mask were modelled: 10.5% under from 2048 cells on)."""
    cases = [
        r
        for r in summary.measured
        if r.model == "lfm2-dense" and r.grid in ("quantkv", "widearchs") and "-faon" in r.case
    ]
    assert len(cases) == 28 + 22
    misses = [r for r in cases if abs(r.compute_rel) > 0.01]
    assert not misses, "misses:\n" + _fmt(misses)


def test_fused_expert_gate_up_with_parallel_attention(summary: Any) -> None:
    """The cohere2moe smoke model (parallel attention and FFN, fused `ffn_gate_up_exps`): compute within 1% with
    and without flash attention (before: 22% over without it, the freed f32 masks and V's indices not reused by
    a parallel block's FFN; with it the 3 MiB fused gate_up fits no freed block)."""
    cases = [r for r in summary.measured if r.grid == "archs" and r.model == "cohere2moe-moe"]
    assert len(cases) == 3
    misses = [r for r in cases if abs(r.compute_rel) > 0.01]
    assert not misses, "misses:\n" + _fmt(misses)


def test_plamo2_mamba_block(summary: Any) -> None:
    """The plamo2 smoke model (its own Mamba block, replayed in graph order): compute within 1% with flash
    attention and within 5% without (before: 9-13% over)."""
    cases = [r for r in summary.measured if r.grid == "archs" and r.model == "plamo2-dense"]
    assert len(cases) == 3
    misses = [r for r in cases if abs(r.compute_rel) > (0.05 if r.case.endswith("fa-off") else 0.01)]
    assert not misses, "misses:\n" + _fmt(misses)


def test_afmoe_dense_layer_and_plamo2_rotated_qkv(summary: Any) -> None:
    """The `newarchs` recordings with flash attention at `-ub 512` from 8192 cells of afmoe (f16 caches: the FFN
    input waits in one of the FFN norm's blocks, the dense first layer's GLU output goes on top) and plamo2's
    quantized caches at 8192 cells and more (V's rotated copy above the fused QKV projection): compute within 0.2%
    (before: 0.4-4.0% under)."""
    afmoe = ("c8192-np1-faon-ub512-f16", "c32768-np4-kvu-faon-ub512-f16", "c131072-np1-faon-ub512-f16")
    plamo2 = (
        "c8192-np1-faon-ub512-q4_0",
        "c32768-np1-faon-ub512-q8_0",
        "c32768-np4-kvu-faon-ub2048-q4_0",
        "c131072-np1-faon-ub512-q4_0",
    )
    keys = {f"newarchs/afmoe-moe/{c}" for c in afmoe} | {f"newarchs/plamo2-dense/{c}" for c in plamo2}
    cases = [r for r in summary.measured if r.key in keys]
    assert len(cases) == len(keys)
    misses = [r for r in cases if abs(r.compute_rel) > 0.002]
    assert not misses, "misses:\n" + _fmt(misses)


def test_wide_sample_of_the_families_found_outside_the_recordings(summary: Any) -> None:
    """The families an outside check found off on configurations the recordings lacked (glm5-next, qwen35,
    cohere2, gemma2, gemma3, lfm2), recorded over the `wide` sample: compute never more than 2.5% under and within
    5% but for the over-estimate named here, one 2 MiB block (glm5-next with four slots at 512 cells is 2.0% under).

    Before: glm5-next with flash attention at 4096 cells 18.7-20% under (the f32 cast of the selection indices,
    a tail longer than the freed selected cells, goes above them: `KpoolSelection.cast_above`), and 24.1% over at
    131072 cells with `-ub 2048` (`q_resid` next to the top-k's freed space leaves the cast room there); cohere2, gemma2
    and gemma3 7.6% over with four separate slots at 512 cells (the last layer's scores in the freed row indices);
    qwen35 4.8% under at 4096 cells (the query's gate stays live under the scores), and 6.6-7.8% over with four
    slots (the gathered states, counted on top, lie in a freed block: `gdn_transient`); lfm2 10% over."""
    families = {
        "glm5-next-moe",
        "qwen35-dense",
        "qwen35moe-moe",
        "cohere2-dense",
        "gemma2-dense",
        "gemma3-dense",
        "lfm2-dense",
    }
    known_over = {
        ("cohere2-dense", "c4096-np1-faon-ub2048"),  # +5.0%, 2 MiB of 39 MiB
    }
    cases = [r for r in summary.measured if r.grid == "widearchs" and r.model in families]
    assert len(cases) == 30 * 3 + 33 * 4
    under = [r for r in cases if r.compute_rel < -0.025]
    assert not under, "more than 2.5% under:\n" + _fmt(under)
    misses = [r for r in cases if abs(r.compute_rel) > report.COMPUTE_TOLERANCE]
    assert {(r.model, r.case) for r in misses} <= known_over, "misses:\n" + _fmt(misses)
    assert all(r.compute_rel > 0 for r in misses)
