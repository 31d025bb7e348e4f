#!/usr/bin/env python3
"""jax_spmd.py - dtm against JAX/GSPMD under a DP x TP mesh (issue 4 point 7).

  jax_spmd.py --dtmc PATH [--steps 20] [--mesh dp=2,tp=2] [--work DIR] [-D k=v] MODEL.dtm

1. dtm trains MODEL single-device (`dtmc build --mesh dp=1`, `--save`,
   `--dump-batches`, `--log`): its step-0 checkpoint and per-step batches are
   the inputs of both sides.
2. When `dtmc build MODEL --mesh MESH` succeeds (multi-rank build), dtm also
   trains on MESH (ranks as threads) with the same seed, and its losses are
   compared too; when it refuses, the script says so and compares with the
   single-device run only.
3. JAX, with XLA_FLAGS=--xla_force_host_platform_device_count=N simulating N
   CPU devices, builds a jax.sharding.Mesh of MESH's axes, gives every param
   and input the placement `dtmc print --after=propagate` shows (the .dtm
   annotations) as NamedShardings to jax.jit (in_shardings, out_shardings),
   constrains the annotated intermediates (with_sharding_constraint), loads
   dtm's step-0 weights, trains on dtm's batches with the same optimizer,
   schedule and clipping, and each step's loss must equal dtm's to 1e-4
   relative (f32).

Exit 0 when all agree; 1 on a mismatch, an error, or when JAX cannot be
imported (never a silent pass).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))

LOSS_RTOL = 1e-4


def fail(msg):
    print(f"jax: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}\n{r.stdout}{r.stderr}")
    return r.stdout


def read_log(path):
    out = {}
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            if "loss" in o and "step" in o:
                out[o["step"]] = o["loss"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("model")
    ap.add_argument("--dtmc", default=os.path.join(ROOT, "build", "dtmc"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--mesh", default="dp=2,tp=2")
    ap.add_argument("-D", dest="defs", action="append", default=[])
    ap.add_argument("--work", help="keep the build and run files here")
    a = ap.parse_args()
    ndev = math.prod(int(kv.split("=")[1]) for kv in a.mesh.split(","))
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={ndev}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:  # a missing reference is a failure, never a skip
        fail(f"cannot import {e.name} ({sys.executable}): this test needs JAX for CPU from "
             f"PyPI; tests/jax/run.sh creates the venv ~/.cache/dtm-bench/jax-venv with "
             f"`pip install jax[cpu]` (it needs network access to PyPI)")
    if a.work:
        shutil.rmtree(a.work, ignore_errors=True)
        os.makedirs(a.work)
        compare(a, a.work)
    else:
        work = tempfile.mkdtemp(prefix="dtm_jax_")
        try:
            compare(a, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def compare(a, work):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import st
    from jax_models import Model
    from oracle_cfg import lr_at

    defs = [x for d in a.defs for x in ("-D", d)]
    try:
        M = Model(a.dtmc, a.model, a.mesh, a.defs)
    except RuntimeError as e:
        fail(str(e))

    # dtm, single device: weights, batches, losses
    one = os.path.join(work, "one")
    run([a.dtmc, "build", a.model, "--mesh", "dp=1"] + defs + ["-o", one])
    ckpt, batches, log1 = (os.path.join(work, n) for n in ("ckpt", "batches", "one.jsonl"))
    run([one, "--steps", str(a.steps), "--save", ckpt, "--dump-batches", batches,
         "--log", log1, "-q"])
    runs = [("dtm dp=1", read_log(log1))]

    # dtm on the mesh, when multi-rank build exists
    spmd = os.path.join(work, "spmd")
    r = subprocess.run([a.dtmc, "build", a.model, "--mesh", a.mesh] + defs + ["-o", spmd],
                       capture_output=True, text=True)
    if r.returncode == 0:
        logm = os.path.join(work, "mesh.jsonl")
        run([spmd, "--steps", str(a.steps), "--log", logm, "-q"])
        runs.append((f"dtm {a.mesh}", read_log(logm)))
    else:
        msg = (r.stderr.strip().splitlines() or ["?"])[0]
        print(f"jax: note: dtm's {a.mesh} run not compared: `dtmc build --mesh {a.mesh}` "
              f"refused ({msg})")

    init, meta0 = st.load(os.path.join(ckpt, "step_000000", "rank00000.safetensors"))
    horizon = int(meta0.get("lr_decay_steps", M.cfg.get("steps", a.steps)))
    base_lr = float(np.float32(M.cfg["lr"]))  # the plan stores the rate as f32

    mesh = M.mesh()
    step = M.step_fn(mesh)
    ps, ss, bs, _, _ = M.abstract_args(mesh)
    missing = [k for k in ps if k not in init]
    if missing:
        fail(f"dtm's step-0 checkpoint lacks {missing}")
    p = {k: jax.device_put(jnp.asarray(init[k], jnp.float32), ps[k].sharding) for k in ps}
    s = {k: jax.device_put(jnp.zeros(v.shape, jnp.float32), v.sharding) for k, v in ss.items()}

    print(f"jax: {M.name} ({a.model} {' '.join(a.defs)}) on mesh {a.mesh} "
          f"({len(mesh.devices.flat)} CPU devices), jax {jax.__version__}, "
          f"{M.cfg['optimizer']}, clip {M.cfg.get('clip', 0)}, {a.steps} steps")
    for k, v in sorted(M.params.items()):
        print(f"  param {k:<20} {str(v['shape']):<12} {ps[k].sharding.spec}")
    for k, v in sorted(M.inputs.items()):
        print(f"  input {k:<20} {str(v['shape']):<12} {bs[k].sharding.spec}")
    for (n, op), pl in sorted(M.constraints.items()):
        print(f"  with_sharding_constraint {n} ({op}) {pl}")

    hdr = " ".join(f"{n:>16}" for n, _ in runs)
    print(f"{'step':>4} {'jax loss':>14} {hdr}  worst rel diff")
    worst, bad = 0.0, []
    for t in range(1, a.steps + 1):
        raw, _ = st.load(os.path.join(batches, f"step_{t:06d}.safetensors"))
        b = {k: jax.device_put(jnp.asarray(raw[k]), bs[k].sharding) for k in bs}
        lr = lr_at(M.cfg, base_lr, t, horizon)
        p, s, loss, _ = step(p, s, b, jnp.float32(t), jnp.float32(lr))
        jl = float(loss)
        rels = []
        for n, losses in runs:
            if t not in losses:
                bad.append(f"{n}: no loss logged for step {t}")
                continue
            rel = abs(losses[t] - jl) / max(abs(jl), 1e-30)
            rels.append(rel)
            if not rel <= LOSS_RTOL:
                bad.append(f"step {t}: {n} loss {losses[t]!r} vs jax {jl!r} (rel {rel:.2e})")
        w = max(rels) if rels else float("nan")
        worst = max(worst, w)
        cols = " ".join(f"{losses.get(t, float('nan')):>16.8f}" for _, losses in runs)
        print(f"{t:>4} {jl:>14.8f} {cols}  {w:.2e}")
    print(f"worst loss rel diff {worst:.3e} (limit {LOSS_RTOL:g})")
    if bad:
        fail("dtm and JAX disagree:\n  " + "\n  ".join(bad))
    print("jax: PASS")


if __name__ == "__main__":
    main()
