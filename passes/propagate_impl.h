/* propagate_impl.h - shared between propagate.c (the driver: kinds,
 * requirements, choosing, sweeps), propagate_rules.c (each op's factor
 * view and the factor shardings built from it) and propagate_memo.c (the
 * memo seam); not part of the pass's interface. */
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
	int kv_f;                /* grouped-query attention: its parts must */
	int64_t kv_heads;        /* divide kv_heads (k, v's own factor) */
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

/* ---- tables keyed by int arrays (propagate_memo.c) ---- */

/* An open-addressing table from int-array keys (copied into the arena) to
 * an int: the memo's contexts, and propagate.c's shapes and signatures. */
typedef struct PropTabEnt {
	uint64_t h;
	const int *key; /* NULL: an empty slot */
	int len;
	int val;
} PropTabEnt;

typedef struct PropTab {
	PropTabEnt *ent;
	int cap, n; /* cap: a power of two */
} PropTab;

/* The entry of key k: found (*found), or added with val -1 (its key
 * copied).  NULL when out of memory. */
PropTabEnt *prop_tab_get(Arena *a, PropTab *t, const int *k, int len, bool *found);

/* ---- the memo seam (propagate_memo.c) ----
 * choose() and requirement() asked of the memo first; what it does not
 * know worked out by propagate.c and told to it.  Off (asked so, or out
 * of memory) every question is answered MEMO_OFF and propagate.c computes
 * everything, to the same placements (test_memo_identity). */

/* A use of a node: operand `slot` of node `node`. */
typedef struct Use {
	int node, slot;
} Use;

/* What the memo's contexts are made of: propagate.c's flat view of the
 * program, read only, and the module whose nodes' placements it reads. */
typedef struct PropGraph {
	const IrModule *m;
	const int *sig;          /* [nnodes]: the node's signature (sig_key) */
	const int *ostart, *opv; /* operands of node i: opv[ostart[i] ..) */
	const int *ustart;       /* uses of node i: uses[ustart[i] ..) */
	const Use *uses;
} PropGraph;

/* What choose() decided for one context: the placement (its id in the
 * module's table), and the index in its list of sources of the one it is
 * from (-1: the first known operand). */
typedef struct Choice {
	uint32_t pid;
	int src;
} Choice;

typedef struct PropMemo PropMemo;

typedef enum MemoAnswer {
	MEMO_OFF,  /* the memo is off: compute directly, tell it nothing */
	MEMO_HIT,  /* the answer, as worked out before */
	MEMO_MISS, /* not known: work it out and keep it (memo_*_keep) */
} MemoAnswer;

/* The memo over g (its arrays must outlive it), in arena a; off unless
 * on.  NULL when out of memory. */
PropMemo *memo_new(Arena *a, const PropGraph *g, bool on);
bool memo_on(const PropMemo *t);
/* Out of memory elsewhere: from now on compute everything. */
void memo_off(PropMemo *t);
/* The placement id (-1: none) that the user of `use` needs its operand
 * in, on a hit; a miss wants memo_requirement_keep(t, use, req) next. */
MemoAnswer memo_requirement(PropMemo *t, int use, int *req);
void memo_requirement_keep(PropMemo *t, int use, int req);
/* Node's choice, given its users' requirements req[] (placement ids, -1
 * none, one per use), on a hit; a miss wants memo_choose_keep next. */
MemoAnswer memo_choose(PropMemo *t, int node, const int *req, Choice *c);
void memo_choose_keep(PropMemo *t, const Choice *c);
/* Whether fix() of node read `seen` last time too (then it would place
 * the node alike); remembers seen.  Always false when off. */
bool memo_fix(PropMemo *t, int node, int seen);
/* Node's placement changed: what reads it (its and its users'
 * requirements) is looked up again. */
void memo_placed(PropMemo *t, int node);
/* Placements were set behind memo_placed's back: nothing known is kept
 * as current. */
void memo_forget(PropMemo *t);
/* Questions answered from the memo, for the tests. */
long memo_hits(const PropMemo *t);

#endif
