"""attnplug.sglang_backend: sglang attention backends for DeepSeek whose
kernels are a plugin's, and their registration in sglang.

The backends: AttnplugMLABackend and AttnplugMLAMultiStepDraftBackend
(attnplug.sglang_mla: DeepSeek's MLA) and AttnplugDSABackend
(attnplug.sglang_dsa: DeepSeek-V3.2's sparse attention), exported here;
create_backend makes the one the model needs.

What runs where (docs/python.md has the table of every DeepSeek path):

- MLA decode and target verify, eager and in CUDA graphs of both
  protocols, over bf16 and fp8_e4m3 pools: the plugin's MLA plan for the
  batch shape, which holds for every step of the shape up to the longest
  request the pool and page table admit, so a decode loop asks the server
  once per batch shape and a captured step replays with no RPC and no host
  work (the page table, lengths and the plan's scheduler are built on the
  device from sglang's tensors, inside the graph);
- absorbed-MLA extend over the cache (an extend, a draft extend), of any
  number of query tokens a request: the plugin's MLA plan for the batch's
  query tokens;
- a draft model's DECODE steps (EAGLE's and MTP's chains of drafts), eager
  and in the draft's CUDA graphs: AttnplugMLAMultiStepDraftBackend, whose
  step i is an AttnplugMLABackend reading the drafts 0 to i; it is what
  sglang's DraftBackendFactory makes for the attnplug name
  (register_backend);
- DeepSeek-V3.2's sparse attention (a model with an indexer):
  AttnplugDSABackend (attnplug.sglang_dsa), which create_backend makes
  for such a model: the plugin's sparse MLA over the indexer's top-k;
- MHA prefill without a prefix, MHA_ONE_SHOT, the new tokens' part of
  MHA_CHUNKED_KV (with their LSE) and each of its prefix chunks (output
  and LSE of the chunk, which the model merges): the plugin's MHA plans,
  eager;
- everything else, and every batch without a plan (no server, no device
  code, a plugin that went away): the fallback, sglang's own backend of
  ``kernel_backend`` (or the one given), counted per path with the reason
  (stats()), or, strict (ATTNPLUG_STRICT=1, strict=True), refused with
  FallbackRefused.

Registration in sglang: register_backend() (the ``attnplug`` name, in the
attention registry and in DraftBackendFactory's maps), called
by the ``sglang.srt.plugins`` entry point (sglang_plugin), by
``python -m attnplug.launch`` and by attnplug.sglang.install(...,
attention_backend=True). torch is imported when a backend is made.
"""

import logging
import os

from attnplug import _sglang
from attnplug import sglang_dsa
from attnplug.sglang_dsa import AttnplugDSABackend, AttnplugDSAMultiStepDraftBackend
from attnplug.sglang_mla import (BACKEND_NAME, DEFAULT_KERNEL_BACKEND, ENV_FALLBACK_BACKEND, ENV_KERNEL_BACKEND,
                                 ENV_STRICT, PATHS, AttnplugMLABackend, AttnplugMLAMultiStepDraftBackend,
                                 FallbackRefused)

__all__ = [
    "AttnplugDSABackend",
    "AttnplugDSAMultiStepDraftBackend",
    "AttnplugMLABackend",
    "AttnplugMLAMultiStepDraftBackend",
    "BACKEND_NAME",
    "DEFAULT_KERNEL_BACKEND",
    "ENV_FALLBACK_BACKEND",
    "ENV_KERNEL_BACKEND",
    "ENV_STRICT",
    "FallbackRefused",
    "PATHS",
    "create_backend",
    "register_backend",
    "sglang_plugin",
]

log = logging.getLogger("attnplug.sglang_backend")


def create_backend(model_runner, *args, **kwargs):
    """The factory sglang's attention registry calls with its model
    runner: an AttnplugMLABackend (its kernel backend from
    $ATTNPLUG_KERNEL_BACKEND, else fa3), or, for a model with an indexer
    (DeepSeek sparse attention: index_topk), an AttnplugDSABackend (else
    dsa)."""
    if sglang_dsa.is_sparse_model(model_runner):
        return sglang_dsa.AttnplugDSABackend(model_runner, *args, **kwargs)
    return AttnplugMLABackend(model_runner, *args, **kwargs)


def _dispatch_handler(kernel_backend, registry_cls):
    """A DeepSeek dispatch handler for the attnplug name: the handler of
    the kernel backend's name at call time (attnplug's drop-in when
    installed, else sglang's own), so that the model chooses the forward
    methods that backend's rules choose."""

    def handle_attention_attnplug(attn, forward_batch):
        # A layer of DeepSeek sparse attention answers as sglang's DSA
        # backend (its use_mha: AttnplugDSABackend's).
        name = "dsa" if getattr(attn, "use_dsa", False) else kernel_backend
        return registry_cls.get_handler(name)(attn, forward_batch)

    return handle_attention_attnplug


def register_backend(name=BACKEND_NAME, kernel_backend=None):
    """Makes ``--attention-backend NAME`` (default attnplug) an sglang
    choice that builds an AttnplugMLABackend, through the mechanism the
    installed sglang has, and returns which ("attention_registry",
    "model_runner") or None where none is found (or sglang is absent):

    1. sglang since PR #10629 (2025-09): ``register_attention_backend`` of
       sglang.srt.layers.attention.attention_registry, and the name added
       to ``ATTENTION_BACKEND_CHOICES`` of sglang.srt.server_args
       (``add_attention_backend_choices`` where it exists);
    2. older sglang: ModelRunner._get_attention_backend_from_str is wrapped
       to build the backend for NAME.

    Where sglang keeps lists of the backends that run MLA models and the
    chunked prefix cache (MLA_ATTENTION_BACKENDS and
    CHUNKED_PREFIX_CACHE_SUPPORTED_ATTENTION_BACKENDS of model_runner or
    server_args, in the releases that check them), NAME joins the first,
    and the second where kernel_backend is in it (the plugin's prefix-chunk
    plans run the chunked prefix, the fallback where it has none). It also registers a DeepSeek dispatch handler for NAME
    in sglang's AttentionBackendRegistry, which answers as kernel_backend's
    rules, and gives sglang's DraftBackendFactory the name's draft backends
    (_wrap_draft_factory). Safe to call again; never raises."""
    kernel = kernel_backend or os.environ.get(ENV_KERNEL_BACKEND) or DEFAULT_KERNEL_BACKEND
    how = None
    try:
        from sglang.srt.layers.attention import attention_registry as ar
        if name not in ar.ATTENTION_BACKENDS:
            ar.register_attention_backend(name)(create_backend)
        how = "attention_registry"
    except ImportError:
        how = _wrap_model_runner(name)
    except Exception as exc:
        log.warning("attnplug: registering the %s attention backend failed (%s: %s)", name, type(exc).__name__, exc)
    try:
        from sglang.srt import server_args as sa
        choices = getattr(sa, "ATTENTION_BACKEND_CHOICES", None)
        if choices is not None and name not in choices:
            add = getattr(sa, "add_attention_backend_choices", None)
            if add is not None:
                add([name])
            else:
                choices.append(name)
    except Exception:
        pass
    _join_backend_lists(name, kernel)
    _wrap_draft_factory(name)
    try:
        mod = __import__(_sglang.HANDLER_MODULE, fromlist=["AttentionBackendRegistry"])
        reg = mod.AttentionBackendRegistry
        handlers = getattr(reg, "_handlers", {})
        if name not in handlers and (getattr(reg, "_attnplug_registry", None) is None
                                     or name not in reg._attnplug_registry._local):
            reg.register(name, _dispatch_handler(kernel, reg))
    except Exception:
        pass
    return how


def _join_backend_lists(name, kernel):
    lists = (("MLA_ATTENTION_BACKENDS", "add_mla_attention_backend", True),
             ("CHUNKED_PREFIX_CACHE_SUPPORTED_ATTENTION_BACKENDS", "add_chunked_prefix_cache_attention_backend", False))
    for modname in ("sglang.srt.model_executor.model_runner", "sglang.srt.server_args"):
        try:
            mod = __import__(modname, fromlist=["_"])
        except Exception:
            continue
        for list_name, adder, always in lists:
            names = getattr(mod, list_name, None)
            if not isinstance(names, list) or name in names or not (always or kernel in names):
                continue
            add = getattr(mod, adder, None)
            try:
                add(name) if add is not None else names.append(name)
            except Exception:
                pass


def _wrap_draft_factory(name):
    """Gives sglang's DraftBackendFactory (speculative/draft_utils.py) an
    entry for NAME in both its maps, so that an EAGLE or MTP draft of an
    attnplug target runs on the plugin: the draft's DECODE on an
    AttnplugMLAMultiStepDraftBackend (its fallback sglang's multi-step
    backend of the fallback's name), its DRAFT_EXTEND on an
    AttnplugMLABackend. A tree of drafts (topk > 1) gets sglang's own
    multi-step backend of the fallback's name, with one warning (strict:
    refused). The factory's maps are local to its methods: _create_backend,
    which every version has, is wrapped. Returns whether it was."""
    try:
        from sglang.srt.speculative import draft_utils
    except Exception:
        return False
    cls = getattr(draft_utils, "DraftBackendFactory", None)
    orig = getattr(cls, "_create_backend", None)
    if orig is None:
        return False
    names = getattr(orig, "_attnplug_names", None)
    if names is not None:
        names.add(name)
        return True
    names = {name}
    # Since 2026 a map's entries answer (stamp, backend); before, the backend.
    stamped = "stamp" in getattr(getattr(orig, "__code__", None), "co_varnames", ())

    def _create_backend(self, backend_name, backend_map, error_template, *args, **kwargs):
        m = dict(backend_map)
        decode = _is_decode_map(backend_map)
        for n in names:
            m.setdefault(n, lambda n=n: _draft_backend(self, backend_map, decode, n, stamped))
        return orig(self, backend_name, m, error_template, *args, **kwargs)

    _create_backend._attnplug_names = names
    cls._create_backend = _create_backend
    return True


def _is_decode_map(backend_map):
    """Whether a DraftBackendFactory map is create_decode_backend's (its
    entries are the factory's _create_*_decode_backend methods)."""
    return any(getattr(f, "__name__", "").endswith("_decode_backend") for f in backend_map.values())


def _draft_backend(factory, sglang_map, decode, name, stamped):
    runner = factory.draft_model_runner
    if not decode:
        backend = create_backend(runner)
        return (name, backend) if stamped else backend
    sparse = sglang_dsa.is_sparse_model(runner)
    kernel = os.environ.get(ENV_KERNEL_BACKEND) or (sglang_dsa.DSA_KERNEL_BACKEND if sparse else DEFAULT_KERNEL_BACKEND)
    fb_name = os.environ.get(ENV_FALLBACK_BACKEND) or (sglang_dsa.DSA_KERNEL_BACKEND if sparse else kernel)
    fallback = None
    make = sglang_map.get(fb_name)
    if make is not None:
        try:
            made = make()
            fallback = made[1] if stamped and isinstance(made, tuple) else made
        except Exception as exc:
            log.warning("attnplug: sglang's %s multi-step draft backend cannot be made here (%s: %s)", fb_name,
                        type(exc).__name__, exc)
    if int(factory.topk) != 1:
        why = ("attnplug: a tree of drafts (--speculative-eagle-topk %d) runs sglang's %s multi-step draft backend: "
               "the plugin's draft decode runs chains (topk 1)" % (factory.topk, fb_name))
        if os.environ.get(ENV_STRICT) == "1" or fallback is None:
            raise FallbackRefused("draft", why)
        log.warning(why)
        backend = fallback
    else:
        cls = sglang_dsa.AttnplugDSAMultiStepDraftBackend if sparse else AttnplugMLAMultiStepDraftBackend
        backend = cls(runner, factory.topk, factory.speculative_num_steps, fallback=fallback)
    return (name, backend) if stamped else backend


def _wrap_model_runner(name):
    try:
        from sglang.srt.model_executor import model_runner as mr
    except Exception:
        return None
    cls = mr.ModelRunner
    orig = cls.__dict__.get("_get_attention_backend_from_str")
    if orig is None:
        return None
    names = getattr(orig, "_attnplug_names", None)
    if names is not None:
        names.add(name)
        return "model_runner"
    names = {name}

    def _get_attention_backend_from_str(self, backend_str, *args, **kwargs):
        if backend_str in names:
            return create_backend(self)
        return orig(self, backend_str, *args, **kwargs)

    _get_attention_backend_from_str._attnplug_names = names
    cls._get_attention_backend_from_str = _get_attention_backend_from_str
    return "model_runner"


def sglang_plugin():
    """The ``sglang.srt.plugins`` entry point (sglang's plugin framework,
    since PR #21388, 2026-04: load_plugins() calls it in every process):
    registers the attnplug attention backend. Never raises."""
    try:
        register_backend()
    except Exception as exc:  # never into sglang's start
        log.warning("attnplug: the sglang plugin did not register its backend (%s: %s)", type(exc).__name__, exc)
