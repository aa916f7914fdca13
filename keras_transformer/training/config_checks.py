"""Checking a config's values against its schema's annotations, and naming unknown keys.

Used by ``run_config`` and ``config_sources``; imports no TensorFlow.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence
from typing import Literal, Union


def unknown_key(where: str, dotted: str, known: Sequence[str], what: str = "key") -> str:
    """The one-line message for an unknown ``dotted`` key, naming the closest of ``known``."""
    prefix, _, name = dotted.rpartition(".")
    close = difflib.get_close_matches(name, [str(key) for key in known], n=1, cutoff=0.5)
    hint = (
        f"did you mean {prefix + '.' if prefix else ''}{close[0]}?"
        if close
        else f"the {what}s are {', '.join(map(str, known))}."
    )
    return f"{dotted}: unknown {what}; {hint} ({where})"


def allowed_values(annotation) -> list:
    """The plain types and literal values an annotation admits."""
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:  # Optional[X] or X | None
        return [
            item for argument in typing.get_args(annotation) for item in allowed_values(argument)
        ]
    if origin is Literal:
        return [("literal", value) for value in typing.get_args(annotation)]
    if origin is not None:  # tuple[...] etc.: checked by their own code
        return [origin]
    return [annotation]


def admits(allowed: list, value) -> bool:
    for item in allowed:
        if isinstance(item, tuple):
            if value == item[1] and type(value) is type(item[1]):
                return True
        elif item is type(None):
            if value is None:
                return True
        elif item is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return True
        elif item is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return True
        elif isinstance(value, item):
            return True
    return False


def describe(allowed: list) -> str:
    def literal(value) -> str:
        return (
            {True: "true", False: "false", None: "null"}.get(value, value)
            if not isinstance(value, str)
            else value
        )

    names = [
        literal(item[1])
        if isinstance(item, tuple)
        else {
            type(None): "null",
            int: "an integer",
            float: "a number",
            bool: "true or false",
            str: "a string",
            dict: "a mapping",
            list: "a list",
            tuple: "a list",
        }.get(item, getattr(item, "__name__", str(item)))
        for item in allowed
    ]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
