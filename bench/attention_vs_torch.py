"""jagrank's jagged flash attention against torch's attention paths on one GPU.

Loads the C ABI (kernels/c_api/jagrank_c.h, libjagrank_kernels_c.so) through
ctypes, checks it against torch SDPA on random jagged inputs (relative error),
then times it beside torch's variants on SELF_SHAPES and TARGET_SHAPES below:
CUDA events, median of 20 after warm-up, peak memory beyond the inputs
(torch's caching allocator: outputs and padded copies count; ours allocates
only its output).

Self-attention (bf16, B sequences, H heads of D dims, lengths with mean
fill x N):
  jagrank      jagrank_jagged_self_attention on packed [T, H, D] + offsets
  dense        padded [B, H, N, D], materialised scores, key mask, softmax, PV
  sdpa_flash   padded, SDPA flash backend (no mask: computes the padding)
  sdpa_mask    padded, SDPA with a boolean key-padding mask
  cudnn        padded, SDPA cuDNN backend, no mask (computes the padding)
  varlen_fa2   packed + cu_seqlens, torch.ops.aten._flash_attention_forward
Target attention (bf16, one head, d = 64; candidates over their request's
history): jagrank_jagged_target_attention against padded_dense, sdpa_padded
and varlen_fa2 as cross-attention.

"eff TF/s" counts only the real work: 4 sum(Lq Lk) H D. "x<variant>" columns
are that variant's time over ours (> 1: we are faster).

Table and plot again from a saved run (no GPU, no torch):
  python3 attention_vs_torch.py --from-json r.json --plot t.png

Run on the GPU machine:
  python3 attention_vs_torch.py --lib libjagrank_kernels_c.so [--out r.json] [--plot t.png] [--quick]
"""
import argparse
import ctypes
import json
import math
import os
import sys

try:  # --from-json needs neither torch nor a GPU
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = F = None

DTYPE_BF16 = 1

SELF_SHAPES = [  # (B, N, H, D, fill)
    (1024, 256, 4, 32, 0.5), (1024, 512, 4, 32, 0.5), (1024, 1024, 4, 32, 0.5),
    (512, 2048, 4, 32, 0.5), (1024, 1024, 4, 32, 0.25), (1024, 1024, 4, 32, 0.1),
    (1024, 512, 4, 64, 0.5), (512, 1024, 4, 128, 0.5), (256, 4096, 4, 64, 0.25),
]
TARGET_SHAPES = [  # (B, Cmin, Cmax, Lmax, d)
    (256, 64, 512, 1024, 64), (256, 64, 512, 2048, 64), (1024, 16, 128, 1024, 64),
    (128, 256, 1024, 4096, 64),
]


def load_lib(path):
    lib = ctypes.CDLL(path)
    vp, i32, f32 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_float
    lib.jagrank_last_error.restype = ctypes.c_char_p
    lib.jagrank_jagged_self_attention.argtypes = [vp, vp, vp, vp, i32, vp, i32, i32, i32, i32, f32, vp]
    lib.jagrank_jagged_self_attention.restype = ctypes.c_int
    lib.jagrank_jagged_target_attention.argtypes = [vp, vp, i32, vp, vp, i32, i32, i32, i32, f32, vp, vp]
    lib.jagrank_jagged_target_attention.restype = ctypes.c_int
    return lib


def check_rc(lib, rc):
    if rc != 0:
        raise RuntimeError(f"jagrank error {rc}: {lib.jagrank_last_error().decode()}")


def ours_self(lib, q, k, v, offsets, max_len, scale):
    T, H, D = q.shape
    o = torch.empty_like(q)
    stream = torch.cuda.current_stream().cuda_stream
    check_rc(lib, lib.jagrank_jagged_self_attention(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), DTYPE_BF16, offsets.data_ptr(),
        offsets.numel() - 1, H, D, max_len, scale, stream))
    return o


def ours_target(lib, q, q_offsets, max_q, z, k_offsets, max_k, scale):
    C, d = q.shape
    o = torch.empty_like(q)
    stream = torch.cuda.current_stream().cuda_stream
    check_rc(lib, lib.jagrank_jagged_target_attention(
        q.data_ptr(), q_offsets.data_ptr(), max_q, z.data_ptr(), k_offsets.data_ptr(), max_k,
        q_offsets.numel() - 1, d, DTYPE_BF16, scale, o.data_ptr(), stream))
    return o


def lengths(B, N, fill, gen):
    # Uniform in [lo, N] with mean ~ fill N for fill >= 0.5, else [1, 2 fill N].
    if fill >= 0.5:
        lo = max(1, int((2 * fill - 1) * N))
        return torch.randint(lo, N + 1, (B,), generator=gen)
    return torch.randint(1, max(2, int(2 * fill * N)) + 1, (B,), generator=gen).clamp(max=N)


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
        for H in (1, 4):
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


def run_self(lib, gen, dev, shapes, skip):
    rows = []
    dt = torch.bfloat16
    for (B, N, H, D, fill) in shapes:
        L = lengths(B, N, fill, gen)
        T = int(L.sum())
        cu = offsets_of(L)
        cu_d = cu.to(dev)
        q, k, v = (torch.randn(T, H, D, device=dev, dtype=dt) for _ in range(3))
        maxL = int(L.max())
        idx_b = torch.repeat_interleave(torch.arange(B), L).to(dev)
        idx_t = (torch.arange(T) - torch.repeat_interleave(cu[:-1].long(), L)).to(dev)

        def to_padded(x):
            p = torch.zeros(B, N, H, D, device=dev, dtype=dt)
            p[idx_b, idx_t] = x
            return p.transpose(1, 2)  # B, H, N, D

        keymask = torch.arange(N, device=dev)[None, :] < L.to(dev)[:, None]
        scale = 1.0 / math.sqrt(D)

        def dense():
            Q, K, V = to_padded(q), to_padded(k), to_padded(v)
            s = torch.matmul(Q, K.transpose(-1, -2)) * scale
            s = s.masked_fill(~keymask[:, None, None, :], float("-inf"))
            return torch.matmul(torch.softmax(s, dim=-1), V)

        def sdpa_flash():
            Q, K, V = to_padded(q), to_padded(k), to_padded(v)
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(Q, K, V, scale=scale)

        def sdpa_mask():
            Q, K, V = to_padded(q), to_padded(k), to_padded(v)
            return F.scaled_dot_product_attention(Q, K, V, attn_mask=keymask[:, None, None, :], scale=scale)

        def cudnn():
            Q, K, V = to_padded(q), to_padded(k), to_padded(v)
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(Q, K, V, scale=scale)

        def varlen():
            return torch.ops.aten._flash_attention_forward(
                q, k, v, cu_d, cu_d, maxL, maxL, 0.0, False, False, scale=scale)[0]

        def ours():
            return ours_self(lib, q, k, v, cu_d, maxL, scale)

        flops = 4.0 * float((L.double() ** 2).sum()) * H * D
        err = rel_err(ours(), varlen())
        variants = [
            ("jagrank", ours),
            ("dense", dense), ("sdpa_flash", sdpa_flash), ("sdpa_mask", sdpa_mask), ("cudnn", cudnn),
            ("varlen_fa2", varlen)]
        for name, fn in variants:
            row = dict(kind="self", B=B, N=N, H=H, D=D, fill=fill, T=T, variant=name, rel_vs_fa2=err)
            if name in skip:
                continue
            try:
                ms = bench(fn)
                row.update(ms=ms, tflops=flops / ms / 1e9, peak_mib=peak_mem(fn) / 2**20)
            except Exception as ex:  # a variant that cannot run this shape (e.g. out of memory)
                row.update(error=str(ex).splitlines()[0][:120])
            rows.append(row)
            torch.cuda.empty_cache()
        print(f"self B={B} N={N} H={H} D={D} fill={fill}: done (rel err vs varlen_fa2 {err:.2e})", flush=True)
        del q, k, v
    return rows


def run_target(lib, gen, dev, shapes, skip):
    rows = []
    dt = torch.bfloat16
    for (B, Cmin, Cmax, Lmax, d) in shapes:
        C = torch.randint(Cmin, Cmax + 1, (B,), generator=gen)
        L = torch.exp(torch.randn(B, generator=gen) + math.log(Lmax / 10)).long().clamp(1, Lmax)
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
        variants = [
            ("jagrank", ours),
            ("padded_dense", dense), ("sdpa_padded", sdpa), ("varlen_fa2", varlen)]
        for name, fn in variants:
            if name in skip:
                continue
            row = dict(kind="target", B=B, C=f"{Cmin}-{Cmax}", Lmax=Lmax, Lmed=int(L.median()), d=d, variant=name,
                       rel_vs_fa2=err)
            try:
                ms = bench(fn)
                row.update(ms=ms, tflops=flops / ms / 1e9, peak_mib=peak_mem(fn) / 2**20)
            except Exception as ex:
                row.update(error=str(ex).splitlines()[0][:120])
            rows.append(row)
            torch.cuda.empty_cache()
        print(f"target B={B} C={Cmin}-{Cmax} Lmax={Lmax}: done (rel err vs varlen_fa2 {err:.2e})", flush=True)
    return rows


def shape_key(r):
    if r["kind"] == "self":
        return ("self", r["B"], r["N"], r["H"], r["D"], r["fill"])
    return ("target", r["B"], r["C"], r["Lmax"], r["d"])


def print_table(rows):
    ours = {shape_key(r): r for r in rows if r["variant"] == "jagrank" and "ms" in r}
    min_fa2 = float("inf")
    lines = []
    hdr = (f"{'kind':>6} {'B':>5} {'N/Lmax':>6} {'H':>2} {'D':>4} {'fill/C':>8} {'variant':>12} {'ms':>9} "
           f"{'effTF/s':>8} {'peakMiB':>9} {'ours x':>7}")
    lines.append(hdr)
    for r in rows:
        if r["kind"] == "self":
            head = f"{'self':>6} {r['B']:>5} {r['N']:>6} {r['H']:>2} {r['D']:>4} {r['fill']:>8}"
        else:
            head = f"{'target':>6} {r['B']:>5} {r['Lmax']:>6} {1:>2} {r['d']:>4} {r['C']:>8}"
        if "error" in r:
            lines.append(f"{head} {r['variant']:>12}  ERROR {r['error'][:70]}")
            continue
        mine = ours.get(shape_key(r))
        speedup = r["ms"] / mine["ms"] if mine else float("nan")
        if r["variant"] == "varlen_fa2" and mine:
            min_fa2 = min(min_fa2, speedup)
        mark = "" if r["variant"] == "jagrank" else f"{speedup:7.2f}"
        lines.append(f"{head} {r['variant']:>12} {r['ms']:9.3f} {r['tflops']:8.1f} {r['peak_mib']:9.1f} {mark:>7}")
    lines.append(f"min speedup vs varlen_fa2: {min_fa2:.2f}")
    print("\n".join(lines))
    return min_fa2


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    selfs = [r for r in rows if r["kind"] == "self" and "ms" in r]
    dims = sorted({r["D"] for r in selfs})
    fig, axes = plt.subplots(1, len(dims) + 1, figsize=(5 * (len(dims) + 1), 4))
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
    ap.add_argument("--plot", default=None, help="PNG of time vs N per D")
    ap.add_argument("--quick", action="store_true", help="two self shapes, one target shape")
    ap.add_argument("--skip", default="", help="comma-separated variants not to time (e.g. dense)")
    ap.add_argument("--from-json", default=None, help="print the table (and --plot) of a saved run instead of running")
    a = ap.parse_args()
    if a.from_json:
        rows = json.load(open(a.from_json))
        if a.plot:
            plot(rows, a.plot)
        print_table(rows)
        return
    lib = load_lib(a.lib)
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    gen = torch.Generator().manual_seed(0)
    worst = check_against_sdpa(lib, gen, dev)
    print(f"correctness: worst rel err vs SDPA fp32 = {worst:.2e} (bf16 operands: <= 1e-2 expected)")
    if not worst <= 1e-2:
        print("CORRECTNESS FAILED")
        sys.exit(1)
    skip = set(s for s in a.skip.split(",") if s)
    self_shapes = SELF_SHAPES[:2] if a.quick else SELF_SHAPES
    target_shapes = TARGET_SHAPES[:1] if a.quick else TARGET_SHAPES
    rows = (run_self(lib, gen, dev, self_shapes, skip) +
            run_target(lib, gen, dev, target_shapes, skip))
    if a.out:
        json.dump(rows, open(a.out, "w"), indent=1)
    if a.plot:
        plot(rows, a.plot)
    print_table(rows)


if __name__ == "__main__":
    main()
