"""The unigram and bigram references of an ``eval ppl`` record, and the warning when a model does not beat them."""

from __future__ import annotations

from harness.data import get_packed
from harness.data.corpora import get_corpus
from harness.errors import DataError
from harness.logging import console
from harness.metrics.references import NOT_LEARNED, fit_counts, no_better_than_unigram, references_block


def text_references(
    dataset, cfg, tokenizer, ids, mask, scored, *, seq_len: int, packing: dict, tokens_scored: float
) -> dict:
    """The unigram and bigram references of the scored tokens, fitted on a train split packed as the
    scored data: the scored corpus's train split when it has one other than the scored split, else
    the checkpoint's own training corpus (named in ``fit_on``, with a note)."""

    train = cfg.data.train_split
    note = None
    if train in dataset.corpus.splits and train != dataset.split and dataset.corpus.splits[train]:
        corpus = dataset.corpus
    else:
        corpus = get_corpus(cfg.data.corpus)
        note = (
            f"{dataset.name} has no {train!r} split apart from the scored one; the references are fitted on "
            f"the checkpoint's training corpus {cfg.data.corpus}:{train}"
        )
        if train not in corpus.splits or not corpus.splits[train]:
            raise DataError(
                f"no train split to fit the unigram/bigram references on ({dataset.name}, {cfg.data.corpus})",
                fix="evaluate with --no-references, or on a corpus with a train split",
            )
    fit = get_packed(corpus, train, tokenizer=tokenizer, seq_len=seq_len, **packing)
    counts = fit_counts(fit.input_ids, fit.attention_mask, vocab_size=tokenizer.vocab_size)
    block = references_block(counts, ids, scored, mask, fit_on=f"{corpus.spec}:{train}", note=note)
    if block["tokens_scored"] != int(tokens_scored):
        raise RuntimeError(
            f"the references counted {block['tokens_scored']} tokens where the model scored "
            f"{int(tokens_scored)}: the family's scored_positions disagrees with its nll"
        )
    return block


def warn_if_not_learned(record: dict) -> bool:
    """Say on stderr when the record's NLL is not below the unigram reference of its tokens."""

    nll = record["metrics"].get("nll")
    refs = record.get("references")
    if nll is None or not no_better_than_unigram(nll["value"], refs):
        return False
    console().print(
        f"[yellow]warning:[/] {record['model']['name']}: NLL {nll['value']:.4f} is {NOT_LEARNED} "
        f"(unigram reference {refs['unigram']['nll']['value']:.4f} nats/token on the same tokens)"
    )
    return True


__all__ = ["text_references", "warn_if_not_learned"]
