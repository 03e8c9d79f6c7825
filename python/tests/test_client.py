"""jagrank.client.Ranker against the real jagrank-server: rank, info,
health, the server's errors, rank_stream; and the package installed by
`pip install ./python` (stubs generated at install time) doing the same."""

import os
import subprocess
import sys
import tempfile
import unittest

import grpc

import harness

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.config, cls.model, cls.yaml, cls.weights = harness.model_files("jagrank_client_")
        cls.server = harness.Server(cls.yaml, cls.weights)
        cls.request = {"dense": [0.5, -1.0, 0.25, 2.0, 0.0], "sparse": {"country": [3], "segments": [1, 2, 3]},
                       "history": [11, 12, -13, 14], "candidates": [101, 102, -103, 104]}

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def test_rank(self):
        from jagrank.client import Ranker
        with Ranker(self.server.address) as ranker:
            scores = ranker.rank(self.request)
            response = ranker.rank_response(self.request, request_id="r-17")
            version = ranker.info()["version"]
        self.assertEqual(len(scores), 4)
        self.assertLessEqual(harness.max_abs_diff([scores], self.model.rank([self.request])), 1e-5)
        self.assertEqual(response.request_id, "r-17")
        self.assertEqual(response.model_version, version)
        self.assertEqual(list(response.scores), scores)

    def test_info(self):
        info = self.server.ranker.info()
        c = self.config
        self.assertEqual(info["name"], c.name)
        self.assertEqual(info["embedding_dim"], c.embedding_dim)
        self.assertEqual(info["num_dense_features"], c.num_dense_features)
        self.assertEqual(info["sparse_feature_names"], c.sparse_feature_names)
        self.assertEqual(info["max_history_len"], c.max_history_len)
        self.assertEqual(info["attention_heads"], c.attention_heads)
        self.assertEqual(info["item_rows"], c.item_rows)
        self.assertEqual(info["device"], "cpu")
        self.assertEqual(info["attention"], "jagged")
        self.assertEqual(len(info["version"]), 16)

    def test_health(self):
        ranker = self.server.ranker
        self.assertEqual(ranker.health(), "SERVING")
        self.assertEqual(ranker.health("jagrank.v1.Ranker"), "SERVING")
        with self.assertRaises(grpc.RpcError) as caught:
            ranker.health("no.such.Service")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_server_errors_name_the_field(self):
        ranker = self.server.ranker
        with self.assertRaises(grpc.RpcError) as caught:
            ranker.rank(dict(self.request, dense=[1.0]))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("dense_features", caught.exception.details())
        with self.assertRaises(grpc.RpcError) as caught:
            ranker.rank(dict(self.request, sparse={"planet": [1]}))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("'planet'", caught.exception.details())
        with self.assertRaises(ValueError):
            ranker.rank(dict(self.request, colour=[1]))

    def test_rank_stream(self):
        from jagrank.client import RankStreamError
        ranker = self.server.ranker
        bad = dict(self.request, dense=[1.0])
        requests = [self.request, ("bad", bad), dict(self.request, candidates=[7, 8])]
        answers = dict(ranker.rank_stream(requests))
        self.assertEqual(sorted(answers), ["0", "2", "bad"])
        self.assertLessEqual(harness.max_abs_diff([answers["0"]], [ranker.rank(self.request)]), 1e-5)
        self.assertEqual(len(answers["2"]), 2)
        self.assertIsInstance(answers["bad"], RankStreamError)
        self.assertEqual(answers["bad"].code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("dense_features", answers["bad"].details())

    def test_pip_installed_package(self):
        with tempfile.TemporaryDirectory(prefix="jagrank_pip_") as target:
            run = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
                                  "--target", target, os.path.join(REPO, "python")],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
            self.assertEqual(run.returncode, 0, run.stdout.decode())
            self.assertTrue(os.path.exists(os.path.join(target, "jagrank_stubs", "ranker_pb2_grpc.py")))
            script = ("import sys, jagrank, jagrank_stubs\n"
                      "from jagrank.client import Ranker\n"
                      "assert jagrank.__file__.startswith(sys.argv[1]), jagrank.__file__\n"
                      "assert jagrank_stubs.__file__.startswith(sys.argv[1]), jagrank_stubs.__file__\n"
                      "r = Ranker(sys.argv[2])\n"
                      "print(r.health(), r.rank({'dense': [0.5, -1.0, 0.25, 2.0, 0.0], 'candidates': [7, 8]}))\n")
            env = dict(os.environ, PYTHONPATH=target)
            run = subprocess.run([sys.executable, "-c", script, target, self.server.address], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
            out = run.stdout.decode()
            self.assertEqual(run.returncode, 0, out)
            self.assertTrue(out.startswith("SERVING ["), out)


if __name__ == "__main__":
    unittest.main()
