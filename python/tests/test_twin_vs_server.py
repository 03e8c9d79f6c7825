"""Weights saved by the twin, served by jagrank-server on the CPU backend:
every score within 1e-5 of the twin's for all three attention strategies,
on requests with empty and over-long histories, absent and empty sparse
features and ids at the int64 extremes."""

import os
import tempfile
import unittest

import torch

import harness


class TwinVsServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.config, cls.model, cls.yaml, cls.weights = harness.model_files("jagrank_twin_")
        cls.requests = harness.edge_requests(cls.config, count=60)
        cls.twin32 = cls.model.rank(cls.requests)
        cls.twin64 = harness.spread_model(cls.config).double().rank(cls.requests)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_requests_cover_the_edge_cases(self):
        r = self.requests
        self.assertGreaterEqual(len(r), 50)
        self.assertTrue(any(not q.get("history") for q in r))
        self.assertTrue(any(len(q.get("history", [])) > self.config.max_history_len for q in r))
        self.assertTrue(any(f.name not in q.get("sparse", {}) for q in r for f in self.config.sparse_features))
        self.assertTrue(any(v == [] for q in r for v in q.get("sparse", {}).values()))
        ids = [i for q in r for i in q["candidates"] + q.get("history", [])]
        self.assertIn(harness.INT64_MIN, ids)
        self.assertIn(harness.INT64_MAX, ids)
        # The scores spread: a wrong step cannot hide near 0.5.
        scores = torch.tensor([s for row in self.twin64 for s in row])
        self.assertGreater(float(scores.std()), 0.1)
        self.assertLess(float(scores.min()), 0.2)
        self.assertGreater(float(scores.max()), 0.8)
        self.assertLess(harness.max_abs_diff(self.twin32, self.twin64), 1e-5)

    def check_strategy(self, attention):
        with harness.Server(self.yaml, self.weights, "--attention", attention) as server:
            info = server.ranker.info()
            self.assertEqual(info["attention"], attention)
            self.assertEqual(info["device"], "cpu")
            served = server.ranker.rank_many(self.requests)
        err32 = harness.max_abs_diff(served, self.twin32)
        err64 = harness.max_abs_diff(served, self.twin64)
        print(f"{attention}: max |server - twin float32| = {err32:.3g}, max |server - twin float64| = {err64:.3g}")
        self.assertLessEqual(err32, 1e-5)
        self.assertLessEqual(err64, 1e-5)

    def test_jagged(self):
        self.check_strategy("jagged")

    def test_padded_flash(self):
        self.check_strategy("padded_flash")

    def test_padded_dense(self):
        self.check_strategy("padded_dense")


if __name__ == "__main__":
    unittest.main()
