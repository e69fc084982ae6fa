"""A command's exit code and output for the node scripts, without the subprocess module:
importing it (threading, selectors, contextlib, locale) was a third of a round trip's CPU
on the node, every second of a watch (docs/internals.md#the-node-scripts).

`run(argv)` spawns argv from PATH (os.posix_spawnp) with stdin from /dev/null, stdout
and (unless stderr=False, then /dev/null) stderr on one pipe, SIGPIPE and SIGXFSZ back to
their defaults as subprocess leaves them; (exit code, output bytes), -N when signal N
ended it. An argv that cannot be run raises OSError, as subprocess.run does; a command
still running after timeout seconds is killed and TimeoutError raised.
"""

import _signal  # the constants alone: the signal module would import its enums
import os
import select
import time


def run(argv, stderr=True, timeout=None):
    """(exit code, stdout bytes) of argv (see the module's docstring)."""
    read_end, write_end = os.pipe()
    actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_DUP2, write_end, 1),
               (os.POSIX_SPAWN_DUP2, write_end, 2) if stderr else
               (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)]
    try:
        pid = os.posix_spawnp(argv[0], list(argv), os.environ, file_actions=actions,
                              setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ))
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    chunks, deadline = [], None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([read_end], [], [], left)[0]:
                    os.kill(pid, _signal.SIGKILL)
                    raise TimeoutError("%s: still running after %s s" % (argv[0], timeout))
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        status = os.waitpid(pid, 0)[1]
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return code, b"".join(chunks)
