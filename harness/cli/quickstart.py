"""``primebench quickstart``: the main job on the embedded defaults (what ``make quickstart`` runs).

Stages are skipped when their output already exists (``--force`` redoes them), so a re-run after
an interruption continues where it stopped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click


def _ppl_row(name: str, ckpt: Path, batch_size: int, seed: int) -> dict:
    from harness import load
    from harness.config import replace
    from harness.data import get_corpus, get_packed

    model, tokenizer, cfg = load(ckpt)
    d = cfg.data
    packed = get_packed(
        get_corpus(d.corpus), d.valid_split, tokenizer=tokenizer, seq_len=d.seq_len, wrap=d.wrap,
        eos_between_docs=d.eos_between_docs, remainder=d.remainder,
    )
    from harness.evaluation.ppl import evaluate_nll

    res = evaluate_nll(model, packed.input_ids, packed.attention_mask, batch_size=batch_size, seed=seed)
    return {
        "model": name,
        "family": cfg.model.family,
        "kind": res.kind,
        "nll_nats_per_token": res.nll,
        "stderr": res.stderr,
        "ppl": res.ppl,
        "tokens": res.tokens,
        "sequences": res.sequences,
        "data": f"{d.corpus}:{d.valid_split}",
        "tokenizer": tokenizer.spec,
        "seq_len": d.seq_len,
    }


@click.command("quickstart")
@click.option("--out", type=click.Path(path_type=Path), default=Path("results/runs/quickstart"), show_default=True)
@click.option("--force", is_flag=True, help="Redo stages whose outputs exist.")
@click.option("--json", "as_json", is_flag=True, help="Print the result rows as JSON.")
def quickstart_cmd(out, force, as_json):
    """Train a small ARM on the embedded Wikipedia text and print its exact validation perplexity."""
    import shutil

    from harness.logging import stdout_console
    from rich.table import Table

    from harness.config import load_config
    from harness.logging import console
    from harness.training import train

    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, preset in [("ARM", "quickstart/arm")]:
        ckpt = out / name.lower()
        cfg = load_config(preset)
        if force and ckpt.exists():
            shutil.rmtree(ckpt)
        if (ckpt / "model.safetensors").exists() and (ckpt / "trainer_state.pt").exists():
            state_step = json.loads((ckpt / "train_log.jsonl").read_text().splitlines()[-1])["step"] if (ckpt / "train_log.jsonl").exists() else 0
            if state_step >= cfg.train.steps:
                console().log(f"[quickstart] {name}: trained checkpoint found in {ckpt}, skipping (--force to redo)")
            else:
                console().log(f"[quickstart] {name}: resuming interrupted training in {ckpt}")
                train(cfg, ckpt, resume=True)
        else:
            console().log(f"[quickstart] {name}: training {preset} into {ckpt}")
            train(cfg, ckpt)
        record = out / f"{name.lower()}-ppl.json"
        if record.exists() and not force:
            rows.append(json.loads(record.read_text()))
        else:
            console().log(f"[quickstart] {name}: scoring the validation split")
            row = _ppl_row(name, ckpt, batch_size=32, seed=0)
            record.write_text(json.dumps(row, indent=2))
            rows.append(row)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        table = Table(title="Validation perplexity (wiki-embedded:validation)")
        for col in ("model", "kind", "NLL (nats/token)", "PPL", "tokens", "tokenizer", "L"):
            table.add_column(col)
        for r in rows:
            mark = "" if r["kind"] == "exact" else "<= "
            table.add_row(
                r["model"], r["kind"], f"{mark}{r['nll_nats_per_token']:.4f} ± {r['stderr']:.4f}",
                f"{mark}{r['ppl']:.2f}", f"{int(r['tokens'])}", r["tokenizer"], str(r["seq_len"]),
            )
        stdout_console().print(table)
    console().log(f"[quickstart] done in {time.time() - t0:.0f} s; outputs in {out}")


COMMANDS = [quickstart_cmd]
