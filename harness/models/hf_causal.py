"""Hugging Face causal LMs (GPT-2 and any ``AutoModelForCausalLM``) evaluated as the ARM family.

``hf:NAME_OR_PATH`` names one: a local folder (``config.json`` and weights, or a GGUF file with
``hf:FOLDER#FILE.gguf``) or, online, a hub name. The model is wrapped so that it is an
:class:`baselines.arm.ARM` in everything but its network: the same exact NLL over the L - 1
shifted targets, the same ``corruptible`` context handling, the same sampler and lm-eval adapter.
``L`` is the model's context (``n_positions`` / ``max_position_embeddings``).

Nothing is unpickled beyond plain tensors and no remote code runs: a folder with safetensors files
is loaded from them only; a folder with only pickles has each checked with
``torch.load(weights_only=True)`` first, as is every shard an index (``*.index.json``) names that is
not a ``.safetensors`` file, whatever its name; hub weights are taken as safetensors only.
"""

from __future__ import annotations

import functools
import pickle
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.config import Config, DataConfig
from harness.data.tokenizers.hf import TransformersTokenizer
from harness.errors import OfflineError, PrimebenchError
from harness.models import family_class
from harness.models.base import ModelFamily
from harness.offline import hf_offline, hub_reachable
from harness.safe_load import UnsafeFileError, check_indexed_shards, check_pickles_in_folder

PREFIX = "hf:"


def is_hf_source(source) -> bool:
    return str(source).startswith(PREFIX)


def parse_hf_source(
    source, *, label: str | None = None, folder_fix: str | None = None, offline_fix: str | None = None
) -> tuple[str, str | None, Path | None]:
    """``hf:NAME_OR_PATH[#FILE.gguf]`` -> (name or path, GGUF file, local folder or None).

    Checked without loading anything: a folder needs ``config.json``; a path that does not exist is
    an error; a hub name needs the hub switched on and reachable (fails at once, no retries).
    ``label`` names the source in messages (``--judge x``); the fixes can be worded for the caller."""
    body = str(source)[len(PREFIX) :] if str(source).startswith(PREFIX) else str(source)
    if not body:
        raise PrimebenchError("'hf:' needs a model folder or hub name", fix="e.g. hf:/path/to/gpt2 or (online) hf:gpt2")
    label = label or f"hf:{body}"
    folder_fix = folder_fix or "pass the folder of an HF causal LM (config.json and weights), or a hub name when online"
    body, _, gguf = body.partition("#")
    local = Path(body).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file() and not gguf:
            raise PrimebenchError(f"{label} is a folder but not a model (no config.json)", fix=folder_fix)
        return str(local), gguf or None, local
    if local.exists() or body.startswith((".", "/", "~")) or body.endswith((".gguf", ".safetensors", ".bin")):
        raise PrimebenchError(
            f"{label}: {str(local)!r} is not a model folder" + ("" if local.exists() else " (it does not exist)"),
            fix=folder_fix,
        )

    if hf_offline("transformers") or not hub_reachable():
        cached = None if gguf else _cached_model(body)
        if cached is not None:  # fetched earlier (primebench prefetch hf:NAME): the cache's snapshot folder
            return str(cached), None, cached
        raise OfflineError(
            f"{label} is not a local folder, not in the Hugging Face cache, and the hub is "
            + ("switched off" if hf_offline("transformers") else "unreachable"),
            fix=(offline_fix or "download the model on a machine with network and pass its folder: hf:/path/to/model")
            + f"; or run `primebench prefetch hf:{body}` where the hub can be reached",
        )
    return body, gguf or None, None


def _cached_model(body: str) -> Path | None:
    """The cached snapshot folder of the hub model ``body`` (``NAME[@REV]``), or None."""
    # deferred: hub.py imports the release registry, which imports this module
    from harness.models.hub import fetch, parse_hub_name

    name = parse_hub_name(PREFIX + body)
    if name is None:
        return None
    try:
        return fetch(name, offline=True, partial=True).local
    except PrimebenchError:
        return None


def load_hf_causal(
    source: str,
    *,
    gguf_file: str | None = None,
    local: Path | None = None,
    trust_remote_code: bool = False,
    what: str = "model",
):
    """(transformers model in eval mode, its AutoTokenizer) with the safety rules of this module."""
    # deferred: transformers is optional and slow to import
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    kwargs: dict[str, Any] = {"trust_remote_code": bool(trust_remote_code)}
    model_kwargs: dict[str, Any] = {}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    elif local is not None:
        if any(local.glob("*.safetensors")):
            model_kwargs["use_safetensors"] = True  # never fall back to a pickle next to them
            check_indexed_shards(local, what=f"{what} weights")  # an index may still name a pickle, by any name
        else:
            check_pickles_in_folder(local, what=f"{what} weights")  # refuse code before transformers unpickles
    else:
        model_kwargs["use_safetensors"] = True  # hub weights only as safetensors: nothing is unpickled
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, **kwargs, **model_kwargs)
    except pickle.UnpicklingError as exc:  # torch refused a pickle the checks above did not see
        detail = next((line.strip() for line in str(exc).splitlines() if "global" in line.lower()), type(exc).__name__)
        raise UnsafeFileError(
            f"{what} {source!r} has a weights file that holds pickled objects other than tensors "
            f"({detail}); unpickling it could run arbitrary code, so it is refused",
            fix="use the model's safetensors weights, from a source you trust",
        ) from None
    except OSError as exc:
        raise OfflineError(
            f"could not load {what} {source!r}: {exc}".splitlines()[0],
            fix="check the name or path; hub names need the network (or a local copy)",
        ) from exc
    except (ValueError, RuntimeError, KeyError, TypeError) as exc:
        raise PrimebenchError(
            f"{what} {source!r} could not be loaded ({type(exc).__name__}: {exc})".splitlines()[0],
            fix="pass an HF causal LM folder whose weights and config are intact",
        ) from exc
    return model.eval(), tokenizer


def context_length(hf_model) -> int:
    cfg = hf_model.config
    return int(getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None) or 1024)


class HFBackbone(nn.Module):
    """Our backbone's call signature over a transformers causal LM: (ids, t, mask) -> float32 logits."""

    def __init__(self, hf_model):
        super().__init__()
        self.hf = hf_model

    def forward(self, ids: torch.Tensor, t=None, attention_mask=None) -> torch.Tensor:
        mask = None if attention_mask is None else attention_mask.long()
        return self.hf(input_ids=ids, attention_mask=mask).logits.float()


def hf_arm(source, *, device: str = "cpu", trust_remote_code: bool = False):
    """Load ``hf:NAME_OR_PATH`` as an ARM: ``(model, tokenizer, config)`` like :func:`harness.load`."""

    name, gguf, local = parse_hf_source(source)
    hf_model, backend = load_hf_causal(name, gguf_file=gguf, local=local, trust_remote_code=trust_remote_code)
    spec = f"{PREFIX}{name}" + (f"#{gguf}" if gguf else "")
    tokenizer = TransformersTokenizer(spec=spec, backend=backend)
    L = context_length(hf_model)
    logits_size = int(hf_model.get_output_embeddings().weight.shape[0])
    if tokenizer.vocab_size > logits_size:
        raise PrimebenchError(
            f"{spec}: the tokenizer has {tokenizer.vocab_size} ids but the model scores {logits_size}",
            fix="pass a model folder whose tokenizer belongs to it",
        )
    model = hf_arm_class()(HFBackbone(hf_model), vocab_size=logits_size, seq_len=L, source=spec)
    model.to(device).eval()
    cfg = Config(
        model=family_class("arm").config_class(family="arm"),
        data=DataConfig(tokenizer=spec, seq_len=L),
        name=Path(name).name if local is not None else name.replace("/", "_"),
    )
    return model, tokenizer, cfg


@functools.cache
def hf_arm_class():
    """The ARM subclass whose network is a transformers causal LM (built on first use, so that
    importing this module imports no model code)."""

    ARM = family_class("arm")

    class _HFCausalARM(ARM):
        """An external causal network (an HF causal LM, the release's AR DiT) as the ARM family
        (exact NLL over the L - 1 shifted targets)."""

        def __init__(
            self,
            backbone: nn.Module,
            *,
            vocab_size: int,
            seq_len: int,
            source: str,
            network: str = "transformers AutoModelForCausalLM (float32)",
        ):
            ModelFamily.__init__(
                self,
                vocab_size=vocab_size,
                seq_len=seq_len,
                hparams={"source": source, "positions": "model's own", "start_token": False},
            )
            self.start_token = False
            self.start_id = None
            self.source, self.network = source, network
            self.backbone = backbone

        def protocol(self) -> dict[str, Any]:
            return {"model_source": self.source, "network": self.network}

    return _HFCausalARM


__all__ = [
    "is_hf_source",
    "parse_hf_source",
    "load_hf_causal",
    "hf_arm",
    "hf_arm_class",
    "HFBackbone",
    "context_length",
]
