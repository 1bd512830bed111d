"""Families own their facts: consistent attributes, the corruptible mask, and no name tests elsewhere."""

import re
from pathlib import Path

import pytest
import torch

from harness import diffusion
from harness.models import MODELS, family_names
from tests.toys import tiny

ROOT = Path(__file__).resolve().parents[3]
FAMILY_HOMES = {
    "baselines/arm.py",
    "baselines/mdlm.py",
    "baselines/masked.py",
    "prime/model.py",
    "harness/models/__init__.py",
}


def test_no_module_outside_the_families_compares_a_family_name():
    names = "|".join(family_names())
    pattern = re.compile(
        rf"""(==|!=)\s*['"]({names})['"]|['"]({names})['"]\s*(==|!=)|\bfamily\s+(not\s+)?in\s*[(\[{{]"""
    )
    offenders = []
    for path in (
        sorted((ROOT / "harness").rglob("*.py"))
        + sorted((ROOT / "prime").rglob("*.py"))
        + sorted((ROOT / "baselines").rglob("*.py"))
    ):
        rel = path.relative_to(ROOT).as_posix()
        if rel in FAMILY_HOMES:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{rel}:{i}: {line.strip()}")
    assert not offenders, "family names compared outside the family modules:\n" + "\n".join(offenders)


@pytest.mark.parametrize("family,kw", [("mdlm", {}), ("masked", {}), ("prime", {"ell": 2})])
@pytest.mark.parametrize("sampler", ["t", "n"])
def test_nll_masks_only_corruptible_units(family, kw, sampler, monkeypatch):
    model = tiny(family, C=7, L=6, seed=3, **kw)
    x0 = torch.randint(0, 7, (3, 6), generator=torch.Generator().manual_seed(0))
    corruptible = torch.zeros(3, 6, dtype=torch.bool)
    corruptible[:, 4:] = True
    seen = []
    real = diffusion.corrupt

    def spy(clean, u, valid, **k):
        out = real(clean, u, valid, **k)
        seen.append(out[1].reshape(3, 6, -1))
        return out

    monkeypatch.setattr(diffusion, "corrupt", spy)
    res = model.nll(
        x0, num_samples=4, generator=torch.Generator().manual_seed(1), corruptible=corruptible, time_sampler=sampler
    )
    assert len(seen) == 4 and all(not bool(m[:, :4].any()) for m in seen) and any(bool(m.any()) for m in seen)
    assert res.tokens.tolist() == [2.0, 2.0, 2.0]
    # per-row generators: a row's number does not depend on the rows scored beside it
    gens = lambda: [torch.Generator().manual_seed(10 + r) for r in range(3)]  # noqa: E731
    monkeypatch.setattr(diffusion, "corrupt", real)
    both = model.nll(x0, num_samples=4, generator=gens(), corruptible=corruptible, time_sampler=sampler)
    alone = model.nll(x0[1:2], num_samples=4, generator=gens()[1:2], corruptible=corruptible[1:2], time_sampler=sampler)
    assert float(both.nats[1]) == pytest.approx(float(alone.nats[0]), abs=1e-5)


def test_arm_corruptible_scores_only_the_marked_targets():
    model = tiny("arm", C=7, L=6, seed=4)
    x0 = torch.randint(0, 7, (2, 6), generator=torch.Generator().manual_seed(0))
    corruptible = torch.zeros(2, 6, dtype=torch.bool)
    corruptible[:, 3:] = True
    out = model.nll(x0, corruptible=corruptible)
    log_p = model.log_probs(x0[:, :-1])  # position i predicts token i + 1
    expected = -log_p.gather(-1, x0[:, 1:, None])[:, 2:, 0].double().sum(-1)
    assert torch.allclose(out.nats, expected, atol=1e-5) and out.tokens.tolist() == [3.0, 3.0]
    scored, greedy = model.score(x0, corruptible=corruptible, greedy=True)
    assert torch.allclose(scored.nats, out.nats) and greedy.dtype == torch.bool
    assert torch.equal(greedy, model.greedy_matches(x0, corruptible=corruptible))


def test_registry_lists_every_family_found():
    """Every module of the family packages registered itself; the list is sorted and is the registry's
    (a new family joins it without an edit here)."""
    names = family_names()
    assert {"arm", "bd3lm", "duo", "masked", "mdlm", "prime", "udlm"} <= set(names)
    assert names == sorted(names) and len(names) == len(MODELS)


def test_the_time_sampler_is_decided_by_the_family():
    """One method decides it: the family's protocol by default, the unbiased mask count on request
    (audits, lm-eval), None for an exact NLL; every caller asks ``model.time_sampler``."""
    mdlm, masked, prime, arm = (tiny(f, C=7, L=6) for f in ("mdlm", "masked", "prime", "arm"))
    timed = tiny("mdlm", C=7, L=6, time_conditioning=True)
    assert [m.time_sampler() for m in (mdlm, masked, prime, timed, arm)] == ["t", "n", "t", "t", None]
    assert [m.time_sampler(unbiased=True) for m in (mdlm, masked, prime, timed, arm)] == ["n", "n", "n", "t", None]
    assert mdlm.time_sampler("n") == "n" and arm.time_sampler("t") is None
    assert all(m.time_sampler() == m.default_time_sampler for m in (mdlm, masked, prime, arm))
    with pytest.raises(ValueError, match="unknown time sampler"):
        mdlm.time_sampler("x")
    # nll uses the same default: the family's protocol draw equals the explicit one
    x0 = torch.randint(0, 7, (2, 6), generator=torch.Generator().manual_seed(0))
    for model in (mdlm, masked):
        auto = model.nll(x0, num_samples=2, generator=torch.Generator().manual_seed(1))
        named = model.nll(
            x0, num_samples=2, generator=torch.Generator().manual_seed(1), time_sampler=model.time_sampler()
        )
        assert torch.equal(auto.nats, named.nats)


@pytest.mark.parametrize("family,kw", [("arm", {}), ("mdlm", {}), ("prime", {"ell": 2})])
def test_nll_takes_an_explicit_estimator_list(family, kw):
    model = tiny(family, C=7, L=6, seed=5, **kw)
    x0 = torch.randint(0, 7, (3, 6), generator=torch.Generator().manual_seed(0))
    names = [e.name for e in model.estimators]
    one = model.nll(x0, num_samples=2, generator=torch.Generator().manual_seed(1))
    many = model.nll(x0, estimators=names, num_samples=2, generator=torch.Generator().manual_seed(1))
    assert isinstance(many, list) and [r.kind for r in many] == [e.kind for e in model.estimators]
    assert torch.equal(many[0].nats, one.nats) and one.kind == model.estimators[0].kind
    with pytest.raises(ValueError, match="unknown estimator"):
        model.nll(x0, estimators=["nope"])
