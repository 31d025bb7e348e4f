/* partition_twin.c - replaying a twin's partition, for passes/partition.c.
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
 * (scripts/plan-identity checks it).
 */
#include "passes/partition_impl.h"
#include "support/hash.h"

#include <stddef.h>
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

struct TwClass {
	int rep;  /* its first node */
	int vsig; /* the value signature of its nodes, -1 not yet */
	int succ; /* the class of the node after one of it, last seen; -1 */
	int nvars;
	bool dead; /* not replayable: always the normal path */
	TwVar *vars;
};

struct TwSlot {
	uint64_t h;
	int id; /* -1: empty */
};

/* A node made while recording. */
struct TwRecNode {
	int like; /* global id */
	int origin;
};

/* A node emit() made while recording: like, the global node whose
 * location and stage it took; origin, its place_from. */
void part_rec_node(Part *p, int like, int origin)
{
	if (p->nrn == p->caprn) {
		int ncap = p->caprn ? 2 * p->caprn : 16;
		TwRecNode *nr = arena_alloc_raw(&p->scratch, sizeof *nr * (size_t)ncap);
		if (!nr) {
			p->rec_bad = true;
			return;
		}
		if (p->nrn)
			memcpy(nr, p->rn, sizeof *nr * (size_t)p->nrn);
		p->rn = nr;
		p->caprn = ncap;
	}
	p->rn[p->nrn++] = (TwRecNode){like, origin};
}

/* A reshard of global g looked up while recording (c: the entry found or
 * made, NULL when it could not be kept). */
void part_rec_event(Part *p, int g, const Cached *c, bool hit)
{
	if (!c || p->nre == TW_MAXEV) {
		p->rec_bad = true;
		return;
	}
	p->re[p->nre++] = (TwRecEv){g, c, hit};
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

static bool tw_grow(Part *p, TwSlot **t, int *cap, int n)
{
	if (2 * (n + 1) <= *cap)
		return true;
	int ncap = *cap ? 2 * *cap : 1024;
	TwSlot *nt = arena_alloc_raw(&p->scratch, sizeof *nt * (size_t)ncap);
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
static int tw_vsig(Part *p, int id)
{
	const IrNode *n = p->m->nodes[id];
	uint32_t mp = p->mplace[id];
	uint64_t h = tw_type_hash(0x9e3779b97f4a7c15ull, n);
	h = hash_mix64(h, (uint64_t)mp | (uint64_t)n->place << 32);
	h = hash_fin64(h);
	if (!tw_grow(p, &p->vtab, &p->capvtab, p->nvsig))
		return -1;
	size_t mask = (size_t)p->capvtab - 1, slot = (size_t)h & mask;
	for (; p->vtab[slot].id >= 0; slot = (slot + 1) & mask) {
		if (p->vtab[slot].h != h)
			continue;
		const IrNode *r = p->m->nodes[p->vrep[p->vtab[slot].id]];
		if (tw_type_same(r, n) && r->place == n->place && p->mplace[r->id] == mp)
			break;
	}
	if (p->vtab[slot].id >= 0)
		return p->vtab[slot].id;
	if (p->nvsig == p->capvrep) {
		int ncap = p->capvrep ? 2 * p->capvrep : 256;
		int *nv = arena_alloc_raw(&p->scratch, sizeof *nv * (size_t)ncap);
		if (!nv)
			return -1;
		if (p->nvsig)
			memcpy(nv, p->vrep, sizeof *nv * (size_t)p->nvsig);
		p->vrep = nv;
		p->capvrep = ncap;
	}
	p->vrep[p->nvsig] = id;
	p->vtab[slot] = (TwSlot){h, p->nvsig};
	return p->nvsig++;
}

/* Whether n may be replayed at all: the vocab-parallel loss keeps its
 * own memo, grad_norm rewrites a node it made, the rest errors. */
static bool tw_eligible(const Part *p, const IrNode *n)
{
	if (n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_BWD ||
	    n->op == IR_OP_GRAD_NORM || n->op == IR_OP_RECV || n->op == IR_OP_SHARD_SLICE ||
	    (ir_op_flags(n->op) & OPF_COLL) || n->nops > TW_MAXOPS)
		return false;
	for (int i = 0; i < n->nops; i++)
		if (p->vsig[n->ops[i]] < 0)
			return false;
	return true;
}

static inline bool tw_same_class(const Part *p, const IrNode *a, const IrNode *b)
{
	if (a->op != b->op || a->nops != b->nops || a->role != b->role || !tw_type_same(a, b) ||
	    a->place != b->place || !tw_attrs_same(a, b))
		return false;
	for (int i = 0; i < a->nops; i++)
		if (p->vsig[a->ops[i]] != p->vsig[b->ops[i]])
			return false;
	return true;
}

/* n's class, made when new; -1 when out of memory. */
static int tw_class(Part *p, const IrNode *n)
{
	uint64_t h = tw_type_hash(
	        (uint64_t)n->op << 32 | (uint64_t)(unsigned)n->nops << 8 | (uint64_t)n->role, n);
	int64_t w[IR_ATTR_WORDS];
	int nw = ir_attr_words(n, w);
	for (int i = 1; i < nw && i < 3; i++) /* the first few fields say enough */
		h = hash_mix64(h, (uint64_t)w[i]);
	h = hash_mix64(h, n->place);
	for (int i = 0; i < n->nops; i++)
		h = hash_mix64(h, (uint64_t)(unsigned)p->vsig[n->ops[i]]);
	h = hash_fin64(h);
	if (!tw_grow(p, &p->ctab, &p->capctab, p->nclasses))
		return -1;
	size_t mask = (size_t)p->capctab - 1, slot = (size_t)h & mask;
	for (; p->ctab[slot].id >= 0; slot = (slot + 1) & mask)
		if (p->ctab[slot].h == h &&
		    tw_same_class(p, p->m->nodes[p->classes[p->ctab[slot].id].rep], n))
			break;
	if (p->ctab[slot].id >= 0)
		return p->ctab[slot].id;
	if (p->nclasses == p->capclasses) {
		int ncap = p->capclasses ? 2 * p->capclasses : 256;
		TwClass *nc = arena_alloc_raw(&p->scratch, sizeof *nc * (size_t)ncap);
		if (!nc)
			return -1;
		if (p->nclasses)
			memcpy(nc, p->classes, sizeof *nc * (size_t)p->nclasses);
		p->classes = nc;
		p->capclasses = ncap;
	}
	p->classes[p->nclasses] = (TwClass){.rep = n->id, .vsig = -1, .succ = -1};
	p->ctab[slot] = (TwSlot){h, p->nclasses};
	return p->nclasses++;
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
static int tw_replay(Part *p, const IrNode *n, const TwVar *v)
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
static int tw_ref(const Part *p, const IrNode *t, const TwEvent *ev, int x)
{
	if (x < 0)
		return TW_REF(TW_NONE, 0);
	if (x >= p->rec_base)
		return TW_REF(TW_INT, x - p->rec_base);
	int ref = -1;
	const Cached *hc = NULL;
	for (int e = 0; e < p->nre; e++) {
		if (ev[e].kind != EV_HIT || p->re[e].c->id != x)
			continue;
		if (ref >= 0 && p->re[e].c != hc)
			return -1;
		ref = TW_REF(TW_HIT, e);
		hc = p->re[e].c;
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

/* Keeps what partitioning t (just done, from p->rec_base on) made as a
 * variant of class cl; false: it cannot be replayed. */
static bool tw_record(Part *p, const IrNode *t, TwClass *cl)
{
	int nn = p->out->nnodes - p->rec_base;
	if (p->rec_bad || nn <= 0 || nn != p->nrn)
		return false;
	TwVar *v = arena_alloc(&p->scratch, sizeof *v);
	TwEvent *ev = arena_alloc(&p->scratch, sizeof *ev * (size_t)(p->nre ? p->nre : 1));
	int nops = 0;
	for (int j = 0; j < nn; j++)
		nops += p->out->nodes[p->rec_base + j]->nops;
	int *ints = arena_alloc_raw(&p->scratch, sizeof(int) * (size_t)(3 * nn + 1 + nops));
	if (!v || !ev || !ints)
		return false;
	for (int e = 0; e < p->nre; e++) {
		const TwRecEv *r = &p->re[e];
		ev[e].k = tw_which(t, r->g);
		ev[e].pl = r->c->p;
		ev[e].kind = r->hit ? EV_HIT : EV_MISS;
		if (ev[e].k < -1)
			return false;
		for (int f = 0; r->hit && f < e; f++)
			if (!p->re[f].hit && p->re[f].c == r->c)
				ev[e].kind = EV_HIT_IN;
	}
	for (int e = 0; e < p->nre; e++)
		if (ev[e].kind == EV_MISS && (ev[e].res = tw_ref(p, t, ev, p->re[e].c->id)) < 0)
			return false;
	v->t = t->id;
	v->src = p->rec_base;
	v->nn = nn;
	v->like = ints;
	v->origin = ints + nn;
	v->opstart = ints + 2 * nn;
	v->ops = ints + 3 * nn + 1;
	v->ev = ev;
	v->nev = p->nre;
	int q = 0;
	for (int j = 0; j < nn; j++) {
		const IrNode *x = p->out->nodes[p->rec_base + j];
		v->like[j] = tw_which(t, p->rn[j].like);
		v->origin[j] = tw_ref(p, t, ev, p->rn[j].origin);
		if (v->like[j] < -1 || v->origin[j] < 0)
			return false;
		v->opstart[j] = q;
		for (int k = 0; k < x->nops; k++)
			if ((v->ops[q++] = tw_ref(p, t, ev, x->ops[k])) < 0)
				return false;
	}
	v->opstart[nn] = q;
	if ((v->final = tw_ref(p, t, ev, p->map[t->id])) < 0)
		return false;
	v->next = cl->vars;
	cl->vars = v;
	cl->nvars++;
	return true;
}

/* n's class, or -1: not replayable.  The layers repeat in order, so
 * mostly n is in the class that followed its predecessor's last time:
 * that one compared, the table searched only when it is not. */
static int tw_class_of(Part *p, const IrNode *n)
{
	int guess = p->last >= 0 ? p->classes[p->last].succ : -1, ci = -1;
	if (tw_eligible(p, n)) {
		if (guess >= 0 && tw_same_class(p, p->m->nodes[p->classes[guess].rep], n))
			ci = guess;
		else
			ci = tw_class(p, n);
		if (p->last >= 0 && ci >= 0)
			p->classes[p->last].succ = ci;
	}
	p->last = ci;
	return ci;
}

/* n's value signature, once it is partitioned: its class's (every node of
 * a class places its value alike; checked, as it is cheap), else
 * interned. */
static void tw_set_vsig(Part *p, const IrNode *n, TwClass *cl)
{
	if (cl && cl->vsig >= 0 && p->mplace[n->id] == p->mplace[cl->rep]) {
		p->vsig[n->id] = cl->vsig;
		return;
	}
	p->vsig[n->id] = tw_vsig(p, n->id);
	if (cl && cl->vsig < 0 && cl->rep == n->id)
		cl->vsig = p->vsig[n->id];
}

/* Partitions global node n: by a twin's variant when one fits, else the
 * normal way, recorded as a new variant while its class has room. */
bool part_twin(Part *p, const IrNode *n)
{
	if (!p->twins)
		return part_node(p, n);
	int ci = tw_class_of(p, n), done = 0;
	TwClass *cl = ci >= 0 ? &p->classes[ci] : NULL;
	for (const TwVar *v = cl && !cl->dead ? cl->vars : NULL; v && !done; v = v->next) {
		if ((done = tw_replay(p, n, v)) < 0)
			return false;
		/* n's value is a copy of t's node, placed byte for byte alike */
		if (done && (v->final & 3) == TW_INT && p->vsig[v->t] >= 0) {
			p->vsig[n->id] = p->vsig[v->t];
			return true;
		}
	}
	if (!done) {
		bool rec = cl && !cl->dead && cl->nvars < TW_MAXVARS;
		p->rec = rec;
		p->rec_bad = false;
		p->rec_base = p->out->nnodes;
		p->nrn = 0;
		p->nre = 0;
		if (!part_node(p, n))
			return false;
		p->rec = false;
		if (rec && !tw_record(p, n, cl))
			cl->dead = true;
	}
	tw_set_vsig(p, n, cl);
	return true;
}
