"""jagrank's jagged flash attention against torch's attention paths on one GPU.

Loads the C ABI (kernels/c_api/jagrank_c.h, libjagrank_kernels_c.so) through
ctypes, checks it against torch SDPA on random jagged inputs (relative error),
then times it beside torch's variants on the shapes below: CUDA events,
median of 20 after warm-up, peak memory beyond the inputs (torch's caching
allocator: outputs and padded copies count; ours allocates only its output).

Shape sets (--shapes, default all):
  table  the results-page table: uniform lengths (mean fill x N), H = 4, and
         the target-attention shapes
  heavy  heavy-tailed lengths: Zipf and Pareto up to 4096-8192 tokens, and
         log-normal (median 250, sigma 1.2, capped at 2048: the production
         model's histories) at D = 32/64/128 and H = 1/2/4/8
  full   full-length batches: every sequence exactly N tokens, no padding
Length laws, one function each (lengths_<law>), all capped at N and drawn
from random.Random seeded by --seed and the shape itself, so a shape's
lengths are the same in every run and in --dry-run, whichever sets are chosen:
  uniform fill        uniform in [(2 fill - 1) N, N] for fill >= 0.5, else [1, 2 fill N]
  lognormal m sigma   floor(m exp(sigma z)), z standard normal, at least 1
  zipf s              P(L = k) proportional to k^-s, k = 1..N
  pareto alpha xmin   floor(xmin u^(-1/alpha)), u uniform in (0, 1]
  full                every length N

Self-attention (bf16, B sequences, H heads of D dims):
  jagrank      jagrank_jagged_self_attention on packed [T, H, D] + offsets
  dense        padded [B, H, N, D], materialised scores, key mask, softmax, PV
               (skipped where it would need more than 20 GB)
  sdpa_flash   padded, SDPA flash backend (no mask: computes the padding)
  sdpa_mask    padded, SDPA with a boolean key-padding mask (not on full rows)
  cudnn        padded, SDPA cuDNN backend, no mask (computes the padding)
  varlen_fa2   packed + cu_seqlens, torch.ops.aten._flash_attention_forward
  jagrank_cp_async  with --kv-copy-ab: jagrank again with the Hopper kernel's
               K/V tiles copied by cp.async instead of TMA
               (JAGRANK_FLASH_KV_COPY=cp_async, read per launch)
  jagrank_grid / jagrank_persistent  with --schedule-ab: jagrank again with
               the Hopper kernel's schedule forced: one CTA per query tile of
               the longest sequence, or persistent CTAs over the list of
               tiles (JAGRANK_FLASH_SCHEDULE=grid / persistent, read per
               launch; jagrank itself lets the launcher choose)
               Each A/B variant runs in the same process on the same inputs;
               a summary line gives its time over jagrank's per shape
               (self and target shapes)
On full-length rows there is no padding: dense, sdpa_flash and cudnn run on
the packed tensors viewed as [B, H, N, D] (no copy, no mask), so "cudnn"
there is cuDNN SDPA on exactly our work.
Target attention (bf16, one head, d = 64; candidates over their request's
history): jagrank_jagged_target_attention against padded_dense, sdpa_padded
and varlen_fa2 as cross-attention.

"eff TF/s" counts only the real work: 4 sum(Lq Lk) H D. "x<variant>" columns
are that variant's time over ours (> 1: we are faster). A padded variant
whose timing would take more than MAX_VARIANT_S by the FLOP-based estimate
(estimate_ms) is skipped and listed as such; jagrank and varlen_fa2 always run.
The whole default run is planned at about 1.5 minutes on an H200 (--dry-run
prints the estimate; the budget is 3 minutes, room for the estimate being
off). The table ends with three summary lines:
  min speedup vs varlen_fa2: X (shape ...)       over all self and target rows
  full-length vs cudnn: min X (shape ...)        cuDNN time over ours, full rows
  D=128 long-sequence TFLOP/s: max X (shape ...) ours, D = 128 and N >= 4096
"ms" is the median of back-to-back calls from Python, host launch path
included: a call of a few tens of microseconds can be bound by it. Calls
under GRAPH_BELOW_MS are also timed as the replay of a CUDA graph of 20
calls ("graph_ms", every variant alike: device time only), with one more line:
  device time (CUDA graph, calls under X ms) vs varlen_fa2: min X (shape ...)

Shapes, lengths, FLOPs and the time estimate without torch or a GPU:
  python3 attention_vs_torch.py --dry-run [--shapes heavy]

Table and plot again from a saved run (no GPU, no torch):
  python3 attention_vs_torch.py --from-json r.json --plot t.png

Run on the GPU machine:
  python3 attention_vs_torch.py --lib libjagrank_kernels_c.so [--shapes all|table|heavy|full]
      [--skip dense] [--out r.json] [--plot t.png] [--quick]
"""
import argparse
import collections
import ctypes
import json
import math
import os
import random
import sys

try:  # --from-json needs neither torch nor a GPU
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = F = None

DTYPE_BF16 = 1


class SelfShape(collections.namedtuple("SelfShape", "B N H D law args")):
    """B sequences of at most N tokens (lengths from LAWS[law](B, N, rng, *args)), H heads of D dims."""

    def label(self):
        return law_label(self.law, self.args)

    def text(self):
        return f"self B={self.B} N={self.N} H={self.H} D={self.D} {self.label()}"


class TargetShape(collections.namedtuple("TargetShape", "B Cmin Cmax Lmax d")):
    """B requests, Cmin..Cmax candidates each, histories log-normal (median Lmax / 10, sigma 1) up to Lmax."""

    def text(self):
        return f"target B={self.B} C={self.Cmin}-{self.Cmax} Lmax={self.Lmax} d={self.d}"


TABLE_SELF = [SelfShape(B, N, H, D, "uniform", (fill,)) for (B, N, H, D, fill) in [
    (1024, 256, 4, 32, 0.5), (1024, 512, 4, 32, 0.5), (1024, 1024, 4, 32, 0.5),
    (512, 2048, 4, 32, 0.5), (1024, 1024, 4, 32, 0.25), (1024, 1024, 4, 32, 0.1),
    (1024, 512, 4, 64, 0.5), (512, 1024, 4, 128, 0.5), (256, 4096, 4, 64, 0.25),
]]
TABLE_TARGET = [
    TargetShape(256, 64, 512, 1024, 64), TargetShape(256, 64, 512, 2048, 64), TargetShape(1024, 16, 128, 1024, 64),
    TargetShape(128, 256, 1024, 4096, 64),
]
# Zipf up to 8192 at D = 64, H = 2 was the worst case against varlen FA2;
# log-normal is the production model's history law.
HEAVY_SELF = [
    SelfShape(512, 8192, 2, 64, "zipf", (1.1,)),
    SelfShape(1024, 8192, 2, 64, "zipf", (1.2,)),
    SelfShape(2048, 8192, 2, 64, "zipf", (1.5,)),
    SelfShape(512, 8192, 2, 128, "zipf", (1.1,)),
    SelfShape(512, 8192, 8, 32, "zipf", (1.1,)),
    SelfShape(1024, 8192, 4, 64, "pareto", (1.1, 32)),
    SelfShape(1024, 4096, 8, 32, "pareto", (1.5, 64)),
] + [SelfShape(1024, 2048, H, D, "lognormal", (250, 1.2)) for D in (32, 64, 128) for H in (1, 2, 4, 8)]
# 64 x 8192 at D = 128, H = 2 is where padded cuDNN beat us (7.40 vs 8.62 ms).
FULL_SELF = [
    SelfShape(64, 8192, 2, 128, "full", ()),
    SelfShape(32, 8192, 4, 128, "full", ()),
    SelfShape(16, 16384, 2, 128, "full", ()),
    SelfShape(256, 2048, 8, 128, "full", ()),
    SelfShape(128, 4096, 4, 64, "full", ()),
    SelfShape(1024, 1024, 4, 64, "full", ()),
    SelfShape(512, 2048, 4, 32, "full", ()),
    SelfShape(2048, 512, 8, 32, "full", ()),
]
SHAPE_SETS = {"table": (TABLE_SELF, TABLE_TARGET), "heavy": (HEAVY_SELF, []), "full": (FULL_SELF, [])}

# Estimated rates in TFLOP/s on an H200 (bf16), used only to plan the run
# (estimate_ms): jagrank and varlen_fa2 on the real work of sequences of
# 1024+ tokens, the padded variants on the padded work; from the results page.
RATE_TFLOPS = {
    "jagrank": {32: 170, 64: 280, 128: 420},
    "varlen_fa2": {32: 130, 64: 210, 128: 320},
    "cudnn": {32: 150, 64: 250, 128: 400},
    "sdpa_flash": {32: 140, 64: 220, 128: 320},
    "sdpa_mask": {32: 60, 64: 100, 128: 150},
    "dense": {32: 60, 64: 80, 128: 100},
}
HBM_BYTES_PER_MS = 3.0e9  # ~3 TB/s sustained: padding copies and dense scores
MAX_VARIANT_S = 6.0  # padded variants whose timing is estimated longer are skipped
# Same-process A/B variants of jagrank on the self and target shapes: name -> (flag,
# environment variable, value, what it changes for the summary line).
AB_VARIANTS = {
    "jagrank_cp_async": ("kv_copy_ab", "JAGRANK_FLASH_KV_COPY", "cp_async", "cp.async over TMA K/V copies"),
    "jagrank_grid": ("schedule_ab", "JAGRANK_FLASH_SCHEDULE", "grid", "one CTA per tile over the chosen schedule"),
    "jagrank_persistent": ("schedule_ab", "JAGRANK_FLASH_SCHEDULE", "persistent",
                           "persistent CTAs over the chosen schedule"),
}
AB_SELECTED = []  # the AB_VARIANTS names to time (--kv-copy-ab, --schedule-ab)
MAX_DENSE_BYTES = 20e9  # the dense variant's scores and padded copies
SHAPE_OVERHEAD_S = 0.4  # inputs, index tensors, the error check, empty_cache per shape
CHECK_S = 5.0  # check_against_sdpa
GRAPH_BELOW_MS = 0.25  # calls shorter than this are also timed by CUDA-graph replay (graph_ms)


def _uniform_ints(B, lo, hi, rng):
    return [rng.randint(lo, hi) for _ in range(B)]


def lengths_uniform(B, N, rng, fill):
    if fill >= 0.5:
        return _uniform_ints(B, max(1, int((2 * fill - 1) * N)), N, rng)
    return [min(N, x) for x in _uniform_ints(B, 1, max(2, int(2 * fill * N)), rng)]


def lengths_lognormal(B, N, rng, median, sigma):
    return [min(N, max(1, int(median * math.exp(sigma * rng.gauss(0.0, 1.0))))) for _ in range(B)]


def lengths_zipf(B, N, rng, s):
    cumulative, total = [], 0.0
    for k in range(1, N + 1):
        total += k ** -s
        cumulative.append(total)
    return rng.choices(range(1, N + 1), cum_weights=cumulative, k=B)


def lengths_pareto(B, N, rng, alpha, xmin):
    return [min(N, int(xmin * (1.0 - rng.random()) ** (-1.0 / alpha))) for _ in range(B)]


def lengths_full(B, N, rng):
    return [N] * B


LAWS = {"uniform": lengths_uniform, "lognormal": lengths_lognormal, "zipf": lengths_zipf,
        "pareto": lengths_pareto, "full": lengths_full}
LAW_ARG_NAMES = {"uniform": ("fill",), "lognormal": ("median", "sigma"), "zipf": ("s",),
                 "pareto": ("alpha", "xmin"), "full": ()}


def law_label(law, args):
    return " ".join([law] + [f"{name}={value:g}" for name, value in zip(LAW_ARG_NAMES[law], args)])


def shape_rng(seed, shape):
    # str seeds hash through SHA-512 (not Python's salted hash): the same in every process.
    return random.Random(f"{seed} {shape.text()}")


def self_lengths(shape, seed):
    return LAWS[shape.law](shape.B, shape.N, shape_rng(seed, shape), *shape.args)


def target_lengths(shape, seed):
    """(candidates per request, history length per request)."""
    rng = shape_rng(seed, shape)
    C = _uniform_ints(shape.B, shape.Cmin, shape.Cmax, rng)
    return C, lengths_lognormal(shape.B, shape.Lmax, rng, shape.Lmax / 10, 1.0)


def bench_seconds(ms):
    """Wall time of bench() + peak_mem() + one error-check call for a call of `ms`."""
    return (6 * ms + 20 * max(ms, 1.0)) / 1e3


def estimate_ms(variant, shape, L):
    """Rough H200 time of one self-attention call (planning only, see RATE_TFLOPS)."""
    B, N, H, D = shape.B, shape.N, shape.H, shape.D
    sum_sq = sum(x * x for x in L)
    T = sum(L)
    full = shape.law == "full"
    if variant in ("jagrank", "varlen_fa2"):
        rms = math.sqrt(sum_sq / max(B, 1))
        rate = RATE_TFLOPS[variant][D] * min(1.0, math.sqrt(rms / 1024))
        return 0.01 + 4.0 * sum_sq * H * D / (rate * 1e9)
    padded_elems = B * N * H * D
    rate = RATE_TFLOPS[variant][D] * min(1.0, math.sqrt(N / 1024))
    ms = 0.01 + 4.0 * B * N * N * H * D / (rate * 1e9)
    if not full:  # zeros, scatter of the tokens, three tensors
        ms += 3 * (2 * padded_elems + 4 * T * H * D) / HBM_BYTES_PER_MS
    if variant == "dense":  # scores written and read by the matmul, scale, mask, softmax
        ms += 8 * 2 * B * H * N * N / HBM_BYTES_PER_MS
    return ms


def dense_bytes(shape):
    B, N, H, D = shape.B, shape.N, shape.H, shape.D
    return 3 * 2 * B * H * N * N + 4 * 2 * B * N * H * D


def plan_self(shape, L, skip):
    """[(variant, estimated ms, reason it is skipped or None)] in timing order."""
    plan = []
    names = ["jagrank", "dense", "sdpa_flash", "sdpa_mask", "cudnn", "varlen_fa2"]
    names[1:1] = AB_SELECTED
    for name in names:
        ms = estimate_ms("jagrank" if name in AB_VARIANTS else name, shape, L)
        reason = None
        if name in skip:
            reason = "--skip"
        elif name == "sdpa_mask" and shape.law == "full":
            reason = "full length: no padding to mask"
        elif name == "dense" and dense_bytes(shape) > MAX_DENSE_BYTES:
            reason = f"needs ~{dense_bytes(shape) / 1e9:.0f} GB > {MAX_DENSE_BYTES / 1e9:.0f} GB"
        elif name not in ("jagrank", "varlen_fa2") and name not in AB_VARIANTS and bench_seconds(ms) > MAX_VARIANT_S:
            reason = f"est {bench_seconds(ms):.1f} s > {MAX_VARIANT_S:g} s"
        plan.append((name, ms, reason))
    return plan


def plan_target(shape, C, L, skip):
    real = 4.0 * sum(c * l for c, l in zip(C, L)) * shape.d
    padded = 4.0 * shape.B * max(C) * max(L) * shape.d
    plan = []
    variants = [("jagrank", real)] + [(name, real) for name in AB_SELECTED]
    variants += [("padded_dense", padded), ("sdpa_padded", padded), ("varlen_fa2", real)]
    for name, flops in variants:
        plan.append((name, 0.01 + flops / 50e9, "--skip" if name in skip else None))
    return plan


def plan_seconds(plan):
    return SHAPE_OVERHEAD_S + sum(bench_seconds(ms) for _, ms, reason in plan if reason is None)


def selected_shapes(which, quick):
    names = list(SHAPE_SETS) if which == "all" else [which]
    selfs = [s for n in names for s in SHAPE_SETS[n][0]]
    targets = [s for n in names for s in SHAPE_SETS[n][1]]
    if quick:
        selfs, targets = selfs[:2], targets[:1]
    return selfs, targets


def dry_run(self_shapes, target_shapes, skip, seed):
    """Shapes, their lengths' totals and work, and the planned time; no torch."""
    total = CHECK_S
    print(f"{'shape':<58} {'tokens':>8} {'maxL':>6} {'sum Lq*Lk':>10} {'FLOPs':>9} {'ours ms':>8} {'run s':>6}"
          "  skipped")
    for shape in self_shapes:
        L = self_lengths(shape, seed)
        plan = plan_self(shape, L, skip)
        sum_sq = sum(x * x for x in L)
        flops = 4.0 * sum_sq * shape.H * shape.D
        seconds = plan_seconds(plan)
        total += seconds
        skipped = ", ".join(f"{n} ({r})" for n, _, r in plan if r is not None)
        print(f"{shape.text():<58} {sum(L):>8} {max(L):>6} {sum_sq:>10.3g} {flops:>9.3g} {plan[0][1]:>8.3f} "
              f"{seconds:>6.1f}  {skipped}")
    for shape in target_shapes:
        C, L = target_lengths(shape, seed)
        plan = plan_target(shape, C, L, skip)
        sum_qk = sum(c * l for c, l in zip(C, L))
        seconds = plan_seconds(plan)
        total += seconds
        skipped = ", ".join(f"{n} ({r})" for n, _, r in plan if r is not None)
        print(f"{shape.text():<58} {sum(C):>8} {max(L):>6} {sum_qk:>10.3g} {4.0 * sum_qk * shape.d:>9.3g} "
              f"{plan[0][1]:>8.3f} {seconds:>6.1f}  {skipped}")
    print(f"shapes: {len(self_shapes)} self, {len(target_shapes)} target; "
          f"estimated run time on an H200: {total:.0f} s (correctness check included)")


def load_lib(path):
    """The C ABI; version 1 (a library before the token-count hints) still
    loads, for A/B runs against an older build."""
    lib = ctypes.CDLL(path)
    vp, i32, i64, f32 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_float
    lib.jagrank_last_error.restype = ctypes.c_char_p
    lib.jagrank_c_api_version.restype = ctypes.c_int
    lib.api_version = lib.jagrank_c_api_version()
    if lib.api_version not in (1, 2):
        raise RuntimeError(f"{path}: C ABI version {lib.api_version}, this script knows 1 and 2")
    hint = [i64] if lib.api_version >= 2 else []
    lib.jagrank_jagged_self_attention.argtypes = [vp, vp, vp, vp, i32, vp, i32, i32, i32, i32] + hint + [f32, vp]
    lib.jagrank_jagged_self_attention.restype = ctypes.c_int
    lib.jagrank_jagged_target_attention.argtypes = [vp, vp, i32] + hint + [vp, vp, i32, i32, i32, i32, f32, vp, vp]
    lib.jagrank_jagged_target_attention.restype = ctypes.c_int
    return lib


def token_hint(lib, count):
    """The token-count argument of C ABI version 2 (none before it)."""
    return (count,) if lib.api_version >= 2 else ()


def check_rc(lib, rc):
    if rc != 0:
        raise RuntimeError(f"jagrank error {rc}: {lib.jagrank_last_error().decode()}")


def ours_self(lib, q, k, v, offsets, max_len, scale):
    T, H, D = q.shape
    o = torch.empty_like(q)
    stream = torch.cuda.current_stream().cuda_stream
    check_rc(lib, lib.jagrank_jagged_self_attention(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), DTYPE_BF16, offsets.data_ptr(),
        offsets.numel() - 1, H, D, max_len, *token_hint(lib, T), scale, stream))
    return o


def ours_target(lib, q, q_offsets, max_q, z, k_offsets, max_k, scale):
    C, d = q.shape
    o = torch.empty_like(q)
    stream = torch.cuda.current_stream().cuda_stream
    check_rc(lib, lib.jagrank_jagged_target_attention(
        q.data_ptr(), q_offsets.data_ptr(), max_q, *token_hint(lib, C), z.data_ptr(), k_offsets.data_ptr(), max_k,
        q_offsets.numel() - 1, d, DTYPE_BF16, scale, o.data_ptr(), stream))
    return o


def offsets_of(L):
    off = torch.zeros(L.numel() + 1, dtype=torch.int32)
    off[1:] = torch.cumsum(L, 0)
    return off


def bench(fn, iters=20, warm=3):
    """Median ms per call. Each timed sample runs the call `inner` times back
    to back (inner chosen so that a sample lasts >= ~1 ms), so that host-side
    launch latency of tiny calls overlaps device work for every variant alike."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    s = torch.cuda.Event(enable_timing=True)
    e = torch.cuda.Event(enable_timing=True)
    s.record(); fn(); e.record(); torch.cuda.synchronize()
    inner = max(1, min(50, int(1.0 / max(s.elapsed_time(e), 1e-3))))
    ts = []
    for _ in range(iters):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(inner):
            fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / inner)
    ts.sort()
    return ts[len(ts) // 2]


_GRAPH_STREAM = None


def bench_graph(fn, calls=20, samples=10):
    """Median device ms per call: `calls` calls captured in one CUDA graph
    (after warm-up on the capture stream, so that nothing is first allocated
    inside it), replayed `samples` times; no host work between the calls."""
    global _GRAPH_STREAM
    if _GRAPH_STREAM is None:  # one for the run: jagrank keeps a small workspace per stream
        _GRAPH_STREAM = torch.cuda.Stream()
    stream = _GRAPH_STREAM
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(samples):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / calls)
    ts.sort()
    del graph
    return ts[len(ts) // 2]


def time_variant(row, name, fn, ours, flops):
    """Times one variant into `row`: ms (bench), tflops, peak_mib and, for a
    call under GRAPH_BELOW_MS, graph_ms (bench_graph: the device time, where
    back-to-back calls can be bound by the host's launch path); an A/B
    variant (AB_VARIANTS) runs with its environment variable set and records
    rel_vs_jagrank against the default path; a failure is recorded as error."""
    ab = AB_VARIANTS.get(name)
    if ab is not None:
        by_default = ours().clone()
        os.environ[ab[1]] = ab[2]
    try:
        if ab is not None:
            row.update(rel_vs_jagrank=rel_err(ours(), by_default))
        ms = bench(fn)
        row.update(ms=ms, tflops=flops / ms / 1e9, peak_mib=peak_mem(fn) / 2**20)
        if ms < GRAPH_BELOW_MS:
            row.update(graph_ms=bench_graph(fn))
    except Exception as ex:  # a variant that cannot run this shape (e.g. out of memory)
        row.update(error=str(ex).splitlines()[0][:120])
    finally:
        if ab is not None:
            os.environ.pop(ab[1], None)


def peak_mem(fn):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak


def rel_err(got, ref):
    got, ref = got.float(), ref.float()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - ref).norm() / ref.norm())


def check_against_sdpa(lib, gen, dev):
    """Random jagged batches incl. lengths 1 and long, each sequence against
    float32 SDPA (math backend) on the same bf16 values."""
    worst = 0.0
    for D in (32, 64, 128):
        for H in (1, 2, 4, 8):
            L = torch.randint(1, 700, (12,), generator=gen)
            L[0], L[1] = 1, 1023
            off = offsets_of(L)
            T = int(off[-1])
            q, k, v = (torch.randn(T, H, D, generator=gen).to(dev, torch.bfloat16) for _ in range(3))
            scale = 1.0 / math.sqrt(D)
            got = ours_self(lib, q, k, v, off.to(dev), int(L.max()), scale)
            torch.cuda.synchronize()
            ref = torch.empty(T, H, D, device=dev, dtype=torch.float32)
            for b in range(L.numel()):
                a, z = int(off[b]), int(off[b + 1])
                x = [t[a:z].float().transpose(0, 1)[None] for t in (q, k, v)]
                with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                    ref[a:z] = F.scaled_dot_product_attention(*x, scale=scale)[0].transpose(0, 1)
            err = rel_err(got, ref)
            worst = max(worst, err)
            print(f"check self   D={D:3d} H={H} T={T:6d}: rel err vs SDPA fp32 {err:.2e}")
    # target attention with empty histories
    d = 64
    C = torch.randint(1, 300, (10,), generator=gen)
    Lk = torch.randint(0, 900, (10,), generator=gen)
    Lk[0] = 0
    cq, ck = offsets_of(C), offsets_of(Lk)
    q = torch.randn(int(cq[-1]), d, generator=gen).to(dev, torch.bfloat16)
    z = torch.randn(int(ck[-1]), d, generator=gen).to(dev, torch.bfloat16)
    got = ours_target(lib, q, cq.to(dev), int(C.max()), z, ck.to(dev), int(Lk.max()), 1 / math.sqrt(d))
    ref = torch.zeros(int(cq[-1]), d, device=dev)
    for b in range(10):
        if Lk[b] == 0:
            continue
        qa, qz, ka, kz = int(cq[b]), int(cq[b + 1]), int(ck[b]), int(ck[b + 1])
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            ref[qa:qz] = F.scaled_dot_product_attention(q[qa:qz].float(), z[ka:kz].float(), z[ka:kz].float(),
                                                        scale=1 / math.sqrt(d))
    err = rel_err(got, ref)
    zero_ok = bool((got[: int(C[0])] == 0).all())
    worst = max(worst, err if zero_ok else float("inf"))
    print(f"check target d=64: rel err vs SDPA fp32 {err:.2e}, empty-history rows zero: {zero_ok}")
    return worst


def run_self(lib, dev, shapes, skip, seed):
    rows = []
    dt = torch.bfloat16
    for shape in shapes:
        B, N, H, D = shape.B, shape.N, shape.H, shape.D
        full = shape.law == "full"
        lens = self_lengths(shape, seed)
        plan = plan_self(shape, lens, skip)
        L = torch.tensor(lens, dtype=torch.int64)
        T = int(L.sum())
        cu = offsets_of(L)
        cu_d = cu.to(dev)
        q, k, v = (torch.randn(T, H, D, device=dev, dtype=dt) for _ in range(3))
        maxL = int(L.max())
        if not full:
            idx_b = torch.repeat_interleave(torch.arange(B), L).to(dev)
            idx_t = (torch.arange(T) - torch.repeat_interleave(cu[:-1].long(), L)).to(dev)

        def padded(x):
            if full:  # every sequence is N tokens: the packed tensor is already [B, N, H, D]
                return x.view(B, N, H, D).transpose(1, 2)
            p = torch.zeros(B, N, H, D, device=dev, dtype=dt)
            p[idx_b, idx_t] = x
            return p.transpose(1, 2)  # B, H, N, D

        keymask = torch.arange(N, device=dev)[None, :] < L.to(dev)[:, None]
        scale = 1.0 / math.sqrt(D)

        def dense():
            Q, K, V = padded(q), padded(k), padded(v)
            s = torch.matmul(Q, K.transpose(-1, -2)) * scale
            s = s.masked_fill(~keymask[:, None, None, :], float("-inf"))
            return torch.matmul(torch.softmax(s, dim=-1), V)

        def sdpa_flash():
            Q, K, V = padded(q), padded(k), padded(v)
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(Q, K, V, scale=scale)

        def sdpa_mask():
            Q, K, V = padded(q), padded(k), padded(v)
            return F.scaled_dot_product_attention(Q, K, V, attn_mask=keymask[:, None, None, :], scale=scale)

        def cudnn():
            Q, K, V = padded(q), padded(k), padded(v)
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(Q, K, V, scale=scale)

        def varlen():
            return torch.ops.aten._flash_attention_forward(
                q, k, v, cu_d, cu_d, maxL, maxL, 0.0, False, False, scale=scale)[0]

        def ours():
            return ours_self(lib, q, k, v, cu_d, maxL, scale)

        flops = 4.0 * float((L.double() ** 2).sum()) * H * D
        err = rel_err(ours(), varlen())
        fns = dict(jagrank=ours, dense=dense, sdpa_flash=sdpa_flash, sdpa_mask=sdpa_mask, cudnn=cudnn, varlen_fa2=varlen,
                   **{name: ours for name in AB_VARIANTS})
        for name, est_ms, reason in plan:
            if reason == "--skip":
                continue
            row = dict(kind="self", B=B, N=N, H=H, D=D, law=shape.law, law_label=shape.label(),
                       fill=shape.args[0] if shape.law == "uniform" else None, T=T, Lmax=maxL,
                       sum_lq_lk=float((L.double() ** 2).sum()), variant=name, rel_vs_fa2=err, est_ms=est_ms)
            if reason is not None:
                row.update(skipped=reason)
                rows.append(row)
                continue
            time_variant(row, name, fns[name], ours, flops)
            rows.append(row)
            torch.cuda.empty_cache()
        print(f"{shape.text()}: done (rel err vs varlen_fa2 {err:.2e})", flush=True)
        del q, k, v
    return rows


def run_target(lib, dev, shapes, skip, seed):
    rows = []
    dt = torch.bfloat16
    for shape in shapes:
        B, Cmin, Cmax, Lmax, d = shape
        C_list, L_list = target_lengths(shape, seed)
        C, L = torch.tensor(C_list, dtype=torch.int64), torch.tensor(L_list, dtype=torch.int64)
        cq, ck = offsets_of(C), offsets_of(L)
        TQ, TK = int(cq[-1]), int(ck[-1])
        q = torch.randn(TQ, 1, d, device=dev, dtype=dt)
        kv = torch.randn(TK, 1, d, device=dev, dtype=dt)
        scale = 1 / math.sqrt(d)
        mC, mL = int(C.max()), int(L.max())
        bq = torch.repeat_interleave(torch.arange(B), C).to(dev)
        tq = (torch.arange(TQ) - torch.repeat_interleave(cq[:-1].long(), C)).to(dev)
        bk = torch.repeat_interleave(torch.arange(B), L).to(dev)
        tk = (torch.arange(TK) - torch.repeat_interleave(ck[:-1].long(), L)).to(dev)
        keymask = torch.arange(mL, device=dev)[None, :] < L.to(dev)[:, None]
        cqd, ckd = cq.to(dev), ck.to(dev)

        def pad(x, bi, ti, m):
            p = torch.zeros(B, m, d, device=dev, dtype=dt)
            p[bi, ti] = x[:, 0]
            return p

        def dense():
            Q, K = pad(q, bq, tq, mC), pad(kv, bk, tk, mL)
            s = torch.bmm(Q, K.transpose(1, 2)) * scale
            s = s.masked_fill(~keymask[:, None, :], float("-inf"))
            return torch.bmm(torch.softmax(s, -1), K)

        def sdpa():
            Q, K = pad(q, bq, tq, mC)[:, None], pad(kv, bk, tk, mL)[:, None]
            return F.scaled_dot_product_attention(Q, K, K, attn_mask=keymask[:, None, None, :], scale=scale)

        def varlen():
            return torch.ops.aten._flash_attention_forward(q, kv, kv, cqd, ckd, mC, mL, 0.0, False, False,
                                                           scale=scale)[0]

        q2, kv2 = q[:, 0], kv[:, 0]

        def ours():
            return ours_target(lib, q2, cqd, mC, kv2, ckd, mL, scale)

        flops = 4.0 * float((C.double() * L.double()).sum()) * d
        err = rel_err(ours(), varlen()[:, 0])
        fns = dict(jagrank=ours, padded_dense=dense, sdpa_padded=sdpa, varlen_fa2=varlen,
                   **{name: ours for name in AB_VARIANTS})
        for name, est_ms, reason in plan_target(shape, C_list, L_list, skip):
            if reason is not None:
                continue
            row = dict(kind="target", B=B, C=f"{Cmin}-{Cmax}", Lmax=Lmax, Lmed=int(L.median()), d=d, variant=name,
                       rel_vs_fa2=err)
            time_variant(row, name, fns[name], ours, flops)
            rows.append(row)
            torch.cuda.empty_cache()
        print(f"{shape.text()}: done (rel err vs varlen_fa2 {err:.2e})", flush=True)
    return rows


def row_label(r):
    """The length law of a self row; rows saved before laws existed are uniform."""
    return r.get("law_label") or f"uniform fill={r['fill']:g}"


def row_text(r):
    if r["kind"] == "self":
        return f"self B={r['B']} N={r['N']} H={r['H']} D={r['D']} {row_label(r)}"
    return f"target B={r['B']} C={r['C']} Lmax={r['Lmax']} d={r['d']}"


def timed(r):
    return "ms" in r and "error" not in r and "skipped" not in r


def summary_lines(rows):
    """The three summary lines (see the module docstring), from timed rows."""
    ours = {row_text(r): r for r in rows if r["variant"] == "jagrank" and timed(r)}

    def extreme(pick, values):
        if not values:
            return "n/a (shape none)"
        value, text = pick(values)
        return f"{value:.2f} (shape {text})"

    vs_fa2 = [(r["ms"] / ours[row_text(r)]["ms"], row_text(r)) for r in rows
              if r["variant"] == "varlen_fa2" and timed(r) and row_text(r) in ours]
    vs_cudnn = [(r["ms"] / ours[row_text(r)]["ms"], row_text(r)) for r in rows
                if r["kind"] == "self" and r.get("law") == "full" and r["variant"] == "cudnn" and timed(r)
                and row_text(r) in ours]
    long_d128 = [(r["tflops"], row_text(r)) for r in ours.values()
                 if r["kind"] == "self" and r["D"] == 128 and r["N"] >= 4096]
    graph_vs_fa2 = [(r["graph_ms"] / ours[row_text(r)]["graph_ms"], row_text(r)) for r in rows
                    if r["variant"] == "varlen_fa2" and timed(r) and "graph_ms" in r
                    and "graph_ms" in ours.get(row_text(r), {})]
    lines = [f"min speedup vs varlen_fa2: {extreme(min, vs_fa2)}",
             f"full-length vs cudnn: min {extreme(min, vs_cudnn)}",
             f"D=128 long-sequence TFLOP/s: max {extreme(max, long_d128)}"]
    if graph_vs_fa2:
        lines.append(f"device time (CUDA graph, calls under {GRAPH_BELOW_MS:g} ms) vs varlen_fa2: "
                     f"min {extreme(min, graph_vs_fa2)}, {len(graph_vs_fa2)} shapes")
    for name, (_, _, _, what) in AB_VARIANTS.items():
        ratios = [(r["ms"] / ours[row_text(r)]["ms"], row_text(r)) for r in rows
                  if r["variant"] == name and timed(r) and row_text(r) in ours]
        if ratios:
            geomean = math.exp(sum(math.log(v) for v, _ in ratios) / len(ratios))
            lines.append(f"{what}: min {extreme(min, ratios)}, max {extreme(max, ratios)}, geomean {geomean:.3f}")
    return lines


def print_table(rows):
    ours = {row_text(r): r for r in rows if r["variant"] == "jagrank" and timed(r)}
    lines = []
    hdr = (f"{'kind':>6} {'B':>5} {'N/Lmax':>6} {'H':>2} {'D':>4} {'law / C':<31} {'variant':>12} {'ms':>9} "
           f"{'effTF/s':>8} {'peakMiB':>9} {'ours x':>7}")
    lines.append(hdr)
    for r in rows:
        if r["kind"] == "self":
            head = f"{'self':>6} {r['B']:>5} {r['N']:>6} {r['H']:>2} {r['D']:>4} {row_label(r):<31}"
        else:
            head = f"{'target':>6} {r['B']:>5} {r['Lmax']:>6} {1:>2} {r['d']:>4} {'C ' + r['C']:<31}"
        if "skipped" in r:
            lines.append(f"{head} {r['variant']:>12}  skipped: {r['skipped']}")
            continue
        if "error" in r:
            lines.append(f"{head} {r['variant']:>12}  ERROR {r['error'][:70]}")
            continue
        mine = ours.get(row_text(r))
        speedup = r["ms"] / mine["ms"] if mine else float("nan")
        mark = "" if r["variant"] == "jagrank" else f"{speedup:7.2f}"
        if "rel_vs_jagrank" in r:
            mark += f" (vs jagrank rel err {r['rel_vs_jagrank']:.1e})"
        if "graph_ms" in r:
            graph_speedup = (f", ours x{r['graph_ms'] / mine['graph_ms']:.2f}"
                             if mine and "graph_ms" in mine and r["variant"] != "jagrank" else "")
            mark += f" [graph {r['graph_ms']:.4f} ms{graph_speedup}]"
        lines.append(f"{head} {r['variant']:>12} {r['ms']:9.3f} {r['tflops']:8.1f} {r['peak_mib']:9.1f} {mark:>7}")
    lines.extend(summary_lines(rows))
    print("\n".join(lines))


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    selfs = [r for r in rows if r["kind"] == "self" and timed(r) and r.get("law", "uniform") == "uniform"]
    dims = sorted({r["D"] for r in selfs})
    # squeeze=False: a run without uniform-length rows (--shapes heavy/full) still gets its target panel.
    fig, axes = plt.subplots(1, len(dims) + 1, figsize=(5 * (len(dims) + 1), 4), squeeze=False)
    axes = axes[0]
    for ax, D in zip(axes, dims):
        for variant in sorted({r["variant"] for r in selfs}):
            pts = sorted((r["N"], r["ms"], r["fill"]) for r in selfs if r["D"] == D and r["variant"] == variant
                         and r["fill"] == max(x["fill"] for x in selfs if x["D"] == D and x["N"] == r["N"]))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=variant,
                        linewidth=2.5 if variant == "jagrank" else 1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("N (max length; largest fill per N)")
        ax.set_ylabel("ms")
        ax.set_title(f"self-attention, H=4, D={D}, bf16")
        ax.legend(fontsize=7)
    ax = axes[-1]
    targets = [r for r in rows if r["kind"] == "target" and "ms" in r]
    for variant in sorted({r["variant"] for r in targets}):
        pts = [(f"{r['B']}x{r['C']}\nL{r['Lmax']}", r["ms"]) for r in targets if r["variant"] == variant]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=variant,
                linewidth=2.5 if variant == "jagrank" else 1)
    ax.set_yscale("log")
    ax.set_title("target attention, d=64, bf16")
    ax.tick_params(axis="x", labelsize=6)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--lib", default=os.path.join(here, "libjagrank_kernels_c.so"))
    ap.add_argument("--out", default=None, help="JSON rows")
    ap.add_argument("--plot", default=None, help="PNG of time vs N per D (uniform-length rows)")
    ap.add_argument("--shapes", default="all", choices=["table", "heavy", "full", "all"],
                    help="the results-page table, heavy-tailed lengths, full-length batches, or all of them")
    ap.add_argument("--quick", action="store_true", help="the first two self shapes and first target shape")
    ap.add_argument("--skip", default="", help="comma-separated variants not to time (e.g. dense)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the lengths (with the shape) and the values")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the shapes, their tokens, work and the planned time; no torch, no GPU")
    ap.add_argument("--from-json", default=None, help="print the table (and --plot) of a saved run instead of running")
    ap.add_argument("--kv-copy-ab", action="store_true",
                    help="also time jagrank with cp.async K/V copies (jagrank_cp_async)")
    ap.add_argument("--schedule-ab", action="store_true",
                    help="also time jagrank with each schedule forced (jagrank_grid, jagrank_persistent)")
    a = ap.parse_args()
    AB_SELECTED[:] = [name for name, (flag, _, _, _) in AB_VARIANTS.items() if getattr(a, flag)]
    skip = set(s for s in a.skip.split(",") if s)
    self_shapes, target_shapes = selected_shapes(a.shapes, a.quick)
    if a.dry_run:
        dry_run(self_shapes, target_shapes, skip, a.seed)
        return
    if a.from_json:
        rows = json.load(open(a.from_json))
        if a.plot:
            plot(rows, a.plot)
        print_table(rows)
        return
    if torch is None:
        sys.exit("torch is needed to run the benchmark (--dry-run and --from-json work without it)")
    lib = load_lib(a.lib)
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    gen = torch.Generator().manual_seed(a.seed)
    worst = check_against_sdpa(lib, gen, dev)
    print(f"correctness: worst rel err vs SDPA fp32 = {worst:.2e} (bf16 operands: <= 1e-2 expected)")
    if not worst <= 1e-2:
        print("CORRECTNESS FAILED")
        sys.exit(1)
    rows = (run_self(lib, dev, self_shapes, skip, a.seed) +
            run_target(lib, dev, target_shapes, skip, a.seed))
    if a.out:
        json.dump(rows, open(a.out, "w"), indent=1)
    if a.plot:
        plot(rows, a.plot)
    print_table(rows)


if __name__ == "__main__":
    main()
