/* pipeline_order.c - pass "pipeline": each rank's program in the order of
 * its schedule (see pipeline.c for the rules), as a list of entries: the
 * nodes it runs, the values it sends and receives, the loss, param syncs.
 */
#include "passes/pipeline_impl.h"

__attribute__((noinline)) bool pl_grow(Pl *p, EntList *l)
{
	int cap = l->cap ? 2 * l->cap : 256;
	Ent *e = arena_alloc_raw(&p->a, sizeof(Ent) * (size_t)cap);
	if (!e)
		return pl_oom(p);
	if (l->n)
		memcpy(e, l->e, sizeof(Ent) * (size_t)l->n);
	l->e = e;
	l->cap = cap;
	return true;
}

static void heap_push(Pl *p, int i)
{
	int *h = p->heap, k = p->nheap++;
	while (k > 0 && h[(k - 1) / 2] > i) {
		h[k] = h[(k - 1) / 2];
		k = (k - 1) / 2;
	}
	h[k] = i;
}

static int heap_pop(Pl *p)
{
	int *h = p->heap, top = h[0], n = --p->nheap, last = h[n], k = 0;
	for (;;) {
		int c = 2 * k + 1;
		if (c >= n)
			break;
		if (c + 1 < n && h[c + 1] < h[c])
			c++;
		if (h[c] >= last)
			break;
		h[k] = h[c];
		k = c;
	}
	h[k] = last;
	return top;
}

static bool place(Pl *p, int r, int i)
{
	if (p->placed[i] == p->stamp || p->failed)
		return !p->failed;
	if (p->nf[i] & NF_ITEM) {
		int work = pl_work_of(p, i);
		if (p->cur_mb != p->mb[i] || p->cur_work != work || p->cur_chunk != p->stage[i]) {
			const IrNode *n = p->m->nodes[i];
			pass_fault(p->m, p->d, n->loc, "pipeline: %s %%%d (micro-batch %d, chunk "
			           "%d) is needed before the schedule runs it", ir_op_name(n->op), i,
			           p->mb[i], p->stage[i]);
			p->failed = true;
			return false;
		}
	}
	p->placed[i] = p->stamp; /* a cycle cannot happen: operands have smaller ids */
	for (int e = p->head[i]; e >= 0; e = p->enext[e])
		if (--p->cnt[p->euser[e]] == 0)
			heap_push(p, p->euser[e]);
	EntList *l = &p->list[r];
	bool gnorm = p->nf[i] & NF_GNORM;
	for (int k = p->opstart[i]; k < p->opstart[i + 1]; k++) {
		int u = p->opv[k], h = p->home[u];
		if (h >= 0 && h != r) { /* pl_remote(u, r) */
			if (gnorm || p->recvd[u] == p->stamp)
				continue;
			p->recvd[u] = p->stamp;
			if (!pl_push(p, l, E_RECV, u, h))
				return false;
			p->nq[h * p->P + r]++;
		} else if (p->placed[u] != p->stamp && !place(p, r, u)) {
			return false;
		}
	}
	if (!pl_push(p, l, E_NODE, i, -1))
		return false;
	p->lastr[i] = r;
	/* the sends, to the ranks in order */
	for (uint64_t to = p->dest[i]; to; to &= to - 1) {
		if (!pl_push(p, l, E_SEND, i, __builtin_ctzll(to)))
			return false;
		p->ns[r * p->P + __builtin_ctzll(to)]++;
	}
	if (p->syncof[i] >= 0)
		for (uint64_t to = p->sync[p->syncof[i]]; to; to &= to - 1) {
			if (!pl_push(p, l, E_SEND, i, __builtin_ctzll(to)))
				return false;
			p->ns[r * p->P + __builtin_ctzll(to)]++;
		}
	return true;
}

/* May free node i ever run on rank r ahead of the end of the step (what
 * eager placement asks besides its operands being placed)?  Not a pp
 * collective, which every rank runs at the end; not of leaves only
 * (ZeRO-3's param all_gathers): those run when first needed, so a
 * gathered unit lives from its use, not from the step's start; and no
 * operand from another rank.  *wait gets the operands it waits for. */
static bool eager_free(const Pl *p, int i, int r, int *wait)
{
	if ((p->nf[i] & NF_PPCOLL) || !(p->nf[i] & NF_COMPUTED))
		return false;
	int c = 0;
	for (int k = p->opstart[i]; k < p->opstart[i + 1]; k++) {
		int u = p->opv[k];
		if (!pl_reads(p, i, u, r))
			continue;
		if (pl_remote(p, u, r))
			return false;
		c += p->home[u] != HOME_LEAFY;
	}
	*wait = c;
	return true;
}

bool pl_build_rank(Pl *p, int r, const SchedItem *items, int nitems, const int *loss_rank,
                   const Items *it)
{
	p->stamp = (uint8_t)(r + 1);
	/* room for about what the rank runs (its nodes and the leaves and
	 * messages around them), so the list is seldom grown */
	EntList *l = &p->list[r];
	int guess = p->onstart[r + 1] - p->onstart[r] + p->ninputs + 256;
	if (l->cap < guess) {
		Ent *e = arena_alloc_raw(&p->a, sizeof(Ent) * (size_t)guess);
		if (!e)
			return pl_oom(p);
		if (l->n)
			memcpy(e, l->e, sizeof(Ent) * (size_t)l->n);
		l->e = e;
		l->cap = guess;
	}
	/* The rank's free nodes (of no item) run as soon as their operands
	 * are here: after each item, every free node whose operands all are
	 * is placed, in node order.  Rather than testing every free node
	 * after every item, each waits on a count of its operands not placed
	 * yet (place() counts down) and joins a min-heap of ids when none is
	 * left.  A node placed frees only nodes after it, so taking the heap
	 * in order places what one walk of the free nodes in order would. */
	p->nheap = 0;
	p->nedge = 0;
	/* head[] is all -1 here: set so once, and reset below */
	for (int j = 0; j < p->nhtouch; j++)
		p->head[p->htouch[j]] = -1;
	p->nhtouch = 0;
	const int *on = p->onv + p->onstart[r];
	int non = p->onstart[r + 1] - p->onstart[r];
	for (int j = 0; j < non; j++) {
		int i = on[j], wait;
		if ((p->nf[i] & NF_ITEM) || i == p->m->loss || !eager_free(p, i, r, &wait))
			continue;
		p->cnt[i] = wait;
		if (!wait) {
			heap_push(p, i);
			continue;
		}
		for (int k = p->opstart[i]; k < p->opstart[i + 1]; k++) {
			int u = p->opv[k];
			if (!pl_reads(p, i, u, r) || p->home[u] == HOME_LEAFY)
				continue;
			if (p->head[u] < 0)
				p->htouch[p->nhtouch++] = u;
			p->euser[p->nedge] = i;
			p->enext[p->nedge] = p->head[u];
			p->head[u] = p->nedge++;
		}
	}
	/* every input on every rank, in order: the data feed fills the
	 * same inputs everywhere */
	for (int j = 0; j < p->ninputs && !p->failed; j++)
		place(p, r, p->inputs[j]);
	int K = p->P * p->V;
	for (int t = 0; t < nitems && !p->failed; t++) {
		p->cur_work = items[t].work;
		p->cur_mb = items[t].mb;
		p->cur_chunk = items[t].chunk * p->P + r;
		if (p->cur_mb >= 0 && p->cur_mb < p->M && p->cur_chunk >= 0 && p->cur_chunk < K) {
			int key = (p->cur_mb * K + p->cur_chunk) * 3 + p->cur_work;
			for (int j = it->start[key]; j < it->start[key + 1] && !p->failed; j++)
				place(p, r, it->byitem[j]);
		}
		/* free nodes whose operands are all here */
		while (p->nheap > 0 && !p->failed) {
			int i = heap_pop(p);
			if (p->placed[i] != p->stamp)
				place(p, r, i);
		}
	}
	p->cur_mb = -1;
	/* the end of the step: the loss, then the rest in program order */
	if (!p->failed && r == *loss_rank)
		place(p, r, p->m->loss);
	if (!p->failed && !pl_push(p, &p->list[r], E_LOSS, p->m->loss, -1))
		return false;
	for (int j = 0; j < non && !p->failed; j++) {
		int i = on[j];
		if (p->placed[i] != p->stamp) {
			if (p->nf[i] & NF_ITEM) {
				const IrNode *n = p->m->nodes[i];
				pass_fault(p->m, p->d, n->loc, "pipeline: %s %%%d (micro-batch %d, "
				           "chunk %d) is in no schedule item", ir_op_name(n->op), i, p->mb[i],
				           p->stage[i]);
				p->failed = true;
				break;
			}
			place(p, r, i);
		}
	}
	for (int j = 0; j < p->nsyncp && !p->failed; j++) {
		int i = p->syncp[j];
		if ((p->sync[i] >> r) & 1) {
			if (!pl_push(p, &p->list[r], E_SYNC, i, p->rank[p->upd[i]]))
				return false;
			p->nq[p->rank[p->upd[i]] * p->P + r]++;
		}
	}
	return !p->failed;
}
