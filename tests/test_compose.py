"""docker-compose.yml and the Dockerfile, checked without a Docker engine: every service runs a
real ``ghostless`` command with options it accepts, Redis keeps what it acknowledges, and every
file the build needs exists."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from ghostless.cli.root import main
from ghostless.web import health
from tests.conftest import need_redis_server
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
GHOSTLESS = ["web", "worker", "sweeper", "scheduler"]


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_compose_has_redis_and_every_ghostless_process():
    assert set(SERVICES) >= {"redis", *GHOSTLESS}


def test_redis_appends_every_write_never_evicts_and_keeps_its_data_in_a_volume():
    redis = SERVICES["redis"]
    args = [str(a) for a in redis["command"]]
    assert args[0] == "redis-server"
    assert _arg(args, "--appendonly") == "yes"
    assert _arg(args, "--appendfsync") == "everysec"
    assert _arg(args, "--maxmemory-policy") == "noeviction"
    volume = redis["volumes"][0].split(":")
    assert volume[1] == "/data" and volume[0] in COMPOSE["volumes"]
    assert "redis-cli" in redis["healthcheck"]["test"]
    assert "appendfsync always" in (ROOT / "docker-compose.yml").read_text()  # the trade-off is explained


WEB_PENDING = "`ghostless web` is being added by the web work (engine/cli/root.py); this case passes once it lands"


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            name,
            marks=pytest.mark.xfail(name == "web" and "web" not in main.commands, strict=False, reason=WEB_PENDING),
        )
        for name in GHOSTLESS
    ],
)
def test_each_service_runs_a_ghostless_command_with_options_it_accepts(name):
    service = SERVICES[name]
    command = service["command"]
    assert isinstance(command, list) and command[0] == "ghostless", command
    sub = main.commands.get(command[1])
    assert sub is not None, f"`ghostless {command[1]}` is not a command"
    assert CliRunner().invoke(main, [command[1], "--help"]).exit_code == 0
    # Parsing (not running) rejects unknown options and bad values.
    with click.Context(main) as parent:
        sub.make_context(command[1], list(command[2:]), parent=parent)
    assert service["depends_on"]["redis"]["condition"] == "service_healthy"
    assert service["environment"]["GHOSTLESS_REDIS_URL"] == "redis://redis:6379/0"
    assert service["healthcheck"]["test"]


def test_the_default_app_exists_and_registers_a_periodic_task_for_the_scheduler():
    default = re.search(r":-([\w.]+):(\w+)\}", SERVICES["worker"]["environment"]["GHOSTLESS_APP"])
    module = default.group(1)
    source = ROOT / (module.replace("ghostless.", "engine.", 1).replace(".", "/") + ".py")
    assert source.exists()
    assert "engine.periodic(" in source.read_text()


def test_workers_can_be_scaled_and_stop_gracefully():
    worker = SERVICES["worker"]
    assert "container_name" not in worker and "ports" not in worker  # --scale worker=N
    assert int(worker["stop_grace_period"].rstrip("s")) >= 30


def test_the_web_port_and_health_check():
    web = SERVICES["web"]
    command = web["command"]
    assert _arg(command, "--host") == "0.0.0.0" and web["ports"][0].endswith(f":{_arg(command, '--port')}")
    assert "/readyz" in " ".join(web["healthcheck"]["test"])
    # /readyz wants a sweeper tick within GHOSTLESS_READY_SWEEPER_AGE: the stack's sweeper ticks sooner.
    interval = float(_arg(SERVICES["sweeper"]["command"], "--interval"))
    assert interval + 1 < health.DEFAULTS["GHOSTLESS_READY_SWEEPER_AGE"]
    assert "GHOSTLESS_READY_SWEEPER_AGE" not in web["environment"]  # the check is on


def test_every_file_the_build_needs_exists():
    for service in SERVICES.values():
        if "build" in service:
            context = ROOT / service["build"]
            assert (context / "Dockerfile").is_file()
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = [p for line in dockerfile.splitlines() if line.startswith("COPY ") for p in line.split()[1:-1]]
    assert "requirements.txt" in copied
    for path in copied:
        assert (ROOT / path).exists(), f"Dockerfile copies {path}, which does not exist"
    assert "pip install -r requirements.txt" in dockerfile


def test_the_web_service_requires_the_shared_secret_key():
    web = SERVICES["web"]
    assert int(_arg(web["command"], "--workers")) > 1  # several processes: one key for all of them
    # ${VAR:?message}: compose refuses to start without it, naming it, instead of a random key per process.
    assert re.fullmatch(
        r"\$\{GHOSTLESS_SECRET_KEY:\?[^}]*GHOSTLESS_SECRET_KEY[^}]*\}", web["environment"]["GHOSTLESS_SECRET_KEY"]
    )
    assert web["environment"]["GHOSTLESS_REDIS_URL"] == SERVICES["worker"]["environment"]["GHOSTLESS_REDIS_URL"]


# docs/compose/cluster.yml: the same stack on a Redis Cluster (docs/operations.md).
CLUSTER_COMPOSE = yaml.safe_load((ROOT / "docs/compose/cluster.yml").read_text())
CLUSTER_SERVICES = CLUSTER_COMPOSE["services"]
NODES = [f"redis-{n}" for n in range(1, 7)]


def _expanded(arg) -> str:
    """A compose argument with ``${VAR:-default}`` replaced by its default."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(arg))


@pytest.mark.parametrize("name", GHOSTLESS)
def test_the_cluster_example_runs_each_ghostless_process_on_the_cluster(name):
    service = CLUSTER_SERVICES[name]
    command = service["command"]
    assert command == SERVICES[name]["command"]  # the same processes as docker-compose.yml
    with click.Context(main) as parent:
        main.commands[command[1]].make_context(command[1], list(command[2:]), parent=parent)
    url = service["environment"]["GHOSTLESS_REDIS_URL"]
    assert url.startswith("redis+cluster://")
    hosts = url.partition("://")[2].split(",")
    assert {h.partition(":")[0] for h in hosts} <= set(NODES) and len(hosts) >= 2
    assert service["depends_on"] == {"cluster-create": {"condition": "service_completed_successfully"}}
    assert (ROOT / "docs/compose" / service["build"] / "Dockerfile").is_file()


def test_the_cluster_example_creates_three_primaries_with_a_replica_each():
    script = CLUSTER_SERVICES["cluster-create"]["command"][0]
    assert "--cluster create --cluster-replicas 1 --cluster-yes" in script
    assert "for n in 1 2 3 4 5 6" in script
    assert set(CLUSTER_SERVICES["cluster-create"]["depends_on"]) == set(NODES)
    for node in NODES:
        assert CLUSTER_SERVICES[node]["volumes"][0].startswith(f"{node}:/data")


def test_the_cluster_example_node_settings_are_accepted_by_redis_server():
    """A node's command line, run by a real redis-server (on a private port): a cluster node that
    appends every write and never evicts."""
    need_redis_server()
    args = [_expanded(a) for a in CLUSTER_SERVICES["redis-1"]["command"]]
    assert args[0] == "redis-server"
    port_at = args.index("--port")
    extra = args[1:port_at] + args[port_at + 2 :]  # our own port instead of 6379
    server = RedisServer(*extra)  # its port's cluster bus port (port + 10000) is free too (free_port)
    server.start()
    try:
        client = server.client()
        assert client.info("cluster")["cluster_enabled"] == 1
        assert client.config_get("appendonly")["appendonly"] == "yes"
        assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        assert int(client.config_get("cluster-node-timeout")["cluster-node-timeout"]) <= 15000
    finally:
        server.close()
