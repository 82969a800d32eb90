"""Reading llama-server's log: the recorded launches (tests/fixtures/launch, from the real llama-server), and single
lines written with llama.cpp's own format strings (the function that prints each is named beside it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fitplan.core.launch.server_log import (
    BufferKind,
    FailureKind,
    failure_in,
    needs_verbosity,
    parse_server_log,
    parse_version,
    strip_prefix,
)
from support.models import TESTS

LAUNCH = TESTS / "fixtures" / "launch"


def recording(name: str) -> dict[str, object]:
    return json.loads((LAUNCH / f"{name}.json").read_text())


def test_a_recorded_load_gives_every_buffer_and_the_exit_breakdown() -> None:
    rec = recording("loaded")
    load, exit_lines = rec["load"], rec["exit"]
    assert isinstance(load, list) and isinstance(exit_lines, list)
    log = parse_server_log([*load, *exit_lines])
    assert log.loaded and log.failure is None
    kinds = {(b.kind, b.buffer_type) for b in log.buffers}
    # the model is mapped from the file; K/V, output and compute are host buffers (no repacking: -nr)
    assert kinds == {
        (BufferKind.MODEL, "CPU_Mapped"),
        (BufferKind.KV, "CPU"),
        (BufferKind.OUTPUT, "CPU"),
        (BufferKind.COMPUTE, "CPU"),
    }
    # the K/V buffer is the cache's size line: 32 layers x 4096 cells x (8 x 128) x 2 (K, V) x 2 bytes = 512 MiB
    kv = log.of_kind(BufferKind.KV)[0]
    assert kv.mib == 512.0 and log.kv[0].size_mib == 512.0 and log.kv[0].cells == 4096
    assert len(log.buffer_lines) == len(log.buffers)
    assert log.breakdown and log.breakdown[0].row.startswith("Host")
    # the breakdown's row holds the same model, context and compute, in whole MiB
    total, model, context, compute = log.breakdown[0].values_mib
    assert (model, context) == (int(log.of_kind(BufferKind.MODEL)[0].mib), 512)
    assert total == model + context + compute
    assert log.devices and log.devices[0].name == "CPU"
    assert log.listening.startswith("http://127.0.0.1:")


@pytest.mark.parametrize(
    ("name", "kind", "words"),
    [
        ("oom", FailureKind.OUT_OF_MEMORY, "out of memory"),
        ("unknown-flag", FailureKind.UNKNOWN_FLAG, "-cnv"),
        ("port-in-use", FailureKind.PORT_IN_USE, "in use"),
    ],
)
def test_recorded_failures_are_one_line_each(name: str, kind: FailureKind, words: str) -> None:
    rec = recording(name)
    load = rec["load"]
    assert isinstance(load, list)
    log = parse_server_log(load)
    assert not log.loaded
    assert log.failure is not None and log.failure.kind is kind
    assert words in log.failure.message and "\n" not in log.failure.message


def test_the_recorded_oom_names_the_buffer_and_its_size() -> None:
    rec = recording("oom")
    load = rec["load"]
    assert isinstance(load, list)
    f = parse_server_log(load).failure
    assert f is not None
    # -c 131072: 32 layers x 131072 cells x 1024 x 2 x 2 bytes = 16 GiB of K/V cache, on the host's CPU buffer type
    assert f.requested_bytes == 16 << 30
    assert f.buffer_type == "CPU" and f.detail == "buffer for kv cache"


@pytest.mark.parametrize(
    ("line", "kind", "buffer_type", "size"),
    [
        # ggml-cuda.cu: ggml_backend_cuda_buffer_type_alloc_buffer
        (
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2048.00 MiB on device 1: cudaMalloc failed: "
            "out of memory",
            FailureKind.OUT_OF_MEMORY,
            "CUDA1",
            2048 << 20,
        ),
        # ggml-alloc.c: ggml_gallocr_reserve_n
        (
            "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1073741824",
            FailureKind.OUT_OF_MEMORY,
            "CUDA0",
            1 << 30,
        ),
        # llama-model.cpp: load_tensors
        ("llama_model_load: error loading model: unable to allocate CUDA0 buffer", FailureKind.OUT_OF_MEMORY,
         "CUDA0", 0),
        # common/arg.cpp
        ("error: invalid argument: --mystery", FailureKind.UNKNOWN_FLAG, "", 0),
        # tools/server/server-http.cpp
        ("srv          start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080",
         FailureKind.PORT_IN_USE, "", 0),
    ],
)  # fmt: skip
def test_failure_lines(line: str, kind: FailureKind, buffer_type: str, size: int) -> None:
    f = failure_in(line)
    assert f is not None and f.kind is kind
    assert (f.buffer_type, f.requested_bytes) == (buffer_type, size)


def test_a_load_error_without_a_known_cause_is_still_one_line() -> None:
    log = parse_server_log(["llama_model_load: error loading model: tensor 'x' has wrong shape"])
    assert log.failure is not None and log.failure.kind is FailureKind.LOAD_ERROR
    assert "wrong shape" in log.failure.message


def test_prefix_and_version() -> None:
    assert strip_prefix("0.01.234.567 I load_tensors: x") == "load_tensors: x"
    assert strip_prefix("load_tensors: CPU model") == "load_tensors: CPU model"
    # common/build-info.cpp.in: "version: %s (build %d, commit %s)"
    b = parse_version(
        "version: 0.6.0 (build 11434, commit 515e85511)\nbuilt with GNU 13.2.0 for Linux x86_64\n"
    )
    assert (b.build, b.commit) == (11434, "515e85511")
    assert b.text == "version: 0.6.0 (build 11434, commit 515e85511) built with GNU 13.2.0 for Linux x86_64"
    # a build from a source archive knows neither
    unknown = parse_version("version: 0.6.0-dev (build 0, commit unknown)")
    assert (unknown.build, unknown.commit) == (None, "")
    assert parse_version("version: 11434 (515e85511)").commit == "515e85511"  # the older spelling
    assert parse_version("something else").build is None


@pytest.mark.parametrize(
    ("argv", "needed"),
    [
        ([], True),
        (["-lv", "4"], False),
        (["--verbosity=5"], False),
        (["-lv", "3"], True),
        (["-v"], False),
        (["--log-verbosity", "x"], True),
    ],
)
def test_the_verbosity_the_buffer_lines_need(argv: list[str], needed: bool) -> None:
    assert needs_verbosity(argv) is needed


def test_recordings_name_their_build_and_command() -> None:
    for p in sorted(Path(LAUNCH).glob("*.json")):
        rec = json.loads(p.read_text())
        assert rec["llama_cpp"]["commit"] and rec["llama_cpp"]["build"], p.name
        assert rec["command"][0] == "llama-server", p.name
