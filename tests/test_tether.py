"""Processes a test starts end with it (tests/support/tether.py), even when it is SIGKILLed: a CI
timeout or a user's kill -9 of pytest leaves no worker polling a server, and no server running."""

import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.conftest import need_redis_server
from tests.support.procs import ROOT, Proc, running
from tests.support.tether import TETHERS, tether
from tests.support.wait import wait_until

pytestmark = pytest.mark.skipif(not TETHERS, reason="prctl(PR_SET_PDEATHSIG) is Linux's")

#: A test process, as pytest is: it starts a worker-like child and a redis-server, prints their
#: pids, and waits to be killed.
A_TEST = """
import sys, time
sys.path.insert(0, {root!r})
from tests.support.procs import Proc
from tests.support.redis_server import RedisServer

child = Proc([sys.executable, "-c", "import time; time.sleep(600)"], {{}})
server = RedisServer().start()
print(child.pid, server.proc.pid, flush=True)
time.sleep(600)
"""

#: A cluster benchmark, as `make bench` runs it: its load-client processes made (forked by
#: multiprocessing, each blocked on its pipe until told what to load), their pids printed.
A_CLUSTER_BENCH = """
import sys, time
sys.path.insert(0, {root!r})
from bench.cluster import Clients

clients = Clients(2, {{}}, ["q0"])
print(*(p.pid for p in clients.procs), flush=True)
time.sleep(600)
"""

#: A child that prints the signal it is to get when its parent ends (PR_GET_PDEATHSIG).
PRINTS_ITS_SIGNAL = (
    "import ctypes; v = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(v)); print(v.value, flush=True)"
)


def _killed_leaves_nothing(tmp_path, script: str, children: int, what: str) -> None:
    """Run ``script`` (it prints its children's pids, then waits), SIGKILL it, and see its children
    end: nothing of it runs once killed (no finally, no atexit)."""
    path = tmp_path / "killed.py"
    path.write_text(script.format(root=str(ROOT)))
    pids: list[int] = []
    killed = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True, preexec_fn=tether())
    try:
        pids += [int(pid) for pid in killed.stdout.readline().split()]
        assert len(pids) == children and all(running(pid) for pid in pids)
        killed.kill()
        killed.wait(10)
        wait_until(lambda: not any(running(pid) for pid in pids), 10, what=what)
    finally:
        for pid in [killed.pid, *pids]:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        killed.wait(10)
        killed.stdout.close()


def test_what_a_test_started_ends_when_the_test_process_is_sigkilled(tmp_path):
    need_redis_server()
    _killed_leaves_nothing(tmp_path, A_TEST, 2, "the worker and the server to end")


def test_a_cluster_benchmarks_load_clients_end_when_it_is_sigkilled(tmp_path):
    # Each client holds its pipe's other end too (forked after it was made): blocked on it, a
    # client never saw its benchmark end, nor would one loading until told to stop.
    _killed_leaves_nothing(tmp_path, A_CLUSTER_BENCH, 2, "the load clients to end")


def _signal_of_a_child_started(on_main_thread: bool) -> str:
    procs: list[Proc] = []

    def start():
        procs.append(Proc([sys.executable, "-c", PRINTS_ITS_SIGNAL], {}))

    if on_main_thread:
        start()
    else:
        thread = threading.Thread(target=start)
        thread.start()
        thread.join()
    procs[0].popen.wait(10)
    return procs[0].output().strip()


def test_a_child_started_by_the_main_thread_is_tethered():
    assert _signal_of_a_child_started(on_main_thread=True) == str(int(signal.SIGKILL))


def test_a_child_started_by_another_thread_is_not_killed_when_that_thread_ends():
    # PR_SET_PDEATHSIG follows the thread that forked: a server a chaos run restarts from a helper
    # thread would otherwise be killed as that thread ends.
    assert _signal_of_a_child_started(on_main_thread=False) == "0"
