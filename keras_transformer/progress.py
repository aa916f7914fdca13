"""Progress bars for long library calls, shown only when asked for and when
``tqdm`` is installed (the ``[train]`` extra); otherwise a silent stand-in."""

from __future__ import annotations

import sys
from typing import Any


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def progress_bar(
    enabled: bool, total: int | None = None, desc: str = "", unit: str = "it", initial: int = 0
):
    """A ``tqdm`` bar on stderr when it is a terminal, or a stand-in with the same ``update`` /
    ``set_postfix_str`` / ``close`` methods when ``enabled`` is false or tqdm
    is missing. Use it as a context manager. ``initial``: where the bar starts (the work a
    resumed job had done)."""
    if enabled:
        try:
            from tqdm import tqdm
        except ImportError:
            return _Silent()
        # disable=None: drawn only on a terminal, so logs and pipes get no bar fragments.
        return tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit=unit,
            file=sys.stderr,
            dynamic_ncols=True,
            leave=False,
            disable=None,
        )
    return _Silent()
