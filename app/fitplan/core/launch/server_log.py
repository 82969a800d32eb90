"""What llama-server says while it loads a model, read from its log: the buffer of every kind on every buffer type,
the caches, the devices, the memory breakdown printed at exit, and whether it loaded or why it failed.

The lines come from llama.cpp itself (commit 515e85511): `load_tensors: <buft> model buffer size = X MiB`
(`llama-model.cpp:load_tensors`), `llama_kv_cache: <buft> KV buffer size` (`llama-kv-cache.cpp`),
`llama_memory_recurrent: <buft> RS buffer size` (`llama-memory-recurrent.cpp`), `llama_context: <buft> output buffer
size` and `sched_reserve: <buft> compute buffer size` (`llama-context.cpp`), the projector's `load_hparams: model size`
and `reserve_compute_meta: <buft> compute buffer size` (`tools/mtmd/clip.cpp`), the table of
`common_memory_breakdown_print` (`common/fit.cpp`, printed when the server exits) and the server's own `model loaded`,
`listening on` and `couldn't bind HTTP server socket` (`tools/server`). llama.cpp prints its INFO lines at verbosity 4
only (`common_log_get_verbosity`), hence `-lv 4` on every launch (`LOG_VERBOSITY_FLAGS`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from fitplan.core.base.numbers import int_or_none, real_or_none

#: The verbosity at which llama.cpp prints its buffer sizes (its INFO level maps to verbosity 4).
LOG_VERBOSITY = 4
#: The flags that set llama.cpp's log verbosity (common/arg.cpp).
LOG_VERBOSITY_FLAGS = ("-lv", "--verbosity", "--log-verbosity")
#: The flags that turn the verbose log on altogether.
VERBOSE_FLAGS = ("-v", "--verbose", "--log-verbose")

# The lines of one allocation each (also read by tools/groundtruth/record.py, which records them as fixtures).
# common/log.cpp prefixes each line with a timestamp and a level letter when timestamps are on: "0.00.123.456 I "
_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ")
RE_MODEL_BUF = re.compile(r"^load_tensors: +(\S+) model buffer size = +([\d.]+) MiB")
RE_KV_BUF = re.compile(r"^llama_kv_cache: +(\S+) KV buffer size = +([\d.]+) MiB")
RE_RS_BUF = re.compile(r"^llama_memory_recurrent: +(\S+) RS buffer size = +([\d.]+) MiB")
RE_OUTPUT = re.compile(r"^llama_context: +(\S+) +output buffer size = +([\d.]+) MiB")
RE_COMPUTE_BUF = re.compile(r"^sched_reserve: +(\S+) compute buffer size = +([\d.]+) MiB")
RE_CLIP_MODEL = re.compile(r"^load_hparams: model size: +([\d.]+) MiB")
RE_CLIP_COMPUTE = re.compile(r"^reserve_compute_meta: +(\S+) compute buffer size = +([\d.]+) MiB")
RE_KV_SIZE = re.compile(
    r"^llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\), "
    r"K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB"
)
RE_CREATING = re.compile(r"^\w+: creating +(.+?)(?:, size = \d+ cells)?$")
RE_RS_SIZE = re.compile(
    r"^llama_memory_recurrent: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+) seqs +(\d+) rs_seq\), "
    r"R \((\w+)\): +([\d.]+) MiB, S \((\w+)\): +([\d.]+) MiB(?:, P \((\w+)\): +([\d.]+) MiB)?"
)
RE_CTX_PARAM = re.compile(r"^llama_context: (n_\w+|kv_unified|flash_attn|causal_attn) += (\S+)")
RE_FA = re.compile(
    r": Flash Attention (enabled|not supported, set to disabled)$|(enabling flash_attn since .*)"
)
RE_WORST = re.compile(r"^sched_reserve: worst-case: n_tokens = (\d+), n_seqs = (\d+), n_outputs = (\d+)")
RE_BREAKDOWN = re.compile(r"^common_memory_breakdown_print: \|\s+-\s+(.+?)\s+\|(.*)\|\s*$")
# common_params_print_info at verbosity 4: "cmn  common_param:   - CPU     : Intel(R) Xeon(R) (64000 MiB, 60000 MiB free)"
_DEVICE = re.compile(r"(?:^|: )\s+- (\S+)\s*: (.*) \((\d+) MiB, (\d+) MiB free\)\s*$")
_BUILD = re.compile(r"build(?: =|:)? (\d+) \(([0-9a-f]+)\)")
_LOADED = re.compile(r"\bmodel loaded\s*$|all slots are idle|server is listening")
_LISTENING = re.compile(r"listening on (\S+)")

# failures
_BAD_FLAG = re.compile(r'error: invalid argument: (\S+)|error while handling argument "([^"]+)": (.*)')
_PORT = re.compile(r"couldn't bind HTTP server socket, hostname: (\S+), port: (\d+)")
_ALLOC_SIZED = re.compile(r"failed to allocate (?:(\S+) )?buffer of size (\d+)")
_CUDA_OOM = re.compile(r"allocating ([\d.]+) MiB on device (\d+): \w+ failed: (.*)")
_UNABLE = re.compile(r"unable to allocate (\S+) buffer|failed to allocate (buffer for kv cache|buffer for rs cache|"
                     r"compute \w+ buffers|output buffer of size ([\d.]+) MiB)")  # fmt: skip
_LOAD_ERROR = re.compile(r"error loading model: (.*)|failed to load model[^:]*: ?(.*)|exiting due to (.*)")
_MIB = 1 << 20


class BufferKind(StrEnum):
    """What a buffer holds, as the recordings name it."""

    MODEL = "model"
    KV = "kv"
    RS = "rs"
    OUTPUT = "output"
    COMPUTE = "compute"
    MMPROJ_MODEL = "mmproj model"
    MMPROJ_COMPUTE = "mmproj compute"


@dataclass(frozen=True, slots=True)
class BufferLine:
    """One buffer llama.cpp printed: its kind, its buffer type ("CPU", "CPU_Mapped", "CUDA0"...) and MiB (two
    decimals, as printed)."""

    kind: BufferKind
    buffer_type: str
    mib: float

    @property
    def bytes(self) -> int:
        return round(self.mib * _MIB)


@dataclass(frozen=True, slots=True)
class KvCacheLine:
    cache: str  # "kv", or "base" / "swa" for the two caches of a sliding-window model
    size_mib: float
    cells: int
    layers: int
    seqs: int
    n_seq_max: int
    type_k: str
    k_mib: float
    type_v: str
    v_mib: float


@dataclass(frozen=True, slots=True)
class RsCacheLine:
    size_mib: float
    cells: int
    layers: int
    seqs: int
    rs_seq: int
    type_r: str
    r_mib: float
    type_s: str
    s_mib: float


@dataclass(frozen=True, slots=True)
class LogDevice:
    """A device as llama.cpp listed it when it started."""

    name: str  # "CPU", "CUDA0"
    description: str
    total_mib: int
    free_mib: int


@dataclass(frozen=True, slots=True)
class BreakdownRow:
    """One row of the memory breakdown table printed at exit: its name and its whole MiB, left to right."""

    row: str
    values_mib: tuple[int, ...]


class FailureKind(StrEnum):
    OUT_OF_MEMORY = "out of memory"
    UNKNOWN_FLAG = "unknown flag"
    PORT_IN_USE = "port in use"
    LOAD_ERROR = "load error"
    CRASH = "crash"
    TIMEOUT = "timeout"


@dataclass(frozen=True, slots=True)
class ServerFailure:
    """Why the server did not load, in one line, with the device and the size llama.cpp failed to allocate."""

    kind: FailureKind
    message: str
    buffer_type: str = ""  # out of memory: the buffer type (or "CUDA<n>") llama.cpp could not allocate
    requested_bytes: int = 0  # out of memory: the size of the allocation that failed (0 when not printed)
    detail: str = ""  # out of memory: what the allocation was for ("buffer for kv cache"), as llama.cpp says


@dataclass(frozen=True, slots=True)
class ServerLog:
    """Everything read from one launch's log."""

    buffers: tuple[BufferLine, ...] = ()
    kv: tuple[KvCacheLine, ...] = ()
    rs: tuple[RsCacheLine, ...] = ()
    devices: tuple[LogDevice, ...] = ()
    breakdown: tuple[BreakdownRow, ...] = ()
    resolved: tuple[tuple[str, str], ...] = ()  # llama_context's n_ctx, n_batch... as printed
    flash_attn_resolved: str = ""  # "enabled" / "disabled" when llama.cpp decided
    worst_case: tuple[int, int, int] | None = None  # n_tokens, n_seqs, n_outputs of the reserved graph
    build: tuple[int, str] | None = None  # (build number, commit) when the log says
    loaded: bool = False
    listening: str = ""  # the address it listens on
    failure: ServerFailure | None = None
    buffer_lines: tuple[
        str, ...
    ] = ()  # the lines the buffers were read from, as printed (without the prefix)

    def of_kind(self, *kinds: BufferKind) -> tuple[BufferLine, ...]:
        return tuple(b for b in self.buffers if b.kind in kinds)


def strip_prefix(line: str) -> str:
    """A log line without its timestamp and level letter."""
    return _PREFIX.sub("", line.rstrip("\r\n"))


def _buffer(line: str) -> BufferLine | None:
    for rx, kind in (
        (RE_MODEL_BUF, BufferKind.MODEL),
        (RE_KV_BUF, BufferKind.KV),
        (RE_RS_BUF, BufferKind.RS),
        (RE_OUTPUT, BufferKind.OUTPUT),
        (RE_COMPUTE_BUF, BufferKind.COMPUTE),
        (RE_CLIP_COMPUTE, BufferKind.MMPROJ_COMPUTE),
    ):
        if m := rx.match(line):
            return BufferLine(kind, m.group(1), _real(m.group(2)))
    if m := RE_CLIP_MODEL.match(line):
        return BufferLine(BufferKind.MMPROJ_MODEL, "", _real(m.group(1)))
    return None


#: The largest count a log line may carry (a MiB figure, a cell count): 2^50.
_MAX_COUNT = float(2**50)


def _real(text: str) -> float:
    """A figure from the log, through the one number parser (0 where it does not parse within bounds)."""
    return real_or_none(text, -_MAX_COUNT, _MAX_COUNT) or 0.0


def _int(text: str) -> int:
    """A whole number from the log (0 where it does not parse within bounds)."""
    return int_or_none(text.lstrip("-"), 0, int(_MAX_COUNT)) or 0


def _cache_label(label: str) -> str:
    return {"non-SWA KV cache": "base", "SWA KV cache": "swa"}.get(label, label)


def listening_in(line: str) -> bool:
    """Whether one log line says where the server listens (printed right after `model loaded`)."""
    return _LISTENING.search(line) is not None


def loaded_in(line: str) -> bool:
    """Whether one log line (without its prefix) says the model is loaded and the server serves."""
    return _LOADED.search(line) is not None


def failure_in(line: str) -> ServerFailure | None:
    """The failure one log line reports, if any."""
    if m := _BAD_FLAG.search(line):
        flag = m.group(1) or m.group(2)
        why = f" ({m.group(3).strip()})" if m.group(3) else " (an older build of llama-server?)"
        return ServerFailure(FailureKind.UNKNOWN_FLAG, f"llama-server does not accept {flag}{why}")
    if m := _PORT.search(line):
        return ServerFailure(
            FailureKind.PORT_IN_USE,
            f"port {m.group(2)} on {m.group(1)} is in use (another server?): choose another with --port",
        )
    if m := _CUDA_OOM.search(line):
        size = round(_real(m.group(1)) * _MIB)
        return _oom(f"CUDA{m.group(2)}", size, m.group(3).strip())
    if m := _ALLOC_SIZED.search(line):
        # ggml_backend_cpu_buffer_type_alloc_buffer names no buffer type: it is the host's CPU one
        cpu = "CPU" if "cpu_buffer_type_alloc_buffer" in line else ""
        return _oom(m.group(1) or cpu, _int(m.group(2)), "")
    if m := _UNABLE.search(line):
        if m.group(1):
            return _oom(m.group(1), 0, "")
        size = round(_real(m.group(3)) * _MIB) if m.group(3) else 0
        return _oom("", size, m.group(2))
    return None


def _oom(buffer_type: str, size: int, detail: str) -> ServerFailure:
    where = f" on {buffer_type}" if buffer_type else ""
    what = f" of {size / _MIB:.2f} MiB" if size else ""
    extra = f" ({detail})" if detail else ""
    return ServerFailure(
        FailureKind.OUT_OF_MEMORY,
        f"out of memory while loading: an allocation{what} failed{where}{extra}",
        buffer_type,
        size,
        detail,
    )


def _merge_failure(old: ServerFailure | None, new: ServerFailure) -> ServerFailure:
    """The first failure is the cause; a later out-of-memory line may name the buffer type or size it lacked."""
    if old is None:
        return new
    if old.kind is FailureKind.OUT_OF_MEMORY and new.kind is FailureKind.OUT_OF_MEMORY:
        bt = old.buffer_type or new.buffer_type
        size = old.requested_bytes or new.requested_bytes
        return _oom(bt, size, old.detail or new.detail)
    return old


@dataclass
class _State:
    buffers: list[BufferLine]
    buffer_lines: list[str]
    kv: list[KvCacheLine]
    rs: list[RsCacheLine]
    devices: list[LogDevice]
    breakdown: list[BreakdownRow]
    resolved: dict[str, str]
    pending_cache: str = "kv"
    fa: str = ""
    worst: tuple[int, int, int] | None = None
    build: tuple[int, str] | None = None
    loaded: bool = False
    listening: str = ""
    failure: ServerFailure | None = None
    load_error: str = ""


def _step(st: _State, line: str) -> None:
    if b := _buffer(line):
        st.buffers.append(b)
        st.buffer_lines.append(line)
        return
    if m := RE_CREATING.match(line):
        st.pending_cache = _cache_label(m.group(1))
    elif m := RE_KV_SIZE.match(line):
        g = m.groups()
        st.kv.append(
            KvCacheLine(st.pending_cache, _real(g[0]), _int(g[1]), _int(g[2]), _int(g[3]), _int(g[4]), g[5],
                        _real(g[6]), g[7], _real(g[8]))
        )  # fmt: skip
        st.pending_cache = "kv"
    elif m := RE_RS_SIZE.match(line):
        g = m.groups()
        st.rs.append(
            RsCacheLine(_real(g[0]), _int(g[1]), _int(g[2]), _int(g[3]), _int(g[4]), g[5], _real(g[6]), g[7],
                        _real(g[8]))
        )  # fmt: skip
    elif m := RE_CTX_PARAM.match(line):
        st.resolved[m.group(1)] = m.group(2)
    elif m := RE_WORST.match(line):
        st.worst = (_int(m.group(1)), _int(m.group(2)), _int(m.group(3)))
    elif m := RE_BREAKDOWN.match(line):
        st.breakdown.append(
            BreakdownRow(m.group(1), tuple(round(_real(x)) for x in re.findall(r"-?\d+", m.group(2))))
        )
    elif m := _DEVICE.search(line):
        st.devices.append(LogDevice(m.group(1), m.group(2).strip(), _int(m.group(3)), _int(m.group(4))))
    _step_state(st, line)


def _step_state(st: _State, line: str) -> None:
    """What a line says of the server's state: flash attention, the build, loaded, listening, a failure."""
    if m := RE_FA.search(line):
        st.fa = "disabled" if m.group(1) and m.group(1) != "enabled" else "enabled"
    if st.build is None and "build" in line and (m := _BUILD.search(line)):
        st.build = (_int(m.group(1)), m.group(2))
    if loaded_in(line):
        st.loaded = True
    if m := _LISTENING.search(line):
        st.listening = m.group(1)
    if f := failure_in(line):
        st.failure = _merge_failure(st.failure, f)
    elif not st.load_error and (m := _LOAD_ERROR.search(line)):
        st.load_error = next((g for g in m.groups() if g), "").strip() or line.strip()


def parse_server_log(lines: Iterable[str]) -> ServerLog:
    """Read a llama-server log (with or without timestamps) into a `ServerLog`."""
    st = _State([], [], [], [], [], [], {})
    for raw in lines:
        _step(st, strip_prefix(raw))
    failure = st.failure
    if failure is None and st.load_error and not st.loaded:
        failure = ServerFailure(
            FailureKind.LOAD_ERROR, f"llama-server could not load the model: {st.load_error}"
        )
    return ServerLog(
        buffers=tuple(st.buffers),
        kv=tuple(st.kv),
        rs=tuple(st.rs),
        devices=tuple(st.devices),
        breakdown=tuple(st.breakdown),
        resolved=tuple(st.resolved.items()),
        flash_attn_resolved=st.fa,
        worst_case=st.worst,
        build=st.build,
        loaded=st.loaded and failure is None,
        listening=st.listening,
        failure=failure,
        buffer_lines=tuple(st.buffer_lines),
    )


@dataclass(frozen=True, slots=True)
class BuildInfo:
    """`llama-server --version`: "version: 0.6.0 (build 11434, commit 515e85511)" (common/build-info.cpp.in) and the
    compiler line. A build from a source archive says "build 0, commit unknown": then build is None, commit ""."""

    build: int | None
    commit: str
    text: str


_VERSION = re.compile(r"version: \S+ \(build (\d+), commit (\w+)\)|version: (\d+) \(([0-9a-f]+)\)")


def parse_version(text: str) -> BuildInfo:
    clean = " ".join(strip_prefix(x).strip() for x in text.splitlines() if x.strip())
    m = _VERSION.search(text)
    if m is None:
        return BuildInfo(None, "", clean)
    build, commit = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))
    known = int(build) > 0 and commit != "unknown"
    return BuildInfo(int(build) if known else None, commit if known else "", clean)


def needs_verbosity(argv: Iterable[str]) -> bool:
    """Whether the command leaves llama.cpp's verbosity below the level its buffer lines print at."""
    words = list(argv)
    if any(w in VERBOSE_FLAGS for w in words):
        return False
    for i, w in enumerate(words):
        value = w.split("=", 1)[1] if "=" in w and w.split("=", 1)[0] in LOG_VERBOSITY_FLAGS else None
        if value is None and w in LOG_VERBOSITY_FLAGS and i + 1 < len(words):
            value = words[i + 1]
        if value is not None:
            level = int_or_none(value, 0, 1000)
            return not (level is not None and level >= LOG_VERBOSITY)
    return True
