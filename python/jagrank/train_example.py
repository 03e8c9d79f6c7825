"""Trains the twin on a synthetic click task and writes a model the server
serves:

    python3 -m jagrank.train_example --out DIR [--steps 300] [--dtype f32|bf16|f16]
    jagrank-server --model-config DIR/model.yaml --model-weights DIR/model.safetensors

The hidden rule: every item id has a category, uint64(id) % 8; each user has
a favourite category, and most of their history comes from it; a candidate
is clicked when its category is the user's favourite, or when the user's
`promo` feature holds id 1 (anything then gets a click). The model sees only
ids, so it has to learn categories in the item table, read the favourite
out of the history through the attention, and the promo flag through the
pooled feature. 300 steps take a few seconds on one CPU core.
"""

import argparse
import os
import sys
import time
from typing import Callable, Tuple

import torch
import torch.nn.functional as F

from .batch import JaggedBatch
from .config import ModelConfig, SparseFeature
from .model import JagRankModel

NUM_CATEGORIES = 8


def example_config(seed: int = 1) -> ModelConfig:
    return ModelConfig(name="jagrank-train-example", embedding_dim=16, num_dense_features=4,
                       sparse_features=[SparseFeature("promo", 4), SparseFeature("country", 32)],
                       item_rows=256, max_history_len=32, attention_heads=2, bottom_mlp=[32, 16],
                       top_mlp=[64, 32, 1], seed=seed)


def _offsets(lengths: torch.Tensor) -> torch.Tensor:
    return torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)])


def _ids_in_category(category: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Random int64 ids (either sign) with uint64(id) % 8 == category."""
    raw = torch.randint(-(1 << 62), 1 << 62, category.shape, generator=g, dtype=torch.int64) * 2
    return raw - torch.remainder(raw, NUM_CATEGORIES) + category  # 2^64 % 8 == 0: the signed remainder is the uint64 one


def synthetic_batch(config: ModelConfig, num_requests: int, candidates_per_request: int,
                    g: torch.Generator) -> Tuple[JaggedBatch, torch.Tensor]:
    """A jagged batch of `num_requests` users and their click labels [C]."""
    r, k = num_requests, candidates_per_request
    favourite = torch.randint(0, NUM_CATEGORIES, (r,), generator=g)
    # Histories of 0 to 1.5x max_history_len ids (the longer ones are truncated), 80% from the favourite.
    lengths = torch.randint(0, config.max_history_len * 3 // 2 + 1, (r,), generator=g)
    owner = torch.repeat_interleave(torch.arange(r), lengths)
    noise = torch.randint(0, NUM_CATEGORIES, owner.shape, generator=g)
    category = torch.where(torch.rand(owner.shape, generator=g) < 0.8, favourite[owner], noise)
    history = _ids_in_category(category, g)
    # Candidates: half from the favourite category.
    cand_owner = torch.arange(r).repeat_interleave(k)
    cand_category = torch.where(torch.rand(cand_owner.shape, generator=g) < 0.5, favourite[cand_owner],
                                torch.randint(0, NUM_CATEGORIES, cand_owner.shape, generator=g))
    candidates = _ids_in_category(cand_category, g)
    # promo: absent, empty, or one id in {0, 1, 2, 3}; id 1 means "clicks anything".
    promo_len = torch.randint(0, 2, (r,), generator=g)
    promo = torch.randint(0, 4, (int(promo_len.sum()),), generator=g)
    promo_on = torch.zeros(r, dtype=torch.bool)
    promo_on[torch.repeat_interleave(torch.arange(r), promo_len)] = promo == 1
    country_len = torch.randint(0, 3, (r,), generator=g)
    country = torch.randint(0, 1000, (int(country_len.sum()),), generator=g)
    labels = ((cand_category == favourite[cand_owner]) | promo_on[cand_owner]).to(torch.float32)
    batch = JaggedBatch(dense=torch.randn(r, config.num_dense_features, generator=g),
                        sparse_ids=[promo, country], sparse_offsets=[_offsets(promo_len), _offsets(country_len)],
                        history_ids=history, history_offsets=_offsets(lengths),
                        candidate_ids=candidates, candidate_offsets=_offsets(torch.full((r,), k)))
    return batch, labels


def train(out_dir: str, steps: int = 300, seed: int = 1, dtype: torch.dtype = torch.float32,
          log: Callable[[str], None] = print) -> dict:
    """Trains, writes out_dir/model.yaml and out_dir/model.safetensors, and
    returns {"first_loss", "last_loss", "accuracy"} (accuracy on held-out users)."""
    torch.manual_seed(seed)
    config = example_config(seed)
    model = JagRankModel(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(seed)
    losses = []
    start = time.monotonic()
    for step in range(1, steps + 1):
        batch, labels = synthetic_batch(config, 64, 8, g)
        loss = F.binary_cross_entropy_with_logits(model.logits(batch), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
        if step == 1 or step % 25 == 0 or step == steps:
            recent = sum(losses[-25:]) / len(losses[-25:])
            log(f"step {step:4d}  loss {recent:.4f}  ({time.monotonic() - start:.1f} s)")
    model.eval()
    with torch.no_grad():
        batch, labels = synthetic_batch(config, 256, 8, torch.Generator().manual_seed(seed + 1000))
        accuracy = float(((model(batch) > 0.5).to(torch.float32) == labels).to(torch.float32).mean())
    log(f"held-out accuracy {accuracy:.3f} (the majority label alone: {max(float(labels.mean()), 1 - float(labels.mean())):.3f})")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.yaml"), "w") as f:
        f.write(config.to_yaml())
    model.save_safetensors(os.path.join(out_dir, "model.safetensors"), dtype=dtype)
    log(f"wrote {out_dir}/model.yaml and {out_dir}/model.safetensors; serve them with\n"
        f"  jagrank-server --model-config {out_dir}/model.yaml --model-weights {out_dir}/model.safetensors")
    return {"first_loss": sum(losses[:10]) / len(losses[:10]), "last_loss": sum(losses[-25:]) / len(losses[-25:]),
            "accuracy": accuracy}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m jagrank.train_example", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for model.yaml and model.safetensors")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32", help="dtype of the weights file")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (0 = torch's default; the model is small, one thread is the fastest)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    train(args.out, steps=args.steps, seed=args.seed, dtype=dtype, log=lambda s: print(s, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
