"""n-best lists, forced-decoding scores and target prefixes (``keras_transformer.decoding``)
against CTranslate2 on the converted tiny trained model (tests/conftest.py's ``tiny_workdir``).

CTranslate2's conventions, which the comparisons rely on (CTranslate2 4.x, ``src/decoding.cc``,
and checked on this model):

* ``translate_batch(..., return_scores=True)`` scores a hypothesis by the sum of its
  tokens' log-probabilities, the EOS's included (it is not in ``hypotheses`` unless
  ``return_end_token``), divided by ``length ** length_penalty`` (``length``: the
  hypothesis' tokens without EOS): ``length_penalty=0`` leaves the plain sum, our
  ``log_probs`` (and our ``scores`` at ``alpha=0``). There is no ``normalize_scores``
  in 4.x, and its default ``length_penalty`` is 1, not 0.
* ``min_decoding_length`` defaults to 1 (EOS masked at the first step, which
  renormalises that step); ours is 0. ``max_decoding_length`` counts the EOS step,
  as our limit (source tokens with EOS + 50, capped at the model's ``max_length``) does.
* Its log-probabilities are the model's: unless told to suppress pad and BOS
  (``suppress_sequences``, which renormalises every step without them), it may emit
  them where ours never does; here it is not told, and the tests check that it
  never emits them, so both engines search the same space with the same scores.
* ``score_batch`` returns the log-probability of each target token and of the
  ``</s>`` it appends: an empty target gets one, EOS's.
* With ``target_prefix`` the hypothesis includes the prefix, and its score is the
  sum over the tokens after the prefix and EOS: the forced steps score 0.
"""

from collections import defaultdict

import numpy as np
import pytest
import tensorflow as tf

ctranslate2 = pytest.importorskip("ctranslate2")

import test_ctranslate2 as ct2_tests  # noqa: E402

import keras_transformer as kt  # noqa: E402
import keras_transformer.exporters.ctranslate2 as ct2_export  # noqa: E402
from keras_transformer.data import encode_sources  # noqa: E402
from keras_transformer.decoding import Beam, Greedy, decode, score_targets  # noqa: E402
from keras_transformer.training.corpora import load_corpus  # noqa: E402
from keras_transformer.workdir import Workdir  # noqa: E402

pytestmark = pytest.mark.programs

BEAM = 4
EXTRA_LENGTH = 50  # our default output limit: source length (EOS included) + 50
RTOL = ATOL = 1e-4  # summed float32 log-probabilities of two engines
NEVER_EMITTED = {"<pad>", "<s>"}


@pytest.fixture(scope="module")
def ct2(tiny_workdir, tmp_path_factory):
    """The trained tiny workdir converted to CTranslate2 (float32), its CTranslate2
    translator, our model and tokenizers, and the 20 test pairs as our ids and as
    CTranslate2's pieces."""
    out = ct2_export.export_ctranslate2(
        tiny_workdir, tmp_path_factory.mktemp("ct2_decoding") / "ct2"
    )
    workdir = Workdir(tiny_workdir)
    trained = workdir.load()
    pairs = load_corpus(workdir.config["data"])["test"]
    assert len(pairs) == 20
    src_tok, tgt_tok = trained.src_tokenizer, trained.tgt_tokenizer
    source_ids = encode_sources(
        src_tok, tf.constant([s for s, _ in pairs]), trained.max_src_length
    ).to_tensor(default_value=trained.model.config.pad_id)
    source_pieces = ct2_tests._source_pieces(src_tok, source_ids)
    references = [
        tgt_tok.pieces(row) for row in tgt_tok.tokenize(tf.constant([t for _, t in pairs])).numpy()
    ]
    vocabulary = ct2_tests._target_vocabulary(out)
    return dict(
        workdir=tiny_workdir,
        translator=ct2_tests._ct2_translator(out),
        model=trained.model,
        config=trained.model.config,
        src_tok=src_tok,
        tgt_tok=tgt_tok,
        pairs=pairs,
        source_ids=source_ids,
        source_pieces=source_pieces,
        references=references,
        vocabulary=vocabulary,
        index={piece: i for i, piece in enumerate(vocabulary)},
    )


def _limit(ct2, pieces) -> int:
    """Our output limit for a source of ``pieces`` (EOS added), CTranslate2's
    ``max_decoding_length`` for it."""
    return min(len(pieces) + 1 + EXTRA_LENGTH, ct2["config"].max_length)


def _ct2_translate(ct2, source_pieces, target_prefix=None, **options):
    """CTranslate2's results for ``source_pieces``, each sentence decoded with its
    own length limit (``max_decoding_length`` is one per call: the sentences go
    in groups of equal limits), in input order."""
    groups = defaultdict(list)
    for i, pieces in enumerate(source_pieces):
        groups[_limit(ct2, pieces)].append(i)
    results = [None] * len(source_pieces)
    for limit, rows in groups.items():
        prefixes = None if target_prefix is None else [target_prefix[i] for i in rows]
        batch = ct2_tests._translate_batch(
            ct2["translator"],
            [source_pieces[i] for i in rows],
            target_prefix=prefixes,
            max_decoding_length=limit,
            **options,
        )
        for i, result in zip(rows, batch):
            assert not NEVER_EMITTED & {p for h in result.hypotheses for p in h}, (
                "CTranslate2 emitted pad or BOS: the engines search different spaces",
                i,
                result.hypotheses,
            )
            results[i] = result
    return results


def _ct2_log_probs(ct2, source_pieces, target_pieces) -> np.ndarray:
    """CTranslate2's log-probability of each target (its pieces, then EOS)."""
    per_token = ct2_tests._score_batch(ct2["translator"], source_pieces, target_pieces)
    return np.array([lp.sum() for lp in per_token])


def _pieces(ct2, row) -> tuple[str, ...]:
    """Our output row (no BOS; EOS then pad) as pieces, up to its EOS."""
    row = list(row)
    assert ct2["config"].eos_id in row, ("no EOS: missing, or at the length limit", row)
    end = row.index(ct2["config"].eos_id)
    assert all(t == ct2["config"].pad_id for t in row[end + 1 :]), row
    assert not {ct2["config"].pad_id, ct2["config"].bos_id} & set(row[:end]), row
    return tuple(ct2["vocabulary"][t] for t in row[:end])


def _target_ids(ct2, hypotheses) -> tf.Tensor:
    """``[batch, len]`` ids of piece lists: no BOS, EOS, then pad."""
    config = ct2["config"]
    rows = [[ct2["index"][p] for p in pieces] + [config.eos_id] for pieces in hypotheses]
    width = max(len(row) for row in rows)
    return tf.constant([row + [config.pad_id] * (width - len(row)) for row in rows], tf.int32)


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"n_best={n}")
def n_best(request, ct2):
    """Our n-best lists (beam 4, alpha 0) and CTranslate2's, as ``(pieces, score)`` lists."""
    n = request.param
    out = decode(ct2["model"], ct2["source_ids"], Beam(size=BEAM, alpha=0.0), n=n)
    batch = len(ct2["pairs"])
    assert out.tokens.shape[:2] == (batch, n)
    assert out.scores.shape == out.log_probs.shape == (batch, n)
    assert out.tokens.dtype == tf.int32 and out.scores.dtype == out.log_probs.dtype == tf.float32
    # alpha = 0: the length penalty is 1, the ranking score the log-probability.
    np.testing.assert_allclose(out.scores.numpy(), out.log_probs.numpy(), rtol=1e-6)
    ours = [
        [(_pieces(ct2, row), float(lp)) for row, lp in zip(rows, lps)]
        for rows, lps in zip(out.tokens.numpy(), out.log_probs.numpy())
    ]
    # length_penalty=0 (our alpha=0); patience 1 (CTranslate2's default): beam 4 may return 4.
    theirs = [
        [(tuple(h), s) for h, s in zip(r.hypotheses, r.scores)]
        for r in _ct2_translate(
            ct2, ct2["source_pieces"], beam_size=BEAM, num_hypotheses=n, patience=1
        )
    ]
    return dict(n=n, out=out, ours=ours, theirs=theirs)


def test_n_best_lists_match_ctranslate2(ct2, n_best, capsys):
    """Beam 4 at alpha 0, n-best of 2 and 4, on the 20 test sentences: each list is
    sorted, holds distinct hypotheses, and agrees with CTranslate2's wherever
    CTranslate2's search sees what ours sees.

    The engines keep the same live beams (the best ``beam`` non-EOS extensions of
    the best ``2·beam`` candidates a step), but register finished hypotheses and
    stop differently:

    * CTranslate2 registers an EOS candidate only if it ranks in the step's first
      ``beam`` of the ``2·beam`` candidates; ours registers every EOS candidate of
      the ``2·beam`` and keeps the best ``beam`` finished ones. A hypothesis ending
      at rank ``beam + 1 .. 2·beam`` of its step, better than what is registered
      later, is in our list and never in CTranslate2's (even as its best).
    * At ``length_penalty=0`` CTranslate2 stops a sentence once the best candidate
      of a step has ended and ``num_hypotheses`` hypotheses are registered; ours
      once its finished hypotheses outscore every live beam, which no later
      hypothesis can beat. CTranslate2 may so return a worse ``k``-th hypothesis.

    Both only ever make our list better, so what must hold: rank by rank our
    scores are at least CTranslate2's; every CTranslate2 hypothesis that scores
    above our last one is in our list, with the same score; and every hypothesis
    of ours that CTranslate2 did not return has, under CTranslate2's own
    ``score_batch``, the log-probability we report (it is a real hypothesis of
    this model, scored right). Where hypotheses tie, their order may differ:
    membership and rank-wise scores ignore it.
    """
    n, ours, theirs = n_best["n"], n_best["ours"], n_best["theirs"]
    extras, same, best_differs = [], 0, []
    for i, (our_list, their_list) in enumerate(zip(ours, theirs)):
        assert len(their_list) == n, (i, their_list)
        our_scores = np.array([s for _, s in our_list])
        their_scores = np.array([s for _, s in their_list])
        assert np.all(np.diff(our_scores) <= ATOL), ("not best first", i, our_list)
        assert len({h for h, _ in our_list}) == n, ("a hypothesis twice", i, our_list)
        assert np.all(our_scores >= their_scores - ATOL), (i, our_list, their_list)
        our_scores_by_hypothesis = dict(our_list)
        for hypothesis, score in their_list:
            if hypothesis in our_scores_by_hypothesis:
                np.testing.assert_allclose(
                    our_scores_by_hypothesis[hypothesis], score, rtol=RTOL, atol=ATOL
                )
            else:
                assert score <= our_scores[-1] + ATOL, (
                    "CTranslate2 found a better hypothesis",
                    i,
                    hypothesis,
                    score,
                    our_list,
                )
        their_hypotheses = {h for h, _ in their_list}
        extras += [(i, h, s) for h, s in our_list if h not in their_hypotheses]
        same += not any(e[0] == i for e in extras)
        if our_list[0][0] != their_list[0][0] and our_scores[0] > their_scores[0] + ATOL:
            best_differs.append(i)
    if extras:
        scored = _ct2_log_probs(
            ct2, [ct2["source_pieces"][i] for i, _, _ in extras], [list(h) for _, h, _ in extras]
        )
        np.testing.assert_allclose([s for _, _, s in extras], scored, rtol=RTOL, atol=ATOL)
    with capsys.disabled():
        print(
            f"\n[n_best={n}] {same}/{len(ours)} lists as CTranslate2's; {len(extras)} "
            f"hypotheses CTranslate2 did not keep; our best better in {len(best_differs)} "
            f"sentences {best_differs}"
        )


def test_score_targets_matches_score_batch(ct2, n_best):
    """``score_targets`` is CTranslate2's ``score_batch`` summed (the EOS's
    log-probability included) for the references, our n-best hypotheses,
    CTranslate2's, and an empty target (EOS alone) of every sentence; and for
    our hypotheses it is the ``log_probs`` the search reported."""
    count = len(ct2["pairs"])
    rows = list(range(count))
    targets = list(ct2["references"])
    for lists in (n_best["ours"], n_best["theirs"]):
        for i, hypotheses in enumerate(lists):
            rows += [i] * len(hypotheses)
            targets += [list(h) for h, _ in hypotheses]
    rows += list(range(count))
    targets += [[] for _ in range(count)]
    ours = score_targets(
        ct2["model"], tf.gather(ct2["source_ids"], rows), _target_ids(ct2, targets)
    )
    assert ours.shape == (len(targets),) and ours.dtype == tf.float32
    theirs = _ct2_log_probs(ct2, [ct2["source_pieces"][i] for i in rows], targets)
    np.testing.assert_allclose(ours.numpy(), theirs, rtol=RTOL, atol=ATOL)
    ours_n_best = ours.numpy()[count : count + n_best["n"] * count]
    np.testing.assert_allclose(
        ours_n_best, n_best["out"].log_probs.numpy().reshape(-1), rtol=RTOL, atol=ATOL
    )


def _prefixes(ct2) -> list[list[str]]:
    """Target prefixes, two a sentence: its reference's first 1-3 pieces, and an
    odd one the model would not pick (another reference's last piece, then this
    reference's first), or none at all for every fifth sentence."""
    references = ct2["references"]
    first = [reference[: 1 + i % 3] for i, reference in enumerate(references)]
    odd = [
        [] if i % 5 == 4 else [references[(i + 1) % len(references)][-1], reference[0]]
        for i, reference in enumerate(references)
    ]
    return first + odd


def test_greedy_with_a_target_prefix_matches_ctranslate2(ct2):
    """Greedy decoding forced through a target prefix (``prefix_ids``) gives
    CTranslate2's ``translate_batch(target_prefix=..., beam_size=1)`` token for
    token: the prefix, then the model's greedy continuation; and the same
    log-probability (CTranslate2's score leaves the forced prefix out: the sum
    over the continuation and EOS; the prefix's part comes from ``score_batch``)."""
    config = ct2["config"]
    prefixes = _prefixes(ct2)
    rows = list(range(len(ct2["pairs"]))) * 2
    width = max(len(p) for p in prefixes)
    prefix_ids = tf.constant(
        [
            [ct2["index"][p] for p in prefix] + [config.pad_id] * (width - len(prefix))
            for prefix in prefixes
        ],
        tf.int32,
    )
    source_ids = tf.gather(ct2["source_ids"], rows)
    source_pieces = [ct2["source_pieces"][i] for i in rows]
    out = decode(ct2["model"], source_ids, Greedy(), prefix_ids=prefix_ids)
    ours = [_pieces(ct2, row) for row in out.tokens.numpy()[:, 0]]
    results = _ct2_translate(
        ct2, source_pieces, target_prefix=[p or None for p in prefixes], beam_size=1
    )
    theirs = [tuple(r.hypotheses[0]) for r in results]
    for i, (prefix, hypothesis) in enumerate(zip(prefixes, theirs)):
        assert hypothesis[: len(prefix)] == tuple(prefix), (i, prefix, hypothesis)
    mismatches = [(i, a, b) for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert not mismatches, mismatches[:3]
    # The prefixes are not what the model would pick: its own greedy output starts otherwise.
    greedy = decode(ct2["model"], ct2["source_ids"], Greedy())
    unforced = [_pieces(ct2, row) for row in greedy.tokens.numpy()[:, 0]]
    assert (
        sum(
            bool(prefix) and unforced[i][: len(prefix)] != tuple(prefix)
            for i, prefix in zip(rows, prefixes)
        )
        >= len(prefixes) // 2
    )
    per_token = ct2_tests._score_batch(ct2["translator"], source_pieces, [list(h) for h in theirs])
    their_continuation = np.array([r.scores[0] for r in results])
    np.testing.assert_allclose(
        their_continuation,
        [lp[len(prefix) :].sum() for lp, prefix in zip(per_token, prefixes)],
        rtol=RTOL,
        atol=ATOL,
    )
    their_full = np.array([lp.sum() for lp in per_token])
    np.testing.assert_allclose(out.log_probs.numpy()[:, 0], their_full, rtol=RTOL, atol=ATOL)


@pytest.fixture(scope="module")
def translator(ct2):
    """A string-level translator of the trained workdir with the beam compared with
    CTranslate2's above (4, alpha 0), each batch decoded whole (``decode_parts=1``:
    half the tracing; a sentence decodes the same in any batch and part)."""
    return kt.Translator.from_workdir(ct2["workdir"], beam_size=BEAM, alpha=0.0, decode_parts=1)


def test_translator_n_best_is_scored_and_translated_alike(ct2, translator):
    """At the string level (beam 4, alpha 0): ``n_best(s, n)`` holds the distinct
    texts of ``decode``'s n-best ids (those compared with CTranslate2's above),
    best first; each log-probability is ``score(s, text)`` of its text, and the
    search's own where the text tokenizes back to the hypothesis' ids (a decoder
    may emit another segmentation of a text, and ``score`` scores the text's
    own); the first text is ``translate``'s. (tests/test_translator_features.py
    checks the same relations at alpha 0.6 on other sentences.)"""
    count = 8
    sentences = [s for s, _ in ct2["pairs"][:count]]
    lists = translator.n_best(sentences, BEAM)
    assert len(lists) == count
    assert all(isinstance(t, str) and isinstance(lp, float) for h in lists for t, lp in h)
    assert [hypotheses[0][0] for hypotheses in lists] == translator.translate(sentences)
    sources = [sentence for sentence, h in zip(sentences, lists) for _ in h]
    np.testing.assert_allclose(
        translator.score(sources, [t for h in lists for t, _ in h]),
        [lp for h in lists for _, lp in h],
        rtol=RTOL,
        atol=ATOL,
    )

    out = decode(
        ct2["model"],
        ct2["source_ids"][:count],
        Beam(size=BEAM, alpha=0.0),
        n=BEAM,
    )
    tgt_tok, eos = ct2["tgt_tok"], ct2["config"].eos_id
    ids = [
        list(row[: list(row).index(eos)]) for row in out.tokens.numpy().reshape(count * BEAM, -1)
    ]
    texts = [t.decode("utf-8") for t in tgt_tok.detokenize(tf.ragged.constant(ids)).numpy()]
    log_probs = out.log_probs.numpy().reshape(-1)
    round_trips = [
        tgt_tok.tokenize(tf.constant([text])).numpy()[0].tolist() == row
        for text, row in zip(texts, ids)
    ]
    compared = 0
    for i, hypotheses in enumerate(lists):
        first = {}
        for row in range(i * BEAM, (i + 1) * BEAM):
            first.setdefault(texts[row], row)
        assert [t for t, _ in hypotheses] == list(first), (sentences[i], hypotheses, list(first))
        for text, log_prob in hypotheses:
            if round_trips[first[text]]:
                np.testing.assert_allclose(log_prob, log_probs[first[text]], rtol=RTOL, atol=ATOL)
                compared += 1
    assert compared >= len(texts) // 2, "too few texts tokenize back to their hypothesis"
