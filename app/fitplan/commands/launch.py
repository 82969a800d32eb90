"""`fitplan launch MODEL [llama-server flags...]`: start llama-server with the planned command and check it.

The plan is `fitplan plan`'s (the same flags are pins). llama-server is the one given with `--llama-bin` (its folder
or the binary), else the one on PATH, else the one in the folder the window remembers. Its log streams to stderr
(`--quiet`: not) and to a log file; `-lv 4` is added when the command's verbosity would hide the buffer lines. Once
the model is loaded, the estimate is printed beside llama.cpp's buffers, device by device and term by term, with the
error band the estimate claimed and, where the device's real usage can be read, what is unaccounted. Then the server
runs until Ctrl+C (`--check`: it is stopped at once). `--save-check FILE` writes the check as JSON, in the shape of
fitplan's recordings: build, devices, command, buffer lines and the comparison.

Exit status: 0 loaded (and stopped cleanly), 1 out of memory while loading, 2 any other failure (no binary, unknown
flag, port in use, a crash), with the log kept.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from fitplan import __version__
from fitplan.commands import _output as out
from fitplan.commands.estimate import add_flags_parser
from fitplan.commands.plan import PlanRequest, add_common_arguments, build_request, command_argv, make_plan
from fitplan.core.base.devices import MIB
from fitplan.core.base.errors import FitplanError
from fitplan.core.base.launch_settings import Engine
from fitplan.core.base.numbers import NumberError, parse_real
from fitplan.core.estimate.accuracy import accuracy_band
from fitplan.core.launch.launch_check import LaunchCheck, machine_after_oom, save_check
from fitplan.core.launch.launcher import Launcher, LaunchPlan, LaunchReport, new_log_file
from fitplan.core.launch.server_log import FailureKind
from fitplan.core.launch.server_process import SERVER, find_server

EXAMPLES = """examples:
  fitplan launch model.gguf                                  plan, start llama-server, compare; Ctrl+C stops it
  fitplan launch model.gguf -c 16384 --llama-bin ~/llama.cpp/build/bin
  fitplan launch model.gguf --check --save-check check.json  load, compare, stop, save the check
  fitplan launch model.gguf --port 8081 --quiet              the server's flags go into the command
"""


def register(subparsers: Any) -> None:
    p = add_flags_parser(
        subparsers,
        "launch",
        "start llama-server with the planned command and compare what it allocated with the estimate",
        __doc__,
        EXAMPLES,
        usage="fitplan launch MODEL [llama-server flags...] [options]",
    )
    add_common_arguments(p)
    p.add_argument("--llama-bin", metavar="PATH", help=f"the {SERVER} binary or its folder (default: PATH)")
    p.add_argument("--timeout", default="600", help="seconds to wait for the model to load (at most a day)")
    p.add_argument("--check", action="store_true", help="stop the server once the check is made")
    p.add_argument("--save-check", metavar="FILE", help="write the check as JSON (the recordings' shape)")
    p.add_argument(
        "--log-file", metavar="FILE", help="keep the server's log here (default: a temporary file)"
    )
    p.add_argument("--quiet", action="store_true", help="do not stream the server's log to stderr")
    p.add_argument("--json", action="store_true", help="print one JSON document (the check) on stdout")
    p.set_defaults(handler=run, accepts_extra=True)


def _binary(given: str | None) -> str:
    if given:
        return find_server(given)
    try:
        return find_server(None)
    except FitplanError:
        from fitplan.core.inputs.user_settings import load_user_settings

        remembered = load_user_settings().settings.llama_bin_dir
        if remembered:
            with contextlib.suppress(FitplanError):
                return find_server(remembered)
        raise


def _mib(n: int) -> str:
    return f"{n / MIB:.2f}"


def check_table(check: LaunchCheck) -> str:
    """Estimate vs allocated per device and term, with the band and the verdict of each."""
    rows: list[list[object]] = []
    for d in check.devices:
        for t in d.terms:
            rel = f" ({t.difference_bytes / t.allocated_bytes:+.1%})" if t.allocated_bytes else ""
            verdict = {True: "within", False: "OUTSIDE", None: "-"}[t.within]
            band = t.tolerance.text if t.tolerance else "none claimed"
            rows.append(
                [d.device, t.name, _mib(t.estimate_bytes), _mib(t.allocated_bytes),
                 f"{t.difference_bytes / MIB:+.2f}{rel}", band, verdict]
            )  # fmt: skip
    lines = [
        out.table(
            ["device", "term", "estimate MiB", "allocated MiB", "difference", "band", ""],
            rows,
            align="llrrrll",
        )
    ]
    lines += [d.usage_text() for d in check.devices if d.usage_text()]
    lines.append(f"band: {check.band_text}")
    return "\n".join(lines)


def report_json(launcher: Launcher, report: LaunchReport) -> dict[str, object]:
    doc: dict[str, object] = {
        "command": list(launcher.argv),
        "build": {"build": report.build.build, "commit": report.build.commit},
        "loaded": report.check is not None,
        "failure": None,
        "log_file": str(report.log_file) if report.log_file else None,
    }
    if report.failure is not None:
        doc["failure"] = {"kind": report.failure.kind.value, "message": launcher.failure_text(report)}
    if report.check is not None:
        doc["check"] = launcher.document(report)["cases"][0]["check"]
    return doc


def _on_sigterm(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace, extra: list[str]) -> int:
    try:
        timeout = parse_real(args.timeout, 1, 86400)
    except NumberError as exc:
        return out.error(f"--timeout: {exc}")
    binary = _binary(args.llama_bin)
    req = build_request(args, extra)
    p = make_plan(req)
    if p.settings.engine is not Engine.LLAMA_CPP:
        return out.error("launch runs llama.cpp's llama-server (--engine llama.cpp)")
    if p.estimate is None:
        return out.error(f"nothing to launch: {p.binding}")
    if not p.fits:
        out.warn(f"the plan does not fit ({p.binding}); launching it anyway, as asked")
    model = req.model_arg
    size = os.path.getsize(model) if os.path.isfile(model) else None
    plan = LaunchPlan(
        command_argv(req, p, SERVER), p.estimate, accuracy_band(req.profile, p.estimate), model, size
    )
    echo = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    launcher = Launcher(plan, binary, echo, Path(args.log_file) if args.log_file else new_log_file())
    print(out.style("$ " + " ".join(launcher.argv), out.DIM), file=sys.stderr)
    old = signal.signal(signal.SIGTERM, _on_sigterm) if hasattr(signal, "SIGTERM") else None
    try:
        launcher.start()
        try:
            report = launcher.wait(timeout)
            if report.check is None:
                report = launcher.stop()
                return _failed(args, launcher, report, req)
            _show(args, launcher, report)
            if not args.check:
                _serve(launcher, report)
        except KeyboardInterrupt:
            print("stopping llama-server…", file=sys.stderr)
        report = launcher.stop()
        if report.check is not None and args.save_check:
            save_check(args.save_check, launcher.document(report, __version__))
            print(f"check saved to {args.save_check}", file=sys.stderr)
        return out.EXIT_OK
    finally:
        launcher.close()
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _serve(launcher: Launcher, report: LaunchReport) -> None:
    where = report.result.log.listening or "its port"
    print(f"llama-server runs on {where} (pid {report.result.pid}); Ctrl+C stops it", file=sys.stderr)
    while launcher.run.running:
        time.sleep(0.5)
    print("llama-server exited", file=sys.stderr)


def _show(args: argparse.Namespace, launcher: Launcher, report: LaunchReport) -> None:
    assert report.check is not None
    if args.json:
        out.print_json(report_json(launcher, report))
        return
    print(f"llama-server {report.build.text or '(version unknown)'}")
    print(check_table(report.check))
    c = report.check
    if c.all_within:
        print(out.style("every term within the estimate's band", out.GREEN))
    elif c.outside:
        names = ", ".join(f"{d} {t.name}" for d, t in c.outside)
        print(out.style(f"outside the estimate's band: {names}", out.YELLOW))


def _failed(args: argparse.Namespace, launcher: Launcher, report: LaunchReport, req: PlanRequest) -> int:
    if args.json:
        out.print_json(report_json(launcher, report))
    text = launcher.failure_text(report) or "llama-server did not load the model"
    out.error(f"{text} (the log: {report.log_file})")
    f = report.failure
    if f is None or f.kind is not FailureKind.OUT_OF_MEMORY:
        return out.EXIT_BAD_INPUT
    machine = machine_after_oom(f, launcher.plan.estimate, req.machine)
    if machine is not None and not args.json:
        again = make_plan(dataclasses.replace(req, machine=machine))
        if again.fits:
            argv = command_argv(req, again, SERVER)
            print(f"the plan for that much less free memory: {' '.join(argv)}", file=sys.stderr)
        else:
            print(f"with that much less free memory nothing fits: {again.binding}", file=sys.stderr)
    return out.EXIT_DOES_NOT_FIT
