/* cuda_host.c - the CUDA device's host-side decisions (see cuda_host.h):
 * pure functions of the plan and the device's limits, tested without a GPU.
 */
#include "runtime/cuda_host.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "runtime/rt.h"

/* ---- launches ---- */

int rt_cuda_launch_config(const DtmCudaKernel *k, const RtCudaLimits *lim, RtCudaLaunch *out,
			  char *err)
{
	const char *name = k->name ? k->name : "?";
	*out = (RtCudaLaunch){ 0 };
	int block = k->block > 0 ? k->block : 256;
	if (k->threads < 0 || k->block < 0 || k->smem_bytes < 0)
		return rt_errf(err, "kernel %s: negative launch shape (threads %lld, block %d, "
			       "shared memory %d)", name, (long long)k->threads, k->block,
			       k->smem_bytes);
	if (block > lim->max_block)
		return rt_errf(err, "kernel %s: block of %d threads, the GPU allows %d", name,
			       block, lim->max_block);
	if (k->threads == 0) {
		out->skip = true;
		return 0;
	}
	int64_t grid = (k->threads + block - 1) / block;
	if (grid > lim->max_grid || grid > UINT_MAX)
		return rt_errf(err, "kernel %s: %lld blocks, the GPU allows %lld", name,
			       (long long)grid, (long long)lim->max_grid);
	if (k->smem_bytes > lim->smem_optin && k->smem_bytes > lim->smem_default)
		return rt_errf(err, "kernel %s: %d bytes of shared memory, the GPU allows %d", name,
			       k->smem_bytes, lim->smem_optin > lim->smem_default ?
						      lim->smem_optin : lim->smem_default);
	out->grid = (unsigned)grid;
	out->block = (unsigned)block;
	out->smem = (unsigned)k->smem_bytes;
	out->smem_optin = k->smem_bytes > lim->smem_default;
	return 0;
}

/* ---- GEMM ---- */

static bool fits_int(int64_t v)
{
	return v >= 0 && v <= INT_MAX;
}

int rt_cuda_gemm_desc(const DtmAction *a, RtCudaGemm *g, char *err)
{
	const char *label = a->label ? a->label : "?";
	int64_t m = a->m, n = a->n, k = a->k, batch = a->batch > 1 ? a->batch : 1;
	int64_t lda = a->trans_a ? m : k, ldb = a->trans_b ? k : n;
	if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(batch) || !fits_int(lda) ||
	    !fits_int(ldb))
		return rt_errf(err, "gemm '%s': %lld x %lld x %lld (batch %lld) is beyond cuBLAS's "
			       "int sizes", label, (long long)m, (long long)n, (long long)k,
			       (long long)batch);
	if (a->stride_a < 0 || a->stride_b < 0 || a->stride_c < 0)
		return rt_errf(err, "gemm '%s': negative batch stride", label);
	*g = (RtCudaGemm){
		.trans_first = a->trans_b,
		.trans_second = a->trans_a,
		.rows = (int)n,
		.cols = (int)m,
		.k = (int)k,
		/* cuBLAS wants ld >= 1 even for an empty matrix */
		.ld_first = ldb > 0 ? (int)ldb : 1,
		.ld_second = lda > 0 ? (int)lda : 1,
		.ldc = n > 0 ? (int)n : 1,
		.stride_first = a->stride_b,
		.stride_second = a->stride_a,
		.stride_c = a->stride_c,
		.batch = (int)batch,
		.sequential = batch > 1 && a->stride_c == 0,
	};
	return 0;
}

int rt_cuda_gemm_types(DtmDtype a, DtmDtype b, DtmDtype c, const char *label, char *err)
{
	if (a == b && a != DTM_I32 && (c == a || c == DTM_F32))
		return 0;
	return rt_errf(err, "gemm '%s': operands %s x %s -> %s; cuBLAS takes A and B of one float "
		       "type and C of that type or f32", label ? label : "?", rt_dtype_name(a),
		       rt_dtype_name(b), rt_dtype_name(c));
}

/* ---- --calibrate-gemm on the device ---- */

int rt_cuda_cal_shapes(int64_t mnk[][3], int max)
{
	static const int64_t ms[] = {1, 16, 128, 1024, 4096, 16384}, ns[] = {256, 1024, 4096, 16384},
			     ks[] = {64, 256, 1024, 4096, 16384};
	int n = 0;
	for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
		for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
			for (size_t c = 0; c < sizeof ks / sizeof *ks && n < max; c++, n++) {
				mnk[n][0] = ms[a];
				mnk[n][1] = ns[b];
				mnk[n][2] = ks[c];
			}
	return n;
}

int rt_cuda_cal_reps(double call_s)
{
	if (!(call_s > 0))
		return 1;
	double r = ceil(RT_CUDA_CAL_BATCH_S / call_s);
	return r < 1 ? 1 : r > RT_CUDA_CAL_MAX_REPS ? RT_CUDA_CAL_MAX_REPS : (int)r;
}

/* ---- streams and events ---- */

/* The buffers an action reads and writes (write sets also count as
 * touched).  Kernels and GEMMs write their last argument; collectives
 * read the first and write the rest (in place: the one buffer is both);
 * a send reads its buffer, a receive writes it. */
typedef struct Access {
	int r[DTM_MAX_ARGS], w[DTM_MAX_ARGS];
	int nr, nw;
} Access;

static void access_of(const DtmAction *a, Access *x)
{
	x->nr = x->nw = 0;
	int n = a->nargs < 0 ? 0 : a->nargs > DTM_MAX_ARGS ? DTM_MAX_ARGS : a->nargs;
	switch (a->kind) {
	case DTM_ACT_KERNEL:
	case DTM_ACT_GEMM:
		for (int j = 0; j + 1 < n; j++)
			x->r[x->nr++] = a->args[j];
		if (n > 0)
			x->w[x->nw++] = a->args[n - 1];
		break;
	case DTM_ACT_COLL:
		if (n > 0)
			x->r[x->nr++] = a->args[0];
		for (int j = n > 1 ? 1 : 0; j < n; j++)
			x->w[x->nw++] = a->args[j];
		break;
	case DTM_ACT_SEND:
		if (n > 0)
			x->r[x->nr++] = a->args[0];
		break;
	case DTM_ACT_RECV:
		if (n > 0)
			x->w[x->nw++] = a->args[0];
		break;
	case DTM_ACT_WAIT:
		break;
	}
}

static bool overlaps(const DtmPlan *p, int x, int y)
{
	if (x < 0 || y < 0 || x >= p->nbuffers || y >= p->nbuffers)
		return false;
	const DtmBuffer *a = &p->buffers[x], *b = &p->buffers[y];
	if (a->bytes <= 0 || b->bytes <= 0 || a->arena != b->arena)
		return false;
	return a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

static bool any_overlap(const DtmPlan *p, const int *xs, int nx, const int *ys, int ny)
{
	for (int i = 0; i < nx; i++)
		for (int j = 0; j < ny; j++)
			if (overlaps(p, xs[i], ys[j]))
				return true;
	return false;
}

/* Must `later` be ordered after `earlier`? */
static bool conflict(const DtmPlan *p, const Access *earlier, const Access *later)
{
	return any_overlap(p, earlier->w, earlier->nw, later->r, later->nr) ||
	       any_overlap(p, earlier->w, earlier->nw, later->w, later->nw) ||
	       any_overlap(p, earlier->r, earlier->nr, later->w, later->nw);
}

static bool is_p2p(const DtmAction *a)
{
	return a->kind == DTM_ACT_SEND || a->kind == DTM_ACT_RECV;
}

void rt_cuda_sched_free(RtCudaSched *s)
{
	free(s->stream);
	free(s->wait);
	free(s->record);
	free(s->group_len);
	*s = (RtCudaSched){ 0 };
}

int rt_cuda_schedule(const DtmPlan *p, int stage, bool forward_only, RtCudaSched *s, char *err)
{
	*s = (RtCudaSched){ 0 };
	if (stage < 0 || stage >= p->nstages)
		return rt_errf(err, "stage %d of %d", stage, p->nstages);
	const DtmStage *st = &p->stages[stage];
	int n = st->nactions;
	size_t cnt = (size_t)(n > 0 ? n : 1);
	s->n = n;
	s->stream = malloc(cnt);
	s->wait = malloc(cnt * sizeof *s->wait);
	s->record = calloc(cnt, sizeof *s->record);
	s->group_len = malloc(cnt * sizeof *s->group_len);
	Access *acc = malloc(cnt * sizeof *acc);
	if (!s->stream || !s->wait || !s->record || !s->group_len || !acc) {
		free(acc);
		rt_cuda_sched_free(s);
		return rt_errf(err, "out of memory scheduling %d actions", n);
	}
	for (int i = 0; i < n; i++) {
		const DtmAction *a = &st->actions[i];
		bool runs = a->kind != DTM_ACT_WAIT &&
			    (!forward_only || a->phase == DTM_PHASE_FORWARD);
		s->stream[i] = (signed char)(runs ? (a->stream > 0 ? 1 : 0) : -1);
		s->wait[i] = -1;
		s->group_len[i] = 1;
		access_of(a, &acc[i]);
	}
	/* covered[s]: stream s is already ordered after the other stream's
	 * actions up to this index */
	int covered[2] = { -1, -1 };
	for (int i = 0; i < n; i++) {
		int si = s->stream[i];
		if (si < 0)
			continue;
		for (int j = i - 1; j > covered[si]; j--) {
			if (s->stream[j] < 0 || s->stream[j] == si)
				continue;
			if (conflict(p, &acc[j], &acc[i])) {
				s->wait[i] = j;
				s->record[j] = true;
				covered[si] = j;
				s->nwaits++;
				break;
			}
		}
	}
	/* NCCL groups of consecutive independent sends and receives */
	for (int i = 0; i < n;) {
		if (s->stream[i] < 0 || !is_p2p(&st->actions[i])) {
			i++;
			continue;
		}
		int first = i, len = 1;
		for (i = i + 1; i < n; i++) {
			if (s->stream[i] < 0)
				continue; /* skipped actions do not break a group */
			if (!is_p2p(&st->actions[i]) || s->stream[i] != s->stream[first])
				break;
			bool dep = false;
			for (int j = first; j < i && !dep; j++)
				if (s->stream[j] >= 0 && conflict(p, &acc[j], &acc[i]))
					dep = true;
			if (dep)
				break;
			s->group_len[i] = 0;
			len++;
		}
		s->group_len[first] = len;
	}
	free(acc);
	return 0;
}

int rt_cuda_comm_axes(const DtmPlan *p, uint32_t *axes, int max)
{
	int n = 0;
	for (int st = 0; st < p->nstages; st++) {
		for (int i = 0; i < p->stages[st].nactions; i++) {
			const DtmAction *a = &p->stages[st].actions[i];
			if (a->kind != DTM_ACT_COLL && !is_p2p(a))
				continue;
			bool seen = false;
			for (int j = 0; j < n; j++)
				seen |= axes[j] == a->axes;
			if (!seen && n < max)
				axes[n++] = a->axes;
		}
	}
	return n;
}

/* ---- devices ---- */

int rt_cuda_pick_device(int ndev, bool local_backend, int rank, int world, int local_rank,
			char *err)
{
	if (ndev < 1)
		return rt_errf(err, "no CUDA device");
	if (local_backend) {
		if (world > ndev)
			return rt_errf(err, "the local backend runs the mesh's %d ranks as threads of "
				       "one process and needs a GPU per rank, but %d %s visible; "
				       "use a mesh of at most %d ranks, or one process per GPU "
				       "(mpirun -np %d ./NAME --device cuda --backend mpi)",
				       world, ndev, ndev == 1 ? "is" : "are", ndev, world);
		return rank;
	}
	int lr = local_rank < 0 ? 0 : local_rank;
	if (lr >= ndev)
		return rt_errf(err, "rank %d is local rank %d on its host, which has %d visible "
			       "GPU%s: start at most %d processes per host", rank, lr, ndev,
			       ndev == 1 ? "" : "s", ndev);
	return lr;
}

/* ---- NVRTC ---- */

int rt_cuda_pick_arch(int major, int minor, const int *supported, int nsupported, int *arch,
		      bool *ptx, char *err)
{
	int want = major * 10 + minor, best = -1;
	for (int i = 0; i < nsupported; i++) {
		if (supported[i] == want) {
			*arch = want;
			*ptx = false;
			return 0;
		}
		if (supported[i] < want && supported[i] > best)
			best = supported[i];
	}
	if (best < 0)
		return rt_errf(err, "the GPU's compute capability %d.%d is older than every target "
			       "this NVRTC supports", major, minor);
	*arch = best;
	*ptx = true;
	return 0;
}

int rt_cuda_nvrtc_options(int arch, bool ptx, char opts[RT_CUDA_MAX_OPTS][RT_CUDA_OPT_LEN])
{
	int n = 0;
	snprintf(opts[n++], RT_CUDA_OPT_LEN, "--gpu-architecture=%s_%d", ptx ? "compute" : "sm",
		 arch);
	snprintf(opts[n++], RT_CUDA_OPT_LEN, "--std=c++17");
	return n;
}

/* FNV-1a over 128 bits (offset basis and prime from the FNV spec). */
typedef unsigned __int128 u128;

static u128 fnv(u128 h, const void *p, size_t n)
{
	const u128 prime = ((u128)0x0000000001000000ull << 64) | 0x000000000000013Bull;
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++) {
		h ^= c[i];
		h *= prime;
	}
	return h;
}

static u128 fnv_field(u128 h, const void *p, size_t n)
{
	uint64_t len = n;
	h = fnv(h, &len, sizeof len);
	return fnv(h, p, n);
}

void rt_cuda_cache_key(const char *src, size_t len, char opts[][RT_CUDA_OPT_LEN], int nopts,
		       int nvrtc_major, int nvrtc_minor, char out[33])
{
	u128 h = ((u128)0x6c62272e07bb0142ull << 64) | 0x62b821756295c58dull;
	char ver[32];
	int vn = snprintf(ver, sizeof ver, "nvrtc %d.%d plan %d", nvrtc_major, nvrtc_minor,
			  DTM_PLAN_VERSION);
	h = fnv_field(h, ver, (size_t)vn);
	for (int i = 0; i < nopts; i++)
		h = fnv_field(h, opts[i], strlen(opts[i]));
	h = fnv_field(h, src, len);
	snprintf(out, 33, "%016llx%016llx", (unsigned long long)(h >> 64),
		 (unsigned long long)(uint64_t)h);
}

int rt_cuda_cache_dir(const char *xdg, const char *home, char *out, size_t n)
{
	int w;
	if (xdg && xdg[0] == '/')
		w = snprintf(out, n, "%s/dtm/cubin", xdg);
	else if (home && *home)
		w = snprintf(out, n, "%s/.cache/dtm/cubin", home);
	else
		return -1;
	return w > 0 && (size_t)w < n ? 0 : -1;
}
