"""Parallel-text sources: ``(source, target)`` string pairs, cleaned alike.

Every reader applies the same cleaning:

* lines are split on ``\\n`` only (a ``\\r`` before it is dropped; U+2028,
  form feeds etc. stay inside the line), and a UTF-8 byte-order mark at the
  start of a file is dropped;
* whitespace is normalised (``normalize_whitespace``: strip, collapse runs,
  NBSP included);
* a pair whose source or target is empty after normalising is skipped;
* a line that is not valid UTF-8 is skipped (with its partner);
* a TSV row with too few columns is skipped;
* two plain-text files with different line counts are an error: every pair
  after the first missing line would be misaligned.

Skips are counted in a ``ReadStats`` and logged as a warning on the
``keras_transformer.data`` logger with the first few line numbers (1-based).

``PairSource`` is the one way in: make one with ``PairSource.from_text_files``
(plain or ``.gz``), ``from_tsv``, ``from_tfds`` or ``from_pairs`` (an
in-memory list), then take its ``dataset()`` (a ``tf.data.Dataset`` of
``(source, target)`` strings, for ``make_dataset``), its ``stats``, its
sentences (to train a tokenizer) or ``read()`` (the whole corpus in memory,
a ``ParallelText``). ``dataset()`` cleans in the graph, the other readers in
Python; the tests keep the two equal.
"""
