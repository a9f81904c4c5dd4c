"""Evaluate sglang's DeepSeek attention dispatch, unmodified, on attnplug
dispatch requests.

Usage: python3 oracle.py REFERENCE_FILE < requests.jsonl > answers.jsonl

REFERENCE_FILE is sglang's attention_backend_handler.py. Its imports are
satisfied by small stand-ins for the sglang modules it uses, whose state
(server arguments, CUDA-graph context, the ROCm flag, the DSA backend's
use_mha) is set from each request before the reference's registry is asked.
Each answer line is {"method": ..., "handler": ...}, or {"error": ...} when
the request cannot be evaluated. An extend batch without prefix lengths,
for which the triton rules raise, is evaluated again with an empty list:
attnplug documents a missing list as a sum of 0.
"""

import enum
import json
import sys
import types

STATE = {}


def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    parts = name.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if parent not in sys.modules:
            sys.modules[parent] = types.ModuleType(parent)
    return mod


class TboAttnBackend:
    def __init__(self, primary):
        self.primary = primary


class AttnForwardMethod(enum.IntEnum):
    MHA = enum.auto()
    MLA = enum.auto()
    MHA_CHUNKED_KV = enum.auto()
    MHA_ONE_SHOT = enum.auto()
    MLA_FUSED_ROPE_ROCM = enum.auto()
    MLA_FUSED_ROPE_CPU = enum.auto()
    MHA_NPU = enum.auto()
    MLA_NPU = enum.auto()
    DSA_NPU = enum.auto()


def _install_stubs():
    _module("sglang.srt.layers.attention.tbo_backend", TboAttnBackend=TboAttnBackend)
    _module("sglang.srt.layers.utils.cp_utils",
            mla_use_prefill_cp=lambda fb: fb.mla_prefill_cp)
    _module("sglang.srt.model_executor.forward_context",
            get_attn_backend=lambda: STATE["backend"])
    _module("sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph",
            is_in_breakable_cuda_graph=lambda: STATE["breakable"])
    _module("sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph",
            is_in_tc_piecewise_cuda_graph=lambda: STATE["piecewise"])
    _module("sglang.srt.models.deepseek_common.attention_forward_methods.forward_methods",
            AttnForwardMethod=AttnForwardMethod)
    _module("sglang.srt.models.deepseek_common.utils", _is_hip=False)
    _module("sglang.srt.runtime_context", get_server_args=lambda: STATE["server_args"])
    _module("sglang.srt.utils",
            use_intel_amx_backend=lambda layer: getattr(layer, "use_intel_amx_backend", False))


EXTEND = {"EXTEND", "MIXED", "TARGET_VERIFY", "SPLIT_PREFILL", "DLLM_EXTEND"}
MODES = EXTEND | {"DECODE", "IDLE", "DRAFT_EXTEND_V2", "PREBUILT"}


class ForwardMode:
    def __init__(self, name):
        self.name = name

    def is_extend(self, include_draft_extend_v2=False):
        return self.name in EXTEND or (include_draft_extend_v2 and self.name == "DRAFT_EXTEND_V2")

    def is_extend_without_speculative(self):
        return self.is_extend() and self.name != "TARGET_VERIFY"

    def is_decode(self):
        return self.name == "DECODE"

    def is_target_verify(self):
        return self.name == "TARGET_VERIFY"

    def is_draft_extend_v2(self):
        return self.name == "DRAFT_EXTEND_V2"


class ForwardBatch:
    def __init__(self, req, prefix):
        self.forward_mode = ForwardMode(req["forward_mode"])
        self.extend_prefix_lens_cpu = prefix
        self.seq_lens_cpu = req.get("seq_lens")
        self.mla_prefill_cp = bool(req.get("mla_prefill_cp") or False)
        self._cap = req.get("max_chunk_capacity") or 0

    def get_max_chunk_capacity(self):
        return self._cap


class Attn:
    pass


def _attn(layer):
    attn = Attn()
    threshold = layer.get("chunked_prefix_cache_threshold")
    attn.chunked_prefix_cache_threshold = 8192 if threshold is None else threshold
    attn.disable_chunked_prefix_cache = bool(layer.get("disable_chunked_prefix_cache"))
    attn.flashinfer_mla_disable_ragged = bool(layer.get("flashinfer_mla_disable_ragged"))
    attn.rocm_fused_decode_mla = bool(layer.get("rocm_fused_decode_mla"))
    attn.use_dsa = bool(layer.get("use_dsa"))
    if layer.get("fused_qkv_a_proj_with_mqa"):
        attn.fused_qkv_a_proj_with_mqa = object()
    attn.use_intel_amx_backend = bool(layer.get("intel_amx"))
    return attn


def evaluate(ref, req, default_platform):
    layer = req.get("layer") or {}
    runtime = req.get("runtime") or {}
    if req.get("forward_mode") not in MODES:
        raise ValueError("unknown mode")
    platform = runtime.get("platform") or default_platform
    ref._is_hip = platform == "hip"
    STATE["piecewise"] = bool(runtime.get("piecewise_cuda_graph"))
    STATE["breakable"] = bool(runtime.get("breakable_cuda_graph"))
    STATE["server_args"] = types.SimpleNamespace(
        enable_deterministic_inference=bool(runtime.get("deterministic_inference")))
    backend = types.SimpleNamespace(use_mha=bool(runtime.get("dsa_use_mha")))
    if runtime.get("two_batch_overlap"):
        backend = TboAttnBackend(backend)
    STATE["backend"] = backend
    name = req["backend"]
    handler = ref.AttentionBackendRegistry.get_handler(name)
    registered = name in ref.AttentionBackendRegistry._handlers
    attn = _attn(layer)
    try:
        method = handler(attn, ForwardBatch(req, req.get("extend_prefix_lens")))
    except TypeError:
        if req.get("extend_prefix_lens") is not None:
            raise
        method = handler(attn, ForwardBatch(req, []))
    return {"method": method.name, "handler": name if registered else "triton"}


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: oracle.py REFERENCE_FILE [DEFAULT_PLATFORM] < requests.jsonl")
    default_platform = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    _install_stubs()
    ref = types.ModuleType("attention_backend_handler")
    with open(sys.argv[1]) as f:
        lines = f.read().split("\n")
    # The stored copy starts with the file's path in the sglang tree: blank
    # it, keeping the line numbers of tracebacks.
    if lines and lines[0].endswith(".py") and " " not in lines[0]:
        lines[0] = ""
    source = "\n".join(lines)
    exec(compile(source, sys.argv[1], "exec"), ref.__dict__)
    out = sys.stdout
    for line in sys.stdin:
        try:
            answer = evaluate(ref, json.loads(line), default_platform)
        except Exception as exc:  # the reference has no answer
            answer = {"error": "%s: %s" % (type(exc).__name__, exc)}
        out.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
