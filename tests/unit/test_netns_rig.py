"""The network-namespace rig (tests/unit/helpers/netns.py) makes real hosts: each has its own
address and reaches the others over TCP, a cut host is unreachable while its processes live on
and is reachable again once healed, a shaped link runs at its rate, close() leaves no namespace
or process behind, and the root namespace never gains an address. Skipped where namespaces
cannot be made (not root, no iproute2)."""

import json
import subprocess
import sys
import time

import pytest

from helpers import netns
from helpers.netns import RigUnavailable, make_rig, netns_hosts, rig_or_skip  # noqa: F401

PORT = 7000

# Echo mode answers each connection with what it sent; sink mode reads to EOF, then answers
# with the number of bytes it read.
SERVER = """
import socket, sys, threading
mode, s = sys.argv[1], socket.create_server((sys.argv[2], int(sys.argv[3])))
print("ready", flush=True)
def serve(c):
    with c:
        if mode == "echo":
            while data := c.recv(65536):
                c.sendall(data)
        else:
            n = 0
            while data := c.recv(1 << 20):
                n += len(data)
            c.sendall(str(n).encode())
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"""

# Sends argv[3] bytes (or a greeting), half-closes, prints the answer and the seconds it took.
CLIENT = """
import socket, sys, time
t0 = time.perf_counter()
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)
c.settimeout(30)
c.sendall(b"x" * int(sys.argv[3]) if len(sys.argv) > 3 else b"hello")
c.shutdown(socket.SHUT_WR)
answer = b""
while data := c.recv(65536):
    answer += data
print(answer.decode(), time.perf_counter() - t0)
"""


def serve(host, mode: str = "echo") -> subprocess.Popen:
    server = host.popen([sys.executable, "-c", SERVER, mode, host.address, PORT], stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "ready"
    return server


def send(src, dst, nbytes: int | None = None) -> tuple[str, float]:
    args = [sys.executable, "-c", CLIENT, dst.address, PORT, *([nbytes] if nbytes else [])]
    done = src.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    answer, seconds = done.stdout.rsplit(maxsplit=1)
    return answer, float(seconds)


def root_addresses() -> set[tuple[str, str]]:
    links = json.loads(subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True).stdout)
    return {(link["ifname"], a["local"]) for link in links for a in link.get("addr_info", [])}


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_hosts_have_own_addresses_and_reach_each_other_without_touching_root(netns_hosts):
    before = root_addresses()
    rig = netns_hosts(3)
    h0, h1, h2 = rig.hosts
    assert len({h.address for h in rig.hosts}) == 3 and len({h.ns for h in rig.hosts}) == 3
    assert all(h.address.startswith("10.213.") for h in rig.hosts)
    serve(h0)
    assert h1.can_reach(h0, PORT) and h2.can_reach(h0, PORT)
    assert send(h1, h0)[0] == "hello" and send(h2, h0)[0] == "hello"
    after = root_addresses()
    assert after == before
    assert not [a for _, a in after if a.startswith("10.213.")]


def test_two_rigs_get_different_subnets(netns_hosts):
    a, b = netns_hosts(1), netns_hosts(1)
    assert a[0].address.rsplit(".", 1)[0] != b[0].address.rsplit(".", 1)[0]
    assert a[0].ns != b[0].ns


def test_cut_host_is_unreachable_while_its_processes_live_and_heals(netns_hosts):
    h0, h1, h2 = netns_hosts(3).hosts
    serve(h0)
    sleeper = h1.popen(["sleep", "60"])
    assert h1.can_reach(h0, PORT)
    h1.cut()
    t0 = time.monotonic()
    assert not h1.can_reach(h0, PORT, timeout=1.0)
    assert time.monotonic() - t0 < 5
    assert h2.can_reach(h0, PORT)
    assert sleeper.poll() is None
    h1.heal()
    deadline = time.monotonic() + 5
    while not h1.can_reach(h0, PORT):
        assert time.monotonic() < deadline, "h1 did not reach h0 again within 5 s of heal()"
    assert sleeper.poll() is None


def test_shaped_link_runs_at_its_rate_and_counts_bytes(netns_hosts):
    h0, h1 = netns_hosts(2).hosts
    serve(h0, "sink")
    size = 2_500_000
    answer, fast = send(h1, h0, size)
    assert int(answer) == size and fast < 1.0
    h1.shape("10mbit")
    rx0, tx0 = h1.link_bytes()
    answer, slow = send(h1, h0, size)
    rx1, tx1 = h1.link_bytes()
    assert int(answer) == size
    assert slow >= 1.6, f"2.5 MB over a 10mbit link took only {slow:.2f} s"
    assert tx1 - tx0 >= size and rx1 > rx0
    h1.shape(None)
    assert send(h1, h0, size)[1] < 1.0


def test_close_kills_processes_and_deletes_namespaces():
    rig = rig_or_skip(2)
    names = {rig.bridge_ns, *(h.ns for h in rig.hosts)}
    assert names <= namespaces()
    sleepers = [h.popen(["sleep", "60"]) for h in rig.hosts]
    rig.close()
    assert not names & namespaces()
    for sleeper in sleepers:
        assert sleeper.wait(timeout=5) == -9
    rig.close()


def test_stale_namespaces_of_a_dead_run_are_removed():
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"{netns.PREFIX}{dead.pid}x0h0"
    if subprocess.run(["ip", "netns", "add", stale], capture_output=True).returncode != 0:
        pytest.skip("network namespaces cannot be made here")
    rig_or_skip(1).close()
    assert stale not in namespaces()


def test_missing_ip_is_reported_and_skipped(monkeypatch):
    monkeypatch.setattr(netns, "IP", "/nonexistent/ip")
    with pytest.raises(RigUnavailable, match="`/nonexistent/ip` not found"):
        make_rig(2)
    with pytest.raises(pytest.skip.Exception, match="network namespaces cannot be made here: `/nonexistent/ip`"):
        rig_or_skip(2)
