// Loads the exported translator (translator.json beside the page) and translates one line at a
// time with LiteRT.js (CPU, WebAssembly) and SentencePiece (WebAssembly). Every file is fetched
// relative to the page: nothing comes from another host.
import { loadAndCompile, loadLiteRt, Tensor } from "./vendor/litertjs-core.js";
import { SentencePieceProcessor } from "./vendor/sentencepiece.js";
import { normalizeWhitespace, sourceIds, targetText } from "./text.js";

async function fetchBytes(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return new Uint8Array(await response.arrayBuffer());
}

async function loadTokenizer(url) {
  const tokenizer = new SentencePieceProcessor();
  // The package's load(path) reads a file with Node's fs; this is its load from bytes.
  await tokenizer._loadModel(await fetchBytes(url));
  return tokenizer;
}

export class Translator {
  constructor(config, model, source, target) {
    Object.assign(this, { config, model, source, target });
  }

  // The translation of one line ("" for a blank one).
  async translate(line) {
    if (!normalizeWhitespace(line)) return "";
    const ids = sourceIds(this.source, line, this.config);
    const input = new Tensor(Int32Array.from(ids), [1, ids.length]);
    let outputs;
    try {
      outputs = await this.model.run({ source_ids: input });
    } finally {
      input.delete();
    }
    try {
      return targetText(this.target, outputs.target_ids.toTypedArray(), this.config);
    } finally {
      for (const tensor of Object.values(outputs)) tensor.delete();
    }
  }
}

export async function loadTranslator(base = new URL(".", import.meta.url)) {
  const config = await (await fetch(new URL("translator.json", base))).json();
  // The directory: LiteRT.js picks the file its browser runs (translator.json says which ship).
  await loadLiteRt(new URL(config.litert_wasm, base).href);
  const model = await loadAndCompile(new URL(config.model, base).href, { accelerator: "wasm" });
  const source = await loadTokenizer(new URL(config.source_tokenizer, base));
  const target = config.target_tokenizer === config.source_tokenizer
    ? source
    : await loadTokenizer(new URL(config.target_tokenizer, base));
  return new Translator(config, model, source, target);
}
