"""The benchmark's CPU-by-role accounting (pipeline/bench/cpu_share.py)."""

import subprocess
import sys
import time

from pipeline.bench.cpu_share import Roles, cores_used

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\ntime.sleep(30)"


def test_cpu_of_each_child_lands_in_its_side():
    standalone = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.6)])
    other = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.3)])
    try:
        roles = Roles({standalone.pid})
        before = roles.snapshot()
        assert before[standalone.pid][0] == "standalone other" and before[other.pid][0] == "pipeline other"
        time.sleep(2.0)  # both burn their CPU, then sleep
        wall = 2.0
        used = cores_used(before, roles.snapshot(), wall)
        # each child's CPU since the first snapshot (start-up counted before it is not)
        assert 0.15 <= used["standalone other"] * wall <= 0.75, used
        assert 0.05 <= used["pipeline other"] * wall <= 0.45, used
        assert used["standalone other"] > used["pipeline other"]
    finally:
        standalone.kill()
        other.kill()


def test_every_role_a_process_can_get_is_one_the_report_shows():
    from pipeline.bench.cpu_share import ROLES

    roles = Roles(set())
    assert roles._role(roles.me) in ROLES
    assert {f"{side} {kind}" for side in ("pipeline", "standalone") for kind in ("engine", "other")} <= set(ROLES)


def test_minor_faults_count_pages_a_child_touches():
    from pipeline.bench.cpu_share import minor_faults

    touch = "import time\ntime.sleep(0.5)\nb = bytearray(64 * 2**20)\nb[::4096] = b'x' * len(b[::4096])\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", touch])
    try:
        roles = Roles(set())
        before = roles.snapshot()
        time.sleep(2.0)
        faults = minor_faults(before, roles.snapshot())
        assert faults["pipeline other"] >= 64 * 2**20 // 4096 * 0.9, faults  # 16,384 pages of 4 KiB
    finally:
        child.kill()
