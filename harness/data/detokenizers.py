r"""Detokenizers: undo the word-level tokenization of classic LM benchmarks before BPE.

Why: PTB, WikiText, LM1B and the scientific-papers articles are stored tokenized
(``do n't``, ``1 @,@ 000``, ``end .``). A model trained on raw web text (OWT) assigns such
text a worse likelihood, and GPT-2 BPE spends different token counts on it, so a zero-shot
perplexity depends on exactly which normalisations were applied. The MDLM line of work
(MDLM, SEDD, MDM-Prime, DUO, BD3) applies one fixed normaliser per dataset before tokenizing
(MDLM ``dataloader.py``); these functions reproduce what those normalisers change, rule for rule
and in the same order (the rules interact: ``" , "`` is fixed before ``" N "`` is looked for),
so our token sets match theirs. Each rule is a left-to-right, non-overlapping replacement, like
``str.replace``. Rules in the original that can never match anything are left out.

The consequence of faithfulness is that some rules are crude. The quote and bracket rules pair
marks from left to right, so an unpaired apostrophe can pair with a later one; the
``wikitext`` detokenizer is therefore not idempotent on text with lone apostrophes
(``don't say 'hi'`` becomes ``don't say'hi'``). Do not "improve" a rule without renaming the
detokenizer: results recorded under a name must keep meaning the same text.

Every detokenizer is a pure function ``str -> str`` applied to one document at a time and is
registered in :data:`DETOKENIZERS` by the name that results record.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from harness.registry import Registry

Detokenizer = Callable[[str], str]
Rule = tuple[re.Pattern, str]

DETOKENIZERS: Registry[Detokenizer] = Registry("detokenizer")


def get_detokenizer(name: str) -> Detokenizer:
    """The detokenizer registered as ``name`` (unknown names get a did-you-mean error)."""
    return DETOKENIZERS.get(name)


def _literal(old: str, new: str) -> Rule:
    """A rule replacing every non-overlapping occurrence of ``old`` (as ``str.replace``)."""
    return re.compile(re.escape(old)), new.replace("\\", "\\\\")


def _apply(rules: tuple[Rule, ...], text: str) -> str:
    for pattern, replacement in rules:
        text = pattern.sub(replacement, text)
    return text


def _strip_inside(open_mark: str, close_mark: str) -> Rule:
    """Drop whitespace just inside each ``open ... close`` pair (shortest pairs, left to right)."""
    o, c = re.escape(open_mark), re.escape(close_mark)
    return re.compile(o + r"\s*([^" + c + r"]*?)\s*" + c), open_mark + r"\1" + close_mark


# ---------------------------------------------------------------------------------------------
# none


@DETOKENIZERS.register("none")
def none(text: str) -> str:
    """Identity: plain corpora and AG News (MDLM's code applies no detokenizer to AG News).

    >>> none("a , b")
    'a , b'
    """
    return text


# ---------------------------------------------------------------------------------------------
# WikiText (Moses-tokenized Wikipedia, with @-@ style separators inside numbers and words)

_WIKITEXT_RULES: tuple[Rule, ...] = (
    _literal("s '", "s'"),  # plural possessive: "the players ' union" -> "the players' union"
    (re.compile(r" @([-,.])@ "), r"\1"),  # " @-@ ", " @,@ ", " @.@ " join their neighbours
    # no space before these marks; the order matters for runs like "etc . , and"
    *(_literal(f" {mark} ", f"{mark} ") for mark in ":;.!?,"),
    # no space just inside brackets and quote pairs
    *(_strip_inside(o, c) for o, c in (("(", ")"), ("[", "]"), ("{", "}"), ('"', '"'), ("'", "'"))),
    # headings: "= = Heading = =" -> "== Heading ==" (longest runs first)
    _literal("= = = =", "===="),
    _literal("= = =", "==="),
    _literal("= =", "=="),
    _literal(" \N{DEGREE SIGN} ", "\N{DEGREE SIGN}"),
    # lines carry no space next to the line break
    _literal(" \n", "\n"),
    _literal("\n ", "\n"),
    _literal(" N ", " 1 "),  # PTB's number token, in case it occurs (one pass, as MDLM)
    _literal(" 's", "'s"),
)


@DETOKENIZERS.register("wikitext")
def wikitext(text: str) -> str:
    r"""Undo WikiText's tokenization (MDLM's ``wt_detokenizer`` normalisations).

    - ``s '`` -> ``s'`` (plural possessive);
    - ``" @-@ "``, ``" @,@ "``, ``" @.@ "`` -> ``-``, ``,``, ``.`` (split hyphens and numbers);
    - ``" X "`` -> ``"X "`` for X in ``: ; . ! ? ,``;
    - no whitespace just inside ``( )``, ``[ ]``, ``{ }``, ``" "`` and ``' '`` pairs;
    - heading marks ``= = =`` -> ``===`` (and ``= = = =``, ``= =``); `` ° `` -> ``°``;
    - no space before or after a newline; a standalone `` N `` -> `` 1 ``; `` 's`` -> ``'s``.

    >>> wikitext(" = = Early life = = \n")
    ' == Early life ==\n'
    >>> wikitext("The 2 @,@ 500 @-@ metre ( 8 @,@ 200 ft ) peak was climbed in 1 @.@ 5 days . \n")
    'The 2,500-metre (8,200 ft) peak was climbed in 1.5 days.\n'
    >>> wikitext('He said " yes " , and the team \'s coach agreed ; it was 40 ° N .')
    'He said "yes", and the team\'s coach agreed; it was 40°N .'
    >>> wikitext("the players ' union")
    "the players' union"
    """
    return _apply(_WIKITEXT_RULES, text)


# ---------------------------------------------------------------------------------------------
# PTB (Mikolov's ptb_text_only: lowercase, no punctuation, numbers -> N, rare words -> <unk>)

_PTB_RULES: tuple[Rule, ...] = (
    _literal(" 's", "'s"),
    _literal("s ' ", "s' "),
    _literal(" n't", "n't"),
    _literal(" \n ", "\n"),
    _literal("\\/", "/"),
    # every N with a space on both sides (MDLM repeats the replacement until runs "N N" are done);
    # a sentence-initial or sentence-final N has no space on one side and stays N
    (re.compile(r"(?<= )N(?= )"), "1"),
    _literal("$ 1", "$1"),
    _literal("# 1", "#1"),
    _literal("<unk>", "?"),
)


@DETOKENIZERS.register("ptb")
def ptb(text: str) -> str:
    r"""Undo Penn Treebank (``ptb_text_only``) tokenization (MDLM's ``ptb_detokenizer``).

    - `` 's`` -> ``'s``, ``s ' `` -> ``s' ``, `` n't`` -> ``n't``, ``\/`` -> ``/``;
    - the number token ``N`` between two spaces -> ``1``, then ``$ 1`` -> ``$1``, ``# 1`` -> ``#1``;
    - the rare-word token ``<unk>`` -> ``?``.

    ``N`` and ``<unk>`` are rewritten because MDLM does so and PTB perplexities in the MDLM line
    of work are measured on that text: GPT-2 spends three tokens on ``<unk>`` (``<``, ``unk``,
    ``>``) and one on ``?``, so keeping ``<unk>`` changes the token count and the perplexity.
    ``ptb_text_only`` has no standalone punctuation tokens, so no punctuation spacing is fixed.

    >>> ptb("mr. <unk> 's company did n't pay $ N million for N N shares")
    "mr. ?'s company didn't pay $1 million for 1 1 shares"
    >>> ptb("investors ' funds rose N \\/ N in N")
    "investors' funds rose 1 / 1 in N"
    """
    return _apply(_PTB_RULES, text)


# ---------------------------------------------------------------------------------------------
# LM1B (One Billion Word: one tokenized sentence per document)

_LM1B_RULES: tuple[Rule, ...] = (
    _literal("http : / / ", "http://"),
    _literal("https : / / ", "https://"),
    (re.compile(r" '(\w+)"), r"'\1"),  # clitics: " 's" " 're" " 'll" attach to the word before
    (re.compile(r" (\w+) \. "), r" \1. "),  # a period after a word ...
    (re.compile(r" (\w+) \.$"), r" \1."),  # ... also at the end of the sentence
    _literal(" ? ", "? "),
    (re.compile(r" \?$"), "?"),
    _literal(" ! ", "! "),
    (re.compile(r" !$"), "!"),
    _literal(" , ", ", "),
    _literal(" : ", ": "),
    _literal(" ; ", "; "),
    _literal(" / ", "/"),
    # exactly one space just inside quote and bracket pairs
    (re.compile(r'" ([^"]+) "'), r'"\1"'),
    (re.compile(r"' ([^']+) '"), r"'\1'"),
    (re.compile(r"\( ([^()]+) \)"), r"(\1)"),
    (re.compile(r"\[ ([^\[\]]+) \]"), r"[\1]"),
    _literal("$ ", "$"),
    _literal("\N{POUND SIGN} ", "\N{POUND SIGN}"),
)


@DETOKENIZERS.register("lm1b")
def lm1b(text: str) -> str:
    r"""Undo LM1B's tokenization (MDLM's ``lm1b_detokenizer`` normalisations).

    - ``http : / / `` -> ``http://`` (and ``https``);
    - a space before an apostrophe that starts a word is removed: `` 's`` -> ``'s``;
      ``n't`` is not rejoined (MDLM leaves ``do n't``);
    - `` word . `` -> `` word. `` (also at the end), `` ? `` -> ``? ``, `` ! `` -> ``! ``
      (and at the end), `` , `` `` : `` `` ; `` -> ``, `` ``: `` ``; ``, `` / `` -> ``/``;
    - one space just inside ``" "``, ``' '``, ``( )``, ``[ ]`` pairs is removed;
    - ``$ 5`` -> ``$5``, ``£ 5`` -> ``£5``.

    >>> lm1b("He said it 's \" great \" , and paid $ 5 ( about £ 3 ) for it .")
    'He said it\'s "great", and paid $5 (about £3) for it.'
    >>> lm1b("See http : / / example.com / news : it works !")
    'See http://example.com/news: it works!'
    >>> lm1b("We do n't know why ?")
    "We do n't know why?"
    """
    return _apply(_LM1B_RULES, text)


# ---------------------------------------------------------------------------------------------
# LAMBADA (OpenAI's lambada_test.jsonl: raw book passages with typographic quotes)


@DETOKENIZERS.register("lambada")
def lambada(text: str) -> str:
    r"""Curly double quotes -> ``"``, and the passage becomes ``"\n" + text.strip()``.

    The leading newline is MDLM's convention: every passage starts on a fresh line, so its first
    word is scored after a newline token rather than glued to the previous passage's last word.
    Curly single quotes are kept (MDLM only maps double quotes). Idempotent.

    >>> lambada("  \u201cCome here,\u201d she said.  ")
    '\n"Come here," she said.'
    """
    text = text.replace("\N{LEFT DOUBLE QUOTATION MARK}", '"')
    text = text.replace("\N{RIGHT DOUBLE QUOTATION MARK}", '"')
    return "\n" + text.strip()


# ---------------------------------------------------------------------------------------------
# Scientific papers (arXiv / PubMed articles: lowercase, tokenized, @xmath/@xcite placeholders)


@DETOKENIZERS.register("scientific_papers")
def scientific_papers(text: str) -> str:
    r"""``wikitext`` then ``lm1b`` (MDLM's ``scientific_papers_detokenizer``).

    >>> scientific_papers("the age was 52 @xmath0 8 years ( range 30 - 70 ) @xcite . all agreed .")
    'the age was 52 @xmath0 8 years (range 30 - 70) @xcite. all agreed.'
    """
    return lm1b(wikitext(text))
