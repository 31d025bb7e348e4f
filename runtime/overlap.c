/* overlap.c - the CPU's communication stream: one thread per rank that runs
 * the plan's communication actions while the rank's own thread computes.
 *
 * Consumes a rank's RtRun (its plan, buffers and Comm); rt_run_actions
 * (exec.c) hands it every DTM_ACT_COLL / SEND / RECV action in plan order.
 * The communication thread runs them first in, first out, so every rank
 * still issues its collectives in plan order, and the compute thread goes
 * on with the next action at once.
 *
 * Hazards are found at run time from the plan's buffer offsets: before an
 * action runs, the compute thread compares the arena byte ranges it reads
 * and writes with those of the communication actions still pending (read
 * after write, write after read, write after write: memplan reuses ACT
 * memory by liveness, so a later kernel may overwrite bytes a pending
 * collective still reads) and waits for the newest one it conflicts with,
 * which, the queue being FIFO, means every older one too.  Nothing waits
 * earlier than that, and the end of a pass waits for all.  Communication
 * actions need no such wait among themselves: the one thread runs them in
 * plan order.
 *
 * Staging.  memplan reuses the bytes of a collective's input as soon as
 * the collective has run in plan order, so the next kernels often
 * overwrite an input the collective, still pending, has yet to read (a
 * write after read), which would make nearly every collective wait at
 * once.  Where the plan shows that -- a later compute action writes the
 * input before anything reads or writes the output -- the compute thread
 * copies the input aside when it queues the collective (or send), unless a
 * pending action still writes it, and the collective reads the copy: the
 * action then conflicts only through its output.  The copies live outside
 * the arenas (rt_overlap_staging_bytes), one per such action; a memplan
 * that kept async inputs live until their wait point would leave none to
 * make.  The hazard analysis itself is pure (runtime/planinfo.c), so
 * `dtmc inspect` reads it without linking the executor.
 *
 * Deadlock freedom follows from inline execution's: the communication
 * thread's sequence is the plan's, an action is queued only after every
 * compute action before it has run, and the compute thread only ever waits
 * for actions queued before the one it is at, so a state in which every
 * rank is stuck is one the inline order would be stuck in too.
 *
 * Errors: a failed action (a peer died, a timeout) makes the thread skip
 * whatever is queued after it and flags the stream failed; the compute
 * thread sees that at its next queue, wait or the end of the pass and
 * stops the rank with the message.  When the compute thread fails first,
 * rt_overlap_abort drops what has not started and waits (at most the
 * communication timeout) for the action in flight, so the caller may then
 * use the Comm itself (comm_fail), as MPI_THREAD_SERIALIZED requires.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/comm.h"
#include "runtime/rt.h"

/* ---- running one communication action ---- */

static void sleep_us(int64_t us)
{
	struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000 };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int rt_comm_action(RtRun *r, const DtmAction *a, void *const *ptr, char *err)
{
	const DtmPlan *p = r->plan;
	/* --comm-delay-us: latency per message, so a group of one (no
	 * message) is not delayed */
	if (r->comm_delay_us > 0 && r->comm &&
	    comm_group(&r->comm->mesh, r->comm->rank, a->axes).size > 1)
		sleep_us(r->comm_delay_us);
	if (r->comm)
		return comm_run_action(r->comm, p, a, ptr, err, RT_ERR_LEN);
	if (rt_world_size(p) != 1)
		return rt_errf(err, "a %lld-rank plan run without a communication backend "
			       "(action '%s')", (long long)rt_world_size(p),
			       a->label ? a->label : "?");
	if (a->kind == DTM_ACT_SEND || a->kind == DTM_ACT_RECV)
		return rt_errf(err, "send/recv '%s' in a one-rank plan", a->label ? a->label : "?");
	/* One rank: every group has one member, so all-reduce, all-gather,
	 * reduce-scatter and all-to-all are identities on their buffer, or a
	 * copy when the plan names a separate output. */
	if (a->kind == DTM_ACT_COLL && a->nargs >= 2) {
		int in = a->args[0], out = a->args[a->nargs - 1];
		if (in != out && ptr[in] != ptr[out]) {
			int64_t nb = p->buffers[in].bytes < p->buffers[out].bytes ?
					     p->buffers[in].bytes : p->buffers[out].bytes;
			memmove(ptr[out], ptr[in], (size_t)nb);
		}
	}
	return 0;
}

/* ---- the communication thread ---- */

/* Before a waiting thread sleeps.  Ranks and their two threads usually
 * outnumber the cores, and every yield to a busy thread is a context
 * switch, so: the communication thread, waiting for work, polls briefly
 * and sleeps (the compute thread is usually busy for a while); the compute
 * thread, waiting for an action, yields a few times first (to the
 * communication thread, often on its core) so an action about to finish
 * costs no futex sleep and wake. */
#define OVERLAP_POLL 256
#define OVERLAP_YIELDS 16

/* Sequence numbers count the actions queued since the thread started;
 * [done, issued) are pending.  A pass starts with nothing pending, so its
 * actions are items[k - base] for base = issued at its start, and the
 * pending ones are contiguous there.  The compute thread writes base,
 * items, acc, issued and cancel; the communication thread done, failed,
 * comm_s and err.  Each side polls the other's counter, then sleeps on a
 * condition variable after announcing it in *_sleeping (under mu); a
 * side that moves its counter wakes the other only when it sleeps (the
 * counter and flag are seq_cst, so one of the two sees the other). */
struct RtCommThread {
	RtRun *r;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t work;    /* compute -> comm: queued, or stop */
	pthread_cond_t prog;    /* comm -> compute: done moved */
	const DtmAction **items; /* cap each: a pass queues at most its actions */
	void **in_copy;         /* items[k]'s staged input, or NULL */
	RtAccess *acc;          /* what items[k] reads and writes */
	int cap;
	void **staged;          /* per action of the stage: its input's copy, or NULL */
	void **ptr;             /* r->ptr, with a staged input swapped in while it runs */
	int64_t base;
	_Atomic int64_t issued, done;
	_Atomic bool failed, cancel, stop;
	_Atomic bool comm_sleeping, compute_sleeping;
	double comm_s;          /* this pass: time inside communication actions */
	char err[RT_ERR_LEN];   /* the first failure; written before failed */
};

static void wake(RtCommThread *t, _Atomic bool *sleeping, pthread_cond_t *cv)
{
	if (atomic_load(sleeping)) {
		pthread_mutex_lock(&t->mu);
		pthread_cond_broadcast(cv);
		pthread_mutex_unlock(&t->mu);
	}
}

/* Until issued > k (true) or stop with nothing left (false). */
static bool wait_work(RtCommThread *t, int64_t k)
{
	for (int spin = 0; spin < OVERLAP_POLL; spin++) {
		if (atomic_load(&t->issued) > k)
			return true;
		if (atomic_load(&t->stop))
			return false;
	}
	pthread_mutex_lock(&t->mu);
	atomic_store(&t->comm_sleeping, true);
	while (atomic_load(&t->issued) <= k && !atomic_load(&t->stop))
		pthread_cond_wait(&t->work, &t->mu);
	atomic_store(&t->comm_sleeping, false);
	pthread_mutex_unlock(&t->mu);
	return atomic_load(&t->issued) > k;
}

static void *comm_main(void *arg)
{
	RtCommThread *t = arg;
	char err[RT_ERR_LEN];
	for (;;) {
		int64_t k = atomic_load(&t->done);
		if (!wait_work(t, k))
			break;
		const DtmAction *a = t->items[k - t->base];
		void *copy = t->in_copy[k - t->base];
		if (!atomic_load(&t->failed) && !atomic_load(&t->cancel)) {
			double t0 = rt_now();
			if (copy)
				t->ptr[a->args[0]] = copy;
			int rc = rt_comm_action(t->r, a, t->ptr, err);
			if (copy)
				t->ptr[a->args[0]] = t->r->ptr[a->args[0]];
			t->comm_s += rt_now() - t0;
			if (rc) {
				snprintf(t->err, sizeof t->err, "%s", err);
				atomic_store(&t->failed, true);
			}
		}
		atomic_store(&t->done, k + 1);
		wake(t, &t->compute_sleeping, &t->prog);
	}
	return NULL;
}

static void free_thread(RtCommThread *t)
{
	if (!t)
		return;
	for (int i = 0; t->staged && i < t->cap; i++)
		free(t->staged[i]);
	free(t->staged);
	free(t->items);
	free(t->in_copy);
	free(t->acc);
	free(t->ptr);
	free(t);
}

int rt_overlap_start(RtRun *r)
{
	if (r->cthread)
		return 0;
	const DtmPlan *p = r->plan;
	const DtmStage *st = &p->stages[r->stage];
	RtCommThread *t = calloc(1, sizeof *t);
	int cap = st->nactions;
	size_t n = (size_t)(cap > 0 ? cap : 1), nb = (size_t)(p->nbuffers > 0 ? p->nbuffers : 1);
	bool *stage = calloc(n, sizeof *stage);
	if (!t || !stage || !(t->items = malloc(n * sizeof *t->items)) ||
	    !(t->in_copy = malloc(n * sizeof *t->in_copy)) ||
	    !(t->acc = malloc(n * sizeof *t->acc)) || !(t->staged = calloc(n, sizeof *t->staged)) ||
	    !(t->ptr = malloc(nb * sizeof *t->ptr))) {
		free(stage);
		free_thread(t);
		return rt_errf(r->err, "out of memory starting the communication thread");
	}
	t->r = r;
	t->cap = cap;
	memcpy(t->ptr, r->ptr, (size_t)p->nbuffers * sizeof *t->ptr);
	if (r->overlap_copy)
		rt_overlap_staging(p, st->actions, cap, stage);
	for (int i = 0; i < cap; i++) {
		if (!stage[i])
			continue;
		int64_t bytes = p->buffers[st->actions[i].args[0]].bytes;
		t->staged[i] = malloc((size_t)bytes);
		if (!t->staged[i]) {
			free(stage);
			free_thread(t);
			return rt_errf(r->err, "out of memory staging '%s' (%lld bytes)",
				       st->actions[i].label ? st->actions[i].label : "?",
				       (long long)bytes);
		}
	}
	free(stage);
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->work, NULL);
	pthread_cond_init(&t->prog, NULL);
	if (pthread_create(&t->th, NULL, comm_main, t) != 0) {
		pthread_mutex_destroy(&t->mu);
		pthread_cond_destroy(&t->work);
		pthread_cond_destroy(&t->prog);
		free_thread(t);
		return rt_errf(r->err, "cannot start the communication thread of rank %lld",
			       (long long)r->rank);
	}
	r->cthread = t;
	return 0;
}

void rt_overlap_stop(RtRun *r)
{
	RtCommThread *t = r->cthread;
	if (!t)
		return;
	rt_overlap_abort(r); /* nothing queued is left to run */
	atomic_store(&t->stop, true);
	pthread_mutex_lock(&t->mu);
	pthread_cond_broadcast(&t->work);
	pthread_mutex_unlock(&t->mu);
	pthread_join(t->th, NULL);
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->work);
	pthread_cond_destroy(&t->prog);
	free_thread(t);
	r->cthread = NULL;
}

/* The stream's failure as r->err (t->err was written before failed). */
static int stream_failed(RtRun *r)
{
	snprintf(r->err, RT_ERR_LEN, "%s", r->cthread->err);
	return -1;
}

/* Waits until action seq is done (the acquire of done makes its writes
 * visible to this thread); -1 once anything failed. */
static int wait_seq(RtCommThread *t, int64_t seq)
{
	for (int spin = 0; spin < OVERLAP_YIELDS && atomic_load(&t->done) <= seq; spin++)
		sched_yield();
	if (atomic_load(&t->done) <= seq) {
		pthread_mutex_lock(&t->mu);
		atomic_store(&t->compute_sleeping, true);
		while (atomic_load(&t->done) <= seq)
			pthread_cond_wait(&t->prog, &t->mu);
		atomic_store(&t->compute_sleeping, false);
		pthread_mutex_unlock(&t->mu);
	}
	return atomic_load(&t->failed) ? -1 : 0;
}

int rt_overlap_begin(RtRun *r)
{
	RtCommThread *t = r->cthread;
	if (atomic_load(&t->failed))
		return stream_failed(r);
	/* the last pass ended with nothing pending, so the thread touches
	 * none of these until the next issue */
	t->base = atomic_load(&t->issued);
	atomic_store(&t->cancel, false);
	t->comm_s = 0;
	return 0;
}

int rt_overlap_issue(RtRun *r, int i, const RtAccess *acc)
{
	RtCommThread *t = r->cthread;
	if (atomic_load(&t->failed))
		return stream_failed(r);
	int64_t k = atomic_load(&t->issued);
	if (k - t->base >= t->cap || i < 0 || i >= t->cap)
		return rt_errf(r->err, "internal: action %d, or more than %d communication "
			       "actions in a pass", i, t->cap);
	const DtmAction *a = &r->plan->stages[r->stage].actions[i];
	int64_t q = k - t->base;
	RtAccess in, rest;
	t->items[q] = a;
	t->in_copy[q] = NULL;
	t->acc[q] = *acc;
	/* The input as it is now is what the action would read, unless a
	 * pending action still writes it (one collective feeding the next):
	 * then no copy, and a kernel overwriting it waits instead. */
	if (t->staged[i] && rt_overlap_split_input(r->plan, a, &in, &rest)) {
		int64_t done = atomic_load(&t->done);
		if (rt_hazard_newest(&t->acc[done - t->base], (int)(k - done), &in) < 0) {
			int id = a->args[0];
			memcpy(t->staged[i], r->ptr[id], (size_t)r->plan->buffers[id].bytes);
			t->in_copy[q] = t->staged[i];
			t->acc[q] = rest;
		}
	}
	atomic_store(&t->issued, k + 1);
	wake(t, &t->comm_sleeping, &t->work);
	return (int)(k - t->base);
}

int rt_overlap_wait_for(RtRun *r, const RtAccess *acc)
{
	RtCommThread *t = r->cthread;
	int64_t done = atomic_load(&t->done), issued = atomic_load(&t->issued);
	int k = rt_hazard_newest(&t->acc[done - t->base], (int)(issued - done), acc);
	if (k >= 0 && wait_seq(t, done + k))
		return stream_failed(r);
	return atomic_load(&t->failed) ? stream_failed(r) : 0;
}

int rt_overlap_wait_all(RtRun *r)
{
	RtCommThread *t = r->cthread;
	int64_t issued = atomic_load(&t->issued);
	if (issued > 0 && wait_seq(t, issued - 1))
		return stream_failed(r);
	return atomic_load(&t->failed) ? stream_failed(r) : 0;
}

void rt_overlap_abort(RtRun *r)
{
	RtCommThread *t = r->cthread;
	if (!t)
		return;
	atomic_store(&t->cancel, true);
	int64_t issued = atomic_load(&t->issued);
	if (issued > 0)
		wait_seq(t, issued - 1);
}

double rt_overlap_comm_s(RtRun *r)
{
	/* read after wait_all or abort: done's acquire covers it */
	return r->cthread->comm_s;
}
