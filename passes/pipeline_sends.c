/* pipeline_sends.c - pass "pipeline": per pair of ranks, the sender's
 * sends in the order the receiver receives them (see pl_order_sends).
 */
#include "passes/pipeline_impl.h"

/* Per pair of ranks, the sender's sends in the order the receiver
 * receives: a send may move later, never before its value.
 *
 * For sender a and receiver b, a's sends to b are taken out and put back,
 * in b's order, each right after the node that makes it (and the ones
 * queued behind it) available.  Pairs do not interact -- only nodes make
 * values available, and a pair moves only its own sends -- so one walk of
 * a's list does every b: after a node, the sends to the largest b first,
 * where doing the pairs one by one, b ascending, would have put them (a
 * later pair's sends go right after the node, in front of an earlier
 * pair's). */
bool pl_order_sends(Pl *p)
{
	int P = p->P;
	size_t np = (size_t)P * (size_t)P;
	/* per (a, b), at a * P + b: want[woff[a * P + b] ..) the values b
	 * receives from a, in b's order (ns and nq: see Pl) */
	const int *ns = p->ns, *nq = p->nq;
	Arena t; /* this step's scratch, freed at its end */
	arena_init(&t);
	int *woff = arena_alloc(&t, sizeof(int) * (np + 1));
	int *cur = arena_alloc(&t, sizeof(int) * np);
	bool *have = arena_alloc(&t, sizeof(bool) * (size_t)p->nn);
	uint64_t *waiting = arena_alloc(&t, sizeof(uint64_t) * (size_t)p->nn);
	int *want = NULL;
	Ent *out = NULL;
	bool ok = woff && cur && have && waiting;
	int maxn = 1;
	if (ok) {
		for (size_t k = 0; k < np; k++)
			woff[k + 1] = woff[k] + nq[k];
		/* a's list plus every value it is asked for: room for a list
		 * whose sends and receives do not match, before that is
		 * reported */
		for (int a = 0; a < P; a++) {
			int n = p->list[a].n + woff[(size_t)(a + 1) * P] - woff[(size_t)a * P];
			if (n > maxn)
				maxn = n;
		}
		want = arena_alloc_raw(&t, sizeof(int) * (size_t)(woff[np] ? woff[np] : 1));
		out = arena_alloc_raw(&t, sizeof(Ent) * (size_t)maxn);
		ok = want && out;
	}
	if (ok) {
		memcpy(cur, woff, sizeof(int) * np);
		for (int b = 0; b < P; b++) {
			const EntList *lb = &p->list[b];
			for (int j = 0; j < lb->n; j++) {
				const Ent *e = &lb->e[j];
				if (e->kind == E_RECV || e->kind == E_SYNC)
					want[cur[(size_t)e->peer * P + b]++] = pl_recv_key(p, e);
			}
		}
	}
	for (int a = 0; ok && a < P && !p->failed; a++) {
		EntList *la = &p->list[a];
		const size_t row = (size_t)a * P;
		memcpy(cur + row, woff + row, sizeof(int) * (size_t)P);
		/* Only a node can make a queue's front available, and it makes
		 * available only the queues whose front it is: waiting[v] has
		 * bit b when queue (a, b)'s front is v, not had yet. */
		for (int b = 0; b < P; b++) {
			size_t k = row + (size_t)b;
			if (b != a && cur[k] < woff[k + 1])
				waiting[want[cur[k]]] |= 1ull << b;
		}
		int no = 0;
		for (int j = 0; j < la->n; j++) {
			Ent e = la->e[j];
			if (e.kind == E_SEND && e.peer != a)
				continue;
			out[no++] = e;
			if (e.kind != E_NODE)
				continue;
			have[e.node] = true;
			uint64_t wake = waiting[e.node];
			if (!wake)
				continue;
			waiting[e.node] = 0;
			/* the largest b first, as above */
			while (wake) {
				int b = 63 - __builtin_clzll(wake);
				wake &= ~(1ull << b);
				size_t k = row + (size_t)b;
				while (cur[k] < woff[k + 1] && have[want[cur[k]]])
					out[no++] = (Ent){ E_SEND, want[cur[k]++], b };
				if (cur[k] < woff[k + 1])
					waiting[want[cur[k]]] |= 1ull << b;
			}
		}
		/* what no node of a's made available (an error below) */
		for (int b = 0; b < P; b++) {
			size_t k = row + (size_t)b;
			if (b != a && cur[k] < woff[k + 1])
				waiting[want[cur[k]]] = 0;
		}
		for (int b = 0; b < P; b++) {
			size_t k = row + (size_t)b;
			if (a == b)
				continue;
			if (ns[k] != nq[k]) {
				pass_fault(p->m, p->d, (SrcLoc){0}, "pipeline: pp rank %d sends %d "
				           "values to rank %d, which receives %d", a, ns[k], b, nq[k]);
				p->failed = true;
				break;
			}
			if (cur[k] < woff[k + 1]) {
				pass_fault(p->m, p->d, (SrcLoc){0}, "pipeline: pp rank %d receives "
				           "%%%d from rank %d, which never computes it", b, want[cur[k]], a);
				p->failed = true;
				break;
			}
		}
		if (!p->failed)
			memcpy(la->e, out, sizeof(Ent) * (size_t)no);
		for (int j = 0; j < no; j++)
			if (out[j].kind == E_NODE)
				have[out[j].node] = false;
	}
	arena_free(&t);
	if (!ok)
		return pl_oom(p);
	return !p->failed;
}
