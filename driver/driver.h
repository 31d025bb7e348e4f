/* driver.h - the compile driver: the one place that runs
 * lower -> passes -> analyses -> Plan.
 *
 * Every dtmc command that compiles goes through it (check, print, opt,
 * build, cuda-src, inspect, sweep and sweep --measure).  A compile's
 * result is a Compiled: the module, the analyses the pipeline's last
 * passes keep (fuse, memplan: passes/passes.h's PassAnalyses) and the
 * Plan (codegen/plan_build.h), each computed once and then handed to the
 * emitters and tools, which take them instead of computing them again.
 *
 * One compile:
 *   Compiled c;
 *   drv_compile(&c, &arena, &diag, "models/gpt.dtm", &opts)
 * or step by step, as `dtmc print --after=X` and `dtmc sweep` do:
 *   drv_load      .dtm model (lowered) or IR text (parsed), verified and
 *                 checked as an input of the pipeline where it stands
 *   drv_run       the pass manager from where the module stands up to
 *                 opts.stop_after (verify-each unless opts.no_verify)
 *   drv_plan      the Plan (full, or lean for costing), from the kept
 *                 analyses
 * The sweep shares prefixes of the pipeline between candidates: it parses
 * once (drv_parse), lowers per group (drv_lower_ast, drv_select_choose),
 * copies the module where candidates part (ir_module_clone) and runs each
 * copy on with drv_run; passes.h's Pass.reads says which settings a pass
 * reads, so the sweep derives where they part (tools/sweep.c).
 *
 * Times: with opts.profile set, drv_load/drv_lower_ast, every pass and
 * drv_plan add their time to it (`dtmc build --time-passes`, `dtmc sweep
 * --profile`); drv_profile_print prints it.
 */
#ifndef DTM_DRIVER_H
#define DTM_DRIVER_H

#include <stdio.h>

#include "codegen/plan_build.h"
#include "frontend/ast.h"
#include "frontend/lower.h"
#include "ir/ir.h"
#include "passes/passes.h"

/* ---- time per phase ---- */

/* Phases besides the passes: loading (lowering or parsing IR text), the
 * Plan, and up to DRV_MAX_EXTRA of the caller's own (drv_profile_extra). */
enum { DRV_PHASE_LOAD, DRV_PHASE_PLAN, DRV_PHASE_EXTRA0 };
#define DRV_MAX_EXTRA 6
#define DRV_MAX_PHASES (DRV_PHASE_EXTRA0 + DRV_MAX_EXTRA)

typedef struct DrvProfile {
	PassTimes pass; /* by pipeline position */
	double cpu_s[DRV_MAX_PHASES], wall_s[DRV_MAX_PHASES];
	const char *name[DRV_MAX_PHASES]; /* the extras' names; NULL: unused */
	const char *load_name;            /* "lower" or "parse" (IR text) */
} DrvProfile;

/* A point in time: the calling thread's CPU time and the wall time. */
typedef struct DrvClock {
	double cpu, wall;
} DrvClock;

DrvClock drv_clock(void);
/* Adds the time since t0 to phase `phase` of p (nothing when p is NULL). */
void drv_profile_add(DrvProfile *p, int phase, DrvClock t0);
/* The index of the extra phase named `name` (a string that outlives p),
 * registering it; -1 when DRV_MAX_EXTRA are taken. */
int drv_profile_extra(DrvProfile *p, const char *name);
/* dst += src, phase by phase (src's extras by name). */
void drv_profile_sum(DrvProfile *dst, const DrvProfile *src);
/* Prints p to out, one line per phase with time in it, in pipeline order
 * (load, the passes, the plan, then the extras).  per > 0: the total
 * CPU time per phase and per item (`dtmc sweep --profile`: per
 * candidate); per == 0: wall and CPU time of one compile
 * (`--time-passes`). */
void drv_profile_print(FILE *out, const DrvProfile *p, int64_t per, const char *item);

/* ---- compiling ---- */

/* A .mlir model (src: the file's text) as dtm IR text in *ir (malloc'd),
 * or false after reporting to d (tools/mlir_load.c's, through the MLIR
 * plugin). */
typedef bool (*DrvImportFn)(const SrcFile *src, char **ir, Diag *d);

typedef struct DrvOptions {
	LowerOptions lower;     /* -D, --mesh, --train: for a .dtm model only */
	/* how a FILE ending in .mlir is read; NULL: such a file is an error */
	DrvImportFn import_mlir;
	const char *stop_after; /* the last pass to run (--after); NULL: all */
	/* No verifier between passes (nor the verify pass): for speed where
	 * the input is trusted (`dtmc sweep` unless --verify). */
	bool no_verify;
	bool verbose;           /* -v: each pass named, memplan's arenas */
	/* drv_plan: the lean plan for costing (cg_plan_build_lean), its
	 * buffer table kept in `lean` when set. */
	bool lean_plan;
	CgLeanStore *lean;
	DrvProfile *profile;    /* when set, times are added to it */
} DrvOptions;

/* The result of compiling.  Everything lives in `arena`. */
typedef struct Compiled {
	Arena *arena;
	IrModule *m;     /* m->after: the last pass that ran */
	PassAnalyses an; /* an.fuse, an.mem, once the analyses ran */
	DtmPlan *plan;   /* drv_plan's */
} Compiled;

/* FILE is IR text (a name ending in .ir, or - for standard input) rather
 * than a .dtm model. */
bool drv_is_ir_path(const char *path);
/* FILE is an MLIR module (a name ending in .mlir): o->import_mlir reads it. */
bool drv_is_mlir_path(const char *path);

/* Reads path as a .dtm model (lowered with o->lower) or as IR text
 * (parsed; -D, --mesh and --train are an error then), verifies it and
 * checks that the pipeline takes it where it stands (pass_check_input).
 * False after reporting to d. */
bool drv_load(Compiled *c, Arena *a, Diag *d, const char *path, const DrvOptions *o);
/* The pass manager on c->m: the passes after c->m->after up to and
 * including o->stop_after (NULL: to the end), the analyses kept in c->an.
 * False after reporting to d. */
bool drv_run(Compiled *c, Diag *d, const DrvOptions *o);
/* Makes sure c->an holds the fusion and memory plans of c's final IR: the
 * pipeline's when it ran them, else (IR text read after fuse or memplan)
 * computed here.  False after reporting to d. */
bool drv_analyses(Compiled *c, Diag *d);
/* The Plan of c's final IR, into c->plan, from its analyses
 * (drv_analyses): full, or lean with o->lean_plan.  False after reporting
 * to d. */
bool drv_plan(Compiled *c, Diag *d, const DrvOptions *o);
/* drv_load, drv_run of the whole pipeline (o->stop_after must be NULL)
 * and drv_plan. */
bool drv_compile(Compiled *c, Arena *a, Diag *d, const char *path, const DrvOptions *o);

/* `dtmc opt --pass=NAME`: whether c->m is the input of pass `name`, i.e.
 * IR after the pass before it (as lowered, no `after` line, for the
 * first); else an error at the IR's `after` line saying which it needs.
 * False after reporting to d. */
bool drv_check_opt_input(const Compiled *c, Diag *d, const char *file, const char *name);
/* The analyses c holds (fuse, mem: which), as comment lines (`# fuse: ...`, `# memplan:
 * ...`) that IR text may carry: fuse groups and folded transposes; the
 * planned bytes per arena and stage and each value's arena, offset,
 * bytes, owner and live range. */
void drv_print_analyses(FILE *out, const Compiled *c, bool fuse, bool mem);

/* ---- steps that share work (dtmc sweep) ---- */

/* One parse of a .dtm file, lowered as often as needed. */
typedef struct DrvSource {
	SrcFile *src;
	AstFile ast;
} DrvSource;

/* Reads and parses path into s (its memory from a); the file is added to
 * d for caret lines.  False after reporting to d. */
bool drv_parse(DrvSource *s, Arena *a, Diag *d, const char *path);
/* Lowers a parsed file with lo into c (verified unless o->no_verify);
 * not checked as a pipeline input: the caller's options are known good.
 * False after reporting to d. */
bool drv_lower_ast(Compiled *c, Arena *a, Diag *d, const DrvSource *s, const LowerOptions *lo,
                   const DrvOptions *o);
/* Selects option sel[k] of the module's choose() point k, for k < n (an
 * option out of range selects the first): the placement the point's node
 * gets. */
void drv_select_choose(IrModule *m, const uint8_t *sel, int n);

#endif
