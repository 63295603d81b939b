#!/usr/bin/env python
"""How evenly ``Pipeline.stream``'s binding (pipeline/client/dispatch.py) spreads a benchmark
burst over 2 shards, simulated with the router's own estimates and no engine: each shard works
through the batches it is sent one after the other, a row taking the work the router charged
for it (``Route.cost``: the prefix tokens the shard lacks, the question, the decode), and a
batch comes back when its last row is done; then the rows waiting are bound as the client binds
them. Prints, per burst seed, the rows per shard and how far apart the shards finish (as a
share of the later one's time) for a static split (every row bound up front, the bench's
``standalone-routed``), late binding, and late binding without its end rule (the last rows
bound only as a shard has room, what it did before):

    .venv/bin/python scripts/binding_sim.py [--burst skewed] [--seeds 6] [--first-seed 0]

The bursts are the bench's: its pair p of the b-th burst named in ``--bursts`` is seed 1000 b + p.
"""
from __future__ import annotations

import argparse
import heapq

from pipeline.bench.options import BenchOptions, burst_rows
from pipeline.client.dispatch import Dispatcher
from pipeline.client.router import Prefix, PrefixRouter
from pipeline.client.tokenizer import load_tokenizer
from pipeline.config import load_config
from pipeline.model import model_for
from tasks import get_task_kind

SHARDS = ("cpu0", "cpu1")
BLOCK = 32             # the CPU engines' KV block size
KV_TOKENS = 46_592     # a 1 GiB CPU shard's KV cache, in tokens (1,456 blocks of 32)


def simulate(parts, infos, config, late: bool, end_rule: bool = True) -> tuple[dict, dict]:
    """(rows per shard, finish time per shard) for one burst."""
    r, intake = config.routing, config.intake
    router = PrefixRouter(list(SHARDS), BLOCK, r.max_blocks, r.decode_weight, r.min_match,
                          r.imbalance_abs, r.imbalance_ratio)
    d = Dispatcher(router, intake.batch_size, intake.queue_per_shard, decode_tokens=config.sampling.max_tokens,
                   late_binding=late, token_budget={s: intake.kv_budget_share * KV_TOKENS for s in SHARDS})
    for i, p in enumerate(parts):
        d.add(i, p.prefix, p.suffix, infos[p.prefix])
    d.input_ended = end_rule   # every row of the burst is read before the first is bound
    clock = dict.fromkeys(SHARDS, 0.0)
    rows = dict.fromkeys(SHARDS, 0)
    done: list = []   # (time, shard, row indices) of the batches sent

    def send(bound, now):
        for shard, groups in bound:
            idx = [i for items in groups.values() for i, _ in items]
            clock[shard] = max(clock[shard], now) + sum(d.routes[i].cost for i in idx)
            rows[shard] += len(idx)
            heapq.heappush(done, (clock[shard], shard, idx))

    send(d.bind(), 0.0)
    while done:
        t, _, idx = heapq.heappop(done)
        d.completed(idx)
        send(d.bind(), t)
    return rows, clock


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--burst", default="skewed", choices=("reuse", "skewed", "no_reuse"))
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--first-seed", type=int, default=0)
    args = ap.parse_args()
    config = load_config()
    tokenizer = load_tokenizer(model_for(config, "vllm"))
    task = get_task_kind(config, tokenizer)
    contenders = (("static", dict(late=False)), ("late", dict(late=True)),
                  ("late, no end rule", dict(late=True, end_rule=False)))
    print(f"{args.burst} burst, 2 shards; per seed: rows per shard, finish spread / later finish")
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        parts = [task.split(row) for row in burst_rows(args.burst, BenchOptions(), seed)]
        infos = {}
        for p in parts:
            if p.prefix not in infos:
                infos[p.prefix] = Prefix.of(tokenizer.encode(p.prefix, add_special_tokens=False), BLOCK)
        cells = []
        for name, kw in contenders:
            rows, clock = simulate(parts, infos, config, **kw)
            spread = (max(clock.values()) - min(clock.values())) / max(clock.values())
            cells.append(f"{name}: {'/'.join(str(rows[s]) for s in SHARDS)} {spread:6.1%}")
        print(f"seed {seed}: " + " | ".join(cells))


if __name__ == "__main__":
    main()
