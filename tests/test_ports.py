"""The ports tests start servers on (tests/support/redis_server.py free_port): each pytest-xdist
worker has a range of its own, and a port is not given twice before its server can bind it."""

from tests.support.redis_server import PORTS_PER_WORKER, free_port, worker_ports


def test_ports_given_one_after_another_are_all_different_before_any_is_bound():
    # Three sentinels are started one after another, each on a port picked before the previous one
    # had bound its own: a port given twice made one of them fail to start.
    ports = [free_port() for _ in range(PORTS_PER_WORKER // 3)]
    assert len(set(ports)) == len(ports)


def test_each_worker_has_a_range_of_its_own_clear_of_the_cluster_bus_ports(monkeypatch):
    ranges = []
    for worker in ("gw0", "gw1", "gw2", "gw3"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        ranges.append(set(worker_ports()))
        assert free_port() in ranges[-1]
    everything = set().union(*ranges)
    assert len(everything) == 4 * PORTS_PER_WORKER  # disjoint
    assert not everything & {p + 10000 for p in everything}  # no port is another's bus port
    assert max(everything) + 10000 < 32768  # below the kernel's ephemeral ports (Linux's default)
