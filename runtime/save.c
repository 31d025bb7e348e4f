/* save.c - the training binary's checkpoints: which buffers go in, with
 * what metadata, and how a saved tensor comes back into a shard.
 *
 * The file format, the directory layout and the crash safety are
 * runtime/ckpt.h's; this file maps a Plan onto them.  A checkpoint holds
 * every named PARAM and OPT_STATE buffer (the state that survives a step;
 * activations and gradients are rebuilt by the next step) and metadata:
 * step, seed, the data position (samples consumed) and the data it is a
 * position in (RtCkptMeta.data), the model name, the plan version, the
 * LR schedule's horizon and, when the plan scales its loss, the loss
 * scaler's state (loss_scale, loss_scale_good, skipped_steps).  Data and initial values are pure functions of
 * (seed or token stream, index), so step and seed are the whole RNG and
 * data-loader state.
 *
 * Several ranks: rank 0 creates the step directory, every rank writes its
 * own rankNNNNN.safetensors holding its shards (local shapes; metadata
 * "mesh" and "rank" say whose), and after a barrier rank 0 writes
 * index.json (mesh, files, global shapes, placements) and moves `latest`.
 * A resume on the same mesh reads each rank's own file; a checkpoint of
 * one file (whole tensors, from a one-rank run) loads on any mesh, each
 * rank slicing its shards by global index.  Loading shards saved on a
 * different mesh is not built yet and says so.
 *
 * Before a byte is loaded, the checkpoint's index.json (validated by
 * dtm_ckpt_index_read) is held against the plan: for shards, the mesh's
 * axis names, order and sizes; for every tensor, dtype, global shape and
 * (for shards) placement; no tensor more or less.  Equal shard shapes are
 * not enough: a mesh with its axes in another order, or a placement moved
 * to another dim of the same size, gives every rank a file of the right
 * shapes holding other elements.  Then the file: every tensor listed in
 * the index with its dtype, of the shard's shape, with a checksum when
 * the index says so (dtm_st_open has already compared it with the bytes),
 * and metadata agreeing with the index.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/ckpt.h"
#include "runtime/comm.h"
#include "runtime/rt.h"

static bool saved(const DtmBuffer *b)
{
	return b->name && (b->role == DTM_ROLE_PARAM || b->role == DTM_ROLE_OPT_STATE);
}

static DtmStDtype st_dtype(DtmDtype t)
{
	switch (t) {
	case DTM_F32: return DTM_DT_F32;
	case DTM_BF16: return DTM_DT_BF16;
	case DTM_F16: return DTM_DT_F16;
	case DTM_I32: return DTM_DT_I32;
	}
	return DTM_DT_F32;
}

static bool sharded(const DtmBuffer *b)
{
	for (int d = 0; d < b->rank; d++)
		if (b->shape[d] != b->global_shape[d] || b->split_naxes[d])
			return true;
	return false;
}

/* This rank's real shard extents of b: an uneven (torch.chunk) shard's
 * rows past the global extent are padding (rt_global_indices), never
 * saved.  Returns whether any dim is padded. */
static bool real_shape(const RtRun *r, const DtmBuffer *b, int64_t *real)
{
	int64_t start[DTM_MAX_RANK];
	rt_shard_start(r->plan, b, r->coords, start);
	bool padded = false;
	for (int d = 0; d < b->rank; d++) {
		int64_t left = b->global_shape[d] - start[d];
		real[d] = left < 0 ? 0 : left < b->shape[d] ? left : b->shape[d];
		padded |= real[d] != b->shape[d];
	}
	return padded;
}

static int64_t shape_numel(const int64_t *shape, int rank)
{
	int64_t n = 1;
	for (int d = 0; d < rank; d++)
		n *= shape[d];
	return n;
}

/* Copies the block both row-major tensors share (from index 0 along every
 * dim, the smaller extent of each): a padded shard to its real rows or
 * back.  es: bytes an element. */
static void copy_block(void *dst, const int64_t *dshape, const void *src, const int64_t *sshape,
		       int rank, size_t es)
{
	int64_t ext[DTM_MAX_RANK] = { 0 }, idx[DTM_MAX_RANK] = { 0 }, rows = 1;
	if (rank == 0) {
		memcpy(dst, src, es);
		return;
	}
	for (int d = 0; d < rank; d++)
		ext[d] = dshape[d] < sshape[d] ? dshape[d] : sshape[d];
	for (int d = 0; d < rank - 1; d++)
		rows *= ext[d];
	if (ext[rank - 1] == 0)
		return;
	for (int64_t k = 0; k < rows; k++) {
		int64_t doff = 0, soff = 0;
		for (int d = 0; d < rank - 1; d++) {
			doff = doff * dshape[d] + idx[d];
			soff = soff * sshape[d] + idx[d];
		}
		memcpy((char *)dst + (size_t)(doff * dshape[rank - 1]) * es,
		       (const char *)src + (size_t)(soff * sshape[rank - 1]) * es,
		       (size_t)ext[rank - 1] * es);
		for (int d = rank - 2; d >= 0; d--) {
			if (++idx[d] < ext[d])
				break;
			idx[d] = 0;
		}
	}
}

/* "dp=2,tp=2" (or "" for no axes) */
static void mesh_text(const DtmPlan *p, char *out, size_t n)
{
	size_t k = 0;
	out[0] = 0;
	for (int a = 0; a < p->mesh_naxes && k < n; a++)
		k += (size_t)snprintf(out + k, n - k, "%s%s=%lld", a ? "," : "",
				      p->mesh_names[a] ? p->mesh_names[a] : "?",
				      (long long)p->mesh_sizes[a]);
}

static int barrier(const RtRun *r, char *err)
{
	if (r->comm && comm_barrier(r->comm, (1u << r->plan->mesh_naxes) - 1)) {
		rt_errf(err, "checkpoint barrier: %s", comm_error(r->comm));
		return -1;
	}
	return 0;
}

int rt_ckpt_save(const RtRun *r, const char *dir, const RtCkptMeta *m, char *err)
{
	const DtmPlan *p = r->plan;
	int64_t world = rt_world_size(p);
	if (world != 1 && !r->comm) {
		rt_errf(err, "a %lld-rank checkpoint needs the communication backend",
			(long long)world);
		return -1;
	}
	/* uneven shards are saved without their padding: their real rows are
	 * copied behind the descriptors, in the same allocation */
	size_t nd = (size_t)(p->nbuffers ? p->nbuffers : 1), extra = 0;
	int64_t real[DTM_MAX_RANK];
	for (int i = 0; i < p->nbuffers; i++) {
		const DtmBuffer *b = &p->buffers[i];
		if (saved(b) && b->stage == p->stage && real_shape(r, b, real))
			extra += ((size_t)shape_numel(real, b->rank) * rt_dtype_size(b->dtype) + 15) &
				 ~(size_t)15;
	}
	DtmTensorDesc *t = calloc(1, nd * sizeof *t + extra);
	if (!t) {
		rt_errf(err, "out of memory");
		return -1;
	}
	char *spare = (char *)(t + nd);
	int n = 0;
	for (int i = 0; i < p->nbuffers; i++) {
		const DtmBuffer *b = &p->buffers[i];
		if (!saved(b) || b->stage != p->stage)
			continue;
		t[n].name = b->name;
		t[n].dtype = st_dtype(b->dtype);
		t[n].ndim = b->rank;
		for (int d = 0; d < b->rank; d++)
			t[n].shape[d] = b->shape[d];
		t[n].data = r->ptr[i];
		if (real_shape(r, b, real)) {
			size_t es = rt_dtype_size(b->dtype);
			copy_block(spare, real, r->ptr[i], b->shape, b->rank, es);
			for (int d = 0; d < b->rank; d++)
				t[n].shape[d] = real[d];
			t[n].data = spare;
			spare += ((size_t)shape_numel(real, b->rank) * es + 15) & ~(size_t)15;
		}
		n++;
	}
	char step[32], seed[32], samples[32], ver[16], horizon[32], mesh[256], rank[32];
	char scale[48], good[32], skipped[32];
	snprintf(step, sizeof step, "%" PRId64, m->step);
	snprintf(seed, sizeof seed, "%" PRIu64, m->seed);
	snprintf(samples, sizeof samples, "%" PRId64,
		 m->step * (p->train.batch > 0 ? p->train.batch : 1));
	snprintf(ver, sizeof ver, "%d", p->version);
	snprintf(horizon, sizeof horizon, "%" PRId64, m->lr_decay_steps);
	snprintf(rank, sizeof rank, "%lld", (long long)r->rank);
	/* %a: the scale exactly, whatever it is */
	snprintf(scale, sizeof scale, "%a", (double)m->scaler.scale);
	snprintf(good, sizeof good, "%" PRId64, m->scaler.good);
	snprintf(skipped, sizeof skipped, "%" PRId64, m->scaler.skipped);
	mesh_text(p, mesh, sizeof mesh);
	DtmMetaKV meta[] = {
		{ "format", DTM_CKPT_FORMAT },
		{ "step", step },
		{ "seed", seed },
		{ "data_samples", samples },
		{ "model", p->model ? p->model : "" },
		{ "plan_version", ver },
		{ "lr_decay_steps", horizon },
		{ "data", m->data },
		{ "mesh", mesh },
		{ "rank", rank },
		/* the loss scaler's, only when the plan has one (last) */
		{ "loss_scale", scale },
		{ "loss_scale_good", good },
		{ "skipped_steps", skipped },
	};
	int nmeta = (int)(sizeof meta / sizeof meta[0]) - (m->scaler.on ? 0 : 3);
	char e[RT_ERR_LEN];
	if (world == 1) {
		int rc = dtm_ckpt_save_single(dir, (uint64_t)m->step, m->seed, t, n, meta, nmeta, e,
					      sizeof e);
		free(t);
		if (rc)
			return rt_errf(err, "saving checkpoint: %s", e);
		return 0;
	}
	char sd[4096], file[64], path[4200];
	int rc = 0;
	if (r->rank == 0)
		rc = dtm_ckpt_begin_step(dir, (uint64_t)m->step, sd, sizeof sd, e, sizeof e);
	else
		dtm_ckpt_step_dir(sd, sizeof sd, dir, (uint64_t)m->step);
	/* a rank that fails here stops; the others hear of it at the barrier */
	if (!rc && barrier(r, err)) {
		free(t);
		return -1;
	}
	if (!rc) {
		dtm_ckpt_rank_file(file, sizeof file, (int)r->rank);
		snprintf(path, sizeof path, "%s/%s", sd, file);
		rc = dtm_st_write(path, t, n, meta, nmeta, e, sizeof e);
	}
	free(t);
	if (rc)
		return rt_errf(err, "saving checkpoint: %s", e);
	if (barrier(r, err))
		return -1;
	if (r->rank == 0) {
		/* the index: mesh, every rank's file, global shapes */
		char (*files)[32] = calloc((size_t)world, sizeof *files);
		const char **fp = calloc((size_t)world, sizeof *fp);
		DtmIndexTensor *it = calloc((size_t)(p->nbuffers ? p->nbuffers : 1), sizeof *it);
		if (!files || !fp || !it) {
			free(files);
			free(fp);
			free(it);
			return rt_errf(err, "out of memory");
		}
		for (int64_t k = 0; k < world; k++) {
			dtm_ckpt_rank_file(files[k], sizeof files[k], (int)k);
			fp[k] = files[k];
		}
		/* every stage's tensors, each name once (a tied embedding is on
		 * two stages) */
		int nt = 0;
		for (int i = 0; i < p->nbuffers; i++) {
			const DtmBuffer *b = &p->buffers[i];
			bool dup = false;
			for (int k = 0; k < nt && !dup; k++)
				dup = strcmp(it[k].name, b->name ? b->name : "") == 0;
			if (!saved(b) || dup)
				continue;
			it[nt].name = b->name;
			it[nt].dtype = dtm_st_dtype_name(st_dtype(b->dtype));
			it[nt].ndim = b->rank;
			for (int d = 0; d < b->rank; d++)
				it[nt].shape[d] = b->global_shape[d];
			it[nt].placement = b->placement;
			nt++;
		}
		DtmCkptIndex ix = { .step = (uint64_t)m->step, .seed = m->seed,
				    .naxes = p->mesh_naxes, .nfiles = (int)world, .files = fp,
				    .checksum = DTM_CKPT_CHECKSUM, .ntensors = nt, .tensors = it };
		for (int a = 0; a < p->mesh_naxes; a++) {
			ix.axes[a] = p->mesh_names[a] ? p->mesh_names[a] : "?";
			ix.sizes[a] = p->mesh_sizes[a];
		}
		rc = dtm_ckpt_commit_step(dir, &ix, e, sizeof e);
		free(files);
		free(fp);
		free(it);
		if (rc)
			return rt_errf(err, "saving checkpoint: %s", e);
	}
	/* no rank goes on (and perhaps saves again) before the index is in */
	return barrier(r, err);
}

/* "[32, 64]" */
static void shape_text(const int64_t *shape, int ndim, char *out, size_t n)
{
	size_t k = (size_t)snprintf(out, n, "[");
	for (int d = 0; d < ndim && k < n; d++)
		k += (size_t)snprintf(out + k, n - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
	if (k < n)
		snprintf(out + k, n - k, "]");
}

/* "(dp=2, tp=2)", "(one device)" for no axes */
static void mesh_desc(int naxes, const char *const *names, const int64_t *sizes, char *out,
		      size_t n)
{
	size_t k = (size_t)snprintf(out, n, "(");
	for (int a = 0; a < naxes && k < n; a++)
		k += (size_t)snprintf(out + k, n - k, "%s%s=%lld", a ? ", " : "",
				      names[a] ? names[a] : "?", (long long)sizes[a]);
	if (k < n)
		snprintf(out + k, n - k, "%s)", naxes ? "" : "one device");
}

/* One saved tensor into buffer i: memcpy when dtype and shape match,
 * otherwise through f32 and this rank's global indices.  (check_layout
 * has made the dtypes equal; the conversions serve the slicing of whole
 * tensors, exact for every float dtype.) */
static int load_tensor(RtRun *r, int i, const DtmStTensor *t, bool own_file, const char *path,
		       char *err)
{
	const DtmPlan *p = r->plan;
	const DtmBuffer *b = &p->buffers[i];
	char have[160], want[160];
	if (own_file && sharded(b)) {
		/* this rank's shard as it saved it (an uneven one without its
		 * padding, which stays zero) */
		int64_t real[DTM_MAX_RANK];
		bool padded = real_shape(r, b, real);
		size_t es = rt_dtype_size(b->dtype);
		bool ok = t->ndim == b->rank && (int64_t)t->numel == shape_numel(real, b->rank);
		for (int d = 0; ok && d < b->rank; d++)
			ok = t->shape[d] == real[d];
		if (!ok) {
			shape_text(t->shape, t->ndim, have, sizeof have);
			shape_text(real, b->rank, want, sizeof want);
			rt_errf(err, "--resume: %s: tensor '%s' has shape %s, this rank's shard is %s",
				path, b->name, have, want);
			return -1;
		}
		if (padded)
			memset(r->ptr[i], 0, (size_t)rt_numel(b) * es);
		if (t->dtype == st_dtype(b->dtype)) {
			if (padded)
				copy_block(r->ptr[i], b->shape, t->data, real, b->rank, es);
			else
				memcpy(r->ptr[i], t->data, t->nbytes);
			return 0;
		}
		if (b->dtype == DTM_I32 || t->dtype == DTM_DT_I32) {
			rt_errf(err, "checkpoint tensor '%s': cannot convert %s to %s", b->name,
				dtm_st_dtype_name(t->dtype), rt_dtype_name(b->dtype));
			return -1;
		}
		float *v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
		if (!v || dtm_st_read_f32(t, v)) {
			free(v);
			rt_errf(err, "checkpoint tensor '%s': unreadable", b->name);
			return -1;
		}
		if (padded) {
			/* converted in place over the f32 copy, then placed */
			for (int64_t k = 0; k < (int64_t)t->numel; k++)
				rt_store_f32(v, b->dtype, k, v[k]);
			copy_block(r->ptr[i], b->shape, v, real, b->rank, es);
		} else {
			for (int64_t k = 0; k < (int64_t)t->numel; k++)
				rt_store_f32(r->ptr[i], b->dtype, k, v[k]);
		}
		free(v);
		return 0;
	}
	bool same_shape = t->ndim == b->rank;
	for (int d = 0; same_shape && d < b->rank; d++)
		same_shape = t->shape[d] == b->global_shape[d];
	if (!same_shape) {
		shape_text(t->shape, t->ndim, have, sizeof have);
		shape_text(b->global_shape, b->rank, want, sizeof want);
		rt_errf(err, "--resume: %s: tensor '%s' has shape %s, this binary's is %s", path,
			b->name, have, want);
		return -1;
	}
	if (!sharded(b) && t->dtype == st_dtype(b->dtype)) {
		memcpy(r->ptr[i], t->data, t->nbytes);
		return 0;
	}
	if (b->dtype == DTM_I32 || t->dtype == DTM_DT_I32) {
		rt_errf(err, "checkpoint tensor '%s': cannot convert %s to %s", b->name,
			 dtm_st_dtype_name(t->dtype), rt_dtype_name(b->dtype));
		return -1;
	}
	int64_t n = rt_numel(b);
	float *whole = malloc((size_t)t->numel * sizeof(float));
	int64_t *gidx = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
	if (!whole || !gidx) {
		free(whole);
		free(gidx);
		rt_errf(err, "out of memory loading '%s'", b->name);
		return -1;
	}
	int rc = 0;
	if (dtm_st_read_f32(t, whole)) {
		rt_errf(err, "checkpoint tensor '%s': unreadable dtype %s", b->name,
			 dtm_st_dtype_name(t->dtype));
		rc = -1;
	} else {
		rt_global_indices(p, b, r->coords, gidx);
		for (int64_t k = 0; k < n; k++) /* gidx < 0: padding */
			rt_store_f32(r->ptr[i], b->dtype, k, gidx[k] < 0 ? 0 : whole[gidx[k]]);
	}
	free(whole);
	free(gidx);
	return rc;
}

/* ---- the checkpoint against the plan ---- */

static int cmp_index_tensor(const void *a, const void *b)
{
	return strcmp((*(const DtmIndexTensor *const *)a)->name,
		      (*(const DtmIndexTensor *const *)b)->name);
}

static int cmp_buffer_name(const void *a, const void *b)
{
	return strcmp((*(const DtmBuffer *const *)a)->name, (*(const DtmBuffer *const *)b)->name);
}

/* An index's tensors and a plan's saved buffers (every stage's), each
 * sorted by name for bsearch. */
typedef struct Names {
	const DtmIndexTensor **ix;
	int nix;
	const DtmBuffer **buf;
	int nbuf;
} Names;

static void names_free(Names *n)
{
	free(n->ix);
	free(n->buf);
}

static int names_init(Names *n, const DtmPlan *p, const DtmCkptIndex *ix)
{
	n->nix = ix->ntensors;
	n->nbuf = 0;
	n->ix = calloc((size_t)ix->ntensors + 1, sizeof *n->ix);
	n->buf = calloc((size_t)p->nbuffers + 1, sizeof *n->buf);
	if (!n->ix || !n->buf) {
		names_free(n);
		return -1;
	}
	for (int i = 0; i < ix->ntensors; i++)
		n->ix[i] = &ix->tensors[i];
	for (int i = 0; i < p->nbuffers; i++)
		if (saved(&p->buffers[i]))
			n->buf[n->nbuf++] = &p->buffers[i];
	qsort(n->ix, (size_t)n->nix, sizeof *n->ix, cmp_index_tensor);
	qsort(n->buf, (size_t)n->nbuf, sizeof *n->buf, cmp_buffer_name);
	return 0;
}

static const DtmIndexTensor *find_index(const Names *n, const char *name)
{
	DtmIndexTensor key = { .name = name };
	const DtmIndexTensor *kp = &key, **hit;
	hit = bsearch(&kp, n->ix, (size_t)n->nix, sizeof *n->ix, cmp_index_tensor);
	return hit ? *hit : NULL;
}

static const DtmBuffer *find_buffer(const Names *n, const char *name)
{
	DtmBuffer key = { .name = name };
	const DtmBuffer *kp = &key, **hit;
	hit = bsearch(&kp, n->buf, (size_t)n->nbuf, sizeof *n->buf, cmp_buffer_name);
	return hit ? *hit : NULL;
}

/* The checkpoint's layout against the plan's, before anything is read:
 * for shards (!whole) the mesh's axis names, order and sizes, and for
 * every tensor its dtype, global shape and (shards) placement; the same
 * tensor names on both sides.  The first difference is the message. */
static int check_layout(const DtmPlan *p, const DtmCkptIndex *ix, const Names *n, const char *dir,
			bool whole, char *err)
{
	char a[256], b[256];
	if (!whole) {
		bool same = ix->naxes == p->mesh_naxes;
		for (int k = 0; same && k < ix->naxes; k++)
			same = strcmp(ix->axes[k], p->mesh_names[k] ? p->mesh_names[k] : "?") == 0 &&
			       ix->sizes[k] == p->mesh_sizes[k];
		if (!same) {
			mesh_desc(ix->naxes, ix->axes, ix->sizes, a, sizeof a);
			mesh_desc(p->mesh_naxes, p->mesh_names, p->mesh_sizes, b, sizeof b);
			return rt_errf(err, "checkpoint %s was written for mesh %s, this binary has "
				       "%s; resharding on load is not supported yet", dir, a, b);
		}
	}
	for (int i = 0; i < n->nbuf; i++) {
		const DtmBuffer *buf = n->buf[i];
		const DtmIndexTensor *t = find_index(n, buf->name);
		const char *dt = dtm_st_dtype_name(st_dtype(buf->dtype));
		if (!t)
			return rt_errf(err, "checkpoint %s has no tensor '%s' (this binary's model "
				       "has it)", dir, buf->name);
		if (strcmp(t->dtype, dt) != 0)
			return rt_errf(err, "checkpoint %s: tensor '%s' is %s there, %s in this "
				       "binary", dir, buf->name, t->dtype, dt);
		bool same = t->ndim == buf->rank;
		for (int d = 0; same && d < t->ndim; d++)
			same = t->shape[d] == buf->global_shape[d];
		if (!same) {
			shape_text(t->shape, t->ndim, a, sizeof a);
			shape_text(buf->global_shape, buf->rank, b, sizeof b);
			return rt_errf(err, "checkpoint %s: tensor '%s' has global shape %s there, "
				       "%s in this binary", dir, buf->name, a, b);
		}
		const char *pa = t->placement ? t->placement : "(none)";
		const char *pb = buf->placement ? buf->placement : "(none)";
		if (!whole && strcmp(pa, pb) != 0)
			return rt_errf(err, "checkpoint %s: tensor '%s' was written with placement "
				       "%s, this binary has %s; resharding on load is not supported "
				       "yet", dir, buf->name, pa, pb);
	}
	for (int i = 0; i < n->nix; i++)
		if (!find_buffer(n, n->ix[i]->name))
			return rt_errf(err, "checkpoint %s has tensor '%s', which this binary's "
				       "model does not", dir, n->ix[i]->name);
	return 0;
}

/* A metadata value that must be a non-negative decimal integer; dflt when
 * absent.  -1 when malformed. */
static int meta_uint(const DtmSafetensors *st, const char *key, uint64_t dflt, uint64_t *out)
{
	const char *s = dtm_st_meta(st, key);
	*out = dflt;
	if (!s)
		return 0;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end || errno)
		return -1;
	*out = v;
	return 0;
}

/* The file against the index: every tensor listed with its dtype, of the
 * shard's shape (at most the global one; the loader checks the exact
 * shape of what it loads), checksummed when the index says so, and the
 * metadata's step, seed and rank those of the index and this file. */
static int check_file(const DtmSafetensors *st, const DtmCkptIndex *ix, const Names *n,
		      const char *path, bool whole, int64_t rank, char *err)
{
	char a[256], b[256];
	for (int i = 0; i < dtm_st_count(st); i++) {
		const DtmStTensor *t = dtm_st_at(st, i);
		const DtmIndexTensor *it = find_index(n, t->name);
		if (!it)
			return rt_errf(err, "--resume: %s holds tensor '%s', which index.json does "
				       "not list", path, t->name);
		if (strcmp(dtm_st_dtype_name(t->dtype), it->dtype) != 0)
			return rt_errf(err, "--resume: %s: tensor '%s' is %s, index.json says %s",
				       path, t->name, dtm_st_dtype_name(t->dtype), it->dtype);
		bool ok = t->ndim == it->ndim;
		for (int d = 0; ok && d < t->ndim; d++)
			ok = whole ? t->shape[d] == it->shape[d] : t->shape[d] <= it->shape[d];
		if (!ok) {
			shape_text(t->shape, t->ndim, a, sizeof a);
			shape_text(it->shape, it->ndim, b, sizeof b);
			return rt_errf(err, "--resume: %s: tensor '%s' has shape %s, not %s of "
				       "index.json's global shape %s", path, t->name, a,
				       whole ? "that" : "a shard", b);
		}
		if (ix->checksum && !t->has_crc32c)
			return rt_errf(err, "--resume: %s: tensor '%s' has no checksum, but "
				       "index.json says every tensor has one", path, t->name);
	}
	const char *fmt = dtm_st_meta(st, "format");
	uint64_t step, seed, frank;
	if (fmt && strcmp(fmt, DTM_CKPT_FORMAT) != 0)
		return rt_errf(err, "--resume: %s: format '%s', expected '%s'", path, fmt,
			       DTM_CKPT_FORMAT);
	if (meta_uint(st, "step", ix->step, &step) || step != ix->step)
		return rt_errf(err, "--resume: %s: metadata step '%s' is not index.json's %llu",
			       path, dtm_st_meta(st, "step"), (unsigned long long)ix->step);
	if (meta_uint(st, "seed", ix->seed, &seed) || seed != ix->seed)
		return rt_errf(err, "--resume: %s: metadata seed '%s' is not index.json's %llu",
			       path, dtm_st_meta(st, "seed"), (unsigned long long)ix->seed);
	if (meta_uint(st, "rank", whole ? 0 : (uint64_t)rank, &frank) ||
	    frank != (whole ? 0 : (uint64_t)rank))
		return rt_errf(err, "--resume: %s: metadata rank '%s' is not the file's",
			       path, dtm_st_meta(st, "rank"));
	if (meta_uint(st, "lr_decay_steps", 0, &step))
		return rt_errf(err, "--resume: %s: bad metadata lr_decay_steps '%s'", path,
			       dtm_st_meta(st, "lr_decay_steps"));
	return 0;
}

/* The loss scaler's state from the file's metadata into s, when both
 * the plan (s->on) and the file have it; a file without it (saved with
 * no loss scaling) leaves s as it was, the run's initial state. */
static int load_scaler(const DtmSafetensors *st, const char *path, RtScaler *s, char *err)
{
	const char *scale = dtm_st_meta(st, "loss_scale");
	if (!s->on || !scale)
		return 0;
	char *end;
	errno = 0;
	double v = strtod(scale, &end);
	uint64_t good, skipped;
	if (errno || *end || !(v > 0) || !isfinite(v) || meta_uint(st, "loss_scale_good", 0, &good) ||
	    meta_uint(st, "skipped_steps", 0, &skipped))
		return rt_errf(err, "--resume: %s: bad loss scaler metadata (loss_scale '%s', "
			       "loss_scale_good '%s', skipped_steps '%s')", path, scale,
			       dtm_st_meta(st, "loss_scale_good"), dtm_st_meta(st, "skipped_steps"));
	s->scale = (float)v;
	s->good = (int64_t)good;
	s->skipped = (int64_t)skipped;
	return 0;
}

/* Finds DIR's checkpoint, checks its index against the plan, and opens
 * and checks the file this rank loads: one of whole tensors (a one-rank
 * checkpoint, sliced later) on any mesh, else this rank's own on the same
 * mesh.  What it opened stays in *ix, *n and *st for the caller to free,
 * even on failure (zeroed where nothing was opened). */
static int open_checked(const RtRun *r, const char *dir, DtmCkptIndex *ix, Names *n,
			DtmSafetensors **st, char *path, size_t npath, bool *whole, char *err)
{
	const DtmPlan *p = r->plan;
	char e[RT_ERR_LEN], step_dir[4096];
	uint64_t step = 0;
	memset(ix, 0, sizeof *ix);
	memset(n, 0, sizeof *n);
	*st = NULL;
	int rc = dtm_ckpt_find_latest(dir, &step, step_dir, sizeof step_dir, e, sizeof e);
	bool by_latest = rc == 0;
	if (rc == DTM_CKPT_NONE) {
		/* DIR may be a step directory itself (say step_000000, to
		 * restart from the initial weights) */
		snprintf(step_dir, sizeof step_dir, "%s", dir);
		snprintf(path, npath, "%s/index.json", dir);
		if (access(path, F_OK) == 0)
			rc = 0;
		else if (snprintf(path, npath, "%s/rank00000.safetensors", dir),
			 access(path, F_OK) == 0)
			return rt_errf(err, "--resume %s: rank files but no index.json (a save "
				       "that did not finish?)", dir);
		else
			return rt_errf(err, "--resume %s: no checkpoint there", dir);
	}
	if (rc)
		return rt_errf(err, "--resume %s: %s", dir, e);
	snprintf(path, npath, "%s/index.json", step_dir);
	if (dtm_ckpt_index_read(path, ix, e, sizeof e))
		return rt_errf(err, "--resume: %s", e);
	if (by_latest && ix->step != step)
		return rt_errf(err, "--resume: %s says step %llu, but %s/latest names step %llu",
			       path, (unsigned long long)ix->step, dir, (unsigned long long)step);
	if (names_init(n, p, ix))
		return rt_errf(err, "--resume: out of memory");
	*whole = ix->nfiles == 1;
	if (check_layout(p, ix, n, dir, *whole, err))
		return -1;
	snprintf(path, npath, "%s/%s", step_dir, ix->files[*whole ? 0 : r->rank]);
	if (dtm_st_open(st, path, e, sizeof e))
		return rt_errf(err, "--resume: %s", e);
	const char *model = dtm_st_meta(*st, "model");
	if (model && p->model && strcmp(model, p->model) != 0)
		return rt_errf(err, "--resume: checkpoint is of model '%s', not '%s'", model,
			       p->model);
	return check_file(*st, ix, n, path, *whole, r->rank, err);
}

int rt_ckpt_load(RtRun *r, const char *dir, RtCkptMeta *m, char *err)
{
	const DtmPlan *p = r->plan;
	char path[4200], e[RT_ERR_LEN];
	DtmCkptIndex ix;
	Names n;
	DtmSafetensors *st;
	bool whole = false;
	int rc = open_checked(r, dir, &ix, &n, &st, path, sizeof path, &whole, err);
	/* Every rank checks the same index against the same plan, so most
	 * failures are every rank's: rank 0 says why, and the others, told of
	 * its failure at this barrier, stay quiet (Comm.peer_failed).  A rank
	 * that fails alone meets rank 0 at the barrier and says why itself. */
	if (r->comm && !(rc && r->rank == 0)) {
		int brc = barrier(r, e);
		if (brc && !rc)
			rc = rt_errf(err, "%s", e);
	}
	for (int i = 0; i < p->nbuffers && !rc; i++) {
		const DtmBuffer *b = &p->buffers[i];
		if (!saved(b) || b->stage != p->stage)
			continue;
		const DtmStTensor *t = dtm_st_find(st, b->name);
		if (!t)
			rc = rt_errf(err, "--resume: %s has no tensor '%s'", path, b->name);
		else
			rc = load_tensor(r, i, t, !whole, path, err);
	}
	if (!rc) {
		uint64_t horizon = 0;
		meta_uint(st, "lr_decay_steps", 0, &horizon);
		m->step = (int64_t)ix.step;
		m->seed = ix.seed;
		m->lr_decay_steps = (int64_t)horizon;
		const char *data = dtm_st_meta(st, "data");
		snprintf(m->data, sizeof m->data, "%s", data ? data : "");
		rc = load_scaler(st, path, &m->scaler, err);
	}
	dtm_st_close(st);
	names_free(&n);
	dtm_ckpt_index_free(&ix);
	return rc ? -1 : 0;
}
