#!/usr/bin/env bash
# ckpt.sh DTMC - checkpoints and the log when things go wrong (issue 13), on
# models/mlp.dtm built for dp=2,tp=2 (4 ranks as threads):
#   1. its checkpoint resumes, resharded, to the uninterrupted losses in a
#      build with the mesh axes in the other order (a model copy declaring
#      `mesh (tp = 2, dp = 2)`) and in one with b1's placement moved from tp
#      to dp (the same shard shapes: reading its own file would load other
#      elements); a build of another model (-D hidden=48) is refused with
#      one message listing the differences;
#   2. --log /dev/full exits 1 naming the file and the cause; with
#      --log-errors warn the run finishes and warns once; a checkpoint write
#      failing mid-file exits 1 naming the file, leaves no temporary file and
#      the previous checkpoint selected, which resumes to the uninterrupted
#      losses.  The failing write comes from a file size limit (ulimit -f,
#      SIGXFSZ ignored, so write() fails with EFBIG): no root, no tmpfs;
#   3. one flipped byte in a rank's file is refused naming the file and the
#      tensor; index.json edited (a placement naming an unknown axis, a
#      wrong file name, a tensor without dtype) is refused naming it; the
#      unchanged checkpoint resumes to the uninterrupted losses, bit for bit;
#   4. --resume-fallback, on a directory of two complete checkpoints (steps
#      2 and 4): the newest damaged (a flipped byte in one rank's file, a
#      truncated file, a bad header) is refused without the flag, naming
#      the file; with it the run says what it skipped and why (once, rank
#      0, and in the log), resumes from step 2 and trains the uninterrupted
#      losses bit for bit; both damaged: exit 1, "no complete checkpoint";
#      a resharded resume on dp=4 falls back on every rank together, also
#      under ZeRO-3, where only ranks 2-3 read the damaged shard (timeout
#      120: an agreement that left a rank waiting would hang).
set -u
dtmc=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_ckpt_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\).*/\1 \2/p' "$@"; }
# expect_fail WHAT PATTERN CMD...: CMD exits 1 and its stderr has PATTERN
expect_fail() {
	local what=$1 pat=$2
	shift 2
	"$@" -q 2>"$tmp/err.txt"
	local rc=$?
	[ $rc -eq 1 ] || { cat "$tmp/err.txt" >&2; fail "$what: exit $rc, expected 1"; }
	grep -qF -- "$pat" "$tmp/err.txt" || { cat "$tmp/err.txt" >&2; fail "$what: no \"$pat\""; }
	echo "ok: $what: $(grep -m1 error "$tmp/err.txt")"
}

sed 's/^mesh (dp = 2, tp = 2)$/mesh (tp = 2, dp = 2)/' models/mlp.dtm >"$tmp/order.dtm"
sed 's/^\(param b1 : f32\[hidden\]\) @ \[tp\]/\1 @ [dp]/' models/mlp.dtm >"$tmp/moved.dtm"
grep -q '^mesh (tp = 2, dp = 2)$' "$tmp/order.dtm" || fail "models/mlp.dtm: no mesh line to swap"
grep -q '^param b1 : f32\[hidden\] @ \[dp\]' "$tmp/moved.dtm" || fail "models/mlp.dtm: no b1 @ [tp]"
"$dtmc" build models/mlp.dtm --mesh dp=2,tp=2 -o "$tmp/mlp" || fail "dtmc build mlp"
"$dtmc" build "$tmp/order.dtm" --mesh tp=2,dp=2 -o "$tmp/order" || fail "dtmc build (tp, dp)"
"$dtmc" build "$tmp/moved.dtm" --mesh dp=2,tp=2 -o "$tmp/moved" || fail "dtmc build b1 @ [dp]"
m=$tmp/mlp
"$m" --steps 8 --log "$tmp/full.jsonl" -q || fail "8 steps"
"$m" --steps 4 --save "$tmp/ck" -q || fail "4 steps + save"
ck=$tmp/ck

# ---- 1. another layout reshards, another model is refused ----
# the same shard shapes holding other elements: resharded by the index's
# placements, so the losses are the uninterrupted run's (to 1e-5: the
# layouts sum in other orders)
close() { # REF GOT WHAT: steps 5-8 of REF against GOT
	paste <(losses "$1" | sed -n '5,8p') <(losses "$2") | awk -v what="$3" '
		{ d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-5 * ($2 < 0 ? -$2 : $2)) bad = 1 }
		END { exit bad }' || fail "$3: $(paste <(losses "$1" | sed -n '5,8p') <(losses "$2"))"
	echo "ok: $3: the uninterrupted losses"
}
"$tmp/order" --steps 8 --resume "$ck" --log "$tmp/order.jsonl" -q || fail "axes in another order: resume"
close "$tmp/full.jsonl" "$tmp/order.jsonl" "axes in another order, resharded"
"$tmp/moved" --steps 8 --resume "$ck" --log "$tmp/moved.jsonl" -q || fail "b1 moved: resume"
close "$tmp/full.jsonl" "$tmp/moved.jsonl" "a placement moved, resharded"
"$dtmc" build models/mlp.dtm --mesh dp=2,tp=2 -D hidden=48 -D dout=6 -o "$tmp/other" ||
	fail "dtmc build hidden=48"
expect_fail "another model" 	"checkpoint $ck is of another model (4 differences):" 	"$tmp/other" --steps 8 --resume "$ck"
grep -qF "'w1' has global shape [32, 64] there, [32, 48] here" "$tmp/err.txt" ||
	{ cat "$tmp/err.txt" >&2; fail "another model: w1's shapes not listed"; }

# ---- 2. write errors ----
expect_fail "--log /dev/full" "cannot write log '/dev/full': No space left on device" \
	"$m" --steps 3 --log /dev/full
"$m" --steps 3 --log /dev/full --log-errors warn -q 2>"$tmp/err.txt" ||
	{ cat "$tmp/err.txt" >&2; fail "--log-errors warn: exit $?"; }
[ "$(grep -c "warning: cannot write log '/dev/full'" "$tmp/err.txt")" -eq 1 ] ||
	{ cat "$tmp/err.txt" >&2; fail "--log-errors warn: not one warning"; }
echo "ok: --log /dev/full --log-errors warn: exit 0, one warning"
cp -r "$ck" "$tmp/ckw"
# a rank's file is about 11 KB: every save stops at 6 KB
(trap '' XFSZ; ulimit -f 6; exec "$m" --steps 8 --resume "$tmp/ckw" --save "$tmp/ckw" \
	--save-every 2 -q) 2>"$tmp/err.txt"
rc=$?
[ $rc -eq 1 ] || { cat "$tmp/err.txt" >&2; fail "a save over the size limit: exit $rc"; }
grep -q "saving checkpoint: cannot write .*/ckw/step_000006/rank0000[0-3].safetensors.tmp.*: File too large" \
	"$tmp/err.txt" || { cat "$tmp/err.txt" >&2; fail "the failed save is not named"; }
echo "ok: a failed save: $(grep -m1 error "$tmp/err.txt")"
[ "$(cat "$tmp/ckw/latest")" = step_000004 ] || fail "latest moved past the failed save"
[ -z "$(find "$tmp/ckw" -name '*.tmp.*')" ] || fail "temporary files left: $(find "$tmp/ckw" -name '*.tmp.*')"
[ ! -e "$tmp/ckw/step_000006/index.json" ] || fail "the failed step has an index"
"$m" --steps 8 --resume "$tmp/ckw" --log "$tmp/w.jsonl" -q || fail "resume after a failed save"
[ "$(losses "$tmp/w.jsonl")" = "$(losses "$tmp/full.jsonl" | sed -n '5,8p')" ] ||
	fail "resumed after a failed save: other losses"
echo "ok: after the failed save, step 4 resumes to the uninterrupted losses"

# ---- 3. integrity ----
cp -r "$ck" "$tmp/ckf"
f=$tmp/ckf/step_000004/rank00002.safetensors
hlen=$(od -An -t u8 -N 8 "$f" | tr -d ' ')
off=$((8 + hlen + 100)) # inside w1, the first tensor
byte=$(od -An -t u1 -j "$off" -N 1 "$f" | tr -d ' ')
printf "$(printf '\\%03o' $((byte ^ 1)))" | dd of="$f" bs=1 seek="$off" conv=notrunc 2>/dev/null
expect_fail "a flipped bit" \
	"$f: tensor w1: data does not match its checksum" \
	"$m" --steps 8 --resume "$tmp/ckf"
ix=$tmp/ck/step_000004/index.json
cp "$ix" "$tmp/index.orig"
edit() { sed "$1" "$tmp/index.orig" >"$ix"; }
edit 's/"b1": {"dtype": "F32", "shape": \[64\], "placement": "\[tp\]"}/"b1": {"dtype": "F32", "shape": [64], "placement": "[pp]"}/'
expect_fail "index.json: an unknown axis" \
	"$ix: tensor b1: placement \"[pp]\" names an axis the mesh does not have" \
	"$m" --steps 8 --resume "$ck"
edit 's/"rank00001.safetensors"/"rank00009.safetensors"/'
expect_fail "index.json: a file name" "$ix: files[1] is not \"rank00001.safetensors\"" \
	"$m" --steps 8 --resume "$ck"
edit 's/"w2": {"dtype": "F32", /"w2": {/'
expect_fail "index.json: no dtype" "$ix: tensor w2: missing or unknown \"dtype\"" \
	"$m" --steps 8 --resume "$ck"
cp "$tmp/index.orig" "$ix"
"$m" --steps 8 --resume "$ck" --log "$tmp/r.jsonl" -q || fail "resume of the unchanged checkpoint"
[ "$(losses "$tmp/r.jsonl")" = "$(losses "$tmp/full.jsonl" | sed -n '5,8p')" ] ||
	fail "4 + resume 4 differs from 8 uninterrupted steps"
echo "ok: the unchanged checkpoint resumes to the uninterrupted losses"

# ---- 4. --resume-fallback ----
cf=$tmp/cf
"$m" --steps 2 --save "$cf" -q || fail "2 steps + save"
"$m" --steps 4 --resume "$cf" --save "$cf" -q || fail "resume to 4 + save"
rm -rf "$cf/step_000000" # leaves two complete checkpoints: steps 2 and 4
[ "$(cat "$cf/latest")" = step_000004 ] && [ -e "$cf/step_000002/index.json" ] ||
	fail "no checkpoints of steps 2 and 4"
# flip FILE TENSOR: one bit of the tensor's 6th byte
flip() {
	local f=$1 hlen at off byte
	hlen=$(od -An -t u8 -N 8 "$f" | tr -d ' ')
	at=$(dd if="$f" bs=1 skip=8 count="$hlen" 2>/dev/null |
		sed -n "s/.*\"$2\":{[^}]*\"data_offsets\":\[\([0-9]*\),.*/\1/p")
	[ -n "$at" ] || fail "$f: no tensor $2"
	off=$((8 + hlen + at + 5))
	byte=$(od -An -t u1 -j "$off" -N 1 "$f" | tr -d ' ')
	printf "$(printf '\\%03o' $((byte ^ 1)))" | dd of="$f" bs=1 seek="$off" conv=notrunc 2>/dev/null
}
# fell_back WHAT DIR FILE BINARY REF: BINARY --resume-fallback on DIR skips
# step 4 naming FILE, once, resumes from step 2 and trains REF's losses of
# steps 3-8 (REF "exact": full.jsonl's, bit for bit; else within 1e-5)
fell_back() {
	local what=$1 d=$2 file=$3 bin=$4 ref=$5
	timeout 120 "$bin" --steps 8 --resume "$d" --resume-fallback --log "$tmp/fb.jsonl" -q \
		2>"$tmp/err.txt" || { cat "$tmp/err.txt" >&2; fail "$what: --resume-fallback: exit $?"; }
	[ "$(grep -c "skipping checkpoint" "$tmp/err.txt")" -eq 1 ] &&
		grep -qF "warning: --resume-fallback: skipping checkpoint $d/step_000004: rank " \
			"$tmp/err.txt" && grep -qF "$file" "$tmp/err.txt" &&
		grep -qF "resumed from $d/step_000002 at step 2" "$tmp/err.txt" ||
		{ cat "$tmp/err.txt" >&2; fail "$what: not one skip naming $file, then step 2"; }
	grep -F "{\"event\":\"checkpoint_skipped\",\"checkpoint\":\"$d/step_000004\",\"error\":\"rank " \
		"$tmp/fb.jsonl" | grep -qF "$file" &&
		grep -qx "{\"event\":\"resumed\",\"checkpoint\":\"$d/step_000002\",\"step\":2}" \
			"$tmp/fb.jsonl" || { cat "$tmp/fb.jsonl" >&2; fail "$what: the log's events"; }
	if [ "$ref" = exact ]; then
		[ "$(losses "$tmp/fb.jsonl")" = "$(losses "$tmp/full.jsonl" | sed -n '3,8p')" ] ||
			fail "$what: fell back to step 2, but not the uninterrupted losses"
	else
		paste <(losses "$tmp/full.jsonl" | sed -n '3,8p') <(losses "$tmp/fb.jsonl") | awk '
			{ d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-5 * ($2 < 0 ? -$2 : $2)) bad = 1 }
			END { exit bad || NR != 6 }' || fail "$what: not the uninterrupted losses"
	fi
	echo "ok: $what: $(grep -m1 skipping "$tmp/err.txt" | cut -c1-160)..."
}
# damage NAME HOW FILE: a copy of cf with step 4's FILE damaged
damage() {
	rm -rf "$tmp/$1"
	cp -r "$cf" "$tmp/$1"
	local f=$tmp/$1/step_000004/$3
	case $2 in
	flip) flip "$f" w1 ;;
	truncate) truncate -s 6000 "$f" ;;
	header) printf 'X' | dd of="$f" bs=1 seek=8 conv=notrunc 2>/dev/null ;;
	esac
}
damage dflip flip rank00002.safetensors
expect_fail "a flipped bit, no --resume-fallback" \
	"$tmp/dflip/step_000004/rank00002.safetensors: tensor w1: data does not match its checksum" \
	"$m" --steps 8 --resume "$tmp/dflip"
fell_back "a flipped bit in rank 2's file" "$tmp/dflip" \
	"$tmp/dflip/step_000004/rank00002.safetensors: tensor w1: data does not match" "$m" exact
damage dtrunc truncate rank00001.safetensors
expect_fail "a truncated file, no --resume-fallback" \
	"$tmp/dtrunc/step_000004/rank00001.safetensors: tensor " "$m" --steps 8 --resume "$tmp/dtrunc"
fell_back "a truncated file" "$tmp/dtrunc" \
	"$tmp/dtrunc/step_000004/rank00001.safetensors: tensor " "$m" exact
damage dhead header rank00003.safetensors
expect_fail "a bad header, no --resume-fallback" \
	"$tmp/dhead/step_000004/rank00003.safetensors: header is not a JSON object" \
	"$m" --steps 8 --resume "$tmp/dhead"
fell_back "a bad header" "$tmp/dhead" \
	"$tmp/dhead/step_000004/rank00003.safetensors: header is not a JSON object" "$m" exact
# both damaged: nothing to fall back to
flip "$tmp/dflip/step_000002/rank00000.safetensors" b1
expect_fail "both checkpoints damaged" "no complete checkpoint left to fall back to (2 skipped" \
	timeout 120 "$m" --steps 8 --resume "$tmp/dflip" --resume-fallback
[ "$(grep -c "skipping checkpoint" "$tmp/err.txt")" -eq 2 ] ||
	{ cat "$tmp/err.txt" >&2; fail "both checkpoints damaged: not two skips"; }
# another model stays an error, not a reason to fall back
expect_fail "another model, --resume-fallback" "checkpoint $cf is of another model" \
	timeout 120 "$tmp/other" --steps 8 --resume "$cf" --resume-fallback
! grep -q "skipping" "$tmp/err.txt" || fail "another model: a checkpoint skipped"
# resharded: dp=4 reads step 4's tensors from rank files 0 and 1 (the
# first copy of each shard), every rank all of them; under ZeRO-3 rank r
# holds rows 16r.. of b1, so only ranks 2-3 read rank00001.safetensors'
# b1, and fail after ranks 0-1 have loaded
"$dtmc" build models/mlp.dtm --mesh dp=4 -o "$tmp/dp4" || fail "dtmc build dp=4"
"$dtmc" build models/mlp.dtm --mesh dp=4 --train zero=3 -o "$tmp/z3" || fail "dtmc build dp=4 zero=3"
damage dres none x
flip "$tmp/dres/step_000004/rank00001.safetensors" b1
expect_fail "ZeRO-3 on dp=4, a source shard damaged, no --resume-fallback" \
	"ranks 2-3: --resume: $tmp/dres/step_000004/rank00001.safetensors: tensor b1: data does not match" \
	timeout 120 "$tmp/z3" --steps 8 --resume "$tmp/dres"
fell_back "resharded to dp=4" "$tmp/dres" \
	"$tmp/dres/step_000004/rank00001.safetensors: tensor b1: data does not match" "$tmp/dp4" close
fell_back "resharded to dp=4 under ZeRO-3, ranks 2-3 see the damage" "$tmp/dres" \
	"$tmp/dres/step_000004/rank00001.safetensors: tensor b1: data does not match" "$tmp/z3" close
grep -qF "skipping checkpoint $tmp/dres/step_000004: rank 2: " "$tmp/err.txt" ||
	{ cat "$tmp/err.txt" >&2; fail "ZeRO-3: rank 2 does not report"; }
echo "ok"
