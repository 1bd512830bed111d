"""Bench stages 2-4, the network's cost: the backbone forward and one training step as fractions of
the GEMM ceiling, each family's NLL per Monte-Carlo sample against the ARM's exact NLL, and DUEL's
cost in forward passes."""

from __future__ import annotations

import copy
import math
import statistics

import torch
from torch import nn

from harness.backbone import Backbone, BackboneConfig
from harness.bench.measure import C_GPT2, Figure, PeakRSS, block_matmuls, median_time, minor_faults, sync_for
from harness.evaluation.duel import Policy, duel_nll
from harness.models import build_model, family_class, family_names
from harness.resources import inference_for_model, training_step_bytes
from harness.sampling import generate
from harness.training import EMA, make_optimizer


def backbone_flops(B: int, L: int, d: int, layers: int, vocab_out: int) -> int:
    """Matmul FLOPs of one forward: blocks (GEMMs and attention) and the output projection."""
    per_block = sum(2 * m * k * n for m, k, n in block_matmuls(B * L, d)) + 4 * B * L * L * d
    return layers * per_block + 2 * B * L * d * vocab_out


def _our_backbone(B, L, d, layers, heads, vocab, device):

    net = (
        Backbone(
            BackboneConfig(vocab_in=vocab + 1, vocab_out=vocab, seq_len=L, d_model=d, n_layers=layers, n_heads=heads)
        )
        .to(device)
        .eval()
    )
    return net, torch.randint(0, vocab, (B, L), device=device)


def forward_figures(*, B=8, L=256, d=512, layers=8, heads=8, vocab=1000, repeats=5, ceiling: float, device="cpu"):
    """Stage 2: the forward of our backbone (batch ``B``, length ``L``, width ``d``) and of
    ``nn.TransformerEncoder`` of the same size, each as a fraction of ``ceiling`` (FLOP/s, from
    :func:`harness.bench.measure.gemm_throughput`), and their ratio; then the same ratio for a twin of
    our backbone with the encoder's erf GELU in place of MDLM's tanh form (a diagnostic: how much of
    the difference is the activation's CPU kernel). Ours and the encoder are timed in four blocks of
    ``repeats`` (ours, the encoder, the encoder, ours), each the mean of its two block medians. Returns
    four :class:`Figure`."""
    net, ids = _our_backbone(B, L, d, layers, heads, vocab, device)
    ref = (
        nn.TransformerEncoder(
            nn.TransformerEncoderLayer(
                d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
            ),
            layers,
            enable_nested_tensor=False,
        )
        .to(device)
        .eval()
    )
    h = torch.randn(B, L, d, device=device)
    erf = copy.deepcopy(net)  # a diagnostic twin, same weights: the encoder's activation in place of MDLM's
    for block in erf.blocks:
        block.mlp[1].approximate = "none"
    with torch.no_grad():
        # ours, theirs, theirs, ours (each a block of repeats): a linear drift of a shared machine cancels
        sync = sync_for(device)
        run_ours, run_theirs = lambda: net(ids), lambda: ref(h)
        a1, b1, b2, a2 = (median_time(f, repeats, sync=sync) for f in (run_ours, run_theirs, run_theirs, run_ours))
        ours, theirs = (a1 + a2) / 2, (b1 + b2) / 2
        twin = median_time(lambda: erf(ids), repeats, sync=sync)
        faults_ours, faults_ref = minor_faults(lambda: net(ids)), minor_faults(lambda: ref(h))
    flops_ours = backbone_flops(B, L, d, layers, vocab)
    flops_ref = backbone_flops(B, L, d, layers, 0)
    frac_ours, frac_ref = flops_ours / ours / ceiling, flops_ref / theirs / ceiling
    shape = {"batch": B, "seq_len": L, "d_model": d, "n_layers": layers, "n_heads": heads, "vocab_out": vocab}
    return [
        Figure(
            "forward: backbone / GEMM ceiling",
            frac_ours,
            "fraction",
            ">= 0.70",
            frac_ours >= 0.70,
            dict(shape, seconds=ours, gflops=flops_ours / 1e9, page_faults_per_forward=faults_ours),
        ),
        Figure(
            "forward: nn.TransformerEncoder / GEMM ceiling",
            frac_ref,
            "fraction",
            None,
            None,
            dict(shape, seconds=theirs, gflops=flops_ref / 1e9, page_faults_per_forward=faults_ref),
        ),
        Figure(
            "forward: backbone over nn.TransformerEncoder (same FLOPs basis)",
            frac_ours / frac_ref,
            "ratio",
            ">= 1.00",
            frac_ours / frac_ref >= 1.0,
            {"block_seconds": {"ours": [a1, a2], "encoder": [b1, b2]}},
        ),
        Figure(
            "forward: backbone with erf GELU over nn.TransformerEncoder (diagnostic: the activation's share)",
            theirs / twin * flops_ours / flops_ref,
            "ratio",
            None,
            None,
            {"seconds": twin, "note": "not the model: MDLM's checkpoints need the tanh GELU"},
        ),
    ]


def train_step_figure(*, B=8, L=256, d=512, layers=8, heads=8, vocab=1000, repeats=3, ceiling: float, device="cpu"):
    """Stage 3: a training step of MDLM as the trainer runs it (loss, backward, clip, AdamW, EMA) as a
    fraction of ``ceiling`` (FLOP/s), counting 3x the forward FLOPs. Returns one :class:`Figure`."""

    model = build_model("mdlm", vocab_size=vocab, seq_len=L, d_model=d, n_layers=layers, n_heads=heads).to(device)
    model.train()
    opt = make_optimizer(model, lr=3e-4, weight_decay=0.0)
    ema = EMA(model, 0.9999)
    x = torch.randint(0, vocab, (B, L), device=device)
    g = torch.Generator(device=device).manual_seed(0)

    def step():
        opt.zero_grad(set_to_none=True)
        model.loss(x, generator=g).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        ema.update(model)

    estimate = training_step_bytes(
        batch=B,
        seq_len=L,
        d=d,
        layers=layers,
        heads=heads,
        vocab_in=vocab + 1,
        vocab_out=vocab,
        attention_matrix=not str(device).startswith("cuda"),
    )
    seconds = median_time(step, repeats, sync=sync_for(device))
    flops = 3 * backbone_flops(B, L, d, layers, vocab)
    frac = flops / seconds / ceiling
    return Figure(
        "train step / GEMM ceiling (3x forward FLOPs)",
        frac,
        "fraction",
        ">= 0.50",
        frac >= 0.50,
        {
            "seconds": seconds,
            "batch": B,
            "seq_len": L,
            "d_model": d,
            "n_layers": layers,
            "optimizer": "AdamW (foreach)",
            "clip": "foreach",
            "ema": "foreach",
            "memory_estimate_mib": estimate.total / 2**20,
        },
    )


def nll_cost_figures(*, B=4, L=256, d=256, layers=4, heads=4, C=C_GPT2, repeats=3, device="cpu"):
    """Stage 4: ``model.nll`` of every registered Monte-Carlo family, under each of its
    :meth:`~harness.models.base.ModelFamily.bench_variants` (Prime at ell 2 and 4, BD3-LM in blocks of
    16), per Monte-Carlo sample over the exact family's NLL (the ARM), same backbone size, ``C``
    classes. Returns the ARM's seconds, then one ratio per setting, each against its family's
    ``bench_nll_cost_target`` (BD3-LM's network reads 2L positions and scores L, so 2.5x, not 1.25x).
    Each ratio divides by the ARM timed again right after that family, so a shared machine's slow
    drifts cancel; the ARM's figure is the median of all its timings."""

    common = dict(vocab_size=C, seq_len=L, d_model=d, n_layers=layers, n_heads=heads)
    x0 = torch.randint(0, C, (B, L), generator=torch.Generator().manual_seed(0)).to(device)
    seconds, beside = {}, {}
    families = sorted(family_names(), key=lambda name: (family_class(name).table_order, name))
    exact = [n for n in families if not family_class(n).uses_time_sampler]  # the reference: an exact NLL
    cases = [
        (n, keys)
        for n in exact[:1] + [n for n in families if n not in exact]
        for keys in family_class(n).bench_variants()
    ]
    targets = {}
    for family, extra in cases:
        model = build_model(family, **dict(common, **extra)).to(device).eval()
        label = family + "".join(f" {k.split('_')[0]}={v}" for k, v in extra.items())
        targets[label] = model.bench_nll_cost_target

        def run(model=model):
            if model.uses_time_sampler:  # one Monte-Carlo corruption
                model.nll(x0, num_samples=1, generator=torch.Generator(device=device).manual_seed(1))
            else:
                model.nll(x0)

        seconds[label] = median_time(run, repeats, sync=sync_for(device))
        if label == cases[0][0]:
            arm_run, arm_times = run, [seconds[label]]
        else:  # the ARM again, right after: a shared machine's slow drifts cancel in the ratio
            beside[label] = median_time(arm_run, repeats, sync=sync_for(device))
            arm_times.append(beside[label])
    out = []
    for label, s in seconds.items():
        if label == cases[0][0]:
            detail = {"C": C, "batch": B, "seq_len": L, "note": "median over the ARM's timings beside each family"}
            arm = statistics.median(arm_times)
            out.append(Figure("nll: ARM exact NLL per forward", arm, "seconds", None, None, detail))
            continue
        ratio, target = s / beside[label], targets[label]
        out.append(
            Figure(
                f"nll: {label} per Monte-Carlo sample / ARM exact",
                ratio,
                "ratio",
                f"<= {target}",
                ratio <= target,
                {"seconds": s, "arm_seconds_beside": beside[label]},
            )
        )
    return out + _duel_figures(cases, common, x0, seconds, repeats=repeats, device=device)


def _duel_figures(cases, common, x0, seconds, *, repeats: int, device, tokens: int = 16) -> list[Figure]:
    """DUEL's cost (:mod:`harness.evaluation.duel`) on the first masked family's plain setting: a row
    scored under the confidence policy revealing ``tokens`` per pass, over one Monte-Carlo sample of
    that family's bound. It takes ceil(L / tokens) forward passes, so the target is that many bound
    samples, with the bound's own 1.25x allowance for the policy's ranking."""

    masked = [(n, keys) for n, keys in cases if family_class(n).forward_process == "absorbing" and not keys]
    if not masked:
        return []
    family = masked[0][0]
    model = build_model(family, **common).to(device).eval()
    policy = Policy("confidence", tokens=tokens)
    passes = math.ceil(x0.shape[1] / tokens)
    duel = median_time(lambda: duel_nll(model, x0, policy), repeats, sync=sync_for(device))
    ratio = duel / seconds[family]
    return [
        Figure(
            f"nll: DUEL on {family} (confidence, {tokens} tokens per pass) / one Monte-Carlo sample of its bound",
            ratio,
            "ratio",
            f"<= {1.25 * passes:g} ({passes} passes)",
            ratio <= 1.25 * passes,
            {"seconds": duel, "forward_passes": passes, "tokens_per_pass": tokens},
        )
    ]


def inference_memory_figures(*, B=8, L=256, d=256, layers=4, heads=4, vocab=C_GPT2, device="cpu"):
    """The memory estimate that ``eval`` and the samplers check before they start
    (:func:`harness.resources.inference_for_model`) beside what the work measurably adds: the growth of
    the process's resident memory (CUDA: of the allocator's peak) during one evaluation batch (MDLM's
    NLL, one Monte-Carlo sample) and one sampler run (4 ancestral steps in float64) of ``B`` rows of
    ``L`` tokens. The estimate is meant to lie on the upper side: the mark says whether it does."""

    model = build_model("mdlm", vocab_size=vocab, seq_len=L, d_model=d, n_layers=layers, n_heads=heads).to(device)
    model.eval()
    x = torch.randint(0, vocab, (B, L), generator=torch.Generator().manual_seed(0)).to(device)
    cuda = str(device).startswith("cuda")
    cases = [
        ("an evaluation batch", lambda: model.nll(x, generator=torch.Generator(device=device).manual_seed(0)), False),
        ("a sampler run", lambda: generate(model, num_samples=B, batch_size=B, steps=4, generator=0), True),
    ]
    figures = []
    for what, work, float64 in cases:
        estimate = inference_for_model(model, batch=B, seq_len=L, float64_logits=float64)
        weights = estimate.parts["weights"]  # already resident: the growth is measured over them
        with torch.no_grad():
            work()  # warm-up: lazy initialisation is not the work's memory
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                work()
                torch.cuda.synchronize()
                grown = torch.cuda.max_memory_allocated() - base
            else:
                with PeakRSS() as mem:
                    base = PeakRSS.current()
                    work()
                grown = max(0, mem.peak - base)
        predicted = estimate.total - weights
        figures.append(
            Figure(
                f"memory: {what}, measured growth / estimate",
                grown / predicted,
                "fraction",
                "<= 1 (the estimate on the upper side)",
                predicted >= grown,
                {
                    "estimate_mib": predicted / 2**20,
                    "measured_growth_mib": grown / 2**20,
                    "parts_mib": {k: v / 2**20 for k, v in estimate.parts.items() if k != "weights"},
                    "batch": B,
                    "seq_len": L,
                    "d_model": d,
                    "n_layers": layers,
                    "vocab": vocab,
                },
            )
        )
    return figures
