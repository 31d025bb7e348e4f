/* report.c - the `dtmc check` summary.
 *
 * Everything here reads a verified module and prints; nothing changes it.
 * Per-rank numbers come from the placement rules in placement.c
 * (placement_shard_shape, torch.chunk sizes), so they are what partition
 * and the runtime will allocate.
 */
#include "tools/report.h"

#include <inttypes.h>
#include <string.h>

/* Above this many ranks the per-rank totals are computed for rank 0 only
 * (each rank costs one pass over the params). */
#define REPORT_MAX_RANKS_SCANNED 65536

char *report_count(char *buf, int64_t v)
{
	char tmp[32];
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
	int n = 0;
	do {
		if (n % 4 == 3)
			tmp[n++] = ',';
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	int k = 0;
	if (v < 0)
		buf[k++] = '-';
	while (n > 0)
		buf[k++] = tmp[--n];
	buf[k] = 0;
	return buf;
}

/* "1.5 GiB" style; bytes below 1 KiB are written exactly. */
static char *fmt_bytes(char *buf, size_t cap, double b)
{
	static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	int u = 0;
	while (b >= 1024 && u < 5) {
		b /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%.0f B", b);
	else
		snprintf(buf, cap, "%.1f %s", b, units[u]);
	return buf;
}

static void fmt_shape(char *buf, size_t cap, int rank, const int64_t *shape)
{
	size_t n = 0;
	n += (size_t)snprintf(buf + n, cap - n, "[");
	for (int i = 0; i < rank && n < cap; i++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? ", " : "", shape[i]);
	if (n < cap)
		snprintf(buf + n, cap - n, "]");
}

static int64_t numel(int rank, const int64_t *shape)
{
	int64_t e = 1;
	for (int i = 0; i < rank; i++)
		e *= shape[i];
	return e;
}

/* A param's placement, or replicated when none was decided: a value with no
 * annotation is replicated over every mesh axis until propagation says
 * otherwise. */
static Placement param_placement(const IrModule *m, const IrNode *n)
{
	Placement p = *ir_place(m, n);
	if (!p.known || p.ndims != n->rank)
		placement_replicated(&p, n->rank);
	return p;
}

static int64_t rank_numel(const IrNode *n, const Placement *p, const Mesh *mesh, int64_t r)
{
	int64_t local[IR_MAX_RANK];
	placement_shard_shape(p, mesh, r, n->rank, n->shape, local);
	return numel(n->rank, local);
}

/* The smallest and largest shard over all ranks.  Every mesh axis appears
 * at most once in a placement, so each dim's shard index varies
 * independently and the extremes are the products of each dim's extremes
 * (torch.chunk: the first shards are full, the last may be short or empty). */
static void shard_range(const IrNode *n, const Placement *p, const Mesh *mesh, int64_t *lo,
                        int64_t *hi)
{
	*lo = *hi = 1;
	for (int d = 0; d < n->rank; d++) {
		int64_t parts = placement_dim_parts(p, mesh, d);
		if (parts < 1)
			parts = 1;
		int64_t mx = chunk_size(n->shape[d], parts, 0);
		int64_t mn = chunk_size(n->shape[d], parts, parts - 1);
		*lo *= mn;
		*hi *= mx;
	}
}

static void print_header(FILE *out, const IrModule *m, int64_t nparams, int64_t total, double bytes)
{
	char b1[32], b2[32];
	const Mesh *mesh = &m->mesh;
	fprintf(out, "model %s\n", m->name ? m->name : "(unnamed)");
	fprintf(out, "mesh (");
	for (int i = 0; i < mesh->naxes; i++)
		fprintf(out, "%s%s = %" PRId64, i ? ", " : "", mesh->names[i], mesh->sizes[i]);
	int64_t nr = mesh_size(mesh);
	fprintf(out, "): %s rank%s\n", report_count(b1, nr), nr == 1 ? "" : "s");
	fprintf(out, "parameters: %s in %" PRId64 " tensor%s (%s)\n", report_count(b1, total),
	        nparams, nparams == 1 ? "" : "s", fmt_bytes(b2, sizeof b2, bytes));

	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op != IR_OP_INPUT)
			continue;
		char shape[256], place[256] = "";
		fmt_shape(shape, sizeof shape, n->rank, n->shape);
		if (n->place)
			placement_format(ir_place(m, n), mesh, place, sizeof place);
		fprintf(out, "input %s : %s%s%s%s\n", n->name ? n->name : "?",
		        ir_dtype_name(n->dtype), shape, place[0] ? " @ " : "", place);
	}
	if (m->nchooses > 0)
		fprintf(out, "sweep points: %d choose()\n", m->nchooses);

	const IrTrain *t = &m->train;
	const char *opt = ir_train_word(IR_TRAIN_OPTIMIZER, (int)t->optimizer);
	const char *sched = ir_train_word(IR_TRAIN_SCHEDULE, (int)t->schedule);
	fprintf(out, "train: %s, zero %d, %" PRId64 " microbatch%s, schedule %s, precision %s",
	        opt ? opt : "-", t->zero, t->microbatches, t->microbatches == 1 ? "" : "es",
	        sched ? sched : "-", ir_dtype_name(t->precision));
	/* the rest of the mixed-precision policy where it is not all f32 */
	if (t->precision != IR_F32 || t->reduce_dtype != IR_F32 || t->master_dtype != IR_F32)
		fprintf(out, " (gradients %s, master %s)", ir_dtype_name(t->reduce_dtype),
		        t->master_dtype == t->precision ? "none" : ir_dtype_name(t->master_dtype));
	fprintf(out, ", %" PRId64 " steps, data %s\n", t->steps, t->data ? t->data : "-");
}

/* One table row; the columns are sized to the widest cell. */
enum { COL_NAME, COL_DTYPE, COL_SHAPE, COL_PLACE, COL_STAGE, COL_ELEMS, NCOLS };

static void row_widths(int *w, char cells[NCOLS][128])
{
	for (int c = 0; c < NCOLS; c++) {
		int l = (int)strlen(cells[c]);
		if (l > w[c])
			w[c] = l;
	}
}

static void print_row(FILE *out, const int *w, char cells[NCOLS][128], bool stages)
{
	fprintf(out, "  %-*s  %-*s  %-*s  %-*s  ", w[COL_NAME], cells[COL_NAME], w[COL_DTYPE],
	        cells[COL_DTYPE], w[COL_SHAPE], cells[COL_SHAPE], w[COL_PLACE], cells[COL_PLACE]);
	if (stages)
		fprintf(out, "%*s  ", w[COL_STAGE], cells[COL_STAGE]);
	fprintf(out, "%*s\n", w[COL_ELEMS], cells[COL_ELEMS]);
}

static void param_cells(const IrModule *m, const IrNode *n, char cells[NCOLS][128])
{
	char a[32], b[32];
	Placement p = param_placement(m, n);
	snprintf(cells[COL_NAME], 128, "%s", n->name ? n->name : "?");
	snprintf(cells[COL_DTYPE], 128, "%s", ir_dtype_name(n->dtype));
	fmt_shape(cells[COL_SHAPE], 128, n->rank, n->shape);
	cells[COL_PLACE][0] = 0;
	placement_format(&p, &m->mesh, cells[COL_PLACE], 128);
	if (!cells[COL_PLACE][0])
		snprintf(cells[COL_PLACE], 128, "-");
	if (ir_stage(m, n) >= 0)
		snprintf(cells[COL_STAGE], 128, "%d", ir_stage(m, n));
	else
		snprintf(cells[COL_STAGE], 128, "-");
	int64_t lo, hi;
	shard_range(n, &p, &m->mesh, &lo, &hi);
	if (lo == hi)
		report_count(cells[COL_ELEMS], rank_numel(n, &p, &m->mesh, 0));
	else
		snprintf(cells[COL_ELEMS], 128, "%s..%s", report_count(a, lo), report_count(b, hi));
}

/* Sums each rank's shard elements and bytes over all params; reports the
 * least and most loaded ranks. */
static void rank_totals(const IrModule *m, int64_t *emin, int64_t *emax, int64_t *bmin,
                        int64_t *bmax, bool *all_ranks)
{
	int64_t nr = mesh_size(&m->mesh);
	*all_ranks = nr <= REPORT_MAX_RANKS_SCANNED;
	if (!*all_ranks)
		nr = 1;
	for (int64_t r = 0; r < nr; r++) {
		int64_t e = 0, b = 0;
		for (int i = 0; i < m->nnodes; i++) {
			const IrNode *n = m->nodes[i];
			if (n->op != IR_OP_PARAM)
				continue;
			Placement p = param_placement(m, n);
			int64_t k = rank_numel(n, &p, &m->mesh, r);
			e += k;
			b += k * ir_dtype_size(n->dtype);
		}
		if (r == 0 || e < *emin)
			*emin = e;
		if (r == 0 || e > *emax)
			*emax = e;
		if (r == 0 || b < *bmin)
			*bmin = b;
		if (r == 0 || b > *bmax)
			*bmax = b;
	}
}

void report_check(FILE *out, const IrModule *m)
{
	int64_t nparams = 0, total = 0;
	double bytes = 0;
	bool stages = false;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op != IR_OP_PARAM)
			continue;
		nparams++;
		total += ir_node_numel(n);
		bytes += (double)ir_node_numel(n) * ir_dtype_size(n->dtype);
		if (ir_stage(m, n) >= 0)
			stages = true;
	}
	print_header(out, m, nparams, total, bytes);
	if (nparams == 0)
		return;

	char cells[NCOLS][128];
	static const char *heads[NCOLS] = {"param",     "dtype", "shape",
	                                   "placement", "stage", "elements/rank"};
	int w[NCOLS] = {0};
	for (int c = 0; c < NCOLS; c++)
		snprintf(cells[c], 128, "%s", heads[c]);
	row_widths(w, cells);
	for (int i = 0; i < m->nnodes; i++) {
		if (m->nodes[i]->op != IR_OP_PARAM)
			continue;
		param_cells(m, m->nodes[i], cells);
		row_widths(w, cells);
	}

	fputc('\n', out);
	for (int c = 0; c < NCOLS; c++)
		snprintf(cells[c], 128, "%s", heads[c]);
	print_row(out, w, cells, stages);
	for (int i = 0; i < m->nnodes; i++) {
		if (m->nodes[i]->op != IR_OP_PARAM)
			continue;
		param_cells(m, m->nodes[i], cells);
		print_row(out, w, cells, stages);
	}

	int64_t emin = 0, emax = 0, bmin = 0, bmax = 0;
	bool all_ranks;
	rank_totals(m, &emin, &emax, &bmin, &bmax, &all_ranks);
	char a[32], b[32], c[32], e[32];
	fputc('\n', out);
	if (!all_ranks)
		fprintf(out, "per rank (rank 0): %s elements, %s\n", report_count(a, emin),
		        fmt_bytes(c, sizeof c, (double)bmin));
	else if (emin == emax)
		fprintf(out, "per rank: %s elements, %s\n", report_count(a, emin),
		        fmt_bytes(c, sizeof c, (double)bmin));
	else {
		fmt_bytes(c, sizeof c, (double)bmin);
		fmt_bytes(e, sizeof e, (double)bmax);
		if (strcmp(c, e) == 0)
			fprintf(out, "per rank: %s..%s elements, %s\n", report_count(a, emin),
			        report_count(b, emax), c);
		else
			fprintf(out, "per rank: %s..%s elements, %s..%s\n", report_count(a, emin),
			        report_count(b, emax), c, e);
	}
}
