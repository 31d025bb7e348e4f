#!/usr/bin/env python3
"""jax_gpt.py - JAX (jit, CPU) baseline for bench/train_bench.sh.

The same GPT as models/gpt.dtm and tests/oracle/torch_models.py, written in
jax.numpy: pre-LayerNorm blocks, separate q/k/v, causal attention scaled by
1/sqrt(head_dim), GELU (tanh), tied LM head, mean cross-entropy; AdamW as
torch.optim.AdamW (decoupled weight decay on every parameter, bias
correction) after clipping by the global gradient norm, all in f32.  One
jitted function does forward, backward, clipping and the update.  Prints
one JSON line: {"impl": "jax", "tokens_per_s": ...}.

  jax_gpt.py --dtmc build/dtmc [--steps 50] [-D k=v ...]
Threads: XLA's CPU client uses every core it is given; train_bench.sh
pins the process with taskset to the same cores as the others.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gptcfg  # noqa: E402
from oracle_cfg import lr_at  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402


def layernorm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g + b


def gelu(x):
    return 0.5 * x * (1.0 + jnp.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def attention(q, k, v, heads):
    B, T, D = q.shape
    hd = D // heads
    sp = lambda t: t.reshape(B, T, heads, hd).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = sp(q), sp(k), sp(v)
    s = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(hd))
    mask = jnp.tril(jnp.ones((T, T), dtype=bool))
    s = jnp.where(mask, s, -jnp.inf)
    a = jax.nn.softmax(s, axis=-1) @ v
    return a.transpose(0, 2, 1, 3).reshape(B, T, D)


def make_loss(cfg):
    heads, eps, layers = cfg["heads"], cfg["eps"], cfg["layers"]

    def loss_fn(p, tokens, targets):
        x = p["wte"][tokens] + p["wpe"]
        for i in range(layers):
            L = lambda n: p[f"layer.{i}.{n}"]  # noqa: E731
            h = layernorm(x, L("ln1"), L("ln1b"), eps)
            q, k, v = h @ L("wq") + L("bq"), h @ L("wk") + L("bk"), h @ L("wv") + L("bv")
            x = x + attention(q, k, v, heads) @ L("wo") + L("bo")
            h = gelu(layernorm(x, L("ln2"), L("ln2b"), eps) @ L("wfc") + L("bfc"))
            x = x + h @ L("wproj") + L("bproj")
        logits = layernorm(x, p["lnf"], p["lnfb"], eps) @ p["wte"].T
        lse = jax.nn.logsumexp(logits, axis=-1)
        picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
        return (lse - picked).mean()

    return loss_fn


def make_step(cfg):
    tr = cfg["train"]
    b1, b2, eps, wd = tr["beta1"], tr["beta2"], tr["eps"], tr["weight_decay"]
    clip = float(tr.get("clip", 0) or 0)
    grad_fn = jax.value_and_grad(make_loss(cfg))

    def step(p, m, v, t, lr, tokens, targets):
        loss, g = grad_fn(p, tokens, targets)
        if clip > 0:  # torch.nn.utils.clip_grad_norm_
            gn = jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(g)))
            coef = jnp.minimum(clip / (gn + 1e-6), 1.0)
            g = jax.tree_util.tree_map(lambda x: x * coef, g)
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t

        def upd(p_, m_, v_, g_):
            p_ = p_ * (1 - lr * wd)
            m_ = b1 * m_ + (1 - b1) * g_
            v_ = b2 * v_ + (1 - b2) * g_ * g_
            denom = jnp.sqrt(v_) / jnp.sqrt(bc2) + eps
            return p_ - (lr / bc1) * m_ / denom, m_, v_

        out = {k: upd(p[k], m[k], v[k], g[k]) for k in p}
        return ({k: o[0] for k, o in out.items()}, {k: o[1] for k, o in out.items()},
                {k: o[2] for k, o in out.items()}, loss)

    return jax.jit(step, donate_argnums=(0, 1, 2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtmc", required=True)
    ap.add_argument("--model", default=os.path.join(gptcfg.ROOT, "models", "gpt.dtm"))
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("-D", dest="defs", action="append", default=[])
    a = ap.parse_args()
    cfg = gptcfg.load(a.dtmc, a.model, a.defs)
    tr = cfg["train"]
    rng = np.random.default_rng(0)
    p = {}
    for name, q in cfg["params"].items():
        shape, kind = q["shape"], q["init"]
        p[name] = jnp.asarray(np.ones(shape, np.float32) if kind == "ones" else
                              np.zeros(shape, np.float32) if kind == "zeros" else
                              gptcfg.normal_init(rng, shape, kind))
    m = {k: jnp.zeros_like(x) for k, x in p.items()}
    v = {k: jnp.zeros_like(x) for k, x in p.items()}
    step = make_step(cfg)
    B, T, V = cfg["batch"], cfg["ctx"], cfg["vocab"]
    times, losses = [], []
    for s in range(a.warmup + a.steps):
        toks = rng.integers(0, V, (B, T + 1), dtype=np.int32)
        x, y = jnp.asarray(toks[:, :-1]), jnp.asarray(toks[:, 1:])
        lr = lr_at(tr, float(tr["lr"]), s + 1, int(tr.get("steps", 100)))
        t0 = time.perf_counter()
        p, m, v, loss = step(p, m, v, jnp.float32(s + 1), jnp.float32(lr), x, y)
        losses.append(float(loss))  # blocks until the step is done
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"impl": "jax", "version": jax.__version__,
                      "devices": [str(d) for d in jax.devices()], "tokens_per_step": B * T,
                      "tokens_per_s": B * T / med, "ms_per_step": med * 1e3,
                      "first_loss": losses[0], "last_loss": losses[-1]}))


if __name__ == "__main__":
    main()
