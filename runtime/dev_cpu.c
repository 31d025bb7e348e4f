/* dev_cpu.c - the CPU device: a persistent thread pool (what generated
 * kernels call through DtmCtx.parallel_for) and GEMM through CBLAS.
 *
 * GEMM actions are row-major, C = alpha op(A) op(B) + beta C, batched with
 * element strides (stride 0 broadcasts one operand over the batch).  BLAS
 * works in f32 only, so bf16/f16 operands are widened into scratch sized
 * once from the plan, multiplied in f32 (f32 accumulation, as mixed
 * precision requires) and C is rounded back to nearest even.
 *
 * BLAS runs on one thread; rt_cpu_gemm cuts each GEMM into blocks fixed
 * by its shape and hands them to the pool, so the result is the same bits
 * for every thread count (see "GEMM: fixed blocks" below).
 */
#include <errno.h>
#include <math.h>
#include <strings.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "runtime/ckpt.h"
#include "runtime/rt.h"

#ifdef DTM_HAVE_CBLAS
#include <cblas.h>
#endif

/* ---- thread pool ---- */

/* A job is one parallel_for, split into at most nthreads ranges.  Ranges
 * are claimed, by the caller and the workers alike, through one atomic
 * word (the job's number, its range count and the next free range), so a
 * worker that is slow to wake (or descheduled: the machine may be shared)
 * costs nothing: the caller runs the unclaimed ranges itself and waits
 * only for ranges a worker has started.  A worker reads the job's fields
 * only after claiming a range of it, and the caller does not return
 * before every claimed range is done, so the fields of a job are never
 * rewritten under a reader.
 *
 * Waiting (workers for a job, the caller for claimed ranges) spins a few
 * microseconds with pause, then with sched_yield (which hands the core to
 * any other runnable thread: spinning alone made a shared machine 20x
 * slower) for up to RT_SPIN_NS, then sleeps on a condition variable.  A
 * GPT step at the default size dispatches hundreds of jobs of a few
 * microseconds each, and waking a sleeping thread costs about as much as
 * the job.  Sleeping is race-free: a worker counts itself in `sleepers`
 * (under mu) before its last look at `gen`, and the caller bumps `gen`
 * before it reads `sleepers` (both seq_cst), so either the worker sees
 * the job or the caller sees the sleeper and broadcasts under mu; the
 * caller's wait for `done` uses `waiting` the same way. */
#define RT_SPIN_NS 200000
#define RT_PAUSE_NS 3000

/* claim word: job number (32 bits) | range count (16) | next range (16) */
#define CLAIM(job, nr, next) (((uint64_t)(job) << 32) | ((uint64_t)(nr) << 16) | (uint64_t)(next))
#define CLAIM_NR(w) ((int64_t)(((w) >> 16) & 0xffff))
#define CLAIM_NEXT(w) ((int64_t)((w) & 0xffff))
#define RT_POOL_MAX 0xffff

struct RtPool {
	int nthreads;
	pthread_t *threads;
	pthread_mutex_t mu;
	pthread_cond_t wake, done_cv;
	_Atomic uint64_t gen, claim;
	_Atomic int64_t done;
	_Atomic int sleepers, waiting;
	_Atomic bool stop;
	/* the job: written by the caller before claim is published */
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

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One step of a bounded spin; false once RT_SPIN_NS have passed. */
static bool spin_step(int i, int64_t *t0)
{
	if (i < 64) {
		cpu_relax();
		return true;
	}
	int64_t t = now_ns();
	if (!*t0)
		*t0 = t;
	if (t - *t0 > RT_SPIN_NS)
		return false;
	if (t - *t0 > RT_PAUSE_NS)
		sched_yield();
	else
		for (int k = 0; k < 16; k++)
			cpu_relax();
	return true;
}

/* Runs unclaimed ranges of the current job until none is left. */
static void pool_claim_and_run(RtPool *p)
{
	uint64_t w = atomic_load_explicit(&p->claim, memory_order_acquire);
	while (CLAIM_NEXT(w) < CLAIM_NR(w)) {
		if (!atomic_compare_exchange_weak_explicit(&p->claim, &w, w + 1,
							   memory_order_acq_rel,
							   memory_order_acquire))
			continue;
		int64_t lo, hi, nr = CLAIM_NR(w);
		pool_range(p, CLAIM_NEXT(w), &lo, &hi);
		p->fn(p->arg, lo, hi);
		if (atomic_fetch_add(&p->done, 1) + 1 == nr && atomic_load(&p->waiting)) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done_cv);
			pthread_mutex_unlock(&p->mu);
		}
		w = atomic_load_explicit(&p->claim, memory_order_acquire);
	}
}

struct worker_arg {
	RtPool *pool;
	int id;
};

static void *pool_worker(void *argp)
{
	struct worker_arg *wa = argp;
	RtPool *p = wa->pool;
	free(wa);
	rt_in_pool = true;
	uint64_t seen = 0;
	for (;;) {
		int64_t t0 = 0;
		bool got = false;
		for (int i = 0; !got; i++) {
			got = atomic_load_explicit(&p->gen, memory_order_acquire) != seen;
			if (!got && !spin_step(i, &t0))
				break;
		}
		if (!got) {
			pthread_mutex_lock(&p->mu);
			atomic_fetch_add(&p->sleepers, 1);
			while (!atomic_load(&p->stop) && atomic_load(&p->gen) == seen)
				pthread_cond_wait(&p->wake, &p->mu);
			atomic_fetch_sub(&p->sleepers, 1);
			pthread_mutex_unlock(&p->mu);
		}
		if (atomic_load(&p->stop))
			break;
		seen = atomic_load_explicit(&p->gen, memory_order_acquire);
		pool_claim_and_run(p);
	}
	return NULL;
}

RtPool *rt_pool_new(int nthreads)
{
	RtPool *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->nthreads = nthreads < 1 ? 1 : nthreads > RT_POOL_MAX ? RT_POOL_MAX : nthreads;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->wake, NULL);
	pthread_cond_init(&p->done_cv, NULL);
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
	atomic_store(&p->stop, true);
	atomic_fetch_add(&p->gen, 1);
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->wake);
	pthread_cond_destroy(&p->done_cv);
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
	p->fn = fn;
	p->arg = arg;
	p->n = n;
	p->nranges = nr;
	atomic_store(&p->done, 0);
	uint64_t job = atomic_load(&p->gen) + 1;
	atomic_store_explicit(&p->claim, CLAIM(job, nr, 0), memory_order_release);
	atomic_fetch_add(&p->gen, 1); /* wakes the workers */
	if (atomic_load(&p->sleepers) > 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->wake);
		pthread_mutex_unlock(&p->mu);
	}

	rt_in_pool = true; /* nested parallel_for in a range runs serially */
	pool_claim_and_run(p);
	rt_in_pool = false;

	int64_t t0 = 0;
	for (int i = 0; atomic_load_explicit(&p->done, memory_order_acquire) < nr; i++) {
		if (spin_step(i, &t0))
			continue;
		pthread_mutex_lock(&p->mu);
		atomic_store(&p->waiting, 1);
		while (atomic_load(&p->done) < nr)
			pthread_cond_wait(&p->done_cv, &p->mu);
		atomic_store(&p->waiting, 0);
		pthread_mutex_unlock(&p->mu);
	}
}

void rt_ctx_parallel_for(const DtmCtx *ctx, int64_t n, int64_t grain, DtmRangeFn fn, void *arg)
{
	rt_parallel_for((RtPool *)ctx->pool, n, grain, fn, arg);
}

/* ---- BLAS ---- */

#ifdef DTM_HAVE_OPENBLAS
void openblas_set_num_threads(int);

/* What BLAS was last told, so telling it again costs nothing. */
static _Atomic int rt_blas_threads;

void rt_blas_set_threads(int n)
{
	if (atomic_exchange(&rt_blas_threads, n) != n)
		openblas_set_num_threads(n);
}
#else
void rt_blas_set_threads(int n)
{
	(void)n;
}
#endif

/* ---- bf16 GEMMs: oneDNN ----
 *
 * With both operands bf16, a GEMM block is one dnnl_gemm_bf16bf16f32 call
 * (bf16 x bf16 products, exact in f32, accumulated in f32: the same
 * arithmetic as widening the operands for sgemm, at the bf16 units' rate:
 * AVX512-BF16, AMX).  The function is exported by Debian's libdnnl 2.6 but
 * not declared in its headers, so it is declared here.  oneDNN runs on
 * OpenMP threads: every thread that calls it is told to use one, and the
 * pool cuts the GEMM into the same blocks as for BLAS (a block's result
 * then depends on its shape alone).  A CPU without AVX512-BF16 (oneDNN
 * would emulate it) or a library that cannot (the first call fails) falls
 * back to widening, said once on stderr. */
#ifdef DTM_HAVE_DNNL
int dnnl_gemm_bf16bf16f32(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
			  const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
			  float beta, float *c, int64_t ldc);
void omp_set_num_threads(int n);

static _Thread_local bool rt_omp_one;
static _Atomic int rt_dnnl_state; /* 0 untried, 1 works, -1 does not */

static int dnnl_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
		     const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta,
		     float *C, int64_t ldc)
{
	if (!rt_omp_one) {
		omp_set_num_threads(1);
		rt_omp_one = true;
	}
	return dnnl_gemm_bf16bf16f32(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, A, lda, B,
				     ldb, beta, C, ldc);
}

/* Whether bf16 GEMMs go to oneDNN: tried once, on a 16x16x16 product of
 * ones (each element must be 16). */
static bool dnnl_ok(void)
{
	int s = atomic_load(&rt_dnnl_state);
	if (s)
		return s > 0;
#if defined(__x86_64__) || defined(__i386__)
	/* without the bf16 dot products oneDNN emulates them, slower than
	 * OpenBLAS's sgemm on the widened operands */
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx512bf16")) {
		int want = 0;
		if (atomic_compare_exchange_strong(&rt_dnnl_state, &want, -1))
			fprintf(stderr, "dtm: this CPU has no AVX512-BF16: bf16 GEMMs widen their "
				"operands to f32 for BLAS\n");
		return false;
	}
#endif
	uint16_t one[256];
	float c[256];
	for (int i = 0; i < 256; i++)
		one[i] = 0x3f80; /* 1.0 */
	bool ok = dnnl_gemm(false, false, 16, 16, 16, 1.0f, one, 16, one, 16, 0.0f, c, 16) == 0;
	for (int i = 0; ok && i < 256; i++)
		ok = c[i] == 16.0f;
	int want = 0;
	if (atomic_compare_exchange_strong(&rt_dnnl_state, &want, ok ? 1 : -1) && !ok)
		fprintf(stderr, "dtm: oneDNN's bf16 GEMM does not run on this CPU: bf16 GEMMs "
			"widen their operands to f32\n");
	return ok;
}
#else
static bool dnnl_ok(void)
{
	return false;
}
#endif

/* ---- f32 GEMMs: OpenBLAS, or oneDNN's sgemm where it is the faster ----
 *
 * Debian 12's OpenBLAS 0.3.21 does not know AMD's Zen 4 or 5 and runs its
 * Haswell (AVX2) kernels there: 126 GFLOP/s a core at 1024^3 on the AMD
 * EPYC VM of bench/README.md, where oneDNN's sgemm (AVX-512) reaches 254.
 * On Intel's AVX-512 CPUs OpenBLAS runs its SkylakeX/Cooperlake kernels and
 * is the faster (issue 22: 172-190 GFLOP/s on 2 threads against oneDNN's
 * 127).  So f32 GEMM blocks go to oneDNN where the CPU has AVX-512 and
 * OpenBLAS's kernels do not use it (or there is no OpenBLAS), decided from
 * the CPU and OpenBLAS's kernel name, never from a timing: a machine always
 * computes the same bits.  DTM_SGEMM=openblas or onednn overrides (the
 * tests compare the two).  A oneDNN that fails its first product (16^3 of
 * ones) is not used. */
#ifdef DTM_HAVE_DNNL
int dnnl_sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
	       const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
	       int64_t ldc);
#ifdef DTM_HAVE_OPENBLAS
char *openblas_get_corename(void);
#endif

static _Atomic int rt_dnnl_f32_state; /* 0 undecided, 1 oneDNN, -1 BLAS */

static bool dnnl_f32_pick(void)
{
	const char *env = getenv("DTM_SGEMM");
	if (env && !strcmp(env, "openblas"))
		return false;
	if (!(env && !strcmp(env, "onednn"))) {
		if (env && *env)
			fprintf(stderr, "dtm: DTM_SGEMM=%s is not openblas or onednn: ignored\n",
				env);
#if defined(__x86_64__) || defined(__i386__)
		__builtin_cpu_init();
		if (!__builtin_cpu_supports("avx512f"))
			return false;
#else
		return false;
#endif
#ifdef DTM_HAVE_OPENBLAS
		const char *core = openblas_get_corename();
		static const char *avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
		for (size_t i = 0; core && i < sizeof avx512 / sizeof *avx512; i++)
			if (!strcasecmp(core, avx512[i]))
				return false;
#endif
	}
	float one[256], c[256];
	for (int i = 0; i < 256; i++)
		one[i] = 1;
	if (!rt_omp_one) {
		omp_set_num_threads(1);
		rt_omp_one = true;
	}
	bool ok = dnnl_sgemm('N', 'N', 16, 16, 16, 1.0f, one, 16, one, 16, 0.0f, c, 16) == 0;
	for (int i = 0; ok && i < 256; i++)
		ok = c[i] == 16.0f;
	if (!ok)
		fprintf(stderr, "dtm: oneDNN's sgemm does not run on this CPU: f32 GEMMs on BLAS\n");
	return ok;
}

static bool dnnl_f32(void)
{
	int s = atomic_load(&rt_dnnl_f32_state);
	if (s)
		return s > 0;
	int want = 0, v = dnnl_f32_pick() ? 1 : -1;
	atomic_compare_exchange_strong(&rt_dnnl_f32_state, &want, v);
	return atomic_load(&rt_dnnl_f32_state) > 0;
}
#else
static inline bool dnnl_f32(void)
{
	return false;
}
#endif

const char *rt_blas_name(void)
{
#if defined(DTM_HAVE_OPENBLAS) && defined(DTM_HAVE_DNNL)
	return dnnl_f32() ? "onednn (f32 and bf16)" : "openblas; bf16 on onednn";
#elif defined(DTM_HAVE_DNNL)
	return dnnl_f32() ? "onednn (f32 and bf16)" : "builtin; bf16 on onednn";
#elif defined(DTM_HAVE_OPENBLAS)
	return "openblas";
#elif defined(DTM_HAVE_CBLAS)
	return "cblas";
#else
	return "builtin (no CBLAS found at build time: slow)";
#endif
}

/* 0, or -1 when oneDNN refused the call. */
static int sgemm_ld(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
		     const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
		     int64_t ldc)
{
#ifdef DTM_HAVE_DNNL
	if (dnnl_f32()) {
		if (!rt_omp_one) {
			omp_set_num_threads(1);
			rt_omp_one = true;
		}
		return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, A, lda, B, ldb,
				  beta, C, ldc) == 0 ? 0 : -1;
	}
#endif
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
	return 0;
}

int rt_gemm_alloc(RtGemmScratch *s, const int64_t need[4], int nslots, char *err)
{
	memset(s, 0, sizeof *s);
	s->a = need[0] ? malloc((size_t)need[0] * 4) : NULL;
	s->b = need[1] ? malloc((size_t)need[1] * 4) : NULL;
	s->c = need[2] ? malloc((size_t)need[2] * 4) : NULL;
	s->blk = need[3] ? malloc((size_t)(need[3] * nslots) * 4) : NULL;
	s->na = need[0];
	s->nb = need[1];
	s->nc = need[2];
	s->nblk = need[3];
	s->nslots = need[3] ? nslots : 0;
	if ((need[0] && !s->a) || (need[1] && !s->b) || (need[2] && !s->c) || (need[3] && !s->blk)) {
		snprintf(err, RT_ERR_LEN, "out of memory for GEMM scratch (%lld floats)",
			 (long long)(need[0] + need[1] + need[2] + need[3] * nslots));
		rt_gemm_scratch_free(s);
		return -1;
	}
	return 0;
}

int rt_gemm_reserve(RtGemmScratch *s, const DtmPlan *p, int nslots, char *err)
{
	int64_t need[4];
	/* A and B as if oneDNN took no bf16 operands, so the reservation is
	 * inspect's on any machine (where it takes them, they stay untouched) */
	rt_gemm_plan_need(p, false, need);
	return rt_gemm_alloc(s, need, nslots, err);
}

int64_t rt_gemm_scratch_bytes(const RtGemmScratch *s)
{
	return 4 * (s->na + s->nb + s->nc + s->nblk * s->nslots);
}

void rt_gemm_scratch_free(RtGemmScratch *s)
{
	free(s->a);
	free(s->b);
	free(s->c);
	free(s->blk);
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
	rt_widen(j->dst + lo, j->src, j->t, lo, hi - lo);
}

static void narrow_range(void *argp, int64_t lo, int64_t hi)
{
	struct widen_job *j = argp;
	rt_narrow(j->out, j->t, lo, j->dst + lo, hi - lo);
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

/* The pool is woken for at least this much work per range (the blocks
 * themselves: rt_gemm_split, runtime/planinfo.c). */
#define RT_GEMM_RANGE_FLOPS (1 << 20)

struct gemm_job {
	const DtmAction *a;
	const float *A, *B;
	const uint16_t *Ah, *Bh; /* bf16 operands for oneDNN, or NULL */
	float *C;                /* an f32 C, or the whole staged one; NULL: blocks */
	void *out;               /* C's bf16 / f16 buffer, staged a block at a time */
	DtmDtype out_t;
	float *blk;              /* the blocks' staging: one of nblk floats per range */
	int64_t nblk;
	_Atomic int slot;        /* ranges started (each takes the next staging) */
	_Atomic int failed;      /* a oneDNN call failed */
	RtGemmSplit sp;
	int64_t item0; /* tasks count from this batch item */
};

/* Block [b0, b1) of item it's C rows (or columns): one BLAS call writing
 * the block at Cb (its first element), rows ldc apart. */
static void gemm_block(const struct gemm_job *j, int64_t it, int64_t b0, int64_t b1, float *Cb,
		       int64_t ldc)
{
	const DtmAction *a = j->a;
	int64_t m = a->m, n = a->n, k = a->k, lda = a->trans_a ? m : k, ldb = a->trans_b ? k : n;
	int st;
#ifdef DTM_HAVE_DNNL
	if (j->Ah) {
		const uint16_t *A = j->Ah + it * a->stride_a, *B = j->Bh + it * a->stride_b;
		st = j->sp.rows ? dnnl_gemm(a->trans_a, a->trans_b, b1 - b0, n, k, a->alpha,
					    A + (a->trans_a ? b0 : b0 * lda), lda, B, ldb, a->beta,
					    Cb, ldc) :
				  dnnl_gemm(a->trans_a, a->trans_b, m, b1 - b0, k, a->alpha, A, lda,
					    B + (a->trans_b ? b0 * ldb : b0), ldb, a->beta, Cb, ldc);
		if (st != 0)
			atomic_store(&((struct gemm_job *)j)->failed, 1);
		return;
	}
#endif
	const float *A = j->A + it * a->stride_a, *B = j->B + it * a->stride_b;
	st = j->sp.rows ? /* rows of op(A): A's rows, or its columns when transposed */
		     sgemm_ld(a->trans_a, a->trans_b, b1 - b0, n, k, a->alpha,
			      A + (a->trans_a ? b0 : b0 * lda), lda, B, ldb, a->beta, Cb, ldc) :
		     /* columns of op(B) */
		     sgemm_ld(a->trans_a, a->trans_b, m, b1 - b0, k, a->alpha, A, lda,
			      B + (a->trans_b ? b0 * ldb : b0), ldb, a->beta, Cb, ldc);
	if (st != 0)
		atomic_store(&((struct gemm_job *)j)->failed, 1);
}

/* A rows x cols block of a 16-bit C (from element off, rows n apart) to
 * and from its f32 staging (rows cols apart): widened where beta reads it,
 * narrowed by the thread that computed it while it is in cache. */
static void block_widen(const struct gemm_job *j, int64_t off, int64_t n, float *buf,
			int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++)
		rt_widen(buf + r * cols, j->out, j->out_t, off + r * n, cols);
}

static void block_narrow(const struct gemm_job *j, int64_t off, int64_t n, const float *buf,
			 int64_t rows, int64_t cols)
{
	for (int64_t r = 0; r < rows; r++)
		rt_narrow(j->out, j->out_t, off + r * n, buf + r * cols, cols);
}

/* Tasks [lo, hi): task t is block t % nblocks of item item0 + t / nblocks. */
static void gemm_range(void *argp, int64_t lo, int64_t hi)
{
	struct gemm_job *j = argp;
	const DtmAction *a = j->a;
	int64_t m = a->m, n = a->n, lim = j->sp.rows ? m : n;
	/* the pool runs at most one range per thread: each its own staging */
	float *buf = j->C ? NULL : j->blk + atomic_fetch_add(&j->slot, 1) * j->nblk;
	for (int64_t t = lo; t < hi; t++) {
		int64_t it = j->item0 + t / j->sp.nblocks, b0 = t % j->sp.nblocks * j->sp.ext;
		int64_t b1 = b0 + j->sp.ext < lim ? b0 + j->sp.ext : lim;
		int64_t off = it * a->stride_c + (j->sp.rows ? b0 * n : b0);
		if (!buf) {
			gemm_block(j, it, b0, b1, j->C + off, n);
			continue;
		}
		int64_t rows = j->sp.rows ? b1 - b0 : m, cols = j->sp.rows ? n : b1 - b0;
		if (a->beta != 0)
			block_widen(j, off, n, buf, rows, cols);
		gemm_block(j, it, b0, b1, buf, cols);
		block_narrow(j, off, n, buf, rows, cols);
	}
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
	bool bf16 = ba->dtype == DTM_BF16 && bb->dtype == DTM_BF16 && dnnl_ok();
	int64_t need[4], na, nb, nc;
	rt_gemm_need(a, ba->dtype, bb->dtype, bc->dtype, bf16, need);
	rt_gemm_extent(a, &na, &nb, &nc);
	if (need[0] > s->na || need[1] > s->nb || need[2] > s->nc || need[3] > s->nblk ||
	    (need[3] && s->nslots < rt_pool_threads(pool))) {
		snprintf(err, RT_ERR_LEN, "gemm '%s': its staging was not reserved (internal error)",
			 a->label ? a->label : "?");
		return -1;
	}
	const float *A = bf16 ? NULL : stage_in(ptrs[a->args[0]], ba->dtype, s->a, na, pool);
	const float *B = bf16 ? NULL : stage_in(ptrs[a->args[1]], bb->dtype, s->b, nb, pool);
	int64_t batch = a->batch > 1 ? a->batch : 1;
	/* C: written in place (f32); else staged a block at a time, except
	 * where every item accumulates into the same C (all of it, narrowed
	 * after the last) */
	float *C = NULL;
	if (bc->dtype == DTM_F32)
		C = ptrs[a->args[2]];
	else if (need[2])
		C = a->beta != 0 ? (float *)stage_in(ptrs[a->args[2]], bc->dtype, s->c, nc, pool) : s->c;
	/* one thread whoever set it otherwise (bench/gemm_bench compares
	 * with BLAS's own threads) */
	rt_blas_set_threads(1);
	struct gemm_job j = { a, A, B, bf16 ? ptrs[a->args[0]] : NULL,
			      bf16 ? ptrs[a->args[1]] : NULL, C, ptrs[a->args[2]], bc->dtype,
			      s->blk, s->nblk, 0, 0, { 0 }, 0 };
	rt_gemm_split(a->m, a->n, a->k, &j.sp);
	int64_t block_flops = 2 * (j.sp.rows ? j.sp.ext * a->n : a->m * j.sp.ext) * a->k;
	int64_t grain = block_flops > 0 ? (RT_GEMM_RANGE_FLOPS + block_flops - 1) / block_flops : 1;
	if (batch > 1 && a->stride_c == 0) {
		/* every item writes the same C (beta accumulates): items in
		 * order, the blocks of each in parallel */
		for (j.item0 = 0; j.item0 < batch; j.item0++)
			rt_parallel_for(pool, j.sp.nblocks, grain, gemm_range, &j);
	} else {
		rt_parallel_for(pool, batch * j.sp.nblocks, grain, gemm_range, &j);
	}
	if (atomic_load(&j.failed)) {
		snprintf(err, RT_ERR_LEN, "gemm '%s': oneDNN's GEMM failed (%lld x %lld x %lld)",
			 a->label ? a->label : "?", (long long)a->m, (long long)a->n, (long long)a->k);
		return -1;
	}
	if (need[2]) {
		struct widen_job w = { NULL, bc->dtype, C, ptrs[a->args[2]] };
		rt_parallel_for(pool, nc, 1 << 15, narrow_range, &w);
	}
	return 0;
}

/* ---- --calibrate-gemm: the GEMM curve dtmc calibrate reads ----
 *
 * Shapes from skinny to square, m (rows of C) 1 to 2048, n 64 to 4096, k
 * 4 to 1024: what data, tensor and sequence parallelism and micro-batches
 * cut a transformer's GEMMs into, down to micro-batches of a row or two
 * (m that small in the forward, k in the weight gradients), where a
 * GEMM runs at a fraction of the large ones' rate.  Each is timed on
 * rt_cpu_gemm with the rank's pool (its threads), call by call for about
 * RT_CAL_SHAPE_S (at least RT_CAL_CALLS calls) after one untimed call, and
 * its rate is the median call's, the faster of two passes over the grid:
 * on a shared VM a slow spell of a few milliseconds moved the mean of a
 * shape by up to 2x between two runs, and one of a second halved the
 * rate of every shape timed in it.
 * Every rank runs the grid at the same time, so the cores are as busy as
 * in training.  Where oneDNN runs bf16 GEMMs, the grid is timed again on
 * bf16 operands and result (`gemm_bf16` lines). */
#define RT_CAL_SHAPE_S 0.03
#define RT_CAL_CALLS 3
#define RT_CAL_MAX_CALLS 4096

/* The rate a GEMM reads operands that are not in cache at (`l2_size`,
 * `gemm_cold_bw`): the shapes of a micro-batch of one row, whose GEMMs
 * read or update a whole weight for a few hundred FLOPs per kilobyte,
 * each call on another copy of its large operand, copies enough that the
 * others fill the rank's L2s four times over between two uses of one (as
 * the rest of a step's weights and gradients pass through between a
 * weight's uses):  C[1, 1024] = A[1, 256] B[256, 1024] (B read, 1 MiB)
 * and C[256, 1024] += A[256, 1] B[1, 1024] (a weight gradient's
 * accumulation: C read and written).  The large operands' bytes over the
 * two shapes' median calls' seconds: the whole calls', though the cost
 * model adds the cold bytes at this rate to a GEMM's grid time.  Less the
 * same calls' time on one copy in cache it came out 58-64 GB/s, not
 * 21-25, on the Intel VM of bench/README.md, and the MLP's 1-row
 * micro-batches then measured 1.18x their price and a bf16 pipeline 1.17x
 * (0.93x and 1.15x this way): in a step the fetch costs more than here.  *l2 is 0
 * (and nothing measured) where the system does not say its L2's size. */
#define RT_COLD_CALLS 48
static int cold_rate(RtPool *pool, RtGemmScratch *sc, double *call, double *l2, double *rate,
		     char *err)
{
	long c2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
	*l2 = 0;
	*rate = 0;
	if (c2 <= 0)
		return 0;
	const int64_t big = 256 * 1024; /* floats: 1 MiB */
	int threads = rt_pool_threads(pool);
	int64_t copies = 4 * (int64_t)c2 * threads / (big * (int64_t)sizeof(float)) + 2;
	copies = copies > 256 ? 256 : copies;
	float *w = malloc(sizeof(float) * (size_t)(copies * big));
	float *small = calloc(3072, sizeof(float)); /* A; B or C: the small ones */
	if (!w || !small) {
		free(w);
		free(small);
		snprintf(err, RT_ERR_LEN, "out of memory for --calibrate-gemm");
		return -1;
	}
	for (int64_t i = 0; i < copies * big; i++)
		w[i] = (float)(i % 13) * 0.01f;
	DtmAction g[2] = {
		{.kind = DTM_ACT_GEMM, .nargs = 3, .args = {0, 1, 2}, .m = 1, .n = 1024, .k = 256,
		 .batch = 1, .alpha = 1, .beta = 0, .label = "calibrate cold"},
		{.kind = DTM_ACT_GEMM, .nargs = 3, .args = {0, 1, 2}, .m = 256, .n = 1024, .k = 1,
		 .batch = 1, .alpha = 1, .beta = 1, .label = "calibrate cold"}};
	DtmBuffer bufs[3] = {{.dtype = DTM_F32}, {.dtype = DTM_F32}, {.dtype = DTM_F32}};
	double sec = 0;
	int rc = 0;
	for (int q = 0; q < 2 && !rc; q++) {
		int big_arg = q == 0 ? 1 : 2; /* B, then C */
		void *ptrs[3] = {small, small + 1024, small + 2048};
		int reps = 0;
		for (int64_t c = 0; c < RT_COLD_CALLS + copies && !rc; c++) {
			ptrs[big_arg] = w + (c % copies) * big;
			double t0 = rt_now();
			rc = rt_cpu_gemm(&g[q], bufs, ptrs, sc, pool, err);
			if (c >= copies) /* every copy used once before */
				call[reps++] = rt_now() - t0;
		}
		sec += rc ? 0 : rt_median(call, reps);
	}
	free(w);
	free(small);
	if (!rc && sec > 0) {
		*l2 = (double)c2;
		*rate = 2.0 * (double)big * sizeof(float) / sec;
	}
	return rc;
}

int rt_calibrate_gemm(RtPool *pool, char **text, size_t *textlen, char *err)
{
	static const int64_t ms[] = {1, 8, 32, 128, 512, 2048}, ns[] = {64, 256, 1024, 4096},
	                     ks[] = {4, 64, 256, 1024};
	enum { NSHAPE = 6 * 4 * 4 };
	const int64_t maxe = 2048 * 4096;
	/* bf16 x bf16 -> bf16 as well where oneDNN takes them (`gemm_bf16`) */
	int ndt = dnnl_ok() ? 2 : 1;
	float *buf = calloc((size_t)(3 * maxe), sizeof(float));
	uint16_t *hbuf = ndt > 1 ? calloc((size_t)(3 * maxe), sizeof(uint16_t)) : NULL;
	double *call = malloc(RT_CAL_MAX_CALLS * sizeof(double)); /* each call's seconds */
	if (!buf || !call || (ndt > 1 && !hbuf)) {
		free(buf);
		free(hbuf);
		free(call);
		snprintf(err, RT_ERR_LEN, "out of memory for --calibrate-gemm");
		return -1;
	}
	for (int64_t i = 0; i < 3 * maxe; i++) {
		buf[i] = (float)((i * 7919) % 17) * 0.01f;
		if (hbuf)
			hbuf[i] = bf16_from_f32(buf[i]);
	}
	RtGemmScratch sc = {0};
	DtmAction g[NSHAPE];
	double rate[2][NSHAPE] = {{0}};
	int n = 0, rc = 0;
	for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
		for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
			for (size_t c = 0; c < sizeof ks / sizeof *ks; c++)
				g[n++] = (DtmAction){.kind = DTM_ACT_GEMM, .nargs = 3, .args = {0, 1, 2},
				                     .m = ms[a], .n = ns[b], .k = ks[c], .batch = 1,
				                     .alpha = 1, .beta = 0, .label = "calibrate"};
	for (int dt = 0; dt < ndt && !rc; dt++) {
		DtmDtype t = dt ? DTM_BF16 : DTM_F32;
		DtmBuffer bufs[3] = {{.dtype = t}, {.dtype = t}, {.dtype = t}};
		void *ptrs[3] = {buf, buf + maxe, buf + 2 * maxe};
		if (dt) {
			ptrs[0] = hbuf, ptrs[1] = hbuf + maxe, ptrs[2] = hbuf + 2 * maxe;
			/* the grid's staging, as rt_gemm_reserve sizes a plan's */
			int64_t need[4] = {0};
			for (int q = 0; q < n; q++) {
				int64_t e[4];
				rt_gemm_need(&g[q], t, t, t, dnnl_ok(), e);
				for (int k = 0; k < 4; k++)
					need[k] = e[k] > need[k] ? e[k] : need[k];
			}
			rc = rt_gemm_alloc(&sc, need, rt_pool_threads(pool), err);
			if (rc)
				break;
		}
		/* two passes, the second in reverse, each shape's faster kept: a
		 * VM's core taken away for a second slowed a run of shapes by half */
		for (int pass = 0; pass < 2 && !rc; pass++)
			for (int q = 0; q < n && !rc; q++) {
				int j = pass ? n - 1 - q : q;
				rc = rt_cpu_gemm(&g[j], bufs, ptrs, &sc, pool, err);
				double t0 = rt_now();
				int reps = 0;
				do {
					double t1 = rt_now();
					rc = rc ? rc : rt_cpu_gemm(&g[j], bufs, ptrs, &sc, pool, err);
					call[reps++] = rt_now() - t1;
				} while (!rc && reps < RT_CAL_MAX_CALLS &&
				         (reps < RT_CAL_CALLS || rt_now() - t0 < RT_CAL_SHAPE_S));
				double r = 2.0 * g[j].m * g[j].n * g[j].k / rt_median(call, reps);
				rate[dt][j] = r > rate[dt][j] ? r : rate[dt][j];
			}
	}
	double l2 = 0, cold = 0;
	if (!rc)
		rc = cold_rate(pool, &sc, call, &l2, &cold, err);
	rt_gemm_scratch_free(&sc);
	free(buf);
	free(hbuf);
	free(call);
	if (rc || !text)
		return rc;
	size_t cap = (size_t)(ndt * n) * 96 + 128, len = 0;
	char *out = malloc(cap);
	if (!out) {
		snprintf(err, RT_ERR_LEN, "out of memory for --calibrate-gemm");
		return -1;
	}
	for (int dt = 0; dt < ndt; dt++)
		for (int j = 0; j < n; j++)
			len += (size_t)snprintf(out + len, cap - len, "%s %d %lld %lld %lld = %.6g\n",
			                        dt ? "gemm_bf16" : "gemm", rt_pool_threads(pool),
			                        (long long)g[j].m, (long long)g[j].n,
			                        (long long)g[j].k, rate[dt][j]);
	if (cold > 0)
		len += (size_t)snprintf(out + len, cap - len, "l2_size = %.0f\ngemm_cold_bw %d = %.6g\n",
		                        l2, rt_pool_threads(pool), cold);
	*text = out;
	*textlen = len;
	return 0;
}
