"""MDM-Prime as a model family: ell = 1 is MDLM, the estimators against enumeration, carry-over.

Reference numbers come from ``prime.bounds`` enumerating all 2^(L*ell) mask patterns of the model's
own network (``Prime.denoiser()``), on tiny time-independent models with random weights
(normal, std 0.2) so that every check could fail.
"""

from __future__ import annotations

import json

import pytest
import torch

from harness.errors import ConfigError
from harness.models import build_model
from prime.bounds import (
    exact_nll,
    subtoken_bound,
    subtoken_log_marginals,
    subtoken_nll_terms,
    token_joint_nll_terms,
    token_joint_objective,
)
from tests.toys import randomize

SIZES = dict(d_model=24, n_layers=1, n_heads=2)  # d_model divisible by ell = 1, 2, 3


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def prime(C: int, L: int, ell: int, seed: int, **kwargs):
    return randomize(build_model("prime", vocab_size=C, seq_len=L, ell=ell, **SIZES, **kwargs), seed)


def denoiser64(model):
    """``model.denoiser()`` with float64 logits, for enumeration."""
    call = model.denoiser()
    return lambda y_t: call(y_t).double()


def pooled_nll(model, x0: torch.Tensor, *, copies: int, num_samples: int, seed: int, estimator: str, **kwargs):
    """Mean (B,) and standard error (B,) of ``copies`` independent estimates of each row of x0."""
    B = x0.shape[0]
    (res,) = model.nll(
        x0.repeat_interleave(copies, 0), estimators=[estimator], num_samples=num_samples, generator=_gen(seed), **kwargs
    )
    nats = res.nats.view(B, copies).mean(1)
    stderr = (res.stderr.view(B, copies) ** 2).sum(1).sqrt() / copies
    return nats, stderr, res


# ----------------------------------------------------------------------------------------------
# ell = 1: Prime is MDLM
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("time_conditioning", [False, True])
def test_ell_one_is_mdlm(time_conditioning):
    C, L = 11, 6
    kw = dict(vocab_size=C, seq_len=L, time_conditioning=time_conditioning, **SIZES)
    mdlm = randomize(build_model("mdlm", **kw), seed=0)
    p = build_model("prime", ell=1, **kw)
    assert sorted(p.state_dict()) == sorted(mdlm.state_dict())
    p.load_state_dict(mdlm.state_dict())  # strict: same keys and shapes
    p.eval()
    assert p.base == C and p.mask_id == mdlm.mask_id == C

    x0 = torch.randint(0, C, (4, L), generator=_gen(1))
    z_t = torch.where(torch.rand(4, L, generator=_gen(2)) < 0.5, torch.full_like(x0, C), x0)
    t = torch.rand(4, generator=_gen(3))
    with torch.no_grad():
        want = mdlm.log_probs(z_t, t)
        got = p.log_probs(z_t[..., None], t)
    assert torch.equal(got, want)
    assert torch.isfinite(want[z_t == C]).all()  # masked positions: a full distribution

    mask = torch.ones(4, L, dtype=torch.long)
    mask[2, 4:] = 0
    with torch.no_grad():
        for seed in range(3):
            a = mdlm.loss(x0, generator=_gen(10 + seed), attention_mask=mask)
            b = p.loss(x0, generator=_gen(10 + seed), attention_mask=mask)
            assert torch.equal(a, b)
    samplers = ["t"] if time_conditioning else ["t", "n"]
    for sampler in samplers:
        want = mdlm.nll(x0, num_samples=3, generator=_gen(20), attention_mask=mask, time_sampler=sampler)
        for estimator in ("subtoken", "token_joint"):
            (got,) = p.nll(
                x0, estimators=[estimator], num_samples=3, generator=_gen(20), attention_mask=mask, time_sampler=sampler
            )
            assert torch.equal(got.nats, want.nats), (sampler, estimator)
            assert torch.equal(got.stderr, want.stderr) and torch.equal(got.tokens, want.tokens)


# ----------------------------------------------------------------------------------------------
# Estimators against enumeration on tiny time-independent models
# ----------------------------------------------------------------------------------------------

CASES = [(5, 2, 3), (7, 2, 4), (6, 3, 2), (7, 1, 5)]  # (C, ell, L); L * ell <= 8


@pytest.mark.parametrize("C, ell, L", CASES)
def test_subtoken_bound_is_above_the_exact_likelihood(C, ell, L):
    p = prime(C, L, ell, seed=C + L)
    x0 = torch.randint(0, C, (3, L), generator=_gen(ell))
    with torch.no_grad():
        exact = exact_nll(denoiser64(p), x0, C=C, ell=ell)
        sub = subtoken_bound(denoiser64(p), x0, C=C, ell=ell)
        tok = token_joint_objective(denoiser64(p), x0, C=C, ell=ell)
    assert (exact > 0).all()
    assert (sub >= exact - 1e-9).all(), (sub, exact)
    assert (sub - exact).max() > 1e-4
    if ell == 1:
        assert torch.allclose(tok, sub, atol=1e-9)
    else:  # sub-tokens of a token are dependent under a random network
        assert (tok - sub).abs().max() > 1e-4


@pytest.mark.parametrize("C, ell, L", CASES[:3])
@pytest.mark.parametrize("estimator", ["subtoken", "token_joint"])
def test_monte_carlo_nll_agrees_with_enumeration(C, ell, L, estimator):
    p = prime(C, L, ell, seed=C + L)
    x0 = torch.randint(0, C, (3, L), generator=_gen(ell))
    objective = subtoken_bound if estimator == "subtoken" else token_joint_objective
    with torch.no_grad():
        exact = objective(denoiser64(p), x0, C=C, ell=ell)
    nats, stderr, res = pooled_nll(p, x0, copies=200, num_samples=8, seed=7, estimator=estimator, time_sampler="n")
    assert res.kind == ("bound" if estimator == "subtoken" else "paper-objective")
    assert res.tokens.tolist() == [float(L)] * res.nats.numel()  # per token, not per sub-token
    assert ((nats - exact).abs() < 4 * stderr).all(), (nats, exact, stderr)
    # MDLM's time sampler (t in [1e-3, 1]) carries an O(1e-3) relative bias.
    nats_t, stderr_t, _ = pooled_nll(p, x0, copies=200, num_samples=8, seed=8, estimator=estimator, time_sampler="t")
    assert ((nats_t - exact).abs() < 4 * stderr_t + 5e-3 * exact).all(), (nats_t, exact, stderr_t)


# ----------------------------------------------------------------------------------------------
# Carry-over parameterisation
# ----------------------------------------------------------------------------------------------


def test_carry_over_gives_invalid_codes_nothing():
    C, ell, L = 7, 2, 4  # base 3: codes 7 (21) and 8 (22) are invalid
    p = prime(C, L, ell, seed=1)
    m = p.mask_id
    assert (p.base, m) == (3, 3)
    z_t = torch.tensor([[[2, m], [m, m], [m, 2], [1, 0]]])
    with torch.no_grad():
        lp = p.log_probs(z_t)  # (1, L, C)
    assert lp.shape == (1, L, C)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(1, L), atol=1e-6)
    assert lp[0, 0, 6].item() == 0.0 and torch.isinf(lp[0, 0, :6]).all()  # "2 m": only 20 = 6 is valid
    assert torch.isfinite(lp[0, 1]).all()  # all masked: every valid code
    assert torch.isinf(lp[0, 2, [0, 1, 3, 4, 6]]).all() and torch.isfinite(lp[0, 2, [2, 5]]).all()
    assert lp[0, 3, 3].item() == 0.0  # fully revealed "1 0" = 3
    marg = subtoken_log_marginals(lp.double(), base=p.base, ell=ell)  # (1, L, ell, base)
    assert torch.isinf(marg[0, 0, 1, 1:]).all()  # after leading 2 only digit 0 is valid
    assert torch.isinf(marg[0, 1, 0, 2]) == torch.tensor(False)  # leading 2 possible when all masked
    assert torch.allclose(marg.exp().sum(-1), torch.ones(1, L, ell, dtype=torch.float64))


def test_without_carry_over_the_softmax_is_over_all_classes():
    C, ell, L = 7, 2, 4
    p = prime(C, L, ell, seed=2, carry_over=False)
    m = p.mask_id
    z_t = torch.tensor([[[2, m], [m, m], [m, 2], [1, 0]]])
    with torch.no_grad():
        lp = p.log_probs(z_t)
        want = torch.log_softmax(p.backbone(z_t), dim=-1)
    assert torch.equal(lp, want)
    assert torch.isfinite(lp).all()  # even a revealed token spreads mass over all C classes


@pytest.mark.parametrize("carry_over", [True, False])
def test_a_fully_unmasked_token_contributes_zero(carry_over):
    C, ell, L = 7, 2, 3
    p = prime(C, L, ell, seed=3, carry_over=carry_over)
    x0 = torch.tensor([[5, 6, 2]])
    y0 = p.encode(x0)
    masked = torch.tensor([[[False, False], [True, False], [True, True]]])
    z_t = torch.where(masked, torch.full_like(y0, p.mask_id), y0)
    with torch.no_grad():
        lp = p.log_probs(z_t).double()
    sub = subtoken_nll_terms(lp, y0, masked, p.base, ell)
    tok = token_joint_nll_terms(lp, x0, masked)
    assert sub[0, 0].item() == 0.0 and tok[0, 0].item() == 0.0
    assert (sub[0, 1:] > 0).all() and (tok[0, 1:] > 0).all()
    if carry_over:
        assert lp[0, 0, 5].item() == 0.0


# ----------------------------------------------------------------------------------------------
# Labels, gradients, errors
# ----------------------------------------------------------------------------------------------


def test_estimator_kinds_and_unknown_estimator():
    p = prime(6, 3, 2, seed=4)
    x0 = torch.tensor([[0, 5, 3]])
    assert p.nll(x0, num_samples=2, generator=_gen(0)).kind == "bound"
    kinds = [r.kind for r in p.nll(x0, estimators=["token_joint", "subtoken"], num_samples=2, generator=_gen(0))]
    assert kinds == ["paper-objective", "bound"]
    with pytest.raises(ValueError, match="token_joint"):
        p.nll(x0, estimators=["joint"], num_samples=2)
    with pytest.raises(ValueError, match="empty"):
        p.nll(x0, estimators=[], num_samples=2)


@pytest.mark.parametrize("carry_over", [True, False])
def test_loss_gradients_are_finite_when_C_is_not_a_power_of_the_base(carry_over):
    C, ell, L = 257, 2, 8  # base 17: 289 codes, 32 invalid
    p = build_model("prime", vocab_size=C, seq_len=L, ell=ell, carry_over=carry_over, **SIZES)
    randomize(p, seed=5).train()
    x0 = torch.randint(0, C, (4, L), generator=_gen(6))
    x0[0, :] = C - 1  # the largest valid code, next to the invalid ones
    loss = p.loss(x0, generator=_gen(7))
    assert torch.isfinite(loss) and loss > 0
    loss.backward()
    for name, param in p.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name


def test_prime_errors():
    with pytest.raises(ConfigError, match="divisible by ell=3"):
        build_model("prime", vocab_size=10, seq_len=4, ell=3, d_model=16, n_layers=1, n_heads=2)
    p = prime(10, 4, 2, seed=8)
    with pytest.raises(ValueError, match="vocabulary"):
        p.nll(torch.tensor([[0, 10, 1, 2]]), num_samples=2)
    with pytest.raises(ValueError, match="seq_len=4"):
        p.loss(torch.zeros(1, 5, dtype=torch.long))


def test_token_joint_without_carry_over_scores_visible_tokens_as_the_official_code():
    """Official MDM-Prime: -log p_theta(x0) * weight at every position; without carry-over a fully
    visible token's log-probability is not 0, so dropping it (as we once did) changes the number."""
    model = randomize(
        build_model("prime", vocab_size=11, seq_len=6, ell=2, carry_over=False, d_model=16, n_layers=1, n_heads=2),
        seed=3,
        std=0.5,
    )
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, 11, (3, 6), generator=g)
    units = model.units(x0)
    masked = torch.rand(units.shape, generator=g) < 0.4
    z_t = torch.where(masked, torch.full_like(units, model.mask_id), units)
    with torch.no_grad():
        log_p = model.log_probs(z_t, None)
    scored = torch.ones(3, 6, dtype=torch.bool)
    official = -log_p.gather(-1, x0[..., None]).squeeze(-1)  # every position
    terms = model.unit_terms(log_p, x0, units, masked, "token_joint", scored)
    assert torch.allclose(terms, official)
    visible = ~masked.any(-1)
    assert visible.any() and (official[visible] > 0).all()
    # positions that are not scored (context, padding) still contribute nothing
    scored[:, :2] = False
    assert (model.unit_terms(log_p, x0, units, masked & scored[..., None], "token_joint", scored)[:, :2] == 0).all()
    # with carry-over a visible token is one-hot: its term is 0 with or without the rule
    model.set_carry_over(True)
    with torch.no_grad():
        log_p = model.log_probs(z_t, None)
    terms = model.unit_terms(log_p, x0, units, masked, "token_joint", torch.ones(3, 6, dtype=torch.bool))
    assert torch.allclose(terms[visible], torch.zeros_like(terms[visible]), atol=1e-6)


def test_carry_over_override_at_evaluation_is_recorded(trained):
    from harness.errors import PrimebenchError
    from harness.evaluation.ppl import run_ppl

    base = run_ppl(trained("prime"), max_rows=4, estimator="both")
    off = run_ppl(trained("prime"), max_rows=4, estimator="both", carry_over=False)
    assert base["protocol"]["carry_over"] is True and "carry_over_trained" not in base["protocol"]
    assert off["protocol"]["carry_over"] is False and off["protocol"]["carry_over_trained"] is True
    assert off["metrics"]["nll_token_joint"]["value"] != base["metrics"]["nll_token_joint"]["value"]
    with pytest.raises(PrimebenchError, match="applies to Prime"):
        run_ppl(trained("mdlm"), max_rows=2, carry_over=True)


def test_carry_over_and_weights_flags_reach_zeroshot_and_the_precision_audit(trained, tmp_path):
    from click.testing import CliRunner

    from harness.cli import main

    runner = CliRunner()
    res = runner.invoke(
        main,
        [
            "eval",
            "zeroshot",
            str(trained("prime")),
            "--tasks",
            "wiki_lastword",
            "--max-rows",
            "2",
            "-K",
            "1",
            "--no-carry-over",
            "--no-ema",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    protocol = json.loads(res.output[res.output.index("{") :])["protocol"]
    assert protocol["carry_over"] is False and protocol["carry_over_trained"] is True and protocol["weights"] == "raw"
    assert "never masked or scored" in protocol["bos"]
    res = runner.invoke(
        main,
        [
            "audit",
            "precision",
            str(trained("prime")),
            "--steps",
            "4",
            "--samples",
            "2",
            "--batch-size",
            "2",
            "--no-controls",
            "--no-carry-over",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    protocol = json.loads(res.output[res.output.index("{") :])["protocol"]
    assert protocol["carry_over"] is False and protocol["carry_over_trained"] is True and protocol["weights"] == "EMA"
    res = runner.invoke(main, ["eval", "zeroshot", str(trained("mdlm")), "--tasks", "wiki_lastword", "--carry-over"])
    assert res.exit_code != 0 and "applies to Prime" in res.output


def test_estimator_both_shares_one_forward_pass_and_equals_separate_runs(trained):
    import harness
    from harness.evaluation.ppl import run_ppl

    model, _, _ = harness.load(trained("prime"))
    calls = []
    original = model.backbone.forward
    model.backbone.forward = lambda *a, **k: (calls.append(1), original(*a, **k))[1]
    x0 = torch.randint(0, model.vocab_size, (4, model.seq_len), generator=torch.Generator().manual_seed(0))
    both = model.nll(
        x0, estimators=["subtoken", "token_joint"], num_samples=2, generator=torch.Generator().manual_seed(1)
    )
    assert len(calls) == 2  # one forward pass per corruption, for both numbers
    for est, got in zip(["subtoken", "token_joint"], both):
        (alone,) = model.nll(x0, estimators=[est], num_samples=2, generator=torch.Generator().manual_seed(1))
        assert torch.allclose(got.nats, alone.nats, rtol=1e-6) and got.kind == alone.kind
    rec_both = run_ppl(trained("prime"), max_rows=4, estimator="both")
    rec_sub = run_ppl(trained("prime"), max_rows=4)
    assert rec_both["metrics"]["nll"]["value"] == pytest.approx(rec_sub["metrics"]["nll"]["value"], rel=1e-9)
