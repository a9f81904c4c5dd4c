"""python -m attnplug.bench: its arguments without a GPU, and with a CUDA
GPU every path's plan timed beside torch through a real attnplug serve,
each row's output within 2e-2 of torch's."""

import contextlib
import io
import json
import unittest

import serve
from attnplug import bench

try:
    import torch
    HAVE_GPU = torch.cuda.is_available()
except ImportError:
    HAVE_GPU = False


class ArgumentsTest(unittest.TestCase):
    def error(self, argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as cm:
            bench.main(argv)
        self.assertEqual(cm.exception.code, 2)
        return err.getvalue()

    def test_bad_arguments_are_named(self):
        self.assertIn("--gpu is required", self.error([]))
        self.assertIn("--heads 'x'", self.error(["--gpu", "--heads", "x"]))
        self.assertIn("--heads 0: want [1, 128]", self.error(["--gpu", "--heads", "16,0"]))
        self.assertIn("--cached 100: want [2048, 65536]", self.error(["--gpu", "--cached", "100"]))
        self.assertIn("--batch 100000", self.error(["--gpu", "--batch", "100000"]))


@unittest.skipUnless(HAVE_GPU, "needs torch and a CUDA GPU")
class BenchGPUTest(unittest.TestCase):
    def test_every_path_beside_torch(self):
        server = serve.Server().start()
        self.addCleanup(server.cleanup)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = bench.main(["--gpu", "--address", server.address, "--heads", "16", "--batch", "4", "--cached", "2048",
                             "--reps", "3", "--json"])
        self.assertEqual(rc, 0)
        rows = json.loads(out.getvalue())["rows"]
        self.assertEqual([r["path"] for r in rows],
                         ["decode", "verify", "extend", "fp8", "sparse", "prefill", "chunked_prefix"])
        for r in rows:
            self.assertLess(r["rel_err"], 2e-2, r)
            self.assertGreater(r["us"], 0, r)
        self.assertEqual(rows[4]["backend"], "dsa")
