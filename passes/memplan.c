/* memplan.c - pass "memplan" (last in the pipeline): static arena offsets.
 *
 * Consumes the final IR and its FusePlan; produces a MemPlan (memplan.h):
 * per node an arena, an offset and a byte count, and per arena the planned
 * peak.  The runtime allocates exactly arena_bytes, so what `dtmc build -v`
 * and `inspect` report is what a run uses.
 *
 *   params -> PARAM, optimizer state -> OPT, inputs -> INPUT, gradients
 *   (role grad) -> GRAD: persistent, packed one after another;
 *   in-place results (OPF_INPLACE) share operand 0's storage, and so do
 *   reshapes of activations (a reshape of a row-major tensor is the same
 *   bytes); a chain of matmul_wgrad_acc that ends in a gradient has the
 *   gradient's arena from its first GEMM on (MemPlanBuf.ident);
 *   fused intermediates and folded transposes have no storage;
 *   everything else -> ACT, reusing memory by liveness: a value is live
 *   from the node that writes it to the last node that reads it (a read by
 *   a fused member counts at its group's kernel).  The loss and grad_norm
 *   stay live to the end: the runtime reads them after the step.
 *
 * The ACT intervals are packed first-fit by offset in order of
 * definition.  Intervals are inclusive at both ends, so a kernel's output
 * never shares bytes with an input that dies at that same kernel: kernels
 * may read their inputs after writing part of their output.
 */
#include "passes/memplan.h"
#include "passes/target.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

const char *pass_memplan_arena_name(int arena)
{
	static const char *names[MEMPLAN_ARENA_COUNT] = { "param", "opt", "grad", "act", "input" };
	return arena >= 0 && arena < MEMPLAN_ARENA_COUNT ? names[arena] : "none";
}

static int64_t align_up(int64_t x)
{
	return (x + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN;
}

/* Free bytes [off, end) between two live blocks (or below the first):
 * kept sorted by offset, nonempty, and never touching one another. */
typedef struct Hole {
	int64_t off, end;
} Hole;

/* The free space of an arena being packed: the holes, the top (the end
 * of the highest live block; everything above is free) and a bound on
 * the largest hole, so that a block no hole can take goes to the top
 * without a scan. */
typedef struct Free {
	Hole *holes;
	int nholes;
	int64_t top;
	int64_t most; /* no hole is bigger */
} Free;

/* Returns [off, end) to the free space: it joins the holes next to it, or
 * lowers the top when it was the highest block. */
static void release(Free *f, int64_t off, int64_t end)
{
	Hole *holes = f->holes;
	int nh = f->nholes;
	if (end == f->top) {
		if (nh > 0 && holes[nh - 1].end == off) {
			f->top = holes[nh - 1].off;
			f->nholes = nh - 1;
		} else {
			f->top = off;
		}
		return;
	}
	/* p: the first hole above the block (none overlaps it); a search
	 * without branches on the data, which would mispredict half the time */
	int p = 0;
	if (nh > 0) {
		const Hole *h = holes;
		int len = nh;
		while (len > 1) {
			int half = len / 2;
			h = h[half].off < off ? h + half : h;
			len -= half;
		}
		p = (int)(h - holes) + (h->off < off);
	}
	bool left = p > 0 && holes[p - 1].end == off;
	bool right = p < nh && holes[p].off == end;
	Hole *grown;
	if (left && right) {
		holes[p - 1].end = holes[p].end;
		memmove(&holes[p], &holes[p + 1], sizeof *holes * (size_t)(nh - p - 1));
		f->nholes = nh - 1;
		grown = &holes[p - 1];
	} else if (left) {
		holes[p - 1].end = end;
		grown = &holes[p - 1];
	} else if (right) {
		holes[p].off = off;
		grown = &holes[p];
	} else {
		memmove(&holes[p + 1], &holes[p], sizeof *holes * (size_t)(nh - p));
		holes[p] = (Hole){ off, end };
		f->nholes = nh + 1;
		grown = &holes[p];
	}
	if (grown->end - grown->off > f->most)
		f->most = grown->end - grown->off;
}

/* pass_memplan_pack over items in order of `from` (item r is written
 * r-th).  die[r] > r is the first item written after r's last use (n:
 * none), when r's bytes become free; dying[] lists the items by die,
 * ascending.  holes has room for n.
 *
 * First fit by offset looks only at the free space, not at the live
 * blocks: the holes between live blocks (most live blocks touch their
 * neighbours, so there are far fewer holes than blocks) and the top,
 * above the highest live block, where everything is free.  A block
 * placed in a hole takes its front; a block that dies merges into the
 * holes beside it or lowers the top.  This gives the offsets a scan of
 * the live blocks in offset order would: a hole is exactly a gap between
 * two neighbouring live blocks (or below the first), and it is taken at
 * the end of the block before it. */
static int64_t pack_core(int n, const int64_t *bytes, const int *die, const int *dying,
                         int64_t *offset, Hole *holes)
{
	Free f = { holes, 0, 0, 0 };
	int64_t peak = 0;
	int dp = 0;
	for (int r = 0; r < n; r++) {
		for (; dp < n && die[dying[dp]] <= r; dp++) {
			int k = dying[dp];
			int64_t size = align_up(bytes[k]);
			if (size)
				release(&f, offset[k], offset[k] + size);
		}
		int64_t need = align_up(bytes[r]);
		if (need == 0) {
			offset[r] = 0;
			continue;
		}
		int h = f.nholes;
		if (need <= f.most) {
			h = 0;
			while (h < f.nholes && holes[h].end - holes[h].off < need)
				h++;
			if (h == f.nholes)
				f.most = need - 1;
		}
		int64_t at;
		if (h < f.nholes) {
			at = holes[h].off;
			holes[h].off += need;
			if (holes[h].off == holes[h].end) {
				memmove(&holes[h], &holes[h + 1],
				        sizeof *holes * (size_t)(f.nholes - h - 1));
				f.nholes--;
			}
		} else {
			at = f.top;
			f.top += need;
		}
		offset[r] = at;
		if (at + need > peak)
			peak = at + need;
	}
	return peak;
}

int64_t pass_memplan_pack(int n, const int *from, const int *to, const int64_t *bytes,
                          int64_t *offset)
{
	/* order of definition; ties keep index order so the plan is stable */
	size_t cap = (size_t)(n ? n : 1);
	int *ord = malloc(sizeof(int) * cap), *die = malloc(sizeof(int) * cap);
	int *dying = calloc(cap, sizeof(int)), *start = calloc(cap + 2, sizeof(int));
	int64_t *b = calloc(cap, sizeof(int64_t)), *o = malloc(sizeof(int64_t) * cap);
	Hole *holes = malloc(sizeof(Hole) * cap);
	int64_t peak = -1;
	if (ord && die && dying && start && b && o && holes) {
		for (int i = 0; i < n; i++)
			ord[i] = i;
		/* insertion sort by `from`: node order is nearly sorted already */
		for (int i = 1; i < n; i++) {
			int v = ord[i], j = i - 1;
			while (j >= 0 && from[ord[j]] > from[v]) {
				ord[j + 1] = ord[j];
				j--;
			}
			ord[j + 1] = v;
		}
		/* item r dies before the first later item written after to */
		for (int r = 0; r < n; r++) {
			int t = to[ord[r]], lo = r + 1, hi = n;
			while (lo < hi) {
				int mid = lo + (hi - lo) / 2;
				if (from[ord[mid]] <= t)
					lo = mid + 1;
				else
					hi = mid;
			}
			die[r] = lo;
			start[lo + 1]++;
			b[r] = bytes[ord[r]];
		}
		for (int q = 1; q <= n + 1; q++)
			start[q] += start[q - 1];
		for (int r = 0; r < n; r++)
			dying[start[die[r]]++] = r;
		peak = pack_core(n, b, die, dying, o, holes);
		for (int r = 0; r < n; r++)
			offset[ord[r]] = o[r];
	}
	free(ord);
	free(die);
	free(dying);
	free(start);
	free(b);
	free(o);
	free(holes);
	return peak;
}

static int arena_of_role(IrRole r)
{
	switch (r) {
	case IR_ROLE_PARAM: return MEMPLAN_ARENA_PARAM;
	case IR_ROLE_OPT_STATE: return MEMPLAN_ARENA_OPT;
	case IR_ROLE_INPUT: return MEMPLAN_ARENA_INPUT;
	case IR_ROLE_GRAD: return MEMPLAN_ARENA_GRAD;
	default: return MEMPLAN_ARENA_ACT;
	}
}

/* The program (pp coordinate) a node is planned in. */
static int seg_of(const MemPlan *mp, const IrModule *m, const IrNode *n)
{
	int s = ir_stage(m, n);
	return mp->nstages > 1 && s >= 0 && s < mp->nstages ? s : 0;
}

/* What pass_memplan's one walk over the nodes keeps per node (Node.fl),
 * so that deciding owners, liveness and offsets reads compact arrays
 * rather than ~500-byte IrNodes. */
enum {
	NF_NOSTORE = 1 << 0,   /* fused away or folded: no storage */
	NF_FOLDED = 1 << 1,    /* a folded transpose: its readers read op0 */
	NF_ALIAS = 1 << 2,     /* in-place or a send: shares op0's storage */
	NF_INPLACE = 1 << 3,
	NF_RESHAPE = 1 << 4,   /* a reshape that may share op0's storage */
	NF_COLL_READ = 1 << 5, /* read by a collective */
};

typedef struct Node {
	int op0;      /* operand 0, or -1 */
	int ident;    /* an owner's MemPlanBuf.ident */
	int last;     /* the last position reading it (n: lives to the end) */
	uint8_t fl;   /* NF_* */
	uint8_t arena;
	uint8_t stage; /* IrNode.stage, 255 where outside 0 .. 254 */
} Node;

_Static_assert(IR_OP_COUNT <= 256 && IR_DTYPE_COUNT <= 256 && IR_ROLE_COUNT <= 256,
               "a MemPlanNode holds an op, a dtype and a role in a byte each");

/* The bytes of a value with storage of its own; dsize[] holds
 * ir_dtype_size per dtype. */
static int64_t storage_bytes(const IrNode *n, const MemPlanNode *nd, const int *dsize)
{
	if (nd->op == IR_OP_GRAD_NORM && nd->nops > PASS_MAX_ACTION_ARGS - 1)
		return MEMPLAN_GNORM_BYTES;
	int64_t b = nd->numel * (nd->dtype < IR_DTYPE_COUNT ? dsize[nd->dtype] : 0);
	if (n->op == IR_OP_ATTENTION) /* attn.lse: the rows' log-sum-exps after it */
		b += 4 * ir_attn_lse_count(n);
	return b;
}

bool pass_memplan(const IrModule *m, const FusePlan *fp, Arena *a, Diag *d, MemPlan *mp)
{
	int n = m->nnodes;
	memset(mp, 0, sizeof *mp);
	mp->n = n;
	mp->nstages = 1;
	mp->buf = arena_alloc_raw(a, sizeof(MemPlanBuf) * (size_t)(n + 1));
	Node *nodes = arena_alloc_raw(a, sizeof(Node) * (size_t)(n + 1));
	int *act = arena_alloc_raw(a, sizeof(int) * (size_t)(n + 1)); /* ACT owners */
	uint8_t *actseg = arena_alloc_raw(a, sizeof(uint8_t) * (size_t)(n + 1)); /* their stages */
	int *alias = arena_alloc_raw(a, sizeof(int) * (size_t)(n + 1));
	MemPlanNode *rec = mp->node = arena_alloc_raw(a, sizeof *rec * (size_t)(n + 1));
	size_t opcap = 2 * (size_t)n + 64, used = 0;
	int *opnd = mp->opnd = arena_alloc_raw(a, sizeof(int) * opcap);
	if (!mp->buf || !nodes || !act || !actseg || !alias || !rec || !opnd) {
		diag_error(d, (SrcLoc){0}, "out of memory planning memory");
		return false;
	}
	memset(&mp->buf[n], 0, sizeof mp->buf[n]);
	memset(&rec[n], 0, sizeof rec[n]);
	/* the op flags (as NF_ bits) and dtype sizes read per node, looked
	 * up once rather than called for per node */
	unsigned char opfl[IR_OP_COUNT];
	for (int op = 0; op < IR_OP_COUNT; op++)
		opfl[op] = (ir_op_flags((IrOp)op) & OPF_COLL ? NF_COLL_READ : 0) |
		           (ir_op_flags((IrOp)op) & OPF_INPLACE ? NF_INPLACE : 0);
	int dsize[IR_DTYPE_COUNT];
	for (int t = 0; t < IR_DTYPE_COUNT; t++)
		dsize[t] = ir_dtype_size((IrDtype)t);
	/* 1. The one walk over the nodes, which records them on the way
	 * (MemPlan.node, for the code generator).  A value's last read is
	 * its readers' latest position (a fused member reads at its group's
	 * kernel, a folded transpose's readers read its source); which
	 * storage a read lands in is settled once owners are, below, since a
	 * reshape shares its operand's storage unless some later collective
	 * reads it (a collective takes its operand's shape from the runtime's
	 * buffer table: comm_run_action gathers along a dim of it). */
	int nstages = 1;
	for (int i = 0; i < n; i++) {
		const IrNode *u = m->nodes[i];
		int nops = u->nops > 0 ? u->nops : 0;
		if (used + (size_t)nops > opcap) {
			opcap = 2 * (used + (size_t)nops);
			int *grown = arena_alloc_raw(a, sizeof(int) * opcap);
			if (!grown) {
				diag_error(d, (SrcLoc){0}, "out of memory planning memory");
				return false;
			}
			memcpy(grown, opnd, sizeof(int) * used);
			opnd = mp->opnd = grown;
		}
		MemPlanNode *nd = &rec[i];
		*nd = (MemPlanNode){
			.name = u->name,
			.numel = ir_node_numel(u),
			.ops = (int)used,
			.nops = nops,
			.stage = ir_stage(m, u),
			.mb = ir_mb(m, u),
			.op = (uint8_t)u->op,
			.dtype = (uint8_t)u->dtype,
			.role = (uint8_t)u->role,
			.phase = (int8_t)ir_phase(m, u),
			.fl = ir_link(m, u) == IR_LINK_GRAD_NORM ? MEMPLAN_N_GRAD_NORM : 0,
		};
		int *ops = &opnd[used];
		for (int k = 0; k < nops; k++) /* mostly 1 or 2: no memcpy call */
			ops[k] = u->ops[k];
		used += (size_t)nops;
		Node *x = &nodes[i];
		unsigned flags = nd->op < IR_OP_COUNT ? opfl[nd->op] : 0;
		if (nd->phase >= 0 && nd->stage + 1 > nstages)
			nstages = nd->stage + 1;
		x->stage = nd->stage >= 0 && nd->stage < 255 ? (uint8_t)nd->stage : 255;
		x->op0 = nd->nops > 0 ? ops[0] : -1;
		x->ident = i;
		x->fl = 0;
		x->arena = 0;
		if (flags & NF_COLL_READ)
			for (int k = 0; k < nd->nops; k++)
				nodes[ops[k]].fl |= NF_COLL_READ;
		int pos = fp && fp->root[i] >= 0 ? fp->root[i] : i;
		x->last = pos;
		if (fp && fp->folded[i]) {
			x->fl |= NF_NOSTORE | NF_FOLDED;
			continue;
		}
		for (int k = 0; k < nd->nops; k++) {
			int o = ops[k];
			if (nodes[o].fl & NF_FOLDED)
				o = nodes[o].op0;
			if (nodes[o].last < pos)
				nodes[o].last = pos;
		}
		bool to_end = i == m->loss || nd->role == IR_ROLE_LOSS || (nd->fl & MEMPLAN_N_GRAD_NORM);
		if (to_end)
			x->last = n;
		if (fp && fp->internal[i]) {
			x->fl |= NF_NOSTORE;
			continue;
		}
		x->arena = (uint8_t)arena_of_role((IrRole)nd->role);
		/* an in-place result or a send has storage of its own only
		 * when its operand has none: its bytes wait for that (step 2) */
		if ((flags & NF_INPLACE) || nd->op == IR_OP_SEND) {
			x->fl |= NF_ALIAS | (flags & NF_INPLACE);
			/* a weight gradient accumulated in place up to grad.P
			 * (passes/accumulate.c): the chain's storage is the
			 * gradient's, persistent, from its first GEMM on */
			if (nd->op == IR_OP_MATMUL_WGRAD_ACC && x->arena != MEMPLAN_ARENA_ACT) {
				int r = x->op0;
				while (r >= 0 && (nodes[r].fl & NF_ALIAS))
					r = nodes[r].op0;
				if (r < 0 || (nodes[r].fl & (NF_NOSTORE | NF_RESHAPE)) ||
				    nodes[r].arena != MEMPLAN_ARENA_ACT) {
					diag_internal(d, u->loc, "memplan: %%%d accumulates into %%%d, "
					              "which has no activation storage of its own", i, r);
					return false;
				}
				nodes[r].arena = x->arena;
				nodes[r].ident = i;
			}
			continue;
		}
		if (nd->op == IR_OP_RESHAPE && nd->role == IR_ROLE_ACT && !to_end) {
			const MemPlanNode *src = &rec[x->op0];
			if (nd->numel == src->numel && nd->dtype == src->dtype)
				x->fl |= NF_RESHAPE;
		}
	}
	if (nstages > MEMPLAN_MAX_STAGES) {
		diag_error(d, (SrcLoc){0}, "memplan: more than %d pipeline stages",
		           MEMPLAN_MAX_STAGES);
		return false;
	}
	mp->nstages = nstages;
	/* 2. Storage owners, in node order: in-place results and sends share
	 * operand 0's storage, and so do reshapes of activations (a reshape
	 * of a row-major tensor is the same bytes) that no collective reads.
	 * An owner's live range ends at the last read of any value sharing
	 * it.  Persistent arenas are packed one after another per stage;
	 * ACT owners are listed for step 3. */
	int64_t next[MEMPLAN_MAX_STAGES][MEMPLAN_ARENA_COUNT];
	memset(next, 0, sizeof(next[0]) * (size_t)nstages);
	int nact = 0, nalias = 0;
	int stcount[MEMPLAN_MAX_STAGES + 1] = { 0 };
	for (int i = 0; i < n; i++) {
		const Node *x = &nodes[i];
		MemPlanBuf *b = &mp->buf[i];
		b->arena = -1;
		b->offset = 0;
		b->bytes = 0;
		b->owner = -1;
		b->live_from = b->live_to = i;
		b->ident = x->ident;
		if (x->fl & NF_NOSTORE)
			continue;
		if (x->op0 >= 0 &&
		    ((x->fl & NF_ALIAS) || (x->fl & (NF_RESHAPE | NF_COLL_READ)) == NF_RESHAPE)) {
			int o = mp->buf[x->op0].owner;
			if (o >= 0) {
				b->owner = o;
				if (mp->buf[o].live_to < x->last)
					mp->buf[o].live_to = x->last;
				alias[nalias++] = i;
				continue;
			}
			if (x->fl & NF_INPLACE) {
				const IrNode *nd = m->nodes[i];
				diag_internal(d, nd->loc,
				           "memplan: in-place %s %%%d updates a value without storage",
				           ir_op_name(nd->op), i);
				return false;
			}
		}
		b->owner = i;
		b->arena = x->arena;
		b->bytes = storage_bytes(m->nodes[i], &rec[i], dsize);
		if (b->live_to < x->last)
			b->live_to = x->last;
		int s = nstages > 1 && x->stage < nstages ? x->stage : 0;
		if (b->arena == MEMPLAN_ARENA_ACT) {
			actseg[nact] = (uint8_t)s;
			act[nact++] = i;
			stcount[s + 1]++;
			if (s == 0)
				mp->act_unshared += align_up(b->bytes);
		} else {
			b->offset = next[s][b->arena];
			next[s][b->arena] += align_up(b->bytes);
		}
	}
	/* 3. ACT offsets, per stage.  A stage's items are its owners in node
	 * order (a stable counting sort of the list by stage), so `from`
	 * rises.  When each item's bytes free up (before the first later item
	 * of its stage written after its last read) comes from one merge, for
	 * all stages at once, of the items by last read (a counting sort by
	 * position) with the owners in node order. */
	for (int s = 0; s < nstages; s++)
		stcount[s + 1] += stcount[s];
	size_t cap = (size_t)(nact + 1);
	int *idx = arena_alloc_raw(a, sizeof(int) * cap);
	uint8_t *iseg = arena_alloc_raw(a, sizeof(uint8_t) * cap);
	int *to = arena_alloc_raw(a, sizeof(int) * cap);
	int64_t *bytes = arena_alloc_raw(a, sizeof(int64_t) * cap);
	int64_t *off = arena_alloc_raw(a, sizeof(int64_t) * cap);
	int *byto = arena_alloc_raw(a, sizeof(int) * cap);
	int *die = arena_alloc_raw(a, sizeof(int) * cap);
	int *dying = arena_alloc_raw(a, sizeof(int) * cap);
	Hole *holes = arena_alloc_raw(a, sizeof(Hole) * cap);
	int *tstart = arena_alloc(a, sizeof(int) * (size_t)(n + 2));
	if (!idx || !iseg || !to || !bytes || !off || !byto || !die || !dying || !holes ||
	    !tstart) {
		diag_error(d, (SrcLoc){0}, "out of memory planning memory");
		return false;
	}
	int fill[MEMPLAN_MAX_STAGES];
	memcpy(fill, stcount, sizeof(int) * (size_t)nstages);
	for (int j = 0; j < nact; j++) {
		int k = fill[actseg[j]]++;
		idx[k] = act[j];
		iseg[k] = actseg[j];
	}
	for (int j = 0; j < nact; j++) {
		const MemPlanBuf *b = &mp->buf[idx[j]];
		to[j] = b->live_to;
		bytes[j] = b->bytes;
		tstart[to[j] + 1]++;
	}
	for (int p = 1; p <= n + 1; p++)
		tstart[p] += tstart[p - 1];
	for (int j = 0; j < nact; j++)
		byto[tstart[to[j]]++] = j;
	int seen[MEMPLAN_MAX_STAGES] = { 0 };
	memcpy(fill, stcount, sizeof(int) * (size_t)nstages);
	for (int k = 0, w = 0; k < nact; k++) {
		int j = byto[k], s = iseg[j];
		for (; w < nact && act[w] <= to[j]; w++)
			seen[actseg[w]]++;
		die[j] = seen[s];
		dying[fill[s]++] = j - stcount[s];
	}
	for (int s = 0; s < nstages; s++) {
		int lo = stcount[s], cnt = stcount[s + 1] - lo;
		int64_t peak = pack_core(cnt, bytes + lo, die + lo, dying + lo, off + lo, holes);
		for (int j = lo; j < lo + cnt; j++)
			mp->buf[idx[j]].offset = off[j];
		next[s][MEMPLAN_ARENA_ACT] = peak;
		for (int k = 0; k < MEMPLAN_ARENA_COUNT; k++) {
			mp->stage_arena_bytes[s][k] = next[s][k];
			if (next[s][k] > mp->arena_bytes[k])
				mp->arena_bytes[k] = next[s][k];
		}
	}
	/* 4. aliases take their owner's place */
	for (int j = 0; j < nalias; j++) {
		MemPlanBuf *b = &mp->buf[alias[j]];
		const MemPlanBuf *o = &mp->buf[b->owner];
		b->arena = o->arena;
		b->offset = o->offset;
		b->bytes = o->bytes;
		b->live_from = o->live_from;
		b->live_to = o->live_to;
	}
	return true;
}

int pass_memplan_inflight(const IrModule *m, const MemPlan *mp, int stage)
{
	/* per micro-batch, the span from its first forward activation's
	 * definition to the last read of any of them */
	int nmb = 0;
	for (int i = 0; i < m->nnodes; i++)
		if (ir_mb(m, m->nodes[i]) + 1 > nmb)
			nmb = ir_mb(m, m->nodes[i]) + 1;
	if (nmb == 0)
		return 0;
	int *lo = malloc(sizeof(int) * (size_t)nmb), *hi = malloc(sizeof(int) * (size_t)nmb);
	if (!lo || !hi) {
		free(lo);
		free(hi);
		return -1;
	}
	for (int k = 0; k < nmb; k++)
		lo[k] = INT_MAX, hi[k] = -1;
	for (int i = 0; i < m->nnodes; i++) {
		const IrNode *n = m->nodes[i];
		const MemPlanBuf *b = &mp->buf[i];
		bool fwd = ir_phase(m, n) >= 0 ? ir_phase(m, n) == IR_PHASE_FORWARD : i <= m->loss;
		/* scalars (a micro-batch's loss, summed by one fused kernel at
		 * the end) are not activations */
		if (ir_mb(m, n) < 0 || !fwd || b->owner != i || b->arena != MEMPLAN_ARENA_ACT ||
		    seg_of(mp, m, n) != stage || n->op == IR_OP_SEND || n->rank == 0)
			continue;
		if (b->live_from < lo[ir_mb(m, n)])
			lo[ir_mb(m, n)] = b->live_from;
		if (b->live_to > hi[ir_mb(m, n)])
			hi[ir_mb(m, n)] = b->live_to;
	}
	int most = 0;
	for (int k = 0; k < nmb; k++) {
		if (hi[k] < 0)
			continue;
		int c = 0;
		for (int j = 0; j < nmb; j++)
			c += hi[j] >= 0 && lo[j] <= lo[k] && lo[k] <= hi[j];
		if (c > most)
			most = c;
	}
	free(lo);
	free(hi);
	return most;
}
