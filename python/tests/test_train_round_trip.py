"""Train -> export -> serve: `python3 -m jagrank.train_example` trains with
a falling loss, and jagrank-server serves its files with the twin's scores
(within 1e-5) and the learnt clicks."""

import os
import re
import subprocess
import sys
import tempfile
import unittest

import torch

import harness
from jagrank.batch import to_requests
from jagrank.model import JagRankModel
from jagrank.train_example import synthetic_batch


class TrainRoundTripTest(unittest.TestCase):
    def test_train_export_serve(self):
        harness.server_binary()
        with tempfile.TemporaryDirectory(prefix="jagrank_train_") as out:
            run = subprocess.run([sys.executable, "-m", "jagrank.train_example", "--out", out, "--steps", "150",
                                  "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
            log = run.stdout.decode()
            self.assertEqual(run.returncode, 0, log)
            losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", log)]
            self.assertGreaterEqual(len(losses), 5, log)
            self.assertLess(losses[-1], 0.5 * losses[0], "the loss did not fall:\n" + log)
            yaml_path, weights = os.path.join(out, "model.yaml"), os.path.join(out, "model.safetensors")
            twin = JagRankModel.from_yaml(yaml_path)
            twin.load_safetensors(weights)

            batch, labels = synthetic_batch(twin.config, 48, 6, torch.Generator().manual_seed(99))
            requests = to_requests(twin.config, batch) + harness.edge_requests(twin.config, count=12, seed=2)
            expected = twin.rank(requests)
            with harness.Server(yaml_path, weights) as server:
                served = server.ranker.rank_many(requests)
            err = harness.max_abs_diff(served, expected)
            print(f"trained model: max |server - twin| = {err:.3g}")
            self.assertLessEqual(err, 1e-5)
            clicks = torch.tensor([s for row in served[:48] for s in row]) > 0.5
            accuracy = float((clicks == labels.bool()).float().mean())
            self.assertGreater(accuracy, 0.85, "the served model did not learn the hidden rule")


if __name__ == "__main__":
    unittest.main()
