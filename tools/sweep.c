/* sweep.c - `dtmc sweep`: compile and cost every parallel layout of a model
 * on N devices, rank them, and draw the Pareto front of memory vs time.
 *
 * The space (sweep_impl.h): every factorization of N over the model's mesh
 * axes; per mesh, the ZeRO stage 0-3 (when the ZeRO axes have more than
 * one rank), the micro-batch count M (divisors of the global batch whose
 * micro-batch still splits evenly over the batch's axes), the pipeline
 * schedule (with pp > 1: gpipe, 1f1b and interleaved(2) where
 * passes/schedule.c accepts it), sequence parallelism on/off (tp > 1),
 * the context_parallel mode where the first input's sequence dim (dim 1)
 * is split over more than one rank and the model has attention (none and
 * ring when the file leaves it unset: none is Ulysses wherever Ulysses
 * applies, the same plan, and gathers the sequence elsewhere, where
 * ulysses would be refused; ulysses and ring when the file names a mode,
 * --train having no word for none; a mode that cannot apply there is
 * partition's error, and the candidate is dropped with it), recompute
 * on/off (models with blocks)
 * and every option of every choose() point.  A dimension the user fixes
 * with --train (zero=, microbatches=, schedule=, sequence_parallel=,
 * context_parallel=, recompute=) is not swept.
 *
 * Each candidate is compiled in-process to the DtmPlan `dtmc build` would
 * emit (codegen/plan_build.h) and costed by tools/cost.h on the hardware
 * profile; its peak per rank is the largest stage's sum of arenas.
 *
 * Speed: candidates share the prefix of the pass pipeline that does not
 * read the settings they differ in.  Each pass declares the train settings
 * it reads (passes/passes.c's table), each swept dim the settings it
 * changes, and derive_sharing works out from the two where candidates
 * part: one lowering (from one parse of the file) per group, then copies
 * of the module (ir_module_clone) that run on.  On GPT-2 that is one
 * lowering and stages..propagate per (mesh, M, SP, choose options, virtual
 * stages), recompute per recompute setting, state..bucket per ZeRO stage
 * (where the context_parallel mode is swept, zero alone, then
 * partition..bucket per mode), pipeline..memplan per schedule;
 * `--profile` prints it.  The verifier
 * between passes is skipped unless --verify.  Groups are shared out to
 * --jobs threads (default: the online CPUs), each with its own arenas and
 * diagnostics; the passes keep no mutable global state.  The compiling is
 * the driver's (driver/driver.h).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__ /* defined by the headers above */
#include <malloc.h>
#endif

#include "driver/driver.h"
#include "passes/schedule.h"
#include "tools/cost.h"
#include "tools/sweep_impl.h"

/* ---- describing candidates ---- */

const char *sweep_cp_name(int cp)
{
	const char *w = ir_train_word(IR_TRAIN_CONTEXT_PARALLEL, cp);
	return w ? w : "none";
}

const char *sweep_attn_name(int attn)
{
	switch (attn) {
	case SWEEP_ATTN_GATHER:
		return "gather";
	case SWEEP_ATTN_ULYSSES:
		return "ulysses";
	case SWEEP_ATTN_RING:
		return "ring";
	default:
		return NULL;
	}
}

const char *sweep_sched_name(int sched)
{
	switch (sched) {
	case SWEEP_SCHED_GPIPE:
		return "gpipe";
	case SWEEP_SCHED_1F1B:
		return "1f1b";
	case SWEEP_SCHED_INTERLEAVED:
		return "interleaved(2)";
	default:
		return "-";
	}
}

void sweep_mesh_text(const SweepRun *r, const SweepCand *c, char *buf, size_t cap)
{
	size_t n = 0;
	buf[0] = 0;
	for (int a = 0; a < r->s.naxes && n < cap; a++) {
		int w = snprintf(buf + n, cap - n, "%s%s=%lld", a ? "," : "", r->s.axes[a],
		                 (long long)c->mesh[a]);
		if (w < 0)
			break;
		n += (size_t)w;
	}
}

void sweep_describe(const SweepRun *r, const SweepCand *c, char *buf, size_t cap)
{
	char mesh[160];
	sweep_mesh_text(r, c, mesh, sizeof mesh);
	size_t n = (size_t)snprintf(buf, cap, "%s zero=%d M=%d", mesh, c->zero, c->micro);
	if (c->sched != SWEEP_SCHED_FILE && n < cap)
		n += (size_t)snprintf(buf + n, cap - n, " %s", sweep_sched_name(c->sched));
	if (c->sp && n < cap)
		n += (size_t)snprintf(buf + n, cap - n, " sp");
	/* the mode unset says what it ran as, once compiled */
	const char *ran = sweep_attn_name(c->attn);
	if (c->cp_split && n < cap && c->cp == IR_CP_NONE)
		n += (size_t)snprintf(buf + n, cap - n, " cp-none%s%s", ran ? "=" : "",
		                      ran ? ran : "");
	else if (c->cp_split && n < cap)
		n += (size_t)snprintf(buf + n, cap - n, " %s", sweep_cp_name(c->cp));
	if (c->rc && n < cap)
		n += (size_t)snprintf(buf + n, cap - n, " recompute");
	for (int k = 0; k < r->s.nchooses && n < cap; k++)
		n += (size_t)snprintf(buf + n, cap - n, " choose%d=%d", k, c->choose[k]);
}

int sweep_train_overrides(const SweepRun *r, const SweepCand *c, const char **train, int room,
                          char *buf, size_t cap)
{
	int nt = 0;
	size_t used = 0;
#define ADD(...)                                                                                   \
	do {                                                                                       \
		int w_ = snprintf(buf + used, cap - used, __VA_ARGS__);                            \
		if (w_ < 0 || (size_t)w_ >= cap - used || nt >= room)                              \
			return -1;                                                                 \
		train[nt++] = buf + used;                                                          \
		used += (size_t)w_ + 1;                                                            \
	} while (0)
	ADD("zero=%d", c->zero);
	ADD("microbatches=%d", c->micro);
	if (c->sched != SWEEP_SCHED_FILE)
		ADD("schedule=%s", sweep_sched_name(c->sched));
	ADD("sequence_parallel=%s", c->sp ? "true" : "false");
	/* none is what a file without the setting says (enumerate sweeps it
	 * only then); --train has no word for it */
	if (c->cp != IR_CP_NONE)
		ADD("context_parallel=%s", sweep_cp_name(c->cp));
	ADD("recompute=%s", c->rc ? "true" : "false");
#undef ADD
	(void)r;
	return nt;
}

/* ---- the model's space ---- */

static bool user_fixed(const SweepOpts *o, const char *key)
{
	size_t n = strlen(key);
	for (int i = 0; i < o->lower.ntrain; i++) {
		const char *t = o->lower.train[i];
		while (*t == ' ')
			t++;
		if (!strncmp(t, key, n) && (t[n] == '=' || t[n] == ' '))
			return true;
	}
	return false;
}

static bool has_blocks(const IrModule *m)
{
	for (int i = 0; i < m->nnodes; i++)
		if (ir_block(m, m->nodes[i]) >= 0)
			return true;
	return false;
}

static bool has_attention(const IrModule *m)
{
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i]->op == IR_OP_ATTENTION)
			return true;
	return false;
}

/* Reads the axes, batch, choose() points and train settings off the
 * model as lowered with the user's options. */
static bool probe(SweepRun *r, const IrModule *m, Arena *a)
{
	SweepSpace *s = &r->s;
	s->model = m->name;
	s->naxes = m->mesh.naxes;
	if (s->naxes > DTM_MAX_AXES) {
		fprintf(stderr, "dtmc: error: %s: %d mesh axes, plans hold at most %d\n", r->o.file,
		        s->naxes, DTM_MAX_AXES);
		return false;
	}
	s->pp_axis = m->pp_axis;
	s->sp_axis = -1;
	for (int k = 0; k < s->naxes; k++) {
		s->axes[k] = m->mesh.names[k];
		if (!strcmp(s->axes[k], "tp"))
			s->sp_axis = k;
	}
	s->zero_axes = m->train.zero_axes;
	s->file_schedule = m->train.schedule;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op != IR_OP_INPUT || n->rank < 1)
			continue;
		s->batch = n->shape[0];
		const Placement *p = ir_place(m, n);
		if (p->known && p->ndims > 0)
			for (int k = 0; k < p->naxes[0]; k++)
				s->batch_axes |= 1u << p->axes[0][k];
		/* [batch, seq, ...]: the sequence's axes reach attention (as
		 * models/llama.dtm's cp) unless a layout annotation moves them;
		 * a candidate a mode does not apply to fails and is dropped */
		if (p->known && p->ndims > 1 && n->rank > 1 && has_attention(m))
			for (int k = 0; k < p->naxes[1]; k++)
				s->seq_axes |= 1u << p->axes[1][k];
		break;
	}
	if (m->nchooses > SWEEP_MAX_CHOOSE) {
		fprintf(stderr, "dtmc: error: %s: %d choose() points, the sweep takes at most %d\n",
		        r->o.file, m->nchooses, SWEEP_MAX_CHOOSE);
		return false;
	}
	s->nchooses = m->nchooses;
	for (int k = 0; k < m->nchooses; k++) {
		const IrChoose *c = &m->chooses[k];
		s->choose_nopts[k] = c->nopts < 256 ? c->nopts : 255;
		s->choose_where[k] = arena_printf(a, "%s:%d:%d", c->loc.file ? c->loc.file : "?",
		                                  c->loc.line, c->loc.col);
	}
	return true;
}

static int64_t axes_product(const int64_t *mesh, int naxes, uint32_t mask)
{
	int64_t p = 1;
	for (int k = 0; k < naxes; k++)
		if (mask & (1u << k))
			p *= mesh[k];
	return p;
}

static bool sched_ok(SchedKind k, int P, int M, int v)
{
	for (int st = 0; st < P; st++)
		if (sched_build(k, P, M, v, st, NULL, 0, NULL, 0) < 0)
			return false;
	return true;
}

/* Do schedules a and b (v = 1) give every stage the same work list?  The
 * pipeline pass reads nothing else of them, so they compile alike. */
static bool sched_same(SchedKind a, SchedKind b, int P, int M)
{
	int cap = 4 * M + 4;
	SchedItem *x = malloc(sizeof *x * (size_t)cap), *y = malloc(sizeof *y * (size_t)cap);
	bool same = x && y;
	for (int st = 0; same && st < P; st++) {
		int nx = sched_build(a, P, M, 1, st, x, cap, NULL, 0);
		int ny = sched_build(b, P, M, 1, st, y, cap, NULL, 0);
		same = nx >= 0 && nx == ny;
		for (int k = 0; same && k < nx; k++)
			same = x[k].work == y[k].work && x[k].mb == y[k].mb &&
			       x[k].chunk == y[k].chunk;
	}
	free(x);
	free(y);
	return same;
}

typedef struct Enum {
	SweepRun *r;
	int64_t cap;
	bool overflow;
} Enum;

static void add_cand(Enum *e, const SweepCand *c)
{
	SweepRun *r = e->r;
	if (r->ncands >= SWEEP_MAX_CANDS) {
		e->overflow = true;
		return;
	}
	if (r->ncands == e->cap) {
		int64_t ncap = e->cap ? e->cap * 2 : 1024;
		SweepCand *nc = realloc(r->cands, sizeof *nc * (size_t)ncap);
		if (!nc) {
			e->overflow = true;
			return;
		}
		r->cands = nc;
		e->cap = ncap;
	}
	r->cands[r->ncands++] = *c;
}

/* What varies inside a group: recompute, the ZeRO stage, the
 * context_parallel mode, the schedule. */
typedef struct Members {
	int sched[3], nsched;
	uint8_t cp[3]; /* cp_modes' */
	int ncp;
	bool same_1f1b; /* 1f1b runs gpipe's work lists (sched_same) */
	int z_lo, z_hi, rc_lo, rc_hi;
} Members;

/* The members of c's groups: virtual stages 1, then 2 (a group each);
 * inside, recompute, ZeRO, the context_parallel mode and schedule nest as
 * eval_level shares their passes (the mode parts at partition, after
 * zero). */
static void add_members(Enum *e, SweepCand c, const Members *g)
{
	for (int v = 1; v <= 2; v++)
		for (int rc = g->rc_lo; rc <= g->rc_hi; rc++)
			for (int z = g->z_lo; z <= g->z_hi; z++)
				for (int ci = 0; ci < g->ncp; ci++)
					for (int si = 0; si < g->nsched; si++) {
						int sc = g->sched[si];
						if ((sc == SWEEP_SCHED_INTERLEAVED) != (v == 2))
							continue;
						c.sched = (uint8_t)sc;
						c.zero = (uint8_t)z;
						c.rc = rc;
						c.cp = g->cp[ci];
						c.dup_prev = g->same_1f1b && sc == SWEEP_SCHED_1F1B;
						add_cand(e, &c);
					}
}

/* The context_parallel modes of mesh c->mesh into out, setting
 * c->cp_split; returns how many.  Where attention's sequence is split
 * over more than one rank: the file's mode and ring, none standing for
 * ulysses where the file leaves it so (partition's attention_rule makes
 * the same plan of both where Ulysses applies, and none gathers the
 * sequence where ulysses is refused); a file naming ulysses or ring gets
 * ulysses and ring (--train has no word for none); fixed by --train, or
 * no sequence split, the file's alone. */
static int cp_modes(IrContextParallel file, bool fixed, SweepCand *c, const SweepSpace *s,
                    uint8_t *out)
{
	c->cp_split = axes_product(c->mesh, s->naxes, s->seq_axes) > 1;
	int n = 0;
	if (!c->cp_split || fixed) {
		out[n++] = (uint8_t)file;
		return n;
	}
	out[n++] = file == IR_CP_NONE ? IR_CP_NONE : IR_CP_ULYSSES;
	out[n++] = IR_CP_RING;
	return n;
}

/* Every candidate, in group order: the members of a group (same mesh, M,
 * SP, choose options and virtual stages) are consecutive. */
static bool enumerate(SweepRun *r, const IrModule *probe_m)
{
	const SweepSpace *s = &r->s;
	const SweepOpts *o = &r->o;
	int64_t nf = sweep_factorizations(o->devices, s->naxes, NULL, 0);
	if (nf <= 0) {
		fprintf(stderr, "dtmc: error: %s has no mesh axes to spread %lld devices over\n",
		        o->file, (long long)o->devices);
		return false;
	}
	int64_t *facs = malloc(sizeof *facs * (size_t)(nf * (s->naxes ? s->naxes : 1)));
	if (!facs)
		return false;
	sweep_factorizations(o->devices, s->naxes, facs, nf);
	bool fix_zero = user_fixed(o, "zero"), fix_m = user_fixed(o, "microbatches");
	bool fix_sched = user_fixed(o, "schedule"), fix_sp = user_fixed(o, "sequence_parallel");
	bool fix_rc = user_fixed(o, "recompute") || !has_blocks(probe_m);
	bool fix_cp = user_fixed(o, "context_parallel");
	const IrTrain *ft = &probe_m->train;
	int64_t divs[256];
	int ndiv = s->batch > 0 ? sweep_divisors(s->batch, divs, 256) : 0;
	if (ndiv > 256)
		ndiv = 256;
	if (fix_m || ndiv == 0) {
		divs[0] = ft->microbatches > 0 ? ft->microbatches : 1;
		ndiv = 1;
	}
	int64_t ncombo = 1;
	for (int k = 0; k < s->nchooses; k++)
		ncombo *= s->choose_nopts[k];
	Enum e = {r, 0, false};
	for (int64_t f = 0; f < nf && !e.overflow; f++) {
		SweepCand c;
		memset(&c, 0, sizeof c);
		memcpy(c.mesh, facs + f * s->naxes, sizeof *c.mesh * (size_t)s->naxes);
		int64_t pp = s->pp_axis >= 0 ? c.mesh[s->pp_axis] : 1;
		int64_t zn = axes_product(c.mesh, s->naxes, s->zero_axes);
		int64_t bsplit = axes_product(c.mesh, s->naxes, s->batch_axes);
		int64_t tp = s->sp_axis >= 0 ? c.mesh[s->sp_axis] : 1;
		uint8_t cps[2];
		int ncp = cp_modes(ft->context_parallel, fix_cp, &c, s, cps);
		bool tried = false;
		for (int di = 0; di < ndiv; di++) {
			int64_t M = divs[di];
			/* the batch split unevenly over its axes only where the
			 * model allows uneven shards (padded, token ids too) */
			bool uneven_ok = ft->uneven_shards;
			if (s->batch > 0 && !fix_m &&
			    (s->batch % M || (!uneven_ok && (s->batch / M) % bsplit)))
				continue;
			tried = true;
			c.micro = (int)M;
			int scheds[3] = { 0 }, nsched = 0;
			bool same_1f1b = false; /* right after gpipe, runs what it runs */
			if (pp <= 1) {
				scheds[nsched++] = SWEEP_SCHED_FILE;
			} else if (fix_sched) {
				scheds[nsched++] = ft->schedule == IR_PIPE_GPIPE ? SWEEP_SCHED_GPIPE
				                   : ft->schedule == IR_PIPE_INTERLEAVED
				                           ? SWEEP_SCHED_INTERLEAVED
				                           : SWEEP_SCHED_1F1B;
			} else {
				if (sched_ok(SCHED_GPIPE, (int)pp, (int)M, 1))
					scheds[nsched++] = SWEEP_SCHED_GPIPE;
				if (sched_ok(SCHED_1F1B, (int)pp, (int)M, 1))
					scheds[nsched++] = SWEEP_SCHED_1F1B;
				same_1f1b = nsched == 2 &&
				            sched_same(SCHED_GPIPE, SCHED_1F1B, (int)pp, (int)M);
				if (sched_ok(SCHED_INTERLEAVED, (int)pp, (int)M, 2))
					scheds[nsched++] = SWEEP_SCHED_INTERLEAVED;
			}
			Members ranges = {
			        .nsched = nsched,
			        .same_1f1b = same_1f1b,
			        .z_lo = fix_zero ? ft->zero : 0,
			        .z_hi = fix_zero ? ft->zero
			                : zn > 1 ? 3
			                         : 0,
			        .rc_lo = fix_rc ? ft->recompute : 0,
			        .rc_hi = fix_rc ? ft->recompute : 1,
			};
			memcpy(ranges.sched, scheds, sizeof scheds);
			memcpy(ranges.cp, cps, sizeof cps);
			ranges.ncp = ncp;
			int sp_lo = fix_sp ? ft->sequence_parallel : 0;
			int sp_hi = fix_sp ? ft->sequence_parallel : tp > 1;
			for (int sp = sp_lo; sp <= sp_hi; sp++) {
				c.sp = sp;
				for (int64_t cb = 0; cb < ncombo; cb++) {
					int64_t x = cb;
					for (int k = s->nchooses - 1; k >= 0; k--) {
						c.choose[k] = (uint8_t)(x % s->choose_nopts[k]);
						x /= s->choose_nopts[k];
					}
					add_members(&e, c, &ranges);
				}
			}
		}
		if (!tried) {
			if (r->nuntried < SWEEP_MAX_UNTRIED) {
				sweep_mesh_text(r, &c, r->untried[r->nuntried],
				                sizeof r->untried[0]);
				r->untried_ranks[r->nuntried] = bsplit;
			}
			r->nuntried++;
		}
	}
	free(facs);
	if (e.overflow) {
		fprintf(stderr, "dtmc: error: over %d candidates: fix some settings with --train\n",
		        SWEEP_MAX_CANDS);
		return false;
	}
	return true;
}

/* ---- what candidates share ----
 *
 * The candidates are enumerated nested (enumerate, add_members), outermost
 * first, along the dims below.  Each dim names the train settings it
 * changes (passes/passes.h's PASS_READS bits; 0 for what lowering itself
 * makes of it: the mesh, choose()'s placements).  The first pass reading a
 * dim's settings (pass_first_reader; -1 for lowering) is where candidates
 * differing in it part.  Candidates that agree on the dims outside dim k
 * and differ in k may also differ in any dim nested inside k, so they
 * share the passes before the earliest first reader of k and of every
 * inner dim that varies in this sweep: dim k's split (derive_sharing).
 * Splits grow from outer dims to inner ones.  The dims whose split is at
 * most 0 (nothing but lowering to share; a copy costs about a lowering)
 * make the group: lowered once per group, with the group's settings as
 * --train overrides.  The others make levels, consecutive dims with the
 * same split one level: per distinct value of a level's dims, a copy of
 * the parent's module (ir_module_clone; the last value takes the parent's
 * itself) gets them and runs the passes from its split to the next
 * level's; the last level runs to the end of the pipeline, and each
 * candidate's plan is built from its analyses.  No pass names appear
 * here: what a pass reads is declared in its table entry. */

typedef struct SweepDim {
	const char *name;
	uint64_t reads; /* the settings it changes; 0: lowering's */
	bool (*same)(const SweepRun *r, const SweepCand *a, const SweepCand *b);
	/* Sets c's value on a lowered module (NULL: only lowering does). */
	void (*apply)(IrModule *m, const SweepCand *c);
} SweepDim;

static bool same_mesh(const SweepRun *r, const SweepCand *a, const SweepCand *b)
{
	return !memcmp(a->mesh, b->mesh, sizeof a->mesh);
}

static bool same_micro(const SweepRun *r, const SweepCand *a, const SweepCand *b)
{
	return a->micro == b->micro;
}

static bool same_sp(const SweepRun *r, const SweepCand *a, const SweepCand *b)
{
	return a->sp == b->sp;
}

static bool same_cp(const SweepRun *r, const SweepCand *a, const SweepCand *b)
{
	return a->cp == b->cp;
}

static bool same_choose(const SweepRun *r, const SweepCand *a, const SweepCand *b)
{
	return !memcmp(a->choose, b->choose, (size_t)r->s.nchooses);
}

static bool same_vstages(const SweepRun *r, const SweepCand *a, const SweepCand *b)
{
	return (a->sched == SWEEP_SCHED_INTERLEAVED) == (b->sched == SWEEP_SCHED_INTERLEAVED);
}

static bool same_rc(const SweepRun *r, const SweepCand *a, const SweepCand *b)
{
	return a->rc == b->rc;
}

static bool same_zero(const SweepRun *r, const SweepCand *a, const SweepCand *b)
{
	return a->zero == b->zero;
}

static bool same_sched(const SweepRun *r, const SweepCand *a, const SweepCand *b)
{
	return a->sched == b->sched;
}

static void apply_micro(IrModule *m, const SweepCand *c)
{
	m->train.microbatches = c->micro;
}

static void apply_sp(IrModule *m, const SweepCand *c)
{
	m->train.sequence_parallel = c->sp;
}

static void apply_cp(IrModule *m, const SweepCand *c)
{
	m->train.context_parallel = (IrContextParallel)c->cp;
}

/* The schedule and its virtual stages, as --train schedule=... sets them. */
static void apply_sched(IrModule *m, const SweepCand *c)
{
	switch (c->sched) {
	case SWEEP_SCHED_GPIPE:
		m->train.schedule = IR_PIPE_GPIPE;
		m->train.virtual_stages = 1;
		break;
	case SWEEP_SCHED_1F1B:
		m->train.schedule = IR_PIPE_1F1B;
		m->train.virtual_stages = 1;
		break;
	case SWEEP_SCHED_INTERLEAVED:
		m->train.schedule = IR_PIPE_INTERLEAVED;
		m->train.virtual_stages = 2;
		break;
	default:
		break;
	}
}

static void apply_rc(IrModule *m, const SweepCand *c)
{
	m->train.recompute = c->rc;
}

static void apply_zero(IrModule *m, const SweepCand *c)
{
	m->train.zero = c->zero;
}

#define R(f) PASS_READS(IR_TRAIN_##f)
/* In the order enumerate nests them, outermost first.  Switching to
 * interleaved(2) changes the schedule, its virtual stages and the model
 * chunks; gpipe vs 1f1b only the schedule. */
static const SweepDim dims[] = {
	{"mesh", 0, same_mesh, NULL},
	{"microbatches", R(MICROBATCHES), same_micro, apply_micro},
	{"sequence_parallel", R(SEQUENCE_PARALLEL), same_sp, apply_sp},
	{"choose", 0, same_choose, NULL},
	{"virtual_stages", R(VIRTUAL_STAGES) | R(SCHEDULE) | PASS_READS_CHUNKS, same_vstages,
	 apply_sched},
	{"recompute", R(RECOMPUTE), same_rc, apply_rc},
	{"zero", R(ZERO), same_zero, apply_zero},
	{"context_parallel", R(CONTEXT_PARALLEL), same_cp, apply_cp},
	{"schedule", R(SCHEDULE), same_sched, apply_sched},
};
#undef R
#define NDIMS ((int)(sizeof dims / sizeof dims[0]))

typedef struct Sharing {
	int ngroup; /* dims [0, ngroup) make the group */
	int nlevels;
	/* level L: dims [first[L], first[L + 1]), passes [split[L],
	 * split[L + 1]) (split[nlevels]: the pipeline's end) */
	int first[NDIMS + 1];
	int split[NDIMS + 1];
} Sharing;

static void derive_sharing(const SweepRun *r, Sharing *sh)
{
	int np = pass_count(), split[NDIMS];
	bool varies[NDIMS] = {false};
	for (int k = 0; k < NDIMS; k++)
		for (int64_t i = 1; i < r->ncands && !varies[k]; i++)
			varies[k] = !dims[k].same(r, &r->cands[i - 1], &r->cands[i]);
	int inner = np; /* the earliest first reader of the dims inside */
	for (int k = NDIMS - 1; k >= 0; k--) {
		if (varies[k]) {
			int f = dims[k].reads ? pass_first_reader(dims[k].reads) : -1;
			inner = f < inner ? f : inner;
		}
		split[k] = inner;
	}
	/* a dim that does not vary splits nothing: it joins the one outside */
	for (int k = 1; k < NDIMS; k++)
		if (!varies[k])
			split[k] = split[k - 1];
	memset(sh, 0, sizeof *sh);
	while (sh->ngroup < NDIMS && split[sh->ngroup] <= 0)
		sh->ngroup++;
	for (int k = sh->ngroup; k < NDIMS; k++)
		if (k == sh->ngroup || split[k] != split[k - 1]) {
			sh->first[sh->nlevels] = k;
			sh->split[sh->nlevels++] = split[k];
		}
	sh->first[sh->nlevels] = NDIMS;
	sh->split[sh->nlevels] = np;
}

/* --profile: what the derivation shares, in words. */
static void print_sharing(FILE *out, const Sharing *sh)
{
	const Pass *pl = pass_list();
	fprintf(out, "dtmc sweep: one lowering per (");
	for (int k = 0; k < sh->ngroup; k++)
		fprintf(out, "%s%s", k ? ", " : "", dims[k].name);
	fprintf(out, ")");
	int end = sh->nlevels ? sh->split[0] : pass_count();
	if (end > 0)
		fprintf(out, " then passes %s..%s", pl[0].name, pl[end - 1].name);
	for (int L = 0; L < sh->nlevels; L++) {
		fprintf(out, "; per ");
		for (int k = sh->first[L]; k < sh->first[L + 1]; k++)
			fprintf(out, "%s%s", k > sh->first[L] ? ", " : "", dims[k].name);
		if (sh->split[L] < sh->split[L + 1])
			fprintf(out, ": passes %s..%s", pl[sh->split[L]].name,
			        pl[sh->split[L + 1] - 1].name);
		else
			fprintf(out, ": a copy, no passes");
	}
	fputc('\n', out);
}

static bool same_dims(const SweepRun *r, const SweepCand *a, const SweepCand *b, int from, int to)
{
	for (int k = from; k < to; k++)
		if (!dims[k].same(r, a, b))
			return false;
	return true;
}

/* ---- compiling and costing ---- */

typedef struct Shared {
	SweepRun *r;
	const DrvSource *src;
	int64_t *gstart; /* ngroups + 1 */
	int64_t ngroups;
	Sharing share;
	atomic_llong next; /* next group */
	atomic_llong done; /* candidates finished */
} Shared;

typedef struct Worker {
	Shared *sh;
	char err[2048];
	FILE *errf;
	pthread_t tid;
	DrvProfile prof; /* --profile */
	int ph_clone, ph_cost;
	DrvOptions opt;   /* how the driver compiles for it */
	double end;       /* when it finished, for the run's wall time */
	CgLeanStore lean; /* finish_member's plans' buffer tables */
} Worker;

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void worker_reset(Worker *w, Diag *d)
{
	rewind(w->errf);
	w->err[0] = 0;
	diag_init(d, w->errf);
	d->max_errors = 1;
	/* a candidate's cost is the report; a warning line would also read
	 * as its failure reason */
	d->no_warnings = true;
	diag_add_file(d, w->sh->src->src);
}

/* The first line of what the diagnostics printed, minus "error: ". */
static const char *worker_reason(Worker *w)
{
	fflush(w->errf);
	w->err[sizeof w->err - 1] = 0;
	char *nl = strchr(w->err, '\n');
	if (nl)
		*nl = 0;
	return w->err[0] ? w->err : "failed without a message";
}

static void fail_range(Shared *sh, int64_t lo, int64_t hi, const char *why)
{
	for (int64_t i = lo; i < hi; i++) {
		SweepCand *c = &sh->r->cands[i];
		c->status = SWEEP_FAILED;
		c->reason = strdup(why);
	}
	atomic_fetch_add(&sh->done, hi - lo);
}

/* The driver's pass manager on c from where it stands up to pass `to`
 * (exclusive). */
static bool run_to(Worker *w, Compiled *c, Diag *d, int to)
{
	if (to <= pass_position(c->m->after) + 1)
		return true;
	DrvOptions o = w->opt;
	o.stop_after = pass_list()[to - 1].name;
	return drv_run(c, d, &o);
}

/* Costs one compiled plan into c. */
static void cost_into(const SweepRun *r, const DtmPlan *p, SweepCand *c)
{
	double peak = 0;
	for (int s = 0; s < p->nstages; s++) {
		const int64_t *ab = p->nstages > 1 ? p->stages[s].arena_bytes : p->arena_bytes;
		double sum = 0;
		for (int k = 0; k < DTM_ARENA_COUNT; k++)
			sum += (double)ab[k];
		if (sum > peak)
			peak = sum;
	}
	c->peak_bytes = peak;
	CostReport rep;
	if (cost_plan_step(p, &r->o.hw, r->o.nodes, &rep) != 0) {
		c->status = SWEEP_FAILED;
		c->reason = strdup(rep.err[0] ? rep.err : "cost model failed");
		cost_report_free(&rep);
		return;
	}
	c->step_s = rep.step_s;
	c->tokens_per_s = rep.tokens_per_s;
	c->hfu = rep.hfu;
	c->bubble = rep.bubble;
	for (int s = 0; s < rep.nstages; s++) {
		if (rep.stages[s].comm_s > c->comm_s)
			c->comm_s = rep.stages[s].comm_s;
		if (rep.stages[s].exposed_comm_s > c->exposed_s)
			c->exposed_s = rep.stages[s].exposed_comm_s;
		if (rep.stages[s].send_bytes > c->comm_bytes)
			c->comm_bytes = rep.stages[s].send_bytes;
	}
	cost_report_free(&rep);
	if (r->o.mem_limit > 0 && peak > r->o.mem_limit) {
		char a[32], b[32], msg[128];
		sweep_format_bytes(a, sizeof a, peak);
		sweep_format_bytes(b, sizeof b, r->o.mem_limit);
		snprintf(msg, sizeof msg, "peak %s per rank is over the limit of %s", a, b);
		c->status = SWEEP_OVER_MEM;
		c->reason = strdup(msg);
		return;
	}
	c->status = SWEEP_OK;
}

/* What attention ran as in the compiled module m: ring where partition
 * expanded it into block ops, Ulysses where its result is split by heads
 * over the sequence's axes, else the sequence gathered. */
static uint8_t attn_form(const IrModule *m, uint32_t seq_axes)
{
	bool ulysses = false;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op == IR_OP_ATTN_BLOCK)
			return SWEEP_ATTN_RING;
		const Placement *p = n->op == IR_OP_ATTENTION ? ir_place(m, n) : NULL;
		for (int k = 0; p && p->known && p->ndims > 2 && k < p->naxes[2]; k++)
			ulysses = ulysses || (seq_axes >> p->axes[2][k] & 1);
	}
	return ulysses ? SWEEP_ATTN_ULYSSES : SWEEP_ATTN_GATHER;
}

/* The compiled module of one candidate (through the whole pipeline, its
 * analyses kept): the plan, its cost, its peak. */
static void finish_member(Worker *w, Compiled *cc, Diag *d, SweepCand *c)
{
	const SweepRun *r = w->sh->r;
	/* costed, never printed: the lean plan */
	if (drv_plan(cc, d, &w->opt)) {
		DrvClock t0 = drv_clock();
		cost_into(r, cc->plan, c);
		if (c->cp_split)
			c->attn = attn_form(cc->m, r->s.seq_axes);
		drv_profile_add(w->opt.profile, w->ph_cost, t0);
	} else {
		c->status = SWEEP_FAILED;
		c->reason = strdup(worker_reason(w));
	}
}

/* c compiles to the plan of `like` (SweepCand.dup_prev): its results. */
static void copy_result(SweepCand *c, const SweepCand *like)
{
	c->status = like->status;
	c->reason = like->reason ? strdup(like->reason) : NULL;
	c->step_s = like->step_s;
	c->tokens_per_s = like->tokens_per_s;
	c->peak_bytes = like->peak_bytes;
	c->hfu = like->hfu;
	c->bubble = like->bubble;
	c->comm_s = like->comm_s;
	c->exposed_s = like->exposed_s;
	c->comm_bytes = like->comm_bytes;
	c->attn = like->attn;
}

/* Runs level L's passes for members [lo, hi) of a group, which share the
 * module cm (owned by the caller, in its arena) up to this level: per run
 * of members with the same values of the level's dims a copy -- the last
 * run takes cm itself -- gets those values and the level's passes, then
 * the next level.  Past the last level: one candidate, finished. */
static void eval_level(Worker *w, Compiled *cm, int L, int64_t lo, int64_t hi)
{
	Shared *sh = w->sh;
	const SweepRun *r = sh->r;
	const Sharing *s = &sh->share;
	if (L == s->nlevels) {
		Diag d;
		worker_reset(w, &d);
		finish_member(w, cm, &d, &r->cands[lo]);
		/* the same in every dim: the same plan */
		for (int64_t i = lo + 1; i < hi; i++)
			copy_result(&r->cands[i], &r->cands[lo]);
		atomic_fetch_add(&sh->done, hi - lo);
		return;
	}
	int k0 = s->first[L], k1 = s->first[L + 1];
	for (int64_t i = lo; i < hi;) {
		int64_t j = i + 1;
		while (j < hi && same_dims(r, &r->cands[j], &r->cands[i], k0, k1))
			j++;
		if (L == s->nlevels - 1 && j == i + 1 && r->cands[i].dup_prev && i > lo) {
			copy_result(&r->cands[i], &r->cands[i - 1]);
			atomic_fetch_add(&sh->done, 1);
			i = j;
			continue;
		}
		bool last = j == hi;
		Arena a;
		arena_init(&a);
		Compiled c = *cm;
		if (!last) {
			DrvClock t0 = drv_clock();
			c.arena = &a;
			c.an.arena = &a;
			c.m = ir_module_clone(&a, cm->m);
			drv_profile_add(w->opt.profile, w->ph_clone, t0);
		}
		Diag d;
		worker_reset(w, &d);
		if (!c.m) {
			fail_range(sh, i, j, "out of memory");
		} else {
			/* this level's values, and the deeper levels' of the run's
			 * first member (they set theirs again) */
			for (int k = k0; k < NDIMS; k++)
				if (dims[k].apply)
					dims[k].apply(c.m, &r->cands[i]);
			if (run_to(w, &c, &d, s->split[L + 1]))
				eval_level(w, &c, L + 1, i, j);
			else
				fail_range(sh, i, j, worker_reason(w));
		}
		arena_free(&a);
		i = j;
	}
}

static void eval_group(Worker *w, int64_t lo, int64_t hi)
{
	Shared *sh = w->sh;
	const SweepRun *r = sh->r;
	SweepCand *c0 = &r->cands[lo];
	Arena a;
	Diag d;
	arena_init(&a);
	worker_reset(w, &d);
	/* the group's settings as lowering takes them: the mesh, and the
	 * first member's train settings */
	LowerOptions lo_opt = r->o.lower;
	char mesh[256], tbuf[512];
	sweep_mesh_text(r, c0, mesh, sizeof mesh);
	lo_opt.mesh = mesh;
	const char *tr[8];
	int nt = sweep_train_overrides(r, c0, tr, 8, tbuf, sizeof tbuf);
	for (int k = 0; k < nt && lo_opt.ntrain < LOWER_MAX_TRAIN; k++)
		lo_opt.train[lo_opt.ntrain++] = tr[k];
	Compiled c;
	bool ok = drv_lower_ast(&c, &a, &d, sh->src, &lo_opt, &w->opt);
	if (ok) {
		drv_select_choose(c.m, c0->choose, r->s.nchooses);
		ok = run_to(w, &c, &d, sh->share.nlevels ? sh->share.split[0] : pass_count());
	}
	if (!ok) {
		fail_range(sh, lo, hi, worker_reason(w));
		arena_free(&a);
		return;
	}
	eval_level(w, &c, 0, lo, hi);
	arena_free(&a);
}

static void *worker_main(void *arg)
{
	Worker *w = arg;
	Shared *sh = w->sh;
	for (;;) {
		int64_t g = atomic_fetch_add(&sh->next, 1);
		if (g >= sh->ngroups)
			break;
		eval_group(w, sh->gstart[g], sh->gstart[g + 1]);
	}
	w->end = now_s();
	cg_plan_lean_store_free(&w->lean);
	return NULL;
}

static void progress(int64_t done, int64_t total, double t0, bool final)
{
	const int width = 30;
	int fill = total ? (int)((double)done / (double)total * width) : width;
	double el = now_s() - t0;
	fprintf(stderr, "\r\033[Kdtmc sweep: [");
	for (int i = 0; i < width; i++)
		fputc(i < fill ? '#' : '.', stderr);
	fprintf(stderr, "] %lld/%lld candidates, %.0f/s", (long long)done, (long long)total,
	        el > 0 ? (double)done / el : 0.0);
	if (final)
		fputs("\r\033[K", stderr);
	fflush(stderr);
}

static void print_profile(const SweepRun *r, const Sharing *share, const DrvProfile *prof,
                          int nthreads)
{
	double total = 0;
	for (int i = 0; i < PASS_MAX; i++)
		total += prof->pass.cpu_s[i];
	for (int k = 0; k < DRV_MAX_PHASES; k++)
		total += prof->cpu_s[k];
	print_sharing(stderr, share);
	fprintf(stderr,
	        "dtmc sweep: compile time by phase, %lld candidates on %d thread%s "
	        "(%.1f ms of CPU each):\n",
	        (long long)r->ncands, nthreads, nthreads == 1 ? "" : "s",
	        r->ncands ? total / (double)r->ncands * 1e3 : 0.0);
	drv_profile_print(stderr, prof, r->ncands > 0 ? r->ncands : 1, "candidate");
}

static bool evaluate(SweepRun *r, const DrvSource *src)
{
	Shared sh = {.r = r, .src = src};
	sh.gstart = malloc(sizeof *sh.gstart * (size_t)(r->ncands + 1));
	if (!sh.gstart)
		return false;
	derive_sharing(r, &sh.share);
	for (int64_t i = 0; i < r->ncands; i++)
		if (i == 0 || !same_dims(r, &r->cands[i - 1], &r->cands[i], 0, sh.share.ngroup))
			sh.gstart[sh.ngroups++] = i;
	sh.gstart[sh.ngroups] = r->ncands;
	atomic_init(&sh.next, 0);
	atomic_init(&sh.done, 0);
	int nw = r->o.jobs;
	if (nw > sh.ngroups)
		nw = (int)(sh.ngroups > 0 ? sh.ngroups : 1);
	Worker *ws = calloc((size_t)nw, sizeof *ws);
	bool ok = ws != NULL;
	int started = 0;
	double t0 = now_s();
	for (int k = 0; ok && k < nw; k++) {
		Worker *w = &ws[k];
		w->sh = &sh;
		/* the verifier between passes on request; the plan is costed,
		 * never printed: the lean one */
		w->opt = (DrvOptions){.no_verify = !r->o.verify, .lean_plan = true, .lean = &w->lean,
		                      .profile = r->o.profile ? &w->prof : NULL};
		w->ph_clone = drv_profile_extra(&w->prof, "clone");
		w->ph_cost = drv_profile_extra(&w->prof, "cost");
		w->errf = fmemopen(w->err, sizeof w->err - 1, "w");
		if (!w->errf || pthread_create(&w->tid, NULL, worker_main, w) != 0) {
			if (w->errf)
				fclose(w->errf);
			w->errf = NULL;
			ok = started > 0; /* fewer threads is still fine */
			break;
		}
		started++;
	}
	bool tty = !r->o.quiet && isatty(STDERR_FILENO);
	double shown = t0;
	while (started > 0 && atomic_load(&sh.done) < r->ncands) {
		/* short naps, so a small sweep does not wait for the bar */
		struct timespec ts = {0, 2 * 1000 * 1000};
		nanosleep(&ts, NULL);
		if (tty && now_s() - shown >= 0.1) {
			progress(atomic_load(&sh.done), r->ncands, t0, false);
			shown = now_s();
		}
		/* every group taken and every worker gone: done (a failed
		 * group counts its members too, so this is only a guard) */
		if (atomic_load(&sh.next) >= sh.ngroups + started)
			break;
	}
	double end = t0;
	DrvProfile prof = {0};
	for (int k = 0; k < started; k++) {
		pthread_join(ws[k].tid, NULL);
		fclose(ws[k].errf);
		end = ws[k].end > end ? ws[k].end : end;
		drv_profile_sum(&prof, &ws[k].prof);
	}
	/* the workers' span, not the progress loop's polling */
	r->seconds = end - t0;
	r->threads = started;
	if (tty)
		progress(r->ncands, r->ncands, t0, true);
	if (r->o.profile)
		print_profile(r, &sh.share, &prof, started);
	free(ws);
	free(sh.gstart);
	if (!ok)
		fprintf(stderr, "dtmc: error: cannot start the sweep's threads\n");
	return ok;
}

/* ---- ranking ---- */

static const SweepRun *cmp_run; /* qsort has no context argument; set only on the main thread */

static int cmp_rank(const void *a, const void *b)
{
	const SweepCand *x = &cmp_run->cands[*(const int *)a],
	                *y = &cmp_run->cands[*(const int *)b];
	if (x->step_s != y->step_s)
		return x->step_s < y->step_s ? -1 : 1;
	if (x->peak_bytes != y->peak_bytes)
		return x->peak_bytes < y->peak_bytes ? -1 : 1;
	return *(const int *)a - *(const int *)b;
}

static bool rank_all(SweepRun *r)
{
	r->rank = malloc(sizeof *r->rank * (size_t)(r->ncands + 1));
	r->front = malloc(sizeof *r->front * (size_t)(r->ncands + 1));
	double *mem = malloc(sizeof *mem * (size_t)(r->ncands + 1));
	double *tim = malloc(sizeof *tim * (size_t)(r->ncands + 1));
	if (!r->rank || !r->front || !mem || !tim) {
		free(mem);
		free(tim);
		return false;
	}
	r->nok = r->nfailed = r->nover = 0;
	for (int64_t i = 0; i < r->ncands; i++) {
		const SweepCand *c = &r->cands[i];
		if (c->status == SWEEP_OK)
			r->rank[r->nok++] = (int)i;
		else if (c->status == SWEEP_OVER_MEM)
			r->nover++;
		else
			r->nfailed++;
	}
	r->nrank = (int)r->nok;
	cmp_run = r;
	qsort(r->rank, (size_t)r->nrank, sizeof *r->rank, cmp_rank);
	for (int k = 0; k < r->nrank; k++) {
		mem[k] = r->cands[r->rank[k]].peak_bytes;
		tim[k] = r->cands[r->rank[k]].step_s;
	}
	r->nfront = sweep_pareto(r->nrank, mem, tim, r->front);
	for (int k = 0; k < r->nfront; k++)
		r->front[k] = r->rank[r->front[k]];
	free(mem);
	free(tim);
	return true;
}

/* ---- the command ---- */

static void free_run(SweepRun *r)
{
	for (int64_t i = 0; i < r->ncands; i++)
		free((char *)r->cands[i].reason);
	free(r->cands);
	free(r->rank);
	free(r->front);
	free(r->meas);
}

int sweep_main(int argc, char **argv)
{
	SweepRun r;
	memset(&r, 0, sizeof r);
	int prc = sweep_parse_opts(argc, argv, &r.o);
	if (prc)
		return prc == 2 ? 0 : 1;
	if (drv_is_mlir_path(r.o.file)) {
		/* the candidates are lowerings of one parsed .dtm file */
		fprintf(stderr, "dtmc: error: sweep takes a .dtm model; '%s' is MLIR (inspect and "
		        "build take it with --mesh and --train)\n", r.o.file);
		return 1;
	}
#ifdef __GLIBC__
	/* Every candidate's arenas take and give back megabytes in large
	 * blocks; above glibc's mmap threshold each would be an mmap, page
	 * faults and an munmap.  Keep them on the heap (about 2x on plan
	 * building). */
	mallopt(M_MMAP_THRESHOLD, 256 << 20);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	/* the file's own layout is not a candidate: no warnings about it */
	d.no_warnings = true;
	/* one parse for every candidate; the probe lowers it as the file says
	 * but on one rank: the file's own mesh is not a candidate, and its
	 * sizes need not divide what -D made of the dims */
	DrvSource src;
	DrvOptions po = {.no_verify = true};
	Compiled c = {0};
	LowerOptions probe_opt = r.o.lower;
	probe_opt.mesh_ones = true;
	if (drv_parse(&src, &a, &d, r.o.file))
		drv_lower_ast(&c, &a, &d, &src, &probe_opt, &po);
	IrModule *m = c.m;
	bool ok = m && d.nerr == 0 && probe(&r, m, &a) && enumerate(&r, m);
	if (ok && r.ncands == 0) {
		fprintf(stderr, "dtmc: error: no candidate layouts of %s on %lld devices\n",
		        r.o.file, (long long)r.o.devices);
		ok = false;
	}
	ok = ok && evaluate(&r, &src) && rank_all(&r);
	if (ok && r.o.measure > 0)
		ok = sweep_measure(&r);
	if (ok) {
		if (r.o.json)
			ok = sweep_print_json(stdout, &r);
		else if (r.o.csv)
			ok = sweep_print_csv(stdout, &r);
		else
			ok = sweep_print_text(stdout, &r);
	}
	if (ok && r.o.plot)
		ok = sweep_write_plot(&r, r.o.plot);
	if (ok && r.o.measure > 0 && !r.o.json)
		sweep_print_measured(r.o.csv ? stderr : stdout, &r);
	if (ok && (fflush(stdout) != 0 || ferror(stdout))) {
		fprintf(stderr, "dtmc: error: cannot write to standard output\n");
		ok = false;
	}
	if (d.nerr > 0)
		diag_summary(&d);
	free_run(&r);
	arena_free(&a);
	return ok ? 0 : 1;
}
