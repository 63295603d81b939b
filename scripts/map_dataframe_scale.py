#!/usr/bin/env python
"""A large Dask DataFrame through ``Pipeline.map_dataframe`` with the fake engine: rows/s and
the answers' check. Compare with the same rows through ``python -m pipeline run``:

    .venv/bin/python scripts/scale_input.py /tmp/in.parquet --rows 1000000
    /usr/bin/time -v .venv/bin/python scripts/map_dataframe_scale.py /tmp/in.parquet
    /usr/bin/time -v .venv/bin/python -m pipeline run /tmp/in.parquet /tmp/out.parquet --engine fake --quiet

(``time -v``'s figures cover the workers too; this script prints the client's own CPU seconds
during the call and its peak RSS). The DataFrame is read with one partition per
Parquet row group; the answers stay in the cluster's memory and only their error count comes
back.
"""

from __future__ import annotations

import argparse
import resource
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("--config", default=None)
    a = p.parse_args()

    import dask.dataframe as dd
    import psutil

    from pipeline import Pipeline, load_config

    config = load_config(a.config)
    ddf = dd.read_parquet(a.input, split_row_groups=True)
    with Pipeline(config, engine="fake") as pipeline:
        me = psutil.Process()
        cpu0, t0 = sum(me.cpu_times()[:2]), time.perf_counter()
        answers = pipeline.map_dataframe(ddf)
        seconds, cpu = time.perf_counter() - t0, sum(me.cpu_times()[:2]) - cpu0
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rows = int(answers["shard"].count().compute())  # (the answers' own count, not the input's)
        print(
            f"map_dataframe: {rows} rows in {seconds:.1f} s: {rows / seconds:,.0f} rows/s; "
            f"{ddf.npartitions} partitions; client {cpu:.1f} s CPU in the call, peak RSS {peak_mb:.0f} MB",
            flush=True,
        )
        print(f"rows with an error: {int(answers['error'].count().compute())} of {rows} answered")


if __name__ == "__main__":
    main()
