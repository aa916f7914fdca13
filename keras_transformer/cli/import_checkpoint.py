"""Import a pretrained translator as a workdir:

    kt import-checkpoint marian HF_MODEL_DIR --workdir W

``HF_MODEL_DIR`` is a Hugging Face Marian (OPUS-MT) checkpoint directory:
config.json, model.safetensors, source.spm, target.spm, vocab.json and
tokenizer_config.json (what ``save_pretrained`` writes, or a hub download).
``W`` is then a workdir like a trained one: ``kt evaluate``,
``kt tune-decoding``, ``kt export saved-model``, ``kt export tflite``,
``kt export ctranslate2`` and ``kt translate-corpus`` take it, and
``kt train --set model.init_from=W`` fine-tunes it. The library call is
``keras_transformer.marian.import_marian``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from keras_transformer.cli.common import ArgumentParser, existing_path, run, setup_logging

PROG = "kt import-checkpoint"
KINDS = ("marian",)


def parse_args(argv=None):
    parser = ArgumentParser(PROG, __doc__)
    parser.add_argument("kind", choices=KINDS, help="the checkpoint's architecture")
    parser.add_argument("checkpoint", type=Path, help="the checkpoint directory")
    parser.add_argument("--workdir", required=True, type=Path, help="the workdir to write")
    parser.add_argument(
        "--max-src-length",
        type=int,
        default=None,
        help="sources are truncated to this many subwords (default 512 or the model's limit)",
    )
    parser.add_argument(
        "--max-tgt-length",
        type=int,
        default=None,
        help="translations stop at this many subwords (default one less than the source limit)",
    )
    parser.add_argument(
        "--allow-pickle",
        action="store_true",
        help="read pytorch_model.bin when there is no model.safetensors (a pickle runs code "
        "when read: only for files you trust; needs torch)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing workdir")
    args = parser.parse_args(argv)
    existing_path(PROG, args.checkpoint, "checkpoint directory")
    for name in ("max_src_length", "max_tgt_length"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    return args


def main(argv=None) -> int:
    setup_logging()
    args = parse_args(argv)

    def import_() -> int:
        import logging

        from keras_transformer.marian import import_marian

        run_dir = import_marian(
            args.checkpoint,
            args.workdir,
            max_src_length=args.max_src_length,
            max_tgt_length=args.max_tgt_length,
            allow_pickle=args.allow_pickle,
            overwrite=args.overwrite,
        )
        config = run_dir.transformer_config()
        logging.getLogger("training.import_checkpoint").info(
            "imported %s: %d+%d layers, d_model %d, vocabulary %d",
            args.checkpoint,
            config.num_encoder_layers,
            config.num_decoder_layers,
            config.d_model,
            config.tgt_vocab_size,
        )
        print(run_dir.path)
        return 0

    return run(PROG, import_, expected=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())
