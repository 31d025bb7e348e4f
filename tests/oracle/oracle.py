#!/usr/bin/env python3
"""oracle.py - train a model with dtm and with PyTorch from the same initial
weights on the same data, and compare.

  oracle.py [--dtmc PATH] [--steps 20] [-D name=value ...] [--work DIR] MODEL.dtm

1. `dtmc print MODEL --mesh dp=1` gives the train section (optimizer,
   schedule, clipping) and the attention heads, layernorm and rmsnorm eps
   and rope's theta.
2. `dtmc build MODEL --mesh dp=1 -o W/model`, then
   `W/model --steps N --save W/ckpt --dump-batches W/batches --log W/log.jsonl`.
3. PyTorch loads W/ckpt/step_000000 (dtm's initial weights), trains N steps
   on W/batches with the same optimizer, learning rate schedule and
   clipping, and the per-step losses (1e-4 relative) and the final weights
   and optimizer state (max |diff| / max |value| <= 1e-4) must agree.
   For a mixture of experts (moe) it prints each step's dropped choices
   per layer, and checks PyTorch's routing against support/route.h's loop
   (dtm logs no drops of its own yet: they are compared with dtm's only
   through the losses and weights, which a different routing moves; one
   choice more dropped per full expert and sequence fails a 20-step run).

Exit status: 0 when everything agrees, 1 on a mismatch or an error (no
PyTorch included: the oracle never passes without running).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

LOSS_RTOL = 1e-4
WEIGHT_RTOL = 1e-4


def fail(msg):
    print(f"oracle: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


try:
    import numpy as np
    import torch
except ImportError as e:  # a missing oracle is a failure, never a skip
    fail(f"cannot import {e.name}: the PyTorch oracle needs PyTorch and numpy; install them "
         f"with `apt-get install python3-torch python3-numpy` (scripts/deps.sh does this "
         f"as root)")

import st  # noqa: E402
from oracle_cfg import let_numbers, read_model  # noqa: E402
import torch_models as tm  # noqa: E402


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}\n{r.stdout}{r.stderr}")
    return r.stdout


def relerr(a, b):
    den = float(np.max(np.abs(b))) if b.size else 0.0
    diff = float(np.max(np.abs(a - b))) if b.size else 0.0
    return diff / den if den > 0 else diff


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("model")
    ap.add_argument("--dtmc", default=os.path.join(HERE, "..", "..", "build", "dtmc"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("-D", dest="defs", action="append", default=[])
    ap.add_argument("--work", help="keep the build and run files here")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    if a.work:
        shutil.rmtree(a.work, ignore_errors=True)
        os.makedirs(a.work)
        compare(a, a.work)
    else:
        work = tempfile.mkdtemp(prefix="dtm_oracle_")
        try:
            compare(a, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def compare(a, work):
    defs = [x for d in a.defs for x in ("-D", d)]
    mesh = ["--mesh", "dp=1"]

    cfg, info = read_model(run([a.dtmc, "print", a.model] + mesh + defs))
    if not cfg.get("optimizer"):
        fail("dtmc print showed no train section")
    binary = os.path.join(work, "model")
    run([a.dtmc, "build", a.model] + mesh + defs + ["-o", binary])
    ckpt, batches, log = (os.path.join(work, n) for n in ("ckpt", "batches", "log.jsonl"))
    run([binary, "--steps", str(a.steps), "--save", ckpt, "--dump-batches", batches,
         "--log", log, "--threads", str(a.threads), "-q"])

    dtm_losses = {}
    with open(log) as f:
        for line in f:
            o = json.loads(line)
            if "loss" in o and "step" in o:
                dtm_losses[o["step"]] = o
    init, meta0 = st.load(os.path.join(ckpt, "step_000000", "rank00000.safetensors"))
    final, meta = st.load(os.path.join(ckpt, f"step_{a.steps:06d}", "rank00000.safetensors"))
    horizon = int(meta0.get("lr_decay_steps", cfg.get("steps", a.steps)))

    params = tm.make_params({k: v for k, v in init.items() if not k.startswith("opt.")})
    opt = tm.make_optimizer(params, cfg)
    model = info["model"]
    if model == "gpt":
        loss_fn = lambda p, b: tm.gpt_loss(p, b, info["heads"], info["eps"])  # noqa: E731
    elif model == "llama":
        loss_fn = lambda p, b: tm.llama_loss(p, b, info["heads"], info["theta"],  # noqa: E731
                                             info["rms_eps"])
    elif model == "mlp":
        loss_fn = tm.mlp_loss
    elif model == "moe":
        with open(a.model) as f:
            lets = let_numbers(f.read(), a.defs)
        if info["topk"] is None or info["capacity"] is None or \
                "aux_weight" not in lets or "z_weight" not in lets:
            fail("moe: cannot read topk, capacity, aux_weight and z_weight")
        loss_fn = lambda p, b: tm.moe_loss(p, b, info["heads"], info["theta"],  # noqa: E731
                                           info["rms_eps"], info["topk"], info["capacity"],
                                           lets["aux_weight"], lets["z_weight"], stats)
    else:
        fail(f"no PyTorch version of model '{model}' in torch_models.py")
    clip = float(cfg.get("clip", 0) or 0)
    base_lr = float(np.float32(cfg["lr"]))  # the plan stores the rate as f32

    print(f"oracle: {model} ({a.model} {' '.join(a.defs)}), {cfg['optimizer']}, "
          f"schedule {cfg.get('lr_schedule')}, clip {clip}, {a.steps} steps, "
          f"torch {torch.__version__}")
    print(f"{'step':>4} {'dtm loss':>14} {'torch loss':>14} {'rel diff':>10} "
          f"{'dtm gnorm':>11} {'torch gnorm':>11} {'lr':>11}")
    worst_loss, bad, stats, drops = 0.0, [], [], []
    for t in range(1, a.steps + 1):
        batch, _ = st.load(os.path.join(batches, f"step_{t:06d}.safetensors"))
        lr = tm.lr_at(cfg, base_lr, t, horizon)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        stats.clear()
        loss = loss_fn(params, batch)
        loss.backward()
        ps = list(params.values())
        if clip > 0:
            gn = float(torch.nn.utils.clip_grad_norm_(ps, clip))
        else:
            gn = float(torch.norm(torch.stack([p.grad.norm() for p in ps])))
        opt.step()
        tl = float(loss)
        d = dtm_losses.get(t)
        if d is None:
            fail(f"dtm's log has no step {t}")
        rel = abs(d["loss"] - tl) / max(abs(tl), 1e-30)
        worst_loss = max(worst_loss, rel)
        if not rel <= LOSS_RTOL:
            bad.append(f"step {t}: loss {d['loss']!r} vs torch {tl!r} (rel {rel:.2e})")
        dg = d.get("grad_norm")
        # moe: dropped choices per layer; the routing checked against route.h
        drop = ""
        if stats:
            drops.append([n for n, _ in stats])
            drop = "  drops " + " ".join(str(n) for n, _ in stats)
            if not all(same for _, same in stats):
                bad.append(f"step {t}: PyTorch's slots differ from route.h's loop")
            # dtm's own drops, per routing site (layer), from its log
            theirs = [sum(x) for x in d.get("moe", {}).get("dropped", [])]
            if theirs != [n for n, _ in stats]:
                bad.append(f"step {t}: dtm dropped {theirs} choices per layer, "
                           f"PyTorch {[n for n, _ in stats]}")
        print(f"{t:>4} {d['loss']:>14.8f} {tl:>14.8f} {rel:>10.2e} "
              f"{dg if dg is None else format(dg, '11.6f'):>11} {gn:>11.6f} {lr:>11.4e}{drop}")

    # final weights and optimizer state
    theirs = {k: v.detach().numpy() for k, v in params.items()}
    for name, p in params.items():
        for k, v in tm.opt_state_names(name, cfg["optimizer"], opt.state[p]).items():
            theirs[k] = v.detach().numpy()
    # Two measures per tensor: max|diff| relative to the tensor's own max
    # |value|, asserted for tensors of real scale, and relative to the max
    # |value| of its group (params, opt.m, opt.v, opt.mom), asserted for
    # all.  A tensor far below its group's scale holds rounding noise: the
    # attention key bias has an exactly zero gradient (softmax ignores a
    # per-query constant), so dtm and torch each move it by their own
    # rounding, Adam amplifies that, and only the group measure means
    # anything for it.
    def group(k):
        return ".".join(k.split(".")[:2]) if k.startswith("opt.") else "param"
    common = [k for k in sorted(theirs) if k in final and final[k].shape == theirs[k].shape]
    for k in sorted(theirs):
        if k not in final:
            if not k.startswith("opt."):
                bad.append(f"final checkpoint lacks '{k}'")
        elif final[k].shape != theirs[k].shape:
            bad.append(f"'{k}': shape {final[k].shape} vs torch {theirs[k].shape}")
    scale = {}
    for k in common:
        scale[group(k)] = max(scale.get(group(k), 0.0), float(np.max(np.abs(theirs[k]))))
    print(f"\n{'tensor':<24} {'shape':<12} {'max|torch|':>10} {'diff/own max':>12} "
          f"{'diff/group max':>14}")
    worst_w = 0.0
    for k in common:
        d64, t64 = final[k].astype(np.float64), theirs[k].astype(np.float64)
        own = relerr(d64, t64)
        gmax = scale[group(k)]
        diff = float(np.max(np.abs(d64 - t64))) if t64.size else 0.0
        grel = diff / gmax if gmax > 0 else diff
        tmax = float(np.max(np.abs(t64))) if t64.size else 0.0
        noise = tmax < 1e-3 * gmax
        worst_w = max(worst_w, grel, 0.0 if noise else own)
        flag = ""
        if not grel <= WEIGHT_RTOL or (not noise and not own <= WEIGHT_RTOL):
            flag = "  <-- over 1e-4"
            bad.append(f"final '{k}' differs: max|diff| = {diff:.3e}, {own:.3e} of its max "
                       f"|value|, {grel:.3e} of its group's")
        elif noise and not own <= WEIGHT_RTOL:
            flag = "  (rounding noise: group measure only)"
        print(f"{k:<24} {str(list(final[k].shape)):<12} {tmax:>10.3e} {own:>12.3e} "
              f"{grel:>14.3e}{flag}")
    missing = [k for k in final if k not in theirs]
    if missing:
        print(f"note: not compared (no PyTorch counterpart): {', '.join(sorted(missing))}")
    if drops:
        print(f"\ndropped choices: {sum(map(sum, drops))} in {a.steps} steps "
              f"(capacity {info['capacity']} per expert and sequence)")
    print(f"\nworst loss rel diff {worst_loss:.3e} (limit {LOSS_RTOL:g}); worst tensor "
          f"{worst_w:.3e} (limit {WEIGHT_RTOL:g})")
    if bad:
        fail("dtm and PyTorch disagree:\n  " + "\n  ".join(bad))
    print("oracle: PASS")


if __name__ == "__main__":
    main()
