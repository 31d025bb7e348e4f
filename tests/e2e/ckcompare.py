"""ckcompare.py REF_STEP_DIR RUN_STEP_DIR [--rtol R] [--group-scale] - the gathered
weights of a multi-rank checkpoint equal a reference checkpoint's.

Both arguments are checkpoint step directories (DIR/step_NNNNNN) written by
a dtm binary's --save.  Each holds index.json (mesh, per-rank files, global
shapes, placements) and one safetensors file per rank with that rank's
shards.  Every tensor is reassembled into its global value from the
placements (per dim, the mesh axes splitting it, the first listed major;
shard i of a dim of n is rows [i*ceil(n/k), ...), torch.chunk's rule, as
runtime/exec.c's rt_shard_start).  Ranks holding the same shard (replicas
over the axes that do not split the tensor) must agree too: a dropped
gradient all_reduce shows up there even when one replica happens to match.

Tolerance (as tests/oracle/oracle.py): |diff| over the tensor's own
max|value| <= rtol for tensors of real scale; a tensor below 1e-3 of its
group's scale (params; opt.m; opt.v; ...) holds rounding noise (the key
bias layer.*.bk has an exactly zero gradient) and is held to its group's
scale instead.

--group-scale holds every tensor to its group's scale, not its own: for
bf16 runs, where a layout's other reduction order moves each value by
bf16 rounding (2^-8 relative), which Adam's normalisation turns into
steps of up to lr for elements with a tiny gradient, so a small tensor
(a bias, or the key bias whose exact gradient is 0) differs from the
reference by a large fraction of its own size but a small one of its
group's.

Outliers: Adam's first step moves a weight by lr * g / (|g| + eps), so an
element whose gradient is near eps (1e-8) after cancelling sums moves by
a fraction of lr that its gradient's last-bit rounding decides: summed in
another order (DDP's all_reduce, a TP shard's GEMM) a 2e-8 gradient that
is 4% off moves the weight 1% of lr differently, about 1e-5 of the
tensor's scale, while the moments agree to 1e-9.  Such a weight then
moves what it feeds: wpe[0, 12] of a random GPT with dropout, 2e-5 off
after step 1 (position 0's gradient near eps), had by step 10 moved
row 12 of layer 0's wqkv and its moments, 10 of 6912 elements at up to
1.7e-5 (dp=3 x tp=2, ZeRO-3, 4 micro-batches; every other element within
1e-5, the loss within 8.6e-8).  So a few elements (at most
max(1, 0.5%) of a tensor) may exceed rtol, up to 10 * rtol, and each is
listed.  A dropped or wrong collective moves whole tensors, far
past both limits.  Exit status 0 when everything agrees, 1 otherwise.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
import st  # noqa: E402  (tests/oracle/st.py: a minimal safetensors reader)


def parse_placement(text, ndim):
    """'[(dp, tp), _] partial(tp)' -> [['dp', 'tp'], []] (per dim, major first)."""
    lo, hi = text.index("["), text.index("]")
    body, dims, depth, cur = text[lo + 1:hi], [], 0, ""
    for ch in body:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            dims.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        dims.append(cur)
    out = []
    for d in dims:
        d = d.strip().strip("()")
        out.append([a.strip() for a in d.split(",") if a.strip() and a.strip() != "_"])
    while len(out) < ndim:
        out.append([])
    return out


def coords_of(rank, sizes):
    c = [0] * len(sizes)
    for a in range(len(sizes) - 1, -1, -1):
        c[a] = rank % sizes[a]
        rank //= sizes[a]
    return c


def load_global(step_dir):
    """{name: global array}, plus a list of replica disagreements."""
    with open(os.path.join(step_dir, "index.json")) as f:
        ix = json.load(f)
    names, sizes = ix["mesh"]["axes"], ix["mesh"]["sizes"]
    files = [st.load(os.path.join(step_dir, fn))[0] for fn in ix["files"]]
    out, issues = {}, []
    for name, t in ix["tensors"].items():
        shape = t["shape"]
        split = parse_placement(t.get("placement") or "[]", len(shape))
        g = np.zeros(shape, dtype=np.float64)
        seen = {}
        # under a pipeline (pp > 1) a rank holds its own stage's tensors
        # only; every shard must still come from some rank
        pipelined = "pp" in names and sizes[names.index("pp")] > 1
        parts_total = 1
        for axes in split:
            for a in axes:
                parts_total *= sizes[names.index(a)] if len(files) > 1 else 1
        for r, tensors in enumerate(files):
            if name not in tensors:
                if not pipelined:
                    issues.append(f"{name}: missing from {ix['files'][r]}")
                continue
            local = tensors[name].astype(np.float64)
            c = coords_of(r, sizes) if len(files) > 1 else [0] * len(sizes)
            sl, key = [], []
            for d, axes in enumerate(split):
                parts, idx = 1, 0
                for a in axes:
                    k = names.index(a)
                    parts, idx = parts * sizes[k], idx * sizes[k] + c[k]
                if len(files) == 1:
                    parts, idx = 1, 0
                chunk = -(-shape[d] // parts)
                start = min(idx * chunk, shape[d])
                sl.append(slice(start, start + local.shape[d]))
                key.append(idx)
            key = tuple(key)
            if key in seen:
                ref = seen[key]
                scale = float(np.max(np.abs(ref))) if ref.size else 0.0
                diff = float(np.max(np.abs(ref - local))) if ref.size else 0.0
                if diff > 1e-6 * max(scale, 1e-30):
                    issues.append(f"{name}: rank {r}'s replica differs from rank "
                                  f"{seen[key + ('rank',)]}'s by {diff:.3e} (max |value| "
                                  f"{scale:.3e})")
                continue
            seen[key], seen[key + ("rank",)] = local, r
            g[tuple(sl)] = local
        nkeys = sum(1 for k in seen if k[-1:] != ("rank",))
        if nkeys != parts_total:
            issues.append(f"{name}: {nkeys} of its {parts_total} shards are in the checkpoint")
        out[name] = g
    return out, issues


def group(k):
    return ".".join(k.split(".")[:2]) if k.startswith("opt.") else "param"


def main():
    args = sys.argv[1:]
    rtol = 1e-5
    if "--rtol" in args:
        i = args.index("--rtol")
        rtol = float(args[i + 1])
        del args[i:i + 2]
    by_group = "--group-scale" in args
    if by_group:
        args.remove("--group-scale")
    if len(args) != 2:
        sys.exit("usage: ckcompare.py REF_STEP_DIR RUN_STEP_DIR [--rtol R] [--group-scale]")
    ref, ref_issues = load_global(args[0])
    got, issues = load_global(args[1])
    issues = ref_issues + issues
    scale = {}
    for k, v in ref.items():
        if v.size:
            scale[group(k)] = max(scale.get(group(k), 0.0), float(np.max(np.abs(v))))
    worst, worst_k, outliers = 0.0, "-", []
    for k in sorted(ref):
        if k not in got:
            issues.append(f"{k}: not in {args[1]}")
            continue
        a, b = ref[k], got[k]
        if a.shape != b.shape:
            issues.append(f"{k}: shape {list(a.shape)} vs {list(b.shape)}")
            continue
        if not a.size:
            continue
        own_max = float(np.max(np.abs(a)))
        gmax = scale.get(group(k), 0.0)
        noise = by_group or own_max < 1e-3 * gmax
        ref_scale = gmax if noise else own_max
        rel = np.abs(a - b) / (ref_scale if ref_scale > 0 else 1.0)
        over = np.argwhere(~(rel <= rtol))
        inlier = float(np.max(np.where(rel <= rtol, rel, 0.0)))
        if inlier > worst:
            worst, worst_k = inlier, k
        what = "group" if noise else "own"
        for i in over[:8]:
            i = tuple(int(x) for x in i)
            outliers.append(f"{k}{list(i)}: {a[i]:.9g} vs {b[i]:.9g}, {rel[i]:.3e} of its "
                            f"{what} max |value|")
        if len(over) > max(1, a.size // 200) or not float(np.max(rel)) <= 10 * rtol:
            issues.append(f"{k}: {len(over)} of {a.size} elements differ by more than {rtol:g} "
                          f"of its {what} max |value| (worst {float(np.max(rel)):.3e})")
    for k in sorted(got):
        if k not in ref:
            issues.append(f"{k}: only in {args[1]}")
    print(f"ckcompare: {len(ref)} tensors, worst relative diff {worst:.3e} ({worst_k}; "
          f"limit {rtol:g})")
    if outliers:
        print("ckcompare: elements past the limit (Adam near eps; see the file comment):\n  " +
              "\n  ".join(outliers))
    if issues:
        print("ckcompare: FAIL\n  " + "\n  ".join(issues))
        sys.exit(1)


if __name__ == "__main__":
    main()
