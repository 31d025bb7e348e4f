/* calibrate.h - `dtmc calibrate`: this machine's hardware profile. */
#ifndef DTM_CALIBRATE_H
#define DTM_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "tools/hw.h"

extern const char calibrate_help[];
/* Returns the exit status. */
int calibrate_main(int argc, char **argv);
/* The built-in profile (tools/hw.c) a GPU of that name (cudaDeviceProp's
 * name, as `--calibrate-gemm` reports it) starts from: its peaks and
 * links, which one GPU cannot measure; NULL when none matches. */
const char *calibrate_gpu_base(const char *name);
/* The profile `calibrate --device cuda` makes of what it measured, here
 * from files: grid[0..len) (its binary's --calibrate-gemm output: a
 * `# device: NAME` line, mem_size, the cuBLAS points, the feed's rates),
 * the --profile-actions files of its f32 runs with each run's step
 * seconds, and its bf16 run's (NULL: none).  Into *hw, the GPU's name
 * into gpu; false after printing to err.  (calibrate itself makes the
 * same of the faster of two runs of each.) */
bool calibrate_gpu_profile(HwProfile *hw, const char *grid, size_t len, const char *const *prof,
                           const double *step, int nprof, const char *prof16, char *gpu,
                           size_t ngpu, FILE *err);

#endif
