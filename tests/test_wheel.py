"""What pip installs adds one import name, ghostless, and runs beside packages named web and engine."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of a copy of what it is built from: built in the checkout, setuptools reuses its
    build/ folder, where a file since deleted (or a package-data file no longer declared) still is."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for folder in ("engine", "web", "lua"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(src), "-w", str(out)], check=True, cwd=out
    )
    return next(out.glob("ghostless-*.whl"))


@pytest.mark.slow
def test_the_wheel_installs_exactly_one_import_name(wheel):
    names = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in n}
    assert names == {"ghostless"}
    files = zipfile.ZipFile(wheel).namelist()
    assert "ghostless/lua/claim.lua" in files and "ghostless/lua/lib/time.lua" in files
    assert any(n.startswith("ghostless/web/templates/") for n in files)


@pytest.mark.slow
def test_the_wheel_says_the_package_is_typed(wheel):
    """PEP 561: without ghostless/py.typed a user's mypy treats every ghostless name as Any."""
    assert "ghostless/py.typed" in zipfile.ZipFile(wheel).namelist()


@pytest.mark.slow
def test_the_wheel_runs_beside_packages_named_web_and_engine(wheel, tmp_path):
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    for other in ("web", "engine"):  # e.g. web.py, or a user's own engine module
        (site / other).mkdir()
        (site / other / "__init__.py").write_text("raise ImportError('not ghostless')\n")
    code = (
        "import ghostless, ghostless.web, ghostless.cli; from ghostless import Engine; "
        "from ghostless.core.lua_source import source; source('claim'); ghostless.web.create_app"
    )
    env = dict(os.environ, PYTHONPATH=str(site))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, env=env)
