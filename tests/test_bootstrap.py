"""scripts/bootstrap.sh's choice of interpreter for .venv: $PYTHON, else a Python 3.12, else python3."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from adev.config import ROOT


def pick(env: dict[str, str]) -> str:
    script = ROOT / "scripts" / "bootstrap.sh"
    cmd = (f"source <(sed -n '/^pick_python()/,/^}}/p' {script}); pick_python")
    return subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def base_env(tmp_path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"),
            "PYENV_ROOT": str(tmp_path / "pyenv")}


def test_explicit_python_wins(tmp_path):
    assert pick({**base_env(tmp_path), "PYTHON": "/opt/py/bin/python3"}) == "/opt/py/bin/python3"


def test_without_a_312_it_is_python3(tmp_path):
    if shutil.which("python3.12", path="/usr/bin:/bin"):
        pytest.skip("this system has its own python3.12")
    assert pick(base_env(tmp_path)) == "python3"


def test_a_working_pyenv_312_is_preferred_and_a_broken_one_skipped(tmp_path):
    if sys.version_info[:2] != (3, 12):
        pytest.skip("needs a Python 3.12 to stand in for pyenv's")
    env = base_env(tmp_path)
    broken = tmp_path / "pyenv" / "versions" / "3.12.0" / "bin"
    broken.mkdir(parents=True)
    (broken / "python3.12").write_text("#!/bin/sh\nexit 1\n")
    os.chmod(broken / "python3.12", 0o755)
    if not shutil.which("python3.12", path="/usr/bin:/bin"):
        assert pick(env) == "python3"  # a python3.12 that does not run is not chosen
    good = tmp_path / "pyenv" / "versions" / "3.12.9" / "bin"
    good.mkdir(parents=True)
    os.symlink(sys.executable, good / "python3.12")
    assert pick(env) == str(good / "python3.12")
