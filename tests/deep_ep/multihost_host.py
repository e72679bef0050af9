"""One "host" of the network-namespace test (``test_multihost_netns.py``): run inside a host's
network, mount and UTS namespaces, it spawns that host's ranks, which rendezvous over TCP with the
other host's ranks, run a scenario, and print one JSON line per rank.

    python -m tests.deep_ep.multihost_host HOST NUM_HOSTS RANKS_PER_HOST MASTER_ADDR PORT IFNAME SCENARIO

SCENARIO: exact, drop-exit or drop-cut.
"""
from __future__ import annotations

import datetime
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
import traceback

TIMEOUT_S = 15   # the buffer's and the process group's timeout


def _exact(rank, world):
    """Normal dispatch/combine over every case, then low-latency, bit-exact against the oracles."""
    from tests.deep_ep.cases import run_matrix
    from tests.deep_ep.test_low_latency import _oracle_exact
    kind, done, physical = run_matrix(rank, world, 256, 8 * world, 40, 6)
    assert _oracle_exact(rank, world)
    return {"transport": kind, "cases": len(done), "physical": list(physical)}


def _drop(rank, world, ranks_per_host, how, ifname):
    """Host 1 drops out after a good dispatch: its ranks exit at once (``how="exit"``: peers see
    the connections close) or its network goes down (``how="cut"``: nothing tells the peers; only
    the timeouts do). The survivors' next dispatch must raise within the timeout."""
    import torch.distributed as dist

    import deep_ep
    from tests.deep_ep import refs
    E, M = 4 * world, 16
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=128, num_topk=2,
                           explicitly_destroy=True, num_cpu_timeout_secs=TIMEOUT_S)
    idx, w = refs.make_routing(M, 2, E, seed=rank)
    x = refs.make_x(M, 128, seed=rank)
    buf.dispatch(x, idx, w, num_experts=E)
    dist.barrier()
    if rank // ranks_per_host == 1:
        # a rank leaves gloo's barrier before its last message has reached every peer: drop out only once the
        # survivors are past it (else one of them fails in the barrier, outside the dispatch under test)
        time.sleep(2)
        if how == "exit":
            os._exit(0)   # the whole host goes away, without a word to anyone (nor to its launcher)
        if rank % ranks_per_host == 0:
            subprocess.run(["ip", "link", "set", ifname, "down"], check=True)
        time.sleep(TIMEOUT_S + 5)   # outlives the survivors' wait
        os._exit(0)
    start = time.monotonic()
    try:
        buf.dispatch(x, idx, w, num_experts=E)
    except Exception as exc:  # what a survivor sees
        return {"raised": type(exc).__name__, "seconds": time.monotonic() - start, "message": str(exc)[:300]}
    return {"raised": None, "seconds": time.monotonic() - start}


def _rank(global_rank, world, master, port, ifname, scenario, ranks_per_host, results):
    os.environ.update({"GLOO_SOCKET_IFNAME": ifname, "MASTER_ADDR": master, "MASTER_PORT": str(port)})
    import faulthandler

    import torch
    import torch.distributed as dist
    faulthandler.dump_traceback_later(float(os.environ.get("MH_DUMP_S", "150")), exit=True)   # a hang shows where it hangs
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://{master}:{port}", rank=global_rank, world_size=world,
                                timeout=datetime.timedelta(seconds=TIMEOUT_S))
        if scenario == "exact":
            out = _exact(global_rank, world)
        else:
            out = _drop(global_rank, world, ranks_per_host, scenario.removeprefix("drop-"), ifname)
        results.put((global_rank, "ok", out))
    except BaseException:
        results.put((global_rank, "error", traceback.format_exc()[-3000:]))
    results.close()
    results.join_thread()   # the result is in the pipe before the process goes
    os._exit(0)  # no teardown handshake with ranks that may be gone


def main(argv):
    host, num_hosts, per_host, master, port, ifname, scenario = argv
    host, num_hosts, per_host, port = int(host), int(num_hosts), int(per_host), int(port)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    ranks = [host * per_host + i for i in range(per_host)]
    procs = [ctx.Process(target=_rank, args=(r, num_hosts * per_host, master, port, ifname, scenario, per_host,
                                             results)) for r in ranks]
    for p in procs:
        p.start()
    expected = per_host if scenario == "exact" or host == 0 else 0
    for _ in range(expected):
        rank, status, value = results.get(timeout=180)
        print(json.dumps({"host": host, "rank": rank, "status": status, "value": value}), flush=True)
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()


if __name__ == "__main__":
    main(sys.argv[1:])
