"""The Debian packages the sandbox offers (it binds the host's /usr); scripts/setup.sh installs
the ones a machine lacks (`python -m tempering.sandbox.toolchain.debian` prints them).

A task's `apt-get install` is met by these alone, plus what no sandbox needs (headers,
editors, downloaders: `shims.needless_apt`), never by whatever else happens to be installed,
so a folder runs, or is skipped, the same on every machine set up from this list (a machine's
own list changes as it does: 711 packages after a fresh build, 826 once chromium came).
"""

from __future__ import annotations

import sys

PACKAGES = (
    # Shell and text tools
    "bash", "coreutils", "findutils", "grep", "sed", "mawk", "diffutils", "patch", "file", "bc", "time", "jq",
    "yq", "xxd", "less", "ncurses-bin", "tzdata", "locales",
    # Archives
    "tar", "gzip", "bzip2", "xz-utils", "zstd", "unzip", "zip",
    # Processes and system
    "procps", "psmisc", "lsof", "util-linux", "bsdextrautils", "bsdutils", "hostname", "iproute2",
    "net-tools",
    # Network clients (the sandbox has loopback only)
    "curl", "wget", "openssh-client", "openssl", "ca-certificates", "gnupg",
    # Version control
    "git",
    # Compilers, builders and debuggers
    "gcc", "g++", "cpp", "gfortran", "gnucobol3", "make", "cmake", "ninja-build", "build-essential",
    "binutils", "libc6-dev", "libssl-dev", "gdb", "strace", "valgrind", "llvm",
    # Runtimes and databases
    "python3", "perl", "nodejs", "openjdk-17-jdk-headless", "sqlite3",
)


def missing(installed: set[str]) -> list[str]:
    """The packages of PACKAGES not in `installed`."""
    return [p for p in PACKAGES if p not in installed]


if __name__ == "__main__":
    from tempering.sandbox.toolchain.build import installed_debian

    print(" ".join(missing(installed_debian())))
    sys.exit(0)
