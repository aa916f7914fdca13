"""What the per-epoch callbacks share: one ``EpochRecord`` per run, in place of the
order of their list. It holds the epoch's logs, computes the validation metrics a
callback provides (validation BLEU) on first request and keeps them for the epoch,
and keeps the run's time; once every callback sharing it has handled the epoch end,
it closes the epoch (its seconds, then the time budget's check and the history, in
that order), whatever the order the callbacks ran in."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import keras

# The validation metrics that rank epochs: the logs' key, and whether higher is better.
METRICS = {"bleu": ("val_bleu", True), "loss": ("val_loss", False)}


def better(metric: str, value, than) -> bool:
    """Whether ``value`` of ``metric`` beats ``than`` (``None`` beats nothing, loses to all)."""
    if value is None:
        return False
    if than is None:
        return True
    return value > than if METRICS[metric][1] else value < than


def metric_name(metric: str) -> str:
    return {"bleu": "validation BLEU", "loss": "validation loss"}[metric]


def metric_value(metric: str, value) -> str:
    """``value`` as the log shows it: BLEU with 2 decimals, a loss with 4."""
    if value is None:
        return "none"
    return f"{value:.2f}" if metric == "bleu" else f"{value:.4f}"


class EpochRecord:
    """One run's per-epoch results and time, shared by its epoch callbacks.

    Each ``EpochCallback`` built with the record joins it when a loop gives it
    the model (``set_model``, or its first epoch end). At an epoch end the first
    of them to run opens the epoch with the logs the loop passes (the same dict
    for every callback); each then reads the metrics through ``value`` and adds
    its own to the logs. A metric a callback ``provide``s (``ValidationBleu``:
    ``val_bleu`` and ``val_chrf``) is computed when first asked for, by
    whichever callback asks, and kept for the epoch. When the last member has
    handled the epoch, the record closes it: ``epoch_seconds`` becomes the time
    since the previous epoch's close (every callback's work included), then
    the members' ``close_epoch`` run by their ``CLOSE_RANK`` (the time budget's
    check, then the history, which records the logs as they end up).

    The clock (``started``, ``last_end``) starts when the record is created,
    just before training; a resumed run's ``TimeBudget`` moves it back by the
    time its backup recorded.

    Example:
        >>> record = EpochRecord()
        >>> record.provide(("val_bleu",), lambda epoch: {"val_bleu": 20.0 + epoch})
        >>> record.open(None, 2, {"loss": 1.5})
        >>> record.value("val_bleu"), record.logs
        (22.0, {'loss': 1.5, 'val_bleu': 22.0})
    """

    def __init__(self):
        self.members: list[EpochCallback] = []
        self.providers: dict[str, Callable[[int], dict]] = {}
        self.epoch: int | None = None
        self.logs: dict = {}
        self.computed: dict[str, float] = {}  # this epoch's provided metrics
        self.waiting: list[EpochCallback] | None = None  # None: no epoch open
        self.started = self.last_end = time.time()
        self.epoch_seconds = 0.0  # the last closed epoch's

    def join(self, member: EpochCallback) -> None:
        """Count ``member`` among the callbacks that handle each epoch end."""
        if all(joined is not member for joined in self.members):
            self.members.append(member)
            if self.waiting is not None:
                self.waiting.append(member)

    def provide(self, keys: Sequence[str], compute: Callable[[int], dict]) -> None:
        """Make ``compute(epoch)`` (a dict of ``keys`` → values) what ``value`` returns for
        ``keys``, computed once per epoch on first request.

        Args:
            keys: the log keys ``compute`` returns, in the order the logs get them.
            compute: the 0-based epoch → ``{key: value}``.
        """
        for key in keys:
            self.providers[key] = compute

    def open(self, member: EpochCallback | None, epoch: int, logs: dict | None) -> None:
        """``member`` handles the end of ``epoch`` (0-based) with the loop's ``logs``: the
        first one opens the epoch.

        Raises:
            RuntimeError: an epoch ends while another is open (a member was left out of
                the callback list).
        """
        if member is not None:
            self.join(member)
        if self.waiting is None:
            self.epoch, self.logs, self.computed = epoch, logs if logs is not None else {}, {}
            self.waiting = list(self.members)
        elif epoch != self.epoch:
            raise RuntimeError(
                f"epoch {epoch + 1} ended before every callback sharing the epoch record had "
                f"handled epoch {self.epoch + 1}: give all of them to the same loop."
            )

    def value(self, key: str):
        """The epoch's ``key``: a provided metric (computed now if not yet, and added to
        the logs), or the loop's log; ``None`` without it."""
        compute = self.providers.get(key)
        if compute is None:
            return self.logs.get(key)
        if key not in self.computed:
            values = compute(self.epoch)
            self.computed.update(values)
            self.logs.update(values)
        return self.computed.get(key)

    def done(self, member: EpochCallback) -> None:
        """``member`` has handled the epoch; after the last one, the epoch closes."""
        if self.waiting is None:
            return
        self.waiting = [waiting for waiting in self.waiting if waiting is not member]
        if not self.waiting:
            self.close()

    def close(self) -> None:
        """Time the epoch, then run the members' closing steps by their rank."""
        now = time.time()
        self.epoch_seconds, self.last_end = now - self.last_end, now
        self.waiting = None
        closing = [member for member in self.members if member.CLOSE_RANK is not None]
        for member in sorted(closing, key=lambda member: member.CLOSE_RANK):
            member.close_epoch(self.epoch, self)

    def seconds(self) -> float:
        """The training time used so far (a resumed run's included)."""
        return time.time() - self.started


class EpochCallback(keras.callbacks.Callback):
    """A per-epoch callback that shares its epoch's results through an ``EpochRecord``.

    Subclasses do their work in ``epoch_end`` (reading other callbacks' metrics
    with ``record.value``) and, if it must come after every callback's
    (timing, recording the final logs), in ``close_epoch`` with a
    ``CLOSE_RANK`` (lower first).

    Args:
        record: the run's shared record; `None` gives the callback one of its own
            (it then reads only the loop's logs).
    """

    CLOSE_RANK: int | None = None

    def __init__(self, record: EpochRecord | None = None):
        super().__init__()
        self.record = record if record is not None else EpochRecord()

    def set_model(self, model):
        super().set_model(model)
        self.record.join(self)

    def on_epoch_end(self, epoch, logs=None):
        self.record.open(self, epoch, logs)
        self.epoch_end(epoch, self.record)
        self.record.done(self)

    def epoch_end(self, epoch: int, record: EpochRecord) -> None:
        """This callback's work at the end of ``epoch`` (0-based)."""

    def close_epoch(self, epoch: int, record: EpochRecord) -> None:
        """This callback's work once every member has handled ``epoch``."""
