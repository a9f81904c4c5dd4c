"""A real ``attnplug serve`` for the tests, from the built binaries
($ATTNPLUG_BIN, default bin/ at the repository root: make build)."""

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("ATTNPLUG_BIN") or os.path.join(ROOT, "bin")
HOST = os.path.join(BIN, "attnplug")

_READY = re.compile(r"listening on (\S+),")


def require_binaries():
    """Fails the test, rather than skip it, when the binaries are missing:
    make test-python builds them."""
    if not os.access(HOST, os.X_OK) or not os.path.isdir(os.path.join(BIN, "plugins")):
        raise AssertionError("no built attnplug in %s: run make build (make test-python does)" % BIN)


def copy_tree(dst):
    """Copies bin/attnplug and bin/plugins to dst; returns dst's host."""
    os.makedirs(os.path.join(dst, "plugins"), mode=0o755)
    shutil.copy2(HOST, os.path.join(dst, "attnplug"))
    for f in os.listdir(os.path.join(BIN, "plugins")):
        shutil.copy2(os.path.join(BIN, "plugins", f), os.path.join(dst, "plugins", f))
    return os.path.join(dst, "attnplug")


def nobody():
    """The passwd entry of the user nobody, for a server run by another
    local user; skips the test (unittest.SkipTest), saying why, unless this
    process runs as root (only root may start one as another user) and the
    user exists."""
    if os.getuid() != 0:
        raise unittest.SkipTest("starts attnplug serve as the user nobody, which only root may do (running as uid %d)" % os.getuid())
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        raise unittest.SkipTest("starts attnplug serve as the user nobody, who does not exist here") from None


class Server:
    """attnplug serve on a Unix socket in a private directory; with user
    (a passwd entry), run as that user, the directory (socket, description
    cache, plugin sockets) its own."""

    def __init__(self, host=HOST, env=None, args=(), socket=None, tcp=False, user=None, dir=None):
        self.dir = dir or tempfile.mkdtemp(prefix="ap-py-")
        self.socket = socket or os.path.join(self.dir, "s.sock")
        self.address = "127.0.0.1:0" if tcp else "unix://" + self.socket
        self.host = host
        self.env = dict(os.environ, ATTNPLUG_CACHE_DIR=os.path.join(self.dir, "cache"), **(env or {}))
        self.user = user
        if user is not None:
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self.env.update(TMPDIR=self.dir, XDG_RUNTIME_DIR="")
            if host == HOST:
                # The checkout may sit where that user cannot reach (a
                # clone in a 0700 temporary directory): a copy of the
                # binaries in the server's own directory, which it can.
                require_binaries()
                self.host = copy_tree(os.path.join(self.dir, "tree"))
        self.args = list(args)
        self.lines = []
        self.proc = None

    def start(self, timeout=60):
        require_binaries()
        cmd = [self.host, "serve", "--listen", self.address, "--metrics-listen", "",
               "--match-hardware=false", "--log-level", "info"] + self.args
        as_user = {}
        if self.user is not None:
            as_user = dict(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
        self.proc = subprocess.Popen(cmd, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, **as_user)
        ready = threading.Event()

        def read(proc=self.proc):
            with proc.stderr:
                for line in proc.stderr:
                    self.lines.append(line)
                    m = _READY.search(line)
                    if m and not ready.is_set():
                        self.address = m.group(1)
                        ready.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not ready.wait(timeout):
            self.stop()
            raise AssertionError("attnplug serve never said it was ready:\n" + "".join(self.lines))
        return self

    def log(self):
        return "".join(self.lines)

    def signal(self, sig):
        self.proc.send_signal(sig)

    def kill(self):
        """SIGKILL, as a crash would."""
        self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cleanup(self):
        self.stop()
        if self.proc is not None:
            self._reader.join(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()


def dispatch_cli(lines, platform="cuda"):
    """Runs the JSON Lines through ``attnplug dispatch`` (the Go registry in
    process, no server) and returns its answers, parsed."""
    import json
    require_binaries()
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([HOST, "dispatch", "--platform", platform], input=lines, capture_output=True,
                             text=True, env=dict(os.environ, ATTNPLUG_CACHE_DIR=d), timeout=300)
    if out.returncode not in (0, 1):
        raise AssertionError("attnplug dispatch exited %d: %s" % (out.returncode, out.stderr[-2000:]))
    return [json.loads(x) for x in out.stdout.splitlines()]


def wait_until(cond, timeout=15, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
