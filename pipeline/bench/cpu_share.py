"""CPU used during a benchmark run, by process role: which processes got the cores.

On a box where engines and everything else share a few cores, a contender's throughput is
set by how much CPU its engines get. ``Roles`` sorts this process's descendants into the
standalone side (descendants of the given pids) and the pipeline side (everything else
below this process: nannies, Dask workers, their engines), each split into ``engine``
(processes vLLM names ``VLLM::...``: engine core and model runner) and ``other`` (frontends:
Dask workers and nannies, standalone driver processes); this process (client and embedded
scheduler) is ``driver``. ``cores_used`` turns two snapshots into cores per role.
"""

from __future__ import annotations

import psutil

ROLES = ("pipeline engine", "pipeline other", "standalone engine", "standalone other", "driver")


class Roles:
    def __init__(self, standalone_pids: set[int]):
        self.standalone_pids = set(standalone_pids)
        self.me = psutil.Process()

    def snapshot(self) -> dict[int, tuple[str, float, int]]:
        """pid -> (role, CPU seconds so far, minor page faults so far) for this process and
        its descendants."""
        out = {}
        for p in [self.me, *self.me.children(recursive=True)]:
            try:
                t = p.cpu_times()
                role = self._role(p)
            except psutil.Error:  # gone meanwhile
                continue
            out[p.pid] = (role, t.user + t.system, _minor_faults(p.pid))
        return out

    def _role(self, p: psutil.Process) -> str:
        if p.pid == self.me.pid:
            return "driver"
        lineage = {p.pid, *(a.pid for a in p.parents())}
        side = "standalone" if lineage & self.standalone_pids else "pipeline"
        return f"{side} {'engine' if p.name().startswith('VLLM') else 'other'}"


def _minor_faults(pid: int) -> int:
    """Minor page faults of a process so far (/proc/<pid>/stat, field 10): each first touch of
    a freshly mapped page. A process whose allocator maps and unmaps its large buffers at every
    step (glibc with MALLOC_TRIM_THRESHOLD_ set) takes them by the million."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[7])
    except (OSError, ValueError, IndexError):
        return 0


def _per_role(before: dict, after: dict, field: int) -> dict[str, float]:
    total: dict[str, float] = {}
    for pid, snap in after.items():
        role, now = snap[0], snap[field]
        start = before[pid][field] if pid in before else 0
        total[role] = total.get(role, 0) + max(0, now - start)
    return dict(sorted(total.items()))


def cores_used(before: dict, after: dict, wall_s: float) -> dict[str, float]:
    """Cores per role between two snapshots (a process that started in between counts from 0)."""
    return {role: cpu / wall_s for role, cpu in _per_role(before, after, 1).items()}


def minor_faults(before: dict, after: dict) -> dict[str, int]:
    """Minor page faults per role between two snapshots."""
    return {role: int(n) for role, n in _per_role(before, after, 2).items()}
