"""Verifier set-up: the code under test is imported from the workspace, explicitly."""
import importlib as _importlib
import sys as _sys

_APP = '/app'
for _name in ('rle',):
    _sys.modules.pop(_name, None)
_sys.path.insert(0, _APP)
try:
    for _name in ('rle',):
        _importlib.import_module(_name)
finally:
    _sys.path.remove(_APP)
for _name in ('rle',):
    _file = getattr(_sys.modules[_name], "__file__", None) or ""
    if not _file.startswith(_APP + "/"):
        raise ImportError(f"{_name} came from {_file!r}, not from the workspace {_APP}")

