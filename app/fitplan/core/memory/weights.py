"""Weight placement: which buffer type (and so which device) holds every tensor, as llama.cpp assigns it.

Mirrors `src/llama-model.cpp:llama_model_base::load_tensors` and
`src/llama-model-loader.cpp:llama_model_loader::create_tensor` of the targeted build:

* layer index space 0..L-1 for the blocks (L = block_count, NextN layers included) and L for the output layer;
* `-ngl N` offloads indices `il >= L + 1 - N` (the output layer first, then the blocks from the back);
* the offloaded indices are spread over the GPUs by the cumulative `-ts` (or free-memory) split with
  `std::upper_bound`;
* input tensors (token and position embeddings) always use the CPU buffer list;
* a missing `output.weight` makes llama.cpp duplicate `token_embd` for the output layer;
* NextN / MTP blocks are skipped (no memory) unless MTP is loaded;
* `-ot` overrides are searched in order with regex search, the first match wins; an override to `CPU` reruns the
  selection over the CPU buffer list (so the pinned host buffer or CPU_REPACK can still apply). llama.cpp uses
  `std::regex_search` (ECMAScript grammar); Python's `re.search` agrees on the patterns people write for tensor
  names (literals, `\\.`, classes, groups, alternation, `*+?{}`, anchors). It differs on ECMAScript-only syntax
  such as `\\cX` control escapes, `(?<name>...)` named groups (Python wants `(?P<name>...)`), and `[^]`; such
  patterns raise a `FlagError` when parsed rather than matching differently;
* the CPU buffer list is `[pinned host of the first GPU that has one, unless --no-host] + [CPU_REPACK, unless
  --no-repack] + [CPU]`; CPU_REPACK only takes 2-D matrix weights (3-D expert stacks) of repackable types.

Every buffer is sized as llama.cpp's allocator sizes it: each tensor takes `PAD(alloc_size, alignment)`, where CUDA
adds `row_size(type, 512 - ne0 % 512)` to quantized tensors whose row length is not a multiple of 512.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from fitplan.core.base.cache import AnchoredCache
from fitplan.core.base.devices import Device, Machine, Vendor
from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import (
    NGL_ALL,
    NGL_AUTO,
    LaunchSettings,
    LoadMode,
    SplitMode,
    TensorOverride,
)
from fitplan.core.base.units import pad
from fitplan.core.gguf import ggml_types
from fitplan.core.gguf.gguf_tables import GGMLQuantizationType
from fitplan.core.model.profile import ModelProfile, TensorProfile, TensorRole

#: `common.h:LLM_FFN_EXPS_REGEX`: what `--cpu-moe` / `--n-cpu-moe` move to the CPU.
FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"

#: `ggml-impl.h:TENSOR_ALIGNMENT`: CPU (and CPU_REPACK, pinned host) buffers.
CPU_ALIGNMENT = 32
#: `ggml-cuda.cu:ggml_backend_cuda_buffer_type_get_alignment`.
CUDA_ALIGNMENT = 128
#: `ggml-cuda/common.cuh:MATRIX_ROW_PADDING`: CUDA pads the last row of quantized matrices to this many elements.
CUDA_MATRIX_ROW_PADDING = 512
#: Vulkan uses the device's minStorageBufferOffsetAlignment; 64 is the common value on desktop GPUs (assumed).
VULKAN_ALIGNMENT = 64

CPU_BUFT = "CPU"
CPU_REPACK_BUFT = "CPU_REPACK"
CPU_MAPPED_BUFT = "CPU_Mapped"


def row_bytes(ggml_type: int, n: int) -> int:
    """`ggml_row_size` without the block-multiple check, as ggml computes padding rows."""
    return ggml_types.row_size(ggml_type, n, check=False)


def is_quantized(ggml_type: int) -> bool:
    t = ggml_types.lookup(ggml_type)
    return t is not None and t.quantized


@dataclass(frozen=True, slots=True)
class CpuFeatures:
    """The CPU features that decide which types ggml-cpu repacks (`ggml-cpu/repack.cpp`)."""

    avx2: bool = True
    avx512: bool = False
    neon_dotprod: bool = False
    neon_i8mm: bool = False

    def repack_row_multiple(self, ggml_type: int) -> int | None:
        """The ne1 multiple a weight of this type needs to be repacked, or None if the type is not repacked."""
        t = ggml_type
        if t == GGMLQuantizationType.Q4_0:
            if self.avx2:
                return 8
            return 4 if (self.neon_i8mm or self.neon_dotprod) else None
        if t == GGMLQuantizationType.Q4_K:
            return 8 if (self.avx2 or self.neon_i8mm or self.neon_dotprod) else None
        if t == GGMLQuantizationType.Q2_K:
            return 8 if self.avx512 else None
        if t in (GGMLQuantizationType.Q5_K, GGMLQuantizationType.Q6_K):
            return 8 if (self.neon_i8mm or self.neon_dotprod) else None
        if t in (GGMLQuantizationType.IQ4_NL, GGMLQuantizationType.MXFP4):
            if self.avx2:
                return 8
            return 4 if self.neon_dotprod else None
        if t in (GGMLQuantizationType.Q8_0, 41):
            return 4 if (self.neon_i8mm or self.neon_dotprod) else None
        return None


#: A desktop x86-64 CPU with AVX2 (the common case); pass your own for AVX-512 or ARM hosts.
DEFAULT_CPU_FEATURES = CpuFeatures()


@dataclass(frozen=True, slots=True)
class Backend:
    """How llama.cpp names and aligns the buffers of one GPU device."""

    buffer_type: str  # "CUDA0", "ROCm1", "Vulkan0", "MTL0", "RPC0[host:port]"
    alignment: int
    row_padding: int  # 512 on CUDA/ROCm (quantized tensors), 0 elsewhere
    host_buffer_type: str | None  # pinned host buffer type ("CUDA_Host"), None when the backend has none


#: GPU makers llama.cpp runs with ggml-cuda (ROCm is ggml-cuda built for HIP); a GPU of unknown make is planned as
#: CUDA too (`gpu_backend`).
CUDA_VENDORS = frozenset({Vendor.NVIDIA, Vendor.AMD, Vendor.GENERIC})


def gpu_backend(device: Device, index: int) -> Backend:
    """The backend llama.cpp would use for `device`, the `index`-th GPU of the machine."""
    v = device.vendor
    if v in (Vendor.NVIDIA, Vendor.GENERIC):
        # A GPU of unknown make ("--assume-gpu 24GiB") is planned as CUDA, llama.cpp's most common GPU backend.
        name = device.backend_name or f"CUDA{index}"
        return Backend(name, CUDA_ALIGNMENT, CUDA_MATRIX_ROW_PADDING, "CUDA_Host")
    if v is Vendor.AMD:
        name = device.backend_name or f"ROCm{index}"
        return Backend(name, CUDA_ALIGNMENT, CUDA_MATRIX_ROW_PADDING, "ROCm_Host")
    if v is Vendor.APPLE:
        return Backend(device.backend_name or f"MTL{index}", CPU_ALIGNMENT, 0, None)
    if v is Vendor.RPC:
        # The remote backend decides; a ggml-rpc-server on a CPU host aligns to 32 and has no host buffer.
        return Backend(device.backend_name or f"RPC{index}[{device.host}]", CPU_ALIGNMENT, 0, None)
    return Backend(device.backend_name or f"Vulkan{index}", VULKAN_ALIGNMENT, 0, "Vulkan_Host")


@dataclass(frozen=True, slots=True)
class TensorPlacement:
    name: str
    buffer_type: str
    device: int | None  # GPU index, None = host
    alloc_bytes: int  # padded as the buffer type pads it
    duplicate: bool = False  # the tied-embedding copy for the output layer
    layer: int | None = None  # the tensor's blk index
    role: TensorRole = TensorRole.OTHER
    n_bytes: int = 0  # ggml_nbytes (unpadded)
    matrix: bool = False  # a MUL_MAT / MUL_MAT_ID weight


@dataclass(frozen=True, slots=True)
class BufferSize:
    buffer_type: str
    device: int | None  # GPU index, None = host
    bytes: int
    n_tensors: int


@dataclass(frozen=True, slots=True)
class WeightPlacement:
    """Where the weights go: per tensor, per buffer type and per device."""

    n_gpu_layers: int  # resolved, including the output layer (0..L+1)
    #: GPU index (None = host) of each layer index 0..L; the last one is the output layer.
    layer_device: tuple[int | None, ...]
    buffers: tuple[BufferSize, ...]
    tensors: tuple[TensorPlacement, ...] = field(repr=False)
    skipped: tuple[str, ...] = ()  # tensors llama.cpp does not load (NextN without MTP)
    file_backed: bool = True  # host weights are mmap'd from the file (evictable page cache)

    @property
    def output_device(self) -> int | None:
        return self.layer_device[-1]

    def device_bytes(self, device: int | None) -> int:
        return sum(b.bytes for b in self.buffers if b.device == device)

    def buffers_on(self, device: int | None) -> tuple[BufferSize, ...]:
        return tuple(b for b in self.buffers if b.device == device)


def resolve_n_gpu_layers(n_gpu_layers: int, n_layer_all: int, n_gpus: int) -> int:
    """`llama_model::n_gpu_layers` with no GPU folded in: the count of offloaded indices, output layer included."""
    if n_gpus == 0:
        return 0
    if n_gpu_layers in (NGL_AUTO, NGL_ALL) or n_gpu_layers < 0:
        return n_layer_all + 1
    return min(n_gpu_layers, n_layer_all + 1)


def split_fractions(settings: LaunchSettings, gpus: Sequence[Device]) -> list[float]:
    """Cumulative split points per GPU: `-ts`, or each device's free memory (normalised)."""
    n = len(gpus)
    ts = list(settings.tensor_split[:n]) + [0.0] * max(0, n - len(settings.tensor_split))
    if all(x == 0.0 for x in ts):
        ts = [float(d.free_bytes) for d in gpus]
    total = 0.0
    cum: list[float] = []
    for x in ts:
        total += x
        cum.append(total)
    if total <= 0.0:
        return [1.0] * n
    return [c / total for c in cum]


def layer_devices(n_layer_all: int, ngl: int, fractions: Sequence[float]) -> tuple[int | None, ...]:
    """GPU index (or None for the CPU) of each layer index 0..L (L = the output layer)."""
    import bisect

    n_dev = len(fractions)
    if n_dev == 0:
        return tuple(None for _ in range(n_layer_all + 1))
    i_gpu_start = max(n_layer_all + 1 - ngl, 0)
    act = min(ngl, n_layer_all + 1)
    out: list[int | None] = []
    # float(il - i_gpu_start)/act_gpu_layers is computed in float32 by llama.cpp; the split points too.
    points = [_f32(f) for f in fractions]
    for il in range(n_layer_all + 1):
        if il < i_gpu_start or (il - i_gpu_start) >= act:
            out.append(None)
            continue
        x = _f32((il - i_gpu_start) / act)
        d = bisect.bisect_right(points, x)
        out.append(min(d, n_dev - 1))
    return tuple(out)


def output_device(n_layer_all: int, ngl: int, fractions: Sequence[float]) -> int | None:
    """The GPU index of the output layer (index `n_layer_all`) at `ngl`: `layer_devices`' last entry, without the
    others."""
    import bisect

    n_dev = len(fractions)
    if n_dev == 0 or ngl <= 0:
        return None
    act = min(ngl, n_layer_all + 1)
    x = _f32((act - 1) / act)
    return min(bisect.bisect_right([_f32(f) for f in fractions], x), n_dev - 1)


def _f32(x: float) -> float:
    import struct

    return float(struct.unpack("f", struct.pack("f", x))[0])


def effective_overrides(settings: LaunchSettings) -> tuple[TensorOverride, ...]:
    """`-ot` entries, then the ones `--n-cpu-moe N` and `--cpu-moe` add, in llama.cpp's order."""
    extra: list[TensorOverride] = []
    for i in range(min(settings.n_cpu_moe, 512)):  # LLAMA_MAX_LAYERS: no block index reaches it
        extra.append(TensorOverride(f"blk\\.{i}{FFN_EXPS_REGEX}", CPU_BUFT))
    if settings.cpu_moe:
        extra.append(TensorOverride(FFN_EXPS_REGEX, CPU_BUFT))
    return (*settings.tensor_overrides, *extra)


def active_gpu_positions(settings: LaunchSettings, machine: Machine) -> tuple[int, ...]:
    """Positions in `machine.gpus` of the GPUs llama.cpp uses: `-dev` filter, then `-sm none` keeps only `-mg`.

    A device is its position: two identical cards (one `Device` value twice, as "2x RTX 3090" gives) are two
    devices, CUDA0 and CUDA1, never found by identity or equality."""
    positions = tuple(range(len(machine.gpus)))
    if settings.devices is not None:
        wanted = set(settings.devices)
        positions = tuple(
            i
            for i, d in enumerate(machine.gpus)
            if {d.name, d.backend_name, gpu_backend(d, i).buffer_type} & wanted
        )
        if wanted and not positions:
            raise SettingsError(
                f"-dev {','.join(settings.devices)}: no such device (have: {_names(machine.gpus)})"
            )
    if settings.split_mode is SplitMode.NONE and positions:
        if settings.main_gpu < 0:
            return ()
        if settings.main_gpu >= len(positions):
            raise SettingsError(f"-mg {settings.main_gpu}: only {len(positions)} GPU(s)")
        return (positions[settings.main_gpu],)
    return positions


def active_gpus(settings: LaunchSettings, machine: Machine) -> tuple[Device, ...]:
    """The GPUs llama.cpp uses, in order (see `active_gpu_positions`, which says where each one sits)."""
    return tuple(machine.gpus[i] for i in active_gpu_positions(settings, machine))


def _names(gpus: Sequence[Device]) -> str:
    return ", ".join(gpu_backend(d, i).buffer_type for i, d in enumerate(gpus)) or "none"


def _is_matrix_weight(t: TensorProfile) -> bool:
    """Weights used by MUL_MAT (2-D) or MUL_MAT_ID (3-D expert stacks): what CPU_REPACK can take."""
    if not t.name.endswith(".weight"):
        return False
    if t.role in (TensorRole.TOKEN_EMBD, TensorRole.POS_EMBD, TensorRole.NORM):
        return False
    dims = len(_trim(t.shape))
    if "_exps" in t.name:
        return dims == 3
    return dims == 2


def _trim(shape: tuple[int, ...]) -> tuple[int, ...]:
    s = list(shape)
    while len(s) > 1 and s[-1] == 1:
        s.pop()
    return tuple(s)


#: The last few placements (shared by the estimator's threads): the context does not change them.
_PLACEMENT_CACHE: AnchoredCache[WeightPlacement] = AnchoredCache(16)


def place_weights(
    profile: ModelProfile,
    settings: LaunchSettings,
    machine: Machine,
    *,
    cpu: CpuFeatures = DEFAULT_CPU_FEATURES,
    gpu_build: bool | None = None,
    load_mtp: bool = False,
) -> WeightPlacement:
    """Place every tensor of `profile` as llama.cpp would with `settings` on `machine`.

    `gpu_build` says whether the llama.cpp build has a GPU backend (decides pinned host vs CPU_REPACK); by default
    it is true when the machine has a GPU. The context size does not change the placement, so results are kept for
    the last few (profile, machine, settings) and reused across contexts.
    """
    key_settings = settings if settings.n_ctx == 0 else replace(settings, n_ctx=0)
    key = (id(profile), id(machine), key_settings, cpu, gpu_build, load_mtp)
    return _PLACEMENT_CACHE.get_or_compute(
        key, (profile, machine), lambda: _place_weights(profile, settings, machine, cpu, gpu_build, load_mtp)
    )


def _host_pinned_buffer(settings: LaunchSettings, machine: Machine, has_gpus: bool) -> str | None:
    """The pinned host buffer type the first GPU backend offers (host weights go there), None without one."""
    if settings.no_host or not has_gpus:
        return None
    for i, d in enumerate(machine.gpus):
        b = gpu_backend(d, i)
        if b.host_buffer_type is not None:
            return b.host_buffer_type
    return None


@dataclass(frozen=True, slots=True)
class _Loaded:
    """The tensors a profile loads, with what their placement needs that no setting changes (cached per profile)."""

    tensors: tuple[TensorProfile, ...]
    layer_index: tuple[
        int | None, ...
    ]  # the layer whose device it follows: None = input layer, n_layer = output
    matrix: tuple[bool, ...]
    skipped: tuple[str, ...]  # NextN/MTP blocks not loaded
    tied: int | None  # index of token_embd.weight when tied embeddings get an output copy
    output_layer: int
    runs: tuple[
        tuple[int | None, int, int], ...
    ]  # (layer index, start, end): consecutive tensors of one layer
    run_of: tuple[int, ...]  # each tensor's run


_LOADED: AnchoredCache[_Loaded] = AnchoredCache(8)


def _loaded(profile: ModelProfile, load_mtp: bool) -> _Loaded:
    return _LOADED.get_or_compute((id(profile), load_mtp), (profile,), lambda: _load_list(profile, load_mtp))


def _load_list(profile: ModelProfile, load_mtp: bool) -> _Loaded:
    tensors: list[TensorProfile] = []
    layer_index: list[int | None] = []
    skipped: list[str] = []
    L = profile.n_layer_all
    nextn_layers = {lp.index for lp in profile.layers if lp.is_nextn}
    tied_embd = profile.tied_embeddings and not any(t.name == "output.weight" for t in profile.tensors)
    tied: int | None = None
    for t in profile.tensors:
        if t.layer is not None and (t.layer in nextn_layers or t.layer >= profile.n_layer) and not load_mtp:
            skipped.append(t.name)  # TENSOR_SKIP: NextN/MTP blocks are not loaded without MTP
            continue
        if t.role in (TensorRole.TOKEN_EMBD, TensorRole.POS_EMBD):
            layer_index.append(None)
        elif t.layer is not None and t.layer < L:
            layer_index.append(t.layer)
        else:
            layer_index.append(L)  # output layer (and non-block heads)
        if tied_embd and tied is None and t.role is TensorRole.TOKEN_EMBD and t.name == "token_embd.weight":
            tied = len(tensors)
        tensors.append(t)
    runs, run_of = _layer_runs(layer_index)
    return _Loaded(
        tuple(tensors),
        tuple(layer_index),
        tuple(_is_matrix_weight(t) for t in tensors),
        tuple(skipped),
        tied,
        L,
        runs,
        run_of,
    )


def _layer_runs(
    layer_index: list[int | None],
) -> tuple[tuple[tuple[int | None, int, int], ...], tuple[int, ...]]:
    """Consecutive tensors of one layer as (layer, first, end) runs, and each tensor's run."""
    runs: list[tuple[int | None, int, int]] = []
    run_of: list[int] = []
    for i, li in enumerate(layer_index):
        if runs and runs[-1][0] == li and runs[-1][2] == i:
            runs[-1] = (li, runs[-1][1], i + 1)
        else:
            runs.append((li, i, i + 1))
        run_of.append(len(runs) - 1)
    return tuple(runs), tuple(run_of)


#: Which loaded tensors one `-ot` pattern matches (the --n-cpu-moe patterns repeat across a plan's estimates).
_MATCHES: AnchoredCache[tuple[int, ...]] = AnchoredCache(2048)


def _matches(loaded: _Loaded, pattern: str) -> tuple[int, ...]:
    def scan() -> tuple[int, ...]:
        rx = re.compile(pattern)
        return tuple(i for i, t in enumerate(loaded.tensors) if rx.search(t.name))

    return _MATCHES.get_or_compute((id(loaded), pattern), (loaded,), scan)


def _override_targets(loaded: _Loaded, overrides: Sequence[TensorOverride]) -> dict[int, str]:
    """Tensor index -> the buffer type of the first override whose pattern matches its name (llama_model_loader
    tries them in order and takes the first match)."""
    out: dict[int, str] = {}
    for o in overrides:
        for i in _matches(loaded, o.pattern):
            out.setdefault(i, o.buffer_type)
    return out


class _Chooser:
    """Where one tensor goes and how many bytes it takes there (llama_model_loader's buffer type choice).

    A tensor's placement depends only on its target (the host or a GPU), so each (tensor, target) is built once and
    shared by every estimate with the same backends (a plan's search changes only which target each tensor gets)."""

    def __init__(
        self, backends: tuple[Backend, ...], host_pinned: str | None, use_repack: bool, cpu: CpuFeatures
    ):
        self.backends = backends
        self.host_pinned = host_pinned
        self.use_repack = use_repack
        self.cpu = cpu
        self.by_buft = {b.buffer_type: i for i, b in enumerate(backends)}
        self.memo: dict[tuple[int, int | None], TensorPlacement] = {}
        self.run_memo: dict[_RunKey, tuple[tuple[TensorPlacement, ...], _Sums]] = {}

    def cpu_choice(self, t: TensorProfile, matrix: bool) -> tuple[str, int | None, int]:
        if self.host_pinned is not None:
            return self.host_pinned, None, pad(t.n_bytes, CPU_ALIGNMENT)
        if self.use_repack and matrix:
            mult = self.cpu.repack_row_multiple(t.ggml_type)
            ne1 = t.shape[1] if len(t.shape) > 1 else 1
            if mult is not None and ne1 % mult == 0:
                return CPU_REPACK_BUFT, None, pad(t.n_bytes, CPU_ALIGNMENT)
        return CPU_BUFT, None, pad(t.n_bytes, CPU_ALIGNMENT)

    def gpu_choice(self, t: TensorProfile, gi: int) -> tuple[str, int | None, int]:
        b = self.backends[gi]
        size = t.n_bytes
        if b.row_padding and t.shape and t.shape[0] % b.row_padding and is_quantized(t.ggml_type):
            size += row_bytes(t.ggml_type, b.row_padding - t.shape[0] % b.row_padding)
        return b.buffer_type, gi, pad(size, b.alignment)

    def at(self, t: TensorProfile, target: int | None, matrix: bool) -> tuple[str, int | None, int]:
        return self.cpu_choice(t, matrix) if target is None else self.gpu_choice(t, target)

    def target(self, buft: str, pattern_of: str) -> int | None:
        """The target an override's buffer type names: None for the host, else the GPU's index."""
        if buft == CPU_BUFT:
            return None
        gi = self.by_buft.get(buft)
        if gi is None:
            raise SettingsError(
                f"-ot {pattern_of}={buft}: unknown buffer type (have: CPU, "
                f"{', '.join(b.buffer_type for b in self.backends) or 'none'})"
            )
        return gi

    def placed(self, loaded: _Loaded, i: int, target: int | None) -> TensorPlacement:
        key = (i, target)
        hit = self.memo.get(key)
        if hit is None:
            t, matrix = loaded.tensors[i], loaded.matrix[i]
            buft, dev, size = self.at(t, target, matrix)
            hit = self.memo[key] = TensorPlacement(
                t.name, buft, dev, size, False, t.layer, t.role, t.n_bytes, matrix
            )
        return hit

    def run(
        self, loaded: _Loaded, r: int, target: int | None, moved: tuple[tuple[int, int | None], ...] = ()
    ) -> tuple[tuple[TensorPlacement, ...], _Sums]:
        """A whole run of one layer's tensors sent to `target`, but for the (tensor, target) pairs in `moved` (the
        overrides that match in it), with its bytes and count per buffer."""
        key = (r, target, moved)
        hit = self.run_memo.get(key)
        if hit is None:
            if len(self.run_memo) >= _RUN_MEMO_SIZE:  # a long session tries many overrides: start again
                self.run_memo.clear()
            _, start, end = loaded.runs[r]
            where = dict(moved)
            placed = tuple(self.placed(loaded, i, where.get(i, target)) for i in range(start, end))
            sums: _Sums = {}
            _add_sizes(sums, placed)
            hit = self.run_memo[key] = (placed, sums)
        return hit


_RUN_MEMO_SIZE = 8192

#: A run, its layer's target and the overridden tensors' targets.
_RunKey = tuple[int, int | None, tuple[tuple[int, int | None], ...]]

#: Bytes and tensor count per (buffer type, device).
_Sums = dict[tuple[str, int | None], list[int]]


def _add_sizes(sums: _Sums, placed: Sequence[TensorPlacement]) -> None:
    for p in placed:
        acc = sums.setdefault((p.buffer_type, p.device), [0, 0])
        acc[0] += p.alloc_bytes
        acc[1] += 1


#: Choosers per (loaded tensors, backends): their memo of placements is what makes a plan's estimates cheap.
_CHOOSERS: AnchoredCache[_Chooser] = AnchoredCache(16)


def _chooser(
    loaded: _Loaded,
    backends: tuple[Backend, ...],
    host_pinned: str | None,
    use_repack: bool,
    cpu: CpuFeatures,
) -> _Chooser:
    key = (id(loaded), backends, host_pinned, use_repack, cpu)
    return _CHOOSERS.get_or_compute(key, (loaded,), lambda: _Chooser(backends, host_pinned, use_repack, cpu))


def _placed_tensors(
    loaded: _Loaded, ch: _Chooser, devs: tuple[int | None, ...], overrides: Sequence[TensorOverride]
) -> tuple[list[TensorPlacement], _Sums]:
    """Every loaded tensor's placement in file order, plus the tied embedding's output copy; bytes and count per
    buffer. Each run of one layer's tensors goes to its layer's device but for the tensors an override sends
    elsewhere; the run holding a tied embedding is placed tensor by tensor (its output copy follows it)."""
    targets = _override_targets(loaded, overrides)
    patterns = {o.buffer_type: o.pattern for o in reversed(overrides)}
    resolved = {buft: ch.target(buft, patterns[buft]) for buft in set(targets.values())}
    moved: dict[int, list[tuple[int, int | None]]] = {}
    for i in sorted(targets):
        moved.setdefault(loaded.run_of[i], []).append((i, resolved[targets[i]]))
    tied_run = None if loaded.tied is None else loaded.run_of[loaded.tied]
    placed: list[TensorPlacement] = []
    sums: _Sums = {}
    for r, (li, start, end) in enumerate(loaded.runs):
        layer_target = None if li is None else devs[li]
        if r == tied_run:
            first = len(placed)
            _place_tied_run(loaded, ch, devs, range(start, end), dict(moved.get(r, ())), layer_target, placed)
            _add_sizes(sums, placed[first:])
            continue
        run, run_sums = ch.run(loaded, r, layer_target, tuple(moved.get(r, ())))
        placed.extend(run)
        for k, (nbytes, count) in run_sums.items():
            acc = sums.setdefault(k, [0, 0])
            acc[0] += nbytes
            acc[1] += count
    return placed, sums


def _place_tied_run(
    loaded: _Loaded,
    ch: _Chooser,
    devs: tuple[int | None, ...],
    indices: range,
    moved: dict[int, int | None],
    layer_target: int | None,
    placed: list[TensorPlacement],
) -> None:
    for i in indices:
        target = moved.get(i, layer_target)
        placed.append(ch.placed(loaded, i, target))
        if i == loaded.tied:  # the copy goes where an override of this name, else the output layer, sends it
            copy_target = target if i in moved else devs[loaded.output_layer]
            copy = _output_copy(loaded, i, placed[-1].buffer_type, ch, copy_target)
            if copy is not None:
                placed.append(copy)


def _output_copy(
    loaded: _Loaded, i: int, buft: str, ch: _Chooser, target: int | None
) -> TensorPlacement | None:
    """TENSOR_DUPLICATED: tied embeddings are created again for the output layer (LLM_TENSOR_OUTPUT), a second
    copy when the output layer's buffer type differs from the input's. Overrides match it by the input's name."""
    t = loaded.tensors[i]
    obuft, odev, osize = ch.at(t, target, True)
    if obuft == buft:
        return None
    return TensorPlacement(
        t.name + " (output copy)", obuft, odev, osize, True, None, TensorRole.OUTPUT, t.n_bytes, True
    )


def mapped_span_bytes(profile: ModelProfile, placement: WeightPlacement) -> int:
    """What a real load maps for the host's mapped buffer: per file, from the first to the end of the last host
    tensor the plain CPU buffer type takes (src/llama-model.cpp `load_tensors`: with mmap,
    `ggml_backend_dev_buffer_from_host_ptr(addr + first, last - first)` over `get_mapping_range`). Weights that went
    to CPU_REPACK or a GPU but lie between them are in the span too; the file's pages are page cache, not allocated.
    llama.cpp's dry run (no mmap) counts the tensors instead, as the weights term does. 0 without mmap."""
    if not placement.file_backed:
        return 0
    # only the CPU device's own buffer type is mapped (`is_default_buft`): a GPU's pinned host buffer is allocated
    mapped = {t.name for t in placement.tensors if t.device is None and t.buffer_type == CPU_BUFT}
    spans: dict[int, tuple[int, int]] = {}
    for t in profile.tensors:
        if t.name not in mapped:
            continue
        first, last = spans.get(t.shard, (t.offset, t.offset + t.n_bytes))
        spans[t.shard] = (min(first, t.offset), max(last, t.offset + t.n_bytes))
    return sum(last - first for first, last in spans.values())


def _buffer_sizes(sizes: _Sums, use_mmap: bool, host_pinned: str | None) -> tuple[BufferSize, ...]:
    """Bytes per buffer type and device; with mmap the host CPU buffer is the mapped file."""
    buffers = []
    for (buft, dev), (nbytes, count) in sizes.items():
        name = buft
        if dev is None and use_mmap and buft in (CPU_BUFT, host_pinned):
            name = CPU_MAPPED_BUFT
        buffers.append(BufferSize(name, dev, nbytes, count))
    buffers.sort(key=lambda b: (b.device is None, b.device if b.device is not None else 0, b.buffer_type))
    return tuple(buffers)


def _place_weights(
    profile: ModelProfile,
    settings: LaunchSettings,
    machine: Machine,
    cpu: CpuFeatures,
    gpu_build: bool | None,
    load_mtp: bool,
) -> WeightPlacement:
    positions = active_gpu_positions(settings, machine)
    gpus = tuple(machine.gpus[i] for i in positions)
    backends = [gpu_backend(machine.gpus[i], i) for i in positions]
    ngl = resolve_n_gpu_layers(settings.n_gpu_layers, profile.n_layer_all, len(gpus))
    devs = layer_devices(profile.n_layer_all, ngl, split_fractions(settings, gpus))
    use_mmap = settings.load_mode not in (LoadMode.NONE, LoadMode.DIO)
    host_pinned = _host_pinned_buffer(settings, machine, bool(gpus))
    loaded = _loaded(profile, load_mtp)
    ch = _chooser(loaded, tuple(backends), host_pinned, settings.repack and host_pinned is None, cpu)
    placed, sums = _placed_tensors(loaded, ch, devs, effective_overrides(settings))
    skipped = loaded.skipped
    return WeightPlacement(
        n_gpu_layers=ngl,
        layer_device=devs,
        buffers=_buffer_sizes(sums, use_mmap, host_pinned),
        tensors=tuple(placed),
        skipped=tuple(skipped),
        file_backed=use_mmap,
    )
