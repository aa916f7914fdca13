"""SavedModel export: layout, atomic versions, a fresh process with only
tensorflow + tensorflow_text, the session loader (TF Serving, saved_model_cli),
op allow-list, bad inputs, warm-up requests and client request formats."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

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


def _python(code, timeout=300):
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
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


def test_layout_and_atomic_versions(workdir, export_dir):
    from keras_transformer.exporters import export_saved_model

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
    second = export_saved_model(workdir, export_dir.parent, beam_size=1)
    assert second.name == "2"
    assert (
        export_saved_model(workdir, export_dir.parent, version=2, overwrite=True, beam_size=1)
        == second
    )


def test_fresh_process_with_only_tensorflow_and_tf_text(workdir, export_dir):
    from keras_transformer import Workdir
    from keras_transformer.exporters import ExportedTranslator

    trained = Workdir(workdir).load()
    module = ExportedTranslator(
        trained.model,
        trained.src_tokenizer,
        trained.tgt_tokenizer,
        beam_size=3,
        max_src_length=trained.max_src_length,
    )
    expected = [
        t.decode() for t in module.translate(tf.constant(SENTENCES))["translations"].numpy()
    ]

    stdout = _python(f"""
        import json, sys, tensorflow as tf, tensorflow_text  # noqa: F401
        assert not any(name.startswith(("keras_transformer", "training", "export")) for name in
        sys.modules)
        serve = tf.saved_model.load({str(export_dir)!r}).signatures["serving_default"]
        sentences = {SENTENCES!r}
        batch = [t.decode() for t in serve(inputs=tf.constant(sentences))["translations"].numpy()]
        alone = [serve(inputs=tf.constant([s]))["translations"].numpy()[0].decode() for s in
        sentences]
        odd = serve(inputs=tf.constant(["", "   ", b"caf\\xc3 \\xff\\xfe dog", " ".join(["cat"] *
        2000)]))
        print(json.dumps({{"batch": batch, "alone": alone,
                          "odd": [t.decode("utf-8", "replace") for t in
                          odd["translations"].numpy()],
                          "odd_scores": odd["scores"].numpy().tolist()}}))
    """)
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["batch"] == expected
    assert result["alone"] == expected  # a batch mixing lengths changes nothing
    assert result["odd"][:2] == ["", ""] and result["odd_scores"][:2] == [0.0, 0.0]
    assert isinstance(result["odd"][2], str) and isinstance(result["odd"][3], str)


def test_ids_signature_and_session_loader(export_dir):
    stdout = _python(f"""
        import numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401
        with tf.compat.v1.Session(graph=tf.Graph()) as session:  # how TF Serving loads
            meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], {str(export_dir)!r})
            signature = meta.signature_def["translate_ids"]
            out = session.run({{k: v.name for k, v in signature.outputs.items()}},
                              {{signature.inputs["source_ids"].name: np.array([[5, 6, 7, 3]],
                              np.int32)}})
        print(out["target_ids"].shape, out["target_ids"].dtype, out["scores"].shape)
    """)
    shape_line = stdout.strip().splitlines()[-1]
    assert shape_line.startswith("(1, ") and "int32 (1,)" in shape_line


def test_graph_uses_only_core_tf_and_tf_text_ops(export_dir):
    stdout = _python(f"""
        import json, tensorflow as tf
        from tensorflow.core.protobuf import saved_model_pb2
        from tensorflow.python.framework import op_def_registry
        saved = saved_model_pb2.SavedModel()
        saved.ParseFromString(open({str(export_dir / "saved_model.pb")!r}, "rb").read())
        graph = saved.meta_graphs[0].graph_def
        functions = {{f.signature.name for f in graph.library.function}}
        ops = {{n.op for n in graph.node}} | {{n.op for f in graph.library.function for n in
        f.node_def}}
        print(json.dumps(sorted(op for op in ops - functions if op_def_registry.get(op) is None)))
    """)
    not_in_core = set(json.loads(stdout.strip().splitlines()[-1]))
    assert not_in_core <= TF_TEXT_OPS, not_in_core - TF_TEXT_OPS
    assert "SentencepieceTokenizeOp" in not_in_core


def test_saved_model_cli_show_and_run(export_dir):
    cli = Path(sys.executable).parent / "saved_model_cli"
    shown = subprocess.run(
        [str(cli), "show", "--dir", str(export_dir), "--all"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "signature_def['serving_default']" in shown.stdout
    assert "signature_def['translate_ids']" in shown.stdout
    # `run` needs TF Text's ops registered: saved_model_cli's own main, with tensorflow_text
    # imported.
    stdout = _python(f"""
        import sys, tensorflow_text  # noqa: F401
        from tensorflow.python.tools import saved_model_cli
        sys.argv = ["saved_model_cli", "run", "--dir", {str(export_dir)!r}, "--tag_set", "serve",
                    "--signature_def", "serving_default",
                    "--input_exprs", 'inputs=["a boy sleeps", ""]']
        saved_model_cli.main()
    """)
    assert "Result for output key translations" in stdout


def test_warmup_request_and_client_formats_match_the_signature(export_dir):
    from tensorflow_serving.apis import prediction_log_pb2

    from export.client import predict_request, rest_payload

    records = list(
        tf.data.TFRecordDataset(str(export_dir / "assets.extra" / "tf_serving_warmup_requests"))
    )
    log_entry = prediction_log_pb2.PredictionLog.FromString(records[0].numpy())
    warmup = log_entry.predict_log.request
    signature = tf.saved_model.load(str(export_dir)).signatures["serving_default"]
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

    from keras_transformer.exporters.saved_model import warmup_record

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


def test_translate_cli_files_beam_choice_and_attention_plot(export_dir, tmp_path):
    def run(*args, stdin=None):
        return subprocess.run(
            [sys.executable, "-m", "export.translate", "--model", str(export_dir), *args],
            cwd=CHECKOUT,
            env=ENV,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
        )

    lines = SENTENCES + [""]
    beam = run(stdin="\n".join(lines) + "\n")
    assert beam.returncode == 0, beam.stderr[-3000:]
    assert len(beam.stdout.splitlines()) == len(lines) and beam.stdout.splitlines()[-1] == ""
    greedy = run("--beam", "1", stdin="\n".join(lines) + "\n")
    assert greedy.returncode == 0 and len(greedy.stdout.splitlines()) == len(lines)
    wrong = run("--beam", "5", "a boy sleeps")
    assert wrong.returncode != 0 and "re-export" in wrong.stderr
    png = tmp_path / "attention.png"
    plotted = run("--plot-attention", str(png), SENTENCES[0])
    assert plotted.returncode == 0, plotted.stderr[-3000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_translate_cli_on_a_file_batches_by_tokens_in_windows(export_dir, tmp_path):
    """A file with empty lines, read three lines at a time and batched by a small token
    budget: one output line a line, the empty ones empty, as the SavedModel translates
    each sentence alone; the library's translator batches the same way."""
    from keras_transformer.translate import Translator, token_batches

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
            timeout=300,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    translator = Translator.from_saved_model(export_dir)
    alone = translator.translate(lines, batch_size=1, batch_tokens=None)
    assert result.stdout.splitlines() == alone
    assert all(out == "" for out, line in zip(alone, lines) if line == "")
    lengths, _ = translator._prepare(lines)
    assert len(token_batches(lengths, 20)) > 2  # the budget splits the window
    assert translator.translate(lines, batch_tokens=20, window=5) == alone


def test_cross_attention_signature_rows_are_distributions(export_dir):
    out = tf.saved_model.load(str(export_dir)).signatures["cross_attention"](
        sentence=tf.constant(SENTENCES[1])
    )
    weights = out["weights"].numpy()
    assert weights.shape == (len(out["target_pieces"].numpy()), len(out["source_pieces"].numpy()))
    assert abs(weights.sum(axis=1) - 1.0).max() < 1e-4
    assert out["source_pieces"].numpy()[-1] == b"</s>"


def test_evaluate_cli_on_the_saved_model(workdir, export_dir, tmp_path):
    import yaml

    from keras_transformer.data import write_parallel_files
    from training.corpus import load_corpus

    config = yaml.safe_load((workdir / "config.yaml").read_text())
    write_parallel_files(load_corpus(config["data"])["test"][:8], tmp_path, "test")
    for beam, decoding in ((None, "beam3"), ("1", "greedy")):
        out = tmp_path / f"eval_{decoding}.json"
        command = [
            sys.executable,
            "-m",
            "training.evaluate",
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
            command += ["--beam", beam]
        result = subprocess.run(
            command, cwd=CHECKOUT, env=ENV, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr[-3000:]
        scores = json.loads(out.read_text())
        assert scores["decoding"] == decoding and scores["sentences"] == 8


def test_xla_signatures_translate_as_the_plain_ones(workdir, export_dir, tmp_path):
    from keras_transformer.exporters import export_saved_model

    assert not {"translate_xla", "translate_greedy_xla"} & set(
        tf.saved_model.load(str(export_dir)).signatures
    )
    path = export_saved_model(workdir, tmp_path / "xla", beam_size=3, xla=True)
    signatures = tf.saved_model.load(str(path)).signatures
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


def _functions(export_dir) -> list:
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((export_dir / "saved_model.pb").read_bytes())
    return list(saved.meta_graphs[0].graph_def.library.function)


def _function_names(export_dir) -> list[str]:
    return [f.signature.name for f in _functions(export_dir)]


def test_constant_steps_are_held_once_and_translate_as_the_variables(
    workdir, export_dir, tmp_path, monkeypatch
):
    """A small model's export decodes a few rows by a step with the weights
    as constants, one copy for all its signatures; above the size limit it
    reads the variables, with the same translations."""
    from keras_transformer.exporters import export_saved_model
    from keras_transformer.exporters import saved_model as exporter

    names = _function_names(export_dir)
    assert sum("_constant_small_batch_step_" in name for name in names) == 1, names
    # Each decoder once, whichever signatures and parts of a batch call it.
    assert [sum(f"__inference_{name}_" in n for n in names) for name in ("greedy", "beam_3")] == [
        1,
        1,
    ], names
    monkeypatch.setattr(exporter, "CONSTANT_STEPS_MAX_BYTES", 0)
    plain = export_saved_model(workdir, tmp_path / "plain", beam_size=3)
    assert not [name for name in _function_names(plain) if "constant_" in name]
    constant, variables = tf.saved_model.load(str(export_dir)), tf.saved_model.load(str(plain))
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
        "step_splits must be >= 1 (1: no splits), got 0.",
    )


def _refused_in_one_line(workdir, tmp_path, capsys, flags: list[str], message: str) -> None:
    """``python -m export.saved_model`` with ``flags``: exit 2, one line ``message``, no files."""
    from export import saved_model as export_program

    with pytest.raises(SystemExit) as exit_:
        export_program.main(["--workdir", str(workdir), "--out", str(tmp_path / "none"), *flags])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert error.strip().splitlines() == [f"python -m export.saved_model: error: {message}"], error
    assert not (tmp_path / "none").exists()


def test_fewer_than_one_part_is_refused_in_one_line(workdir, tmp_path, capsys):
    """``--decode-parts 0``: one line naming the problem, before the model loads; no files."""
    _refused_in_one_line(
        workdir,
        tmp_path,
        capsys,
        ["--decode-parts", "0"],
        "decode_parts must be >= 1 (1: a batch decodes whole), got 0.",
    )


def test_fewer_than_one_split_is_refused_in_one_line(workdir, tmp_path, capsys):
    """``--step-splits 0``: one line, nothing written."""
    _refused_in_one_line(
        workdir,
        tmp_path,
        capsys,
        ["--step-splits", "0"],
        "step_splits must be >= 1 (1: no splits), got 0.",
    )
