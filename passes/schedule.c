/* schedule.c - pipeline schedules and their simulated timeline.
 *
 * Consumes (P stages, M micro-batches, v virtual stages per rank) and
 * produces each stage's ordered list of work items; the pipeline pass
 * turns the items into compute, send and receive actions.  The schedules:
 *
 *   gpipe        F0 .. F(M-1), then B0 .. B(M-1).  Backwards run in
 *                micro-batch order, as torch.distributed.pipelining's
 *                ScheduleGPipe and Megatron's forward-then-backward do (the
 *                GPipe paper draws them reversed; the timeline is the same
 *                with equal durations, and in order the last stage can start
 *                B0 while the others are still idle).  Holds M activations.
 *   1f1b         PipeDream-flush as Megatron runs it without interleaving:
 *                min(P-s-1, M) warm-up forwards on stage s, then pairs
 *                "F(w+i) B(i)", then the remaining backwards.  Same bubble
 *                as gpipe, at most P - s activations alive on stage s.
 *   interleaved  Megatron's interleaved 1F1B (forward_backward_pipelining_
 *                with_interleaving, micro-batch group size P): the v*M
 *                virtual micro-batches are taken in groups of P micro-
 *                batches, chunk by chunk (group g, chunk c: micro-batches
 *                gP .. gP+P-1); backwards walk the same table with the
 *                chunks reversed.  Warm-up (P-s-1)*2 + (v-1)*P forwards
 *                (capped at v*M), then "F B" pairs, then the rest of the
 *                backwards.  Needs M >= P and M % P == 0, as Megatron does;
 *                the bubble shrinks by v.
 *   zb (ZB-H1)   Qi et al., "Zero Bubble Pipeline Parallelism" (2024),
 *                handcrafted schedule H1: 1F1B with the backward split into B
 *                (input gradient, on the critical path) and W (weight
 *                gradient, needed by nobody downstream).  Stage s runs the
 *                1F1B order of F and B and delays its W passes by s steady
 *                steps, so every stage holds P micro-batches between F and W
 *                (1F1B's peak on stage 0) while the B chain runs unhindered;
 *                the delayed W passes fill the cool-down bubble.  A steady
 *                step emits W when (forwards issued) - (W done) >= P, the
 *                cool-down emits "B W" pairs, then the rest of the W passes.
 *                With tf = tb = tw the bubble is (P-1)*tf instead of 1F1B's
 *                (P-1)*(tf+tb+tw).
 *
 * The simulator runs every stage's list in order under the data
 * dependencies alone (no contention but the stage itself), so the timeline
 * is exact and deterministic: utilisation M/(M+P-1) for gpipe and 1f1b,
 * vM/(vM+P-1) for interleaved, with any tf, tb and no hop latency.
 */
#include "passes/schedule.h"

#include <limits.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const sched_names[] = {
        [SCHED_GPIPE] = "gpipe",
        [SCHED_1F1B] = "1f1b",
        [SCHED_INTERLEAVED] = "interleaved",
        [SCHED_ZBH1] = "zb",
};
_Static_assert(sizeof sched_names / sizeof sched_names[0] == SCHED_ZBH1 + 1,
               "sched_names must list every SchedKind");

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

const char *sched_name(SchedKind k)
{
	if ((unsigned)k > SCHED_ZBH1)
		return "?";
	return sched_names[k];
}

int sched_parse(const char *name, SchedKind *k)
{
	static const struct {
		const char *name;
		SchedKind kind;
	} names[] = {
	        {"gpipe", SCHED_GPIPE}, {"1f1b", SCHED_1F1B}, {"interleaved", SCHED_INTERLEAVED},
	        {"zb", SCHED_ZBH1},     {"zbh1", SCHED_ZBH1}, {"zb-h1", SCHED_ZBH1},
	};
	if (!name)
		return -1;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (strcmp(name, names[i].name) == 0) {
			*k = names[i].kind;
			return 0;
		}
	}
	return -1;
}

/* Items one stage runs: every micro-batch once per chunk and kind. */
static int item_count(SchedKind k, int M, int v)
{
	return (k == SCHED_ZBH1 ? 3 : 2) * M * v;
}

/* The checks shared by sched_build and sched_simulate. */
static int check_args(SchedKind k, int P, int M, int v, char *err, size_t errlen)
{
	if ((unsigned)k > SCHED_ZBH1)
		return fail(err, errlen, "unknown schedule kind %d", (int)k);
	const char *name = sched_names[k];
	if (P < 1)
		return fail(err, errlen, "%s needs P >= 1 pipeline stages, got P = %d", name, P);
	if (M < 1)
		return fail(err, errlen, "%s needs M >= 1 micro-batches, got M = %d", name, M);
	if (k != SCHED_INTERLEAVED && v != 1)
		return fail(err, errlen,
		            "%s runs one model chunk per rank (v = 1), got v = %d; "
		            "interleaved(v) runs several",
		            name, v);
	if (k == SCHED_INTERLEAVED) {
		if (v < 2)
			return fail(
			        err, errlen,
			        "interleaved(v) needs v >= 2 virtual stages per rank, got v = %d "
			        "(interleaved(1) is 1f1b)",
			        v);
		if (M < P)
			return fail(
			        err, errlen,
			        "interleaved(%d) needs at least P = %d micro-batches, got M = %d "
			        "(M < P)",
			        v, P, M);
		if (M % P != 0)
			return fail(
			        err, errlen,
			        "interleaved(%d) needs micro-batches M to be a multiple of P = %d, "
			        "got M = %d",
			        v, P, M);
	}
	/* Every count and index below (K * M done-times included) fits an int. */
	if ((long long)P * M * v * 3 > INT_MAX / 4)
		return fail(err, errlen, "%s: P * M * v = %lld is too large", name,
		            (long long)P * M * v);
	return 0;
}

/* Appends to a list whose room was checked beforehand. */
typedef struct Emit {
	SchedItem *items;
	int n;
} Emit;

static void put(Emit *e, SchedWork w, int mb, int chunk)
{
	if (e->items)
		e->items[e->n] = (SchedItem){.work = w, .mb = mb, .chunk = chunk};
	e->n++;
}

static void build_gpipe(Emit *e, int M)
{
	for (int mb = 0; mb < M; mb++)
		put(e, SCHED_F, mb, 0);
	for (int mb = 0; mb < M; mb++)
		put(e, SCHED_B, mb, 0);
}

static int min_int(int a, int b)
{
	return a < b ? a : b;
}

static void build_1f1b(Emit *e, int P, int M, int stage)
{
	int warm = min_int(P - stage - 1, M);
	int steady = M - warm;
	for (int i = 0; i < warm; i++)
		put(e, SCHED_F, i, 0);
	for (int i = 0; i < steady; i++) {
		put(e, SCHED_F, warm + i, 0);
		put(e, SCHED_B, i, 0);
	}
	for (int i = steady; i < M; i++)
		put(e, SCHED_B, i, 0);
}

/* Megatron's schedule table with micro-batch groups of P: virtual
 * micro-batch i is micro-batch (i / (P v)) P + i % P of local chunk
 * (i / P) % v.  Backwards use the same table with the chunk reversed. */
static void interleaved_slot(int P, int v, int i, bool forward, int *mb, int *chunk)
{
	*mb = (i / (P * v)) * P + i % P;
	*chunk = (i / P) % v;
	if (!forward)
		*chunk = v - 1 - *chunk;
}

static void build_interleaved(Emit *e, int P, int M, int v, int stage)
{
	int total = M * v;
	int warm = min_int((P - stage - 1) * 2 + (v - 1) * P, total);
	int steady = total - warm;
	int mb, chunk;
	for (int i = 0; i < warm; i++) {
		interleaved_slot(P, v, i, true, &mb, &chunk);
		put(e, SCHED_F, mb, chunk);
	}
	for (int i = 0; i < steady; i++) {
		interleaved_slot(P, v, warm + i, true, &mb, &chunk);
		put(e, SCHED_F, mb, chunk);
		interleaved_slot(P, v, i, false, &mb, &chunk);
		put(e, SCHED_B, mb, chunk);
	}
	for (int i = steady; i < total; i++) {
		interleaved_slot(P, v, i, false, &mb, &chunk);
		put(e, SCHED_B, mb, chunk);
	}
}

static void build_zbh1(Emit *e, int P, int M, int stage)
{
	int warm = min_int(P - stage - 1, M);
	int steady = M - warm;
	int f = 0, b = 0, w = 0;
	while (f < warm)
		put(e, SCHED_F, f++, 0);
	for (int i = 0; i < steady; i++) {
		put(e, SCHED_F, f++, 0);
		put(e, SCHED_B, b++, 0);
		/* Stage s reaches P forwards ahead of its W passes after s steps. */
		if (f - w >= P)
			put(e, SCHED_W, w++, 0);
	}
	while (b < M) {
		put(e, SCHED_B, b++, 0);
		put(e, SCHED_W, w++, 0);
	}
	while (w < M)
		put(e, SCHED_W, w++, 0);
}

static int build(SchedKind k, int P, int M, int v, int stage, SchedItem *items)
{
	Emit e = {.items = items, .n = 0};
	switch (k) {
	case SCHED_GPIPE:
		build_gpipe(&e, M);
		break;
	case SCHED_1F1B:
		build_1f1b(&e, P, M, stage);
		break;
	case SCHED_INTERLEAVED:
		build_interleaved(&e, P, M, v, stage);
		break;
	case SCHED_ZBH1:
		build_zbh1(&e, P, M, stage);
		break;
	}
	return e.n;
}

int sched_build(SchedKind k, int P, int M, int v, int stage, SchedItem *items, int cap, char *err,
                size_t errlen)
{
	if (check_args(k, P, M, v, err, errlen) < 0)
		return -1;
	if (stage < 0 || stage >= P)
		return fail(err, errlen, "%s: stage %d is not in 0..%d (P = %d)", sched_names[k],
		            stage, P - 1, P);
	int n = item_count(k, M, v);
	if (!items)
		return n;
	if (cap < n)
		return fail(err, errlen, "%s: stage %d has %d items, room for %d", sched_names[k],
		            stage, n, cap);
	int got = build(k, P, M, v, stage, items);
	if (got != n)
		return fail(err, errlen, "%s: stage %d built %d items, not %d",
		            sched_names[k], stage, got, n);
	return n;
}

int sched_simulate(SchedKind k, int P, int M, int v, double tf, double tb, double hop,
                   SchedSim *out, char *err, size_t errlen)
{
	SchedCost c = {.tf = tf, .tb = tb, .tw = 0, .hop = hop};
	if (k == SCHED_ZBH1)
		c.tb = c.tw = tb / 2;
	return sched_simulate_cost(k, P, M, v, &c, out, err, errlen);
}

/* When a dependency's result reaches rank `to`: its end, plus the hop
 * latency when it was produced on another rank.  -1: not done yet. */
static double arrival(const double *done, int k, int mb, int M, int P, int to, double hop)
{
	double t = done[(size_t)k * M + mb];
	if (t < 0)
		return -1;
	return k % P == to ? t : t + hop;
}

int sched_simulate_cost(SchedKind k, int P, int M, int v, const SchedCost *c, SchedSim *out,
                        char *err, size_t errlen)
{
	if (check_args(k, P, M, v, err, errlen) < 0)
		return -1;
	if (P > SCHED_MAX_STAGES)
		return fail(err, errlen, "%s: the simulator handles at most %d stages, got P = %d",
		            sched_names[k], SCHED_MAX_STAGES, P);
	if (!(c->tf >= 0 && c->tb >= 0 && c->tw >= 0 && c->hop >= 0))
		return fail(err, errlen, "%s: durations and latency must be >= 0", sched_names[k]);

	int n = item_count(k, M, v), K = P * v;
	size_t cells = (size_t)K * M;
	SchedItem *items = malloc(sizeof *items * (size_t)n * P);
	double *fdone = malloc(sizeof *fdone * cells);
	double *bdone = malloc(sizeof *bdone * cells);
	if (!items || !fdone || !bdone) {
		free(items), free(fdone), free(bdone);
		return fail(err, errlen, "%s: out of memory", sched_names[k]);
	}
	for (size_t i = 0; i < cells; i++)
		fdone[i] = bdone[i] = -1;
	for (int s = 0; s < P; s++)
		build(k, P, M, v, s, items + (size_t)s * n);

	int pos[SCHED_MAX_STAGES] = {0}, live[SCHED_MAX_STAGES] = {0};
	double now[SCHED_MAX_STAGES] = {0};
	memset(out, 0, sizeof *out);
	int left = n * P, rc = 0;
	while (left > 0) {
		int progress = 0;
		for (int s = 0; s < P; s++) {
			while (pos[s] < n) {
				const SchedItem *it = &items[(size_t)s * n + pos[s]];
				int mk = it->chunk * P + s; /* model chunk */
				double ready = 0, dur = 0, t;
				switch (it->work) {
				case SCHED_F:
					if (mk > 0 && (ready = arrival(fdone, mk - 1, it->mb, M, P,
					                               s, c->hop)) < 0)
						goto blocked;
					dur = c->tf;
					break;
				case SCHED_B:
					if ((ready = arrival(fdone, mk, it->mb, M, P, s, 0)) < 0)
						goto blocked;
					if (mk < K - 1) {
						t = arrival(bdone, mk + 1, it->mb, M, P, s, c->hop);
						if (t < 0)
							goto blocked;
						if (t > ready)
							ready = t;
					}
					dur = c->tb;
					break;
				case SCHED_W:
					if ((ready = arrival(bdone, mk, it->mb, M, P, s, 0)) < 0)
						goto blocked;
					dur = c->tw;
					break;
				}
				double start = now[s] > ready ? now[s] : ready;
				now[s] = start + dur;
				out->busy[s] += dur;
				size_t cell = (size_t)mk * M + it->mb;
				if (it->work == SCHED_F) {
					fdone[cell] = now[s];
					if (++live[s] > out->max_inflight[s])
						out->max_inflight[s] = live[s];
				} else if (it->work == SCHED_B) {
					bdone[cell] = now[s];
					live[s]--;
				}
				pos[s]++, left--, progress = 1;
			}
		blocked:;
		}
		if (!progress) {
			int s = 0;
			while (pos[s] == n)
				s++;
			const SchedItem *it = &items[(size_t)s * n + pos[s]];
			rc = fail(err, errlen,
			          "%s: deadlock: stage %d waits at item %d (%c%d chunk %d) "
			          "(P = %d, M = %d, v = %d)",
			          sched_names[k], s, pos[s], "FBW"[it->work], it -> mb, it -> chunk,
			          P, M, v);
			break;
		}
	}
	if (rc == 0) {
		double busy = 0;
		for (int s = 0; s < P; s++) {
			if (now[s] > out->makespan)
				out->makespan = now[s];
			busy += out->busy[s];
		}
		out->util = out->makespan > 0 ? busy / (P * out->makespan) : 0;
	}
	free(items), free(fdone), free(bdone);
	return rc;
}

int sched_format(const SchedItem *items, int n, int v, char *buf, size_t len)
{
	size_t used = 0;
	for (int i = 0; i < n; i++) {
		char one[48];
		int m;
		if (v > 1)
			m = snprintf(one, sizeof one, "%s%c%dc%d", i ? " " : "",
			             "FBW"[items[i].work], items[i].mb, items[i].chunk);
		else
			m = snprintf(one, sizeof one, "%s%c%d", i ? " " : "", "FBW"[items[i].work],
			             items[i].mb);
		if (used + (size_t)m < len)
			memcpy(buf + used, one, (size_t)m);
		else if (used < len)
			memcpy(buf + used, one, len - used - 1);
		used += (size_t)m;
	}
	if (len)
		buf[used < len ? used : len - 1] = '\0';
	return used > INT_MAX ? INT_MAX : (int)used;
}
