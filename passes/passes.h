/* passes.h - the pipeline of IR -> IR passes.
 *
 * Each pass consumes a verified module and produces one (in place or new);
 * the verifier runs after every pass.  `dtmc print --after=NAME` stops the
 * pipeline after the named pass and prints the IR.
 */
#ifndef DTM_PASSES_H
#define DTM_PASSES_H

#include "../ir/ir.h"

typedef struct PassOptions {
	bool verbose;
} PassOptions;

typedef struct Pass {
	const char *name;
	/* Returns false after reporting errors to d. */
	bool (*run)(IrModule *m, Diag *d, const PassOptions *opt);
} Pass;

/* The passes in pipeline order, terminated by {NULL, NULL}. */
const Pass *pass_list(void);
/* Runs the pipeline up to and including `stop_after` (NULL = all), with the
 * verifier after each pass, from where m stands: after m->after (IR text
 * printed after a pass) or from the start.  "lower" names the state
 * before any pass; a stop before m->after is an error. */
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
