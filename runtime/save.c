/* save.c - the training binary's checkpoints: which buffers go in, with
 * what metadata, and how a saved tensor comes back into a shard.
 *
 * The file format, the directory layout and the crash safety are
 * runtime/ckpt.h's; this file maps a Plan onto them.  A checkpoint holds
 * every named PARAM and OPT_STATE buffer (the state that survives a step;
 * activations and gradients are rebuilt by the next step) and metadata:
 * step, seed, the data position (samples consumed), the model name, the
 * plan version and the LR schedule's horizon.  Data and initial values are
 * pure functions of (seed, index), so step and seed are the whole RNG
 * state.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/ckpt.h"
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
		if (b->shape[d] != b->global_shape[d])
			return true;
	return false;
}

int rt_ckpt_save(const RtRun *r, const char *dir, const RtCkptMeta *m, char *err)
{
	const DtmPlan *p = r->plan;
	if (rt_world_size(p) != 1) {
		rt_errf(err, "multi-rank checkpoints are not built yet");
		return -1;
	}
	DtmTensorDesc *t = calloc((size_t)(p->nbuffers ? p->nbuffers : 1), sizeof *t);
	if (!t) {
		rt_errf(err, "out of memory");
		return -1;
	}
	int n = 0;
	for (int i = 0; i < p->nbuffers; i++) {
		const DtmBuffer *b = &p->buffers[i];
		if (!saved(b))
			continue;
		t[n].name = b->name;
		t[n].dtype = st_dtype(b->dtype);
		t[n].ndim = b->rank;
		for (int d = 0; d < b->rank; d++)
			t[n].shape[d] = b->shape[d];
		t[n].data = r->ptr[i];
		n++;
	}
	char step[32], seed[32], samples[32], ver[16], horizon[32];
	snprintf(step, sizeof step, "%" PRId64, m->step);
	snprintf(seed, sizeof seed, "%" PRIu64, m->seed);
	snprintf(samples, sizeof samples, "%" PRId64,
		 m->step * (p->train.batch > 0 ? p->train.batch : 1));
	snprintf(ver, sizeof ver, "%d", p->version);
	snprintf(horizon, sizeof horizon, "%" PRId64, m->lr_decay_steps);
	DtmMetaKV meta[] = {
		{ "format", DTM_CKPT_FORMAT },
		{ "step", step },
		{ "seed", seed },
		{ "data_samples", samples },
		{ "model", p->model ? p->model : "" },
		{ "plan_version", ver },
		{ "lr_decay_steps", horizon },
	};
	char e[RT_ERR_LEN];
	int rc = dtm_ckpt_save_single(dir, (uint64_t)m->step, m->seed, t, n, meta,
				      (int)(sizeof meta / sizeof meta[0]), e, sizeof e);
	free(t);
	if (rc) {
		rt_errf(err, "saving checkpoint: %s", e);
		return -1;
	}
	return 0;
}

/* One saved tensor into buffer i: memcpy when dtype and shape match,
 * otherwise through f32 and this rank's global indices. */
static int load_tensor(RtRun *r, int i, const DtmStTensor *t, char *err)
{
	const DtmPlan *p = r->plan;
	const DtmBuffer *b = &p->buffers[i];
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
		for (int64_t k = 0; k < n; k++)
			rt_store_f32(r->ptr[i], b->dtype, k, whole[gidx[k]]);
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
	/* One file now; a checkpoint from a mesh of several ranks would need
	 * its index to assemble tensors, which comes with multi-rank runs. */
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
		if (!saved(b))
			continue;
		const DtmStTensor *t = dtm_st_find(st, b->name);
		if (!t) {
			rt_errf(err, "--resume: %s has no tensor '%s'", path, b->name);
			dtm_st_close(st);
			return -1;
		}
		if (load_tensor(r, i, t, err)) {
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
	dtm_st_close(st);
	return 0;
}
