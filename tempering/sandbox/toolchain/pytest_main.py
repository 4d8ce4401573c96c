#!/usr/bin/python3 -I
"""`pytest` in the sandbox toolchain: the toolchain's pytest under the sandbox's python3, with
an import path nobody in the workspace can change (standard library only until pytest).

-I: no PYTHONPATH, no user site-packages, and neither the working directory nor this script's
folder on sys.path, so a conftest.py, sitecustomize.py, .pth file or a module named like
pytest's own in the workspace is never imported in their place; the toolchain's packages come
first. `python -m pytest` (the toolchain's python shim sets TEMPERING_PYTEST_CWD) puts the
working directory on sys.path as CPython would, but last, so test files can import the
workspace's modules while pytest, its plugins and the toolchain's packages still win. Which
conftest.py files count is pinned by the verifier (PYTEST_ADDOPTS: --rootdir, --confcutdir).
"""

import os
import sys

root = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(root, "lib"))
if os.environ.pop("TEMPERING_PYTEST_CWD", ""):
    sys.path.append(os.getcwd())

from pytest import console_main  # noqa: E402  (after the import path is set)

sys.exit(console_main())
