"""Weight placement rules (fitplan.core.memory.weights) against llama.cpp's load_tensors / create_tensor logic.

Real model headers come from tests/fixtures/llamacpp/models (header-only copies of the recorded sparse models);
the few rules no recorded model exercises (NextN skipping) use a small profile built here.
"""

from __future__ import annotations

import dataclasses

import pytest

from fitplan.core.base.devices import GIB, Device, DeviceKind, Machine, Vendor, assumed_gpu, host_device
from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import NGL_ALL, LaunchSettings, LoadMode, SplitMode, TensorOverride
from fitplan.core.memory.weights import (
    CpuFeatures,
    layer_devices,
    mapped_span_bytes,
    output_device,
    place_weights,
    resolve_n_gpu_layers,
    row_bytes,
)
from fitplan.core.model.profile import LayerKind, LayerProfile, ModelProfile, TensorProfile, TensorRole
from support.models import TESTS, sparse

MODELS = TESTS / "fixtures" / "llamacpp" / "models"
HOST = host_device(64 * GIB)


@pytest.fixture(scope="module")
def llama8b() -> ModelProfile:
    return sparse("llama-3.1-8b")


@pytest.fixture(scope="module")
def qwen3moe() -> ModelProfile:
    return sparse("qwen3-30b-a3b")


@pytest.fixture(scope="module")
def gemma27b() -> ModelProfile:
    return sparse("gemma-3-27b")


def _cuda(n: int, gib: float = 24) -> tuple[Device, ...]:
    return tuple(dataclasses.replace(assumed_gpu(f"GPU{i}", gib), backend_name=f"CUDA{i}") for i in range(n))


def test_ngl_counts_the_output_layer_first() -> None:
    # L = 32: index 32 is the output layer. -ngl 1 offloads only it; -ngl 32 leaves layer 0 on the CPU.
    devs = layer_devices(32, 1, [1.0])
    assert devs[32] == 0 and all(d is None for d in devs[:32])
    devs = layer_devices(32, 32, [1.0])
    assert devs[0] is None and all(d == 0 for d in devs[1:])
    assert all(d == 0 for d in layer_devices(32, 33, [1.0]))


def test_the_output_layers_device_is_layer_devices_last() -> None:
    """`output_device` (the planner's edge of the -ngl bisection) reads the output layer's GPU without the others:
    the same as `layer_devices`' last entry over splits and -ngl, the float32 split points included."""
    splits = ([1.0], [0.5, 1.0], [0.75, 1.0], [1 / 3, 2 / 3, 1.0], [0.1, 0.2, 0.9, 1.0], [0.999, 1.0])
    for n_layer in (1, 5, 6, 32, 61):
        for fractions in splits:
            for ngl in range(n_layer + 3):
                assert output_device(n_layer, ngl, fractions) == layer_devices(n_layer, ngl, fractions)[-1]
    # -ts 1,1: the output layer on the first GPU at -ngl 1, on the second from -ngl 2
    assert [output_device(6, g, [0.5, 1.0]) for g in range(4)] == [None, 0, 1, 1]


def test_auto_and_all_mean_every_layer() -> None:
    assert resolve_n_gpu_layers(NGL_ALL, 32, 1) == 33
    assert resolve_n_gpu_layers(-1, 32, 2) == 33
    assert resolve_n_gpu_layers(99, 32, 1) == 33
    assert resolve_n_gpu_layers(10, 32, 0) == 0  # no GPU


def test_split_uses_upper_bound_on_cumulative_fractions() -> None:
    # -ts 1,1 with 33 offloaded indices: layer il goes to GPU0 while il/33 < 0.5, i.e. il <= 16 (17 layers).
    devs = layer_devices(32, 33, [0.5, 1.0])
    assert devs.count(0) == 17 and devs.count(1) == 16
    # -ngl 24 -ts 3,1 on 48 layers (recorded for Qwen3-30B-A3B): i_gpu_start = 49 - 24 = 25, GPU0 takes
    # (il - 25)/24 < 0.75, i.e. il 25..42; GPU1 43..48 (48 = output).
    devs = layer_devices(48, 24, [0.75, 1.0])
    assert [i for i, d in enumerate(devs) if d == 0] == list(range(25, 43))
    assert [i for i, d in enumerate(devs) if d == 1] == list(range(43, 49))


def test_cpu_only_build_repacks_eligible_weights(llama8b: ModelProfile) -> None:
    machine = Machine((), HOST)
    p = place_weights(llama8b, LaunchSettings(load_mode=LoadMode.NONE), machine, cpu=CpuFeatures(avx2=True))
    names = {b.buffer_type for b in p.buffers}
    assert names == {"CPU", "CPU_REPACK"}
    repacked = {t.name for t in p.tensors if t.buffer_type == "CPU_REPACK"}
    # q4_K matrices are repacked with AVX2; token_embd (GET_ROWS) and norms never are; q6_K needs ARM.
    by_name = {t.name: t for t in llama8b.tensors}
    assert "token_embd.weight" not in repacked
    assert all(by_name[n].type_name == "Q4_K" for n in repacked)
    assert any(n.endswith("attn_q.weight") for n in repacked)
    p2 = place_weights(llama8b, LaunchSettings(load_mode=LoadMode.NONE, repack=False), machine)
    assert {b.buffer_type for b in p2.buffers} == {"CPU"}
    assert p2.device_bytes(None) == p.device_bytes(None)  # repacked copies have the same size


def test_gpu_build_uses_pinned_host_buffer_not_repack(llama8b: ModelProfile) -> None:
    machine = Machine(_cuda(1), HOST)
    s = LaunchSettings(n_gpu_layers=0, load_mode=LoadMode.NONE)
    p = place_weights(llama8b, s, machine)
    assert {b.buffer_type for b in p.buffers} == {"CUDA_Host"}
    # With mmap the pinned host buffer is replaced by the mapped file.
    p = place_weights(llama8b, dataclasses.replace(s, load_mode=LoadMode.AUTO), machine)
    assert {b.buffer_type for b in p.buffers} == {"CPU_Mapped"} and p.file_backed
    # --no-host lets CPU_REPACK take the eligible weights again.
    p = place_weights(llama8b, dataclasses.replace(s, no_host=True, load_mode=LoadMode.NONE), machine)
    assert "CPU_REPACK" in {b.buffer_type for b in p.buffers}


def test_input_embeddings_stay_on_host(llama8b: ModelProfile) -> None:
    p = place_weights(llama8b, LaunchSettings(n_gpu_layers=NGL_ALL), Machine(_cuda(1), HOST))
    emb = [t for t in p.tensors if t.name == "token_embd.weight"]
    assert len(emb) == 1 and emb[0].device is None
    out = [t for t in p.tensors if t.name == "output.weight"]
    assert out[0].device == 0


def test_tied_embedding_is_duplicated_on_the_gpu(gemma27b: ModelProfile) -> None:
    assert gemma27b.tied_embeddings
    p = place_weights(gemma27b, LaunchSettings(n_gpu_layers=NGL_ALL), Machine(_cuda(1, 48), HOST))
    dup = [t for t in p.tensors if t.duplicate]
    assert len(dup) == 1 and dup[0].device == 0
    # token_embd is q4_K [5376, 262208]: 5376/256 * 144 = 3024 bytes per row, x 262208 = 792,916,992 bytes. On CUDA
    # ne0 % 512 = 256, so one padding row of 256 elements is added (144 bytes): 792,917,136; PAD(.., 128) = 792,917,248.
    assert dup[0].alloc_bytes == 792_917_248
    # CPU-only with no repack: input and output share one tensor, no copy.
    p = place_weights(gemma27b, LaunchSettings(repack=False), Machine((), HOST))
    assert not any(t.duplicate for t in p.tensors)


def test_cuda_row_padding_and_alignment() -> None:
    # q4_K, ne0 = 2880: 2880 % 512 = 320, padding row = 192 elements -> 144 * 192 // 256 = 108 bytes (ggml_row_size
    # does no block check).
    assert row_bytes(12, 192) == 108


def test_cpu_moe_and_n_cpu_moe(qwen3moe: ModelProfile) -> None:
    machine = Machine(_cuda(1, 80), HOST)
    p = place_weights(qwen3moe, LaunchSettings(n_gpu_layers=NGL_ALL, cpu_moe=True), machine)
    exps = [t for t in p.tensors if "_exps" in t.name]
    assert exps and all(t.device is None for t in exps)
    assert all(t.device == 0 for t in p.tensors if ".attn_q." in t.name)
    p = place_weights(qwen3moe, LaunchSettings(n_gpu_layers=NGL_ALL, n_cpu_moe=2), machine)
    on_cpu = {t.name.split(".")[1] for t in p.tensors if "_exps" in t.name and t.device is None}
    assert on_cpu == {"0", "1"}  # blk\.0 and blk\.1 only; blk.10..19 do not match "blk\.1\.ffn"


def test_override_to_gpu_and_unknown_buffer(llama8b: ModelProfile) -> None:
    machine = Machine(_cuda(2), HOST)
    s = LaunchSettings(n_gpu_layers=NGL_ALL, tensor_overrides=(TensorOverride(r"blk\.0\.", "CUDA1"),))
    p = place_weights(llama8b, s, machine)
    assert all(t.device == 1 for t in p.tensors if t.name.startswith("blk.0."))
    bad = dataclasses.replace(s, tensor_overrides=(TensorOverride(r"blk\.0\.", "CUDA7"),))
    with pytest.raises(SettingsError, match="unknown buffer type"):
        place_weights(llama8b, bad, machine)


def test_split_mode_none_and_device_filters(llama8b: ModelProfile) -> None:
    machine = Machine(_cuda(2), HOST)
    p = place_weights(
        llama8b, LaunchSettings(n_gpu_layers=NGL_ALL, split_mode=SplitMode.NONE, main_gpu=1), machine
    )
    # Only -mg 1 is kept: it is device 0 of the placement, and keeps its llama.cpp name.
    assert {(b.buffer_type, b.device) for b in p.buffers if b.device is not None} == {("CUDA1", 0)}
    assert p.device_bytes(0) > 4 * GIB
    p = place_weights(llama8b, LaunchSettings(devices=()), machine)
    assert all(b.device is None for b in p.buffers)
    with pytest.raises(SettingsError):
        place_weights(llama8b, LaunchSettings(devices=("CUDA9",)), machine)


def _nextn_profile() -> ModelProfile:
    def t(name: str, layer: int | None, role: TensorRole, shape: tuple[int, ...]) -> TensorProfile:
        return TensorProfile(
            name, 0, "F32", shape, 4 * shape[0] * (shape[1] if len(shape) > 1 else 1), layer, role
        )

    tensors = (
        t("token_embd.weight", None, TensorRole.TOKEN_EMBD, (64, 100)),
        t("output.weight", None, TensorRole.OUTPUT, (64, 100)),
        t("blk.0.attn_q.weight", 0, TensorRole.ATTENTION, (64, 64)),
        t("blk.1.attn_q.weight", 1, TensorRole.ATTENTION, (64, 64)),
        t("blk.1.nextn.eh_proj.weight", 1, TensorRole.OTHER, (128, 64)),
    )
    layers = (
        LayerProfile(0, LayerKind.FULL, 1, 1, 64, 64, 0, has_kv=True),
        LayerProfile(1, LayerKind.NEXTN, 1, 1, 64, 64, 0, is_nextn=True),
    )
    return ModelProfile(
        path="x.gguf", shard_paths=("x.gguf",), architecture="glm4moe", name="x", file_type="F32",
        file_size=0, n_params=0, n_layer=1, n_layer_all=2, n_nextn=1, n_embd=64, n_vocab=100, n_ctx_train=256,
        layers=layers, tensors=tensors,
    )  # fmt: skip


def test_nextn_layers_are_skipped_unless_mtp() -> None:
    prof = _nextn_profile()
    machine = Machine((), HOST)
    p = place_weights(prof, LaunchSettings(), machine)
    assert set(p.skipped) == {"blk.1.attn_q.weight", "blk.1.nextn.eh_proj.weight"}
    p = place_weights(prof, LaunchSettings(), machine, load_mtp=True)
    assert not p.skipped and len(p.tensors) == 5


def test_rpc_device_uses_cpu_alignment_and_no_host_buffer(llama8b: ModelProfile) -> None:
    rpc = Device("RPC0", DeviceKind.GPU, 64 * GIB, 64 * GIB, Vendor.RPC, host="127.0.0.1:50052")
    p = place_weights(llama8b, LaunchSettings(n_gpu_layers=16), Machine((rpc,), HOST), cpu=CpuFeatures())
    assert {b.buffer_type for b in p.buffers} == {"RPC0[127.0.0.1:50052]", "CPU_Mapped", "CPU_REPACK"}


def test_the_first_matching_override_wins_before_n_cpu_moe(qwen3moe: ModelProfile) -> None:
    """llama_model_loader tries `-ot` entries in order, then the ones --n-cpu-moe adds: the first match decides."""
    machine = Machine(_cuda(1, 80), HOST)
    s = LaunchSettings(
        n_gpu_layers=NGL_ALL, n_cpu_moe=1, tensor_overrides=(TensorOverride(r"blk\.0\.ffn_up_exps", "CUDA0"),)
    )
    where = {t.name: t.device for t in place_weights(qwen3moe, s, machine).tensors}
    assert where["blk.0.ffn_up_exps.weight"] == 0
    assert where["blk.0.ffn_gate_exps.weight"] is None and where["blk.0.ffn_down_exps.weight"] is None
    assert where["blk.1.ffn_up_exps.weight"] == 0


def test_warm_placements_equal_fresh_ones(qwen3moe: ModelProfile, gemma27b: ModelProfile) -> None:
    """The memos a plan's search fills (per pattern, per tensor and per layer run) never change an answer: every
    placement of a sequence equals the one computed with every memo emptied first."""
    from fitplan.core.memory import weights

    machine = Machine(_cuda(3, 24), HOST)
    variants = [
        LaunchSettings(n_gpu_layers=NGL_ALL, n_cpu_moe=n, tensor_split=ts)
        for n in (0, 3, 17, 48, 3)
        for ts in ((), (1.0, 2.0, 1.0))
    ] + [
        LaunchSettings(n_gpu_layers=20, cpu_moe=True),
        LaunchSettings(n_gpu_layers=NGL_ALL, tensor_overrides=(TensorOverride(r"token_embd", "CUDA2"),)),
        LaunchSettings(n_gpu_layers=7, tensor_overrides=(TensorOverride(r"blk\.[0-4]\.attn", "CUDA1"),)),
    ]
    memos = (weights._PLACEMENT_CACHE, weights._CHOOSERS, weights._LOADED, weights._MATCHES)
    for profile in (qwen3moe, gemma27b):
        warm = [place_weights(profile, s, machine) for s in variants]
        for s, w in zip(variants, warm, strict=True):
            for memo in memos:
                memo.clear()
            assert place_weights(profile, s, machine) == w, s


def test_a_real_load_maps_the_span_of_the_host_tensors(llama8b: ModelProfile) -> None:
    """With mmap the host's mapped buffer is the file from its first to the end of its last host tensor
    (`mapped_span_bytes`); llama.cpp's dry run and the weights term count the tensors. The recorded launch of this
    model on the CPU with repacking on (tests/fixtures/launch/repack.json): CPU_Mapped 4932.80 MiB."""
    machine = Machine((), HOST)
    p = place_weights(llama8b, LaunchSettings(), machine, cpu=CpuFeatures(avx2=True))
    first = min(t.offset for t in llama8b.tensors)
    end = max(t.offset + t.n_bytes for t in llama8b.tensors)
    # every tensor is on the host and token_embd comes first, output.weight last: the whole data section
    assert mapped_span_bytes(llama8b, p) == end - first
    assert round((end - first) / 2**20, 2) == 4932.80
    assert mapped_span_bytes(llama8b, p) > p.device_bytes(None) - sum(
        b.bytes for b in p.buffers if b.buffer_type == "CPU_REPACK"
    )
    # no repacking: the same span, every tensor in the mapped buffer
    no_repack = place_weights(llama8b, LaunchSettings(repack=False), machine)
    assert mapped_span_bytes(llama8b, no_repack) == end - first
    # a GPU build: the host's weights go to the GPU's pinned host buffer, which is allocated, not mapped
    # (`is_default_buft` is false for it)
    gpu = place_weights(llama8b, LaunchSettings(n_gpu_layers=NGL_ALL), Machine(_cuda(1), HOST))
    assert {t.buffer_type for t in gpu.tensors if t.device is None} == {"CUDA_Host"}
    assert mapped_span_bytes(llama8b, gpu) == 0
    # without mmap nothing is mapped
    no_mmap = place_weights(llama8b, LaunchSettings(load_mode=LoadMode.NONE), machine)
    assert mapped_span_bytes(llama8b, no_mmap) == 0
