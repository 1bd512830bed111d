"""Published DUO checkpoints in the Hugging Face layout (``duo-hf:PATH``), evaluated as our DUO.

The layout of ``s-sahoo/duo`` and ``s-sahoo/duo-distilled`` (transformers' ``save_pretrained`` of the
release's ``DUO`` model): ``config.json`` with ``model_type: duo``, ``vocab_size`` = C,
``model_length``, ``hidden_dim``, ``cond_dim``, ``n_blocks``, ``n_heads``, ``causal`` and ``var_min``,
and ``model.safetensors`` with MDLM's DiT under ``backbone.*``. DUO's network always reads the time
(sigma = -log alpha_t of the log-linear schedule), so the layout has no ``time_conditioning`` field.
A ``causal: true`` checkpoint (an autoregressive network in the same code) is refused.

DUO's OpenWebText models count GPT-2's 50257 tokens plus the ``[PAD]`` its code adds, C = 50258: with
no tokenizer files beside the weights, C = 50258 takes the ``gpt2-pad`` tokenizer (GPT-2's, with
``[PAD]`` as id 50257). The loading itself is UDLM's (:func:`harness.models.udlm_import.load_uniform_hf`).
"""

from __future__ import annotations

from pathlib import Path

from harness.io import read_json
from harness.models.releases import ReleaseFormat, register_release
from harness.models.udlm_import import load_uniform_hf

PREFIX = "duo-hf:"
#: DUO's vocabulary with GPT-2 (50257 tokens and the pad its code adds), and that tokenizer's spec
PADDED_GPT2 = (50258, "gpt2-pad")


def duo_hf(source, *, ema: bool = True, device: str = "cpu", tokenizer: str | None = None):
    """Load ``duo-hf:PATH`` -> ``(model, tokenizer, config)`` like :func:`harness.load`."""
    folder = Path(str(source)[len(PREFIX) :]).expanduser()
    if tokenizer is None and not any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        path = folder / "config.json"
        config = read_json(path, what="DUO config", fix="restore the file") if path.is_file() else {}
        if isinstance(config, dict) and config.get("vocab_size") == PADDED_GPT2[0]:
            tokenizer = PADDED_GPT2[1]
    return load_uniform_hf(
        source,
        prefix=PREFIX,
        family="duo",
        label="DUO",
        time_conditioning=True,
        refuse={"causal": "an autoregressive network, not DUO's bidirectional denoiser"},
        device=device,
        tokenizer=tokenizer,
    )


register_release(
    ReleaseFormat(
        name="duo-hf",
        prefix=PREFIX,
        what="a DUO release in the Hugging Face layout (config.json with model_type duo), which loads with duo-hf:",
        loader=duo_hf,
        model_type="duo",
    )
)

__all__ = ["PADDED_GPT2", "PREFIX", "duo_hf"]
