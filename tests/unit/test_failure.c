/* test_failure.c - ranks that fail or hang under the local (thread)
 * backend, run through dtm_main as a generated binary would (issue 13):
 *
 *   stress    a thousand runs of a dp=2 x tp=2 plan (all_reduce,
 *             reduce_scatter and all_gather over tp, dp and both, on
 *             buffers big enough that peers are still reading each other's
 *             memory when a failure arrives), each with one or two ranks
 *             failing at a random action, --overlap on, nocopy or off:
 *             every run ends with exit status 1 and the injected message,
 *             and (under the sanitizer build) no rank touches a peer's
 *             freed memory
 *   hang      rank 1 stuck in a kernel (a hook that never returns): the
 *             process must end with status 1 within --comm-timeout plus a
 *             few seconds, naming rank 1 (in a child process, since the
 *             watchdog ends the process)
 *   messages  every rank fails with the same message: one line naming the
 *             ranks; two messages: one line each; no line broken up
 *
 *   test_failure                 all of it
 *   test_failure --stress N      N stress runs (default 1000) and nothing else
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "testlib.h"
#include "runtime/rt.h"

/* ---- the plan: dp=2 x tp=2, a few big collectives per step ---- */

#define BIG (64 * 1024) /* f32 elements: 256 KB per buffer */
#define NR 4

enum { B_X, B_Y, B_G1, B_G2, B_G3, B_G4, B_LOSS, NBUF };

static void k_fill(const DtmCtx *ctx, void *const *a)
{
	float *g = a[0];
	for (int i = 0; i < BIG; i++)
		g[i] = (float)(ctx->rank + 1);
}

/* loss = g1[0] / 10: the all_reduces over tp then dp sum 1 + 2 + 3 + 4 */
static void k_loss(const DtmCtx *ctx, void *const *a)
{
	const float *g1 = a[0], *g4 = a[1];
	*(float *)a[2] = g1[0] / 10.0f + 0.0f * g4[0];
}

static const DtmKernelFn kernels[] = { k_fill, k_loss };
static const char *const kernel_names[] = { "fill", "loss" };

#define BUF(nm, role_, r, s0, s1, ar, off, by)                                            \
	{ .name = nm, .role = role_, .dtype = DTM_F32, .rank = r, .shape = { s0, s1 },    \
	  .global_shape = { s0, s1 }, .arena = ar, .offset = off, .bytes = by }

static const DtmBuffer buffers[NBUF] = {
	[B_X] = BUF("x", DTM_ROLE_INPUT, 2, 8, 4, DTM_ARENA_INPUT, 0, 128),
	[B_Y] = BUF("y", DTM_ROLE_INPUT, 2, 8, 2, DTM_ARENA_INPUT, 128, 64),
	[B_G1] = BUF("g1", DTM_ROLE_ACT, 1, BIG, 0, DTM_ARENA_ACT, 0, 4 * BIG),
	[B_G2] = BUF("g2", DTM_ROLE_ACT, 1, BIG, 0, DTM_ARENA_ACT, 4 * BIG, 4 * BIG),
	[B_G3] = BUF("g3", DTM_ROLE_ACT, 1, BIG / NR, 0, DTM_ARENA_ACT, 8 * BIG, BIG),
	[B_G4] = BUF("g4", DTM_ROLE_ACT, 1, BIG, 0, DTM_ARENA_ACT, 9 * BIG, 4 * BIG),
	[B_LOSS] = BUF("loss", DTM_ROLE_LOSS, 0, 0, 0, DTM_ARENA_ACT, 13 * BIG, 4),
};

#define COLL(lbl, c, in, out, ax)                                                         \
	{ .kind = DTM_ACT_COLL, .label = lbl, .nargs = 2, .args = { in, out }, .coll = c,  \
	  .red = DTM_RED_SUM, .axes = ax, .stream = 1 }
#define FILL(lbl, b) { .kind = DTM_ACT_KERNEL, .label = lbl, .nargs = 1, .args = { b } }

/* axes: bit 0 = dp, bit 1 = tp */
static const DtmAction actions[] = {
	FILL("fill g1", B_G1),
	COLL("all_reduce g1 tp", DTM_COLL_ALL_REDUCE, B_G1, B_G1, 2),
	FILL("fill g2", B_G2),
	COLL("all_reduce g2 dp", DTM_COLL_ALL_REDUCE, B_G2, B_G2, 1),
	COLL("all_reduce g1 dp", DTM_COLL_ALL_REDUCE, B_G1, B_G1, 1),
	COLL("all_reduce g2 tp", DTM_COLL_ALL_REDUCE, B_G2, B_G2, 2),
	COLL("reduce_scatter g2", DTM_COLL_REDUCE_SCATTER, B_G2, B_G3, 3),
	COLL("all_gather g3", DTM_COLL_ALL_GATHER, B_G3, B_G4, 3),
	{ .kind = DTM_ACT_KERNEL, .label = "loss", .nargs = 3, .args = { B_G1, B_G4, B_LOSS },
	  .kernel = 1 },
};
#define NACT ((int)(sizeof actions / sizeof actions[0]))
#define STEPS 2

static const DtmStage stage = { .nactions = NACT, .actions = actions };

static DtmPlan make_plan(void)
{
	DtmPlan p = {
		.version = DTM_PLAN_VERSION,
		.model = "failure",
		.mesh_naxes = 2,
		.mesh_names = { "dp", "tp" },
		.mesh_sizes = { 2, 2 },
		.nbuffers = NBUF,
		.buffers = buffers,
		.arena_bytes = { [DTM_ARENA_ACT] = 13 * BIG + 64, [DTM_ARENA_INPUT] = 192 },
		.nstages = 1,
		.stages = &stage,
		.nkernels = 2,
		.kernels = kernels,
		.kernel_names = kernel_names,
		.ninputs = 2,
		.inputs = { B_X, B_Y },
		.loss = B_LOSS,
		.grad_norm = -1,
		.train = { .optimizer = DTM_OPTIMIZER_SGD, .lr = 0.1f, .lr_schedule = DTM_LR_CONSTANT,
			   .steps = STEPS, .data = "synthetic", .seed = 1, .tokens_per_step = 8,
			   .batch = 8, .data_kind = DTM_DATA_REGRESSION, .microbatches = 1,
			   .precision = DTM_F32 },
	};
	return p;
}

/* ---- the fault hook: rank r fails (or hangs) at its fail_at[r]-th action ---- */

static _Atomic int seen[NR];
static int fail_at[NR];     /* -1: never */
static bool hang;           /* the failing rank sleeps forever instead */
static const char *fail_msg[NR];

static int hook(RtRun *r, int action)
{
	int rank = (int)r->rank;
	int k = atomic_fetch_add(&seen[rank], 1);
	if (k != fail_at[rank])
		return 0;
	if (hang)
		for (;;)
			sleep(1);
	snprintf(r->err, RT_ERR_LEN, "%s", fail_msg[rank] ? fail_msg[rank] : "injected failure");
	return -1;
}

static void arm(const int at[NR], const char *const msg[NR])
{
	for (int r = 0; r < NR; r++) {
		atomic_store(&seen[r], 0);
		fail_at[r] = at[r];
		fail_msg[r] = msg ? msg[r] : NULL;
	}
	rt_test_action_hook = hook;
}

/* ---- running dtm_main with stderr in a file ---- */

/* Sanitizer reports keep going to the real stderr while fd 2 is a file. */
extern void __sanitizer_set_report_fd(void *fd) __attribute__((weak));

static char tmpdir[64];
static int real_stderr = -1;

static char *errpath(void)
{
	static char p[128];
	snprintf(p, sizeof p, "%s/stderr.txt", tmpdir);
	return p;
}

static int run_main(const char *overlap, const char *timeout)
{
	DtmPlan p = make_plan();
	char *argv[] = { "failure", "-q", "--steps", "2", "--threads", "1", "--overlap",
			 (char *)overlap, "--comm-timeout", (char *)timeout, NULL };
	fflush(stderr);
	int fd = open(errpath(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, 2);
	close(fd);
	int rc = dtm_main(&p, (int)(sizeof argv / sizeof argv[0]) - 1, argv);
	fflush(stderr);
	dup2(real_stderr, 2);
	return rc;
}

/* Lines of s that start with "error: ". */
static int error_lines(const char *s)
{
	int n = 0;
	for (const char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		n += strncmp(l, "error: ", 7) == 0;
	return n;
}

/* ---- stress: random failures ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static unsigned rnd(unsigned n)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (unsigned)(rng % n);
}

static void test_stress(int runs)
{
	static const char *const modes[] = { "on", "nocopy", "off" };
	int bad = 0;
	double t0 = rt_now(), worst = 0;
	for (int i = 0; i < runs; i++) {
		int at[NR] = { -1, -1, -1, -1 };
		at[rnd(NR)] = (int)rnd(NACT * STEPS);
		if (rnd(3) == 0) /* a second rank, failing at about the same point */
			at[rnd(NR)] = (int)rnd(NACT * STEPS);
		arm(at, NULL);
		const char *mode = modes[rnd(3)];
		double t1 = rt_now();
		int rc = run_main(mode, "20");
		double dt = rt_now() - t1;
		worst = dt > worst ? dt : worst;
		char *e = slurp(errpath());
		bool ok = rc == 1 && e && strstr(e, "injected failure") && dt < 10;
		if (!ok && bad++ < 5)
			fprintf(stderr, "stress run %d (--overlap %s, fail at %d %d %d %d): exit %d "
				"after %.1f s, stderr:\n%s\n", i, mode, at[0], at[1], at[2], at[3],
				rc, dt, e ? e : "(none)");
		CHECK(ok);
		free(e);
	}
	rt_test_action_hook = NULL;
	printf("stress: %d runs with failing ranks in %.1f s (slowest %.2f s)\n", runs,
	       rt_now() - t0, worst);
}

/* ---- a hung rank ---- */

static void test_hang(void)
{
	const double timeout = 1.5;
	int at[NR] = { -1, 3, -1, -1 }; /* rank 1, inside its first step */
	double t0 = rt_now();
	pid_t pid = fork();
	if (pid == 0) {
		arm(at, NULL);
		hang = true;
		_exit(run_main("on", "1.5"));
	}
	CHECK(pid > 0);
	int st = 0;
	pid_t done = 0;
	/* the peers time out at 1.5 s; the watchdog's grace is as long */
	while ((done = waitpid(pid, &st, WNOHANG)) == 0 && rt_now() - t0 < timeout + 8)
		usleep(20 * 1000);
	double dt = rt_now() - t0;
	if (done == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		fprintf(stderr, "hang: the process did not end within %.1f s\n", dt);
	}
	CHECK(done == pid);
	CHECK(done == pid && WIFEXITED(st) && WEXITSTATUS(st) == 1);
	CHECK(dt < timeout + 5);
	char *e = slurp(errpath());
	/* the watchdog names it (the peers' timeouts usually do too, but on a
	 * loaded machine a peer may first time out waiting for a slow rank
	 * that waits for rank 1, and the watchdog ends the process before the
	 * direct waiter's report is collected) */
	bool named = e && strstr(e, "error: rank 1 did not finish");
	CHECK(named);
	fprintf(stderr, "(expected, after %.1f s, status %d) %s", dt,
		WIFEXITED(st) ? WEXITSTATUS(st) : -1, e ? e : "(no output)\n");
	free(e);
}

/* ---- messages: deduplicated, whole lines ---- */

static void test_messages(void)
{
	char buf[64];
	CHECK_EQ_STR(rt_ranks_name((int[]){ 1 }, 1, buf, 64), "rank 1");
	CHECK_EQ_STR(rt_ranks_name((int[]){ 0, 1, 2, 3 }, 4, buf, 64), "ranks 0-3");
	CHECK_EQ_STR(rt_ranks_name((int[]){ 0, 2 }, 2, buf, 64), "ranks 0, 2");
	CHECK_EQ_STR(rt_ranks_name((int[]){ 0, 1, 3, 5, 6, 7 }, 6, buf, 64), "ranks 0-1, 3, 5-7");
	CHECK_EQ_STR(rt_ranks_name((int[]){ 10, 20, 30, 40, 50 }, 5, buf, 16), "ranks 10, 20...");

	/* every rank fails on its own, before any collective, saying the same */
	static const char *const same[NR] = { "checkpoint run/step_000004 missing",
					      "checkpoint run/step_000004 missing",
					      "checkpoint run/step_000004 missing",
					      "checkpoint run/step_000004 missing" };
	int at0[NR] = { 0, 0, 0, 0 };
	arm(at0, same);
	CHECK_EQ_INT(run_main("on", "20"), 1);
	char *e = slurp(errpath());
	CHECK(e && strcmp(e, "error: ranks 0-3: checkpoint run/step_000004 missing\n") == 0);
	CHECK_EQ_INT(error_lines(e), 1);
	if (!e || error_lines(e) != 1 || !strstr(e, "ranks 0-3"))
		fprintf(stderr, "messages, one for all:\n%s", e ? e : "(none)");
	free(e);

	/* two messages, each from two ranks */
	static const char *const two[NR] = { "disk full", "no such file", "disk full",
					     "no such file" };
	arm(at0, two);
	CHECK_EQ_INT(run_main("off", "20"), 1);
	e = slurp(errpath());
	CHECK(e && strstr(e, "error: ranks 0, 2: disk full\n") &&
	      strstr(e, "error: ranks 1, 3: no such file\n"));
	CHECK_EQ_INT(error_lines(e), 2);
	CHECK(e && !strstr(e, "error: error:"));
	if (!e || error_lines(e) != 2)
		fprintf(stderr, "messages, two:\n%s", e ? e : "(none)");
	free(e);
	rt_test_action_hook = NULL;
}

int main(int argc, char **argv)
{
	int runs = 1000;
	bool only_stress = false;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--stress") && i + 1 < argc)
			runs = atoi(argv[++i]), only_stress = true;
	snprintf(tmpdir, sizeof tmpdir, "/tmp/dtm_failure_XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	real_stderr = dup(2);
	if (__sanitizer_set_report_fd)
		__sanitizer_set_report_fd((void *)(intptr_t)real_stderr);
	if (!only_stress) {
		test_hang(); /* first: it forks, better before this process has threads */
		test_messages();
	}
	test_stress(runs);
	unlink(errpath());
	rmdir(tmpdir);
	return check_report();
}
