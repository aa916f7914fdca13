"""The jobs behind ``keras_transformer.Translator``, one a module.

``graph``: ``TranslationGraph``, the decoders over a model (the export saves
the same); ``in_process`` and ``served``: the backends, the graph with Python
tokenizers or an export's signatures; ``batching``: sorting and batching by a
token budget; ``text``: target ids, blank sentences, length checks and
n-best lists as text.
"""
