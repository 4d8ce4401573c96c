"""Harbor / Terminal-Bench 2 task folders, run without Docker in the sandbox.

A task is a folder: `instruction.md`, `task.toml`, `environment/` (a Dockerfile and its build
context: the starting workspace), `tests/test.sh` with the hidden tests, `solution/solve.sh`
(the oracle). The pieces, in the order a caller uses them:

    task = load(path)                              # folder: parse; Unrunnable says why not
    missing = check_needs(task, toolchain)         # trial: what the sandbox's toolchain lacks
    workspace = build(task, sandbox)               # build: COPY on the host, RUN in the sandbox
    session = sandbox.open_session(task.session_spec(workspace, tag))   # an episode acts here
    verdict = verify(task, sandbox, session.workspace, tag)             # verifier: the reward
    # or by folder, each folder read once per process:
    spec = setup_session_spec(path, sandbox); verdict = verify_folder(path, sandbox, workspace, tag)
    trial = run_trial(sandbox, task)               # all of it with the oracle (or another script)
    results = scan(roots, sandbox, ...)            # importer: every folder under some paths

Paths are Harbor's: the workspace at the Dockerfile's final WORKDIR, the tests at /tests, the
reward in /logs/verifier/reward.txt or reward.json. Nothing here imports Docker or reaches
the network.
"""

from tempering.tasks.harbor.build import SetupFailed, build, setup_session_spec
from tempering.tasks.harbor.folder import HarborTask, Limits, TaskConfig, Unrunnable, load, load_cached
from tempering.tasks.harbor.importer import Scan, check, find_folders, scan
from tempering.tasks.harbor.trial import NOOP, Trial, check_needs, run_trial
from tempering.tasks.harbor.verifier import Verdict, read_reward, verify, verify_folder

__all__ = ["HarborTask", "Limits", "NOOP", "Scan", "SetupFailed", "TaskConfig", "Trial", "Unrunnable", "Verdict",
           "build", "check", "check_needs", "find_folders", "load", "load_cached", "read_reward", "run_trial", "scan",
           "setup_session_spec", "verify", "verify_folder"]
