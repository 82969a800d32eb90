"""Realistic sparse models for the planner's oracle tests and bench: the published shapes of
`tools/groundtruth/sparse_models.py`, with fewer layers (so that every placement can be enumerated) or, for the
bench, a configuration of the same family at full size. Headers are written once per process to a temporary folder."""

from __future__ import annotations

import copy
import json
import tempfile
from functools import cache
from pathlib import Path
from types import ModuleType

from fitplan.core.base.devices import Machine
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.gguf.reader import read_header
from fitplan.core.model.builder import build_profile
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.search import ContextFit, EstimateFn, Evaluator, context_fit, default_estimate_fn
from fitplan.core.plan.usage import MarginPolicy
from support.tools import load_tool

#: name -> (builder, config changes): depth-truncated models of each kind the planner meets
SMALL: dict[str, tuple[str, dict[str, object]]] = {
    "dense": ("llama-3.1-8b", {"num_hidden_layers": 6}),
    "dense-swa": ("gemma-3-27b", {"num_hidden_layers": 6}),
    "moe": ("qwen3-30b-a3b", {"num_hidden_layers": 6}),
    "hybrid-moe": ("granite-4.0-h-tiny", {"num_hidden_layers": 6, "attention_layers": [2, 5]}),
    "hybrid-next": ("qwen3-next-80b-a3b", {"num_hidden_layers": 4}),
    "mla-moe": ("deepseek-v2-lite", {"num_hidden_layers": 5}),
}

#: DeepSeek-V3 / R1 (deepseek-ai/DeepSeek-V3 config.json): 671B parameters, 61 layers (3 dense), 256 experts, MLA
DEEPSEEK_V3: dict[str, object] = {
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "routed_scaling_factor": 2.5,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
}


def _generator() -> ModuleType:
    return load_tool("tools/groundtruth/sparse_models.py")


@cache
def _folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="fitplan-plan-models-"))


def generated(base: str, changes: dict[str, object], tag: str) -> ModelProfile:
    """The sparse header of `base` with its configuration changed by `changes`, as a profile."""
    return _generated(base, json.dumps(changes, sort_keys=True), tag)


@cache
def _generated(base: str, changes: str, tag: str) -> ModelProfile:
    gen = _generator()
    saved = gen.CONFIGS[base]
    cfg = copy.deepcopy(saved)
    cfg.update(json.loads(changes))
    gen.CONFIGS[base] = cfg
    try:
        spec = gen.BUILDERS[base]()
    finally:
        gen.CONFIGS[base] = saved
    path = _folder() / f"{tag}.gguf"
    gen.write_header(spec, path)
    return build_profile(read_header(str(path), allow_incomplete=True))


def small_model(kind: str) -> ModelProfile:
    base, changes = SMALL[kind]
    return generated(base, {**changes, "max_position_embeddings": 16384}, f"small-{kind}")


def deepseek_v3() -> ModelProfile:
    return generated("deepseek-v2-lite", DEEPSEEK_V3, "deepseek-v3-671b")


def largest_context(
    profile: ModelProfile,
    settings: LaunchSettings,
    machine: Machine,
    margin: MarginPolicy | None = None,
    estimate_fn: EstimateFn | None = None,
) -> ContextFit:
    """The planner's largest-context search (`search.context_fit`) at the fixed placement of `settings`."""
    ev = Evaluator(profile, machine, margin or MarginPolicy(), estimate_fn or default_estimate_fn())
    return context_fit(ev, settings)
