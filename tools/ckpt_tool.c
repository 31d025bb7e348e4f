/* ckpt_tool.c - `dtmc ckpt info|merge|split`: dtm's checkpoints as files
 * other tools read and write (issue 20 point 3).
 *
 *   info DIR            the step, mesh, tensors (global shape, placement)
 *                       and what each rank file holds
 *   merge DIR -o F      one safetensors file of whole tensors (each
 *                       assembled from the first copy of every shard,
 *                       runtime/ckpt.h's geometry; dtype kept, bf16 stays
 *                       bf16), the checkpoint's metadata (step, seed, data
 *                       position, model) in __metadata__; --params: the
 *                       params alone, a model's state dict
 *   split F MODEL -o D  a safetensors file of whole tensors (merge's, or
 *                       PyTorch's save_file) into a checkpoint directory
 *                       for MODEL's build (-D, --mesh, --train as for
 *                       `dtmc build`): each rank's shards of each saved
 *                       buffer, cut by the plan's geometry; optimizer
 *                       state the file lacks starts at zero (a fresh
 *                       optimizer, as fine-tuning a model trained
 *                       elsewhere wants) and a master copy from its param
 *
 * Everything is written as the runtime writes checkpoints (atomic files,
 * checksums, index.json last, then `latest`), so `--resume D` takes it on
 * any layout.
 */
#include "tools/ckpt_tool.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/driver.h"
#include "runtime/ckpt.h"
#include "runtime/plan.h"
#include "tools/mlir.h"

static int usage(void)
{
	fputs("usage: dtmc ckpt info DIR\n"
	      "       dtmc ckpt merge DIR -o OUT.safetensors [--params]\n"
	      "       dtmc ckpt split IN.safetensors MODEL -o DIR [-D name=value]...\n"
	      "                       [--mesh axis=size,...] [--train key=value]...\n"
	      "(dtmc help ckpt)\n",
	      stderr);
	return 1;
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("dtmc: error: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 1;
}

/* DIR's checkpoint: DIR/latest's step, or DIR itself a step directory. */
static int open_index(const char *dir, DtmCkptIndex *ix, char *sd, size_t nsd)
{
	char e[1024], path[4200];
	uint64_t step;
	memset(ix, 0, sizeof *ix);
	int rc = dtm_ckpt_find_latest(dir, &step, sd, nsd, e, sizeof e);
	if (rc == DTM_CKPT_NONE) {
		snprintf(sd, nsd, "%s", dir);
		rc = 0;
	}
	if (rc)
		return fail("%s", e);
	snprintf(path, sizeof path, "%s/index.json", sd);
	if (access(path, F_OK) != 0)
		return fail("%s: no checkpoint there (no latest, no index.json)", dir);
	if (dtm_ckpt_index_read(path, ix, e, sizeof e))
		return fail("%s", e);
	return 0;
}

static void put_shape(FILE *f, int ndim, const int64_t *shape)
{
	fputc('[', f);
	for (int d = 0; d < ndim; d++)
		fprintf(f, "%s%" PRId64, d ? ", " : "", shape[d]);
	fputc(']', f);
}

static int64_t numel(int ndim, const int64_t *shape)
{
	int64_t n = 1;
	for (int d = 0; d < ndim; d++)
		n *= shape[d];
	return n;
}

static int info(const char *dir)
{
	DtmCkptIndex ix;
	char sd[4096], e[1024], path[4200];
	if (open_index(dir, &ix, sd, sizeof sd))
		return 1;
	DtmSafetensors *st0 = NULL;
	snprintf(path, sizeof path, "%s/%s", sd, ix.files[0]);
	if (dtm_st_open_lazy(&st0, path, true, e, sizeof e)) {
		dtm_ckpt_index_free(&ix);
		return fail("%s", e);
	}
	const char *model = dtm_st_meta(st0, "model"), *data = dtm_st_meta(st0, "data");
	const char *samples = dtm_st_meta(st0, "data_samples");
	printf("checkpoint %s: step %" PRIu64 ", seed %" PRIu64 ", model %s, data %s (%s samples "
	       "consumed)\n", sd, ix.step, ix.seed, model ? model : "?", data ? data : "?",
	       samples ? samples : "?");
	printf("mesh: ");
	for (int a = 0; a < ix.naxes; a++)
		printf("%s%s=%" PRId64, a ? " x " : "", ix.axes[a], ix.sizes[a]);
	printf("%s, %d rank file%s, checksums %s\n", ix.naxes ? "" : "one device", ix.nfiles,
	       ix.nfiles == 1 ? "" : "s", ix.checksum ? ix.checksum : "none");
	int64_t total = 0;
	printf("tensors (%d):\n  %-32s %-5s %-18s %-16s %s\n", ix.ntensors, "name", "dtype",
	       "global shape", "placement", "bytes");
	for (int i = 0; i < ix.ntensors; i++) {
		const DtmIndexTensor *t = &ix.tensors[i];
		DtmStDtype dt = DTM_DT_F32;
		dtm_st_dtype_parse(t->dtype, &dt);
		int64_t b = numel(t->ndim, t->shape) * (int64_t)dtm_st_dtype_size(dt);
		total += b;
		char sh[128];
		FILE *f = fmemopen(sh, sizeof sh, "w");
		if (f) {
			put_shape(f, t->ndim, t->shape);
			fclose(f);
		}
		printf("  %-32s %-5s %-18s %-16s %" PRId64 "\n", t->name, t->dtype, f ? sh : "?",
		       t->placement ? t->placement : "(whole)", b);
	}
	printf("  total %" PRId64 " bytes (each tensor once)\nfiles:\n", total);
	int rc = 0;
	for (int k = 0; k < ix.nfiles && !rc; k++) {
		DtmSafetensors *st = NULL;
		snprintf(path, sizeof path, "%s/%s", sd, ix.files[k]);
		if (dtm_st_open_lazy(&st, path, true, e, sizeof e)) {
			rc = fail("%s", e);
			break;
		}
		int64_t coords[DTM_MAX_AXES], bytes = 0;
		dtm_ckpt_rank_coords(&ix, k, coords);
		printf("  %s (", ix.files[k]);
		for (int a = 0; a < ix.naxes; a++)
			printf("%s%s=%" PRId64, a ? ", " : "", ix.axes[a], coords[a]);
		for (int i = 0; i < dtm_st_count(st); i++)
			bytes += (int64_t)dtm_st_at(st, i)->nbytes;
		printf("%s): %d tensors, %" PRId64 " bytes:", ix.naxes ? "" : "whole",
		       dtm_st_count(st), bytes);
		for (int i = 0; i < dtm_st_count(st); i++) {
			const DtmStTensor *t = dtm_st_at(st, i);
			printf("%s %s", i ? "," : "", t->name);
			put_shape(stdout, t->ndim, t->shape);
		}
		putchar('\n');
		dtm_st_close(st);
	}
	dtm_st_close(st0);
	dtm_ckpt_index_free(&ix);
	return rc;
}

/* Tensor t of the checkpoint, whole, into dst (its dtype's bytes): every
 * shard's first copy (on the pipeline stage whose files hold it). */
static int assemble(const DtmCkptIndex *ix, const char *sd, DtmSafetensors **files,
                    const DtmIndexTensor *t, DtmStDtype dt, void *dst)
{
	DtmShardLayout l;
	char e[1024], path[4200];
	if (dtm_ckpt_layout(ix, t, &l, e, sizeof e))
		return fail("%s/index.json: %s", sd, e);
	int pp = dtm_ckpt_pp_axis(ix);
	int64_t want = numel(t->ndim, t->shape), got = 0, zero[DTM_MAX_DIMS] = {0};
	int64_t coords[DTM_MAX_AXES], start[DTM_MAX_DIMS], len[DTM_MAX_DIMS];
	/* the shards already read, by their coordinates but pp's */
	bool *done = calloc((size_t)ix->nfiles, sizeof *done);
	if (!done)
		return fail("out of memory");
	for (int64_t k = 0; k < ix->nfiles && got < want; k++) {
		dtm_ckpt_rank_coords(ix, k, coords);
		if (done[k] || !dtm_ckpt_first_copy(&l, ix->naxes, coords, pp))
			continue;
		if (!files[k]) {
			snprintf(path, sizeof path, "%s/%s", sd, ix->files[k]);
			if (dtm_st_open_lazy(&files[k], path, true, e, sizeof e)) {
				free(done);
				return fail("%s", e);
			}
		}
		const DtmStTensor *s = dtm_st_find(files[k], t->name);
		if (!s)
			continue;
		dtm_ckpt_mark_copies(ix, pp, k, done);
		dtm_ckpt_shard_box(&l, ix->sizes, coords, start, len);
		bool shape = s->ndim == t->ndim;
		for (int d = 0; shape && d < t->ndim; d++)
			shape = s->shape[d] == len[d];
		if (!shape || dtm_st_verify(s, ix->files[k], e, sizeof e)) {
			free(done);
			return fail("%s/%s: tensor %s: %s", sd, ix->files[k], t->name,
			            shape ? e : "not the shard index.json's placement gives the rank");
		}
		got += dtm_ckpt_copy_overlap(t->ndim, s->data, s->dtype, start, len, dst, dt,
		                             t->shape, zero, t->shape);
	}
	free(done);
	if (got != want)
		return fail("%s: the rank files hold %" PRId64 " of the %" PRId64 " elements of %s",
		            sd, got, want, t->name);
	return 0;
}

static int merge(const char *dir, const char *out, bool params_only)
{
	DtmCkptIndex ix;
	char sd[4096], e[1024];
	if (open_index(dir, &ix, sd, sizeof sd))
		return 1;
	DtmSafetensors **files = calloc((size_t)ix.nfiles, sizeof *files);
	DtmTensorDesc *td = calloc((size_t)ix.ntensors + 1, sizeof *td);
	int rc = !files || !td ? fail("out of memory") : 0, n = 0;
	for (int i = 0; i < ix.ntensors && !rc; i++) {
		const DtmIndexTensor *t = &ix.tensors[i];
		if (params_only && !strncmp(t->name, "opt.", 4))
			continue;
		DtmStDtype dt;
		if (dtm_st_dtype_parse(t->dtype, &dt)) {
			rc = fail("%s/index.json: tensor %s: dtype %s", sd, t->name, t->dtype);
			break;
		}
		void *buf = malloc((size_t)numel(t->ndim, t->shape) * dtm_st_dtype_size(dt) + 1);
		td[n] = (DtmTensorDesc){.name = t->name, .dtype = dt, .ndim = t->ndim, .data = buf};
		memcpy(td[n].shape, t->shape, sizeof t->shape);
		n++;
		rc = !buf ? fail("out of memory") : assemble(&ix, sd, files, t, dt, buf);
	}
	/* the checkpoint's metadata but the per-rank keys */
	static const char *const keys[] = {"format", "step", "seed", "data_samples", "model",
	                                   "plan_version", "lr_decay_steps", "data", "loss_scale",
	                                   "loss_scale_good", "skipped_steps"};
	DtmMetaKV meta[sizeof keys / sizeof keys[0]];
	int nmeta = 0;
	if (!rc && !files[0]) {
		char path[4200];
		snprintf(path, sizeof path, "%s/%s", sd, ix.files[0]);
		if (dtm_st_open_lazy(&files[0], path, true, e, sizeof e))
			rc = fail("%s", e);
	}
	for (size_t k = 0; !rc && k < sizeof keys / sizeof keys[0]; k++) {
		const char *v = dtm_st_meta(files[0], keys[k]);
		if (v)
			meta[nmeta++] = (DtmMetaKV){keys[k], v};
	}
	if (!rc && dtm_st_write(out, td, n, meta, nmeta, e, sizeof e))
		rc = fail("%s", e);
	if (!rc)
		printf("dtmc: merged %d tensors of %s (step %" PRIu64 ", %d rank files) into %s\n", n,
		       sd, ix.step, ix.nfiles, out);
	for (int i = 0; i < n; i++)
		free((void *)td[i].data);
	for (int k = 0; files && k < ix.nfiles; k++)
		dtm_st_close(files[k]);
	free(files);
	free(td);
	dtm_ckpt_index_free(&ix);
	return rc;
}

static DtmStDtype st_dtype(DtmDtype t)
{
	switch (t) {
	case DTM_BF16: return DTM_DT_BF16;
	case DTM_F16: return DTM_DT_F16;
	case DTM_I32: return DTM_DT_I32;
	default: return DTM_DT_F32;
	}
}

static bool saved(const DtmBuffer *b)
{
	return b->name && (b->role == DTM_ROLE_PARAM || b->role == DTM_ROLE_OPT_STATE);
}

/* The input's tensor for buffer b: its own name; a master copy's param
 * where the file has no master copies; NULL for an optimizer state the
 * file lacks (it starts at zero). */
static const DtmStTensor *split_source(const DtmSafetensors *in, const DtmBuffer *b)
{
	const DtmStTensor *t = dtm_st_find(in, b->name);
	if (!t && !strncmp(b->name, "opt.master.", 11))
		t = dtm_st_find(in, b->name + 11);
	return t;
}

/* Rank's coordinates on the plan's mesh (row-major, the last axis
 * fastest, as the runtime numbers ranks). */
static void plan_coords(const DtmPlan *p, int64_t rank, int64_t *coords)
{
	for (int a = p->mesh_naxes - 1; a >= 0; a--) {
		coords[a] = rank % p->mesh_sizes[a];
		rank /= p->mesh_sizes[a];
	}
}

static int64_t plan_world(const DtmPlan *p)
{
	int64_t w = 1;
	for (int a = 0; a < p->mesh_naxes; a++)
		w *= p->mesh_sizes[a];
	return w;
}

/* b's shard at coords: its box (the runtime's geometry, ckpt.h's). */
static void plan_box(const DtmPlan *p, const DtmBuffer *b, const int64_t *coords, int64_t *start,
                     int64_t *len)
{
	DtmShardLayout l = {.ndim = b->rank};
	for (int d = 0; d < b->rank; d++) {
		l.shape[d] = b->global_shape[d];
		l.nsplit[d] = b->split_naxes[d];
		for (int j = 0; j < b->split_naxes[d]; j++)
			l.split[d][j] = b->split_axes[d][j];
	}
	dtm_ckpt_shard_box(&l, p->mesh_sizes, coords, start, len);
}

/* One rank's file: its stage's saved buffers, each its shard of the
 * input's whole tensor (converted to the buffer's dtype). */
static int split_rank(const DtmPlan *p, const DtmSafetensors *in, int64_t rank, const char *path,
                      const DtmMetaKV *meta, int nmeta, int *zeroed)
{
	int64_t coords[DTM_MAX_AXES] = {0};
	plan_coords(p, rank, coords);
	int stage = p->nstages > 1 ? (int)coords[p->pp_axis] : 0;
	DtmTensorDesc *td = calloc((size_t)p->nbuffers + 1, sizeof *td);
	if (!td)
		return fail("out of memory");
	int n = 0, rc = 0;
	char e[1024];
	for (int i = 0; i < p->nbuffers && !rc; i++) {
		const DtmBuffer *b = &p->buffers[i];
		if (!saved(b) || b->stage != stage)
			continue;
		int64_t start[DTM_MAX_DIMS], len[DTM_MAX_DIMS], zero[DTM_MAX_DIMS] = {0};
		plan_box(p, b, coords, start, len);
		DtmStDtype dt = st_dtype(b->dtype);
		void *buf = calloc((size_t)numel(b->rank, len) * dtm_st_dtype_size(dt) + 1, 1);
		td[n] = (DtmTensorDesc){.name = b->name, .dtype = dt, .ndim = b->rank, .data = buf};
		memcpy(td[n].shape, len, sizeof len);
		n++;
		const DtmStTensor *t = split_source(in, b);
		if (!buf) {
			rc = fail("out of memory");
		} else if (!t) {
			if (b->role == DTM_ROLE_PARAM)
				rc = fail("the file has no tensor '%s' (a param of the model)", b->name);
			else
				(*zeroed)++;
		} else {
			bool shape = t->ndim == b->rank;
			for (int d = 0; shape && d < b->rank; d++)
				shape = t->shape[d] == b->global_shape[d];
			if (!shape)
				rc = fail("tensor '%s' has another shape in the file than the model's",
				          b->name);
			else if (dtm_st_verify(t, "the file", e, sizeof e))
				rc = fail("%s", e);
			else if (dtm_ckpt_copy_overlap(b->rank, t->data, t->dtype, zero, t->shape, buf,
			                               dt, len, start, len) < 0)
				rc = fail("tensor '%s': %s does not convert to %s", b->name,
				          dtm_st_dtype_name(t->dtype), dtm_st_dtype_name(dt));
		}
	}
	if (!rc && dtm_st_write(path, td, n, meta, nmeta, e, sizeof e))
		rc = fail("%s", e);
	for (int i = 0; i < n; i++)
		free((void *)td[i].data);
	free(td);
	return rc;
}

static int split(const char *file, const char *model, const char *dir, const LowerOptions *lo)
{
	char e[1024];
	DtmSafetensors *in = NULL;
	if (dtm_st_open_lazy(&in, file, true, e, sizeof e))
		return fail("%s", e);
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	DrvOptions o = {.lower = *lo, .import_mlir = mlir_import_file};
	Compiled c;
	int rc = drv_compile(&c, &a, &d, model, &o) && d.nerr == 0 ? 0 : 1;
	const DtmPlan *p = c.plan;
	/* the step, seed and data position the file says (a merged
	 * checkpoint's), else a start from step 0 */
	const char *step = dtm_st_meta(in, "step"), *seed = dtm_st_meta(in, "seed");
	char seedbuf[32], samples[32], ver[16], mesh[256] = "", rankbuf[32];
	if (!rc) {
		snprintf(seedbuf, sizeof seedbuf, "%" PRId64, p->train.seed);
		snprintf(ver, sizeof ver, "%d", p->version);
		snprintf(samples, sizeof samples, "%" PRId64,
		         (int64_t)(step ? strtoll(step, NULL, 10) : 0) *
		                 (p->train.batch > 0 ? p->train.batch : 1));
		for (int x = 0, k = 0; x < p->mesh_naxes && k < (int)sizeof mesh - 40; x++)
			k += snprintf(mesh + k, sizeof mesh - (size_t)k, "%s%s=%" PRId64, x ? "," : "",
			              p->mesh_names[x], p->mesh_sizes[x]);
	}
	const char *lr = dtm_st_meta(in, "lr_decay_steps"), *data = dtm_st_meta(in, "data");
	DtmMetaKV meta[] = {
	        {"format", DTM_CKPT_FORMAT},
	        {"step", step ? step : "0"},
	        {"seed", seed ? seed : seedbuf},
	        {"data_samples", dtm_st_meta(in, "data_samples") ? dtm_st_meta(in, "data_samples")
	                                                          : samples},
	        {"model", p && p->model ? p->model : ""},
	        {"plan_version", ver},
	        {"lr_decay_steps", lr ? lr : "0"},
	        {"data", data ? data : p && p->train.data ? p->train.data : "synthetic"},
	        {"mesh", mesh},
	        {"rank", rankbuf},
	};
	int nmeta = sizeof meta / sizeof meta[0];
	uint64_t ustep = step ? strtoull(step, NULL, 10) : 0;
	int64_t world = rc ? 0 : plan_world(p);
	int zeroed = 0;
	char sd[4096], path[4200];
	if (!rc && world == 1) {
		/* one file of whole tensors, as a one-rank run saves */
		snprintf(rankbuf, sizeof rankbuf, "0");
		char tmpdir[4200];
		snprintf(tmpdir, sizeof tmpdir, "%s", dir);
		if (dtm_ckpt_begin_step(dir, ustep, sd, sizeof sd, e, sizeof e))
			rc = fail("%s", e);
		snprintf(path, sizeof path, "%s/rank00000.safetensors", sd);
		rc = rc ? rc : split_rank(p, in, 0, path, meta, nmeta - 2, &zeroed);
		DtmIndexTensor *it = calloc((size_t)p->nbuffers + 1, sizeof *it);
		const char *f0 = "rank00000.safetensors";
		DtmCkptIndex ix = {.step = ustep, .seed = strtoull(meta[2].value, NULL, 10),
		                   .nfiles = 1, .files = &f0, .checksum = DTM_CKPT_CHECKSUM,
		                   .tensors = it};
		for (int i = 0; !rc && it && i < p->nbuffers; i++)
			if (saved(&p->buffers[i])) {
				const DtmBuffer *b = &p->buffers[i];
				it[ix.ntensors++] = (DtmIndexTensor){.name = b->name,
				                                     .dtype = dtm_st_dtype_name(st_dtype(b->dtype)),
				                                     .ndim = b->rank};
				memcpy(it[ix.ntensors - 1].shape, b->global_shape, sizeof b->global_shape);
			}
		if (!rc && (!it || dtm_ckpt_commit_step(dir, &ix, e, sizeof e)))
			rc = fail("%s", it ? e : "out of memory");
		free(it);
	} else if (!rc) {
		if (dtm_ckpt_begin_step(dir, ustep, sd, sizeof sd, e, sizeof e))
			rc = fail("%s", e);
		char (*files)[32] = calloc((size_t)world, sizeof *files);
		const char **fp = calloc((size_t)world, sizeof *fp);
		DtmIndexTensor *it = calloc((size_t)p->nbuffers + 1, sizeof *it);
		if (!rc && (!files || !fp || !it))
			rc = fail("out of memory");
		for (int64_t k = 0; !rc && k < world; k++) {
			dtm_ckpt_rank_file(files[k], sizeof files[k], (int)k);
			fp[k] = files[k];
			snprintf(rankbuf, sizeof rankbuf, "%" PRId64, k);
			snprintf(path, sizeof path, "%s/%s", sd, files[k]);
			int z = 0;
			rc = split_rank(p, in, k, path, meta, nmeta, &z);
			zeroed += k == 0 ? z : 0;
		}
		DtmCkptIndex ix = {.step = ustep, .seed = strtoull(meta[2].value, NULL, 10),
		                   .naxes = p->mesh_naxes, .nfiles = (int)world, .files = fp,
		                   .checksum = DTM_CKPT_CHECKSUM, .tensors = it};
		for (int x = 0; x < p->mesh_naxes; x++) {
			ix.axes[x] = p->mesh_names[x];
			ix.sizes[x] = p->mesh_sizes[x];
		}
		for (int i = 0; !rc && i < p->nbuffers; i++) {
			const DtmBuffer *b = &p->buffers[i];
			bool dup = false;
			for (int k = 0; k < ix.ntensors && !dup; k++)
				dup = !strcmp(it[k].name, b->name ? b->name : "");
			if (!saved(b) || dup)
				continue;
			it[ix.ntensors] = (DtmIndexTensor){.name = b->name,
			                                   .dtype = dtm_st_dtype_name(st_dtype(b->dtype)),
			                                   .ndim = b->rank, .placement = b->placement};
			memcpy(it[ix.ntensors].shape, b->global_shape, sizeof b->global_shape);
			ix.ntensors++;
		}
		if (!rc && dtm_ckpt_commit_step(dir, &ix, e, sizeof e))
			rc = fail("%s", e);
		free(files);
		free(fp);
		free(it);
	}
	if (!rc)
		printf("dtmc: split %s into %s/step_%06" PRIu64 " for %s (%" PRId64 " rank file%s)%s\n",
		       file, dir, ustep, model, world, world == 1 ? "" : "s",
		       zeroed ? "; optimizer state the file lacks starts at zero" : "");
	dtm_st_close(in);
	arena_free(&a);
	return rc;
}

int ckpt_main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	const char *cmd = argv[1], *out = NULL, *pos[2] = {NULL, NULL};
	bool params = false;
	int npos = 0;
	LowerOptions lo = {0};
	for (int i = 2; i < argc; i++) {
		const char *s = argv[i];
		if (!strcmp(s, "-o") && i + 1 < argc) {
			out = argv[++i];
		} else if (!strcmp(s, "--params") && !strcmp(cmd, "merge")) {
			params = true;
		} else if (!strcmp(cmd, "split") && !strcmp(s, "-D") && i + 1 < argc &&
		           lo.ndefines < LOWER_MAX_DEFINES && strchr(argv[i + 1], '=')) {
			char *v = argv[++i], *eq = strchr(v, '=');
			*eq = 0;
			lo.define_names[lo.ndefines] = v;
			lo.define_values[lo.ndefines++] = eq + 1;
		} else if (!strcmp(cmd, "split") && !strcmp(s, "--mesh") && i + 1 < argc) {
			lo.mesh = argv[++i];
		} else if (!strcmp(cmd, "split") && !strcmp(s, "--train") && i + 1 < argc &&
		           lo.ntrain < LOWER_MAX_TRAIN) {
			lo.train[lo.ntrain++] = argv[++i];
		} else if (s[0] == '-' && s[1]) {
			fprintf(stderr, "dtmc: error: ckpt %s: unknown option '%s'\n", cmd, s);
			return usage();
		} else if (npos < 2) {
			pos[npos++] = s;
		} else {
			return usage();
		}
	}
	if (!strcmp(cmd, "info") && npos == 1 && !out)
		return info(pos[0]);
	if (!strcmp(cmd, "merge") && npos == 1 && out)
		return merge(pos[0], out, params);
	if (!strcmp(cmd, "split") && npos == 2 && out)
		return split(pos[0], pos[1], out, &lo);
	return usage();
}
