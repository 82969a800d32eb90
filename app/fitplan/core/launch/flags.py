"""llama-server's flags, both ways: one table (`FLAGS`) that reads pasted arguments into LaunchSettings, and writes
settings back as a command line or as a `--models-preset` INI section.

The flag names and arities come from llama.cpp's `common/arg.cpp` of the targeted build (515e85511). Each row of
`FLAGS` is one flag that changes memory: every spelling (aliases included), the LaunchSettings field it sets, how its
value is read and checked (integer ranges, finite non-negative numbers, choices), how it is written and when it is
left out (equal to llama-server's default), which engine has it, and its preset key. The rows are in the order the
command line is written. Every other flag llama.cpp knows is accepted, its values consumed, and reported as ignored
(`ParsedFlags.passthrough` keeps its words, so an exported command can carry it on); anything else raises
`FlagError`. Every error is one line naming the flag.
"""

from __future__ import annotations

import dataclasses
import math
import re
import re._constants as re_constants
import re._parser as re_parser
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fitplan.core import engines
from fitplan.core.base.devices import LLAMA_MAX_DEVICES
from fitplan.core.base.errors import FlagError
from fitplan.core.base.launch_settings import (
    NGL_ALL,
    NGL_AUTO,
    DraftSettings,
    Engine,
    FlashAttn,
    LaunchSettings,
    LoadMode,
    MmprojPlacement,
    SplitMode,
    TensorOverride,
)
from fitplan.core.base.numbers import int_or_none, real_or_none
from fitplan.core.gguf.hub import HF_REF_PREFIX, hf_arg
from fitplan.core.gguf.remote import is_url
from fitplan.core.memory.context import LLAMA_MAX_SEQ

#: `common.h:LLM_FFN_DENSE_REGEX`: what `--n-cpu-ffn N` moves to the CPU (per layer).
FFN_DENSE_REGEX = r"\.ffn_(up|down|gate)\."

#: llama.cpp reads integer flags with std::stoi: a 32-bit int.
INT32_MAX = 2**31 - 1
#: src/llama-hparams.h LLAMA_MAX_LAYERS: no model has more layers (--n-cpu-ffn N makes N overrides).
LLAMA_MAX_LAYERS = 512
#: ollama's OLLAMA_GPU_OVERHEAD is bytes; more than 1 PiB per GPU is a typo.
MAX_OVERHEAD_BYTES = 2**50
#: `--reserve` (MiB per GPU): at most 1 TiB.
MAX_RESERVE_MIB = 2**20
#: `-ngl` for every layer in ik_llama.cpp (its parser takes an integer; more than the model has = all).
IK_NGL_ALL = 999

ENGINE_FLAG = "--engine"

_TRUTHY = {"on", "enabled", "true", "1"}
_FALSEY = {"off", "disabled", "false", "0"}
_INT = re.compile(r"[+-]?[0-9]{1,19}")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,3})?")

#: llama-server's defaults: a flag equal to its default is left out of a written command.
DEFAULTS = LaunchSettings()


# ---------------------------------------------------------------------------------------------------------------------
# Value readers: (flag, text, engine) -> value, or a one-line FlagError naming the flag
# ---------------------------------------------------------------------------------------------------------------------

Reader = Callable[[str, str, Engine], Any]


def _int(flag: str, value: str) -> int:
    n = int_or_none(value, -(2**63), 2**63 - 1) if _INT.fullmatch(value.strip()) else None
    if n is None:
        raise FlagError(f"{flag}: expected an integer, got {_shown(value)}")
    return n


def _shown(value: str) -> str:
    """A value as an error message shows it: repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _in_range(flag: str, n: int, lo: int, hi: int, why: str = "") -> int:
    if n < lo:
        raise FlagError(f"{flag}: must be >= {lo} (got {n})")
    if n > hi:
        raise FlagError(f"{flag}: must be <= {hi}{why} (got {n})")
    return n


def int_in(lo: int, hi: int = INT32_MAX, why: str = "") -> Reader:
    """An integer in [lo, hi]; `why` says where the upper bound comes from."""
    if hi == INT32_MAX and not why:
        why = " (llama.cpp reads it as a 32-bit integer)"

    def read(flag: str, value: str, _engine: Engine) -> int:
        return _in_range(flag, _int(flag, value), lo, hi, why)

    return read


def _ngl(flag: str, value: str, _engine: Engine = Engine.LLAMA_CPP) -> int:
    """-ngl N|auto|all; a negative N is "auto", as in llama.cpp."""
    if value == "auto":
        return NGL_AUTO
    if value == "all":
        return NGL_ALL
    n = _in_range(flag, _int(flag, value), -(2**31), INT32_MAX, " (llama.cpp reads it as a 32-bit integer)")
    return n if n >= 0 else NGL_AUTO


def _number(flag: str, text: str, example: str) -> float:
    """A finite number >= 0 (no nan, inf, or negative share)."""
    if not _DECIMAL.fullmatch(text.strip()):
        raise FlagError(f"{flag}: expected finite numbers >= 0 like {example} (got {_shown(text)})")
    x = real_or_none(text, 0, math.inf)
    if x is None:
        raise FlagError(f"{flag}: {_shown(text)} must be a finite number >= 0")
    return x


def _split_list(value: str) -> list[str]:
    return [p for p in re.split(r"[,/]+", value) if p]


def _counted(flag: str, parts: list[str]) -> list[str]:
    if len(parts) > LLAMA_MAX_DEVICES:
        raise FlagError(f"{flag}: at most {LLAMA_MAX_DEVICES} values, one per device (got {len(parts)})")
    return parts


#: A -ts share is a proportion: llama.cpp reads it as a 32-bit float and sums up to 16 of them.
MAX_SHARE = 1e12


def _tensor_split(flag: str, value: str, _engine: Engine) -> tuple[float, ...]:
    shares = tuple(_number(flag, x, "3,1") for x in _counted(flag, _split_list(value)))
    if any(x > MAX_SHARE for x in shares):
        raise FlagError(f"{flag}: a share must be <= {MAX_SHARE:g} (proportions like 3,1)")
    return shares


def _fit_target(flag: str, value: str, _engine: Engine) -> tuple[int, ...]:
    out = []
    for x in _counted(flag, _split_list(value)):
        n = int_or_none(x, -(2**63), 2**63 - 1) if _INT.fullmatch(x.strip()) else None
        if n is None:
            raise FlagError(f"{flag}: expected MiB values like 1024,2048 (got {_shown(value)})")
        out.append(_in_range(flag, n, 0, INT32_MAX, " MiB"))
    return tuple(out)


def _choice(flag: str, value: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise FlagError(f"{flag}: {_shown(value)} is not one of {', '.join(choices)}")
    return value


def _enum(kind: type[SplitMode] | type[LoadMode]) -> Reader:
    def read(flag: str, value: str, _engine: Engine) -> Any:
        return kind(_choice(flag, value, [m.value for m in kind]))

    return read


def _on_off(flag: str, value: str, _engine: Engine) -> bool:
    lv = value.lower()
    if lv in _TRUTHY:
        return True
    if lv in _FALSEY:
        return False
    raise FlagError(f"{flag}: expected on or off, got {_shown(value)}")


def _flash_attn(flag: str, value: str, _engine: Engine) -> FlashAttn:
    lv = value.lower()
    if lv == "auto":
        return FlashAttn.AUTO
    if lv in _TRUTHY or lv in _FALSEY:
        return FlashAttn.ON if lv in _TRUTHY else FlashAttn.OFF
    raise FlagError(f"{flag}: unknown value {_shown(value)} (on, off or auto)")


def _ollama_flash(flag: str, value: str, _engine: Engine) -> bool:
    lv = value.lower()
    if lv in _TRUTHY or lv in _FALSEY:
        return lv in _TRUTHY
    raise FlagError(f"{flag}: expected 0 or 1, got {_shown(lv)}")


def _text(flag: str, value: str, _engine: Engine) -> str:
    if "\x00" in value:
        raise FlagError(f"{flag}: a value cannot contain a NUL character")
    return value


def _words(flag: str, value: str, engine: Engine) -> tuple[str, ...]:
    """A comma-separated list (--rpc, --spec-type, -dev)."""
    return tuple(p for p in _text(flag, value, engine).split(",") if p)


def _devices(flag: str, value: str, engine: Engine) -> tuple[str, ...]:
    return () if value == "none" else _words(flag, value, engine)


def _overrides(flag: str, value: str, _engine: Engine = Engine.LLAMA_CPP) -> tuple[TensorOverride, ...]:
    out = []
    for item in value.split(","):
        if "=" not in item:
            raise FlagError(f"{flag}: {_shown(item)} is not PATTERN=BUFFER_TYPE")
        pat, buft = item.split("=", 1)
        try:
            parsed = re_parser.parse(pat)
            re.compile(pat)
        except (re.error, RecursionError, OverflowError) as exc:
            raise FlagError(f"{flag}: bad regular expression {_shown(pat)}: {exc}") from None
        if _backtracks(parsed, inside=False):
            raise FlagError(
                f"{flag}: {_shown(pat)} repeats a repetition or a choice (like (a*)* or (a|ab)*): matching it can "
                "take exponential time, in llama.cpp's std::regex too; write it without the nested repetition"
            )
        out.append(TensorOverride(pat, buft))
    return tuple(out)


_REPEATS = frozenset({re_constants.MAX_REPEAT, re_constants.MIN_REPEAT, re_constants.POSSESSIVE_REPEAT})


def _backtracks(parsed: re_parser.SubPattern | list[Any], inside: bool) -> bool:
    """Whether a parsed pattern has an unbounded repetition inside another one, or a choice inside one: the
    shapes whose backtracking grows exponentially with the name's length (a tensor name has up to 63 bytes, and
    `(a*)*b` on 25 of them takes seconds)."""
    for op, av in parsed:
        subs: list[Any]
        if op in _REPEATS:
            unbounded = av[1] == re_constants.MAXREPEAT
            if unbounded and inside:
                return True
            subs, inner = [av[2]], inside or unbounded
        elif op is re_constants.BRANCH:
            if inside:
                return True
            subs, inner = list(av[1]), inside
        elif op is re_constants.SUBPATTERN:
            subs, inner = [av[-1]], inside
        elif op in (re_constants.ASSERT, re_constants.ASSERT_NOT):
            subs, inner = [av[1]], inside
        else:
            continue
        if any(_backtracks(sub, inner) for sub in subs):
            return True
    return False


#: How each engine spells a cache type in its own parser (ik's `q8_KV`); everything else is lower case.
_CANONICAL_CACHE_TYPE: dict[str, str] = {"q8_kv": "q8_KV"}


def cache_type_choice(flag: str, value: str, engine: Engine) -> str:
    """A -ctk/-ctv value the engine accepts, in the engine's own spelling; a fork's type with another engine is an
    error naming the engine that has it."""
    low = value.lower()
    allowed = engines.cache_types(engine)
    if low in allowed:
        return _CANONICAL_CACHE_TYPE.get(low, low)
    owners = [e.value for e in Engine if e is not engine and low in engines.cache_types(e)]
    if owners:
        raise FlagError(
            f"{flag}: cache type {_shown(value)} is a type of {' / '.join(owners)} only: add --engine {owners[0]}"
        )
    raise FlagError(f"{flag}: {_shown(value)} is not one of {', '.join(allowed)}")


def _positive_real(flag: str, value: str, _engine: Engine) -> float:
    x = real_or_none(value, 0.0, 1e9)
    if x is None or x <= 0:
        raise FlagError(f"{flag}: expected a positive number, got {_shown(value)}")
    return x


def _real(x: float) -> str:
    return f"{x:g}"


def _lora_scaled(flag: str, value: str, engine: Engine) -> tuple[str, ...]:
    """`--lora-scaled FNAME:SCALE,...` as llama.cpp's parser splits it (common/arg.cpp): exactly one ':' each."""
    items = _words(flag, value, engine)
    for item in items:
        parts = item.split(":")
        if len(parts) != 2 or not parts[0] or real_or_none(parts[1], -1e9, 1e9) is None:
            raise FlagError(f"{flag}: {_shown(item)} is not FNAME:SCALE")
    return items


def _lower_choice(choices: Sequence[str]) -> Reader:
    def read(flag: str, value: str, _engine: Engine) -> str:
        return _choice(flag, value.lower(), choices)

    return read


def _mla(flag: str, value: str, _engine: Engine) -> int:
    n = _int(flag, value)
    if n not in (0, 1, 2, 3):
        raise FlagError(f"{flag}: must be 0, 1, 2 or 3 (got {n})")
    return n


def _tail_tokens(flag: str, value: str, _engine: Engine) -> tuple[int, int]:
    """`--kv-tail-tokens N|auto|full=N,swa=M`: (full-attention tail, SWA tail or -1 = the same)."""

    def one(x: str) -> int:
        if x.lower() == "auto":
            return engines.KV_TAIL_AUTO
        return _in_range(flag, _int(flag, x), 0, INT32_MAX, " tokens")

    if "=" not in value:
        return one(value), -1
    full, swa = 0, -1
    for item in value.split(","):
        name, _, x = item.partition("=")
        if name == "full":
            full = one(x)
        elif name == "swa":
            swa = one(x)
        else:
            raise FlagError(f"{flag}: {_shown(item)} is not full=N or swa=N")
    return full, swa


def parse_mib(flag: str, value: str) -> float:
    """A fitplan size option in MiB (`--reserve`): a finite number, 0 to 1 TiB."""
    x = _number(flag, value, "512")
    if x > MAX_RESERVE_MIB:
        raise FlagError(f"{flag}: must be <= {MAX_RESERVE_MIB} MiB (1 TiB), got {_shown(value)}")
    return x


# ---------------------------------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class _Parse:
    """What parsing collects before it becomes LaunchSettings."""

    engine: Engine
    base: LaunchSettings
    upd: dict[str, object] = dataclasses.field(default_factory=dict)
    overrides: list[TensorOverride] = dataclasses.field(default_factory=list)
    cpu_ffn: list[TensorOverride] = dataclasses.field(default_factory=list)
    rpc: list[str] = dataclasses.field(default_factory=list)
    draft: dict[str, object] = dataclasses.field(default_factory=dict)
    ollama: dict[str, object] = dataclasses.field(default_factory=dict)
    model: str | None = None


@dataclass(frozen=True, slots=True)
class Source:
    """What a command line is written from."""

    settings: LaunchSettings
    model_path: str | None = None
    rpc_servers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Written:
    """One flag to write: the field it comes from, CLI spelling, value (None for a switch), preset key and value."""

    key: str
    flag: str
    value: str | None
    ini_key: str
    ini_value: str


Store = Callable[["_Parse", "Flag", Any], None]
Writer = Callable[["Flag", Source], "list[Written]"]


def _set(st: _Parse, row: Flag, value: Any) -> None:
    st.upd[row.field] = row.const if row.read is None else value


@dataclass(frozen=True, slots=True)
class Flag:
    """One llama-server flag that changes memory."""

    key: str  # what it sets, as `given_keys` reports it (a LaunchSettings field or a pseudo-key)
    names: tuple[str, ...]  # every spelling the engine registers; () for a row that only writes
    field: str = ""  # the LaunchSettings field it sets and writes ("" when it has none)
    read: Reader | None = None  # reads and checks the value; None: a switch that takes none
    const: object = None  # a switch's value of `field`
    store: Store = _set  # where the value goes
    write: Writer | None = None  # the flags written for settings (None: read only)
    fmt: Callable[[Any], str] = str  # a value as written
    engine: Engine | None = None  # the only engine that has it (None: mainline, every engine)
    spelling: str = ""  # the spelling written (default: the first name)
    ini: str = ""  # the preset key
    ini_value: str = "true"  # a switch's preset value
    env: str = ""  # ollama: the environment variable that is the same setting
    pins: tuple[str, ...] = ()  # the settings it pins (default: its key)

    @property
    def takes_value(self) -> bool:
        return self.read is not None

    @property
    def short(self) -> str:
        return self.spelling or self.names[0]

    @property
    def default(self) -> object:
        """llama-server's default of the field (written flags equal to it are left out)."""
        return getattr(DEFAULTS, self.field, None)

    def emit(self, value: str | None, *, key: str = "") -> Written:
        ini_value = self.ini_value if value is None else value
        return Written(key or self.field, self.short, value, self.ini, ini_value)


# -- stores -------------------------------------------------------------------------------------------------------


def _model(st: _Parse, row: Flag, value: str) -> None:
    st.model = value


def _rpc(st: _Parse, row: Flag, value: tuple[str, ...]) -> None:
    st.rpc.extend(value)


def _add_overrides(st: _Parse, row: Flag, value: tuple[TensorOverride, ...]) -> None:
    st.overrides.extend(value)


def _cpu_ffn(st: _Parse, row: Flag, n: int) -> None:
    st.cpu_ffn.extend(TensorOverride(f"blk\\.{k}{FFN_DENSE_REGEX}", "CPU") for k in range(n))


def _append(st: _Parse, row: Flag, value: tuple[str, ...]) -> None:
    prev = st.upd.get(row.field, ())
    assert isinstance(prev, tuple)
    st.upd[row.field] = prev + value


def _draft(st: _Parse, row: Flag, value: object) -> None:
    st.draft[row.key] = value


def _draft_n_max(st: _Parse, row: Flag, value: int) -> None:
    st.draft[row.key] = value
    st.upd["spec_draft_n_max"] = value


def _no_mmap(st: _Parse, row: Flag, value: None) -> None:
    st.upd["load_mode"] = LoadMode.MLOCK if st.upd.get("load_mode") is LoadMode.MMAP_MLOCK else LoadMode.NONE


def _mlock(st: _Parse, row: Flag, value: None) -> None:
    st.upd["load_mode"] = LoadMode.MLOCK if st.upd.get("load_mode") is LoadMode.NONE else LoadMode.MMAP_MLOCK


def _tail(st: _Parse, row: Flag, value: tuple[int, int]) -> None:
    st.upd["kv_tail_tokens"], st.upd["kv_tail_tokens_swa"] = value


def _ollama(st: _Parse, row: Flag, value: object) -> None:
    st.ollama[row.key] = value


# -- writers ------------------------------------------------------------------------------------------------------


def _changed(row: Flag, src: Source) -> list[Written]:
    """The flag when its field differs from llama-server's default (a switch: when it holds the switch's value)."""
    s = src.settings
    if row.engine is not None and s.engine is not row.engine:
        return []
    v = getattr(s, row.field)
    if v == row.default:
        return []
    if row.read is None:
        return [row.emit(None)] if v == row.const else []
    return [row.emit(row.fmt(v))]


def _w_model(row: Flag, src: Source) -> list[Written]:
    """-hf for a Hub model (`hf.co/ORG/REPO:QUANT`: llama-server downloads it), -mu for a URL, -m for a path."""
    p = src.model_path
    if not p:
        return []
    hf = hf_arg(p)
    if row.key == "hf_repo":
        return [row.emit(hf)] if hf is not None else []
    if hf is not None or is_url(p) != (row.key == "model_url"):
        return []
    return [row.emit(first_shard(p))]


def _w_mmproj(row: Flag, src: Source) -> list[Written]:
    """--mmproj for a local projector, -mmu for one by URL; none with -hf, which fetches the repository's own."""
    s = src.settings
    if not s.mmproj_path or s.mmproj is MmprojPlacement.NONE:
        return []
    url = is_url(s.mmproj_path)
    if url and src.model_path and hf_arg(src.model_path) is not None:
        return []
    if url != (row.key == "mmproj_url"):
        return []
    return [row.emit(s.mmproj_path)]


def _w_no_mmproj(row: Flag, src: Source) -> list[Written]:
    """--no-mmproj only matters for -hf (which otherwise loads the repository's projector): written there when the
    projector is switched off, by the flag or by choosing no projector."""
    s = src.settings
    off = not s.mmproj_auto or s.mmproj is MmprojPlacement.NONE
    return [row.emit(None)] if off and src.model_path and hf_arg(src.model_path) is not None else []


def _hf_model(st: _Parse, row: Flag, value: str) -> None:
    st.model = HF_REF_PREFIX + value  # the loader reads `hf.co/ORG/REPO:QUANT`


def _w_rpc(row: Flag, src: Source) -> list[Written]:
    return [row.emit(",".join(src.rpc_servers))] if src.rpc_servers else []


def _w_ctx(row: Flag, src: Source) -> list[Written]:
    # always written when set: 0 would mean the training context, and --fit may lower an unset one
    return [row.emit(str(src.settings.n_ctx))] if src.settings.n_ctx > 0 else []


def _w_kvu(row: Flag, src: Source) -> list[Written]:
    # only with an explicit -np: with -np auto the server forces a unified cache anyway
    s = src.settings
    return [row.emit(None)] if s.kv_unified is True and s.n_parallel >= 0 else []


def _ngl_text(n: int) -> str:
    return "all" if n == NGL_ALL else ("auto" if n == NGL_AUTO else str(n))


def _w_ngl(row: Flag, src: Source) -> list[Written]:
    s = src.settings
    if s.n_gpu_layers == NGL_AUTO:
        return []
    if s.engine is Engine.IK_LLAMA and s.n_gpu_layers == NGL_ALL:
        return [row.emit(str(IK_NGL_ALL))]  # ik_llama.cpp's -ngl takes a number only
    return [row.emit(_ngl_text(s.n_gpu_layers))]


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _w_ncmoe(row: Flag, src: Source) -> list[Written]:
    s = src.settings
    return [row.emit(str(s.n_cpu_moe))] if not s.cpu_moe and s.n_cpu_moe > 0 else []


def _w_ot(row: Flag, src: Source) -> list[Written]:
    return [row.emit(f"{o.pattern}={o.buffer_type}") for o in src.settings.tensor_overrides]


def _w_fa(row: Flag, src: Source) -> list[Written]:
    s = src.settings
    if s.flash_attn is FlashAttn.AUTO or (s.engine is Engine.IK_LLAMA and s.flash_attn is FlashAttn.ON):
        return []
    return [row.emit(s.flash_attn.value)]


def _w_mmproj_cpu(row: Flag, src: Source) -> list[Written]:
    s = src.settings
    return [row.emit(None)] if s.mmproj_path and s.mmproj is MmprojPlacement.CPU else []


def _w_load_mode(row: Flag, src: Source) -> list[Written]:
    """-lm for mainline; ik_llama.cpp has the older switches --no-mmap and --mlock."""
    s = src.settings
    mode, ik = s.load_mode, s.engine is Engine.IK_LLAMA
    if mode is LoadMode.AUTO:
        return []
    if row.key == "load_mode":
        return [] if ik else [row.emit(mode.value)]
    if not ik:
        return []
    if row.key == "no_mmap":
        return [row.emit(None, key="load_mode")] if mode in _NO_MMAP and not s.run_time_repack else []
    return [row.emit(None, key="load_mode")] if mode in (LoadMode.MLOCK, LoadMode.MMAP_MLOCK) else []


_NO_MMAP = (LoadMode.NONE, LoadMode.DIO, LoadMode.MLOCK)


def _w_draft(row: Flag, src: Source) -> list[Written]:
    """A draft model's flags, from DraftSettings (each left out at its default)."""
    d = src.settings.draft
    if d is None:
        return []
    attr = row.field.removeprefix("draft.")
    v = getattr(d, attr)
    if attr != "model_path" and v == getattr(_DRAFT_DEFAULTS, attr):
        return []
    return [row.emit(_ngl_text(v) if attr == "n_gpu_layers" else str(v))]


_DRAFT_DEFAULTS = DraftSettings(model_path="")


def _w_n_max(row: Flag, src: Source) -> list[Written]:
    s = src.settings
    if s.draft is not None:
        return (
            []
            if s.draft.n_max == _DRAFT_DEFAULTS.n_max
            else [row.emit(str(s.draft.n_max), key="draft.n_max")]
        )
    return _changed(row, src)


def _w_ik_always(row: Flag, src: Source) -> list[Written]:
    """-mla is always written for ik_llama.cpp, and -fmoe whenever it is on (their defaults differ by version)."""
    s = src.settings
    if s.engine is not Engine.IK_LLAMA:
        return []
    v = getattr(s, row.field)
    if row.read is None:
        return [row.emit(None)] if v == row.const else []
    return [row.emit(str(v))]


def _w_v_swa(row: Flag, src: Source) -> list[Written]:
    s = src.settings
    if s.engine is not Engine.BEELLAMA or not s.cache_type_k_swa:
        return []
    return [row.emit(s.cache_type_v_swa or s.cache_type_k_swa)]


def _w_tail(row: Flag, src: Source) -> list[Written]:
    s = src.settings
    if s.engine is not Engine.BEELLAMA or not (s.kv_tail_tokens > 0 or s.kv_tail_tokens_swa >= 0):
        return []
    if s.kv_tail_tokens_swa >= 0:
        return [row.emit(f"full={s.kv_tail_tokens},swa={s.kv_tail_tokens_swa}")]
    return [row.emit(str(s.kv_tail_tokens))]


def _w_mtp(row: Flag, src: Source) -> list[Written]:
    """An MTP draft context's cache types (beellama): written as --spec-draft-type-k/-v, read back as -ctkd/-ctvd."""
    s = src.settings
    if s.draft is not None or "draft-mtp" not in s.spec_types:
        return []
    return _changed(row, src)


def _w_fit(row: Flag, src: Source) -> list[Written]:
    """--fit off whenever the settings say so: a plan fixes context and placement (ik_llama.cpp has no --fit)."""
    s = src.settings
    if s.engine is Engine.IK_LLAMA:
        return []
    if row.key == "fit":
        return [] if s.fit else [row.emit("off")]
    return _changed(row, src) if s.fit else []


_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def first_shard(path: str) -> str:
    """`model-00003-of-00005.gguf` -> `model-00001-of-00005.gguf`: llama.cpp is given the first shard of a split."""
    return _SHARD.sub(lambda m: f"-{1:05d}-of-{m.group(2)}.gguf", path)


def _join(values: tuple[object, ...]) -> str:
    return ",".join(str(v) for v in values)


_IK, _BEE, _OLL = Engine.IK_LLAMA, Engine.BEELLAMA, Engine.OLLAMA
_ANY_INT = int_in(-(2**31))
_COUNT = int_in(0)

#: Every flag that changes memory, in the order a command line is written (read-only rows where they belong).
#: ik_llama.cpp: common/common.cpp; beellama.cpp: docs/beellama-args.md; ollama: its environment variables and
#: Modelfile parameters, spelled as flags (`--num-ctx` = PARAMETER num_ctx, `--gpu-overhead` = OLLAMA_GPU_OVERHEAD).
# fmt: off
FLAGS: tuple[Flag, ...] = (
    Flag("model", ("-m", "--model"), "model", _text, store=_model, write=_w_model, ini="model"),
    Flag("model_url", ("-mu", "--model-url"), "model", _text, store=_model, write=_w_model, ini="model-url"),
    Flag("hf_repo", ("-hf", "-hfr", "--hf-repo"), "model", _text, store=_hf_model, write=_w_model, ini="hf-repo"),
    Flag("mmproj_path", ("-mm", "--mmproj"), "mmproj_path", _text, write=_w_mmproj, spelling="--mmproj",
         ini="mmproj"),
    Flag("mmproj_url", ("-mmu", "--mmproj-url"), "mmproj_path", _text, write=_w_mmproj, ini="mmproj-url"),
    Flag("no_mmproj", ("--no-mmproj", "--no-mmproj-auto"), "mmproj_auto", const=False, write=_w_no_mmproj,
         ini="mmproj-auto", ini_value="false"),
    Flag("mmproj_auto", ("--mmproj-auto",), "mmproj_auto", const=True, ini="mmproj-auto"),
    Flag("rpc", ("--rpc",), "rpc", _words, store=_rpc, write=_w_rpc, ini="rpc"),
    Flag("n_ctx", ("-c", "--ctx-size"), "n_ctx", _COUNT, write=_w_ctx, ini="ctx-size"),
    Flag("n_parallel", ("-np", "--parallel"), "n_parallel",
         int_in(-1, LLAMA_MAX_SEQ, " (llama.cpp's LLAMA_MAX_SEQ)"), write=_changed, ini="parallel"),
    Flag("kv_unified", ("-kvu", "--kv-unified"), "kv_unified", const=True, write=_w_kvu, ini="kv-unified"),
    Flag("no_kv_unified", ("-no-kvu", "--no-kv-unified"), "kv_unified", const=False, ini="kv-unified",
         ini_value="false"),
    Flag("n_gpu_layers", ("-ngl", "--gpu-layers", "--n-gpu-layers"), "n_gpu_layers", _ngl, write=_w_ngl,
         ini="n-gpu-layers"),
    Flag("split_mode", ("-sm", "--split-mode"), "split_mode", _enum(SplitMode), write=_changed,
         fmt=lambda m: m.value, ini="split-mode"),
    Flag("tensor_split", ("-ts", "--tensor-split"), "tensor_split", _tensor_split, write=_changed,
         fmt=lambda t: ",".join(_num(x) for x in t), ini="tensor-split"),
    Flag("main_gpu", ("-mg", "--main-gpu"), "main_gpu", int_in(0, LLAMA_MAX_DEVICES - 1, " (llama_max_devices)"),
         write=_changed, ini="main-gpu"),
    Flag("devices", ("-dev", "--device"), "devices", _devices, write=_changed,
         fmt=lambda d: _join(d) if d else "none", ini="device"),
    Flag("cpu_moe", ("-cmoe", "--cpu-moe"), "cpu_moe", const=True, write=_changed, spelling="--cpu-moe",
         ini="cpu-moe"),
    Flag("n_cpu_moe", ("-ncmoe", "--n-cpu-moe"), "n_cpu_moe", _COUNT, write=_w_ncmoe, spelling="--n-cpu-moe",
         ini="n-cpu-moe"),
    Flag("n_cpu_ffn", ("-ncffn", "--n-cpu-ffn"), "", int_in(0, LLAMA_MAX_LAYERS, " (llama.cpp's LLAMA_MAX_LAYERS)"),
         store=_cpu_ffn, ini="n-cpu-ffn"),
    Flag("tensor_overrides", ("-ot", "--override-tensor"), "tensor_overrides", _overrides, store=_add_overrides,
         write=_w_ot, ini="override-tensor"),
    Flag("cache_type_k", ("-ctk", "--cache-type-k"), "cache_type_k", cache_type_choice, write=_changed,
         ini="cache-type-k"),
    Flag("cache_type_v", ("-ctv", "--cache-type-v"), "cache_type_v", cache_type_choice, write=_changed,
         ini="cache-type-v"),
    Flag("flash_attn", ("-fa", "--flash-attn"), "flash_attn", _flash_attn, write=_w_fa, ini="flash-attn"),
    Flag("no_flash_attn", ("-no-fa", "--no-flash-attn"), "flash_attn", const=FlashAttn.OFF, engine=_IK,
         ini="no-flash-attn"),
    Flag("n_batch", ("-b", "--batch-size"), "n_batch", int_in(1), write=_changed, ini="batch-size"),
    Flag("n_ubatch", ("-ub", "--ubatch-size"), "n_ubatch", int_in(1), write=_changed, ini="ubatch-size"),
    Flag("no_mmproj_offload", ("--no-mmproj-offload",), "mmproj", const=MmprojPlacement.CPU, write=_w_mmproj_cpu,
         ini="mmproj-offload", ini_value="false"),
    Flag("mmproj_offload", ("--mmproj-offload",), "mmproj", const=MmprojPlacement.GPU, ini="mmproj-offload"),
    Flag("image_min_tokens", ("--image-min-tokens",), "image_min_tokens", int_in(-1), write=_changed,
         ini="image-min-tokens"),
    Flag("image_max_tokens", ("--image-max-tokens",), "image_max_tokens", int_in(-1), write=_changed,
         ini="image-max-tokens"),
    Flag("no_kv_offload", ("-nkvo", "--no-kv-offload"), "no_kv_offload", const=True, write=_changed,
         ini="kv-offload", ini_value="false"),
    Flag("kv_offload", ("-kvo", "--kv-offload"), "no_kv_offload", const=False, ini="kv-offload"),
    Flag("swa_full", ("--swa-full",), "swa_full", const=True, write=_changed, ini="swa-full"),
    Flag("kv_unified_per_slot", ("--kv-unified-per-slot",), "kv_unified_per_slot", _COUNT, write=_changed,
         ini="kv-unified-per-slot"),
    Flag("rope_scaling", ("--rope-scaling",), "rope_scaling", _lower_choice(("none", "linear", "yarn")),
         write=_changed, ini="rope-scaling"),
    Flag("rope_scale", ("--rope-scale",), "rope_scale", _positive_real, write=_changed, fmt=_real,
         ini="rope-scale"),
    Flag("rope_freq_scale", ("--rope-freq-scale",), "rope_freq_scale", _positive_real, write=_changed, fmt=_real,
         ini="rope-freq-scale"),
    Flag("yarn_orig_ctx", ("--yarn-orig-ctx",), "yarn_orig_ctx", _COUNT, write=_changed, ini="yarn-orig-ctx"),
    Flag("lora", ("--lora",), "lora", _words, store=_append, write=_changed, fmt=_join, ini="lora"),
    Flag("lora_scaled", ("--lora-scaled",), "lora_scaled", _lora_scaled, store=_append, write=_changed, fmt=_join,
         ini="lora-scaled"),
    Flag("no_mmap", ("--no-mmap",), "load_mode", store=_no_mmap, write=_w_load_mode, engine=_IK, ini="no-mmap"),
    Flag("mlock", ("--mlock",), "load_mode", store=_mlock, write=_w_load_mode, engine=_IK, ini="mlock"),
    Flag("load_mode", ("-lm", "--load-mode"), "load_mode", _enum(LoadMode), write=_w_load_mode, ini="load-mode"),
    Flag("no_op_offload", ("--no-op-offload",), "op_offload", const=False, write=_changed, ini="op-offload",
         ini_value="false"),
    Flag("op_offload", ("--op-offload",), "op_offload", const=True, ini="op-offload"),
    Flag("no_repack", ("-nr", "--no-repack"), "repack", const=False, write=_changed, ini="repack",
         ini_value="false"),
    Flag("repack", ("--repack",), "repack", const=True, ini="repack"),
    Flag("no_host", ("--no-host",), "no_host", const=True, write=_changed, ini="no-host"),
    Flag("cache_ram_mib", ("-cram", "--cache-ram"), "cache_ram_mib", int_in(-1), write=_changed, ini="cache-ram"),
    Flag("ctx_checkpoints", ("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"), "ctx_checkpoints", _COUNT,
         write=_changed, ini="ctx-checkpoints"),
    Flag("embedding", ("--embedding", "--embeddings"), "embedding", const=True, write=_changed, ini="embedding"),
    Flag("reranking", ("--rerank", "--reranking"), "reranking", const=True, write=_changed, ini="reranking"),
    Flag("spec_types", ("--spec-type",), "spec_types", _words, store=_append, write=_changed, fmt=_join,
         ini="spec-type"),
    Flag("draft_model", ("-md", "--model-draft", "--spec-draft-model"), "draft.model_path", _text, store=_draft,
         write=_w_draft, ini="model-draft"),
    Flag("draft_ngl", ("-ngld", "--gpu-layers-draft", "--spec-draft-ngl", "--n-gpu-layers-draft"),
         "draft.n_gpu_layers", _ngl, store=_draft, write=_w_draft, ini="gpu-layers-draft"),
    Flag("draft_type_k", ("-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"), "draft.cache_type_k",
         cache_type_choice, store=_draft, write=_w_draft, ini="cache-type-k-draft"),
    Flag("draft_type_v", ("-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"), "draft.cache_type_v",
         cache_type_choice, store=_draft, write=_w_draft, ini="cache-type-v-draft"),
    Flag("draft_n_max", ("--spec-draft-n-max",), "spec_draft_n_max", _COUNT, store=_draft_n_max, write=_w_n_max,
         ini="spec-draft-n-max"),
    # ik_llama.cpp
    Flag("mla_mode", ("-mla", "--mla-use"), "mla_mode", _mla, write=_w_ik_always, engine=_IK, ini="mla-use"),
    Flag("attn_max_batch_mib", ("-amb", "--attention-max-batch"), "attn_max_batch_mib", int_in(0), write=_changed,
         engine=_IK, ini="attention-max-batch"),
    Flag("fused_moe", ("-fmoe", "--fused-moe"), "fused_moe", const=True, write=_w_ik_always, engine=_IK,
         ini="fused-moe"),
    Flag("no_fused_moe", ("-no-fmoe", "--no-fused-moe"), "fused_moe", const=False, write=_changed, engine=_IK,
         ini="fused-moe", ini_value="false"),
    Flag("run_time_repack", ("-rtr", "--run-time-repack"), "run_time_repack", const=True, write=_changed,
         engine=_IK, ini="run-time-repack"),
    # beellama.cpp
    Flag("cache_type_k_swa", ("--cache-type-k-swa",), "cache_type_k_swa", _lower_choice(tuple(engines.KVARN_BITS)),
         write=_changed, engine=_BEE, ini="cache-type-k-swa"),
    Flag("cache_type_v_swa", ("--cache-type-v-swa",), "cache_type_v_swa", _lower_choice(tuple(engines.KVARN_BITS)),
         write=_w_v_swa, engine=_BEE, ini="cache-type-v-swa"),
    Flag("kv_tail_tokens", ("--kv-tail-tokens",), "kv_tail_tokens", _tail_tokens, store=_tail, write=_w_tail,
         engine=_BEE, ini="kv-tail-tokens"),
    Flag("kv_tail_type", ("--kv-tail-type",), "kv_tail_type", _lower_choice(("f32", "f16", "bf16")), write=_changed,
         engine=_BEE, ini="kv-tail-type"),
    Flag("mtp_cache_type_k", (), "mtp_cache_type_k", _text, write=_w_mtp, engine=_BEE, spelling="--spec-draft-type-k",
         ini="spec-draft-type-k"),
    Flag("mtp_cache_type_v", (), "mtp_cache_type_v", _text, write=_w_mtp, engine=_BEE, spelling="--spec-draft-type-v",
         ini="spec-draft-type-v"),
    # ollama: collected, then turned into the llama-server settings ollama runs with (`_apply_ollama`)
    Flag("ollama_num_ctx", ("--num-ctx",), "", _COUNT, store=_ollama, engine=_OLL, env="OLLAMA_CONTEXT_LENGTH",
         pins=("n_ctx",)),
    Flag("ollama_num_parallel", ("--num-parallel",), "", int_in(1, LLAMA_MAX_SEQ, " (llama.cpp's LLAMA_MAX_SEQ)"),
         store=_ollama, engine=_OLL, env="OLLAMA_NUM_PARALLEL", pins=("n_parallel",)),
    Flag("ollama_kv_cache_type", ("--kv-cache-type",), "", cache_type_choice, store=_ollama, engine=_OLL,
         env="OLLAMA_KV_CACHE_TYPE", pins=("cache_type_k", "cache_type_v")),
    Flag("ollama_flash_attention", ("--flash-attention",), "", _ollama_flash, store=_ollama, engine=_OLL,
         env="OLLAMA_FLASH_ATTENTION"),
    Flag("gpu_overhead_bytes", ("--gpu-overhead",), "", int_in(0, MAX_OVERHEAD_BYTES, " bytes (1 PiB)"),
         store=_ollama, engine=_OLL, env="OLLAMA_GPU_OVERHEAD"),
    Flag("ollama_num_gpu", ("--num-gpu",), "", _ngl, store=_ollama, engine=_OLL, pins=("n_gpu_layers",)),
    Flag("ollama_num_batch", ("--num-batch",), "", int_in(1), store=_ollama, engine=_OLL),
    # --fit last: nothing may re-plan what the command fixes
    Flag("fit", ("-fit", "--fit"), "fit", _on_off, write=_w_fit, spelling="--fit", ini="fit"),
    Flag("fit_target_mib", ("-fitt", "--fit-target"), "fit_target_mib", _fit_target, write=_w_fit, fmt=_join,
         ini="fit-target"),
)
# fmt: on

#: Views of the table: mainline rows, engine rows, and every spelling.
MEMORY_FLAGS: tuple[Flag, ...] = tuple(f for f in FLAGS if f.engine is None and f.names)
ENGINE_FLAGS: tuple[tuple[Engine, Flag], ...] = tuple(
    (f.engine, f) for f in FLAGS if f.engine is not None and f.names
)
FLAG_BY_KEY: dict[str, Flag] = {f.key: f for f in FLAGS}
FLAG_BY_NAME: dict[str, Flag] = {n: f for f in FLAGS for n in f.names}
_BY_NAME: dict[str, Flag] = {n: f for f in MEMORY_FLAGS for n in f.names}
#: The environment variables ollama reads that change memory, and the flag each is the same as.
OLLAMA_ENV: dict[str, str] = {f.env: f.key for f in FLAGS if f.env}
_ENV_ROW: dict[str, Flag] = {f.env: f for f in FLAGS if f.env}
_OLLAMA_ASSIGN = re.compile(r"(OLLAMA_[A-Z0-9_]+)=(.*)", re.S)
FlagSpec = Flag  # the former name of a row
#: Flags llama.cpp accepts that change memory in ways this version does not model; accepted, reported as ignored.
UNMODELLED_MEMORY_FLAGS: frozenset[str] = frozenset(
    {
        "-otd", "--override-tensor-draft", "--spec-draft-override-tensor", "-cmoed",
        "--cpu-moe-draft", "--spec-draft-cpu-moe", "-ncmoed", "--n-cpu-moe-draft", "--spec-draft-n-cpu-moe",
        "--spec-draft-ncmoe", "-devd", "--device-draft", "--spec-draft-device", "-bs", "--backend-sampling",
        "-lzm", "--lazy-mode", "-mmdev", "--mmproj-device", "--mtmd-batch-max-tokens", "-fitc", "--fit-ctx",
    }
)  # fmt: skip

# Every other flag common/arg.cpp registers, with how many values it takes (generated from arg.cpp).
_IGNORED_ARITY: dict[str, int] = {
    "-h": 0, "--help": 0, "--usage": 0, "--version": 0, "-cl": 0, "--cache-list": 0, "--completion-bash": 0,
    "--server-base": 1, "--verbose-prompt": 0, "--display-prompt": 0, "--no-display-prompt": 0, "-co": 1,
    "--color": 1, "-t": 1, "--threads": 1, "-tb": 1, "--threads-batch": 1, "-C": 1, "--cpu-mask": 1,
    "-Cr": 1, "--cpu-range": 1, "--cpu-strict": 1, "--prio": 1, "--poll": 1, "-Cb": 1,
    "--cpu-mask-batch": 1, "-Crb": 1, "--cpu-range-batch": 1, "--cpu-strict-batch": 1, "--prio-batch": 1,
    "--poll-batch": 1, "-lcs": 1, "--lookup-cache-static": 1, "-lcd": 1, "--lookup-cache-dynamic": 1,
    "-n": 1, "--predict": 1, "--n-predict": 1, "--keep": 1, "-cms": 1,
    "--checkpoint-min-step": 1, "--cache-idle-slots": 0, "--no-cache-idle-slots": 0, "--context-shift": 0,
    "--no-context-shift": 0, "--chunks": 1, "-p": 1, "--prompt": 1, "-sys": 1, "--system-prompt": 1,
    "--perf": 0, "--no-perf": 0, "--show-timings": 0, "--no-show-timings": 0, "-f": 1, "--file": 1,
    "-sysf": 1, "--system-prompt-file": 1, "--in-file": 1, "-bf": 1, "--binary-file": 1, "-e": 0,
    "--escape": 0, "--no-escape": 0, "-ptc": 1, "--print-token-count": 1, "--prompt-cache": 1,
    "--prompt-cache-all": 0, "--prompt-cache-ro": 0, "-r": 1, "--reverse-prompt": 1, "-sp": 0,
    "--special": 0, "-cnv": 0, "--conversation": 0, "-no-cnv": 0, "--no-conversation": 0, "-st": 0,
    "--single-turn": 0, "-i": 0, "--interactive": 0, "-if": 0, "--interactive-first": 0, "-mli": 0,
    "--multiline-input": 0, "--in-prefix-bos": 0, "--in-prefix": 1, "--in-suffix": 1, "--warmup": 0,
    "--no-warmup": 0, "--spm-infill": 0, "--samplers": 1, "-s": 1, "--seed": 1, "--sampler-seq": 1,
    "--sampling-seq": 1, "--ignore-eos": 0, "--temp": 1, "--temperature": 1, "--top-k": 1, "--top-p": 1,
    "--min-p": 1, "--top-nsigma": 1, "--top-n-sigma": 1, "--xtc-probability": 1, "--xtc-threshold": 1,
    "--typical": 1, "--typical-p": 1, "--repeat-last-n": 1, "--repeat-penalty": 1, "--presence-penalty": 1,
    "--frequency-penalty": 1, "--dry-multiplier": 1, "--dry-base": 1, "--dry-allowed-length": 1,
    "--dry-penalty-last-n": 1, "--dry-sequence-breaker": 1, "--adaptive-target": 1, "--adaptive-decay": 1,
    "--dynatemp-range": 1, "--dynatemp-exp": 1, "--mirostat": 1, "--mirostat-lr": 1, "--mirostat-ent": 1,
    "-l": 1, "--logit-bias": 1, "--grammar": 1, "--grammar-file": 1, "-j": 1, "--json-schema": 1, "-jf": 1,
    "--json-schema-file": 1, "-bs": 0, "--backend-sampling": 0, "--pooling": 1, "--attention": 1,
    "--rope-freq-base": 1,
    "--yarn-ext-factor": 1, "--yarn-attn-factor": 1, "--yarn-beta-slow": 1,
    "--yarn-beta-fast": 1, "-gan": 1, "--grp-attn-n": 1, "-gaw": 1, "--grp-attn-w": 1, "--hellaswag": 0,
    "--hellaswag-tasks": 1, "--winogrande": 0, "--winogrande-tasks": 1, "--multiple-choice": 0,
    "--multiple-choice-tasks": 1, "--kl-divergence": 0, "--save-all-logits": 1, "--kl-divergence-base": 1,
    "--ppl-stride": 1, "--ppl-output-type": 1, "-dt": 1, "--defrag-thold": 1, "-ns": 1, "--sequences": 1,
    "-cb": 0, "--cont-batching": 0, "-nocb": 0, "--no-cont-batching": 0,
    "-mmdev": 1, "--mmproj-device": 1,
    "--image": 1, "--audio": 1, "--video": 1,
    "--mtmd-batch-max-tokens": 1, "--video-fps": 1, "--video-timestamp-interval": 1,
    "--video-ffmpeg-dir": 1, "-lzm": 1, "--lazy-mode": 1, "--numa": 1, "--list-devices": 0, "-fitp": 1,
    "--fit-print": 1, "-fitc": 1, "--fit-ctx": 1, "--check-tensors": 0, "--override-kv": 1,
    "--control-vector": 1, "--control-vector-scaled": 1,
    "--control-vector-layer-range": 2, "-a": 1, "--alias": 1, "--tags": 1,
    "-dr": 1, "--docker-repo": 1, "-hff": 1, "--hf-file": 1, "-hft": 1,
    "--hf-token": 1, "--mtp": 0, "--dflash": 0, "--eagle3": 0, "--context-file": 1, "--chunk-size": 1,
    "--chunk-separator": 1, "--junk": 1, "--pos": 1, "-o": 1, "--output": 1, "--output-file": 1,
    "-ofreq": 1, "--output-frequency": 1, "--output-format": 1, "--save-frequency": 1,
    "--process-output": 0, "--nextn": 0, "--ppl": 0, "--no-ppl": 0, "--chunk": 1, "--from-chunk": 1,
    "--show-statistics": 0, "--parse-special": 0, "--ids": 0, "--stdin": 0, "--no-bos": 0,
    "--no-parse-special": 0, "--show-count": 0, "-pps": 0, "-tgs": 0, "-npp": 1, "-ntg": 1, "-npl": 1,
    "--embd-normalize": 1, "--embd-output-format": 1, "--embd-separator": 1, "--cls-separator": 1,
    "--host": 1, "--port": 1, "--reuse-port": 0, "--path": 1, "--cors-origins": 1, "--cors-methods": 1,
    "--cors-headers": 1, "--cors-credentials": 0, "--no-cors-credentials": 0, "--api-prefix": 1,
    "--ui-config": 1, "--webui-config": 1, "--ui-config-file": 1, "--webui-config-file": 1,
    "--ui-mcp-proxy": 0, "--webui-mcp-proxy": 0, "--no-ui-mcp-proxy": 0, "--no-webui-mcp-proxy": 0,
    "--tools": 1, "--tools-runtime": 1, "--mcp-servers-config": 1, "--mcp-servers-json": 1, "-ag": 0,
    "--agent": 0, "-no-ag": 0, "--no-agent": 0, "--ui": 0, "--webui": 0, "--no-ui": 0, "--no-webui": 0,
    "--api-key": 1, "--api-key-file": 1, "--ssl-key-file": 1,
    "--ssl-cert-file": 1, "--chat-template-kwargs": 1, "-to": 1, "--timeout": 1, "--sse-ping-interval": 1,
    "--threads-http": 1, "--cache-prompt": 0, "--no-cache-prompt": 0, "--cache-reuse": 1, "--metrics": 0,
    "--props": 0, "--slots": 0, "--no-slots": 0, "--slot-save-path": 1, "--media-path": 1,
    "--models-dir": 1, "--models-preset": 1, "--models-max": 1, "--models-autoload": 0,
    "--no-models-autoload": 0, "--jinja": 0, "--no-jinja": 0, "--reasoning-format": 1, "-rea": 1,
    "--reasoning": 1, "--reasoning-effort": 1, "--reasoning-budget": 1, "--reasoning-budget-message": 1,
    "--reasoning-preserve": 0, "--no-reasoning-preserve": 0, "--chat-template": 1,
    "--chat-template-file": 1, "--skip-chat-parsing": 0, "--no-skip-chat-parsing": 0,
    "--prefill-assistant": 0, "--no-prefill-assistant": 0, "-sps": 1, "--slot-prompt-similarity": 1,
    "--lora-init-without-apply": 0, "--sleep-idle-seconds": 1, "--simple-io": 0, "--positive-file": 1,
    "--negative-file": 1, "--pca-batch": 1, "--pca-iter": 1, "--method": 1,
    "--log-disable": 0, "--log-file": 1, "--log-jsonl": 0, "--no-log-jsonl": 0, "--log-prompts-dir": 1,
    "--log-colors": 1, "-v": 0, "--verbose": 0, "--log-verbose": 0, "--offline": 0, "-lv": 1,
    "--verbosity": 1, "--log-verbosity": 1, "--log-prefix": 0, "--no-log-prefix": 0, "--log-timestamps": 0,
    "--no-log-timestamps": 0, "--spec-draft-hf": 1, "-hfd": 1, "-hfrd": 1, "--hf-repo-draft": 1,
    "--spec-draft-threads": 1, "-td": 1, "--threads-draft": 1, "--spec-draft-threads-batch": 1, "-tbd": 1,
    "--threads-batch-draft": 1, "--spec-draft-cpu-mask": 1, "-Cd": 1, "--cpu-mask-draft": 1,
    "--spec-draft-cpu-range": 1, "-Crd": 1, "--cpu-range-draft": 1, "--spec-draft-cpu-strict": 1,
    "--cpu-strict-draft": 1, "--spec-draft-prio": 1, "--prio-draft": 1, "--spec-draft-poll": 1,
    "--poll-draft": 1, "--spec-draft-cpu-mask-batch": 1, "-Cbd": 1, "--cpu-mask-batch-draft": 1,
    "--spec-draft-cpu-range-batch": 1, "-Crbd": 1, "--cpu-range-batch-draft": 1,
    "--spec-draft-cpu-strict-batch": 1, "--cpu-strict-batch-draft": 1, "--spec-draft-prio-batch": 1,
    "--prio-batch-draft": 1, "--spec-draft-poll-batch": 1, "--poll-batch-draft": 1,
    "--spec-draft-override-tensor": 1, "-otd": 1, "--override-tensor-draft": 1, "--spec-draft-cpu-moe": 0,
    "-cmoed": 0, "--cpu-moe-draft": 0, "--spec-draft-n-cpu-moe": 1, "--spec-draft-ncmoe": 1, "-ncmoed": 1,
    "--n-cpu-moe-draft": 1, "--spec-draft-n-min": 1, "--spec-synth-len": 1, "--spec-synth-rates": 1,
    "--spec-draft-p-split": 1, "--draft-p-split": 1, "--spec-draft-p-min": 1, "--draft-p-min": 1,
    "--spec-draft-backend-sampling": 0, "--no-spec-draft-backend-sampling": 0, "--spec-draft-sampling": 1,
    "--spec-draft-device": 1, "-devd": 1, "--device-draft": 1,
    "--spec-ngram-mod-n-min": 1, "--spec-ngram-mod-n-max": 1, "--spec-ngram-mod-n-match": 1,
    "--spec-ngram-simple-size-n": 1, "--spec-ngram-simple-size-m": 1, "--spec-ngram-simple-min-hits": 1,
    "--spec-ngram-map-k-size-n": 1, "--spec-ngram-map-k-size-m": 1, "--spec-ngram-map-k-min-hits": 1,
    "--spec-ngram-map-k4v-size-n": 1, "--spec-ngram-map-k4v-size-m": 1, "--spec-ngram-map-k4v-min-hits": 1,
    "--draft": 1, "--draft-n": 1, "--draft-max": 1, "--draft-min": 1, "--draft-n-min": 1,
    "--spec-ngram-size-n": 1, "--spec-ngram-size-m": 1, "--spec-ngram-min-hits": 1, "--tts-lang": 1,
    "--tts-speaker-file": 1, "--diffusion-steps": 1, "--diffusion-visual": 0, "--diffusion-eps": 1,
    "--diffusion-algorithm": 1, "--diffusion-alg-temp": 1, "--diffusion-block-length": 1,
    "--diffusion-cfg-scale": 1, "--diffusion-add-gumbel-noise": 1, "-lr": 1, "--learning-rate": 1,
    "-lr-min": 1, "--learning-rate-min": 1, "-decay-epochs": 1, "--learning-rate-decay-epochs": 1, "-wd": 1,
    "--weight-decay": 1, "-val-split": 1, "--val-split": 1, "-epochs": 1, "--epochs": 1, "-opt": 1,
    "--optimizer": 1, "--check": 0, "--save-logits": 0, "--logits-output-dir": 1, "--tensor-filter": 1,
    "--embd-gemma-default": 0, "--fim-qwen-1.5b-default": 0, "--fim-qwen-3b-default": 0,
    "--fim-qwen-7b-default": 0, "--fim-qwen-7b-spec": 0, "--fim-qwen-14b-spec": 0,
    "--fim-qwen-30b-default": 0, "--gpt-oss-20b-default": 0, "--gpt-oss-120b-default": 0,
    "--vision-gemma-4b-default": 0, "--vision-gemma-12b-default": 0, "--spec-default": 0,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ParsedFlags:
    settings: LaunchSettings
    model_path: str | None
    ignored: tuple[str, ...] = ()  # flags accepted and not affecting the estimate (with their values)
    rpc_servers: tuple[str, ...] = ()  # --rpc host:port,...
    unmodelled: tuple[str, ...] = ()  # accepted flags that do change memory but are not modelled
    passthrough: tuple[
        str, ...
    ] = ()  # the words of the ignored and unmodelled flags, to carry into a command


def parse_engine(value: str) -> Engine:
    """An `--engine` value: llama.cpp, ik_llama.cpp, beellama or ollama (a few common aliases accepted)."""
    aliases = {
        "mainline": "llama.cpp",
        "llamacpp": "llama.cpp",
        "ik": "ik_llama.cpp",
        "ik_llama": "ik_llama.cpp",
        "beellama.cpp": "beellama",
    }
    v = aliases.get(value.lower(), value.lower())
    try:
        return Engine(v)
    except ValueError:
        raise FlagError(
            f"--engine: {_shown(value)} is not one of {', '.join(e.value for e in Engine)}"
        ) from None


def _find_engine(args: Sequence[str]) -> Engine | None:
    found: Engine | None = None
    for i, a in enumerate(args):
        if a == ENGINE_FLAG:
            if i + 1 >= len(args):
                raise FlagError("--engine: missing value")
            found = parse_engine(args[i + 1])
        elif a.startswith(ENGINE_FLAG + "="):
            found = parse_engine(a.split("=", 1)[1])
    return found


@dataclass
class _Words:
    """The argv being read, and the words of the flags kept as they are."""

    args: list[str]
    i: int = 0
    ignored: list[str] = dataclasses.field(default_factory=list)
    unmodelled: list[str] = dataclasses.field(default_factory=list)
    passthrough: list[str] = dataclasses.field(default_factory=list)

    def take(self, flag: str) -> str:
        if self.i >= len(self.args):
            raise FlagError(f"{flag}: missing value")
        self.i += 1
        return self.args[self.i - 1]


def _ollama_assignment(st: _Parse, w: _Words, m: re.Match[str]) -> None:
    """`OLLAMA_NAME=value` among the flags (ollama only)."""
    name, value = m.group(1), m.group(2)
    if st.engine is not Engine.OLLAMA:
        raise FlagError(f"{name} is an environment variable of ollama: add --engine ollama")
    row = _ENV_ROW.get(name)
    if row is None:
        w.ignored.append(m.group(0))
        return
    assert row.read is not None
    row.store(st, row, row.read(f"{row.short} / {name}", value, st.engine))


def _kept(w: _Words, flag: str, raw: str, inline: str | None) -> None:
    """A flag llama.cpp knows that fitplan does not model: its values consumed, its words kept."""
    if flag not in _IGNORED_ARITY:
        raise FlagError(f"unknown flag {_shown(flag)}: not a llama-server flag of llama.cpp build 11434")
    start = w.i - 1
    vals = [inline] if inline is not None else [w.take(flag) for _ in range(_IGNORED_ARITY[flag])]
    item = " ".join([flag, *[v for v in vals if v is not None]])
    (w.unmodelled if flag in UNMODELLED_MEMORY_FLAGS else w.ignored).append(item)
    w.passthrough.extend(w.args[start : w.i] if inline is None else [raw])


def _step(st: _Parse, w: _Words) -> None:
    """Read one flag (and its value) at `w.i`."""
    raw = w.take("")
    flag, inline = raw, None
    if raw.startswith("--") and "=" in raw:
        flag, inline = raw.split("=", 1)
    if flag == ENGINE_FLAG:
        if inline is None:
            w.take(flag)
        return
    m = _OLLAMA_ASSIGN.fullmatch(raw)
    if m is not None:
        _ollama_assignment(st, w, m)
        return
    row = FLAG_BY_NAME.get(flag)
    if row is None:
        _kept(w, flag, raw, inline)
        return
    if row.engine is not None and row.engine is not st.engine:
        raise FlagError(
            f"{flag} is a flag of {row.engine.value} only: add --engine {row.engine.value} "
            f"(engine now: {st.engine.value})"
        )
    if row.read is None:
        row.store(st, row, None)
        return
    text = inline if inline is not None else w.take(flag)
    label = f"{flag} / {row.env}" if row.env else flag
    row.store(st, row, row.read(label, text, st.engine))


def parse_flags(
    argv: Sequence[str], base: LaunchSettings | None = None, engine: Engine | None = None
) -> ParsedFlags:
    """Parse llama-server arguments (without the program name) into settings.

    The engine is `--engine` in `argv`, else `engine`, else the base's. Choosing an engine other than the base's
    starts from that engine's defaults (`fitplan.core.engines.engine_base_settings`); the engine's own flags are
    accepted only when it is selected.
    """
    chosen = _find_engine(argv) or engine
    s = base or LaunchSettings()
    if chosen is not None and (base is None or chosen is not base.engine):
        s = engines.engine_base_settings(chosen, s)
    st = _Parse(engine=s.engine, base=s, overrides=list(s.tensor_overrides))
    w = _Words(list(argv))
    while w.i < len(w.args):
        _step(st, w)
    settings = _finish(st)
    return ParsedFlags(
        settings, st.model, tuple(w.ignored), tuple(st.rpc), tuple(w.unmodelled), tuple(w.passthrough)
    )


def _finish(st: _Parse) -> LaunchSettings:
    """The settings from what was read: ollama's settings, the draft model, the -ot list in llama.cpp's order."""
    upd, draft = st.upd, st.draft
    if st.ollama:
        _apply_ollama(st.ollama, upd, st.base)
    if "draft_model" not in draft:
        # an MTP draft context (no draft model) takes -ctkd / -ctvd
        if "draft_type_k" in draft:
            upd["mtp_cache_type_k"] = draft["draft_type_k"]
        if "draft_type_v" in draft:
            upd["mtp_cache_type_v"] = draft["draft_type_v"]
    upd["tensor_overrides"] = (*st.overrides, *st.cpu_ffn)
    if "draft_model" in draft:
        d = DraftSettings(model_path=str(draft["draft_model"]))
        upd["draft"] = DraftSettings(
            model_path=d.model_path,
            n_gpu_layers=_whole(draft.get("draft_ngl", d.n_gpu_layers)),
            cache_type_k=str(draft.get("draft_type_k", d.cache_type_k)),
            cache_type_v=str(draft.get("draft_type_v", d.cache_type_v)),
            n_max=_whole(draft.get("draft_n_max", d.n_max)),
        )
    return dataclasses.replace(st.base, **upd)  # type: ignore[arg-type]


def _whole(v: object) -> int:
    """A value the table's reader already made an integer."""
    if not isinstance(v, int):
        raise TypeError(f"expected an integer setting, got {type(v).__name__}")
    return v


def _apply_ollama(values: dict[str, object], upd: dict[str, object], base: LaunchSettings) -> None:
    """ollama's settings (flags or OLLAMA_* assignments, read and checked by the table) as the llama-server
    settings ollama runs with."""
    if "ollama_num_parallel" in values:
        upd["n_parallel"] = values["ollama_num_parallel"]
        upd["kv_unified"] = False
    if "ollama_num_ctx" in values:
        n, par = values["ollama_num_ctx"], upd.get("n_parallel", base.n_parallel)
        assert isinstance(n, int) and isinstance(par, int)
        upd["n_ctx"] = n * max(1, par)
    if "ollama_kv_cache_type" in values:
        upd["cache_type_k"] = upd["cache_type_v"] = values["ollama_kv_cache_type"]
    if "ollama_flash_attention" in values:
        upd["flash_attn"] = FlashAttn.ON if values["ollama_flash_attention"] else FlashAttn.OFF
    if "gpu_overhead_bytes" in values:
        upd["gpu_overhead_bytes"] = values["gpu_overhead_bytes"]
    if "ollama_num_gpu" in values:
        upd["n_gpu_layers"] = values["ollama_num_gpu"]
    if "ollama_num_batch" in values:
        upd["n_batch"] = upd["n_ubatch"] = values["ollama_num_batch"]


# ---------------------------------------------------------------------------------------------------------------------
# Writing: the command-line flags of settings, and INI preset keys both ways
# ---------------------------------------------------------------------------------------------------------------------


def written_flags(
    settings: LaunchSettings, model_path: str | None = None, rpc_servers: Sequence[str] = ()
) -> list[Written]:
    """Every flag a command line for the settings carries, in order (each row of `FLAGS` decides its own)."""
    src = Source(settings, model_path, tuple(rpc_servers))
    return [w for row in FLAGS if row.write is not None for w in row.write(row, src)]


#: Preset key (and a switch's value) -> the spelling it stands for.
_PRESET_VALUE: dict[str, Flag] = {f.ini: f for f in FLAGS if f.ini and f.read is not None}
_PRESET_SWITCH: dict[tuple[str, str], Flag] = {
    (f.ini, f.ini_value): f for f in FLAGS if f.ini and f.read is None
}


#: How llama.cpp reads a switch's preset value (common/arg.cpp `is_truthy` / `is_falsey`; case matters).
PRESET_TRUE = frozenset({"on", "enabled", "true", "1"})
PRESET_FALSE = frozenset({"off", "disabled", "false", "0"})


def _switch_value(key: str, value: str) -> str:
    """A switch's preset value as "true" or "false" (llama.cpp's truthy and falsey words), else a one-line error."""
    if value in PRESET_TRUE:
        return "true"
    if value in PRESET_FALSE:
        return "false"
    raise FlagError(f"preset key {key}: expected true or false, got {_shown(value)}")


def _preset_switch(key: str, value: str) -> tuple[str, ...]:
    """A switch key (`kv-offload = false`): its flag, or none where llama.cpp has no negation (it skips it)."""
    sw = _PRESET_SWITCH.get((key, _switch_value(key, value)))
    return (sw.short,) if sw is not None else ()


def _preset_flag_name(key: str, value: str) -> tuple[str, ...] | None:
    """A key spelled as one of a flag's long names (`no-kv-offload = true`, `temp = 0.7`), as llama.cpp's
    preset loader accepts every spelling: the flag's arguments, or None when llama-server has no such flag."""
    name = "--" + key if ("--" + key) in FLAG_BY_NAME or ("--" + key) in _IGNORED_ARITY else "-" + key
    row = FLAG_BY_NAME.get(name)
    if row is not None:
        if row.read is not None:
            return (row.short, value)
        if _switch_value(key, value) == "true":
            return (row.short,)
        opposite = _PRESET_SWITCH.get((row.ini, "true" if row.ini_value == "false" else "false"))
        return (opposite.short,) if opposite is not None and opposite is not row else ()
    arity = _IGNORED_ARITY.get(name)
    if arity == 1:
        return (name, value)
    if arity == 0:
        if _switch_value(key, value) == "true":
            return (name,)
        negated = "--" + key[3:] if key.startswith("no-") else "--no-" + key
        return (negated,) if negated in _IGNORED_ARITY else ()
    return None


#: common/arg.cpp's preset-only keys (`set_preset_only`): the router's own (when to load and stop a model), with no
#: flag and no memory effect
PRESET_ONLY_KEYS = frozenset({"load-on-startup", "stop-timeout", "dedup-cache-models"})


def preset_args(entries: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The llama-server arguments a preset section's `key = value` entries stand for (`--models-preset` keys, as
    common/preset.cpp reads them: a preset key, or any long spelling of a flag; `version` is reserved)."""
    argv: list[str] = []
    for key, value in entries:
        if key == "version" or key in PRESET_ONLY_KEYS:
            continue
        row = _PRESET_VALUE.get(key)
        if row is not None:
            spelling = row.short if row.names else row.spelling
            argv.extend((spelling, value))
            continue
        if any(k == key for k, _ in _PRESET_SWITCH):
            argv.extend(_preset_switch(key, value))
            continue
        words = _preset_flag_name(key, value)
        if words is None:
            raise FlagError(f"preset key {_shown(key)}: not a key fitplan reads")
        argv.extend(words)
    return tuple(argv)
