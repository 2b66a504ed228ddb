"""Implementation "triton": the NumPy build and search of :mod:`fuzzkit.targets.ann.index`, with the two
query-time hooks (``candidate_distances``, ``expand``) running as the Triton kernels of
:mod:`fuzzkit.targets.ann.kernels` -- natively on a GPU, under ``TRITON_INTERPRET=1`` without one.

Everything else -- probing, the ``T``-round loop, every top-E / top-k selection by (distance,
id), rerank -- is the NumPy code both implementations share, so the two differ only in the
kernels.  The hooks keep the NumPy signatures; arrays are converted at this boundary:

* device copies of the index (base vectors or codes in :func:`kernels.guarded` buffers, graph,
  turbo scales / norms / centroids) are made once per index, the queries (and, for turbo, the
  rotated queries and ``||q||^2`` -- from the same helpers the NumPy hook uses) once per search;
* ``visited`` (NumPy bool ``(q, n)``, updated in place by contract): under the interpreter the
  kernel writes straight into the NumPy buffer (a zero-copy uint8 view); on a GPU a device
  mirror is uploaded when a new ``visited`` array arrives and the host array is updated from the
  returned new ids (exactly the entries the kernel set), so a round moves ``q * E * R`` ids, not
  ``q * n`` flags.

The kernel module is imported lazily so that importing the target never imports torch/triton.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from fuzzkit.targets.ann import index as ann_index
from fuzzkit.targets.ann import model


class KernelHooks:
    """The two hooks, bound to device copies cached per index, per query batch, per visited."""

    def __init__(self) -> None:
        from fuzzkit import triton_support
        from fuzzkit.targets.ann import kernels

        self.kernels = kernels
        self.device = triton_support.device()
        #: Keep ``visited`` in a device mirror (GPU) instead of sharing the NumPy buffer (CPU).
        self.mirror = self.device != "cpu"
        self._index: Optional[ann_index.Index] = None
        self._queries: Optional[np.ndarray] = None
        self._visited: Optional[np.ndarray] = None
        self._dev: dict[str, Any] = {}

    # ---------------------------------------------------------------- device state

    def _bind(self, index: ann_index.Index, q_vectors: np.ndarray) -> dict[str, Any]:
        import torch

        k = self.kernels
        if index is not self._index:
            self._index, self._queries, self._visited = index, None, None
            dev: dict[str, Any] = {
                "graph": torch.from_numpy(np.ascontiguousarray(index.graph, np.int32))
                .to(self.device)}
            store = index.quant
            if store is None:
                dev["stored"] = k.guarded(index.base, torch.float32, self.device)
            else:
                dev["stored"] = k.code_tensor(store.codes, self.device)
                for name in ("centroids", "scales", "norms"):
                    dev[name] = torch.from_numpy(
                        np.ascontiguousarray(getattr(store, name), np.float32)).to(self.device)
            self._dev = dev
        if q_vectors is not self._queries:
            self._queries = q_vectors
            q32 = np.ascontiguousarray(q_vectors, dtype=np.float32)
            store = index.quant
            if store is None:
                self._dev["queries"] = k.guarded(q32, torch.float32, self.device)
                self._dev["turbo"] = None
            else:
                self._dev["queries"] = k.guarded(ann_index.rotated_queries(index, q32),
                                                 torch.float32, self.device)
                norms2 = model.squared_norm(q32, np.float32)
                self._dev["turbo"] = k.Turbo(
                    centroids=self._dev["centroids"], scales=self._dev["scales"],
                    norms=self._dev["norms"],
                    query_norms2=torch.from_numpy(np.ascontiguousarray(norms2)).to(self.device))
        return self._dev

    def _ids(self, ids: np.ndarray) -> Any:
        import torch

        return torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int32)).to(self.device)

    def _visited_tensor(self, visited: np.ndarray) -> Any:
        import torch

        if visited.dtype not in (np.bool_, np.uint8) or not visited.flags.c_contiguous:
            raise ValueError(  # pragma: no cover - API guard: the search's visited is C bool
                "visited must be a C-contiguous bool or uint8 array")
        flags = torch.from_numpy(visited.view(np.uint8))
        if not self.mirror:  # pragma: no branch - the mirror is the GPU path
            return flags  # shares the NumPy buffer: the kernel updates it in place
        if visited is not self._visited or "visited" not in self._dev:  # pragma: no cover - GPU
            self._visited = visited  # held, so its id cannot be reused by another array
            self._dev["visited"] = flags.to(self.device, copy=True)
        return self._dev["visited"]  # pragma: no cover - only on a GPU (device mirror)

    # ---------------------------------------------------------------- hooks

    def candidate_distances(self, index: ann_index.Index, q_vectors: np.ndarray,
                            cand: np.ndarray) -> np.ndarray:
        dev = self._bind(index, q_vectors)
        out = self.kernels.distances(dev["queries"], dev["stored"], self._ids(cand),
                                     metric=index.params.metric, turbo=dev["turbo"])
        return out.cpu().numpy()

    def expand(self, index: ann_index.Index, q_vectors: np.ndarray, frontier: np.ndarray,
               visited: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dev = self._bind(index, q_vectors)
        flags = self._visited_tensor(visited)
        new_ids, new_dist = self.kernels.expand(
            self._ids(frontier), dev["graph"], flags, dev["queries"], dev["stored"],
            metric=index.params.metric, turbo=dev["turbo"])
        ids = new_ids.cpu().numpy()
        if self.mirror:  # pragma: no cover - only on a GPU (device mirror of visited)
            rows, cols = np.nonzero(ids >= 0)
            visited[rows, ids[rows, cols]] = True
        return ids, new_dist.cpu().numpy()


def run(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``inputs -> outputs`` with the same schema as the ``numpy`` implementation."""
    hooks = KernelHooks()
    return ann_index.run(inputs, candidate_distances=hooks.candidate_distances,
                         expand=hooks.expand)
