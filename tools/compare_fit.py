#!/usr/bin/env python3
"""fitplan's plan beside llama.cpp's own `--fit` answer (llama-fit-params), for the same devices and margin.

The devices are loopback `ggml-rpc-server` instances of a local llama.cpp build. An RPC device reports its host's
memory, so a smaller card is emulated with a larger fit margin: for a card of C MiB and a margin of M MiB,
llama-fit-params gets `-fitt (free - C + M)`, which leaves it exactly C - M MiB to fill, the same as fitplan with a
C MiB device and margin M. Both placements are then measured by llama.cpp itself (`llama-fit-params -fitp on`,
model + context + compute per device in MiB) and estimated by fitplan, side by side.

A header-only model (such as tests/fixtures/llamacpp/models/sparse/*.header.gguf) is extended into a sparse file
of its declared size in a temporary folder first; llama.cpp's dry run reads no tensor data.

Usage:
    python tools/compare_fit.py MODEL --card 8 --card 6 [--margin 1024] [--bin BUILD/bin] [-- LLAMA FLAGS...]

Exit code 0 when llama.cpp's own measurement keeps fitplan's placement within every card's limit, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "app"))


from fitplan.core.base.devices import GIB, MIB, Machine, host_device  # noqa: E402
from fitplan.core.base.launch_settings import LaunchSettings, Tool  # noqa: E402
from fitplan.core.estimate.estimator import estimate  # noqa: E402
from fitplan.core.gguf.reader import open_model  # noqa: E402
from fitplan.core.launch.command_line import given_keys, plan_to_args  # noqa: E402
from fitplan.core.launch.flags import parse_flags  # noqa: E402
from fitplan.core.launch.rpc import RpcServer, with_rpc  # noqa: E402
from fitplan.core.model.builder import build_profile  # noqa: E402
from fitplan.core.model.profile import ModelProfile  # noqa: E402
from fitplan.core.plan.pins import pins_from_settings  # noqa: E402
from fitplan.core.plan.planner import MarginPolicy, Plan, plan  # noqa: E402

DEFAULT_BIN = Path("/work/llama/build/bin")
RE_DEVICE = re.compile(r"^\s*(RPC\d+): (\S+) \((\d+) MiB, (\d+) MiB free\)")
RE_FITP = re.compile(r"^(\S+) (\d+) (\d+) (\d+)\s*$")


@dataclass
class Servers:
    procs: list[subprocess.Popen[bytes]]
    endpoints: list[str]

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()


def _env(bin_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{bin_dir}:{env.get('LD_LIBRARY_PATH', '')}"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_servers(bin_dir: Path, n: int) -> Servers:
    procs: list[subprocess.Popen[bytes]] = []
    eps: list[str] = []
    for _ in range(n):
        port = _free_port()
        procs.append(
            subprocess.Popen(
                [str(bin_dir / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(port)],
                env=_env(bin_dir),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        eps.append(f"127.0.0.1:{port}")
    servers = Servers(procs, eps)
    deadline = time.monotonic() + 15
    for ep in eps:
        host, port = ep.split(":")
        while True:
            try:
                with socket.create_connection((host, int(port)), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    servers.stop()
                    raise SystemExit(f"ggml-rpc-server on {ep} did not start") from None
                time.sleep(0.1)
    return servers


def fit_params(bin_dir: Path, args: Sequence[str]) -> str:
    r = subprocess.run(
        [str(bin_dir / "llama-fit-params"), *args],
        env=_env(bin_dir),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0:
        tail = "\n".join(r.stderr.splitlines()[-15:])
        raise SystemExit(f"llama-fit-params {' '.join(args)} failed ({r.returncode}):\n{tail}")
    return r.stdout


def device_memory(bin_dir: Path, endpoints: Sequence[str]) -> dict[str, int]:
    """Free MiB of each RPC device, as llama.cpp sees it."""
    out = subprocess.run(
        [str(bin_dir / "llama-fit-params"), "--rpc", ",".join(endpoints), "--list-devices"],
        env=_env(bin_dir), capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    free: dict[str, int] = {}
    for line in out.splitlines():
        if m := RE_DEVICE.match(line):
            free[m.group(2)] = int(m.group(4))
    return free


def measure(bin_dir: Path, model: Path, endpoints: Sequence[str], args: Sequence[str]) -> dict[str, int]:
    """llama.cpp's own memory (model + context + compute, MiB) per device for `args`."""
    text = fit_params(bin_dir, ["-m", str(model), "--rpc", ",".join(endpoints), *args, "-fitp", "on"])
    rows: dict[str, int] = {}
    for line in text.splitlines():
        if m := RE_FITP.match(line.strip()):
            rows[m.group(1)] = int(m.group(2)) + int(m.group(3)) + int(m.group(4))
    return rows


def sparse_copy(model: Path, work: Path) -> Path:
    """The model itself when complete, else its header extended to the declared size (a sparse file)."""
    files = open_model(model, find_mmproj=False, allow_incomplete=True)
    h = files.main
    expected = h.expected_file_size
    actual = model.stat().st_size
    if expected <= actual:
        return model
    dst = work / model.name.replace(".header.gguf", ".gguf")
    shutil.copyfile(model, dst)
    os.truncate(dst, expected)
    return dst


def fitplan_estimate_mib(prof: ModelProfile, settings: LaunchSettings, machine: Machine) -> dict[str, int]:
    est = estimate(prof, settings, machine)
    out: dict[str, int] = {}
    for i, d in enumerate(est.devices[:-1]):
        out[f"RPC{i}"] = d.used_bytes // MIB
    out["Host"] = est.devices[-1].used_bytes // MIB
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument(
        "--card", type=float, action="append", required=True, metavar="GIB", help="one emulated GPU"
    )
    ap.add_argument(
        "--margin", type=int, default=1024, metavar="MiB", help="fit margin per device (default 1024)"
    )
    ap.add_argument("--bin", type=Path, default=DEFAULT_BIN, help="llama.cpp build/bin with ggml-rpc-server")
    args = list(sys.argv[1:] if argv is None else argv)
    flags: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, flags = args[:cut], args[cut + 1 :]
    a = ap.parse_args(args)
    for exe in ("ggml-rpc-server", "llama-fit-params"):
        if not (a.bin / exe).exists():
            print(f"{a.bin / exe} not found: build llama.cpp with -DGGML_RPC=ON first", file=sys.stderr)
            return 2

    with tempfile.TemporaryDirectory(prefix="compare-fit-") as tmp:
        model = sparse_copy(a.model, Path(tmp))
        prof = build_profile(open_model(model, find_mmproj=False))
        servers = start_servers(a.bin, len(a.card))
        try:
            free = device_memory(a.bin, servers.endpoints)
            cards_mib = [int(c * 1024) for c in a.card]
            fitt = [free[ep] - c + a.margin for ep, c in zip(servers.endpoints, cards_mib, strict=True)]
            if min(fitt) < 0:
                print(f"a card is larger than the memory an RPC device reports ({free}); use smaller cards")
                return 2
            eps = ",".join(servers.endpoints)
            llama_args = shlex.split(
                fit_params(a.bin, ["-m", str(model), "--rpc", eps, "-fitt", ",".join(map(str, fitt)), *flags])
            )

            rpc = [
                RpcServer("127.0.0.1", int(ep.split(":")[1]), c * MIB)
                for ep, c in zip(servers.endpoints, cards_mib, strict=True)
            ]
            machine = with_rpc(Machine((), host_device(64 * GIB)), rpc)
            parsed = parse_flags(flags, LaunchSettings(tool=Tool.FIT_PARAMS))
            pins = pins_from_settings(parsed.settings, given_keys(flags))
            margin = MarginPolicy(gpu_margin_bytes=a.margin * MIB, check_host=False)
            p: Plan = plan(prof, machine, pins, margin=margin)
            ours = [x for x in plan_to_args(p, None, program="") if x not in ("--fit", "off")]
            ours_fit = [*flags_without_placement(flags), *ours]

            llama_settings = parse_flags([*flags, *llama_args], LaunchSettings(tool=Tool.FIT_PARAMS)).settings
            rows = {
                "llama.cpp measures llama-fit-params' placement": measure(
                    a.bin, model, servers.endpoints, [*flags, *llama_args]
                ),
                "fitplan estimates llama-fit-params' placement": fitplan_estimate_mib(
                    prof, llama_settings, machine
                ),
                "llama.cpp measures fitplan's placement": measure(a.bin, model, servers.endpoints, ours_fit),
                "fitplan estimates fitplan's placement": fitplan_estimate_mib(
                    prof, replace(p.settings), machine
                ),
            }
        finally:
            servers.stop()

    print(
        f"model: {a.model.name} ({prof.architecture}, {prof.n_layer} layers, n_ctx_train {prof.n_ctx_train})"
    )
    cards = ", ".join(f"RPC{i} {c:g} GiB" for i, c in enumerate(a.card))
    print(f"devices: {cards}; margin {a.margin} MiB; extra flags: {' '.join(flags) or '(none)'}")
    print(f"llama-fit-params: {' '.join(llama_args)}")
    print(f"fitplan:          {' '.join(ours)}    ({p.binding})")
    names = [f"RPC{i}" for i in range(len(a.card))]
    limit = {f"RPC{i}": c - a.margin for i, c in enumerate(cards_mib)}
    width = max(len(k) for k in rows)
    print(" " * width + "  " + "  ".join(f"{n:>9}" for n in names) + "  (MiB; limit = card - margin)")
    print(f"{'limit':<{width}}  " + "  ".join(f"{limit[n]:>9}" for n in names))
    for label, vals in rows.items():
        cells = []
        for n in names:
            v = vals.get(n, 0)
            mark = "!" if v > limit[n] else " "
            cells.append(f"{v:>8}{mark}")
        print(f"{label:<{width}}  " + "  ".join(cells))
    over = [n for n in names if rows["llama.cpp measures fitplan's placement"].get(n, 0) > limit[n]]
    print(
        "fitplan's placement per llama.cpp: "
        + ("OVER the limit on " + ", ".join(over) if over else "within every limit")
    )
    return 1 if over else 0


def flags_without_placement(flags: Sequence[str]) -> list[str]:
    """The user's flags minus those the plan writes itself (so they are not given twice)."""
    drop_with_value = {"-c", "--ctx-size", "-ngl", "--gpu-layers", "--n-gpu-layers", "-ts", "--tensor-split",
                       "-ncmoe", "--n-cpu-moe"}  # fmt: skip
    out: list[str] = []
    skip = False
    for f in flags:
        if skip:
            skip = False
            continue
        if f in drop_with_value:
            skip = True
            continue
        out.append(f)
    return out


if __name__ == "__main__":
    sys.exit(main())
