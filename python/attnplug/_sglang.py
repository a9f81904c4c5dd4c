"""What attnplug knows of sglang's code, once: the modules it reads, the
names of sglang's enums it mirrors for a process without sglang, and the
sglang commits the backend contract follows. attnplug.sglang (the dispatch
handlers) and attnplug.sglang_backend (the attention backend) both read
it; neither imports the other's internals."""

import enum
import importlib

from attnplug.client import FORWARD_MODES, METHODS

#: The sglang module that holds AttentionBackendRegistry and the handlers.
HANDLER_MODULE = "sglang.srt.models.deepseek_common.attention_backend_handler"
#: The sglang module that defines AttnForwardMethod.
METHODS_MODULE = "sglang.srt.models.deepseek_common.attention_forward_methods.forward_methods"
#: The sglang module of the attention backends' base class.
BACKEND_MODULE = "sglang.srt.layers.attention.base_attn_backend"

#: sglang's AttnForwardMethod, for a process without sglang: the members of
#: the wire's METHODS, in sglang's order.
AttnForwardMethodMirror = enum.IntEnum("AttnForwardMethod", list(METHODS))

#: sglang's ForwardMode member names, in sglang's order (the wire's).
FORWARD_MODE_NAMES = FORWARD_MODES

#: What the attention backend's contract follows, file by file of sglang.
SGLANG_FOLLOWED = {
    "layers/attention/base_attn_backend.py": "main (2026): the 3-method metadata contract (PR #26735), "
                                             "needs_cpu_seq_lens, shared_read_ends/SharedReadEnds, "
                                             "use_captured_forward_metadata_for_breakable_cuda_graph, "
                                             "extend_dummy_seqs_capped_by_req_pool, "
                                             "supports_full_cuda_graph_chunked_prefix; and "
                                             "009db01a7c0d5460611d543516401eb497641918 (the legacy capture/replay pair)",
    "mem_cache/kv_index_translator.py": "main (2026): KVIndexTranslator.bind_and_verify_backends sets "
                                        "backend.kv_index_translator at boot; is_translating under "
                                        "--enable-unified-memory",
    "mem_cache/memory_pool.py MLATokenToKVPool": "main: kv_buffer [size + page_size, 1, 576] per layer, stored "
                                                 "as uint8 and viewed as the fp8 dtype when --kv-cache-dtype "
                                                 "fp8_e4m3 (set_mla_kv_buffer casts, no scale)",
    "layers/attention/attention_registry.py": "43681aaa768047065d50fb746c884077a44ed505",
    "srt/plugins/__init__.py": "32c764af5f16beac1afaf71d2d6fcf39a064f304 (entry point group sglang.srt.plugins)",
    "speculative/draft_utils.py": "00ac7105db02776e90962fc6bb311d20dffe87ae (DraftBackendFactory: _create_backend and "
                                  "its maps, entries answering (stamp, backend); older releases' the backend)",
}


def sglang_methods():
    """sglang's AttnForwardMethod when sglang is importable, else the mirror
    with the same members."""
    try:
        return importlib.import_module(METHODS_MODULE).AttnForwardMethod
    except Exception:  # sglang not installed, or not importable here
        return AttnForwardMethodMirror


def backend_base():
    """sglang's AttentionBackend, or object where sglang is not importable."""
    try:
        return importlib.import_module(BACKEND_MODULE).AttentionBackend
    except Exception:
        return object


def shared_read_ends():
    """sglang's SharedReadEnds, or None in a release without it."""
    try:
        return importlib.import_module(BACKEND_MODULE).SharedReadEnds
    except Exception:
        return None
