"""The seccomp program, run through a small classic-BPF interpreter: the right decisions for
the architecture check, denied calls, argument checks and ordinary calls."""

from __future__ import annotations

import errno
import struct

import pytest

from tempering.sandbox.guest import seccomp

ALLOW, KILL = seccomp.RET_ALLOW, seccomp.RET_KILL_PROCESS
EPERM = seccomp.RET_ERRNO | errno.EPERM
ENOSYS = seccomp.RET_ERRNO | errno.ENOSYS


def run_bpf(program: bytes, nr: int, args=(0,) * 6, arch=seccomp.AUDIT_ARCH_X86_64) -> int:
    """Interpret the subset of classic BPF the builder emits against one seccomp_data."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    for _ in range(len(insns) + 1):
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == 0x06:
            return k
        elif code in (0x15, 0x35, 0x45):
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)
        else:
            raise AssertionError(f"unexpected BPF opcode {code:#x}")
    raise AssertionError("program did not return")


@pytest.fixture(scope="module")
def program():
    return seccomp.build_program()


def test_other_architectures_are_killed(program):
    assert run_bpf(program, 0, arch=0x40000003) == KILL  # i386 via int 0x80


def test_ordinary_calls_pass(program):
    for nr in (0, 1, 2, 3, 9, 57, 59, 60, 231, 257, 262):  # read write open close mmap fork execve ...
        assert run_bpf(program, nr) == ALLOW, nr


@pytest.mark.parametrize("name", ["mount", "umount2", "bpf", "keyctl", "unshare", "setns",
                                  "io_uring_setup", "perf_event_open", "kexec_load", "init_module",
                                  "process_vm_readv", "userfaultfd", "open_tree", "fsopen", "reboot"])
def test_dangerous_calls_are_denied(program, name):
    assert run_bpf(program, seccomp.DENIED[name]) == EPERM


def test_x32_and_unknown_calls_get_enosys(program):
    assert run_bpf(program, 0x40000000 | 1) == ENOSYS
    assert run_bpf(program, seccomp.FIRST_UNREVIEWED_NR) == ENOSYS
    assert run_bpf(program, seccomp.NR_CLONE3) == ENOSYS


def test_clone_is_checked_for_namespace_flags(program):
    fork_like = 0x01200011  # CLONE_CHILD_SETTID|CLONE_CHILD_CLEARTID|SIGCHLD, what fork() passes
    thread = 0x003D0F00
    assert run_bpf(program, seccomp.NR_CLONE, (fork_like, 0, 0, 0, 0, 0)) == ALLOW
    assert run_bpf(program, seccomp.NR_CLONE, (thread, 0, 0, 0, 0, 0)) == ALLOW
    for flag in (0x10000000, 0x20000000, 0x40000000, 0x00020000):  # NEWUSER NEWPID NEWNET NEWNS
        assert run_bpf(program, seccomp.NR_CLONE, (fork_like | flag, 0, 0, 0, 0, 0)) == EPERM


def test_socket_families(program):
    for family in (1, 2, 10):
        assert run_bpf(program, seccomp.NR_SOCKET, (family, 1, 0, 0, 0, 0)) == ALLOW
    for family in (40, 17):  # vsock, packet
        assert run_bpf(program, seccomp.NR_SOCKET, (family, 1, 0, 0, 0, 0)) == seccomp.RET_ERRNO | errno.EAFNOSUPPORT
    # netlink: NETLINK_ROUTE only (sock_diag, audit, netfilter, uevents, generic refused)
    assert run_bpf(program, seccomp.NR_SOCKET, (16, 3, 0, 0, 0, 0)) == ALLOW
    for proto in (4, 9, 12, 15, 16):
        assert run_bpf(program, seccomp.NR_SOCKET, (16, 3, proto, 0, 0, 0)) == seccomp.RET_ERRNO | errno.EAFNOSUPPORT


def test_ptrace_starts_only_on_request(program):
    """PTRACE_TRACEME and a tracer's requests pass; ATTACH and SEIZE (tracing an unwilling
    process) are refused, also with high bits set in the request."""
    for request in (0, 2, 7, 17, 24, 0x4200):  # TRACEME, PEEKDATA, CONT, DETACH, SYSCALL, SETOPTIONS
        assert run_bpf(program, seccomp.NR_PTRACE, (request, 2, 0, 0, 0, 0)) == ALLOW, request
    for request in (16, 0x4206, 1 << 32 | 16):  # ATTACH, SEIZE
        assert run_bpf(program, seccomp.NR_PTRACE, (request, 2, 0, 0, 0, 0)) == EPERM, request


def test_terminal_injection_and_personality(program):
    assert run_bpf(program, seccomp.NR_IOCTL, (0, 0x5412, 0, 0, 0, 0)) == EPERM  # TIOCSTI
    assert run_bpf(program, seccomp.NR_IOCTL, (0, 0x5401, 0, 0, 0, 0)) == ALLOW  # TCGETS
    assert run_bpf(program, seccomp.NR_PERSONALITY, (0xFFFFFFFF, 0, 0, 0, 0, 0)) == ALLOW
    assert run_bpf(program, seccomp.NR_PERSONALITY, (0x0040000, 0, 0, 0, 0, 0)) == EPERM  # ADDR_NO_RANDOMIZE
