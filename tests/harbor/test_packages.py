"""A task's own Python packages in package layers, built from a local folder of wheels (pip
offline: `local_index`): the environment's and the verifier's sets apart, versions honoured,
their console scripts and .pth files working, a pin the layer does not meet refused by the
shims, a layer shared by tasks that ask the same, and one that cannot be built reported in
one line by the importer; a source-only package built into a wheel inside the sandbox, where
its setup.py cannot reach the host. Judged from the host by the reward and the files left."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from harbor_helpers import TB_TEST_SH, make_sdist, make_task, needs_sandbox
from tempering.sandbox import layers
from tempering.sandbox.toolchain import Toolchain, default_dir
from tempering.tasks import harbor
from tempering.tasks.harbor import packages

pytestmark = needs_sandbox

# The environment installs 1.0 (RUN pip); the tests run under uvx with 2.0, an environment of their own.
DOCKERFILE = """FROM python:3.13-slim
WORKDIR /app
RUN pip install tempering-tiny==1.0 && python3 -c 'import tempering_tiny as t; print(t.VERSION)' > built.txt
"""
ORACLE = """#!/bin/bash
python3 -c 'import tempering_tiny as t, tiny_extra; print(t.VERSION)' > agent.txt
tiny-version > script.txt 2>&1
"""
TESTS = """from pathlib import Path
import tempering_tiny, tiny_extra

def test_the_environment_had_its_version():
    assert Path("/app/built.txt").read_text() == "1.0\\n" == Path("/app/agent.txt").read_text()
    assert Path("/app/script.txt").read_text() == "1.0\\n"

def test_the_verifier_has_its_own():
    assert tempering_tiny.VERSION == "2.0" and tiny_extra.FOUND
"""


def test_each_phase_sees_its_own_pinned_packages(sandbox, tmp_path, local_index):
    test_sh = TB_TEST_SH.replace("-w pytest-json-ctrf==0.3.5", "-w pytest-json-ctrf==0.3.5 -w tempering-tiny==2.0")
    task = harbor.load(make_task(tmp_path, dockerfile=DOCKERFILE, solve=ORACLE, tests=TESTS, test_sh=test_sh))
    found = packages.layers(task, sandbox.toolchain)
    assert found.environment.requirements == ("tempering-tiny==1.0",)  # pytest: the toolchain's own
    assert found.verifier.requirements == ("tempering-tiny==2.0",) and found.verifier.built
    trial = harbor.run_trial(sandbox, task)
    assert trial.reward == 1.0, trial.verdict.output
    manifest = json.loads((found.environment.root / "manifest.json").read_text())
    assert manifest["python_packages"] == {"tempering-tiny": "1.0"}
    noop = harbor.run_trial(sandbox, task, harbor.NOOP)
    assert noop.reward == 0.0


def test_a_pin_the_layer_does_not_meet_is_refused_by_the_shims(sandbox, tmp_path, local_index):
    task = harbor.load(make_task(tmp_path, dockerfile=DOCKERFILE, solve=ORACLE, tests=TESTS))
    spec = harbor.setup_session_spec(task.path, sandbox)
    with sandbox.open_session(spec) as s:
        r = s.run(("bash", "-c", "pip install tempering-tiny==2.0; echo $?; pip install 'tempering-tiny>=1,<2' && "
                                 "pip freeze | grep tiny"))
    assert "tempering-tiny==2.0 (1.0 is installed)" in r.stderr and r.stdout.startswith("1\n"), r
    assert r.stdout.endswith("tempering-tiny==1.0\n"), r.stdout


def test_tasks_that_ask_the_same_share_a_layer(tmp_path, local_index):
    tc = Toolchain.load(default_dir())
    one = harbor.load(make_task(tmp_path / "one", dockerfile=DOCKERFILE))
    spelled = DOCKERFILE.replace("RUN pip install tempering-tiny==1.0", "RUN pip3 install -q tempering_tiny==1.0")
    two = harbor.load(make_task(tmp_path / "two", dockerfile=spelled))
    a, b = packages.layers(one, tc, build_them=False), packages.layers(two, tc, build_them=False)
    assert a.environment is not None and a.environment.name == b.environment.name
    assert a.verifier is None  # the tests ask uvx for pytest alone, which the toolchain has


def test_a_layer_that_cannot_be_built_is_one_skip_line(sandbox, tmp_path, local_index):
    make_task(tmp_path / "ok", dockerfile=DOCKERFILE, solve=ORACLE, tests=TESTS)
    make_task(tmp_path / "gone", dockerfile="FROM x\nWORKDIR /app\nRUN pip install numpy==1.0.0.404\n")
    tc = Toolchain.load(default_dir())
    unbuilt = {r.path.parent.name: r for r in harbor.scan([tmp_path], tc)}  # --no-build: nothing is fetched
    assert unbuilt["gone"].runnable
    assert "Python packages to fetch into a layer: numpy==1.0.0.404" in unbuilt["gone"].reason
    results = {r.path.parent.name: r for r in harbor.scan([tmp_path], tc, sandbox)}
    gone = results["gone"]
    assert not gone.runnable and not gone.failed and "\n" not in gone.reason
    assert "needs Python packages the toolchain lacks (numpy==1.0.0.404)" in gone.reason
    assert results["ok"].runnable, results["ok"].reason


def test_a_source_only_package_is_built_in_the_sandbox(sandbox, tmp_path, local_index):
    escapes = [f"/var/tmp/tempering-src-escape-{uuid.uuid4().hex}", f"/tmp/tempering-src-escape-{uuid.uuid4().hex}"]
    make_sdist(local_index, escapes)
    tests = "import tempering_src\n\ndef test_built():\n    assert tempering_src.SOURCE_BUILT\n"
    test_sh = TB_TEST_SH.replace("-w pytest-json-ctrf==0.3.5", "-w pytest-json-ctrf==0.3.5 -w tempering-src==1.0")
    task = harbor.load(make_task(tmp_path, tests=tests, test_sh=test_sh))
    assert harbor.run_trial(sandbox, task).reward == 1.0
    found = packages.layers(task, sandbox.toolchain, build_them=False)
    assert json.loads((found.verifier.root / "manifest.json").read_text())["python_packages"] == {"tempering-src": "1.0"}
    assert not any(Path(p).exists() for p in escapes)  # setup.py ran in the sandbox, not here
    assert not (found.verifier.root / "wheels").exists()


def test_layers_share_the_files_they_have_alike(local_index):
    tc = Toolchain.load(default_dir())
    one, two = (layers.build(layers.plan([spec], tc)) for spec in ("tempering-tiny==1.0", "tempering-tiny>=1,<2"))
    assert one.name != two.name
    module = Path("lib", "tempering_tiny", "__init__.py")
    assert (one.root / module).stat().st_ino == (two.root / module).stat().st_ino
    assert (one.root / module).read_text() == "VERSION = '1.0'\n\ndef main():\n    print(VERSION)\n"
