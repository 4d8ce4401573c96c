"""Adversarial jobs against the isolated sandbox, each judged from the host side: what the job
could reach, what it left behind, and whether the next job starts clean."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import uuid

import pytest

from tempering.records import ExecReason
from tempering.sandbox import cgroups, output
from sandbox_helpers import (SECRET, assert_next_job_clean, host_cmdlines_containing, host_pids_named, last_logged,
                             needs_bwrap, py, sandbox_processes, wait_until)

pytestmark = needs_bwrap


def assert_ended_at_its_deadline(sandbox, r, limit_s: float) -> None:
    """Killed by the host at its deadline: a timeout, by SIGKILL, not before the limit, and
    with every process of the job gone at the kill, since the job's init then reaped them and
    reported (an init that could not report within the grace period has its sandbox
    replaced). How soon after the deadline it ended is a benchmark's business, not a test's."""
    assert r.reason == ExecReason.TIMEOUT and r.exit_code == -signal.SIGKILL, r
    assert r.wall_s >= limit_s, r
    logged = last_logged(sandbox)
    assert logged["reason"] == "timeout" and logged["zygote_replaced"] is False, logged


def cpu_quota(group: cgroups.JobGroup) -> float:
    """The CPU bandwidth, in cores, that the kernel holds a job's group to."""
    if group.v2:
        quota, period = open(f"{group.dirs['unified']}/cpu.max").read().split()
    else:
        quota = open(f"{group.dirs['cpu']}/cpu.cfs_quota_us").read()
        period = open(f"{group.dirs['cpu']}/cpu.cfs_period_us").read()
    return int(quota) / int(period)  # "max" or -1 (no limit) fails here


def test_fork_bomb_is_capped_and_the_host_can_still_fork(sandbox):
    # Counted in this sandbox only (its bwrap processes and what runs below them): other test
    # runs on this machine start and end sandboxes of the same host uid meanwhile.
    def own() -> int:
        return len(sandbox_processes(sandbox))

    baseline = own()
    peak, host_forks_ok = [0], []

    def watch():
        while True:  # at least once, however late this thread gets to run
            peak[0] = max(peak[0], own())
            host_forks_ok.append(subprocess.run(["true"]).returncode == 0)
            if done.wait(0.05):
                break

    done = threading.Event()
    watcher = threading.Thread(target=watch)
    watcher.start()
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    r = sandbox.run(py(bomb, time_limit_s=1.5, pids=32))
    done.set()
    watcher.join()
    assert r.reason == ExecReason.TIMEOUT, r
    assert peak[0] - baseline <= 32 + 2, (peak[0], baseline)  # the job's pids limit, plus its init
    assert host_forks_ok and all(host_forks_ok)
    assert wait_until(lambda: own() <= baseline), (sandbox_processes(sandbox), baseline)
    assert_next_job_clean(sandbox)


def test_memory_bomb_is_oom_killed_at_the_limit(sandbox):
    bomb = "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n"
    r = sandbox.run(py(bomb, memory_mb=64, time_limit_s=10))
    assert r.reason == ExecReason.OOM, r
    assert 32 <= r.peak_memory_mb <= 64 + 1, r.peak_memory_mb
    assert r.wall_s < 5
    assert_next_job_clean(sandbox)


def test_cpu_burn_is_held_to_its_quota_and_deadline(sandbox, sandbox_cfg, monkeypatch):
    quotas = []
    stats = cgroups.JobGroup.stats

    def stats_and_quota(group):  # read as the job ends, while its group still holds it
        quotas.append(cpu_quota(group))
        return stats(group)

    monkeypatch.setattr(cgroups.JobGroup, "stats", stats_and_quota)
    burn = ("import os\nfor _ in range(3):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass\n")
    r = sandbox.run(py(burn, time_limit_s=1.0))
    assert_ended_at_its_deadline(sandbox, r, 1.0)
    # Four busy processes on a two-core host, held by the kernel to sandbox.cpus (one core)
    # until the kill: the limit is checked, not the CPU time measured against the clock.
    assert quotas == [sandbox_cfg.cpus] == [1.0], quotas
    assert_next_job_clean(sandbox)


def test_sleep_forever_ends_at_the_deadline(sandbox):
    r = sandbox.run(py("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(10**6)",
                       time_limit_s=0.5))
    assert_ended_at_its_deadline(sandbox, r, 0.5)
    assert_next_job_clean(sandbox)


def test_writes_outside_the_workspace_fail_and_never_reach_the_host(sandbox, secret_dir):
    tag = uuid.uuid4().hex
    targets = [f"/etc/{tag}", f"/usr/{tag}", f"/{tag}", f"/opt/tempering/guest/{tag}", f"/dev/{tag}",
               f"{secret_dir}/{tag}", "/proc/sys/kernel/hostname", "/proc/sysrq-trigger",
               f"/tmp/{tag}", f"/workspace/{tag}"]
    code = (f"import json\nok = []\nfor p in {targets!r}:\n    try:\n        open(p, 'w').write('x')\n"
            "        ok.append(p)\n    except OSError:\n        pass\nprint(json.dumps(ok))")
    r = sandbox.run(py(code))
    assert r.ok, r
    assert json.loads(r.stdout) == [f"/tmp/{tag}", f"/workspace/{tag}"]  # the job's own tmpfs only
    for p in targets[:6] + [f"/tmp/{tag}", f"/workspace/{tag}"]:
        assert not os.path.exists(p), p
    assert_next_job_clean(sandbox)


def test_host_secrets_stay_unreadable(sandbox, secret_dir):
    if os.geteuid() != 0:
        pytest.skip("the root-only file check needs the tests to run as root (as CI does)")
    code = rf"""
import os, glob
found = []
def check(label, data):
    if {SECRET!r} in data:
        found.append(label)
for path in ["{secret_dir}/secret.txt", "/proc/1/environ", "/proc/self/environ"] + glob.glob("/proc/*/environ"):
    try:
        check(path, open(path, errors="replace").read())
    except OSError as e:
        print("denied", path, e.errno)
check("os.environ", repr(dict(os.environ)))
print("public:", open("{secret_dir}/public.txt").read())
print("found:", found)
"""
    r = sandbox.run(py(code))
    assert r.ok, r
    assert "public: public" in r.stdout  # the directory is visible, so the secret file is reachable
    assert f"denied {secret_dir}/secret.txt 13" in r.stdout  # ... and refused: EACCES
    assert "found: []" in r.stdout and SECRET not in r.stdout and SECRET not in r.stderr


def test_a_neighbour_jobs_workspace_is_invisible(sandbox):
    token = uuid.uuid4().hex
    written = f"nb{token[:13]}"  # the writer's process name once its files are written
    # The writer stays until the host signals it, after the search: no sleep decides whether
    # the searcher looked while the files were there.
    writer = py(f"""
import os, signal
for d in ("/workspace", "/tmp", "/dev/shm"):
    open(os.path.join(d, "neighbour.txt"), "w").write({token!r})
signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGUSR1}})
open("/proc/self/comm", "w").write({written!r})
signal.sigwait({{signal.SIGUSR1}})
""", time_limit_s=60, collect=("neighbour.txt",))
    searcher = py(f"""
import os
hits = []
roots = ["/workspace", "/tmp", "/dev/shm", "/opt", "/etc"]
for pid in os.listdir("/proc"):
    if pid.isdigit():
        roots += [f"/proc/{{pid}}/root/workspace", f"/proc/{{pid}}/cwd", f"/proc/{{pid}}/root/tmp"]
for root in roots:
    for dirpath, _, names in os.walk(root):
        for n in names:
            try:
                if {token!r} in open(os.path.join(dirpath, n), errors="ignore").read(1 << 16):
                    hits.append(os.path.join(dirpath, n))
            except OSError:
                pass
print("hits", hits)
""", time_limit_s=5)
    results = {}
    t = threading.Thread(target=lambda: results.setdefault("writer", sandbox.run(writer)))
    t.start()
    try:
        assert wait_until(lambda: host_pids_named(written), timeout_s=60), "the writer never wrote its files"
        results["searcher"] = sandbox.run(searcher)
    finally:
        for pid in host_pids_named(written):
            os.kill(pid, signal.SIGUSR1)
        t.join()
    assert results["writer"].ok and results["writer"].files == {"neighbour.txt": token.encode()}
    assert results["searcher"].ok, results["searcher"]
    assert "hits []" in results["searcher"].stdout


def test_ipc_objects_and_files_do_not_survive_into_the_next_job(sandbox):
    leave = """
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
assert libc.shmget(0x7e57, 4096, 0o1666) >= 0           # SysV shared memory, IPC_CREAT
assert libc.msgget(0x7e57, 0o1666) >= 0
s = socket.socket(socket.AF_UNIX); s.bind("\\0tempering-leftover")
open("/workspace/left", "w").write("x"); open("/tmp/left", "w").write("x"); open("/dev/shm/left", "w").write("x")
if os.fork() == 0:
    os.setsid(); import time; time.sleep(60)
print("left")
"""
    for _ in range(2):  # both warm sandboxes, so the next job runs after it in the same one
        assert sandbox.run(py(leave)).stdout == "left\n"
    assert_next_job_clean(sandbox)
    assert_next_job_clean(sandbox)


def test_network_cannot_reach_a_host_listener(sandbox):
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    port = server.getsockname()[1]
    abstract = socket.socket(socket.AF_UNIX)
    name = f"\0tempering-test-{uuid.uuid4().hex}"
    abstract.bind(name)
    abstract.listen()
    abstract.settimeout(0.5)
    code = f"""
import socket
def attempt(label, family, addr):
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(1)
        s.connect(addr)
        print("connected", label)
    except OSError as e:
        print("refused", label, e.errno)
attempt("tcp", socket.AF_INET, ("127.0.0.1", {port}))
attempt("abstract", socket.AF_UNIX, {name!r})
attempt("outside", socket.AF_INET, ("1.1.1.1", 80))
# vsock, and every netlink protocol but NETLINK_ROUTE: sock_diag, audit, netfilter, uevents, generic
for family, proto in ((40, 0), (16, 4), (16, 9), (16, 12), (16, 15), (16, 16)):
    try:
        socket.socket(family, socket.SOCK_DGRAM, proto)
        print("created", family, proto)
    except OSError as e:
        print("denied family", family, proto, e.errno)
"""
    try:
        r = sandbox.run(py(code, time_limit_s=5))
        for listener in (server, abstract):
            with pytest.raises(TimeoutError):
                listener.accept()
    finally:
        server.close()
        abstract.close()
    assert r.ok, r
    assert "connected" not in r.stdout and "created" not in r.stdout, r.stdout
    assert r.stdout.count("denied family") == 6 and r.stdout.count(" 97\n") == 6, r.stdout  # EAFNOSUPPORT


def test_host_processes_cannot_be_signalled(sandbox, sandbox_cfg):
    as_root = subprocess.Popen(["sleep", "30"])
    same_uid = subprocess.Popen(["sleep", "30"], user=sandbox_cfg.uid, group=sandbox_cfg.uid, extra_groups=[])
    code = ("import os, signal\nme = os.getpid()\nfor pid in range(2, 40000):\n    if pid != me:\n"
            "        try:\n            os.kill(pid, signal.SIGKILL)\n        except OSError:\n            pass\n"
            "try:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\nprint('survived')")
    try:
        r = sandbox.run(py(code, time_limit_s=10))
        assert r.ok and r.stdout == "survived\n", r
        assert as_root.poll() is None and same_uid.poll() is None
    finally:
        for p in (as_root, same_uid):
            p.kill()
            p.wait()
    assert_next_job_clean(sandbox)


def test_the_job_cannot_signal_its_init_away(sandbox):
    """An init that died would turn the run into a sandbox_error, which is never trained on."""
    code = ("import os, signal, time\nfor s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,"
            " signal.SIGUSR1, signal.SIGPIPE):\n    os.kill(1, s)\ntime.sleep(0.2)\nprint('sent')")
    r = sandbox.run(py(code))
    assert r.ok and r.stdout == "sent\n", r
    assert_next_job_clean(sandbox)


def test_a_flood_of_stdout_keeps_its_head_and_tail_within_the_cap(sandbox):
    """256 MB of output: the program runs to its end; the host keeps the first half of the cap,
    the last bytes, and one line saying how many were cut between them."""
    flood = ("import sys\nw = sys.stdout.buffer.write\nw(b'head' * 16384)\nchunk = b'x' * (1 << 20)\n"
             "for _ in range(256):\n    w(chunk)\nw(b'tail' * 16384)\n")
    r = sandbox.run(py(flood, output_limit_bytes=65536, time_limit_s=60))
    assert r.ok and r.truncated, r.reason
    head, cut, tail = r.stdout.partition(output.marker(65536 * 2 + (256 << 20) - 65536, 65536).decode())
    assert head == "head" * 8192 and tail == "tail" * 8192 and cut, r.stdout[32760:32900]
    assert_next_job_clean(sandbox)


def test_filling_the_disk_stops_at_the_tmpfs_size(sandbox, sandbox_cfg):
    code = """
import os, json
written = {}
for d in ("/workspace", "/tmp", "/dev/shm"):
    n = 0
    try:
        with open(os.path.join(d, "fill"), "wb", buffering=0) as f:
            while n < (1 << 30):
                n += f.write(b"\\0" * (1 << 20))
    except OSError:
        pass
    written[d] = n
print(json.dumps(written))
"""
    r = sandbox.run(py(code, memory_mb=256, time_limit_s=20))
    assert r.ok, r
    cap = sandbox_cfg.disk_mb << 20
    assert all(0 < n <= cap for n in json.loads(r.stdout).values()), r.stdout
    assert_next_job_clean(sandbox)


def test_a_double_forked_daemon_dies_with_its_job(sandbox):
    marker = f"{time.time_ns() % 10**6}.25"
    # The job ends only once its daemon is running `sleep`, so the host looks for a process
    # that did exist (the job's time limit guards against a daemon that never starts).
    code = f"""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "{marker}"])
    os._exit(0)
os.wait()
def daemon_running():
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{{p}}/cmdline", "rb").read() == b"sleep\\x00{marker}\\x00":
                return True
        except OSError:
            pass
    return False
while not daemon_running():
    time.sleep(0.01)
print("parent done")
"""
    r = sandbox.run(py(code))
    assert r.ok and r.stdout == "parent done\n", r
    assert host_cmdlines_containing(f"sleep\0{marker}") == []
    assert_next_job_clean(sandbox)


def test_proc_shows_only_the_job(sandbox):
    code = r"""
import os, json
out = {"pids": {}, "denied": [], "self": str(os.getpid())}
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            out["pids"][p] = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            out["pids"][p] = None
for path, mode in [("/proc/1/environ", "r"), ("/proc/1/mem", "rb"), ("/proc/sysrq-trigger", "w"),
                   ("/proc/sys/kernel/core_pattern", "w"), ("/proc/sys/vm/drop_caches", "w")]:
    try:
        open(path, mode).close()
    except OSError:
        out["denied"].append(path)
try:
    os.listdir("/proc/1/fd")
except OSError:
    out["denied"].append("/proc/1/fd")
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
out["status"] = {k: status[k].strip() for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Uid")}
print(json.dumps(out))
"""
    r = sandbox.run(py(code))
    assert r.ok, r
    out = json.loads(r.stdout)
    # This job's init (pid 1, a fork of the sandbox's zygote) and the job itself; nothing of the host.
    assert set(out["pids"]) <= {"1", out["self"]}, out["pids"]
    assert not any(c and ("bwrap" in c or "pytest" in c) for c in out["pids"].values()), out["pids"]
    assert len(out["denied"]) == 6, out["denied"]
    st = out["status"]
    assert st["CapEff"] == st["CapPrm"] == st["CapBnd"] == st["CapAmb"] == "0000000000000000", st
    assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2" and st["Uid"].split()[0] == "1000", st


def test_privileged_system_calls_are_refused(sandbox):
    code = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
calls = {
    "mount": lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None),
    "umount2": lambda: libc.umount2(b"/proc", 2),
    "unshare_user": lambda: libc.unshare(0x10000000),
    "unshare_mount": lambda: libc.unshare(0x00020000),
    "setns": lambda: libc.setns(0, 0),
    "ptrace_attach_init": lambda: libc.ptrace(16, 1, None, None),
    "ptrace_seize_init": lambda: libc.ptrace(0x4206, 1, None, None),
    "bpf": lambda: libc.syscall(321, 0, None, 0),
    "keyctl": lambda: libc.syscall(250, 0, 0),
    "add_key": lambda: libc.syscall(248, b"user", b"x", b"y", 1, -3),
    "io_uring_setup": lambda: libc.syscall(425, 4, ctypes.create_string_buffer(120)),
    "perf_event_open": lambda: libc.syscall(298, ctypes.create_string_buffer(128), 0, -1, -1, 0),
    "userfaultfd": lambda: libc.syscall(323, 0),
    "kexec_load": lambda: libc.syscall(246, 0, 0, None, 0),
    "init_module": lambda: libc.syscall(175, None, 0, b""),
    "reboot": lambda: libc.syscall(169, 0xfee1dead, 672274793, 0x4321fedc, None),
    "chroot": lambda: libc.chroot(b"/tmp"),
    "setuid0": lambda: libc.setuid(0),
    "sethostname": lambda: libc.sethostname(b"x", 1),
    "clone_newuser": lambda: libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0),
    "clone3": lambda: libc.syscall(435, None, 0),
}
parent = os.getpid()
out = {}
for name, call in calls.items():
    ctypes.set_errno(0)
    ret = call()
    if os.getpid() != parent:  # a clone that should have been refused was not: leave quietly
        os._exit(0)
    out[name] = (ret, ctypes.get_errno())
print(json.dumps(out))
"""
    r = sandbox.run(py(code))
    assert r.ok, r
    out = json.loads(r.stdout)
    assert all(ret == -1 for ret, _ in out.values()), out
    seccomp_denied = ["mount", "umount2", "unshare_user", "unshare_mount", "setns", "ptrace_attach_init",
                      "ptrace_seize_init", "bpf",
                      "keyctl", "add_key", "io_uring_setup", "perf_event_open", "userfaultfd", "kexec_load",
                      "init_module", "reboot", "chroot", "sethostname", "clone_newuser"]
    assert {n: out[n][1] for n in seccomp_denied} == {n: 1 for n in seccomp_denied}  # EPERM
    assert out["clone3"][1] == 38  # ENOSYS, so libc falls back to the checkable clone


def test_a_process_traces_its_children_but_no_other(sandbox):
    """ptrace serves debuggers and anti-debugging checks: a child that asks (PTRACE_TRACEME) is
    traced by its parent, who reads its memory; no process can start tracing one that did not
    ask (ATTACH or SEIZE its parent, a sibling or the init): the code under test cannot take
    over the verifier that runs it."""
    code = r"""
import ctypes, json, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)
secret = ctypes.c_long(0x5EC2E7)
out, parent = {}, os.getpid()

def tries(request, pid):
    ctypes.set_errno(0)
    return [libc.ptrace(request, pid, None, None), ctypes.get_errno()]

sibling = os.fork()
if sibling == 0:
    time.sleep(30)
    os._exit(0)
r, w = os.pipe()
child = os.fork()
if child == 0:
    found = {"attach_parent": tries(16, parent), "seize_parent": tries(0x4206, parent),
             "attach_sibling": tries(16, sibling), "attach_init": tries(16, 1)}
    os.write(w, json.dumps(found).encode())
    tries(0, 0)  # PTRACE_TRACEME: the parent may now trace this process
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(7)
out.update(json.loads(os.read(r, 4096)))
_, status = os.waitpid(child, 0)
out["stopped"] = os.WIFSTOPPED(status)
out["peek"] = libc.ptrace(2, child, ctypes.addressof(secret), None)  # PTRACE_PEEKDATA
libc.ptrace(7, child, None, None)  # PTRACE_CONT
_, status = os.waitpid(child, 0)
out["exit"] = os.waitstatus_to_exitcode(status)
os.kill(sibling, signal.SIGKILL)
print(json.dumps(out))
"""
    r = sandbox.run(py(code, time_limit_s=20))
    assert r.ok, r
    out = json.loads(r.stdout)
    for attack in ("attach_parent", "seize_parent", "attach_sibling", "attach_init"):
        assert out[attack] == [-1, 1], (attack, out)  # EPERM
    assert out["stopped"] and out["peek"] == 0x5EC2E7 and out["exit"] == 7, out


def test_a_command_that_asks_its_init_to_trace_it_runs_on(sandbox):
    """A command whose parent is the job's init asks for tracing, then execs (which stops a
    tracee): the init lets go of it, and it runs to its end."""
    code = "import ctypes, os\nctypes.CDLL(None).ptrace(0, 0, None, None)\nos.execv('/bin/echo', ['echo', 'ran on'])"
    r = sandbox.run(py(code))
    assert r.ok and r.stdout == "ran on\n", r
    assert_next_job_clean(sandbox)


def test_netlink_route_sees_only_the_jobs_loopback_and_changes_nothing(sandbox):
    """torch.distributed's gloo lists interfaces over NETLINK_ROUTE, so jobs may open it: in the
    job's own network namespace it shows loopback alone, none of the host's interfaces, and
    adding an address is refused for want of a capability."""
    code = r"""
import json, socket, struct
names = [name for _, name in socket.if_nameindex()]
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
s.bind((0, 0))
local = struct.pack("<HH4s", 8, 2, socket.inet_aton("10.9.8.7"))  # IFA_LOCAL
body = struct.pack("<BBBBI", socket.AF_INET, 32, 0, 0, socket.if_nametoindex("lo")) + local
s.send(struct.pack("<IHHII", 16 + len(body), 20, 1 | 4 | 0x400 | 0x200, 1, 0) + body)  # RTM_NEWADDR, with an ack
reply = s.recv(4096)
print(json.dumps({"names": names, "reply": struct.unpack_from("<H", reply, 4)[0],
                  "error": struct.unpack_from("<i", reply, 16)[0]}))
"""
    r = sandbox.run(py(code))
    assert r.ok, r
    out = json.loads(r.stdout)
    host = {name for _, name in socket.if_nameindex()} - {"lo"}
    assert out["names"] == ["lo"] and not host & set(out["names"]), (out, host)
    assert out["reply"] == 2 and out["error"] == -1, out  # NLMSG_ERROR: -EPERM


def test_no_host_descriptor_leaks_into_the_job(sandbox, secret_dir):
    leaked = os.open(secret_dir / "public.txt", os.O_RDONLY)
    os.set_inheritable(leaked, True)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.set_inheritable(True)
    code = r"""
import json, os
open_fds = []
for fd in range(3, 4096):
    try:
        os.fstat(fd)
        open_fds.append(fd)
    except OSError:
        pass
print(json.dumps({"fds": open_fds}))
"""
    try:
        r = sandbox.run(py(code))
    finally:
        os.close(leaked)
        listener.close()
    assert r.ok, r
    out = json.loads(r.stdout)
    assert out["fds"] == [], out


def test_collected_files_never_follow_traps(sandbox):
    code = """
import os
os.symlink("/etc/passwd", "passwd_link")
os.symlink("/etc", "etc_dir")
os.mkfifo("fifo")
os.mkdir("dir")
open("big.bin", "wb").write(b"b" * (2 << 20))
open("ok.txt", "w").write("fine")
try:
    os.link("/etc/passwd", "hard")
except OSError:
    pass
print("set")
"""
    r = sandbox.run(py(code, collect=("passwd_link", "etc_dir/passwd", "fifo", "dir", "big.bin", "hard", "ok.txt")))
    # ok, not a timeout: a collection blocked on the FIFO would have kept the init from
    # reporting until the deadline and the grace period after it had passed
    assert r.ok, r
    assert r.files == {"ok.txt": b"fine"}
    assert_next_job_clean(sandbox)
