"""jax_models.py - models/mlp.dtm and models/gpt.dtm in jax.numpy, sharded
over a jax.sharding.Mesh with the placements of the .dtm annotations, and
the train step (the model's optimizer, schedule and clipping) as one jax.jit
with NamedShardings.  Shared by tests/jax/jax_spmd.py (the loss test) and
bench/jax_collectives.py (the collectives report).

The placements are read from `dtmc print --after=propagate MODEL --mesh M`,
never written here: every param and input gets the placement dtm prints for
it (in_shardings/out_shardings), and every intermediate value whose
placement comes from an annotation (its origin is a "file":line, as `h =
gelu(...) @ [dp, tp]`) gets jax.lax.with_sharding_constraint at the same
value.  The ops follow tests/oracle/torch_models.py (dtm's semantics:
tanh GELU, biased layernorm variance, mean losses, heads as column blocks).

Import this module only after XLA_FLAGS is set (the device count).
"""
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from oracle_cfg import read_model  # noqa: E402

_VALUE = re.compile(r'^%(\d+) = (\w+)\b(.*?)(?: "([^"]+)")? : (\w+)\[([\d, ]*)\] @ \[([^\]]*)\]'
                    r'(?: partial\(([^)]*)\))? from (\S+)')


def dtmc_text(dtmc, model, mesh, after=None, defs=()):
    cmd = [dtmc, "print"] + ([f"--after={after}"] if after else []) + [model, "--mesh", mesh]
    cmd += [x for d in defs for x in ("-D", d)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def parse_values(text):
    """Every `%N = op ... : T[shape] @ [placement]` line of a dtmc print ->
    list of dicts: id, op, attrs (the text between op and type), name, dtype,
    shape, place (list of axis names or None per dim), partial, origin,
    role."""
    out = []
    for line in text.splitlines():
        m = _VALUE.match(line)
        if not m:
            continue
        place = [None if t.strip() in ("_", "") else t.strip()
                 for t in m.group(7).split(",")] if m.group(7).strip() else []
        role = re.search(r" role (\w+)", line)
        out.append({"id": int(m.group(1)), "op": m.group(2), "attrs": m.group(3).strip(),
                    "name": m.group(4), "dtype": m.group(5),
                    "shape": [int(x) for x in m.group(6).split(",")] if m.group(6).strip() else [],
                    "place": place, "partial": m.group(8), "origin": m.group(9),
                    "role": role.group(1) if role else None, "line": line})
    return out


def spec(place):
    return P(*place)


class Model:
    """Everything the JAX side needs about MODEL under MESH ("dp=2,tp=2")."""

    def __init__(self, dtmc, model, mesh, defs=()):
        text = dtmc_text(dtmc, model, mesh, "propagate", defs)
        self.cfg, info = read_model(text)
        self.name, self.heads, self.eps = info["model"], info["heads"], info["eps"]
        self.axes = [(k, int(v)) for k, v in (kv.split("=") for kv in mesh.split(","))]
        vals = parse_values(text)
        self.params = {v["name"]: v for v in vals if v["role"] == "param"}
        self.inputs = {v["name"]: v for v in vals if v["role"] == "input"}
        # annotated intermediates: origin is an annotation's source location
        self.constraints = {(v["name"], v["op"]): v["place"] for v in vals
                            if v["name"] and v["role"] not in ("param", "input", "opt_state")
                            and v["origin"].startswith('"')}
        if self.name not in ("mlp", "gpt"):
            raise RuntimeError(f"no JAX version of model '{self.name}'")

    def mesh(self):
        n = math.prod(s for _, s in self.axes)
        devs = jax.devices()
        if len(devs) < n:
            raise RuntimeError(f"JAX sees {len(devs)} devices, the mesh needs {n} "
                               f"(XLA_FLAGS=--xla_force_host_platform_device_count={n})")
        return Mesh(np.array(devs[:n]).reshape([s for _, s in self.axes]),
                    tuple(a for a, _ in self.axes))

    # ---- the forward passes, with a hook at every named value ----
    def loss_fn(self, mesh):
        cons = {k: NamedSharding(mesh, spec(p)) for k, p in self.constraints.items()}

        def c(name, op, x):
            s = cons.get((name, op))
            return x if s is None else jax.lax.with_sharding_constraint(x, s)

        if self.name == "mlp":
            def loss(p, b):
                h = c("h", "gelu", gelu(b["x"] @ p["w1"] + p["b1"]))
                return jnp.mean((h @ p["w2"] + p["b2"] - b["y"]) ** 2)
            return loss

        heads, eps = self.heads, self.eps
        layers = sum(1 for k in self.params if k.endswith(".wq"))

        def loss(p, b):
            x = c("x", "add", p["wte"][b["tokens"]] + p["wpe"])
            for i in range(layers):
                L = lambda n: p[f"layer.{i}.{n}"]  # noqa: E731,B023
                h = c(f"layer.{i}.h", "layernorm", layernorm(x, L("ln1"), L("ln1b"), eps))
                q = c(f"layer.{i}.q", "add", h @ L("wq") + L("bq"))
                k = c(f"layer.{i}.k", "add", h @ L("wk") + L("bk"))
                v = c(f"layer.{i}.v", "add", h @ L("wv") + L("bv"))
                x = c(f"layer.{i}.x", "add", x + attention(q, k, v, heads) @ L("wo") + L("bo"))
                h = c(f"layer.{i}.h", "gelu",
                      gelu(layernorm(x, L("ln2"), L("ln2b"), eps) @ L("wfc") + L("bfc")))
                x = c(f"layer.{i}.x", "add", x + h @ L("wproj") + L("bproj"))
            logits = c("logits", "matmul", layernorm(x, p["lnf"], p["lnfb"], eps) @ p["wte"].T)
            lse = jax.nn.logsumexp(logits, axis=-1)
            picked = jnp.take_along_axis(logits, b["targets"][..., None], axis=-1)[..., 0]
            return (lse - picked).mean()
        return loss

    def step_fn(self, mesh):
        """jit(step)(params, state, batch, t, lr) -> (params, state, loss,
        grad_norm), with NamedShardings from the .dtm placements."""
        cfg = self.cfg
        opt = cfg["optimizer"]
        clip = float(cfg.get("clip", 0) or 0)
        grad_fn = jax.value_and_grad(self.loss_fn(mesh))

        def step(p, s, b, t, lr):
            loss, g = grad_fn(p, b)
            gn = jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(g)))
            if clip > 0:  # torch.nn.utils.clip_grad_norm_
                coef = jnp.minimum(clip / (gn + 1e-6), 1.0)
                g = jax.tree_util.tree_map(lambda x: x * coef, g)
            np_, ns = {}, {}
            if opt == "adamw":  # torch.optim.AdamW
                b1, b2, eps, wd = cfg["beta1"], cfg["beta2"], cfg["eps"], cfg["weight_decay"]
                bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
                for k in p:
                    m = b1 * s[f"opt.m.{k}"] + (1 - b1) * g[k]
                    v = b2 * s[f"opt.v.{k}"] + (1 - b2) * g[k] * g[k]
                    denom = jnp.sqrt(v) / jnp.sqrt(bc2) + eps
                    np_[k] = p[k] * (1 - lr * wd) - (lr / bc1) * m / denom
                    ns[f"opt.m.{k}"], ns[f"opt.v.{k}"] = m, v
            elif opt == "sgd":  # torch.optim.SGD, dampening 0
                mom, wd, nest = cfg["momentum"], cfg["weight_decay"], cfg["nesterov"]
                for k in p:
                    gk = g[k] + wd * p[k] if wd else g[k]
                    if mom:
                        buf = mom * s[f"opt.mom.{k}"] + gk
                        ns[f"opt.mom.{k}"] = buf
                        gk = gk + mom * buf if nest else buf
                    np_[k] = p[k] - lr * gk
            else:
                raise RuntimeError(f"optimizer {opt!r} has no JAX version here")
            return np_, ns, loss, gn

        ps = {k: NamedSharding(mesh, spec(v["place"])) for k, v in self.params.items()}
        ss = {k: ps[k.split(".", 2)[2]] for k in self.state_names()}
        bs = {k: NamedSharding(mesh, spec(v["place"])) for k, v in self.inputs.items()}
        rep = NamedSharding(mesh, P())
        return jax.jit(step, in_shardings=(ps, ss, bs, rep, rep),
                       out_shardings=(ps, ss, rep, rep))

    def state_names(self):
        opt = self.cfg["optimizer"]
        if opt == "adamw":
            return [f"opt.{w}.{k}" for k in self.params for w in ("m", "v")]
        if opt == "sgd" and self.cfg.get("momentum"):
            return [f"opt.mom.{k}" for k in self.params]
        return []

    def abstract_args(self, mesh):
        """ShapeDtypeStructs of step's arguments (global shapes), for lower()."""
        def sds(v):
            dt = {"f32": jnp.float32, "i32": jnp.int32}[v["dtype"]]
            return jax.ShapeDtypeStruct(tuple(v["shape"]), dt,
                                        sharding=NamedSharding(mesh, spec(v["place"])))
        p = {k: sds(v) for k, v in self.params.items()}
        s = {k: p[k.split(".", 2)[2]] for k in self.state_names()}
        b = {k: sds(v) for k, v in self.inputs.items()}
        f = jax.ShapeDtypeStruct((), jnp.float32)
        return p, s, b, f, f


def gelu(x):
    return 0.5 * x * (1.0 + jnp.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def layernorm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g + b


def attention(q, k, v, heads):
    B, T, D = q.shape
    hd = D // heads
    sp = lambda t: t.reshape(B, T, heads, hd).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = sp(q), sp(k), sp(v)
    s = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(hd))
    s = jnp.where(jnp.tril(jnp.ones((T, T), dtype=bool)), s, -jnp.inf)
    a = jax.nn.softmax(s, axis=-1) @ v
    return a.transpose(0, 2, 1, 3).reshape(B, T, D)
