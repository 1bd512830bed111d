"""lm-eval adapter, offline tasks and ``eval zeroshot`` on tiny trained checkpoints."""

import json
import math

import pytest
import torch
from click.testing import CliRunner

from harness import diffusion, load
from harness.cli import main
from harness.errors import PrimebenchError
from harness.lmeval.adapter import PrimebenchLM
from harness.lmeval.requests import cut_at_stops, split_context
from harness.lmeval.tasks import lastword_passages, rolling_config

DIFFUSION = ("mdlm", "masked", "prime")


pytestmark = pytest.mark.usefixtures("single_thread")


def _instance(kind, args, task="t", doc=0):
    from lm_eval.api.instance import Instance

    return Instance(kind, {}, args, 0, metadata=(task, doc, 1))


def _adapter(trained, family, **kw):
    model, tok, _ = load(trained(family))
    return PrimebenchLM(model, tok, **kw), model, tok


DOCS = [
    "Alabama is a state in the south.",
    "The river flows to the gulf of Mexico, past old towns.",
    "Cotton was king.",
    "Montgomery is the capital; Birmingham is the largest city.",
    "Mobile was founded by French colonists in 1702.",
]


def test_arm_rolling_through_lmeval_equals_eval_ppl(trained, tmp_path):
    """`eval ppl --no-wrap` scores [BOS] doc [EOS] (L-1 shifted targets, padding masked); lm-eval's
    rolling loglikelihood scores the doc's tokens given BOS. Each doc fits one window (< L-1 bytes),
    so the windows coincide and the totals differ exactly by the EOS terms, computed directly."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from harness.evaluation.ppl import run_ppl

    lm, model, tok = _adapter(trained, "arm", batch_size=2)
    assert all(len(tok.encode(d)) <= model.seq_len - 2 for d in DOCS)
    (tmp_path / "docs.txt").write_text("\n\n".join(DOCS) + "\n")
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))

    rec = run_ppl(trained("arm"), data=f"text:{tmp_path / 'docs.txt'}:all", wrap=False, batch_size=3)
    ppl_nats = rec["metrics"]["nll"]["value"] * rec["protocol"]["tokens_scored"]
    assert rec["protocol"]["tokens_scored"] == sum(len(tok.encode(d)) + 1 for d in DOCS)

    res = lm_eval.simple_evaluate(
        model=lm,
        tasks=[rolling_config("docs_rolling", tmp_path / "docs.jsonl")],
        task_manager=TaskManager(include_defaults=False),
        bootstrap_iters=0,
        log_samples=True,
    )
    rolling_ll = sum(
        s["filtered_resps"][0] if isinstance(s["filtered_resps"], list) else s["filtered_resps"]
        for s in res["samples"]["docs_rolling"]
    )
    assert lm.stats.rolling_windows == len(DOCS) and lm.stats.requests["loglikelihood_rolling"] == len(DOCS)

    eos_nats = 0.0
    with torch.no_grad():
        for d in DOCS:
            row = torch.tensor([[tok.bos_id, *tok.encode(d)]])
            eos_nats -= float(model.log_probs(row, None, torch.ones_like(row))[0, -1, tok.eos_id])
    assert -rolling_ll + eos_nats == pytest.approx(ppl_nats, abs=1e-6 * rec["protocol"]["tokens_scored"])
    assert -rolling_ll == pytest.approx(ppl_nats - eos_nats, rel=1e-6)


def test_arm_rolling_windows_score_every_token_once(trained):
    lm, model, tok = _adapter(trained, "arm", batch_size=3)
    text = " ".join(DOCS * 4)  # several windows of L
    ids = tok.encode(text)
    items = lm.rolling_items(ids)
    assert len(items) > 3
    assert [t for it in items for t in it.tokens[len(it.tokens) - it.n_cont :]] == ids
    assert all(len(it.tokens) - 1 <= model.seq_len for it in items)
    manual = 0.0
    with torch.no_grad():
        for it in items:
            row = torch.tensor([it.tokens])
            log_p = model.log_probs(row[:, :-1], None, torch.ones_like(row[:, :-1]))[0]
            n = len(it.tokens) - 1
            manual += float(log_p[torch.arange(n - it.n_cont, n), row[0, n - it.n_cont + 1 :]].double().sum())
    (total,) = lm.loglikelihood_rolling([_instance("loglikelihood_rolling", (text,))])
    assert total == pytest.approx(manual, abs=1e-4)


def test_arm_loglikelihood_exact_greedy_and_batch_invariant(trained):
    lm, model, tok = _adapter(trained, "arm", batch_size=2)
    pairs = [("The state of", " Alabama"), ("Cotton was ", "king."), ("", "Mobile"), ("a" * 10, "aaaa")]
    out = lm.loglikelihood([_instance("loglikelihood", p) for p in pairs])
    one = PrimebenchLM(model, tok, batch_size=1).loglikelihood([_instance("loglikelihood", p) for p in pairs])
    for (ctx, cont), (ll, greedy), (ll1, _) in zip(pairs, out, one):
        ctx, cont = split_context(ctx, cont)
        c = tok.encode(cont)
        row = torch.tensor([[tok.bos_id, *tok.encode(ctx), *c]])
        with torch.no_grad():
            log_p = model.log_probs(row[:, :-1], None, torch.ones_like(row[:, :-1]))[0]
        pos = torch.arange(row.shape[1] - 1 - len(c), row.shape[1] - 1)
        assert ll == pytest.approx(float(log_p[pos, row[0, pos + 1]].double().sum()), abs=1e-5)
        assert greedy == bool((log_p[pos].argmax(-1) == row[0, pos + 1]).all())
        assert ll1 == pytest.approx(ll, abs=1e-5) and ll < 0


def test_split_context_moves_trailing_space():
    assert split_context("Cotton was ", "king") == ("Cotton was", " king")
    assert split_context("a", " b") == ("a", " b")


@pytest.mark.parametrize("family", ["mdlm", "masked"])
def test_single_token_bound_is_the_one_pass_cross_entropy(trained, family):
    """With one continuation token the mask-count estimator masks it with weight 1/1: the bound is
    exactly -log p(x | context, [MASK]) whatever K (a known answer, no MC noise)."""
    model, tok, _ = load(trained(family))
    ctx, cont = tok.encode("The capital is"), tok.encode("M")
    row = torch.tensor([[tok.bos_id, *ctx, model.mask_id]])
    with torch.no_grad():
        expected = float(model.log_probs(row, None, torch.ones_like(row))[0, -1, cont[0]])
    for K in (1, 3):
        ((ll, _),) = PrimebenchLM(model, tok, mc_samples=K).loglikelihood(
            [_instance("loglikelihood", ("The capital is", "M"))]
        )
        assert ll == pytest.approx(expected, abs=1e-5)


def test_prime_bound_matches_enumeration_within_mc_noise(trained):
    """One token = ell=2 sub-tokens: the bound is (g({0}) + g({1}) + g({0,1})) / 2 with g the summed
    -log marginals of the masked sub-tokens; K=64 stratified draws take n=2 exactly half the time."""
    from prime.bounds import subtoken_nll_terms

    model, tok, _ = load(trained("prime"))
    x = torch.tensor([[tok.bos_id, *tok.encode("The capital is"), *tok.encode("M")]])
    y0 = model.encode(x)
    g = {}
    for key, units in {"0": [0], "1": [1], "01": [0, 1]}.items():
        masked = torch.zeros_like(y0, dtype=torch.bool)
        masked[0, -1, units] = True
        z = torch.where(masked, torch.full_like(y0, model.mask_id), y0)
        with torch.no_grad():
            log_p = model.log_probs(z, None, torch.ones_like(x))
        g[key] = float(subtoken_nll_terms(log_p, y0, masked, model.base, model.ell).sum())
    exact = (g["0"] + g["1"] + g["01"]) / 2
    lm = PrimebenchLM(model, tok, mc_samples=64)
    (score,) = lm.score([lm.pair_item("The capital is", "M")], greedy=False)
    spread = abs(g["0"] - g["1"]) / 2
    assert abs(score.nats - exact) <= 5 * spread / math.sqrt(32) + 1e-6


@pytest.mark.parametrize("family", DIFFUSION)
def test_diffusion_loglikelihood_never_masks_the_context(trained, family, monkeypatch):
    lm, model, tok = _adapter(trained, family, mc_samples=8, batch_size=5)
    seen = []
    real = diffusion.corrupt

    def spy(clean, u, valid, **kw):
        out = real(clean, u, valid, **kw)
        seen.append((valid.clone(), out[1].clone()))
        return out

    monkeypatch.setattr(diffusion, "corrupt", spy)
    pairs = [("The river flows to the", " gulf of Mexico"), ("Cotton", " was king"), ("", "Alabama")]
    out = lm.loglikelihood([_instance("loglikelihood", p) for p in pairs])
    assert len(seen) == 8  # one corruption per Monte-Carlo sample of the batch (all three requests in one)
    items = [lm.pair_item(*p) for p in pairs]
    expected = sorted((len(it.tokens) - it.n_cont, it.n_cont) for it in items)  # (context incl. BOS, continuation)
    for valid, masked in seen:
        units = valid.reshape(valid.shape[0], valid.shape[1], -1)
        blocks = []
        for row in units:
            pos = row.any(-1).nonzero().flatten().tolist()
            assert pos == list(range(pos[0], pos[0] + len(pos))) and bool(row[pos].all())  # whole tokens, one block
            blocks.append((pos[0], len(pos)))
        assert sorted(blocks) == expected  # exactly the continuation of each request; the context never
        assert not bool((masked & ~valid).any())
    assert any(bool(m.any()) for _, m in seen)
    for ll, greedy in out:
        assert math.isfinite(ll) and ll <= 0 and isinstance(greedy, bool)
    # the draws belong to the request, not its batch: a different batch size gives the same numbers
    again = PrimebenchLM(model, tok, mc_samples=8, batch_size=3).loglikelihood(
        [_instance("loglikelihood", p) for p in pairs[::-1]]
    )
    assert [a for a, _ in again[::-1]] == pytest.approx([a for a, _ in out], abs=1e-5)
    single = PrimebenchLM(model, tok, mc_samples=8, batch_size=1).loglikelihood(
        [_instance("loglikelihood", p) for p in pairs]
    )
    assert [a for a, _ in single] == pytest.approx([a for a, _ in out], abs=1e-5)


def test_diffusion_bound_K_only_moves_mc_noise(trained):
    model, tok, _ = load(trained("mdlm"))
    items = [PrimebenchLM(model, tok).pair_item("The river flows to the", " gulf of Mexico")]
    a = PrimebenchLM(model, tok, mc_samples=8, seed=1).score(items, greedy=False)[0]
    b = PrimebenchLM(model, tok, mc_samples=64, seed=2).score(items, greedy=False)[0]
    assert a.stderr > 0 and b.stderr > 0
    assert abs(a.nats - b.nats) < 4 * math.hypot(a.stderr, b.stderr)


@pytest.mark.parametrize("family", ["arm", "mdlm"])
def test_long_context_is_cut_from_the_left_and_long_continuation_fails(trained, family):
    lm, model, tok = _adapter(trained, family, mc_samples=2)
    ctx = ("word " * 40).rstrip()
    ((ll, _),) = lm.loglikelihood([_instance("loglikelihood", (ctx, " gulf"))])
    assert lm.stats.truncated_requests == 1 and lm.stats.truncated_tokens > 0
    room = lm.capacity - 1 - len(tok.encode(" gulf"))
    kept = tok.decode(tok.encode(ctx.rstrip())[-room:])
    ((ll_cut, _),) = lm.loglikelihood([_instance("loglikelihood", (kept, " gulf"))])
    assert ll == pytest.approx(ll_cut, abs=1e-6)
    too_long = "x" * lm.capacity  # BOS + capacity tokens cannot fit
    with pytest.raises(PrimebenchError, match=rf"doc 7.*continuation has {lm.capacity} tokens"):
        lm.loglikelihood([_instance("loglikelihood", ("ctx", too_long), task="t", doc=7)])
    fits = "x" * (lm.capacity - 1)
    ((ll_fit, _),) = lm.loglikelihood([_instance("loglikelihood", ("ctx", fits))])
    assert math.isfinite(ll_fit) and ll_fit < 0


def test_cut_at_stops():
    assert cut_at_stops("abc. def\nghi", [".", "\n"]) == "abc"
    assert cut_at_stops("abc", ["x", ""]) == "abc"


@pytest.mark.parametrize("family", ["arm", *DIFFUSION])
def test_generate_until_returns_text_cut_at_stops(trained, family):
    lm, model, tok = _adapter(trained, family)
    ctx = "The state of Alabama"
    (free,) = lm.generate_until([_instance("generate_until", (ctx, {"max_gen_toks": 12}))])
    assert isinstance(free, str) and lm.stats.generated_tokens <= 12
    stop = free[2:4] if len(free) >= 4 else "\x00"
    (cut,) = lm.generate_until(
        [_instance("generate_until", (ctx, {"until": [stop], "max_gen_toks": 12, "do_sample": False}))]
    )
    assert cut == free[: free.find(stop)] if stop in free else cut == free
    assert lm.stats.ignored_gen_kwargs == {"do_sample"}
    with pytest.raises(PrimebenchError, match="max_gen_toks"):
        lm.generate_until([_instance("generate_until", (ctx, {"max_gen_toks": model.seq_len}))])


def test_lastword_passages_are_deterministic_and_end_in_a_word():
    article = "Intro line that is short.\n==Heading==\n" + " ".join(
        f"Sentence {i} has six words here." for i in range(30)
    )
    rows = lastword_passages([article], per_article=3, min_words=20, max_words=40)
    assert rows == lastword_passages([article], per_article=3, min_words=20, max_words=40)
    assert len(rows) == 3
    for r in rows:
        assert r["target"] == " here" and r["text"] == r["context"] + r["target"]
        assert 20 <= len(r["text"].split()) <= 40


def test_cli_zeroshot_records_labelled_metrics(trained, tmp_path):
    runner = CliRunner()
    res = runner.invoke(
        main,
        [
            "eval",
            "zeroshot",
            str(trained("mdlm")),
            "--tasks",
            "wiki_lastword",
            "--max-rows",
            "5",
            "-K",
            "2",
            "--out",
            str(tmp_path),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    m = rec["metrics"]
    assert rec["evaluation"] == "zeroshot"
    assert m["wiki_lastword/perplexity"]["kind"] == "bound" and m["wiki_lastword/acc"]["kind"] == "estimate"
    assert m["wiki_lastword/perplexity"]["value"] > 1
    p = rec["protocol"]
    assert p["documents"]["wiki_lastword"] == 5 and p["mc_samples"] == 2 and p["max_rows"] == 5
    assert len(p["task_data"]["wiki_lastword"]["sha256"]) == 64 and p["lm_eval_version"]
    assert p["adapter"]["requests"]["loglikelihood"] == 5
    assert list(tmp_path.glob("zeroshot-*.json"))

    res = runner.invoke(
        main,
        [
            "eval",
            "zeroshot",
            str(trained("arm")),
            "--tasks",
            "wiki_rolling,wiki_lastword",
            "--max-rows",
            "1",
            "--batch-size",
            "64",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "word_perplexity" in res.stdout and "exact" in res.stdout


def test_cli_zeroshot_registry_task_offline_is_a_clear_error(trained):
    res = CliRunner().invoke(
        main, ["eval", "zeroshot", str(trained("arm")), "--tasks", "lambada_openai", "--max-rows", "2"]
    )
    assert res.exit_code == 2
    assert "lambada_openai" in res.output and "wiki_rolling, wiki_lastword" in res.output


def test_run_zeroshot_takes_max_rows_and_its_old_spelling_with_a_warning(trained):
    from harness.errors import PrimebenchError
    from harness.lmeval import run_zeroshot

    with pytest.raises(PrimebenchError, match="--max-rows must be a positive number"):
        run_zeroshot(trained("mdlm"), tasks="wiki_lastword", max_rows=0)
    with pytest.warns(DeprecationWarning, match="use max_rows="):
        rec = run_zeroshot(trained("mdlm"), tasks="wiki_lastword", limit=2, mc_samples=1)
    assert rec["protocol"]["max_rows"] == 2 and rec["protocol"]["documents"]["wiki_lastword"] == 2
