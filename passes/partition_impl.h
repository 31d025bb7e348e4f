/* partition_impl.h - shared between partition.c (the driver: leaves,
 * reshards, optimizer ops), partition_rules.c (the per-op local rules) and
 * partition_twin.c (replaying a repeated node's partition); not part of
 * the pass's interface. */
#ifndef DTM_PARTITION_IMPL_H
#define DTM_PARTITION_IMPL_H

#include "passes/partition.h"

#include <stdint.h>
#include <string.h>

/* What an op needs and produces.  req[i] is the placement operand i must
 * have (of the operand's global shape); res is the placement of the local
 * result (of the node's global shape); at the local node's attributes; a
 * non-zero scale multiplies the local result (means over split dims). */
typedef struct PartRule {
	Placement *req;
	Placement res;
	IrAttr at;
	double scale;
	IrOp op; /* non-zero: the local op, when not the node's (embed_vp) */
} PartRule;

/* The rule of a non-leaf, non-optimizer node.  T is the node's target
 * placement (known == false: follow the operands).  cur[i] is operand i's
 * placement now.  Returns false with the reason in why when the op has no
 * rule. */
bool part_rule(const IrModule *m, const IrNode *n, const Placement *T, const Placement *cur,
               PartRule *r, char *why, size_t cap);

/* ---- the driver's state (partition.c), read by partition_twin.c ---- */

/* A reshard made of a global value: the local node holding it under the
 * placement of id p. */
typedef struct Cached {
	uint32_t p;
	int id;
	struct Cached *next;
} Cached;

typedef struct PlanMemo PlanMemo; /* partition.c */
typedef struct CeMemo CeMemo;     /* partition.c */
typedef struct TwClass TwClass;   /* partition_twin.c */
typedef struct TwSlot TwSlot;     /* partition_twin.c */
typedef struct TwRecNode TwRecNode;

/* A reshard looked up while a node's partition is recorded. */
enum { TW_MAXEV = 16 };
typedef struct TwRecEv {
	int g;           /* the global value */
	const Cached *c; /* the entry found or made */
	bool hit;
} TwRecEv;

typedef struct Part {
	IrModule *m;     /* the global module; its nodes are read, not changed */
	IrModule *out;   /* the new node list */
	Diag *d;
	bool fill;
	int *map;        /* global id -> local id holding its value at target */
	/* global id -> the placement id of local node map[id], which does not
	 * change once made (out shares m's placement table) */
	uint32_t *mplace;
	/* global id -> index in wants of its optimizer step's param placement
	 * id, or -1 */
	int *wantix;
	uint32_t *wants;
	int nwants, capwants;
	/* placement id -> its canonical one's (pass_placement_canon), 0 not
	 * made yet */
	uint32_t *canon;
	uint32_t ncanon;
	Cached **cache;  /* global id -> reshards made of it */
	CeMemo *ce;
	int nce, capce;
	uint32_t live;   /* the mesh axes of more than one rank */
	PlanMemo *memo;  /* open addressing, capmemo a power of two */
	int nmemo, capmemo;
	/* twins (partition_twin.c): off under fill; global id -> the value
	 * signature of its node, -1 none */
	bool twins;
	int *vsig;
	int last; /* the class of the node before, or -1 */
	TwClass *classes;
	int nclasses, capclasses;
	TwSlot *ctab, *vtab; /* classes and value signatures, open addressing */
	int capctab, capvtab, nvsig;
	int *vrep;           /* value signature -> a global node that has it */
	int capvrep;
	/* recording: on while one node is partitioned the normal way */
	bool rec, rec_bad;
	int rec_base;
	TwRecNode *rn;
	int nrn, caprn;
	TwRecEv re[TW_MAXEV];
	int nre;
	Arena scratch;
} Part;

/* partition.c: n partitioned the normal way; local node id recorded as
 * holding n's value (false when id < 0). */
bool part_node(Part *p, const IrNode *n);
bool part_finish(Part *p, const IrNode *n, int id);

/* partition_twin.c: n partitioned by replaying a twin's when one fits,
 * else by part_node; and what part_node's emits and reshard lookups tell
 * the recording while p->rec is on. */
bool part_twin(Part *p, const IrNode *n);
void part_rec_node(Part *p, int like, int origin);
void part_rec_event(Part *p, int g, const Cached *c, bool hit);

#endif
