"""PID 1 of a warm bwrap worker, INSIDE the sandbox: a pristine fork per run, a wipe between runs.

Runs inside a long-lived sandbox as `python3 -I /.scalerl/warm_init.pyc serve SOCK_FD` beside
supervisor.pyc (whose helpers it imports); the host side is bwrap_warm.py. Per run: a child forked
from this never-touched interpreter receives the request (config in a memfd, stdin, stdout/stderr
pipes, input files as memfds) over the SEQPACKET socket, closes the socket and becomes the program;
this process never holds run data. After the child exits: SIGKILL everything else, reap, report
(exit, signal, CPU), wait for the host's `next` (it reads collected files from outside first), then
empty /work, /tmp, /dev/shm, /dev/mqueue, SysV IPC objects and the user keyring, and say `ready` (or
`dirty: why`, and the host discards the worker). Not covered: kernel state outside those (documented
in bwrap_warm.py).
"""

import os
import socket
import sys

if __name__ == "__main__":  # in the sandbox: supervisor.pyc sits beside us
    sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
    import supervisor as L

    del sys.path[0]
else:  # imported on the host (docs, linters): the package copy
    from scalerl.sandbox.inside import supervisor as L

WIPE = ("/work", "/tmp", "/dev/shm", "/dev/mqueue")
KEYCTL = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_CLEAR, KEY_SPEC_USER_KEYRING = 1, 7, -4
MAX_FDS = 250


def libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def ready_child(sock, lib):
    """Wait for one request, then become that run's program. Never returns."""
    try:
        _, fds, _, _ = socket.recv_fds(sock, 16, MAX_FDS)
        sock.close()
        if len(fds) < 4:
            os._exit(0)  # the host is closing the worker
        req_fd, stdin_fd, out_fd, err_fd, *file_fds = fds
        cfg = L.marshal.loads(read_fd(req_fd))
        os.close(req_fd)
        L.set_dumpable(1)
        try:  # noqa: SIM105 - PID 1 may be -1000 (host's choice); the program must not be
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("0")
        except OSError:
            pass
        if KEYCTL:
            lib.syscall(KEYCTL, KEYCTL_JOIN_SESSION_KEYRING, None)
        for name, fd in zip(cfg["files"], file_fds, strict=True):
            write_file(os.path.join(cfg["cwd"], name), fd)
        for target, fd in ((0, stdin_fd), (1, out_fd), (2, err_fd)):
            os.dup2(fd, target)
        os.closerange(3, 65536)
    except BaseException as exc:  # noqa: BLE001 - the run fails loudly on its stderr
        os.write(2, f"sandbox warm worker: cannot set up the run: {exc!r}\n".encode())
        os._exit(125)
    L.child(cfg)


def read_fd(fd):
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def write_file(path, src_fd):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    size = os.fstat(src_fd).st_size
    offset = 0
    while offset < size:  # kernel-side copy: the data never passes through Python objects
        offset += os.sendfile(out, src_fd, offset, size - offset)
    os.close(out)
    os.close(src_fd)


def drop_ipc(lib):
    """Remove SysV shared memory, message queues and semaphores left by the run."""
    for kind, remove in (("shm", lambda i: lib.shmctl(i, 0, None)),
                         ("msg", lambda i: lib.msgctl(i, 0, None)),
                         ("sem", lambda i: lib.semctl(i, 0, 0))):
        with open(f"/proc/sysvipc/{kind}") as f:
            ids = [int(line.split()[1]) for line in f.read().splitlines()[1:] if line.strip()]
        for ident in ids:
            if remove(ident) != 0:
                raise OSError(f"cannot remove SysV {kind} {ident}")


def wipe(lib):
    """Empty everything a run could write; returns '' or why the worker is not clean."""
    why = L.wipe([top for top in WIPE if os.path.isdir(top)])
    if why:
        return why
    try:
        drop_ipc(lib)
        if KEYCTL:
            lib.syscall(KEYCTL, KEYCTL_CLEAR, KEY_SPEC_USER_KEYRING)
    except (OSError, RecursionError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def reap_all():
    """Everything was SIGKILLed: reap until no child is left (orphans are ours, we are PID 1)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def serve(sock_fd):
    lib = libc()
    L.set_dumpable(0)  # same uid as the programs: no ptrace of us, no /proc/1/mem
    sock = socket.socket(fileno=sock_fd)
    sock.send(b"ready")
    while True:
        pid = os.fork()
        if pid == 0:
            ready_child(sock, lib)
        status, cpu = L.wait_for(pid)
        L.kill_everyone_else({"kill": "all"}, pid)
        reap_all()
        sock.send(L.dumps(L.status_fields(status, cpu)).encode())
        if sock.recv(16) != b"next":
            os._exit(0)
        why = wipe(lib)
        sock.send(b"dirty: " + why.encode() if why else b"ready")


if __name__ == "__main__":
    if sys.argv[1:2] != ["serve"]:
        raise SystemExit("usage: warm_init.pyc serve SOCK_FD")
    serve(int(sys.argv[2]))
