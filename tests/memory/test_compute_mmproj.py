"""Projector warm-up compute buffers against llama.cpp (tools/mtmd/clip.cpp), to the byte.

The flash-attention figures are the `mmproj` recordings of tests/fixtures/llamacpp/server/ (llama-server on the CPU
backend, where flash attention is supported, so `-fa auto` enables it for the projector). The figures without
flash attention were measured the same way with the projector's `flash_attn_type` disabled: the projector loaded
through libmtmd (`mtmd_init_from_file`, warm-up on) next to a vocab-only text model, with `ggml-base` built with
GGML_ALLOCATOR_DEBUG; the allocator's last `max_size` line gives the buffer to the byte.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fitplan.core.base.devices import Machine, host_device
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.base.results import TermKind
from fitplan.core.estimate.estimator import estimate, mmproj_compute
from fitplan.core.model.profile import ClipParams
from support.models import TESTS, sparse

MODELS = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"


@pytest.mark.parametrize(
    ("name", "flash_attn", "expected"),
    [
        # recorded: llama-server logs 21.55 / 121.25 / 704.79 MiB; the allocator's peaks are these bytes
        ("mmproj-llava-llama-3-8b", True, 22_593_056),
        ("mmproj-gemma-3-27b", True, 127_139_840),
        ("mmproj-qwen2.5-vl-7b", True, 739_025_728),
        # measured without flash attention: 32.88 / 1132.00 / 4871.57 MiB
        ("mmproj-llava-llama-3-8b", False, 34_479_712),
        ("mmproj-gemma-3-27b", False, 1_186_988_032),
        ("mmproj-qwen2.5-vl-7b", False, 5_108_210_240),
    ],
)
def test_projector_warmup_compute_is_byte_exact(name: str, flash_attn: bool, expected: int) -> None:
    assert mmproj_compute(sparse(name), flash_attn)[0] == expected


def test_qwen25vl_terms() -> None:
    mm = sparse("mmproj-qwen2.5-vl-7b")
    assert mm.clip == ClipParams(
        projector_type="qwen2.5vl_merger",
        image_size=560,
        patch_size=14,
        n_embd=1280,
        n_ff=3420,
        n_head=16,
        n_layer=32,
        projection_dim=3584,
        spatial_merge_size=2,
        n_wa_pattern=8,
    )
    # warm-up image 46 x 46 merged tokens = 1288 px a side, 92 x 92 = 8464 patches. Inputs: raw image
    # 4*3*1288^2 = 19,907,328; window indices 8464/4 i32 = 8,464 (8,480 padded) twice; M-RoPE positions
    # 4*4*8464 = 135,424; the f32 window mask 4*8464^2 = 286,557,184. Four blocks 4*4*8464*1280 = 173,342,720, the
    # mask's f16 copy 2*8464^2 = 143,278,592 and one FFN intermediate 4*8464*3420 = 115,787,520.
    inputs = 19_907_328 + 2 * 8_480 + 135_424 + 286_557_184
    assert mmproj_compute(mm, True)[0] == inputs + 173_342_720 + 143_278_592 + 115_787_520
    # without flash attention: five blocks and the scores [8464, 8464, 16] f32
    assert mmproj_compute(mm, False)[0] == inputs + 5 * 43_335_680 + 4 * 8464 * 8464 * 16


def test_unmodelled_projectors_keep_the_shape_approximation() -> None:
    mm = sparse("mmproj-gemma-3-27b")
    assert mm.clip is not None
    other = dataclasses.replace(mm, clip=dataclasses.replace(mm.clip, projector_type="idefics3"))
    cbytes, detail = mmproj_compute(other, True)
    assert detail.endswith("approximation)")
    # raw 896^2 image, then one block: 4 * 4096 * (2*1152 + 4304)
    assert cbytes == 4 * 3 * 896 * 896 + 4 * 4096 * (2 * 1152 + 4304)


def test_estimate_carries_the_projector_compute() -> None:
    text = sparse("qwen2.5-vl-7b")
    mm = sparse("mmproj-qwen2.5-vl-7b")
    e = estimate(text, LaunchSettings(n_ctx=4096), Machine((), host_device(64 << 30)), mmproj=mm)
    terms = [t for t in e.devices[0].terms if t.kind is TermKind.MMPROJ and t.label == "mmproj compute"]
    assert [t.bytes for t in terms] == [739_025_728]
    assert not any("approximated" in a for a in e.assumptions)


def _standin_server_case(model: str, case_id: str) -> Any:
    import json

    doc = json.loads((TESTS / "fixtures" / "llamacpp" / "standin_server" / f"{model}.json").read_text())
    return next(c for c in doc["cases"] if c["id"] == case_id)


@pytest.mark.parametrize(
    ("text", "name", "inputs"),
    [
        # raw 336^2 image, 577 positions and 576 patch indices (i32), each padded to 32 bytes
        ("llama-3.1-8b", "mmproj-llava-llama-3-8b", 1_354_752 + 2_336 + 2_304),
        # the raw 896^2 image only
        ("gemma-3-27b", "mmproj-gemma-3-27b", 9_633_792),
        # raw 1288^2 image, window indices twice, M-RoPE positions, the f32 window mask
        ("qwen2.5-vl-7b", "mmproj-qwen2.5-vl-7b", 19_907_328 + 2 * 8_480 + 135_424 + 286_557_184),
    ],
)
def test_a_projector_on_the_gpu_leaves_its_graph_inputs_on_the_host(
    text: str, name: str, inputs: int
) -> None:
    """llama-server on a CUDA-shaped stand-in (standin_server grid): clip's warm-up buffer on the GPU is the
    CPU-only run's, and the host's CPU buffer holds the graph inputs the scheduler keeps there and copies over
    (before: nothing on the host; Qwen2.5-VL 292.41 MiB short)."""
    from fitplan.core.base.devices import Vendor, assumed_gpu

    machine = Machine((assumed_gpu("CUDA0", 24, Vendor.NVIDIA),), host_device(64 << 30))
    e = estimate(sparse(text), LaunchSettings(n_ctx=4096), machine, mmproj=sparse(name))
    host = [t.bytes for t in e.devices[-1].terms if t.kind is TermKind.MMPROJ and t.label == "mmproj compute"]
    assert host == [inputs]
    recorded = _standin_server_case(text, "mmproj-c4096")["results"]["mmproj_buffers_mib"]
    assert [b["mib"] for b in recorded if b["buffer_type"] == "CPU"] == [round(inputs / (1 << 20), 2)]
