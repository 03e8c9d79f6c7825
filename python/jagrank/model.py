"""JagRankModel: the PyTorch twin of the server's model (docs/model.md).

Its state_dict() keys and shapes are exactly the tensor names the server
loads, so export is a plain save (save_safetensors) and a file the server
serves loads here (load_safetensors). The forward pass takes the batch in the
server's jagged layout (values + offsets) and has no per-request Python loop.
"""

import math
from typing import Dict, List, Optional, Sequence

import torch
from torch import nn
import torch.nn.functional as F

from . import safetensors
from .batch import JaggedBatch, make_batch
from .config import ModelConfig


def hash_rows(ids: torch.Tensor, num_rows: int) -> torch.Tensor:
    """row = uint64(id) % num_rows for int64 ids (the two's-complement cast):
    a negative id is id + 2^64, so its row is (id mod n + 2^64 mod n) mod n."""
    r = torch.remainder(ids, num_rows)  # in [0, n) for every sign of id
    return torch.where(ids < 0, torch.remainder(r + (2 ** 64) % num_rows, num_rows), r)


class _Tables(nn.Module):
    """Parameters named by the caller's strings (feature names may shadow
    nn.Module attributes such as 'training', so they live in _parameters only)."""

    def add(self, name: str, param: nn.Parameter) -> None:
        self._parameters[name] = param

    def __getitem__(self, name: str) -> nn.Parameter:
        return self._parameters[name]


class _History(nn.Module):
    def __init__(self, max_len: int, d: int):
        super().__init__()
        self.position = nn.Parameter(torch.empty(max_len, d))  # row 0 = the most recent history item
        self.attn = _Tables()
        for m in ("q", "k", "v", "o"):
            self.attn.add(m, nn.Parameter(torch.empty(d, d)))    # [out, in]: y = x W^T, no bias


def _segments(offsets: torch.Tensor) -> torch.Tensor:
    """[offsets[-1]]: the sequence index of every value of a jagged tensor."""
    lengths = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(torch.arange(lengths.numel(), device=offsets.device), lengths)


def _to_padded(values: torch.Tensor, offsets: torch.Tensor, seg: torch.Tensor, max_len: int) -> torch.Tensor:
    """[T, *] jagged -> [B, max_len, *], zeros past each length."""
    index = torch.arange(values.shape[0], device=values.device) - offsets[seg]
    padded = values.new_zeros((offsets.numel() - 1, max_len) + tuple(values.shape[1:]))
    return padded.index_put((seg, index), values)


def _from_padded(padded: torch.Tensor, offsets: torch.Tensor, seg: torch.Tensor) -> torch.Tensor:
    index = torch.arange(seg.numel(), device=seg.device) - offsets[seg]
    return padded[seg, index]


def _masked_softmax(scores: torch.Tensor, key_valid: torch.Tensor) -> torch.Tensor:
    """softmax over the last axis where key_valid (broadcast) is true. A row
    with no valid key comes out uniform, finite (its output is discarded or
    multiplies zeros), so no NaN reaches the gradients."""
    scores = scores.masked_fill(~key_valid, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1)


class JagRankModel(nn.Module):
    """The model of docs/model.md with the server's tensor names:

    bottom_mlp.{i}.weight [out, in], bottom_mlp.{i}.bias [out]
    embeddings.<feature> [num_rows, d], embeddings.item [item_rows, d]
    history.position [max_history_len, d], history.attn.{q,k,v,o} [d, d]
    top_mlp.{i}.weight [out, in], top_mlp.{i}.bias [out]
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        config.validate()
        self.config = config
        d = config.embedding_dim
        widths = [config.num_dense_features] + list(config.bottom_mlp)
        self.bottom_mlp = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.embeddings = _Tables()
        for f in config.sparse_features:
            self.embeddings.add(f.name, nn.Parameter(torch.empty(f.num_rows, d)))
        self.embeddings.add("item", nn.Parameter(torch.empty(config.item_rows, d)))
        self.history = _History(config.max_history_len, d)
        widths = [config.top_mlp_input_width] + list(config.top_mlp)
        self.top_mlp = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.reset_parameters(config.seed)

    # ---- construction, weights ------------------------------------------------------------------------------------

    @classmethod
    def from_yaml(cls, path: str) -> "JagRankModel":
        return cls(ModelConfig.from_yaml(path))

    def reset_parameters(self, seed: int) -> None:
        """Linear layers U(-1/sqrt(in), 1/sqrt(in)) (weight and bias, like
        torch.nn.Linear), tables U(-1/sqrt(d), 1/sqrt(d)); from `seed`."""
        g = torch.Generator().manual_seed(seed % (1 << 63))
        table_bound = 1.0 / math.sqrt(self.config.embedding_dim)
        shapes = self.config.expected_shapes()
        with torch.no_grad():
            for name, p in self.state_dict(keep_vars=True).items():
                if name.startswith(("bottom_mlp.", "top_mlp.")):
                    bound = 1.0 / math.sqrt(shapes[name.rsplit(".", 1)[0] + ".weight"][1])
                else:
                    bound = table_bound
                p.copy_((torch.rand(p.shape, generator=g, dtype=torch.float32) * 2 - 1) * bound)

    def load_safetensors(self, path: str) -> None:
        """Loads a weights file (F32, BF16 or F16) the server would load: every
        tensor of the config with its shape, nothing else. ValueError naming the
        missing, extra, mis-shaped or non-finite tensor."""
        tensors = safetensors.load(path)
        expected = self.config.expected_shapes()
        for name, shape in expected.items():
            if name not in tensors:
                raise ValueError(f"weights file '{path}': missing tensor '{name}'")
            if tuple(tensors[name].shape) != tuple(shape):
                raise ValueError(f"weights file '{path}': tensor '{name}' has shape {list(tensors[name].shape)}, "
                                 f"the config needs {list(shape)}")
        for name in tensors:
            if name not in expected:
                raise ValueError(f"weights file '{path}': unexpected tensor '{name}' (not in the model config)")
        with torch.no_grad():
            for name, p in self.state_dict(keep_vars=True).items():
                p.copy_(tensors[name])

    def save_safetensors(self, path: str, dtype: torch.dtype = torch.float32,
                         metadata: Optional[Dict[str, str]] = None) -> None:
        """Writes every parameter under its server name, as `dtype` (F32,
        BF16 or F16; rounded to nearest even)."""
        meta = {"format": "pt", "jagrank_model": self.config.name}
        meta.update(metadata or {})
        safetensors.save(path, self.state_dict(), dtype=dtype, metadata=meta)

    # ---- forward ----------------------------------------------------------------------------------------------------

    def logits(self, batch: JaggedBatch) -> torch.Tensor:
        """[C] logits (before the sigmoid) for the batch's candidates, in order."""
        c = self.config
        d, heads = c.embedding_dim, c.attention_heads
        dh = d // heads
        param = self.history.position
        dtype, device = param.dtype, param.device
        batch = batch.to(device)
        num_requests = batch.candidate_offsets.numel() - 1

        # 1. Bottom MLP: x [R, d], ReLU after every layer.
        x = batch.dense.to(dtype)
        for layer in self.bottom_mlp:
            x = F.relu(layer(x))

        # 2. Pooled sparse features: p_f [R, d] = sum of E_f[row(id)], empty -> 0.
        pooled = []
        for f, ids, offsets in zip(c.sparse_features, batch.sparse_ids, batch.sparse_offsets):
            rows = hash_rows(ids, f.num_rows)
            pooled.append(F.embedding_bag(rows, self.embeddings[f.name], offsets, mode="sum",
                                          include_last_offset=True))

        # 3. History: the last min(len, max_history_len) ids of each request;
        # h_j = E_item[row(id_j)] + P[L-1-j] (P row 0 = the most recent).
        offsets = batch.history_offsets
        seg = _segments(offsets)
        from_end = offsets[seg + 1] - 1 - torch.arange(seg.numel(), device=device)  # 0 = most recent
        keep = from_end < c.max_history_len
        ids, seg, from_end = batch.history_ids[keep], seg[keep], from_end[keep]
        lengths = torch.clamp(offsets[1:] - offsets[:-1], max=c.max_history_len)
        offsets = torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)])
        item_table = self.embeddings["item"]
        h = item_table[hash_rows(ids, c.item_rows)] + self.history.position[from_end]

        # 5. Candidate embeddings e [C, d].
        cand_offsets = batch.candidate_offsets
        cand_seg = _segments(cand_offsets)
        e = item_table[hash_rows(batch.candidate_ids, c.item_rows)]

        max_len = int(lengths.max()) if num_requests > 0 else 0
        if max_len == 0:
            u = torch.zeros_like(e)  # 6. with no history anywhere, u = 0
        else:
            # 4. Self-attention per request over its L items, no mask but the
            # lengths: z = h + concat_heads(softmax(Q K^T / sqrt(dh)) V) Wo^T.
            key_valid = torch.arange(max_len, device=device)[None, :] < lengths[:, None]  # [R, N]
            attn = self.history.attn
            def heads_of(w):  # [T, d] -> [R, H, N, dh]
                return _to_padded(F.linear(h, w), offsets, seg, max_len).view(
                    num_requests, max_len, heads, dh).transpose(1, 2)
            q, k, v = heads_of(attn["q"]), heads_of(attn["k"]), heads_of(attn["v"])
            p = _masked_softmax(torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(dh)),
                                key_valid[:, None, None, :])
            o = torch.matmul(p, v).transpose(1, 2).reshape(num_requests, max_len, d)
            z = h + F.linear(_from_padded(o, offsets, seg), attn["o"])

            # 6. Target attention: u_c = sum_j softmax_j(e_c . z_j / sqrt(d)) z_j over
            # the candidate's request's history; L = 0 -> 0.
            zp = _to_padded(z, offsets, seg, max_len)                                   # [R, N, d]
            max_cands = int((cand_offsets[1:] - cand_offsets[:-1]).max())
            ep = _to_padded(e, cand_offsets, cand_seg, max_cands)                       # [R, M, d]
            p = _masked_softmax(torch.matmul(ep, zp.transpose(1, 2)) * (1.0 / math.sqrt(d)),
                                key_valid[:, None, :])
            u = _from_padded(torch.matmul(p, zp), cand_offsets, cand_seg)
            u = u * (lengths[cand_seg] > 0).to(dtype)[:, None]

        # 7. Interaction: v = [x, p_1..p_F, u_c, e_c]; t = v_a . v_b, a < b, row-major.
        xc = x[cand_seg]
        vecs = torch.stack([xc] + [pf[cand_seg] for pf in pooled] + [u, e], dim=1)  # [C, n, d]
        n = vecs.shape[1]
        gram = torch.bmm(vecs, vecs.transpose(1, 2))
        a, b = torch.triu_indices(n, n, offset=1, device=device)
        y = torch.cat([xc, gram[:, a, b]], dim=1)

        # 8. Top MLP: ReLU after every layer but the last.
        for i, layer in enumerate(self.top_mlp):
            y = layer(y)
            if i + 1 < len(self.top_mlp):
                y = F.relu(y)
        return y[:, 0]

    def forward(self, batch: JaggedBatch) -> torch.Tensor:
        """[C] scores = sigmoid(logits) in (0, 1) (float rounding can reach 0 or 1)."""
        return torch.sigmoid(self.logits(batch))

    def rank(self, requests: Sequence[dict], max_candidates_per_batch: int = 65536) -> List[List[float]]:
        """Scores like the server's Rank RPC. Each request is a dict
        {"dense": [float], "sparse": {name: [int]}, "history": [int],
        "candidates": [int]}; absent "sparse" names or keys pool to zero,
        ids are int64 (hashed as uint64), histories longer than
        max_history_len keep the most recent. Returns one list of floats per
        request, one score per candidate. ValueError naming the request and
        the field for input the server would refuse."""
        out: List[List[float]] = []
        start = 0
        with torch.no_grad():
            while start < len(requests):
                end, candidates = start, 0
                while end < len(requests) and (end == start or candidates + len(requests[end].get(
                        "candidates", ())) <= max_candidates_per_batch):
                    candidates += len(requests[end].get("candidates", ()))
                    end += 1
                batch = make_batch(self.config, requests[start:end], first_index=start)
                scores = self.forward(batch).to("cpu", torch.float64).tolist()
                counts = (batch.candidate_offsets[1:] - batch.candidate_offsets[:-1]).tolist()
                pos = 0
                for count in counts:
                    out.append(scores[pos:pos + count])
                    pos += count
                start = end
        return out
