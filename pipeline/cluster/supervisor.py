"""Keep one child process running: how ``python -m pipeline worker`` keeps its ``dask worker`` up.

Dask's worker does not reconnect: when its scheduler goes away, the worker and its nanny close and
the process ends, and Dask leaves the restart to a supervisor such as systemd. This one is built in
so a worker host started by hand rejoins by itself, getting the engine plugin like any new worker."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable

FINAL_EXIT_CODES = frozenset({2})  # usage errors: another try fails the same way


class Stopped(Exception):
    """The supervisor was asked to stop while it waited."""


@dataclass
class Backoff:
    """Seconds before the next start: ``first_s`` doubled per quick failure in a row, at most
    ``cap_s``; a child that lived ``healthy_s`` starts the count again."""

    first_s: float = 1.0
    cap_s: float = 30.0
    healthy_s: float = 60.0
    failures: int = 0

    def after(self, lived_s: float) -> float:
        if lived_s >= self.healthy_s:
            self.failures = 0
        delay = min(self.cap_s, self.first_s * 2**self.failures)
        self.failures += 1
        return delay


class Supervisor:
    """Calls ``start`` again each time its child ends, unless ``restart`` is False."""

    def __init__(
        self,
        start: Callable[["Supervisor"], subprocess.Popen],
        say: Callable[[str], None],
        restart: bool = True,
        backoff: Backoff | None = None,
    ):
        self.start = start
        self.say = say
        self.restart = restart
        self.backoff = backoff or Backoff()
        self.stopping = threading.Event()
        self.child: subprocess.Popen | None = None
        self.restarts = 0

    def stop(self, *_signal_args) -> None:
        self.stopping.set()

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds``; raise ``Stopped`` as soon as a stop is asked."""
        if self.stopping.wait(seconds):
            raise Stopped

    def run(self) -> int:
        """The last child's exit code when it is not restarted, else 0 once stopped."""
        previous = {s: signal.signal(s, self.stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            return self._loop()
        except Stopped:
            return 0
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _loop(self) -> int:
        while True:
            self.child = self.start(self)
            started = time.monotonic()
            while self.child.poll() is None:
                if self.stopping.wait(0.2):
                    self._stop_child()
                    return 0
            code = self.child.returncode
            lived = time.monotonic() - started
            if self.stopping.is_set():
                return 0
            if not self.restart or code in FINAL_EXIT_CODES:
                return code
            delay = self.backoff.after(lived)
            self.restarts += 1
            self.say(
                f"the Dask worker ended (exit code {code}) after {lived:.0f} s; starting it again in "
                f"{delay:.0f} s (restart {self.restarts})"
            )
            self.wait(delay)

    def _stop_child(self) -> None:
        child = self.child
        if child is None or child.poll() is not None:
            return
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
