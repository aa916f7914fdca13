// Tokenizes with a page's own files (text.js and vendor/sentencepiece.js, the npm SentencePiece
// package as the page ships it), in Node, for tests/test_web.py to compare with Python.
//
// node web_tokenize.mjs JOB.json, where JOB is {page (the folder), lines, target_ids}; prints
// {source_ids: [[...] a line], pieces: [[...] a line], target_texts: [...] a row of target_ids}.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const page = (name) => join(job.page, name);
const config = JSON.parse(readFileSync(page("translator.json"), "utf8"));
const { normalizeWhitespace, sourceIds, targetText } = await import(
  pathToFileURL(page("text.js")).href
);
const { SentencePieceProcessor } = await import(
  pathToFileURL(page("vendor/sentencepiece.js")).href
);

async function load(path) {
  const tokenizer = new SentencePieceProcessor();
  await tokenizer._loadModel(readFileSync(path)); // as translator.js loads fetched bytes
  return tokenizer;
}

const source = await load(page(config.source_tokenizer));
const target = config.target_tokenizer === config.source_tokenizer
  ? source
  : await load(page(config.target_tokenizer));
const out = {
  source_ids: job.lines.map((line) => sourceIds(source, line, config)),
  pieces: job.lines.map((line) => {
    const text = normalizeWhitespace(line);
    return text ? source.encodePieces(text) : [];
  }),
  target_texts: job.target_ids.map((ids) => targetText(target, ids, config)),
};
process.stdout.write(JSON.stringify(out) + "\n");
