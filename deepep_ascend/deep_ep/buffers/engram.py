"""``EngramBuffer`` (V2.5): a table sharded over the ranks, rows fetched by global entry id.

Layer ``l`` of the table has ``num_ranks * num_entries_per_layer[l]`` rows; global id
``rank * num_entries_per_layer[l] + i`` is row ``i`` of that rank's shard. ``write`` stores every
rank's shards (collective), ``fetch(indices [L, T, entries])`` returns one hook per layer whose
call gives the ``[T, entries * hidden]`` rows (and, for FP8 tables, the ``[T, entries * packs]``
scales from the replicated scale table).

Over shared memory the shards live in a ``deepjit.symm`` window and a fetch reads the peers' rows
in place; across hosts ``write`` all-gathers the table, so fetches are local reads either way. On the
Ascend path (NPU tensors, or CPU tensors under ``EP_BACKEND=ascend``) the table is all-gathered on the
device (HCCL; gloo on the twin) and a fetch is one vector-kernel gather per table (``ascend/gather.py``)
that reads no value back to the host: ids are checked for range only off the Ascend path, and there an
out-of-range id gives a zero row.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from deepjit import validation as V
from deepjit.symm import SymmetricWindow

from .. import comm
from .._dispatch import TABLE
from .._lib import LIB, threads_per_rank
from ..engine.layout import ALLOCATION_ALIGNMENT
from ..transport import choose_transport
from ..utils.math import align
from .base import BufferBase


def _on_ascend(device) -> bool:
    return LIB.backend_for(device, has_ascend=True) == "ascend"


class EngramBuffer(BufferBase):
    barrier = comm.barrier
    get_comm_stream = comm.get_comm_stream
    get_physical_domain_size = comm.get_physical_domain_size
    get_logical_domain_size = comm.get_logical_domain_size

    def __init__(self, group: dist.ProcessGroup, num_gpu_bytes: int, num_rdma_storage_bytes: int,
                 use_cpu_rdma_storage: bool, num_allocated_qps: int, qp_depth: int,
                 restrict_rd_atomic: bool = False, allow_hybrid_mode: bool = True, sl_idx: int | None = None,
                 num_gpu_timeout_secs: int = 100, explicitly_destroy: bool = False):
        super().__init__(explicitly_destroy)
        group = group if group is not None else dist.group.WORLD
        for name, value in (("num_gpu_bytes", num_gpu_bytes), ("num_rdma_storage_bytes", num_rdma_storage_bytes),
                            ("num_allocated_qps", num_allocated_qps), ("qp_depth", qp_depth)):
            V.integer(name, value, lo=0 if "bytes" in name else 1)   # sizes: get_storage_size_hint / get_theoretical_config
        self.group = group
        self.rank_idx = group.rank()
        self.num_ranks = group.size()
        self.num_gpu_bytes = num_gpu_bytes
        self.num_rdma_storage_bytes = num_rdma_storage_bytes
        self.use_cpu_rdma_storage = bool(use_cpu_rdma_storage)
        self.allow_hybrid_mode = bool(allow_hybrid_mode)
        self.num_allocated_qps = num_allocated_qps
        self._config = None
        self._written = False  # write(...) has filled the table of the current config
        self._window = None
        self._tables: list[torch.Tensor] | None = None   # all-gathered layers (collective transports)
        self._sfs: list[torch.Tensor] | None = None
        if choose_transport(group, "cpu", LIB.backend_for(torch.device("cpu"), has_ascend=True) == "host") == "shm":
            self._window = SymmetricWindow.create(group, max(num_rdma_storage_bytes, 1), name_hint="deep_ep_engram",
                                                  num_signals=0, timeout_s=float(num_gpu_timeout_secs))
        self.num_scaleout_ranks, self.num_scaleup_ranks = self.get_logical_domain_size()
        self.scaleout_rank_idx = self.rank_idx // self.num_scaleup_ranks
        self.scaleup_rank_idx = self.rank_idx % self.num_scaleup_ranks
        self.num_rdma_ranks, self.num_nvlink_ranks = self.get_physical_domain_size()
        self._threads = threads_per_rank(self.num_nvlink_ranks)  # the fetch's gather kernel
        dist.barrier(group=group)

    def _release(self) -> None:
        if not self._destroyed and self._window is not None:
            self._window.destroy()
        self._tables = self._sfs = None
        super()._release()

    # ---- sizing ----------------------------------------------------------------------------------
    @staticmethod
    def get_storage_size_hint(group: dist.ProcessGroup, num_entries_per_layer: list[int], hidden: int,
                              num_max_tokens: int, num_entries_per_token: int, dtype: torch.dtype = torch.bfloat16,
                              num_sf_packs: int = 0) -> tuple[int, int]:
        """``(num_gpu_bytes, num_rdma_storage_bytes)``: the fetch outputs of every layer plus this
        rank's share of the scale table, and this rank's shards, each 2 MiB aligned."""
        if not isinstance(dtype, torch.dtype):
            raise V.fail("dtype", "a torch.dtype", type(dtype).__name__, TypeError)
        itemsize = dtype.itemsize
        layers = len(num_entries_per_layer)
        fetched = layers * num_max_tokens * num_entries_per_token * (hidden * itemsize + num_sf_packs * 4)
        scales = sum(num_entries_per_layer) * num_sf_packs * 4
        storage = sum(n * hidden * itemsize for n in num_entries_per_layer)
        return align(fetched + scales, ALLOCATION_ALIGNMENT), align(storage, ALLOCATION_ALIGNMENT)

    @staticmethod
    def get_theoretical_config(group: dist.ProcessGroup, num_layers: int, num_max_tokens: int,
                               num_entries_per_token: int, num_max_read_requests_per_qp: int = 16
                               ) -> tuple[int, int, bool]:
        """``(num_qps, qp_depth, restrict_rd_atomic)``: on CPU a "QP" is a reader; one per layer."""
        return max(1, num_layers), max(1, num_max_read_requests_per_qp), False

    def set_config(self, num_entries_per_layer: list[int], hidden: int, num_max_tokens: int,
                   num_entries_per_token: int, dtype: torch.dtype = torch.bfloat16, num_sf_packs: int = 0) -> None:
        self._check_alive()
        V.choice("dtype", dtype, (torch.bfloat16, torch.float8_e4m3fn))
        if (dtype == torch.float8_e4m3fn) != (num_sf_packs > 0):
            raise V.fail("num_sf_packs", f"{'> 0 (scale packs per entry)' if dtype == torch.float8_e4m3fn else 0} for a "
                         f"{dtype} table", num_sf_packs)
        entries = [int(n) for n in num_entries_per_layer]
        if not entries or any(n <= 0 for n in entries) or hidden <= 0 or num_max_tokens <= 0 \
                or num_entries_per_token <= 0:
            name, value = next(((n, v) for n, v, bad in (
                ("num_entries_per_layer", entries, not entries or any(n <= 0 for n in entries)),
                ("hidden", hidden, hidden <= 0), ("num_max_tokens", num_max_tokens, num_max_tokens <= 0),
                ("num_entries_per_token", num_entries_per_token, True)) if bad))
            raise V.fail(name, "a non-empty list of positive counts" if name == "num_entries_per_layer" else
                         "a positive int", value)
        need = self.get_storage_size_hint(self.group, entries, hidden, num_max_tokens, num_entries_per_token,
                                          dtype, num_sf_packs)[1]
        if need > self.num_rdma_storage_bytes:
            raise V.fail("num_rdma_storage_bytes", f"at least the {need} bytes this configuration needs (size it with "
                         f"get_storage_size_hint(...))", self.num_rdma_storage_bytes)
        self._config = (entries, hidden, num_max_tokens, num_entries_per_token, dtype, num_sf_packs)
        self._written = False

    # ---- write and fetch ----------------------------------------------------------------------------
    def _layer_views(self, peer: int) -> list[torch.Tensor]:
        entries, hidden, _, _, dtype, _ = self._config
        views, offset = [], 0
        for n in entries:
            views.append(self._window.tensor(peer, dtype, (n, hidden), offset))
            offset += n * hidden * dtype.itemsize
        return views

    def write(self, storages: list[torch.Tensor], sfs: list[torch.Tensor] | None = None) -> None:
        """Every rank stores its shard of every layer (collective; the table is complete on return)."""
        self._check_alive()
        if self._config is None:
            raise ValueError("call set_config(...) before write")
        entries, hidden, _, _, dtype, packs = self._config
        if not isinstance(storages, (list, tuple)) or len(storages) != len(entries):
            raise V.fail("storages", f"a list of {len(entries)} layers", f"a {type(storages).__name__}"
                         + (f" of {len(storages)}" if isinstance(storages, (list, tuple)) else ""))
        for layer, (t, n) in enumerate(zip(storages, entries, strict=True)):
            V.tensor(f"storages[{layer}]", t, dtypes=(dtype,), shape=(n, hidden))
        if packs:
            if not isinstance(sfs, (list, tuple)) or len(sfs) != len(entries):
                raise V.fail("sfs", f"a list of {len(entries)} replicated scale tables for an FP8 table", f"a {type(sfs).__name__}"
                             + (f" of {len(sfs)}" if isinstance(sfs, (list, tuple)) else ""))
            for layer, (sf, n) in enumerate(zip(sfs, entries, strict=True)):
                shape = (self.num_ranks * n, packs)
                # A pack is an opaque 4-byte element: FP32 scales or four packed UE8M0 exponents.
                V.tensor(f"sfs[{layer}]", sf, dtypes=(torch.float32, torch.int32), shape=shape)  # every rank's
        elif sfs is not None:
            raise V.fail("sfs", "None for a BF16 table", f"a {type(sfs).__name__}")
        device = V.same_device(*((f"storages[{i}]", t) for i, t in enumerate(storages)),
                               *((f"sfs[{i}]", sf) for i, sf in enumerate(sfs or ())))
        dist.barrier(group=self.group)  # no rank still reads the previous table
        if self._window is not None and not _on_ascend(device):
            for view, t in zip(self._layer_views(self.rank_idx), storages, strict=True):
                view.copy_(t)
            self._tables = None   # fetches read the window, not a table of an earlier write
        else:
            self._tables = []   # on the storages' device
            for t in storages:
                raw = t.contiguous().view(torch.uint8)  # gloo moves bytes of any dtype
                parts = [torch.empty_like(raw) for _ in range(self.num_ranks)]
                dist.all_gather(parts, raw, group=self.group)
                self._tables.append(torch.cat(parts).view(t.dtype))
        self._sfs = [sf.contiguous().clone() for sf in sfs] if packs else None
        self._written = True
        dist.barrier(group=self.group)  # every shard is in place

    def fetch(self, indices: torch.Tensor, num_qps: int = 0, use_tma_aligned_col_major_sf: bool = True
              ) -> list[Callable]:
        """Rows of ``indices [num_layers, T, entries]`` (int32 global ids); one hook per layer."""
        self._check_alive()
        if not self._written:
            raise ValueError("call set_config(...) and write(...) before fetch")
        entries, hidden, max_tokens, per_token, dtype, packs = self._config
        L = len(entries)
        V.tensor("indices", indices, dtypes=(torch.int32,), shape=(L, None, per_token))
        if indices.shape[1] > max_tokens:
            raise V.fail("indices", f"at most num_max_tokens ({max_tokens}) tokens", f"shape {tuple(indices.shape)}")
        V.integer("num_qps", num_qps, 0, self.num_allocated_qps)
        device = self._tables[0].device if self._tables is not None else torch.device("cpu")
        if indices.device != device:
            raise V.fail("indices", f"device {device} (the written table's)", indices.device)
        if not _on_ascend(device):   # a host read: the Ascend kernel gives zero rows instead
            for layer, n in enumerate(entries):
                bad = (indices[layer] < 0) | (indices[layer] >= self.num_ranks * n)
                if bool(bad.any()):
                    where = bad.nonzero()[0].tolist()
                    raise V.fail("indices", f"entries in [0, {self.num_ranks * n}) for layer {layer}",
                                 f"indices[{layer}, {where[0]}, {where[1]}] = {int(indices[layer][tuple(where)])}")
        T = indices.shape[1]
        results = []
        for layer, n in enumerate(entries):
            ids = indices[layer].reshape(-1)
            # the all-gathered table is one peer of all its rows; the window's shards are read in place
            peers, rows = (([self._tables[layer]], self._tables[layer].shape[0]) if self._tables is not None
                           else ([self._layer_views(peer)[layer] for peer in range(self.num_ranks)], n))
            out = TABLE.run("engram_gather", device, peers, rows, ids, self._threads).view(T, per_token * hidden)
            if packs:
                scales = self._sfs[layer]
                sf = TABLE.run("engram_gather", device, [scales], scales.shape[0], ids, self._threads)
                sf = sf.view(T, per_token * packs)
                if use_tma_aligned_col_major_sf:
                    sf = sf.T.contiguous().T
                out = (out, sf)
            results.append(out)
        return [lambda r=r: r for r in results]
