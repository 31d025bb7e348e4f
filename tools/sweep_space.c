/* sweep_space.c - the pure arithmetic of `dtmc sweep` (see sweep.h):
 * factorizations of the device count over mesh axes, divisors, the Pareto
 * front of (peak memory, step time), byte sizes and the SVG plot.  No IR
 * and no Plans here, so tests/unit/test_sweep.c checks it directly.
 */
#include "sweep.h"

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

/* ---- the SVG plot ---- */

#define SVG_W 820
#define SVG_H 520
#define SVG_L 90 /* margins: room for tick labels and axis titles */
#define SVG_R 30
#define SVG_T 50
#define SVG_B 70

/* A tick step of 1, 2 or 5 times a power of ten giving about 6 ticks. */
static double nice_step(double range)
{
	if (!(range > 0))
		return 1;
	double raw = range / 6, p = pow(10, floor(log10(raw)));
	double r = raw / p;
	return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * p;
}

static void xml_text(FILE *out, const char *s)
{
	for (; s && *s; s++) {
		switch (*s) {
		case '<':
			fputs("&lt;", out);
			break;
		case '>':
			fputs("&gt;", out);
			break;
		case '&':
			fputs("&amp;", out);
			break;
		case '"':
			fputs("&quot;", out);
			break;
		default:
			if ((unsigned char)*s >= 32)
				fputc(*s, out);
		}
	}
}

typedef struct Axis {
	double max, step, scale; /* data units: max and tick step; scale: per shown unit */
	const char *unit;
} Axis;

static Axis mem_axis(double max)
{
	static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double scale = 1;
	int u = 0;
	while (max / scale >= 1024 && u < 4) {
		scale *= 1024;
		u++;
	}
	double step = nice_step(max / scale * 1.05);
	double top = ceil(max / scale * 1.05 / step) * step;
	return (Axis){top * scale, step * scale, scale, units[u]};
}

static Axis time_axis(double max)
{
	double scale = max >= 10 ? 1 : max >= 1e-3 ? 1e-3 : 1e-6;
	const char *unit = scale == 1 ? "s" : scale == 1e-3 ? "ms" : "us";
	double step = nice_step(max / scale * 1.05);
	double top = ceil(max / scale * 1.05 / step) * step;
	return (Axis){top * scale, step * scale, scale, unit};
}

bool sweep_svg(FILE *out, int n, const double *mem, const double *time, const bool *front,
               const char *const *label, const char *title)
{
	double mmax = 0, tmax = 0;
	for (int i = 0; i < n; i++) {
		if (isfinite(mem[i]) && mem[i] > mmax)
			mmax = mem[i];
		if (isfinite(time[i]) && time[i] > tmax)
			tmax = time[i];
	}
	Axis xa = mem_axis(mmax > 0 ? mmax : 1), ya = time_axis(tmax > 0 ? tmax : 1);
	const double pw = SVG_W - SVG_L - SVG_R, ph = SVG_H - SVG_T - SVG_B;
#define PX(v) (SVG_L + (v) / xa.max * pw)
#define PY(v) (SVG_T + ph - (v) / ya.max * ph)
	fprintf(out,
	        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
	        "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
	        "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
	        SVG_W, SVG_H, SVG_W, SVG_H);
	fprintf(out, "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-size=\"15\">", SVG_W / 2);
	xml_text(out, title);
	fputs("</text>\n", out);
	/* grid, ticks and tick labels */
	fputs("<g stroke=\"#e5e5e5\">\n", out);
	for (double v = xa.step; v <= xa.max * (1 + 1e-9); v += xa.step)
		fprintf(out, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\"/>\n", PX(v),
		        SVG_T, PX(v), SVG_T + ph);
	for (double v = ya.step; v <= ya.max * (1 + 1e-9); v += ya.step)
		fprintf(out, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", SVG_L,
		        PY(v), SVG_L + pw, PY(v));
	fputs("</g>\n<g fill=\"#333\">\n", out);
	for (double v = 0; v <= xa.max * (1 + 1e-9); v += xa.step)
		fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
		        PX(v), SVG_T + ph + 18, v / xa.scale);
	for (double v = 0; v <= ya.max * (1 + 1e-9); v += ya.step)
		fprintf(out, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", SVG_L - 8,
		        PY(v) + 4, v / ya.scale);
	fputs("</g>\n", out);
	/* axes and their titles */
	fprintf(out,
	        "<g stroke=\"#333\" stroke-width=\"1.2\">"
	        "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
	        "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%.1f\"/></g>\n",
	        SVG_L, SVG_T + ph, SVG_L + pw, SVG_T + ph, SVG_L, SVG_T, SVG_L, SVG_T + ph);
	fprintf(out,
	        "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">peak memory per rank "
	        "(%s)</text>\n",
	        SVG_L + pw / 2, SVG_H - 22, xa.unit);
	fprintf(out,
	        "<text x=\"22\" y=\"%.1f\" text-anchor=\"middle\" "
	        "transform=\"rotate(-90 22 %.1f)\">step time (%s)</text>\n",
	        SVG_T + ph / 2, SVG_T + ph / 2, ya.unit);
	/* the front's staircase under the points */
	int *order = malloc(sizeof *order * (size_t)(n > 0 ? n : 1));
	int nf = 0;
	if (order) {
		for (int i = 0; i < n; i++)
			if (front[i] && isfinite(mem[i]) && isfinite(time[i]))
				order[nf++] = i;
		/* ascending memory (insertion sort: fronts are short) */
		for (int i = 1; i < nf; i++)
			for (int j = i; j > 0 && mem[order[j]] < mem[order[j - 1]]; j--) {
				int t = order[j];
				order[j] = order[j - 1];
				order[j - 1] = t;
			}
		if (nf > 1) {
			fputs("<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"1.5\" "
			      "points=\"",
			      out);
			for (int k = 0; k < nf; k++) {
				int i = order[k];
				if (k)
					fprintf(out, " %.1f,%.1f", PX(mem[i]),
					        PY(time[order[k - 1]]));
				fprintf(out, " %.1f,%.1f", PX(mem[i]), PY(time[i]));
			}
			fputs("\"/>\n", out);
		}
	}
	for (int pass = 0; pass < 2; pass++) {
		fprintf(out, "<g fill=\"%s\" fill-opacity=\"%s\">\n", pass ? "#d62728" : "#7f7f7f",
		        pass ? "1" : "0.45");
		for (int i = 0; i < n; i++) {
			if (front[i] != (pass == 1) || !isfinite(mem[i]) || !isfinite(time[i]))
				continue;
			fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%d\">", PX(mem[i]),
			        PY(time[i]), pass ? 4 : 3);
			if (label && label[i]) {
				fputs("<title>", out);
				xml_text(out, label[i]);
				fputs("</title>", out);
			}
			fputs("</circle>\n", out);
		}
		fputs("</g>\n", out);
	}
	free(order);
	/* legend */
	fprintf(out,
	        "<g font-size=\"12\"><circle cx=\"%.1f\" cy=\"%d\" r=\"3\" fill=\"#7f7f7f\"/>"
	        "<text x=\"%.1f\" y=\"%d\">candidate</text>"
	        "<circle cx=\"%.1f\" cy=\"%d\" r=\"4\" fill=\"#d62728\"/>"
	        "<text x=\"%.1f\" y=\"%d\">Pareto front (%d)</text></g>\n",
	        SVG_L + pw - 220, SVG_T + 12, SVG_L + pw - 212, SVG_T + 16, SVG_L + pw - 120,
	        SVG_T + 12, SVG_L + pw - 112, SVG_T + 16, nf);
	fputs("</svg>\n", out);
#undef PX
#undef PY
	return !ferror(out);
}
