"""Building the sandbox toolchain folder (scripts/setup.sh runs this).

    python -m tempering.sandbox.toolchain.build [DEST] [--guest-python /usr/bin/python3]

DEST (default: `toolchain/` in the cache, `tempering.cache`, made public) gets: lib/
(requirements.txt installed with pip --target for the guest interpreter's Python version,
wheels only, and a sitecustomize.py that reads the .pth files of the toolchain's and the
package layer's lib/), bin/ (pytest, python, python3, and the installer shims: apt-get, apt,
pip, pip3, uv, uvx), home/.local/bin/env (the file a uv installer would leave, empty), and
manifest.json: the Python packages the guest interpreter sees with lib/ first, the Debian
packages of debian.py this machine has (the sandbox binds its /usr; one that it lacks is
named on stderr: scripts/setup.sh installs them) and the commands on the sandbox's PATH.
Idempotent: pip runs only when the requirements changed, so a built toolchain is rebuilt
offline (shims and manifest refreshed); without the network and without an earlier build it
fails, naming why. The new folder is built beside DEST and renamed over it, so a sandbox
never sees half a toolchain; when it comes out the same as DEST but for the manifest (the
machine's packages and commands changed: an apt install since the last build) only the
manifest is replaced, and when it is all the same it is dropped: DEST's folder is left in
place, because a running sandbox binds it and a replaced one breaks its new jobs
(scripts/setup.sh run beside a test suite or a training run). A change of requirements still
replaces the folder.
"""

from __future__ import annotations

import argparse
import filecmp
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from tempering import cache
from tempering.sandbox.layers import pip_install
from tempering.sandbox.toolchain import MANIFEST, PATH_DIRS, debian, default_dir, make_public

HERE = Path(__file__).parent
REQUIREMENTS = HERE / "requirements.txt"
_SHIM_NAMES = ("apt-get", "apt", "pip", "pip3", "uv", "uvx")
_PYTHON_SHIM = """#!/bin/sh
# python / python3 of the sandbox toolchain: `-m pytest` and `-m pip` run the toolchain's (see
# pytest_main.py for why), anything else the system's python3.
case "$1" in
  -m) case "$2" in
        pytest) shift 2; TEMPERING_PYTEST_CWD=1 exec "${0%/*}/pytest" "$@" ;;
        pip|pip3) shift 2; exec "${0%/*}/pip" "$@" ;;
      esac ;;
esac
exec /usr/bin/python3 "$@"
"""
_PACKAGES = ("import importlib.metadata as m, json, sys; sys.path.insert(0, sys.argv[1]); "
             "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}))")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tempering.sandbox.toolchain.build", description=__doc__.splitlines()[0])
    ap.add_argument("dest", nargs="?", help="the folder to build (default: the cache's, %(default)s)",
                    default=str(default_dir()))
    ap.add_argument("--guest-python", default="/usr/bin/python3")
    args = ap.parse_args(argv)
    try:
        dest = Path(args.dest)
        if dest == default_dir():
            cache.folder(dest.name, public=True)
        print(build(dest, args.guest_python))
    except (OSError, subprocess.CalledProcessError, ValueError) as e:
        print(f"tempering toolchain: {e}", file=sys.stderr)
        return 1
    return 0


def build(dest: Path, guest_python: str) -> str:
    """Build or refresh `dest`; returns what was done, in one line."""
    version = subprocess.run([guest_python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    want = hashlib.sha256(REQUIREMENTS.read_bytes() + version.encode()).hexdigest()
    new = dest.with_name(dest.name + ".new")
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    try:
        did = _fill(new, dest, want, version, guest_python)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)  # an earlier build, if any, stays as it was
        raise
    if dest.exists() and _same_tree(new, dest, but=MANIFEST):
        if filecmp.cmp(new / MANIFEST, dest / MANIFEST, shallow=False):
            shutil.rmtree(new)
            return f"toolchain {dest}: {did}, unchanged"
        os.replace(new / MANIFEST, dest / MANIFEST)  # one file renamed into the folder a sandbox may bind
        shutil.rmtree(new)
        return f"toolchain {dest}: {did}, manifest refreshed"
    if dest.exists():
        shutil.rmtree(dest)
    new.rename(dest)
    return f"toolchain {dest}: {did}"


def _same_tree(a: Path, b: Path, but: str) -> bool:
    """The same paths under `a` and `b`, each with the same kind, mode, bytes or link target; the
    file `but` must be in both, whatever it holds."""
    def entries(root: Path) -> dict[str, tuple[int, str]]:
        out = {}
        for path in root.rglob("*"):
            st = path.lstat()
            out[str(path.relative_to(root))] = (st.st_mode, os.readlink(path) if path.is_symlink() else "")
        return out
    ea, eb = entries(a), entries(b)
    return but in ea and ea == eb and all(filecmp.cmp(a / rel, b / rel, shallow=False)
                                          for rel, (mode, link) in ea.items() if stat.S_ISREG(mode) and rel != but)


def _fill(new: Path, dest: Path, want: str, version: str, guest_python: str) -> str:
    if _read_manifest(dest).get("requirements_sha256") == want and (dest / "lib").is_dir():
        shutil.copytree(dest / "lib", new / "lib", symlinks=True)
        did = "up to date"
    else:
        try:
            pip_install(new / "lib", version, ["-r", str(REQUIREMENTS)])
        except OSError as e:
            raise OSError(f"{REQUIREMENTS} (offline, with no earlier build?): {e}") from None
        did = "installed " + ", ".join(_requirements())
    shutil.copyfile(HERE / "startup.py", new / "lib" / "sitecustomize.py")
    _write_bin(new)
    home = new / "home" / ".local" / "bin"
    home.mkdir(parents=True)
    (home / "env").write_text("")
    manifest = {"format": 1, "python": version, "requirements_sha256": want,
                "python_packages": _python_packages(guest_python, new / "lib"),
                "apt_packages": _apt_packages(), "commands": _commands(new / "bin")}
    (new / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    make_public(new)
    return f"{did}; {len(manifest['python_packages'])} Python packages, " \
           f"{len(manifest['apt_packages'])} Debian packages, {len(manifest['commands'])} commands"


def _requirements() -> list[str]:
    return [line.split("#")[0].strip() for line in REQUIREMENTS.read_text().splitlines() if line.split("#")[0].strip()]


def _write_bin(root: Path) -> None:
    shutil.copyfile(HERE / "shims.py", root / "shims.py")
    shutil.copyfile(HERE / "pytest_main.py", root / "pytest_main.py")
    bin_ = root / "bin"
    bin_.mkdir()
    for name in _SHIM_NAMES:
        (bin_ / name).symlink_to("../shims.py")
    (bin_ / "pytest").symlink_to("../pytest_main.py")
    for name in ("python", "python3"):
        (bin_ / name).write_text(_PYTHON_SHIM)
    for path in (root / "shims.py", root / "pytest_main.py", bin_ / "python", bin_ / "python3"):
        path.chmod(0o755)


def _python_packages(guest_python: str, lib: Path) -> dict[str, str]:
    """What the sandbox's python3 sees: the toolchain's packages first, then the system's."""
    out = subprocess.run([guest_python, "-I", "-c", _PACKAGES, str(lib)], capture_output=True, text=True, check=True)
    return dict(sorted(json.loads(out.stdout).items()))


def _apt_packages() -> list[str]:
    """The Debian packages of debian.py installed here: those the sandbox offers, whatever else
    the machine has (its list changes as the machine does). Those missing are named on stderr."""
    installed = installed_debian()
    lacking = debian.missing(installed)
    if lacking:
        print(f"tempering toolchain: {len(lacking)} Debian packages of debian.py are not installed, and tasks "
              f"that need them are skipped: {' '.join(lacking)} (scripts/setup.sh installs them)", file=sys.stderr)
    return sorted(p for p in debian.PACKAGES if p in installed)


def installed_debian() -> set[str]:
    """Debian packages installed here: dpkg's status file, no dpkg run."""
    names, name = set(), None
    try:
        text = Path("/var/lib/dpkg/status").read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("Package: "):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Status: ") and line.split()[-1] == "installed" and name:
            names.add(name)
    return names


def _commands(bin_: Path) -> list[str]:
    names = {p.name for p in bin_.iterdir()}
    for d in PATH_DIRS:
        if os.path.isdir(d):
            names.update(n for n in os.listdir(d) if os.access(os.path.join(d, n), os.X_OK))
    return sorted(names)


def _read_manifest(dest: Path) -> dict:
    try:
        return json.loads((dest / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}


if __name__ == "__main__":
    sys.exit(main())
