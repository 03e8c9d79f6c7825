"""Weight files: BF16 and F16 files serve the scores of their rounded
weights (and F32's within that rounding); hostile files (wrong dtype, NaN,
Inf, shape mismatch, missing or extra tensor) make jagrank-server exit
non-zero naming the tensor, and the twin refuses them the same way."""

import math
import os
import tempfile
import unittest

import numpy as np
import torch

import harness
from jagrank.model import JagRankModel


class WeightsFilesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.config, cls.model, cls.yaml, _ = harness.model_files("jagrank_files_", weights=False)
        cls.requests = harness.edge_requests(cls.config, count=50, seed=9)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def served(self, weights):
        with harness.Server(self.yaml, weights) as server:
            return server.ranker.rank_many(self.requests)

    def test_bf16_and_f16_files_serve_their_rounded_weights(self):
        f32 = self.path("f32.safetensors")
        self.model.save_safetensors(f32)
        reference = self.served(f32)
        # Rounding bounds: relative 2^-9 (bf16) and 2^-12 (f16) per weight
        # move these scores by up to a few times that.
        for dtype, name, bound in ((torch.bfloat16, "bf16", 0.05), (torch.float16, "f16", 0.01)):
            path = self.path(name + ".safetensors")
            self.model.save_safetensors(path, dtype=dtype)
            twin = JagRankModel(self.config)
            twin.load_safetensors(path)
            for key, value in twin.state_dict().items():  # the file holds the rounded weights, exactly
                self.assertTrue(torch.equal(value, self.model.state_dict()[key].to(dtype).float()), key)
            served = self.served(path)
            err = harness.max_abs_diff(served, twin.rank(self.requests))
            vs_f32 = harness.max_abs_diff(served, reference)
            print(f"{name}: max |server - twin on the rounded weights| = {err:.3g}, "
                  f"max |{name} scores - f32 scores| = {vs_f32:.3g}")
            self.assertLessEqual(err, 1e-5)
            self.assertLessEqual(vs_f32, bound)
            self.assertGreater(vs_f32, 1e-6)  # the rounding is visible: the file's values were used

    def hostile(self, tag, mutate, expected):
        """Writes the model's tensors through `mutate` (a list of (name, dtype,
        shape, bytes) -> the list to write), then checks that the server and
        the twin refuse the file with `expected` in the message."""
        entries = []
        for name, t in self.model.state_dict().items():
            entries.append((name, "F32", list(t.shape), t.detach().numpy().astype("<f4").tobytes()))
        path = self.path(tag + ".safetensors")
        harness.write_raw_safetensors(path, mutate(entries))
        code, output = harness.run_server_expecting_failure(self.yaml, path)
        self.assertNotEqual(code, 0, f"{tag}: the server accepted the file:\n{output}")
        self.assertIn(expected, output, tag)
        with self.assertRaises(ValueError) as caught:
            JagRankModel(self.config).load_safetensors(path)
        self.assertIn(expected, str(caught.exception), tag)

    def test_model_yaml_with_a_repeated_key(self):
        # The server and the twin both refuse it (each YAML reader would
        # otherwise keep a different copy of the key).
        with open(self.yaml, encoding="utf-8") as f:
            text = f.read()
        bad = self.path("repeated_key.yaml")
        with open(bad, "w", encoding="utf-8") as f:
            f.write(text + "\nmax_history_len: 3\n")
        weights = self.path("repeated_key.safetensors")
        self.model.save_safetensors(weights)
        code, output = harness.run_server_expecting_failure(bad, weights)
        self.assertNotEqual(code, 0, output)
        self.assertIn("key 'max_history_len' appears twice", output)
        with self.assertRaises(ValueError) as caught:
            JagRankModel.from_yaml(bad)
        self.assertIn("key 'max_history_len' appears twice", str(caught.exception))

    @staticmethod
    def replace(entries, name, fn):
        return [fn(e) if e[0] == name else e for e in entries]

    def test_wrong_dtype(self):
        def to_f64(e):
            values = np.frombuffer(e[3], dtype="<f4").astype("<f8")
            return (e[0], "F64", e[2], values.tobytes())
        self.hostile("f64", lambda es: self.replace(es, "history.attn.k", to_f64),
                     "tensor 'history.attn.k': dtype F64 is not supported")

    def test_nan(self):
        def poison(e):
            values = np.frombuffer(e[3], dtype="<f4").copy()
            values[5] = math.nan
            return (e[0], e[1], e[2], values.tobytes())
        self.hostile("nan", lambda es: self.replace(es, "embeddings.item", poison),
                     "tensor 'embeddings.item': element 5 is NaN")

    def test_inf_in_a_bf16_tensor(self):
        def poison(e):
            values = np.frombuffer(e[3], dtype="<u4") >> 16
            values = values.astype("<u2")
            values[2] = 0x7F80  # +Inf
            return (e[0], "BF16", e[2], values.tobytes())
        self.hostile("inf", lambda es: self.replace(es, "top_mlp.1.bias", poison), "tensor 'top_mlp.1.bias': element 2")

    def test_shape_mismatch(self):
        self.hostile("shape", lambda es: self.replace(es, "top_mlp.0.weight", lambda e: (e[0], e[1], e[2][::-1], e[3])),
                     "tensor 'top_mlp.0.weight' has shape")

    def test_missing_tensor(self):
        self.hostile("missing", lambda es: [e for e in es if e[0] != "history.position"],
                     "missing tensor 'history.position'")

    def test_extra_tensor(self):
        self.hostile("extra", lambda es: es + [("history.attn.bias", "F32", [4], bytes(16))],
                     "unexpected tensor 'history.attn.bias'")


if __name__ == "__main__":
    unittest.main()
