"""The command line starts like one: `--version` and `--help` load no numpy, no gguf-py, no Hub client and no
subcommand; a subcommand loads its own module only (`bench/cli_startup.py` times them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = (
    "numpy",
    "gguf",
    "gguf.constants",
    "fitplan.core.gguf.hub",
    "fitplan.core.gguf.remote",
    "http.client",
)

EXAMPLE = Path(__file__).resolve().parents[2] / "resources" / "examples" / "Llama-3.1-8B-Instruct-Q4_K_M.gguf"

PROBE = """
import contextlib, io, json, sys
from fitplan.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def modules_after(*args: str) -> tuple[int, set[str]]:
    """The exit status of `fitplan ARGS` in a fresh interpreter, and every module it imported."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True)
    doc = json.loads(done.stdout.splitlines()[-1])
    return doc["code"], set(doc["modules"])


@pytest.mark.parametrize("args", [("--version",), ("--help",)])
def test_version_and_help_import_nothing_heavy(args: tuple[str, ...]) -> None:
    code, modules = modules_after(*args)
    assert code == 0
    assert sorted(modules & set(HEAVY)) == []
    assert not any(m.startswith("fitplan.commands.") and m != "fitplan.commands._output" for m in modules)


def test_a_subcommand_imports_its_own_module_only() -> None:
    code, modules = modules_after("gpus", "--help")
    assert code == 0
    assert "fitplan.commands.gpus" in modules
    others = {m for m in modules if m.startswith("fitplan.commands.")} - {"fitplan.commands.gpus"}
    assert others <= {"fitplan.commands._output"}


def test_plan_reads_gguf_tables_without_the_gguf_package() -> None:
    # gguf-py's package imports its writer, numpy and yaml, and `gguf.constants` alone builds a few hundred enums;
    # the few tables fitplan reads are copied into `core.gguf.gguf_tables` (tests/gguf/test_gguf_tables.py)
    code, planned = modules_after("plan", str(EXAMPLE), "--assume-gpu", "24GiB", "--host-ram", "64GiB")
    assert code == 0
    assert "fitplan.core.gguf.gguf_tables" in planned
    assert "gguf" not in planned and "gguf.constants" not in planned and "yaml" not in planned


def test_plan_of_a_local_file_does_not_import_numpy() -> None:
    """The planner works in plain integers at one context at a time; numpy (a third of the start before) loads
    only where arrays are built (`core.base.lazy`): the window's context curve, the reader's bulk string walk."""
    code, planned = modules_after(
        "plan", str(EXAMPLE), "--assume-gpu", "24GiB", "--host-ram", "64GiB", "--json"
    )
    assert code == 0
    assert "numpy" not in planned
    assert "fitplan.core.memory.compute" in planned


#: what a plan of a local file on assumed GPUs never needs: the network (Hub client, sockets, TLS, HTTP), the
#: header caches of remote files (hashlib, pickle), the thread pool of remote loads (and logging), the GPU probes
#: (and their system calls: ctypes, subprocess), `platform` (the CPU's name comes from os.uname), the set planner,
#: `importlib.resources` (its zip and temporary-file support; bundled files are read by `base.files.package_text`)
NOT_FOR_A_LOCAL_PLAN = (
    "socket",
    "ssl",
    "http.client",
    "hashlib",
    "pickle",
    "concurrent.futures",
    "logging",
    "ctypes",
    "subprocess",
    "platform",
    "importlib.resources",
    "tempfile",
    "zipfile",
    "fitplan.core.gguf.remote_cache",
    "fitplan.core.gguf.header_cache",
    "fitplan.core.plan.multi",
    "fitplan.commands.plan_multi",
    "fitplan.core.hardware.nvidia",
    "fitplan.core.hardware.amd",
    "fitplan.core.hardware.intel",
    "fitplan.core.hardware.tegra",
)


def test_plan_of_a_local_file_imports_no_network_cache_probe_or_set_planner() -> None:
    code, planned = modules_after(
        "plan", str(EXAMPLE), "--assume-gpu", "24GiB", "--host-ram", "64GiB", "--json"
    )
    assert code == 0
    assert (
        "fitplan.core.speed" in planned and "fitplan.core.plan.alternatives" in planned
    )  # the plan was made
    assert sorted(planned & set(NOT_FOR_A_LOCAL_PLAN)) == []
