#!/usr/bin/env python3
"""The twin on CUDA against jagrank-server's CUDA backend, per precision.

    PYTHONPATH=python:build/python python3 python/tests/twin_vs_server_cuda.py \\
        --server build/bin/jagrank-server \\
        --variant "fp32=--precision fp32" --variant "bf16=--precision bf16"

Builds a model with spread scores (the CPU tests' recipe with the tables
scaled x4 and the top MLP x3, at the default config's widths: d = 64, 2
heads; 3 features), writes it to a temporary safetensors file, starts the server once per --variant (label=
extra server flags; --server-arg flags go to every run) on --device, and
ranks the same requests on each. The twin runs on the same device in float64
(the reference) and float32 (TF32 off). Prints, per variant, the max and mean
|score - twin float64| and the share of candidate pairs (within a request)
ranked in the same order as the float64 twin, then the same share between
every two variants. Exits 77 (skipped) without a CUDA device; --device cpu
runs the same comparison on the CPU backend. Needs torch, grpcio, protobuf
and the generated stubs (build/python/jagrank_stubs, copied with the tree:
no grpc_tools needed). --max-error E: exit 1 when a variant's max error
against float64 exceeds E.
"""

import argparse
import json
import os
import random
import shlex
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(os.path.dirname(HERE)))

import torch  # noqa: E402

SKIP = 77


def make_requests(config, count, seed):
    """`count` requests with 0 to 1.5x max_history_len history ids and 16 to
    96 candidates, absent/empty/filled sparse features, random int64 ids."""
    rng = random.Random(seed)
    lo, hi = -(1 << 63), (1 << 63) - 1
    out = []
    for i in range(count):
        history = [rng.randrange(lo, hi) for _ in range(rng.randrange(0, config.max_history_len * 3 // 2 + 1))]
        sparse = {}
        for f in config.sparse_features:
            r = rng.random()
            if r < 0.2:
                continue
            sparse[f.name] = [] if r < 0.3 else [rng.randrange(lo, hi) for _ in range(rng.randrange(1, 8))]
        out.append({"dense": [rng.uniform(-2, 2) for _ in range(config.num_dense_features)], "sparse": sparse,
                    "history": history, "candidates": [rng.randrange(lo, hi) for _ in range(rng.randrange(16, 97))]})
    return out


def errors(scores, reference):
    a = torch.tensor([s for row in scores for s in row], dtype=torch.float64)
    b = torch.tensor([s for row in reference for s in row], dtype=torch.float64)
    diff = (a - b).abs()
    return float(diff.max()), float(diff.mean())


def same_order_share(a_rows, b_rows):
    """Share of candidate pairs (i < j of one request) that a and b order the same way."""
    same = total = 0
    for a, b in zip(a_rows, b_rows):
        a = torch.tensor(a, dtype=torch.float64)
        b = torch.tensor(b, dtype=torch.float64)
        i, j = torch.triu_indices(len(a), len(a), offset=1)
        same += int((torch.sign(a[i] - a[j]) == torch.sign(b[i] - b[j])).sum())
        total += i.numel()
    return same / total if total else 1.0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("JAGRANK_SERVER_BINARY", "build/bin/jagrank-server"))
    parser.add_argument("--device", default="cuda", help="cuda | cuda:N | cpu (server and twin)")
    parser.add_argument("--variant", action="append", default=[],
                        help="LABEL=EXTRA SERVER FLAGS, e.g. 'fp32=--precision fp32' (default: one run, no flags)")
    parser.add_argument("--server-arg", action="append", default=[], help="a flag for every server run")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-error", type=float, default=None)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("SKIP: no CUDA device visible to torch")
        return SKIP
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    import harness  # noqa: E402 (needs the path set above)
    from jagrank.model import JagRankModel  # noqa: E402
    harness.server_binary = lambda: args.server  # the binary under test

    config = harness.small_config(embedding_dim=64, num_dense_features=13, item_rows=100000, max_history_len=256,
                                  attention_heads=2, bottom_mlp=[256, 128, 64], top_mlp=[512, 256, 1])
    variants = []
    for v in args.variant or ["default="]:
        label, _, flags = v.partition("=")
        variants.append((label, shlex.split(flags)))
    requests = make_requests(config, args.requests, args.seed)
    # Tables x4, top-MLP weights x3: 300 requests score in (0.03, 0.999996), std 0.14, without
    # saturating float32 (1.0 exactly above logit 16.6).
    model = harness.spread_model(config, table_scale=4.0, top_scale=3.0)
    twin64 = harness.spread_model(config, table_scale=4.0, top_scale=3.0).double().to(args.device).rank(requests)
    twin32 = model.to(args.device).rank(requests)
    model.to("cpu")
    results = {"device": args.device, "requests": len(requests),
               "candidates": sum(len(r["candidates"]) for r in requests),
               "torch": torch.__version__, "variants": {}}
    if args.device.startswith("cuda"):
        results["gpu"] = torch.cuda.get_device_name(torch.device(args.device))
    all_scores = {}
    failed = False
    with tempfile.TemporaryDirectory(prefix="jagrank_cuda_") as d:
        yaml_path, weights = os.path.join(d, "model.yaml"), os.path.join(d, "model.safetensors")
        with open(yaml_path, "w") as f:
            f.write(config.to_yaml())
        model.save_safetensors(weights)
        print(f"{results['candidates']} candidates in {len(requests)} requests on {args.device}; "
              f"scores of the float64 twin span [{min(min(r) for r in twin64):.3f}, "
              f"{max(max(r) for r in twin64):.3f}]")
        max32, mean32 = errors(twin32, twin64)
        print(f"{'twin float32':>24}: max |err| {max32:.3g}  mean {mean32:.3g}  "
              f"same order {same_order_share(twin32, twin64):.5f}")
        for label, flags in variants:
            extra = args.server_arg + flags
            server = harness.Server(yaml_path, weights, *extra, device=args.device)
            try:
                info = server.ranker.info()
                scores = server.ranker.rank_many(requests)
            finally:
                server.stop()
            max_err, mean_err = errors(scores, twin64)
            share = same_order_share(scores, twin64)
            all_scores[label] = scores
            results["variants"][label] = {"flags": ["--device", args.device] + extra, "device": info["device"], "max_abs_error": max_err,
                                          "mean_abs_error": mean_err, "same_order_as_float64": share}
            print(f"{'server ' + label:>24}: max |err| {max_err:.3g}  mean {mean_err:.3g}  same order {share:.5f}"
                  f"  ({info['device']}, flags: {' '.join(extra) or 'none'})")
            if args.max_error is not None and max_err > args.max_error:
                print(f"FAIL: {label}: max error {max_err:.3g} > --max-error {args.max_error:g}")
                failed = True
    labels = list(all_scores)
    results["pairs"] = {}
    for a in range(len(labels)):
        for b in range(a + 1, len(labels)):
            share = same_order_share(all_scores[labels[a]], all_scores[labels[b]])
            results["pairs"][f"{labels[a]}/{labels[b]}"] = share
            print(f"candidate pairs in the same order, {labels[a]} vs {labels[b]}: {share:.5f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
