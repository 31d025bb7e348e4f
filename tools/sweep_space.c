/* sweep_space.c - the pure arithmetic of `dtmc sweep` (see sweep.h):
 * factorizations of the device count over mesh axes, divisors, the Pareto
 * front of (peak memory, step time), byte sizes (the SVG plot is
 * sweep_svg.c).  No IR and no Plans here, so tests/unit/test_sweep.c
 * checks it directly.
 */
#include "tools/sweep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- factorizations and divisors ---- */

int sweep_divisors(int64_t n, int64_t *out, int cap)
{
	if (n < 1)
		return 0;
	/* d <= sqrt(n) ascending at the front, n / d descending at the back */
	int nlo = 0;
	bool square = false;
	for (int64_t d = 1; d <= n / d; d++)
		if (n % d == 0) {
			nlo++;
			square = d == n / d;
		}
	int total = 2 * nlo - square, i = 0;
	for (int64_t d = 1; d <= n / d; d++) {
		if (n % d)
			continue;
		if (out && i < cap)
			out[i] = d;
		if (out && total - 1 - i < cap)
			out[total - 1 - i] = n / d;
		i++;
	}
	return total;
}

/* Fills tuples with first factor at position `axis` onwards; cur holds the
 * factors chosen so far.  Returns the count from here. */
static int64_t factor_rec(int64_t rest, int axis, int naxes, int64_t *cur, int64_t *out,
                          int64_t cap, int64_t done)
{
	if (axis == naxes - 1) {
		cur[axis] = rest;
		if (out && done < cap)
			memcpy(out + done * naxes, cur, sizeof *cur * (size_t)naxes);
		return 1;
	}
	int64_t divs[1024]; /* numbers up to 2^40 have fewer divisors */
	int nd = sweep_divisors(rest, divs, 1024);
	int64_t count = 0;
	for (int i = 0; i < nd && i < 1024; i++) {
		cur[axis] = divs[i];
		count += factor_rec(rest / divs[i], axis + 1, naxes, cur, out, cap, done + count);
	}
	return count;
}

int64_t sweep_factorizations(int64_t n, int naxes, int64_t *out, int64_t cap)
{
	if (n < 1 || naxes < 0)
		return -1;
	if (naxes == 0)
		return n == 1 ? 1 : 0;
	int64_t cur[64];
	if (naxes > 64)
		return -1;
	return factor_rec(n, 0, naxes, cur, out, cap, 0);
}

/* ---- the Pareto front ---- */

typedef struct Pt {
	double mem, time;
	int id;
} Pt;

static int cmp_pt(const void *a, const void *b)
{
	const Pt *x = a, *y = b;
	if (x->mem != y->mem)
		return x->mem < y->mem ? -1 : 1;
	if (x->time != y->time)
		return x->time < y->time ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

int sweep_pareto(int n, const double *mem, const double *time, int *front)
{
	if (n <= 0)
		return 0;
	Pt *p = malloc(sizeof *p * (size_t)n);
	if (!p)
		return 0;
	int m = 0;
	for (int i = 0; i < n; i++)
		if (!isnan(mem[i]) && !isnan(time[i]))
			p[m++] = (Pt){mem[i], time[i], i};
	qsort(p, (size_t)m, sizeof *p, cmp_pt);
	/* ascending memory (then time, then index): a point is on the front
	 * when it is faster than everything that uses no more memory; of
	 * equal points only the first */
	int nf = 0;
	double best = INFINITY;
	for (int i = 0; i < m; i++)
		if (p[i].time < best) {
			front[nf++] = p[i].id;
			best = p[i].time;
		}
	free(p);
	return nf;
}

/* ---- byte sizes ---- */

bool sweep_parse_bytes(const char *s, double *out)
{
	if (!s)
		return false;
	char *end;
	double v = strtod(s, &end);
	if (end == s || !isfinite(v) || v < 0)
		return false;
	while (*end == ' ')
		end++;
	static const char prefixes[] = "kMGTP";
	double f = 1;
	const char *pp = *end ? strchr(prefixes, *end == 'K' ? 'k' : *end) : NULL;
	if (pp) {
		int k = (int)(pp - prefixes) + 1;
		end++;
		bool bin = *end == 'i';
		if (bin)
			end++;
		for (int i = 0; i < k; i++)
			f *= bin ? 1024.0 : 1000.0;
	}
	if (*end == 'B')
		end++;
	if (*end)
		return false;
	*out = v * f;
	return true;
}

void sweep_format_bytes(char *buf, size_t cap, double bytes)
{
	static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	int u = 0;
	while (bytes >= 1024 && u < 5) {
		bytes /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%.0f B", bytes);
	else
		snprintf(buf, cap, "%.*f %s",
		         bytes < 10    ? 2
		         : bytes < 100 ? 1
		                       : 0,
		         bytes, units[u]);
}
