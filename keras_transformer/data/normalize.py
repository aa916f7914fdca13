"""Whitespace normalisation shared by every text source.

Real corpora carry leading/trailing spaces, doubled spaces and non-breaking
spaces (U+00A0). Collapsing every run of whitespace to one ASCII space and
stripping the ends makes "is this line empty?" reliable and makes
``detokenize(tokenize(text))`` give back exactly the normalised text.

The Python and the in-graph versions treat the same characters as whitespace:
those for which ``str.isspace()`` is true.
"""

from __future__ import annotations

import tensorflow as tf

# RE2's \s is ASCII-only ([\t\n\f\r ]); the rest of str.isspace()'s set is
# \v, the separators U+001C–U+001F, NEL (U+0085) and Unicode category Z.
_WHITESPACE_RUN = r"[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+"


def normalize_whitespace(text: str) -> str:
    r"""Strips ``text`` and collapses each whitespace run (NBSP included) to one space.

    Args:
        text: the text.

    Returns:
        The normalised text.

    Example:

    >>> normalize_whitespace("  a\u00a0 b\tc ")
    'a b c'
    """
    return " ".join(text.split())


def normalize_whitespace_tf(texts: tf.Tensor) -> tf.Tensor:
    r"""Applies ``normalize_whitespace`` as TensorFlow ops, for text read in the graph.

    Args:
        texts: a string tensor of any shape.

    Returns:
        The normalised strings, of the same shape.

    Example:

    >>> normalize_whitespace_tf(tf.constant(["  a\u00a0 b\tc "])).numpy()
    array([b'a b c'], dtype=object)
    """
    collapsed = tf.strings.regex_replace(texts, _WHITESPACE_RUN, " ")
    return tf.strings.strip(collapsed)
