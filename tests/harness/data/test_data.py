"""Tests for harness.data: corpora, tokenizers, packing, images. CPU only, offline, fast."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.data import (
    corpus_info,
    get_corpus,
    get_image_dataset,
    get_packed,
    get_tokenizer,
    load_tokenizer,
    pack,
    parse_corpus_split,
    to_images,
)
from harness.data.corpora import wiki as wiki_module
from harness.errors import DataError, OfflineError, PrimebenchError

SAMPLE = "The quick brown fox, née Føx, jumps over 12 lazy dogs.\n\n  Tabs\tand  spaces — 😀!"

SENTENCES = [
    "The history of the region begins with the first settlers who arrived along the river.",
    "Trade grew quickly and the town became a centre of learning and of the arts.",
    "Its people built roads, bridges and schools, and the population doubled in fifty years.",
    "In the modern era the city is known for its museums, its parks and its annual festival.",
]


@pytest.fixture(scope="module", autouse=True)
def isolated_cache(tmp_path_factory):
    """Every test in this module uses a private cache, never ~/.cache/primebench."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PRIMEBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def text_corpus_path(tmp_path_factory):
    paragraphs = []
    for i in range(40):
        paragraphs.append(" ".join(SENTENCES[(i + j) % 4] for j in range(3)) + f" Item {i}.")
    path = tmp_path_factory.mktemp("text") / "small.txt"
    path.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def wiki():
    return get_corpus("wiki-embedded")


# --------------------------------------------------------------------------------------------
# cache and corpora


def test_cache_dir_and_atomic_write(tmp_path, monkeypatch):
    from harness.data.cache import cache_dir
    from harness.io import atomic_write_text

    monkeypatch.setenv("PRIMEBENCH_CACHE", str(tmp_path / "root"))
    folder = cache_dir("a", "b")
    assert folder == tmp_path / "root" / "a" / "b" and folder.is_dir()
    atomic_write_text(folder / "x.json", "first")
    atomic_write_text(folder / "x.json", "second")
    assert (folder / "x.json").read_text() == "second"
    assert [p.name for p in folder.iterdir()] == ["x.json"]  # no temporary file left behind


def test_wiki_embedded_split_is_deterministic_and_disjoint(wiki, monkeypatch):
    train, validation = wiki.documents("train"), wiki.documents("validation")
    assert len(train) + len(validation) == 106
    assert len(validation) >= 1 and len(train) > 9 * len(validation) // 2
    assert not set(train) & set(validation)
    assert all(len(doc) >= 200 for doc in train + validation)
    assert not any("'''" in doc or "''" in doc or "\n\n\n" in doc for doc in train + validation)
    assert "Anarchism is a political philosophy" in "".join(train + validation)

    # The second load comes from the JSON cache: extraction must not run again.
    def fail(path):
        raise AssertionError("wiki-embedded was extracted again instead of read from the cache")

    monkeypatch.setattr(wiki_module, "_extract_wiki", fail)
    again = get_corpus("wiki-embedded")
    assert again.sha256 == wiki.sha256
    assert again.documents("validation") == validation


def test_unknown_split_and_corpus_errors(wiki):
    with pytest.raises(DataError, match="no split 'test'"):
        wiki.documents("test")
    with pytest.raises(PrimebenchError, match="did you mean 'wiki-embedded'"):
        get_corpus("wiki-embeded")
    with pytest.raises(DataError, match="includes a split"):
        get_corpus("wiki-embedded:validation")


def test_parse_corpus_split():
    assert parse_corpus_split("wiki-embedded", "train") == ("wiki-embedded", "train")
    assert parse_corpus_split("wiki-embedded:test", "train") == ("wiki-embedded", "test")
    assert parse_corpus_split("text:/a:b/c.txt:test", "train") == ("text:/a:b/c.txt", "test")
    assert parse_corpus_split("text:/a:b/c.txt", "all") == ("text:/a:b/c.txt", "all")
    assert parse_corpus_split("hf:ptb_text_only", "test") == ("hf:ptb_text_only:test", "test")
    spec = "hf:wikitext:wikitext-2-raw-v1:train[:100]#text"
    assert parse_corpus_split(spec, "validation") == (spec, "train[:100]")


def test_text_txt_corpus(tmp_path):
    path = tmp_path / "docs.txt"
    docs = [f"Document {i}\nsecond line {i}" for i in range(30)]
    path.write_text("\n\n \n".join(docs) + "\n\n\n", encoding="utf-8")
    corpus = get_corpus(f"text:{path}")
    assert corpus.documents("all") == docs
    train, validation = corpus.documents("train"), corpus.documents("validation")
    assert validation and not set(train) & set(validation)
    assert sorted(train + validation) == sorted(docs)
    assert [d for d in docs if d in set(train)] == train  # file order kept
    assert get_corpus(f"text:{path}").sha256 == corpus.sha256
    assert corpus.info()["splits"]["all"] == {"documents": 30, "characters": sum(map(len, docs))}


def test_text_jsonl_corpus_and_errors(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text('{"text": "one"}\n\n{"text": "two", "id": 2}\n', encoding="utf-8")
    assert get_corpus(f"text:{good}").documents("all") == ["one", "two"]

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "one"}\n{"text": oops}\n', encoding="utf-8")
    with pytest.raises(DataError, match="line 2 is not valid JSON"):
        get_corpus(f"text:{bad}")
    no_field = tmp_path / "nofield.jsonl"
    no_field.write_text('{"text": "one"}\n{"body": "two"}\n', encoding="utf-8")
    with pytest.raises(DataError, match="line 2 has no string 'text' field"):
        get_corpus(f"text:{no_field}")
    with pytest.raises(DataError, match="not found: .*missing.txt"):
        get_corpus(f"text:{tmp_path / 'missing.txt'}")
    with pytest.raises(DataError, match="'train' is a split"):
        get_corpus(f"text:{good}:train")
    other = tmp_path / "data.csv"
    other.write_text("a,b\n", encoding="utf-8")
    with pytest.raises(DataError, match="expected .txt or .jsonl"):
        get_corpus(f"text:{other}")


def test_hf_specs_refuse_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError, match="needs the network"):
        get_corpus("hf:wikitext:wikitext-2-raw-v1:validation")
    with pytest.raises(OfflineError, match="needs the network"):
        get_tokenizer("hf:openai-community/gpt2-large")


# --------------------------------------------------------------------------------------------
# tokenizers


def test_bytes_tokenizer():
    tok = get_tokenizer("bytes")
    assert (tok.vocab_size, tok.bos_id, tok.eos_id, tok.pad_id) == (257, 256, 256, 256)
    assert tok.mask_id == 257
    assert tok.mask_appended
    ids = tok.encode(SAMPLE)
    assert ids == list(SAMPLE.encode("utf-8")) and max(ids) < 256
    assert tok.decode(ids) == SAMPLE
    assert tok.decode([72, 105, 256, 0xFF]) == "Hi<|endoftext|>\ufffd"
    with pytest.raises(DataError, match="mask id"):
        tok.decode([72, 257])


def test_gpt2_tokenizer():
    tok = get_tokenizer("gpt2")
    assert tok.encode("Hello world") == [15496, 995]
    assert (tok.vocab_size, tok.bos_id, tok.eos_id, tok.pad_id) == (50257, 50256, 50256, 50256)
    assert tok.decode(tok.encode(SAMPLE)) == SAMPLE
    assert 50256 not in tok.encode("a <|endoftext|> b")  # literal specials stay text
    assert tok.decode([15496, 50256]) == "Hello<|endoftext|>"
    assert tok.encode_batch(["Hello world", SAMPLE]) == [[15496, 995], tok.encode(SAMPLE)]


def test_bpe_on_text_corpus_is_deterministic_and_rebuilds(text_corpus_path, tmp_path, monkeypatch):
    corpus = get_corpus(f"text:{text_corpus_path}")
    tok = get_tokenizer("bpe:300", corpus=corpus)
    assert tok.vocab_size == 300 and tok.eos_id == tok.bos_id == tok.pad_id
    assert tok.spec == f"bpe:300@text:{text_corpus_path}"
    text = corpus.documents("validation")[0]
    ids = tok.encode(text)
    assert len(ids) < len(text.encode("utf-8"))  # merges were learned
    assert tok.decode(ids) == text and tok.decode(tok.encode(SAMPLE)) == SAMPLE

    # Retrain from scratch in an empty cache: same tokenizer from the spec alone.
    monkeypatch.setenv("PRIMEBENCH_CACHE", str(tmp_path / "fresh"))
    again = get_tokenizer(tok.spec)
    assert again.spec == tok.spec
    assert again._backend.to_str() == tok._backend.to_str()

    with pytest.raises(DataError, match="at least 257"):
        get_tokenizer("bpe:200", corpus=corpus)
    with pytest.raises(DataError, match="only supports a BPE vocabulary"):
        get_tokenizer("bpe:100000", corpus=corpus)
    with pytest.raises(DataError, match="must be an integer"):
        get_tokenizer("bpe:big")


def test_bpe_on_wiki_embedded(wiki):
    tok = get_tokenizer("bpe:512")
    assert tok.spec == "bpe:512" and tok.vocab_size == 512
    doc = wiki.documents("validation")[0]
    assert tok.decode(tok.encode(doc)) == doc


def test_unknown_tokenizer_did_you_mean():
    with pytest.raises(PrimebenchError, match="did you mean 'gpt2'"):
        get_tokenizer("gpt3")
    with pytest.raises(DataError, match="takes no argument"):
        get_tokenizer("bytes:5")


@pytest.mark.parametrize("spec", ["bytes", "gpt2", "bpe:300"])
def test_save_and_load_tokenizer(spec, text_corpus_path, tmp_path):
    corpus = get_corpus(f"text:{text_corpus_path}")
    tok = get_tokenizer(spec, corpus=corpus)
    tok.save(tmp_path / "ckpt")
    loaded = load_tokenizer(tmp_path / "ckpt")
    assert type(loaded) is type(tok)
    for field in ("spec", "vocab_size", "bos_id", "eos_id", "pad_id", "mask_id"):
        assert getattr(loaded, field) == getattr(tok, field)
    assert loaded.encode(SAMPLE) == tok.encode(SAMPLE)
    assert loaded.decode(tok.encode(SAMPLE)) == SAMPLE
    with pytest.raises(DataError, match="no tokenizer.yaml"):
        load_tokenizer(tmp_path)


def test_hf_tokenizer_from_local_folder(tmp_path):
    transformers = pytest.importorskip("transformers")
    gpt2 = get_tokenizer("gpt2")
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=gpt2._backend, eos_token="<|endoftext|>", bos_token="<|endoftext|>"
    )
    fast.save_pretrained(str(tmp_path / "tok"))
    tok = get_tokenizer(f"hf:{tmp_path / 'tok'}")
    assert tok.encode("Hello world") == [15496, 995]
    assert (tok.vocab_size, tok.eos_id, tok.pad_id) == (50257, 50256, 50256)
    assert tok.decode(tok.encode(SAMPLE)) == SAMPLE
    tok.save(tmp_path / "ckpt")
    assert load_tokenizer(tmp_path / "ckpt").encode(SAMPLE) == tok.encode(SAMPLE)


# --------------------------------------------------------------------------------------------
# packing

BOS, EOS, PAD = 100, 101, 102


def _docs(seed=0, n=37):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 100, size=int(rng.integers(0, 40))).tolist() for _ in range(n)]


def _stream(docs, eos_between_docs=True):
    out = []
    for d in docs:
        out += d + ([EOS] if eos_between_docs else [])
    return out


@pytest.mark.parametrize("eos_between_docs", [True, False])
def test_pack_wrap_invariants(eos_between_docs):
    docs, seq_len = _docs(), 16
    packed = pack(docs, seq_len=seq_len, bos_id=BOS, eos_id=EOS, pad_id=PAD, eos_between_docs=eos_between_docs)
    stream = _stream(docs, eos_between_docs)
    ids = packed.input_ids
    assert ids.dtype == torch.int64 and ids.shape == (len(stream) // (seq_len - 2), seq_len)
    assert (ids[:, 0] == BOS).all() and (ids[:, -1] == EOS).all()
    assert bool(packed.attention_mask.all())
    body = ids[:, 1:-1].reshape(-1).tolist()
    assert body == stream[: len(body)]  # global concatenation, document order kept
    p = packed.protocol
    assert p["tokens_in"] == len(stream)
    assert p["tokens_dropped"] == len(stream) % (seq_len - 2) == len(stream) - len(body)
    assert p["rows"] == ids.shape[0] and p["documents"] == len(docs) and p["remainder"] == "drop"
    assert p["eos_between_docs"] is eos_between_docs
    again = pack(docs, seq_len=seq_len, bos_id=BOS, eos_id=EOS, pad_id=PAD, eos_between_docs=eos_between_docs)
    assert torch.equal(again.input_ids, ids)


def test_pack_does_not_depend_on_how_documents_are_grouped():
    # Only the concatenated stream matters: merging documents (without EOS between them) or
    # packing more documents never changes the rows already formed.
    docs = _docs(seed=1, n=50)
    kwargs = dict(seq_len=12, bos_id=BOS, eos_id=EOS, pad_id=PAD, eos_between_docs=False)
    whole = pack(docs, **kwargs).input_ids
    merged = pack([sum(docs[:25], []), sum(docs[25:], [])], **kwargs).input_ids
    assert torch.equal(whole, merged)
    first_half = pack(docs[:25], **kwargs).input_ids
    assert torch.equal(whole[: first_half.shape[0]], first_half)


def test_pack_remainder_pad():
    docs = [[1, 2, 3], [4, 5, 6, 7], [8]]  # stream of 11 tokens with EOS after each document
    packed = pack(docs, seq_len=6, bos_id=BOS, eos_id=EOS, pad_id=PAD, remainder="pad")
    assert packed.input_ids.tolist() == [
        [BOS, 1, 2, 3, EOS, EOS],
        [BOS, 4, 5, 6, 7, EOS],
        [BOS, EOS, 8, EOS, EOS, PAD],
    ]
    assert packed.attention_mask.tolist()[2] == [1, 1, 1, 1, 1, 0]
    assert packed.protocol["tokens_dropped"] == 0 and packed.protocol["padded_rows"] == 1
    dropped = pack(docs, seq_len=6, bos_id=BOS, eos_id=EOS, pad_id=PAD, remainder="drop")
    assert dropped.input_ids.shape == (2, 6) and dropped.protocol["tokens_dropped"] == 3


def test_pack_unwrapped_truncates_and_pads():
    docs = [[1, 2], list(range(10)), []]
    packed = pack(docs, seq_len=6, bos_id=BOS, eos_id=EOS, pad_id=PAD, wrap=False)
    assert packed.input_ids.tolist() == [
        [BOS, 1, 2, EOS, PAD, PAD],
        [BOS, 0, 1, 2, 3, EOS],
        [BOS, EOS, PAD, PAD, PAD, PAD],
    ]
    assert packed.attention_mask.tolist() == [[1, 1, 1, 1, 0, 0], [1] * 6, [1, 1, 0, 0, 0, 0]]
    p = packed.protocol
    assert p["truncated_docs"] == 1 and p["tokens_dropped"] == 6 and p["rows"] == 3
    assert p["remainder"] is None and p["eos_between_docs"] is None


def test_pack_errors():
    with pytest.raises(DataError, match="seq_len >= 3"):
        pack([[1, 2]], seq_len=2, bos_id=BOS, eos_id=EOS, pad_id=PAD)
    with pytest.raises(DataError, match="lower --seq-len"):
        pack([[1, 2]], seq_len=64, bos_id=BOS, eos_id=EOS, pad_id=PAD)
    with pytest.raises(DataError, match="remainder"):
        pack([[1, 2]], seq_len=4, bos_id=BOS, eos_id=EOS, pad_id=PAD, remainder="keep")


def test_get_packed_records_provenance(text_corpus_path):
    spec = f"text:{text_corpus_path}:validation"
    packed = get_packed(spec, "validation", "bytes", seq_len=64)
    p = packed.protocol
    assert p["corpus"] == f"text:{text_corpus_path}" and p["split"] == "validation"
    assert p["tokenizer"] == "bytes" and p["vocab_size"] == 257
    docs = get_corpus(f"text:{text_corpus_path}").documents("validation")
    assert p["tokens_in"] == sum(len(d.encode()) + 1 for d in docs)
    with pytest.raises(DataError, match="give the split once"):
        get_packed(spec, "train", "bytes", seq_len=64)
    info = corpus_info(get_corpus(f"text:{text_corpus_path}"), get_tokenizer("bytes"))
    assert info["splits"]["all"]["tokens"] == sum(
        len(d.encode()) for d in get_corpus(f"text:{text_corpus_path}").documents("all")
    )


# --------------------------------------------------------------------------------------------
# images


def test_digits_images():
    train, test = get_image_dataset("digits"), get_image_dataset("digits:test")
    assert train.split == "train" and test.spec == "digits:test"
    assert (train.height, train.width, train.channels, train.levels) == (8, 8, 1, 17)
    assert train.tokens.shape[1] == 64 and len(train) + len(test) == 1797
    assert 0 < len(test) < len(train) / 5
    assert int(train.tokens.min()) == 0 and int(train.tokens.max()) == 16
    images = to_images(test.tokens, test)
    assert images.shape == (len(test), 1, 8, 8) and images.dtype == torch.uint8
    assert torch.equal(images.reshape(len(test), -1) == 255, test.tokens == 16)
    with pytest.raises(DataError, match="mask id"):
        to_images(torch.full((1, 64), 17), test)


def test_mnist5k_images():
    ds = get_image_dataset("mnist5k:all")
    assert ds.tokens.shape == (5000, 784) and ds.levels == 256 and ds.height == 28
    assert torch.bincount(ds.labels).tolist() == [500] * 10
    assert int(ds.tokens.max()) == 255 and int(ds.tokens[:, 0].max()) == 0  # corner is blank
    train, test = get_image_dataset("mnist5k:train"), get_image_dataset("mnist5k:test")
    assert len(train) + len(test) == 5000
    assert torch.equal(to_images(ds.tokens[:3], ds).reshape(3, -1), ds.tokens[:3].to(torch.uint8))


def test_image_errors(tmp_path):
    with pytest.raises(PrimebenchError, match="did you mean 'digits'"):
        get_image_dataset("digts")
    with pytest.raises(DataError, match=str(tmp_path / "nocifar")):
        get_image_dataset(f"cifar10:{tmp_path / 'nocifar'}")
