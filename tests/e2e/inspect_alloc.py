#!/usr/bin/env python3
"""inspect_alloc.py [--comm-only] INSPECT.json RUN.stderr - inspect's memory is the runtime's.

INSPECT.json is `dtmc inspect --json` for a build; RUN.stderr what the
binary of that build printed with -v: one `alloc:` line per rank (rank,
stage, bytes per arena, overlap staging, the CPU GEMMs' f32 staging and
the pool's threads).  Every rank of the mesh must have one, and for each
its arenas must equal inspect's arenas for that rank's stage, byte for byte
(so the peak, their sum, is what the rank allocated), its staging copies
inspect's staging_bytes, and its GEMM staging inspect's gemm_staging_bytes
plus gemm_staging_thread_bytes per thread.

Communication too: with more than one rank, each prints a `comm:` line
after training (the plan's communication actions it ran in its last
step, per kind: how many and their bytes, as runtime/comm.c's
comm_count_moved counted them, on the CPU backends or where the cuda
device hands them to NCCL), which must equal, kind by kind, the count
and the summed `bytes` of inspect's comm list for that rank's stage.
--comm-only checks the `comm:` lines alone (a --device cuda run, whose
`alloc:` line is the host's).  Exit status 1 otherwise.
"""
import json
import re
import sys

ARENAS = ("param", "opt", "grad", "act", "input")


def main():
    args = sys.argv[1:]
    comm_only = bool(args) and args[0] == "--comm-only"
    if comm_only:
        args = args[1:]
    if len(args) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    with open(args[0]) as f:
        ins = json.load(f)
    stages = {s["stage"]: s["memory"] for s in ins["stages"]}
    pat = re.compile(r"^alloc: rank (\d+) stage (\d+) param (\d+) opt (\d+) grad (\d+) "
                     r"act (\d+) input (\d+) staging (\d+) gemm (\d+) threads (\d+)$")
    cpat = re.compile(r"^comm: rank (\d+) stage (\d+)((?: [a-z_]+ \d+ \d+)+)$")
    moved = {}
    for st in ins["stages"]:
        per = {}
        for c in st["comm"]:
            n, b = per.get(c["kind"], (0, 0))
            per[c["kind"]] = (n + 1, b + c["bytes"])
        moved[st["stage"]] = per
    seen, bad, comm_seen = {}, [], set()
    with open(args[1], errors="replace") as f:
        for line in f:
            cm = cpat.match(line.strip())
            if cm:
                rank, stage = int(cm.group(1)), int(cm.group(2))
                comm_seen.add(rank)
                w = cm.group(3).split()
                got = {w[i]: (int(w[i + 1]), int(w[i + 2])) for i in range(0, len(w), 3)}
                want = moved.get(stage, {})
                for k in sorted(set(got) | set(want)):
                    g, e = got.get(k, (0, 0)), want.get(k, (0, 0))
                    if g != e:
                        bad.append(f"rank {rank} (stage {stage}): {k}: runtime {g[0]} "
                                   f"moving {g[1]} bytes, inspect {e[0]} moving {e[1]}")
                continue
            m = pat.match(line.strip())
            if not m or comm_only:
                continue
            v = [int(x) for x in m.groups()]
            rank, stage, got, staging = v[0], v[1], dict(zip(ARENAS, v[2:7])), v[7]
            seen[rank] = stage
            mem = stages.get(stage)
            if mem is None:
                bad.append(f"rank {rank}: stage {stage} is not in inspect's report")
                continue
            want = mem["arenas"]
            for a in ARENAS:
                if got[a] != want[a]:
                    bad.append(f"rank {rank} (stage {stage}): arena {a}: runtime {got[a]}, "
                               f"inspect {want[a]}")
            if sum(got.values()) != mem["peak_bytes"]:
                bad.append(f"rank {rank}: allocated {sum(got.values())}, inspect's peak "
                           f"{mem['peak_bytes']}")
            if staging != mem["staging_bytes"]:
                bad.append(f"rank {rank}: staging {staging}, inspect {mem['staging_bytes']}")
            gemm, threads = v[8], v[9]
            want_gemm = mem["gemm_staging_bytes"] + threads * mem["gemm_staging_thread_bytes"]
            if gemm != want_gemm:
                bad.append(f"rank {rank}: GEMM staging {gemm} on {threads} threads, inspect "
                           f"{mem['gemm_staging_bytes']} + {mem['gemm_staging_thread_bytes']} "
                           f"per thread = {want_gemm}")
    missing = [r for r in range(ins["world"]) if r not in seen]
    if missing and not comm_only:
        bad.append(f"no alloc: line for rank(s) {missing[:8]} (run the binary with -v)")
    nocomm = [r for r in range(ins["world"]) if r not in comm_seen]
    if ins["world"] > 1 and nocomm:
        bad.append(f"no comm: line for rank(s) {nocomm[:8]} (run the binary with -v)")
    if bad:
        for b in bad[:20]:
            print("inspect_alloc: " + b, file=sys.stderr)
        return 1
    peaks = ", ".join(f"stage {s}: {stages[s]['peak_bytes']}" for s in sorted(stages))
    if not comm_only:
        print(f"inspect_alloc: {len(seen)} ranks allocate inspect's peak ({peaks} bytes)")
    if comm_seen:
        ncoll = sum(n for per in moved.values() for n, _ in per.values())
        print(f"inspect_alloc: {len(comm_seen)} ranks ran inspect's communication "
              f"({ncoll} actions over {len(moved)} stage(s), each kind's count and bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
