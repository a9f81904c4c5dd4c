"""TorchMLABackend: sglang's attention backend interface over sglang's
pools in torch, the fallback of the tests' AttnplugMLABackend where sglang's
own backends are not importable (a process without sglang). MLA decode,
target-verify and extend as a bmm-softmax-bmm in fp32, MHA prefill by a
softmax per request. Graph steps read the runner's tensors on the device,
over page tables as long as the page table's rows (correct, and slow);
eager steps as long as the batch's longest. Test code: never installed."""

import torch


def _ints(v):
    if v is None:
        return None
    if hasattr(v, "tolist"):
        v = v.tolist()
    return [int(x) for x in v]


def _capturing():
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class TorchMLABackend:
    """The fallback where sglang's own backends are not importable: MLA
    decode, target-verify and extend over sglang's pools as a
    bmm-softmax-bmm in torch (fp32), and MHA prefill by torch's SDPA per
    request. Graph steps read the runner's tensors on the device, over page
    tables as long as the model's context (correct, and slow); eager steps
    as long as the batch's longest."""

    def __init__(self, model_runner, *args, speculative_step_id=None, **kwargs):
        self._torch = torch
        # A draft step's decode reads the drafts 0 to speculative_step_id too.
        self.speculative_step_id = speculative_step_id
        cfg = model_runner.model_config
        self.context_len = int(cfg.context_len)
        self.kv_lora_rank = int(cfg.kv_lora_rank)
        self.kv_cache_dim = self.kv_lora_rank + int(cfg.qk_rope_head_dim)
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
        self.graph = False
        self.forward_metadata = None

    def init_forward_metadata(self, forward_batch):
        self.graph = False

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        self.graph = True

    def init_forward_metadata_in_graph(self, forward_batch):
        pass

    def init_cuda_graph_state(self, max_bs, max_num_tokens, *args, **kwargs):
        pass

    def init_forward_metadata_capture_cuda_graph(self, *args, **kwargs):
        self.graph = True

    def init_forward_metadata_replay_cuda_graph(self, *args, **kwargs):
        self.graph = True

    def on_after_cuda_graph_warmup(self):
        pass

    def get_cuda_graph_seq_len_fill_value(self):
        return 1

    def get_verify_buffers_to_fill_after_draft(self):
        return [None, None]

    def update_verify_buffers_to_fill_after_draft(self, spec_info, cuda_graph_bs):
        pass

    def forward(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        mode = forward_batch.forward_mode
        if mode.is_idle():
            return q.new_empty(q.shape[0], layer.tp_q_head_num * layer.v_head_dim)
        if mode.is_decode():
            return self.forward_decode(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)
        return self.forward_extend(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)

    def _save(self, layer, fb, k, v, k_rope, save_kv_cache):
        if save_kv_cache and k is not None:
            if k_rope is not None:
                self.token_to_kv_pool.set_mla_kv_buffer(layer, fb.out_cache_loc, k, k_rope)
            else:
                self.token_to_kv_pool.set_kv_buffer(layer, fb.out_cache_loc, k, v)

    def _q576(self, q, q_rope, heads):
        torch = self._torch
        if q_rope is not None:
            return torch.cat([q.reshape(-1, heads, self.kv_lora_rank), q_rope.reshape(-1, heads, q_rope.shape[-1])],
                             dim=-1)
        return q.reshape(-1, heads, self.kv_cache_dim)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, **kwargs):
        self._save(layer, forward_batch, k, v, k_rope, save_kv_cache)
        heads = int(layer.tp_q_head_num)
        qq = self._q576(q, q_rope, heads)
        bs = int(forward_batch.batch_size)
        n = qq.shape[0] // max(1, bs)
        extra = 0 if self.speculative_step_id is None else self.speculative_step_id + 1
        out = self.mla_uniform(qq, layer, forward_batch, bs, n, extra=extra)
        return out.reshape(qq.shape[0], heads * self.kv_lora_rank).to(q.dtype)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, **kwargs):
        fb = forward_batch
        heads = int(layer.tp_q_head_num)
        if int(layer.head_dim) == self.kv_cache_dim and int(layer.v_head_dim) == self.kv_lora_rank:
            self._save(layer, fb, k, v, k_rope, save_kv_cache)
            qq = self._q576(q, q_rope, heads)
            bs = int(fb.batch_size)
            if fb.forward_mode.is_target_verify():
                n = qq.shape[0] // max(1, bs)
                out = self.mla_uniform(qq, layer, fb, bs, n, extra=n)
            else:
                out = self.mla_ragged(qq, layer, fb)
            return out.reshape(qq.shape[0], heads * self.kv_lora_rank).to(q.dtype)
        return self.mha(q, k, v, layer, fb)

    def mla_uniform(self, q, layer, fb, bs, n, extra):
        """MLA over the pool for bs requests of n query tokens each (decode,
        target-verify): request i's keys are its first seq_lens[i] + extra
        slots of req_to_token, its query t sees those up to length - n + t."""
        torch = self._torch
        kv = self.token_to_kv_pool.get_key_buffer(layer.layer_id).reshape(-1, self.kv_cache_dim)
        lens = fb.seq_lens[:bs].to(torch.int64) + extra
        if self.graph or _capturing():
            width = self.req_to_token.shape[1]
        else:
            width = int(lens.max().item()) if bs else 1
        width = max(1, min(width, self.req_to_token.shape[1]))
        slots = self.req_to_token[fb.req_pool_indices[:bs].long(), :width].long()
        keys = kv[slots].float()  # [bs, width, 576]
        qf = q.reshape(bs, n, -1, self.kv_cache_dim).float()
        s = torch.einsum("bthd,bkd->bthk", qf, keys) * float(layer.scaling)
        pos = torch.arange(width, device=q.device)
        limit = lens[:, None] - n + torch.arange(n, device=q.device)[None, :]  # [bs, n]
        mask = pos[None, None, :] <= limit[:, :, None]
        s = s.masked_fill(~mask[:, :, None, :], float("-inf"))
        p = torch.softmax(s, dim=-1)
        out = torch.einsum("bthk,bkd->bthd", p, keys[..., :self.kv_lora_rank])
        return out.reshape(bs * n, -1, self.kv_lora_rank)

    def mla_ragged(self, q, layer, fb):
        """MLA over the pool for an extend batch (eager): request i has
        extend_seq_lens[i] new tokens at the end of its seq_lens[i] keys."""
        torch = self._torch
        kv = self.token_to_kv_pool.get_key_buffer(layer.layer_id).reshape(-1, self.kv_cache_dim)
        seq = _ints(fb.seq_lens_cpu if getattr(fb, "seq_lens_cpu", None) is not None else fb.seq_lens)
        new = _ints(fb.extend_seq_lens_cpu if getattr(fb, "extend_seq_lens_cpu", None) is not None
                    else fb.extend_seq_lens)
        rpi = _ints(fb.req_pool_indices)
        out = torch.empty(q.shape[0], q.shape[1], self.kv_lora_rank, dtype=torch.float32, device=q.device)
        row = 0
        for i, (L, m) in enumerate(zip(seq, new)):
            keys = kv[self.req_to_token[rpi[i], :L].long()].float()
            qi = q[row:row + m].float()
            s = torch.einsum("thd,kd->thk", qi, keys) * float(layer.scaling)
            limit = L - m + torch.arange(m, device=q.device)
            mask = torch.arange(L, device=q.device)[None, :] <= limit[:, None]
            s = s.masked_fill(~mask[:, None, :], float("-inf"))
            out[row:row + m] = torch.einsum("thk,kd->thd", torch.softmax(s, -1), keys[:, :self.kv_lora_rank])
            row += m
        return out

    def mha(self, q, k, v, layer, fb):
        """Causal MHA per request over the keys given: the new tokens only
        (no prefix) or each request's whole keys (MHA_ONE_SHOT)."""
        torch = self._torch
        heads, dqk, dv = int(layer.tp_q_head_num), int(layer.head_dim), int(layer.v_head_dim)
        new = _ints(fb.extend_seq_lens_cpu if getattr(fb, "extend_seq_lens_cpu", None) is not None
                    else fb.extend_seq_lens)
        seq = _ints(fb.seq_lens_cpu if getattr(fb, "seq_lens_cpu", None) is not None else fb.seq_lens)
        q3 = q.reshape(-1, heads, dqk)
        k3 = k.reshape(-1, int(layer.tp_k_head_num), dqk)
        v3 = v.reshape(-1, int(layer.tp_v_head_num), dv)
        keys = new if k3.shape[0] == sum(new) else seq
        out = torch.empty(q3.shape[0], heads, dv, dtype=q.dtype, device=q.device)
        row = key = 0
        for m, L in zip(new, keys):
            qi = q3[row:row + m].float().transpose(0, 1)
            ki = k3[key:key + L].float().transpose(0, 1)
            vi = v3[key:key + L].float().transpose(0, 1)
            s = torch.matmul(qi, ki.transpose(-1, -2)) * float(layer.scaling)
            limit = L - m + torch.arange(m, device=q.device)
            mask = torch.arange(L, device=q.device)[None, :] <= limit[:, None]
            s = s.masked_fill(~mask[None], float("-inf"))
            out[row:row + m] = torch.matmul(torch.softmax(s, -1), vi).transpose(0, 1).to(q.dtype)
            row += m
            key += L
        return out.reshape(-1, heads * dv)


class TorchMLAMultiStepDraftBackend:
    """sglang's multi-step draft backend of the tests' torch fallback:
    attn_backends holds a TorchMLABackend a draft step (step i reading the
    drafts 0 to i), and calls counts the container's metadata calls."""

    def __init__(self, model_runner, topk, speculative_num_steps):
        self.topk, self.speculative_num_steps = topk, speculative_num_steps
        self.attn_backends = [TorchMLABackend(model_runner, speculative_step_id=i)
                              for i in range(speculative_num_steps - 1)]
        self.calls = []

    def _each(self, name, graph, *args, **kwargs):
        self.calls.append(name)
        for b in self.attn_backends:
            b.graph = graph

    def init_forward_metadata(self, forward_batch):
        self._each("init_forward_metadata", False)

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.calls.append("init_cuda_graph_state")

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        self._each("init_forward_metadata_out_graph", True)

    def init_forward_metadata_in_graph(self, forward_batch):
        self.calls.append("init_forward_metadata_in_graph")

    def init_forward_metadata_capture_cuda_graph(self, forward_batch):
        self._each("init_forward_metadata_capture_cuda_graph", True)

    def init_forward_metadata_replay_cuda_graph(self, forward_batch, bs):
        self._each("init_forward_metadata_replay_cuda_graph", True)
