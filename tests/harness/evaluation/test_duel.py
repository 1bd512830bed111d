"""DUEL (``eval ppl --estimator duel``): an exact likelihood under a deterministic unmasking policy,
proven by enumeration on toy models of every masked family; its labels, refusals and records."""

from __future__ import annotations

import csv
import io
import itertools
import math

import pytest
import torch
from click.testing import CliRunner

from harness.cli import main
from harness.errors import InputError
from harness.evaluation.duel import POLICIES, Policy, duel_nll
from harness.evaluation.ppl import run_ppl
from harness.models import build_model, family_class, family_names
from tests.toys import randomize

C, L = 3, 4
ALL_ROWS = torch.tensor(list(itertools.product(range(C), repeat=L)))
MASKED = [
    (name, {k: (2 if k == "block_size" else v) for k, v in keys.items()})
    for name in family_names()
    if family_class(name).forward_process == "absorbing"
    for keys in family_class(name).bench_variants()
]
IDS = [name + "".join(f"-{k}={v}" for k, v in keys.items()) for name, keys in MASKED]
VARIANTS = [Policy(name) for name in POLICIES] + [Policy("confidence", tokens=2), Policy("margin", block=2)]


def toy(name: str, keys: dict, seed: int = 0):
    model = build_model(name, vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2, **keys)
    return randomize(model, seed, 0.5)


@pytest.mark.parametrize(("name", "keys"), MASKED, ids=IDS)
def test_every_policy_defines_a_distribution_over_rows(name, keys):
    """exp(-DUEL) summed over all C^L rows is 1: the policy's sampler is a normalised model, so the
    number is an exact likelihood (not a bound, not an estimate)."""
    model = toy(name, keys)
    for policy in VARIANTS:
        nll, passes = duel_nll(model, ALL_ROWS, policy)
        assert nll.kind == "exact-policy" and bool((nll.stderr == 0).all())
        total = float(torch.exp(-nll.nats).sum())
        if model.may_decode_invalid_codes:  # mass on codes >= C is a sample that is no row
            assert 0.5 < total <= 1 + 1e-5, (policy, total)
        else:
            assert total == pytest.approx(1.0, abs=1e-5), policy
        assert int(passes.max()) == math.ceil(L / policy.tokens)


def _conditional(model, x, visible) -> torch.Tensor:
    """(B, L) log p(x^i | the tokens of ``visible``), every other position masked."""
    z = torch.where(model.unit_mask(~visible), model.mask_id, model.units(x))
    t = (~visible).sum(-1).float() / x.shape[1]
    log_p = model.log_probs(z, t, None, x).double()
    return log_p.gather(-1, x[..., None]).squeeze(-1)


@pytest.mark.parametrize(("name", "keys"), MASKED, ids=IDS)
def test_left_to_right_is_the_sum_of_the_models_conditionals_in_order(name, keys):
    model = toy(name, keys, seed=1)
    x = ALL_ROWS[[5, 40, 77]]
    expected = torch.zeros(3, dtype=torch.float64)
    for i in range(L):
        visible = torch.zeros_like(x, dtype=torch.bool)
        visible[:, :i] = True
        expected -= _conditional(model, x, visible)[:, i]
    nll, _ = duel_nll(model, x, Policy("left-to-right"))
    assert torch.allclose(nll.nats, expected, atol=1e-9)


def test_confidence_follows_the_most_confident_position_step_by_step():
    """An independent re-derivation of the greedy-confidence path: at each step, reveal the masked
    position whose distribution has the largest max-probability; score its true token."""
    model = toy("mdlm", {}, seed=2)
    x = ALL_ROWS[[3, 50]]
    for b in range(2):
        row = x[b : b + 1]
        visible = torch.zeros_like(row, dtype=torch.bool)
        total = 0.0
        for _ in range(L):
            z = torch.where(~visible, model.mask_id, row)
            log_p = model.log_probs(z, (~visible).sum(-1).float() / L).double()
            conf = log_p.max(-1).values.masked_fill(visible, -math.inf)
            i = int(conf.argmax())
            total -= float(log_p[0, i, row[0, i]].detach())
            visible[0, i] = True
        nll, _ = duel_nll(model, row, Policy("confidence"))
        assert float(nll.nats[0]) == pytest.approx(total, abs=1e-9)


def test_the_average_over_all_orders_is_the_time_agnostic_models_nelbo():
    """The paper's relation: averaged over all L! orders (one token per step), DUEL is the any-order
    autoregressive form of the NELBO, equal to the continuous-time NELBO of a network that does not
    read the time, here enumerated over every masked set: sum_m E_{|M|=m}[(1/m) sum_{i in M} -log p]."""
    candidates = (toy(name, keys) for name, keys in MASKED)
    model = next(m for m in candidates if m.units_per_token == 1 and m.sampling_block_size is None)
    assert not model.time_conditioning
    x = ALL_ROWS[[7, 61]]
    orders = list(itertools.permutations(range(L)))
    average = torch.zeros(2, dtype=torch.float64)
    for perm in orders:
        rank = torch.empty(L, dtype=torch.long)
        rank[list(perm)] = torch.arange(L)
        average += duel_nll(model, x, Policy("left-to-right"), order=rank.expand(2, L))[0].nats / len(orders)
    nelbo = torch.zeros(2, dtype=torch.float64)
    for m in range(1, L + 1):
        subsets = list(itertools.combinations(range(L), m))
        for subset in subsets:
            visible = torch.ones_like(x, dtype=torch.bool)
            visible[:, list(subset)] = False
            nelbo -= (_conditional(model, x, visible) * ~visible).sum(-1) / m / len(subsets)
    assert torch.allclose(average, nelbo, atol=1e-9)
    # and the family's own Monte-Carlo NELBO estimates the same number
    g = torch.Generator().manual_seed(0)
    mc = model.nll(x, num_samples=4000, generator=g, time_sampler="n")
    assert torch.all((mc.nats - nelbo).abs() < 5 * mc.stderr + 1e-6)


def test_context_positions_are_given_and_only_the_corruptible_ones_scored():
    model = toy("mdlm", {}, seed=3)
    x = ALL_ROWS[[11, 70]]
    corruptible = torch.tensor([[False, False, True, True]] * 2)
    nll, passes = duel_nll(model, x, Policy("left-to-right"), corruptible=corruptible)
    assert nll.tokens.tolist() == [2.0, 2.0] and passes.tolist() == [2, 2]
    visible = ~corruptible
    first = _conditional(model, x, visible)[:, 2]
    visible[:, 2] = True
    second = _conditional(model, x, visible)[:, 3]
    assert torch.allclose(nll.nats, -(first + second), atol=1e-9)


def test_rows_do_not_depend_on_their_batch():
    model = toy("mdlm", {}, seed=4)
    x = ALL_ROWS[torch.randperm(len(ALL_ROWS), generator=torch.Generator().manual_seed(0))[:9]]
    whole, _ = duel_nll(model, x, Policy("margin", tokens=2))
    parts = torch.cat([duel_nll(model, x[i : i + 2], Policy("margin", tokens=2))[0].nats for i in range(0, 9, 2)])
    assert torch.allclose(whole.nats, parts, atol=1e-9)


def test_refusals_name_the_problem():
    with pytest.raises(InputError, match="not a likelihood"):
        Policy("oracle").check()
    with pytest.raises(InputError, match="unknown unmasking policy"):
        Policy("random").check()
    for name in family_names():
        if family_class(name).forward_process != "absorbing":
            with pytest.raises(InputError, match="absorbing forward process"):
                duel_nll(toy(name, {}), ALL_ROWS[:2], Policy())
    blocked = next(n for n, keys in MASKED if "block_size" in keys)
    with pytest.raises(InputError, match="does not divide"):
        duel_nll(toy(blocked, {"block_size": 4}), ALL_ROWS[:2], Policy(block=3))


def test_eval_ppl_records_duel_in_its_own_column(trained, tmp_path):
    rec = run_ppl(trained("mdlm"), estimator="duel", policy="left-to-right", policy_tokens=8, max_rows=3)
    assert set(rec["metrics"]) == {"nll_duel", "ppl_duel"}
    assert rec["metrics"]["nll_duel"]["kind"] == "exact-policy" and rec["metrics"]["nll_duel"]["stderr"] == 0.0
    duel = rec["protocol"]["duel"]
    assert duel["name"] == "left-to-right" and duel["tokens_per_step"] == 8 and duel["forward_passes_per_row"] == 8
    assert rec["protocol"]["mc_samples"] is None and rec["protocol"]["time_sampler"] is None
    bound = tmp_path / "bound.json"
    exact = tmp_path / "duel.json"
    runner = CliRunner()
    ckpt = str(trained("mdlm"))
    assert runner.invoke(main, ["eval", "ppl", ckpt, "--max-rows", "3", "--out", str(bound)]).exit_code == 0
    res = runner.invoke(
        main, ["eval", "ppl", ckpt, "--estimator", "duel", "--policy", "margin", "--max-rows", "3", "--out", str(exact)]
    )
    assert res.exit_code == 0, res.output
    assert "DUEL" in res.output and "margin" in res.output
    table = runner.invoke(main, ["table", str(bound), str(exact), "--format", "csv"])
    assert table.exit_code == 0, table.output
    models = [row for row in csv.DictReader(io.StringIO(table.output)) if row["family"] != "reference"]
    assert len(models) == 2
    for row in models:
        # never the two kinds in one column: the bound's row has no DUEL number, DUEL's row no bound
        assert (row["ppl"] == "") != (row["ppl_duel"] == "")
        assert row["ppl_kind"] in ("", "bound") and row["ppl_duel_kind"] in ("", "exact-policy")
    text = runner.invoke(main, ["table", str(bound), str(exact), "--format", "md"]).output
    assert "PPL, DUEL under its policy§" in text and "policy=margin" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--estimator", "duel", "--policy", "oracle"], "not a likelihood"),
        (["--policy", "margin"], "add --estimator duel"),
        (["--estimator", "duel", "--mc-samples", "4"], "exact"),
    ],
)
def test_cli_refusals_exit_non_zero(trained, args, message):
    res = CliRunner().invoke(main, ["eval", "ppl", str(trained("mdlm")), "--max-rows", "2", *args])
    assert res.exit_code != 0 and message in res.output


def test_arm_is_refused_by_the_cli(trained):
    res = CliRunner().invoke(main, ["eval", "ppl", str(trained("arm")), "--estimator", "duel", "--max-rows", "2"])
    assert res.exit_code != 0 and "already exact" in res.output
