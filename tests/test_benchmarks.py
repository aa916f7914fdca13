"""Benchmark helpers. train_speed's MFU bookkeeping: each timed run is divided by the
peaks measured right before and after it, so that a peak measured in a fast or slow
moment of the shared VM does not move every run's figure. The scale check's corpus
generator and its runner's measurement."""

import numpy as np
import pytest

from benchmarks.timing import mfu_figures

pytestmark = pytest.mark.programs


def test_each_run_is_divided_by_the_higher_of_its_two_neighbouring_peaks():
    flops = 600.0
    times = [2.0, 3.0, 1.0]
    peaks = [100.0, 200.0, 50.0, 150.0]  # before run 1, after runs 1, 2, 3
    figures = mfu_figures(flops, times, peaks)
    assert figures["mfu_per_run"] == pytest.approx([600 / 2 / 200, 600 / 3 / 200, 600 / 1 / 150])
    assert figures["mfu"] == pytest.approx(1.5)  # median of 1.5, 1.0, 4.0
    # The median step (2 s) against the best peak of the whole process (200).
    assert figures["mfu_vs_best_peak"] == pytest.approx(600 / 2 / 200)
    assert figures["peak_gflops"] == pytest.approx(200 / 1e9)
    assert figures["peak_gflops_samples"] == pytest.approx([p / 1e9 for p in peaks])
    assert figures["matmul_gflop_per_step"] == pytest.approx(600 / 1e9)


def test_a_steady_machine_gives_the_single_peak_figure():
    figures = mfu_figures(250e9, [1.25, 1.25, 1.25], [400e9] * 4)
    assert figures["mfu"] == pytest.approx(0.5)
    assert figures["mfu_vs_best_peak"] == pytest.approx(0.5)


def test_the_workload_flop_count_is_the_built_model_s_matmuls():
    """The MFU's FLOP count reads the same config the benchmarks build, and counts
    every matmul kernel of that model: 2 FLOPs per weight per token forward, 3x with
    the backward pass, plus the attention scores."""
    import keras_transformer as kt
    from benchmarks import workload

    assert (workload.PAD_ID, workload.BOS_ID, workload.EOS_ID) == (kt.PAD_ID, kt.BOS_ID, kt.EOS_ID)
    default = workload.DEFAULT.config()
    small = kt.TransformerConfig.from_preset("small", share_embeddings=True)
    assert default == small  # the benchmark workload is the small preset

    tiny = workload.Workload(vocab=48, d_model=16, layers=2, heads=2, d_ff=24, batch=3, length=5)
    model = kt.Transformer(tiny.config(tie_embeddings=True))
    model.build()
    kernels = sum(
        int(v.shape[0] * v.shape[1])
        for v in model.weights
        if len(v.shape) == 2 and "embedding" not in v.path
    )
    output = tiny.d_model * tiny.vocab  # the tied projection reuses the embedding matrix
    tokens = tiny.batch * tiny.length
    attention = (
        2 * tiny.length * tiny.d_model * tiny.layers * (1 + 2)
    )  # encoder self; decoder self + cross
    assert tiny.matmul_flops_per_step() == 6 * tokens * (kernels + output + attention)


def test_recipe_estimate_runs(tmp_path):
    import json

    from benchmarks import recipe_estimate

    # 100k updates in 12 hours on 8 P100s: about a quarter of their fp32 peak.
    assert 0.2 < recipe_estimate.paper_utilisation() < 0.3

    out = tmp_path / "estimate.json"
    recipe_estimate.main(
        [
            "--preset",
            "tiny",
            "--vocab",
            "300",
            "--batch",
            "4",
            "--length",
            "8",
            "--steps",
            "1",
            "--precision",
            "fp32",
            "--json",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert report["precision"] == "fp32" and report["seconds_per_micro_batch"] > 0
    hours = report["accelerator_hours"]
    assert (
        set(hours) == set(recipe_estimate.ACCELERATORS)
        and hours["NVIDIA H100 SXM, bf16"] < hours["NVIDIA T4 (Colab free tier), fp16"]
    )
    assert report["cpu"]["model"]


def test_resume_time_resumes_the_old_way_and_from_the_position(tmp_path):
    """The resume benchmark on a tiny corpus: a backup without the input's position is
    resumed (reading and dropping the batches before it), then the backup that run wrote
    (with the position) is, and both are timed."""
    import json

    from benchmarks import resume_time
    from keras_transformer.data import demo_splits

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    pairs = demo_splits(train=600, valid=5, test=5, seed=0)["train"]
    for side, column in (("src", 0), ("tgt", 1)):
        (corpus / f"train.{side}").write_text("".join(pair[column] + "\n" for pair in pairs))
    out = tmp_path / "resume.json"
    argv = ["--corpus", str(corpus), "--pairs", "500", "--positions", "0.5", "--repeats", "1"]
    argv += ["--tokenizer-sentences", "500", "--set", "tokenizer.vocab_size=100"]
    argv += ["--set", "training.batch_tokens=256", "--workdir", str(tmp_path / "w")]
    assert resume_time.main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["pairs"] == 500 and report["cpu"]["model"]
    (row,) = report["results"]
    assert row["position"] == 0.5 and row["step"] >= 1
    for way in (row["old_way"], row["from_position"]):
        assert 0 < way["input_seconds"] < way["seconds"]
    assert (tmp_path / "w" / "corpus_500" / "train.tgt").read_text().count("\n") == 500


def test_input_pipeline_benchmark_on_a_tiny_corpus(tmp_path):
    import json

    from benchmarks import input_pipeline

    out = tmp_path / "pipeline.json"
    assert (
        input_pipeline.main(
            [
                "--pairs",
                "300",
                "--vocab",
                "200",
                "--batch-tokens",
                "256",
                "--max-length",
                "32",
                "--examples-per-shard",
                "100",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    text, prepare, shards = report["results"]
    assert (text["stage"], prepare["stage"], shards["stage"]) == ("text", "prepare", "shards")
    assert (
        text["examples"]
        == prepare["examples"]
        == shards["examples"]
        == 300 - report["dropped_too_long"]
    )
    assert (text["src_tokens"], text["tgt_tokens"]) == (shards["src_tokens"], shards["tgt_tokens"])
    assert all(row["examples_per_second"] > 0 for row in report["results"])
    assert report["shards"] == 3 and report["pairs"] == 300 and report["cpu"]


def test_scale_corpus_recombines_the_source_deterministically(tmp_path):
    from benchmarks import scale_corpus

    source = tmp_path / "source"
    source.mkdir()
    pairs = [
        ("ein Hund läuft", "a dog runs"),
        ("zwei Katzen schlafen im Haus", "two cats sleep in the house"),
        ("ein Mann", "a man"),
        ("Kinder spielen draußen im Schnee", "children play outside in the snow"),
    ]
    (source / "train.src").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (source / "train.tgt").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    (source / "valid.src").write_text("v\n", encoding="utf-8")
    (source / "valid.tgt").write_text("w\n", encoding="utf-8")
    out = tmp_path / "big"
    assert (
        scale_corpus.main([str(out), "--pairs", "250", "--source", str(source), "--seed", "1"]) == 0
    )
    src = (out / "train.src").read_text(encoding="utf-8").split("\n")
    tgt = (out / "train.tgt").read_text(encoding="utf-8").split("\n")
    assert len(src) == len(tgt) == 251 and src[-1] == tgt[-1] == ""  # 250 lines, newline-terminated
    src_words = {w for s, _ in pairs for w in s.split()}
    tgt_words = {w for _, t in pairs for w in t.split()}
    assert all(line and set(line.split()) <= src_words for line in src[:-1])
    assert all(line and set(line.split()) <= tgt_words for line in tgt[:-1])
    assert len(set(zip(src, tgt))) > len(pairs)  # recombined, not copied
    assert (out / "valid.src").read_text() == "v\n" and not (out / "test.src").exists()
    first = (out / "train.src").read_bytes()
    scale_corpus.main(
        [str(out), "--pairs", "250", "--source", str(source), "--seed", "1"]
    )  # replaces it
    assert (out / "train.src").read_bytes() == first
    scale_corpus.main([str(out), "--pairs", "250", "--source", str(source), "--seed", "2"])
    assert (out / "train.src").read_bytes() != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big", "source"]  # no staging left behind
    with pytest.raises(SystemExit):
        scale_corpus.main([str(scale_corpus.CHECKOUT / "runs" / "big"), "--source", str(source)])


def test_scale_check_measures_a_process_and_compares_runs(tmp_path):
    import sys

    from benchmarks import scale_check

    command = [
        sys.executable,
        "-c",
        "import time; x = bytearray(80 * 2**20); time.sleep(0.3); "
        "print('trained tokenizers in 1.5s')",
    ]
    run = scale_check.measure(command, tmp_path / "log.txt")
    assert run["returncode"] == 0 and run["tokenizer_seconds"] == 1.5 and run["wall_seconds"] >= 0.3
    assert run["max_rss_mb"] >= 80 and run["tree_rss_peak_mb"] >= 80
    small = {"max_rss_mb": 1000.0, "wall_seconds": 100.0, "tokenizer_seconds": 5.0}
    big = {"max_rss_mb": 1250.0, "wall_seconds": 360.0, "tokenizer_seconds": 60.0}
    verdict = scale_check.compare(small, big)
    assert verdict == {
        "rss_ratio": 1.25,
        "extra_wall_seconds": 260.0,
        "rss_target_met": True,
        "wall_target_met": False,
    }
    command = scale_check.check_command(tmp_path / "big", tmp_path / "w")
    assert command[1:5] == ["-m", "training.train", "--config", "multi30k"]
    assert f"data.dir={tmp_path / 'big'}" in command and "training.steps_per_epoch=60" in command


@pytest.fixture(scope="module")
def ct2_model(tiny_workdir, tmp_path_factory):
    """The tiny workdir's CTranslate2 conversion, made once for the serving benchmark's
    tests (each only reads it)."""
    pytest.importorskip("ctranslate2")
    from keras_transformer.exporters.ctranslate2 import export_ctranslate2

    return export_ctranslate2(tiny_workdir, tmp_path_factory.mktemp("serving_ct2") / "ct2")


@pytest.fixture(scope="module")
def tiny_export(tiny_workdir, tmp_path_factory):
    """The tiny workdir's SavedModel (beam 2), in one decoding part: its first calls are
    cheaper. The serving benchmarks' tests only read it."""
    from keras_transformer.exporters.saved_model import export_saved_model

    return export_saved_model(
        tiny_workdir, tmp_path_factory.mktemp("serving_export"), beam_size=2, decode_parts=1
    )


@pytest.mark.parametrize(
    "xla", [False, pytest.param(True, marks=pytest.mark.slow)]
)  # XLA exports are slow
def test_serving_vs_ct2_times_both_engines_on_the_same_model(
    tiny_workdir, ct2_model, tiny_export, tmp_path, xla, monkeypatch
):
    """Both engines, the SavedModel through the TF1 session loader, a baseline export
    and (``xla``) the SavedModel's XLA signatures translate the same sentences, strings
    in and out, greedy and beam at batch 64 and 1; greedy outputs agree (CTranslate2
    reproduces our greedy decoder, and XLA, the session and the baseline the graph's),
    also with the export's products for a few rows chosen (``--step-products``) and
    its batches decoded in one part (``--decode-parts 1``: each signature's first
    call, TensorFlow's graph optimisation, ~5x cheaper). As the run a backend probe
    starts, it times the probe's conversion, converting none."""
    import json

    pytest.importorskip("ctranslate2")
    from benchmarks import serving_vs_ct2
    from keras_transformer.data import generate_pairs

    baseline = tiny_export
    monkeypatch.setenv(serving_vs_ct2._MODEL_ENV, str(ct2_model))
    monkeypatch.setattr(
        serving_vs_ct2, "export_ctranslate2", None
    )  # a second conversion would fail

    pairs = generate_pairs(12, seed=5)
    (tmp_path / "test.src").write_text("".join(f"{src}\n" for src, _ in pairs), encoding="utf-8")
    (tmp_path / "test.tgt").write_text("".join(f"{tgt}\n" for _, tgt in pairs), encoding="utf-8")
    out = tmp_path / "serving.json"
    assert (
        serving_vs_ct2.main(
            [
                "--workdir",
                str(tiny_workdir),
                "--src",
                str(tmp_path / "test.src"),
                "--ref",
                str(tmp_path / "test.tgt"),
                "--beam",
                "2",
                "--alpha",
                "0.6",
                "--batch-1-sentences",
                "2",  # one at a time: 2 take every path that 3 do
                "--repeats",
                "2",
                *(["--xla"] if xla else []),
                "--json",
                str(out),
                "--baseline",
                str(baseline),
                "--session",
                "--step-products",
                "matmul",
                "--decode-parts",
                "1",
                "--ct2-backend",
                "library",
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    rows = {(row["decoder"], row["batch"]): row for row in report["results"]}
    assert sorted(rows) == [("beam2", 1), ("beam2", 64), ("greedy", 1), ("greedy", 64)]
    assert rows[("greedy", 64)]["sentences"] == 12 and rows[("greedy", 1)]["sentences"] == 2
    for row in rows.values():
        assert row["ratio"] > 0 and row["saved_model"]["sentences_per_s"] > 0
        # Each batch counts its fastest time: the sum is at most the fastest pass.
        assert len(row["saved_model"]["passes"]) == 2
        assert 0 < row["saved_model"]["seconds"] <= min(row["saved_model"]["passes"]) + 1e-3
        if xla:
            assert (
                row["ratio_xla"] > 0
                and row["saved_model_xla"]["bleu"] == row["saved_model"]["bleu"]
            )
        else:
            assert "ratio_xla" not in row and "saved_model_xla" not in row
        assert row["ratio_baseline"] > 0 and row["baseline"]["bleu"] == row["saved_model"]["bleu"]
        # The TF1 session loader runs the same graph: the same translations.
        assert (
            row["ratio_session"] > 0
            and row["saved_model_session"]["bleu"] == row["saved_model"]["bleu"]
        )
    greedy = rows[("greedy", 64)]
    assert greedy["saved_model"]["bleu"] == greedy["ctranslate2"]["bleu"]
    assert (
        report["cpu"]
        and report["beam"] == 2
        and report["baseline"] == str(baseline)
        and report["warm"]
    )
    assert report["step_products"] == "matmul" and isinstance(report["onednn_rewrites"], bool)
    assert report["decode_parts"] == 1
    with pytest.raises(SystemExit):  # the parser's error
        serving_vs_ct2.main(["--workdir", "w", "--src", "s", "--ref", "r", "--decode-parts", "0"])
    assert report["ct2_backend"]["backend"] in (
        "library",
        "mkl",
        "dnnl",
    )  # or CT2_USE_MKL's, if set


def test_serving_vs_ct2_takes_the_faster_ctranslate2_backend(tiny_workdir, ct2_model, monkeypatch):
    """``--ct2-backend fastest`` times a greedy probe under Intel MKL and
    oneDNN, each in a fresh interpreter that loads no TensorFlow, and says to
    run with the faster (its ``CT2_USE_MKL``); a backend asked for needs no
    probe, CTranslate2's default sets nothing, and a ``CT2_USE_MKL`` already set decides. The probe
    takes what it is given (one sentence at a time, then all at once): a few
    sentences time both ways as well as the 64 a real run gives it."""
    import json
    import subprocess
    import sys

    from benchmarks import serving_vs_ct2
    from keras_transformer.data import generate_pairs

    ct2 = ct2_model
    # The probe's fresh interpreter loads CTranslate2 and SentencePiece, not TensorFlow.
    loads = "import sys, benchmarks.ct2_translate; print('tensorflow' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", loads],
        capture_output=True,
        text=True,
        env=serving_vs_ct2._fresh_env(),
        check=True,
    )
    assert result.stdout.strip() == "False"
    sentences = [src for src, _ in generate_pairs(6, seed=6)]
    max_length = json.loads((tiny_workdir / "model_config.json").read_text())["max_length"]
    monkeypatch.delenv("CT2_USE_MKL", raising=False)  # restored after the test

    def choose(choice):
        return serving_vs_ct2.choose_ct2_backend(
            ct2, sentences, choice, max_input_length=max_length, max_length=max_length
        )

    chosen, value = choose("fastest")
    probe = chosen["probe_ms"]
    assert sorted(probe) == ["dnnl", "mkl"] and all(
        len(ms) == 2 and min(ms) > 0 for ms in probe.values()
    )
    assert chosen["backend"] == min(probe, key=lambda backend: sum(probe[backend]))
    assert value == serving_vs_ct2.CT2_BACKENDS[chosen["backend"]]
    assert choose("mkl") == ({"backend": "mkl", "how": "asked for", "probe_ms": None}, "1")
    assert choose("library")[1] is None
    monkeypatch.setenv("CT2_USE_MKL", "0")
    assert choose("fastest") == (
        {"backend": "dnnl", "how": "CT2_USE_MKL in the environment", "probe_ms": None},
        None,
    )


@pytest.mark.parametrize("warm", [True, False])
def test_serving_vs_ct2_warms_each_engine_before_its_timed_call(warm):
    """Warm (the default): in its turn an engine first translates the batch before,
    untimed; cold: the engines' calls simply alternate. Outputs are the timed calls'."""
    from benchmarks.serving_vs_ct2 import interleaved

    calls = []

    def engine(name):
        def translate(texts):
            calls.append((name, texts[0]))
            return [f"{name}:{text}" for text in texts]

        return translate

    results = interleaved(
        {"a": engine("a"), "b": engine("b")}, ["s0", "s1", "s2"], 1, repeats=1, warm=warm
    )
    after_warm_up = calls[2:]  # one untimed batch each first
    if warm:
        assert after_warm_up == [
            ("a", "s2"),
            ("a", "s0"),
            ("b", "s2"),
            ("b", "s0"),
            ("a", "s0"),
            ("a", "s1"),
            ("b", "s0"),
            ("b", "s1"),
            ("a", "s1"),
            ("a", "s2"),
            ("b", "s1"),
            ("b", "s2"),
        ]
    else:
        assert after_warm_up == [
            ("a", "s0"),
            ("b", "s0"),
            ("a", "s1"),
            ("b", "s1"),
            ("a", "s2"),
            ("b", "s2"),
        ]
    assert results["a"]["outputs"] == ["a:s0", "a:s1", "a:s2"] and len(results["b"]["passes"]) == 1


def test_profile_serving_counts_the_ops_and_steps_of_each_decoder(tiny_workdir, tmp_path):
    import json

    from benchmarks import profile_serving
    from keras_transformer.data import generate_pairs

    (tmp_path / "test.src").write_text(
        "".join(f"{src}\n" for src, _ in generate_pairs(8, seed=6)), encoding="utf-8"
    )
    out = tmp_path / "profile.json"
    assert (
        profile_serving.main(
            [
                "--workdir",
                str(tiny_workdir),
                "--src",
                str(tmp_path / "test.src"),
                "--beam",
                "2",
                "--sentences",
                "8",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    rows = {(row["decoder"], row["batch"]): row for row in json.loads(out.read_text())["results"]}
    assert sorted(rows) == [("beam2", 1), ("beam2", 64), ("greedy", 1), ("greedy", 64)]
    for row in rows.values():
        assert row["ops_per_step"] > 100 and row["steps"] >= 1 and row["ms_per_step"] > 0
    # Greedy runs one step per output token: alone, a sentence stops at its own EOS.
    assert rows[("greedy", 1)]["steps"] == rows[("greedy", 1)]["output_tokens"]
    assert (
        rows[("greedy", 64)]["steps"] <= rows[("greedy", 64)]["output_tokens"]
    )  # one batch: its longest
    assert rows[("greedy", 1)]["sentences"] == 2 and rows[("greedy", 64)]["sentences"] == 8


@pytest.mark.slow
def test_pretrained_import_runs_each_program_on_a_marian_checkpoint(tmp_path):
    """A tiny random Marian checkpoint through import and the three exports, each program in
    its own process; our logits equal PyTorch's."""
    import json

    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from benchmarks import pretrained_import

    out = tmp_path / "report.json"
    pretrained_import.main(
        [
            "--layers",
            "1",
            "--d-model",
            "32",
            "--heads",
            "2",
            "--d-ff",
            "64",
            "--vocab",
            "1200",
            "--work",
            str(tmp_path / "work"),
            "--json",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert set(report["steps"]) == {"import", "saved_model", "tflite", "ctranslate2"}
    assert all(
        step["wall_seconds"] > 0 and step["max_rss_mb"] > 0 and step["output_mb"] > 0
        for step in report["steps"].values()
    )
    assert report["max_abs_logit_difference"] < 1e-4 and report["cpu"]


def test_inference_kernels_times_each_kernels_variants(tmp_path):
    import json

    from benchmarks import inference_kernels

    out = tmp_path / "kernels.json"
    inference_kernels.main(
        [
            "--rows",
            "1,3",
            "--keys",
            "5",
            "--heads",
            "2",
            "--depth",
            "8",
            "--vocab",
            "40",
            "--d-model",
            "16",
            "--copies",
            "2",
            "--iterations",
            "2",
            "--repeats",
            "1",
            "--d-ff",
            "32",
            "--layers",
            "1",
            "--candidates",
            "600",
            "--top-k",
            "2",
            "--json",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert [r["rows"] for r in report["results"]] == [1, 3]
    for result in report["results"]:
        assert set(result["attention_us"]) == set(inference_kernels.ATTENTIONS)
        assert set(result["logits_us"]) == {"one product", "16 slices"}
        assert all(value > 0 for value in result["logits_us"].values())
        assert set(result["product_us"]) == {"bias fused (BiasAdd)", "bias unfused (Sub)"}
        assert set(result["top_k_us"]) == {"tf.math.top_k", "kernels.top_k"}
    assert report["cpu"]["model"]


def test_row_products_times_each_chain_of_one_row_products(tmp_path):
    import json

    from benchmarks import row_products

    out = tmp_path / "rows.json"
    # d_ff = 3 · d_model: the fused query/key/value product is as wide as the FFN's inner one
    row_products.main(
        [
            "--rows",
            "3",
            "--d-model",
            "16",
            "--d-ff",
            "48",
            "--layers",
            "1",
            "--repeats",
            "1",
            "--json",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"hot", "add", "decoder", "hot_conv", "decoder_conv"}
    assert (
        report["results"]["decoder"]["nodes_per_step"]
        == report["results"]["decoder_conv"]["nodes_per_step"]
        == 6
    )
    assert report["rows"] == 3
    assert all(result["us_per_step"] > 0 for result in report["results"].values())
    assert report["intra_op_threads"] == 0 and report["cpu"]["model"]


def test_row_products_refuses_bad_settings():
    from benchmarks import row_products

    with pytest.raises(SystemExit):
        row_products.main(["--layers", "0"])


def _file_translation(tiny_workdir, tmp_path, *options):
    """``benchmarks.file_translation`` on 13 demo lines, one empty, each batch decoded
    whole (``--decode-parts 1``: the decoders' first calls are cheaper): its results."""
    import json

    from benchmarks import file_translation
    from keras_transformer.data import generate_pairs

    pairs = generate_pairs(12, seed=7)
    pairs.insert(6, ("", ""))  # an empty line
    src, ref = tmp_path / "test.src", tmp_path / "test.tgt"
    src.write_text("".join(f"{s}\n" for s, _ in pairs))
    ref.write_text("".join(f"{t}\n" for _, t in pairs))
    out = tmp_path / "file.json"
    argv = ["--workdir", str(tiny_workdir), "--src", str(src), "--ref", str(ref)]
    argv += ["--batch-tokens", "40", "--window", "5", "--decode-parts", "1"]
    argv += ["--json", str(out), *options]
    assert file_translation.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["lines"] == 13 and report["cpu"] and report["threads"] >= 1
    assert report["decode_parts"] == 1
    return report["results"]


def test_file_translation_times_sorted_against_input_order_batches(tiny_workdir, tmp_path, capsys):
    """The sorted token batches and the batches in input order translate alike; a bad
    value is the parser's error."""
    from benchmarks import file_translation

    options = ["--beam", "1", "--engines", "sorted", "input_order"]  # greedy: traced faster
    results = _file_translation(tiny_workdir, tmp_path, *options)
    assert sorted(results) == ["input_order", "sorted"]
    for result in results.values():
        assert result["seconds"] > 0 and "ratio" not in result and "bleu" in result
    assert results["input_order"]["agreement"] == 1.0  # a sentence translates alike in any batch
    assert "input_order" in capsys.readouterr().out  # the table
    for bad in (["--window", "0"], ["--decode-parts", "0"]):
        with pytest.raises(SystemExit):
            file_translation.main(["--workdir", str(tiny_workdir), "--src", "s", *bad])


@pytest.mark.slow  # a SavedModel export and a CTranslate2 conversion: ~50 s
def test_file_translation_times_every_way_through_a_file(tiny_workdir, tmp_path):
    """Every engine translates the whole file, one line a line, with a ratio to
    CTranslate2; the SavedModel, alone or as the program, as the Keras model does."""
    pytest.importorskip("ctranslate2")
    from benchmarks import file_translation

    results = _file_translation(tiny_workdir, tmp_path, "--beam", "2")
    assert sorted(results) == sorted(file_translation.ENGINES)
    for result in results.values():
        assert result["seconds"] > 0 and result["ratio"] > 0 and "bleu" in result
    assert results["ctranslate2"]["ratio"] == 1.0
    assert results["input_order"]["agreement"] == 1.0
    # The SavedModel gives "" for the empty line, the Keras model what it decodes from EOS.
    assert results["saved_model"]["agreement"] >= 12 / 13
    assert results["program"]["agreement"] == results["saved_model"]["agreement"]


def test_tflite_beam_times_and_scores_a_beam_file_against_a_greedy_one(tiny_workdir, tmp_path):
    """``benchmarks.tflite_beam`` on the tiny workdir's test sentences: a greedy and a beam-2
    file, each timed in LiteRT and scored, the greedy file as the library's greedy decoder,
    and the goals as measured ratios; a beam of 1 is the parser's error."""
    import json

    from benchmarks import tflite_beam
    from keras_transformer.data import demo_splits

    pairs = demo_splits(train=2000, valid=20, test=20, seed=1)["test"]  # tests/conftest.py's
    src, ref = tmp_path / "test.src", tmp_path / "test.tgt"
    src.write_text("".join(f"{s}\n" for s, _ in pairs))
    ref.write_text("".join(f"{t}\n" for _, t in pairs))
    out = tmp_path / "tflite_beam.json"
    argv = ["--workdir", str(tiny_workdir), "--src", str(src), "--ref", str(ref)]
    argv += ["--beam", "2", "--alpha", "1.0", "--sentences", "6", "--keep", str(tmp_path / "files")]
    assert tflite_beam.main([*argv, "--repeats", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["sentences"] == 6 and report["threads"] == 1 and report["cpu"]["model"]
    assert report["repeats"] == 2 and report["quantize"] is None
    results = report["results"]
    assert (results["greedy"]["decoding"], results["beam"]["decoding"]) == ("greedy", "beam2")
    assert results["beam"]["alpha"] == 1.0 and results["greedy"]["agreement"] == 1.0
    assert results["greedy"]["bleu"] == results["library_greedy"]["bleu"]
    for name in ("greedy", "beam"):
        assert results[name]["ms_per_sentence"] > 0 and results[name]["sentences"] == 6
        assert results[name]["seconds"] == min(results[name]["passes_seconds"])
        assert (tmp_path / "files" / f"{name}.tflite").stat().st_size == results[name]["size_bytes"]
    ratio, bleu = report["goals"]
    assert ratio["value"] == round(
        results["beam"]["ms_per_sentence"] / results["greedy"]["ms_per_sentence"], 2
    )
    assert bleu["value"] == round(results["beam"]["bleu"] - results["library_greedy"]["bleu"], 2)
    with pytest.raises(SystemExit):
        tflite_beam.main([*argv[:6], "--beam", "1"])


def test_litert_log_softmax_times_both_formulas(tmp_path):
    """``benchmarks.litert_log_softmax`` at a tiny size: one row of µs a spread, for both
    formulas, in the JSON that names the CPU; bad sizes are refused."""
    import json

    from benchmarks import litert_log_softmax

    out = tmp_path / "lsm.json"
    argv = ["--rows", "2", "--vocab", "64", "--spreads", "1", "30", "--calls", "5"]
    litert_log_softmax.main([*argv, "--json", str(out)])
    report = json.loads(out.read_text())
    assert [row["spread"] for row in report["results"]] == [1.0, 30.0]
    for row in report["results"]:
        assert row["LOG_SOFTMAX_us"] > 0 and row["logsumexp_us"] > 0
    assert (report["rows"], report["vocab"], report["calls"]) == (2, 64, 5)
    assert report["cpu"]["model"]
    with pytest.raises(SystemExit):
        litert_log_softmax.main(["--calls", "0"])


def test_one_sentence_line_fit_recovers_a_line_and_scores_its_fit():
    from benchmarks.one_sentence import line_fit

    tokens = np.arange(1.0, 21.0)
    assert line_fit(tokens, 4.0 + 0.5 * tokens) == {"fixed_ms": 4.0, "ms_per_token": 0.5, "r2": 1.0}
    noisy = line_fit(tokens, 4.0 + 0.5 * tokens + np.where(tokens % 2 == 0, 1.0, -1.0))
    assert abs(noisy["fixed_ms"] - 4.0) < 1.0 and 0.0 < noisy["r2"] < 1.0


def test_one_sentence_splits_a_request_into_fixed_and_per_token_costs(tiny_export, tmp_path):
    """Each signature of an export, loaded as TF Serving loads it, one sentence a call: a row
    with its mean time and output length and the line through them."""
    import json

    from benchmarks import one_sentence
    from keras_transformer.data import generate_pairs

    (tmp_path / "test.src").write_text(
        "".join(f"{src}\n" for src, _ in generate_pairs(6, seed=3)), encoding="utf-8"
    )
    out = tmp_path / "one.json"
    args = ["--saved-model", str(tiny_export), "--src", str(tmp_path / "test.src")]
    assert one_sentence.main([*args, "--sentences", "5", "--passes", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = {row["decoder"]: row for row in report["results"]}
    assert sorted(rows) == ["beam", "greedy"]
    for row in rows.values():
        assert row["sentences"] == 5 and row["mean_ms"] > 0 and row["mean_tokens"] >= 1
        assert {"fixed_ms", "ms_per_token", "r2"} <= set(row)
    assert report["cpu"]["cores"] >= 1
