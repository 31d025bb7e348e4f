/* sweep_impl.h - what tools/sweep.c, sweep_out.c and sweep_measure.c
 * share: the options, the model's sweep space and the candidates.
 */
#ifndef DTM_SWEEP_IMPL_H
#define DTM_SWEEP_IMPL_H

#include "frontend/ast.h"
#include "frontend/lower.h"
#include "tools/hw.h"
#include "tools/sweep.h"

#define SWEEP_MAX_CHOOSE 16 /* choose() points swept */
#define SWEEP_MAX_CANDS 2000000

typedef enum SweepSched {
	SWEEP_SCHED_FILE, /* one pipeline stage: the file's (unused) */
	SWEEP_SCHED_GPIPE,
	SWEEP_SCHED_1F1B,
	SWEEP_SCHED_INTERLEAVED, /* interleaved(2) */
} SweepSched;

typedef enum SweepAttn {
	SWEEP_ATTN_UNKNOWN, /* not compiled, or the sequence not split */
	SWEEP_ATTN_GATHER,  /* q, k, v gathered whole over the sequence's axes */
	SWEEP_ATTN_ULYSSES, /* all_to_alls to heads and back */
	SWEEP_ATTN_RING,    /* block ops round the ring */
} SweepAttn;

typedef enum SweepStatus {
	SWEEP_PENDING,
	SWEEP_OK,
	SWEEP_FAILED,   /* did not compile (or cost): reason */
	SWEEP_OVER_MEM, /* compiled, peak over --mem-limit */
} SweepStatus;

typedef struct SweepCand {
	int64_t mesh[DTM_MAX_AXES]; /* per model axis */
	uint8_t zero, sched;        /* 0..3, SweepSched */
	bool sp, rc;
	/* the context_parallel mode (IrContextParallel); it shows (layout,
	 * JSON) only where cp_split: attention's sequence is split over a
	 * mesh axis of more than one rank, so the mode decides anything */
	uint8_t cp;
	bool cp_split;
	/* what attention ran as once compiled (SweepAttn; where cp_split):
	 * the mode unset is Ulysses where that applies, else the sequence
	 * gathered */
	uint8_t attn;
	/* the schedule runs exactly the previous candidate's work lists (1f1b
	 * and gpipe with one micro-batch): the same plan, whose results it
	 * copies instead of compiling it again */
	bool dup_prev;
	int micro; /* micro-batches */
	uint8_t choose[SWEEP_MAX_CHOOSE];
	/* results */
	uint8_t status;     /* SweepStatus */
	const char *reason; /* SWEEP_FAILED: the compiler's first error (malloc'd) */
	double step_s, tokens_per_s, peak_bytes, hfu, bubble, comm_s, exposed_s;
	double comm_bytes; /* the busiest stage's bytes sent per rank (inspect's send_bytes) */
} SweepCand;

typedef struct SweepOpts {
	const char *file;
	int64_t devices;
	const char *hw_arg;
	HwProfile hw;
	char hw_used[4096]; /* the built-in's name or the profile file read */
	int nodes;
	double mem_limit; /* bytes; 0 = none */
	bool mem_limit_set;
	int top;
	bool json, csv, verify, profile;
	const char *plot;
	int measure, measure_steps;
	int measure_rounds; /* --measure-rounds: runs of each, interleaved */
	bool measure_spread; /* --measure-pick spread: K spread over the ranking */
	int jobs;
	bool quiet;         /* no progress bar */
	LowerOptions lower; /* -D and --train given by the user */
} SweepOpts;

#define SWEEP_MAX_UNTRIED 4

/* What the sweep varies, read from the model lowered once. */
typedef struct SweepSpace {
	const char *model;
	int naxes;
	const char *axes[DTM_MAX_AXES];
	int pp_axis;         /* IrModule.pp_axis, or -1 */
	int sp_axis;         /* the axis SP splits over ("tp"), or -1 */
	uint32_t zero_axes;  /* mesh axes ZeRO splits over */
	uint32_t batch_axes; /* axes splitting the batch (the first input's dim 0) */
	int64_t batch;       /* global batch (0: no input) */
	int64_t tokens_per_sample;
	/* axes splitting the sequence (the first input's dim 1), where the
	 * model has attention: context_parallel is swept where they have more
	 * than one rank */
	uint32_t seq_axes;
	int nchooses;
	int choose_nopts[SWEEP_MAX_CHOOSE];
	const char *choose_where[SWEEP_MAX_CHOOSE]; /* "file:line:col" */
	IrPipeSchedule file_schedule;
} SweepSpace;

/* One measured candidate (--measure). */
typedef struct SweepMeasured {
	int cand;  /* index in cands */
	int place; /* 1-based place in the ranking */
	double pred_s, pred_peak;
	double meas_s, meas_peak;
	int steps; /* timed steps */
} SweepMeasured;

typedef struct SweepRun {
	SweepOpts o;
	SweepSpace s;
	SweepCand *cands;
	int64_t ncands;
	int64_t nok, nfailed, nover;
	double seconds; /* compile and cost wall time */
	int threads;    /* that compiled */
	int *rank;      /* ok candidates, fastest first */
	int nrank;
	int *front; /* Pareto front over ok candidates, ascending memory */
	int nfront;
	SweepMeasured *meas; /* --measure: nmeas of them, in ranking order */
	int nmeas;
	double spearman; /* of predicted vs measured step times, NAN if < 2 */
	/* Meshes not tried: no micro-batch count splits the global batch
	 * evenly over their batch axes (the first SWEEP_MAX_UNTRIED kept,
	 * with their batch ranks); reported so a user sees why, e.g., dp = 3
	 * is missing from a sweep of a batch of 16. */
	int64_t nuntried;
	char untried[SWEEP_MAX_UNTRIED][64];
	int64_t untried_ranks[SWEEP_MAX_UNTRIED];
} SweepRun;

/* Describes a candidate as "pp=2,dp=2,tp=2 zero=1 M=4 1f1b sp ring rc"
 * (the parts that apply; the context_parallel mode as ring, ulysses or
 * cp-none where the sequence is split) into buf. */
void sweep_describe(const SweepRun *r, const SweepCand *c, char *buf, size_t cap);
/* The mesh as --mesh wants it: "pp=2,dp=2,tp=2". */
void sweep_mesh_text(const SweepRun *r, const SweepCand *c, char *buf, size_t cap);
/* The --train overrides (after the user's) that select c; returns how many
 * were written to train[] (strings in buf, cap bytes). */
int sweep_train_overrides(const SweepRun *r, const SweepCand *c, const char **train, int room,
                          char *buf, size_t cap);
const char *sweep_sched_name(int sched);
/* A context_parallel mode (IrContextParallel) as --train writes it:
 * "none", "ulysses", "ring". */
const char *sweep_cp_name(int cp);
const char *sweep_attn_name(int attn); /* SweepAttn; NULL for unknown */

/* sweep_opts.c: the command line into o (defaults first, the hardware
 * profile loaded).  Returns 0 to run, 1 on an error (printed), 2 after
 * printing help. */
int sweep_parse_opts(int argc, char **argv, SweepOpts *o);

/* sweep_out.c: the reports on stdout and the plot. */
bool sweep_print_text(FILE *out, const SweepRun *r);
bool sweep_print_json(FILE *out, const SweepRun *r);
bool sweep_print_csv(FILE *out, const SweepRun *r);
bool sweep_write_plot(const SweepRun *r, const char *path);

/* sweep_measure.c: --measure K.  Builds K candidates (the best K, or K
 * spread over the ranking) with the `dtmc build` path, runs each a few
 * steps on the local backend and stores predicted (the sweep's profile,
 * every rank on this host) and measured step time and peak memory in
 * r->meas, and the Spearman rank correlation of the two step times in
 * r->spearman.  Progress on stderr unless quiet.  Returns false after
 * printing an error. */
bool sweep_measure(SweepRun *r);
/* A new folder $TMPDIR/PREFIX-XXXXXX (TMPDIR defaults to /tmp) into
 * dir; false after an error naming `what`. */
bool sweep_tmpdir(const char *prefix, const char *what, char *dir, size_t n);
/* Runs argv[0] with argv, its stdout and stderr to the file out; returns
 * the exit status (-1 when it could not start). */
int sweep_run_to_file(char *const *argv, const char *out);
/* The median step seconds of a training binary's --log after its first
 * step (eval lines skipped); NAN and *nsteps 0 when there is none. */
double sweep_log_step_s(const char *path, int *nsteps);
/* The measured table (text), or the "measured" JSON fields. */
void sweep_print_measured(FILE *out, const SweepRun *r);
void sweep_json_measured(FILE *out, const SweepRun *r);
/* Spearman's rho of x and y (n >= 2; ties get their mean rank); NAN for
 * n < 2 or a constant series. */
double sweep_spearman(const double *x, const double *y, int n);

#endif
