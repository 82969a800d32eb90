"""Compute-buffer layouts read from the graph allocator's list of live tensors at each new peak (a `ggml-base`
built with GGML_ALLOCATOR_DEBUG, llama.cpp 515e85511): architectures without mixed-batch inputs, the Mamba block
after an attention-only layer, and the logits of a Mamba-2 MoE hybrid's output GPU over RPC. The expected sizes
are llama.cpp's compute buffers of the same dry runs (`membreak`) or the tensor shapes the peak lists show."""

from __future__ import annotations

import pytest

from fitplan.core.base.devices import GIB, Machine, host_device
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.memory.compute import compute_buffers
from fitplan.core.memory.compute.recurrent import mamba2_split_below_logits
from fitplan.core.memory.weights import place_weights
from fitplan.core.model.profile import ModelProfile
from support.compute import compute_inputs, parts
from support.models import MODELS, profile_at

HOST = host_device(64 * GIB)
MIB = 1 << 20


def _host_total(profile: ModelProfile, **kw: object) -> tuple[int, dict[str, int]]:
    pl = place_weights(profile, LaunchSettings(), Machine((), HOST))
    (host,) = compute_buffers(profile, compute_inputs(**kw), pl)
    return host.bytes, parts(host)


def test_cogvlm_has_no_mixed_batch_blocks() -> None:
    p = profile_at(MODELS / "archs/cogvlm-dense.header.gguf")
    assert p.traits.graph.no_mixed_batch
    # peak list at c512: inp_embd, the freed token-embedding rows' block and ffn_inp (0.5 MiB each), with gate, up
    # and the GLU output ([384, 512] f32, 0.75 MiB each) on top; llama.cpp's buffer 4468736 bytes
    total, named = _host_total(p, n_kv_base=512)
    assert named["embeddings + residual activations"] == 3 * MIB // 2
    assert total == pytest.approx(4468736, rel=0.005)
    # without flash attention (f32 mask and V's row indices, 1 MiB each): 6037504 bytes
    total, _ = _host_total(p, n_kv_base=512, flash_attn=False)
    assert total == pytest.approx(6037504, rel=0.005)


def test_mixed_batch_archs_keep_five_blocks() -> None:
    p = profile_at(MODELS / "archs/llama-dense.header.gguf")
    assert not p.traits.graph.no_mixed_batch
    _, named = _host_total(p, n_kv_base=512)
    assert named["embeddings + residual activations"] == 5 * MIB // 2


@pytest.mark.parametrize(
    ("n_kv", "llamacpp"),
    [
        (2048, 9996320),  # the conv output (2 MiB) in the freed 2 MiB mask
        (4096, 11040800),  # the input projection zxBCdt (3 MiB) in the freed 4 MiB mask
    ],
)
def test_mamba_block_after_attention_only_layer(n_kv: int, llamacpp: int) -> None:
    # nemotron_h_moe's smoke model: an attention-only layer, a Mamba-2 layer, an FFN layer (-fa on, -ub 512)
    p = profile_at(MODELS / "archs/nemotron_h_moe-dense.header.gguf")
    total, _ = _host_total(p, n_kv_base=n_kv)
    assert total == pytest.approx(llamacpp, rel=0.005)


def test_granite_output_gpu_below_logits() -> None:
    p = profile_at(MODELS / "sparse/granite-4.0-h-tiny.header.gguf")
    block = 1536 * 512 * 4
    # -ngl 20 over two RPC devices, layers 30-39 on the output GPU (Mamba layers ahead of attention layer 35):
    # the logits at 45.04 MiB, above the FFN input's block (counted with the logits), the norm's and the hole's
    # blocks, gate, up, the GLU output ([512, 6, 512] f32, 6 MiB each) and the down outputs ([1536, 6, 512], 18 MiB)
    assert mamba2_split_below_logits(p, list(range(30, 40)), True, 512) == 2 * block + 3 * 6 * MIB + 18 * MIB
    # -cmoe: the experts on the host, only the down outputs copied back above the blocks (logits at 27.04 MiB)
    assert mamba2_split_below_logits(p, list(range(20, 40)), False, 512) == 2 * block + 18 * MIB
    # layers 35-39 (first layer the attention layer) and 37-39 (no attention layer): the logits next to the
    # blocks (9.29 MiB in both peak lists), nothing modelled under them
    assert mamba2_split_below_logits(p, list(range(35, 40)), True, 512) == 0
    assert mamba2_split_below_logits(p, list(range(37, 40)), True, 512) == 0


def test_pure_mamba1_x_db_in_the_mixed_rows_hole() -> None:
    # the mamba smoke model (no attention layer), c512: x_db ([2 + 2 x 128, 512] f32, 0.504 MiB) in the space of
    # `inp_mixed_embd` and the mixed batch's tokens and slots (0.506 MiB); the peak list's scan phase: xz 2 MiB, the
    # conv output 1 MiB, dt 1 MiB and the scan output 1.25 MiB; llama.cpp's buffer 8142880 bytes (7.77 MiB)
    p = profile_at(MODELS / "archs/mamba-dense.header.gguf")
    total, named = _host_total(p, n_kv_base=0)
    assert named["attention / SSM scan"] == 2 * MIB + 1 * MIB + 1 * MIB + 5 * MIB // 4
    assert total == pytest.approx(8142880, rel=0.005)


@pytest.mark.parametrize(
    ("n_kv", "llamacpp", "on_top"),
    [
        (
            32768,
            188764192,
            True,
        ),  # peak list: `result_output` (128 MiB) at 52.02-180.02 MiB, above the 32 MiB mask
        (131072, 205541408, False),  # the 128 MiB mask holds the logits; the peak at the first layer's FFN
    ],
)
def test_lfm2_logits_in_the_freed_mask(n_kv: int, llamacpp: int, on_top: bool) -> None:
    # LFM2-1.2B (wide grid, -fa on, -np 1, -ub 512): the logits [65536, 512] f32 go into the f16 mask
    # [n_kv, 512], freed after the last attention layer, once it is as large as they are
    p = profile_at(MODELS / "sparse/lfm2-1.2b.header.gguf")
    total, named = _host_total(p, n_kv_base=n_kv)
    assert total == pytest.approx(llamacpp, rel=0.001)
    assert ("logits" in named) is on_top
