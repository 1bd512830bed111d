"""Models on pixels: every family trains on image:digits, reports bits/dim, samples a grid."""

import math

import pytest
import torch

from harness import load
from harness.config import load_config
from harness.errors import ConfigError
from harness.evaluation.ppl import run_ppl
from harness.training import train

FAST = [
    "train.steps=4",
    "train.batch_size=8",
    "train.eval_every=4",
    "train.save_every=4",
    "train.eval_batches=1",
    "train.sample_grid=4",
    "model.d_model=32",
]
KINDS = {"arm": "exact", "mdlm": "bound", "masked": "bound", "prime": "bound"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    return {f: train(load_config(f"tiny-digits/{f}", FAST), root / f, quiet=True).out for f in KINDS}


@pytest.mark.parametrize("family", sorted(KINDS))
def test_every_family_trains_on_digits_and_reports_bpd(runs, family):
    out = runs[family]
    assert (out / "samples.png").is_file()
    model, tokenizer, cfg = load(out)
    assert tokenizer.spec == "pixels:17" and tokenizer.bos_id is None and model.vocab_size == 17
    assert cfg.model.image_shape == "8x8x1" and cfg.model.positions == "image"
    if family != "arm":
        assert model.schedule.name == "polynomial:3"
    rec = run_ppl(out, max_rows=10, batch_size=4)
    bpd, nll = rec["metrics"]["bpd"], rec["metrics"]["nll"]
    assert bpd["kind"] == KINDS[family] and bpd["units"] == "bits/dim"
    assert bpd["value"] == pytest.approx(nll["value"] / math.log(2))
    p = rec["protocol"]
    assert (p["dataset"], p["split"], p["height"], p["width"], p["channels"], p["levels"]) == (
        "digits",
        "test",
        8,
        8,
        1,
        17,
    )
    assert p["tokens_scored"] == 10 * 64  # every dimension, the ARM's first pixel included


def test_prime_paper_objective_on_images(runs):
    rec = run_ppl(runs["prime"], max_rows=6, estimator="both", mc_samples=2)
    assert rec["metrics"]["bpd"]["kind"] == "bound"
    assert rec["metrics"]["bpd_token_joint"]["kind"] == "paper-objective"
    assert rec["metrics"]["bpd"]["stderr"] > 0 and rec["protocol"]["base"] == 5


def test_arm_image_nll_is_exact_over_all_pixels(runs):
    model, _, _ = load(runs["arm"])
    x = torch.randint(17, (3, 64), generator=torch.Generator().manual_seed(0))
    res = model.nll(x)
    assert res.kind == "exact" and res.tokens.tolist() == [64.0] * 3
    # chain rule by hand: log_probs prepends the start id, position i is p(x^i | x^{<i})
    log_p = model.log_probs(x[:, :-1])  # (3, 64, 17)
    manual = -log_p.gather(-1, x[..., None]).squeeze(-1).double().sum(-1)
    torch.testing.assert_close(res.nats, manual, rtol=1e-5, atol=1e-4)


def test_prime_on_digits_never_samples_an_invalid_code(runs):
    from harness.sampling import generate

    model, _, _ = load(runs["prime"])
    assert model.base == 5 and model.base**model.ell > 17  # 8 invalid codes exist
    for sampler in ("ancestral", "first-hitting"):
        out = generate(
            model, sampler, num_samples=32, batch_size=32, generator=1, steps=8 if sampler == "ancestral" else None
        )
        assert out.tokens.min() >= 0 and out.tokens.max() < 17


def test_arm_samples_without_a_prefix(runs):
    from harness.sampling import generate

    model, _, _ = load(runs["arm"])
    out = generate(model, num_samples=2, generator=0)
    assert out.tokens.shape == (2, 64) and int(out.nfe[0]) == 64


def test_seq_len_mismatch_names_the_value(tmp_path):
    with pytest.raises(ConfigError, match="data.seq_len=64"):
        train(load_config("tiny-digits/mdlm", FAST + ["data.seq_len=32"]), tmp_path / "x", quiet=True)


def test_arm_on_images_requires_start_token_and_known_split(tmp_path):
    with pytest.raises(ConfigError, match="start_token"):
        train(load_config("tiny-digits/arm", FAST + ["model.start_token=false"]), tmp_path / "a", quiet=True)
    with pytest.raises(ConfigError, match="valid_split"):
        train(load_config("tiny-digits/mdlm", FAST + ["data.valid_split=validation"]), tmp_path / "b", quiet=True)


def test_pixels_tokenizer_round_trip(tmp_path):
    from harness.data import get_tokenizer, load_tokenizer
    from harness.errors import DataError

    tok = get_tokenizer("pixels:17")
    assert tok.vocab_size == 17 and tok.mask_id == 17 and (tok.bos_id, tok.eos_id, tok.pad_id) == (None, None, None)
    assert tok.encode("0 5 16") == [0, 5, 16] and tok.decode([0, 5, 16]) == "0 5 16"
    tok.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again.spec == "pixels:17" and again.vocab_size == 17
    with pytest.raises(DataError):
        tok.encode("17")
    with pytest.raises(DataError, match="levels"):
        get_tokenizer("pixels")


def test_image_positions_break_permutation_symmetry():
    """Without a causal mask, rope-only attention sees relative offsets; the image positions add
    absolute (row, col) information, so moving a pixel within a row vs to the next row differs."""
    from harness.models import build_model

    torch.manual_seed(0)
    kw = dict(vocab_size=17, seq_len=64, d_model=32, n_layers=1, n_heads=2, schedule="polynomial:3")
    rope = build_model("mdlm", **kw)
    image = build_model("mdlm", positions="image", image_shape="8x8x1", **kw)
    image.load_state_dict(rope.state_dict(), strict=False)  # same weights except the new tables
    for p in image.backbone.final.parameters():
        torch.nn.init.normal_(p, std=0.1)
    for p in rope.backbone.final.parameters():
        torch.nn.init.normal_(p, std=0.1)
    rope.backbone.final.load_state_dict(image.backbone.final.state_dict())
    x = torch.full((1, 64), 17)
    x[0, 5] = 3
    assert not torch.allclose(rope.log_probs(x), image.log_probs(x))
    # a token embedding alone cannot tell row 0 from row 1; the row table can
    pos = image.backbone.positions(64)
    assert not torch.allclose(pos[0], pos[8]) and not torch.allclose(pos[0], pos[1])
    torch.testing.assert_close(pos[0] - pos[8], pos[1] - pos[9])  # additive: row and column separate


def test_save_grid_shape(tmp_path):
    from PIL import Image

    from harness.images import save_grid

    imgs = torch.randint(0, 256, (5, 3, 4, 6), dtype=torch.uint8)
    path = save_grid(imgs, tmp_path / "g.png", nrow=3)
    with Image.open(path) as im:
        assert im.size == (3 * 7 + 1, 2 * 5 + 1) and im.mode == "RGB"
    with pytest.raises(ValueError):
        save_grid(imgs.float(), tmp_path / "bad.png")
