#!/usr/bin/python3 -I
"""`pytest` in the sandbox toolchain: the toolchain's pytest under the sandbox's python3, with
an import path nobody in the workspace can change (standard library only until pytest).

-I: no PYTHONPATH, no user site-packages, and neither the working directory nor this script's
folder on sys.path, so a conftest.py, sitecustomize.py, .pth file or a module named like
pytest's own in the workspace is never imported in their place; the session's package layer
(request.LAYER_MOUNT, when it has one) and the toolchain's packages come first, with their
.pth files read. `python -m pytest` (the toolchain's python shim sets TEMPERING_PYTEST_CWD)
puts the working directory on sys.path as CPython would, but last, so test files can import
the workspace's modules while pytest, its plugins and the packages still win. Which
conftest.py files count is pinned by the verifier (PYTEST_ADDOPTS: --rootdir, --confcutdir).
pytest runs only as __main__: multiprocessing's spawn start method imports this file again
in each child (as __mp_main__), which must only get the import path.
"""

import os
import site
import sys

root = os.path.dirname(os.path.realpath(__file__))
folders = [d for d in ("/opt/layer/lib", os.path.join(root, "lib")) if os.path.isdir(d)]
sys.path[0:0] = folders
for folder in folders:
    site.addsitedir(folder)  # on sys.path already: only its .pth files are read
if os.environ.pop("TEMPERING_PYTEST_CWD", ""):
    sys.path.append(os.getcwd())

if __name__ == "__main__":
    from pytest import console_main

    sys.exit(console_main())
