/* propagate_impl.h - shared between propagate.c (the driver: kinds,
 * requirements, choosing, memo tables, sweeps) and propagate_rules.c (each
 * op's factor view and the factor shardings built from it); not part of
 * the pass's interface. */
#ifndef DTM_PROPAGATE_IMPL_H
#define DTM_PROPAGATE_IMPL_H

#include "passes/propagate.h"

#include <stddef.h>
#include <string.h>

#define PR_MAXF (3 * IR_MAX_RANK) /* factors of one op */
#define PR_MAXOPS 16              /* operands a rule describes; more: unconstrained */

/* An op's factor view.  opf/resf: the factor of each operand / result dim,
 * -1 = must stay unsplit. */
typedef struct Rule {
	bool ok;                 /* false: no rule; the node is not a free one */
	int nf, nops;
	int8_t opf[PR_MAXOPS][IR_MAX_RANK];
	int8_t resf[IR_MAX_RANK];
	bool reduce[PR_MAXF];    /* contracted: split -> result partial */
	bool strict[PR_MAXF];    /* must divide evenly (reshape groups) */
	IrRed red;
	int heads_f;             /* attention: its parts must divide heads */
	int64_t heads;
	bool linear;             /* add, sub, neg, scale, permute, reshape: operands
	                          * partial (sum) over the same axes pass it through */
	uint8_t order[PR_MAXOPS]; /* operand priority when merging */
} Rule;

/* A factor sharding: the mesh axes of each factor. */
typedef struct Assign {
	uint8_t n[PR_MAXF];
	uint32_t used;    /* axes taken, partial ones included */
	uint32_t partial; /* add/sub: the pass-through partial (sum) */
	bool cover[PR_MAXF]; /* prop_assign_from: the placement names this factor */
	bool lock[PR_MAXF];  /* unsplit on purpose: merges leave it alone */
	/* last: only ax[f][0 .. n[f]) is ever read, so prop_assign_clear leaves
	 * it as it is (choose clears an Assign per candidate) */
	uint8_t ax[PR_MAXF][IR_MAX_AXES];
} Assign;

static inline void prop_assign_clear(Assign *a)
{
	memset(a, 0, offsetof(Assign, ax));
}

/* Node n's rule (its operands read from m). */
void prop_rule_build(const IrModule *m, const IrNode *n, Rule *r);
/* What placement p of operand `slot` (-1: the result) says of the
 * factors. */
void prop_assign_from(const Rule *r, int slot, const Placement *p, Assign *a);
/* Takes src's axes for each factor dst leaves unsplit, unless an axis is
 * taken already.  only_reduce: contracted factors only, and only axes in
 * `allow`.  Returns whether anything was taken. */
bool prop_merge(const Rule *r, Assign *dst, const Assign *src, bool only_reduce, uint32_t allow);
/* The placement a gives operand `slot` (-1: the result; partial over the
 * contracted factors' axes unless resolved). */
void prop_project(const Rule *r, const Assign *a, int slot, int rank, bool resolved,
                  Placement *out);
/* Drops the axes of a factor, minor first, until every dim it names
 * divides evenly (or, with uneven shards, unless strict, has a row per
 * shard at most ragged) and attention's heads split whole. */
void prop_repair(const IrModule *m, const IrNode *n, const Rule *r, Assign *a);

#endif
