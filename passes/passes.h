/* passes.h - the pipeline of IR -> IR passes.
 *
 * Each pass consumes a verified module and produces one (in place or new);
 * the verifier runs after every pass.  `dtmc print --after=NAME` stops the
 * pipeline after the named pass and prints the IR.  The last two entries,
 * fuse and memplan, are analyses: they leave the IR as it is and keep
 * their plans in a PassAnalyses.  driver/driver.h is the one caller that
 * runs the whole pipeline (lower -> passes -> analyses -> Plan).
 */
#ifndef DTM_PASSES_H
#define DTM_PASSES_H

#include "ir/ir.h"
#include "passes/fuse.h"
#include "passes/memplan.h"

typedef struct PassOptions {
	bool verbose;
} PassOptions;

/* What the analyses at the end of the pipeline computed (fuse, then
 * memplan): kept beside the module for the plan builder, the emitters and
 * the tools, so nothing computes them again.  A pass that changes the IR
 * drops them (NULL).  The results live in `arena` (NULL: the module's). */
typedef struct PassAnalyses {
	Arena *arena;
	FusePlan *fuse; /* the fuse analysis's, once it ran */
	MemPlan *mem;   /* memplan's, once it ran */
} PassAnalyses;

/* The train settings a pass reads (Pass.reads): a bit per IrTrainField,
 * PASS_READS(IR_TRAIN_ZERO), and PASS_READS_CHUNKS for the model chunks
 * per pipeline rank (interleaved(v)'s v, else 1), which is all some passes
 * see of `schedule` and `virtual_stages`.  Read means the pass's output
 * depends on the value; a range check does not count (optim's
 * ir_train_check, the verifier's zero stage), since values are checked
 * where they are given.  `dtmc sweep` derives from these which prefix of
 * the pipeline candidates differing in some settings share
 * (pass_first_reader); tests/unit/test_pass_reads.c checks that a pass's
 * output does not change with a setting it does not declare. */
#define PASS_READS(field) ((uint64_t)1 << (field))
#define PASS_READS_CHUNKS ((uint64_t)1 << IR_TRAIN_COUNT)

typedef struct Pass {
	const char *name;
	/* A transform: returns false after reporting errors to d. */
	bool (*run)(IrModule *m, Diag *d, const PassOptions *opt);
	/* An analysis (run is NULL): leaves m as it is, its result in an. */
	bool (*analyse)(const IrModule *m, PassAnalyses *an, Diag *d, const PassOptions *opt);
	uint64_t reads; /* PASS_READS bits */
} Pass;

#define PASS_MAX 32 /* passes in the pipeline, at most */

/* Seconds per pass, by pipeline position, added up over runs: the
 * calling thread's CPU time and the wall time. */
typedef struct PassTimes {
	double cpu_s[PASS_MAX], wall_s[PASS_MAX];
} PassTimes;

/* One run of the pass manager. */
typedef struct PassRunOptions {
	/* The last pass to run ("lower": none); NULL: to the end. */
	const char *stop_after;
	/* Neither the verifier after each pass nor the `verify` pass (which
	 * is the verifier): for speed where the input is trusted (dtmc
	 * sweep without --verify).  Off by default: verify-each. */
	bool no_verify;
	bool verbose;     /* name each pass on stderr; memplan's arenas */
	PassTimes *times; /* when set, each pass's time is added to it */
	/* Where the analyses keep their results; NULL: they run as checks
	 * and their results are dropped. */
	PassAnalyses *an;
} PassRunOptions;

/* Computes the analyses an lacks (fuse, memplan) on m, as the pipeline's
 * last passes do: for IR text read after them, whose plans were not kept.
 * False after reporting to d. */
bool pass_analyses(const IrModule *m, PassAnalyses *an, Diag *d);

/* The passes in pipeline order, terminated by a {NULL} entry. */
const Pass *pass_list(void);
int pass_count(void);
/* The pipeline position of pass `name` (-1 for "lower" or NULL, -2 when
 * there is no such pass). */
int pass_position(const char *name);
/* The position of the first pass reading any of `settings` (PASS_READS
 * bits); pass_count() when none does. */
int pass_first_reader(uint64_t settings);
/* The pass manager: runs the passes after m->after (IR text printed after
 * a pass goes on from there) up to and including o->stop_after, with the
 * verifier after each unless o->no_verify, timing each into o->times.  It
 * trusts m as an input (see pass_check_input).  Sets m->after. */
bool pass_run(IrModule *m, Diag *d, const PassRunOptions *o);
/* Runs the pipeline up to and including `stop_after` (NULL = all), with the
 * verifier after each pass, from where m stands: after m->after (IR text
 * printed after a pass) or from the start.  "lower" names the state
 * before any pass; a stop before m->after is an error.  Checks the input
 * first (pass_check_input); the analyses' results are dropped. */
bool pass_run_until(IrModule *m, Diag *d, const PassOptions *opt, const char *stop_after);
bool pass_exists(const char *name);
/* Whether m can enter the pipeline where it stands (m->after): that names
 * a pass, and a program before partition holds no per-rank op.  Reports
 * what is wrong at the IR's `after` line or the node.  pass_run_until
 * calls it; `dtmc check` too, so what it passes the pipeline takes. */
bool pass_check_input(const IrModule *m, Diag *d);
/* Whether pass `name` has run on m (m->after is it or a later pass). */
bool pass_has_run(const IrModule *m, const char *name);
/* A pass found its input inconsistent in a way no earlier pass leaves it
 * (a micro-batch's node in no schedule item).  From IR text (from_text)
 * that is the text's fault and a user error saying so; else an internal
 * error (diag_internal). */
void pass_fault(const IrModule *m, Diag *d, SrcLoc loc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
