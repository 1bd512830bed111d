"""The baseline families (ARM, MDLM, time-agnostic masked) against known answers and invariants.

Reference numbers come from enumeration (``prime.bounds`` with ell = 1, where base = C and the
sub-token mask id is MDLM's mask id C), from an ARM scored prefix by prefix, and from closed forms
(Zheng et al. Prop. 3.1). Weights are random (normal, std 0.2) so that every check could fail.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from harness.models import build_model
from prime.bounds import exact_nll, subtoken_bound
from tests.toys import randomize

SIZES = dict(d_model=16, n_layers=1, n_heads=2)
FAMILIES = ["arm", "mdlm", "masked", "prime"]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def tokens_denoiser(model):
    """MDLM / masked network as a ``prime.bounds`` denoiser: y_t (B, L, 1) -> raw logits (B, L, C)."""

    def call(y_t: torch.Tensor) -> torch.Tensor:
        return model.backbone(y_t[..., 0]).double()

    return call


def pooled_nll(model, x0: torch.Tensor, *, copies: int, num_samples: int, seed: int, **kwargs):
    """Monte-Carlo NLL of each row of x0 (B, L) from ``copies`` independent replicas of it.

    The replicas run in one batch, so copies * num_samples draws cost num_samples forward passes.
    Returns the mean (B,) and its standard error (B,), and the kind.
    """
    B = x0.shape[0]
    res = model.nll(x0.repeat_interleave(copies, 0), num_samples=num_samples, generator=_gen(seed), **kwargs)
    nats = res.nats.view(B, copies).mean(1)
    stderr = (res.stderr.view(B, copies) ** 2).sum(1).sqrt() / copies
    return nats, stderr, res


def _pair(C: int, L: int, seed: int):
    """An MDLM and a masked model with the same random weights."""
    mdlm = randomize(build_model("mdlm", vocab_size=C, seq_len=L, **SIZES), seed)
    masked = build_model("masked", vocab_size=C, seq_len=L, **SIZES)
    masked.load_state_dict(mdlm.state_dict())
    return mdlm, masked.eval()


# ----------------------------------------------------------------------------------------------
# MDLM / masked: bound vs exact any-order likelihood, Monte Carlo vs enumeration
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("C, L, seed", [(5, 4, 0), (6, 6, 1), (7, 8, 2)])
def test_mdlm_bound_is_above_its_exact_likelihood(C, L, seed):
    mdlm, _ = _pair(C, L, seed)
    x0 = torch.randint(0, C, (3, L), generator=_gen(10 + seed))
    den = tokens_denoiser(mdlm)
    exact = exact_nll(den, x0, C=C, ell=1)
    bound = subtoken_bound(den, x0, C=C, ell=1)
    assert (exact > 0).all()
    assert (bound >= exact - 1e-9).all(), (bound, exact)
    assert (bound - exact).max() > 1e-4  # a non-trivial network: the bound is not tight


@pytest.mark.parametrize("family", ["mdlm", "masked"])
def test_monte_carlo_nll_agrees_with_enumeration(family):
    C, L = 6, 5
    mdlm, masked = _pair(C, L, seed=3)
    model = mdlm if family == "mdlm" else masked
    x0 = torch.randint(0, C, (3, L), generator=_gen(4))
    exact = subtoken_bound(tokens_denoiser(model), x0, C=C, ell=1)
    nats, stderr, res = pooled_nll(model, x0, copies=200, num_samples=8, seed=5, time_sampler="n")
    assert res.kind == "bound" and res.tokens.tolist() == [L] * 600
    assert (stderr > 0).all()
    z = (nats - exact) / stderr
    assert (z.abs() < 4).all(), (nats, exact, stderr)
    # MDLM's time sampler truncates t at eps = 1e-3 and draws t with density 1/(1 - eps): an
    # O(1e-3) relative bias on top of the Monte-Carlo error.
    nats_t, stderr_t, _ = pooled_nll(model, x0, copies=200, num_samples=8, seed=6, time_sampler="t")
    assert ((nats_t - exact).abs() < 4 * stderr_t + 5e-3 * exact).all(), (nats_t, exact, stderr_t)


def test_masked_loss_expectation_is_the_mdlm_nelbo():
    """Zheng et al. Prop. 3.1: E[masked loss] = MDLM's continuous-time NELBO per token.

    With a batch of R * L copies of one sequence the batch-stratified draw gives every mask count
    n = 1..L to exactly R rows, so E[loss] = (1/L) sum_n E_{|S| = n}[g(S)] / n with g(S) the summed
    masked cross-entropy; enumerated here over all subsets S with the model's own log_probs.
    """
    C, L = 5, 6
    mdlm, masked = _pair(C, L, seed=7)
    x = torch.randint(0, C, (1, L), generator=_gen(8))
    with torch.no_grad():
        nelbo = float(subtoken_bound(tokens_denoiser(mdlm), x, C=C, ell=1)[0]) / L  # nats per token
        subsets = [S for n in range(1, L + 1) for S in itertools.combinations(range(L), n)]
        z = x.repeat(len(subsets), 1)
        for r, S in enumerate(subsets):
            z[r, list(S)] = masked.mask_id
        true = masked.log_probs(z).double().gather(-1, x.expand_as(z)[..., None]).squeeze(-1)
        g = torch.where(z == masked.mask_id, -true, torch.zeros_like(true)).sum(-1)
        sizes = torch.tensor([len(S) for S in subsets])
        expected = sum(float(g[sizes == n].mean()) / n for n in range(1, L + 1)) / L
    assert expected == pytest.approx(nelbo, rel=1e-5)

    xb = x.expand(40 * L, L).contiguous()
    with torch.no_grad():
        losses = torch.tensor([float(masked.loss(xb, generator=_gen(100 + s))) for s in range(16)], dtype=torch.float64)
        mdlm_losses = torch.tensor(
            [float(mdlm.loss(xb, generator=_gen(100 + s))) for s in range(16)], dtype=torch.float64
        )
    se = float(losses.std() / math.sqrt(len(losses)))
    assert abs(float(losses.mean()) - nelbo) < 4 * se, (float(losses.mean()), nelbo, se)
    # MDLM's loss draws t instead of n: the same NELBO up to its O(1e-3) truncation bias.
    se_t = float(mdlm_losses.std() / math.sqrt(len(mdlm_losses)))
    assert abs(float(mdlm_losses.mean()) - nelbo) < 4 * se_t + 5e-3 * nelbo, (float(mdlm_losses.mean()), nelbo, se_t)


# ----------------------------------------------------------------------------------------------
# ARM: exact likelihood
# ----------------------------------------------------------------------------------------------


def test_arm_nll_is_the_sum_of_next_token_log_probs():
    C, L = 7, 6
    arm = randomize(build_model("arm", vocab_size=C, seq_len=L, **SIZES), seed=11)
    x0 = torch.randint(0, C, (3, L), generator=_gen(12))
    res = arm.nll(x0)
    assert res.kind == "exact" and res.tokens.tolist() == [L - 1] * 3
    assert torch.equal(res.stderr, torch.zeros(3, dtype=torch.float64))
    with torch.no_grad():
        for b in range(3):
            by_hand = 0.0
            for i in range(1, L):  # each prefix scored on its own: also checks causality
                lp = arm.log_probs(x0[b : b + 1, :i])  # (1, i, C); last row predicts x^i
                assert torch.allclose(lp.exp().sum(-1), torch.ones(1, i), atol=1e-5)
                by_hand -= float(lp[0, -1, x0[b, i]])
            assert float(res.nats[b]) == pytest.approx(by_hand, rel=1e-5)


def test_arm_nll_is_invariant_to_batch_and_padding():
    C, L = 7, 8
    arm = randomize(build_model("arm", vocab_size=C, seq_len=L, **SIZES), seed=13)
    x = torch.randint(0, C, (5, L), generator=_gen(14))
    alone = torch.cat([arm.nll(x[b : b + 1]).nats for b in range(5)])
    together = arm.nll(x).nats
    assert torch.allclose(alone, together, rtol=1e-6, atol=1e-6)
    # Row 0 truncated to 5 tokens equals row 0 padded to L with the tail masked out.
    short = arm.nll(x[:1, :5])
    mask = torch.ones(2, L, dtype=torch.long)
    mask[0, 5:] = 0
    padded = arm.nll(x[:2], attention_mask=mask)
    assert float(padded.nats[0]) == pytest.approx(float(short.nats[0]), rel=1e-6)
    assert padded.tokens.tolist() == [4.0, L - 1.0]


# ----------------------------------------------------------------------------------------------
# Every family: kinds, batch composition, gradients, errors
# ----------------------------------------------------------------------------------------------


def _model(family: str, C: int, L: int, seed: int):
    extra = dict(ell=2) if family == "prime" else {}
    return randomize(build_model(family, vocab_size=C, seq_len=L, **SIZES, **extra), seed)


def test_nll_kinds():
    C, L = 6, 4
    x0 = torch.randint(0, C, (2, L), generator=_gen(0))
    want = {"arm": "exact", "mdlm": "bound", "masked": "bound", "prime": "bound"}
    for family in FAMILIES:
        model = _model(family, C, L, seed=1)
        res = model.nll(x0, num_samples=2, generator=_gen(1))
        assert res.kind == want[family] == model.nll_kind, family
        assert res.nats.shape == (2,) and res.nats.dtype == torch.float64
    prime = _model("prime", C, L, seed=1)
    (joint,) = prime.nll(x0, estimators=["token_joint"], num_samples=2, generator=_gen(1))
    assert joint.kind == "paper-objective"


@pytest.mark.parametrize("family", ["mdlm", "masked", "prime"])
def test_nll_of_a_sequence_does_not_depend_on_the_rest_of_the_batch(family):
    """Sequence x[0] scored among copies of itself, or interleaved with four other sequences."""
    C, L = 6, 4
    model = _model(family, C, L, seed=21)
    x = torch.randint(0, C, (5, L), generator=_gen(22))
    alone, se_alone, _ = pooled_nll(model, x[:1], copies=64, num_samples=4, seed=23, time_sampler="n")
    mixed, se_mixed, _ = pooled_nll(model, x, copies=64, num_samples=4, seed=24, time_sampler="n")
    z = (alone[0] - mixed[0]) / torch.sqrt(se_alone[0] ** 2 + se_mixed[0] ** 2)
    assert abs(float(z)) < 4, (alone[0], mixed[0], se_alone[0], se_mixed[0])
    # ... and the whole batch result is the per-row results: row b of a batch of B rows.
    row = model.nll(x[2:3].repeat(64, 1), num_samples=4, generator=_gen(25), time_sampler="n")
    assert abs(float(row.nats.mean() - mixed[2])) < 4 * float(
        torch.sqrt(row.stderr.pow(2).sum() / 64**2 + se_mixed[2] ** 2)
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_loss_gradients_are_finite(family):
    C, L = (257, 8)  # 257 is not a power of Prime's base 17 (ell = 2): 32 invalid codes
    model = _model(family, C, L, seed=31).train()
    x0 = torch.randint(0, C, (4, L), generator=_gen(32))
    mask = torch.ones(4, L, dtype=torch.long)
    mask[1, 6:] = 0
    loss = model.loss(x0, generator=_gen(33), attention_mask=mask)
    assert torch.isfinite(loss) and loss > 0
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_bad_inputs_raise(family):
    C, L = 6, 4
    model = _model(family, C, L, seed=41)
    with pytest.raises(ValueError, match="vocabulary"):
        model.nll(torch.tensor([[0, 1, C, 2]]), num_samples=2)
    with pytest.raises(ValueError, match="vocabulary"):
        model.loss(torch.tensor([[0, 1, -1, 2]]))
    with pytest.raises(ValueError, match="seq_len=4"):
        model.nll(torch.zeros(1, L + 1, dtype=torch.long), num_samples=2)
    with pytest.raises(ValueError, match="seq_len=4"):
        model.loss(torch.zeros(1, L + 1, dtype=torch.long))


# ----------------------------------------------------------------------------------------------
# Training lowers the validation NLL (slow: a few hundred CPU steps per family)
# ----------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_training_lowers_validation_nll(family, tmp_path):
    import harness
    from harness.config import load_config
    from harness.data import get_corpus, get_packed
    from harness.evaluation.ppl import evaluate_nll
    from harness.models import model_from_config
    from harness.training import train

    cfg = load_config(f"tiny/{family}", ["train.steps=300", "train.eval_every=300", "train.save_every=300"])
    train(cfg, tmp_path / "run", quiet=True)
    model, tokenizer, cfg = harness.load(tmp_path / "run")
    d = cfg.data
    valid = get_packed(
        get_corpus(d.corpus),
        d.valid_split,
        tokenizer,
        seq_len=d.seq_len,
        wrap=d.wrap,
        eos_between_docs=d.eos_between_docs,
        remainder=d.remainder,
    )
    rows, mask = valid.input_ids[:32], valid.attention_mask[:32]
    torch.manual_seed(cfg.seed)
    untrained = model_from_config(cfg.model, vocab_size=model.vocab_size, seq_len=model.seq_len)
    (before,) = evaluate_nll(untrained, rows, mask, num_samples=4, seed=0)
    (after,) = evaluate_nll(model, rows, mask, num_samples=4, seed=0)
    assert after.nll < before.nll - 0.5, (family, before.nll, after.nll)
