"""attnplug.Client against a real attnplug serve."""

import json
import os
import shutil
import tempfile
import unittest

import serve
from attnplug import Client, ServerUnavailable, UntrustedServer, default_address
from attnplug.client import ERROR_CODES
from attnplug_testing import handlers as testing


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = serve.Server().start()
        cls.client = Client(cls.server.address)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.cleanup()

    def test_answers_as_attnplug_dispatch(self):
        reqs = testing.requests(500, seed=1)
        want = serve.dispatch_cli(testing.jsonl(reqs))
        got = self.client.dispatch_batch(reqs)
        self.assertEqual(len(got), len(reqs))
        for i, (g, w) in enumerate(zip(got, want)):
            self.assertEqual((g.method, g.handler, g.plugin), (w.get("method"), w.get("handler"), w.get("plugin")),
                             "request %d: %s" % (i, json.dumps(reqs[i])))
            self.assertEqual(g.generation, 1)
        one = self.client.dispatch(reqs[0])
        self.assertEqual(one.method, got[0].method)

    def test_defaults_are_those_of_the_dispatch_format(self):
        # No layer: the chunked-prefix threshold is sglang's 8192, so a
        # prefix of 100 is below it and flashinfer answers MLA.
        a = self.client.dispatch({"backend": "flashinfer", "forward_mode": "EXTEND", "extend_prefix_lens": [100],
                                  "seq_lens": [200], "max_chunk_capacity": 131072})
        self.assertEqual(a.method, "MLA")
        want = serve.dispatch_cli(json.dumps({"backend": "flashinfer", "forward_mode": "EXTEND",
                                              "extend_prefix_lens": [100], "seq_lens": [200],
                                              "max_chunk_capacity": 131072}) + "\n")
        self.assertEqual(a.method, want[0]["method"])

    def test_bad_requests(self):
        for req, field in [
            ({"backend": "fa3", "forward_mode": "EXTEND", "sequence": [1]}, "'sequence'"),
            ({"backend": "fa3", "forward_mode": "PREFILL"}, "forward_mode"),
            ({"forward_mode": "DECODE"}, "backend"),
            ({"backend": "fa3", "forward_mode": "DECODE", "layer": {"use_dsa": "yes"}}, "layer.use_dsa"),
            ({"backend": "fa3", "forward_mode": "DECODE", "seq_lens": [1, "2"]}, "seq_lens[1]"),
            ({"backend": "fa3", "forward_mode": "DECODE", "runtime": {"platform": "tpu"}}, "runtime.platform"),
            ({"backend": "fa3", "forward_mode": "DECODE", "max_chunk_capacity": 1 << 70}, "max_chunk_capacity"),
        ]:
            with self.assertRaises(ValueError) as cm:
                self.client.dispatch(req)
            self.assertIn(field, str(cm.exception))
        # What only the server checks comes back as an answer's error.
        a = self.client.dispatch({"backend": "fa3", "forward_mode": "EXTEND", "extend_prefix_lens": [300],
                                  "seq_lens": [200]})
        self.assertIsNone(a.method)
        self.assertIn("extend_prefix_lens", a.error)
        self.assertEqual(a.error_code, "INVALID_REQUEST")
        self.assertIn(a.error_code, ERROR_CODES)
        self.assertTrue(a.error_field.startswith("extend_prefix_lens"), a.error_field)
        self.assertTrue(a.error.startswith(a.error_field + ": "), a.error)
        ok = self.client.dispatch({"backend": "fa3", "forward_mode": "DECODE"})
        self.assertEqual((ok.method, ok.error, ok.error_code, ok.error_field), ("MLA", "", "", ""))

    def test_describe_plugins_and_batches(self):
        d = self.client.describe()
        self.assertEqual(d.generation, 1)
        self.assertEqual(d.route("fa3").plugin, "fa3")
        self.assertEqual(d.route("nobody").handler, "triton")
        self.assertIn("fa3", [p["name"] for p in self.client.plugins()])
        self.assertEqual(self.client.dispatch_batch([]), [])

    def test_tcp(self):
        with serve.Server(tcp=True) as s, Client("tcp://" + s.address) as c:
            self.assertEqual(c.dispatch({"backend": "fa4", "forward_mode": "DECODE"}).method, "MHA_CHUNKED_KV")

    def test_socket_path(self):
        # A path starting with / or . is a unix socket, as for --connect.
        sock = self.server.socket
        cwd = os.getcwd()
        try:
            os.chdir(os.path.dirname(sock))
            for addr in (sock, "./" + os.path.basename(sock)):
                with Client(addr) as c:
                    self.assertEqual(c.dispatch({"backend": "fa3", "forward_mode": "DECODE"}).method, "MLA", addr)
        finally:
            os.chdir(cwd)

    def test_unreachable(self):
        with tempfile.TemporaryDirectory() as d, Client("unix://" + os.path.join(d, "none.sock"), timeout=0.5) as c:
            with self.assertRaises(ServerUnavailable):
                c.dispatch({"backend": "fa3", "forward_mode": "DECODE"})

    def test_bad_address(self):
        with self.assertRaises(ValueError):
            Client("")


class LocalUserTest(unittest.TestCase):
    """No other local user stands in for the server: a real attnplug serve
    run by nobody is refused, whether the client meets it first or after
    its own server went away."""

    def test_default_address_is_in_the_private_directory(self):
        env = dict(os.environ)
        try:
            os.environ.pop("ATTNPLUG_ADDRESS", None)
            os.environ["XDG_RUNTIME_DIR"], os.environ["TMPDIR"] = "", "/x"
            self.assertEqual(default_address(), "unix:///x/attnplug-%d/serve.sock" % os.getuid())
            os.environ["XDG_RUNTIME_DIR"] = "/run/user/7"
            self.assertEqual(default_address(), "unix:///run/user/7/attnplug/serve.sock")
            os.environ["ATTNPLUG_ADDRESS"] = "127.0.0.1:1"
            self.assertEqual(default_address(), "127.0.0.1:1")
        finally:
            os.environ.clear()
            os.environ.update(env)

    def assertRefused(self, call, sock, user):
        with self.assertRaises(UntrustedServer) as cm:
            call()
        for want in (sock, "uid %d" % user.pw_uid, "not by you (uid %d)" % os.getuid()):
            self.assertIn(want, str(cm.exception))

    def test_a_server_of_another_user_is_refused(self):
        user = serve.nobody()
        with serve.Server(user=user) as s, Client(s.address) as c:
            req = {"backend": "fa3", "forward_mode": "EXTEND", "extend_prefix_lens": [0], "seq_lens": [100]}
            self.assertRefused(lambda: c.dispatch(req), s.socket, user)
            self.assertRefused(c.describe, s.socket, user)
            self.assertRefused(lambda: c.plan_kernel(decode_plan_request()), s.socket, user)
            self.assertRefused(c.watch, s.socket, user)

    def test_a_server_of_another_user_after_a_reconnection_is_refused(self):
        # The client's own server answers, goes away, and another user's
        # takes its socket's path: the client's channel must not reconnect
        # to it.
        user = serve.nobody()
        d = tempfile.mkdtemp(prefix="ap-py-")
        try:
            own = serve.Server(dir=d).start()
            c = Client(own.address)
            try:
                self.assertEqual(c.dispatch({"backend": "fa3", "forward_mode": "DECODE"}).method, "MLA")
                own.stop()
                theirs = serve.Server(dir=d, user=user).start()
                try:
                    self.assertEqual(theirs.socket, own.socket)
                    self.assertRefused(lambda: c.dispatch({"backend": "fa3", "forward_mode": "DECODE"}), own.socket, user)
                finally:
                    theirs.stop()
            finally:
                c.close()
                own.stop()
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()


H200 = {"platform": "cuda", "name": "NVIDIA H200", "compute_capability": 90, "sms": 132,
        "max_threads_per_block": 1024, "max_shared_per_block": 232448, "max_grid": [2147483647, 65535, 65535]}


def decode_plan_request(backend="fa3", batch=16, seq=100, graph=True, max_seq_len=8192):
    return {"backend": backend, "method": "MLA", "dtype": "bf16", "graph": graph,
            "dims": {"heads": 16, "head_dim_qk": 576, "head_dim_v": 512, "softmax_scale": 0.1352},
            "shape": {"seq_lens": [seq + i for i in range(batch)], "q_lens": [1] * batch, "page_size": 64,
                      "num_pages": 4096, "max_seq_len": max_seq_len},
            "device": H200}


class KernelsTest(unittest.TestCase):
    """The Kernels service through the Python client: the fa3 plugin's
    device code, built ahead of time, for a device the client describes
    (no GPU and no compiler here), and its checked plans."""

    @classmethod
    def setUpClass(cls):
        cls.server = serve.Server().start()
        cls.client = Client(cls.server.address)
        cls.no_device_code = None
        from attnplug import NoPlan
        try:
            cls.client.kernel_modules("fa3", H200)
        except NoPlan as exc:
            if "no device code was built ahead of time" in str(exc):
                cls.no_device_code = str(exc)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.cleanup()

    def need_device_code(self):
        if self.no_device_code:
            self.skipTest("the plugins hold no device code built ahead of time (make device-code, which needs nvcc) "
                          "and cannot build it here: " + self.no_device_code[-160:])

    def test_modules_built_ahead_of_time(self):
        self.need_device_code()
        import hashlib
        mods = self.client.kernel_modules("fa3", H200)
        # On compute capability 9.0 the wgmma decode and prefill (sm_90a) come too.
        self.assertEqual(sorted(m.name for m in mods), ["mha_prefill", "mha_prefill_sm90", "mla_decode", "mla_decode_sm90"])
        for m in mods:
            self.assertEqual(hashlib.sha256(m.image).hexdigest(), m.sha256)
            want = ("cubin", "sm_90a") if m.name.endswith("_sm90") else ("cubin", "sm_90")
            self.assertEqual((m.format, m.arch), want)
        dec = next(m for m in mods if m.name == "mla_decode")
        self.assertEqual(dec.entry("mla_schedule")[0], ("seq_lens", "ptr"))
        a100 = dict(H200, name="NVIDIA A100", compute_capability=80)
        a100_mods = self.client.kernel_modules("fa3", a100)
        self.assertEqual(sorted(m.name for m in a100_mods), ["mha_prefill", "mla_decode"])
        self.assertEqual({(m.format, m.arch) for m in a100_mods}, {("cubin", "sm_80")})

    def test_plans_hold_for_the_batch_size(self):
        self.need_device_code()
        p = self.client.plan_kernel(decode_plan_request())
        self.assertTrue(p.holds_for_batch(), p.reads)
        self.assertEqual(p.metadata, {})
        self.assertTrue(p.launches[0].per_batch)
        self.assertEqual([t.name for t in p.tensors],
                         ["q", "kv_cache", "kv_indptr", "kv_indices", "seq_lens", "qo_indptr", "out", "lse"])
        self.assertEqual(dict((t.name, t.shape) for t in p.tensors)["kv_indices"], (16 * 128,))
        # Other lengths under the same bound: the same plan.
        self.assertEqual(self.client.plan_kernel(decode_plan_request(seq=3000)), p)
        # Without a bound, the plan reads the lengths.
        q = self.client.plan_kernel(decode_plan_request(max_seq_len=0))
        self.assertFalse(q.holds_for_batch())
        self.assertIn("schedule", q.metadata)

    def test_sparse_and_fp8_plans(self):
        self.need_device_code()
        # dsa's sparse MLA over DeepSeek-V3.2's FP8 cache: the top-k, not the
        # page table, and 656-byte tokens; the plan holds for the batch size.
        r = decode_plan_request(backend="dsa", max_seq_len=0)
        r["kv_dtype"] = "fp8_e4m3"
        r["dims"]["top_k"] = 2048
        p = self.client.plan_kernel(r)
        self.assertEqual([t.name for t in p.tensors], ["q", "kv_cache", "topk_indices", "out", "lse"])
        shapes = dict((t.name, (t.dtype, t.shape)) for t in p.tensors)
        self.assertEqual(shapes["kv_cache"], ("fp8_e4m3", (4096, 64, 656)))
        self.assertEqual(shapes["topk_indices"], ("i32", (16, 2048)))
        self.assertTrue(p.holds_for_batch(), p.reads)
        self.assertTrue(p.launches[0].entry.startswith("mla_sparse_fp8_"), p.launches[0].entry)
        # fa3's dense decode over an FP8 cache binds the layer's scale.
        r = decode_plan_request(max_seq_len=0)
        r["kv_dtype"] = "fp8_e4m3"
        p = self.client.plan_kernel(r)
        self.assertIn(("kv_scale", ("f32", (1,))), [(t.name, (t.dtype, t.shape)) for t in p.tensors])
        # A sparse kernel asked without a top-k: no plan, saying why.
        from attnplug import NoPlan
        with self.assertRaises(NoPlan) as ctx:
            self.client.plan_kernel(decode_plan_request(backend="dsa"))
        self.assertIn("top_k", str(ctx.exception))

    def test_errors(self):
        from attnplug import NoPlan, ServerError
        with self.assertRaises(NoPlan) as ctx:
            self.client.kernel_modules("aiter", H200)
        self.assertIn("no device code", str(ctx.exception))
        with self.assertRaises(NoPlan):
            self.client.plan_kernel(decode_plan_request(backend="triton"))
        bad = decode_plan_request()
        bad["dims"]["heads"] = 0
        with self.assertRaises(ServerError) as ctx:
            self.client.plan_kernel(bad)
        self.assertIn("heads", str(ctx.exception))
        self.assertNotIsInstance(ctx.exception, NoPlan)
        with self.assertRaises(ValueError):
            self.client.plan_kernel(dict(decode_plan_request(), method="NOT_A_METHOD"))

    def test_long_strings_are_invalid_arguments(self):
        # A string field of 1 MB is refused naming it, its start quoted:
        # it came back whole in the status, past gRPC's limit of a
        # status's size (INTERNAL).
        import grpc
        from attnplug import NoPlan, ServerError
        big = "x" * (1 << 20)
        for field, call in [
            ("dtype", lambda: self.client.plan_kernel(dict(decode_plan_request(), dtype=big))),
            ("kv_dtype", lambda: self.client.plan_kernel(dict(decode_plan_request(), kv_dtype=big))),
            ("device.name", lambda: self.client.plan_kernel(dict(decode_plan_request(), device=dict(H200, name=big)))),
            ("device.name", lambda: self.client.kernel_modules("fa3", dict(H200, name=big[:4096]))),
            # A modules request of 1 MB is larger than any valid one: refused by its size.
            ("KernelModules request", lambda: self.client.kernel_modules("fa3", dict(H200, name=big))),
        ]:
            with self.assertRaises(ServerError) as ctx:
                call()
            self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT, str(ctx.exception)[:300])
            self.assertNotIsInstance(ctx.exception, NoPlan)
            self.assertIn(field, str(ctx.exception))
            self.assertLess(len(str(ctx.exception)), 1000)


class FieldsTest(unittest.TestCase):
    """_fields reads repeated fields by FieldDescriptor.is_repeated where
    protobuf has it (newer releases drop .label) and by the label where it
    does not."""

    def test_both_descriptor_shapes(self):
        from attnplug.client import _repeated

        class Labelled:
            LABEL_REPEATED = 3

            def __init__(self, label):
                self.label = label

        class Newer:
            def __init__(self, rep):
                self.is_repeated = rep

            @property
            def label(self):
                raise AttributeError("label")

        self.assertTrue(_repeated(Labelled(3)))
        self.assertFalse(_repeated(Labelled(1)))
        self.assertTrue(_repeated(Newer(True)))
        self.assertFalse(_repeated(Newer(False)))

    def test_a_message(self):
        from attnplug._pb import dispatch_pb2
        from attnplug.client import _fields
        got = _fields(dispatch_pb2.PlanShape(seq_lens=[3, 4], page_size=64))
        self.assertEqual(got["seq_lens"], [3, 4])
        self.assertEqual(got["page_size"], 64)
