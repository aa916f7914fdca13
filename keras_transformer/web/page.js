// The page: window.kt.ready (resolves once the model and tokenizers are loaded),
// window.kt.translate(line) (a Promise of one line's translation), and the form that
// translates the text box line by line.
import { loadTranslator } from "./translator.js";

const $ = (selector) => document.querySelector(selector);
const loading = loadTranslator();
let queue = Promise.resolve();

// One translation at a time, in the order asked.
function translate(line) {
  const job = queue.then(async () => (await loading).translate(String(line)));
  queue = job.catch(() => {});
  return job;
}

window.kt = { ready: loading.then(() => undefined), translate };

loading.then(
  () => {
    $("#status").textContent = "Ready: the translation runs in this page, offline.";
    $("#translate").disabled = false;
  },
  (error) => {
    $("#status").textContent = `Could not load the translator: ${error.message}`;
  },
);

$("#translate").addEventListener("click", async () => {
  const button = $("#translate");
  button.disabled = true;
  $("#time").textContent = "translating…";
  try {
    const lines = $("#source").value.split("\n");
    const started = performance.now();
    const out = [];
    for (const line of lines) out.push(await translate(line));
    const ms = performance.now() - started;
    $("#target").value = out.join("\n");
    const sentences = lines.filter((line) => line.trim()).length;
    const each = sentences ? `, ${(ms / sentences).toFixed(0)} ms a sentence` : "";
    $("#time").textContent = `${ms.toFixed(0)} ms${each}`;
  } catch (error) {
    $("#time").textContent = `failed: ${error.message}`;
  } finally {
    button.disabled = false;
  }
});
