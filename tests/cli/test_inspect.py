"""`fitplan inspect`: text and JSON output for a local file, a split model and a URL (loopback HTTP server)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

import gguf
from fitplan.cli import main


def write_model(
    path: Path, n_layer: int = 3, sliding_window: int | None = None, arch: str = "gemma3"
) -> Path:
    n_embd, n_head, n_head_kv, n_ff, n_vocab = 64, 4, 2, 128, 32
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("Inspect Test")
    w.add_block_count(n_layer)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_file_type(1)
    if sliding_window is not None:
        w.add_sliding_window(sliding_window)
        w.add_uint32(f"{arch}.attention.sliding_window_pattern", 3)
    w.add_tensor("token_embd.weight", np.zeros((n_vocab, n_embd), dtype=np.float16))
    for il in range(n_layer):
        w.add_tensor(f"blk.{il}.attn_q.weight", np.zeros((n_embd, n_embd), dtype=np.float16))
        w.add_tensor(f"blk.{il}.attn_k.weight", np.zeros((n_embd // 2, n_embd), dtype=np.float16))
        w.add_tensor(f"blk.{il}.ffn_up.weight", np.zeros((n_ff, n_embd), dtype=np.float16))
        w.add_tensor(f"blk.{il}.attn_norm.weight", np.zeros((n_embd,), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.zeros((n_embd,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def run_json(capsys: pytest.CaptureFixture[str], target: str) -> dict[str, object]:
    assert main(["inspect", target, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_model(tmp_path / "m.gguf", n_layer=3, sliding_window=512)
    doc = run_json(capsys, str(path))
    assert doc["architecture"] == "gemma3"
    assert doc["n_layer"] == 3 and doc["n_ctx_train"] == 4096
    # token_embd 32x64 + 3 x (64x64 + 32x64 + 128x64 + 64) + 64 elements
    assert doc["n_params"] == 32 * 64 + 3 * (64 * 64 + 32 * 64 + 128 * 64 + 64) + 64
    assert doc["n_tensors"] == 1 + 3 * 4 + 1
    assert doc["file_type"] == "F16"  # general.file_type 1 = LLAMA_FTYPE_MOSTLY_F16
    assert doc["file_size"] == path.stat().st_size
    layers = doc["layers"]
    assert isinstance(layers, list)
    # sliding_window_pattern 3: layers 0, 1 are SWA, layer 2 full
    assert [ly["kind"] for ly in layers] == ["swa", "swa", "full"]
    assert doc["n_swa"] == 512 and doc["swa_type"] == "standard"


def test_text_output_lists_layers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_model(tmp_path / "m.gguf", n_layer=2, arch="llama")
    assert main(["inspect", str(path), "--layers"]) == 0
    text = capsys.readouterr().out
    assert "Inspect Test" in text
    assert "llama" in text
    assert "2: 2 full" in text
    assert "4096" in text  # training context
    assert "F16" in text
    assert text.count("full") >= 3  # summary line plus one row per layer


def test_text_output_shows_the_kind_of_each_layer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_model(tmp_path / "m.gguf", n_layer=6, sliding_window=512)
    assert main(["inspect", str(path)]) == 0
    # sliding_window_pattern 3: SWA iff il % 3 < 2
    assert "0-1 swa, 2 full, 3-4 swa, 5 full" in capsys.readouterr().out


def test_unknown_architecture_is_flagged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_model(tmp_path / "m.gguf", n_layer=1, arch="futurenet")
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "not known to llama.cpp" in out


def test_truncated_download_is_inspected_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_model(tmp_path / "m.gguf", n_layer=2, arch="llama")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1000])
    assert main(["inspect", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["n_layer"] == 2
    assert len(doc["incomplete"]) == 1
    assert "incomplete download" in captured.err


def test_mmproj_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mmproj.gguf"
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_file_type(1)
    w.add_tensor("v.patch_embd.weight", np.zeros((16, 3, 14, 14), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert main(["inspect", str(path)]) == 0
    assert "multimodal projector" in capsys.readouterr().out
    doc = run_json(capsys, str(path))
    assert doc["is_mmproj"] is True and doc["layers"] == [] and doc["n_params"] == 16 * 3 * 14 * 14


def test_missing_file_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path / "nope.gguf")]) == 2
    assert "error" in capsys.readouterr().err


class _RangeHandler(BaseHTTPRequestHandler):
    data = b""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, head_only: bool) -> None:
        rng = self.headers.get("Range")
        body = self.data
        if rng and rng.startswith("bytes="):
            start_s, end_s = rng[len("bytes=") :].split("-")
            start = int(start_s)
            end = min(int(end_s) if end_s else len(body) - 1, len(body) - 1)
            chunk = body[start : end + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
        else:
            chunk = body
            self.send_response(200)
        self.send_header("Content-Length", str(len(chunk)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if not head_only:
            self.wfile.write(chunk)

    def do_GET(self) -> None:
        self._send(False)

    def do_HEAD(self) -> None:
        self._send(True)


@pytest.fixture
def served_model(tmp_path: Path) -> Iterator[str]:
    path = write_model(tmp_path / "remote.gguf", n_layer=2, arch="llama")
    handler = type("H", (_RangeHandler,), {"data": path.read_bytes()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/remote.gguf"
    finally:
        server.shutdown()
        server.server_close()


def test_url(served_model: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    doc = run_json(capsys, served_model)
    assert doc["architecture"] == "llama" and doc["n_layer"] == 2
    assert [ly["kind"] for ly in doc["layers"]] == ["full", "full"]  # type: ignore[union-attr]
