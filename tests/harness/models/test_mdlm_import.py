"""MDLM's HF layout (``mdlm-hf:PATH``): a tiny checkpoint with the original key names and shapes
(random weights, written here), imported strictly, gives the log-probabilities of a direct
functional recomputation from the raw tensors, and evaluates through the CLI."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch
from click.testing import CliRunner

import harness
from harness.cli import main
from harness.errors import CheckpointError

from tests.fixtures.releases import BLOCKS, COND, D, HEADS, L, V
from tests.fixtures.releases import ar_weights as _ar_weights
from tests.fixtures.releases import raw_weights as _raw_weights
from tests.fixtures.releases import write_hf_folder as _write


def _reference_logits(w, ids, sigma):
    """MDLM's DiT written out op by op from the raw tensors (rotary on interleaved pairs of the
    two halves, attention as an explicit softmax)."""
    lin = lambda x, name, bias=True: x @ w[name + ".weight"].T + (w[name + ".bias"] if bias else 0)  # noqa: E731

    def norm(x, name):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * w[name]

    half = 128
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half).float() / half)
    feats = torch.cat([torch.cos(sigma[:, None] * freqs), torch.sin(sigma[:, None] * freqs)], -1)
    h = lin(feats, "backbone.sigma_map.mlp.0")
    c = torch.nn.functional.silu(lin(h * torch.sigmoid(h), "backbone.sigma_map.mlp.2"))
    x = w["backbone.vocab_embed.embedding"][ids]
    if ids.dim() == 3:  # MDM-Prime: (B, L, ell) sub-tokens, embeddings concatenated per token
        x = x.flatten(2)
    B, T = ids.shape[:2]
    d = D // HEADS
    pos = torch.arange(T).float()[:, None] * w["backbone.rotary_emb.inv_freq"][None]  # (T, d/2)

    def rope(t):  # t (B, H, T, d): pairs (i, i + d/2) rotated by the angle of frequency i
        a, b = t[..., : d // 2], t[..., d // 2:]
        return torch.cat([a * pos.cos() - b * pos.sin(), b * pos.cos() + a * pos.sin()], -1)

    for i in range(BLOCKS):
        p = f"backbone.blocks.{i}."
        mod = lin(c, p + "adaLN_modulation")[:, None]
        s1, sc1, g1, s2, sc2, g2 = (mod[..., k * D:(k + 1) * D] for k in range(6))
        qkv = lin(norm(x, p + "norm1.weight") * (1 + sc1) + s1, p + "attn_qkv", bias=False).view(B, T, 3, HEADS, d)
        q, k, v = (qkv[:, :, j].permute(0, 2, 1, 3) for j in range(3))
        q, k = rope(q), rope(k)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), -1) @ v
        x = x + g1 * lin(att.permute(0, 2, 1, 3).reshape(B, T, D), p + "attn_out", bias=False)
        hmid = lin(norm(x, p + "norm2.weight") * (1 + sc2) + s2, p + "mlp.0")
        hmid = 0.5 * hmid * (1 + torch.tanh(math.sqrt(2 / math.pi) * (hmid + 0.044715 * hmid ** 3)))
        x = x + g2 * lin(hmid, p + "mlp.2")
    mod = lin(c, "backbone.output_layer.adaLN_modulation")[:, None]
    out = norm(x, "backbone.output_layer.norm_final.weight") * (1 + mod[..., D:]) + mod[..., :D]
    return lin(out, "backbone.output_layer.linear")


@pytest.mark.parametrize("time_conditioning", [False, True])
def test_imported_mdlm_matches_a_direct_recomputation(tmp_path, time_conditioning):
    weights = _raw_weights()
    folder = _write(tmp_path / "mdlm-owt", weights, time_conditioning=time_conditioning)
    model, tok, cfg = harness.load(f"mdlm-hf:{folder}")
    assert model.family == "mdlm" and model.vocab_size == V - 1 and model.mask_id == V - 1 and model.seq_len == L
    assert tok.spec == "gpt2" and cfg.model.d_model == D
    g = torch.Generator().manual_seed(1)
    z = torch.randint(0, V - 1, (3, L), generator=g)
    z[torch.rand(3, L, generator=g) < 0.5] = V - 1
    t = torch.tensor([0.2, 0.5, 0.9])
    with torch.no_grad():
        ours = model.log_probs(z, t)
        sigma = -torch.log1p(-(1 - 1e-3) * t) if time_conditioning else torch.zeros(3)
        ref = torch.log_softmax(_reference_logits(weights, z, sigma)[..., : V - 1], -1)
    masked = z == V - 1
    assert torch.allclose(ours[masked], ref[masked], atol=2e-5)
    visible = ~masked  # SUBS carries unmasked tokens over
    assert torch.equal(ours[visible].argmax(-1), z[visible]) and (ours[visible].max(-1).values == 0).all()


def test_layout_errors_are_clear(tmp_path):
    weights = _raw_weights()
    missing = dict(weights)
    missing.pop("backbone.blocks.1.attn_out.weight")
    with pytest.raises(CheckpointError, match="missing .*blocks.1.attn_out"):
        harness.load(f"mdlm-hf:{_write(tmp_path / 'a', missing)}")
    extra = dict(weights, **{"backbone.blocks.0.extra": torch.zeros(2)})
    with pytest.raises(CheckpointError, match="unexpected .*extra"):
        harness.load(f"mdlm-hf:{_write(tmp_path / 'b', extra)}")
    with pytest.raises(CheckpointError, match="shape"):
        harness.load(f"mdlm-hf:{_write(tmp_path / 'c', weights, hidden_dim=32, n_heads=4)}")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text(json.dumps({"vocab_size": V}))
    with pytest.raises(CheckpointError, match="not an MDLM config"):
        harness.load(f"mdlm-hf:{tmp_path / 'd'}")
    small = {k: (v[:1001] if v.shape[:1] == (V,) else v) for k, v in weights.items()}
    with pytest.raises(CheckpointError, match="no tokenizer files"):
        harness.load(f"mdlm-hf:{_write(tmp_path / 'e', small, vocab_size=1001)}")


def test_imported_mdlm_evaluates_through_the_cli(tmp_path):
    folder = _write(tmp_path / "mdlm-owt", _raw_weights())
    res = CliRunner().invoke(main, ["eval", "ppl", f"mdlm-hf:{folder}", "--max-rows", "2", "--json"])
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout[res.stdout.index("{"):])
    assert record["metrics"]["nll"]["kind"] == "bound" and record["protocol"]["seq_len"] == L
    assert record["model"]["checkpoint"] == f"mdlm-hf:{folder}" and record["model"]["checkpoint_sha256"]
    res = CliRunner().invoke(main, ["eval", "genppl", f"mdlm-hf:{folder}", "--samples", "2", "--steps", "4",
                                    "--judge", "none-such-folder/"])
    assert res.exit_code == 2  # the judge is checked before the model loads


def _fake_omegaconf(monkeypatch):
    """Classes named and pickled like omegaconf's (omegaconf itself is not needed to read them)."""
    import sys
    import types

    class ContainerMetadata:
        def __init__(self):
            self.ref_type = None

    class AnyNode:
        def __init__(self, value):
            self._val, self._metadata = value, ContainerMetadata()

        def __getstate__(self):
            return dict(self.__dict__)

    class DictConfig:
        def __init__(self, content):
            self.__dict__.update(_content=content, _metadata=ContainerMetadata(), _parent=None)

        def __getstate__(self):
            return dict(self.__dict__)

    for cls, module in ((ContainerMetadata, "omegaconf.base"), (AnyNode, "omegaconf.nodes"), (DictConfig, "omegaconf.dictconfig")):
        mod = types.ModuleType(module)
        setattr(mod, cls.__name__, cls)
        cls.__module__, cls.__qualname__ = module, cls.__name__
        monkeypatch.setitem(sys.modules, module, mod)
    monkeypatch.setitem(sys.modules, "omegaconf", types.ModuleType("omegaconf"))
    return lambda d: DictConfig({k: (DictConfig({a: AnyNode(b) for a, b in v.items()}) if isinstance(v, dict) else AnyNode(v))
                                 for k, v in d.items()})


def test_lightning_ckpt_with_ema_and_config_read_as_data(tmp_path, monkeypatch):
    from harness.models.mdlm_dit import MDLMDiT

    make_config = _fake_omegaconf(monkeypatch)
    raw = _raw_weights(0)
    ema_raw = _raw_weights(1)
    order = [n for n, _ in MDLMDiT(vocab_size=V, hidden_dim=D, cond_dim=COND, n_blocks=BLOCKS, n_heads=HEADS).named_parameters()]
    config = make_config({"model": {"hidden_size": D, "cond_dim": COND, "n_blocks": BLOCKS, "n_heads": HEADS, "length": L},
                          "time_conditioning": False})
    torch.save({"state_dict": raw, "ema": {"shadow_params": [ema_raw["backbone." + n] for n in order]},
                "hyper_parameters": {"config": config}, "epoch": 3}, tmp_path / "mdlm.ckpt")
    g = torch.Generator().manual_seed(2)
    z = torch.randint(0, V - 1, (2, L), generator=g)
    z[:, ::2] = V - 1
    masked = z == V - 1
    for ema, weights in ((True, ema_raw), (False, raw)):
        model, tok, cfg = harness.load(f"mdlm-ckpt:{tmp_path / 'mdlm.ckpt'}", ema=ema)
        assert cfg.model.d_model == D and model.seq_len == L and model.hparams["weights"] == ("EMA" if ema else "raw")
        with torch.no_grad():
            ours = model.log_probs(z, None)
            ref = torch.log_softmax(_reference_logits(weights, z, torch.zeros(2))[..., : V - 1], -1)
        assert torch.allclose(ours[masked], ref[masked], atol=2e-5)


def test_lightning_ckpt_that_runs_code_is_refused(tmp_path, monkeypatch):
    from harness.safe_load import UnsafeFileError

    make_config = _fake_omegaconf(monkeypatch)
    marker = tmp_path / "CODE_RAN"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"state_dict": _raw_weights(), "hyper_parameters": {"config": make_config({"model": {}}), "x": Payload()}},
               tmp_path / "evil.ckpt")
    with pytest.raises(UnsafeFileError, match="system"):
        harness.load(f"mdlm-ckpt:{tmp_path / 'evil.ckpt'}")
    assert not marker.exists()
    (tmp_path / "junk.ckpt").write_bytes(b"junk")
    with pytest.raises(Exception, match="corrupt"):
        harness.load(f"mdlm-ckpt:{tmp_path / 'junk.ckpt'}")


def test_prime_release_ckpt_matches_a_direct_recomputation(tmp_path, monkeypatch):
    from prime.bounds import restricted_log_probs

    make_config = _fake_omegaconf(monkeypatch)
    ell, C = 2, V - 1
    base = 225  # the smallest b with b**2 >= 50257
    w = _raw_weights(4)
    g = torch.Generator().manual_seed(5)
    w["backbone.vocab_embed.embedding"] = 0.3 * torch.randn(base + 1, D // ell, generator=g)
    w["backbone.output_layer.linear.weight"] = w["backbone.output_layer.linear.weight"][:C].clone()
    w["backbone.output_layer.linear.bias"] = w["backbone.output_layer.linear.bias"][:C].clone()
    for carry_over in (True, False):
        config = make_config({"model": {"hidden_size": D, "cond_dim": COND, "n_blocks": BLOCKS, "n_heads": HEADS, "length": L},
                              "prime": {"target_length": ell, "base": base, "carry_over": carry_over},
                              "time_conditioning": False})
        torch.save({"state_dict": w, "hyper_parameters": {"config": config}}, tmp_path / "prime.ckpt")
        model, tok, cfg = harness.load(f"prime-ckpt:{tmp_path / 'prime.ckpt'}", ema=False)
        assert model.family == "prime" and model.ell == ell and model.base == base and model.carry_over is carry_over
        assert cfg.model.ell == ell and tok.spec == "gpt2"
        x0 = torch.randint(0, C, (2, L), generator=g)
        y = model.encode(x0)
        y[torch.rand(y.shape, generator=g) < 0.5] = base  # the sub-token mask id
        with torch.no_grad():
            ours = model.log_probs(y, None)
            ref = restricted_log_probs(_reference_logits(w, y, torch.zeros(2)), y, C=C, base=base, ell=ell,
                                       carry_over=carry_over)
        finite = torch.isfinite(ref)
        assert torch.equal(finite, torch.isfinite(ours)) and torch.allclose(ours[finite], ref[finite], atol=2e-5)
    config = make_config({"model": {"hidden_size": D, "cond_dim": COND, "n_blocks": BLOCKS, "n_heads": HEADS, "length": L},
                          "prime": {"target_length": 1}})
    torch.save({"state_dict": _raw_weights(), "hyper_parameters": {"config": config}}, tmp_path / "ell1.ckpt")
    with pytest.raises(CheckpointError, match="mdlm-ckpt"):
        harness.load(f"prime-ckpt:{tmp_path / 'ell1.ckpt'}", ema=False)


def test_imported_mdlm_through_zeroshot_and_the_precision_audit(tmp_path):
    folder = _write(tmp_path / "mdlm-owt", _raw_weights())
    res = CliRunner().invoke(main, ["eval", "zeroshot", f"mdlm-hf:{folder}", "--tasks", "wiki_lastword", "--limit", "2",
                                    "--mc-samples", "2", "--json"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["audit", "precision", f"mdlm-hf:{folder}", "--steps", "4", "--samples", "2",
                                    "--no-controls", "--json"])
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout[res.stdout.index("{"):])
    assert record["model"]["checkpoint"] == f"mdlm-hf:{folder}"


def _reference_ar_log_probs(w, ids):
    """The release's AR forward op by op: causal attention, residuals without gates, the mask logit
    (the last of V) set to -1000, log-softmax over all V."""
    lin = lambda x, name, bias=True: x @ w[name + ".weight"].T + (w[name + ".bias"] if bias else 0)  # noqa: E731

    def norm(x, name):
        mu = x.mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + 1e-5) * w[name]

    x = w["backbone.vocab_embed.embedding"][ids]
    B, T = ids.shape
    d = D // HEADS
    pos = torch.arange(T).float()[:, None] * w["backbone.rotary_emb.inv_freq"][None]
    rope = lambda t: torch.cat([t[..., : d // 2] * pos.cos() - t[..., d // 2:] * pos.sin(),  # noqa: E731
                                t[..., d // 2:] * pos.cos() + t[..., : d // 2] * pos.sin()], -1)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for i in range(BLOCKS):
        p = f"backbone.blocks.{i}."
        qkv = lin(norm(x, p + "norm1.weight"), p + "attn_qkv", bias=False).view(B, T, 3, HEADS, d)
        q, k, v = (qkv[:, :, j].permute(0, 2, 1, 3) for j in range(3))
        scores = (rope(q) @ rope(k).transpose(-1, -2) / math.sqrt(d)).masked_fill(future, float("-inf"))
        x = x + lin((torch.softmax(scores, -1) @ v).permute(0, 2, 1, 3).reshape(B, T, D), p + "attn_out", bias=False)
        h = lin(norm(x, p + "norm2.weight"), p + "mlp.0")
        x = x + lin(0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3))), p + "mlp.2")
    logits = lin(norm(x, "backbone.output_layer.norm_final.weight"), "backbone.output_layer.linear")
    logits[..., -1] = -1000.0
    return logits.log_softmax(-1)


def test_release_ar_ckpt_matches_a_direct_recomputation(tmp_path, monkeypatch):
    from harness.models.mdlm_dit import MDLMDiT

    make_config = _fake_omegaconf(monkeypatch)
    raw, ema_raw = _ar_weights(V, 0), _ar_weights(V, 1)
    order = [n for n, _ in MDLMDiT(vocab_size=V, hidden_dim=D, cond_dim=COND, n_blocks=BLOCKS, n_heads=HEADS,
                                   causal=True).named_parameters()]
    assert len(order) == len([k for k in raw if "rotary" not in k])  # every weight has its EMA copy
    config = make_config({"model": {"hidden_size": D, "cond_dim": COND, "n_blocks": BLOCKS, "n_heads": HEADS,
                                    "length": L, "causal": True}, "backbone": "ar", "parameterization": "ar"})
    torch.save({"state_dict": raw, "ema": {"shadow_params": [ema_raw["backbone." + n] for n in order]},
                "hyper_parameters": {"config": config}}, tmp_path / "ar.ckpt")
    x0 = torch.randint(0, V - 1, (2, L), generator=torch.Generator().manual_seed(3))
    for ema, weights in ((True, ema_raw), (False, raw)):
        model, tok, cfg = harness.load(f"ar-ckpt:{tmp_path / 'ar.ckpt'}", ema=ema)
        assert model.family == "arm" and model.seq_len == L and tok.spec == "gpt2" and cfg.data.seq_len == L
        ref = _reference_ar_log_probs(weights, x0[:, :-1])  # the release reads L - 1 tokens, scores L - 1 targets
        with torch.no_grad():
            ours = model.log_probs(x0[:, :-1])
            nll = model.nll(x0)
        assert torch.allclose(ours, ref[..., : V - 1], atol=2e-5)
        expected = -ref.gather(-1, x0[:, 1:, None]).squeeze(-1).sum(1)
        assert torch.allclose(nll.nats.float(), expected, rtol=1e-5, atol=1e-3) and nll.kind == "exact"
    # a diffusion checkpoint under ar-ckpt: is named as such
    torch.save({"state_dict": _raw_weights(), "hyper_parameters": {"config": config}}, tmp_path / "mdlm.ckpt")
    with pytest.raises(CheckpointError, match="mdlm-ckpt"):
        harness.load(f"ar-ckpt:{tmp_path / 'mdlm.ckpt'}", ema=False)


def test_a_release_ckpt_without_tokenizer_files_takes_a_tokenizer_spec(tmp_path, monkeypatch):
    make_config = _fake_omegaconf(monkeypatch)
    config = make_config({"model": {"hidden_size": D, "cond_dim": COND, "n_blocks": BLOCKS, "n_heads": HEADS,
                                    "length": L}})
    torch.save({"state_dict": _ar_weights(258), "hyper_parameters": {"config": config}}, tmp_path / "ar.ckpt")
    with pytest.raises(CheckpointError, match="--tokenizer"):
        harness.load(f"ar-ckpt:{tmp_path / 'ar.ckpt'}", ema=False)
    model, tok, _ = harness.load(f"ar-ckpt:{tmp_path / 'ar.ckpt'}", ema=False, tokenizer="bytes")
    assert tok.spec == "bytes" and model.vocab_size == 257
    with pytest.raises(CheckpointError, match="257"):
        harness.load(f"ar-ckpt:{tmp_path / 'ar.ckpt'}", ema=False, tokenizer="gpt2")
    res = CliRunner().invoke(main, ["import", f"ar-ckpt:{tmp_path / 'ar.ckpt'}", "--no-ema", "--tokenizer", "bytes",
                                    "--out", str(tmp_path / "imp")])
    assert res.exit_code == 0, res.output
    again, tok2, _ = harness.load(tmp_path / "imp")
    z = torch.randint(0, 257, (2, L - 1), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert tok2.spec == "bytes" and torch.equal(again.log_probs(z), model.log_probs(z))
    res = CliRunner().invoke(main, ["eval", "ppl", str(tmp_path / "imp"), "--data", "wiki-embedded", "--max-rows", "2"])
    assert res.exit_code == 0, res.output
