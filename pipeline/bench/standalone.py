"""Standalone vLLM, the benchmark's reference: plain ``vllm.LLM`` as a user runs it, one
process per shard, no Dask and no pipeline code in the request path -- what vLLM's own
offline data-parallel example does.

Each process is started with ``subprocess`` from a clean environment: the user's (the
benchmark's environment as it was before any cluster started) plus the shard's variables
(pin, KV space, compile settings), never a copy of a driver process that Dask's nannies
have written into. It gets the same engine arguments and sampling as the pipeline's
workers, and talks to the benchmark over a loopback socket.

Protocol: ``load`` (prompts as token ids, texts, or (token ids, LoRA adapter folder)),
``reset`` (empty the prefix cache), ``go``
(generate them all; for a config of task embed embed them all with ``LLM.embed``; for task
classify or score read the labels' log-probabilities, one step each, as the pipeline's workers do;
reply with the outputs), ``stop``.
"""

from __future__ import annotations

import multiprocessing.connection as mpc
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from pipeline.config import Config
from pipeline.names import SHARD_ENV
from pipeline.worker.gcstats import GcPauses
from pipeline.worker.vllm_engine import (
    engine_kwargs,
    engine_settings,
    fitted_kwargs,
    label_params,
    read_labels,
    sampling_params,
)
from tasks import spec

# A prompt a standalone engine is given: its token ids; with an adapter, (token ids, the adapter's
# folder or None); or a text (to embed, as a user hands it to ``LLM.embed``)
Prompt = list[int] | tuple[list[int], str | None] | str


@dataclass
class Output:
    text: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    labels: list[float] | None = None  # task classify / score: each label's log-probability


def _serve(conn, model: str, config: Config) -> None:
    from vllm import LLM
    from vllm.inputs import TokensPrompt

    t0 = time.perf_counter()
    shard = config.shard(os.environ.get(SHARD_ENV))
    # (fitted to the model as the pipeline's engines are: an embedding model's shorter context)
    llm = LLM(**fitted_kwargs(engine_kwargs(model, config, shard)))
    task = spec(config.task)
    embeds = task.embeds
    sampling = sampling_params(config.sampling.as_sampling(config.engine.seed))
    label_ids = None
    if task.reads_labels:  # (each label's first token, as the workers read it)
        from tasks.classify import SCORE_LABELS

        tokenizer = llm.get_tokenizer()
        label_ids = [
            tokenizer.encode(label, add_special_tokens=False)[0] for label in config.prompt.labels or SCORE_LABELS
        ]
        sampling = label_params(label_ids)
    pauses = GcPauses().install()
    conn.send(("ready", time.perf_counter() - t0, engine_settings(llm.llm_engine.vllm_config)))
    prompts: list = []
    loras: list = []
    folders: dict[str, int] = {}  # adapter folder -> its lora_int_id
    while True:
        cmd, *args = conn.recv()
        if cmd == "load":
            # (token ids; or texts, which vLLM tokenizes, as a user's call hands it them; or
            # (token ids, adapter folder or None): each with its own LoRARequest)
            loras = [_lora(p[1], folders) if isinstance(p, tuple) else None for p in args[0]]
            prompts = [
                p if isinstance(p, str) else TokensPrompt(prompt_token_ids=p[0] if isinstance(p, tuple) else p)
                for p in args[0]
            ]
            conn.send(("ok",))
        elif cmd == "reset":
            llm.reset_prefix_cache()
            pauses.reset()
            conn.send(("ok",))
        elif cmd == "go":
            if embeds:
                embedded = llm.embed(prompts, use_tqdm=False) if prompts else []
                conn.send(("done", [("", len(o.prompt_token_ids), 0, 0) for o in embedded], pauses.summary()))
                continue
            lora = loras if any(x is not None for x in loras) else None
            outs = llm.generate(prompts, sampling, use_tqdm=False, lora_request=lora) if prompts else []
            # (vLLM types RequestOutput.prompt_token_ids Optional: LLM.generate's outputs for token prompts have them)
            conn.send(
                (
                    "done",
                    [
                        (
                            o.outputs[0].text,
                            len(o.prompt_token_ids),  # type: ignore[arg-type]
                            int(o.num_cached_tokens or 0),
                            len(o.outputs[0].token_ids),
                            read_labels(o.outputs[0], label_ids) if label_ids else None,
                        )
                        for o in outs
                    ],
                    pauses.summary(),
                )
            )
        elif cmd == "stop":
            # Without an explicit shutdown the engine-core process outlives this one.
            llm.llm_engine.engine_core.shutdown()
            conn.send(("ok",))
            return


def _lora(folder: str | None, folders: dict[str, int]):
    """vLLM's ``LoRARequest`` for an adapter folder (one id per folder), or None."""
    if folder is None:
        return None
    from vllm.lora.request import LoRARequest

    return LoRARequest(folder, folders.setdefault(folder, len(folders) + 1), folder)


def main() -> None:
    """The standalone process: ``python -c ... HOST PORT``; the auth key on stdin."""
    host, port = sys.argv[1], int(sys.argv[2])
    authkey = bytes.fromhex(sys.stdin.readline().strip())
    conn = mpc.Client((host, port), authkey=authkey)
    cmd, model, config = conn.recv()
    assert cmd == "init", cmd
    _serve(conn, model, config)


def _accept(listener, proc: subprocess.Popen, name: str, timeout_s: float = 120):
    """The connection of ``proc``, or a clear error if it exits or never connects."""
    box: list = []
    t = threading.Thread(target=lambda: box.append(listener.accept()), daemon=True)
    t.start()
    deadline = time.monotonic() + timeout_s
    while True:
        t.join(0.5)
        if box:
            return box[0]
        if proc.poll() is not None:
            raise RuntimeError(f"standalone engine {name} exited ({proc.returncode}) before connecting")
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError(f"standalone engine {name}: no connection within {timeout_s:.0f} s")


class StandaloneShards:
    """One standalone vLLM engine process per configured shard.

    ``environ``: the environment a user's shell would give them (default: this process's
    now); each process gets it plus its shard's ``worker_env()``, nothing else."""

    def __init__(self, config: Config, model: str, environ: dict[str, str] | None = None):
        base = dict(os.environ if environ is None else environ)
        self.shards = config.shard_names
        self._conns = {}
        self._procs: dict[str, subprocess.Popen] = {}
        authkey = secrets.token_bytes(16)
        # This package importable wherever the benchmark runs, without touching the environment.
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        code = f"import sys; sys.path.insert(0, {root!r}); from pipeline.bench.standalone import main; main()"
        with mpc.Listener(("127.0.0.1", 0), authkey=authkey) as listener:
            host, port = listener.address
            for shard in config.shards:
                env = {**base, **shard.worker_env()}
                proc = subprocess.Popen(
                    [sys.executable, "-c", code, host, str(port)], env=env, stdin=subprocess.PIPE, text=True
                )
                assert proc.stdin is not None  # (stdin=PIPE)
                proc.stdin.write(authkey.hex() + "\n")
                proc.stdin.close()
                self._procs[shard.name] = proc
                conn = _accept(listener, proc, shard.name)  # one at a time, in start order
                conn.send(("init", model, config))
                self._conns[shard.name] = conn
        ready = {name: self._expect(name, "ready") for name in self.shards}
        self.start_s = {name: r[0] for name, r in ready.items()}
        self.settings = {name: r[1] for name, r in ready.items()}  # each engine's (engine_settings)

    @property
    def pids(self) -> set[int]:
        return {p.pid for p in self._procs.values()}

    def pid_of(self, shard: str) -> int:
        return self._procs[shard].pid

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

    def run(
        self, assignment: Mapping[str, Sequence[Prompt]]
    ) -> tuple[float, dict[str, float], dict[str, list[Output]], dict]:
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
            ready = mpc.wait([self._conns[n] for n in pending])
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
        for proc in self._procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> "StandaloneShards":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
