"""The toolchain's lib/sitecustomize.py (build.py copies it there), run inside the sandbox.

Python imports the first sitecustomize on sys.path when it starts, so every python3 whose
PYTHONPATH holds the toolchain's lib/ runs this: it reads the .pth files of the toolchain's
and the session's package layer's lib/ (request.LAYER_MOUNT), as Python does for
site-packages but never for PYTHONPATH entries (packages that hook in through a .pth file,
such as namespace packages or setuptools' distutils shim, need it). Only those two folders,
both read-only, and only when they are on sys.path: a .pth file in the workspace is never read.
"""

import os
import site
import sys

for _folder in ("/opt/layer/lib", os.path.dirname(os.path.abspath(__file__))):
    if _folder in sys.path:
        site.addsitedir(_folder)  # on sys.path already: only its .pth files are read
