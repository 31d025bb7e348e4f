/* save.c - the training binary's checkpoints: which buffers go in, with
 * what metadata, and how a saved tensor comes back into a shard.
 *
 * The file format, the directory layout and the crash safety are
 * runtime/ckpt.h's; this file maps a Plan onto them.  A checkpoint holds
 * every named PARAM and OPT_STATE buffer (the state that survives a step;
 * activations and gradients are rebuilt by the next step) and metadata:
 * step, seed, the data position (samples consumed) and the data it is a
 * position in (RtCkptMeta.data), the model name, the plan version and the
 * LR schedule's horizon.  Data and initial values are pure functions of
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
 */
#include <inttypes.h>
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
	snprintf(step, sizeof step, "%" PRId64, m->step);
	snprintf(seed, sizeof seed, "%" PRIu64, m->seed);
	snprintf(samples, sizeof samples, "%" PRId64,
		 m->step * (p->train.batch > 0 ? p->train.batch : 1));
	snprintf(ver, sizeof ver, "%d", p->version);
	snprintf(horizon, sizeof horizon, "%" PRId64, m->lr_decay_steps);
	snprintf(rank, sizeof rank, "%lld", (long long)r->rank);
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
	};
	int nmeta = (int)(sizeof meta / sizeof meta[0]);
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
				    .ntensors = nt, .tensors = it };
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

/* One saved tensor into buffer i: memcpy when dtype and shape match,
 * otherwise through f32 and this rank's global indices. */
static int load_tensor(RtRun *r, int i, const DtmStTensor *t, bool own_file, char *err)
{
	const DtmPlan *p = r->plan;
	const DtmBuffer *b = &p->buffers[i];
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
			rt_errf(err, "checkpoint shard '%s' has a different shape", b->name);
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
		rt_errf(err, "checkpoint tensor '%s' has a different shape", b->name);
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

static int64_t meta_int(const DtmSafetensors *st, const char *key, int64_t dflt)
{
	const char *s = dtm_st_meta(st, key);
	if (!s || !*s)
		return dflt;
	char *end;
	long long v = strtoll(s, &end, 10);
	return *end ? dflt : (int64_t)v;
}

int rt_ckpt_load(RtRun *r, const char *dir, RtCkptMeta *m, char *err)
{
	const DtmPlan *p = r->plan;
	char e[RT_ERR_LEN], step_dir[4096], file[64], path[4200];
	uint64_t step = 0;
	int rc = dtm_ckpt_find_latest(dir, &step, step_dir, sizeof step_dir, e, sizeof e);
	dtm_ckpt_rank_file(file, sizeof file, 0);
	snprintf(path, sizeof path, "%s/%s", dir, file);
	if (rc == DTM_CKPT_NONE && access(path, R_OK) == 0) {
		/* DIR is a step directory itself (say step_000000, to restart
		 * from the initial weights): its metadata gives the step */
		snprintf(step_dir, sizeof step_dir, "%s", dir);
		rc = 0;
	}
	if (rc == DTM_CKPT_NONE) {
		rt_errf(err, "--resume %s: no checkpoint there", dir);
		return -1;
	}
	if (rc) {
		rt_errf(err, "--resume %s: %s", dir, e);
		return -1;
	}
	/* Which file: this rank's own when the checkpoint was saved on this
	 * mesh, else the only file of a one-rank checkpoint (whole tensors,
	 * sliced below); shards of another mesh would need assembling. */
	bool own = false;
	snprintf(path, sizeof path, "%s/index.json", step_dir);
	if (rt_world_size(p) > 1 && access(path, R_OK) == 0) {
		DtmCkptIndex ix;
		if (dtm_ckpt_index_read(path, &ix, e, sizeof e)) {
			rt_errf(err, "--resume: %s", e);
			return -1;
		}
		bool same = ix.naxes == p->mesh_naxes && ix.nfiles == rt_world_size(p);
		for (int a = 0; same && a < ix.naxes; a++)
			same = ix.sizes[a] == p->mesh_sizes[a];
		int nfiles = ix.nfiles;
		dtm_ckpt_index_free(&ix);
		if (same) {
			own = true;
			dtm_ckpt_rank_file(file, sizeof file, (int)r->rank);
		} else if (nfiles != 1) {
			char mesh[256];
			mesh_text(p, mesh, sizeof mesh);
			rt_errf(err, "--resume %s: the checkpoint was saved on %d ranks of another "
				"mesh; loading it on %s is not built yet", dir, nfiles, mesh);
			return -1;
		}
	}
	snprintf(path, sizeof path, "%s/%s", step_dir, file);
	DtmSafetensors *st = NULL;
	if (dtm_st_open(&st, path, e, sizeof e)) {
		rt_errf(err, "--resume: %s", e);
		return -1;
	}
	const char *model = dtm_st_meta(st, "model");
	if (model && p->model && strcmp(model, p->model) != 0) {
		rt_errf(err, "--resume: checkpoint is of model '%s', not '%s'", model,
			 p->model);
		dtm_st_close(st);
		return -1;
	}
	for (int i = 0; i < p->nbuffers; i++) {
		const DtmBuffer *b = &p->buffers[i];
		if (!saved(b) || b->stage != p->stage)
			continue;
		const DtmStTensor *t = dtm_st_find(st, b->name);
		if (!t) {
			rt_errf(err, "--resume: %s has no tensor '%s'", path, b->name);
			dtm_st_close(st);
			return -1;
		}
		if (load_tensor(r, i, t, own, err)) {
			dtm_st_close(st);
			return -1;
		}
	}
	m->step = meta_int(st, "step", (int64_t)step);
	const char *seed = dtm_st_meta(st, "seed");
	if (seed && *seed) {
		char *end;
		unsigned long long v = strtoull(seed, &end, 10);
		if (!*end)
			m->seed = v;
	}
	m->lr_decay_steps = meta_int(st, "lr_decay_steps", 0);
	const char *data = dtm_st_meta(st, "data");
	snprintf(m->data, sizeof m->data, "%s", data ? data : "");
	dtm_st_close(st);
	return 0;
}
