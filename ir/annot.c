/* annot.c - the per-node annotation tables of a module (ir.h, "annotations").
 *
 * What a pass decides about a node (its pipeline stage, micro-batch,
 * phase, block instance, choose() point, placement origin, padded dims,
 * label) lives beside the nodes, in a table per fact indexed by node id:
 * a walk that does not read a fact does not carry it, and a table exists
 * only once the pass that owns it has written to it.
 */
#include "ir/ir.h"

#include <string.h>

/* Room for id in a table of cap entries of size sz at *v: a bigger array
 * (the old entries copied, the rest filled by fill(entry)).  False when
 * out of memory. */
static bool grow(IrModule *m, void **v, int *cap, size_t sz, int id,
                 void (*fill)(void *entry))
{
	if (id < *cap)
		return true;
	int n = *cap ? 2 * *cap : 64;
	if (n < m->cap)
		n = m->cap;
	if (n <= id)
		n = id + 1;
	char *nv = arena_alloc_raw(m->arena, sz * (size_t)n);
	if (!nv) {
		m->oom = true;
		return false;
	}
	if (*cap)
		memcpy(nv, *v, sz * (size_t)*cap);
	for (int i = *cap; i < n; i++)
		fill(nv + sz * (size_t)i);
	*v = nv;
	*cap = n;
	return true;
}

static void fill_int(void *e)
{
	*(int *)e = -1;
}

static void fill_zero_loc(void *e)
{
	*(SrcLoc *)e = (SrcLoc){0};
}

static void fill_zero_int(void *e)
{
	*(int *)e = 0;
}

static void fill_str(void *e)
{
	*(const char **)e = NULL;
}

bool ir_int_grow_set(IrModule *m, IrInts *t, int id, int v)
{
	void *p = t->v;
	if (!grow(m, &p, &t->cap, sizeof *t->v, id, fill_int))
		return false;
	t->v = p;
	t->v[id] = v;
	return true;
}

bool ir_place_loc_grow_set(IrModule *m, const IrNode *n, SrcLoc loc)
{
	if (!loc.file && !loc.line && !loc.col && !loc.end_col)
		return true;
	void *p = m->place_loc.v;
	if (!grow(m, &p, &m->place_loc.cap, sizeof *m->place_loc.v, n->id, fill_zero_loc))
		return false;
	m->place_loc.v = p;
	m->place_loc.v[n->id] = loc;
	return true;
}

bool ir_any_padded(const IrModule *m, const IrNode *n)
{
	for (int d = 0; d < n->rank && d < IR_MAX_RANK; d++)
		if (ir_padded(m, n, d))
			return true;
	return false;
}

/* A new row (zero) for node id; its index, 0 when out of memory. */
static int pad_row(IrModule *m, int id)
{
	IrPads *t = &m->padded;
	void *p = t->row;
	if (!grow(m, &p, &t->cap, sizeof *t->row, id, fill_zero_int))
		return 0;
	t->row = p;
	if (t->nrows + 1 >= t->caprows) {
		int n = t->caprows ? 2 * t->caprows : 64;
		int64_t(*rows)[IR_MAX_RANK] = arena_alloc_raw(m->arena, sizeof *rows * (size_t)n);
		if (!rows) {
			m->oom = true;
			return 0;
		}
		if (t->nrows)
			memcpy(rows, t->rows, sizeof *rows * (size_t)(t->nrows + 1));
		t->rows = rows;
		t->caprows = n;
	}
	int r = ++t->nrows;
	memset(t->rows[r], 0, sizeof t->rows[r]);
	t->row[id] = r;
	return r;
}

bool ir_set_padded(IrModule *m, const IrNode *n, int d, int64_t g)
{
	if (d < 0 || d >= IR_MAX_RANK)
		return false;
	int r = n->id < m->padded.cap ? m->padded.row[n->id] : 0;
	if (!r && !g)
		return true;
	if (!r && !(r = pad_row(m, n->id)))
		return false;
	m->padded.rows[r][d] = g;
	return true;
}

bool ir_label_grow_set(IrModule *m, const IrNode *n, const char *label)
{
	void *p = m->label.v;
	if (!grow(m, &p, &m->label.cap, sizeof *m->label.v, n->id, fill_str))
		return false;
	m->label.v = p;
	m->label.v[n->id] = label;
	return true;
}

/* The copies for ir_annots_copy: done in place where dst's table holds
 * did (the usual case: passes that make a node mostly find room), else
 * by the setters, which allocate only for a value that is not the
 * default.  Called per node by every pass that rebuilds a node list. */
static inline void copy_int(IrModule *dst, IrInts *d, int did, const IrInts *s, int sid)
{
	int v = ir_int_at(s, sid);
	if (did < d->cap)
		d->v[did] = v;
	else if (v != -1)
		ir_int_grow_set(dst, d, did, v);
}

void ir_annots_copy(IrModule *dst, int did, const IrModule *src, int sid)
{
	IrNode dn = {.id = did};
	copy_int(dst, &dst->stage, did, &src->stage, sid);
	copy_int(dst, &dst->mb, did, &src->mb, sid);
	copy_int(dst, &dst->phase, did, &src->phase, sid);
	copy_int(dst, &dst->block, did, &src->block, sid);
	copy_int(dst, &dst->unit, did, &src->unit, sid);
	copy_int(dst, &dst->choose, did, &src->choose, sid);
	copy_int(dst, &dst->place_from, did, &src->place_from, sid);
	copy_int(dst, &dst->link, did, &src->link, sid);
	copy_int(dst, &dst->link_param, did, &src->link_param, sid);
	if (sid < src->place_loc.cap || did < dst->place_loc.cap)
		ir_set_place_loc(dst, &dn, sid < src->place_loc.cap ? src->place_loc.v[sid]
		                                                   : (SrcLoc){0});
	int sr = sid < src->padded.cap ? src->padded.row[sid] : 0;
	if (did < dst->padded.cap)
		dst->padded.row[did] = 0;
	if (sr) { /* a row of its own: rows are written in place */
		int64_t g[IR_MAX_RANK];
		memcpy(g, src->padded.rows[sr], sizeof g);
		for (int d = 0; d < IR_MAX_RANK; d++)
			if (g[d])
				ir_set_padded(dst, &dn, d, g[d]);
	}
	if (sid < src->label.cap || did < dst->label.cap)
		ir_set_label(dst, &dn, sid < src->label.cap ? src->label.v[sid] : NULL);
}

void ir_annots_reset(IrModule *m, int id)
{
	IrInts *ints[] = {&m->stage,  &m->mb,         &m->phase, &m->block,     &m->unit,
	                  &m->choose, &m->place_from, &m->link,  &m->link_param};
	for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
		if (id < ints[k]->cap)
			ints[k]->v[id] = -1;
	if (id < m->place_loc.cap)
		m->place_loc.v[id] = (SrcLoc){0};
	if (id < m->padded.cap)
		m->padded.row[id] = 0;
	if (id < m->label.cap)
		m->label.v[id] = NULL;
}

/* A copy of table t (cap entries of sz bytes) in a; NULL when t has none. */
static void *copy_table(Arena *a, const void *v, int cap, size_t sz, bool *ok)
{
	if (!v || cap <= 0)
		return NULL;
	void *c = arena_alloc_raw(a, sz * (size_t)cap);
	if (!c) {
		*ok = false;
		return NULL;
	}
	memcpy(c, v, sz * (size_t)cap);
	return c;
}

bool ir_annots_clone(Arena *a, IrModule *c, const IrModule *m)
{
	bool ok = true;
	IrInts *ci[] = {&c->stage, &c->mb, &c->phase, &c->block, &c->unit,
	                &c->choose, &c->place_from, &c->link, &c->link_param};
	const IrInts *mi[] = {&m->stage, &m->mb, &m->phase, &m->block, &m->unit,
	                      &m->choose, &m->place_from, &m->link, &m->link_param};
	for (size_t k = 0; k < sizeof ci / sizeof ci[0]; k++)
		ci[k]->v = copy_table(a, mi[k]->v, mi[k]->cap, sizeof *mi[k]->v, &ok);
	c->place_loc.v = copy_table(a, m->place_loc.v, m->place_loc.cap, sizeof *m->place_loc.v, &ok);
	c->padded.row = copy_table(a, m->padded.row, m->padded.cap, sizeof *m->padded.row, &ok);
	c->padded.rows = copy_table(a, m->padded.rows, m->padded.nrows + 1, sizeof *m->padded.rows,
	                            &ok);
	c->padded.caprows = c->padded.rows ? m->padded.nrows + 1 : 0;
	c->label.v = copy_table(a, m->label.v, m->label.cap, sizeof *m->label.v, &ok);
	return ok;
}

bool ir_set_link(IrModule *m, const IrNode *n, IrLink k, int param)
{
	return ir_int_set(m, &m->link, n->id, (int)k) &&
	       ir_int_set(m, &m->link_param, n->id, k == IR_LINK_NONE ? -1 : param);
}

static const char *const state_words[] = {
	[IR_LINK_OPT_M] = "m", [IR_LINK_OPT_V] = "v", [IR_LINK_OPT_MOM] = "mom",
	[IR_LINK_OPT_MASTER] = "master",
};

const char *ir_link_state_word(IrLink k)
{
	return k >= IR_LINK_OPT_M && k <= IR_LINK_OPT_MASTER ? state_words[k] : NULL;
}

IrLink ir_link_state_lookup(const char *word, size_t len)
{
	for (int k = IR_LINK_OPT_M; k <= IR_LINK_OPT_MASTER; k++)
		if (strlen(state_words[k]) == len && strncmp(state_words[k], word, len) == 0)
			return (IrLink)k;
	return IR_LINK_NONE;
}
