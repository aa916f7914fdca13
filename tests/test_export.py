"""SavedModel export: layout, atomic versions, a fresh process with only
tensorflow + tensorflow_text, the session loader (TF Serving, saved_model_cli),
op allow-list, bad inputs, warm-up requests and client request formats."""

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hang_guard import HANG_TIMEOUT

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
# Custom ops the stock tensorflow_model_server ships besides core TF: TF Text's SentencePiece ops.
TF_TEXT_OPS = {
    "SentencepieceOp",
    "SentencepieceTokenizeOp",
    "SentencepieceDetokenizeOp",
    "SentencepieceIdToStringOp",
    "SentencepieceGetPieceSizeOp",
}
SENTENCES = [
    "the big dog sees 3 red cats",
    "a boy sleeps",
    "yesterday the hungry teacher gave an old book to the farmer quickly",
]


def _python(code, *args, timeout=HANG_TIMEOUT):
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=CHECKOUT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


@pytest.fixture(scope="module")
def workdir(tiny_workdir):
    return tiny_workdir


@pytest.fixture(scope="module")
def export_dir(workdir, tmp_path_factory):
    from keras_transformer.exporters import export_saved_model

    out = tmp_path_factory.mktemp("exports") / "demo"
    return export_saved_model(workdir, out, beam_size=3)


@pytest.fixture(scope="module")
def trained(workdir):
    from keras_transformer import Workdir

    return Workdir(workdir).load()


@pytest.fixture(scope="module")
def keras_translator(trained):
    """The Keras model the export was made from, beam 3 as the export, decoding a batch whole
    (the export's signatures decode it in parts: the answers are the same, as
    test_translate.py and test_translator_features.py check in process)."""
    from keras_transformer.translate import Translator

    return Translator.from_trained_model(trained, beam_size=3, decode_parts=1)


@pytest.fixture(scope="module")
def saved_translator(export_dir):
    """The export, loaded once for the module: its ``saved_model`` serves the tests that call
    the signatures themselves."""
    from keras_transformer.translate import Translator

    return Translator.from_saved_model(export_dir)


@pytest.fixture(scope="module")
def greedy_saved(export_dir):
    """The export's greedy signatures (``beam_size=1``), loaded once for the module."""
    from keras_transformer.translate import Translator

    return Translator.from_saved_model(export_dir, beam_size=1)


def test_translators_of_one_export_share_one_load(
    export_dir, saved_translator, greedy_saved, tmp_path
):
    """A greedy and a beam translator of one export, and a program's in this process, share
    the SavedModel loaded once (the programs run by ``main`` below rely on it); a SavedModel
    written again at the same path loads anew."""
    from keras_transformer.translate import Translator
    from keras_transformer.translation.served import _load_saved_model

    assert greedy_saved.saved_model is saved_translator.saved_model
    assert Translator.from_saved_model(export_dir).saved_model is saved_translator.saved_model

    module = tf.Module()
    module.value = tf.Variable(1.0)
    tf.saved_model.save(module, str(tmp_path))
    first = _load_saved_model(tmp_path)
    assert _load_saved_model(tmp_path) is first
    module.value.assign(2.0)
    tf.saved_model.save(module, str(tmp_path))
    again = _load_saved_model(tmp_path)
    assert again is not first and float(again.value.numpy()) == 2.0


def test_layout_versions_xla_signatures_and_variable_steps(
    workdir, export_dir, saved_translator, monkeypatch
):
    """The layout and atomic versions; an export's next version, here one with the XLA
    signatures, which translate as the plain ones; an overwrite of that version with the
    decoding steps above the constant size limit, which reads the variables and translates as
    the constant steps of the first version. (Two exports beside the module's: each claim of
    versions rides on an export another claim needs.)"""
    from keras_transformer.exporters import export_saved_model
    from keras_transformer.exporters import signatures as exporter

    assert export_dir.name == "1"
    for name in (
        "saved_model.pb",
        "variables",
        "assets/spm_shared.model",
        "assets.extra/tf_serving_warmup_requests",
    ):
        assert (export_dir / name).exists(), name
    models_config = (export_dir.parent / "models.config").read_text()
    assert 'base_path: "/models/demo"' in models_config
    assert (
        str(export_dir.parent.parent) not in models_config
    )  # no path of this machine in the artifact
    assert not [p for p in export_dir.parent.iterdir() if p.name.startswith(".tmp")]
    with pytest.raises(FileExistsError, match="overwrite"):
        export_saved_model(workdir, export_dir.parent, version=1)

    # The next version: the XLA signatures beside the plain ones, the same translations.
    constant = saved_translator.saved_model
    assert not {"translate_xla", "translate_greedy_xla"} & set(constant.signatures)
    second = export_saved_model(workdir, export_dir.parent, beam_size=3, xla=True)
    assert second.name == "2"
    signatures = tf.saved_model.load(str(second)).signatures
    # 3 sentences (padded to 4 rows), then 5 (padded to 8) with one longer than the 16-token bucket.
    for batch in (SENTENCES, SENTENCES + ["the farmer sleeps", " ".join(SENTENCES * 2)]):
        inputs = tf.constant(batch)
        for plain, compiled in (
            ("serving_default", "translate_xla"),
            ("translate_greedy", "translate_greedy_xla"),
        ):
            expected, got = signatures[plain](inputs=inputs), signatures[compiled](inputs=inputs)
            assert got["translations"].numpy().tolist() == expected["translations"].numpy().tolist()
            np.testing.assert_allclose(
                got["scores"].numpy(), expected["scores"].numpy(), rtol=1e-4, atol=1e-4
            )
    del signatures

    # A small model's export decodes a few rows by a step with the weights as constants, one
    # copy for all its signatures; above the size limit it reads the variables, with the same
    # translations. That export overwrites version 2, atomically, in its place.
    names = _function_names(export_dir)
    assert sum("_constant_small_batch_step_" in name for name in names) == 1, names
    # Each decoder once, whichever signatures and parts of a batch call it.
    assert [sum(f"__inference_{name}_" in n for n in names) for name in ("greedy", "beam_3")] == [
        1,
        1,
    ], names
    monkeypatch.setattr(exporter, "CONSTANT_STEPS_MAX_BYTES", 0)
    plain = export_saved_model(workdir, export_dir.parent, version=2, overwrite=True, beam_size=3)
    assert plain == second
    assert not [p for p in export_dir.parent.iterdir() if p.name.startswith(".tmp")]
    assert not [name for name in _function_names(plain) if "constant_" in name]
    variables = tf.saved_model.load(str(plain))
    for batch in (
        SENTENCES,
        SENTENCES[2:],
        SENTENCES * 7,
    ):  # a sentence or a few, and more rows than SMALL_BATCH_ROWS
        inputs = tf.constant(batch)
        for name in ("serving_default", "translate_greedy"):
            expected, got = (
                variables.signatures[name](inputs=inputs),
                constant.signatures[name](inputs=inputs),
            )
            assert got["translations"].numpy().tolist() == expected["translations"].numpy().tolist()
            np.testing.assert_allclose(
                got["scores"].numpy(), expected["scores"].numpy(), rtol=1e-5, atol=1e-5
            )


# One fresh process (``python -c``) for all the claims only a fresh process shows: the graph's
# ops before TF Text registers its own, the export served with only tensorflow and
# tensorflow_text imported, TF Serving's TF1 session loader, and saved_model_cli's ``run``
# (its absl main ends the process, so it comes last, after the JSON line).
FRESH_PROCESS = """
    import json, sys
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import op_def_registry

    export_dir, sentences = sys.argv[1], json.loads(sys.argv[2])
    out = {}

    # The ops of the graph and its functions that core TensorFlow does not register.
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(open(export_dir + "/saved_model.pb", "rb").read())
    graph = saved.meta_graphs[0].graph_def
    functions = {f.signature.name for f in graph.library.function}
    ops = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
    out["not_in_core"] = sorted(op for op in ops - functions if op_def_registry.get(op) is None)

    # serving_default with only tensorflow and tensorflow_text imported.
    import numpy as np, tensorflow_text  # noqa: F401
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    batch = [t.decode() for t in serve(inputs=tf.constant(sentences))["translations"].numpy()]
    alone = [serve(inputs=tf.constant([s]))["translations"].numpy()[0].decode() for s in sentences]
    odd = ["", "   ", b"caf\\xc3 \\xff\\xfe dog", " ".join(["cat"] * 2000)]
    odd = serve(inputs=tf.constant(odd))
    out.update(
        batch=batch,
        alone=alone,
        odd=[t.decode("utf-8", "replace") for t in odd["translations"].numpy()],
        odd_scores=odd["scores"].numpy().tolist(),
    )

    # How TF Serving loads: the TF1 session loader runs every signature. Grappler's graph
    # rewrites are left out here (seconds a signature, and no op or shape of the graph's
    # changes with them); saved_model_cli's session below runs them, as TF Serving does.
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    with tf.compat.v1.Session(graph=tf.Graph(), config=config) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], export_dir)

        def run(name, **feed):
            signature = meta.signature_def[name]
            return session.run(
                {k: v.name for k, v in signature.outputs.items()},
                {signature.inputs[k].name: v for k, v in feed.items()},
            )

        ids = run("translate_ids", source_ids=np.array([[5, 6, 7, 3]], np.int32))
        out["ids"] = [
            list(ids["target_ids"].shape), str(ids["target_ids"].dtype), list(ids["scores"].shape)
        ]
        inputs = np.array([b"a boy sleeps", b""])
        session_out = {
            "n_best": run("n_best", inputs=inputs, n=np.int32(2))["translations"].shape,
            "score": run("score", inputs=inputs, targets=np.array([b"ran", b""]))[
                "log_probs"].shape,
            "sample": run("sample", inputs=inputs, top_k=np.int32(3), top_p=np.float32(0.9),
                          temperature=np.float32(1.0), seed=np.int64(1))["translations"].shape,
            "prefix": run("translate_prefix", inputs=inputs,
                          prefixes=np.array([b"ran", b""]))["translations"].shape,
        }
        try:
            run("n_best", inputs=inputs, n=np.int32(9))
        except tf.errors.InvalidArgumentError as error:
            session_out["error"] = "beam size" in error.message
        out["session"] = session_out
    out["library_modules"] = sorted(
        name for name in sys.modules if name.startswith(("keras_transformer", "training", "export"))
    )
    print("RESULT " + json.dumps(out), flush=True)

    # `run` needs TF Text's ops registered: saved_model_cli's own main, with tensorflow_text
    # imported.
    from tensorflow.python.tools import saved_model_cli
    sys.argv = ["saved_model_cli", "run", "--dir", export_dir, "--tag_set", "serve",
                "--signature_def", "serving_default",
                "--input_exprs", 'inputs=["a boy sleeps", ""]']
    saved_model_cli.main()
"""


@pytest.fixture(scope="module")
def fresh_process(export_dir):
    """What ``FRESH_PROCESS`` found (a dict), and what saved_model_cli ``run`` wrote after it."""
    stdout = _python(FRESH_PROCESS, str(export_dir), json.dumps(SENTENCES))
    (line,) = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT ")), stdout.split(line, 1)[1]


def test_fresh_process_with_only_tensorflow_and_tf_text(fresh_process, keras_translator):
    """A process that imports only tensorflow and tensorflow_text translates as the Keras
    model, a batch as each sentence alone; blank, invalid UTF-8 and overlong input answer."""
    result, _ = fresh_process
    expected = keras_translator.translate(SENTENCES)
    assert result["library_modules"] == []
    assert result["batch"] == expected
    assert result["alone"] == expected  # a batch mixing lengths changes nothing
    assert result["odd"][:2] == ["", ""] and result["odd_scores"][:2] == [0.0, 0.0]
    assert isinstance(result["odd"][2], str) and isinstance(result["odd"][3], str)


def test_ids_signature_and_session_loader(fresh_process):
    """TF Serving's TF1 session loader runs ``translate_ids``: int32 ids in and out."""
    batch_and_length, dtype, scores = fresh_process[0]["ids"]
    assert batch_and_length[0] == 1 and len(batch_and_length) == 2
    assert (dtype, scores) == ("int32", [1])


def test_graph_uses_only_core_tf_and_tf_text_ops(fresh_process):
    """Every op of the graph is core TensorFlow's or TF Text's SentencePiece ops."""
    not_in_core = set(fresh_process[0]["not_in_core"])
    assert not_in_core <= TF_TEXT_OPS, not_in_core - TF_TEXT_OPS
    assert "SentencepieceTokenizeOp" in not_in_core


def test_saved_model_cli_show_and_run(export_dir, fresh_process):
    """The saved_model_cli program shows both signatures; its ``run`` translates (in the
    fresh process, where TF Text's ops are registered)."""
    cli = Path(sys.executable).parent / "saved_model_cli"
    shown = subprocess.run(
        [str(cli), "show", "--dir", str(export_dir), "--all"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "signature_def['serving_default']" in shown.stdout
    assert "signature_def['translate_ids']" in shown.stdout
    assert "Result for output key translations" in fresh_process[1]


def test_warmup_request_and_client_formats_match_the_signature(export_dir, saved_translator):
    from tensorflow_serving.apis import prediction_log_pb2

    from keras_transformer.cli.client import predict_request, rest_payload

    records = list(
        tf.data.TFRecordDataset(str(export_dir / "assets.extra" / "tf_serving_warmup_requests"))
    )
    log_entry = prediction_log_pb2.PredictionLog.FromString(records[0].numpy())
    warmup = log_entry.predict_log.request
    signature = saved_translator.saved_model.signatures["serving_default"]
    (input_name,) = signature.structured_input_signature[1].keys()
    assert warmup.model_spec.signature_name == "serving_default"
    assert set(warmup.inputs) == {input_name}
    assert warmup.inputs[input_name].dtype == tf.string.as_datatype_enum
    assert set(rest_payload(["x"])["inputs"]) == {input_name}
    request = predict_request(["x", "y"], "demo")
    assert (
        set(request.inputs) == {input_name}
        and request.model_spec.signature_name == "serving_default"
    )
    assert tf.make_ndarray(request.inputs[input_name]).tolist() == [b"x", b"y"]
    assert warmup.model_spec.name == "demo"  # the model folder's name, not the staging folder's


def test_hand_encoded_warmup_record_equals_tensorflow_serving_apis():
    """The exporter writes PredictionLog protos without tensorflow-serving-api; the bytes
    are the ones that package's own classes give."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    from keras_transformer.exporters.serving_files import warmup_record

    sentences = [
        "Hello world.",
        "",
        "é" * 300,
    ]  # a payload longer than 127 bytes: multi-byte lengths
    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name="demo", signature_name="serving_default")
    )
    request.inputs["inputs"].CopyFrom(tf.make_tensor_proto(sentences, dtype=tf.string))
    expected = prediction_log_pb2.PredictionLog(
        predict_log=prediction_log_pb2.PredictLog(request=request)
    )
    ours = warmup_record(sentences, "demo")
    assert prediction_log_pb2.PredictionLog.FromString(ours) == expected
    assert ours == expected.SerializeToString(deterministic=True)


def _stdin(monkeypatch, lines: list[str]) -> None:
    """``lines`` on standard input, for a program run in this process."""
    data = "".join(line + "\n" for line in lines).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_translate_cli_files_beam_choice_and_attention_plot(
    export_dir, tmp_path, capsys, monkeypatch
):
    """``python -m export.translate`` (its ``main``; the real process runs in the next test):
    a line out a line in, beam or ``--beam 1``; another beam is refused, asking for a
    re-export; ``--plot-attention`` writes a PNG."""
    from keras_transformer.cli import translate as translate_program

    model = ["--model", str(export_dir)]
    lines = SENTENCES + [""]
    for beam in ([], ["--beam", "1"]):
        _stdin(monkeypatch, lines)
        assert translate_program.main([*model, *beam]) == 0
        out = capsys.readouterr().out.splitlines()
        assert len(out) == len(lines) and out[-1] == ""
    with pytest.raises(SystemExit) as exit_:
        translate_program.main([*model, "--beam", "5", "a boy sleeps"])
    assert exit_.value.code != 0 and "re-export" in capsys.readouterr().err
    png = tmp_path / "attention.png"
    assert translate_program.main([*model, "--plot-attention", str(png), SENTENCES[0]]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_translate_cli_on_a_file_batches_by_tokens_in_windows(
    export_dir, saved_translator, tmp_path
):
    """A file with empty lines, read three lines at a time and batched by a small token
    budget: one output line a line, the empty ones empty, as the SavedModel translates
    each sentence alone; the library's translator batches the same way. The program runs as
    ``python -m``: exit status 0, nothing but the translations on stdout."""
    from keras_transformer.translate import token_batches

    lines = [SENTENCES[2], "", SENTENCES[0], "a dog", "", SENTENCES[1], SENTENCES[2], "cats"]
    source = tmp_path / "input.txt"
    source.write_text("\n".join(lines) + "\n")
    with open(source) as stdin:
        result = subprocess.run(
            [sys.executable, "-m", "export.translate", "--model", str(export_dir)]
            + ["--batch-tokens", "20", "--window", "3"],
            cwd=CHECKOUT,
            env=ENV,
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=HANG_TIMEOUT,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    translator = saved_translator
    alone = translator.translate(lines, batch_size=1, batch_tokens=None)
    assert result.stdout.splitlines() == alone
    assert all(out == "" for out, line in zip(alone, lines) if line == "")
    lengths, _ = translator._prepare(lines)
    assert len(token_batches(lengths, 20)) > 2  # the budget splits the window
    assert translator.translate(lines, batch_tokens=20, window=5) == alone


def test_cross_attention_signature_rows_are_distributions(saved_translator):
    out = saved_translator.saved_model.signatures["cross_attention"](
        sentence=tf.constant(SENTENCES[1])
    )
    weights = out["weights"].numpy()
    assert weights.shape == (len(out["target_pieces"].numpy()), len(out["source_pieces"].numpy()))
    assert abs(weights.sum(axis=1) - 1.0).max() < 1e-4
    assert out["source_pieces"].numpy()[-1] == b"</s>"


def test_evaluate_cli_on_the_saved_model(workdir, export_dir, tmp_path, capsys):
    """``python -m training.evaluate --saved-model``: the export's beam, as a process (exit
    status 0), and greedy by its ``main``; a JSON of 8 sentences' scores each."""
    import yaml

    from keras_transformer.cli import evaluate as evaluate_program
    from keras_transformer.data import write_parallel_files
    from keras_transformer.training.corpora import load_corpus

    config = yaml.safe_load((workdir / "config.yaml").read_text())
    write_parallel_files(load_corpus(config["data"])["test"][:8], tmp_path, "test")
    for beam, decoding in ((None, "beam3"), ("1", "greedy")):
        out = tmp_path / f"eval_{decoding}.json"
        args = [
            "--saved-model",
            str(export_dir),
            "--src",
            str(tmp_path / "test.src"),
            "--ref",
            str(tmp_path / "test.tgt"),
            "--out",
            str(out),
        ]
        if beam:
            assert evaluate_program.main([*args, "--beam", beam]) == 0
            assert json.loads(capsys.readouterr().out) == json.loads(out.read_text())
        else:
            result = subprocess.run(
                [sys.executable, "-m", "training.evaluate", *args],
                cwd=CHECKOUT,
                env=ENV,
                capture_output=True,
                text=True,
                timeout=HANG_TIMEOUT,
            )
            assert result.returncode == 0, result.stderr[-3000:]
        scores = json.loads(out.read_text())
        assert scores["decoding"] == decoding and scores["sentences"] == 8


def _functions(export_dir) -> list:
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((export_dir / "saved_model.pb").read_bytes())
    return list(saved.meta_graphs[0].graph_def.library.function)


def _function_names(export_dir) -> list[str]:
    return [f.signature.name for f in _functions(export_dir)]


@pytest.mark.slow  # a second export; splits against one split: test_decoding_step.py
def test_the_small_batch_step_runs_in_splits_and_one_split_translates_the_same(
    workdir, export_dir, tmp_path, capsys
):
    """The export's step for a few rows runs two splits, and ``step_splits=1`` one.

    Two splits: each product in two shares of its kernel, the output layer's in
    ``OUTPUT_SPLITS``. ``step_splits=1`` here also takes the other kind of products
    (``step_products``) and batches decoded whole (``decode_parts=1``), with the same
    translations; a split or part count below 1 and an unknown kind of products are refused in
    one line."""
    import collections

    from keras_transformer import kernels
    from keras_transformer.exporters import export_saved_model

    def step_products(path):
        (step,) = [f for f in _functions(path) if "_constant_small_batch_step_" in f.signature.name]
        ops = collections.Counter(node.op for node in step.node_def)
        return ops["Conv2D"], ops["MatMul"]

    other = "conv" if kernels.step_products() == "matmul" else "matmul"
    one = export_saved_model(
        workdir,
        tmp_path / "one_lane",
        beam_size=3,
        step_splits=1,
        step_products=other,
        decode_parts=1,
    )
    (splits_conv, splits_matmul), (one_conv, one_matmul) = (
        step_products(export_dir),
        step_products(one),
    )
    # Two shares of each layer's products, OUTPUT_SPLITS of the output layer's.
    extra = kernels.OUTPUT_SPLITS - 2
    if other == "matmul":  # the fixture's export has the default, convolutions here
        assert splits_conv == 2 * one_matmul + extra > 0 and splits_matmul == one_conv == 0
    else:
        assert splits_matmul == 2 * one_conv + extra > 0 and splits_conv == one_matmul == 0
    splits, single = tf.saved_model.load(str(export_dir)), tf.saved_model.load(str(one))
    for batch in (SENTENCES, SENTENCES[:1], SENTENCES * 3):  # 9 sentences: in parts, or whole
        inputs = tf.constant(batch)
        for name in ("serving_default", "translate_greedy"):
            expected, got = (
                single.signatures[name](inputs=inputs),
                splits.signatures[name](inputs=inputs),
            )
            assert got["translations"].numpy().tolist() == expected["translations"].numpy().tolist()
            np.testing.assert_allclose(
                got["scores"].numpy(), expected["scores"].numpy(), rtol=1e-5, atol=1e-5
            )
    with pytest.raises(ValueError, match="step_splits must be >= 1"):
        export_saved_model(workdir, tmp_path / "none", step_splits=0)
    with pytest.raises(ValueError, match="step_products must be one of conv, matmul, got 'einsum'"):
        export_saved_model(workdir, tmp_path / "none", step_products="einsum")
    with pytest.raises(ValueError, match="decode_parts must be >= 1"):
        export_saved_model(workdir, tmp_path / "none", decode_parts=0)
    _refused_in_one_line(
        workdir,
        tmp_path,
        capsys,
        ["--step-splits", "0"],
        "--step-splits must be >= 1, got 0 (see kt export saved-model --help)",
    )


def _refused_in_one_line(workdir, tmp_path, capsys, flags: list[str], message: str) -> None:
    """``kt export saved-model`` with ``flags``: exit 2, one line ``message``, no files."""
    from keras_transformer.cli import export_saved_model as export_program

    with pytest.raises(SystemExit) as exit_:
        export_program.main(["--workdir", str(workdir), "--out", str(tmp_path / "none"), *flags])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert error.strip().splitlines() == [f"kt export saved-model: error: {message}"], error
    assert not (tmp_path / "none").exists()


def test_fewer_than_one_part_is_refused_in_one_line(workdir, tmp_path, capsys):
    """``--decode-parts 0``: one line naming the problem, before the model loads; no files."""
    _refused_in_one_line(
        workdir,
        tmp_path,
        capsys,
        ["--decode-parts", "0"],
        "--decode-parts must be >= 1, got 0 (see kt export saved-model --help)",
    )


def test_fewer_than_one_split_is_refused_in_one_line(workdir, tmp_path, capsys):
    """``--step-splits 0``: one line, nothing written."""
    _refused_in_one_line(
        workdir,
        tmp_path,
        capsys,
        ["--step-splits", "0"],
        "--step-splits must be >= 1, got 0 (see kt export saved-model --help)",
    )


# --- n-best lists, target prefixes, forced scores and samples over the signatures --------------

TARGETS_FREE = ["", "ran", "hieru", "", "x y"]  # target-side prefixes: "" leaves a sentence free
MORE = SENTENCES + ["", "a dog"]


def _same_lists(got, expected):
    assert [[text for text, _ in row] for row in got] == [
        [text for text, _ in row] for row in expected
    ]
    for got_row, expected_row in zip(got, expected):
        np.testing.assert_allclose(
            [p for _, p in got_row], [p for _, p in expected_row], rtol=1e-4, atol=1e-4
        )


def test_saved_model_translator_answers_as_the_keras_translator(
    trained, keras_translator, saved_translator, greedy_saved
):
    """translate (with prefixes), n_best, score and sample (a fixed seed) over the export's
    signatures give the Keras Translator's answers on the same model, beam 3 and greedy."""
    from keras_transformer.translate import Translator

    keras, saved = keras_translator, saved_translator
    assert saved.translate(MORE) == keras.translate(MORE)
    assert saved.translate(MORE, prefixes=TARGETS_FREE) == keras.translate(
        MORE, prefixes=TARGETS_FREE
    )
    n_best = saved.n_best(MORE, 3)
    _same_lists(n_best, keras.n_best(MORE, 3))
    _same_lists(saved.n_best(MORE, 2), keras.n_best(MORE, 2))
    assert [row[0][0] for row in n_best] == saved.translate(MORE)
    assert n_best[MORE.index("")] == [("", 0.0)]
    # A hypothesis' log-probability is the score of its text; an empty target is EOS alone.
    texts = [row[-1][0] for row in n_best]
    scores = saved.score(MORE, texts)
    np.testing.assert_allclose(scores, keras.score(MORE, texts), rtol=1e-4, atol=1e-4)
    blank = MORE.index("")
    np.testing.assert_allclose(
        [s for i, s in enumerate(scores) if i != blank],
        [row[-1][1] for i, row in enumerate(n_best) if i != blank],
        rtol=1e-4,
        atol=1e-4,
    )
    empty = saved.score(SENTENCES, ["", "", ""])
    np.testing.assert_allclose(empty, keras.score(SENTENCES, ["", "", ""]), atol=1e-4)
    assert all(-30 < s < 0 for s in empty)
    sampling = dict(top_k=5, top_p=0.9, temperature=1.2, seed=7)
    samples = saved.sample(MORE, **sampling)
    assert samples == keras.sample(MORE, **sampling)
    assert samples == [saved.sample([s], **sampling)[0] for s in MORE]  # the same in any batch
    assert samples[MORE.index("")] == ""
    greedy_keras = Translator.from_trained_model(trained, decode_parts=1)
    assert saved.sample(MORE, top_k=1, seed=3) == greedy_keras.translate(MORE)  # top-k 1: greedy
    prefixes = TARGETS_FREE[::-1]
    assert greedy_saved.translate(MORE, prefixes=prefixes) == greedy_keras.translate(
        MORE, prefixes=prefixes
    )
    _same_lists(greedy_saved.n_best(MORE, 1), greedy_keras.n_best(MORE, 1))


def test_new_signatures_shapes_blanks_and_bad_requests(saved_translator):
    """Batched strings in and out; a blank sentence answers ""; a bad request is an
    InvalidArgument answer naming the problem, never a crash or a hang."""
    signatures = saved_translator.saved_model.signatures
    inputs = tf.constant(["a boy sleeps", "  ", SENTENCES[0]])
    seed = tf.constant(5, tf.int64)

    def sample(top_k=0, top_p=1.0, temperature=1.0, batch=inputs):
        return signatures["sample"](
            inputs=batch,
            top_k=tf.constant(top_k),
            top_p=tf.constant(top_p),
            temperature=tf.constant(temperature),
            seed=seed,
        )

    for n in (1, 3):
        out = signatures["n_best"](inputs=inputs, n=tf.constant(n))
        assert out["translations"].shape == out["log_probs"].shape == (3, n)
        assert out["translations"].numpy()[1].tolist() == [b""] * n
        assert out["log_probs"].numpy()[1, 0] == 0.0 and np.isneginf(out["log_probs"][1, 1:]).all()
    served = signatures["serving_default"](inputs=inputs)
    free = signatures["translate_prefix"](inputs=inputs, prefixes=tf.constant(["", "", ""]))
    assert free["translations"].numpy().tolist() == served["translations"].numpy().tolist()
    np.testing.assert_allclose(free["scores"], served["scores"], rtol=1e-5, atol=1e-5)
    forced = signatures["translate_prefix"](inputs=inputs, prefixes=tf.constant(["ran", "", ""]))
    assert forced["translations"].numpy()[0].decode().startswith("ran")
    assert forced["translations"].numpy()[1] == b"" and forced["scores"].numpy()[1] == 0.0
    scored = signatures["score"](inputs=inputs, targets=tf.constant(["", "x", b"\xff ran"]))
    assert scored["log_probs"].shape == (3,) and np.isfinite(scored["log_probs"]).all()
    nothing = tf.constant([], tf.string)  # an empty batch: an empty answer
    assert signatures["serving_default"](inputs=nothing)["translations"].shape == (0,)
    assert signatures["n_best"](inputs=nothing, n=tf.constant(2))["log_probs"].shape == (0, 2)
    assert sample(batch=nothing)["translations"].shape == (0,)
    drawn = sample()
    assert drawn["translations"].shape == drawn["log_probs"].shape == (3,)
    assert drawn["translations"].numpy()[1] == b"" and drawn["log_probs"].numpy()[1] == 0.0
    assert drawn["translations"].numpy().tolist() == sample()["translations"].numpy().tolist()
    bad = {
        "an n-best list holds 1 to the beam size \\(3\\)": [
            lambda: signatures["n_best"](inputs=inputs, n=tf.constant(0)),
            lambda: signatures["n_best"](inputs=inputs, n=tf.constant(4)),
        ],
        "top_k must be >= 0": [lambda: sample(top_k=-1)],
        "top_p must be in \\(0, 1\\]": [lambda: sample(top_p=0.0), lambda: sample(top_p=1.5)],
        "temperature must be a finite number above 0": [
            lambda: sample(temperature=0.0),
            lambda: sample(temperature=float("nan")),
            lambda: sample(temperature=float("inf")),
        ],
        "give one target a sentence": [
            lambda: signatures["score"](inputs=inputs, targets=tf.constant(["a"]))
        ],
        "give one prefix a sentence": [
            lambda: signatures["translate_prefix"](inputs=inputs, prefixes=tf.constant(["a"]))
        ],
        "a target is longer than the model allows": [
            lambda: signatures["score"](
                inputs=inputs[:1], targets=tf.constant([" ".join(["cat"] * 300)])
            )
        ],
        "a prefix is longer than the model allows": [
            lambda: signatures["translate_prefix_greedy"](
                inputs=inputs[:1], prefixes=tf.constant([" ".join(["cat"] * 300)])
            )
        ],
    }
    for message, requests in bad.items():
        for request in requests:
            with pytest.raises(tf.errors.InvalidArgumentError, match=message):
                request()


def test_saved_model_translator_refuses_before_any_request(saved_translator, monkeypatch):
    """n above the beam, lists of different lengths, sampling parameters out of range and
    a target or prefix longer than the model's limit: a one-line ValueError, no request."""

    def no_request(*args, **kwargs):
        raise AssertionError("a signature was called")

    translator = saved_translator
    monkeypatch.setattr(translator._backend, "_signature_of", no_request)
    monkeypatch.setattr(translator._backend, "_signature", no_request)
    too_long = " ".join(["cat"] * 300)
    refusals = {
        "n=4: an n-best list holds 1 to the beam size \\(3\\)": lambda: translator.n_best(
            SENTENCES, 4
        ),
        "n=0": lambda: translator.n_best(SENTENCES, 0),
        "3 sources but 2 targets": lambda: translator.score(SENTENCES, ["a", "b"]),
        "3 sentences but 1 prefixes": lambda: translator.translate(SENTENCES, prefixes=["a"]),
        "top_k must be >= 0": lambda: translator.sample(SENTENCES, top_k=-1),
        "top_p must be in \\(0, 1\\]": lambda: translator.sample(SENTENCES, top_p=0.0),
        "temperature must be a finite number above 0": lambda: translator.sample(
            SENTENCES, temperature=0.0
        ),
        "target 1 is \\d+ tokens, longer than the model's limit \\(128 with EOS\\)": lambda: (
            translator.score(SENTENCES, ["a", too_long, "b"])
        ),
        "prefix 0 is \\d+ tokens": lambda: translator.translate(SENTENCES[:1], prefixes=[too_long]),
    }
    for message, call in refusals.items():
        with pytest.raises(ValueError, match=message) as error:
            call()
        assert "\n" not in str(error.value)


def test_new_signatures_under_the_session_loader(fresh_process):
    """TF Serving's loader runs n_best, score, sample and translate_prefix; a bad n is an
    InvalidArgument error there too."""
    assert fresh_process[0]["session"] == {
        "n_best": [2, 2],
        "score": [2],
        "sample": [2],
        "prefix": [2],
        "error": True,
    }


def test_translate_program_n_best_prefix_sample_and_the_score_program(
    export_dir, workdir, saved_translator, tmp_path, capsys
):
    """--n-best writes ``INDEX ||| TEXT ||| LOG_PROB`` lines, --prefix a translation a line,
    --sample the same samples for the same seed; python -m export.score one log-probability a
    line pair, from the SavedModel or the workdir, to --out atomically; bad input: exit 2.
    (The programs' ``main``, over the module's loaded export, which they share.)"""
    from keras_transformer.cli import score as score_program
    from keras_transformer.cli import translate as translate_program

    def program(module, *args):
        assert module.main([*args]) == 0
        return capsys.readouterr().out.splitlines()

    lines = [SENTENCES[1], "", SENTENCES[0]]
    model = ["--model", str(export_dir)]
    n_best = program(translate_program, *model, "--n-best", "2", *lines)
    expected = saved_translator.n_best(lines, 2)
    assert n_best == [
        f"{index} ||| {text} ||| {log_prob:.4f}"
        for index, row in enumerate(expected)
        for text, log_prob in row
    ]
    assert "1 |||  ||| 0.0000" in n_best
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("ran\n\nhieru\n")
    forced = program(translate_program, *model, "--prefix", str(prefixes), *lines)
    assert forced == saved_translator.translate(lines, prefixes=["ran", "", "hieru"])
    sampling = ["--sample", "--top-k", "5", "--temperature", "1.5", "--seed", "11"]
    sampled = program(translate_program, *model, *sampling, *lines)
    assert sampled == program(translate_program, *model, *sampling, *lines)
    assert sampled == saved_translator.sample(lines, top_k=5, temperature=1.5, seed=11)
    src, tgt = tmp_path / "test.src", tmp_path / "test.tgt"
    src.write_text("\n".join(lines) + "\n")
    tgt.write_text("ran\n\nhieru rarat\n")
    scores = program(score_program, *model, "--src", str(src), "--tgt", str(tgt))
    expected = saved_translator.score(lines, ["ran", "", "hieru rarat"])
    assert scores == [f"{s:.4f}" for s in expected]
    out = tmp_path / "scores.txt"
    workdir_args = ["--workdir", str(workdir), "--src", str(src), "--tgt", str(tgt)]
    program(score_program, *workdir_args, "--out", str(out))
    np.testing.assert_allclose(
        [float(s) for s in out.read_text().splitlines()], expected, atol=2e-4
    )
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]
    short = tmp_path / "short.tgt"
    short.write_text("ran\n")
    refusals = [
        (score_program, [*model, "--src", str(src), "--tgt", str(short)], "3 sources but 1 "),
        (translate_program, [*model, "--n-best", "4", "a boy"], "n=4: an n-best list holds"),
        (translate_program, [*model, "--n-best", "0", "a boy"], "--n-best must be >= 1"),
        (translate_program, [*model, "--sample", "--top-p", "2", "a"], "--top-p must be in (0, 1]"),
        (translate_program, [*model, "--top-k", "3", "a boy"], "--top-k needs --sample"),
        (translate_program, [*model, "--sample", "--n-best", "2", "a"], "do not go together"),
        (translate_program, [*model, "--prefix", str(short), "a", "b"], "2 sentences but 1 "),
    ]
    for module, args, message in refusals:
        with pytest.raises(SystemExit) as exit_:
            module.main(args)
        assert exit_.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and message in error[0], error
