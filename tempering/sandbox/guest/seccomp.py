"""The seccomp filter every job runs under: a deny list of dangerous system calls, as classic BPF.

The program is assembled here in Python rather than through libseccomp bindings because the
guest runs on the bare system interpreter (stdlib only) and the one pip binding, pyseccomp,
has not been released since 2021. It checks the audit architecture first (x86_64 only; any
other calling convention, such as 32-bit int 0x80, kills the process; x32 numbers get ENOSYS), then denies: mount
and the new mount API, namespace creation and entry (unshare, setns, clone with CLONE_NEW*
flags, clone3), starting to trace a process that did not ask for it (ptrace's ATTACH and
SEIZE: a process may still ask its parent to trace it, PTRACE_TRACEME, and a tracer work on
its tracees) and cross-process memory access, bpf, keyrings, io_uring, perf_event_open,
module and kexec loading, reboot, swap, clock setting, socket families other than
unix/inet/inet6 and netlink's NETLINK_ROUTE (other netlink protocols and vsock reach outside
the network namespace; NETLINK_ROUTE sees only the job's own, loopback, and changing it needs
a capability no job holds: torch.distributed's gloo lists interfaces through it), terminal
injection ioctls, and system calls newer than this table (ENOSYS until reviewed). Denied calls
fail with EPERM (ENOSYS for clone3 so libc falls back to clone, whose flags are checkable).
It does not confine the filesystem or the network: namespaces and mounts do that.
"""

from __future__ import annotations

import errno
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
FIRST_UNREVIEWED_NR = 468  # one past open_tree_attr (Linux 6.15); newer calls get ENOSYS

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

# offsets into struct seccomp_data
_NR = 0
_ARCH = 4


def _arg_low(i: int) -> int:
    return 16 + 8 * i  # low 32 bits of args[i] (little-endian)


# x86_64 numbers, from asm/unistd_64.h.
DENIED = {
    "syslog": 103, "uselib": 134, "vhangup": 153, "modify_ldt": 154,
    "pivot_root": 155, "_sysctl": 156, "adjtimex": 159, "chroot": 161, "acct": 163,
    "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168,
    "reboot": 169, "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173,
    "create_module": 174, "init_module": 175, "delete_module": 176, "get_kernel_syms": 177,
    "query_module": 178, "quotactl": 179, "nfsservctl": 180, "lookup_dcookie": 212,
    "clock_settime": 227, "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250,
    "migrate_pages": 256, "unshare": 272, "move_pages": 279, "perf_event_open": 298,
    "fanotify_init": 300, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311,
    "kcmp": 312, "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_getfd": 438, "mount_setattr": 442, "quotactl_fd": 443, "memfd_secret": 447,
    "set_mempolicy_home_node": 450, "open_tree_attr": 467,
}
NR_IOCTL, NR_SOCKET, NR_CLONE, NR_PTRACE, NR_PERSONALITY, NR_CLONE3 = 16, 41, 56, 101, 135, 435

CLONE_NEW_FLAGS = 0x7E020000  # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
ALLOWED_SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6
AF_NETLINK, NETLINK_ROUTE = 16, 0
DENIED_PTRACE = (16, 0x4206)  # PTRACE_ATTACH, PTRACE_SEIZE: the ways to trace an unwilling process
DENIED_IOCTLS = (0x5412, 0x541C)  # TIOCSTI (type into a terminal), TIOCLINUX
ALLOWED_PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)  # as Docker's default profile


def build_program() -> bytes:
    """The filter as packed sock_filter records, ready for `syscalls.install_seccomp`."""
    a = _Assembler()
    a.op(_LD_W_ABS, _ARCH)
    a.jump(_JEQ_K, AUDIT_ARCH_X86_64, None, "kill")
    a.op(_LD_W_ABS, _NR)
    a.jump(_JGE_K, FIRST_UNREVIEWED_NR, "enosys", None)  # also catches x32 (bit 30 set)
    for nr in sorted(DENIED.values()):
        a.jump(_JEQ_K, nr, "eperm", None)
    a.jump(_JEQ_K, NR_CLONE3, "enosys", None)
    a.jump(_JEQ_K, NR_CLONE, "clone", None)
    a.jump(_JEQ_K, NR_SOCKET, "socket", None)
    a.jump(_JEQ_K, NR_PTRACE, "ptrace", None)
    a.jump(_JEQ_K, NR_IOCTL, "ioctl", None)
    a.jump(_JEQ_K, NR_PERSONALITY, "personality", None)
    a.ret(RET_ALLOW)

    a.label("clone")
    a.op(_LD_W_ABS, _arg_low(0))
    a.jump(_JSET_K, CLONE_NEW_FLAGS, "eperm", "allow")
    a.label("socket")
    a.op(_LD_W_ABS, _arg_low(0))
    for family in ALLOWED_SOCKET_FAMILIES:
        a.jump(_JEQ_K, family, "allow", None)
    a.jump(_JEQ_K, AF_NETLINK, None, "eafnosupport")
    a.op(_LD_W_ABS, _arg_low(2))  # the netlink protocol
    a.jump(_JEQ_K, NETLINK_ROUTE, "allow", "eafnosupport")
    a.label("ptrace")
    a.op(_LD_W_ABS, _arg_low(0))  # the request
    for request in DENIED_PTRACE:
        a.jump(_JEQ_K, request, "eperm", None)
    a.ret(RET_ALLOW)
    a.label("ioctl")
    a.op(_LD_W_ABS, _arg_low(1))
    for request in DENIED_IOCTLS:
        a.jump(_JEQ_K, request, "eperm", None)
    a.ret(RET_ALLOW)
    a.label("personality")
    a.op(_LD_W_ABS, _arg_low(0))
    for persona in ALLOWED_PERSONALITIES:
        a.jump(_JEQ_K, persona, "allow", None)
    a.label("eperm")
    a.ret(RET_ERRNO | errno.EPERM)
    a.label("enosys")
    a.ret(RET_ERRNO | errno.ENOSYS)
    a.label("eafnosupport")
    a.ret(RET_ERRNO | errno.EAFNOSUPPORT)
    a.label("allow")
    a.ret(RET_ALLOW)
    a.label("kill")
    a.ret(RET_KILL_PROCESS)
    return a.assemble()


class _Assembler:
    """Collects instructions whose conditional jumps name labels; `assemble` resolves them to
    the forward 8-bit offsets classic BPF requires (None means fall through)."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | None, str | None, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int) -> None:
        self.code.append((code, None, None, k))

    def jump(self, code: int, k: int, if_true: str | None, if_false: str | None) -> None:
        self.code.append((code, if_true, if_false, k))

    def ret(self, k: int) -> None:
        self.op(_RET_K, k)

    def label(self, name: str) -> None:
        assert name not in self.labels, f"duplicate label {name}"
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = bytearray()
        for pc, (code, jt, jf, k) in enumerate(self.code):
            out += struct.pack("<HBBI", code, self._offset(pc, jt), self._offset(pc, jf), k)
        return bytes(out)

    def _offset(self, pc: int, label: str | None) -> int:
        if label is None:
            return 0
        off = self.labels[label] - pc - 1
        assert 0 <= off <= 255, f"BPF jump to {label} out of range ({off})"
        return off
