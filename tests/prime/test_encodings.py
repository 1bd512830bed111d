"""MDM-Prime-v2's encodings as options of the Prime family: binary digits (base 2, ell = ceil(log2 C))
and index shuffling (a seeded permutation of the token ids, applied before encoding and stored with
the checkpoint)."""

from __future__ import annotations

import math

import pytest
import torch

import harness
from harness.config import load_config
from harness.errors import ConfigError, PrimebenchError
from harness.models import build_model, label_of
from prime.subtokens import binary_ell, decode, encode, subtoken_base, token_permutation
from prime.terms import restricted_padded_logits
from tests.toys import randomize

GPT2 = 50257


def test_binary_ell_is_ceil_log2_for_every_C_up_to_gpt2():
    for C in range(2, GPT2 + 1):
        ell = binary_ell(C)
        assert 2 ** (ell - 1) < C <= 2**ell
        assert subtoken_base(C, ell) == 2
    assert binary_ell(1) == binary_ell(2) == 1 and binary_ell(GPT2) == 16 and binary_ell(1000) == 10
    assert math.ceil(math.log2(GPT2)) == 16
    with pytest.raises(PrimebenchError):
        binary_ell(0)


@pytest.mark.parametrize("ell", range(1, 17))
def test_binary_codes_round_trip_for_every_token_of_every_C_up_to_gpt2(ell):
    """The digits of token x do not depend on C once ell is fixed, so every C with ceil(log2 C) = ell
    is covered by all 2^ell codes (2^16 = 65536 >= GPT-2's 50257)."""
    x = torch.arange(2**ell)
    y = encode(x, 2, ell)
    assert y.shape == (2**ell, ell) and int(y.min()) == 0 and int(y.max()) == 1
    assert torch.equal(decode(y, 2), x)
    assert torch.equal(y[:, -1], x % 2) and torch.equal(y[:, 0], x >> (ell - 1))  # most significant first


def _shuffled_binary(C: int, *, shuffle_seed: int):
    """A tiny shuffled binary Prime over C tokens (summed embeddings: any ell)."""
    sizes = dict(d_model=8, n_layers=1, n_heads=2)
    return build_model(
        "prime",
        vocab_size=C,
        seq_len=4,
        encoding="binary",
        embedding="sum",
        shuffle=True,
        shuffle_seed=shuffle_seed,
        **sizes,
    )


@pytest.mark.parametrize("C", [2, 3, 257, 1000, 1024, 1025, GPT2])
def test_shuffled_binary_codes_round_trip_through_the_family(C):
    model = _shuffled_binary(C, shuffle_seed=7)
    x = torch.arange(C)
    codes = model.codes(x)
    assert sorted(codes.tolist()) == list(range(C))  # a permutation of [0, C): codes >= C stay invalid
    assert C < 4 or not torch.equal(codes, x)
    assert torch.equal(model.tokens_of_codes(codes), x)
    y = model.sampler_units(x)
    assert y.shape == (C, binary_ell(C)) and torch.equal(decode(y, 2), codes)
    assert torch.equal(model.sampler_tokens(y), x) and not model.invalid_codes(y[None]).any()
    assert torch.equal(token_permutation(C, 7), codes)  # the seed alone reproduces it, on any machine


def test_carry_over_forbids_the_codes_binary_digits_can_spell_beyond_C():
    C = 1000  # 10 binary digits spell 1024 codes, 24 of them no token
    ell = binary_ell(C)
    y_t = torch.full((3, 1, ell), 2)  # everything masked
    y_t[1, 0, :5] = 1  # leading digits 11111: only codes 992..1023 agree, of which 992..999 are tokens
    padded = restricted_padded_logits(torch.zeros(3, 1, C), y_t, C=C, base=2, ell=ell)
    assert torch.isinf(padded[..., C:]).all()
    assert torch.isfinite(padded[1, 0]).sum() == 8 and torch.isfinite(padded[1, 0, 992:1000]).all()
    model = randomize(
        build_model(
            "prime", vocab_size=C, seq_len=6, encoding="binary", embedding="sum", d_model=16, n_layers=1, n_heads=2
        ),
        seed=1,
        std=1.0,
    )
    from harness.sampling import generate

    out = generate(model, num_samples=16, steps=8, generator=torch.Generator().manual_seed(0))
    tokens = out.tokens if hasattr(out, "tokens") else out
    assert int(tokens.max()) < C


def _pair(C: int, L: int, seed: int, **kwargs):
    """A plain and a shuffled model that are one function up to the relabelling: the shuffled
    network's output row for token x is the plain network's row for code_of[x] (the heads index
    tokens, the digits spell codes)."""
    sizes = dict(d_model=16, n_layers=1, n_heads=2, embedding="sum", encoding="binary", **kwargs)
    plain = randomize(build_model("prime", vocab_size=C, seq_len=L, **sizes), seed, std=0.5)
    shuffled = build_model("prime", vocab_size=C, seq_len=L, shuffle=True, shuffle_seed=3, **sizes)
    state = {k: v.clone() for k, v in plain.state_dict().items()}
    for key in ("backbone.final.linear.weight", "backbone.final.linear.bias"):
        state[key] = state[key][shuffled.code_of]
    missing = shuffled.load_state_dict(state, strict=False)
    assert missing.missing_keys == ["code_of"] and not missing.unexpected_keys
    return plain, shuffled.eval()


def test_a_shuffled_model_is_the_plain_model_on_permuted_ids():
    """Shuffling relabels the tokens: the shuffled model's law of token x is the plain model's law of
    code_of[x], for the joint, both estimators and the training loss, on the same draws."""
    C, L = 37, 5
    plain, shuffled = _pair(C, L, seed=2)
    x = torch.randint(0, C, (6, L), generator=torch.Generator().manual_seed(1))
    codes = shuffled.codes(x)
    y = shuffled.units(x)
    assert torch.equal(y, plain.units(codes))
    z = torch.where(torch.rand(y.shape, generator=torch.Generator().manual_seed(2)) < 0.5, shuffled.base, y)
    torch.testing.assert_close(shuffled.log_probs(z), plain.log_probs(z).index_select(-1, shuffled.code_of))
    for estimators in (["subtoken"], ["token_joint"]):
        a = shuffled.nll(x, estimators=estimators, num_samples=3, generator=torch.Generator().manual_seed(4))[0]
        b = plain.nll(codes, estimators=estimators, num_samples=3, generator=torch.Generator().manual_seed(4))[0]
        torch.testing.assert_close(a.nats, b.nats)
    a = shuffled.loss(x, generator=torch.Generator().manual_seed(5))
    b = plain.loss(codes, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(a, b)
    # the bound audit's denoiser speaks codes
    torch.testing.assert_close(shuffled.denoiser()(z), plain.denoiser()(z))


@pytest.mark.parametrize("draw", ["two-stage", "joint"])
def test_a_shuffled_model_samples_its_own_law(draw):
    """One ancestral step from the all-masked state draws each token from the model's joint (token
    space), whatever the shuffle: empirical frequencies against exp(log_probs), 4.5 sigma."""
    from harness.sampling import generate

    _, shuffled = _pair(8, 1, seed=4)
    n = 6000
    out = generate(
        shuffled, num_samples=n, batch_size=n, steps=1, draw=draw, generator=torch.Generator().manual_seed(9)
    )
    counts = torch.bincount(out.tokens[:, 0], minlength=8).double()
    p = shuffled.log_probs(torch.full((1, 1, shuffled.ell), shuffled.base)).exp()[0, 0].double()
    assert (p - counts / n).abs().max() < 4.5 * (p * (1 - p) / n).sqrt().max()
    assert not torch.allclose(p, torch.full_like(p, 1 / 8), atol=0.02)  # a law the check can tell apart


def test_the_stored_permutation_is_used_and_checked_on_load(tmp_path):
    C = 37
    model = _shuffled_binary(C, shuffle_seed=1)
    other = _shuffled_binary(C, shuffle_seed=2)
    other.load_state_dict(model.state_dict())  # the stored permutation wins over the config's seed
    assert torch.equal(other.code_of, model.code_of) and torch.equal(other.token_of, model.token_of)
    bad = dict(model.state_dict(), code_of=torch.zeros(C, dtype=torch.long))
    with pytest.raises(PrimebenchError, match="not a permutation"):
        other.load_state_dict(bad)


def test_a_shuffled_checkpoint_round_trips_through_save_load_and_export(tmp_path):
    from harness.models.transfer import export_checkpoint, load_transfer_folder
    from harness.training import train

    cfg = load_config(
        "tiny/prime",
        ["model.encoding=binary", "model.ell=1", "model.embedding=sum", "model.shuffle=true", "model.shuffle_seed=5"]
        + ["train.steps=2", "train.eval_every=2", "train.save_every=2"],
    )
    train(cfg, tmp_path / "run", quiet=True)
    model, tokenizer, loaded = harness.load(tmp_path / "run")
    assert model.ell == binary_ell(model.vocab_size) and model.base == 2 and model.shuffle
    assert torch.equal(model.code_of, token_permutation(model.vocab_size, 5))
    exported = export_checkpoint(tmp_path / "run", tmp_path / "export")
    again, _, _ = load_transfer_folder(exported)
    assert torch.equal(again.code_of, model.code_of)
    x = torch.randint(0, model.vocab_size, (2, 8), generator=torch.Generator().manual_seed(0))
    a = model.nll(x, num_samples=2, generator=torch.Generator().manual_seed(1))
    b = again.nll(x, num_samples=2, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(a.nats, b.nats)
    assert label_of(loaded.model) == "prime, binary, shuffled"


def test_encoding_options_are_checked():
    with pytest.raises(ConfigError, match="binary encoding has ell"):
        build_model("prime", vocab_size=1000, seq_len=4, ell=4, encoding="binary", embedding="sum")
    with pytest.raises(ConfigError, match="model.embedding=sum"):
        build_model("prime", vocab_size=1000, seq_len=4, encoding="binary", d_model=64)
    with pytest.raises(ConfigError, match="model.encoding"):
        load_config("tiny/prime", ["model.encoding=ternary"])
    with pytest.raises(ConfigError, match="model.embedding"):
        load_config("tiny/prime", ["model.embedding=mean"])
    sum_layout = build_model("prime", vocab_size=100, seq_len=4, ell=3, embedding="sum", d_model=16)
    assert sum_layout.ell == 3  # any d_model with one table per digit
    assert label_of(load_config("tiny/prime", ["model.encoding=binary", "model.ell=1"]).model) == "prime, binary"
