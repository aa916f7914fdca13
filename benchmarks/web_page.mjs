// Drives a page of `kt export web` in headless Chromium (puppeteer-core) and prints one JSON
// object: the translations (window.kt.translate, then once through the form), every request
// with its host and bytes (raw, and gzip level 6 as a static server would compress them), the
// time to the first translation and the browser's ms a sentence. benchmarks/web_page.py runs it.
//
// node web_page.mjs JOB.json, where JOB is {url, chromium, node_modules, sentences, ui_text,
// screenshot (a .png path or null), timeout_ms}.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { gzipSync } from "node:zlib";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const require = createRequire(join(job.node_modules, "noop.js"));
const puppeteer = require("puppeteer-core");

const browser = await puppeteer.launch({
  executablePath: job.chromium,
  headless: true,
  args: [
    "--no-sandbox", // root in a container has no user namespaces for Chromium's sandbox
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
  ],
});
// errors: what failed (requests, page exceptions, the driver); console: the page's console
// errors, where LiteRT.js also logs its start-up notices.
const result = { requests: [], errors: [], console: [] };
try {
  result.chromium_version = await browser.version();
  const page = await browser.newPage();
  page.setDefaultTimeout(job.timeout_ms);
  const bodies = [];
  page.on("request", (request) => {
    const url = request.url();
    if (url.startsWith("data:") || url.startsWith("blob:")) return; // no network
    result.requests.push({ url, host: new URL(url).hostname });
  });
  page.on("requestfinished", (request) => {
    const url = request.url();
    if (url.startsWith("data:") || url.startsWith("blob:")) return;
    bodies.push(
      request.response().buffer().then(
        (body) => ({ url, status: request.response().status(), bytes: body.length,
          gzip_bytes: gzipSync(body, { level: 6 }).length }),
        (error) => ({ url, error: String(error) }),
      ),
    );
  });
  page.on("requestfailed", (request) => {
    result.errors.push(`request failed: ${request.url()} ${request.failure()?.errorText}`);
  });
  page.on("pageerror", (error) => result.errors.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() === "error") result.console.push(message.text());
  });

  const started = performance.now();
  await page.goto(job.url, { waitUntil: "load" });
  await page.evaluate(() => window.kt.ready);
  result.ready_ms = performance.now() - started;
  const loadedRequests = result.requests.length;
  await page.setOfflineMode(true); // from here on the page works with the network off
  const first = await page.evaluate((line) => window.kt.translate(line), job.sentences[0] ?? "");
  result.first_translation_ms = performance.now() - started;

  // Every sentence once more, timed in the page (tokenizing included, as small as it is).
  const timed = await page.evaluate(async (lines) => {
    const texts = [];
    const ms = [];
    for (const line of lines) {
      const begun = performance.now();
      texts.push(await window.kt.translate(line));
      ms.push(performance.now() - begun);
    }
    return { texts, ms };
  }, job.sentences);
  result.translations = timed.texts;
  result.first_translation = first;
  const nonBlank = job.sentences.map((line, i) => [line, timed.ms[i]]).filter(([line]) => line.trim());
  result.ms_per_sentence = nonBlank.length
    ? nonBlank.reduce((sum, [, ms]) => sum + ms, 0) / nonBlank.length
    : 0;

  // Once through the form: type, click, read.
  await page.$eval("#source", (box, text) => { box.value = text; }, job.ui_text);
  await page.click("#translate");
  await page.waitForFunction(() => !document.querySelector("#translate").disabled
    && /ms/.test(document.querySelector("#time").textContent));
  result.ui_translation = await page.$eval("#target", (box) => box.value);
  result.ui_time = await page.$eval("#time", (span) => span.textContent);
  if (job.screenshot) await page.screenshot({ path: job.screenshot });
  result.requests_after_load = result.requests.length - loadedRequests;
  result.responses = await Promise.all(bodies);
} catch (error) {
  result.errors.push(`driver: ${error.message}`);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(result) + "\n");
