"""`--engine` and each engine's own flag spellings in `fitplan.core.launch.flags.parse_flags`."""

from __future__ import annotations

import re

import pytest

from fitplan.core.base.errors import FlagError
from fitplan.core.base.launch_settings import NGL_ALL, Engine, FlashAttn, LaunchSettings, LoadMode
from fitplan.core.launch.flags import (
    _IGNORED_ARITY,
    ENGINE_FLAGS,
    MEMORY_FLAGS,
    OLLAMA_ENV,
    parse_engine,
    parse_flags,
)


def test_engine_flag_forms_and_aliases() -> None:
    assert parse_flags(["--engine", "ik_llama.cpp"]).settings.engine is Engine.IK_LLAMA
    assert parse_flags(["--engine=beellama"]).settings.engine is Engine.BEELLAMA
    assert parse_flags([], engine=Engine.OLLAMA).settings.engine is Engine.OLLAMA
    assert parse_engine("ik") is Engine.IK_LLAMA and parse_engine("mainline") is Engine.LLAMA_CPP
    with pytest.raises(FlagError, match="not one of"):
        parse_flags(["--engine", "vllm"])
    with pytest.raises(FlagError, match="missing value"):
        parse_flags(["--engine"])


def test_engine_flag_in_argv_wins_over_the_argument() -> None:
    assert parse_flags(["--engine", "beellama"], engine=Engine.IK_LLAMA).settings.engine is Engine.BEELLAMA


def test_engine_spellings_do_not_collide_with_mainline() -> None:
    mainline = {n for f in MEMORY_FLAGS for n in f.names} | set(_IGNORED_ARITY)
    fork = [n for _, f in ENGINE_FLAGS for n in f.names]
    assert len(fork) == len(set(fork))
    assert not set(fork) & mainline


def test_ik_flags() -> None:
    s = parse_flags(
        ["--engine", "ik_llama.cpp", "--mla-use", "2", "--attention-max-batch", "1024", "-no-fmoe", "-rtr",
         "-ctk", "q8_kv", "-ctv", "q6_0"]
    ).settings  # fmt: skip
    assert (s.mla_mode, s.attn_max_batch_mib, s.fused_moe, s.run_time_repack) == (2, 1024, False, True)
    assert (s.cache_type_k, s.cache_type_v) == ("q8_KV", "q6_0")  # ik's own spelling of q8_KV
    assert parse_flags(["--engine", "ik", "-no-fa"]).settings.flash_attn is FlashAttn.OFF
    assert parse_flags(["--engine", "ik", "-no-fmoe", "-fmoe"]).settings.fused_moe
    assert parse_flags(["--engine", "ik", "--no-mmap"]).settings.load_mode is LoadMode.NONE
    assert parse_flags(["--engine", "ik", "--mlock"]).settings.load_mode is LoadMode.MMAP_MLOCK
    assert parse_flags(["--engine", "ik", "--mlock", "--no-mmap"]).settings.load_mode is LoadMode.MLOCK


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--engine", "ik", "-mla", "4"], "0, 1, 2 or 3"),
        (["--engine", "ik", "-amb", "-1"], ">= 0"),
        (["--engine", "ik", "-ctk", "kvarn4"], "beellama only"),
        (["--engine", "beellama", "--kv-tail-tokens", "many"], "expected an integer"),
        (["--engine", "beellama", "--kv-tail-tokens", "left=5"], "full=N or swa=N"),
        (["--engine", "beellama", "--cache-type-k-swa", "q8_0"], "not one of"),
        (["--engine", "beellama", "--kv-tail-type", "q8_0"], "not one of"),
        (["--engine", "ollama", "--num-parallel", "0"], ">= 1"),
        (["--engine", "ollama", "OLLAMA_FLASH_ATTENTION=maybe"], "expected 0 or 1"),
        (["--engine", "ollama", "--kv-cache-type", "kvarn4"], "beellama only"),
    ],
)
def test_bad_engine_values(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError, match=re.escape(message)):
        parse_flags(argv)


@pytest.mark.parametrize(
    ("argv", "owner"),
    [
        (["-mla", "3"], "ik_llama.cpp"),
        (["-amb", "512"], "ik_llama.cpp"),
        (["-fmoe"], "ik_llama.cpp"),
        (["-rtr"], "ik_llama.cpp"),
        (["--kv-tail-tokens", "1024"], "beellama"),
        (["--cache-type-k-swa", "kvarn4"], "beellama"),
        (["--num-ctx", "8192"], "ollama"),
        (["--gpu-overhead", "1"], "ollama"),
        (["OLLAMA_NUM_PARALLEL=2"], "ollama"),
        (["-ctk", "kvarn4"], "beellama"),
        (["-ctk", "q8_KV"], "ik_llama.cpp"),
        (["-ctv", "q2_0"], "beellama"),
    ],
)
def test_fork_flag_with_mainline_names_the_engine(argv: list[str], owner: str) -> None:
    with pytest.raises(FlagError, match=re.escape(f"--engine {owner}")):
        parse_flags(argv)


def test_fork_flag_with_another_fork_is_refused() -> None:
    with pytest.raises(FlagError, match=r"ik_llama\.cpp only.*engine now: beellama"):
        parse_flags(["--engine", "beellama", "-mla", "3"])


def test_beellama_flags() -> None:
    s = parse_flags(
        ["--engine", "beellama", "-ctk", "kvarn4", "-ctv", "kvarn2", "--kv-tail-tokens", "auto", "--kv-tail-type",
         "BF16", "--cache-type-k-swa", "kvarn3", "--cache-type-v-swa", "kvarn3"]
    ).settings  # fmt: skip
    assert (s.cache_type_k, s.cache_type_v) == ("kvarn4", "kvarn2")
    assert (s.kv_tail_tokens, s.kv_tail_tokens_swa, s.kv_tail_type) == (1024, -1, "bf16")
    assert (s.cache_type_k_swa, s.cache_type_v_swa) == ("kvarn3", "kvarn3")
    for t in ("q2_0", "q2_1", "q3_0", "q3_1", "q6_0", "q6_1"):
        assert parse_flags(["--engine", "beellama", "-ctk", t]).settings.cache_type_k == t
    tail = parse_flags(["--engine", "beellama", "--kv-tail-tokens=full=2048,swa=0"]).settings
    assert (tail.kv_tail_tokens, tail.kv_tail_tokens_swa) == (2048, 0)


def test_mtp_draft_cache_types_without_a_draft_model() -> None:
    s = parse_flags(["--engine", "beellama", "--spec-type", "draft-mtp", "--spec-draft-type-k", "kvarn2",
                     "-ctvd", "kvarn2"]).settings  # fmt: skip
    assert s.draft is None and (s.mtp_cache_type_k, s.mtp_cache_type_v) == ("kvarn2", "kvarn2")
    with_model = parse_flags(["-md", "d.gguf", "-ctkd", "q8_0"]).settings
    assert with_model.draft is not None and with_model.draft.cache_type_k == "q8_0"
    assert with_model.mtp_cache_type_k == "f16"


def test_ollama_environment_and_modelfile_flags() -> None:
    s = parse_flags(
        ["--engine", "ollama", "OLLAMA_NUM_PARALLEL=3", "OLLAMA_CONTEXT_LENGTH=8192", "OLLAMA_KV_CACHE_TYPE=q4_0",
         "OLLAMA_FLASH_ATTENTION=1", "OLLAMA_GPU_OVERHEAD=536870912", "--num-gpu", "20", "--num-batch", "256",
         "OLLAMA_HOST=127.0.0.1:11434"]
    )  # fmt: skip
    st = s.settings
    # ollama passes -c num_ctx x slots and -np slots without -kvu
    assert (st.n_ctx, st.n_parallel, st.kv_unified) == (3 * 8192, 3, False)
    assert (st.cache_type_k, st.cache_type_v, st.flash_attn) == ("q4_0", "q4_0", FlashAttn.ON)
    assert (st.gpu_overhead_bytes, st.n_gpu_layers, st.n_batch, st.n_ubatch) == (536870912, 20, 256, 256)
    assert s.ignored == ("OLLAMA_HOST=127.0.0.1:11434",)
    same = parse_flags(["--engine", "ollama", "--num-parallel", "3", "--num-ctx", "8192", "--kv-cache-type", "q4_0",
                        "--flash-attention", "1", "--gpu-overhead", "536870912", "--num-gpu", "20",
                        "--num-batch", "256"]).settings  # fmt: skip
    assert same == st
    assert set(OLLAMA_ENV) >= {"OLLAMA_CONTEXT_LENGTH", "OLLAMA_NUM_PARALLEL", "OLLAMA_KV_CACHE_TYPE"}


def test_ollama_num_ctx_uses_the_final_slot_count() -> None:
    # order does not matter: --num-ctx before --num-parallel still multiplies
    s = parse_flags(["--engine", "ollama", "--num-ctx", "4096", "--num-parallel", "2"]).settings
    assert s.n_ctx == 8192


def test_ollama_mainline_flags_still_work() -> None:
    s = parse_flags(["--engine", "ollama", "-ngl", "all", "-c", "16384"]).settings
    assert (s.n_gpu_layers, s.n_ctx, s.n_parallel) == (NGL_ALL, 16384, 1)


def test_base_settings_keep_their_engine() -> None:
    base = LaunchSettings(engine=Engine.IK_LLAMA, mla_mode=1)
    s = parse_flags(["-amb", "256"], base).settings
    assert (s.engine, s.mla_mode, s.attn_max_batch_mib) == (Engine.IK_LLAMA, 1, 256)
