#!/bin/bash
# published.sh DTMC [NAME...] - the cost model against published results
# (issue 21 point 4).  For each row of bench/cost/megatron_sc21.rows (or only
# the rows NAMEd, or without NAMEs those DTM_PUBLISHED_ROWS names, separated
# by spaces), `dtmc inspect --hw a100 --json` of that run's configuration
# must predict the published per-GPU throughput within 15%.
#
# What a row costs to compile grows with micro-batches x layers (the
# microbatch pass unrolls the program M times): 310.1B (144 x 96) takes
# ~20 s and 3 GB; 529.6B (280 x 105) and 1008.0B (512 x 128) exceed the
# default IR_MAX_NODES and need a dtmc built with a higher one
# (-DIR_MAX_NODES=16777216): ~50 s and 7 GB, ~4 CPU-minutes and 18 GB.
# The ctest sweep.published (tests/run.cmake) names the rows that take
# seconds.
#
# The throughput is computed as the paper computes it: its FLOP count of one
# iteration divided by (iteration time x GPUs), with the iteration time
# inspect's predicted step time.  Narayanan et al., SC'21 (arXiv 2104.04473),
# section 5.1, Eq. (3), with activation recomputation:
#
#   F = 96 B s l h^2 (1 + s / (6 h) + V / (16 l h))
#
#   B global batch (sequences), s sequence length, l layers, h hidden size,
#   V vocabulary.  72 B s l h^2 (1 + s / 6h) are the transformer layers'
#   forward (24 B s h^2 + 4 B s^2 h per layer), backward (twice that) and
#   recomputed forward (once more); 6 B s h V the LM head, forward and
#   backward.  Their "teraFLOP/s per GPU" is F / (t_iter n) (section 5.1).
#
#   predicted TFLOP/s per GPU = F / (step_s * n) / 1e12,  ratio = predicted
#   / published, and a row passes when |ratio - 1| <= 0.15.
#
# The configuration of each row (bench/cost/megatron_sc21.rows says where
# every number comes from) maps onto dtmc as:
#   model    bench/cost/megatron_gpt.dtm (models/gpt.dtm with `chunks`):
#            -D vocab=51200 -D ctx=2048 (section 5.1) -D d=h -D heads=a
#            -D layers=l -D batch=B (the global batch) -D chunks=v
#   mesh     --mesh pp=p,dp=n/(t p),tp=t: tp the minor axis, so a tp group
#            is one DGX A100 node (t <= 8), as Megatron orders its ranks
#            (rank = pp_rank * d t + dp_rank * t + tp_rank); the default
#            --nodes puts 8 ranks per node, Selene's 8 GPUs per node
#   train    precision=bf16 (the paper's mixed precision; A100's fp16 and
#            bf16 tensor peaks are both 312 TFLOP/s), reduce_dtype=bf16 (the
#            gradients all-reduced in 16 bits: Megatron-LM's
#            examples/sc21/run_table_1.sh runs rows up to 18B on DDP=torch,
#            which reduces the fp16 model's fp16 gradients, and the rest on
#            DDP=local without --accumulate-allreduce-grads-in-fp32, whose
#            main grads are then fp16 too), recompute=layer (full
#            recomputation, which Eq. 3 assumes: each layer's whole forward
#            again in its backward, outputs too, as Megatron re-ran it), microbatches=B / (b d) (b
#            the micro-batch size of run_table_1.sh), schedule 1f1b or
#            interleaved(v); the model file's zero 0 (data-parallel gradient
#            all-reduce, no distributed optimizer, as Megatron in 2021)
#   hw       --hw a100 (tools/hw.c: A100 SXM4 80 GB, DGX A100); DTM_HW in
#            the environment names another profile or a file of overrides
#
# The table printed has, per row: the predicted step, its pipeline bubble,
# the slowest stage's compute and exposed communication (inspect's
# breakdown), the predicted and the published TFLOP/s per GPU and their
# ratio.  A row whose inspect fails (too big to compile, say) fails with
# inspect's message.  Exit status 1 when any row fails.
set -u
dtmc=$1
shift
[ $# -gt 0 ] || set -- ${DTM_PUBLISHED_ROWS:-}
here=$(cd "$(dirname "$0")" && pwd)
rows=$here/megatron_sc21.rows
model=$here/megatron_gpt.dtm
hw=${DTM_HW:-a100}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_published_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL (cost.published): $*" >&2; exit 1; }
[ -x "$dtmc" ] || fail "no dtmc at $dtmc"
[ -r "$rows" ] && [ -r "$model" ] || fail "missing $rows or $model"

# Section 5.1: every model has s = 2048 and V = 51,200.
seq=2048
vocab=51200
: >"$tmp/results"
nrows=0
while read -r name heads hidden layers tp pp gpus batch mbs v tflops peak rest; do
	case $name in '' | '#'*) continue ;; esac
	if [ $# -gt 0 ]; then
		want=0
		for n in "$@"; do [ "$n" = "$name" ] && want=1; done
		[ $want = 1 ] || continue
	fi
	nrows=$((nrows + 1))
	[ $((gpus % (tp * pp))) = 0 ] || fail "$name: $gpus GPUs is not a multiple of tp x pp"
	dp=$((gpus / (tp * pp)))
	[ $((batch % (dp * mbs))) = 0 ] || fail "$name: batch $batch not a multiple of dp x mbs"
	mb=$((batch / (dp * mbs)))
	if [ "$v" -gt 1 ]; then sched="interleaved($v)"; else sched=1f1b; fi
	start=$(date +%s%N)
	"$dtmc" inspect "$model" -D vocab=$vocab -D ctx=$seq -D d="$hidden" -D heads="$heads" \
		-D layers="$layers" -D batch="$batch" -D chunks="$v" \
		--mesh pp="$pp",dp="$dp",tp="$tp" --train precision=bf16 --train reduce_dtype=bf16 --train recompute=layer \
		--train microbatches="$mb" --train "schedule=$sched" \
		--hw "$hw" --json >"$tmp/row.json" 2>"$tmp/row.err"
	rc=$?
	ms=$((($(date +%s%N) - start) / 1000000))
	secs=$((ms / 1000)).$((ms % 1000 / 100))
	# one line per row: the row's numbers, then inspect's (or its error)
	/usr/bin/python3 - "$tmp/row.json" "$tmp/row.err" "$rc" "$secs" \
		"$name" "$heads" "$hidden" "$layers" "$tp" "$pp" "$dp" "$gpus" "$batch" "$mb" "$v" \
		"$tflops" "$seq" "$vocab" >>"$tmp/results" <<'PY' || fail "$name: could not read inspect's report"
import json, sys
js, err, rc, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
row = sys.argv[5:]
if rc != 0:
    msg = " ".join(l.strip() for l in open(err) if "error" in l)[:300] or "exit %d" % rc
    print("\t".join(row + ["ERR", "%.1f" % secs, msg]))
    sys.exit(0)
d = json.load(open(js))
step = d["step"]
# the slowest stage sets the pace: its compute and exposed communication
slow = max(d["stages"], key=lambda st: st["time"]["time_s"])["time"]
print("\t".join(row + ["OK", "%.1f" % secs, repr(step["step_s"]), repr(step["bubble"]),
                       repr(slow["compute_s"]), repr(slow["exposed_comm_s"])]))
PY
	rm -f "$tmp/row.json"
done <"$rows"
[ $nrows -gt 0 ] || fail "no row named $*"

/usr/bin/python3 - "$tmp/results" "$hw" <<'PY'
import sys
TOL = 0.15
bad = 0
print("cost.published: dtmc inspect --hw %s against Megatron-LM (SC'21, Table 1);"
      " predicted TFLOP/s per GPU = Eq. 3's FLOPs / (step x GPUs)" % sys.argv[2])
print("%-8s %5s %-9s %4s %-15s %9s %6s %9s %9s %8s %8s %6s  %s" % (
    "row", "GPUs", "t/p/d", "M", "schedule", "step s", "bubble", "compute", "exposed",
    "pred", "publ", "ratio", "verdict (inspect's wall time)"))
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    (name, a, h, l, t, p, dp, n, B, M, v, pub, s, V), status, secs = f[:14], f[14], f[15]
    h, l, t, p, dp, n, B, M, v, s, V = map(int, (h, l, t, p, dp, n, B, M, v, s, V))
    pub = float(pub)
    sched = "interleaved(%d)" % v if v > 1 else "1f1b"
    head = "%-8s %5d %-9s %4d %-15s" % (name, n, "%d/%d/%d" % (t, p, dp), M, sched)
    if status != "OK":
        bad += 1
        print("%s %9s %6s %9s %9s %8s %8.0f %6s  FAIL: inspect failed (%ss): %s" % (
            head, "-", "-", "-", "-", "-", pub, "-", secs, f[16]))
        continue
    step, bubble, comp, exposed = map(float, f[16:20])
    # Eq. 3 (arXiv 2104.04473, section 5.1): FLOPs per iteration, with recomputation
    F = 96.0 * B * s * l * h * h * (1 + s / (6.0 * h) + V / (16.0 * l * h))
    pred = F / (step * n) / 1e12
    ratio = pred / pub
    ok = abs(ratio - 1) <= TOL
    bad += not ok
    print("%s %9.3f %5.1f%% %9.3f %9.3f %8.1f %8.0f %6.2f  %s (%ss)" % (
        head, step, 100 * bubble, comp, exposed, pred, pub, ratio,
        "ok" if ok else "FAIL: outside +-%d%%" % round(100 * TOL), secs))
print("columns: step = predicted step time; bubble = its pipeline bubble; compute, exposed ="
      " the slowest stage's compute and exposed communication (s); pred, publ = TFLOP/s per GPU")
sys.stdout.flush()
if bad:
    print("FAIL (cost.published): %d row(s) outside +-%d%% or not compiled" % (bad, round(100 * TOL)),
          file=sys.stderr)
    sys.exit(1)
print("cost.published: every row within +-%d%%" % round(100 * TOL))
PY
