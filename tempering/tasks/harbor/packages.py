"""A task's own Python packages: which package layers its sessions see, built on the host.

Two sets of requirements, as Harbor's containers hold them. The environment's: what its
Dockerfile's RUN lines, solve.sh and its `[tempering]` table install, which every set-up,
agent and solution session sees. The verifier's: what test.sh asks for; when it asks only
through uvx (`-w pytest==8.4.1 -w numpy==2.3.0`), a fresh environment of just those, as uvx
makes; when it pip-installs, the environment's with those added (a later pin of a package
replaces an earlier one). Each set becomes a layer (`sandbox.layers`: shared by every task
that asks the same, versions honoured), or none when the toolchain meets it all. `layers`
plans them and builds those not built yet (from PyPI, once); a layer that cannot be built is
`Unrunnable` in one line naming the packages. Given the sandbox, a package PyPI has only as
source is built into a wheel there (`sandbox.wheels`); nothing of the task runs on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

from tempering.sandbox.layers import Layer, LayerError, build, plan
from tempering.sandbox.request import Sandbox
from tempering.sandbox.toolchain import Toolchain
from tempering.tasks.harbor.folder import HarborTask, Unrunnable


@dataclass(frozen=True)
class TaskLayers:
    environment: Layer | None  # set-up, the agent's sessions, the solution
    verifier: Layer | None  # test.sh

    @property
    def environment_name(self) -> str:
        return self.environment.name if self.environment else ""

    @property
    def unbuilt(self) -> list[Layer]:
        return [x for x in dict.fromkeys((self.environment, self.verifier)) if x is not None and not x.built]


def environment_requirements(task: HarborTask) -> list[str]:
    n = task.setup_needs
    return [*n.python, *n.isolated]


def verifier_requirements(task: HarborTask) -> list[str]:
    t = task.test_needs
    if t.isolated and not t.python:
        return list(t.isolated)  # uvx: an environment of its own
    return [*environment_requirements(task), *t.python, *t.isolated]


def services_requirements(task: HarborTask) -> list[str]:
    """A solution's services and the tests in one job (`services`): both sets, the tests' pins last."""
    return [*environment_requirements(task), *verifier_requirements(task)]


def layers(task: HarborTask, toolchain: Toolchain | None, sandbox: Sandbox | None = None,
           build_them: bool = True) -> TaskLayers:
    """The task's layers, built unless `build_them` is False (source packages in `sandbox`, when
    given). Unrunnable when a layer is needed and cannot be built (offline, no wheel for the
    sandbox's Python and no sandbox to build one) or there is no toolchain."""
    env, ver = environment_requirements(task), verifier_requirements(task)
    if toolchain is None:
        if env or ver:
            raise Unrunnable(f"{task.path}: needs Python packages ({', '.join(dict.fromkeys(env + ver))}) and "
                             "there is no toolchain: build it with scripts/setup.sh")
        return TaskLayers(None, None)
    found = TaskLayers(plan(env, toolchain), plan(ver, toolchain))
    if build_them:
        for layer in found.unbuilt:
            ensure(task, layer, sandbox)
    return found


def ensure(task: HarborTask, layer: Layer | None, sandbox: Sandbox | None = None) -> str:
    """`layer` built (Unrunnable when it cannot be); its name ("" for none)."""
    if layer is None:
        return ""
    try:
        build(layer, sandbox)
    except LayerError as e:
        raise Unrunnable(f"{task.path}: needs Python packages the toolchain lacks ({', '.join(layer.requirements)}) "
                         f"and their layer could not be built: {e}") from None
    return layer.name


def services_layer(task: HarborTask, sandbox: Sandbox) -> str:
    """The name of the layer a solution's services and the tests share ("" for none), built."""
    tc = sandbox.toolchain
    return ensure(task, plan(services_requirements(task), tc), sandbox) if tc else ""
