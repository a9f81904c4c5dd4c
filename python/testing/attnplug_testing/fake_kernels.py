"""A launcher whose plans are the server's and whose "kernels" are torch
code: FakeLauncher asks a real ``attnplug serve`` for every step's plan
through attnplug.device.PlanSource (the plan request, its bound, its page
table's room and its key are the server's, as on the GPU), and its
FakePrepared checks the tensors bound against the plan's own tensor specs
(name, dtype, shape, contiguity or a strided view's rows) before computing what the plan's kernels
compute from them, in the layout of docs/device.md: the MLA plans' paged
latent cache, page table, lengths and query offsets, their scheduler
reading seq_lens and qo_indptr when the step launches it (later layers read
what it wrote then), or, for a plan without one, each layer reading them;
the MHA plans' ragged q, k and v. It runs on any torch
device, CPU included, so that the sglang backend's bookkeeping is tested
against real plans without a GPU."""

import torch

from attnplug.device import PlanSource

__all__ = ["FakeLauncher", "FakePrepared", "H200"]

_DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32, "fp16": torch.float16}
_FP8 = getattr(torch, "float8_e4m3fn", None)
if _FP8 is not None:
    _DTYPES["fp8_e4m3"] = _FP8

#: The device the plans are made for: an H200, as the fa3 and flashinfer
#: plugins' planners take it (nothing here runs on it).
H200 = {"platform": "cuda", "name": "NVIDIA H200", "compute_capability": 90, "sms": 132,
        "max_threads_per_block": 1024, "max_shared_per_block": 232448, "max_grid": [2147483647, 65535, 65535]}


class FakePrepared:
    """A step's plan (attnplug.device.Prepared's interface): launch_batch
    runs the plan's scheduler (it keeps the lengths and query offsets),
    launch_layer a layer over what the scheduler kept, launch both. A plan
    without a scheduler (no PerBatch launch) runs nothing in launch_batch,
    and its layers read the lengths and query offsets bound to them."""

    def __init__(self, launcher, step, step_plan):
        self.launcher = launcher
        self.step = step
        self.plan = step_plan.plan
        self.max_seq_len = step_plan.max_seq_len
        self.pages_per_request = step_plan.pages_per_request
        self.specs = {t.name: t for t in self.plan.tensors}
        self.batch_reads = set()
        for launch in self.plan.launches:
            if launch.per_batch:
                self.batch_reads.update(a.name for a in launch.args if a.kind in ("tensor", "tensormap"))
        self.schedule = None

    def check(self, tensors, names):
        for n in names:
            spec = self.specs[n]
            t = tensors.get(n)
            assert t is not None, "tensor %s not bound (the plan binds %s)" % (n, sorted(self.specs))
            assert t.dtype == _DTYPES.get(spec.dtype), "tensor %s: dtype %s, the plan wants %s" % (n, t.dtype, spec.dtype)
            assert tuple(t.shape) == tuple(spec.shape), "tensor %s: shape %s, the plan wants %s" % (
                n, tuple(t.shape), tuple(spec.shape))
            if spec.strided:
                # A view, as the Launcher binds it: rows of contiguous
                # elements, 16-byte aligned.
                size = t.element_size()
                assert t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(
                    st * size % 16 == 0 for st in t.stride()[:-1]), "tensor %s: strides %s" % (n, t.stride())
            else:
                assert t.is_contiguous(), "tensor %s not contiguous" % n

    def declares(self, name):
        """Whether the plan binds tensor name."""
        return name in self.specs

    def launch_batch(self, tensors, stream=None):
        if not self.batch_reads:
            # A plan without a scheduler: nothing runs (as in
            # attnplug.device.Prepared); its layers read the lengths.
            return
        self.check(tensors, self.batch_reads)
        self.launcher.batch_launches += 1
        # The scheduler reads the lengths now; the layers read what it wrote.
        self.schedule = (tensors["seq_lens"].clone(), tensors["qo_indptr"].clone())

    def launch_layer(self, tensors, stream=None):
        self.check(tensors, self.specs)
        self.launcher.layer_launches += 1
        if not self.batch_reads:
            self._mla(tensors, tensors["seq_lens"], tensors["qo_indptr"])
            return
        assert self.schedule is not None, "a layer launched before the step's scheduler"
        self._mla(tensors, *self.schedule)

    def launch(self, tensors, stream=None):
        self.check(tensors, self.specs)
        self.launcher.layer_launches += 1
        if "topk_indices" in self.specs:
            self._sparse(tensors)
        elif self.step["method"] == "MLA":
            self._mla(tensors, tensors["seq_lens"], tensors["qo_indptr"])
        else:
            self._mha(tensors)

    def _mla(self, t, seq_lens, qo_indptr):
        page = self.step["pool"]["page_size"]
        scale = self.step["model"]["softmax_scale"]
        cache = t["kv_cache"]
        flat = cache.reshape(-1, cache.shape[-1])
        kv_scale = float(t["kv_scale"].item()) if "kv_scale" in t else 1.0
        indptr, indices = t["kv_indptr"].tolist(), t["kv_indices"]
        dev = flat.device
        q = _queries(t)
        for i, L in enumerate(seq_lens.tolist()):
            a, b = qo_indptr[i].item(), qo_indptr[i + 1].item()
            m = b - a
            pages = indices[indptr[i]:indptr[i + 1]].long()
            pos = torch.arange(L, device=dev)
            rows = pages[pos // page] * page + pos % page
            keys = flat[rows].float() * kv_scale
            s = torch.einsum("thd,kd->thk", q[a:b].float(), keys) * scale
            limit = L - m + torch.arange(m, device=dev)
            s = s.masked_fill(~(pos[None, :] <= limit[:, None])[:, None, :], float("-inf"))
            t["lse"][a:b] = torch.logsumexp(s, -1)
            t["out"][a:b] = torch.einsum("thk,kd->thd", torch.softmax(s, -1), keys[:, :t["out"].shape[-1]]).to(
                t["out"].dtype)

    def _sparse(self, t):
        # Query token t over the slots of its row of topk_indices (one out
        # of the cache, or -1, is no key), the cache's rows dequantised
        # where they are DeepSeek-V3.2's FP8 ones.
        from attnplug_testing.dsa import latent_rows
        scale = self.step["model"]["softmax_scale"]
        cache = t["kv_cache"]
        keys = latent_rows(cache.reshape(-1, 1, cache.shape[-1]))
        q = _queries(t)
        for i, row in enumerate(t["topk_indices"]):
            sl = row[(row >= 0) & (row < keys.shape[0])].long()
            if sl.numel() == 0:
                t["out"][i] = 0
                t["lse"][i] = float("-inf")
                continue
            kt = keys[sl]
            s = torch.einsum("hd,kd->hk", q[i].float(), kt) * scale
            t["lse"][i] = torch.logsumexp(s, -1)
            t["out"][i] = (torch.softmax(s, -1) @ kt[:, :t["out"].shape[-1]]).to(t["out"].dtype)

    def _mha(self, t):
        b = self.step["batch"]
        scale = self.step["model"]["softmax_scale"]
        row = key = 0
        dev = t["q"].device
        chunk = bool(b.get("prefix_chunk"))  # a prefix chunk's pass: every key, none perhaps
        for L, m in zip(b["seq_lens"], b["q_lens"]):
            if L == 0:
                t["lse"][row:row + m] = float("-inf")
                t["out"][row:row + m] = 0
                row += m
                continue
            q = t["q"][row:row + m].float()
            k = t["k"][key:key + L].float()
            v = t["v"][key:key + L].float()
            s = torch.einsum("thd,khd->htk", q, k) * scale
            if not chunk:
                limit = L - m + torch.arange(m, device=dev)
                s = s.masked_fill(~(torch.arange(L, device=dev)[None, :] <= limit[:, None])[None], float("-inf"))
            t["lse"][row:row + m] = torch.logsumexp(s, -1).transpose(0, 1)
            t["out"][row:row + m] = torch.einsum("htk,khd->thd", torch.softmax(s, -1), v).to(t["out"].dtype)
            row += m
            key += L


def _queries(t):
    """An MLA plan's queries, [tokens, heads, 576]: q, or q_nope and q_rope
    put together (a plan that takes them split)."""
    if "q" in t:
        return t["q"]
    return torch.cat([t["q_nope"], t["q_rope"]], dim=-1)


class FakeLauncher:
    """attnplug.device.Launcher's step(step, keep) over a real server's
    plans (PlanSource, for an H200; with follow, it follows the server's
    routes as the Launcher does) with FakePrepared kernels. Prepared
    plans are kept by the server's plan key, as the Launcher keeps them."""

    def __init__(self, client, backend="fa3", device=None, follow=False):
        self.source = PlanSource(client, backend, device or H200, follow=follow)
        self.stats = {"module_loads": 1, "images_loaded": 0}  # loads nothing
        self.prepared = {}
        self.version = 0
        self.steps = []  # every step asked, as sent
        self.batch_launches = 0
        self.layer_launches = 0

    def close(self):
        self.source.close()

    def step(self, step, keep=True):
        req = self.source.request(step)
        self.steps.append(req)
        sp, version = self.source.step(req)
        if version != self.version:  # the route changed: nothing prepared before holds
            self.version, self.prepared = version, {}
        p = self.prepared.get(sp.plan.key)
        if p is None:
            p = FakePrepared(self, req, sp)
            if keep:
                self.prepared[sp.plan.key] = p
        return p

