"""`fitplan verify URL` and `fitplan verify PARTIAL.gguf`: llama-fit-params runs on a sparse local copy (the header,
then a hole up to the declared size), written in a temporary folder. A fake binary records what it was given."""

from __future__ import annotations

import json
import shutil
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fitplan.cli import main
from fitplan.core.gguf.reader import read_header
from fitplan.core.inputs.model_source import forget_loaded
from support.hub import SPARSE, HubState, fake_hub, requant

FAKE = """#!{python}
import json, os, sys
m = sys.argv[sys.argv.index("-m") + 1]
folder = os.path.dirname(m)
seen = {{}}
for name in sorted(os.listdir(folder)):
    p = os.path.join(folder, name)
    if not os.path.isfile(p):
        continue
    st = os.stat(p)
    with open(p, "rb") as f:
        head = f.read(4)
    seen[name] = {{"size": st.st_size, "allocated": st.st_blocks * 512, "magic": head.decode("latin-1")}}
json.dump({{"m": m, "files": seen}}, open({record!r}, "w"))
print("Host 2268 1024 298 ")
"""


@pytest.fixture(autouse=True)
def _plain(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    forget_loaded()
    yield
    forget_loaded()


@pytest.fixture
def fake_bin(tmp_path: Path) -> tuple[Path, Path]:
    d = tmp_path / "bin"
    d.mkdir()
    record = tmp_path / "seen.json"
    exe = d / "llama-fit-params"
    exe.write_text(FAKE.format(python=sys.executable, record=str(record)))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return d, record


def _verify(capsys: pytest.CaptureFixture[str], model: str, bin_dir: Path) -> tuple[int, str, str]:
    rc = main(["verify", model, "-c", "4096", "-dev", "none", "--llama-bin", str(bin_dir)])
    o = capsys.readouterr()
    return rc, o.out, o.err


def test_verify_a_split_model_by_url(
    capsys: pytest.CaptureFixture[str],
    fake_bin: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bin_dir, record = fake_bin
    repo = tmp_path / "repo"
    shards = requant(SPARSE / "qwen3-8b.header.gguf", repo / "Qwen3-8B-Q8_0.gguf", "Q8_0", shards=2)
    st = HubState()
    st.add("o/Qwen3-8B-GGUF", repo)
    with fake_hub(st) as (endpoint, _):
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        rc, out, err = _verify(capsys, f"{endpoint}/o/Qwen3-8B-GGUF/resolve/main/{shards[1].name}", bin_dir)
    assert rc == 0, err
    assert "sparse copy" in out
    seen = json.loads(record.read_text())
    assert Path(seen["m"]).name == shards[0].name  # the first shard, whichever was named
    assert sorted(seen["files"]) == [s.name for s in shards]  # both shards, under their split names
    for s in shards:
        f = seen["files"][s.name]
        declared = read_header(s).declared_file_size
        assert f["size"] == declared and f["magic"] == "GGUF"
        assert f["allocated"] < declared // 100  # a hole, not 4 GiB of zeros
    assert not Path(seen["m"]).exists()  # the temporary folder is gone


def test_verify_an_interrupted_download(
    capsys: pytest.CaptureFixture[str], fake_bin: tuple[Path, Path], tmp_path: Path
) -> None:
    bin_dir, record = fake_bin
    partial = tmp_path / "llama.gguf"
    src = SPARSE / "llama-3.1-8b.header.gguf"
    shutil.copyfile(src, partial)
    with partial.open("r+b") as f:
        f.truncate(50 << 20)  # 50 MiB of a 4.6 GiB download
    rc, out, err = _verify(capsys, str(partial), bin_dir)
    assert rc == 0, err
    assert "sparse copy" in out
    seen = json.loads(record.read_text())
    ((name, f),) = seen["files"].items()
    assert name == "llama.gguf" and f["size"] == read_header(src, allow_incomplete=True).expected_file_size
    assert seen["m"] != str(partial)


def test_a_complete_file_is_given_as_it_is(
    capsys: pytest.CaptureFixture[str], fake_bin: tuple[Path, Path], tmp_path: Path
) -> None:
    bin_dir, record = fake_bin
    whole = tmp_path / "w.gguf"
    src = SPARSE / "llama-3.1-8b.header.gguf"
    shutil.copyfile(src, whole)
    with whole.open("r+b") as f:
        f.truncate(read_header(src, allow_incomplete=True).expected_file_size)
    rc, out, err = _verify(capsys, str(whole), bin_dir)
    assert rc == 0, err
    assert json.loads(record.read_text())["m"] == str(whole) and "sparse copy" not in out
