/* validate.c - the checks of what a user gives: train settings and inits.
 *
 * The .dtm train section (frontend/lower_train.c), --train (the same code on the
 * command line's text) and IR text (parse.c) all end here, so the two
 * paths take the same values and say the same about the rest, at the
 * place the value was written.  Each check runs when the value is read,
 * before anything is sized by it (a micro-batch count of 10^9 never
 * reaches an allocation).  The ranges are train.def's.
 */
#include "ir/irtext.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

enum { R_ANY, R_INT, R_GT, R_GE, R_UNIT, R_OPEN, R_WORD, R_PATH };

typedef struct Field {
	const char *key;
	IrTextFieldKind kind;
	size_t off;
	int range;
	int64_t lo, hi;
} Field;

static const Field fields[IR_TRAIN_COUNT] = {
#define IR_TRAIN(e, member, kind, line, range, lo, hi)                                         \
	[IR_TRAIN_##e] = {#member, kind, offsetof(IrTrain, member), range, lo, hi},
#include "ir/train.def"
#undef IR_TRAIN
};

/* The words of the R_WORD settings, and how a message lists them.  An
 * enum setting's value k is words[k - 1] (IrOptimizer and the others list
 * their members in this order). */
static const struct {
	IrTrainField f;
	const char *words[5];
	const char *expected;
} word_sets[] = {
	{IR_TRAIN_OPTIMIZER, {"adamw", "sgd"}, "adamw or sgd"},
	{IR_TRAIN_LR_SCHEDULE, {"constant", "cosine"}, "constant or cosine(warmup = N, min_lr = x)"},
	{IR_TRAIN_SCHEDULE, {"gpipe", "1f1b", "interleaved", "zb"},
	 "gpipe, 1f1b, interleaved(v) or zb"},
	{IR_TRAIN_PRECISION, {"f32", "bf16", "f16"}, "f32, bf16 or f16"},
	{IR_TRAIN_REDUCE_DTYPE, {"f32", "bf16", "f16"}, "f32, bf16 or f16"},
	{IR_TRAIN_MASTER_DTYPE, {"f32", "bf16", "f16"}, "f32, bf16 or f16"},
	{IR_TRAIN_LOSS_SCALE, {"dynamic", "fixed", "off"}, "dynamic, fixed or off"},
	{IR_TRAIN_CONTEXT_PARALLEL, {"ulysses", "ring"}, "ulysses or ring"},
	{IR_TRAIN_RECOMPUTE_SCOPE, {"layer"}, "layer"},
};

/* The words of setting f, NULL for one without. */
static const char *const *words_of(IrTrainField f)
{
	for (size_t i = 0; i < sizeof word_sets / sizeof word_sets[0]; i++)
		if (word_sets[i].f == f)
			return word_sets[i].words;
	return NULL;
}

const char *ir_train_word(IrTrainField f, int v)
{
	const char *const *w = words_of(f);
	if (!w || v < 1 || v > (int)(sizeof word_sets[0].words / sizeof word_sets[0].words[0]))
		return NULL;
	return w[v - 1];
}

const char *ir_train_key(IrTrainField f)
{
	return (unsigned)f < IR_TRAIN_COUNT ? fields[f].key : "?";
}

static int64_t int_of(const IrTrain *t, const Field *fl)
{
	const char *p = (const char *)t + fl->off;
	if (fl->kind == TF_INT)
		return *(const int *)p;
	return *(const int64_t *)p;
}

/* The word a setting holds (NULL: none); precision by its dtype name. */
static const char *word_of(const IrTrain *t, const Field *fl)
{
	const char *p = (const char *)t + fl->off;
	if (fl->kind == TF_DTYPE) {
		IrDtype dt = *(const IrDtype *)p;
		return (unsigned)dt < IR_DTYPE_COUNT ? ir_dtype_name(dt) : "?";
	}
	if (fl->kind == TF_ENUM) {
		int v = *(const int *)p;
		const char *w = ir_train_word((IrTrainField)(fl - fields), v);
		return v == 0 ? NULL : w ? w : "?";
	}
	return *(const char *const *)p;
}

static bool check_int(const Field *fl, int64_t v, const char *key, SrcLoc loc, Diag *d)
{
	if (v >= fl->lo && v <= fl->hi)
		return true;
	if (fl->hi == INT64_MAX)
		diag_error(d, loc, "%s must be >= %" PRId64 ", got %" PRId64, key, fl->lo, v);
	else
		diag_error(d, loc, "%s must be between %" PRId64 " and %" PRId64 ", got %" PRId64, key,
		           fl->lo, fl->hi, v);
	return false;
}

static bool check_real(const Field *fl, double v, const char *key, SrcLoc loc, Diag *d)
{
	double lo = (double)fl->lo;
	if (fl->range == R_UNIT) {
		if (v >= lo && v < (double)fl->hi)
			return true;
		diag_error(d, loc, "%s must be in [%g, %g), got %g", key, lo, (double)fl->hi, v);
		return false;
	}
	if (fl->range == R_OPEN) {
		if (v > lo && v < (double)fl->hi)
			return true;
		diag_error(d, loc, "%s must be in (%g, %g), got %g", key, lo, (double)fl->hi, v);
		return false;
	}
	if (!isfinite(v)) {
		diag_error(d, loc, "%s must be a finite number, got %g", key, v);
		return false;
	}
	if (fl->range == R_GT && fl->hi > 0 && v > lo && v > (double)fl->hi) {
		diag_error(d, loc, "%s must be in (%g, %g], got %g", key, lo, (double)fl->hi, v);
		return false;
	}
	if (fl->range == R_GT ? v > lo : v >= lo)
		return true;
	diag_error(d, loc, "%s must be %s %g, got %g", key, fl->range == R_GT ? ">" : ">=", lo, v);
	return false;
}

/* w: the word given (NULL: none, the consumer's default) */
static bool check_word(IrTrainField f, const char *w, const char *key, SrcLoc loc, Diag *d)
{
	const Field *fl = &fields[f];
	if (fl->range == R_PATH) {
		if (!w || *w)
			return true;
		diag_error(d, loc, "%s must be synthetic or a \"path\"", key);
		return false;
	}
	for (size_t i = 0; i < sizeof word_sets / sizeof word_sets[0]; i++) {
		if (word_sets[i].f != f)
			continue;
		if (!w && (fl->kind == TF_STR || fl->kind == TF_ENUM))
			return true;
		for (int k = 0; w && word_sets[i].words[k]; k++)
			if (strcmp(w, word_sets[i].words[k]) == 0)
				return true;
		diag_error(d, loc, "unknown %s '%s' (expected %s)", key, w ? w : "",
		           word_sets[i].expected);
		return false;
	}
	return true;
}

bool ir_train_check_field(const IrTrain *t, IrTrainField f, const char *key, SrcLoc loc,
                          Diag *d)
{
	if ((unsigned)f >= IR_TRAIN_COUNT)
		return true;
	const Field *fl = &fields[f];
	const char *p = (const char *)t + fl->off;
	if (!key)
		key = fl->key;
	switch (fl->range) {
	case R_INT:
		return check_int(fl, int_of(t, fl), key, loc, d);
	case R_GT:
	case R_GE:
	case R_UNIT:
	case R_OPEN:
		return check_real(fl, *(const double *)p, key, loc, d);
	case R_WORD:
	case R_PATH:
		return check_word(f, word_of(t, fl), key, loc, d);
	default:
		return true;
	}
}

bool ir_train_set_int(IrTrain *t, IrTrainField f, int64_t v, const char *key, SrcLoc loc,
                      Diag *d)
{
	const Field *fl = &fields[f];
	DTM_ASSERT((unsigned)f < IR_TRAIN_COUNT && (fl->kind == TF_I64 || fl->kind == TF_INT ||
	                                            fl->kind == TF_BOOL || fl->kind == TF_AXES));
	if (fl->range == R_INT && !check_int(fl, v, key ? key : fl->key, loc, d))
		return false;
	char *p = (char *)t + fl->off;
	if (fl->kind == TF_I64)
		*(int64_t *)p = v;
	else if (fl->kind == TF_INT)
		*(int *)p = (int)v; /* its range is within int (train.def) */
	else if (fl->kind == TF_AXES)
		*(uint32_t *)p = (uint32_t)v;
	else
		*(bool *)p = v != 0;
	t->loc[f] = loc;
	return true;
}

bool ir_train_set_real(IrTrain *t, IrTrainField f, double v, const char *key, SrcLoc loc,
                       Diag *d)
{
	const Field *fl = &fields[f];
	DTM_ASSERT((unsigned)f < IR_TRAIN_COUNT && fl->kind == TF_F64);
	if (!check_real(fl, v, key ? key : fl->key, loc, d))
		return false;
	*(double *)((char *)t + fl->off) = v;
	t->loc[f] = loc;
	return true;
}

bool ir_train_set_word(IrTrain *t, IrTrainField f, const char *w, const char *key, SrcLoc loc,
                       Diag *d)
{
	const Field *fl = &fields[f];
	DTM_ASSERT((unsigned)f < IR_TRAIN_COUNT &&
	           (fl->kind == TF_STR || fl->kind == TF_DTYPE || fl->kind == TF_ENUM));
	if (!check_word(f, w, key ? key : fl->key, loc, d))
		return false;
	char *p = (char *)t + fl->off;
	if (fl->kind == TF_DTYPE) {
		IrDtype dt = IR_F32;
		if (!w || !ir_dtype_lookup(w, &dt))
			return false; /* not reached: check_word knows the float dtypes */
		*(IrDtype *)p = dt;
	} else if (fl->kind == TF_ENUM) {
		const char *const *words = words_of(f);
		int v = 0; /* none: check_word took it */
		for (int k = 0; w && words[k]; k++)
			if (strcmp(w, words[k]) == 0)
				v = k + 1;
		*(int *)p = v;
	} else {
		*(const char **)p = w;
	}
	t->loc[f] = loc;
	return true;
}

/* The mixed-precision policy: gradients and the optimizer's weights are
 * kept in param_dtype or wider, so each is param_dtype or f32 (bf16 and
 * f16 hold values the other cannot: neither is wider).  A narrower reduce
 * would round every gradient of a wider param before it is summed, a
 * narrower master would round the weights the update runs on. */
static void check_policy(const IrTrain *t, Diag *d)
{
	const IrTrainField fs[2] = {IR_TRAIN_REDUCE_DTYPE, IR_TRAIN_MASTER_DTYPE};
	const IrDtype vs[2] = {t->reduce_dtype, t->master_dtype};
	const char *why[2] = {"gradients would be rounded below the params' precision",
	                      "the update would run on weights rounded below the params'"};
	IrDtype p = t->precision;
	for (int i = 0; i < 2; i++) {
		if (vs[i] == p || vs[i] == IR_F32 || (unsigned)p >= IR_DTYPE_COUNT)
			continue;
		SrcLoc at = t->loc[fs[i]].file ? t->loc[fs[i]] : t->loc[IR_TRAIN_PRECISION];
		diag_error(d, at, "%s %s with param_dtype %s: %s (use f32%s%s)",
		           ir_train_key(fs[i]), ir_dtype_name(vs[i]), ir_dtype_name(p), why[i],
		           p == IR_F32 ? "" : " or ", p == IR_F32 ? "" : ir_dtype_name(p));
	}
}

IrLossScale ir_train_loss_scale(const IrTrain *t)
{
	if (t->loss_scale == IR_LOSS_SCALE_NONE)
		return t->precision == IR_F16 ? IR_LOSS_SCALE_DYNAMIC : IR_LOSS_SCALE_OFF;
	return t->loss_scale;
}

bool ir_train_check(const IrTrain *t, Diag *d)
{
	int nerr = d->nerr;
	for (int f = 0; f < IR_TRAIN_COUNT; f++)
		ir_train_check_field(t, (IrTrainField)f, NULL, t->loc[f], d);
	bool sgd = t->optimizer == IR_OPTIMIZER_SGD;
	if (d->nerr == nerr && sgd && t->nesterov && !(t->momentum > 0))
		diag_error(d, t->loc[IR_TRAIN_NESTEROV].file ? t->loc[IR_TRAIN_NESTEROV]
		                                             : t->loc[IR_TRAIN_OPTIMIZER],
		           "nesterov needs a non-zero momentum");
	if (d->nerr == nerr)
		check_policy(t, d);
	return d->nerr == nerr;
}

/* Which argument a problem is about: 0, 1, or 2 for both. */
static const char *init_problem(IrInit init, double a, double b, char *buf, size_t cap,
                                int *which)
{
	bool normal = init == IR_INIT_NORMAL;
	if (!normal && init != IR_INIT_UNIFORM)
		return NULL;
	const char *n0 = normal ? "mean" : "lo", *n1 = normal ? "std" : "hi";
	*which = 0;
	if (!isfinite(a)) {
		snprintf(buf, cap, "%s must be a finite number, got %g", n0, a);
		return buf;
	}
	*which = 1;
	if (!isfinite(b)) {
		snprintf(buf, cap, "%s must be a finite number, got %g", n1, b);
		return buf;
	}
	if (normal && b < 0) {
		snprintf(buf, cap, "std must be >= 0, got %g", b);
		return buf;
	}
	*which = 2;
	if (!normal && a > b) {
		snprintf(buf, cap, "uniform needs lo <= hi, got (%g, %g)", a, b);
		return buf;
	}
	return NULL;
}

const char *ir_init_problem(IrInit init, double a, double b, char *buf, size_t cap)
{
	int which;
	return init_problem(init, a, b, buf, cap, &which);
}

bool ir_init_check(IrInit init, double a, double b, const SrcLoc at[3], Diag *d)
{
	char msg[128];
	int which = 0;
	if (!init_problem(init, a, b, msg, sizeof msg, &which))
		return true;
	diag_error(d, at[which], "%s", msg);
	return false;
}
