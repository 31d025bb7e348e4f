/* dev_cpu.c - the CPU device: a persistent thread pool (what generated
 * kernels call through DtmCtx.parallel_for) and GEMM through CBLAS.
 *
 * GEMM actions are row-major, C = alpha op(A) op(B) + beta C, batched with
 * element strides (stride 0 broadcasts one operand over the batch).  BLAS
 * works in f32 only, so bf16/f16 operands are widened into scratch sized
 * once from the plan, multiplied in f32 (f32 accumulation, as mixed
 * precision requires) and C is rounded back to nearest even.
 *
 * Many small batch items (attention heads) gain nothing from BLAS's own
 * threads, so those batches are split over the pool instead, with BLAS held
 * to one thread meanwhile.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "runtime/ckpt.h"
#include "runtime/rt.h"

#ifdef DTM_HAVE_CBLAS
#include <cblas.h>
#endif

/* ---- f16 <-> f32 (IEEE binary16), round to nearest even ---- */

/* f16 conversions are the checkpoint reader's (runtime/ckpt.c): one copy of
 * the rounding rules in the runtime */
float rt_f16_to_f32(uint16_t h)
{
	return dtm_f16_to_f32(h);
}

uint16_t rt_f32_to_f16(float f)
{
	return dtm_f32_to_f16(f);
}

/* ---- thread pool ---- */

/* Workers sleep on a condition variable between jobs; a job is one
 * parallel_for, split into at most nthreads ranges, range 0 run by the
 * caller.  A generation counter tells the workers a new job has come. */
struct RtPool {
	int nthreads;
	pthread_t *threads;
	pthread_mutex_t mu;
	pthread_cond_t wake, done;
	uint64_t gen;
	int pending;
	bool stop;
	DtmRangeFn fn;
	void *arg;
	int64_t n, nranges;
};

static _Thread_local bool rt_in_pool;

static void pool_range(const RtPool *p, int64_t i, int64_t *lo, int64_t *hi)
{
	int64_t per = p->n / p->nranges, extra = p->n % p->nranges;
	*lo = i * per + (i < extra ? i : extra);
	*hi = *lo + per + (i < extra);
}

struct worker_arg {
	RtPool *pool;
	int id;
};

static void *pool_worker(void *argp)
{
	struct worker_arg *wa = argp;
	RtPool *p = wa->pool;
	int id = wa->id;
	free(wa);
	rt_in_pool = true;
	uint64_t seen = 0;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->wake, &p->mu);
		if (p->stop)
			break;
		seen = p->gen;
		if (id < p->nranges) {
			int64_t lo, hi;
			pool_range(p, id, &lo, &hi);
			DtmRangeFn fn = p->fn;
			void *arg = p->arg;
			pthread_mutex_unlock(&p->mu);
			fn(arg, lo, hi);
			pthread_mutex_lock(&p->mu);
			if (--p->pending == 0)
				pthread_cond_signal(&p->done);
		}
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

RtPool *rt_pool_new(int nthreads)
{
	RtPool *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->nthreads = nthreads < 1 ? 1 : nthreads;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->wake, NULL);
	pthread_cond_init(&p->done, NULL);
	if (p->nthreads > 1) {
		p->threads = calloc((size_t)p->nthreads, sizeof *p->threads);
		if (!p->threads) {
			p->nthreads = 1;
			return p;
		}
		for (int i = 1; i < p->nthreads; i++) {
			struct worker_arg *wa = malloc(sizeof *wa);
			if (!wa || (wa->pool = p, wa->id = i,
				    pthread_create(&p->threads[i], NULL, pool_worker, wa)) != 0) {
				/* fewer threads is still correct */
				free(wa);
				p->nthreads = i;
				break;
			}
		}
	}
	return p;
}

void rt_pool_free(RtPool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->wake);
	pthread_cond_destroy(&p->done);
	free(p);
}

int rt_pool_threads(const RtPool *p)
{
	return p ? p->nthreads : 1;
}

void rt_parallel_for(RtPool *p, int64_t n, int64_t grain, DtmRangeFn fn, void *arg)
{
	if (n <= 0)
		return;
	if (grain < 1)
		grain = 1;
	int64_t nr = n / grain;
	if (!p || rt_in_pool || p->nthreads == 1 || nr < 2) {
		fn(arg, 0, n);
		return;
	}
	if (nr > p->nthreads)
		nr = p->nthreads;
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->n = n;
	p->nranges = nr;
	p->pending = (int)nr - 1;
	p->gen++;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->mu);

	int64_t lo, hi;
	pool_range(p, 0, &lo, &hi);
	rt_in_pool = true; /* nested parallel_for in range 0 runs serially too */
	fn(arg, lo, hi);
	rt_in_pool = false;

	pthread_mutex_lock(&p->mu);
	while (p->pending > 0)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

void rt_ctx_parallel_for(const DtmCtx *ctx, int64_t n, int64_t grain, DtmRangeFn fn, void *arg)
{
	rt_parallel_for((RtPool *)ctx->pool, n, grain, fn, arg);
}

/* ---- BLAS ---- */

#ifdef DTM_HAVE_OPENBLAS
void openblas_set_num_threads(int);
#endif

void rt_blas_set_threads(int n)
{
#ifdef DTM_HAVE_OPENBLAS
	openblas_set_num_threads(n);
#else
	(void)n;
#endif
}

const char *rt_blas_name(void)
{
#if defined(DTM_HAVE_OPENBLAS)
	return "openblas";
#elif defined(DTM_HAVE_CBLAS)
	return "cblas";
#else
	return "builtin (no CBLAS found at build time: slow)";
#endif
}

static void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
		  const float *A, const float *B, float beta, float *C)
{
	int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
#ifdef DTM_HAVE_CBLAS
	cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
		    (int)m, (int)n, (int)k, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
#else
	/* A plain fallback so the runtime builds without BLAS. */
	for (int64_t i = 0; i < m; i++) {
		for (int64_t j = 0; j < n; j++) {
			float acc = 0;
			for (int64_t p = 0; p < k; p++) {
				float a = ta ? A[p * lda + i] : A[i * lda + p];
				float b = tb ? B[j * ldb + p] : B[p * ldb + j];
				acc += a * b;
			}
			float *c = &C[i * ldc + j];
			*c = alpha * acc + (beta == 0 ? 0 : beta * *c);
		}
	}
#endif
}

void rt_gemm_extent(const DtmAction *a, int64_t *na, int64_t *nb, int64_t *nc)
{
	int64_t last = a->batch > 1 ? a->batch - 1 : 0;
	*na = a->stride_a * last + a->m * a->k;
	*nb = a->stride_b * last + a->k * a->n;
	*nc = a->stride_c * last + a->m * a->n;
}

int rt_gemm_reserve(RtGemmScratch *s, const DtmPlan *p, char *err)
{
	int64_t na = 0, nb = 0, nc = 0;
	for (int st = 0; st < p->nstages; st++) {
		for (int i = 0; i < p->stages[st].nactions; i++) {
			const DtmAction *a = &p->stages[st].actions[i];
			if (a->kind != DTM_ACT_GEMM)
				continue;
			int64_t ea, eb, ec;
			rt_gemm_extent(a, &ea, &eb, &ec);
			if (p->buffers[a->args[0]].dtype != DTM_F32 && ea > na)
				na = ea;
			if (p->buffers[a->args[1]].dtype != DTM_F32 && eb > nb)
				nb = eb;
			if (p->buffers[a->args[2]].dtype != DTM_F32 && ec > nc)
				nc = ec;
		}
	}
	s->a = na ? malloc((size_t)na * 4) : NULL;
	s->b = nb ? malloc((size_t)nb * 4) : NULL;
	s->c = nc ? malloc((size_t)nc * 4) : NULL;
	s->na = na;
	s->nb = nb;
	s->nc = nc;
	if ((na && !s->a) || (nb && !s->b) || (nc && !s->c)) {
		snprintf(err, RT_ERR_LEN, "out of memory for GEMM scratch (%lld floats)",
			 (long long)(na + nb + nc));
		return -1;
	}
	return 0;
}

void rt_gemm_scratch_free(RtGemmScratch *s)
{
	free(s->a);
	free(s->b);
	free(s->c);
	memset(s, 0, sizeof *s);
}

struct widen_job {
	const void *src;
	DtmDtype t;
	float *dst;
	void *out;
};

/* bf16 gets its own loops: without the per-element dtype switch they
 * vectorise, and conversion is what bounds small bf16 GEMMs. */
static void widen_range(void *argp, int64_t lo, int64_t hi)
{
	struct widen_job *j = argp;
	if (j->t == DTM_BF16) {
		const uint16_t *s = j->src;
		for (int64_t i = lo; i < hi; i++)
			j->dst[i] = rt_bf16_to_f32(s[i]);
		return;
	}
	for (int64_t i = lo; i < hi; i++)
		j->dst[i] = rt_load_f32(j->src, j->t, i);
}

static void narrow_range(void *argp, int64_t lo, int64_t hi)
{
	struct widen_job *j = argp;
	if (j->t == DTM_BF16) {
		uint16_t *d = j->out;
		for (int64_t i = lo; i < hi; i++)
			d[i] = rt_f32_to_bf16(j->dst[i]);
		return;
	}
	for (int64_t i = lo; i < hi; i++)
		rt_store_f32(j->out, j->t, i, j->dst[i]);
}

/* The f32 view of an operand: the buffer itself, or widened scratch. */
static const float *stage_in(const void *src, DtmDtype t, float *scratch, int64_t n, RtPool *pool)
{
	if (t == DTM_F32)
		return src;
	struct widen_job j = { src, t, scratch, NULL };
	rt_parallel_for(pool, n, 1 << 15, widen_range, &j);
	return scratch;
}

struct batch_job {
	const DtmAction *a;
	const float *A, *B;
	float *C;
};

static void batch_range(void *argp, int64_t lo, int64_t hi)
{
	struct batch_job *j = argp;
	const DtmAction *a = j->a;
	for (int64_t i = lo; i < hi; i++)
		sgemm(a->trans_a, a->trans_b, a->m, a->n, a->k, a->alpha, j->A + i * a->stride_a,
		      j->B + i * a->stride_b, a->beta, j->C + i * a->stride_c);
}

int rt_cpu_gemm(const DtmAction *a, const DtmBuffer *bufs, void *const *ptrs, RtGemmScratch *s,
		RtPool *pool, char *err)
{
	const DtmBuffer *ba = &bufs[a->args[0]], *bb = &bufs[a->args[1]], *bc = &bufs[a->args[2]];
	if (ba->dtype == DTM_I32 || bb->dtype == DTM_I32 || bc->dtype == DTM_I32) {
		snprintf(err, RT_ERR_LEN, "gemm '%s': integer operands are not supported",
			 a->label ? a->label : "?");
		return -1;
	}
	int64_t na, nb, nc;
	rt_gemm_extent(a, &na, &nb, &nc);
	const float *A = stage_in(ptrs[a->args[0]], ba->dtype, s->a, na, pool);
	const float *B = stage_in(ptrs[a->args[1]], bb->dtype, s->b, nb, pool);
	int64_t batch = a->batch > 1 ? a->batch : 1;
	float *C;
	if (bc->dtype == DTM_F32) {
		C = ptrs[a->args[2]];
	} else if (a->beta != 0 || (batch > 1 && a->stride_c != a->m * a->n)) {
		/* beta reads C; gaps between batch items must survive the
		 * narrowing below unchanged */
		C = (float *)stage_in(ptrs[a->args[2]], bc->dtype, s->c, nc, pool);
	} else {
		C = s->c;
	}
	int nt = rt_pool_threads(pool);
	/* Below about 2 MFLOP per item BLAS stays on one thread anyway, so a
	 * batch that large is better split across the pool, unless the whole
	 * batch is too small to pay for waking the pool and switching BLAS's
	 * thread count (under ~8 MFLOP in all: serial measured 3-5x faster,
	 * bench/gemm_bench).  A C written by every item (stride_c 0) must stay
	 * serial. */
	int64_t item_flops = 2 * a->m * a->n * a->k;
	bool split = batch > 1 && nt > 1 && a->stride_c != 0 && item_flops < (2 << 20) &&
		     item_flops * batch >= (8 << 20);
	struct batch_job j = { a, A, B, C };
	if (split) {
		rt_blas_set_threads(1);
		rt_parallel_for(pool, batch, 1, batch_range, &j);
		rt_blas_set_threads(nt);
	} else {
		batch_range(&j, 0, batch);
	}
	if (bc->dtype != DTM_F32) {
		struct widen_job w = { NULL, bc->dtype, C, ptrs[a->args[2]] };
		rt_parallel_for(pool, nc, 1 << 15, narrow_range, &w);
	}
	return 0;
}
