"""Garbage-collector pause tracking through ``gc.callbacks`` (one per process)."""

from __future__ import annotations

import gc
import time


class GcPauses:
    """Records every collection's duration in this process since the last reset. Wall time is what a waiting request
    experiences; the thread's CPU time is the collector's own work, and the two differ a lot on an oversubscribed
    machine."""

    def __init__(self) -> None:
        self.reset()
        self._t0 = 0.0
        self._c0 = 0.0
        # Since install, never reset, for counters such as Prometheus's.
        self.collections_total = 0
        self.pause_ms_total = 0.0
        self.max_ms_total = 0.0

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            self._c0 = time.thread_time()
        elif self._t0:
            ms = (time.perf_counter() - self._t0) * 1000
            self.pauses_ms.append(ms)
            self.collections_total += 1
            self.pause_ms_total += ms
            self.max_ms_total = max(self.max_ms_total, ms)
            self.cpu_ms.append((time.thread_time() - self._c0) * 1000)
            self.generations.append(info.get("generation", -1))
            self._t0 = 0.0

    def install(self) -> "GcPauses":
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)
        return self

    def reset(self) -> None:
        self.pauses_ms: list[float] = []
        self.generations: list[int] = []
        self.cpu_ms: list[float] = []

    def summary(self) -> dict:
        p = sorted(self.pauses_ms)
        if not p:
            return {"collections": 0, "max_ms": 0.0, "p99_ms": 0.0, "max_cpu_ms": 0.0, "max_generation": None}
        worst = max(range(len(self.pauses_ms)), key=self.pauses_ms.__getitem__)
        return {
            "collections": len(p),
            "max_ms": p[-1],
            "p99_ms": p[min(len(p) - 1, int(0.99 * len(p)))],
            "max_cpu_ms": max(self.cpu_ms),
            "max_generation": self.generations[worst],
            "per_generation": {g: self.generations.count(g) for g in sorted(set(self.generations))},
        }
