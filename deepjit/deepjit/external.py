"""Running external commands as argument lists (never through a shell)."""
from __future__ import annotations

import shlex
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
    output = proc.stdout.decode("utf-8", "replace")
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    if code != 0:
        raise CompileError(f"command failed with exit code {code}:\n{printable(argv)}\n{output}")
    return output
