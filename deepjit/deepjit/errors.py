"""Exception types raised by the runtime (upstream wording is kept in the messages)."""


class DeepJITError(RuntimeError):
    """Any failure of the JIT runtime: configuration, compilation, cache or launch."""


class CompileError(DeepJITError):
    """An external compiler command failed; the message holds the command and its output."""


class ToolchainNotFoundError(DeepJITError):
    """A compiler or toolkit could not be found; the message names what was looked for and where."""


class CacheSecurityError(DeepJITError):
    """A cache root or entry is writable by other users and would be loaded blindly."""
