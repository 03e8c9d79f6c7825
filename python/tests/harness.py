"""Shared pieces of the Python tests: a small model config, requests that
cover the edge cases of the contract, and the real jagrank-server started
on a unix socket (JAGRANK_SERVER_BINARY, set by tests/python.cmake)."""

import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import torch

from jagrank.config import ModelConfig, SparseFeature
from jagrank.model import JagRankModel

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def server_binary() -> str:
    path = os.environ.get("JAGRANK_SERVER_BINARY", "")
    if not path or not os.access(path, os.X_OK):
        raise unittest.SkipTest("JAGRANK_SERVER_BINARY is not set to the jagrank-server binary (run through ctest)")
    return path


def export_binary() -> str:
    path = os.environ.get("JAGRANK_EXPORT_BINARY", "")
    if not path or not os.access(path, os.X_OK):
        raise unittest.SkipTest("JAGRANK_EXPORT_BINARY is not set (run through ctest)")
    return path


def small_config(**overrides) -> ModelConfig:
    """Three features, dh = 8, max_history_len 24: small enough for a
    fast CPU test, every step of the model present."""
    c = ModelConfig(name="twin-test", embedding_dim=16, num_dense_features=5,
                    sparse_features=[SparseFeature("country", 50), SparseFeature("segments", 997),
                                     SparseFeature("device", 7)],
                    item_rows=5003, max_history_len=24, attention_heads=2, bottom_mlp=[32, 16],
                    top_mlp=[32, 16, 1], seed=7)
    for k, v in overrides.items():
        setattr(c, k, v)
    c.validate()
    return c


def spread_model(config: ModelConfig, seed: int = 3, table_scale: float = 3.0, top_scale: float = 2.5) -> JagRankModel:
    """A model whose scores spread over (0, 1) (the default init keeps them
    near 0.5, where a wrong step could hide): tables and the attention
    projections scaled up."""
    model = JagRankModel(config)
    model.reset_parameters(seed)
    with torch.no_grad():
        for name, p in model.state_dict(keep_vars=True).items():
            if name.startswith(("embeddings.", "history.")):
                p.mul_(table_scale)
            elif name.startswith("top_mlp.") and name.endswith(".weight"):
                p.mul_(top_scale)
    return model


def edge_requests(config: ModelConfig, count: int = 60, seed: int = 1) -> list:
    """`count` requests: empty and over-long histories (up to 3x
    max_history_len), absent and empty sparse features, ids at the int64
    extremes and around zero, 1 to 12 candidates."""
    rng = random.Random(seed)
    extremes = [INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX]

    def some_id():
        return rng.choice(extremes) if rng.random() < 0.15 else rng.randrange(INT64_MIN, INT64_MAX)

    requests = []
    for i in range(count):
        kind = i % 6
        if kind == 0:
            history = []
        elif kind == 1:
            history = [some_id() for _ in range(config.max_history_len + rng.randrange(1, 2 * config.max_history_len))]
        elif kind == 2:
            history = [some_id() for _ in range(config.max_history_len)]
        else:
            history = [some_id() for _ in range(rng.randrange(1, config.max_history_len))]
        sparse = {}
        for f in config.sparse_features:
            r = rng.random()
            if r < 0.25:
                continue               # absent
            elif r < 0.4:
                sparse[f.name] = []    # present, empty
            else:
                sparse[f.name] = [some_id() for _ in range(rng.randrange(1, 6))]
        candidates = [some_id() for _ in range(rng.randrange(1, 13))]
        if i == 5:
            candidates = extremes
        requests.append({"dense": [rng.uniform(-2, 2) for _ in range(config.num_dense_features)],
                         "sparse": sparse, "history": history, "candidates": candidates})
    requests.append({"dense": [0.5] * config.num_dense_features, "candidates": [INT64_MIN, INT64_MAX]})
    return requests


def model_files(prefix: str, weights: bool = True):
    """A temporary directory with the small config as model.yaml and, when
    `weights`, the spread model's model.safetensors. Returns (tmp, config,
    model, yaml_path, weights_path); keep `tmp` alive while the files are used."""
    server_binary()
    tmp = tempfile.TemporaryDirectory(prefix=prefix)
    config = small_config()
    model = spread_model(config)
    yaml_path = os.path.join(tmp.name, "model.yaml")
    weights_path = os.path.join(tmp.name, "model.safetensors")
    with open(yaml_path, "w") as f:
        f.write(config.to_yaml())
    if weights:
        model.save_safetensors(weights_path)
    return tmp, config, model, yaml_path, weights_path


class Server:
    """jagrank-server on a unix socket (CPU backend unless `device` says
    otherwise), until stop()."""

    def __init__(self, model_config: str, weights: str, *extra_args: str, device: str = "cpu"):
        self.dir = tempfile.mkdtemp(prefix="jagrank_py_")
        self.address = "unix:" + os.path.join(self.dir, "grpc.sock")
        self.log_path = os.path.join(self.dir, "server.log")
        args = [server_binary(), "--grpc-address", self.address, "--metrics-address", "", "--device", device,
                "--cpu-threads", "1", "--model-config", model_config, "--model-weights", weights] + list(extra_args)
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        # Connect after the ready line: a channel opened while the server is
        # still starting can sit in a connection attempt for seconds.
        deadline = time.monotonic() + 180  # a CUDA start (context, warm-up) takes longer than a CPU one
        while "jagrank-server ready" not in self.log():
            if self.process.poll() is not None:
                raise RuntimeError(f"jagrank-server exited with {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("jagrank-server not ready in 180 s:\n" + self.log())
            time.sleep(0.02)
        from jagrank.client import Ranker
        self.ranker = Ranker(self.address, timeout_s=60)
        status = self.ranker.health()
        if status != "SERVING":
            raise RuntimeError(f"jagrank-server ready but health says {status}:\n{self.log()}")

    def log(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self) -> None:
        if hasattr(self, "ranker"):
            self.ranker.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def run_server_expecting_failure(model_config: str, weights: str, timeout_s: float = 60):
    """Runs jagrank-server on a weights file it must refuse: (exit code, output)."""
    with tempfile.TemporaryDirectory(prefix="jagrank_py_") as d:
        result = subprocess.run([server_binary(), "--grpc-address", "unix:" + os.path.join(d, "s.sock"),
                                 "--metrics-address", "", "--device", "cpu", "--model-config", model_config,
                                 "--model-weights", weights], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                timeout=timeout_s)
    return result.returncode, result.stdout.decode("utf-8", "replace")


def max_abs_diff(a: list, b: list) -> float:
    """Largest |a - b| over lists of score lists of the same shape."""
    assert len(a) == len(b), (len(a), len(b))
    worst = 0.0
    for x, y in zip(a, b):
        assert len(x) == len(y), (len(x), len(y))
        for p, q in zip(x, y):
            worst = max(worst, abs(p - q))
    return worst


def write_raw_safetensors(path: str, entries: list) -> None:
    """A safetensors file from (name, dtype string, shape, raw bytes) entries,
    written as given (for files the loaders must refuse)."""
    import json
    import struct
    header, data = {}, b""
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
