/* sweep_measure.c - `dtmc sweep --measure K`: check the cost model on the
 * machine at hand.
 *
 * The best K candidates of the ranking are built the way `dtmc build`
 * builds (driver/driver.h: lower, every pass with the verifier, the plan;
 * codegen/link.c's cg_build)
 * into a temporary folder, and each binary trains a few steps on the local
 * backend (ranks as threads of one process) with -v and a JSONL log, in
 * turn, --measure-rounds times (the fastest run's median counts).  The
 * prediction is the same plan costed under the `cpu` profile with every
 * rank on one node; the measurement is the median step time of the log
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
#include "support/json.h"
#include "driver/driver.h"
#include "tools/cost.h"
#include "tools/sweep_impl.h"

typedef SweepMeasured Measured;

/* Lowers, applies c's choose() options, runs every pass (with the
 * verifier) and builds the binary at exe; costs its plan under the
 * sweep's profile, every rank on one host, into *ms. */
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
		ok = cost_plan_step(p, &r->o.hw, 1, &rep) == 0;
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

bool sweep_tmpdir(const char *prefix, const char *what, char *dir, size_t n)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, n, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
	if (mkdtemp(dir))
		return true;
	fprintf(stderr, "dtmc: error: %s: cannot create a folder in %s: %s\n", what,
	        tmp && *tmp ? tmp : "/tmp", strerror(errno));
	return false;
}

int sweep_run_to_file(char *const *argv, const char *out)
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
		execvp(argv[0], argv); /* a path, or a program on PATH (mpirun) */
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

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double sweep_log_step_s(const char *path, int *nsteps)
{
	*nsteps = 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return NAN;
	char line[4096];
	double *v = NULL;
	int n = 0, cap = 0;
	while (fgets(line, sizeof line, f)) {
		if (strstr(line, "eval_loss"))
			continue;
		double step = field(line, "step"), t = field(line, "ms");
		if (isnan(step) || isnan(t) || step < 2)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			double *nv = realloc(v, sizeof *v * (size_t)cap);
			if (!nv)
				break;
			v = nv;
		}
		v[n++] = t;
	}
	fclose(f);
	/* the median: a shared machine's hiccups move the mean */
	double med = NAN;
	if (n > 0) {
		qsort(v, (size_t)n, sizeof *v, cmp_double);
		med = (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) * 1e-3;
	}
	free(v);
	*nsteps = n;
	return med;
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

/* Ranks of v[0..n) (1-based, ties their mean) into rk. */
static void ranks_of(const double *v, int n, double *rk)
{
	for (int i = 0; i < n; i++) {
		int below = 0, same = 0;
		for (int j = 0; j < n; j++) {
			below += v[j] < v[i];
			same += v[j] == v[i];
		}
		rk[i] = below + (same + 1) / 2.0;
	}
}

double sweep_spearman(const double *x, const double *y, int n)
{
	if (n < 2)
		return NAN;
	double *rx = malloc(sizeof(double) * (size_t)n * 2);
	if (!rx)
		return NAN;
	double *ry = rx + n;
	ranks_of(x, n, rx);
	ranks_of(y, n, ry);
	/* Pearson's r of the ranks (exact with ties) */
	double mx = 0, my = 0;
	for (int i = 0; i < n; i++)
		mx += rx[i], my += ry[i];
	mx /= n, my /= n;
	double sxy = 0, sxx = 0, syy = 0;
	for (int i = 0; i < n; i++) {
		sxy += (rx[i] - mx) * (ry[i] - my);
		sxx += (rx[i] - mx) * (rx[i] - mx);
		syy += (ry[i] - my) * (ry[i] - my);
	}
	free(rx);
	return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

/* Which K of the ranking: the best K, or K spread evenly from the first
 * to the last (place i of K at (nrank - 1) * i / (K - 1)). */
static int pick(const SweepRun *r, int i, int k)
{
	if (!r->o.measure_spread || k < 2)
		return i;
	return (int)((int64_t)(r->nrank - 1) * i / (k - 1));
}

/* The K binaries of a --measure run: dir/cand<i>, with the files the runs
 * write; removed when done (kept, with a message, after a failed run). */
static void remove_measured(const char *dir, int k)
{
	char path[4200];
	for (int i = 0; i < k; i++) {
		snprintf(path, sizeof path, "%.4000s/cand%d", dir, i);
		unlink(path);
		snprintf(path, sizeof path, "%.4000s/cand%d.dtm.c", dir, i);
		unlink(path);
	}
	static const char *const files[] = {"log.jsonl", "run.txt"};
	remove_tree(dir, files, 2);
}

bool sweep_measure(SweepRun *r)
{
	int k = r->o.measure < r->nrank ? r->o.measure : r->nrank;
	int rounds = r->o.measure_rounds > 0 ? r->o.measure_rounds : 1;
	r->spearman = NAN;
	if (k == 0) {
		fprintf(stderr, "dtmc: error: --measure: no candidate compiled under the limit\n");
		return false;
	}
	r->meas = calloc((size_t)k, sizeof *r->meas);
	if (!r->meas) {
		fprintf(stderr, "dtmc: error: out of memory\n");
		return false;
	}
	char dir[4096];
	if (!sweep_tmpdir("dtm-sweep", "--measure", dir, sizeof dir))
		return false;
	char exe[4200], log[4200], txt[4200], steps[32];
	snprintf(log, sizeof log, "%s/log.jsonl", dir);
	snprintf(txt, sizeof txt, "%s/run.txt", dir);
	snprintf(steps, sizeof steps, "%d", r->o.measure_steps);
	/* every binary first, then the runs, round by round in turn */
	for (int i = 0; i < k; i++) {
		int place = pick(r, i, k);
		const SweepCand *c = &r->cands[r->rank[place]];
		char desc[512];
		sweep_describe(r, c, desc, sizeof desc);
		Measured ms = {.cand = r->rank[place], .place = place + 1, .meas_s = INFINITY};
		if (!r->o.quiet)
			fprintf(stderr, "dtmc: building %d of %d: #%d %s\n", i + 1, k, place + 1,
			        desc);
		snprintf(exe, sizeof exe, "%s/cand%d", dir, i);
		if (!build_one(r, c, exe, &ms)) {
			fprintf(stderr, "dtmc: error: --measure: building #%d (%s) failed\n",
			        place + 1, desc);
			remove_measured(dir, i + 1);
			return false;
		}
		r->meas[r->nmeas++] = ms;
	}
	for (int round = 0; round < rounds; round++) {
		for (int i = 0; i < k; i++) {
			Measured *ms = &r->meas[i];
			char desc[512];
			sweep_describe(r, &r->cands[ms->cand], desc, sizeof desc);
			if (!r->o.quiet)
				fprintf(stderr, "dtmc: measuring %d of %d%s: #%d %s\n", i + 1, k,
				        rounds > 1 ? " this round" : "", ms->place, desc);
			snprintf(exe, sizeof exe, "%s/cand%d", dir, i);
			char *argv[] = {exe, "--steps", steps, "--log", log, "-v", "-q", NULL};
			int rc = sweep_run_to_file(argv, txt), n = 0;
			double s = rc == 0 ? sweep_log_step_s(log, &n) : NAN;
			if (rc != 0 || n == 0 || !(round > 0 || read_peak(txt, ms))) {
				fprintf(stderr,
				        "dtmc: error: --measure: running #%d (%s) failed (status %d); "
				        "its output is in %s\n",
				        ms->place, desc, rc, txt);
				return false; /* keep the folder for the user */
			}
			/* the fastest run's median: a slow spell slows a run */
			ms->meas_s = fmin(ms->meas_s, s);
			ms->steps += n;
		}
	}
	remove_measured(dir, k);
	double *xy = malloc(sizeof(double) * 2 * (size_t)k);
	if (xy) {
		for (int i = 0; i < k; i++)
			xy[i] = r->meas[i].pred_s, xy[k + i] = r->meas[i].meas_s;
		r->spearman = sweep_spearman(xy, xy + k, k);
		free(xy);
	}
	return true;
}

void sweep_print_measured(FILE *out, const SweepRun *r)
{
	fprintf(out,
	        "\nmeasured here (local backend, ranks as threads, %d steps, the first not "
	        "timed; the fastest of %d run%s each) against the %s profile:\n"
	        "     #  predicted ms  measured ms  ratio  predicted peak  measured peak  "
	        "ratio  layout\n",
	        r->o.measure_steps, r->o.measure_rounds, r->o.measure_rounds == 1 ? "" : "s",
	        r->o.hw.name);
	double tlo = INFINITY, thi = 0, mlo = INFINITY, mhi = 0;
	for (int i = 0; i < r->nmeas; i++) {
		const Measured *ms = &r->meas[i];
		char desc[512], pp[32], mp[32];
		sweep_describe(r, &r->cands[ms->cand], desc, sizeof desc);
		sweep_format_bytes(pp, sizeof pp, ms->pred_peak);
		sweep_format_bytes(mp, sizeof mp, ms->meas_peak);
		double tr = ms->meas_s / ms->pred_s, mr = ms->meas_peak / ms->pred_peak;
		fprintf(out, "  %4d  %12.3f  %11.3f  %5.2f  %14s  %13s  %5.3f  %s\n", ms->place,
		        ms->pred_s * 1e3, ms->meas_s * 1e3, tr, pp, mp, mr, desc);
		tlo = fmin(tlo, tr), thi = fmax(thi, tr);
		mlo = fmin(mlo, mr), mhi = fmax(mhi, mr);
	}
	fprintf(out, "measured / predicted: step time %.2fx to %.2fx, peak memory %.3fx to %.3fx\n",
	        tlo, thi, mlo, mhi);
	if (r->nmeas >= 2)
		fprintf(out, "rank correlation (Spearman) of predicted and measured step time: %.3f\n",
		        r->spearman);
}

void sweep_json_measured(FILE *out, const SweepRun *r)
{
	fprintf(out, ",\n  \"measure_steps\": %d,\n  \"measure_rounds\": %d,\n  \"spearman\": ",
	        r->o.measure_steps, r->o.measure_rounds);
	if (isnan(r->spearman))
		fputs("null", out);
	else
		fprintf(out, "%.6g", r->spearman);
	fputs(",\n  \"measured\": [", out);
	for (int i = 0; i < r->nmeas; i++) {
		const Measured *ms = &r->meas[i];
		char desc[512];
		sweep_describe(r, &r->cands[ms->cand], desc, sizeof desc);
		fprintf(out, "%s\n    {\"place\": %d, \"layout\": ", i ? "," : "", ms->place);
		json_put_str(out, desc);
		fprintf(out,
		        ", \"predicted_ms\": %.6g, \"measured_ms\": %.6g, \"ratio\": %.6g, "
		        "\"predicted_peak\": %.17g, \"measured_peak\": %.17g, \"steps\": %d}",
		        ms->pred_s * 1e3, ms->meas_s * 1e3, ms->meas_s / ms->pred_s, ms->pred_peak,
		        ms->meas_peak, ms->steps);
	}
	fputs(r->nmeas ? "\n  ]" : "]", out);
}
