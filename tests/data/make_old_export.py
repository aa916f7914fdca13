"""Make the tiny export of ``old_export.tar.gz`` with the checkout it runs in.

``tests/test_old_export.py`` checks that ``Translator.from_saved_model`` loads an
export made before ``TranslationGraph`` and gives the answers recorded then in
``old_export.answers.json``. They were made from the commit before it, run from
its checkout root::

    python tests/data/make_old_export.py /tmp/old    # then, in /tmp/old/export/1:
    tar --exclude=./assets.extra -czf old_export.tar.gz .
    python tests/test_old_export.py /tmp/old/export/1 old_export.answers.json

(``test_old_export.py``'s ``answers`` uses only the public API, the same then.)

The model is random and tiny (one layer, d_model 16): the answers are
meaningless but fixed. The warm-up requests are left out.
"""

import sys
from pathlib import Path

import keras

import keras_transformer as kt
from keras_transformer.tokenization import SubwordTokenizer, train_sentencepiece
from keras_transformer.workdir import TrainedModel

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
texts = [
    "the boy sees 3 cats",
    "a dog sleeps",
    "the farmer was happy",
    "der Junge sieht 3 Katzen",
    "ein Hund schläft",
    "der Bauer war glücklich",
    "the old teacher gave a book to the children",
] * 20
train_sentencepiece(texts, out / "spm", vocab_size=60, normalization_rule_name="identity")
tok = SubwordTokenizer((out / "spm.model").read_bytes())
keras.utils.set_random_seed(7)
config = kt.TransformerConfig.from_preset(
    "tiny",
    num_layers=1,
    d_model=16,
    num_heads=2,
    d_ff=32,
    vocab_size=tok.vocab_size,
    max_length=32,
    dropout=0.0,
)
model = kt.Transformer(config)
model.build()
trained = TrainedModel(model, tok, tok, max_src_length=16)
path = kt.exporters.export_saved_model(
    trained, out / "export", beam_size=2, max_length=10, version=1
)
print(path)
