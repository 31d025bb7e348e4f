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
 * A resume on the same layout reads each rank's own file (bit for bit;
 * a tensor another schedule put on another stage, from that stage's file);
 * a checkpoint of one file (whole tensors, from a one-rank run) loads on
 * any mesh, each rank slicing its shards by global index; any other
 * layout reshards on load (load_resharded): each rank fills the box its
 * shard holds from the overlapping boxes of the saved shards, which
 * index.json's global shapes and placements give (runtime/ckpt.h's shard
 * geometry), reading only those rows.
 *
 * Before a byte is loaded, the checkpoint's index.json (validated by
 * dtm_ckpt_index_read) is held against the plan: the same model (every
 * saved buffer's tensor there, of its global shape, float for float; no
 * param more), all differences in one message; whether the layout is the
 * same (mesh axis names, order and sizes; each tensor's dtype and
 * placement).  Equal shard shapes are not enough: a mesh with its axes in
 * another order, or a placement moved to another dim of the same size,
 * gives every rank a file of the right shapes holding other elements, so
 * those reshard.  Then the file: every tensor listed in the index with
 * its dtype, of the shard's shape, with a checksum when the index says so
 * (dtm_st_open has compared it with the bytes; a resharding reader checks
 * each tensor it reads), and metadata agreeing with the index.
 *
 * Failures of a load are of two kinds: damage (DAMAGED: a file that does
 * not open, is short, has a bad header or checksum, or contradicts the
 * index) and everything else (another model, out of memory, a peer's
 * failure).  rt_ckpt_load_fallback (--resume-fallback) answers damage by
 * loading the newest older complete step directory.  Damage may be seen by
 * one rank only (its own file; in a resharded load the one source shard
 * only it overlaps, found after the others have finished), so after each
 * try every rank, loaded or not, joins one all-reduce of its outcome
 * (agree) and all go on, fall back or stop together.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
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

/* What a failed load returns when a file of the checkpoint is damaged
 * (unreadable, torn, a checksum mismatch, contents contradicting
 * index.json) rather than the checkpoint being of another model or the
 * run failing: --resume-fallback then tries an older checkpoint.  Any
 * other failure returns -1. */
#define DAMAGED (-2)

static int damagef(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int damagef(char *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, RT_ERR_LEN, fmt, ap);
	va_end(ap);
	return DAMAGED;
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
			return damagef(err, "--resume: %s: tensor '%s' has shape %s, this rank's "
				       "shard is %s", path, b->name, have, want);
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
		return damagef(err, "--resume: %s: tensor '%s' has shape %s, this binary's is %s",
			       path, b->name, have, want);
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


/* The checkpoint tensor a saved buffer loads from: its own name, but
 * across precision policies a param reads its f32 master copy where the
 * checkpoint has one (exact), and a master copy its param where the
 * checkpoint has none. */
static const DtmIndexTensor *source_of(const Names *n, const DtmBuffer *b)
{
	char key[512];
	const DtmIndexTensor *t = find_index(n, b->name);
	if (t && !strcmp(t->dtype, dtm_st_dtype_name(st_dtype(b->dtype))))
		return t;
	if (strncmp(b->name, "opt.master.", 11) == 0)
		return t ? t : find_index(n, b->name + 11);
	if (b->role == DTM_ROLE_PARAM &&
	    snprintf(key, sizeof key, "opt.master.%s", b->name) < (int)sizeof key) {
		const DtmIndexTensor *m = find_index(n, key);
		if (m)
			return m;
	}
	return t;
}

static bool float_st(const char *dt)
{
	return !strcmp(dt, "F32") || !strcmp(dt, "BF16") || !strcmp(dt, "F16") || !strcmp(dt, "F64");
}

/* Appends one difference to the message (the first 6; the count says
 * how many). */
static void add_diff(char *msg, size_t cap, int *ndiff, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void add_diff(char *msg, size_t cap, int *ndiff, const char *fmt, ...)
{
	if ((*ndiff)++ >= 6)
		return;
	size_t k = strlen(msg);
	if (k + 4 >= cap)
		return;
	k += (size_t)snprintf(msg + k, cap - k, "\n  ");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg + k, cap - k, fmt, ap);
	va_end(ap);
}

/* The checkpoint against the plan, before anything is read.  Another model
 * (a tensor one side lacks, another global shape, an integer tensor where
 * a float one is) is refused with every difference listed; another layout
 * (mesh, placements, pipeline stages, ZeRO, precision) is not an error:
 * *same says whether each rank can read its own file as it is. */
static int check_layout(const DtmPlan *p, const DtmCkptIndex *ix, const Names *n, const char *dir,
			bool whole, bool *same, char *err)
{
	char a[256], b[256], msg[RT_ERR_LEN - 256] = "";
	int ndiff = 0;
	*same = !whole && ix->naxes == p->mesh_naxes;
	for (int k = 0; *same && k < ix->naxes; k++)
		*same = strcmp(ix->axes[k], p->mesh_names[k] ? p->mesh_names[k] : "?") == 0 &&
			ix->sizes[k] == p->mesh_sizes[k];
	bool *used = calloc((size_t)n->nix + 1, sizeof *used);
	if (!used)
		return rt_errf(err, "out of memory");
	for (int i = 0; i < n->nbuf; i++) {
		const DtmBuffer *buf = n->buf[i];
		const DtmIndexTensor *t = source_of(n, buf);
		const char *dt = dtm_st_dtype_name(st_dtype(buf->dtype));
		if (!t) {
			shape_text(buf->global_shape, buf->rank, b, sizeof b);
			add_diff(msg, sizeof msg, &ndiff, "'%s' %s: not in the checkpoint", buf->name, b);
			continue;
		}
		/* the tensor read, and the buffer's namesake (a bf16 param when the
		 * f32 master copy is read instead) */
		const DtmIndexTensor *own = find_index(n, buf->name);
		used[(const DtmIndexTensor **)bsearch(&t, n->ix, (size_t)n->nix, sizeof *n->ix,
						      cmp_index_tensor) - n->ix] = true;
		if (own)
			used[(const DtmIndexTensor **)bsearch(&own, n->ix, (size_t)n->nix,
							      sizeof *n->ix, cmp_index_tensor) -
			     n->ix] = true;
		if (strcmp(t->name, buf->name) != 0)
			*same = false;
		if (strcmp(t->dtype, dt) != 0) {
			*same = false;
			if ((!float_st(t->dtype) || !float_st(dt)) && strncmp(buf->name, "opt.", 4))
				add_diff(msg, sizeof msg, &ndiff, "'%s' is %s there, %s here", buf->name,
					 t->dtype, dt);
		}
		bool shape = t->ndim == buf->rank;
		for (int d = 0; shape && d < t->ndim; d++)
			shape = t->shape[d] == buf->global_shape[d];
		/* (an optimizer state's shape is its param's: said once) */
		if (!shape && strncmp(buf->name, "opt.", 4) != 0) {
			shape_text(t->shape, t->ndim, a, sizeof a);
			shape_text(buf->global_shape, buf->rank, b, sizeof b);
			add_diff(msg, sizeof msg, &ndiff, "'%s' has global shape %s there, %s here",
				 buf->name, a, b);
		}
		const char *pa = t->placement ? t->placement : "(none)";
		const char *pb = buf->placement ? buf->placement : "(none)";
		if (strcmp(pa, pb) != 0)
			*same = false;
	}
	/* what the checkpoint has beyond the plan: master copies and optimizer
	 * state of another policy or optimizer are layout; params are model */
	for (int i = 0; i < n->nix; i++)
		if (!used[i] && strncmp(n->ix[i]->name, "opt.", 4) != 0) {
			shape_text(n->ix[i]->shape, n->ix[i]->ndim, a, sizeof a);
			add_diff(msg, sizeof msg, &ndiff, "'%s' %s: in the checkpoint, not in this "
				 "binary's model", n->ix[i]->name, a);
		}
	free(used);
	if (ndiff)
		return rt_errf(err, "checkpoint %s is of another model (%d difference%s):%s%s", dir,
			       ndiff, ndiff == 1 ? "" : "s", msg, ndiff > 6 ? "\n  ..." : "");
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
			return damagef(err, "--resume: %s holds tensor '%s', which index.json does "
				       "not list", path, t->name);
		if (strcmp(dtm_st_dtype_name(t->dtype), it->dtype) != 0)
			return damagef(err, "--resume: %s: tensor '%s' is %s, index.json says %s",
				       path, t->name, dtm_st_dtype_name(t->dtype), it->dtype);
		bool ok = t->ndim == it->ndim;
		for (int d = 0; ok && d < t->ndim; d++)
			ok = whole ? t->shape[d] == it->shape[d] : t->shape[d] <= it->shape[d];
		if (!ok) {
			shape_text(t->shape, t->ndim, a, sizeof a);
			shape_text(it->shape, it->ndim, b, sizeof b);
			return damagef(err, "--resume: %s: tensor '%s' has shape %s, not %s of "
				       "index.json's global shape %s", path, t->name, a,
				       whole ? "that" : "a shard", b);
		}
		if (ix->checksum && !t->has_crc32c)
			return damagef(err, "--resume: %s: tensor '%s' has no checksum, but "
				       "index.json says every tensor has one", path, t->name);
	}
	const char *fmt = dtm_st_meta(st, "format");
	uint64_t step, seed, frank;
	if (fmt && strcmp(fmt, DTM_CKPT_FORMAT) != 0)
		return damagef(err, "--resume: %s: format '%s', expected '%s'", path, fmt,
			       DTM_CKPT_FORMAT);
	if (meta_uint(st, "step", ix->step, &step) || step != ix->step)
		return damagef(err, "--resume: %s: metadata step '%s' is not index.json's %llu",
			       path, dtm_st_meta(st, "step"), (unsigned long long)ix->step);
	if (meta_uint(st, "seed", ix->seed, &seed) || seed != ix->seed)
		return damagef(err, "--resume: %s: metadata seed '%s' is not index.json's %llu",
			       path, dtm_st_meta(st, "seed"), (unsigned long long)ix->seed);
	if (meta_uint(st, "rank", (uint64_t)rank, &frank) || frank != (uint64_t)rank)
		return damagef(err, "--resume: %s: metadata rank '%s' is not the file's",
			       path, dtm_st_meta(st, "rank"));
	if (meta_uint(st, "lr_decay_steps", 0, &step))
		return damagef(err, "--resume: %s: bad metadata lr_decay_steps '%s'", path,
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
		return damagef(err, "--resume: %s: bad loss scaler metadata (loss_scale '%s', "
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
 * even on failure (zeroed where nothing was opened).  *latest: the step
 * DIR/latest names, when it names one whose index.json exists. */
static int open_checked(const RtRun *r, const char *dir, DtmCkptIndex *ix, Names *n,
			DtmSafetensors **st, char *path, size_t npath, char *sdir, size_t nsdir,
			bool *whole, bool *reshard, uint64_t *latest, char *err)
{
	const DtmPlan *p = r->plan;
	char e[RT_ERR_LEN], step_dir[4096];
	uint64_t step = 0;
	memset(ix, 0, sizeof *ix);
	memset(n, 0, sizeof *n);
	*st = NULL;
	int rc = dtm_ckpt_find_latest(dir, &step, step_dir, sizeof step_dir, e, sizeof e);
	bool by_latest = rc == 0;
	if (by_latest)
		*latest = step;
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
		return damagef(err, "--resume %s: %s", dir, e);
	snprintf(path, npath, "%s/index.json", step_dir);
	if (dtm_ckpt_index_read(path, ix, e, sizeof e))
		return damagef(err, "--resume: %s", e);
	if (by_latest && ix->step != step)
		return damagef(err, "--resume: %s says step %llu, but %s/latest names step %llu",
			       path, (unsigned long long)ix->step, dir, (unsigned long long)step);
	if (names_init(n, p, ix))
		return rt_errf(err, "--resume: out of memory");
	*whole = ix->nfiles == 1;
	bool same;
	if (check_layout(p, ix, n, dir, *whole, &same, err))
		return -1;
	*reshard = !*whole && !same;
	/* resharding reads the files its shards overlap (load_resharded);
	 * rank 0's file gives the metadata */
	int64_t file = *whole || *reshard ? 0 : r->rank;
	snprintf(path, npath, "%s/%s", step_dir, ix->files[file]);
	snprintf(sdir, nsdir, "%s", step_dir);
	if (dtm_st_open_lazy(st, path, *reshard, e, sizeof e))
		return damagef(err, "--resume: %s", e);
	const char *model = dtm_st_meta(*st, "model");
	if (model && p->model && strcmp(model, p->model) != 0)
		return rt_errf(err, "--resume: checkpoint is of model '%s', not '%s'", model,
			       p->model);
	return check_file(*st, ix, n, path, *whole, file, err);
}

/* The rank files of a resharded load, opened as a shard first needs them
 * (lazily: each tensor's checksum is checked when it is read). */
typedef struct Sources {
	const DtmCkptIndex *ix;
	const char *dir; /* the step directory */
	DtmSafetensors **st;
	int pp; /* the checkpoint mesh's pp axis, or -1 */
} Sources;

static int source_file(Sources *s, int64_t k, const DtmSafetensors **out, char *err)
{
	if (!s->st[k]) {
		char path[4200], e[RT_ERR_LEN];
		snprintf(path, sizeof path, "%s/%s", s->dir, s->ix->files[k]);
		if (dtm_st_open_lazy(&s->st[k], path, true, e, sizeof e))
			return damagef(err, "--resume: %s", e);
	}
	*out = s->st[k];
	return 0;
}

/* Buffer i from a checkpoint of another layout: the box this rank's shard
 * holds (rt_shard_start, its real rows) filled from the overlapping boxes
 * of the checkpoint's shards, each read from the first file holding a
 * copy (on the pipeline stage that has the tensor), converted to the
 * buffer's dtype.  Only those bytes are read (and their source tensor's
 * checksum checked); every element of the box must come from somewhere. */
static int load_resharded(RtRun *r, int i, const DtmIndexTensor *it, Sources *s, char *err)
{
	const DtmPlan *p = r->plan;
	const DtmBuffer *b = &p->buffers[i];
	DtmShardLayout l;
	char e[RT_ERR_LEN];
	if (dtm_ckpt_layout(s->ix, it, &l, e, sizeof e))
		return damagef(err, "--resume: %s", e);
	int64_t dstart[DTM_MAX_RANK], dlen[DTM_MAX_RANK], want = 1;
	rt_shard_start(p, b, r->coords, dstart);
	for (int d = 0; d < b->rank; d++) {
		int64_t real = b->global_shape[d] - dstart[d];
		dlen[d] = real < b->shape[d] ? (real > 0 ? real : 0) : b->shape[d];
		want *= dlen[d];
	}
	memset(r->ptr[i], 0, (size_t)rt_numel(b) * rt_dtype_size(b->dtype));
	int64_t got = 0, coords[DTM_MAX_AXES], sstart[DTM_MAX_DIMS], slen[DTM_MAX_DIMS];
	/* a shard's copies on other pp coordinates: taken from the first
	 * stage that has the tensor */
	bool *done = calloc((size_t)s->ix->nfiles, sizeof *done);
	if (!done)
		return rt_errf(err, "out of memory");
	for (int64_t k = 0; k < s->ix->nfiles && got < want; k++) {
		dtm_ckpt_rank_coords(s->ix, k, coords);
		if (done[k] || !dtm_ckpt_first_copy(&l, s->ix->naxes, coords, s->pp))
			continue;
		dtm_ckpt_shard_box(&l, s->ix->sizes, coords, sstart, slen);
		bool overlap = true;
		for (int d = 0; d < l.ndim && overlap; d++)
			overlap = sstart[d] < dstart[d] + dlen[d] && dstart[d] < sstart[d] + slen[d] &&
				  slen[d] > 0;
		if (!overlap)
			continue;
		const DtmSafetensors *st = NULL;
		int frc = source_file(s, k, &st, err);
		if (frc) {
			free(done);
			return frc;
		}
		const DtmStTensor *t = dtm_st_find(st, it->name);
		if (!t)
			continue; /* another pipeline stage's file */
		/* this shard is read: its copies on the other stages are not */
		dtm_ckpt_mark_copies(s->ix, s->pp, k, done);
		bool shape = t->ndim == l.ndim;
		for (int d = 0; shape && d < l.ndim; d++)
			shape = t->shape[d] == slen[d];
		if (!shape) {
			free(done);
			shape_text(t->shape, t->ndim, e, sizeof e);
			return damagef(err, "--resume: %s/%s: tensor '%s' has shape %s, not the shard "
				       "index.json's placement %s gives that rank", s->dir,
				       s->ix->files[k], it->name, e, it->placement);
		}
		if (dtm_st_verify(t, s->ix->files[k], e, sizeof e)) {
			free(done);
			return damagef(err, "--resume: %s/%s", s->dir, e);
		}
		int64_t c = dtm_ckpt_copy_overlap(l.ndim, t->data, t->dtype, sstart, slen, r->ptr[i],
						  st_dtype(b->dtype), b->shape, dstart, dlen);
		if (c < 0) {
			free(done);
			return rt_errf(err, "checkpoint tensor '%s': cannot convert %s to %s", it->name,
				       dtm_st_dtype_name(t->dtype), rt_dtype_name(b->dtype));
		}
		got += c;
	}
	free(done);
	if (got != want)
		return damagef(err, "--resume: checkpoint %s holds %lld of the %lld elements of "
			       "rank %lld's shard of '%s' (a rank file missing a tensor?)", s->dir,
			       (long long)got, (long long)want, (long long)r->rank, b->name);
	return 0;
}

/* One load of dir's checkpoint into the buffers and *m: 0, -1, or DAMAGED
 * (err names the file and the damage).  sync: the barrier after opening
 * that a plain load has; a load that falls back agrees once at the end
 * instead (rt_ckpt_load_fallback).  *latest as open_checked's. */
static int load_once(RtRun *r, const char *dir, bool sync, RtCkptMeta *m, uint64_t *latest,
		     char *err)
{
	const DtmPlan *p = r->plan;
	char path[4200], e[RT_ERR_LEN];
	DtmCkptIndex ix;
	Names n;
	DtmSafetensors *st;
	bool whole = false, reshard = false;
	char sdir[4096] = "";
	int rc = open_checked(r, dir, &ix, &n, &st, path, sizeof path, sdir, sizeof sdir, &whole,
			      &reshard, latest, err);
	Sources src = { .ix = &ix, .dir = sdir, .pp = dtm_ckpt_pp_axis(&ix) };
	if (!rc && reshard && !(src.st = calloc((size_t)ix.nfiles, sizeof *src.st)))
		rc = rt_errf(err, "out of memory");
	/* Every rank checks the same index against the same plan, so most
	 * failures are every rank's: rank 0 says why, and the others, told of
	 * its failure at this barrier, stay quiet (Comm.peer_failed).  A rank
	 * that fails alone meets rank 0 at the barrier and says why itself. */
	if (sync && r->comm && !(rc && r->rank == 0)) {
		int brc = barrier(r, e);
		if (brc && !rc)
			rc = rt_errf(err, "%s", e);
	}
	for (int i = 0; i < p->nbuffers && !rc; i++) {
		const DtmBuffer *b = &p->buffers[i];
		if (!saved(b) || b->stage != p->stage)
			continue;
		if (reshard) {
			rc = load_resharded(r, i, source_of(&n, b), &src, err);
			continue;
		}
		const DtmStTensor *t = dtm_st_find(st, source_of(&n, b)->name);
		if (!t && !whole && src.pp >= 0 && ix.sizes[src.pp] > 1) {
			/* the same mesh and placements, the blocks on other stages
			 * (interleaved's virtual stages against 1F1B's): the shard
			 * is another pp coordinate's, read from its file */
			if (!src.st && !(src.st = calloc((size_t)ix.nfiles, sizeof *src.st)))
				rc = rt_errf(err, "out of memory");
			else
				rc = load_resharded(r, i, source_of(&n, b), &src, err);
		} else if (!t) {
			rc = damagef(err, "--resume: %s has no tensor '%s'", path, b->name);
		} else {
			rc = load_tensor(r, i, t, !whole, path, err);
		}
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
	for (int k = 0; src.st && k < ix.nfiles; k++)
		dtm_st_close(src.st[k]);
	free(src.st);
	names_free(&n);
	dtm_ckpt_index_free(&ix);
	return rc;
}

int rt_ckpt_load(RtRun *r, const char *dir, RtCkptMeta *m, char *err)
{
	uint64_t latest;
	return load_once(r, dir, true, m, &latest, err) ? -1 : 0;
}

/* ---- --resume-fallback ---- */

/* The agreement after a load: every rank's outcome (0 loaded, 1 damaged,
 * 2 failed otherwise) reduced to the worst, with the lowest rank that had
 * it, in one max over the whole mesh: key = outcome * world + (world - 1
 * - rank).  Every rank reaches it, loaded or not, so a damage only one
 * rank saw (its own file, or a source shard only it read in a resharded
 * load) cannot leave the others waiting or loading on alone.  After
 * damage, the reporting rank's message goes to every rank (rank 0 says
 * it).  The worst outcome, or -1 when the communication failed. */
static int agree(const RtRun *r, int rc, int64_t *reporter, char *why, char *err)
{
	int outcome = rc == 0 ? 0 : rc == DAMAGED ? 1 : 2;
	*reporter = r->rank;
	if (!r->comm)
		return outcome;
	int64_t world = rt_world_size(r->plan);
	uint32_t all = (1u << r->plan->mesh_naxes) - 1;
	int32_t key = outcome ? (int32_t)(outcome * world + (world - 1 - r->rank)) : 0, worst;
	if (comm_all_reduce(r->comm, all, &key, &worst, 1, DTM_I32, DTM_RED_MAX))
		return rt_errf(err, "checkpoint agreement: %s", comm_error(r->comm));
	if (!worst)
		return 0;
	*reporter = world - 1 - worst % world;
	outcome = (int)(worst / world);
	if (outcome == 1) {
		int32_t msg[RT_ERR_LEN / 4];
		if (*reporter == r->rank)
			memcpy(msg, why, sizeof msg);
		int root = comm_group(&r->comm->mesh, (int)*reporter, all).index;
		if (comm_broadcast(r->comm, all, msg, RT_ERR_LEN / 4, DTM_I32, root))
			return rt_errf(err, "checkpoint agreement: %s", comm_error(r->comm));
		memcpy(why, msg, sizeof msg);
		why[RT_ERR_LEN - 1] = 0;
	}
	return outcome;
}

/* Another rank says why the load failed: this one stops as that rank's
 * peer (Comm.peer_failed, so it stays quiet), at a barrier the reporter
 * never reaches and fails when the reporter's run ends (comm_fail). */
static int follow_failure(const RtRun *r, int64_t reporter, char *err)
{
	if (!barrier(r, err))
		rt_errf(err, "rank %lld could not load the checkpoint", (long long)reporter);
	return -1;
}

/* The newest DIR/step_N with N < below and an index.json (complete: the
 * index is written after every rank file); rank 0 looks and tells the
 * others, so all load the same one.  1 found, 0 none, -1 error. */
static int older_step(const RtRun *r, const char *dir, uint64_t below, uint64_t *out, char *err)
{
	int32_t v[3] = { 0, 0, 0 };
	if (r->rank == 0) {
		DIR *d = opendir(dir);
		struct dirent *de;
		uint64_t best = 0;
		char want[4096], path[4200];
		while (d && (de = readdir(d))) {
			char *end;
			if (strncmp(de->d_name, "step_", 5) || de->d_name[5] < '0' || de->d_name[5] > '9')
				continue;
			errno = 0;
			unsigned long long s = strtoull(de->d_name + 5, &end, 10);
			/* only the names dtm writes: step_000004, not step_4 or step_4.bak */
			if (*end || errno || s >= below ||
			    dtm_ckpt_step_dir(want, sizeof want, dir, (uint64_t)s) ||
			    strcmp(want + strlen(want) - strlen(de->d_name), de->d_name))
				continue;
			snprintf(path, sizeof path, "%s/index.json", want);
			if ((!v[0] || s > best) && access(path, F_OK) == 0) {
				best = s;
				v[0] = 1;
			}
		}
		if (d)
			closedir(d);
		v[1] = (int32_t)(uint32_t)best;
		v[2] = (int32_t)(uint32_t)(best >> 32);
	}
	if (r->comm && comm_broadcast(r->comm, (1u << r->plan->mesh_naxes) - 1, v, 3, DTM_I32, 0))
		return rt_errf(err, "checkpoint agreement: %s", comm_error(r->comm));
	*out = (uint64_t)(uint32_t)v[1] | (uint64_t)(uint32_t)v[2] << 32;
	return v[0];
}

int rt_ckpt_load_fallback(RtRun *r, const char *dir, RtCkptSkipFn *skipped, void *ctx,
			  RtCkptMeta *m, char *from, size_t nfrom, char *err)
{
	const RtCkptMeta m0 = *m;
	char cand[4096], why[RT_ERR_LEN];
	snprintf(cand, sizeof cand, "%s", dir);
	uint64_t below = UINT64_MAX;
	int nskipped = 0;
	for (;;) {
		/* a damaged checkpoint's metadata (a loss scale, say) must not
		 * outlive it: each try starts from the caller's */
		RtCkptMeta cur = m0;
		uint64_t latest = UINT64_MAX;
		why[0] = 0;
		int rc = load_once(r, cand, false, &cur, &latest, why);
		/* the skip names the step directory DIR/latest chose */
		char shown[4096];
		snprintf(shown, sizeof shown, "%s", cand);
		if (nskipped == 0 && latest != UINT64_MAX) {
			below = latest;
			dtm_ckpt_step_dir(shown, sizeof shown, dir, latest);
		}
		int64_t reporter;
		int outcome = agree(r, rc, &reporter, why, err);
		if (outcome < 0)
			return -1;
		if (outcome == 0) {
			/* every saved buffer was written whole by this load
			 * (load_tensor, load_resharded), so nothing of a damaged
			 * one before it is left */
			*m = cur;
			snprintf(from, nfrom, "%s", cand);
			return 0;
		}
		if (outcome == 2) {
			if (reporter == r->rank)
				return rt_errf(err, "%s", why);
			return follow_failure(r, reporter, err);
		}
		const char *w = strncmp(why, "--resume: ", 10) ? why : why + 10;
		char line[RT_ERR_LEN + 32];
		if (r->comm)
			snprintf(line, sizeof line, "rank %lld: %s", (long long)reporter, w);
		else
			snprintf(line, sizeof line, "%s", w);
		if (skipped)
			skipped(ctx, shown, line);
		nskipped++;
		uint64_t next = 0;
		int found = older_step(r, dir, below, &next, err);
		if (found < 0)
			return -1;
		if (!found) {
			if (r->rank == 0)
				return rt_errf(err, "--resume %s --resume-fallback: no complete checkpoint "
					       "left to fall back to (%d skipped as damaged)", dir,
					       nskipped);
			return follow_failure(r, 0, err);
		}
		dtm_ckpt_step_dir(cand, sizeof cand, dir, next);
		below = next;
	}
}
