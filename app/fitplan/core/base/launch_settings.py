"""LaunchSettings: the llama.cpp settings an estimate is for, with the defaults of the targeted build (515e85511).

Field names follow llama.cpp's `common_params`. Defaults are llama-server's unless a field says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FlashAttn(StrEnum):
    AUTO = "auto"
    ON = "on"
    OFF = "off"


class SplitMode(StrEnum):
    NONE = "none"
    LAYER = "layer"
    ROW = "row"
    TENSOR = "tensor"


class LoadMode(StrEnum):
    AUTO = "auto"
    NONE = "none"
    MMAP = "mmap"
    MLOCK = "mlock"
    MMAP_MLOCK = "mmap+mlock"
    DIO = "dio"


class Tool(StrEnum):
    """Which llama.cpp program runs the model: it decides the logits reservation (n_outputs_max)."""

    SERVER = "llama-server"
    CLI = "llama-cli"
    FIT_PARAMS = "llama-fit-params"


class Engine(StrEnum):
    """Which llama.cpp variant runs the model: it changes cache layouts, defaults and flag spellings."""

    LLAMA_CPP = "llama.cpp"  # mainline at the targeted commit
    IK_LLAMA = "ik_llama.cpp"
    BEELLAMA = "beellama"  # beellama.cpp with KVarN caches
    OLLAMA = "ollama"


class MmprojPlacement(StrEnum):
    GPU = "gpu"
    CPU = "cpu"
    NONE = "none"


#: Every -ctk/-ctv value mainline llama.cpp accepts (common/arg.cpp:kv_cache_types).
#: tools/server/server.cpp: -np auto means 4 slots with a unified KV cache.
SERVER_AUTO_PARALLEL = 4
KV_CACHE_TYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

#: Sentinels for n_gpu_layers.
NGL_AUTO = -1  # "auto": --fit decides (all layers when --fit is off)
NGL_ALL = -2  # "all"


@dataclass(frozen=True, slots=True)
class TensorOverride:
    """One `-ot PATTERN=BUFT` entry: tensors whose name matches `pattern` (std::regex_search) go to `buffer_type`."""

    pattern: str
    buffer_type: str  # "CPU", "CUDA0", ...


@dataclass(frozen=True, slots=True)
class DraftSettings:
    model_path: str
    n_gpu_layers: int = NGL_AUTO  # -ngld
    cache_type_k: str = "f16"  # -ctkd
    cache_type_v: str = "f16"  # -ctvd
    n_max: int = 3  # --spec-draft-n-max


@dataclass(frozen=True, slots=True)
class LaunchSettings:
    n_ctx: int = 0  # -c; 0 = the model's training context
    n_parallel: int = -1  # -np; -1 = server auto: 4 slots with a unified KV cache
    kv_unified: bool | None = (
        None  # -kvu / -no-kvu; None = the program's default (server: on when -np is auto)
    )
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: FlashAttn = FlashAttn.AUTO
    n_batch: int = 2048  # -b
    n_ubatch: int = 512  # -ub
    n_gpu_layers: int = NGL_AUTO  # -ngl: N, NGL_AUTO or NGL_ALL
    n_cpu_moe: int = 0  # --n-cpu-moe N: expert tensors of the first N layers on the CPU
    cpu_moe: bool = False  # --cpu-moe: all expert tensors on the CPU
    tensor_overrides: tuple[TensorOverride, ...] = ()  # -ot, in order; the first match wins
    split_mode: SplitMode = SplitMode.LAYER
    tensor_split: tuple[float, ...] = ()  # -ts; empty = by free memory
    main_gpu: int = 0
    devices: tuple[str, ...] | None = None  # -dev; None = all GPUs, () = none ("-dev none")
    swa_full: bool = False
    load_mode: LoadMode = LoadMode.AUTO
    no_kv_offload: bool = False  # -nkvo
    op_offload: bool = True
    repack: bool = True
    no_host: bool = False
    mmproj_path: str | None = None
    mmproj: MmprojPlacement = MmprojPlacement.GPU
    mmproj_auto: bool = (
        True  # --mmproj-auto / --no-mmproj: -hf also downloads and loads the repository's projector
    )
    image_min_tokens: int = -1  # --image-min-tokens: an image's fewest tokens (<= 0: the projector's)
    image_max_tokens: int = -1  # --image-max-tokens: an image's most tokens (<= 0: the projector's)
    draft: DraftSettings | None = None
    tool: Tool = Tool.SERVER
    cache_ram_mib: int = 8192  # --cache-ram
    ctx_checkpoints: int = 32  # --ctx-checkpoints, per slot
    fit: bool = True  # --fit on|off
    fit_target_mib: tuple[int, ...] = (1024,)  # --fit-target, per device
    embedding: bool = False
    reranking: bool = False  # --reranking: common/arg.cpp sets embedding and the rank pooling
    spec_types: tuple[str, ...] = ()  # --spec-type values ("draft-mtp", "draft-eagle3", "ngram-simple", ...)
    spec_draft_n_max: int = 3  # --spec-draft-n-max when no DraftSettings carries it
    engine: Engine = Engine.LLAMA_CPP
    # ik_llama.cpp only
    mla_mode: int = 3  # -mla 0/1/2/3
    attn_max_batch_mib: int = 0  # -amb N (MiB); 0 = no cap
    fused_moe: bool = True  # -fmoe / -no-fmoe
    run_time_repack: bool = False  # -rtr (forces weights into anonymous RAM)
    # beellama.cpp only
    kv_tail_tokens: int = 0  # --kv-tail-tokens (0 = the intrinsic 128-token tail for KVarN caches)
    kv_tail_type: str = ""  # --kv-tail-type; "" = f16 for KVarN caches, bf16 for standard ones
    kv_tail_tokens_swa: int = -1  # --kv-tail-tokens full=N,swa=M: M; -1 = the same as kv_tail_tokens
    cache_type_k_swa: str = ""  # --cache-type-k-swa (kvarnN) for SWA layers; "" = cache_type_k
    cache_type_v_swa: str = ""  # --cache-type-v-swa; "" = cache_type_v
    # an MTP draft context (--spec-type draft-mtp without a draft model): its -ctkd / -ctvd
    mtp_cache_type_k: str = "f16"
    mtp_cache_type_v: str = "f16"
    # ollama only: OLLAMA_GPU_OVERHEAD in bytes (reserved per GPU)
    gpu_overhead_bytes: int = 0
    # LoRA adapters: --lora FNAME items and --lora-scaled FNAME:SCALE items, as given
    lora: tuple[str, ...] = ()
    lora_scaled: tuple[str, ...] = ()
    kv_unified_per_slot: int = (
        0  # --kv-unified-per-slot N: llama-server sizes the KV pool n_parallel * N without -c
    )
    # context extension: --rope-scaling, --rope-scale N (frequency scale 1/N), --rope-freq-scale, --yarn-orig-ctx
    rope_scaling: str = ""  # "" = the model's own (none, linear, yarn)
    rope_scale: float = 0.0
    rope_freq_scale: float = 0.0
    yarn_orig_ctx: int = 0

    @property
    def lora_paths(self) -> tuple[str, ...]:
        """Every adapter file, --lora ones first, then --lora-scaled ones (their scale does not change memory)."""
        return (*self.lora, *(item.rsplit(":", 1)[0] for item in self.lora_scaled))
