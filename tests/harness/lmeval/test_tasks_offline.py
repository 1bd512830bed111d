"""A task that needs the hub fails in seconds when the hub is off or unreachable (no library retries)."""

from __future__ import annotations

import time

import pytest

import harness.offline as offline
from harness.errors import OfflineError, PrimebenchError
from harness.lmeval.tasks import load_tasks


@pytest.fixture
def no_network(tmp_path, monkeypatch):
    """Flags unset (the user did not say offline), the hub refusing connections, an empty HF cache."""
    for flag in (
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_DATASETS_CACHE",
    ):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.setattr(offline, "_REACHABLE", {})


def test_a_hub_task_with_the_hub_unreachable_fails_in_seconds(no_network):
    began = time.perf_counter()
    with pytest.raises(OfflineError) as err:
        load_tasks(["lambada_openai"])
    assert time.perf_counter() - began < 5
    assert "'lambada_openai' is not local" in err.value.problem and "http://127.0.0.1:9" in err.value.problem
    assert "wiki_rolling, wiki_lastword" in err.value.fix


def test_a_hub_task_with_the_hub_switched_off_fails_in_seconds(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE"):
        monkeypatch.delenv(name, raising=False)
    began = time.perf_counter()  # the tests run with HF_HUB_OFFLINE=1
    with pytest.raises(OfflineError, match="switched off") as err:
        load_tasks(["wiki_rolling", "lambada_openai", "hellaswag"])
    assert time.perf_counter() - began < 5
    assert "'lambada_openai', 'hellaswag' are not local" in err.value.problem
    assert "unset HF_HUB_OFFLINE" in err.value.fix


def test_a_typo_of_a_local_task_offline_gets_did_you_mean_at_once(no_network):
    began = time.perf_counter()
    with pytest.raises(PrimebenchError, match="unknown task 'wiki_rollin'") as err:
        load_tasks(["wiki_rollin"])
    assert "did you mean 'wiki_rolling'?" in err.value.fix and time.perf_counter() - began < 5
