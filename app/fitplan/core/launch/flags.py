"""Parse llama-server's own flag spellings into LaunchSettings.

The flag names and arities come from llama.cpp's `common/arg.cpp` of the targeted build (515e85511). Flags that
change memory are mapped onto `LaunchSettings`; every other flag llama.cpp knows is accepted, its values consumed,
and reported as ignored. Anything else raises `FlagError`.

`MEMORY_FLAGS` is the single table of spellings: the command builder imports it to write flags back.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fitplan.core import engines
from fitplan.core.base.errors import FlagError
from fitplan.core.base.launch_settings import (
    NGL_ALL,
    NGL_AUTO,
    DraftSettings,
    Engine,
    FlashAttn,
    LaunchSettings,
    LoadMode,
    MmprojPlacement,
    SplitMode,
    TensorOverride,
)

#: `common.h:LLM_FFN_DENSE_REGEX`: what `--n-cpu-ffn N` moves to the CPU (per layer).
FFN_DENSE_REGEX = r"\.ffn_(up|down|gate)\."
FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


@dataclass(frozen=True, slots=True)
class FlagSpec:
    key: str  # the LaunchSettings field (or pseudo-field) it sets
    names: tuple[str, ...]  # every spelling llama-server accepts; the first is the one fitplan writes
    takes_value: bool

    @property
    def short(self) -> str:
        return self.names[0]


#: The flags that change memory, with every spelling arg.cpp registers.
MEMORY_FLAGS: tuple[FlagSpec, ...] = (
    FlagSpec("model", ("-m", "--model"), True),
    FlagSpec("n_ctx", ("-c", "--ctx-size"), True),
    FlagSpec("n_parallel", ("-np", "--parallel"), True),
    FlagSpec("kv_unified", ("-kvu", "--kv-unified"), False),
    FlagSpec("no_kv_unified", ("-no-kvu", "--no-kv-unified"), False),
    FlagSpec("cache_type_k", ("-ctk", "--cache-type-k"), True),
    FlagSpec("cache_type_v", ("-ctv", "--cache-type-v"), True),
    FlagSpec("flash_attn", ("-fa", "--flash-attn"), True),
    FlagSpec("n_batch", ("-b", "--batch-size"), True),
    FlagSpec("n_ubatch", ("-ub", "--ubatch-size"), True),
    FlagSpec("n_gpu_layers", ("-ngl", "--gpu-layers", "--n-gpu-layers"), True),
    FlagSpec("n_cpu_moe", ("-ncmoe", "--n-cpu-moe"), True),
    FlagSpec("cpu_moe", ("-cmoe", "--cpu-moe"), False),
    FlagSpec("n_cpu_ffn", ("-ncffn", "--n-cpu-ffn"), True),
    FlagSpec("tensor_overrides", ("-ot", "--override-tensor"), True),
    FlagSpec("tensor_split", ("-ts", "--tensor-split"), True),
    FlagSpec("split_mode", ("-sm", "--split-mode"), True),
    FlagSpec("main_gpu", ("-mg", "--main-gpu"), True),
    FlagSpec("devices", ("-dev", "--device"), True),
    FlagSpec("rpc", ("--rpc",), True),
    FlagSpec("swa_full", ("--swa-full",), False),
    FlagSpec("load_mode", ("-lm", "--load-mode"), True),
    FlagSpec("no_kv_offload", ("-nkvo", "--no-kv-offload"), False),
    FlagSpec("kv_offload", ("-kvo", "--kv-offload"), False),
    FlagSpec("no_op_offload", ("--no-op-offload",), False),
    FlagSpec("op_offload", ("--op-offload",), False),
    FlagSpec("no_repack", ("-nr", "--no-repack"), False),
    FlagSpec("repack", ("--repack",), False),
    FlagSpec("no_host", ("--no-host",), False),
    FlagSpec("mmproj_path", ("-mm", "--mmproj"), True),
    FlagSpec("no_mmproj_offload", ("--no-mmproj-offload",), False),
    FlagSpec("mmproj_offload", ("--mmproj-offload",), False),
    FlagSpec("draft_model", ("-md", "--model-draft", "--spec-draft-model"), True),
    FlagSpec("draft_ngl", ("-ngld", "--gpu-layers-draft", "--spec-draft-ngl", "--n-gpu-layers-draft"), True),
    FlagSpec("draft_type_k", ("-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"), True),
    FlagSpec("draft_type_v", ("-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"), True),
    FlagSpec("draft_n_max", ("--spec-draft-n-max",), True),
    FlagSpec("spec_types", ("--spec-type",), True),
    FlagSpec("cache_ram_mib", ("-cram", "--cache-ram"), True),
    FlagSpec("ctx_checkpoints", ("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"), True),
    FlagSpec("fit", ("-fit", "--fit"), True),
    FlagSpec("fit_target_mib", ("-fitt", "--fit-target"), True),
    FlagSpec("embedding", ("--embedding", "--embeddings"), False),
)

#: key -> spec, and every spelling -> spec.
FLAG_BY_KEY: dict[str, FlagSpec] = {f.key: f for f in MEMORY_FLAGS}
_BY_NAME: dict[str, FlagSpec] = {n: f for f in MEMORY_FLAGS for n in f.names}

#: The flags only one engine has (`--engine` selects it), with every spelling that engine registers.
#: ik_llama.cpp: common/common.cpp; beellama.cpp: docs/beellama-args.md; ollama: its environment variables and
#: Modelfile parameters, spelled as flags (`--num-ctx` = PARAMETER num_ctx, `--gpu-overhead` = OLLAMA_GPU_OVERHEAD).
ENGINE_FLAGS: tuple[tuple[Engine, FlagSpec], ...] = (
    (Engine.IK_LLAMA, FlagSpec("mla_mode", ("-mla", "--mla-use"), True)),
    (Engine.IK_LLAMA, FlagSpec("attn_max_batch_mib", ("-amb", "--attention-max-batch"), True)),
    (Engine.IK_LLAMA, FlagSpec("fused_moe", ("-fmoe", "--fused-moe"), False)),
    (Engine.IK_LLAMA, FlagSpec("no_fused_moe", ("-no-fmoe", "--no-fused-moe"), False)),
    (Engine.IK_LLAMA, FlagSpec("run_time_repack", ("-rtr", "--run-time-repack"), False)),
    (Engine.IK_LLAMA, FlagSpec("no_flash_attn", ("-no-fa", "--no-flash-attn"), False)),
    (Engine.IK_LLAMA, FlagSpec("no_mmap", ("--no-mmap",), False)),
    (Engine.IK_LLAMA, FlagSpec("mlock", ("--mlock",), False)),
    (Engine.BEELLAMA, FlagSpec("kv_tail_tokens", ("--kv-tail-tokens",), True)),
    (Engine.BEELLAMA, FlagSpec("kv_tail_type", ("--kv-tail-type",), True)),
    (Engine.BEELLAMA, FlagSpec("cache_type_k_swa", ("--cache-type-k-swa",), True)),
    (Engine.BEELLAMA, FlagSpec("cache_type_v_swa", ("--cache-type-v-swa",), True)),
    (Engine.OLLAMA, FlagSpec("ollama_num_ctx", ("--num-ctx",), True)),
    (Engine.OLLAMA, FlagSpec("ollama_num_parallel", ("--num-parallel",), True)),
    (Engine.OLLAMA, FlagSpec("ollama_kv_cache_type", ("--kv-cache-type",), True)),
    (Engine.OLLAMA, FlagSpec("ollama_flash_attention", ("--flash-attention",), True)),
    (Engine.OLLAMA, FlagSpec("gpu_overhead_bytes", ("--gpu-overhead",), True)),
    (Engine.OLLAMA, FlagSpec("ollama_num_gpu", ("--num-gpu",), True)),
    (Engine.OLLAMA, FlagSpec("ollama_num_batch", ("--num-batch",), True)),
)
_ENGINE_BY_NAME: dict[str, tuple[Engine, FlagSpec]] = {n: (e, f) for e, f in ENGINE_FLAGS for n in f.names}

#: The environment variables ollama reads that change memory, and the flag each is the same as.
OLLAMA_ENV: dict[str, str] = {
    "OLLAMA_CONTEXT_LENGTH": "ollama_num_ctx",
    "OLLAMA_NUM_PARALLEL": "ollama_num_parallel",
    "OLLAMA_KV_CACHE_TYPE": "ollama_kv_cache_type",
    "OLLAMA_FLASH_ATTENTION": "ollama_flash_attention",
    "OLLAMA_GPU_OVERHEAD": "gpu_overhead_bytes",
}
_OLLAMA_ASSIGN = re.compile(r"(OLLAMA_[A-Z0-9_]+)=(.*)", re.S)

ENGINE_FLAG = "--engine"

#: Flags llama.cpp accepts that change memory in ways this version does not model; accepted, reported as ignored.
UNMODELLED_MEMORY_FLAGS: frozenset[str] = frozenset(
    {
        "-otd", "--override-tensor-draft", "--spec-draft-override-tensor", "-cmoed",
        "--cpu-moe-draft", "--spec-draft-cpu-moe", "-ncmoed", "--n-cpu-moe-draft", "--spec-draft-n-cpu-moe",
        "--spec-draft-ncmoe", "-devd", "--device-draft", "--spec-draft-device", "-bs", "--backend-sampling",
        "--kv-unified-per-slot", "-lzm", "--lazy-mode", "-mmdev", "--mmproj-device", "--image-min-tokens",
        "--image-max-tokens", "--mtmd-batch-max-tokens", "--lora", "--lora-scaled", "-fitc", "--fit-ctx",
    }
)  # fmt: skip

# Every other flag common/arg.cpp registers, with how many values it takes (generated from arg.cpp).
_IGNORED_ARITY: dict[str, int] = {
    "-h": 0, "--help": 0, "--usage": 0, "--version": 0, "-cl": 0, "--cache-list": 0, "--completion-bash": 0,
    "--server-base": 1, "--verbose-prompt": 0, "--display-prompt": 0, "--no-display-prompt": 0, "-co": 1,
    "--color": 1, "-t": 1, "--threads": 1, "-tb": 1, "--threads-batch": 1, "-C": 1, "--cpu-mask": 1,
    "-Cr": 1, "--cpu-range": 1, "--cpu-strict": 1, "--prio": 1, "--poll": 1, "-Cb": 1,
    "--cpu-mask-batch": 1, "-Crb": 1, "--cpu-range-batch": 1, "--cpu-strict-batch": 1, "--prio-batch": 1,
    "--poll-batch": 1, "-lcs": 1, "--lookup-cache-static": 1, "-lcd": 1, "--lookup-cache-dynamic": 1,
    "--kv-unified-per-slot": 1, "-n": 1, "--predict": 1, "--n-predict": 1, "--keep": 1, "-cms": 1,
    "--checkpoint-min-step": 1, "--cache-idle-slots": 0, "--no-cache-idle-slots": 0, "--context-shift": 0,
    "--no-context-shift": 0, "--chunks": 1, "-p": 1, "--prompt": 1, "-sys": 1, "--system-prompt": 1,
    "--perf": 0, "--no-perf": 0, "--show-timings": 0, "--no-show-timings": 0, "-f": 1, "--file": 1,
    "-sysf": 1, "--system-prompt-file": 1, "--in-file": 1, "-bf": 1, "--binary-file": 1, "-e": 0,
    "--escape": 0, "--no-escape": 0, "-ptc": 1, "--print-token-count": 1, "--prompt-cache": 1,
    "--prompt-cache-all": 0, "--prompt-cache-ro": 0, "-r": 1, "--reverse-prompt": 1, "-sp": 0,
    "--special": 0, "-cnv": 0, "--conversation": 0, "-no-cnv": 0, "--no-conversation": 0, "-st": 0,
    "--single-turn": 0, "-i": 0, "--interactive": 0, "-if": 0, "--interactive-first": 0, "-mli": 0,
    "--multiline-input": 0, "--in-prefix-bos": 0, "--in-prefix": 1, "--in-suffix": 1, "--warmup": 0,
    "--no-warmup": 0, "--spm-infill": 0, "--samplers": 1, "-s": 1, "--seed": 1, "--sampler-seq": 1,
    "--sampling-seq": 1, "--ignore-eos": 0, "--temp": 1, "--temperature": 1, "--top-k": 1, "--top-p": 1,
    "--min-p": 1, "--top-nsigma": 1, "--top-n-sigma": 1, "--xtc-probability": 1, "--xtc-threshold": 1,
    "--typical": 1, "--typical-p": 1, "--repeat-last-n": 1, "--repeat-penalty": 1, "--presence-penalty": 1,
    "--frequency-penalty": 1, "--dry-multiplier": 1, "--dry-base": 1, "--dry-allowed-length": 1,
    "--dry-penalty-last-n": 1, "--dry-sequence-breaker": 1, "--adaptive-target": 1, "--adaptive-decay": 1,
    "--dynatemp-range": 1, "--dynatemp-exp": 1, "--mirostat": 1, "--mirostat-lr": 1, "--mirostat-ent": 1,
    "-l": 1, "--logit-bias": 1, "--grammar": 1, "--grammar-file": 1, "-j": 1, "--json-schema": 1, "-jf": 1,
    "--json-schema-file": 1, "-bs": 0, "--backend-sampling": 0, "--pooling": 1, "--attention": 1,
    "--rope-scaling": 1, "--rope-scale": 1, "--rope-freq-base": 1, "--rope-freq-scale": 1,
    "--yarn-orig-ctx": 1, "--yarn-ext-factor": 1, "--yarn-attn-factor": 1, "--yarn-beta-slow": 1,
    "--yarn-beta-fast": 1, "-gan": 1, "--grp-attn-n": 1, "-gaw": 1, "--grp-attn-w": 1, "--hellaswag": 0,
    "--hellaswag-tasks": 1, "--winogrande": 0, "--winogrande-tasks": 1, "--multiple-choice": 0,
    "--multiple-choice-tasks": 1, "--kl-divergence": 0, "--save-all-logits": 1, "--kl-divergence-base": 1,
    "--ppl-stride": 1, "--ppl-output-type": 1, "-dt": 1, "--defrag-thold": 1, "-ns": 1, "--sequences": 1,
    "-cb": 0, "--cont-batching": 0, "-nocb": 0, "--no-cont-batching": 0, "-mmu": 1, "--mmproj-url": 1,
    "--mmproj-auto": 0, "--no-mmproj": 0, "--no-mmproj-auto": 0, "-mmdev": 1, "--mmproj-device": 1,
    "--image": 1, "--audio": 1, "--video": 1, "--image-min-tokens": 1, "--image-max-tokens": 1,
    "--mtmd-batch-max-tokens": 1, "--video-fps": 1, "--video-timestamp-interval": 1,
    "--video-ffmpeg-dir": 1, "-lzm": 1, "--lazy-mode": 1, "--numa": 1, "--list-devices": 0, "-fitp": 1,
    "--fit-print": 1, "-fitc": 1, "--fit-ctx": 1, "--check-tensors": 0, "--override-kv": 1, "--lora": 1,
    "--lora-scaled": 1, "--control-vector": 1, "--control-vector-scaled": 1,
    "--control-vector-layer-range": 2, "-a": 1, "--alias": 1, "--tags": 1, "-mu": 1, "--model-url": 1,
    "-dr": 1, "--docker-repo": 1, "-hf": 1, "-hfr": 1, "--hf-repo": 1, "-hff": 1, "--hf-file": 1, "-hft": 1,
    "--hf-token": 1, "--mtp": 0, "--dflash": 0, "--eagle3": 0, "--context-file": 1, "--chunk-size": 1,
    "--chunk-separator": 1, "--junk": 1, "--pos": 1, "-o": 1, "--output": 1, "--output-file": 1,
    "-ofreq": 1, "--output-frequency": 1, "--output-format": 1, "--save-frequency": 1,
    "--process-output": 0, "--nextn": 0, "--ppl": 0, "--no-ppl": 0, "--chunk": 1, "--from-chunk": 1,
    "--show-statistics": 0, "--parse-special": 0, "--ids": 0, "--stdin": 0, "--no-bos": 0,
    "--no-parse-special": 0, "--show-count": 0, "-pps": 0, "-tgs": 0, "-npp": 1, "-ntg": 1, "-npl": 1,
    "--embd-normalize": 1, "--embd-output-format": 1, "--embd-separator": 1, "--cls-separator": 1,
    "--host": 1, "--port": 1, "--reuse-port": 0, "--path": 1, "--cors-origins": 1, "--cors-methods": 1,
    "--cors-headers": 1, "--cors-credentials": 0, "--no-cors-credentials": 0, "--api-prefix": 1,
    "--ui-config": 1, "--webui-config": 1, "--ui-config-file": 1, "--webui-config-file": 1,
    "--ui-mcp-proxy": 0, "--webui-mcp-proxy": 0, "--no-ui-mcp-proxy": 0, "--no-webui-mcp-proxy": 0,
    "--tools": 1, "--tools-runtime": 1, "--mcp-servers-config": 1, "--mcp-servers-json": 1, "-ag": 0,
    "--agent": 0, "-no-ag": 0, "--no-agent": 0, "--ui": 0, "--webui": 0, "--no-ui": 0, "--no-webui": 0,
    "--rerank": 0, "--reranking": 0, "--api-key": 1, "--api-key-file": 1, "--ssl-key-file": 1,
    "--ssl-cert-file": 1, "--chat-template-kwargs": 1, "-to": 1, "--timeout": 1, "--sse-ping-interval": 1,
    "--threads-http": 1, "--cache-prompt": 0, "--no-cache-prompt": 0, "--cache-reuse": 1, "--metrics": 0,
    "--props": 0, "--slots": 0, "--no-slots": 0, "--slot-save-path": 1, "--media-path": 1,
    "--models-dir": 1, "--models-preset": 1, "--models-max": 1, "--models-autoload": 0,
    "--no-models-autoload": 0, "--jinja": 0, "--no-jinja": 0, "--reasoning-format": 1, "-rea": 1,
    "--reasoning": 1, "--reasoning-effort": 1, "--reasoning-budget": 1, "--reasoning-budget-message": 1,
    "--reasoning-preserve": 0, "--no-reasoning-preserve": 0, "--chat-template": 1,
    "--chat-template-file": 1, "--skip-chat-parsing": 0, "--no-skip-chat-parsing": 0,
    "--prefill-assistant": 0, "--no-prefill-assistant": 0, "-sps": 1, "--slot-prompt-similarity": 1,
    "--lora-init-without-apply": 0, "--sleep-idle-seconds": 1, "--simple-io": 0, "--positive-file": 1,
    "--negative-file": 1, "--pca-batch": 1, "--pca-iter": 1, "--method": 1,
    "--log-disable": 0, "--log-file": 1, "--log-jsonl": 0, "--no-log-jsonl": 0, "--log-prompts-dir": 1,
    "--log-colors": 1, "-v": 0, "--verbose": 0, "--log-verbose": 0, "--offline": 0, "-lv": 1,
    "--verbosity": 1, "--log-verbosity": 1, "--log-prefix": 0, "--no-log-prefix": 0, "--log-timestamps": 0,
    "--no-log-timestamps": 0, "--spec-draft-hf": 1, "-hfd": 1, "-hfrd": 1, "--hf-repo-draft": 1,
    "--spec-draft-threads": 1, "-td": 1, "--threads-draft": 1, "--spec-draft-threads-batch": 1, "-tbd": 1,
    "--threads-batch-draft": 1, "--spec-draft-cpu-mask": 1, "-Cd": 1, "--cpu-mask-draft": 1,
    "--spec-draft-cpu-range": 1, "-Crd": 1, "--cpu-range-draft": 1, "--spec-draft-cpu-strict": 1,
    "--cpu-strict-draft": 1, "--spec-draft-prio": 1, "--prio-draft": 1, "--spec-draft-poll": 1,
    "--poll-draft": 1, "--spec-draft-cpu-mask-batch": 1, "-Cbd": 1, "--cpu-mask-batch-draft": 1,
    "--spec-draft-cpu-range-batch": 1, "-Crbd": 1, "--cpu-range-batch-draft": 1,
    "--spec-draft-cpu-strict-batch": 1, "--cpu-strict-batch-draft": 1, "--spec-draft-prio-batch": 1,
    "--prio-batch-draft": 1, "--spec-draft-poll-batch": 1, "--poll-batch-draft": 1,
    "--spec-draft-override-tensor": 1, "-otd": 1, "--override-tensor-draft": 1, "--spec-draft-cpu-moe": 0,
    "-cmoed": 0, "--cpu-moe-draft": 0, "--spec-draft-n-cpu-moe": 1, "--spec-draft-ncmoe": 1, "-ncmoed": 1,
    "--n-cpu-moe-draft": 1, "--spec-draft-n-min": 1, "--spec-synth-len": 1, "--spec-synth-rates": 1,
    "--spec-draft-p-split": 1, "--draft-p-split": 1, "--spec-draft-p-min": 1, "--draft-p-min": 1,
    "--spec-draft-backend-sampling": 0, "--no-spec-draft-backend-sampling": 0, "--spec-draft-sampling": 1,
    "--spec-draft-device": 1, "-devd": 1, "--device-draft": 1,
    "--spec-ngram-mod-n-min": 1, "--spec-ngram-mod-n-max": 1, "--spec-ngram-mod-n-match": 1,
    "--spec-ngram-simple-size-n": 1, "--spec-ngram-simple-size-m": 1, "--spec-ngram-simple-min-hits": 1,
    "--spec-ngram-map-k-size-n": 1, "--spec-ngram-map-k-size-m": 1, "--spec-ngram-map-k-min-hits": 1,
    "--spec-ngram-map-k4v-size-n": 1, "--spec-ngram-map-k4v-size-m": 1, "--spec-ngram-map-k4v-min-hits": 1,
    "--draft": 1, "--draft-n": 1, "--draft-max": 1, "--draft-min": 1, "--draft-n-min": 1,
    "--spec-ngram-size-n": 1, "--spec-ngram-size-m": 1, "--spec-ngram-min-hits": 1, "--tts-lang": 1,
    "--tts-speaker-file": 1, "--diffusion-steps": 1, "--diffusion-visual": 0, "--diffusion-eps": 1,
    "--diffusion-algorithm": 1, "--diffusion-alg-temp": 1, "--diffusion-block-length": 1,
    "--diffusion-cfg-scale": 1, "--diffusion-add-gumbel-noise": 1, "-lr": 1, "--learning-rate": 1,
    "-lr-min": 1, "--learning-rate-min": 1, "-decay-epochs": 1, "--learning-rate-decay-epochs": 1, "-wd": 1,
    "--weight-decay": 1, "-val-split": 1, "--val-split": 1, "-epochs": 1, "--epochs": 1, "-opt": 1,
    "--optimizer": 1, "--check": 0, "--save-logits": 0, "--logits-output-dir": 1, "--tensor-filter": 1,
    "--embd-gemma-default": 0, "--fim-qwen-1.5b-default": 0, "--fim-qwen-3b-default": 0,
    "--fim-qwen-7b-default": 0, "--fim-qwen-7b-spec": 0, "--fim-qwen-14b-spec": 0,
    "--fim-qwen-30b-default": 0, "--gpt-oss-20b-default": 0, "--gpt-oss-120b-default": 0,
    "--vision-gemma-4b-default": 0, "--vision-gemma-12b-default": 0, "--spec-default": 0,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ParsedFlags:
    settings: LaunchSettings
    model_path: str | None
    ignored: tuple[str, ...] = ()  # flags accepted and not affecting the estimate (with their values)
    rpc_servers: tuple[str, ...] = ()  # --rpc host:port,...
    unmodelled: tuple[str, ...] = ()  # accepted flags that do change memory but are not modelled


_TRUTHY = {"on", "enabled", "true", "1"}
_FALSEY = {"off", "disabled", "false", "0"}


def _int(flag: str, value: str) -> int:
    try:
        return int(value, 10)
    except ValueError:
        raise FlagError(f"{flag}: expected an integer, got {value!r}") from None


def _choice(flag: str, value: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise FlagError(f"{flag}: {value!r} is not one of {', '.join(choices)}")
    return value


def _split_list(value: str) -> list[str]:
    return [p for p in re.split(r"[,/]+", value) if p]


def _ngl(flag: str, value: str) -> int:
    if value == "auto":
        return NGL_AUTO
    if value == "all":
        return NGL_ALL
    n = _int(flag, value)
    return n if n >= 0 else NGL_AUTO


def _overrides(flag: str, value: str) -> list[TensorOverride]:
    out = []
    for item in value.split(","):
        if "=" not in item:
            raise FlagError(f"{flag}: {item!r} is not PATTERN=BUFFER_TYPE")
        pat, buft = item.split("=", 1)
        try:
            re.compile(pat)
        except re.error as exc:
            raise FlagError(f"{flag}: bad regular expression {pat!r}: {exc}") from None
        out.append(TensorOverride(pat, buft))
    return out


def parse_engine(value: str) -> Engine:
    """An `--engine` value: llama.cpp, ik_llama.cpp, beellama or ollama (a few common aliases accepted)."""
    aliases = {
        "mainline": "llama.cpp",
        "llamacpp": "llama.cpp",
        "ik": "ik_llama.cpp",
        "ik_llama": "ik_llama.cpp",
        "beellama.cpp": "beellama",
    }
    v = aliases.get(value.lower(), value.lower())
    try:
        return Engine(v)
    except ValueError:
        raise FlagError(f"--engine: {value!r} is not one of {', '.join(e.value for e in Engine)}") from None


def _find_engine(args: Sequence[str]) -> Engine | None:
    found: Engine | None = None
    for i, a in enumerate(args):
        if a == ENGINE_FLAG:
            if i + 1 >= len(args):
                raise FlagError("--engine: missing value")
            found = parse_engine(args[i + 1])
        elif a.startswith(ENGINE_FLAG + "="):
            found = parse_engine(a.split("=", 1)[1])
    return found


def parse_flags(
    argv: Sequence[str], base: LaunchSettings | None = None, engine: Engine | None = None
) -> ParsedFlags:
    """Parse llama-server arguments (without the program name) into settings.

    The engine is `--engine` in `argv`, else `engine`, else the base's. Choosing an engine other than the base's
    starts from that engine's defaults (`fitplan.core.engines.engine_base_settings`); the engine's own flags are
    accepted only when it is selected.
    """
    chosen = _find_engine(argv) or engine
    s = base or LaunchSettings()
    if chosen is not None and (base is None or chosen is not base.engine):
        s = engines.engine_base_settings(chosen, s)
    eng = s.engine
    upd: dict[str, object] = {}
    ollama: dict[str, str] = {}
    overrides: list[TensorOverride] = list(s.tensor_overrides)
    cpu_ffn: list[TensorOverride] = []
    model: str | None = None
    ignored: list[str] = []
    unmodelled: list[str] = []
    rpc: list[str] = []
    draft: dict[str, object] = {}
    args = list(argv)
    i = 0

    def take(flag: str) -> str:
        nonlocal i
        if i >= len(args):
            raise FlagError(f"{flag}: missing value")
        v = args[i]
        i += 1
        return v

    while i < len(args):
        raw = args[i]
        i += 1
        flag, inline = raw, None
        if raw.startswith("--") and "=" in raw:
            flag, inline = raw.split("=", 1)
        if flag == ENGINE_FLAG:
            if inline is None:
                take(flag)
            continue
        m = _OLLAMA_ASSIGN.fullmatch(raw)
        if m is not None:
            if eng is not Engine.OLLAMA:
                raise FlagError(f"{m.group(1)} is an environment variable of ollama: add --engine ollama")
            key = OLLAMA_ENV.get(m.group(1))
            if key is None:
                ignored.append(raw)
            else:
                ollama[key] = m.group(2)
            continue
        fork = _ENGINE_BY_NAME.get(flag)
        if fork is not None:
            owner, fspec = fork
            if owner is not eng:
                raise FlagError(
                    f"{flag} is a flag of {owner.value} only: add --engine {owner.value} (engine now: {eng.value})"
                )
            fv = "" if not fspec.takes_value else (inline if inline is not None else take(flag))
            if owner is Engine.OLLAMA:
                ollama[fspec.key] = fv
            else:
                _apply_fork(fspec.key, flag, fv, upd)
            continue
        spec = _BY_NAME.get(flag)
        if spec is None:
            if flag in _IGNORED_ARITY:
                n = _IGNORED_ARITY[flag]
                vals = [inline] if inline is not None else [take(flag) for _ in range(n)]
                item = " ".join([flag, *[v for v in vals if v is not None]])
                (unmodelled if flag in UNMODELLED_MEMORY_FLAGS else ignored).append(item)
                continue
            raise FlagError(f"unknown flag {flag!r}: not a llama-server flag of llama.cpp build 11434")
        v = "" if not spec.takes_value else (inline if inline is not None else take(flag))
        _apply(spec.key, flag, v, upd, overrides, cpu_ffn, rpc, draft, eng)
        if spec.key == "model":
            model = v

    if ollama:
        _apply_ollama(ollama, upd, s)
    if "draft_model" not in draft:
        # an MTP draft context (no draft model) takes -ctkd / -ctvd
        if "draft_type_k" in draft:
            upd["mtp_cache_type_k"] = draft["draft_type_k"]
        if "draft_type_v" in draft:
            upd["mtp_cache_type_v"] = draft["draft_type_v"]
    overrides.extend(cpu_ffn)
    upd["tensor_overrides"] = tuple(overrides)
    if "draft_model" in draft:
        upd["draft"] = DraftSettings(
            model_path=str(draft["draft_model"]),
            n_gpu_layers=int(str(draft.get("draft_ngl", NGL_AUTO))),
            cache_type_k=str(draft.get("draft_type_k", "f16")),
            cache_type_v=str(draft.get("draft_type_v", "f16")),
            n_max=int(str(draft.get("draft_n_max", 3))),
        )
    settings = dataclasses.replace(s, **upd)  # type: ignore[arg-type]
    return ParsedFlags(settings, model, tuple(ignored), tuple(rpc), tuple(unmodelled))


def _apply(
    key: str,
    flag: str,
    v: str,
    upd: dict[str, object],
    overrides: list[TensorOverride],
    cpu_ffn: list[TensorOverride],
    rpc: list[str],
    draft: dict[str, object],
    engine: Engine = Engine.LLAMA_CPP,
) -> None:
    simple_int: dict[str, Callable[[str], object]] = {
        "n_ctx": lambda x: max(0, _int(flag, x)),
        "n_parallel": lambda x: _int(flag, x),
        "n_batch": lambda x: _int(flag, x),
        "n_ubatch": lambda x: _int(flag, x),
        "main_gpu": lambda x: _int(flag, x),
        "cache_ram_mib": lambda x: _int(flag, x),
        "ctx_checkpoints": lambda x: _int(flag, x),
    }
    if key in simple_int:
        upd[key] = simple_int[key](v)
    elif key == "model":
        pass
    elif key == "kv_unified":
        upd["kv_unified"] = True
    elif key == "no_kv_unified":
        upd["kv_unified"] = False
    elif key in ("cache_type_k", "cache_type_v"):
        upd[key] = cache_type_choice(flag, v, engine)
    elif key == "flash_attn":
        lv = v.lower()
        if lv in _TRUTHY:
            upd[key] = FlashAttn.ON
        elif lv in _FALSEY:
            upd[key] = FlashAttn.OFF
        elif lv == "auto":
            upd[key] = FlashAttn.AUTO
        else:
            raise FlagError(f"{flag}: unknown value {v!r} (on, off or auto)")
    elif key == "n_gpu_layers":
        upd[key] = _ngl(flag, v)
    elif key == "n_cpu_moe":
        n = _int(flag, v)
        if n < 0:
            raise FlagError(f"{flag}: must be >= 0")
        upd[key] = n
    elif key == "cpu_moe":
        upd[key] = True
    elif key == "n_cpu_ffn":
        n = _int(flag, v)
        if n < 0:
            raise FlagError(f"{flag}: must be >= 0")
        cpu_ffn.extend(TensorOverride(f"blk\\.{k}{FFN_DENSE_REGEX}", "CPU") for k in range(n))
    elif key == "tensor_overrides":
        overrides.extend(_overrides(flag, v))
    elif key == "tensor_split":
        try:
            upd[key] = tuple(float(x) for x in _split_list(v))
        except ValueError:
            raise FlagError(f"{flag}: expected numbers like 3,1 (got {v!r})") from None
    elif key == "split_mode":
        upd[key] = SplitMode(_choice(flag, v, [m.value for m in SplitMode]))
    elif key == "devices":
        upd[key] = () if v == "none" else tuple(p for p in v.split(",") if p)
    elif key == "rpc":
        rpc.extend(p for p in v.split(",") if p)
    elif key == "swa_full":
        upd[key] = True
    elif key == "load_mode":
        upd[key] = LoadMode(_choice(flag, v, [m.value for m in LoadMode]))
    elif key == "no_kv_offload":
        upd[key] = True
    elif key == "kv_offload":
        upd["no_kv_offload"] = False
    elif key == "no_op_offload":
        upd["op_offload"] = False
    elif key == "op_offload":
        upd["op_offload"] = True
    elif key == "no_repack":
        upd["repack"] = False
    elif key == "repack":
        upd["repack"] = True
    elif key == "no_host":
        upd["no_host"] = True
    elif key == "mmproj_path":
        upd[key] = v
    elif key == "no_mmproj_offload":
        upd["mmproj"] = MmprojPlacement.CPU
    elif key == "mmproj_offload":
        upd["mmproj"] = MmprojPlacement.GPU
    elif key == "draft_model":
        draft[key] = v
    elif key == "draft_ngl":
        draft[key] = _ngl(flag, v)
    elif key in ("draft_type_k", "draft_type_v"):
        draft[key] = cache_type_choice(flag, v, engine)
    elif key == "draft_n_max":
        draft[key] = _int(flag, v)
        upd["spec_draft_n_max"] = draft[key]
    elif key == "spec_types":
        prev = upd.get("spec_types", ())
        assert isinstance(prev, tuple)
        upd[key] = prev + tuple(p for p in v.split(",") if p)
    elif key == "fit":
        lv = v.lower()
        if lv in _TRUTHY:
            upd[key] = True
        elif lv in _FALSEY:
            upd[key] = False
        else:
            raise FlagError(f"{flag}: expected on or off, got {v!r}")
    elif key == "fit_target_mib":
        try:
            upd[key] = tuple(int(x) for x in _split_list(v))
        except ValueError:
            raise FlagError(f"{flag}: expected MiB values like 1024,2048 (got {v!r})") from None
    elif key == "embedding":
        upd[key] = True
    else:  # pragma: no cover - the table and this function are kept in step by the tests
        raise FlagError(f"{flag}: not handled")


#: How each engine spells a cache type in its own parser (ik's `q8_KV`); everything else is lower case.
_CANONICAL_CACHE_TYPE: dict[str, str] = {"q8_kv": "q8_KV"}


def cache_type_choice(flag: str, value: str, engine: Engine) -> str:
    """A -ctk/-ctv value the engine accepts, in the engine's own spelling; a fork's type with another engine is an
    error naming the engine that has it."""
    low = value.lower()
    allowed = engines.cache_types(engine)
    if low in allowed:
        return _CANONICAL_CACHE_TYPE.get(low, low)
    owners = [e.value for e in Engine if e is not engine and low in engines.cache_types(e)]
    if owners:
        raise FlagError(
            f"{flag}: cache type {value!r} is a type of {' / '.join(owners)} only: add --engine {owners[0]}"
        )
    raise FlagError(f"{flag}: {value!r} is not one of {', '.join(allowed)}")


def _tail_tokens(flag: str, value: str) -> tuple[int, int]:
    """`--kv-tail-tokens N|auto|full=N,swa=M`: (full-attention tail, SWA tail or -1 = the same)."""

    def one(x: str) -> int:
        if x.lower() == "auto":
            return engines.KV_TAIL_AUTO
        n = _int(flag, x)
        if n < 0:
            raise FlagError(f"{flag}: must be >= 0")
        return n

    if "=" not in value:
        return one(value), -1
    full, swa = 0, -1
    for item in value.split(","):
        name, _, x = item.partition("=")
        if name == "full":
            full = one(x)
        elif name == "swa":
            swa = one(x)
        else:
            raise FlagError(f"{flag}: {item!r} is not full=N or swa=N")
    return full, swa


def _apply_fork(key: str, flag: str, v: str, upd: dict[str, object]) -> None:
    """An ik_llama.cpp or beellama.cpp flag."""
    if key == "mla_mode":
        n = _int(flag, v)
        if n not in (0, 1, 2, 3):
            raise FlagError(f"{flag}: must be 0, 1, 2 or 3 (got {n})")
        upd[key] = n
    elif key == "attn_max_batch_mib":
        n = _int(flag, v)
        if n < 0:
            raise FlagError(f"{flag}: must be >= 0")
        upd[key] = n
    elif key == "fused_moe":
        upd[key] = True
    elif key == "no_fused_moe":
        upd["fused_moe"] = False
    elif key == "run_time_repack":
        upd[key] = True
    elif key == "no_flash_attn":
        upd["flash_attn"] = FlashAttn.OFF
    elif key == "no_mmap":
        upd["load_mode"] = LoadMode.MLOCK if upd.get("load_mode") is LoadMode.MMAP_MLOCK else LoadMode.NONE
    elif key == "mlock":
        upd["load_mode"] = LoadMode.MLOCK if upd.get("load_mode") is LoadMode.NONE else LoadMode.MMAP_MLOCK
    elif key == "kv_tail_tokens":
        upd["kv_tail_tokens"], upd["kv_tail_tokens_swa"] = _tail_tokens(flag, v)
    elif key == "kv_tail_type":
        upd[key] = _choice(flag, v.lower(), ("f32", "f16", "bf16"))
    elif key in ("cache_type_k_swa", "cache_type_v_swa"):
        upd[key] = _choice(flag, v.lower(), tuple(engines.KVARN_BITS))
    else:  # pragma: no cover - ENGINE_FLAGS and this function are kept in step by the tests
        raise FlagError(f"{flag}: not handled")


def _apply_ollama(values: dict[str, str], upd: dict[str, object], base: LaunchSettings) -> None:
    """ollama's settings (flags or OLLAMA_* assignments) as the llama-server settings ollama runs with."""
    if "ollama_num_parallel" in values:
        n = _int("--num-parallel", values["ollama_num_parallel"])
        if n < 1:
            raise FlagError("--num-parallel / OLLAMA_NUM_PARALLEL: must be >= 1")
        upd["n_parallel"] = n
        upd["kv_unified"] = False
    if "ollama_num_ctx" in values:
        n = _int("--num-ctx", values["ollama_num_ctx"])
        if n < 0:
            raise FlagError("--num-ctx / OLLAMA_CONTEXT_LENGTH: must be >= 0")
        par = upd.get("n_parallel", base.n_parallel)
        assert isinstance(par, int)
        upd["n_ctx"] = n * max(1, par)
    if "ollama_kv_cache_type" in values:
        t = cache_type_choice("--kv-cache-type", values["ollama_kv_cache_type"], Engine.OLLAMA)
        upd["cache_type_k"] = upd["cache_type_v"] = t
    if "ollama_flash_attention" in values:
        lv = values["ollama_flash_attention"].lower()
        if lv in _TRUTHY:
            upd["flash_attn"] = FlashAttn.ON
        elif lv in _FALSEY:
            upd["flash_attn"] = FlashAttn.OFF
        else:
            raise FlagError(f"--flash-attention / OLLAMA_FLASH_ATTENTION: expected 0 or 1, got {lv!r}")
    if "gpu_overhead_bytes" in values:
        n = _int("--gpu-overhead", values["gpu_overhead_bytes"])
        if n < 0:
            raise FlagError("--gpu-overhead / OLLAMA_GPU_OVERHEAD: must be >= 0 bytes")
        upd["gpu_overhead_bytes"] = n
    if "ollama_num_gpu" in values:
        upd["n_gpu_layers"] = _ngl("--num-gpu", values["ollama_num_gpu"])
    if "ollama_num_batch" in values:
        n = _int("--num-batch", values["ollama_num_batch"])
        if n < 1:
            raise FlagError("--num-batch: must be >= 1")
        upd["n_batch"] = upd["n_ubatch"] = n
