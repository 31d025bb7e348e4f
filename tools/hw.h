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

typedef struct HwProfile {
	char name[HW_NAME_LEN];
	/* dense peak FLOP/s per compute dtype, indexed by DtmDtype
	 * (DTM_F32, DTM_BF16, DTM_F16; DTM_I32 is counted at the f32 rate) */
	double peak_flops[4];
	double mem_bw;    /* device memory bandwidth, bytes/s */
	double mem_bytes; /* device memory size, bytes */
	HwLink intra, inter;
	int devices_per_node;
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

/* Writes the profile as an override file that hw_parse_overrides reads back
 * to the same values. */
void hw_print(FILE *out, const HwProfile *hw);

#endif
