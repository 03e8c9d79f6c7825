"""Requests as dicts -> one jagged batch in the server's layout.

    dense               [R, num_dense_features] float32 (the wire's type)
    sparse_ids[f]       [sum of lengths] int64, sparse_offsets[f] [R+1]   (config order)
    history_ids         [T] int64 (oldest first), history_offsets [R+1]
    candidate_ids       [C] int64, candidate_offsets [R+1]

Offsets are int64 tensors starting at 0, non-decreasing; len(r) =
offsets[r+1] - offsets[r]. Histories may be longer than max_history_len
here: the model keeps the most recent max_history_len of each.
"""

import dataclasses
from typing import List, Sequence

import torch

from .config import ModelConfig

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


@dataclasses.dataclass
class JaggedBatch:
    dense: torch.Tensor
    sparse_ids: List[torch.Tensor]
    sparse_offsets: List[torch.Tensor]
    history_ids: torch.Tensor
    history_offsets: torch.Tensor
    candidate_ids: torch.Tensor
    candidate_offsets: torch.Tensor

    @property
    def num_requests(self) -> int:
        return self.candidate_offsets.numel() - 1

    def to(self, device) -> "JaggedBatch":
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        return JaggedBatch(move(self.dense), [move(t) for t in self.sparse_ids],
                           [move(t) for t in self.sparse_offsets], move(self.history_ids),
                           move(self.history_offsets), move(self.candidate_ids), move(self.candidate_offsets))


def _offsets(lengths: List[int]) -> torch.Tensor:
    out = torch.zeros(len(lengths) + 1, dtype=torch.int64)
    if lengths:
        out[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int64), 0)
    return out


def _ids(values, where: str) -> List[int]:
    out = list(values)
    for i, v in enumerate(out):
        if isinstance(v, bool) or not isinstance(v, int) and not (hasattr(v, "__index__")):
            raise ValueError(f"{where}[{i}] = {v!r}: ids are int64 integers")
        v = int(v)
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise ValueError(f"{where}[{i}] = {v}: outside int64 [-2^63, 2^63-1]")
    return [int(v) for v in out]


def make_batch(config: ModelConfig, requests: Sequence[dict], first_index: int = 0) -> JaggedBatch:
    """One batch from request dicts (see JagRankModel.rank). ValueError
    naming the request and the field for what the server refuses: a wrong
    number of dense values, a NaN/Inf dense value (after the float32
    rounding of the wire), an unknown sparse feature name, no candidates,
    ids outside int64, an unknown key."""
    names = config.sparse_feature_names
    dense, sparse_ids, sparse_lengths = [], [[] for _ in names], [[] for _ in names]
    history, history_lengths, candidates, candidate_lengths = [], [], [], []
    for i, request in enumerate(requests):
        where = f"request {first_index + i}"
        if not isinstance(request, dict):
            raise ValueError(f"{where}: expected a dict with dense, sparse, history, candidates")
        for key in request:
            if key not in ("dense", "sparse", "history", "candidates"):
                raise ValueError(f"{where}: unknown key '{key}' (dense, sparse, history, candidates)")
        values = [float(v) for v in request.get("dense", ())]
        if len(values) != config.num_dense_features:
            raise ValueError(f"{where}: dense has {len(values)} values: expected exactly num_dense_features = "
                             f"{config.num_dense_features}")
        dense.append(values)
        sparse = request.get("sparse", {}) or {}
        for name in sparse:
            if name not in names:
                raise ValueError(f"{where}: sparse has unknown feature name '{name}': the model's features are "
                                 f"[{', '.join(names)}]")
        for f, name in enumerate(names):
            ids = _ids(sparse.get(name, ()), f"{where}: sparse['{name}']")
            sparse_ids[f] += ids
            sparse_lengths[f].append(len(ids))
        ids = _ids(request.get("history", ()), f"{where}: history")
        history += ids
        history_lengths.append(len(ids))
        ids = _ids(request.get("candidates", ()), f"{where}: candidates")
        if not ids:
            raise ValueError(f"{where}: candidates is empty: need at least one")
        candidates += ids
        candidate_lengths.append(len(ids))
    dense_t = torch.tensor(dense, dtype=torch.float32).reshape(len(requests), config.num_dense_features)
    if not torch.isfinite(dense_t).all():
        r, j = [int(v) for v in (~torch.isfinite(dense_t)).nonzero()[0]]
        raise ValueError(f"request {first_index + r}: dense[{j}] = {dense[r][j]} is NaN or Inf as float32: "
                         "every dense value must be finite")
    as_ids = lambda v: torch.tensor(v, dtype=torch.int64).reshape(-1)  # noqa: E731
    return JaggedBatch(
        dense=dense_t,
        sparse_ids=[as_ids(v) for v in sparse_ids],
        sparse_offsets=[_offsets(v) for v in sparse_lengths],
        history_ids=as_ids(history), history_offsets=_offsets(history_lengths),
        candidate_ids=as_ids(candidates), candidate_offsets=_offsets(candidate_lengths))



def to_requests(config: ModelConfig, batch: JaggedBatch) -> List[dict]:
    """The inverse of make_batch: one request dict per row of `batch` (an
    empty sparse list stays present and empty)."""
    def split(values, offsets):
        values, offsets = values.tolist(), offsets.tolist()
        return [values[offsets[r]:offsets[r + 1]] for r in range(len(offsets) - 1)]
    dense = batch.dense.to(torch.float32).tolist()
    history = split(batch.history_ids, batch.history_offsets)
    candidates = split(batch.candidate_ids, batch.candidate_offsets)
    sparse = [split(i, o) for i, o in zip(batch.sparse_ids, batch.sparse_offsets)]
    return [{"dense": dense[r], "sparse": {f.name: sparse[k][r] for k, f in enumerate(config.sparse_features)},
             "history": history[r], "candidates": candidates[r]} for r in range(len(candidates))]
