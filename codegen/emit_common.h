/* emit_common.h - what the C and the CUDA code generators (emit_c.c,
 * emit_cuda.c, emit_cuda_ops.c) both write: number literals, the
 * broadcast index of a fused loop's operand, the statement of one member
 * of a fused elementwise group, and the sorted listing of a kernel
 * library's headers.  Each back end keeps its own spelling (function
 * names, the literal of a NaN) and passes it in; the logic is here once.
 */
#ifndef DTM_EMIT_COMMON_H
#define DTM_EMIT_COMMON_H

#include <stdio.h>

#include "ir/ir.h"
#include "support/arena.h"
#include "passes/fuse.h"

/* ---- literals ---- */

/* v as a C literal that reads back as the same value: "%.9g" (f32, with
 * an 'f' suffix) or "%.17g", and ".0" when the digits alone would make an
 * integer.  A NaN or an infinity is the back end's name for it, nan or
 * [-]inf (NULL: as "%g" prints them). */
void cg_put_float(FILE *out, double v, bool f32, const char *nan, const char *inf);

/* ---- the generic kernels' attributes ---- */

/* A node's attributes as the generic kernels take them (DtmkArgs,
 * codegen/cpu/dtmk.h): each family's fields at the positions its kernels
 * read (ints: axes, a permutation, {axis, start, end}, {heads, causal},
 * {salt, mbs, mb, bdim, binner}, a collective's dims, {nesterov}; f: a
 * scalar, eps, a dropout rate, an init's two arguments; fx: beta1 or
 * momentum, beta2, eps, weight_decay, clip; flag: keepdims, master). */
/* CgKernelAttrs.mesh_axes: the axes numbered last from this bit up
 * (codegen/cpu/dtmk.h's DTMK_AXES_MINOR) */
#define CG_AXES_MINOR 16

typedef struct CgKernelAttrs {
	int64_t ints[9]; /* DtmkArgs.ints: as many */
	int nints;
	double f[2], fx[6];
	uint32_t mesh_axes; /* DtmkArgs.mesh_axes */
	IrRed red;
	bool flag;
} CgKernelAttrs;
void cg_kernel_attrs(const IrNode *n, CgKernelAttrs *k);

/* ---- broadcasting in a fused loop ---- */

/* How operand x is indexed inside a loop over s's elements. */
typedef enum CgBcast {
	CG_BC_FULL,   /* x[i] */
	CG_BC_SCALAR, /* x[0] */
	CG_BC_SUFFIX, /* x[i % period]: x is s's trailing dims */
	CG_BC_PREFIX, /* x[i / period]: x is s's leading dims */
	CG_BC_OTHER,  /* the general strided index */
} CgBcast;

CgBcast cg_bcast_kind(const IrNode *x, const IrNode *s, int64_t *period);
/* x's shape right-aligned to s's rank, 1 in the missing leading dims. */
void cg_bcast_shape(const IrNode *x, const IrNode *s, int64_t *xs);

/* ---- fused elementwise members ---- */

/* A back end's spelling of the f32 expressions of elementwise ops: its
 * kernel library names relu, gelu, silu, sigmoid, round_bf16, round_f16
 * and dropout PREFIX NAME SUFFIX (dtmk_relu_f, dtmc_relu), and dropout
 * takes the kernel's context first. */
typedef struct CgExprDialect {
	const char *name; /* "C", "CUDA": in the internal error */
	const char *prefix, *suffix;
	const char *ctx;    /* dropout's first argument */
	const char *to_int; /* the cast of an f32 to the i32 storage type */
	const char *i64;    /* the 64-bit integer type */
	const char *coords; /* the rank's mesh coordinates, an array */
	void (*put_f32)(FILE *out, double v);
} CgExprDialect;

/* Writes `INDENTconst float tID = EXPR;` for member n of module m's fused
 * group with root `root` (-1: a lone elementwise op), the loop index
 * being i.  An operand computed in the group is its tID; any other is xJ,
 * J its index among the kernel's external inputs ext[0..next).  A dropout
 * whose mask index is not i (a shard, a micro-batch: ir/dropout.c)
 * computes it first, as gID.  False after reporting an op without an
 * expression to d. */
/* The key that says two kernels are the same function: text[0, n) with
 * the temporaries cg_put_ew_member names after nodes (t<node>, g<node>)
 * renumbered in order of first appearance; with name, also comments
 * dropped and the identifier name (the kernel's own) replaced by "@K".
 * Other identifiers and numbers are kept.  In a, NUL-terminated. */
char *cg_canon_text(Arena *a, const char *text, size_t n, const char *name, size_t *outn);

/* A set of keys (kernel texts), numbered in order of first addition: the
 * C and CUDA back ends' one function per distinct kernel.  Sized for n
 * additions; the keys stay the caller's (in a).  cg_keyset_add returns
 * the key's number and whether it was new. */
typedef struct CgKeySet CgKeySet;
CgKeySet *cg_keyset_new(Arena *a, int n);
int cg_keyset_add(CgKeySet *ks, const char *key, size_t len, bool *added);

bool cg_put_ew_member(FILE *out, const char *indent, const CgExprDialect *dl, const IrModule *m,
                      const FusePlan *fp, const IrNode *n, int root, const int *ext, int next,
                      Diag *d);

/* ---- kernel libraries ---- */

/* The files of dir named PREFIX*SUFFIX, in name order, into names (cap at
 * most; each malloc'd, the caller frees them).  Returns their number, or
 * -1 when dir cannot be read. */
int cg_list_dir(const char *dir, const char *prefix, const char *suffix, char **names, int cap);

#endif
