/* pipeline_impl.h - what the files of pass "pipeline" share: the pass's
 * state (Pl), a rank's program before it becomes nodes (EntList), and the
 * steps, one file each:
 *   pipeline.c           the pass: one walk over the nodes indexes them,
 *                        then the steps below, then the module replaced
 *   pipeline_order.c     each rank's program in its schedule's order
 *   pipeline_sends.c     per pair of ranks, the sends in the receiver's order
 *   pipeline_simulate.c  the programs run against each other: no deadlock
 *   pipeline_build.c     the programs made IR nodes (materialise)
 * and the helpers pass "stages" (stages.c) shares.  Not an interface:
 * only passes/stages.c and passes/pipeline*.c include it.
 */
#ifndef DTM_PASSES_PIPELINE_IMPL_H
#define DTM_PASSES_PIPELINE_IMPL_H

#include <string.h>

#include "passes/pipeline.h"
#include "passes/schedule.h"

static inline bool pl_is_leaf_op(IrOp op)
{
	return op == IR_OP_PARAM || op == IR_OP_INPUT || op == IR_OP_CONST || op == IR_OP_STATE ||
	       op == IR_OP_LOSS_SCALE;
}

/* Cheap enough to recompute on every rank that reads it (of leaves only:
 * concat is ZeRO-3's coalesced unit, gathered whole, whose params another
 * stage may read too, as GPT's tied embedding on the head's stage). */
static inline bool pl_is_view_op(IrOp op)
{
	return op == IR_OP_RESHAPE || op == IR_OP_SLICE || op == IR_OP_PERMUTE || op == IR_OP_CAST ||
	       op == IR_OP_CONCAT;
}

/* Where the schedule was chosen, else the micro-batch count: what the
 * schedule's errors point at. */
static inline SrcLoc pl_schedule_loc(const IrModule *m)
{
	const SrcLoc *loc = m->train.loc;
	return loc[IR_TRAIN_SCHEDULE].file ? loc[IR_TRAIN_SCHEDULE] : loc[IR_TRAIN_MICROBATCHES];
}

static inline int pl_virtual_stages(const IrModule *m)
{
	if (m->train.schedule == IR_PIPE_INTERLEAVED && m->train.virtual_stages > 1)
		return (int)m->train.virtual_stages;
	return 1;
}

/* ---- pass "pipeline" ---- */

enum { RANK_ALL = -1 };

/* Pl.home: a value's rank; or every rank's (RANK_ALL), or leafy. */
enum { HOME_ALL = RANK_ALL, HOME_LEAFY = -2 };

typedef enum EntKind { E_NODE, E_SEND, E_RECV, E_LOSS, E_SYNC } EntKind;

/* One step of a rank's program before it becomes nodes. */
typedef struct Ent {
	EntKind kind;
	int node;  /* E_NODE: the node; E_SEND/E_RECV: the value moved (for a
	            * param sync: its last update); E_SYNC: the param */
	int peer;  /* E_SEND: to; E_RECV/E_SYNC: from */
} Ent;

typedef struct EntList {
	Ent *e;
	int n, cap;
} EntList;

/* What building the ranks asks of a node over and over, a byte a node:
 * the walks over every node (one per rank) then read a few compact
 * arrays, not one ~500-byte IrNode each. */
enum {
	NF_PPCOLL = 1 << 0,   /* a pp collective: every rank runs it at the same point */
	NF_GNORM = 1 << 1,    /* grad_norm on every rank: see pl_reads() */
	NF_ITEM = 1 << 2,     /* of a schedule item (else free): see the walk */
	NF_COMPUTED = 1 << 3, /* has an operand that is not leafy */
};

typedef struct Pl {
	IrModule *m;
	Diag *d;
	Arena a;         /* every array below, and the entry lists: the pass's
	                  * scratch, freed at its end */
	int P, V, M, ax, nn;
	int *rank;       /* [nn]: rank of the node, or RANK_ALL */
	int *phase;      /* [nn] */
	int8_t *home;    /* [nn]: the node's rank, or HOME_ALL, or HOME_LEAFY */
	uint64_t *dest;  /* [nn]: ranks that receive the value */
	uint64_t *users; /* [nn]: ranks using a leafy value */
	int *upd;        /* [nn]: per param, its last in-place update, or -1 */
	uint64_t *sync;  /* [nn]: per param, ranks its update is sent to */
	int *syncof;     /* [nn]: per last update, the param, or -1 */
	uint8_t *nf;     /* [nn]: NF_* */
	int *mb;         /* [nn]: node_mb() */
	int *stage;      /* [nn]: IrNode.stage, the model chunk */
	int *opstart;    /* [nn + 1]: node i's operands are opv[opstart[i] ..
	                  * opstart[i + 1]) */
	int *opv;
	/* onv[onstart[r] .. onstart[r + 1]): the nodes on rank r (not
	 * leafy; its own or every rank's), in node order */
	int *onstart, *onv;
	int *inputs, ninputs; /* the inputs, in node order */
	int *syncp, nsyncp;   /* the params whose update is sent somewhere */
	/* per rank being built: placed[i] == stamp (r + 1) when i is placed
	 * there, recvd[u] == stamp when it receives u; no clearing between
	 * ranks */
	uint8_t *placed, *recvd, stamp;
	int *htouch, nhtouch; /* the u with head[u] set, to reset */
	int *lastr;      /* [nn]: the last rank that placed the node (ranks
	                  * are built in order); unset for nodes none places */
	/* The free nodes that may run ahead of the end of the step (see
	 * pl_build_rank) wait for their local operands: cnt[i] of those are not
	 * placed yet; the users waiting on u are euser[e] for e = head[u],
	 * enext[e], ... (-1 ends); the ones waiting for nothing more are on a
	 * min-heap of ids, heap[0 .. nheap). */
	int *cnt, *head, *enext, *euser, nedge;
	int *heap, nheap;
	EntList *list;   /* [P] */
	/* per (a, b), at a * P + b: ns the sends rank a's list has for b,
	 * nq the values b's list receives from a (E_RECV, E_SYNC) */
	int *ns, *nq;
	int cur_work, cur_mb, cur_chunk; /* the item being placed, or cur_mb -1 */
	bool *wgrad;     /* [nn]: ZB-H1: backward work only param gradients need */
	bool failed;
} Pl;

/* Reports out of memory once; returns false. */
bool pl_oom(Pl *p);
/* Doubles l's room; false (reported) when out of memory. */
bool pl_grow(Pl *p, EntList *l);

static inline bool pl_push(Pl *p, EntList *l, EntKind k, int node, int peer)
{
	if (l->n == l->cap && !pl_grow(p, l))
		return false;
	l->e[l->n++] = (Ent){ k, node, peer };
	return true;
}

/* Is value u on another rank than r (so r receives it)? */
static inline bool pl_remote(const Pl *p, int u, int r)
{
	int h = p->home[u];
	return h >= 0 && h != r;
}

/* Operand u of node i read on rank r: false when the pipeline drops it
 * (grad_norm keeps the gradients its rank owns). */
static inline bool pl_reads(const Pl *p, int i, int u, int r)
{
	return !(p->nf[i] & NF_GNORM) || !pl_remote(p, u, r);
}

/* A node's micro-batch from its IrNode.mb; with one micro-batch (nothing
 * unrolled) every node is micro-batch 0's. */
static inline int pl_node_mb(const Pl *p, int mb)
{
	return mb >= 0 ? mb : p->M == 1 ? 0 : -1;
}

/* The schedule work a node of an item belongs to. */
static inline int pl_work_of(const Pl *p, int i)
{
	if (p->phase[i] == IR_PHASE_FORWARD)
		return SCHED_F;
	return p->wgrad && p->wgrad[i] ? SCHED_W : SCHED_B;
}

/* The item key of node i (micro-batch, model chunk, work), or -1 for a
 * node of no item of this pipeline. */
static inline int pl_item_key(const Pl *p, int i)
{
	int K = p->P * p->V;
	int mb = p->mb[i];
	if (mb < 0 || mb >= p->M || p->stage[i] < 0 || p->stage[i] >= K)
		return -1;
	return (mb * K + p->stage[i]) * 3 + pl_work_of(p, i);
}

/* Which nodes each item places, found once for every rank (an item's
 * nodes are all on the rank of its chunk): byitem[start[key] ..
 * start[key + 1]) lists item key's nodes in node order. */
typedef struct Items {
	int *start, *byitem;
} Items;

/* Rank r's program (p->list[r]) in its schedule's order: the items,
 * the free nodes as soon as they can run, the loss and the end of the
 * step; the messages it sends and receives counted in p->ns, p->nq
 * (pipeline_order.c). */
bool pl_build_rank(Pl *p, int r, const SchedItem *items, int nitems, const int *loss_rank,
                   const Items *it);
/* The value an entry receives, as the sender names it. */
static inline int pl_recv_key(const Pl *p, const Ent *e)
{
	return e->kind == E_SYNC ? p->upd[e->node] : e->node;
}
/* Per pair of ranks, the sender's sends moved into the receiver's order
 * (pipeline_sends.c). */
bool pl_order_sends(Pl *p);
/* The P programs run against each other; a deadlock or a mismatch is an
 * error (pipeline_simulate.c). */
bool pl_simulate(Pl *p);
/* The entry lists made out's nodes, rank by rank; mr: room for nn ids;
 * *loss_out gets the loss's new id (pipeline_build.c). */
bool pl_materialise(Pl *p, IrModule *out, int *mr, int *loss_out);

#endif
