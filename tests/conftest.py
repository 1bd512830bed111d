"""Shared fixtures: an isolated cache, offline HF settings, and tiny trained checkpoints."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _offline_env(tmp_path_factory):
    """No test may reach the network; caches live under a session temp folder."""
    cache = os.environ.get("PRIMEBENCH_TEST_CACHE") or str(tmp_path_factory.mktemp("primebench-cache"))
    old = {
        k: os.environ.get(k)
        for k in ("PRIMEBENCH_CACHE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    os.environ["PRIMEBENCH_CACHE"] = cache
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """Train each tiny family once per session (a few seconds each) and return {family: path}."""
    from harness.config import load_config
    from harness.training import train

    cache: dict[str, object] = {}

    def get(family: str):
        if family not in cache:
            out = tmp_path_factory.mktemp(f"ckpt-{family}")
            cfg = load_config(f"tiny/{family}", ["train.steps=20", "train.eval_every=20", "train.save_every=20"])
            train(cfg, out / "run", quiet=True)
            cache[family] = out / "run"
        return cache[family]

    return get


@pytest.fixture(scope="module")
def single_thread():
    """Tiny tensors: intra-op threads only add overhead (and contend on a loaded 2-core machine)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def release_files(tmp_path_factory):
    """The release fixtures of every layout, written once per session (Lightning writes the .ckpt
    files): a folder to read, never to modify (copy a file before changing it)."""
    from tests.fixtures.releases import write_all

    folder = tmp_path_factory.mktemp("releases")
    write_all(folder)
    return folder
