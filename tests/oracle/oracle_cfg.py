"""oracle_cfg.py - reads what the oracle and the benchmarks need from
`dtmc print MODEL` (std lib only, so tools without PyTorch can use it):
the module name, the train section's key/values, the attention heads and
the layernorm eps (and for a mixture of experts topk's k and the capacity)."""
import math
import re
import struct


def parse_value(v):
    v = v.strip()
    if v.startswith('"'):
        return v.strip('"')
    if v in ("true", "false"):
        return v == "true"
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def read_model(text):
    """The module name, train key/values, heads, layernorm and rmsnorm eps,
    rope's theta, topk's k and moe_slot's capacity from `dtmc print` output."""
    cfg, info = {}, {"heads": None, "eps": 1e-5, "model": None, "theta": None,
                     "rms_eps": None, "topk": None, "capacity": None}
    for line in text.splitlines():
        if line.startswith("module "):
            info["model"] = line.split()[1]
        elif line.startswith("train "):
            # key = value pairs; values may be (a, b) tuples with commas
            for m in re.finditer(r'(\w+) = ("[^"]*"|\([^)]*\)|[^,]+)', line[6:]):
                cfg[m.group(1)] = parse_value(m.group(2))
        m = re.search(r"\battention\b.*\{heads = (\d+)", line)
        if m:
            info["heads"] = int(m.group(1))
        m = re.search(r"\blayernorm\b.*\{eps = ([^ ,}]+)", line)
        if m:
            info["eps"] = float(m.group(1))
        m = re.search(r"\brmsnorm\b.*\{eps = ([^ ,}]+)", line)
        if m:
            info["rms_eps"] = float(m.group(1))
        m = re.search(r"= topk %\d+ \{k = (\d+)", line)
        if m:
            info["topk"] = int(m.group(1))
        m = re.search(r"= moe_slot %\d+ \{.*capacity = (\d+)", line)
        if m:
            info["capacity"] = int(m.group(1))
        m = re.search(r"\brope\b.*\{heads = \d+, theta = ([^ ,}]+)", line)
        if m:
            info["theta"] = float(m.group(1))
    return cfg, info


def let_numbers(src, defs):
    """The `let` constants of a .dtm source that are plain numbers, with the
    -D name=value overrides applied (what the IR folds away, such as the
    aux loss weights)."""
    out = {}
    for line in src.splitlines():
        if line.startswith("let "):
            for m in re.finditer(r"(\w+) = ([-+0-9.eE]+)\s*(?:,|$|#)", line[4:]):
                out[m.group(1)] = float(m.group(2))
    for d in defs:
        k, v = d.split("=", 1)
        try:
            out[k.strip()] = float(v)
        except ValueError:  # an expression: not a plain number
            out.pop(k.strip(), None)
    return out


def f32(x):
    """x rounded to the nearest f32, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def lr_at(cfg, lr, t, horizon):
    """runtime/main.c's lr_at for 1-based step t: linear warmup then cosine
    to min_lr over `horizon` steps, computed in double, rounded to f32 once.
    lr is the peak rate as the binary holds it (an f32 value)."""
    if cfg.get("lr_schedule") != "cosine":
        return f32(lr)
    w, min_lr = int(cfg["warmup"]), f32(cfg["min_lr"])
    if w > 0 and t <= w:
        return f32(lr * t / w)
    if horizon <= w or t >= horizon:
        return min_lr
    prog = (t - w) / (horizon - w)
    return f32(min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * prog)))
