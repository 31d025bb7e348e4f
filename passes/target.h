/* target.h - what the passes must know of the machine that runs their
 * output, and all they know of it: the passes never include the runtime's
 * headers.  codegen/plan_build.c, which turns the passes' output into the
 * runtime's Plan, checks with static_asserts that these agree with
 * runtime/plan.h.
 */
#ifndef DTM_PASSES_TARGET_H
#define DTM_PASSES_TARGET_H

/* Buffers one action of the plan names, its inputs and its output
 * (DTM_MAX_ARGS): a fused group, a bucket's concat and a grad_norm chunk
 * each read at most PASS_MAX_ACTION_ARGS - 1 values. */
#define PASS_MAX_ACTION_ARGS 8

#endif
