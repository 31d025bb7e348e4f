/* comm.h - the runtime's communication interface: collectives over groups
 * of mesh ranks, behind one table of function pointers per backend.
 *
 * Backends:
 *   local  ranks are threads of one process (comm_local.c): shared memory,
 *          each collective is a direct read/write of the peers' buffers
 *          between two barriers.  The default: `./NAME` runs the whole mesh.
 *   mpi    one process per rank (comm_mpi.c, Open MPI): built only when
 *          CMake finds MPI, into its own object library, because generated
 *          binaries link the runtime without -lmpi.  main.c reaches it
 *          through a weak reference to comm_mpi_open.
 *
 * Groups.  A collective runs over the ranks that differ from the caller
 * only in the coordinates of the mesh axes in `axes` (a bitmask, bit a =
 * mesh axis a; 0 = a group of one).  Members are ordered row-major over
 * those axes, the lowest-numbered axis major (ir/mesh.c's mesh_group rule,
 * reimplemented here so the runtime does not include ir/): for mesh
 * (dp = 2, tp = 2) the tp groups are [0,1] and [2,3], the dp groups [0,2]
 * and [1,3], and axes {dp, tp} is [0,1,2,3].  "Group index" below is a
 * rank's position in that order.
 *
 * Semantics (n = group size, counts in elements of dtype t):
 *   all_reduce      out[i] = red over members of in[i]; count each; avg is
 *                   the sum divided by n (integer division for i32); bf16
 *                   and f16 are summed in f32 and rounded once.
 *   all_gather      out = concat over members g of in_g (count each, out
 *                   holds n * count): member g's chunk lands at g * count.
 *   reduce_scatter  in holds n * count; member g keeps the reduction of
 *                   chunk g (count elements) in out.
 *   all_to_allv     member g sends scounts[j] elements to member j, packed
 *                   in j order in `in`; receives rcounts[j] from member j,
 *                   packed in j order in `out`.  comm_all_to_all is the
 *                   equal-count form (count per peer).
 *   broadcast       every member's buf becomes root's (root: group index).
 *   send / recv     data moves `offset` steps along the group (wrapping:
 *                   group index mod n): send goes to (g + offset) mod n,
 *                   recv comes from (g - offset) mod n, so a matched pair
 *                   carries the same offset on both sides; with mirror
 *                   both go to and come from (offset - g) mod n, which
 *                   may be g itself.  Sends are
 *                   buffered (local) or eager-or-rendezvous (mpi): a ring
 *                   where every rank sends then receives does not
 *                   deadlock on local; on mpi use comm_sendrecv for that.
 *   barrier         over the group.
 * Buffers: in and out must not overlap, except that in == out is allowed
 * for all_reduce (and broadcast has one buffer).  The *_dim helpers and
 * comm_run_action stage an overlapping input through scratch.
 *
 * Failure: every call returns 0, or -1 with a message in comm_error().  A
 * rank that fails calls comm_fail(); its peers' pending and later calls
 * return within about a poll interval with "rank R failed: ...", and a peer
 * that never arrives makes a call fail after the timeout (default 60 s)
 * with a message naming the ranks that did not arrive.  Nothing blocks
 * forever.  On local no call returns, failed or not, while a peer may
 * still read or write the buffers it was given (comm_local.c's entry and
 * exit barriers), so a rank that fails may free them at once.  (On mpi a
 * failed call may leave its operation pending inside MPI; the process
 * then ends in MPI_Abort.)
 */
#ifndef DTM_COMM_H
#define DTM_COMM_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/plan.h"

#define COMM_ERR_LEN 512
#define COMM_DEFAULT_TIMEOUT_S 60.0

typedef struct Comm Comm;

/* One backend: filled with designated initialisers in comm_local.c and
 * comm_mpi.c.  Every operation has the semantics written above; the
 * public comm_* wrappers validate arguments first. */
typedef struct CommOps {
	const char *name;
	int (*all_reduce)(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
			  DtmDtype t, DtmRed red);
	int (*all_gather)(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
			  DtmDtype t);
	int (*reduce_scatter)(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
			      DtmDtype t, DtmRed red);
	int (*all_to_allv)(Comm *c, uint32_t axes, const void *in, const int64_t *scounts,
			   void *out, const int64_t *rcounts, DtmDtype t);
	int (*broadcast)(Comm *c, uint32_t axes, void *buf, int64_t count, DtmDtype t, int root);
	int (*send)(Comm *c, uint32_t axes, int offset, bool mirror, const void *buf,
	            int64_t bytes);
	int (*recv)(Comm *c, uint32_t axes, int offset, bool mirror, void *buf, int64_t bytes);
	int (*barrier)(Comm *c, uint32_t axes);
	/* Tells the peers this rank has failed (msg says why). */
	void (*fail)(Comm *c, const char *msg);
	void (*close)(Comm *c);
} CommOps;

/* The mesh as the runtime sees it (a copy of the plan's). */
typedef struct CommMesh {
	int naxes;
	int64_t sizes[DTM_MAX_AXES];
	const char *names[DTM_MAX_AXES];
} CommMesh;

/* The kinds comm_count_moved counts: the collectives, then sends, recvs. */
enum { COMM_MOVED_SEND = DTM_COLL_BROADCAST + 1, COMM_MOVED_RECV, COMM_MOVED_KINDS };

/* One rank's endpoint.  Backends put their state behind impl. */
struct Comm {
	const CommOps *ops;
	int rank, size;
	CommMesh mesh;
	int64_t coords[DTM_MAX_AXES];
	double timeout_s;
	/* Operations may be called from a thread other than the one that
	 * opened the Comm, one thread at a time (the runtime's communication
	 * thread, --overlap): always on local; on mpi when MPI provides
	 * MPI_THREAD_SERIALIZED or better. */
	bool any_thread;
	bool peer_failed;       /* the last error was another rank's failure */
	char err[COMM_ERR_LEN];
	void *scratch;          /* staging for the *_dim helpers, grown on demand */
	int64_t a2a_bytes;      /* bytes this rank's all_to_alls sent to others (the runtime logs and resets it) */
	/* The plan's communication actions this rank ran (comm_count_moved),
	 * per kind (DtmCollKind's, then COMM_MOVED_SEND and _RECV): how many
	 * and their bytes, each action's input as the plan (and so `dtmc
	 * inspect`) counts it.  The runtime resets them each step; atomic, as
	 * the communication thread and the compute thread both run actions. */
	_Atomic int64_t moved_count[COMM_MOVED_KINDS], moved_bytes[COMM_MOVED_KINDS];
	int64_t scratch_bytes;
	void *impl;
};

/* ---- groups (comm.c) ---- */

typedef struct CommGroup {
	int size;       /* members */
	int index;      /* the caller's position */
	int color;      /* the world rank of member 0: names the group */
} CommGroup;

void comm_mesh_from_plan(CommMesh *m, const DtmPlan *p);
int comm_world_size(const CommMesh *m);
void comm_coords(const CommMesh *m, int rank, int64_t *coords);
CommGroup comm_group(const CommMesh *m, int rank, uint32_t axes);
/* World rank of member `index` of the group of `rank` over axes. */
int comm_group_member(const CommMesh *m, int rank, uint32_t axes, int index);
/* World rank of `rank`'s peer along its group over axes (sign +1: where a
 * send goes; -1: where a recv comes from): dtm_peer_index (plan.h). */
int comm_group_peer(const CommMesh *m, int rank, uint32_t axes, int offset, bool mirror,
                    int sign);
/* "{dp, tp}" for messages. */
const char *comm_axes_name(const CommMesh *m, uint32_t axes, char *buf, int n);

/* ---- backends ---- */

/* The local backend: a world of `size` thread ranks shared by all of
 * them.  comm_local_world_new once, then comm_local_open from each rank's
 * thread (or before starting it); comm_close each Comm, then free the
 * world after every thread has joined. */
typedef struct CommLocalWorld CommLocalWorld;
CommLocalWorld *comm_local_world_new(const CommMesh *mesh, double timeout_s, char *err);
void comm_local_world_free(CommLocalWorld *w);
int comm_local_open(Comm **out, CommLocalWorld *w, int rank, char *err);
/* Marks a rank as finished (its thread returned): a peer still waiting
 * for it then fails at once instead of at the timeout. */
void comm_local_exit(CommLocalWorld *w, int rank);

/* The mpi backend (comm_mpi.c): MPI_Init_thread on first use; rank and
 * size from MPI_COMM_WORLD, checked against the mesh.  Weak so binaries
 * without MPI still link: test `comm_mpi_open != NULL`. */
int comm_mpi_open(Comm **out, const CommMesh *mesh, double timeout_s, char *err)
	__attribute__((weak));
/* Ends MPI: MPI_Finalize after success; after a failure MPI_Abort, since
 * peers may be stuck in operations this rank will never join. */
void comm_mpi_finalize(bool failed) __attribute__((weak));

/* ---- operations (comm.c: validate, then call the backend) ---- */

const char *comm_error(const Comm *c);
void comm_close(Comm *c);
void comm_fail(Comm *c, const char *msg);

int comm_all_reduce(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
		    DtmDtype t, DtmRed red);
int comm_all_gather(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
		    DtmDtype t);
int comm_reduce_scatter(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
			DtmDtype t, DtmRed red);
int comm_all_to_all(Comm *c, uint32_t axes, const void *in, void *out, int64_t count,
		    DtmDtype t);
int comm_all_to_allv(Comm *c, uint32_t axes, const void *in, const int64_t *scounts,
		     void *out, const int64_t *rcounts, DtmDtype t);
int comm_broadcast(Comm *c, uint32_t axes, void *buf, int64_t count, DtmDtype t, int root);
int comm_send(Comm *c, uint32_t axes, int offset, bool mirror, const void *buf, int64_t bytes);
int comm_recv(Comm *c, uint32_t axes, int offset, bool mirror, void *buf, int64_t bytes);
int comm_barrier(Comm *c, uint32_t axes);

/* Times each collective kind and send/recv over the whole world at two
 * sizes (every rank calls it); rank 0 writes `coll KIND N = LATENCY, BW`
 * lines (tools/hw.h) into text[0..cap) when text is non-NULL.  Returns 0,
 * or -1 with the error in c->err. */
int comm_calibrate(Comm *c, char *text, size_t cap);

/* Along a dim of a row-major tensor.  shape is the caller's INPUT shape
 * (rank dims):
 *   all_gather_dim      out has shape[dim] * n along dim, member g's block
 *                       at g * shape[dim];
 *   reduce_scatter_dim  shape[dim] must divide by n; out keeps block g;
 *   all_to_all_dim      in split along split_dim into n blocks, block j to
 *                       member j; the n received blocks concatenated along
 *                       concat_dim in member order (shape[split_dim] must
 *                       divide by n). */
int comm_all_gather_dim(Comm *c, uint32_t axes, const void *in, void *out,
			const int64_t *shape, int rank, int dim, DtmDtype t);
int comm_reduce_scatter_dim(Comm *c, uint32_t axes, const void *in, void *out,
			    const int64_t *shape, int rank, int dim, DtmDtype t, DtmRed red);
/*   all_to_all_rows     all_to_all_dim's result, moving only each slab's
 *                       used rows: a slab is one index of the dims before
 *                       vdim (which follows split_dim and concat_dim),
 *                       its rows the vdim slices; the rows after the last
 *                       one with a non-zero byte are not sent but written
 *                       as zeros by the receiver.  The slab counts travel
 *                       first (an i32 all_to_all), then all_to_allv.
 *                       *sent: the bytes sent to other members, counts
 *                       included (the dispatched tokens of a mixture of
 *                       experts: each expert's capacity rows past its
 *                       load are empty). */
int comm_all_to_all_rows(Comm *c, uint32_t axes, const void *in, void *out,
			 const int64_t *shape, int rank, int split_dim, int concat_dim,
			 int vdim, DtmDtype t, int64_t *sent);
int comm_all_to_all_dim(Comm *c, uint32_t axes, const void *in, void *out,
			const int64_t *shape, int rank, int split_dim, int concat_dim,
			DtmDtype t);

/* Runs one DTM_ACT_COLL / SEND / RECV action of a plan on this rank's
 * buffers (ptr: per buffer id).  The conventions the compiler emits are
 * in comm.c above this function.  err gets the message on failure. */
int comm_run_action(Comm *c, const DtmPlan *p, const DtmAction *a, void *const *ptr,
		    char *err, int errlen);
/* Counts action a, moving bytes, in c's moved_count/moved_bytes: what
 * comm_run_action does for each action it ran, and the cuda device for each
 * it hands NCCL. */
void comm_count_moved(Comm *c, const DtmAction *a, int64_t bytes);

/* ---- shared by the backends (comm.c) ---- */

int comm_errf(Comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* acc[i] = red(acc[i], x[i]) for n f32 values; max or sum (avg sums). */
void comm_reduce_f32(float *acc, const float *x, int64_t n, DtmRed red);
void comm_reduce_i32(int32_t *acc, const int32_t *x, int64_t n, DtmRed red);
/* Scratch of at least bytes, kept for the Comm's life; NULL on OOM. */
void *comm_scratch(Comm *c, int64_t bytes);
double comm_now(void);

#endif
