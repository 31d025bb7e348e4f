/* propagate_memo.c - the memo seam: choose() and requirement() memoised,
 * for passes/propagate.c.
 *
 * The project keeps repeated structure (block bodies, micro-batches)
 * implicit in the IR; this file is where propagate exploits it.  choose()
 * and requirement() are pure functions of a few placements and of the
 * ops, attributes and shapes of their node and its neighbours, and a
 * model's layers and micro-batches repeat a few hundred such contexts many
 * thousands of times.  So propagate.c asks the memo first (memo_choose,
 * memo_requirement), works out what it does not know and tells it
 * (memo_*_keep).  A context is a short array of ints: the node's signature
 * (propagate.c's interning of all that the rules read, sig_key) and the
 * placement ids (IrNode.place, the module's table) around it.
 *
 * The bookkeeping that lets a sweep skip even the lookup is here too: per
 * node a version, bumped when its or an operand's placement changes (all
 * that requirement() reads; memo_placed), per use the requirement last
 * found and its user's version then, and per tie or scalar what fix()
 * last read (memo_fix).
 *
 * Off (asked so, or out of memory for its tables) it answers MEMO_OFF and
 * propagate.c computes everything; the placements are the same either way
 * (test_memo_identity, scripts/plan-identity).  All of its state is in
 * PropMemo, in the pass's arena.
 */
#include "passes/propagate_impl.h"
#include "support/hash.h"

/* ---- tables keyed by int arrays ---- */

/* Two ints a multiply, then a murmur3-style finish. */
static uint64_t key_hash(const int *k, int len)
{
	uint64_t h = 0x9e3779b97f4a7c15u ^ (uint64_t)(unsigned)len;
	int i = 0;
	for (; i + 1 < len; i += 2)
		h = hash_mix64(h, (uint64_t)(uint32_t)k[i] | (uint64_t)(uint32_t)k[i + 1] << 32);
	if (i < len)
		h = hash_mix64(h, (uint32_t)k[i]);
	return hash_fin64(h);
}

static bool tab_grow(Arena *a, PropTab *t)
{
	int cap = t->cap ? 2 * t->cap : 256;
	PropTabEnt *e = arena_alloc(a, sizeof *e * (size_t)cap);
	if (!e)
		return false;
	for (int i = 0; i < t->cap; i++) {
		const PropTabEnt *o = &t->ent[i];
		if (!o->key)
			continue;
		int j = (int)(o->h & (uint64_t)(cap - 1));
		while (e[j].key)
			j = (j + 1) & (cap - 1);
		e[j] = *o;
	}
	t->ent = e;
	t->cap = cap;
	return true;
}

PropTabEnt *prop_tab_get(Arena *a, PropTab *t, const int *k, int len, bool *found)
{
	if (2 * (t->n + 1) > t->cap && !tab_grow(a, t))
		return NULL;
	uint64_t h = key_hash(k, len);
	int j = (int)(h & (uint64_t)(t->cap - 1));
	for (;; j = (j + 1) & (t->cap - 1)) {
		PropTabEnt *e = &t->ent[j];
		if (!e->key)
			break;
		if (e->h != h || e->len != len)
			continue;
		int i = 0;
		while (i < len && e->key[i] == k[i])
			i++;
		if (i == len) {
			*found = true;
			return e;
		}
	}
	int *copy = arena_alloc_raw(a, sizeof(int) * (size_t)(len ? len : 1));
	if (!copy)
		return NULL;
	memcpy(copy, k, sizeof(int) * (size_t)len);
	PropTabEnt *e = &t->ent[j];
	*e = (PropTabEnt){.h = h, .key = copy, .len = len, .val = -1};
	t->n++;
	*found = false;
	return e;
}

/* ---- the memo ---- */

struct PropMemo {
	Arena *ar; /* the pass's */
	PropGraph g;
	bool on;
	PropTab reqtab; /* requirement() context -> placement id, -1: none */
	PropTab chtab;  /* choose() context -> index into choices */
	Choice *choices;
	int nchoices, capchoices;
	/* a miss's entry, its value set by the memo_*_keep that follows */
	PropTabEnt *pending;
	int *kbuf; /* room for the longest key */
	/* [nnodes]: bumped when the node's or an operand's placement changes
	 * (all that requirement() reads); [uses]: the requirement of each
	 * use as last found, and its user's ver then */
	unsigned *ver, *use_ver;
	int *use_req;
	/* [nnodes]: what fix() last read (its `seen`); -1: nothing yet */
	int *fixed;
	long hits;
};

static int place_of(const PropMemo *t, int id)
{
	return (int)t->g.m->nodes[id]->place;
}

PropMemo *memo_new(Arena *a, const PropGraph *g, bool on)
{
	PropMemo *t = arena_alloc(a, sizeof *t);
	if (!t)
		return NULL;
	*t = (PropMemo){.ar = a, .g = *g, .on = on};
	if (!on)
		return t;
	const IrModule *m = g->m;
	int most_ops = 0, most_uses = 0;
	for (int i = 0; i < m->nnodes; i++) {
		if (g->ostart[i + 1] - g->ostart[i] > most_ops)
			most_ops = g->ostart[i + 1] - g->ostart[i];
		if (g->ustart[i + 1] - g->ustart[i] > most_uses)
			most_uses = g->ustart[i + 1] - g->ustart[i];
	}
	size_t nn = (size_t)(m->nnodes ? m->nnodes : 1);
	size_t nu = (size_t)(g->ustart[m->nnodes] ? g->ustart[m->nnodes] : 1);
	t->kbuf = arena_alloc_raw(a, sizeof(int) * (size_t)(4 + most_ops + most_uses));
	t->ver = arena_alloc(a, sizeof(unsigned) * nn);
	t->use_ver = arena_alloc(a, sizeof(unsigned) * nu);
	t->use_req = arena_alloc_raw(a, sizeof(int) * nu);
	t->fixed = arena_alloc_raw(a, sizeof(int) * nn);
	if (!t->kbuf || !t->ver || !t->use_ver || !t->use_req || !t->fixed)
		return NULL;
	memo_forget(t); /* every ver 1, every use_ver 0: nothing known */
	return t;
}

bool memo_on(const PropMemo *t)
{
	return t->on;
}

void memo_off(PropMemo *t)
{
	t->on = false;
}

long memo_hits(const PropMemo *t)
{
	return t->hits;
}

MemoAnswer memo_requirement(PropMemo *t, int use, int *req)
{
	if (!t->on)
		return MEMO_OFF;
	int c = t->g.uses[use].node;
	if (t->use_ver[use] == t->ver[c]) {
		*req = t->use_req[use];
		t->hits++;
		return MEMO_HIT;
	}
	/* c's signature and c's and its operands' placements */
	int *k = t->kbuf, len = 0;
	k[len++] = t->g.sig[c];
	k[len++] = t->g.uses[use].slot;
	k[len++] = place_of(t, c);
	for (int i = t->g.ostart[c]; i < t->g.ostart[c + 1]; i++)
		k[len++] = place_of(t, t->g.opv[i]);
	bool found;
	PropTabEnt *e = prop_tab_get(t->ar, &t->reqtab, k, len, &found);
	if (!e) {
		t->on = false;
		return MEMO_OFF;
	}
	if (!found) {
		t->pending = e;
		return MEMO_MISS;
	}
	*req = t->use_req[use] = e->val;
	t->use_ver[use] = t->ver[c];
	t->hits++;
	return MEMO_HIT;
}

void memo_requirement_keep(PropMemo *t, int use, int req)
{
	if (!t->on)
		return;
	t->pending->val = req;
	t->use_req[use] = req;
	t->use_ver[use] = t->ver[t->g.uses[use].node];
}

MemoAnswer memo_choose(PropMemo *t, int node, const int *req, Choice *c)
{
	if (!t->on)
		return MEMO_OFF;
	/* the node's signature, its own and its operands' placements and its
	 * users' requirements */
	int nu = t->g.ustart[node + 1] - t->g.ustart[node];
	int *key = t->kbuf, len = 0;
	key[len++] = t->g.sig[node];
	key[len++] = place_of(t, node);
	for (int i = t->g.ostart[node]; i < t->g.ostart[node + 1]; i++)
		key[len++] = place_of(t, t->g.opv[i]);
	key[len++] = nu;
	for (int k = 0; k < nu; k++)
		key[len++] = req[k];
	bool found;
	PropTabEnt *e = prop_tab_get(t->ar, &t->chtab, key, len, &found);
	if (!e) {
		t->on = false;
		return MEMO_OFF;
	}
	if (found) {
		*c = t->choices[e->val];
		t->hits++;
		return MEMO_HIT;
	}
	/* room for the choice memo_choose_keep brings */
	if (t->nchoices == t->capchoices) {
		int cap = t->capchoices ? 2 * t->capchoices : 256;
		Choice *nc = arena_alloc_raw(t->ar, sizeof *nc * (size_t)cap);
		if (!nc) {
			t->on = false;
			return MEMO_OFF;
		}
		if (t->nchoices)
			memcpy(nc, t->choices, sizeof *nc * (size_t)t->nchoices);
		t->choices = nc;
		t->capchoices = cap;
	}
	t->pending = e;
	return MEMO_MISS;
}

void memo_choose_keep(PropMemo *t, const Choice *c)
{
	if (!t->on)
		return;
	t->choices[t->nchoices] = *c;
	t->pending->val = t->nchoices++;
}

bool memo_fix(PropMemo *t, int node, int seen)
{
	if (!t->on)
		return false;
	if (t->fixed[node] == seen)
		return true;
	t->fixed[node] = seen;
	return false;
}

void memo_placed(PropMemo *t, int node)
{
	if (!t->on)
		return;
	t->ver[node]++;
	for (int u = t->g.ustart[node]; u < t->g.ustart[node + 1]; u++)
		t->ver[t->g.uses[u].node]++;
}

void memo_forget(PropMemo *t)
{
	if (!t->on)
		return;
	for (int i = 0; i < t->g.m->nnodes; i++) {
		t->ver[i]++;
		t->fixed[i] = -1;
	}
}
