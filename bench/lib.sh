# shellcheck shell=bash
# lib.sh - what the bench scripts share (sourced, not run).

# machine_line [MORE]: the "machine:" line every bench prints first
# shellcheck disable=SC2120 # MORE is optional
machine_line() {
	echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores online," \
		"load $(cut -d' ' -f1-3 /proc/loadavg)${1:+; $1}"
}

# med LOG FIELD: the median of FIELD over the last $STEPS steps of a JSON log
med() {
	sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1" | tail -n "$STEPS" | sort -g |
		awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
