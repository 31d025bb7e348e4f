/* pipeline_simulate.c - pass "pipeline": the stage programs run against
 * each other before any is emitted, so a schedule that would deadlock or
 * mismatch is a compile-time error, never a hang.
 */
#include "passes/pipeline_impl.h"

#include <stdio.h>

/* Runs the P programs against each other: sends are buffered, a receive
 * waits for its message (which must be the one it expects), a pp
 * collective waits for every rank.  Reports a deadlock as an error. */
bool pl_simulate(Pl *p)
{
	int P = p->P;
	size_t np = P > 0 && P <= 64 ? (size_t)P : 1;
	Arena t; /* this step's scratch, freed at its end */
	arena_init(&t);
	int *pc = arena_alloc(&t, sizeof(int) * np);
	/* per (from, to) a FIFO of values in flight, q[qoff[k] ..) with
	 * room for the pair's sends (not for every entry of every rank per
	 * pair: P * P times the whole program) */
	int *qh = arena_alloc(&t, sizeof(int) * np * np);
	int *qt = arena_alloc(&t, sizeof(int) * np * np);
	size_t *qoff = arena_alloc(&t, sizeof(size_t) * (np * np + 1));
	int *q = NULL;
	if (qoff) {
		/* pl_order_sends left as many sends per pair as it counted */
		for (size_t k = 0; k < np * np; k++)
			qoff[k + 1] = qoff[k] + (size_t)(P > 0 ? p->ns[k] : 0);
		q = arena_alloc_raw(&t, sizeof(int) * (qoff[np * np] ? qoff[np * np] : 1));
	}
	if (!pc || !qh || !qt || !qoff || !q) {
		arena_free(&t);
		return pl_oom(p);
	}
	bool ok = true;
	for (;;) {
		bool moved = false, done = true;
		for (int r = 0; r < P; r++) {
			EntList *l = &p->list[r];
			while (pc[r] < l->n) {
				Ent *e = &l->e[pc[r]];
				if (e->kind == E_SEND) {
					int k = r * P + e->peer;
					q[qoff[k] + (size_t)qt[k]++] = e->node;
				} else if (e->kind == E_RECV || e->kind == E_SYNC) {
					int k = e->peer * P + r;
					if (qh[k] == qt[k])
						break;
					int v = q[qoff[k] + (size_t)qh[k]++];
					if (v != pl_recv_key(p, e)) {
						pass_fault(p->m, p->d, (SrcLoc){0}, "pipeline: pp rank "
						           "%d expects %%%d from rank %d but gets %%%d", r,
						           pl_recv_key(p, e), e->peer, v);
						ok = false;
						goto out;
					}
				} else if (e->kind == E_LOSS ||
				           (e->kind == E_NODE && (p->nf[e->node] & NF_PPCOLL))) {
					/* every rank at this same collective? */
					bool all = true;
					for (int s = 0; s < P && all; s++) {
						const EntList *ls = &p->list[s];
						all = pc[s] < ls->n && ls->e[pc[s]].kind == e->kind &&
						      ls->e[pc[s]].node == e->node;
					}
					if (!all)
						break;
					for (int s = 0; s < P; s++)
						if (s != r)
							pc[s]++;
				}
				pc[r]++;
				moved = true;
			}
			if (pc[r] < l->n)
				done = false;
		}
		if (done)
			break;
		if (!moved) {
			char where[1024];
			int w = 0;
			for (int r = 0; r < P && w < (int)sizeof where - 64; r++) {
				const EntList *l = &p->list[r];
				const Ent *e = pc[r] < l->n ? &l->e[pc[r]] : NULL;
				const IrNode *x = e ? p->m->nodes[pl_recv_key(p, e)] : NULL;
				w += snprintf(where + w, sizeof where - (size_t)w,
				              "%s pp rank %d at %s %%%d (%s%s%s, micro-batch %d)",
				              r ? ";" : "", r, !e ? "the end" : e->kind == E_RECV ||
				              e->kind == E_SYNC ? "the recv of" : "the pp collective",
				              x ? x->id : -1, x ? ir_op_name(x->op) : "", x && x->name ? " " : "",
				              x && x->name ? x->name : "", x ? ir_mb(p->m, x) : -1);
			}
			pass_fault(p->m, p->d, (SrcLoc){0}, "pipeline: the stage programs "
			           "deadlock (%s)", where);
			ok = false;
			break;
		}
	}
out:
	arena_free(&t);
	if (!ok)
		p->failed = true;
	return ok;
}
