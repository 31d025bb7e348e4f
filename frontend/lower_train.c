/* lower_train.c - the train section of lowering, with the --train
 * overrides: each setting checked where it is read by the one check per
 * setting the IR text parser shares (ir/train.def, ir/validate.c), into the
 * module's train configuration.
 *
 * Part of lowering (lower.c calls into it; lower_impl.h is the shared
 * state).  Every problem is a diagnostic; the caller keeps going.
 */
#include "frontend/lower_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the train section ---- */

static const char *const train_keys[] = {
        "optimizer",    "lr_schedule",       "zero",      "reshard_after_forward",
        "microbatches", "schedule",          "precision", "steps",
        "data",         "sequence_parallel", "recompute", "uneven_shards",
        "bucket_mb",    "prefetch",          "seed",      "param_dtype",
        "reduce_dtype", "master_dtype",      "loss_scale", "init_scale",
        "growth_factor", "backoff_factor",   "growth_interval", "context_parallel", NULL,
};

/* param_dtype is precision's FSDP2 name: one setting, given once. */
static int train_key_slot(const char *k)
{
	if (!strcmp(k, "param_dtype"))
		k = "precision";
	for (int i = 0; train_keys[i]; i++)
		if (strcmp(train_keys[i], k) == 0)
			return i;
	return -1;
}

/* The word of a keyword-valued setting: `precision bf16`, `schedule 1f1b`. */
static const char *word_of(const AstNode *e)
{
	if (e && (e->kind == AST_IDENT || e->kind == AST_STR))
		return e->name;
	return NULL;
}

static bool set_bool(Lower *L, const AstNode *e, const char *key, bool *out)
{
	Value v = lower_expr(L, &L->globals, e);
	if (v.k == V_ERR)
		return false;
	if (v.k != V_BOOL) {
		diag_error(L->d, e->loc, "%s must be true or false, got %s", key,
		           lower_describe(L, v));
		return false;
	}
	*out = v.i != 0;
	return true;
}

static bool set_int(Lower *L, const AstNode *e, const char *key, int64_t lo, int64_t hi,
                    int64_t *out)
{
	int64_t v;
	if (!lower_const_int(L, &L->globals, e, key, &v))
		return false;
	if (v < lo || v > hi) {
		if (hi == INT64_MAX)
			diag_error(L->d, e->loc, "%s must be >= %lld, got %lld", key, (long long)lo,
			           (long long)v);
		else
			diag_error(L->d, e->loc, "%s must be between %lld and %lld, got %lld", key,
			           (long long)lo, (long long)hi, (long long)v);
		return false;
	}
	*out = v;
	return true;
}

/* The settings' values are evaluated here (they are expressions of the
 * language) and checked and stored by ir/validate.c, which IR text's
 * settings go through too: one range per setting (ir/train.def). */

/* An integer setting; `key` as the message names it (NULL: the setting's). */
static bool train_int(Lower *L, const AstNode *e, IrTrainField f, const char *key)
{
	int64_t v;
	if (!lower_const_int(L, &L->globals, e, key ? key : ir_train_key(f), &v))
		return false;
	return ir_train_set_int(&L->m->train, f, v, key, e->loc, L->d);
}

/* A real option such as lr = x, reported at the keyword argument. */
static void train_real(Lower *L, const AstNode *kw, IrTrainField f, const char *key)
{
	double v;
	if (!kw || !lower_const_num(L, &L->globals, kw->lhs, key, &v))
		return;
	ir_train_set_real(&L->m->train, f, v, key, kw->loc, L->d);
}

/* A real setting given as the setting's value: `init_scale 1024`. */
static void train_num(Lower *L, const AstNode *e, IrTrainField f)
{
	double v;
	if (lower_const_num(L, &L->globals, e, ir_train_key(f), &v))
		ir_train_set_real(&L->m->train, f, v, NULL, e->loc, L->d);
}

static void train_bool(Lower *L, const AstNode *e, IrTrainField f)
{
	bool b;
	if (set_bool(L, e, ir_train_key(f), &b))
		ir_train_set_int(&L->m->train, f, b, NULL, e->loc, L->d);
}

static void train_optimizer(Lower *L, const AstNode *e)
{
	IrTrain *t = &L->m->train;
	const char *name = e && (e->kind == AST_CALL || e->kind == AST_IDENT) ? e->name : NULL;
	static const char *const opts[] = {"adamw", "sgd", NULL};
	if (!ir_train_set_word(t, IR_TRAIN_OPTIMIZER, arena_strdup(L->a, lower_name(L, name)), NULL,
	                       e->loc, L->d)) {
		const char *s = name ? lower_suggest(name, opts, 2) : NULL;
		if (s)
			diag_note(L->d, e->loc, "did you mean '%s'?", lower_name(L, s));
		return;
	}
	if (e->kind != AST_CALL)
		return;
	bool adam = name[0] == 'a';
	static const char *const adam_kw[] = {"lr", "betas", "eps", "weight_decay", "clip", NULL};
	static const char *const sgd_kw[] = {"lr",           "momentum", "nesterov",
	                                     "weight_decay", "clip",     NULL};
	lower_check_kwargs(L, e, adam ? adam_kw : sgd_kw, name);
	int npos = 0;
	for (int i = 0; i < e->args.n; i++) {
		const AstNode *a = e->args.items[i];
		if (!a || a->kind == AST_KWARG)
			continue;
		/* the learning rate may be given positionally: adamw(3e-4) */
		if (npos++ == 0) {
			AstNode kw = *a;
			kw.kind = AST_KWARG;
			kw.lhs = (AstNode *)a;
			if (lower_kwarg(e, "lr"))
				diag_error(L->d, a->loc, "lr given twice");
			else
				train_real(L, &kw, IR_TRAIN_LR, "lr");
		} else {
			diag_error(L->d, a->loc,
			           "%s takes one positional argument (lr); name the others",
			           lower_name(L, name));
		}
	}
	train_real(L, lower_kwarg(e, "lr"), IR_TRAIN_LR, "lr");
	train_real(L, lower_kwarg(e, "weight_decay"), IR_TRAIN_WEIGHT_DECAY, "weight_decay");
	train_real(L, lower_kwarg(e, "clip"), IR_TRAIN_CLIP, "clip");
	if (adam) {
		train_real(L, lower_kwarg(e, "eps"), IR_TRAIN_EPS, "eps");
		const AstNode *kb = lower_kwarg(e, "betas");
		if (kb) {
			Value v = lower_expr(L, &L->globals, kb->lhs);
			if (v.k == V_ERR)
				return;
			if (v.k != V_TUPLE || v.n != 2 || v.items[0].k != V_NUM ||
			    v.items[1].k != V_NUM) {
				diag_error(L->d, kb->loc,
				           "betas must be a pair of numbers (b1, b2), got %s",
				           lower_describe(L, v));
				return;
			}
			if (ir_train_set_real(t, IR_TRAIN_BETA1, lower_num(v.items[0]), "betas", kb->loc,
			                      L->d))
				ir_train_set_real(t, IR_TRAIN_BETA2, lower_num(v.items[1]), "betas",
				                  kb->loc, L->d);
		}
	} else {
		train_real(L, lower_kwarg(e, "momentum"), IR_TRAIN_MOMENTUM, "momentum");
		const AstNode *kn = lower_kwarg(e, "nesterov");
		if (kn)
			train_bool(L, kn->lhs, IR_TRAIN_NESTEROV);
	}
}

static void train_lr_schedule(Lower *L, const AstNode *e)
{
	const char *name = e && (e->kind == AST_CALL || e->kind == AST_IDENT) ? e->name : NULL;
	if (!ir_train_set_word(&L->m->train, IR_TRAIN_LR_SCHEDULE,
	                       arena_strdup(L->a, lower_name(L, name)), NULL, e->loc, L->d))
		return;
	if (e->kind != AST_CALL)
		return;
	static const char *const none[] = {NULL};
	static const char *const cos_kw[] = {"warmup", "min_lr", NULL};
	bool cos = name[1] == 'o' && name[2] == 's';
	lower_check_kwargs(L, e, cos ? cos_kw : none, name);
	for (int i = 0; i < e->args.n; i++) {
		const AstNode *a = e->args.items[i];
		if (a && a->kind != AST_KWARG)
			diag_error(L->d, a->loc, "%s takes only keyword arguments",
			           lower_name(L, name));
	}
	if (!cos)
		return;
	const AstNode *kw = lower_kwarg(e, "warmup");
	if (kw)
		train_int(L, kw->lhs, IR_TRAIN_WARMUP, NULL);
	train_real(L, lower_kwarg(e, "min_lr"), IR_TRAIN_MIN_LR, "min_lr");
}

static void train_schedule(Lower *L, const AstNode *e)
{
	IrTrain *t = &L->m->train;
	const char *w = word_of(e);
	if (e->kind == AST_CALL && e->name && strcmp(e->name, "interleaved") == 0) {
		static const char *const none[] = {NULL};
		lower_check_kwargs(L, e, none, "interleaved");
		int npos = 0;
		const AstNode *arg = NULL;
		for (int i = 0; i < e->args.n; i++)
			if (e->args.items[i] && e->args.items[i]->kind != AST_KWARG && npos++ == 0)
				arg = e->args.items[i];
		if (npos != 1) {
			diag_error(L->d, e->loc,
			           "interleaved takes 1 argument (virtual stages per rank), got %d",
			           npos);
			return;
		}
		if (train_int(L, arg, IR_TRAIN_VIRTUAL_STAGES, "the number of virtual stages"))
			ir_train_set_word(t, IR_TRAIN_SCHEDULE, "interleaved", NULL, e->loc, L->d);
		return;
	}
	if (w && strcmp(w, "interleaved") == 0) {
		diag_error(
		        L->d, e->loc,
		        "interleaved needs the number of virtual stages per rank: interleaved(2)");
		return;
	}
	/* a call other than interleaved(v) names no schedule */
	const char *name = w ? w : e->kind == AST_CALL ? e->name : NULL;
	if (w && ir_train_set_word(t, IR_TRAIN_SCHEDULE, arena_strdup(L->a, w), NULL, e->loc,
	                           L->d)) {
		ir_train_set_int(t, IR_TRAIN_VIRTUAL_STAGES, 1, NULL, e->loc, L->d);
		return;
	}
	if (!w)
		diag_error(L->d, e->loc,
		           "unknown schedule '%s' (expected gpipe, 1f1b, interleaved(v) or zb)",
		           lower_name(L, name));
}

static void train_setting(Lower *L, const AstNode *s, const AstNode **seen)
{
	IrTrain *t = &L->m->train;
	int key = train_key_slot(s->name);
	if (key < 0) {
		diag_error(
		        L->d, s->loc,
		        "unknown train setting '%s' (known: optimizer, lr_schedule, "
		        "zero, reshard_after_forward, microbatches, schedule, precision, steps, "
		        "data, "
		        "sequence_parallel, recompute, uneven_shards, bucket_mb, prefetch, seed, "
		        "param_dtype, reduce_dtype, master_dtype, loss_scale, init_scale, "
		        "growth_factor, backoff_factor, growth_interval, context_parallel)",
		        lower_name(L, s->name));
		int n = 0;
		while (train_keys[n])
			n++;
		const char *sug = lower_suggest(s->name, train_keys, n);
		if (sug)
			diag_note(L->d, s->loc, "did you mean '%s'?", sug);
		return;
	}
	if (seen[key]) {
		diag_error(L->d, s->loc, "duplicate train setting '%s'", lower_name(L, s->name));
		diag_note(L->d, seen[key]->loc, "first set here");
		return;
	}
	seen[key] = s;
	const char *k = s->name;
	if (s->args.n != 1 || !s->args.items[0]) {
		if (s->args.n == 0)
			diag_error(L->d, s->loc, "train setting '%s' needs a value", k);
		else
			diag_error(L->d, s->loc, "train setting '%s' takes one value, got %d", k,
			           s->args.n);
		return;
	}
	if (s->nnames > 0 && strcmp(k, "zero") != 0) {
		diag_error(L->d, s->names[0].loc, "'over' is only allowed after 'zero'");
		return;
	}
	const AstNode *e = s->args.items[0];
	const char *w = word_of(e);
	int64_t iv;
	if (!strcmp(k, "optimizer")) {
		train_optimizer(L, e);
	} else if (!strcmp(k, "lr_schedule")) {
		train_lr_schedule(L, e);
	} else if (!strcmp(k, "zero")) {
		train_int(L, e, IR_TRAIN_ZERO, NULL);
		if (s->nnames > 0) {
			uint32_t mask;
			if (lower_axes_mask(L, s->names, s->nnames, &mask))
				ir_train_set_int(t, IR_TRAIN_ZERO_AXES, mask, NULL, s->names[0].loc, L->d);
		}
	} else if (!strcmp(k, "reshard_after_forward")) {
		train_bool(L, e, IR_TRAIN_RESHARD_AFTER_FORWARD);
	} else if (!strcmp(k, "microbatches")) {
		train_int(L, e, IR_TRAIN_MICROBATCHES, NULL);
	} else if (!strcmp(k, "schedule")) {
		train_schedule(L, e);
	} else if (!strcmp(k, "precision") || !strcmp(k, "param_dtype")) {
		ir_train_set_word(t, IR_TRAIN_PRECISION, arena_strdup(L->a, lower_name(L, w)), k,
		                  e->loc, L->d);
	} else if (!strcmp(k, "reduce_dtype")) {
		ir_train_set_word(t, IR_TRAIN_REDUCE_DTYPE, arena_strdup(L->a, lower_name(L, w)), k,
		                  e->loc, L->d);
	} else if (!strcmp(k, "master_dtype")) {
		ir_train_set_word(t, IR_TRAIN_MASTER_DTYPE, arena_strdup(L->a, lower_name(L, w)), k,
		                  e->loc, L->d);
	} else if (!strcmp(k, "steps")) {
		train_int(L, e, IR_TRAIN_STEPS, NULL);
	} else if (!strcmp(k, "data")) {
		/* synthetic, or a string (a path); the check refuses the empty one */
		if (e->kind == AST_IDENT && w && !strcmp(w, "synthetic"))
			ir_train_set_word(t, IR_TRAIN_DATA, "synthetic", NULL, e->loc, L->d);
		else if (e->kind == AST_STR && w)
			ir_train_set_word(t, IR_TRAIN_DATA, arena_strdup(L->a, w), NULL, e->loc, L->d);
		else
			diag_error(L->d, e->loc, "data must be synthetic or a \"path\"");
	} else if (!strcmp(k, "sequence_parallel")) {
		train_bool(L, e, IR_TRAIN_SEQUENCE_PARALLEL);
		/* its warning (it changes nothing) points at the whole setting */
		if (t->loc[IR_TRAIN_SEQUENCE_PARALLEL].file)
			t->loc[IR_TRAIN_SEQUENCE_PARALLEL] = s->loc;
	} else if (!strcmp(k, "recompute")) {
		/* true, false, or layer: the whole block's forward again */
		if (e->kind == AST_IDENT && w && !strcmp(w, "layer")) {
			ir_train_set_int(t, IR_TRAIN_RECOMPUTE, 1, NULL, e->loc, L->d);
			ir_train_set_word(t, IR_TRAIN_RECOMPUTE_SCOPE, "layer", NULL, e->loc, L->d);
		} else {
			Value v = lower_expr(L, &L->globals, e);
			if (v.k == V_BOOL)
				ir_train_set_int(t, IR_TRAIN_RECOMPUTE, v.i != 0, NULL, e->loc, L->d);
			else if (v.k != V_ERR)
				diag_error(L->d, e->loc, "recompute must be true, false or layer, got %s",
				           lower_describe(L, v));
		}
		if (t->loc[IR_TRAIN_RECOMPUTE].file)
			t->loc[IR_TRAIN_RECOMPUTE] = s->loc;
	} else if (!strcmp(k, "uneven_shards")) {
		train_bool(L, e, IR_TRAIN_UNEVEN_SHARDS);
		L->uneven_loc = s->loc;
	} else if (!strcmp(k, "bucket_mb")) {
		/* the .dtm's unit: MB, up to bucket_bytes' 2^40 */
		if (set_int(L, e, k, 0, (int64_t)1 << 20, &iv))
			ir_train_set_int(t, IR_TRAIN_BUCKET_BYTES, iv << 20, k, e->loc, L->d);
	} else if (!strcmp(k, "prefetch")) {
		train_int(L, e, IR_TRAIN_PREFETCH, NULL);
	} else if (!strcmp(k, "seed")) {
		train_int(L, e, IR_TRAIN_SEED, NULL);
	} else if (!strcmp(k, "loss_scale")) {
		ir_train_set_word(t, IR_TRAIN_LOSS_SCALE, arena_strdup(L->a, lower_name(L, w)), NULL,
		                  e->loc, L->d);
	} else if (!strcmp(k, "context_parallel")) {
		ir_train_set_word(t, IR_TRAIN_CONTEXT_PARALLEL, arena_strdup(L->a, lower_name(L, w)),
		                  NULL, e->loc, L->d);
		/* its warning (no sequence split) points at the whole setting */
		if (t->loc[IR_TRAIN_CONTEXT_PARALLEL].file)
			t->loc[IR_TRAIN_CONTEXT_PARALLEL] = s->loc;
	} else if (!strcmp(k, "init_scale")) {
		train_num(L, e, IR_TRAIN_INIT_SCALE);
	} else if (!strcmp(k, "growth_factor")) {
		train_num(L, e, IR_TRAIN_GROWTH_FACTOR);
	} else if (!strcmp(k, "backoff_factor")) {
		train_num(L, e, IR_TRAIN_BACKOFF_FACTOR);
	} else if (!strcmp(k, "growth_interval")) {
		train_int(L, e, IR_TRAIN_GROWTH_INTERVAL, NULL);
	}
}

/* Re-reports the diagnostics a --train override produced into a private
 * Diag (printed there without a location: the setting's text has no file)
 * as `<command line>: error: --train TEXT: message`. */
/* Field by field: a SrcLoc's padding is not initialised (memcmp read it). */
static bool srcloc_same(SrcLoc a, SrcLoc b)
{
	return a.file == b.file && a.line == b.line && a.col == b.col && a.end_col == b.end_col;
}

static void forward_train_diags(Lower *L, const char *text, const char *buf, int nerr)
{
	static const char err[] = "dtmc: error: ", note[] = "dtmc: note: ";
	int forwarded = 0;
	for (const char *p = buf; p && *p;) {
		const char *e = strchr(p, '\n');
		int n = e ? (int)(e - p) : (int)strlen(p);
		if (!strncmp(p, err, sizeof err - 1)) {
			diag_error(L->d, lower_cmdline, "--train %s: %.*s", text,
			           n - (int)(sizeof err - 1), p + sizeof err - 1);
			forwarded++;
		} else if (!strncmp(p, note, sizeof note - 1) && forwarded > 0 &&
		           !strstr(p, "too many errors")) {
			diag_note(L->d, lower_cmdline, "%.*s", n - (int)(sizeof note - 1),
			          p + sizeof note - 1);
		}
		p = e ? e + 1 : NULL;
	}
	if (nerr > 0 && forwarded == 0)
		diag_error(L->d, lower_cmdline, "--train %s: bad setting", text);
}

static bool is_ident(const char *s, size_t n)
{
	if (n == 0 || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

/* --train KEY=VALUE: parsed as the one-setting section `train { KEY VALUE }`
 * with the parser, then checked by train_setting exactly like a setting of
 * the file, so the keys, value syntax and limits are the same.  The setting
 * replaces the file's (each override gets a fresh `seen`). */
static void train_override(Lower *L, const char *text)
{
	const char *eq = strchr(text, '='), *key = text;
	while (*key == ' ' || *key == '\t')
		key++;
	size_t kn = eq && eq > key ? (size_t)(eq - key) : 0;
	while (kn > 0 && (key[kn - 1] == ' ' || key[kn - 1] == '\t'))
		kn--;
	if (!eq || !is_ident(key, kn)) {
		diag_error(L->d, lower_cmdline,
		           "--train %s: expected KEY=VALUE, VALUE as in the train section "
		           "(--train zero=3, --train \"zero=3 over dp\")",
		           text);
		return;
	}
	const char *v = eq + 1;
	while (*v == ' ' || *v == '\t')
		v++;
	if (!*v) {
		diag_error(L->d, lower_cmdline, "--train %s: train setting '%.*s' needs a value",
		           text, (int)kn, key);
		return;
	}
	SrcFile *src = arena_alloc(L->a, sizeof *src);
	char *body = arena_printf(L->a, "train {\n%.*s %s\n}\n", (int)kn, key, v);
	char *buf = NULL;
	size_t blen = 0;
	FILE *mem = src && body ? open_memstream(&buf, &blen) : NULL;
	if (!mem) {
		diag_error(L->d, lower_cmdline, "--train %s: out of memory", text);
		return;
	}
	src->name = NULL; /* locations print as none: forward_train_diags names the text */
	src->text = body;
	src->len = strlen(body);
	Diag sub;
	diag_init(&sub, mem);
	AstFile f;
	if (ast_parse(L->a, &sub, src, &f)) {
		const AstNode *t = f.items.n == 1 ? f.items.items[0] : NULL;
		const AstNode *s =
		        t && t->kind == AST_TRAIN && t->body.n == 1 ? t->body.items[0] : NULL;
		if (!s || s->kind != AST_SETTING || !s->name) {
			diag_error(&sub, (SrcLoc){0}, "expected one setting");
		} else {
			const AstNode *seen[sizeof train_keys / sizeof train_keys[0]] = {0};
			Diag *saved = L->d;
			SrcLoc before[IR_TRAIN_COUNT];
			memcpy(before, L->m->train.loc, sizeof before);
			L->d = &sub;
			train_setting(L, s, seen);
			L->d = saved;
			/* what the override set was given on the command line */
			for (int f = 0; f < IR_TRAIN_COUNT; f++)
				if (!srcloc_same(before[f], L->m->train.loc[f]))
					L->m->train.loc[f] = lower_cmdline;
			if (!strcmp(s->name, "uneven_shards"))
				L->uneven_loc = lower_cmdline;
		}
	}
	fclose(mem);
	forward_train_diags(L, text, buf, sub.nerr);
	free(buf);
}

void lower_train(Lower *L, const AstNode *train)
{
	IrTrain *t = &L->m->train;
	int nerr0 = L->d->nerr;
	const Mesh *mesh = &L->m->mesh;
	/* ZeRO shards over dp when there is one, else over the first axis
	 * that is not the pipeline's (none: nothing to shard over) */
	int dp = mesh_axis_index(mesh, "dp");
	if (dp < 0)
		dp = L->m->pp_axis == 0 ? (mesh->naxes > 1 ? 1 : -1) : (mesh->naxes > 0 ? 0 : -1);
	t->zero_axes = dp >= 0 ? 1u << dp : 0u;
	const AstNode *seen[sizeof train_keys / sizeof train_keys[0]] = {0};
	for (int i = 0; train && i < train->body.n; i++) {
		const AstNode *s = train->body.items[i];
		if (!s || s->kind != AST_SETTING || !s->name) {
			if (s)
				diag_error(L->d, s->loc, "expected a train setting");
			continue;
		}
		train_setting(L, s, seen);
	}
	for (int i = 0; L->opt && i < L->opt->ntrain && i < LOWER_MAX_TRAIN; i++)
		train_override(L, L->opt->train[i] ? L->opt->train[i] : "");
	/* what the settings ask of each other, as IR text's are checked */
	if (L->d->nerr == nerr0)
		ir_train_check(t, L->d);
	L->train_seen = true;
}

bool lower_apply_options(Arena *a, Diag *d, IrModule *m, const LowerOptions *opt)
{
	Lower L = {.a = a, .d = d, .m = m, .opt = opt, .stage = -1, .block = -1, .unit = -1};
	int nerr0 = d->nerr;
	if (opt->ndefines > 0)
		diag_error(d, lower_cmdline, "-D %s: -D sets a .dtm model's constants; this model "
		           "has none (use --mesh and --train)", opt->define_names[0]);
	if (opt->mesh)
		lower_mesh_opt(&L, opt->mesh);
	for (int i = 0; i < opt->ntrain && i < LOWER_MAX_TRAIN; i++)
		train_override(&L, opt->train[i] ? opt->train[i] : "");
	if (d->nerr == nerr0 && opt->ntrain > 0)
		ir_train_check(&m->train, d);
	return d->nerr == nerr0;
}
