/* gemm_bench.c - dtm's GEMM path (rt_cpu_gemm: the runtime's GEMM action
 * with its thread pool and batch splitting) against plain OpenBLAS
 * cblas_sgemm and, where dtm was built with oneDNN, plain dnnl_sgemm on the
 * same shapes, in GFLOP/s; `best` is the faster library per shape (the
 * sgemm bound bench/peers.sh uses).
 *
 *   gemm_bench [--threads N] [--min-ms MS] [--gpt B,T,D,FFN,V,H] [SHAPE ...]
 *
 * SHAPE is LABEL=MxNxK[xBATCH][:tn|nt|tt] (row-major, op(A) [M,K], op(B)
 * [K,N]; t transposes that operand).  --gpt adds every GEMM one training
 * step of the GPT in models/gpt.dtm runs (forward and both backward GEMMs
 * of each linear layer, the tied LM head, attention's two batched
 * products), B batch, T sequence, D model dim, FFN hidden, V vocab, H heads.
 * Without shapes it runs the models/gpt.dtm default and a GPT-2-small layer.
 *
 * The references are what a caller of the library would do: one
 * cblas_sgemm (dnnl_sgemm) per batch item with OpenBLAS (oneDNN's OpenMP)
 * using N threads.  Each side is timed for at
 * least --min-ms after a warm-up call; the best of 3 such runs is kept.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/rt.h"

#ifdef DTM_HAVE_DNNL
int dnnl_sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
	       const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
	       int64_t ldc);
void omp_set_num_threads(int n);
#endif

typedef struct Shape {
	char label[80];
	int64_t m, n, k, batch;
	bool ta, tb;
} Shape;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_shape(const char *s, Shape *out)
{
	memset(out, 0, sizeof *out);
	const char *eq = strchr(s, '=');
	const char *dims = eq ? eq + 1 : s;
	snprintf(out->label, sizeof out->label, "%.*s", eq ? (int)(eq - s) : 0, s);
	long long m, n, k, b = 1;
	char tr[3] = "nn";
	int got = sscanf(dims, "%lldx%lldx%lldx%lld", &m, &n, &k, &b);
	if (got < 3 || m < 1 || n < 1 || k < 1 || b < 1)
		return -1;
	const char *c = strchr(dims, ':');
	if (c) {
		if (strlen(c + 1) != 2)
			return -1;
		memcpy(tr, c + 1, 2);
	}
	out->m = m, out->n = n, out->k = k, out->batch = b;
	out->ta = tr[0] == 't';
	out->tb = tr[1] == 't';
	if (!out->label[0])
		snprintf(out->label, sizeof out->label, "%.20lldx%.20lldx%.20lld", m % 1000000000LL,
			 n % 1000000000LL, k % 1000000000LL);
	return 0;
}

static int add(Shape *v, int n, int max, const char *label, int64_t m, int64_t nn, int64_t k,
	       int64_t batch, bool ta, bool tb)
{
	if (n >= max)
		return n;
	Shape *s = &v[n];
	snprintf(s->label, sizeof s->label, "%s", label);
	s->m = m, s->n = nn, s->k = k, s->batch = batch, s->ta = ta, s->tb = tb;
	return n + 1;
}

/* The GEMMs of one GPT training step (per layer for the blocks). */
static int gpt_shapes(Shape *v, int n, int max, const char *tag, int64_t B, int64_t T, int64_t D,
		      int64_t F, int64_t V, int64_t H)
{
	int64_t BT = B * T, hd = D / H;
	char l[48];
	struct {
		const char *name;
		int64_t in, out;
	} lin[] = { { "qkv/o", D, D }, { "fc", D, F }, { "proj", F, D } };
	for (int i = 0; i < 3; i++) {
		snprintf(l, sizeof l, "%s %s fwd", tag, lin[i].name);
		n = add(v, n, max, l, BT, lin[i].out, lin[i].in, 1, false, false);
		snprintf(l, sizeof l, "%s %s dX", tag, lin[i].name);
		n = add(v, n, max, l, BT, lin[i].in, lin[i].out, 1, false, true);
		snprintf(l, sizeof l, "%s %s dW", tag, lin[i].name);
		n = add(v, n, max, l, lin[i].in, lin[i].out, BT, 1, true, false);
	}
	snprintf(l, sizeof l, "%s lm_head fwd", tag);
	n = add(v, n, max, l, BT, V, D, 1, false, true);
	snprintf(l, sizeof l, "%s lm_head dX", tag);
	n = add(v, n, max, l, BT, D, V, 1, false, false);
	snprintf(l, sizeof l, "%s lm_head dW", tag);
	n = add(v, n, max, l, V, D, BT, 1, true, false);
	snprintf(l, sizeof l, "%s attn qk", tag);
	n = add(v, n, max, l, T, T, hd, B * H, false, true);
	snprintf(l, sizeof l, "%s attn pv", tag);
	n = add(v, n, max, l, T, hd, T, B * H, false, false);
	return n;
}

typedef struct Bench {
	Shape s;
	float *A, *B, *C;
	DtmBuffer bufs[3];
	void *ptrs[3];
	DtmAction act;
	RtPool *pool;
	RtGemmScratch scratch;
	int nthreads;
} Bench;

static void run_dtm(Bench *b)
{
	char err[RT_ERR_LEN];
	if (rt_cpu_gemm(&b->act, b->bufs, b->ptrs, &b->scratch, b->pool, err)) {
		fprintf(stderr, "gemm_bench: %s\n", err);
		exit(1);
	}
}

static void run_blas(Bench *b)
{
	const Shape *s = &b->s;
	int lda = (int)(s->ta ? s->m : s->k), ldb = (int)(s->tb ? s->k : s->n), ldc = (int)s->n;
	for (int64_t i = 0; i < s->batch; i++)
		cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
			    s->tb ? CblasTrans : CblasNoTrans, (int)s->m, (int)s->n, (int)s->k, 1.0f,
			    b->A + i * s->m * s->k, lda, b->B + i * s->k * s->n, ldb, 0.0f,
			    b->C + i * s->m * s->n, ldc);
}

#ifdef DTM_HAVE_DNNL
static void run_dnnl(Bench *b)
{
	const Shape *s = &b->s;
	int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
	omp_set_num_threads(b->nthreads);
	for (int64_t i = 0; i < s->batch; i++)
		dnnl_sgemm(s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->m, s->n, s->k, 1.0f,
			   b->A + i * s->m * s->k, lda, b->B + i * s->k * s->n, ldb, 0.0f,
			   b->C + i * s->m * s->n, s->n);
}
#endif

/* Best GFLOP/s of 3 runs of at least min_s seconds each. */
static double rate(Bench *b, void (*fn)(Bench *), double min_s)
{
	double flops = 2.0 * (double)b->s.m * (double)b->s.n * (double)b->s.k * (double)b->s.batch;
	double best = 0;
	rt_blas_set_threads(b->nthreads);
	fn(b);
	for (int r = 0; r < 3; r++) {
		int64_t iters = 0;
		double t0 = now(), t;
		do {
			fn(b);
			iters++;
			t = now() - t0;
		} while (t < min_s);
		double g = flops * (double)iters / t / 1e9;
		if (g > best)
			best = g;
	}
	return best;
}

static float *rand_buf(int64_t n)
{
	float *p = malloc((size_t)n * sizeof(float));
	if (!p) {
		fprintf(stderr, "gemm_bench: out of memory\n");
		exit(1);
	}
	uint32_t x = 12345;
	for (int64_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
	}
	return p;
}

static void usage(void)
{
	fprintf(stderr, "usage: gemm_bench [--threads N] [--min-ms MS] [--gpt B,T,D,FFN,V,H] "
			"[LABEL=MxNxK[xBATCH][:tn|nt|tt] ...]\n");
}

int main(int argc, char **argv)
{
	enum { MAXS = 64 };
	Shape shapes[MAXS];
	int ns = 0, nthreads = 1;
	double min_ms = 200;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
			nthreads = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--min-ms") && i + 1 < argc) {
			min_ms = atof(argv[++i]);
		} else if (!strcmp(argv[i], "--gpt") && i + 1 < argc) {
			long long B, T, D, F, V, H;
			if (sscanf(argv[++i], "%lld,%lld,%lld,%lld,%lld,%lld", &B, &T, &D, &F, &V,
				   &H) != 6 || B < 1 || T < 1 || D < 1 || F < 1 || V < 1 || H < 1 ||
			    D % H) {
				usage();
				return 2;
			}
			char tag[24];
			snprintf(tag, sizeof tag, "d%lld", D);
			ns = gpt_shapes(shapes, ns, MAXS, tag, B, T, D, F, V, H);
		} else if (argv[i][0] != '-' && ns < MAXS && parse_shape(argv[i], &shapes[ns]) == 0) {
			ns++;
		} else {
			usage();
			return 2;
		}
	}
	if (nthreads < 1)
		nthreads = 1;
	if (ns == 0) {
		ns = gpt_shapes(shapes, ns, MAXS, "gpt.dtm", 8, 32, 64, 256, 256, 4);
		ns = gpt_shapes(shapes, ns, MAXS, "gpt2-small", 4, 256, 768, 3072, 50257, 12);
	}
	RtPool *pool = rt_pool_new(nthreads);
	printf("gemm_bench: %d threads, BLAS %s; GFLOP/s, best of 3 runs of >= %.0f ms\n",
	       rt_pool_threads(pool), rt_blas_name(), min_ms);
	printf("%-24s %6s %6s %6s %5s %2s %10s %10s %10s %10s %8s\n", "gemm", "M", "N", "K",
	       "batch", "op", "dtm", "sgemm", "onednn", "best", "dtm/best");
	double tot_flops = 0, tot_dtm = 0, tot_blas = 0, tot_dnnl = 0, tot_best = 0;
	for (int i = 0; i < ns; i++) {
		Bench b = { .s = shapes[i], .pool = pool, .nthreads = nthreads };
		const Shape *s = &b.s;
		b.A = rand_buf(s->m * s->k * s->batch);
		b.B = rand_buf(s->k * s->n * s->batch);
		b.C = rand_buf(s->m * s->n * s->batch);
		int64_t dims[3][2] = { { s->ta ? s->k : s->m, s->ta ? s->m : s->k },
				       { s->tb ? s->n : s->k, s->tb ? s->k : s->n },
				       { s->m, s->n } };
		for (int j = 0; j < 3; j++) {
			DtmBuffer *d = &b.bufs[j];
			d->role = DTM_ROLE_ACT;
			d->dtype = DTM_F32;
			d->rank = 3;
			d->shape[0] = d->global_shape[0] = s->batch;
			d->shape[1] = d->global_shape[1] = dims[j][0];
			d->shape[2] = d->global_shape[2] = dims[j][1];
		}
		b.ptrs[0] = b.A, b.ptrs[1] = b.B, b.ptrs[2] = b.C;
		b.act = (DtmAction){ .kind = DTM_ACT_GEMM, .label = s->label, .nargs = 3,
				     .args = { 0, 1, 2 }, .m = s->m, .n = s->n, .k = s->k,
				     .batch = s->batch, .stride_a = s->m * s->k,
				     .stride_b = s->k * s->n, .stride_c = s->m * s->n,
				     .trans_a = s->ta, .trans_b = s->tb, .alpha = 1, .beta = 0 };
		double gd = rate(&b, run_dtm, min_ms / 1e3);
		double gb = rate(&b, run_blas, min_ms / 1e3), go = 0;
#ifdef DTM_HAVE_DNNL
		go = rate(&b, run_dnnl, min_ms / 1e3);
#endif
		double best = go > gb ? go : gb;
		double fl = 2.0 * (double)s->m * (double)s->n * (double)s->k * (double)s->batch;
		tot_flops += fl;
		tot_dtm += fl / (gd * 1e9);
		tot_blas += fl / (gb * 1e9);
		tot_dnnl += go > 0 ? fl / (go * 1e9) : 0;
		tot_best += fl / (best * 1e9);
		printf("%-24s %6lld %6lld %6lld %5lld %c%c %10.2f %10.2f %10.2f %10.2f %7.0f%%\n",
		       s->label, (long long)s->m, (long long)s->n, (long long)s->k,
		       (long long)s->batch, s->ta ? 't' : 'n', s->tb ? 't' : 'n', gd, gb, go, best,
		       100 * gd / best);
		fflush(stdout);
		free(b.A);
		free(b.B);
		free(b.C);
	}
	if (ns > 0)
		printf("%-24s %33s %10.2f %10.2f %10.2f %10.2f %7.0f%%\n", "all (time-weighted)", "",
		       tot_flops / tot_dtm / 1e9, tot_flops / tot_blas / 1e9,
		       tot_dnnl > 0 ? tot_flops / tot_dnnl / 1e9 : 0, tot_flops / tot_best / 1e9,
		       100 * tot_best / tot_dtm);
	rt_pool_free(pool);
	return 0;
}
