"""The jobs behind ``keras_transformer.Translator``, one a module.

``graph``: ``TranslationGraph``, the decoders over a model (the SavedModel's
signatures call the same); ``in_process`` and ``served``: the backends, the graph with Python
tokenizers or an export's signatures; ``streams``: the translator's methods
over a file's lines, a window at a time; ``batching``: sorting and batching by
a token budget; ``text``: target ids, blank sentences, length checks and
n-best lists as text.
"""
