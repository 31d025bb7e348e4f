/* hw.h - hardware profiles for the cost model (`--hw NAME`, `--hw-file FILE`).
 *
 * A profile describes one device (a GPU, or one CPU core for `cpu`) and the
 * links between devices: what tools/cost.c needs to turn a Plan's FLOPs and
 * bytes into seconds.  Built-in profiles carry public datasheet figures
 * (tools/hw.c cites each); an override file changes any of them:
 *
 *     # my cluster: H100s with 200 Gb/s InfiniBand per GPU
 *     base = h100
 *     inter_bw = 25 GB/s
 *     inter_a2a_bw = 24 GB/s
 *     inter_latency = 8 us
 *
 * Units: bandwidths in bytes/s, sizes in bytes, times in seconds, FLOP/s;
 * values accept SI suffixes (see hw_parse_overrides).
 */
#ifndef DTM_HW_H
#define DTM_HW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "runtime/plan.h"

/* One link class between devices: intra-node (NVLink) or inter-node
 * (InfiniBand).  bw is what one device can send per second in one
 * direction (the beta of alpha-beta: ring send-side bytes / bw); latency
 * the per-step alpha.  a2a_bw is the same for all_to_all, which reaches
 * less of the link than a ring: every rank talks to every peer at once,
 * so NVLink loses to protocol overhead and across nodes a rank's traffic
 * cannot be spread over the node's other NICs (tools/hw.c cites the
 * figures).  0 means "as bw", for links built by hand. */
typedef struct HwLink {
	double bw;      /* bytes/s, per device, one direction */
	double latency; /* seconds per ring step */
	double a2a_bw;  /* bytes/s for all_to_all (nccl-tests busbw); 0: bw */
} HwLink;

#define HW_NAME_LEN 32

/* Calibrated curves (`dtmc calibrate`): sizes of their tables. */
#define HW_MAX_THREADS 16 /* thread counts 1..16 per rank */
#define HW_MAX_GEMM 1024  /* GEMM shape points (f32 and bf16) */
#define HW_MAX_GEMM_TEXT "1024"
#define HW_MAX_COLL 96    /* collective (kind, group size) points */
#define HW_SOURCE_LEN 160

/* A GEMM's measured rate at one shape and thread count (the runtime's own
 * GEMM path: rt_cpu_gemm's blocks on its pool), f32 or bf16 operands
 * (`gemm_bf16`: oneDNN's bf16 x bf16 -> f32 where the runtime has it). */
typedef struct HwGemmPoint {
	int threads;
	double m, n, k;
	double rate; /* FLOP/s */
	int bf16;    /* 1: bf16 operands (an int: no padding, tables compare by bytes) */
} HwGemmPoint;

/* One collective kind (CostComm: all_reduce .. broadcast, send, recv) over
 * a group of n ranks: seconds = latency + S / bw, S the tensor's bytes as
 * cost_comm_time takes them (all_gather: the output; all_reduce: the
 * buffer).  bw is algorithm bandwidth (S / time), not bus bandwidth: what
 * the backend reaches end to end, copies and reductions included. */
typedef struct HwCollPoint {
	int kind;
	int n;
	double latency, bw;
} HwCollPoint;

/* A kernel's bandwidth at one size (bytes it reads and writes) and thread
 * count: bytes / seconds, its dispatch included (small kernels are
 * overhead, large ones memory or arithmetic).  bytes 0: any size. */
typedef struct HwStreamPoint {
	int threads;
	double bytes, bw;
} HwStreamPoint;
#define HW_MAX_STREAM 96

/* A kernel class's measured time over what the stream curve gives for its
 * bytes (`kernel_factor T CLASS = X`; `kernel_factor_bf16` for 16-bit
 * kernels), at t threads per rank: the curve is every kernel's, binned by
 * size, and some cost more per byte than others (GELU's tanh, a 16-bit
 * LayerNorm's widening: 3-4x on a CPU).  CLASS is cost_kernel_class's:
 * the kernel's op, or `fused.ROOT` for a fused group. */
#define HW_KCLASS_LEN 32
typedef struct HwKernelFactor {
	char cls[HW_KCLASS_LEN]; /* NUL-padded: tables compare by bytes */
	int threads;
	int bf16; /* 1: measured on bf16 kernels */
	double factor;
} HwKernelFactor;
#define HW_MAX_KFACTOR 128

typedef struct HwProfile {
	char name[HW_NAME_LEN];
	/* where the figures come from: "datasheet", "calibrated on HOST ...". */
	char source[HW_SOURCE_LEN];
	/* dense peak FLOP/s per compute dtype, indexed by DtmDtype
	 * (DTM_F32, DTM_BF16, DTM_F16; DTM_I32 is counted at the f32 rate) */
	double peak_flops[4];
	double mem_bw;    /* device memory bandwidth, bytes/s */
	double mem_bytes; /* device memory size, bytes */
	HwLink intra, inter;
	int devices_per_node;
	/* Efficiencies (0 means 1): the fraction of peak_flops that large
	 * GEMMs reach (gemm_eff), of mem_bw that a streaming kernel reaches
	 * (mem_eff), of a link's bw that a collective reaches (link_eff).
	 * The built-in GPU profiles cite theirs (tools/hw.c). */
	double gemm_eff, mem_eff, link_eff;
	double kernel_s; /* fixed seconds per kernel or GEMM (launch, dispatch) */
	double step_s;   /* fixed seconds per step (optimizer loop, logging, data) */
	double coll_s;   /* fixed seconds per collective inside a run (ranks
	                  * arriving apart, waking the comm thread); not sends */
	double coll_byte_s; /* and seconds per byte of it (the copies competing
	                     * with compute for the cores: dtmc calibrate fits it) */
	/* The share of a stream-1 collective's time that holds up the
	 * compute stream too: 0 (GPUs: a copy engine, NCCL's own SMs) to 1
	 * (a CPU whose cores all compute: the communication thread takes
	 * one of them). */
	double comm_blocking;
	/* The runtime's synthetic regression data (runtime/data.c,
	 * runtime/feed.c): before each step every rank makes the x of each
	 * sample it holds a row of (of x or of y), feed_x_rate elements a
	 * second (normals by Box-Muller), and the target of each row of y it
	 * holds, feed_rate multiply-adds a second (0: free). */
	double feed_rate, feed_x_rate;
	/* ---- calibrated (dtmc calibrate); each table empty when not ----
	 * cores: the cores a node's ranks share (ranks as threads): a rank
	 * runs on max(1, cores / ranks) threads, and ranks beyond the cores
	 * time-share them.  0: every rank is a device of its own. */
	int cores;
	int ngemm, ncoll, nstream, nkfactor;
	HwGemmPoint gemm[HW_MAX_GEMM];
	HwCollPoint coll[HW_MAX_COLL];
	HwStreamPoint stream[HW_MAX_STREAM]; /* kernels without FLOPs */
	HwKernelFactor kfactor[HW_MAX_KFACTOR];
	/* by threads per rank, [t] for t = 1..HW_MAX_THREADS (0: not
	 * measured, the nearest measured count is used) */
	double attn_rate[HW_MAX_THREADS + 1];     /* attention's forward kernels, FLOP/s */
	double attn_bwd_rate[HW_MAX_THREADS + 1]; /* its backward kernels (`*_bwd`) */
	/* the same on bf16 operands (attn_bf16_rate, attn_bf16_bwd_rate; 0:
	 * not measured, the f32 rates are used) */
	double attn_bf16_rate[HW_MAX_THREADS + 1];
	double attn_bf16_bwd_rate[HW_MAX_THREADS + 1];
	double kernel_t[HW_MAX_THREADS + 1];      /* seconds per kernel (dispatch, pool wake-up) */
	/* The cache a GEMM's operands are reused from (`l2_size`: a core's L2,
	 * bytes; a rank's threads have one each) and the rate a GEMM reads
	 * operands evicted from it (`gemm_cold_bw T = B/s`: the weight of a
	 * micro-batch of one row, read again after the rest of the step went
	 * through the cache).  The GEMM grid times each shape back to back,
	 * its operands cached; the cost model adds to a GEMM's grid time the
	 * bytes of its operands not used within l2_size bytes at this rate
	 * (tools/cost.c, cold_bytes).  0: not measured. */
	double l2_bytes;
	double gemm_cold_bw[HW_MAX_THREADS + 1];
} HwProfile;

/* The built-in profile NAME ("h100", "h200", "a100", "b200", "cpu"), or
 * NULL.  The returned profile is static and constant. */
const HwProfile *hw_builtin(const char *name);
/* The built-ins by index, 0 <= i < hw_builtin_count(), for listings. */
int hw_builtin_count(void);
const HwProfile *hw_builtin_at(int i);

/* Dense peak FLOP/s of dtype on hw (I32 and unknown dtypes: f32). */
double hw_peak_flops(const HwProfile *hw, DtmDtype dtype);

/* Applies `key = value` lines from text[0..len) to *hw (text need not be
 * NUL-terminated; any bytes are accepted).  Keys: base (a built-in to
 * start from; only before any other key), name, peak_f32, peak_bf16,
 * peak_f16, mem_bw, mem_size, intra_bw, intra_latency, intra_a2a_bw,
 * inter_bw, inter_latency, inter_a2a_bw, gpus_per_node (alias
 * devices_per_node).  The a2a keys are all_to_all's bandwidths, apart
 * from the ring ones: a file that lowers inter_bw should say
 * inter_a2a_bw too, or all_to_all keeps the base's.  '#' starts a
 * comment; blank lines are ignored.  Numbers are decimal with an optional
 * SI prefix (k M G T P, powers of 1000; Ki Mi Gi Ti Pi, powers of 1024)
 * and the key's optional unit: FLOP/s for peaks, B/s for bandwidths, B
 * for sizes, s (or ms, us, ns) for latencies; e.g. "989 TFLOP/s",
 * "3.35 TB/s", "80 GiB", "5 us".  Every error is printed to err (when
 * non-NULL) as `fname:line:col: error: message`; parsing continues to the
 * end.  Returns the number of errors; *hw is changed only when it is 0. */
int hw_parse_overrides(HwProfile *hw, const char *text, size_t len, const char *fname, FILE *err);

/* Reads the file at path and applies it with hw_parse_overrides.  Returns
 * the number of errors (1 when the file cannot be read or exceeds 1 MiB). */
int hw_load_overrides(HwProfile *hw, const char *path, FILE *err);

/* The profile --hw ARG names: a built-in, or a file (overrides of h100
 * unless it says `base = NAME`).  With ARG NULL: the calibrated profile of
 * this machine when one exists (hw_default_path), else `dflt` (a
 * built-in name).  *used is set to what was read: the built-in's name or
 * the file's path.  Errors go to err; returns false on one. */
bool hw_resolve(const char *arg, const char *dflt, HwProfile *hw, char *used, size_t nused,
                FILE *err);

/* Where `dtmc calibrate` keeps this machine's profile and where
 * hw_resolve looks for it: $DTM_HW_PROFILE when set, else
 * $XDG_CONFIG_HOME/dtm/hw-HOST.txt (XDG_CONFIG_HOME defaults to
 * ~/.config).  Returns false when no path can be formed, or when
 * DTM_HW_PROFILE is `none` (no default profile: the tests run so). */
bool hw_default_path(char *buf, size_t n);

/* Whether hw has measured curves (`dtmc calibrate`): a CPU's (`cores`
 * set) or a device's (GEMM points without `cores`: `calibrate --device
 * cuda`).  The cost model prices kernels by the curves then, not by the
 * roofline. */
bool hw_calibrated(const HwProfile *hw);

/* Seconds per kernel dispatch, stream bandwidth and attention rate at t
 * threads per rank: the calibrated value at the nearest measured t, else
 * the efficiency-scaled peaks. */
double hw_kernel_overhead(const HwProfile *hw, int t);
/* bytes: the kernel's; the curve's points of the nearest thread count are
 * interpolated in log(bytes), and clamped at its ends. */
double hw_stream_bw(const HwProfile *hw, int t, double bytes);
/* dtype: the kernel's; bf16 takes the bf16 rates where measured (on a
 * device profile, without `cores`, f16 too: the same tensor cores). */
double hw_attn_rate(const HwProfile *hw, int t, bool backward, DtmDtype dtype);
/* A GEMM's FLOP/s at m x n x k (per batch item, `batch` items) on t
 * threads: interpolated from the calibrated points (log-space inverse
 * distance over the points of the nearest thread count; bf16 operands
 * (and f16 on a device profile) over the bf16 points when there are any,
 * else over the f32 ones), else
 * the dtype's peak times gemm_eff. */
double hw_gemm_rate(const HwProfile *hw, DtmDtype dtype, double m, double n, double k,
                    double batch, int t);
/* The factor of kernel class cls (its stream-curve time times it) at t
 * threads: the entry of the nearest measured thread count; a 16-bit
 * kernel (bf16, f16) takes the bf16 entries where cls has any; 1 when cls
 * was not measured. */
double hw_kernel_factor(const HwProfile *hw, const char *cls, int t, DtmDtype dtype);
/* The rate a GEMM on t threads reads operands not in cache at (the
 * nearest measured t), or 0 when not measured or l2_size is not set. */
double hw_gemm_cold_bw(const HwProfile *hw, int t);
/* Whether hw has calibrated points of bf16 GEMMs. */
bool hw_has_bf16_gemm(const HwProfile *hw);
/* The calibrated collective of kind over n ranks (nearest measured n of
 * the kind), or NULL. */
const HwCollPoint *hw_coll(const HwProfile *hw, int kind, int64_t n);

/* Writes the profile as an override file that hw_parse_overrides reads back
 * to the same values. */
void hw_print(FILE *out, const HwProfile *hw);

#endif
