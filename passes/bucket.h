/* bucket.h - pass "bucket": DDP gradient buckets (see bucket.c).
 *
 * After `coalesce`: the per-gradient all_reduces over the same mesh
 * axes, reduction and dtype become one all_reduce per bucket of about
 * IrTrain.bucket_bytes, over a flat buffer packed by reshape + concat and
 * unpacked by slice + reshape, filled in the reverse order of the params'
 * first use and reduced right after the bucket's last gradient.
 */
#ifndef DTM_BUCKET_H
#define DTM_BUCKET_H

#include "passes/passes.h"

bool pass_bucket(IrModule *m, Diag *d, const PassOptions *opt);

#endif
