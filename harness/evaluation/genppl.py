"""Generative perplexity with entropy: sample from a checkpoint, score the samples with a judge.

The protocol that moves the number is recorded in full: sampler, steps, dtype and method of the
categorical draw, nucleus p, temperature, number of samples, sequence length, judge (and that its
retokenisation adds no special tokens and truncates at ``max_length``), and the entropy convention
(per-sample unigram entropy, mean over samples, on the model's own ids and on the judge's ids).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch

from harness.metrics.entropy import MeanEntropy
from harness.metrics.genppl import score_texts


def sample_texts(model, tokenizer, *, sampler, steps, samples, dtype, method, nucleus_p, temperature, batch_size, seed, seq_len=None):
    """Draw ``samples`` sequences and decode them. Returns (SampleOutput, texts, wall seconds)."""
    from harness.sampling import generate

    original = model.seq_len
    if seq_len is not None:
        if seq_len > original:
            from harness.errors import DataError

            raise DataError(
                f"--seq-len {seq_len} is longer than the model's sequence length {original}",
                fix=f"use --seq-len <= {original}",
            )
        model.seq_len = seq_len
    try:
        g = torch.Generator(device=model.device).manual_seed(seed)
        t0 = time.time()
        out = generate(
            model, sampler, num_samples=samples, batch_size=batch_size, steps=steps, temperature=temperature,
            nucleus_p=nucleus_p, dtype=dtype, method=method, generator=g, bos_id=tokenizer.bos_id,
        )
        wall = time.time() - t0
    finally:
        model.seq_len = original
    texts = [tokenizer.decode(row.tolist()) for row in out.tokens]
    return out, texts, wall


def gen_ppl_metrics(out, texts, judge, *, max_length: int, batch_size: int, bits: bool = False):
    """Gen PPL and both entropies for decoded samples. Returns (metrics dict, per-sample judge ids)."""
    from harness.records import Metric

    base = 2 if bits else "e"
    units = "bits" if bits else "nats"
    ent_model = MeanEntropy(base=base)
    ent_model.update(out.tokens)
    metrics = {}
    judge_ids = None
    if judge is not None:
        gp, judge_ids = score_texts(judge, texts, max_length=max_length, batch_size=batch_size)
        res = gp.compute()
        metrics["gen_ppl"] = Metric(res.gen_ppl, res.stderr, "estimate", f"perplexity under {judge.spec}")
        ent_judge = MeanEntropy(base=base)
        ent_judge.update(judge_ids)
        ej = ent_judge.compute()
        metrics["entropy_judge"] = Metric(ej.mean, ej.stderr, "estimate", f"{units} per sample, judge ids")
    em = ent_model.compute()
    metrics["entropy_model"] = Metric(em.mean, em.stderr, "estimate", f"{units} per sample, model ids")
    nfe = out.nfe.double()
    metrics["nfe"] = Metric(float(nfe.mean()), float(nfe.std() / math.sqrt(nfe.numel())) if nfe.numel() > 1 else None, "estimate", "denoiser calls per sample")
    return metrics, judge_ids


def run_genppl(
    checkpoint,
    *,
    sampler: str | None = None,
    steps: int | None = None,
    samples: int = 16,
    dtype: str = "float64",
    method: str = "gumbel",
    nucleus_p: float = 1.0,
    temperature: float = 1.0,
    seq_len: int | None = None,
    judge: str | None = "smollm2",
    batch_size: int = 8,
    seed: int = 0,
    bits: bool = False,
    device: str = "cpu",
    judge_obj=None,
):
    """Sample, score and return ``(record, samples as list of dicts)``."""
    from harness import load
    from harness.judges import load_judge
    from harness.records import Metric, make_record, model_block

    t0 = time.time()
    model, tokenizer, cfg = load(checkpoint, device=device)
    if tokenizer is None:
        from harness.data import get_tokenizer

        tokenizer = get_tokenizer(cfg.data.tokenizer)
    the_judge = judge_obj if judge_obj is not None else (load_judge(judge, device=device) if judge else None)
    out, texts, sample_wall = sample_texts(
        model, tokenizer, sampler=sampler, steps=steps, samples=samples, dtype=dtype, method=method,
        nucleus_p=nucleus_p, temperature=temperature, batch_size=batch_size, seed=seed, seq_len=seq_len,
    )
    L = seq_len or model.seq_len
    max_length = L if the_judge is None else min(the_judge.context, max(L, 1))
    # MDLM truncates the retokenised sample at the model length; a judge with a different tokenizer
    # may need more tokens for the same text, so truncation is counted and recorded.
    metrics, judge_ids = gen_ppl_metrics(out, texts, the_judge, max_length=max_length, batch_size=batch_size, bits=bits)
    metrics["samples_per_s"] = Metric(samples / max(sample_wall, 1e-9), None, "estimate", "samples per second (sampling only)")
    protocol = dict(out.protocol)
    protocol.update(
        samples=samples,
        seq_len=L,
        seed=seed,
        judge=None if the_judge is None else the_judge.spec,
        judge_description=None if the_judge is None else the_judge.description,
        judge_retokenization={"special_tokens_added": False, "max_length": max_length, "pad": "judge EOS",
                              "counted_targets": "non-EOS targets plus the first EOS (MDLM)"} if the_judge else None,
        gen_ppl_aggregation="token-weighted over all samples: exp(sum nats / sum counted targets)",
        entropy={"definition": "per-sample unigram entropy of token ids, mean over samples",
                 "units": "bits" if bits else "nats", "ids": ["model (all L generated ids)", "judge (retokenised, unpadded)"]},
        tokenizer=tokenizer.spec,
    )
    rows = []
    for i, text in enumerate(texts):
        rows.append({
            "index": i,
            "text": text,
            "tokens": out.tokens[i].tolist(),
            "nfe": int(out.nfe[i]),
            "idle_steps": int(out.idle_steps[i]),
            "judge_tokens": None if judge_ids is None else len(judge_ids[i]),
        })
    record = make_record(
        "genppl", model=model_block(Path(checkpoint), cfg), metrics=metrics, protocol=protocol, seed=seed,
        device=device, wall_s=time.time() - t0,
    )
    return record, rows


def write_samples(rows: list[dict], path: Path) -> Path:
    from harness.checkpoint import atomic_write_text

    atomic_write_text(Path(path), "".join(json.dumps(r) + "\n" for r in rows))
    return Path(path)
