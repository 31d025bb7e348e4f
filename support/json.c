/* json.c - bounded recursive-descent JSON parser and JSON string writers;
 * see json.h for what it accepts and why. */
#include "support/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct JsonBlock {
	JsonBlock *next;
	max_align_t align[]; /* payload */
};

typedef struct Parser {
	const char *p, *end, *start;
	JsonDoc *doc;
	char *err;
	size_t errlen;
	bool failed;
} Parser;

static void *doc_alloc(JsonDoc *doc, size_t n)
{
	JsonBlock *b = calloc(1, sizeof(JsonBlock) + n);
	if (!b)
		return NULL;
	b->next = doc->blocks;
	doc->blocks = b;
	return b->align;
}

static int fail(Parser *ps, const char *msg)
{
	if (!ps->failed && ps->err && ps->errlen)
		snprintf(ps->err, ps->errlen, "offset %zu: %s", (size_t)(ps->p - ps->start), msg);
	ps->failed = true;
	return -1;
}

static void skip_ws(Parser *ps)
{
	while (ps->p < ps->end &&
	       (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static int hex4(Parser *ps, unsigned *out)
{
	unsigned v = 0;
	if (ps->end - ps->p < 4)
		return fail(ps, "truncated \\u escape");
	for (int k = 0; k < 4; k++) {
		char c = *ps->p++;
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return fail(ps, "bad hex digit in \\u escape");
	}
	*out = v;
	return 0;
}

/* string = '"' chars '"'.  Decodes into a fresh NUL-terminated buffer; the
 * decoded form is never longer than the source, which bounds the buffer. */
static int parse_string(Parser *ps, char **out, int *outlen)
{
	const char *q = ++ps->p; /* after the opening quote */
	while (q < ps->end && *q != '"') {
		if (*q == '\\')
			q++;
		q++;
	}
	if (q >= ps->end)
		return fail(ps, "unterminated string");
	char *s = doc_alloc(ps->doc, (size_t)(q - ps->p) + 1);
	if (!s)
		return fail(ps, "out of memory");
	size_t n = 0;
	while (*ps->p != '"') {
		unsigned char c = (unsigned char)*ps->p;
		if (c < 0x20)
			return fail(ps, "control character in string");
		if (c != '\\') {
			s[n++] = (char)c;
			ps->p++;
			continue;
		}
		ps->p++;
		char e = *ps->p++;
		unsigned cp;
		switch (e) {
		case '"':
			s[n++] = '"';
			break;
		case '\\':
			s[n++] = '\\';
			break;
		case '/':
			s[n++] = '/';
			break;
		case 'b':
			s[n++] = '\b';
			break;
		case 'f':
			s[n++] = '\f';
			break;
		case 'n':
			s[n++] = '\n';
			break;
		case 'r':
			s[n++] = '\r';
			break;
		case 't':
			s[n++] = '\t';
			break;
		case 'u':
			if (hex4(ps, &cp))
				return -1;
			if (cp >= 0xD800 && cp < 0xDC00) {
				unsigned lo;
				if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u')
					return fail(ps, "unpaired surrogate in string");
				ps->p += 2;
				if (hex4(ps, &lo))
					return -1;
				if (lo < 0xDC00 || lo > 0xDFFF)
					return fail(ps, "unpaired surrogate in string");
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			} else if (cp >= 0xDC00 && cp <= 0xDFFF) {
				return fail(ps, "unpaired surrogate in string");
			}
			if (cp == 0)
				return fail(ps, "\\u0000 is not allowed in names");
			/* a \uXXXX escape is 6 source bytes and decodes to at
			 * most 3 (4 for a 12-byte pair), so s cannot overflow */
			if (cp < 0x80) {
				s[n++] = (char)cp;
			} else if (cp < 0x800) {
				s[n++] = (char)(0xC0 | cp >> 6);
				s[n++] = (char)(0x80 | (cp & 0x3F));
			} else if (cp < 0x10000) {
				s[n++] = (char)(0xE0 | cp >> 12);
				s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
				s[n++] = (char)(0x80 | (cp & 0x3F));
			} else {
				s[n++] = (char)(0xF0 | cp >> 18);
				s[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
				s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
				s[n++] = (char)(0x80 | (cp & 0x3F));
			}
			break;
		default:
			ps->p--;
			return fail(ps, "bad escape in string");
		}
	}
	ps->p++; /* closing quote */
	s[n] = '\0';
	if (n > 0x7fffffff)
		return fail(ps, "string too long");
	*out = s;
	*outlen = (int)n;
	return 0;
}

/* number = '-'? int frac? exp?  (the JSON grammar, checked before strtod so
 * strtod's extensions such as hex, inf and nan are never accepted) */
static int parse_number(Parser *ps, Json *v)
{
	const char *b = ps->p, *q = ps->p;
	bool integral = true;
	if (q < ps->end && *q == '-')
		q++;
	if (q >= ps->end || *q < '0' || *q > '9')
		return fail(ps, "bad number");
	if (*q == '0') {
		q++;
	} else {
		while (q < ps->end && *q >= '0' && *q <= '9')
			q++;
	}
	if (q < ps->end && *q == '.') {
		integral = false;
		q++;
		if (q >= ps->end || *q < '0' || *q > '9')
			return fail(ps, "bad number");
		while (q < ps->end && *q >= '0' && *q <= '9')
			q++;
	}
	if (q < ps->end && (*q == 'e' || *q == 'E')) {
		integral = false;
		q++;
		if (q < ps->end && (*q == '+' || *q == '-'))
			q++;
		if (q >= ps->end || *q < '0' || *q > '9')
			return fail(ps, "bad number");
		while (q < ps->end && *q >= '0' && *q <= '9')
			q++;
	}
	char tmp[64];
	if ((size_t)(q - b) >= sizeof tmp)
		return fail(ps, "number too long");
	memcpy(tmp, b, (size_t)(q - b));
	tmp[q - b] = '\0';
	v->kind = JSON_NUM;
	v->d = strtod(tmp, NULL);
	if (integral) {
		errno = 0;
		long long ll = strtoll(tmp, NULL, 10);
		if (errno == 0) {
			v->is_int = true;
			v->i = ll;
		}
	}
	ps->p = q;
	return 0;
}

static int parse_value(Parser *ps, Json *v, int depth);

/* array = '[' (value (',' value)*)? ']'   object = '{' (string ':' value ...)? '}'
 * Children are collected in a temporary growable vector, then copied into
 * the document in one block so kids[] is contiguous. */
static int parse_container(Parser *ps, Json *v, int depth)
{
	bool obj = *ps->p == '{';
	char close = obj ? '}' : ']';
	if (depth >= JSON_MAX_DEPTH)
		return fail(ps, "nesting too deep");
	ps->p++;
	v->kind = obj ? JSON_OBJ : JSON_ARR;
	Json *tmp = NULL;
	size_t n = 0, cap = 0;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == close) {
		ps->p++;
		return 0;
	}
	for (;;) {
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 8;
			Json *t = realloc(tmp, nc * sizeof *t);
			if (!t) {
				free(tmp);
				return fail(ps, "out of memory");
			}
			tmp = t;
			cap = nc;
		}
		Json *kid = &tmp[n];
		memset(kid, 0, sizeof *kid);
		skip_ws(ps);
		if (obj) {
			int klen;
			if (ps->p >= ps->end || *ps->p != '"') {
				free(tmp);
				return fail(ps, "expected a string key");
			}
			if (parse_string(ps, &kid->key, &klen)) {
				free(tmp);
				return -1;
			}
			skip_ws(ps);
			if (ps->p >= ps->end || *ps->p != ':') {
				free(tmp);
				return fail(ps, "expected ':'");
			}
			ps->p++;
		}
		if (parse_value(ps, kid, depth + 1)) {
			free(tmp);
			return -1;
		}
		n++;
		skip_ws(ps);
		if (ps->p < ps->end && *ps->p == ',') {
			ps->p++;
			continue;
		}
		if (ps->p < ps->end && *ps->p == close) {
			ps->p++;
			break;
		}
		free(tmp);
		return fail(ps, obj ? "expected ',' or '}'" : "expected ',' or ']'");
	}
	if (n > 0x7fffffff) {
		free(tmp);
		return fail(ps, "too many elements");
	}
	v->kids = doc_alloc(ps->doc, n * sizeof *tmp);
	if (!v->kids) {
		free(tmp);
		return fail(ps, "out of memory");
	}
	memcpy(v->kids, tmp, n * sizeof *tmp);
	v->n = (int)n;
	free(tmp);
	return 0;
}

static int match_word(Parser *ps, const char *w)
{
	size_t n = strlen(w);
	if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n) != 0)
		return fail(ps, "unexpected character");
	ps->p += n;
	return 0;
}

static int parse_value(Parser *ps, Json *v, int depth)
{
	skip_ws(ps);
	if (ps->p >= ps->end)
		return fail(ps, "unexpected end of input");
	switch (*ps->p) {
	case '{':
	case '[':
		return parse_container(ps, v, depth);
	case '"':
		v->kind = JSON_STR;
		return parse_string(ps, &v->s, &v->n);
	case 't':
		v->kind = JSON_BOOL;
		v->b = true;
		return match_word(ps, "true");
	case 'f':
		v->kind = JSON_BOOL;
		return match_word(ps, "false");
	case 'n':
		v->kind = JSON_NULL;
		return match_word(ps, "null");
	default:
		return parse_number(ps, v);
	}
}

int json_parse(JsonDoc *doc, const char *text, size_t len, char *err, size_t errlen)
{
	Parser ps = {.p = text,
	             .end = text + len,
	             .start = text,
	             .doc = doc,
	             .err = err,
	             .errlen = errlen};
	doc->root = NULL;
	doc->blocks = NULL;
	Json *root = doc_alloc(doc, sizeof *root);
	if (!root) {
		fail(&ps, "out of memory");
		return -1;
	}
	if (parse_value(&ps, root, 0)) {
		json_free(doc);
		return -1;
	}
	skip_ws(&ps);
	if (ps.p != ps.end) {
		fail(&ps, "trailing characters after the JSON value");
		json_free(doc);
		return -1;
	}
	doc->root = root;
	return 0;
}

void json_free(JsonDoc *doc)
{
	JsonBlock *b = doc->blocks;
	while (b) {
		JsonBlock *next = b->next;
		free(b);
		b = next;
	}
	doc->blocks = NULL;
	doc->root = NULL;
}

const Json *json_get(const Json *obj, const char *key)
{
	if (!obj || obj->kind != JSON_OBJ)
		return NULL;
	for (int k = 0; k < obj->n; k++)
		if (strcmp(obj->kids[k].key, key) == 0)
			return &obj->kids[k];
	return NULL;
}

/* ---- string builder ---- */

void json_buf_free(JsonBuf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

static bool buf_reserve(JsonBuf *b, size_t extra)
{
	if (b->failed)
		return false;
	if (b->len + extra + 1 <= b->cap)
		return true;
	size_t nc = b->cap ? b->cap : 256;
	while (nc < b->len + extra + 1)
		nc *= 2;
	char *p = realloc(b->p, nc);
	if (!p) {
		b->failed = true;
		return false;
	}
	b->p = p;
	b->cap = nc;
	return true;
}

void json_buf_append(JsonBuf *b, const char *s, size_t n)
{
	if (!buf_reserve(b, n))
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void json_buf_printf(JsonBuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !buf_reserve(b, (size_t)n)) {
		b->failed = true;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* The escape of byte c inside a JSON string into e (at most 6 bytes and a
 * NUL); its length, or 0 when c stands for itself. */
static int json_escape(unsigned char c, char e[8])
{
	if (c == '"' || c == '\\') {
		e[0] = '\\';
		e[1] = (char)c;
		e[2] = 0;
		return 2;
	}
	if (c < 0x20)
		return snprintf(e, 8, "\\u%04x", c);
	return 0;
}

void json_buf_str(JsonBuf *b, const char *s)
{
	json_buf_append(b, "\"", 1);
	for (; *s; s++) {
		char e[8];
		int n = json_escape((unsigned char)*s, e);
		if (n)
			json_buf_append(b, e, (size_t)n);
		else
			json_buf_append(b, s, 1);
	}
	json_buf_append(b, "\"", 1);
}

void json_put_str(FILE *out, const char *s)
{
	fputc('"', out);
	for (; s && *s; s++) {
		char e[8];
		if (json_escape((unsigned char)*s, e))
			fputs(e, out);
		else
			fputc(*s, out);
	}
	fputc('"', out);
}
