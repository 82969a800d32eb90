"""Hostile-input suite, class 1 (numbers from the header) and class 2 (header text shown to people, terminal side).

Structure-aware mutations: valid GGUF files written with gguf-py's writer whose hyper-parameters are replaced by
hostile values of every GGUF type (NaN and infinity in integer keys, negative and absurd counts, arrays too long,
text where numbers belong), contradictions with the tensors, broken split sets, and names full of escape
sequences. Each file goes through `fitplan inspect`, `estimate` and `plan`; every run must answer sanely or be
refused with one line, within the time and memory caps of `hostile_support`.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
from pathlib import Path

import pytest

from support.hostile import KV, Case, Outcome, base_kvs, base_tensors, counts_line, run_cases, write_gguf

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or sys.platform == "win32", reason="needs fork and rlimits"
)

SEED = 13
N_RANDOM_FILES = 110
ARCH = "llama"

#: The hyper-parameters mutated (fitplan reads every one of them).
KEYS = (
    "block_count",
    "embedding_length",
    "context_length",
    "attention.head_count",
    "attention.head_count_kv",
    "feed_forward_length",
    "attention.key_length",
    "attention.value_length",
    "rope.dimension_count",
    "rope.freq_base",
    "rope.scaling.factor",
    "vocab_size",
    "expert_count",
    "expert_used_count",
    "attention.sliding_window",
    "nextn_predict_layers",
    "expert_feed_forward_length",
)
#: Hostile (type, value) pairs.
VALUES: tuple[KV, ...] = (
    ("f32", math.nan),
    ("f32", math.inf),
    ("f32", -math.inf),
    ("f64", math.nan),
    ("f64", 1e30),
    ("f32", 0.5),
    ("f64", -3.0),
    ("i32", -1),
    ("i32", -(2**31)),
    ("i64", -1),
    ("u32", 0),
    ("u32", 2**32 - 1),
    ("u64", 2**63),
    ("u64", 2**64 - 1),
    ("u32", 10**7),
    ("u32", 10**9),
    ("i64", 2**40),
    ("str", "12"),
    ("bool", True),
    ("f32", [math.nan, 1.0]),
    ("u32", [0] * 700),
    ("i32", [-1, -1]),
    ("u32", [2**32 - 1, 2**32 - 1]),
    ("u32", [4, 4, 4, 4, 4, 4, 4, 4, 4]),
    ("f64", [1e300, -1e300]),
)
COMMANDS = (
    ("inspect", "--json"),
    ("estimate", "--assume-gpu", "24GiB", "--json"),
    ("plan", "--assume-gpu", "24GiB", "--json"),
    ("estimate", "--assume-gpu", "8GiB", "-c", "8192"),
    ("inspect", "--layers"),
)


def _random_cases(root: Path) -> list[Case]:
    rng = random.Random(SEED)
    cases: list[Case] = []
    for i in range(N_RANDOM_FILES):
        moe = rng.random() < 0.3
        kvs = base_kvs(ARCH, n_layer=2, moe=moe)
        changed = []
        for _ in range(rng.choice((1, 1, 2, 3))):
            key = f"{ARCH}.{rng.choice(KEYS)}"
            kvs[key] = rng.choice(VALUES)
            changed.append(f"{key}={kvs[key][0]}:{str(kvs[key][1])[:20]}")
        path = write_gguf(root / f"r{i}.gguf", ARCH, kvs, base_tensors(2, moe))
        for cmd in rng.sample(COMMANDS, 3):
            cases.append(
                Case(
                    f"random {i} {' '.join(changed)} [{cmd[0]}]",
                    (cmd[0], path, *cmd[1:]),
                    json_out="--json" in cmd,
                )
            )
    return cases


def _short_error(o: Outcome) -> str | None:
    return None if len(o.err) < 400 else f"error line of {len(o.err)} characters"


def _refused(label: str, path: str, key: str = "") -> list[Case]:
    """The file must be refused by every command, in one short line naming `key`."""

    def names_key(o: Outcome) -> str | None:
        if key and key not in o.err:
            return f"the error does not name {key}: {o.err.strip()[:200]}"
        return _short_error(o)

    return [
        Case(f"{label} [{cmd[0]}]", (cmd[0], path, *cmd[1:]), "--json" in cmd, "refused", names_key)
        for cmd in COMMANDS[:3]
    ]


def _fixed_cases(root: Path) -> list[Case]:
    """The issue's examples, each expected refused with a message naming the key."""
    a = ARCH
    cases: list[Case] = []

    def mutant(
        name: str, changes: dict[str, KV], moe: bool = False, arch: str = ARCH, n_layer: int = 2
    ) -> str:
        kvs = base_kvs(arch, n_layer=n_layer, moe=moe)
        kvs.update(changes)
        return write_gguf(root / f"{name}.gguf", arch, kvs, base_tensors(n_layer, moe))

    for key in ("embedding_length", "block_count", "context_length"):
        for vt, v in (("f32", math.nan), ("f64", math.inf)):
            cases += _refused(f"{key}={v}", mutant(f"{key}-{v}", {f"{a}.{key}": (vt, v)}), f"{a}.{key}")
    cases += _refused(
        "head_count_kv array of NaN",
        mutant("kv-nan", {f"{a}.attention.head_count_kv": ("f32", [math.nan, math.nan])}),
        f"{a}.attention.head_count_kv",
    )
    cases += _refused(
        "block_count 10^7", mutant("bc7", {f"{a}.block_count": ("u32", 10**7)}), f"{a}.block_count"
    )
    cases += _refused(
        "block_count 10^9", mutant("bc9", {f"{a}.block_count": ("u32", 10**9)}), f"{a}.block_count"
    )
    cases += _refused("block_count -1", mutant("bcm1", {f"{a}.block_count": ("i32", -1)}), f"{a}.block_count")
    cases += _refused(
        "negative embedding", mutant("ne", {f"{a}.embedding_length": ("i32", -4096)}), f"{a}.embedding_length"
    )
    cases += _refused(
        "negative context", mutant("nc", {f"{a}.context_length": ("i64", -1)}), f"{a}.context_length"
    )
    cases += _refused(
        "more KV heads than heads",
        mutant("kvh", {f"{a}.attention.head_count_kv": ("u32", 8)}),
        f"{a}.attention.head_count_kv",
    )
    cases += _refused(
        "expert tensors, no experts",
        mutant("noexp", {f"{a}.expert_count": ("u32", 0)}, moe=True),
        f"{a}.expert_count",
    )
    cases += _refused(
        "more experts used than exist",
        mutant("used", {f"{a}.expert_used_count": ("u32", 9)}, moe=True),
        f"{a}.expert_used_count",
    )
    cases += _refused(
        "nanbeige num_loops 10^6",
        mutant("loops", {"nanbeige.num_loops": ("u32", 10**6)}, arch="nanbeige"),
        "nanbeige.num_loops",
    )
    return cases


def _split_cases(root: Path) -> list[Case]:
    """Split sets: absurd split.count, shards of two models, a tensor in two shards."""
    cases: list[Case] = []
    tensors = base_tensors(2)
    half = len(tensors) // 2

    def shard(
        name: str,
        no: int,
        count: int,
        part: list[tuple[str, tuple[int, ...]]],
        arch: str = ARCH,
        total: int = len(tensors),
    ) -> str:
        kvs = base_kvs(arch) if no == 0 else {}
        kvs.update(
            {"split.no": ("u16", no), "split.count": ("u16", count), "split.tensors.count": ("i32", total)}
        )
        return write_gguf(root / name, arch, kvs, part)

    for count in (65535, 10**8):
        folder = root / f"count{count}"
        folder.mkdir()
        vt = "u16" if count < 65536 else "u32"
        kvs = {
            **base_kvs(),
            "split.no": ("u16", 0),
            "split.count": (vt, count),
            "split.tensors.count": ("i32", 70000),
        }
        name = f"m-00001-of-{min(count, 99999):05d}.gguf"
        path = write_gguf(folder / name, ARCH, kvs, tensors)
        cases += [
            Case(
                f"split.count {count} [{c[0]}]", (c[0], path, *c[1:]), "--json" in c, "refused", _short_error
            )
            for c in COMMANDS[:3]
        ]
    two = root / "two-models"
    two.mkdir()
    first = shard("two-models/m-00001-of-00002.gguf", 0, 2, tensors[:half])
    shard("two-models/m-00002-of-00002.gguf", 1, 2, tensors[half:], arch="qwen2")
    cases += _refused("shards of two models", first, "another model")
    dup = root / "dup"
    dup.mkdir()
    first = shard("dup/m-00001-of-00002.gguf", 0, 2, tensors[: half + 1])
    shard("dup/m-00002-of-00002.gguf", 1, 2, tensors[half:])
    cases += _refused("tensor in two shards", first, "earlier shard")
    ok = root / "ok"
    ok.mkdir()
    first = shard("ok/m-00001-of-00002.gguf", 0, 2, tensors[:half])
    shard("ok/m-00002-of-00002.gguf", 1, 2, tensors[half:])
    cases += [
        Case(f"a good split set [{c[0]}]", (c[0], first, *c[1:]), "--json" in c, "answer")
        for c in COMMANDS[:3]
    ]
    return cases


#: Names (general.name, file names) that try to drive the terminal.
HOSTILE_TEXT = (
    "\x1b]0;owned\x07",
    "\x1b[2J\x1b[H",
    "line\nfitplan: error: fake",
    "\r\x1b[Kcovered",
    "\x9b31mred",
    "tab\there",
    "\x00nul",
    "\x7fdel",
    "\u202eevil",
    "<b>html</b>",
    "\x1bP+q\x1b\\",
)


def _text_cases(root: Path) -> list[Case]:
    """Class 2: escape sequences in general.name and in file names (some undecodable), text and JSON output."""
    cases: list[Case] = []
    rng = random.Random(SEED + 2)
    for i, text in enumerate(HOSTILE_TEXT):
        kvs = base_kvs()
        kvs["general.name"] = ("str", text)
        raw_name = (
            os.fsencode(f"m{i}-")
            + rng.choice((b"\xff", b"\xfe\x80", b""))
            + os.fsencode(text.replace("/", "_").replace("\x00", "0"))
            + b".gguf"
        )
        path = write_gguf(os.fsdecode(os.path.join(os.fsencode(root), raw_name)), ARCH, kvs, base_tensors(2))

        def same_name(o: Outcome, text: str = text, path: str = path) -> str | None:
            doc = json.loads(o.out)
            if doc.get("name", doc.get("model", {}).get("name")) != text:
                return "the JSON name is not the header's name"
            return None

        cases.append(Case(f"name {text!r} [inspect]", ("inspect", path), expect="answer"))
        cases.append(
            Case(f"name {text!r} [inspect --json]", ("inspect", path, "--json"), True, "answer", same_name)
        )
        cases.append(
            Case(f"name {text!r} [estimate]", ("estimate", path, "--assume-gpu", "24GiB"), expect="answer")
        )
        # the plan's command holds the path: a path with a control character cannot be written into a shell
        # command, so `plan` may refuse it in one line (fitplan.core.launch.shell); the name alone never matters
        unwritable = any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 or 0x202A <= ord(c) <= 0x202E for c in text)
        cases.append(
            Case(
                f"name {text!r} [plan]",
                ("plan", path, "--assume-gpu", "24GiB"),
                expect="" if unwritable else "answer",
            )
        )
        cases.append(
            Case(f"name {text!r} [missing]", ("inspect", path + "-missing\x1b[2J"), expect="refused")
        )
    cases.append(Case("scan of hostile names", ("scan", str(root), "--no-fit"), expect="answer"))
    cases.append(
        Case("scan of hostile names --json", ("scan", str(root), "--no-fit", "--json"), True, "answer")
    )
    return cases


def _report(name: str, cases: list[Case]) -> None:
    report = run_cases(cases)
    print(counts_line(name, report))
    assert not report.failures, "\n".join(report.failures[:30])


def test_hostile_hyperparameters(tmp_path: Path) -> None:
    cases = _random_cases(tmp_path) + _fixed_cases(tmp_path)
    _report("class 1 (numbers from the header)", cases)


def test_hostile_split_sets(tmp_path: Path) -> None:
    _report("class 1 (split sets)", _split_cases(tmp_path))


def test_hostile_text_in_headers_and_names(tmp_path: Path) -> None:
    _report("class 2 (header text, terminal)", _text_cases(tmp_path))


def _limit_memory() -> None:
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, hard))


def test_a_few_cases_in_real_processes(tmp_path: Path) -> None:
    """The real entry point, in child processes with a memory limit and a timeout, on an ASCII-only terminal
    encoding (LANG=C): undecodable names and escape sequences still print, hostile counts are one line."""
    import subprocess

    kvs = base_kvs()
    kvs["general.name"] = ("str", "\x1b]0;owned\x07é\nfitplan: error: fake")
    name = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"bad\xff\x1b[2J.gguf"))
    hostile = write_gguf(name, ARCH, kvs, base_tensors(2))
    big = write_gguf(
        tmp_path / "big.gguf", ARCH, {**base_kvs(), f"{ARCH}.block_count": ("u32", 10**9)}, base_tensors(2)
    )
    os.mkfifo(tmp_path / "fifo.gguf")
    env = {**os.environ, "LANG": "C", "LC_ALL": "C", "PYTHONIOENCODING": "ascii", "NO_COLOR": "1"}
    runs = [
        (["inspect", hostile], 0),
        (["inspect", hostile, "--json"], 0),
        (["estimate", big, "--assume-gpu", "24GiB"], 2),
        (["scan", str(tmp_path), "--no-fit"], 0),
        (["scan", str(tmp_path), "--json"], 0),
    ]
    for argv, want in runs:
        done = subprocess.run(
            [sys.executable, "-m", "fitplan", *argv],
            capture_output=True,
            env=env,
            timeout=60,
            preexec_fn=_limit_memory,
            check=False,
        )
        out, err = (
            done.stdout.decode("ascii"),
            done.stderr.decode("ascii"),
        )  # ASCII only: nothing else written
        assert done.returncode == want, (argv, err)
        assert "Traceback" not in err and not any(c in out + err for c in "\x1b\x07\r"), (argv, out, err)
        if want == 2:
            assert err.count("\n") == 1 and "block_count" in err
        if "--json" in argv:
            json.loads(out)
