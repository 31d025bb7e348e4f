/* comm.c - what every communication backend shares: mesh groups, argument
 * checks, the along-a-dim forms of the collectives (a permutation into
 * scratch around the flat collective) and comm_run_action, which maps a
 * plan's COLL / SEND / RECV action onto the interface of comm.h.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm.h"

double comm_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int comm_errf(Comm *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof c->err, fmt, ap);
	va_end(ap);
	return -1;
}

/* ---- groups ---- */

void comm_mesh_from_plan(CommMesh *m, const DtmPlan *p)
{
	memset(m, 0, sizeof *m);
	m->naxes = p->mesh_naxes;
	for (int a = 0; a < p->mesh_naxes && a < DTM_MAX_AXES; a++) {
		m->sizes[a] = p->mesh_sizes[a];
		m->names[a] = p->mesh_names[a];
	}
}

int comm_world_size(const CommMesh *m)
{
	int64_t n = 1;
	for (int a = 0; a < m->naxes; a++)
		n *= m->sizes[a];
	return (int)n;
}

void comm_coords(const CommMesh *m, int rank, int64_t *coords)
{
	for (int a = m->naxes - 1; a >= 0; a--) {
		coords[a] = rank % m->sizes[a];
		rank /= (int)m->sizes[a];
	}
}

static int rank_of(const CommMesh *m, const int64_t *coords)
{
	int64_t r = 0;
	for (int a = 0; a < m->naxes; a++)
		r = r * m->sizes[a] + coords[a];
	return (int)r;
}

CommGroup comm_group(const CommMesh *m, int rank, uint32_t axes)
{
	int64_t co[DTM_MAX_AXES];
	comm_coords(m, rank, co);
	CommGroup g = { 1, 0, 0 };
	for (int a = 0; a < m->naxes; a++) {
		if (!(axes >> a & 1))
			continue;
		g.index = (int)(g.index * m->sizes[a] + co[a]);
		g.size *= (int)m->sizes[a];
		co[a] = 0;
	}
	g.color = rank_of(m, co);
	return g;
}

int comm_group_member(const CommMesh *m, int rank, uint32_t axes, int index)
{
	int64_t co[DTM_MAX_AXES];
	comm_coords(m, rank, co);
	/* the group index is mixed-radix over the axes, the last one minor */
	for (int a = m->naxes - 1; a >= 0; a--) {
		if (!(axes >> a & 1))
			continue;
		co[a] = index % m->sizes[a];
		index /= (int)m->sizes[a];
	}
	return rank_of(m, co);
}

int comm_group_peer(const CommMesh *m, int rank, uint32_t axes, int offset, bool mirror,
                    int sign)
{
	CommGroup g = comm_group(m, rank, axes);
	return comm_group_member(m, rank, axes,
	                         (int)dtm_peer_index(g.index, g.size, offset, mirror, sign));
}

const char *comm_axes_name(const CommMesh *m, uint32_t axes, char *buf, int n)
{
	int k = snprintf(buf, (size_t)n, "{");
	bool first = true;
	for (int a = 0; a < m->naxes && k < n; a++) {
		if (!(axes >> a & 1))
			continue;
		if (m->names[a])
			k += snprintf(buf + k, (size_t)(n - k), "%s%s", first ? "" : ", ", m->names[a]);
		else
			k += snprintf(buf + k, (size_t)(n - k), "%saxis%d", first ? "" : ", ", a);
		first = false;
	}
	if (k < n)
		snprintf(buf + k, (size_t)(n - k), "}");
	return buf;
}

/* ---- reductions ---- */

void comm_reduce_f32(float *restrict acc, const float *restrict x, int64_t n, DtmRed red)
{
	if (red == DTM_RED_MAX) {
		for (int64_t i = 0; i < n; i++)
			acc[i] = x[i] > acc[i] ? x[i] : acc[i];
	} else {
		for (int64_t i = 0; i < n; i++)
			acc[i] += x[i];
	}
}

void comm_reduce_i32(int32_t *restrict acc, const int32_t *restrict x, int64_t n, DtmRed red)
{
	if (red == DTM_RED_MAX) {
		for (int64_t i = 0; i < n; i++)
			acc[i] = x[i] > acc[i] ? x[i] : acc[i];
	} else {
		for (int64_t i = 0; i < n; i++)
			acc[i] += x[i];
	}
}

void *comm_scratch(Comm *c, int64_t bytes)
{
	if (bytes <= c->scratch_bytes)
		return c->scratch;
	free(c->scratch);
	c->scratch = malloc((size_t)(bytes > 0 ? bytes : 1));
	c->scratch_bytes = c->scratch ? bytes : 0;
	return c->scratch;
}

/* ---- validated entry points ---- */

const char *comm_error(const Comm *c)
{
	return c->err;
}

void comm_close(Comm *c)
{
	if (!c)
		return;
	free(c->scratch);
	c->scratch = NULL;
	c->ops->close(c);
}

void comm_fail(Comm *c, const char *msg)
{
	c->ops->fail(c, msg);
}

static int check_axes(Comm *c, uint32_t axes, const char *op)
{
	if (c->mesh.naxes < 32 && axes >> c->mesh.naxes)
		return comm_errf(c, "%s over axes mask 0x%x, but the mesh has %d axes", op,
				 (unsigned)axes, c->mesh.naxes);
	c->peer_failed = false;
	return 0;
}

static size_t dsize(DtmDtype t)
{
	return t == DTM_BF16 || t == DTM_F16 ? 2 : 4;
}

int comm_all_reduce(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
		    DtmDtype t, DtmRed red)
{
	if (check_axes(c, axes, "all_reduce"))
		return -1;
	return c->ops->all_reduce(c, axes, in, out, count, t, red);
}

int comm_all_gather(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
		    DtmDtype t)
{
	if (check_axes(c, axes, "all_gather"))
		return -1;
	return c->ops->all_gather(c, axes, in, out, count, t);
}

int comm_reduce_scatter(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
			DtmDtype t, DtmRed red)
{
	if (check_axes(c, axes, "reduce_scatter"))
		return -1;
	return c->ops->reduce_scatter(c, axes, in, out, count, t, red);
}

int comm_all_to_allv(Comm *c, uint32_t axes, const void *in, const int64_t *scounts,
		     void *out, const int64_t *rcounts, DtmDtype t)
{
	if (check_axes(c, axes, "all_to_all"))
		return -1;
	return c->ops->all_to_allv(c, axes, in, scounts, out, rcounts, t);
}

int comm_all_to_all(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
		    DtmDtype t)
{
	if (check_axes(c, axes, "all_to_all"))
		return -1;
	int n = comm_group(&c->mesh, c->rank, axes).size;
	int64_t *cnt = malloc((size_t)n * sizeof *cnt);
	if (!cnt)
		return comm_errf(c, "out of memory");
	for (int j = 0; j < n; j++)
		cnt[j] = count;
	int rc = c->ops->all_to_allv(c, axes, in, cnt, out, cnt, t);
	free(cnt);
	return rc;
}

int comm_broadcast(Comm *c, uint32_t axes, void *buf, int64_t count, DtmDtype t, int root)
{
	if (check_axes(c, axes, "broadcast"))
		return -1;
	int n = comm_group(&c->mesh, c->rank, axes).size;
	if (root < 0 || root >= n)
		return comm_errf(c, "broadcast root %d outside a group of %d", root, n);
	return c->ops->broadcast(c, axes, buf, count, t, root);
}

int comm_send(Comm *c, uint32_t axes, int offset, bool mirror, const void *buf, int64_t bytes)
{
	if (check_axes(c, axes, "send"))
		return -1;
	return c->ops->send(c, axes, offset, mirror, buf, bytes);
}

int comm_recv(Comm *c, uint32_t axes, int offset, bool mirror, void *buf, int64_t bytes)
{
	if (check_axes(c, axes, "recv"))
		return -1;
	return c->ops->recv(c, axes, offset, mirror, buf, bytes);
}

int comm_barrier(Comm *c, uint32_t axes)
{
	if (check_axes(c, axes, "barrier"))
		return -1;
	return c->ops->barrier(c, axes);
}

/* ---- along a dim ----
 *
 * A row-major tensor seen as [outer, len, inner] around dim: outer the
 * product of the dims before it, inner of those after.  Concatenation
 * along dim 0 is flat concatenation, so dim 0 needs no permutation. */

static void split3(const int64_t *shape, int rank, int dim, int64_t *outer, int64_t *len,
		   int64_t *inner)
{
	*outer = *inner = 1;
	for (int d = 0; d < dim; d++)
		*outer *= shape[d];
	*len = rank > 0 ? shape[dim] : 1;
	for (int d = dim + 1; d < rank; d++)
		*inner *= shape[d];
}

static int check_dim(Comm *c, int rank, int dim, const char *op)
{
	if (dim < 0 || (rank > 0 && dim >= rank) || (rank == 0 && dim != 0))
		return comm_errf(c, "%s along dim %d of a rank-%d tensor", op, dim, rank);
	return 0;
}

int comm_all_gather_dim(Comm *c, uint32_t axes, const void *in, void *out,
			const int64_t *shape, int rank, int dim, DtmDtype t)
{
	if (check_axes(c, axes, "all_gather") || check_dim(c, rank, dim, "all_gather"))
		return -1;
	int n = comm_group(&c->mesh, c->rank, axes).size;
	int64_t outer, len, inner;
	split3(shape, rank, dim, &outer, &len, &inner);
	int64_t count = outer * len * inner;
	size_t es = dsize(t);
	if (outer == 1)
		return c->ops->all_gather(c, axes, in, out, count, t);
	/* gathered as [n][outer][len*inner], then each member's rows are
	 * interleaved into [outer][n*len*inner] */
	char *tmp = comm_scratch(c, (int64_t)n * count * (int64_t)es);
	if (!tmp)
		return comm_errf(c, "out of memory staging an all_gather");
	if (c->ops->all_gather(c, axes, in, tmp, count, t))
		return -1;
	size_t row = (size_t)(len * inner) * es;
	for (int g = 0; g < n; g++)
		for (int64_t o = 0; o < outer; o++)
			memcpy((char *)out + ((size_t)o * (size_t)n + (size_t)g) * row,
			       tmp + ((size_t)g * (size_t)outer + (size_t)o) * row, row);
	return 0;
}

int comm_reduce_scatter_dim(Comm *c, uint32_t axes, const void *in, void *out,
			    const int64_t *shape, int rank, int dim, DtmDtype t, DtmRed red)
{
	if (check_axes(c, axes, "reduce_scatter") || check_dim(c, rank, dim, "reduce_scatter"))
		return -1;
	int n = comm_group(&c->mesh, c->rank, axes).size;
	int64_t outer, len, inner;
	split3(shape, rank, dim, &outer, &len, &inner);
	if (len % n)
		return comm_errf(c, "reduce_scatter of %lld along dim %d over %d ranks: pad the "
				 "dim to a multiple of the group", (long long)len, dim, n);
	int64_t count = outer * (len / n) * inner;
	size_t es = dsize(t);
	if (outer == 1)
		return c->ops->reduce_scatter(c, axes, in, out, count, t, red);
	/* [outer][n][blk] -> [n][outer][blk], then the flat form */
	char *tmp = comm_scratch(c, (int64_t)n * count * (int64_t)es);
	if (!tmp)
		return comm_errf(c, "out of memory staging a reduce_scatter");
	size_t blk = (size_t)(len / n * inner) * es;
	for (int64_t o = 0; o < outer; o++)
		for (int g = 0; g < n; g++)
			memcpy(tmp + ((size_t)g * (size_t)outer + (size_t)o) * blk,
			       (const char *)in + ((size_t)o * (size_t)n + (size_t)g) * blk, blk);
	return c->ops->reduce_scatter(c, axes, tmp, out, count, t, red);
}

/* The number of leading rows of slab (rows rows of rowb bytes) up to its
 * last one with a non-zero byte: the rest are all-zero bits, which the
 * receiver writes back itself (so -0.0 travels, and what arrives is
 * exactly what was sent). */
static int64_t rows_used(const char *slab, int64_t rows, size_t rowb)
{
	for (int64_t r = rows; r > 0; r--) {
		const char *p = slab + (size_t)(r - 1) * rowb;
		for (size_t b = 0; b < rowb; b++)
			if (p[b])
				return r;
	}
	return 0;
}

int comm_all_to_all_rows(Comm *c, uint32_t axes, const void *in, void *out,
			 const int64_t *shape, int rank, int split_dim, int concat_dim,
			 int vdim, DtmDtype t, int64_t *sent)
{
	if (check_axes(c, axes, "all_to_all") || check_dim(c, rank, split_dim, "all_to_all") ||
	    check_dim(c, rank, concat_dim, "all_to_all") || check_dim(c, rank, vdim, "all_to_all"))
		return -1;
	if (vdim <= split_dim || vdim <= concat_dim)
		return comm_errf(c, "sparse all_to_all: the rows dim %d must follow the split and "
				 "concat dims (%d, %d)", vdim, split_dim, concat_dim);
	CommGroup grp = comm_group(&c->mesh, c->rank, axes);
	int n = grp.size;
	if (n <= 0 || shape[split_dim] % n)
		return comm_errf(c, "all_to_all splitting dim %d of %lld over %d ranks: pad the "
				 "dim to a multiple of the group", split_dim, (long long)shape[split_dim],
				 n);
	size_t es = dsize(t);
	int64_t bs[DTM_MAX_RANK], numel = 1;
	memcpy(bs, shape, (size_t)rank * sizeof *bs);
	bs[split_dim] /= n;
	for (int d = 0; d < rank; d++)
		numel *= shape[d];
	/* slabs: the rows dim and what follows it; a block of the send
	 * (split) and of the receive (concat) side is a run of whole slabs */
	int64_t rows = bs[vdim], rowlen = 1, so, sl, si, co, cl, ci;
	for (int d = vdim + 1; d < rank; d++)
		rowlen *= bs[d];
	if (rows * rowlen == 0 || numel == 0) { /* nothing in a slab: the dense form */
		if (sent)
			*sent = 0;
		return comm_all_to_all_dim(c, axes, in, out, shape, rank, split_dim, concat_dim, t);
	}
	size_t rowb = (size_t)rowlen * es, slabb = (size_t)rows * rowb;
	split3(shape, rank, split_dim, &so, &sl, &si);
	split3(bs, rank, concat_dim, &co, &cl, &ci);
	int64_t nsc = sl / n * si / (rows * rowlen), nsc2 = cl * ci / (rows * rowlen);
	int64_t nseg = so * nsc; /* slabs per block, both ways */
	size_t srow = (size_t)(sl / n * si) * es, crow = (size_t)(cl * ci) * es;
	char *tmp = comm_scratch(c, 2 * numel * (int64_t)es);
	int64_t *cnt = malloc((size_t)(4 * n) * sizeof *cnt);
	int32_t *sc = malloc((size_t)(2 * n * nseg) * sizeof *sc);
	if (!tmp || !cnt || !sc) {
		free(cnt);
		free(sc);
		return comm_errf(c, "out of memory staging an all_to_all");
	}
	char *send = tmp, *recv = tmp + numel * (int64_t)es;
	int32_t *rc = sc + n * nseg;
	int64_t *scounts = cnt, *rcounts = cnt + n, *seg = cnt + 2 * n, *nseg_of = cnt + 3 * n;
	/* pack each block's slabs, their used rows only; count them */
	size_t pos = 0;
	for (int j = 0; j < n; j++) {
		scounts[j] = 0;
		for (int64_t o = 0; o < so; o++) {
			const char *chunk = (const char *)in + ((size_t)o * (size_t)n + (size_t)j) * srow;
			for (int64_t s = 0; s < nsc; s++) {
				int64_t u = rows_used(chunk + (size_t)s * slabb, rows, rowb);
				sc[(int64_t)j * nseg + o * nsc + s] = (int32_t)u;
				memcpy(send + pos, chunk + (size_t)s * slabb, (size_t)u * rowb);
				pos += (size_t)u * rowb;
				scounts[j] += u * rowlen;
			}
		}
	}
	/* the counts first (all_to_allv's receive sizes), then the rows */
	for (int j = 0; j < n; j++)
		seg[j] = nseg_of[j] = nseg;
	if (c->ops->all_to_allv(c, axes, sc, seg, rc, nseg_of, DTM_I32)) {
		free(cnt);
		free(sc);
		return -1;
	}
	for (int j = 0; j < n; j++) {
		rcounts[j] = 0;
		for (int64_t g = 0; g < nseg; g++)
			rcounts[j] += (int64_t)rc[(int64_t)j * nseg + g] * rowlen;
	}
	int r = c->ops->all_to_allv(c, axes, send, scounts, recv, rcounts, t);
	if (!r) {
		/* unpack: block j's slabs, in order, each padded with zero rows,
		 * to position j along concat_dim */
		const char *p = recv;
		for (int j = 0; j < n; j++)
			for (int64_t o = 0; o < co; o++) {
				char *dst = (char *)out + ((size_t)o * (size_t)n + (size_t)j) * crow;
				for (int64_t s = 0; s < nsc2; s++) {
					size_t u = (size_t)rc[(int64_t)j * nseg + o * nsc2 + s] * rowb;
					memcpy(dst + (size_t)s * slabb, p, u);
					memset(dst + (size_t)s * slabb + u, 0, slabb - u);
					p += u;
				}
			}
		if (sent) {
			*sent = (int64_t)(n - 1) * nseg * 4;
			for (int j = 0; j < n; j++)
				if (j != grp.index)
					*sent += scounts[j] * (int64_t)es;
		}
	}
	free(cnt);
	free(sc);
	return r ? -1 : 0;
}

int comm_all_to_all_dim(Comm *c, uint32_t axes, const void *in, void *out,
			const int64_t *shape, int rank, int split_dim, int concat_dim,
			DtmDtype t)
{
	if (check_axes(c, axes, "all_to_all") || check_dim(c, rank, split_dim, "all_to_all") ||
	    check_dim(c, rank, concat_dim, "all_to_all"))
		return -1;
	int n = comm_group(&c->mesh, c->rank, axes).size;
	if (n <= 0)
		return comm_errf(c, "all_to_all over an empty group");
	if (rank == 0 || shape[split_dim] % n)
		return comm_errf(c, "all_to_all splitting dim %d of %lld over %d ranks: pad the "
				 "dim to a multiple of the group", split_dim,
				 rank ? (long long)shape[split_dim] : 1LL, n);
	int64_t numel = 1;
	for (int d = 0; d < rank; d++)
		numel *= shape[d];
	int64_t count = numel / n;
	size_t es = dsize(t);
	/* block shape: the input shape with split_dim divided by n */
	int64_t bs[DTM_MAX_RANK];
	memcpy(bs, shape, (size_t)rank * sizeof *bs);
	bs[split_dim] /= n;
	char *tmp = comm_scratch(c, 2 * numel * (int64_t)es);
	if (!tmp)
		return comm_errf(c, "out of memory staging an all_to_all");
	char *send = tmp, *recv = tmp + numel * (int64_t)es;
	/* pack: block j = in[..., j*bs:(j+1)*bs along split_dim, ...] */
	int64_t so, sl, si;
	split3(shape, rank, split_dim, &so, &sl, &si);
	size_t srow = (size_t)(sl / n * si) * es;
	for (int j = 0; j < n; j++)
		for (int64_t o = 0; o < so; o++)
			memcpy(send + ((size_t)j * (size_t)so + (size_t)o) * srow,
			       (const char *)in + ((size_t)o * (size_t)n + (size_t)j) * srow, srow);
	int64_t *cnt = malloc((size_t)n * sizeof *cnt);
	if (!cnt)
		return comm_errf(c, "out of memory");
	for (int j = 0; j < n; j++)
		cnt[j] = count;
	int rc = c->ops->all_to_allv(c, axes, send, cnt, recv, cnt, t);
	free(cnt);
	if (rc)
		return -1;
	/* unpack: received block j (shape bs) goes to position j along
	 * concat_dim of the output */
	int64_t co, cl, ci;
	split3(bs, rank, concat_dim, &co, &cl, &ci);
	size_t crow = (size_t)(cl * ci) * es;
	for (int j = 0; j < n; j++)
		for (int64_t o = 0; o < co; o++)
			memcpy((char *)out + ((size_t)o * (size_t)n + (size_t)j) * crow,
			       recv + ((size_t)j * (size_t)co + (size_t)o) * crow, crow);
	return 0;
}

/* ---- plan actions ----
 *
 * The conventions the compiler emits (runtime/plan.h's DtmAction):
 *
 *   args[0] is the input, args[nargs-1] the output (the same buffer id, or
 *   nargs == 1, for an in-place op); axes the group; dtype the input's.
 *   bytes: the payload this rank contributes from args[0]; 0 = the whole
 *   buffer.  A flat ZeRO buffer padded to a multiple of the group passes
 *   its padded size (or 0).
 *
 *   ALL_REDUCE      red; out has the input's size.  Use red = AVG for DDP.
 *   ALL_GATHER      along dim of the input's shape (dim 0 = flat); out's
 *                   dim is n times the input's.
 *   REDUCE_SCATTER  along dim (0 = flat); the input's dim divides by n;
 *                   member g keeps block g.
 *   ALL_TO_ALL      split along dim, concatenate along dim2 (both of the
 *                   input's shape); dim == dim2 == 0 is the flat form.
 *   BROADCAST       root = peer_offset (a group index), in place on args[0]
 *                   (copied to out when out differs).
 *   SEND / RECV     args[0] is the buffer sent or received into; data moves
 *                   peer_offset steps along axes (see comm.h), wrapping.
 *
 * With bytes != 0 and a dim other than 0 the shape is taken from the
 * buffer (bytes must then be the buffer's size).  Inputs that overlap the
 * output (other than for all_reduce) are staged through scratch. */

static int64_t numel_of(const DtmBuffer *b)
{
	int64_t n = 1;
	for (int d = 0; d < b->rank; d++)
		n *= b->shape[d];
	return n;
}

static bool overlap(const void *a, int64_t na, const void *b, int64_t nb)
{
	const char *x = a, *y = b;
	return x < y + nb && y < x + na;
}

int comm_run_action(Comm *c, const DtmPlan *p, const DtmAction *a, void *const *ptr,
		    char *err, int errlen)
{
	const char *label = a->label ? a->label : "?";
	if (a->nargs < 1) {
		snprintf(err, (size_t)errlen, "communication action '%s' has no buffers", label);
		return -1;
	}
	int inb = a->args[0], outb = a->args[a->nargs - 1];
	const DtmBuffer *bi = &p->buffers[inb], *bo = &p->buffers[outb];
	DtmDtype t = bi->dtype;
	size_t es = dsize(t);
	int64_t in_bytes = a->bytes > 0 ? a->bytes : numel_of(bi) * (int64_t)es;
	int64_t count = in_bytes / (int64_t)es;
	const void *in = ptr[inb];
	void *out = ptr[outb];
	int n = comm_group(&c->mesh, c->rank, a->axes).size;
	int64_t out_bytes = in_bytes;
	int rc = 0;
	if (in_bytes > bi->bytes) {
		snprintf(err, (size_t)errlen, "'%s' moves %lld bytes of '%s', which has %lld",
			 label, (long long)in_bytes, bi->name ? bi->name : "?",
			 (long long)bi->bytes);
		return -1;
	}
	if (a->kind == DTM_ACT_COLL) {
		if (a->coll == DTM_COLL_ALL_GATHER)
			out_bytes = in_bytes * n;
		else if (a->coll == DTM_COLL_REDUCE_SCATTER)
			out_bytes = in_bytes / n;
		if (bo->dtype != t || out_bytes > bo->bytes) {
			snprintf(err, (size_t)errlen,
				 "'%s' writes %lld bytes of %s into '%s' (%lld bytes of %s)", label,
				 (long long)out_bytes, t == DTM_F32 ? "f32" : "16/32-bit",
				 bo->name ? bo->name : "?", (long long)bo->bytes,
				 bo->dtype == t ? "the same dtype" : "another dtype");
			return -1;
		}
		/* an input overlapping the output is copied aside first (its own
		 * allocation: the dim helpers use c->scratch themselves) */
		void *own = NULL;
		if (a->coll != DTM_COLL_ALL_REDUCE && a->coll != DTM_COLL_BROADCAST &&
		    overlap(in, in_bytes, out, out_bytes)) {
			own = malloc((size_t)in_bytes);
			if (!own) {
				snprintf(err, (size_t)errlen, "out of memory staging '%s'", label);
				return -1;
			}
			memcpy(own, in, (size_t)in_bytes);
			in = own;
		}
		bool whole = in_bytes == numel_of(bi) * (int64_t)es;
		int dim = whole ? a->dim : 0, dim2 = whole ? a->dim2 : 0;
		switch (a->coll) {
		case DTM_COLL_ALL_REDUCE:
			rc = comm_all_reduce(c, a->axes, in, out, count, t, a->red);
			break;
		case DTM_COLL_ALL_GATHER:
			rc = dim == 0 ? comm_all_gather(c, a->axes, in, out, count, t) :
				        comm_all_gather_dim(c, a->axes, in, out, bi->shape, bi->rank,
							    dim, t);
			break;
		case DTM_COLL_REDUCE_SCATTER:
			if (dim == 0 && count % n) {
				rc = comm_errf(c, "'%s': reduce_scatter of %lld elements over %d "
					       "ranks: pad the buffer to a multiple of the group",
					       label, (long long)count, n);
				break;
			}
			rc = dim == 0 ? comm_reduce_scatter(c, a->axes, in, out, count / n, t, a->red) :
				        comm_reduce_scatter_dim(c, a->axes, in, out, bi->shape,
							        bi->rank, dim, t, a->red);
			break;
		case DTM_COLL_ALL_TO_ALL:
			if (dim == 0 && dim2 == 0) {
				if (count % n) {
					rc = comm_errf(c, "'%s': all_to_all of %lld elements over %d "
						       "ranks", label, (long long)count, n);
					break;
				}
				rc = comm_all_to_all(c, a->axes, in, out, count / n, t);
			} else if (a->vdim > 0 && whole) {
				int64_t sent = 0;
				rc = comm_all_to_all_rows(c, a->axes, in, out, bi->shape, bi->rank, dim,
							  dim2, a->vdim, t, &sent);
				c->a2a_bytes += sent;
				break;
			} else {
				rc = comm_all_to_all_dim(c, a->axes, in, out, bi->shape, bi->rank,
							 dim, dim2, t);
			}
			c->a2a_bytes += (int64_t)(n - 1) * (count / n) * (int64_t)es;
			break;
		case DTM_COLL_BROADCAST:
			if (out != in)
				memmove(out, in, (size_t)in_bytes);
			rc = comm_broadcast(c, a->axes, out, count, t, a->peer_offset);
			break;
		default:
			rc = comm_errf(c, "'%s': unknown collective %d", label, (int)a->coll);
		}
		free(own);
	} else if (a->kind == DTM_ACT_SEND) {
		rc = comm_send(c, a->axes, a->peer_offset, a->peer_mirror, in, in_bytes);
	} else if (a->kind == DTM_ACT_RECV) {
		rc = comm_recv(c, a->axes, a->peer_offset, a->peer_mirror, ptr[inb], in_bytes);
	} else {
		snprintf(err, (size_t)errlen, "'%s' is not a communication action", label);
		return -1;
	}
	if (rc) {
		snprintf(err, (size_t)errlen, "%s (action '%s')", c->err, label);
		return rc;
	}
	comm_count_moved(c, a, in_bytes);
	return 0;
}

void comm_count_moved(Comm *c, const DtmAction *a, int64_t bytes)
{
	int k = a->kind == DTM_ACT_SEND   ? COMM_MOVED_SEND
	        : a->kind == DTM_ACT_RECV ? COMM_MOVED_RECV
	                                  : (int)a->coll;
	if (k < 0 || k >= COMM_MOVED_KINDS)
		return;
	atomic_fetch_add_explicit(&c->moved_count[k], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->moved_bytes[k], bytes, memory_order_relaxed);
}

/* ---- comm_calibrate: what `dtmc calibrate` reads ----
 *
 * Each collective kind over the whole world (send/recv: rank 2i to 2i + 1)
 * at two sizes, COMM_CAL_SMALL and COMM_CAL_BIG bytes of f32: the small
 * one's time less its bytes at the big one's rate is the latency.  Every
 * rank runs the same fixed repetitions between barriers (a count decided
 * by rank 0 from a first timing would need a broadcast of its own).
 * Rank 0 writes `coll KIND N = LATENCY, BYTES/s` lines (tools/hw.h). */
#define COMM_CAL_SMALL (16 << 10)
#define COMM_CAL_BIG (4 << 20)

static double cal_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cal_op(Comm *c, int kind, uint32_t axes, void *in, void *out, int64_t count)
{
	int n = c->size;
	switch (kind) {
	case 0:
		return comm_all_reduce(c, axes, in, out, count, DTM_F32, DTM_RED_SUM);
	case 1:
		return comm_all_gather(c, axes, in, out, count / n, DTM_F32);
	case 2:
		return comm_reduce_scatter(c, axes, in, out, count / n, DTM_F32, DTM_RED_SUM);
	case 3:
		return comm_all_to_all(c, axes, in, out, count / n, DTM_F32);
	case 4:
		return comm_broadcast(c, axes, in, count, DTM_F32, 0);
	default:
		if (c->rank % 2 == 0 && c->rank + 1 < n)
			return comm_send(c, axes, 1, false, in, count * 4);
		if (c->rank % 2 == 1)
			return comm_recv(c, axes, 1, false, out, count * 4);
		return 0;
	}
}

/* Seconds per operation on this rank (the receiver's for send/recv). */
static int cal_time(Comm *c, int kind, uint32_t axes, void *in, void *out, int64_t bytes,
		    int reps, double *s)
{
	int64_t count = bytes / 4 / c->size * c->size;
	if (cal_op(c, kind, axes, in, out, count) || comm_barrier(c, axes))
		return -1;
	double t0 = cal_now();
	for (int r = 0; r < reps; r++)
		if (cal_op(c, kind, axes, in, out, count))
			return -1;
	if (comm_barrier(c, axes))
		return -1;
	*s = (cal_now() - t0) / reps;
	return 0;
}

int comm_calibrate(Comm *c, char *text, size_t cap)
{
	static const char *const kinds[] = {"all_reduce", "all_gather", "reduce_scatter",
					    "all_to_all", "broadcast",  "send"};
	uint32_t axes = (1u << c->mesh.naxes) - 1;
	float *in = calloc(COMM_CAL_BIG / 4, sizeof(float));
	float *out = calloc(COMM_CAL_BIG / 4, sizeof(float));
	size_t len = 0;
	int rc = in && out ? 0 : -1;
	if (rc)
		snprintf(c->err, COMM_ERR_LEN, "out of memory for the calibration");
	if (text && cap)
		text[0] = 0;
	for (int k = 0; k < 6 && !rc; k++) {
		double ts, tb;
		rc = cal_time(c, k, axes, in, out, COMM_CAL_SMALL, 200, &ts) ||
		     cal_time(c, k, axes, in, out, COMM_CAL_BIG, 10, &tb);
		/* the pair's receiver timed send/recv: rank 1 tells rank 0 */
		double both[2] = {ts, tb};
		if (!rc && k == 5 && c->size > 1) {
			if (c->rank == 1)
				rc = comm_send(c, axes, c->size - 1, false, both, sizeof both);
			else if (c->rank == 0)
				rc = comm_recv(c, axes, c->size - 1, false, both, sizeof both);
		}
		if (rc || c->rank != 0 || !text)
			continue;
		ts = both[0], tb = both[1];
		double bw = tb > ts ? (double)(COMM_CAL_BIG - COMM_CAL_SMALL) / (tb - ts)
				    : COMM_CAL_BIG / tb;
		double lat = ts - COMM_CAL_SMALL / bw;
		for (int rep = 0; rep < (k == 5 ? 2 : 1); rep++) {
			int w = snprintf(text + len, cap - len, "coll %s %d = %.6g, %.6g\n",
					 rep ? "recv" : kinds[k], c->size, lat > 0 ? lat : 0, bw);
			if (w > 0 && (size_t)w < cap - len)
				len += (size_t)w;
		}
	}
	free(in);
	free(out);
	return rc;
}
