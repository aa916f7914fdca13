"""Prepared corpora: tokenized once, shuffled, written as sharded TFRecord files.

A big corpus is tokenized and length-filtered once, by ``prepare_shards``,
instead of at the start of every run, and written shuffled, in files that
training reads in parallel, each worker its own (``sharded_dataset``)::

    DIR/manifest.json                   what the shards hold and what made them
    DIR/shard-00000-of-00042.tfrecord   about examples_per_shard examples each
    ...

Preparing (``prepare``) tokenizes in bounded memory and writes the shards
shuffled; a shard's records (``records``) each hold a block of examples as
raw ids; reading (``reading``) splits the files over the input pipelines and
rebuilds ``src_ids``, ``tgt_in_ids`` and ``tgt_out_ids`` with the functions
``make_dataset`` uses (``keras_transformer.data.sequences``); several corpora
are mixed by weight (``mixing``).

``manifest.json`` records the shards and their sizes, the counts (pairs
read, dropped as too long, ids), the length limits, and a fingerprint of
what determines the examples (tokenizer models, limits, length filter, a
description of the source) so that a preparation made with other settings
is detected (``PreparedShards.check``).
"""
