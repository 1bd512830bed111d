import math

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.reproduce.seeds import (
    base_name,
    differences,
    seed_difference_table,
    seed_name,
    seed_overrides,
    seed_table,
    summarise,
)
from harness.views import render


def _ppl(folder, seed, bound, se, joint=None, ref=6.0):
    metrics = {"nll": {"value": bound, "stderr": se, "kind": "bound"}}
    if joint is not None:
        metrics["nll_token_joint"] = {"value": joint, "stderr": se, "kind": "paper-objective"}
    return {
        "evaluation": "ppl",
        "model": {"name": "small", "checkpoint": f"runs/small/{folder}", "config": {"seed": seed}},
        "metrics": metrics,
        "references": {"unigram": {"nll": {"value": ref, "kind": "exact"}}},
    }


def test_seed_zero_keeps_the_preset_name_and_config():
    assert seed_name("mdlm", 0) == "mdlm" and seed_overrides(0) == []
    assert seed_name("mdlm", 3) == "mdlm-seed3" and seed_overrides(3) == ["seed=3"]
    assert base_name("mdlm-seed3") == "mdlm" and base_name("prime4") == "prime4" and base_name("x-seed0") == "x-seed0"
    with pytest.raises(ValueError):
        seed_name("mdlm", -1)


def test_summary_by_hand():
    records = [
        _ppl("mdlm", 0, 5.0, 0.03),
        _ppl("mdlm-seed1", 1, 5.2, 0.04),
        _ppl("mdlm-seed2", 2, 5.3, 0.0),
        _ppl("prime4", 0, 5.5, 0.02, joint=5.0),
    ]
    mdlm, prime = summarise(records)
    assert (mdlm.model, mdlm.seeds, prime.model, prime.n) == ("mdlm", (0, 1, 2), "prime4", 1)
    assert mdlm.mean == pytest.approx((5.0 + 5.2 + 5.3) / 3)
    sd = math.sqrt(((5.0 - 15.5 / 3) ** 2 + (5.2 - 15.5 / 3) ** 2 + (5.3 - 15.5 / 3) ** 2) / 2)
    assert mdlm.spread == pytest.approx(sd) and mdlm.seed_error == pytest.approx(sd / math.sqrt(3))
    assert mdlm.mc_error == pytest.approx(0.05 / 3)  # sqrt(0.03^2 + 0.04^2) / 3
    assert mdlm.gap == pytest.approx(6.0 - 15.5 / 3)
    assert prime.spread is None and prime.seed_error is None
    (objective,) = summarise(records, "nll_token_joint")
    assert objective.model == "prime4" and objective.mean == 5.0


def test_two_records_for_one_seed_are_refused():
    with pytest.raises(ValueError, match="two records for one seed"):
        summarise([_ppl("mdlm", 0, 5.0, 0.1), _ppl("mdlm", 0, 5.1, 0.1)])


def test_a_difference_exceeds_the_spread_only_when_it_is_large_against_the_seeds():
    a = [_ppl("mdlm", 0, 5.00, 0.01), _ppl("mdlm-seed1", 1, 5.02, 0.01)]
    near = [_ppl("masked", 0, 5.01, 0.01), _ppl("masked-seed1", 1, 5.05, 0.01)]
    far = [_ppl("prime4", 0, 5.50, 0.01), _ppl("prime4-seed1", 1, 5.54, 0.01)]
    d_near, d_far, d_between = differences(summarise(a + near + far))
    se = math.sqrt(0.02**2 / 2 / 2 + 0.04**2 / 2 / 2)  # s^2 = (range^2 / 2) for two seeds
    assert d_near.stderr == pytest.approx(se) and d_near.exceeds_spread is False
    assert d_far.value == pytest.approx(5.01 - 5.52) and d_far.exceeds_spread is True
    single = differences(summarise([_ppl("mdlm", 0, 5.0, 0.1), _ppl("prime4", 0, 6.0, 0.1)]))
    assert single[0].stderr is None and single[0].exceeds_spread is None


def test_seed_tables_render_means_spreads_and_verdicts():
    records = [
        _ppl("mdlm", 0, 5.0, 0.01),
        _ppl("mdlm-seed1", 1, 5.02, 0.01),
        _ppl("prime4", 0, 5.5, 0.01, joint=5.1),
        _ppl("prime4-seed1", 1, 5.54, 0.01, joint=5.12),
    ]
    text = render(seed_table(records), "md")
    assert "<=5.0100 ± 0.0100" in text and "5.1100† ± 0.0100" in text and "5.0000 .. 5.0200" in text
    assert "0.9900" in text  # the unigram reference 6.0 minus the mean 5.01
    diff = render(seed_difference_table(records), "md")
    assert "yes" in diff and "rough screen" in diff
    one = render(seed_table([_ppl("mdlm", 0, 5.0, 0.03)]), "md")
    assert "(1 seed)" in one and "<=5.0000 ± 0.0300" in one  # one seed: the Monte-Carlo error


def test_small_configs_add_seeds_without_changing_seed_zero():
    from harness.config import load_config
    from harness.reproduce.small import MODELS, small_configs
    from harness.reproduce.stages import config_hash

    cfgs = small_configs(2)
    assert list(cfgs) == list(MODELS) + [f"{m}-seed1" for m in MODELS]
    assert config_hash(cfgs["mdlm"].to_dict()) == config_hash(load_config("small/mdlm").to_dict())
    assert cfgs["mdlm-seed1"].seed == 1 and cfgs["mdlm-seed1"].model == cfgs["mdlm"].model
    assert small_configs(1, steps=3)["arm"].train.steps == 3
    with pytest.raises(ValueError):
        small_configs(0)


def test_reproduce_small_refuses_zero_seeds():
    res = CliRunner().invoke(main, ["reproduce", "small", "--seeds", "0", "--out", "unused"])
    assert res.exit_code != 0 and "--seeds" in res.output
