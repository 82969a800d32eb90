"""Hostile-input suite, class 7 (settings and caches).

* settings.json: seeded corruptions of a full settings file (truncations, byte flips, one field replaced by a
  hostile value: `Infinity`, `1e400`, 10^30, 100,000 nested brackets, wrong types), and FIFOs, folders and devices
  in its place. Loading never raises nor hangs; one bad field keeps every other field; what is set aside or reset
  is kept on disk as it was.
* scan-index.json: the same corruptions of a real index; `fitplan scan` still lists the model, exit 0.
* header-cache entries: truncated, flipped, swapped, tiny and oversized entries are cache misses, never a wrong
  header.
* two processes saving at once keep each other's folders; a folder that cannot be written gives a clear error.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from fitplan.core.base.errors import SettingsSaveError
from fitplan.core.gguf.header_cache import MAX_ENTRY_BYTES, ProfileCache, cached_read_header, header_to_plain
from fitplan.core.gguf.reader import read_header
from fitplan.core.inputs.user_settings import (
    HypotheticalDevice,
    ModelChoices,
    UserSettings,
    load_user_settings,
    save_user_settings,
    settings_path,
)
from support.hostile import Case, Outcome, base_kvs, base_tensors, counts_line, run_cases, write_gguf

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX traps and alarms")

SEED = 7
N_SETTINGS = 220
N_INDEX = 40
N_CACHE = 300

#: Values no settings field accepts: each must be reset with a message.
INVALID_EVERYWHERE = frozenset({"Infinity", "-Infinity", "NaN", "1e400", "-1e400", "1e30", "1" + "0" * 30})
HOSTILE_VALUES: tuple[str, ...] = (
    "Infinity",
    "-Infinity",
    "NaN",
    "1e400",
    "-1e400",
    "1e30",
    "1" + "0" * 30,
    "-1",
    "true",
    "null",
    '"x"',
    "[]",
    "{}",
    "[" * 100_000 + "]" * 100_000,
    '"' + "a" * 100_000 + '"',
    "0.5",
    "2147483648",
)


def _full() -> UserSettings:
    return UserSettings(
        model_choices={
            "/models/a.gguf": ModelChoices(n_ctx=65536, cache_type_k="q8_0", n_parallel=2),
            "/models/b.gguf": ModelChoices(engine="ik_llama.cpp", mla_mode=2, n_cpu_moe=4),
        },
        folders=("/models", "/more"),
        hypothetical_devices=(HypotheticalDevice("RTX 4090", 24 << 30),),
        planned_devices=("RTX 4090",),
        recent_files=("/models/a.gguf",),
        shell="powershell",
        last_model="/models/a.gguf",
    )


def _field_paths(doc: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append((*path, k))
            out.extend(_field_paths(v, (*path, k)))
    return out


def _replace_field(text: str, path: tuple[str, ...], raw: str) -> str:
    """The JSON text with the value at `path` replaced by the raw JSON text `raw` (via a placeholder)."""
    doc = json.loads(text)
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = "\x00PLACEHOLDER\x00"
    return json.dumps(doc).replace(json.dumps("\x00PLACEHOLDER\x00"), raw)


class _Alarm(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Alarm()


def _load_bounded(folder: Path) -> object:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(5)
    try:
        return load_user_settings(folder)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_hostile_settings_files(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    save_user_settings(_full(), tmp_path / "seed")
    good_text = settings_path(tmp_path / "seed").read_text()
    good = load_user_settings(tmp_path / "seed").settings
    fields = _field_paths(json.loads(good_text))
    failures: list[str] = []
    cases = 0
    for i in range(N_SETTINGS):
        folder = tmp_path / f"s{i}"
        folder.mkdir()
        kind = i % 4
        field: tuple[str, ...] | None = None
        value = ""
        if kind == 0:
            data = good_text.encode()[: rng.randrange(len(good_text))]
        elif kind == 1:
            raw = bytearray(good_text.encode())
            for _ in range(rng.randrange(1, 6)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            data = bytes(raw)
        else:
            field = rng.choice(fields)
            value = rng.choice(HOSTILE_VALUES)
            data = _replace_field(good_text, field, value).encode()
        settings_path(folder).write_bytes(data)
        cases += 1
        try:
            result = _load_bounded(folder)
        except BaseException as exc:  # noqa: BLE001 - any escape is what the case looks for
            failures.append(f"case {i}: {type(exc).__name__}: {exc}"[:200])
            continue
        settings = result.settings  # type: ignore[attr-defined]
        kept = [p for p in folder.iterdir() if p.read_bytes() == data]
        if not kept:
            failures.append(f"case {i}: the file as it was is not kept")
        if field is None or result.set_aside is not None:  # type: ignore[attr-defined]
            continue  # the document as a whole is not JSON fitplan can hold: set aside, with a message
        if field[0] != "folders" and settings.folders != good.folders:
            failures.append(f"case {i}: one bad field {field} lost the folders")
        if field[0] != "model_choices" and settings.model_choices != good.model_choices:
            failures.append(f"case {i}: one bad field {field} lost the model choices")
        if value in INVALID_EVERYWHERE and result.message is None:  # type: ignore[attr-defined]
            failures.append(f"case {i}: {field} = {value} reset without a message")
    for name, make in (
        ("fifo", lambda p: os.mkfifo(p)),
        ("folder", lambda p: p.mkdir()),
        ("dev-zero", lambda p: os.symlink("/dev/zero", p)),
        ("dev-null", lambda p: os.symlink("/dev/null", p)),
        ("link-loop", lambda p: os.symlink(p, p)),
    ):
        folder = tmp_path / name
        folder.mkdir()
        make(settings_path(folder))
        cases += 1
        try:
            result = _load_bounded(folder)
            assert result.settings == UserSettings() and result.message  # type: ignore[attr-defined]
        except BaseException as exc:  # noqa: BLE001 - any escape is what the case looks for
            failures.append(f"{name}: {type(exc).__name__}: {exc}"[:200])
    print(f"class 7 (settings files): {cases} cases, {len(failures)} failures")
    assert not failures, "\n".join(failures[:30])


def test_n_ctx_1e30_takes_the_default_and_keeps_the_rest(tmp_path: Path) -> None:
    save_user_settings(_full(), tmp_path)
    text = settings_path(tmp_path).read_text()
    settings_path(tmp_path).write_text(
        _replace_field(text, ("model_choices", "/models/a.gguf", "n_ctx"), "1e30")
    )
    result = load_user_settings(tmp_path)
    a = result.settings.model_choices["/models/a.gguf"]
    assert a.n_ctx == ModelChoices().n_ctx and a.cache_type_k == "q8_0" and a.n_parallel == 2
    assert result.message is not None and "n_ctx" in result.message
    assert result.settings.folders == ("/models", "/more")


def _index_cases(tmp_path: Path) -> list[Case]:
    """`fitplan scan` over a folder with a corrupted scan index (FITPLAN_CACHE_DIR per case)."""
    rng = random.Random(SEED + 1)
    models = tmp_path / "models"
    models.mkdir()
    good = write_gguf(models / "good.gguf", "llama", base_kvs(), base_tensors(2))
    cache = tmp_path / "cache0"
    seed = Case(
        "seed the index",
        ("scan", str(models), "--json", "--no-fit"),
        True,
        env=(("FITPLAN_CACHE_DIR", str(cache)),),
    )
    assert run_cases([seed]).failures == []
    index_text = (cache / "scan-index.json").read_text()
    doc = json.loads(index_text)
    entry_key = next(iter(doc["files"]))
    corrupt: list[bytes] = []
    for i in range(N_INDEX):
        kind = i % 4
        if kind == 0:
            corrupt.append(index_text.encode()[: rng.randrange(len(index_text))])
        elif kind == 1:
            raw = bytearray(index_text.encode())
            for _ in range(rng.randrange(1, 8)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            corrupt.append(bytes(raw))
        else:
            fields = [("files", entry_key, k) for k in ("size", "mtime_ns", "ctime_ns", "summary", "error")]
            fields += [
                ("files", entry_key, "summary", k) for k in ("n_params", "name", "split_count", "n_layer")
            ]
            fields += [("schema",), ("files",)]
            corrupt.append(
                _replace_field(index_text, rng.choice(fields), rng.choice(HOSTILE_VALUES)).encode()
            )
    corrupt.append(b"[" * 100_000 + b"]" * 100_000)
    corrupt.append(b'{"schema": 3, "files": {"1:2": {"size": Infinity, "mtime_ns": 1e400, "ctime_ns": NaN}}}')
    cases = []

    def lists_good(o: Outcome) -> str | None:
        models_listed = [m["path"] for m in json.loads(o.out)["models"]]
        return None if models_listed == [good] else f"listed {models_listed}"

    for i, data in enumerate(corrupt):
        folder = tmp_path / f"cache{i + 1}"
        folder.mkdir()
        (folder / "scan-index.json").write_bytes(data)
        cases.append(
            Case(
                f"index corruption {i}",
                ("scan", str(models), "--json", "--no-fit"),
                True,
                "answer",
                lists_good,
                env=(("FITPLAN_CACHE_DIR", str(folder)),),
            )
        )
    return cases


def test_hostile_scan_index(tmp_path: Path) -> None:
    report = run_cases(_index_cases(tmp_path))
    print(counts_line("class 7 (scan index)", report))
    assert not report.failures, "\n".join(report.failures[:30])


def test_hostile_header_cache_entries(tmp_path: Path) -> None:
    rng = random.Random(SEED + 2)
    a = Path(write_gguf(tmp_path / "a.gguf", "llama", base_kvs(), base_tensors(2)))
    kvs = base_kvs()
    kvs["general.name"] = ("str", "other")
    b = Path(write_gguf(tmp_path / "b.gguf", "llama", kvs, base_tensors(3)))
    cache = ProfileCache(tmp_path / "cache")
    truth = header_to_plain(read_header(a))
    cached_read_header(a, cache=cache)
    cached_read_header(b, cache=cache)
    entries = {p.read_bytes(): p for p in cache.directory.glob("*.bin")}
    assert len(entries) == 2
    (entry_b,) = [p for data, p in entries.items() if b"other" in data]
    (entry_a,) = [p for p in entries.values() if p != entry_b]
    good_a, good_b = entry_a.read_bytes(), entry_b.read_bytes()
    wrong = 0
    for i in range(N_CACHE):
        kind = i % 6
        raw = bytearray(good_a)
        if kind == 0:
            data = bytes(raw[: rng.randrange(len(raw))])
        elif kind in (1, 2):
            for _ in range(rng.randrange(1, 4)):
                raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
            data = bytes(raw)
        elif kind == 3:
            data = rng.randbytes(5)  # a 5-byte entry once asked marshal for 2 GB
        elif kind == 4:
            data = good_b  # another file's entry under this file's name
        else:
            data = good_a + rng.randbytes(rng.randrange(1, 64))
        entry_a.write_bytes(data)
        h = cached_read_header(a, cache=cache)
        if header_to_plain(h) != truth:
            wrong += 1
    os.truncate(entry_a, MAX_ENTRY_BYTES + 1)  # oversized: not even read
    assert header_to_plain(cached_read_header(a, cache=cache)) == truth
    print(f"class 7 (header cache): {N_CACHE + 1} cases, {wrong} wrong headers")
    assert wrong == 0


_SAVER = textwrap.dedent(
    """
    import sys
    from dataclasses import replace
    from pathlib import Path
    from fitplan.core.inputs.user_settings import load_user_settings, save_user_settings

    folder, who, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    settings = load_user_settings(folder).settings
    sys.stdout.write("ready\\n"); sys.stdout.flush(); sys.stdin.readline()
    for i in range(n):
        settings = replace(settings, folders=(*settings.folders, f"/{who}/{i}"))
        save_user_settings(settings, folder)
    """
)


def test_two_processes_saving_at_once_keep_each_others_folders(tmp_path: Path) -> None:
    save_user_settings(UserSettings(folders=("/shared",)), tmp_path)
    n = 40
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SAVER, str(tmp_path), who, str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for who in ("left", "right")
    ]
    for p in procs:  # both have loaded before either saves: the race of two open windows
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        assert p.wait(timeout=60) == 0
        p.stdin.close()
        p.stdout.close()
    folders = load_user_settings(tmp_path).settings.folders
    expected = {"/shared"} | {f"/{w}/{i}" for w in ("left", "right") for i in range(n)}
    assert set(folders) == expected and len(folders) == len(expected)


def test_a_removed_folder_stays_removed_after_a_merge(tmp_path: Path) -> None:
    save_user_settings(UserSettings(folders=("/a", "/b")), tmp_path)
    mine = load_user_settings(tmp_path).settings
    save_user_settings(replace(mine, folders=("/a",)), tmp_path)
    assert load_user_settings(tmp_path).settings.folders == ("/a",)


def test_a_folder_that_cannot_be_written_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_user_settings(UserSettings(folders=("/kept",)), tmp_path)
    before = settings_path(tmp_path).read_bytes()

    def refuse(*args: object, **kwargs: object) -> object:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("fitplan.core.inputs.user_settings.tempfile.mkstemp", refuse)
    with pytest.raises(SettingsSaveError) as e:
        save_user_settings(UserSettings(folders=("/kept", "/new")), tmp_path)
    assert str(tmp_path) in str(e.value) and "Permission denied" in str(e.value)
    assert isinstance(e.value, OSError)  # the window's save path catches OSError and shows it
    assert settings_path(tmp_path).read_bytes() == before


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes whatever the mode")
def test_a_read_only_config_folder_is_a_clear_error(tmp_path: Path) -> None:
    save_user_settings(UserSettings(folders=("/kept",)), tmp_path)
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(SettingsSaveError):
            save_user_settings(UserSettings(folders=("/kept", "/new")), tmp_path)
    finally:
        tmp_path.chmod(0o700)
    assert load_user_settings(tmp_path).settings.folders == ("/kept",)
