"""FID: Frechet distance against closed forms, batch invariance, backend agreement, the digit
classifier feature space, offline Inception weights, and the ``eval fid`` command."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from harness.errors import OfflineError, PrimebenchError
from harness.fid.frechet import FeatureStats, GaussianStats, frechet_distance, inception_score, stats_of


def _gaussian(mean, cov):
    return GaussianStats(mean=np.asarray(mean, np.float64), cov=np.asarray(cov, np.float64), count=100)


def test_frechet_distance_diagonal_closed_form():
    rng = np.random.default_rng(0)
    mu_a, mu_b = rng.normal(size=6), rng.normal(size=6)
    a, b = rng.uniform(0.1, 3.0, size=6), rng.uniform(0.1, 3.0, size=6)
    expected = np.sum((mu_a - mu_b) ** 2) + np.sum((np.sqrt(a) - np.sqrt(b)) ** 2)
    got = frechet_distance(_gaussian(mu_a, np.diag(a)), _gaussian(mu_b, np.diag(b)))
    assert got == pytest.approx(expected, rel=1e-12)


def test_frechet_distance_general_covariances_match_direct_sqrtm():
    from scipy.linalg import sqrtm

    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(8, 8)), rng.normal(size=(8, 8))
    s_a, s_b = x @ x.T + 0.1 * np.eye(8), y @ y.T + 0.1 * np.eye(8)
    mu_a, mu_b = rng.normal(size=8), rng.normal(size=8)
    root = sqrtm(s_a @ s_b)
    assert np.abs(root.imag).max() < 1e-8
    direct = np.sum((mu_a - mu_b) ** 2) + np.trace(s_a + s_b - 2 * root.real)
    a, b = _gaussian(mu_a, s_a), _gaussian(mu_b, s_b)
    assert frechet_distance(a, b) == pytest.approx(direct, rel=1e-10)
    assert frechet_distance(b, a) == pytest.approx(direct, rel=1e-10)
    assert abs(frechet_distance(a, a)) < 1e-9


def test_feature_stats_do_not_depend_on_batch_size():
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(1001, 5, generator=gen, dtype=torch.float64) * 3 + 100.0  # large mean stresses the sums
    whole = stats_of(features)
    for size in (1, 7, 250):
        acc = FeatureStats(5)
        for start in range(0, len(features), size):
            acc.update(features[start : start + size])
        part = acc.compute()
        assert part.count == 1001
        np.testing.assert_allclose(part.mean, whole.mean, rtol=1e-13)
        np.testing.assert_allclose(part.cov, whole.cov, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(whole.cov, np.cov(features.numpy(), rowvar=False), rtol=1e-9)
    np.testing.assert_allclose(whole.mean, features.numpy().mean(0), rtol=1e-13)
    acc.reset()
    acc.update(features[:2])
    assert acc.compute().count == 2


def test_inception_score_closed_forms():
    assert inception_score(torch.zeros(100, 7))[0] == pytest.approx(1.0, abs=1e-12)
    confident = torch.full((100, 10), -1e4)
    confident[torch.arange(100), torch.arange(100) % 10] = 0.0  # every split: all 10 classes, one-hot
    assert inception_score(confident)[0] == pytest.approx(10.0, rel=1e-9)


@pytest.fixture(scope="module")
def digits_space():
    from harness.fid.features import get_feature_space

    return get_feature_space("digits-classifier")


def test_digits_classifier_trains_is_cached_and_accurate(digits_space):
    from harness.fid.digits_classifier import load_classifier
    from harness.fid.features import extract
    from harness.fid.reference import reference_images

    accuracy = digits_space.info["classifier"]["test_accuracy"]
    assert accuracy > 0.9
    t0 = time.time()
    again = load_classifier("digits", seed=0)
    assert not again.trained_now and time.time() - t0 < 2.0
    assert again.accuracy == accuracy
    images, _ = reference_images("digits:test")
    first, _ = extract(digits_space, images[:50])
    second = again.net(images[:50])[0].to(torch.float64)
    assert first.shape == (50, 64)
    assert torch.equal(first, second)


def _shuffled_pixels(images, seed=0):
    gen = torch.Generator().manual_seed(seed)
    flat = images.reshape(len(images), -1)
    return torch.stack([row[torch.randperm(flat.shape[1], generator=gen)] for row in flat]).reshape(images.shape)


def test_backends_agree_and_real_beats_shuffled(digits_space):
    from harness.fid.backends import fid_between
    from harness.fid.reference import reference_images

    test, _ = reference_images("digits:test")
    train, _ = reference_images("digits:train")
    real = {
        b: fid_between(test, train, digits_space, backend=b).fid for b in ("frechet", "torchmetrics", "torch-fidelity")
    }
    for backend, value in real.items():
        assert value == pytest.approx(real["frechet"], rel=1e-3), (backend, real)
    shuffled = fid_between(_shuffled_pixels(test), train, digits_space, backend="frechet").fid
    assert real["frechet"] * 10 < shuffled, (real, shuffled)


def test_reference_statistics_are_cached(digits_space):
    from harness.fid.backends import fid_between
    from harness.fid.reference import reference_cache_path, reference_images

    test, _ = reference_images("digits:test")
    first = fid_between(test, "digits:train", digits_space, backend="frechet")
    second = fid_between(test, "digits:train", digits_space, backend="frechet")
    assert reference_cache_path("digits:train", digits_space).is_file()
    assert second.reference_cached and second.fid == first.fid and second.reference_size == 1610


def test_missing_inception_weights_name_the_file_and_folder(tmp_path, monkeypatch):
    from harness.fid.features import INCEPTION_WEIGHTS_FILE, get_feature_space

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))

    def no_download(*args, **kwargs):
        raise AssertionError("tried to download")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", no_download)
    with pytest.raises(OfflineError) as err:
        get_feature_space("inception")
    message = str(err.value)
    assert INCEPTION_WEIGHTS_FILE in message and str(tmp_path / "hub" / "checkpoints") in message
    with pytest.raises(PrimebenchError, match="does not exist"):
        get_feature_space("inception", inception_weights=tmp_path / "nope.pth")


def test_unknown_feature_extractor_and_backend_suggest_names():
    from harness.fid.backends import fid_between
    from harness.fid.features import get_feature_space

    with pytest.raises(PrimebenchError, match="did you mean 'digits-classifier'"):
        get_feature_space("digit-classifier")
    with pytest.raises(PrimebenchError, match="did you mean 'torchmetrics'"):
        fid_between(torch.zeros(2, 1, 8, 8, dtype=torch.uint8), "digits:train", None, backend="torchmetric")


def test_eval_fid_cli_on_a_tiny_digits_checkpoint(tmp_path, digits_space):
    from harness.cli import main
    from harness.config import load_config
    from harness.training import train

    cfg = load_config(
        "tiny-digits/mdlm", ["train.steps=4", "train.eval_every=4", "train.save_every=4", "train.sample_grid=0"]
    )
    train(cfg, tmp_path / "ckpt", quiet=True)
    res = CliRunner().invoke(
        main,
        [
            "eval",
            "fid",
            str(tmp_path / "ckpt"),
            "--samples",
            "40",
            "--steps",
            "4",
            "--batch-size",
            "20",
            "--json",
            "--out",
            str(tmp_path / "rec"),
        ],
    )
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout[res.stdout.index("{") :])
    assert record["evaluation"] == "fid"
    fid = record["metrics"]["fid[digits-classifier]"]
    assert fid["kind"] == "estimate" and "digits-classifier" in fid["units"] and fid["value"] > 0
    assert not any("inception" in name for name in record["metrics"])
    p = record["protocol"]
    assert p["reference"] == "digits:train" and p["samples"] == 40 and p["backend"] == "torch-fidelity"
    assert p["feature_extractor_accuracy"] > 0.9 and p["sampler"]["steps"] == 4
    assert len(list((tmp_path / "rec").glob("fid-*.json"))) == 1
    bad = CliRunner().invoke(main, ["eval", "fid", str(tmp_path / "ckpt"), "--paper-protocol"])
    assert bad.exit_code != 0 and "cifar10:PATH" in bad.output


@pytest.mark.slow
def test_inception_path_with_placed_weights_file(tmp_path, monkeypatch):
    """(~50 s on 2 CPU cores.) A random-weights file of the right shape placed in the hub cache is found and used (no
    download); torch-fidelity and our path agree on FID and IS from the same network."""
    from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

    from harness.fid.backends import fid_between
    from harness.fid.features import INCEPTION_WEIGHTS_FILE, get_feature_space

    monkeypatch.setattr(FeatureExtractorInceptionV3, "load_state_dict", lambda self, sd: None)
    torch.manual_seed(0)
    monkeypatch.setattr(torch, "load", lambda *a, **k: {})
    state = FeatureExtractorInceptionV3("x", ["2048"], feature_extractor_weights_path="unused").state_dict()
    monkeypatch.undo()
    folder = tmp_path / "hub" / "checkpoints"
    folder.mkdir(parents=True)
    torch.save(state, folder / INCEPTION_WEIGHTS_FILE)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", lambda *a, **k: pytest.fail("tried to download"))
    space = get_feature_space("inception")
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(0, 256, (10, 1, 8, 8), dtype=torch.uint8, generator=gen)
    b = torch.randint(0, 128, (10, 1, 8, 8), dtype=torch.uint8, generator=gen)
    ours = fid_between(a, b, space, backend="frechet")
    theirs = fid_between(a, b, space, backend="torch-fidelity")
    assert ours.fid == pytest.approx(theirs.fid, rel=1e-3)
    assert ours.inception_score >= 1.0 and theirs.inception_score >= 1.0  # splits differ: torch-fidelity shuffles
