/* mlir_import.c - an MLIR module as dtm IR text (`dtmc import-mlir`, and
 * `dtmc build X.mlir`), in the plugin libdtm_mlir.so: MLIR parses and
 * verifies the module, this file walks it through the C API and writes
 * the program as the IR text ir_parse reads (ir/print.c's form), each node
 * with its location in the .mlir file.
 *
 * The subset is the one `dtmc export-mlir` writes (tools/mlir_export.c),
 * so import then export gives back the module read:
 *   - `mesh.mesh`: the mesh (axis names from the module's dtm.mesh_axes,
 *     else dp, tp (two axes), pp, dp, tp (three), a0, a1, ...);
 *   - the public func.func (@forward when several): its arguments are the
 *     inputs (dtm.role = "input") and params (any other), named by
 *     dtm.name (else argN), with dtm.attr's init; it returns the loss;
 *   - `mesh.shard %x to <@mesh, [[0], [], [1, 2]], partial = sum[3]>`: x's
 *     placement;
 *   - arith.addf/subf/mulf/divf (operands of the result's type, or
 *     linalg.broadcast of one, size-1 dims collapsed first), arith.negf,
 *     math.exp/log/sqrt/rsqrt/tanh, arith.extf/truncf, arith.constant
 *     (a splat tensor; a splat right before the arith.mulf that alone
 *     reads it is dtm's scale);
 *   - linalg.matmul, linalg.batch_matmul and the batched-matmul
 *     linalg.generic export writes, into a zero-filled init (tensor.empty
 *     + linalg.fill);
 *   - what torch-mlir writes: elementwise linalg.generic (parallel loops,
 *     inputs through broadcast maps, a body of the arith and math ops above,
 *     scalar constants, arith.maximumf with 0: relu), reduction
 *     linalg.generic (addf or maximumf into the accumulator: sum, max), and
 *     linalg.add/sub/mul/div/exp/log/negf/sqrt/rsqrt/tanh;
 *   - linalg.reduce (arith.addf: sum; arith.maximumf into -inf: max), then
 *     an arith.mulf by 1 / the count right after it (mean), then
 *     tensor.expand_shape back to the rank (keepdims);
 *   - linalg.softmax, linalg.transpose, tensor.reshape, tensor.concat,
 *     tensor.extract_slice of one dim (unit strides), tensor.expand_shape
 *     and collapse_shape (as reshapes);
 *   - `func.call @dtm.OP.N` with dtm.attr: dtm's op OP;
 * and dtm.name, dtm.stage and dtm.block on the op defining a value are its
 * name and annotations.  Anything else is an error naming the op and its
 * line and column.  Errors come back as "LINE:COL: message" lines.
 */
#include "tools/mlir_plugin.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mlir-c/AffineExpr.h>
#include <mlir-c/AffineMap.h>
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>

#define MAXR 8 /* IR_MAX_RANK */

/* What an MLIR value stands for: a dtm node, or a piece of a pattern that
 * becomes part of one (an init, a broadcast operand, a scale's factor). */
typedef enum VKind {
	V_NODE,     /* node `node` */
	V_SCALAR,   /* a scalar arith.constant: num */
	V_SPLAT,    /* a splat tensor constant read by the next op alone */
	V_EMPTY,    /* tensor.empty */
	V_FILL,     /* linalg.fill of num */
	V_SHAPE,    /* the i64 shape operand of tensor.reshape */
	V_COLLAPSE, /* tensor.collapse_shape of node `node` (size-1 dims) */
	V_BCAST,    /* linalg.broadcast of node `node` (through a collapse) */
} VKind;

typedef struct Val {
	const void *key;
	VKind kind;
	int node;
	double num;
} Val;

typedef struct Type {
	int rank;
	int64_t shape[MAXR];
	const char *dt; /* f32 bf16 f16 i32 */
} Type;

typedef struct Node {
	char *op;    /* "matmul", "input", ... (malloc'd) */
	char *attrs; /* " {axes = (1)}" or "" (malloc'd) */
	char *name;  /* or NULL */
	char *place; /* "[dp, _]" or NULL: "?" */
	const char *role;
	int *ops, nops, capops;
	Type t;
	int stage, block;
	int line, col;
} Node;

typedef struct Im {
	const char *path;
	Val *vals; /* open addressing by key */
	size_t cap, nvals;
	Node *nodes;
	int nn, capn;
	const char *axes[16];
	bool owned[16]; /* axes[a] malloc'd (from dtm.mesh_axes) */
	int naxes;
	int64_t sizes[16];
	char *err; /* "L:C: message\n" lines */
	size_t errlen;
	FILE *errf;
	int nerr;
	int loss;
} Im;

/* ---- small helpers ---- */

static char *dup(const char *s, size_t n)
{
	char *p = malloc(n + 1);
	if (p) {
		memcpy(p, s, n);
		p[n] = 0;
	}
	return p;
}

static char *dupref(MlirStringRef s)
{
	return dup(s.data, s.length);
}

static bool is(MlirStringRef s, const char *w)
{
	return s.length == strlen(w) && !memcmp(s.data, w, s.length);
}

static MlirStringRef opname(MlirOperation op)
{
	return mlirIdentifierStr(mlirOperationGetName(op));
}

static MlirAttribute attr(MlirOperation op, const char *name)
{
	return mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString(name));
}

typedef struct Str {
	char *p;
	size_t n;
} Str;

static void to_str(MlirStringRef s, void *u)
{
	Str *b = u;
	char *q = realloc(b->p, b->n + s.length + 1);
	if (!q)
		return;
	memcpy(q + b->n, s.data, s.length);
	b->n += s.length;
	q[b->n] = 0;
	b->p = q;
}

/* The line and column of op in the parsed text: the last ":L:C" of its
 * printed location. */
static void where(MlirOperation op, int *line, int *col)
{
	Str s = {0};
	*line = *col = 0;
	if (!mlirOperationIsNull(op))
		mlirLocationPrint(mlirOperationGetLocation(op), to_str, &s);
	if (s.p) {
		char *c = strrchr(s.p, ':');
		if (c && c > s.p) {
			char *l = c - 1;
			while (l > s.p && l[-1] >= '0' && l[-1] <= '9')
				l--;
			if (l > s.p && l[-1] == ':') {
				*line = atoi(l);
				*col = atoi(c + 1);
			}
		}
	}
	free(s.p);
}

static void fail(Im *im, MlirOperation op, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail(Im *im, MlirOperation op, const char *fmt, ...)
{
	int line, col;
	where(op, &line, &col);
	fprintf(im->errf, "%d:%d: ", line, col);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(im->errf, fmt, ap);
	va_end(ap);
	fputc('\n', im->errf);
	im->nerr++;
}

/* ---- values ---- */

static Val *slot(Im *im, MlirValue v)
{
	size_t h = ((uintptr_t)v.ptr >> 4) * 0x9E3779B97F4A7C15ull;
	for (size_t i = h & (im->cap - 1);; i = (i + 1) & (im->cap - 1))
		if (!im->vals[i].key || im->vals[i].key == v.ptr)
			return &im->vals[i];
}

static bool grow(Im *im)
{
	if (2 * (im->nvals + 1) <= im->cap)
		return true;
	size_t oc = im->cap, nc = oc ? 2 * oc : 1024;
	Val *old = im->vals;
	im->vals = calloc(nc, sizeof *im->vals);
	if (!im->vals) {
		im->vals = old;
		return false;
	}
	im->cap = nc;
	for (size_t i = 0; i < oc; i++)
		if (old[i].key)
			*slot(im, (MlirValue){old[i].key}) = old[i];
	free(old);
	return true;
}

static void bind(Im *im, MlirValue v, VKind k, int node, double num)
{
	if (!v.ptr || !grow(im))
		return;
	Val *s = slot(im, v);
	if (!s->key)
		im->nvals++;
	*s = (Val){v.ptr, k, node, num};
}

static const Val *look(Im *im, MlirValue v)
{
	if (!im->cap)
		return NULL;
	const Val *s = slot(im, v);
	return s->key ? s : NULL;
}

static bool one_use(MlirValue v)
{
	MlirOpOperand u = mlirValueGetFirstUse(v);
	return !mlirOpOperandIsNull(u) && mlirOpOperandIsNull(mlirOpOperandGetNextUse(u));
}

static bool type_of(MlirType t, Type *out)
{
	memset(out, 0, sizeof *out);
	MlirType e = t;
	if (mlirTypeIsARankedTensor(t)) {
		out->rank = (int)mlirShapedTypeGetRank(t);
		if (out->rank > MAXR)
			return false;
		for (int d = 0; d < out->rank; d++) {
			out->shape[d] = mlirShapedTypeGetDimSize(t, d);
			if (out->shape[d] < 0)
				return false;
		}
		e = mlirShapedTypeGetElementType(t);
	} else if (mlirTypeIsAShaped(t)) {
		return false;
	}
	out->dt = mlirTypeIsAF32(e)    ? "f32"
	          : mlirTypeIsABF16(e) ? "bf16"
	          : mlirTypeIsAF16(e)  ? "f16"
	          : mlirTypeIsAInteger(e) && mlirIntegerTypeGetWidth(e) == 32 ? "i32"
	                                                                       : NULL;
	return out->dt != NULL;
}

static bool vtype(MlirValue v, Type *out)
{
	return type_of(mlirValueGetType(v), out);
}

/* ---- nodes ---- */

static int new_node(Im *im, MlirOperation at, const char *op, const Type *t)
{
	if (im->nn == im->capn) {
		int c = im->capn ? 2 * im->capn : 256;
		Node *n = realloc(im->nodes, sizeof *n * (size_t)c);
		if (!n)
			return -1;
		im->nodes = n;
		im->capn = c;
	}
	Node *n = &im->nodes[im->nn];
	memset(n, 0, sizeof *n);
	n->op = dup(op, strlen(op));
	n->attrs = dup("", 0);
	n->t = *t;
	n->stage = n->block = -1;
	n->role = NULL;
	where(at, &n->line, &n->col);
	return im->nn++;
}

static void set_attrs(Im *im, int id, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_attrs(Im *im, int id, const char *fmt, ...)
{
	va_list ap, aq;
	va_start(ap, fmt);
	va_copy(aq, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
	if (s)
		vsnprintf(s, (size_t)n + 1, fmt, aq);
	va_end(aq);
	if (s) {
		free(im->nodes[id].attrs);
		im->nodes[id].attrs = s;
	}
}

static void add_op(Im *im, int id, int x)
{
	Node *n = &im->nodes[id];
	if (n->nops == n->capops) {
		int c = n->capops ? 2 * n->capops : 4;
		int *o = realloc(n->ops, sizeof *o * (size_t)c);
		if (!o) {
			fail(im, (MlirOperation){0}, "out of memory");
			return;
		}
		n->ops = o;
		n->capops = c;
	}
	n->ops[n->nops++] = x;
}

/* dtm.name, dtm.stage and dtm.block of op (a dictionary's entries for an
 * argument) onto node id. */
static void take_tags(Im *im, int id, MlirAttribute name, MlirAttribute stage, MlirAttribute block)
{
	Node *n = &im->nodes[id];
	if (!mlirAttributeIsNull(name) && mlirAttributeIsAString(name)) {
		free(n->name);
		n->name = dupref(mlirStringAttrGetValue(name));
	}
	if (!mlirAttributeIsNull(stage) && mlirAttributeIsAInteger(stage))
		n->stage = (int)mlirIntegerAttrGetValueInt(stage);
	if (!mlirAttributeIsNull(block) && mlirAttributeIsAInteger(block))
		n->block = (int)mlirIntegerAttrGetValueInt(block);
}

static void op_tags(Im *im, int id, MlirOperation op)
{
	take_tags(im, id, attr(op, "dtm.name"), attr(op, "dtm.stage"), attr(op, "dtm.block"));
}

/* The node of value v, making one of a pattern's piece where it is read as
 * a value; -1 (reported) when it cannot be. */
static int node_of(Im *im, MlirOperation user, MlirValue v)
{
	const Val *x = look(im, v);
	if (!x) {
		fail(im, user, "an operand defined outside the function's body");
		return -1;
	}
	switch (x->kind) {
	case V_NODE:
		return x->node;
	case V_SPLAT:
	case V_FILL:
	case V_SCALAR: {
		Type t;
		if (!vtype(v, &t)) {
			fail(im, user, "a constant of a type dtm does not have");
			return -1;
		}
		double num = x->num;
		int id = new_node(im, user, "const", &t);
		if (id < 0)
			return -1;
		set_attrs(im, id, " {value = %.17g}", num);
		bind(im, v, V_NODE, id, 0);
		return id;
	}
	case V_COLLAPSE:
	case V_BCAST: {
		/* a broadcast's node is already aligned right (numpy rules) */
		Type t;
		int src = x->node;
		VKind k = x->kind;
		if (!vtype(v, &t))
			return -1;
		int id = new_node(im, user, k == V_COLLAPSE ? "reshape" : "expand", &t);
		if (id < 0)
			return -1;
		add_op(im, id, src);
		bind(im, v, V_NODE, id, 0);
		return id;
	}
	case V_EMPTY:
	case V_SHAPE:
		break;
	}
	fail(im, user, "reads a tensor.empty or a shape constant as a value");
	return -1;
}

/* ---- the ops ---- */

/* A node for op's (single) result: op name, type from the result. */
static int result_node(Im *im, MlirOperation op, const char *dtmop)
{
	Type t;
	if (mlirOperationGetNumResults(op) != 1) {
		fail(im, op, "'%.*s' with %d results: dtm imports ops on tensors, one result each",
		     (int)opname(op).length, opname(op).data, (int)mlirOperationGetNumResults(op));
		return -1;
	}
	MlirValue r = mlirOperationGetResult(op, 0);
	if (!vtype(r, &t)) {
		fail(im, op, "'%.*s': a result type dtm does not have (ranked tensors of f32, bf16, "
		     "f16 or i32)", (int)opname(op).length, opname(op).data);
		return -1;
	}
	int id = new_node(im, op, dtmop, &t);
	if (id >= 0) {
		bind(im, r, V_NODE, id, 0);
		op_tags(im, id, op);
	}
	return id;
}

/* The operands of op from first to end as the node's. */
static bool operands(Im *im, MlirOperation op, int id, int first, int end)
{
	for (int i = first; i < end; i++) {
		int x = node_of(im, op, mlirOperationGetOperand(op, i));
		if (x < 0)
			return false;
		add_op(im, id, x);
	}
	return true;
}

/* An init operand (outs) that is a fill of num, or an empty when num is
 * NAN. */
static bool init_is(Im *im, MlirOperation op, MlirValue v, double num)
{
	const Val *x = look(im, v);
	bool ok = x && (isnan(num) ? x->kind == V_EMPTY
	                           : x->kind == V_FILL && x->num == num);
	if (!ok)
		fail(im, op, "'%.*s' into an init dtm does not import (it takes %s)",
		     (int)opname(op).length, opname(op).data,
		     isnan(num) ? "tensor.empty" : num == 0 ? "a zero linalg.fill"
		                                           : "a -inf linalg.fill");
	return ok;
}

static int64_t array_at(MlirAttribute a, intptr_t i)
{
	return mlirDenseI64ArrayGetElement(a, i);
}

static intptr_t array_len(MlirAttribute a)
{
	return mlirAttributeIsNull(a) || !mlirAttributeIsADenseI64Array(a)
	               ? -1
	               : mlirDenseArrayGetNumElements(a);
}

static int64_t int_attr(MlirOperation op, const char *name)
{
	MlirAttribute a = attr(op, name);
	return !mlirAttributeIsNull(a) && mlirAttributeIsAInteger(a) ? mlirIntegerAttrGetValueInt(a)
	                                                             : 0;
}

/* The first op of op's first region's block. */
static MlirOperation body_op(MlirOperation op, int k)
{
	MlirBlock b = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 0));
	MlirOperation o = mlirBlockGetFirstOperation(b);
	while (k-- > 0 && !mlirOperationIsNull(o))
		o = mlirOperationGetNextInBlock(o);
	return o;
}

static bool body_is(MlirOperation op, int k, const char *name)
{
	MlirOperation o = body_op(op, k);
	return !mlirOperationIsNull(o) && is(opname(o), name);
}

/* A splat float constant's value. */
static bool splat_of(MlirOperation op, double *v)
{
	MlirAttribute a = attr(op, "value");
	if (mlirAttributeIsNull(a))
		return false;
	if (mlirAttributeIsAFloat(a)) {
		*v = mlirFloatAttrGetValueDouble(a);
		return true;
	}
	if (mlirAttributeIsAInteger(a)) {
		*v = (double)mlirIntegerAttrGetValueInt(a);
		return true;
	}
	if (!mlirAttributeIsADenseElements(a) || !mlirDenseElementsAttrIsSplat(a))
		return false;
	MlirType e = mlirShapedTypeGetElementType(mlirAttributeGetType(a));
	if (mlirTypeIsAF32(e))
		*v = mlirDenseElementsAttrGetFloatSplatValue(a);
	else if (mlirTypeIsAInteger(e) && mlirIntegerTypeGetWidth(e) == 32)
		*v = mlirDenseElementsAttrGetInt32SplatValue(a);
	else if (mlirTypeIsAInteger(e) && mlirIntegerTypeGetWidth(e) == 64)
		*v = (double)mlirDenseElementsAttrGetInt64SplatValue(a);
	else
		return false; /* bf16/f16 splats: not written by export */
	return true;
}

static void constant(Im *im, MlirOperation op)
{
	MlirValue r = mlirOperationGetResult(op, 0);
	MlirType t = mlirValueGetType(r);
	double v = 0;
	bool splat = splat_of(op, &v);
	if (!mlirTypeIsAShaped(t)) {
		if (!splat)
			fail(im, op, "a scalar constant dtm does not read");
		bind(im, r, V_SCALAR, -1, v);
		return;
	}
	MlirType e = mlirShapedTypeGetElementType(t);
	if (mlirTypeIsAInteger(e) && mlirIntegerTypeGetWidth(e) == 64) {
		bind(im, r, V_SHAPE, -1, 0); /* tensor.reshape's shape */
		return;
	}
	if (!splat) {
		fail(im, op, "a constant that is not a splat (dtm imports splat constants only)");
		return;
	}
	/* a splat read only by the arith.mulf right after it: scale's factor */
	MlirOperation nx = mlirOperationGetNextInBlock(op);
	if (mlirAttributeIsNull(attr(op, "dtm.name")) && one_use(r) && !mlirOperationIsNull(nx) &&
	    is(opname(nx), "arith.mulf") && mlirOperationGetNumOperands(nx) == 2 &&
	    mlirValueEqual(mlirOperationGetOperand(nx, 1), r)) {
		bind(im, r, V_SPLAT, -1, v);
		return;
	}
	int id = result_node(im, op, "const");
	if (id >= 0)
		set_attrs(im, id, " {value = %.17g}", v);
}

/* linalg.broadcast of x (maybe through collapse_shape) to the result:
 * remembered as x aligned right (numpy rules), which the binary op that
 * reads it takes as its operand. */
static void broadcast(Im *im, MlirOperation op)
{
	MlirValue in = mlirOperationGetOperand(op, 0), r = mlirOperationGetResult(op, 0);
	Type ti, tr;
	MlirAttribute dims = attr(op, "dimensions");
	if (!vtype(in, &ti) || !vtype(r, &tr) || array_len(dims) < 0) {
		fail(im, op, "a linalg.broadcast dtm does not read");
		return;
	}
	const Val *x = look(im, in);
	int src = x && x->kind == V_COLLAPSE ? x->node : node_of(im, op, in);
	if (src < 0)
		return;
	/* the numpy form: the result's shape from its first kept dim, the
	 * broadcast dims 1 */
	bool bdim[MAXR] = {false};
	for (intptr_t i = 0; i < array_len(dims); i++)
		if (array_at(dims, i) >= 0 && array_at(dims, i) < MAXR)
			bdim[array_at(dims, i)] = true;
	int first = 0;
	while (first < tr.rank && bdim[first])
		first++;
	Type al = {.rank = tr.rank - first, .dt = tr.dt};
	for (int d = first; d < tr.rank; d++)
		al.shape[d - first] = bdim[d] ? 1 : tr.shape[d];
	const Type *st = &im->nodes[src].t;
	bool same = st->rank == al.rank;
	for (int d = 0; same && d < al.rank; d++)
		same = st->shape[d] == al.shape[d];
	if (!same) {
		int id = new_node(im, op, "reshape", &al);
		if (id < 0)
			return;
		add_op(im, id, src);
		src = id;
	}
	bind(im, r, V_BCAST, src, 0);
}

static void binary(Im *im, MlirOperation op, const char *dtmop)
{
	/* x * splat right before: scale */
	const Val *b = look(im, mlirOperationGetOperand(op, 1));
	if (!strcmp(dtmop, "mul") && b && b->kind == V_SPLAT) {
		double v = b->num;
		int id = result_node(im, op, "scale");
		if (id >= 0 && operands(im, op, id, 0, 1))
			set_attrs(im, id, " {value = %.17g}", v);
		return;
	}
	int id = result_node(im, op, dtmop);
	if (id < 0)
		return;
	for (int i = 0; i < 2; i++) {
		MlirValue v = mlirOperationGetOperand(op, i);
		const Val *x = look(im, v);
		int n = x && x->kind == V_BCAST ? x->node : node_of(im, op, v);
		if (n < 0)
			return;
		add_op(im, id, n);
	}
}

/* linalg.reduce, with the mean's arith.mulf and keepdims' expand_shape
 * that follow it; returns the last op it took. */
static MlirOperation reduce(Im *im, MlirOperation op)
{
	MlirValue in = mlirOperationGetOperand(op, 0), r = mlirOperationGetResult(op, 0);
	MlirAttribute dims = attr(op, "dimensions");
	Type ti;
	bool max = body_is(op, 0, "arith.maximumf");
	if (!vtype(in, &ti) || array_len(dims) < 0 || (!max && !body_is(op, 0, "arith.addf"))) {
		fail(im, op, "a linalg.reduce dtm does not import (it takes arith.addf: sum, "
		     "arith.maximumf: max)");
		return op;
	}
	if (!init_is(im, op, mlirOperationGetOperand(op, 1), max ? -INFINITY : 0.0))
		return op;
	int64_t count = 1;
	for (intptr_t i = 0; i < array_len(dims); i++) {
		int64_t d = array_at(dims, i);
		count *= d >= 0 && d < ti.rank ? ti.shape[d] : 1;
	}
	MlirOperation last = op, nx = mlirOperationGetNextInBlock(op);
	const char *kind = max ? "max" : "sum";
	/* mean: `%c = arith.constant dense<1/count>; arith.mulf %r, %c` */
	double v;
	MlirOperation nx2 = mlirOperationIsNull(nx) ? nx : mlirOperationGetNextInBlock(nx);
	if (!max && one_use(r) && !mlirOperationIsNull(nx2) && is(opname(nx), "arith.constant") &&
	    is(opname(nx2), "arith.mulf") && splat_of(nx, &v) &&
	    (float)v == (float)(1.0 / (double)count) &&
	    mlirValueEqual(mlirOperationGetOperand(nx2, 0), r) &&
	    mlirValueEqual(mlirOperationGetOperand(nx2, 1), mlirOperationGetResult(nx, 0)) &&
	    one_use(mlirOperationGetResult(nx, 0))) {
		kind = "mean";
		last = nx2;
		r = mlirOperationGetResult(nx2, 0);
		nx = mlirOperationGetNextInBlock(nx2);
	}
	bool keep = one_use(r) && !mlirOperationIsNull(nx) && is(opname(nx), "tensor.expand_shape") &&
	            mlirValueEqual(mlirOperationGetOperand(nx, 0), r);
	if (keep)
		last = nx;
	int id = result_node(im, last, kind);
	if (id < 0 || !operands(im, op, id, 0, 1))
		return last;
	char buf[256];
	int n = 0;
	for (intptr_t i = 0; i < array_len(dims) && n < (int)sizeof buf - 24; i++)
		n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%" PRId64, i ? ", " : "",
		              array_at(dims, i));
	set_attrs(im, id, " {axes = (%s)%s}", buf, keep ? ", keepdims = true" : "");
	return last;
}

/* Indexing map k of a linalg.generic as its results: dim positions, -1
 * for the constant 0 (a size-1 dim), -2 for anything else; the count, or
 * -1. */
static int map_of(MlirOperation op, intptr_t k, int *res, int cap, int *ndims)
{
	MlirAttribute maps = attr(op, "indexing_maps");
	if (mlirAttributeIsNull(maps) || !mlirAttributeIsAArray(maps) ||
	    k >= mlirArrayAttrGetNumElements(maps))
		return -1;
	MlirAttribute m = mlirArrayAttrGetElement(maps, k);
	if (!mlirAttributeIsAAffineMap(m))
		return -1;
	MlirAffineMap am = mlirAffineMapAttrGetValue(m);
	int n = (int)mlirAffineMapGetNumResults(am);
	*ndims = (int)mlirAffineMapGetNumDims(am);
	if (n > cap)
		return -1;
	for (int i = 0; i < n; i++) {
		MlirAffineExpr e = mlirAffineMapGetResult(am, i);
		res[i] = mlirAffineExprIsADim(e)                                          ? (int)mlirAffineDimExprGetPosition(e)
		         : mlirAffineExprIsAConstant(e) && !mlirAffineConstantExprGetValue(e) ? -1
		                                                                             : -2;
	}
	return n;
}

/* The generic's loops: all parallel (reduction: the last one only). */
static bool loops_are(MlirOperation op, bool reduction)
{
	Str s = {0};
	mlirAttributePrint(attr(op, "iterator_types"), to_str, &s);
	const char *red = s.p ? strstr(s.p, "reduction") : NULL;
	bool ok = s.p && (reduction ? red && !strstr(red + 1, "reduction") && !strstr(red, "parallel")
	                            : !red);
	free(s.p);
	return ok;
}

/* The batched matmul export writes as a linalg.generic: loops d0..d(r-1)
 * of the result and k = d(r) last; a = [batch..., d(r-2), k], b = [batch...,
 * k, d(r-1)], the batch dims aligned right (a size-1 one: 0); mulf then
 * addf into the result. */
static bool is_batched_matmul(MlirOperation op)
{
	if (mlirOperationGetNumOperands(op) != 3 || !loops_are(op, true) ||
	    !body_is(op, 0, "arith.mulf") || !body_is(op, 1, "arith.addf") ||
	    !body_is(op, 2, "linalg.yield"))
		return false;
	int m[3][MAXR + 1], n[3], nd;
	for (int k = 0; k < 3; k++)
		if ((n[k] = map_of(op, k, m[k], MAXR + 1, &nd)) < 2)
			return false;
	int r = n[2];
	if (nd != r + 1)
		return false;
	for (int d = 0; d < r; d++)
		if (m[2][d] != d)
			return false;
	for (int k = 0; k < 2; k++) {
		int *x = m[k], nb = n[k] - 2;
		for (int j = 0; j < nb; j++)
			if (x[j] != j + (r - 2) - nb && x[j] != -1)
				return false;
		if (k == 0 && (x[nb] != r - 2 || x[nb + 1] != r))
			return false;
		if (k == 1 && (x[nb] != r || x[nb + 1] != r - 1))
			return false;
	}
	return true;
}

/* linalg.matmul, linalg.batch_matmul, or the batched matmul as export
 * writes it, into a zero fill. */
static void matmul(Im *im, MlirOperation op)
{
	if (mlirOperationGetNumOperands(op) != 3) {
		fail(im, op, "a matmul of other than two operands into one init");
		return;
	}
	if (!init_is(im, op, mlirOperationGetOperand(op, 2), 0.0))
		return;
	int id = result_node(im, op, "matmul");
	if (id >= 0)
		operands(im, op, id, 0, 2);
}

/* Operand k of an elementwise linalg.generic as a node of the loops' rank
 * (numpy rules): the dims its map reads in order, 1 elsewhere. */
static int aligned_operand(Im *im, MlirOperation op, int k, int rank)
{
	int res[MAXR], nd;
	int n = map_of(op, k, res, MAXR, &nd);
	Type t;
	MlirValue v = mlirOperationGetOperand(op, k);
	if (n < 0 || nd != rank || !vtype(v, &t) || t.rank != n) {
		fail(im, op, "a linalg.generic operand whose indexing map dtm does not read");
		return -1;
	}
	Type al = {.rank = rank, .dt = t.dt};
	for (int d = 0; d < rank; d++)
		al.shape[d] = 1;
	for (int j = 0, last = -1; j < n; j++) {
		if (res[j] == -1)
			continue;
		if (res[j] < 0 || res[j] <= last) {
			fail(im, op, "a linalg.generic operand read transposed or through an affine "
			     "expression (dtm takes broadcasts: each dim once, in order)");
			return -1;
		}
		last = res[j];
		al.shape[res[j]] = t.shape[j];
	}
	int x = node_of(im, op, v);
	if (x < 0)
		return -1;
	bool same = t.rank == rank;
	for (int d = 0; same && d < rank; d++)
		same = t.shape[d] == al.shape[d];
	if (same)
		return x;
	int id = new_node(im, op, "reshape", &al);
	if (id >= 0)
		add_op(im, id, x);
	return id;
}

/* An elementwise linalg.generic (torch-mlir's form of most ops): every
 * loop parallel, the result's map the identity, the body arith and math
 * on the inputs' elements and scalar constants, each body op a node of the
 * result's shape. */
static void elementwise(Im *im, MlirOperation op)
{
	static const struct {
		const char *mlir, *dtm;
	} un[] = {{"arith.negf", "neg"}, {"math.exp", "exp"},   {"math.log", "log"},
	          {"math.sqrt", "sqrt"}, {"math.rsqrt", "rsqrt"}, {"math.tanh", "tanh"},
	          {"arith.extf", "cast"}, {"arith.truncf", "cast"}},
	  bin[] = {{"arith.addf", "add"}, {"arith.subf", "sub"}, {"arith.mulf", "mul"},
	           {"arith.divf", "div"}};
	int nin = (int)mlirOperationGetNumOperands(op) - 1, res[MAXR], nd;
	Type rt;
	if (nin < 1 || !loops_are(op, false) || !vtype(mlirOperationGetResult(op, 0), &rt) ||
	    map_of(op, nin, res, MAXR, &nd) != rt.rank || nd != rt.rank) {
		fail(im, op, "a linalg.generic dtm does not import (it takes elementwise ones: every "
		     "loop parallel, the result's map the identity; and the batched matmul "
		     "export-mlir writes)");
		return;
	}
	for (int d = 0; d < rt.rank; d++)
		if (res[d] != d) {
			fail(im, op, "a linalg.generic whose result's map is not the identity");
			return;
		}
	MlirBlock b = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 0));
	for (int k = 0; k < nin; k++) {
		int x = aligned_operand(im, op, k, rt.rank);
		if (x < 0)
			return;
		bind(im, mlirBlockGetArgument(b, k), V_NODE, x, 0);
	}
	int last = -1;
	for (MlirOperation o = mlirBlockGetFirstOperation(b); !mlirOperationIsNull(o) && !im->nerr;
	     o = mlirOperationGetNextInBlock(o)) {
		MlirStringRef n = opname(o);
		if (is(n, "linalg.yield")) {
			if (mlirOperationGetNumOperands(o) != 1)
				break;
			last = node_of(im, o, mlirOperationGetOperand(o, 0));
			break;
		}
		Type t = rt;
		MlirValue r = mlirOperationGetNumResults(o) == 1 ? mlirOperationGetResult(o, 0)
		                                                 : (MlirValue){0};
		Type et;
		if (!r.ptr || !vtype(r, &et)) {
			fail(im, o, "'%.*s' in a linalg.generic: dtm reads one f32, bf16 or f16 result",
			     (int)n.length, n.data);
			return;
		}
		t.dt = et.dt;
		if (is(n, "arith.constant")) {
			constant(im, o);
			continue;
		}
		const char *dtmop = NULL;
		int arity = 0;
		for (size_t i = 0; !dtmop && i < sizeof un / sizeof un[0]; i++)
			if (is(n, un[i].mlir))
				dtmop = un[i].dtm, arity = 1;
		for (size_t i = 0; !dtmop && i < sizeof bin / sizeof bin[0]; i++)
			if (is(n, bin[i].mlir))
				dtmop = bin[i].dtm, arity = 2;
		if (is(n, "arith.maximumf"))
			dtmop = "relu", arity = 2;
		if (!dtmop) {
			fail(im, o, "'%.*s' in a linalg.generic is not in the subset dtm imports "
			     "(arith.addf/subf/mulf/divf/negf/maximumf with 0/extf/truncf, "
			     "math.exp/log/sqrt/rsqrt/tanh, scalar constants)", (int)n.length, n.data);
			return;
		}
		const Val *x[2] = {look(im, mlirOperationGetOperand(o, 0)),
		                   arity == 2 ? look(im, mlirOperationGetOperand(o, 1)) : NULL};
		int sc = arity == 2 && x[1] && x[1]->kind == V_SCALAR   ? 1
		         : arity == 2 && x[0] && x[0]->kind == V_SCALAR ? 0
		                                                       : -1;
		/* the operands first: a scalar constant read as a value becomes
		 * a node before its user */
		int opnd[2] = {-1, -1}, nop = 0;
		bool fold = !strcmp(dtmop, "relu") || (!strcmp(dtmop, "mul") && sc >= 0);
		for (int i = 0; i < arity; i++)
			if (!(fold && i == sc) &&
			    (opnd[nop++] = node_of(im, o, mlirOperationGetOperand(o, i))) < 0)
				return;
		if (!strcmp(dtmop, "relu") && (sc < 0 || x[sc]->num != 0)) {
			/* max(x, 0): relu */
			fail(im, o, "arith.maximumf in a linalg.generic: dtm reads max(x, 0.0), relu");
			return;
		}
		double v = sc >= 0 ? x[sc]->num : 0;
		int id = new_node(im, o, fold && strcmp(dtmop, "relu") ? "scale" : dtmop, &t);
		if (id < 0)
			return;
		for (int i = 0; i < nop; i++)
			add_op(im, id, opnd[i]);
		if (fold && strcmp(dtmop, "relu"))
			set_attrs(im, id, " {value = %.17g}", v);
		bind(im, r, V_NODE, id, 0);
	}
	if (last < 0) {
		if (!im->nerr)
			fail(im, op, "a linalg.generic whose body yields no value dtm computed");
		return;
	}
	bind(im, mlirOperationGetResult(op, 0), V_NODE, last, 0);
	op_tags(im, last, op);
}

/* A reduction linalg.generic (torch-mlir's sum): one input read by every
 * loop in order, the result's map the parallel loops, body addf (sum) or
 * maximumf (max) of the element and the accumulator, into a zero (-inf)
 * fill. */
static bool generic_reduce(Im *im, MlirOperation op)
{
	int in[MAXR], out[MAXR], nd, nd2;
	if (mlirOperationGetNumOperands(op) != 2 || loops_are(op, false))
		return false;
	int ni = map_of(op, 0, in, MAXR, &nd), no = map_of(op, 1, out, MAXR, &nd2);
	bool max = body_is(op, 0, "arith.maximumf");
	if (ni != nd || no < 0 || (!max && !body_is(op, 0, "arith.addf")) ||
	    !body_is(op, 1, "linalg.yield"))
		return false;
	bool red[MAXR] = {false};
	for (int d = 0; d < nd; d++) {
		if (in[d] != d)
			return false;
		red[d] = true;
	}
	for (int j = 0, last = -1; j < no; j++) {
		if (out[j] < 0 || out[j] <= last)
			return false;
		last = out[j];
		red[out[j]] = false;
	}
	/* the body reads the element and the accumulator, in either order */
	MlirOperation b = body_op(op, 0);
	MlirBlock blk = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 0));
	MlirValue x = mlirBlockGetArgument(blk, 0), acc = mlirBlockGetArgument(blk, 1);
	MlirValue p = mlirOperationGetOperand(b, 0), q = mlirOperationGetOperand(b, 1);
	if (!((mlirValueEqual(p, x) && mlirValueEqual(q, acc)) ||
	      (mlirValueEqual(p, acc) && mlirValueEqual(q, x))))
		return false;
	if (!init_is(im, op, mlirOperationGetOperand(op, 1), max ? -INFINITY : 0.0))
		return true;
	int id = result_node(im, op, max ? "max" : "sum");
	if (id < 0 || !operands(im, op, id, 0, 1))
		return true;
	char buf[64];
	int k = 0;
	for (int d = 0; d < nd; d++)
		if (red[d])
			k += snprintf(buf + k, sizeof buf - (size_t)k, "%s%d", k ? ", " : "", d);
	set_attrs(im, id, " {axes = (%s)}", buf);
	return true;
}

/* linalg's named elementwise ops: ins, then the init (whose values they
 * do not read). */
static bool named_elementwise(Im *im, MlirOperation op)
{
	static const struct {
		const char *mlir, *dtm;
		int arity;
	} ops[] = {{"linalg.add", "add", 2},  {"linalg.sub", "sub", 2},     {"linalg.mul", "mul", 2},
	           {"linalg.div", "div", 2},  {"linalg.exp", "exp", 1},     {"linalg.log", "log", 1},
	           {"linalg.negf", "neg", 1}, {"linalg.sqrt", "sqrt", 1},   {"linalg.rsqrt", "rsqrt", 1},
	           {"linalg.tanh", "tanh", 1}};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (is(opname(op), ops[i].mlir)) {
			if (mlirOperationGetNumOperands(op) != ops[i].arity + 1) {
				fail(im, op, "'%s' of %d operands", ops[i].mlir,
				     (int)mlirOperationGetNumOperands(op));
				return true;
			}
			int id = result_node(im, op, ops[i].dtm);
			if (id >= 0)
				operands(im, op, id, 0, ops[i].arity);
			return true;
		}
	return false;
}

static void slice(Im *im, MlirOperation op)
{
	MlirAttribute off = attr(op, "static_offsets"), sz = attr(op, "static_sizes"),
	              st = attr(op, "static_strides");
	Type ti;
	if (!vtype(mlirOperationGetOperand(op, 0), &ti) || mlirOperationGetNumOperands(op) != 1 ||
	    array_len(off) != ti.rank || array_len(sz) != ti.rank || array_len(st) != ti.rank) {
		fail(im, op, "a tensor.extract_slice with dynamic offsets or sizes");
		return;
	}
	int axis = -1;
	for (int d = 0; d < ti.rank; d++) {
		if (array_at(st, d) != 1) {
			fail(im, op, "a tensor.extract_slice with a stride other than 1");
			return;
		}
		if (array_at(off, d) != 0 || array_at(sz, d) != ti.shape[d]) {
			if (axis >= 0) {
				fail(im, op, "a tensor.extract_slice of more than one dim (dtm's slice cuts "
				     "one)");
				return;
			}
			axis = d;
		}
	}
	int a = axis < 0 ? 0 : axis;
	int id = result_node(im, op, "slice");
	if (id >= 0 && operands(im, op, id, 0, 1))
		set_attrs(im, id, " {axis = %d, start = %" PRId64 ", end = %" PRId64 "}", a,
		          array_at(off, a), array_at(off, a) + array_at(sz, a));
}

static void call(Im *im, MlirOperation op)
{
	MlirAttribute c = attr(op, "callee");
	MlirStringRef f = mlirAttributeIsNull(c) ? (MlirStringRef){"", 0}
	                                         : mlirFlatSymbolRefAttrGetValue(c);
	const char *dot = f.length > 4 ? memchr(f.data + 4, '.', f.length - 4) : NULL;
	if (f.length < 5 || memcmp(f.data, "dtm.", 4) || !dot ||
	    mlirOperationGetNumResults(op) != 1) {
		fail(im, op, "a call of @%.*s: dtm imports calls of its own ops, @dtm.OP.N with one "
		     "result", (int)f.length, f.data);
		return;
	}
	char name[64];
	snprintf(name, sizeof name, "%.*s", (int)(dot - f.data - 4), f.data + 4);
	int id = result_node(im, op, name);
	if (id < 0 || !operands(im, op, id, 0, (int)mlirOperationGetNumOperands(op)))
		return;
	MlirAttribute a = attr(op, "dtm.attr");
	if (!mlirAttributeIsNull(a) && mlirAttributeIsAString(a)) {
		MlirStringRef s = mlirStringAttrGetValue(a);
		set_attrs(im, id, " %.*s", (int)s.length, s.data);
	}
}

/* `<@mesh, [[0], [], [1, 2]], partial = sum[3]>` as dtm's `[dp, _, (tp,
 * ep)] partial(pp)` for a value of rank `rank`. */
static char *placement(Im *im, MlirOperation op, int rank)
{
	Str s = {0};
	mlirAttributePrint(attr(op, "shard"), to_str, &s);
	const char *p = s.p ? strchr(s.p, '[') : NULL;
	if (!p) {
		free(s.p);
		fail(im, op, "a mesh.shard without a sharding dtm reads");
		return NULL;
	}
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	if (!f) {
		free(s.p);
		return NULL;
	}
	fputc('[', f);
	p++;
	int d = 0;
	bool bad = false;
	while (*p == '[' || *p == ' ' || *p == ',') {
		if (*p != '[') {
			p++;
			continue;
		}
		p++;
		int ax[16], n = 0;
		while (*p && *p != ']') {
			char *end;
			long a = strtol(p, &end, 10);
			if (end == p) {
				p++;
				continue;
			}
			if (a < 0 || a >= im->naxes || n == 16)
				bad = true;
			else
				ax[n++] = (int)a;
			p = end;
		}
		if (*p == ']')
			p++;
		fputs(d ? ", " : "", f);
		if (n == 0)
			fputc('_', f);
		else if (n == 1)
			fputs(im->axes[ax[0]], f);
		for (int k = 0; n > 1 && k < n; k++)
			fprintf(f, "%s%s%s", k ? ", " : "(", im->axes[ax[k]], k == n - 1 ? ")" : "");
		d++;
	}
	for (; d < rank; d++)
		fputs(d ? ", _" : "_", f);
	fputc(']', f);
	const char *part = strstr(p, "partial");
	if (part) {
		const char *q = strchr(part, '[');
		bool maxp = strstr(part, "max") && strstr(part, "max") < (q ? q : part + strlen(part));
		fputs(" partial(", f);
		int n = 0;
		while (q && *q && *q != ']') {
			char *end;
			long a = strtol(q + 1, &end, 10);
			if (end == q + 1) {
				q++;
				continue;
			}
			if (a < 0 || a >= im->naxes)
				bad = true;
			else
				fprintf(f, "%s%s", n++ ? ", " : "", im->axes[a]);
			q = end;
		}
		fprintf(f, "%s)", maxp ? ", max" : "");
	}
	fclose(f);
	free(s.p);
	if (bad || d > rank) {
		fail(im, op, "a mesh.shard naming a mesh axis the mesh lacks or more dims than the "
		     "value has");
		free(out);
		return NULL;
	}
	return out;
}

static void shard(Im *im, MlirOperation op)
{
	MlirValue src = mlirOperationGetOperand(op, 0);
	int x = node_of(im, op, src);
	if (x < 0)
		return;
	char *p = placement(im, op, im->nodes[x].t.rank);
	if (!p)
		return;
	free(im->nodes[x].place);
	im->nodes[x].place = p;
	bind(im, mlirOperationGetResult(op, 0), V_NODE, x, 0);
}

static void unary(Im *im, MlirOperation op, const char *dtmop)
{
	int id = result_node(im, op, dtmop);
	if (id >= 0)
		operands(im, op, id, 0, 1);
}

/* One op of the body; returns the last op it took (a pattern takes the
 * ops after it). */
static MlirOperation one_op(Im *im, MlirOperation op)
{
	static const struct {
		const char *mlir, *dtm;
	} un[] = {{"arith.negf", "neg"},   {"math.exp", "exp"},         {"math.log", "log"},
	          {"math.sqrt", "sqrt"},   {"math.rsqrt", "rsqrt"},     {"math.tanh", "tanh"},
	          {"arith.extf", "cast"},  {"arith.truncf", "cast"},    {"tensor.reshape", "reshape"},
	          {"tensor.expand_shape", "reshape"}},
	  bin[] = {{"arith.addf", "add"}, {"arith.subf", "sub"}, {"arith.mulf", "mul"},
	           {"arith.divf", "div"}};
	MlirStringRef n = opname(op);
	if (!is(n, "func.return") && mlirOperationGetNumResults(op) != 1) {
		/* (linalg on memrefs has none) */
		fail(im, op, "'%.*s' with %d results: dtm imports ops on tensors, one result each",
		     (int)n.length, n.data, (int)mlirOperationGetNumResults(op));
		return op;
	}
	for (size_t i = 0; i < sizeof un / sizeof un[0]; i++)
		if (is(n, un[i].mlir)) {
			unary(im, op, un[i].dtm);
			return op;
		}
	for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++)
		if (is(n, bin[i].mlir)) {
			binary(im, op, bin[i].dtm);
			return op;
		}
	MlirValue r = is(n, "func.return") ? (MlirValue){0} : mlirOperationGetResult(op, 0);
	if (is(n, "arith.constant")) {
		constant(im, op);
	} else if (is(n, "tensor.empty")) {
		bind(im, r, V_EMPTY, -1, 0);
	} else if (is(n, "linalg.fill")) {
		const Val *c = look(im, mlirOperationGetOperand(op, 0));
		const Val *e = look(im, mlirOperationGetOperand(op, 1));
		if (!c || c->kind != V_SCALAR || !e || e->kind != V_EMPTY)
			fail(im, op, "a linalg.fill dtm does not import (it takes a scalar "
			     "arith.constant into a tensor.empty)");
		else
			bind(im, r, V_FILL, -1, c->num);
	} else if (is(n, "tensor.collapse_shape")) {
		/* read by a linalg.broadcast, or a reshape */
		int x = node_of(im, op, mlirOperationGetOperand(op, 0));
		if (x >= 0)
			bind(im, r, V_COLLAPSE, x, 0);
	} else if (is(n, "linalg.broadcast")) {
		broadcast(im, op);
	} else if (is(n, "linalg.matmul") || is(n, "linalg.batch_matmul") ||
	           (is(n, "linalg.generic") && is_batched_matmul(op))) {
		matmul(im, op);
	} else if (is(n, "linalg.generic")) {
		if (!generic_reduce(im, op))
			elementwise(im, op);
	} else if (named_elementwise(im, op)) {
		/* done */
	} else if (is(n, "linalg.reduce")) {
		return reduce(im, op);
	} else if (is(n, "linalg.softmax")) {
		if (init_is(im, op, mlirOperationGetOperand(op, 1), NAN)) {
			int id = result_node(im, op, "softmax");
			if (id >= 0 && operands(im, op, id, 0, 1))
				set_attrs(im, id, " {axis = %" PRId64 "}", int_attr(op, "dimension"));
		}
	} else if (is(n, "linalg.transpose")) {
		MlirAttribute p = attr(op, "permutation");
		if (init_is(im, op, mlirOperationGetOperand(op, 1), NAN)) {
			int id = result_node(im, op, "permute");
			if (id >= 0 && operands(im, op, id, 0, 1)) {
				char buf[128];
				int k = 0;
				for (intptr_t i = 0; i < array_len(p) && k < (int)sizeof buf - 24; i++)
					k += snprintf(buf + k, sizeof buf - (size_t)k, "%s%" PRId64,
					              i ? ", " : "", array_at(p, i));
				set_attrs(im, id, " {perm = (%s)}", buf);
			}
		}
	} else if (is(n, "tensor.concat")) {
		int id = result_node(im, op, "concat");
		if (id >= 0 && operands(im, op, id, 0, (int)mlirOperationGetNumOperands(op)))
			set_attrs(im, id, " {axis = %" PRId64 "}", int_attr(op, "dim"));
	} else if (is(n, "tensor.extract_slice")) {
		slice(im, op);
	} else if (is(n, "func.call")) {
		call(im, op);
	} else if (is(n, "mesh.shard")) {
		shard(im, op);
	} else if (is(n, "func.return")) {
		if (mlirOperationGetNumOperands(op) != 1) {
			fail(im, op, "the function returns %d values; dtm trains a function that returns "
			     "its loss", (int)mlirOperationGetNumOperands(op));
		} else {
			im->loss = node_of(im, op, mlirOperationGetOperand(op, 0));
			Type t;
			if (im->loss >= 0 && (!vtype(mlirOperationGetOperand(op, 0), &t) || t.rank != 0))
				fail(im, op, "the returned loss is not a scalar tensor (tensor<f32>)");
		}
	} else {
		fail(im, op, "'%.*s' is not in the subset dtm imports (func, arith, math, linalg "
		     "matmul/reduce/softmax/transpose/broadcast/fill, tensor, mesh.shard, calls of "
		     "@dtm.OP.N: see dtmc help import-mlir)", (int)n.length, n.data);
	}
	return op;
}

/* The function's arguments as dtm's inputs and params. */
static void arguments(Im *im, MlirOperation fn, MlirBlock body)
{
	MlirAttribute aa = attr(fn, "arg_attrs");
	intptr_t n = mlirBlockGetNumArguments(body);
	for (intptr_t i = 0; i < n; i++) {
		MlirValue v = mlirBlockGetArgument(body, i);
		MlirAttribute d = !mlirAttributeIsNull(aa) && mlirAttributeIsAArray(aa) &&
		                                  i < mlirArrayAttrGetNumElements(aa)
		                          ? mlirArrayAttrGetElement(aa, i)
		                          : (MlirAttribute){0};
		bool dict = !mlirAttributeIsNull(d) && mlirAttributeIsADictionary(d);
#define ENTRY(k) (dict ? mlirDictionaryAttrGetElementByName(d, mlirStringRefCreateFromCString(k)) \
                       : (MlirAttribute){0})
		MlirAttribute role = ENTRY("dtm.role"), init = ENTRY("dtm.attr");
		bool input = !mlirAttributeIsNull(role) && mlirAttributeIsAString(role) &&
		             is(mlirStringAttrGetValue(role), "input");
		Type t;
		if (!vtype(v, &t)) {
			fail(im, fn, "argument %d has a type dtm does not have (ranked tensors of f32, "
			     "bf16, f16 or i32)", (int)i);
			continue;
		}
		int id = new_node(im, fn, input ? "input" : "param", &t);
		if (id < 0)
			return;
		im->nodes[id].role = input ? "input" : "param";
		take_tags(im, id, ENTRY("dtm.name"), ENTRY("dtm.stage"), ENTRY("dtm.block"));
#undef ENTRY
		if (!im->nodes[id].name) {
			char b[32];
			snprintf(b, sizeof b, "arg%d", (int)i);
			im->nodes[id].name = dup(b, strlen(b));
		}
		if (!input && !mlirAttributeIsNull(init) && mlirAttributeIsAString(init)) {
			MlirStringRef s = mlirStringAttrGetValue(init);
			set_attrs(im, id, " %.*s", (int)s.length, s.data);
		}
		bind(im, v, V_NODE, id, 0);
	}
}

/* The mesh (its axes' names from dtm.mesh_axes) and the function to
 * train. */
static MlirOperation module_parts(Im *im, MlirOperation mod)
{
	MlirBlock b = mlirRegionGetFirstBlock(mlirOperationGetRegion(mod, 0));
	MlirOperation fn = {0}, mesh = {0};
	int nfn = 0;
	for (MlirOperation op = mlirBlockGetFirstOperation(b); !mlirOperationIsNull(op);
	     op = mlirOperationGetNextInBlock(op)) {
		MlirStringRef n = opname(op);
		if (is(n, "mesh.mesh")) {
			if (!mlirOperationIsNull(mesh))
				fail(im, op, "a second mesh.mesh (dtm trains on one mesh)");
			mesh = op;
		} else if (is(n, "func.func") && mlirRegionIsNull(mlirOperationGetRegion(op, 0)) == 0 &&
		           !mlirBlockIsNull(mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 0)))) {
			MlirAttribute s = attr(op, "sym_name");
			if (mlirOperationIsNull(fn) || is(mlirStringAttrGetValue(s), "forward"))
				fn = op;
			nfn++;
		}
	}
	MlirAttribute names = attr(mod, "dtm.mesh_axes");
	MlirAttribute shape = mlirOperationIsNull(mesh) ? (MlirAttribute){0} : attr(mesh, "shape");
	im->naxes = (int)array_len(shape);
	if (im->naxes < 0)
		im->naxes = 0;
	if (im->naxes > 16) {
		fail(im, mesh, "a mesh of more than 16 axes");
		im->naxes = 0;
	}
	static const char *const def2[] = {"dp", "tp"}, *const def3[] = {"pp", "dp", "tp"},
	                         *const gen[] = {"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7",
	                                         "a8", "a9", "a10", "a11", "a12", "a13", "a14", "a15"};
	for (int a = 0; a < im->naxes; a++) {
		im->sizes[a] = array_at(shape, a);
		MlirAttribute nm = !mlirAttributeIsNull(names) && mlirAttributeIsAArray(names) &&
		                                   a < mlirArrayAttrGetNumElements(names)
		                           ? mlirArrayAttrGetElement(names, a)
		                           : (MlirAttribute){0};
		if (!mlirAttributeIsNull(nm) && mlirAttributeIsAString(nm) &&
		    (im->axes[a] = dupref(mlirStringAttrGetValue(nm))))
			im->owned[a] = true;
		else
			im->axes[a] = im->naxes == 1 ? "dp" : im->naxes == 2 ? def2[a]
			              : im->naxes == 3                    ? def3[a]
			                                                  : gen[a];
	}
	if (mlirOperationIsNull(fn))
		fail(im, mod, "no func.func with a body: dtm trains the function that returns the loss");
	else if (nfn > 1 && !is(mlirStringAttrGetValue(attr(fn, "sym_name")), "forward"))
		fail(im, fn, "%d functions and none named @forward: which one is the model?", nfn);
	return fn;
}

static void put_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

/* The IR text (ir/print.c's form). */
static void write_text(Im *im, FILE *f, MlirOperation mod)
{
	MlirAttribute model = attr(mod, "dtm.model"), train = attr(mod, "dtm.train");
	fputs("module ", f);
	if (!mlirAttributeIsNull(model) && mlirAttributeIsAString(model) &&
	    mlirStringAttrGetValue(model).length) {
		MlirStringRef s = mlirStringAttrGetValue(model);
		fprintf(f, "%.*s", (int)s.length, s.data);
	} else {
		fputs("mlir", f);
	}
	fputs("\nmesh (", f);
	for (int a = 0; a < im->naxes; a++)
		fprintf(f, "%s%s = %" PRId64, a ? ", " : "", im->axes[a], im->sizes[a]);
	fputs(")\n", f);
	if (!mlirAttributeIsNull(train) && mlirAttributeIsAString(train)) {
		MlirStringRef s = mlirStringAttrGetValue(train);
		fprintf(f, "%.*s", (int)s.length, s.data);
	} else if (im->naxes > 0) {
		/* the defaults a .dtm model gets, but ZeRO's axes: dp's, else the
		 * first axis (frontend/lower_train.c) */
		int dp = 0;
		for (int a = 0; a < im->naxes; a++)
			if (!strcmp(im->axes[a], "dp"))
				dp = a;
		fprintf(f, "train zero = 0, zero_axes = (%s), reshard_after_forward = true\n",
		        im->axes[dp]);
	}
	for (int i = 0; i < im->nn; i++) {
		const Node *n = &im->nodes[i];
		fprintf(f, "%%%d = %s", i, n->op);
		for (int k = 0; k < n->nops; k++)
			fprintf(f, "%s%%%d", k ? ", " : " ", n->ops[k]);
		fputs(n->attrs, f);
		if (n->name) {
			fputc(' ', f);
			put_str(f, n->name);
		}
		fprintf(f, " : %s[", n->t.dt);
		for (int d = 0; d < n->t.rank; d++)
			fprintf(f, "%s%" PRId64, d ? ", " : "", n->t.shape[d]);
		fprintf(f, "] @ %s", n->place ? n->place : "?");
		const char *role = i == im->loss ? "loss" : n->role;
		if (role)
			fprintf(f, " role %s", role);
		if (n->stage >= 0)
			fprintf(f, " stage %d", n->stage);
		if (n->block >= 0)
			fprintf(f, " block %d", n->block);
		if (n->line > 0) {
			fputs(" loc ", f);
			put_str(f, im->path);
			fprintf(f, ":%d:%d-%d", n->line, n->col, n->col);
		}
		fputc('\n', f);
	}
	if (im->loss >= 0)
		fprintf(f, "loss %%%d\n", im->loss);
}

static void im_free(Im *im)
{
	for (int i = 0; i < im->nn; i++) {
		free(im->nodes[i].op);
		free(im->nodes[i].attrs);
		free(im->nodes[i].name);
		free(im->nodes[i].place);
		free(im->nodes[i].ops);
	}
	free(im->nodes);
	free(im->vals);
}

bool mlir_import_module(MlirModule mod, const char *path, char **out, char **err)
{
	Im im = {.path = path, .loss = -1};
	im.errf = open_memstream(&im.err, &im.errlen);
	if (!im.errf)
		return false;
	MlirOperation m = mlirModuleGetOperation(mod);
	MlirOperation fn = module_parts(&im, m);
	if (!im.nerr) {
		MlirBlock body = mlirRegionGetFirstBlock(mlirOperationGetRegion(fn, 0));
		arguments(&im, fn, body);
		/* the first error stops: the ops after it read its values */
		for (MlirOperation op = mlirBlockGetFirstOperation(body);
		     !mlirOperationIsNull(op) && !im.nerr; op = mlirOperationGetNextInBlock(op))
			op = one_op(&im, op);
		if (!im.nerr && im.loss < 0)
			fail(&im, fn, "the function returns no loss");
	}
	*out = NULL;
	if (!im.nerr) {
		size_t len = 0;
		FILE *f = open_memstream(out, &len);
		if (f) {
			write_text(&im, f, m);
			fclose(f);
		}
	}
	for (int a = 0; a < im.naxes; a++)
		if (im.owned[a])
			free((char *)im.axes[a]);
	fclose(im.errf);
	im_free(&im);
	if (!im.nerr && *out) {
		free(im.err);
		*err = NULL;
		return true;
	}
	*err = im.err;
	return false;
}
