/* accumulate.h - pass "accumulate": weight gradients summed over
 * micro-batches by their GEMMs (see accumulate.c).
 *
 * On the final per-rank program: add(acc, matmul_wgrad(x, dy)) becomes
 * matmul_wgrad_acc(acc, x, dy), in place in acc's buffer (a GEMM with
 * beta = 1), where that changes nothing but the sum's rounding.
 */
#ifndef DTM_ACCUMULATE_H
#define DTM_ACCUMULATE_H

#include "passes/passes.h"

bool pass_accumulate(IrModule *m, Diag *d, const PassOptions *opt);

#endif
