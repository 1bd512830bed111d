"""``primebench audit bound [CHECKPOINT]``: exact NLL, sub-token bound and the paper objective side by
side (logic in :mod:`harness.audit.bound`)."""

from __future__ import annotations

import json
from pathlib import Path
import math

import click

FOOTNOTE = (
    "exact NLL: -log p_theta(x) (diffusion: of the one-sub-token-at-a-time sampler, by enumeration; ARM: exact).\n"
    "sub-token bound: a valid upper bound on the exact NLL (marginal of each masked sub-token).\n"
    "paper objective: MDM-Prime's L_vb with token-joint terms; NOT a bound when sub-tokens depend.\n"
    "All numbers in nats per token; ± is one Monte-Carlo standard error."
)


def _parse_toy(ctx, param, value: str | None) -> tuple[int, int, int] | None:
    """Click callback: "C,ELL,L" -> (C, ell, L); None stays None (default 6,2,2 without CHECKPOINT)."""
    if value is None:
        return None
    try:
        C, ell, L = (int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected C,ELL,L (three integers, e.g. 6,2,2)") from None
    if C < 2 or ell < 1 or L < 1:
        raise click.BadParameter(f"{value!r}: expected C,ELL,L with C >= 2, ELL >= 1, L >= 1 (e.g. 6,2,2)")
    return C, ell, L


def _cell(value, stderr=None, ppl: bool = False) -> str:
    if value is None:
        return "-"
    text = f"{value:.4f}"
    if stderr is not None:
        text += f" ± {stderr:.4f}"
    if ppl and value < 700:
        text += f" (ppl {math.exp(value):.2f})"
    return text


def _table(audit):
    from rich.table import Table

    checkpoint = audit.protocol.get("source") == "checkpoint"
    title = ("bound audit: Monte Carlo on the checkpoint's validation rows" if checkpoint
             else "bound audit: exact enumeration on toy models")
    table = Table(title=f"{title} (nats/token)", caption=FOOTNOTE, caption_justify="left")
    for name, justify in (("case", "left"), ("data entropy", "right"), ("exact NLL (exact)", "right"),
                          ("sub-token bound (bound)", "right"), ("paper objective, token-joint (NOT a bound)", "right"),
                          ("gap = paper objective - exact", "right"), ("verdict", "left")):
        table.add_column(name, justify=justify, no_wrap=name in ("verdict", "case") and not checkpoint)
    for r in audit.rows:
        gap = "-" if r.gap is None else f"{r.gap:+.4f}"
        table.add_row(r.name, _cell(r.data_entropy), _cell(r.exact_nll, r.exact_nll_stderr, checkpoint),
                      _cell(r.subtoken_bound, r.subtoken_bound_stderr, checkpoint),
                      _cell(r.token_joint, r.token_joint_stderr, checkpoint), gap, r.verdict)
    return table


def _summary(audit) -> str:
    holds = audit.subtoken_always_holds
    checked = sum(r.subtoken_holds is not None for r in audit.rows)
    below = sum(r.gap is not None and r.gap < -1e-12 for r in audit.rows)
    lines = []
    for r in audit.rows:
        if r.method == "enumeration":
            continue
        if r.subtoken_bound is not None:
            lines.append(f"{r.name}: {_cell(r.subtoken_bound, r.subtoken_bound_stderr, True)} nats/token is an "
                         f"UPPER BOUND on the NLL ({'sub-token bound' if r.family == 'prime' else 'NELBO'}).")
        if r.token_joint is not None:
            lines.append(f"{r.name}: {_cell(r.token_joint, r.token_joint_stderr, True)} nats/token is the PAPER "
                         "OBJECTIVE (token-joint L_vb), not a bound on the NLL.")
        if r.exact_nll is not None:
            lines.append(f"{r.name}: {_cell(r.exact_nll, r.exact_nll_stderr, True)} nats/token is the EXACT NLL.")
    if holds is True:
        lines.append(f"sub-token bound >= exact NLL in all {checked} rows where both are known.")
    elif holds is False:
        lines.append("VIOLATION: the sub-token bound fell below the exact NLL in some row: a bug in the estimator.")
    if below:
        lines.append(f"the paper objective (token-joint) is below the exact NLL in {below} of {checked} rows: "
                     "it is not an upper bound on the NLL.")
    return "\n".join(lines)


@click.command("bound")
@click.argument("checkpoint", required=False, type=click.Path(file_okay=False))
@click.option("--toy", default=None, metavar="C,ELL,L", callback=_parse_toy,
              help="Shape of the random toy denoisers (without CHECKPOINT). [default: 6,2,2]")
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(min=0),
              help="Number of random toy models (without CHECKPOINT).")
@click.option("--seed", default=0, show_default=True, type=int, help="First toy seed / Monte-Carlo seed.")
@click.option("--mc-samples", default=4, show_default=True, type=click.IntRange(min=2),
              help="Monte-Carlo corruptions per sequence (with CHECKPOINT; >= 2 for a standard error).")
@click.option("--batches", default=4, show_default=True, type=click.IntRange(min=1),
              help="Validation batches to score (with CHECKPOINT).")
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1))
@click.option("--device", default="cpu", show_default=True, help="torch device for a checkpoint's model.")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Write the JSON record into this folder.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON record instead of the table.")
def bound_cmd(checkpoint, toy, seeds, seed, mc_samples, batches, batch_size, device, out, as_json):
    """Exact NLL vs the sub-token bound vs the paper's token-joint objective (nats/token).

    Without CHECKPOINT: exact enumeration on the reference worked example and random toy models.
    With CHECKPOINT: Monte Carlo on its validation split (Prime: both numbers; MDLM/masked: the
    bound; ARM: the exact NLL).
    """
    from rich.console import Console

    from harness.audit.bound import checkpoint_audit, toy_audit
    from harness.logging import console

    cfg = None
    if checkpoint is None:
        C, ell, L = toy or (6, 2, 2)
        audit = toy_audit(C, ell, L, seeds=seeds, seed=seed)
    else:
        if toy is not None:
            raise click.UsageError("--toy applies only without CHECKPOINT (toy models are enumerated)")
        import dataclasses

        import harness
        from harness.data import get_corpus, get_packed, get_tokenizer

        model, tokenizer, cfg = harness.load(checkpoint, device=device)
        d = cfg.data
        corpus = get_corpus(d.corpus)
        if tokenizer is None:
            tokenizer = get_tokenizer(d.tokenizer, corpus=corpus)
        valid = get_packed(corpus, d.valid_split, tokenizer, seq_len=d.seq_len, wrap=d.wrap,
                           eos_between_docs=d.eos_between_docs, remainder=d.remainder)
        n = min(valid.rows, batches * batch_size)
        console().log(f"scoring {n} of {valid.rows} {d.valid_split} rows of {d.corpus} with K={mc_samples}")
        audit = checkpoint_audit(model, valid.input_ids[:n], valid.attention_mask[:n], num_samples=mc_samples,
                                 batch_size=batch_size, seed=seed, name=f"{d.corpus}:{d.valid_split}")
        audit = dataclasses.replace(audit, protocol={**audit.protocol, "checkpoint": str(checkpoint), "corpus": d.corpus,
                                                     "split": d.valid_split, "tokenizer": d.tokenizer})
    record = audit.to_record(checkpoint=checkpoint, cfg=cfg)
    if out is not None:
        from harness.records import write_record

        console().log(f"record written to {write_record(record, out)}")
    if as_json:
        click.echo(json.dumps(record, default=str))
        return
    out = Console(width=220)
    out.print(_table(audit))
    summary = _summary(audit)
    if summary:
        out.print(summary)


COMMANDS = [bound_cmd]
