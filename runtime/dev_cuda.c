/* dev_cuda.c - the `cuda` device: a rank's stage of the Plan on one GPU.
 *
 * Consumes a run set up by rt_run_init_ex (host memory only for params,
 * optimizer state and inputs) and the plan's CUDA fields (cuda_source,
 * cuda_kernels: codegen/emit_cuda.c); runs every action on the GPU:
 *
 *   memory     one cudaMalloc per arena, every buffer at its planned offset
 *              (zeroed once, as on the CPU); params and optimizer state are
 *              copied over after initial values or a checkpoint load and
 *              back before a save; inputs each step; the loss read back.
 *   kernels    plan->cuda_source compiled by NVRTC for the GPU's compute
 *              capability, cached on disk by content hash
 *              ($XDG_CACHE_HOME/dtm/cubin/KEY.cubin, written atomically);
 *              loaded with cudaLibraryLoadData and launched on
 *              ceil(threads / block) blocks with the action's buffers.
 *   GEMM       cublasGemmStridedBatchedEx, row-major as column-major with the
 *              operands swapped (runtime/cuda_host.h), f32 compute: bf16/f16
 *              on tensor cores with f32 accumulation, f32 without TF32.
 *   comm       NCCL: a world communicator (the unique id broadcast over the
 *              run's own backend: threads or MPI), split into one per
 *              mesh-axes group the plan uses; sends and receives grouped.
 *   streams    compute (0) and communication (1), as DtmAction.stream says;
 *              an action waits on the event of the other stream's latest
 *              action it conflicts with (rt_cuda_schedule).  Both streams
 *              are drained at the end of a pass, so a step reads its loss
 *              and the next starts from a quiet device.
 *
 * The driver API is not linked: libcuda comes with the driver, and a binary
 * linked against it would not even start on a machine without one, where
 * `--device cuda` must instead say that there is no driver.  The runtime
 * API's library calls (cudaLibraryLoadData, cudaLibraryGetKernel) do what
 * cuModuleLoadData / cuModuleGetFunction would.
 *
 * Every CUDA, cuBLAS, NCCL and NVRTC call goes through a check macro that
 * writes the call, file, line and the library's message to err and makes
 * the caller return -1.
 *
 * Timing: compute_s is the compute stream's time from the first to the
 * last action of the pass, comm_s the sum of the communication actions'
 * times on their stream (overlap makes their sum exceed the wall time).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>
#ifdef DTM_HAVE_NCCL
#include <nccl.h>
#endif

#include "runtime/comm.h"
#include "runtime/cuda_host.h"
#include "runtime/fsio.h"
#include "runtime/rt.h"

/* ---- checked calls ---- */

static int cuda_fail(cudaError_t e, const char *call, const char *file, int line, char *err)
{
	return rt_errf(err, "%s failed (%s:%d): %s (%s)", call, file, line, cudaGetErrorString(e),
		       cudaGetErrorName(e));
}

static int blas_fail(cublasStatus_t e, const char *call, const char *file, int line, char *err)
{
	return rt_errf(err, "%s failed (%s:%d): %s", call, file, line, cublasGetStatusString(e));
}

static int nvrtc_fail(nvrtcResult e, const char *call, const char *file, int line, char *err)
{
	return rt_errf(err, "%s failed (%s:%d): %s", call, file, line, nvrtcGetErrorString(e));
}

#define CUDA_CHECK(err, call)                                                                    \
	__extension__({                                                                          \
		cudaError_t e_ = (call);                                                         \
		e_ == cudaSuccess ? 0 : cuda_fail(e_, #call, __FILE__, __LINE__, (err));         \
	})
#define CUBLAS_CHECK(err, call)                                                                  \
	__extension__({                                                                          \
		cublasStatus_t e_ = (call);                                                      \
		e_ == CUBLAS_STATUS_SUCCESS ? 0 : blas_fail(e_, #call, __FILE__, __LINE__, (err)); \
	})
#define NVRTC_CHECK(err, call)                                                                   \
	__extension__({                                                                          \
		nvrtcResult e_ = (call);                                                         \
		e_ == NVRTC_SUCCESS ? 0 : nvrtc_fail(e_, #call, __FILE__, __LINE__, (err));      \
	})

#ifdef DTM_HAVE_NCCL
static int nccl_fail(ncclResult_t e, ncclComm_t c, const char *call, const char *file, int line,
		     char *err)
{
	const char *last = ncclGetLastError(c);
	return rt_errf(err, "%s failed (%s:%d): %s%s%s", call, file, line, ncclGetErrorString(e),
		       last && *last ? ": " : "", last ? last : "");
}

/* comm: the communicator the call used (NULL when none), for its last
 * error message */
#define NCCL_CHECK(err, comm, call)                                                              \
	__extension__({                                                                          \
		ncclResult_t e_ = (call);                                                        \
		e_ == ncclSuccess ? 0 : nccl_fail(e_, (comm), #call, __FILE__, __LINE__, (err)); \
	})
#define RT_CUDA_MAX_COMMS 64
#endif

/* ---- the device's state per run ---- */

typedef struct CudaDev {
	int device, major, minor;
	RtCudaLimits lim;
	void *arena[DTM_ARENA_COUNT];
	void **dptr;                 /* per buffer: device arena + offset */
	cudaStream_t stream[2];      /* compute, communication */
	cudaEvent_t *ev;             /* per action that some action waits for */
	cudaEvent_t *t0, *t1;        /* per communication action: its time */
	cudaEvent_t pass0, pass1;    /* the compute stream's span */
	cudaEvent_t *pt0, *pt1;      /* --profile-actions: per kernel or GEMM, made at
				      * the first profiled pass */
	RtCudaSched sched[2];        /* the whole step, forward only */
	cublasHandle_t blas;
	cudaStream_t blas_stream;
	void *blas_ws;
	cudaLibrary_t lib;
	bool lib_loaded;
	cudaKernel_t *kern;          /* per plan kernel */
	RtCudaLaunch *launch;
	void *scratch[2];            /* collectives' staging */
	int64_t scratch_bytes;
	CommMesh mesh;
	int world;
#ifdef DTM_HAVE_NCCL
	ncclComm_t nccl_world;
	ncclComm_t comms[RT_CUDA_MAX_COMMS];
	uint32_t comm_axes[RT_CUDA_MAX_COMMS];
	int ncomms;
	bool nccl_failed;
#endif
	double timeout_s;
} CudaDev;

/* ---- probing ---- */

int rt_cuda_probe(int *ndev, char *err)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess)
		return rt_errf(err, "no CUDA driver/device: cudaGetDeviceCount: %s (%s, error %d)",
			       cudaGetErrorString(e), cudaGetErrorName(e), (int)e);
	if (n < 1)
		return rt_errf(err, "no CUDA driver/device: cudaGetDeviceCount found no GPU");
	*ndev = n;
	return 0;
}

/* The process's rank on its host under a launcher, or -1. */
static int env_local_rank(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
					    "SLURM_LOCALID", "LOCAL_RANK" };
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
		const char *v = getenv(vars[i]);
		if (v && *v)
			return atoi(v);
	}
	return -1;
}

/* ---- NVRTC and the cubin cache ---- */

/* The module image of the most recent compile, shared by the local
 * backend's rank threads (they run the same source): the first compiles,
 * or reads the disk cache, under the lock; the rest copy it. */
static pthread_mutex_t module_mu = PTHREAD_MUTEX_INITIALIZER;
static char module_key[33];
static char *module_image;
static size_t module_len;

static void module_memo_free(void)
{
	free(module_image);
	module_image = NULL;
}

static int nvrtc_compile(const char *src, char opts[][RT_CUDA_OPT_LEN], int nopts, bool ptx,
			 char **image, size_t *len, char *err)
{
	nvrtcProgram prog;
	if (NVRTC_CHECK(err, nvrtcCreateProgram(&prog, src, "dtm_kernels.cu", 0, NULL, NULL)))
		return -1;
	const char *optv[RT_CUDA_MAX_OPTS];
	for (int i = 0; i < nopts; i++)
		optv[i] = opts[i];
	nvrtcResult cr = nvrtcCompileProgram(prog, nopts, optv);
	size_t loglen = 0;
	char *log = NULL;
	if (nvrtcGetProgramLogSize(prog, &loglen) == NVRTC_SUCCESS && loglen > 1) {
		log = malloc(loglen);
		if (log && nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) {
			free(log);
			log = NULL;
		}
	}
	int rc = 0;
	if (cr != NVRTC_SUCCESS) {
		/* the log names the generated line: a dtmc bug to report */
		rt_errf(err, "NVRTC could not compile the plan's CUDA source (%s, %s): %.400s",
			nvrtcGetErrorString(cr), opts[0], log ? log : "(no log)");
		rc = -1;
	} else if (ptx) {
		rc = NVRTC_CHECK(err, nvrtcGetPTXSize(prog, len));
		if (!rc && !(*image = malloc(*len)))
			rc = rt_errf(err, "out of memory for PTX");
		if (!rc)
			rc = NVRTC_CHECK(err, nvrtcGetPTX(prog, *image));
	} else {
		rc = NVRTC_CHECK(err, nvrtcGetCUBINSize(prog, len));
		if (!rc && !(*image = malloc(*len)))
			rc = rt_errf(err, "out of memory for the cubin");
		if (!rc)
			rc = NVRTC_CHECK(err, nvrtcGetCUBIN(prog, *image));
	}
	if (rc) {
		free(*image);
		*image = NULL;
	}
	free(log);
	nvrtcDestroyProgram(&prog);
	return rc;
}

/* The module image for this GPU (a malloc'd copy in *image): the memo, the
 * disk cache, or NVRTC.  fresh: skip the caches (the cached one did not
 * load). */
static int module_image_get(const char *src, int major, int minor, bool fresh, bool verbose,
			    char **image, size_t *len, char *err)
{
	int nsup = 0, *sup = NULL, arch = 0, vmaj = 0, vmin = 0;
	bool ptx = false;
	if (NVRTC_CHECK(err, nvrtcVersion(&vmaj, &vmin)) ||
	    NVRTC_CHECK(err, nvrtcGetNumSupportedArchs(&nsup)))
		return -1;
	sup = calloc((size_t)(nsup > 0 ? nsup : 1), sizeof *sup);
	if (!sup)
		return rt_errf(err, "out of memory");
	if (NVRTC_CHECK(err, nvrtcGetSupportedArchs(sup)) ||
	    rt_cuda_pick_arch(major, minor, sup, nsup, &arch, &ptx, err)) {
		free(sup);
		return -1;
	}
	free(sup);
	char opts[RT_CUDA_MAX_OPTS][RT_CUDA_OPT_LEN], key[33], dir[4096], path[4200];
	int nopts = rt_cuda_nvrtc_options(arch, ptx, opts);
	rt_cuda_cache_key(src, strlen(src), opts, nopts, vmaj, vmin, key);
	bool cache = rt_cuda_cache_dir(getenv("XDG_CACHE_HOME"), getenv("HOME"), dir,
				       sizeof dir) == 0;
	snprintf(path, sizeof path, "%s/%s.%s", dir, key, ptx ? "ptx" : "cubin");

	pthread_mutex_lock(&module_mu);
	int rc = 0;
	*image = NULL;
	if (!fresh && module_image && strcmp(module_key, key) == 0) {
		*len = module_len;
		if ((*image = malloc(*len)))
			memcpy(*image, module_image, *len);
		else
			rc = rt_errf(err, "out of memory");
		pthread_mutex_unlock(&module_mu);
		return rc;
	}
	char ferr[RT_ERR_LEN];
	const char *from = "compiled";
	if (!fresh && cache &&
	    rt_read_file(path, image, len, (size_t)1 << 30, ferr, sizeof ferr) == 0 && *len > 0) {
		from = "cached";
	} else {
		free(*image);
		*image = NULL;
		double t0 = rt_now();
		rc = nvrtc_compile(src, opts, nopts, ptx, image, len, err);
		if (!rc && verbose)
			fprintf(stderr, "cuda: NVRTC %d.%d compiled the kernels for %s in %.1f s\n",
				vmaj, vmin, strchr(opts[0], '=') + 1, rt_now() - t0);
		/* a cache that cannot be written costs a compile next time,
		 * not this run */
		if (!rc && cache &&
		    (rt_mkdirs(dir, ferr, sizeof ferr) ||
		     rt_write_file_atomic(path, *image, *len, ferr, sizeof ferr)))
			fprintf(stderr, "warning: cuda: cannot cache the kernels: %s\n", ferr);
	}
	if (!rc) {
		static bool registered;
		char *copy = malloc(*len);
		if (copy) {
			memcpy(copy, *image, *len);
			free(module_image);
			module_image = copy;
			module_len = *len;
			memcpy(module_key, key, sizeof key);
			if (!registered)
				atexit(module_memo_free);
			registered = true;
		}
		if (verbose)
			fprintf(stderr, "cuda: kernels %s (%s, %zu bytes)%s%s\n", from,
				strchr(opts[0], '=') + 1, *len, cache ? ": " : "", cache ? path : "");
	}
	pthread_mutex_unlock(&module_mu);
	return rc;
}

static int load_module(RtRun *r, CudaDev *d, bool verbose, char *err)
{
	const DtmPlan *p = r->plan;
	for (int attempt = 0; attempt < 2; attempt++) {
		char *image = NULL;
		size_t len = 0;
		if (module_image_get(p->cuda_source, d->major, d->minor, attempt > 0, verbose,
				     &image, &len, err))
			return -1;
		cudaError_t e = cudaLibraryLoadData(&d->lib, image, NULL, NULL, 0, NULL, NULL, 0);
		free(image);
		if (e == cudaSuccess) {
			d->lib_loaded = true;
			break;
		}
		/* a damaged cache entry: compile afresh once */
		if (attempt > 0)
			return cuda_fail(e, "cudaLibraryLoadData(&d->lib, image, ...)", __FILE__,
					 __LINE__, err);
		fprintf(stderr, "warning: cuda: the cached kernels did not load (%s): compiling "
				"again\n", cudaGetErrorString(e));
	}
	d->kern = calloc((size_t)(p->nkernels > 0 ? p->nkernels : 1), sizeof *d->kern);
	d->launch = calloc((size_t)(p->nkernels > 0 ? p->nkernels : 1), sizeof *d->launch);
	if (!d->kern || !d->launch)
		return rt_errf(err, "out of memory");
	for (int k = 0; k < p->nkernels; k++) {
		const DtmCudaKernel *ck = &p->cuda_kernels[k];
		if (!ck->name)
			continue; /* checked when an action calls it */
		if (rt_cuda_launch_config(ck, &d->lim, &d->launch[k], err))
			return -1;
		cudaError_t e = cudaLibraryGetKernel(&d->kern[k], d->lib, ck->name);
		if (e != cudaSuccess)
			return rt_errf(err, "kernel %d '%s' is not in the compiled CUDA source: "
				       "cudaLibraryGetKernel: %s", k, ck->name, cudaGetErrorString(e));
		if (d->launch[k].smem_optin &&
		    CUDA_CHECK(err, cudaFuncSetAttribute((const void *)d->kern[k],
							 cudaFuncAttributeMaxDynamicSharedMemorySize,
							 (int)d->launch[k].smem)))
			return -1;
	}
	return 0;
}

/* ---- NCCL ---- */

#ifdef DTM_HAVE_NCCL
static ncclComm_t comm_for(CudaDev *d, uint32_t axes)
{
	for (int i = 0; i < d->ncomms; i++)
		if (d->comm_axes[i] == axes)
			return d->comms[i];
	return NULL;
}

/* The world communicator from a unique id that rank 0 makes and the run's
 * backend (threads or MPI) broadcasts, then one split per axes group.
 * Every local step that can fail comes before this in rt_cuda_attach, and
 * a barrier of the backend (which a failed peer makes fail) guards the
 * blocking ncclCommInitRank. */
static int nccl_init(RtRun *r, CudaDev *d, char *err)
{
	Comm *c = r->comm;
	if (!c)
		return rt_errf(err, "a %d-rank plan on CUDA needs a communication backend",
			       d->world);
	uint32_t all = d->mesh.naxes > 0 ? (1u << d->mesh.naxes) - 1 : 0;
	ncclUniqueId id;
	memset(&id, 0, sizeof id);
	if (c->rank == 0 && NCCL_CHECK(err, NULL, ncclGetUniqueId(&id)))
		return -1;
	_Static_assert(sizeof id % 4 == 0, "ncclUniqueId is sent as i32s");
	if (comm_barrier(c, all) ||
	    comm_broadcast(c, all, &id, (int64_t)(sizeof id / 4), DTM_I32, 0))
		return rt_errf(err, "exchanging the NCCL unique id: %s", comm_error(c));
	if (NCCL_CHECK(err, NULL, ncclCommInitRank(&d->nccl_world, c->size, id, c->rank)))
		return -1;
	/* The groups any rank needs: a pipeline stage sees only its own
	 * program, and every rank must make the same splits in the same
	 * order, so the ranks sum their needs (one count per axes mask). */
	uint32_t mine[RT_CUDA_MAX_COMMS];
	int32_t need[1 << DTM_MAX_AXES] = { 0 };
	int nmine = rt_cuda_comm_axes(r->plan, mine, RT_CUDA_MAX_COMMS);
	for (int i = 0; i < nmine; i++)
		need[mine[i] & ((1u << DTM_MAX_AXES) - 1)] = 1;
	if (comm_all_reduce(c, all, need, need, 1 << DTM_MAX_AXES, DTM_I32, DTM_RED_SUM))
		return rt_errf(err, "agreeing on the NCCL communicators: %s", comm_error(c));
	d->ncomms = 0;
	for (uint32_t m = 0; m < (1u << DTM_MAX_AXES) && d->ncomms < RT_CUDA_MAX_COMMS; m++)
		if (need[m])
			d->comm_axes[d->ncomms++] = m;
	for (int i = 0; i < d->ncomms; i++) {
		CommGroup g = comm_group(&d->mesh, c->rank, d->comm_axes[i]);
		/* key = group index, so a member's NCCL rank is its index */
		if (NCCL_CHECK(err, d->nccl_world,
			       ncclCommSplit(d->nccl_world, g.color, g.index, &d->comms[i], NULL)))
			return -1;
	}
	return 0;
}

static ncclDataType_t nccl_type(DtmDtype t)
{
	switch (t) {
	case DTM_F32: return ncclFloat32;
	case DTM_BF16: return ncclBfloat16;
	case DTM_F16: return ncclFloat16;
	case DTM_I32: return ncclInt32;
	}
	return ncclFloat32;
}

static ncclRedOp_t nccl_op(DtmRed r)
{
	return r == DTM_RED_AVG ? ncclAvg : r == DTM_RED_MAX ? ncclMax : ncclSum;
}
#endif

/* ---- memory ---- */

static int64_t buf_bytes(const DtmBuffer *b)
{
	return rt_numel(b) * (int64_t)rt_dtype_size(b->dtype);
}

static bool crosses(const DtmBuffer *b)
{
	return b->role == DTM_ROLE_PARAM || b->role == DTM_ROLE_OPT_STATE;
}

/* Host to device on the compute stream, then waited for: a copy from
 * pageable memory through the legacy stream would not be ordered before
 * work on the (non-blocking) streams. */
static int upload(RtRun *r, CudaDev *d, int buf)
{
	int64_t n = buf_bytes(&r->plan->buffers[buf]);
	if (n <= 0 || !r->ptr[buf] || !d->dptr[buf])
		return 0;
	return CUDA_CHECK(r->err, cudaMemcpyAsync(d->dptr[buf], r->ptr[buf], (size_t)n,
						  cudaMemcpyHostToDevice, d->stream[0]));
}

static int cuda_to_device(RtRun *r)
{
	CudaDev *d = r->dev_state;
	const DtmPlan *p = r->plan;
	for (int i = 0; i < p->nbuffers; i++)
		if (crosses(&p->buffers[i]) && upload(r, d, i))
			return -1;
	return CUDA_CHECK(r->err, cudaStreamSynchronize(d->stream[0]));
}

static int cuda_to_host(RtRun *r)
{
	CudaDev *d = r->dev_state;
	const DtmPlan *p = r->plan;
	for (int i = 0; i < p->nbuffers; i++) {
		const DtmBuffer *b = &p->buffers[i];
		int64_t n = buf_bytes(b);
		if (!crosses(b) || n <= 0 || !r->ptr[i])
			continue;
		if (CUDA_CHECK(r->err, cudaMemcpy(r->ptr[i], d->dptr[i], (size_t)n,
						  cudaMemcpyDeviceToHost)))
			return -1;
	}
	return 0;
}

static int cuda_read_scalar(RtRun *r, int buf, double *out)
{
	CudaDev *d = r->dev_state;
	const DtmBuffer *b = &r->plan->buffers[buf];
	unsigned char v[8] = { 0 };
	if (rt_numel(b) < 1 || !d->dptr[buf])
		return rt_errf(r->err, "buffer '%s' is empty", b->name ? b->name : "?");
	if (CUDA_CHECK(r->err, cudaMemcpy(v, d->dptr[buf], rt_dtype_size(b->dtype),
					  cudaMemcpyDeviceToHost)))
		return -1;
	*out = rt_load_f32(v, b->dtype, 0);
	return 0;
}

/* ---- communication ---- */

static void split3(const int64_t *shape, int rank, int dim, int64_t *outer, int64_t *len,
		   int64_t *inner)
{
	*outer = *inner = 1;
	for (int i = 0; i < dim; i++)
		*outer *= shape[i];
	*len = shape[dim];
	for (int i = dim + 1; i < rank; i++)
		*inner *= shape[i];
}

/* A copy of rows (height of them, width bytes each) between pitched
 * layouts on stream s. */
static int copy2d(void *dst, int64_t dpitch, const void *src, int64_t spitch, int64_t width,
		  int64_t height, cudaStream_t s, char *err)
{
	if (width <= 0 || height <= 0)
		return 0;
	return CUDA_CHECK(err, cudaMemcpy2DAsync(dst, (size_t)dpitch, src, (size_t)spitch,
						 (size_t)width, (size_t)height,
						 cudaMemcpyDeviceToDevice, s));
}

/* Scratch bytes a collective stages through (0 for none), so attach can
 * allocate once: dims other than the flat one, all_to_all, and inputs
 * overlapping the output. */
static int64_t coll_scratch(const DtmPlan *p, const CommMesh *mesh, int rank, const DtmAction *a)
{
	if (a->kind != DTM_ACT_COLL || a->nargs < 1)
		return 0;
	const DtmBuffer *bi = &p->buffers[a->args[0]];
	int n = comm_group(mesh, rank, a->axes).size;
	int64_t in = a->bytes > 0 ? a->bytes : buf_bytes(bi);
	int64_t out = a->coll == DTM_COLL_ALL_GATHER ? in * n : in;
	return in > out ? in : out;
}

static int run_coll(RtRun *r, CudaDev *d, const DtmAction *a, cudaStream_t s)
{
	const DtmPlan *p = r->plan;
	char *err = r->err;
	const char *label = a->label ? a->label : "?";
	if (a->nargs < 1)
		return rt_errf(err, "communication action '%s' has no buffers", label);
	int inb = a->args[0], outb = a->args[a->nargs - 1];
	const DtmBuffer *bi = &p->buffers[inb], *bo = &p->buffers[outb];
	DtmDtype t = bi->dtype;
	int64_t es = (int64_t)rt_dtype_size(t);
	int64_t in_bytes = a->bytes > 0 ? a->bytes : buf_bytes(bi);
	int64_t count = in_bytes / es;
	void *in = d->dptr[inb], *out = d->dptr[outb];
	if (in_bytes > bi->bytes)
		return rt_errf(err, "'%s' moves %lld bytes of '%s', which has %lld", label,
			       (long long)in_bytes, bi->name ? bi->name : "?", (long long)bi->bytes);
	if (d->world == 1) {
		/* every group has one member: identities, or a copy */
		if (a->kind != DTM_ACT_COLL)
			return rt_errf(err, "send/recv '%s' in a one-rank plan", label);
		if (a->nargs >= 2 && in != out) {
			int64_t nb = bi->bytes < bo->bytes ? bi->bytes : bo->bytes;
			return CUDA_CHECK(err, cudaMemcpyAsync(out, in, (size_t)nb,
							       cudaMemcpyDeviceToDevice, s));
		}
		return 0;
	}
#ifndef DTM_HAVE_NCCL
	(void)bo;
	(void)count;
	(void)out;
	(void)s;
	return rt_errf(err, "'%s': this binary's CUDA runtime was built without NCCL, so it runs "
		       "one rank only", label);
#else
	ncclComm_t nc = comm_for(d, a->axes);
	int n = comm_group(&d->mesh, r->comm->rank, a->axes).size;
	int g = comm_group(&d->mesh, r->comm->rank, a->axes).index;
	if (!nc)
		return rt_errf(err, "'%s': no NCCL communicator for its axes %u", label, a->axes);
	/* what -v's comm: line reports (a failure below fails the step) */
	comm_count_moved(r->comm, a, in_bytes);
	ncclDataType_t nt = nccl_type(t);
	if (a->kind == DTM_ACT_SEND)
		return NCCL_CHECK(err, nc, ncclSend(in, (size_t)in_bytes, ncclUint8,
						    (int)dtm_peer_index(g, n, a->peer_offset, a->peer_mirror, 1),
						    nc, s));
	if (a->kind == DTM_ACT_RECV)
		return NCCL_CHECK(err, nc, ncclRecv(in, (size_t)in_bytes, ncclUint8,
						    (int)dtm_peer_index(g, n, a->peer_offset, a->peer_mirror, -1),
						    nc, s));
	int64_t out_bytes = a->coll == DTM_COLL_ALL_GATHER ? in_bytes * n :
			    a->coll == DTM_COLL_REDUCE_SCATTER ? in_bytes / n : in_bytes;
	if (bo->dtype != t || out_bytes > bo->bytes)
		return rt_errf(err, "'%s' writes %lld bytes of %s into '%s' (%lld bytes of %s)",
			       label, (long long)out_bytes, rt_dtype_name(t),
			       bo->name ? bo->name : "?", (long long)bo->bytes,
			       rt_dtype_name(bo->dtype));
	char *s0 = d->scratch[0], *s1 = d->scratch[1];
	bool whole = in_bytes == buf_bytes(bi);
	int dim = whole ? a->dim : 0, dim2 = whole ? a->dim2 : 0;
	bool flat = a->coll == DTM_COLL_ALL_TO_ALL ? dim == 0 && dim2 == 0 : dim == 0;
	/* The flat forms hand NCCL the buffers themselves, so an input that
	 * overlaps the output goes aside first (all_reduce and broadcast run
	 * in place); the others read the input into staging before they write
	 * the output. */
	if (flat && a->coll != DTM_COLL_ALL_REDUCE && a->coll != DTM_COLL_BROADCAST &&
	    in != out && (char *)in < (char *)out + out_bytes &&
	    (char *)out < (char *)in + in_bytes) {
		if (CUDA_CHECK(err, cudaMemcpyAsync(s1, in, (size_t)in_bytes,
						    cudaMemcpyDeviceToDevice, s)))
			return -1;
		in = s1;
	}
	int64_t outer, len, inner;
	switch (a->coll) {
	case DTM_COLL_ALL_REDUCE:
		return NCCL_CHECK(err, nc, ncclAllReduce(in, out, (size_t)count, nt,
							 nccl_op(a->red), nc, s));
	case DTM_COLL_BROADCAST:
		return NCCL_CHECK(err, nc, ncclBroadcast(in, out, (size_t)count, nt, a->peer_offset,
							 nc, s));
	case DTM_COLL_ALL_GATHER:
		if (flat)
			return NCCL_CHECK(err, nc, ncclAllGather(in, out, (size_t)count, nt, nc, s));
		/* gathered as [member][input], then member m's block goes to
		 * m * len along dim */
		if (NCCL_CHECK(err, nc, ncclAllGather(in, s0, (size_t)count, nt, nc, s)))
			return -1;
		split3(bi->shape, bi->rank, dim, &outer, &len, &inner);
		for (int m = 0; m < n; m++)
			if (copy2d((char *)out + m * len * inner * es, n * len * inner * es,
				   s0 + m * in_bytes, len * inner * es, len * inner * es, outer, s,
				   err))
				return -1;
		return 0;
	case DTM_COLL_REDUCE_SCATTER:
		if (flat) {
			if (count % n)
				return rt_errf(err, "'%s': reduce_scatter of %lld elements over %d "
					       "ranks: pad the buffer to a multiple of the group",
					       label, (long long)count, n);
			return NCCL_CHECK(err, nc, ncclReduceScatter(in, out, (size_t)(count / n),
								     nt, nccl_op(a->red), nc, s));
		}
		split3(bi->shape, bi->rank, dim, &outer, &len, &inner);
		if (len % n)
			return rt_errf(err, "'%s': reduce_scatter of %lld along dim %d over %d ranks",
				       label, (long long)len, dim, n);
		/* member m's block of dim to position m, then the flat form */
		for (int m = 0; m < n; m++)
			if (copy2d(s0 + m * outer * (len / n) * inner * es, (len / n) * inner * es,
				   (char *)in + m * (len / n) * inner * es, len * inner * es,
				   (len / n) * inner * es, outer, s, err))
				return -1;
		return NCCL_CHECK(err, nc, ncclReduceScatter(s0, out, (size_t)(count / n), nt,
							     nccl_op(a->red), nc, s));
	case DTM_COLL_ALL_TO_ALL: {
		if (count % n)
			return rt_errf(err, "'%s': all_to_all of %lld elements over %d ranks", label,
				       (long long)count, n);
		int64_t blk = count / n; /* elements to each member */
		const char *send = in;
		char *recv = out;
		int64_t bs[DTM_MAX_RANK];
		if (!flat) {
			/* the blocks of the split dim, packed in member order */
			split3(bi->shape, bi->rank, dim, &outer, &len, &inner);
			if (len % n)
				return rt_errf(err, "'%s': all_to_all of %lld along dim %d over %d "
					       "ranks", label, (long long)len, dim, n);
			for (int m = 0; m < n; m++)
				if (copy2d(s0 + m * blk * es, (len / n) * inner * es,
					   (const char *)in + m * (len / n) * inner * es,
					   len * inner * es, (len / n) * inner * es, outer, s, err))
					return -1;
			send = s0;
			recv = s1;
			memcpy(bs, bi->shape, sizeof bs);
			bs[dim] /= n;
		}
		if (NCCL_CHECK(err, nc, ncclGroupStart()))
			return -1;
		for (int m = 0; m < n; m++) {
			if (NCCL_CHECK(err, nc, ncclSend(send + m * blk * es, (size_t)blk, nt, m, nc,
							 s)) ||
			    NCCL_CHECK(err, nc, ncclRecv(recv + m * blk * es, (size_t)blk, nt, m, nc,
							 s))) {
				ncclGroupEnd();
				return -1;
			}
		}
		if (NCCL_CHECK(err, nc, ncclGroupEnd()))
			return -1;
		if (flat)
			return 0;
		/* received block m to position m along the concat dim */
		int64_t co, cl, ci;
		split3(bs, bi->rank, dim2, &co, &cl, &ci);
		for (int m = 0; m < n; m++)
			if (copy2d((char *)out + m * cl * ci * es, n * cl * ci * es,
				   recv + m * blk * es, cl * ci * es, cl * ci * es, co, s, err))
				return -1;
		return 0;
	}
	}
	return rt_errf(err, "'%s': unknown collective %d", label, (int)a->coll);
#endif
}

/* ---- GEMM and kernels ---- */

static cudaDataType blas_type(DtmDtype t)
{
	return t == DTM_BF16 ? CUDA_R_16BF : t == DTM_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* The GEMM a with operands of types ta, tb, tc at A, B, C on stream s:
 * every GEMM of a pass and the calibration grid's (rt_cuda_calibrate_gemm)
 * take this one call. */
static int blas_gemm(CudaDev *d, const DtmAction *a, DtmDtype ta, DtmDtype tb, DtmDtype tc,
		     const char *A, const char *B, char *C, cudaStream_t s, char *err)
{
	RtCudaGemm g;
	if (rt_cuda_gemm_desc(a, &g, err))
		return -1;
	if (g.rows == 0 || g.cols == 0)
		return 0;
	if (d->blas_stream != s) {
		if (CUBLAS_CHECK(err, cublasSetStream(d->blas, s)))
			return -1;
		d->blas_stream = s;
	}
	cublasOperation_t tf = g.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasOperation_t ts = g.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
	if (!g.sequential)
		return CUBLAS_CHECK(err, cublasGemmStridedBatchedEx(
			d->blas, tf, ts, g.rows, g.cols, g.k, &a->alpha, B, blas_type(tb),
			g.ld_first, g.stride_first, A, blas_type(ta), g.ld_second,
			g.stride_second, &a->beta, C, blas_type(tc), g.ldc, g.stride_c, g.batch,
			CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	size_t ea = rt_dtype_size(ta), eb = rt_dtype_size(tb);
	for (int i = 0; i < g.batch; i++)
		if (CUBLAS_CHECK(err, cublasGemmEx(
			    d->blas, tf, ts, g.rows, g.cols, g.k, &a->alpha,
			    B + (size_t)i * (size_t)g.stride_first * eb, blas_type(tb),
			    g.ld_first, A + (size_t)i * (size_t)g.stride_second * ea,
			    blas_type(ta), g.ld_second, &a->beta, C, blas_type(tc), g.ldc,
			    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)))
			return -1;
	return 0;
}

static int run_gemm(RtRun *r, CudaDev *d, const DtmAction *a, cudaStream_t s)
{
	const DtmBuffer *bufs = r->plan->buffers;
	return blas_gemm(d, a, bufs[a->args[0]].dtype, bufs[a->args[1]].dtype,
			 bufs[a->args[2]].dtype, d->dptr[a->args[0]], d->dptr[a->args[1]],
			 d->dptr[a->args[2]], s, r->err);
}

static int run_kernel(RtRun *r, CudaDev *d, const DtmAction *a, cudaStream_t s)
{
	const RtCudaLaunch *l = &d->launch[a->kernel];
	if (l->skip)
		return 0;
	DtmCudaArgs ka;
	memset(&ka, 0, sizeof ka);
	for (int j = 0; j < a->nargs; j++)
		ka.p[j] = d->dptr[a->args[j]];
	ka.step = r->ctx.step;
	ka.lr = r->ctx.lr;
	ka.seed = r->ctx.seed;
	ka.rank = r->rank;
	ka.loss_scale = r->ctx.loss_scale;
	ka.skipped = r->ctx.skipped;
	for (int i = 0; i < r->plan->mesh_naxes && i < DTM_MAX_AXES; i++)
		ka.coords[i] = r->coords[i];
	void *params[1] = { &ka };
	dim3 grid = { l->grid, 1, 1 }, block = { l->block, 1, 1 };
	cudaError_t e = cudaLaunchKernel((const void *)d->kern[a->kernel], grid, block, params,
					 l->smem, s);
	if (e != cudaSuccess)
		return rt_errf(r->err, "launching kernel '%s' (%u x %u threads, %u bytes of shared "
			       "memory) for '%s' failed (%s:%d): %s",
			       r->plan->cuda_kernels[a->kernel].name, l->grid, l->block, l->smem,
			       a->label ? a->label : "?", __FILE__, __LINE__, cudaGetErrorString(e));
	return 0;
}

/* ---- the pass ---- */

/* Waits for stream s; with NCCL, polls so a peer that died cannot hang
 * this rank forever (the communicators are aborted after the timeout). */
static int drain(RtRun *r, CudaDev *d, cudaStream_t s)
{
#ifdef DTM_HAVE_NCCL
	if (d->ncomms > 0 || d->nccl_world) {
		double t0 = rt_now();
		for (int i = 0;; i++) {
			cudaError_t e = cudaStreamQuery(s);
			if (e == cudaSuccess)
				return 0;
			if (e != cudaErrorNotReady)
				return cuda_fail(e, "cudaStreamQuery(s)", __FILE__, __LINE__, r->err);
			ncclResult_t ae = ncclSuccess;
			if (d->nccl_world && ncclCommGetAsyncError(d->nccl_world, &ae) == ncclSuccess &&
			    ae != ncclSuccess && ae != ncclInProgress) {
				d->nccl_failed = true;
				return nccl_fail(ae, d->nccl_world, "an NCCL collective", __FILE__,
						 __LINE__, r->err);
			}
			if (rt_now() - t0 > d->timeout_s) {
				d->nccl_failed = true;
				return rt_errf(r->err, "the GPU's work did not finish within %.0f s "
					       "(a peer rank may have failed)", d->timeout_s);
			}
			if (i > 1000) {
				struct timespec ts = { 0, 50000 };
				nanosleep(&ts, NULL);
			}
		}
	}
#endif
	return CUDA_CHECK(r->err, cudaStreamSynchronize(s));
}

/* --check-numerics: the action's buffers copied back, then the CPU's
 * check over them. */
static int check_numerics(RtRun *r, CudaDev *d, int idx, const DtmAction *a)
{
	const DtmPlan *p = r->plan;
	if (drain(r, d, d->stream[0]) || drain(r, d, d->stream[1]))
		return -1;
	void **hp = calloc((size_t)p->nbuffers, sizeof *hp);
	if (!hp)
		return rt_errf(r->err, "out of memory");
	int rc = 0;
	for (int j = 0; j < a->nargs && !rc; j++) {
		int id = a->args[j];
		int64_t n = buf_bytes(&p->buffers[id]);
		if (hp[id] || n <= 0)
			continue;
		if (!(hp[id] = malloc((size_t)n)))
			rc = rt_errf(r->err, "out of memory");
		else
			rc = CUDA_CHECK(r->err, cudaMemcpy(hp[id], d->dptr[id], (size_t)n,
							   cudaMemcpyDeviceToHost));
	}
	if (!rc)
		rc = rt_check_action(r, idx, a, hp);
	for (int i = 0; i < p->nbuffers; i++)
		free(hp[i]);
	free(hp);
	return rc;
}

static int run_one(RtRun *r, CudaDev *d, const DtmAction *a, cudaStream_t s)
{
	switch (a->kind) {
	case DTM_ACT_KERNEL: return run_kernel(r, d, a, s);
	case DTM_ACT_GEMM: return run_gemm(r, d, a, s);
	case DTM_ACT_COLL:
	case DTM_ACT_SEND:
	case DTM_ACT_RECV: return run_coll(r, d, a, s);
	case DTM_ACT_WAIT: return 0; /* the events order everything */
	}
	return rt_errf(r->err, "unknown action kind %d", (int)a->kind);
}

/* A failed pass leaves NCCL operations in flight that peers may never
 * match: the communicators are aborted at close instead of destroyed
 * (which would wait for them). */
static int fail_pass(CudaDev *d)
{
#ifdef DTM_HAVE_NCCL
	d->nccl_failed = true;
#else
	(void)d;
#endif
	return -1;
}

static bool is_compute(const DtmAction *a)
{
	return a->kind == DTM_ACT_KERNEL || a->kind == DTM_ACT_GEMM;
}

/* --profile-actions: a pair of timing events per kernel and GEMM of the
 * stage, each action's time its own events' span on the compute stream
 * (what the GPU spent from its launch to its end: a launch-bound small
 * kernel's includes the host's launch gap, as a step's does). */
static int profile_events(RtRun *r, CudaDev *d)
{
	const DtmStage *st = &r->plan->stages[r->stage];
	size_t na = (size_t)(st->nactions > 0 ? st->nactions : 1);
	d->pt0 = calloc(na, sizeof *d->pt0);
	d->pt1 = calloc(na, sizeof *d->pt1);
	if (!d->pt0 || !d->pt1)
		return rt_errf(r->err, "out of memory for --profile-actions");
	for (int i = 0; i < st->nactions; i++)
		if (is_compute(&st->actions[i]) &&
		    (CUDA_CHECK(r->err, cudaEventCreate(&d->pt0[i])) ||
		     CUDA_CHECK(r->err, cudaEventCreate(&d->pt1[i]))))
			return -1;
	return 0;
}

static int cuda_run_actions(RtRun *r, bool forward_only)
{
	CudaDev *d = r->dev_state;
	const DtmPlan *p = r->plan;
	const DtmStage *st = &p->stages[r->stage];
	const RtCudaSched *sc = &d->sched[forward_only ? 1 : 0];
	char *err = r->err;
	r->compute_s = r->comm_s = 0;
	bool prof = r->act_s != NULL;
	if (prof && !d->pt0 && profile_events(r, d))
		return fail_pass(d);
	/* this step's inputs, complete before either stream reads them (both
	 * are idle between passes) */
	for (int i = 0; i < p->ninputs; i++)
		if (upload(r, d, p->inputs[i]))
			return fail_pass(d);
	if (CUDA_CHECK(err, cudaStreamSynchronize(d->stream[0])) ||
	    CUDA_CHECK(err, cudaEventRecord(d->pass0, d->stream[0])))
		return fail_pass(d);
	for (int i = 0; i < sc->n;) {
		const DtmAction *a = &st->actions[i];
		int si = sc->stream[i], len = sc->group_len[i] > 0 ? sc->group_len[i] : 1;
		if (si < 0) {
			i++;
			continue;
		}
		cudaStream_t s = d->stream[si];
		/* a group's members: their waits first, then one NCCL group */
		int end = i, members = 0;
		for (; end < sc->n && members < len; end++) {
			if (sc->stream[end] < 0)
				continue;
			members++;
			if (sc->wait[end] >= 0 &&
			    CUDA_CHECK(err, cudaStreamWaitEvent(s, d->ev[sc->wait[end]], 0)))
				return fail_pass(d);
		}
		bool timed = si == 1 && d->t0[i];
		if (timed && CUDA_CHECK(err, cudaEventRecord(d->t0[i], s)))
			return fail_pass(d);
#ifdef DTM_HAVE_NCCL
		if (len > 1 && NCCL_CHECK(err, NULL, ncclGroupStart()))
			return fail_pass(d);
#endif
		int rc = 0;
		for (int j = i; j < end && !rc; j++) {
			if (sc->stream[j] < 0)
				continue;
			bool pt = prof && d->pt0[j];
			rc = pt ? CUDA_CHECK(err, cudaEventRecord(d->pt0[j], s)) : 0;
			rc = rc ? rc : run_one(r, d, &st->actions[j], s);
			if (!rc && pt)
				rc = CUDA_CHECK(err, cudaEventRecord(d->pt1[j], s));
		}
#ifdef DTM_HAVE_NCCL
		if (len > 1) {
			ncclResult_t ge = ncclGroupEnd();
			if (!rc && ge != ncclSuccess)
				rc = nccl_fail(ge, NULL, "ncclGroupEnd()", __FILE__, __LINE__, err);
		}
#endif
		if (rc) {
			/* a message from inside names the call; add the action */
			char inner[RT_ERR_LEN];
			snprintf(inner, sizeof inner, "%s", err);
			if (!strstr(inner, a->label ? a->label : "\x01"))
				rt_errf(err, "%s (action %d '%s')", inner, i,
					a->label ? a->label : "?");
			return fail_pass(d);
		}
		if (timed && CUDA_CHECK(err, cudaEventRecord(d->t1[i], s)))
			return fail_pass(d);
		for (int j = i; j < end; j++)
			if (sc->stream[j] >= 0 && sc->record[j] &&
			    CUDA_CHECK(err, cudaEventRecord(d->ev[j], s)))
				return fail_pass(d);
		if (r->check_numerics)
			for (int j = i; j < end; j++)
				if (sc->stream[j] >= 0 && check_numerics(r, d, j, &st->actions[j]))
					return fail_pass(d);
		i = end;
	}
	if (CUDA_CHECK(err, cudaEventRecord(d->pass1, d->stream[0])) ||
	    drain(r, d, d->stream[1]) || drain(r, d, d->stream[0])) {
		/* an asynchronous fault surfaces here, far from its launch */
		char inner[RT_ERR_LEN];
		snprintf(inner, sizeof inner, "%s", err);
		rt_errf(err, "%s (at step %lld; --check-numerics runs one action at a time and "
			"names the one that failed)", inner, (long long)r->ctx.step);
		return fail_pass(d);
	}
	float ms = 0;
	if (CUDA_CHECK(err, cudaEventElapsedTime(&ms, d->pass0, d->pass1)))
		return fail_pass(d);
	r->compute_s = ms * 1e-3;
	for (int i = 0; i < sc->n; i++) {
		if (sc->stream[i] != 1 || !d->t0[i] || sc->group_len[i] == 0)
			continue;
		if (CUDA_CHECK(err, cudaEventElapsedTime(&ms, d->t0[i], d->t1[i])))
			return fail_pass(d);
		r->comm_s += ms * 1e-3;
	}
	for (int i = 0; prof && i < sc->n; i++) {
		if (sc->stream[i] < 0 || !d->pt0[i])
			continue;
		if (CUDA_CHECK(err, cudaEventElapsedTime(&ms, d->pt0[i], d->pt1[i])))
			return fail_pass(d);
		r->act_s[i] += ms * 1e-3;
	}
	return 0;
}

/* ---- --calibrate-gemm: the device's GEMM curve ----
 *
 * Every shape of rt_cuda_cal_shapes through blas_gemm (the call a plan's
 * GEMMs take) on the compute stream, f32 and then bf16 operands and
 * result: one call untimed (cuBLAS picks and loads its kernel), one timed
 * to size a batch (rt_cuda_cal_reps: about 5 ms of calls), then three
 * batches back to back between two events, the fastest batch's time per
 * call.  A small GEMM's time so includes its launch, as in a step.  The
 * operands hold small varied values (zeros would draw less power than
 * training's data). */

/* n elements of type t at dst: a repeating pattern of small values */
static int fill_pattern(CudaDev *d, void *dst, DtmDtype t, int64_t n, char *err)
{
	enum { CHUNK = 1 << 22 };
	size_t es = rt_dtype_size(t);
	char *h = malloc((size_t)CHUNK * es);
	if (!h)
		return rt_errf(err, "out of memory for --calibrate-gemm");
	for (int64_t i = 0; i < CHUNK; i++)
		rt_store_f32(h, t, i, (float)((i * 7919) % 17 - 8) * 0.01f);
	int rc = 0;
	for (int64_t o = 0; o < n && !rc; o += CHUNK) {
		int64_t c = n - o < CHUNK ? n - o : CHUNK;
		rc = CUDA_CHECK(err, cudaMemcpyAsync((char *)dst + (size_t)o * es, h, (size_t)c * es,
						     cudaMemcpyHostToDevice, d->stream[0]));
	}
	if (!rc)
		rc = CUDA_CHECK(err, cudaStreamSynchronize(d->stream[0]));
	free(h);
	return rc;
}

/* seconds of `reps` calls of g between two events */
static int time_gemm(CudaDev *d, const DtmAction *g, DtmDtype t, void *const buf[3], int reps,
		     cudaEvent_t e0, cudaEvent_t e1, double *sec, char *err)
{
	cudaStream_t s = d->stream[0];
	if (CUDA_CHECK(err, cudaEventRecord(e0, s)))
		return -1;
	for (int i = 0; i < reps; i++)
		if (blas_gemm(d, g, t, t, t, buf[0], buf[1], buf[2], s, err))
			return -1;
	float ms = 0;
	if (CUDA_CHECK(err, cudaEventRecord(e1, s)) || CUDA_CHECK(err, cudaEventSynchronize(e1)) ||
	    CUDA_CHECK(err, cudaEventElapsedTime(&ms, e0, e1)))
		return -1;
	*sec = ms * 1e-3;
	return 0;
}

int rt_cuda_calibrate_gemm(RtRun *r, char **text, size_t *textlen, char *err)
{
	CudaDev *d = r->dev_state;
	int64_t g[RT_CUDA_CAL_SHAPES][3], maxe = 0;
	int n = rt_cuda_cal_shapes(g, RT_CUDA_CAL_SHAPES);
	for (int q = 0; q < n; q++)
		for (int k = 0; k < 3; k++) {
			int64_t e = g[q][k] * g[q][(k + 1) % 3]; /* m k, n m, k n */
			maxe = e > maxe ? e : maxe;
		}
	static const DtmDtype types[2] = {DTM_F32, DTM_BF16};
	double rate[2][RT_CUDA_CAL_SHAPES];
	void *buf[3] = {NULL, NULL, NULL};
	cudaEvent_t e0 = NULL, e1 = NULL;
	struct cudaDeviceProp prop;
	int rc = CUDA_CHECK(err, cudaSetDevice(d->device)) ||
		 CUDA_CHECK(err, cudaGetDeviceProperties(&prop, d->device)) ||
		 CUDA_CHECK(err, cudaEventCreate(&e0)) || CUDA_CHECK(err, cudaEventCreate(&e1));
	for (int b = 0; b < 3 && !rc; b++)
		rc = CUDA_CHECK(err, cudaMalloc(&buf[b], (size_t)maxe * sizeof(float)));
	for (int dt = 0; dt < 2 && !rc; dt++) {
		DtmDtype t = types[dt];
		for (int b = 0; b < 3 && !rc; b++)
			rc = fill_pattern(d, buf[b], t, maxe, err);
		for (int q = 0; q < n && !rc; q++) {
			DtmAction a = {.kind = DTM_ACT_GEMM, .nargs = 3, .args = {0, 1, 2},
				       .m = g[q][0], .n = g[q][1], .k = g[q][2], .batch = 1,
				       .alpha = 1, .beta = 0, .label = "calibrate"};
			double one = 0, best = INFINITY, sec = 0;
			rc = time_gemm(d, &a, t, buf, 1, e0, e1, &one, err) ||
			     time_gemm(d, &a, t, buf, 1, e0, e1, &one, err);
			int reps = rt_cuda_cal_reps(one);
			for (int k = 0; k < 3 && !rc; k++) {
				rc = time_gemm(d, &a, t, buf, reps, e0, e1, &sec, err);
				best = sec < best ? sec : best;
			}
			rate[dt][q] = rc ? 0 : 2.0 * (double)(a.m * a.n) * (double)a.k * reps / best;
		}
	}
	for (int b = 0; b < 3; b++)
		if (buf[b])
			cudaFree(buf[b]);
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	if (rc || !text)
		return rc ? -1 : 0;
	size_t cap = (size_t)(2 * n) * 96 + 512, len = 0;
	char *out = malloc(cap);
	if (!out)
		return rt_errf(err, "out of memory for --calibrate-gemm");
	/* the device, for dtmc calibrate (a comment to the profile's parser) */
	len += (size_t)snprintf(out, cap, "# device: %.200s\nmem_size = %.0f B\n", prop.name,
				(double)prop.totalGlobalMem);
	for (int dt = 0; dt < 2; dt++)
		for (int q = 0; q < n; q++)
			len += (size_t)snprintf(out + len, cap - len, "%s 1 %lld %lld %lld = %.6g\n",
						dt ? "gemm_bf16" : "gemm", (long long)g[q][0],
						(long long)g[q][1], (long long)g[q][2], rate[dt][q]);
	*text = out;
	*textlen = len;
	return 0;
}

/* ---- attach and close ---- */

static void cuda_close(RtRun *r)
{
	CudaDev *d = r->dev_state;
	if (!d)
		return;
	int n = r->plan->stages[r->stage].nactions;
	cudaSetDevice(d->device);
	cudaStreamSynchronize(d->stream[0]);
	cudaStreamSynchronize(d->stream[1]);
#ifdef DTM_HAVE_NCCL
	for (int i = 0; i < d->ncomms; i++)
		if (d->comms[i])
			d->nccl_failed ? ncclCommAbort(d->comms[i]) : ncclCommDestroy(d->comms[i]);
	if (d->nccl_world)
		d->nccl_failed ? ncclCommAbort(d->nccl_world) : ncclCommDestroy(d->nccl_world);
#endif
	for (int i = 0; i < n; i++) {
		if (d->ev && d->ev[i])
			cudaEventDestroy(d->ev[i]);
		if (d->t0 && d->t0[i])
			cudaEventDestroy(d->t0[i]);
		if (d->t1 && d->t1[i])
			cudaEventDestroy(d->t1[i]);
		if (d->pt0 && d->pt0[i])
			cudaEventDestroy(d->pt0[i]);
		if (d->pt1 && d->pt1[i])
			cudaEventDestroy(d->pt1[i]);
	}
	free(d->pt0);
	free(d->pt1);
	free(d->ev);
	free(d->t0);
	free(d->t1);
	if (d->pass0)
		cudaEventDestroy(d->pass0);
	if (d->pass1)
		cudaEventDestroy(d->pass1);
	if (d->blas)
		cublasDestroy(d->blas);
	cudaFree(d->blas_ws);
	for (int s = 0; s < 2; s++) {
		if (d->stream[s])
			cudaStreamDestroy(d->stream[s]);
		cudaFree(d->scratch[s]);
	}
	if (d->lib_loaded)
		cudaLibraryUnload(d->lib);
	free(d->kern);
	free(d->launch);
	for (int a = 0; a < DTM_ARENA_COUNT; a++)
		cudaFree(d->arena[a]);
	free(d->dptr);
	rt_cuda_sched_free(&d->sched[0]);
	rt_cuda_sched_free(&d->sched[1]);
	free(d);
	r->dev_state = NULL;
}

static const RtDeviceOps cuda_ops = {
	.name = "cuda",
	.run_actions = cuda_run_actions,
	.read_scalar = cuda_read_scalar,
	.to_device = cuda_to_device,
	.to_host = cuda_to_host,
	.close = cuda_close,
};

static int attr(int *v, enum cudaDeviceAttr a, int dev, char *err)
{
	return CUDA_CHECK(err, cudaDeviceGetAttribute(v, a, dev));
}

/* What the actions need that the plan could get wrong: CUDA kernels for
 * every kernel action, GEMM operand types cuBLAS takes. */
static int check_actions(const DtmPlan *p, int stage, char *err)
{
	const DtmStage *st = &p->stages[stage];
	for (int i = 0; i < st->nactions; i++) {
		const DtmAction *a = &st->actions[i];
		if (a->kind == DTM_ACT_KERNEL && !p->cuda_kernels[a->kernel].name)
			return rt_errf(err, "action %d '%s' calls kernel %d (%s), which has no CUDA "
				       "version", i, a->label ? a->label : "?", a->kernel,
				       p->kernel_names ? p->kernel_names[a->kernel] : "?");
		if (a->kind == DTM_ACT_GEMM &&
		    rt_cuda_gemm_types(p->buffers[a->args[0]].dtype, p->buffers[a->args[1]].dtype,
				       p->buffers[a->args[2]].dtype, a->label, err))
			return -1;
	}
	return 0;
}

static int attach(RtRun *r, CudaDev *d, const RtCudaOpts *o, char *err)
{
	const DtmPlan *p = r->plan;
	int ndev = 0, nact = p->stages[r->stage].nactions;
	if (rt_cuda_probe(&ndev, err))
		return -1;
	d->device = rt_cuda_pick_device(ndev, o->local_backend, (int)r->rank, d->world,
					env_local_rank(), err);
	if (d->device < 0 || CUDA_CHECK(err, cudaSetDevice(d->device)))
		return -1;
	int grid = 0;
	if (attr(&d->major, cudaDevAttrComputeCapabilityMajor, d->device, err) ||
	    attr(&d->minor, cudaDevAttrComputeCapabilityMinor, d->device, err) ||
	    attr(&d->lim.max_block, cudaDevAttrMaxThreadsPerBlock, d->device, err) ||
	    attr(&grid, cudaDevAttrMaxGridDimX, d->device, err) ||
	    attr(&d->lim.smem_default, cudaDevAttrMaxSharedMemoryPerBlock, d->device, err) ||
	    attr(&d->lim.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d->device, err))
		return -1;
	d->lim.max_grid = grid;
	if (check_actions(p, r->stage, err))
		return -1;

	/* memory: one allocation per arena */
	int64_t total = 0;
	for (int a = 0; a < DTM_ARENA_COUNT; a++) {
		int64_t n = p->arena_bytes[a];
		if (n <= 0)
			continue;
		if (CUDA_CHECK(err, cudaMalloc(&d->arena[a], (size_t)n)) ||
		    CUDA_CHECK(err, cudaMemset(d->arena[a], 0, (size_t)n)))
			return -1;
		total += n;
	}
	d->dptr = calloc((size_t)(p->nbuffers ? p->nbuffers : 1), sizeof *d->dptr);
	if (!d->dptr)
		return rt_errf(err, "out of memory");
	for (int i = 0; i < p->nbuffers; i++) {
		const DtmBuffer *b = &p->buffers[i];
		if (b->stage != p->stage)
			continue; /* another pipeline stage's */
		d->dptr[i] = b->bytes > 0 && d->arena[b->arena] ?
				     (char *)d->arena[b->arena] + b->offset : NULL;
	}
	for (int s = 0; s < 2; s++)
		if (CUDA_CHECK(err, cudaStreamCreateWithFlags(&d->stream[s],
							      cudaStreamNonBlocking)))
			return -1;

	/* cuBLAS, with a workspace of its own (Hopper's kernels want 32 MiB) */
	size_t ws = (size_t)32 << 20;
	if (CUBLAS_CHECK(err, cublasCreate(&d->blas)) ||
	    CUBLAS_CHECK(err, cublasSetStream(d->blas, d->stream[0])) ||
	    CUDA_CHECK(err, cudaMalloc(&d->blas_ws, ws)) ||
	    CUBLAS_CHECK(err, cublasSetWorkspace(d->blas, d->blas_ws, ws)))
		return -1;
	d->blas_stream = d->stream[0];

	if (load_module(r, d, o->verbose, err))
		return -1;

	/* streams and events */
	if (rt_cuda_schedule(p, r->stage, false, &d->sched[0], err) ||
	    rt_cuda_schedule(p, r->stage, true, &d->sched[1], err))
		return -1;
	size_t na = (size_t)(nact > 0 ? nact : 1);
	d->ev = calloc(na, sizeof *d->ev);
	d->t0 = calloc(na, sizeof *d->t0);
	d->t1 = calloc(na, sizeof *d->t1);
	if (!d->ev || !d->t0 || !d->t1)
		return rt_errf(err, "out of memory");
	for (int i = 0; i < nact; i++) {
		if ((d->sched[0].record[i] || d->sched[1].record[i]) &&
		    CUDA_CHECK(err, cudaEventCreateWithFlags(&d->ev[i], cudaEventDisableTiming)))
			return -1;
		if ((d->sched[0].stream[i] == 1 || d->sched[1].stream[i] == 1) &&
		    (d->sched[0].group_len[i] > 0 || d->sched[1].group_len[i] > 0) &&
		    (CUDA_CHECK(err, cudaEventCreate(&d->t0[i])) ||
		     CUDA_CHECK(err, cudaEventCreate(&d->t1[i]))))
			return -1;
	}
	if (CUDA_CHECK(err, cudaEventCreate(&d->pass0)) ||
	    CUDA_CHECK(err, cudaEventCreate(&d->pass1)))
		return -1;

	/* collectives' staging, sized for the largest */
	if (d->world > 1) {
		const DtmStage *st = &p->stages[r->stage];
		for (int i = 0; i < nact; i++) {
			int64_t n = coll_scratch(p, &d->mesh, (int)r->rank, &st->actions[i]);
			if (n > d->scratch_bytes)
				d->scratch_bytes = n;
		}
		for (int s = 0; s < 2 && d->scratch_bytes > 0; s++)
			if (CUDA_CHECK(err, cudaMalloc(&d->scratch[s], (size_t)d->scratch_bytes)))
				return -1;
#ifdef DTM_HAVE_NCCL
		/* a step's GPU work is waited for as a whole, so the wait
		 * allows for long steps beyond --comm-timeout */
		d->timeout_s = r->comm ? r->comm->timeout_s : COMM_DEFAULT_TIMEOUT_S;
		if (d->timeout_s < 300)
			d->timeout_s = 300;
		if (nccl_init(r, d, err))
			return -1;
#else
		return rt_errf(err, "a %d-rank plan on CUDA needs NCCL, which this binary's CUDA "
			       "runtime was built without", d->world);
#endif
	}
	/* the arenas' memsets ran on the legacy stream, which the
	 * non-blocking streams do not wait for */
	if (CUDA_CHECK(err, cudaDeviceSynchronize()))
		return -1;
	if (o->verbose) {
		struct cudaDeviceProp prop;
		const char *name = cudaGetDeviceProperties(&prop, d->device) == cudaSuccess ?
					   prop.name : "?";
		fprintf(stderr, "cuda: rank %lld on GPU %d (%s, compute capability %d.%d): "
				"arenas %lld bytes, collective staging 2 x %lld, %d of %d actions "
				"wait on the other stream\n",
			(long long)r->rank, d->device, name, d->major, d->minor, (long long)total,
			(long long)d->scratch_bytes, d->sched[0].nwaits, nact);
	}
	return 0;
}

int rt_cuda_attach(RtRun *r, const RtCudaOpts *o, char *err)
{
	const DtmPlan *p = r->plan;
	if (!p->cuda_source || !p->cuda_kernels)
		return rt_errf(err, "--device cuda: this binary's plan has no CUDA kernels (build "
			       "it with `dtmc build --cuda`)");
	CudaDev *d = calloc(1, sizeof *d);
	if (!d)
		return rt_errf(err, "out of memory");
	comm_mesh_from_plan(&d->mesh, p);
	d->world = (int)rt_world_size(p);
	d->timeout_s = COMM_DEFAULT_TIMEOUT_S;
	/* attached first, so rt_run_free releases whatever was made */
	r->dev = &cuda_ops;
	r->dev_state = d;
	char e[RT_ERR_LEN];
	if (attach(r, d, o, e))
		return rt_errf(err, "--device cuda: %s", e);
	return 0;
}
