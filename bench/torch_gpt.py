#!/usr/bin/env python3
"""torch_gpt.py - PyTorch eager baseline for bench/train_bench.sh.

Trains models/gpt.dtm's GPT (tests/oracle/torch_models.py, the same model the
oracle checks dtm against) in f32 with the model's optimizer (AdamW,
clip_grad_norm_), on random tokens of the model's batch shape, and prints
one JSON line: {"impl": "pytorch", "tokens_per_s": ..., ...}.  The rate is
the median of the timed steps after --warmup untimed ones.

  torch_gpt.py --dtmc build/dtmc [--threads N] [--steps 50] [-D k=v ...]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gptcfg  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch_models as tm  # noqa: E402


def blas_in_use():
    """The BLAS library this process mapped (Debian's torch uses the generic
    libblas.so.3, which must resolve to OpenBLAS)."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1]
            if "blas" in os.path.basename(p):
                libs.add(p)
    return sorted(libs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtmc", required=True)
    ap.add_argument("--model", default=os.path.join(gptcfg.ROOT, "models", "gpt.dtm"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("-D", dest="defs", action="append", default=[])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = gptcfg.load(a.dtmc, a.model, a.defs)
    tr = cfg["train"]
    rng = np.random.default_rng(0)
    init = {}
    for name, p in cfg["params"].items():
        shape, kind = p["shape"], p["init"]
        if kind == "ones":
            init[name] = np.ones(shape, np.float32)
        elif kind == "zeros":
            init[name] = np.zeros(shape, np.float32)
        else:
            init[name] = gptcfg.normal_init(rng, shape, kind)
    params = tm.make_params(init)
    opt = tm.make_optimizer(params, tr)
    ps = list(params.values())
    B, T, V = cfg["batch"], cfg["ctx"], cfg["vocab"]
    times, losses = [], []
    for step in range(a.warmup + a.steps):
        toks = rng.integers(0, V, (B, T + 1), dtype=np.int32)
        batch = {"tokens": toks[:, :-1], "targets": toks[:, 1:]}
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = tm.lr_at(tr, float(tr["lr"]), step + 1, int(tr.get("steps", 100)))
        opt.zero_grad(set_to_none=True)
        loss = tm.gpt_loss(params, batch, cfg["heads"], cfg["eps"])
        loss.backward()
        if float(tr.get("clip", 0) or 0) > 0:
            torch.nn.utils.clip_grad_norm_(ps, float(tr["clip"]))
        opt.step()
        losses.append(float(loss))  # also syncs, like dtm's per-step loss read
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"impl": "pytorch", "version": torch.__version__,
                      "threads": torch.get_num_threads(), "tokens_per_step": B * T,
                      "tokens_per_s": B * T / med, "ms_per_step": med * 1e3,
                      "first_loss": losses[0], "last_loss": losses[-1],
                      "blas": blas_in_use()}))


if __name__ == "__main__":
    main()
