/* comm_bench.c - bus bandwidth of the communication backends, with the
 * nccl-tests definitions, against memcpy bandwidth as the limit.
 *
 *   comm_bench [--ranks N] [--min BYTES] [--max BYTES] [--op NAME]...  local (threads)
 *   mpirun -np N comm_bench --backend mpi [--min ..] [--max ..] [--op NAME]...
 *
 * --op (repeatable) runs only the named collectives; the default is all.
 *
 * size S = the bytes of the whole tensor (nccl-tests' "size"): all_reduce
 * reduces S bytes on every rank; all_gather's output is S (each rank
 * contributes S/N); reduce_scatter's input is S (each keeps S/N);
 * all_to_all's input and output are S on every rank (S/N to each peer,
 * nccl-tests' alltoall "size").
 *   algbw = S / time
 *   busbw = algbw * 2(N-1)/N  (all_reduce),  * (N-1)/N  (all_gather,
 *           reduce_scatter, all_to_all: the S/N a rank keeps moves nowhere)
 * memcpy: one thread copying S bytes between two buffers, S / time (the
 * same bytes-moved convention as algbw).  f32 sum; each figure is the
 * mean over enough iterations to move ~2 GB (at least 3), after a warm-up.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"

typedef struct Cfg {
	int ranks;
	int64_t min, max;
	unsigned ops; /* bit per OP_*; 0 = all */
	CommLocalWorld *w;
} Cfg;

enum { OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_ALL_TO_ALL, NOPS };
static const char *op_names[NOPS] = { "all_reduce", "all_gather", "reduce_scatter",
				      "all_to_all" };

static int op_index(const char *name)
{
	for (int op = 0; op < NOPS; op++)
		if (!strcmp(name, op_names[op]))
			return op;
	return -1;
}

static int iters_for(int64_t size)
{
	int64_t it = (2LL << 30) / (size > 0 ? size : 1);
	return it < 3 ? 3 : it > 2000 ? 2000 : (int)it;
}

static double memcpy_bw(int64_t size)
{
	char *a = malloc((size_t)size), *b = malloc((size_t)size);
	memset(a, 1, (size_t)size);
	memset(b, 2, (size_t)size);
	int it = iters_for(size);
	memcpy(b, a, (size_t)size);
	double t0 = comm_now();
	for (int i = 0; i < it; i++) {
		memcpy(b, a, (size_t)size);
		/* keep the copy from being optimised away */
		a[i % size] = b[(i * 7) % size];
	}
	double dt = (comm_now() - t0) / it;
	free(a);
	free(b);
	return (double)size / dt;
}

static DtmDtype dtype = DTM_F32; /* --dtype bf16: the 16-bit reductions */

static int bench_op(Comm *c, int op, int64_t size, float *in, float *out, double *secs)
{
	int n = c->size;
	int64_t count = size / (dtype == DTM_F32 ? 4 : 2);
	int it = iters_for(size);
	for (int i = -1; i < it; i++) {
		if (i == 0) {
			if (comm_barrier(c, 1))
				return -1;
			*secs = comm_now();
		}
		int rc = 0;
		switch (op) {
		case OP_ALL_REDUCE:
			rc = comm_all_reduce(c, 1, in, out, count, dtype, DTM_RED_SUM);
			break;
		case OP_ALL_GATHER:
			rc = comm_all_gather(c, 1, in, out, count / n, dtype);
			break;
		case OP_REDUCE_SCATTER:
			rc = comm_reduce_scatter(c, 1, in, out, count / n, dtype, DTM_RED_SUM);
			break;
		case OP_ALL_TO_ALL:
			rc = comm_all_to_all(c, 1, in, out, count / n, dtype);
			break;
		}
		if (rc)
			return -1;
	}
	if (comm_barrier(c, 1))
		return -1;
	*secs = (comm_now() - *secs) / it;
	return 0;
}

static int bench(Comm *c, const Cfg *cfg)
{
	int n = c->size;
	float *in = malloc((size_t)cfg->max), *out = malloc((size_t)cfg->max);
	if (!in || !out) {
		fprintf(stderr, "comm_bench: out of memory\n");
		return -1;
	}
	for (int64_t i = 0; i < cfg->max / 4; i++)
		in[i] = (float)(i % 7);
	memset(out, 0, (size_t)cfg->max);
	if (c->rank == 0) {
		printf("# backend %s, %d ranks, %s sum; GB/s = 1e9 bytes/s\n", c->ops->name, n,
		       dtype == DTM_F32 ? "f32" : "bf16");
		printf("%-15s %12s %12s %10s %10s %10s %8s\n", "op", "size(B)", "time(us)",
		       "algbw", "busbw", "memcpy", "bus/mem");
	}
	for (int op = 0; op < NOPS; op++) {
		if (cfg->ops && !(cfg->ops & (1u << op)))
			continue;
		for (int64_t size = cfg->min; size <= cfg->max; size *= 4) {
			double secs = 0;
			if (bench_op(c, op, size, in, out, &secs)) {
				fprintf(stderr, "comm_bench: rank %d: %s\n", c->rank, comm_error(c));
				free(in);
				free(out);
				return -1;
			}
			if (c->rank == 0) {
				double alg = (double)size / secs;
				double f = op == OP_ALL_REDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
				double mem = memcpy_bw(size);
				printf("%-15s %12lld %12.1f %10.2f %10.2f %10.2f %7.0f%%\n", op_names[op],
				       (long long)size, secs * 1e6, alg / 1e9, alg * f / 1e9, mem / 1e9,
				       100 * alg * f / mem);
				fflush(stdout);
			}
			if (comm_barrier(c, 1))
				return -1;
		}
	}
	free(in);
	free(out);
	return 0;
}

typedef struct Job {
	const Cfg *cfg;
	int rank, rc;
} Job;

static void *job(void *p)
{
	Job *j = p;
	Comm *c;
	char err[COMM_ERR_LEN];
	if (comm_local_open(&c, j->cfg->w, j->rank, err)) {
		fprintf(stderr, "comm_bench: %s\n", err);
		j->rc = -1;
	} else {
		j->rc = bench(c, j->cfg);
		if (j->rc && !c->peer_failed)
			comm_fail(c, comm_error(c));
		comm_close(c);
	}
	comm_local_exit(j->cfg->w, j->rank);
	return NULL;
}

static int64_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	if (*end == 'K' || *end == 'k')
		v *= 1024;
	else if (*end == 'M' || *end == 'm')
		v *= 1024 * 1024;
	else if (*end == 'G' || *end == 'g')
		v *= 1024.0 * 1024 * 1024;
	return (int64_t)v;
}

int main(int argc, char **argv)
{
	Cfg cfg = { .ranks = 4, .min = 1024, .max = 256LL << 20 };
	const char *backend = "local";
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--ranks"))
			cfg.ranks = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--min"))
			cfg.min = parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "--max"))
			cfg.max = parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "--backend"))
			backend = argv[i + 1];
		else if (!strcmp(argv[i], "--dtype") && !strcmp(argv[i + 1], "bf16"))
			dtype = DTM_BF16;
		else if (!strcmp(argv[i], "--dtype") && !strcmp(argv[i + 1], "f32"))
			dtype = DTM_F32;
		else if (!strcmp(argv[i], "--op") && op_index(argv[i + 1]) >= 0)
			cfg.ops |= 1u << op_index(argv[i + 1]);
		else {
			fprintf(stderr, "usage: %s [--backend local|mpi] [--ranks N] [--min B] "
					"[--max B] [--dtype f32|bf16] [--op all_reduce|all_gather|"
					"reduce_scatter|all_to_all]...\n", argv[0]);
			return 1;
		}
	}
	if (cfg.min < 1024)
		cfg.min = 1024;
	char err[COMM_ERR_LEN];
	if (!strcmp(backend, "mpi")) {
		if (!comm_mpi_open) {
			fprintf(stderr, "comm_bench: built without the mpi backend\n");
			return 1;
		}
		/* the group is the whole world, whatever its size */
		int np = 1;
		const char *s = getenv("OMPI_COMM_WORLD_SIZE");
		if (s)
			np = atoi(s);
		CommMesh m = { .naxes = 1, .sizes = { np }, .names = { "world" } };
		Comm *c;
		if (comm_mpi_open(&c, &m, 600, err)) {
			fprintf(stderr, "comm_bench: %s\n", err);
			comm_mpi_finalize(true);
			return 1;
		}
		int rc = bench(c, &cfg);
		comm_close(c);
		comm_mpi_finalize(rc != 0);
		return rc ? 1 : 0;
	}
	CommMesh m = { .naxes = 1, .sizes = { cfg.ranks }, .names = { "world" } };
	cfg.w = comm_local_world_new(&m, 600, err);
	if (!cfg.w) {
		fprintf(stderr, "comm_bench: %s\n", err);
		return 1;
	}
	Job jobs[64];
	pthread_t th[64];
	int n = cfg.ranks < 64 ? cfg.ranks : 64, rc = 0;
	for (int r = 0; r < n; r++) {
		jobs[r] = (Job){ &cfg, r, 0 };
		pthread_create(&th[r], NULL, job, &jobs[r]);
	}
	for (int r = 0; r < n; r++) {
		pthread_join(th[r], NULL);
		rc |= jobs[r].rc;
	}
	comm_local_world_free(cfg.w);
	return rc ? 1 : 0;
}
