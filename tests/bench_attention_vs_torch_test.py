"""bench/attention_vs_torch.py without torch or a GPU: the shape sets and their
lengths (--dry-run), the length laws, and the summary lines of a saved run
(--from-json). The timed run itself needs the GPU machine."""
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "attention_vs_torch.py")
# "self B=64 N=8192 H=2 D=128 full   524288   8192   4.29e+09   4.4e+12   10.482    1.7  skipped..."
SELF_LINE = re.compile(r"^self B=(\d+) N=(\d+) H=(\d+) D=(\d+) (\w+)((?: \w+=[\d.e+-]+)*)"
                       r"\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")
TOTAL_LINE = re.compile(r"^shapes: (\d+) self, (\d+) target; estimated run time on an H200: (\d+) s")


def run(*args):
    result = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"{args} exited {result.returncode}: {result.stderr}")
    return result.stdout


def self_rows(out):
    rows = []
    for line in out.splitlines():
        m = SELF_LINE.match(line)
        if m:
            B, N, H, D = (int(x) for x in m.group(1, 2, 3, 4))
            rows.append(dict(B=B, N=N, H=H, D=D, law=m.group(5), args=m.group(6).strip(), tokens=int(m.group(7)),
                             max_len=int(m.group(8)), sum_sq=float(m.group(9)), flops=float(m.group(10)), line=line))
    return rows


def load_module():
    spec = importlib.util.spec_from_file_location("attention_vs_torch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class DryRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = run("--dry-run", "--shapes", "all")
        cls.rows = self_rows(cls.out)

    def test_every_set_and_the_total_within_three_minutes(self):
        total = [TOTAL_LINE.match(line) for line in self.out.splitlines() if TOTAL_LINE.match(line)]
        self.assertEqual(len(total), 1, self.out)
        n_self, n_target, seconds = (int(x) for x in total[0].groups())
        self.assertEqual(n_self, len(self.rows))
        self.assertEqual(n_target, 4)
        self.assertLessEqual(seconds, 180)
        self.assertEqual({r["law"] for r in self.rows}, {"uniform", "lognormal", "zipf", "pareto", "full"})

    def test_issue_shapes_are_present(self):
        def has(**want):
            return any(all(r[k] == v for k, v in want.items()) for r in self.rows)

        self.assertTrue(has(N=8192, H=2, D=64, law="zipf"), "Zipf up to 8192, D=64, H=2")
        for D in (32, 64, 128):
            for H in (1, 2, 4, 8):
                self.assertTrue(has(N=2048, H=H, D=D, law="lognormal", args="median=250 sigma=1.2"), (H, D))
        self.assertTrue(has(B=64, N=8192, H=2, D=128, law="full"), "64 x 8192 full length at D=128")
        self.assertTrue(has(D=32, law="full") and has(D=64, law="full"))

    def test_lengths_and_work_are_consistent(self):
        for r in self.rows:
            self.assertLessEqual(r["max_len"], r["N"], r["line"])
            self.assertGreaterEqual(r["tokens"], r["B"], r["line"])  # every length >= 1
            self.assertLessEqual(r["tokens"], r["B"] * r["N"], r["line"])
            self.assertAlmostEqual(r["flops"], 4 * r["sum_sq"] * r["H"] * r["D"], delta=0.01 * r["flops"])
            if r["law"] == "full":
                self.assertEqual((r["tokens"], r["max_len"]), (r["B"] * r["N"], r["N"]), r["line"])
                # sum Lq*Lk is printed to 3 digits
                self.assertAlmostEqual(r["sum_sq"], r["B"] * r["N"] ** 2, delta=0.005 * r["sum_sq"])
                self.assertIn("sdpa_mask (full length", r["line"])

    def test_sets_partition_all_with_the_same_lengths(self):
        lines = [r["line"] for r in self.rows]
        parts = [r["line"] for s in ("table", "heavy", "full") for r in self_rows(run("--dry-run", "--shapes", s))]
        self.assertEqual(parts, lines)
        self.assertEqual(run("--dry-run"), self.out)  # default: all, same seed, same lengths
        other_seed = [r["line"] for r in self_rows(run("--dry-run", "--seed", "1"))]
        changed = [a != b for a, b in zip(lines, other_seed)]
        self.assertTrue(any(changed))
        self.assertFalse(all(changed))  # full-length shapes do not depend on the seed


class LawsTest(unittest.TestCase):
    def test_laws(self):
        m = load_module()
        shape = m.SelfShape(1024, 2048, 1, 64, "lognormal", (250, 1.2))
        L = sorted(m.self_lengths(shape, 0))
        self.assertEqual(L, sorted(m.self_lengths(shape, 0)))
        self.assertTrue(200 <= L[len(L) // 2] <= 300, L[len(L) // 2])
        self.assertEqual(L[-1], 2048)  # about 4% above the cap
        self.assertGreaterEqual(L[0], 1)
        z = m.self_lengths(m.SelfShape(2048, 8192, 2, 64, "zipf", (1.1,)), 0)
        self.assertEqual(max(set(z), key=z.count), 1)
        self.assertGreater(max(z), 4096)
        p = m.self_lengths(m.SelfShape(1024, 4096, 8, 32, "pareto", (1.5, 64)), 0)
        self.assertEqual(min(p), 64)
        self.assertLessEqual(max(p), 4096)
        u = m.self_lengths(m.SelfShape(1024, 1024, 4, 32, "uniform", (0.75,)), 0)
        self.assertTrue(min(u) >= 512 and max(u) <= 1024)
        self.assertEqual(m.self_lengths(m.SelfShape(3, 5, 1, 32, "full", ()), 0), [5, 5, 5])


class FromJsonTest(unittest.TestCase):
    def test_summary_lines(self):
        def row(variant, ms, **shape):
            r = dict(kind="self", H=2, variant=variant, ms=ms, tflops=100.0 / ms, peak_mib=1.0, rel_vs_fa2=1e-3)
            r.update(shape)
            return r

        full128 = dict(B=64, N=8192, D=128, law="full", law_label="full", fill=None)
        zipf = dict(B=512, N=8192, D=64, law="zipf", law_label="zipf s=1.1", fill=None)
        old = dict(B=1024, N=256, D=32, fill=0.5)  # saved before length laws existed
        full64 = dict(B=128, N=4096, D=64, law="full", law_label="full", fill=None)
        rows = [
            row("jagrank", 8.0, **full128), row("cudnn", 7.4, **full128), row("varlen_fa2", 10.0, **full128),
            row("jagrank", 2.0, **zipf), row("varlen_fa2", 2.2, **zipf),
            dict(row("sdpa_mask", 1.0, **zipf), skipped="est 9 s > 6 s"),
            row("jagrank", 1.0, **old), row("varlen_fa2", 2.0, **old),
            row("jagrank", 4.0, **full64), row("cudnn", 6.0, **full64), row("varlen_fa2", 5.0, **full64),
            dict(kind="target", B=256, C="64-512", Lmax=1024, Lmed=100, d=64, variant="jagrank", ms=0.02,
                 tflops=1.0, peak_mib=1.0, rel_vs_fa2=1e-3),
            dict(kind="target", B=256, C="64-512", Lmax=1024, Lmed=100, d=64, variant="varlen_fa2", ms=0.04,
                 tflops=1.0, peak_mib=1.0, rel_vs_fa2=1e-3),
        ]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rows.json")
            with open(path, "w") as f:
                json.dump(rows, f)
            out = run("--from-json", path).splitlines()
        self.assertEqual(out[-3:], [
            "min speedup vs varlen_fa2: 1.10 (shape self B=512 N=8192 H=2 D=64 zipf s=1.1)",
            "full-length vs cudnn: min 0.93 (shape self B=64 N=8192 H=2 D=128 full)",
            "D=128 long-sequence TFLOP/s: max 12.50 (shape self B=64 N=8192 H=2 D=128 full)",
        ])
        self.assertTrue(any("uniform fill=0.5" in line for line in out), out)
        self.assertTrue(any("skipped: est 9 s > 6 s" in line for line in out), out)

    def test_ab_variant_summary_lines(self):
        def row(variant, ms, B):
            return dict(kind="self", B=B, N=4096, H=2, D=64, law="zipf", law_label="zipf s=1.5", fill=None,
                        variant=variant, ms=ms, tflops=1.0, peak_mib=1.0, rel_vs_fa2=1e-3)

        rows = [row("jagrank", 1.0, 512), row("jagrank_grid", 1.5, 512), row("jagrank_cp_async", 1.1, 512),
                dict(row("jagrank_grid", 1.0, 1024), rel_vs_jagrank=0.0), row("jagrank", 2.0, 1024),
                dict(row("jagrank_cp_async", 1.0, 1024), error="out of memory")]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rows.json")
            with open(path, "w") as f:
                json.dump(rows, f)
            out = run("--from-json", path).splitlines()
        self.assertEqual(out[-2:], [
            "cp.async over TMA K/V copies: min 1.10 (shape self B=512 N=4096 H=2 D=64 zipf s=1.5), "
            "max 1.10 (shape self B=512 N=4096 H=2 D=64 zipf s=1.5), geomean 1.100",
            "one CTA per tile over the chosen schedule: min 0.50 (shape self B=1024 N=4096 H=2 D=64 zipf s=1.5), "
            "max 1.50 (shape self B=512 N=4096 H=2 D=64 zipf s=1.5), geomean 0.866",
        ])
        self.assertTrue(any("(vs jagrank rel err 0.0e+00)" in line for line in out), out)

    def test_graph_summary_line(self):
        def row(variant, ms, B, **extra):
            r = dict(kind="target", B=B, C="16-128", Lmax=1024, Lmed=100, d=64, variant=variant, ms=ms,
                     tflops=1.0, peak_mib=1.0, rel_vs_fa2=1e-3)
            r.update(extra)
            return r

        # B=1024: host-bound back to back (ours 0.072 ms eager), 0.030 vs 0.059 on the device; B=256:
        # FA2 without a graph time (not in the line); B=128: ours fails (no line entry either).
        rows = [row("jagrank", 0.072, 1024, graph_ms=0.030), row("varlen_fa2", 0.062, 1024, graph_ms=0.059),
                row("jagrank", 0.020, 256, graph_ms=0.018), row("varlen_fa2", 0.040, 256),
                row("jagrank", 0.020, 128, error="boom"), row("varlen_fa2", 0.040, 128, graph_ms=0.05)]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rows.json")
            with open(path, "w") as f:
                json.dump(rows, f)
            out = run("--from-json", path).splitlines()
        self.assertEqual(out[-4], "min speedup vs varlen_fa2: 0.86 (shape target B=1024 C=16-128 Lmax=1024 d=64)")
        self.assertEqual(out[-1], "device time (CUDA graph, calls under 0.25 ms) vs varlen_fa2: "
                                  "min 1.97 (shape target B=1024 C=16-128 Lmax=1024 d=64), 1 shapes")
        self.assertTrue(any("[graph 0.0590 ms, ours x1.97]" in line for line in out), out)

    def test_summary_without_rows_of_a_kind(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rows.json")
            with open(path, "w") as f:
                json.dump([], f)
            out = run("--from-json", path).splitlines()
        self.assertEqual(out[-2:], ["full-length vs cudnn: min n/a (shape none)",
                                    "D=128 long-sequence TFLOP/s: max n/a (shape none)"])


if __name__ == "__main__":
    unittest.main()
