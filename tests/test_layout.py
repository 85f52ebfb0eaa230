"""The design card's top level stays visible from a checkout: policies/, integrations/ and cli.py are entries
into the package, and only `precision_engine` is installed."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_root_entries_lead_into_the_package():
    for name in ("policies", "integrations"):
        assert (ROOT / name).resolve() == (ROOT / "precision_engine" / name).resolve()
    assert (ROOT / "cli.py").is_file() and (ROOT / "pyproject.toml").is_file() and (ROOT / "tests").is_dir()


def test_python_cli_py_validates_the_shipped_policies():
    policies = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "policies").glob("*.yaml"))
    done = subprocess.run([sys.executable, "cli.py", "validate", *policies], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{p}: ok" for p in policies]


def test_only_the_namespaced_package_is_installed():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["packages"]["find"]["include"] == ["precision_engine*"]
    assert "py-modules" not in config  # cli.py stays a checkout entry, not a top-level `cli` module
