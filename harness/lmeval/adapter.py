"""An lm-eval ``LM`` for every primebench family: exact for the ARM, a Monte-Carlo bound otherwise.

:class:`PrimebenchLM` answers lm-eval's three request types (``Instance.args``):

``loglikelihood`` (context, continuation) -> (log p, is_greedy)
    The row ``[BOS] context continuation`` is scored by the family's own ``nll`` with only the
    continuation ``corruptible``: the ARM's exact sum of log p(x^i | x^{<i}) over the continuation,
    or the diffusion families' NELBO of the continuation given the always-visible context (an upper
    bound on -log p(continuation | context), returned negated). K = ``mc_samples`` corruptions per
    request, stratified over K; ``is_greedy`` is the family's ``greedy_matches`` (for diffusion the
    argmax of one pass with the whole continuation masked, the MDLM/DUO practice: an estimate).

``loglikelihood_rolling`` (string,) -> log p of the whole string, every token scored once
    Autoregressive families: lm-eval's windows (BOS prefix, windows of L, ``context_len=1``,
    disjoint), exact. Diffusion: disjoint ``[BOS] chunk`` windows of L - 1 tokens, each bounded;
    the sum of the windows' bounds bounds -log of the product of the windows' likelihoods.

``generate_until`` (context, gen_kwargs) -> text
    The family's default sampler (or ``sampler``) on a canvas of the context plus exactly
    ``max_gen_toks`` positions, cut at the first EOS and the first ``until`` string;
    ``do_sample``/``temperature`` keys are recorded in ``stats.ignored_gen_kwargs``, not applied.

Context and continuation are encoded separately after moving the context's trailing whitespace to
the continuation (lm-eval's HF rule). A context that does not fit is cut from the left (BOS kept)
and counted in ``stats``; a continuation that cannot fit is an error, never a sentinel score. Each
request draws from its own generator seeded by its tokens, so a number does not depend on batching.
"""

from __future__ import annotations

from typing import Any

import torch
from lm_eval.api.model import LM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from harness.diffusion import time_sampler_text
from harness.errors import PrimebenchError
from harness.lmeval.requests import (
    DEFAULT_MAX_GEN_TOKS,
    AdapterStats,
    Item,
    Score,
    cut_at_stops,
    describe_request,
    seed_of,
    split_context,
)
from harness.logging import console
from harness.sampling import SAMPLERS, generate, sampler_for


class PrimebenchLM(LM):
    """lm-eval model over a primebench ``(model, tokenizer)``; see the module docstring.

    ``mc_samples``: K corruptions per request (diffusion; ignored by the ARM). ``batch_size``:
    requests per forward pass. ``time_sampler``: "n" (mask count) or "t" (MDLM time), default "n"
    for time-independent networks. ``sampler``/``steps``/``temperature``/``nucleus_p``/``dtype``:
    for ``generate_until`` (``steps`` defaults to the canvas's generated length for step samplers).
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
        draw: str = "two-stage",
    ):
        super().__init__()
        if tokenizer is None:
            raise PrimebenchError(
                "the lm-eval adapter needs the model's tokenizer",
                fix="load the checkpoint with its tokenizer folder, or pass the tokenizer",
            )
        if tokenizer.vocab_size != model.vocab_size:
            raise PrimebenchError(
                f"tokenizer {tokenizer.spec!r} has {tokenizer.vocab_size} ids but the model predicts "
                f"{model.vocab_size}",
                fix="pass the tokenizer the model was trained with",
            )
        for name, value in (("mc_samples", mc_samples), ("batch_size", batch_size), ("max_gen_toks", max_gen_toks)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PrimebenchError(f"{name} must be a positive integer, got {value!r}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.family = model.family
        self.mc_samples = int(mc_samples)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        time_conditioned = bool(model.time_conditioning)
        self.time_sampler = model.time_sampler(time_sampler, unbiased=True)
        if self.time_sampler == "n" and time_conditioned:
            raise PrimebenchError(
                "the mask-count estimator needs a time-independent network; this one is time-conditioned",
                fix="use time_sampler='t'",
            )
        self.sampler = sampler
        self.steps = steps
        self.temperature = temperature
        self.nucleus_p = nucleus_p
        self.dtype = dtype
        self.draw = draw
        self.max_gen_toks = int(max_gen_toks)
        self.stats = AdapterStats()

    # -- what the numbers are -------------------------------------------------------------------
    @property
    def kind(self) -> str:
        """The kind of the log-likelihoods: the family's default estimator's ("exact" or "bound")."""
        return self.model.nll_kind

    @property
    def capacity(self) -> int:
        """Most tokens in one scored row (the ARM's input is the row minus its last token: L + 1)."""
        return self.model.row_capacity

    @property
    def samples_per_request(self) -> int:
        return self.mc_samples if self.model.uses_time_sampler else 1

    def describe(self) -> dict[str, Any]:
        """The estimator, in words and settings, for the record's protocol."""
        est = self.model.estimator()
        if not self.model.uses_time_sampler:
            return {
                "kind": est.kind,
                "estimator": f"{est.description}: the continuation tokens given BOS and the context",
                "mc_samples": None,
            }
        return {
            "kind": est.kind,
            "estimator": f"{est.description}; "
            f"{time_sampler_text(self.time_sampler, self.model.nelbo_block_size)}; "
            "context never masked; "
            "K samples stratified over K",
            **self.model.protocol(),
            "time_sampler": self.time_sampler,
            "mc_samples": self.mc_samples,
            "greedy": "argmax of one forward pass with the whole continuation masked (MDLM/DUO practice)",
        }

    def rolling_description(self) -> str:
        if self.model.autoregressive:
            return "lm-eval windows of L tokens (BOS prefix, context_len=1), every token scored once"
        return "disjoint [BOS] + (L-1)-token chunks, each bounded; the sum is a bound"

    # -- lm-eval API ----------------------------------------------------------------------------
    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        self.stats.requests["loglikelihood"] += len(requests)
        items = [self.pair_item(*req.args[:2], where=describe_request(i, req)) for i, req in enumerate(requests)]
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
            raise PrimebenchError(
                f"{where}: the continuation {continuation!r} encodes to no tokens",
                fix="the task must give a non-empty target",
            )
        room = self.capacity - 1 - len(cont)  # BOS always leads the row
        if room < 0:
            raise PrimebenchError(
                f"{where}: the continuation has {len(cont)} tokens but a {self.family} row of seq_len "
                f"{self.model.seq_len} holds at most {self.capacity - 1} after BOS (context had {len(ctx)} tokens)",
                fix="evaluate with a model of longer seq_len, or a task with shorter targets",
            )
        if len(ctx) > room:
            self.stats.truncated_requests += 1
            self.stats.truncated_tokens += len(ctx) - room
            ctx = ctx[len(ctx) - room :]
        return Item(tokens=(self.tokenizer.bos_id, *ctx, *cont), n_cont=len(cont))

    def rolling_items(self, tokens: list[int]) -> list[Item]:
        """The windows that score each token of ``tokens`` exactly once (see the module docstring)."""
        if not tokens:
            return []
        L = self.model.seq_len
        if self.model.autoregressive:
            pairs = get_rolling_token_windows(tokens, prefix_token=self.tokenizer.bos_id, max_seq_len=L, context_len=1)
            return [Item(tokens=(*ctx, *cont), n_cont=len(cont)) for ctx, cont in map(make_disjoint_window, pairs)]
        chunk = L - 1
        return [
            Item(tokens=(self.tokenizer.bos_id, *tokens[s : s + chunk]), n_cont=len(tokens[s : s + chunk]))
            for s in range(0, len(tokens), chunk)
        ]

    # -- scoring: batching only; the number is the family's ``score`` ---------------------------
    @torch.no_grad()
    def score(self, items: list[Item], *, greedy: bool) -> list[Score]:
        """Nats of each item's continuation: exact (ARM) or the K-sample bound (diffusion)."""
        if not items:
            return []

        K = self.samples_per_request
        rows = len(items) * (K + int(greedy and self.model.uses_time_sampler))
        console().log(f"lm-eval adapter ({self.family}): {len(items)} continuations to score, {rows} forward rows")
        m, dev = self.model, self.model.device
        order = sorted(range(len(items)), key=lambda i: -len(items[i].tokens))  # less padding per batch
        out: list[Score | None] = [None] * len(items)
        for start in range(0, len(order), self.batch_size):
            index = order[start : start + self.batch_size]
            batch = [items[i] for i in index]
            T = max(len(it.tokens) for it in batch)
            x = torch.full((len(batch), T), self.tokenizer.pad_id, dtype=torch.long)
            attn = torch.zeros(len(batch), T, dtype=torch.long)
            cont = torch.zeros(len(batch), T, dtype=torch.bool)
            for r, it in enumerate(batch):
                n = len(it.tokens)
                x[r, :n], attn[r, :n] = torch.tensor(it.tokens), 1
                cont[r, n - it.n_cont : n] = True
            gens = [torch.Generator().manual_seed(seed_of(self.seed, it.tokens, it.n_cont, "mc")) for it in batch]
            nll, hits = m.score(
                x.to(dev),
                corruptible=cont.to(dev),
                attention_mask=attn.to(dev),
                greedy=greedy,
                num_samples=K,
                generator=gens,
                time_sampler=self.time_sampler,
            )
            self.stats.forward_rows += len(batch) * (K + int(greedy and m.uses_time_sampler))
            nats, stderr = nll.nats.cpu(), nll.stderr.cpu()
            if not bool(torch.isfinite(nats).all()):
                bad = int((~torch.isfinite(nats)).nonzero()[0])
                raise PrimebenchError(
                    f"the bound of request {index[bad]} is not finite ({float(nats[bad])})",
                    fix="the model assigns zero probability to a continuation token; check the checkpoint",
                )
            for r, i in enumerate(index):
                out[i] = Score(float(nats[r]), float(stderr[r]), None if hits is None else bool(hits[r]))
        return out  # type: ignore[return-value]

    # -- generation -----------------------------------------------------------------------------
    def _generate_one(self, index: int, request) -> str:

        context, gen_kwargs = request.args[0], dict(request.args[1] or {})
        until = gen_kwargs.pop("until", None) or []
        until = [until] if isinstance(until, str) else list(until)
        G = int(gen_kwargs.pop("max_gen_toks", self.max_gen_toks))
        self.stats.ignored_gen_kwargs.update(gen_kwargs)
        L = self.model.seq_len
        where = describe_request(index, request)
        if G < 1 or 1 + G > L:
            raise PrimebenchError(
                f"{where}: max_gen_toks={G} does not fit after BOS in a row of seq_len {L}",
                fix=f"use max_gen_toks <= {L - 1} (gen_kwargs) or a model with a longer seq_len",
            )
        ctx = self.tokenizer.encode(context) if context else []
        room = L - 1 - G
        if len(ctx) > room:
            self.stats.truncated_requests += 1
            self.stats.truncated_tokens += len(ctx) - room
            ctx = ctx[len(ctx) - room :]
        prefix = torch.tensor([[self.tokenizer.bos_id, *ctx]], dtype=torch.long)
        P = prefix.shape[1]
        name = self.sampler or sampler_for(self.model)
        steps = (self.steps or G) if SAMPLERS.get(name).uses_steps else None
        seed = seed_of(self.seed, tuple(prefix[0].tolist()), G, "generate")
        out = generate(
            self.model,
            name,
            seq_len=P + G,  # a canvas of exactly context + max_gen_toks positions
            num_samples=1,
            batch_size=1,
            steps=steps,
            temperature=self.temperature,
            nucleus_p=self.nucleus_p,
            dtype=self.dtype,
            generator=torch.Generator(device=self.model.device).manual_seed(seed),
            prefix=prefix,
            draw=self.draw,
        )
        new = out.tokens[0, P : P + G].tolist()
        if self.tokenizer.eos_id in new:
            new = new[: new.index(self.tokenizer.eos_id)]
        self.stats.generated_tokens += len(new)
        return cut_at_stops(self.tokenizer.decode(new), until)


__all__ = ["AdapterStats", "Item", "PrimebenchLM", "Score", "cut_at_stops", "split_context"]
