/* emit_common.c - writers the C and CUDA code generators share (see
 * emit_common.h).  Pure functions of the IR and the fusion plan: what a
 * back end spells its own way comes in a CgExprDialect.
 */
#include "codegen/emit_common.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- literals ---- */

void cg_put_float(FILE *out, double v, bool f32, const char *nan, const char *inf)
{
	if (nan && isnan(v)) {
		fputs(nan, out);
		return;
	}
	if (inf && isinf(v)) {
		fprintf(out, "%s%s", v > 0 ? "" : "-", inf);
		return;
	}
	char buf[64];
	snprintf(buf, sizeof buf, f32 ? "%.9g" : "%.17g", v);
	fputs(buf, out);
	/* 'n': inf and nan are left as printed, not made "inf.0" */
	if (!strpbrk(buf, ".eEn"))
		fputs(".0", out);
	if (f32)
		fputc('f', out);
}

/* ---- broadcasting in a fused loop ---- */

void cg_bcast_shape(const IrNode *x, const IrNode *s, int64_t *xs)
{
	for (int d = 0; d < s->rank; d++) {
		int j = d - (s->rank - x->rank);
		xs[d] = j >= 0 ? x->shape[j] : 1;
	}
}

CgBcast cg_bcast_kind(const IrNode *x, const IrNode *s, int64_t *period)
{
	int R = s->rank;
	int64_t xs[IR_MAX_RANK];
	cg_bcast_shape(x, s, xs);
	int64_t nx = ir_node_numel(x), ns = ir_node_numel(s);
	*period = 1;
	if (nx == ns)
		return CG_BC_FULL;
	if (nx == 1)
		return CG_BC_SCALAR;
	int k = 0;
	while (k < R && xs[k] == 1)
		k++;
	bool suffix = true;
	for (int d = k; d < R; d++)
		suffix &= xs[d] == s->shape[d];
	if (suffix) {
		*period = nx;
		return CG_BC_SUFFIX;
	}
	int p = R;
	while (p > 0 && xs[p - 1] == 1)
		p--;
	bool prefix = true;
	for (int d = 0; d < p; d++)
		prefix &= xs[d] == s->shape[d];
	if (prefix) {
		*period = ns / nx;
		return CG_BC_PREFIX;
	}
	return CG_BC_OTHER;
}

/* ---- fused elementwise members ---- */

/* Declares gID, the index dropout n's element i draws (ir/dropout.c):
 * ir_dropout_index's arithmetic, the shard offsets read from the rank's
 * mesh coordinates.  False when that index is i itself. */
static bool put_dropout_index(FILE *out, const char *indent, const CgExprDialect *dl,
                              const IrModule *m, const IrNode *n)
{
	IrDropKey k;
	if (!ir_dropout_key(m, n, true, NULL, &k))
		return false;
	fprintf(out, "%s%s g%d = 0;\n%s{\n%s\t%s q_ = i, c_;\n", indent, dl->i64, n->id, indent,
	        indent, dl->i64);
	for (int j = k.rank - 1; j >= 0; j--) {
		fprintf(out, "%s\tc_ = q_", indent);
		if (j > 0) /* dim 0 is q_ whole */
			fprintf(out, " %% %lldLL", (long long)k.local[j]);
		if (k.parts[j] > 1) {
			fputs(" + (", out);
			bool first = true;
			for (int a = 0; a < ir_place(m, n)->naxes[j]; a++) {
				int ax = ir_place(m, n)->axes[j][a];
				if (ax >= m->mesh.naxes)
					continue;
				if (first)
					fprintf(out, "%s[%d]", dl->coords, ax);
				else
					fprintf(out, " * %lldLL + %s[%d]", (long long)m->mesh.sizes[ax],
					        dl->coords, ax);
				first = false;
			}
			fprintf(out, "%s) * %lldLL", first ? "0" : "", (long long)k.local[j]);
		}
		fputs(";\n", out);
		if (j > 0)
			fprintf(out, "%s\tq_ /= %lldLL;\n", indent, (long long)k.local[j]);
		if (j == k.bdim && k.inner == 1)
			fprintf(out, "%s\tc_ = c_ * %lldLL + %lldLL;\n", indent, (long long)k.mbs,
			        (long long)k.mb);
		else if (j == k.bdim)
			fprintf(out, "%s\tc_ = (c_ / %lldLL * %lldLL + %lldLL) * %lldLL + c_ %% %lldLL;\n",
			        indent, (long long)k.inner, (long long)k.mbs, (long long)k.mb,
			        (long long)k.inner, (long long)k.inner);
		fprintf(out, "%s\tg%d += c_ * %lldLL;\n", indent, n->id, (long long)k.stride[j]);
	}
	fprintf(out, "%s}\n", indent);
	return true;
}

bool cg_put_ew_member(FILE *out, const char *indent, const CgExprDialect *dl, const IrModule *m,
                      const FusePlan *fp, const IrNode *n, int root, const int *ext, int next,
                      Diag *d)
{
	bool keyed = n->op == IR_OP_DROPOUT && put_dropout_index(out, indent, dl, m, n);
	char a[2][32];
	for (int k = 0; k < n->nops && k < 2; k++) {
		int o = n->ops[k];
		if (root >= 0 && fp->root[o] == root && fp->internal[o]) {
			snprintf(a[k], sizeof a[k], "t%d", o);
			continue;
		}
		int j = 0;
		while (j < next && ext[j] != o)
			j++;
		snprintf(a[k], sizeof a[k], "x%d", j);
	}
	fprintf(out, "%sconst float t%d = ", indent, n->id);
	/* a 16-bit member inside the group is rounded to its dtype, as its own
	 * kernel would store it: fusing changes no value (a value recompute
	 * frees of its other uses is fused; it must round as before) */
	const char *narrow = root < 0 || n->id == root || n->op == IR_OP_CAST ? NULL :
	                     n->dtype == IR_BF16                              ? "round_bf16" :
	                     n->dtype == IR_F16                               ? "round_f16" :
	                                                                        NULL;
	if (narrow)
		fprintf(out, "%s%s%s(", dl->prefix, narrow, dl->suffix);
	const char *fn = NULL, *lib = NULL; /* a call fn(a0), or of the library's lib */
	switch (n->op) {
	case IR_OP_ADD: fprintf(out, "%s + %s", a[0], a[1]); break;
	case IR_OP_SUB: fprintf(out, "%s - %s", a[0], a[1]); break;
	case IR_OP_MUL: fprintf(out, "%s * %s", a[0], a[1]); break;
	case IR_OP_DIV: fprintf(out, "%s / %s", a[0], a[1]); break;
	case IR_OP_NEG: fprintf(out, "-%s", a[0]); break;
	case IR_OP_RSQRT: fprintf(out, "1.0f / sqrtf(%s)", a[0]); break;
	case IR_OP_EXP: fn = "expf"; break;
	case IR_OP_LOG: fn = "logf"; break;
	case IR_OP_SQRT: fn = "sqrtf"; break;
	case IR_OP_TANH: fn = "tanhf"; break;
	case IR_OP_RELU: lib = "relu"; break;
	case IR_OP_GELU: lib = "gelu"; break;
	case IR_OP_SILU: lib = "silu"; break;
	case IR_OP_SIGMOID: lib = "sigmoid"; break;
	case IR_OP_SCALE:
		fprintf(out, "%s * ", a[0]);
		dl->put_f32(out, ir_attr_scalar(n)->value);
		break;
	case IR_OP_CAST:
		if (n->dtype == IR_BF16)
			lib = "round_bf16";
		else if (n->dtype == IR_F16)
			lib = "round_f16";
		else if (n->dtype == IR_I32)
			fprintf(out, "(float)%s%s", dl->to_int, a[0]);
		else
			fprintf(out, "%s", a[0]);
		break;
	case IR_OP_DROPOUT:
		fprintf(out, "%sdropout%s(%s, %s, ", dl->prefix, dl->suffix, dl->ctx, a[0]);
		dl->put_f32(out, ir_attr_dropout(n)->rate);
		fprintf(out, ", %uu, ", (unsigned)(uint32_t)ir_attr_dropout(n)->salt);
		if (keyed)
			fprintf(out, "g%d)", n->id);
		else
			fputs("i)", out);
		break;
	default:
		diag_internal(d, n->loc, "no %s expression for elementwise op '%s'",
		           dl->name, ir_op_name(n->op));
		return false;
	}
	if (fn)
		fprintf(out, "%s(%s)", fn, a[0]);
	if (lib)
		fprintf(out, "%s%s%s(%s)", dl->prefix, lib, dl->suffix, a[0]);
	fputs(narrow ? ");\n" : ";\n", out);
	return true;
}

/* ---- one function per distinct kernel ---- */

static bool ident_char(char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

char *cg_canon_text(Arena *a, const char *s, size_t n, const char *name, size_t *outn)
{
	size_t cap = 2 * n + 16;
	char *o = arena_alloc(a, cap);
	if (!o)
		return NULL;
	size_t k = 0, ln = name ? strlen(name) : 0;
	int ids[256], nids = 0; /* node ids seen, in order (a fused group is small) */
	for (size_t i = 0; i < n;) {
		if (name && s[i] == '/' && i + 1 < n && s[i + 1] == '*') { /* a comment: out */
			const char *e = strstr(s + i + 2, "*/");
			i = e ? (size_t)(e - s) + 2 : n;
			continue;
		}
		char c = s[i];
		if (!ident_char(c)) {
			o[k++] = s[i++];
			continue;
		}
		size_t j = i + 1;
		while (j < n && (ident_char(s[j]) || s[j] == '.'))
			j++;
		if (ln && j - i == ln && memcmp(s + i, name, ln) == 0) {
			memcpy(o + k, "@K", 2);
			k += 2;
			i = j;
			continue;
		}
		bool var = (c == 't' || c == 'g') && j - i > 1 && j - i < 12;
		for (size_t q = i + 1; var && q < j; q++)
			var = s[q] >= '0' && s[q] <= '9';
		int ord = -1;
		if (var) {
			int id = atoi(s + i + 1);
			for (int q = 0; q < nids && ord < 0; q++)
				if (ids[q] == id)
					ord = q;
			if (ord < 0 && nids < (int)(sizeof ids / sizeof ids[0])) {
				ids[nids] = id;
				ord = nids++;
			}
		}
		if (ord >= 0) {
			k += (size_t)snprintf(o + k, cap - k, "%c%d", c, ord);
		} else {
			memcpy(o + k, s + i, j - i);
			k += j - i;
		}
		i = j;
	}
	o[k] = 0;
	*outn = k;
	return o;
}

struct CgKeySet {
	int cap, n;
	int *slot; /* -> entry, -1 empty */
	const char **key;
	size_t *len;
	uint64_t *hash;
};

CgKeySet *cg_keyset_new(Arena *a, int n)
{
	CgKeySet *ks = arena_alloc(a, sizeof *ks);
	if (!ks)
		return NULL;
	ks->cap = 16;
	while (ks->cap < 2 * n)
		ks->cap *= 2;
	ks->n = 0;
	ks->slot = arena_alloc(a, sizeof *ks->slot * (size_t)ks->cap);
	ks->key = arena_alloc(a, sizeof *ks->key * (size_t)ks->cap);
	ks->len = arena_alloc(a, sizeof *ks->len * (size_t)ks->cap);
	ks->hash = arena_alloc(a, sizeof *ks->hash * (size_t)ks->cap);
	if (!ks->slot || !ks->key || !ks->len || !ks->hash)
		return NULL;
	for (int q = 0; q < ks->cap; q++)
		ks->slot[q] = -1;
	return ks;
}

int cg_keyset_add(CgKeySet *ks, const char *key, size_t len, bool *added)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
	int q = (int)(h & (uint64_t)(ks->cap - 1));
	for (; ks->slot[q] >= 0; q = (q + 1) & (ks->cap - 1)) {
		int e = ks->slot[q];
		if (ks->hash[e] == h && ks->len[e] == len && memcmp(ks->key[e], key, len) == 0) {
			*added = false;
			return e;
		}
	}
	int e = ks->n++;
	ks->key[e] = key;
	ks->len[e] = len;
	ks->hash[e] = h;
	ks->slot[q] = e;
	*added = true;
	return e;
}

/* ---- kernel libraries ---- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int cg_list_dir(const char *dir, const char *prefix, const char *suffix, char **names, int cap)
{
	DIR *dp = opendir(dir);
	if (!dp)
		return -1;
	size_t lp = strlen(prefix), ls = strlen(suffix);
	int nn = 0;
	for (struct dirent *de; nn < cap && (de = readdir(dp));) {
		size_t len = strlen(de->d_name);
		if (len > ls && strncmp(de->d_name, prefix, lp) == 0 &&
		    strcmp(de->d_name + len - ls, suffix) == 0)
			names[nn++] = strdup(de->d_name);
	}
	closedir(dp);
	qsort(names, (size_t)nn, sizeof names[0], cmp_str);
	return nn;
}

/* ---- the generic kernels' attributes ---- */

_Static_assert(IR_MAX_INTS == 8, "DtmkArgs.ints holds 8");

void cg_kernel_attrs(const IrNode *n, CgKernelAttrs *k)
{
	memset(k, 0, sizeof *k);
	IrAttrKind kind = ir_op_attr_kind(n->op);
	const IrAttr *a = ir_attr_get(n, kind);
	switch (kind) {
	case IR_ATTR_NONE:
	case IR_ATTR_KIND_COUNT:
		break;
	case IR_ATTR_INIT:
		k->f[0] = a->init.arg[0];
		k->f[1] = a->init.arg[1];
		break;
	case IR_ATTR_SCALAR:
		k->f[0] = a->scalar.value;
		break;
	case IR_ATTR_AXES:
		k->nints = a->axes.n;
		memcpy(k->ints, a->axes.axes, sizeof a->axes.axes);
		k->flag = a->axes.keepdims;
		break;
	case IR_ATTR_AXIS:
		k->nints = 1;
		k->ints[0] = a->axis.axis;
		break;
	case IR_ATTR_EPS:
		k->f[0] = a->eps.eps;
		break;
	case IR_ATTR_PERM:
		k->nints = a->perm.n;
		memcpy(k->ints, a->perm.perm, sizeof a->perm.perm);
		break;
	case IR_ATTR_SLICE:
		k->nints = 3;
		k->ints[0] = a->slice.axis;
		k->ints[1] = a->slice.start;
		k->ints[2] = a->slice.end;
		break;
	case IR_ATTR_ATTN:
		k->nints = 4;
		k->ints[0] = a->attn.heads;
		k->ints[1] = a->attn.causal;
		k->ints[2] = ir_attn_kv_heads(&a->attn);
		k->ints[3] = a->attn.window;
		k->mesh_axes = a->attn.head_axes | a->attn.head_minor << CG_AXES_MINOR;
		if (a->attn.ring) { /* ring attention's blocks (dtmk_ring.h) */
			k->nints = 7;
			k->ints[4] = a->attn.ring;
			k->ints[5] = a->attn.step;
			k->ints[6] = a->attn.balanced;
			if (a->attn.seq) { /* uneven blocks: keys past it are padding */
				k->nints = 9;
				k->ints[8] = a->attn.seq;
			}
		}
		if (a->attn.lse) { /* the rows' log-sum-exps (dtmk_fwd.h, dtmk_bwd.h) */
			k->nints = k->nints > 8 ? k->nints : 8;
			k->ints[7] = 1;
		}
		break;
	case IR_ATTR_DROPOUT:
		k->f[0] = a->dropout.rate;
		k->nints = a->dropout.has_mb ? 5 : 1;
		k->ints[0] = a->dropout.salt;
		if (a->dropout.has_mb) {
			k->ints[1] = a->dropout.mbs;
			k->ints[2] = a->dropout.mb;
			k->ints[3] = a->dropout.bdim;
			k->ints[4] = a->dropout.binner;
		}
		break;
	case IR_ATTR_COLL:
		k->mesh_axes = a->coll.axes;
		k->red = a->coll.red;
		k->nints = a->coll.n;
		memcpy(k->ints, a->coll.args, sizeof a->coll.args);
		break;
	case IR_ATTR_OPTIM:
		k->fx[0] = n->op == IR_OP_SGD_STEP ? a->optim.momentum : a->optim.beta1;
		k->fx[1] = a->optim.beta2;
		k->fx[2] = a->optim.eps;
		k->fx[3] = a->optim.weight_decay;
		k->fx[4] = a->optim.clip;
		k->flag = a->optim.master;
		if (n->op == IR_OP_SGD_STEP) {
			k->nints = 1;
			k->ints[0] = a->optim.nesterov;
		}
		break;
	case IR_ATTR_ROPE:
		k->nints = 2;
		k->ints[0] = a->rope.heads;
		k->ints[1] = a->rope.inverse;
		k->f[0] = a->rope.theta;
		k->mesh_axes = a->rope.axes;
		break;
	case IR_ATTR_ROUTE:
		k->nints = 3;
		k->ints[0] = a->route.k;
		k->ints[1] = a->route.n;
		k->ints[2] = a->route.capacity;
		if (n->op == IR_OP_MOE_SLOT) { /* the load statistics' site and replicas */
			k->nints = 4;
			k->ints[3] = a->route.stats;
			k->mesh_axes = a->route.replicas;
		}
		break;
	}
}
