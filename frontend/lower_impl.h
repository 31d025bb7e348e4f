/* lower_impl.h - the state of lowering, shared by its files: lower.c
 * (statements, expressions), builtins.c (the builtin ops), lower_consts.c
 * (constants, let and -D), lower_mesh.c (the mesh, --mesh, placements) and
 * lower_train.c (the train section, --train).
 *
 * Internal to the frontend: nothing outside frontend/ includes it.  The one
 * public interface is lower.h.
 */
#ifndef DTM_LOWER_IMPL_H
#define DTM_LOWER_IMPL_H

#include "frontend/lower.h"

/* What an expression evaluates to while lowering.  Constant expressions fold
 * to V_NUM; tensor expressions become IR nodes (V_NODE); split() and
 * multi-value returns make tuples.  V_ERR marks a value whose computation
 * already reported an error: every use of it is silently V_ERR again, so one
 * mistake gives one message. */
typedef enum ValKind {
	V_ERR,   /* nothing valid */
	V_NUM,   /* is_int ? i : f */
	V_BOOL,  /* i (0/1) */
	V_STR,   /* s */
	V_NODE,  /* i = node id */
	V_TUPLE, /* items[0..n) */
} ValKind;

typedef struct Value {
	ValKind k;
	bool is_int;
	int64_t i;
	double f;
	const char *s;
	int n;
	struct Value *items;
} Value;

/* A name bound in a scope.  Scopes are flat arrays: a rebinding (x = x + 1)
 * overwrites the slot, so a million-iteration loop does not grow them. */
typedef struct Binding {
	const char *name;
	Value v;
	SrcLoc loc; /* where it was bound, for "first defined here" notes */
} Binding;

/* Bindings in order of definition, with a hash index (open addressing,
 * slot = binding index + 1, 0 empty, -1 deleted) once there are more than
 * a few: a model of 100k params must not look names up in linear time. */
typedef struct Scope {
	Binding *b;
	int n, cap;
	int *slot;
	int nslot; /* a power of two, >= 4 (n + ntomb); 0 while the scope is small */
	int ntomb; /* deleted slots since the index was built */
	struct Scope *parent;
} Scope;

/* A `block` definition and its instantiation bookkeeping. */
typedef struct BlockDef {
	const AstNode *ast;
	int ncalls;  /* instances so far: the INDEX in layer.INDEX.wq */
	bool bad;    /* malformed or already failed: calls yield V_ERR */
	bool active; /* on the call stack (recursion check) */
} BlockDef;

#define LOWER_MAX_ITERS 1000000 /* loop iterations + block calls, in total */
#define LOWER_MAX_NEST 256      /* nested block calls / statements */

typedef struct Lower {
	Arena *a;
	Diag *d;
	IrModule *m;
	const AstFile *f;
	const LowerOptions *opt;
	Scope globals; /* lets, mesh axes, top-level params and inputs */
	BlockDef *blocks;
	int nblocks;
	const BlockDef **stack; /* block call stack, for the recursion message */
	int nstack;
	bool fatal;         /* program too large: stop everything */
	int stage;          /* stage of nodes being created, -1 outside a staged loop */
	int64_t iters;      /* unrolled iterations + block instances */
	int dropout_salt;   /* per-call counter for dropout masks */
	int moe_sites;      /* moe_slot calls so far: their stats sites */
	int depth;          /* statement / call nesting */
	const char *prefix; /* "layer.3." inside a block instance, "" outside */
	int block;          /* IrNode.block of nodes being created: the
	                     * outermost block instance, -1 outside blocks */
	int nblock;         /* outermost block instances so far */
	int unit;           /* the innermost block instance (a param's
	                     * IrModule.unit), -1 outside blocks */
	int nunit;          /* block instances so far, at any depth */
	bool train_seen;    /* uneven_shards etc. are final */
	SrcLoc uneven_loc;  /* the uneven_shards setting; file == NULL if absent */
	int64_t trips;      /* product of the trip counts of the enclosing loops */
	bool recursion;     /* unwinding a recursion error: its message names
	                     * the chain, so no "called here" notes */
	/* the assignment target an annotation message names when the
	 * annotation is the whole right-hand side (`h = e @ [dp, tp]`) */
	const char *annot_target;
	const AstNode *annot_expr;
} Lower;

/* The positional arguments of a call, evaluated.  A tuple that comes from
 * a call or a variable (not a literal `(a, b)`) spreads into separate
 * arguments, so attention(split(x, 3), heads = h) passes q, k and v. */
typedef struct Args {
	int n, cap;
	Value *v;
	SrcLoc *loc; /* of each argument (a spread tuple's items share one) */
	bool ok;     /* false if any argument was V_ERR */
} Args;

/* ---- lower.c ---- */
Value lower_expr(Lower *L, Scope *s, const AstNode *e);
Binding *lower_lookup(Scope *s, const char *name);
/* The binding of name in s itself (not its parents), or NULL. */
Binding *lower_lookup_local(Scope *s, const char *name);
void lower_bind(Lower *L, Scope *s, const char *name, Value v, SrcLoc loc);
/* Node construction: lower_new_node sets stage, role and choose; the
 * caller fills attrs and then calls lower_finish, which runs ir_infer and
 * gives the node's value (V_ERR on a shape error or a NULL node). */
Value lower_node_val(int id);
IrNode *lower_new_node(Lower *L, IrOp op, const int *ops, int nops, SrcLoc loc);
Value lower_finish(Lower *L, IrNode *n);
Value lower_make1(Lower *L, IrOp op, Value x, SrcLoc loc, IrNode **out); /* not finished */
Value lower_make2(Lower *L, IrOp op, Value a, Value b, SrcLoc loc);      /* finished */
Value lower_make_scale(Lower *L, Value x, double c, SrcLoc loc);
/* cast(x) to t: a node even when x is of dtype t (lowering types every
 * float f32; a user's cast to f32 must stay one under `precision bf16`,
 * whose pass runs after lowering). */
Value lower_cast(Lower *L, Value x, IrDtype t, SrcLoc loc);
/* Torch's type promotion over the tensors among v[0..n): float tensors of
 * different dtypes are cast to the promoted one (ir_dtype_promote), in
 * place.  Numbers and i32 tensors are left alone.  False after an error. */
bool lower_promote(Lower *L, Value *v, int n, SrcLoc loc);
void lower_too_large(Lower *L, SrcLoc loc, const char *why);

/* ---- builtins.c ---- */
typedef struct Builtin Builtin;
const Builtin *lower_find_builtin(const char *name);
/* Writes up to cap builtin names (for "did you mean"); returns the count. */
int lower_builtin_names(const char **out, int cap);
Value lower_builtin(Lower *L, Scope *s, const AstNode *call, const Builtin *bi, const Args *a);
/* Positional argument i of bi is a word (cast's dtype): an identifier
 * there is passed as V_STR, not looked up. */
bool lower_builtin_word_arg(const Builtin *bi, int i);

/* ---- lower_consts.c ---- */
/* Where --train, -D and --mesh problems are reported. */
extern const SrcLoc lower_cmdline;
Value lower_err(void);
Value lower_int(int64_t i);
Value lower_float(double f);
double lower_num(Value v);
/* A user's name for a message: NULL gives "?", over 40 bytes is cut. */
const char *lower_name(Lower *L, const char *s);
/* "a number", "a tensor f32[8, 32]", "a tuple of 3 values", ... */
const char *lower_describe(Lower *L, Value v);
const char *lower_type_str(Lower *L, const IrNode *n);
/* Constant arithmetic: op is '+', '-', '*', '/', '%'.  Reports division
 * by zero and integer overflow at loc. */
Value lower_arith(Lower *L, int op, Value a, Value b, SrcLoc loc);
/* sqrt, exp, log, min, max, ceil, floor on numbers.  Returns false if name
 * is not one of them. */
bool lower_is_const_func(const char *name);
Value lower_const_call(Lower *L, const char *name, const Value *args, int n, SrcLoc loc);
/* Evaluates e in s to an integer; reports "WHAT must be an integer, got X". */
bool lower_const_int(Lower *L, Scope *s, const AstNode *e, const char *what, int64_t *out);
bool lower_const_num(Lower *L, Scope *s, const AstNode *e, const char *what, double *out);
/* Edit distance <= 2 (and shorter than the name): the closest candidate. */
const char *lower_suggest(const char *name, const char *const *cands, int n);
/* Binds a global name (let, mesh axis, top-level param or input); reports
 * a duplicate with a note at the first definition. */
bool lower_define_global(Lower *L, const char *name, Value v, SrcLoc loc);
/* Reports keyword arguments of call that are not in known (NULL-ended) or
 * given twice; `fn` names the callee in messages. */
bool lower_check_kwargs(Lower *L, const AstNode *call, const char *const *known, const char *fn);
const AstNode *lower_kwarg(const AstNode *call, const char *name);
/* The `let` section, with -D overrides. */
void lower_lets(Lower *L);

/* ---- lower_mesh.c ---- */
/* The `mesh` section, with --mesh. */
void lower_mesh(Lower *L, const AstNode *mesh);
/* --mesh "dp=4,tp=2" onto L->m's declared axes (the others size 1). */
void lower_mesh_opt(Lower *L, const char *text);
/* Resolves mesh axis names to a bitmask; reports unknown or repeated axes. */
bool lower_axes_mask(Lower *L, const AstName *names, int n, uint32_t *mask);
/* Placements: checks an annotation against the mesh and a value of the
 * given rank and shape.  `what` names the value in messages ("'w'" or "the
 * value").  Partial axes are refused when !allow_partial.  Returns false
 * after reporting. */
bool lower_placement(Lower *L, const AstPlacement *ap, int rank, const int64_t *shape,
                     const char *what, bool allow_partial, Placement *out);
/* Applies `@ [..]` or `@ choose(..)` to node n (records the choose point). */
bool lower_annotate(Lower *L, const AstAnnot *an, IrNode *n, const char *what, bool allow_partial);

/* ---- lower_train.c ---- */
/* The `train` section, with --train overrides. */
void lower_train(Lower *L, const AstNode *train);

#endif
