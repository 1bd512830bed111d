"""DUO: the duality map alpha(g) against closed forms and the argmax it describes; outside the
curriculum DUO is UDLM number for number; the curriculum's relaxed loss and its temperature."""

from __future__ import annotations

import math

import pytest
import torch

from baselines.duo import DUO, duality_alpha, gaussian_latent
from harness.errors import ConfigError
from harness.models import build_model
from tests.toys import randomize

C, L = 5, 6


def _phi(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


@pytest.mark.parametrize("g", [-4.0, -3.0, -1.75, 0.5])
def test_two_categories_have_a_closed_form(g):
    """C = 2: argmax picks x0 when r + e1 > e2, so p = Phi(r / sqrt 2) and alpha = 2 p - 1."""
    alpha, _ = duality_alpha(torch.tensor([g], dtype=torch.float64), 2)
    r = math.exp(-g / 2)
    assert float(alpha) == pytest.approx(2 * _phi(r / math.sqrt(2)) - 1, abs=1e-13)


@pytest.mark.parametrize("categories", [2, 50, 1000, 50257])
def test_derivative_is_the_derivative(categories):
    g = torch.linspace(-5, -1, 7, dtype=torch.float64)
    _, d = duality_alpha(g, categories)
    h = 1e-5
    fd = (duality_alpha(g + h, categories)[0] - duality_alpha(g - h, categories)[0]) / (2 * h)
    torch.testing.assert_close(d, fd, rtol=1e-6, atol=1e-9)
    assert bool((d <= 0).all())  # more noise (larger g) keeps fewer tokens


def test_alpha_runs_from_clean_to_uniform():
    alpha, _ = duality_alpha(torch.tensor([-30.0, 0.0, 30.0], dtype=torch.float64), 100)
    assert float(alpha[0]) == pytest.approx(1.0, abs=1e-12)
    assert 0 < float(alpha[1]) < 1
    assert float(alpha[2]) == pytest.approx(0.0, abs=1e-5)


def test_argmax_of_the_gaussian_latent_is_the_uniform_state_marginal():
    """The duality itself: P(argmax w_t = x0) = alpha + (1 - alpha) / C, every other token equally likely."""
    gamma = torch.tensor([-2.5])
    n = 200_000
    x0 = torch.full((1, n), 2)
    w = gaussian_latent(x0, gamma, C, torch.Generator().manual_seed(0))
    counts = torch.bincount(w.argmax(-1).flatten(), minlength=C).double() / n
    alpha = float(duality_alpha(gamma.double(), C)[0])
    want = torch.full((C,), (1 - alpha) / C, dtype=torch.float64)
    want[2] += alpha
    se = (want * (1 - want) / n).sqrt()
    assert bool(((counts - want).abs() < 5 * se).all()), (counts, want)


@pytest.fixture(scope="module")
def pair():
    kw = dict(vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2)
    udlm = randomize(build_model("udlm", **kw), 0, 0.2).eval()
    duo = build_model("duo", curriculum_start=2, curriculum_end=10, **kw).eval()
    duo.load_state_dict(udlm.state_dict())
    return udlm, duo


def test_outside_the_curriculum_duo_is_udlm(pair):
    udlm, duo = pair
    x0 = torch.randint(C, (4, L), generator=torch.Generator().manual_seed(1))
    a = udlm.nll(x0, num_samples=3, generator=torch.Generator().manual_seed(2))
    b = duo.nll(x0, num_samples=3, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(a.nats, b.nats, rtol=0, atol=0)
    assert b.kind == "bound"
    duo.train()
    duo.begin_train_step(10, 20)  # curriculum over: UDLM's loss, draw for draw
    udlm.train()
    try:
        la = udlm.loss(x0, generator=torch.Generator().manual_seed(3))
        lb = duo.loss(x0, generator=torch.Generator().manual_seed(3))
    finally:
        udlm.eval()
        duo.eval()
    assert float(la.detach()) == float(lb.detach())


def test_the_curriculum_loss_is_relaxed_and_trains(pair):
    _, duo = pair
    x0 = torch.randint(C, (4, L), generator=torch.Generator().manual_seed(1))
    duo.train()
    try:
        duo.begin_train_step(3, 20)
        assert duo.in_curriculum()
        relaxed = duo.loss(x0, generator=torch.Generator().manual_seed(3))
        relaxed.backward()
        grads = [p.grad for p in duo.parameters() if p.grad is not None]
        duo.zero_grad()
        duo.begin_train_step(12, 20)
        plain = duo.loss(x0, generator=torch.Generator().manual_seed(3))
    finally:
        duo.eval()
    assert torch.isfinite(relaxed) and grads and all(torch.isfinite(g).all() for g in grads)
    assert float(relaxed.detach()) != float(plain.detach())
    assert not duo.in_curriculum()  # evaluation mode never uses the curriculum


def test_inverse_temperature_follows_dUOs_schedule(pair):
    _, duo = pair  # start 2, end 10, log10 tau from -1 to -2
    assert duo.inverse_temperature(0) == pytest.approx(10.0)
    assert duo.inverse_temperature(2) == pytest.approx(10.0)
    assert duo.inverse_temperature(6) == pytest.approx(10**1.5)
    assert duo.inverse_temperature(10) == pytest.approx(100.0)


def test_a_one_hot_soft_input_embeds_as_its_token(pair):
    udlm, _ = pair
    ids = torch.randint(C, (2, L), generator=torch.Generator().manual_seed(4))
    t = torch.full((2,), 0.5)
    with torch.no_grad():
        hard = udlm.backbone(ids, t)
        soft = udlm.backbone(torch.nn.functional.one_hot(ids, C).float(), t)
    torch.testing.assert_close(hard, soft)


def test_bad_curriculum_settings_are_refused():
    with pytest.raises(ConfigError, match="curriculum_start"):
        DUO(vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2, curriculum_start=5, curriculum_end=2)
    with pytest.raises(ConfigError, match="curriculum_start"):
        DUO(vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2, curriculum_start=-1, curriculum_end=0)
    off = DUO(vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2, curriculum_start=220, curriculum_end=0)
    off.train()
    off.begin_train_step(0, 10)
    assert not off.in_curriculum()  # end 0 turns it off, whatever start the preset carried
    with pytest.raises(ConfigError, match="gamma_min"):
        DUO(vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2, gamma_min=-1.0, gamma_max=-2.0)


def _distiller(**kw):
    m = build_model("duo", vocab_size=C, seq_len=L, d_model=16, n_layers=1, n_heads=2, distill=True, **kw)
    return randomize(m, 0, 0.2).train()


def test_distillation_steps_and_teacher_refresh():
    duo = _distiller(distill_T=64, update_teacher_every=10)
    assert duo.distill_dt(0) == 1 / 64 and duo.distill_dt(9) == 1 / 64 and duo.distill_dt(25) == 4 / 64
    assert duo.teacher is None
    duo.begin_train_step(3, 100)  # no teacher yet: made from the student
    first = duo.teacher
    assert first is not None and "_teacher" not in dict(duo.named_modules())
    assert not any(k.startswith("_teacher") for k in duo.state_dict())  # never saved
    with torch.no_grad():
        next(duo.backbone.parameters()).add_(1.0)
    duo.begin_train_step(4, 100)
    assert duo.teacher is first  # kept between refreshes
    duo.begin_train_step(10, 100)
    assert duo.teacher is not first
    torch.testing.assert_close(next(duo.teacher.parameters()), next(duo.backbone.parameters()))
    assert not any(p.requires_grad for p in duo.teacher.parameters())


@pytest.mark.parametrize("kind", ["kl-bwd", "kl-fwd"])
def test_distillation_loss_is_a_divergence_that_trains_the_student_only(kind):
    x0 = torch.randint(C, (4, L), generator=torch.Generator().manual_seed(1))
    same = _distiller(distill_T=10**12, distill_loss=kind)  # dt ~ 0: the teacher sees the student's input
    same.begin_train_step(0, 10)
    zero = same.loss(x0, generator=torch.Generator().manual_seed(2))
    assert abs(float(zero.detach())) < 1e-6
    duo = _distiller(distill_T=4, distill_loss=kind)
    duo.begin_train_step(0, 10)
    with torch.no_grad():  # a teacher that differs from the student
        for p in duo.teacher.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    loss = duo.loss(x0, generator=torch.Generator().manual_seed(2))
    loss.backward()
    assert float(loss.detach()) > 0
    assert all(p.grad is None for p in duo.teacher.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in duo.backbone.parameters())
    duo.eval()  # evaluation is UDLM's bound, never the distillation loss
    assert duo.nll(x0, num_samples=1, generator=torch.Generator().manual_seed(0)).kind == "bound"


def test_distillation_settings_are_checked():
    with pytest.raises(ConfigError, match="distill_loss"):
        _distiller(distill_loss="mse")
    with pytest.raises(ConfigError, match="exclude each other"):
        _distiller(curriculum_end=5)


def test_a_distillation_run_starts_from_a_trained_duo(tmp_path):
    from harness.config import load_config
    from harness.training import train

    base = train(
        load_config("tiny/duo", ["train.steps=2", "train.eval_every=2", "train.save_every=2"]),
        tmp_path / "a",
        quiet=True,
    )
    over = [
        "train.steps=2",
        "train.eval_every=2",
        "train.save_every=2",
        "model.curriculum_end=0",
    ]
    cfg = load_config("tiny/duo", over + ["model.distill=true", f"train.init_from={base.out}", "model.distill_T=8"])
    result = train(cfg, tmp_path / "b", quiet=True)
    assert torch.isfinite(torch.tensor(result.train_loss))
    with pytest.raises(ConfigError, match="holds a duo model"):
        train(load_config("tiny/udlm", ["train.steps=1", f"train.init_from={base.out}"]), tmp_path / "c", quiet=True)
    with pytest.raises(ConfigError, match="not a checkpoint folder"):
        train(
            load_config("tiny/duo", ["train.steps=1", f"train.init_from={tmp_path / 'none'}"]),
            tmp_path / "d",
            quiet=True,
        )
