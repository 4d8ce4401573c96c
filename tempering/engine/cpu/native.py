"""The engine's C kernels (`paged_decode.c`, `sampler.c` and the `vec.h` they share, `sparse_decode.c`), built with
the machine's C compiler on first use and cached per machine.

`library(source, fallback)` is the built shared object, loaded through ctypes, or None with one
RuntimeWarning that names the source, why it was not built, and what the caller does instead
(each kernel's caller keeps a PyTorch path). Callers cache what it returns. `split_rows` runs a
kernel's independent rows in runs on several threads (ctypes releases the GIL for the call).

Building: `cc` (or `$CC`, which may carry flags) with -O3 -march=native and the float flags that
let it reassociate sums (not -ffast-math, whose shared objects can switch the whole process to
flush denormals), cached under `$XDG_CACHE_HOME/tempering` (else ~/.cache, else the temp dir),
keyed by the source, the headers beside it, the compiler, its flags and the CPU's feature flags.
A compiler that refuses -march=native builds without it.

What it does not do: load kernels built elsewhere (wheels carry the sources, not binaries), or
build for a device other than this CPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

# reassociation is what vectorizes the sums; no -ffinite-math-only: running maxima start at -inf
FLAGS = ["-O3", "-shared", "-fPIC", "-fno-math-errno", "-fno-trapping-math", "-fno-signed-zeros",
         "-fassociative-math", "-freciprocal-math", "-ffp-contract=fast"]
BUILD_TIMEOUT_S = 120.0
STALL_S = 600.0  # a run of rows on a pool thread taking longer than this is a stall, not work
_workers: list[tuple[int, int, ThreadPoolExecutor]] = []  # at most one: (pid, threads, the pool)


def _cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tempering"
    try:
        base.mkdir(parents=True, exist_ok=True)
        if os.access(base, os.W_OK):
            return base
    except OSError:
        pass
    fallback = Path(tempfile.gettempdir()) / f"tempering-{os.getuid()}"
    fallback.mkdir(mode=0o700, exist_ok=True)
    return fallback


def _cpu_flags() -> bytes:
    """What -march=native depends on: a shared object built for another CPU may not run here."""
    try:
        info = Path("/proc/cpuinfo").read_text()
        return next((line for line in info.splitlines() if line.startswith(("flags", "Features"))), "").encode()
    except OSError:
        return platform.processor().encode()


def _compiler() -> list[str]:
    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    compiler = shlex.split(os.environ.get("CC", "")) or ([found] if found else [])
    if not compiler:
        raise RuntimeError("no C compiler (cc, gcc, clang or $CC) on this machine")
    return compiler


def _build(source: Path, compiler: list[str]) -> Path:
    """The shared object for this source (and the headers beside it), compiler and CPU: cached,
    else compiled. Raises RuntimeError on failure."""
    version = subprocess.run([*compiler, "--version"], capture_output=True, timeout=BUILD_TIMEOUT_S).stdout
    headers = [h.read_bytes() for h in sorted(source.parent.glob("*.h"))]
    key = hashlib.sha256(b"\0".join([source.read_bytes(), *headers, " ".join(compiler).encode(), version,
                                     " ".join(FLAGS).encode(), platform.machine().encode(), _cpu_flags()]))
    target = _cache_dir() / f"{source.stem}-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    errors = []
    for extra in (["-march=native"], []):
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        try:
            done = subprocess.run([*compiler, *FLAGS, *extra, str(source), "-o", tmp, "-lm"],
                                  capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            done = None
        if done is not None and done.returncode == 0:
            os.replace(tmp, target)  # atomic: another process building the same key gets either
            return target
        os.unlink(tmp)
        errors.append(f"timed out after {BUILD_TIMEOUT_S:.0f} s" if done is None
                      else (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1])
    raise RuntimeError(f"{' '.join(compiler)} could not build {source.name}: {errors[-1]}")


def library(source: Path, fallback: str) -> ctypes.CDLL | None:
    """`source` built for this machine and loaded, or None with one warning ending in `fallback`
    (what the caller does instead)."""
    try:
        return ctypes.CDLL(str(_build(source, _compiler())))
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        warnings.warn(f"{source.stem}: {e}; {fallback}", RuntimeWarning, stacklevel=3)
        return None


def rows_function(source: Path, name: str, args: type[ctypes.Structure], fallback: str):
    """`source`'s `int name(const Args *, void *scratch, int64_t r0, int64_t r1)` (a kernel over
    rows [r0, r1), `args` its Args), built and loaded by `library`; or None (with its warning)."""
    lib = library(source, fallback)
    if lib is None:
        return None
    function = getattr(lib, name)
    function.argtypes = [ctypes.POINTER(args), ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    function.restype = ctypes.c_int
    return function


def _threads(count: int) -> ThreadPoolExecutor:
    """`count` threads that run runs of rows while the calling thread runs the first run: a new
    pool when the count has grown, and in a forked child (whose copy of the parent's pool has no
    threads and would never run what it is given)."""
    pid = os.getpid()
    if _workers and _workers[0][0] == pid and _workers[0][1] >= count:
        return _workers[0][2]
    if _workers:
        owner, _, old = _workers.pop()
        if owner == pid:  # a parent's copy is left alone: its threads are not this process's
            old.shutdown(wait=False)
    _workers.append((pid, count, ThreadPoolExecutor(count, thread_name_prefix="tempering-native")))
    return _workers[0][2]


def split_rows(run: Callable[[int, int, int], None], rows: int, parts: int, name: str) -> None:
    """`run(part, lo, hi)` over `parts` runs of rows [0, rows), the first on the calling thread and
    the others on pool threads; a run that takes over STALL_S is a TimeoutError naming `name`."""
    if parts <= 1:
        run(0, 0, rows)
        return
    bounds = [rows * i // parts for i in range(parts + 1)]
    threads = _threads(parts - 1)
    others = [threads.submit(run, i, lo, hi) for i, (lo, hi) in enumerate(zip(bounds[1:-1], bounds[2:]), 1)]
    run(0, bounds[0], bounds[1])
    for f in others:
        try:
            f.result(timeout=STALL_S)
        except TimeoutError:
            raise TimeoutError(f"{name}: a run of rows on a pool thread stalled for {STALL_S:.0f} s") from None
