#!/usr/bin/env python3
"""attn_torch.py - PyTorch's CPU attention on attn_bench's shapes (issue 17
point 5): torch.nn.functional.scaled_dot_product_attention (PyTorch >= 2.0)
and the explicit softmax(Q K^T / sqrt(hd) + causal mask) V, ms per call and
GFLOP/s, forward and forward + backward, f32 (bf16 tensors with --bf16).

    attn_torch.py [--threads N] [--min-ms MS] [--no-causal] [--bf16] [B,H,T,HD[,KVH] ...]

Tensors are [B, H, T, HD], contiguous (PyTorch's layout; dtm's kernel reads
[B, T, H*HD]); with KVH < H, k and v are repeated to H heads first
(repeat_interleave, inside the timed call).  FLOPs as attn_bench.c counts
them: 4 * B * H * HD * pairs forward, 3.5x that forward + backward.  The
backward is one .backward(dy) through q, k and v.  Best of 3 runs of >= MS
after a warm-up call."""
import argparse
import math
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min-ms", type=float, default=300)
    ap.add_argument("--no-causal", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("shapes", nargs="*", default=["2,8,512,64", "2,8,2048,64"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    causal = not a.no_causal
    have_sdpa = hasattr(F, "scaled_dot_product_attention")
    dt = torch.bfloat16 if a.bf16 else torch.float32
    print("attn_torch: PyTorch %s, %d threads, %s, %s; best of 3 runs of >= %.0f ms%s" %
          (torch.__version__, torch.get_num_threads(), "bf16" if a.bf16 else "f32",
           "causal" if causal else "not causal",
           a.min_ms, "" if have_sdpa else "; no scaled_dot_product_attention (PyTorch < 2.0)"))
    print("%-22s %-5s %10s %9s %10s %9s" % ("B,H,T,hd,kvH", "impl", "fwd_ms", "fwd_GF/s",
                                            "fwdbwd_ms", "fb_GF/s"))
    for s in a.shapes:
        v = [int(x) for x in s.split(",")]
        B, H, T, hd = v[:4]
        G = v[4] if len(v) > 4 else H
        g = torch.Generator().manual_seed(0)
        q = torch.rand(B, H, T, hd, generator=g) * 2 - 1
        k = torch.rand(B, G, T, hd, generator=g) * 2 - 1
        vv = torch.rand(B, G, T, hd, generator=g) * 2 - 1
        dy = torch.rand(B, H, T, hd, generator=g) * 2 - 1
        q, k, vv, dy = (x.to(dt) for x in (q, k, vv, dy))
        mask = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None
        scale = 1.0 / math.sqrt(hd)

        def kv(x):
            return x if G == H else x.repeat_interleave(H // G, dim=1)

        def sdpa(q, k, v):
            return F.scaled_dot_product_attention(q, kv(k), kv(v), is_causal=causal)

        def math_(q, k, v):
            s = q @ kv(k).transpose(-1, -2) * scale
            if mask is not None:
                s = s.masked_fill(mask, float("-inf"))
            return torch.softmax(s, dim=-1) @ kv(v)

        pairs = T * (T + 1) / 2 if causal else T * T
        fl = 4.0 * B * H * hd * pairs
        impls = ([("sdpa", sdpa)] if have_sdpa else []) + [("math", math_)]
        for name, fn in impls:
            def fwd():
                with torch.no_grad():
                    fn(q, k, vv)

            qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, vv))

            def fwdbwd():
                for x in (qg, kg, vg):
                    x.grad = None
                fn(qg, kg, vg).backward(dy)

            tf, tb = timeit(fwd, a.min_ms), timeit(fwdbwd, a.min_ms)
            print("%-22s %-5s %10.2f %9.1f %10.2f %9.1f" %
                  ("%d,%d,%d,%d,%d" % (B, H, T, hd, G), name, tf * 1e3, fl / tf * 1e-9,
                   tb * 1e3, 3.5 * fl / tb * 1e-9), flush=True)


def timeit(fn, min_ms):
    fn()
    best = float("inf")
    for _ in range(3):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            t = time.perf_counter() - t0
            if t * 1e3 >= min_ms:
                break
        best = min(best, t / n)
    return best


if __name__ == "__main__":
    main()
