/* placement.c - per-dim shardings over mesh axes, and torch.chunk sizes.
 *
 * A dim split over several axes, e.g. [(dp, tp), _], is cut into
 * size(dp) * size(tp) parts and a rank's shard index is its (dp, tp)
 * coordinate read row-major in the listed order (dp major), as in JAX's
 * PartitionSpec.  Uneven dims follow torch.chunk: every shard but the last
 * few gets ceil(n / parts) and the tail may be short or empty (after
 * `partition` every rank stores ceil(n / parts) rows, the tail padded; see
 * IrNode.padded).
 */
#include "ir/ir.h"
#include "support/hash.h"

#include <stdarg.h>
#include <string.h>

void placement_replicated(Placement *p, int ndims)
{
	memset(p, 0, sizeof *p);
	p->known = true;
	p->ndims = (uint8_t)(ndims < 0 ? 0 : ndims > IR_MAX_RANK ? IR_MAX_RANK : ndims);
}

/* ---- the module's table ---- */

/* p in canonical form in *c: every byte past what p says is zero (the
 * struct's padding too), so two placements are equal exactly when their
 * canonical forms are equal bytes. */
static void canonical(const Placement *p, Placement *c)
{
	memset(c, 0, sizeof *c);
	if (!p->known)
		return;
	c->known = true;
	c->ndims = p->ndims < IR_MAX_RANK ? p->ndims : IR_MAX_RANK;
	for (int d = 0; d < c->ndims; d++) {
		c->naxes[d] = p->naxes[d] < IR_MAX_AXES ? p->naxes[d] : IR_MAX_AXES;
		for (int k = 0; k < c->naxes[d]; k++)
			c->axes[d][k] = p->axes[d][k];
	}
	c->partial = p->partial;
	c->partial_op = p->partial ? p->partial_op : IR_RED_SUM;
}

static uint32_t canonical_hash(const Placement *c)
{
	uint64_t h = (uint64_t)c->ndims | (uint64_t)c->partial << 8 | (uint64_t)c->partial_op << 40;
	uint64_t w;
	memcpy(&w, c->naxes, sizeof w);
	h = hash_mix64(h, w);
	for (int d = 0; d < c->ndims; d++) {
		memcpy(&w, c->axes[d], sizeof w);
		h = hash_mix64(h, w);
	}
	return (uint32_t)hash_fin64(h);
}

IrPlaces *ir_places_new(Arena *a)
{
	IrPlaces *t = arena_alloc(a, sizeof *t);
	if (!t)
		return NULL;
	t->arena = a;
	t->cap = 16;
	t->nslot = 32;
	t->v = arena_alloc(a, sizeof *t->v * t->cap);
	t->h = arena_alloc(a, sizeof *t->h * t->cap);
	t->slot = arena_alloc(a, sizeof *t->slot * t->nslot);
	if (!t->v || !t->h || !t->slot)
		return NULL;
	t->n = 1; /* v[0]: not known, all zero */
	return t;
}

IrPlaces *ir_places_copy(Arena *a, const IrPlaces *src)
{
	IrPlaces *t = arena_alloc(a, sizeof *t);
	if (!t)
		return NULL;
	*t = *src;
	t->arena = a;
	t->v = arena_alloc_raw(a, sizeof *t->v * t->cap);
	t->h = arena_alloc_raw(a, sizeof *t->h * t->cap);
	t->slot = arena_alloc_raw(a, sizeof *t->slot * t->nslot);
	if (!t->v || !t->h || !t->slot)
		return NULL;
	memcpy(t->v, src->v, sizeof *t->v * t->n);
	memcpy(t->h, src->h, sizeof *t->h * t->n);
	memcpy(t->slot, src->slot, sizeof *t->slot * t->nslot);
	return t;
}

static bool places_grow(IrPlaces *t)
{
	if (t->n == t->cap) {
		uint32_t cap = 2 * t->cap;
		Placement *v = arena_alloc_raw(t->arena, sizeof *v * cap);
		uint32_t *h = arena_alloc_raw(t->arena, sizeof *h * cap);
		if (!v || !h)
			return false;
		memcpy(v, t->v, sizeof *v * t->n);
		memcpy(h, t->h, sizeof *h * t->n);
		t->v = v;
		t->h = h;
		t->cap = cap;
	}
	if (2 * (t->n + 1) > t->nslot) {
		uint32_t ns = 2 * t->nslot, mask = ns - 1;
		uint32_t *slot = arena_alloc(t->arena, sizeof *slot * ns);
		if (!slot)
			return false;
		for (uint32_t id = 1; id < t->n; id++) {
			uint32_t j = t->h[id] & mask;
			while (slot[j])
				j = (j + 1) & mask;
			slot[j] = id;
		}
		t->slot = slot;
		t->nslot = ns;
	}
	return true;
}

/* The slot of canonical c (hash h) in t: its id's, or the empty one it
 * would take. */
static uint32_t find_slot(const IrPlaces *t, const Placement *c, uint32_t h)
{
	uint32_t mask = t->nslot - 1, j = h & mask;
	for (; t->slot[j]; j = (j + 1) & mask) {
		uint32_t id = t->slot[j];
		if (t->h[id] == h && memcmp(&t->v[id], c, sizeof *c) == 0)
			break;
	}
	return j;
}

uint32_t ir_places_find(const IrPlaces *t, const Placement *p)
{
	if (!p->known)
		return 0;
	Placement c;
	canonical(p, &c);
	return t->slot[find_slot(t, &c, canonical_hash(&c))];
}

uint32_t ir_place_intern(IrModule *m, const Placement *p)
{
	return ir_places_intern(m->places, p);
}

uint32_t ir_places_intern(IrPlaces *t, const Placement *p)
{
	if (!p->known)
		return 0;
	Placement c;
	canonical(p, &c);
	uint32_t h = canonical_hash(&c), mask, j = find_slot(t, &c, h);
	if (t->slot[j])
		return t->slot[j];
	if (t->n + 1 > t->cap || 2 * (t->n + 1) > t->nslot) {
		if (t->n == UINT32_MAX || !places_grow(t)) {
			t->oom = true;
			return 0;
		}
		mask = t->nslot - 1;
		for (j = h & mask; t->slot[j]; j = (j + 1) & mask)
			;
	}
	uint32_t id = t->n++;
	t->v[id] = c;
	t->h[id] = h;
	t->slot[j] = id;
	return id;
}

bool ir_place_set(IrModule *m, IrNode *n, const Placement *p)
{
	n->place = ir_place_intern(m, p);
	return n->place || !p->known;
}

int64_t placement_dim_parts(const Placement *p, const Mesh *m, int d)
{
	if (!p->known || d < 0 || d >= p->ndims || d >= IR_MAX_RANK)
		return 1;
	int64_t parts = 1;
	for (int k = 0; k < p->naxes[d] && k < IR_MAX_AXES; k++) {
		int a = p->axes[d][k];
		if (a < m->naxes)
			parts *= m->sizes[a];
	}
	return parts;
}

int64_t chunk_size(int64_t n, int64_t parts, int64_t idx)
{
	if (parts <= 1)
		return n;
	int64_t chunk = n / parts + (n % parts != 0);
	int64_t left = n - idx * chunk;
	return left < 0 ? 0 : left > chunk ? chunk : left;
}

int64_t chunk_offset(int64_t n, int64_t parts, int64_t idx)
{
	if (parts <= 1)
		return 0;
	int64_t chunk = n / parts + (n % parts != 0);
	int64_t off = idx * chunk;
	return off > n ? n : off;
}

int64_t ir_global_dim(const IrModule *m, const IrNode *n, int d)
{
	if (d < 0 || d >= n->rank || d >= IR_MAX_RANK)
		return 1;
	int64_t g = ir_padded(m, n, d);
	if (g > 0)
		return g;
	return n->shape[d] * placement_dim_parts(ir_place(m, n), &m->mesh, d);
}

void placement_shard_shape(const Placement *p, const Mesh *m, int64_t rank,
                           int nd, const int64_t *global, int64_t *local)
{
	int64_t coords[IR_MAX_AXES] = {0};
	mesh_coords(m, rank, coords);
	for (int d = 0; d < nd; d++) {
		local[d] = global[d];
		if (!p->known || d >= p->ndims || d >= IR_MAX_RANK)
			continue;
		int64_t parts = 1, idx = 0;
		for (int k = 0; k < p->naxes[d] && k < IR_MAX_AXES; k++) {
			int a = p->axes[d][k];
			if (a >= m->naxes)
				continue;
			parts *= m->sizes[a];
			idx = idx * m->sizes[a] + coords[a];
		}
		local[d] = chunk_size(global[d], parts, idx);
	}
}

/* snprintf into buf at *len, never past cap; *len counts what would have
 * been written so the caller can tell truncation. */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(*len < cap ? buf + *len : NULL, *len < cap ? cap - *len : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		*len += (size_t)n;
}

/* put(buf, cap, len, "%s", s) without the printf machinery: plans format
 * a placement per buffer, and `dtmc sweep` builds thousands of plans. */
static void put_str(char *buf, size_t cap, size_t *len, const char *s)
{
	size_t n = strlen(s);
	if (*len < cap) {
		size_t room = cap - *len - 1, k = n < room ? n : room;
		memcpy(buf + *len, s, k);
		buf[*len + k] = 0;
	}
	*len += n;
}

static void put_axis(char *buf, size_t cap, size_t *len, const Mesh *m, int a)
{
	if (m && a < m->naxes && m->names[a])
		put_str(buf, cap, len, m->names[a]);
	else
		put(buf, cap, len, "#%d", a); /* out of range: visible, never parsed */
}

int placement_format(const Placement *p, const Mesh *m, char *buf, size_t cap)
{
	size_t len = 0;
	if (cap)
		buf[0] = 0;
	if (!p->known) {
		put_str(buf, cap, &len, "?");
		return (int)len;
	}
	put_str(buf, cap, &len, "[");
	for (int d = 0; d < p->ndims && d < IR_MAX_RANK; d++) {
		if (d)
			put_str(buf, cap, &len, ", ");
		int na = p->naxes[d] > IR_MAX_AXES ? IR_MAX_AXES : p->naxes[d];
		if (na == 0) {
			put_str(buf, cap, &len, "_");
		} else if (na == 1) {
			put_axis(buf, cap, &len, m, p->axes[d][0]);
		} else {
			put_str(buf, cap, &len, "(");
			for (int k = 0; k < na; k++) {
				if (k)
					put_str(buf, cap, &len, ", ");
				put_axis(buf, cap, &len, m, p->axes[d][k]);
			}
			put_str(buf, cap, &len, ")");
		}
	}
	put_str(buf, cap, &len, "]");
	if (p->partial) {
		put_str(buf, cap, &len, " partial(");
		bool first = true;
		for (int a = 0; a < 32; a++)
			if (p->partial & (1u << a)) {
				if (!first)
					put_str(buf, cap, &len, ", ");
				put_axis(buf, cap, &len, m, a);
				first = false;
			}
		if (p->partial_op != IR_RED_SUM)
			put(buf, cap, &len, ", %s", ir_red_name(p->partial_op));
		put_str(buf, cap, &len, ")");
	}
	return (int)len;
}
