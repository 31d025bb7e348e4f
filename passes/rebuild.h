/* rebuild.h - rewriting a per-rank module node by node, with new nodes
 * inserted between the old ones (passes/bucket.c, passes/coalesce.c).
 *
 * A pass that groups collectives rebuilds the node list once: the old
 * nodes it keeps are adopted in order (rb_adopt: the node itself moves
 * over, its operands remapped through map[], its annotations copied), and
 * at the points it chooses it adds new nodes (rb_add).  rb_finish remaps
 * the module's loss and choose points and hands it the new list.
 */
#ifndef DTM_PASSES_REBUILD_H
#define DTM_PASSES_REBUILD_H

#include "passes/passes.h"

typedef struct Rebuild {
	IrModule *m;      /* the module being rewritten (read) */
	IrModule *out;    /* the new node list */
	int *map;         /* old id -> new id, -1 not yet */
	int *later, nlater; /* adopted nodes whose place_from comes later */
	Diag *d;
	const char *pass; /* for errors: "bucket: out of memory" */
} Rebuild;

/* Starts rebuilding m with room for `room` nodes (capped at
 * IR_MAX_NODES; grown if exceeded).  false: out of memory (reported). */
bool rb_begin(Rebuild *rb, IrModule *m, Diag *d, const char *pass, size_t room);

/* Old node i becomes out's next node. */
bool rb_adopt(Rebuild *rb, int i);

/* A new node in out like old node like_id (its location, dtype, stage,
 * block; place_from ops[0]): with infer its type is inferred, else the
 * caller sets it.  NULL: out of memory or a type error (reported). */
IrNode *rb_add(Rebuild *rb, IrOp op, const int *ops, int nops, int like_id, bool infer);

/* Infers x's type (after the caller set its attributes); false: a fault
 * (reported). */
bool rb_infer(Rebuild *rb, IrNode *x, SrcLoc loc);

/* out's node x takes old node g's identity: its name, role, placement,
 * padding, choose point, placement location and link (the param mapped);
 * map[g] becomes x. */
void rb_take(Rebuild *rb, IrNode *x, int g);

/* x's placement: replicated rank-r (x's rank), pending `partial` with op. */
void rb_flat_place(IrModule *out, IrNode *x, uint32_t partial, IrRed op);

/* Ends the rebuild: ok, the origins rb_adopt deferred are remapped and m
 * takes out's nodes; false (or not ok): m is left as it was.  Frees map. */
bool rb_finish(Rebuild *rb, bool ok);

#endif
