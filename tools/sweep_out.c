/* sweep_out.c - `dtmc sweep`'s reports: the ranking and the Pareto front as
 * text (default), JSON or CSV on stdout, and the SVG plot.
 *
 * JSON: one object with the run's settings and counts, "ranking" (the top
 * K compiled candidates under the limit, fastest first), "pareto" (the
 * front, ascending memory) and "dropped" (every candidate that did not
 * compile or was over the memory limit, with its reason); each candidate
 * with its settings ("context_parallel" null where no attention's
 * sequence is split) and "train", the --train overrides that select it
 * after the user's (with "mesh", what `dtmc inspect` and `dtmc build`
 * take to compile it).  CSV: one row per candidate, dropped ones
 * included.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support/json.h"
#include "tools/sweep_impl.h"

/* A finite number, or null. */
static void json_num(FILE *out, double v)
{
	if (isfinite(v))
		fprintf(out, "%.9g", v);
	else
		fputs("null", out);
}

static const char *status_name(int st)
{
	switch (st) {
	case SWEEP_OK:
		return "ok";
	case SWEEP_OVER_MEM:
		return "over_mem";
	case SWEEP_FAILED:
		return "failed";
	default:
		return "pending";
	}
}

static void json_cand(FILE *out, const SweepRun *r, int id)
{
	const SweepCand *c = &r->cands[id];
	char desc[512];
	sweep_describe(r, c, desc, sizeof desc);
	fprintf(out, "{\"id\": %d, \"layout\": ", id);
	json_put_str(out, desc);
	fputs(", \"mesh\": {", out);
	for (int a = 0; a < r->s.naxes; a++) {
		fputs(a ? ", " : "", out);
		json_put_str(out, r->s.axes[a]);
		fprintf(out, ": %lld", (long long)c->mesh[a]);
	}
	fprintf(out, "}, \"zero\": %d, \"microbatches\": %d, \"schedule\": ", c->zero, c->micro);
	if (c->sched == SWEEP_SCHED_FILE)
		fputs("null", out);
	else
		json_put_str(out, sweep_sched_name(c->sched));
	fprintf(out,
	        ", \"sequence_parallel\": %s, \"context_parallel\": ", c->sp ? "true" : "false");
	if (c->cp_split)
		json_put_str(out, sweep_cp_name(c->cp));
	else
		fputs("null", out);
	fputs(", \"attention\": ", out);
	if (sweep_attn_name(c->attn))
		json_put_str(out, sweep_attn_name(c->attn));
	else
		fputs("null", out);
	fprintf(out, ", \"recompute\": %s, \"choose\": [", c->rc ? "true" : "false");
	for (int k = 0; k < r->s.nchooses; k++)
		fprintf(out, "%s%d", k ? ", " : "", c->choose[k]);
	fputs("], \"train\": [", out);
	const char *tr[8];
	char tbuf[512];
	int nt = sweep_train_overrides(r, c, tr, 8, tbuf, sizeof tbuf);
	for (int k = 0; k < nt; k++) {
		fputs(k ? ", " : "", out);
		json_put_str(out, tr[k]);
	}
	fprintf(out, "], \"status\": \"%s\"", status_name(c->status));
	if (c->status == SWEEP_OK || c->status == SWEEP_OVER_MEM) {
		fputs(", \"step_s\": ", out);
		json_num(out, c->step_s);
		fputs(", \"tokens_per_s\": ", out);
		json_num(out, c->tokens_per_s);
		fprintf(out, ", \"peak_bytes\": %.0f", c->peak_bytes); /* exact: whole bytes */
		fputs(", \"hfu\": ", out);
		json_num(out, c->hfu);
		fputs(", \"bubble\": ", out);
		json_num(out, c->bubble);
		fputs(", \"comm_s\": ", out);
		json_num(out, c->comm_s);
		fputs(", \"exposed_comm_s\": ", out);
		json_num(out, c->exposed_s);
		fprintf(out, ", \"comm_bytes\": %.0f", c->comm_bytes);
	}
	if (c->reason) {
		fputs(", \"reason\": ", out);
		json_put_str(out, c->reason);
	}
	fputc('}', out);
}

bool sweep_print_json(FILE *out, const SweepRun *r)
{
	fputs("{\n  \"model\": ", out);
	json_put_str(out, r->s.model);
	fputs(",\n  \"file\": ", out);
	json_put_str(out, r->o.file);
	fprintf(out, ",\n  \"devices\": %lld,\n  \"hw\": ", (long long)r->o.devices);
	json_put_str(out, r->o.hw.name);
	fputs(",\n  \"hw_profile\": ", out);
	json_put_str(out, r->o.hw_used);
	fputs(",\n  \"hw_source\": ", out);
	json_put_str(out, r->o.hw.source);
	fprintf(out, ",\n  \"nodes\": %d,\n  \"mem_limit\": ", r->o.nodes);
	json_num(out, r->o.mem_limit);
	fputs(",\n  \"axes\": [", out);
	for (int a = 0; a < r->s.naxes; a++) {
		fputs(a ? ", " : "", out);
		json_put_str(out, r->s.axes[a]);
	}
	fprintf(out,
	        "],\n  \"candidates\": %lld,\n  \"ok\": %lld,\n  \"failed\": %lld,\n"
	        "  \"over_mem\": %lld,\n  \"seconds\": ",
	        (long long)r->ncands, (long long)r->nok, (long long)r->nfailed,
	        (long long)r->nover);
	json_num(out, r->seconds);
	fputs(",\n  \"candidates_per_s\": ", out);
	json_num(out, r->seconds > 0 ? (double)r->ncands / r->seconds : 0);
	fprintf(out, ",\n  \"threads\": %d", r->threads);
	fprintf(out, ",\n  \"untried_meshes\": %lld, \"untried\": [", (long long)r->nuntried);
	for (int64_t k = 0; k < r->nuntried && k < SWEEP_MAX_UNTRIED; k++) {
		fputs(k ? ", " : "", out);
		fputs("{\"mesh\": ", out);
		json_put_str(out, r->untried[k]);
		fprintf(out, ", \"batch_ranks\": %lld}", (long long)r->untried_ranks[k]);
	}
	fputs("]", out);
	fputs(",\n  \"ranking\": [", out);
	int top = r->nrank < r->o.top ? r->nrank : r->o.top;
	for (int k = 0; k < top; k++) {
		fputs(k ? ",\n    " : "\n    ", out);
		json_cand(out, r, r->rank[k]);
	}
	fputs(top ? "\n  ],\n  \"pareto\": [" : "],\n  \"pareto\": [", out);
	for (int k = 0; k < r->nfront; k++) {
		fputs(k ? ",\n    " : "\n    ", out);
		json_cand(out, r, r->front[k]);
	}
	fputs(r->nfront ? "\n  ],\n  \"dropped\": [" : "],\n  \"dropped\": [", out);
	bool any = false;
	for (int64_t i = 0; i < r->ncands; i++) {
		if (r->cands[i].status == SWEEP_OK)
			continue;
		fputs(any ? ",\n    " : "\n    ", out);
		json_cand(out, r, (int)i);
		any = true;
	}
	fputs(any ? "\n  ]" : "]", out);
	if (r->o.measure > 0)
		sweep_json_measured(out, r);
	fputs("\n}\n", out);
	return !ferror(out);
}

static void csv_field(FILE *out, const char *s)
{
	if (!s)
		return;
	if (!strpbrk(s, ",\"\n")) {
		fputs(s, out);
		return;
	}
	fputc('"', out);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', out);
		fputc(*s == '\n' ? ' ' : *s, out);
	}
	fputc('"', out);
}

bool sweep_print_csv(FILE *out, const SweepRun *r)
{
	fputs("id,status,rank,mesh,zero,microbatches,schedule,sequence_parallel,context_parallel,"
	      "recompute,choose,"
	      "step_s,tokens_per_s,peak_bytes,hfu,bubble,exposed_comm_s,pareto,reason\n",
	      out);
	int *rank_of = calloc((size_t)(r->ncands + 1), sizeof *rank_of);
	bool *on_front = calloc((size_t)(r->ncands + 1), sizeof *on_front);
	if (!rank_of || !on_front) {
		free(rank_of);
		free(on_front);
		return false;
	}
	for (int k = 0; k < r->nrank; k++)
		rank_of[r->rank[k]] = k + 1;
	for (int k = 0; k < r->nfront; k++)
		on_front[r->front[k]] = true;
	for (int64_t i = 0; i < r->ncands; i++) {
		const SweepCand *c = &r->cands[i];
		char mesh[256], ch[128] = "";
		sweep_mesh_text(r, c, mesh, sizeof mesh);
		size_t n = 0;
		for (int k = 0; k < r->s.nchooses && n < sizeof ch; k++)
			n += (size_t)snprintf(ch + n, sizeof ch - n, "%s%d", k ? ";" : "",
			                      c->choose[k]);
		fprintf(out, "%lld,%s,", (long long)i, status_name(c->status));
		if (rank_of[i])
			fprintf(out, "%d", rank_of[i]);
		fputc(',', out);
		csv_field(out, mesh);
		fprintf(out, ",%d,%d,%s,%d,%s,%d,%s,", c->zero, c->micro,
		        c->sched == SWEEP_SCHED_FILE ? "" : sweep_sched_name(c->sched), c->sp,
		        c->cp_split ? sweep_cp_name(c->cp) : "", c->rc, ch);
		if (c->status == SWEEP_OK || c->status == SWEEP_OVER_MEM)
			fprintf(out, "%.9g,%.9g,%.0f,%.6g,%.6g,%.9g", c->step_s, c->tokens_per_s,
			        c->peak_bytes, c->hfu, c->bubble, c->exposed_s);
		else
			fputs(",,,,,", out);
		fprintf(out, ",%d,", on_front[i]);
		csv_field(out, c->reason);
		fputc('\n', out);
	}
	free(rank_of);
	free(on_front);
	return !ferror(out);
}

static void text_row(FILE *out, const SweepRun *r, int k, int id)
{
	const SweepCand *c = &r->cands[id];
	char mem[32], desc[512];
	sweep_format_bytes(mem, sizeof mem, c->peak_bytes);
	sweep_describe(r, c, desc, sizeof desc);
	if (k > 0)
		fprintf(out, "  %4d", k);
	fprintf(out, "  %12.4g  %12.4g  %11s  %6.1f%%  %8.4g  %s\n", c->step_s * 1e3,
	        c->tokens_per_s, mem, c->bubble * 100, c->exposed_s * 1e3, desc);
}

typedef struct Reason {
	const char *text;
	int64_t count;
} Reason;

static int cmp_reason(const void *a, const void *b)
{
	const Reason *x = a, *y = b;
	return (x->count < y->count) - (x->count > y->count);
}

/* The reasons of the candidates with status st, most frequent first. */
static void print_reasons(FILE *out, const SweepRun *r, int st, const char *what)
{
	int64_t n = st == SWEEP_FAILED ? r->nfailed : r->nover;
	if (n == 0)
		return;
	Reason rs[64];
	int nr = 0;
	int64_t other = 0;
	for (int64_t i = 0; i < r->ncands; i++) {
		const SweepCand *c = &r->cands[i];
		if (c->status != st)
			continue;
		const char *t = c->reason ? c->reason : "?";
		/* over the limit: one line, the amounts differ */
		if (st == SWEEP_OVER_MEM)
			t = "peak per rank over the memory limit";
		int k = 0;
		while (k < nr && strcmp(rs[k].text, t) != 0)
			k++;
		if (k < nr)
			rs[k].count++;
		else if (nr < 64)
			rs[nr++] = (Reason){t, 1};
		else
			other++;
	}
	qsort(rs, (size_t)nr, sizeof *rs, cmp_reason);
	fprintf(out, "\n%lld %s (--json lists each):\n", (long long)n, what);
	for (int k = 0; k < nr && k < 8; k++)
		fprintf(out, "  %6lld  %s\n", (long long)rs[k].count, rs[k].text);
	for (int k = 8; k < nr; k++)
		other += rs[k].count;
	if (other)
		fprintf(out, "  %6lld  (other reasons)\n", (long long)other);
}

bool sweep_print_text(FILE *out, const SweepRun *r)
{
	char lim[32];
	sweep_format_bytes(lim, sizeof lim, r->o.mem_limit);
	fprintf(out, "model %s on %lld devices, hardware %s", r->s.model ? r->s.model : "?",
	        (long long)r->o.devices, r->o.hw.name);
	if (r->o.nodes > 0)
		fprintf(out, " over %d nodes", r->o.nodes);
	else
		fprintf(out, " (%d per node)", r->o.hw.devices_per_node);
	fprintf(out, ", memory limit %s\n", r->o.mem_limit > 0 ? lim : "none");
	if (strcmp(r->o.hw_used, r->o.hw.name) != 0 || r->o.hw.source[0])
		fprintf(out, "profile %s%s%s%s\n", r->o.hw_used, r->o.hw.source[0] ? " (" : "",
		        r->o.hw.source, r->o.hw.source[0] ? ")" : "");
	fprintf(out,
	        "%lld candidates: %lld ranked, %lld did not compile, %lld over the memory "
	        "limit\n",
	        (long long)r->ncands, (long long)r->nok, (long long)r->nfailed,
	        (long long)r->nover);
	if (r->nuntried > 0) {
		fprintf(out, "not tried: %lld mesh%s whose batch ranks do not divide the batch of "
		        "%lld (", (long long)r->nuntried, r->nuntried == 1 ? "" : "es",
		        (long long)r->s.batch);
		for (int64_t k = 0; k < r->nuntried && k < SWEEP_MAX_UNTRIED; k++)
			fprintf(out, "%s%s: %lld", k ? ", " : "", r->untried[k],
			        (long long)r->untried_ranks[k]);
		fprintf(out, "%s); -D a batch they divide, or --train uneven_shards=true\n",
		        r->nuntried > SWEEP_MAX_UNTRIED ? ", ..." : "");
	}
	fprintf(out, "compiled and costed in %.2f s on %d thread%s: %.0f candidates/s\n",
	        r->seconds, r->threads, r->threads == 1 ? "" : "s",
	        r->seconds > 0 ? (double)r->ncands / r->seconds : 0.0);
	const char *head =
	        "  step (ms)      tokens/s    peak/rank  bubble  exposed comm (ms)  layout\n";
	if (r->nrank > 0) {
		int top = r->nrank < r->o.top ? r->nrank : r->o.top;
		fprintf(out, "\nfastest %d:\n     #%s", top, head);
		for (int k = 0; k < top; k++)
			text_row(out, r, k + 1, r->rank[k]);
		fprintf(out, "\nPareto front, peak memory per rank vs step time (%d):\n%s",
		        r->nfront, head);
		for (int k = 0; k < r->nfront; k++)
			text_row(out, r, 0, r->front[k]);
	} else {
		fputs("\nno candidate compiled under the memory limit\n", out);
	}
	print_reasons(out, r, SWEEP_FAILED, "did not compile");
	print_reasons(out, r, SWEEP_OVER_MEM, "over the memory limit");
	return !ferror(out);
}

bool sweep_write_plot(const SweepRun *r, const char *path)
{
	int n = r->nrank;
	double *mem = malloc(sizeof *mem * (size_t)(n + 1));
	double *tim = malloc(sizeof *tim * (size_t)(n + 1));
	bool *front = calloc((size_t)(n + 1), sizeof *front);
	char **label = calloc((size_t)(n + 1), sizeof *label);
	char **tag = calloc((size_t)(n + 1), sizeof *tag);
	bool ok = mem && tim && front && label && tag;
	int *pos = ok ? calloc((size_t)(r->ncands + 1), sizeof *pos) : NULL;
	ok = ok && pos;
	for (int k = 0; ok && k < n; k++) {
		const SweepCand *c = &r->cands[r->rank[k]];
		mem[k] = c->peak_bytes;
		tim[k] = c->step_s;
		pos[r->rank[k]] = k + 1;
		char desc[512], mb[32];
		sweep_describe(r, c, desc, sizeof desc);
		sweep_format_bytes(mb, sizeof mb, c->peak_bytes);
		label[k] = malloc(600);
		if (label[k])
			snprintf(label[k], 600, "#%d %s: %.3f ms, %s", k + 1, desc, c->step_s * 1e3,
			         mb);
		tag[k] = strdup(desc); /* the layout, as the text report and JSON name it */
	}
	for (int k = 0; ok && k < r->nfront; k++)
		front[pos[r->front[k]] - 1] = true;
	FILE *f = ok ? fopen(path, "w") : NULL;
	if (ok && !f)
		fprintf(stderr, "dtmc: error: cannot write '%s'\n", path);
	if (f) {
		char title[256];
		snprintf(title, sizeof title,
		         "%s on %lld devices (%s): %d candidates, Pareto front %d",
		         r->s.model ? r->s.model : "?", (long long)r->o.devices, r->o.hw.name, n,
		         r->nfront);
		bool w = sweep_svg(f, n, mem, tim, front, (const char *const *)label,
		                   (const char *const *)tag, title);
		if (fclose(f) != 0 || !w) {
			fprintf(stderr, "dtmc: error: cannot write '%s'\n", path);
			ok = false;
		}
	} else {
		ok = false;
	}
	for (int k = 0; label && k < n; k++)
		free(label[k]);
	for (int k = 0; tag && k < n; k++)
		free(tag[k]);
	free(label);
	free(tag);
	free(mem);
	free(tim);
	free(front);
	free(pos);
	return ok;
}
