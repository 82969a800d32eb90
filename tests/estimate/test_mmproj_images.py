"""The projector's memory per image at run time (`--image-max-tokens`, images beyond the warm-up one), against
llama.cpp.

Recordings: tests/fixtures/llamacpp/terms/qwen2.5-vl-7b-mmproj.json (llama-server with --mmproj and
--image-max-tokens: the warm-up buffer it prints at start) and mmproj-qwen2.5-vl-7b-images.json
(tools/groundtruth/mmproj_image.cpp, `record.py --grids mmproj_images`: clip's compute buffer after one image of
each size, to the byte, the buffer grown by ggml_backend_sched to that image's graph), and the same for Qwen2-VL
(mmproj-qwen2-vl-7b-images.json) and Qwen3-VL (mmproj-qwen3-vl-8b-images.json)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest

from fitplan.commands.plan import load_profile
from fitplan.core.base.devices import MIB, Device, DeviceKind, Machine, Vendor, host_device
from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.base.results import MMPROJ_IMAGES_LABEL, Estimate, TermKind
from fitplan.core.estimate.estimator import (
    deepstack_layers,
    estimate,
    mmproj_image_growth,
    pixtral_graph_bytes,
    qwen25vl_graph_bytes,
    qwen_vl_full_graph_bytes,
)
from fitplan.core.launch.flags import parse_flags, written_flags
from support.models import TESTS

TERMS = TESTS / "fixtures" / "llamacpp" / "terms"
SPARSE = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"


def _doc(name: str) -> dict[str, Any]:
    doc = json.loads((TERMS / f"{name}.json").read_text())
    assert doc["llama_cpp"]["commit"] == "515e85511"
    return doc


@pytest.fixture(scope="module")
def text() -> Any:
    return load_profile(str(SPARSE / "qwen2.5-vl-7b.header.gguf"), True)


@pytest.fixture(scope="module")
def proj() -> Any:
    return load_profile(str(SPARSE / "mmproj-qwen2.5-vl-7b.header.gguf"), True)


def _image_cases() -> list[dict[str, Any]]:
    cases = _doc("mmproj-qwen2.5-vl-7b-images")["cases"]
    assert len(cases) == 25 and not any("error" in c for c in cases)
    return [c for c in cases if c["settings"]["image_max_tokens"] == 16]


def _mmproj(est: Estimate, label: str, host: bool = True) -> int:
    dev = est.devices[-1] if host else est.devices[0]
    return sum(t.bytes for t in dev.terms if t.kind is TermKind.MMPROJ and t.label == label)


def cpu_machine() -> Machine:
    return Machine((), host_device(64 << 30))


@pytest.mark.parametrize("case", _image_cases(), ids=lambda c: c["id"])
def test_each_image_size_buffer_against_the_recording(case: dict[str, Any], proj: Any) -> None:
    """Byte-exact at every size, with flash attention (the graph replayed with the allocator's best fit: below
    784 tokens the former closed rule was 7% to 20.4% over) and without."""
    ((w, h),) = [(i["width"], i["height"]) for i in case["results"]["images"]]
    recorded = case["results"]["images"][0]["compute_bytes"]
    fa = case["settings"]["flash_attn"] == "auto"  # the CPU backend supports it: auto enables it
    n_pos = (w // 14) * (h // 14)
    assert qwen25vl_graph_bytes(proj.clip, n_pos, fa) == recorded


def test_the_estimate_carries_the_largest_image_beyond_the_warm_up(text: Any, proj: Any) -> None:
    """Default limits: llama-server starts with the 46 x 46 token warm-up (704.79 MiB) and, after a 64 x 64 token
    image (4096, the projector's largest), holds 1984987136 bytes: the estimate is both, the warm-up in the term
    the start-up log is compared with, the rest in its own."""
    (case,) = [
        c for c in _doc("mmproj-qwen2.5-vl-7b-images")["cases"] if c["settings"]["image_max_tokens"] == -1
    ]
    warm_mib = case["results"]["warmup_compute_mib"]
    after = case["results"]["images"][-1]["compute_bytes"]
    settings = LaunchSettings(n_ctx=4096, n_parallel=1, repack=False, mmproj_path="p.gguf")
    est = estimate(text, settings, cpu_machine(), mmproj=proj)
    warm = _mmproj(est, "mmproj compute")
    assert abs(warm - warm_mib * MIB) <= 0.005 * MIB
    assert warm + _mmproj(est, MMPROJ_IMAGES_LABEL) == after
    assert any(
        "largest image (4096 tokens, Qwen2.5-VL's measured per-image rule)" in a for a in est.assumptions
    )


def test_image_max_tokens_sizes_the_warm_up_llama_server_prints(text: Any, proj: Any) -> None:
    """Recorded llama-server starts with --image-max-tokens 256 / 1024 / 8192 and without: the warm-up image is
    46 x 46 tokens unless the limit allows fewer (clip-model.h set_warmup_n_tokens)."""
    recorded: dict[str, float] = {}
    for c in _doc("qwen2.5-vl-7b-mmproj")["cases"]:
        (mib,) = [b["mib"] for b in c["results"]["mmproj_buffers_mib"] if b["kind"] == "compute"]
        argv = [a for a in c["command"][1:] if a not in ("PORT",)]
        kept = [
            a
            for i, a in enumerate(argv)
            if a.startswith("--image") or (i and argv[i - 1].startswith("--image"))
        ]
        parsed = parse_flags(["-c", "4096", "-np", "1", "-nr", *kept])
        assert parsed.unmodelled == ()
        settings = dataclasses.replace(parsed.settings, mmproj_path="p.gguf")
        est = estimate(text, settings, cpu_machine(), mmproj=proj)
        recorded[c["id"]] = mib
        warm = _mmproj(est, "mmproj compute")
        assert abs(warm - mib * MIB) <= 0.005 * MIB, c["id"]  # 16 x 16 tokens too (was 8% over)
    assert set(recorded) == {
        "mmproj-np1-c4096",
        "mmproj-np1-c4096-imt1024",
        "mmproj-np1-c4096-imt256",
        "mmproj-np1-c4096-imt8192",
    }


def test_image_max_tokens_bounds_the_run_time_buffer(proj: Any) -> None:
    """The largest image is the limit: 1024 tokens is the warm-up image itself (no growth); 8192 tokens
    (32768 patches) is recorded as a 64 x 128 token image."""
    assert mmproj_image_growth(proj, True, image_max_tokens=1024).device_bytes == 0  # type: ignore[union-attr]
    (wide,) = [c for c in _image_cases() if c["id"] == "fa-auto-64x128"]
    g = mmproj_image_growth(proj, True, image_max_tokens=8192)
    assert g is not None and g.tokens == 8192 and g.patches == 32768
    assert (
        g.device_bytes + qwen25vl_graph_bytes(proj.clip, 46 * 46 * 4, True)
        == wide["results"]["images"][0]["compute_bytes"]
    )


def test_flags_are_read_written_and_checked(text: Any, proj: Any) -> None:
    p = parse_flags(["--image-max-tokens", "1024", "--image-min-tokens", "64"])
    assert (p.settings.image_max_tokens, p.settings.image_min_tokens) == (1024, 64)
    assert p.unmodelled == () and p.ignored == ()
    written = {(w.flag, w.value) for w in written_flags(p.settings)}
    assert {("--image-max-tokens", "1024"), ("--image-min-tokens", "64")} <= written
    assert not any(w.flag.startswith("--image") for w in written_flags(LaunchSettings()))
    bad = LaunchSettings(n_ctx=4096, mmproj_path="p.gguf", image_min_tokens=2048, image_max_tokens=1024)
    with pytest.raises(SettingsError, match="--image-min-tokens 2048 is above"):
        estimate(text, bad, cpu_machine(), mmproj=proj)


def test_on_a_gpu_the_growth_is_split_like_the_warm_up(text: Any, proj: Any) -> None:
    """With the projector on a GPU, the graph inputs of the larger image grow the host's share too."""
    gpu = Device("GPU0", DeviceKind.GPU, 80 << 30, 80 << 30, vendor=Vendor.NVIDIA)
    settings = LaunchSettings(n_ctx=4096, n_parallel=1, mmproj_path="p.gguf")
    est = estimate(text, settings, Machine((gpu,), host_device(64 << 30)), mmproj=proj)
    g = mmproj_image_growth(proj, est.context.flash_attn, 128)
    assert g is not None
    assert _mmproj(est, MMPROJ_IMAGES_LABEL, host=False) == g.device_bytes > 0
    assert _mmproj(est, MMPROJ_IMAGES_LABEL) == g.host_input_bytes > 0


def test_other_projectors_keep_the_warm_up_assumption(text: Any) -> None:
    """Gemma 3's projector has one image size: no growth, and the assumption line names the projectors that have
    a measured per-image rule."""
    gemma = load_profile(str(SPARSE / "mmproj-gemma-3-27b.header.gguf"), True)
    assert mmproj_image_growth(gemma, True) is None
    settings = LaunchSettings(n_ctx=4096, n_parallel=1, repack=False, mmproj_path="p.gguf")
    est = estimate(text, settings, cpu_machine(), mmproj=gemma)
    assert _mmproj(est, MMPROJ_IMAGES_LABEL) == 0
    (line,) = [a for a in est.assumptions if a.startswith("mmproj compute is the warm-up image's")]
    assert (
        "per-image rule exists for Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Pixtral (Mistral Small 3.x) projectors"
        in line
    )


# Qwen2-VL and Qwen3-VL: full attention in every block (no window mask); Qwen3-VL adds deepstack mergers.
FULL_ATTENTION = {"mmproj-qwen2-vl-7b": 14, "mmproj-qwen3-vl-8b": 16}


def _full_cases() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name in FULL_ATTENTION:
        cases = _doc(f"{name}-images")["cases"]
        assert len(cases) == 25 and not any("error" in c for c in cases)
        out += [(name, c) for c in cases if c["settings"]["image_max_tokens"] == 16]
    return out


@pytest.mark.parametrize("name,case", _full_cases(), ids=lambda v: v if isinstance(v, str) else v["id"])
def test_full_attention_projectors_each_image_size_to_the_byte(name: str, case: dict[str, Any]) -> None:
    """Qwen2-VL's graph (inputs + the larger of a block's attention and FFN) and Qwen3-VL's (the held deepstack
    block outputs, then the deepstack mergers replayed with the allocator's best fit): every recorded image size,
    64 to 32768 patches, square and wide, flash attention on and off, to the byte."""
    proj = load_profile(str(SPARSE / f"{name}.header.gguf"), True)
    patch = FULL_ATTENTION[name]
    ((w, h),) = [(i["width"], i["height"]) for i in case["results"]["images"]]
    fa = case["settings"]["flash_attn"] == "auto"
    n_pos = (w // patch) * (h // patch)
    assert qwen_vl_full_graph_bytes(proj, n_pos, fa) == case["results"]["images"][0]["compute_bytes"]


@pytest.mark.parametrize("name", list(FULL_ATTENTION))
def test_full_attention_projectors_warm_up_and_largest_image(name: str, text: Any) -> None:
    """Default limits: the 46 x 46 token warm-up buffer clip prints (Qwen2-VL 267.08 MiB, Qwen3-VL 372.08 MiB,
    where the shapes-only approximation said otherwise) and, after a 64 x 64 token image (4096, the projector's
    largest), the buffer the scheduler grew to: warm-up plus the "mmproj images" term."""
    proj = load_profile(str(SPARSE / f"{name}.header.gguf"), True)
    (case,) = [c for c in _doc(f"{name}-images")["cases"] if c["settings"]["image_max_tokens"] == -1]
    settings = LaunchSettings(n_ctx=4096, n_parallel=1, repack=False, mmproj_path="p.gguf")
    est = estimate(text, settings, cpu_machine(), mmproj=proj)
    warm = _mmproj(est, "mmproj compute")
    assert abs(warm - case["results"]["warmup_compute_mib"] * MIB) <= 0.005 * MIB
    assert warm + _mmproj(est, MMPROJ_IMAGES_LABEL) == case["results"]["images"][-1]["compute_bytes"]
    label = "Qwen3-VL" if "qwen3" in name else "Qwen2-VL"
    assert any(
        f"largest image (4096 tokens, {label}'s measured per-image rule)" in a for a in est.assumptions
    )
    assert not any("approximated from the vision tower's shapes" in a for a in est.assumptions)


def test_qwen3vl_deepstack_layers_are_read_from_the_tensors() -> None:
    proj = load_profile(str(SPARSE / "mmproj-qwen3-vl-8b.header.gguf"), True)
    assert deepstack_layers(proj) == (8, 16, 24)
    assert deepstack_layers(load_profile(str(SPARSE / "mmproj-qwen2-vl-7b.header.gguf"), True)) == ()


def test_the_launch_check_compares_the_start_up_buffers_only(text: Any, proj: Any) -> None:
    """llama-server's log shows the warm-up buffer at start: the growth for the largest image is left out of the
    comparison (it is allocated at the first image that large)."""
    from fitplan.core.launch.launch_check import _estimated

    settings = LaunchSettings(n_ctx=4096, n_parallel=1, repack=False, mmproj_path="p.gguf")
    host = estimate(text, settings, cpu_machine(), mmproj=proj).devices[-1]
    images = _mmproj_bytes(host, MMPROJ_IMAGES_LABEL)
    assert images > 0
    assert _estimated(host, TermKind.MMPROJ, "") == host.bytes_of(TermKind.MMPROJ) - images


def _mmproj_bytes(dev: Any, label: str) -> int:
    return sum(t.bytes for t in dev.terms if t.kind is TermKind.MMPROJ and t.label == label)


@pytest.mark.parametrize("name", list(FULL_ATTENTION))
def test_llama_server_caps_image_tokens_to_the_ubatch_for_a_one_ubatch_prompt(name: str, text: Any) -> None:
    """A text model that takes the prompt in one ubatch (non-causal attention) gets images of at most half the
    ubatch (tools/server/server-context.cpp: "cap image_max_tokens"): with -ub 512 the projector loads with 256
    tokens, so its warm-up is the 16 x 16 token image (the recorded buffer of that image, to the byte) and no
    image grows it; -ub 8192 leaves the projector's own 4096."""
    proj = load_profile(str(SPARSE / f"{name}.header.gguf"), True)
    patch = FULL_ATTENTION[name]
    (case,) = [c for c in _full_cases() if c[0] == name and c[1]["id"] == "fa-auto-16x16"]
    assert case[1]["results"]["images"][0]["width"] == 16 * 2 * patch
    non_causal = dataclasses.replace(text, causal_attn=False)
    settings = LaunchSettings(n_ctx=4096, n_parallel=1, repack=False, mmproj_path="p.gguf", n_ubatch=512)
    est = estimate(non_causal, settings, cpu_machine(), mmproj=proj)
    assert _mmproj(est, "mmproj compute") == case[1]["results"]["images"][0]["compute_bytes"]
    assert _mmproj(est, MMPROJ_IMAGES_LABEL) == 0
    assert any("caps the projector's image tokens to 256 (n_ubatch 512" in a for a in est.assumptions)
    wide = dataclasses.replace(settings, n_ubatch=8192, n_batch=8192)
    est = estimate(non_causal, wide, cpu_machine(), mmproj=proj)
    assert not any("caps the projector's image tokens" in a for a in est.assumptions)
    assert any("largest image (4096 tokens" in a for a in est.assumptions)
    causal = estimate(text, settings, cpu_machine(), mmproj=proj)
    assert not any("caps the projector's image tokens" in a for a in causal.assumptions)


def test_the_cap_follows_the_flag_and_the_projector() -> None:
    """Only a limit above the ubatch is capped (the flag, else Qwen-VL's own 4096); Gemma 3's projector, decoded
    with non-causal attention, has a fixed image and no limit (clip ignores --image-max-tokens there)."""
    from fitplan.core.estimate.estimator import server_image_token_cap

    qwen = load_profile(str(SPARSE / "mmproj-qwen2-vl-7b.header.gguf"), True)
    gemma = load_profile(str(SPARSE / "mmproj-gemma-3-27b.header.gguf"), True)
    assert server_image_token_cap(qwen, -1, 512, text_causal=False) == 256
    assert server_image_token_cap(qwen, 200, 512, text_causal=False) is None
    assert server_image_token_cap(qwen, 1024, 512, text_causal=True) is None
    assert server_image_token_cap(gemma, 1024, 512, text_causal=True) is None
    assert server_image_token_cap(gemma, -1, 512, text_causal=True) is None


PIXTRAL = "mmproj-mistral-small-3.1-24b"


def _pixtral_cases() -> list[dict[str, Any]]:
    cases = _doc(f"{PIXTRAL}-images")["cases"]
    assert len(cases) == 25 and not any("error" in c for c in cases)
    return [c for c in cases if c["settings"]["image_max_tokens"] == 16]


@pytest.mark.parametrize("case", _pixtral_cases(), ids=lambda c: c["id"])
def test_pixtral_each_image_size_against_the_recording(case: dict[str, Any]) -> None:
    """Mistral Small 3.1's Pixtral tower, the blocks replayed with the allocator's best fit (flash attention) or
    `5E + KQ` (without): square images to the byte; a wide image differs only by the [IMG_BREAK] leaf, one
    row of the text width per merged row (the rule takes a square image of the same patches)."""
    proj = load_profile(str(SPARSE / f"{PIXTRAL}.header.gguf"), True)
    ((w, h),) = [(i["width"], i["height"]) for i in case["results"]["images"]]
    fa = case["settings"]["flash_attn"] == "auto"
    n_pos = (w // 14) * (h // 14)
    got = pixtral_graph_bytes(proj, n_pos, fa)
    recorded = case["results"]["images"][0]["compute_bytes"]
    side = math.isqrt(n_pos)
    assert got - recorded == 4 * 5120 * (side // 2 - (h // 14) // 2)


def test_pixtral_warm_up_and_largest_image(text: Any) -> None:
    """Default limits: the 16 x 16 token warm-up (64.62 MiB) and a 1024-token image (Pixtral's largest, 32 x 32
    tokens: the recorded 32 x 32 token buffer) on top of it; the assumption names Pixtral's rule."""
    proj = load_profile(str(SPARSE / f"{PIXTRAL}.header.gguf"), True)
    (case,) = [c for c in _doc(f"{PIXTRAL}-images")["cases"] if c["settings"]["image_max_tokens"] == -1]
    (largest,) = [c for c in _pixtral_cases() if c["id"] == "fa-auto-32x32"]
    settings = LaunchSettings(n_ctx=4096, n_parallel=1, repack=False, mmproj_path="p.gguf")
    est = estimate(text, settings, cpu_machine(), mmproj=proj)
    warm = _mmproj(est, "mmproj compute")
    assert abs(warm - case["results"]["warmup_compute_mib"] * MIB) <= 0.005 * MIB
    assert warm + _mmproj(est, MMPROJ_IMAGES_LABEL) == largest["results"]["images"][0]["compute_bytes"]
    assert any("largest image (1024 tokens, Pixtral's measured per-image rule)" in a for a in est.assumptions)
    assert not any("approximated from the vision tower's shapes" in a for a in est.assumptions)
