/* sweep_measure.c - `dtmc sweep --measure K`: check the cost model on the
 * machine at hand.
 *
 * The best K candidates of the ranking are built the way `dtmc build`
 * builds (driver/driver.h: lower, every pass with the verifier, the plan;
 * codegen/link.c's cg_build)
 * into a temporary folder, and each binary trains a few steps on the local
 * backend (ranks as threads of one process) with -v and a JSONL log.  The
 * prediction is the same plan costed under the `cpu` profile with every
 * rank on one node; the measurement is the mean step time of the log
 * (the first step, which faults pages in, is not timed) and the largest
 * per-rank sum of the arenas the runtime allocated (its `alloc:` lines).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/link.h"
#include "driver/driver.h"
#include "tools/cost.h"
#include "tools/sweep_impl.h"

typedef struct Measured {
	double pred_s, pred_peak; /* cpu profile */
	double meas_s, meas_peak;
	int steps; /* timed steps */
} Measured;

/* Lowers, applies c's choose() options, runs every pass (with the
 * verifier) and builds the binary at exe; costs its plan under the cpu
 * profile into *ms. */
static bool build_one(const SweepRun *r, const SweepCand *c, const char *exe, Measured *ms)
{
	Arena a;
	Diag d;
	arena_init(&a);
	diag_init(&d, stderr);
	d.no_warnings = true; /* ranked already: the report says what it costs */
	LowerOptions lo = r->o.lower;
	char mesh[256], tbuf[512];
	sweep_mesh_text(r, c, mesh, sizeof mesh);
	lo.mesh = mesh;
	const char *tr[8];
	int nt = sweep_train_overrides(r, c, tr, 8, tbuf, sizeof tbuf);
	for (int k = 0; k < nt && lo.ntrain < LOWER_MAX_TRAIN; k++)
		lo.train[lo.ntrain++] = tr[k];
	DrvOptions o = {0};
	DrvSource src;
	Compiled cc;
	bool ok = drv_parse(&src, &a, &d, r->o.file) && drv_lower_ast(&cc, &a, &d, &src, &lo, &o);
	if (ok) {
		drv_select_choose(cc.m, c->choose, r->s.nchooses);
		/* as `dtmc build` takes it, with the choice made */
		ok = pass_check_input(cc.m, &d) && drv_run(&cc, &d, &o) && drv_plan(&cc, &d, &o);
	}
	DtmPlan *p = ok ? cc.plan : NULL;
	if (ok) {
		ms->pred_peak = 0;
		for (int s = 0; s < p->nstages; s++) {
			const int64_t *ab =
			        p->nstages > 1 ? p->stages[s].arena_bytes : p->arena_bytes;
			double sum = 0;
			for (int k = 0; k < DTM_ARENA_COUNT; k++)
				sum += (double)ab[k];
			if (sum > ms->pred_peak)
				ms->pred_peak = sum;
		}
		CostReport rep;
		ok = cost_plan_step(p, hw_builtin("cpu"), 1, &rep) == 0;
		if (ok)
			ms->pred_s = rep.step_s;
		else
			fprintf(stderr, "dtmc: error: cost model: %s\n", rep.err);
		cost_report_free(&rep);
	}
	if (ok) {
		CgBuildOptions bo = {.output = exe};
		ok = cg_build(cc.m, cc.an.fuse, cc.an.mem, p, &bo, &d);
	}
	if (d.nerr > 0)
		diag_summary(&d);
	arena_free(&a);
	return ok;
}

/* Runs exe with argv, its stdout and stderr to the file out; returns the
 * exit status (-1 when it could not start). */
static int run_to_file(char *const *argv, const char *out)
{
	int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -1;
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		close(fd);
		return -1;
	}
	if (pid == 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fd);
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* A JSON number field `"key": V` in line, or NAN. */
static double field(const char *line, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\":", key);
	const char *p = strstr(line, pat);
	if (!p)
		return NAN;
	return strtod(p + strlen(pat), NULL);
}

/* The mean of the log's step times after the first. */
static bool read_log(const char *path, Measured *ms)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	char line[4096];
	double sum = 0;
	int n = 0;
	while (fgets(line, sizeof line, f)) {
		if (strstr(line, "eval_loss"))
			continue;
		double step = field(line, "step"), t = field(line, "ms");
		if (isnan(step) || isnan(t) || step < 2)
			continue;
		sum += t;
		n++;
	}
	fclose(f);
	ms->steps = n;
	ms->meas_s = n ? sum / n * 1e-3 : NAN;
	return n > 0;
}

/* The largest per-rank sum of the allocated arenas: `alloc: rank R stage S
 * param P opt O grad G act A input I ...` lines, else the `total N bytes`
 * line of rank 0. */
static bool read_peak(const char *path, Measured *ms)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	char line[4096];
	double best = -1, total = -1;
	while (fgets(line, sizeof line, f)) {
		long long r, s, pa, op, gr, ac, in;
		long long t;
		if (sscanf(line,
		           "alloc: rank %lld stage %lld param %lld opt %lld grad %lld act %lld "
		           "input %lld",
		           &r, &s, &pa, &op, &gr, &ac, &in) == 7) {
			double sum = (double)(pa + op + gr + ac + in);
			if (sum > best)
				best = sum;
		} else if (sscanf(line, "  total %lld bytes", &t) == 1) {
			total = (double)t;
		}
	}
	fclose(f);
	ms->meas_peak = best >= 0 ? best : total;
	return ms->meas_peak >= 0;
}

static void remove_tree(const char *dir, const char *const *names, int n)
{
	char path[4200];
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof path, "%.4000s/%.100s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}

bool sweep_measure(FILE *out, const SweepRun *r)
{
	int k = r->o.measure < r->nrank ? r->o.measure : r->nrank;
	if (k == 0) {
		fprintf(stderr, "dtmc: error: --measure: no candidate compiled under the limit\n");
		return false;
	}
	const char *tmp = getenv("TMPDIR");
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/dtm-sweep-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		fprintf(stderr, "dtmc: error: --measure: cannot create a folder in %s: %s\n",
		        tmp && *tmp ? tmp : "/tmp", strerror(errno));
		return false;
	}
	static const char *const files[] = {"cand", "cand.dtm.c", "log.jsonl", "run.txt"};
	char exe[4200], log[4200], txt[4200], steps[32];
	snprintf(exe, sizeof exe, "%s/cand", dir);
	snprintf(log, sizeof log, "%s/log.jsonl", dir);
	snprintf(txt, sizeof txt, "%s/run.txt", dir);
	snprintf(steps, sizeof steps, "%d", r->o.measure_steps);
	fprintf(out,
	        "\nmeasured here (local backend, ranks as threads, %d steps, the first not "
	        "timed) against the cpu profile:\n"
	        "     #  predicted ms  measured ms  ratio  predicted peak  measured peak  "
	        "ratio  layout\n",
	        r->o.measure_steps);
	fflush(out);
	bool ok = true;
	double tlo = INFINITY, thi = 0, mlo = INFINITY, mhi = 0;
	for (int i = 0; i < k && ok; i++) {
		const SweepCand *c = &r->cands[r->rank[i]];
		char desc[512];
		sweep_describe(r, c, desc, sizeof desc);
		Measured ms = {0};
		if (!build_one(r, c, exe, &ms)) {
			fprintf(stderr, "dtmc: error: --measure: building #%d (%s) failed\n", i + 1,
			        desc);
			ok = false;
			break;
		}
		char *argv[] = {exe, "--steps", steps, "--log", log, "-v", "-q", NULL};
		int rc = run_to_file(argv, txt);
		if (rc != 0 || !read_log(log, &ms) || !read_peak(txt, &ms)) {
			fprintf(stderr,
			        "dtmc: error: --measure: running #%d (%s) failed (status %d); "
			        "its output is in %s\n",
			        i + 1, desc, rc, txt);
			return false; /* keep the folder for the user */
		}
		char pp[32], mp[32];
		sweep_format_bytes(pp, sizeof pp, ms.pred_peak);
		sweep_format_bytes(mp, sizeof mp, ms.meas_peak);
		double tr = ms.meas_s / ms.pred_s, mr = ms.meas_peak / ms.pred_peak;
		fprintf(out, "  %4d  %12.3f  %11.3f  %5.2f  %14s  %13s  %5.3f  %s\n", i + 1,
		        ms.pred_s * 1e3, ms.meas_s * 1e3, tr, pp, mp, mr, desc);
		fflush(out);
		tlo = tr < tlo ? tr : tlo;
		thi = tr > thi ? tr : thi;
		mlo = mr < mlo ? mr : mlo;
		mhi = mr > mhi ? mr : mhi;
	}
	if (ok)
		fprintf(out,
		        "measured / predicted: step time %.2fx to %.2fx, peak memory %.3fx to "
		        "%.3fx\n",
		        tlo, thi, mlo, mhi);
	remove_tree(dir, files, 4);
	return ok;
}
