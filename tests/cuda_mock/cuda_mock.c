/* cuda_mock.c - the CUDA runtime, cuBLAS, NVRTC and NCCL calls that
 * runtime/dev_cuda.c makes, emulated on the CPU, so the cuda device's host
 * code runs end to end on a machine without a GPU (tests/e2e/cuda_mock.sh).
 *
 * Linked into a dtmc-generated training binary in place of CUDA's
 * libraries, with -Wl,--wrap=dtm_main: the wrapper records the plan (and,
 * when the plan has no CUDA kernels, gives it stand-ins named k0, k1, ...).
 *
 *   memory    "device" memory is host memory; copies are memcpy.
 *   streams   queues: work is enqueued and runs only when the host waits
 *             (stream or device synchronize, stream query), so a missing
 *             event shows: at each wait the mock runs the waiting thread's
 *             streams in the order DTM_MOCK_ORDER says, "compute" (the
 *             first stream created first, as far as events allow) or
 *             "comm" (the second first).  Blocking copies and memsets run
 *             at once, without draining the streams (CUDA's legacy stream
 *             does not wait for non-blocking ones).
 *   kernels   a launch of plan kernel k (by name in plan->cuda_kernels)
 *             runs the plan's CPU kernel k on the launch's arguments (the
 *             DtmCudaArgs copied at launch), with a per-thread scratch.
 *   cuBLAS    GEMMs as cuBLAS defines them, column-major, f32 accumulation
 *             in double, bf16/f16 rounded on store.
 *   NVRTC     "compiles" by copying the source, which the library load
 *             then checks against the plan's (so a cache hit is checked).
 *   NCCL      ranks are threads of this process; collectives meet at
 *             barriers on a shared table; sends are buffered in mailboxes.
 *
 * DTM_MOCK_GPUS (default 8) sets the device count; 0 makes
 * cudaGetDeviceCount fail as it does without a driver.  Every elapsed
 * time between two events is 0.01 ms.  DTM_MOCK_GEMM_SKIP=1 makes GEMMs
 * check their arguments and compute nothing (--calibrate-gemm's grid of
 * GEMMs up to 16384^3, whose results nobody reads).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>
#ifdef DTM_HAVE_NCCL
#include <nccl.h>
#endif

#include "runtime/rt.h"

static void die(const char *msg)
{
	fprintf(stderr, "cuda_mock: %s\n", msg);
	abort();
}

/* ---- the plan ---- */

static const DtmPlan *mock_plan;
static DtmPlan mock_plan_copy;
static DtmCudaKernel *mock_kernels;

int __real_dtm_main(const DtmPlan *plan, int argc, char **argv);

int __wrap_dtm_main(const DtmPlan *plan, int argc, char **argv)
{
	mock_plan = plan;
	if (!plan->cuda_source || !plan->cuda_kernels) {
		/* stand-ins for a plan built without --cuda */
		mock_plan_copy = *plan;
		mock_kernels = calloc((size_t)(plan->nkernels + 1), sizeof *mock_kernels);
		for (int k = 0; k < plan->nkernels; k++) {
			char *name = malloc(16);
			snprintf(name, 16, "k%d", k);
			mock_kernels[k] = (DtmCudaKernel){ name, 1, 1, 0 };
		}
		mock_plan_copy.cuda_source = "/* cuda_mock: no CUDA source */";
		mock_plan_copy.cuda_kernels = mock_kernels;
		mock_plan = &mock_plan_copy;
	}
	int rc = __real_dtm_main(mock_plan, argc, argv);
	if (mock_kernels) {
		for (int k = 0; k < plan->nkernels; k++)
			free((char *)mock_kernels[k].name);
		free(mock_kernels);
	}
	return rc;
}

/* ---- streams, events and the queue ---- */

typedef struct Op {
	void (*run)(struct Op *);
	struct Op *next;
	/* a wait: runnable once ev has run record number gen */
	struct CUevent_st *ev;
	long gen;
	/* payload */
	unsigned char data[256];
	void *heap;
} Op;

struct CUstream_st {
	int id;
	Op *head, *tail;
	struct CUstream_st *next_in_thread;
};

struct CUevent_st {
	long recorded, done;
};

static _Thread_local struct CUstream_st *thread_streams;
static _Thread_local int thread_nstreams;

static Op *op_new(void (*run)(Op *))
{
	Op *o = calloc(1, sizeof *o);
	if (!o)
		die("out of memory");
	o->run = run;
	return o;
}

static void op_free(Op *o)
{
	free(o->heap);
	free(o);
}

/* Queues o on s, or runs it now on the legacy stream. */
static void enqueue(struct CUstream_st *s, Op *o)
{
	if (!s) {
		o->run(o);
		op_free(o);
		return;
	}
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
}

static bool runnable(const Op *o)
{
	return !o->ev || o->ev->done >= o->gen;
}

static bool order_comm_first(void)
{
	const char *e = getenv("DTM_MOCK_ORDER");
	return e && strcmp(e, "comm") == 0;
}

/* Runs this thread's streams until `target` (NULL: all) is empty. */
static void drain(struct CUstream_st *target)
{
	bool comm_first = order_comm_first();
	for (;;) {
		bool pending = false;
		struct CUstream_st *pick = NULL;
		for (struct CUstream_st *s = thread_streams; s; s = s->next_in_thread) {
			if (!s->head)
				continue;
			if (!target || s == target)
				pending = true;
			if (!runnable(s->head))
				continue;
			if (!pick || (comm_first ? s->id > pick->id : s->id < pick->id))
				pick = s;
		}
		if (!pending)
			return;
		if (!pick)
			die("deadlock: every stream waits for an event never recorded");
		Op *o = pick->head;
		pick->head = o->next;
		if (!pick->head)
			pick->tail = NULL;
		o->run(o);
		op_free(o);
	}
}

/* ---- the CUDA runtime ---- */

static int mock_gpus(void)
{
	const char *e = getenv("DTM_MOCK_GPUS");
	return e ? atoi(e) : 8;
}

const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInsufficientDriver:
		return "CUDA driver version is insufficient for CUDA runtime version";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInvalidValue: return "invalid argument";
	default: return "mock error";
	}
}

const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "cudaSuccess";
	case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
	case cudaErrorNoDevice: return "cudaErrorNoDevice";
	case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
	default: return "cudaErrorUnknown";
	}
}

cudaError_t cudaGetDeviceCount(int *n)
{
	int g = mock_gpus();
	if (g <= 0) {
		*n = 0;
		return cudaErrorInsufficientDriver;
	}
	*n = g;
	return cudaSuccess;
}

static _Thread_local int thread_device = -1;

cudaError_t cudaSetDevice(int dev)
{
	if (dev < 0 || dev >= mock_gpus())
		return cudaErrorInvalidValue;
	thread_device = dev;
	return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int dev)
{
	switch (a) {
	case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
	case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
	case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
	case cudaDevAttrMaxGridDimX: *v = 2147483647; break;
	case cudaDevAttrMaxSharedMemoryPerBlock: *v = 48 << 10; break;
	case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = 227 << 10; break;
	default: return cudaErrorInvalidValue;
	}
	return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int dev)
{
	memset(prop, 0, sizeof *prop);
	snprintf(prop->name, sizeof prop->name, "cuda_mock GPU %d", dev);
	prop->major = 9;
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
	/* garbage, as cudaMalloc's memory is: the runtime must clear it */
	*p = malloc(n ? n : 1);
	if (!*p)
		return cudaErrorMemoryAllocation;
	memset(*p, 0xa5, n);
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	free(p);
	return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
	memset(p, v, n);
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k)
{
	memmove(dst, src, n);
	return cudaSuccess;
}

struct copy_op {
	void *dst;
	const void *src;
	size_t dpitch, spitch, width, height;
};

static void run_copy(Op *o)
{
	struct copy_op *c = (struct copy_op *)o->data;
	for (size_t r = 0; r < c->height; r++)
		memmove((char *)c->dst + r * c->dpitch, (const char *)c->src + r * c->spitch,
			c->width);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
			    cudaStream_t s)
{
	Op *o = op_new(run_copy);
	*(struct copy_op *)o->data = (struct copy_op){ dst, src, n, n, n, 1 };
	enqueue(s, o);
	return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
			      size_t width, size_t height, enum cudaMemcpyKind k, cudaStream_t s)
{
	if (width > dpitch || width > spitch)
		return cudaErrorInvalidValue;
	Op *o = op_new(run_copy);
	*(struct copy_op *)o->data = (struct copy_op){ dst, src, dpitch, spitch, width, height };
	enqueue(s, o);
	return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
	struct CUstream_st *st = calloc(1, sizeof *st);
	st->id = thread_nstreams++;
	st->next_in_thread = thread_streams;
	thread_streams = st;
	*s = st;
	return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	drain(s);
	for (struct CUstream_st **p = &thread_streams; *p; p = &(*p)->next_in_thread) {
		if (*p == s) {
			*p = s->next_in_thread;
			break;
		}
	}
	free(s);
	if (!thread_streams)
		thread_nstreams = 0;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	drain(s);
	return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
	drain(s);
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	drain(NULL);
	return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
	*e = calloc(1, sizeof **e);
	return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
	return cudaEventCreate(e);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	free(e);
	return cudaSuccess;
}

static void run_record(Op *o)
{
	struct CUevent_st *e = *(struct CUevent_st **)o->data;
	e->done++;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	e->recorded++;
	Op *o = op_new(run_record);
	*(struct CUevent_st **)o->data = e;
	enqueue(s, o);
	return cudaSuccess;
}

static void run_nothing(Op *o)
{
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
	if (!e->recorded)
		return cudaSuccess; /* CUDA: waiting for a never-recorded event is a no-op */
	Op *o = op_new(run_nothing);
	o->ev = e;
	o->gen = e->recorded;
	enqueue(s, o);
	return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	drain(NULL);
	return e->done < e->recorded ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	if (a->done < a->recorded || b->done < b->recorded || !a->recorded || !b->recorded)
		return cudaErrorNotReady;
	*ms = 0.01f;
	return cudaSuccess;
}

/* ---- kernels ---- */

struct CUlib_st {
	int loaded;
};

cudaError_t cudaLibraryLoadData(cudaLibrary_t *lib, const void *code, enum cudaJitOption *jo,
				void **jv, unsigned int nj, enum cudaLibraryOption *lo, void **lv,
				unsigned int nl)
{
	if (!mock_plan || strcmp(code, mock_plan->cuda_source) != 0)
		return cudaErrorInvalidValue; /* not this plan's (compiled or cached) source */
	*lib = calloc(1, sizeof **lib);
	return cudaSuccess;
}

cudaError_t cudaLibraryUnload(cudaLibrary_t lib)
{
	free(lib);
	return cudaSuccess;
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t *k, cudaLibrary_t lib, const char *name)
{
	for (int i = 0; i < mock_plan->nkernels; i++) {
		if (mock_plan->cuda_kernels[i].name &&
		    strcmp(mock_plan->cuda_kernels[i].name, name) == 0) {
			*k = (cudaKernel_t)(intptr_t)(i + 1);
			return cudaSuccess;
		}
	}
	return cudaErrorSymbolNotFound;
}

cudaError_t cudaFuncSetAttribute(const void *f, enum cudaFuncAttribute a, int v)
{
	return cudaSuccess;
}

static _Thread_local float thread_scratch[DTM_SCRATCH_FLOATS];

struct launch_op {
	int kernel;
	DtmCudaArgs a;
};

static void run_launch(Op *o)
{
	struct launch_op *l = (struct launch_op *)o->data;
	const DtmPlan *p = mock_plan;
	int64_t coords[DTM_MAX_AXES];
	for (int i = 0; i < DTM_MAX_AXES; i++)
		coords[i] = l->a.coords[i];
	DtmCtx ctx = {
		.step = l->a.step, .lr = l->a.lr, .seed = l->a.seed, .rank = l->a.rank,
		.coords = coords, .nthreads = 1, .scratch = thread_scratch,
		.parallel_for = rt_ctx_parallel_for, .pool = NULL,
		.mesh_naxes = p->mesh_naxes, .mesh_sizes = p->mesh_sizes,
	};
	p->kernels[l->kernel](&ctx, l->a.p);
}

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t smem,
			     cudaStream_t s)
{
	int k = (int)(intptr_t)func - 1;
	if (k < 0 || k >= mock_plan->nkernels || grid.x < 1 || block.x < 1 || block.x > 1024)
		return cudaErrorInvalidValue;
	Op *o = op_new(run_launch);
	_Static_assert(sizeof(struct launch_op) <= sizeof o->data, "launch fits");
	struct launch_op *l = (struct launch_op *)o->data;
	l->kernel = k;
	memcpy(&l->a, args[0], sizeof l->a); /* by value, at launch */
	enqueue(s, o);
	return cudaSuccess;
}

/* ---- NVRTC ---- */

struct _nvrtcProgram {
	char *src;
};

const char *nvrtcGetErrorString(nvrtcResult r)
{
	return r == NVRTC_SUCCESS ? "NVRTC_SUCCESS" : "NVRTC_ERROR (mock)";
}

nvrtcResult nvrtcVersion(int *major, int *minor)
{
	*major = 13;
	*minor = 0;
	return NVRTC_SUCCESS;
}

static const int mock_archs[] = { 75, 80, 86, 89, 90, 100, 120 };

nvrtcResult nvrtcGetNumSupportedArchs(int *n)
{
	*n = (int)(sizeof mock_archs / sizeof mock_archs[0]);
	return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetSupportedArchs(int *a)
{
	memcpy(a, mock_archs, sizeof mock_archs);
	return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
			       int nh, const char *const *h, const char *const *hn)
{
	*prog = calloc(1, sizeof **prog);
	(*prog)->src = strdup(src);
	return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int n, const char *const *opts)
{
	if (n < 1 || strncmp(opts[0], "--gpu-architecture=sm_90", 24) != 0)
		return NVRTC_ERROR_INVALID_OPTION;
	if (getenv("DTM_MOCK_COUNT_COMPILES"))
		fprintf(stderr, "cuda_mock: nvrtc compile\n");
	return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *n)
{
	*n = 1;
	return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log)
{
	log[0] = 0;
	return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *n)
{
	*n = strlen(prog->src) + 1;
	return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *out)
{
	strcpy(out, prog->src);
	return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *n)
{
	return nvrtcGetCUBINSize(prog, n);
}

nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *out)
{
	return nvrtcGetCUBIN(prog, out);
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)
{
	free((*prog)->src);
	free(*prog);
	*prog = NULL;
	return NVRTC_SUCCESS;
}

/* ---- cuBLAS ---- */

struct cublasContext {
	cudaStream_t stream;
};

const char *cublasGetStatusString(cublasStatus_t s)
{
	return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
	*h = calloc(1, sizeof **h);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
	free(h);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
	h->stream = s;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t n)
{
	return CUBLAS_STATUS_SUCCESS;
}

struct gemm_op {
	bool ta, tb;
	int m, n, k, lda, ldb, ldc, batch;
	long long sa, sb, sc;
	float alpha, beta;
	const void *A, *B;
	void *C;
	cudaDataType at, bt, ct;
};

static float load(const void *p, cudaDataType t, long long i)
{
	switch (t) {
	case CUDA_R_16BF: return bf16_to_f32(((const uint16_t *)p)[i]);
	case CUDA_R_16F: return f16_to_f32(((const uint16_t *)p)[i]);
	default: return ((const float *)p)[i];
	}
}

static void store(void *p, cudaDataType t, long long i, float v)
{
	switch (t) {
	case CUDA_R_16BF: ((uint16_t *)p)[i] = bf16_from_f32(v); break;
	case CUDA_R_16F: ((uint16_t *)p)[i] = f16_from_f32(v); break;
	default: ((float *)p)[i] = v;
	}
}

static void run_gemm(Op *o)
{
	struct gemm_op *g = (struct gemm_op *)o->data;
	const char *skip = getenv("DTM_MOCK_GEMM_SKIP");
	if (skip && !strcmp(skip, "1"))
		return;
	for (int q = 0; q < g->batch; q++) {
		long long oa = q * g->sa, ob = q * g->sb, oc = q * g->sc;
		for (int i = 0; i < g->m; i++) {
			for (int j = 0; j < g->n; j++) {
				double acc = 0;
				for (int p = 0; p < g->k; p++) {
					float x = load(g->A, g->at,
						       oa + (g->ta ? p + (long long)i * g->lda :
								     i + (long long)p * g->lda));
					float y = load(g->B, g->bt,
						       ob + (g->tb ? j + (long long)p * g->ldb :
								     p + (long long)j * g->ldb));
					acc += (double)x * y;
				}
				long long ci = oc + i + (long long)j * g->ldc;
				float c = g->beta != 0 ? g->beta * load(g->C, g->ct, ci) : 0;
				store(g->C, g->ct, ci, (float)(g->alpha * acc) + c);
			}
		}
	}
}

static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
			   int n, int k, const float *alpha, const void *A, cudaDataType at, int lda,
			   long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
			   const float *beta, void *C, cudaDataType ct, int ldc, long long sc,
			   int batch)
{
	/* cuBLAS's argument checks */
	if (m < 0 || n < 0 || k < 0 || batch < 0 || ldc < (m > 1 ? m : 1) ||
	    lda < ((ta == CUBLAS_OP_N ? m : k) > 1 ? (ta == CUBLAS_OP_N ? m : k) : 1) ||
	    ldb < ((tb == CUBLAS_OP_N ? k : n) > 1 ? (tb == CUBLAS_OP_N ? k : n) : 1))
		return CUBLAS_STATUS_INVALID_VALUE;
	Op *o = op_new(run_gemm);
	_Static_assert(sizeof(struct gemm_op) <= sizeof o->data, "gemm fits");
	*(struct gemm_op *)o->data = (struct gemm_op){
		ta != CUBLAS_OP_N, tb != CUBLAS_OP_N, m, n, k, lda, ldb, ldc, batch, sa, sb, sc,
		*alpha, *beta, A, B, C, at, bt, ct };
	enqueue(h->stream, o);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
					  cublasOperation_t tb, int m, int n, int k,
					  const void *alpha, const void *A, cudaDataType at, int lda,
					  long long sa, const void *B, cudaDataType bt, int ldb,
					  long long sb, const void *beta, void *C, cudaDataType ct,
					  int ldc, long long sc, int batch, cublasComputeType_t comp,
					  cublasGemmAlgo_t algo)
{
	if (comp != CUBLAS_COMPUTE_32F)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	return gemm(h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc,
		    sc, batch);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
			    int n, int k, const void *alpha, const void *A, cudaDataType at, int lda,
			    const void *B, cudaDataType bt, int ldb, const void *beta, void *C,
			    cudaDataType ct, int ldc, cublasComputeType_t comp, cublasGemmAlgo_t algo)
{
	if (comp != CUBLAS_COMPUTE_32F)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	return gemm(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0,
		    1);
}

/* ---- NCCL ---- */

#ifdef DTM_HAVE_NCCL

/* The members of one communicator meet here. */
typedef struct Shared {
	int n;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	long gen;
	int arrived, refs;
	void *slot[64];     /* per member: its posted pointer */
	long long tag[64];  /* per member: split color/key */
	/* mailboxes: box[src * n + dst], FIFO of messages */
	struct Msg *box[64 * 64];
} Shared;

typedef struct Msg {
	struct Msg *next;
	size_t n;
	char data[];
} Msg;

struct ncclComm {
	Shared *sh;
	int rank;
};

static Shared *shared_new(int n)
{
	if (n > 64)
		die("at most 64 ranks");
	Shared *s = calloc(1, sizeof *s);
	s->n = n;
	s->refs = n;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	return s;
}

static void barrier(Shared *s)
{
	pthread_mutex_lock(&s->mu);
	long g = s->gen;
	if (++s->arrived == s->n) {
		s->arrived = 0;
		s->gen++;
		pthread_cond_broadcast(&s->cv);
	} else {
		while (s->gen == g)
			pthread_cond_wait(&s->cv, &s->mu);
	}
	pthread_mutex_unlock(&s->mu);
}

const char *ncclGetErrorString(ncclResult_t r)
{
	return r == ncclSuccess ? "no error" : "mock NCCL error";
}

const char *ncclGetLastError(ncclComm_t c)
{
	return "";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	memset(id, 0, sizeof *id);
	Shared **cell = calloc(1, sizeof *cell); /* the world, made by the first to join */
	memcpy(id->internal, &cell, sizeof cell);
	return ncclSuccess;
}

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

ncclResult_t ncclCommInitRank(ncclComm_t *c, int n, ncclUniqueId id, int rank)
{
	Shared **cell;
	memcpy(&cell, id.internal, sizeof cell);
	if (thread_device < 0)
		die("ncclCommInitRank before cudaSetDevice");
	pthread_mutex_lock(&init_mu);
	if (!*cell)
		*cell = shared_new(n);
	Shared *s = *cell;
	pthread_mutex_unlock(&init_mu);
	*c = calloc(1, sizeof **c);
	(*c)->sh = s;
	(*c)->rank = rank;
	barrier(s); /* blocking, like NCCL's */
	if (rank == 0)
		free(cell);
	return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out,
			   ncclConfig_t *config)
{
	Shared *s = c->sh;
	s->tag[c->rank] = ((long long)color << 32) | (unsigned)key;
	barrier(s);
	/* members: same color, ordered by (key, parent rank) */
	int members[64], nm = 0, me = -1;
	for (int r = 0; r < s->n; r++)
		if ((int)(s->tag[r] >> 32) == color)
			members[nm++] = r;
	for (int i = 1; i < nm; i++)
		for (int j = i; j > 0 && (int)s->tag[members[j]] < (int)s->tag[members[j - 1]]; j--) {
			int t = members[j];
			members[j] = members[j - 1];
			members[j - 1] = t;
		}
	for (int i = 0; i < nm; i++)
		if (members[i] == c->rank)
			me = i;
	barrier(s);
	if (me == 0)
		s->slot[c->rank] = shared_new(nm);
	barrier(s);
	*out = calloc(1, sizeof **out);
	(*out)->sh = s->slot[members[0]];
	(*out)->rank = me;
	barrier(s);
	return ncclSuccess;
}

static void comm_release(ncclComm_t c)
{
	Shared *s = c->sh;
	pthread_mutex_lock(&s->mu);
	int left = --s->refs;
	pthread_mutex_unlock(&s->mu);
	if (!left) {
		for (int i = 0; i < s->n * s->n; i++)
			while (s->box[i]) {
				Msg *m = s->box[i];
				s->box[i] = m->next;
				free(m);
			}
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->cv);
		free(s);
	}
	free(c);
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
	comm_release(c);
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
	comm_release(c);
	return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e)
{
	*e = ncclSuccess;
	return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	return ncclSuccess;
}

static size_t nccl_size(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8:
	case ncclUint8: return 1;
	case ncclFloat16:
	case ncclBfloat16: return 2;
	case ncclInt64:
	case ncclUint64:
	case ncclFloat64: return 8;
	default: return 4;
	}
}

static float nload(const void *p, ncclDataType_t t, size_t i)
{
	switch (t) {
	case ncclBfloat16: return bf16_to_f32(((const uint16_t *)p)[i]);
	case ncclFloat16: return f16_to_f32(((const uint16_t *)p)[i]);
	case ncclInt32: return (float)((const int32_t *)p)[i];
	default: return ((const float *)p)[i];
	}
}

static void nstore(void *p, ncclDataType_t t, size_t i, double v)
{
	switch (t) {
	case ncclBfloat16: ((uint16_t *)p)[i] = bf16_from_f32((float)v); break;
	case ncclFloat16: ((uint16_t *)p)[i] = f16_from_f32((float)v); break;
	case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
	default: ((float *)p)[i] = (float)v;
	}
}

enum { C_ALLREDUCE, C_BROADCAST, C_ALLGATHER, C_REDSCAT, C_SEND, C_RECV };

struct coll_op {
	int kind;
	const void *in;
	void *out;
	size_t count;
	ncclDataType_t t;
	ncclRedOp_t op;
	int peer; /* root, or the send/recv peer */
	ncclComm_t c;
};

/* Every member posts a private copy of its input, then reads everyone's. */
static void run_coll(Op *o)
{
	struct coll_op *x = (struct coll_op *)o->data;
	Shared *s = x->c->sh;
	int n = s->n, me = x->c->rank;
	size_t es = nccl_size(x->t);
	if (x->kind == C_SEND) {
		Msg *m = malloc(sizeof *m + x->count * es);
		m->next = NULL;
		m->n = x->count * es;
		memcpy(m->data, x->in, m->n);
		pthread_mutex_lock(&s->mu);
		Msg **q = &s->box[me * n + x->peer];
		while (*q)
			q = &(*q)->next;
		*q = m;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		return;
	}
	if (x->kind == C_RECV) {
		pthread_mutex_lock(&s->mu);
		Msg **q = &s->box[x->peer * n + me];
		while (!*q)
			pthread_cond_wait(&s->cv, &s->mu);
		Msg *m = *q;
		*q = m->next;
		pthread_mutex_unlock(&s->mu);
		if (m->n != x->count * es)
			die("recv of a different size than the send");
		memcpy(x->out, m->data, m->n);
		free(m);
		return;
	}
	size_t in_elems = x->kind == C_REDSCAT ? x->count * (size_t)n : x->count;
	void *mine = malloc(in_elems * es + 1);
	memcpy(mine, x->in, in_elems * es);
	s->slot[me] = mine;
	barrier(s);
	switch (x->kind) {
	case C_ALLREDUCE:
	case C_REDSCAT: {
		size_t off = x->kind == C_REDSCAT ? (size_t)me * x->count : 0;
		for (size_t i = 0; i < x->count; i++) {
			double acc = x->op == ncclMax ? -1e300 : 0;
			for (int r = 0; r < n; r++) {
				double v = nload(s->slot[r], x->t, off + i);
				acc = x->op == ncclMax ? (v > acc ? v : acc) : acc + v;
			}
			if (x->op == ncclAvg)
				acc = x->t == ncclInt32 ? (double)((long long)acc / n) : acc / n;
			nstore(x->out, x->t, i, acc);
		}
		break;
	}
	case C_BROADCAST:
		memcpy(x->out, s->slot[x->peer], x->count * es);
		break;
	case C_ALLGATHER:
		for (int r = 0; r < n; r++)
			memcpy((char *)x->out + (size_t)r * x->count * es, s->slot[r], x->count * es);
		break;
	}
	barrier(s);
	free(mine);
}

static ncclResult_t coll(int kind, const void *in, void *out, size_t count, ncclDataType_t t,
			 ncclRedOp_t op, int peer, ncclComm_t c, cudaStream_t s)
{
	if (!c || peer < 0 || peer >= c->sh->n)
		return ncclInvalidArgument;
	Op *o = op_new(run_coll);
	*(struct coll_op *)o->data = (struct coll_op){ kind, in, out, count, t, op, peer, c };
	enqueue(s, o);
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *in, void *out, size_t count, ncclDataType_t t,
			   ncclRedOp_t op, ncclComm_t c, cudaStream_t s)
{
	return coll(C_ALLREDUCE, in, out, count, t, op, 0, c, s);
}

ncclResult_t ncclBroadcast(const void *in, void *out, size_t count, ncclDataType_t t, int root,
			   ncclComm_t c, cudaStream_t s)
{
	return coll(C_BROADCAST, in, out, count, t, ncclSum, root, c, s);
}

ncclResult_t ncclAllGather(const void *in, void *out, size_t count, ncclDataType_t t,
			   ncclComm_t c, cudaStream_t s)
{
	return coll(C_ALLGATHER, in, out, count, t, ncclSum, 0, c, s);
}

ncclResult_t ncclReduceScatter(const void *in, void *out, size_t count, ncclDataType_t t,
			       ncclRedOp_t op, ncclComm_t c, cudaStream_t s)
{
	return coll(C_REDSCAT, in, out, count, t, op, 0, c, s);
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
		      cudaStream_t s)
{
	return coll(C_SEND, buf, NULL, count, t, ncclSum, peer, c, s);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
		      cudaStream_t s)
{
	return coll(C_RECV, NULL, buf, count, t, ncclSum, peer, c, s);
}
#endif
