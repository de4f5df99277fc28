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
