"""Failures of a symmetric window; each message names the peer involved."""


class SymmetricWindowError(RuntimeError):
    """The window is unusable (destroyed, or a peer failed)."""


class PeerTimeoutError(SymmetricWindowError, TimeoutError):
    """A wait ran past its timeout."""


class PeerDiedError(SymmetricWindowError):
    """A local peer process exited while this rank depended on it."""


class PeerAbortedError(SymmetricWindowError):
    """A local peer hit an error and aborted the window, so this rank stops waiting for it."""
