/* feed.c - fills a Plan's input buffers with this rank's part of a global
 * batch.
 *
 * The global batch of step s is samples [(s-1)*B, s*B) (B = the inputs'
 * global batch dim) of the training data; evaluation reads samples [0, B)
 * of the --val-data stream, or for synthetic data a held-out range
 * starting at RT_EVAL_FIRST_SAMPLE.  Which elements of the global batch
 * this rank holds comes from the input buffer's split layout, exactly as
 * for parameters: each local element's global index is (sample row, offset
 * in the row), so data parallelism (batch split) and sequence parallelism
 * (seq split) need no special cases.  Samples come from runtime/data.h, a pure function of
 * (seed or token stream, sample index).
 */
#include <stdint.h>
#include <stdlib.h>

#include "runtime/ckpt.h"
#include "runtime/data.h"
#include "runtime/fsio.h"
#include "runtime/rt.h"

static int64_t row_len(const DtmBuffer *b)
{
	return b->global_shape[0] > 0 ? rt_global_numel(b) / b->global_shape[0] : 0;
}

int rt_feed_open(RtFeed *f, const DtmPlan *p, const int64_t *coords, const DtmTokenShards *train,
		 const DtmTokenShards *val, uint64_t seed, char *err)
{
	memset(f, 0, sizeof *f);
	f->plan = p;
	f->kind = p->train.data_kind;
	f->seed = seed;
	f->vocab = (int)p->train.vocab;
	if (p->ninputs < 1 || p->ninputs > 4) {
		snprintf(err, RT_ERR_LEN, "invalid plan: %d input buffers", p->ninputs);
		return -1;
	}
	for (int k = 0; k < p->ninputs; k++) {
		const DtmBuffer *b = &p->buffers[p->inputs[k]];
		if (b->rank < 1) {
			snprintf(err, RT_ERR_LEN, "input '%s' has no batch dimension",
				 b->name ? b->name : "?");
			return -1;
		}
		if (k == 0)
			f->batch = b->global_shape[0];
		else if (b->global_shape[0] != f->batch) {
			snprintf(err, RT_ERR_LEN, "inputs disagree on the batch size (%lld vs %lld)",
				 (long long)f->batch, (long long)b->global_shape[0]);
			return -1;
		}
		f->gidx[k] = malloc((size_t)(rt_numel(b) ? rt_numel(b) : 1) * sizeof(int64_t));
		if (!f->gidx[k]) {
			snprintf(err, RT_ERR_LEN, "out of memory for the input index");
			rt_feed_close(f);
			return -1;
		}
		rt_global_indices(p, b, coords, f->gidx[k]);
	}
	char e[RT_ERR_LEN / 2];
	if (f->kind == DTM_DATA_TOKENS) {
		for (int k = 0; k < p->ninputs && k < 2; k++) {
			const DtmBuffer *b = &p->buffers[p->inputs[k]];
			if (b->dtype != DTM_I32) {
				snprintf(err, RT_ERR_LEN, "token input '%s' is %s, not i32",
					 b->name ? b->name : "?", rt_dtype_name(b->dtype));
				rt_feed_close(f);
				return -1;
			}
		}
		f->T = row_len(&p->buffers[p->inputs[0]]);
		if (p->ninputs > 1 && row_len(&p->buffers[p->inputs[1]]) != f->T) {
			snprintf(err, RT_ERR_LEN, "tokens and targets disagree on the sequence length");
			rt_feed_close(f);
			return -1;
		}
		f->row = malloc((size_t)(f->T + 1) * sizeof(int32_t));
		if (!f->row) {
			snprintf(err, RT_ERR_LEN, "out of memory");
			rt_feed_close(f);
			return -1;
		}
		if (!train && f->vocab < DTM_MARKOV_K) {
			snprintf(err, RT_ERR_LEN, "synthetic data needs vocab >= %d, got %d",
				 DTM_MARKOV_K, f->vocab);
			rt_feed_close(f);
			return -1;
		}
		f->train = train;
		f->val = val;
	} else if (f->kind == DTM_DATA_REGRESSION) {
		if (p->ninputs < 2) {
			snprintf(err, RT_ERR_LEN, "a regression plan needs inputs x and y");
			rt_feed_close(f);
			return -1;
		}
		if (train || val) {
			snprintf(err, RT_ERR_LEN,
				 "this model trains on synthetic regression data only");
			rt_feed_close(f);
			return -1;
		}
		int in = (int)row_len(&p->buffers[p->inputs[0]]);
		int out = (int)row_len(&p->buffers[p->inputs[1]]);
		f->rx = malloc((size_t)in * sizeof(float));
		f->ry = malloc((size_t)out * sizeof(float));
		if (!f->rx || !f->ry) {
			snprintf(err, RT_ERR_LEN, "out of memory");
			rt_feed_close(f);
			return -1;
		}
		if (dtm_regression_init(&f->reg, seed, in, out, e, sizeof e)) {
			snprintf(err, RT_ERR_LEN, "%s", e);
			rt_feed_close(f);
			return -1;
		}
		f->have_reg = true;
	} else {
		snprintf(err, RT_ERR_LEN, "invalid plan: data kind %d", f->kind);
		rt_feed_close(f);
		return -1;
	}
	return 0;
}

void rt_feed_close(RtFeed *f)
{
	for (int k = 0; k < 4; k++)
		free(f->gidx[k]);
	free(f->row);
	free(f->rx);
	free(f->ry);
	if (f->have_reg)
		dtm_regression_free(&f->reg);
	memset(f, 0, sizeof *f);
}

/* Loads sample `sample` of src (a token stream, or NULL: synthetic) into
 * the row cache; for regression, input k's half (k = 0: x alone, without
 * the target's product). */
static int load_row(RtFeed *f, const DtmTokenShards *src, uint64_t sample, int k, char *err)
{
	char e[RT_ERR_LEN / 2];
	if (f->kind == DTM_DATA_REGRESSION) {
		if (k == 0)
			dtm_regression_input(&f->reg, sample, f->rx);
		else
			dtm_regression_sample(&f->reg, sample, f->rx, f->ry);
		return 0;
	}
	int rc;
	if (src)
		rc = dtm_shards_sample(src, sample, (int)f->T, f->vocab, f->row, e, sizeof e);
	else
		rc = dtm_data_synth_tokens(f->seed, f->vocab, sample, (int)f->T + 1, f->row);
	if (rc) {
		snprintf(err, RT_ERR_LEN, "%sdata sample %llu: %s",
			 src && src == f->val ? "val " : "", (unsigned long long)sample,
			 src ? e : "cannot generate");
		return -1;
	}
	return 0;
}

/* The regression feed's x and y inputs: each sample's x made once for
 * both (a row either input holds), its target only where y holds that
 * row.  The two inputs' local elements each come in global row order;
 * they are walked side by side, the lower row first, so a rank holding
 * both makes each sample's x once, not once per input (what the cost
 * model prices: tools/cost.c cost_feed_seconds).  The values do not
 * depend on the order: each is a function of its sample and column. */
static void fill_regression(RtFeed *f, void *const *ptr, uint64_t first_sample)
{
	const DtmPlan *p = f->plan;
	const DtmBuffer *b[2] = {&p->buffers[p->inputs[0]], &p->buffers[p->inputs[1]]};
	void *dst[2] = {ptr[p->inputs[0]], ptr[p->inputs[1]]};
	int64_t n[2] = {rt_numel(b[0]), rt_numel(b[1])}, len[2] = {row_len(b[0]), row_len(b[1])};
	int64_t i[2] = {0, 0};
	for (;;) {
		int64_t row[2];
		for (int k = 0; k < 2; k++) {
			/* an uneven shard's padding */
			while (i[k] < n[k] && f->gidx[k][i[k]] < 0)
				rt_store_f32(dst[k], b[k]->dtype, i[k]++, 0);
			row[k] = i[k] < n[k] ? f->gidx[k][i[k]] / len[k] : INT64_MAX;
		}
		int64_t r = row[0] < row[1] ? row[0] : row[1];
		if (r == INT64_MAX)
			return;
		dtm_regression_input(&f->reg, first_sample + (uint64_t)r, f->rx);
		if (row[1] == r)
			dtm_regression_target(&f->reg, f->rx, f->ry);
		const float *val[2] = {f->rx, f->ry};
		for (int k = 0; k < 2; k++)
			for (int64_t g; i[k] < n[k] && (g = f->gidx[k][i[k]]) >= 0 && g / len[k] == r;
			     i[k]++)
				rt_store_f32(dst[k], b[k]->dtype, i[k], val[k][g % len[k]]);
	}
}

static int fill(RtFeed *f, void *const *ptr, const DtmTokenShards *src, uint64_t first_sample,
		char *err)
{
	const DtmPlan *p = f->plan;
	if (f->kind == DTM_DATA_REGRESSION && p->ninputs == 2) {
		fill_regression(f, ptr, first_sample);
		return 0;
	}
	for (int k = 0; k < p->ninputs; k++) {
		int id = p->inputs[k];
		const DtmBuffer *b = &p->buffers[id];
		int64_t n = rt_numel(b), len = row_len(b), row = -1;
		void *dst = ptr[id];
		for (int64_t i = 0; i < n; i++) {
			int64_t g = f->gidx[k][i], r = g / len, c = g % len;
			if (g < 0) { /* an uneven shard's padding */
				rt_store_f32(dst, b->dtype, i, 0);
				continue;
			}
			/* local elements come in global row order, so each
			 * sample is produced once per input */
			if (r != row) {
				if (load_row(f, src, first_sample + (uint64_t)r, k, err))
					return -1;
				row = r;
			}
			if (f->kind == DTM_DATA_TOKENS) {
				/* input k = 0: tokens[t]; k = 1: targets = tokens[t+1] */
				((int32_t *)dst)[i] = f->row[c + (k >= 1)];
			} else {
				rt_store_f32(dst, b->dtype, i, k == 0 ? f->rx[c] : f->ry[c]);
			}
		}
	}
	return 0;
}

int rt_feed_fill(RtFeed *f, void *const *ptr, uint64_t first_sample, char *err)
{
	return fill(f, ptr, f->train, first_sample, err);
}

bool rt_feed_has_eval(const RtFeed *f)
{
	return f->val || !f->train;
}

int rt_feed_fill_eval(RtFeed *f, void *const *ptr, char *err)
{
	if (f->val)
		return fill(f, ptr, f->val, 0, err);
	if (f->train)
		return rt_errf(err, "no held-out data: the training files are all there is "
				    "(--val-data FILE)");
	return fill(f, ptr, NULL, RT_EVAL_FIRST_SAMPLE, err);
}

int rt_feed_dump(const RtFeed *f, void *const *ptr, const char *dir, int64_t step, char *err)
{
	const DtmPlan *p = f->plan;
	char e[RT_ERR_LEN / 2], path[4096];
	if (rt_world_size(p) != 1)
		return rt_errf(err, "--dump-batches: multi-rank runs are not supported yet");
	if (rt_mkdirs(dir, e, sizeof e))
		return rt_errf(err, "--dump-batches: %s", e);
	if (snprintf(path, sizeof path, "%s/step_%06lld.safetensors", dir, (long long)step) >=
	    (int)sizeof path)
		return rt_errf(err, "--dump-batches: path too long");
	DtmTensorDesc t[4];
	memset(t, 0, sizeof t);
	for (int k = 0; k < p->ninputs; k++) {
		const DtmBuffer *b = &p->buffers[p->inputs[k]];
		static const DtmStDtype st[] = { [DTM_F32] = DTM_DT_F32, [DTM_BF16] = DTM_DT_BF16,
						 [DTM_F16] = DTM_DT_F16, [DTM_I32] = DTM_DT_I32 };
		t[k].name = b->name ? b->name : "?";
		t[k].dtype = st[b->dtype];
		t[k].ndim = b->rank;
		for (int d = 0; d < b->rank; d++)
			t[k].shape[d] = b->shape[d];
		t[k].data = ptr[p->inputs[k]];
	}
	char s[32];
	snprintf(s, sizeof s, "%lld", (long long)step);
	DtmMetaKV meta[] = { { "step", s } };
	if (dtm_st_write(path, t, p->ninputs, meta, 1, e, sizeof e))
		return rt_errf(err, "--dump-batches: %s", e);
	return 0;
}
