#!/usr/bin/env python3
"""actions.py - the cost model's price of each kernel and GEMM against its
measured time (issue 21's per-action check).

  dtmc build M.dtm --mesh ... -o m && ./m --steps 8 --profile-actions prof.tsv
  dtmc inspect M.dtm --mesh ... --hw HW.txt --trace trace.json
  bench/actions.py prof.tsv trace.json [--top 15]

The profile is rank 0's actions (the runtime's --profile-actions: mean
seconds per step), the trace the cost model's simulated timeline; both
number a stage's actions the same way (`args.action`), so each kernel and
GEMM pairs up.  Prints per class (a GEMM's shape m x n x k, a kernel's op
or `fused.ROOT`) the measured and predicted milliseconds per step and their
ratio, then the actions whose measured time is furthest from the price.
Standard library only."""
import argparse
import collections
import json
import sys


def load_profile(path):
    acts = {}
    with open(path) as f:
        for line in f:
            if line.startswith('#') or not line.strip():
                continue
            c = line.rstrip('\n').split('\t')
            i, kind, m, n, k, batch = int(c[0]), c[1], c[6], c[7], c[8], c[9]
            name, label = c[12], c[13] if len(c) > 13 else ''
            if kind == 'gemm':
                cls = f'gemm {m}x{n}x{k}' + (f' b{batch}' if batch not in ('0', '1') else '')
            elif name == 'fused':
                cls = 'fused.' + label.split(' ')[0]
            else:
                cls = name
            acts[i] = (cls, float(c[11]), label, int(c[10]))
    return acts


def load_trace(path):
    with open(path) as f:
        events = json.load(f)['traceEvents']
    # rank 0's compute track is tid 0
    return {e['args']['action']: e['dur'] * 1e-6 for e in events
            if e.get('ph') == 'X' and e.get('tid') == 0 and 'action' in e.get('args', {})}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('profile')
    ap.add_argument('trace')
    ap.add_argument('--top', type=int, default=15)
    args = ap.parse_args()
    acts, pred = load_profile(args.profile), load_trace(args.trace)
    both = [i for i in acts if i in pred]
    if not both:
        sys.exit('actions.py: no action of the profile is in the trace '
                 '(the same model, mesh and settings?)')
    cls = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for i in both:
        c = cls[acts[i][0]]
        c[0] += 1
        c[1] += acts[i][1]
        c[2] += pred[i]
    meas = sum(c[1] for c in cls.values())
    prd = sum(c[2] for c in cls.values())
    print(f'{len(both)} actions: measured {meas * 1e3:.2f} ms, predicted {prd * 1e3:.2f} ms, '
          f'measured / predicted {meas / prd if prd else float("inf"):.2f}')
    print(f'{"class":32} {"count":>6} {"meas ms":>9} {"pred ms":>9} {"m/p":>6}')
    for k, (cnt, m, p) in sorted(cls.items(), key=lambda kv: -kv[1][1]):
        print(f'{k[:32]:32} {cnt:6d} {m * 1e3:9.3f} {p * 1e3:9.3f} '
              f'{m / p if p else float("inf"):6.2f}')
    print(f'\nthe {args.top} actions furthest from their price (measured - predicted):')
    worst = sorted(both, key=lambda i: -abs(acts[i][1] - pred[i]))[:args.top]
    for i in worst:
        c, m, label, _ = acts[i]
        print(f'  #{i:<6d} {c[:28]:28} {m * 1e6:9.1f} us  pred {pred[i] * 1e6:9.1f} us  {label[:40]}')


if __name__ == '__main__':
    main()
