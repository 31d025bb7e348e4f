/* comm_local.c - the local backend: ranks are threads of one process.
 *
 * Every collective is one-shot over shared memory: each member publishes
 * its buffer pointers in its slot, a group barrier makes them visible, each
 * member reads its peers' buffers directly, and a second barrier keeps the
 * buffers alive until every peer is done with them.  all_reduce is a
 * reduce-scatter and an all-gather in one pass: member g reduces slice g of
 * every input (in blocks that stay in L1) and writes the result straight
 * into every member's output, so each byte is read n times and written n
 * times in total -- the minimum -- with two barriers, and every element is
 * reduced by one thread in member order, so all ranks hold bitwise equal
 * results.
 *
 * Barriers are generation counted: the last member to arrive bumps the
 * group's generation.  Waiters spin briefly (yielding, since ranks often
 * outnumber cores), then sleep on one condition variable for the whole
 * world, woken when a barrier completes while anyone sleeps.  Sleeping
 * waits wake at least every 100 ms to look for a failed or exited rank
 * and give up at the timeout, naming the members that never arrived.
 *
 * Failure and memory.  Peers read and write a member's buffers directly
 * (its arena, an overlap staging copy, comm_run_action's temporary copy)
 * from the moment the first barrier completes until they arrive at the
 * second, and the member frees those buffers as soon as the call returns
 * -- with an error, its whole arena.  So a call never returns while a
 * peer may still touch what it published, failure or not:
 *   - the first barrier (the entry) may be given up on a failure notice,
 *     an exited peer or the timeout, but only by withdrawing the arrival:
 *     one atomic word holds the generation and the count, and a withdrawal
 *     is a compare-and-swap on it that fails once the generation has
 *     moved.  Either the member is withdrawn, and the barrier cannot
 *     complete without it, so no peer ever reads its pointers; or the
 *     barrier completed first, and the member goes on with the collective
 *     as if it had seen nothing (the notice stops it at its next call);
 *   - the second barrier (the exit) ignores notices and the timeout: every
 *     member counted at the entry is between the barriers, where it only
 *     copies and reduces memory, so all of them arrive.
 * This makes a use after free impossible whatever order the ranks stop and
 * free in, rather than unlikely (it used to be: a notice from a third rank
 * let a member leave the exit barrier while its partner still read it).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm.h"
#include "runtime/rt.h"

#define LOCAL_MAX_MASKS 256
#define LOCAL_BLOCK 4096 /* elements reduced per pass: 16 KB of f32 in L1 */
#define LOCAL_SPIN 2000

/* word: the generation in the high 32 bits, the members arrived in the
 * low 32, so arriving, completing and withdrawing are each one CAS. */
typedef struct LGroup {
	_Atomic uint64_t word;
	char pad[56];
} LGroup;

#define GEN(wd) ((uint32_t)((wd) >> 32))
#define ARRIVED(wd) ((uint32_t)(wd))

/* What a member publishes for the collective it is in. */
typedef struct LSlot {
	const void *in;
	void *out;
	const int64_t *scounts;
	_Atomic(LGroup *) at;   /* the barrier it last arrived at, for messages */
	_Atomic uint32_t at_gen;
	char pad[28];
} LSlot;

/* A message in flight. */
typedef struct LMsg {
	struct LMsg *next;
	int64_t bytes;
	char data[];
} LMsg;

/* A mailbox per (sender, receiver): a FIFO of buffered messages (under
 * the world's mutex), so a send never waits; `count` is what a receiver
 * waits on.  Pipeline schedules send several activations ahead. */
typedef struct LMail {
	_Atomic int count;
	LMsg *head, *tail;
} LMail;

struct CommLocalWorld {
	CommMesh mesh;
	int size;
	double timeout_s;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	_Atomic int sleepers;
	_Atomic int failed;     /* 1 + the first failed rank; 0 = none */
	char fail_msg[COMM_ERR_LEN];
	_Atomic int *exited;
	_Atomic(LGroup *) groups[LOCAL_MAX_MASKS];
	LSlot *slots;
	LMail *mail;
};

typedef struct LComm {
	CommLocalWorld *w;
	const char *op;         /* the operation in progress, for messages */
	uint32_t axes;
} LComm;

CommLocalWorld *comm_local_world_new(const CommMesh *mesh, double timeout_s, char *err)
{
	int n = comm_world_size(mesh);
	if (mesh->naxes > 8) {
		snprintf(err, COMM_ERR_LEN, "the local backend handles up to 8 mesh axes");
		return NULL;
	}
	CommLocalWorld *w = calloc(1, sizeof *w);
	if (!w) {
		snprintf(err, COMM_ERR_LEN, "out of memory");
		return NULL;
	}
	w->mesh = *mesh;
	w->size = n;
	w->timeout_s = timeout_s > 0 ? timeout_s : COMM_DEFAULT_TIMEOUT_S;
	w->exited = calloc((size_t)n, sizeof *w->exited);
	w->slots = aligned_alloc(64, (size_t)n * sizeof *w->slots);
	w->mail = calloc((size_t)n * (size_t)n, sizeof *w->mail);
	if (!w->exited || !w->slots || !w->mail) {
		free(w->exited);
		free(w->slots);
		free(w->mail);
		free(w);
		snprintf(err, COMM_ERR_LEN, "out of memory");
		return NULL;
	}
	memset(w->slots, 0, (size_t)n * sizeof *w->slots);
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	/* timeouts count from a monotonic clock, not the wall clock */
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	return w;
}

void comm_local_world_free(CommLocalWorld *w)
{
	if (!w)
		return;
	for (int m = 0; m < LOCAL_MAX_MASKS; m++)
		free(atomic_load(&w->groups[m]));
	for (int i = 0; i < w->size * w->size; i++)
		for (LMsg *q = w->mail[i].head, *nx; q; q = nx) {
			nx = q->next;
			free(q);
		}
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free(w->exited);
	free(w->slots);
	free(w->mail);
	free(w);
}

static void wake_all(CommLocalWorld *w)
{
	if (atomic_load(&w->sleepers) > 0) {
		pthread_mutex_lock(&w->mu);
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
	}
}

void comm_local_exit(CommLocalWorld *w, int rank)
{
	atomic_store(&w->exited[rank], 1);
	pthread_mutex_lock(&w->mu);
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static LGroup *get_group(CommLocalWorld *w, uint32_t axes, int color)
{
	LGroup *g = atomic_load(&w->groups[axes]);
	if (!g) {
		pthread_mutex_lock(&w->mu);
		g = atomic_load(&w->groups[axes]);
		if (!g) {
			/* indexed by color (the world rank of member 0) */
			g = aligned_alloc(64, (size_t)w->size * sizeof *g);
			if (g) {
				memset(g, 0, (size_t)w->size * sizeof *g);
				atomic_store(&w->groups[axes], g);
			}
		}
		pthread_mutex_unlock(&w->mu);
	}
	return g ? &g[color] : NULL;
}

/* ---- waiting ---- */

typedef struct Wait {
	/* done when the generation of *group is not gen0 (barrier) or *flag
	 * == want (mailbox) */
	uint32_t gen0;
	_Atomic int *flag;
	int want;               /* -2: done when *flag > 0 */
	LGroup *group;          /* barrier */
	int peer;               /* mailbox: the other side */
	bool withdraw;          /* barrier: give up by withdrawing (the entry) */
	bool must_finish;       /* barrier: no giving up (the exit) */
} Wait;

static bool wait_done(const Wait *wt)
{
	if (wt->group)
		return GEN(atomic_load(&wt->group->word)) != wt->gen0;
	if (wt->want == -2)
		return atomic_load(wt->flag) > 0;
	return atomic_load(wt->flag) == wt->want;
}

/* -1 with a message when a rank failed, or one we wait for has exited;
 * on timed_out, the message names those that never arrived. */
static int wait_problem(Comm *c, const Wait *wt, bool timed_out)
{
	LComm *lc = c->impl;
	CommLocalWorld *w = lc->w;
	char ax[96];
	comm_axes_name(&c->mesh, lc->axes, ax, sizeof ax);
	int f = atomic_load(&w->failed);
	if (f) {
		c->peer_failed = true;
		pthread_mutex_lock(&w->mu);
		comm_errf(c, "rank %d failed: %s", f - 1, w->fail_msg);
		pthread_mutex_unlock(&w->mu);
		return -1;
	}
	int missing[64], nm = 0;
	bool gone = false;
	if (wt->group) {
		CommGroup g = comm_group(&c->mesh, c->rank, lc->axes);
		for (int i = 0; i < g.size && nm < 64; i++) {
			int m = comm_group_member(&c->mesh, c->rank, lc->axes, i);
			bool there = atomic_load(&w->slots[m].at) == wt->group &&
				     atomic_load(&w->slots[m].at_gen) == wt->gen0;
			if (atomic_load(&w->exited[m]) && !there) {
				missing[0] = m, nm = 1, gone = true;
				break;
			}
			if (!there)
				missing[nm++] = m;
		}
	} else if (atomic_load(&w->exited[wt->peer])) {
		missing[0] = wt->peer, nm = 1, gone = true;
	} else {
		missing[0] = wt->peer, nm = 1;
	}
	/* a peer that sent (or arrived) and then exited between this rank's
	 * last look at the wait and its look at the exits: its exit store
	 * follows its send, so the wait is seen done now (e2e.overlap.gpt
	 * once failed so under load: "rank 0 finished without joining recv") */
	if (gone && wait_done(wt))
		return 0;
	if (gone) {
		c->peer_failed = true;
		return comm_errf(c, "rank %d finished without joining %s over %s on rank %d",
				 missing[0], lc->op, ax, c->rank);
	}
	if (!timed_out)
		return 0;
	char who[256];
	int k = 0;
	who[0] = 0;
	for (int i = 0; i < nm && k < (int)sizeof who - 16; i++)
		k += snprintf(who + k, sizeof who - (size_t)k, "%s%d", i ? ", " : "", missing[i]);
	return comm_errf(c, "rank %d timed out after %g s in %s over %s waiting for rank%s %s",
			 c->rank, w->timeout_s, lc->op, ax, nm > 1 ? "s" : "", who);
}

/* Takes this rank's arrival back from the barrier of generation gen0:
 * true, or false when the barrier completed first (it then counts this
 * rank, and the peers are reading its buffers). */
static bool withdraw(Comm *c, const Wait *wt)
{
	LGroup *gr = wt->group;
	uint64_t wd = atomic_load(&gr->word);
	while (GEN(wd) == wt->gen0) {
		/* this rank's arrival is in the count, so it is >= 1; its
		 * slot still says it arrived, so the peers' messages name the
		 * ranks that never came, not the ones that gave up */
		if (atomic_compare_exchange_weak(&gr->word, &wd, wd - 1))
			return true;
	}
	return false;
}

static int wait_for(Comm *c, const Wait *wt)
{
	CommLocalWorld *w = ((LComm *)c->impl)->w;
	for (int i = 0; i < LOCAL_SPIN; i++) {
		if (wait_done(wt))
			return 0;
		if ((i & 63) == 63)
			sched_yield();
	}
	double deadline = comm_now() + w->timeout_s;
	for (;;) {
		if (wait_done(wt))
			return 0;
		double now = comm_now();
		bool pf = c->peer_failed;
		if (!wt->must_finish && wait_problem(c, wt, now >= deadline)) {
			if (!wt->withdraw || withdraw(c, wt))
				return -1;
			/* completed meanwhile: go on, the peers are in */
			c->peer_failed = pf;
			return 0;
		}
		double until = now + 0.1 < deadline || wt->must_finish ? now + 0.1 : deadline;
		struct timespec ts = { (time_t)until, (long)((until - (double)(time_t)until) * 1e9) };
		atomic_fetch_add(&w->sleepers, 1);
		pthread_mutex_lock(&w->mu);
		if (!wait_done(wt) && (wt->must_finish || !atomic_load(&w->failed)))
			pthread_cond_timedwait(&w->cv, &w->mu, &ts);
		pthread_mutex_unlock(&w->mu);
		atomic_fetch_sub(&w->sleepers, 1);
	}
}

/* The entry barrier of a collective (or a plain barrier): may fail, and
 * then this rank is not counted in it.  exit: the barrier after the
 * members have read each other's buffers, which never fails (see the top
 * of the file). */
enum { BAR_ENTRY, BAR_EXIT };

static int group_barrier(Comm *c, uint32_t axes, const CommGroup *g, int kind)
{
	LComm *lc = c->impl;
	CommLocalWorld *w = lc->w;
	if (kind == BAR_ENTRY && atomic_load(&w->failed)) {
		Wait none = { .flag = &w->failed, .want = -1, .peer = c->rank };
		return wait_problem(c, &none, false);
	}
	if (g->size == 1)
		return 0;
	LGroup *gr = get_group(w, axes, g->color);
	if (!gr)
		return comm_errf(c, "out of memory"); /* only at an entry: made there */
	/* the generation cannot move before this rank arrives */
	uint64_t wd = atomic_load(&gr->word);
	uint32_t gen = GEN(wd);
	atomic_store(&w->slots[c->rank].at_gen, gen);
	atomic_store(&w->slots[c->rank].at, gr);
	for (;;) {
		bool last = ARRIVED(wd) == (uint32_t)g->size - 1;
		uint64_t next = last ? (uint64_t)(gen + 1) << 32 : wd + 1;
		if (atomic_compare_exchange_weak(&gr->word, &wd, next)) {
			if (!last)
				break;
			wake_all(w);
			return 0;
		}
	}
	Wait wt = { .gen0 = gen, .group = gr, .withdraw = kind == BAR_ENTRY,
		    .must_finish = kind == BAR_EXIT };
	return wait_for(c, &wt);
}

/* Publishes this rank's pointers and waits for the group's. */
static int enter(Comm *c, const char *op, uint32_t axes, CommGroup *g, const void *in,
		 void *out, const int64_t *scounts)
{
	LComm *lc = c->impl;
	lc->op = op;
	lc->axes = axes;
	*g = comm_group(&c->mesh, c->rank, axes);
	LSlot *s = &lc->w->slots[c->rank];
	s->in = in;
	s->out = out;
	s->scounts = scounts;
	return group_barrier(c, axes, g, BAR_ENTRY);
}

/* After reading the peers' buffers: every member has left them. */
static int leave(Comm *c, uint32_t axes, const CommGroup *g)
{
	return group_barrier(c, axes, g, BAR_EXIT);
}

static LSlot *peer_slot(Comm *c, uint32_t axes, int j)
{
	return &((LComm *)c->impl)->w->slots[comm_group_member(&c->mesh, c->rank, axes, j)];
}

/* ---- collectives ---- */

static size_t esize(DtmDtype t)
{
	return t == DTM_BF16 || t == DTM_F16 ? 2 : 4;
}

/* Reduces elements [lo, hi) of every member's input; the result goes to
 * each of the nout outputs (all members' for all_reduce, one for
 * reduce_scatter, at offset out_off). */
static void reduce_range(const void *const *ins, int n, void *const *outs, int nout,
			 int64_t lo, int64_t hi, int64_t out_off, DtmDtype t, DtmRed red)
{
	float acc[LOCAL_BLOCK], tmp[LOCAL_BLOCK];
	for (int64_t b = lo; b < hi; b += LOCAL_BLOCK) {
		int64_t m = hi - b < LOCAL_BLOCK ? hi - b : LOCAL_BLOCK;
		int64_t o = b - lo + out_off;
		if (t == DTM_F32 || t == DTM_I32) {
			memcpy(acc, (const char *)ins[0] + b * 4, (size_t)m * 4);
			for (int j = 1; j < n; j++) {
				if (t == DTM_F32)
					comm_reduce_f32(acc, (const float *)ins[j] + b, m, red);
				else
					comm_reduce_i32((int32_t *)acc, (const int32_t *)ins[j] + b, m,
							red);
			}
			if (red == DTM_RED_AVG) {
				for (int64_t i = 0; i < m; i++) {
					if (t == DTM_F32)
						acc[i] /= (float)n;
					else
						((int32_t *)acc)[i] /= n;
				}
			}
			for (int k = 0; k < nout; k++)
				memcpy((char *)outs[k] + o * 4, acc, (size_t)m * 4);
		} else {
			/* 16-bit: accumulate in f32, round once (rt_widen's
			 * loops: a per-element dtype switch made a bf16
			 * all_reduce 2-3x slower) */
			rt_widen(acc, ins[0], t, b, m);
			for (int j = 1; j < n; j++) {
				rt_widen(tmp, ins[j], t, b, m);
				comm_reduce_f32(acc, tmp, m, red);
			}
			if (red == DTM_RED_AVG)
				for (int64_t i = 0; i < m; i++)
					acc[i] /= (float)n;
			rt_narrow(outs[0], t, o, acc, m);
			for (int k = 1; k < nout; k++)
				memcpy((char *)outs[k] + o * 2, (char *)outs[0] + o * 2, (size_t)m * 2);
		}
	}
}

#define LOCAL_MAX_GROUP 1024

/* Before entering: a member returning between the barriers would leave
 * its peers waiting at the exit. */
static int check_size(Comm *c, uint32_t axes)
{
	int n = comm_group(&c->mesh, c->rank, axes).size;
	if (n > LOCAL_MAX_GROUP)
		return comm_errf(c, "group of %d ranks: the local backend takes up to %d", n,
				 LOCAL_MAX_GROUP);
	return 0;
}

static int lc_all_reduce(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
			 DtmDtype t, DtmRed red)
{
	CommGroup g;
	if (check_size(c, axes) || enter(c, "all_reduce", axes, &g, in, out, NULL))
		return -1;
	const void *ins[LOCAL_MAX_GROUP];
	void *outs[LOCAL_MAX_GROUP];
	for (int j = 0; j < g.size; j++) {
		LSlot *s = peer_slot(c, axes, j);
		ins[j] = s->in;
		outs[j] = s->out;
	}
	/* slice boundaries on 16-element (64-byte) multiples so no two
	 * members write the same cache line */
	int64_t units = (count + 15) / 16;
	int64_t lo = units * g.index / g.size * 16, hi = units * (g.index + 1) / g.size * 16;
	if (hi > count)
		hi = count;
	if (lo < hi)
		reduce_range(ins, g.size, outs, g.size, lo, hi, lo, t, red);
	return leave(c, axes, &g);
}

static int lc_reduce_scatter(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
			     DtmDtype t, DtmRed red)
{
	CommGroup g;
	if (check_size(c, axes) || enter(c, "reduce_scatter", axes, &g, in, out, NULL))
		return -1;
	const void *ins[LOCAL_MAX_GROUP];
	for (int j = 0; j < g.size; j++)
		ins[j] = peer_slot(c, axes, j)->in;
	void *outs[1] = { out };
	reduce_range(ins, g.size, outs, 1, count * g.index, count * (g.index + 1), 0, t, red);
	return leave(c, axes, &g);
}

static int lc_all_gather(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
			 DtmDtype t)
{
	CommGroup g;
	if (enter(c, "all_gather", axes, &g, in, out, NULL))
		return -1;
	size_t nb = (size_t)count * esize(t);
	for (int j = 0; j < g.size; j++) {
		char *dst = (char *)out + (size_t)j * nb;
		const void *src = peer_slot(c, axes, j)->in;
		if (dst != src)
			memcpy(dst, src, nb);
	}
	return leave(c, axes, &g);
}

static int lc_all_to_allv(Comm *c, uint32_t axes, const void *in, const int64_t *scounts,
			  void *out, const int64_t *rcounts, DtmDtype t)
{
	CommGroup g;
	if (enter(c, "all_to_all", axes, &g, in, out, scounts))
		return -1;
	size_t es = esize(t);
	int64_t roff = 0, bad_sends = 0;
	int bad = -1;
	for (int j = 0; j < g.size; j++) {
		LSlot *s = peer_slot(c, axes, j);
		int64_t soff = 0;
		for (int k = 0; k < g.index; k++)
			soff += s->scounts[k];
		int64_t nj = s->scounts[g.index];
		if (nj != rcounts[j])
			bad = j, bad_sends = nj; /* the peer's counts are gone after leave */
		else
			memcpy((char *)out + (size_t)roff * es, (const char *)s->in + (size_t)soff * es,
			       (size_t)nj * es);
		roff += rcounts[j];
	}
	if (leave(c, axes, &g))
		return -1;
	if (bad >= 0)
		return comm_errf(c, "all_to_all: rank %d expects %lld elements from member %d, "
				 "which sends %lld", c->rank, (long long)rcounts[bad], bad,
				 (long long)bad_sends);
	return 0;
}

static int lc_broadcast(Comm *c, uint32_t axes, void *buf, int64_t count, DtmDtype t, int root)
{
	CommGroup g;
	if (enter(c, "broadcast", axes, &g, buf, buf, NULL))
		return -1;
	const void *src = peer_slot(c, axes, root)->in;
	if (g.index != root && src != buf)
		memcpy(buf, src, (size_t)count * esize(t));
	return leave(c, axes, &g);
}

static int lc_barrier(Comm *c, uint32_t axes)
{
	CommGroup g;
	return enter(c, "barrier", axes, &g, NULL, NULL, NULL);
}

/* ---- point to point ---- */

static int peer_at(Comm *c, uint32_t axes, int offset, bool mirror, int sign)
{
	return comm_group_peer(&c->mesh, c->rank, axes, offset, mirror, sign);
}

static int lc_send(Comm *c, uint32_t axes, int offset, bool mirror, const void *buf,
		   int64_t bytes)
{
	LComm *lc = c->impl;
	CommLocalWorld *w = lc->w;
	lc->op = "send";
	lc->axes = axes;
	int peer = peer_at(c, axes, offset, mirror, 1);
	LMail *m = &w->mail[(size_t)c->rank * (size_t)w->size + (size_t)peer];
	LMsg *q = malloc(sizeof *q + (size_t)(bytes > 0 ? bytes : 1));
	if (!q)
		return comm_errf(c, "out of memory buffering a send of %lld bytes",
				 (long long)bytes);
	q->next = NULL;
	q->bytes = bytes;
	memcpy(q->data, buf, (size_t)bytes);
	pthread_mutex_lock(&w->mu);
	if (m->tail)
		m->tail->next = q;
	else
		m->head = q;
	m->tail = q;
	atomic_fetch_add(&m->count, 1);
	pthread_mutex_unlock(&w->mu);
	wake_all(w);
	return 0;
}

static int lc_recv(Comm *c, uint32_t axes, int offset, bool mirror, void *buf, int64_t bytes)
{
	LComm *lc = c->impl;
	CommLocalWorld *w = lc->w;
	lc->op = "recv";
	lc->axes = axes;
	int peer = peer_at(c, axes, offset, mirror, -1);
	LMail *m = &w->mail[(size_t)peer * (size_t)w->size + (size_t)c->rank];
	Wait wt = { .flag = &m->count, .want = -2, .peer = peer };
	if (wait_for(c, &wt))
		return -1;
	pthread_mutex_lock(&w->mu);
	LMsg *q = m->head;
	m->head = q->next;
	if (!m->head)
		m->tail = NULL;
	atomic_fetch_sub(&m->count, 1);
	pthread_mutex_unlock(&w->mu);
	int rc = 0;
	if (q->bytes != bytes)
		rc = comm_errf(c, "rank %d receives %lld bytes from rank %d, which sent %lld",
			       c->rank, (long long)bytes, peer, (long long)q->bytes);
	else
		memcpy(buf, q->data, (size_t)bytes);
	free(q);
	return rc;
}

static void lc_fail(Comm *c, const char *msg)
{
	CommLocalWorld *w = ((LComm *)c->impl)->w;
	pthread_mutex_lock(&w->mu);
	int zero = 0;
	if (atomic_compare_exchange_strong(&w->failed, &zero, c->rank + 1))
		snprintf(w->fail_msg, sizeof w->fail_msg, "%s", msg ? msg : "(no message)");
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static void lc_close(Comm *c)
{
	free(c->impl);
	free(c);
}

static const CommOps local_ops = {
	.name = "local",
	.all_reduce = lc_all_reduce,
	.all_gather = lc_all_gather,
	.reduce_scatter = lc_reduce_scatter,
	.all_to_allv = lc_all_to_allv,
	.broadcast = lc_broadcast,
	.send = lc_send,
	.recv = lc_recv,
	.barrier = lc_barrier,
	.fail = lc_fail,
	.close = lc_close,
};

int comm_local_open(Comm **out, CommLocalWorld *w, int rank, char *err)
{
	*out = NULL;
	if (rank < 0 || rank >= w->size) {
		snprintf(err, COMM_ERR_LEN, "rank %d outside a world of %d", rank, w->size);
		return -1;
	}
	Comm *c = calloc(1, sizeof *c);
	LComm *lc = calloc(1, sizeof *lc);
	if (!c || !lc) {
		free(c);
		free(lc);
		snprintf(err, COMM_ERR_LEN, "out of memory");
		return -1;
	}
	lc->w = w;
	lc->op = "?";
	c->ops = &local_ops;
	c->rank = rank;
	c->size = w->size;
	c->mesh = w->mesh;
	comm_coords(&w->mesh, rank, c->coords);
	c->timeout_s = w->timeout_s;
	c->any_thread = true;
	c->impl = lc;
	*out = c;
	return 0;
}
