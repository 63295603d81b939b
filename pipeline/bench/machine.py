"""The machine a bench ran on, for its report: CPU, cores, memory, Python, platform and the
versions of vLLM, torch and Dask."""

from __future__ import annotations

import os
import platform


def machine_description() -> dict:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            mem_gib = round(int(next(ln for ln in f if ln.startswith("MemTotal")).split()[1]) / 2**20, 1)
    except (OSError, StopIteration):
        pass
    versions = {}
    for mod in ("vllm", "torch", "dask", "distributed"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing package is just not reported
            pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
        **versions,
    }
