"""The llama-server command for a plan, its preset INI section, and importing pasted commands."""

from __future__ import annotations

import dataclasses
import re

import pytest

from fitplan.core.base.devices import GIB, Machine, assumed_gpu, host_device
from fitplan.core.base.errors import FlagError
from fitplan.core.base.launch_settings import (
    NGL_ALL,
    DraftSettings,
    FlashAttn,
    LaunchSettings,
    MmprojPlacement,
    SplitMode,
    TensorOverride,
    Tool,
)
from fitplan.core.gguf.reader import open_model
from fitplan.core.launch.command_line import (
    annotate,
    first_shard,
    given_keys,
    import_command,
    import_preset,
    plan_to_args,
    preset_section_args,
    read_preset_ini,
    to_preset_ini,
)
from fitplan.core.launch.flags import FLAG_BY_NAME, MEMORY_FLAGS, parse_flags
from fitplan.core.launch.shell import Shell, join
from fitplan.core.model.builder import build_profile
from support.models import TESTS

SPARSE = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"

PLANNED = LaunchSettings(
    n_ctx=32768,
    n_parallel=1,
    cache_type_k="q8_0",
    cache_type_v="q8_0",
    n_gpu_layers=NGL_ALL,
    n_cpu_moe=12,
    tensor_split=(20.0, 29.0),
    fit=False,
)


def test_plan_args_golden() -> None:
    assert plan_to_args(PLANNED, "/models/Qwen3-30B-A3B-Q4_K_M-00002-of-00003.gguf") == (
        "llama-server",
        "-m",
        "/models/Qwen3-30B-A3B-Q4_K_M-00001-of-00003.gguf",
        "-c",
        "32768",
        "-np",
        "1",
        "-ngl",
        "all",
        "-ts",
        "20,29",
        "--n-cpu-moe",
        "12",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "--fit",
        "off",
    )


def test_defaults_are_left_out() -> None:
    assert plan_to_args(LaunchSettings(), "m.gguf") == ("llama-server", "-m", "m.gguf")
    # -kvu only with an explicit -np: with -np auto the server forces a unified cache anyway
    assert plan_to_args(LaunchSettings(kv_unified=True), None, program="") == ()
    assert plan_to_args(LaunchSettings(n_parallel=2, kv_unified=True), None, program="") == (
        "-np",
        "2",
        "-kvu",
    )


def test_every_memory_flag_is_written() -> None:
    s = LaunchSettings(
        n_ctx=8192,
        n_parallel=2,
        kv_unified=True,
        cache_type_k="q4_0",
        cache_type_v="q4_0",
        flash_attn=FlashAttn.ON,
        n_batch=1024,
        n_ubatch=256,
        n_gpu_layers=20,
        tensor_overrides=(TensorOverride(r"blk\.(1|2)\.ffn_.*", "CPU"),),
        split_mode=SplitMode.ROW,
        tensor_split=(3.0, 1.5),
        main_gpu=1,
        devices=("CUDA0", "CUDA1"),
        swa_full=True,
        no_kv_offload=True,
        op_offload=False,
        repack=False,
        no_host=True,
        mmproj_path="/m/mmproj-F16.gguf",
        mmproj=MmprojPlacement.CPU,
        draft=DraftSettings(
            "/m/draft.gguf", n_gpu_layers=99, cache_type_k="q8_0", cache_type_v="q8_0", n_max=8
        ),
        spec_draft_n_max=8,  # parse_flags keeps --spec-draft-n-max in both places
        cache_ram_mib=0,
        ctx_checkpoints=4,
        fit=False,
    )
    argv = plan_to_args(s, "/m/model.gguf")
    assert argv[:3] == ("llama-server", "-m", "/m/model.gguf")
    back = parse_flags(argv[1:])
    assert back.settings == s
    assert back.model_path == "/m/model.gguf"
    assert back.ignored == ()
    # only spellings llama-server knows
    known = {n for spec in MEMORY_FLAGS for n in spec.names}
    assert all(a in known for a in argv[1:] if a.startswith("-") and not re.fullmatch(r"-?\d+", a))


@pytest.mark.parametrize(
    "settings",
    [
        PLANNED,
        LaunchSettings(n_ctx=4096, n_gpu_layers=7, fit=False),
        LaunchSettings(n_ctx=131072, n_gpu_layers=0, n_parallel=4, fit=False),
        LaunchSettings(cpu_moe=True, n_ctx=16384, flash_attn=FlashAttn.OFF),
        LaunchSettings(fit_target_mib=(2048, 512)),
        LaunchSettings(devices=()),
    ],
)
@pytest.mark.parametrize("shell", list(Shell))
def test_command_round_trip_through_every_shell(settings: LaunchSettings, shell: Shell) -> None:
    path = 'C:\\My Models\\it\'s 100% "real".gguf' if shell is not Shell.SH else "/my models/it's $x.gguf"
    text = join(plan_to_args(settings, path), shell, multiline=True)
    imported = import_command(text, shell)
    assert imported.settings == settings
    assert imported.model_path == path
    assert imported.shell is shell


def test_first_shard() -> None:
    assert first_shard("/m/K2-UD-IQ1_S-00004-of-00006.gguf") == "/m/K2-UD-IQ1_S-00001-of-00006.gguf"
    assert first_shard("/m/model.gguf") == "/m/model.gguf"


# ---------------------------------------------------------------------------------------------------------------------
# Preset INI
# ---------------------------------------------------------------------------------------------------------------------


def _read_preset(text: str) -> dict[str, dict[str, str]]:
    """The grammar of common/preset.cpp:parse_ini_from_file: `[name]`, `key = value`, `;`/`#` comments; a value
    ends at the first `;` or `#` and loses trailing blanks."""
    out: dict[str, dict[str, str]] = {}
    section = ""
    for line in text.splitlines():
        s = line.strip(" \t")
        if not s or s[0] in ";#":
            continue
        if m := re.fullmatch(r"\[[ \t]*([^\]]*?)[ \t]*\]", s):
            section = m.group(1)
            out[section] = {}
            continue
        m2 = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*=[ \t]*([^;#]*?)[ \t]*(?:[;#].*)?", s)
        assert m2, line
        out[section][m2.group(1)] = m2.group(2)
    return out


def test_preset_golden() -> None:
    text = to_preset_ini(
        PLANNED, "qwen3-30b", "/models/Qwen3-30B-A3B-Q4_K_M.gguf", comment="3 expert layers on CPU"
    )
    assert text == (
        "; 3 expert layers on CPU\n"
        "[qwen3-30b]\n"
        "model = /models/Qwen3-30B-A3B-Q4_K_M.gguf\n"
        "ctx-size = 32768\n"
        "parallel = 1\n"
        "n-gpu-layers = all\n"
        "tensor-split = 20,29\n"
        "n-cpu-moe = 12\n"
        "cache-type-k = q8_0\n"
        "cache-type-v = q8_0\n"
        "fit = off\n"
    )


#: Preset keys -> the CLI flag with the same meaning (preset.cpp maps every spelling without dashes to its option).
_PRESET_TO_FLAG = {
    "model": "-m", "ctx-size": "-c", "parallel": "-np", "kv-unified": "-kvu", "n-gpu-layers": "-ngl",
    "tensor-split": "-ts", "split-mode": "-sm", "main-gpu": "-mg", "device": "-dev", "n-cpu-moe": "--n-cpu-moe",
    "cpu-moe": "--cpu-moe", "override-tensor": "-ot", "cache-type-k": "-ctk", "cache-type-v": "-ctv",
    "flash-attn": "-fa", "batch-size": "-b", "ubatch-size": "-ub", "mmproj": "--mmproj",
    "swa-full": "--swa-full", "no-host": "--no-host", "cache-ram": "-cram", "ctx-checkpoints": "-ctxcp",
    "model-draft": "-md", "gpu-layers-draft": "-ngld", "cache-type-k-draft": "-ctkd",
    "cache-type-v-draft": "-ctvd", "spec-draft-n-max": "--spec-draft-n-max", "fit": "--fit",
    "fit-target": "-fitt", "rpc": "--rpc", "load-mode": "-lm", "embedding": "--embedding",
}  # fmt: skip
#: Boolean options with a negative spelling: "key = false" means the negative flag.
_PRESET_NEG = {"mmproj-offload": "--no-mmproj-offload", "kv-offload": "-nkvo", "op-offload": "--no-op-offload",
               "repack": "-nr"}  # fmt: skip


def _preset_argv(values: dict[str, str]) -> list[str]:
    argv: list[str] = []
    for k, v in values.items():
        if k in _PRESET_NEG:
            assert v == "false"
            argv.append(_PRESET_NEG[k])
        elif v == "true":
            argv.append(_PRESET_TO_FLAG[k])
        else:
            argv += [_PRESET_TO_FLAG[k], v]
    return argv


def test_preset_means_the_same_as_the_command() -> None:
    s = dataclasses.replace(
        PLANNED,
        mmproj_path="/m/mmproj.gguf",
        mmproj=MmprojPlacement.CPU,
        no_kv_offload=True,
        tensor_overrides=(TensorOverride("blk\\.1\\.", "CPU"), TensorOverride("blk\\.2\\.", "CUDA1")),
    )
    sections = _read_preset(to_preset_ini(s, "m", "/m/model.gguf"))
    back = parse_flags(_preset_argv(sections["m"]))
    assert back.settings == s
    assert back.model_path == "/m/model.gguf"


def test_preset_reader_reads_every_key_as_the_flag_it_names() -> None:
    for key, flag in _PRESET_TO_FLAG.items():
        row = FLAG_BY_NAME[flag]
        (args,) = read_preset_ini(f"[m]\n{key} = {'true' if row.read is None else 'x'}\n").values()
        assert FLAG_BY_NAME[args[0]] is row, key
    for key, flag in _PRESET_NEG.items():
        assert read_preset_ini(f"[m]\n{key} = false\n") == {"m": (flag,)}


@pytest.mark.parametrize(
    "settings",
    [
        PLANNED,
        dataclasses.replace(
            PLANNED,
            mmproj_path="/m/mmproj.gguf",
            mmproj=MmprojPlacement.CPU,
            no_kv_offload=True,
            op_offload=False,
            repack=False,
            tensor_overrides=(TensorOverride("blk\\.1\\.", "CPU"), TensorOverride("blk\\.2\\.", "CUDA1")),
            draft=DraftSettings("/m/d.gguf", n_gpu_layers=9, cache_type_k="q8_0", n_max=5),
            spec_draft_n_max=5,  # parse_flags keeps --spec-draft-n-max in both places
        ),
        LaunchSettings(cpu_moe=True, n_ctx=16384, flash_attn=FlashAttn.OFF, split_mode=SplitMode.ROW),
        LaunchSettings(fit_target_mib=(2048, 512), devices=(), kv_unified=True, n_parallel=2),
        parse_flags(["--engine", "ik_llama.cpp", "-mla", "2", "-amb", "256", "-no-fmoe", "--no-mmap"]).settings,
        parse_flags(["--engine", "beellama", "-ctk", "kvarn4", "--cache-type-k-swa", "kvarn3",
                     "--cache-type-v-swa", "kvarn3", "--kv-tail-tokens", "full=512,swa=64", "--spec-type", "draft-mtp", "-ctkd", "q8_0"]).settings,
    ],
)  # fmt: skip
def test_preset_reads_back_as_the_settings(settings: LaunchSettings) -> None:
    text = to_preset_ini(settings, "m", "/m/model.gguf", comment="a comment")
    back = import_preset(text, engine=settings.engine)
    assert back.settings == settings
    assert back.model_path == "/m/model.gguf"
    assert import_preset(text, "m", engine=settings.engine).settings == settings


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[m]\nkv-offload = maybe\n", "expected true or false"),
        ("[m]\nctx-sise = 5\n", "not a key fitplan reads"),
        ("[m]\n-c = 5\n", "expected [name]"),
        ("[m]\nkv-offload = FALSE\n", "expected true or false"),
        ("[m]\nctx-size = nan\n", "expected an integer"),
        ("[a]\n[b]\n", "2 sections"),
    ],
)
def test_preset_reader_errors(text: str, message: str) -> None:
    with pytest.raises(FlagError, match=re.escape(message)):
        import_preset(text)


def test_model_url_is_read_back() -> None:
    url = "https://huggingface.co/org/repo/resolve/main/model-00001-of-00003.gguf"
    assert parse_flags(plan_to_args(LaunchSettings(), url)[1:]).model_path == url


def test_preset_reader_reads_the_ini_as_llama_server_does() -> None:
    """common/preset.cpp's grammar: `;` and `#` start a comment anywhere, lines end at \\n, \\r\\n or \\r, keys before
    a section are in [default], `version` is reserved; a value is raw text (blanks, quotes, backslashes)."""
    text = (
        "version = 1\rctx-size = 4096 ; the context\r"
        "[a] ; the first\r\n"
        "model = C:\\my models\\it's.gguf # the model\n"
        "parallel=2;no blank before the comment\n"
        "kv-offload = 0\nop-offload = off\nrepack = disabled\nmmproj-offload = false\n"
    )
    assert read_preset_ini(text) == {
        "default": ("-c", "4096"),
        "a": ("-m", "C:\\my models\\it's.gguf", "-np", "2", "-nkvo", "--no-op-offload", "-nr",
              "--no-mmproj-offload"),
    }  # fmt: skip


def test_preset_reader_takes_every_spelling_llama_server_takes() -> None:
    """A key may be any long spelling of a flag (a negated one flips the value); a switch without a negation is
    left out when false (llama.cpp skips it); flags fitplan does not model are kept as given."""
    text = "[m]\nno-kv-offload = true\nkv-unified = false\nswa-full = false\ntemp = 0.7\njinja = on\n"
    assert read_preset_ini(text) == {"m": ("-nkvo", "-no-kvu", "--temp", "0.7", "--jinja")}
    parsed = import_preset(text)
    assert parsed.settings.no_kv_offload and parsed.ignored == ("--temp 0.7", "--jinja")


def test_preset_global_section_applies_before_the_chosen_one() -> None:
    text = "[*]\nparallel = 2\nctx-size = 1024\n[m]\nctx-size = 8192\n"
    assert preset_section_args(text) == ("m", ("-np", "2", "-c", "1024", "-c", "8192"))
    s = import_preset(text).settings
    assert (s.n_parallel, s.n_ctx) == (2, 8192)


@pytest.mark.parametrize("name", ["a\rb", "a\nb", "a]", " a", "a\tb", "a\x85b", ""])
def test_preset_name_that_would_break_the_section_header_is_refused(name: str) -> None:
    with pytest.raises(FlagError, match="preset name"):
        to_preset_ini(LaunchSettings(), name, "/m/x.gguf")


@pytest.mark.parametrize("name", ["[a", "a;b", "a#b", "a b"])
def test_preset_name_llama_server_reads_back_is_kept(name: str) -> None:
    assert list(read_preset_ini(to_preset_ini(LaunchSettings(), name, "/m/x.gguf"))) == [name]


def test_preset_refuses_what_ini_cannot_hold() -> None:
    with pytest.raises(FlagError):
        to_preset_ini(LaunchSettings(), "m", "/m/model #2.gguf")
    with pytest.raises(FlagError):
        to_preset_ini(LaunchSettings(), "m", "/m/a;b.gguf")
    with pytest.raises(FlagError):
        to_preset_ini(LaunchSettings(), "bad]name", "/m/x.gguf")


# ---------------------------------------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------------------------------------


def test_import_sh_with_env_and_unmodelled_flags() -> None:
    text = (
        "CUDA_VISIBLE_DEVICES=0,1 ~/llama.cpp/build/bin/llama-server \\\n"
        "  -m ~/models/Qwen3-8B-Q4_K_M.gguf --host 0.0.0.0 --port 8080 \\\n"
        "  -c 16384 -np 2 -fa on --temp 0.7 --lora adapter.gguf --mtmd-batch-max-tokens 1024 --jinja\n"
    )
    imp = import_command(text)
    assert imp.shell is Shell.SH
    assert imp.env == (("CUDA_VISIBLE_DEVICES", "0,1"),)
    assert imp.program == "~/llama.cpp/build/bin/llama-server"
    assert imp.model_path == "~/models/Qwen3-8B-Q4_K_M.gguf"
    assert imp.settings == LaunchSettings(
        n_ctx=16384, n_parallel=2, flash_attn=FlashAttn.ON, lora=("adapter.gguf",)
    )
    assert imp.ignored == ("--host 0.0.0.0", "--port 8080", "--temp 0.7", "--jinja")
    assert imp.unmodelled == ("--mtmd-batch-max-tokens 1024",)
    assert imp.given == frozenset({"model", "n_ctx", "n_parallel", "flash_attn", "lora"})


def test_import_powershell() -> None:
    text = (
        "$env:CUDA_VISIBLE_DEVICES = '1'\n"
        "& 'C:\\llama\\llama-server.exe' `\n"
        "  --model 'D:\\Models\\gemma 3\\gemma-3-27b-it-Q4_K_M.gguf' `\n"
        "  --ctx-size 8192 --n-gpu-layers 40 -ot 'blk\\.(4[0-9])\\.ffn_.*=CPU'\n"
    )
    imp = import_command(text)
    assert imp.shell is Shell.POWERSHELL
    assert imp.env == (("CUDA_VISIBLE_DEVICES", "1"),)
    assert imp.model_path == "D:\\Models\\gemma 3\\gemma-3-27b-it-Q4_K_M.gguf"
    assert imp.settings == LaunchSettings(
        n_ctx=8192, n_gpu_layers=40, tensor_overrides=(TensorOverride("blk\\.(4[0-9])\\.ffn_.*", "CPU"),)
    )


def test_import_cmd() -> None:
    text = (
        "set CUDA_VISIBLE_DEVICES=0\r\n"
        '"C:\\Program Files\\llama\\llama-server.exe" -m "D:\\My Models\\m.gguf" ^\r\n'
        "  -c 4096 -ctk q8_0 -ctv q8_0 --rpc 192.168.1.2:50052\r\n"
    )
    imp = import_command(text)
    assert imp.shell is Shell.CMD
    assert imp.env == (("CUDA_VISIBLE_DEVICES", "0"),)
    assert imp.program == "C:\\Program Files\\llama\\llama-server.exe"
    assert imp.settings == LaunchSettings(n_ctx=4096, cache_type_k="q8_0", cache_type_v="q8_0")
    assert imp.rpc_servers == ("192.168.1.2:50052",)


def test_import_flags_only_and_other_tools() -> None:
    imp = import_command("-m x.gguf -c 2048", Shell.SH)
    assert imp.program == ""
    assert imp.settings.n_ctx == 2048
    cli = import_command("./llama-cli -m x.gguf -c 2048", Shell.SH)
    assert cli.settings.tool is Tool.CLI
    with pytest.raises(FlagError):
        import_command("echo hello", Shell.SH)
    with pytest.raises(FlagError):
        import_command("llama-server --no-such-flag 1", Shell.SH)


def test_given_keys() -> None:
    assert given_keys(["-c", "4096", "--n-gpu-layers=20", "-kvu", "--temp", "1"]) == {
        "n_ctx",
        "n_gpu_layers",
        "kv_unified",
    }


# ---------------------------------------------------------------------------------------------------------------------
# Notes on what each flag saves
# ---------------------------------------------------------------------------------------------------------------------


def test_annotate_against_the_real_estimator() -> None:
    from fitplan.core.estimate.estimator import estimate

    profile = build_profile(
        open_model(SPARSE / "llama-3.1-8b.header.gguf", find_mmproj=False, allow_incomplete=True)
    )
    machine = Machine((assumed_gpu("A", 24),), host_device(64 * GIB))

    def fn(p, s, m):  # type: ignore[no-untyped-def]
        return estimate(p, s, m)

    s = LaunchSettings(
        n_ctx=8192, n_parallel=1, cache_type_k="q8_0", cache_type_v="q8_0", n_gpu_layers=20, fit=False
    )
    cmd = annotate(s, "/m/llama.gguf", profile, machine, fn)
    assert cmd.argv == plan_to_args(s, "/m/llama.gguf")
    by_flag = {n.flag: n for n in cmd.notes}
    # each note is the difference to the same launch with that one flag at its default
    gpu = sum(d.used_bytes for d in estimate(profile, s, machine).devices[:-1])
    f16_k = dataclasses.replace(s, cache_type_k="f16")
    assert by_flag["-ctk"].gpu_delta_bytes == gpu - sum(
        d.used_bytes for d in estimate(profile, f16_k, machine).devices[:-1]
    )
    assert by_flag["-ctk"].gpu_delta_bytes < 0
    assert by_flag["-ctk"].note.startswith("saves ")
    # -ngl 20 keeps 13 layers off the GPU: it saves GPU memory and costs host memory
    assert by_flag["-ngl"].gpu_delta_bytes < 0 < by_flag["-ngl"].host_delta_bytes
    assert "KV cache" in by_flag["-c"].note


def test_a_model_url_is_passed_with_mu_not_m() -> None:
    """llama-server's -m takes a local path; a URL is downloaded with -mu (--model-url)."""
    from fitplan.core.base.launch_settings import LaunchSettings
    from fitplan.core.launch.command_line import plan_to_args

    url = "https://huggingface.co/org/repo/resolve/main/model-00002-of-00003.gguf"
    argv = plan_to_args(LaunchSettings(), url)
    assert argv[1:3] == ("-mu", "https://huggingface.co/org/repo/resolve/main/model-00001-of-00003.gguf")
    assert "-m" not in argv
    assert plan_to_args(LaunchSettings(), "/models/x.gguf")[1:3] == ("-m", "/models/x.gguf")


def test_hub_model_is_written_as_hf_and_read_back() -> None:
    """`-hf ORG/REPO:QUANT` reads as the Hub model `hf.co/ORG/REPO:QUANT`, which is written as `-hf` again; a
    projector by URL is `-mmu`, and is left to llama-server with `-hf` (it fetches the repository's own)."""
    parsed = parse_flags(["-hf", "org/repo:Q4_K_M", "-c", "4096", "-mmu", "https://example.test/mm.gguf"])
    assert parsed.model_path == "hf.co/org/repo:Q4_K_M"
    args = plan_to_args(parsed.settings, parsed.model_path)
    assert args[1:5] == ("-hf", "org/repo:Q4_K_M", "-c", "4096")
    assert "-mmu" not in args and "--mmproj" not in args
    local = plan_to_args(parsed.settings, "/m/model.gguf")
    assert local[1:5] == ("-m", "/m/model.gguf", "-mmu", "https://example.test/mm.gguf")
