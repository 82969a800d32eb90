"""Rough stand-ins the window uses only when a core module is not installed (a partial or development install).

Every estimate made here says so in `Estimate.assumptions`, and the window shows that line. The real code lives in
`fitplan.core.gguf_reader`, `profile_builder`, `estimator` and `command`; `fitplan.gui.backend` prefers those.
Nothing here imports Qt.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from fitplan.core.devices import MIB, Device, DeviceKind, Machine
from fitplan.core.errors import GGUFError, SettingsError
from fitplan.core.estimate import DeviceEstimate, Estimate, ResolvedContext, Term, TermKind
from fitplan.core.gguf_header import GGUFArray, GGUFHeader, GGUFTensorInfo, MetadataValue, ModelFiles
from fitplan.core.profile import (
    LayerKind,
    LayerProfile,
    MlaParams,
    ModelProfile,
    MoeParams,
    TensorProfile,
    TensorRole,
)
from fitplan.core.settings import NGL_ALL, NGL_AUTO, FlashAttn, LaunchSettings, MmprojPlacement

ROUGH = "Rough estimate: fitplan's estimator is not installed, only weights and KV cache are exact."
HEADER_ONLY_KEY = "fitplan.header_only"
_MAX_COUNT = 1 << 24
_MAX_STRING = 1 << 24
_SCALARS: dict[int, str] = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_KNOWN_ARCHS = ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "deepseek2", "mistral3", "phi3", "gemma2", "clip")


class _Cursor:
    def __init__(self, fh: BinaryIO, source: str, endian: str) -> None:
        self.fh, self.source, self.endian = fh, source, endian

    def read(self, n: int) -> bytes:
        pos = self.fh.tell()
        data = self.fh.read(n)
        if len(data) != n:
            raise GGUFError("file ends inside the header", pos, self.source)
        return data

    def unpack(self, fmt: str) -> int | float | bool:
        value: int | float | bool = struct.unpack(self.endian + fmt, self.read(struct.calcsize(fmt)))[0]
        return value

    def count(self, what: str) -> int:
        pos = self.fh.tell()
        n = int(self.unpack("Q"))
        if n > _MAX_COUNT:
            raise GGUFError(f"implausible {what} ({n})", pos, self.source)
        return n

    def string(self) -> str:
        pos = self.fh.tell()
        n = int(self.unpack("Q"))
        if n > _MAX_STRING:
            raise GGUFError(f"string of {n} bytes", pos, self.source)
        try:
            return self.read(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFError("string is not UTF-8", pos, self.source) from exc

    def value(self, vtype: int, depth: int = 0) -> MetadataValue:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9 and depth < 2:
            etype = int(self.unpack("I"))
            n = self.count("array length")
            values = tuple(self.value(etype, depth + 1) for _ in range(n)) if n <= 4096 else None
            if values is None:
                for _ in range(n):
                    self.value(etype, depth + 1)
            return GGUFArray(etype, n, values)
        raise GGUFError(f"unknown metadata value type {vtype}", self.fh.tell(), self.source)


def read_header(path: str) -> GGUFHeader:
    p = Path(path)
    try:
        fh = p.open("rb")
    except OSError as exc:
        raise GGUFError(f"cannot open: {exc.strerror or exc}", None, path) from exc
    with fh:
        magic = fh.read(4)
        if magic != b"GGUF":
            raise GGUFError("not a GGUF file (bad magic)", 0, path)
        endian = "<"
        version = struct.unpack("<I", fh.read(4) or b"\0\0\0\0")[0]
        if version not in (2, 3):
            endian = ">"
            fh.seek(4)
            version = struct.unpack(">I", fh.read(4))[0]
            if version not in (2, 3):
                raise GGUFError(f"unsupported GGUF version {version}", 4, path)
        cur = _Cursor(fh, path, endian)
        n_tensors = cur.count("tensor count")
        n_kv = cur.count("metadata count")
        meta: dict[str, MetadataValue] = {}
        for _ in range(n_kv):
            key = cur.string()
            meta[key] = cur.value(int(cur.unpack("I")))
        tensors: list[GGUFTensorInfo] = []
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = int(cur.unpack("I"))
            if n_dims > 4:
                raise GGUFError(f"tensor {name} has {n_dims} dimensions", fh.tell(), path)
            shape = tuple(int(cur.unpack("Q")) for _ in range(n_dims))
            ggml_type = int(cur.unpack("I"))
            offset = int(cur.unpack("Q"))
            try:
                block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
            except (ValueError, KeyError) as exc:
                raise GGUFError(f"tensor {name} has unknown type {ggml_type}", fh.tell(), path) from exc
            n = math.prod(shape)
            tensors.append(GGUFTensorInfo(name, ggml_type, shape, offset, n // block * size))
        align_v = meta.get("general.alignment", 32)
        align = align_v if isinstance(align_v, int) and align_v > 0 else 32
        pos = fh.tell()
        data_offset = (pos + align - 1) // align * align
        size = p.stat().st_size
    header = GGUFHeader(path, version, endian, meta, tuple(tensors), align, data_offset, size, pos)
    if meta.get(HEADER_ONLY_KEY) is not True and size < header.expected_file_size:
        raise GGUFError(
            f"incomplete download: {size} of {header.expected_file_size} bytes present", None, path
        )
    return header


def find_mmproj_for(path: str) -> str | None:
    p = Path(path)
    candidates = sorted(q for q in p.parent.glob("*.gguf") if "mmproj" in q.name.lower() and q != p)
    if not candidates:
        return None
    stem = p.stem.lower().split("-q")[0]
    for q in candidates:
        if stem and stem in q.name.lower():
            return str(q)
    return None


def open_model(path: str) -> ModelFiles:
    main = read_header(path)
    mm = find_mmproj_for(path) if main.architecture != "clip" else None
    return ModelFiles((main,), read_header(mm) if mm else None)


def _role(name: str) -> TensorRole:
    if name.startswith("token_embd"):
        return TensorRole.TOKEN_EMBD
    if name.startswith(("output", "cls")):
        return TensorRole.OUTPUT
    if "_exps" in name:
        return TensorRole.EXPERTS
    if "ssm_" in name:
        return TensorRole.SSM
    if "norm" in name:
        return TensorRole.NORM
    if ".attn_" in name:
        return TensorRole.ATTENTION
    if ".ffn_" in name:
        return TensorRole.FFN
    return TensorRole.OTHER


def _first_int(v: MetadataValue | None, default: int) -> int:
    if isinstance(v, GGUFArray) and v.values:
        v = v.values[0]
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def build_profile(files: ModelFiles | GGUFHeader) -> ModelProfile:
    h = files.main if isinstance(files, ModelFiles) else files
    arch = h.architecture
    g: Callable[[str, int], int] = lambda key, d: _first_int(h.metadata.get(f"{arch}.{key}"), d)  # noqa: E731
    n_layer = g("block_count", 0)
    n_embd = g("embedding_length", 0)
    n_head = g("attention.head_count", 1) or 1
    n_head_kv = g("attention.head_count_kv", n_head)
    k_len = g("attention.key_length", n_embd // n_head if n_head else 0)
    v_len = g("attention.value_length", k_len)
    tensors = tuple(
        TensorProfile(
            t.name, t.ggml_type, GGMLQuantizationType(t.ggml_type).name, t.shape, t.n_bytes,
            int(m.group(1)) if (m := re.match(r"(?:v\.)?blk\.(\d+)\.", t.name)) else None, _role(t.name),
        )
        for t in h.tensors
    )
    embd = next((t for t in h.tensors if t.name == "token_embd.weight"), None)
    n_vocab = g("vocab_size", embd.shape[1] if embd and len(embd.shape) > 1 else 0)
    kv_lora = g("attention.kv_lora_rank", 0)
    n_rot = g("rope.dimension_count", k_len)
    n_swa = g("attention.sliding_window", 0)
    n_expert = g("expert_count", 0)
    layers = []
    for i in range(n_layer):
        kind = LayerKind.FULL
        if kv_lora:
            kind = LayerKind.MLA
        elif n_swa and arch.startswith("gemma") and (i + 1) % 6 != 0:
            kind = LayerKind.SWA
        if any(t.layer == i and t.role is TensorRole.SSM for t in tensors):
            kind = LayerKind.RECURRENT
        mla = kind is LayerKind.MLA
        layers.append(
            LayerProfile(
                i, kind, n_head, 1 if mla else n_head_kv, kv_lora + n_rot if mla else k_len, 0 if mla else v_len,
                g("feed_forward_length", 0), is_swa=kind is LayerKind.SWA,
                is_recurrent=kind is LayerKind.RECURRENT, has_kv=kind is not LayerKind.RECURRENT,
                is_moe=any(t.layer == i and t.role is TensorRole.EXPERTS for t in tensors),
            )
        )
    mix: dict[str, int] = {}
    for t in tensors:
        mix[t.type_name] = mix.get(t.type_name, 0) + t.n_bytes
    size = h.file_size or h.expected_file_size
    if h.metadata.get(HEADER_ONLY_KEY) is True:
        size = h.expected_file_size
    return ModelProfile(
        path=h.source, shard_paths=(h.source,), architecture=arch,
        name=h.get_str("general.name") or Path(h.source).stem,
        file_type=max(mix, key=lambda k: mix[k]) if mix else "", file_size=size,
        n_params=sum(math.prod(t.shape) for t in tensors), n_layer=n_layer, n_layer_all=n_layer, n_nextn=0,
        n_embd=n_embd, n_vocab=n_vocab, n_ctx_train=g("context_length", 4096), layers=tuple(layers),
        tensors=tensors, n_swa=n_swa,
        mla=MlaParams(kv_lora, n_rot, g("attention.key_length_mla", 0), g("attention.value_length_mla", 0))
        if kv_lora else None,
        moe=MoeParams(n_expert, g("expert_used_count", 0)) if n_expert else None,
        tied_embeddings=not any(t.name == "output.weight" for t in tensors),
        verified_architecture=arch in _KNOWN_ARCHS, is_mmproj=arch == "clip",
        quant_mix=tuple(sorted(mix.items(), key=lambda kv: -kv[1])),
    )


def _elem_bytes(type_name: str) -> float:
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name.upper()]]
    return size / block


def estimate(
    profile: ModelProfile, settings: LaunchSettings, machine: Machine, *, mmproj: ModelProfile | None = None
) -> Estimate:
    fa = settings.flash_attn is not FlashAttn.OFF
    if settings.cache_type_v not in ("f16", "f32", "bf16") and settings.flash_attn is FlashAttn.OFF:
        raise SettingsError("a quantized V cache needs flash attention: set flash attention to on or auto")
    n_seq = settings.n_parallel if settings.n_parallel > 0 else 4
    n_ctx = settings.n_ctx or profile.n_ctx_train
    n_ctx = max(256, (n_ctx + 255) // 256 * 256)
    bk, bv = _elem_bytes(settings.cache_type_k), _elem_bytes(settings.cache_type_v)
    gpus = [d for d in machine.gpus]
    n_layer = profile.n_layer
    ngl = n_layer + 1 if settings.n_gpu_layers in (NGL_AUTO, NGL_ALL) else min(settings.n_gpu_layers, n_layer + 1)
    if not gpus:
        ngl = 0
    first_gpu_layer = n_layer + 1 - ngl
    weights = [0] * (len(gpus) + 1)
    kv = [0] * (len(gpus) + 1)
    free = [max(1, d.free_bytes) for d in gpus]

    def dev_of(il: int) -> int:
        if il < first_gpu_layer or not gpus:
            return len(gpus)
        frac = (il - first_gpu_layer + 0.5) / max(1, ngl)
        acc = 0.0
        for i, f in enumerate(free):
            acc += f / sum(free)
            if frac <= acc:
                return i
        return len(gpus) - 1

    for t in profile.tensors:
        if t.role is TensorRole.TOKEN_EMBD:
            weights[-1] += t.n_bytes
            continue
        il = t.layer if t.layer is not None else n_layer
        d = dev_of(il)
        if t.role is TensorRole.EXPERTS and (settings.cpu_moe or (t.layer is not None and t.layer < settings.n_cpu_moe)):
            d = len(gpus)
        weights[d] += t.n_bytes
    if profile.tied_embeddings:
        embd = next((t.n_bytes for t in profile.tensors if t.role is TensorRole.TOKEN_EMBD), 0)
        weights[dev_of(n_layer)] += embd
    for layer in profile.layers:
        if not layer.has_kv:
            continue
        cells = n_ctx
        if layer.is_swa and profile.n_swa and not settings.swa_full:
            cells = min(n_ctx, (profile.n_swa * n_seq + settings.n_ubatch + 255) // 256 * 256)
        kv[dev_of(layer.index)] += int(cells * (layer.n_embd_k_gqa * bk + layer.n_embd_v_gqa * bv))
    out_dev = dev_of(n_layer)
    compute = [0] * (len(gpus) + 1)
    n_ub = min(settings.n_ubatch, n_ctx)
    compute[out_dev] += n_ub * profile.n_vocab * 4
    if not fa:
        compute[out_dev] += n_ub * n_ctx * max((lay.n_head for lay in profile.layers), default=0) * 4
    compute[-1] += n_ub * profile.n_embd * 4 * 4
    devices = []
    all_devs: list[Device] = [*gpus, machine.host]
    for i, dev in enumerate(all_devs):
        terms = [
            Term(TermKind.WEIGHTS, weights[i], "tensor bytes of the layers placed here"),
            Term(TermKind.KV, kv[i], f"{n_ctx} cells x K/V row bytes of the attention layers here"),
            Term(TermKind.COMPUTE, compute[i], "logits and activations of one micro-batch (rough)"),
        ]
        if dev.kind is DeviceKind.CPU:
            terms.append(Term(TermKind.OUTPUT, profile.n_vocab * 4 * n_seq, "f32 logits for every slot"))
        if mmproj is not None and settings.mmproj is not MmprojPlacement.NONE:
            on_gpu = settings.mmproj is MmprojPlacement.GPU and gpus
            if (on_gpu and i == 0) or (not on_gpu and dev.kind is DeviceKind.CPU):
                terms.append(Term(TermKind.MMPROJ, mmproj.weight_bytes, "projector tensors (one buffer)"))
        if dev.kind is DeviceKind.GPU:
            terms.append(Term(TermKind.RESERVE, 256 * MIB, "assumed driver and runtime reserve"))
        devices.append(DeviceEstimate(dev, tuple(terms)))
    ctx = ResolvedContext(n_ctx, n_ctx, n_seq, 1, True, settings.n_batch, n_ub, n_seq, fa, ngl)
    return Estimate(settings, ctx, tuple(devices), assumptions=(ROUGH,))


def command_args(profile: ModelProfile, settings: LaunchSettings) -> list[str]:
    args = ["llama-server", "-m", profile.path, "-c", str(settings.n_ctx or profile.n_ctx_train)]
    if settings.n_parallel > 0:
        args += ["-np", str(settings.n_parallel)]
    if settings.kv_unified:
        args.append("-kvu")
    if settings.cache_type_k != "f16":
        args += ["-ctk", settings.cache_type_k]
    if settings.cache_type_v != "f16":
        args += ["-ctv", settings.cache_type_v]
    if settings.flash_attn is not FlashAttn.AUTO:
        args += ["-fa", settings.flash_attn.value]
    if settings.n_gpu_layers >= 0:
        args += ["-ngl", str(settings.n_gpu_layers)]
    if settings.n_cpu_moe:
        args += ["--n-cpu-moe", str(settings.n_cpu_moe)]
    if settings.n_batch != 2048:
        args += ["-b", str(settings.n_batch)]
    if settings.n_ubatch != 512:
        args += ["-ub", str(settings.n_ubatch)]
    if settings.mmproj_path and settings.mmproj is not MmprojPlacement.NONE:
        args += ["--mmproj", settings.mmproj_path]
        if settings.mmproj is MmprojPlacement.CPU:
            args.append("--no-mmproj-offload")
    if settings.devices is not None:
        args += ["-dev", ",".join(settings.devices) or "none"]
    return args
