"""Which test files exercise the library itself, and which the programs of the checkout.

The library's tests need only what the core install brings (`pip install .`, or the TPU path:
requirements/tpu.txt); `make test-oldest` (.ci/tpu_path) runs them on the oldest supported
TensorFlow and Keras. The programs' tests need the checkout's training/, export/ and benchmarks/
and the extras. tests/test_packaging.py checks that every tests/test_*.py is in exactly one list.

    python tests/suites.py library    # pytest arguments, one per line
    python tests/suites.py quick      # the quick tier (make test-quick)
"""

import sys

LIBRARY_TESTS = [
    "tests/test_attention.py",
    "tests/test_beam_search.py",
    "tests/test_blocks.py",
    "tests/test_config.py",
    "tests/test_data.py",
    "tests/test_decoding.py",
    "tests/test_decoding_step.py",
    "tests/test_docstrings.py",
    "tests/test_doctests.py",
    "tests/test_encoding.py",
    "tests/test_fast_layers.py",
    "tests/test_feed_forward.py",
    "tests/test_hardware.py",
    "tests/test_keras_round_trips.py",
    "tests/test_learning.py",
    "tests/test_marian_config.py",
    "tests/test_marian_tokenizer.py",
    "tests/test_model.py",
    "tests/test_model_options.py",
    "tests/test_native_ops.py",
    "tests/test_packaging.py",
    "tests/test_positional.py",
    "tests/test_precision.py",
    "tests/test_shards.py",
    "tests/test_synthetic.py",
    "tests/test_tokenization.py",
    "tests/test_top_k.py",
    "tests/test_training_math.py",
]

# Tests in LIBRARY_TESTS files that the library suite (.ci/tpu_path) leaves out: they need more
# than the TPU path installs, or XLA on the CPU, which tensorflow-tpu 2.20 cannot compile for
# ("could not find registered transfer manager for platform Host"); `make test` runs them all.
NO_XLA_CPU = "XLA on the CPU (not in tensorflow-tpu)"
LIBRARY_DESELECT = {
    "tests/test_data.py::test_tfds_pairs_with_mock_data": "the [tfds] extra",
    "tests/test_hardware.py::test_every_benchmark_report_carries_the_cpu": "benchmarks/",
    "tests/test_beam_search.py::test_static_shape_search_equals_the_growing_one[True-heuristic]": NO_XLA_CPU,
    "tests/test_decoding.py::test_static_shape_greedy_matches_dynamic_under_xla": NO_XLA_CPU,
    "tests/test_decoding.py::test_static_buffer_keeps_per_sentence_limits_under_xla": NO_XLA_CPU,
    "tests/test_model.py::test_cached_decoding_inside_a_static_shape_while_loop": NO_XLA_CPU,
    "tests/test_model.py::test_tf_function_and_xla_match_eager": NO_XLA_CPU,
    "tests/test_model.py::test_fit_with_xla": NO_XLA_CPU,
    "tests/test_native_ops.py::test_used_in_training_only_and_never_under_xla": NO_XLA_CPU,
    "tests/test_top_k.py::test_compiles_with_xla": NO_XLA_CPU,
}

PROGRAM_TESTS = {
    "tests/test_benchmarks.py": "benchmarks/",
    "tests/test_benchmarks_keras_hub.py": "benchmarks/ and the [bench] extra",
    "tests/test_ctranslate2.py": "export/ and the [ct2] extra",
    "tests/test_export.py": "training/, export/ and the [serving] extra",
    "tests/test_notebooks.py": "colab/ and the [test] extra",
    "tests/test_tflite.py": "training/, export/ and the [tflite] extra",
    "tests/test_training_program.py": "training/ and the [train, tfds, plots] extras",
    "tests/test_prepare_program.py": "training/",
    "tests/test_translate.py": "training/",
    "tests/test_programs.py": "training/, export/ and programs/",
    "tests/test_recipes.py": "training/ and the [tfds] extra",
    "tests/test_library_api.py": "training/ (its demo workdir)",
    "tests/test_marian_import.py": "training/, export/, the [marian, tflite, ct2] extras, transformers and torch",
    "tests/test_install.py": "a clone and a clean venv (make test-install)",
}


# The quick tier for the edit-run loop (`make test-quick`, under ~2 minutes on 2 cores): the
# paper's layers and model, the training math, configs, docstring examples and packaging, and
# one cached-decoding check of each decoder; the XLA tests of LIBRARY_DESELECT stay out.
QUICK_TESTS = [
    "tests/test_attention.py",
    "tests/test_positional.py",
    "tests/test_feed_forward.py",
    "tests/test_blocks.py",
    "tests/test_model.py",
    "tests/test_fast_layers.py",
    "tests/test_training_math.py",
    "tests/test_config.py",
    "tests/test_precision.py",
    "tests/test_hardware.py",
    "tests/test_synthetic.py",
    "tests/test_doctests.py",
    "tests/test_packaging.py",
    "tests/test_decoding.py::test_cached_greedy_equals_full_recompute",
    "tests/test_decoding_step.py::test_fast_step_gives_the_logits_and_cache_of_decode",
    "tests/test_beam_search.py::test_beam_scores_are_the_models_log_probabilities",
]


def quick_pytest_args() -> list[str]:
    args = list(QUICK_TESTS)
    for node in LIBRARY_DESELECT:
        if node.split("::")[0] in QUICK_TESTS:
            args += ["--deselect", node]
    return args


def library_pytest_args() -> list[str]:
    args = list(LIBRARY_TESTS)
    for node in LIBRARY_DESELECT:
        args += ["--deselect", node]
    return args


if __name__ == "__main__":
    tiers = {"library": library_pytest_args, "quick": quick_pytest_args}
    if len(sys.argv) != 2 or sys.argv[1] not in tiers:
        sys.exit("usage: python tests/suites.py library|quick")
    print("\n".join(tiers[sys.argv[1]]()))
