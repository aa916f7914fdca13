"""The library past the model: a workdir's layout (``Workdir``), a model with its
tokenizers (``TrainedModel``), the two translators, the exporters taking either,
and atomic folder replacement."""

import os
import shutil

import pytest

import keras_transformer as kt
from keras_transformer import files

pytestmark = pytest.mark.programs

SENTENCES = [
    "the big dog sees 3 red cats",
    "a boy sleeps",
    "",
    "yesterday the hungry teacher gave an old book to the farmer quickly",
]


@pytest.fixture(scope="module")
def trained(tiny_workdir):
    return kt.Workdir(tiny_workdir).load()


def test_workdir_knows_the_layout(tiny_workdir):
    run = kt.Workdir(tiny_workdir)
    assert run.check() is run
    assert run.model_path == tiny_workdir / "model.keras"
    assert run.tokenizer_paths == (tiny_workdir / "tokenizer" / "spm_shared.model",) * 2
    assert run.max_lengths == (64, 64) and run.precision == "fp32"
    assert run.worker(1).path == tiny_workdir / "worker_1"


def test_the_workdir_gives_the_architecture_without_loading_the_model(
    tiny_workdir, trained, tmp_path
):
    assert kt.Workdir(tiny_workdir).transformer_config() == trained.model.config
    with pytest.raises(kt.WorkdirError, match="model_config.json not found"):
        kt.Workdir(tmp_path).transformer_config()
    (tmp_path / "model_config.json").write_text('{"d_model": 7, "num_heads": 2}')
    with pytest.raises(kt.WorkdirError, match="does not hold a TransformerConfig"):
        kt.Workdir(tmp_path).transformer_config()


def test_workdir_errors_say_what_is_missing(tiny_workdir, tmp_path):
    with pytest.raises(kt.WorkdirError, match="does not exist"):
        kt.Workdir(tmp_path / "nope").check()
    with pytest.raises(kt.WorkdirError, match="config.yaml not found"):
        kt.Workdir(tmp_path).load()
    unfinished = tmp_path / "unfinished"
    shutil.copytree(tiny_workdir, unfinished, ignore=shutil.ignore_patterns("model.keras"))
    with pytest.raises(kt.WorkdirError, match="model.keras not found"):
        kt.Workdir(unfinished).load()
    with pytest.raises(ValueError, match="precision 'fp8'"):
        kt.Workdir(tiny_workdir).load_model("fp8")


def test_trained_model_defaults_and_checks(trained):
    limit = trained.model.config.max_length
    bare = kt.TrainedModel(trained.model, trained.src_tokenizer, trained.tgt_tokenizer)
    assert (bare.max_src_length, bare.max_tgt_length) == (limit, limit - 1)
    assert bare.shared_vocabulary
    with pytest.raises(ValueError, match="max_src_length"):
        kt.TrainedModel(
            trained.model, trained.src_tokenizer, trained.tgt_tokenizer, max_src_length=limit + 1
        )


def test_translator_from_workdir_is_the_translator_of_its_model(tiny_workdir, trained):
    from_workdir = kt.Translator.from_workdir(tiny_workdir, beam_size=2, alpha=0.6)
    direct = kt.Translator(
        trained.model,
        trained.src_tokenizer,
        trained.tgt_tokenizer,
        max_src_length=trained.max_src_length,
        beam_size=2,
        alpha=0.6,
    )
    assert from_workdir.beam_size == 2
    assert from_workdir.translate(SENTENCES, batch_size=3) == direct.translate(
        SENTENCES, batch_size=3
    )


def test_exports_from_a_model_and_its_tokenizers_translate_alike(trained, tmp_path):
    """What a notebook user has after ``model.fit``: no workdir, a model and two tokenizers.
    Exports and translators decode each batch whole (``decode_parts=1``): a graph without
    the parts takes TensorFlow's optimisation at its first call several times faster
    (test_translate checks that the parts translate alike)."""
    in_memory = kt.TrainedModel(
        trained.model, trained.src_tokenizer, trained.tgt_tokenizer, max_src_length=64
    )
    whole = dict(decode_parts=1)
    first = kt.exporters.export_saved_model(in_memory, tmp_path / "mine", beam_size=2, **whole)
    second = kt.exporters.export_saved_model(in_memory, tmp_path / "mine", beam_size=2, **whole)
    assert (first.name, second.name) == ("1", "2")
    assert (first / "assets" / "spm_shared.model").read_bytes() == trained.src_tokenizer.model_bytes

    newest = kt.Translator.from_saved_model(tmp_path / "mine")
    assert newest.path == second and newest.beam_size == 2
    expected_beam = kt.Translator.from_trained_model(in_memory, beam_size=2, **whole).translate(
        SENTENCES
    )
    assert newest.translate(SENTENCES, batch_size=3) == expected_beam
    greedy = kt.Translator.from_saved_model(first, beam_size=1)
    assert greedy.translate(SENTENCES) == kt.Translator.from_trained_model(
        in_memory, **whole
    ).translate(SENTENCES)
    with pytest.raises(ValueError, match="re-export"):
        kt.Translator.from_saved_model(first, beam_size=3)
    with pytest.raises(FileNotFoundError, match="No SavedModel"):
        kt.Translator.from_saved_model(tmp_path)

    tflite = kt.exporters.export_tflite(
        in_memory, tmp_path / "mine.tflite", max_src_length=16, max_tgt_length=12
    )
    assert tflite.read_bytes()[4:8] == b"TFL3"


def _old_version_and_new_one(tmp_path):
    """``tmp_path/1`` holding ``old.txt``, and a staging folder beside it holding ``new.txt``."""
    target = tmp_path / "1"
    target.mkdir()
    (target / "old.txt").write_text("old")
    staging = files.staging_directory(target)
    (staging / "new.txt").write_text("new")
    return target, staging


def test_replace_directory_swaps_atomically_on_linux(tmp_path):
    if not os.uname().sysname == "Linux":
        pytest.skip("the atomic swap is Linux's renameat2")
    target, staging = _old_version_and_new_one(tmp_path)
    assert files._exchange(staging, target)  # this kernel and file system can swap
    files._exchange(staging, target)  # swap back, then let replace_directory do it
    files.replace_directory(staging, target)
    assert [p.name for p in target.iterdir()] == ["new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["1"]


def test_replace_directory_without_a_swap_moves_the_old_version_aside_first(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_exchange", lambda first, second: False)
    target, staging = _old_version_and_new_one(tmp_path)
    seen = []
    real_replace = os.replace

    def replace(source, destination):
        real_replace(source, destination)
        seen.append(target.exists())

    monkeypatch.setattr(files.os, "replace", replace)
    files.replace_directory(staging, target)
    # Moving the old version aside is the only moment without it, and the new one follows at once:
    # [aside → target missing, new in → present].
    assert seen == [False, True]
    assert [p.name for p in target.iterdir()] == ["new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["1"]  # no staging or old folder left
    umask = os.umask(0o022)
    os.umask(umask)
    assert (
        target.stat().st_mode & 0o777 == 0o777 & ~umask
    )  # mkdir's mode, not mkdtemp's owner-only 0700


def test_replace_directory_puts_the_old_version_back_when_the_new_one_cannot_go_in(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(files, "_exchange", lambda first, second: False)
    target, staging = _old_version_and_new_one(tmp_path)
    real_replace = os.replace

    def replace(source, destination):
        if os.fspath(source) == os.fspath(staging):
            raise OSError("disk full")
        real_replace(source, destination)

    monkeypatch.setattr(files.os, "replace", replace)
    with pytest.raises(OSError, match="disk full"):
        files.replace_directory(staging, target)
    assert (target / "old.txt").read_text() == "old"
    assert [p.name for p in target.iterdir()] == ["old.txt"]
