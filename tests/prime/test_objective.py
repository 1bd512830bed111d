"""Prime's training objective (``model.objective``): ``bound`` trains on the valid sub-token bound
through the terms ``eval ppl`` scores with; ``paper`` on the token-joint L_vb.

Known answers come from ``prime.bounds`` enumerating all 2^(L*ell) mask patterns of the model's own
network, on tiny time-independent models with random weights, so every check could fail.
"""

from __future__ import annotations

import math

import pytest
import torch

from harness.config import load_config
from harness.errors import ConfigError
from harness.models import build_model, label_of
from prime.bounds import subtoken_bound, token_joint_objective
from prime.subtokens import encode
from prime.terms import fused_prime_terms, restricted_log_probs, subtoken_log_marginals
from tests.toys import randomize

SIZES = dict(d_model=24, n_layers=1, n_heads=2)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def prime(C: int, L: int, ell: int, seed: int, std: float = 0.2, **kwargs):
    return randomize(build_model("prime", vocab_size=C, seq_len=L, ell=ell, **SIZES, **kwargs), seed, std)


def exact_per_token(model, x0: torch.Tensor, which) -> float:
    """Mean over the rows of x0 of the enumerated objective ``which``, nats per token."""
    call = model.denoiser()
    with torch.no_grad():
        values = which(lambda y: call(y).double(), x0, C=model.vocab_size, ell=model.ell)
    return float(values.mean()) / x0.shape[1]


def expected_loss(model, x0: torch.Tensor, copies: int, seed: int) -> tuple[float, float]:
    """The training loss averaged over ``copies`` independent corruptions of every row (one batch,
    stratified over it), with the standard error of that mean from 8 independent batches."""
    values = []
    with torch.no_grad():
        for k in range(8):
            values.append(float(model.loss(x0.repeat(copies // 8, 1), generator=_gen(seed + k))))
    v = torch.tensor(values, dtype=torch.float64)
    return float(v.mean()), float(v.std() / len(values) ** 0.5)


@pytest.mark.parametrize("objective, which", [("bound", subtoken_bound), ("paper", token_joint_objective)])
def test_the_training_loss_is_an_estimate_of_its_enumerated_objective(objective, which):
    """E[loss] (nats/token) equals the enumerated objective it names, to Monte Carlo and the
    O(1e-3) truncation of t at 1e-3 that ``eval ppl`` shares."""
    model = prime(6, 2, 2, seed=3, std=0.6, objective=objective)  # strongly dependent sub-tokens
    x0 = torch.tensor([[0, 5], [3, 1], [4, 4], [2, 0]])
    want = exact_per_token(model, x0, which)
    got, se = expected_loss(model, x0, copies=8192, seed=11)
    assert abs(got - want) < 4 * se + 5e-3, (objective, got, want, se)
    other = exact_per_token(model, x0, token_joint_objective if objective == "bound" else subtoken_bound)
    assert abs(other - want) > 8 * se + 5e-3  # the check tells the two objectives apart


def test_one_gradient_step_on_the_bound_lowers_the_exact_bound():
    """The expected gradient of the ``bound`` objective (averaged over many corruptions) is a
    descent direction of the enumerated sub-token bound."""
    model = prime(6, 2, 2, seed=4, objective="bound").train()
    x0 = torch.tensor([[0, 5], [3, 1], [4, 4], [2, 0], [1, 1], [5, 2]])
    before = exact_per_token(model, x0, subtoken_bound)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [torch.zeros_like(p) for p in params]
    for k in range(8):
        loss = model.loss(x0.repeat(256, 1), generator=_gen(100 + k))
        for acc, g in zip(grads, torch.autograd.grad(loss, params)):
            acc += g / 8
    assert all(torch.isfinite(g).all() for g in grads)
    with torch.no_grad():
        for p, g in zip(params, grads):
            p -= 0.05 * g
    after = exact_per_token(model, x0, subtoken_bound)
    assert after < before - 1e-3, (before, after)


def _reference_subtoken_terms(logits, y_t, y0, masked, *, C, base, ell, carry_over):
    """The sub-token terms from the (B, L, C) restricted log-softmax and its marginals, float64."""
    log_p = restricted_log_probs(logits.double(), y_t, C=C, base=base, ell=ell, carry_over=carry_over)
    marg = subtoken_log_marginals(log_p, base=base, ell=ell).gather(-1, y0[..., None]).squeeze(-1)
    return torch.where(masked, -marg, torch.zeros_like(marg)).sum(-1)


@pytest.mark.parametrize("carry_over", [True, False])
@pytest.mark.parametrize("spread", [1.0, 300.0])  # 300: float32 marginals underflow, the exact path runs
def test_fused_subtoken_terms_have_the_reference_values_and_finite_gradients(carry_over, spread):
    C, ell, B, L = 20, 3, 4, 5  # base 3: 27 codes, 7 invalid
    base = 3
    g = _gen(1)
    x0 = torch.randint(0, C, (B, L), generator=g)
    y0 = encode(x0, base, ell)
    masked = torch.rand(B, L, ell, generator=g) < 0.6
    y_t = torch.where(masked, torch.full_like(y0, base), y0)
    logits = (spread * torch.randn(B, L, C, generator=g)).requires_grad_()
    (got,) = fused_prime_terms(
        logits, y_t, x0, y0, masked, C=C, base=base, ell=ell, carry_over=carry_over, estimators=["subtoken"]
    )
    want = _reference_subtoken_terms(logits, y_t, y0, masked, C=C, base=base, ell=ell, carry_over=carry_over)
    torch.testing.assert_close(got.double(), want.detach(), rtol=1e-5, atol=1e-3)
    (grad,) = torch.autograd.grad(got.sum(), logits)
    assert torch.isfinite(grad).all()
    # the reference gradient, from the same float64 formula written with the true digit's codes only
    ref = logits.detach().double().requires_grad_()
    padded = torch.nn.functional.pad(ref, (0, base**ell - C), value=float("-inf"))
    codes = encode(torch.arange(base**ell), base, ell)
    keep_v = torch.ones(B, L, base**ell, dtype=torch.bool)
    if carry_over:
        for j in range(ell):
            keep_v &= (codes[:, j] == y_t[..., j, None]) | (y_t[..., j, None] == base)
    padded = padded.masked_fill(~keep_v, float("-inf"))
    total = torch.logsumexp(padded, -1)
    terms = torch.zeros(B, L, dtype=torch.float64)
    for j in range(ell):
        picked = padded.masked_fill(codes[:, j] != y0[..., j, None], float("-inf"))
        terms = terms + torch.where(masked[..., j], total - torch.logsumexp(picked, -1), torch.zeros_like(total))
    (ref_grad,) = torch.autograd.grad(terms.sum(), ref)
    torch.testing.assert_close(grad.double(), ref_grad, rtol=1e-4, atol=1e-5)


def test_objective_is_a_config_key_named_in_labels_protocol_and_hparams():
    cfg = load_config("tiny/prime", ["model.objective=bound"])
    assert cfg.model.objective == "bound"
    assert label_of(cfg.model) == "prime, ell=2, bound-trained"
    assert label_of(load_config("tiny/prime").model) == "prime, ell=2"
    model = prime(6, 2, 2, seed=0, objective="bound")
    assert model.protocol()["objective"] == "bound" and model.hparams["objective"] == "bound"
    assert model.train_estimator == "subtoken"
    paper = prime(6, 2, 2, seed=0)
    assert paper.protocol()["objective"] == "paper" and "objective" not in paper.hparams
    assert paper.train_estimator == "token_joint"
    with pytest.raises(ConfigError, match="model.objective"):
        load_config("tiny/prime", ["model.objective=elbo"])


def test_a_bound_trained_checkpoint_names_its_objective_in_training_and_evaluation(trained):
    """`tiny/prime-bound` trains (finite, lower than at the start), and every evaluation record says so."""
    import json

    from click.testing import CliRunner

    from harness.cli import main
    from harness.evaluation.ppl import run_ppl

    run = trained("prime-bound")
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    losses = [row["loss"] for row in log if "loss" in row]
    assert all(math.isfinite(v) for v in losses) and min(losses[-5:]) < losses[0]
    assert "objective: bound" in (run / "config.yaml").read_text()
    rec = run_ppl(run, max_rows=4, estimator="both")
    assert rec["protocol"]["objective"] == "bound" and rec["model"]["label"] == "prime, ell=2, bound-trained"
    paper = run_ppl(trained("prime"), max_rows=4)
    assert paper["protocol"]["objective"] == "paper" and paper["model"]["label"] == "prime, ell=2"
    res = CliRunner().invoke(main, ["audit", "bound", str(run), "--max-rows", "4", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["protocol"]["objective"] == "bound"
