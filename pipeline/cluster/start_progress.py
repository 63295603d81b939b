"""Show the engines starting while a client waits: a line per shard once ready, and on a terminal a
live line with each shard's time so far."""

from __future__ import annotations

import re
import threading
import time
from typing import Callable

from distributed import Client

from pipeline.worker.queries import engine_phase


class StartProgress:
    def __init__(self, client: Client, shards: list[str], notify: Callable[[str], None], live: Callable | None):
        self.client, self.shards, self.notify, self.live = client, shards, notify, live
        self.reported: dict[str, str] = {}  # shard -> the final phase it was reported in
        self.errors: dict[str, str] = {}  # shard -> why its engine did not start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pipeline-start-progress", daemon=True)
        self._t0 = time.time()
        self._shown = False  # a live line is on the terminal

    def __enter__(self) -> "StartProgress":
        self.poll(initial=True)  # engines that run already are not announced
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.poll()  # engines that finished meanwhile
        if self.live is not None and self._shown:
            self.live("")

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - progress only; the start itself reports errors
                pass

    def poll(self, initial: bool = False) -> None:
        phases = {
            p["shard"]: p
            for p in self.client.run(engine_phase, on_error="return").values()
            if isinstance(p, dict) and p.get("shard")
        }
        now = time.time()
        waiting = []
        for shard in self.shards:
            p = phases.get(shard)
            if p is None or p["phase"] in ("waiting", "starting"):
                since = p["since"] if p and p["phase"] == "starting" else None
                waiting.append(f"{shard} {now - (since or self._t0):.0f} s")
            elif shard not in self.reported and p["phase"] in ("ready", "failed"):
                self.reported[shard] = p["phase"]
                if p["phase"] == "failed":  # said once, by the caller, for every failed shard
                    self.errors[shard] = p.get("error") or "unknown error"
                elif not initial:
                    if self._shown and self.live is not None:  # the line goes above the live one
                        self.live("")
                    self.notify(f"shard {shard}: engine ready in {p['start_s']:.1f} s (worker pid {p['pid']})")
        if self.live is not None and waiting and not initial:
            self._shown = True
            self.live("starting engines: " + ", ".join(waiting))


def one_line(error: str, limit: int = 300) -> str:
    """An engine's start error as one short line, without the pydantic boilerplate of vLLM's argument checks."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    text = " ".join(line for line in lines if not line.startswith("For further information visit"))
    text = re.sub(r"\d+ validation errors? for \w+\s*", "", text)
    text = re.sub(r"\s*\[type=[^\]]*\]", "", text).replace("Value error, ", "")
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
