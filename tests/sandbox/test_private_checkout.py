"""The sandbox run from a checkout under a private folder (mode 700), where most people clone:
root's home is 700, and so is a `mktemp -d` folder (and pytest's tmp_path). The sandbox runs as
an unprivileged uid, so nothing it reads may be reached through the checkout's path; the
toolchain lives in the cache (`tempering.cache`) for that reason. A copy of the package under a
700 folder starts a sandbox as the demo's rollout worker does (the default `[sandbox]`, toolchain
"auto"), runs a one-shot job and a session command, and uses the toolchain when one is built."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sandbox_helpers import needs_bwrap
from tempering.sandbox.toolchain import MANIFEST, default_dir

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = """
import json, sys
import tempering
from tempering.config import SandboxConfig
from tempering.sandbox import ExecRequest, SessionSpec, Workspace
from tempering.sandbox.factory import make_sandbox

out = {"package": tempering.__file__}
with make_sandbox(SandboxConfig(workers=1)) as sb:
    r = sb.run(ExecRequest(command=("python3", "-c", "print(6 * 7)")))
    out["job"] = [r.reason.value, r.stdout]
    ws = Workspace.from_files({"test_x.py": b"def test_ok():\\n    assert True\\n"})
    with sb.open_session(SessionSpec(workdir="/app", workspace=ws)) as s:
        cmd = sys.argv[1]
        r = s.run(("bash", "-c", cmd), time_limit_s=60)
        out["session"] = [r.reason.value, r.stdout, r.stderr[-500:]]
print(json.dumps(out))
"""


@needs_bwrap
def test_a_checkout_under_a_private_folder_runs_jobs_sessions_and_the_toolchain(tmp_path):
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    checkout = private / "checkout"
    shutil.copytree(REPO / "tempering", checkout / "tempering", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    built = (default_dir() / MANIFEST).is_file()
    # with the toolchain: its pytest runs a test (pytest is not among the system's packages)
    command = "pytest -q -p no:cacheprovider test_x.py" if built else "ls /app"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(checkout)
    r = subprocess.run([sys.executable, "-c", _SCRIPT, command], cwd=checkout, env=env, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["package"].startswith(str(checkout)), out  # the private copy ran, not the repository
    assert out["job"] == ["ok", "42\n"], out
    assert out["session"][0] == "ok", out
    assert ("1 passed" if built else "test_x.py") in out["session"][1], out
