# model.sh - sourced by kcheck.sh and nvrtc.sh: cuda_model ROOT SPEC DIR
# prints the path of the model SPEC names: a name in models/, a path, or
# either with a suffix for a copy written into DIR whose attention is
# masked ("NAME:mask": tests/e2e/mask.sed, a sliding window and segment
# ids, as e2e.equiv.llama's mask: layouts; "NAME:window": the window
# alone, which ring attention also takes; "NAME:bidir": no causal mask,
# tests/e2e/bidir.sed, as e2e.equiv.llama's bidir: layouts).  Fails when the copy has no
# attention to change.
cuda_model() {
	local root=$1 spec=$2 dir=$3 base kind src
	base=${spec%:*} kind=${spec##*:}
	[ "$base" = "$spec" ] && kind=
	src="$root/models/$base.dtm"
	[ -f "$src" ] || src=$base
	case $kind in
	"") echo "$src"; return 0 ;;
	mask) sed -f "$root/tests/e2e/mask.sed" "$src" >"$dir/$kind.dtm" ;;
	window) sed 's/causal = true)/causal = true, window = 8)/' "$src" >"$dir/$kind.dtm" ;;
	bidir) sed -f "$root/tests/e2e/bidir.sed" "$src" >"$dir/$kind.dtm" ;;
	*) echo "cuda_model: unknown variant '$kind' of $base" >&2; return 1 ;;
	esac
	grep -q 'window = 8\|causal = false' "$dir/$kind.dtm" ||
		{ echo "cuda_model: no attention to change in $src" >&2; return 1; }
	echo "$dir/$kind.dtm"
}
