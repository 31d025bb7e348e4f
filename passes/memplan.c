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
 *   bytes);
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
#include "memplan.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

const char *pass_memplan_arena_name(int arena)
{
	static const char *names[DTM_ARENA_COUNT] = { "param", "opt", "grad", "act", "input" };
	return arena >= 0 && arena < DTM_ARENA_COUNT ? names[arena] : "none";
}

static int64_t align_up(int64_t x)
{
	return (x + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN;
}

typedef struct Block {
	int64_t off, end; /* [off, end); when it dies is the heap's (Death) */
} Block;

/* The first-fit scan skips live[] a chunk at a time where no gap inside
 * is big enough: gapmax[c] is the largest gap in front of a block of
 * chunk c, live[c * GAP_CHUNK ..) (the first one's measured from the end
 * of the block before it). */
#define GAP_CHUNK 32

static int64_t chunk_gap(const Block *live, int c)
{
	int64_t most = 0;
	for (int k = c * GAP_CHUNK; k < (c + 1) * GAP_CHUNK; k++) {
		int64_t g = live[k].off - (k ? live[k - 1].end : 0);
		if (g > most)
			most = g;
	}
	return most;
}

/* A live block's death (its last use) and offset: a min-heap by death. */
typedef struct Death {
	int to;
	int64_t off;
} Death;

static void heap_push(Death *h, int *n, Death d)
{
	int k = (*n)++;
	while (k > 0 && h[(k - 1) / 2].to > d.to) {
		h[k] = h[(k - 1) / 2];
		k = (k - 1) / 2;
	}
	h[k] = d;
}

static void heap_pop(Death *h, int *n)
{
	Death last = h[--*n];
	int k = 0;
	for (;;) {
		int c = 2 * k + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && h[c + 1].to < h[c].to)
			c++;
		if (h[c].to >= last.to)
			break;
		h[k] = h[c];
		k = c;
	}
	if (*n > 0)
		h[k] = last;
}

int64_t pass_memplan_pack(int n, const int *from, const int *to, const int64_t *bytes,
                          int64_t *offset)
{
	/* order of definition; ties keep index order so the plan is stable */
	int *ord = malloc(sizeof(int) * (size_t)(n ? n : 1));
	Block *live = malloc(sizeof(Block) * (size_t)(n ? n : 1));
	Death *heap = malloc(sizeof(Death) * (size_t)(n ? n : 1));
	int64_t *gapmax = malloc(sizeof(int64_t) * (size_t)(n / GAP_CHUNK + 1));
	if (!ord || !live || !heap || !gapmax) {
		free(ord);
		free(live);
		free(heap);
		free(gapmax);
		return -1;
	}
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
	/* Live blocks stay sorted by offset (they are disjoint, so the order
	 * is unique): dropping the dead keeps it, and each new block goes in
	 * at the place first fit found for it.  Offsets and sizes are
	 * aligned, so every end is too.  Two shortcuts keep this near linear
	 * when thousands of activations are live: the dead are found through
	 * a heap by death (and removed one by one, found by offset), and
	 * live[0 .. pre), packed from 0 without a gap, is skipped by the
	 * first-fit scan (it has no room for anything). */
	int nlive = 0, pre = 0, nheap = 0, valid = 0; /* gapmax[0 .. valid) are current */
	int64_t peak = 0;
	for (int r = 0; r < n; r++) {
		int i = ord[r];
		/* drop blocks dead before this one is written */
		while (nheap > 0 && heap[0].to < from[i]) {
			int64_t off = heap[0].off;
			heap_pop(heap, &nheap);
			int lo = 0, hi = nlive - 1;
			while (lo < hi) {
				int mid = lo + (hi - lo) / 2;
				if (live[mid].off < off)
					lo = mid + 1;
				else
					hi = mid;
			}
			memmove(&live[lo], &live[lo + 1], sizeof *live * (size_t)(nlive - lo - 1));
			nlive--;
			if (lo < pre)
				pre = lo;
			if (lo / GAP_CHUNK < valid)
				valid = lo / GAP_CHUNK;
		}
		int64_t need = align_up(bytes[i]);
		if (need == 0) {
			offset[i] = 0;
			continue;
		}
		int64_t at = pre ? live[pre - 1].end : 0;
		while (pre < nlive && live[pre].off == at)
			at = live[pre++].end;
		/* the first gap of at least need after the prefix; whole chunks
		 * whose largest gap is smaller are skipped */
		int j = pre;
		while (j < nlive) {
			int c = j / GAP_CHUNK;
			if (j % GAP_CHUNK == 0 && j + GAP_CHUNK <= nlive) {
				for (; valid <= c; valid++)
					gapmax[valid] = chunk_gap(live, valid);
				if (gapmax[c] < need) {
					j += GAP_CHUNK;
					at = live[j - 1].end;
					continue;
				}
			}
			if (live[j].off - at >= need)
				break;
			at = live[j].end;
			j++;
		}
		offset[i] = at;
		memmove(&live[j + 1], &live[j], sizeof *live * (size_t)(nlive - j));
		live[j] = (Block){ at, at + need };
		nlive++;
		if (j / GAP_CHUNK < valid)
			valid = j / GAP_CHUNK;
		heap_push(heap, &nheap, (Death){ to[i], at });
		if (at + need > peak)
			peak = at + need;
	}
	free(ord);
	free(live);
	free(heap);
	free(gapmax);
	return peak;
}

static int arena_of_role(IrRole r)
{
	switch (r) {
	case IR_ROLE_PARAM: return DTM_ARENA_PARAM;
	case IR_ROLE_OPT_STATE: return DTM_ARENA_OPT;
	case IR_ROLE_INPUT: return DTM_ARENA_INPUT;
	case IR_ROLE_GRAD: return DTM_ARENA_GRAD;
	default: return DTM_ARENA_ACT;
	}
}

static bool lives_to_end(const IrModule *m, const IrNode *n)
{
	return n->id == m->loss || n->role == IR_ROLE_LOSS ||
	       (n->name && n->name[0] == 'g' && strcmp(n->name, "grad_norm") == 0);
}

/* The program (pp coordinate) a node is planned in. */
static int seg_of(const MemPlan *mp, const IrNode *n)
{
	return mp->nstages > 1 && n->stage >= 0 && n->stage < mp->nstages ? n->stage : 0;
}

bool pass_memplan(const IrModule *m, const FusePlan *fp, Arena *a, Diag *d, MemPlan *mp)
{
	int n = m->nnodes;
	memset(mp, 0, sizeof *mp);
	mp->n = n;
	mp->nstages = 1;
	for (int i = 0; i < n; i++)
		if (m->nodes[i]->phase >= 0 && m->nodes[i]->stage + 1 > mp->nstages)
			mp->nstages = m->nodes[i]->stage + 1;
	if (mp->nstages > MEMPLAN_MAX_STAGES) {
		diag_error(d, (SrcLoc){0}, "memplan: more than %d pipeline stages",
		           MEMPLAN_MAX_STAGES);
		return false;
	}
	mp->buf = arena_alloc(a, sizeof(MemPlanBuf) * (size_t)(n + 1));
	int *from = arena_alloc(a, sizeof(int) * (size_t)(n + 1));
	int *to = arena_alloc(a, sizeof(int) * (size_t)(n + 1));
	int *idx = arena_alloc(a, sizeof(int) * (size_t)(n + 1));
	int64_t *bytes = arena_alloc(a, sizeof(int64_t) * (size_t)(n + 1));
	int64_t *off = arena_alloc(a, sizeof(int64_t) * (size_t)(n + 1));
	if (!mp->buf || !from || !to || !idx || !bytes || !off) {
		diag_error(d, (SrcLoc){0}, "out of memory planning memory");
		return false;
	}
	/* A collective takes its operand's shape from the runtime's buffer
	 * table (comm_run_action gathers along a dim of it), so a reshape read
	 * by one keeps its own storage rather than its operand's shape. */
	bool *coll_read = arena_alloc(a, sizeof(bool) * (size_t)(n + 1));
	if (!coll_read) {
		diag_error(d, (SrcLoc){0}, "out of memory planning memory");
		return false;
	}
	memset(coll_read, 0, sizeof(bool) * (size_t)(n + 1));
	for (int i = 0; i < n; i++)
		if (ir_op_flags(m->nodes[i]->op) & OPF_COLL)
			for (int k = 0; k < m->nodes[i]->nops; k++)
				coll_read[m->nodes[i]->ops[k]] = true;
	/* 1. storage owners */
	for (int i = 0; i < n; i++) {
		const IrNode *nd = m->nodes[i];
		MemPlanBuf *b = &mp->buf[i];
		b->arena = -1;
		b->owner = -1;
		b->live_from = b->live_to = i;
		if (fp && (fp->internal[i] || fp->folded[i]))
			continue;
		int alias = -1;
		if ((ir_op_flags(nd->op) & OPF_INPLACE) || nd->op == IR_OP_SEND)
			alias = nd->ops[0]; /* a send's result is its operand */
		else if (nd->op == IR_OP_RESHAPE && nd->role == IR_ROLE_ACT && !lives_to_end(m, nd) &&
		         !coll_read[i] &&
		         ir_node_numel(nd) == ir_node_numel(m->nodes[nd->ops[0]]) &&
		         nd->dtype == m->nodes[nd->ops[0]]->dtype)
			alias = nd->ops[0];
		if (alias >= 0) {
			int o = mp->buf[alias].owner;
			if (o < 0) {
				if (ir_op_flags(nd->op) & OPF_INPLACE) {
					diag_error(d, nd->loc,
					           "internal: in-place %s %%%d updates a value without storage",
					           ir_op_name(nd->op), i);
					return false;
				}
			} else {
				b->owner = o;
				continue;
			}
		}
		b->owner = i;
		b->arena = arena_of_role(nd->role);
		b->bytes = ir_node_numel(nd) * ir_dtype_size(nd->dtype);
		if (nd->op == IR_OP_GRAD_NORM && nd->nops > DTM_MAX_ARGS - 1)
			b->bytes = MEMPLAN_GNORM_BYTES;
	}
	/* 2. liveness of ACT owners */
	for (int i = 0; i < n; i++) {
		const IrNode *u = m->nodes[i];
		if (fp && fp->folded[i])
			continue;
		int pos = fp && fp->root[i] >= 0 ? fp->root[i] : i;
		for (int k = 0; k < u->nops; k++) {
			bool tr;
			int o = pass_fuse_operand(m, fp, i, k, &tr);
			int ow = mp->buf[o].owner;
			if (ow >= 0 && mp->buf[ow].live_to < pos)
				mp->buf[ow].live_to = pos;
		}
		/* an alias's own reads are its owner's reads */
		int ow = mp->buf[i].owner;
		if (ow >= 0 && ow != i && mp->buf[ow].live_to < pos)
			mp->buf[ow].live_to = pos;
		if (lives_to_end(m, u) && ow >= 0)
			mp->buf[ow].live_to = n;
	}
	/* 3. offsets, per stage */
	for (int s = 0; s < mp->nstages; s++) {
		int64_t next[DTM_ARENA_COUNT] = { 0 };
		int nact = 0;
		for (int i = 0; i < n; i++) {
			MemPlanBuf *b = &mp->buf[i];
			if (b->owner != i || seg_of(mp, m->nodes[i]) != s)
				continue;
			if (b->arena == DTM_ARENA_ACT) {
				idx[nact] = i;
				from[nact] = b->live_from;
				to[nact] = b->live_to;
				bytes[nact] = b->bytes;
				if (s == 0)
					mp->act_unshared += align_up(b->bytes);
				nact++;
				continue;
			}
			b->offset = next[b->arena];
			next[b->arena] += align_up(b->bytes);
		}
		int64_t peak = pass_memplan_pack(nact, from, to, bytes, off);
		if (peak < 0) {
			diag_error(d, (SrcLoc){0}, "out of memory planning memory");
			return false;
		}
		for (int j = 0; j < nact; j++)
			mp->buf[idx[j]].offset = off[j];
		next[DTM_ARENA_ACT] = peak;
		for (int k = 0; k < DTM_ARENA_COUNT; k++) {
			mp->stage_arena_bytes[s][k] = next[k];
			if (next[k] > mp->arena_bytes[k])
				mp->arena_bytes[k] = next[k];
		}
	}
	/* 4. aliases take their owner's place */
	for (int i = 0; i < n; i++) {
		MemPlanBuf *b = &mp->buf[i];
		if (b->owner >= 0 && b->owner != i) {
			const MemPlanBuf *o = &mp->buf[b->owner];
			b->arena = o->arena;
			b->offset = o->offset;
			b->bytes = o->bytes;
			b->live_from = o->live_from;
			b->live_to = o->live_to;
		}
	}
	return true;
}

int pass_memplan_inflight(const IrModule *m, const MemPlan *mp, int stage)
{
	/* per micro-batch, the span from its first forward activation's
	 * definition to the last read of any of them */
	int nmb = 0;
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i]->mb + 1 > nmb)
			nmb = m->nodes[i]->mb + 1;
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
		bool fwd = n->phase >= 0 ? n->phase == IR_PHASE_FORWARD : i <= m->loss;
		/* scalars (a micro-batch's loss, summed by one fused kernel at
		 * the end) are not activations */
		if (n->mb < 0 || !fwd || b->owner != i || b->arena != DTM_ARENA_ACT ||
		    seg_of(mp, n) != stage || n->op == IR_OP_SEND || n->rank == 0)
			continue;
		if (b->live_from < lo[n->mb])
			lo[n->mb] = b->live_from;
		if (b->live_to > hi[n->mb])
			hi[n->mb] = b->live_to;
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
