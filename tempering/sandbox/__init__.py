"""Running untrusted programs: the request record, the backend interface and the factory.

A backend takes an `ExecRequest` and returns an `ExecResult` whatever the program does;
failures of the sandbox itself come back as `reason=sandbox_error`, never as exceptions,
because this is a deliberate fault boundary. A request the caller got wrong is refused with a
ValueError instead, as when it is built: one whose files do not fit the memory limit it
leaves to the backend's `[sandbox]` config, checked when the backend fills that in
(`ExecRequest.resolved`). The default backend isolates each job with bubblewrap, cgroups
and seccomp and keeps warm sandboxes (`isolated`); `make_sandbox` raises
`SandboxUnavailable`, naming what is missing, when this machine cannot isolate. A `Session`
(`Sandbox.open_session`) gives an episode a persistent `Workspace` over many such jobs. This
package does not decide what a program's output means (verifiers do).
"""

from __future__ import annotations

from tempering.sandbox.request import Abort, ExecRequest, ExecTag, Mount, Sandbox
from tempering.sandbox.session import Session, SessionSpec, SessionUsage
from tempering.sandbox.workspace import Workspace
from tempering.sandbox.factory import SandboxUnavailable, make_sandbox

__all__ = ["Abort", "ExecRequest", "ExecTag", "Mount", "Sandbox", "SandboxUnavailable", "Session", "SessionSpec",
           "SessionUsage", "Workspace", "make_sandbox"]
