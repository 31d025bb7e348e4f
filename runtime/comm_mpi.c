/* comm_mpi.c - the mpi backend: one process per rank over Open MPI.
 *
 * Built only when CMake finds MPI, as its own object library (generated
 * binaries link the runtime without -lmpi; main.c reaches this file
 * through weak references).
 *
 * Groups: one communicator per axes mask, from MPI_Comm_split of
 * MPI_COMM_WORLD (color = the world rank of member 0, key = the group
 * index, so MPI's rank order is comm.h's member order), created on first
 * use and cached.  Every operation is nonblocking (MPI_Iallreduce, ...)
 * and completed by polling MPI_Test against a deadline, with errors
 * returned (MPI_ERRORS_RETURN) rather than aborting, so a stuck or dead
 * peer is a message, never a hang.
 *
 * Failure notices: every rank pre-posts a receive on a private duplicate
 * of MPI_COMM_WORLD; a rank that fails sends its message there to every
 * other rank, and a rank polling any operation sees it and stops with
 * "rank R failed: ...".  A rank that dies without a word (killed) is
 * noticed by mpirun, which ends the job, or at the timeout here.
 *
 * Who did not arrive.  MPI cannot tell which members of a communicator a
 * pending collective still waits for, and a stopped (SIGSTOP) or hung
 * process answers nothing, so at the timeout this rank asks: it counts
 * the collectives it started per communicator, sends every other member
 * of the group a probe (on a third duplicate of MPI_COMM_WORLD) and waits
 * a moment for the answers, which every rank gives from inside any
 * operation it is polling.  A member that does not answer, or answers
 * with a count short of this rank's, has not arrived, and the message
 * names it.  Probing costs nothing until a timeout.
 *
 * Sends are buffered (copied, MPI_Isend, completed later), so a ring in
 * which every rank sends before it receives works as on local.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/comm.h"
#include "runtime/rt.h"

#define MPI_MASKS 256
#define TAG_FAIL 1
#define TAG_PROBE 2
#define TAG_ANSWER 3    /* + the probe round, so late answers match nothing */
#define TAG_P2P 1000
#define PROBE_WAIT_S 2.0

typedef struct Pending {
	MPI_Request req;
	void *buf;
} Pending;

typedef struct MComm {
	MPI_Comm comms[MPI_MASKS];
	bool have[MPI_MASKS];
	CommMesh snap;          /* the mesh the cached communicators are for */
	MPI_Comm fail_comm, p2p_comm, probe_comm;
	MPI_Request fail_req;
	char fail_buf[COMM_ERR_LEN];
	bool fail_seen;
	Pending *sends;
	int nsends, capsends;
	/* collectives started per axes mask: comparable between the members
	 * of a group, which start them in the same order */
	int64_t started[MPI_MASKS];
	MPI_Request probe_req;  /* pre-posted: a peer's probe */
	int probe_buf[2];       /* its axes mask and answer tag */
	int64_t *answers;       /* per world rank: what was answered (live until sent) */
	int asked[2];           /* what this rank probes with (live until sent) */
	int round;              /* probes this rank sent */
} MComm;

static int mpi_err(Comm *c, int rc, const char *call)
{
	char s[MPI_MAX_ERROR_STRING];
	int len = 0;
	MPI_Error_string(rc, s, &len);
	return comm_errf(c, "%s failed on rank %d: %s", call, c->rank, s);
}

#define MPI_CHECK(c, call)                                                   \
	do {                                                                 \
		int rc_ = (call);                                            \
		if (rc_ != MPI_SUCCESS)                                      \
			return mpi_err((c), rc_, #call);                     \
	} while (0)

static bool same_mesh(const CommMesh *a, const CommMesh *b)
{
	if (a->naxes != b->naxes)
		return false;
	for (int i = 0; i < a->naxes; i++)
		if (a->sizes[i] != b->sizes[i])
			return false;
	return true;
}

/* One communicator per axes mask, all made at once: MPI_Comm_split is
 * collective over MPI_COMM_WORLD, and ranks of different pipeline stages
 * run different action lists, so splitting on first use could pair one
 * rank's split with another's unrelated collective. */
static int build_comms(Comm *c)
{
	MComm *m = c->impl;
	for (int i = 0; i < MPI_MASKS; i++) {
		if (m->have[i])
			MPI_Comm_free(&m->comms[i]);
		m->have[i] = false;
	}
	m->snap = c->mesh;
	memset(m->started, 0, sizeof m->started);
	for (uint32_t axes = 0; axes < (1u << c->mesh.naxes) && axes < MPI_MASKS; axes++) {
		CommGroup g = comm_group(&c->mesh, c->rank, axes);
		MPI_CHECK(c, MPI_Comm_split(MPI_COMM_WORLD, g.color, g.index, &m->comms[axes]));
		MPI_CHECK(c, MPI_Comm_set_errhandler(m->comms[axes], MPI_ERRORS_RETURN));
		m->have[axes] = true;
	}
	return 0;
}

/* The communicator of this rank's group over axes, for a collective
 * about to start on it (counted: see "who did not arrive" above). */
static int group_comm(Comm *c, uint32_t axes, MPI_Comm *out)
{
	MComm *m = c->impl;
	/* tests reuse one Comm on several meshes of the same size, every
	 * rank switching at the same point */
	if (!same_mesh(&m->snap, &c->mesh) && build_comms(c))
		return -1;
	if (axes >= MPI_MASKS || !m->have[axes])
		return comm_errf(c, "no communicator for axes mask 0x%x", (unsigned)axes);
	*out = m->comms[axes];
	m->started[axes]++;
	return 0;
}

/* Frees the buffers of completed sends. */
static void reap_sends(MComm *m)
{
	int k = 0;
	for (int i = 0; i < m->nsends; i++) {
		int done = 0;
		MPI_Test(&m->sends[i].req, &done, MPI_STATUS_IGNORE);
		if (done)
			free(m->sends[i].buf);
		else
			m->sends[k++] = m->sends[i];
	}
	m->nsends = k;
}

/* Answers the probes peers sent (see the top of the file). */
static void serve_probes(MComm *m)
{
	for (;;) {
		int done = 0;
		MPI_Status st;
		if (MPI_Test(&m->probe_req, &done, &st) != MPI_SUCCESS || !done)
			return;
		int axes = m->probe_buf[0], src = st.MPI_SOURCE;
		m->answers[src] = axes >= 0 && axes < MPI_MASKS ? m->started[axes] : -1;
		MPI_Request r;
		if (MPI_Isend(&m->answers[src], 1, MPI_INT64_T, src, m->probe_buf[1], m->probe_comm,
			      &r) == MPI_SUCCESS)
			MPI_Request_free(&r);
		MPI_Irecv(m->probe_buf, 2, MPI_INT, MPI_ANY_SOURCE, TAG_PROBE, m->probe_comm,
			  &m->probe_req);
	}
}

/* After a timeout in the group over axes: the members that have not
 * started this rank's latest collective there, in missing[] (world
 * ranks); silent[i] when member missing[i] did not answer at all. */
static int find_missing(Comm *c, uint32_t axes, int *missing, bool *silent, int max)
{
	MComm *m = c->impl;
	CommGroup g = comm_group(&c->mesh, c->rank, axes);
	int n = g.size, tag = TAG_ANSWER + (++m->round % 30000);
	MPI_Request *rq = calloc((size_t)n * 2, sizeof *rq);
	int64_t *got = calloc((size_t)n, sizeof *got);
	m->asked[0] = (int)axes;
	m->asked[1] = tag;
	if (!rq || !got) {
		free(rq);
		free(got);
		return 0;
	}
	for (int i = 0; i < n; i++) {
		int peer = comm_group_member(&c->mesh, c->rank, axes, i);
		rq[i] = rq[n + i] = MPI_REQUEST_NULL;
		if (peer == c->rank)
			continue;
		MPI_Irecv(&got[i], 1, MPI_INT64_T, peer, tag, m->probe_comm, &rq[i]);
		MPI_Isend(m->asked, 2, MPI_INT, peer, TAG_PROBE, m->probe_comm, &rq[n + i]);
	}
	/* live peers answer within milliseconds; a stopped one never does */
	double deadline = comm_now() + (c->timeout_s < PROBE_WAIT_S ? c->timeout_s : PROBE_WAIT_S);
	for (bool all = false; !all && comm_now() < deadline;) {
		serve_probes(m); /* peers that timed out too ask this rank */
		all = true;
		/* one by one: MPI_Testall frees nothing until all are done */
		for (int i = 0; i < 2 * n; i++) {
			int done = 0;
			if (rq[i] != MPI_REQUEST_NULL)
				MPI_Test(&rq[i], &done, MPI_STATUS_IGNORE);
			all &= rq[i] == MPI_REQUEST_NULL;
		}
		if (!all)
			usleep(200);
	}
	int nm = 0;
	for (int i = 0; i < n; i++) {
		int peer = comm_group_member(&c->mesh, c->rank, axes, i);
		if (peer == c->rank)
			continue;
		bool answered = rq[i] == MPI_REQUEST_NULL;
		if (!answered) {
			MPI_Cancel(&rq[i]);
			MPI_Request_free(&rq[i]);
		}
		if (rq[n + i] != MPI_REQUEST_NULL)
			MPI_Request_free(&rq[n + i]);
		if ((!answered || got[i] < m->started[axes]) && nm < max) {
			silent[nm] = !answered;
			missing[nm++] = peer;
		}
	}
	free(rq);
	free(got);
	return nm;
}

/* The timeout message, naming the members that did not arrive. */
static int timed_out(Comm *c, const char *op, uint32_t axes)
{
	char ax[96], who[256], mute[256];
	int missing[64];
	bool silent[64];
	comm_axes_name(&c->mesh, axes, ax, sizeof ax);
	int nm = strcmp(op, "recv") != 0 ? find_missing(c, axes, missing, silent, 64) : 0;
	if (nm == 0)
		return comm_errf(c, "rank %d timed out after %g s in %s over %s: a peer of that "
				 "group is stuck or dead", c->rank, c->timeout_s, op, ax);
	int k = 0, q = 0, nq = 0;
	for (int i = 0; i < nm; i++) {
		k += snprintf(who + k, sizeof who - (size_t)k, "%s%d", i ? ", " : "", missing[i]);
		if (silent[i])
			q += snprintf(mute + q, sizeof mute - (size_t)q, "%s%d", nq++ ? ", " : "",
				      missing[i]);
		if (k >= (int)sizeof who - 16 || q >= (int)sizeof mute - 16)
			break;
	}
	return comm_errf(c, "rank %d timed out after %g s in %s over %s waiting for rank%s %s%s%s%s",
			 c->rank, c->timeout_s, op, ax, nm > 1 ? "s" : "", who,
			 nq ? " (no answer from " : "", nq ? mute : "",
			 nq ? ": stopped, or busy outside communication)" : "");
}

/* Polls req to completion, a failure notice or the deadline. */
static int mwait(Comm *c, MPI_Request *req, const char *op, uint32_t axes)
{
	MComm *m = c->impl;
	double deadline = comm_now() + c->timeout_s;
	for (long spins = 0;; spins++) {
		int done = 0;
		int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS)
			return mpi_err(c, rc, op);
		if (done)
			return 0;
		MPI_Status st;
		int fdone = 0;
		if (!m->fail_seen)
			MPI_Test(&m->fail_req, &fdone, &st);
		if (fdone || m->fail_seen) {
			m->fail_seen = true;
			c->peer_failed = true;
			m->fail_buf[COMM_ERR_LEN - 1] = 0;
			return comm_errf(c, "rank %d failed: %s", fdone ? st.MPI_SOURCE : -1,
					 m->fail_buf);
		}
		if (comm_now() > deadline)
			return timed_out(c, op, axes);
		if ((spins & 63) == 0)
			serve_probes(m);
		if (spins > 2000)
			usleep(spins > 20000 ? 200 : 20);
	}
}

static MPI_Datatype mtype(DtmDtype t)
{
	return t == DTM_F32 ? MPI_FLOAT : t == DTM_I32 ? MPI_INT : MPI_UINT16_T;
}

static size_t esize(DtmDtype t)
{
	return t == DTM_BF16 || t == DTM_F16 ? 2 : 4;
}

static bool is16(DtmDtype t)
{
	return t == DTM_BF16 || t == DTM_F16;
}

/* in / out avg: divide the sum by n (integer division for i32) */
static void finish_avg(void *buf, int64_t count, DtmDtype t, int n)
{
	for (int64_t i = 0; i < count; i++) {
		if (t == DTM_I32)
			((int32_t *)buf)[i] /= n;
		else
			((float *)buf)[i] /= (float)n;
	}
}

/* 16-bit reductions run in f32: widened copies in scratch (the input at
 * the front, the output after it). */
static float *widen(Comm *c, const void *in, int64_t nin, int64_t nout, DtmDtype t)
{
	float *w = comm_scratch(c, (nin + nout) * 4);
	if (w)
		rt_widen(w, in, t, 0, nin);
	return w;
}

static int mp_all_reduce(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
			 DtmDtype t, DtmRed red)
{
	MPI_Comm g = MPI_COMM_NULL;
	MPI_Request req;
	if (group_comm(c, axes, &g))
		return -1;
	int n = 1;
	MPI_Comm_size(g, &n);
	MPI_Op op = red == DTM_RED_MAX ? MPI_MAX : MPI_SUM;
	if (is16(t)) {
		float *w = widen(c, in, count, 0, t);
		if (!w)
			return comm_errf(c, "out of memory");
		MPI_CHECK(c, MPI_Iallreduce(MPI_IN_PLACE, w, (int)count, MPI_FLOAT, op, g, &req));
		if (mwait(c, &req, "all_reduce", axes))
			return -1;
		if (red == DTM_RED_AVG)
			finish_avg(w, count, DTM_F32, n);
		rt_narrow(out, t, 0, w, count);
		return 0;
	}
	MPI_CHECK(c, MPI_Iallreduce(in == out ? MPI_IN_PLACE : in, out, (int)count, mtype(t), op,
				    g, &req));
	if (mwait(c, &req, "all_reduce", axes))
		return -1;
	if (red == DTM_RED_AVG)
		finish_avg(out, count, t, n);
	return 0;
}

static int mp_reduce_scatter(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
			     DtmDtype t, DtmRed red)
{
	MPI_Comm g = MPI_COMM_NULL;
	MPI_Request req;
	if (group_comm(c, axes, &g))
		return -1;
	int n = 1;
	MPI_Comm_size(g, &n);
	MPI_Op op = red == DTM_RED_MAX ? MPI_MAX : MPI_SUM;
	if (is16(t)) {
		float *w = widen(c, in, count * n, count, t);
		if (!w)
			return comm_errf(c, "out of memory");
		MPI_CHECK(c, MPI_Ireduce_scatter_block(w, w + count * n, (int)count, MPI_FLOAT, op,
						       g, &req));
		if (mwait(c, &req, "reduce_scatter", axes))
			return -1;
		if (red == DTM_RED_AVG)
			finish_avg(w + count * n, count, DTM_F32, n);
		rt_narrow(out, t, 0, w + count * n, count);
		return 0;
	}
	MPI_CHECK(c, MPI_Ireduce_scatter_block(in, out, (int)count, mtype(t), op, g, &req));
	if (mwait(c, &req, "reduce_scatter", axes))
		return -1;
	if (red == DTM_RED_AVG)
		finish_avg(out, count, t, n);
	return 0;
}

static int mp_all_gather(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
			 DtmDtype t)
{
	MPI_Comm g = MPI_COMM_NULL;
	MPI_Request req;
	if (group_comm(c, axes, &g))
		return -1;
	MPI_CHECK(c, MPI_Iallgather(in, (int)count, mtype(t), out, (int)count, mtype(t), g, &req));
	return mwait(c, &req, "all_gather", axes);
}

static int mp_all_to_allv(Comm *c, uint32_t axes, const void *in, const int64_t *scounts,
			  void *out, const int64_t *rcounts, DtmDtype t)
{
	MPI_Comm g = MPI_COMM_NULL;
	MPI_Request req;
	if (group_comm(c, axes, &g))
		return -1;
	int n = 1;
	MPI_Comm_size(g, &n);
	int *v = malloc((size_t)n * 4 * sizeof *v);
	if (!v)
		return comm_errf(c, "out of memory");
	int *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n;
	for (int j = 0, so = 0, ro = 0; j < n; j++) {
		sc[j] = (int)scounts[j], sd[j] = so, so += sc[j];
		rc[j] = (int)rcounts[j], rd[j] = ro, ro += rc[j];
	}
	int rcode = MPI_Ialltoallv(in, sc, sd, mtype(t), out, rc, rd, mtype(t), g, &req);
	if (rcode != MPI_SUCCESS) {
		free(v);
		return mpi_err(c, rcode, "MPI_Ialltoallv");
	}
	int r = mwait(c, &req, "all_to_all", axes);
	free(v); /* the counts must live until the operation completes */
	return r;
}

static int mp_broadcast(Comm *c, uint32_t axes, void *buf, int64_t count, DtmDtype t, int root)
{
	MPI_Comm g = MPI_COMM_NULL;
	MPI_Request req;
	if (group_comm(c, axes, &g))
		return -1;
	MPI_CHECK(c, MPI_Ibcast(buf, (int)((size_t)count * esize(t)), MPI_BYTE, root, g, &req));
	return mwait(c, &req, "broadcast", axes);
}

static int mp_barrier(Comm *c, uint32_t axes)
{
	MPI_Comm g = MPI_COMM_NULL;
	MPI_Request req;
	if (group_comm(c, axes, &g))
		return -1;
	reap_sends(c->impl);
	MPI_CHECK(c, MPI_Ibarrier(g, &req));
	return mwait(c, &req, "barrier", axes);
}

static int peer_at(Comm *c, uint32_t axes, int offset, bool mirror, int sign)
{
	return comm_group_peer(&c->mesh, c->rank, axes, offset, mirror, sign);
}

static int mp_send(Comm *c, uint32_t axes, int offset, bool mirror, const void *buf,
		   int64_t bytes)
{
	MComm *m = c->impl;
	reap_sends(m);
	if (m->nsends == m->capsends) {
		int cap = m->capsends ? 2 * m->capsends : 8;
		Pending *p = realloc(m->sends, (size_t)cap * sizeof *p);
		if (!p)
			return comm_errf(c, "out of memory");
		m->sends = p;
		m->capsends = cap;
	}
	void *copy = malloc((size_t)(bytes > 0 ? bytes : 1));
	if (!copy)
		return comm_errf(c, "out of memory buffering a send of %lld bytes", (long long)bytes);
	memcpy(copy, buf, (size_t)bytes);
	Pending *p = &m->sends[m->nsends];
	int rc = MPI_Isend(copy, (int)bytes, MPI_BYTE, peer_at(c, axes, offset, mirror, 1),
			   TAG_P2P + (int)axes, m->p2p_comm, &p->req);
	if (rc != MPI_SUCCESS) {
		free(copy);
		return mpi_err(c, rc, "MPI_Isend");
	}
	p->buf = copy;
	m->nsends++;
	return 0;
}

static int mp_recv(Comm *c, uint32_t axes, int offset, bool mirror, void *buf, int64_t bytes)
{
	MComm *m = c->impl;
	MPI_Request req;
	int peer = peer_at(c, axes, offset, mirror, -1);
	MPI_CHECK(c, MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, TAG_P2P + (int)axes, m->p2p_comm,
			       &req));
	if (mwait(c, &req, "recv", axes)) {
		size_t k = strlen(c->err);
		snprintf(c->err + k, sizeof c->err - k, " (receiving from rank %d)", peer);
		return -1;
	}
	return 0;
}

static void mp_fail(Comm *c, const char *msg)
{
	MComm *m = c->impl;
	int n = c->size;
	MPI_Request *reqs = calloc((size_t)n, sizeof *reqs);
	char buf[COMM_ERR_LEN];
	snprintf(buf, sizeof buf, "%s", msg ? msg : "(no message)");
	if (!reqs)
		return;
	for (int r = 0; r < n; r++) {
		reqs[r] = MPI_REQUEST_NULL;
		if (r != c->rank)
			MPI_Isend(buf, (int)strlen(buf) + 1, MPI_CHAR, r, TAG_FAIL, m->fail_comm,
				  &reqs[r]);
	}
	/* the peers pre-posted their receives, so this completes at once
	 * unless a peer is gone; never wait long for that */
	double deadline = comm_now() + 2.0;
	int done = 0;
	while (!done && comm_now() < deadline) {
		MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
		if (!done)
			usleep(100);
	}
	free(reqs);
}

static void mp_close(Comm *c)
{
	MComm *m = c->impl;
	/* buffered sends must reach their receivers before MPI ends */
	double deadline = comm_now() + c->timeout_s;
	while (m->nsends && comm_now() < deadline) {
		reap_sends(m);
		if (m->nsends)
			usleep(100);
	}
	for (int i = 0; i < m->nsends; i++)
		free(m->sends[i].buf);
	free(m->sends);
	for (int i = 0; i < MPI_MASKS; i++)
		if (m->have[i])
			MPI_Comm_free(&m->comms[i]);
	if (!m->fail_seen) {
		MPI_Cancel(&m->fail_req);
		MPI_Request_free(&m->fail_req);
	}
	if (m->probe_req != MPI_REQUEST_NULL) {
		MPI_Cancel(&m->probe_req);
		MPI_Request_free(&m->probe_req);
	}
	free(m->answers);
	free(m);
	free(c);
}

static const CommOps mpi_ops = {
	.name = "mpi",
	.all_reduce = mp_all_reduce,
	.all_gather = mp_all_gather,
	.reduce_scatter = mp_reduce_scatter,
	.all_to_allv = mp_all_to_allv,
	.broadcast = mp_broadcast,
	.send = mp_send,
	.recv = mp_recv,
	.barrier = mp_barrier,
	.fail = mp_fail,
	.close = mp_close,
};

int comm_mpi_open(Comm **out, const CommMesh *mesh, double timeout_s, char *err)
{
	*out = NULL;
	int inited = 0, provided = 0, rank = 0, size = 0;
	MPI_Initialized(&inited);
	/* The rank's kernels use threads that never call MPI.  With --overlap
	 * the rank's communication thread makes the calls during a step and
	 * this thread before and after it (open, checkpoint barriers, fail,
	 * close), never both at once: MPI_THREAD_SERIALIZED.  With less the
	 * runtime keeps communication on this thread (Comm.any_thread). */
	if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
		snprintf(err, COMM_ERR_LEN, "MPI_Init_thread failed");
		return -1;
	}
	if (inited)
		MPI_Query_thread(&provided);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int want = comm_world_size(mesh);
	if (size != want) {
		snprintf(err, COMM_ERR_LEN,
			 "the plan's mesh has %d ranks but MPI started %d processes: run "
			 "`mpirun -np %d ...`", want, size, want);
		return -1;
	}
	Comm *c = calloc(1, sizeof *c);
	MComm *m = calloc(1, sizeof *m);
	int64_t *answers = calloc((size_t)size, sizeof *answers);
	if (!c || !m || !answers) {
		free(c);
		free(m);
		free(answers);
		snprintf(err, COMM_ERR_LEN, "out of memory");
		return -1;
	}
	m->snap = *mesh;
	MPI_Comm_dup(MPI_COMM_WORLD, &m->fail_comm);
	MPI_Comm_dup(MPI_COMM_WORLD, &m->p2p_comm);
	MPI_Comm_set_errhandler(m->fail_comm, MPI_ERRORS_RETURN);
	MPI_Comm_set_errhandler(m->p2p_comm, MPI_ERRORS_RETURN);
	MPI_Comm_dup(MPI_COMM_WORLD, &m->probe_comm);
	MPI_Comm_set_errhandler(m->probe_comm, MPI_ERRORS_RETURN);
	MPI_Irecv(m->fail_buf, COMM_ERR_LEN, MPI_CHAR, MPI_ANY_SOURCE, TAG_FAIL, m->fail_comm,
		  &m->fail_req);
	m->answers = answers;
	MPI_Irecv(m->probe_buf, 2, MPI_INT, MPI_ANY_SOURCE, TAG_PROBE, m->probe_comm,
		  &m->probe_req);
	c->ops = &mpi_ops;
	c->rank = rank;
	c->size = size;
	c->mesh = *mesh;
	comm_coords(mesh, rank, c->coords);
	c->timeout_s = timeout_s > 0 ? timeout_s : COMM_DEFAULT_TIMEOUT_S;
	c->any_thread = provided >= MPI_THREAD_SERIALIZED;
	c->impl = m;
	if (build_comms(c)) {
		snprintf(err, COMM_ERR_LEN, "%s", c->err);
		mp_close(c);
		return -1;
	}
	*out = c;
	return 0;
}

void comm_mpi_finalize(bool failed)
{
	int inited = 0, fin = 0;
	MPI_Initialized(&inited);
	MPI_Finalized(&fin);
	if (!inited || fin)
		return;
	if (failed) {
		/* peers may sit in operations this rank will never join, and
		 * MPI_Finalize could wait for them: end the job instead, after
		 * a moment for the peers to print their own errors */
		fflush(stdout);
		fflush(stderr);
		usleep(300 * 1000);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	MPI_Finalize();
}
