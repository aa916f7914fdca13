// Text in and out of the translator, as keras_transformer.exporters.LiteRTTranslator does it:
// whitespace normalised (keras_transformer/data/normalize.py), SentencePiece ids + EOS cut to
// max_src_length and padded (encode_sources), and the output read up to its first EOS, without
// pad and BOS, ids outside the vocabulary read as <unk> (SubwordTokenizer.detokenize).
// No imports: the tests run these functions in Node against Python's.

// Python's str.isspace() characters, as normalize_whitespace_tf's pattern lists them.
const WHITESPACE = /[\t\n\v\f\r \x1c-\x1f\x85\p{Z}]+/gu;

export function normalizeWhitespace(text) {
  return String(text).replace(WHITESPACE, " ").replace(/^ | $/g, "");
}

// The model's input for one line: [max_src_length] ids (subwords, EOS, then pad).
export function sourceIds(tokenizer, text, config) {
  const normalized = normalizeWhitespace(text);
  const subwords = normalized ? tokenizer.encodeIds(normalized) : [];
  const ids = new Array(config.max_src_length).fill(config.pad_id);
  const kept = subwords.slice(0, config.max_src_length - 1);
  kept.forEach((id, i) => { ids[i] = id; });
  ids[kept.length] = config.eos_id;
  return ids;
}

// The text of the model's output ids.
export function targetText(tokenizer, ids, config) {
  const kept = [];
  for (let id of ids) {
    id = Number(id);
    if (id < 0 || id >= config.target_vocab_size) id = config.unk_id;
    if (id === config.eos_id) break;
    if (id !== config.pad_id && id !== config.bos_id) kept.push(id);
  }
  return kept.length ? tokenizer.decodeIds(kept) : "";
}
