/* partition_twin.c - the twins seam: replaying a twin's partition, for
 * passes/partition.c.
 *
 * The project keeps repeated structure (block bodies, micro-batches)
 * implicit in the IR; this file is where partition exploits it, behind
 * twin_replay / twin_record (partition_impl.h), with all of its state in
 * Twins.  The driver reads none of it, and without the seam (tw NULL)
 * every node takes the normal path.
 *
 * The program repeats: a model's layers are the same ops on the same
 * shapes and placements, once per micro-batch, forward and backward.  A
 * node's partition reads only its own op, attributes, type, placement and
 * role, and of each operand its type, placements (global and local) and
 * the reshards of it made so far.  So nodes equal in all that (a class;
 * operands compare by value signature: their type and placements,
 * interned) make the same local nodes, up to the ids those refer to.
 *
 * The first node of a class is partitioned the normal way (part_node) and
 * recorded: the local nodes it made, each operand as a reference (one of
 * those nodes, an operand's value, or a reshard of one found in the
 * cache), and the reshard cache lookups, hit or missed.  A later node of
 * the class whose operands stand in the same relation (the same ones
 * equal, the same reshards cached or not) copies those nodes with its own
 * references, location and stage, and makes the same cache entries: what
 * part_node would have made, without the rules, reshard plans and type
 * inference.  Anything else takes the normal path, recorded as another
 * variant of the class while it has room.  Output is the same either way
 * (test_replay_identity, scripts/plan-identity check it).
 */
#include "passes/partition_impl.h"
#include "support/hash.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A reference, in a recording, to a local node: none, the recording's own
 * k-th node, map[operand k], or the node a recorded cache hit found. */
enum { TW_NONE, TW_INT, TW_MAP, TW_HIT };
#define TW_REF(kind, k) ((int)((unsigned)(k) << 2) | (kind))
enum { EV_MISS, EV_HIT, EV_HIT_IN };
/* at most: operands of a node replayed (they are compared pairwise),
 * variants of a class */
enum { TW_MAXOPS = 16, TW_MAXVARS = 4 };

typedef struct TwEvent {
	int k;               /* operand index, or -1: the node itself */
	uint32_t pl;         /* the placement resharded to (the Cached entry's) */
	int kind;            /* EV_*: EV_HIT found before the node, EV_HIT_IN made by it */
	int res;             /* EV_MISS: a ref to the node made */
} TwEvent;

/* What partitioning one node made: nn local nodes from src on, copied
 * with their operands, origin and like (-1 the node, else its operand)
 * taken from the node replayed, and the reshards it looked up. */
typedef struct TwVar {
	int t, src, nn;
	int *like, *origin, *opstart, *ops; /* opstart [nn + 1] into ops */
	TwEvent *ev;
	int nev;
	int final;
	struct TwVar *next;
} TwVar;

typedef struct TwClass {
	int rep;  /* its first node */
	int vsig; /* the value signature of its nodes, -1 not yet */
	int succ; /* the class of the node after one of it, last seen; -1 */
	int nvars;
	bool dead; /* not replayable: always the normal path */
	TwVar *vars;
} TwClass;

typedef struct TwSlot {
	uint64_t h;
	int id; /* -1: empty */
} TwSlot;

/* A node made while recording. */
typedef struct TwRecNode {
	int like; /* global id */
	int origin;
} TwRecNode;

/* A reshard looked up while recording. */
enum { TW_MAXEV = 16 };
typedef struct TwRecEv {
	int g;           /* the global value */
	const Cached *c; /* the entry found or made */
	bool hit;
} TwRecEv;

/* The seam's state: all of it here, none in Part.  Its tables live in
 * its own arena; the local nodes and reshard cache entries a replay makes
 * are the partition's, made where part_node would make them. */
struct Twins {
	Arena ar;
	/* global id -> the value signature of its node, -1 none */
	int *vsig;
	int last; /* the class of the node before, or -1 */
	TwClass *classes;
	int nclasses, capclasses;
	TwSlot *ctab, *vtab; /* classes and value signatures, open addressing */
	int capctab, capvtab, nvsig;
	int *vrep;           /* value signature -> a global node that has it */
	int capvrep;
	/* between twin_replay's miss and twin_record: the node's class (-1
	 * none), and the recording, on while the node is partitioned the
	 * normal way and its class has room for another variant */
	int cur;
	bool rec, rec_bad;
	int rec_base;
	TwRecNode *rn;
	int nrn, caprn;
	TwRecEv re[TW_MAXEV];
	int nre;
	int replays; /* nodes replayed, for the tests */
};

Twins *twin_new(int nnodes)
{
	Twins *tw = calloc(1, sizeof *tw);
	if (!tw)
		return NULL;
	arena_init(&tw->ar);
	tw->last = -1;
	tw->cur = -1;
	tw->vsig = arena_alloc_raw(&tw->ar, sizeof *tw->vsig * (size_t)(nnodes > 0 ? nnodes : 1));
	if (!tw->vsig) {
		twin_free(tw);
		return NULL;
	}
	return tw;
}

void twin_free(Twins *tw)
{
	if (!tw)
		return;
	arena_free(&tw->ar);
	free(tw);
}

int twin_replays(const Twins *tw)
{
	return tw ? tw->replays : 0;
}

/* A node emit() made (like, the global node whose location and stage it
 * took; origin, its place_from): kept while recording. */
void twin_rec_node(Twins *tw, int like, int origin)
{
	if (!tw || !tw->rec)
		return;
	if (tw->nrn == tw->caprn) {
		int ncap = tw->caprn ? 2 * tw->caprn : 16;
		TwRecNode *nr = arena_alloc_raw(&tw->ar, sizeof *nr * (size_t)ncap);
		if (!nr) {
			tw->rec_bad = true;
			return;
		}
		if (tw->nrn)
			memcpy(nr, tw->rn, sizeof *nr * (size_t)tw->nrn);
		tw->rn = nr;
		tw->caprn = ncap;
	}
	tw->rn[tw->nrn++] = (TwRecNode){like, origin};
}

/* A reshard of global g looked up (c: the entry found or made, NULL when
 * it could not be kept): kept while recording. */
void twin_rec_event(Twins *tw, int g, const Cached *c, bool hit)
{
	if (!tw || !tw->rec)
		return;
	if (!c || tw->nre == TW_MAXEV) {
		tw->rec_bad = true;
		return;
	}
	tw->re[tw->nre++] = (TwRecEv){g, c, hit};
}

/* The same attributes (the same op: the same kind). */
static inline bool tw_attrs_same(const IrNode *a, const IrNode *b)
{
	if (a->attr == b->attr)
		return true;
	int64_t wa[IR_ATTR_WORDS], wb[IR_ATTR_WORDS];
	int na = ir_attr_words(a, wa);
	return na == ir_attr_words(b, wb) && !memcmp(wa, wb, sizeof wa[0] * (size_t)na);
}

static inline bool tw_type_same(const IrNode *a, const IrNode *b)
{
	if (a->dtype != b->dtype || a->rank != b->rank)
		return false;
	int r = a->rank < IR_MAX_RANK ? a->rank : IR_MAX_RANK;
	return !memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)(r > 0 ? r : 0));
}

static uint64_t tw_type_hash(uint64_t h, const IrNode *n)
{
	h = hash_mix64(h, (uint64_t)n->dtype << 8 | (uint64_t)(unsigned)n->rank);
	for (int d = 0; d < n->rank && d < IR_MAX_RANK; d++)
		h = hash_mix64(h, (uint64_t)n->shape[d]);
	return h;
}

static bool tw_grow(Twins *tw, TwSlot **t, int *cap, int n)
{
	if (2 * (n + 1) <= *cap)
		return true;
	int ncap = *cap ? 2 * *cap : 1024;
	TwSlot *nt = arena_alloc_raw(&tw->ar, sizeof *nt * (size_t)ncap);
	if (!nt)
		return false;
	memset(nt, 0xff, sizeof *nt * (size_t)ncap);
	for (int i = 0; i < *cap; i++) {
		if ((*t)[i].id < 0)
			continue;
		size_t j = (size_t)(*t)[i].h & (size_t)(ncap - 1);
		while (nt[j].id >= 0)
			j = (j + 1) & (size_t)(ncap - 1);
		nt[j] = (*t)[i];
	}
	*t = nt;
	*cap = ncap;
	return true;
}

/* The value signature of global node id (partitioned): its type, global
 * placement and local placement, interned; -1 when out of memory. */
static int tw_vsig(Twins *tw, const Part *p, int id)
{
	const IrNode *n = p->m->nodes[id];
	uint32_t mp = p->mplace[id];
	uint64_t h = tw_type_hash(0x9e3779b97f4a7c15ull, n);
	h = hash_mix64(h, (uint64_t)mp | (uint64_t)n->place << 32);
	h = hash_fin64(h);
	if (!tw_grow(tw, &tw->vtab, &tw->capvtab, tw->nvsig))
		return -1;
	size_t mask = (size_t)tw->capvtab - 1, slot = (size_t)h & mask;
	for (; tw->vtab[slot].id >= 0; slot = (slot + 1) & mask) {
		if (tw->vtab[slot].h != h)
			continue;
		const IrNode *r = p->m->nodes[tw->vrep[tw->vtab[slot].id]];
		if (tw_type_same(r, n) && r->place == n->place && p->mplace[r->id] == mp)
			break;
	}
	if (tw->vtab[slot].id >= 0)
		return tw->vtab[slot].id;
	if (tw->nvsig == tw->capvrep) {
		int ncap = tw->capvrep ? 2 * tw->capvrep : 256;
		int *nv = arena_alloc_raw(&tw->ar, sizeof *nv * (size_t)ncap);
		if (!nv)
			return -1;
		if (tw->nvsig)
			memcpy(nv, tw->vrep, sizeof *nv * (size_t)tw->nvsig);
		tw->vrep = nv;
		tw->capvrep = ncap;
	}
	tw->vrep[tw->nvsig] = id;
	tw->vtab[slot] = (TwSlot){h, tw->nvsig};
	return tw->nvsig++;
}

/* Whether n may be replayed at all: the vocab-parallel loss keeps its
 * own memo, grad_norm rewrites a node it made, the rest errors. */
static bool tw_eligible(const Twins *tw, const IrNode *n)
{
	if (n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_BWD ||
	    n->op == IR_OP_GRAD_NORM || n->op == IR_OP_RECV || n->op == IR_OP_SHARD_SLICE ||
	    (ir_op_flags(n->op) & OPF_COLL) || n->nops > TW_MAXOPS)
		return false;
	for (int i = 0; i < n->nops; i++)
		if (tw->vsig[n->ops[i]] < 0)
			return false;
	return true;
}

static inline bool tw_same_class(const Twins *tw, const IrNode *a, const IrNode *b)
{
	if (a->op != b->op || a->nops != b->nops || a->role != b->role || !tw_type_same(a, b) ||
	    a->place != b->place || !tw_attrs_same(a, b))
		return false;
	for (int i = 0; i < a->nops; i++)
		if (tw->vsig[a->ops[i]] != tw->vsig[b->ops[i]])
			return false;
	return true;
}

/* n's class, made when new; -1 when out of memory. */
static int tw_class(Twins *tw, const Part *p, const IrNode *n)
{
	uint64_t h = tw_type_hash(
	        (uint64_t)n->op << 32 | (uint64_t)(unsigned)n->nops << 8 | (uint64_t)n->role, n);
	int64_t w[IR_ATTR_WORDS];
	int nw = ir_attr_words(n, w);
	for (int i = 1; i < nw && i < 3; i++) /* the first few fields say enough */
		h = hash_mix64(h, (uint64_t)w[i]);
	h = hash_mix64(h, n->place);
	for (int i = 0; i < n->nops; i++)
		h = hash_mix64(h, (uint64_t)(unsigned)tw->vsig[n->ops[i]]);
	h = hash_fin64(h);
	if (!tw_grow(tw, &tw->ctab, &tw->capctab, tw->nclasses))
		return -1;
	size_t mask = (size_t)tw->capctab - 1, slot = (size_t)h & mask;
	for (; tw->ctab[slot].id >= 0; slot = (slot + 1) & mask)
		if (tw->ctab[slot].h == h &&
		    tw_same_class(tw, p->m->nodes[tw->classes[tw->ctab[slot].id].rep], n))
			break;
	if (tw->ctab[slot].id >= 0)
		return tw->ctab[slot].id;
	if (tw->nclasses == tw->capclasses) {
		int ncap = tw->capclasses ? 2 * tw->capclasses : 256;
		TwClass *nc = arena_alloc_raw(&tw->ar, sizeof *nc * (size_t)ncap);
		if (!nc)
			return -1;
		if (tw->nclasses)
			memcpy(nc, tw->classes, sizeof *nc * (size_t)tw->nclasses);
		tw->classes = nc;
		tw->capclasses = ncap;
	}
	tw->classes[tw->nclasses] = (TwClass){.rep = n->id, .vsig = -1, .succ = -1};
	tw->ctab[slot] = (TwSlot){h, tw->nclasses};
	return tw->nclasses++;
}

static const Cached *tw_cached(const Part *p, int g, uint32_t pl)
{
	for (const Cached *c = p->cache[g]; c; c = c->next)
		if (c->p == pl)
			return c;
	return NULL;
}

static inline int tw_resolve(const Part *p, const IrNode *n, int ref, int base, const int *hid)
{
	switch (ref & 3) {
	case TW_NONE:
		return -1;
	case TW_INT:
		return base + (ref >> 2);
	case TW_MAP:
		return p->map[n->ops[ref >> 2]];
	default:
		return hid[ref >> 2];
	}
}

/* Replays variant v for n.  Returns 1 when done, 0 when n's operands do
 * not stand as v's did, -1 on an error (reported). */
static int tw_replay_var(Part *p, const IrNode *n, const TwVar *v)
{
	const IrNode *t = p->m->nodes[v->t];
	for (int a = 1; a < n->nops; a++)
		for (int b = 0; b < a; b++)
			if ((t->ops[a] == t->ops[b]) != (n->ops[a] == n->ops[b]))
				return 0;
	int hid[TW_MAXEV];
	for (int e = 0; e < v->nev; e++) {
		const TwEvent *ev = &v->ev[e];
		if (ev->kind == EV_HIT_IN)
			continue;
		const Cached *c = tw_cached(p, ev->k < 0 ? n->id : n->ops[ev->k], ev->pl);
		if ((c != NULL) != (ev->kind == EV_HIT))
			return 0;
		hid[e] = c ? c->id : -1;
	}
	/* the copies and their operand lists in one block, appended as
	 * ir_node_copy would; short of memory (or past IR_MAX_NODES), the
	 * normal path says so */
	IrModule *out = p->out;
	int base = out->nnodes, nops = v->opstart[v->nn];
	if (out->nnodes + v->nn > out->cap) {
		if (out->nnodes + v->nn > IR_MAX_NODES)
			return 0;
		int ncap = 2 * out->cap > out->nnodes + v->nn ? 2 * out->cap : out->nnodes + v->nn;
		ncap = ncap < IR_MAX_NODES ? ncap : IR_MAX_NODES;
		IrNode **nodes = arena_alloc_raw(out->arena, sizeof *nodes * (size_t)ncap);
		if (!nodes)
			return 0;
		memcpy(nodes, out->nodes, sizeof *nodes * (size_t)out->nnodes);
		out->nodes = nodes;
		out->cap = ncap;
	}
	IrNode *blk = arena_alloc_raw(out->arena,
	                              sizeof *blk * (size_t)v->nn + sizeof(int) * (size_t)nops);
	if (!blk)
		return 0;
	int *opv = (int *)(blk + v->nn);
	for (int j = 0; j < v->nn; j++) {
		IrNode *x = &blk[j];
		memcpy(x, out->nodes[v->src + j], sizeof *x);
		int no = v->opstart[j + 1] - v->opstart[j];
		x->ops = no ? opv + v->opstart[j] : NULL;
		for (int q = 0; q < no; q++)
			x->ops[q] = tw_resolve(p, n, v->ops[v->opstart[j] + q], base, hid);
		x->id = out->nnodes;
		x->nops = no;
		out->nodes[out->nnodes++] = x;
		/* the recorded node's annotations (its padded dims), then what
		 * emit() set from its like and origin; what part_finish sets as
		 * ir_node_new left it (part_finish sets n's) */
		ir_annots_copy(out, x->id, out, v->src + j);
		const IrNode *like = v->like[j] < 0 ? n : p->m->nodes[n->ops[v->like[j]]];
		x->loc = like->loc;
		ir_set_stage(out, x, ir_stage(p->m, like));
		ir_set_mb(out, x, ir_mb(p->m, like));
		ir_set_block(out, x, ir_block(p->m, like));
		ir_set_unit(out, x, x->op == IR_OP_PARAM ? ir_unit(p->m, like) : -1);
		ir_set_place_from(out, x, tw_resolve(p, n, v->origin[j], base, hid));
		x->name = NULL;
		ir_set_label(out, x, NULL);
		x->role = IR_ROLE_ACT;
		ir_set_choose(out, x, -1);
		ir_set_place_loc(out, x, (SrcLoc){0});
		ir_set_link(out, x, IR_LINK_NONE, -1);
	}
	for (int e = 0; e < v->nev; e++) {
		const TwEvent *ev = &v->ev[e];
		if (ev->kind != EV_MISS)
			continue;
		int g = ev->k < 0 ? n->id : n->ops[ev->k];
		Cached *c = arena_alloc_raw(&p->scratch, sizeof *c);
		if (!c) {
			diag_error(p->d, n->loc, "partition: out of memory");
			return -1;
		}
		*c = (Cached){ev->pl, tw_resolve(p, n, ev->res, base, hid), p->cache[g]};
		p->cache[g] = c;
	}
	return part_finish(p, n, tw_resolve(p, n, v->final, base, hid)) ? 1 : -1;
}

/* The operand of t that global node g is, -1 for t itself, -2: neither. */
static int tw_which(const IrNode *t, int g)
{
	if (g == t->id)
		return -1;
	for (int k = 0; k < t->nops; k++)
		if (t->ops[k] == g)
			return k;
	return -2;
}

/* Local node x as a reference from t's recording; -1: none fits. */
static int tw_ref(const Twins *tw, const Part *p, const IrNode *t, const TwEvent *ev, int x)
{
	if (x < 0)
		return TW_REF(TW_NONE, 0);
	if (x >= tw->rec_base)
		return TW_REF(TW_INT, x - tw->rec_base);
	int ref = -1;
	const Cached *hc = NULL;
	for (int e = 0; e < tw->nre; e++) {
		if (ev[e].kind != EV_HIT || tw->re[e].c->id != x)
			continue;
		if (ref >= 0 && tw->re[e].c != hc)
			return -1;
		ref = TW_REF(TW_HIT, e);
		hc = tw->re[e].c;
	}
	for (int k = 0; k < t->nops; k++) {
		if (p->map[t->ops[k]] != x)
			continue;
		if (ref >= 0 && ((ref & 3) != TW_MAP || t->ops[ref >> 2] != t->ops[k]))
			return -1;
		if (ref < 0)
			ref = TW_REF(TW_MAP, k);
	}
	return ref;
}

/* Keeps what partitioning t (just done, from tw->rec_base on) made as a
 * variant of class cl; false: it cannot be replayed. */
static bool tw_record(Twins *tw, const Part *p, const IrNode *t, TwClass *cl)
{
	int nn = p->out->nnodes - tw->rec_base;
	if (tw->rec_bad || nn <= 0 || nn != tw->nrn)
		return false;
	TwVar *v = arena_alloc(&tw->ar, sizeof *v);
	TwEvent *ev = arena_alloc(&tw->ar, sizeof *ev * (size_t)(tw->nre ? tw->nre : 1));
	int nops = 0;
	for (int j = 0; j < nn; j++)
		nops += p->out->nodes[tw->rec_base + j]->nops;
	int *ints = arena_alloc_raw(&tw->ar, sizeof(int) * (size_t)(3 * nn + 1 + nops));
	if (!v || !ev || !ints)
		return false;
	for (int e = 0; e < tw->nre; e++) {
		const TwRecEv *r = &tw->re[e];
		ev[e].k = tw_which(t, r->g);
		ev[e].pl = r->c->p;
		ev[e].kind = r->hit ? EV_HIT : EV_MISS;
		if (ev[e].k < -1)
			return false;
		for (int f = 0; r->hit && f < e; f++)
			if (!tw->re[f].hit && tw->re[f].c == r->c)
				ev[e].kind = EV_HIT_IN;
	}
	for (int e = 0; e < tw->nre; e++)
		if (ev[e].kind == EV_MISS &&
		    (ev[e].res = tw_ref(tw, p, t, ev, tw->re[e].c->id)) < 0)
			return false;
	v->t = t->id;
	v->src = tw->rec_base;
	v->nn = nn;
	v->like = ints;
	v->origin = ints + nn;
	v->opstart = ints + 2 * nn;
	v->ops = ints + 3 * nn + 1;
	v->ev = ev;
	v->nev = tw->nre;
	int q = 0;
	for (int j = 0; j < nn; j++) {
		const IrNode *x = p->out->nodes[tw->rec_base + j];
		v->like[j] = tw_which(t, tw->rn[j].like);
		v->origin[j] = tw_ref(tw, p, t, ev, tw->rn[j].origin);
		if (v->like[j] < -1 || v->origin[j] < 0)
			return false;
		v->opstart[j] = q;
		for (int k = 0; k < x->nops; k++)
			if ((v->ops[q++] = tw_ref(tw, p, t, ev, x->ops[k])) < 0)
				return false;
	}
	v->opstart[nn] = q;
	if ((v->final = tw_ref(tw, p, t, ev, p->map[t->id])) < 0)
		return false;
	v->next = cl->vars;
	cl->vars = v;
	cl->nvars++;
	return true;
}

/* n's class, or -1: not replayable.  The layers repeat in order, so
 * mostly n is in the class that followed its predecessor's last time:
 * that one compared, the table searched only when it is not. */
static int tw_class_of(Twins *tw, const Part *p, const IrNode *n)
{
	int guess = tw->last >= 0 ? tw->classes[tw->last].succ : -1, ci = -1;
	if (tw_eligible(tw, n)) {
		if (guess >= 0 && tw_same_class(tw, p->m->nodes[tw->classes[guess].rep], n))
			ci = guess;
		else
			ci = tw_class(tw, p, n);
		if (tw->last >= 0 && ci >= 0)
			tw->classes[tw->last].succ = ci;
	}
	tw->last = ci;
	return ci;
}

/* n's value signature, once it is partitioned: its class's (every node of
 * a class places its value alike; checked, as it is cheap), else
 * interned. */
static void tw_set_vsig(Twins *tw, const Part *p, const IrNode *n, TwClass *cl)
{
	if (cl && cl->vsig >= 0 && p->mplace[n->id] == p->mplace[cl->rep]) {
		tw->vsig[n->id] = cl->vsig;
		return;
	}
	tw->vsig[n->id] = tw_vsig(tw, p, n->id);
	if (cl && cl->vsig < 0 && cl->rep == n->id)
		cl->vsig = tw->vsig[n->id];
}

TwinResult twin_replay(Twins *tw, Part *p, const IrNode *n)
{
	if (!tw)
		return TWIN_MISS;
	int ci = tw_class_of(tw, p, n), done = 0;
	TwClass *cl = ci >= 0 ? &tw->classes[ci] : NULL;
	for (const TwVar *v = cl && !cl->dead ? cl->vars : NULL; v && !done; v = v->next) {
		if ((done = tw_replay_var(p, n, v)) < 0)
			return TWIN_FAILED;
		/* n's value is a copy of t's node, placed byte for byte alike */
		if (done && (v->final & 3) == TW_INT && tw->vsig[v->t] >= 0) {
			tw->vsig[n->id] = tw->vsig[v->t];
			tw->replays++;
			return TWIN_DONE;
		}
	}
	if (done) {
		tw_set_vsig(tw, p, n, cl);
		tw->replays++;
		return TWIN_DONE;
	}
	tw->cur = ci;
	tw->rec = cl && !cl->dead && cl->nvars < TW_MAXVARS;
	tw->rec_bad = false;
	tw->rec_base = p->out->nnodes;
	tw->nrn = 0;
	tw->nre = 0;
	return TWIN_MISS;
}

void twin_record(Twins *tw, const Part *p, const IrNode *n)
{
	if (!tw)
		return;
	TwClass *cl = tw->cur >= 0 ? &tw->classes[tw->cur] : NULL;
	bool rec = tw->rec;
	tw->rec = false;
	tw->cur = -1;
	if (rec && !tw_record(tw, p, n, cl))
		cl->dead = true;
	tw_set_vsig(tw, p, n, cl);
}
