"""SentencePiece models as TensorFlow ops: ``SubwordTokenizer``.

``tokenize`` adds no BOS/EOS (the data pipeline decides where they go), and
``detokenize`` drops pad/bos/eos and everything after the first EOS, so raw
decoder output can be fed to it. Tokenization runs as TensorFlow ops
(``tensorflow_text``), so it works in ``tf.function``, ``tf.data`` and an
exported SavedModel; ``model_bytes`` is the serialized model to embed there.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow.python.trackable import resource as tf_resource
from tensorflow_text.python.ops.sentencepiece_tokenizer import gen_sentencepiece_tokenizer

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.tokenization.sentencepiece_trainer import RESERVED_PIECES

PathLike = str | os.PathLike


class _SharedModelResource(tf_resource.TrackableResource):
    """The SentencePiece model resource, registered under a name derived from the model.

    ``tensorflow_text`` creates it without a name, so the op kernel owns it, and
    ``tf.random.set_seed`` / ``keras.utils.set_random_seed`` (which clear the
    eager kernel cache) silently delete it: every later call fails with
    "Resource .../SentencepieceResource does not exist". A shared name puts it
    in the resource manager instead; equal models share one resource.
    """

    def __init__(self, model: bytes):
        super().__init__()
        self._model = model
        self._shared_name = "keras_transformer_spm_" + hashlib.sha256(model).hexdigest()[:32]
        _ = self.resource_handle  # create it now, like tensorflow_text does

    def _create_resource(self):
        return gen_sentencepiece_tokenizer.sentencepiece_op(
            model=self._model, shared_name=self._shared_name
        )


class _SentencepieceTokenizer(tf_text.SentencepieceTokenizer):
    def __init__(self, model: bytes, out_type: tf.DType = tf.int32):
        super().__init__(model=model, out_type=out_type, add_bos=False, add_eos=False)
        self._model_resource = _SharedModelResource(model)


class _Pieces(tf.Module):
    """What both tokenizers share: the pieces by id (``self._pieces``), their
    special ids, and the first steps of ``detokenize``."""

    _pieces: tuple[str, ...]
    pad_id: int
    unk_id: int
    eos_id: int

    @property
    def vocab_size(self) -> int:
        """The number of pieces, the model's vocabulary size."""
        return len(self._pieces)

    def piece(self, token_id: int) -> str:
        """Looks up one piece as Python text, e.g. for plot labels.

        Args:
            token_id: an id of the vocabulary.

        Returns:
            The piece.

        Raises:
            ValueError: ``token_id`` is outside the vocabulary.
        """
        if not 0 <= int(token_id) < self.vocab_size:
            raise ValueError(
                f"token id {token_id} is outside the vocabulary [0, {self.vocab_size})."
            )
        return self._pieces[int(token_id)]

    def pieces(self, ids) -> list[str]:
        """Looks up the pieces of a sequence of ids as Python text.

        Args:
            ids: a 1-D sequence of ids (list, NumPy array or eager tensor).

        Returns:
            The pieces, as a list of ``str``.

        Raises:
            ValueError: an id is outside the vocabulary.
        """
        values = ids.numpy() if hasattr(ids, "numpy") else ids
        return [self.piece(int(i)) for i in values]

    def _ids_to_read(self, ids) -> tuple[tf.Tensor, int, tf.Tensor]:
        """``(batch, rank, before_eos)`` for ``detokenize``: ``[B, T]`` int32 ids (a
        ``[T]`` input gets a batch axis; ragged rows are padded with ``pad_id``;
        ids outside the vocabulary read as ``unk_id``), the input's rank, and
        which ids come before the first EOS."""
        if isinstance(ids, tf.RaggedTensor):
            if ids.ragged_rank != 1:
                raise ValueError(
                    f"detokenize needs [batch, None] ids, got ragged rank {ids.ragged_rank}."
                )
            ids = ids.to_tensor(default_value=self.pad_id)
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        rank = ids.shape.rank
        if rank not in (1, 2):
            raise ValueError(
                f"detokenize needs ids of shape [batch, length] or [length], got rank {rank}."
            )
        batch = ids if rank == 2 else ids[tf.newaxis]
        batch = tf.where((batch < 0) | (batch >= self.vocab_size), self.unk_id, batch)
        before_eos = tf.cumsum(tf.cast(batch == self.eos_id, tf.int32), axis=1) == 0
        return batch, rank, before_eos


class SubwordTokenizer(_Pieces):
    """A SentencePiece model as TensorFlow ops, for graphs, ``tf.data`` and SavedModels.

    Its ids are the SentencePiece model's, with the reserved ids
    ``pad_id``/``unk_id``/``bos_id``/``eos_id`` = 0/1/2/3 that
    ``train_sentencepiece`` gives every model. ``tokenize`` adds no BOS/EOS;
    ``detokenize`` stops at the first EOS and drops pad/bos, so raw decoder
    output can be fed to it.

    Args:
        model_bytes: the serialized SentencePiece model (a ``.model`` file's bytes).
        name: the ``tf.Module`` name.

    Raises:
        ValueError: ``model_bytes`` is not a SentencePiece model, or one that
            does not reserve the package's ids.

    Example:

    >>> from keras_transformer.tokenization import train_sentencepiece
    >>> path = train_sentencepiece(["the cat sleeps", "a dog runs"] * 50, "spm", vocab_size=30)
    >>> tokenizer = SubwordTokenizer.from_file(path)
    >>> ids = tokenizer.tokenize(["the cat runs"])
    >>> tokenizer.detokenize(ids).numpy()
    array([b'the cat runs'], dtype=object)
    """

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def __init__(self, model_bytes: bytes, name: str | None = None):
        super().__init__(name=name)
        try:
            processor = spm.SentencePieceProcessor(model_proto=bytes(model_bytes))
        except (RuntimeError, OSError, TypeError) as error:
            raise ValueError(
                f"Not a SentencePiece model ({error}); train one with train_sentencepiece."
            ) from error
        size = processor.get_piece_size()
        actual = {i: processor.id_to_piece(i) if i < size else None for i in RESERVED_PIECES}
        ids = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(
                f"The model reserves pad/unk/bos/eos ids {ids} (pieces {actual}), but this package "
                "needs "
                f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; retrain it with train_sentencepiece."
            )
        self._model_bytes = bytes(model_bytes)
        self._pieces = tuple(processor.id_to_piece(i) for i in range(processor.get_piece_size()))
        self._tokenizer = _SentencepieceTokenizer(self._model_bytes)

    @classmethod
    def from_file(cls, path: PathLike) -> SubwordTokenizer:
        """Loads a tokenizer from a SentencePiece ``.model`` file.

        Args:
            path: the ``.model`` file (as ``train_sentencepiece`` writes it).

        Returns:
            The ``SubwordTokenizer``.

        Raises:
            ValueError: there is no file at ``path``, or it is not a fitting model.
        """
        path = Path(path)
        if not path.is_file():
            raise ValueError(
                f"No SentencePiece model at {str(path)!r}; train one with train_sentencepiece."
            )
        return cls(path.read_bytes())

    @property
    def model_bytes(self) -> bytes:
        """The serialized model, to embed in an exported SavedModel."""
        return self._model_bytes

    def tokenize(self, strings) -> tf.RaggedTensor | tf.Tensor:
        """Turns text into ids, without BOS or EOS.

        Args:
            strings: a string or a 1-D batch ``[B]`` of strings.

        Returns:
            The ids (int32): ``RaggedTensor[B, None]`` for a batch, a 1-D tensor for a string.
        """
        return self._tokenizer.tokenize(tf.convert_to_tensor(strings, dtype=tf.string))

    def detokenize(self, ids) -> tf.Tensor:
        """Turns ids back into text, reading each row up to its first EOS.

        Pad and BOS ids are dropped; ids outside the vocabulary read as ``<unk>``
        (the model may be wider than the vocabulary).

        Args:
            ids: ``[B, T]`` ids (dense, padded with 0, or ragged) or one row ``[T]``.

        Returns:
            The text: a ``[B]`` string tensor, or a scalar for a ``[T]`` input.
        """
        batch, rank, before_eos = self._ids_to_read(ids)
        keep = before_eos & (batch != self.pad_id) & (batch != self.bos_id)
        text = self._tokenizer.detokenize(tf.ragged.boolean_mask(batch, keep))
        return text if rank == 2 else text[0]

    def id_to_piece(self, ids) -> tf.Tensor:
        """Looks up the pieces of ids inside the graph.

        Args:
            ids: integer ids of any shape.

        Returns:
            A string tensor of the pieces, of the same shape.
        """
        return self._tokenizer.id_to_string(tf.cast(ids, tf.int32))
