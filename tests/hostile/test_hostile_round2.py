"""Hostile-input suite, round two (issue 25): the classes the Hub listings, pasting, settings and exports opened.

One seeded generator per class; each test prints its count of cases and failures (`pytest -s`). Cases that run
fitplan's command line go through the forked, memory- and time-capped harness of `support.hostile`; the others
call the core in-process. The classes:

1. numbers from outside (flags, sizes, ports, Content-Range, `blk.N`, any `{arch}.*` key, JSON), and a walk of the
   sources: no `int()`/`float()` on text outside `fitplan.core.base.numbers`, no `json.loads` beside it;
2. text: Hub listing paths that are not text, file names with undecodable bytes in exported commands;
3. work bounded by the input: many files, many projectors, millions of tensor infos, long tensor names with `-ot`,
   a 16 MiB architecture string, a link to `/`;
4. the library scan on impossible split parts and `~nosuchuser` paths;
5. device limits as totals;
6. fitplan's own exports pasted back with the shell guessed, and program words each shell reads specially
   (checked against models of each shell's documented grammar where the shell is not installed here);
8. settings: unknown fields, transient read errors, one bad number, a linked settings file.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import http.server
import json
import math
import os
import random
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fitplan.core.base.errors import FitplanError
from fitplan.core.launch.command_line import import_command
from fitplan.core.launch.shell import Shell, join, split
from support.hostile import (
    Case,
    Outcome,
    base_kvs,
    base_tensors,
    counts_line,
    raw_gguf,
    run_cases,
    write_gguf,
)
from support.hub import HubState, fake_hub, serve

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="forked harness, POSIX files")

SEED = 25
APP = Path(__file__).resolve().parents[2] / "app" / "fitplan"


def _good(folder: Path, name: str = "good.gguf", kvs: dict[str, tuple[str, object]] | None = None) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    return write_gguf(folder / name, "llama", kvs or base_kvs(), base_tensors(2))


def _report(name: str, cases: list[Case]) -> None:
    report = run_cases(cases)
    print(counts_line(name, report))
    assert not report.failures, "\n".join(report.failures[:30])


# -- class 1: numbers ---------------------------------------------------------------------------------------------


def _hostile_number(rng: random.Random) -> str:
    return rng.choice(
        (
            "9" * rng.choice((25, 400, 4301, 5000)),
            "-" + "9" * 5000,
            "nan",
            "inf",
            "-inf",
            "1e400",
            "\u0661\u0662",
            "1_0",
            "0x10",
            "",
        )
    )


#: `{arch}.` keys the profile builder reads (any of them may hold a NaN or an infinity).
_ARCH_KEYS = (
    "attention.indexer.block_size",
    "attention.indexer.head_count",
    "attention.indexer.key_length",
    "attention.indexer.top_k",
    "attention.sliding_window",
    "rope.dimension_count",
    "rope.scaling.factor",
    "rope.freq_base",
    "expert_count",
    "ssm.conv_kernel",
    "context_length",
    "feed_forward_length",
    "attention.key_length",
)


@contextmanager
def _range_server(total: str, log: list[str] | None = None) -> Iterator[str]:
    """A server that answers every range request with 206 and a Content-Range whose total is `total` (each request's
    Range header is appended to `log`)."""
    body = raw_gguf({"general.architecture": "llama"})

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if log is not None:
                log.append(self.headers.get("Range", ""))
            m = re.match(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
            a, b = (int(m.group(1)), int(m.group(2))) if m else (0, len(body) - 1)
            chunk = body[a : b + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{a + max(len(chunk), 1) - 1}/{total}")
            self.send_header("Content-Length", str(len(chunk)))
            self.end_headers()
            self.wfile.write(chunk)

    with serve(H) as base:
        yield f"{base}/m.gguf"


def test_class1_numbers_from_outside(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    good = _good(tmp_path / "m")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "llama-fit-params").write_text("#!/bin/sh\nexit 0\n")
    (fake_bin / "llama-fit-params").chmod(0o755)
    cases: list[Case] = []
    for i in range(40):
        x = _hostile_number(rng)
        flag = rng.choice(
            (
                ("--host-ram", x),
                ("--host-ram", x + "GiB"),
                ("--assume-gpu", x + "GiB"),
                ("--assume-gpu", f"{x}x24GiB"),
                ("--assume-gpu", f"RTX 4090={x}GiB"),
                ("--rpc", f"10.0.0.2:{x}=24GiB"),
                ("--rpc", f"10.0.0.2:50052={x}"),
            )
        )
        gpu = () if flag[0] == "--assume-gpu" else ("--assume-gpu", "24GiB")
        # --flag=VALUE: a value starting with "-" is a value, not an option (argparse)
        cases.append(Case(f"flag {flag[0]} {x[:12]!r} #{i}", ("plan", good, f"{flag[0]}={flag[1]}", *gpu)))
    for x in ("nan", "inf", "-1", "9" * 5000, "1e400", "0"):
        cases.append(
            Case(
                f"verify --timeout {x[:12]!r}",
                ("verify", good, "--llama-bin", str(fake_bin), f"--timeout={x}"),
            )
        )
    for i in range(16):
        key = rng.choice(_ARCH_KEYS)
        value = rng.choice((math.nan, math.inf, -math.inf))
        kvs = base_kvs()
        kvs[f"llama.{key}"] = (rng.choice(("f32", "f64")), value)
        path = _good(tmp_path / f"k{i}", kvs=kvs)
        for cmd in ("inspect", "plan", "estimate"):
            extra = () if cmd == "inspect" else ("--assume-gpu", "24GiB")
            cases.append(Case(f"{key} = {value} [{cmd}]", (cmd, path, *extra)))
    for digits in (25, 5000):
        path = tmp_path / f"blk{digits}.gguf"
        tensors = [*base_tensors(2), (f"blk.{'9' * digits}.attn_q.weight", (64, 64))]
        write_gguf(path, "llama", base_kvs(), tensors)
        cases.append(Case(f"blk.<{digits} digits> [inspect]", ("inspect", str(path))))
        cases.append(Case(f"blk.<{digits} digits> [plan]", ("plan", str(path), "--assume-gpu", "24GiB")))
    with contextlib.ExitStack() as servers:
        for total in ("9" * 5000, "9" * 25, "0", "-1"):
            url = servers.enter_context(_range_server(total))
            cases.append(Case(f"Content-Range total of {len(total)} characters", ("inspect", url)))
        _report("class 1 (numbers from outside)", cases)


def test_class1_settings_numbers_are_read_per_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fitplan.core.inputs import user_settings as us

    rng = random.Random(SEED)
    failures = []
    fields = ("host_ram_gib", "schema_version", "window_geometry")
    for i in range(12):
        d = tmp_path / f"s{i}"
        d.mkdir()
        field = rng.choice(fields)
        digits = rng.choice(("9" * 5000, "-" + "9" * 4400, "1" + "0" * 400))
        text = f'{{"folders": ["/keep"], "shell": "cmd", "{field}": {digits}}}'
        (d / "settings.json").write_text(text)
        r = us.load_user_settings(d)
        if r.settings.folders != ("/keep",) or r.settings.shell != "cmd":
            failures.append(f"{field} = <{len(digits)} digits>: the other fields were lost ({r.message})")
    print(f"class 1 (settings numbers): 12 cases, {len(failures)} failures")
    assert not failures, failures


#: Where text from outside is read: the core and the command line (the window only composes their results).
_READERS = [p for p in sorted(APP.rglob("*.py")) if "/gui/" not in p.as_posix()]
#: Methods whose result is text: `int()` or `float()` of one is a number parsed outside the one parser.
_TEXT_METHODS = {"group", "strip", "lstrip", "rstrip", "get", "getheader", "decode", "removeprefix", "split"}


def _is_text_expr(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in _TEXT_METHODS:
            return True
        if isinstance(f, ast.Name) and f.id == "str":
            return True
    return isinstance(node, ast.Subscript) and _is_text_expr(node.value)


def _number_parsing_outside_the_parser(source: str, rel: str) -> list[str]:
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        where = f"{rel}:{node.lineno}"
        parses = isinstance(f, ast.Name) and f.id in ("int", "float") and bool(node.args)
        if parses and (len(node.args) > 1 or _is_text_expr(node.args[0])):
            found.append(f"{where}: {getattr(f, 'id', '')}() of text")
        if (
            isinstance(f, ast.Attribute)
            and f.attr in ("loads", "load")
            and isinstance(f.value, ast.Name)
            and f.value.id == "json"
        ):
            found.append(f"{where}: json.{f.attr}")
        if isinstance(f, ast.Attribute) and f.attr in ("isdigit", "isdecimal", "isnumeric"):
            found.append(
                f"{where}: .{f.attr}() (true of '²' and '١' too; int() then refuses or misreads them)"
            )
        if isinstance(f, ast.Attribute) and f.attr == "expanduser":
            found.append(f"{where}: expanduser (Path.expanduser raises on ~nosuchuser)")
        if isinstance(f, ast.Attribute) and f.attr == "add_argument":
            for kw in node.keywords:
                if kw.arg == "type" and isinstance(kw.value, ast.Name) and kw.value.id in ("int", "float"):
                    found.append(f"{where}: add_argument(type={kw.value.id})")
    return found


#: The one parser, the one home expander, and the package's own data (the accuracy bands it ships).
_PARSER_HOMES = {"core/base/numbers.py", "core/base/files.py", "core/estimate/accuracy.py"}


def test_class1_every_number_from_outside_goes_through_one_parser() -> None:
    found = []
    for path in _READERS:
        rel = path.relative_to(APP).as_posix()
        if rel not in _PARSER_HOMES:
            found += _number_parsing_outside_the_parser(path.read_text(encoding="utf-8"), rel)
    print(f"class 1 (sources): {len(_READERS)} modules, {len(found)} failures")
    assert not found, "\n".join(found[:40])


def test_class4_the_window_expands_home_without_raising() -> None:
    """A pasted `-m ~nosuchuser/x` or a folder setting: the window expands `~` with the core's `expand_home` too
    (Path.expanduser raises on an unknown user)."""
    found = []
    for path in sorted((APP / "gui").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "expanduser"
            ):
                found.append(f"{path.relative_to(APP).as_posix()}:{node.lineno}")
    assert not found, found


def test_class1_the_source_walk_finds_each_kind_of_bare_parse() -> None:
    source = (
        "n = int(m.group(1))\nx = float(t.strip())\nk = int(s, 16)\nd = json.loads(s)\np = Path(s).expanduser()\n"
        "a.add_argument('--t', type=float)\nif s.isdigit(): pass\nok = int(len(s))\n"
    )
    found = _number_parsing_outside_the_parser(source, "x.py")
    assert [f.split(":")[1] for f in found] == ["1", "2", "3", "4", "5", "6", "7"]


# -- class 2: text ------------------------------------------------------------------------------------------------


def _listing(paths: list[str]) -> bytes:
    return json.dumps(
        [{"type": "file", "path": p, "size": 1000, "oid": f"{i:040x}"} for i, p in enumerate(paths)]
    ).encode()


def test_class2_text_from_listings_and_file_names(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    cases: list[Case] = []
    for i in range(12):
        raw = bytes(rng.randrange(0x80, 0x100) for _ in range(rng.randrange(1, 4)))
        name = os.fsdecode(b"m" + raw + b".gguf")
        path = os.fsdecode(os.fsencode(tmp_path / f"u{i}") + b"/") + name
        _good(tmp_path / f"u{i}", name)
        cmd = rng.choice(("command", "plan"))

        def exact(o: Outcome, want: str = path, cmd: str = cmd) -> str | None:
            if o.rc not in (0, 1):
                return None  # refused with a reason
            text = o.out if cmd == "command" else o.out.split("command (sh):\n")[-1]
            lines = text.splitlines()
            end = next((k for k, line in enumerate(lines) if not line.endswith("\\")), len(lines) - 1)
            got = split(" ".join(line.rstrip("\\") for line in lines[: end + 1]), Shell.SH)
            m = got[got.index("-m") + 1] if "-m" in got else None
            return None if m == want else f"the exported -m is {m!r}, the file is {want!r}"

        cases.append(
            Case(f"undecodable name #{i} [{cmd}]", (cmd, path, "--assume-gpu", "24GiB"), check=exact)
        )
        cases.append(
            Case(
                f"undecodable name #{i} [{cmd} --json]", (cmd, path, "--assume-gpu", "24GiB", "--json"), True
            )
        )
    report = run_cases(cases)
    hub_failures = []
    for i in range(6):
        bad = rng.choice(("\udcff", "\ud800", "\udfff", "a\x00b", "\x1b[2J"))
        paths = [f"q{i}/m{bad}-Q4_K_M.gguf", f"m{bad}-Q8_0.gguf", f"mmproj-{bad}.gguf", "README.md"]
        with fake_hub(HubState(tree_body=_listing(paths))) as (endpoint, _st):
            env = (("HF_ENDPOINT", endpoint),)
            for argv in (
                ("quants", "org/repo"),
                ("quants", "org/repo", "--json"),
                ("plan", "hf.co/org/repo:Q8_0"),
            ):
                r = run_cases(
                    [Case(f"listing path {bad!a} [{' '.join(argv)}]", argv, "--json" in argv, env=env)]
                )
                report.total += r.total
                hub_failures += r.failures
    report.failures += hub_failures
    for path in ("/m/caf\u00e9.gguf", "/m/\u65e5\u672c.gguf", "C:\\m\\\u00e9 x.gguf"):
        for (
            shell
        ) in Shell:  # written for an ASCII-only terminal: exact or refused with a reason, never escaped
            report.total += 1
            try:
                text = join(("llama-server", "-m", path), shell, exact_text="ascii")
            except FitplanError:
                continue
            except Exception as exc:  # noqa: BLE001 - anything else is a failure to report
                report.failures.append(f"ascii terminal, {shell.value}: {type(exc).__name__}: {exc}")
                continue
            if not text.isascii() or split(text, shell)[2] != path:
                report.failures.append(f"ascii terminal, {shell.value}: {text!a} does not name {path!a}")
    print(counts_line("class 2 (text)", report))
    assert not report.failures, "\n".join(report.failures[:30])


# -- class 3: work bounded by the input -----------------------------------------------------------------------------


def test_class3_work_is_bounded_by_the_input(tmp_path: Path) -> None:
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    empty = raw_gguf({"general.architecture": "llama"})
    for i in range(10_000):
        (tiny / f"m{i:05d}.gguf").write_bytes(empty)
    pairs = tmp_path / "pairs"
    pairs.mkdir()
    model = raw_gguf({"general.architecture": "llama"})
    clip = raw_gguf({"general.architecture": "clip"})
    for i in range(1_500):  # pairing each model with each projector: 2.25 million rankings
        (pairs / f"model{i:04d}-Q4_K_M.gguf").write_bytes(model)
        (pairs / f"mmproj-model{i:04d}-f16.gguf").write_bytes(clip)
    infos = tmp_path / "infos"
    infos.mkdir()
    (infos / "many.gguf").write_bytes(raw_gguf({"general.architecture": "llama"}, n_tensors=2_000_000))
    long_name = tmp_path / "long.gguf"
    long_name.write_bytes(raw_gguf({"general.architecture": "llama"}, tensor_name=b"ffn_" * 100_000))
    wide = tmp_path / "wide"
    wide.mkdir()
    (wide / "arch.gguf").write_bytes(raw_gguf({"general.architecture": "a" * (16 << 20)}))
    for i in range(60):
        (wide / f"m{i}.gguf").write_bytes(empty)
    linked = tmp_path / "linked"
    _good(linked)
    os.symlink("/", linked / "root")
    cases = [
        Case("quants DIR, 10,000 tiny files", ("quants", str(tiny), "--assume-gpu", "24GiB")),
        Case("quants DIR, 1,500 models + 1,500 projectors", ("quants", str(pairs), "--assume-gpu", "24GiB")),
        Case("scan, 1,500 models + 1,500 projectors", ("scan", str(pairs), "--no-fit")),
        Case("2,000,000 tensor infos [inspect]", ("inspect", str(infos / "many.gguf"))),
        Case("2,000,000 tensor infos [scan]", ("scan", str(infos), "--no-fit")),
        Case(
            "tensor name of ffn_ x 100,000 with -ot",
            ("plan", str(long_name), "--assume-gpu", "24GiB", "-ot", ".ffn_.*_exps.=CPU"),
        ),
        Case("16 MiB architecture [scan]", ("scan", str(wide), "--no-fit")),
        Case("16 MiB architecture [scan --json]", ("scan", str(wide), "--no-fit", "--json"), True),
        Case("a link to / in a scanned folder", ("scan", str(linked), "--no-fit", "--json"), True, "answer"),
    ]
    _report("class 3 (work bounded by the input)", cases)


def test_class3_projector_pairing_agrees_with_ranking_every_projector() -> None:
    """The index's pick is the reference's (`mmproj_match_key` over every projector) up to 16 projectors, and has
    the reference's longest run of shared leading words above that."""
    from fitplan.core.gguf.reader import ProjectorIndex, mmproj_match_key

    rng = random.Random(SEED)
    words = ("qwen", "gemma", "3", "4b", "it", "vl", "27b", "instruct", "ud")
    for trial in range(200):
        n = rng.choice((1, 3, 16, 40))
        names = {
            "mmproj-"
            + "-".join(rng.choices(words, k=rng.randrange(0, 4)))
            + rng.choice(("-f16", "-bf16", "-f32", ""))
            + f"-{k}.gguf"
            for k in range(n)
        }
        model = "-".join(rng.choices(words, k=rng.randrange(1, 5))) + "-Q4_K_M.gguf"
        ref = min(names, key=lambda p: mmproj_match_key(model, p))
        got = ProjectorIndex([(p, p) for p in names]).best(model)
        if len(names) <= 16:
            assert got == ref, (trial, model, sorted(names))
        else:
            assert got is not None
            assert mmproj_match_key(model, got)[0] == mmproj_match_key(model, ref)[0], (
                trial,
                model,
                got,
                ref,
            )


def test_class3_the_listing_deadline_bounds_every_header_read() -> None:
    """Once the time for all of a listing's headers is spent, a header read is refused before any request."""
    from fitplan.core.base.errors import GGUFError
    from fitplan.core.gguf.remote import Deadline
    from fitplan.core.inputs.model_source import read_cached_header

    requests: list[str] = []
    with _range_server("100", requests) as url:
        with pytest.raises(GGUFError, match="spent"):
            read_cached_header(url, validator="oid:x", overall=Deadline(0.0))
        assert requests == []
        assert read_cached_header(url, validator="oid:y", overall=Deadline(30.0)).architecture == "llama"
    assert requests  # with time left, the same read asks the server


# -- class 4: the library scan --------------------------------------------------------------------------------------


def _lists_good(good: str) -> Callable[[Outcome], str | None]:
    def check(o: Outcome) -> str | None:
        paths = {m["path"] for m in json.loads(o.out)["models"]}
        return None if good in paths else f"the good model is not listed ({len(paths)} listed)"

    return check


def test_class4_the_scan_survives_every_folder(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    cases: list[Case] = []
    part = raw_gguf({"general.architecture": "llama"})
    for i in range(20):
        tree = tmp_path / f"t{i}"
        good = _good(tree)
        count = rng.randrange(2, 6)
        numbers = rng.sample([0, *range(count + 1, count + 5), 99999], k=rng.randrange(1, 3))
        numbers += rng.sample(range(1, count + 1), k=rng.randrange(0, count + 1))
        for no in numbers:
            (tree / f"s-{no:05d}-of-{count:05d}.gguf").write_bytes(part)
        cases.append(Case(f"split parts {sorted(numbers)} of {count}", ("scan", str(tree), "--json", "--no-fit"),
                          True, "answer", _lists_good(good)))  # fmt: skip
    home = tmp_path / "home"
    (home / ".lmstudio").mkdir(parents=True)
    (home / ".lmstudio" / "settings.json").write_text(json.dumps({"downloadsFolder": "~nosuchuser/models"}))
    (home / ".lmstudio-home-pointer").write_text("~nosuchuser/lms")
    for user in ("~nosuchuser", "~nosuchuser/x", "~\x01", "~" + "x" * 300):
        env = (("HOME", str(home)), ("HF_HOME", f"{user}/hf"), ("OLLAMA_MODELS", f"{user}/ollama"))
        cases.append(
            Case(f"HF_HOME={user[:20]!r} [scan]", ("scan", "--json", "--no-fit"), True, "answer", env=env)
        )
        cases.append(
            Case(f"{user[:20]!r} as the model [plan]", ("plan", f"{user}/m.gguf", "--assume-gpu", "24GiB"))
        )
        cases.append(
            Case(f"{user[:20]!r} as a folder [scan]", ("scan", f"{user}/models", "--json", "--no-fit"), True)
        )
        cases.append(Case(f"{user[:20]!r} as a folder [quants]", ("quants", f"{user}/models")))
    _report("class 4 (the library scan)", cases)


# -- class 5: device limits are totals ------------------------------------------------------------------------------


def test_class5_device_limits_are_totals(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    good = _good(tmp_path / "m")
    cases: list[Case] = []
    for i in range(30):
        specs = [rng.randrange(1, 17) for _ in range(rng.randrange(1, 4))]
        rpc = [f"10.0.0.{k}:50052=8GiB" for k in range(rng.choice((0, 0, 1, 4, 17)))]
        total = sum(specs) + len(rpc)
        argv = ["plan", good]
        for n in specs:
            argv += ["--assume-gpu", f"{n}x2GiB"]
        for spec in rpc:
            argv += ["--rpc", spec]
        expect = "refused" if total > 16 else "answer"
        cases.append(Case(f"{specs} GPUs + {len(rpc)} RPC = {total} #{i}", tuple(argv), expect=expect))
    _report("class 5 (device totals)", cases)


# -- class 6: fitplan's own exports paste back -------------------------------------------------------------------------

#: Characters that each shell reads in its own way (path separators, quotes, escapes, expansion, separators).
_ALPHABET = "abcXYZ019 \\'\"^&%;,=()$`~-_.:/@#[]{}*?<>|\u2019\u201cé日"
_PROGRAMS = (
    "llama-server",
    "-",
    "%1",
    "%x",
    "if",
    "foreach",
    "echo",
    "echo.exe",
    "dir/w",
    "a,b",
    "a;b",
    "a=b",
)


def _random_path(rng: random.Random) -> str:
    base = rng.choice(("C:\\Users\\me\\", "/home/me/", "\\\\srv\\share\\", "D:\\My Models\\", ""))
    return base + "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(1, 14))) + ".gguf"


def _sh_special_program(word: str) -> str | None:
    """How zsh and bash read an unquoted first word, from their manuals: `-` is zsh's precommand modifier (the
    next word is the program); a word starting with `%` is a job specification (bash: `fg %1`; zsh: `%1` resumes
    job 1). Reasoned from the documentation only: neither is reproduced by a non-interactive shell here."""
    if word == "-" or word.startswith("%"):
        return "precommand modifier or job"
    return None


#: about_Language_Keywords (PowerShell 7.4), the keywords a statement can start with.
_PS_STATEMENT_KEYWORDS = frozenset(
    ("begin", "break", "catch", "class", "clean", "configuration", "continue", "data", "define", "do"),
) | frozenset(("dynamicparam", "else", "elseif", "end", "enum", "exit", "filter", "finally", "for", "foreach")) | {
    "from", "function", "hidden", "if", "in", "inlinescript", "parallel", "param", "process", "return",
    "sequence", "static", "switch", "throw", "trap", "try", "until", "using", "var", "while", "workflow",
}  # fmt: skip


def _ps_special_program(word: str) -> str | None:
    """PowerShell's statement mode (about_Parsing, about_Language_Keywords): an unquoted first word that is a
    keyword starts that statement, not a command. Reasoned only: PowerShell is not installed here."""
    return "keyword" if word.lower() in _PS_STATEMENT_KEYWORDS else None


#: `help` in cmd.exe lists these internal commands (Windows 10).
_CMD_INTERNAL_NAMES = frozenset(
    "ASSOC BREAK CALL CD CHDIR CLS COLOR COPY DATE DEL DIR ECHO ENDLOCAL ERASE EXIT FOR FTYPE GOTO IF MD MKDIR "
    "MKLINK MOVE PATH PAUSE POPD PROMPT PUSHD RD REM REN RENAME RMDIR SET SETLOCAL SHIFT START TIME TITLE TYPE VER "
    "VERIFY VOL".lower().split(" ")
)


def _cmd_internal(word: str) -> bool:
    """cmd.exe takes the longest leading run of letters as the command name (`echo.exe` -> `echo`, `cd..` -> `cd`)."""
    m = re.match(r"[A-Za-z]+", word)
    return bool(m) and m.group().lower() in _CMD_INTERNAL_NAMES


def _cmd_program_word(line: str) -> tuple[str, bool]:
    """cmd.exe's command word, from its documented parsing (cmd /?, and the `^` escape): leading delimiters are
    skipped; a quoted word runs to its closing quote; an unquoted one ends at a blank, `;`, `,` or `=`, with `^`
    taking the next character literally. Returns the word and whether cmd.exe runs it as an internal command
    (an unquoted word starting with an internal command's name: `echo.exe` runs `echo`). Reasoned only."""
    i = 0
    while i < len(line) and line[i] in " \t;,=":
        i += 1
    if line[i : i + 1] == '"':
        end = line.index('"', i + 1)
        return line[i + 1 : end], False
    out = []
    while i < len(line) and line[i] not in " \t;,=":
        if line[i] == "^" and i + 1 < len(line):
            i += 1
        out.append(line[i])
        i += 1
    word = "".join(out)
    return word, _cmd_internal(word)


def test_class6_own_exports_paste_back_with_the_shell_guessed() -> None:
    rng = random.Random(SEED)
    total, failures = 0, []
    for i in range(400):
        shell = list(Shell)[i % 3]
        argv = ("llama-server", "-m", _random_path(rng), "--alias", _random_path(rng)[:-5], "-c", "4096")
        try:
            text = join(argv, shell, multiline=rng.random() < 0.5)
        except Exception:  # noqa: BLE001 - refused (a `!` for cmd, ...): nothing to paste
            continue
        total += 1
        try:
            got = import_command(text)
            ok = got.args == argv[1:]
        except Exception as exc:  # noqa: BLE001 - a paste fitplan wrote must be read back
            ok, got = False, exc  # type: ignore[assignment]
        if not ok:
            failures.append(f"{shell.value}: {text!r} read as {getattr(got, 'args', got)!r}")
    for program in _PROGRAMS:
        for shell in Shell:
            total += 1
            try:
                line = join((program, "-m", "x.gguf"), shell)
            except Exception:  # noqa: BLE001 - refused with a reason
                continue
            first = line.split(" ", 1)[0]
            if shell is Shell.SH and _sh_special_program(first):
                failures.append(f"sh: program {program!r} written bare: {line!r}")
            elif shell is Shell.POWERSHELL and _ps_special_program(first):
                failures.append(f"powershell: program {program!r} written bare: {line!r}")
            elif shell is Shell.CMD:
                word, internal = _cmd_program_word(line)
                if word != program or internal:
                    failures.append(
                        f"cmd: program {program!r} read as {word!r} (internal: {internal}): {line!r}"
                    )
    for n in (100, 2000):
        total += 1
        argv = ("llama-server", *(["--alias", "x" * 50] * n))
        try:
            line = join(argv, Shell.CMD)
        except Exception:  # noqa: BLE001 - refused: longer than cmd.exe reads
            continue
        if len(line) > 8191:
            failures.append(f"cmd: a {len(line)}-character line (cmd.exe reads 8,191)")
    for value in ("100% it", "a % b", "% x%"):  # a variable name may start with a blank: set " x=1"
        total += 1
        line = join(("llama-server", "--alias", value), Shell.CMD)
        if re.search(r"%[ \t]", line):
            failures.append(f"cmd: {value!r} leaves a % before a blank: {line!r}")
    print(f"class 6 (exports paste back): {total} cases, {len(failures)} failures")
    assert not failures, "\n".join(failures[:30])


@pytest.mark.skipif(not shutil.which("bash"), reason="no bash")
def test_class6_the_cmd_and_sh_models_read_known_lines() -> None:
    """The grammar models above agree with what they model on lines whose reading is known."""
    assert _cmd_program_word('"echo" x') == ("echo", False)
    assert _cmd_program_word("echo.exe x") == ("echo.exe", True)
    assert _cmd_program_word("a,b x") == ("a", False)
    assert _sh_special_program("%1") and not _sh_special_program("'%1'")
    assert _ps_special_program("If") and not _ps_special_program("iff")


# -- class 8: nothing the user set is lost ----------------------------------------------------------------------------


def test_class8_nothing_the_user_set_is_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fitplan.core.inputs import user_settings as us

    rng = random.Random(SEED)
    failures: list[str] = []
    n = 0
    for i in range(24):
        n += 1
        d = tmp_path / f"c{i}"
        d.mkdir()
        unknown = {f"future_{rng.randrange(100)}": rng.choice((1, "x", [1, 2], {"a": 1}))}
        per_model = {f"future_choice_{rng.randrange(100)}": rng.choice((True, 3, "y"))}
        doc = {"schema_version": 1, "folders": ["/keep"], "shell": "powershell", **unknown,
               "model_choices": {"/m.gguf": {"n_ctx": 8192, **per_model}}}  # fmt: skip
        linked = rng.random() < 0.4
        target = d / "real" / "settings.json" if linked else d / "settings.json"
        target.parent.mkdir(exist_ok=True)
        target.write_text(json.dumps(doc))
        if linked:
            os.symlink(target, d / "settings.json")
        transient = rng.random() < 0.4
        if transient:
            real = us.read_regular_file
            calls = {"n": 0}

            def flaky(
                path: object, limit: int, real: Callable[..., bytes] = real, calls: dict[str, int] = calls
            ) -> bytes:
                calls["n"] += 1
                if calls["n"] == 1:
                    raise OSError(errno.EMFILE, "Too many open files")
                return real(path, limit)

            monkeypatch.setattr(us, "read_regular_file", flaky)
        loaded = us.load_user_settings(d)
        monkeypatch.undo()
        label = f"case {i} (linked: {linked}, transient: {transient})"
        aside = [p.name for p in d.iterdir() if "." in p.name and p.name.startswith("settings.json.")]
        if aside:
            failures.append(f"{label}: set aside as {aside}")
        changed = us.replace(loaded.settings, recent_files=("/new.gguf",))
        try:
            us.save_user_settings(changed, d)
        except OSError as exc:
            failures.append(f"{label}: save failed: {exc}")
            continue
        if linked and not (d / "settings.json").is_symlink():
            failures.append(f"{label}: the link was replaced by a file")
        saved = json.loads(target.read_text())
        if saved.get("folders") != ["/keep"] or saved.get("shell") != "powershell":
            failures.append(
                f"{label}: the user's fields were lost: {saved.get('folders')}, {saved.get('shell')}"
            )
        for k, v in unknown.items():
            if saved.get(k) != v:
                failures.append(f"{label}: unknown field {k} dropped")
        for k, v in per_model.items():
            if saved.get("model_choices", {}).get("/m.gguf", {}).get(k) != v:
                failures.append(f"{label}: unknown model field {k} dropped")
        if saved.get("recent_files") != ["/new.gguf"]:
            failures.append(f"{label}: the change was not saved")
    print(f"class 8 (settings): {n} cases, {len(failures)} failures")
    assert not failures, "\n".join(failures[:30])
