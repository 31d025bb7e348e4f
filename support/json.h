/* json.h - a small strict JSON reader, and the writing of JSON strings:
 * into a growable buffer (the runtime's safetensors headers and checkpoint
 * indexes) or onto a FILE (the tools' --json reports), with one set of
 * escapes.
 *
 * The input is untrusted (a checkpoint may be truncated or hand-edited), so
 * the parser is bounded: nesting depth is capped, every read is checked
 * against the length, and it reports the byte offset of the first error
 * instead of crashing.  It accepts RFC 8259 JSON only (no comments, no
 * trailing commas, no NaN); strings are decoded to UTF-8 and may not
 * contain NUL (the runtime's names are C strings).
 */
#ifndef DTM_SUPPORT_JSON_H
#define DTM_SUPPORT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum JsonKind {
	JSON_NULL,
	JSON_BOOL, /* b */
	JSON_NUM,  /* d; is_int and i when the literal is an integer fitting int64 */
	JSON_STR,  /* s (NUL-terminated), n = length */
	JSON_ARR,  /* kids[0..n) */
	JSON_OBJ,  /* kids[0..n), each with key set, in file order */
} JsonKind;

typedef struct Json Json;
struct Json {
	JsonKind kind;
	int n;
	bool b, is_int;
	int64_t i;
	double d;
	char *s;
	char *key; /* set on the members of an object */
	Json *kids;
};

typedef struct JsonBlock JsonBlock;
typedef struct JsonDoc {
	Json *root;
	JsonBlock *blocks; /* every allocation of the document, freed together */
} JsonDoc;

#define JSON_MAX_DEPTH 32

/* Parses text[0..len).  Returns 0, or -1 with "offset N: reason" in err. */
int json_parse(JsonDoc *doc, const char *text, size_t len, char *err, size_t errlen);
void json_free(JsonDoc *doc);
/* The member of an object named key (the first if repeated), or NULL. */
const Json *json_get(const Json *obj, const char *key);

/* A growable string for writing JSON.  On allocation failure `failed` is set
 * and later appends are ignored, so writers check once at the end. */
typedef struct JsonBuf {
	char *p;
	size_t len, cap;
	bool failed;
} JsonBuf;

void json_buf_free(JsonBuf *b);
void json_buf_append(JsonBuf *b, const char *s, size_t n);
void json_buf_printf(JsonBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a quoted JSON string with the escapes JSON requires: '"'
 * and '\\' backslashed, other bytes below 0x20 as \u00XX, the rest (UTF-8
 * included) as they are. */
void json_buf_str(JsonBuf *b, const char *s);
/* The same string written to out; NULL writes "". */
void json_put_str(FILE *out, const char *s);

#endif
