"""The estimator against the GPU recordings: llama.cpp's own scheduler and allocator on CUDA-shaped stand-in
devices (tests/fixtures/llamacpp/standin and standinarchs, recorded by `tools/groundtruth/record.py --grids
standin`), and on Vulkan- and Metal-shaped ones (standin_vulkan, standin_metal; `--grids standin_vulkan,
standin_metal`), each held to the share it reaches with its far-under cases named.

Weights and caches, padding included, must be exact everywhere. Compute: the published-shape models are held to
the share they reach today (a ratchet: it may rise, never fall) and the cases more than 10% under are named, so a
new one fails; the issue's case (a 24 GiB card with the experts of Qwen3-30B-A3B, gpt-oss-120b and DeepSeek-V3 in
host memory, at `-ub 512` and `-ub 2048`) is held to 5%. The architecture smoke models (hidden size 128-512, where
one activation block is 8-15% of the buffer) are reported in docs/accuracy.md, not held to a share.
"""

from __future__ import annotations

from typing import Any

import pytest

from support.tools import load_tool

report = load_tool("tools/accuracy_report.py")

#: The share of published-shape recordings within 5% (measured: 479 of 480, with MLA's next layer over a host
#: cache; 472 of 474 before it and its six new cases; 469 before the first GPU's one-block
#: FFN norm hole under a late mask (`ffn_norm_hole`); 383 of 388 before llama-server's `-cmoe` cases; 378 before
#: only the first split's masks were kept under the logits and the rotated attention output's one-block FFN hole;
#: 360 before the host's copies for recurrent states in host memory and the masks copied at a later split).
PUBLISHED_SHARE = 0.98
#: Published-shape recordings the estimate is more than 10% under, each with the reason in docs/accuracy.md.
KNOWN_FAR_UNDER: frozenset[str] = frozenset()


@pytest.fixture(scope="module")
def everything() -> Any:
    return report.summarize()


@pytest.fixture(scope="module")
def gpu(everything: Any) -> Any:
    return everything.on("cuda")


def _published(s: Any) -> list[Any]:
    return [r for r in s.measured if r.grid == "standin"]


def _result(s: Any, key: str) -> Any:
    """The report's result for one recorded case, `GRID/MODEL/CASE` (computed once for the module)."""
    return next(r for r in s.measured if r.key == key)


def _compute(s: Any, key: str, device: str = "CUDA0") -> tuple[int, int]:
    """One device's compute buffer in one recorded case, `GRID/MODEL/CASE`: (recorded, estimated) bytes."""
    recorded, estimated = next(d.compute for d in _result(s, key).devices if d.name == device)
    return recorded, estimated


def _model_results(s: Any, grid: str, model: str) -> list[Any]:
    """The report's results for every recorded case of one model in one grid."""
    return [r for r in s.measured if r.grid == grid and r.model == model]


def test_the_stand_in_recordings_are_there(gpu: Any) -> None:
    assert len(_published(gpu)) >= 380
    assert len([r for r in gpu.measured if r.grid == "standinarchs"]) >= 600
    assert not gpu.errors, "estimator failed on: " + ", ".join(r.key for r in gpu.errors)


def test_weights_and_caches_exact_with_the_devices_padding(gpu: Any) -> None:
    """CUDA pads a quantized tensor's last row to 512 elements and every tensor to 128 bytes: DeepSeek's 576-wide
    q8_0 MLA rows take 512 bytes more per layer."""
    assert not gpu.weights_misses, [r.key for r in gpu.weights_misses]
    assert not gpu.context_misses, [r.key for r in gpu.context_misses]


def test_the_padded_cache_rows_are_what_llama_cpp_allocated(gpu: Any) -> None:
    """deepseek-v2-lite at 4096 cells with a q8_0 MLA cache on one stand-in card: llama.cpp's context buffer is
    67696128 bytes (the recording c4096-faon-q8_0), 27 x 512 bytes more than the rows alone."""
    import json

    doc = json.loads((report.FIXTURES / "standin" / "deepseek-v2-lite.json").read_text())
    case = next(c for c in doc["cases"] if c["id"] == "c4096-faon-q8_0")
    gpu_buf = next(b for b in case["results"]["buffers"] if not b["is_host"])
    assert gpu_buf["context"] == 67696128 == 27 * 576 * 4096 * 34 // 32 + 27 * 512
    r = _result(gpu, "standin/deepseek-v2-lite/c4096-faon-q8_0")
    assert [d.context for d in r.devices if d.name == "CUDA0"] == [(67696128, 67696128)]


def test_refused_settings_are_refused(gpu: Any) -> None:
    refused = [r for r in gpu.results if r.expected_error]
    assert refused, "the stand-in grid records two refusals (grok and laguna smoke models)"
    assert all(r.error for r in refused), [r.key for r in refused if not r.error]


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "gpt-oss-120b", "deepseek-v3"])
@pytest.mark.parametrize("ub", [512, 2048])
def test_experts_in_host_memory_on_a_24_gib_card(gpu: Any, model: str, ub: int) -> None:
    """The issue's case: with `-cmoe` the first GPU copies one expert matrix in at a time (before: all three on top,
    +107% on Qwen3-30B-A3B, +132% on DeepSeek-V3, +220% on gpt-oss-120b at `-ub 512`)."""
    keys = {f"standin/{model}/c8192-faon-cmoe-ub{ub}", f"standin/{model}/c32768-faon-q8_0-cmoe-ub{ub}"}
    cases = [r for r in gpu.measured if r.key in keys]
    assert len(cases) == 2
    if (
        model == "gpt-oss-120b"
    ):  # at 32768 cells the q8_0 cache's f16 copies are counted where holes take them
        cases = cases[:1] if "c8192" in cases[0].key else cases[1:]
    for r in cases:
        assert abs(r.compute_rel) <= report.COMPUTE_TOLERANCE, (r.key, r.compute_rel)


def test_every_layer_on_the_host_with_op_offload(gpu: Any) -> None:
    """`-ngl 0`: the first GPU runs every layer with copies of their weights, and the output matrix's copy comes
    with the output layer's split, next to the logits, not under the layers (before: +9.8% to +30.1%). Not
    granite-4.0-h-tiny, whose Mamba-2 states stay on the host (KNOWN_FAR_UNDER)."""
    ids = ("c8192-faon-ngl0", "c8192-faon-ngl0-ub2048")
    cases = [r for r in _published(gpu) if r.case in ids and r.model != "granite-4.0-h-tiny"]
    assert len(cases) >= 18
    assert all(abs(r.compute_rel) <= report.COMPUTE_TOLERANCE for r in cases), [
        (r.key, round(r.compute_rel, 3)) for r in cases
    ]


@pytest.mark.parametrize(
    "key",
    [
        f"{model}/{case}"
        for model, cases in (
            (
                "granite-4.0-h-tiny",
                (
                    "c8192-faon-nkvo",
                    "c8192-faon-ngl0",
                    "c8192-faon-ngl0-ub2048",
                    "c8192-faon-ngl20",
                    "c8192-faon-ngl20-ub2048",
                    "2dev-c8192-faon-ngl20",
                ),
            ),
            (
                "qwen3-next-80b-a3b",
                ("c8192-faon-nkvo", "c8192-faon-ngl0", "c8192-faon-ngl0-ub2048", "c8192-faon-ngl24-ub2048"),
            ),
        )
        for case in cases
    ],
)
def test_recurrent_states_in_host_memory_on_the_host(gpu: Any, key: str) -> None:
    """Recurrent states in host memory (-nkvo, or the layers' weights there with op offload): the host copies the
    conv input's view in for the state's copy back. granite-4.0-h-tiny's Mamba-2 layers with their weights there
    also run the scan on the host on its copies of x, B, C (its one-row output is never offloaded): the host's
    buffer was 20.0 MiB estimated against 29.6 (-nkvo) and 50.0 (-ngl 20, -ngl 0) recorded. Qwen3-Next's gated
    delta nets: 24.0 estimated against 32.1 before."""
    r = next(r for r in gpu.measured if r.key == f"standin/{key}")
    host = next(d for d in r.devices if d.name == "Host")
    real, est = host.compute
    assert abs(est - real) <= 0.002 * real, (real / 2**20, est / 2**20)


@pytest.mark.parametrize(
    ("case", "over"),
    [("c8192-faon-nkvo", 0.05), ("c8192-faon-nkvo-ub2048", 0.05), ("c8192-faoff-nkvo", 0.09)],
)
def test_mamba_states_in_host_memory_leave_the_free_end_up(gpu: Any, case: str, over: float) -> None:
    """granite-4.0-h-tiny with `-nkvo` and one slot: each Mamba layer's zero-row gather of the other states is a
    zero-byte tensor freed inside a free block, the free list goes out of order and the freed space stops merging
    into the free end, so the logits go above the layer phase (without its scores).
    Before, the logits counted above the blocks: the GPU -13.1% (216.0 MiB against 248.5), -10.5% at `-ub 2048`,
    -6.0% without flash attention (now +1.5%, +4.4%, and +8.0%: the recording's free end at 46.5 MiB, the bound
    under the logits 66.0). With flash attention the host runs the attention over its cache (`_host_attention`),
    so the layer phase the bound takes has no masks: 244.1 MiB against 248.5 recorded, within 2% under."""
    r = next(r for r in gpu.measured if r.key == f"standin/granite-4.0-h-tiny/{case}")
    real, est = next(d.compute for d in r.devices if d.name == "CUDA0")
    assert 0.98 * real <= est <= (1 + over) * real, (real / 2**20, est / 2**20)


@pytest.mark.parametrize("model", ["granite-4.0-h-tiny", "qwen3-next-80b-a3b"])
def test_states_in_host_memory_with_two_slots_or_a_delta_net_keep_the_free_list_in_order(
    gpu: Any, model: str
) -> None:
    """With two slots the gather of the other states has a row (no zero-byte tensor), and a gated delta net's
    gather reads every state: the logits stay above the blocks (granite 205.0 MiB recorded with two slots, 212.0
    estimated; 249.7 with the free-end rule)."""
    cases = [f"standin/{model}/c8192-np2-faon-nkvo"] + (
        [f"standin/{model}/{c}" for c in ("c8192-faon-nkvo", "c8192-faoff-nkvo", "c8192-faon-nkvo-ub2048")]
        if model == "qwen3-next-80b-a3b"
        else []
    )
    for key in cases:
        r = next(r for r in gpu.measured if r.key == key)
        assert abs(r.compute_rel) <= report.COMPUTE_TOLERANCE, (key, r.compute_rel)


@pytest.mark.parametrize(
    "model", ["mamba-dense", "mamba2-dense", "granitehybrid-dense", "jamba-dense", "falcon-h1-dense"]
)
def test_mamba_blocks_on_the_first_gpu(gpu: Any, model: str) -> None:
    """Mamba blocks on one stand-in card, over the hole of the freed embeddings-input copies. A Mamba model without
    attention: two blocks replayed, the next block's conv rows splitting the first one's freed scan space
    (Mamba-2). Before: the host's layout with five blocks, mamba +11% (6.76 MiB recorded, 7.75 estimated), mamba2
    +1.9%. After an attention layer with an FFN (granitehybrid): the copies' blocks and the masks' space one free
    block (before: +4.1% with flash attention, +19.2% without, 9.02 MiB recorded, 11.52 estimated); jamba's
    residual kept in the embeddings' copy between them (before: +5.0..+13.3%; its q8_0 case is 2.1% over);
    falcon-h1's parallel attention output and z's copy in the copies' blocks (before: +8.4..+11.9%), with a q8_0
    cache the flash-attention output's f16 copies live through the SSM (before: 11.61 MiB, 13.61 recorded)."""
    cases = [
        r
        for r in gpu.measured
        if r.grid == "standinarchs"
        and r.model == model
        and not r.case.startswith("2dev")
        and not (model == "jamba-dense" and "q8_0" in r.case)
    ]
    assert len(cases) == (3 if model == "jamba-dense" else 4)
    for r in cases:
        (real, est) = next(d.compute for d in r.devices if d.name == "CUDA0")
        assert abs(est - real) <= 0.002 * real, (r.key, real / 2**20, est / 2**20)


@pytest.mark.parametrize("case", ["c512-np1", "c1024-np2-nokvu"])
def test_gated_delta_net_on_the_first_gpu(gpu: Any, case: str) -> None:
    """The qwen35 smoke model on one stand-in card: the delta net's input norm in the first freed copy's block,
    the state read in the second, one block fewer than the host's five (5.65 MiB recorded, 6.15 estimated
    before)."""
    r = next(r for r in gpu.measured if r.key == f"standinarchs/qwen35-dense/{case}")
    (real, est) = next(d.compute for d in r.devices if d.name == "CUDA0")
    assert abs(est - real) <= 0.002 * real, (real / 2**20, est / 2**20)


@pytest.mark.parametrize(
    "key",
    [
        "granite-4.0-h-tiny/c32768-faon-q8_0-cmoe-ub512",
        "granite-4.0-h-tiny/c32768-faon-q8_0-cmoe-ub2048",
        "qwen3-next-80b-a3b/c32768-faon-q8_0-cmoe-ub2048",
    ],
)
def test_masks_copied_after_the_first_split_are_not_under_the_logits(gpu: Any, key: str) -> None:
    """Hybrids whose first attention layer comes after experts in host memory: the GPU copies the masks in at a
    later split, whose copies the allocator frees, so the logits do not sit above them (before: the 32 MiB mask
    at 32768 cells counted under the logits, granite +12.7%, Qwen3-Next +8.9%)."""
    r = next(r for r in gpu.measured if r.key == f"standin/{key}")
    assert abs(r.compute_rel) <= 0.02, r.compute_rel


@pytest.mark.parametrize(
    "key",
    [
        "deepseek-v2-lite/c32768-faon-ngl0-server",
        "deepseek-v2-lite/c32768-faon-ngl13-server",
        "deepseek-v2-lite/2dev-c32768-faon-ngl13-server",
        "deepseek-v2-lite/c32768-faon-nkvo-server",
        "deepseek-v2-lite/c32768-faon-ngl13-nkvo-server",
        "deepseek-v2-lite/2dev-c32768-faon-nkvo",
        "deepseek-v2-lite/c131072-faon-ngl0-server",
        "deepseek-v2-lite/c32768-faon-q8_0-ngl0-server",
        "deepseek-v2-lite/c131072-faon-q4_0-nkvo-server",
        "deepseek-v2-lite/2dev-c32768-faon-nkvo-ub2048-server",
        "deepseek-v3/c32768-faon-ngl0-server",
        "deepseek-v3/c131072-faon-q4_0-nkvo-server",
        "deepseek-v3/c32768-faon-nkvo-server",
        "deepseek-v3/2dev-c32768-faon-nkvo",
    ],
)
def test_mla_attention_over_copies_of_a_host_cache(gpu: Any, key: str) -> None:
    """MLA layers whose cache is in host memory (host layers with op offload, or `-nkvo`): the GPU copies in the
    compressed cache's K view, V's view of it and the mask above the absorbed query, and a host layer's expert
    copies go above the mask left there (`MlaHostCache`). Every GPU within 0.5% of the recording (before:
    DeepSeek-V2-Lite at `-ngl 0` 279.5 MiB estimated against 347.0 recorded, 17.1% under; with `-nkvo` and
    llama-server's reserve 80.1 against 160.0; DeepSeek-V3's second GPU with `-nkvo` 364.0 against 481.0; at
    131072 cells, where the second host layer's V copy goes above the mask, 375.5 against 616.0, and 472.0 with
    the first layer's copies alone; with q4_0 caches and `-nkvo` at 131072 cells, where the attention's output
    holds the f16 copies of both copied views, 80.1 against 553.0; over two GPUs at `-ub 2048`, where layer 0's
    gate output fits under the mask and up's and the GLU's go above it, 320.5 and 230.0 against 523.0 and 384.0,
    608.5 and 510.0 with each FFN as one block above the mask)."""
    r = _result(gpu, f"standin/{key}")
    gpus = [d for d in r.devices if d.name.startswith("CUDA")]
    assert gpus
    for d in gpus:
        recorded, estimated = d.compute
        assert abs(estimated - recorded) <= 0.005 * recorded, (d.name, recorded / 2**20, estimated / 2**20)


@pytest.mark.parametrize(
    ("key", "device", "within"),
    [
        ("deepseek-v3/c65536-np2-faon-nkvo-server", "CUDA0", 0.005),
        ("deepseek-v3/c32768-faon-q8_0-nkvo-server", "CUDA0", 0.05),
        ("deepseek-v3/2dev-c131072-faon-nkvo-server", "CUDA1", 0.005),
    ],
)
def test_mla_host_cache_next_layer_attention_replayed(gpu: Any, key: str, device: str, within: float) -> None:
    """DeepSeek-V3 (q_lora) with `-nkvo` and every layer on the GPU: the second layer's query, its K and V copies
    and its attention's output replayed over what the first left (`MlaHostCache.next_query`). The allocator's list
    with two sequences at 65536 cells: layer 1's q_nope_absorbed above the mask (232 MiB), Qcur-1 above it; K's
    72 MiB copy takes that 128 MiB block back (the smallest that holds it), V's the 144 MiB hole under the mask,
    and the 128 MiB attention output lands above Qcur-1 at 504 MiB (632.0 recorded and estimated; 520.0 before,
    15.6% under, with layer 1's copies placed but not its attention output). With q8_0 caches at 32768 cells
    623.1 against 637.1 (588.0 before, 6.8% under). On the second of two GPUs at 131072 cells the input copied in
    at layer 31's split is freed and layer 32's norm and input sit in the two blocks above it: its q in that block,
    its K copy where q and q_nope_absorbed were, V's and the output above the mask (897.0 MiB recorded and
    estimated; 769.0 before, 14.3% under on that GPU)."""
    recorded, estimated = _compute(gpu, f"standin/{key}", device)
    assert abs(estimated - recorded) <= within * recorded, (recorded / 2**20, estimated / 2**20)


@pytest.mark.parametrize(
    ("key", "device"),
    [
        ("deepseek-v2-lite/c8192-faon-ngl13-ub2048", "CUDA0"),
        ("deepseek-v2-lite/c8192-faon-ngl13-noopoffload", "CUDA0"),
        ("llama-4-scout-17b-16e/c8192-faon-ngl24-noopoffload", "CUDA0"),
        ("llama-4-scout-17b-16e/2dev-c8192-faon-ngl24", "CUDA1"),
        ("llama-4-scout-17b-16e/2dev-c8192-faon-ncmoe24", "CUDA1"),
    ],
)
def test_the_last_shared_expert_layer_under_the_logits_after_host_layers(
    gpu: Any, key: str, device: str
) -> None:
    """A MoE model with a shared expert at a partial `-ngl`, the output phase on the GPU's buffer. With op offload
    the GPU runs the host layers too and the experts' sum of the last layer goes above their down outputs, which
    stay under the logits (`PlanBuilder._host_first_layer`; recorded 976.0 MiB, 880.0 estimated before); without
    it the layers' outputs stay in the lowest blocks and the sum takes a freed one, two blocks under the logits
    (`PlanBuilder._after_host_ffn`; recorded 208.0 MiB, 236.3 estimated before with the sum above the down
    outputs). Llama-4-Scout without op offload, whose router weights the input first: its two lowest blocks, the
    router's outputs, the down outputs and their sum under the logits (`weighted_input_below_logits`; recorded
    434.7 MiB, 404.6 estimated before with the output norm's block alone); on a later GPU its one expert's sum
    takes the previous layer's freed output block, one block above the lowest (414.6 MiB recorded on the second
    GPU, 404.6 estimated before). Each within 0.5%."""
    recorded, estimated = _compute(gpu, f"standin/{key}", device)
    assert abs(estimated - recorded) <= 0.005 * recorded, (recorded / 2**20, estimated / 2**20)


@pytest.mark.parametrize(
    "key",
    [
        "llama-3.1-8b/c4096-faon-ngl0-server",
        "llama-3.1-8b/c4096-faon-ngl16-server",
        "llama-3.1-8b/c32768-faon-ngl0-server",
        "llama-3.1-8b/c32768-faon-ngl16-server",
    ],
)
def test_later_host_layer_replayed_over_the_first(gpu: Any, key: str) -> None:
    """A host layer's attention on the first GPU over copies of its cache: the second layer replayed whole over
    what the first left (`HostCacheAttention.next_layer`): its Q's product above the mask, its residual in the V
    copy's freed block above it, its FFN one block higher than the first layer's (before: 131.5 MiB estimated at
    4096 cells against 139.5 recorded, 4.6% under; 264.0 at 32768 cells, where the first layer's copies set the
    peak)."""
    recorded, estimated = _compute(gpu, f"standin/{key}")
    assert abs(estimated - recorded) <= 0.002 * recorded, (recorded / 2**20, estimated / 2**20)


def test_second_cache_residual_above_the_output_matrix_copy(gpu: Any) -> None:
    """gemma-3-27b with llama-server's reserve at `-ngl 31`, 4096 cells: host layer 5, the first GPU's first
    full-attention layer after five sliding-window ones, copies its output matrix into Q's freed block, its
    residual right above the copy and its FFN's copies above both (`HostCacheAttention.residual`): 210.3 MiB
    recorded and estimated (204.0 before, 2.5% under)."""
    recorded, estimated = _compute(gpu, "standin/gemma-3-27b/c4096-faon-ngl31-server")
    assert abs(estimated - recorded) <= 0.002 * recorded, (recorded / 2**20, estimated / 2**20)


def test_published_shapes_share_within_tolerance(gpu: Any) -> None:
    cases = _published(gpu)
    ok = sum(abs(r.compute_rel) <= report.COMPUTE_TOLERANCE for r in cases)
    assert ok / len(cases) >= PUBLISHED_SHARE, f"{ok} of {len(cases)} within 5%"


def test_no_new_case_far_under(gpu: Any) -> None:
    far = {r.key for r in _published(gpu) if r.compute_rel < -report.COMPUTE_MAX_UNDER}
    assert far <= KNOWN_FAR_UNDER, sorted(far - KNOWN_FAR_UNDER)


# ---- Vulkan and Metal: the standin_vulkan and standin_metal grids (`record.py --grids standin_vulkan,standin_metal`)

_MODELS = ("llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-20b", "gpt-oss-120b", "deepseek-v3", "gemma-3-27b")
#: The share of Vulkan recordings within 5% (measured: 112 of 113 with 64-bit shader indexing as a device property;
#: 111 of 113 with DeepSeek-V2-Lite's recordings and llama-server's reserve over two devices; 89 of 90 before the absorbed-MLA layer phase was replayed layer after
#: layer, 76 before the copies larger than a chunk, the scores' chunks in graph order, the
#: absorbed-MLA layer phase over chunks and Q's copy next to the host's scores were modelled, 44 before
#: ggml-alloc's 1 GiB chunks and the storage-range limit).
VULKAN_SHARE = 0.98
#: Vulkan recordings the estimate is more than 10% under: none (DeepSeek-V3 on two devices with `-ts 3,1` at
#: -ub 2048 was 15.1% under while one layer's attention was replayed over the chunks; the whole layer phase is now.
#: DeepSeek-V2-Lite at 32768 cells, `-ub 2048`, no flash attention, with 64-bit shader indexing was 34.4% under
#: while fitplan planned every device without it: its exactly 4 GiB KQ scores on the host).
KNOWN_FAR_UNDER_VULKAN: frozenset[str] = frozenset()
#: The share of Metal recordings within 5% (measured: 78 of 78; 70 before the host layers' GLU and down
#: multiplication on the GPU were modelled, 58 before flash attention's always-reserved scratch and the offload of
#: matrix multiplications).
METAL_SHARE = 0.98
#: Metal recordings the estimate is more than 10% under: none.
KNOWN_FAR_UNDER_METAL: frozenset[str] = frozenset()


def test_vulkan_expert_copies_larger_than_a_chunk_take_chunks_of_their_own(everything: Any) -> None:
    """DeepSeek-V3 with its experts on the host (`-cmoe`, `-ngl 30`) on the Vulkan stand-in: each expert matrix
    the GPU copies in is larger than the 1 GiB chunk, so gate's copy opens a chunk (up's reuses it) and down's
    another: 5356 MiB recorded at `-ub 512`, 3162 estimated before (the copies counted in one buffer)."""
    keys = {
        f"standin_vulkan/deepseek-v3/{c}"
        for c in ("c8192-faon-cmoe-ub512", "c8192-faon-cmoe-ub2048", "c8192-faon-ngl30")
    }
    cases = [r for r in everything.on("vulkan").measured if r.key in keys]
    assert len(cases) == 3
    assert all(abs(r.compute_rel) <= report.COMPUTE_TOLERANCE for r in cases), [
        (r.key, round(r.compute_rel, 3)) for r in cases
    ]


def test_vulkan_absorbed_mla_layer_phase_over_chunks(everything: Any) -> None:
    """DeepSeek-V3 at `-ub 2048` on the Vulkan stand-in: q, q_nope_absorbed and q_pe fill the first chunk, Qcur
    opens the next and the logits grow it (2018 MiB recorded at 4096 cells, 1584 estimated before in one buffer;
    2194 at 32768 cells, 1696 before), next to the expert copies' chunks with `-cmoe`."""
    keys = {
        f"standin_vulkan/deepseek-v3/{c}"
        for c in ("c4096-faon-ub2048", "c32768-faon-ub2048", "c8192-faon-cmoe-ub2048")
    }
    cases = [r for r in everything.on("vulkan").measured if r.key in keys]
    assert len(cases) == 3
    for r in cases:
        real, est = next(d.compute for d in r.devices if d.name == "Vulkan0")
        assert abs(est - real) <= 0.05 * real, (r.key, real / 2**20, est / 2**20)


def test_vulkan_layer_phase_replayed_layer_after_layer(everything: Any) -> None:
    """DeepSeek-V3 and DeepSeek-V2-Lite at `-ub 2048` or 4096 with flash attention on the Vulkan stand-in, every
    layer's graph replayed over the chunks (`layer_replay`): each GPU's buffer to within 0.1%. On one device
    DeepSeek-V3's 2018 and 2194 MiB (1954 and 2130 with the first layer's attention alone); over two devices with
    `-ts 3,1` the later layers' query parts spread over four chunks on Vulkan0 and three on Vulkan1 (2888 and 2998
    MiB recorded, 2368 and 2522 estimated before: 15.1% under), with llama-server's reserve too (one output row:
    Vulkan1 2564 MiB, 2088 before); DeepSeek-V2-Lite's pipeline-parallel copies under its logits (Vulkan1 1412
    MiB, 1072 before) and its 1600 MiB logits at `-ub 4096` in a chunk of their own (2273 MiB)."""
    cases = {
        "deepseek-v3": (
            "c4096-faon-ub2048",
            "c32768-faon-ub2048",
            "2dev-c8192-faon-ts3,1-ub2048",
            "2dev-c8192-faon-ts3,1-ub2048-server",
        ),
        "deepseek-v2-lite": (
            "c4096-faon-ub4096",
            "2dev-c8192-faon-ts3,1-ub2048",
            "2dev-c8192-faon-ts3,1-ub2048-server",
        ),
    }
    keys = {f"standin_vulkan/{m}/{c}" for m, ids in cases.items() for c in ids}
    found = [r for r in everything.on("vulkan").measured if r.key in keys]
    assert len(found) == len(keys)
    for r in found:
        for d in r.devices:
            if d.name.startswith("Vulkan"):
                real, est = d.compute
                assert abs(est - real) <= 0.001 * real, (r.key, d.name, real / 2**20, est / 2**20)


def test_vulkan_host_scores_come_with_a_copy_of_q(everything: Any) -> None:
    """DeepSeek-V3 at 4096 cells, `-ub 2048`, no flash attention: the 4 GiB scores run on the host, which copies
    in the absorbed query (`CPU#Qcur-0`, 576 MiB) next to them: 4816 MiB recorded on the host, 4357 estimated
    before (-7.2% in all), 4933 now."""
    r = next(
        r
        for r in everything.on("vulkan").measured
        if r.key == "standin_vulkan/deepseek-v3/c4096-faoff-ub2048"
    )
    real, est = next(d.compute for d in r.devices if d.name == "Host")
    assert real <= est <= 1.05 * real, (real / 2**20, est / 2**20)
    assert abs(r.compute_rel) <= report.COMPUTE_TOLERANCE


def test_vulkan_scores_of_both_caches_in_their_chunks(everything: Any) -> None:
    """gpt-oss and gemma-3 without flash attention at `-ub 2048` on the Vulkan stand-in: the sliding-window and the
    full layers' scores open chunks in graph order (gpt-oss-20b at 4096 cells: 3420 MiB recorded, 4284 estimated
    before; gemma-3-27b: 4245 recorded, 3393 before; gpt-oss at 32768 cells, full scores on the host: 2911 MiB
    recorded, 4287 before)."""
    keys = {
        f"standin_vulkan/{m}/{c}"
        for m in ("gpt-oss-20b", "gpt-oss-120b")
        for c in ("c4096-faoff-ub2048", "c32768-faoff-ub2048")
    } | {"standin_vulkan/gemma-3-27b/c4096-faoff-ub2048"}
    cases = [r for r in everything.on("vulkan").measured if r.key in keys]
    assert len(cases) == 5
    assert all(abs(r.compute_rel) <= report.COMPUTE_TOLERANCE for r in cases), [
        (r.key, round(r.compute_rel, 3)) for r in cases
    ]


def test_metal_runs_the_glu_and_down_of_host_layers(everything: Any) -> None:
    """ggml-metal takes the multiplication by a host layer's down matrix (Q6_K in the K-quant mixes, not repacked
    for the CPU) and the GLU that feeds it: the host keeps gate's and up's outputs only (llama-3.1-8b with
    `-ngl 16`: 104 MiB recorded on the host, 132 estimated before; Qwen3-30B-A3B with `-ngl 24`: 52 and 96), and
    DeepSeek-V3's host layers run their absorbed attention and their experts' down on the GPU (-ngl 30: 3189 MiB
    recorded on MTL0, 766 estimated before; the host 150, 414 before)."""
    keys = {
        "standin_metal/llama-3.1-8b/c8192-faon-ngl16",
        "standin_metal/qwen3-30b-a3b/c8192-faon-ngl24",
        "standin_metal/gemma-3-27b/c8192-faon-ngl31",
        "standin_metal/deepseek-v3/c8192-faon-ngl30",
    } | {
        f"standin_metal/{m}/c8192-faon-ot-ffn-cpu-ub{u}"
        for m in ("llama-3.1-8b", "gemma-3-27b")
        for u in (512, 2048)
    }
    cases = [r for r in everything.on("metal").measured if r.key in keys]
    assert len(cases) == 8
    assert all(abs(r.compute_rel) <= report.COMPUTE_TOLERANCE for r in cases), [
        (r.key, round(r.compute_rel, 3)) for r in cases
    ]
    # per device too: the host's buffer on its own
    for r in cases:
        host = next(d for d in r.devices if d.name == "Host")
        assert abs(host.compute[1] - host.compute[0]) <= 0.05 * host.compute[0], (r.key, host.compute)


def test_metal_offloads_the_multiplications_of_host_experts(everything: Any) -> None:
    """ggml-metal offloads matrix multiplications only: with `-cmoe` the expert matrices in a host buffer (not
    repacked) are copied into the GPU's buffer one at a time, the experts run there and the host keeps its graph
    inputs (DeepSeek-V3: 3212.5 MiB recorded on MTL0, 808.2 estimated before; Qwen3-30B-A3B's host 40.0 MiB
    recorded, 84.3 before)."""
    keys = {
        f"standin_metal/{m}/c8192-faon-cmoe-ub{u}"
        for m in ("deepseek-v3", "qwen3-30b-a3b")
        for u in (512, 2048)
    }
    cases = [r for r in everything.on("metal").measured if r.key in keys]
    assert len(cases) == 4
    assert all(abs(r.compute_rel) <= report.COMPUTE_TOLERANCE for r in cases), [
        (r.key, round(r.compute_rel, 3)) for r in cases
    ]


def test_metals_flash_attention_scratch(everything: Any) -> None:
    """ggml-metal always reserves its flash-attention scratch in the output's allocation: the f16 K and V copies
    (llama-3.1-8b at 131072 cells: 706.5 MiB recorded, 410.5 estimated before) and the workgroup results (DeepSeek-V3's
    128 heads of 512: 785.7 MiB recorded at 4096 cells, 410 estimated before)."""
    keys = {f"standin_metal/{m}/c131072-faon" for m in ("llama-3.1-8b", "gemma-3-27b", "deepseek-v3")} | {
        f"standin_metal/deepseek-v3/{c}"
        for c in ("c4096-faon-ub512", "c4096-faon-ub2048", "c32768-faon-q8_0")
    }
    cases = [r for r in everything.on("metal").measured if r.key in keys]
    assert len(cases) == len(keys)
    assert all(abs(r.compute_rel) <= report.COMPUTE_TOLERANCE for r in cases), [
        (r.key, round(r.compute_rel, 3)) for r in cases
    ]


@pytest.mark.parametrize(
    ("backend", "grid", "n"), [("vulkan", "standin_vulkan", 113), ("metal", "standin_metal", 78)]
)
def test_the_vulkan_and_metal_recordings_are_there(everything: Any, backend: str, grid: str, n: int) -> None:
    s = everything.on(backend)
    assert len([r for r in s.measured if r.grid == grid]) >= n
    assert not s.errors, "estimator failed on: " + ", ".join(r.key for r in s.errors)


@pytest.mark.parametrize("backend", ["vulkan", "metal"])
def test_vulkan_and_metal_weights_and_caches_exact(everything: Any, backend: str) -> None:
    """Vulkan's 64-byte buffer alignment (no row padding) and Metal's 32 bytes: fitplan's buffer sizes are
    llama.cpp's on every device, the host's pinned Vulkan_Host buffer and Metal's plain CPU buffers included."""
    s = everything.on(backend)
    assert not s.weights_misses, [r.key for r in s.weights_misses]
    assert not s.context_misses, [r.key for r in s.context_misses]


@pytest.mark.parametrize(("backend", "share"), [("vulkan", VULKAN_SHARE), ("metal", METAL_SHARE)])
def test_vulkan_and_metal_share_within_tolerance(everything: Any, backend: str, share: float) -> None:
    cases = everything.on(backend).measured
    ok = sum(abs(r.compute_rel) <= report.COMPUTE_TOLERANCE for r in cases)
    assert ok / len(cases) >= share, f"{ok} of {len(cases)} within 5%"


@pytest.mark.parametrize(
    ("backend", "known"), [("vulkan", KNOWN_FAR_UNDER_VULKAN), ("metal", KNOWN_FAR_UNDER_METAL)]
)
def test_no_new_vulkan_or_metal_case_far_under(everything: Any, backend: str, known: frozenset[str]) -> None:
    far = {r.key for r in everything.on(backend).compute_far_under}
    assert far <= known, sorted(far - known)


def test_flash_attention_at_ub_512_is_within_tolerance_on_vulkan_and_metal(everything: Any) -> None:
    """Flash attention, -ub 512, up to 32768 cells, every layer on the GPU: within 5% on both backends, DeepSeek-V3
    with Metal's scratch included."""
    ids = {"c4096-faon-ub512", "c32768-faon-ub512", "c32768-faon-q8_0"}
    for backend in ("vulkan", "metal"):
        cases = [r for r in everything.on(backend).measured if r.case in ids]
        assert len(cases) >= 15
        assert all(abs(r.compute_rel) <= report.COMPUTE_TOLERANCE for r in cases), [
            (r.key, round(r.compute_rel, 3)) for r in cases if abs(r.compute_rel) > report.COMPUTE_TOLERANCE
        ]


# ---- llama-server on the CUDA stand-in (standin_server: `record.py --grids standin_server`): projector and draft


def test_the_projector_and_the_draft_on_the_stand_in(gpu: Any) -> None:
    """llama-server itself on the CUDA stand-in: the projector's weights and warm-up compute on the GPU and its
    graph inputs on the host, and the draft model's weights and cache, are what llama.cpp allocated (to the log's
    0.01 MiB); the compute of every case is within 5%."""
    cases = [r for r in gpu.measured if r.grid == "standin_server"]
    assert len(cases) == 8  # with the draft's launch without it (tests/estimate/test_finer_recorded.py)
    for r in cases:
        assert r.weights_exact_mib and r.context_exact, r.key
        for d in r.devices:
            if d.name.startswith("mmproj"):
                assert abs(d.compute[0] - d.compute[1]) <= report.MIB // 100, (r.key, d)
        assert abs(r.compute_rel) <= report.COMPUTE_TOLERANCE, (r.key, r.compute_rel)
    drafts = {d.name for r in cases for d in r.devices if d.name.startswith("draft")}
    assert drafts == {"draft CUDA0", "draft Host"}


def test_the_first_gpus_ffn_phase_has_four_block_spaces(gpu: Any) -> None:
    """On the first GPU the scheduler's copies of the embeddings inputs are freed once the first layer's input is
    built, and the attention output sits between the freed blocks: the FFN phase has four block spaces and a
    one-block hole (the allocator's list, llama-3.1-8b at 4096 cells: 120.01 MiB; before 128.01 estimated). With
    llama-server's small output count that phase is the peak: every text model's and the draft's GPU buffer with
    flash attention is what llama.cpp logged; the llama smoke model at c512 too (4.77 MiB, 4.5 before)."""
    server = [r for r in gpu.measured if r.grid == "standin_server" and "faoff" not in r.case]
    assert len(server) == 7
    for r in server:
        for d in r.devices:
            if d.name in ("CUDA0", "draft CUDA0"):
                assert abs(d.compute[0] - d.compute[1]) <= report.MIB // 50, (r.key, d)  # two roundings
    smoke = next(r for r in gpu.measured if r.key == "standinarchs/llama-dense/c512-np1")
    assert abs(smoke.compute_rel) <= 0.01, smoke.compute_rel


def _resolved_flash_attn(grid: str, name: str, header: Any, case: dict[str, Any]) -> bool:
    """Flash attention as the estimate resolves it for a recorded stand-in case."""
    import dataclasses

    cmd = [str(a) for a in case["command"]]
    args, server = report.settings_args(cmd)
    parsed = report.parse_flags(args)
    settings = dataclasses.replace(
        parsed.settings, tool=report.Tool.SERVER if server else report.Tool.FIT_PARAMS
    )
    spec = report.standin_spec(cmd)
    assert spec, f"{grid}/{name}/{case['id']} is not a stand-in recording"
    est = report.estimate(
        report.load_profile(header), settings, report.standin_machine(spec), cpu=report.RECORDING_CPU
    )
    return bool(est.context.flash_attn)


def test_flash_attention_auto_resolves_as_on_the_cuda_stand_in() -> None:
    """llama.cpp probes flash attention "auto" with a one-token graph and turns it off when ggml-cuda refuses a
    layer's attention (src/llama-context.cpp `resolve_fused_ops`): the MLA smoke models (one query head over the
    576/512 compressed row: ggml-cuda's kernel for that shape needs a GQA ratio of 2 at least) run without it, the
    rest with it. Every recorded resolution of the CUDA stand-in grids is compared."""
    import json

    seen = {"enabled": 0, "disabled": 0}
    wrong = []
    for path in report.fixture_files():
        if path.parent.name not in ("standinarchs", "standin"):
            continue
        doc = json.loads(path.read_text())
        model = doc["model"]
        header = (
            report.FIXTURES / model["header"]
            if model.get("header")
            else report._header_for(model["path_hint"])
        )
        for case in doc["cases"]:
            recorded = ((case.get("results") or {}).get("resolved") or {}).get("flash_attn_resolved")
            if recorded is None or "error" in case:
                continue
            seen[recorded] += 1
            if _resolved_flash_attn(path.parent.name, model["name"], header, case) != (recorded == "enabled"):
                wrong.append(f"{path.parent.name}/{model['name']}/{case['id']}: recorded {recorded}")
    assert seen["disabled"] >= 30 and seen["enabled"] >= 300, seen
    assert not wrong, wrong


def test_a_second_gpu_with_only_the_output_layer(gpu: Any) -> None:
    """With every layer offloaded over two GPUs (pipeline parallelism) the smoke models put their layers on the
    first GPU and the output layer alone on the second: that GPU reads one hidden-state block from the first, the
    weightless output norm, in four copies, then the output norm's block and the logits (the allocator's peak on
    the llama smoke model at c1024: 2.75 MiB, where two blocks per copy would make 4.75); without an output norm
    weight the whole norm runs on the first GPU and its output is the one input (olmo: 2.25 MiB). The
    hyper-connection heads read the streams (`PlanBuilder.hc_head`; before: hy_v4 1.5 MiB counted, 20.48
    recorded, qwen4exp 2.8 and 12.02), kimi-k3's final residual mix reads the residual stack and the last layer's
    tail (`PlanBuilder.res_stack_head`; before: 1.5 MiB counted, 6.13 recorded). Not modelled (the output GPU's
    extra tensors, named in the allocator's peak): the norm output an MTP graph keeps as an output before it
    applies the output ids (`h_nextn`: cohere2moe, hy_v3, qwen35, qwen35moe, qwen3next, one block more),
    MiniCPM3's scaled head input (`lmhead_scaling`), and bailingmoe3's last-layer tail (0.26 MiB)."""
    import json

    known = {
        *("bailingmoe3-moe", "cohere2moe-moe", "hy_v3-moe", "minicpm3-dense"),
        *("qwen35-dense", "qwen35moe-moe", "qwen3next-moe"),
    }
    checked, wrong = 0, []
    for path in sorted((report.FIXTURES / "standinarchs").glob("*.json")):
        doc = json.loads(path.read_text())
        model = doc["model"]
        for case in doc["cases"]:
            res = case.get("results") or {}
            n_layer = (res.get("resolved") or {}).get("n_layer")
            second = [d for d in res.get("layer_devices", []) if d[2] == "CUDA1"]
            if not second or second[0][0] != n_layer or model["name"] in known:
                continue  # not a second GPU with the output layer alone
            r = _result(gpu, f"standinarchs/{model['name']}/{case['id']}")
            real, est = next(d.compute for d in r.devices if d.name == "CUDA1")
            checked += 1
            if abs(est - real) > 0.05 * real:
                wrong.append(
                    f"{model['name']}/{case['id']}: {real / 2**20:.2f} recorded, {est / 2**20:.2f} MiB"
                )
    assert checked >= 100
    assert not wrong, wrong


#: Smoke models at c2048 with q8_0 caches and flash attention on the CUDA stand-in, one per layout of the attention
#: with CUDA's f16 copies of the cache: Q in a freed hole under the copies (llama, bloom), the FFN run while the
#: attention output with its copies waits (command-r: parallel blocks; falcon: the FFN from the attention norm;
#: arctic: the MoE branch from the layer input), the position rows' copy holding the hole (gpt2, with the host's
#: position rows).
FA_COPY_LAYOUTS = (
    "llama-dense",
    "bloom-dense",
    "command-r-dense",
    "falcon-dense",
    "arctic-moe",
    "gpt2-dense",
)


@pytest.mark.parametrize("name", FA_COPY_LAYOUTS)
def test_the_flash_attention_copies_of_a_quantized_cache(gpu: Any, name: str) -> None:
    """Each backend's compute buffer as recorded, to the 64 KiB (the recordings: 6.59, 6.59, 8.09, 7.34, 11.09 and
    7.59 MiB on the GPU; without the copies' own layout the estimate was 1 to 2 MiB over, arctic 2.5 MiB under)."""
    r = _result(gpu, f"standinarchs/{name}/c2048-np1-faon-q8_0")
    for d in r.devices:
        real, est = d.compute
        assert abs(est - real) <= 64 * 1024, f"{d.name}: {real / 2**20:.2f} recorded, {est / 2**20:.2f} MiB"


@pytest.mark.parametrize("name", ["gpt2-dense", "mpt-dense", "starcoder-dense"])
def test_learned_position_embeddings_on_the_cuda_stand_in(gpu: Any, name: str) -> None:
    """The smoke models with learned position rows (`position_embd`): the host computes the position rows next to
    the token rows and keeps the mixed batch's rows (the position rows' get_rows, a host op, stops the scheduler's
    expansion), so the first GPU reads two blocks, not the mixed batch's three (five with the residual blocks);
    every recorded case to the 64 KiB on every backend (before: CUDA0 1 to 3 MiB over, the host 0.5 MiB under)."""
    for r in _model_results(gpu, "standinarchs", name):
        for d in r.devices:
            real, est = d.compute
            assert abs(est - real) <= 64 * 1024, f"{r.case} {d.name}: {real / 2**20:.2f} vs {est / 2**20:.2f}"


@pytest.mark.parametrize("name", ["minimax-01-moe", "glm5-next-moe"])
def test_the_host_holds_the_graph_inputs_the_gpu_reads(gpu: Any, name: str) -> None:
    """Graph inputs are allocated on the host, which fills them, and copied to the GPU that reads them (four
    times with pipeline parallelism, never freed): MiniMax-01's lightning decay input `diag_decay_exp`
    `[n_st, n_st, n_head, n_seqs]` f32 (2 MiB at c512) and glm5-next's k-pool selection inputs (1.7 MiB). Before,
    the host was 1.7 to 11 MiB under in every case and the two-GPU cases 17% and 30% under. The host's buffer as
    recorded in every stand-in case, the two-GPU case within 5%."""
    for r in _model_results(gpu, "standinarchs", name):
        real, est = next(d.compute for d in r.devices if d.name == "Host")
        assert abs(est - real) <= 64 * 1024, f"{r.case}: {real / 2**20:.2f} recorded, {est / 2**20:.2f} MiB"
        if r.case == "2dev-c1024-np1":
            assert abs(r.compute_rel) <= 0.05, r.compute_rel


def test_a_mamba1_block_on_the_first_gpu(gpu: Any) -> None:
    """The Mamba-1 smoke model on one CUDA stand-in: the freed copies of the mixed batch's inputs leave a two-block
    hole that takes the conv output (`node_28` at 0-1 MiB), x_db goes above with dt and the scan output; four block
    spaces, not five. Every one-GPU case to the 64 KiB (before: 1 MiB, 11%, over)."""
    cases = [r for r in _model_results(gpu, "standinarchs", "mamba-dense") if not r.case.startswith("2dev")]
    assert len(cases) >= 4
    for r in cases:
        for d in r.devices:
            real, est = d.compute
            assert abs(est - real) <= 64 * 1024, f"{r.case} {d.name}: {real / 2**20:.2f} vs {est / 2**20:.2f}"


def test_deepseek_v3_with_a_quantized_cache(gpu: Any) -> None:
    """The absorbed MLA attention's replayed peak is larger than its flash-attention op's live set (Q, the output
    and the f16 copy of the compressed rows), so the copy adds nothing: DeepSeek-V3's one-GPU stand-in recordings
    with a q8_0 or q4_0 cache, the experts on the GPU, as recorded (before 3-10% over: the 36 MiB copy at 32768
    cells on top). The cache in host memory (`-nkvo`) is `MlaHostCache`'s, held by
    `test_mla_host_cache_next_layer_attention_replayed`."""
    cases = [
        r
        for r in _model_results(gpu, "standin", "deepseek-v3")
        if "faon-q" in r.case and "cmoe" not in r.case and "nkvo" not in r.case
    ]
    assert len(cases) >= 8
    for r in cases:
        for d in r.devices:
            real, est = d.compute
            assert abs(est - real) <= 64 * 1024, f"{r.case} {d.name}: {real / 2**20:.1f} vs {est / 2**20:.1f}"


def test_a_draft_on_the_host_copies_no_output_matrix(gpu: Any) -> None:
    """The draft with its layers on the host (-ngld 0): its context's few outputs are below ggml-cuda's op-offload
    batch of 32 (`get_op_batch_size` reads a MUL_MAT's result rows), so the output multiplication stays on the
    host and no output matrix is copied into the first GPU (119.0 MiB recorded on the draft's CUDA0; 605.9
    estimated before, with the 486.9 MiB output matrix of qwen3-8b)."""
    r = next(r for r in gpu.measured if r.key == "standin_server/qwen3-30b-a3b/draft-ngld0-np1-c4096")
    d = next(d for d in r.devices if d.name == "draft CUDA0")
    assert abs(d.compute[0] - d.compute[1]) <= report.MIB // 50, d


@pytest.mark.parametrize("name", ["dream-dense", "llada-dense"])
def test_attention_without_a_cache_on_the_first_gpu(gpu: Any, name: str) -> None:
    """The cacheless diffusion models on one CUDA stand-in: V's projection takes K's freed projection and its copy
    (contiguous, or the f16 cast flash attention reads) the freed attention norm's block, so only Q and the roped K
    stand above the blocks (3.51 MiB at c512 with flash attention, 6.01 MiB without, with the scores); under flash
    attention the output projection lands at the bottom and the GLU output in the FFN norm's and the embeddings'
    freed blocks (4.01 MiB). Every one-GPU case to the 64 KiB (before: 0.5 and 0.75 MiB, 5.5% and 11.4%, over)."""
    cases = [r for r in _model_results(gpu, "standinarchs", name) if not r.case.startswith("2dev")]
    assert len(cases) >= 4
    for r in cases:
        for d in r.devices:
            real, est = d.compute
            assert abs(est - real) <= 64 * 1024, f"{r.case} {d.name}: {real / 2**20:.2f} vs {est / 2**20:.2f}"


def test_a_down_copy_above_the_full_attention_mask_with_a_quantized_cache(gpu: Any) -> None:
    """Llama-4-Scout at 32768 cells with q8_0 caches, flash attention and `-cmoe` at `-ub 512`: the rotated
    attention output keeps one block of the FFN norm's hole, so the 16 MiB GLU output does not fit there and takes
    layer 2's freed down copy's space, and layer 3's 525 MiB down copy goes above the full-attention mask (the
    allocator's list: 1146.59 MiB; the estimate was 641.67 MiB, 44% under). Within 5%, never under."""
    real, est = _compute(gpu, "standin/llama-4-scout-17b-16e/c32768-faon-q8_0-cmoe-ub512")
    assert real <= est <= 1.05 * real, f"{real / 2**20:.2f} recorded, {est / 2**20:.2f} MiB"


@pytest.mark.parametrize(
    ("name", "case_id"),
    [
        ("llama-4-scout-17b-16e", "c32768-faon-cmoe-ub512-server"),
        ("granite-4.0-h-tiny", "c32768-faon-cmoe-ub512-server"),
        ("llama-4-scout-17b-16e", "c32768-faon-cmoe-ub2048-server"),
        ("llama-4-scout-17b-16e", "c8192-faon-cmoe-ub512"),
    ],
)
def test_a_late_mask_outside_the_first_gpus_one_block_norm_hole(gpu: Any, name: str, case_id: str) -> None:
    """On the first GPU the FFN norm's hole is one block: a GLU output larger than that does not go there, and
    a layer's down copy goes above a mask copied in late when the GLU output splits the space under it
    (llama-server's reserve at 32768 cells with `-cmoe` at `-ub 512`, the allocator's lists: Llama-4-Scout's
    525 MiB copy above the 32 MiB full-attention mask, 1146.51 MiB, estimated 641.5 before; granite-4.0-h-tiny's
    39.4 MiB copy above its mask, 128.75 MiB, 110.4 before). At `-ub 2048` llama4's router-weighted input under
    gate and up leaves too little above their outputs for the GLU output, which goes to the bottom, and the copy
    fits below the mask (957.05 MiB); at 8192 cells the 8 MiB mask fits in the norm's hole, nothing above the
    copy (599.01 MiB). The first GPU's buffer within 5%, never under."""
    real, est = _compute(gpu, f"standin/{name}/{case_id}")
    assert real <= est <= 1.05 * real, f"{real / 2**20:.2f} recorded, {est / 2**20:.2f} MiB"


@pytest.mark.parametrize(
    ("name", "case_id"),
    [
        ("gpt-oss-20b", "c32768-faon-q8_0-cmoe-ub512"),
        ("gpt-oss-20b", "c32768-faon-q8_0-cmoe-ub2048"),
        ("gpt-oss-120b", "c32768-faon-q8_0-cmoe-ub2048"),
        ("llama-4-scout-17b-16e", "c32768-faon-q8_0-cmoe-ub2048"),
    ],
)
def test_only_the_first_splits_masks_under_the_logits(gpu: Any, name: str, case_id: str) -> None:
    """With the experts in host memory a sliding-window first layer reads its mask in the first split, and the
    full-attention mask is copied in with the first full-attention layer's split, after the expert copies: that
    one is freed after its last reader, and only the first split's mask stays under the logits (gpt-oss-20b at
    32768 cells: the logits at 23.29 MiB, 416.04 MiB; the 32 MiB full mask counted under them made 448.1, 128 MiB
    over at `-ub 2048`). The first GPU's buffer as recorded, to the 1 MiB."""
    real, est = _compute(gpu, f"standin/{name}/{case_id}")
    assert abs(est - real) <= 2**20, f"{real / 2**20:.2f} recorded, {est / 2**20:.2f} MiB"


@pytest.mark.parametrize("name", ["plamo3-dense", "muse-glimmer-dense"])
def test_the_attention_output_below_the_ffn_norm_on_the_first_gpu(gpu: Any, name: str) -> None:
    """plamo3's new Q norm (Q a view of the fused QKV output) and muse-glimmer's attention gate (read from the
    attention norm after the attention) keep the attention norm's block through the attention on the CUDA stand-in:
    the output projection lands at the bottom and the FFN norm's hole is two blocks, where the GLU output goes
    (4.52 MiB at c512 for both; the estimate was 5.26, 9.7% over). Every one-GPU case to the 64 KiB."""
    cases = [r for r in _model_results(gpu, "standinarchs", name) if not r.case.startswith("2dev")]
    assert len(cases) >= 4
    for r in cases:
        for d in r.devices:
            real, est = d.compute
            assert abs(est - real) <= 64 * 1024, f"{r.case} {d.name}: {real / 2**20:.2f} vs {est / 2**20:.2f}"


@pytest.mark.parametrize(("name", "case_id"), [("lfm2-dense", "c512-np1"), ("lfm2moe-moe", "c512-np1")])
def test_the_residual_into_the_copied_embeddings_on_the_first_gpu(gpu: Any, name: str, case_id: str) -> None:
    """LFM2 adds the attention's residual into the layer input: on the first GPU that is the copied embeddings'
    block, which stays between the freed blocks and the copied mask, so the FFN finds no freed space it fits in and
    goes on top of four block spaces, the mask's and `node_2` (the allocator's lists on the CUDA stand-in at c512:
    4.77 and 7.02 MiB; the estimate was 4.52, 3.5% under, and 7.52, 5.2% over). To the 64 KiB."""
    real, est = _compute(gpu, f"standinarchs/{name}/{case_id}")
    assert abs(est - real) <= 64 * 1024, f"{real / 2**20:.2f} recorded, {est / 2**20:.2f} MiB"


def test_minicpm3s_normed_latent_on_the_first_gpu(gpu: Any) -> None:
    """MiniCPM3 on one CUDA stand-in: the normed latent [kv_lora, n_tok] takes the two blocks the mixed batch's
    copies free, and the decompressed K and V stand above `node_2` with Q and the compressed KV (the allocator's
    list at c512: 4.77 MiB; counted with the latent on top the estimate was 5.27, 6.8% over). Every one-GPU case to
    the 64 KiB."""
    cases = [
        r for r in _model_results(gpu, "standinarchs", "minicpm3-dense") if not r.case.startswith("2dev")
    ]
    assert len(cases) >= 4
    for r in cases:
        real, est = next(d.compute for d in r.devices if d.name == "CUDA0")
        assert abs(est - real) <= 64 * 1024, f"{r.case}: {real / 2**20:.2f} vs {est / 2**20:.2f}"


def test_bailingmoe3s_absorbed_mla_query(everything: Any) -> None:
    """bailingmoe3's MLA layers build deepseek2's absorbed query (q_a, q_b, the absorbed q_nope, the roped q_pe,
    their concatenation, then the compressed KV), replayed through the allocator: every CUDA stand-in case within
    5% (c512: 5.27 MiB recorded; the estimate was 5.88, 8.4% over, 15.2% with two sequences) and the CPU smoke
    recordings to the 64 KiB (6.7% over without flash attention before)."""
    for r in _model_results(everything, "standinarchs", "bailingmoe3-moe"):
        assert abs(r.compute_rel) <= 0.05, f"{r.case}: {r.compute_rel:+.1%}"
    for r in _model_results(everything, "archs", "bailingmoe3-moe"):
        real, est = r.devices[0].compute
        assert abs(est - real) <= 64 * 1024, f"{r.case}: {real / 2**20:.2f} vs {est / 2**20:.2f}"


def test_experts_down_product_on_the_host_with_pipeline_parallelism(gpu: Any) -> None:
    """mistral4's experts' down product asks for f32 precision, which ggml-cuda refuses: the host runs it, with four
    copies of the down weights, the GLU output and the ids there and four copies of the product on the GPU
    (`PlanBuilder.host_expert_down`; before: the first GPU 16.2 MiB counted, 18.42 recorded, the host 10.6 and
    14.33)."""
    r = _result(gpu, "standinarchs/mistral4-moe/2dev-c1024-np1")
    for d in r.devices:
        real, est = d.compute
        assert abs(est - real) <= 0.02 * real, f"{d.name}: {real / 2**20:.2f} recorded, {est / 2**20:.2f} MiB"


def test_residual_stack_head_on_the_output_gpu(gpu: Any) -> None:
    """kimi-k3 over two GPUs, the output layer alone on the second: that GPU reads the residual stack, its norm,
    the last layer's output, its norm and the last MoE output, and computes that output's norm, which the first
    GPU reads back in four copies (`PlanBuilder.res_stack_head`; before: the second GPU 1.5 MiB counted, 6.13
    recorded, the first 17.2 and 18.66)."""
    r = _result(gpu, "standinarchs/kimi-k3-moe/2dev-c1024-np1")
    for d in r.devices:
        real, est = d.compute
        assert abs(est - real) <= 0.02 * real, f"{d.name}: {real / 2**20:.2f} recorded, {est / 2**20:.2f} MiB"


def test_hrm_alias_slots_split_between_two_gpus(gpu: Any) -> None:
    """HRM-Text's later stack passes reuse the first passes' weights (slots 4 and 5 on CUDA1 use blk.0's and
    blk.1's weights on CUDA0): the scheduler splits those slots between the GPUs and every crossing tensor is a
    split input held four times (`HRM_ALIAS_INPUTS_CACHE`, `HRM_ALIAS_INPUTS_WEIGHTS`), and the output ids go to
    the weights' GPU, where the last slot's tail runs (`_reads_out_ids`). Neither GPU under its recording (the
    weights' GPU exact), the two within 5% (before: 14.3 MiB estimated for 38.31 recorded on CUDA0, 10.5 for
    39.03 on CUDA1, 60.7% under)."""
    r = next(r for r in gpu.measured if r.key == "standinarchs/hrm_text-dense/2dev-c1024-np1")
    for d in r.devices:
        if d.name.startswith("CUDA"):
            real, est = d.compute
            assert real <= est <= 1.10 * real, (d.name, real / 2**20, est / 2**20)
        assert d.name != "CUDA0" or d.compute[1] == d.compute[0], d.compute
    assert abs(r.compute_rel) <= report.COMPUTE_TOLERANCE, r.compute_rel


def test_vulkan_scores_at_the_buffer_size_stay_on_a_device_with_64bit_indexing(everything: Any) -> None:
    """DeepSeek-V2-Lite at 32768 cells, `-ub 2048`, no flash attention: its KQ scores are exactly 4 GiB. The
    stand-in with 64-bit shader indexing (`idx64=1`, `Device.shader_64bit_indexing`) takes them (ggml-vulkan
    `supports_op`: up to the buffer size) and they count twice, as `ffn_up-0` goes into the first scores' freed
    chunk (8672 MiB recorded; 1376.5 estimated before, the scores on the host); without it they run on the host
    (864 MiB on the device, 4524 on the host). At `-ub 512` the FFN fits in the space V's MLA copy leaves above
    Qcur: the 1 GiB scores count once (1176 MiB)."""
    want = {
        "idx64-c32768-faoff-ub2048": ("Vulkan0", 8672.0),
        "c32768-faoff-ub512": ("Vulkan0", 1176.0),
    }
    found = [
        r
        for r in everything.on("vulkan").measured
        if r.key in {f"standin_vulkan/deepseek-v2-lite/{c}" for c in want}
    ]
    assert len(found) == len(want)
    for r in found:
        name, mib = want[r.key.rsplit("/", 1)[1]]
        real, est = next(d.compute for d in r.devices if d.name == name)
        assert round(real / 2**20) == mib, (r.key, real / 2**20)
        assert abs(est - real) <= 0.001 * real, (r.key, real / 2**20, est / 2**20)
    host = next(r for r in found if r.key.endswith("idx64-c32768-faoff-ub2048"))
    real, est = next(d.compute for d in host.devices if d.name == "Host")
    assert abs(est - real) <= 0.001 * real, (real / 2**20, est / 2**20)
