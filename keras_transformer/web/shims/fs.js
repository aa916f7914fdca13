// `fs` for the SentencePiece package in a browser: the page loads models from bytes it fetched.
export function readFileSync(path) {
  throw new Error(`no file system in a browser (asked for ${path}): load the model from bytes`);
}
