"""torch_models.py - models/mlp.dtm, gpt.dtm, llama.dtm and moe.dtm written in PyTorch.

Parameters are plain tensors in a dict keyed exactly as dtm names them
(w1, b1, ...; wte, wpe, lnf, lnfb, layer.0.wq, ...), with dtm's layouts:
a linear layer is x @ W + b with W [in, out].  The ops follow the
semantics of interp/eval.c (dtm's f64 reference interpreter):

  layernorm  biased variance over the last dim, eps from the model (1e-5)
  gelu       the tanh approximation
  attention  heads are column blocks of q, k, v; scores scaled by
             1/sqrt(head_dim); causal mask; softmax over keys
  rmsnorm    x / sqrt(mean(x^2) + eps) * g over the last dim (eps 1e-5 in llama)
  rope       HF transformers' rotate_half convention (LlamaRotaryEmbedding):
             in each head, dims j and j + hd/2 rotate by pos * theta^(-2j/hd);
             the angles, cos and sin in f64, rounded to f32, as dtm's kernel
  silu       x * sigmoid(x)
  cross_entropy  mean over all positions
  topk       largest first, ties to the lower index (a stable descending sort)
  moe_slot   each sequence a group; its choices queue at their expert in
             token order (s, then j); the p-th gets slot expert * C + p while
             p < C, else it is dropped (support/route.h)
  mse        mean over all elements
"""
import math

import torch
import torch.nn.functional as F

import oracle_cfg

lr_at = oracle_cfg.lr_at  # re-exported for oracle.py


def make_params(tensors, requires_grad=True):
    """numpy arrays -> leaf f32 tensors, in a dict keyed by dtm name."""
    return {k: torch.tensor(v, dtype=torch.float32).requires_grad_(requires_grad)
            for k, v in tensors.items()}


def mlp_loss(p, batch):
    x = torch.as_tensor(batch["x"], dtype=torch.float32)
    y = torch.as_tensor(batch["y"], dtype=torch.float32)
    h = F.gelu(x @ p["w1"] + p["b1"], approximate="tanh")
    return F.mse_loss(h @ p["w2"] + p["b2"], y, reduction="mean")


def attention(q, k, v, heads, causal=True):
    # q, k, v [B, T, D] -> [B, H, T, hd]
    B, T, D = q.shape
    hd = D // heads
    q = q.view(B, T, heads, hd).transpose(1, 2)
    k = k.view(B, T, heads, hd).transpose(1, 2)
    v = v.view(B, T, heads, hd).transpose(1, 2)
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    if causal:
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    a = torch.softmax(s, dim=-1) @ v
    return a.transpose(1, 2).reshape(B, T, D)


def gpt_layers(p):
    n = 0
    while f"layer.{n}.wq" in p:
        n += 1
    return n


def gpt_loss(p, batch, heads, eps=1e-5):
    tokens = torch.as_tensor(batch["tokens"]).long()
    targets = torch.as_tensor(batch["targets"]).long()
    d = p["wte"].shape[1]

    def ln(x, g, b):
        return F.layer_norm(x, (d,), p[g], p[b], eps)

    x = p["wte"][tokens] + p["wpe"]
    for i in range(gpt_layers(p)):
        L = lambda n: p[f"layer.{i}.{n}"]  # noqa: E731
        h = ln(x, f"layer.{i}.ln1", f"layer.{i}.ln1b")
        q = h @ L("wq") + L("bq")
        k = h @ L("wk") + L("bk")
        v = h @ L("wv") + L("bv")
        x = x + attention(q, k, v, heads) @ L("wo") + L("bo")
        h = F.gelu(ln(x, f"layer.{i}.ln2", f"layer.{i}.ln2b") @ L("wfc") + L("bfc"),
                   approximate="tanh")
        x = x + h @ L("wproj") + L("bproj")
    logits = ln(x, "lnf", "lnfb") @ p["wte"].t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def rope(x, heads, theta):
    # x [B, T, D]: q or k, heads of hd dims; positions 0..T-1
    B, T, D = x.shape
    hd = D // heads
    half = hd // 2
    inv = theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / hd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([torch.cos(ang)] * 2, -1).float()[None, :, None, :]
    sin = torch.cat([torch.sin(ang)] * 2, -1).float()[None, :, None, :]
    x = x.view(B, T, heads, hd)
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)  # rotate_half
    return (x * cos + rot * sin).reshape(B, T, D)


def repeat_kv(x, kv_heads, group):
    # [B, T, kv_heads * hd] -> [B, T, kv_heads * group * hd]: each key/value
    # head serves `group` consecutive query heads
    B, T, D = x.shape
    x = x.view(B, T, kv_heads, D // kv_heads).repeat_interleave(group, dim=2)
    return x.reshape(B, T, group * D)


def llama_loss(p, batch, heads, theta, eps=1e-5):
    tokens = torch.as_tensor(batch["tokens"]).long()
    targets = torch.as_tensor(batch["targets"]).long()

    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * p[g]

    x = p["wte"][tokens]
    for i in range(gpt_layers(p)):
        L = lambda n: p[f"layer.{i}.{n}"]  # noqa: E731
        hd = L("wq").shape[1] // heads
        kv = L("wk").shape[1] // hd
        h = rms(x, f"layer.{i}.ln1")
        q = rope(h @ L("wq"), heads, theta)
        k = repeat_kv(rope(h @ L("wk"), kv, theta), kv, heads // kv)
        v = repeat_kv(h @ L("wv"), kv, heads // kv)
        x = x + attention(q, k, v, heads) @ L("wo")
        h = rms(x, f"layer.{i}.ln2")
        x = x + (F.silu(h @ L("w1")) * (h @ L("w3"))) @ L("w2")
    logits = rms(x, "norm") @ p["wlm"]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def topk(x, k):
    """dtm's topk: indices of the k largest along the last dim, largest
    first, ties to the lower index (a stable sort keeps equal values in
    index order; torch.topk promises no tie order)."""
    return torch.sort(x, dim=-1, descending=True, stable=True).indices[..., :k]


def moe_route(choice, E, C):
    """choice [B, T, k] -> slot [B, T*k]: the position of each choice in its
    expert's queue (token order s, then j) is a running count of that
    expert; past C, or out of [0, E), the choice is dropped (-1)."""
    B = choice.shape[0]
    c = choice.reshape(B, -1)
    ok = (c >= 0) & (c < E)
    oh = F.one_hot(c.clamp(0, E - 1), E) * ok[..., None]   # [B, T*k, E]
    pos = (oh.cumsum(1) * oh).sum(-1) - 1
    return torch.where(ok & (pos < C), c * C + pos, torch.full_like(c, -1))


def moe_route_ref(choice, E, C):
    """support/route.h's loop, literally: the slots, to check moe_route."""
    out = []
    for g in choice.reshape(choice.shape[0], -1).tolist():
        count, row = [0] * E, []
        for x in g:
            p = -1
            if 0 <= x < E:
                p = count[x] if count[x] < C else -1
                count[x] += 1
            row.append(-1 if p < 0 else x * C + p)
        out.append(row)
    return torch.tensor(out, dtype=torch.long)


def gather_rows(x, idx):
    # x [B, n, R], idx [B, m] -> [B, m, R]; 0 where idx < 0 (dtm's gather)
    B, n, R = x.shape
    xz = torch.cat([x, x.new_zeros(B, 1, R)], 1)
    i = torch.where(idx < 0, torch.full_like(idx, n), idx)
    return xz.gather(1, i[..., None].expand(-1, -1, R))


def moe_block(p, i, x, k, C, aux_weight, z_weight, stats):
    """models/moe.dtm's moe(x): routed SwiGLU experts and the aux loss.
    Gradients reach the router through the gate values only."""
    L = lambda n: p[f"moe.{i}.{n}"]  # noqa: E731
    B, T, d = x.shape
    E = L("w1").shape[0]
    logits = x @ L("router")
    probs = torch.softmax(logits, -1)
    choice = topk(probs, k)                                   # [B, T, k]
    gate = probs.gather(-1, choice)
    gate = gate / gate.sum(-1, keepdim=True)
    slot = moe_route(choice, E, C)                            # [B, T*k]
    # moe_token: the inverse map, slot -> token (-1 where empty)
    tok = torch.full((B, E * C + 1), -1, dtype=torch.long)
    src = torch.arange(T).repeat_interleave(k).expand(B, -1)
    tok.scatter_(1, torch.where(slot < 0, E * C, slot), src)
    tok = tok[:, :E * C]
    stats.append(((slot < 0).sum().item(), torch.equal(slot, moe_route_ref(choice, E, C))))

    xe = gather_rows(x, tok).view(B, E, C, d).permute(1, 0, 2, 3).reshape(E, B * C, d)
    h = F.silu(xe @ L("w1")) * (xe @ L("w3"))
    yd = (h @ L("w2")).view(E, B, C, d).permute(1, 0, 2, 3).reshape(B, E * C, d)
    y = gather_rows(yd, slot).view(B, T, k, d)
    y = (y * gate[..., None]).sum(2)

    f = F.one_hot(choice, E).float().mean((0, 1, 2))
    P = probs.mean((0, 1))
    lse = torch.logsumexp(logits, -1)
    aux = E * (f * P).sum() * aux_weight + (lse * lse).mean() * z_weight
    return y, aux


def moe_loss(p, batch, heads, theta, eps, k, C, aux_weight, z_weight, stats):
    """models/moe.dtm: llama_loss with each MLP a moe_block, plus the mean
    over layers of the aux losses.  stats gets, per layer, (dropped choices,
    whether moe_route's slots equal route.h's loop's)."""
    tokens = torch.as_tensor(batch["tokens"]).long()
    targets = torch.as_tensor(batch["targets"]).long()

    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * p[g]

    x = p["wte"][tokens]
    aux, n = 0.0, gpt_layers(p)
    for i in range(n):
        L = lambda n: p[f"layer.{i}.{n}"]  # noqa: E731
        hd = L("wq").shape[1] // heads
        kv = L("wk").shape[1] // hd
        h = rms(x, f"layer.{i}.ln1")
        q = rope(h @ L("wq"), heads, theta)
        kk = repeat_kv(rope(h @ L("wk"), kv, theta), kv, heads // kv)
        v = repeat_kv(h @ L("wv"), kv, heads // kv)
        x = x + attention(q, kk, v, heads) @ L("wo")
        y, a = moe_block(p, i, rms(x, f"layer.{i}.ln2"), k, C, aux_weight, z_weight, stats)
        x = x + y
        aux = aux + a
    logits = rms(x, "norm") @ p["wlm"]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return ce + aux / n


def make_optimizer(params, cfg):
    """torch.optim equivalent of the model's train section (cfg: the
    `train` key/values that `dtmc print` shows)."""
    ps = list(params.values())
    opt = cfg["optimizer"]
    if opt == "adamw":
        return torch.optim.AdamW(ps, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]),
                                 eps=cfg["eps"], weight_decay=cfg["weight_decay"])
    if opt == "sgd":
        return torch.optim.SGD(ps, lr=cfg["lr"], momentum=cfg["momentum"],
                               nesterov=cfg["nesterov"], weight_decay=cfg["weight_decay"])
    raise ValueError(f"optimizer {opt!r} has no PyTorch equivalent here")


def opt_state_names(name, opt, state):
    """dtm's checkpoint names of a param's optimizer state -> torch tensors."""
    out = {}
    if opt == "adamw":
        if "exp_avg" in state:
            out[f"opt.m.{name}"] = state["exp_avg"]
            out[f"opt.v.{name}"] = state["exp_avg_sq"]
    elif state.get("momentum_buffer") is not None:
        out[f"opt.mom.{name}"] = state["momentum_buffer"]
    return out
