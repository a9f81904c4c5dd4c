"""Stand-ins for the parts of sglang that its DeepSeek attention dispatch
reads, and generated requests: for the tests and the benchmark, in a
process without sglang. ForwardMode is the one of standins.

sglang_module() loads sglang's own attention_backend_handler.py (the
reference file, when present) as the sglang module it is, its imports
satisfied by small stand-in modules whose state (CUDA-graph context, server
arguments, the attention backend, the ROCm flag) tests set per request.
The objects (ForwardMode, ForwardBatch, an attention layer) have the shapes
sglang gives them.
"""

import json
import os
import random
import sys
import types

from attnplug import _sglang
from attnplug_testing.standins import ForwardMode

#: The state the stand-in modules read.
STATE = {
    "piecewise": False,
    "breakable": False,
    "server_args": types.SimpleNamespace(enable_deterministic_inference=False),
    "backend": None,
}

REFERENCE_NAMES = (
    "ascend", "flashinfer", "fa3", "flashmla", "cutlass_mla", "fa4", "trtllm_mla",
    "tokenspeed_mla", "aiter", "dsa", "nsa", "triton", "intel_xpu",
)
#: Names a request may ask: the reference's and names that fall back.
NAMES = REFERENCE_NAMES + ("FA3", "torch_native", "no_such_backend", "Flashinfer")

class PredicateMode:
    """A forward mode that is no enum: only its predicates say what it is
    (as the fakes of sglang's own tests)."""

    def __init__(self, mode):
        self._m = mode

    def is_extend(self, include_draft_extend_v2=False):
        return self._m.is_extend(include_draft_extend_v2)

    def is_extend_without_speculative(self):
        return self._m.is_extend_without_speculative()

    def is_decode(self):
        return self._m.is_decode()

    def is_target_verify(self):
        return self._m.is_target_verify()

    def is_draft_extend_v2(self):
        return self._m.is_draft_extend_v2()


class ForwardBatch:
    """What sglang's handlers read of a ForwardBatch."""

    def __init__(self, forward_mode, extend_prefix_lens_cpu, seq_lens_cpu, max_chunk_capacity, mla_prefill_cp=False):
        self.forward_mode = forward_mode
        self.extend_prefix_lens_cpu = extend_prefix_lens_cpu
        self.seq_lens_cpu = seq_lens_cpu
        self.mla_prefill_cp = mla_prefill_cp
        self._cap = max_chunk_capacity

    def get_max_chunk_capacity(self):
        return self._cap


class Attn:
    """A DeepSeek attention layer: the flags the handlers read."""

    def __init__(self, threshold=8192, disable_chunked_prefix_cache=False, flashinfer_mla_disable_ragged=False,
                 rocm_fused_decode_mla=False, use_dsa=False, fused_qkv_a_proj_with_mqa=False, intel_amx=False):
        self.chunked_prefix_cache_threshold = threshold
        self.disable_chunked_prefix_cache = disable_chunked_prefix_cache
        self.flashinfer_mla_disable_ragged = flashinfer_mla_disable_ragged
        self.rocm_fused_decode_mla = rocm_fused_decode_mla
        self.use_dsa = use_dsa
        if fused_qkv_a_proj_with_mqa:
            self.fused_qkv_a_proj_with_mqa = object()
        self.use_intel_amx_backend = intel_amx


class TboAttnBackend:
    def __init__(self, primary):
        self.primary = primary


def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    parts = name.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        sys.modules.setdefault(parent, types.ModuleType(parent))
    return mod


def reference_path():
    """sglang's attention_backend_handler.py: $ATTNPLUG_REFERENCE, else
    shared/reference beside the repository this folder is in; None when
    absent."""
    env = os.environ.get("ATTNPLUG_REFERENCE")
    if env:
        return env if os.path.exists(env) else None
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    p = os.path.join(os.path.dirname(root), "shared", "reference", "attention_backend_handler.py.txt")
    return p if os.path.exists(p) else None


def sglang_module(reference=None):
    """Loads sglang's handler module under its sglang name, with stand-in
    imports: the reference file when given (sglang's own code), else a
    module holding only sglang's registry class, for install tests. Returns
    the module."""
    _module("sglang.srt.layers.attention.tbo_backend", TboAttnBackend=TboAttnBackend)
    _module("sglang.srt.layers.utils.cp_utils", mla_use_prefill_cp=lambda fb: fb.mla_prefill_cp)
    _module("sglang.srt.model_executor.forward_context", get_attn_backend=lambda: STATE["backend"])
    _module("sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph",
            is_in_breakable_cuda_graph=lambda: STATE["breakable"])
    _module("sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph",
            is_in_tc_piecewise_cuda_graph=lambda: STATE["piecewise"])
    _module("sglang.srt.models.deepseek_common.attention_forward_methods.forward_methods",
            AttnForwardMethod=_sglang.AttnForwardMethodMirror)
    _module("sglang.srt.models.deepseek_common.utils", _is_hip=False)
    _module("sglang.srt.runtime_context", get_server_args=lambda: STATE["server_args"])
    _module("sglang.srt.utils", use_intel_amx_backend=lambda layer: getattr(layer, "use_intel_amx_backend", False))
    mod = types.ModuleType(_sglang.HANDLER_MODULE)
    if reference is not None:
        with open(reference) as f:
            lines = f.read().split("\n")
        # The stored copy starts with the file's path in the sglang tree.
        if lines and lines[0].endswith(".py") and " " not in lines[0]:
            lines[0] = ""
        exec(compile("\n".join(lines), reference, "exec"), mod.__dict__)
    else:
        exec(compile(_REGISTRY_ONLY, "<sglang registry stand-in>", "exec"), mod.__dict__)
    sys.modules[_sglang.HANDLER_MODULE] = mod
    return mod


# sglang's registry class and one handler, for tests that need no reference.
_REGISTRY_ONLY = """
from sglang.srt.models.deepseek_common.attention_forward_methods.forward_methods import AttnForwardMethod
from sglang.srt.models.deepseek_common.utils import _is_hip
from sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph import is_in_tc_piecewise_cuda_graph
from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import is_in_breakable_cuda_graph
from sglang.srt.model_executor.forward_context import get_attn_backend
from sglang.srt.layers.attention.tbo_backend import TboAttnBackend
from sglang.srt.layers.utils.cp_utils import mla_use_prefill_cp
from sglang.srt.runtime_context import get_server_args
from sglang.srt.utils import use_intel_amx_backend


class AttentionBackendRegistry:
    _handlers = {}

    @classmethod
    def register(cls, backend_name, handler_func):
        cls._handlers[backend_name] = handler_func

    @classmethod
    def get_handler(cls, backend_name):
        return cls._handlers.get(backend_name, cls._handlers.get("triton"))


def handle_attention_fa4(attn, forward_batch):
    return AttnForwardMethod.MHA_CHUNKED_KV


AttentionBackendRegistry.register("fa4", handle_attention_fa4)
"""


def generate(rng):
    """A random request of the dispatch format (a dict) that reaches the
    branches and the equality edges of the rules: prefix sums on, next to,
    0 and far from the threshold, sequence sums on the chunk capacity."""
    req = {"backend": rng.choice(NAMES), "forward_mode": rng.choice([m.name for m in ForwardMode])}
    threshold = rng.choice([8192, 0, 1, 4096, 16384, rng.randrange(20000)])
    n = 1 + rng.randrange(4)
    prefix = [0] * n
    kind = rng.randrange(5)
    if kind == 1:
        target = max(0, threshold + rng.randrange(3) - 1)
        cut = sorted(rng.randrange(target + 1) for _ in range(n - 1))
        bounds = [0] + cut + [target]
        prefix = [bounds[i + 1] - bounds[i] for i in range(n)]
    elif kind >= 2:
        prefix = [rng.randrange(12000) for _ in range(n)]
    seq = [p + rng.randrange(5000) for p in prefix]
    cap = rng.choice([131072, 0, 4096, rng.randrange(40000)])
    if rng.randrange(4) == 0:
        cap = max(0, sum(seq) + rng.randrange(3) - 1)
    if rng.randrange(8) != 0:
        req["extend_prefix_lens"] = prefix
    if rng.randrange(8) != 0:
        req["seq_lens"] = seq
    req["max_chunk_capacity"] = cap
    req["mla_prefill_cp"] = rng.randrange(6) == 0
    req["layer"] = {
        "chunked_prefix_cache_threshold": threshold,
        "disable_chunked_prefix_cache": rng.randrange(3) == 0,
        "flashinfer_mla_disable_ragged": rng.randrange(3) == 0,
        "rocm_fused_decode_mla": rng.randrange(2) == 0,
        "use_dsa": rng.randrange(3) == 0,
        "fused_qkv_a_proj_with_mqa": rng.randrange(2) == 0,
        "intel_amx": rng.randrange(3) == 0,
    }
    req["runtime"] = {
        "platform": "hip" if rng.randrange(3) == 0 else "cuda",
        "piecewise_cuda_graph": rng.randrange(6) == 0,
        "breakable_cuda_graph": rng.randrange(6) == 0,
        "deterministic_inference": rng.randrange(5) == 0,
        "dsa_use_mha": rng.randrange(2) == 0,
        "two_batch_overlap": rng.randrange(4) == 0,
    }
    return req


def apply(req, module, predicate_mode=False):
    """Sets the stand-ins' state from req and returns (name, attn,
    forward_batch) for it."""
    rt = req["runtime"]
    module._is_hip = rt["platform"] == "hip"
    STATE["piecewise"] = rt["piecewise_cuda_graph"]
    STATE["breakable"] = rt["breakable_cuda_graph"]
    STATE["server_args"] = types.SimpleNamespace(enable_deterministic_inference=rt["deterministic_inference"])
    backend = types.SimpleNamespace(use_mha=rt["dsa_use_mha"])
    STATE["backend"] = TboAttnBackend(backend) if rt["two_batch_overlap"] else backend
    lay = req["layer"]
    attn = Attn(lay["chunked_prefix_cache_threshold"], lay["disable_chunked_prefix_cache"],
                lay["flashinfer_mla_disable_ragged"], lay["rocm_fused_decode_mla"], lay["use_dsa"],
                lay["fused_qkv_a_proj_with_mqa"], lay["intel_amx"])
    mode = ForwardMode[req["forward_mode"]]
    fb = ForwardBatch(PredicateMode(mode) if predicate_mode else mode, req.get("extend_prefix_lens"),
                      req.get("seq_lens"), req["max_chunk_capacity"], req["mla_prefill_cp"])
    return req["backend"], attn, fb


def sglang_answer(module, name, attn, fb):
    """The method name sglang's own registry gives. The triton rules raise
    on an extend batch without prefix lengths: attnplug counts them as a
    sum of 0, so they are asked again with an empty list."""
    h = module.AttentionBackendRegistry._handlers
    handler = h.get(name, h.get("triton"))
    try:
        return handler(attn, fb).name
    except TypeError:
        if fb.extend_prefix_lens_cpu is not None:
            raise
        return handler(attn, ForwardBatch(fb.forward_mode, [], fb.seq_lens_cpu, fb._cap, fb.mla_prefill_cp)).name


def requests(n, seed):
    rng = random.Random(seed)
    return [generate(rng) for _ in range(n)]


def jsonl(reqs):
    return "".join(json.dumps(r) + "\n" for r in reqs)
