"""A delayed network path between a lab's storage client and its servers, for storages
without a delay of their own (CephFS, OpenAFS; GlusterFS has its brick's delay-gen).

This kernel has no netem, so the path is made of what it has: a network namespace of the
lab's own (`ip netns add statstorm-NAME`) where only the storage's client runs, two TUN
devices (one in the host, one in the namespace, a /30 of 172.29.83.0/24 between them) and
the relay (adapters/host/delay_relay.py), a process of its own that writes each packet read
from one device to the other half the delay later, both ways: one round trip pays the delay
once, as a GlusterFS brick's delay-gen makes each call pay it once.

The client is started with `nsenter --net=/run/netns/NS`, which changes its network namespace
only: its FUSE mount is made in the host's mount namespace, where php-fpm and the web server
see it. The path is recorded in `<lab dir>/delay-path.json` before each thing it makes
exists (the namespace, the relay's PID), so `lab down` — or the cleanup after a failed or
interrupted `up` — removes all of it: the relay ended (its TUN devices go with it), the
namespace deleted.

Two labs made at once must not take the same /30: the pick of a free one (the addresses and
routes the machine has now) and its claim (the addresses added to the devices) are made under
one lock, an fcntl lock on `/run/statstorm/delay-path.lock` that the next lab's pick waits for
(`picking`); once the addresses are on the devices, the next pick sees them.
"""

from __future__ import annotations

import dataclasses
import fcntl
import ipaddress
import json
import os
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from statstorm.adapters.host import delay_relay, procs
from statstorm.env import Env
from statstorm.errors import BusyError, ComponentError, DependencyError
from statstorm.results.common import write_json_atomic

RECORD = "delay-path.json"  # in the lab's directory
CONTROL = "delay-path.control"  # the relay's one-way delay (µs), read on SIGHUP
LOG = "delay-relay.out"
NETNS_DIR = Path("/run/netns")
NETNS_PREFIX = "statstorm-"
RANGE = ipaddress.IPv4Network("172.29.83.0/24")  # private; one /30 per delayed lab
RELAY = Path(delay_relay.__file__)
MTU = 65000  # large segments: fewer packets for the relay to move
QUEUE_LEN = 10000  # the TUN devices' queues: no drop while the relay is busy
READY_S = 10.0
LOCK = Path("/run/statstorm/delay-path.lock")  # held from a /30's pick to its claim


@dataclass(frozen=True)
class DelayPath:
    """One lab's delayed path: the namespace its client runs in and the two ends."""

    netns: str
    host_dev: str
    ns_dev: str
    host_address: str  # the host's end: the servers' address as the client reaches them
    ns_address: str  # the client's own address
    delay_us: int  # what one round trip pays (half each way) once the lab is up
    relay_pid: int = 0
    in_effect_us: int = 0  # what it pays now (0 while `lab up` copies the app in)

    @property
    def netns_file(self) -> Path:
        return NETNS_DIR / self.netns

    def enter(self) -> tuple[str, ...]:
        """The prefix that runs a command in the namespace, in the host's mount namespace."""
        return ("nsenter", f"--net={self.netns_file}", "--")

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> DelayPath:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})  # type: ignore[arg-type]


def require() -> None:
    """What the path needs on this machine (checked before a lab starts)."""
    if not Path("/dev/net/tun").exists():
        raise DependencyError("/dev/net/tun is missing: load the tun module (`modprobe tun`) "
                              "for --storage-delay on this storage")
    for tool in ("/usr/bin/nsenter", "/usr/sbin/ip"):
        if not Path(tool).exists() and not Path("/bin", Path(tool).name).exists():
            raise DependencyError(f"{tool} is missing: install util-linux and iproute2 for "
                                  "--storage-delay on this storage")


def record_file(lab_dir: Path) -> Path:
    return lab_dir / RECORD


def load(lab_dir: Path) -> DelayPath | None:
    """The lab's recorded path, or None (no delay, or nothing made yet)."""
    try:
        return DelayPath.from_json(json.loads(record_file(lab_dir).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _save(lab_dir: Path, path: DelayPath) -> None:
    write_json_atomic(record_file(lab_dir), path.to_json())


def client_prefix(lab_dir: Path) -> tuple[str, ...]:
    """The prefix a lab's storage client is started with: in its delayed path's namespace,
    or () for a lab without one."""
    path = load(lab_dir)
    return path.enter() if path is not None else ()


def free_block(env: Env) -> ipaddress.IPv4Network:
    """The first /30 of RANGE that no address or route of this machine touches."""
    used: list[ipaddress.IPv4Network] = []
    for cmd in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        out = env.run(cmd, what=" ".join(cmd), check=False).stdout
        for word in out.split():
            try:
                net = ipaddress.ip_network(word, strict=False)
            except ValueError:
                continue
            if isinstance(net, ipaddress.IPv4Network) and net.prefixlen > 0:
                used.append(net)
    for block in RANGE.subnets(new_prefix=30):
        if not any(block.overlaps(u) for u in used):
            return block
    raise BusyError(f"every /30 of {RANGE} is in use on this machine: take down a delayed lab "
                    "(`statstorm lab list`)")


@contextmanager
def picking(lock: Path = LOCK) -> Iterator[None]:
    """Held while a lab picks its /30 and claims it (its addresses added): another lab's pick
    waits until then, in this process or another; released when the holder ends whatever
    way it ends (the kernel drops an fcntl lock with its file)."""
    try:
        lock.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ComponentError(f"cannot open the delayed paths' lock {lock}: {exc.strerror} "
                             "(--storage-delay needs root)") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # the lock with it


def claim(env: Env, lab: str, delay_us: int, build: Callable[[DelayPath], DelayPath],
          lock: Path = LOCK) -> DelayPath:
    """A path planned on a /30 no other lab has, made by `build` (which adds its addresses),
    the pick and the claim under `picking`'s lock."""
    with picking(lock):
        return build(plan(env, lab, delay_us))


def plan(env: Env, lab: str, delay_us: int) -> DelayPath:
    block = free_block(env)
    host, ns = list(block.hosts())
    index = (int(block.network_address) - int(RANGE.network_address)) // 4
    return DelayPath(netns=NETNS_PREFIX + lab, host_dev=f"ssd{index}h", ns_dev=f"ssd{index}n",
                     host_address=str(host), ns_address=str(ns), delay_us=delay_us)


def make(env: Env, lab_dir: Path, lab: str, delay_us: int, *, now_us: int | None = None
         ) -> DelayPath:
    """The lab's namespace, relay and addresses, each recorded before it exists; the relay
    delays by `now_us` (default: `delay_us`) until `set_delay`."""
    now_us = delay_us if now_us is None else now_us
    return claim(env, lab, delay_us,
                 lambda planned: _build(env, lab_dir, dataclasses.replace(planned,
                                                                          in_effect_us=now_us)))


def _build(env: Env, lab_dir: Path, path: DelayPath) -> DelayPath:
    """Make the planned path: namespace, relay, devices and addresses, each recorded first."""
    lab = path.netns.removeprefix(NETNS_PREFIX)
    now_us = path.in_effect_us
    if path.netns_file.exists():
        raise BusyError(f"network namespace {path.netns} exists: `statstorm lab down --name "
                        f"{lab}` (or `ip netns del {path.netns}`)")
    _save(lab_dir, path)
    env.run(["ip", "netns", "add", path.netns], what=f"ip netns add {path.netns}")
    ns = path.enter()
    env.run([*ns, "ip", "link", "set", "lo", "up"], what="the namespace's loopback up")
    log = lab_dir / LOG

    def record(pid: int) -> None:
        _save(lab_dir, dataclasses.replace(path, relay_pid=pid))

    pid = procs.spawn_daemon(
        [sys.executable, "-I", str(RELAY), "--netns", str(path.netns_file), "--host-dev",
         path.host_dev, "--ns-dev", path.ns_dev, "--one-way-us",
         str(delay_relay.split_round_trip(now_us)), "--control", str(lab_dir / CONTROL)],
        log, record)
    path = dataclasses.replace(path, relay_pid=pid)
    deadline = time.monotonic() + READY_S
    while "ready" not in _read(log):
        if not procs.alive(pid) or time.monotonic() > deadline:
            raise ComponentError(f"the storage path's relay did not start: see {log}")
        time.sleep(0.05)
    for prefix, dev, address in (((), path.host_dev, path.host_address),
                                 (ns, path.ns_dev, path.ns_address)):
        env.run([*prefix, "ip", "addr", "add", f"{address}/30", "dev", dev],
                what=f"ip addr add {address}/30 dev {dev}")
        env.run([*prefix, "ip", "link", "set", dev, "mtu", str(MTU), "txqueuelen",
                 str(QUEUE_LEN), "up"], what=f"ip link set {dev} up")
    # Every other address of the host (OpenAFS's servers are on its primary one) through
    # the relay too.
    env.run([*ns, "ip", "route", "add", "default", "via", path.host_address],
            what="the namespace's default route")
    return path


def set_delay(lab_dir: Path, us: int) -> DelayPath:
    """The relay's delay changed to `us` per round trip (the packets it holds keep their
    order), recorded once the relay says it took it."""
    path = load(lab_dir)
    if path is None or not procs.alive(path.relay_pid):
        raise ComponentError(f"the storage path of {lab_dir} has no relay: `statstorm lab down`"
                             " and up again")
    log = lab_dir / LOG
    said = f"delay {delay_relay.split_round_trip(us)}\n"
    before = _read(log).count(said)
    (lab_dir / CONTROL).write_text(f"{delay_relay.split_round_trip(us)}\n")
    os.kill(path.relay_pid, signal.SIGHUP)
    deadline = time.monotonic() + READY_S
    while _read(log).count(said) <= before:
        if not procs.alive(path.relay_pid) or time.monotonic() > deadline:
            raise ComponentError(f"the storage path's relay did not take its new delay: see "
                                 f"{log}")
        time.sleep(0.02)
    path = dataclasses.replace(path, in_effect_us=us)
    _save(lab_dir, path)
    return path


def _read(log: Path) -> str:
    try:
        return log.read_text(errors="replace")
    except OSError:
        return ""


def relay_pids(path: DelayPath) -> list[int]:
    """The path's relay: the recorded PID while it runs the relay on this namespace, and any
    other relay on it (started, not yet recorded)."""
    found = procs.find_pids([RELAY.name, f"{path.netns_file} --host-dev "])
    if path.relay_pid and procs.alive(path.relay_pid) and \
            str(path.netns_file) in procs.cmdline(path.relay_pid):
        found.append(path.relay_pid)
    return sorted(set(found))


def remove(env: Env, lab_dir: Path) -> None:
    """End the relay (its TUN devices go with it) and delete the namespace; idempotent.
    The storage's client must have ended first (it runs in the namespace)."""
    path = load(lab_dir)
    if path is None:
        return
    for pid in relay_pids(path):
        procs.terminate(pid)
    deadline = time.monotonic() + READY_S  # the kernel removes a TUN device just after its fd
    while Path("/sys/class/net", path.host_dev).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if path.netns_file.exists():
        env.run(["ip", "netns", "del", path.netns], what=f"ip netns del {path.netns}")
    record_file(lab_dir).unlink(missing_ok=True)
    (lab_dir / CONTROL).unlink(missing_ok=True)


__all__ = ["DelayPath", "LOCK", "RECORD", "claim", "client_prefix", "free_block", "load", "make",
           "picking", "plan", "relay_pids", "remove", "require", "set_delay"]
