"""Progress bars on stderr, drawn by tqdm where it is installed (the ``sim`` extra).

A gateway installs faultfleet without tqdm: the services draw no progress, and the commands
that do (``faultfleet sim``, ``signals federation``, ``demo``) still run there, quietly. tqdm
is imported on first use, like matplotlib in :mod:`faultfleet_apps.plotting`.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any


def _tqdm() -> Any | None:
    """tqdm's bar class, or None where tqdm is not installed."""
    try:
        return importlib.import_module("tqdm").tqdm
    except ModuleNotFoundError:
        return None


class Progress:
    """A progress bar of ``total`` steps on stderr (a no-op without tqdm or a terminal).

    Parameters
    ----------
    total : int
        Steps to the end.
    desc : str
        Label before the bar.
    unit : str
        What a step is ("round", "machine").

    Attributes
    ----------
    n : int
        Steps done so far.
    """

    def __init__(self, total: int, desc: str, unit: str) -> None:
        bar_class = _tqdm()
        self._bar = (
            None
            if bar_class is None
            else bar_class(total=total, desc=desc, unit=unit, file=sys.stderr, disable=None)
        )
        self.n = 0

    def advance_to(self, done: int) -> None:
        """Move the bar to ``done`` steps (never back)."""
        if done > self.n:
            if self._bar is not None:
                self._bar.update(done - self.n)
            self.n = done

    def set_postfix(self, values: Mapping[str, object]) -> None:
        """Show ``values`` after the bar (the latest accuracy, clusters, ...)."""
        if self._bar is not None:
            self._bar.set_postfix(dict(values))

    def write(self, line: str) -> None:
        """Print ``line`` on stderr above the bar."""
        if self._bar is not None:
            self._bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        """Finish the bar's line."""
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def use_thread_lock() -> None:
    """Give tqdm (if installed; torch.fx uses it) a thread lock instead of a multiprocessing
    one: a worker process stopped mid-task would otherwise leave a named semaphore behind."""
    bar_class = _tqdm()
    if bar_class is not None:
        bar_class.set_lock(threading.RLock())
