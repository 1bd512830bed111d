"""Tests for harness.data.datasets, harness.data.zeroshot and harness.data.detokenizers. CPU only, offline, fast.

Detokenizer expectations are worked out by hand from the rules in the docstrings (MDLM's
normalisations), including the quirks we keep on purpose for comparable numbers.
"""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

from harness.data import detokenizers as detok_module
from harness.data import zeroshot as zeroshot_module
from harness.data.corpora import get_corpus, make_corpus
from harness.data.corpora import wiki as wiki_module
from harness.data.datasets import ResolvedDataset, resolve_dataset
from harness.data.detokenizers import DETOKENIZERS, get_detokenizer
from harness.data.zeroshot import ZEROSHOT_PRESETS, list_presets
from harness.errors import DataError, OfflineError, PrimebenchError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "zeroshot"

LOCAL_FIXTURES = {
    "lambada": "lambada.jsonl",
    "wikitext2": "wikitext2.jsonl",
    "wikitext103": "wikitext2.jsonl",
    "ptb": "ptb.txt",
    "lm1b": "lm1b.txt",
    "ag_news": "ag_news.txt",
    "pubmed": "scientific_papers.txt",
    "arxiv": "scientific_papers.txt",
}


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIMEBENCH_CACHE", str(tmp_path / "cache"))


def raw_docs(filename: str) -> list[str]:
    return get_corpus(f"text:{FIXTURES / filename}").documents("all")


# --------------------------------------------------------------------------------------------
# detokenizers: known answers


def test_docstring_examples_hold():
    result = doctest.testmod(detok_module)
    assert result.attempted >= 10
    assert result.failed == 0


@pytest.mark.parametrize(
    "before, after",
    [
        ("a @-@ b @,@ c @.@ d", "a-b,c.d"),
        (" = = = History = = = \n", " === History ===\n"),
        (" = = = = Notes = = = = \n", " ==== Notes ====\n"),
        ('x ( y ) [ z ] { w } " q "', 'x (y) [z] {w} "q"'),
        ("one : two ; three . four ! five ? six , end", "one: two; three. four! five? six, end"),
        ("the team 's coach", "the team's coach"),
        ("the fans ' songs", "the fans' songs"),
        ("it was 5 ° C", "it was 5°C"),
        ("line one \n line two", "line one\nline two"),
        ("section N of", "section 1 of"),
        # kept quirk: quote pairs run left to right, so a lone apostrophe pairs with a later one
        ("don't say 'hi'", "don't say'hi'"),
    ],
)
def test_wikitext(before, after):
    assert get_detokenizer("wikitext")(before) == after


@pytest.mark.parametrize(
    "before, after",
    [
        ("it 's", "it's"),
        ("they do n't", "they don't"),
        ("the firms ' plans", "the firms' plans"),
        ("a \\/ b", "a / b"),
        ("for N N N days", "for 1 1 1 days"),
        ("$ N billion and # N item", "$1 billion and #1 item"),
        ("paid $ N", "paid $ N"),  # a sentence-final N has no space after it and stays
        ("N years later", "N years later"),  # so does a sentence-initial one
        ("the <unk> said", "the ? said"),
        ("a \n b", "a\nb"),
    ],
)
def test_ptb(before, after):
    assert get_detokenizer("ptb")(before) == after


@pytest.mark.parametrize(
    "before, after",
    [
        ("It 's here .", "It's here."),
        ("Yes .", "Yes ."),  # the period rule needs a space before the word (kept quirk)
        ("a , b : c ; d / e", "a, b: c; d/e"),
        ("Why ? Because !", "Why? Because!"),
        ("Really ?", "Really?"),
        ("( a b ) [ c ]", "(a b) [c]"),
        ("' quoted words '", "'quoted words'"),
        ('he said " fine " then', 'he said "fine" then'),
        ("costs $ 5 or £ 4 now", "costs $5 or £4 now"),
        ("visit https : / / a.org now", "visit https://a.org now"),
        ("we do n't", "we do n't"),  # MDLM's LM1B rules do not rejoin n't
    ],
)
def test_lm1b(before, after):
    assert get_detokenizer("lm1b")(before) == after


@pytest.mark.parametrize(
    "before, after",
    [
        ("\u201cHi,\u201d he said.", '\n"Hi," he said.'),
        ("  padded passage \n", "\npadded passage"),
        ("her uncle\u2019s boat", "\nher uncle\u2019s boat"),  # curly single quotes are kept
    ],
)
def test_lambada(before, after):
    assert get_detokenizer("lambada")(before) == after


def test_scientific_papers_is_wikitext_then_lm1b():
    sp, wt, lm = (get_detokenizer(n) for n in ("scientific_papers", "wikitext", "lm1b"))
    for doc in raw_docs("scientific_papers.txt"):
        assert sp(doc) == lm(wt(doc))
    before = "a two @-@ sided test ( p < 0.05 ) was used ."
    assert sp(before) == "a two-sided test (p < 0.05) was used."


def test_none_is_identity():
    text = "a , b @-@ c <unk> \u201cq\u201d"
    assert get_detokenizer("none")(text) == text


@pytest.mark.parametrize("name", sorted(set(LOCAL_FIXTURES) - {"wikitext103"}))
def test_detokenizers_are_idempotent_on_their_fixtures(name):
    preset = ZEROSHOT_PRESETS.get(name)
    detokenize = get_detokenizer(preset.detokenizer)
    for doc in raw_docs(LOCAL_FIXTURES[name]):
        once = detokenize(doc)
        assert detokenize(once) == once


def test_unknown_detokenizer_did_you_mean():
    with pytest.raises(PrimebenchError, match="wikitext"):
        get_detokenizer("wikitxt")


# --------------------------------------------------------------------------------------------
# presets


def test_preset_table_matches_mdlm_sources():
    table = {p.name: (p.hf_spec, p.detokenizer) for p in list_presets()}
    assert table == {
        "lambada": ("hf:EleutherAI/lambada_openai:default:test#text", "lambada"),
        "wikitext2": ("hf:wikitext:wikitext-2-raw-v1:validation#text", "wikitext"),
        "wikitext103": ("hf:wikitext:wikitext-103-raw-v1:validation#text", "wikitext"),
        "ptb": ("hf:ptb_text_only:validation#sentence", "ptb"),
        "lm1b": ("hf:lm1b:test#text", "lm1b"),
        "ag_news": ("hf:ag_news:test#text", "none"),
        "pubmed": ("hf:scientific_papers:pubmed:validation#article", "scientific_papers"),
        "arxiv": ("hf:scientific_papers:arxiv:validation#article", "scientific_papers"),
    }
    assert [p.name for p in list_presets()][0] == "lambada"
    assert set(ZEROSHOT_PRESETS.names()) == set(table)
    assert all(p.eos_between_docs is True and p.description for p in list_presets())
    assert all(p.detokenizer in DETOKENIZERS for p in list_presets())


def test_ptb_local_copy_is_detokenized():
    path = FIXTURES / "ptb.txt"
    ds = resolve_dataset(f"ptb@{path}", "validation")
    assert isinstance(ds, ResolvedDataset)
    assert (ds.name, ds.split, ds.detokenizer, ds.eos_between_docs) == ("ptb", "all", "ptb", True)
    assert "ptb" in ds.corpus.name and str(path) in ds.corpus.spec
    assert list(ds.corpus.splits) == ["all"]
    docs = ds.corpus.documents("all")
    assert docs[:2] == [
        "the company said it expects to report a net loss of $1 million or 1 cents a share for the third quarter",
        "mr. ?'s firm didn't comment on the proposed ? / ? venture",
    ]
    assert not any("<unk>" in d or " n't" in d or " 's" in d for d in docs)
    raw = raw_docs("ptb.txt")
    assert ds.corpus.sha256 != get_corpus(f"text:{path}").sha256
    assert resolve_dataset(f"ptb@{path}", "train").corpus.sha256 == ds.corpus.sha256
    assert docs == [get_detokenizer("ptb")(d) for d in raw]


@pytest.mark.parametrize("name", sorted(LOCAL_FIXTURES))
def test_every_preset_loads_a_local_copy(name):
    filename = LOCAL_FIXTURES[name]
    ds = resolve_dataset(f"{name}@{FIXTURES / filename}", "validation")
    preset = ZEROSHOT_PRESETS.get(name)
    assert (ds.name, ds.split, ds.detokenizer) == (name, "all", preset.detokenizer)
    assert ds.corpus.name == f"{name}@{filename}"
    detokenize = get_detokenizer(preset.detokenizer)
    assert ds.corpus.documents("all") == [detokenize(d) for d in raw_docs(filename)]


def test_wikitext_rows_keep_their_structure():
    ds = resolve_dataset(f"wikitext2@{FIXTURES / 'wikitext2.jsonl'}", "validation")
    docs = ds.corpus.documents("all")
    assert len(docs) == 8 and docs[0] == docs[2] == ""  # blank rows stay documents, as in MDLM
    assert docs[1] == " = Harbour Lighthouse =\n"
    assert docs[5] == " == Design ==\n"
    assert docs[3].startswith(" The Harbour Lighthouse is a 19th-century lighthouse")
    assert "cost of £ 12,000, and" in docs[3] and "18.5 nautical miles (34 km).\n" in docs[3]
    # the apostrophe pairing quirk: "keepers ' ... station 's" pair up
    assert docs[7].endswith(
        '"the finest on the coast". The keepers\'cottages were demolished in 1961, '
        "and the station's fog bell was sold.\n"
    )


def test_lambada_local_copy():
    docs = resolve_dataset(f"lambada@{FIXTURES / 'lambada.jsonl'}", "test").corpus.documents("all")
    assert len(docs) == 3
    assert all(d.startswith("\n") and d == "\n" + d.strip() for d in docs)
    assert not any(q in d for d in docs for q in "\u201c\u201d")
    assert docs[2] == (
        "\nEvery morning the baker opened the shutters at five. The smell of fresh bread drifted "
        "down the street, and by six a queue had formed outside the bakery"
    )


@pytest.mark.parametrize("name", sorted(LOCAL_FIXTURES))
def test_presets_offline_raise_with_local_form(name, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(OfflineError) as info:
        resolve_dataset(name, "validation")
    message = str(info.value)
    assert f"'{name}'" in message
    assert f"{name}@PATH" in message
    assert ZEROSHOT_PRESETS.get(name).hf_spec in message


def test_online_preset_detokenizes_the_hf_split(monkeypatch):
    """The online path with a stand-in loader: the HF split is kept and detokenized."""
    seen = []

    def fake_get_corpus(spec):
        seen.append(spec)
        return make_corpus(spec, spec, {"test": ["It 's here .", "Why ?"]})

    monkeypatch.setattr(zeroshot_module, "get_corpus", fake_get_corpus)
    ds = resolve_dataset("lm1b", "validation")  # the preset's split wins over default_split
    assert seen == ["hf:lm1b:test#text"]
    assert (ds.name, ds.split, ds.detokenizer) == ("lm1b", "test", "lm1b")
    assert ds.eos_between_docs is True
    assert ds.corpus.spec == "lm1b@hf:lm1b:test#text"
    assert ds.corpus.documents("test") == ["It's here.", "Why?"]


def test_online_load_failure_names_preset_and_local_form(monkeypatch):
    def failing(spec):
        raise DataError("dataset scripts are no longer supported", fix="use an older datasets")

    monkeypatch.setattr(zeroshot_module, "get_corpus", failing)
    with pytest.raises(DataError) as info:
        resolve_dataset("ptb", "validation")
    assert "'ptb'" in str(info.value) and "ptb@PATH" in str(info.value)


# --------------------------------------------------------------------------------------------
# plain corpus specs pass through


def test_wiki_embedded_passes_through(monkeypatch):
    articles = [{"title": f"Article {i}", "text": f"Text of article {i}. " * 20} for i in range(30)]
    monkeypatch.setattr(wiki_module, "_extract_wiki", lambda path: articles)
    ds = resolve_dataset("wiki-embedded:validation", "train")
    assert (ds.name, ds.split, ds.detokenizer, ds.eos_between_docs) == (
        "wiki-embedded",
        "validation",
        "none",
        None,
    )
    assert ds.corpus.documents("validation")
    assert resolve_dataset("wiki-embedded", "train").split == "train"


def test_text_spec_passes_through_unchanged():
    path = FIXTURES / "ptb.txt"
    ds = resolve_dataset(f"text:{path}:all", "validation")
    assert (ds.split, ds.detokenizer, ds.eos_between_docs) == ("all", "none", None)
    assert ds.corpus.documents("all") == raw_docs("ptb.txt")  # no detokenizer for plain corpora
    assert ds.name == "ptb.txt"
    assert resolve_dataset(f"text:{path}", "validation").split == "validation"


def test_hf_spec_passes_through_offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(OfflineError, match="hf:wikitext"):
        resolve_dataset("hf:wikitext:wikitext-2-raw-v1:validation", "validation")


# --------------------------------------------------------------------------------------------
# bad specs


@pytest.mark.parametrize("spec", ["wikitxt2", f"wikitxt2@{FIXTURES / 'ptb.txt'}", "wikitxt2:test"])
def test_unknown_preset_did_you_mean(spec):
    with pytest.raises(PrimebenchError, match="did you mean 'wikitext2'") as info:
        resolve_dataset(spec, "validation")
    assert "PRESET@PATH" in str(info.value)


def test_corpus_kind_typo_did_you_mean():
    with pytest.raises(PrimebenchError, match="'wiki-embedded'"):
        resolve_dataset("wiki-embeded:validation", "validation")


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("wikitext2:test", "fixed split"),
        ("ptb@", "has no path"),
        ("ptb@/nonexistent/ptb.txt", "not found"),
        (f"ptb@{FIXTURES / 'ptb.txt'}:validation", "names split 'validation'"),
        (f"text@{FIXTURES / 'ptb.txt'}", "corpus kind 'text'"),
        ("", "empty dataset spec"),
    ],
)
def test_bad_specs_are_data_errors(spec, expected):
    with pytest.raises(DataError, match=expected):
        resolve_dataset(spec, "validation")
