#!/usr/bin/env python3
"""jax_collectives.py - the collectives of one training step, dtm against
JAX/GSPMD, side by side (issue 4 point 7; explained in bench/README.md).

  JAX_VENV/bin/python bench/jax_collectives.py [--dtmc build/dtmc] [--mesh dp=2,tp=2]
                      [--detail] [-D k=v ...] [MODEL.dtm ...]     (default: mlp, gpt)

dtm: `dtmc print --after=partition MODEL --mesh MESH`, the per-rank program
of one step: every all_reduce, all_gather, reduce_scatter, all_to_all and
shard_slice node, its mesh axes and its operand's local shape.

JAX: the same model and train step as tests/jax/jax_spmd.py (placements from
the .dtm annotations as NamedShardings, with_sharding_constraint on annotated
intermediates) on MESH simulated with
XLA_FLAGS=--xla_force_host_platform_device_count=N; the text of
jit(step).lower(...).compile() (after XLA's SPMD partitioner and its
collective combiners): every all-reduce, all-gather, reduce-scatter,
all-to-all and collective-permute (or its -start), its operands' per-device
shapes (a combined all-reduce has several) and its replica groups, mapped
back to the mesh axes they span.

Bytes: "in" is the local input (operand) bytes per rank; "ring" the bytes
one rank sends per step with ring algorithms (REFERENCE.md): all_reduce
2(N-1)/N*in, all_gather (N-1)*in (= (N-1)/N of the gathered result),
reduce_scatter and all_to_all (N-1)/N*in, collective-permute in, shard_slice 0
(a local slice), N the size of the group.  Every figure is computed here
from the two programs, nothing is typed in.
"""
import argparse
import math
import os
import re
import sys
from collections import OrderedDict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "jax"))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))

BYTES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "s32": 4, "i32": 4, "u32": 4, "s64": 8,
         "pred": 1, "s8": 1, "u8": 1}
KINDS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
         "shard_slice"]


def ring_bytes(kind, inb, n):
    if n <= 1:
        return 0
    return {"all_reduce": 2 * (n - 1) / n * inb, "all_gather": (n - 1) * inb,
            "reduce_scatter": (n - 1) / n * inb, "all_to_all": (n - 1) / n * inb,
            "collective_permute": inb, "shard_slice": 0}[kind]


def fmt_shape(dt, shape):
    return f"{dt}[{','.join(str(x) for x in shape)}]"


# ---------------- dtm ----------------
def dtm_collectives(dtmc, model, mesh, defs):
    from jax_models import dtmc_text, parse_values
    sizes = dict((k, int(v)) for k, v in (kv.split("=") for kv in mesh.split(",")))
    vals = parse_values(dtmc_text(dtmc, model, mesh, "partition", defs))
    by_id = {v["id"]: v for v in vals}
    out = []
    for v in vals:
        if v["op"] not in KINDS:
            continue
        src = by_id[int(re.match(r"%(\d+)", v["attrs"]).group(1))]
        axes = tuple(a.strip() for a in re.search(r"axes = \(([^)]*)\)", v["attrs"])
                     .group(1).split(","))
        n = math.prod(sizes[a] for a in axes)
        inb = math.prod(src["shape"]) * BYTES[src["dtype"]]
        what = v["name"] or f"%{v['id']} from {v['origin']}"
        out.append({"kind": v["op"], "axes": "+".join(axes), "n": n, "in": inb,
                    "shapes": [fmt_shape(src["dtype"], src["shape"])], "what": what})
    return out


# ---------------- JAX ----------------
_INSTR = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\([^=]*?\)|\S+) ([\w\-]+)\((.*?)\)(.*)$")
_TYPE = re.compile(r"(\w+)\[([\d,]*)\]")


def hlo_groups(attrs, ndev):
    """The device groups of a collective's replica_groups (any of XLA's
    three spellings), as a list of tuples of device ids; None if unknown."""
    import numpy as np
    m = re.search(r"replica_groups=\{(\{[\d,]*\}(?:,\{[\d,]*\})*)\}", attrs)
    if m:
        return [tuple(int(x) for x in g.split(",") if x) for g in re.findall(r"\{([\d,]*)\}",
                                                                             m.group(1))]
    if re.search(r"replica_groups=\{\}", attrs):
        return [tuple(range(ndev))]
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", attrs)
    if m:
        ids = np.arange(ndev).reshape([int(x) for x in m.group(3).split(",")])
        if m.group(4):
            ids = ids.transpose([int(x) for x in m.group(4).split(",")])
        return [tuple(int(x) for x in g) for g in ids.reshape(int(m.group(1)), int(m.group(2)))]
    m = re.search(r"replica_groups=mesh\[([^\]]*)\](?:, device_ids=\(\[([\d,]+)\]"
                  r"(?:T\(([\d,]+)\))?\))? \{([^}]*)\}", attrs)
    if m:
        axes = [(a, int(s)) for a, s in re.findall(r"'(\w+)'=(\d+)", m.group(1))]
        names = [a for a, _ in axes]
        ids = np.arange(ndev)
        if m.group(2):
            ids = ids.reshape([int(x) for x in m.group(2).split(",")])
            if m.group(3):
                ids = ids.transpose([int(x) for x in m.group(3).split(",")])
        ids = ids.reshape([s for _, s in axes])
        sel = re.findall(r"'(\w+)'", m.group(4))
        if any(s not in names for s in sel):
            return None  # sub-axes: not spelled out here
        grp = [names.index(s) for s in sel]
        rest = [i for i in range(len(names)) if i not in grp]
        ids = ids.transpose(rest + grp).reshape(-1, math.prod(axes[i][1] for i in grp) or 1)
        return [tuple(int(x) for x in g) for g in ids]
    return None


def axis_name(groups, mesh):
    """'dp', 'tp', 'dp+tp' ... : the mesh axes a set of device groups spans."""
    import itertools

    import numpy as np
    if groups is None:
        return "?"
    names = list(mesh.axis_names)
    ids = np.arange(mesh.devices.size).reshape(mesh.devices.shape)
    want = sorted(tuple(sorted(g)) for g in groups)
    for r in range(1, len(names) + 1):
        for sub in itertools.combinations(range(len(names)), r):
            rest = [i for i in range(len(names)) if i not in sub]
            g = ids.transpose(rest + list(sub)).reshape(-1, math.prod(ids.shape[i] for i in sub))
            if sorted(tuple(sorted(int(x) for x in row)) for row in g) == want:
                return "+".join(names[i] for i in sub)
    if all(len(g) == 1 for g in groups):
        return "none"
    return "groups" + str(groups)


def jax_collectives(model, mesh_spec, dtmc, defs, dump=None):
    from jax_models import Model
    M = Model(dtmc, model, mesh_spec, defs)
    mesh = M.mesh()
    text = M.step_fn(mesh).lower(*M.abstract_args(mesh)).compile().as_text()
    if dump:
        with open(dump, "w") as f:
            f.write(text)
    types, instrs = {}, []
    for line in text.splitlines():
        m = _INSTR.match(re.sub(r"/\*.*?\*/", "", line))
        if m:
            types[m.group(1)] = m.group(2)
            instrs.append(m)
    hlo_kind = {"all-reduce": "all_reduce", "all-gather": "all_gather",
                "reduce-scatter": "reduce_scatter", "all-to-all": "all_to_all",
                "collective-permute": "collective_permute"}
    out = []
    for m in instrs:
        op = m.group(3)
        base = op[:-6] if op.endswith("-start") else op
        if base not in hlo_kind:
            continue
        kind = hlo_kind[base]
        operands = [o.strip().lstrip("%") for o in m.group(4).split(",") if o.strip()]
        shapes, inb = [], 0
        for o in operands:
            t = _TYPE.search(types.get(o, "?[]")) if o in types else None
            if not t:
                shapes.append("?")
                continue
            dims = [int(x) for x in t.group(2).split(",") if x]
            shapes.append(fmt_shape(t.group(1), dims))
            inb += math.prod(dims) * BYTES.get(t.group(1), 0)
        attrs = m.group(5)
        if kind == "collective_permute":
            pairs = re.search(r"source_target_pairs=\{([^}]*(?:\}[^}]*)*?)\}\}?", attrs)
            axes, n = "pairs", 2
            if pairs:
                axes = "pairs " + pairs.group(1)[:40]
        else:
            groups = hlo_groups(attrs, mesh.devices.size)
            axes = axis_name(groups, mesh)
            n = len(groups[0]) if groups else 0
        meta = re.search(r'op_name="([^"]*)"', attrs)
        out.append({"kind": kind, "axes": axes, "n": n, "in": inb, "shapes": shapes,
                    "what": f"%{m.group(1)} {meta.group(1) if meta else ''}"})
    return M, out


def summarize(rows):
    s = OrderedDict()
    for r in rows:
        k = (r["kind"], r["axes"])
        e = s.setdefault(k, {"ops": 0, "tensors": 0, "in": 0, "ring": 0.0})
        e["ops"] += 1
        e["tensors"] += len(r["shapes"])
        e["in"] += r["in"]
        e["ring"] += ring_bytes(r["kind"], r["in"], r["n"])
    return s


def report(name, mesh, dtm, jx, detail):
    ds, js = summarize(dtm), summarize(jx)
    keys = sorted(set(ds) | set(js), key=lambda k: (KINDS.index(k[0]), k[1]))
    print(f"\n## {name} on mesh {mesh}: collectives of one training step (per rank)\n")
    print(f"| collective | axes | dtm ops | dtm in B | dtm ring B | jax ops (tensors) "
          f"| jax in B | jax ring B |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    z = {"ops": 0, "tensors": 0, "in": 0, "ring": 0.0}
    tot = {"d": dict(z), "j": dict(z)}
    for k in keys:
        d, j = ds.get(k, z), js.get(k, z)
        for key in z:  # shard_slice is a local slice: not in the totals
            tot["d"][key] += d[key] if k[0] != "shard_slice" else 0
            tot["j"][key] += j[key] if k[0] != "shard_slice" else 0
        print(f"| {k[0]} | {k[1]} | {d['ops']} | {d['in']:,} | {d['ring']:,.0f} | "
              f"{j['ops']} ({j['tensors']}) | {j['in']:,} | {j['ring']:,.0f} |")
    d, j = tot["d"], tot["j"]
    print(f"| **total** (communicating) | | {d['ops']} | {d['in']:,} | {d['ring']:,.0f} | "
          f"{j['ops']} ({j['tensors']}) | {j['in']:,} | {j['ring']:,.0f} |")
    if detail:
        for label, rows in (("dtm", dtm), ("jax", jx)):
            print(f"\n{label} {name}, in program order:")
            for r in rows:
                print(f"  {r['kind']:<18} {r['axes']:<6} {r['in']:>9,} B  "
                      f"{' '.join(r['shapes'])[:60]:<44} {r['what'][:110]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--dtmc", default=os.path.join(ROOT, "build", "dtmc"))
    ap.add_argument("--mesh", default="dp=2,tp=2")
    ap.add_argument("--detail", action="store_true", help="list every collective")
    ap.add_argument("--dump-hlo", metavar="DIR", help="write JAX's compiled HLO text here")
    ap.add_argument("-D", dest="defs", action="append", default=[])
    a = ap.parse_args()
    models = a.models or [os.path.join(ROOT, "models", n) for n in ("mlp.dtm", "gpt.dtm")]
    ndev = math.prod(int(kv.split("=")[1]) for kv in a.mesh.split(","))
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={ndev}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax
    except ImportError:
        sys.exit("jax_collectives: cannot import jax; run it with the venv's python "
                 "(~/.cache/dtm-bench/jax-venv/bin/python; tests/jax/run.sh creates it)")
    print(f"jax {jax.__version__} ({jax.devices()[0].platform}, {ndev} simulated devices); "
          f"dtm: {a.dtmc}; defs: {' '.join(a.defs) or '(model defaults)'}")
    for model in models:
        dump = None
        if a.dump_hlo:
            os.makedirs(a.dump_hlo, exist_ok=True)
            dump = os.path.join(a.dump_hlo, os.path.basename(model) + ".hlo.txt")
        M, jx = jax_collectives(model, a.mesh, a.dtmc, a.defs, dump)
        dtm = dtm_collectives(a.dtmc, model, a.mesh, a.defs)
        report(M.name, a.mesh, dtm, jx, a.detail)


if __name__ == "__main__":
    main()
