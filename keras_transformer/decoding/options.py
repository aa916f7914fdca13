"""What a decoder searches for: ``Greedy``, ``Beam`` or ``Sample``, and the ``Limits``.

Each is a frozen value of Python numbers, checked when made. A served model's
sampling parameters are tensors: they are given at call time as
``SampleParams``, never stored in these fields.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import NamedTuple

STOPPING_RULES = ("exact", "heuristic")


def check_stopping(stopping: str) -> str:
    """Check that ``stopping`` names a rule of ``beam_search`` (``STOPPING_RULES``).

    Args:
        stopping: the rule's name.

    Returns:
        ``stopping``.

    Raises:
        ValueError: not a rule; the message lists them.

    Example:
        >>> check_stopping("exact")
        'exact'
    """
    if stopping not in STOPPING_RULES:
        raise ValueError(
            f"stopping={stopping!r} is not a stopping rule; use one of {STOPPING_RULES}."
        )
    return stopping


def check_beam_size(beam_size: int) -> int:
    """Check that ``beam_size`` is at least 1 (1: greedy decoding).

    Args:
        beam_size: the number of hypotheses kept per sentence.

    Returns:
        ``beam_size``.

    Raises:
        ValueError: ``beam_size < 1``.

    Example:
        >>> check_beam_size(4)
        4
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1 (1 = greedy), got {beam_size}.")
    return beam_size


def check_sampling(top_k=0, top_p=1.0, temperature=1.0) -> None:
    """Raise a ``ValueError`` unless the sampling parameters are in range.

    A served model's request passes tensors instead (``SampleParams``): the
    graph clamps those to their ranges.

    Args:
        top_k: sample among the ``top_k`` likeliest tokens (0: all), at least 0.
        top_p: sample in the nucleus of this probability, in (0, 1].
        temperature: the logits are divided by it, above 0.

    Raises:
        ValueError: a parameter out of range, named in the message.
    """
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0: no limit, 1: greedy), got {top_k}.")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (1: no nucleus), got {top_p}.")
    if not (temperature > 0.0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number above 0, got {temperature}.")


@dataclass(frozen=True)
class Greedy:
    """Greedy decoding: the likeliest token each step, one hypothesis a sentence.

    Example:
        >>> Greedy().hypotheses
        1
    """

    @property
    def hypotheses(self) -> int:
        """The most hypotheses a sentence this search can return: 1."""
        return 1


@dataclass(frozen=True)
class Beam:
    """Beam search: ``size`` hypotheses a sentence, ranked by log p over the GNMT length penalty.

    Args:
        size: the hypotheses kept a sentence, at least 1.
        alpha: the length penalty's exponent (0: none).
        stopping: ``"heuristic"`` or ``"exact"`` (``beam_search``).

    Raises:
        ValueError: a value out of range, named in the message.

    Example:
        >>> Beam(size=4, alpha=1.0).hypotheses
        4
    """

    size: int = 4
    alpha: float = 0.6
    stopping: str = "heuristic"

    def __post_init__(self):
        check_beam_size(self.size)
        check_stopping(self.stopping)
        if not (isinstance(self.alpha, numbers.Real) and math.isfinite(self.alpha)):
            raise ValueError(f"alpha must be a finite number, got {self.alpha!r}.")

    @property
    def hypotheses(self) -> int:
        """The most hypotheses a sentence this search can return: ``size``."""
        return self.size


@dataclass(frozen=True)
class Sample:
    """Sampling: each token drawn from the filtered softmax, one sample a sentence.

    Args:
        top_k: sample among the ``top_k`` likeliest tokens (0: all; 1: greedy).
        top_p: sample in the smallest set of tokens whose probability reaches
            ``top_p`` (1: all).
        temperature: the logits are divided by it before sampling.
        seed: the same seed and sentence give the same sample in any batch.

    Raises:
        ValueError: a value out of range, named in the message.

    Example:
        >>> Sample(top_k=10, seed=3).hypotheses
        1
    """

    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self):
        check_sampling(self.top_k, self.top_p, self.temperature)

    @property
    def hypotheses(self) -> int:
        """The most hypotheses a sentence this search can return: 1."""
        return 1

    def params(self) -> SampleParams:
        """These parameters as ``SampleParams`` (what a served request passes as tensors).

        Returns:
            ``SampleParams(top_k, top_p, temperature, seed)``.

        Example:
            >>> Sample(top_k=5).params().top_k
            5
        """
        return SampleParams(self.top_k, self.top_p, self.temperature, self.seed)


class SampleParams(NamedTuple):
    """Sampling parameters given at call time: Python numbers or tensors (a served request).

    Tensors are not checked; the graph clamps them to their ranges.
    """

    top_k: object
    top_p: object
    temperature: object
    seed: object


Search = Greedy | Beam | Sample


@dataclass(frozen=True)
class Limits:
    """How long an output may be.

    Args:
        max_length: one output length limit for every sentence (``None``:
            each sentence's source length plus ``extra_length``).
        extra_length: see ``max_length``.
        min_length: EOS is not allowed before this many tokens.

    Raises:
        ValueError: a value out of range, named in the message.

    Example:
        >>> Limits(max_length=20).extra_length
        50
    """

    max_length: int | None = None
    extra_length: int = 50
    min_length: int = 0

    def __post_init__(self):
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {self.max_length}.")
        if self.extra_length < 0 or self.min_length < 0:
            raise ValueError(
                f"extra_length and min_length must be >= 0, got {self.extra_length} "
                f"and {self.min_length}."
            )


def check_search(search, n: int = 1) -> None:
    """Check that ``search`` is a search and that it can return ``n`` hypotheses a sentence.

    Args:
        search: ``Greedy()``, ``Beam(...)`` or ``Sample(...)``.
        n: the hypotheses asked for a sentence.

    Raises:
        TypeError: ``search`` is not one of the three.
        ValueError: ``n`` is below 1 or above ``search.hypotheses``.

    Example:
        >>> check_search(Beam(size=4), n=2)
    """
    if not isinstance(search, (Greedy, Beam, Sample)):
        raise TypeError(f"search must be Greedy(), Beam(...) or Sample(...), got {search!r}.")
    if not 1 <= n <= search.hypotheses:
        raise ValueError(
            f"n must be between 1 and the beam size ({search.hypotheses}), "
            f"got {n}: raise the beam size or ask for fewer hypotheses."
        )
