"""The hostile-input suite's harness: run many `fitplan` command lines under a time and memory cap, and judge them.

Cases run in one forked worker per batch (fast: the imports are paid once) with an address-space limit
(RLIMIT_AS) and a per-case alarm, so a case that would hang or blow up memory fails alone, as a verdict, instead of
stalling or killing the test run. Each case calls `fitplan.cli.main(argv)` with stdout and stderr captured as
UTF-8 byte streams (strict, like a terminal: an undecodable file name that reaches them raw is an error).

The rule every case must meet (issue 13): exit 0 or 1 (an answer; 1 = does not fit) with sane output, or exit 2
with exactly one line on stderr; never a traceback, never past the time cap, never past the memory cap.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: Per case (seconds) and for the worker's address space (bytes).
CASE_SECONDS = 10
MEMORY_CAP = 3 << 30

#: Characters that must never reach a terminal raw (fitplan's colour is off: the streams are not terminals).
RAW_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Case:
    """One command line; `check` may add a case-specific judgement of the outcome (a problem string or None)."""

    label: str
    argv: tuple[str, ...]
    json_out: bool = False
    expect: str = ""  # "answer": must exit 0/1; "refused": must exit 2; "": either
    check: Callable[[Outcome], str | None] | None = None
    env: tuple[tuple[str, str], ...] = ()  # environment variables set for this case only


@dataclass
class Outcome:
    rc: int | None
    out: str
    err: str
    seconds: float
    crash: str = ""  # the traceback of an exception that escaped main()


@dataclass
class Report:
    total: int = 0
    failures: list[str] = field(default_factory=list)
    slowest: float = 0.0


class _Alarm(BaseException):
    pass


def _on_alarm(signum: int, frame: object) -> None:
    raise _Alarm()


def _run_one(argv: Sequence[str], env: tuple[tuple[str, str], ...] = ()) -> Outcome:
    from fitplan.cli import main

    saved_env = {k: os.environ.get(k) for k, _ in env}
    os.environ.update(dict(env))

    out_b, err_b = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_b, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_b, encoding="utf-8", errors="strict", write_through=True)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    start = time.perf_counter()
    rc: int | None = None
    crash = ""
    signal.alarm(CASE_SECONDS)
    try:
        rc = main(list(argv))
    except _Alarm:
        crash = f"timeout after {CASE_SECONDS} s"
    except MemoryError:
        crash = "MemoryError (memory cap reached)"
    except BaseException:  # noqa: BLE001 - the forked worker reports whatever ended the case
        crash = traceback.format_exc(limit=6)
    finally:
        signal.alarm(0)
        sys.stdout, sys.stderr = saved
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    seconds = time.perf_counter() - start
    return Outcome(
        rc,
        out_b.getvalue().decode("utf-8", "replace"),
        err_b.getvalue().decode("utf-8", "replace"),
        seconds,
        crash,
    )


Job = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]


def _worker(argvs: list[Job], write_fd: int) -> None:
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = MEMORY_CAP if hard == resource.RLIM_INFINITY else min(MEMORY_CAP, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    signal.signal(signal.SIGALRM, _on_alarm)
    results = [_run_one(a, env) for a, env in argvs]
    data = pickle.dumps(results)
    with os.fdopen(write_fd, "wb") as f:
        f.write(data)


def run_batch(argvs: list[Job], overall_seconds: float = 120.0) -> list[Outcome]:
    """Run the command lines in a forked worker (memory-capped, alarm per case); outcomes in order."""
    from fitplan.cli import build_parser

    build_parser()  # import every subcommand once, before forking: each worker inherits them
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker
        os.close(read_fd)
        try:
            _worker(argvs, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    chunks = []
    deadline = time.monotonic() + overall_seconds
    with os.fdopen(read_fd, "rb") as f:
        while True:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                break
            chunk = f.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        return [Outcome(None, "", "", 0.0, f"worker died (status {status})") for _ in argvs]
    results: list[Outcome] = pickle.loads(b"".join(chunks))
    return results


def _negative_sizes(doc: object, path: str = "") -> list[str]:
    """Byte counts that are negative (headroom may be: it says by how much a model does not fit)."""
    bad: list[str] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            where = f"{path}.{k}"
            if (
                isinstance(v, int | float)
                and not isinstance(v, bool)
                and v < 0
                and "headroom" not in k
                and (k.endswith("bytes") or ".terms." in where + ".")
            ):
                bad.append(f"{where} = {v}")
            else:
                bad.extend(_negative_sizes(v, where))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            bad.extend(_negative_sizes(v, f"{path}[{i}]"))
    return bad


def judge(case: Case, o: Outcome) -> str | None:
    """Why the outcome breaks the rule, or None."""
    if o.crash:
        return f"escaped main(): {o.crash.strip().splitlines()[-1]}"
    if "Traceback" in o.err or "Traceback" in o.out:
        return "traceback printed"
    for name, text in (("stdout", o.out), ("stderr", o.err)):
        m = RAW_CONTROL_RE.search(text)
        if m:
            return f"raw control character {m.group()!r} on {name}"
    if o.rc == 2:
        lines = o.err.strip("\n").split("\n")
        if len(lines) != 1 or not lines[0].startswith("fitplan: error:"):
            return f"exit 2 but stderr is not one error line: {o.err[:200]!r}"
        if case.expect == "answer":
            return f"refused, expected an answer: {lines[0][:200]}"
    elif o.rc in (0, 1):
        if case.expect == "refused":
            return "answered, expected a refusal"
        if not o.out.strip():
            return "exit 0/1 with nothing on stdout"
        if case.json_out:
            try:
                doc = json.loads(o.out)
            except ValueError as exc:
                return f"--json output is not JSON: {exc}"
            negative = _negative_sizes(doc)
            if negative:
                return f"negative sizes: {negative[:3]}"
    else:
        return f"exit status {o.rc}"
    if case.check is not None:
        return case.check(o)
    return None


def run_cases(cases: Sequence[Case], batch: int = 400) -> Report:
    """Run and judge every case; the report lists one line per failure."""
    report = Report()
    for i in range(0, len(cases), batch):
        chunk = list(cases[i : i + batch])
        outcomes = run_batch([(c.argv, c.env) for c in chunk])
        for c, o in zip(chunk, outcomes, strict=True):
            report.total += 1
            report.slowest = max(report.slowest, o.seconds)
            problem = judge(c, o)
            if problem is not None:
                report.failures.append(f"{c.label}: {problem}")
    return report


def counts_line(name: str, report: Report) -> str:
    return f"{name}: {report.total} cases, {len(report.failures)} failures, slowest {report.slowest:.2f} s"


# -- GGUF files, written with llama.cpp's gguf-py writer --------------------------------------------------------------

#: (value type, value) of a metadata entry; "keep" leaves the base model's entry alone, "drop" removes it.
KV = tuple[str, object]

_VTYPES = {
    "u8": "UINT8",
    "i8": "INT8",
    "u16": "UINT16",
    "i16": "INT16",
    "u32": "UINT32",
    "i32": "INT32",
    "f32": "FLOAT32",
    "bool": "BOOL",
    "str": "STRING",
    "u64": "UINT64",
    "i64": "INT64",
    "f64": "FLOAT64",
}


def base_kvs(arch: str = "llama", n_layer: int = 2, moe: bool = False) -> dict[str, KV]:
    """The hyper-parameters of a tiny, valid model (n_embd 64, 4 heads, 2 KV heads)."""
    kvs: dict[str, KV] = {
        "general.name": ("str", "hostile"),
        f"{arch}.block_count": ("u32", n_layer),
        f"{arch}.context_length": ("u32", 4096),
        f"{arch}.embedding_length": ("u32", 64),
        f"{arch}.feed_forward_length": ("u32", 128),
        f"{arch}.attention.head_count": ("u32", 4),
        f"{arch}.attention.head_count_kv": ("u32", 2),
        f"{arch}.rope.freq_base": ("f32", 10000.0),
        f"{arch}.attention.layer_norm_rms_epsilon": ("f32", 1e-5),
        "general.file_type": ("u32", 1),
    }
    if moe:
        kvs[f"{arch}.expert_count"] = ("u32", 4)
        kvs[f"{arch}.expert_used_count"] = ("u32", 2)
        kvs[f"{arch}.expert_feed_forward_length"] = ("u32", 32)
    return kvs


def base_tensors(n_layer: int = 2, moe: bool = False) -> list[tuple[str, tuple[int, ...]]]:
    """(name, numpy shape) of the tiny model's tensors (f16 matrices, f32 norms)."""
    ts: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (32, 64))]
    for il in range(n_layer):
        ts += [
            (f"blk.{il}.attn_norm.weight", (64,)),
            (f"blk.{il}.attn_q.weight", (64, 64)),
            (f"blk.{il}.attn_k.weight", (32, 64)),
            (f"blk.{il}.attn_v.weight", (32, 64)),
            (f"blk.{il}.attn_output.weight", (64, 64)),
            (f"blk.{il}.ffn_norm.weight", (64,)),
        ]
        if moe:
            ts += [
                (f"blk.{il}.ffn_gate_inp.weight", (4, 64)),
                (f"blk.{il}.ffn_up_exps.weight", (4, 32, 64)),
                (f"blk.{il}.ffn_down_exps.weight", (4, 64, 32)),
            ]
        else:
            ts += [(f"blk.{il}.ffn_up.weight", (128, 64)), (f"blk.{il}.ffn_down.weight", (64, 128))]
    ts += [("output_norm.weight", (64,)), ("output.weight", (32, 64))]
    return ts


def write_gguf(
    path: str | os.PathLike[str],
    arch: str,
    kvs: dict[str, KV],
    tensors: Sequence[tuple[str, tuple[int, ...]]],
) -> str:
    """A GGUF file with exactly these metadata entries (typed as given) and zero-filled tensors."""
    import numpy as np

    from gguf import GGUFValueType, GGUFWriter

    w = GGUFWriter(os.fspath(path), arch)
    for key, (vtype, value) in kvs.items():
        if isinstance(value, list):
            sub = GGUFValueType[_VTYPES[vtype]]
            w.add_key_value(key, value, GGUFValueType.ARRAY, sub_type=sub)
        else:
            w.add_key_value(key, value, GGUFValueType[_VTYPES[vtype]])
    for name, shape in tensors:
        w.add_tensor(name, np.zeros(shape, dtype=np.float32 if len(shape) == 1 else np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return os.fspath(path)


# -- raw GGUF bytes (fast, for thousands of files or millions of tensor infos) ----------------------------------------


def _gguf_string(text: str | bytes) -> bytes:
    import struct

    raw = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def raw_gguf(strings: dict[str, str], n_tensors: int = 0, tensor_name: bytes | None = None) -> bytes:
    """A GGUF v3 header of string metadata (type 8) and `n_tensors` F32 tensors of 32 elements each (names
    `t0000000`..., or one tensor named `tensor_name`), marked header-only (`fitplan.header_only`), with no data."""
    import struct

    import numpy as np

    kv = b"".join(_gguf_string(k) + struct.pack("<I", 8) + _gguf_string(v) for k, v in strings.items())
    kv += _gguf_string("fitplan.header_only") + struct.pack("<I", 7) + b"\x01"
    if tensor_name is not None:
        infos = _gguf_string(tensor_name) + struct.pack("<IqiQ", 1, 32, 0, 0)
        n_tensors = 1
    elif n_tensors:
        rec = np.dtype(
            [("len", "<u8"), ("name", "S8"), ("dims", "<u4"), ("ne0", "<i8"), ("type", "<i4"), ("off", "<u8")]
        )
        a = np.zeros(n_tensors, dtype=rec)
        a["len"] = 8
        a["name"] = np.char.add(b"t", np.char.zfill(np.arange(n_tensors).astype("S7"), 7))
        a["dims"] = 1
        a["ne0"] = 32
        a["off"] = np.arange(n_tensors, dtype=np.uint64) * 128
        infos = a.tobytes()
    else:
        infos = b""
    head = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(strings) + 1)
    return head + kv + infos
