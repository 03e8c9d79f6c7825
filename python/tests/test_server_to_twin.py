"""jagrank-export-model's file (the server's deterministic random model)
loads into the twin, tensor for tensor, and gives the server's scores."""

import os
import subprocess
import tempfile
import unittest

import torch

import harness
from jagrank import safetensors
from jagrank.model import JagRankModel


class ServerToTwinTest(unittest.TestCase):
    def test_exported_model_scores_the_same_in_the_twin(self):
        export = harness.export_binary()
        config = harness.small_config()
        with tempfile.TemporaryDirectory(prefix="jagrank_export_") as d:
            config_in = os.path.join(d, "in.yaml")
            with open(config_in, "w") as f:
                f.write(config.to_yaml())
            weights = os.path.join(d, "exported.safetensors")
            subprocess.run([export, "--model-config", config_in, "--output", weights, "--seed", "123"], check=True,
                           stdout=subprocess.DEVNULL)
            written_yaml = os.path.join(d, "exported.yaml")
            twin = JagRankModel.from_yaml(written_yaml)
            self.assertEqual(twin.config.seed, 123)
            twin.load_safetensors(weights)
            # Every tensor of the file, under its own name, bit for bit.
            tensors = safetensors.load(weights)
            state = twin.state_dict()
            self.assertEqual(sorted(tensors), sorted(state))
            for name, t in tensors.items():
                self.assertTrue(torch.equal(state[name], t), name)
            # The export is not the twin's own init: loading changed the weights.
            fresh = JagRankModel(twin.config).state_dict()
            self.assertFalse(torch.equal(fresh["embeddings.item"], state["embeddings.item"]))

            requests = harness.edge_requests(config, count=55, seed=5)
            twin_scores = twin.rank(requests)
            twin64 = JagRankModel.from_yaml(written_yaml).double()
            twin64.load_safetensors(weights)
            twin64_scores = twin64.rank(requests)
            with harness.Server(written_yaml, weights) as server:
                info = server.ranker.info()
                served = server.ranker.rank_many(requests)
            self.assertEqual(info["name"], config.name)
            self.assertEqual(info["sparse_feature_names"], config.sparse_feature_names)
            err = harness.max_abs_diff(served, twin_scores)
            err64 = harness.max_abs_diff(served, twin64_scores)
            print(f"exported model: max |server - twin float32| = {err:.3g}, float64 = {err64:.3g}")
            self.assertLessEqual(err, 1e-5)
            self.assertLessEqual(err64, 1e-5)


if __name__ == "__main__":
    unittest.main()
