/* sweep_svg.c - `dtmc sweep --plot FILE.svg` (see sweep.h): the candidates
 * as points of peak memory per rank (x, linear) against step time (y, log
 * scale: a sweep's step times span decades, and on a linear axis the fast
 * end, where the front is, was a flat smear at the bottom), the Pareto front
 * in red joined by its staircase, each front point labelled with its layout
 * in the image.
 *
 * Labels are placed greedily, front point by front point in ascending
 * memory: of candidate spots around the point (beside it, then further up
 * or down with a leader line back to it), the nearest that overlaps no
 * placed label, no front point and stays in the image; among spots that
 * all collide, the one with the fewest collisions.  Text widths are
 * estimated (LABEL_CHAR_W per character), which is what a reader's
 * sans-serif at LABEL_FONT pixels comes to within a few percent.  Pure C
 * with no IR: tests/unit/test_sweep.c checks it directly.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/sweep.h"

#define SVG_W 960
#define SVG_H 600
#define SVG_L 90 /* margins: room for tick labels and axis titles */
#define SVG_R 30
#define SVG_T 50
#define SVG_B 70

#define LABEL_FONT 11
#define LABEL_CHAR_W 7.0 /* px per character at LABEL_FONT: DejaVu Sans digits, generous */
#define LABEL_H 13.0     /* px per line */

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

/* ---- axes ---- */

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

/* The log axis of step times: from the 1-2-5 value at or below the
 * fastest to the one at or above the slowest (so a sweep within one
 * decade still fills the height), ticks at 1, 2 and 5 times the powers of
 * ten in between (only the powers of ten when it spans more than three
 * decades), labelled in the unit of the slowest. */
typedef struct LogAxis {
	double lo, hi;  /* seconds */
	double scale;   /* seconds per shown unit */
	const char *unit;
	bool minor;     /* 2 and 5 ticks too */
} LogAxis;

static double step125(double v, bool up)
{
	double p = pow(10, floor(log10(v)));
	static const double m[] = {1, 2, 5, 10};
	if (up) {
		for (int i = 0; i < 4; i++)
			if (m[i] * p >= v * (1 - 1e-9))
				return m[i] * p;
		return 10 * p;
	}
	for (int i = 3; i >= 0; i--)
		if (m[i] * p <= v * (1 + 1e-9))
			return m[i] * p;
	return p;
}

static LogAxis time_axis(double tmin, double tmax)
{
	LogAxis a;
	a.lo = step125(tmin, false);
	a.hi = step125(tmax, true);
	if (a.hi <= a.lo * (1 + 1e-9))
		a.hi = step125(a.lo * 1.5, true);
	a.scale = tmax >= 10 ? 1 : tmax >= 1e-3 ? 1e-3 : 1e-6;
	a.unit = a.scale == 1 ? "s" : a.scale == 1e-3 ? "ms" : "us";
	a.minor = log10(a.hi / a.lo) <= 3;
	return a;
}

/* ---- labels ---- */

typedef struct Box {
	double x0, y0, x1, y1;
} Box;

static bool overlap(Box a, Box b)
{
	return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
}

/* A spot for a label: its text anchor (x, baseline y), start or end
 * anchored, and the box it covers. */
typedef struct Spot {
	double x, y;
	bool end;
	Box box;
} Spot;

static Spot spot_at(double px, double py, double dx, double dy, double w)
{
	Spot s = {.x = px + dx, .y = py + dy + LABEL_H * 0.35, .end = dx < 0};
	double x0 = s.end ? s.x - w : s.x;
	s.box = (Box){x0 - 2, py + dy - LABEL_H / 2, x0 + w + 2, py + dy + LABEL_H / 2};
	return s;
}

/* What labels are placed against: the front's points (px, py; label
 * widths w, ascending memory, so the staircase runs between neighbours),
 * the labels placed so far, and the other candidates' points (gx, gy). */
typedef struct Labels {
	int nf;
	const double *px, *py, *w;
	Spot *placed;
	int nplaced;
	int ng;
	const double *gx, *gy;
} Labels;

/* Places the label of front point k: the nearest spot inside the image
 * that covers no placed label and no front point, preferring spots clear
 * of the staircase and of other points; when every spot collides, the
 * least crowded. */
static Spot place_label(const Labels *L, int k)
{
	Spot best = {0};
	double best_cost = INFINITY;
	/* beside the point first, then up and down in label-height steps, as
	 * far as the whole height */
	for (int step = 0; step <= 2 * (int)(SVG_H / LABEL_H) + 2; step++) {
		for (int side = 0; side < 4; side++) {
			double dy = (step + 1) / 2 * LABEL_H * (step % 2 ? -1 : 1);
			double dx = side < 2 ? 8 : -8;
			if (side % 2)
				dx *= step == 0 ? 1 : 2.5; /* a little aside, clear of the leader */
			Spot s = spot_at(L->px[k], L->py[k], dx, dy, L->w[k]);
			double cost = hypot(dx, dy);
			if (s.box.x0 < 0 || s.box.x1 > SVG_W || s.box.y0 < SVG_T - 20 ||
			    s.box.y1 > SVG_H - SVG_B + 10)
				cost += 1e6;
			for (int j = 0; j < L->nplaced; j++)
				if (overlap(s.box, L->placed[j].box))
					cost += 1e4;
			for (int j = 0; j < L->nf; j++) {
				Box dot = {L->px[j] - 5, L->py[j] - 5, L->px[j] + 5, L->py[j] + 5};
				if (overlap(s.box, dot))
					cost += 1e4;
				/* the staircase into point j: across at the previous
				 * point's height, then down */
				if (j > 0) {
					Box across = {L->px[j - 1], L->py[j - 1] - 1, L->px[j], L->py[j - 1] + 1};
					Box down = {L->px[j] - 1, L->py[j - 1], L->px[j] + 1, L->py[j]};
					cost += 12 * (overlap(s.box, across) + overlap(s.box, down));
				}
			}
			for (int j = 0; j < L->ng; j++) {
				Box dot = {L->gx[j] - 3, L->gy[j] - 3, L->gx[j] + 3, L->gy[j] + 3};
				cost += 0.5 * overlap(s.box, dot);
			}
			if (cost < best_cost) {
				best_cost = cost;
				best = s;
			}
		}
		if (best_cost < 1e4 && best_cost <= hypot(8, (step + 2) / 2 * LABEL_H))
			break; /* nothing later can be nearer and as clear */
	}
	return best;
}

bool sweep_svg(FILE *out, int n, const double *mem, const double *time, const bool *front,
               const char *const *label, const char *const *tag, const char *title)
{
	double mmax = 0, tmin = INFINITY, tmax = 0;
	for (int i = 0; i < n; i++) {
		if (isfinite(mem[i]) && mem[i] > mmax)
			mmax = mem[i];
		if (isfinite(time[i]) && time[i] > 0) {
			tmin = time[i] < tmin ? time[i] : tmin;
			tmax = time[i] > tmax ? time[i] : tmax;
		}
	}
	if (!(tmax > 0))
		tmin = tmax = 1;
	Axis xa = mem_axis(mmax > 0 ? mmax : 1);
	LogAxis ya = time_axis(tmin, tmax);
	const double pw = SVG_W - SVG_L - SVG_R, ph = SVG_H - SVG_T - SVG_B;
	const double lspan = log10(ya.hi / ya.lo);
#define PX(v) (SVG_L + (v) / xa.max * pw)
#define PY(v) (SVG_T + ph - log10((v) / ya.lo) / lspan * ph)
	fprintf(out,
	        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
	        "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
	        "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
	        SVG_W, SVG_H, SVG_W, SVG_H);
	fprintf(out, "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-size=\"15\">", SVG_W / 2);
	xml_text(out, title);
	fputs("</text>\n", out);
	/* grid, ticks and tick labels; the time ticks at 1, 2, 5 x 10^k */
	fputs("<g stroke=\"#e5e5e5\">\n", out);
	for (double v = xa.step; v <= xa.max * (1 + 1e-9); v += xa.step)
		fprintf(out, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\"/>\n", PX(v),
		        SVG_T, PX(v), SVG_T + ph);
	double yt[64];
	int nyt = 0;
	for (double p = pow(10, floor(log10(ya.lo))); p <= ya.hi * (1 + 1e-9) && nyt < 60; p *= 10)
		for (int m = 1; m <= 5; m += m == 1 ? 1 : 3) {
			double v = p * m;
			if ((m == 1 || ya.minor) && v >= ya.lo * (1 - 1e-9) && v <= ya.hi * (1 + 1e-9))
				yt[nyt++] = v;
		}
	for (int k = 0; k < nyt; k++)
		fprintf(out, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"%s/>\n", SVG_L,
		        PY(yt[k]), SVG_L + pw, PY(yt[k]),
		        fabs(log10(yt[k]) - round(log10(yt[k]))) < 1e-9 ? " stroke=\"#c8c8c8\"" : "");
	fputs("</g>\n<g fill=\"#333\">\n", out);
	for (double v = 0; v <= xa.max * (1 + 1e-9); v += xa.step)
		fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
		        PX(v), SVG_T + ph + 18, v / xa.scale);
	fputs("</g>\n<g fill=\"#333\" class=\"y-ticks\">\n", out);
	for (int k = 0; k < nyt; k++)
		fprintf(out, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", SVG_L - 8,
		        PY(yt[k]) + 4, yt[k] / ya.scale);
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
	        "transform=\"rotate(-90 22 %.1f)\">step time (%s, log scale)</text>\n",
	        SVG_T + ph / 2, SVG_T + ph / 2, ya.unit);
	/* the front, ascending memory */
	int *order = malloc(sizeof *order * (size_t)(n > 0 ? n : 1));
	double *fx = malloc(sizeof *fx * (size_t)(n > 0 ? n : 1));
	double *fy = malloc(sizeof *fy * (size_t)(n > 0 ? n : 1));
	double *fw = malloc(sizeof *fw * (size_t)(n > 0 ? n : 1));
	double *gx = malloc(sizeof *gx * (size_t)(n > 0 ? n : 1));
	double *gy = malloc(sizeof *gy * (size_t)(n > 0 ? n : 1));
	Spot *spot = malloc(sizeof *spot * (size_t)(n > 0 ? n : 1));
	bool ok = order && fx && fy && fw && gx && gy && spot;
	int nf = 0;
	for (int i = 0; ok && i < n; i++)
		if (front[i] && isfinite(mem[i]) && isfinite(time[i]) && time[i] > 0)
			order[nf++] = i;
	/* insertion sort: fronts are short */
	for (int i = 1; i < nf; i++)
		for (int j = i; j > 0 && mem[order[j]] < mem[order[j - 1]]; j--) {
			int t = order[j];
			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	if (nf > 1) {
		fputs("<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"1.5\" points=\"", out);
		for (int k = 0; k < nf; k++) {
			int i = order[k];
			if (k)
				fprintf(out, " %.1f,%.1f", PX(mem[i]), PY(time[order[k - 1]]));
			fprintf(out, " %.1f,%.1f", PX(mem[i]), PY(time[i]));
		}
		fputs("\"/>\n", out);
	}
	for (int pass = 0; pass < 2; pass++) {
		fprintf(out, "<g fill=\"%s\" fill-opacity=\"%s\">\n", pass ? "#d62728" : "#7f7f7f",
		        pass ? "1" : "0.45");
		for (int i = 0; i < n; i++) {
			if (front[i] != (pass == 1) || !isfinite(mem[i]) || !isfinite(time[i]) ||
			    !(time[i] > 0))
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
	/* the front's labels: placed, then drawn over everything (with a
	 * white halo), a leader line for those moved away from their point */
	if (tag && ok) {
		Labels L = {.nf = nf, .px = fx, .py = fy, .w = fw, .placed = spot, .gx = gx, .gy = gy};
		for (int k = 0; k < nf; k++) {
			int i = order[k];
			fx[k] = PX(mem[i]);
			fy[k] = PY(time[i]);
			fw[k] = tag[i] ? LABEL_CHAR_W * (double)strlen(tag[i]) : 0;
		}
		for (int i = 0; i < n; i++)
			if (!front[i] && isfinite(mem[i]) && isfinite(time[i]) && time[i] > 0) {
				gx[L.ng] = PX(mem[i]);
				gy[L.ng++] = PY(time[i]);
			}
		fprintf(out, "<g font-size=\"%d\" fill=\"#8b0000\" class=\"front-labels\">\n",
		        LABEL_FONT);
		for (int k = 0; k < nf; k++) {
			int i = order[k];
			if (!tag[i])
				continue;
			Spot s = place_label(&L, k);
			spot[L.nplaced++] = s;
			double cy = (s.box.y0 + s.box.y1) / 2;
			if (fabs(cy - fy[k]) > LABEL_H * 0.75)
				fprintf(out,
				        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
				        "stroke=\"#d62728\" stroke-width=\"0.7\" stroke-opacity=\"0.7\"/>\n",
				        fx[k], fy[k], s.end ? s.box.x1 : s.box.x0, cy);
			fprintf(out,
			        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" stroke=\"white\" "
			        "stroke-width=\"3\" paint-order=\"stroke\">",
			        s.x, s.y, s.end ? "end" : "start");
			xml_text(out, tag[i]);
			fputs("</text>\n", out);
		}
		fputs("</g>\n", out);
	}
	free(order);
	free(fx);
	free(fy);
	free(fw);
	free(gx);
	free(gy);
	free(spot);
	/* legend */
	fprintf(out,
	        "<g font-size=\"12\"><circle cx=\"%.1f\" cy=\"%d\" r=\"3\" fill=\"#7f7f7f\"/>"
	        "<text x=\"%.1f\" y=\"%d\">candidate</text>"
	        "<circle cx=\"%.1f\" cy=\"%d\" r=\"4\" fill=\"#d62728\"/>"
	        "<text x=\"%.1f\" y=\"%d\">Pareto front (%d)</text></g>\n",
	        SVG_W - 250.0, SVG_H - 26, SVG_W - 242.0, SVG_H - 22, SVG_W - 150.0, SVG_H - 26,
	        SVG_W - 142.0, SVG_H - 22, nf);
	fputs("</svg>\n", out);
#undef PX
#undef PY
	return ok && !ferror(out);
}
