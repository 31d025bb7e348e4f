/* partition_impl.h - shared between partition.c (the driver: leaves,
 * reshards, optimizer ops) and partition_rules.c (the per-op local rules);
 * not part of the pass's interface. */
#ifndef DTM_PARTITION_IMPL_H
#define DTM_PARTITION_IMPL_H

#include "partition.h"

/* What an op needs and produces.  req[i] is the placement operand i must
 * have (of the operand's global shape); res is the placement of the local
 * result (of the node's global shape); at the local node's attrs; a
 * non-zero scale multiplies the local result (means over split dims). */
typedef struct PartRule {
	Placement *req;
	Placement res;
	IrAttrs at;
	double scale;
	IrOp op; /* non-zero: the local op, when not the node's (embed_vp) */
} PartRule;

/* The rule of a non-leaf, non-optimizer node.  T is the node's target
 * placement (known == false: follow the operands).  cur[i] is operand i's
 * placement now.  Returns false with the reason in why when the op has no
 * rule. */
bool part_rule(const IrModule *m, const IrNode *n, const Placement *T, const Placement *cur,
               PartRule *r, char *why, size_t cap);

#endif
