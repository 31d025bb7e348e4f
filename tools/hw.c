/* hw.c - built-in hardware profiles and the override-file parser.
 *
 * The GPU figures are NVIDIA's public datasheet numbers, per GPU, dense
 * (no 2:4 sparsity).  Two conventions matter for the cost model:
 *
 * - Link bandwidth is per device and per direction, because the ring
 *   formulas count the bytes one rank sends.  NVLink figures in datasheets
 *   (900 GB/s for NVLink 4) are the sum of both directions, so beta is half
 *   of them; InfiniBand NDR is 400 Gb/s = 50 GB/s per direction per NIC,
 *   one NIC per GPU in DGX/HGX systems.
 * - Latency is the alpha per ring step.  NCCL's own tuning model
 *   (src/graph/tuning.cc, hwLat) uses 0.5-3.4 us per NVLink ring step and
 *   5-14 us per network step depending on protocol; we take 2 us and 5 us
 *   (the latter is REFERENCE.md's alpha).
 * - all_to_all has its own bandwidth (HwLink.a2a_bw), nccl-tests' alltoall
 *   busbw (algbw x (n-1)/n).  Inside a node: NCCL's maintainer gives
 *   NVLink 4's 450 GB/s line rate as ~370 GB/s effective after ~20%
 *   protocol overhead, "which you can observe as BusBw when running
 *   non-allreduce operations" (github.com/NVIDIA/nccl-tests/issues/212);
 *   the ring figure above stays at line rate, as before.  Across nodes:
 *   "Alltoall cannot aggregate the bandwidth of multiple NICs, so the
 *   performance you should see is the performance of a single NIC", and
 *   a ConnectX-7 at NDR "should achieve up to 48-49GB/s per NIC"
 *   (nccl-tests/issues/267), so 48 GB/s.  That is the many-node figure:
 *   on N nodes 1/N of a rank's peers share its node, and nccl-tests
 *   reports N/(N-1) x the NIC (nccl-tests/issues/130); the model prices
 *   every byte of a node-spanning all_to_all at the NIC's rate, so two
 *   nodes come out up to 2x slow.  Figures for other GPUs scale these by
 *   their links (marked "assumed" where no measurement was found).
 *
 * `f32` peaks are the plain FP32 (CUDA core) rates, not TF32 tensor-core
 * rates: an f32 GEMM in dtm's runtime runs in full f32.
 *
 * Efficiencies (what the cost model multiplies the peaks by; a calibrated
 * profile measures its own instead):
 * - gemm_eff: the best dense BF16 matmul measured on the part over its
 *   peak ("Maximum Achievable Matmul FLOPS" table, Stas Bekman's
 *   ml-engineering, compute/accelerator/README.md, mamf-finder.py): A100
 *   SXM 267.9 of 312 TFLOP/s = 0.859 (CUDA 12.1), H100 SXM 792.1 of 989
 *   = 0.801 (CUDA 12.1); H200 as the H100 (the same SMs and clocks); B200
 *   not measured there: the H100's assumed.
 * - mem_eff: A100 80GB measured 1.80 of 2.04 TB/s = 0.88 with Nsight
 *   Compute (forums.developer.nvidia.com, "Trouble to reach peak
 *   bandwidth of A100", thread 339083); assumed for the others.
 * - the links stay at line rate: an A100 node's NCCL all_reduce bus
 *   bandwidth is ~200 GB/s of NVLink 3's 300 (nccl-tests issue 149) but
 *   192 GB/s per 8 HDR NICs = 24 of 25 across nodes (nccl issue 812), so
 *   link_eff (one factor for both) stays 1 and intra.bw/inter.bw carry
 *   the measured figures where there is one (the A100's below).
 * - kernel_overhead: 3 us per kernel, assumed (launch from C on a
 *   stream, no graph; NVIDIA quotes ~2-4 us launch latency).
 */
#include "tools/hw.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TFLOPS 1e12
#define GBPS 1e9
#define GB 1e9
#define US 1e-6

static const HwProfile builtins[] = {
        /* NVIDIA H100 SXM5 80GB (H100 Tensor Core GPU datasheet): FP32 67
	 * TFLOP/s; BF16 and FP16 tensor 1,979 TFLOP/s with sparsity = 989
	 * dense; 80 GB HBM3 at 3.35 TB/s; NVLink 4 900 GB/s (both directions);
	 * DGX H100: 8 GPUs per node, 8x ConnectX-7 400 Gb/s NDR. */
        {
                .name = "h100",
                .peak_flops = {[DTM_F32] = 67 * TFLOPS,
                               [DTM_BF16] = 989 * TFLOPS,
                               [DTM_F16] = 989 * TFLOPS,
                               [DTM_I32] = 67 * TFLOPS},
                .mem_bw = 3350 * GBPS,
                .mem_bytes = 80 * GB,
                .intra = {.bw = 450 * GBPS, .latency = 2 * US, .a2a_bw = 370 * GBPS},
                .inter = {.bw = 50 * GBPS, .latency = 5 * US, .a2a_bw = 48 * GBPS},
                .gemm_eff = 0.801,
                .mem_eff = 0.88,
                .kernel_s = 3 * US,
                .devices_per_node = 8,
        },
        /* NVIDIA H200 SXM (H200 datasheet): the H100's compute; 141 GB HBM3e at
	 * 4.8 TB/s; NVLink 4 900 GB/s; HGX H200: 8 GPUs, 400 Gb/s per GPU;
	 * all_to_all as the H100's (the same NVLink 4 and NICs). */
        {
                .name = "h200",
                .peak_flops = {[DTM_F32] = 67 * TFLOPS,
                               [DTM_BF16] = 989 * TFLOPS,
                               [DTM_F16] = 989 * TFLOPS,
                               [DTM_I32] = 67 * TFLOPS},
                .mem_bw = 4800 * GBPS,
                .mem_bytes = 141 * GB,
                .intra = {.bw = 450 * GBPS, .latency = 2 * US, .a2a_bw = 370 * GBPS},
                .inter = {.bw = 50 * GBPS, .latency = 5 * US, .a2a_bw = 48 * GBPS},
                .gemm_eff = 0.801,
                .mem_eff = 0.88,
                .kernel_s = 3 * US,
                .devices_per_node = 8,
        },
        /* NVIDIA A100 SXM4 80GB (A100 datasheet): FP32 19.5 TFLOP/s; BF16 and
	 * FP16 tensor 312 TFLOP/s dense; 80 GB HBM2e at 2,039 GB/s; NVLink 3
	 * 600 GB/s (both directions); DGX A100: 8 GPUs per node, 8x
	 * ConnectX-6 200 Gb/s HDR = 25 GB/s per GPU.  Links at what NCCL
	 * measures there: all_reduce bus bandwidth ~200 GB/s in a node
	 * (nccl-tests issue 149, 8x A100 80GB on NVSwitch), 192 GB/s over a
	 * DGX A100's 8 HDR NICs = 24 GB/s each (nccl issue 812, an NVIDIA
	 * engineer); all_to_all at the H100's fractions of those (370/450
	 * in a node, 48/50 across), assumed. */
        {
                .name = "a100",
                .peak_flops = {[DTM_F32] = 19.5 * TFLOPS,
                               [DTM_BF16] = 312 * TFLOPS,
                               [DTM_F16] = 312 * TFLOPS,
                               [DTM_I32] = 19.5 * TFLOPS},
                .mem_bw = 2039 * GBPS,
                .mem_bytes = 80 * GB,
                .intra = {.bw = 200 * GBPS, .latency = 2 * US, .a2a_bw = 164 * GBPS},
                .inter = {.bw = 24 * GBPS, .latency = 5 * US, .a2a_bw = 23 * GBPS},
                .gemm_eff = 0.859,
                .mem_eff = 0.88,
                .kernel_s = 3 * US,
                .devices_per_node = 8,
        },
        /* NVIDIA B200 (HGX B200 datasheet, per GPU): FP16/BF16 tensor 4.5
	 * PFLOP/s with sparsity = 2.25 dense; FP32 600 TFLOP/s per 8 GPUs =
	 * 75; 180 GB HBM3e at 8 TB/s; NVLink 5 1.8 TB/s (both directions);
	 * DGX B200: 8 GPUs, 8x ConnectX-7 400 Gb/s.  all_to_all: 370/450 of
	 * NVLink 5's 900 = 740 GB/s assumed; the H100's 48 GB/s per NIC
	 * (the same ConnectX-7). */
        {
                .name = "b200",
                .peak_flops = {[DTM_F32] = 75 * TFLOPS,
                               [DTM_BF16] = 2250 * TFLOPS,
                               [DTM_F16] = 2250 * TFLOPS,
                               [DTM_I32] = 75 * TFLOPS},
                .mem_bw = 8000 * GBPS,
                .mem_bytes = 180 * GB,
                .intra = {.bw = 900 * GBPS, .latency = 2 * US, .a2a_bw = 740 * GBPS},
                .inter = {.bw = 50 * GBPS, .latency = 5 * US, .a2a_bw = 48 * GBPS},
                .gemm_eff = 0.801,
                .mem_eff = 0.88,
                .kernel_s = 3 * US,
                .devices_per_node = 8,
        },
        /* The development machine class: a 2-vCPU KVM guest on AMD EPYC (Zen 4,
	 * AVX-512), 24 GB, ranks as threads (`local` backend).  One device is
	 * one core; run more ranks than cores and they time-share.
	 * - compute: OpenBLAS sgemm at 2 threads measured 196-199 GFLOP/s
	 *   (bench/README.md, GPT-2-small GEMMs) = ~100 per core (Zen 4: 2
	 *   256-bit FMA pipes x 8 f32 x 2 = 32 FLOP/cycle at ~3 GHz).  bf16 and
	 *   f16 at the f32 rate: the CPU runtime computes them in f32.
	 * - memory: one thread measured 12 GB/s memcpy (24 GB/s of traffic)
	 *   and 25-60 GB/s for a streaming scale loop over 256 MiB; under load
	 *   bench/README.md saw 5 GB/s memcpy.  24 GB/s per core.
	 * - intra-node: the `local` backend's all_reduce bus bandwidth,
	 *   0.7 GB/s at >= 16 MB (bench/README.md, 4 ranks on 2 cores); a 1 KB
	 *   all_reduce in 4.8 us over 6 ring steps gives ~1 us per step.
	 * - inter-node: not measured (one VM).  The `mpi` backend reached
	 *   0.17-0.94 GB/s bus bandwidth between processes of this host
	 *   (bench/README.md); across hosts 10 Gb/s Ethernet caps TCP at 1.25
	 *   GB/s and the reductions still run on the same cores: 0.5 GB/s and
	 *   50 us per step assumed.
	 * - all_to_all: the `local` backend's alltoall bus bandwidth, 0.63 -
	 *   0.77 GB/s from 4 to 64 MB in two runs (bench/README.md, 4 ranks
	 *   on 2 cores, Intel Xeon 2.60 GHz VM shared with other jobs), 1.2 -
	 *   1.3 at 256 MB: 0.7 GB/s.  Across hosts nothing was measured:
	 *   the ring's 0.5 GB/s assumed.
	 * - memory size: 24.7 GB of RAM shared by the 2 cores. */
        {
                .name = "cpu",
                .peak_flops = {[DTM_F32] = 100e9,
                               [DTM_BF16] = 100e9,
                               [DTM_F16] = 100e9,
                               [DTM_I32] = 100e9},
                .mem_bw = 24 * GBPS,
                .mem_bytes = 12.6 * GB,
                .intra = {.bw = 0.7 * GBPS, .latency = 1 * US, .a2a_bw = 0.7 * GBPS},
                .inter = {.bw = 0.5 * GBPS, .latency = 50 * US, .a2a_bw = 0.5 * GBPS},
                .devices_per_node = 2,
        },
};

#define NBUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

const HwProfile *hw_builtin(const char *name)
{
	if (!name)
		return NULL;
	for (int i = 0; i < NBUILTINS; i++)
		if (strcmp(builtins[i].name, name) == 0)
			return &builtins[i];
	return NULL;
}

int hw_builtin_count(void)
{
	return NBUILTINS;
}

const HwProfile *hw_builtin_at(int i)
{
	return i >= 0 && i < NBUILTINS ? &builtins[i] : NULL;
}

double hw_peak_flops(const HwProfile *hw, DtmDtype dtype)
{
	switch (dtype) {
	case DTM_BF16:
		return hw->peak_flops[DTM_BF16];
	case DTM_F16:
		return hw->peak_flops[DTM_F16];
	default:
		return hw->peak_flops[DTM_F32];
	}
}

/* ---- the override file ---- */

typedef enum KeyKind {
	KEY_BASE,
	KEY_NAME,
	KEY_FLOPS,
	KEY_BW,
	KEY_SIZE,
	KEY_TIME,
	KEY_COUNT,
	KEY_FRAC,   /* a fraction in (0, 1] */
	KEY_SHARE,  /* a share in [0, 1] */
	KEY_SOURCE, /* free text to the end of the line */
	/* tables: `key ARGS = value` */
	KEY_GEMM,   /* gemm THREADS M N K = FLOP/s; gemm_bf16 (off 1) */
	KEY_TSTREAM, /* stream_bw THREADS [BYTES] = B/s */
	KEY_TATTN,  /* attn_rate THREADS = FLOP/s, attn_bwd_rate */
	KEY_TKERN,  /* kernel_time THREADS = s */
	KEY_TBW,    /* gemm_cold_bw THREADS = B/s */
	KEY_KFACT,  /* kernel_factor THREADS CLASS = x; kernel_factor_bf16 (off 1) */
	KEY_COLL    /* coll KIND N = LATENCY, BW */
} KeyKind;

typedef struct Key {
	const char *name;
	KeyKind kind;
	size_t off; /* offset of the double or int field in HwProfile */
} Key;

static const Key keys[] = {
        {"base", KEY_BASE, 0},
        {"name", KEY_NAME, 0},
        {"peak_f32", KEY_FLOPS, offsetof(HwProfile, peak_flops) + DTM_F32 * sizeof(double)},
        {"peak_bf16", KEY_FLOPS, offsetof(HwProfile, peak_flops) + DTM_BF16 * sizeof(double)},
        {"peak_f16", KEY_FLOPS, offsetof(HwProfile, peak_flops) + DTM_F16 * sizeof(double)},
        {"mem_bw", KEY_BW, offsetof(HwProfile, mem_bw)},
        {"mem_size", KEY_SIZE, offsetof(HwProfile, mem_bytes)},
        {"intra_bw", KEY_BW, offsetof(HwProfile, intra.bw)},
        {"intra_latency", KEY_TIME, offsetof(HwProfile, intra.latency)},
        {"intra_a2a_bw", KEY_BW, offsetof(HwProfile, intra.a2a_bw)},
        {"inter_bw", KEY_BW, offsetof(HwProfile, inter.bw)},
        {"inter_latency", KEY_TIME, offsetof(HwProfile, inter.latency)},
        {"inter_a2a_bw", KEY_BW, offsetof(HwProfile, inter.a2a_bw)},
        {"gpus_per_node", KEY_COUNT, offsetof(HwProfile, devices_per_node)},
        {"devices_per_node", KEY_COUNT, offsetof(HwProfile, devices_per_node)},
        {"source", KEY_SOURCE, 0},
        {"gemm_eff", KEY_FRAC, offsetof(HwProfile, gemm_eff)},
        {"mem_eff", KEY_FRAC, offsetof(HwProfile, mem_eff)},
        {"link_eff", KEY_FRAC, offsetof(HwProfile, link_eff)},
        {"kernel_overhead", KEY_TIME, offsetof(HwProfile, kernel_s)},
        {"step_overhead", KEY_TIME, offsetof(HwProfile, step_s)},
        {"coll_overhead", KEY_TIME, offsetof(HwProfile, coll_s)},
        {"coll_byte_time", KEY_TIME, offsetof(HwProfile, coll_byte_s)},
        {"comm_blocking", KEY_SHARE, offsetof(HwProfile, comm_blocking)},
        {"feed_rate", KEY_FLOPS, offsetof(HwProfile, feed_rate)},
        {"feed_x_rate", KEY_FLOPS, offsetof(HwProfile, feed_x_rate)},
        {"cores", KEY_COUNT, offsetof(HwProfile, cores)},
        {"l2_size", KEY_SIZE, offsetof(HwProfile, l2_bytes)},
        {"gemm", KEY_GEMM, 0},
        {"gemm_bf16", KEY_GEMM, 1},
        {"stream_bw", KEY_TSTREAM, 0},
        {"attn_rate", KEY_TATTN, offsetof(HwProfile, attn_rate)},
        {"attn_bwd_rate", KEY_TATTN, offsetof(HwProfile, attn_bwd_rate)},
        {"attn_bf16_rate", KEY_TATTN, offsetof(HwProfile, attn_bf16_rate)},
        {"attn_bf16_bwd_rate", KEY_TATTN, offsetof(HwProfile, attn_bf16_bwd_rate)},
        {"kernel_time", KEY_TKERN, offsetof(HwProfile, kernel_t)},
        {"gemm_cold_bw", KEY_TBW, offsetof(HwProfile, gemm_cold_bw)},
        {"coll", KEY_COLL, 0},
        {"kernel_factor", KEY_KFACT, 0},
        {"kernel_factor_bf16", KEY_KFACT, 1},
};

#define NKEYS ((int)(sizeof keys / sizeof keys[0]))
/* Beyond this many, errors are counted but not printed. */
#define HW_MAX_PRINTED_ERRORS 20
#define HW_MAX_FILE_BYTES (1 << 20)
#define HW_MAX_DEVICES_PER_NODE (1 << 20)

typedef struct Parser {
	const char *fname;
	FILE *err;
	int nerr;
	int line;
} Parser;

/* Writes s[0..n) for a message: printable ASCII as is, other bytes as
 * \xNN, at most 40 bytes then "...". */
static void put_token(FILE *out, const char *s, size_t n)
{
	size_t lim = n > 40 ? 40 : n;
	for (size_t i = 0; i < lim; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f)
			fputc(c, out);
		else
			fprintf(out, "\\x%02x", c);
	}
	if (n > lim)
		fputs("...", out);
}

/* "fname:line:col: error: " + pre + 'tok' + post */
static void perr(Parser *p, size_t col, const char *pre, const char *tok, size_t ntok,
                 const char *post)
{
	p->nerr++;
	if (!p->err)
		return;
	if (p->nerr > HW_MAX_PRINTED_ERRORS) {
		if (p->nerr == HW_MAX_PRINTED_ERRORS + 1)
			fprintf(p->err, "%s: error: too many errors, stopping the list here\n",
			        p->fname);
		return;
	}
	fprintf(p->err, "%s:%d:%zu: error: %s", p->fname, p->line, col, pre);
	if (tok) {
		fputc('\'', p->err);
		put_token(p->err, tok, ntok);
		fputc('\'', p->err);
	}
	fprintf(p->err, "%s\n", post ? post : "");
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

static bool is_key_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_';
}

static bool tok_is(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* An SI prefix at s[0..n): its factor and length, or 0 length for none. */
static size_t si_prefix(const char *s, size_t n, double *factor)
{
	static const struct {
		const char *p;
		double f;
	} pre[] = {
	        {"Ki", 1024.0},
	        {"Mi", 1048576.0},
	        {"Gi", 1073741824.0},
	        {"Ti", 1099511627776.0},
	        {"Pi", 1125899906842624.0},
	        {"k", 1e3},
	        {"K", 1e3},
	        {"M", 1e6},
	        {"G", 1e9},
	        {"T", 1e12},
	        {"P", 1e15},
	};
	for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) {
		size_t l = strlen(pre[i].p);
		if (l <= n && memcmp(s, pre[i].p, l) == 0) {
			*factor = pre[i].f;
			return l;
		}
	}
	*factor = 1;
	return 0;
}

/* The factor of unit text u[0..n) for a key kind, or a negative value when
 * it is not one of the kind's units. */
static double unit_factor(KeyKind kind, const char *u, size_t n)
{
	if (n == 0)
		return 1;
	if (kind == KEY_TIME || kind == KEY_TKERN) {
		static const struct {
			const char *u;
			double f;
		} tu[] = {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
		for (size_t i = 0; i < sizeof tu / sizeof tu[0]; i++)
			if (tok_is(u, n, tu[i].u))
				return tu[i].f;
		return -1;
	}
	double f;
	size_t pl = si_prefix(u, n, &f);
	const char *rest = u + pl;
	size_t rn = n - pl;
	if (rn == 0)
		return f;
	switch (kind) {
	case KEY_FLOPS:
	case KEY_GEMM:
	case KEY_TATTN:
		return tok_is(rest, rn, "FLOP/s") || tok_is(rest, rn, "FLOPS") ? f : -1;
	case KEY_BW:
	case KEY_TSTREAM:
	case KEY_TBW:
		return tok_is(rest, rn, "B/s") ? f : -1;
	case KEY_SIZE:
		return tok_is(rest, rn, "B") ? f : -1;
	default:
		return -1;
	}
}

static const char *unit_help(KeyKind kind)
{
	switch (kind) {
	case KEY_FLOPS:
	case KEY_GEMM:
	case KEY_TATTN:
		return " (FLOP/s, e.g. 989 TFLOP/s or 989e12)";
	case KEY_TSTREAM:
	case KEY_BW:
	case KEY_TBW:
		return " (bytes/s, e.g. 3.35 TB/s or 900 GB/s)";
	case KEY_SIZE:
		return " (bytes, e.g. 80 GB or 80 GiB)";
	case KEY_TIME:
	case KEY_TKERN:
		return " (seconds, e.g. 5 us, 0.5 ms or 5e-6)";
	case KEY_FRAC:
		return " (a fraction, 0 < f <= 1, e.g. 0.8)";
	case KEY_SHARE:
		return " (a share, 0 <= f <= 1, e.g. 0.5)";
	case KEY_COUNT:
		return " (a whole number, e.g. 8)";
	case KEY_KFACT:
		return " (a factor > 0, e.g. 1.5)";
	default:
		return "";
	}
}

/* Parses a number with an optional unit from v[0..n) (trimmed, non-empty).
 * Returns 0 and sets *out, or -1 after reporting an error at column col. */
static int parse_quantity(Parser *p, const Key *k, const char *v, size_t n, size_t col, double *out)
{
	/* the number: digits, one '.', an exponent; no sign, hex, inf or nan */
	size_t i = 0, ndig = 0;
	while (i < n && isdigit((unsigned char)v[i]))
		i++, ndig++;
	if (i < n && v[i] == '.') {
		i++;
		while (i < n && isdigit((unsigned char)v[i]))
			i++, ndig++;
	}
	if (ndig && i < n && (v[i] == 'e' || v[i] == 'E')) {
		size_t j = i + 1;
		if (j < n && (v[j] == '+' || v[j] == '-'))
			j++;
		size_t e0 = j;
		while (j < n && isdigit((unsigned char)v[j]))
			j++;
		if (j > e0)
			i = j;
	}
	char buf[64];
	if (!ndig || i >= sizeof buf) {
		perr(p, col, "bad value ", v, n, unit_help(k->kind));
		return -1;
	}
	memcpy(buf, v, i);
	buf[i] = 0;
	double x = strtod(buf, NULL);
	size_t u = i;
	while (u < n && is_space(v[u]))
		u++;
	if (k->kind == KEY_COUNT) {
		if (u < n || memchr(buf, '.', i) || memchr(buf, 'e', i) || memchr(buf, 'E', i) ||
		    x < 1 || x > HW_MAX_DEVICES_PER_NODE) {
			perr(p, col, "bad value ", v, n,
			     " (a whole number from 1 to 1048576, e.g. 8)");
			return -1;
		}
		*out = x;
		return 0;
	}
	double f = unit_factor(k->kind, v + u, n - u);
	if (f < 0) {
		perr(p, col + u, "unknown unit ", v + u, n - u, unit_help(k->kind));
		return -1;
	}
	x *= f;
	bool zero_ok = k->kind == KEY_TIME || k->kind == KEY_TKERN || k->kind == KEY_SHARE;
	if ((k->kind == KEY_FRAC || k->kind == KEY_SHARE) && x > 1) {
		perr(p, col, "value ", v, n,
		     k->kind == KEY_FRAC ? " is out of range (a fraction, 0 < f <= 1)"
		                         : " is out of range (a share, 0 <= f <= 1)");
		return -1;
	}
	if (!isfinite(x) || x < 0 || (x == 0 && !zero_ok)) {
		perr(p, col, "value ", v, n,
		     zero_ok ? " is out of range (finite, >= 0)"
		             : " is out of range (finite, > 0)");
		return -1;
	}
	*out = x;
	return 0;
}

/* The whitespace-separated tokens of s[a0..a1): at most max, their starts
 * and lengths; the count, or -1 when there are more. */
static int split_args(const char *s, size_t a0, size_t a1, size_t *at, size_t *len, int max)
{
	int na = 0;
	for (size_t i = a0; i < a1;) {
		while (i < a1 && is_space(s[i]))
			i++;
		if (i >= a1)
			break;
		size_t t0 = i;
		while (i < a1 && !is_space(s[i]))
			i++;
		if (na == max)
			return -1;
		at[na] = t0;
		len[na++] = i - t0;
	}
	return na;
}

/* A whole number in [lo, hi] from s[0..n), or -1. */
static long whole(const char *s, size_t n, long lo, long hi)
{
	if (n == 0 || n > 9)
		return -1;
	long x = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return -1;
		x = x * 10 + (s[i] - '0');
	}
	return x >= lo && x <= hi ? x : -1;
}

static const char *const coll_kinds[] = {"all_reduce", "all_gather", "reduce_scatter",
                                         "all_to_all", "broadcast",  "send",
                                         "recv"};
#define NCOLL_KINDS ((int)(sizeof coll_kinds / sizeof coll_kinds[0]))

/* `gemm T M N K = RATE`, `stream_bw T = BW`, `attn_rate T = RATE`,
 * `kernel_time T = S`, `coll KIND N = LATENCY, BW`: the arguments at
 * s[a0..a1), the value v[0..vn) at column col. */
static void parse_table(Parser *p, HwProfile *hw, const Key *k, const char *s, size_t a0,
                        size_t a1, const char *v, size_t vn, size_t col)
{
	size_t at[5], len[5];
	int want = k->kind == KEY_GEMM ? 4 : k->kind == KEY_COLL || k->kind == KEY_KFACT ? 2 : 1;
	int na = split_args(s, a0, a1, at, len, 5);
	if (k->kind == KEY_TSTREAM && na == 2)
		want = 2; /* stream_bw THREADS BYTES */
	const char *use = k->kind == KEY_GEMM   ? (k->off ? "'gemm_bf16 THREADS M N K = FLOP/s'"
	                                                  : "'gemm THREADS M N K = FLOP/s'")
	                  : k->kind == KEY_COLL    ? "'coll KIND N = LATENCY, BYTES/s'"
	                  : k->kind == KEY_TSTREAM ? "'stream_bw THREADS [BYTES] = BYTES/s'"
	                  : k->kind == KEY_TBW     ? "'gemm_cold_bw THREADS = BYTES/s'"
	                  : k->kind == KEY_KFACT   ? (k->off ? "'kernel_factor_bf16 THREADS CLASS = X'"
	                                                     : "'kernel_factor THREADS CLASS = X'")
	                                           : "'KEY THREADS = VALUE'";
	if (na != want) {
		perr(p, a0 + 1, "wrong arguments for ", k->name, strlen(k->name), NULL);
		if (p->err && p->nerr <= HW_MAX_PRINTED_ERRORS)
			fprintf(p->err, "%s:%d:%zu: note: the form is %s\n", p->fname, p->line,
			        a0 + 1, use);
		return;
	}
	if (k->kind == KEY_COLL) {
		int kind = -1;
		for (int j = 0; j < NCOLL_KINDS; j++)
			if (tok_is(s + at[0], len[0], coll_kinds[j]))
				kind = j;
		long gn = whole(s + at[1], len[1], 2, 1 << 20);
		if (kind < 0) {
			perr(p, at[0] + 1, "unknown collective ", s + at[0], len[0],
			     " (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, "
			     "send, recv)");
			return;
		}
		if (gn < 0) {
			perr(p, at[1] + 1, "bad group size ", s + at[1], len[1],
			     " (a whole number from 2 to 1048576)");
			return;
		}
		const char *comma = memchr(v, ',', vn);
		if (!comma) {
			perr(p, col, "expected 'LATENCY, BYTES/s', got ", v, vn, NULL);
			return;
		}
		size_t l0 = 0, l1 = (size_t)(comma - v), b0 = l1 + 1, b1 = vn;
		while (l1 > l0 && is_space(v[l1 - 1]))
			l1--;
		while (b0 < b1 && is_space(v[b0]))
			b0++;
		static const Key lat = {"coll latency", KEY_TIME, 0}, bw = {"coll bw", KEY_BW, 0};
		double tl, tb;
		if (l1 == l0 || b1 == b0) {
			perr(p, col, "expected 'LATENCY, BYTES/s', got ", v, vn, NULL);
			return;
		}
		if (parse_quantity(p, &lat, v + l0, l1 - l0, col + l0, &tl) ||
		    parse_quantity(p, &bw, v + b0, b1 - b0, col + b0, &tb))
			return;
		HwCollPoint *c = NULL;
		for (int j = 0; j < hw->ncoll; j++)
			if (hw->coll[j].kind == kind && hw->coll[j].n == gn)
				c = &hw->coll[j];
		if (!c && hw->ncoll == HW_MAX_COLL) {
			perr(p, 1, "too many 'coll' lines (at most 96)", NULL, 0, NULL);
			return;
		}
		if (!c)
			c = &hw->coll[hw->ncoll++];
		*c = (HwCollPoint){kind, (int)gn, tl, tb};
		return;
	}
	long t = whole(s + at[0], len[0], 1, HW_MAX_THREADS);
	if (t < 0) {
		perr(p, at[0] + 1, "bad thread count ", s + at[0], len[0],
		     " (a whole number from 1 to 16)");
		return;
	}
	double x;
	if (parse_quantity(p, k, v, vn, col, &x))
		return;
	if (k->kind == KEY_TSTREAM) {
		long b = 0;
		if (na == 2 && (b = whole(s + at[1], len[1], 1, 999999999)) < 0) {
			perr(p, at[1] + 1, "bad kernel size ", s + at[1], len[1],
			     " (bytes, a whole number from 1 to 999999999)");
			return;
		}
		HwStreamPoint *sp = NULL;
		for (int j = 0; j < hw->nstream; j++)
			if (hw->stream[j].threads == t && hw->stream[j].bytes == (double)b)
				sp = &hw->stream[j];
		if (!sp && hw->nstream == HW_MAX_STREAM) {
			perr(p, 1, "too many 'stream_bw' lines (at most 96)", NULL, 0, NULL);
			return;
		}
		if (!sp)
			sp = &hw->stream[hw->nstream++];
		*sp = (HwStreamPoint){(int)t, (double)b, x};
		return;
	}
	if (k->kind == KEY_KFACT) {
		const char *c = s + at[1];
		size_t cn = len[1];
		bool ok = cn < HW_KCLASS_LEN;
		for (size_t j = 0; j < cn && ok; j++)
			ok = (c[j] >= 'a' && c[j] <= 'z') || (c[j] >= '0' && c[j] <= '9') ||
			     c[j] == '_' || c[j] == '.';
		if (!ok) {
			perr(p, at[1] + 1, "bad kernel class ", c, cn,
			     " (an op's name, or fused.OP: a-z, 0-9, '_' and '.', at most 31)");
			return;
		}
		int bf16 = k->off == 1;
		HwKernelFactor *kf = NULL;
		for (int j = 0; j < hw->nkfactor; j++)
			if (hw->kfactor[j].threads == t && hw->kfactor[j].bf16 == bf16 &&
			    tok_is(c, cn, hw->kfactor[j].cls))
				kf = &hw->kfactor[j];
		if (!kf && hw->nkfactor == HW_MAX_KFACTOR) {
			perr(p, 1, "too many 'kernel_factor' and 'kernel_factor_bf16' lines (at most 128)",
			     NULL, 0, NULL);
			return;
		}
		if (!kf)
			kf = &hw->kfactor[hw->nkfactor++];
		*kf = (HwKernelFactor){.threads = (int)t, .bf16 = bf16, .factor = x};
		memcpy(kf->cls, c, cn);
		return;
	}
	if (k->kind != KEY_GEMM) {
		((double *)((char *)hw + k->off))[t] = x;
		return;
	}
	double d[3];
	for (int j = 0; j < 3; j++) {
		long e = whole(s + at[j + 1], len[j + 1], 1, 1 << 24);
		if (e < 0) {
			perr(p, at[j + 1] + 1, "bad GEMM size ", s + at[j + 1], len[j + 1],
			     " (a whole number from 1 to 16777216)");
			return;
		}
		d[j] = (double)e;
	}
	int bf16 = k->off == 1;
	HwGemmPoint *g = NULL;
	for (int j = 0; j < hw->ngemm; j++)
		if (hw->gemm[j].threads == t && hw->gemm[j].m == d[0] && hw->gemm[j].n == d[1] &&
		    hw->gemm[j].k == d[2] && hw->gemm[j].bf16 == bf16)
			g = &hw->gemm[j];
	if (!g && hw->ngemm == HW_MAX_GEMM) {
		perr(p, 1, "too many 'gemm' and 'gemm_bf16' lines (at most " HW_MAX_GEMM_TEXT ")",
		     NULL, 0, NULL);
		return;
	}
	if (!g)
		g = &hw->gemm[hw->ngemm++];
	*g = (HwGemmPoint){(int)t, d[0], d[1], d[2], x, bf16};
}

/* One line: s[0..n) without its newline. */
static void parse_line(Parser *p, HwProfile *hw, const char *s, size_t n, bool *seen_other)
{
	/* a comment runs to the end of the line */
	const char *hash = memchr(s, '#', n);
	if (hash)
		n = (size_t)(hash - s);
	size_t i = 0;
	while (i < n && is_space(s[i]))
		i++;
	if (i == n)
		return;
	size_t k0 = i;
	while (i < n && is_key_char(s[i]))
		i++;
	size_t k1 = i;
	while (i < n && is_space(s[i]))
		i++;
	if (k1 == k0) {
		perr(p, k0 + 1, "expected 'key = value', got ", s + k0, n - k0, NULL);
		return;
	}
	const Key *k = NULL;
	for (int j = 0; j < NKEYS; j++)
		if (tok_is(s + k0, k1 - k0, keys[j].name))
			k = &keys[j];
	/* a table key's arguments, up to '=' */
	size_t a0 = i;
	if (k && k->kind >= KEY_GEMM)
		while (i < n && s[i] != '=')
			i++;
	size_t a1 = i;
	if (i >= n || s[i] != '=') {
		perr(p, i + 1, "expected '=' after ", s + k0, k1 - k0,
		     k && k->kind >= KEY_GEMM ? " and its arguments" : NULL);
		return;
	}
	i++;
	while (i < n && is_space(s[i]))
		i++;
	size_t v0 = i, v1 = n;
	while (v1 > v0 && is_space(s[v1 - 1]))
		v1--;
	if (!k) {
		perr(p, k0 + 1, "unknown key ", s + k0, k1 - k0,
		     " (keys: base, name, source, peak_f32, peak_bf16, peak_f16, mem_bw, "
		     "mem_size, intra_bw, intra_latency, intra_a2a_bw, inter_bw, "
		     "inter_latency, inter_a2a_bw, gpus_per_node, gemm_eff, mem_eff, "
		     "link_eff, kernel_overhead, step_overhead, coll_overhead, coll_byte_time, "
		     "comm_blocking, feed_rate, feed_x_rate, cores, gemm, "
		     "stream_bw, "
		     "attn_rate, attn_bwd_rate, kernel_time, kernel_factor, kernel_factor_bf16, coll)");
		return;
	}
	if (v1 == v0) {
		perr(p, v0 + 1, "missing value for ", k->name, strlen(k->name), NULL);
		return;
	}
	const char *v = s + v0;
	size_t vn = v1 - v0, col = v0 + 1;
	if (k->kind == KEY_BASE) {
		if (*seen_other) {
			perr(p, k0 + 1, "'base' must come before any other key", NULL, 0, NULL);
			return;
		}
		const HwProfile *b = NULL;
		for (int j = 0; j < NBUILTINS; j++)
			if (tok_is(v, vn, builtins[j].name))
				b = &builtins[j];
		if (!b) {
			perr(p, col, "unknown base profile ", v, vn,
			     " (h100, h200, a100, b200, cpu)");
			return;
		}
		*hw = *b;
		return;
	}
	*seen_other = true;
	if (k->kind == KEY_SOURCE) {
		size_t m = vn < HW_SOURCE_LEN ? vn : HW_SOURCE_LEN - 1;
		for (size_t j = 0; j < m; j++)
			hw->source[j] = v[j] >= 0x20 && v[j] < 0x7f ? v[j] : '?';
		hw->source[m] = 0;
		return;
	}
	if (k->kind >= KEY_GEMM) {
		parse_table(p, hw, k, s, a0, a1, v, vn, col);
		return;
	}
	if (k->kind == KEY_NAME) {
		bool ok = vn < HW_NAME_LEN;
		for (size_t j = 0; j < vn && ok; j++)
			ok = is_key_char(v[j]) || v[j] == '-' || v[j] == '.';
		if (!ok) {
			perr(p, col, "bad name ", v, vn,
			     " (letters, digits, '_', '-', '.'; at most 31 characters)");
			return;
		}
		memcpy(hw->name, v, vn);
		hw->name[vn] = 0;
		return;
	}
	double x;
	if (parse_quantity(p, k, v, vn, col, &x))
		return;
	if (k->kind == KEY_COUNT)
		*(int *)((char *)hw + k->off) = (int)x;
	else
		*(double *)((char *)hw + k->off) = x;
	/* integer work is counted at the f32 rate */
	if (k->off == offsetof(HwProfile, peak_flops) + DTM_F32 * sizeof(double))
		hw->peak_flops[DTM_I32] = x;
}

int hw_parse_overrides(HwProfile *hw, const char *text, size_t len, const char *fname, FILE *err)
{
	Parser p = {.fname = fname ? fname : "<hw>", .err = err, .nerr = 0, .line = 0};
	HwProfile tmp = *hw;
	bool seen_other = false;
	size_t pos = 0;
	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t end = nl ? (size_t)(nl - text) : len;
		p.line++;
		parse_line(&p, &tmp, text + pos, end - pos, &seen_other);
		pos = end + 1;
	}
	if (p.nerr == 0)
		*hw = tmp;
	return p.nerr;
}

int hw_load_overrides(HwProfile *hw, const char *path, FILE *err)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		if (err)
			fprintf(err, "%s: error: cannot open the hardware file\n", path);
		return 1;
	}
	char *buf = malloc(HW_MAX_FILE_BYTES + 1);
	if (!buf) {
		fclose(f);
		if (err)
			fprintf(err, "%s: error: out of memory\n", path);
		return 1;
	}
	size_t n = fread(buf, 1, HW_MAX_FILE_BYTES + 1, f);
	bool bad = ferror(f) != 0;
	fclose(f);
	int nerr;
	if (bad) {
		if (err)
			fprintf(err, "%s: error: cannot read the hardware file\n", path);
		nerr = 1;
	} else if (n > HW_MAX_FILE_BYTES) {
		if (err)
			fprintf(err, "%s: error: the hardware file is over 1 MiB\n", path);
		nerr = 1;
	} else {
		nerr = hw_parse_overrides(hw, buf, n, path, err);
	}
	free(buf);
	return nerr;
}

void hw_print(FILE *out, const HwProfile *hw)
{
	fprintf(out, "name = %s\n", hw->name);
	if (hw->source[0])
		fprintf(out, "source = %s\n", hw->source);
	for (int j = 0; j < NKEYS; j++) {
		const Key *k = &keys[j];
		if (k->kind == KEY_BASE || k->kind == KEY_NAME || k->kind == KEY_SOURCE ||
		    k->kind >= KEY_GEMM)
			continue;
		if (k->kind == KEY_COUNT) {
			int x = *(const int *)((const char *)hw + k->off);
			if (strcmp(k->name, "gpus_per_node") == 0 ||
			    (strcmp(k->name, "cores") == 0 && x > 0))
				fprintf(out, "%s = %d\n", k->name, x);
			continue;
		}
		double x = *(const double *)((const char *)hw + k->off);
		if ((k->kind == KEY_FRAC && x == 0) ||
		    ((k->off == offsetof(HwProfile, feed_rate) ||
		      k->off == offsetof(HwProfile, feed_x_rate) ||
		      k->off == offsetof(HwProfile, l2_bytes)) &&
		     x == 0))
			continue; /* 1; free */
		fprintf(out, "%s = %.17g\n", k->name, x);
	}
	for (int j = 0; j < hw->nstream; j++) {
		const HwStreamPoint *sp = &hw->stream[j];
		if (sp->bytes > 0)
			fprintf(out, "stream_bw %d %.0f = %.17g\n", sp->threads, sp->bytes, sp->bw);
		else
			fprintf(out, "stream_bw %d = %.17g\n", sp->threads, sp->bw);
	}
	for (int t = 1; t <= HW_MAX_THREADS; t++) {
		if (hw->attn_rate[t] > 0)
			fprintf(out, "attn_rate %d = %.17g\n", t, hw->attn_rate[t]);
		if (hw->attn_bwd_rate[t] > 0)
			fprintf(out, "attn_bwd_rate %d = %.17g\n", t, hw->attn_bwd_rate[t]);
		if (hw->attn_bf16_rate[t] > 0)
			fprintf(out, "attn_bf16_rate %d = %.17g\n", t, hw->attn_bf16_rate[t]);
		if (hw->attn_bf16_bwd_rate[t] > 0)
			fprintf(out, "attn_bf16_bwd_rate %d = %.17g\n", t,
			        hw->attn_bf16_bwd_rate[t]);
		if (hw->kernel_t[t] > 0)
			fprintf(out, "kernel_time %d = %.17g\n", t, hw->kernel_t[t]);
		if (hw->gemm_cold_bw[t] > 0)
			fprintf(out, "gemm_cold_bw %d = %.17g\n", t, hw->gemm_cold_bw[t]);
	}
	for (int j = 0; j < hw->ngemm; j++) {
		const HwGemmPoint *g = &hw->gemm[j];
		fprintf(out, "%s %d %.0f %.0f %.0f = %.17g\n", g->bf16 ? "gemm_bf16" : "gemm",
		        g->threads, g->m, g->n, g->k, g->rate);
	}
	for (int j = 0; j < hw->ncoll; j++) {
		const HwCollPoint *c = &hw->coll[j];
		fprintf(out, "coll %s %d = %.17g, %.17g\n", coll_kinds[c->kind], c->n, c->latency,
		        c->bw);
	}
	for (int j = 0; j < hw->nkfactor; j++) {
		const HwKernelFactor *kf = &hw->kfactor[j];
		fprintf(out, "%s %d %s = %.17g\n", kf->bf16 ? "kernel_factor_bf16" : "kernel_factor",
		        kf->threads, kf->cls, kf->factor);
	}
}

/* ---- where profiles come from ---- */

bool hw_default_path(char *buf, size_t n)
{
	const char *env = getenv("DTM_HW_PROFILE");
	if (env && !strcmp(env, "none"))
		return false; /* none: no default profile */
	if (env && *env)
		return (size_t)snprintf(buf, n, "%s", env) < n;
	char host[256] = "localhost";
	if (gethostname(host, sizeof host - 1) != 0 || !host[0])
		strcpy(host, "localhost");
	host[sizeof host - 1] = 0;
	for (char *c = host; *c; c++)
		if (!is_key_char(*c) && *c != '-' && *c != '.')
			*c = '_';
	const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
	int w;
	if (xdg && *xdg)
		w = snprintf(buf, n, "%s/dtm/hw-%s.txt", xdg, host);
	else if (home && *home)
		w = snprintf(buf, n, "%s/.config/dtm/hw-%s.txt", home, host);
	else
		return false;
	return w > 0 && (size_t)w < n;
}

static void put_used(char *used, size_t nused, const char *what)
{
	if (used && nused)
		snprintf(used, nused, "%s", what);
}

bool hw_resolve(const char *arg, const char *dflt, HwProfile *hw, char *used, size_t nused,
                FILE *err)
{
	if (!arg) {
		char path[4096];
		if (hw_default_path(path, sizeof path) && access(path, R_OK) == 0) {
			*hw = *hw_builtin("h100");
			if (hw_load_overrides(hw, path, err) != 0) {
				if (err)
					fprintf(err,
					        "dtmc: error: %s: bad calibrated profile (run `dtmc "
					        "calibrate` again, or name a profile with --hw)\n",
					        path);
				return false;
			}
			put_used(used, nused, path);
			return true;
		}
		arg = dflt;
	}
	const HwProfile *b = hw_builtin(arg);
	if (b) {
		*hw = *b;
		put_used(used, nused, b->name);
		return true;
	}
	if (!strchr(arg, '/') && !strchr(arg, '.') && access(arg, F_OK) != 0) {
		if (err) {
			fprintf(err, "dtmc: error: --hw '%s': not a built-in profile (", arg);
			for (int i = 0; i < NBUILTINS; i++)
				fprintf(err, "%s%s", i ? ", " : "", builtins[i].name);
			fputs(") nor a readable file\n", err);
		}
		return false;
	}
	/* a file: overrides of h100 unless it names its base */
	*hw = *hw_builtin("h100");
	if (hw_load_overrides(hw, arg, err) != 0) {
		if (err)
			fprintf(err, "dtmc: error: --hw '%s': bad hardware profile\n", arg);
		return false;
	}
	put_used(used, nused, arg);
	return true;
}

/* ---- the curves ---- */

/* The measured thread count nearest t in tab[1..HW_MAX_THREADS], or 0. */
static int nearest_t(const double *tab, int t)
{
	int best = 0;
	for (int u = 1; u <= HW_MAX_THREADS; u++)
		if (tab[u] > 0 && (!best || abs(u - t) < abs(best - t)))
			best = u;
	return best;
}

double hw_kernel_overhead(const HwProfile *hw, int t)
{
	int u = nearest_t(hw->kernel_t, t);
	return u ? hw->kernel_t[u] : hw->kernel_s;
}

double hw_gemm_cold_bw(const HwProfile *hw, int t)
{
	int u = nearest_t(hw->gemm_cold_bw, t);
	return u && hw->l2_bytes > 0 ? hw->gemm_cold_bw[u] : 0;
}

static double eff(double e)
{
	return e > 0 ? e : 1;
}

double hw_stream_bw(const HwProfile *hw, int t, double bytes)
{
	if (hw->nstream == 0)
		return hw->mem_bw * eff(hw->mem_eff);
	int best = 0;
	for (int j = 0; j < hw->nstream; j++) {
		int u = hw->stream[j].threads;
		if (!best || abs(u - t) < abs(best - t))
			best = u;
	}
	/* the points of that count either side of bytes */
	const HwStreamPoint *lo = NULL, *hi = NULL;
	for (int j = 0; j < hw->nstream; j++) {
		const HwStreamPoint *sp = &hw->stream[j];
		if (sp->threads != best)
			continue;
		if (sp->bytes <= 0)
			return sp->bw; /* one figure for every size */
		if (sp->bytes <= bytes && (!lo || sp->bytes > lo->bytes))
			lo = sp;
		if (sp->bytes >= bytes && (!hi || sp->bytes < hi->bytes))
			hi = sp;
	}
	if (!lo || !hi || lo == hi)
		return (lo ? lo : hi)->bw;
	double f = (log(bytes) - log(lo->bytes)) / (log(hi->bytes) - log(lo->bytes));
	return exp(log(lo->bw) + f * (log(hi->bw) - log(lo->bw)));
}

/* Whether dtype's operands take the bf16 tables: bf16, and on a device
 * profile (no `cores`: a GPU's) f16 too, which runs on the same tensor
 * cores at the same rate (a CPU widens f16 to f32: the f32 tables). */
static bool bf16_tables(const HwProfile *hw, DtmDtype dtype)
{
	return dtype == DTM_BF16 || (dtype == DTM_F16 && hw->cores == 0);
}

bool hw_calibrated(const HwProfile *hw)
{
	return hw->cores > 0 || hw->ngemm > 0;
}

double hw_attn_rate(const HwProfile *hw, int t, bool backward, DtmDtype dtype)
{
	bool bf = bf16_tables(hw, dtype) && nearest_t(hw->attn_bf16_rate, t);
	const double *fwd = bf ? hw->attn_bf16_rate : hw->attn_rate;
	const double *bwd = bf ? hw->attn_bf16_bwd_rate : hw->attn_bwd_rate;
	const double *tab = backward && nearest_t(bwd, t) ? bwd : fwd;
	int u = nearest_t(tab, t);
	return u ? tab[u] : hw->peak_flops[DTM_F32] * eff(hw->gemm_eff);
}

double hw_gemm_rate(const HwProfile *hw, DtmDtype dtype, double m, double n, double k,
                    double batch, int t)
{
	if (hw->ngemm == 0)
		return hw_peak_flops(hw, dtype) * eff(hw->gemm_eff);
	bool bf = bf16_tables(hw, dtype) && hw_has_bf16_gemm(hw);
	/* the points of the thread count nearest t */
	int best = 0;
	for (int j = 0; j < hw->ngemm; j++) {
		if (hw->gemm[j].bf16 != (int)bf)
			continue;
		int u = hw->gemm[j].threads;
		if (!best || abs(u - t) < abs(best - t))
			best = u;
	}
	if (!best) /* only points of the other dtype */
		return hw_peak_flops(hw, dtype) * eff(hw->gemm_eff);
	/* a batch's items run side by side: as one GEMM of batch x the rows */
	if (batch > 1)
		m *= batch;
	double lm = log(m > 1 ? m : 1), ln = log(n > 1 ? n : 1), lk = log(k > 1 ? k : 1);
	double wsum = 0, rsum = 0;
	for (int j = 0; j < hw->ngemm; j++) {
		const HwGemmPoint *g = &hw->gemm[j];
		if (g->threads != best || g->bf16 != (int)bf)
			continue;
		double dm = lm - log(g->m), dn = ln - log(g->n), dk = lk - log(g->k);
		double d2 = dm * dm + dn * dn + dk * dk;
		if (d2 < 1e-12)
			return g->rate;
		/* inverse distance to the 4th: the nearest points dominate */
		double w = 1 / (d2 * d2);
		wsum += w;
		rsum += w * log(g->rate);
	}
	return exp(rsum / wsum);
}

double hw_kernel_factor(const HwProfile *hw, const char *cls, int t, DtmDtype dtype)
{
	if (hw->nkfactor == 0 || !cls)
		return 1;
	/* 16-bit kernels: the bf16 entries, else the f32 ones */
	const HwKernelFactor *best = NULL;
	for (int bf = dtype == DTM_BF16 || dtype == DTM_F16; bf >= 0 && !best; bf--)
		for (int j = 0; j < hw->nkfactor; j++) {
			const HwKernelFactor *kf = &hw->kfactor[j];
			if (kf->bf16 == bf && strcmp(kf->cls, cls) == 0 &&
			    (!best || abs(kf->threads - t) < abs(best->threads - t)))
				best = kf;
		}
	return best ? best->factor : 1;
}

bool hw_has_bf16_gemm(const HwProfile *hw)
{
	for (int j = 0; j < hw->ngemm; j++)
		if (hw->gemm[j].bf16)
			return true;
	return false;
}

const HwCollPoint *hw_coll(const HwProfile *hw, int kind, int64_t n)
{
	const HwCollPoint *best = NULL;
	for (int j = 0; j < hw->ncoll; j++) {
		const HwCollPoint *c = &hw->coll[j];
		if (c->kind != kind)
			continue;
		if (!best || llabs((long long)c->n - n) < llabs((long long)best->n - n) ||
		    (llabs((long long)c->n - n) == llabs((long long)best->n - n) && c->n > best->n))
			best = c;
	}
	return best;
}
