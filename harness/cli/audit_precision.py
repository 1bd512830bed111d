"""``primebench audit precision CHECKPOINT``: the fp32-versus-fp64 sampling audit (logic in
:mod:`harness.audit.precision`)."""

from __future__ import annotations

import json
import time

import click

from harness.cli.options import int_list




def _table(audit):
    from rich.table import Table

    units = audit.rows[0].units if audit.rows else "nats"
    table = Table(title=f"precision audit: {audit.protocol['sampler']}, method {audit.protocol['method']}, "
                        f"{audit.protocol['num_samples']} samples, seed {audit.protocol['seed']}")
    for name, justify in (("sampler", "left"), ("steps", "right"), ("dtype", "left"),
                          (f"entropy ({units})", "right"), ("± stderr", "right"), ("NFE", "right"),
                          ("idle", "right"), ("wall s/sample", "right")):
        table.add_column(name, justify=justify)
    judged = any(r.gen_ppl is not None for r in audit.rows)
    if judged:
        table.add_column(f"Gen PPL ({audit.protocol.get('judge')})", justify="right")
    for r in audit.rows:
        stderr = "n/a" if r.entropy_stderr != r.entropy_stderr else f"{r.entropy_stderr:.4f}"
        table.add_row(f"{r.sampler}{' (control)' if r.control else ''}", "per unit" if r.steps is None else str(r.steps),
                      r.dtype, f"{r.entropy:.4f}", stderr, f"{r.nfe:.1f}", f"{r.idle_steps:.1f}", f"{r.wall_s:.4f}",
                      *([f"{r.gen_ppl:.2f} ± {r.gen_ppl_stderr:.2f}"] if judged else []))
    return table


@click.command("precision")
@click.argument("checkpoint", type=click.Path(file_okay=False))
@click.option("--steps", default="64,256,1024,4096", show_default=True, help="Sampling steps T, comma-separated.")
@click.option("--samples", default=8, show_default=True, type=click.IntRange(min=1), help="Samples per run.")
@click.option("--dtypes", default="float32,float64", show_default=True, help="Categorical-draw dtypes to compare.")
@click.option("--method", default="mdlm-legacy", show_default=True,
              type=click.Choice(["mdlm-legacy", "gumbel", "race"]), help="Categorical sampling method.")
@click.option("--sampler", default=None, help="Sampler to audit (default: the family's; ancestral for diffusion).")
@click.option("--controls/--no-controls", default=True, show_default=True,
              help="Also run the token-by-token sampler (first-hitting / autoregressive) as a reference.")
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of every run (same in each dtype).")
@click.option("--bits", is_flag=True, help="Entropy in bits instead of nats.")
@click.option("--judge", default=None, help="Also report Gen PPL under this judge (smollm2, an HF causal LM folder, arm:CKPT).")
@click.option("--device", default="cpu", show_default=True, help="torch device for the model and the draws.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Write precision.json and precision.png here.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON record instead of the table.")
def precision_cmd(checkpoint, steps, samples, dtypes, method, sampler, controls, batch_size, seed, bits, judge, device,
                  out_dir, as_json):
    """Same sampler, same seed, fp32 vs fp64: does the sample entropy depend on the draw's precision?"""
    from rich.console import Console

    import harness
    from harness.audit.precision import precision_audit, record, write_outputs
    from harness.logging import console

    step_list = int_list(steps)
    dtype_list = [d.strip() for d in dtypes.split(",") if d.strip()]
    began = time.perf_counter()
    model, tokenizer, cfg = harness.load(checkpoint, device=device)
    the_judge = None
    if judge:
        from harness.judges import load_judge

        the_judge = load_judge(judge, device=device)
    audit = precision_audit(
        model, steps=step_list, num_samples=samples, dtypes=dtype_list, method=method, sampler=sampler,
        controls=controls, batch_size=batch_size, seed=seed, entropy_base=2 if bits else "e",
        bos_id=None if tokenizer is None else tokenizer.bos_id,
        log=lambda message: console().log(message), judge=the_judge, tokenizer=tokenizer,
    )
    wall = time.perf_counter() - began
    if out_dir is not None:
        json_path, png_path = write_outputs(audit, out_dir, checkpoint=checkpoint, wall_s=wall, cfg=cfg)
        console().log(f"wrote {json_path} and {png_path}")
    if as_json:
        click.echo(json.dumps(record(audit, checkpoint=checkpoint, wall_s=wall, cfg=cfg), default=str))
    else:
        Console(width=120).print(_table(audit))


COMMANDS = [precision_cmd]
