/* test_schedule.c - passes/schedule.c: pipeline schedules and the timeline.
 *
 * Golden per-stage lists for gpipe, 1f1b, interleaved(2) and zb at
 * (P = 4, M = 8) and (P = 2, M = 4), written out by hand from the published
 * rules (Megatron's forward_backward_pipelining_without_interleaving and
 * _with_interleaving: warm-up min(P-s-1, M), resp. (P-s-1)*2 + (v-1)*P
 * forwards, then F/B pairs, then the remaining backwards; the interleaved
 * table takes micro-batches in groups of P, chunk by chunk, backwards with
 * the chunks reversed; ZB-H1 delays stage s's W passes by s steady steps).
 * Every list of many (kind, P, M, v) is a valid order (each item once, F
 * before B before W) and simulates without deadlock.  The simulated
 * timeline reproduces REFERENCE.md's utilisations exactly (1e-12):
 * M/(M+P-1) for gpipe and 1f1b with tf = 1, tb = 2 and tf = tb = 1, vM/(vM+P-1)
 * for interleaved (P = 4, M = 8, v = 2: 16/19; in units of one chunk's
 * forward the pipeline takes 19 slots where GPipe takes 11 of twice the
 * length), and ZB-H1's bubble (P-1)*tf at tf = tb = tw.  In-flight
 * activations: M for gpipe, min(P-s, M) for 1f1b (P on stage 0).  Invalid
 * combinations get their message.
 *
 * tests/golden/schedules.txt holds every list and timeline of the golden
 * cases; `test_schedule --update` (from the repository root) rewrites it.
 */
#include "check.h"
#include "passes/schedule.h"

#include <stdbool.h>
#include <stdlib.h>

#define GOLDEN "tests/golden/schedules.txt"

/* Stage `stage`'s list as text, or an "error: ..." line. */
static const char *list(SchedKind k, int P, int M, int v, int stage)
{
	static char buf[4096];
	static SchedItem items[1024];
	char err[256];
	int n = sched_build(k, P, M, v, stage, items, 1024, err, sizeof err);
	if (n < 0) {
		snprintf(buf, sizeof buf, "error: %s", err);
		return buf;
	}
	sched_format(items, n, v, buf, sizeof buf);
	return buf;
}

static void test_gpipe(void)
{
	for (int s = 0; s < 4; s++)
		CHECK_EQ_STR(list(SCHED_GPIPE, 4, 8, 1, s),
		             "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
	for (int s = 0; s < 2; s++)
		CHECK_EQ_STR(list(SCHED_GPIPE, 2, 4, 1, s), "F0 F1 F2 F3 B0 B1 B2 B3");
}

static void test_1f1b(void)
{
	/* Warm-up 3, 2, 1, 0 forwards; cool-down as many backwards. */
	CHECK_EQ_STR(list(SCHED_1F1B, 4, 8, 1, 0),
	             "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
	CHECK_EQ_STR(list(SCHED_1F1B, 4, 8, 1, 1),
	             "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
	CHECK_EQ_STR(list(SCHED_1F1B, 4, 8, 1, 2),
	             "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
	CHECK_EQ_STR(list(SCHED_1F1B, 4, 8, 1, 3),
	             "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
	CHECK_EQ_STR(list(SCHED_1F1B, 2, 4, 1, 0), "F0 F1 B0 F2 B1 F3 B2 B3");
	CHECK_EQ_STR(list(SCHED_1F1B, 2, 4, 1, 1), "F0 B0 F1 B1 F2 B2 F3 B3");
	/* M < P: Megatron caps the warm-up at M (stage 0: all forwards first). */
	CHECK_EQ_STR(list(SCHED_1F1B, 4, 2, 1, 0), "F0 F1 B0 B1");
	CHECK_EQ_STR(list(SCHED_1F1B, 4, 2, 1, 2), "F0 F1 B0 B1");
	CHECK_EQ_STR(list(SCHED_1F1B, 4, 2, 1, 3), "F0 B0 F1 B1");
}

static void test_interleaved(void)
{
	/* P = 4, M = 8, v = 2.  Forward table (micro-batch, chunk):
	 *   0c0 1c0 2c0 3c0 0c1 1c1 2c1 3c1 4c0 5c0 6c0 7c0 4c1 5c1 6c1 7c1
	 * backward table: the same with the chunks swapped.  Warm-up
	 * (3-s)*2 + 4 = 10, 8, 6, 4. */
	CHECK_EQ_STR(list(SCHED_INTERLEAVED, 4, 8, 2, 0),
	             "F0c0 F1c0 F2c0 F3c0 F0c1 F1c1 F2c1 F3c1 F4c0 F5c0 "
	             "F6c0 B0c1 F7c0 B1c1 F4c1 B2c1 F5c1 B3c1 F6c1 B0c0 F7c1 B1c0 "
	             "B2c0 B3c0 B4c1 B5c1 B6c1 B7c1 B4c0 B5c0 B6c0 B7c0");
	CHECK_EQ_STR(list(SCHED_INTERLEAVED, 4, 8, 2, 1),
	             "F0c0 F1c0 F2c0 F3c0 F0c1 F1c1 F2c1 F3c1 "
	             "F4c0 B0c1 F5c0 B1c1 F6c0 B2c1 F7c0 B3c1 F4c1 B0c0 F5c1 B1c0 F6c1 B2c0 "
	             "F7c1 B3c0 "
	             "B4c1 B5c1 B6c1 B7c1 B4c0 B5c0 B6c0 B7c0");
	CHECK_EQ_STR(list(SCHED_INTERLEAVED, 4, 8, 2, 2),
	             "F0c0 F1c0 F2c0 F3c0 F0c1 F1c1 "
	             "F2c1 B0c1 F3c1 B1c1 F4c0 B2c1 F5c0 B3c1 F6c0 B0c0 F7c0 B1c0 F4c1 B2c0 "
	             "F5c1 B3c0 F6c1 B4c1 F7c1 B5c1 "
	             "B6c1 B7c1 B4c0 B5c0 B6c0 B7c0");
	CHECK_EQ_STR(list(SCHED_INTERLEAVED, 4, 8, 2, 3),
	             "F0c0 F1c0 F2c0 F3c0 "
	             "F0c1 B0c1 F1c1 B1c1 F2c1 B2c1 F3c1 B3c1 F4c0 B0c0 F5c0 B1c0 F6c0 B2c0 "
	             "F7c0 B3c0 F4c1 B4c1 F5c1 B5c1 F6c1 B6c1 F7c1 B7c1 "
	             "B4c0 B5c0 B6c0 B7c0");
	/* P = 2, M = 4, v = 2: table 0c0 1c0 0c1 1c1 2c0 3c0 2c1 3c1; warm-up 4, 2. */
	CHECK_EQ_STR(list(SCHED_INTERLEAVED, 2, 4, 2, 0),
	             "F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 "
	             "B2c1 B3c1 B2c0 B3c0");
	CHECK_EQ_STR(list(SCHED_INTERLEAVED, 2, 4, 2, 1),
	             "F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 B2c1 F3c1 B3c1 "
	             "B2c0 B3c0");
	/* M = P: stage 0's warm-up (2*3 + 4 = 10) exceeds v*M = 8: all forwards. */
	CHECK_EQ_STR(list(SCHED_INTERLEAVED, 4, 4, 2, 0),
	             "F0c0 F1c0 F2c0 F3c0 F0c1 F1c1 F2c1 F3c1 B0c1 B1c1 B2c1 B3c1 B0c0 B1c0 "
	             "B2c0 B3c0");
}

static void test_zbh1(void)
{
	/* 1F1B's F/B order; stage s's W passes trail its B passes by s steady
	 * steps (P forwards ahead of the W passes), B W pairs in the
	 * cool-down, the delayed W passes last. */
	CHECK_EQ_STR(list(SCHED_ZBH1, 4, 8, 1, 0),
	             "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7");
	CHECK_EQ_STR(list(SCHED_ZBH1, 4, 8, 1, 1),
	             "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7");
	CHECK_EQ_STR(list(SCHED_ZBH1, 4, 8, 1, 2),
	             "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7");
	CHECK_EQ_STR(list(SCHED_ZBH1, 4, 8, 1, 3),
	             "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7");
	CHECK_EQ_STR(list(SCHED_ZBH1, 2, 4, 1, 0), "F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3");
	CHECK_EQ_STR(list(SCHED_ZBH1, 2, 4, 1, 1), "F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3");
}

/* Each (work, mb, chunk) exactly once; F before B before W. */
static int valid_order(SchedKind k, int P, int M, int v, int stage)
{
	static SchedItem items[4096];
	static int seen[3][64][8];
	char err[256];
	int n = sched_build(k, P, M, v, stage, items, 4096, err, sizeof err);
	int want = (k == SCHED_ZBH1 ? 3 : 2) * M * v;
	if (n != want || M > 64 || v > 8)
		return 0;
	memset(seen, 0, sizeof seen);
	for (int i = 0; i < n; i++) {
		const SchedItem *it = &items[i];
		if (it->mb < 0 || it->mb >= M || it->chunk < 0 || it->chunk >= v)
			return 0;
		if (seen[it->work][it->mb][it->chunk]++)
			return 0;
		if (it->work == SCHED_B && !seen[SCHED_F][it->mb][it->chunk])
			return 0;
		if (it->work == SCHED_W && !seen[SCHED_B][it->mb][it->chunk])
			return 0;
	}
	return 1;
}

static void test_valid_everywhere(void)
{
	int lists = 0, bad = 0, sims = 0, simbad = 0;
	for (int k = SCHED_GPIPE; k <= SCHED_ZBH1; k++) {
		for (int P = 1; P <= 6; P++) {
			for (int M = 1; M <= 13; M++) {
				for (int v = 1; v <= 3; v++) {
					if ((k == SCHED_INTERLEAVED) != (v > 1))
						continue;
					if (k == SCHED_INTERLEAVED && (M < P || M % P))
						continue;
					for (int s = 0; s < P; s++, lists++)
						bad += !valid_order(k, P, M, v, s);
					SchedSim sim;
					char err[256];
					sims++;
					if (sched_simulate(k, P, M, v, 1, 2, 0.25, &sim, err,
					                   sizeof err) != 0 ||
					    !(sim.util > 0 && sim.util <= 1)) {
						simbad++;
						fprintf(stderr, "%s P=%d M=%d v=%d: %s\n",
						        sched_name(k), P, M, v, err);
					}
				}
			}
		}
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(simbad, 0);
	CHECK(lists > 500 && sims > 200);
}

static SchedSim sim(SchedKind k, int P, int M, int v, double tf, double tb)
{
	SchedSim s;
	char err[256] = "";
	memset(&s, 0, sizeof s);
	if (sched_simulate(k, P, M, v, tf, tb, 0, &s, err, sizeof err) != 0)
		fprintf(stderr, "sched_simulate: %s\n", err);
	return s;
}

static void test_utilisation(void)
{
	static const int pm[][2] = {{4, 8}, {2, 4}, {4, 4}, {8, 16}, {3, 7}, {4, 2}};
	static const double t[][2] = {{1, 2}, {1, 1}};
	for (size_t i = 0; i < sizeof pm / sizeof pm[0]; i++) {
		for (size_t j = 0; j < 2; j++) {
			int P = pm[i][0], M = pm[i][1];
			double tf = t[j][0], tb = t[j][1];
			for (int k = SCHED_GPIPE; k <= SCHED_1F1B; k++) {
				SchedSim s = sim(k, P, M, 1, tf, tb);
				CHECK_NEAR(s.util, (double)M / (M + P - 1), 1e-12);
				CHECK_NEAR(s.makespan, (M + P - 1) * (tf + tb), 1e-12);
			}
		}
	}
	/* The headline numbers. */
	CHECK_NEAR(sim(SCHED_GPIPE, 4, 8, 1, 1, 2).util, 8.0 / 11, 1e-12);
	CHECK_NEAR(sim(SCHED_1F1B, 4, 8, 1, 1, 2).util, 8.0 / 11, 1e-12);
	CHECK_NEAR(sim(SCHED_1F1B, 4, 8, 1, 1, 1).util, 8.0 / 11, 1e-12);

	/* Interleaved: v*M + P - 1 slots of a chunk's (tf + tb). */
	static const int pmv[][3] = {{4, 8, 2}, {2, 4, 2}, {4, 16, 2}, {4, 8, 3}, {2, 6, 4}};
	for (size_t i = 0; i < sizeof pmv / sizeof pmv[0]; i++) {
		for (size_t j = 0; j < 2; j++) {
			int P = pmv[i][0], M = pmv[i][1], v = pmv[i][2];
			double tf = t[j][0], tb = t[j][1];
			SchedSim s = sim(SCHED_INTERLEAVED, P, M, v, tf, tb);
			CHECK_NEAR(s.util, (double)(v * M) / (v * M + P - 1), 1e-12);
			CHECK_NEAR(s.makespan, (v * M + P - 1) * (tf + tb), 1e-12);
		}
	}
	SchedSim il = sim(SCHED_INTERLEAVED, 4, 8, 2, 1, 1);
	CHECK_NEAR(il.util, 16.0 / 19, 1e-12);
	/* REFERENCE.md: the forward phase takes 19 slots of t/2 = 9.5t vs 11t;
	 * with a chunk forward of 1 (t = 2) the whole step takes 19 * 2 = 38
	 * where 1f1b takes 11 * 4 = 44. */
	CHECK_NEAR(il.makespan, 38, 1e-12);
	CHECK_NEAR(sim(SCHED_1F1B, 4, 8, 1, 2, 2).makespan, 44, 1e-12);
	CHECK_NEAR(sim(SCHED_INTERLEAVED, 4, 8, 2, 1, 2).util, 16.0 / 19, 1e-12);

	/* ZB-H1 at tf = tb = tw = 1: bubble (P-1)*(tf+tb-tw) = P-1, a third of
	 * 1f1b's (P-1)*(tf+tb+tw). */
	SchedCost c = {.tf = 1, .tb = 1, .tw = 1, .hop = 0};
	SchedSim z;
	char err[256];
	for (size_t i = 0; i < sizeof pm / sizeof pm[0]; i++) {
		int P = pm[i][0], M = pm[i][1];
		if (M < P)
			continue;
		CHECK_EQ_INT(sched_simulate_cost(SCHED_ZBH1, P, M, 1, &c, &z, err, sizeof err), 0);
		CHECK_NEAR(z.makespan, 3 * M + P - 1, 1e-12);
		CHECK_NEAR(z.util, (double)(3 * M) / (3 * M + P - 1), 1e-12);
	}
	/* sched_simulate splits tb in halves for B and W: the same 27 vs 1f1b's 33. */
	CHECK_NEAR(sim(SCHED_ZBH1, 4, 8, 1, 1, 2).makespan, 27, 1e-12);
	CHECK_NEAR(sim(SCHED_ZBH1, 4, 8, 1, 1, 2).util, 8.0 / 9, 1e-12);
	CHECK_NEAR(sim(SCHED_1F1B, 4, 8, 1, 1, 2).makespan, 33, 1e-12);

	/* Busy time: every stage does M forwards and M backwards. */
	SchedSim g = sim(SCHED_1F1B, 4, 8, 1, 1, 2);
	for (int s = 0; s < 4; s++)
		CHECK_NEAR(g.busy[s], 24, 1e-12);
}

static void test_hop(void)
{
	/* GPipe: each of the P-1 hops is crossed once forward, once backward. */
	SchedSim s;
	char err[256];
	CHECK_EQ_INT(sched_simulate(SCHED_GPIPE, 4, 8, 1, 1, 2, 0.5, &s, err, sizeof err), 0);
	CHECK_NEAR(s.makespan, 33 + 2 * 3 * 0.5, 1e-12);
	CHECK_EQ_INT(sched_simulate(SCHED_1F1B, 4, 8, 1, 1, 2, 0.5, &s, err, sizeof err), 0);
	CHECK(s.makespan >= 33 + 2 * 3 * 0.5);
	CHECK(s.util < 8.0 / 11);
	CHECK_EQ_INT(sched_simulate(SCHED_INTERLEAVED, 4, 8, 2, 1, 2, 0.5, &s, err, sizeof err), 0);
	/* Latency only delays (57 without). */
	CHECK(s.makespan > 57);
}

static void test_inflight(void)
{
	static const int pm[][2] = {{4, 8}, {2, 4}, {4, 4}, {8, 16}, {4, 2}};
	for (size_t i = 0; i < sizeof pm / sizeof pm[0]; i++) {
		int P = pm[i][0], M = pm[i][1];
		SchedSim g = sim(SCHED_GPIPE, P, M, 1, 1, 2);
		SchedSim f = sim(SCHED_1F1B, P, M, 1, 1, 2);
		SchedSim z = sim(SCHED_ZBH1, P, M, 1, 1, 2);
		for (int s = 0; s < P; s++) {
			CHECK_EQ_INT(g.max_inflight[s], M);
			int want = P - s < M ? P - s : M;
			CHECK_EQ_INT(f.max_inflight[s], want);
			CHECK(f.max_inflight[s] <= P);
			/* ZB-H1 keeps 1F1B's activations (W needs only a part). */
			CHECK_EQ_INT(z.max_inflight[s], want);
		}
		if (M >= P)
			CHECK_EQ_INT(f.max_inflight[0], P);
	}
	/* Interleaved counts one activation per chunk: warm-up + 1. */
	SchedSim il = sim(SCHED_INTERLEAVED, 4, 8, 2, 1, 2);
	CHECK_EQ_INT(il.max_inflight[0], 11);
	CHECK_EQ_INT(il.max_inflight[1], 9);
	CHECK_EQ_INT(il.max_inflight[2], 7);
	CHECK_EQ_INT(il.max_inflight[3], 5);
}

static int build_err(SchedKind k, int P, int M, int v, int stage, int cap, char *err)
{
	static SchedItem items[256];
	return sched_build(k, P, M, v, stage, items, cap, err, 256);
}

static void test_errors(void)
{
	char err[256];
	CHECK_EQ_INT(build_err(SCHED_INTERLEAVED, 4, 6, 2, 0, 256, err), -1);
	CHECK_EQ_STR(err,
	             "interleaved(2) needs micro-batches M to be a multiple of P = 4, got M = 6");
	CHECK_EQ_INT(build_err(SCHED_INTERLEAVED, 4, 2, 2, 0, 256, err), -1);
	CHECK_EQ_STR(err, "interleaved(2) needs at least P = 4 micro-batches, got M = 2 (M < P)");
	CHECK_EQ_INT(build_err(SCHED_INTERLEAVED, 4, 8, 1, 0, 256, err), -1);
	CHECK_EQ_STR(err, "interleaved(v) needs v >= 2 virtual stages per rank, got v = 1 "
	                  "(interleaved(1) is 1f1b)");
	CHECK_EQ_INT(build_err(SCHED_1F1B, 4, 8, 2, 0, 256, err), -1);
	CHECK_EQ_STR(err, "1f1b runs one model chunk per rank (v = 1), got v = 2; interleaved(v) "
	                  "runs several");
	CHECK_EQ_INT(build_err(SCHED_GPIPE, 0, 8, 1, 0, 256, err), -1);
	CHECK_EQ_STR(err, "gpipe needs P >= 1 pipeline stages, got P = 0");
	CHECK_EQ_INT(build_err(SCHED_ZBH1, 4, 0, 1, 0, 256, err), -1);
	CHECK_EQ_STR(err, "zb needs M >= 1 micro-batches, got M = 0");
	CHECK_EQ_INT(build_err(SCHED_1F1B, 4, 8, 1, 4, 256, err), -1);
	CHECK_EQ_STR(err, "1f1b: stage 4 is not in 0..3 (P = 4)");
	CHECK_EQ_INT(build_err(SCHED_1F1B, 4, 8, 1, 0, 15, err), -1);
	CHECK_EQ_STR(err, "1f1b: stage 0 has 16 items, room for 15");
	CHECK_EQ_INT(build_err((SchedKind)7, 4, 8, 1, 0, 256, err), -1);
	CHECK_EQ_STR(err, "unknown schedule kind 7");
	CHECK_EQ_INT(build_err(SCHED_1F1B, 4, 1 << 28, 1, 0, 256, err), -1);
	/* Counting only, and the exact fit. */
	CHECK_EQ_INT(sched_build(SCHED_ZBH1, 4, 8, 1, 0, NULL, 0, NULL, 0), 24);
	CHECK_EQ_INT(sched_build(SCHED_INTERLEAVED, 4, 8, 2, 3, NULL, 0, NULL, 0), 32);
	CHECK_EQ_INT(build_err(SCHED_1F1B, 4, 8, 1, 0, 16, err), 16);
	/* A NULL err is allowed. */
	CHECK_EQ_INT(sched_build(SCHED_INTERLEAVED, 4, 6, 2, 0, NULL, 0, NULL, 0), -1);

	SchedSim s;
	CHECK_EQ_INT(sched_simulate(SCHED_1F1B, 65, 80, 1, 1, 2, 0, &s, err, sizeof err), -1);
	CHECK_EQ_STR(err, "1f1b: the simulator handles at most 64 stages, got P = 65");
	CHECK_EQ_INT(sched_simulate(SCHED_INTERLEAVED, 4, 6, 2, 1, 2, 0, &s, err, sizeof err), -1);
	CHECK_EQ_STR(err,
	             "interleaved(2) needs micro-batches M to be a multiple of P = 4, got M = 6");
	CHECK_EQ_INT(sched_simulate(SCHED_1F1B, 4, 8, 1, -1, 2, 0, &s, err, sizeof err), -1);
	CHECK_EQ_STR(err, "1f1b: durations and latency must be >= 0");

	SchedKind k = SCHED_GPIPE;
	CHECK_EQ_INT(sched_parse("1f1b", &k), 0);
	CHECK_EQ_INT(k, SCHED_1F1B);
	CHECK_EQ_INT(sched_parse("interleaved", &k), 0);
	CHECK_EQ_INT(k, SCHED_INTERLEAVED);
	CHECK_EQ_INT(sched_parse("zb", &k), 0);
	CHECK_EQ_INT(k, SCHED_ZBH1);
	CHECK_EQ_INT(sched_parse("gpipe", &k), 0);
	CHECK_EQ_INT(k, SCHED_GPIPE);
	CHECK_EQ_INT(sched_parse("zb-h1", &k), 0);
	CHECK_EQ_INT(k, SCHED_ZBH1);
	CHECK_EQ_INT(sched_parse("pipedream", &k), -1);
	CHECK_EQ_INT(sched_parse("1F1B", &k), -1);
	CHECK_EQ_INT(sched_parse(NULL, &k), -1);
	CHECK_EQ_INT(k, SCHED_ZBH1);
	CHECK_EQ_STR(sched_name(SCHED_INTERLEAVED), "interleaved");

	/* sched_format truncates like snprintf. */
	SchedItem it[3] = {{SCHED_F, 0, 0}, {SCHED_B, 10, 1}, {SCHED_W, 2, 0}};
	char small[6];
	CHECK_EQ_INT(sched_format(it, 3, 1, small, sizeof small), 9);
	CHECK_EQ_STR(small, "F0 B1");
	char big[32];
	CHECK_EQ_INT(sched_format(it, 3, 2, big, sizeof big), 15);
	CHECK_EQ_STR(big, "F0c0 B10c1 W2c0");
}

/* The golden file: every list and timeline of the golden cases. */
static char *dump(void)
{
	static const struct {
		SchedKind k;
		int v;
	} kinds[] = {{SCHED_GPIPE, 1}, {SCHED_1F1B, 1}, {SCHED_INTERLEAVED, 2}, {SCHED_ZBH1, 1}};
	static const int pm[][2] = {{4, 8}, {2, 4}};
	size_t cap = 1 << 16, len = 0;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	out[0] = '\0';
	len += snprintf(
	        out + len, cap - len,
	        "# passes/schedule.c: per-stage work lists (F forward, B backward, W weight\n"
	        "# gradient; cN = local chunk) and the simulated timeline (tf = 1, tb = 2, no\n"
	        "# hop latency; zb runs B and W in tb/2 each).  Rewrite: test_schedule --update\n");
	for (size_t i = 0; i < sizeof pm / sizeof pm[0]; i++) {
		for (size_t j = 0; j < sizeof kinds / sizeof kinds[0]; j++) {
			int P = pm[i][0], M = pm[i][1], v = kinds[j].v;
			SchedSim s = sim(kinds[j].k, P, M, v, 1, 2);
			len += snprintf(out + len, cap - len, "\n%s P=%d M=%d v=%d\n",
			                sched_name(kinds[j].k), P, M, v);
			for (int st = 0; st < P; st++)
				len += snprintf(out + len, cap - len, "  stage %d: %s\n", st,
				                list(kinds[j].k, P, M, v, st));
			len += snprintf(out + len, cap - len, "  makespan %g util %.12f inflight",
			                s.makespan, s.util);
			for (int st = 0; st < P; st++)
				len += snprintf(out + len, cap - len, " %d", s.max_inflight[st]);
			len += snprintf(out + len, cap - len, "\n");
		}
	}
	return out;
}

static void test_golden(bool update)
{
	char *want = NULL, *got = dump();
	CHECK(got != NULL);
	if (!got)
		return;
	if (update) {
		FILE *f = fopen(GOLDEN, "wb");
		CHECK(f != NULL);
		if (f) {
			fputs(got, f);
			fclose(f);
			printf("wrote %s\n", GOLDEN);
		}
		free(got);
		return;
	}
	FILE *f = fopen(GOLDEN, "rb");
	CHECK(f != NULL);
	if (f) {
		fseek(f, 0, SEEK_END);
		long n = ftell(f);
		fseek(f, 0, SEEK_SET);
		want = malloc((size_t)n + 1);
		if (want && fread(want, 1, (size_t)n, f) == (size_t)n)
			want[n] = '\0';
		fclose(f);
	}
	CHECK(want && strcmp(want, got) == 0);
	if (want && strcmp(want, got) != 0)
		fprintf(stderr, "%s differs; got:\n%s", GOLDEN, got);
	free(want);
	free(got);
}

int main(int argc, char **argv)
{
	bool update = argc > 1 && strcmp(argv[1], "--update") == 0;
	test_gpipe();
	test_1f1b();
	test_interleaved();
	test_zbh1();
	test_valid_everywhere();
	test_utilisation();
	test_hop();
	test_inflight();
	test_errors();
	test_golden(update);
	return check_report();
}
