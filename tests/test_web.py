"""The web page of ``kt export web``: its JavaScript tokenizes and detokenizes as Python does, and
in headless Chromium it translates as ``LiteRTTranslator`` does, fetching only from its own host.

The page is built once, from the tiny demo workdir, through the documented command
(``python -m export.web``); Chromium runs once, through ``benchmarks.web_page`` (the benchmark's
own machinery: serve, drive, compare). Needs ``node``/``npm`` and the Debian ``chromium``
(``make test`` installs them where missing); without them the tests fail with the fix.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hang_guard import HANG_TIMEOUT

pytestmark = pytest.mark.programs

CHECKOUT = Path(__file__).resolve().parent.parent
TOKENIZE = Path(__file__).resolve().parent / "web_tokenize.mjs"
# Lines the held-out sentences do not cover: accents, digits, punctuation, whitespace of every
# kind Python's str.split() knows (and U+FEFF, which it does not), an empty line, a line longer
# than max_src_length, text outside the vocabulary.
TRICKY = [
    "Un élève à l'école, déjà Ünïcödé",
    "the 123 dogs saw 4.5% of 67,890 birds!",
    "  extra   spaces\tand\ttabs  ",
    "",
    "   ",
    "non\u00a0breaking\u2003em\u3000ideographic\u2028line\x1cseparators\x85",
    "\ufeffa byte order mark",
    "quotes \"x\" 'y' (z) [w] {v} - – — … ¿¡",
    "emoji 😀 and 中文 and ελληνικά",
    " ".join(["the hungry boy sees 3 red cats"] * 20),
]


def _require_tools(browser: bool = True):
    """Fail with the fix, on one line, where node (or Chromium, for ``browser``) is missing."""
    from benchmarks.web_page import chromium, node

    try:
        node()
        if browser:
            chromium()
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="module")
def held_out() -> list[str]:
    """A dozen test sentences of the tiny workdir's synthetic corpus (tests/conftest.py)."""
    from keras_transformer.data import demo_splits

    return [source for source, _ in demo_splits(train=2000, valid=20, test=20, seed=1)["test"]][:12]


@pytest.fixture(scope="module")
def web_page(tiny_workdir, tmp_path_factory) -> Path:
    """The page of the tiny workdir, built with the documented command."""
    if shutil.which("npm") is None:
        pytest.fail("npm not found: apt-get install -y nodejs npm (make test does).", pytrace=False)
    out = tmp_path_factory.mktemp("web") / "page"
    result = subprocess.run(
        [sys.executable, "-m", "export.web", "--workdir", str(tiny_workdir), "--out", str(out)],
        cwd=CHECKOUT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip().splitlines()[-1] == str(out)
    return out


@pytest.fixture(scope="module")
def translator(web_page, tiny_workdir):
    from keras_transformer.exporters import LiteRTTranslator

    return LiteRTTranslator.from_workdir(web_page / "model.tflite", tiny_workdir)


def test_the_page_holds_one_folder_of_static_files(web_page, translator):
    config = json.loads((web_page / "translator.json").read_text())
    assert config["max_src_length"] == translator.max_src_length
    assert config["search"] == {"name": "greedy"}
    assert (config["pad_id"], config["eos_id"]) == (
        translator.src_tokenizer.pad_id,
        translator.src_tokenizer.eos_id,
    )
    assert (web_page / config["source_tokenizer"]).is_file()
    wasm = sorted(path.name for path in (web_page / "litert").iterdir())
    builds = ("litert_wasm_internal", "litert_wasm_compat_internal")
    assert wasm == sorted(f"{build}.{kind}" for build in builds for kind in ("js", "wasm"))
    html = (web_page / "index.html").read_text()
    assert "http://" not in html and "https://" not in html  # nothing from another host


def test_javascript_tokenizes_and_detokenizes_as_python(web_page, held_out, translator):
    _require_tools(browser=False)
    import sentencepiece as spm

    from keras_transformer.data.normalize import normalize_whitespace

    config = json.loads((web_page / "translator.json").read_text())
    lines = held_out + TRICKY
    run = translator.run(lines, warm_up=False)
    width = run.target_ids.shape[1]
    vocab = config["target_vocab_size"]
    pad, eos, bos, unk = (config[f"{name}_id"] for name in ("pad", "eos", "bos", "unk"))
    made_up = [  # what a model can output: after EOS, pad and BOS inside, ids past the vocabulary
        [5, 6, eos, 7, 8],
        [pad, 5, bos, 6, eos],
        [vocab + 5, 6, 7, eos],
        [eos],
        [pad],
        [unk, 5, unk],
        list(range(4, 4 + width)),
    ]
    target_ids = run.target_ids.tolist() + [row + [pad] * (width - len(row)) for row in made_up]
    job = web_page.parent / "tokenize.json"
    job.write_text(json.dumps({"page": str(web_page), "lines": lines, "target_ids": target_ids}))
    result = subprocess.run(
        ["node", str(TOKENIZE), str(job)], capture_output=True, text=True, timeout=HANG_TIMEOUT
    )
    assert result.returncode == 0, result.stderr[-4000:]
    js = json.loads(result.stdout)

    python_ids = translator.encode(lines).tolist()
    for line, ours, theirs in zip(lines, python_ids, js["source_ids"]):
        assert theirs == ours, line
    processor = spm.SentencePieceProcessor(model_file=str(web_page / config["source_tokenizer"]))
    for line, pieces in zip(lines, js["pieces"]):
        assert pieces == processor.encode(normalize_whitespace(line), out_type=str), line
    texts = translator.tgt_tokenizer.detokenize(np.array(target_ids, np.int32)).numpy()
    assert js["target_texts"] == [text.decode("utf-8") for text in texts]
    assert any(unk in row for row in python_ids)  # the tricky lines reach <unk>
    assert any(row[-1] == eos for row in python_ids)  # and the cut to max_src_length


def test_the_page_translates_as_litert_in_headless_chromium(
    web_page, tiny_workdir, held_out, translator, tmp_path
):
    _require_tools()
    from benchmarks import web_page as benchmark

    source = tmp_path / "held_out.src"
    source.write_text("\n".join(held_out) + "\n")
    args = ["--workdir", str(tiny_workdir), "--page", str(web_page), "--src", str(source)]
    # Prints the table and the JSON line, writes the JSON (all but the translations) to tmp_path.
    report = benchmark.main([*args, "--sentences", "12", "--json", str(tmp_path / "web.json")])
    written = json.loads((tmp_path / "web.json").read_text())
    assert written["gzip_bytes"] == report["gzip_bytes"] and "cpu" in written
    browser = report["browser"]

    assert report["errors"] == [], report["errors"]
    assert browser["translations"] == translator.translate(held_out)
    assert browser["first_translation"] == browser["translations"][0]
    form = translator.translate(benchmark.ui_lines(held_out))
    assert browser["ui_translation"] == "\n".join(form)
    assert browser["ui_translation"].split("\n")[1] == ""  # an empty line stays empty
    assert report["form_matches"] and report["same_translations"] == len(held_out)

    assert report["hosts"] == ["127.0.0.1"]
    assert all(request["url"].startswith("http://127.0.0.1:") for request in browser["requests"])
    assert report["requests_after_load"] == 0  # translated with the network off
    fetched = {response["url"].rsplit("/", 1)[-1]: response for response in browser["responses"]}
    assert [name for name in fetched if name.endswith(".wasm")] == ["litert_wasm_internal.wasm"]
    assert fetched["model.tflite"]["bytes"] == (web_page / "model.tflite").stat().st_size
    assert 0 < report["gzip_bytes"] < report["bytes"]
    assert 0 < report["ready_ms"] <= report["first_translation_ms"]
    assert report["browser_ms_per_sentence"] > 0


def test_export_web_replaces_its_own_page_and_refuses_anything_else(
    web_page, tiny_workdir, tmp_path
):
    from keras_transformer.exporters.web import export_web

    model = web_page / "model.tflite"
    with pytest.raises(ValueError, match="copied as it is"):
        export_web(tiny_workdir, tmp_path / "a", tflite=model, quantize="dynamic")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        export_web(tiny_workdir, tmp_path / "file", tflite=model)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds no translator.json"):
        export_web(tiny_workdir, tmp_path / "other", tflite=model)
    with pytest.raises(ValueError, match="not a translator of export_tflite"):
        export_web(tiny_workdir, tmp_path / "b", tflite=tmp_path / "file")

    page = export_web(tiny_workdir, tmp_path / "page", tflite=model)
    (page / "stale.txt").write_text("from the old page")
    export_web(tiny_workdir, page, tflite=model)
    assert not (page / "stale.txt").exists() and (page / "translator.json").is_file()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file", "other", "page"]
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "b").exists()


@pytest.mark.slow  # a second export and Chromium run; make test-slow
def test_a_beam_search_page_translates_as_litert_in_headless_chromium(
    tiny_workdir, held_out, tmp_path
):
    _require_tools()
    from benchmarks import web_page as benchmark
    from keras_transformer.exporters import LiteRTTranslator
    from keras_transformer.exporters.web import export_web

    page = export_web(tiny_workdir, tmp_path / "beam", beam=2, alpha=1.0)
    config = json.loads((page / "translator.json").read_text())
    assert config["search"] == {"name": "beam", "beam": 2, "alpha": 1.0, "stopping": "heuristic"}
    translator = LiteRTTranslator.from_workdir(page / "model.tflite", tiny_workdir)
    assert (translator.beam, translator.alpha) == (2, 1.0)

    source = tmp_path / "held_out.src"
    source.write_text("\n".join(held_out[:6]) + "\n")
    args = ["--workdir", str(tiny_workdir), "--page", str(page), "--src", str(source)]
    report = benchmark.main([*args, "--sentences", "6"])
    assert report["errors"] == [], report["errors"]
    assert report["browser"]["translations"] == translator.translate(held_out[:6])
    assert report["hosts"] == ["127.0.0.1"]
    with pytest.raises(ValueError, match="give beam=N as well"):
        export_web(tiny_workdir, tmp_path / "alpha", alpha=1.0)
    assert not (tmp_path / "alpha").exists()
