"""A corpus file translated into another (``translate_corpus``, ``python -m
export.translate_corpus``): one answer a line, each what the translator gives the line
alone, whatever the bytes; after a crash the same call finishes the output as an
uninterrupted run writes it; a mismatched rerun is one clear error."""

import gzip
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hang_guard import HANG_TIMEOUT

import keras_transformer as kt
from keras_transformer.file_translation import text_lines
from keras_transformer.translate import n_best_moses, one_line

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent
LONG = " ".join(["yesterday the hungry teacher gave an old book to the farmer"] * 12)
# The bytes of a messy file, and the strings each of its lines is (text_lines).
RAW_LINES = [
    "\ufeffthe hungry boy sees 3 red cats".encode(),  # a byte-order mark: dropped
    b"",
    b"a dog sleeps\r",  # CRLF: the \r dropped
    LONG.encode(),  # longer than the model's source limit: cut as translate cuts it
    b"the farmer\rwas happy",  # a \r inside a line: kept, not a line break
    b"caf\xe9 the old teacher \xff sleeps",  # invalid UTF-8: U+FFFD
    "a boy sees\u2028a dog".encode(),  # U+2028 inside a line: kept
    b"   ",
    b"cats",  # the last line, without its newline
]
LINES = [
    "the hungry boy sees 3 red cats",
    "",
    "a dog sleeps",
    LONG,
    "the farmer\rwas happy",
    "caf\ufffd the old teacher \ufffd sleeps",
    "a boy sees\u2028a dog",
    "   ",
    "cats",
]
MORE = ["a dog sleeps", "the boy sees 3 cats", "", "the old teacher sleeps", "a cat"] * 4


class Crash(Exception):
    """Stands for a process killed in the middle of a file."""


@pytest.fixture(scope="module")
def translator(tiny_workdir):
    return kt.Translator.from_workdir(tiny_workdir, beam_size=2)


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "source.txt"
    path.write_bytes(b"\n".join(RAW_LINES))
    return path


@pytest.fixture
def short(tmp_path):
    """Plain short sentences, an empty line among them: for what does not need the messy file."""
    path = tmp_path / "short.txt"
    path.write_text("\n".join(MORE[:6]) + "\n", encoding="utf-8")
    return path


def _echo(monkeypatch, translator) -> None:
    """The translator's ``translate_iterable`` answers each line with the line itself:
    the output shows what was read, without a model's cost."""
    monkeypatch.setattr(translator, "translate_iterable", lambda lines, **options: iter(lines))


def _lines(path: Path) -> list[str]:
    """An output's lines, split on \\n only."""
    text = path.read_bytes().decode("utf-8")
    assert text.endswith("\n")
    return text[:-1].split("\n")


def _state(output: Path) -> dict:
    return json.loads(output.with_name(output.name + ".progress.json").read_text())


def test_lines_split_on_newlines_only_and_decode_with_replacement():
    assert list(text_lines(io.BytesIO(b"\n".join(RAW_LINES)))) == LINES
    assert list(text_lines(io.BytesIO(b"\n".join(RAW_LINES) + b"\n"))) == LINES
    assert list(text_lines(io.BytesIO(b""))) == []
    assert list(text_lines(io.BytesIO(b"\n\r\n"))) == ["", ""]


def test_each_line_is_its_translation_alone(translator, source, tmp_path):
    """Empty, long, CR, CRLF, U+2028 and invalid-UTF-8 lines: one output line each, the
    translation of the string the line decodes to."""
    output = tmp_path / "out.txt"
    done = kt.translate_corpus(translator, source, output, window=4, batch_tokens=24)

    assert translator.src_tokenizer.tokenize([LONG]).row_lengths()[0] > translator.max_src_length
    expected = [one_line(text) for text in translator.translate(LINES)]
    assert _lines(output) == expected
    assert [_lines(output)[3]] == translator.translate([LONG])  # the long line, cut
    assert expected[1] == "" and b"\r" not in output.read_bytes()
    assert done == kt.CorpusTranslation(
        source=source,
        output=output,
        state=tmp_path / "out.txt.progress.json",
        lines=len(LINES),
        translated=len(LINES),
        resumed_from=0,
        output_bytes=output.stat().st_size,
        already_complete=False,
    )
    state = _state(output)
    assert state["complete"] and state["lines_done"] == len(LINES)
    assert state["settings"]["mode"] == "translate"
    assert state["settings"]["search"]["beam_size"] == 2


@pytest.mark.parametrize("name", ["in.txt.gz", "in.txt"])
def test_gzip_is_known_by_its_bytes_not_its_name(translator, tmp_path, monkeypatch, name):
    source = tmp_path / name
    source.write_bytes(gzip.compress(b"\n".join(RAW_LINES)))
    _echo(monkeypatch, translator)
    output = tmp_path / "out.txt"
    kt.translate_corpus(translator, source, output)
    assert _lines(output) == [one_line(line) for line in LINES]


def test_n_best_lists_are_export_translates_moses_lines(translator, source, tmp_path):
    output = tmp_path / "nbest.txt"
    kt.translate_corpus(translator, source, output, n_best=2, window=4)
    lists = translator.n_best(LINES, 2)
    expected = "".join(n_best_moses(index, hypotheses) for index, hypotheses in enumerate(lists))
    assert output.read_text(encoding="utf-8") == expected
    assert "1 |||  ||| 0.0000\n" in expected  # the empty line


def test_a_line_break_in_a_translation_becomes_a_space(translator, source, tmp_path, monkeypatch):
    """A tokenizer that gave a line break would shift every later line: it is a space."""

    def translations(lines, **options):
        return (f"x\r\ny{index}" for index, _ in enumerate(lines))

    monkeypatch.setattr(translator, "translate_iterable", translations)
    output = tmp_path / "out.txt"
    kt.translate_corpus(translator, source, output)
    assert _lines(output) == [f"x  y{index}" for index in range(len(LINES))]


def test_a_seed_gives_the_same_samples_as_translator_sample(translator, short, tmp_path):
    first, other = tmp_path / "a.txt", tmp_path / "b.txt"
    kt.translate_corpus(translator, short, first, sample=True, top_k=5, seed=3, window=4)
    kt.translate_corpus(translator, short, other, sample=True, top_k=5, seed=4, window=2)
    samples = translator.sample(MORE[:6], top_k=5, seed=3)
    assert _lines(first) == [one_line(text) for text in samples]
    assert _lines(other) != _lines(first)
    settings = _state(first)["settings"]
    assert (settings["top_k"], settings["top_p"], settings["seed"]) == (5, 1.0, 3)
    assert "search" not in settings  # the beam does not matter to a sample


def _crash_after(monkeypatch, translator, method: str, answers: int) -> None:
    """The translator's stream ``method`` raises ``Crash`` when asked for answer
    ``answers`` (counted from 0), as a killed process stops."""
    real = getattr(translator, method)

    def crashing(*args, **kwargs):
        stream = real(*args, **kwargs)

        def answers_until_the_crash():
            for count, answer in enumerate(stream):
                if count == answers:
                    raise Crash
                yield answer

        return answers_until_the_crash()

    monkeypatch.setattr(translator, method, crashing)


@pytest.mark.parametrize(
    "mode, options, method",
    [
        ("translate", {}, "translate_iterable"),
        ("n_best", {"n_best": 2}, "n_best_iterable"),
    ],
)
def test_a_crashed_run_resumes_to_the_uninterrupted_output(
    translator, tmp_path, monkeypatch, mode, options, method
):
    """Two windows of four written, the third cut short mid-write: the rerun cuts the
    partial bytes, translates from line 8 on (the last window), and the output is an
    uninterrupted run's."""
    lines = MORE[:12]  # three windows: the crash comes in the last
    source = tmp_path / "more.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    whole, output = tmp_path / "whole.txt", tmp_path / "out.txt"
    kt.translate_corpus(translator, source, whole, window=4, **options)

    with monkeypatch.context() as patch:
        _crash_after(patch, translator, method, answers=10)
        with pytest.raises(Crash):
            kt.translate_corpus(translator, source, output, window=4, **options)
    state = _state(output)
    assert (state["lines_done"], state["complete"]) == (8, False)
    assert output.stat().st_size == state["output_bytes"]
    recorded = output.read_bytes()
    assert recorded == whole.read_bytes()[: len(recorded)]
    with open(output, "ab") as out:  # the crash came in the middle of a write
        out.write(b"a partial wri")

    done = kt.translate_corpus(translator, source, output, window=4, **options)
    assert (done.resumed_from, done.translated, done.lines) == (8, len(lines) - 8, len(lines))
    assert output.read_bytes() == whole.read_bytes()
    assert _state(output)["complete"]


def test_a_complete_output_is_left_alone(translator, short, tmp_path):
    output = tmp_path / "out.txt"
    first = kt.translate_corpus(translator, short, output)
    before = output.stat().st_mtime_ns, output.with_name("out.txt.progress.json").read_bytes()
    again = kt.translate_corpus(translator, short, output, window=3)  # batching may differ
    assert again.already_complete and (again.translated, again.resumed_from) == (0, 6)
    assert again.output_bytes == first.output_bytes
    after = output.stat().st_mtime_ns, output.with_name("out.txt.progress.json").read_bytes()
    assert after == before


def test_a_mismatched_rerun_is_one_clear_error(translator, short, tmp_path):
    output = tmp_path / "out.txt"
    kt.translate_corpus(translator, short, output)
    state_file = tmp_path / "out.txt.progress.json"
    greedy = kt.Translator(
        translator.model,
        translator.src_tokenizer,
        translator.tgt_tokenizer,
        translator.search,
        translator.limits,
        beam_size=1,
        max_src_length=translator.max_src_length,
    )
    with pytest.raises(ValueError, match=r"search.beam_size 1 \(recorded: 2\).*--overwrite"):
        kt.translate_corpus(greedy, short, output)
    with pytest.raises(ValueError, match=r"mode n_best \(recorded: translate\).*--overwrite"):
        kt.translate_corpus(translator, short, output, n_best=2)
    other = tmp_path / "other.txt"
    other.write_bytes(short.read_bytes() + b"\none more line")
    with pytest.raises(ValueError, match="is not the source out.txt.progress.json records"):
        kt.translate_corpus(translator, other, output)
    translated = output.read_bytes()
    with open(output, "ab") as out:
        out.write(b"an edit\n")
    with pytest.raises(ValueError, match="changed after it was completed.*--overwrite"):
        kt.translate_corpus(translator, short, output)
    state_file.write_text("{not json")
    with pytest.raises(ValueError, match="not a readable progress record.*--overwrite"):
        kt.translate_corpus(translator, short, output)
    state_file.unlink()
    with pytest.raises(FileExistsError, match="has no out.txt.progress.json.*--overwrite"):
        kt.translate_corpus(translator, short, output)
    assert output.read_bytes() == translated + b"an edit\n"  # no error wrote anything

    done = kt.translate_corpus(translator, short, output, overwrite=True)
    assert output.read_bytes() == translated and done.translated == 6


def test_an_output_unlike_its_record_is_refused(translator, short, tmp_path, monkeypatch):
    output = tmp_path / "out.txt"
    with monkeypatch.context() as patch:
        _crash_after(patch, translator, "translate_iterable", answers=4)
        with pytest.raises(Crash):
            kt.translate_corpus(translator, short, output, window=2)
    written = output.read_bytes()
    assert _state(output)["lines_done"] == 4 and written.count(b"\n") == 4
    output.write_bytes(written[:-3])
    with pytest.raises(ValueError, match=r"shorter \(\d+ bytes\) than out.txt.progress.json"):
        kt.translate_corpus(translator, short, output, window=2)
    output.write_bytes(written.replace(b"\n", b" ", 1) + b"\n")  # a line fewer, as long
    with pytest.raises(ValueError, match="holds 3 lines but out.txt.progress.json records 4"):
        kt.translate_corpus(translator, short, output, window=2)


def test_bad_options_and_paths_are_refused_before_anything_is_written(translator, source, tmp_path):
    output = tmp_path / "out.txt"
    cases = [
        ({"n_best": 3}, ValueError, r"n=3: an n-best list holds 1 to the beam size \(2\)"),
        ({"n_best": 2, "sample": True}, ValueError, "do not go together"),
        ({"top_p": 0.9}, ValueError, "top_p: sampling parameters need sample=True"),
        ({"sample": True, "temperature": 0.0}, ValueError, "temperature"),
        ({"window": 0}, ValueError, "window must be >= 1"),
    ]
    for options, error, message in cases:
        with pytest.raises(error, match=message):
            kt.translate_corpus(translator, source, output, **options)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        kt.translate_corpus(translator, tmp_path / "missing.txt", output)
    with pytest.raises(FileNotFoundError, match="folder .* does not exist"):
        kt.translate_corpus(translator, source, tmp_path / "no" / "out.txt")
    with pytest.raises(FileExistsError, match="is a folder"):
        kt.translate_corpus(translator, source, tmp_path)
    with pytest.raises(ValueError, match="is the source"):
        kt.translate_corpus(translator, source, source, overwrite=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["source.txt"]


def _one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert lines[0].startswith("kt translate-corpus: error: "), lines[0]
    return lines[0]


@pytest.fixture
def program(capfd):
    """``python -m export.translate_corpus ARGS`` in this process (TensorFlow is imported
    already): ``(exit status, stderr)``. The logging the program sets up is undone."""
    from keras_transformer.cli import translate_corpus

    root = logging.getLogger()

    def run(*args: str) -> tuple[int, str]:
        handlers, level = root.handlers[:], root.level
        capfd.readouterr()
        try:
            status = translate_corpus.main(list(args))
        except SystemExit as exit:
            status = exit.code
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        return status, capfd.readouterr().err

    return run


def test_the_program_translates_resumes_and_refuses_in_one_line(
    translator, tiny_workdir, short, tmp_path, program
):
    output = tmp_path / "out.txt"
    common = ["--workdir", str(tiny_workdir), "--src", str(short), "--out", str(output)]
    result = subprocess.run(
        [sys.executable, "-m", "export.translate_corpus", *common, "--beam", "2", "--window", "3"],
        cwd=CHECKOUT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    expected = [one_line(text) for text in translator.translate(MORE[:6])]
    assert _lines(output) == expected
    assert f"translated 6 lines into {output}" in result.stderr

    status, stderr = program(*common, "--beam", "2")
    assert status == 0 and "already complete" in stderr, stderr[-3000:]
    status, stderr = program(*common)  # greedy
    assert status == 2 and "search.beam_size 1 (recorded: 2)" in _one_line_error(stderr)
    assert "--overwrite" in stderr
    status, stderr = program(*common, "--beam", "2", "--n-best", "3", "--overwrite")
    assert status == 2
    assert "n=3: an n-best list holds 1 to the beam size (2)" in _one_line_error(stderr)
    (tmp_path / "out.txt.progress.json").unlink()
    status, stderr = program(*common, "--beam", "2")
    assert status == 2 and "has no out.txt.progress.json" in _one_line_error(stderr)
    assert _lines(output) == expected


@pytest.fixture(scope="module")
def export(tiny_workdir, tmp_path_factory):
    from keras_transformer.exporters import export_saved_model

    return export_saved_model(
        tiny_workdir, tmp_path_factory.mktemp("exports") / "demo", beam_size=2
    )


@pytest.mark.slow
def test_an_export_translates_a_corpus_by_its_signatures(export, source, tmp_path, program):
    """``--model`` (the folder above the version): the SavedModel's n-best lists; the record
    names the version folder and its beam."""
    output = tmp_path / "out.nbest"
    common = ["--model", str(export.parent), "--src", str(source), "--out", str(output)]
    status, stderr = program(*common, "--n-best", "2", "--window", "4")
    assert status == 0, stderr[-3000:]
    saved = kt.Translator.from_saved_model(export.parent)
    lists = saved.n_best(LINES, 2)
    expected = "".join(n_best_moses(index, hypotheses) for index, hypotheses in enumerate(lists))
    assert output.read_text(encoding="utf-8") == expected
    settings = _state(output)["settings"]
    assert settings["model"]["saved_model"] == str(export.resolve())
    assert settings["search"] == {"beam_size": 2} and settings["n"] == 2

    best = tmp_path / "out.txt"
    done = kt.translate_corpus(saved, source, best, window=4)
    assert _lines(best) == [one_line(text) for text in saved.translate(LINES)]
    greedy = kt.Translator.from_saved_model(export, beam_size=1)
    with pytest.raises(ValueError, match=r"search.beam_size 1 \(recorded: 2\)"):
        kt.translate_corpus(greedy, source, best)
    assert done.lines == len(LINES)
