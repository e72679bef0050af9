"""Re-express ``nt`` operands in the layout a ``nn``/``tn``/``tt`` variant expects."""
import torch


def _t(x):
    if isinstance(x, tuple):
        return tuple(_t(p) for p in x)
    return x.transpose(-2, -1)


def to_layout(layout: str, a, b):
    """``layout`` letters say whether A is ``[M, K]`` (n) or ``[K, M]`` (t) and B ``[N, K]`` (t) or ``[K, N]`` (n)."""
    return (_t(a) if layout[0] == "t" else a), (_t(b) if layout[1] == "n" else b)


def snapshot(t: torch.Tensor) -> torch.Tensor:
    return t.clone()
