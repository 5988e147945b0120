"""The deploy's own pinned tools (SAM CLI, cfn-lint, PyYAML, boto3; tools/requirements-deploy.lock),
installed once into a venv on first use, as the local stack installs its emulators."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "tools" / "requirements-deploy.lock"


def venv_dir() -> Path:
    return Path(os.environ.get("AWSMP_DEPLOY_VENV") or ROOT / ".awsmp-local" / "deploy-venv").resolve()


def ensure() -> Path:
    """The deploy venv's python, installing the lock first when the venv is missing or was made
    from another version of it. Processes that call it at once (the suite's parallel test jobs)
    take turns on a lock file beside the venv, so one installs and the others find it done."""
    venv = venv_dir()
    python = venv / "bin" / "python"
    marker = venv / "awsmp-deploy-lock.sha256"
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / (venv.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.is_file() and marker.is_file() and marker.read_text().strip() == digest:
            return python
        print(f"deploy: installing the pinned deploy tools ({LOCK.relative_to(ROOT)}) into {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        # --no-compile: Python compiles what it imports on first use, not every module of the
        # lock at install (about a third of the install's CPU).
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
                        "-r", str(LOCK)], check=True)
        marker.write_text(digest + "\n")
        return python


def in_venv() -> bool:
    return Path(sys.prefix).resolve() == venv_dir()


def reexec(script: Path, argv: list[str]) -> None:
    """Run this script again under the deploy venv's python (installing it first), unless it
    already runs there."""
    if in_venv():
        return
    python = ensure()
    os.execv(str(python), [str(python), str(script), *argv])


def bin_path() -> str:
    """PATH with the deploy venv's scripts first, so `sam` and `cfn-lint` are the pinned ones."""
    return os.pathsep.join([str(venv_dir() / "bin"), os.environ.get("PATH", "")])
