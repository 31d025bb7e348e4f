/* attn_bench.c - the CPU attention kernels the generated code calls
 * (codegen/cpu: dtmk_attention, dtmk_attention_bwd) on the runtime's
 * thread pool, ms per call and GFLOP/s, forward and forward + backward
 * (issue 17 point 5; bench/attn_torch.py times PyTorch on the same shapes).
 *
 *   attn_bench [--threads N] [--min-ms MS] [--no-causal] [--bf16] [--no-lse]
 *              [B,H,T,HD[,KVH] ...]
 *
 * Each shape is q [B, T, H*HD], k and v [B, T, KVH*HD] (the layout dtm
 * keeps: heads packed in the last dim), f32 (bf16 with --bf16: the
 * AVX512-BF16 products where the CPU has them), causal unless --no-causal;
 * KVH defaults to H.  Default shapes: 2,8,512,64 and 2,8,2048,64.
 * The FLOPs counted are the nominal ones of the two products (QK^T and
 * PV: 4 * B * H * HD * pairs, pairs = T(T+1)/2 causal, T^2 otherwise) for
 * the forward and 2.5x that for the backward (dQ, dK, dV, dP and the
 * recomputed scores are counted as FlashAttention's paper does: 3.5x in
 * all for forward + backward), the same convention attn_torch.py uses.
 * Each side is timed for at least --min-ms after a warm-up call; the best
 * of 3 such runs is kept.  The backward is given the forward's output and
 * log-sum-exps (attn.lse, as pass attn_stats pairs them in training: the
 * kernel then tiles the keys) unless --no-lse (a backward without them:
 * the kernel runs the forward again for them, its time included).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/cpu/dtmk_fwd.h"
#include "codegen/cpu/dtmk_bwd.h"
#include "runtime/rt.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool bf16; /* --bf16: the tensors' values rounded, stored as bf16 */

/* t over p (n elements of f32 values; with --bf16 rewritten in place as
 * the bf16 values, in p's first half). */
static void tensor(DtmkTensor *t, float *p, int64_t b, int64_t tt, int64_t d)
{
	memset(t, 0, sizeof *t);
	t->p = p;
	t->dtype = bf16 ? DTM_BF16 : DTM_F32;
	t->rank = 3;
	t->shape[0] = b, t->shape[1] = tt, t->shape[2] = d;
	t->numel = b * tt * d;
	if (bf16) {
		uint16_t *h = (uint16_t *)p;
		for (int64_t i = 0; i < t->numel; i++) /* in order: h[i] lies below p[i] */
			h[i] = dtmk_f32_to_bf16(p[i]);
	}
}

/* Element i of a tensor's values (f32 or bf16). */
static double val(const DtmkTensor *t, int64_t i)
{
	return dtmk_load(t, i);
}

static float *randn(int64_t n, uint32_t seed)
{
	float *p = malloc(sizeof(float) * (size_t)n);
	if (!p) {
		fprintf(stderr, "attn_bench: out of memory\n");
		exit(1);
	}
	for (int64_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = (float)(seed >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
	}
	return p;
}

/* Best of 3 runs of >= min_ms: seconds per call of fwd (and bwd when
 * given). */
static double timeit(const DtmCtx *c, const DtmkArgs *fa, const DtmkArgs *ba, double min_ms)
{
	dtmk_attention(c, fa);
	if (ba)
		dtmk_attention_bwd(c, ba);
	double best = 1e30;
	for (int r = 0; r < 3; r++) {
		int n = 0;
		double t0 = now(), t;
		do {
			dtmk_attention(c, fa);
			if (ba)
				dtmk_attention_bwd(c, ba);
			n++;
			t = now() - t0;
		} while (t * 1e3 < min_ms);
		if (t / n < best)
			best = t / n;
	}
	return best;
}

/* The forward on a small shape against a naive softmax(QK^T/sqrt(hd)) V,
 * so a wrong argument set-up shows before anything is timed; returns the
 * largest absolute difference. */
static double self_check(const DtmCtx *c, int causal)
{
	enum { B = 2, H = 4, G = 2, T = 37, HD = 64 };
	float *q = randn(B * T * H * HD, 5), *k = randn(B * T * G * HD, 6);
	float *v = randn(B * T * G * HD, 7), *y = calloc(B * T * H * HD, sizeof(float));
	DtmkArgs fa = { .nin = 3, .nints = 4, .ints = { H, causal, G, 0 } };
	tensor(&fa.in[0], q, B, T, H * HD);
	tensor(&fa.in[1], k, B, T, G * HD);
	tensor(&fa.in[2], v, B, T, G * HD);
	tensor(&fa.out, y, B, T, H * HD);
	dtmk_attention(c, &fa);
	const DtmkTensor *Q = &fa.in[0], *K = &fa.in[1], *V = &fa.in[2];
	double err = 0;
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			for (int i = 0; i < T; i++) {
				double s[T], mx = -1e300, sum = 0;
				int n = causal ? i + 1 : T, g = h / (H / G);
				for (int j = 0; j < n; j++) {
					s[j] = 0;
					for (int d = 0; d < HD; d++)
						s[j] += val(Q, (b * T + i) * H * HD + h * HD + d) *
							val(K, (b * T + j) * G * HD + g * HD + d);
					s[j] /= sqrt((double)HD);
					mx = s[j] > mx ? s[j] : mx;
				}
				for (int j = 0; j < n; j++)
					sum += s[j] = exp(s[j] - mx);
				for (int d = 0; d < HD; d++) {
					double o = 0;
					for (int j = 0; j < n; j++)
						o += s[j] / sum * val(V, (b * T + j) * G * HD + g * HD + d);
					double e = fabs(o - val(&fa.out, (b * T + i) * H * HD + h * HD + d));
					err = e > err ? e : err;
				}
			}
	free(q), free(k), free(v), free(y);
	return err;
}

int main(int argc, char **argv)
{
	int nthreads = 1, causal = 1, lse = 1;
	double min_ms = 300;
	int64_t shapes[16][5];
	int ns = 0;
	for (int i = 1; i < argc; i++) {
		long long b, h, t, hd, kvh = 0;
		if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
			nthreads = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--min-ms") && i + 1 < argc) {
			min_ms = atof(argv[++i]);
		} else if (!strcmp(argv[i], "--bf16")) {
			bf16 = true;
		} else if (!strcmp(argv[i], "--no-causal")) {
			causal = 0;
		} else if (!strcmp(argv[i], "--no-lse")) {
			lse = 0;
		} else if (ns < 16 && sscanf(argv[i], "%lld,%lld,%lld,%lld,%lld", &b, &h, &t, &hd,
					   &kvh) >= 4 && b > 0 && h > 0 && t > 0 && hd > 0 &&
			   kvh >= 0 && (kvh == 0 || h % kvh == 0)) {
			int64_t *s = shapes[ns++];
			s[0] = b, s[1] = h, s[2] = t, s[3] = hd, s[4] = kvh ? kvh : h;
		} else {
			fprintf(stderr, "usage: attn_bench [--threads N] [--min-ms MS] "
					"[--no-causal] [--bf16] [--no-lse] [B,H,T,HD[,KVH] ...]\n");
			return 2;
		}
	}
	if (!ns) {
		int64_t def[2][5] = {{2, 8, 512, 64, 8}, {2, 8, 2048, 64, 8}};
		memcpy(shapes, def, sizeof def);
		ns = 2;
	}
	if (nthreads < 1)
		nthreads = 1;
	RtPool *pool = rt_pool_new(nthreads);
	DtmCtx c = { .step = 1, .nthreads = rt_pool_threads(pool),
		     .parallel_for = rt_ctx_parallel_for, .pool = pool };
	printf("attn_bench: dtm's CPU kernels, %d threads, %s, %s, %s; best of 3 runs of >= %.0f "
	       "ms\n", c.nthreads, bf16 ? "bf16" : "f32", causal ? "causal" : "not causal",
	       lse ? "backward given the log-sum-exps" : "backward running the forward again",
	       min_ms);
	double err = self_check(&c, causal);
	printf("self-check (2,4,37,64,2 against a naive f64 forward): max |diff| %.2g\n", err);
	/* bf16: the output's rounding (2^-9 of values under 1) and the
	 * probabilities' */
	if (!(err < (bf16 ? 1e-2 : 1e-4))) {
		fprintf(stderr, "attn_bench: the kernel disagrees with the reference\n");
		return 1;
	}
	printf("%-22s %10s %9s %10s %9s\n", "B,H,T,hd,kvH", "fwd_ms", "fwd_GF/s", "fwdbwd_ms",
	       "fb_GF/s");
	for (int i = 0; i < ns; i++) {
		int64_t B = shapes[i][0], H = shapes[i][1], T = shapes[i][2], hd = shapes[i][3];
		int64_t G = shapes[i][4], S = B * T * H * hd, Skv = B * T * G * hd;
		float *q = randn(S, 1), *k = randn(Skv, 2), *v = randn(Skv, 3), *dy = randn(S, 4);
		/* the output, then its B H T log-sum-exps (attn.lse) */
		float *y = calloc((size_t)(S + B * H * T), sizeof(float));
		float *g = calloc((size_t)(3 * S), sizeof(float)); /* dq; dk, dv per query head */
		if (!y || !g) {
			fprintf(stderr, "attn_bench: out of memory\n");
			return 1;
		}
		DtmkArgs fa = { .nin = 3, .nints = lse ? 8 : 4,
				.ints = { H, causal, G, 0, 0, 0, 0, lse } };
		tensor(&fa.in[0], q, B, T, H * hd);
		tensor(&fa.in[1], k, B, T, G * hd);
		tensor(&fa.in[2], v, B, T, G * hd);
		tensor(&fa.out, y, B, T, H * hd);
		DtmkArgs ba = { .nin = lse ? 5 : 4, .nints = fa.nints, .ints = { H, causal, G, 0, 0, 0, 0,
										  lse } };
		tensor(&ba.in[0], dy, B, T, H * hd);
		ba.in[1] = fa.in[0], ba.in[2] = fa.in[1], ba.in[3] = fa.in[2], ba.in[4] = fa.out;
		tensor(&ba.out, g, 3 * B, T, H * hd);
		double pairs = causal ? (double)T * (double)(T + 1) / 2 : (double)T * (double)T;
		double fl = 4.0 * (double)B * (double)H * (double)hd * pairs;
		double tf = timeit(&c, &fa, NULL, min_ms), tb = timeit(&c, &fa, &ba, min_ms);
		char lab[64];
		snprintf(lab, sizeof lab, "%lld,%lld,%lld,%lld,%lld", (long long)B, (long long)H,
			 (long long)T, (long long)hd, (long long)G);
		printf("%-22s %10.2f %9.1f %10.2f %9.1f\n", lab, tf * 1e3, fl / tf * 1e-9, tb * 1e3,
		       3.5 * fl / tb * 1e-9);
		free(q), free(k), free(v), free(dy), free(y), free(g);
	}
	rt_pool_free(pool);
	return 0;
}
