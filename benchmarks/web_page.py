"""The page of ``kt export web`` in headless Chromium: its weight, its start and its speed.

Usage: python -m benchmarks.web_page --workdir W [--tflite F | --quantize dynamic | --page DIR]
       --src FILE [--sentences 100] [--json out.json] [--screenshot page.png]

Builds the page (``export_web``; ``--page DIR`` takes one already built from ``W``), serves it
from a thread on 127.0.0.1 (``http.server``, no compression, no COOP/COEP headers), and drives
the Debian ``chromium`` (or ``$CHROMIUM``) with puppeteer-core (``web_page.mjs``, the page's
``package.json`` devDependency). Reported:

- the bytes the page fetched, raw and gzip-compressed (level 6, as a static server compresses
  them), by file, and every request's host (all must be 127.0.0.1);
- the time from navigation to ``window.kt.ready`` and to the first translation (the network is
  switched off once the page is ready);
- the browser's ms a sentence, greedy, one sentence after another through
  ``window.kt.translate`` (its tokenizing included), against Python's LiteRT interpreter with
  one thread on the same sentences (``LiteRTTranslator.run``: the interpreter alone, after one
  untimed sentence), and whether the two translate every sentence alike;
- the first three sentences once more through the form (``#source``, ``#translate``,
  ``#target``), a blank line among them;
- the Chromium version and the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

DRIVER = Path(__file__).resolve().parent / "web_page.mjs"
CHROMIUM_FIX = "apt-get install -y chromium, or set CHROMIUM to a Chromium or Chrome binary"
NODE_FIX = "apt-get install -y nodejs npm"


def chromium() -> str:
    """The Chromium binary: ``$CHROMIUM``, else ``chromium`` on the PATH.

    Raises:
        RuntimeError: there is none, with the fix.
    """
    found = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if not found:
        raise RuntimeError(f"headless Chromium not found: {CHROMIUM_FIX}.")
    return found


def node() -> str:
    """The ``node`` binary.

    Raises:
        RuntimeError: there is none, with the fix.
    """
    found = shutil.which("node")
    if not found:
        raise RuntimeError(f"node not found (it drives Chromium): {NODE_FIX}.")
    return found


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


@contextlib.contextmanager
def serve(folder: str | os.PathLike):
    """Serves ``folder`` on 127.0.0.1 at a free port from a thread; yields the page's URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def drive(
    page: str | os.PathLike,
    sentences: list[str],
    ui_text: str,
    screenshot: str | os.PathLike | None = None,
    timeout_s: float = 300,
) -> dict:
    """Serves ``page`` and runs it in headless Chromium (``web_page.mjs``).

    Args:
        page: a folder of ``export_web``.
        sentences: translated one at a time through ``window.kt.translate``.
        ui_text: typed into ``#source``, translated through ``#translate``.
        screenshot: a ``.png`` of the page after that, where given.
        timeout_s: the driver's limit.

    Returns:
        The driver's record: ``translations``, ``ui_translation``, ``requests`` (URL, host),
        ``responses`` (URL, status, bytes, gzip_bytes), ``ready_ms``,
        ``first_translation_ms``, ``ms_per_sentence``, ``requests_after_load``,
        ``chromium_version`` and ``errors``.

    Raises:
        RuntimeError: Chromium or node is missing, or the driver failed.
    """
    from keras_transformer.web import install_node_modules

    binary, node_binary = chromium(), node()
    modules = install_node_modules(dev=True)
    with tempfile.TemporaryDirectory() as scratch, serve(page) as url:
        job = Path(scratch) / "job.json"
        job.write_text(
            json.dumps(
                {
                    "url": url,
                    "chromium": binary,
                    "node_modules": str(modules),
                    "sentences": sentences,
                    "ui_text": ui_text,
                    "screenshot": str(screenshot) if screenshot else None,
                    "timeout_ms": int(timeout_s * 1000),
                }
            )
        )
        result = subprocess.run(
            [node_binary, str(DRIVER), str(job)],
            capture_output=True,
            text=True,
            timeout=timeout_s + 60,
        )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"the Chromium driver failed: {result.stderr.strip()[-2000:]}")
    return json.loads(lines[-1])


def ui_lines(sentences: list[str]) -> list[str]:
    """What the form is given: the first three sentences, a blank line after the first."""
    return [*sentences[:1], "", *sentences[1:3]]


def measure(
    page: str | os.PathLike,
    workdir: str | os.PathLike,
    sentences: list[str],
    screenshot: str | os.PathLike | None = None,
) -> dict:
    """The report of the module docstring for ``page``, built from ``workdir``.

    Args:
        page: a folder of ``export_web``.
        workdir: the run it was built from (its tokenizers, for Python's translator).
        sentences: the sentences to translate.
        screenshot: a ``.png`` of the page after the form's translation, where given.

    Returns:
        The report: ``browser`` (the driver's record), ``python`` (translations, ms a
        sentence), the byte totals, ``hosts`` and the comparisons.
    """
    from keras_transformer.exporters import LiteRTTranslator

    translator = LiteRTTranslator.from_workdir(Path(page) / "model.tflite", workdir, num_threads=1)
    python = translator.run(sentences, warm_up=True)
    form = ui_lines(sentences)
    expected_form = "\n".join(translator.translate(form))
    browser = drive(page, sentences, "\n".join(form), screenshot)
    responses = browser.get("responses", [])
    files = sorted(responses, key=lambda response: -response.get("bytes", 0))
    ms = browser.get("ms_per_sentence")
    return {
        "page": str(page),
        "sentences": len(sentences),
        "chromium": browser.get("chromium_version"),
        "bytes": sum(response.get("bytes", 0) for response in responses),
        "gzip_bytes": sum(response.get("gzip_bytes", 0) for response in responses),
        "files": [
            {key: response.get(key) for key in ("url", "bytes", "gzip_bytes")} for response in files
        ],
        "hosts": sorted({request["host"] for request in browser.get("requests", [])}),
        "requests_after_load": browser.get("requests_after_load"),
        "ready_ms": browser.get("ready_ms"),
        "first_translation_ms": browser.get("first_translation_ms"),
        "browser_ms_per_sentence": ms,
        "python_litert_ms_per_sentence": python.ms_per_sentence,
        "browser_vs_python": ms / python.ms_per_sentence if ms and python.ms_per_sentence else None,
        "same_translations": sum(
            a == b for a, b in zip(browser.get("translations", []), python.texts)
        ),
        "form_matches": browser.get("ui_translation") == expected_form,
        "errors": browser.get("errors", []),
        "browser": browser,
        "python": {"translations": python.texts, "form": expected_form},
    }


def table(report: dict) -> str:
    """The report's figures, one a line."""
    mb = 1e6
    rows = [
        ("Chromium", report["chromium"]),
        ("fetched, raw", f"{report['bytes'] / mb:.2f} MB"),
        ("fetched, gzip", f"{report['gzip_bytes'] / mb:.2f} MB"),
        ("hosts", ", ".join(report["hosts"])),
        ("to window.kt.ready", f"{report['ready_ms']:.0f} ms"),
        ("to the first translation", f"{report['first_translation_ms']:.0f} ms"),
        ("browser, greedy", f"{report['browser_ms_per_sentence']:.1f} ms a sentence"),
        ("Python LiteRT, 1 thread", f"{report['python_litert_ms_per_sentence']:.1f} ms a sentence"),
        ("browser / Python", f"{report['browser_vs_python']:.2f}×"),
        ("same translations", f"{report['same_translations']} of {report['sentences']}"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    lines += [f"  {f['gzip_bytes'] / mb:6.2f} MB gzip  {f['url']}" for f in report["files"][:5]]
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, type=Path, help="a kt train workdir")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--tflite", type=Path, help="a .tflite of the workdir")
    source.add_argument("--quantize", choices=["dynamic"], help="export with int8 weights")
    source.add_argument("--page", type=Path, help="a page already built from the workdir")
    parser.add_argument("--src", required=True, type=Path, help="source sentences, one a line")
    parser.add_argument("--sentences", type=int, default=100, help="the first N lines of --src")
    parser.add_argument("--json", default=None, help="also write the report here")
    parser.add_argument("--screenshot", type=Path, default=None, help="a .png of the page")
    args = parser.parse_args(argv)
    for path in (args.workdir, args.src, args.tflite, args.page):
        if path is not None and not path.exists():
            parser.error(f"{path} does not exist")
    if args.sentences < 1:
        parser.error(f"--sentences must be >= 1, got {args.sentences}")
    return args


def main(argv=None) -> dict:
    """Run the benchmark; returns the report it printed."""
    args = parse_args(argv)
    from benchmarks.report import emit

    lines = args.src.read_text(encoding="utf-8").splitlines()[: args.sentences]
    with tempfile.TemporaryDirectory() as scratch:
        page = args.page
        if page is None:
            from keras_transformer.exporters.web import export_web

            page = export_web(
                args.workdir, Path(scratch) / "page", tflite=args.tflite, quantize=args.quantize
            )
        report = measure(page, args.workdir, lines, args.screenshot)
    print(table(report))
    summary = {key: value for key, value in report.items() if key not in ("browser", "python")}
    emit(summary, args.json)
    return report


if __name__ == "__main__":
    main()
