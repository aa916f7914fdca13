"""An export made before ``TranslationGraph`` still loads and gives the answers it gave then.

``tests/data/old_export.tar.gz`` is a tiny export (a random one-layer model,
beam 2) made by the exporter of the commit before the translation graph, and
``old_export.answers.json`` the answers ``Translator.from_saved_model`` gave
for it then (``tests/data/make_old_export.py`` says how both were made). The
loader relies only on what such an export holds: its signatures,
``beam_size_tensor``, ``max_length_tensor`` and the SentencePiece asset.
"""

import json
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"
SENTENCES = ["the boy sees 3 cats", "a dog sleeps", "", "ein Hund schläft", "the farmer"]
PREFIXES = ["der", "", "ein", "", "the"]
TARGETS = ["der Junge", "", "x", "ein Hund", "the farmer"]


def answers(path) -> dict:
    """What ``Translator.from_saved_model`` answers for the export at ``path``, as JSON values."""
    import keras_transformer as kt

    beam = kt.Translator.from_saved_model(path)
    greedy = kt.Translator.from_saved_model(path, beam_size=1)
    attention = beam.cross_attention("the boy sees 3 cats")
    return {
        "beam_size": [beam.beam_size, greedy.beam_size],
        "translate": beam.translate(SENTENCES),
        "translate_greedy": greedy.translate(SENTENCES),
        "prefixes": beam.translate(SENTENCES, prefixes=PREFIXES),
        "prefixes_greedy": greedy.translate(SENTENCES, prefixes=PREFIXES),
        "n_best": beam.n_best(SENTENCES, 2),
        "n_best_greedy": greedy.n_best(SENTENCES, 1),
        "score": beam.score(SENTENCES, TARGETS),
        "sample": beam.sample(SENTENCES, top_k=5, seed=3),
        "iterable": list(beam.translate_iterable(iter(SENTENCES), window=2)),
        "attention": [
            attention["translation"],
            attention["source_pieces"],
            attention["target_pieces"],
            attention["weights"].round(5).tolist(),
        ],
    }


def _approx(value):
    """``value`` with its floats compared to 1e-4: another CPU may round otherwise."""
    if isinstance(value, float):
        return pytest.approx(value, abs=1e-4)
    if isinstance(value, (list, tuple)):
        return [_approx(item) for item in value]
    return value


def test_an_export_made_before_the_translation_graph_gives_the_same_answers(tmp_path):
    with tarfile.open(DATA / "old_export.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    expected = json.loads((DATA / "old_export.answers.json").read_text(encoding="utf-8"))
    got = json.loads(json.dumps(answers(tmp_path)))  # tuples as lists, as recorded
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == _approx(value), key


def test_an_export_runs_as_written_and_the_users_rewrite_options_stay(tmp_path):
    """The signatures run without Grappler's rewrites (the answers above were recorded
    with them), and the process's optimizer options are as the user left them."""
    import tensorflow as tf

    import keras_transformer as kt

    with tarfile.open(DATA / "old_export.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    tf.config.optimizer.set_experimental_options({"constant_folding": False})
    try:
        before = tf.config.optimizer.get_experimental_options()
        translator = kt.Translator.from_saved_model(tmp_path, beam_size=1)
        assert translator.translate(["a dog sleeps"]) == [
            json.loads((DATA / "old_export.answers.json").read_text(encoding="utf-8"))[
                "translate_greedy"
            ][1]
        ]
        assert tf.config.optimizer.get_experimental_options() == before
    finally:
        tf.config.optimizer.set_experimental_options({"constant_folding": True})


def test_one_signature_loads_alone_and_answers_as_the_whole_export(tmp_path):
    """``load_signature`` loads a signature with only the functions it calls, and it gives
    the whole export's answers; an unknown signature is ``None``."""
    import tensorflow as tf

    from keras_transformer.translation.signature_loading import load_signature

    with tarfile.open(DATA / "old_export.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    texts = tf.constant(SENTENCES[:2])
    whole = tf.saved_model.load(str(tmp_path))
    for name in ("serving_default", "translate_greedy"):
        alone = load_signature(tmp_path, name)
        assert alone is not None and list(alone.signatures) == [name]
        assert int(alone.beam_size_tensor.numpy()) == int(whole.beam_size_tensor.numpy())
        got = alone.signatures[name](inputs=texts)
        want = whole.signatures[name](inputs=texts)
        assert got["translations"].numpy().tolist() == want["translations"].numpy().tolist()
        np.testing.assert_allclose(got["scores"].numpy(), want["scores"].numpy(), atol=1e-5)
    assert load_signature(tmp_path, "no_such_signature") is None


if __name__ == "__main__":  # python tests/test_old_export.py EXPORT ANSWERS.json
    Path(sys.argv[2]).write_text(json.dumps(answers(sys.argv[1]), ensure_ascii=False))
