/* log.c - the training log: one JSON object per step in a .jsonl file
 * (machine-read: plots, the oracle and the resume test compare its lines),
 * and for people a progress line with ETA on a terminal or a summary line
 * every few steps when stderr is a file.
 *
 * Losses are printed with %.9g, which round-trips an f32 exactly, so two
 * runs with the same arithmetic print the same text.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "runtime/rt.h"

double rt_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double rt_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int rt_log_open(RtLog *l, const char *path, bool quiet, char *err)
{
	memset(l, 0, sizeof *l);
	l->quiet = quiet;
	l->tty = isatty(2);
	l->print_every = 10;
	l->first_step = -1;
	if (path) {
		l->path = path;
		l->jsonl = fopen(path, "w");
		if (!l->jsonl) {
			snprintf(err, RT_ERR_LEN, "cannot open log '%s': %s", path, strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* A write to the log failed with errno e: the log is closed, and the
 * failure is an error or (warn_only) the one warning. */
static int log_failed(RtLog *l, const char *what, int e, char *err)
{
	fclose(l->jsonl);
	l->jsonl = NULL;
	if (l->warn_only) {
		rt_log_note(l, "warning: cannot %s log '%s': %s; training goes on without it "
			    "(--log-errors warn)", what, l->path, strerror(e));
		return 0;
	}
	return rt_errf(err, "cannot %s log '%s': %s", what, l->path, strerror(e));
}

/* After a line: flushed, so a full disk shows now (and a crash loses no
 * finished line).  errno was cleared before the line, so it holds the
 * first failure of its fprintfs or of this fflush. */
static int log_flush(RtLog *l, char *err)
{
	if (fflush(l->jsonl) == 0 && !ferror(l->jsonl))
		return 0;
	return log_failed(l, "write", errno ? errno : EIO, err);
}

/* JSON has no NaN or Infinity: write null so the line still parses. */
static void json_num(FILE *f, const char *key, double v, const char *fmt)
{
	fprintf(f, ",\"%s\":", key);
	if (isfinite(v))
		fprintf(f, fmt, v);
	else
		fputs("null", f);
}

static void fmt_eta(char *out, size_t n, double s)
{
	if (!(s >= 0) || s > 1e7)
		snprintf(out, n, "?");
	else if (s >= 3600)
		snprintf(out, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
	else if (s >= 60)
		snprintf(out, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
	else
		snprintf(out, n, "%.0fs", s);
}

int rt_log_step(RtLog *l, const RtLogStep *s, char *err)
{
	if (l->jsonl) {
		errno = 0;
		fprintf(l->jsonl, "{\"step\":%lld", (long long)s->step);
		json_num(l->jsonl, "loss", s->loss, "%.9g");
		if (s->has_grad_norm)
			json_num(l->jsonl, "grad_norm", s->grad_norm, "%.9g");
		else
			fputs(",\"grad_norm\":null", l->jsonl);
		json_num(l->jsonl, "lr", s->lr, "%.9g");
		if (s->has_loss_scale) {
			json_num(l->jsonl, "loss_scale", s->loss_scale, "%.9g");
			fprintf(l->jsonl, ",\"skipped\":%s,\"skipped_steps\":%lld",
			        s->skipped ? "true" : "false", (long long)s->skipped_steps);
		}
		if (s->a2a_bytes >= 0)
			fprintf(l->jsonl, ",\"a2a_bytes\":%lld", (long long)s->a2a_bytes);
		if (s->moe_load) {
			int E = s->moe_experts;
			for (int part = 0; part < 2; part++) {
				fprintf(l->jsonl, "%s\"%s\":[", part ? "," : ",\"moe\":{",
				        part ? "dropped" : "load");
				for (int q = 0; q < s->moe_sites; q++) {
					fputs(q ? ",[" : "[", l->jsonl);
					for (int e = 0; e < E; e++)
						fprintf(l->jsonl, "%s%.0f", e ? "," : "",
						        (double)s->moe_load[(q * 2 + part) * E + e]);
					fputc(']', l->jsonl);
				}
				fputc(']', l->jsonl);
			}
			fputc('}', l->jsonl);
		}
		json_num(l->jsonl, "tokens_per_s", s->tokens_per_s, "%.1f");
		json_num(l->jsonl, "ms", s->ms, "%.3f");
		json_num(l->jsonl, "compute_ms", s->compute_ms, "%.3f");
		json_num(l->jsonl, "comm_ms", s->comm_ms, "%.3f");
		json_num(l->jsonl, "compute_s", s->compute_s, "%.6f");
		json_num(l->jsonl, "comm_s", s->comm_s, "%.6f");
		json_num(l->jsonl, "idle_s", s->idle_s, "%.6f");
		json_num(l->jsonl, "feed_ms", s->feed_ms, "%.3f");
		fputs("}\n", l->jsonl);
		if (log_flush(l, err))
			return -1;
	}
	if (l->quiet)
		return 0;
	double now = rt_now();
	if (l->first_step < 0) {
		l->first_step = s->step;
		l->t0 = now - s->ms * 1e-3;
	}
	int64_t done = s->step - l->first_step + 1, left = s->steps - s->step;
	double eta = done > 0 ? (now - l->t0) / (double)done * (double)left : NAN;
	char etas[32];
	fmt_eta(etas, sizeof etas, eta);
	if (l->tty) {
		/* a terminal redrawn 10 times a second is enough to read */
		if (s->step != s->steps && now - l->last_draw < 0.1)
			return 0;
		l->last_draw = now;
		fprintf(stderr, "\rstep %lld/%lld  loss %.4f  lr %.3g  %.0f tok/s  %.1f ms  ETA %s\033[K",
			(long long)s->step, (long long)s->steps, s->loss, s->lr, s->tokens_per_s,
			s->ms, etas);
		l->progress_open = true;
		if (s->step == s->steps) {
			fputc('\n', stderr);
			l->progress_open = false;
		}
	} else if (s->step % l->print_every == 0 || s->step == s->steps ||
		   s->step == l->first_step) {
		fprintf(stderr, "step %lld/%lld  loss %.6f  lr %.3g  %.0f tok/s  %.1f ms  ETA %s\n",
			(long long)s->step, (long long)s->steps, s->loss, s->lr, s->tokens_per_s,
			s->ms, etas);
	}
	fflush(stderr);
	return 0;
}

static void end_progress(RtLog *l)
{
	if (l && l->progress_open) {
		fputc('\n', stderr);
		l->progress_open = false;
	}
}

int rt_log_eval(RtLog *l, int64_t step, double loss, char *err)
{
	if (l->jsonl) {
		errno = 0;
		fprintf(l->jsonl, "{\"step\":%lld", (long long)step);
		json_num(l->jsonl, "eval_loss", loss, "%.9g");
		fputs("}\n", l->jsonl);
		if (log_flush(l, err))
			return -1;
	}
	if (!l->quiet) {
		end_progress(l);
		fprintf(stderr, "step %lld  eval loss %.6f\n", (long long)step, loss);
	}
	return 0;
}

/* s as a JSON string: quotes, backslashes and control characters escaped
 * (paths and error messages may hold any of them) */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\')
			fprintf(f, "\\%c", *c);
		else if (*c < 0x20)
			fprintf(f, "\\u%04x", *c);
		else
			fputc(*c, f);
	}
	fputc('"', f);
}

int rt_log_event(RtLog *l, const char *event, const char *ckpt, int64_t step, const char *why,
		 char *err)
{
	if (!l->jsonl)
		return 0;
	errno = 0;
	fputs("{\"event\":", l->jsonl);
	json_str(l->jsonl, event);
	fputs(",\"checkpoint\":", l->jsonl);
	json_str(l->jsonl, ckpt);
	if (step >= 0)
		fprintf(l->jsonl, ",\"step\":%lld", (long long)step);
	if (why) {
		fputs(",\"error\":", l->jsonl);
		json_str(l->jsonl, why);
	}
	fputs("}\n", l->jsonl);
	return log_flush(l, err);
}

int rt_log_close(RtLog *l, char *err)
{
	end_progress(l);
	if (!l->jsonl)
		return 0;
	/* what the lines' fflush handed the kernel reaches the disk here; a
	 * pipe or /dev/null cannot be synced (EINVAL), which is no failure */
	errno = 0;
	if (fflush(l->jsonl) != 0 || ferror(l->jsonl))
		return log_failed(l, "write", errno ? errno : EIO, err);
	if (fsync(fileno(l->jsonl)) != 0 && errno != EINVAL && errno != EROFS &&
	    errno != ENOTSUP)
		return log_failed(l, "fsync", errno, err);
	FILE *f = l->jsonl;
	l->jsonl = NULL;
	if (fclose(f) != 0) {
		int e = errno;
		if (l->warn_only) {
			rt_log_note(l, "warning: cannot close log '%s': %s (--log-errors warn)",
				    l->path, strerror(e));
			return 0;
		}
		return rt_errf(err, "cannot close log '%s': %s", l->path, strerror(e));
	}
	return 0;
}

/* One line on stderr in one write(2): ranks that fail together (threads
 * of this process, or processes of an mpirun sharing its stderr) print
 * whole lines, never "error: error: ..." mixed up.  A line is cut at 4 KB. */
static void line_v(const char *prefix, const char *fmt, va_list ap)
{
	char buf[4096];
	int n = snprintf(buf, sizeof buf, "%s", prefix);
	int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
	n = m < 0 ? n : n + m < (int)sizeof buf - 1 ? n + m : (int)sizeof buf - 2;
	buf[n++] = '\n';
	fflush(stderr); /* whatever stdio holds goes first */
	for (int k = 0; k < n;) {
		ssize_t w = write(2, buf + k, (size_t)(n - k));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		k += (int)w;
	}
}

void rt_log_line(const char *prefix, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	line_v(prefix, fmt, ap);
	va_end(ap);
}

void rt_log_error(RtLog *l, const char *fmt, ...)
{
	va_list ap;
	end_progress(l);
	va_start(ap, fmt);
	line_v("error: ", fmt, ap);
	va_end(ap);
}

void rt_log_note(RtLog *l, const char *fmt, ...)
{
	va_list ap;
	end_progress(l);
	va_start(ap, fmt);
	line_v("", fmt, ap);
	va_end(ap);
}

const char *rt_ranks_name(const int *ranks, int n, char *buf, int len)
{
	int k = snprintf(buf, (size_t)len, "rank%s ", n > 1 ? "s" : "");
	for (int i = 0; i < n && k < len; ) {
		int j = i;
		while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
			j++;
		k += snprintf(buf + k, (size_t)(len - k), "%s%d", i ? ", " : "", ranks[i]);
		if (j > i && k < len)
			k += snprintf(buf + k, (size_t)(len - k), "-%d", ranks[j]);
		i = j + 1;
	}
	if (k >= len && len > 4)
		memcpy(buf + len - 4, "...", 4);
	return buf;
}

int rt_errf(char *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, RT_ERR_LEN, fmt, ap);
	va_end(ap);
	return -1;
}
