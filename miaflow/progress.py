"""Progress of long loops, in the job's log: items done of the total, rate and ETA.

A person following a run reads the jobs' logs (records/<stage>/logs/<rule>/...), so a loop that
can run for minutes (epochs, queries, embeddings, token statistics, HPO trials) says how far it
is, about every ten seconds, without flooding the log: the first line comes as soon as an item
finishes after FIRST_S seconds, later ones at most every `every_s` seconds, and closing the
reporter logs one final line with the total time. A loop shorter than FIRST_S logs only that
final line, a loop over no items nothing.

Lines go to the `miaflow.progress` logger (`grep miaflow.progress records/*/logs -r` lists them
all), never into an artifact. The reporter reads a clock and nothing else, so no computed value
or random stream depends on it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from types import TracebackType
from typing import TypeVar

EVERY_S = 10.0  # seconds between progress lines
FIRST_S = (
    1.0  # the first line: after the first item that finishes at least this long after the start
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class Progress:
    """Reports `advance(n)` calls against `total` items of `unit` (e.g. "epochs") of `what`.

    Fractions are allowed (a batch advances 1 / batches of an epoch), so slow epochs still give
    lines every `every_s` seconds. Use as a context manager; the final line says how many items
    were done in what time, and notes a loop that stopped early (early stopping) or failed.
    `clock` is injectable so that tests need no waiting.
    """

    def __init__(
        self,
        total: float,
        what: str,
        unit: str = "items",
        *,
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self.total, self.what, self.unit = total, what, unit
        self.every_s, self.clock, self.logger = every_s, clock, logger
        self.done = 0.0
        self.started = clock()
        self.next_line = self.started + FIRST_S
        self.closed = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close(failed=kind is not None)

    def advance(self, n: float = 1) -> None:
        """Count `n` more items done; log a line if it is time for one."""
        self.done += n
        now = self.clock()
        if now >= self.next_line and not self._complete():
            self.logger.info(
                "%s: %s/%s %s (%.0f%%), %s, ETA %s",
                self.what,
                _count(self.done),
                _count(self.total),
                self.unit,
                100 * self.done / self.total,
                self._rate(now),
                duration(self._eta(now)),
            )
            self.next_line = now + self.every_s

    def close(self, failed: bool = False) -> None:
        """Log the final line once: items done, total time and mean rate (nothing for a loop
        over no items)."""
        if self.closed:
            return
        self.closed = True
        if not self.total and not self.done:
            return
        now = self.clock()
        if failed:
            ending = f" (failed at {_count(self.done)} of {_count(self.total)})"
        elif not self._complete():
            ending = f" (stopped at {_count(self.done)} of {_count(self.total)})"
        else:
            ending = ""
        self.logger.info(
            "%s: %s %s in %s (%s)%s",
            self.what,
            _count(self.done),
            self.unit,
            duration(now - self.started),
            self._rate(now),
            ending,
        )

    def _complete(self) -> bool:
        return self.done >= self.total - 1e-9 * max(1.0, abs(self.total))

    def _per_second(self, now: float) -> float:
        elapsed = now - self.started
        return self.done / elapsed if elapsed > 0 else math.inf

    def _rate(self, now: float) -> str:
        rate = self._per_second(now)
        if math.isinf(rate):
            return f"- {self.unit}/s"
        return f"{rate:,.0f} {self.unit}/s" if rate >= 100 else f"{rate:.3g} {self.unit}/s"

    def _eta(self, now: float) -> float:
        rate = self._per_second(now)
        return (self.total - self.done) / rate if 0 < rate < math.inf else math.nan


def tracked(
    items: Iterable[T],
    what: str,
    unit: str = "items",
    total: float | None = None,
    *,
    every_s: float = EVERY_S,
    clock: Callable[[], float] = time.monotonic,
    logger: logging.Logger = log,
) -> Iterator[T]:
    """`items` one by one, each counted done once the loop asks for the next: the progress of a
    plain loop or comprehension in one line. `total` defaults to len(items). The final line comes
    when the items run out, or, after a `break` or an error, when the loop lets go of the
    iterator (at once in CPython); it cannot tell those two apart and says "stopped at"."""
    if total is None:
        if not isinstance(items, Sized):
            raise TypeError(f"{what}: give the total of items without a length")
        total = len(items)
    progress = Progress(total, what, unit, every_s=every_s, clock=clock, logger=logger)
    try:
        for item in items:
            yield item
            progress.advance()
    finally:
        progress.close()


def _count(value: float) -> str:
    """Whole numbers as such, fractions (of epochs) to one decimal."""
    return f"{value:.0f}" if abs(value - round(value)) < 1e-6 else f"{value:.1f}"


def duration(seconds: float) -> str:
    """Seconds for people: "0.4 s", "13 s", "4 min 05 s", "2 h 03 min"; "?" when unknown."""
    if not math.isfinite(seconds):
        return "?"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
