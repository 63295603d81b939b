"""Real network hosts for tests, made as Linux network namespaces joined by one bridge.

Each host is a namespace with a veth link to a bridge that lives in a namespace of its own, so
the machine's own (root) namespace never gains an address or a route and traffic only goes
between namespaces the test made. A host's link can be cut, healed and rate-shaped (tbf, both
directions) while the processes inside keep running. Test modules use it with
``from helpers.netns import netns_hosts`` (pytest puts tests/unit on sys.path).
"""

import atexit
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

IP = "ip"  # the iproute2 command; a test swaps it to see the rig refuse cleanly
TC = "tc"
PREFIX = "plt"  # every namespace of this rig is named plt{pid}x{rig}{h<i>|br}
_STALE = re.compile(rf"^{PREFIX}(\d+)x\d+(?:h\d+|br)$")
_counter = itertools.count()
_open: set["Rig"] = set()
_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


class RigUnavailable(Exception):
    """Network namespaces cannot be made on this machine (not root, no iproute2, EPERM...)."""


def _cmd(args: list[str], check: bool = True) -> subprocess.CompletedProcess:
    """Runs an iproute2 command; a failure says which command and what it printed, since that
    is what explains why the rig cannot be made."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise RigUnavailable(f"`{args[0]}` not found") from None
    if check and done.returncode != 0:
        raise RigUnavailable(f"`{' '.join(args)}` failed: {done.stderr.strip() or done.returncode}")
    return done


def _tbf_burst(rate: str) -> str:
    """A bucket of 20 ms at the rate (at least 16 KiB): small enough that a few megabytes feel
    the rate, big enough that TCP runs smoothly at it."""
    m = re.fullmatch(r"([\d.]+)\s*([a-z]+)", rate.strip().lower())
    if not m or m.group(2) not in _RATE_UNITS:
        raise ValueError(f"rate {rate!r}: want a number and one of {sorted(_RATE_UNITS)}")
    return str(max(int(float(m.group(1)) * _RATE_UNITS[m.group(2)] / 8 / 50), 16384))


class Host:
    """One namespace host with one link (eth0 inside it, ``port`` on the bridge side)."""

    def __init__(self, name: str, ns: str, address: str, bridge_ns: str, port: str):
        self.name, self.ns, self.address = name, ns, address
        self._bridge_ns, self._port = bridge_ns, port

    def __repr__(self) -> str:
        return f"Host({self.name}, ns={self.ns}, address={self.address})"

    def popen(self, args: list[str], **kw) -> subprocess.Popen:
        """Starts args inside the namespace; ip netns exec execs it, so the Popen is the process."""
        return subprocess.Popen([IP, "netns", "exec", self.ns, *map(str, args)], **kw)

    def run(self, args: list[str], **kw) -> subprocess.CompletedProcess:
        """Runs args inside the namespace and waits (check=False unless given)."""
        kw.setdefault("check", False)
        return subprocess.run([IP, "netns", "exec", self.ns, *map(str, args)], **kw)

    def _ends(self) -> list[tuple[str, str]]:
        return [(self.ns, "eth0"), (self._bridge_ns, self._port)]

    def cut(self) -> None:
        """Takes the link down at both ends; the host's processes keep running, unreachable."""
        for ns, dev in self._ends():
            _cmd([IP, "-n", ns, "link", "set", dev, "down"])

    def heal(self) -> None:
        """Brings the link back up at both ends."""
        for ns, dev in self._ends():
            _cmd([IP, "-n", ns, "link", "set", dev, "up"])

    def shape(self, rate: str | None) -> None:
        """Limits the link to rate each way (tbf on the egress of both veth ends); None removes it."""
        for ns, dev in self._ends():
            if rate is None:
                _cmd([TC, "-n", ns, "qdisc", "del", "dev", dev, "root"], check=False)
            else:
                _cmd(
                    [
                        TC,
                        "-n",
                        ns,
                        "qdisc",
                        "replace",
                        "dev",
                        dev,
                        "root",
                        "tbf",
                        "rate",
                        rate,
                        "burst",
                        _tbf_burst(rate),
                        "latency",
                        "100ms",
                    ]
                )

    def link_bytes(self) -> tuple[int, int]:
        """(rx_bytes, tx_bytes) of eth0 as the host sees it."""
        stats = json.loads(_cmd([IP, "-n", self.ns, "-s", "-j", "link", "show", "eth0"]).stdout)
        counts = stats[0]["stats64"]
        return counts["rx"]["bytes"], counts["tx"]["bytes"]

    def can_reach(self, other: "Host", port: int, timeout: float = 1.0) -> bool:
        """Whether a TCP connect from inside this host to other.address:port succeeds in time."""
        code = (
            "import socket,sys\ntry: socket.create_connection((sys.argv[1], int(sys.argv[2])), "
            "float(sys.argv[3])).close()\nexcept OSError: sys.exit(1)"
        )
        try:
            done = self.run(
                [sys.executable, "-c", code, other.address, str(port), str(timeout)],
                capture_output=True,
                timeout=timeout + 10,
            )
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0


class Rig:
    """The hosts of one rig plus its bridge namespace; close() leaves nothing behind."""

    def __init__(self, tag: str, subnet: int):
        self.tag, self.subnet = tag, subnet
        self.bridge_ns = f"{tag}br"
        self.hosts: list[Host] = []
        self._namespaces: list[str] = []
        self.closed = False
        _open.add(self)

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]

    def __len__(self) -> int:
        return len(self.hosts)

    def _build(self, n: int) -> None:
        _add_namespace(self, self.bridge_ns)
        _cmd([IP, "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge"])
        _cmd([IP, "-n", self.bridge_ns, "link", "set", "br0", "up"])
        for i in range(n):
            host = Host(f"h{i}", f"{self.tag}h{i}", f"10.213.{self.subnet}.{i + 1}", self.bridge_ns, f"v{i}")
            _add_namespace(self, host.ns)
            # Made inside the bridge namespace, its peer moved straight to the host's: never in root.
            _cmd(
                [
                    IP,
                    "-n",
                    self.bridge_ns,
                    "link",
                    "add",
                    host._port,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    host.ns,
                ]
            )
            _cmd([IP, "-n", self.bridge_ns, "link", "set", host._port, "master", "br0", "up"])
            _cmd([IP, "-n", host.ns, "addr", "add", f"{host.address}/24", "dev", "eth0"])
            _cmd([IP, "-n", host.ns, "link", "set", "eth0", "up"])
            _cmd([IP, "-n", host.ns, "link", "set", "lo", "up"])
            self.hosts.append(host)

    def close(self) -> None:
        """Kills every process left in the rig's namespaces, then deletes them; safe to repeat."""
        if self.closed:
            return
        for ns in self._namespaces:
            _remove_namespace(ns)
        self.closed = True
        _open.discard(self)


def _add_namespace(rig: Rig, ns: str) -> None:
    _cmd([IP, "netns", "add", ns])
    rig._namespaces.append(ns)


def _remove_namespace(ns: str) -> None:
    """SIGKILLs the namespace's processes until none is left (a namespace outlives its name while
    a process holds it), then deletes the name."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pids = [int(p) for p in _cmd([IP, "netns", "pids", ns], check=False).stdout.split()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    _cmd([IP, "netns", "del", ns], check=False)


def _remove_stale() -> None:
    """Deletes namespaces of this rig left by an earlier run whose process no longer exists."""
    for line in _cmd([IP, "netns", "list"], check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _STALE.match(name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            _remove_namespace(name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def make_rig(n: int) -> Rig:
    """n hosts h0..h{n-1} at 10.213.X.1.., X new per rig; RigUnavailable says why it cannot be."""
    _remove_stale()
    k = next(_counter)
    rig = Rig(f"{PREFIX}{os.getpid()}x{k}", (os.getpid() + k) % 254 + 1)
    try:
        rig._build(n)
    except BaseException:
        rig.close()
        raise
    return rig


def rig_or_skip(n: int) -> Rig:
    """make_rig, or a skip that says why namespaces cannot be made here."""
    try:
        return make_rig(n)
    except RigUnavailable as e:
        pytest.skip(f"network namespaces cannot be made here: {e}")


@pytest.fixture
def netns_hosts():
    """make(n) -> Rig (skipping where namespaces cannot be made); every rig is closed at teardown."""
    rigs: list[Rig] = []

    def make(n: int) -> Rig:
        rigs.append(rig_or_skip(n))
        return rigs[-1]

    yield make
    for rig in rigs:
        rig.close()


@atexit.register
def _close_all() -> None:
    for rig in list(_open):
        rig.close()
