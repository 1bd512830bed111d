"""The one meaning of every option name that more than one command takes. Commands declare those
options through :func:`harness.cli.options.option`, which starts each help text with this meaning;
``docs/cli.md`` lists the table, and a test checks every command against it."""

from __future__ import annotations

VOCABULARY: dict[str, str] = {
    "--out": "Output folder (created if missing; checked before any work starts).",
    "--json": "Print JSON on stdout (the record, or the summary) instead of the human-readable output.",
    "--device": "torch device: cpu, cuda, cuda:N or mps (checked before anything loads).",
    "--seed": "Seed of the run.",
    "--seeds": "Number of seeds: seed, seed + 1, ..., seed + N - 1.",
    "--models": "Comma-separated models of the job to train and evaluate [default: all].",
    "--steps": "Sampling steps T.",
    "--train-steps": "Training steps, overriding train.steps (a smoke run; recorded).",
    "--samples": "Generated samples (sequences, images or draws).",
    "--mc-samples": "Monte-Carlo corruptions per sequence (diffusion families; the ARM is exact).",
    "--batch-size": "Sequences per batch.",
    "--seq-len": "Sequence length L in tokens.",
    "--max-rows": "Score only the first N rows (sequences or documents; recorded).",
    "--dtype": "Floating-point precision of the categorical draws.",
    "--method": "Categorical draw method.",
    "--draw": "Ancestral and posterior steps: two-stage (reveal decision, or the posterior's part, in float64, "
    "then the token by inverse CDF; cost follows NFE) or joint (MDLM's draw over C + 1 outcomes, or the whole "
    "posterior, with --method; the reference). Recorded.",
    "--sampler": "Sampler: ancestral, first-hitting, maskgit, remdm, posterior (uniform-state families and GIDD), "
    "self-correction (GIDD's, after the posterior steps), tweedie or euler (SEDD's score samplers) or "
    "autoregressive [default: the family's].",
    "--time-sampler": "Time draw of the likelihood: t (MDLM's time draw) or n (exact mask count, weight N/n) "
    "[default: the family's].",
    "--ema": "Use the EMA weights (as MDLM does) or the raw ones. Recorded.",
    "--carry-over": "Prime: with or without carry-over, overriding the checkpoint [default: as trained]. Recorded.",
    "--judge": "Gen-PPL judge: smollm2 (offline), an HF causal LM folder or name, or arm:CKPT.",
    "--bits": "Entropy in bits instead of nats.",
    "--references": "Score this evaluation's reference rows under the same protocol, into the record's references "
    "(needs the checkpoint's training corpus).",
    "--force": "Redo every stage, even those done with the same config.",
    "--dry-run": "Print the plan (what is trained or loaded, evaluated, and its compute) and stop; works offline.",
    "--checkpoint": "NAME=SRC: use this checkpoint (any source `primebench import` takes) for model NAME; repeatable.",
    "--nproc": "Processes per node: the commands run under torchrun when > 1.",
    "--tflops": "Measured TFLOP/s per GPU (e.g. from `primebench bench --device cuda`), for the hours estimate.",
    "--gpu": "Name of that GPU, for the plan's text.",
    "--tokenizer": "Tokenizer spec (bpe:N, char, gpt2, an HF tokenizer folder, ...).",
}

#: the value type of every shared option (click's name of it), the same in every command that takes
#: it; where a command takes several values, the type of each
TYPES: dict[str, str] = {
    "--out": "path",
    "--json": "boolean",
    "--device": "text",
    "--seed": "integer range",
    "--seeds": "integer range",
    "--models": "choice",
    "--steps": "integer range",
    "--train-steps": "integer range",
    "--samples": "integer range",
    "--mc-samples": "integer range",
    "--batch-size": "integer range",
    "--seq-len": "integer range",
    "--max-rows": "integer range",
    "--dtype": "choice",
    "--method": "choice",
    "--draw": "choice",
    "--sampler": "text",
    "--time-sampler": "choice",
    "--ema": "boolean",
    "--carry-over": "boolean",
    "--judge": "text",
    "--bits": "boolean",
    "--references": "boolean",
    "--force": "boolean",
    "--dry-run": "boolean",
    "--checkpoint": "text",
    "--nproc": "integer range",
    "--tflops": "float range",
    "--gpu": "text",
    "--tokenizer": "text",
}

#: the options that some commands take as several values, and how; every other command takes one
#: value of the same type, and a list given to it is refused by its type
SEVERAL: dict[str, str] = {
    "--steps": "a comma list where the command sweeps T (audit precision, the reproduce sweeps)",
    "--dtype": "a comma list where the command compares precisions (audit precision, audit gumbel)",
    "--method": "a comma list where the command compares draw methods (audit gumbel)",
    "--models": "always a comma list of the job's models",
    "--samples": "one number, or one per model (reproduce precision: mdlm=48,prime=8)",
}

#: options whose meaning changed where no hidden alias could keep the old one
CHANGED_MEANING: dict[str, str] = {
    "reproduce precision --steps": "was the training steps; it is now the sampling steps (the old "
    "`--sampling-steps`), as in every command. Training steps are `--train-steps`.",
    "audit bound --batches N": "counted validation batches; `--max-rows` counts rows. `--batches` still parses "
    "for one release, as N x `--batch-size` rows.",
    "table --out": "was a file; it is now a folder that receives LAYOUT.EXT (ppl.md, ...). A path ending in "
    ".txt, .md, .tex or .csv that is not a folder is still written as that file for one release.",
}
