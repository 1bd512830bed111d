"""One offline check and one rank reader: harness.offline and harness.distributed."""

from __future__ import annotations

import pytest

from harness import distributed
from harness.offline import env_flag, hf_offline, is_network_error

FLAGS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


@pytest.fixture
def online(monkeypatch):
    for flag in FLAGS:
        monkeypatch.delenv(flag, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    "value, on", [("1", True), ("true", True), (" YES ", True), ("on", True), ("0", False), ("", False), ("off", False)]
)
def test_env_flag_values(online, value, on):
    online.setenv("HF_HUB_OFFLINE", value)
    assert env_flag("HF_HUB_OFFLINE") is on


def test_offline_switches_per_library(online):
    assert not hf_offline() and not hf_offline("transformers")
    online.setenv("HF_DATASETS_OFFLINE", "1")
    assert hf_offline("datasets") and not hf_offline("transformers")
    online.delenv("HF_DATASETS_OFFLINE")
    online.setenv("TRANSFORMERS_OFFLINE", "1")
    assert hf_offline("transformers") and not hf_offline("datasets")
    online.setenv("HF_HUB_OFFLINE", "1")  # the hub switch covers both
    online.delenv("TRANSFORMERS_OFFLINE")
    assert hf_offline("datasets") and hf_offline("transformers")


def test_is_network_error_follows_the_cause_chain():
    try:
        try:
            raise ConnectionError("refused")
        except ConnectionError as inner:
            raise ValueError("load failed") from inner
    except ValueError as exc:
        assert is_network_error(exc)
    assert not is_network_error(ValueError("bad column"))


def test_rank_and_world_size_come_from_torchrun_env(monkeypatch):
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert (distributed.rank(), distributed.local_rank(), distributed.world_size()) == (0, 0, 1)
    assert distributed.is_main()
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert (distributed.rank(), distributed.local_rank(), distributed.world_size()) == (3, 1, 4)
    assert not distributed.is_main()
