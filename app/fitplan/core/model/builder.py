"""Build a `ModelProfile` from GGUF headers, resolving hyper-parameters per layer as llama.cpp 515e85511 does.

Sources (llama.cpp root): src/llama-model.cpp:llama_model_base::load_hparams (generic keys),
src/models/<arch>.cpp:load_arch_hparams (per-arch rules, tabulated in `fitplan.core.model.archs`),
src/llama-hparams.cpp (n_embd_r / n_embd_s, is_swa, has_kv), src/llama-model.cpp:create_memory (which layers own a
cache), src/llama-arch.cpp:LLM_TENSOR_INFOS (input / output layer tensors).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from fitplan.core.gguf.ggml_types import file_type_label, type_name
from fitplan.core.gguf.header import GGUFArray, GGUFHeader, MetadataValue, ModelFiles
from fitplan.core.model import archs
from fitplan.core.model.archs import RecurrentRule, SwaRule
from fitplan.core.model.profile import (
    ClipParams,
    LayerKind,
    LayerProfile,
    MlaParams,
    ModelProfile,
    MoeParams,
    RopeParams,
    SsmParams,
    SwaType,
    TensorProfile,
    TensorRole,
)
from fitplan.core.model.validation import validate_hparams

_BLK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")

#: Non-block tensors of the input layer (src/llama-arch.cpp:LLM_TENSOR_INFOS, LLM_TENSOR_LAYER_INPUT).
_POS_EMBD_PREFIXES = ("position_embd", "token_types", "per_layer_token_embd", "masked_embd")
#: Non-block tensors of the output layer (LLM_TENSOR_LAYER_OUTPUT).
_OUTPUT_PREFIXES = (
    "output",
    "cls",
    "dec_output_norm",
    "enc_output_norm",
    "dense_2",
    "dense_3",
    "hc_head",
    "altup_proj",
    "altup_unembd_proj",
    "decision",
)

#: Archs whose load_arch_hparams does not read `{arch}.ssm.group_count` (so n_group stays 0).
_NO_SSM_GROUP_ARCHS = frozenset({"mamba", "jamba"})
#: Archs whose load_arch_hparams reads `{arch}.wkv.head_size`.
_WKV_ARCHS = frozenset({"rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
#: Archs whose load_arch_hparams reads `{arch}.shortconv.l_cache`.
_SHORTCONV_ARCHS = frozenset({"lfm2", "lfm2moe"})
#: Archs whose load_arch_hparams reads `{arch}.kda.head_dim`.
_KDA_ARCHS = frozenset({"kimi-linear", "kimi-k3", "bailingmoe3", "glm5-next"})
#: Archs whose hparams.causal_attn is forced false in load_arch_hparams.
_NON_CAUSAL_ARCHS = frozenset({"dream", "llada", "llada-moe", "rnd1", "gemma-embedding"})
#: src/llama-model.cpp:llama_model_has_encoder.
_ENCODER_ARCHS = frozenset({"t5", "t5encoder"})


class _Meta:
    """Typed access to `{arch}.*` metadata with llama.cpp's get_key / get_key_or_arr semantics."""

    def __init__(self, header: GGUFHeader, arch: str) -> None:
        self.md = header.metadata
        self.arch = arch
        self.warnings: list[str] = []

    def raw(self, key: str) -> MetadataValue | None:
        return self.md.get(f"{self.arch}.{key}")

    def has(self, key: str) -> bool:
        return f"{self.arch}.{key}" in self.md

    def num(self, key: str, default: int = 0) -> int:
        v = self.raw(key)
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            return int(v)
        if isinstance(v, GGUFArray) and v.values:
            first = v.values[0]
            if isinstance(first, (int, float)):
                return int(first)
        return default

    def real(self, key: str, default: float = 0.0) -> float:
        v = self.raw(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        return default

    def text(self, key: str, default: str = "") -> str:
        v = self.raw(key)
        return v if isinstance(v, str) else default

    def flag(self, key: str, default: bool) -> bool:
        v = self.raw(key)
        if isinstance(v, bool):
            return v
        if isinstance(v, int):
            return v != 0
        return default

    def array(self, key: str) -> list[int] | None:
        """An integer/bool array key (None when absent, not an array, or not materialised)."""
        v = self.raw(key)
        if not isinstance(v, GGUFArray):
            return None
        if v.values is None:
            self.warnings.append(f"{self.arch}.{key}: array of {v.length} values was not read")
            return None
        return [int(x) for x in v.values if isinstance(x, (int, float))]

    def key_or_arr(self, key: str, n: int, default: list[int]) -> list[int]:
        """src/llama-model-loader.cpp:get_key_or_arr: an array fills the first len entries, a scalar fills n."""
        v = self.raw(key)
        if v is None:
            return default
        out = list(default)
        if isinstance(v, GGUFArray):
            vals = self.array(key)
            if vals is None:
                return default
            if len(vals) != n:
                self.warnings.append(f"{self.arch}.{key} has {len(vals)} values, llama.cpp expects {n}")
            for i, x in enumerate(vals[: len(out)]):
                out[i] = x
            return out
        if isinstance(v, (int, float)) and not isinstance(v, str):
            return [int(v)] * n + out[n:]
        return default


def _headers(files: ModelFiles | GGUFHeader) -> tuple[tuple[GGUFHeader, ...], int]:
    if isinstance(files, ModelFiles):
        return files.shards, files.file_size
    return (files,), files.file_size or files.expected_file_size


def tensor_role(name: str) -> tuple[int | None, TensorRole]:
    """Layer index and role of a tensor, from its GGUF name."""
    m = _BLK_RE.match(name)
    if m is None:
        base = name.split(".", 1)[0]
        if base == "token_embd":
            return None, TensorRole.TOKEN_EMBD
        if base.startswith(_POS_EMBD_PREFIXES):
            return None, TensorRole.POS_EMBD
        if base.startswith(_OUTPUT_PREFIXES):
            return None, TensorRole.OUTPUT
        if base.endswith("norm"):
            return None, TensorRole.NORM
        return None, TensorRole.OTHER
    layer = int(m.group(1))
    rest = m.group(2)
    sub = rest.split(".", 1)[0]
    if "_exps" in sub or "_chexps" in sub:
        return layer, TensorRole.EXPERTS
    if sub.endswith("norm") or "_norm" in sub:
        return layer, TensorRole.NORM
    if sub.startswith(("ssm_", "time_mix", "shortconv", "conv1d", "linear_attn")):
        return layer, TensorRole.SSM
    if sub.startswith(("attn", "indexer", "self_attn", "cross_attn", "enc_attn", "dec_attn")):
        return layer, TensorRole.ATTENTION
    if sub.startswith(("ffn", "channel_mix")):
        return layer, TensorRole.FFN
    return layer, TensorRole.OTHER


def _tensors(headers: Sequence[GGUFHeader]) -> tuple[TensorProfile, ...]:
    out: list[TensorProfile] = []
    for shard, h in enumerate(headers):
        for t in h.tensors:
            layer, role = tensor_role(t.name)
            out.append(
                TensorProfile(
                    name=t.name,
                    ggml_type=t.ggml_type,
                    type_name=type_name(t.ggml_type),
                    shape=t.shape,
                    n_bytes=t.n_bytes,
                    layer=layer,
                    role=role,
                    shard=shard,
                    offset=h.data_offset + t.offset,
                )
            )
    return tuple(out)


def _quant_mix(tensors: Sequence[TensorProfile]) -> tuple[tuple[str, int], ...]:
    by_type: dict[str, int] = {}
    for t in tensors:
        by_type[t.type_name] = by_type.get(t.type_name, 0) + t.n_bytes
    return tuple(sorted(by_type.items(), key=lambda kv: (-kv[1], kv[0])))


def _file_type(header: GGUFHeader, mix: Sequence[tuple[str, int]]) -> str:
    ft = header.metadata.get("general.file_type")
    if isinstance(ft, int) and not isinstance(ft, bool):
        return file_type_label(ft)
    return mix[0][0] if mix else ""


def _n_vocab(meta: _Meta, header: GGUFHeader, tensors: Sequence[TensorProfile]) -> int:
    if meta.has("vocab_size"):
        return meta.num("vocab_size")
    toks = header.metadata.get("tokenizer.ggml.tokens")
    if isinstance(toks, GGUFArray):
        return toks.length
    for t in tensors:
        if t.name == "token_embd.weight" and len(t.shape) >= 2:
            return t.shape[1]
    return 0


def _mmproj_profile(headers: Sequence[GGUFHeader], file_size: int) -> ModelProfile:
    h = headers[0]
    tensors = _tensors(headers)
    mix = _quant_mix(tensors)
    return ModelProfile(
        path=h.source,
        shard_paths=tuple(x.source for x in headers),
        architecture="clip",
        name=h.get_str("general.name"),
        file_type=_file_type(h, mix),
        file_size=file_size,
        n_params=sum(t.n_elements for t in tensors),
        n_layer=0,
        n_layer_all=0,
        n_nextn=0,
        n_embd=0,
        n_vocab=0,
        n_ctx_train=0,
        layers=(),
        tensors=tensors,
        has_memory=False,
        alignment=h.get_int("general.alignment", 32),
        is_mmproj=True,
        quant_mix=mix,
        clip=ClipParams(
            projector_type=h.get_str("clip.projector_type"),
            image_size=h.get_int("clip.vision.image_size"),
            patch_size=h.get_int("clip.vision.patch_size"),
            n_embd=h.get_int("clip.vision.embedding_length"),
            n_ff=h.get_int("clip.vision.feed_forward_length"),
            n_head=h.get_int("clip.vision.attention.head_count"),
            n_layer=h.get_int("clip.vision.block_count"),
            projection_dim=h.get_int("clip.vision.projection_dim"),
            spatial_merge_size=h.get_int("clip.vision.spatial_merge_size"),
            n_wa_pattern=h.get_int("clip.vision.n_wa_pattern"),
        ),
    )


def build_profile(files: ModelFiles | GGUFHeader) -> ModelProfile:
    """Resolve a model's hyper-parameters per layer, as llama.cpp's load_hparams + create_memory do."""
    headers, file_size = _headers(files)
    hparam_warnings = validate_hparams(headers)  # every hyper-parameter checked once (raises HeaderValueError)
    h = headers[0]
    arch = h.architecture
    if arch == "clip":
        return _mmproj_profile(headers, file_size)

    meta = _Meta(h, arch)
    warnings: list[str] = list(hparam_warnings)
    verified = arch in archs.KNOWN_ARCHITECTURES
    if not verified:
        warnings.append(
            f"architecture {arch!r} is not known to llama.cpp 515e85511; profile built from the generic keys only"
        )
    if arch in archs.APPROXIMATE_MEMORY_ARCHS:
        warnings.append(archs.APPROXIMATE_MEMORY_ARCHS[arch])

    tensors = _tensors(headers)
    tensor_names = {t.name for t in tensors}

    # -- src/llama-model.cpp:load_hparams, generic part -------------------------------------------------------
    n_embd = meta.num("embedding_length")
    n_layer_all = meta.num("block_count")
    n_nextn = meta.num("nextn_predict_layers")
    # models/deepseek4.cpp: the MTP block counts only when its eh_proj tensor is present
    probe = f"blk.{n_layer_all - n_nextn}.nextn.eh_proj.weight"
    if arch == "deepseek4" and n_nextn > 0 and probe not in tensor_names:
        n_nextn = 0
    n_nextn = min(n_nextn, n_layer_all)
    zeros = [0] * n_layer_all
    n_expert = meta.num("expert_count")
    n_expert_used = meta.key_or_arr("expert_used_count", n_layer_all, zeros)
    if arch in ("hunyuan_vl", "hunyuan-dense") and n_expert <= 1:  # load_hparams: dense Hunyuan
        n_expert = 0
        n_expert_used = list(zeros)
    n_ff = meta.key_or_arr("feed_forward_length", n_layer_all, zeros)
    n_head = meta.key_or_arr("attention.head_count", n_layer_all, zeros)
    n_head_kv = meta.key_or_arr("attention.head_count_kv", n_layer_all, list(n_head))

    head0 = n_head[0] if n_head else 0
    if head0 > 0:
        head_k = meta.num("attention.key_length", n_embd // head0)
        head_v = meta.num("attention.value_length", n_embd // head0)
        n_rot = meta.num("rope.dimension_count", head_k)
    else:
        head_k = head_v = n_rot = 0
    if arch == "plamo2":  # models/plamo2.cpp re-reads key/value_length (also when head_count is absent)
        head_k = meta.num("attention.key_length", head_k)
        head_v = meta.num("attention.value_length", head_v)
    head_k_swa = meta.num("attention.key_length_swa", head_k)
    head_v_swa = meta.num("attention.value_length_swa", head_v)
    kv_lora_rank = meta.num("attention.kv_lora_rank")
    if arch in ("kimi-k3", "glm5-next"):
        head_v = kv_lora_rank  # models/kimi-k3.cpp, models/glm5-next.cpp: "the MLA cache holds the latent"

    # nanbeige (models/nanbeige.cpp): num_loops repeats the physical layers
    if arch == "nanbeige":
        loops = max(1, meta.num("num_loops", 1))
        if loops > 1:
            phys = n_layer_all - n_nextn
            n_head = (n_head[:phys]) * loops
            n_head_kv = (n_head_kv[:phys]) * loops
            n_ff = (n_ff[:phys]) * loops
            n_expert_used = (n_expert_used[:phys]) * loops
            n_layer_all = phys * loops
            zeros = [0] * n_layer_all

    # graniteswitch (models/granite-switch.cpp): a single-head router attention layer is appended at index n_real;
    # llama.cpp repurposes n_layer_nextn = 1 for it, but the trunk attends it, so it keeps its KV (router_layer)
    router_layer = -1
    if arch == "graniteswitch":
        router_layer = n_layer_all - n_nextn
        n_layer_all = router_layer + 1
        n_nextn = 1
        n_head = [*n_head[:router_layer], 1]
        n_head_kv = [*n_head_kv[:router_layer], 1]
        n_ff = [*n_ff[:router_layer], 0]
        n_expert_used = [*n_expert_used[:router_layer], 0]
        zeros = [0] * n_layer_all

    n_layer = n_layer_all - n_nextn

    # -- recurrent layers (src/models/<arch>.cpp) --------------------------------------------------------------
    rec = archs.ARCH_RECURRENT.get(arch, archs.ArchRecurrent())
    is_recr = [False] * n_layer_all
    if rec.rule is RecurrentRule.ALL:
        is_recr = [True] * n_layer_all
    elif rec.rule is RecurrentRule.HEAD_KV_ZERO:
        is_recr = [il < n_layer and n_head_kv[il] == 0 for il in range(n_layer_all)]
    elif rec.rule is RecurrentRule.HEAD_KV_ZERO_ALL:
        is_recr = [n_head_kv[il] == 0 for il in range(n_layer_all)]
    elif rec.rule is RecurrentRule.NEMOTRON:
        is_recr = [il < n_layer and n_head_kv[il] == 0 and n_ff[il] == 0 for il in range(n_layer_all)]
    elif rec.rule is RecurrentRule.INTERVAL:
        if meta.has("attention.recurrent_layers"):
            arr = meta.key_or_arr("attention.recurrent_layers", n_layer_all, [0] * n_layer_all)
            is_recr = [x != 0 for x in arr]
        else:
            interval = meta.num("full_attention_interval", rec.default_interval)
            if interval <= 0:
                warnings.append(f"{arch}.full_attention_interval is missing; llama.cpp refuses this file")
                interval = 1
            is_recr = [il < n_layer and (il + 1) % interval != 0 for il in range(n_layer_all)]

    # -- SWA (src/models/<arch>.cpp, src/llama-model.cpp:load_swa_pattern) ------------------------------------
    swa_rule = archs.ARCH_SWA.get(arch, archs.ArchSwa())
    swa_type = SwaType.NONE
    n_swa = 0
    is_swa = [False] * n_layer_all
    window_found = meta.has("attention.sliding_window")
    window = meta.num("attention.sliding_window")

    def load_pattern(period: int, dense_first: bool) -> list[bool]:
        arr = meta.array("attention.sliding_window_pattern")
        if arr is not None:
            flags = [bool(x) for x in arr[:n_layer_all]]
            return flags + [False] * (n_layer_all - len(flags))
        n_pattern = meta.num("attention.sliding_window_pattern", period)
        return list(archs.swa_pattern(n_layer, n_layer_all, n_pattern, dense_first))

    rule = swa_rule.rule
    if rule is SwaRule.ALWAYS:
        swa_type = swa_rule.swa_type
        n_swa = window if window_found else swa_rule.default_window
        if not window_found and swa_rule.default_window == 0:
            warnings.append(f"{arch}.attention.sliding_window is missing; llama.cpp requires it")
        is_swa = load_pattern(swa_rule.period, swa_rule.dense_first)
    elif rule is SwaRule.IF_WINDOW:
        if window_found and window > 0:
            swa_type = swa_rule.swa_type
            n_swa = swa_rule.forced_window or window
            is_swa = load_pattern(swa_rule.period, swa_rule.dense_first)
    elif rule is SwaRule.ARRAY:
        swa_type = swa_rule.swa_type
        n_swa = window
        swa_arr = meta.array("attention.sliding_window_pattern")
        if swa_arr is None:
            warnings.append(f"{arch}.attention.sliding_window_pattern must be a per-layer array")
        else:
            flags = [bool(x) for x in swa_arr[:n_layer_all]]
            is_swa = flags + [False] * (n_layer_all - len(flags))
    elif rule is SwaRule.LLAMA4:
        if not (window_found and window == 0):
            swa_type = SwaType.CHUNKED
            n_swa = swa_rule.forced_window
            is_swa = load_pattern(swa_rule.period, False)
    elif rule is SwaRule.EXAONE4:
        if n_layer == 64:
            swa_type = SwaType.STANDARD
            n_swa = window if window_found else swa_rule.default_window
            is_swa = load_pattern(swa_rule.period, False)
    elif rule is SwaRule.NON_RECURRENT:
        if window_found and window > 0:
            swa_type = SwaType.STANDARD
            n_swa = window
            is_swa = [il < n_layer and not is_recr[il] for il in range(n_layer_all)]
    elif rule is SwaRule.ALL_LAYERS:
        swa_type = SwaType.STANDARD
        n_swa = window
        is_swa = [True] * n_layer_all

    # -- MLA (models/deepseek2.cpp and the other MLA archs) ------------------------------------------------------
    k_mla = meta.num("attention.key_length_mla")
    v_mla = meta.num("attention.value_length_mla")
    is_mla = arch in archs.MLA_KEY_ARCHS and k_mla > 0 and v_mla > 0
    mla = (
        MlaParams(
            kv_lora_rank=kv_lora_rank,
            n_rot=n_rot,
            key_length_mla=k_mla,
            value_length_mla=v_mla,
            q_lora_rank=meta.num("attention.q_lora_rank"),
        )
        if is_mla
        else None
    )

    # -- shared KV layers (src/llama-hparams.cpp:has_kv, n_layer_kv_from_start) --------------------------------
    kv_from_start = -1
    if arch == "gemma3n":
        kv_from_start = 20  # models/gemma3n.cpp
    elif arch == "gemma4":
        kv_from_start = n_layer_all - meta.num("attention.shared_kv_layers")  # models/gemma4.cpp

    # -- recurrent state sizes (src/llama-hparams.cpp:n_embd_r / n_embd_s) --------------------------------------
    d_conv = meta.num("ssm.conv_kernel")
    d_inner = meta.num("ssm.inner_size")
    d_state = meta.num("ssm.state_size")
    n_group = 0 if arch in _NO_SSM_GROUP_ARCHS else meta.num("ssm.group_count")
    wkv = meta.num("wkv.head_size") if arch in _WKV_ARCHS else 0
    token_shift = meta.num("token_shift_count", 2)
    l_cache = meta.num("shortconv.l_cache") if arch in _SHORTCONV_ARCHS else 0
    kda = meta.num("kda.head_dim") if arch in _KDA_ARCHS else 0
    head_la = head_k if arch == "minimax-01" else 0  # models/minimax-01.cpp: n_embd_head_la = key_length
    if wkv:
        n_embd_r, n_embd_s = token_shift * n_embd, n_embd * wkv
    elif l_cache:
        n_embd_r, n_embd_s = n_embd * (l_cache - 1), 0
    elif kda:
        n_embd_r = 3 * (d_conv - 1 if d_conv > 0 else 3) * head0 * kda
        n_embd_s = kda * kda * head0
    else:
        n_embd_r = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * n_group * d_state)
        n_embd_s = head_la * head_la * head0 if head_la else d_state * d_inner
    ssm = (
        SsmParams(
            d_conv=d_conv,
            d_inner=d_inner,
            d_state=d_state,
            n_group=n_group,
            dt_rank=meta.num("ssm.time_step_rank"),
            wkv_head_size=wkv,
            token_shift_count=token_shift if wkv else 0,
            shortconv_l_cache=l_cache,
            kda_head_dim=kda,
        )
        if any(is_recr)
        else None
    )

    # qwen4exp PLE conv history (src/llama-hparams.cpp:ple_conv_state, models/qwen4exp.cpp): one extra f32 row
    # tensor on the PLE layer, (conv_kernel - 1) * ngram_size * hc_mult * n_embd per sequence
    ple_layers: set[int] = set()
    ple_state = 0
    if arch == "qwen4exp":
        ple_arr = meta.array("ple.layers") or []
        if ple_arr:
            ple_layers = set(ple_arr)
            ngram = meta.num("ple.ngram_size")
            conv = meta.num("ple.conv_kernel")
            heads = (ngram - 1) * meta.num("ple.heads_per_ngram")
            if heads > 0 and conv > 0:
                ple_state = (conv - 1) * ngram * meta.num("hyper_connection.count") * n_embd

    # -- which layers own caches (src/llama-model.cpp:create_memory) --------------------------------------------
    layout = archs.memory_layout(arch)
    has_kv = [False] * n_layer_all
    holds_rs = [False] * n_layer_all
    indexer = [False] * n_layer_all
    if layout is archs.MemoryLayout.KV:
        trunk_only = n_nextn > 0 and n_layer > 0 and router_layer < 0
        for il in range(n_layer_all):
            own = kv_from_start < 0 or il < kv_from_start
            has_kv[il] = own and (not trunk_only or il < n_layer)
    elif layout is archs.MemoryLayout.RECURRENT:
        holds_rs = [il < n_layer for il in range(n_layer_all)]
    elif layout is archs.MemoryLayout.HYBRID:
        filt = archs.hybrid_attn_filter(arch)
        for il in range(n_layer_all):
            if filt is archs.HybridAttnFilter.ALL:
                has_kv[il] = True
            elif filt is archs.HybridAttnFilter.NEMOTRON:
                has_kv[il] = not is_recr[il] and n_ff[il] == 0
            elif filt is archs.HybridAttnFilter.TRUNK_NOT_RECURRENT:
                has_kv[il] = il < n_layer and not is_recr[il]
            else:
                has_kv[il] = not is_recr[il]
            if il < n_layer:
                if filt is archs.HybridAttnFilter.NEMOTRON:
                    holds_rs[il] = is_recr[il] and n_ff[il] == 0
                else:
                    holds_rs[il] = is_recr[il]
    elif layout is archs.MemoryLayout.DSV4:
        has_kv = [True] * n_layer_all  # the raw cache has no layer filter (hparams_raw.n_layer_nextn = 0)
    elif layout in (archs.MemoryLayout.DSA, archs.MemoryLayout.DSA_ISWA, archs.MemoryLayout.MSA):
        # deepseek32/glm-dsa/dots3note: filter_mla keeps the trunk when there are NextN layers; hy_v4 and
        # minimax-m3 pass no filter
        trunk_only = arch not in ("hy_v4", "minimax-m3") and n_nextn > 0
        has_kv = [not trunk_only or il < n_layer for il in range(n_layer_all)]

    # -- indexer key caches (src/llama-model.cpp:create_memory filter_lid / filter_idx) -------------------------
    idx_head = meta.num("attention.indexer.key_length")
    idx_width = idx_head
    types = meta.key_or_arr("attention.indexer.types", n_layer, [-1] * n_layer) if n_layer else []

    def typed(il: int, default: bool) -> bool:
        t = types[il] if il < len(types) else -1
        return default if t == -1 else bool(t)

    for il in range(n_layer):
        if arch == "deepseek32":
            indexer[il] = True
        elif arch == "glm-dsa":
            indexer[il] = typed(il, archs.glm_dsa_default_indexer_full(il, meta.num("context_length")))
        elif arch == "hy_v4":
            indexer[il] = meta.num("attention.indexer.top_k") > 0 and typed(il, False)
        elif arch == "dots3note":
            indexer[il] = typed(il, False)
        elif arch == "minimax-m3":
            indexer[il] = il >= meta.num("leading_dense_block_count")
        elif arch == "glm5-next":
            indexer[il] = not is_recr[il] and typed(il, True)
        elif arch == "qwen4exp":
            indexer[il] = idx_head > 0 and not is_recr[il]
    ratios_v4 = meta.key_or_arr("attention.compress_ratios", n_layer_all, zeros) if arch == "deepseek4" else zeros
    if arch == "deepseek4":
        # src/llama-kv-cache-dsv4.cpp: the lightning indexer follows the CSA layers (over all n_layer_all layers)
        indexer = [r == archs.DSV4_CSA_RATIO for r in ratios_v4]
    if arch in archs.HYBRID_IDX_KPOOL_ROW:
        if arch == "glm5-next":
            kpool = meta.num("attention.indexer.kpool")
        else:  # models/qwen4exp.cpp: the one nonzero attention.compress_ratios value
            ratios = meta.key_or_arr("attention.compress_ratios", n_layer_all, zeros)
            kpool = max(ratios, default=0)
        if kpool > 0:
            idx_width = idx_head * archs.HYBRID_IDX_KPOOL_ROW[arch]

    # -- layers -------------------------------------------------------------------------------------------------
    exp_layers = {t.layer for t in tensors if t.role is TensorRole.EXPERTS and t.layer is not None}
    layers: list[LayerProfile] = []
    for il in range(n_layer_all):
        swa = is_swa[il]
        hk = head_k_swa if swa else head_k
        hv = head_v_swa if swa else head_v
        nextn = il >= n_layer and il != router_layer
        kv_source: int | None = None
        if nextn:
            kind = LayerKind.NEXTN
        elif layout is archs.MemoryLayout.NONE:
            kind = LayerKind.NONE
        elif kv_from_start >= 0 and il >= kv_from_start:
            kind = LayerKind.SHARED
            kv_source = kv_from_start - (2 if swa else 1)
        elif holds_rs[il] and has_kv[il]:
            kind = LayerKind.HYBRID
        elif holds_rs[il]:
            kind = LayerKind.RECURRENT
        elif has_kv[il] and n_head_kv[il] > 0:
            kind = LayerKind.MLA if is_mla else (LayerKind.SWA if swa else LayerKind.FULL)
        else:
            kind = LayerKind.NONE
        layers.append(
            LayerProfile(
                index=il,
                kind=kind,
                n_head=n_head[il],
                n_head_kv=n_head_kv[il],
                n_embd_head_k=hk,
                n_embd_head_v=hv,
                n_ff=n_ff[il],
                is_swa=swa,
                is_recurrent=holds_rs[il],
                has_kv=has_kv[il],
                kv_source=kv_source,
                is_moe=il in exp_layers,
                is_nextn=nextn,
                n_embd_r=n_embd_r if holds_rs[il] else 0,
                n_embd_s=n_embd_s if holds_rs[il] else 0,
                n_expert_used=n_expert_used[il],
                n_embd_p=ple_state if holds_rs[il] and il in ple_layers else 0,
                has_indexer=indexer[il],
                compress_ratio=ratios_v4[il],
            )
        )

    # -- MoE, rope, misc -----------------------------------------------------------------------------------------
    moe = None
    if n_expert > 0:
        n_ff_exp = meta.key_or_arr("expert_feed_forward_length", n_layer_all, zeros)
        moe = MoeParams(
            n_expert=n_expert,
            n_expert_used=max(n_expert_used, default=0),
            n_expert_shared=meta.num("expert_shared_count"),
            n_ff_exp=max(n_ff_exp, default=0),
            n_ff_shexp=meta.num("expert_shared_feed_forward_length"),
            n_layer_dense_lead=meta.num("leading_dense_block_count"),
            n_group_used=meta.num("expert_group_used_count"),
        )
    rope = RopeParams(
        dimension_count=n_rot,
        freq_base=meta.real("rope.freq_base", 10000.0),
        scaling_type=meta.text("rope.scaling.type"),
        scaling_factor=meta.real("rope.scaling.factor"),
        original_context_length=meta.num("rope.scaling.original_context_length"),
    )
    causal = False if arch in _NON_CAUSAL_ARCHS else meta.flag("attention.causal", True)
    n_embd_out = meta.num("embedding_length_out")
    if arch in ("deepseek4", "qwen4exp"):
        n_embd_out = meta.num("hyper_connection.count") * n_embd  # n_embd_out_impl = hc_mult * n_embd
    mix = _quant_mix(tensors)
    has_output = any(t.name == "output.weight" for t in tensors)
    warnings.extend(meta.warnings)
    return ModelProfile(
        path=h.source,
        shard_paths=tuple(x.source for x in headers),
        architecture=arch,
        name=h.get_str("general.name"),
        file_type=_file_type(h, mix),
        file_size=file_size,
        n_params=sum(t.n_elements for t in tensors),
        n_layer=n_layer,
        n_layer_all=n_layer_all,
        n_nextn=n_nextn,
        n_embd=n_embd,
        n_vocab=_n_vocab(meta, h, tensors),
        n_ctx_train=meta.num("context_length"),
        layers=tuple(layers),
        tensors=tensors,
        n_embd_out=n_embd_out,
        swa_type=swa_type,
        n_swa=n_swa,
        mla=mla,
        kv_lora_rank=kv_lora_rank,
        moe=moe,
        ssm=ssm,
        rope=rope,
        causal_attn=causal,
        has_encoder=arch in _ENCODER_ARCHS,
        pooling_type=meta.num("pooling_type"),
        has_memory=layout is not archs.MemoryLayout.NONE,
        tied_embeddings=not has_output and any(t.name == "token_embd.weight" for t in tensors),
        alignment=h.get_int("general.alignment", 32),
        verified_architecture=verified,
        quant_mix=mix,
        warnings=tuple(warnings),
        indexer_head_size=idx_width if any(indexer) else 0,
        indexer_top_k=meta.num("attention.indexer.top_k"),
    )
