"""deep_ep across real hosts: two "hosts" made of Linux namespaces, each with its own network
(a veth pair, its own address), its own /dev/shm (a private tmpfs in its own mount namespace) and
its own host name (UTS), two ranks each, rendezvous over TCP between them. Inside a host the ranks
share memory; between hosts only the network carries data. Dispatch/combine (normal, every case,
and low-latency) are bit-exact against the oracles, and when one host drops out every surviving
rank raises within the buffer's timeout. Skipped, with the reason, where namespaces cannot be made."""
from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import subprocess
import sys

import pytest

from .multihost_host import TIMEOUT_S

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORT = 29611


def _run(*cmd, check=True):
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=30)


@functools.cache
def _namespaces_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces (ip netns add)"
    for tool in ("ip", "unshare", "mount", "hostname"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    name = f"djprobe{secrets.token_hex(3)}"
    probe = _run("ip", "netns", "add", name, check=False)
    if probe.returncode != 0:
        return f"cannot create a network namespace: {probe.stderr.strip()}"
    try:
        veth = _run("ip", "link", "add", f"{name}a", "type", "veth", "peer", "name", f"{name}b", check=False)
        if veth.returncode != 0:
            return f"cannot create a veth pair: {veth.stderr.strip()}"
        _run("ip", "link", "del", f"{name}a", check=False)
        inner = _run("ip", "netns", "exec", name, "unshare", "-m", "-u", "--propagation", "private", "sh", "-c",
                     "mount -t tmpfs tmpfs /dev/shm && hostname probe", check=False)
        if inner.returncode != 0:
            return f"cannot give a namespace its own /dev/shm and host name: {inner.stderr.strip()}"
    finally:
        _run("ip", "netns", "del", name, check=False)
    return None


@pytest.fixture
def two_hosts():
    """Two network namespaces joined by a veth pair: host 0 at 10.231.7.1, host 1 at 10.231.7.2."""
    tag = secrets.token_hex(3)
    names = [f"djh{tag}{i}" for i in range(2)]
    links = [f"djv{tag}{i}" for i in range(2)]
    try:
        for ns in names:
            _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", links[0], "type", "veth", "peer", "name", links[1])
        for i, (ns, link) in enumerate(zip(names, links, strict=True)):
            _run("ip", "link", "set", link, "netns", ns)
            _run("ip", "-n", ns, "addr", "add", f"10.231.7.{i + 1}/24", "dev", link)
            _run("ip", "-n", ns, "link", "set", link, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        yield names, links
    finally:
        for ns in names:
            _run("ip", "netns", "del", ns, check=False)


def _hosts(names, links, scenario):
    env = dict(os.environ, PYTHONPATH=ROOT, DJ_SYMM_TIMEOUT_S="60")
    env.pop("DJ_SYMM_HOST_ID", None)
    procs = []
    for host, (ns, link) in enumerate(zip(names, links, strict=True)):
        inner = (f'mount -t tmpfs -o size=512m tmpfs /dev/shm && hostname djhost{host} && exec "$0" -m '
                 f'tests.deep_ep.multihost_host {host} 2 2 10.231.7.1 {PORT} {link} {scenario}')
        procs.append(subprocess.Popen(["ip", "netns", "exec", ns, "unshare", "-m", "-u", "--propagation", "private",
                                       "sh", "-c", inner, sys.executable], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    rows, errors = [], []
    for p in procs:
        try:
            out, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            errors.append(f"host timed out: {err[-2000:]}")
        rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        if p.returncode:
            errors.append(f"host exited {p.returncode}: {err[-2000:]}")
    return rows, errors


@pytest.mark.skipif(_namespaces_unavailable() is not None, reason=str(_namespaces_unavailable()))
def test_dispatch_combine_bit_exact_across_two_namespace_hosts(two_hosts):
    rows, errors = _hosts(*two_hosts, "exact")
    failed = [r["value"] for r in rows if r["status"] != "ok"]
    assert not errors and not failed, "\n".join(errors + failed)
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3]
    for r in rows:
        assert r["value"]["transport"] == "hybrid", r      # shared memory inside a host, network across
        assert r["value"]["physical"] == [2, 2], r
        assert r["value"]["cases"] > 0


@pytest.mark.skipif(_namespaces_unavailable() is not None, reason=str(_namespaces_unavailable()))
@pytest.mark.parametrize("how", ["exit", "cut"])
def test_a_host_dropping_out_makes_every_survivor_raise(two_hosts, how):
    """``exit``: host 1's ranks all exit at once; ``cut``: host 1's network goes down (nothing
    tells the survivors; only the timeouts do)."""
    rows, errors = _hosts(*two_hosts, f"drop-{how}")
    assert not errors, "\n".join(errors)
    survivors = sorted((r["rank"], r["status"]) for r in rows)
    assert survivors == [(0, "ok"), (1, "ok")], rows
    for r in rows:
        assert r["value"]["raised"] is not None, r
        assert r["value"]["seconds"] < TIMEOUT_S + 10, r   # the timeout, plus slack for a loaded machine
