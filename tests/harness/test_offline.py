"""The hub check asks a real HTTP question with a short total timeout, and offline mode is scoped."""

from __future__ import annotations

import socket
import threading
import time

import pytest

import harness.offline as offline


@pytest.fixture
def silent_endpoint(monkeypatch):
    """An HF_ENDPOINT that accepts TCP connections and never answers (a hung proxy or mirror)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop, held = threading.Event(), []

    def accept_and_say_nothing():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept_and_say_nothing, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setattr(offline, "_REACHABLE", {})
    yield endpoint
    stop.set()
    thread.join(timeout=2)
    for conn in held:
        conn.close()
    server.close()


def test_an_endpoint_that_accepts_and_never_answers_is_offline_within_the_timeout(silent_endpoint):
    began = time.perf_counter()
    assert not offline.hub_reachable(timeout=1.0)
    assert time.perf_counter() - began < 3
    assert offline.hub_unreachable_reason() == f"{silent_endpoint} did not answer an HTTP request within 1 s"


def test_a_timeout_that_fires_before_the_wait_ends_says_the_same(monkeypatch):
    """urlopen's own timeout can fire a moment before the thread's join returns (a loaded machine):
    the reason is still "did not answer ... within", never a second wording."""
    import urllib.error
    import urllib.request

    def times_out(*args, **kwargs):
        raise urllib.error.URLError(TimeoutError("timed out"))

    monkeypatch.setattr(urllib.request, "urlopen", times_out)
    assert (
        offline._ask_hub("http://example.invalid", 1.0)
        == "http://example.invalid did not answer an HTTP request within 1 s"
    )

    def refused(*args, **kwargs):
        raise urllib.error.URLError(ConnectionRefusedError("refused"))

    monkeypatch.setattr(urllib.request, "urlopen", refused)
    assert offline._ask_hub("http://example.invalid", 1.0) == "http://example.invalid could not be reached (refused)"


def test_hf_data_from_a_silent_endpoint_fails_in_seconds_on_the_cli(silent_endpoint):
    from click.testing import CliRunner

    from harness.cli import main

    began = time.perf_counter()
    res = CliRunner().invoke(main, ["data", "info", "hf:wikitext:wikitext-2-raw-v1:validation"])
    assert res.exit_code == 2 and "cannot be reached" in res.output and "did not answer" in res.output
    assert silent_endpoint in res.output and "fix:" in res.output
    assert time.perf_counter() - began < 15


def test_an_endpoint_that_answers_http_is_reachable(monkeypatch):
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class NotFound(BaseHTTPRequestHandler):  # any answer below 500 means the hub is there
        def do_HEAD(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        monkeypatch.setattr(offline, "_REACHABLE", {})
        assert offline.hub_reachable(timeout=5.0)
    finally:
        server.shutdown()
        server.server_close()


def test_offline_mode_switches_the_imported_libraries_and_restores_them(monkeypatch):
    import huggingface_hub.constants as hub_constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    with offline.offline_mode():
        assert hub_constants.HF_HUB_OFFLINE is True and offline.hf_offline("datasets")
    assert hub_constants.HF_HUB_OFFLINE is False
    assert "HF_HUB_OFFLINE" not in __import__("os").environ and __import__("os").environ["HF_DATASETS_OFFLINE"] == "0"


def test_hf_cache_holds_datasets(tmp_path, monkeypatch):
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert not offline.hf_cache_holds_datasets()
    (tmp_path / "hub" / "models--gpt2").mkdir(parents=True)  # a model is not a dataset
    assert not offline.hf_cache_holds_datasets()
    (tmp_path / "hub" / "datasets--EleutherAI--lambada_openai").mkdir()
    assert offline.hf_cache_holds_datasets()
