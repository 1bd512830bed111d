"""HF causal LMs (``hf:PATH``) as the ARM family: the same exact NLL as transformers' own loss,
through every evaluation, with no code executed from their files."""

from __future__ import annotations

import json
import os

import pytest
import torch
from click.testing import CliRunner

import harness
from harness.cli import main
from harness.errors import OfflineError, PrimebenchError


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    return write_tiny_gpt2(tmp_path_factory.mktemp("hf") / "tiny-gpt2")


def write_tiny_gpt2(out):
    """A tiny GPT-2 (random weights, the real GPT-2 tokenizer) saved as transformers saves it."""
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from harness.data import get_tokenizer

    backend = get_tokenizer("gpt2")._backend
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=48, vocab_size=50257)).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_hf_model_is_an_arm_with_transformers_own_nll(gpt2_folder):
    model, tok, cfg = harness.load(f"hf:{gpt2_folder}")
    assert model.family == "arm" and model.autoregressive and model.seq_len == 48 and model.vocab_size == 50257
    assert tok.encode("Hello world") == [15496, 995] and cfg.name == "tiny-gpt2"
    x = torch.tensor([tok.encode("The quick brown fox jumps over the lazy dog, twice over.")])
    hf = model.backbone.hf
    with torch.no_grad():
        per_token = torch.nn.functional.cross_entropy(
            hf(input_ids=x).logits[0, :-1].float(), x[0, 1:], reduction="none"
        )
    res = model.nll(x)
    assert res.kind == "exact" and float(res.tokens) == x.shape[1] - 1
    assert float(res.nats) == pytest.approx(float(per_token.sum()), rel=1e-6)
    ctx = torch.zeros_like(x, dtype=torch.bool)
    ctx[:, 6:] = True  # score the continuation given the first six tokens
    assert float(model.nll(x, corruptible=ctx).nats) == pytest.approx(float(per_token[5:].sum()), rel=1e-6)


def test_hf_model_through_eval_ppl_genppl_and_zeroshot(gpt2_folder, tmp_path):
    from harness.io import file_sha256

    src = f"hf:{gpt2_folder}"
    res = CliRunner().invoke(main, ["eval", "ppl", src, "--max-rows", "3", "--json", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout[res.stdout.index("{") :])
    assert record["metrics"]["nll"]["kind"] == "exact" and record["protocol"]["model_source"] == src
    assert record["model"]["checkpoint_sha256"] == file_sha256(gpt2_folder / "model.safetensors")
    assert record["protocol"]["tokenizer"] == src and record["protocol"]["seq_len"] == 48
    res = CliRunner().invoke(
        main, ["eval", "genppl", src, "--samples", "2", "--seq-len", "12", "--judge", src, "--json"]
    )
    assert res.exit_code == 0, res.output
    gen = json.loads(res.stdout[res.stdout.index("{") :])
    assert gen["protocol"]["judge_retokenization"]["separators"]["judge_eos_id"] == 50256
    res = CliRunner().invoke(main, ["eval", "zeroshot", src, "--tasks", "wiki_lastword", "--max-rows", "2", "--json"])
    assert res.exit_code == 0, res.output


def test_hf_sources_are_safe_and_errors_are_clear(gpt2_folder, tmp_path, monkeypatch):
    import shutil

    from harness.safe_load import UnsafeFileError

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'CODE_RAN'}",))

    pickled = tmp_path / "pickled"
    shutil.copytree(gpt2_folder, pickled)
    (pickled / "model.safetensors").unlink()
    torch.save({"x": Payload()}, pickled / "pytorch_model.bin")
    with pytest.raises(UnsafeFileError):
        harness.load(f"hf:{pickled}")
    assert not (tmp_path / "CODE_RAN").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(PrimebenchError, match="no config.json"):
        harness.load(f"hf:{tmp_path / 'empty'}")
    with pytest.raises(PrimebenchError, match="does not exist"):
        harness.load(f"hf:{tmp_path / 'missing'}")
    with pytest.raises(OfflineError, match="not in the Hugging Face cache"):  # the tests run with HF_HUB_OFFLINE=1
        harness.load("hf:gpt2-large")
    res = CliRunner().invoke(main, ["eval", "ppl", "hf:gpt2-large"])
    assert res.exit_code == 2 and "primebench prefetch hf:gpt2-large" in res.output


@pytest.mark.parametrize("index", ["pytorch_model.bin.index.json", "model.safetensors.index.json"])
@pytest.mark.parametrize("keep_safetensors", [False, True])
def test_an_index_naming_a_code_pickle_under_another_name_is_refused(gpt2_folder, tmp_path, index, keep_safetensors):
    """transformers hands any shard not named .safetensors to torch.load, whose own refusal suggests
    weights_only=False: our error comes first and never suggests it."""
    import shutil

    from safetensors.torch import load_file

    from harness.safe_load import UnsafeFileError

    marker = tmp_path / "CODE_RAN"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    folder = tmp_path / "indexed"
    shutil.copytree(gpt2_folder, folder)
    weights = load_file(str(folder / "model.safetensors"))
    if not keep_safetensors:
        (folder / "model.safetensors").unlink()
    torch.save({**weights, "x": Payload()}, folder / "weights-00001-of-00001.data")
    (folder / index).write_text(
        json.dumps({"metadata": {}, "weight_map": dict.fromkeys(weights, "weights-00001-of-00001.data")})
    )
    with pytest.raises(UnsafeFileError) as err:
        harness.load(f"hf:{folder}")
    assert "weights-00001-of-00001.data" in err.value.problem and index in err.value.problem
    assert "weights_only" not in str(err.value) and not marker.exists()
    res = CliRunner().invoke(main, ["eval", "ppl", f"hf:{folder}", "--max-rows", "1"])
    assert res.exit_code == 2 and "arbitrary code" in res.output and "weights_only" not in res.output
    assert "Traceback" not in res.output and not marker.exists()


def test_an_index_naming_a_shard_outside_its_folder_is_refused(tmp_path):
    from harness.safe_load import UnsafeFileError, check_pickles_in_folder

    folder = tmp_path / "m"
    folder.mkdir()
    torch.save({"w": torch.ones(2)}, tmp_path / "outside.data")
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": {"w": "../outside.data"}}))
    with pytest.raises(UnsafeFileError, match="outside its folder"):
        check_pickles_in_folder(folder, what="model weights")
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": {"w": "shard.data"}}))
    torch.save({"w": torch.ones(2)}, folder / "shard.data")  # a plain-tensor shard by any name is fine
    assert check_pickles_in_folder(folder, what="model weights") == [folder / "shard.data"]
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weights": []}))
    with pytest.raises(PrimebenchError, match="no weight_map"):
        check_pickles_in_folder(folder, what="model weights")
