/* partition_impl.h - shared between partition.c (the driver: leaves,
 * reshards, optimizer ops), partition_rules.c (the per-op local rules),
 * partition_ring.c (ring attention's block ops) and partition_twin.c (the
 * twins seam: replaying a repeated node's partition); not part of the
 * pass's interface. */
#ifndef DTM_PARTITION_IMPL_H
#define DTM_PARTITION_IMPL_H

#include "passes/partition.h"

#include <stdint.h>
#include <string.h>

/* What an op needs and produces.  req[i] is the placement operand i must
 * have (of the operand's global shape); res is the placement of the local
 * result (of the node's global shape); at the local node's attributes; a
 * non-zero scale multiplies the local result (means over split dims), or
 * with scale_dl its scalar operand 0, which the op is linear in
 * (cross_entropy_bwd: a 16-bit result is then rounded once, as on one
 * device). */
typedef struct PartRule {
	Placement *req;
	Placement res;
	IrAttr at;
	double scale;
	bool scale_dl;
	IrOp op; /* non-zero: the local op, when not the node's (embed_vp) */
	bool user; /* part_rule failed on the program, not on the compiler:
	            * why is a user error at the node (context_parallel) */
} PartRule;

/* The rule of a non-leaf, non-optimizer node.  T is the node's target
 * placement (known == false: follow the operands).  cur[i] is operand i's
 * placement now.  Returns false with the reason in why when the op has no
 * rule. */
/* The local positions (each dim's ceil(n / parts), padding included) of
 * the first npos dims of a value shaped like `like` under pl, over all of
 * them: what a loss's local mean is scaled by before its partial sum (1 /
 * the group size where they split evenly; padding positions add 0). */
double part_positions_scale(const Mesh *mesh, const Placement *pl, const IrNode *like, int npos);
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
typedef struct Twins Twins;       /* partition_twin.c */

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
	/* the twins seam (partition_twin.c), NULL: off (under fill, or asked
	 * so); the pass reads nothing of it, only calls it */
	Twins *tw;
	Arena scratch;
} Part;

/* partition.c: n partitioned the normal way; local node id recorded as
 * holding n's value (false when id < 0). */
bool part_node(Part *p, const IrNode *n);
bool part_finish(Part *p, const IrNode *n, int id);
/* partition.c: a new local node holding a shard, under pl, of a value
 * shaped like `like` (global), attributes at (NULL: none), its local type
 * inferred and checked against pl; -1 on error (reported). */
int part_emit(Part *p, IrOp op, const int *ops, int nops, const IrAttr *at,
              const IrNode *like, const Placement *pl, int origin);
/* partition.c: local node id of the module being made. */
IrNode *part_loc_node(Part *p, int id);
/* partition_ring.c: attention or attention_bwd that rule r marked ring
 * (attn.ring) as block ops round the ring; ops are the local operands.
 * Returns the local result, or -1 (reported). */
int part_ring(Part *p, const IrNode *n, const int *ops, const PartRule *r);

/* ---- the twins seam (partition_twin.c) ----
 * Replaying a repeated node's partition.  Per node the driver asks
 * twin_replay first; on TWIN_MISS it runs part_node, whose emits and
 * reshard lookups it tells the seam (twin_rec_*), and then twin_record.
 * Every call takes tw == NULL as "off": a miss, nothing recorded, so the
 * output is part_node's for every node (test_replay_identity compares). */
typedef enum TwinResult {
	TWIN_MISS,   /* not replayed: partition n the normal way */
	TWIN_DONE,   /* replayed: n's value is mapped (part_finish) */
	TWIN_FAILED, /* an error, reported */
} TwinResult;

/* The seam for a module of nnodes global nodes; NULL: out of memory. */
Twins *twin_new(int nnodes);
void twin_free(Twins *tw);
/* n partitioned by copying what a twin's partition made, when one of its
 * class fits; on a miss, the recording of the normal path starts. */
TwinResult twin_replay(Twins *tw, Part *p, const IrNode *n);
/* n was partitioned the normal way: what it made kept as a variant of its
 * class (while the class has room), and its value signature set. */
void twin_record(Twins *tw, const Part *p, const IrNode *n);
/* part_node's part_emit() made a local node (like: the global node it took its
 * location and stage from; origin: its place_from). */
void twin_rec_node(Twins *tw, int like, int origin);
/* part_node looked up a reshard of global g: c, the entry found (hit) or
 * made (NULL when it could not be kept). */
void twin_rec_event(Twins *tw, int g, const Cached *c, bool hit);
/* How many nodes were replayed. */
int twin_replays(const Twins *tw);

#endif
