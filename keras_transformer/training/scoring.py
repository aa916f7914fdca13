"""Translation quality: sacrebleu BLEU and chrF (cased, 13a, detokenized) and exact match."""

from __future__ import annotations

from collections.abc import Sequence

import sacrebleu


def score_translations(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references.")
    if not references:
        raise ValueError("Nothing to score: no references.")
    bleu_metric, chrf_metric = sacrebleu.BLEU(), sacrebleu.CHRF()
    bleu = bleu_metric.corpus_score(list(hypotheses), [list(references)])
    chrf = chrf_metric.corpus_score(list(hypotheses), [list(references)])
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references)) / len(references)
    return {
        "bleu": round(bleu.score, 2),
        "chrf": round(chrf.score, 2),
        "exact_match": round(exact, 4),
        "sentences": len(references),
        "bleu_signature": str(bleu_metric.get_signature()),
    }
