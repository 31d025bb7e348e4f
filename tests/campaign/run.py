#!/usr/bin/python3
"""run.py - random layouts of random-sized models against one device.

    tests/campaign/run.py [--mode equiv|resume|both] [--seed N] [--minutes M]
                          [--dtmc build/dtmc] [--mpirun /usr/bin/mpirun]
                          [--log FILE] [--models gpt,llama,mlp,moe,dropout,lm16]

Not a CI test (each run draws other cases; CI runs the fixed sets of
tests/e2e): a bug hunt to run on a quiet machine before a release and after
a change to partition, the pipeline or the runtime.  Each group draws a
model (models/gpt, llama, mlp, moe or tests/e2e/dropout), sizes for it
(vocab, ctx, batch, hidden dims the meshes do not divide: 250, 31, 9, ...),
a device count, and candidates from `dtmc sweep --json` on those devices
(every factorization, ZeRO stage, micro-batch count, schedule, recompute,
sequence and context parallelism it ranks), plus now and then one knob the
sweep does not vary (bucket_mb=0, recompute=layer, prefetch=2,
reshard_after_forward=false, schedule=zb).

  equiv   tests/e2e/equiv.sh on the group's layouts: 10 steps each against
          one device (losses, grad norms, eval losses, the final checkpoint,
          memory and collectives equal to inspect's); a third of the f32
          groups also runs its first layout under mpirun; an eighth in bf16,
          against one device's bf16 with loose limits (1e-2 loss, 3e-2 grad
          norm, each of the first step's at least, 5e-2 weights: these
          models are not the ones the suite's limits were measured on, and
          the MLP's are chaotic at lr 0.05); an eighth in f16, with the same
          limits.  A 16-bit layout now and then reduces its gradients in it
          (reduce_dtype) or keeps no f32 master copy (master_dtype), as its
          reference then does.  tests/e2e/lm16.dtm (no split contraction)
          draws bf16 two times in three and keeps equiv.sh's own limits
          for the loss and grad norm: one step within 1e-6 of one device,
          16-bit or not (no 16-bit reduce_dtype: that rounds partial sums);
          the weights within 1e-3 (1e-2 for a few elements), as a weight
          whose Adam step (gradient near eps) moved its f32 master across
          a bf16 boundary rounds one bf16 step apart (1 of 34 bf16 groups,
          seed 7: layer.3.w1[4, 9], 1.7e-4 of its group's max).  Not f16:
          its GEMMs widen to OpenBLAS's sgemm, whose result with a
          transposed B (dx = dy W^T) differs in the last bit with the row
          count (1105 of 1440 elements of a 144 x 10 x 32 product done as
          3 x 48 rows), and
          f16's 2^-11 rounding then flips an element now and then (5 of 41
          f16 groups, 0 of 84 bf16, which oneDNN's bf16 GEMM computes
          alike at any row count; seed 6).
  resume  builds up to 4 candidates (one a single rank), runs each 8 steps,
          then saves each at step 4 and resumes it on the others: steps 5-8
          equal the other layout's own 8 steps to 1e-5.  MoE's layouts of a
          group share one micro-batch count (its balancing loss is per
          micro-batch, so layouts with other counts train other functions).

A third of the groups clip the global gradient norm at 0.05 instead of 1.0
(every step clips: a grad norm missing a rank's part moves every weight).

Every model is a copy with Adam's eps raised from 1e-8 to 1e-5: at 1e-8 an
element whose gradient is about 1e-8 (a dead GELU unit of a random model)
takes a step of lr * g / (|g| + eps) that f32 summation order moves by a
percent, which ckcompare's 1e-5 of the tensor's max sees (measured: the
dropout GPT at vocab 250, ctx 17 on dp = 1 with 3 micro-batches, wproj off
by 1.2e-4 after one step; 2.1e-6 with eps 1e-5).  The copies' loss scale
starts at 256: under dynamic loss scaling from 65536 a layout skips other
steps than one device when a partial gradient fits f16 that the whole would
not (tests/e2e/loss_scale.sh); at 256 no step of these models overflows.

Output: one line per group (OK, FAIL, or SKIP where the sweep could not
place the sizes), a failing group's log tail, and the command that
reproduces it.  Exit status 1 when any group failed.
"""
import argparse
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ['gpt', 'llama', 'mlp', 'moe', 'dropout', 'lm16']


def draw_sizes(rng, model):
    c = rng.choice
    if model == 'mlp':
        return {'batch': c([16, 6, 9, 10, 12]), 'din': c([32, 5, 12]),
                'hidden': c([64, 48, 6, 10, 15]), 'dout': c([8, 3, 1])}
    if model == 'lm16':
        return {'vocab': c([20, 21, 64, 97]), 'ctx': c([10, 9, 16]), 'd': c([12, 16, 10]),
                'hidden': c([24, 10, 32]), 'layers': c([2, 3, 4]), 'batch': c([6, 5, 8, 9, 4])}
    d, heads = c([(48, 4), (48, 6), (64, 4), (48, 3), (32, 4)])
    s = {'vocab': c([256, 250, 251, 97, 64]), 'ctx': c([32, 30, 31, 17, 16]), 'd': d,
         'heads': heads, 'layers': c([2, 3]), 'batch': c([8, 6, 5, 9, 12, 4])}
    if model in ('llama', 'moe'):
        s['kv_heads'] = c([k for k in (1, 2, 3, 4, 6) if heads % k == 0])
    if model == 'moe':
        s['experts'] = c([4, 6, 3, 2])
        s['topk'] = min(c([1, 2]), s['experts'])
        s['shared'] = c([0, 1])
    if model == 'dropout':
        s['pdrop'] = c([0.1, 0.3])
    return s


def model_copy(model, work, rng):
    src = os.path.join(ROOT, f'tests/e2e/{model}.dtm' if model in ('dropout', 'lm16')
                       else f'models/{model}.dtm')
    text = open(src).read()
    if 'eps = 1e-8' in text:
        text = text.replace('eps = 1e-8', 'eps = 1e-5')
    # f16 groups: the dynamic loss scale starts at 256, not 65536, so no step
    # overflows on one device or on a layout (every setting read only under f16)
    if 'init_scale' not in text:  # (lm16 sets it itself)
        text = text.replace('train {', 'train {\n  init_scale 256', 1)
    note = ''
    if 'clip = 1.0' in text and rng.random() < 1 / 3:
        text, note = text.replace('clip = 1.0', 'clip = 0.05'), ' clip=0.05'
    path = os.path.join(work, f'{model}.dtm')
    open(path, 'w').write(text)
    return path, note


def candidates(args, path, sizes, devices, uneven):
    cmd = [args.dtmc, 'sweep', path, '--devices', str(devices), '--json', '--top', '100000',
           '-q', '--mem-limit', '0']
    for k, v in sizes.items():
        cmd += ['-D', f'{k}={v}']
    if uneven:
        cmd += ['--train', 'uneven_shards=true']
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[0] if p.stderr.strip() else 'sweep failed'
    return json.loads(p.stdout)['ranking'], None


def train_list(rng, cand, uneven, prec, model=''):
    tr = [t for t in cand['train']]
    cp = cand.get('context_parallel')
    if cp not in (None, 'none') and not any(t.startswith('context_parallel=') for t in tr):
        tr.append('context_parallel=' + cp)
    if uneven:
        tr.append('uneven_shards=true')
    if rng.random() < 0.5:
        knobs = ['bucket_mb=0', 'recompute=layer']
        if 'zero=3' in tr:
            knobs += ['prefetch=2', 'reshard_after_forward=false']
        if cand['mesh'].get('pp', 1) > 1 and not any('interleaved' in t for t in tr):
            knobs += ['schedule=zb'] * 2
        k = rng.choice(knobs)
        tr = [t for t in tr if t.split('=')[0] != k.split('=')[0]] + [k]
    if prec != 'f32':
        tr.append('precision=' + prec)
        for k in ('reduce_dtype', 'master_dtype'):
            if rng.random() < 0.3 and (k, model) != ('reduce_dtype', 'lm16'):
                tr.append(f'{k}={prec}')
    return tr


def mesh_text(cand):
    return ','.join(f'{a}={s}' for a, s in cand['mesh'].items())


def equiv_group(args, rng, model, work, out):
    sizes = draw_sizes(rng, model)
    devices = rng.choice([2, 3, 4, 4, 5, 6, 6, 8])
    uneven = model == 'mlp' or rng.random() < 0.6
    path, note = model_copy(model, work, rng)
    cands, why = candidates(args, path, sizes, devices, uneven)
    if not cands:
        out(f'SKIP {model} {sizes} on {devices}: {why or "no candidate"}')
        return True
    prec = rng.choice(['f32', 'bf16', 'bf16'] if model == 'lm16' else
                      ['f32'] * 6 + ['bf16', 'f16'])
    defs = 'def:' + '+'.join(f'{k}={v}' for k, v in sizes.items()) + ':'
    layouts = [defs + mesh_text(c) + '/' + '/'.join(train_list(rng, c, uneven, prec, model))
               for c in rng.sample(cands, min(len(cands), rng.choice([2, 3, 4])))]
    mpi = args.mpirun if prec == 'f32' and rng.random() < 0.3 else 'none'
    tols = '1e-6 1e-6 1e-3' if model == 'lm16' else '1e-2 3e-2 5e-2'
    env = dict(os.environ, DTM_EQUIV_LAYOUTS=' '.join(layouts), DTM_EQUIV_SRC=path,
               DTM_EQUIV_MPI_LAYOUTS=layouts[0] if mpi != 'none' else '',
               DTM_EQUIV_BF16_TOLS=tols)
    cmd = ['bash', 'tests/e2e/equiv.sh', args.dtmc, model, mpi, 'campaign']
    t0 = time.time()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    ok = p.returncode == 0
    out(f'{"OK" if ok else "FAIL"} equiv {model}{note} {time.time() - t0:.0f}s'
        f'{" mpi" if mpi != "none" else ""} {" ".join(layouts)}')
    if not ok:
        tail = (p.stdout[-1500:] + p.stderr[-2500:]).strip().replace('\n', '\n    ')
        out(f'    {tail}')
        out(f"    reproduce: DTM_EQUIV_SRC={path} DTM_EQUIV_LAYOUTS='{' '.join(layouts)}' "
            f"DTM_EQUIV_MPI_LAYOUTS='{env['DTM_EQUIV_MPI_LAYOUTS']}' "
            f"DTM_EQUIV_BF16_TOLS='{tols}' {' '.join(cmd[1:])}")
    return ok


def losses(path):
    got = {}
    for line in open(path):
        j = json.loads(line)
        if 'step' in j and 'loss' in j:
            got[j['step']] = j['loss']
    return got


def microbatches(cand):
    return next((t for t in cand['train'] if t.startswith('microbatches=')), 'microbatches=1')


def resume_group(args, rng, model, work, out):
    sizes = draw_sizes(rng, model)
    path, note = model_copy(model, work, rng)
    cands, why = candidates(args, path, sizes, rng.choice([2, 3, 4, 4, 6]), True)
    ones, _ = candidates(args, path, sizes, 1, True)
    if not cands:
        out(f'SKIP {model} {sizes}: {why or "no candidate"}')
        return True
    if model == 'moe':
        # one micro-batch count for all: the balancing loss is per micro-batch
        m = microbatches(rng.choice(cands))
        cands = [c for c in cands if microbatches(c) == m]
        ones = [c for c in ones or [] if microbatches(c) == m]
    pick = rng.sample(cands, min(3, len(cands))) + (rng.sample(ones, 1) if ones else [])
    built = []
    for i, c in enumerate(pick):
        tr = train_list(rng, c, True, 'f32')
        cmd = [args.dtmc, 'build', path, '-o', f'{work}/b{i}', '--mesh', mesh_text(c)]
        for k, v in sizes.items():
            cmd += ['-D', f'{k}={v}']
        for t in tr:
            cmd += ['--train', t]
        what = mesh_text(c) + ' ' + ' '.join(tr)
        b = subprocess.run(cmd, capture_output=True, text=True)
        r = b.returncode == 0 and subprocess.run(
            [f'{work}/b{i}', '--steps', '8', '--log', f'{work}/b{i}.jsonl', '-q'],
            capture_output=True, timeout=1800).returncode == 0
        if not r:
            out(f'FAIL resume {model}{note} {sizes}: {what} does not build and run: {b.stderr[:400]}')
            return False
        built.append((i, what))
    ok, pairs, top = True, 0, 0.0
    for (a, wa), (b, wb) in itertools.permutations(built, 2):
        ck = f'{work}/b{a}.ck'
        if not os.path.isdir(ck):
            subprocess.run([f'{work}/b{a}', '--steps', '4', '--save', ck, '-q'],
                           capture_output=True, timeout=1800)
        log = f'{work}/r{a}_{b}.jsonl'
        p = subprocess.run([f'{work}/b{b}', '--steps', '8', '--resume', ck, '--log', log, '-q'],
                           capture_output=True, text=True, timeout=1800)
        worst = float('inf')
        if p.returncode == 0:
            full, got = losses(f'{work}/b{b}.jsonl'), losses(log)
            if all(s in full and s in got for s in range(5, 9)):
                worst = max(abs(got[s] - full[s]) / max(abs(full[s]), 1e-30) for s in range(5, 9))
        good = worst <= 1e-5
        ok, pairs, top = ok and good, pairs + 1, max(top, worst)
        if not good:
            out(f'FAIL resume {model}{note} {sizes}: steps 5-8 off by {worst:.3g}\n'
                f'    saved on {wa}\n    resumed on {wb}\n    {p.stderr.strip()[:600]}\n'
                f'    kept {work}')
    out(f'{"OK" if ok else "FAIL"} resume {model}{note} {sizes}: {pairs} pairs, worst {top:.3g}; ' +
        '; '.join(w for _, w in built))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--mode', choices=['equiv', 'resume', 'both'], default='both')
    ap.add_argument('--seed', type=int, default=int(time.time()))
    ap.add_argument('--minutes', type=float, default=30)
    ap.add_argument('--dtmc', default=os.path.join(ROOT, 'build/dtmc'))
    ap.add_argument('--mpirun', default=shutil.which('mpirun') or 'none')
    ap.add_argument('--log', default=None)
    ap.add_argument('--models', default=','.join(MODELS),
                    help='the models to draw from, comma-separated (default: all)')
    args = ap.parse_args()
    args.models = args.models.split(',')
    if not args.models or not set(args.models) <= set(MODELS):
        ap.error(f'--models: a comma-separated list of {", ".join(MODELS)}')
    args.dtmc = os.path.abspath(args.dtmc)
    logf = open(args.log, 'a') if args.log else None

    def out(line):
        print(line, flush=True)
        if logf:
            print(line, file=logf, flush=True)

    rng = random.Random(args.seed)
    out(f'campaign: seed {args.seed}, {args.minutes:g} minutes, mode {args.mode}')
    deadline = time.time() + 60 * args.minutes
    groups = failed = 0
    while time.time() < deadline:
        mode = args.mode if args.mode != 'both' else rng.choice(['equiv', 'resume'])
        model = rng.choice(args.models)
        work = tempfile.mkdtemp(prefix='dtm_campaign_')
        try:
            good = (equiv_group if mode == 'equiv' else resume_group)(args, rng, model, work, out)
        except subprocess.TimeoutExpired as e:
            out(f'FAIL {mode} {model}: timed out: {e.cmd}')
            good = False
        groups += 1
        failed += not good
        if good:
            shutil.rmtree(work, ignore_errors=True)
    out(f'campaign: {groups} groups, {failed} failed (seed {args.seed})')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
