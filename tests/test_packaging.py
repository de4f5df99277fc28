"""What pip installs: runtime pins apart from test pins, and lower bounds that were tested.

rq 2.0-2.7 fail at import under ghostless, so a declared ``rq>=2.0`` was untrue; the lowest
versions are pinned in requirements-min.txt, which ``make check-min`` (part of ``make test``)
installs and tests. These tests keep the files from drifting apart.
"""

import os
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pins(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            package, _, version = line.partition("==")
            assert version, f"{name}: {line!r} is not pinned with =="
            pins[_norm(package)] = version
    return pins


def _norm(package: str) -> str:
    return re.sub(r"[-_.]+", "-", package).lower()


def _bounds(requirements: list[str]) -> dict[str, str]:
    found = {}
    for req in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", req.replace(" ", ""))
        assert match, f"pyproject.toml: {req!r} has no plain lower bound"
        found[_norm(match[1])] = match[2]
    return found


def test_the_runtime_pins_carry_no_test_tools():
    runtime, test = _pins("requirements.txt"), _pins("requirements-test.txt")
    assert not set(runtime) & set(test)
    assert {"pytest", "hypothesis", "playwright"} <= set(test)


def test_the_docker_image_installs_the_runtime_pins_only():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install -r requirements.txt" in dockerfile
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert installs and not any("requirements-test" in line for line in installs)


def test_every_declared_dependency_is_pinned_for_runtime():
    runtime = _pins("requirements.txt")
    declared = _bounds(PYPROJECT["dependencies"])
    assert set(declared) <= set(runtime)


def test_the_declared_lower_bounds_are_the_versions_check_min_tests():
    minimum = _pins("requirements-min.txt")
    extras = PYPROJECT["optional-dependencies"]
    declared = {**_bounds(extras["embedded"]), **_bounds(extras["web"]), **_bounds(PYPROJECT["dependencies"])}
    assert set(declared) == set(minimum)
    for package, bound in declared.items():
        pinned = minimum[package]
        assert pinned.startswith(bound) and _release(pinned) == _release(bound), (
            f"{package}: pyproject says >={bound}, requirements-min.txt tests {pinned}"
        )


def _release(version: str) -> tuple[int, ...]:
    parts = [int(p) for p in version.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def test_the_pre_commit_hooks_run_what_make_lint_runs_with_the_pinned_tools():
    hooks = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"][0]["hooks"]
    entries = [hook["entry"] for hook in hooks]
    makefile = (ROOT / "Makefile").read_text()
    lint = makefile[makefile.index("\nlint:") :].split("\n\n")[0]
    for check in ("ruff check", "ruff format", ".ci/mypy", ".ci/lint-imports"):
        assert any(check in entry for entry in entries) and check in lint, check
    pinned = _pins("requirements-test.txt")
    for tool in re.findall(r"\.venv/bin/([\w-]+)", " ".join(entries)):
        assert {"lint-imports": "import-linter"}.get(tool, tool) in pinned, tool
    for script in re.findall(r"\.ci/[\w-]+", " ".join(entries)):
        assert os.access(ROOT / script, os.X_OK), script
