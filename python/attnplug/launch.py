"""python -m attnplug.launch MODULE [ARGS...]: runs MODULE (such as
sglang.launch_server) as ``python -m MODULE ARGS...`` would, with
attnplug.sglang installed in this process and in every process it starts
through multiprocessing's spawn, as sglang starts its schedulers: such a
process imports this module first, and installs too. The ``attnplug``
attention backend is registered first (attnplug.sglang_backend), so that
``--attention-backend attnplug`` is a choice when sglang reads it.

The server is $ATTNPLUG_ADDRESS, else attnplug serve's default socket. A
process where the install fails (no sglang there) logs why and runs on
with sglang's own registry.
"""

import logging
import os
import runpy
import sys

from attnplug import client, sglang


def _install():
    try:
        # The attnplug attention backend, before sglang reads its arguments
        # (--attention-backend attnplug must be a choice by then).
        from attnplug import sglang_backend
        sglang_backend.register_backend()
    except Exception as exc:
        logging.getLogger("attnplug.sglang").warning(
            "attnplug attention backend not registered in process %d (%s: %s)", os.getpid(), type(exc).__name__, exc)
    try:
        sglang.install(client.default_address())
    except Exception as exc:  # the process runs on, with sglang's registry
        logging.getLogger("attnplug.sglang").warning(
            "attnplug not installed in process %d (%s: %s); sglang's own registry answers",
            os.getpid(), type(exc).__name__, exc)


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.stderr.write("usage: python -m attnplug.launch MODULE [ARGS...]  (such as sglang.launch_server)\n")
        return 2
    target = sys.argv[1]
    os.environ.setdefault("ATTNPLUG_ADDRESS", client.default_address())
    _install()
    sys.argv = [target] + sys.argv[2:]
    runpy.run_module(target, run_name="__main__", alter_sys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
elif __name__ == "__mp_main__":
    _install()
