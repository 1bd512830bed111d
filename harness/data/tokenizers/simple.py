"""``bytes`` (UTF-8 bytes plus ``<|endoftext|>``) and ``pixels:LEVELS`` (image pixel levels)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.data.tokenizers.base import ENDOFTEXT, TOKENIZER_KINDS, Tokenizer, no_arg
from harness.errors import DataError

if TYPE_CHECKING:
    from harness.data.corpora import Corpus


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes 0..255 plus id 256 = ``<|endoftext|>`` (BOS = EOS = PAD)."""

    kind = "bytes"

    def __init__(self) -> None:
        super().__init__(spec="bytes", vocab_size=257, bos_id=256, eos_id=256, pad_id=256)

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def _decode(self, ids: list[int]) -> str:
        pieces: list[str] = []
        run: list[int] = []
        for i in ids:
            if i < 256:
                run.append(i)
                continue
            pieces.append(bytes(run).decode("utf-8", errors="replace"))
            pieces.append(ENDOFTEXT)
            run = []
        pieces.append(bytes(run).decode("utf-8", errors="replace"))
        return "".join(pieces)


class PixelTokenizer(Tokenizer):
    """Pixel levels 0..LEVELS-1 as ids; no special ids (see the module docstring)."""

    kind = "pixels"

    def __init__(self, levels: int) -> None:
        if isinstance(levels, bool) or not isinstance(levels, int) or levels < 2:
            raise DataError(
                f"pixels tokenizer needs at least 2 levels, got {levels!r}", fix="use pixels:LEVELS, e.g. pixels:256"
            )
        self.levels = levels
        super().__init__(spec=f"pixels:{levels}", vocab_size=levels, bos_id=None, eos_id=None, pad_id=None)

    def encode(self, text: str) -> list[int]:
        try:
            ids = [int(piece) for piece in text.split()]
        except ValueError as exc:
            raise DataError(
                f"pixels tokenizer: {text[:40]!r} is not space-separated integers",
                fix="write pixel levels as '0 3 16 ...'",
            ) from exc
        bad = [i for i in ids if not 0 <= i < self.levels]
        if bad:
            raise DataError(
                f"pixel level {bad[0]} outside 0..{self.levels - 1}",
                fix=f"levels of {self.spec} lie in 0..{self.levels - 1}",
            )
        return ids

    def _decode(self, ids: list[int]) -> str:
        return " ".join(str(i) for i in ids)


@TOKENIZER_KINDS.register("bytes")
def _build_bytes(arg: str, corpus: Corpus | None) -> Tokenizer:
    no_arg("bytes", arg)
    return ByteTokenizer()


@TOKENIZER_KINDS.register("pixels")
def _build_pixels(arg: str, corpus: Corpus | None) -> Tokenizer:
    if not arg.isdigit():
        raise DataError(
            f"tokenizer 'pixels' needs its number of levels, got {('pixels:' + arg) if arg else 'pixels'!r}",
            fix="use pixels:LEVELS (primebench train fills LEVELS in from an image: corpus)",
        )
    return PixelTokenizer(int(arg))
