import json
import math

import pytest
import torch
from click.testing import CliRunner

from harness.cli import main
from harness.metrics.genppl import GenPPL, counted_targets, score_texts


def test_padding_eos_is_not_counted():
    judge = _CountingJudge()
    judge.context = 32
    alone, _ = score_texts(judge, ["hello"], max_length=10)
    assert alone.compute().targets == 4  # 5 judge tokens -> 4 targets
    padded, _ = score_texts(judge, ["hello", "a much longer one"], max_length=20)
    assert padded.compute().targets == 4 + 16  # "hello" is padded with EOS in this batch; padding never counts


def test_counted_targets_follow_mdlm_rule():
    eos = 9
    ids = torch.tensor([[1, 2, eos, 3, eos, eos]])
    # targets are ids[1:] = [2, eos, 3, eos, eos]: non-EOS plus the first EOS
    assert counted_targets(ids, eos).tolist() == [[True, True, True, False, False]]


def test_gen_ppl_is_token_weighted_not_mean_of_ppls():
    m = GenPPL()
    m.add(torch.tensor([10.0, 1.0]), torch.tensor([5.0, 1.0]))
    res = m.compute()
    assert res.gen_ppl == pytest.approx(math.exp(11 / 6))
    assert res.samples == 2 and res.targets == 6
    assert res.gen_ppl != pytest.approx((math.exp(2) + math.exp(1)) / 2)


class _CountingJudge:
    """A judge whose NLL of every target is 1 nat: Gen PPL must be exactly e."""

    spec = "unit-test"
    description = "constant"
    eos_id = 0
    context = 4

    def encode(self, text):
        return [ord(c) % 50 + 1 for c in text]

    def target_nll(self, ids, attention_mask):
        return torch.ones(ids.shape[0], ids.shape[1] - 1, dtype=torch.float64)


def test_score_texts_keeps_every_sample_and_is_batch_invariant():
    texts = ["hello", "a", "longer text here", "xy", "the end"]
    a, ids_a = score_texts(_CountingJudge(), texts, max_length=10, batch_size=2)
    b, ids_b = score_texts(_CountingJudge(), texts, max_length=10, batch_size=5)
    ra, rb = a.compute(), b.compute()
    assert ra.samples == rb.samples == 5
    assert ra.gen_ppl == pytest.approx(math.e) and rb.gen_ppl == pytest.approx(math.e)
    assert ra.targets == rb.targets
    assert ra.truncated == 1  # "longer text here" has 16 > 10 judge tokens
    assert ids_a == ids_b


@pytest.fixture(scope="module")
def arm_judge(trained):
    from harness.judges import load_judge

    return load_judge(f"arm:{trained('arm')}")


def test_project_arm_judge_and_record(trained, arm_judge):
    from harness.evaluation.genppl import run_genppl

    record, rows = run_genppl(trained("mdlm"), steps=8, samples=3, batch_size=2, judge_obj=arm_judge, seed=1)
    m = record["metrics"]
    assert m["gen_ppl"]["kind"] == "estimate" and m["gen_ppl"]["value"] > 1
    assert "entropy_model" in m and "entropy_judge" in m and m["nfe"]["value"] <= 8
    p = record["protocol"]
    assert p["samples"] == 3 and p["dtype"] == "float64" and p["steps"] == 8 and p["judge"].startswith("arm:")
    assert len(rows) == 3 and all(len(r["tokens"]) == 64 for r in rows)
    again, rows_again = run_genppl(trained("mdlm"), steps=8, samples=3, batch_size=2, judge_obj=arm_judge, seed=1)
    assert [r["tokens"] for r in rows_again] == [r["tokens"] for r in rows]  # same seed, same samples
    assert again["metrics"]["gen_ppl"]["value"] == pytest.approx(m["gen_ppl"]["value"])


def test_judge_must_be_autoregressive(trained):
    from harness.errors import PrimebenchError
    from harness.judges import load_judge

    with pytest.raises(PrimebenchError, match="must be autoregressive"):
        load_judge(f"arm:{trained('mdlm')}")


def test_unknown_hub_judge_offline():
    from harness.errors import OfflineError
    from harness.judges import load_judge

    with pytest.raises(OfflineError, match="offline"):
        load_judge("gpt2-large")


def test_cli_genppl_writes_record_and_samples(trained, tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "eval",
            "genppl",
            str(trained("prime")),
            "--samples",
            "2",
            "--steps",
            "4",
            "--judge",
            f"arm:{trained('arm')}",
            "--dtype",
            "float32",
            "--method",
            "mdlm-legacy",
            "--out",
            str(tmp_path),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    assert rec["protocol"]["method"] == "mdlm-legacy" and rec["protocol"]["dtype"] == "float32"
    samples = list(tmp_path.glob("*.samples.jsonl"))
    assert len(samples) == 1 and len(samples[0].read_text().splitlines()) == 2
    bad = CliRunner().invoke(main, ["eval", "genppl", str(trained("prime")), "--nucleus-p", "0"])
    assert bad.exit_code == 2


@pytest.fixture(scope="module")
def smollm2_judge():
    from harness.judges import load_judge

    return load_judge("smollm2")


def test_smollm2_offline_judge_loads_and_scores(smollm2_judge):
    """The offline default judge: a GGUF inside an installed package, loaded with transformers."""
    judge = smollm2_judge
    good, _ = score_texts(judge, ["The capital of France is Paris. It is a large city in Europe."], max_length=64)
    bad, _ = score_texts(judge, ["Paris city the a Europe in capital large is France. of It is"], max_length=64)
    assert good.compute().gen_ppl < bad.compute().gen_ppl


def test_sharded_over_two_processes_equals_one(trained):
    """torchrun with two gloo ranks draws disjoint batches and gathers once: same record as one process."""
    import os
    import shutil
    import subprocess
    import sys

    from harness.evaluation.genppl import run_genppl

    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    ckpt, judge = str(trained("mdlm")), f"arm:{trained('arm')}"
    args = ["eval", "genppl", ckpt, "--samples", "5", "--batch-size", "2", "--steps", "4", "--judge", judge, "--json"]
    proc = subprocess.run(
        [torchrun, "--nproc_per_node", "2", "--master_port", "29523", "-m", "harness", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sharded = json.loads(proc.stdout)
    single, _ = run_genppl(ckpt, samples=5, batch_size=2, steps=4, judge=judge)
    assert sharded["protocol"]["world_size"] == 2 and sharded["protocol"]["samples"] == 5
    for key in ("gen_ppl", "entropy_model", "entropy_judge", "nfe"):
        assert sharded["metrics"][key]["value"] == pytest.approx(single["metrics"][key]["value"], rel=1e-9)


def test_judge_specs_are_checked_before_anything_loads(tmp_path, monkeypatch):
    import time

    import transformers

    import harness.models.hf_causal as hf_causal  # where the judge's hub check looks up hub_reachable
    from harness.errors import OfflineError, PrimebenchError
    from harness.judges import check_judge_spec

    monkeypatch.setattr(
        transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("the hub was asked")
    )
    for flag in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setattr(hf_causal, "hub_reachable", lambda timeout=3.0: True)
    with pytest.raises(PrimebenchError, match="unknown judge 'smolm2'") as info:
        check_judge_spec("smolm2")
    assert "did you mean 'smollm2'" in info.value.fix
    (tmp_path / "notamodel").mkdir()
    with pytest.raises(PrimebenchError, match="not a model"):
        check_judge_spec(str(tmp_path / "notamodel"))
    with pytest.raises(PrimebenchError, match="does not exist"):
        check_judge_spec(str(tmp_path / "missing"))
    assert check_judge_spec("gpt2-large") == "hub"
    monkeypatch.setattr(hf_causal, "hub_reachable", lambda timeout=3.0: False)
    began = time.perf_counter()
    with pytest.raises(OfflineError, match="unreachable"):
        check_judge_spec("gpt2-large")
    assert time.perf_counter() - began < 1.0
    # the CLI reports the judge (and a bad --steps) without loading the checkpoint
    res = CliRunner().invoke(main, ["eval", "genppl", str(tmp_path / "no-such-ckpt"), "--judge", "smolm2"])
    assert res.exit_code == 2 and "smollm2" in res.output and "no-such-ckpt" not in res.output
    res = CliRunner().invoke(main, ["eval", "genppl", str(tmp_path / "no-such-ckpt"), "--steps", "0"])
    assert res.exit_code == 2 and "--steps" in res.output


def test_two_runs_into_one_folder_keep_their_own_samples(trained, tmp_path):
    args = [
        "eval",
        "genppl",
        str(trained("mdlm")),
        "--samples",
        "2",
        "--steps",
        "4",
        "--judge",
        f"arm:{trained('arm')}",
        "--out",
        str(tmp_path),
        "--json",
    ]
    first = json.loads(CliRunner().invoke(main, args + ["--seed", "0"]).stdout)
    second = json.loads(CliRunner().invoke(main, args + ["--seed", "0"]).stdout)
    records = sorted(tmp_path.glob("*.json"))
    assert len(records) == 2 and first["samples_file"] != second["samples_file"]
    for path in records:
        record = json.loads(path.read_text())
        assert record["samples_file"] == str(path.with_suffix(".samples.jsonl"))
        assert len(open(record["samples_file"]).read().splitlines()) == 2


class _FakeTokenizer:
    bos_id = eos_id = 9

    def decode(self, ids):
        return "".join("<|endoftext|>" if i == 9 else chr(ord("a") + i) for i in ids)


class _FakeJudge:
    def __init__(self, eos_id):
        self.eos_id = eos_id

    def encode(self, text):  # one id per character, as a byte-level judge would (no special tokens)
        return [ord(c) for c in text]


@pytest.mark.parametrize("judge_eos", [0, 2, 50256])
def test_model_separators_become_the_judges_own_eos(judge_eos):
    from harness.metrics.genppl import counted_targets, separator_ids, to_judge_ids

    tok, judge = _FakeTokenizer(), _FakeJudge(judge_eos)
    assert separator_ids(tok) == [9]
    ids = to_judge_ids([9, 0, 1, 9, 2, 9], tok, judge)
    assert ids == [judge_eos, ord("a"), ord("b"), judge_eos, ord("c"), judge_eos]
    # decoding the separator as text would have given 13 ordinary ids each, none of them EOS
    assert len(judge.encode(tok.decode([9, 0, 1, 9, 2, 9]))) == 3 + 3 * len("<|endoftext|>")
    # the counting rule now sees the separators: the leading one is the first EOS (not a target)
    counted = counted_targets(torch.tensor([ids]), judge_eos)[0].tolist()
    assert counted == [True, True, False, True, False]


def test_every_judge_kind_gets_separators_mapped_and_recorded(trained, arm_judge, smollm2_judge):
    from harness.evaluation.genppl import run_genppl

    for spec, judge in ((f"arm:{trained('arm')}", arm_judge), ("smollm2", smollm2_judge)):
        # the ARM's samples start with its BOS (256), a separator in every sample
        record, rows = run_genppl(trained("arm"), samples=2, judge=spec, judge_obj=judge)
        sep = record["protocol"]["judge_retokenization"]["separators"]
        assert sep["judge_eos_id"] == judge.eos_id and sep["model_ids"] == [256]
        mapped = record["protocol"]["judge_retokenization"]["separators_mapped"]
        assert mapped == sum(r["tokens"].count(256) for r in rows) and mapped >= 2  # BOS of each sample at least


class _NaNJudge(_CountingJudge):
    spec = "nan-judge"

    def target_nll(self, ids, attention_mask):
        return torch.full((ids.shape[0], ids.shape[1] - 1), float("nan"), dtype=torch.float64)


def test_a_judge_that_outputs_nan_is_named_not_the_model():
    from harness.errors import NumericalError

    with pytest.raises(NumericalError, match="the judge 'nan-judge' gave non-finite") as err:
        score_texts(_NaNJudge(), ["hello"], max_length=10)
    assert "judge" in err.value.fix


def test_a_judge_with_nan_weights_is_refused_before_sampling(trained, tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from harness.data import get_tokenizer

    folder = tmp_path / "nan-judge"
    tok = PreTrainedTokenizerFast(tokenizer_object=get_tokenizer("gpt2")._backend, eos_token="<|endoftext|>")
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=32, vocab_size=50257))
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.weight.fill_(float("nan"))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    res = CliRunner().invoke(
        main,
        [
            "eval",
            "genppl",
            str(trained("mdlm")),
            "--judge",
            str(folder),
            "--samples",
            "2",
            "--steps",
            "4",
            "--out",
            str(tmp_path / "rec"),
        ],
    )
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert f"the judge {str(folder)!r} has weights that are not finite" in res.output
    assert "transformer.h.0.mlp.c_fc.weight" in res.output and "the model's outputs" not in res.output
    assert not (tmp_path / "rec").exists() or not list((tmp_path / "rec").iterdir())


def test_smollm2_features_for_mauve_do_not_depend_on_the_batch(smollm2_judge):
    """MAUVE's features: the last layer's hidden state at each sample's last token; padding a shorter
    sample in a batch does not move it (causal attention, right padding)."""
    judge = smollm2_judge
    ids = [judge.encode("The capital of France is Paris."), judge.encode("Paris city the a Europe")]
    both = judge.features(ids, max_length=64, batch_size=2)
    assert both.shape == (2, judge.model.config.hidden_size) and both.dtype == torch.float32
    for i, one in enumerate(ids):
        assert torch.allclose(judge.features([one], max_length=64)[0], both[i], atol=1e-5)
    assert not torch.allclose(both[0], both[1])


def test_mauve_features_from_the_scoring_pass_are_the_features_pass(smollm2_judge):
    """score_ids(features=True) takes the features from the forward pass that scores the samples;
    they are what Judge.features computes in a pass of its own, and the Gen PPL is unchanged."""
    from harness.metrics.genppl import score_ids

    judge = smollm2_judge
    ids = [judge.encode("The capital of France is Paris."), judge.encode("Paris city the a Europe in capital")]
    plain, _ = score_ids(judge, ids, max_length=64, batch_size=2)
    shared, _ = score_ids(judge, ids, max_length=64, batch_size=2, features=True)
    assert shared.compute().gen_ppl == plain.compute().gen_ppl
    assert torch.allclose(shared.features, judge.features(ids, max_length=64, batch_size=2), atol=1e-4)
    cut, _ = score_ids(judge, ids, max_length=4, batch_size=2, features=True)  # the last token of the cut
    assert torch.allclose(cut.features, judge.features(ids, max_length=4, batch_size=2), atol=1e-4)
