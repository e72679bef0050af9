"""How ranks exchange bytes: a symmetric shared-memory window inside one host (``shm``), that
window inside each host plus ``torch.distributed`` collectives between hosts (``hybrid``), or
collectives only (``dist``; gloo on CPU, HCCL on Ascend).

Both transports move the same byte layouts (dispatch slots, combine rows) and expose the same
steps, so the host kernels and the engine do not care which one runs:

    begin(seq, signature, error)   collective handshake: every rank posts what it is about to do;
                                   mismatches and per-rank errors raise on every rank
    post_counts(counts)            per-destination count rows (dispatch only)
    recv_counts() -> [R, R, C]     every rank's count rows, [source, destination, C]
    send_bases(...) -> [R] int64   where this rank writes its block for each destination
    finish_send(...)               publish (window) or run the all-to-all (collectives)
    recv_bases(...) -> [R] int64   where the block from each source is readable
"""
from .topology import choose_transport

__all__ = ["choose_transport"]
