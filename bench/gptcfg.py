"""gptcfg.py - the GPT configuration the benchmarks share: sizes, heads and
the train section of models/gpt.dtm as `dtmc print` shows them, so dtm,
PyTorch and JAX train the same model with the same optimizer."""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))


def load(dtmc, model, defs=()):
    """{'params': {name: shape}, 'batch', 'ctx', 'vocab', 'd', 'heads',
    'layers', 'eps', 'train': {...}} of MODEL at --mesh dp=1."""
    cmd = [dtmc, "print", model, "--mesh", "dp=1"] + [x for d in defs for x in ("-D", d)]
    text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    from oracle_cfg import read_model
    train, info = read_model(text)
    params = {}
    for m in re.finditer(r'= param \{init = ([^}]*)\} "([^"]+)" : f32\[([\d, ]*)\]', text):
        params[m.group(2)] = {"shape": [int(x) for x in m.group(3).split(",")],
                              "init": m.group(1)}
    m = re.search(r'= input "tokens" : i32\[(\d+), (\d+)\]', text)
    vocab, d = params["wte"]["shape"]
    return {"params": params, "batch": int(m.group(1)), "ctx": int(m.group(2)),
            "vocab": vocab, "d": d, "heads": info["heads"], "eps": info["eps"],
            "layers": sum(1 for k in params if k.endswith(".wq")), "train": train}


def normal_init(rng, shape, kind):
    """normal(mean, std) as `dtmc print` spells it -> a numpy f32 array."""
    m = re.match(r"normal\(([-+\d.e]+), ([-+\d.e]+)\)", kind)
    mean, std = (float(m.group(1)), float(m.group(2))) if m else (0.0, 0.02)
    return (mean + std * rng.standard_normal(shape)).astype("float32")


if __name__ == "__main__":
    print(json.dumps(load(sys.argv[1], sys.argv[2], sys.argv[3:]), indent=1))
