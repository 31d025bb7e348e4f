#!/usr/bin/env python3
"""torch_gpt.py - PyTorch eager baseline for bench/train_bench.sh and
scripts/gpu-check.

Trains models/gpt.dtm's GPT (tests/oracle/torch_models.py, the same model the
oracle checks dtm against) with the model's optimizer (AdamW,
clip_grad_norm_), on random tokens of the model's batch shape, and prints
one JSON line: {"impl": "pytorch", "tokens_per_s": ..., ...}.  The rate is
the median of the timed steps after --warmup untimed ones.

  torch_gpt.py --dtmc build/dtmc [--threads N] [--steps 50] [-D k=v ...]
  torch_gpt.py --dtmc build/dtmc --device cuda --precision bf16 [--attention sdpa]
  torch_gpt.py --dtmc build/dtmc --compile        (torch.compile: PyTorch >= 2.0)

On the CPU it trains in f32.  --device cuda trains on the GPU; --precision
bf16 runs the forward and backward under torch.autocast(bfloat16) with f32
master weights and optimizer state, as dtm's `precision bf16` does.
--attention math (default) is the oracle's attention (scores, mask,
softmax, as written); sdpa is F.scaled_dot_product_attention (fused).
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gptcfg  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
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


def device_attention(q, k, v, heads, causal=True):
    """torch_models.attention with its mask made on the tensors' device."""
    B, T, D = q.shape
    hd = D // heads
    q = q.view(B, T, heads, hd).transpose(1, 2)
    k = k.view(B, T, heads, hd).transpose(1, 2)
    v = v.view(B, T, heads, hd).transpose(1, 2)
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    if causal:
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    a = torch.softmax(s, dim=-1) @ v
    return a.transpose(1, 2).reshape(B, T, D)


def sdpa_attention(q, k, v, heads, causal=True):
    B, T, D = q.shape
    hd = D // heads
    q, k, v = (t.view(B, T, heads, hd).transpose(1, 2) for t in (q, k, v))
    a = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return a.transpose(1, 2).reshape(B, T, D)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtmc", required=True)
    ap.add_argument("--model", default=os.path.join(gptcfg.ROOT, "models", "gpt.dtm"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("-D", dest="defs", action="append", default=[])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--attention", choices=["math", "sdpa"], default="math")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the forward and loss (PyTorch >= 2.0)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_gpt.py: --device cuda: torch %s has no usable CUDA device "
                 "(torch.cuda.is_available() is False)" % torch.__version__)
    if a.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        sys.exit("torch_gpt.py: --attention sdpa: torch %s has no "
                 "F.scaled_dot_product_attention (PyTorch 2.0 or later)" % torch.__version__)
    dev = torch.device(a.device)
    if a.device == "cuda" or a.attention == "sdpa":
        tm.attention = sdpa_attention if a.attention == "sdpa" else device_attention
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
    params = {k: v.detach().to(dev).requires_grad_()
              for k, v in tm.make_params(init).items()}
    opt = tm.make_optimizer(params, tr)
    amp = (torch.autocast(a.device, dtype=torch.bfloat16) if a.precision == "bf16"
           else contextlib.nullcontext())
    ps = list(params.values())
    loss_fn = tm.gpt_loss
    if a.compile:
        if not hasattr(torch, "compile"):
            sys.exit("torch_gpt.py: --compile: torch %s has no torch.compile "
                     "(PyTorch 2.0 or later)" % torch.__version__)
        loss_fn = torch.compile(tm.gpt_loss)
    B, T, V = cfg["batch"], cfg["ctx"], cfg["vocab"]
    times, losses = [], []
    for step in range(a.warmup + a.steps):
        toks = rng.integers(0, V, (B, T + 1), dtype=np.int32)
        tt = torch.from_numpy(toks).to(dev)
        batch = {"tokens": tt[:, :-1], "targets": tt[:, 1:]}
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = tm.lr_at(tr, float(tr["lr"]), step + 1, int(tr.get("steps", 100)))
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = loss_fn(params, batch, cfg["heads"], cfg["eps"])
        loss.backward()
        if float(tr.get("clip", 0) or 0) > 0:
            torch.nn.utils.clip_grad_norm_(ps, float(tr["clip"]))
        opt.step()
        losses.append(float(loss))  # also syncs, like dtm's per-step loss read
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    extra = {}
    if a.device == "cuda":
        extra = {"gpu": torch.cuda.get_device_name(0),
                 "max_memory_gb": torch.cuda.max_memory_allocated() / 2**30}
    print(json.dumps({"impl": "pytorch", "version": torch.__version__,
                      "device": a.device, "precision": a.precision,
                      "attention": a.attention, "compile": a.compile, **extra,
                      "threads": torch.get_num_threads(), "tokens_per_step": B * T,
                      "tokens_per_s": B * T / med, "ms_per_step": med * 1e3,
                      "first_loss": losses[0], "last_loss": losses[-1],
                      "blas": blas_in_use() if a.device == "cpu" else []}))


if __name__ == "__main__":
    main()
