"""Request bookkeeping for the lm-eval adapter: rows to score, their scores, counters, seeds, text cuts."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

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


def seed_of(seed: int, tokens: tuple[int, ...], n_cont: int, salt: str) -> int:
    """A request's own seed: its draws do not depend on its batch, order or batch size."""
    digest = hashlib.sha256(f"{seed}\0{salt}\0{n_cont}\0{','.join(map(str, tokens))}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def cut_at_stops(text: str, until: list[str]) -> str:
    """``text`` up to (not including) the earliest occurrence of any stop string."""
    cut = len(text)
    for stop in until:
        if stop:
            at = text.find(stop)
            if at != -1:
                cut = min(cut, at)
    return text[:cut]


def describe_request(index: int, request) -> str:
    task = getattr(request, "task_name", None)
    doc = getattr(request, "doc_id", None)
    return f"request {index}" + (f" (task {task!r}, doc {doc})" if task is not None else "")


__all__ = [
    "AdapterStats",
    "DEFAULT_MAX_GEN_TOKS",
    "Item",
    "REQUEST_TYPES",
    "Score",
    "cut_at_stops",
    "describe_request",
    "seed_of",
    "split_context",
]
