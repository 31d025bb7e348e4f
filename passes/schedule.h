/* schedule.h - pipeline schedules: the ordered work list of each stage
 * and a timeline simulator (see schedule.c).
 *
 * Pure arithmetic, no IR: the pipeline pass splits the program into P
 * stages (P * v model chunks for interleaved schedules) and asks this
 * module in which order each stage runs the forward (F), backward (B) and,
 * for ZB-H1, weight-gradient (W) work of the M micro-batches.
 *
 * Model chunks: with v virtual stages per rank the model is cut into
 * K = v * P chunks run in order 0..K-1; chunk k = chunk * P + stage lives
 * on rank `stage` as its local chunk `chunk` (Megatron's layout), so a
 * micro-batch's forward visits ranks 0..P-1 v times.  v = 1 except for
 * SCHED_INTERLEAVED.
 */
#ifndef DTM_SCHEDULE_H
#define DTM_SCHEDULE_H

#include <stddef.h>

typedef enum SchedKind {
	SCHED_GPIPE,       /* all forwards, then all backwards (both 0..M-1) */
	SCHED_1F1B,        /* PipeDream-flush / Megatron non-interleaved */
	SCHED_INTERLEAVED, /* Megatron interleaved 1F1B, v >= 2 chunks a rank */
	SCHED_ZBH1,        /* zero bubble ZB-H1 (Qi et al.): B split in B + W */
} SchedKind;

typedef enum SchedWork {
	SCHED_F, /* forward */
	SCHED_B, /* backward; for ZB-H1 the input gradient only */
	SCHED_W, /* weight gradient (ZB-H1 only) */
} SchedWork;

typedef struct SchedItem {
	SchedWork work;
	int mb;    /* micro-batch, 0..M-1 */
	int chunk; /* local chunk (virtual stage) on this rank, 0..v-1;
	            * model chunk k = chunk * P + stage */
} SchedItem;

/* The most stages sched_simulate handles (SchedSim's arrays). */
#define SCHED_MAX_STAGES 64

/* Fills items (room for cap) with stage `stage`'s ordered work list for P
 * stages, M micro-batches and v virtual stages per rank (1 unless
 * interleaved).  With items == NULL only counts.  Returns the number of
 * items (2*M*v, 3*M for ZB-H1), or -1 with a one-line message in err (which
 * may be NULL) for an invalid combination or too small a cap. */
int sched_build(SchedKind k, int P, int M, int v, int stage, SchedItem *items, int cap, char *err,
                size_t errlen);

/* Per-item durations: tf a forward, tb a backward, tw a weight-gradient
 * pass of one chunk and micro-batch; hop the latency a send adds between
 * two ranks.  For interleaved schedules an item is one chunk, so a whole
 * stage's forward takes v * tf. */
typedef struct SchedCost {
	double tf, tb, tw, hop;
} SchedCost;

typedef struct SchedSim {
	double makespan;                    /* the last item's end */
	double busy[SCHED_MAX_STAGES];      /* per stage: sum of its durations */
	double util;                        /* sum busy / (P * makespan) */
	int max_inflight[SCHED_MAX_STAGES]; /* per stage: most forward activations
	                                      * alive at once (F done, B not yet; one
	                                      * per chunk and micro-batch) */
} SchedSim;

/* Runs every stage's list in order, each item as soon as its rank is free
 * and its inputs are there: F(k, mb) after F(k-1, mb), B(k, mb) after
 * F(k, mb) and B(k+1, mb), W(k, mb) after B(k, mb), plus hop where the
 * producer sits on another rank.  tb is the whole backward: for ZB-H1 the
 * B and W passes take tb/2 each, so the schedules compare on equal work.
 * Returns 0, or -1 with a message in err (invalid input, or a deadlock,
 * which would be a bug in sched_build). */
int sched_simulate(SchedKind k, int P, int M, int v, double tf, double tb, double hop,
                   SchedSim *out, char *err, size_t errlen);

/* The same with explicit costs (c->tw is used by ZB-H1 only; the other
 * schedules run B as one pass of c->tb). */
int sched_simulate_cost(SchedKind k, int P, int M, int v, const SchedCost *c, SchedSim *out,
                        char *err, size_t errlen);

/* "gpipe", "1f1b", "interleaved", "zb" (also "zbh1", "zb-h1") -> *k.
 * Returns 0, or -1 for an unknown name (*k untouched). */
int sched_parse(const char *name, SchedKind *k);

/* The canonical name of a schedule kind ("gpipe", "1f1b", "interleaved",
 * "zb"). */
const char *sched_name(SchedKind k);

/* Writes items as text, space separated: "F0 F1 B0 ..." when v == 1,
 * "F0c1 B3c0 ..." (micro-batch, then local chunk) when v > 1, "W2" for
 * weight-gradient passes.  Truncates to fit len (always terminated);
 * returns the length the whole text needs, as snprintf does. */
int sched_format(const SchedItem *items, int n, int v, char *buf, size_t len);

#endif
