"""Keras' own save, load and export, as users write them: ``model.save`` to a
``.keras`` file and ``keras.models.load_model`` in a fresh process with
``safe_mode`` on, over every loss, metric, learning rate, precision and kind of
model; ``model.export`` however the model was built; every public object Keras
may serialize registered under one package, its config round-tripping.

The fresh process is one for the whole matrix: the test module run as a
script (``reload_and_continue``) loads every file the fixture saved."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from hang_guard import HANG_TIMEOUT

import keras_transformer as kt

pytestmark = pytest.mark.runtime

CHECKOUT = Path(__file__).resolve().parent.parent
VOCAB = 50
SMALL = dict(
    vocab_size=VOCAB, num_layers=1, d_model=16, num_heads=2, d_ff=32, max_length=16, dropout=0.0
)
WARMUP = 4
STEPS_BEFORE_SAVE = 2  # one fit over two batches; the matrix then takes one more step


def small_config(**overrides):
    return kt.TransformerConfig.from_preset("tiny", **{**SMALL, **overrides})


def training_batches():
    """``(x, y)`` for two batches of 2 sentences (padded), labels shifted by one."""
    rng = np.random.default_rng(7)
    source = rng.integers(4, VOCAB, size=(4, 6)).astype("int32")
    target = rng.integers(4, VOCAB, size=(4, 6)).astype("int32")
    target[:, 0] = kt.BOS_ID
    source[1, 4:] = kt.PAD_ID
    target[3, 4:] = kt.PAD_ID
    labels = np.concatenate([target[:, 1:], np.zeros((4, 1), "int32")], axis=1)
    return (source, target[:, :-1]), labels[:, :-1]


def probe_inputs():
    """Sentences of other lengths than in training, with padding."""
    rng = np.random.default_rng(8)
    source = rng.integers(4, VOCAB, size=(3, 9)).astype("int32")
    target = rng.integers(4, VOCAB, size=(3, 7)).astype("int32")
    target[:, 0] = kt.BOS_ID
    source[2, 5:] = kt.PAD_ID
    target[2, 3:] = kt.PAD_ID
    return source, target


def fit_one_more_step(model):
    (source, target), labels = training_batches()
    model.fit(
        (source[:2], target[:2]), labels[:2], batch_size=2, epochs=1, verbose=0, shuffle=False
    )


def optimizer_state(optimizer) -> dict:
    """The optimizer as a user would compare it: its serialized form (class,
    learning rate or schedule, inner optimizer), step, current learning rate,
    and under fp16 the loss scale and its growth counter."""
    state = {
        "serialized": json.loads(json.dumps(keras.saving.serialize_keras_object(optimizer))),
        "iterations": int(optimizer.iterations.numpy()),
        "learning_rate": float(np.asarray(optimizer.learning_rate)),
    }
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        state["loss_scale"] = float(optimizer.dynamic_scale.numpy())
        state["loss_scale_growth_counter"] = int(optimizer.step_counter.numpy())
    return state


# --- the matrix ------------------------------------------------------------------------


def _metric(name):
    return {"masked_accuracy": kt.masked_accuracy, "MaskedAccuracy": kt.MaskedAccuracy()}[name]


def _optimizer(name):
    return {
        "paper_adam": lambda: kt.paper_adam(d_model=16, warmup_steps=WARMUP),
        "Adam+TransformerSchedule": lambda: keras.optimizers.Adam(
            kt.TransformerSchedule(16, WARMUP)
        ),
        "FusedAdam": lambda: kt.FusedAdam(1e-3),
        "LossScaleOptimizer(Adam)": lambda: keras.optimizers.LossScaleOptimizer(
            keras.optimizers.Adam(1e-3)
        ),
    }[name]()


MODELS = {
    "shared+tied": dict(share_embeddings=True, tie_embeddings=True),
    "untied": dict(share_embeddings=False, tie_embeddings=False),
    "pre-LN": dict(norm_first=True),
    "GELU": dict(activation="gelu"),
    # Marian's options (OPUS-MT), the decoder starting from the pad id.
    "Marian": dict(
        share_embeddings=True,
        tie_embeddings=True,
        activation="swish",
        position_encoding="halves",
        embedding_scale=1.0,
        final_logits_bias=True,
        layer_norm_epsilon=1e-5,
        bos_id=kt.PAD_ID,
    ),
}


@dataclasses.dataclass(frozen=True)
class Combination:
    label_smoothing: float
    metric: str
    optimizer: str
    precision: str
    built_by: str  # "build()" or "fit" (its first call)
    model: str
    # Tracing a training step costs seconds, before and after reloading: one
    # combination trains in graph mode as users do, the others eagerly
    # (`compile(run_eagerly=True)`, saved and reloaded with the model).
    run_eagerly: bool = True

    @property
    def id(self) -> str:
        return "-".join(
            [
                f"eps{self.label_smoothing}",
                self.metric,
                self.optimizer,
                self.precision,
                self.built_by,
                self.model,
                "eager" if self.run_eagerly else "graph",
            ]
        )


# Every value of every axis, not their product; fp16 both with Keras'
# automatic loss scaling and with a LossScaleOptimizer written by the user.
MATRIX = [
    Combination(
        0.1, "masked_accuracy", "paper_adam", "float32", "build()", "shared+tied", run_eagerly=False
    ),
    Combination(
        0.0, "MaskedAccuracy", "Adam+TransformerSchedule", "mixed_bfloat16", "fit", "pre-LN"
    ),
    Combination(0.1, "masked_accuracy", "FusedAdam", "mixed_float16", "fit", "GELU"),
    Combination(
        0.0, "MaskedAccuracy", "LossScaleOptimizer(Adam)", "mixed_float16", "build()", "untied"
    ),
    Combination(
        0.1, "masked_accuracy", "Adam+TransformerSchedule", "mixed_bfloat16", "build()", "Marian"
    ),
]
SCHEDULED = {"paper_adam", "Adam+TransformerSchedule"}


def train_and_save(combination: Combination, directory: Path) -> dict:
    """A user's session: build, compile, fit two steps, save; then the step
    the reloaded model must reproduce, taken by this model in memory."""
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(combination.precision)
    try:
        keras.utils.set_random_seed(0)
        model = kt.Transformer(small_config(**MODELS[combination.model]))
        if combination.built_by == "build()":
            model.build()
        model.compile(
            optimizer=_optimizer(combination.optimizer),
            loss=kt.MaskedLabelSmoothedCrossEntropy(combination.label_smoothing),
            metrics=[_metric(combination.metric)],
            run_eagerly=combination.run_eagerly,
        )
        x, y = training_batches()
        model.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False)
        model.save(directory / f"{combination.id}.keras")
        saved = {
            "logits": model(probe_inputs(), training=False).numpy(),
            "optimizer": optimizer_state(model.optimizer),
        }
        fit_one_more_step(model)
        return {
            **saved,
            "after_step": {
                "weights": model.get_weights(),
                "optimizer": optimizer_state(model.optimizer),
            },
        }
    finally:
        keras.config.set_dtype_policy(policy)


def reload_and_continue(directory: Path) -> None:
    """The fresh process: for each saved model, ``load_model`` (safe mode),
    logits and optimizer state, then one more ``fit`` step. Writes
    ``<id>.reloaded.npz`` and ``reloaded.json``; errors are recorded per model."""
    results = {}
    for path in sorted(directory.glob("*.keras")):
        name = path.name[: -len(".keras")]
        try:
            model = keras.models.load_model(path, safe_mode=True)
            logits = np.asarray(model(probe_inputs(), training=False))
            loaded = optimizer_state(model.optimizer)
            fit_one_more_step(model)
            weights = model.get_weights()
            np.savez(directory / f"{name}.reloaded.npz", *weights, logits=logits)
            results[name] = {
                "optimizer": loaded,
                "after_step": {"optimizer": optimizer_state(model.optimizer)},
            }
        except Exception as error:  # reported by the tests of this combination
            results[name] = {"error": f"{type(error).__name__}: {error}"}
    (directory / "reloaded.json").write_text(json.dumps(results))


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory):
    """``{id: (original, reloaded)}`` for every combination of the matrix."""
    directory = tmp_path_factory.mktemp("round_trips")
    originals = {c.id: train_and_save(c, directory) for c in MATRIX}
    result = subprocess.run(
        [sys.executable, __file__, str(directory)],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
        env={
            **os.environ,
            "TF_CPP_MIN_LOG_LEVEL": "3",
            "KERAS_BACKEND": "tensorflow",
            "PYTHONPATH": str(CHECKOUT),
        },
    )
    assert result.returncode == 0, result.stderr[-4000:]
    reloaded = json.loads((directory / "reloaded.json").read_text())
    for name, entry in reloaded.items():
        if "error" not in entry:
            arrays = np.load(directory / f"{name}.reloaded.npz")
            entry["logits"] = arrays["logits"]
            entry["after_step"]["weights"] = [
                arrays[f"arr_{i}"] for i in range(len(arrays.files) - 1)
            ]
    return {name: (originals[name], reloaded[name]) for name in originals}


def _reloaded(round_trips, combination):
    original, reloaded = round_trips[combination.id]
    assert "error" not in reloaded, reloaded.get("error")
    return original, reloaded


def test_the_matrix_covers_every_value_of_every_axis():
    axes = {
        field.name: {getattr(c, field.name) for c in MATRIX}
        for field in dataclasses.fields(Combination)
    }
    assert axes["label_smoothing"] == {0.0, 0.1}
    assert axes["metric"] == {"masked_accuracy", "MaskedAccuracy"}
    assert axes["optimizer"] == {
        "paper_adam",
        "Adam+TransformerSchedule",
        "FusedAdam",
        "LossScaleOptimizer(Adam)",
    }
    assert axes["precision"] == {"float32", "mixed_bfloat16", "mixed_float16"}
    assert axes["built_by"] == {"build()", "fit"}
    assert axes["model"] == set(MODELS)
    assert axes["run_eagerly"] == {False, True}


@pytest.mark.parametrize("combination", MATRIX, ids=lambda c: c.id)
def test_a_reloaded_model_gives_identical_logits(round_trips, combination):
    original, reloaded = _reloaded(round_trips, combination)
    np.testing.assert_array_equal(reloaded["logits"], original["logits"])


@pytest.mark.parametrize("combination", MATRIX, ids=lambda c: c.id)
def test_a_reloaded_optimizer_is_at_the_same_step_with_the_same_learning_rate(
    round_trips, combination
):
    original, reloaded = _reloaded(round_trips, combination)
    assert reloaded["optimizer"] == original["optimizer"]
    assert reloaded["optimizer"]["iterations"] == STEPS_BEFORE_SAVE
    if combination.precision == "mixed_float16":
        assert reloaded["optimizer"]["serialized"]["class_name"] == "LossScaleOptimizer"


@pytest.mark.parametrize("combination", MATRIX, ids=lambda c: c.id)
def test_one_more_fit_step_continues_rather_than_restarts(round_trips, combination):
    """The step after reloading is the step the original model took in memory:
    same weights, one more iteration, the learning rate of the next step."""
    original, reloaded = _reloaded(round_trips, combination)
    after = reloaded["after_step"]
    assert after["optimizer"]["iterations"] == STEPS_BEFORE_SAVE + 1
    assert after["optimizer"] == original["after_step"]["optimizer"]
    if combination.optimizer in SCHEDULED:
        schedule = kt.TransformerSchedule(16, WARMUP)
        assert reloaded["optimizer"]["learning_rate"] == pytest.approx(
            float(schedule(STEPS_BEFORE_SAVE))
        )
        assert after["optimizer"]["learning_rate"] == pytest.approx(
            float(schedule(STEPS_BEFORE_SAVE + 1))
        )
        assert after["optimizer"]["learning_rate"] > float(
            schedule(1)
        )  # not a restart (warm-up rises)
    assert len(after["weights"]) == len(original["after_step"]["weights"])
    for got, expected in zip(after["weights"], original["after_step"]["weights"]):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_a_model_compiled_with_the_masked_accuracy_function_reloads(tmp_path):
    """``metrics=[kt.masked_accuracy]`` as the README lists it: the saved
    function is found again, with safe mode on, and measures the same."""
    model = kt.Transformer(small_config())
    model.compile(
        optimizer=kt.paper_adam(d_model=16, warmup_steps=WARMUP),
        loss=kt.MaskedLabelSmoothedCrossEntropy(0.1),
        metrics=[kt.masked_accuracy],
        run_eagerly=True,
    )
    x, y = training_batches()
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    model.save(tmp_path / "model.keras")
    reloaded = keras.models.load_model(tmp_path / "model.keras", safe_mode=True)
    expected = model.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
    assert reloaded.evaluate(x, y, batch_size=4, verbose=0, return_dict=True) == pytest.approx(
        expected
    )
    assert set(expected) == {"loss", "masked_accuracy"}


# --- model.export ---------------------------------------------------------------------------


def _built_by_build_then_a_call(path):
    model = kt.Transformer(small_config())
    model.build()
    model(training_batches()[0])
    return model


def _loaded_after_a_first_call_with_a_dict(path):
    """Built from a dict, then saved and loaded: ``load_model`` builds it
    again from the saved build config, and it is never called after that."""
    model = kt.Transformer(small_config(norm_first=True))
    source, target = training_batches()[0]
    model({"source_ids": source, "target_ids": target})
    model.save(path / "model.keras")
    return keras.models.load_model(path / "model.keras")


@pytest.mark.parametrize(
    "make_model",
    [_built_by_build_then_a_call, _loaded_after_a_first_call_with_a_dict],
    ids=lambda f: f.__name__.strip("_").replace("_", " "),
)
def test_model_export_serves_logits_for_ids_of_any_length_however_the_model_was_built(
    tmp_path, make_model
):
    model = make_model(tmp_path)
    model.export(tmp_path / "export", verbose=False)
    serving = tf.saved_model.load(str(tmp_path / "export"))
    source, target = probe_inputs()  # other lengths than any call before
    inputs = (
        {"source_ids": source, "target_ids": target}
        if "dict" in make_model.__name__
        else (source, target)
    )
    np.testing.assert_allclose(
        serving.serve(inputs).numpy(), model(inputs, training=False).numpy(), rtol=1e-5, atol=1e-5
    )
    signature = serving.signatures["serving_default"].structured_input_signature[1]
    assert signature == {
        name: tf.TensorSpec([None, None], tf.int32, name=name)
        for name in ("source_ids", "target_ids")
    }


# --- registration and configs ---------------------------------------------------------------


def _layer_examples():
    block = dict(
        d_model=16,
        num_heads=2,
        d_ff=32,
        dropout=0.2,
        attention_dropout=0.1,
        activation="gelu",
        norm_first=True,
        layer_norm_epsilon=1e-5,
    )
    layers = kt.layers
    return {
        "layers.MultiHeadAttention": lambda: layers.MultiHeadAttention(
            16, 2, dropout=0.1, use_bias=False
        ),
        "layers.PositionalEmbedding": lambda: layers.PositionalEmbedding(
            VOCAB, 16, 32, dropout=0.1, pad_id=1, position_encoding="halves", embedding_scale=1.0
        ),
        "layers.FeedForward": lambda: layers.FeedForward(16, 32, activation="swish", dropout=0.1),
        "layers.EncoderLayer": lambda: layers.EncoderLayer(**block),
        "layers.Encoder": lambda: layers.Encoder(2, **block),
        "layers.DecoderLayer": lambda: layers.DecoderLayer(**block),
        "layers.Decoder": lambda: layers.Decoder(2, **block),
        "layers.Dense": lambda: layers.Dense(8, activation="relu", use_bias=False),
        "layers.Dropout": lambda: layers.Dropout(0.3, seed=5),
        "layers.LayerNormalization": lambda: layers.LayerNormalization(epsilon=1e-5),
    }


# Public objects Keras may serialize (in a .keras file or a config), each with a
# non-default instance; every public name is here or in NOT_KERAS_OBJECTS.
KERAS_OBJECTS = {
    "Transformer": lambda: kt.Transformer(
        small_config(norm_first=True, share_embeddings=True),
        dtype="mixed_bfloat16",
        name="translator",
    ),
    "TransformerSchedule": lambda: kt.TransformerSchedule(16, warmup_steps=WARMUP, scale=2.0),
    "FusedAdam": lambda: kt.FusedAdam(
        kt.TransformerSchedule(16), beta_2=0.98, epsilon=1e-9, clipnorm=1.0
    ),
    "MaskedLabelSmoothedCrossEntropy": lambda: kt.MaskedLabelSmoothedCrossEntropy(
        0.2, pad_id=1, name="xent"
    ),
    "MaskedAccuracy": lambda: kt.MaskedAccuracy(pad_id=1, name="accuracy"),
    "masked_accuracy": lambda: kt.masked_accuracy,
    **_layer_examples(),
}
NOT_KERAS_OBJECTS = {
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "PRESETS",  # constants
    "TransformerConfig",  # a dataclass: a Transformer's config stores it as a dict
    "decoding",
    "exporters",
    "kernels",
    "layers",
    "native",  # modules
    "PRECISIONS",
    "with_precision",  # precision names and a function that rebuilds a model in one
    "SubwordTokenizer",  # a tf.Module: tokenizers are saved as SentencePiece model files
    "MarianSubwordTokenizer",
    "load_marian_tokenizers",  # a tf.Module and its loader: Marian's own files
    "Translator",  # translates with a model or an export; not saved by Keras
    "translate_corpus",
    "CorpusTranslation",  # translates a file with a Translator, and what it did
    "TrainedModel",
    "Workdir",
    "WorkdirError",  # a run's files and a model with its tokenizers
    "paper_adam",  # a factory: it returns a FusedAdam, which is what Keras saves
    "register_keras_objects",  # imports the modules that register the classes here
    # tensor functions, never handed to Keras
    "layers.causal_mask",
    "layers.key_padding_mask",
    "layers.masked_score_value",
    "layers.merge_masks",
    "layers.padding_mask",
    "layers.scaled_dot_product_attention",
    "layers.sinusoidal_positions",
    "layers.target_padding_mask",
}


def _public(name):
    module, _, attribute = name.rpartition(".")
    return getattr(kt.layers if module else kt, attribute)


def test_every_public_name_is_sorted_into_keras_objects_or_not():
    public = set(kt.__all__) | {f"layers.{name}" for name in kt.layers.__all__}
    assert public == set(KERAS_OBJECTS) | NOT_KERAS_OBJECTS
    assert not set(KERAS_OBJECTS) & NOT_KERAS_OBJECTS


@pytest.mark.parametrize("name", sorted(KERAS_OBJECTS))
def test_every_keras_object_is_registered_under_the_package_name(name):
    obj = _public(name)
    registered = f"keras_transformer>{obj.__name__}"
    assert keras.saving.get_registered_name(obj) == registered
    assert keras.saving.get_registered_object(registered) is obj


@pytest.mark.parametrize("name", sorted(KERAS_OBJECTS))
def test_configs_round_trip_through_keras_serialization_in_safe_mode(name):
    obj = KERAS_OBJECTS[name]()
    # JSON in between, as in a .keras file.
    serialized = json.loads(json.dumps(keras.saving.serialize_keras_object(obj)))
    restored = keras.saving.deserialize_keras_object(serialized, safe_mode=True)
    if obj is kt.masked_accuracy:
        assert restored is obj
        return
    assert type(restored) is type(obj)
    assert restored.get_config() == obj.get_config()
    assert type(obj).from_config(obj.get_config()).get_config() == obj.get_config()


if __name__ == "__main__":
    reload_and_continue(Path(sys.argv[1]))


def test_load_model_after_importing_keras_and_the_library_in_a_fresh_process(tmp_path):
    """The library's names are imported lazily; ``import keras`` then ``import
    keras_transformer`` (nothing else) is enough for ``keras.models.load_model``."""
    model = kt.Transformer(small_config())
    model.compile(optimizer=kt.paper_adam(d_model=32), loss=kt.MaskedLabelSmoothedCrossEntropy())
    model(probe_inputs())
    model.save(tmp_path / "model.keras")
    code = (
        "import sys, keras, keras_transformer\n"
        f"model = keras.models.load_model({str(tmp_path / 'model.keras')!r})\n"
        "print(type(model).__name__, type(model.loss).__name__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_TIMEOUT
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["Transformer", "MaskedLabelSmoothedCrossEntropy"]
