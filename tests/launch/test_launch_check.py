"""The estimate beside a real launch's buffers (the recorded llama-server load of tests/fixtures/launch), judged
against the estimate's error band; the saved check, in the recordings' shape, read back."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fitplan.core.base.devices import GIB, MIB, Device, DeviceKind, Machine, Vendor, host_device
from fitplan.core.base.errors import FitplanError
from fitplan.core.base.results import Estimate, TermKind
from fitplan.core.estimate.accuracy import accuracy_band
from fitplan.core.estimate.estimator import estimate
from fitplan.core.gguf.reader import read_header
from fitplan.core.hardware.usage import ProcessUse, host_use, nvml_use
from fitplan.core.launch.flags import parse_flags
from fitplan.core.launch.launch_check import (
    check_document,
    compare,
    device_of_buffer,
    failure_line,
    load_check,
    machine_after_oom,
    save_check,
)
from fitplan.core.launch.server_log import (
    BufferKind,
    BufferLine,
    BuildInfo,
    FailureKind,
    ServerFailure,
    parse_server_log,
)
from fitplan.core.model.builder import build_profile
from fitplan.core.model.profile import ModelProfile
from support.models import TESTS

LAUNCH = TESTS / "fixtures" / "launch"
HEADER = TESTS / "fixtures" / "llamacpp" / "models" / "sparse" / "llama-3.1-8b.header.gguf"
SERVER_RECORDING = TESTS / "fixtures" / "llamacpp" / "server" / "llama-3.1-8b.json"


def recorded(name: str = "loaded") -> tuple[list[str], list[str]]:
    rec = json.loads((LAUNCH / f"{name}.json").read_text())
    return rec["command"], [*rec["load"], *rec["exit"]]


def profile() -> ModelProfile:
    return build_profile(read_header(HEADER, allow_incomplete=True))


def estimate_of(command: list[str], machine: Machine | None = None) -> Estimate:
    args = list(command[1:])
    i = args.index("-m")
    del args[i : i + 2]
    settings = parse_flags(args).settings
    return estimate(profile(), settings, machine or Machine((), host_device(64 * GIB)))


def test_the_recorded_launch_is_within_the_band_on_every_term() -> None:
    command, lines = recorded()
    est = estimate_of(command)
    log = parse_server_log(lines)
    check = compare(est, log, accuracy_band(profile(), est))
    assert [d.device for d in check.devices] == ["Host"]
    terms = {t.term: t for t in check.devices[0].terms}
    assert set(terms) == {TermKind.WEIGHTS, TermKind.KV, TermKind.OUTPUT, TermKind.COMPUTE}
    assert check.all_within, [(t.term, t.estimate_bytes, t.allocated_bytes) for _, t in check.judged]
    assert terms[TermKind.OUTPUT].within is None  # no band is claimed for the output buffer
    # every judged term: weights, K/V and compute
    assert {t.term for _, t in check.judged} == {TermKind.WEIGHTS, TermKind.KV, TermKind.COMPUTE}


def test_repacked_weights_are_compared_apart_from_the_mapped_file() -> None:
    """With repacking on, llama.cpp allocates CPU_REPACK for the weights it repacks and maps the file besides: the
    check puts each beside its own part of the estimate."""
    command, lines = recorded("repack")
    est = estimate_of(command)
    log = parse_server_log(lines)
    check = compare(est, log, accuracy_band(profile(), est))
    weights = {t.label: t for t in check.devices[0].terms if t.term is TermKind.WEIGHTS}
    assert set(weights) == {"", "CPU_REPACK"}
    repack = next(b for b in log.buffers if b.buffer_type == "CPU_REPACK")
    mapped = next(b for b in log.buffers if b.buffer_type == "CPU_Mapped")
    assert weights["CPU_REPACK"].allocated_bytes == repack.bytes and weights["CPU_REPACK"].within
    assert weights[""].allocated_bytes == mapped.bytes
    assert weights["CPU_REPACK"].name == "weights (CPU_REPACK)"
    # the mapped buffer is the span of the file a real load maps (4932.80 MiB here, the repacked weights inside it),
    # which the estimate gives apart from its weights (the tensors, 2268.80 MiB, as llama.cpp's dry run counts them)
    assert (
        weights[""].estimate_bytes
        == est.weights_mapped_span
        > est.devices[-1].bytes_of(TermKind.WEIGHTS) // 2
    )
    assert weights[""].within, (weights[""].estimate_bytes, weights[""].allocated_bytes)
    assert check.all_within
    # without the span the mapped row would be 2664 MiB short: the tensors alone
    tensors = est.devices[-1].bytes_of(TermKind.WEIGHTS) - weights["CPU_REPACK"].estimate_bytes
    assert round((mapped.bytes - tensors) / 2**20) == 2664


def test_a_compute_buffer_off_by_ten_percent_is_outside_the_band() -> None:
    command, lines = recorded()
    est = estimate_of(command)
    log = parse_server_log(lines)
    bigger = tuple(
        dataclasses.replace(b, mib=round(b.mib * 1.1, 2)) if b.kind is BufferKind.COMPUTE else b
        for b in log.buffers
    )
    check = compare(est, dataclasses.replace(log, buffers=bigger), accuracy_band(profile(), est))
    assert not check.all_within
    assert [(d, t.term) for d, t in check.outside] == [("Host", TermKind.COMPUTE)]


def test_without_a_band_nothing_is_judged() -> None:
    command, lines = recorded()
    check = compare(estimate_of(command), parse_server_log(lines), None)
    assert check.judged == () and not check.all_within
    assert check.band_text == "no error band claimed"


def test_unaccounted_is_usage_less_the_allocated_buffers_leaving_the_mapped_file_out() -> None:
    command, lines = recorded()
    log = parse_server_log(lines)
    used = ProcessUse("Host", 1000 * MIB, "RSS (anonymous)")
    d = compare(estimate_of(command), log, None, [used]).devices[0]
    allocated = sum(b.bytes for b in log.buffers if b.kind is not BufferKind.MODEL)
    assert d.unaccounted_bytes == 1000 * MIB - allocated


def test_buffer_types_go_to_their_device() -> None:
    gpus = ["CUDA0", "CUDA1", "RPC0[127.0.0.1:50052]"]
    assert device_of_buffer("CUDA0", gpus) == "CUDA0"
    assert device_of_buffer("CUDA1_Split", gpus) == "CUDA1"
    assert device_of_buffer("CUDA_Host", gpus) == "Host"
    assert device_of_buffer("CPU_REPACK", gpus) == "Host"
    assert device_of_buffer("RPC0[127.0.0.1:50052]", gpus) == "RPC0[127.0.0.1:50052]"
    assert device_of_buffer("Vulkan0", gpus) == "Vulkan0"  # not planned: a row of its own


def test_a_gpu_oom_says_the_device_and_what_the_plan_counted_free() -> None:
    gpu = Device("RTX 4070", DeviceKind.GPU, 12 * GIB, 11 * GIB, Vendor.NVIDIA)
    command, _ = recorded()
    est = estimate_of([*command, "-ngl", "99"], Machine((gpu,), host_device(64 * GIB)))
    f = ServerFailure(FailureKind.OUT_OF_MEMORY, "out of memory", "CUDA0", 12 * GIB)
    line = failure_line(f, est)
    assert "RTX 4070" in line and "11264 MiB free" in line
    assert "1024 MiB more than was free" in line  # 12 GiB asked, 11 GiB free


def test_after_an_oom_the_device_has_the_failed_allocation_less_free() -> None:
    gpu = Device("RTX 4070", DeviceKind.GPU, 12 * GIB, 11 * GIB, Vendor.NVIDIA)
    machine = Machine((gpu,), host_device(64 * GIB))
    command, _ = recorded()
    est = estimate_of([*command, "-ngl", "99"], machine)
    oom = ServerFailure(FailureKind.OUT_OF_MEMORY, "out of memory", "CUDA0", 2 * GIB)
    after = machine_after_oom(oom, est, machine)
    assert after is not None and after.gpus[0].free_bytes == 9 * GIB and after.host == machine.host
    crash = ServerFailure(FailureKind.CRASH, "crash")
    assert machine_after_oom(crash, est, machine) is None
    assert machine_after_oom(dataclasses.replace(oom, requested_bytes=0), est, machine) is None


def test_the_saved_check_has_the_recordings_shape_and_loads_back(tmp_path: Path) -> None:
    command, lines = recorded()
    est = estimate_of(command)
    log = parse_server_log(lines)
    check = compare(est, log, accuracy_band(profile(), est))
    build = BuildInfo(11434, "515e85511", "version: 11434 (515e85511)")
    argv = ["/opt/llama/bin/llama-server", *command[1:]]
    argv[argv.index("-m") + 1] = "/models/llama.gguf"
    doc = check_document(check, log, build, argv, "/models/llama.gguf", 123)
    server = json.loads(SERVER_RECORDING.read_text())
    assert set(server) - {"model"} <= set(doc)
    assert set(server["cases"][0]["results"]) == set(doc["cases"][0]["results"])
    assert doc["cases"][0]["command"][0] == "llama-server" and "llama.gguf" in doc["cases"][0]["command"]
    path = save_check(tmp_path / "check.json", doc)
    back = load_check(path)
    assert (back.build.build, back.build.commit) == (11434, "515e85511")
    assert back.devices == log.devices
    assert back.command == tuple(doc["cases"][0]["command"])
    assert back.log.buffers == log.buffers
    assert back.log.breakdown == log.breakdown
    assert back.log.kv == log.kv
    assert back.log.buffer_lines == log.buffer_lines
    assert len(back.rows) == sum(len(d.terms) for d in check.devices)
    assert back.band_text == check.band_text
    # the comparison read back is the comparison made
    again = compare(est, back.log, accuracy_band(profile(), est))
    assert [(t.term, t.allocated_bytes) for t in again.devices[0].terms] == [
        (t.term, t.allocated_bytes) for t in check.devices[0].terms
    ]


def test_a_file_that_is_not_a_check_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text('{"cases": []}')
    with pytest.raises(FitplanError, match="not a saved launch check"):
        load_check(p)
    with pytest.raises(FitplanError, match="cannot read"):
        load_check(tmp_path / "missing.json")


def test_host_use_reads_the_anonymous_resident_set(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "status").write_text(
        "Name:\tllama-server\nVmRSS:\t  204800 kB\nRssAnon:\t  153600 kB\nRssFile:\t   51200 kB\n"
    )
    u = host_use(42, tmp_path)
    assert u is not None and u.used_bytes == 150 * MIB and "file-backed 50 MiB" in u.detail
    assert host_use(43, tmp_path) is None


def test_buffer_bytes_are_the_printed_mib() -> None:
    assert BufferLine(BufferKind.KV, "CPU", 512.0).bytes == 512 * MIB


def test_nvml_use_is_the_process_figure_per_gpu() -> None:
    from types import SimpleNamespace

    procs = {
        0: [SimpleNamespace(pid=7, usedGpuMemory=300 * MIB)],
        1: [SimpleNamespace(pid=8, usedGpuMemory=1)],
    }
    nvml = SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetComputeRunningProcesses=lambda h: procs[h],
    )
    assert nvml_use(7, lambda: nvml) == (ProcessUse("CUDA0", 300 * MIB, "NVML (process)"),)

    def missing() -> object:
        raise ImportError("no pynvml")

    assert nvml_use(7, missing) == ()
