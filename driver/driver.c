/* driver.c - the compile driver (see driver.h).
 *
 * Consumes a path (a .dtm model or IR text) and the command line's
 * options; produces a Compiled: the module after the last pass that ran,
 * the analyses the pass manager kept (passes/passes.c: fuse, memplan) and
 * the Plan (codegen/plan_build.c).  Nothing here decides what a pass does;
 * this file only says in which order the phases run and keeps what they
 * computed, so no command assembles the pipeline itself.
 */
#include "driver/driver.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- time per phase ---- */

DrvClock drv_clock(void)
{
	struct timespec t;
	DrvClock c;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	c.cpu = (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
	clock_gettime(CLOCK_MONOTONIC, &t);
	c.wall = (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
	return c;
}

void drv_profile_add(DrvProfile *p, int phase, DrvClock t0)
{
	if (!p || phase < 0 || phase >= DRV_MAX_PHASES)
		return;
	DrvClock t1 = drv_clock();
	p->cpu_s[phase] += t1.cpu - t0.cpu;
	p->wall_s[phase] += t1.wall - t0.wall;
}

int drv_profile_extra(DrvProfile *p, const char *name)
{
	for (int k = DRV_PHASE_EXTRA0; k < DRV_MAX_PHASES; k++) {
		if (p->name[k] && !strcmp(p->name[k], name))
			return k;
		if (!p->name[k]) {
			p->name[k] = name;
			return k;
		}
	}
	return -1;
}

void drv_profile_sum(DrvProfile *dst, const DrvProfile *src)
{
	for (int i = 0; i < PASS_MAX; i++) {
		dst->pass.cpu_s[i] += src->pass.cpu_s[i];
		dst->pass.wall_s[i] += src->pass.wall_s[i];
	}
	for (int k = 0; k < DRV_MAX_PHASES; k++) {
		int to = k;
		if (k >= DRV_PHASE_EXTRA0) {
			if (!src->name[k])
				continue;
			to = drv_profile_extra(dst, src->name[k]);
			if (to < 0)
				continue;
		}
		dst->cpu_s[to] += src->cpu_s[k];
		dst->wall_s[to] += src->wall_s[k];
	}
	if (!dst->load_name)
		dst->load_name = src->load_name;
}

/* Phase i of the printed order: load, the passes, the plan, the extras. */
static bool phase_at(const DrvProfile *p, int i, const char **name, double *cpu, double *wall)
{
	int np = pass_count();
	if (i == 0) {
		*name = p->load_name ? p->load_name : "lower";
		*cpu = p->cpu_s[DRV_PHASE_LOAD];
		*wall = p->wall_s[DRV_PHASE_LOAD];
	} else if (i <= np) {
		*name = pass_list()[i - 1].name;
		*cpu = p->pass.cpu_s[i - 1];
		*wall = p->pass.wall_s[i - 1];
	} else if (i == np + 1) {
		*name = "plan build";
		*cpu = p->cpu_s[DRV_PHASE_PLAN];
		*wall = p->wall_s[DRV_PHASE_PLAN];
	} else {
		int k = DRV_PHASE_EXTRA0 + (i - np - 2);
		if (k >= DRV_MAX_PHASES)
			return false;
		*name = p->name[k];
		*cpu = p->cpu_s[k];
		*wall = p->wall_s[k];
	}
	return true;
}

void drv_profile_print(FILE *out, const DrvProfile *p, int64_t per, const char *item)
{
	double cpu_total = 0, wall_total = 0, cpu, wall;
	const char *name;
	for (int i = 0; phase_at(p, i, &name, &cpu, &wall); i++) {
		cpu_total += cpu;
		wall_total += wall;
	}
	if (per > 0) {
		for (int i = 0; phase_at(p, i, &name, &cpu, &wall); i++)
			if (name && cpu > 0)
				fprintf(out, "  %-14s %9.3f s  %8.3f ms/%s  %5.1f%%\n", name, cpu,
				        cpu / (double)per * 1e3, item, cpu_total > 0 ? cpu / cpu_total * 100 : 0.0);
		return;
	}
	fprintf(out, "dtmc: time per phase, each pass with the verifier after it (wall and CPU, "
	             "ms; %% of the wall time):\n");
	for (int i = 0; phase_at(p, i, &name, &cpu, &wall); i++)
		if (name && (wall > 0 || cpu > 0))
			fprintf(out, "  %-14s %10.3f %10.3f  %5.1f%%\n", name, wall * 1e3, cpu * 1e3,
			        wall_total > 0 ? wall / wall_total * 100 : 0.0);
	fprintf(out, "  %-14s %10.3f %10.3f\n", "total", wall_total * 1e3, cpu_total * 1e3);
}

/* ---- compiling ---- */

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && strcmp(s + n - k, suffix) == 0;
}

bool drv_is_ir_path(const char *path)
{
	return strcmp(path, "-") == 0 || ends_with(path, ".ir");
}

bool drv_is_mlir_path(const char *path)
{
	return ends_with(path, ".mlir");
}

static void compiled_init(Compiled *c, Arena *a)
{
	memset(c, 0, sizeof *c);
	c->arena = a;
	c->an.arena = a;
}

/* IR text: parsed, verified, checked where it stands. */
static IrModule *load_text(Arena *a, Diag *d, const char *path, const DrvOptions *o)
{
	const LowerOptions *lo = &o->lower;
	if (lo->ndefines > 0 || lo->mesh || lo->ntrain > 0) {
		diag_error(d, (SrcLoc){0},
		           "-D, --mesh and --train apply to .dtm models, not to IR text ('%s')", path);
		return NULL;
	}
	SrcFile *src = arena_alloc(a, sizeof *src);
	if (!src) {
		diag_error(d, (SrcLoc){0}, "out of memory");
		return NULL;
	}
	if (!src_read_file(a, d, path, src))
		return NULL;
	diag_add_file(d, src);
	IrModule *m = ir_parse(a, d, src);
	if (!m && d->nerr == 0)
		diag_error(d, (SrcLoc){.file = src->name}, "no IR module found");
	if (!m || d->nerr > 0)
		return NULL;
	return ir_verify(m, d, "parse") && pass_check_input(m, d) ? m : NULL;
}

/* An MLIR module: imported as IR text (its nodes located in the .mlir
 * file), parsed, given --mesh and --train, verified as a lowered .dtm
 * model is. */
static IrModule *load_mlir(Arena *a, Diag *d, const char *path, const DrvOptions *o)
{
	SrcFile *src = arena_alloc(a, sizeof *src), *ir = arena_alloc(a, sizeof *ir);
	if (!src || !ir) {
		diag_error(d, (SrcLoc){0}, "out of memory");
		return NULL;
	}
	if (!src_read_file(a, d, path, src))
		return NULL;
	diag_add_file(d, src);
	if (!o->import_mlir) {
		diag_error(d, (SrcLoc){.file = path}, "this program does not read MLIR models "
		           "(dtmc does)");
		return NULL;
	}
	char *text = NULL;
	if (!o->import_mlir(src, &text, d))
		return NULL;
	*ir = (SrcFile){.name = arena_printf(a, "%s (as IR text)", path),
	                .text = arena_strdup(a, text), .len = strlen(text)};
	free(text);
	if (!ir->text)
		return NULL;
	IrModule *m = ir_parse(a, d, ir);
	if (!m || d->nerr > 0)
		return NULL;
	int64_t pp = m->pp_axis >= 0 ? m->mesh.sizes[m->pp_axis] : 1;
	if (!lower_apply_options(a, d, m, &o->lower))
		return NULL;
	if (m->pp_axis >= 0 && m->mesh.sizes[m->pp_axis] != pp) {
		/* each node's stage is in the module, decided for its pp */
		diag_error(d, (SrcLoc){.file = path},
		           "--mesh: the module's pipeline stages were decided for pp=%lld; to train "
		           "on pp=%lld, export the model again with --mesh pp=%lld",
		           (long long)pp, (long long)m->mesh.sizes[m->pp_axis],
		           (long long)m->mesh.sizes[m->pp_axis]);
		return NULL;
	}
	ir_count_attention(m);
	return ir_verify(m, d, "lower") && pass_check_input(m, d) ? m : NULL;
}

bool drv_load(Compiled *c, Arena *a, Diag *d, const char *path, const DrvOptions *o)
{
	compiled_init(c, a);
	DrvClock t0 = drv_clock();
	bool text = drv_is_ir_path(path);
	if (o->profile)
		o->profile->load_name = text ? "parse" : "lower";
	IrModule *m;
	if (text) {
		m = load_text(a, d, path, o);
	} else if (drv_is_mlir_path(path)) {
		m = load_mlir(a, d, path, o);
	} else {
		m = lower_path(a, d, path, &o->lower);
		if (!m && d->nerr == 0)
			diag_error(d, (SrcLoc){.file = path}, "could not be lowered");
		if (m && d->nerr > 0)
			m = NULL;
		/* the attention layers of the global program, for inspect's
		 * FLOPs, before any pass splits or unrolls it */
		if (m)
			ir_count_attention(m);
		if (m && !(ir_verify(m, d, "lower") && pass_check_input(m, d)))
			m = NULL;
	}
	drv_profile_add(o->profile, DRV_PHASE_LOAD, t0);
	c->m = m;
	return m != NULL;
}

bool drv_run(Compiled *c, Diag *d, const DrvOptions *o)
{
	PassRunOptions ro = {
	        .stop_after = o->stop_after,
	        .no_verify = o->no_verify,
	        .verbose = o->verbose,
	        .times = o->profile ? &o->profile->pass : NULL,
	        .an = &c->an,
	};
	return pass_run(c->m, d, &ro);
}

bool drv_analyses(Compiled *c, Diag *d)
{
	/* the pipeline kept them unless it ran before this process (IR text
	 * printed after fuse or memplan) */
	return pass_analyses(c->m, &c->an, d);
}

bool drv_plan(Compiled *c, Diag *d, const DrvOptions *o)
{
	if (!drv_analyses(c, d))
		return false;
	DrvClock t0 = drv_clock();
	Arena *a = c->arena;
	if (o->lean_plan)
		c->plan = cg_plan_build_lean(c->m, c->an.fuse, c->an.mem, o->lean, a, d);
	else
		c->plan = cg_plan_build(c->m, c->an.fuse, c->an.mem, a, d);
	drv_profile_add(o->profile, DRV_PHASE_PLAN, t0);
	return c->plan != NULL;
}

bool drv_compile(Compiled *c, Arena *a, Diag *d, const char *path, const DrvOptions *o)
{
	DrvOptions all = *o;
	all.stop_after = NULL;
	return drv_load(c, a, d, path, &all) && drv_run(c, d, &all) && drv_plan(c, d, &all);
}

/* ---- steps that share work ---- */

bool drv_parse(DrvSource *s, Arena *a, Diag *d, const char *path)
{
	memset(s, 0, sizeof *s);
	s->src = arena_alloc(a, sizeof *s->src);
	if (!s->src || !src_read_file(a, d, path, s->src))
		return false;
	diag_add_file(d, s->src);
	return ast_parse(a, d, s->src, &s->ast);
}

bool drv_lower_ast(Compiled *c, Arena *a, Diag *d, const DrvSource *s, const LowerOptions *lo,
                   const DrvOptions *o)
{
	compiled_init(c, a);
	DrvClock t0 = drv_clock();
	if (o->profile)
		o->profile->load_name = "lower";
	IrModule *m = lower_file(a, d, &s->ast, lo);
	bool ok = m && d->nerr == 0;
	if (ok)
		ir_count_attention(m);
	ok = ok && (o->no_verify || ir_verify(m, d, "lower"));
	drv_profile_add(o->profile, DRV_PHASE_LOAD, t0);
	c->m = ok ? m : NULL;
	return ok;
}

void drv_select_choose(IrModule *m, const uint8_t *sel, int n)
{
	for (int k = 0; k < n && k < m->nchooses; k++) {
		IrChoose *ch = &m->chooses[k];
		int s = sel[k] < ch->nopts ? sel[k] : 0;
		ch->selected = s;
		if (ch->node >= 0 && ch->node < m->nnodes)
			ir_place_set(m, m->nodes[ch->node], &ch->opts[s]);
	}
}

/* ---- dtmc opt ---- */

bool drv_check_opt_input(const Compiled *c, Diag *d, const char *file, const char *name)
{
	int at = pass_position(name);
	if (at < 0) {
		diag_error(d, (SrcLoc){0}, "--pass=%s: not a pass of the pipeline", name);
		return false;
	}
	const char *need = at > 0 ? pass_list()[at - 1].name : NULL;
	const IrModule *m = c->m;
	if (pass_position(m->after) == at - 1)
		return true;
	SrcLoc loc = m->after ? m->after_loc : (SrcLoc){.file = file};
	char is[96];
	if (m->after)
		snprintf(is, sizeof is, "after '%s'", m->after);
	else
		snprintf(is, sizeof is, "as lowered (it has no `after` line)");
	if (need)
		diag_error(d, loc, "pass '%s' runs on IR after '%s', but this IR is %s", name, need,
		           is);
	else
		diag_error(d, loc, "pass '%s' runs on IR as lowered (no `after` line), but this IR "
		           "is %s", name, is);
	return false;
}

void drv_print_analyses(FILE *out, const Compiled *c, bool fuse, bool mem)
{
	const IrModule *m = c->m;
	const FusePlan *fp = fuse ? c->an.fuse : NULL;
	const MemPlan *mp = mem ? c->an.mem : NULL;
	if (fp) {
		for (int r = 0; r < fp->n; r++) {
			if (fp->root[r] != r)
				continue;
			int members = 0;
			for (int x = fp->first ? fp->first[r] : 0; x <= r; x++)
				members += fp->root[x] == r;
			if (members < 2)
				continue;
			int x0 = fp->first ? fp->first[r] : 0;
			fprintf(out, "# fuse: group %%%d:", r);
			for (int x = x0; x <= r; x++)
				if (fp->root[x] == r)
					fprintf(out, " %%%d", x);
			fprintf(out, " (computed inside the loop:");
			for (int x = x0; x <= r; x++)
				if (fp->root[x] == r && fp->internal[x])
					fprintf(out, " %%%d", x);
			fprintf(out, ")\n");
		}
		for (int i = 0; i < fp->n; i++)
			if (fp->folded[i])
				fprintf(out, "# fuse: folded %%%d (a transpose its GEMMs read)\n", i);
	}
	if (!mp)
		return;
	fprintf(out, "# memplan: arenas");
	for (int k = 0; k < DTM_ARENA_COUNT; k++)
		fprintf(out, " %s %lld", pass_memplan_arena_name(k), (long long)mp->arena_bytes[k]);
	fprintf(out, " bytes\n");
	for (int s = 0; mp->nstages > 1 && s < mp->nstages; s++) {
		fprintf(out, "# memplan: stage %d:", s);
		for (int k = 0; k < DTM_ARENA_COUNT; k++)
			fprintf(out, " %s %lld", pass_memplan_arena_name(k),
			        (long long)mp->stage_arena_bytes[s][k]);
		fprintf(out, " bytes; %d micro-batches in flight\n", pass_memplan_inflight(m, mp, s));
	}
	for (int i = 0; i < mp->n; i++) {
		const MemPlanBuf *b = &mp->buf[i];
		if (b->arena < 0)
			continue;
		fprintf(out, "# memplan: %%%d %s @%lld +%lld", i, pass_memplan_arena_name(b->arena),
		        (long long)b->offset, (long long)b->bytes);
		if (b->owner != i)
			fprintf(out, " = %%%d", b->owner);
		else if (b->arena == DTM_ARENA_ACT)
			fprintf(out, " live %d..%d", b->live_from, b->live_to);
		fputc('\n', out);
	}
}
