/* test_mesh.c - mesh coordinates, groups, placements and torch.chunk rules,
 * checked against REFERENCE.md's worked layouts. */
#include "ir/ir.h"
#include "check.h"

static Mesh mesh3(void)
{
	Mesh m = {0};
	m.naxes = 3;
	m.names[0] = "pp";
	m.sizes[0] = 2;
	m.names[1] = "fsdp";
	m.sizes[1] = 4;
	m.names[2] = "tp";
	m.sizes[2] = 2;
	return m;
}

/* The group of every rank along `mask` must be the expected list that
 * contains it, with rank's index in it. */
static void check_groups(const Mesh *m, uint32_t mask, const int64_t *groups, int ngroups,
                         int gsize)
{
	for (int64_t r = 0; r < mesh_size(m); r++) {
		int64_t out[16], idx = -1;
		int64_t n = mesh_group(m, r, mask, out, 16, &idx);
		CHECK_EQ_INT(n, gsize);
		int found = 0;
		for (int g = 0; g < ngroups; g++) {
			const int64_t *want = groups + g * gsize;
			int hit = -1;
			for (int k = 0; k < gsize; k++)
				if (want[k] == r)
					hit = k;
			if (hit < 0)
				continue;
			found++;
			CHECK_EQ_INT(idx, hit);
			for (int k = 0; k < gsize; k++)
				CHECK_EQ_INT(out[k], want[k]);
		}
		CHECK_EQ_INT(found, 1);
	}
}

static void test_reference_layout(void)
{
	Mesh m = mesh3();
	CHECK_EQ_INT(mesh_size(&m), 16);
	CHECK_EQ_INT(mesh_axis_index(&m, "fsdp"), 1);
	CHECK_EQ_INT(mesh_axis_index(&m, "dp"), -1);
	for (int64_t r = 0; r < 16; r++) {
		int64_t c[3];
		mesh_coords(&m, r, c);
		CHECK_EQ_INT(c[0] * 8 + c[1] * 2 + c[2], r);
		CHECK_EQ_INT(mesh_rank(&m, c), r);
	}
	int64_t c5[3];
	mesh_coords(&m, 5, c5);
	CHECK_EQ_INT(c5[0], 0);
	CHECK_EQ_INT(c5[1], 2);
	CHECK_EQ_INT(c5[2], 1);

	static const int64_t tp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
	check_groups(&m, 1u << 2, tp, 8, 2);
	static const int64_t fsdp[] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
	check_groups(&m, 1u << 1, fsdp, 4, 4);
	static const int64_t pp[] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
	check_groups(&m, 1u << 0, pp, 8, 2);
	CHECK_EQ_INT(mesh_axes_size(&m, 1u << 1), 4);
	CHECK_EQ_INT(mesh_axes_size(&m, 0), 1);
	CHECK_EQ_INT(mesh_axes_size(&m, 7), 16);

	/* rank 5 along (fsdp, tp): ranks 0..7, fsdp major; rank 5 is index 5 */
	int64_t out[16], idx;
	CHECK_EQ_INT(mesh_group(&m, 5, (1u << 1) | (1u << 2), out, 16, &idx), 8);
	for (int k = 0; k < 8; k++)
		CHECK_EQ_INT(out[k], k);
	CHECK_EQ_INT(idx, 5);
	/* rank 13 = (1, 2, 1) along (pp, tp), pp major: [4, 5, 12, 13] */
	CHECK_EQ_INT(mesh_group(&m, 13, (1u << 0) | (1u << 2), out, 16, &idx), 4);
	CHECK_EQ_INT(out[0], 4);
	CHECK_EQ_INT(out[1], 5);
	CHECK_EQ_INT(out[2], 12);
	CHECK_EQ_INT(out[3], 13);
	CHECK_EQ_INT(idx, 3);
	/* the empty mask is the rank alone; cap bounds what is written */
	CHECK_EQ_INT(mesh_group(&m, 9, 0, out, 16, &idx), 1);
	CHECK_EQ_INT(out[0], 9);
	CHECK_EQ_INT(idx, 0);
	out[1] = -7;
	CHECK_EQ_INT(mesh_group(&m, 0, 7, out, 1, NULL), 16);
	CHECK_EQ_INT(out[1], -7);
}

static void test_chunk(void)
{
	/* torch.chunk: 6 over 4 -> 2, 2, 2, 0 */
	int64_t want[] = {2, 2, 2, 0}, off[] = {0, 2, 4, 6};
	for (int i = 0; i < 4; i++) {
		CHECK_EQ_INT(chunk_size(6, 4, i), want[i]);
		CHECK_EQ_INT(chunk_offset(6, 4, i), off[i]);
	}
	CHECK_EQ_INT(chunk_size(8, 4, 3), 2);
	CHECK_EQ_INT(chunk_size(7, 1, 0), 7);
	CHECK_EQ_INT(chunk_size(0, 4, 2), 0);
	CHECK_EQ_INT(chunk_size(5, 2, 1), 2);
	CHECK_EQ_INT(chunk_size(3, 4, 2), 1);
	CHECK_EQ_INT(chunk_size(3, 4, 3), 0);
	/* 5 over 4 -> 2, 2, 1, 0 (torch.chunk(torch.arange(5), 4)); 2 over
	 * 4 -> 1, 1, 0, 0, the empty shards starting at the end */
	int64_t w5[] = {2, 2, 1, 0}, o5[] = {0, 2, 4, 5}, w2[] = {1, 1, 0, 0}, o2[] = {0, 1, 2, 2};
	for (int i = 0; i < 4; i++) {
		CHECK_EQ_INT(chunk_size(5, 4, i), w5[i]);
		CHECK_EQ_INT(chunk_offset(5, 4, i), o5[i]);
		CHECK_EQ_INT(chunk_size(2, 4, i), w2[i]);
		CHECK_EQ_INT(chunk_offset(2, 4, i), o2[i]);
	}
}

/* After partition every rank stores ceil(n / parts) rows of an uneven dim
 * (rank 0's shard, the largest); the node records the global extent. */
static void test_padded_global(void)
{
	Arena a;
	arena_init(&a);
	IrModule m = {0};
	m.arena = &a;
	m.places = ir_places_new(&a);
	m.mesh.naxes = 2;
	m.mesh.names[0] = "dp";
	m.mesh.names[1] = "tp";
	m.mesh.sizes[0] = 2;
	m.mesh.sizes[1] = 4;
	IrNode n = {0};
	n.rank = 2;
	Placement pl;
	placement_replicated(&pl, 2);
	pl.naxes[0] = 1; /* [dp, tp] */
	pl.axes[0][0] = 0;
	pl.naxes[1] = 1;
	pl.axes[1][0] = 1;
	CHECK(m.places && ir_place_set(&m, &n, &pl));
	int64_t g[2] = {6, 6}, loc[2];
	placement_shard_shape(&pl, &m.mesh, 0, 2, g, loc);
	CHECK_EQ_INT(loc[0], 3); /* 6 over dp = 2: even */
	CHECK_EQ_INT(loc[1], 2); /* 6 over tp = 4: 2, 2, 2, 0 */
	placement_shard_shape(&pl, &m.mesh, 7, 2, g, loc);
	CHECK_EQ_INT(loc[1], 0); /* tp coordinate 3: the empty shard */
	n.shape[0] = 3;
	n.shape[1] = 2;
	CHECK_EQ_INT(ir_global_dim(&m, &n, 0), 6);
	CHECK_EQ_INT(ir_global_dim(&m, &n, 1), 8); /* not padded: 2 * 4 */
	ir_set_padded(&m, &n, 1, 6);
	CHECK_EQ_INT(ir_global_dim(&m, &n, 1), 6);
	arena_free(&a);
}

static void test_shard_shapes(void)
{
	/* FSDP2 per-parameter: [3,3] over 2 -> [2,3], [1,3];
	 * [2,3] over 4 -> [1,3], [1,3], [0,3], [0,3] */
	Mesh m = {0};
	m.naxes = 1;
	m.names[0] = "dp";
	m.sizes[0] = 2;
	Placement p;
	placement_replicated(&p, 2);
	p.naxes[0] = 1;
	p.axes[0][0] = 0;
	int64_t g33[] = {3, 3}, loc[2];
	placement_shard_shape(&p, &m, 0, 2, g33, loc);
	CHECK_EQ_INT(loc[0], 2);
	CHECK_EQ_INT(loc[1], 3);
	placement_shard_shape(&p, &m, 1, 2, g33, loc);
	CHECK_EQ_INT(loc[0], 1);
	CHECK_EQ_INT(loc[1], 3);
	m.sizes[0] = 4;
	int64_t g23[] = {2, 3}, want[] = {1, 1, 0, 0};
	for (int r = 0; r < 4; r++) {
		placement_shard_shape(&p, &m, r, 2, g23, loc);
		CHECK_EQ_INT(loc[0], want[r]);
		CHECK_EQ_INT(loc[1], 3);
	}

	/* [(dp, tp), _] on mesh (dp = 2, tp = 3): 12 rows over 6 parts, shard
	 * index = dp * 3 + tp; rank = dp * 3 + tp too, so rows 2r..2r+1 */
	Mesh m2 = {0};
	m2.naxes = 2;
	m2.names[0] = "dp";
	m2.sizes[0] = 2;
	m2.names[1] = "tp";
	m2.sizes[1] = 3;
	Placement q;
	placement_replicated(&q, 2);
	q.naxes[0] = 2;
	q.axes[0][0] = 0;
	q.axes[0][1] = 1;
	CHECK_EQ_INT(placement_dim_parts(&q, &m2, 0), 6);
	CHECK_EQ_INT(placement_dim_parts(&q, &m2, 1), 1);
	int64_t g[] = {11, 5};
	int64_t rows[] = {2, 2, 2, 2, 2, 1};
	for (int r = 0; r < 6; r++) {
		placement_shard_shape(&q, &m2, r, 2, g, loc);
		CHECK_EQ_INT(loc[0], rows[r]);
		CHECK_EQ_INT(loc[1], 5);
	}
	/* listed (tp, dp): tp major, so rank (dp = 1, tp = 0) is shard 1 */
	q.axes[0][0] = 1;
	q.axes[0][1] = 0;
	int64_t g7[] = {7, 1};
	placement_shard_shape(&q, &m2, 3, 2, g7, loc); /* dp 1, tp 0 -> shard 1 */
	CHECK_EQ_INT(loc[0], 2);
	placement_shard_shape(&q, &m2, 5, 2, g7, loc); /* dp 1, tp 2 -> shard 5: 7-10 < 0 */
	CHECK_EQ_INT(loc[0], 0);
	placement_shard_shape(&q, &m2, 4, 2, g7, loc); /* dp 1, tp 1 -> shard 3: 7-6 = 1 */
	CHECK_EQ_INT(loc[0], 1);
}

static void test_format(void)
{
	Mesh m = {0};
	m.naxes = 3;
	m.names[0] = "dp";
	m.sizes[0] = 2;
	m.names[1] = "dp2";
	m.sizes[1] = 2;
	m.names[2] = "tp";
	m.sizes[2] = 2;
	Placement p;
	char buf[128];
	placement_replicated(&p, 3);
	p.naxes[0] = 1;
	p.axes[0][0] = 0;
	p.naxes[1] = 2;
	p.axes[1][0] = 1;
	p.axes[1][1] = 2;
	placement_format(&p, &m, buf, sizeof buf);
	CHECK_EQ_STR(buf, "[dp, (dp2, tp), _]");
	placement_replicated(&p, 2);
	p.partial = 1u << 2;
	placement_format(&p, &m, buf, sizeof buf);
	CHECK_EQ_STR(buf, "[_, _] partial(tp)");
	p.partial_op = IR_RED_MAX;
	p.partial |= 1u << 0;
	placement_format(&p, &m, buf, sizeof buf);
	CHECK_EQ_STR(buf, "[_, _] partial(dp, tp, max)");
	Placement u = {0};
	placement_format(&u, &m, buf, sizeof buf);
	CHECK_EQ_STR(buf, "?");
	placement_replicated(&p, 0);
	placement_format(&p, &m, buf, sizeof buf);
	CHECK_EQ_STR(buf, "[]");
	/* truncation is safe and reports the full length */
	placement_replicated(&p, 3);
	p.naxes[1] = 2;
	p.axes[1][0] = 1;
	p.axes[1][1] = 2;
	int n = placement_format(&p, &m, buf, 5);
	CHECK_EQ_INT(n, (int)strlen("[_, (dp2, tp), _]"));
	CHECK_EQ_INT(strlen(buf), 4);

	/* interned: equal placements, and only those, get one id */
	Arena ar;
	arena_init(&ar);
	IrPlaces *t = ir_places_new(&ar);
	CHECK(t != NULL);
	if (!t)
		return;
	Placement a, b;
	placement_replicated(&a, 2);
	placement_replicated(&b, 2);
	uint32_t ia = ir_places_intern(t, &a);
	CHECK(ia != 0 && ir_places_intern(t, &b) == ia);
	b.naxes[1] = 1;
	CHECK(ir_places_intern(t, &b) != ia);
	b.naxes[1] = 0;
	b.partial_op = IR_RED_MAX; /* ignored while nothing is partial */
	CHECK(ir_places_intern(t, &b) == ia);
	b.axes[1][3] = 2; /* past naxes: ignored */
	CHECK(ir_places_intern(t, &b) == ia);
	b.partial = 1;
	CHECK(ir_places_intern(t, &b) != ia);
	CHECK(ir_places_find(t, &b) == ir_places_intern(t, &b));
	Placement unk = {.ndims = 2}; /* not known: id 0, whatever else it says */
	CHECK(ir_places_intern(t, &unk) == 0);
	/* many: the table grows and keeps every id */
	uint32_t ids[64];
	for (int k = 0; k < 64; k++) {
		placement_replicated(&a, 2);
		a.partial = (uint32_t)k + 1;
		ids[k] = ir_places_intern(t, &a);
	}
	for (int k = 0; k < 64; k++) {
		placement_replicated(&a, 2);
		a.partial = (uint32_t)k + 1;
		CHECK(ir_places_find(t, &a) == ids[k] && ir_places_get(t, ids[k])->partial == a.partial);
	}
	arena_free(&ar);
}

int main(void)
{
	test_reference_layout();
	test_chunk();
	test_padded_global();
	test_shard_shapes();
	test_format();
	return check_report();
}
