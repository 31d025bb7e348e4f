/* mlir_text.h - the MLIR text writer shared by the global export
 * (mlir_export.c) and the per-rank one (mlir_export_local.c).
 *
 * Internal to those two files: the writer's state and the helpers both
 * need, so an op is written the same way whichever program holds it.
 */
#ifndef DTM_TOOLS_MLIR_TEXT_H
#define DTM_TOOLS_MLIR_TEXT_H

#include <stdbool.h>
#include <stdio.h>

#include "ir/ir.h"

typedef struct Ex {
	const IrModule *m;
	FILE *body;  /* the function's body */
	FILE *decls; /* the declared functions */
	int tmp;     /* %tN counter */
	/* declared callee signatures, "OP|types" -> @dtm.OP.N */
	char **sigs;
	int nsigs, capsigs;
	bool *sharded; /* [nnodes]: users read its mesh.shard, %sN, not %vN */
	bool ok;
	char err[256];
} Ex;

/* tensor<AxBxf32>, tensor<f32> */
void put_type(FILE *f, int rank, const int64_t *shape, IrDtype t);
void ntype(FILE *f, const IrNode *n);
/* A string attribute's body, quoted and escaped for MLIR. */
void put_str(FILE *f, const char *s);
/* dtm's text of n's attributes (malloc'd; NULL when out of memory). */
char *attr_text(const IrModule *m, const IrNode *n);
/* ` {dtm.attr = "...", dtm.name = ...}`: n's attributes, name, stage and block. */
void put_dtm_attr(Ex *e, FILE *f, const IrNode *n);
/* @dtm.OP.N for n's op and types into name, declared once per signature;
 * n's operands are read from e->m. */
void mlir_callee(Ex *e, const IrNode *n, char *name, size_t cap);
/* %vID = func.call of n's @dtm.OP.N with n's operands and dtm.attr. */
void call_op(Ex *e, const IrNode *n);
/* n as the ops of the upstream dialects, or call_op (params and inputs
 * are the function's arguments: nothing). */
void mlir_node(Ex *e, const IrNode *n);
/* <@mesh, [[0], [], [1, 2]], partial = sum[3]>: placement p as MLIR's
 * sharding (mesh.shard's, or #mesh.shard<...> after the #mesh.shard). */
void put_sharding(Ex *e, FILE *f, const Placement *p);
/* `module attributes {...} {` and `mesh.mesh @mesh`. */
void mlir_header(Ex *e, FILE *out);

#endif
