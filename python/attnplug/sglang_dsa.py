"""attnplug.sglang_dsa: DeepSeek-V3.2's sparse attention (DSA) in sglang on
a plugin's kernels.

A model with an indexer (``index_topk`` in its config: DeepSeek-V3.2,
GLM-5) attends, on every MLA layer, to the top-k keys its indexer picked
for each query token. AttnplugDSABackend is what ``--attention-backend
attnplug`` makes for such a model (create_backend): an AttnplugMLABackend
whose MLA layers run the plugin's sparse MLA plan (the dsa plugin's
``flash_mla_sparse_fwd``: each query token over its row of
``topk_indices``, over the bf16 latent pool or DeepSeek-V3.2's 656-byte FP8
rows), and whose short prefills (``use_mha``) run its MHA_ONE_SHOT plan.

The indexer is sglang's (its projections, its FP8 key cache and its
DeepGEMM logits kernels are no attention kernel), and it reads the
metadata of sglang's own DSA backend (``get_indexer_metadata``): that
backend, the fallback, gets the metadata calls of every batch, eager and in
both CUDA-graph protocols, and decides ``use_mha`` (set_dsa_prefill_impl),
which sglang's dispatch (handle_attention_dsa) reads of this backend; its
``forward_metadata`` is this backend's (the model reads
``page_table_1_flattened`` of it for an MHA prefill over an FP8 cache).
Without it (sglang's DSA backend could not be made) the indexer would be
off, and no sparse layer can run: every layer is refused.

The top-k reaches forward_decode and forward_extend as ``topk_indices``
[tokens, top-k] int32, -1 past each row's keys, in the index space the
indexer's metadata chose (sglang's dsa_backend.py at
0034a3803b33f64633574e5ee2a766e76ecc9b10): the KV pool's slots (fused
top-k, the default); rows of the batch's ragged keys (an FP8 cache's
prefill with flashmla_sparse: ``TopkTransformMethod.RAGGED``); or, with
the fused top-k off, positions in the request. The plugin's kernel reads
slots: the others are translated on the device, as sglang's backend
translates them (``_slots``). The plan of a step is one of its query tokens
alone (each attends to its own keys), so a graph step replays with no host
work here beyond sglang's own metadata.
"""

import os

from attnplug import _sglang
from attnplug.sglang_mla import (ENV_FALLBACK_BACKEND, ENV_KERNEL_BACKEND, AttnplugMLABackend,
                                 AttnplugMLAMultiStepDraftBackend, _Forward, _LONE_DRAFT, _ints, _mode_name,
                                 _query_tokens)

__all__ = ["AttnplugDSABackend", "AttnplugDSAMultiStepDraftBackend", "DSA_KERNEL_BACKEND", "is_sparse_model"]

#: The backend whose plugin runs a sparse model's kernels by default (the
#: one sglang serves DeepSeek sparse attention under).
DSA_KERNEL_BACKEND = "dsa"

#: sglang's variables that turn its fused top-k off (main's name, then the
#: NSA-era one): the indexer's top-k is then positions in the request.
_FUSE_TOPK_ENV = ("SGLANG_DSA_FUSE_TOPK", "SGLANG_NSA_FUSE_TOPK")

_NO_TOPK = ("no topk_indices from the indexer (sglang's DSA backend, whose metadata the indexer reads, did not "
            "give it any)")


def is_sparse_model(model_runner):
    """Whether model_runner's model attends through an indexer's top-k
    (its config's index_topk)."""
    return bool(int(getattr(model_runner.model_config, "index_topk", 0) or 0))


def _fused_from_env():
    for name in _FUSE_TOPK_ENV:
        v = os.environ.get(name)
        if v is not None:
            return v.strip().lower() not in ("0", "false", "no", "off")
    return True


class AttnplugDSABackend(AttnplugMLABackend):
    """An sglang attention backend for DeepSeek sparse attention whose MLA
    layers run the sparse MLA kernel of the plugin serving kernel_backend
    (default $ATTNPLUG_KERNEL_BACKEND, else dsa). The arguments are
    AttnplugMLABackend's; the fallback defaults to sglang's own backend of
    $ATTNPLUG_FALLBACK_BACKEND, else dsa, and must be a DSA backend: its
    metadata is the indexer's.

    Per path of stats(): decode, verify and extend (and a draft extend)
    count sparse MLA layers, prefill the MHA layers of a short prefill
    (use_mha); sparse_layers counts every sparse layer the plugin ran."""

    _sparse = True

    def __init__(self, model_runner, skip_prefill=False, *, kernel_backend=None, **kwargs):
        kernel_backend = kernel_backend or os.environ.get(ENV_KERNEL_BACKEND) or DSA_KERNEL_BACKEND
        self._index_meta = None
        super().__init__(model_runner, skip_prefill, kernel_backend=kernel_backend, **kwargs)
        self._extra["sparse_layers"] = 0

    def _make_fallback(self):
        name = os.environ.get(ENV_FALLBACK_BACKEND) or DSA_KERNEL_BACKEND
        try:
            from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
            make = ATTENTION_BACKENDS[name]
        except Exception:
            return None
        try:
            return make(self.model_runner)
        except Exception as exc:
            self._warn(("fallback",), "attnplug: sglang's %s backend cannot be made here (%s: %s): its metadata is "
                       "the indexer's, so no sparse layer can run", name, type(exc).__name__, exc)
            return None

    # ------------------------------------------------------------ what sglang reads

    @property
    def use_mha(self):
        """sglang's DSA backend's choice for the batch (set_dsa_prefill_impl:
        a short prefill runs MHA_ONE_SHOT), which handle_attention_dsa
        reads."""
        return bool(getattr(self.fallback, "use_mha", False))

    @property
    def forward_metadata(self):
        """sglang's DSA backend's metadata of the batch (DSAMetadata), which
        the model reads of the backend."""
        return getattr(self.fallback, "forward_metadata", None)

    @forward_metadata.setter
    def forward_metadata(self, value):
        pass  # the batch's metadata is the DSA backend's

    def get_indexer_metadata(self, layer_id, forward_batch):
        """What sglang's indexer reads: its DSA backend's metadata (None
        without one, which turns the indexer off)."""
        if self.fallback is None:
            return None
        meta = self.fallback.get_indexer_metadata(layer_id, forward_batch)
        self._index_meta = meta
        return meta

    def get_cuda_graph_seq_len_fill_value(self):
        fill = getattr(self.fallback, "get_cuda_graph_seq_len_fill_value", None)
        return fill() if fill is not None else 1

    def shared_read_ends(self, fm):
        """Where the reads of the scheduler's shared tensors end: sglang's
        DSA backend's answer (its metadata, which the indexer reads, is
        made from them), else UNKNOWN, sglang's conservative default; this
        backend's own reads end no later (it copies none)."""
        ask = getattr(self.fallback, "shared_read_ends", None)
        if ask is not None:
            return ask(fm)
        ends = _sglang.shared_read_ends()
        return None if ends is None else ends.UNKNOWN

    # ------------------------------------------------------------ metadata

    def _why_not(self):
        why = super()._why_not()
        if why is None and self.fallback is None:
            why = "no DSA backend of sglang's (the indexer's metadata is its)"
        if why is None and getattr(self.fallback, "hisparse_coordinator", None) is not None:
            why = "HiSparse (--enable-hisparse) keeps the selected keys' pages on the host"
        return why

    def init_forward_metadata(self, forward_batch):
        self._sparse_step(forward_batch, eager=True, in_capture=False)

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        self._sparse_step(forward_batch, eager=False, in_capture=in_capture)

    def init_forward_metadata_in_graph(self, forward_batch):
        """The DSA backend's in-graph preparation; the sparse plan has none
        (its schedule is the plan's)."""
        hook = getattr(self.fallback, "init_forward_metadata_in_graph", None)
        if hook is not None and self._fwd.fallback == "graph":
            hook(forward_batch)

    def _out_graph(self, fb, in_capture, eager):
        # A draft step's preparation, as its multi-step container calls it.
        self._sparse_step(fb, eager, in_capture)

    def _dsa_metadata(self, fb, eager, in_capture):
        """sglang's DSA backend's metadata of the batch: the indexer's, and
        its use_mha (a draft step's: its container's call, made first)."""
        fallback = self.fallback
        if self._draft is not None:
            return "container"
        if fallback is None:
            return None
        if eager:
            fallback.init_forward_metadata(fb)
            return "eager"
        fallback.init_forward_metadata_out_graph(fb, in_capture=in_capture)
        return "graph"

    def _sparse_step(self, fb, eager, in_capture):
        made = self._dsa_metadata(fb, eager, in_capture)
        mode = fb.forward_mode
        bs = int(fb.batch_size)
        if mode.is_idle():
            f = _Forward("decode", "idle", bs)
        elif self._lone_draft(mode, getattr(fb, "spec_info", None)):
            f = _Forward("draft", "fallback", bs, why=_LONE_DRAFT)
        elif mode.is_decode() or mode.is_target_verify():
            q = _query_tokens(fb, bs)
            f = self._graph_paths.get((bs, q)) if not eager and not in_capture else None
            if f is None:
                f = self._plan_sparse(self._decode_path(mode), mode, bs, {"size": bs, "graph": True, "query_tokens": q})
                f.q = q
                if in_capture:
                    self._graph_paths[(bs, q)] = f
                    if f.kind == "fallback":
                        self._refused_at_capture(f)
        elif self.use_mha:  # MHA layers: their plan at the layer (_run_mha)
            f = _Forward("prefill", "mha", bs, why="an MLA layer in a batch sglang's DSA backend gave to MHA (use_mha)")
        else:
            path = "draft" if mode.is_draft_extend_v2() else "extend"
            new = _ints(getattr(fb, "extend_seq_lens_cpu", None))
            if new is None or len(new) != bs:
                f = _Forward(path, "fallback", bs, why="no extend_seq_lens_cpu of the batch's %d requests" % bs)
            else:
                f = self._plan_sparse(path, mode, bs, {"size": bs, "graph": True, "q_lens": new})
        f.fallback = made
        self._fwd = f

    def _plan_sparse(self, path, mode, bs, batch):
        prepared, why = self._step(path, _mode_name(mode), "MLA", batch)
        f = _Forward(path, "plugin" if prepared is not None else "fallback", bs, why=why)
        f.prepared = prepared
        if prepared is not None:
            self._extra["steps_prepared"] += 1
        return f

    def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices, seq_lens, encoder_lens,
                                                 forward_mode, spec_info, *args, **kwargs):
        """Capture of a graph step (sglang before PR #26735): the DSA
        backend's capture (a draft step's: its container's), and the plan
        of the batch's query tokens."""
        if self.fallback is not None and self._draft is None:
            self.fallback.init_forward_metadata_capture_cuda_graph(bs, num_tokens, req_pool_indices, seq_lens,
                                                                   encoder_lens, forward_mode, spec_info, *args,
                                                                   **kwargs)
        bs = int(bs)
        q = max(1, int(num_tokens) // max(1, bs))
        if self._lone_draft(forward_mode, spec_info):
            f = _Forward("draft", "fallback", bs, q, why=_LONE_DRAFT)
        else:
            f = self._plan_sparse(self._decode_path(forward_mode), forward_mode, bs,
                                  {"size": bs, "graph": True, "query_tokens": q})
            f.q = q
        f.fallback = "legacy" if self._draft is None else "container"
        self._graph_paths[(bs, q)] = self._fwd = f
        if f.kind == "fallback":
            self._refused_at_capture(f)

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens,
                                                forward_mode, spec_info, seq_lens_cpu=None, *args, **kwargs):
        """Replay of a graph step (sglang before PR #26735): the DSA
        backend's replay (the indexer's metadata; a draft step's: its
        container's); the captured plan."""
        if self.fallback is not None and self._draft is None:
            self.fallback.init_forward_metadata_replay_cuda_graph(bs, req_pool_indices, seq_lens, seq_lens_sum,
                                                                  encoder_lens, forward_mode, spec_info, seq_lens_cpu,
                                                                  *args, **kwargs)
        bs = int(bs)
        q = self._replay_q(bs, forward_mode, spec_info)
        f = self._graph_paths.get((bs, q))
        if f is None:
            f = _Forward(self._decode_path(forward_mode), "fallback", bs, q, why="a batch size no graph was captured for")
            f.fallback = "legacy" if self._draft is None else "container"
        self._fwd = f

    def on_after_cuda_graph_warmup(self):
        hook = getattr(self.fallback, "on_after_cuda_graph_warmup", None)
        if hook is not None:
            hook()

    # ------------------------------------------------------------ forward
    #
    # forward_decode and forward_extend are AttnplugMLABackend's: the
    # indexer's topk_indices come among their keyword arguments, and an MLA
    # layer runs the sparse plan (_run_mla) where they are given.

    def _layer_why(self, layer, kwargs):
        why = super()._layer_why(layer, kwargs)
        if why is None and kwargs.get("topk_indices") is None:
            why = _NO_TOPK
        return why

    def _run_mla(self, f, q, k, v, layer, fb, save_kv_cache, q_rope, k_rope, kwargs):
        """A sparse MLA layer over the indexer's top-k (kwargs'
        topk_indices): each query token over its row of slots."""
        topk = kwargs["topk_indices"]
        torch, facts = self._torch, self.facts
        heads, rank = facts.heads, facts.kv_lora_rank
        tokens = int(q.shape[0])
        pool = self.token_to_kv_pool
        if save_kv_cache and k is not None:
            # set_mla_kv_buffer, as sglang's DSA backend writes (an FP8 DSA
            # pool quantises there; its set_kv_buffer refuses).
            if k_rope is None:
                k_rope, k = k[..., rank:], k[..., :rank]
            pool.set_mla_kv_buffer(layer, fb.out_cache_loc, k, k_rope)
        kv = self._kv_view(layer.layer_id)
        out = torch.empty(tokens, heads, rank, dtype=torch.bfloat16, device=kv.device)
        if f.space is None:  # the same for every layer of the batch's shape
            f.space = self._index_space(fb.forward_mode)
        t = {"kv_cache": kv, "topk_indices": self._slots(topk, fb, tokens, f.space), "out": out,
             "lse": self._buffer("lse", (tokens, heads), torch.float32)}
        self._queries(t, f.prepared, q, q_rope, tokens)
        f.prepared.launch(t)
        self._counts[f.path]["plugin"] += 1
        self._extra["sparse_layers"] += 1
        if facts.kv_dtype == "fp8_e4m3":
            self._extra["fp8_layers"] += 1
        out = out.view(tokens, heads * rank)
        return out if out.dtype == q.dtype else out.to(q.dtype)

    # ------------------------------------------------------------ the top-k's index space

    def _index_space(self, mode):
        """("PAGED" or "RAGGED", fused) of the indexer's top-k for a batch
        of mode: sglang's DSA backend's get_topk_transform_method, and
        whether its top-k is fused (the metadata's force_unfused_topk, else
        the backend's use_fused_topk, else $SGLANG_DSA_FUSE_TOPK)."""
        fallback = self.fallback
        get = getattr(fallback, "get_topk_transform_method", None)
        method = "PAGED"
        if get is not None:
            try:
                m = get(mode)
            except TypeError:  # releases before the mode argument
                m = get()
            method = str(getattr(m, "name", m)).rsplit(".", 1)[-1].upper()
        unfused = getattr(self._index_meta, "force_unfused_topk", None)
        if unfused is not None:
            return method, not unfused
        fused = getattr(fallback, "use_fused_topk", None)
        return method, _fused_from_env() if fused is None else bool(fused)

    def _slots(self, topk, fb, tokens, space):
        """topk (the indexer's, in its index space: space, as
        _index_space gives it for the batch) as the KV pool's slots,
        [tokens, top-k] int32, -1 where a row has no key: rows missing at
        the end (a padded batch) are -1, as sglang's _pad_topk_indices."""
        torch = self._torch
        if topk.shape[0] < tokens:
            pad = topk.new_full((tokens - topk.shape[0], topk.shape[1]), -1)
            topk = torch.cat([topk, pad])
        method, fused = space
        md = self.forward_metadata
        if method == "RAGGED":
            if not fused:
                off = md.topk_indices_offset
                off = off.unsqueeze(1) if off.ndim == 1 else off
                topk = torch.where(topk != -1, topk + off[:tokens], topk)
            keys = getattr(md, "page_table_1_flattened", None)
            if keys is None:  # no prefix: the ragged keys are the batch's new tokens
                keys = fb.out_cache_loc
            slots = torch.where(topk >= 0, keys[topk.clamp(min=0).long()].to(torch.int32), -1)
        elif fused:
            slots = topk
        else:
            table = md.page_table_1
            if table.shape[0] >= tokens:  # a row a query token (decode; verify, draft extend: expanded)
                rows = torch.arange(tokens, device=topk.device)
            else:  # a row a request: each token its request's
                lens = md.dsa_extend_seq_lens_list or _ints(fb.extend_seq_lens_cpu)
                rows = torch.repeat_interleave(torch.arange(len(lens), device=topk.device),
                                               torch.tensor(lens, device=topk.device), output_size=tokens)
            slots = torch.where(topk >= 0, table[rows[:, None], topk.clamp(min=0).long()], -1)
        if slots.dtype != torch.int32:
            slots = slots.to(torch.int32)
        return slots if slots.is_contiguous() else slots.contiguous()


class AttnplugDSAMultiStepDraftBackend(AttnplugMLAMultiStepDraftBackend):
    """The multi-step draft backend of a DeepSeek sparse attention model
    (DeepSeek-V3.2's MTP drafts): step i is an AttnplugDSABackend reading
    each request's keys and its drafts 0 to i through the draft model's
    indexer. fallback is sglang's multi-step DSA backend: its metadata is
    the indexer's, so it gets every metadata call first, eager and in both
    graph protocols, and step i's indexer reads its step i's. The arguments
    are AttnplugMLAMultiStepDraftBackend's."""

    step_class = AttnplugDSABackend

    def init_forward_metadata(self, forward_batch):
        if self.fallback is not None:
            self.fallback.init_forward_metadata(forward_batch)
            self._fallback_called = forward_batch
        self._steps(lambda b: b._out_graph(forward_batch, in_capture=False, eager=True))

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        if self.fallback is not None:
            self.fallback.init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)
        self._steps(lambda b: b._out_graph(forward_batch, in_capture=in_capture, eager=False))

    def init_forward_metadata_in_graph(self, forward_batch):
        hook = getattr(self.fallback, "init_forward_metadata_in_graph", None)
        if hook is not None:
            hook(forward_batch)

    def init_forward_metadata_capture_cuda_graph(self, forward_batch):
        if self.fallback is not None:
            self.fallback.init_forward_metadata_capture_cuda_graph(forward_batch)
        self._capture_steps(forward_batch)

    def init_forward_metadata_replay_cuda_graph(self, forward_batch, bs):
        if self.fallback is not None:
            self.fallback.init_forward_metadata_replay_cuda_graph(forward_batch, bs)
        self._replay_steps(forward_batch, bs)
