"""Release Lightning checkpoints as Lightning and omegaconf really write them (``mdlm-ckpt:``,
``prime-ckpt:``, ``ar-ckpt:``): they load without running code, their config reads back as the
values omegaconf holds, their logits equal an op-by-op recomputation from the file's tensors (EMA
and raw), they import and evaluate through the CLI, and malicious variants of the same files are
refused before anything in them runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import torch
from click.testing import CliRunner

import harness
from harness.cli import main
from harness.errors import CheckpointError
from harness.safe_load import UnsafeFileError, accepted_global, load_lightning_checkpoint, plain, saved_tokenizer_json
from tests.fixtures.lightning_releases import ELL, release_config, weights, write_release
from tests.fixtures.releases import CKPT_FILES, PRIME_BASE, L, V
from tests.harness.models.test_mdlm_import import _reference_ar_log_probs, _reference_logits

PREFIX = {"mdlm": "mdlm-ckpt:", "prime": "prime-ckpt:", "prime-no-carry-over": "prime-ckpt:", "ar": "ar-ckpt:"}
FILE = {kind: name for name, kind in CKPT_FILES.items()}


def test_the_files_name_what_real_release_files_name(release_files):
    # guards every test below: these are Lightning's own pickles, not an imitation of them
    from torch.serialization import get_unsafe_globals_in_checkpoint

    names = set(get_unsafe_globals_in_checkpoint(str(release_files / "mdlm.ckpt")))
    assert {
        "builtins.dict",
        "builtins.int",
        "builtins.list",
        "collections.defaultdict",
        "typing.Any",
        "omegaconf.dictconfig.DictConfig",
        "omegaconf.listconfig.ListConfig",
        "omegaconf.nodes.AnyNode",
        "omegaconf.base.ContainerMetadata",
        "omegaconf.base.Metadata",
        "tokenizers.Tokenizer",
        "tokenizers.models.Model",
    } <= names
    assert any(n.startswith("transformers.models.gpt2.") for n in names)
    blob = torch.load(release_files / "mdlm.ckpt", weights_only=False)  # our own file: trusted here
    assert {
        "pytorch-lightning_version",
        "loops",
        "callbacks",
        "optimizer_states",
        "lr_schedulers",
        "hparams_name",
        "ema",
        "sampler",
    } <= set(blob)
    assert blob["global_step"] == 2 and blob["ema"]["num_updates"] == 2 and blob["optimizer_states"][0]["state"]
    assert any(k.startswith("ModelCheckpoint") for k in blob["callbacks"])


@pytest.mark.parametrize("kind", ["mdlm", "prime", "ar"])
def test_the_config_reads_back_as_omegaconf_holds_it(release_files, kind):
    from omegaconf import OmegaConf
    from tokenizers import Tokenizer

    from harness.data import get_tokenizer

    blob = load_lightning_checkpoint(release_files / FILE[kind])
    hp = blob["hyper_parameters"]
    # interpolations stay the strings they were saved as, as omegaconf's own unresolved container
    assert plain(hp["config"]) == OmegaConf.to_container(release_config(kind), resolve=False)
    saved = Tokenizer.from_str(saved_tokenizer_json(hp["tokenizer"]))
    assert saved.get_vocab() == get_tokenizer("gpt2")._backend.get_vocab()
    assert blob["ema"]["decay"] == 0.9999 and len(blob["ema"]["shadow_params"]) > 10


@pytest.mark.parametrize("kind", ["mdlm", "prime", "prime-no-carry-over", "ar"])
@pytest.mark.parametrize("ema", [True, False])
def test_logits_equal_an_op_by_op_recomputation(release_files, kind, ema):
    from prime.bounds import restricted_log_probs

    path = release_files / FILE[kind]
    model, tok, cfg = harness.load(f"{PREFIX[kind]}{path}", ema=ema)
    w = weights(path, ema=ema)
    assert tok.spec == "gpt2" and model.seq_len == L and model.hparams["weights"] == ("EMA" if ema else "raw")
    g = torch.Generator().manual_seed(7)
    x0 = torch.randint(0, V - 1, (2, L), generator=g)
    with torch.no_grad():
        if kind == "ar":
            ref = _reference_ar_log_probs(w, x0[:, :-1])
            assert model.family == "arm" and torch.allclose(model.log_probs(x0[:, :-1]), ref[..., : V - 1], atol=2e-5)
            return
        if kind == "mdlm":
            z = x0.masked_fill(torch.rand(x0.shape, generator=g) < 0.5, V - 1)
            ours, masked = model.log_probs(z, None), z == V - 1
            ref = torch.log_softmax(_reference_logits(w, z, torch.zeros(2))[..., : V - 1], -1)
            assert model.family == "mdlm" and torch.allclose(ours[masked], ref[masked], atol=2e-5)
            return
        carry_over = kind == "prime"
        assert model.family == "prime" and model.ell == ELL and model.base == PRIME_BASE
        assert model.carry_over is carry_over and cfg.model.ell == ELL
        y = model.encode(x0)
        y[torch.rand(y.shape, generator=g) < 0.5] = PRIME_BASE
        ours = model.log_probs(y, None)
        ref = restricted_log_probs(
            _reference_logits(w, y, torch.zeros(2)), y, C=V - 1, base=PRIME_BASE, ell=ELL, carry_over=carry_over
        )
    finite = torch.isfinite(ref)
    assert torch.equal(finite, torch.isfinite(ours)) and torch.allclose(ours[finite], ref[finite], atol=2e-5)


@pytest.mark.parametrize("kind", ["mdlm", "prime", "ar"])
def test_each_prefix_imports_and_evaluates_through_the_cli(release_files, tmp_path, kind):
    source = f"{PREFIX[kind]}{release_files / FILE[kind]}"
    runner = CliRunner()
    res = runner.invoke(main, ["import", source, "--out", str(tmp_path / "imp")])
    assert res.exit_code == 0, res.output
    assert not [p for p in (tmp_path / "imp").rglob("*") if p.suffix in (".pt", ".bin", ".ckpt", ".pkl")]
    records = []
    for target in (source, str(tmp_path / "imp")):
        res = runner.invoke(main, ["eval", "ppl", target, "--max-rows", "2", "--json"])
        assert res.exit_code == 0, res.output
        records.append(json.loads(res.stdout[res.stdout.index("{") :]))
    direct, imported = records
    assert direct["model"]["checkpoint"] == source and direct["protocol"]["weights"] == "EMA"
    assert direct["metrics"]["nll"]["kind"] == ("exact" if kind == "ar" else "bound")
    # the imported folder scores the same tokens to the same number under the same seed
    assert direct["metrics"]["nll"]["value"] == pytest.approx(imported["metrics"]["nll"]["value"], rel=1e-6)


def test_a_tokenizer_that_maps_ids_differently_from_the_saved_one_is_refused(release_files, tmp_path):
    """A tokenizer.json beside the file with two ids swapped: same size, other vocabulary."""
    from harness.data import get_tokenizer

    shutil.copy(release_files / "mdlm.ckpt", tmp_path / "mdlm.ckpt")
    doc = json.loads(get_tokenizer("gpt2")._backend.to_str())
    vocab = doc["model"]["vocab"]
    a, b = "the", "Ġthe"
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (tmp_path / "tokenizer.json").write_text(json.dumps(doc))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"})
    )
    with pytest.raises(CheckpointError, match="differs from the tokenizer saved in the checkpoint at 2 of 50257"):
        harness.load(f"mdlm-ckpt:{tmp_path / 'mdlm.ckpt'}")
    res = CliRunner().invoke(main, ["eval", "ppl", f"mdlm-ckpt:{tmp_path / 'mdlm.ckpt'}", "--max-rows", "1"])
    assert res.exit_code == 2 and "differs from the tokenizer saved" in res.output


def test_a_release_without_a_transformers_tokenizer_takes_a_tokenizer_spec(tmp_path):
    path = write_release(tmp_path / "ar.ckpt", "ar", vocab=258, tokenizer=False)
    with pytest.raises(CheckpointError, match="--tokenizer"):
        harness.load(f"ar-ckpt:{path}")
    model, tok, _ = harness.load(f"ar-ckpt:{path}", tokenizer="bytes")
    assert tok.spec == "bytes" and model.vocab_size == 257
    with pytest.raises(CheckpointError, match="257"):
        harness.load(f"ar-ckpt:{path}", tokenizer="gpt2")
    res = CliRunner().invoke(
        main, ["import", f"ar-ckpt:{path}", "--no-ema", "--tokenizer", "bytes", "--out", str(tmp_path / "imp")]
    )
    assert res.exit_code == 0, res.output
    again, tok2, _ = harness.load(tmp_path / "imp")
    z = torch.randint(0, 257, (2, L - 1), generator=torch.Generator().manual_seed(0))
    raw, _, _ = harness.load(f"ar-ckpt:{path}", tokenizer="bytes", ema=False)
    with torch.no_grad():
        assert tok2.spec == "bytes" and torch.equal(again.log_probs(z), raw.log_probs(z))


def test_a_wrong_prefix_names_the_right_one(release_files):
    with pytest.raises(CheckpointError, match="mdlm-ckpt"):
        harness.load(f"ar-ckpt:{release_files / 'mdlm.ckpt'}")
    with pytest.raises(CheckpointError, match="mdlm-ckpt"):
        harness.load(f"prime-ckpt:{release_files / 'mdlm.ckpt'}")


# ---- malicious variants of the same real files ----


class _Call:
    """Pickles as a call of ``func(*args)``; ``func`` may itself be a _Call (a chained payload)."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __call__(self, *args):  # pickle wants a callable in a reduce tuple
        raise AssertionError("only ever unpickled")

    def __reduce__(self):
        return self.func, self.args


def _payloads(marker):
    touch = f"touch {marker}"
    return {
        "os.system": _Call(os.system, touch),
        "builtins.eval": _Call(eval, f"open({str(marker)!r}, 'w').close()"),
        "builtins.exec": _Call(exec, f"open({str(marker)!r}, 'w').close()"),
        "builtins.getattr": _Call(_Call(getattr, _Call(__import__, "os"), "system"), touch),
        "subprocess.Popen": _Call(subprocess.Popen, ["touch", str(marker)]),
    }


def _poisoned(release_files, tmp_path, name, payload, *, where="hyper_parameters"):
    blob = torch.load(release_files / "mdlm.ckpt", weights_only=False)  # our own file
    if where == "hyper_parameters":
        blob["hyper_parameters"]["evil"] = payload
    else:  # inside the omegaconf config's own state
        blob["hyper_parameters"]["config"].__dict__["_metadata"].__dict__["evil"] = payload
    path = tmp_path / f"{name}.ckpt"
    torch.save(blob, path)
    return path


@pytest.mark.parametrize(
    "name", ["os.system", "builtins.eval", "builtins.exec", "builtins.getattr", "subprocess.Popen"]
)
def test_malicious_variants_are_refused_and_run_nothing(release_files, tmp_path, name):
    ran = tmp_path / "RAN"
    path = _poisoned(release_files, tmp_path, name.replace(".", "_"), _payloads(ran)[name])
    torch.load(path, weights_only=False)  # the proof: an unsafe load runs the payload
    assert ran.exists()
    ran.unlink()
    for prefix in ("mdlm-ckpt:", "prime-ckpt:", "ar-ckpt:"):
        with pytest.raises(UnsafeFileError, match="arbitrary code") as info:
            harness.load(f"{prefix}{path}")
        assert "refused" in str(info.value) and not ran.exists()
    res = CliRunner().invoke(main, ["import", f"mdlm-ckpt:{path}", "--out", str(tmp_path / "imp")])
    assert res.exit_code == 2 and "arbitrary code" in res.output and not (tmp_path / "imp").exists()
    assert not ran.exists()


def test_a_payload_inside_the_omegaconf_state_is_refused(release_files, tmp_path):
    ran = tmp_path / "RAN"
    path = _poisoned(release_files, tmp_path, "meta", _payloads(ran)["os.system"], where="config")
    with pytest.raises(UnsafeFileError):
        harness.load(f"mdlm-ckpt:{path}")
    assert not ran.exists()


def test_only_inert_names_are_accepted():
    for name in (
        "builtins.dict",
        "builtins.list",
        "builtins.tuple",
        "builtins.set",
        "builtins.frozenset",
        "builtins.int",
        "builtins.float",
        "builtins.complex",
        "builtins.str",
        "builtins.bytes",
        "builtins.bool",
        "collections.defaultdict",
        "typing.Any",
        "omegaconf.nodes.AnyNode",
        "transformers.models.gpt2.tokenization_gpt2.GPT2TokenizerFast",
        "tokenizers.Tokenizer",
    ):
        assert accepted_global(name), name
    for name in (
        "builtins.eval",
        "builtins.exec",
        "builtins.getattr",
        "builtins.__import__",
        "builtins.open",
        "builtins.type",
        "builtins.compile",
        "posix.system",
        "os.system",
        "subprocess.Popen",
        "subprocess.check_output",
        "numpy.load",
        "torch.load",
        "lightning.pytorch.Trainer",
        "omegaconf.omegaconf.open_dict",
        "transformers.dynamic_module_utils.get_class_from_dynamic_module",
        "collections.namedtuple",
        "functools.partial",
    ):
        assert not accepted_global(name), name


def test_stand_ins_never_call_the_builtin(tmp_path):
    """A file that calls a builtin type's stand-in gets an inert record, not the builtin's result."""
    from harness.safe_load import ConfigRecord

    class CallsList:
        def __reduce__(self):
            return list, ("abc",)

    blob = {"state_dict": {}, "hyper_parameters": {"x": CallsList(), "t": dict}}
    torch.save(blob, tmp_path / "calls.ckpt")
    back = load_lightning_checkpoint(tmp_path / "calls.ckpt")
    record = back["hyper_parameters"]["x"]
    assert isinstance(record, ConfigRecord) and record.args == ("abc",)
    assert plain(back["hyper_parameters"]["t"]) == "builtins.dict"
