/* main.c - dtm_main, the training binary's entry: the command line, the
 * step loop, the learning-rate schedule, evaluation and checkpoints.
 *
 * The generated main() is just `return dtm_main(&plan, argc, argv);`.
 * Defaults come from the plan's train block, flags override them.  Exit
 * status: 0 on success, 1 on any error (a bad flag, a bad plan, a failed
 * checkpoint, a non-finite loss), with one "error: ..." line on stderr.
 * On the local backend a rank stuck outside communication does not keep
 * the process alive: its peers time out, and a grace period later the
 * process exits 1 naming it (run_local's watchdog).
 *
 * Step numbering: steps are 1-based and --steps N is the LAST step, so
 * `--steps 10 --save D` then `--resume D --steps 20` runs steps 11..20 and
 * prints exactly the losses of an uninterrupted `--steps 20`.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm.h"
#include "runtime/cuda_host.h"
#include "runtime/data.h"
#include "runtime/fsio.h"
#include "runtime/rt.h"

typedef struct Opts {
	int64_t steps, seed, save_every, eval_every, threads, lr_decay_steps, comm_delay_us;
	double lr, comm_timeout;
	bool threads_set, overlap, overlap_copy, overlap_set, backend_set, log_warn;
	const char *log, *save, *resume, *data, *val_data, *dump, *backend, *device;
	const char *profile_actions, *calibrate_gemm, *calibrate_comm;
	bool check_numerics, verbose, quiet, help, seed_set, decay_set, resume_fallback;
} Opts;

static const char usage[] =
	"usage: %s [options]\n"
	"  --steps N          train up to step N (the last step, counted from 1; default %lld)\n"
	"  --seed S           seed of initial values and synthetic data (default %lld)\n"
	"  --lr X             peak learning rate (default %g)\n"
	"  --lr-decay-steps N horizon of the cosine schedule (default: the model's steps)\n"
	"  --log FILE.jsonl   one JSON object per step: step, loss, grad_norm, lr,\n"
	"                     tokens_per_s, ms, compute_ms, comm_ms, compute_s, comm_s,\n"
	"                     idle_s, feed_ms (making the batch); with loss scaling also\n"
	"                     loss_scale, skipped, skipped_steps; eval lines: step,\n"
	"                     eval_loss\n"
	"  --log-errors MODE  fail (default): a failed log write stops the run;\n"
	"                     warn: one warning, then training goes on without the log\n"
	"  --save DIR         write checkpoints to DIR: the initial weights as step 0,\n"
	"                     every --save-every steps, and the last step\n"
	"  --save-every K     checkpoint every K steps (default 0: only step 0 and the end)\n"
	"  --resume DIR       continue from DIR's latest checkpoint\n"
	"  --resume-fallback  with --resume: when a file of that checkpoint is damaged\n"
	"                     (torn, a bad header, a checksum mismatch), on any rank,\n"
	"                     go on from the newest older complete DIR/step_N instead,\n"
	"                     saying what was skipped and why (and in the --log)\n"
	"  --data SRC         synthetic, or llm.c token files: a file, a quoted glob\n"
	"                     pattern ('dir/*_train_*.bin', sorted) or a comma-separated\n"
	"                     list, read in order as one stream (default %s)\n"
	"  --val-data SRC     llm.c token files as for --data: what --eval-every reads\n"
	"  --eval-every K     every K steps, log the loss of a held-out batch: the first\n"
	"                     batch of --val-data; synthetic data's own held-out samples;\n"
	"                     none for --data files without --val-data (a note says so)\n"
	"  --check-numerics   after every action, stop at the first NaN/Inf it wrote\n"
	"  --dump-batches DIR write each step's inputs to DIR/step_NNNNNN.safetensors\n"
	"  --profile-actions FILE  rank 0's kernels and GEMMs, each one's mean seconds\n"
	"                     over the steps after the first, one line per action\n"
	"                     (what `dtmc calibrate` fits its curves to; on --device\n"
	"                     cuda each timed by CUDA events on the GPU)\n"
	"  --calibrate-gemm FILE  instead of training, every rank times the runtime's\n"
	"                     GEMM over a grid of shapes at once (its threads, the\n"
	"                     others busy); rank 0 writes `gemm THREADS M N K = RATE`\n"
	"                     lines and the synthetic data feed's `feed_rate` and\n"
	"                     `feed_x_rate`\n"
	"                     (dtmc calibrate's GEMM curve; on --device cuda,\n"
	"                     cuBLAS's, f32 and bf16, after a `# device:` line)\n"
	"  --calibrate-comm FILE  instead of training, time each collective over all\n"
	"                     the ranks (on this backend, not NCCL: CPU only) at two\n"
	"                     sizes; rank 0 writes `coll KIND N = LATENCY, BW` lines\n"
	"  --threads N        CPU threads per rank for kernels and GEMM (default: the\n"
	"                     cores (%lld) shared out among this host's ranks); speed\n"
	"                     only: losses and weights are the same bits for every N\n"
	"  --backend B        local: the mesh's ranks are threads of this process\n"
	"                     (default); mpi: one process per rank, started as\n"
	"                     `mpirun -np RANKS ./NAME` (the default under a\n"
	"                     launcher: Open MPI, PMI or srun with several tasks)\n"
	"  --comm-timeout S   a rank waiting longer than S seconds for a peer stops\n"
	"                     with an error naming it (default 60)\n"
	"  --overlap MODE     on (default): each rank runs its communication on a\n"
	"                     thread of its own, overlapping compute; off: in line;\n"
	"                     nocopy: on, but a kernel about to overwrite a pending\n"
	"                     collective's input waits instead of the input being\n"
	"                     copied aside when the collective is queued\n"
	"  --comm-delay-us N  sleep N microseconds before each message (emulates a\n"
	"                     slow network; default 0)\n"
	"  --device D         cpu (default) or cuda: kernels compiled by NVRTC for the\n"
	"                     GPU found, cuBLAS, NCCL between ranks (a GPU per rank)\n"
	"  -v                 print the plan's arenas, threads and BLAS, and per rank\n"
	"                     an `alloc:` line of the bytes it allocated and, after\n"
	"                     training, a `comm:` line: its last step's\n"
	"                     collectives, sends and recvs per kind, with their bytes\n"
	"  -q                 no progress or summary lines\n"
	"  --help             this text\n";

/* Number in the whole of s, else an error naming the flag. */
static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t *out, char *err)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (!*s || *end || errno || v < lo) {
		snprintf(err, RT_ERR_LEN, "%s wants an integer >= %lld, got '%s'", flag,
			 (long long)lo, s);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_f64(const char *flag, const char *s, double *out, char *err)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(v) || v < 0) {
		snprintf(err, RT_ERR_LEN, "%s wants a non-negative number, got '%s'", flag, s);
		return -1;
	}
	*out = v;
	return 0;
}

static int64_t ncores(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? n : 1;
}

static int parse_args(Opts *o, const DtmPlan *p, int argc, char **argv, char *err)
{
	const DtmTrainCfg *t = &p->train;
	memset(o, 0, sizeof *o);
	o->steps = t->steps > 0 ? t->steps : 100;
	o->seed = t->seed;
	o->lr = t->lr;
	o->data = t->data ? t->data : "synthetic";
	o->threads = ncores();
	o->backend = "local";
	o->device = "cpu";
	o->comm_timeout = COMM_DEFAULT_TIMEOUT_S;
	o->overlap = o->overlap_copy = true;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		char flag[64];
		const char *val = NULL, *eq = strchr(a, '=');
		/* --flag=value and --flag value are both accepted */
		if (a[0] == '-' && a[1] == '-' && eq && eq - a < (long)sizeof flag) {
			memcpy(flag, a, (size_t)(eq - a));
			flag[eq - a] = 0;
			val = eq + 1;
		} else {
			snprintf(flag, sizeof flag, "%s", a);
		}
		bool boolean = !strcmp(flag, "--check-numerics") || !strcmp(flag, "-v") ||
			       !strcmp(flag, "-q") || !strcmp(flag, "--help") ||
			       !strcmp(flag, "-h") || !strcmp(flag, "--resume-fallback");
		if (boolean) {
			if (val) {
				snprintf(err, RT_ERR_LEN, "%s takes no value", flag);
				return -1;
			}
			if (!strcmp(flag, "--check-numerics"))
				o->check_numerics = true;
			else if (!strcmp(flag, "-v"))
				o->verbose = true;
			else if (!strcmp(flag, "-q"))
				o->quiet = true;
			else if (!strcmp(flag, "--resume-fallback"))
				o->resume_fallback = true;
			else
				o->help = true;
			continue;
		}
		static const char *const valued[] = {
			"--steps", "--seed", "--lr", "--log", "--save", "--save-every",
			"--resume", "--data", "--val-data", "--eval-every", "--threads",
			"--lr-decay-steps",
			"--dump-batches", "--backend", "--comm-timeout", "--device",
			"--overlap", "--comm-delay-us", "--log-errors", "--profile-actions",
			"--calibrate-gemm", "--calibrate-comm",
		};
		bool known = false;
		for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
			known |= !strcmp(flag, valued[k]);
		if (!known && a[0] != '-') {
			/* most likely an unquoted --data pattern the shell expanded */
			snprintf(err, RT_ERR_LEN, "unexpected argument '%s' (quote a --data or "
				 "--val-data pattern: the binary expands it)", a);
			return -1;
		}
		if (!known) {
			snprintf(err, RT_ERR_LEN, "unknown option '%s' (see --help)", a);
			return -1;
		}
		if (!val) {
			if (i + 1 >= argc) {
				snprintf(err, RT_ERR_LEN, "%s needs a value", flag);
				return -1;
			}
			val = argv[++i];
		}
		int rc = 0;
		if (!strcmp(flag, "--steps"))
			rc = parse_i64(flag, val, 0, &o->steps, err);
		else if (!strcmp(flag, "--seed"))
			rc = parse_i64(flag, val, 0, &o->seed, err), o->seed_set = true;
		else if (!strcmp(flag, "--lr"))
			rc = parse_f64(flag, val, &o->lr, err);
		else if (!strcmp(flag, "--save-every"))
			rc = parse_i64(flag, val, 0, &o->save_every, err);
		else if (!strcmp(flag, "--eval-every"))
			rc = parse_i64(flag, val, 0, &o->eval_every, err);
		else if (!strcmp(flag, "--threads"))
			rc = parse_i64(flag, val, 1, &o->threads, err), o->threads_set = true;
		else if (!strcmp(flag, "--comm-timeout")) {
			rc = parse_f64(flag, val, &o->comm_timeout, err);
			if (!rc && o->comm_timeout <= 0) {
				snprintf(err, RT_ERR_LEN, "--comm-timeout wants seconds > 0");
				rc = -1;
			}
		}
		else if (!strcmp(flag, "--comm-delay-us"))
			rc = parse_i64(flag, val, 0, &o->comm_delay_us, err);
		else if (!strcmp(flag, "--overlap")) {
			if (strcmp(val, "on") != 0 && strcmp(val, "off") != 0 &&
			    strcmp(val, "nocopy") != 0) {
				snprintf(err, RT_ERR_LEN, "--overlap wants on, off or nocopy, got '%s'",
					 val);
				rc = -1;
			}
			o->overlap = strcmp(val, "off") != 0;
			o->overlap_copy = !strcmp(val, "on");
			o->overlap_set = true;
		}
		else if (!strcmp(flag, "--log-errors")) {
			if (strcmp(val, "fail") != 0 && strcmp(val, "warn") != 0) {
				snprintf(err, RT_ERR_LEN, "--log-errors wants fail or warn, got '%s'",
					 val);
				rc = -1;
			}
			o->log_warn = !strcmp(val, "warn");
		}
		else if (!strcmp(flag, "--lr-decay-steps"))
			rc = parse_i64(flag, val, 1, &o->lr_decay_steps, err), o->decay_set = true;
		else if (!*val) {
			snprintf(err, RT_ERR_LEN, "%s needs a non-empty value", flag);
			rc = -1;
		} else if (!strcmp(flag, "--log"))
			o->log = val;
		else if (!strcmp(flag, "--save"))
			o->save = val;
		else if (!strcmp(flag, "--resume"))
			o->resume = val;
		else if (!strcmp(flag, "--data"))
			o->data = val;
		else if (!strcmp(flag, "--val-data"))
			o->val_data = val;
		else if (!strcmp(flag, "--dump-batches"))
			o->dump = val;
		else if (!strcmp(flag, "--profile-actions"))
			o->profile_actions = val;
		else if (!strcmp(flag, "--calibrate-gemm"))
			o->calibrate_gemm = val;
		else if (!strcmp(flag, "--calibrate-comm"))
			o->calibrate_comm = val;
		else if (!strcmp(flag, "--backend")) {
			if (strcmp(val, "local") != 0 && strcmp(val, "mpi") != 0) {
				snprintf(err, RT_ERR_LEN, "--backend wants local or mpi, got '%s'", val);
				rc = -1;
			}
			o->backend = val;
			o->backend_set = true;
		} else if (!strcmp(flag, "--device")) {
			if (strcmp(val, "cpu") != 0 && strcmp(val, "cuda") != 0) {
				snprintf(err, RT_ERR_LEN, "--device wants cpu or cuda, got '%s'", val);
				rc = -1;
			}
			o->device = val;
		}
		if (rc)
			return -1;
	}
	if (o->resume_fallback && !o->resume) {
		snprintf(err, RT_ERR_LEN, "--resume-fallback needs --resume DIR");
		return -1;
	}
	if (o->threads > 1024)
		o->threads = 1024;
	return 0;
}

/* The learning rate of 1-based step t, as PyTorch's LambdaLR would give
 * with this lambda (so an oracle can reproduce it exactly):
 *   constant: lr
 *   cosine:   lr * t / warmup                                  t <= warmup
 *             min_lr + 0.5 * (lr - min_lr)
 *                    * (1 + cos(pi * (t - warmup) / (H - warmup)))   after,
 * H the horizon (--lr-decay-steps, else the model's steps, else --steps);
 * past H the rate stays at min_lr.  Computed in double, rounded to f32
 * once. */
static float lr_at(const DtmTrainCfg *c, double lr, int64_t t, int64_t horizon)
{
	if (c->lr_schedule != DTM_LR_COSINE)
		return (float)lr;
	int64_t w = c->warmup;
	if (w > 0 && t <= w)
		return (float)(lr * (double)t / (double)w);
	if (horizon <= w || t >= horizon)
		return c->min_lr;
	double prog = (double)(t - w) / (double)(horizon - w);
	return (float)(c->min_lr + 0.5 * (lr - c->min_lr) * (1.0 + cos(3.14159265358979323846 * prog)));
}

static void print_plan(const DtmPlan *p, const RtRun *r, const Opts *o)
{
	static const char *names[DTM_ARENA_COUNT] = { "param", "opt", "grad", "act", "input" };
	int64_t total = 0;
	fprintf(stderr, "model %s: %d buffers, %d stages, %d actions in stage %d\n",
		p->model ? p->model : "?", p->nbuffers, p->nstages,
		p->stages[r->stage].nactions, r->stage);
	for (int a = 0; a < DTM_ARENA_COUNT; a++) {
		fprintf(stderr, "  arena %-5s planned %12lld bytes, allocated %12lld\n", names[a],
			(long long)p->arena_bytes[a], (long long)dtm_rt_allocated_bytes(a));
		total += dtm_rt_allocated_bytes(a);
	}
	fprintf(stderr, "  total %lld bytes; %d threads; BLAS %s; data %s\n", (long long)total,
		r->ctx.nthreads, rt_blas_name(), o->data);
	if (r->overlap && !r->dev) {
		int n = 0;
		int64_t b = r->overlap_copy ?
				    rt_overlap_staging_bytes(p, &p->stages[r->stage], &n) : 0;
		fprintf(stderr, "  overlap: a communication thread per rank; %d collectives or "
			"sends copy their input when queued (%lld bytes, outside the arenas)\n",
			n, (long long)b);
	}
}

/* -v, every rank: one machine-readable line of what it allocated on the
 * host (the tests compare it with `dtmc inspect --json`): per arena, and
 * the overlap thread's staging copies outside the arenas. */
static void print_alloc(const DtmPlan *p, const RtRun *r)
{
	int n = 0;
	int64_t staging = r->overlap && r->overlap_copy && !r->dev ?
				  rt_overlap_staging_bytes(p, &p->stages[0], &n) : 0;
	fprintf(stderr, "alloc: rank %lld stage %d param %lld opt %lld grad %lld act %lld input %lld "
		"staging %lld gemm %lld threads %d\n", (long long)r->rank, p->stage,
		(long long)r->arena_alloc[DTM_ARENA_PARAM],
		(long long)r->arena_alloc[DTM_ARENA_OPT], (long long)r->arena_alloc[DTM_ARENA_GRAD],
		(long long)r->arena_alloc[DTM_ARENA_ACT], (long long)r->arena_alloc[DTM_ARENA_INPUT],
		(long long)staging, (long long)rt_gemm_scratch_bytes(&r->gemm),
		r->pool ? rt_pool_threads(r->pool) : 0);
}

/* The token streams of --data and --val-data, opened and checked once per
 * process before anything is written (so a bad shard stops the run with
 * nothing half-done) and read by every rank; absent: synthetic data, no
 * --val-data. */
typedef struct Sources {
	DtmTokenShards train, val;
	bool have_train, have_val;
} Sources;

/* --resume-fallback's skips: rank 0 says each on stderr (even with -q:
 * the run goes on from older weights than asked for) and in the log; the
 * first log write that fails is kept for train() to report. */
typedef struct Skips {
	const RtRun *r;
	RtLog *log;
	int failed;
	char err[RT_ERR_LEN];
} Skips;

static void note_skip(void *ctx, const char *ckpt, const char *why)
{
	Skips *s = ctx;
	if (s->r->rank != 0)
		return;
	rt_log_note(s->log, "warning: --resume-fallback: skipping checkpoint %s: %s", ckpt, why);
	if (!s->failed && rt_log_event(s->log, "checkpoint_skipped", ckpt, -1, why, s->err))
		s->failed = 1;
}

/* Non-finite loss or a runtime error: the message in emsg and exit
 * status 1.  With several ranks every rank runs this loop on its own
 * shards; the loss it reads is the plan's loss buffer, which the compiler
 * all-reduces so every rank holds the same value (and so all stop at the
 * same step); only rank 0's log writes it. */
/* --profile-actions: per kernel or GEMM of the stage, tab-separated:
 * index, kind (kernel, gemm), kernel id, flops, mem_bytes, the bytes of
 * its arguments, m, n, k, batch, the dtype of its rate argument, mean
 * seconds per step, the kernel's name (its op; "fused"; "gemm"), label. */
static int write_profile(const char *path, const DtmPlan *p, const DtmStage *st,
			 const double *act_s, int64_t steps, char *err)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	if (!buf) {
		snprintf(err, RT_ERR_LEN, "out of memory for --profile-actions");
		return -1;
	}
	len += (size_t)snprintf(buf, cap, "# dtm action profile: %lld steps\n", (long long)steps);
	for (int i = 0; i < st->nactions; i++) {
		const DtmAction *a = &st->actions[i];
		if (a->kind != DTM_ACT_KERNEL && a->kind != DTM_ACT_GEMM)
			continue;
		double argb = 0;
		for (int j = 0; j < a->nargs; j++)
			argb += (double)p->buffers[a->args[j]].bytes;
		int rate = a->nargs < 1 ? -1 : a->kind == DTM_ACT_GEMM ? a->args[0] : a->args[a->nargs - 1];
		char line[1024];
		int w = snprintf(line, sizeof line,
				 "%d\t%s\t%d\t%lld\t%lld\t%.0f\t%lld\t%lld\t%lld\t%lld\t%d\t%.9g\t%s\t%s\n", i,
				 a->kind == DTM_ACT_GEMM ? "gemm" : "kernel", a->kernel,
				 (long long)a->flops, (long long)a->mem_bytes, argb, (long long)a->m,
				 (long long)a->n, (long long)a->k, (long long)a->batch,
				 rate >= 0 ? (int)p->buffers[rate].dtype : -1,
				 steps > 0 ? act_s[i] / (double)steps : 0.0,
				 a->kind == DTM_ACT_GEMM ? "gemm"
				 : p->kernel_names && a->kernel >= 0 && a->kernel < p->nkernels &&
						 p->kernel_names[a->kernel]
					 ? p->kernel_names[a->kernel]
					 : "?",
				 a->label ? a->label : "?");
		if (w < 0)
			continue;
		if ((size_t)w >= sizeof line)
			w = sizeof line - 1;
		if (len + (size_t)w + 1 > cap) {
			cap = 2 * cap + (size_t)w;
			char *nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				snprintf(err, RT_ERR_LEN, "out of memory for --profile-actions");
				return -1;
			}
			buf = nb;
		}
		memcpy(buf + len, line, (size_t)w);
		len += (size_t)w;
	}
	int rc = rt_write_file_atomic(path, buf, len, err, RT_ERR_LEN);
	free(buf);
	return rc;
}

/* -v, every rank, after training: the plan's communication actions it ran
 * in its last training step, per kind, and their bytes (comm_count_moved's
 * counts, on the CPU backends and NCCL alike; the tests compare them with
 * `dtmc inspect --json`'s comm list for the rank's stage). */
static void print_moved(const DtmPlan *p, const RtRun *r, int64_t moved[2][COMM_MOVED_KINDS])
{
	static const char *const names[COMM_MOVED_KINDS] = {
		[DTM_COLL_ALL_REDUCE] = "all_reduce", [DTM_COLL_ALL_GATHER] = "all_gather",
		[DTM_COLL_REDUCE_SCATTER] = "reduce_scatter", [DTM_COLL_ALL_TO_ALL] = "all_to_all",
		[DTM_COLL_BROADCAST] = "broadcast", [COMM_MOVED_SEND] = "send",
		[COMM_MOVED_RECV] = "recv",
	};
	char line[512];
	int k0 = snprintf(line, sizeof line, "comm: rank %lld stage %d", (long long)r->rank,
			  p->stage);
	for (int k = 0; k < COMM_MOVED_KINDS && k0 < (int)sizeof line; k++)
		k0 += snprintf(line + k0, sizeof line - (size_t)k0, " %s %lld %lld", names[k],
			       (long long)moved[0][k], (long long)moved[1][k]);
	fprintf(stderr, "%s\n", line);
}

static int train(const DtmPlan *p, Opts *o, const Sources *src, RtRun *r, RtLog *log, char *emsg)
{
	char err[RT_ERR_LEN];
	/* the last training step's communication (print_moved) */
	int64_t moved[2][COMM_MOVED_KINDS] = {{0}};
	int moved_steps = 0;
	RtCkptMeta meta = { .seed = (uint64_t)o->seed };
	const DtmTokenShards *tdata = src->have_train ? &src->train : NULL;
	const DtmTokenShards *vdata = src->have_val ? &src->val : NULL;
	/* what the data position of a checkpoint is a position in */
	char data_id[sizeof meta.data] = "synthetic";
	if (tdata)
		dtm_shards_describe(tdata, data_id, sizeof data_id);
	int64_t horizon = o->decay_set ? o->lr_decay_steps :
			  p->train.steps > 0 ? p->train.steps : o->steps;
	if (rt_run_init_values(r, (uint64_t)o->seed)) {
		rt_errf(emsg, "%s", r->err);
		return 1;
	}
	/* the loss scaler starts at init_scale, or where a checkpoint left it */
	rt_scaler_init(&meta.scaler, &p->train);
	/* a device gets the values below (initial or resumed) once */
	int64_t start = 0;
	if (o->resume) {
		char from[4096];
		Skips sk = { .r = r, .log = log };
		snprintf(from, sizeof from, "%s", o->resume);
		if (o->resume_fallback ?
			    rt_ckpt_load_fallback(r, o->resume, note_skip, &sk, &meta, from,
						  sizeof from, err) :
			    rt_ckpt_load(r, o->resume, &meta, err)) {
			rt_errf(emsg, "%s", err);
			return 1;
		}
		if (!sk.failed && o->resume_fallback && r->rank == 0 &&
		    rt_log_event(log, "resumed", from, meta.step, NULL, sk.err))
			sk.failed = 1;
		if (sk.failed) {
			rt_errf(emsg, "%s", sk.err);
			return 1;
		}
		if (r->rank == 0 && o->seed_set && (uint64_t)o->seed != meta.seed)
			rt_log_note(log, "warning: --seed %lld ignored: resuming with the "
				    "checkpoint's seed %" PRIu64, (long long)o->seed, meta.seed);
		/* step * batch samples into the same stream, or nowhere
		 * meaningful: refused rather than silently reading other data */
		if (meta.data[0] && strcmp(meta.data, data_id) != 0) {
			rt_errf(emsg, "--resume %s: its data position is in other data: saved "
				"training on %s, --data %s is %s (resume with the same files in "
				"the same order)", o->resume, meta.data, o->data, data_id);
			return 1;
		}
		o->seed = (int64_t)meta.seed;
		if (!o->decay_set && meta.lr_decay_steps > 0)
			horizon = meta.lr_decay_steps;
		start = meta.step;
		if ((!o->quiet || strcmp(from, o->resume)) && r->rank == 0)
			rt_log_note(log, "resumed from %s at step %lld", from, (long long)start);
	}
	if (rt_run_to_device(r)) {
		rt_errf(emsg, "%s", r->err);
		return 1;
	}
	meta.seed = (uint64_t)o->seed;
	meta.lr_decay_steps = horizon;
	snprintf(meta.data, sizeof meta.data, "%s", data_id);
	RtFeed feed;
	if (rt_feed_open(&feed, p, r->coords, tdata, vdata, (uint64_t)o->seed, err)) {
		rt_errf(emsg, "%s", err);
		return 1;
	}
	if (o->eval_every > 0 && !rt_feed_has_eval(&feed) && r->rank == 0)
		rt_log_note(log, "note: --eval-every %lld: no evaluation, --data's files hold no "
			    "held-out tokens (pass --val-data FILES, e.g. llm.c's *_val_*.bin)",
			    (long long)o->eval_every);
	if (o->save && !o->resume) {
		/* the initial weights as step 0: what an oracle starts from */
		meta.step = 0;
		if (rt_ckpt_save(r, o->save, &meta, err)) {
			rt_errf(emsg, "%s", err);
			rt_feed_close(&feed);
			return 1;
		}
	}
	int64_t tokens = p->train.tokens_per_step > 0 ? p->train.tokens_per_step :
			 feed.batch * (feed.T > 0 ? feed.T : 1);
	int status = 0;
	r->check_numerics = o->check_numerics;
	r->ctx.seed = (uint64_t)o->seed;
	/* a mixture of experts' load: the moe_slot kernels add theirs, summed
	 * over the ranks after each step (the CPU kernels keep it; on a
	 * device, not logged) */
	int64_t nmoe = p->moe_sites > 0 && !r->dev ? 2 * (int64_t)p->moe_sites * p->moe_experts : 0;
	float *moe = nmoe ? calloc((size_t)(2 * nmoe), sizeof *moe) : NULL;
	if (nmoe && !moe) {
		rt_errf(emsg, "out of memory for the routing statistics");
		rt_feed_close(&feed);
		return 1;
	}
	r->ctx.moe_stats = moe;
	r->ctx.moe_experts = p->moe_experts;
	bool profile = o->profile_actions && r->rank == 0;
	const DtmStage *pst = &p->stages[r->stage];
	double *act_s = profile ? calloc((size_t)pst->nactions + 1, sizeof *act_s) : NULL;
	int64_t act_steps = 0;
	if (profile && !act_s) {
		rt_errf(emsg, "out of memory for --profile-actions");
		free(moe);
		rt_feed_close(&feed);
		return 1;
	}
	for (int64_t t = start + 1; t <= o->steps && !status; t++) {
		double t0 = rt_now();
		/* the first step faults pages in: not profiled */
		r->act_s = t > start + 1 ? act_s : NULL;
		act_steps += r->act_s != NULL;
		r->ctx.step = t;
		r->ctx.lr = lr_at(&p->train, o->lr, t, horizon);
		RtScaler *sc = &meta.scaler;
		r->ctx.loss_scale = sc->on ? sc->scale : 0.0f;
		r->ctx.skipped = sc->skipped;
		double loss = NAN, gn = NAN;
		if (rt_feed_fill(&feed, r->ptr, (uint64_t)(t - 1) * (uint64_t)feed.batch, err)) {
			rt_errf(emsg, "%s", err);
			status = 1;
			break;
		}
		double feed_s = rt_now() - t0;
		if (o->dump && rt_feed_dump(&feed, r->ptr, o->dump, t, err)) {
			rt_errf(emsg, "%s", err);
			status = 1;
			break;
		}
		if (moe)
			memset(moe, 0, (size_t)nmoe * sizeof *moe);
		if (r->comm) {
			r->comm->a2a_bytes = 0;
			for (int k = 0; k < COMM_MOVED_KINDS; k++) {
				atomic_store(&r->comm->moved_count[k], 0);
				atomic_store(&r->comm->moved_bytes[k], 0);
			}
		}
		if (rt_run_actions(r, false) || rt_read_scalar(r, p->loss, &loss) ||
		    (p->grad_norm >= 0 && rt_read_scalar(r, p->grad_norm, &gn))) {
			rt_errf(emsg, "%s", r->err);
			status = 1;
			break;
		}
		for (int k = 0; r->comm && k < COMM_MOVED_KINDS; k++) {
			moved[0][k] = atomic_load(&r->comm->moved_count[k]);
			moved[1][k] = atomic_load(&r->comm->moved_bytes[k]);
		}
		moved_steps++;
		int64_t a2a = r->comm ? r->comm->a2a_bytes : -1;
		if (moe && r->comm &&
		    comm_all_reduce(r->comm, (1u << p->mesh_naxes) - 1, moe, moe + nmoe, nmoe, DTM_F32,
				    DTM_RED_SUM)) {
			rt_errf(emsg, "%s", comm_error(r->comm));
			status = 1;
			break;
		}
		if (moe && !r->comm)
			memcpy(moe + nmoe, moe, (size_t)nmoe * sizeof *moe);
		/* every rank reads the same global norm, so all skip alike */
		bool skipped = p->grad_norm >= 0 && rt_scaler_update(sc, &p->train, gn);
		double dt = rt_now() - t0;
		RtLogStep ls = {
			.step = t, .steps = o->steps, .loss = loss, .grad_norm = gn,
			.has_grad_norm = p->grad_norm >= 0, .lr = r->ctx.lr,
			.tokens_per_s = dt > 0 ? (double)tokens / dt : 0, .ms = dt * 1e3,
			.compute_ms = r->compute_s * 1e3, .comm_ms = r->comm_s * 1e3,
			.compute_s = r->compute_s, .comm_s = r->comm_s, .idle_s = r->idle_s,
			.feed_ms = feed_s * 1e3,
			.has_loss_scale = sc->on, .skipped = skipped,
			.loss_scale = r->ctx.loss_scale, .skipped_steps = sc->skipped,
			.moe_load = moe ? moe + nmoe : NULL, .moe_sites = p->moe_sites,
			.moe_experts = p->moe_experts, .a2a_bytes = a2a,
		};
		if (rt_log_step(log, &ls, err)) {
			rt_errf(emsg, "%s", err);
			status = 1;
			break;
		}
		if (!isfinite(loss)) {
			rt_errf(emsg, "loss is %s at step %lld%s", isnan(loss) ? "NaN" : "Inf",
				     (long long)t,
				     o->check_numerics ? "" : " (--check-numerics finds the first "
							      "op that made it)");
			status = 1;
			break;
		}
		if (o->eval_every > 0 && t % o->eval_every == 0 && rt_feed_has_eval(&feed)) {
			double el = NAN;
			if (rt_feed_fill_eval(&feed, r->ptr, err)) {
				rt_errf(emsg, "%s", err);
				status = 1;
				break;
			}
			if (rt_run_actions(r, true) || rt_read_scalar(r, p->loss, &el)) {
				rt_errf(emsg, "%s", r->err);
				status = 1;
				break;
			}
			if (rt_log_eval(log, t, el, err)) {
				rt_errf(emsg, "%s", err);
				status = 1;
				break;
			}
		}
		if (o->save && ((o->save_every > 0 && t % o->save_every == 0) || t == o->steps)) {
			meta.step = t;
			if (rt_run_to_host(r)) {
				rt_errf(emsg, "%s", r->err);
				status = 1;
				break;
			}
			if (rt_ckpt_save(r, o->save, &meta, err)) {
				rt_errf(emsg, "%s", err);
				status = 1;
				break;
			}
		}
	}
	r->act_s = NULL;
	if (!status && o->verbose && r->comm && moved_steps > 0)
		print_moved(p, r, moved);
	if (!status && profile && write_profile(o->profile_actions, p, pst, act_s, act_steps, err)) {
		rt_errf(emsg, "%s", err);
		status = 1;
	}
	free(act_s);
	free(moe);
	r->ctx.moe_stats = NULL;
	rt_feed_close(&feed);
	return status;
}

/* The regression feed's two parts (runtime/feed.c), apart, as every rank
 * makes them at once before a step: a sample's x (256 normals), and x
 * with its target's 256 x 256 product (less the x: the product's rate),
 * each in chunks of 16 samples for about 50 ms, the median chunk (a slow
 * spell of a shared VM moves the mean).  Into line: the profile's
 * feed_rate and feed_x_rate. */
static void time_feed(char *line, size_t cap)
{
	enum { CHUNK = 16, MAXCH = 256 };
	DtmRegression reg;
	char e[256];
	if (dtm_regression_init(&reg, 1, 256, 256, e, sizeof e) != 0)
		return;
	float xs[256], ys[256];
	double tc[MAXCH], med[2];
	uint64_t sample = 0;
	for (int part = 0; part < 2; part++) {
		int n = 0;
		double t0 = rt_now();
		do {
			double t1 = rt_now();
			for (int i = 0; i < CHUNK; i++) {
				/* as feed.c makes a row of y: its x, then the
				 * product (part 1 less part 0 is the product's) */
				dtm_regression_input(&reg, sample++, xs);
				if (part == 1)
					dtm_regression_target(&reg, xs, ys);
			}
			tc[n++] = rt_now() - t1;
		} while (n < MAXCH && (n < 5 || rt_now() - t0 < 0.05));
		med[part] = rt_median(tc, n);
	}
	snprintf(line, cap, "feed_rate = %.6g\nfeed_x_rate = %.6g\n",
	         256.0 * 256.0 * CHUNK / fmax(med[1] - med[0], 1e-3 * med[1]),
	         256.0 * CHUNK / med[0]);
	dtm_regression_free(&reg);
}

/* --calibrate-gemm: the GEMM grid (rt_calibrate_gemm; on a device run
 * rt_cuda_calibrate_gemm, cuBLAS), and on every rank the synthetic
 * regression feed's rates (runtime/data.c, 256 x 256 samples: `feed_rate`
 * the targets' multiply-adds a second, `feed_x_rate` the x elements a
 * second: the host makes them for a device too); rank 0 writes them to
 * path. */
static int calibrate_gemm(RtRun *run, bool cuda, const char *path, char *err)
{
	char *text = NULL;
	size_t len = 0;
	if (cuda ? rt_cuda_calibrate_gemm(run, path ? &text : NULL, &len, err)
		 : rt_calibrate_gemm(run->pool, path ? &text : NULL, &len, err))
		return 1;
	char line[128] = "";
	time_feed(line, sizeof line); /* every rank, as in training */
	if (!path)
		return 0;
	char *all = malloc(len + strlen(line) + 1);
	int rc = 1;
	if (!all)
		snprintf(err, RT_ERR_LEN, "out of memory for --calibrate-gemm");
	else {
		memcpy(all, text, len);
		memcpy(all + len, line, strlen(line) + 1);
		rc = rt_write_file_atomic(path, all, len + strlen(line), err, RT_ERR_LEN) ? 1 : 0;
	}
	free(all);
	free(text);
	return rc;
}

/* --calibrate-comm: comm_calibrate over every rank; rank 0 writes path. */
static int calibrate_comm(Comm *c, const char *path, char *err)
{
	if (!c) {
		snprintf(err, RT_ERR_LEN, "--calibrate-comm needs more than one rank");
		return 1;
	}
	char text[4096];
	if (comm_calibrate(c, path ? text : NULL, sizeof text)) {
		snprintf(err, RT_ERR_LEN, "--calibrate-comm: %s", comm_error(c));
		return 1;
	}
	return path && rt_write_file_atomic(path, text, strlen(text), err, RT_ERR_LEN) ? 1 : 0;
}

/* One rank's whole run: its log (a file and progress only on rank 0),
 * arenas, initial values, data shard and training loop. */
typedef struct RankJob {
	const DtmPlan *plan;
	Opts o;                 /* a copy: train() adopts a resumed seed */
	const Sources *src;     /* shared by the ranks, read only */
	int rank, nthreads;
	Comm *comm;             /* NULL for a one-rank run */
	CommLocalWorld *world;  /* the local backend's, else NULL */
	struct LocalWatch *watch; /* local: the main thread reports the errors */
	int status;
	bool peer_failed;       /* stopped by another rank's failure */
	bool finished;          /* local: the thread is done (under watch->mu) */
	char err[RT_ERR_LEN];
} RankJob;

static int run_rank(RankJob *j)
{
	/* a pipelined plan: this rank runs its stage's program */
	DtmPlan view;
	rt_plan_stage_view(j->plan, rt_plan_stage(j->plan, j->rank), &view);
	const DtmPlan *plan = &view;
	bool lead = j->rank == 0;
	int64_t world = rt_world_size(plan);
	RtLog log;
	if (rt_log_open(&log, lead ? j->o.log : NULL, lead ? j->o.quiet : true, j->err)) {
		if (!j->watch)
			rt_log_line("error: ", "%s", j->err);
		return 1;
	}
	log.warn_only = j->o.log_warn;
	RtRun run;
	int status = 0;
	bool cuda = !strcmp(j->o.device, "cuda");
	/* on a device, host memory only for what crosses over */
	if (rt_run_init_ex(&run, plan, j->rank, j->nthreads, cuda ? 0 : RT_HOST_ALL)) {
		snprintf(j->err, sizeof j->err, "%s", run.err);
		status = 1;
	} else {
		run.comm = j->comm;
		run.comm_delay_us = j->o.comm_delay_us;
		/* the communication thread calls the backend: it must allow a
		 * thread other than the one that opened it (mpi: at least
		 * MPI_THREAD_SERIALIZED) */
		run.overlap = j->o.overlap && j->comm && j->comm->any_thread;
		run.overlap_copy = j->o.overlap_copy;
		if (j->o.overlap && j->o.overlap_set && j->comm && !j->comm->any_thread && lead)
			rt_log_note(&log, "warning: --overlap on: the %s backend cannot be called "
				    "from a second thread here; communication runs in line",
				    j->comm->ops->name);
		RtCudaOpts co = { .local_backend = !strcmp(j->o.backend, "local"),
				  .verbose = j->o.verbose && lead };
		if (cuda && rt_cuda_attach(&run, &co, j->err))
			status = 1;
		else if (j->o.verbose && lead)
			print_plan(plan, &run, &j->o);
		if (!status && j->o.verbose)
			print_alloc(plan, &run);
		if (!status && j->o.calibrate_gemm)
			status = calibrate_gemm(&run, cuda, lead ? j->o.calibrate_gemm : NULL,
						j->err);
		else if (!status && j->o.calibrate_comm)
			status = calibrate_comm(j->comm, lead ? j->o.calibrate_comm : NULL, j->err);
		else if (!status)
			status = train(plan, &j->o, j->src, &run, &log, j->err);
		rt_run_free(&run);
	}
	/* the log's last writes are checked too (fsync, fclose) */
	if (!status && rt_log_close(&log, j->err))
		status = 1;
	/* Each rank prints its own failure (the local backend's main thread
	 * prints them all, once per message: report_local); a rank stopped by
	 * another's failure stays quiet, since that rank says why. */
	j->peer_failed = j->comm && j->comm->peer_failed;
	if (status && !j->watch && world == 1)
		rt_log_error(&log, "%s", j->err);
	else if (status && !j->watch && !j->peer_failed)
		rt_log_error(&log, "rank %d: %s", j->rank, j->err);
	char e[RT_ERR_LEN];
	rt_log_close(&log, e);
	return status;
}

/* ---- the local backend: every rank a thread of this process ----
 *
 * The watchdog.  A rank stuck outside communication (in a kernel, in I/O)
 * cannot be interrupted, and its thread cannot be joined: the ranks
 * waiting for it report a timeout naming it and stop, and the process
 * used to wait for that thread forever.  So the main thread waits for the
 * rank threads only until a grace period after the first rank ended with
 * an error -- --comm-timeout, at most LOCAL_GRACE_S: enough for every
 * rank in communication to see the failure (within 0.1 s) and for one in
 * a kernel to reach its next communication -- then reports the errors and
 * the ranks that never finished and ends the process with status 1.  It
 * does so with _exit: the stuck threads may hold any lock, and nothing of
 * theirs may be freed or flushed under them (rank 0's log is flushed line
 * by line).  This is the one place the runtime ends the process itself. */
#define LOCAL_GRACE_S 5.0

typedef struct LocalWatch {
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* a rank finished */
	int finished;
	double first_failure;   /* rt_now() when the first rank failed; 0: none */
} LocalWatch;

static void *rank_thread(void *arg)
{
	RankJob *j = arg;
	char e[COMM_ERR_LEN];
	if (comm_local_open(&j->comm, j->world, j->rank, e)) {
		snprintf(j->err, sizeof j->err, "%s", e);
		j->status = 1;
	} else {
		j->status = run_rank(j);
		/* tell the peers, so none waits for this rank to the timeout */
		if (j->status && !j->comm->peer_failed)
			comm_fail(j->comm, j->err);
		comm_close(j->comm);
		j->comm = NULL;
	}
	comm_local_exit(j->world, j->rank);
	LocalWatch *w = j->watch;
	pthread_mutex_lock(&w->mu);
	j->finished = true;
	w->finished++;
	if (j->status && w->first_failure == 0)
		w->first_failure = rt_now();
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* The errors of the finished ranks (under watch->mu, or after the joins),
 * each message once with the ranks that said it, in rank order:
 * "error: ranks 0-3: checkpoint ... missing".  The ranks stopped by
 * another's failure are quiet, unless no rank said anything else. */
static void report_local(const RankJob *jobs, int n)
{
	int *ranks = malloc((size_t)n * sizeof *ranks);
	bool *done = calloc((size_t)n, sizeof *done);
	bool any = false;
	for (int pass = 0; pass < 2 && !any; pass++) {
		for (int r = 0; r < n; r++) {
			const RankJob *j = &jobs[r];
			if (!j->finished || !j->status || (j->peer_failed && pass == 0) ||
			    (done && done[r]))
				continue;
			char who[160];
			int k = 0;
			for (int q = r; q < n && ranks && done; q++) {
				const RankJob *jq = &jobs[q];
				if (!done[q] && jq->finished && jq->status &&
				    jq->peer_failed == j->peer_failed && !strcmp(jq->err, j->err))
					ranks[k++] = q, done[q] = true;
			}
			if (k == 0) /* out of memory: one line per rank */
				snprintf(who, sizeof who, "rank %d", r);
			else
				rt_ranks_name(ranks, k, who, (int)sizeof who);
			rt_log_line("error: ", "%s: %s", who, j->err);
			any = true;
		}
	}
	free(ranks);
	free(done);
}

/* Every rank of the mesh as a thread of this process. */
static int run_local(const DtmPlan *plan, const Opts *o, const Sources *src)
{
	int n = (int)rt_world_size(plan);
	char err[COMM_ERR_LEN];
	CommMesh mesh;
	comm_mesh_from_plan(&mesh, plan);
	CommLocalWorld *w = comm_local_world_new(&mesh, o->comm_timeout, err);
	RankJob *jobs = calloc((size_t)n, sizeof *jobs);
	pthread_t *th = calloc((size_t)n, sizeof *th);
	if (!w || !jobs || !th) {
		fprintf(stderr, "error: %s\n", w ? "out of memory" : err);
		comm_local_world_free(w);
		free(jobs);
		free(th);
		return 1;
	}
	LocalWatch watch = { .finished = 0 };
	pthread_mutex_init(&watch.mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* rt_now's clock */
	pthread_cond_init(&watch.cv, &ca);
	pthread_condattr_destroy(&ca);
	int per = o->threads_set ? (int)o->threads : (int)(o->threads / n);
	int status = 0, started = 0;
	for (int r = 0; r < n; r++) {
		jobs[r] = (RankJob){ .plan = plan, .o = *o, .src = src, .rank = r, .world = w,
				     .watch = &watch, .nthreads = per > 0 ? per : 1 };
		if (pthread_create(&th[r], NULL, rank_thread, &jobs[r]) != 0) {
			rt_log_line("error: ", "cannot start the thread of rank %d", r);
			/* the started ranks fail at their first collective with
			 * rank r named, instead of waiting for it */
			comm_local_exit(w, r);
			for (int k = r + 1; k < n; k++)
				comm_local_exit(w, k);
			status = 1;
			break;
		}
		started++;
	}
	double grace = o->comm_timeout < LOCAL_GRACE_S ? o->comm_timeout : LOCAL_GRACE_S;
	pthread_mutex_lock(&watch.mu);
	while (watch.finished < started) {
		if (watch.first_failure == 0) {
			pthread_cond_wait(&watch.cv, &watch.mu);
			continue;
		}
		double until = watch.first_failure + grace;
		if (rt_now() >= until)
			break;
		struct timespec ts = { (time_t)until,
				       (long)((until - (double)(time_t)until) * 1e9) };
		pthread_cond_timedwait(&watch.cv, &watch.mu, &ts);
	}
	if (watch.finished < started) {
		/* the watchdog: report and end the process (see above) */
		report_local(jobs, started);
		int *stuck = malloc((size_t)started * sizeof *stuck), ns = 0;
		char who[256] = "some ranks";
		for (int r = 0; r < started && stuck; r++)
			if (!jobs[r].finished)
				stuck[ns++] = r;
		if (stuck)
			rt_ranks_name(stuck, ns, who, (int)sizeof who);
		rt_log_line("error: ", "%s did not finish within %g s of the first failure: "
			    "stuck outside communication (in a kernel or I/O?); ending the process",
			    who, grace);
		if (ftrylockfile(stdout) == 0) {
			fflush_unlocked(stdout);
			funlockfile(stdout);
		}
		_exit(1);
	}
	pthread_mutex_unlock(&watch.mu);
	for (int r = 0; r < started; r++) {
		pthread_join(th[r], NULL);
		status |= jobs[r].status;
	}
	report_local(jobs, started);
	pthread_mutex_destroy(&watch.mu);
	pthread_cond_destroy(&watch.cv);
	comm_local_world_free(w);
	free(jobs);
	free(th);
	return status ? 1 : 0;
}

/* The number of processes the launcher that started this one started, with
 * the variable that says so, or 0 outside a launcher: Open MPI's mpirun,
 * a PMI launcher (MPICH's hydra) and Slurm's srun each export one. */
static long launcher_size(const char **var)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
					    "SLURM_STEP_NUM_TASKS" };
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
		const char *v = getenv(vars[i]);
		char *end;
		long n = v && *v ? strtol(v, &end, 10) : 0;
		if (v && *v && !*end && n > 0) {
			*var = vars[i];
			return n;
		}
	}
	return 0;
}

/* This process is one rank of an MPI job. */
static int run_mpi(const DtmPlan *plan, const Opts *o, const Sources *src)
{
	char err[COMM_ERR_LEN];
	if (!comm_mpi_open || !comm_mpi_finalize) {
		fprintf(stderr, "error: --backend mpi: this binary was built without the mpi "
				"backend (link the dtm_comm_mpi library and MPI)\n");
		return 1;
	}
	CommMesh mesh;
	comm_mesh_from_plan(&mesh, plan);
	Comm *c = NULL;
	if (comm_mpi_open(&c, &mesh, o->comm_timeout, err)) {
		fprintf(stderr, "error: --backend mpi: %s\n", err);
		comm_mpi_finalize(true);
		return 1;
	}
	/* ranks sharing this host share its cores */
	const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
	int local = ls ? atoi(ls) : 1;
	int per = o->threads_set ? (int)o->threads : (int)(o->threads / (local > 0 ? local : 1));
	RankJob j = { .plan = plan, .o = *o, .src = src, .rank = c->rank, .comm = c,
		      .nthreads = per > 0 ? per : 1 };
	int status = run_rank(&j);
	if (status && !c->peer_failed)
		comm_fail(c, j.err);
	comm_close(c);
	comm_mpi_finalize(status != 0);
	return status;
}

/* --device cuda: a GPU is there (and, with the local backend, one per
 * rank) and the plan has CUDA kernels; else the reason on stderr.  The
 * CPU stays the default, so this runs only when asked for. */
static int cuda_usable(const DtmPlan *plan, const Opts *o)
{
	char err[RT_ERR_LEN];
	int ndev = 0, world = (int)rt_world_size(plan);
	if (o->calibrate_comm) {
		fprintf(stderr, "error: --calibrate-comm times the %s backend between host "
				"threads or processes, not NCCL: run it without --device cuda\n",
			o->backend);
		return -1;
	}
	if (!rt_cuda_probe || !rt_cuda_attach || !rt_cuda_calibrate_gemm) {
		fprintf(stderr, "error: --device cuda: this binary was built without CUDA (build "
				"dtm where CMake finds the CUDA toolkit)\n");
		return -1;
	}
	if (rt_cuda_probe(&ndev, err) ||
	    (!strcmp(o->backend, "local") && rt_cuda_pick_device(ndev, true, 0, world, -1, err) < 0)) {
		fprintf(stderr, "error: --device cuda: %s\n", err);
		return -1;
	}
	if (!plan->cuda_source || !plan->cuda_kernels) {
		fprintf(stderr, "error: --device cuda: this binary's plan has no CUDA kernels "
				"(build it with `dtmc build --cuda`)\n");
		return -1;
	}
	return 0;
}

static void close_sources(Sources *s)
{
	if (s->have_train)
		dtm_shards_close(&s->train);
	if (s->have_val)
		dtm_shards_close(&s->val);
	memset(s, 0, sizeof *s);
}

/* Opens --data's and --val-data's files, each checked (header, size, every
 * token < vocab); on an error a line naming the file on stderr and -1,
 * nothing left open. */
static int open_sources(const DtmPlan *plan, const Opts *o, Sources *s)
{
	char e[RT_ERR_LEN];
	memset(s, 0, sizeof *s);
	bool tokens = plan->train.data_kind == DTM_DATA_TOKENS;
	bool synthetic = !strcmp(o->data, "synthetic");
	if (!tokens && (!synthetic || o->val_data)) {
		fprintf(stderr, "error: %s %s: this model trains on synthetic regression data "
				"only\n", synthetic ? "--val-data" : "--data",
			synthetic ? o->val_data : o->data);
		return -1;
	}
	if (o->val_data && !strcmp(o->val_data, "synthetic")) {
		fprintf(stderr, "error: --val-data wants llm.c token files (with synthetic "
				"--data, --eval-every already reads held-out samples)\n");
		return -1;
	}
	int vocab = (int)plan->train.vocab;
	/* tokens per sample, to refuse a stream too short for one sample
	 * now rather than at the first batch */
	int64_t T = 0;
	if (plan->ninputs > 0) {
		const DtmBuffer *in = &plan->buffers[plan->inputs[0]];
		T = in->rank > 0 && in->global_shape[0] > 0 ?
			    rt_global_numel(in) / in->global_shape[0] : 0;
	}
	const char *flag[2] = { "--data", "--val-data" }, *spec[2] = { o->data, o->val_data };
	DtmTokenShards *sh[2] = { &s->train, &s->val };
	bool *have[2] = { &s->have_train, &s->have_val };
	for (int k = 0; k < 2; k++) {
		if (!tokens || !spec[k] || (k == 0 && synthetic))
			continue;
		int rc = dtm_shards_open(sh[k], spec[k], vocab, e, sizeof e);
		int32_t *row = malloc((size_t)(T + 1) * sizeof *row);
		if (!rc && !row) {
			snprintf(e, sizeof e, "out of memory");
			rc = -1;
		}
		if (!rc && T > 0 && dtm_shards_sample(sh[k], 0, (int)T, vocab, row, e, sizeof e))
			rc = -1;
		free(row);
		if (rc) {
			dtm_shards_close(sh[k]); /* a no-op after a failed open */
			/* the file named once when it is the whole spec */
			size_t n = strlen(spec[k]);
			bool named = !strncmp(e, spec[k], n) && e[n] == ':';
			fprintf(stderr, "error: %s %s%s%s\n", flag[k], named ? "" : spec[k],
				named ? "" : ": ", e);
			close_sources(s);
			return -1;
		}
		*have[k] = true;
	}
	return 0;
}

static int run_all(const DtmPlan *plan, const Opts *o, const Sources *src)
{
	int64_t world = rt_world_size(plan);
	if (!strcmp(o->backend, "mpi"))
		return run_mpi(plan, o, src);
	if (world > 1)
		return run_local(plan, o, src);
	RankJob j = { .plan = plan, .o = *o, .src = src, .rank = 0, .nthreads = (int)o->threads };
	return run_rank(&j);
}

int dtm_main(const DtmPlan *plan, int argc, char **argv)
{
	const char *prog = argc > 0 && argv[0] ? argv[0] : "dtm";
	char err[RT_ERR_LEN] = "";
	Opts o;
	if (parse_args(&o, plan, argc, argv, err)) {
		fprintf(stderr, "error: %s\n", err);
		return 1;
	}
	if (o.help) {
		printf(usage, prog, (long long)o.steps, (long long)o.seed, o.lr, o.data,
		       (long long)ncores());
		return 0;
	}
	int64_t world = rt_world_size(plan);
	if (o.dump && world != 1) {
		fprintf(stderr, "error: --dump-batches needs a one-rank plan (this mesh has %lld)\n",
			(long long)world);
		return 1;
	}
	if (world > 4096) {
		fprintf(stderr, "error: a mesh of %lld ranks is more than the runtime handles\n",
			(long long)world);
		return 1;
	}
	/* Under a launcher of several processes each process is one rank:
	 * running the whole mesh as threads in every one would train N copies */
	const char *lvar = NULL;
	long lsize = launcher_size(&lvar);
	if (!o.backend_set && lsize > 1) {
		if (!comm_mpi_open) {
			fprintf(stderr, "error: started by a launcher of %ld processes (%s), but this "
					"binary was built without the mpi backend: rebuild dtm where "
					"CMake finds Open MPI, or run one process with --backend local\n",
				lsize, lvar);
			return 1;
		}
		o.backend = "mpi";
	}
	if (!strcmp(o.device, "cuda") && cuda_usable(plan, &o))
		return 1;
	Sources src;
	if (open_sources(plan, &o, &src))
		return 1;
	int status = run_all(plan, &o, &src);
	close_sources(&src);
	return status;
}
