"""The exported command follows the engine: ik_llama.cpp and beellama.cpp flags, ollama's environment + Modelfile."""

from __future__ import annotations

import pytest

from fitplan.core.base.errors import FlagError
from fitplan.core.base.launch_settings import NGL_ALL, Engine, LaunchSettings
from fitplan.core.launch.command_line import env_lines, given_keys, ollama_export, plan_to_args, to_preset_ini
from fitplan.core.launch.flags import parse_flags
from fitplan.core.launch.shell import Shell


def _args(*argv: str) -> tuple[str, ...]:
    return plan_to_args(parse_flags(list(argv)).settings, "m.gguf")


def test_ik_command_writes_mla_amb_fmoe() -> None:
    argv = _args("--engine", "ik_llama.cpp", "-c", "32768", "-amb", "512", "-ngl", "all", "--fit", "off")
    assert argv == (
        "llama-server",
        "-m",
        "m.gguf",
        "-c",
        "32768",
        "-ngl",
        "999",
        "-mla",
        "3",
        "-amb",
        "512",
        "-fmoe",
    )
    # FA on is ik's default (not written); off is
    assert "-fa" not in argv
    off = _args("--engine", "ik_llama.cpp", "-fa", "off", "-no-fmoe", "-rtr", "-mla", "1")
    assert off[off.index("-fa") + 1] == "off"
    assert "-no-fmoe" in off and "-rtr" in off and off[off.index("-mla") + 1] == "1"


def test_ik_command_uses_its_mmap_switches() -> None:
    assert "--no-mmap" in _args("--engine", "ik", "--no-mmap")
    assert "-lm" not in _args("--engine", "ik", "--no-mmap")
    both = _args("--engine", "ik", "--no-mmap", "--mlock")
    assert "--no-mmap" in both and "--mlock" in both


def test_beellama_command_writes_kvarn_and_tail_flags() -> None:
    argv = _args("--engine", "beellama", "-ctk", "kvarn4", "-ctv", "kvarn4", "--kv-tail-tokens", "1024",
                 "--kv-tail-type", "f32", "--cache-type-k-swa", "kvarn3", "--cache-type-v-swa", "kvarn3")  # fmt: skip
    text = " ".join(argv)
    assert "-ctk kvarn4 -ctv kvarn4" in text
    assert "--cache-type-k-swa kvarn3 --cache-type-v-swa kvarn3" in text
    assert "--kv-tail-tokens 1024 --kv-tail-type f32" in text
    split = _args("--engine", "beellama", "--kv-tail-tokens", "full=256,swa=0")
    assert split[split.index("--kv-tail-tokens") + 1] == "full=256,swa=0"
    mtp = _args("--engine", "beellama", "--spec-type", "draft-mtp", "-ctkd", "kvarn2")
    assert mtp[mtp.index("--spec-draft-type-k") + 1] == "kvarn2"


@pytest.mark.parametrize(
    "argv",
    [
        ("--engine", "ik_llama.cpp", "-c", "32768", "-mla", "2", "-amb", "256", "-ctk", "q8_KV", "-rtr", "-fa", "off"),
        ("--engine", "ik_llama.cpp", "-no-fmoe", "-ngl", "20", "--no-mmap"),
        ("--engine", "beellama", "-c", "65536", "-ctk", "kvarn4", "-ctv", "kvarn3", "--kv-tail-tokens", "full=512,swa=0",
         "--kv-tail-type", "bf16", "--cache-type-k-swa", "kvarn2", "--cache-type-v-swa", "kvarn2"),
        ("--engine", "beellama", "--spec-type", "draft-mtp", "-ctkd", "kvarn2", "-ctvd", "kvarn2", "-np", "4"),
    ],
)  # fmt: skip
def test_fork_commands_round_trip(argv: tuple[str, ...]) -> None:
    s = parse_flags(list(argv)).settings
    back = parse_flags(list(plan_to_args(s, None, program="")), engine=s.engine).settings
    assert back == s


def test_ik_preset_uses_long_names() -> None:
    ini = to_preset_ini(parse_flags(["--engine", "ik", "-amb", "512"]).settings, "ds", "/m.gguf")
    assert "mla-use = 3" in ini and "attention-max-batch = 512" in ini and "fused-moe = true" in ini


def test_ollama_export_environment_and_modelfile() -> None:
    s = parse_flags(["--engine", "ollama", "OLLAMA_NUM_PARALLEL=2", "--num-ctx", "16384", "--kv-cache-type", "q8_0",
                     "--num-gpu", "30", "--gpu-overhead", "1073741824"]).settings  # fmt: skip
    exp = ollama_export(s, "/models/Qwen3-8B-Q4_K_M.gguf")
    assert dict(exp.environment) == {
        "OLLAMA_NUM_PARALLEL": "2",
        "OLLAMA_KV_CACHE_TYPE": "q8_0",
        "OLLAMA_GPU_OVERHEAD": "1073741824",
        "OLLAMA_CONTEXT_LENGTH": "16384",
    }
    assert exp.modelfile == (
        "FROM /models/Qwen3-8B-Q4_K_M.gguf\nPARAMETER num_ctx 16384\nPARAMETER num_gpu 30\n"
    )
    assert exp.model_name == "qwen3-8b-q4_k_m"
    assert exp.create_argv() == ("ollama", "create", "qwen3-8b-q4_k_m", "-f", "Modelfile")


def test_ollama_export_points_at_the_first_shard() -> None:
    s = LaunchSettings(engine=Engine.OLLAMA, n_ctx=4096, n_parallel=1, n_gpu_layers=NGL_ALL)
    exp = ollama_export(s, "/m/big-00002-of-00003.gguf")
    assert exp.modelfile.startswith("FROM /m/big-00001-of-00003.gguf\n")
    assert "num_gpu" not in exp.modelfile  # "all" without an estimate: ollama decides


@pytest.mark.parametrize(
    ("shell", "expected"),
    [
        (Shell.SH, "export OLLAMA_NUM_PARALLEL=2\nexport OLLAMA_KV_CACHE_TYPE=q8_0"),
        (Shell.POWERSHELL, "$env:OLLAMA_NUM_PARALLEL = '2'\n$env:OLLAMA_KV_CACHE_TYPE = 'q8_0'"),
        (Shell.CMD, "set OLLAMA_NUM_PARALLEL=2\nset OLLAMA_KV_CACHE_TYPE=q8_0"),
    ],
)
def test_env_lines_per_shell(shell: Shell, expected: str) -> None:
    assert env_lines((("OLLAMA_NUM_PARALLEL", "2"), ("OLLAMA_KV_CACHE_TYPE", "q8_0")), shell) == expected


def test_env_lines_quote_and_refuse() -> None:
    assert env_lines((("OLLAMA_HOST", "a b"),), Shell.SH) == "export OLLAMA_HOST='a b'"
    assert env_lines((("X", "it's"),), Shell.POWERSHELL) == "$env:X = 'it''s'"
    with pytest.raises(FlagError):
        env_lines((("X", "a&b"),), Shell.CMD)
    with pytest.raises(FlagError):
        env_lines((("1X", "1"),), Shell.SH)


def test_ollama_settings_pin_like_llama_server_flags() -> None:
    keys = given_keys(
        ["--num-ctx", "8192", "OLLAMA_KV_CACHE_TYPE=q8_0", "--num-parallel", "2", "--num-gpu", "10"]
    )
    assert {"n_ctx", "cache_type_k", "cache_type_v", "n_parallel", "n_gpu_layers"} <= keys
    assert "cache_type_k" in given_keys(["OLLAMA_KV_CACHE_TYPE=q4_0"])


def test_import_an_ik_command() -> None:
    from fitplan.core.launch.command_line import import_command

    imp = import_command(
        "./llama-server -m ds.gguf -c 32768 -mla 3 -amb 512 -fmoe -ngl 999", engine=Engine.IK_LLAMA
    )
    s = imp.settings
    assert (s.engine, s.mla_mode, s.attn_max_batch_mib, s.n_ctx) == (Engine.IK_LLAMA, 3, 512, 32768)
    with pytest.raises(FlagError, match=r"--engine ik_llama\.cpp"):
        import_command("llama-server -m ds.gguf -mla 3")
