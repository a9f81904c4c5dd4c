"""A stand-in of attnplug.device.Launcher whose "kernels" are torch code
reading exactly the tensors a plan binds, in the layout of docs/device.md
(launch.Tensors): the MLA decode plan's paged latent cache, page table,
lengths and query offsets, its scheduler reading seq_lens and qo_indptr
when the step launches it (later layers read what it wrote then), the MHA
plans' ragged q, k and v. Tensors are checked against the shapes the
server's plan would declare. It runs on any torch device, CPU included,
so that the sglang backend's bookkeeping is tested without a GPU."""

import math

import torch

_DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32}


def _specs(req):
    d, s = req["dims"], req["shape"]
    b = len(s["seq_lens"])
    tokens = sum(s["q_lens"])
    h = d["heads"]
    if req["method"] == "MLA":
        pages = b * -(-s["max_seq_len"] // s["page_size"]) if s.get("max_seq_len") else \
            sum(-(-n // s["page_size"]) for n in s["seq_lens"])
        return {"q": ("bf16", (tokens, h, d["head_dim_qk"])),
                "kv_cache": ("bf16", (s["num_pages"], s["page_size"], d["head_dim_qk"])),
                "kv_indptr": ("i32", (b + 1,)), "kv_indices": ("i32", (pages,)), "seq_lens": ("i32", (b,)),
                "qo_indptr": ("i32", (b + 1,)), "out": ("bf16", (tokens, h, d["head_dim_v"])),
                "lse": ("f32", (tokens, h))}
    keys = sum(s["seq_lens"])
    return {"q": ("bf16", (tokens, h, d["head_dim_qk"])), "k": ("bf16", (keys, h, d["head_dim_qk"])),
            "v": ("bf16", (keys, h, d["head_dim_v"])), "out": ("bf16", (tokens, h, d["head_dim_v"])),
            "lse": ("f32", (tokens, h))}


class FakePrepared:
    BATCH = ("seq_lens", "qo_indptr")

    def __init__(self, launcher, req):
        self.launcher = launcher
        self.req = req
        self.specs = _specs(req)
        self.schedule = None

    def check(self, tensors, names):
        for n in names:
            dtype, shape = self.specs[n]
            t = tensors.get(n)
            assert t is not None, "tensor %s not bound" % n
            assert t.dtype == _DTYPES[dtype], "tensor %s: dtype %s, the plan wants %s" % (n, t.dtype, dtype)
            assert tuple(t.shape) == shape, "tensor %s: shape %s, the plan wants %s" % (n, tuple(t.shape), shape)
            assert t.is_contiguous(), "tensor %s not contiguous" % n

    def launch_batch(self, tensors, stream=None):
        self.check(tensors, self.BATCH)
        self.launcher.batch_launches += 1
        # The scheduler reads the lengths now; the layers read what it wrote.
        self.schedule = (tensors["seq_lens"].clone(), tensors["qo_indptr"].clone())

    def launch_layer(self, tensors, stream=None):
        assert self.schedule is not None, "a layer launched before the step's scheduler"
        self.check(tensors, self.specs)
        self.launcher.layer_launches += 1
        self._mla(tensors, *self.schedule)

    def launch(self, tensors, stream=None):
        self.check(tensors, self.specs)
        self.launcher.layer_launches += 1
        if self.req["method"] == "MLA":
            self._mla(tensors, tensors["seq_lens"], tensors["qo_indptr"])
        else:
            self._mha(tensors)

    def _mla(self, t, seq_lens, qo_indptr):
        page = self.req["shape"]["page_size"]
        scale = self.req["dims"]["softmax_scale"]
        flat = t["kv_cache"].reshape(-1, t["kv_cache"].shape[-1])
        indptr, indices = t["kv_indptr"].tolist(), t["kv_indices"]
        dev = flat.device
        for i, L in enumerate(seq_lens.tolist()):
            a, b = qo_indptr[i].item(), qo_indptr[i + 1].item()
            m = b - a
            pages = indices[indptr[i]:indptr[i + 1]].long()
            pos = torch.arange(L, device=dev)
            rows = pages[pos // page] * page + pos % page
            keys = flat[rows].float()
            s = torch.einsum("thd,kd->thk", t["q"][a:b].float(), keys) * scale
            limit = L - m + torch.arange(m, device=dev)
            s = s.masked_fill(~(pos[None, :] <= limit[:, None])[:, None, :], float("-inf"))
            t["lse"][a:b] = torch.logsumexp(s, -1)
            t["out"][a:b] = torch.einsum("thk,kd->thd", torch.softmax(s, -1), keys[:, :t["out"].shape[-1]]).to(
                t["out"].dtype)

    def _mha(self, t):
        s_ = self.req["shape"]
        scale = self.req["dims"]["softmax_scale"]
        row = key = 0
        dev = t["q"].device
        for L, m in zip(s_["seq_lens"], s_["q_lens"]):
            q = t["q"][row:row + m].float()
            k = t["k"][key:key + L].float()
            v = t["v"][key:key + L].float()
            s = torch.einsum("thd,khd->htk", q, k) * scale
            limit = L - m + torch.arange(m, device=dev)
            s = s.masked_fill(~(torch.arange(L, device=dev)[None, :] <= limit[:, None])[None], float("-inf"))
            t["out"][row:row + m] = torch.einsum("htk,khd->thd", torch.softmax(s, -1), v).to(t["out"].dtype)
            row += m
            key += L


class FakeSource:
    def __init__(self):
        self.version = 0
        self.stats = {"plan_requests": 0, "module_fetches": 1, "route_changes": 0}


class FakeLauncher:
    """plan(request, keep) as attnplug.device.Launcher's: graph plans with
    a bound are kept by everything but their lengths; refuse (a set of
    methods) answers NoPlan; down makes every new plan ServerUnavailable."""

    def __init__(self, refuse=(), down=False):
        self.source = FakeSource()
        self.stats = {"module_loads": 1}
        self.plans = {}
        self.refuse = set(refuse)
        self.down = down
        self.batch_launches = 0
        self.layer_launches = 0

    def close(self):
        pass

    def plan(self, request, keep=True):
        from attnplug.client import NoPlan, ServerUnavailable
        s = request["shape"]
        key = (request["method"], tuple(sorted(request["dims"].items())), s.get("page_size"), s.get("num_pages"),
               s.get("max_seq_len"), tuple(s["q_lens"]),
               None if request.get("graph") and s.get("max_seq_len") else tuple(s["seq_lens"]))
        p = self.plans.get(key)
        if p is not None:
            return p
        if self.down:
            raise ServerUnavailable("fake: the server is down")
        if request["method"] in self.refuse:
            raise NoPlan("fake: no plan for %s" % request["method"])
        self.source.stats["plan_requests"] += 1
        p = FakePrepared(self, request)
        if keep:
            self.plans[key] = p
        return p
