"""An lm-eval ``LM`` for every primebench family: exact for the ARM, a Monte-Carlo bound otherwise.

:class:`PrimebenchLM` answers lm-eval's three request types (``Instance.args``):

``loglikelihood`` (context, continuation) -> (log p, is_greedy)
    The row is ``[BOS] context continuation``. ARM: the exact sum of log p(x^i | x^{<i}) over the
    continuation tokens (nats); ``is_greedy`` says the argmax is right at every continuation
    position. Diffusion families (mdlm, masked, prime): the NELBO of the continuation given the
    context, i.e. an upper bound on -log p(continuation | context) under the family's any-order
    sampler, returned negated (a lower bound on log p). Only continuation units are ever masked;
    the context is always visible. K = ``mc_samples`` corruptions per request, stratified over K:

    * mdlm / masked: the mask-count estimator (Zheng et al. Prop. 3.1) over the continuation's N
      tokens, n ~ U{1..N} masked exactly, weight N / n; or MDLM's time draw (``time_sampler="t"``,
      weight -alpha'_t / (1 - alpha_t), t in [1e-3, 1]). Default ``n`` for time-independent
      networks (lower variance), ``t`` for time-conditioned ones (``n`` needs no time input).
    * prime: the sub-token bound (``prime.bounds.subtoken_nll_terms``, marginals of the restricted
      joint) over the continuation's N = ell * tokens sub-tokens, with the same two draws.

    ``is_greedy`` for diffusion families follows the MDLM/DUO lm-eval practice: one forward pass
    with the whole continuation masked, and the per-position argmax must equal the continuation.
    It is a check of the one-step denoiser, not of any sampler, so accuracies built on it are
    estimates.

``loglikelihood_rolling`` (string,) -> log p of the whole string, every token scored once
    ARM: lm-eval's windows (``get_rolling_token_windows`` with BOS as the prefix token, windows of
    the model's length L, ``context_len=1``, then ``make_disjoint_window``), as HF models in
    lm-eval do; exact. Diffusion: disjoint windows ``[BOS] chunk`` with chunks of L - 1 tokens,
    each scored with the bound above (the chunk is the continuation, BOS the context); the sum of
    the windows' bounds bounds -log of the product of the windows' likelihoods.

``generate_until`` (context, gen_kwargs) -> text
    The family's default sampler (or ``sampler``) via :func:`harness.sampling.generate`, with
    ``prefix = [BOS] context``. The canvas is the context plus exactly ``max_gen_toks`` positions
    (from ``gen_kwargs``, else the adapter's default 32): diffusion samplers fill a fixed-length
    canvas (as LLaDA-style adapters do); the ARM stops after ``max_gen_toks`` tokens. The text is
    cut at the first EOS token and at the first ``until`` stop string. Temperature, nucleus,
    steps and precision are the adapter's settings; ``do_sample``/``temperature`` keys in
    ``gen_kwargs`` are not applied (recorded in ``stats.ignored_gen_kwargs``).

Tokenization: context and continuation are encoded separately with the model's tokenizer, after
moving trailing whitespace of the context to the front of the continuation (lm-eval passes
``context="... the"``, ``continuation=" word"``, and BPE tokens carry their leading space). A
context that does not fit is cut from the left (BOS is kept: every training row starts with it),
and counted in ``stats``; a continuation that cannot fit raises :class:`PrimebenchError`, never a
sentinel score.

Randomness: each request's draws come from its own generator, seeded from ``seed`` and the
request's token ids, so a request gets the same number whatever its batch, order or batch size.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

import torch
from lm_eval.api.model import LM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from harness import diffusion
from harness.errors import PrimebenchError

DEFAULT_MAX_GEN_TOKS = 32
REQUEST_TYPES = ("loglikelihood", "loglikelihood_rolling", "generate_until")


@dataclass(frozen=True)
class Item:
    """One row to score: ``tokens`` (given prefix then the scored continuation of ``n_cont``)."""

    tokens: tuple[int, ...]
    n_cont: int


@dataclass(frozen=True)
class Score:
    """Nats of one scored continuation (exact for the ARM, a bound otherwise) with its MC stderr."""

    nats: float
    stderr: float
    greedy: bool | None


@dataclass
class AdapterStats:
    """What the adapter did, for the record: requests per type, truncations, forward rows."""

    requests: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REQUEST_TYPES, 0))
    truncated_requests: int = 0
    truncated_tokens: int = 0
    rolling_windows: int = 0
    forward_rows: int = 0
    generated_tokens: int = 0
    ignored_gen_kwargs: set[str] = field(default_factory=set)

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests),
            "truncated_requests": self.truncated_requests,
            "truncated_context_tokens": self.truncated_tokens,
            "rolling_windows": self.rolling_windows,
            "forward_rows": self.forward_rows,
            "generated_tokens": self.generated_tokens,
            "ignored_gen_kwargs": sorted(self.ignored_gen_kwargs),
        }


def split_context(context: str, continuation: str) -> tuple[str, str]:
    """Move trailing whitespace of ``context`` to the start of ``continuation`` (lm-eval's HF rule)."""
    n = len(context) - len(context.rstrip())
    if n:
        return context[:-n], context[-n:] + continuation
    return context, continuation


def _seed_of(seed: int, tokens: tuple[int, ...], n_cont: int, salt: str) -> int:
    digest = hashlib.sha256(f"{seed}\0{salt}\0{n_cont}\0{','.join(map(str, tokens))}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def canvas_view(model, length: int):
    """A shallow copy of ``model`` whose ``seq_len`` is ``length`` (<= the model's), sharing weights.

    The samplers draw rows of ``model.seq_len`` positions; this is how a generation request gets a
    canvas of exactly context + max_gen_toks positions without touching the samplers.
    """
    if not 1 <= length <= model.seq_len:
        raise ValueError(f"canvas length {length} must lie in [1, {model.seq_len}]")
    view = copy.copy(model)
    view.seq_len = int(length)
    return view


class PrimebenchLM(LM):
    """lm-eval model over a primebench ``(model, tokenizer)``; see the module docstring.

    ``mc_samples``: K corruptions per request (diffusion; ignored by the ARM). ``batch_size``:
    rows per forward pass. ``time_sampler``: "n" (mask count) or "t" (MDLM time), default "n" for
    time-independent networks. ``sampler``/``steps``/``temperature``/``nucleus_p``/``dtype``: for
    ``generate_until`` (``steps`` defaults to the canvas's generated length for step samplers).
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        mc_samples: int = 32,
        batch_size: int = 16,
        seed: int = 0,
        time_sampler: str | None = None,
        sampler: str | None = None,
        steps: int | None = None,
        temperature: float = 1.0,
        nucleus_p: float = 1.0,
        dtype: str = "float64",
        max_gen_toks: int = DEFAULT_MAX_GEN_TOKS,
    ):
        super().__init__()
        if tokenizer is None:
            raise PrimebenchError("the lm-eval adapter needs the model's tokenizer",
                                  fix="load the checkpoint with its tokenizer folder, or pass the tokenizer")
        if tokenizer.vocab_size != model.vocab_size:
            raise PrimebenchError(
                f"tokenizer {tokenizer.spec!r} has {tokenizer.vocab_size} ids but the model predicts {model.vocab_size}",
                fix="pass the tokenizer the model was trained with")
        for name, value in (("mc_samples", mc_samples), ("batch_size", batch_size), ("max_gen_toks", max_gen_toks)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PrimebenchError(f"{name} must be a positive integer, got {value!r}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.family = model.family
        self.is_arm = model.family == "arm"
        self.mc_samples = int(mc_samples)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        time_conditioned = bool(getattr(model, "time_conditioning", False))
        self.time_sampler = None if self.is_arm else (time_sampler or ("t" if time_conditioned else "n"))
        if self.time_sampler not in (None, "t", "n"):
            raise PrimebenchError(f"unknown time sampler {time_sampler!r}", fix="use 'n' (mask count) or 't' (MDLM time)")
        if self.time_sampler == "n" and time_conditioned:
            raise PrimebenchError("the mask-count estimator needs a time-independent network; this one is time-conditioned",
                                  fix="use time_sampler='t'")
        self.sampler = sampler
        self.steps = steps
        self.temperature = temperature
        self.nucleus_p = nucleus_p
        self.dtype = dtype
        self.max_gen_toks = int(max_gen_toks)
        self.stats = AdapterStats()

    # -- what the numbers are -------------------------------------------------------------------
    @property
    def kind(self) -> str:
        """"exact" for the ARM, "bound" for the diffusion families' log-likelihoods."""
        return "exact" if self.is_arm else "bound"

    @property
    def capacity(self) -> int:
        """Most tokens in one scored row: L + 1 for the ARM (its input is the row minus the last token), L otherwise."""
        return self.model.seq_len + 1 if self.is_arm else self.model.seq_len

    def describe(self) -> dict[str, Any]:
        """The estimator, in words and settings, for the record's protocol."""
        if self.is_arm:
            return {"kind": "exact", "estimator": "sum of log p(x^i | BOS, context, x^{<i}) over the continuation tokens",
                    "mc_samples": None}
        draw = {"n": "mask count n ~ U{1..N} over the continuation's N units, exactly n masked, weight N/n",
                "t": "MDLM time t in [1e-3, 1], continuation units masked w.p. 1 - alpha_t, weight -alpha'_t/(1-alpha_t)"}
        units = (f"sub-token bound (marginals of the restricted joint) over ell={self.model.ell} sub-tokens per token"
                 if self.family == "prime" else "masked-token cross-entropy (SUBS)")
        return {
            "kind": "bound",
            "estimator": f"{units}; {draw[self.time_sampler]}; context never masked; K samples stratified over K",
            "time_sampler": self.time_sampler,
            "mc_samples": self.mc_samples,
            "greedy": "argmax of one forward pass with the whole continuation masked (MDLM/DUO practice)",
        }

    # -- lm-eval API ----------------------------------------------------------------------------
    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        self.stats.requests["loglikelihood"] += len(requests)
        items = [self.pair_item(*req.args[:2], where=_describe_request(i, req)) for i, req in enumerate(requests)]
        scores = self.score(items, greedy=True)
        return [(-s.nats, bool(s.greedy)) for s in scores]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        self.stats.requests["loglikelihood_rolling"] += len(requests)
        windows: list[Item] = []
        owner: list[int] = []
        for i, req in enumerate(requests):
            (text,) = req.args[:1]
            for item in self.rolling_items(self.tokenizer.encode(text)):
                windows.append(item)
                owner.append(i)
        self.stats.rolling_windows += len(windows)
        scores = self.score(windows, greedy=False)
        totals = [0.0] * len(requests)
        for i, s in zip(owner, scores):
            totals[i] -= s.nats
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        self.stats.requests["generate_until"] += len(requests)
        return [self._generate_one(i, req) for i, req in enumerate(requests)]

    # -- building rows --------------------------------------------------------------------------
    def pair_item(self, context: str, continuation: str, *, where: str = "request") -> Item:
        """The row ``[BOS] context continuation`` (context cut from the left to fit), continuation scored."""
        context, continuation = split_context(context, continuation)
        ctx = self.tokenizer.encode(context) if context else []
        cont = self.tokenizer.encode(continuation)
        if not cont:
            raise PrimebenchError(f"{where}: the continuation {continuation!r} encodes to no tokens",
                                  fix="the task must give a non-empty target")
        room = self.capacity - 1 - len(cont)  # BOS always leads the row
        if room < 0:
            raise PrimebenchError(
                f"{where}: the continuation has {len(cont)} tokens but a {self.family} row of seq_len "
                f"{self.model.seq_len} holds at most {self.capacity - 1} after BOS (context had {len(ctx)} tokens)",
                fix="evaluate with a model of longer seq_len, or a task with shorter targets")
        if len(ctx) > room:
            self.stats.truncated_requests += 1
            self.stats.truncated_tokens += len(ctx) - room
            ctx = ctx[len(ctx) - room:]
        return Item(tokens=(self.tokenizer.bos_id, *ctx, *cont), n_cont=len(cont))

    def rolling_items(self, tokens: list[int]) -> list[Item]:
        """The windows that score each token of ``tokens`` exactly once (see the module docstring)."""
        if not tokens:
            return []
        L = self.model.seq_len
        if self.is_arm:
            pairs = get_rolling_token_windows(tokens, prefix_token=self.tokenizer.bos_id, max_seq_len=L, context_len=1)
            out = []
            for ctx, cont in map(make_disjoint_window, pairs):
                out.append(Item(tokens=(*ctx, *cont), n_cont=len(cont)))
            return out
        chunk = L - 1
        return [Item(tokens=(self.tokenizer.bos_id, *tokens[s:s + chunk]), n_cont=len(tokens[s:s + chunk]))
                for s in range(0, len(tokens), chunk)]

    # -- scoring --------------------------------------------------------------------------------
    @torch.no_grad()
    def score(self, items: list[Item], *, greedy: bool) -> list[Score]:
        """Nats of each item's continuation: exact (ARM) or the K-sample bound (diffusion)."""
        if not items:
            return []
        from harness.logging import console

        rows = len(items) * (1 if self.is_arm else self.mc_samples + int(greedy))
        console().log(f"lm-eval adapter ({self.family}): {len(items)} continuations to score, {rows} forward rows")
        if self.is_arm:
            return self._arm_scores(items)
        nats, stderr = self._diffusion_bounds(items)
        checks = self._diffusion_greedy(items) if greedy else [None] * len(items)
        return [Score(n, s, g) for n, s, g in zip(nats, stderr, checks)]

    def _arm_scores(self, items: list[Item]) -> list[Score]:
        m, pad = self.model, self.tokenizer.pad_id
        order = sorted(range(len(items)), key=lambda i: -len(items[i].tokens))
        out: list[Score | None] = [None] * len(items)
        for start in range(0, len(order), self.batch_size):
            batch = [items[i] for i in order[start:start + self.batch_size]]
            T = max(len(it.tokens) for it in batch) - 1
            inp = torch.full((len(batch), T), pad, dtype=torch.long)
            tgt = torch.full((len(batch), T), pad, dtype=torch.long)
            attn = torch.zeros(len(batch), T, dtype=torch.long)
            scored = torch.zeros(len(batch), T, dtype=torch.bool)
            for r, it in enumerate(batch):
                n = len(it.tokens) - 1
                row = torch.tensor(it.tokens, dtype=torch.long)
                inp[r, :n], tgt[r, :n], attn[r, :n] = row[:-1], row[1:], 1
                scored[r, n - it.n_cont:n] = True
            dev = m.device
            inp, tgt, attn, scored = inp.to(dev), tgt.to(dev), attn.to(dev), scored.to(dev)
            log_p = m.log_probs(inp, None, attn)  # (B, T, C): position i predicts token i + 1
            self.stats.forward_rows += len(batch)
            true = log_p.gather(-1, tgt[..., None]).squeeze(-1)
            nats = -torch.where(scored, true, torch.zeros_like(true)).double().sum(-1)
            hit = ((log_p.argmax(-1) == tgt) | ~scored).all(-1)
            for r, i in enumerate(order[start:start + self.batch_size]):
                out[i] = Score(float(nats[r]), 0.0, bool(hit[r]))
        return out  # type: ignore[return-value]

    def _units(self, x: torch.Tensor) -> torch.Tensor:
        """(B, n) token ids -> the family's units: (B, n) tokens, or (B, n, ell) Prime sub-tokens."""
        return self.model.encode(x) if self.family == "prime" else x

    def _diffusion_rows(self, items: list[Item]):
        """Yield (item index, clean units, corrupted units, masked, weight, t) per MC row, K per item."""
        m, K = self.model, self.mc_samples
        for i, it in enumerate(items):
            g = torch.Generator().manual_seed(_seed_of(self.seed, it.tokens, it.n_cont, "mc"))
            x = torch.tensor(it.tokens, dtype=torch.long)[None]
            units = self._units(x)
            clean = units.expand(K, *units.shape[1:])
            valid = torch.zeros(1, x.shape[1], dtype=torch.bool)
            valid[:, x.shape[1] - it.n_cont:] = True
            if self.family == "prime":
                valid = valid[..., None].expand(1, x.shape[1], m.ell)
            valid = valid.expand(K, *valid.shape[1:])
            u = diffusion.stratified_uniform(1, K, generator=g)[0]
            z_t, masked, weight, t = diffusion.corrupt(
                clean, u, valid, sampler=self.time_sampler, schedule=m.schedule, mask_id=m.mask_id,
                generator=g, time_conditioning=bool(getattr(m, "time_conditioning", False)),
            )
            for k in range(K):
                yield i, clean[k], z_t[k], masked[k], float(weight[k]), None if t is None else float(t[k])

    def _forward_units(self, z_rows: list[torch.Tensor], t: list[float] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-pad unit rows, run the denoiser with padding hidden, return (log_p (B, T, C), attn)."""
        m = self.model
        T = max(z.shape[0] for z in z_rows)
        pad_units = self._units(torch.tensor([[self.tokenizer.pad_id]]))[0, 0]
        z = pad_units.expand(len(z_rows), T, *pad_units.shape).clone()
        attn = torch.zeros(len(z_rows), T, dtype=torch.long)
        for r, row in enumerate(z_rows):
            z[r, : row.shape[0]] = row
            attn[r, : row.shape[0]] = 1
        tt = None if t is None else torch.tensor(t, dtype=torch.float32, device=m.device)
        self.stats.forward_rows += len(z_rows)
        return m.log_probs(z.to(m.device), tt, attn.to(m.device)), attn.to(m.device)

    def _row_nats(self, log_p: torch.Tensor, clean_rows: list[torch.Tensor], masked_rows: list[torch.Tensor]) -> torch.Tensor:
        """(B,) float64: sum over masked units of -log p(true unit | z_t) (token or sub-token marginal)."""
        B, T = log_p.shape[:2]
        shape = (B, T, *clean_rows[0].shape[1:])
        clean = torch.zeros(shape, dtype=torch.long)
        masked = torch.zeros(shape, dtype=torch.bool)
        for r, (c, mk) in enumerate(zip(clean_rows, masked_rows)):
            clean[r, : c.shape[0]], masked[r, : mk.shape[0]] = c, mk
        clean, masked = clean.to(log_p.device), masked.to(log_p.device)
        if self.family == "prime":
            from prime.bounds import subtoken_nll_terms

            terms = subtoken_nll_terms(log_p, clean, masked, self.model.base, self.model.ell)  # (B, T)
        else:
            true = log_p.gather(-1, clean[..., None]).squeeze(-1)
            terms = torch.where(masked, -true, torch.zeros_like(true))
        return terms.double().sum(-1)

    def _diffusion_bounds(self, items: list[Item]) -> tuple[list[float], list[float]]:
        K = self.mc_samples
        estimates = torch.zeros(len(items), K, dtype=torch.float64)
        filled = [0] * len(items)
        batch: list[tuple] = []

        def flush() -> None:
            times = None if batch[0][5] is None else [b[5] for b in batch]
            log_p, _ = self._forward_units([b[2] for b in batch], times)
            nats = self._row_nats(log_p, [b[1] for b in batch], [b[3] for b in batch]).cpu()
            for r, b in enumerate(batch):
                estimates[b[0], filled[b[0]]] = b[4] * nats[r]
                filled[b[0]] += 1
            batch.clear()

        for row in self._diffusion_rows(items):
            batch.append(row)
            if len(batch) == self.batch_size:
                flush()
        if batch:
            flush()
        mean, stderr = diffusion.summarize_samples(estimates)
        if not bool(torch.isfinite(mean).all()):
            bad = int((~torch.isfinite(mean)).nonzero()[0])
            raise PrimebenchError(f"the bound of request {bad} is not finite ({float(mean[bad])})",
                                  fix="the model assigns zero probability to a continuation token; check the checkpoint")
        return mean.tolist(), stderr.tolist()

    def _diffusion_greedy(self, items: list[Item]) -> list[bool]:
        """Whether the argmax of one pass with the whole continuation masked equals the continuation."""
        m = self.model
        out: list[bool] = []
        for start in range(0, len(items), self.batch_size):
            batch = items[start:start + self.batch_size]
            z_rows = []
            for it in batch:
                z = self._units(torch.tensor(it.tokens, dtype=torch.long)[None])[0].clone()
                z[len(it.tokens) - it.n_cont:] = m.mask_id
                z_rows.append(z)
            times = [1.0] * len(batch) if getattr(m, "time_conditioning", False) else None
            log_p, _ = self._forward_units(z_rows, times)
            guess = log_p.argmax(-1).cpu()
            for r, it in enumerate(batch):
                n = len(it.tokens)
                out.append(bool((guess[r, n - it.n_cont:n] == torch.tensor(it.tokens[n - it.n_cont:])).all()))
        return out

    # -- generation -----------------------------------------------------------------------------
    def _generate_one(self, index: int, request) -> str:
        from harness.sampling import SAMPLERS, generate, sampler_for

        context, gen_kwargs = request.args[0], dict(request.args[1] or {})
        until = gen_kwargs.pop("until", None) or []
        until = [until] if isinstance(until, str) else list(until)
        G = int(gen_kwargs.pop("max_gen_toks", self.max_gen_toks))
        self.stats.ignored_gen_kwargs.update(gen_kwargs)
        L = self.model.seq_len
        where = _describe_request(index, request)
        if G < 1 or 1 + G > L:
            raise PrimebenchError(f"{where}: max_gen_toks={G} does not fit after BOS in a row of seq_len {L}",
                                  fix=f"use max_gen_toks <= {L - 1} (gen_kwargs) or a model with a longer seq_len")
        ctx = self.tokenizer.encode(context) if context else []
        room = L - 1 - G
        if len(ctx) > room:
            self.stats.truncated_requests += 1
            self.stats.truncated_tokens += len(ctx) - room
            ctx = ctx[len(ctx) - room:]
        prefix = torch.tensor([[self.tokenizer.bos_id, *ctx]], dtype=torch.long)
        P = prefix.shape[1]
        name = self.sampler or sampler_for(self.model)
        steps = (self.steps or G) if SAMPLERS.get(name).uses_steps else None
        seed = _seed_of(self.seed, tuple(prefix[0].tolist()), G, "generate")
        out = generate(
            canvas_view(self.model, P + G), name, num_samples=1, batch_size=1, steps=steps,
            temperature=self.temperature, nucleus_p=self.nucleus_p, dtype=self.dtype,
            generator=torch.Generator(device=self.model.device).manual_seed(seed), prefix=prefix,
        )
        new = out.tokens[0, P:P + G].tolist()
        if self.tokenizer.eos_id in new:
            new = new[: new.index(self.tokenizer.eos_id)]
        self.stats.generated_tokens += len(new)
        return cut_at_stops(self.tokenizer.decode(new), until)


def cut_at_stops(text: str, until: list[str]) -> str:
    """``text`` up to (not including) the earliest occurrence of any stop string."""
    cut = len(text)
    for stop in until:
        if stop:
            at = text.find(stop)
            if at != -1:
                cut = min(cut, at)
    return text[:cut]


def _describe_request(index: int, request) -> str:
    task = getattr(request, "task_name", None)
    doc = getattr(request, "doc_id", None)
    return f"request {index}" + (f" (task {task!r}, doc {doc})" if task is not None else "")


__all__ = ["AdapterStats", "Item", "PrimebenchLM", "Score", "canvas_view", "cut_at_stops", "split_context"]
