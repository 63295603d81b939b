"""Standalone vLLM, the benchmark's reference: one plain ``vllm.LLM`` process per shard,
no Dask, no pipeline code in the request path -- what vLLM's own offline data-parallel
example does. Each process gets the shard's pinning environment and the same engine
arguments and sampling as the pipeline's workers.

Protocol over a pipe: ``load`` (prompts as token ids), ``reset`` (empty the prefix
cache), ``go`` (generate them all, reply with the outputs), ``stop``.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass

from pipeline.config import Config


@dataclass
class Output:
    text: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int


def _serve(conn, env: dict, model: str, config: Config) -> None:
    os.environ.update(env)
    from vllm import LLM
    from vllm.inputs import TokensPrompt

    from pipeline.engine import engine_kwargs, sampling_params
    from pipeline.gcstats import GcPauses

    t0 = time.perf_counter()
    llm = LLM(**engine_kwargs(model, config))
    sampling = sampling_params(config)
    pauses = GcPauses().install()
    conn.send(("ready", time.perf_counter() - t0))
    prompts: list = []
    while True:
        cmd, *args = conn.recv()
        if cmd == "load":
            prompts = [TokensPrompt(prompt_token_ids=p) for p in args[0]]
            conn.send(("ok",))
        elif cmd == "reset":
            llm.reset_prefix_cache()
            pauses.reset()
            conn.send(("ok",))
        elif cmd == "go":
            outs = llm.generate(prompts, sampling, use_tqdm=False) if prompts else []
            conn.send(("done", [(o.outputs[0].text, len(o.prompt_token_ids), int(o.num_cached_tokens or 0),
                                 len(o.outputs[0].token_ids)) for o in outs], pauses.summary()))
        elif cmd == "stop":
            # Without an explicit shutdown the engine-core process outlives this one.
            llm.llm_engine.engine_core.shutdown()
            conn.send(("ok",))
            return


class StandaloneShards:
    """One standalone vLLM engine process per configured shard."""

    def __init__(self, config: Config, model: str):
        ctx = mp.get_context("spawn")
        self.shards = config.shard_names
        self._conns = {}
        self._procs = []
        for shard in config.shards:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(child, shard.worker_env(), model, config),
                               name=f"standalone-{shard.name}", daemon=False)
            proc.start()
            self._conns[shard.name] = parent
            self._procs.append(proc)
        self.start_s = {name: self._expect(name, "ready")[0] for name in self.shards}

    @property
    def pids(self) -> set[int]:
        return {p.pid for p in self._procs}

    def _expect(self, name: str, what: str, timeout: float = 1800):
        conn = self._conns[name]
        if not conn.poll(timeout):
            raise TimeoutError(f"standalone engine {name}: no '{what}' within {timeout} s")
        try:
            msg = conn.recv()
        except EOFError:
            raise RuntimeError(f"standalone engine {name} died (see its log above)") from None
        if msg[0] != what:
            raise RuntimeError(f"standalone engine {name}: expected {what}, got {msg[0]}")
        return msg[1:]

    def reset_cache(self) -> None:
        for name in self.shards:
            self._conns[name].send(("reset",))
        for name in self.shards:
            self._expect(name, "ok")

    def run(self, assignment: dict[str, list[list[int]]]) -> tuple[float, dict[str, float], dict[str, list[Output]], dict]:
        """Load each shard's prompts, then start all at once; the clock covers generation only.

        Returns (wall seconds, finish time per shard, outputs per shard, GC summary per shard)."""
        for name in self.shards:
            self._conns[name].send(("load", assignment.get(name, [])))
        for name in self.shards:
            self._expect(name, "ok")
        t0 = time.perf_counter()
        for name in self.shards:
            self._conns[name].send(("go",))
        outputs, finish, gc = {}, {}, {}
        pending = set(self.shards)
        while pending:
            ready = mp.connection.wait([self._conns[n] for n in pending])
            for name in [n for n in pending if self._conns[n] in ready]:
                raw, gc[name] = self._expect(name, "done")
                finish[name] = time.perf_counter() - t0
                outputs[name] = [Output(*o) for o in raw]
                pending.discard(name)
        return time.perf_counter() - t0, finish, outputs, gc

    def close(self) -> None:
        for name, conn in self._conns.items():
            try:
                conn.send(("stop",))
                self._expect(name, "ok", timeout=60)
            except (OSError, EOFError, RuntimeError, TimeoutError):
                pass
        for proc in self._procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()

    def __enter__(self) -> "StandaloneShards":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
