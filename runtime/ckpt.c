/* ckpt.c - safetensors writer and validating reader, the checkpoint index
 * and the step-directory layout; see ckpt.h for the formats and the crash
 * argument. */
#include "runtime/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/fsio.h"
#include "support/json.h"

static int seterr(char *err, size_t errlen, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static int seterr(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* ---- dtypes ---- */

static const struct {
	const char *name;
	size_t size;
} dtypes[DTM_DT_COUNT] = {
        [DTM_DT_F32] = {"F32", 4}, [DTM_DT_BF16] = {"BF16", 2}, [DTM_DT_F16] = {"F16", 2},
        [DTM_DT_F64] = {"F64", 8}, [DTM_DT_I32] = {"I32", 4},   [DTM_DT_I64] = {"I64", 8},
        [DTM_DT_U8] = {"U8", 1},
};

const char *dtm_st_dtype_name(DtmStDtype dt)
{
	return (unsigned)dt < DTM_DT_COUNT ? dtypes[dt].name : "?";
}

size_t dtm_st_dtype_size(DtmStDtype dt)
{
	return (unsigned)dt < DTM_DT_COUNT ? dtypes[dt].size : 0;
}

int dtm_st_dtype_parse(const char *s, DtmStDtype *out)
{
	for (int i = 0; i < DTM_DT_COUNT; i++)
		if (strcmp(s, dtypes[i].name) == 0) {
			*out = (DtmStDtype)i;
			return 0;
		}
	return -1;
}

/* ---- CRC32C ---- */

/* Slicing-by-8 over the reflected Castagnoli polynomial: tab[0] is the
 * byte-at-a-time table, tab[k] advances a byte through k more zero
 * bytes, so eight bytes cost eight lookups (about 1 GB/s). */
static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_tab[0][i] = c;
	}
	for (int t = 1; t < 8; t++)
		for (int i = 0; i < 256; i++)
			crc_tab[t][i] =
			        (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t dtm_crc32c(uint32_t crc, const void *buf, size_t n)
{
	pthread_once(&crc_once, crc_init);
	const unsigned char *p = buf;
	crc = ~crc;
	for (; n >= 8; p += 8, n -= 8) {
		uint32_t lo = crc ^ le32(p), hi = le32(p + 4);
		crc = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^
		      crc_tab[5][(lo >> 16) & 0xff] ^ crc_tab[4][lo >> 24] ^ crc_tab[3][hi & 0xff] ^
		      crc_tab[2][(hi >> 8) & 0xff] ^ crc_tab[1][(hi >> 16) & 0xff] ^
		      crc_tab[0][hi >> 24];
	}
	for (; n; p++, n--)
		crc = (crc >> 8) ^ crc_tab[0][(crc ^ *p) & 0xff];
	return ~crc;
}

/* ---- writer ---- */

/* numel * elem size, or -1 on overflow / bad dims */
static int64_t tensor_nbytes(int ndim, const int64_t *shape, size_t elem)
{
	if (ndim < 0 || ndim > DTM_MAX_DIMS)
		return -1;
	uint64_t n = 1;
	for (int d = 0; d < ndim; d++) {
		if (shape[d] < 0)
			return -1;
		if (shape[d] != 0 && n > (UINT64_C(1) << 62) / (uint64_t)shape[d])
			return -1;
		n *= (uint64_t)shape[d];
	}
	if (n > (UINT64_C(1) << 62) / elem)
		return -1;
	return (int64_t)(n * elem);
}

static int cmp_str_ptr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int dtm_st_write(const char *path, const DtmTensorDesc *t, int nt, const DtmMetaKV *meta, int nmeta,
                 char *err, size_t errlen)
{
	if (nt < 0 || nmeta < 0 || (nt && !t) || (nmeta && !meta))
		return seterr(err, errlen, "%s: bad tensor list", path);
	/* validate everything before touching the disk */
	const char **names = malloc(((size_t)nt + 1) * sizeof *names);
	if (!names)
		return seterr(err, errlen, "%s: out of memory", path);
	for (int i = 0; i < nt; i++) {
		const char *why = NULL;
		if (!t[i].name || !t[i].name[0])
			why = "empty name";
		else if (strcmp(t[i].name, "__metadata__") == 0)
			why = "reserved name";
		else if ((unsigned)t[i].dtype >= DTM_DT_COUNT)
			why = "bad dtype";
		else if (tensor_nbytes(t[i].ndim, t[i].shape, dtm_st_dtype_size(t[i].dtype)) < 0)
			why = "bad shape";
		else if (!t[i].data && tensor_nbytes(t[i].ndim, t[i].shape, 1) > 0)
			why = "no data";
		if (why) {
			free(names);
			return seterr(err, errlen, "%s: tensor %d (%s): %s", path, i,
			              t[i].name ? t[i].name : "(null)", why);
		}
		names[i] = t[i].name;
	}
	for (int i = 0; i < nmeta; i++)
		if (meta[i].key &&
		    strncmp(meta[i].key, DTM_ST_CRC_PREFIX, strlen(DTM_ST_CRC_PREFIX)) == 0) {
			free(names);
			return seterr(err, errlen, "%s: metadata key \"%s\" is reserved", path,
			              meta[i].key);
		}
	qsort(names, (size_t)nt, sizeof *names, cmp_str_ptr);
	for (int i = 1; i < nt; i++)
		if (strcmp(names[i - 1], names[i]) == 0) {
			int r = seterr(err, errlen, "%s: duplicate tensor name %s", path, names[i]);
			free(names);
			return r;
		}
	free(names);

	JsonBuf h = {0};
	json_buf_append(&h, "{", 1);
	if (nmeta + nt > 0) {
		json_buf_str(&h, "__metadata__");
		json_buf_append(&h, ":{", 2);
		for (int i = 0; i < nmeta; i++) {
			if (i)
				json_buf_append(&h, ",", 1);
			json_buf_str(&h, meta[i].key ? meta[i].key : "");
			json_buf_append(&h, ":", 1);
			json_buf_str(&h, meta[i].value ? meta[i].value : "");
		}
		/* the checksums, computed from the caller's memory: what is
		 * written next is what they cover */
		for (int i = 0; i < nt; i++) {
			size_t nb = (size_t)tensor_nbytes(t[i].ndim, t[i].shape,
			                                  dtm_st_dtype_size(t[i].dtype));
			JsonBuf key = {0};
			json_buf_printf(&key, "%s%s", DTM_ST_CRC_PREFIX, t[i].name);
			if (i || nmeta > 0)
				json_buf_append(&h, ",", 1);
			json_buf_str(&h, key.failed ? "" : key.p);
			h.failed |= key.failed;
			json_buf_free(&key);
			json_buf_printf(&h, ":\"%08" PRIx32 "\"", dtm_crc32c(0, t[i].data, nb));
		}
		json_buf_append(&h, "}", 1);
	}
	uint64_t off = 0;
	for (int i = 0; i < nt; i++) {
		uint64_t nb =
		        (uint64_t)tensor_nbytes(t[i].ndim, t[i].shape, dtm_st_dtype_size(t[i].dtype));
		if (i || nmeta + nt > 0)
			json_buf_append(&h, ",", 1);
		json_buf_str(&h, t[i].name);
		json_buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", dtm_st_dtype_name(t[i].dtype));
		for (int d = 0; d < t[i].ndim; d++)
			json_buf_printf(&h, "%s%" PRId64, d ? "," : "", t[i].shape[d]);
		json_buf_printf(&h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + nb);
		off += nb;
	}
	json_buf_append(&h, "}", 1);
	while (!h.failed && h.len % 8)
		json_buf_append(&h, " ", 1);
	if (h.failed || h.len > DTM_ST_MAX_HEADER) {
		json_buf_free(&h);
		return seterr(err, errlen, "%s: header too large or out of memory", path);
	}

	unsigned char len8[8];
	for (int k = 0; k < 8; k++)
		len8[k] = (unsigned char)((uint64_t)h.len >> (8 * k));
	RtAtomicFile af;
	if (rt_afile_open(&af, path, err, errlen)) {
		json_buf_free(&h);
		return -1;
	}
	int rc = rt_afile_write(&af, len8, 8, err, errlen);
	if (!rc)
		rc = rt_afile_write(&af, h.p, h.len, err, errlen);
	json_buf_free(&h);
	for (int i = 0; i < nt && !rc; i++) {
		size_t nb =
		        (size_t)tensor_nbytes(t[i].ndim, t[i].shape, dtm_st_dtype_size(t[i].dtype));
		rc = rt_afile_write(&af, t[i].data, nb, err, errlen);
	}
	if (rc) {
		rt_afile_abort(&af);
		return -1;
	}
	return rt_afile_commit(&af, err, errlen);
}

/* ---- reader ---- */

struct DtmSafetensors {
	void *map; /* mmap'd file, or NULL */
	size_t map_len;
	void *owned; /* malloc'd copy for open_memory, or NULL */
	bool lazy;   /* checksums checked by dtm_st_verify, tensor by tensor */
	JsonDoc doc;
	const Json *meta; /* the __metadata__ object, or NULL */
	int n;
	DtmStTensor *t;        /* file order */
	DtmStTensor **by_name; /* sorted by name, for dtm_st_find */
};

void dtm_st_close(DtmSafetensors *st)
{
	if (!st)
		return;
	json_free(&st->doc);
	if (st->map)
		munmap(st->map, st->map_len);
	free(st->owned);
	free(st->t);
	free(st->by_name);
	free(st);
}

static int cmp_by_name(const void *a, const void *b)
{
	return strcmp((*(DtmStTensor *const *)a)->name, (*(DtmStTensor *const *)b)->name);
}

static int cmp_by_offset(const void *a, const void *b)
{
	const DtmStTensor *x = *(DtmStTensor *const *)a, *y = *(DtmStTensor *const *)b;
	if (x->data != y->data)
		return (const char *)x->data < (const char *)y->data ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* A JSON number that is a non-negative integer fitting int64. */
static int get_uint(const Json *v, int64_t *out)
{
	if (!v || v->kind != JSON_NUM || !v->is_int || v->i < 0)
		return -1;
	*out = v->i;
	return 0;
}

/* Parses one tensor entry {"dtype", "shape", "data_offsets"}; checks its
 * size against its offsets and the data section. */
static int parse_entry(const Json *e, DtmStTensor *t, const unsigned char *data,
                       uint64_t data_len, const char *label, char *err, size_t errlen)
{
	t->name = e->key;
	if (e->kind != JSON_OBJ)
		return seterr(err, errlen, "%s: tensor %s: entry is not an object", label, e->key);
	const Json *dt = NULL, *shape = NULL, *offs = NULL;
	for (int k = 0; k < e->n; k++) {
		const Json *m = &e->kids[k];
		const Json **slot = strcmp(m->key, "dtype") == 0          ? &dt
		                      : strcmp(m->key, "shape") == 0        ? &shape
		                      : strcmp(m->key, "data_offsets") == 0 ? &offs
		                                                            : NULL;
		if (!slot)
			return seterr(err, errlen, "%s: tensor %s: unknown field \"%s\"", label,
			              e->key, m->key);
		if (*slot)
			return seterr(err, errlen, "%s: tensor %s: repeated field \"%s\"", label,
			              e->key, m->key);
		*slot = m;
	}
	if (!dt || dt->kind != JSON_STR)
		return seterr(err, errlen, "%s: tensor %s: missing or bad \"dtype\"", label,
		              e->key);
	if (dtm_st_dtype_parse(dt->s, &t->dtype))
		return seterr(err, errlen, "%s: tensor %s: unsupported dtype \"%s\"", label, e->key,
		              dt->s);
	if (!shape || shape->kind != JSON_ARR || shape->n > DTM_MAX_DIMS)
		return seterr(err, errlen,
		              "%s: tensor %s: missing or bad \"shape\" (at most %d dims)", label,
		              e->key, DTM_MAX_DIMS);
	t->ndim = shape->n;
	for (int d = 0; d < shape->n; d++)
		if (get_uint(&shape->kids[d], &t->shape[d]))
			return seterr(err, errlen,
			              "%s: tensor %s: shape[%d] is not a non-negative integer",
			              label, e->key, d);
	int64_t nb = tensor_nbytes(t->ndim, t->shape, dtm_st_dtype_size(t->dtype));
	if (nb < 0)
		return seterr(err, errlen, "%s: tensor %s: shape too large", label, e->key);
	int64_t b, en;
	if (!offs || offs->kind != JSON_ARR || offs->n != 2 || get_uint(&offs->kids[0], &b) ||
	    get_uint(&offs->kids[1], &en))
		return seterr(err, errlen, "%s: tensor %s: missing or bad \"data_offsets\"", label,
		              e->key);
	if (b > en || (uint64_t)en > data_len)
		return seterr(err, errlen,
		              "%s: tensor %s: data_offsets [%" PRId64 ", %" PRId64
		              "] outside the %" PRIu64 "-byte data section",
		              label, e->key, b, en, data_len);
	if (en - b != nb)
		return seterr(err, errlen,
		              "%s: tensor %s: %s %s needs %" PRId64
		              " bytes, data_offsets give %" PRId64,
		              label, e->key, dt->s, shape->n ? "tensor" : "scalar", nb, en - b);
	t->nbytes = (size_t)nb;
	t->numel = (uint64_t)nb / dtm_st_dtype_size(t->dtype);
	t->data = data + b;
	return 0;
}

/* 8 hex digits, as dtm_st_write writes a checksum. */
static int parse_crc(const char *s, uint32_t *out)
{
	uint32_t v = 0;
	for (int k = 0; k < 8; k++) {
		char c = s[k];
		int d = c >= '0' && c <= '9'   ? c - '0'
		        : c >= 'a' && c <= 'f' ? c - 'a' + 10
		        : c >= 'A' && c <= 'F' ? c - 'A' + 10
		                               : -1;
		if (d < 0)
			return -1;
		v = v << 4 | (uint32_t)d;
	}
	if (s[8])
		return -1;
	*out = v;
	return 0;
}

/* Every "crc32c:NAME" in __metadata__ names a tensor of the file once and
 * matches its bytes.  Runs after the tiling check, so data is in bounds. */
static int check_crcs(DtmSafetensors *st, const char *label, bool lazy, char *err,
                      size_t errlen)
{
	size_t np = strlen(DTM_ST_CRC_PREFIX);
	for (int m = 0; st->meta && m < st->meta->n; m++) {
		const Json *kv = &st->meta->kids[m];
		if (strncmp(kv->key, DTM_ST_CRC_PREFIX, np) != 0)
			continue;
		DtmStTensor *t = (DtmStTensor *)dtm_st_find(st, kv->key + np);
		uint32_t want;
		if (!t)
			return seterr(err, errlen,
			              "%s: checksum \"%s\" names no tensor of the file", label,
			              kv->key);
		if (t->has_crc32c)
			return seterr(err, errlen, "%s: tensor %s: repeated checksum", label,
			              t->name);
		if (parse_crc(kv->s, &want))
			return seterr(err, errlen,
			              "%s: tensor %s: bad checksum \"%s\" (8 hex digits expected)",
			              label, t->name, kv->s);
		t->has_crc32c = true;
		t->crc32c = want;
		if (!lazy && dtm_st_verify(t, label, err, errlen))
			return -1;
	}
	return 0;
}

int dtm_st_verify(const DtmStTensor *t, const char *label, char *err, size_t errlen)
{
	if (!t->has_crc32c || t->crc_checked)
		return 0;
	uint32_t got = dtm_crc32c(0, t->data, t->nbytes);
	if (got != t->crc32c)
		return seterr(err, errlen,
		              "%s: tensor %s: data does not match its checksum (crc32c "
		              "%08" PRIx32 " stored, %08" PRIx32 " computed): the file is "
		              "corrupted",
		              label, t->name, t->crc32c, got);
	((DtmStTensor *)t)->crc_checked = true;
	return 0;
}

/* Validates buf[0..len) as a safetensors file and fills st. */
static int st_parse(DtmSafetensors *st, const unsigned char *buf, size_t len, const char *label,
                    char *err, size_t errlen)
{
	if (len < 8)
		return seterr(err, errlen,
		              "%s: not a safetensors file: %zu bytes, shorter than the "
		              "8-byte header size",
		              label, len);
	uint64_t hlen = 0;
	for (int k = 0; k < 8; k++)
		hlen |= (uint64_t)buf[k] << (8 * k);
	if (hlen > DTM_ST_MAX_HEADER)
		return seterr(err, errlen,
		              "%s: header size %" PRIu64 " exceeds the %u-byte limit "
		              "(corrupted or not a safetensors file)",
		              label, hlen, DTM_ST_MAX_HEADER);
	if (hlen > len - 8)
		return seterr(err, errlen,
		              "%s: header size %" PRIu64 " runs past the end of the "
		              "%zu-byte file",
		              label, hlen, len);
	if (hlen < 2 || buf[8] != '{')
		return seterr(err, errlen, "%s: header is not a JSON object", label);
	char jerr[200];
	if (json_parse(&st->doc, (const char *)buf + 8, (size_t)hlen, jerr, sizeof jerr))
		return seterr(err, errlen, "%s: bad JSON header: %s", label, jerr);
	const Json *root = st->doc.root;
	if (root->kind != JSON_OBJ)
		return seterr(err, errlen, "%s: header is not a JSON object", label);
	const unsigned char *data = buf + 8 + hlen;
	uint64_t data_len = (uint64_t)len - 8 - hlen;
	st->t = calloc((size_t)root->n + 1, sizeof *st->t);
	st->by_name = calloc((size_t)root->n + 1, sizeof *st->by_name);
	if (!st->t || !st->by_name)
		return seterr(err, errlen, "%s: out of memory", label);
	for (int k = 0; k < root->n; k++) {
		const Json *e = &root->kids[k];
		if (strcmp(e->key, "__metadata__") == 0) {
			if (st->meta)
				return seterr(err, errlen, "%s: repeated __metadata__", label);
			if (e->kind != JSON_OBJ)
				return seterr(err, errlen, "%s: __metadata__ is not an object",
				              label);
			for (int m = 0; m < e->n; m++)
				if (e->kids[m].kind != JSON_STR)
					return seterr(
					        err, errlen,
					        "%s: __metadata__ value \"%s\" is not a string",
					        label, e->kids[m].key);
			st->meta = e;
			continue;
		}
		if (parse_entry(e, &st->t[st->n], data, data_len, label, err, errlen))
			return -1;
		st->by_name[st->n] = &st->t[st->n];
		st->n++;
	}
	/* names unique */
	qsort(st->by_name, (size_t)st->n, sizeof *st->by_name, cmp_by_name);
	for (int i = 1; i < st->n; i++)
		if (strcmp(st->by_name[i - 1]->name, st->by_name[i]->name) == 0)
			return seterr(err, errlen, "%s: duplicate tensor %s", label,
			              st->by_name[i]->name);
	/* tensors tile the data section exactly, as the reference reader
	 * demands: no overlap (two names sharing bytes would alias on load)
	 * and no gap or trailing bytes (a sign of truncation or corruption) */
	DtmStTensor **ord = malloc(((size_t)st->n + 1) * sizeof *ord);
	if (!ord)
		return seterr(err, errlen, "%s: out of memory", label);
	memcpy(ord, st->by_name, (size_t)st->n * sizeof *ord);
	qsort(ord, (size_t)st->n, sizeof *ord, cmp_by_offset);
	uint64_t pos = 0;
	for (int i = 0; i < st->n; i++) {
		uint64_t b = (uint64_t)((const unsigned char *)ord[i]->data - data);
		if (b != pos) {
			int r = seterr(err, errlen,
			               "%s: tensor %s starts at byte %" PRIu64 " of the data "
			               "section, expected %" PRIu64 " (%s)",
			               label, ord[i]->name, b, pos, b < pos ? "overlap" : "gap");
			free(ord);
			return r;
		}
		pos = b + ord[i]->nbytes;
	}
	free(ord);
	if (pos != data_len)
		return seterr(err, errlen,
		              "%s: %" PRIu64 " bytes of data after the last tensor "
		              "(expected %" PRIu64 ")",
		              label, data_len - pos, pos);
	return check_crcs(st, label, st->lazy, err, errlen);
}

int dtm_st_open_memory(DtmSafetensors **out, const void *buf, size_t len, const char *label,
                       char *err, size_t errlen)
{
	*out = NULL;
	DtmSafetensors *st = calloc(1, sizeof *st);
	if (!st)
		return seterr(err, errlen, "%s: out of memory", label);
	st->owned = malloc(len ? len : 1);
	if (!st->owned) {
		free(st);
		return seterr(err, errlen, "%s: out of memory", label);
	}
	if (len)
		memcpy(st->owned, buf, len);
	if (st_parse(st, st->owned, len, label, err, errlen)) {
		dtm_st_close(st);
		return -1;
	}
	*out = st;
	return 0;
}

int dtm_st_open(DtmSafetensors **out, const char *path, char *err, size_t errlen)
{
	return dtm_st_open_lazy(out, path, false, err, errlen);
}

int dtm_st_open_lazy(DtmSafetensors **out, const char *path, bool lazy, char *err,
                     size_t errlen)
{
	*out = NULL;
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return seterr(err, errlen, "cannot open %s: %s", path, strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return seterr(err, errlen, "%s: not a regular file", path);
	}
	DtmSafetensors *st = calloc(1, sizeof *st);
	if (st)
		st->lazy = lazy;
	if (!st) {
		close(fd);
		return seterr(err, errlen, "%s: out of memory", path);
	}
	size_t len = (size_t)sb.st_size;
	if (len > 0) {
		st->map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
		if (st->map == MAP_FAILED) {
			int e = errno;
			st->map = NULL;
			close(fd);
			free(st);
			return seterr(err, errlen, "cannot mmap %s: %s", path, strerror(e));
		}
		st->map_len = len;
	}
	close(fd);
	static const unsigned char empty[1];
	if (st_parse(st, st->map ? st->map : empty, len, path, err, errlen)) {
		dtm_st_close(st);
		return -1;
	}
	*out = st;
	return 0;
}

int dtm_st_count(const DtmSafetensors *st)
{
	return st->n;
}

const DtmStTensor *dtm_st_at(const DtmSafetensors *st, int i)
{
	return i >= 0 && i < st->n ? &st->t[i] : NULL;
}

const DtmStTensor *dtm_st_find(const DtmSafetensors *st, const char *name)
{
	int lo = 0, hi = st->n - 1;
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		int c = strcmp(name, st->by_name[mid]->name);
		if (c == 0)
			return st->by_name[mid];
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return NULL;
}

const char *dtm_st_meta(const DtmSafetensors *st, const char *key)
{
	const Json *v = json_get(st->meta, key);
	return v ? v->s : NULL;
}

int dtm_st_read_f32(const DtmStTensor *t, float *dst)
{
	const unsigned char *p = t->data;
	for (uint64_t i = 0; i < t->numel; i++) {
		uint16_t h;
		double d;
		switch (t->dtype) {
		case DTM_DT_F32:
			memcpy(&dst[i], p + 4 * i, 4);
			break;
		case DTM_DT_BF16:
			memcpy(&h, p + 2 * i, 2);
			dst[i] = bf16_to_f32(h);
			break;
		case DTM_DT_F16:
			memcpy(&h, p + 2 * i, 2);
			dst[i] = f16_to_f32(h);
			break;
		case DTM_DT_F64:
			memcpy(&d, p + 8 * i, 8);
			dst[i] = (float)d;
			break;
		default:
			return -1;
		}
	}
	return 0;
}

/* ---- index.json ---- */

int dtm_ckpt_index_write(const char *path, const DtmCkptIndex *ix, char *err, size_t errlen)
{
	if (ix->naxes < 0 || ix->naxes > DTM_MAX_AXES || ix->nfiles < 0 || ix->ntensors < 0)
		return seterr(err, errlen, "%s: bad checkpoint index", path);
	JsonBuf b = {0};
	/* the seed is a string: JSON numbers above 2^53 lose digits in most
	 * readers, and a seed must round-trip exactly */
	json_buf_printf(&b,
	              "{\n  \"format\": \"%s\",\n  \"step\": %" PRIu64 ",\n  \"seed\": \"%" PRIu64
	              "\",\n  \"mesh\": {\"axes\": [",
	              DTM_CKPT_FORMAT, ix->step, ix->seed);
	for (int a = 0; a < ix->naxes; a++) {
		if (a)
			json_buf_append(&b, ", ", 2);
		json_buf_str(&b, ix->axes[a] ? ix->axes[a] : "");
	}
	json_buf_append(&b, "], \"sizes\": [", 13);
	for (int a = 0; a < ix->naxes; a++)
		json_buf_printf(&b, "%s%" PRId64, a ? ", " : "", ix->sizes[a]);
	json_buf_append(&b, "]},\n  \"files\": [", 16);
	for (int f = 0; f < ix->nfiles; f++) {
		if (f)
			json_buf_append(&b, ", ", 2);
		json_buf_str(&b, ix->files[f] ? ix->files[f] : "");
	}
	json_buf_append(&b, "],\n", 3);
	if (ix->checksum) {
		json_buf_append(&b, "  \"checksum\": ", 14);
		json_buf_str(&b, ix->checksum);
		json_buf_append(&b, ",\n", 2);
	}
	json_buf_append(&b, "  \"tensors\": {", 14);
	for (int i = 0; i < ix->ntensors; i++) {
		const DtmIndexTensor *t = &ix->tensors[i];
		if (!t->name || !t->dtype || t->ndim < 0 || t->ndim > DTM_MAX_DIMS) {
			json_buf_free(&b);
			return seterr(err, errlen, "%s: bad index tensor %d", path, i);
		}
		json_buf_append(&b, i ? ",\n    " : "\n    ", i ? 6 : 5);
		json_buf_str(&b, t->name);
		json_buf_append(&b, ": {\"dtype\": ", 12);
		json_buf_str(&b, t->dtype);
		json_buf_append(&b, ", \"shape\": [", 12);
		for (int d = 0; d < t->ndim; d++)
			json_buf_printf(&b, "%s%" PRId64, d ? ", " : "", t->shape[d]);
		json_buf_append(&b, "]", 1);
		if (t->placement) {
			json_buf_append(&b, ", \"placement\": ", 15);
			json_buf_str(&b, t->placement);
		}
		json_buf_append(&b, "}", 1);
	}
	json_buf_append(&b, ix->ntensors ? "\n  }\n}\n" : "}\n}\n", ix->ntensors ? 7 : 4);
	if (b.failed) {
		json_buf_free(&b);
		return seterr(err, errlen, "%s: out of memory", path);
	}
	int rc = rt_write_file_atomic(path, b.p, b.len, err, errlen);
	json_buf_free(&b);
	return rc;
}

typedef struct IndexPriv {
	JsonDoc doc;
	const char **files;
	DtmIndexTensor *tensors;
} IndexPriv;

void dtm_ckpt_index_free(DtmCkptIndex *ix)
{
	IndexPriv *p = ix->priv;
	if (p) {
		json_free(&p->doc);
		free(p->files);
		free(p->tensors);
		free(p);
	}
	memset(ix, 0, sizeof *ix);
}

/* [A-Za-z_][A-Za-z0-9_]*: what the .dtm grammar allows as a mesh axis. */
static bool is_ident(const char *s, size_t n)
{
	if (n == 0 ||
	    !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
		return false;
	for (size_t k = 1; k < n; k++)
		if (!((s[k] >= 'a' && s[k] <= 'z') || (s[k] >= 'A' && s[k] <= 'Z') ||
		      (s[k] >= '0' && s[k] <= '9') || s[k] == '_'))
			return false;
	return true;
}

/* The index of the mesh axis spelled s[0..n), or -1. */
static int axis_of(const DtmCkptIndex *ix, const char *s, size_t n)
{
	for (int a = 0; a < ix->naxes; a++)
		if (strlen(ix->axes[a]) == n && memcmp(ix->axes[a], s, n) == 0)
			return a;
	return -1;
}

static const char *skip_sp(const char *s)
{
	while (*s == ' ')
		s++;
	return s;
}

/* Reads an identifier at *s (after spaces); its length, 0 if none. */
static size_t ident_at(const char **s)
{
	*s = skip_sp(*s);
	size_t n = 0;
	while (is_ident(*s, n + 1))
		n++;
	return n;
}

/* A placement as ir/placement.c prints it, checked against the mesh and
 * the tensor's rank ("?" is an unknown placement):
 *   place := '[' [ pdim { ',' pdim } ] ']' [ 'partial' '(' axes [ ',' RED ] ')' ]
 *   pdim  := '_' | AXIS | '(' AXIS { ',' AXIS } ')'
 * Each mesh axis splits at most one dim.  NULL if fine, else why not. */
static const char *placement_parse(const char *pl, const DtmCkptIndex *ix, int ndim,
                                   DtmShardLayout *out)
{
	static const char *const reds[] = {"sum", "avg", "max"};
	if (out) {
		memset(out->nsplit, 0, sizeof out->nsplit);
		out->partial = false;
	}
	if (strcmp(pl, "?") == 0)
		return NULL;
	uint32_t used = 0;
	int dims = 0;
	const char *s = skip_sp(pl);
	if (*s++ != '[')
		return "does not start with '['";
	s = skip_sp(s);
	while (*s != ']') {
		if (dims && *s++ != ',')
			return "expected ',' or ']'";
		s = skip_sp(s);
		if (*s == '_') {
			s++;
		} else {
			bool group = *s == '(';
			s += group;
			for (;;) {
				const char *name = s;
				size_t n = ident_at(&name);
				int a = axis_of(ix, name, n);
				if (n == 0)
					return "expected '_' or a mesh axis";
				if (a < 0)
					return "names an axis the mesh does not have";
				if (used & (1u << a))
					return "splits by the same axis twice";
				used |= 1u << a;
				if (out && dims < DTM_MAX_DIMS)
					out->split[dims][out->nsplit[dims]++] = a;
				s = skip_sp(name + n);
				if (!group || *s == ')')
					break;
				if (*s++ != ',')
					return "expected ',' or ')'";
			}
			if (group && *s++ != ')')
				return "expected ')'";
		}
		dims++;
		s = skip_sp(s);
		if (!*s)
			return "expected ']'";
	}
	s = skip_sp(s + 1);
	if (strncmp(s, "partial", 7) == 0) {
		if (out)
			out->partial = true;
		s = skip_sp(s + 7);
		if (*s++ != '(')
			return "expected '(' after 'partial'";
		for (int k = 0;; k++) {
			const char *name = s;
			size_t n = ident_at(&name);
			bool red = false;
			for (size_t r = 0; r < sizeof reds / sizeof reds[0]; r++)
				red |= k > 0 && strlen(reds[r]) == n &&
				       memcmp(reds[r], name, n) == 0;
			if (n == 0 || (!red && axis_of(ix, name, n) < 0))
				return "partial(...) names an axis the mesh does not have";
			s = skip_sp(name + n);
			if (red || *s == ')')
				break;
			if (*s++ != ',')
				return "expected ',' or ')' in partial(...)";
		}
		if (*s++ != ')')
			return "expected ')' after partial(...)";
		s = skip_sp(s);
	}
	if (*s)
		return "has text after the placement";
	if (dims != ndim)
		return "has another number of dims than the shape";
	return NULL;
}

static int cmp_json_key(const void *a, const void *b)
{
	return strcmp((*(const Json *const *)a)->key, (*(const Json *const *)b)->key);
}

/* The members of obj are among fields[] (NULL-terminated), each once;
 * what is `where` in messages. */
static int check_fields(const Json *obj, const char *const *fields, const char *path,
                        const char *where, char *err, size_t errlen)
{
	for (int k = 0; k < obj->n; k++) {
		const char *key = obj->kids[k].key;
		bool known = false;
		for (int f = 0; fields[f] && !known; f++)
			known = strcmp(key, fields[f]) == 0;
		if (!known)
			return seterr(err, errlen, "%s: %s: unknown field \"%s\"", path, where,
			              key);
		for (int j = 0; j < k; j++)
			if (strcmp(obj->kids[j].key, key) == 0)
				return seterr(err, errlen, "%s: %s: repeated field \"%s\"", path,
				              where, key);
	}
	return 0;
}

static int index_from_json(DtmCkptIndex *ix, IndexPriv *p, const char *path, char *err,
                           size_t errlen)
{
	static const char *const top_fields[] = {"format", "step",     "seed",    "mesh",
	                                         "files",  "checksum", "tensors", NULL};
	static const char *const mesh_fields[] = {"axes", "sizes", NULL};
	static const char *const tensor_fields[] = {"dtype", "shape", "placement", NULL};
	const Json *root = p->doc.root, *v;
	if (root->kind != JSON_OBJ)
		return seterr(err, errlen, "%s: not a JSON object", path);
	v = json_get(root, "format");
	if (!v || v->kind != JSON_STR || strcmp(v->s, DTM_CKPT_FORMAT) != 0)
		return seterr(err, errlen,
		              "%s: not a dtm checkpoint index (format \"%s\", expected "
		              "\"%s\")",
		              path, v && v->kind == JSON_STR ? v->s : "?", DTM_CKPT_FORMAT);
	if (check_fields(root, top_fields, path, "index", err, errlen))
		return -1;
	int64_t step;
	if (get_uint(json_get(root, "step"), &step))
		return seterr(err, errlen, "%s: missing or bad \"step\" (a non-negative integer)",
		              path);
	ix->step = (uint64_t)step;
	/* a string: JSON numbers above 2^53 lose digits in most readers */
	v = json_get(root, "seed");
	char *end;
	errno = 0;
	if (!v || v->kind != JSON_STR || v->s[0] < '0' || v->s[0] > '9' ||
	    ((ix->seed = strtoull(v->s, &end, 10)), errno != 0 || *end))
		return seterr(err, errlen, "%s: missing or bad \"seed\" (a string of digits)",
		              path);

	const Json *mesh = json_get(root, "mesh");
	if (!mesh || mesh->kind != JSON_OBJ)
		return seterr(err, errlen, "%s: missing or bad \"mesh\"", path);
	if (check_fields(mesh, mesh_fields, path, "mesh", err, errlen))
		return -1;
	const Json *axes = json_get(mesh, "axes"), *sizes = json_get(mesh, "sizes");
	if (!axes || !sizes || axes->kind != JSON_ARR || sizes->kind != JSON_ARR ||
	    axes->n != sizes->n || axes->n > DTM_MAX_AXES)
		return seterr(err, errlen,
		              "%s: bad \"mesh\" (axes and sizes, as many of each, at most %d)",
		              path, DTM_MAX_AXES);
	ix->naxes = axes->n;
	int64_t world = 1;
	for (int a = 0; a < axes->n; a++) {
		const Json *name = &axes->kids[a];
		if (name->kind != JSON_STR || !is_ident(name->s, strlen(name->s)))
			return seterr(err, errlen, "%s: mesh axis %d is not a name", path, a);
		ix->axes[a] = name->s;
		if (axis_of(ix, name->s, strlen(name->s)) != a)
			return seterr(err, errlen, "%s: mesh axis \"%s\" appears twice", path,
			              name->s);
		if (get_uint(&sizes->kids[a], &ix->sizes[a]) || ix->sizes[a] < 1 ||
		    ix->sizes[a] > 65536)
			return seterr(err, errlen,
			              "%s: mesh axis %s: size is not an integer in 1..65536", path,
			              name->s);
		world *= ix->sizes[a];
		if (world > 65536)
			return seterr(err, errlen, "%s: mesh of more than 65536 ranks", path);
	}

	/* one file per rank, named by rank; a mesh of one rank has one file
	 * of whole tensors */
	const Json *files = json_get(root, "files");
	if (!files || files->kind != JSON_ARR)
		return seterr(err, errlen, "%s: missing or bad \"files\"", path);
	if (files->n != world)
		return seterr(err, errlen, "%s: %d files for a mesh of %" PRId64 " ranks", path,
		              files->n, world);
	p->files = calloc((size_t)files->n + 1, sizeof *p->files);
	if (!p->files)
		return seterr(err, errlen, "%s: out of memory", path);
	for (int f = 0; f < files->n; f++) {
		char want[64];
		dtm_ckpt_rank_file(want, sizeof want, f);
		if (files->kids[f].kind != JSON_STR || strcmp(files->kids[f].s, want) != 0)
			return seterr(err, errlen, "%s: files[%d] is not \"%s\"", path, f, want);
		p->files[f] = files->kids[f].s;
	}
	ix->nfiles = files->n;
	ix->files = p->files;

	v = json_get(root, "checksum");
	if (v && (v->kind != JSON_STR || strcmp(v->s, DTM_CKPT_CHECKSUM) != 0))
		return seterr(err, errlen, "%s: unsupported \"checksum\" (only \"%s\")", path,
		              DTM_CKPT_CHECKSUM);
	ix->checksum = v ? v->s : NULL;

	const Json *ts = json_get(root, "tensors");
	if (!ts || ts->kind != JSON_OBJ)
		return seterr(err, errlen, "%s: missing or bad \"tensors\"", path);
	p->tensors = calloc((size_t)ts->n + 1, sizeof *p->tensors);
	const Json **sorted = calloc((size_t)ts->n + 1, sizeof *sorted);
	if (!p->tensors || !sorted) {
		free(sorted);
		return seterr(err, errlen, "%s: out of memory", path);
	}
	for (int i = 0; i < ts->n; i++)
		sorted[i] = &ts->kids[i];
	qsort(sorted, (size_t)ts->n, sizeof *sorted, cmp_json_key);
	for (int i = 1; i < ts->n; i++)
		if (strcmp(sorted[i - 1]->key, sorted[i]->key) == 0) {
			int r = seterr(err, errlen, "%s: tensor %s listed twice", path,
			               sorted[i]->key);
			free(sorted);
			return r;
		}
	free(sorted);
	for (int i = 0; i < ts->n; i++) {
		const Json *e = &ts->kids[i];
		DtmIndexTensor *t = &p->tensors[i];
		t->name = e->key;
		if (!e->key[0])
			return seterr(err, errlen, "%s: a tensor with an empty name", path);
		if (e->kind != JSON_OBJ)
			return seterr(err, errlen, "%s: tensor %s: entry is not an object", path,
			              e->key);
		char where[300];
		snprintf(where, sizeof where, "tensor %s", e->key);
		if (check_fields(e, tensor_fields, path, where, err, errlen))
			return -1;
		const Json *sh = json_get(e, "shape"), *dt = json_get(e, "dtype");
		const Json *pl = json_get(e, "placement");
		DtmStDtype dtype;
		if (!dt || dt->kind != JSON_STR || dtm_st_dtype_parse(dt->s, &dtype))
			return seterr(err, errlen, "%s: tensor %s: missing or unknown \"dtype\"",
			              path, e->key);
		if (!sh || sh->kind != JSON_ARR || sh->n > DTM_MAX_DIMS)
			return seterr(err, errlen,
			              "%s: tensor %s: missing or bad \"shape\" (at most %d dims)",
			              path, e->key, DTM_MAX_DIMS);
		t->ndim = sh->n;
		for (int d = 0; d < sh->n; d++)
			if (get_uint(&sh->kids[d], &t->shape[d]))
				return seterr(
				        err, errlen,
				        "%s: tensor %s: shape[%d] is not a non-negative integer",
				        path, e->key, d);
		if (tensor_nbytes(t->ndim, t->shape, dtm_st_dtype_size(dtype)) < 0)
			return seterr(err, errlen, "%s: tensor %s: shape too large", path, e->key);
		t->dtype = dt->s;
		if (pl) {
			const char *why = pl->kind != JSON_STR
			                          ? "is not a string"
			                          : placement_parse(pl->s, ix, t->ndim, NULL);
			if (why)
				return seterr(err, errlen, "%s: tensor %s: placement \"%s\" %s",
				              path, e->key, pl->kind == JSON_STR ? pl->s : "",
				              why);
			t->placement = pl->s;
		}
	}
	ix->ntensors = ts->n;
	ix->tensors = p->tensors;
	return 0;
}

int dtm_ckpt_index_parse(const char *text, size_t len, const char *label, DtmCkptIndex *ix,
                         char *err, size_t errlen)
{
	memset(ix, 0, sizeof *ix);
	IndexPriv *p = calloc(1, sizeof *p);
	if (!p)
		return seterr(err, errlen, "%s: out of memory", label);
	char jerr[200];
	if (json_parse(&p->doc, text, len, jerr, sizeof jerr)) {
		free(p);
		return seterr(err, errlen, "%s: bad JSON: %s", label, jerr);
	}
	ix->priv = p; /* the document holds decoded copies of every string */
	if (index_from_json(ix, p, label, err, errlen)) {
		dtm_ckpt_index_free(ix);
		return -1;
	}
	return 0;
}

int dtm_ckpt_index_read(const char *path, DtmCkptIndex *ix, char *err, size_t errlen)
{
	memset(ix, 0, sizeof *ix);
	char *text;
	size_t len;
	if (rt_read_file(path, &text, &len, 256u << 20, err, errlen))
		return -1;
	int rc = dtm_ckpt_index_parse(text, len, path, ix, err, errlen);
	free(text);
	return rc;
}

/* ---- directory layout ---- */

int dtm_ckpt_step_dir(char *out, size_t n, const char *dir, uint64_t step)
{
	int k = snprintf(out, n, "%s/step_%06" PRIu64, dir, step);
	return k < 0 || (size_t)k >= n ? -1 : 0;
}

int dtm_ckpt_rank_file(char *out, size_t n, int rank)
{
	int k = snprintf(out, n, "rank%05d.safetensors", rank);
	return k < 0 || (size_t)k >= n ? -1 : 0;
}

int dtm_ckpt_begin_step(const char *dir, uint64_t step, char *out, size_t n, char *err,
                        size_t errlen)
{
	if (dtm_ckpt_step_dir(out, n, dir, step))
		return seterr(err, errlen, "%s: checkpoint path too long", dir);
	return rt_mkdirs(out, err, errlen);
}

int dtm_ckpt_commit_step(const char *dir, const DtmCkptIndex *ix, char *err, size_t errlen)
{
	char sd[4096], path[4200], latest[4200], line[64];
	if (dtm_ckpt_step_dir(sd, sizeof sd, dir, ix->step))
		return seterr(err, errlen, "%s: checkpoint path too long", dir);
	snprintf(path, sizeof path, "%s/index.json", sd);
	if (dtm_ckpt_index_write(path, ix, err, errlen))
		return -1;
	snprintf(latest, sizeof latest, "%s/latest", dir);
	int k = snprintf(line, sizeof line, "step_%06" PRIu64 "\n", ix->step);
	return rt_write_file_atomic(latest, line, (size_t)k, err, errlen);
}

int dtm_ckpt_find_latest(const char *dir, uint64_t *step, char *step_dir, size_t n, char *err,
                         size_t errlen)
{
	char latest[4200], ipath[4200];
	snprintf(latest, sizeof latest, "%s/latest", dir);
	if (access(latest, F_OK) != 0 && errno == ENOENT)
		return DTM_CKPT_NONE;
	char *text;
	size_t len;
	if (rt_read_file(latest, &text, &len, 4096, err, errlen))
		return -1;
	unsigned long long s;
	char tail[2];
	int ok = sscanf(text, "step_%llu%1s", &s, tail) == 1 && strncmp(text, "step_", 5) == 0;
	free(text);
	if (!ok)
		return seterr(err, errlen, "%s: expected \"step_NNNNNN\"", latest);
	if (dtm_ckpt_step_dir(step_dir, n, dir, (uint64_t)s))
		return seterr(err, errlen, "%s: checkpoint path too long", dir);
	snprintf(ipath, sizeof ipath, "%s/index.json", step_dir);
	if (access(ipath, R_OK) != 0)
		return seterr(err, errlen, "%s names step %llu, but %s is missing: %s", latest, s,
		              ipath, strerror(errno));
	*step = (uint64_t)s;
	return 0;
}

int dtm_ckpt_save_single(const char *dir, uint64_t step, uint64_t seed,
                         const DtmTensorDesc *tensors, int ntensors, const DtmMetaKV *meta,
                         int nmeta, char *err, size_t errlen)
{
	char sd[4096], file[64], path[4200];
	if (dtm_ckpt_begin_step(dir, step, sd, sizeof sd, err, errlen))
		return -1;
	dtm_ckpt_rank_file(file, sizeof file, 0);
	snprintf(path, sizeof path, "%s/%s", sd, file);
	if (dtm_st_write(path, tensors, ntensors, meta, nmeta, err, errlen))
		return -1;
	DtmIndexTensor *it = calloc((size_t)ntensors + 1, sizeof *it);
	if (!it)
		return seterr(err, errlen, "%s: out of memory", dir);
	for (int i = 0; i < ntensors; i++) {
		it[i].name = tensors[i].name;
		it[i].dtype = dtm_st_dtype_name(tensors[i].dtype);
		it[i].ndim = tensors[i].ndim;
		memcpy(it[i].shape, tensors[i].shape, sizeof it[i].shape);
	}
	const char *files[1] = {file};
	DtmCkptIndex ix = {.step = step,
	                   .seed = seed,
	                   .nfiles = 1,
	                   .files = files,
	                   .checksum = DTM_CKPT_CHECKSUM,
	                   .ntensors = ntensors,
	                   .tensors = it};
	int rc = dtm_ckpt_commit_step(dir, &ix, err, errlen);
	free(it);
	return rc;
}

/* ---- shard geometry ---- */

int dtm_ckpt_layout(const DtmCkptIndex *ix, const DtmIndexTensor *t, DtmShardLayout *out,
                    char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	out->ndim = t->ndim;
	for (int d = 0; d < t->ndim; d++)
		out->shape[d] = t->shape[d];
	const char *why = t->placement ? placement_parse(t->placement, ix, t->ndim, out) : NULL;
	if (why)
		return seterr(err, errlen, "tensor %s: placement \"%s\" %s", t->name, t->placement,
		              why);
	if (out->partial)
		return seterr(err, errlen, "tensor %s: placement \"%s\" is partial (a saved "
		              "tensor never is)", t->name, t->placement);
	return 0;
}

void dtm_ckpt_rank_coords(const DtmCkptIndex *ix, int64_t rank, int64_t *coords)
{
	for (int a = ix->naxes - 1; a >= 0; a--) {
		coords[a] = rank % ix->sizes[a];
		rank /= ix->sizes[a];
	}
}

void dtm_ckpt_shard_box(const DtmShardLayout *l, const int64_t *sizes, const int64_t *coords,
                        int64_t *start, int64_t *len)
{
	for (int d = 0; d < l->ndim; d++) {
		/* the axes splitting a dim: one mixed-radix shard index, the
		 * first listed most significant; torch.chunk's sizes (the last
		 * chunks short or empty), as runtime/exec.c rt_shard_start */
		int64_t parts = 1, idx = 0, n = l->shape[d];
		for (int j = 0; j < l->nsplit[d]; j++) {
			idx = idx * sizes[l->split[d][j]] + coords[l->split[d][j]];
			parts *= sizes[l->split[d][j]];
		}
		int64_t chunk = (n + parts - 1) / parts;
		start[d] = idx * chunk < n ? idx * chunk : n;
		len[d] = start[d] + chunk <= n ? chunk : n - start[d];
	}
}

bool dtm_ckpt_first_copy(const DtmShardLayout *l, int naxes, const int64_t *coords, int skip_axis)
{
	for (int a = 0; a < naxes; a++) {
		bool split = a == skip_axis;
		for (int d = 0; d < l->ndim && !split; d++)
			for (int j = 0; j < l->nsplit[d]; j++)
				split |= l->split[d][j] == a;
		if (!split && coords[a] != 0)
			return false;
	}
	return true;
}

int dtm_ckpt_pp_axis(const DtmCkptIndex *ix)
{
	for (int a = 0; a < ix->naxes; a++)
		if (!strcmp(ix->axes[a], "pp"))
			return a;
	return -1;
}

void dtm_ckpt_mark_copies(const DtmCkptIndex *ix, int pp, int64_t k, bool *done)
{
	int64_t c[DTM_MAX_AXES], c2[DTM_MAX_AXES];
	dtm_ckpt_rank_coords(ix, k, c);
	for (int64_t q = k + 1; pp >= 0 && q < ix->nfiles; q++) {
		dtm_ckpt_rank_coords(ix, q, c2);
		bool copy = true;
		for (int a = 0; a < ix->naxes && copy; a++)
			copy = a == pp || c2[a] == c[a];
		done[q] |= copy;
	}
}

/* Element k of p (dtype dt) as f32; f64 and the 16-bit floats exact. */
static float load_elem(const unsigned char *p, DtmStDtype dt, int64_t k)
{
	uint16_t h;
	float f;
	double d;
	switch (dt) {
	case DTM_DT_BF16:
		memcpy(&h, p + 2 * k, 2);
		return bf16_to_f32(h);
	case DTM_DT_F16:
		memcpy(&h, p + 2 * k, 2);
		return f16_to_f32(h);
	case DTM_DT_F64:
		memcpy(&d, p + 8 * k, 8);
		return (float)d;
	default:
		memcpy(&f, p + 4 * k, 4);
		return f;
	}
}

static void store_elem(unsigned char *p, DtmStDtype dt, int64_t k, float v)
{
	uint16_t h;
	double d = v;
	switch (dt) {
	case DTM_DT_BF16:
		h = bf16_from_f32(v);
		memcpy(p + 2 * k, &h, 2);
		break;
	case DTM_DT_F16:
		h = f16_from_f32(v);
		memcpy(p + 2 * k, &h, 2);
		break;
	case DTM_DT_F64:
		memcpy(p + 8 * k, &d, 8);
		break;
	default:
		memcpy(p + 4 * k, &v, 4);
		break;
	}
}

static bool float_dtype(DtmStDtype dt)
{
	return dt == DTM_DT_F32 || dt == DTM_DT_BF16 || dt == DTM_DT_F16 || dt == DTM_DT_F64;
}

int64_t dtm_ckpt_copy_overlap(int ndim, const void *src, DtmStDtype sdt, const int64_t *sstart,
                              const int64_t *slen, void *dst, DtmStDtype ddt,
                              const int64_t *dshape, const int64_t *dstart, const int64_t *dlen)
{
	if (sdt != ddt && !(float_dtype(sdt) && float_dtype(ddt)))
		return -1;
	int64_t lo[DTM_MAX_DIMS], hi[DTM_MAX_DIMS], sstr[DTM_MAX_DIMS], dstr[DTM_MAX_DIMS];
	int64_t ss = 1, ds = 1;
	for (int d = ndim - 1; d >= 0; d--) {
		lo[d] = sstart[d] > dstart[d] ? sstart[d] : dstart[d];
		int64_t se = sstart[d] + slen[d], de = dstart[d] + dlen[d];
		hi[d] = se < de ? se : de;
		if (hi[d] <= lo[d])
			return 0;
		sstr[d] = ss;
		dstr[d] = ds;
		ss *= slen[d];
		ds *= dshape[d];
	}
	/* runs along the last dim, an odometer over the others */
	int last = ndim - 1;
	int64_t run = ndim ? hi[last] - lo[last] : 1, idx[DTM_MAX_DIMS], total = 0;
	size_t es = dtm_st_dtype_size(sdt), ed = dtm_st_dtype_size(ddt);
	for (int d = 0; d < ndim; d++)
		idx[d] = lo[d];
	for (;;) {
		int64_t so = 0, dof = 0;
		for (int d = 0; d < ndim; d++) {
			so += (idx[d] - sstart[d]) * sstr[d];
			dof += (idx[d] - dstart[d]) * dstr[d];
		}
		const unsigned char *sp = (const unsigned char *)src;
		unsigned char *dp = dst;
		if (sdt == ddt)
			memcpy(dp + (size_t)dof * ed, sp + (size_t)so * es, (size_t)run * es);
		else
			for (int64_t k = 0; k < run; k++)
				store_elem(dp, ddt, dof + k, load_elem(sp, sdt, so + k));
		total += run;
		int d = last - 1;
		while (d >= 0 && ++idx[d] == hi[d]) {
			idx[d] = lo[d];
			d--;
		}
		if (d < 0)
			return total;
	}
}
