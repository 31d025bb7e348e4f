#!/usr/bin/env bash
# fidelity.sh - does the calibrated cost model predict step times on this
# machine?  (issue 21 point 3; the figures go to bench/README.md)
#
# 1. `dtmc calibrate` writes this machine's profile (or PROFILE=FILE reuses
#    one).
# 2. For each set below, `dtmc sweep --measure K --measure-pick spread
#    --json` ranks every layout with that profile, then builds K of them
#    spread over the ranking (best to worst) and trains each a few steps on
#    the local backend (ranks as threads), ROUNDS times in turn (the
#    fastest run's median step counts: on a shared VM a slow spell then
#    slows one run, not one candidate).
# 3. Per measured candidate: predicted and measured ms, measured/predicted;
#    per set and over all of them: how many lie within 0.8-1.25 and
#    Spearman's rank correlation of predicted against measured (the sets'
#    candidates pooled: one ranking over different models and device
#    counts).
#
#   bench/fidelity.sh
# Environment: BUILD (default build; dtmc built there unless NOBUILD=1),
# PROFILE (a profile to reuse), BUDGET (calibrate's, default 60), STEPS
# (--measure-steps of the GPT sets, default 6; the MLP's steps take ~20 ms, so
# its sets run 3 times as many), ROUNDS (--measure-rounds, default 3), SETS
# (default "gpt1 gpt2 mlp2 gpt2bf16": a rank per core at most; gpt2bf16 in
# `precision bf16`; llama2: models/llama.dtm on 2; gpt4 and mlp4 put 4 ranks
# on the cores too).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=bench/lib.sh
. bench/lib.sh
BUILD=${BUILD:-build}
BUDGET=${BUDGET:-60}
STEPS=${STEPS:-6}
ROUNDS=${ROUNDS:-3}
SETS=${SETS:-"gpt1 gpt2 mlp2 gpt2bf16"}
if [ "${NOBUILD:-0}" != 1 ]; then
	cmake -S . -B "$BUILD" > /dev/null
	cmake --build "$BUILD" --target dtmc -j "$(nproc)" > /dev/null
fi
dtmc=$BUILD/dtmc
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
machine_line
if [ -n "${PROFILE:-}" ]; then
	prof=$PROFILE
else
	prof=$tmp/hw.txt
	"$dtmc" calibrate --budget "$BUDGET" --hw-out "$prof"
fi
grep '^source' "$prof"

gpt=(models/gpt.dtm -D d=256 -D layers=4 -D ctx=128 -D batch=8 -D heads=4)
mlp=(models/mlp.dtm -D batch=512 -D din=256 -D hidden=1024 -D dout=256)
llama=(models/llama.dtm -D d=256 -D layers=4 -D ctx=128 -D batch=8 -D heads=4 -D kv_heads=2)
for set in $SETS; do
	case $set in
	gpt1) args=("${gpt[@]}" --devices 1 --measure 4) ;;
	gpt2) args=("${gpt[@]}" --devices 2 --measure 8) ;;
	mlp2) args=("${mlp[@]}" --devices 2 --measure 6) ;;
	# bf16 (oneDNN's GEMMs, attention's AVX512-BF16 products where the CPU has them)
	gpt2bf16) args=("${gpt[@]}" --devices 2 --train precision=bf16 --measure 6) ;;
	# LLaMA (RoPE, GQA, SwiGLU: kernel classes the calibration GPT does not have)
	llama2) args=("${llama[@]}" --devices 2 --measure 6) ;;
	# more ranks than cores (on 2 cores): see bench/README.md
	gpt4) args=("${gpt[@]}" --devices 4 --measure 6) ;;
	mlp4) args=("${mlp[@]}" --devices 4 --measure 6) ;;
	*) echo "unknown set $set" >&2; exit 1 ;;
	esac
	echo "set $set: dtmc sweep ${args[*]} --measure-pick spread"
	steps=$STEPS
	case $set in mlp*) steps=$((3 * STEPS)) ;; esac
	"$dtmc" sweep "${args[@]}" --hw "$prof" --measure-pick spread --measure-steps "$steps" \
		--measure-rounds "$ROUNDS" --json -q > "$tmp/$set.json"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp" $SETS <<'EOF'
import json, os, sys
tmp, sets = sys.argv[1], sys.argv[2:]

def ranks(v):
    return [sum(w < x for w in v) + (sum(w == x for w in v) + 1) / 2 for x in v]

def spearman(x, y):
    rx, ry = ranks(x), ranks(y)
    n = len(x)
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / (sxx * syy) ** 0.5 if sxx and syy else float("nan")

allp, allm = [], []
print("%-5s %6s %13s %12s %6s  %s" % ("set", "place", "predicted ms", "measured ms", "ratio", "layout"))
for s in sets:
    d = json.load(open(os.path.join(tmp, s + ".json")))
    m = d["measured"]
    for x in m:
        print("%-5s %6d %13.2f %12.2f %6.2f  %s" % (s, x["place"], x["predicted_ms"],
              x["measured_ms"], x["ratio"], x["layout"]))
    p = [x["predicted_ms"] for x in m]
    q = [x["measured_ms"] for x in m]
    inside = sum(0.8 <= x["ratio"] <= 1.25 for x in m)
    print("%-5s %d of %d within 0.8-1.25, Spearman %.3f (dtmc's own: %s)" % (
        s, inside, len(m), spearman(p, q), d["spearman"]))
    allp += p
    allm += q
inside = sum(0.8 <= b / a <= 1.25 for a, b in zip(allp, allm))
print("all   %d of %d within 0.8-1.25 (measured / predicted %.2f to %.2f), Spearman %.3f" % (
    inside, len(allp), min(b / a for a, b in zip(allp, allm)),
    max(b / a for a, b in zip(allp, allm)), spearman(allp, allm)))
EOF
