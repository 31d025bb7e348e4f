/* ir.c - the op table, the name tables, modules and nodes.
 *
 * Every table here is generated from ops.def or checked against its enum
 * with a static_assert, so adding an op or a dtype without its name fails
 * to compile rather than printing garbage.
 */
#include "ir/ir.h"

#include <inttypes.h>
#include <assert.h>
#include <string.h>

/* ---- op table ---- */

typedef struct OpInfo {
	const char *name;
	int min_ops, max_ops;
	IrAttrKind attr;
	unsigned flags;
} OpInfo;

static const OpInfo op_info[] = {
#define IR_OP(e, name, mn, mx, ak, fl) [IR_OP_##e] = {name, mn, mx, ak, fl},
#include "ir/ops.def"
#undef IR_OP
};
static_assert(sizeof op_info / sizeof op_info[0] == IR_OP_COUNT,
              "op_info must have one entry per op in ops.def");

static bool op_valid(IrOp op)
{
	return (unsigned)op < IR_OP_COUNT;
}

const char *ir_op_name(IrOp op)
{
	return op_valid(op) ? op_info[op].name : "?";
}

int ir_op_min_operands(IrOp op)
{
	return op_valid(op) ? op_info[op].min_ops : 0;
}

int ir_op_max_operands(IrOp op)
{
	return op_valid(op) ? op_info[op].max_ops : 0;
}

IrAttrKind ir_op_attr_kind(IrOp op)
{
	return op_valid(op) ? op_info[op].attr : IR_ATTR_NONE;
}

unsigned ir_op_flags(IrOp op)
{
	return op_valid(op) ? op_info[op].flags : 0;
}

bool ir_op_lookup(const char *name, IrOp *out)
{
	for (int i = 0; i < IR_OP_COUNT; i++)
		if (strcmp(op_info[i].name, name) == 0) {
			*out = (IrOp)i;
			return true;
		}
	return false;
}

/* ---- dtype, role, reduction and init names ---- */

static const char *const dtype_names[] = {
	[IR_F32] = "f32", [IR_BF16] = "bf16", [IR_F16] = "f16", [IR_I32] = "i32",
};
static_assert(sizeof dtype_names / sizeof dtype_names[0] == IR_DTYPE_COUNT,
              "dtype_names must name every IrDtype");
static const int dtype_sizes[] = {
	[IR_F32] = 4, [IR_BF16] = 2, [IR_F16] = 2, [IR_I32] = 4,
};
static_assert(sizeof dtype_sizes / sizeof dtype_sizes[0] == IR_DTYPE_COUNT,
              "dtype_sizes must size every IrDtype");

static const char *const role_names[] = {
	[IR_ROLE_ACT] = "act",
	[IR_ROLE_PARAM] = "param",
	[IR_ROLE_INPUT] = "input",
	[IR_ROLE_LOSS] = "loss",
	[IR_ROLE_GRAD] = "grad",
	[IR_ROLE_OPT_STATE] = "opt_state",
};
static_assert(sizeof role_names / sizeof role_names[0] == IR_ROLE_COUNT,
              "role_names must name every IrRole");

static const char *const red_names[] = {
	[IR_RED_SUM] = "sum", [IR_RED_AVG] = "avg", [IR_RED_MAX] = "max",
};
static_assert(sizeof red_names / sizeof red_names[0] == IR_RED_COUNT,
              "red_names must name every IrRed");

static const char *const init_names[] = {
	[IR_INIT_NONE] = "none",
	[IR_INIT_ZEROS] = "zeros",
	[IR_INIT_ONES] = "ones",
	[IR_INIT_NORMAL] = "normal",
	[IR_INIT_UNIFORM] = "uniform",
};
static_assert(sizeof init_names / sizeof init_names[0] == IR_INIT_UNIFORM + 1,
              "init_names must name every IrInit");

static bool lookup(const char *const *names, int n, const char *name, int *out)
{
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0) {
			*out = i;
			return true;
		}
	return false;
}

const char *ir_dtype_name(IrDtype t)
{
	return (unsigned)t < IR_DTYPE_COUNT ? dtype_names[t] : "?";
}

bool ir_dtype_lookup(const char *name, IrDtype *out)
{
	int i;
	if (!lookup(dtype_names, IR_DTYPE_COUNT, name, &i))
		return false;
	*out = (IrDtype)i;
	return true;
}

int ir_dtype_size(IrDtype t)
{
	return (unsigned)t < IR_DTYPE_COUNT ? dtype_sizes[t] : 0;
}

IrDtype ir_dtype_promote(IrDtype a, IrDtype b)
{
	/* bf16 and f16 each hold what the other cannot (range, precision):
	 * only f32 holds both, as torch.promote_types(bfloat16, float16) */
	return a == b ? a : IR_F32;
}

IrDtype ir_dtype_accum(IrDtype t)
{
	return t == IR_BF16 || t == IR_F16 ? IR_F32 : t;
}

const char *ir_role_name(IrRole r)
{
	return (unsigned)r < IR_ROLE_COUNT ? role_names[r] : "?";
}

bool ir_role_lookup(const char *name, IrRole *out)
{
	int i;
	if (!lookup(role_names, IR_ROLE_COUNT, name, &i))
		return false;
	*out = (IrRole)i;
	return true;
}

const char *ir_red_name(IrRed r)
{
	return (unsigned)r < IR_RED_COUNT ? red_names[r] : "?";
}

bool ir_red_lookup(const char *name, IrRed *out)
{
	int i;
	if (!lookup(red_names, IR_RED_COUNT, name, &i))
		return false;
	*out = (IrRed)i;
	return true;
}

const char *ir_init_name(IrInit i)
{
	return (unsigned)i <= IR_INIT_UNIFORM ? init_names[i] : "?";
}

/* ---- modules and nodes ---- */

void ir_train_defaults(IrTrain *t)
{
	memset(t, 0, sizeof *t);
	t->optimizer = IR_OPTIMIZER_ADAMW;
	t->lr = 3e-4;
	t->beta1 = 0.9;
	t->beta2 = 0.999;
	t->eps = 1e-8;
	t->weight_decay = 0.0;
	t->clip = 0.0;   /* 0 = no gradient clipping */
	t->momentum = 0.0;
	t->nesterov = false;
	t->lr_schedule = IR_LR_CONSTANT;
	t->warmup = 0;
	t->min_lr = 0.0;
	t->zero = 0;
	t->zero_axes = 0;
	t->reshard_after_forward = true;
	t->microbatches = 1;
	t->schedule = IR_PIPE_1F1B;
	t->virtual_stages = 1;
	t->precision = IR_F32;
	/* FSDP2's and Megatron's choice for bf16 params: gradients in f32
	 * (each micro-batch's cast up where it is produced), an f32 master */
	t->reduce_dtype = IR_F32;
	t->master_dtype = IR_F32;
	t->steps = 100;
	t->data = "synthetic";
	t->sequence_parallel = false;
	t->recompute = false;
	/* uneven (torch.chunk) shards only when the train section asks: by
	 * default a size the mesh does not divide is more likely a typo */
	t->uneven_shards = false;
	t->bucket_bytes = (int64_t)25 << 20;
	t->prefetch = 1;
	/* torch.amp.GradScaler's defaults */
	t->loss_scale = IR_LOSS_SCALE_NONE;
	t->init_scale = 65536.0;
	t->growth_factor = 2.0;
	t->backoff_factor = 0.5;
	t->growth_interval = 2000;
	t->context_parallel = IR_CP_NONE;
	t->recompute_scope = IR_RECOMPUTE_READ;
	t->seed = 0;
}

IrModule *ir_module_new(Arena *a, const char *name)
{
	IrModule *m = arena_alloc(a, sizeof *m);
	if (!m)
		return NULL;
	m->arena = a;
	m->name = name ? arena_strdup(a, name) : NULL;
	if (name && !m->name)
		return NULL;
	ir_train_defaults(&m->train);
	m->loss = -1;
	m->attn_layers = m->attn_width = -1;
	m->pp_axis = -1;
	m->places = ir_places_new(a);
	return m->places ? m : NULL;
}

IrModule *ir_module_derive(const IrModule *m)
{
	IrModule *out = arena_alloc(m->arena, sizeof *out);
	if (!out)
		return NULL;
	out->arena = m->arena;
	out->name = m->name;
	out->mesh = m->mesh;
	out->train = m->train;
	out->places = m->places;
	out->loss = -1;
	out->attn_layers = m->attn_layers;
	out->attn_width = m->attn_width;
	out->pp_axis = m->pp_axis;
	return out;
}

void ir_module_take_nodes(IrModule *m, IrModule *out)
{
	m->nodes = out->nodes;
	m->nnodes = out->nnodes;
	m->cap = out->cap;
	m->stage = out->stage;
	m->mb = out->mb;
	m->phase = out->phase;
	m->block = out->block;
	m->choose = out->choose;
	m->place_from = out->place_from;
	m->place_loc = out->place_loc;
	m->padded = out->padded;
	m->label = out->label;
	m->unit = out->unit;
	m->link = out->link;
	m->link_param = out->link_param;
	m->oom |= out->oom;
}

bool ir_stage_note_add(IrModule *m, int first, int end, SrcLoc loc)
{
	if (end <= first)
		return true;
	IrStageNote *last = m->nstage_notes ? &m->stage_notes[m->nstage_notes - 1] : NULL;
	if (last && last->end == first && last->loc.file == loc.file &&
	    last->loc.line == loc.line && last->loc.col == loc.col) {
		last->end = end;
		return true;
	}
	if (m->nstage_notes == m->capstage_notes) {
		int cap = m->capstage_notes ? 2 * m->capstage_notes : 8;
		IrStageNote *v = arena_alloc_raw(m->arena, sizeof *v * (size_t)cap);
		if (!v)
			return false;
		if (m->nstage_notes)
			memcpy(v, m->stage_notes, sizeof *v * (size_t)m->nstage_notes);
		m->stage_notes = v;
		m->capstage_notes = cap;
	}
	m->stage_notes[m->nstage_notes++] = (IrStageNote){first, end, loc};
	return true;
}

SrcLoc ir_stage_note_loc(const IrModule *m, int x)
{
	const IrStageNote *best = NULL;
	for (int k = 0; k < m->nstage_notes; k++) {
		const IrStageNote *s = &m->stage_notes[k];
		if (s->first <= x && x < s->end && (!best || s->end - s->first < best->end - best->first))
			best = s;
	}
	return best ? best->loc : m->nodes[x]->loc;
}

/* Room for one more node in m->nodes. */
static bool node_room(IrModule *m)
{
	if (m->nnodes >= IR_MAX_NODES)
		return false;
	if (m->nnodes == m->cap) {
		/* The arena cannot grow in place; doubling keeps the copies to
		 * at most twice the final array. */
		int ncap = m->cap ? m->cap * 2 : 64;
		if (ncap > IR_MAX_NODES)
			ncap = IR_MAX_NODES;
		IrNode **nn = arena_alloc(m->arena, (size_t)ncap * sizeof *nn);
		if (!nn)
			return false;
		if (m->nnodes)
			memcpy(nn, m->nodes, (size_t)m->nnodes * sizeof *nn);
		m->nodes = nn;
		m->cap = ncap;
	}
	return true;
}

IrNode *ir_node_copy(IrModule *m, const IrModule *srcm, const IrNode *src, const int *ops,
                     int nops)
{
	if (nops < 0 || !node_room(m))
		return NULL;
	IrNode *n = arena_alloc_raw(m->arena, sizeof *n);
	if (!n)
		return NULL;
	*n = *src;
	n->ops = NULL;
	if (nops > 0) {
		n->ops = arena_alloc_raw(m->arena, (size_t)nops * sizeof *n->ops);
		if (!n->ops)
			return NULL;
		memcpy(n->ops, ops, (size_t)nops * sizeof *n->ops);
	}
	n->id = m->nnodes;
	n->nops = nops;
	m->nodes[m->nnodes++] = n;
	ir_annots_copy(m, n->id, srcm, src->id);
	return n;
}

IrNode *ir_node_new(IrModule *m, IrOp op, const int *ops, int nops, SrcLoc loc)
{
	if (nops < 0 || !node_room(m))
		return NULL;
	IrNode *n = arena_alloc(m->arena, sizeof *n);
	if (!n)
		return NULL;
	if (nops > 0) {
		n->ops = arena_alloc_raw(m->arena, (size_t)nops * sizeof *n->ops);
		if (!n->ops)
			return NULL;
		memcpy(n->ops, ops, (size_t)nops * sizeof *n->ops);
	}
	n->id = m->nnodes;
	n->op = op;
	n->dtype = IR_F32;
	n->nops = nops;
	n->role = IR_ROLE_ACT;
	n->loc = loc;
	m->nodes[m->nnodes++] = n;
	ir_annots_reset(m, n->id);
	return n;
}

/* -1 when the shape is invalid (negative dim, bad rank) or the product
 * overflows; shapes that passed ir_infer never do. */
int64_t ir_node_numel(const IrNode *n)
{
	if (n->rank < 0 || n->rank > IR_MAX_RANK)
		return -1;
	int64_t p = 1;
	for (int i = 0; i < n->rank; i++) {
		int64_t d = n->shape[i];
		if (d < 0)
			return -1;
		if (__builtin_mul_overflow(p, d, &p)) /* no division per dim */
			return -1;
	}
	return p;
}

void ir_count_attention(IrModule *m)
{
	m->attn_layers = 0;
	m->attn_width = 0;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		if (n->op != IR_OP_ATTENTION)
			continue;
		const IrNode *q = m->nodes[n->ops[0]];
		m->attn_layers++;
		if (!m->attn_width && q->rank > 0)
			m->attn_width = ir_global_dim(m, q, q->rank - 1);
	}
}

int ir_choose_add(IrModule *m, int node, const Placement *opts, int nopts, SrcLoc loc)
{
	if (nopts <= 0)
		return -1;
	if (m->nchooses == m->capchooses) {
		int ncap = m->capchooses ? m->capchooses * 2 : 8;
		IrChoose *nc = arena_alloc(m->arena, (size_t)ncap * sizeof *nc);
		if (!nc)
			return -1;
		if (m->nchooses)
			memcpy(nc, m->chooses, (size_t)m->nchooses * sizeof *nc);
		m->chooses = nc;
		m->capchooses = ncap;
	}
	Placement *o = arena_alloc(m->arena, (size_t)nopts * sizeof *o);
	if (!o)
		return -1;
	memcpy(o, opts, (size_t)nopts * sizeof *o);
	int idx = m->nchooses++;
	IrChoose *c = &m->chooses[idx];
	c->node = node;
	c->nopts = nopts;
	c->opts = o;
	c->selected = 0;
	c->loc = loc;
	if (node >= 0 && node < m->nnodes)
		ir_set_choose(m, m->nodes[node], idx);
	return idx;
}

void ir_format_type(char *buf, size_t cap, IrDtype t, int rank, const int64_t *shape)
{
	size_t a = (size_t)snprintf(buf, cap, "%s[", ir_dtype_name(t));
	for (int k = 0; k < rank && k < IR_MAX_RANK && a < cap; k++)
		a += (size_t)snprintf(buf + a, cap - a, "%s%" PRId64, k ? ", " : "", shape[k]);
	if (a < cap)
		snprintf(buf + a, cap - a, "]");
}

const char *ir_strip_op_name(const char *msg, IrOp op)
{
	size_t k = strlen(ir_op_name(op));
	if (strncmp(msg, ir_op_name(op), k) == 0 && strncmp(msg + k, ": ", 2) == 0)
		return msg + k + 2;
	return msg;
}
