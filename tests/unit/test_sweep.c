/* test_sweep.c - the arithmetic of `dtmc sweep` (tools/sweep_space.c): the
 * factorizations of the device count over mesh axes, divisors, the Pareto
 * front, byte sizes; the SVG plot (tools/sweep_svg.c); and how a
 * candidate is described and selected (tools/sweep.c).  Expected values
 * are worked by hand in the comments.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tools/sweep.h"
#include "tools/sweep_impl.h"

/* C(n, k) for the counting formula below */
static long long binom(int n, int k)
{
	long long r = 1;
	for (int i = 1; i <= k; i++)
		r = r * (n - k + i) / i;
	return r;
}

static void test_factorizations(void)
{
	/* 8 = 2^3 over 3 axes: ordered triples (a, b, c) of powers of two
	 * with exponents summing to 3: C(3 + 2, 2) = 10, lexicographic */
	int64_t out[64 * 3];
	CHECK_EQ_INT(sweep_factorizations(8, 3, out, 64), 10);
	int64_t want[10][3] = {{1, 1, 8}, {1, 2, 4}, {1, 4, 2}, {1, 8, 1}, {2, 1, 4},
	                       {2, 2, 2}, {2, 4, 1}, {4, 1, 2}, {4, 2, 1}, {8, 1, 1}};
	for (int i = 0; i < 10; i++)
		for (int k = 0; k < 3; k++)
			CHECK_EQ_INT(out[i * 3 + k], want[i][k]);
	/* every tuple multiplies to n, none repeats: 12 = 2^2 * 3 over 2
	 * axes: C(3, 1) * C(2, 1) = 6 = the divisors of 12 */
	CHECK_EQ_INT(sweep_factorizations(12, 2, out, 64), 6);
	for (int i = 0; i < 6; i++) {
		CHECK_EQ_INT(out[i * 2] * out[i * 2 + 1], 12);
		for (int j = 0; j < i; j++)
			CHECK(out[j * 2] != out[i * 2]);
	}
	/* the count for n = prod p^e over k axes is prod C(e + k - 1, k - 1):
	 * 64 = 2^6 over 3 axes: C(8, 2) = 28; 360 = 2^3 3^2 5 over 4 axes:
	 * C(6,3) C(5,3) C(4,3) = 20 * 10 * 4 = 800 */
	CHECK_EQ_INT(sweep_factorizations(64, 3, NULL, 0), binom(8, 2));
	CHECK_EQ_INT(sweep_factorizations(360, 4, NULL, 0),
	             binom(6, 3) * binom(5, 3) * binom(4, 3));
	/* a cap below the count: the count still, only cap tuples written */
	int64_t few[2 * 3] = {0};
	CHECK_EQ_INT(sweep_factorizations(8, 3, few, 2), 10);
	CHECK_EQ_INT(few[3] * few[4] * few[5], 8);
	/* edges: one axis, one device, no axes, a prime, bad n */
	CHECK_EQ_INT(sweep_factorizations(7, 1, out, 64), 1);
	CHECK_EQ_INT(out[0], 7);
	CHECK_EQ_INT(sweep_factorizations(1, 3, out, 64), 1);
	CHECK(out[0] == 1 && out[1] == 1 && out[2] == 1);
	CHECK_EQ_INT(sweep_factorizations(1, 0, out, 64), 1);
	CHECK_EQ_INT(sweep_factorizations(4, 0, out, 64), 0);
	CHECK_EQ_INT(sweep_factorizations(13, 2, out, 64), 2);
	CHECK_EQ_INT(sweep_factorizations(0, 2, out, 64), -1);
	CHECK_EQ_INT(sweep_factorizations(-4, 2, out, 64), -1);
}

static void test_divisors(void)
{
	int64_t d[32];
	CHECK_EQ_INT(sweep_divisors(12, d, 32), 6);
	int64_t want[6] = {1, 2, 3, 4, 6, 12};
	for (int i = 0; i < 6; i++)
		CHECK_EQ_INT(d[i], want[i]);
	CHECK_EQ_INT(sweep_divisors(16, d, 32), 5); /* 1 2 4 8 16: 4 counted once */
	CHECK_EQ_INT(d[2], 4);
	CHECK_EQ_INT(d[4], 16);
	CHECK_EQ_INT(sweep_divisors(1, d, 32), 1);
	CHECK_EQ_INT(sweep_divisors(0, d, 32), 0);
	CHECK_EQ_INT(sweep_divisors(720720, NULL, 0), 240);
}

static void test_pareto(void)
{
	/* (mem, time):     0:(4,1) 1:(1,5) 2:(2,3) 3:(3,3) 4:(2,4) 5:(5,1)
	 * 3 is dominated by 2 (less memory, same time), 4 by 2, 5 by 0;
	 * front by ascending memory: 1 (1,5), 2 (2,3), 0 (4,1) */
	double mem[] = {4, 1, 2, 3, 2, 5}, tim[] = {1, 5, 3, 3, 4, 1};
	int front[6];
	int n = sweep_pareto(6, mem, tim, front);
	CHECK_EQ_INT(n, 3);
	CHECK_EQ_INT(front[0], 1);
	CHECK_EQ_INT(front[1], 2);
	CHECK_EQ_INT(front[2], 0);
	/* equal points: the first (lowest index) stands for them */
	double m2[] = {2, 1, 2}, t2[] = {1, 3, 1};
	n = sweep_pareto(3, m2, t2, front);
	CHECK_EQ_INT(n, 2);
	CHECK_EQ_INT(front[0], 1);
	CHECK_EQ_INT(front[1], 0);
	/* a NaN is never on the front; one point is its own front */
	double m3[] = {NAN, 1}, t3[] = {0, 2};
	n = sweep_pareto(2, m3, t3, front);
	CHECK_EQ_INT(n, 1);
	CHECK_EQ_INT(front[0], 1);
	CHECK_EQ_INT(sweep_pareto(0, m3, t3, front), 0);
	/* every front point is undominated and every other point dominated,
	 * on a pseudo-random cloud */
	enum { N = 300 };
	double rm[N], rt[N];
	unsigned s = 12345;
	for (int i = 0; i < N; i++) {
		s = s * 1103515245u + 12345u;
		rm[i] = (double)(s >> 16 & 1023);
		s = s * 1103515245u + 12345u;
		rt[i] = (double)(s >> 16 & 1023);
	}
	int rf[N];
	bool on[N] = {false};
	n = sweep_pareto(N, rm, rt, rf);
	for (int k = 0; k < n; k++)
		on[rf[k]] = true;
	for (int k = 1; k < n; k++)
		CHECK(rm[rf[k - 1]] < rm[rf[k]] && rt[rf[k - 1]] > rt[rf[k]]);
	for (int i = 0; i < N; i++) {
		bool dominated = false;
		for (int j = 0; j < N && !dominated; j++)
			dominated = rm[j] <= rm[i] && rt[j] <= rt[i] &&
			            (rm[j] < rm[i] || rt[j] < rt[i]);
		if (on[i])
			CHECK(!dominated);
		else if (!dominated) /* off the front only as a repeat of a front point */
			for (int k = 0; k < n; k++)
				if (rm[rf[k]] == rm[i] && rt[rf[k]] == rt[i])
					CHECK(rf[k] < i);
	}
}

static void test_bytes(void)
{
	double v = -1;
	CHECK(sweep_parse_bytes("80G", &v) && v == 80e9);
	CHECK(sweep_parse_bytes("80GiB", &v) && v == 80.0 * 1024 * 1024 * 1024);
	CHECK(sweep_parse_bytes("80 GB", &v) && v == 80e9);
	CHECK(sweep_parse_bytes("1.5e9", &v) && v == 1.5e9);
	CHECK(sweep_parse_bytes("512MiB", &v) && v == 512.0 * 1024 * 1024);
	CHECK(sweep_parse_bytes("4k", &v) && v == 4000);
	CHECK(sweep_parse_bytes("4K", &v) && v == 4000);
	CHECK(sweep_parse_bytes("0", &v) && v == 0);
	CHECK(sweep_parse_bytes("100B", &v) && v == 100);
	CHECK(!sweep_parse_bytes("", &v));
	CHECK(!sweep_parse_bytes("G", &v));
	CHECK(!sweep_parse_bytes("-1G", &v));
	CHECK(!sweep_parse_bytes("80X", &v));
	CHECK(!sweep_parse_bytes("80GiBs", &v));
	CHECK(!sweep_parse_bytes(NULL, &v));
	char buf[32];
	sweep_format_bytes(buf, sizeof buf, 100);
	CHECK_EQ_STR(buf, "100 B");
	sweep_format_bytes(buf, sizeof buf, 1.5 * 1024 * 1024 * 1024);
	CHECK_EQ_STR(buf, "1.50 GiB");
	sweep_format_bytes(buf, sizeof buf, 512.0 * 1024 * 1024);
	CHECK_EQ_STR(buf, "512 MiB");
}

/* Occurrences of needle in hay. */
static int count(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

static void test_svg(void)
{
	double mem[] = {1 << 30, 2.0 * (1 << 30), 3.0 * (1 << 30)};
	double tim[] = {0.030, 0.020, 0.025};
	bool front[] = {true, true, false};
	const char *label[] = {"a <1>", "b", NULL};
	const char *tag[] = {"dp=2 <x>", "tp=2", "pp=2"};
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	CHECK(f != NULL);
	if (!f)
		return;
	CHECK(sweep_svg(f, 3, mem, tim, front, label, tag, "gpt & co"));
	fclose(f);
	CHECK(buf && strncmp(buf, "<?xml", 5) == 0);
	CHECK(count(buf, "<svg") == 1 && count(buf, "</svg>") == 1);
	CHECK_EQ_INT(count(buf, "<circle"), 3 + 2);      /* the points, then the legend's */
	CHECK_EQ_INT(count(buf, "fill=\"#d62728\""), 2); /* front group and legend */
	CHECK(count(buf, "<polyline") == 1);             /* the front's staircase */
	CHECK(strstr(buf, "peak memory per rank (GiB)") != NULL);
	CHECK(strstr(buf, "step time (ms, log scale)") != NULL);
	CHECK(strstr(buf, "gpt &amp; co") != NULL); /* escaped */
	CHECK(strstr(buf, "<title>a &lt;1&gt;</title>") != NULL);
	CHECK(strstr(buf, "Pareto front (2)") != NULL);
	/* the time axis runs from 20 ms (the 1-2-5 value at or below the
	 * fastest) to 50 ms (at or above the slowest), log scale over the
	 * 480 px of the plot (600 - 50 - 70): 20 ms at y = 530, 50 ms at 50,
	 * 25 ms at 530 - 480 log(1.25) / log(2.5) = 413.1 */
	const char *yt = strstr(buf, "class=\"y-ticks\"");
	CHECK(yt && strstr(yt, "y=\"534.0\" text-anchor=\"end\">20</text>") != NULL);
	CHECK(yt && strstr(yt, "y=\"54.0\" text-anchor=\"end\">50</text>") != NULL);
	CHECK(strstr(buf, "cy=\"413.1\" r=\"3\"") != NULL);
	/* the front's points labelled (escaped), the third point not */
	const char *fl = strstr(buf, "class=\"front-labels\"");
	CHECK(fl && strstr(fl, ">dp=2 &lt;x&gt;</text>") != NULL);
	CHECK(fl && strstr(fl, ">tp=2</text>") != NULL);
	CHECK(strstr(buf, ">pp=2</text>") == NULL);
	free(buf);
}

/* A crowded front: 14 points within 10% of each other on both axes, each
 * with a 36-character layout.  Every label is written, inside the image,
 * and no two overlap (boxes from the writer's own estimate, 7 px per
 * character, 13 px per line: what a sans-serif at 11 px takes). */
static void test_svg_labels(void)
{
	enum { N = 14 };
	double mem[N], tim[N];
	bool front[N];
	const char *tag[N];
	char tags[N][48];
	for (int i = 0; i < N; i++) {
		mem[i] = (1.0 + 0.1 * i / N) * (1 << 30);
		tim[i] = 0.011 - 0.001 * i / N;
		front[i] = true;
		snprintf(tags[i], sizeof tags[i], "pp=2,dp=2,tp=2 zero=%d M=%d gpipe sp rc", i % 4,
		         i + 1);
		tag[i] = tags[i];
	}
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	CHECK(f != NULL);
	if (!f)
		return;
	CHECK(sweep_svg(f, N, mem, tim, front, NULL, tag, "crowded"));
	fclose(f);
	double x0[N], x1[N], y0[N], y1[N];
	int nl = 0;
	const char *p = buf ? strstr(buf, "class=\"front-labels\"") : NULL;
	const char *end = p ? strstr(p, "</g>") : NULL;
	while (p && end && (p = strstr(p, "<text x=\"")) && p < end && nl < N) {
		double x, y;
		char anchor[8] = "";
		CHECK(sscanf(p, "<text x=\"%lf\" y=\"%lf\" text-anchor=\"%7[a-z]", &x, &y, anchor) == 3);
		const char *t = strchr(p, '>') + 1, *te = strstr(t, "</text>");
		double w = 7.0 * (double)(te - t);
		x0[nl] = strcmp(anchor, "end") == 0 ? x - w : x;
		x1[nl] = x0[nl] + w;
		y0[nl] = y - 13 * 0.85;
		y1[nl] = y + 13 * 0.15;
		CHECK(x0[nl] >= 0 && x1[nl] <= 960 && y0[nl] >= 0 && y1[nl] <= 600);
		nl++;
		p = te;
	}
	CHECK_EQ_INT(nl, N);
	int overlaps = 0;
	for (int i = 0; i < nl; i++)
		for (int j = i + 1; j < nl; j++)
			overlaps += x0[i] < x1[j] && x0[j] < x1[i] && y0[i] < y1[j] && y0[j] < y1[i];
	CHECK_EQ_INT(overlaps, 0);
	free(buf);
}

/* The --train overrides of c joined by spaces into buf; returns their
 * count. */
static int overrides(const SweepRun *r, const SweepCand *c, char *buf, size_t cap)
{
	const char *tr[8];
	char tbuf[512];
	int n = sweep_train_overrides(r, c, tr, 8, tbuf, sizeof tbuf);
	size_t used = 0;
	buf[0] = 0;
	for (int k = 0; k < n && used < cap; k++)
		used += (size_t)snprintf(buf + used, cap - used, "%s%s", k ? " " : "", tr[k]);
	return n;
}

/* The context_parallel mode in a candidate's layout and --train
 * overrides: shown where the sequence is split (cp_split), as ring,
 * ulysses or cp-none (cp-none=ulysses or =gather once compiled);
 * selected by context_parallel=MODE, none by no override (what a file
 * without the setting says). */
static void test_cp_candidates(void)
{
	SweepRun r;
	memset(&r, 0, sizeof r);
	r.s.naxes = 4;
	const char *axes[4] = {"pp", "dp", "cp", "tp"};
	for (int a = 0; a < 4; a++)
		r.s.axes[a] = axes[a];
	r.s.seq_axes = 1u << 2;
	SweepCand c;
	memset(&c, 0, sizeof c);
	int64_t mesh[4] = {1, 2, 2, 1};
	memcpy(c.mesh, mesh, sizeof mesh);
	c.zero = 1;
	c.micro = 2;
	c.cp_split = true;
	c.cp = IR_CP_RING;
	char desc[256], tr[256];
	sweep_describe(&r, &c, desc, sizeof desc);
	CHECK_EQ_STR(desc, "pp=1,dp=2,cp=2,tp=1 zero=1 M=2 ring");
	CHECK_EQ_INT(overrides(&r, &c, tr, sizeof tr), 5);
	CHECK_EQ_STR(tr, "zero=1 microbatches=2 sequence_parallel=false context_parallel=ring "
	                 "recompute=false");
	c.cp = IR_CP_ULYSSES;
	c.sp = true;
	sweep_describe(&r, &c, desc, sizeof desc);
	CHECK_EQ_STR(desc, "pp=1,dp=2,cp=2,tp=1 zero=1 M=2 sp ulysses");
	overrides(&r, &c, tr, sizeof tr);
	CHECK(strstr(tr, "context_parallel=ulysses") != NULL);
	c.cp = IR_CP_NONE;
	c.sp = false;
	sweep_describe(&r, &c, desc, sizeof desc);
	CHECK_EQ_STR(desc, "pp=1,dp=2,cp=2,tp=1 zero=1 M=2 cp-none");
	CHECK_EQ_INT(overrides(&r, &c, tr, sizeof tr), 4);
	CHECK(strstr(tr, "context_parallel") == NULL);
	/* once compiled, the unset mode says what attention ran as */
	c.attn = SWEEP_ATTN_ULYSSES;
	sweep_describe(&r, &c, desc, sizeof desc);
	CHECK_EQ_STR(desc, "pp=1,dp=2,cp=2,tp=1 zero=1 M=2 cp-none=ulysses");
	c.attn = SWEEP_ATTN_GATHER;
	sweep_describe(&r, &c, desc, sizeof desc);
	CHECK_EQ_STR(desc, "pp=1,dp=2,cp=2,tp=1 zero=1 M=2 cp-none=gather");
	CHECK_EQ_INT(overrides(&r, &c, tr, sizeof tr), 4);
	c.attn = SWEEP_ATTN_UNKNOWN;
	/* cp = 1: the mode decides nothing and does not show; a file's ring
	 * is still passed on as it was */
	c.mesh[2] = 1;
	c.mesh[1] = 4;
	c.cp_split = false;
	sweep_describe(&r, &c, desc, sizeof desc);
	CHECK_EQ_STR(desc, "pp=1,dp=4,cp=1,tp=1 zero=1 M=2");
	c.cp = IR_CP_RING;
	sweep_describe(&r, &c, desc, sizeof desc);
	CHECK_EQ_STR(desc, "pp=1,dp=4,cp=1,tp=1 zero=1 M=2");
	overrides(&r, &c, tr, sizeof tr);
	CHECK(strstr(tr, "context_parallel=ring") != NULL);
	CHECK_EQ_STR(sweep_cp_name(IR_CP_NONE), "none");
	CHECK_EQ_STR(sweep_cp_name(IR_CP_ULYSSES), "ulysses");
	CHECK_EQ_STR(sweep_cp_name(IR_CP_RING), "ring");
	/* no room: an error, not a truncated list */
	const char *few[3];
	char tb[512];
	CHECK_EQ_INT(sweep_train_overrides(&r, &c, few, 3, tb, sizeof tb), -1);
}

int main(void)
{
	test_factorizations();
	test_divisors();
	test_pareto();
	test_bytes();
	test_svg();
	test_svg_labels();
	test_cp_candidates();
	return check_report();
}
