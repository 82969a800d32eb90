"""What ships: the wheel and sdist, the desktop app, the icon, the Linux desktop entry and metainfo, the README.

The slow tests build for real: the wheel (installed into a fresh venv and run) and the PyInstaller one-folder app
(run headless). `tools/dev.py test` runs them; `pytest -m "not slow"` leaves them out of a quick loop.
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import sysconfig
import tarfile
import time
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import fitplan
from fitplan import bundled
from support.models import REPO

ROOT = REPO
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
LINUX = ROOT / "packaging" / "linux"
DESKTOP = LINUX / f"{bundled.ICON_NAME}.desktop"
METAINFO = LINUX / f"{bundled.ICON_NAME}.metainfo.xml"
EXE = ".exe" if os.name == "nt" else ""


def sandbox_env(home: Path) -> dict[str, str]:
    """This environment with the home, config and cache folders moved into `home` (tests never touch the real ones)."""
    return dict(
        os.environ,
        NO_COLOR="1",
        QT_QPA_PLATFORM="offscreen",
        HOME=str(home),
        USERPROFILE=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_CACHE_HOME=str(home / "cache"),
        XDG_DATA_HOME=str(home / "data"),
        FITPLAN_CONFIG_DIR=str(home / "config" / "fitplan"),
        PYINSTALLER_CONFIG_DIR=str(home / "pyinstaller"),
    )


def run(
    cmd: list[str], home: Path, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=sandbox_env(home), cwd=cwd
    )


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("home")


def example_models() -> list[Path]:
    """The bundled example models, main files only (mmproj projectors go with their model)."""
    return sorted(p for p in bundled.examples_dir().glob("*.gguf") if not p.name.startswith("mmproj"))


def registered_commands() -> set[str]:
    from fitplan import cli

    parser = cli.build_parser()
    return {name for a in parser._actions for name in getattr(a, "choices", None) or {}}


# --- icon -------------------------------------------------------------------------------------------------------


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def ico_entries(data: bytes) -> list[tuple[int, bytes]]:
    reserved, kind, count = struct.unpack("<HHH", data[:6])
    assert (reserved, kind) == (0, 1), "not an icon file"
    entries = []
    for i in range(count):
        w, h, _, _, _, _, length, offset = struct.unpack("<BBBBHHII", data[6 + 16 * i : 22 + 16 * i])
        assert w == h
        entries.append((w or 256, data[offset : offset + length]))
    return entries


def icns_entries(data: bytes) -> dict[bytes, bytes]:
    assert data[:4] == b"icns"
    assert struct.unpack(">I", data[4:8])[0] == len(data)
    entries = {}
    pos = 8
    while pos < len(data):
        kind, length = data[pos : pos + 4], struct.unpack(">I", data[pos + 4 : pos + 8])[0]
        entries[kind] = data[pos + 8 : pos + length]
        pos += length
    assert pos == len(data)
    return entries


def check_icon_folder(folder: Path) -> None:
    for size in bundled.ICON_SIZES:
        png = folder / f"{bundled.ICON_NAME}-{size}.png"
        assert png_size(png.read_bytes()) == (size, size), png.name
    ico = ico_entries((folder / f"{bundled.ICON_NAME}.ico").read_bytes())
    assert [size for size, _ in ico] == [16, 24, 32, 48, 64, 128, 256]
    for size, png in ico:
        assert png_size(png) == (size, size)
    icns = icns_entries((folder / f"{bundled.ICON_NAME}.icns").read_bytes())
    # Apple's PNG element types and their pixel sizes ('ic11'..'ic14' are the @2x variants).
    expected = {
        b"icp4": 16,
        b"icp5": 32,
        b"icp6": 64,
        b"ic07": 128,
        b"ic08": 256,
        b"ic09": 512,
        b"ic11": 32,
        b"ic12": 64,
        b"ic13": 256,
        b"ic14": 512,
        b"ic10": 1024,
    }
    assert {kind: png_size(png)[0] for kind, png in icns.items()} == expected


def test_committed_icons_have_every_size() -> None:
    assert bundled.icon_svg().is_file()
    check_icon_folder(bundled.icons_dir())
    assert bundled.icon_png(256) == bundled.icons_dir() / f"{bundled.ICON_NAME}-256.png"
    with pytest.raises(ValueError, match="no 100px icon"):
        bundled.icon_png(100)


def test_make_icons_regenerates_them(tmp_path: Path) -> None:
    out = tmp_path / "icons"
    proc = run(
        [sys.executable, str(ROOT / "tools" / "make_icons.py"), "--out", str(out)], tmp_path, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    check_icon_folder(out)
    committed = sorted(p.name for p in bundled.icons_dir().iterdir() if p.suffix != ".svg")
    assert sorted(p.name for p in out.iterdir()) == committed


# --- Linux desktop integration -----------------------------------------------------------------------------------


def test_desktop_entry_launches_the_gui_script_with_our_icon() -> None:
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str  # type: ignore[assignment,method-assign]
    entry.read(DESKTOP, encoding="utf-8")
    section = entry["Desktop Entry"]
    assert section["Type"] == "Application"
    assert shlex.split(section["Exec"])[0] in PYPROJECT["project"]["gui-scripts"]
    assert section["TryExec"] == shlex.split(section["Exec"])[0]
    assert section["Icon"] == bundled.ICON_NAME
    assert section["Terminal"] == "false"
    assert "application/x-gguf" in section["MimeType"].split(";")
    mime = ET.parse(LINUX / f"{bundled.ICON_NAME}.mime.xml").getroot()
    ns = "{http://www.freedesktop.org/standards/shared-mime-info}"
    mime_type = mime.find(f"{ns}mime-type")
    assert mime_type is not None and mime_type.get("type") == "application/x-gguf"
    match = mime_type.find(f"{ns}magic/{ns}match")
    assert match is not None and match.get("value") == "GGUF"  # the file magic the reader checks


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils not installed")
def test_desktop_entry_validates(tmp_path: Path) -> None:
    proc = run(["desktop-file-validate", str(DESKTOP)], tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stdout + proc.stderr


def test_metainfo_matches_desktop_entry_version_and_license() -> None:
    root = ET.parse(METAINFO).getroot()
    assert root.get("type") == "desktop-application"
    assert root.findtext("id") == bundled.ICON_NAME
    assert root.findtext("launchable") == DESKTOP.name
    assert root.findtext("project_license") == PYPROJECT["project"]["license"]
    releases = root.findall("releases/release")
    assert releases, "no <release>"
    assert releases[0].get("version") == fitplan.__version__, "newest <release> is not the package version"
    assert {b.text for b in root.findall("provides/binary")} == {
        *PYPROJECT["project"]["scripts"],
        *PYPROJECT["project"]["gui-scripts"],
    }


@pytest.mark.skipif(shutil.which("appstreamcli") is None, reason="appstream not installed")
def test_metainfo_validates(tmp_path: Path) -> None:
    proc = run(["appstreamcli", "validate", "--no-net", str(METAINFO)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- project metadata and documents -------------------------------------------------------------------------------


def test_version_has_one_source_and_a_changelog_entry() -> None:
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fitplan.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", fitplan.__version__)
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## \[?{re.escape(fitplan.__version__)}\]?", changelog, re.M), (
        "CHANGELOG lacks the version"
    )


def test_readme_has_exactly_two_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["python3 tools/dev.py run", "python3 tools/dev.py test"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 tools/dev.py test" in ci


def test_readme_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if "://" not in t and not t.startswith("mailto:")]
    assert "docs/screenshot-main.png" in local
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_resources_are_found_in_a_source_checkout() -> None:
    assert bundled.resources_dir() == ROOT / "resources"
    assert example_models(), "no example models in resources/examples (run tools/make_examples.py)"


# --- wheel and sdist (slow) ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory, home: Path) -> Iterator[tuple[Path, Path]]:
    """sdist built from this checkout, and the wheel built from that sdist (as `python -m build` does by default).

    --no-isolation: the build backend (setuptools>=77, in the dev extras) is taken from this environment, so the
    build needs no network and takes seconds instead of downloading setuptools into a fresh isolated venv. Building
    the wheel from the sdist (in a temporary folder) proves the sdist is complete and leaves no build/ folder here.
    """
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("dist")
    proc = run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)], home)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = out.glob("fitplan-*.tar.gz")
    (wheel,) = out.glob("fitplan-*.whl")
    yield sdist, wheel
    shutil.rmtree(out, ignore_errors=True)


@pytest.mark.slow
def test_dists_pass_twine_check(dists: tuple[Path, Path], home: Path) -> None:
    pytest.importorskip("twine")
    proc = run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dists)], home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2


@pytest.mark.slow
def test_wheel_carries_package_data_and_entry_points(dists: tuple[Path, Path]) -> None:
    _, wheel = dists
    assert wheel.name == f"fitplan-{fitplan.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = zf.read(f"fitplan-{fitplan.__version__}.dist-info/entry_points.txt").decode()
        metadata = zf.read(f"fitplan-{fitplan.__version__}.dist-info/METADATA").decode()
    assert "fitplan/py.typed" in names
    assert f"fitplan-{fitplan.__version__}.dist-info/licenses/LICENSE" in names
    shipped_examples = {n.rsplit("/", 1)[1] for n in names if n.startswith("fitplan/data/examples/")}
    assert shipped_examples == {p.name for p in bundled.examples_dir().glob("*.gguf")}
    for size in bundled.ICON_SIZES:
        assert f"fitplan/data/icons/{bundled.ICON_NAME}-{size}.png" in names
    data = ROOT / "app" / "fitplan" / "data"
    for f in data.rglob("*") if data.is_dir() else ():
        if f.is_file() and "__pycache__" not in f.parts:
            assert f"fitplan/data/{f.relative_to(data).as_posix()}" in names
    assert not any(n.startswith(("tests/", "tools/", "resources/", "fitplan/resources/")) for n in names)
    assert "[console_scripts]\nfitplan = fitplan.cli:main" in entry_points
    assert "[gui_scripts]\nfitplan-gui = fitplan.gui.app:main" in entry_points
    assert "License-Expression: MIT" in metadata
    requirements = pytest.importorskip("packaging.requirements")
    declared = {str(requirements.Requirement(dep)) for dep in PYPROJECT["project"]["dependencies"]}
    shipped = {
        str(requirements.Requirement(line.split(":", 1)[1]))
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    assert shipped == declared


@pytest.mark.slow
def test_sdist_can_rebuild_and_test(dists: tuple[Path, Path]) -> None:
    sdist, _ = dists
    top = f"fitplan-{fitplan.__version__}"
    with tarfile.open(sdist) as tf:
        names = set(tf.getnames())
    for required in (
        "pyproject.toml",
        "setup.py",
        "LICENSE",
        "README.md",
        "CHANGELOG.md",
        "tools/dev.py",
        "tests/packaging/test_packaging.py",
        f"resources/icons/{bundled.ICON_NAME}.svg",
        "packaging/fitplan.spec",
    ):
        assert f"{top}/{required}" in names, required
    for model in bundled.examples_dir().glob("*.gguf"):
        assert f"{top}/resources/examples/{model.name}" in names


@pytest.fixture(scope="module")
def installed(dists: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory, home: Path) -> Path:
    """A fresh venv with only the wheel installed in it; returns its scripts folder.

    The dependencies (PySide6, numpy, gguf...) are not installed again: the wheel goes in with --no-deps and a .pth
    file appends this environment's site-packages to the new venv's path. That keeps the test offline and fast
    while the wheel's own files (code, package data, entry points) are the only fitplan the venv can import: a .pth
    line adds a plain folder, it does not run that folder's .pth files, so this checkout's editable install stays out.
    """
    _, wheel = dists
    venv = tmp_path_factory.mktemp("venv")
    proc = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], home)
    assert proc.returncode == 0, proc.stderr
    scripts = venv / ("Scripts" if os.name == "nt" else "bin")
    python = scripts / f"python{EXE}"
    proc = run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            str(wheel),
        ],
        home,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    where = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], home)
    purelib = Path(where.stdout.strip())
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (purelib / "_fitplan_test_deps.pth").write_text("\n".join(sorted(ours)) + "\n", encoding="utf-8")
    return scripts


@pytest.mark.slow
def test_installed_wheel_is_what_runs(installed: Path, home: Path) -> None:
    python = installed / f"python{EXE}"
    code = (
        "import fitplan, fitplan.bundled as b; print(fitplan.__file__); print(b.examples_dir()); "
        "print(len(list(b.examples_dir().glob('*.gguf'))))"
    )
    proc = run([str(python), "-c", code], home, cwd=installed)
    assert proc.returncode == 0, proc.stderr
    module_file, examples, count = proc.stdout.splitlines()
    venv = installed.parent
    assert Path(module_file).is_relative_to(venv), f"imported {module_file}, not the wheel"
    assert Path(examples).is_relative_to(venv) and Path(examples).parts[-3:] == (
        "fitplan",
        "data",
        "examples",
    )
    assert int(count) == len(list(bundled.examples_dir().glob("*.gguf")))
    assert (installed / f"fitplan-gui{EXE}").exists()


@pytest.mark.slow
def test_installed_fitplan_command_runs(installed: Path, home: Path) -> None:
    fitplan_cmd = str(installed / f"fitplan{EXE}")
    proc = run([fitplan_cmd, "--version"], home, cwd=installed)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(
        f"fitplan {fitplan.__version__} (estimates llama.cpp commit {fitplan.LLAMA_CPP_COMMIT}"
    )
    check_model_commands(
        fitplan_cmd, installed.parent / ("Lib" if os.name == "nt" else "lib"), home, installed
    )


def check_model_commands(fitplan_cmd: str, package_root: Path, home: Path, cwd: Path) -> None:
    """`estimate` and `inspect` on the bundled 8B example, found inside the installed files."""
    commands = registered_commands()
    assert {"estimate", "inspect"} <= commands
    examples = sorted(package_root.rglob("fitplan/data/examples/*.gguf"))
    assert examples, f"no bundled examples under {package_root}"
    model = next((p for p in examples if "8B" in p.name), examples[0])
    for name in ("estimate", "inspect"):
        args = [fitplan_cmd, name, str(model), "--json"]
        if name == "estimate":
            args += ["--assume-gpu", "24GiB", "-c", "4096"]
        proc = run(args, home, cwd=cwd)
        assert proc.returncode in (0, 1), f"`fitplan {name}` failed: {proc.stderr}"
        assert proc.stdout.lstrip().startswith("{"), proc.stdout[:500]


# --- the desktop app (slow) ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def frozen_app(tmp_path_factory: pytest.TempPathFactory, home: Path) -> Iterator[Path]:
    """packaging/fitplan.spec built with PyInstaller (about 20 s on two cores); yields dist/fitplan."""
    pytest.importorskip("PyInstaller")
    work = tmp_path_factory.mktemp("pyinstaller")
    t0 = time.monotonic()
    proc = run(
        [
            sys.executable,
            "-m",
            "PyInstaller",
            "--noconfirm",
            "--clean",
            "--log-level",
            "WARN",
            "--distpath",
            str(work / "dist"),
            "--workpath",
            str(work / "build"),
            str(ROOT / "packaging" / "fitplan.spec"),
        ],
        home,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    print(f"PyInstaller build took {time.monotonic() - t0:.0f} s")
    yield work / "dist" / "fitplan"
    shutil.rmtree(work, ignore_errors=True)


@pytest.mark.slow
def test_frozen_app_bundles_resources_and_qt_plugins(frozen_app: Path) -> None:
    internal = frozen_app / "_internal"
    for name in ("fitplan", "fitplan-gui"):
        assert (frozen_app / f"{name}{EXE}").is_file(), name
    bundled_examples = {p.name for p in (internal / "fitplan" / "data" / "examples").glob("*.gguf")}
    assert bundled_examples == {p.name for p in bundled.examples_dir().glob("*.gguf")}
    assert (internal / "fitplan" / "data" / "icons" / f"{bundled.ICON_NAME}-256.png").is_file()
    plugins = internal / "PySide6" / "Qt" / "plugins"
    if sys.platform.startswith("linux"):
        for plugin in (
            "platforms/libqxcb.so",
            "platforms/libqoffscreen.so",
            "platforms/libqwayland.so",
            "imageformats/libqsvg.so",
            "iconengines/libqsvgicon.so",
        ):
            assert (plugins / plugin).is_file(), plugin


@pytest.mark.slow
def test_frozen_app_runs_headless(frozen_app: Path, home: Path) -> None:
    cli = str(frozen_app / f"fitplan{EXE}")
    proc = run([cli, "--version"], home, cwd=frozen_app)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(f"fitplan {fitplan.__version__} (estimates llama.cpp commit")
    proc = run([cli, "no-such-command"], home, cwd=frozen_app)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    check_model_commands(cli, frozen_app / "_internal", home, frozen_app)


@pytest.mark.slow
def test_frozen_window_starts_offscreen(frozen_app: Path, tmp_path: Path) -> None:
    """The window executable starts on Qt's offscreen platform and keeps running (no import or plugin error)."""
    proc = subprocess.Popen(
        [str(frozen_app / f"fitplan-gui{EXE}")],
        cwd=frozen_app,
        env=sandbox_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        exited = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        exited = None
    finally:
        if proc.poll() is None:
            proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert exited is None, f"the window exited with {exited}: {err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]


# --- tools/dev.py (the README's two commands) ------------------------------------------------------------------------


@pytest.fixture
def dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, list[list[str]]]:
    """tools/dev.py loaded as a module, pointed at a scratch project in tmp_path, with commands recorded."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fitplan_dev_script", ROOT / "tools" / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "setup.py").write_text("")
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "VENV", venv)
    monkeypatch.setattr(module, "PY", venv / "bin" / "python")
    monkeypatch.setattr(module, "STAMP", venv / ".fitplan-installed")
    monkeypatch.setattr(module, "ensure_system_packages", lambda: None)
    calls: list[list[str]] = []
    codes: dict[str, int] = {}

    def fake_run(cmd: list[str], **kw: object) -> int:
        calls.append(cmd)
        return next((code for key, code in codes.items() if key in cmd), 0)

    monkeypatch.setattr(module, "run", fake_run)
    module.codes = codes  # type: ignore[attr-defined]
    return module, calls


def pip_installs(calls: list[list[str]]) -> list[str]:
    return [c[-1] for c in calls if c[1:4] == ["-m", "pip", "install"] and "-e" in c]


def test_dev_installs_once_per_packaging_change(dev: tuple[object, list[list[str]]], tmp_path: Path) -> None:
    module, calls = dev
    module.ensure_venv("dev")  # type: ignore[attr-defined]
    assert pip_installs(calls) == [".[dev]"]
    module.ensure_venv("dev")  # type: ignore[attr-defined]
    module.ensure_venv("")  # type: ignore[attr-defined]  # `run` after `test`: dev already covers it
    assert pip_installs(calls) == [".[dev]"]
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'y'\n")
    module.ensure_venv("")  # type: ignore[attr-defined]
    assert pip_installs(calls) == [".[dev]", "."]  # a new pyproject.toml: reinstall, what `run` needs
    module.ensure_venv("dev")  # type: ignore[attr-defined]
    assert pip_installs(calls) == [".[dev]", ".", ".[dev]"]


@pytest.mark.parametrize(("pytest_code", "expected"), [(0, 0), (1, 1), (5, 1)])
def test_dev_test_fails_when_pytest_fails_or_collects_nothing(
    dev: tuple[object, list[list[str]]], capsys: pytest.CaptureFixture[str], pytest_code: int, expected: int
) -> None:
    module, calls = dev
    module.codes["pytest"] = pytest_code  # type: ignore[attr-defined]
    assert module.cmd_test(["-m", "not slow"]) == expected  # type: ignore[attr-defined]
    steps = [c[2] for c in calls if c[1:2] == ["-m"] and c[2] in ("ruff", "mypy", "pytest")]
    assert steps == ["ruff", "ruff", "mypy", "pytest"]
    assert [c[3] for c in calls if c[1:3] == ["-m", "ruff"]] == ["check", "format"]
    assert any(c[0].endswith("lint-imports") for c in calls)  # the import contracts
    assert calls[-1][-2:] == ["-m", "not slow"]
    assert ("collected no tests" in capsys.readouterr().err) == (pytest_code == 5)


def test_dev_lint_failure_fails_the_run(dev: tuple[object, list[list[str]]]) -> None:
    module, _ = dev
    module.codes["ruff"] = 1  # type: ignore[attr-defined]
    assert module.cmd_test([]) == 1  # type: ignore[attr-defined]


def test_dev_without_a_command_prints_usage() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "dev.py")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "python3 tools/dev.py test" in proc.stdout
