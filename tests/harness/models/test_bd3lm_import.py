"""BD3-LM's releases (``bd3lm-hf:`` written by transformers' ``save_pretrained``, ``bd3lm-ckpt:``
written by Lightning) load strictly as our ``bd3lm`` and give the log-probabilities of an op-by-op
recomputation of MDLM's DiT where the block layout reduces to it; the training layout, the
block-causal layout and the key-value cache agree block by block; bad releases are refused by name;
and the imported folder goes through every evaluation command."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

import harness
from harness.cli import main
from harness.errors import CheckpointError
from tests.fixtures.lightning_releases import BD3LM_BLOCK, BD3LM_CLIP, weights
from tests.fixtures.releases import L, V, raw_weights, write_bd3lm_hf
from tests.harness.models.test_mdlm_import import _reference_logits


def _draw(seed: int = 1, rows: int = 3):
    g = torch.Generator().manual_seed(seed)
    x0 = torch.randint(0, V - 1, (rows, L), generator=g)
    z = x0.masked_fill(torch.rand(rows, L, generator=g) < 0.5, V - 1)
    return x0, z


def _reference_log_probs(w, ids):
    return torch.log_softmax(_reference_logits(w, ids, torch.zeros(ids.shape[0]))[..., : V - 1], -1)


def test_block_size_L_is_the_mdlm_network_on_the_noisy_row(tmp_path):
    """With one block the noisy half attends to itself only: MDLM's DiT, recomputed op by op."""
    folder = write_bd3lm_hf(tmp_path / "bd3lm", block_size=L)
    model, tok, cfg = harness.load(f"bd3lm-hf:{folder}")
    assert model.family == "bd3lm" and model.block_size == L and model.mask_id == V - 1 and model.seq_len == L
    assert tok.spec == "gpt2" and cfg.model.block_size == L and model.train_clip == (0.3, 0.8)
    x0, z = _draw()
    with torch.no_grad():
        ours, ref = model.log_probs(z, None, None, x0), _reference_log_probs(raw_weights(), z)
    masked = z == V - 1
    assert torch.allclose(ours[masked], ref[masked], atol=2e-5)
    assert (ours[~masked].max(-1).values == 0).all()  # SUBS carries the visible tokens over


def test_blocks_see_the_clean_past_in_every_layout(tmp_path):
    """Block k of the training layout = the last block of [clean blocks < k ; noisy block k] under the
    block-causal mask = the key-value cache's call; block 0 = the DiT on that block alone."""
    folder = write_bd3lm_hf(tmp_path / "bd3lm", block_size=BD3LM_BLOCK)
    model, _, _ = harness.load(f"bd3lm-hf:{folder}")
    x0, z = _draw(2)
    b = BD3LM_BLOCK
    with torch.no_grad():
        train = model.log_probs(z, None, None, x0)
        ref = _reference_log_probs(raw_weights(), z[:, :b])
        masked = z[:, :b] == V - 1
        assert torch.allclose(train[:, :b][masked], ref[masked], atol=2e-5)
        cache = model.new_sampling_cache()
        for k in range(L // b):
            span = slice(k * b, (k + 1) * b)
            prefix = torch.cat((x0[:, : k * b], z[:, span]), 1)
            assert torch.allclose(model.log_probs(prefix)[:, span], train[:, span], atol=2e-5), k
            assert torch.allclose(model.block_log_probs(z[:, span], cache), train[:, span], atol=2e-5), k
            model.finish_block(x0[:, span], cache)
        assert not torch.allclose(train[:, b:], model.log_probs(z)[:, b:], atol=1e-3)  # the clean past matters


def test_lightning_release_loads_its_ema_weights_and_clipped_range(release_files):
    path = release_files / "bd3lm.ckpt"
    model, _, cfg = harness.load(f"bd3lm-ckpt:{path}")
    raw, _, _ = harness.load(f"bd3lm-ckpt:{path}", ema=False)
    assert model.block_size == BD3LM_BLOCK and model.train_clip == BD3LM_CLIP and cfg.model.block_size == BD3LM_BLOCK
    for ema, loaded in ((True, model), (False, raw)):
        expected = {k.removeprefix("backbone."): v for k, v in weights(path, ema=ema).items() if "rotary" not in k}
        got = loaded.backbone.dit.state_dict()
        assert all(torch.equal(got[k], v) for k, v in expected.items())
    assert model.hparams["weights"] == "EMA" and raw.hparams["weights"] == "raw"
    with pytest.raises(CheckpointError, match="bd3lm-ckpt:"):
        harness.load(f"mdlm-ckpt:{path}")
    with pytest.raises(CheckpointError, match="mdlm-ckpt:"):
        harness.load(f"bd3lm-ckpt:{release_files / 'mdlm.ckpt'}")


@pytest.mark.parametrize(
    "override, message",
    [
        (dict(cross_attn=False), "cross_attn is false"),
        (dict(time_conditioning=True), "time_conditioning is true"),
        (dict(causal=True), "causal is true"),
        (dict(adaln="yes"), "JSON boolean"),
        (dict(block_size=0), "block_size"),
        (dict(block_size=48), "does not divide model_length = 24 \\(a block longer than every row\\)"),
        (dict(block_size=5), "block_size = 5 does not divide model_length = 24"),
        (dict(n_heads=3), "does not split into n_heads = 3"),
    ],
)
def test_releases_the_family_cannot_evaluate_are_refused(tmp_path, override, message):
    folder = write_bd3lm_hf(tmp_path / "bd3lm")
    config = json.loads((folder / "config.json").read_text()) | override
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=message):
        harness.load(f"bd3lm-hf:{folder}")


def test_wrong_prefix_and_damaged_weights_are_named(tmp_path):
    folder = write_bd3lm_hf(tmp_path / "bd3lm")
    with pytest.raises(CheckpointError, match="load it as bd3lm-hf:"):
        harness.load(f"mdlm-hf:{folder}")
    with pytest.raises(CheckpointError, match="clipped range"):
        harness.load(f"bd3lm-hf:{write_bd3lm_hf(tmp_path / 'clip', clip=(0.9, 0.2))}")
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    tensors.pop("backbone.blocks.0.attn_qkv.weight")
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="missing .*blocks.0.attn_qkv"):
        harness.load(f"bd3lm-hf:{folder}")


def test_import_then_every_eval_command(release_files, tmp_path):
    """``primebench import`` of both forms, then ppl, genppl (the release AR as judge), zeroshot and
    the precision audit on the imported folder; the folder gives the release's log-probabilities."""
    runner = CliRunner()
    hf = tmp_path / "hf"
    shutil.copytree(release_files / "bd3lm-owt-block_size4", hf)
    for source, out in ((f"bd3lm-hf:{hf}", "imp-hf"), (f"bd3lm-ckpt:{release_files / 'bd3lm.ckpt'}", "imp-ckpt")):
        res = runner.invoke(main, ["import", source, "--out", str(tmp_path / out)])
        assert res.exit_code == 0, res.output
    imported, _, cfg = harness.load(tmp_path / "imp-hf")
    original, _, _ = harness.load(f"bd3lm-hf:{hf}")
    assert imported.family == "bd3lm" and cfg.model.block_size == BD3LM_BLOCK and imported.train_clip == (0.3, 0.8)
    x0, z = _draw(3)
    with torch.no_grad():
        assert torch.equal(imported.log_probs(z, None, None, x0), original.log_probs(z, None, None, x0))
    folder = str(tmp_path / "imp-ckpt")
    res = runner.invoke(main, ["eval", "ppl", folder, "--max-rows", "2", "--mc-samples", "2", "--json"])
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout[res.stdout.index("{") :])
    assert record["metrics"]["nll"]["kind"] == "bound" and record["protocol"]["block_size"] == BD3LM_BLOCK
    judge = f"arm:ar-ckpt:{release_files / 'ar.ckpt'}"
    res = runner.invoke(
        main, ["eval", "genppl", folder, "--samples", "2", "--batch-size", "2", "--judge", judge, "--json"]
    )
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout[res.stdout.index("{") :])
    assert record["protocol"]["block_size"] == BD3LM_BLOCK and record["model"]["family"] == "bd3lm"
    res = runner.invoke(
        main, ["eval", "zeroshot", folder, "--tasks", "wiki_lastword", "--max-rows", "2", "--mc-samples", "2", "--json"]
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(
        main, ["audit", "precision", folder, "--steps", "4", "--samples", "2", "--batch-size", "2", "--no-controls"]
    )
    assert res.exit_code == 0, res.output
