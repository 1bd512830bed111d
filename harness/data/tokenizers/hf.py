"""``hf:NAME_OR_PATH``: a transformers ``AutoTokenizer`` (a local folder offline, a hub name online)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.data.tokenizers.base import TOKENIZER_KINDS, Tokenizer
from harness.errors import DataError, OfflineError
from harness.offline import hf_offline, hub_reachable, is_network_error

if TYPE_CHECKING:
    from harness.data.corpora import Corpus

HF_DIR = "hf_tokenizer"


class TransformersTokenizer(Tokenizer):
    """A transformers tokenizer (kind ``hf``)."""

    kind = "hf"

    def __init__(self, *, spec: str, backend: Any):
        eos = backend.eos_token_id if backend.eos_token_id is not None else backend.bos_token_id
        if eos is None:
            raise DataError(
                f"tokenizer {spec!r} defines neither an EOS nor a BOS token",
                fix="use a tokenizer with an end-of-text token",
            )
        bos = backend.bos_token_id if backend.bos_token_id is not None else eos
        pad = backend.pad_token_id if backend.pad_token_id is not None else eos
        self._backend = backend
        super().__init__(spec=spec, vocab_size=len(backend), bos_id=bos, eos_id=eos, pad_id=pad)

    def encode(self, text: str) -> list[int]:
        return list(self._backend(text, add_special_tokens=False, verbose=False)["input_ids"])

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        out = self._backend(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
        return [list(x) for x in out]

    def _decode(self, ids: list[int]) -> str:
        return self._backend.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _save_files(self, directory: Path) -> None:
        self._backend.save_pretrained(str(directory / HF_DIR))


@TOKENIZER_KINDS.register("hf")
def _build_hf(arg: str, corpus: Corpus | None) -> Tokenizer:
    if not arg:
        raise DataError("tokenizer spec 'hf:' needs a name or path", fix="e.g. hf:/path/to/model or hf:gpt2")
    local = Path(arg).expanduser()
    if local.exists():
        return load_transformers(local.resolve(), spec=f"hf:{local.resolve()}")
    fix = "connect to the network, or use a local folder: hf:/path/to/tokenizer"
    if hf_offline():
        raise OfflineError(
            f"tokenizer 'hf:{arg}' is not a local path and needs the network (HF_HUB_OFFLINE is set)",
            fix=fix,
        )
    if not hub_reachable():  # fail now rather than after the library's retries
        raise OfflineError(
            f"tokenizer 'hf:{arg}' is not a local path and the Hugging Face hub cannot be reached",
            fix=fix + "; with a cached copy, set HF_HUB_OFFLINE=1",
        )
    try:
        return load_transformers(arg, spec=f"hf:{arg}")
    except DataError as exc:
        if is_network_error(exc):
            raise OfflineError(f"tokenizer 'hf:{arg}' could not be downloaded", fix=fix) from exc
        raise


def load_transformers(name_or_path: str | Path, *, spec: str) -> TransformersTokenizer:
    try:
        # deferred: transformers is optional and slow to import
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise DataError(f"tokenizer {spec!r} needs transformers", fix="pip install transformers") from exc
    try:
        backend = AutoTokenizer.from_pretrained(str(name_or_path), local_files_only=isinstance(name_or_path, Path))
    except Exception as exc:  # noqa: BLE001 - turned into a user-facing error
        raise DataError(f"could not load tokenizer {spec!r}: {exc}", fix="check the name or path") from exc
    return TransformersTokenizer(spec=spec, backend=backend)
