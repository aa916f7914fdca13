// `buffer` for the SentencePiece package in a browser: the page never decodes base64 models.
export const Buffer = globalThis.Buffer;
