#!/usr/bin/env python3
"""jagrank against the model's own PyTorch twin, on one GPU, same model, same weights.

Three parts (--parts twin,inprocess,served), each in its own try block so one
failure still reports the others:

  twin       The PyTorch twin (python/jagrank) in this process, batches already
             on the device, in --dtype (bf16): a "fast twin" built from the
             twin's weights with torch's best jagged pieces: varlen
             FlashAttention-2 (torch.ops.aten._flash_attention_forward with
             cum_seq_q/cum_seq_k = offsets) for the history self-attention and
             for target attention (candidate offsets as queries, history
             offsets as keys), one embedding_bag over the 26 tables stacked,
             a gather + bmm dot interaction, nn.Linear MLPs. Eager and
             torch.compile. Before timing, the fast twin is checked against the
             twin's reference forward in float32 on a few requests (drawn from
             the law plus two edge cases: a history longer than
             max_history_len with negative ids, an empty history with an empty
             sparse list): its math in float32 (max abs logit error over the
             reference logits' spread, --fp32-tolerance; a random model's
             scores spread little, so bf16 rounding would hide a wrong formula), varlen FA2 against plain attention on the check
             batch's offsets (--kernel-tolerance), and the benchmarked --dtype
             end to end (max abs score error, --tolerance, 1e-2 for bf16). The
             script exits 1 on a mismatch; ctest runs the --quick CPU mode
             (python_model_vs_torch_quick_test).
  inprocess  jagrank-bench-model (--bench-binary): the model alone in its own
             process, same model config and length laws. It draws its own
             batches (same laws; its sparse features get 1-4 ids each, its
             fixed law) and, unless the binary takes --model-weights, its own
             random weights from the config's seed (a forward pass costs the
             same whatever the weight values). Pipelined by default
             (--pipelined: batch i+1 staged and launched before batch i is
             waited for, as the server's executor runs the model; the twin's
             batches are on the device before its timing starts).
  served     jagrank-server (--server-binary) with --model-weights = the file
             the twin wrote, on this host, driven over gRPC by
             jagrank-loadgen (--loadgen-binary, its own requests, same laws,
             --sparse-ids-max) with a closed-loop concurrency ramp; the best
             candidates/s whose p99 <= --p99-ms (no errors) counts.

Workload (defaults): histories log-normal, median 250, sigma 1.2, capped at the
model's max_history_len (2048 for config/models/production.yaml); 20-400
candidates, uniform; 1-8 ids per sparse feature, uniform; 128 and 512 requests
per batch. The twin's batches are laid out once, outside timing, the way the
server's batch assembly lays them out (histories cut to the most recent
max_history_len, int32 offsets, each token's request and position, each sparse
id's feature); the timed forward does the rest: hashing ids to rows, lookups,
MLPs, attention, interaction. Timing: CUDA events around a run of batches
rotated among --batches distinct ones, after warm-up (for torch.compile the
compilation happens in the warm-up); scores stay on the device (no per-batch
synchronization: the twin's best case) unless --scores-to-host.

Reported per part: requests/s, candidates/s, ms per batch, peak device memory
(torch.cuda.max_memory_allocated for the twin; the binaries' own figures for
the others) and nvidia-smi's memory.used, the GPU busy share (nvidia-smi
utilization.gpu sampled every 100 ms during the timed window), and useful
TFLOP/s: the model's FLOPs counted per request and per candidate (bottom MLP,
QKV and O projections 2*L*d*d*4, self-attention 4*L^2*d, target attention
4*L*d per candidate, the n(n-1)/2 dot products, top MLP) as a share of a bf16
GEMM peak measured in the same run (8192^3 matmul, median of 10). Last, the
line `jagrank served vs torch twin in process: X` (best served candidates/s
over the best twin variant's), and everything as JSON to --out.

On the GPU machine (about 4-6 minutes with the defaults):
  python3 bench/model_vs_torch.py --bench-binary build/bin/jagrank-bench-model \\
      --server-binary build/bin/jagrank-server --loadgen-binary build/bin/jagrank-loadgen --out r.json
Anywhere, to exercise the code paths on a tiny model (the fallback attention,
a plain masked softmax, stands in for FlashAttention on the CPU):
  python3 bench/model_vs_torch.py --device cpu --parts twin --quick
"""
import argparse
import dataclasses
import datetime
import gc
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python"))

import torch  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from jagrank.batch import JaggedBatch  # noqa: E402
from jagrank.config import ModelConfig, SparseFeature  # noqa: E402
from jagrank.model import JagRankModel  # noqa: E402

DEFAULT_SERVER_FLAGS = ("--max-queue-delay-us 1000 --max-batch-candidates 65536 --max-batch-requests 512 "
                        "--max-batch-history-tokens 1048576 --max-batch-attention-cost 1073741824 "
                        "--max-queue-requests 8192")
DEFAULT_LOADGEN_FLAGS = "--channels 32 --client-threads 8 --pool 1024 --timeout-ms 5000"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def log(msg):
    print(f"[model_vs_torch] {msg}", flush=True)


# ---- workload ------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Law:
    history_median: float
    history_sigma: float
    history_max: int          # the cap on drawn lengths (the model's max_history_len)
    candidates_min: int
    candidates_max: int
    sparse_ids_max: int

    def describe(self):
        return (f"histories log-normal median {self.history_median:g} sigma {self.history_sigma:g} capped at "
                f"{self.history_max}; {self.candidates_min}-{self.candidates_max} candidates uniform; "
                f"1-{self.sparse_ids_max} ids per sparse feature")

    def history_lengths(self, n, gen):
        z = torch.randn(n, generator=gen, dtype=torch.float64)
        lengths = torch.round(torch.exp(math.log(max(1.0, self.history_median)) + self.history_sigma * z))
        return lengths.clamp(1, self.history_max).to(torch.int64)


def _offsets(lengths):
    out = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    out[1:] = torch.cumsum(lengths, 0)
    return out


def draw_batch(config, law, num_requests, gen):
    """One JaggedBatch (on the CPU) of num_requests requests drawn from the law; ids in [0, 1e9)."""
    hist = law.history_lengths(num_requests, gen)
    cands = torch.randint(law.candidates_min, law.candidates_max + 1, (num_requests,), generator=gen)
    ids = lambda n: torch.randint(0, 10 ** 9, (int(n),), generator=gen, dtype=torch.int64)  # noqa: E731
    sparse_ids, sparse_offsets = [], []
    for _ in config.sparse_features:
        counts = torch.randint(1, law.sparse_ids_max + 1, (num_requests,), generator=gen)
        sparse_ids.append(ids(counts.sum()))
        sparse_offsets.append(_offsets(counts))
    return JaggedBatch(dense=torch.randn(num_requests, config.num_dense_features, generator=gen),
                       sparse_ids=sparse_ids, sparse_offsets=sparse_offsets,
                       history_ids=ids(hist.sum()), history_offsets=_offsets(hist),
                       candidate_ids=ids(cands.sum()), candidate_offsets=_offsets(cands))


def check_batch(config, law, gen, num_law_requests):
    """A few requests from the law plus two edge cases the law never draws:
    a history of 1.5 max_history_len with negative ids (the model keeps the
    most recent; ids hash as uint64) and an empty history next to an empty
    sparse list (u = 0, a pooled zero)."""
    base = draw_batch(config, law, num_law_requests, gen)
    requests = []
    for r in range(num_law_requests):
        def part(values, offsets):
            return values[offsets[r]:offsets[r + 1]]
        requests.append(dict(dense=base.dense[r], sparse=[part(v, o) for v, o in zip(base.sparse_ids,
                                                                                     base.sparse_offsets)],
                             history=part(base.history_ids, base.history_offsets),
                             candidates=part(base.candidate_ids, base.candidate_offsets)))
    signed = lambda n: torch.randint(-(1 << 62), 1 << 62, (n,), generator=gen, dtype=torch.int64) * 2  # noqa: E731
    long_len = config.max_history_len + max(1, config.max_history_len // 2)
    requests.append(dict(dense=torch.randn(config.num_dense_features, generator=gen),
                         sparse=[signed(3) for _ in config.sparse_features], history=signed(long_len),
                         candidates=signed(7)))
    requests.append(dict(dense=torch.randn(config.num_dense_features, generator=gen),
                         sparse=[torch.zeros(0, dtype=torch.int64) if i == 0 else signed(2)
                                 for i in range(len(config.sparse_features))],
                         history=torch.zeros(0, dtype=torch.int64), candidates=signed(5)))
    cat = lambda ts: torch.cat(ts) if ts else torch.zeros(0, dtype=torch.int64)  # noqa: E731
    lens = lambda ts: _offsets(torch.tensor([t.numel() for t in ts], dtype=torch.int64))  # noqa: E731
    nf = len(config.sparse_features)
    return JaggedBatch(dense=torch.stack([q["dense"] for q in requests]).float(),
                       sparse_ids=[cat([q["sparse"][f] for q in requests]) for f in range(nf)],
                       sparse_offsets=[lens([q["sparse"][f] for q in requests]) for f in range(nf)],
                       history_ids=cat([q["history"] for q in requests]),
                       history_offsets=lens([q["history"] for q in requests]),
                       candidate_ids=cat([q["candidates"] for q in requests]),
                       candidate_offsets=lens([q["candidates"] for q in requests]))


# ---- the fast twin -------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Prepared:
    """A batch laid out for the fast twin, on the device (see the module doc)."""
    dense: torch.Tensor           # [R, num_dense] float32
    sparse_values: torch.Tensor   # [S] int64, feature-major: feature 0's ids of every request, then feature 1's...
    sparse_feature: torch.Tensor  # [S] int64: each id's feature
    sparse_offsets: torch.Tensor  # [F*R + 1] int64: bag (f, r) is f*R + r
    hist_ids: torch.Tensor        # [T] int64, the kept (most recent max_history_len) ids, oldest first
    hist_pos: torch.Tensor        # [T] int64: the position row, 0 = the most recent
    hist_cu: torch.Tensor         # [R + 1] int32
    cand_ids: torch.Tensor        # [C] int64
    cand_cu: torch.Tensor         # [R + 1] int32
    cand_seg: torch.Tensor        # [C] int64: each candidate's request
    cand_has_hist: torch.Tensor   # [C] bool
    num_requests: int
    num_tokens: int
    num_candidates: int
    max_hist: int
    max_cand: int
    flops: int                    # the batch's useful FLOPs (Flops.batch)


def prepare(config, batch, device, flops=None):
    R = batch.num_requests
    offsets = batch.history_offsets
    lengths = offsets[1:] - offsets[:-1]
    kept = lengths.clamp(max=config.max_history_len)
    seg = torch.repeat_interleave(torch.arange(R), lengths)
    from_end = offsets[seg + 1] - 1 - torch.arange(seg.numel())
    keep = from_end < config.max_history_len
    cand_counts = batch.candidate_offsets[1:] - batch.candidate_offsets[:-1]
    sparse_counts = torch.stack([o[1:] - o[:-1] for o in batch.sparse_offsets]) if batch.sparse_offsets else \
        torch.zeros(0, R, dtype=torch.int64)
    nf = len(batch.sparse_ids)
    to = lambda t: t.to(device)  # noqa: E731
    return Prepared(
        dense=to(batch.dense.float()),
        sparse_values=to(torch.cat(batch.sparse_ids) if nf else torch.zeros(0, dtype=torch.int64)),
        sparse_feature=to(torch.repeat_interleave(torch.arange(nf), sparse_counts.sum(1)) if nf
                          else torch.zeros(0, dtype=torch.int64)),
        sparse_offsets=to(_offsets(sparse_counts.reshape(-1))),
        hist_ids=to(batch.history_ids[keep]), hist_pos=to(from_end[keep]),
        hist_cu=to(_offsets(kept).to(torch.int32)),
        cand_ids=to(batch.candidate_ids), cand_cu=to(batch.candidate_offsets.to(torch.int32)),
        cand_seg=to(torch.repeat_interleave(torch.arange(R), cand_counts)),
        cand_has_hist=to(torch.repeat_interleave(kept > 0, cand_counts)),
        num_requests=R, num_tokens=int(kept.sum()), num_candidates=int(cand_counts.sum()),
        max_hist=int(kept.max()) if R else 0, max_cand=int(cand_counts.max()) if R else 0,
        flops=(flops or Flops(config)).batch(kept.tolist(), cand_counts.tolist()))


def flash_available(device, dtype):
    return (torch.device(device).type == "cuda" and dtype in (torch.bfloat16, torch.float16)
            and hasattr(torch.ops.aten, "_flash_attention_forward"))


def _padded_attention(q, k, v, cu_q, cu_k, max_q, max_k, scale):
    """The fallback: [Tq, H, D] x [Tk, H, D] -> [Tq, H, D], a plain softmax over
    each sequence's keys (pad, mask, unpad). A query whose sequence has no key
    comes out 0."""
    B = cu_q.numel() - 1
    lq, lk = (cu_q[1:] - cu_q[:-1]).long(), (cu_k[1:] - cu_k[:-1]).long()
    seg_q = torch.repeat_interleave(torch.arange(B, device=q.device), lq)
    seg_k = torch.repeat_interleave(torch.arange(B, device=q.device), lk)
    iq = torch.arange(q.shape[0], device=q.device) - cu_q.long()[seg_q]
    ik = torch.arange(k.shape[0], device=q.device) - cu_k.long()[seg_k]
    H = q.shape[1]
    pad = lambda x, seg, idx, m: x.new_zeros(B, m, H, x.shape[2]).index_put((seg, idx), x)  # noqa: E731
    Q, K, V = (pad(q, seg_q, iq, max_q).transpose(1, 2), pad(k, seg_k, ik, max_k).transpose(1, 2),
               pad(v, seg_k, ik, max_k).transpose(1, 2))                           # [B, H, M, D]
    s = torch.matmul(Q, K.transpose(-1, -2)).float() * scale
    valid = (torch.arange(max_k, device=q.device)[None, :] < lk[:, None])[:, None, None, :]
    p = torch.softmax(s.masked_fill(~valid, float("-inf")), dim=-1).nan_to_num(0.0).to(v.dtype)
    o = torch.matmul(p, V).transpose(1, 2)                                             # [B, M, H, D]
    return o[seg_q, iq]


class FastTwin(nn.Module):
    """The twin's function (docs/model.md) with torch's fastest jagged pieces;
    weights copied from a JagRankModel, in `dtype` on `device`."""

    def __init__(self, ref: JagRankModel, device, dtype):
        super().__init__()
        c = ref.config
        self.config, self.dtype = c, dtype
        self.d, self.heads = c.embedding_dim, c.attention_heads
        self.use_flash = flash_available(device, dtype)
        cast = lambda t: t.detach().to(device=device, dtype=dtype).contiguous()  # noqa: E731

        def linears(layers):
            out = nn.ModuleList()
            for layer in layers:
                lin = nn.Linear(layer.in_features, layer.out_features, device=device, dtype=dtype)
                with torch.no_grad():
                    lin.weight.copy_(layer.weight)
                    lin.bias.copy_(layer.bias)
                out.append(lin)
            return out
        self.bottom_mlp, self.top_mlp = linears(ref.bottom_mlp), linears(ref.top_mlp)
        features = c.sparse_features
        # One table for every pooled feature, rows stacked in config order: one embedding_bag for all.
        self.register_buffer("sparse_table", cast(torch.cat([ref.embeddings[f.name] for f in features]))
                             if features else torch.zeros(0, self.d, device=device, dtype=dtype))
        rows = torch.tensor([f.num_rows for f in features], dtype=torch.int64)
        self.register_buffer("sparse_rows", rows.to(device))
        self.register_buffer("sparse_wrap", torch.tensor([(1 << 64) % f.num_rows for f in features],
                                                         dtype=torch.int64).to(device))
        self.register_buffer("sparse_base", (torch.cumsum(rows, 0) - rows).to(device))
        self.register_buffer("item_table", cast(ref.embeddings["item"]))
        self.item_rows, self.item_wrap = c.item_rows, (1 << 64) % c.item_rows
        self.register_buffer("position", cast(ref.history.position))
        attn = ref.history.attn
        self.register_buffer("w_qkv", cast(torch.cat([attn["q"], attn["k"], attn["v"]])))  # [3d, d]
        self.register_buffer("w_o", cast(attn["o"]))
        n = c.num_interaction_vectors
        a, b = torch.triu_indices(n, n, offset=1)
        self.register_buffer("pairs", (a * n + b).to(device))                              # row-major a < b

    @staticmethod
    def _rows(ids, rows, wrap):
        """uint64(id) % rows for int64 ids, as the twin's hash_rows (rows/wrap may be per-id tensors)."""
        r = torch.remainder(ids, rows)
        return torch.where(ids < 0, torch.remainder(r + wrap, rows), r)

    def _attention(self, q, k, v, cu_q, cu_k, max_q, max_k, scale):
        if self.use_flash:
            return torch.ops.aten._flash_attention_forward(q, k, v, cu_q, cu_k, max_q, max_k, 0.0, False, False,
                                                           scale=scale)[0]
        return _padded_attention(q, k, v, cu_q, cu_k, max_q, max_k, scale)

    def logits_flat(self, dense, sparse_values, sparse_feature, sparse_offsets, hist_ids, hist_pos, hist_cu,
                    cand_ids, cand_cu, cand_seg, cand_has_hist, R: int, T: int, max_hist: int, max_cand: int):
        d, H = self.d, self.heads
        nf = len(self.config.sparse_features)
        x = dense.to(self.dtype)
        for layer in self.bottom_mlp:                                                       # 1. x [R, d]
            x = F.relu(layer(x))
        req = [x[:, None]]
        if nf:                                                                              # 2. p_f [R, F, d]
            rows = self._rows(sparse_values, self.sparse_rows[sparse_feature], self.sparse_wrap[sparse_feature])
            pooled = F.embedding_bag(rows + self.sparse_base[sparse_feature], self.sparse_table, sparse_offsets,
                                     mode="sum", include_last_offset=True)
            req.append(pooled.view(nf, R, d).transpose(0, 1))
        e = self.item_table[self._rows(cand_ids, self.item_rows, self.item_wrap)]           # 5. e [C, d]
        if T > 0:
            h = self.item_table[self._rows(hist_ids, self.item_rows, self.item_wrap)] + self.position[hist_pos]
            q, k, v = F.linear(h, self.w_qkv).view(T, 3, H, d // H).unbind(1)              # 3-4. self-attention
            o = self._attention(q, k, v, hist_cu, hist_cu, max_hist, max_hist, 1.0 / math.sqrt(d // H))
            z = h + F.linear(o.reshape(T, d), self.w_o)
            zz = z[:, None]                                                                 # 6. target attention
            u = self._attention(e[:, None], zz, zz, cand_cu, hist_cu, max_cand, max_hist, 1.0 / math.sqrt(d))[:, 0]
            u = u.masked_fill(~cand_has_hist[:, None], 0.0)
        else:
            u = torch.zeros_like(e)
        vecs = torch.cat([torch.cat(req, 1)[cand_seg], u[:, None], e[:, None]], 1)         # 7. [C, n, d]
        gram = torch.bmm(vecs, vecs.transpose(1, 2)).flatten(1)
        y = torch.cat([vecs[:, 0], gram.index_select(1, self.pairs)], 1)
        for i, layer in enumerate(self.top_mlp):                                            # 8.
            y = layer(y)
            if i + 1 < len(self.top_mlp):
                y = F.relu(y)
        return y[:, 0]

    def logits(self, b: Prepared, fn=None):
        fn = fn or self.logits_flat
        return fn(b.dense, b.sparse_values, b.sparse_feature, b.sparse_offsets, b.hist_ids, b.hist_pos, b.hist_cu,
                  b.cand_ids, b.cand_cu, b.cand_seg, b.cand_has_hist, b.num_requests, b.num_tokens, b.max_hist,
                  b.max_cand)

    def scores(self, b: Prepared, fn=None):
        return torch.sigmoid(self.logits(b, fn))


# ---- FLOPs ---------------------------------------------------------------------------------------------------------

class Flops:
    """The model's useful FLOPs (multiply-add = 2): per request, per kept
    history token, per squared history length, per candidate and per
    (candidate x history token)."""

    def __init__(self, c: ModelConfig):
        d, n = c.embedding_dim, c.num_interaction_vectors
        mlp = lambda widths: sum(2 * a * b for a, b in zip(widths[:-1], widths[1:]))  # noqa: E731
        self.bottom_mlp = mlp([c.num_dense_features] + list(c.bottom_mlp))
        self.projections_per_token = 2 * d * d * 4             # Q, K, V and O
        self.self_attention_per_l2 = 4 * d                     # Q K^T and P V over all heads: 4 L^2 d
        self.target_attention_per_token = 4 * d                # per candidate: 4 L d
        self.interaction = n * (n - 1) // 2 * 2 * d            # the dot products a < b
        self.top_mlp = mlp([c.top_mlp_input_width] + list(c.top_mlp))

    def batch(self, kept_lengths, cand_counts):
        total = 0
        for L, C in zip(kept_lengths, cand_counts):
            total += (self.bottom_mlp + self.projections_per_token * L + self.self_attention_per_l2 * L * L
                      + C * (self.interaction + self.top_mlp + self.target_attention_per_token * L))
        return total

    def per_law(self, law, samples=1 << 20, seed=7):
        """(per request, per candidate) expected FLOPs under the law (lengths sampled)."""
        L = law.history_lengths(samples, torch.Generator().manual_seed(seed)).double()
        mean_l, mean_l2 = float(L.mean()), float((L * L).mean())
        per_request = self.bottom_mlp + self.projections_per_token * mean_l + self.self_attention_per_l2 * mean_l2
        per_candidate = self.interaction + self.top_mlp + self.target_attention_per_token * mean_l
        return dict(per_request=per_request, per_candidate=per_candidate, mean_history_len=mean_l,
                    mean_history_len_sq=mean_l2,
                    breakdown=dict(bottom_mlp=self.bottom_mlp,
                                   projections_per_request=self.projections_per_token * mean_l,
                                   self_attention_per_request=self.self_attention_per_l2 * mean_l2,
                                   target_attention_per_candidate=self.target_attention_per_token * mean_l,
                                   interaction_per_candidate=self.interaction, top_mlp_per_candidate=self.top_mlp))


# ---- measurement helpers -------------------------------------------------------------------------------------------

class GpuSampler:
    """nvidia-smi utilization.gpu and memory.used every 100 ms in the background."""

    def __init__(self, gpu_index):
        self.gpu_index = gpu_index
        self.samples = []  # (unix time, util %, memory.used MiB)
        self.proc = None
        self.thread = None
        self.note = None

    def start(self):
        smi = shutil.which("nvidia-smi")
        if smi is None:
            self.note = "no nvidia-smi"
            return self
        cmd = [smi, "--query-gpu=timestamp,utilization.gpu,memory.used", "--format=csv,noheader,nounits",
               "-lms", "100", "-i", str(self.gpu_index)]
        if shutil.which("stdbuf"):
            cmd = ["stdbuf", "-oL"] + cmd
        try:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError as e:
            self.note = f"nvidia-smi: {e}"
            return self
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 3:
                continue
            try:
                t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            except ValueError:
                t = time.time()
            try:
                self.samples.append((t, float(parts[1]), float(parts[2])))
            except ValueError:
                continue

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.thread.join(timeout=5)
            self.proc = None
        return self

    def window(self, t0, t1):
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if not inside:
            return dict(gpu_busy_pct=None, smi_memory_used_mib_max=None, smi_samples=0, smi_note=self.note)
        return dict(gpu_busy_pct=statistics.mean(s[1] for s in inside),
                    smi_memory_used_mib_max=max(s[2] for s in inside), smi_samples=len(inside),
                    smi_memory_used_mib_before=self.memory_before(t0))

    def memory_before(self, t):
        before = [s for s in self.samples if s[0] <= t]
        return before[-1][2] if before else None


class Timer:
    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def run(self, body):
        """Milliseconds of body() on the device (CUDA events) or the wall clock."""
        self.sync()
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            body()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        t0 = time.perf_counter()
        body()
        return (time.perf_counter() - t0) * 1e3


def gemm_peak(device, n, reps):
    """Median TFLOP/s of an n^3 matmul (bf16 on CUDA; float32 on the CPU, where it is no bf16 peak)."""
    dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    timer = Timer(device)
    for _ in range(3):
        torch.matmul(a, b)
    times = [timer.run(lambda: torch.matmul(a, b)) for _ in range(reps)]
    ms = statistics.median(times)
    return dict(n=n, dtype=str(dtype).replace("torch.", ""), median_ms=ms, tflops=2.0 * n ** 3 / ms / 1e9)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_tflops(row, flops_total, seconds, peak):
    if flops_total is not None and seconds and seconds > 0:
        row["useful_tflops"] = flops_total / seconds / 1e12
        if peak and peak.get("tflops"):
            row["share_of_gemm_peak"] = row["useful_tflops"] / peak["tflops"]
    return row


# ---- parts ---------------------------------------------------------------------------------------------------------

def build_weights(config, path, weights_dtype):
    t0 = time.time()
    model = JagRankModel(config)  # random, from the config's seed
    model.save_safetensors(path, dtype=DTYPES[weights_dtype], metadata={"written_by": "bench/model_vs_torch.py"})
    log(f"weights: {path} ({os.path.getsize(path) / 2**30:.2f} GiB, {weights_dtype}) in {time.time() - t0:.1f} s")


def _score_errors(ref_logits, logits):
    score = (torch.sigmoid(ref_logits) - torch.sigmoid(logits)).abs()
    return dict(max_abs_score_error=float(score.max()), mean_abs_score_error=float(score.mean()),
                max_abs_logit_error=float((ref_logits - logits).abs().max()),
                finite=bool(torch.isfinite(logits).all()))


def _kernel_check(fast, b, gen):
    """varlen FlashAttention-2 against the plain masked attention (float32
    softmax) on the check batch's offsets, random bf16 inputs: the self- and
    target-attention calls exactly as the fast twin makes them. Max abs error
    over the max abs output, queries of sequences with keys only."""
    c = fast.config
    d, H = c.embedding_dim, c.attention_heads
    dev = b.hist_ids.device
    rnd = lambda *shape: torch.randn(*shape, generator=gen).to(dev, fast.dtype)  # noqa: E731
    q, k, v = rnd(b.num_tokens, H, d // H), rnd(b.num_tokens, H, d // H), rnd(b.num_tokens, H, d // H)
    e, z = rnd(b.num_candidates, 1, d), rnd(b.num_tokens, 1, d)
    out = {}
    for name, args, rows in (
            ("self", (q, k, v, b.hist_cu, b.hist_cu, b.max_hist, b.max_hist, 1.0 / math.sqrt(d // H)), None),
            ("target", (e, z, z, b.cand_cu, b.hist_cu, b.max_cand, b.max_hist, 1.0 / math.sqrt(d)),
             b.cand_has_hist)):
        got = fast._attention(*args).float()
        want = _padded_attention(*[a.float() if torch.is_tensor(a) and a.is_floating_point() else a
                                   for a in args])
        if rows is not None:
            got, want = got[rows], want[rows]
        out[name] = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
    return out


def run_check(ref, fast, config, law, args, device):
    """The fast twin against the reference twin (float32, same weights), on a
    few requests, three ways: (1) the fast twin's math in float32 (its plain
    attention) against the reference, tight: catches a wrong formula that
    bf16 rounding would hide, since a random model's scores spread little;
    (2) on CUDA, varlen FlashAttention-2 against the plain attention on the
    check batch's offsets; (3) the benchmarked fast twin (--dtype) end to end."""
    gen = torch.Generator().manual_seed(args.seed + 1000)
    batch = check_batch(config, law, gen, args.check_requests)
    out = dict(requests=batch.num_requests, candidates=int(batch.candidate_ids.numel()), dtype=args.dtype,
               attention="varlen FlashAttention-2" if fast.use_flash else "plain masked attention (fallback)",
               tolerance=args.tolerance, fp32_tolerance=args.fp32_tolerance,
               kernel_tolerance=args.kernel_tolerance)
    plain32 = fast.dtype == torch.float32 and not fast.use_flash
    fast32 = fast if plain32 else FastTwin(ref, device, torch.float32).eval()  # float32: never flash
    ref.to(device)
    prepared = prepare(config, batch, device)
    with torch.no_grad():
        ref_logits = ref.logits(batch).double().cpu()
        out["fp32"] = _score_errors(ref_logits, fast32.logits(prepared).double().cpu())
        del fast32
        if fast.use_flash:
            out["flash_vs_plain_rel_error"] = _kernel_check(fast, prepared, gen)
        out.update(_score_errors(ref_logits, fast.logits(prepared).double().cpu()))
    out["reference_logit_std"] = float(ref_logits.std())
    out["fp32"]["logit_error_over_spread"] = out["fp32"]["max_abs_logit_error"] / max(out["reference_logit_std"],
                                                                                      1e-30)
    ok_fp32 = out["fp32"]["finite"] and out["fp32"]["logit_error_over_spread"] <= args.fp32_tolerance
    ok_kernel = all(v <= args.kernel_tolerance for v in out.get("flash_vs_plain_rel_error", {}).values())
    ok = out["finite"] and out["max_abs_score_error"] <= args.tolerance
    out["ok"] = ok_fp32 and ok_kernel and ok
    verdict = lambda good: "ok" if good else "MISMATCH"  # noqa: E731
    log(f"check on {out['requests']} requests / {out['candidates']} candidates (reference: the twin's float32 "
        f"forward; its logits spread {out['reference_logit_std']:.2e}):")
    log(f"  fast twin fp32, plain attention: max abs logit error {out['fp32']['max_abs_logit_error']:.3e} = "
        f"{out['fp32']['logit_error_over_spread']:.2e} of the spread, tolerance {args.fp32_tolerance:g} "
        f"(scores {out['fp32']['max_abs_score_error']:.3e}): {verdict(ok_fp32)}")
    if fast.use_flash:
        errs = out["flash_vs_plain_rel_error"]
        log(f"  varlen FA2 vs plain attention ({args.dtype} inputs): relative error self {errs['self']:.2e}, target "
            f"{errs['target']:.2e}, tolerance {args.kernel_tolerance:g}: {verdict(ok_kernel)}")
    log(f"  fast twin {args.dtype}, {out['attention']}: max abs score error {out['max_abs_score_error']:.3e} "
        f"(mean {out['mean_abs_score_error']:.2e}; logits {out['max_abs_logit_error']:.3e}), tolerance "
        f"{args.tolerance:g}: {verdict(ok)}")
    return out


def part_twin(args, config, weights_path, law, flops, peak, device, sampler, report):
    dtype = DTYPES[args.dtype]
    t0 = time.time()
    ref = JagRankModel(config)
    ref.load_safetensors(weights_path)
    ref.eval()
    fast = FastTwin(ref, device, dtype).eval()
    log(f"twin: loaded {weights_path} and built the fast twin in {time.time() - t0:.1f} s")
    if not fast.use_flash:
        note = ("attention: plain masked attention (pad, mask, softmax) stands in for varlen FlashAttention-2, "
                f"which needs CUDA and bf16/fp16 (device {device}, dtype {args.dtype})")
        log(note)
        report["notes"].append(note)
    try:
        report["check"] = run_check(ref, fast, config, law, args, device)
    except Exception as e:  # noqa: BLE001 - time the twin all the same; the run exits 1
        report["check"] = dict(ok=False, error=f"{type(e).__name__}: {e}"[:400])
        log(f"check: FAILED: {report['check']['error']}")
        traceback.print_exc()
    del ref
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    timer = Timer(device)
    variants = ["eager"]
    modes = [m for m in args.compile_modes.split(",") if m]
    if modes and not hasattr(torch, "compile"):
        note = f"torch.compile skipped: torch {torch.__version__} has none"
        log(note)
        report["notes"].append(note)
    elif modes:
        variants += [f"compile:{m}" for m in modes]
        for knob in ("cache_size_limit", "recompile_limit"):  # renamed across torch 2.x
            try:
                setattr(torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob)))
            except AttributeError:
                pass
    compiled = {}  # one torch.compile per mode, shared by the batch sizes (dynamic shapes)
    rows = report["twin"] = []
    for R in args.requests_per_batch:
        gen = torch.Generator().manual_seed(args.seed + R)
        batches = [prepare(config, draw_batch(config, law, R, gen), device, flops) for _ in range(args.batches)]
        mean_c = statistics.mean(b.num_candidates for b in batches)
        mean_t = statistics.mean(b.num_tokens for b in batches)
        log(f"twin: {args.batches} batches of {R} requests ({mean_c:.0f} candidates, {mean_t:.0f} history tokens "
            "on average)")
        for variant in variants:
            row = dict(part="twin", variant=variant, requests_per_batch=R, dtype=args.dtype,
                       attention="varlen_fa2" if fast.use_flash else "masked_fallback")
            rows.append(row)
            try:
                if variant == "eager":
                    fn = fast.logits_flat
                else:
                    mode = variant.split(":", 1)[1]
                    if mode not in compiled:
                        compiled[mode] = torch.compile(fast.logits_flat, dynamic=True,
                                                       mode=None if mode == "default" else mode)
                    fn = compiled[mode]
                with torch.no_grad():
                    t_warm = time.time()
                    for _ in range(args.warmup_rounds):
                        for b in batches:
                            fast.logits(b, fn)
                    timer.sync()
                    row["warmup_s"] = time.time() - t_warm  # includes the compilation
                    if variant != "eager":  # the compiled function against eager, first batch
                        want = fast.scores(batches[0]).float()
                        got = fast.scores(batches[0], fn).float()
                        row["max_abs_score_diff_vs_eager"] = float((got - want).abs().max())
                    if timer.cuda:
                        torch.cuda.reset_peak_memory_stats()
                    counts = dict(batches=0, requests=0, candidates=0, flops=0)

                    def body():
                        t_end = time.perf_counter() + args.duration_s
                        while True:
                            for b in batches:
                                logits = fast.logits(b, fn)
                                if args.scores_to_host:
                                    logits.cpu()
                                counts["batches"] += 1
                                counts["requests"] += b.num_requests
                                counts["candidates"] += b.num_candidates
                                counts["flops"] += b.flops
                            if time.perf_counter() >= t_end:
                                break
                    w0 = time.time()
                    ms = timer.run(body)
                    w1 = time.time()
                s = ms / 1e3
                row.update(batches=counts["batches"], seconds=s, requests_per_s=counts["requests"] / s,
                           candidates_per_s=counts["candidates"] / s, ms_per_batch=ms / counts["batches"])
                if timer.cuda:
                    row["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
                    row["peak_memory_source"] = "torch.cuda.max_memory_allocated"
                row.update(sampler.window(w0, w1))
                with_tflops(row, counts["flops"], s, peak)
                log(f"twin {variant} R={R}: {row['requests_per_s']:.0f} requests/s, "
                    f"{row['candidates_per_s'] / 1e6:.2f}M candidates/s, {row['ms_per_batch']:.3f} ms/batch")
            except Exception as e:  # noqa: BLE001 - one variant failing must not stop the others
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
                log(f"twin {variant} R={R}: FAILED: {row['error']}")
                traceback.print_exc()
            if timer.cuda:
                torch.cuda.empty_cache()
        batches = None  # free the device copies before the next size
    fast = compiled = None
    if modes and hasattr(torch, "compile"):
        torch._dynamo.reset()  # its caches hold the compiled twin's weights
    gc.collect()
    if timer.cuda:
        torch.cuda.empty_cache()  # the device to the other parts


def _help_text(binary):
    try:
        return subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def part_inprocess(args, config_path, weights_path, law, per_law, peak, device, sampler, workdir, report):
    binary = args.bench_binary
    if not binary or not os.path.exists(binary):
        raise RuntimeError(f"--bench-binary '{binary}': not found")
    help_text = _help_text(binary)
    takes_weights = "model-weights" in help_text
    pipelined = args.inprocess_pipelined and "pipelined" in help_text
    note = ("jagrank in process: jagrank-bench-model draws its own batches with the same length laws"
            + ("; weights: the same file" if takes_weights else
               "; its weights are random from the config's seed (the binary takes no --model-weights; a "
               "forward pass costs the same whatever the weight values)")
            + ("; pipelined as the server runs the model (batch i+1 staged and launched before batch i is "
               "waited for; ms/batch is the time between two batches' scores)" if pipelined else
               "; one batch after the other (each batch's host packing and copy, then its forward pass)"))
    log(note)
    report["notes"].append(note)
    rows = report["inprocess"] = []
    for R in args.requests_per_batch:
        out = os.path.join(workdir, f"bench_model_R{R}.json")
        cmd = [binary, "--model-config", config_path, "--device", device, "--attention", args.inprocess_attention,
               "--requests-per-batch", str(R), "--history-median", str(law.history_median),
               "--history-sigma", str(law.history_sigma), "--history-max", str(law.history_max),
               "--candidates-min", str(law.candidates_min), "--candidates-max", str(law.candidates_max),
               "--duration-s", str(args.duration_s), "--seed", str(args.seed), "--json-out", out]
        if takes_weights:
            cmd += ["--model-weights", weights_path, "--sparse-ids-max", str(law.sparse_ids_max)]
        if pipelined:
            cmd.append("--pipelined")
        log("inprocess: " + " ".join(cmd))
        try:
            rc, stderr, row_times = _run_timing_rows(cmd, args.inprocess_attention.split(","), args.part_timeout_s)
            if rc != 0 and not os.path.exists(out):
                raise RuntimeError(f"exit {rc}: {stderr.strip()[-400:]}")
            with open(out) as f:
                result = json.load(f)
        except Exception as e:  # noqa: BLE001
            rows.append(dict(part="inprocess", requests_per_batch=R, error=f"{type(e).__name__}: {e}"[:400]))
            log(f"inprocess R={R}: FAILED: {rows[-1]['error']}")
            continue
        for r in result.get("results", []):
            s = r["seconds"]
            row = dict(part="inprocess", variant=f"jagrank:{r['attention']}", requests_per_batch=R,
                       seconds=s, requests_per_s=r["requests_per_s"], candidates_per_s=r["candidates_per_s"],
                       ms_per_batch=1e3 / r["forwards_per_s"] if r.get("forwards_per_s") else None,
                       forward_ms_p50=r["forward_ms"]["p50"], forward_ms_p99=r["forward_ms"]["p99"],
                       weights_bytes=r.get("weights_bytes"), workspace_peak_bytes=r.get("workspace_peak_bytes"),
                       peak_memory_bytes=(r.get("weights_bytes") or 0) + (r.get("workspace_peak_bytes") or 0),
                       peak_memory_source="jagrank-bench-model weights_bytes + workspace_peak_bytes",
                       device_used_bytes=r.get("device_used_bytes"),
                       mean_candidates_per_batch=result.get("mean_candidates_per_batch"))
            # The timed window ends as the binary prints the strategy's row.
            if r["attention"] in row_times:
                row.update(sampler.window(row_times[r["attention"]] - s, row_times[r["attention"]]))
            with_tflops(row, r["requests_per_s"] * per_law["per_request"] + r["candidates_per_s"]
                        * per_law["per_candidate"], 1.0, peak)
            rows.append(row)


def _run_timing_rows(cmd, names, timeout_s):
    """Runs jagrank-bench-model, echoing its stdout; returns (exit code,
    stderr, {strategy: the time its result row appeared}). Line-buffered
    through stdbuf where present, else the times are the exit's."""
    if shutil.which("stdbuf"):
        cmd = ["stdbuf", "-oL"] + cmd
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    stderr = []
    reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True)
    reader.start()
    times = {}
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            word = line.split(" ", 1)[0]
            if word in names:
                times[word] = time.time()
        proc.wait()
    finally:
        timer.cancel()
    reader.join(timeout=5)
    return proc.returncode, "".join(stderr), times


def _metrics_text(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def _scrape(port):
    try:
        text = _metrics_text(port)
    except Exception as e:  # noqa: BLE001
        return {"scrape_error": str(e)}
    out = {}
    for name in ("jagrank_device_memory_peak_bytes", "jagrank_device_memory_used_bytes",
                 "jagrank_workspace_peak_bytes", "jagrank_model_weights_bytes"):
        m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.eE+-]+)$", text, re.M)
        if m:
            out[name] = float(m.group(1))
    return out


STAGE_HISTOGRAMS = {"request_ms": "jagrank_request_latency_seconds", "queue_ms": "jagrank_queue_latency_seconds",
                    "assemble_ms": "jagrank_batch_assemble_seconds", "launch_ms": "jagrank_batch_launch_seconds",
                    "compute_ms": "jagrank_compute_latency_seconds",
                    "send_ms": "jagrank_response_send_seconds", "requests_per_batch": "jagrank_batch_requests"}


def _scrape_histograms(port):
    """{histogram: (sum, count)} over all label sets, for STAGE_HISTOGRAMS; {} when /metrics does not answer."""
    try:
        text = _metrics_text(port)
    except Exception:  # noqa: BLE001
        return {}
    out = {}
    for name in STAGE_HISTOGRAMS.values():
        total = [0.0, 0.0]
        for i, suffix in enumerate(("_sum", "_count")):
            for m in re.finditer(rf"^{name}{suffix}(?:{{[^}}]*}})? ([0-9.eE+-]+)$", text, re.M):
                total[i] += float(m.group(1))
        out[name] = tuple(total)
    return out


def stage_means(before, after):
    """Per-stage means between two _scrape_histograms: where a served request's time went."""
    out = {}
    for key, name in STAGE_HISTOGRAMS.items():
        if name in before and name in after:
            s, n = after[name][0] - before[name][0], after[name][1] - before[name][1]
            if n > 0:
                out[key] = s / n * (1.0 if key == "requests_per_batch" else 1e3)
    return out


def _stat_cpu(path):
    """(name, user + system CPU seconds) from a /proc .../stat file."""
    with open(path) as f:
        text = f.read()
    fields = text.rsplit(")", 1)[1].split()
    return text[text.index("(") + 1:text.rindex(")")], (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _process_cpu_seconds(pid):
    """User + system CPU seconds of a live process (its threads included), from /proc."""
    return _stat_cpu(f"/proc/{pid}/stat")[1]


def _thread_cpu_seconds(pid):
    """{thread id: (thread name, user + system CPU seconds)} of a live process, from /proc."""
    out = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            out[task] = _stat_cpu(f"/proc/{pid}/task/{task}/stat")
        except OSError:
            continue  # the thread ended meanwhile
    return out


def thread_cores(before, after, wall):
    """Cores per thread name over a window (threads of one name summed), and the
    busiest single thread: one near 1.0 core is a serial stage at its limit."""
    by_name, busiest = {}, ("", 0.0)
    for tid, (name, secs) in after.items():
        cores = (secs - before.get(tid, (name, 0.0))[1]) / wall
        by_name[name] = by_name.get(name, 0.0) + cores
        if cores > busiest[1]:
            busiest = (name, cores)
    by_name = {k: round(v, 2) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1]) if v >= 0.01}
    return by_name, dict(name=busiest[0], cores=round(busiest[1], 2))


def _host_cpu_times():
    """(busy, total) jiffies of the whole host, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


def host_description():
    """The CPU model and its core count: served figures depend on the host's CPU as much as on its GPU."""
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return dict(cpu=model, cores=os.cpu_count())


def parse_served_variants(text):
    """'name=SERVER FLAGS|LOADGEN FLAGS|RAMP;...' -> [(name, server flags, loadgen flags, ramp or None)]."""
    variants = []
    for item in (x.strip() for x in text.split(";")):
        if not item:
            continue
        name, _, rest = item.partition("=")
        parts = rest.split("|")
        ramp = int_list(parts[2]) if len(parts) > 2 and parts[2].strip() else None
        variants.append((name.strip(), parts[0].strip(), parts[1].strip() if len(parts) > 1 else "", ramp))
    return variants


def part_served(args, config_path, weights_path, law, per_law, peak, device, sampler, workdir, report):
    """Each --served-variants entry on its own server; report["served"] is the first one's."""
    report["served_variants"] = {}
    for i, (name, server_extra, loadgen_extra, ramp) in enumerate(parse_served_variants(args.served_variants)):
        served = report["served_variants"][name] = dict(ramp=[])
        if i == 0:
            report["served"] = served
        try:
            serve_one(args, config_path, weights_path, law, per_law, peak, device, sampler, workdir, served, name,
                      server_extra, loadgen_extra, ramp or args.concurrency)
        except Exception as e:  # noqa: BLE001
            served["error"] = f"{type(e).__name__}: {e}"[:600]
            log(f"served {name}: FAILED: {served['error']}")
            if i == 0:
                raise
    # A part where no load run came back measured nothing: that is a failure
    # (each run's own error is in its row).
    rows = [row for v in report["served_variants"].values() for row in v["ramp"]]
    if rows and all(row.get("error") for row in rows):
        raise RuntimeError(f"every served load run failed, e.g. {rows[0]['error']}")


def serve_one(args, config_path, weights_path, law, per_law, peak, device, sampler, workdir, served, name,
              server_extra, loadgen_extra, ramp):
    for flag, path in (("--server-binary", args.server_binary), ("--loadgen-binary", args.loadgen_binary)):
        if not path or not os.path.exists(path):
            raise RuntimeError(f"{flag} '{path}': not found")
    port, metrics_port = free_port(), free_port()
    server_log = os.path.join(workdir, f"server_{name}.log")
    cmd = [args.server_binary, "--grpc-address", f"127.0.0.1:{port}", "--metrics-address",
           f"127.0.0.1:{metrics_port}", "--model-config", config_path, "--model-weights", weights_path,
           "--device", device] + args.server_flags.split() + server_extra.split()
    log(f"served {name}: " + " ".join(cmd))
    served["server_command"] = cmd
    t_start = time.time()
    with open(server_log, "w") as logf:
        server = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
    try:
        while True:
            with open(server_log) as f:
                if "jagrank-server ready" in f.read():
                    break
            if server.poll() is not None:
                with open(server_log) as f:
                    raise RuntimeError(f"server exited {server.returncode}: {f.read()[-600:]}")
            if time.time() - t_start > args.part_timeout_s:
                raise RuntimeError(f"server not ready after {args.part_timeout_s} s (log: {server_log})")
            time.sleep(0.2)
        served["startup_s"] = time.time() - t_start
        log(f"served: server ready in {served['startup_s']:.1f} s")
        best = None
        for c in ramp:
            out = os.path.join(workdir, f"loadgen_{name}_c{c}.json")
            lcmd = [args.loadgen_binary, "--address", f"127.0.0.1:{port}", "--concurrency", str(c),
                    "--history-median", str(law.history_median), "--history-sigma", str(law.history_sigma),
                    "--history-max", str(law.history_max), "--candidates-min", str(law.candidates_min),
                    "--candidates-max", str(law.candidates_max), "--sparse-ids-max", str(law.sparse_ids_max),
                    "--duration-s", str(args.loadgen_duration_s), "--warmup-s", str(args.loadgen_warmup_s),
                    "--seed", str(args.seed), "--json-out", out] + args.loadgen_flags.split() + loadgen_extra.split()
            row = dict(part="served", variant=name, concurrency=c)
            try:
                hist_before = _scrape_histograms(metrics_port)
                # The host's CPU over the whole loadgen run (warm-up included):
                # the server's share, and the host's in all (loadgen included).
                server_cpu, host_cpu, t_start = _process_cpu_seconds(server.pid), _host_cpu_times(), time.time()
                threads_before = _thread_cpu_seconds(server.pid)
                proc = subprocess.run(lcmd, capture_output=True, text=True, timeout=args.part_timeout_s)
                wall = max(time.time() - t_start, 1e-9)
                host_busy, host_total = (a - b for a, b in zip(_host_cpu_times(), host_cpu))
                row["server_cpu_cores"] = (_process_cpu_seconds(server.pid) - server_cpu) / wall
                row["server_thread_cores"], row["server_busiest_thread"] = thread_cores(
                    threads_before, _thread_cpu_seconds(server.pid), wall)
                row["host_cpu_busy_pct"] = 100.0 * host_busy / max(host_total, 1)
                row["stages"] = stage_means(hist_before, _scrape_histograms(metrics_port))
                t_exit = time.time()
                if proc.returncode != 0 and not os.path.exists(out):
                    raise RuntimeError(f"loadgen exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
                with open(out) as f:
                    r = json.load(f)
                row.update(requests_per_s=r["qps"], candidates_per_s=r["candidates_per_s"],
                           p50_ms=r["latency_ms"]["p50"], p99_ms=r["latency_ms"]["p99"],
                           errors=r["requests_error"], client_cpu_cores=r.get("client_cpu_cores"))
                row.update(sampler.window(t_exit - args.loadgen_duration_s, t_exit))
                with_tflops(row, r["qps"] * per_law["per_request"] + r["candidates_per_s"] * per_law["per_candidate"],
                            1.0, peak)
                row["within_p99"] = row["p99_ms"] <= args.p99_ms and row["errors"] == 0
                log(f"served {name} c={c}: {row['requests_per_s']:.0f} requests/s, {row['candidates_per_s'] / 1e6:.2f}M "
                    f"candidates/s, p99 {row['p99_ms']:.2f} ms, errors {row['errors']}, GPU busy "
                    f"{row['gpu_busy_pct'] if row['gpu_busy_pct'] is not None else 'n/a'}, server "
                    f"{row['server_cpu_cores']:.1f} cores (busiest thread {row['server_busiest_thread']['name']} "
                    f"{row['server_busiest_thread']['cores']:.2f}; by name "
                    + ", ".join(f"{k} {v:.2f}" for k, v in row["server_thread_cores"].items())
                    + f"), loadgen {_fmt(row['client_cpu_cores'], digits=1)} cores, host "
                    f"CPU {row['host_cpu_busy_pct']:.0f}% busy; means (warm-up included) "
                    + ", ".join(f"{k} {v:.2f}" for k, v in row["stages"].items()))
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {e}"[:400]
                log(f"served {name} c={c}: FAILED: {row['error']}")
            served["ramp"].append(row)
            if row.get("within_p99") and (best is None or row["candidates_per_s"] > best["candidates_per_s"]):
                best = row
            if row.get("p99_ms", 0) > 3 * args.p99_ms:
                break  # more outstanding calls only queue longer
        served["metrics"] = _scrape(metrics_port)
        served["best"] = best
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# ---- report --------------------------------------------------------------------------------------------------------

def _fmt(v, scale=1.0, digits=0, suffix=""):
    return "-" if v is None else f"{v / scale:.{digits}f}{suffix}"


def summary_rows(report):
    rows = []
    for r in report.get("twin") or []:
        rows.append(dict(r, name=f"twin {r['variant']}"))
    for r in report.get("inprocess") or []:
        rows.append(dict(r, name=f"in process {r.get('variant', 'jagrank')}"))
    variants = report.get("served_variants") or ({"jagged": report["served"]} if report.get("served") else {})
    for name, served in variants.items():
        best = served.get("best")
        if best:
            rows.append(dict(best, name=f"served {name} (c={best['concurrency']}, p99 {best['p99_ms']:.1f} ms)",
                             requests_per_batch=None, ms_per_batch=None, peak_memory_bytes=served_model_bytes(served),
                             device_peak_bytes=served.get("metrics", {}).get("jagrank_device_memory_peak_bytes")))
        else:
            rows.append(dict(name=f"served {name}", error=served.get("error") or (
                "no ramp point within the p99 bound" if served.get("ramp") else "did not run")))
    return rows


def args_p99(report):
    return f"{report.get('args', {}).get('p99_ms', 20):g}"


def served_model_bytes(served):
    """The server's weights + peak workspace (its /metrics after the ramp), or None."""
    m = served.get("metrics", {})
    if "jagrank_model_weights_bytes" in m and "jagrank_workspace_peak_bytes" in m:
        return m["jagrank_model_weights_bytes"] + m["jagrank_workspace_peak_bytes"]
    return None


def print_table(report):
    peak = report.get("gemm_peak") or {}
    print()
    print(f"model {report['model']['name']} (d {report['model']['embedding_dim']}, {report['model']['sparse_features']}"
          f" sparse features, max_history_len {report['model']['max_history_len']}); {report['law']}")
    f = report.get("flops_per_law") or {}
    if f:
        print(f"useful FLOPs: {f['per_request'] / 1e6:.1f} MFLOP per request + {f['per_candidate'] / 1e6:.2f} MFLOP "
              f"per candidate (mean kept history {f['mean_history_len']:.0f}); bf16 GEMM peak "
              f"{_fmt(peak.get('tflops'), 1, 0)} TFLOP/s ({peak.get('n', '?')}^3 {peak.get('dtype', '')})")
    head = (f"{'variant':<42} {'R':>4} {'requests/s':>11} {'cand/s':>9} {'ms/batch':>9} {'peak GB':>8} "
            f"{'smi GiB':>8} {'busy%':>6} {'TFLOP/s':>8} {'%peak':>6} {'srv cores':>9} {'host CPU%':>9}")
    print(head)
    print("-" * len(head))
    for r in summary_rows(report):
        if r.get("error"):
            print(f"{r['name']:<42} {_fmt(r.get('requests_per_batch')):>4} FAILED: {r['error'][:80]}")
            continue
        smi = r.get("smi_memory_used_mib_max")
        print(f"{r['name']:<42} {_fmt(r.get('requests_per_batch')):>4} {_fmt(r.get('requests_per_s')):>11} "
              f"{_fmt(r.get('candidates_per_s'), 1e6, 2, 'M'):>9} {_fmt(r.get('ms_per_batch'), 1, 3):>9} "
              f"{_fmt(r.get('peak_memory_bytes'), 1e9, 2):>8} {_fmt(smi, 1024, 2):>8} "
              f"{_fmt(r.get('gpu_busy_pct'), 1, 0):>6} {_fmt(r.get('useful_tflops'), 1, 1):>8} "
              f"{_fmt(r.get('share_of_gemm_peak'), 0.01, 1):>6} {_fmt(r.get('server_cpu_cores'), 1, 1):>9} "
              f"{_fmt(r.get('host_cpu_busy_pct'), 1, 0):>9}")
    print("peak GB: the twin's torch.cuda.max_memory_allocated; jagrank's weights + peak workspace (bench JSON, "
          "server /metrics); smi GiB: nvidia-smi memory.used, whole device (this process's CUDA context included); "
          "srv cores, host CPU%: the server's CPU and the whole host's busy share during the served run (the load "
          "generator runs on the same host)")
    host = report.get("host") or {}
    if host:
        print(f"host: {host.get('cpu')}, {host.get('cores')} cores")
    for note in report["notes"]:
        print(f"note: {note}")
    for part, error in report["failures"].items():
        print(f"FAILED {part}: {error}")
    twin = [r for r in report.get("twin") or [] if r.get("candidates_per_s")]
    variants = report.get("served_variants") or {}
    # The headline counts jagrank's own strategy (every variant but the padded baselines), unary or streaming.
    ours = [v["best"] for n, v in variants.items() if not n.startswith("padded") and v.get("best")]
    served = max(ours, key=lambda r: r["candidates_per_s"]) if ours else (report.get("served") or {}).get("best")
    for n, v in variants.items():
        if twin and v.get("best"):
            top = max(twin, key=lambda r: r["candidates_per_s"])
            print(f"served {n} vs torch twin in process: {v['best']['candidates_per_s'] / top['candidates_per_s']:.2f}")
    jagged, flash, dense = (variants.get(n, {}) for n in ("jagged", "padded_flash", "padded_dense"))
    if jagged.get("best") and flash.get("best"):
        print(f"jagged vs padded_flash candidates/s at p99<={args_p99(report)} ms: "
              f"{jagged['best']['candidates_per_s'] / flash['best']['candidates_per_s']:.2f}")
    # The same two strategies over RankStream (variants "stream" and
    # "padded_flash_stream"), where the host path does not bound either.
    stream, flash_stream = variants.get("stream", {}), variants.get("padded_flash_stream", {})
    if stream.get("best") and flash_stream.get("best"):
        print(f"jagged vs padded_flash candidates/s at p99<={args_p99(report)} ms over RankStream: "
              f"{stream['best']['candidates_per_s'] / flash_stream['best']['candidates_per_s']:.2f}")
    if served_model_bytes(jagged) and served_model_bytes(dense):
        print(f"jagged vs padded_dense peak memory (weights + workspace): "
              f"{served_model_bytes(jagged) / served_model_bytes(dense):.2f}")
    if twin and served:
        top = max(twin, key=lambda r: r["candidates_per_s"])
        ratio = served["candidates_per_s"] / top["candidates_per_s"]
        report["served_vs_twin"] = dict(ratio=ratio, twin_variant=top["variant"],
                                        twin_requests_per_batch=top["requests_per_batch"])
        print(f"jagrank served vs torch twin in process: {ratio:.2f}  (served {served['candidates_per_s'] / 1e6:.2f}M "
              f"candidates/s, {served.get('variant', 'jagged')} at c={served['concurrency']}; twin {top['variant']} "
              f"R={top['requests_per_batch']} "
              f"{top['candidates_per_s'] / 1e6:.2f}M)")
    else:
        why = ("no twin result" if not twin else "the served part failed" if "served" in report["failures"]
               else "the served part did not run" if "served" not in report
               else "no served result within the p99 bound")
        print(f"jagrank served vs torch twin in process: n/a ({why})")
    check = report.get("check")
    if check and "error" in check:
        print(f"fast twin vs reference twin: the check FAILED to run: {check['error']}")
    elif check:
        print(f"fast twin vs reference twin: max abs score error {check['max_abs_score_error']:.3e} "
              f"({check['dtype']}, tolerance {check['tolerance']:g}); fp32 logit error "
              f"{check['fp32']['logit_error_over_spread']:.2e} of the spread (tolerance {check['fp32_tolerance']:g})"
              + (f"; FA2 vs plain attention {max(check['flash_vs_plain_rel_error'].values()):.2e}"
                 if "flash_vs_plain_rel_error" in check else "") + f": {'ok' if check['ok'] else 'MISMATCH'}")


# ---- main ----------------------------------------------------------------------------------------------------------

def tiny_config():
    """A model small enough for a CPU run in seconds, with every piece of the production one."""
    return ModelConfig(name="jagrank-dlrm-tiny", embedding_dim=32, num_dense_features=13,
                       sparse_features=[SparseFeature(f"f{i}", n) for i, n in enumerate((97, 1000, 5, 3001))],
                       item_rows=5003, max_history_len=64, attention_heads=4, bottom_mlp=[64, 32],
                       top_mlp=[64, 32, 1], seed=11)


def int_list(text):
    return [int(v) for v in text.split(",") if v.strip()]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--parts", default="twin,inprocess,served", help="comma-separated: twin,inprocess,served")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--quick", action="store_true",
                   help="a tiny model (unless --model-config), small batches, short timings: exercises the code")
    p.add_argument("--model-config", default=None, help="model YAML (default config/models/production.yaml)")
    p.add_argument("--weights", default=None, help="weights file to write and use (default: in --workdir)")
    p.add_argument("--weights-dtype", default="bf16", choices=["bf16", "fp32"], help="the weights file's dtype")
    p.add_argument("--workdir", default=None,
                   help="weights, logs and the binaries' JSON, kept (default: a temporary directory, removed)")
    p.add_argument("--out", default=None, help="write everything as JSON here")
    p.add_argument("--dtype", default=None, choices=sorted(DTYPES),
                   help="the fast twin's dtype (default bf16; fp32 on the CPU)")
    p.add_argument("--requests-per-batch", type=int_list, default=None, help="default 128,512 (--quick: 8,16)")
    p.add_argument("--batches", type=int, default=None, help="distinct batches per size, rotated (default 8)")
    p.add_argument("--duration-s", type=float, default=None, help="timed seconds per twin variant and per "
                   "in-process run (default 3)")
    p.add_argument("--warmup-rounds", type=int, default=2, help="untimed passes over the batches first")
    p.add_argument("--scores-to-host", action="store_true",
                   help="twin: copy each batch's scores to the host before the next (a server's wait; "
                        "jagrank-bench-model's Forward returns host scores)")
    p.add_argument("--compile-modes", default="default",
                   help="torch.compile modes to time, comma-separated ('' = eager only), e.g. "
                        "default,max-autotune-no-cudagraphs")
    p.add_argument("--history-median", type=float, default=None, help="default 250 (--quick: 20)")
    p.add_argument("--history-sigma", type=float, default=1.2)
    p.add_argument("--candidates-min", type=int, default=None, help="default 20 (--quick: 2)")
    p.add_argument("--candidates-max", type=int, default=None, help="default 400 (--quick: 40)")
    p.add_argument("--sparse-ids-max", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--check-requests", type=int, default=6, help="law requests in the check (plus 2 edge cases)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="max abs score error of the benchmarked fast twin (default 1e-2; 1e-5 in fp32)")
    p.add_argument("--fp32-tolerance", type=float, default=1e-3,
                   help="the fast twin's math in float32: max abs logit error over the reference logits' "
                        "standard deviation (float32 rounding gives ~1e-6 of it)")
    p.add_argument("--kernel-tolerance", type=float, default=2e-2,
                   help="varlen FlashAttention-2 vs plain attention: max abs error / max abs output")
    p.add_argument("--gemm-n", type=int, default=None, help="the peak GEMM's size (default 8192; --quick 256)")
    p.add_argument("--gpu-index", default=None, help="the GPU nvidia-smi samples (default: from --device)")
    p.add_argument("--bench-binary", default=os.path.join(REPO, "build/bin/jagrank-bench-model"))
    p.add_argument("--inprocess-attention", default="jagged", help="jagrank-bench-model --attention")
    p.add_argument("--inprocess-pipelined", action=argparse.BooleanOptionalAction, default=True,
                   help="jagrank-bench-model --pipelined: stage and launch the next batch before waiting for the "
                        "current one, as the server does (the twin's batches are on the device already)")
    p.add_argument("--server-binary", default=os.path.join(REPO, "build/bin/jagrank-server"))
    p.add_argument("--loadgen-binary", default=os.path.join(REPO, "build/bin/jagrank-loadgen"))
    p.add_argument("--server-flags", default=DEFAULT_SERVER_FLAGS, help="extra jagrank-server flags (batching)")
    p.add_argument("--loadgen-flags", default=DEFAULT_LOADGEN_FLAGS, help="extra jagrank-loadgen flags")
    p.add_argument("--concurrency", type=int_list, default=[128, 256, 512, 1024, 1536],
                   help="the closed-loop ramp")
    p.add_argument("--served-variants", default="jagged=|",
                   help="servers to ramp, ';'-separated NAME=SERVER FLAGS|LOADGEN FLAGS|RAMP (the last two "
                        "optional; RAMP replaces --concurrency), e.g. 'jagged=|;stream=|--stream;"
                        "padded_flash=--attention padded_flash;padded_dense=--attention padded_dense||16,32,64'. "
                        "Names starting with 'padded' are baselines, left out of the headline ratio")
    p.add_argument("--loadgen-duration-s", type=float, default=4)
    p.add_argument("--loadgen-warmup-s", type=float, default=1)
    p.add_argument("--p99-ms", type=float, default=20)
    p.add_argument("--part-timeout-s", type=float, default=240, help="a binary's run, the server's start")
    a = p.parse_args(argv)
    quick = a.quick
    a.parts = [x for x in a.parts.split(",") if x]
    for x in a.parts:
        if x not in ("twin", "inprocess", "served"):
            p.error(f"--parts: unknown part '{x}' (twin, inprocess, served)")
    on_cpu = torch.device(a.device).type == "cpu"
    a.dtype = a.dtype or ("fp32" if on_cpu else "bf16")
    a.tolerance = a.tolerance if a.tolerance is not None else (1e-5 if a.dtype == "fp32" else 1e-2)
    a.requests_per_batch = a.requests_per_batch or ([8, 16] if quick else [128, 512])
    a.batches = a.batches or (3 if quick else 8)
    a.duration_s = a.duration_s if a.duration_s is not None else (0.3 if quick else 3.0)
    a.history_median = a.history_median if a.history_median is not None else (20 if quick else 250)
    a.candidates_min = a.candidates_min if a.candidates_min is not None else (2 if quick else 20)
    a.candidates_max = a.candidates_max if a.candidates_max is not None else (40 if quick else 400)
    a.gemm_n = a.gemm_n or (256 if quick else 8192)
    if a.gpu_index is None:
        dev = torch.device(a.device)
        a.gpu_index = dev.index if dev.index is not None else 0
    if min(a.requests_per_batch) < 1 or a.batches < 1 or a.duration_s <= 0:
        p.error("--requests-per-batch, --batches and --duration-s must be positive")
    if not 1 <= a.candidates_min <= a.candidates_max or a.sparse_ids_max < 1:
        p.error("need 1 <= --candidates-min <= --candidates-max and --sparse-ids-max >= 1")
    return a


def main(argv=None):
    args = parse_args(argv)
    device = args.device
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        log(f"--device {device}: no CUDA device here (torch {torch.__version__})")
        return 2
    workdir = args.workdir or tempfile.mkdtemp(prefix="model_vs_torch.")
    os.makedirs(workdir, exist_ok=True)
    try:
        return run(args, device, workdir)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)  # the weights file is large; --out has the results


def run(args, device, workdir):
    if args.model_config:
        config_path = args.model_config
    elif args.quick:
        config_path = os.path.join(workdir, "tiny_model.yaml")
        with open(config_path, "w") as f:
            f.write(tiny_config().to_yaml())
    else:
        config_path = os.path.join(REPO, "config/models/production.yaml")
    config = ModelConfig.from_yaml(config_path)
    law = Law(args.history_median, args.history_sigma, config.max_history_len, args.candidates_min,
              args.candidates_max, args.sparse_ids_max)
    flops = Flops(config)
    per_law = flops.per_law(law)
    report = dict(
        model=dict(name=config.name, config=config_path, embedding_dim=config.embedding_dim,
                   sparse_features=len(config.sparse_features), max_history_len=config.max_history_len),
        law=law.describe(), args={k: v for k, v in vars(args).items()}, device=device,
        torch=torch.__version__, host=host_description(), flops_per_law=per_law, notes=[], failures={})
    if args.quick:
        report["notes"].append(f"quick: model {config.name} from {config_path}, small batches, short timings "
                               "(exercises the code; the figures mean nothing)")
    log(f"model {config.name} ({config_path}); {law.describe()}; torch {torch.__version__} on {device}; host "
        f"{report['host']['cpu']}, {report['host']['cores']} cores")
    log(f"useful FLOPs: {per_law['per_request'] / 1e6:.2f} MFLOP per request + "
        f"{per_law['per_candidate'] / 1e6:.3f} MFLOP per candidate")
    if torch.device(device).type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(torch.device(device))
        torch.backends.cuda.matmul.allow_tf32 = False  # the check compares float32 forwards
        torch.backends.cudnn.allow_tf32 = False
    try:
        report["gemm_peak"] = gemm_peak(device, args.gemm_n, 10)
        log(f"GEMM peak: {report['gemm_peak']['tflops']:.1f} TFLOP/s ({args.gemm_n}^3 "
            f"{report['gemm_peak']['dtype']}, median of 10)")
    except Exception as e:  # noqa: BLE001
        report["failures"]["gemm_peak"] = f"{type(e).__name__}: {e}"
        log(f"GEMM peak: FAILED: {e}")
    weights_path = args.weights or os.path.join(workdir, f"{config.name}.safetensors")
    build_weights(config, weights_path, args.weights_dtype)
    report["weights"] = weights_path

    sampler = GpuSampler(args.gpu_index).start() if torch.device(device).type == "cuda" else GpuSampler(None)
    peak = report.get("gemm_peak")
    parts = dict(twin=lambda: part_twin(args, config, weights_path, law, flops, peak, device, sampler, report),
                 inprocess=lambda: part_inprocess(args, config_path, weights_path, law, per_law, peak, device,
                                                  sampler, workdir, report),
                 served=lambda: part_served(args, config_path, weights_path, law, per_law, peak, device, sampler,
                                            workdir, report))
    try:
        for name in args.parts:
            t0 = time.time()
            try:
                parts[name]()
            except Exception as e:  # noqa: BLE001 - report the others
                report["failures"][name] = f"{type(e).__name__}: {e}"[:600]
                log(f"part {name}: FAILED: {report['failures'][name]}")
                traceback.print_exc()
            log(f"part {name}: {time.time() - t0:.1f} s")
    finally:
        sampler.stop()
    print_table(report)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2, default=str)
        log(f"wrote {args.out}")
    check_failed = report.get("check") is not None and not report["check"]["ok"]
    if check_failed:
        log("FAILED: the fast twin does not compute the twin's function (see the check above)")
    return 1 if check_failed or report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
