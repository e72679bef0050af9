"""Running external commands as argument lists (never through a shell)."""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Sequence

from .errors import CompileError, ToolchainNotFoundError


def shell_join(argv: Sequence[str]) -> str:
    """Space-joined form used for cache keys, meta.json and messages (upstream's join)."""
    return " ".join(argv)


def printable(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def call_external_command(argv: Sequence[str], cwd: str | None = None, print_command: bool = False,
                          env: dict | None = None) -> str:
    """Runs ``argv`` in ``cwd`` and returns stdout+stderr; a non-zero exit raises with all output.

    Never through a shell: paths and flags holding spaces or metacharacters stay single arguments.

    A death by signal counts as exit code ``128 + signo``, as ``pclose`` reports it upstream.
    """
    argv = [str(a) for a in argv]
    if print_command:
        print(f"Running command: {printable(argv)}", flush=True)
    try:
        proc = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    except FileNotFoundError:
        raise ToolchainNotFoundError(f"command not found: {argv[0]}") from None
    except PermissionError:
        raise ToolchainNotFoundError(f"command is not executable: {argv[0]}") from None
    return _checked(argv, proc.returncode, proc.stdout)


def _checked(argv: list[str], returncode: int, stdout: bytes) -> str:
    output = stdout.decode("utf-8", "replace")
    code = returncode if returncode >= 0 else 128 - returncode
    if code != 0:
        raise CompileError(f"command failed with exit code {code}:\n{printable(argv)}\n{output}")
    return output


# The compiler runs in its own process group under this watchdog: fd 3 is a pipe whose write end only
# the Python process holds, so when that process dies in any way (SIGKILL included) the read sees EOF
# and the whole group (driver, cc1plus, as, ld) is killed instead of running on as orphans. The
# compiler's own arguments pass through "$@" untouched (no shell parsing).
_WATCHDOG = 'exec 3<&0; "$@" </dev/null & c=$!; (read -r _ <&3; kill -KILL 0) & w=$!; wait $c; s=$?; ' \
            'kill $w 2>/dev/null; exit $s'


def call_compiler(argv: Sequence[str], cwd: str | None = None, print_command: bool = False) -> str:
    """``call_external_command`` for compiler steps: own process group, which dies with this process
    (see ``_WATCHDOG``) or is killed when waiting for it is interrupted (KeyboardInterrupt, ...)."""
    argv = [str(a) for a in argv]
    if print_command:
        print(f"Running command: {printable(argv)}", flush=True)
    exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0])
    if exe is None or not os.path.isfile(exe):
        raise ToolchainNotFoundError(f"command not found: {argv[0]}")
    if not os.access(exe, os.X_OK):
        raise ToolchainNotFoundError(f"command is not executable: {argv[0]}")
    proc = subprocess.Popen(["/bin/sh", "-c", _WATCHDOG, "dj-compiler", *argv], cwd=cwd, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, process_group=0)
    try:
        stdout = proc.stdout.read()  # stdin stays open: closing it is the watchdog's "parent gone"
        proc.wait()
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        raise
    finally:
        proc.stdin.close()
        proc.stdout.close()
    return _checked(argv, proc.returncode, stdout)
