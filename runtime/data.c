/* data.c - synthetic Markov tokens, synthetic regression, and the llm.c
 * token-file reader; see data.h for the contracts. */
#include "runtime/data.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/philox.h"

static int seterr(char *err, size_t errlen, int code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static int seterr(char *err, size_t errlen, int code, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* A uniform integer in [0, n) from 32 random bits (multiply-shift: no
 * division, and integer-only so every platform agrees). */
static uint32_t below(uint32_t w, uint32_t n)
{
	return (uint32_t)(((uint64_t)w * n) >> 32);
}

/* ---- Markov chain ---- */

/* Cumulative successor probabilities as fractions of 2^32, so the branch
 * taken is decided by integer comparison and is bit-exact everywhere. */
static const double markov_p[DTM_MARKOV_K] = {0.45, 0.25, 0.12, 0.08};
#define MARKOV_T0 1932735283u /* 0.45 * 2^32 */
#define MARKOV_T1 3006477107u /* 0.70 * 2^32 */
#define MARKOV_T2 3521873183u /* 0.82 * 2^32 */
#define MARKOV_T3 3865470566u /* 0.90 * 2^32 */

int dtm_markov_successors(uint64_t seed, int vocab, int token, int32_t succ[DTM_MARKOV_K])
{
	if (vocab < DTM_MARKOV_K || token < 0 || token >= vocab)
		return DTM_DATA_EARG;
	uint32_t o[4];
	philox_block(seed, PHILOX_DOMAIN_MARKOV, (uint64_t)token, 0, o);
	for (int k = 0; k < DTM_MARKOV_K; k++) {
		uint32_t c = below(o[k], (uint32_t)vocab);
		/* redraw duplicates from fresh blocks; after 64 tries (only
		 * plausible for tiny vocabularies) probe linearly, which
		 * always terminates because vocab >= K */
		for (int attempt = 1;; attempt++) {
			int dup = 0;
			for (int j = 0; j < k; j++)
				dup |= succ[j] == (int32_t)c;
			if (!dup)
				break;
			if (attempt <= 64) {
				uint32_t r[4];
				philox_block(seed, PHILOX_DOMAIN_MARKOV, (uint64_t)token,
				                 (uint64_t)attempt, r);
				c = below(r[k], (uint32_t)vocab);
			} else {
				c = (c + 1) % (uint32_t)vocab;
			}
		}
		succ[k] = (int32_t)c;
	}
	return DTM_DATA_OK;
}

double dtm_markov_entropy(int vocab)
{
	if (vocab < DTM_MARKOV_K)
		return 0.0;
	double rest = 1.0, h = 0.0, u;
	for (int k = 0; k < DTM_MARKOV_K; k++)
		rest -= markov_p[k];
	u = rest / vocab;
	for (int k = 0; k < DTM_MARKOV_K; k++)
		h -= (markov_p[k] + u) * log(markov_p[k] + u);
	h -= (double)(vocab - DTM_MARKOV_K) * u * log(u);
	return h;
}

int dtm_data_synth_tokens(uint64_t seed, int vocab, uint64_t sample_index, int n, int32_t *out)
{
	if (vocab < DTM_MARKOV_K || n < 0 || (n > 0 && !out))
		return DTM_DATA_EARG;
	for (int p = 0; p < n; p++) {
		uint32_t o[4];
		philox_block(seed, PHILOX_DOMAIN_SEQ, (uint64_t)p, sample_index, o);
		if (p == 0) {
			out[0] = (int32_t)below(o[1], (uint32_t)vocab);
			continue;
		}
		int32_t succ[DTM_MARKOV_K];
		dtm_markov_successors(seed, vocab, out[p - 1], succ);
		uint32_t w = o[0];
		if (w < MARKOV_T0)
			out[p] = succ[0];
		else if (w < MARKOV_T1)
			out[p] = succ[1];
		else if (w < MARKOV_T2)
			out[p] = succ[2];
		else if (w < MARKOV_T3)
			out[p] = succ[3];
		else
			out[p] = (int32_t)below(o[1], (uint32_t)vocab);
	}
	return DTM_DATA_OK;
}

/* ---- regression ---- */

int dtm_regression_init(DtmRegression *r, uint64_t seed, int in_dim, int out_dim, char *err,
                        size_t errlen)
{
	memset(r, 0, sizeof *r);
	if (in_dim <= 0 || out_dim <= 0)
		return seterr(err, errlen, DTM_DATA_EARG,
		              "regression dims must be positive (%d, %d)", in_dim, out_dim);
	r->w = malloc((size_t)in_dim * (size_t)out_dim * sizeof *r->w);
	r->wt = malloc((size_t)in_dim * (size_t)out_dim * sizeof *r->wt);
	if (!r->w || !r->wt) {
		free(r->w);
		free(r->wt);
		r->w = r->wt = NULL;
		return seterr(err, errlen, DTM_DATA_ENOMEM, "out of memory for a %dx%d map",
		              out_dim, in_dim);
	}
	r->seed = seed;
	r->in_dim = in_dim;
	r->out_dim = out_dim;
	double scale = 1.0 / sqrt((double)in_dim);
	for (size_t i = 0; i < (size_t)in_dim * (size_t)out_dim; i++) {
		uint32_t o[4];
		philox_block(seed, PHILOX_DOMAIN_REGW, i, 0, o);
		r->w[i] = (float)(scale * philox_box_muller(o[0], o[1]));
	}
	for (int k = 0; k < out_dim; k++)
		for (int j = 0; j < in_dim; j++)
			r->wt[(size_t)j * (size_t)out_dim + (size_t)k] =
				r->w[(size_t)k * (size_t)in_dim + (size_t)j];
	return DTM_DATA_OK;
}

void dtm_regression_sample(const DtmRegression *r, uint64_t sample_index, float *x, float *y)
{
	dtm_regression_input(r, sample_index, x);
	dtm_regression_target(r, x, y);
}

void dtm_regression_target(const DtmRegression *r, const float *x, float *y)
{
	/* double accumulation in a fixed order (j ascending) for each target:
	 * it must not depend on how the runtime happens to vectorise.  The
	 * targets of a chunk are summed side by side (each in its own order,
	 * so the same bits as one at a time), the loads of w^T contiguous:
	 * the loop over targets vectorises without reordering any sum. */
	enum { CHUNK = 256 };
	int n = r->in_dim, m = r->out_dim;
	for (int k0 = 0; k0 < m; k0 += CHUNK) {
		int nk = m - k0 < CHUNK ? m - k0 : CHUNK;
		double z[CHUNK];
		for (int q = 0; q < nk; q++)
			z[q] = 0.0;
		for (int j = 0; j < n; j++) {
			double xj = (double)x[j];
			const float *wj = r->wt + (size_t)j * (size_t)m + (size_t)k0;
			for (int q = 0; q < nk; q++)
				z[q] += (double)wj[q] * xj;
		}
		for (int q = 0; q < nk; q++)
			y[k0 + q] = (float)tanh(z[q]);
	}
}

void dtm_regression_input(const DtmRegression *r, uint64_t sample_index, float *x)
{
	for (int j = 0; j < r->in_dim; j++) {
		uint32_t o[4];
		philox_block(r->seed, PHILOX_DOMAIN_REGX, (uint64_t)j, sample_index, o);
		x[j] = (float)philox_box_muller(o[0], o[1]);
	}
}

void dtm_regression_free(DtmRegression *r)
{
	free(r->w);
	free(r->wt);
	r->w = r->wt = NULL;
}

/* ---- llm.c token files ---- */

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int dtm_tokens_open(DtmTokenFile *tf, const char *path, char *err, size_t errlen)
{
	memset(tf, 0, sizeof *tf);
	snprintf(tf->path, sizeof tf->path, "%s", path);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return seterr(err, errlen, DTM_DATA_EOPEN, "%s: cannot open: %s", path,
		              strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return seterr(err, errlen, DTM_DATA_EOPEN, "%s: cannot stat: %s", path,
		              strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return seterr(err, errlen, DTM_DATA_EOPEN, "%s: not a regular file", path);
	}
	size_t size = (size_t)st.st_size;
	const size_t hdr = DTM_TOKENS_HEADER_INTS * 4;
	if (size < hdr) {
		close(fd);
		return seterr(
		        err, errlen, DTM_DATA_ESHORT,
		        "%s: not an llm.c token file: %zu bytes, shorter than the %zu-byte header",
		        path, size, hdr);
	}
	void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	int e = errno;
	close(fd); /* the mapping keeps the file alive */
	if (map == MAP_FAILED)
		return seterr(err, errlen, DTM_DATA_EOPEN, "%s: cannot mmap: %s", path,
		              strerror(e));
	const unsigned char *b = map;
	int32_t magic = (int32_t)le32(b), version = (int32_t)le32(b + 4);
	int32_t ntok = (int32_t)le32(b + 8);
	int code = DTM_DATA_OK;
	if (magic != DTM_TOKENS_MAGIC)
		code = seterr(err, errlen, DTM_DATA_EMAGIC,
		              "%s: not an llm.c token file: magic %d, expected %d", path, magic,
		              DTM_TOKENS_MAGIC);
	else if (version != DTM_TOKENS_VERSION)
		code = seterr(err, errlen, DTM_DATA_EVERSION,
		              "%s: unsupported llm.c token file version %d, expected %d", path,
		              version, DTM_TOKENS_VERSION);
	else if (ntok < 0)
		code = seterr(err, errlen, DTM_DATA_ETRUNC, "%s: negative token count %d in header",
		              path, ntok);
	else if ((uint64_t)(size - hdr) / 2 < (uint64_t)ntok)
		code = seterr(err, errlen, DTM_DATA_ETRUNC,
		              "%s: truncated: header says %d tokens, file holds %zu", path, ntok,
		              (size - hdr) / 2);
	else if ((uint64_t)(size - hdr) != 2 * (uint64_t)ntok)
		code = seterr(err, errlen, DTM_DATA_ETRAIL,
		              "%s: %zu bytes, expected %zu for the header's %d tokens "
		              "(bytes after the last token)",
		              path, size, hdr + 2 * (size_t)ntok, ntok);
	if (code != DTM_DATA_OK) {
		munmap(map, size);
		return code;
	}
	tf->map = map;
	tf->map_len = size;
	tf->tokens = (const uint16_t *)(b + hdr);
	tf->ntokens = (uint64_t)ntok;
	return DTM_DATA_OK;
}

int dtm_tokens_sample(const DtmTokenFile *tf, uint64_t sample_index, int T, int vocab, int32_t *out,
                      char *err, size_t errlen)
{
	if (!tf->map || T <= 0 || !out)
		return seterr(err, errlen, DTM_DATA_EARG, "%s: bad token sample request (T=%d)",
		              tf->path, T);
	if (tf->ntokens < (uint64_t)T + 1)
		return seterr(err, errlen, DTM_DATA_ETOOFEW,
		              "%s: %llu tokens, need at least T+1 = %d for one sample", tf->path,
		              (unsigned long long)tf->ntokens, T + 1);
	/* ntokens - T start positions leave room for T+1 tokens; reduce both
	 * factors first so the product never overflows */
	uint64_t usable = tf->ntokens - (uint64_t)T;
	uint64_t off = ((sample_index % usable) * ((uint64_t)T % usable)) % usable;
	const unsigned char *p = (const unsigned char *)(tf->tokens + off);
	for (int t = 0; t <= T; t++) {
		/* byte-wise little-endian read: no alignment or host-order
		 * assumptions about the mapping */
		int32_t tok = (int32_t)(p[2 * t] | p[2 * t + 1] << 8);
		if (vocab > 0 && tok >= vocab)
			return seterr(err, errlen, DTM_DATA_ETOKEN,
			              "%s: token %d at position %llu is >= vocab %d", tf->path, tok,
			              (unsigned long long)(off + (uint64_t)t), vocab);
		out[t] = tok;
	}
	return DTM_DATA_OK;
}

int dtm_tokens_check(const DtmTokenFile *tf, int vocab, char *err, size_t errlen)
{
	if (vocab <= 0 || !tf->map)
		return DTM_DATA_OK;
	/* the maximum first, a loop the compiler vectorises; the position
	 * only when there is a bad token */
	const unsigned char *p = (const unsigned char *)tf->tokens;
	unsigned max = 0;
	for (uint64_t i = 0; i < tf->ntokens; i++) {
		unsigned t = (unsigned)p[2 * i] | (unsigned)p[2 * i + 1] << 8;
		max = t > max ? t : max;
	}
	if (max < (unsigned)vocab)
		return DTM_DATA_OK;
	uint64_t i = 0;
	unsigned t = 0;
	for (; i < tf->ntokens; i++) {
		t = (unsigned)p[2 * i] | (unsigned)p[2 * i + 1] << 8;
		if (t >= (unsigned)vocab)
			break;
	}
	return seterr(err, errlen, DTM_DATA_ETOKEN, "%s: token %u at position %llu is >= vocab %d",
	              tf->path, t, (unsigned long long)i, vocab);
}

void dtm_tokens_close(DtmTokenFile *tf)
{
	if (tf->map)
		munmap(tf->map, tf->map_len);
	tf->map = NULL;
	tf->tokens = NULL;
	tf->ntokens = 0;
}

/* ---- several files as one stream ---- */

/* Appends path to s->files, opened and checked. */
static int shards_add(DtmTokenShards *s, const char *path, int vocab, char *err, size_t errlen)
{
	if ((s->nfiles & (s->nfiles - 1)) == 0) { /* 0, 1, 2, 4, ...: grow */
		size_t cap = s->nfiles ? 2 * (size_t)s->nfiles : 1;
		DtmTokenFile *f = realloc(s->files, cap * sizeof *f);
		if (!f)
			return seterr(err, errlen, DTM_DATA_ENOMEM, "out of memory for %zu files",
			              cap);
		s->files = f;
	}
	DtmTokenFile *tf = &s->files[s->nfiles];
	int rc = dtm_tokens_open(tf, path, err, errlen);
	if (rc == DTM_DATA_OK && (rc = dtm_tokens_check(tf, vocab, err, errlen)) != DTM_DATA_OK)
		dtm_tokens_close(tf);
	if (rc == DTM_DATA_OK)
		s->nfiles++;
	return rc;
}

/* One item of a spec: a path, or a pattern standing for its matches. */
static int shards_add_item(DtmTokenShards *s, const char *item, int vocab, char *err,
                           size_t errlen)
{
	if (!*item)
		return seterr(err, errlen, DTM_DATA_ESPEC, "an empty item in the list of files");
	if (!strpbrk(item, "*?["))
		return shards_add(s, item, vocab, err, errlen);
	glob_t g;
	int grc = glob(item, 0, NULL, &g);
	if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
		if (grc == 0)
			globfree(&g);
		return seterr(err, errlen, DTM_DATA_ENOMATCH, "%s: no file matches the pattern",
		              item);
	}
	if (grc != 0)
		return seterr(err, errlen, grc == GLOB_NOSPACE ? DTM_DATA_ENOMEM : DTM_DATA_EOPEN,
		              "%s: cannot expand the pattern (glob error %d)", item, grc);
	int rc = DTM_DATA_OK;
	for (size_t i = 0; i < g.gl_pathc && rc == DTM_DATA_OK; i++) /* sorted by glob */
		rc = shards_add(s, g.gl_pathv[i], vocab, err, errlen);
	globfree(&g);
	return rc;
}

int dtm_shards_open(DtmTokenShards *s, const char *spec, int vocab, char *err, size_t errlen)
{
	memset(s, 0, sizeof *s);
	if (!spec || !*spec)
		return seterr(err, errlen, DTM_DATA_ESPEC, "no token files named");
	int rc = DTM_DATA_OK;
	if (!strpbrk(spec, "*?[") && access(spec, F_OK) == 0) {
		rc = shards_add(s, spec, vocab, err, errlen);
	} else {
		char *list = strdup(spec);
		if (!list)
			return seterr(err, errlen, DTM_DATA_ENOMEM, "out of memory");
		for (char *item = list, *next; item && rc == DTM_DATA_OK; item = next) {
			char *comma = strchr(item, ',');
			next = comma ? comma + 1 : NULL;
			if (comma)
				*comma = 0;
			rc = shards_add_item(s, item, vocab, err, errlen);
		}
		free(list);
	}
	if (rc == DTM_DATA_OK) {
		s->first = malloc(((size_t)s->nfiles + 1) * sizeof *s->first);
		if (!s->first)
			rc = seterr(err, errlen, DTM_DATA_ENOMEM, "out of memory");
	}
	if (rc != DTM_DATA_OK) {
		dtm_shards_close(s);
		return rc;
	}
	uint64_t h = HASH_FNV1A64_INIT;
	for (int i = 0; i < s->nfiles; i++) {
		const char *base = strrchr(s->files[i].path, '/');
		base = base ? base + 1 : s->files[i].path;
		char count[32];
		int n = snprintf(count, sizeof count, ":%llu\n",
		                 (unsigned long long)s->files[i].ntokens);
		h = hash_fnv1a64_bytes(hash_fnv1a64_bytes(h, base, strlen(base)), count, (size_t)n);
		s->first[i] = s->ntokens;
		s->ntokens += s->files[i].ntokens;
	}
	s->first[s->nfiles] = s->ntokens;
	s->id = h;
	return DTM_DATA_OK;
}

int dtm_shards_sample(const DtmTokenShards *s, uint64_t sample_index, int T, int vocab,
                      int32_t *out, char *err, size_t errlen)
{
	if (!s->first || T <= 0 || !out)
		return seterr(err, errlen, DTM_DATA_EARG, "bad token sample request (T=%d)", T);
	if (s->ntokens < (uint64_t)T + 1)
		return s->nfiles == 1 ?
		        seterr(err, errlen, DTM_DATA_ETOOFEW,
		               "%s: %llu tokens, need at least T+1 = %d for one sample",
		               s->files[0].path, (unsigned long long)s->ntokens, T + 1) :
		        seterr(err, errlen, DTM_DATA_ETOOFEW,
		               "%d files hold %llu tokens in all, need at least T+1 = %d for "
		               "one sample",
		               s->nfiles, (unsigned long long)s->ntokens, T + 1);
	/* as dtm_tokens_sample: reduce both factors so nothing overflows */
	uint64_t usable = s->ntokens - (uint64_t)T;
	uint64_t pos = ((sample_index % usable) * ((uint64_t)T % usable)) % usable;
	/* the last file starting at or before pos (empty files before it
	 * start at the same place and are passed over) */
	int lo = 0, hi = s->nfiles - 1;
	while (lo < hi) {
		int mid = lo + (hi - lo + 1) / 2;
		if (s->first[mid] <= pos)
			lo = mid;
		else
			hi = mid - 1;
	}
	int k = lo;
	uint64_t off = pos - s->first[k];
	for (int t = 0; t <= T; t++, off++) {
		while (off >= s->files[k].ntokens) { /* on into the next file */
			off = 0;
			k++;
		}
		const unsigned char *p = (const unsigned char *)(s->files[k].tokens + off);
		int32_t tok = (int32_t)(p[0] | p[1] << 8);
		if (vocab > 0 && tok >= vocab)
			return seterr(err, errlen, DTM_DATA_ETOKEN,
			              "%s: token %d at position %llu is >= vocab %d",
			              s->files[k].path, tok, (unsigned long long)off, vocab);
		out[t] = tok;
	}
	return DTM_DATA_OK;
}

void dtm_shards_describe(const DtmTokenShards *s, char *out, size_t n)
{
	snprintf(out, n, "%d file%s, %llu tokens, id %016llx", s->nfiles, s->nfiles == 1 ? "" : "s",
	         (unsigned long long)s->ntokens, (unsigned long long)s->id);
}

void dtm_shards_close(DtmTokenShards *s)
{
	for (int i = 0; i < s->nfiles; i++)
		dtm_tokens_close(&s->files[i]);
	free(s->files);
	free(s->first);
	memset(s, 0, sizeof *s);
}

/* ---- --data synthetic|SHARDS ---- */

int dtm_data_open(DtmData *d, const char *spec, uint64_t seed, int vocab, char *err, size_t errlen)
{
	memset(d, 0, sizeof *d);
	d->seed = seed;
	d->vocab = vocab;
	if (!spec || strcmp(spec, "synthetic") == 0) {
		if (vocab < DTM_MARKOV_K)
			return seterr(err, errlen, DTM_DATA_EARG,
			              "synthetic data needs vocab >= %d, got %d", DTM_MARKOV_K,
			              vocab);
		return DTM_DATA_OK;
	}
	int rc = dtm_shards_open(&d->shards, spec, vocab, err, errlen);
	d->is_file = rc == DTM_DATA_OK;
	return rc;
}

int dtm_data_batch(const DtmData *d, uint64_t first_sample, int count, int T, int32_t *inputs,
                   int32_t *targets, char *err, size_t errlen)
{
	if (count < 0 || T <= 0 || !inputs || !targets)
		return seterr(err, errlen, DTM_DATA_EARG, "bad batch request (count=%d, T=%d)",
		              count, T);
	int32_t *tok = malloc(((size_t)T + 1) * sizeof *tok);
	if (!tok)
		return seterr(err, errlen, DTM_DATA_ENOMEM, "out of memory for a batch");
	int rc = DTM_DATA_OK;
	for (int b = 0; b < count && rc == DTM_DATA_OK; b++) {
		uint64_t s = first_sample + (uint64_t)b;
		if (d->is_file)
			rc = dtm_shards_sample(&d->shards, s, T, d->vocab, tok, err, errlen);
		else
			rc = dtm_data_synth_tokens(d->seed, d->vocab, s, T + 1, tok);
		if (rc != DTM_DATA_OK)
			break;
		memcpy(inputs + (size_t)b * (size_t)T, tok, (size_t)T * sizeof *tok);
		memcpy(targets + (size_t)b * (size_t)T, tok + 1, (size_t)T * sizeof *tok);
	}
	free(tok);
	return rc;
}

void dtm_data_close(DtmData *d)
{
	if (d->is_file)
		dtm_shards_close(&d->shards);
	d->is_file = 0;
}
