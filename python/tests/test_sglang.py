"""attnplug.sglang against a real attnplug serve: the same methods as
sglang's own code, no RPC after warm-up, install in place, hot swap, and a
server killed mid-stream."""

import itertools
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

import serve
from attnplug import sglang as aps
from attnplug_testing import handlers as standins

N_REQUESTS = int(os.environ.get("ATTNPLUG_PY_REQUESTS", "20000"))


class Recorder(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def warnings(self, needle):
        return [r for r in self.records if r.levelno >= logging.WARNING and needle in r.getMessage()]


def record_logs(test):
    rec = Recorder()
    logger = logging.getLogger("attnplug.sglang")
    logger.addHandler(rec)
    test.addCleanup(logger.removeHandler, rec)
    return rec


class FidelityTest(unittest.TestCase):
    """Tens of thousands of generated requests: the installed handlers give
    what sglang's own handlers give (when the reference file is there) and
    what the Go registry gives through ``attnplug dispatch``."""

    @classmethod
    def setUpClass(cls):
        cls.server = serve.Server().start()
        cls.reference = standins.reference_path()
        cls.module = standins.sglang_module(cls.reference)
        cls.registry = aps.install(cls.server.address, module=cls.module)

    @classmethod
    def tearDownClass(cls):
        aps.uninstall(cls.module)
        cls.server.cleanup()

    def test_same_method_as_sglang_and_the_go_registry(self):
        reqs = standins.requests(N_REQUESTS, seed=16)
        cli = serve.dispatch_cli(standins.jsonl(reqs))
        self.assertEqual(len(cli), len(reqs))
        reg = self.module.AttentionBackendRegistry
        got = []
        for i, r in enumerate(reqs):
            name, attn, fb = standins.apply(r, self.module, predicate_mode=(i % 5 == 0))
            got.append(reg.get_handler(name)(attn, fb))
        for i, (r, m) in enumerate(zip(reqs, got)):
            self.assertIsInstance(m, self.module.AttnForwardMethod, "request %d: %r" % (i, r))
            self.assertEqual(m.name, cli[i].get("method"), "request %d %r: python %s, attnplug dispatch %r" % (i, r, m.name, cli[i]))
        if self.reference is None:
            print("\nSKIP the comparison with sglang's own code: no reference file (../shared/reference or "
                  "$ATTNPLUG_REFERENCE); compared %d requests with attnplug dispatch only" % len(reqs),
                  file=sys.stderr)
            return
        mism = 0
        for i, r in enumerate(reqs):
            name, attn, fb = standins.apply(r, self.module, predicate_mode=(i % 5 == 0))
            want = standins.sglang_answer(self.module, name, attn, fb)
            if got[i].name != want:
                mism += 1
                if mism <= 5:
                    print("request %d %r: attnplug %s, sglang %s" % (i, r, got[i].name, want), file=sys.stderr)
        self.assertEqual(mism, 0, "%d of %d requests differ from sglang's own code" % (mism, len(reqs)))
        stats = self.registry.stats()
        self.assertEqual(stats["local_answers"], 0, stats)
        self.assertGreater(stats["rpcs"], 0, stats)

    def test_no_rpc_per_layer_after_warm_up(self):
        reg = self.module.AttentionBackendRegistry
        attn = [standins.Attn(fused_qkv_a_proj_with_mqa=True) for _ in range(61)]
        for mode in ("EXTEND", "DECODE", "TARGET_VERIFY"):
            for backend in ("fa3", "flashinfer", "dsa", "no_such_backend"):
                req = {"backend": backend, "forward_mode": mode, "extend_prefix_lens": [0, 9000],
                       "seq_lens": [100, 9100], "max_chunk_capacity": 131072, "mla_prefill_cp": False,
                       "layer": {}, "runtime": {"platform": "cuda", "piecewise_cuda_graph": False,
                                                "breakable_cuda_graph": False, "deterministic_inference": False,
                                                "dsa_use_mha": True, "two_batch_overlap": False}}
                req["layer"] = {k: False for k in ("disable_chunked_prefix_cache", "flashinfer_mla_disable_ragged",
                                                    "rocm_fused_decode_mla", "use_dsa", "fused_qkv_a_proj_with_mqa",
                                                    "intel_amx")}
                req["layer"]["chunked_prefix_cache_threshold"] = 8192
                _, _, fb = standins.apply(req, self.module)
                first = [reg.get_handler(backend)(a, fb) for a in attn]  # warm-up pass
                before = self.registry.stats()["rpcs"]
                again = [reg.get_handler(backend)(a, fb) for a in attn]
                self.assertEqual(self.registry.stats()["rpcs"], before, "%s %s: RPCs in a warm pass" % (backend, mode))
                self.assertEqual(first, again)
                want = standins.sglang_answer(self.module, backend, attn[0], fb) if self.reference else None
                if want is not None:
                    self.assertEqual(again[0].name, want, "%s %s" % (backend, mode))

    def test_negative_threshold_decides_as_sglang(self):
        # sglang compares the prefix sum with the threshold, so a negative
        # one decides as 0 does; the server refuses negative thresholds, and
        # the handler must still give sglang's answer, with no fallback.
        logs = record_logs(self)
        reg = self.module.AttentionBackendRegistry
        rng = __import__("random").Random(11)
        for threshold in (-1, -8192):
            for backend in ("fa3", "flashinfer", "cutlass_mla"):
                req = standins.generate(rng)
                req["backend"], req["forward_mode"] = backend, "EXTEND"
                req["layer"]["chunked_prefix_cache_threshold"] = threshold
                name, attn, fb = standins.apply(req, self.module)
                got = reg.get_handler(name)(attn, fb)
                req["layer"]["chunked_prefix_cache_threshold"] = 0
                cli = serve.dispatch_cli(standins.jsonl([req]))
                self.assertEqual(got.name, cli[0].get("method"), "%s, threshold %d" % (backend, threshold))
                if self.reference:
                    self.assertEqual(got.name, standins.sglang_answer(self.module, name, attn, fb))
        self.assertEqual(logs.warnings(""), [])

    def test_handlers_read_only_the_declared_facts(self):
        # fa4's rules read nothing: its handler touches neither the layer nor
        # the batch once warm.
        reg = self.module.AttentionBackendRegistry
        req = standins.generate(__import__("random").Random(3))
        _, attn, fb = standins.apply(req, self.module)
        reg.get_handler("fa4")(attn, fb)

        class Untouchable:
            def __getattr__(self, name):
                raise AssertionError("fa4's handler read %r" % name)

        self.assertEqual(reg.get_handler("fa4")(Untouchable(), Untouchable()).name, "MHA_CHUNKED_KV")


    def test_dsa_handler_reads_only_the_backends_choice(self):
        # The dsa rules declare that a request giving dsa_use_mha (this
        # client always gives the DSA backend's use_mha) is decided by it
        # alone: once warm, the handler answers batches of any mode and
        # lengths without reading the layer or the batch, as sglang's does.
        reg = self.module.AttentionBackendRegistry
        rng = __import__("random").Random(5)
        warm = {}
        for use_mha in (True, False):
            req = standins.generate(rng)
            req["backend"] = "dsa"
            req["runtime"]["dsa_use_mha"] = use_mha
            _, attn, fb = standins.apply(req, self.module)
            warm[use_mha] = reg.get_handler("dsa")(attn, fb)
        self.assertEqual({k: m.name for k, m in warm.items()}, {True: "MHA_ONE_SHOT", False: "MLA"})

        class Untouchable:
            def __getattr__(self, name):
                raise AssertionError("dsa's handler read %r" % name)

        before = self.registry.stats()
        for i in range(200):
            req = standins.generate(rng)
            req["backend"] = "dsa"
            _, attn, fb = standins.apply(req, self.module)  # sets the backend's use_mha
            got = reg.get_handler("dsa")(Untouchable(), Untouchable())
            self.assertEqual(got.name, "MHA_ONE_SHOT" if req["runtime"]["dsa_use_mha"] else "MLA", "request %d %r" % (i, req))
            if self.reference:
                self.assertEqual(got.name, standins.sglang_answer(self.module, "dsa", attn, fb))
        after = self.registry.stats()
        self.assertEqual((after["rpcs"], after["local_answers"]), (before["rpcs"], before["local_answers"]))


def _extend_batch(module, backend, prefix, seq, threshold=8192):
    """(attn, forward_batch) of an EXTEND batch with these lists, on CUDA,
    with every flag off."""
    req = {"backend": backend, "forward_mode": "EXTEND", "extend_prefix_lens": prefix, "seq_lens": seq,
           "max_chunk_capacity": 131072, "mla_prefill_cp": False,
           "layer": {"chunked_prefix_cache_threshold": threshold, "disable_chunked_prefix_cache": False,
                     "flashinfer_mla_disable_ragged": False, "rocm_fused_decode_mla": False, "use_dsa": False,
                     "fused_qkv_a_proj_with_mqa": False, "intel_amx": False},
           "runtime": {"platform": "cuda", "piecewise_cuda_graph": False, "breakable_cuda_graph": False,
                       "deterministic_inference": False, "dsa_use_mha": False, "two_batch_overlap": False}}
    _, attn, fb = standins.apply(req, module)
    return attn, fb


class RegistryEdgesTest(unittest.TestCase):
    """The edges where the drop-in must answer as sglang's registry does,
    against a serve whose default backend is fa3 (a request without a
    backend goes to fa3 there, where sglang's get_handler("") is triton's)."""

    def setUp(self):
        self.server = serve.Server(args=["--backend", "fa3"]).start()
        self.addCleanup(self.server.cleanup)
        self.reference = standins.reference_path()
        self.module = standins.sglang_module(self.reference)

    def install(self):
        reg = aps.install(self.server.address, module=self.module)
        self.addCleanup(aps.uninstall, self.module)
        return reg, self.module.AttentionBackendRegistry

    def test_empty_and_none_names_get_the_triton_handler(self):
        reg, cls = self.install()
        # fa3's rules give MHA_ONE_SHOT here, triton's MHA.
        attn, fb = _extend_batch(self.module, "", [0], [100])
        layers = [attn] * 61
        for name in ("", None):
            self.assertIs(cls.get_handler(name), cls.get_handler("triton"), repr(name))
            got = [cls.get_handler(name)(a, fb) for a in layers]  # warm-up pass
            before = reg.stats()["rpcs"]
            again = [cls.get_handler(name)(a, fb) for a in layers]
            self.assertEqual(reg.stats()["rpcs"], before, "%r: RPCs in a warm 61-layer pass" % (name,))
            self.assertEqual(got, again)
            self.assertEqual(got[0].name, "MHA", repr(name))
            self.assertEqual(got[0].name, aps.triton_method(reg.runtime, attn, fb))
            if self.reference:
                self.assertEqual(got[0].name, standins.sglang_answer(self.module, name, attn, fb))
        self.assertEqual(reg.stats()["local_answers"], 0)

    def test_registrations_before_install_keep_answering(self):
        cls = self.module.AttentionBackendRegistry
        members = self.module.AttnForwardMethod

        def mine(attn, forward_batch):
            return members.MHA_NPU

        def my_fa3(attn, forward_batch):
            return members.DSA_NPU

        cls.register("my_backend", mine)  # a platform plugin's name
        cls.register("fa3", my_fa3)  # someone's own rules for a name sglang has
        # A name of a newer sglang that the server does not route: sglang's
        # own handler, defined in its handler module.
        exec("def handle_attention_new_mla(attn, forward_batch):\n    return AttnForwardMethod.MLA_NPU\n",
             self.module.__dict__)
        cls.register("new_mla", self.module.handle_attention_new_mla)
        reg, cls = self.install()
        attn, fb = _extend_batch(self.module, "fa3", [0], [100])
        self.assertIs(cls.get_handler("my_backend"), mine)
        self.assertIs(cls.get_handler("fa3"), my_fa3)
        self.assertIs(cls.get_handler("new_mla")(attn, fb), members.MLA_NPU)
        self.assertEqual(reg.stats()["rpcs"], 0)
        # sglang's own handlers of names the server routes give way to it.
        self.assertIs(cls.get_handler("fa4")(attn, fb), members.MHA_CHUNKED_KV)
        self.assertEqual(reg.stats()["rpcs"], 1)
        if self.reference:
            self.assertIsNot(cls.get_handler("flashinfer"), self.module.handle_attention_flashinfer)
            self.assertEqual(cls.get_handler("flashinfer")(attn, fb).name,
                             standins.sglang_answer(self.module, "flashinfer", attn, fb))
        aps.uninstall(self.module)
        self.assertIs(cls.get_handler("my_backend"), mine)
        self.assertIs(cls.get_handler("fa3"), my_fa3)

    def test_malformed_batches_answer_the_same_cold_or_warm(self):
        # The server refuses each of these batches; sglang runs its handler
        # on them. fa3 with a prefix sum of 0 or past the threshold:
        # MHA_ONE_SHOT where triton says MHA or MLA; fa4 reads no length.
        cases = [
            ("fa3", [0, 0], [100], [0], [100]),  # more prefixes than sequences
            ("fa3", [9000], [100], [9000], [9100]),  # a prefix longer than its sequence
            ("flashinfer", [9000, 1], [100, 0], [9000, 1], [9100, 2]),
            ("fa4", [0, 0], [100], [0], [100]),
            ("fa3", [-1], [100], None, None),  # a negative length
        ]
        for (name, bad_p, bad_s, ok_p, ok_s), warm_first, native in itertools.product(cases, (False, True), (True, False)):
            if True:
                reg = aps.AttentionBackendRegistry(self.server.address, runtime=aps.SglangRuntime.from_module(self.module))
                if native:  # as install() does; without, the server answers a valid batch with the same facts
                    reg.set_sglang_handlers(aps.sglang_registrations(self.module)[0])
                try:
                    h = reg.get_handler(name)
                    bad_attn, bad = _extend_batch(self.module, name, bad_p, bad_s)
                    if warm_first and ok_p is not None:
                        ok_attn, ok = _extend_batch(self.module, name, ok_p, ok_s)
                        h(ok_attn, ok)
                    first = h(bad_attn, bad)
                    if not warm_first and ok_p is not None:
                        ok_attn, ok = _extend_batch(self.module, name, ok_p, ok_s)
                        h(ok_attn, ok)
                    second = h(bad_attn, bad)
                finally:
                    reg.close()
                what = "%s %r %r (%s, %s sglang's handlers)" % (name, bad_p, bad_s, "warm first" if warm_first else "cold first",
                                                              "with" if native else "without")
                self.assertEqual(first, second, what)
                if self.reference:
                    self.assertEqual(first.name, standins.sglang_answer(self.module, name, bad_attn, bad), what)
                elif name == "fa4":
                    self.assertEqual(first.name, "MHA_CHUNKED_KV", what)


class SurrogateTest(unittest.TestCase):
    """surrogate: a valid batch with the facts of one the server refuses."""

    FACTS = ("prefix_sum_zero", "prefix_sum_at_threshold", "seq_sum_within_capacity")

    @staticmethod
    def facts(reads, threshold, p, s, cap):
        ps = sum(p) if p is not None else 0
        ss = sum(s) if s is not None else 0
        mx = max(s) if s else 0
        return (ps == 0 if "prefix_sum_zero" in reads.facts else None,
                ps >= threshold if "prefix_sum_at_threshold" in reads.facts else None,
                ss <= cap if "seq_sum_within_capacity" in reads.facts else None,
                tuple(ps >= c for c in reads.prefix_sum_at_least), tuple(ss <= c for c in reads.seq_sum_at_most),
                tuple(mx <= c for c in reads.max_seq_len_at_most))

    def test_valid_batches_with_the_same_facts(self):
        import types
        rng = random.Random(26)
        found = 0
        for i in range(20000):
            facts = frozenset(f for f in self.FACTS if rng.random() < 0.6)
            reads = aps._client.Reads(facts, tuple(rng.choice([0, 1, 100, 8192]) for _ in range(rng.randrange(3))),
                                      tuple(rng.choice([0, 5, 300, 10 ** 6]) for _ in range(rng.randrange(3))),
                                      tuple(rng.choice([0, 7, 1024]) for _ in range(rng.randrange(3))))
            length = lambda: rng.choice([0, 1, 3, 100, 5000, 9000, -1, -50, 1 << 41])
            p = None if rng.random() < 0.2 else [length() for _ in range(rng.randrange(4))]
            s = None if rng.random() < 0.2 else [length() for _ in range(rng.randrange(4))]
            cap = rng.choice([0, 100, 131072, -5])
            threshold = rng.choice([0, 1, 8192, -3])
            attn = types.SimpleNamespace(chunked_prefix_cache_threshold=threshold)
            fb = types.SimpleNamespace(extend_prefix_lens_cpu=p, seq_lens_cpu=s, get_max_chunk_capacity=lambda: cap)
            sends = aps._sends({"ps", "ss", "mx", "cap"})
            got = aps.surrogate(reads, attn, fb, sends)
            if got is None:
                continue
            found += 1
            gp, gs, gc = got["prefix"], got["seq"], got["capacity"]
            what = "case %d: %r %r %r cap %d threshold %d -> %r" % (i, reads, p, s, cap, threshold, got)
            for v in (gp or []) + (gs or []):
                self.assertTrue(0 <= v <= 1 << 40, what)
            self.assertGreaterEqual(gc, 0, what)
            if gp is not None and gs is not None:
                self.assertEqual(len(gp), len(gs), what)
                self.assertTrue(all(a <= b for a, b in zip(gp, gs)), what)
            self.assertEqual(self.facts(reads, max(0, threshold), gp, gs, gc), self.facts(reads, threshold, p, s, cap), what)
        self.assertGreater(found, 5000)


class HandlerSourceTest(unittest.TestCase):
    """The handler code generated from a description's reads."""

    def reads(self, facts, *conditions, **kw):
        return aps._client.Reads(frozenset(facts), conditions=tuple(conditions), **kw)

    def cond(self, when, facts=(), **kw):
        return aps._client.ReadsCondition(when, self.reads(facts, **kw))

    def handler(self, reads, answers, fb, attn=None, backend=None, tbo=()):
        keys = []

        def cache_get(key):
            keys.append(key)
            return answers.get(key)

        ns = {}
        exec(compile(aps.handler_source(reads), "<test>", "exec"), ns)
        false = lambda *_: False
        h = ns["factory"](cache_get, lambda *a: "slow", {}.get, lambda m: m, false, false, false,
                          lambda: type("A", (), {"enable_deterministic_inference": False}),
                          lambda: backend, lambda b: bool(getattr(b, "use_mha", False)), tbo, false, false)
        return h(attn, fb), keys

    def test_a_condition_that_always_holds_keys_by_its_reads_alone(self):
        src = aps.handler_source(self.reads({"dsa_use_mha", "dsa_use_mha_set", "mode", "seq_sum_within_capacity"},
                                            self.cond("dsa_use_mha_set", {"dsa_use_mha"}), max_seq_len_at_most=(2048,)))
        for never in ("seq_lens_cpu", "extend_prefix_lens_cpu", "get_max_chunk_capacity", "forward_mode", "\n            if "):
            self.assertNotIn(never, src)
        self.assertIn("key = (not dsa_use_mha(backend),)", src)

    def test_conditions_tested_in_order_with_keys_of_their_own(self):
        import types
        reads = self.reads({"mode", "prefix_sum_zero", "two_batch_overlap", "piecewise_cuda_graph"},
                           self.cond("prefix_sum_zero", {"mode"}), self.cond("two_batch_overlap"),
                           prefix_sum_at_least=(1, 100))
        fb = types.SimpleNamespace(forward_mode="DECODE", extend_prefix_lens_cpu=[0, 0])
        got, keys = self.handler(reads, {(0, "DECODE"): "first"}, fb)
        self.assertEqual((got, keys), ("first", [(0, "DECODE")]))
        fb.extend_prefix_lens_cpu = [5]
        got, keys = self.handler(reads, {}, fb)
        self.assertEqual((got, keys[0][0], len(keys[0])), ("slow", 2, 7))  # the whole reads: 4 facts, 2 constants
        got, keys = self.handler(reads, {(1,): "second"}, fb, backend=(), tbo=tuple)  # two-batch overlap
        self.assertEqual((got, keys), ("second", [(1,)]))
        fb.extend_prefix_lens_cpu = None  # a sum of 0: the first condition comes first
        got, keys = self.handler(reads, {(0, "DECODE"): "first"}, fb, backend=(), tbo=tuple)
        self.assertEqual((got, keys), ("first", [(0, "DECODE")]))

    def test_conditions_this_client_cannot_use_are_left_out(self):
        whole = self.reads({"mode", "dense_dsa_device"})
        for c in (self.cond("dense_dsa_device"),  # a fact not sent: its value is not known here
                  self.cond("some_new_fact"),  # a fact this client does not know
                  self.cond("piecewise_cuda_graph", {"some_new_fact"})):  # reads it does not know
            self.assertEqual(aps.handler_source(self.reads(whole.facts, c)), aps.handler_source(whole), c)


class InstallTest(unittest.TestCase):
    """install() swaps the registry of a module others imported, and
    uninstall() gives it back."""

    def test_install_swaps_in_place_and_uninstall_restores(self):
        with serve.Server() as s:
            mod = standins.sglang_module(None)
            cls = mod.AttentionBackendRegistry
            holder = cls  # as deepseek_v2.py holds it after its import
            original = cls.__dict__["get_handler"]
            reg = aps.install(s.address, module=mod)
            try:
                _, attn, fb = standins.apply(standins.generate(__import__("random").Random(1)), mod)
                fb.forward_mode = standins.ForwardMode.DECODE
                self.assertIs(holder.get_handler("fa3")(attn, fb), mod.AttnForwardMethod.MLA)
                self.assertEqual(reg.stats()["rpcs"], 1)

                def mine(attn, forward_batch):
                    return mod.AttnForwardMethod.MHA_NPU

                holder.register("custom", mine)  # a registration after install
                self.assertIs(holder.get_handler("custom"), mine)
                self.assertIs(cls._handlers["custom"], mine)
            finally:
                aps.uninstall(mod)
            self.assertIs(cls.__dict__["get_handler"], original)
            self.assertIs(holder.get_handler("custom"), cls._handlers["custom"])
            self.assertIs(holder.get_handler("fa4")(attn, fb), mod.AttnForwardMethod.MHA_CHUNKED_KV)


def _fault_binary():
    """The fault plugin of internal/testplugins ($ATTNPLUG_FAULT_BIN, else
    built with go)."""
    env = os.environ.get("ATTNPLUG_FAULT_BIN")
    if env:
        return env
    out = os.path.join(tempfile.mkdtemp(prefix="ap-fault-"), "attnplug-backend-fault")
    subprocess.run(["go", "build", "-o", out, "./internal/testplugins/fault"], cwd=serve.ROOT, check=True)
    return out


class HotSwapTest(unittest.TestCase):
    def test_swap_changes_answers_without_restarting_python(self):
        rec = record_logs(self)
        tree = tempfile.mkdtemp(prefix="ap-tree-")
        self.addCleanup(shutil.rmtree, tree, True)
        host = serve.copy_tree(tree)
        fault = _fault_binary()
        # The fault binary, once swapped in, serves fa3 and fa4 with rules
        # that always answer MHA; the real plugins ignore the variable.
        s = serve.Server(host=host, env={"ATTNPLUG_FAULT": "name=fa3,names=fa3+fa4,version=9.0.0,rules=mha"}).start()
        self.addCleanup(s.cleanup)
        mod = standins.sglang_module(None)
        reg = aps.install(s.address, module=mod)
        self.addCleanup(aps.uninstall, mod)
        cls = mod.AttentionBackendRegistry
        _, attn, fb = standins.apply(standins.generate(__import__("random").Random(2)), mod)
        fb.forward_mode = standins.ForwardMode.DECODE
        mod._is_hip = False
        standins.STATE.update(piecewise=False, breakable=False)
        self.assertIs(cls.get_handler("fa3")(attn, fb), mod.AttnForwardMethod.MLA)
        held = cls.get_handler("fa3")  # a handler someone keeps
        gen = reg.stats()["generation"]
        rpcs = reg.stats()["rpcs"]
        self.assertIs(held(attn, fb), mod.AttnForwardMethod.MLA)
        self.assertEqual(reg.stats()["rpcs"], rpcs, "a warm call made an RPC")

        dst = os.path.join(tree, "plugins", "attnplug-backend-fa3")
        shutil.copy2(fault, dst + ".new")
        os.replace(dst + ".new", dst)
        s.signal(signal.SIGHUP)
        serve.wait_until(lambda: reg.stats()["generation"] > gen, what="the client to see the reload")
        # The server's log is read by a thread of its own: the client can see
        # the new generation before that thread has read the line.
        serve.wait_until(lambda: "swapped" in s.log(), what="the server to log the swap")
        self.assertIs(cls.get_handler("fa3")(attn, fb), mod.AttnForwardMethod.MHA)
        self.assertIs(held(attn, fb), mod.AttnForwardMethod.MHA, "a handler held across the swap")
        self.assertIs(cls.get_handler("fa4")(attn, fb), mod.AttnForwardMethod.MHA)
        # Names the swap did not touch keep their answers without an RPC.
        rpcs = reg.stats()["rpcs"]
        cls.get_handler("fa3")(attn, fb)
        self.assertEqual(reg.stats()["rpcs"], rpcs)
        self.assertEqual(rec.warnings("unreachable"), [])

    def test_admin_reload_through_the_client(self):
        with serve.Server() as s:
            reg = aps.AttentionBackendRegistry(s.address, runtime=aps.SglangRuntime())
            try:
                gen = reg.stats()["generation"]
                self.assertEqual(reg.client.reload(), [])
                serve.wait_until(lambda: reg.stats()["generation"] == gen + 1, what="the new generation")
            finally:
                reg.close()


class ServerKilledTest(unittest.TestCase):
    def test_kill_mid_stream_loses_no_call(self):
        rec = record_logs(self)
        s = serve.Server().start()
        self.addCleanup(s.cleanup)
        mod = standins.sglang_module(None)
        native, _ = aps.sglang_registrations(mod)  # sglang's own handlers, if the module registered any
        reg = aps.install(s.address, module=mod, timeout=1.0)
        self.addCleanup(aps.uninstall, mod)
        cls = mod.AttentionBackendRegistry
        reqs = standins.requests(3000, seed=7)
        results, errors = [], []
        killed = threading.Event()

        def stream():
            for i, r in enumerate(reqs):
                name, attn, fb = standins.apply(r, mod)
                try:
                    m = cls.get_handler(name)(attn, fb)
                except Exception as exc:  # the test fails on any
                    errors.append(exc)
                    continue
                results.append((i, killed.is_set(), m))
                if i == len(reqs) // 3:
                    s.kill()
                    killed.set()

        stream()
        self.assertEqual(errors, [])
        self.assertEqual(len(results), len(reqs))
        after = [(i, m) for i, k, m in results if k]
        self.assertTrue(after)
        for i, m in after:
            name, attn, fb = standins.apply(reqs[i], mod)
            self.assertIsInstance(m, mod.AttnForwardMethod)
            # Answered in process: sglang's own handler, else the triton rules.
            want = native[name](attn, fb).name if name in native else aps.triton_method(reg.runtime, attn, fb)
            self.assertEqual(m.name, want, "request %d after the kill" % i)
        self.assertEqual(len(rec.warnings("unreachable")), 1, [r.getMessage() for r in rec.records])
        self.assertGreater(reg.stats()["local_answers"], 0)

        # The server comes back on the same socket: answers come from it again.
        back = serve.Server(socket=s.socket).start()
        self.addCleanup(back.cleanup)
        serve.wait_until(lambda: reg.stats()["connected"], what="the client to reconnect")
        local = reg.stats()["local_answers"]
        name, attn, fb = standins.apply(reqs[0], mod)
        cls.get_handler(name)(attn, fb)
        self.assertEqual(reg.stats()["local_answers"], local)
        self.assertEqual(len(rec.warnings("unreachable")), 1)


class UnreachableTest(unittest.TestCase):
    def test_no_server_answers_by_triton_and_warns_once(self):
        rec = record_logs(self)
        d = tempfile.mkdtemp(prefix="ap-none-")
        self.addCleanup(shutil.rmtree, d, True)
        reg = aps.AttentionBackendRegistry("unix://" + os.path.join(d, "nobody.sock"), runtime=aps.SglangRuntime(),
                                           timeout=0.3)
        self.addCleanup(reg.close)
        mod = standins.sglang_module(None)
        for r in standins.requests(200, seed=5):
            name, attn, fb = standins.apply(r, mod)
            m = reg.get_handler(name)(attn, fb)
            self.assertEqual(m.name, aps.triton_method(reg.runtime, attn, fb))
        self.assertEqual(len(rec.warnings("unreachable")), 1)
        self.assertFalse(reg.stats()["connected"])
        self.assertEqual(reg.stats()["rpcs"], 0)


class LocalAnswersTest(unittest.TestCase):
    """Where the server gives no answer of a plugin's rules (it cannot be
    reached, or the name's plugin is missing there), sglang's own handler
    of the name answers: the reference's answer, not the triton rules'."""

    @classmethod
    def setUpClass(cls):
        cls.reference = standins.reference_path()

    def setUp(self):
        if self.reference is None:
            self.skipTest("needs sglang's handler file (shared/reference or $ATTNPLUG_REFERENCE)")

    def agree(self, address, seed, timeout=2.0):
        mod = standins.sglang_module(self.reference)
        own = mod.AttentionBackendRegistry.get_handler  # sglang's own, bound before install
        reg = aps.install(address, module=mod, timeout=timeout)
        self.addCleanup(aps.uninstall, mod)
        cls = mod.AttentionBackendRegistry
        differ = 0
        for r in standins.requests(400, seed=seed):
            name, attn, fb = standins.apply(r, mod)
            try:
                want = own(name)(attn, fb)
            except Exception:  # sglang's handler raises (the handler never does)
                cls.get_handler(name)(attn, fb)
                continue
            self.assertEqual(cls.get_handler(name)(attn, fb), want, r)
            differ += want.name != aps.triton_method(reg.runtime, attn, fb)
        self.assertGreater(differ, 0, "no request where the triton rules would have answered otherwise")
        return reg

    def test_an_unreachable_server(self):
        rec = record_logs(self)
        d = tempfile.mkdtemp(prefix="ap-none-")
        self.addCleanup(shutil.rmtree, d, True)
        reg = self.agree("unix://" + os.path.join(d, "nobody.sock"), seed=11, timeout=0.3)
        self.assertGreater(reg.stats()["local_answers"], 0)
        self.assertEqual(len(rec.warnings("unreachable")), 1)

    def test_plugins_missing_on_the_server(self):
        d = tempfile.mkdtemp(prefix="ap-empty-")
        self.addCleanup(shutil.rmtree, d, True)
        s = serve.Server(args=["--plugin-dir", d]).start()
        self.addCleanup(s.cleanup)
        self.agree(s.address, seed=12)


if __name__ == "__main__":
    unittest.main()
