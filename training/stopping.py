"""Stopping a run cleanly on SIGINT (Ctrl-C), SIGTERM and SIGHUP.

While :class:`Signals` is installed (``privzv.training.run.train``), each of the three signals
raises :class:`Stop` (a KeyboardInterrupt, as Ctrl-C always did), except inside
:meth:`Signals.deferred`, the training loop: there the signal is only noted, and the loop stops
at the end of the round in progress (:meth:`Signals.check`). The checkpoint it then saves is a
state the run really reached between two rounds, so no journaled release is discarded and a
resume re-makes nothing. The run's summary says ``stopped``: ``REASONS[signal]``;
``privzv train`` exits 128 + the signal's number (130, 143, 129). Handlers are installed from the
main thread only (Python's rule); elsewhere the signals keep their defaults.
"""

from __future__ import annotations

import contextlib
import signal
import threading

REASONS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated", signal.SIGHUP: "hangup"}
EXIT_CODES = {reason: 128 + int(sig) for sig, reason in REASONS.items()}
# ``stopped`` of a run that diverged (``privzv.training.divergence``, exit 1): its folder is
# finished with that summary and cannot be resumed
DIVERGED = "diverged"


class Stop(KeyboardInterrupt):
    """A stop signal (its ``reason``: ``REASONS``; ``exit_code`` 128 + its number) that ends a run."""

    def __init__(self, signum: int):
        super().__init__(REASONS[signum])
        self.reason, self.exit_code = REASONS[signum], 128 + int(signum)


class Signals:
    """The stop signals' handlers, restored on exit (a context manager)."""

    def __init__(self):
        self.requested: int | None = None
        self._deferring = False
        self._previous: dict = {}

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in REASONS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame) -> None:
        if self._deferring:
            self.requested = signum
        else:
            raise Stop(signum)

    @contextlib.contextmanager
    def deferred(self):
        """Signals only noted (the caller calls :meth:`check` where it can stop)."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False

    def check(self) -> None:
        """Raise :class:`Stop` if a signal came while deferred."""
        if self.requested is not None:
            raise Stop(self.requested)
