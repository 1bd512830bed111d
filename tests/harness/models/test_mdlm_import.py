"""MDLM's HF layout (``mdlm-hf:PATH``): a tiny checkpoint with the original key names and shapes
(random weights, written here), imported strictly, gives the log-probabilities of a direct
functional recomputation from the raw tensors, and evaluates through the CLI. The op-by-op
references here serve the Lightning files too (``test_lightning_releases``)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

import harness
from harness.cli import main
from harness.errors import CheckpointError
from tests.fixtures.releases import BLOCKS, HEADS, D, L, V
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
        a, b = t[..., : d // 2], t[..., d // 2 :]
        return torch.cat([a * pos.cos() - b * pos.sin(), b * pos.cos() + a * pos.sin()], -1)

    for i in range(BLOCKS):
        p = f"backbone.blocks.{i}."
        mod = lin(c, p + "adaLN_modulation")[:, None]
        s1, sc1, g1, s2, sc2, g2 = (mod[..., k * D : (k + 1) * D] for k in range(6))
        qkv = lin(norm(x, p + "norm1.weight") * (1 + sc1) + s1, p + "attn_qkv", bias=False).view(B, T, 3, HEADS, d)
        q, k, v = (qkv[:, :, j].permute(0, 2, 1, 3) for j in range(3))
        q, k = rope(q), rope(k)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), -1) @ v
        x = x + g1 * lin(att.permute(0, 2, 1, 3).reshape(B, T, D), p + "attn_out", bias=False)
        hmid = lin(norm(x, p + "norm2.weight") * (1 + sc2) + s2, p + "mlp.0")
        hmid = 0.5 * hmid * (1 + torch.tanh(math.sqrt(2 / math.pi) * (hmid + 0.044715 * hmid**3)))
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
    with pytest.raises(CheckpointError, match="does not split into n_heads = 3"):
        harness.load(f"mdlm-hf:{_write(tmp_path / 'h', weights, n_heads=3)}")  # not a traceback
    small = {k: (v[:1001] if v.shape[:1] == (V,) else v) for k, v in weights.items()}
    with pytest.raises(CheckpointError, match="no tokenizer files"):
        harness.load(f"mdlm-hf:{_write(tmp_path / 'e', small, vocab_size=1001)}")


def test_imported_mdlm_evaluates_through_the_cli(tmp_path):
    folder = _write(tmp_path / "mdlm-owt", _raw_weights())
    res = CliRunner().invoke(main, ["eval", "ppl", f"mdlm-hf:{folder}", "--max-rows", "2", "--json"])
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout[res.stdout.index("{") :])
    assert record["metrics"]["nll"]["kind"] == "bound" and record["protocol"]["seq_len"] == L
    assert record["model"]["checkpoint"] == f"mdlm-hf:{folder}" and record["model"]["checkpoint_sha256"]
    res = CliRunner().invoke(
        main, ["eval", "genppl", f"mdlm-hf:{folder}", "--samples", "2", "--steps", "4", "--judge", "none-such-folder/"]
    )
    assert res.exit_code == 2  # the judge is checked before the model loads


def test_imported_mdlm_through_zeroshot_and_the_precision_audit(tmp_path):
    folder = _write(tmp_path / "mdlm-owt", _raw_weights())
    res = CliRunner().invoke(
        main,
        [
            "eval",
            "zeroshot",
            f"mdlm-hf:{folder}",
            "--tasks",
            "wiki_lastword",
            "--max-rows",
            "2",
            "--mc-samples",
            "2",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(
        main, ["audit", "precision", f"mdlm-hf:{folder}", "--steps", "4", "--samples", "2", "--no-controls", "--json"]
    )
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout[res.stdout.index("{") :])
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

    def rope(t):
        return torch.cat(
            [
                t[..., : d // 2] * pos.cos() - t[..., d // 2 :] * pos.sin(),
                t[..., d // 2 :] * pos.cos() + t[..., : d // 2] * pos.sin(),
            ],
            -1,
        )

    future = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for i in range(BLOCKS):
        p = f"backbone.blocks.{i}."
        qkv = lin(norm(x, p + "norm1.weight"), p + "attn_qkv", bias=False).view(B, T, 3, HEADS, d)
        q, k, v = (qkv[:, :, j].permute(0, 2, 1, 3) for j in range(3))
        scores = (rope(q) @ rope(k).transpose(-1, -2) / math.sqrt(d)).masked_fill(future, float("-inf"))
        x = x + lin((torch.softmax(scores, -1) @ v).permute(0, 2, 1, 3).reshape(B, T, D), p + "attn_out", bias=False)
        h = lin(norm(x, p + "norm2.weight"), p + "mlp.0")
        x = x + lin(0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3))), p + "mlp.2")
    logits = lin(norm(x, "backbone.output_layer.norm_final.weight"), "backbone.output_layer.linear")
    logits[..., -1] = -1000.0
    return logits.log_softmax(-1)
