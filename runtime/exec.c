/* exec.c - runs one rank's stage of a Plan: arenas, initial values, the
 * action loop and --check-numerics.
 *
 * Consumes a DtmPlan (runtime/plan.h) and a rank; produces the buffers a
 * training step reads and writes.  Memory is exactly the planned arenas:
 * one 64-byte-aligned allocation per arena, every buffer at its planned
 * offset, so the peak that `dtmc inspect` predicts is the peak allocated
 * (dtm_rt_allocated_bytes lets tests check that).
 *
 * Initial values depend only on (seed, buffer name, global element index),
 * never on the mesh: a shard computes the global index of each of its local
 * elements from the buffer's split layout and this rank's mesh coordinates.
 */
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "runtime/comm.h"
#include "support/philox.h"
#include "runtime/rt.h"

/* What the most recent rt_run_init allocated, per arena (see rt.h). */
static int64_t rt_last_alloc[DTM_ARENA_COUNT];

int64_t dtm_rt_allocated_bytes(int arena)
{
	if (arena < 0 || arena >= DTM_ARENA_COUNT)
		return -1;
	return rt_last_alloc[arena];
}

int64_t rt_numel(const DtmBuffer *b)
{
	int64_t n = 1;
	for (int d = 0; d < b->rank; d++)
		n *= b->shape[d];
	return n;
}

int64_t rt_world_size(const DtmPlan *p)
{
	int64_t n = 1;
	for (int a = 0; a < p->mesh_naxes; a++)
		n *= p->mesh_sizes[a];
	return n;
}

void rt_rank_coords(const DtmPlan *p, int64_t rank, int64_t *coords)
{
	for (int a = p->mesh_naxes - 1; a >= 0; a--) {
		int64_t s = p->mesh_sizes[a] > 0 ? p->mesh_sizes[a] : 1;
		coords[a] = rank % s;
		rank /= s;
	}
}

void rt_shard_start(const DtmPlan *p, const DtmBuffer *b, const int64_t *coords, int64_t *start)
{
	for (int d = 0; d < b->rank; d++) {
		/* The axes splitting a dim form one mixed-radix shard index,
		 * the first listed axis most significant (as in GSPMD's
		 * tile assignment and DTensor's nested Shard placements). */
		int64_t parts = 1, idx = 0;
		for (int j = 0; j < b->split_naxes[d]; j++) {
			int ax = b->split_axes[d][j];
			idx = idx * p->mesh_sizes[ax] + coords[ax];
			parts *= p->mesh_sizes[ax];
		}
		int64_t n = b->global_shape[d];
		int64_t chunk = (n + parts - 1) / parts;
		start[d] = idx * chunk < n ? idx * chunk : n;
	}
}

void rt_global_indices(const DtmPlan *p, const DtmBuffer *b, const int64_t *coords, int64_t *out)
{
	int64_t start[DTM_MAX_RANK], gstride[DTM_MAX_RANK], idx[DTM_MAX_RANK] = { 0 };
	int64_t real[DTM_MAX_RANK];
	rt_shard_start(p, b, coords, start);
	int64_t s = 1, base = 0;
	int pad = 0; /* dims whose local index is in the padding now */
	for (int d = b->rank - 1; d >= 0; d--) {
		gstride[d] = s;
		base += start[d] * s;
		s *= b->global_shape[d];
		/* an uneven shard's rows past the global extent are padding */
		real[d] = b->global_shape[d] - start[d];
		pad += real[d] <= 0;
	}
	int64_t n = rt_numel(b), g = base;
	for (int64_t i = 0; i < n; i++) {
		out[i] = pad ? -1 : g;
		/* odometer step over the local shape, moving g along */
		for (int d = b->rank - 1; d >= 0; d--) {
			if (++idx[d] < b->shape[d]) {
				g += gstride[d];
				pad += idx[d] == real[d];
				break;
			}
			g -= (b->shape[d] - 1) * gstride[d];
			pad -= real[d] < b->shape[d] && real[d] > 0;
			idx[d] = 0;
		}
	}
}

int rt_find_buffer(const DtmPlan *p, const char *name)
{
	for (int i = 0; i < p->nbuffers; i++)
		if (p->buffers[i].name && p->buffers[i].stage == p->stage &&
		    strcmp(p->buffers[i].name, name) == 0)
			return i;
	return -1;
}

int rt_plan_stage(const DtmPlan *p, int64_t rank)
{
	if (p->nstages <= 1 || p->pp_axis < 0 || p->pp_axis >= p->mesh_naxes)
		return 0; /* rt_plan_validate refuses the latter */
	int64_t coords[DTM_MAX_AXES];
	rt_rank_coords(p, rank, coords);
	return (int)coords[p->pp_axis];
}

static const char *arena_name(int a)
{
	static const char *names[DTM_ARENA_COUNT] = { "param", "opt", "grad", "act", "input" };
	return a >= 0 && a < DTM_ARENA_COUNT ? names[a] : "?";
}

static const char *buf_name(const DtmPlan *p, int i)
{
	return p->buffers[i].name ? p->buffers[i].name : "(unnamed)";
}

static int check_buffer_id(const DtmPlan *p, int id, const char *what, char *err)
{
	if (id < 0 || id >= p->nbuffers) {
		snprintf(err, RT_ERR_LEN, "invalid plan: %s refers to buffer %d of %d", what, id,
			 p->nbuffers);
		return -1;
	}
	return 0;
}

int rt_plan_validate(const DtmPlan *p, char *err)
{
	if (p->version != DTM_PLAN_VERSION) {
		snprintf(err, RT_ERR_LEN,
			 "plan version %d, but this runtime reads version %d: rebuild the binary",
			 p->version, DTM_PLAN_VERSION);
		return -1;
	}
	if (p->nstages < 1 || !p->stages) {
		snprintf(err, RT_ERR_LEN, "invalid plan: no stages");
		return -1;
	}
	if (p->nstages > 1 && (p->pp_axis < 0 || p->pp_axis >= p->mesh_naxes ||
	                       p->mesh_sizes[p->pp_axis] != p->nstages)) {
		snprintf(err, RT_ERR_LEN,
			 "invalid plan: %d pipeline stages but the pipeline axis is %d of %d", p->nstages,
			 p->pp_axis, p->mesh_naxes);
		return -1;
	}
	for (int a = 0; a < p->mesh_naxes; a++) {
		if (p->mesh_sizes[a] < 1) {
			snprintf(err, RT_ERR_LEN, "invalid plan: mesh axis %d has size %lld", a,
				 (long long)p->mesh_sizes[a]);
			return -1;
		}
	}
	for (int i = 0; i < p->nbuffers; i++) {
		const DtmBuffer *b = &p->buffers[i];
		if (b->stage < 0 || (p->nstages > 1 && b->stage >= p->nstages)) {
			snprintf(err, RT_ERR_LEN, "invalid plan: buffer %d '%s' is of stage %d",
				 i, buf_name(p, i), b->stage);
			return -1;
		}
		const int64_t *arena_bytes = p->nstages > 1 ? p->stages[b->stage].arena_bytes
							   : p->arena_bytes;
		if (p->nstages == 1 && b->stage != p->stage)
			continue; /* another stage's, in a per-rank view */
		if (b->rank < 0 || b->rank > DTM_MAX_RANK || b->arena < 0 ||
		    b->arena >= DTM_ARENA_COUNT) {
			snprintf(err, RT_ERR_LEN, "invalid plan: buffer %d '%s' has rank %d, arena %d",
				 i, buf_name(p, i), b->rank, (int)b->arena);
			return -1;
		}
		int64_t need = rt_numel(b) * (int64_t)rt_dtype_size(b->dtype);
		if (b->bytes < need || b->offset < 0 ||
		    b->offset + b->bytes > arena_bytes[b->arena]) {
			snprintf(err, RT_ERR_LEN,
				 "invalid plan: buffer %d '%s' (%lld bytes needed) at [%lld, +%lld) "
				 "does not fit arena %s of %lld bytes",
				 i, buf_name(p, i), (long long)need, (long long)b->offset,
				 (long long)b->bytes, arena_name(b->arena),
				 (long long)arena_bytes[b->arena]);
			return -1;
		}
		for (int d = 0; d < b->rank; d++) {
			for (int j = 0; j < b->split_naxes[d]; j++) {
				if (b->split_axes[d][j] >= p->mesh_naxes) {
					snprintf(err, RT_ERR_LEN,
						 "invalid plan: buffer '%s' is split over mesh axis %d "
						 "of %d", buf_name(p, i), b->split_axes[d][j],
						 p->mesh_naxes);
					return -1;
				}
			}
		}
	}
	for (int s = 0; s < p->nstages; s++) {
		for (int i = 0; i < p->stages[s].nactions; i++) {
			const DtmAction *a = &p->stages[s].actions[i];
			char what[96];
			snprintf(what, sizeof what, "stage %d action %d", s, i);
			if (a->nargs < 0 || a->nargs > DTM_MAX_ARGS) {
				snprintf(err, RT_ERR_LEN, "invalid plan: %s has %d args", what, a->nargs);
				return -1;
			}
			for (int j = 0; j < a->nargs; j++)
				if (check_buffer_id(p, a->args[j], what, err))
					return -1;
			if (a->kind == DTM_ACT_KERNEL &&
			    (a->kernel < 0 || a->kernel >= p->nkernels || !p->kernels[a->kernel])) {
				snprintf(err, RT_ERR_LEN, "invalid plan: %s calls kernel %d of %d", what,
					 a->kernel, p->nkernels);
				return -1;
			}
			if (a->kind == DTM_ACT_GEMM) {
				if (a->nargs != 3) {
					snprintf(err, RT_ERR_LEN, "invalid plan: gemm %s has %d args",
						 what, a->nargs);
					return -1;
				}
				int64_t n3[3];
				rt_gemm_extent(a, &n3[0], &n3[1], &n3[2]);
				for (int j = 0; j < 3; j++) {
					const DtmBuffer *b = &p->buffers[a->args[j]];
					if (n3[j] > rt_numel(b)) {
						snprintf(err, RT_ERR_LEN,
							 "invalid plan: gemm '%s' reads %lld elements "
							 "of '%s' which has %lld",
							 a->label ? a->label : what, (long long)n3[j],
							 buf_name(p, a->args[j]), (long long)rt_numel(b));
						return -1;
					}
				}
			}
		}
	}
	for (int s = 0; s < p->nstages; s++) {
		const DtmStage *st = &p->stages[s];
		if (p->nstages == 1)
			break;
		for (int i = 0; i < st->ninputs; i++)
			if (check_buffer_id(p, st->inputs[i], "an input", err))
				return -1;
		if (check_buffer_id(p, st->loss, "a stage's loss", err))
			return -1;
		if (st->grad_norm >= 0 && check_buffer_id(p, st->grad_norm, "a grad norm", err))
			return -1;
	}
	if (p->nstages > 1)
		return 0;
	for (int i = 0; i < p->ninputs; i++)
		if (check_buffer_id(p, p->inputs[i], "an input", err))
			return -1;
	if (check_buffer_id(p, p->loss, "the loss", err))
		return -1;
	if (p->grad_norm >= 0 && check_buffer_id(p, p->grad_norm, "the grad norm", err))
		return -1;
	return 0;
}

/* An arena's allocation, *sz bytes (a multiple of RT_ALIGN).  One of 2 MB
 * or more is aligned to 2 MB, its size rounded up to that (*sz then says
 * so), and marked for transparent huge pages where the kernel has them
 * (madvise mode): zeroing GPT-2 small's 10 GB of arenas in 4 KB pages was
 * about 2.5 million page faults, 14-30 s of system time on a 2-core VM.
 * The hint changes no value and no planned byte. */
#define RT_HUGE ((size_t)2 << 20)
static void *arena_memory(size_t *sz)
{
#ifdef MADV_HUGEPAGE
	if (*sz >= RT_HUGE) {
		size_t hs = (*sz + RT_HUGE - 1) / RT_HUGE * RT_HUGE;
		void *p = aligned_alloc(RT_HUGE, hs);
		if (p) {
			(void)madvise(p, hs, MADV_HUGEPAGE); /* a hint: refused, 4 KB pages */
			*sz = hs;
			return p;
		}
	}
#endif
	return aligned_alloc(RT_ALIGN, *sz);
}

int rt_run_init(RtRun *r, const DtmPlan *p, int64_t rank, int nthreads)
{
	return rt_run_init_ex(r, p, rank, nthreads, RT_HOST_ALL);
}

int rt_run_init_ex(RtRun *r, const DtmPlan *p, int64_t rank, int nthreads, uint32_t host_arenas)
{
	memset(r, 0, sizeof *r);
	r->plan = p;
	r->rank = rank;
	if (rt_plan_validate(p, r->err))
		return -1;
	rt_rank_coords(p, rank, r->coords);
	/* Stage = coordinate along the pipeline axis; with one stage every
	 * rank runs stage 0. */
	r->stage = p->nstages > 1 ? (int)r->coords[p->pp_axis] : 0;
	/* what crosses between host and device stays on the host */
	for (int i = 0; i < p->nbuffers; i++) {
		DtmRole role = p->buffers[i].role;
		if (p->buffers[i].stage == p->stage &&
		    (role == DTM_ROLE_PARAM || role == DTM_ROLE_OPT_STATE || role == DTM_ROLE_INPUT))
			host_arenas |= 1u << p->buffers[i].arena;
	}
	for (int a = 0; a < DTM_ARENA_COUNT; a++) {
		int64_t n = p->arena_bytes[a];
		/* every rank allocates the same plan; rank 0 reports it (and
		 * only one thread writes the record) */
		if (rank == 0)
			rt_last_alloc[a] = 0;
		if (n <= 0 || !(host_arenas & (1u << a)))
			continue;
		/* aligned_alloc wants a multiple of the alignment */
		size_t sz = (size_t)((n + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN);
		r->arena[a] = arena_memory(&sz);
		if (!r->arena[a]) {
			snprintf(r->err, RT_ERR_LEN, "out of memory allocating the %s arena (%lld bytes)",
				 arena_name(a), (long long)n);
			rt_run_free(r);
			return -1;
		}
		/* Zeroed once so uninitialised reads are deterministic. */
		memset(r->arena[a], 0, sz);
		r->arena_alloc[a] = n;
		if (rank == 0)
			rt_last_alloc[a] = n;
	}
	r->ptr = calloc((size_t)(p->nbuffers ? p->nbuffers : 1), sizeof *r->ptr);
	r->scratch = calloc(DTM_SCRATCH_FLOATS, sizeof(float));
	r->pool = rt_pool_new(nthreads);
	if (!r->ptr || !r->scratch || !r->pool) {
		snprintf(r->err, RT_ERR_LEN, "out of memory");
		rt_run_free(r);
		return -1;
	}
	for (int i = 0; i < p->nbuffers; i++) {
		const DtmBuffer *b = &p->buffers[i];
		if (b->stage != p->stage)
			continue; /* another pipeline stage's */
		r->ptr[i] = b->bytes > 0 && r->arena[b->arena] ?
				    (char *)r->arena[b->arena] + b->offset : NULL;
	}
	/* the CPU's GEMM staging, only when the CPU can run the actions */
	if (host_arenas == RT_HOST_ALL &&
	    rt_gemm_reserve(&r->gemm, p, rt_pool_threads(r->pool), r->err)) {
		rt_run_free(r);
		return -1;
	}
	rt_blas_set_threads(1); /* rt_cpu_gemm splits GEMMs over the pool */
	r->ctx.rank = rank;
	r->ctx.coords = r->coords;
	r->ctx.mesh_naxes = p->mesh_naxes;
	r->ctx.mesh_sizes = p->mesh_sizes;
	r->ctx.nthreads = rt_pool_threads(r->pool);
	r->ctx.scratch = r->scratch;
	r->ctx.parallel_for = rt_ctx_parallel_for;
	r->ctx.pool = r->pool;
	return 0;
}

void rt_run_free(RtRun *r)
{
	rt_overlap_stop(r); /* before the buffers it may be using go */
	if (r->dev)
		r->dev->close(r);
	r->dev = NULL;
	for (int a = 0; a < DTM_ARENA_COUNT; a++)
		free(r->arena[a]);
	free(r->ptr);
	free(r->scratch);
	rt_pool_free(r->pool);
	rt_gemm_scratch_free(&r->gemm);
	r->ptr = NULL;
	r->scratch = NULL;
	r->pool = NULL;
	memset(r->arena, 0, sizeof r->arena);
}

struct init_job {
	const DtmBuffer *b;
	void *dst;
	const int64_t *gidx;
	uint64_t seed, hash;
};

static void init_range(void *argp, int64_t lo, int64_t hi)
{
	struct init_job *j = argp;
	const DtmBuffer *b = j->b;
	for (int64_t i = lo; i < hi; i++) {
		float v = 0;
		switch (j->gidx[i] < 0 ? DTM_INIT_ZEROS : b->init) { /* < 0: padding */
		case DTM_INIT_NONE:
		case DTM_INIT_ZEROS: v = 0; break;
		case DTM_INIT_ONES: v = 1; break;
		case DTM_INIT_NORMAL:
			v = philox_init_normal(j->seed, j->hash, (uint64_t)j->gidx[i], b->init_a,
					    b->init_b);
			break;
		case DTM_INIT_UNIFORM:
			v = philox_init_uniform(j->seed, j->hash, (uint64_t)j->gidx[i], b->init_a,
					     b->init_b);
			break;
		}
		/* 16-bit params are drawn in f32 and rounded once (RNE), so
		 * the bf16 model starts from the rounded f32 model. */
		rt_store_f32(j->dst, b->dtype, i, v);
	}
}

int rt_run_init_values(RtRun *r, uint64_t seed)
{
	const DtmPlan *p = r->plan;
	int64_t *gidx = NULL, cap = 0;
	for (int i = 0; i < p->nbuffers; i++) {
		const DtmBuffer *b = &p->buffers[i];
		if (b->role != DTM_ROLE_PARAM && b->role != DTM_ROLE_OPT_STATE)
			continue;
		int64_t n = rt_numel(b);
		if (!r->ptr[i] || n == 0)
			continue;
		if (b->init == DTM_INIT_NONE || b->init == DTM_INIT_ZEROS) {
			memset(r->ptr[i], 0, (size_t)(n * (int64_t)rt_dtype_size(b->dtype)));
			continue;
		}
		if (!b->name && (b->init == DTM_INIT_NORMAL || b->init == DTM_INIT_UNIFORM)) {
			snprintf(r->err, RT_ERR_LEN,
				 "invalid plan: buffer %d has a random init but no name to key it", i);
			free(gidx);
			return -1;
		}
		if (n > cap) {
			free(gidx);
			cap = n;
			gidx = malloc((size_t)cap * sizeof *gidx);
			if (!gidx) {
				snprintf(r->err, RT_ERR_LEN, "out of memory initialising '%s'",
					 buf_name(p, i));
				return -1;
			}
		}
		rt_global_indices(p, b, r->coords, gidx);
		/* a master copy is keyed by its param's name, so it holds the
		 * param's initial value before rounding to 16 bits */
		const char *key = b->name;
		if (strncmp(key, "opt.master.", 11) == 0)
			key += 11;
		struct init_job j = { b, r->ptr[i], gidx, seed, hash_fnv1a64(key) };
		rt_parallel_for(r->pool, n, 4096, init_range, &j);
	}
	free(gidx);
	return 0;
}

/* The first non-finite element of a float buffer, or -1. */
static int64_t first_nonfinite(const void *p, DtmDtype t, int64_t n, float *val)
{
	if (t == DTM_I32)
		return -1;
	for (int64_t i = 0; i < n; i++) {
		float v = rt_load_f32(p, t, i);
		if (!isfinite(v)) {
			*val = v;
			return i;
		}
	}
	return -1;
}

/* The buffers an action writes: the last argument of kernels and GEMMs;
 * every argument of collectives and receives (which update in place). */
int rt_check_action(RtRun *r, int idx, const DtmAction *a, void *const *ptr)
{
	const DtmPlan *p = r->plan;
	int first = a->kind == DTM_ACT_KERNEL || a->kind == DTM_ACT_GEMM ? a->nargs - 1 : 0;
	if (a->kind == DTM_ACT_SEND || a->kind == DTM_ACT_WAIT)
		return 0;
	for (int j = first < 0 ? 0 : first; j < a->nargs; j++) {
		int id = a->args[j];
		const DtmBuffer *b = &p->buffers[id];
		float v = 0;
		int64_t e = ptr[id] ? first_nonfinite(ptr[id], b->dtype, rt_numel(b), &v) : -1;
		if (e >= 0) {
			const char *kname = a->kind == DTM_ACT_KERNEL && p->kernel_names ?
						    p->kernel_names[a->kernel] : NULL;
			snprintf(r->err, RT_ERR_LEN,
				 "non-finite value (%g) at element %lld of buffer '%s' written by "
				 "action %d '%s' (node %d%s%s) at step %lld",
				 (double)v, (long long)e, buf_name(p, id), idx,
				 a->label ? a->label : "?", a->node, kname ? ", kernel " : "",
				 kname ? kname : "", (long long)r->ctx.step);
			return -1;
		}
	}
	return 0;
}

int (*rt_test_action_hook)(RtRun *r, int action);

static bool is_comm(const DtmAction *a)
{
	return a->kind == DTM_ACT_COLL || a->kind == DTM_ACT_SEND || a->kind == DTM_ACT_RECV;
}

static int run_compute(RtRun *r, const DtmAction *a)
{
	const DtmPlan *p = r->plan;
	void *args[DTM_MAX_ARGS];
	if (a->kind == DTM_ACT_GEMM)
		return rt_cpu_gemm(a, p->buffers, r->ptr, &r->gemm, r->pool, r->err);
	for (int j = 0; j < a->nargs; j++)
		args[j] = r->ptr[a->args[j]];
	p->kernels[a->kernel](&r->ctx, args);
	return 0;
}

/* Everything on this thread, in plan order: communication time is all
 * exposed (idle). */
static int run_inline(RtRun *r, bool forward_only)
{
	const DtmStage *st = &r->plan->stages[r->stage];
	for (int i = 0; i < st->nactions; i++) {
		const DtmAction *a = &st->actions[i];
		if (forward_only && a->phase != DTM_PHASE_FORWARD)
			continue;
		if (a->kind == DTM_ACT_WAIT)
			continue; /* everything here is synchronous */
		if (rt_test_action_hook && rt_test_action_hook(r, i))
			return -1;
		double t0 = rt_now();
		if (is_comm(a) ? rt_comm_action(r, a, r->ptr, r->err) : run_compute(r, a))
			return -1;
		double dt = rt_now() - t0;
		if (is_comm(a)) {
			r->comm_s += dt;
			r->idle_s += dt;
		} else {
			r->compute_s += dt;
			if (r->act_s)
				r->act_s[i] += dt;
		}
		if (r->check_numerics && rt_check_action(r, i, a, r->ptr))
			return -1;
	}
	return 0;
}

/* Communication on the rank's communication thread (overlap.c): this
 * thread queues it and goes on, waiting only where an action touches
 * bytes a pending one reads or writes.  Stream-0 communication, WAIT and
 * --check-numerics (which reads what the action wrote) wait at once. */
static int run_overlapped(RtRun *r, bool forward_only)
{
	const DtmStage *st = &r->plan->stages[r->stage];
	if (rt_overlap_begin(r))
		return -1;
	for (int i = 0; i < st->nactions; i++) {
		const DtmAction *a = &st->actions[i];
		if (forward_only && a->phase != DTM_PHASE_FORWARD)
			continue;
		if (rt_test_action_hook && rt_test_action_hook(r, i))
			goto fail;
		double t0 = rt_now();
		if (a->kind == DTM_ACT_WAIT) {
			if (rt_overlap_wait_all(r))
				goto fail;
			r->idle_s += rt_now() - t0;
			continue;
		}
		RtAccess acc;
		rt_access_of(r->plan, a, &acc);
		if (is_comm(a)) {
			if (rt_overlap_issue(r, i, &acc) < 0)
				goto fail;
			if ((a->stream == 0 || r->check_numerics) && rt_overlap_wait_all(r))
				goto fail;
			/* queueing (with a staged input's copy), or waiting */
			r->idle_s += rt_now() - t0;
		} else {
			if (rt_overlap_wait_for(r, &acc))
				goto fail;
			double t1 = rt_now();
			r->idle_s += t1 - t0;
			if (run_compute(r, a))
				goto fail;
			double t2 = rt_now();
			r->compute_s += t2 - t1;
			if (r->act_s)
				r->act_s[i] += t2 - t1;
		}
		if (r->check_numerics && rt_check_action(r, i, a, r->ptr))
			goto fail;
	}
	double t0 = rt_now();
	if (rt_overlap_wait_all(r))
		goto fail;
	r->idle_s += rt_now() - t0;
	r->comm_s = rt_overlap_comm_s(r);
	return 0;
fail:
	/* nothing of this pass may still touch the buffers or the Comm */
	rt_overlap_abort(r);
	r->comm_s = rt_overlap_comm_s(r);
	return -1;
}

int rt_run_actions(RtRun *r, bool forward_only)
{
	r->compute_s = r->comm_s = r->idle_s = 0;
	if (r->dev)
		return r->dev->run_actions(r, forward_only);
	if (!r->overlap || !r->comm)
		return run_inline(r, forward_only);
	if (rt_overlap_start(r))
		return -1;
	return run_overlapped(r, forward_only);
}

int rt_run_to_device(RtRun *r)
{
	return r->dev ? r->dev->to_device(r) : 0;
}

int rt_run_to_host(RtRun *r)
{
	return r->dev ? r->dev->to_host(r) : 0;
}

int rt_read_scalar(RtRun *r, int buf, double *out)
{
	if (r->dev)
		return r->dev->read_scalar(r, buf, out);
	const DtmBuffer *b = &r->plan->buffers[buf];
	if (rt_numel(b) < 1 || !r->ptr[buf]) {
		snprintf(r->err, RT_ERR_LEN, "buffer '%s' is empty", buf_name(r->plan, buf));
		return -1;
	}
	*out = rt_load_f32(r->ptr[buf], b->dtype, 0);
	return 0;
}
