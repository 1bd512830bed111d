"""ReMDM's remasking sampler: its step law by enumeration on a toy, its schedules' known values, the
same law under both draws, MDLM's sampler at eta = 0, every masked family, its records and refusals."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
import torch
from click.testing import CliRunner

from harness.cli import main
from harness.errors import PrimebenchError
from harness.models import family_class, family_names
from harness.sampling import generate
from harness.sampling.ancestral import time_grid
from harness.sampling.remdm import DEFAULT_ETA, RemaskSettings, _step_law
from tests.toys import tiny

C, L, T = 2, 3, 10
MASKED = [n for n in family_names() if "remdm" in family_class(n).samplers]


def test_schedules_known_values():
    """sigma of each schedule at hand-computed points (alpha_t = 1 - t on the linear schedule)."""
    cap = RemaskSettings("cap", 0.2).checked()
    assert _step_law(cap, 0.5, 0.4, 0.5, 0.4) == pytest.approx((0.5, 0.6, 0.2))  # min(0.2, 0.4 / 0.5)
    assert _step_law(cap, 0.2, 0.1, 0.2, 0.1)[2] == pytest.approx(0.1 / 0.8)  # the cap (1 - a_s) / a_t binds
    assert _step_law(cap, 1.0, 0.9, 1.0, 0.9)[2] == pytest.approx(0.2)  # alpha_t = 0: eta
    rescale = RemaskSettings("rescale", 0.5).checked()
    assert _step_law(rescale, 0.2, 0.1, 0.2, 0.1)[2] == pytest.approx(0.5 * 0.1 / 0.8)
    assert _step_law(rescale, 0.8, 0.7, 0.8, 0.7)[2] == pytest.approx(0.5)  # sigma_max = min(1, .7 / .2) = 1
    loop = RemaskSettings("loop", 0.3, t_on=0.7, t_off=0.2, alpha_on=0.6).checked()
    assert _step_law(loop, 0.9, 0.8, 0.9, 0.8) == pytest.approx((0.2, 0.4, 0.0))  # alpha = (1 - t) .6 / .3
    assert _step_law(loop, 0.5, 0.4, 0.5, 0.4) == pytest.approx((0.6, 0.6, 0.3))  # the loop: alpha_on, eta
    assert _step_law(loop, 0.2, 0.1, 0.2, 0.1) == pytest.approx((0.6, 0.8, 0.0))  # 1 - alpha = 2 t
    assert RemaskSettings("cap").checked().eta == DEFAULT_ETA["cap"]


def _exact_law(model, remask: RemaskSettings) -> dict[tuple[int, ...], float]:
    """The law of the final row, enumerated over the (C + 1)^L states of the chain: a decoded token is
    remasked with probability sigma; a masked one is revealed with r = (a_s - (1 - sigma) a_t) / (1 - a_t),
    its token drawn from the model's distribution given the state, and stays masked otherwise."""
    grid = time_grid(T)
    m = model.schedule.mask_prob(grid)
    mask = model.mask_id
    law = {(mask,) * L: 1.0}
    for k in range(1, T + 1):
        alpha_t, alpha_s, sigma = _step_law(remask, float(grid[k - 1]), float(grid[k]), float(m[k - 1]), float(m[k]))
        r = min(1.0, max(0.0, (alpha_s - (1 - sigma) * alpha_t) / (1 - alpha_t)))
        nxt: dict[tuple[int, ...], float] = {}
        for state, mass in law.items():
            z = torch.tensor([state])
            with torch.no_grad():
                probs = model.log_probs(z, torch.tensor([float(grid[k - 1])])).double().exp()[0]
            options = []
            for i, v in enumerate(state):
                if v == mask:
                    options.append([(c, r * float(probs[i, c])) for c in range(C)] + [(mask, 1 - r)])
                else:
                    options.append([(v, 1 - sigma), (mask, sigma)])
            for combo in itertools.product(*options):
                w = math.prod(p for _, p in combo)
                if w > 0:
                    key = tuple(v for v, _ in combo)
                    nxt[key] = nxt.get(key, 0.0) + mass * w
        law = nxt
    assert all(mask not in s for s in law) and sum(law.values()) == pytest.approx(1.0)
    return law


def _empirical(model, remask, draw, n=20000, seed=0) -> dict[tuple[int, ...], float]:
    out = generate(model, "remdm", num_samples=n, batch_size=n, steps=T, generator=seed, draw=draw, remask=remask)
    counts = Counter(tuple(row) for row in out.tokens.tolist())
    return {k: v / n for k, v in counts.items()}


def _tv(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


@pytest.mark.parametrize(
    "remask",
    [RemaskSettings("cap", 0.5), RemaskSettings("rescale", 0.8), RemaskSettings("loop", 0.3, 0.7, 0.2, 0.6)],
    ids=["cap", "rescale", "loop"],
)
def test_both_draws_follow_the_enumerated_law(remask):
    model = tiny("mdlm", C=C, L=L, schedule="linear", seed=1, std=1.0)
    exact = _exact_law(model, remask.checked())
    for draw in ("two-stage", "joint"):
        # 20000 draws over 8 outcomes: the total variation's noise is about 0.008; the law at eta = 0 is
        # 0.06 to 0.07 away from these, so remasking that were not drawn as stated would fail
        assert _tv(_empirical(model, remask, draw), exact) < 0.03, draw


def test_conf_has_the_same_law_under_both_draws():
    model = tiny("mdlm", C=C, L=L, schedule="linear", seed=2, std=1.0)
    remask = RemaskSettings("conf")
    assert _tv(_empirical(model, remask, "two-stage"), _empirical(model, remask, "joint", seed=1)) < 0.04


def test_eta_zero_is_mdlms_ancestral_sampler_token_for_token():
    model = tiny("mdlm", C=7, L=12, seed=3)
    for schedule in ("cap", "rescale"):
        remdm = generate(
            model, "remdm", num_samples=6, steps=16, generator=5, remask={"schedule": schedule, "eta": 0.0}
        )
        ancestral = generate(model, "ancestral", num_samples=6, steps=16, generator=5)
        assert torch.equal(remdm.tokens, ancestral.tokens) and torch.equal(remdm.nfe, ancestral.nfe)
        assert remdm.stats["remasked"] == 0


@pytest.mark.parametrize("family", MASKED)
def test_every_masked_family_samples_with_remasking(family):
    keys = {"block_size": 4} if "block_size" in family_class(family).config_class.__dataclass_fields__ else {}
    model = tiny(family, C=9, L=8, **keys)
    prefix = torch.tensor([[1, 2, 3]])
    out = generate(model, "remdm", num_samples=8, steps=8, generator=0, prefix=prefix, remask={"eta": 0.2})
    assert out.tokens.shape == (8, 8) and int(out.tokens.max()) < 9
    assert bool((out.tokens[:, :3] == prefix).all())  # a prefix is never remasked
    assert out.stats["remasked"] > 0 and out.protocol["remask"]["eta"] == 0.2
    again = generate(model, "remdm", num_samples=8, steps=8, generator=0, prefix=prefix, remask={"eta": 0.2})
    assert torch.equal(out.tokens, again.tokens)
    uncached = generate(
        model, "remdm", num_samples=8, steps=8, generator=0, prefix=prefix, remask={"eta": 0.2}, cache=False
    )
    assert torch.equal(out.tokens, uncached.tokens) and bool((uncached.nfe >= out.nfe).all())


def test_refusals_name_the_setting():
    model = tiny("mdlm", C=5, L=6)
    with pytest.raises(PrimebenchError, match="apply to the remdm sampler"):
        generate(model, "ancestral", num_samples=1, remask={"eta": 0.1})
    with pytest.raises(PrimebenchError, match="unknown remasking schedule"):
        generate(model, "remdm", num_samples=1, remask={"schedule": "sometimes"})
    with pytest.raises(PrimebenchError, match="eta must lie"):
        generate(model, "remdm", num_samples=1, remask={"eta": 1.5})
    with pytest.raises(PrimebenchError, match="takes no eta"):
        generate(model, "remdm", num_samples=1, remask={"schedule": "conf", "eta": 0.1})
    with pytest.raises(PrimebenchError, match="above"):
        generate(model, "remdm", num_samples=1, remask={"schedule": "loop", "eta": 0.5})
    for name in family_names():
        if "remdm" not in family_class(name).samplers:
            with pytest.raises(PrimebenchError, match="does not support"):
                generate(tiny(name, C=5, L=6), "remdm", num_samples=1)


def test_genppl_records_remasking_and_sweeps_eta(trained, tmp_path):
    runner = CliRunner()
    ckpt, judge = str(trained("mdlm")), f"arm:{trained('arm')}"
    common = ["--samples", "4", "--steps", "16", "--judge", judge, "--no-mauve"]
    res = runner.invoke(
        main,
        ["eval", "genppl", ckpt, "--sampler", "remdm", "--remask-schedule", "rescale", "--remask-eta", "0.1",
         *common, "--out", str(tmp_path / "one")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    import json

    record = json.loads(next((tmp_path / "one").glob("genppl-*.json")).read_text())
    assert record["protocol"]["sampler"] == "remdm"
    assert record["protocol"]["remask"] == {
        "schedule": "rescale",
        "eta": 0.1,
        "t_on": None,
        "t_off": None,
        "alpha_on": None,
    }
    res = runner.invoke(
        main,
        ["eval", "genppl", ckpt, "--sampler", "remdm", "--sweep", "eta=0,0.2", *common, "--out", str(tmp_path / "s")],
    )
    assert res.exit_code == 0, res.output
    points = sorted(
        json.loads(p.read_text())["protocol"]["remask"]["eta"]
        for p in (tmp_path / "s").glob("genppl-*.json")
        if "matched" not in p.name
    )
    assert points == [0.0, 0.2]
    bad = runner.invoke(main, ["eval", "genppl", ckpt, "--remask-eta", "0.1", *common])
    assert bad.exit_code != 0 and "remdm" in bad.output
