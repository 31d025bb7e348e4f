/* json.h - a small strict JSON reader and a string builder for the
 * runtime's own files (safetensors headers, checkpoint indexes).
 *
 * The input is untrusted (a checkpoint may be truncated or hand-edited), so
 * the parser is bounded: nesting depth is capped, every read is checked
 * against the length, and it reports the byte offset of the first error
 * instead of crashing.  It accepts RFC 8259 JSON only (no comments, no
 * trailing commas, no NaN); strings are decoded to UTF-8 and may not
 * contain NUL (the runtime's names are C strings).
 */
#ifndef DTM_RT_JSON_H
#define DTM_RT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum RtJsonKind {
	RT_JSON_NULL,
	RT_JSON_BOOL, /* b */
	RT_JSON_NUM,  /* d; is_int and i when the literal is an integer fitting int64 */
	RT_JSON_STR,  /* s (NUL-terminated), n = length */
	RT_JSON_ARR,  /* kids[0..n) */
	RT_JSON_OBJ,  /* kids[0..n), each with key set, in file order */
} RtJsonKind;

typedef struct RtJson RtJson;
struct RtJson {
	RtJsonKind kind;
	int n;
	bool b, is_int;
	int64_t i;
	double d;
	char *s;
	char *key; /* set on the members of an object */
	RtJson *kids;
};

typedef struct RtJsonBlock RtJsonBlock;
typedef struct RtJsonDoc {
	RtJson *root;
	RtJsonBlock *blocks; /* every allocation of the document, freed together */
} RtJsonDoc;

#define RT_JSON_MAX_DEPTH 32

/* Parses text[0..len).  Returns 0, or -1 with "offset N: reason" in err. */
int rt_json_parse(RtJsonDoc *doc, const char *text, size_t len, char *err, size_t errlen);
void rt_json_free(RtJsonDoc *doc);
/* The member of an object named key (the first if repeated), or NULL. */
const RtJson *rt_json_get(const RtJson *obj, const char *key);

/* A growable string for writing JSON.  On allocation failure `failed` is set
 * and later appends are ignored, so writers check once at the end. */
typedef struct RtBuf {
	char *p;
	size_t len, cap;
	bool failed;
} RtBuf;

void rt_buf_free(RtBuf *b);
void rt_buf_append(RtBuf *b, const char *s, size_t n);
void rt_buf_printf(RtBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a quoted JSON string with the escapes JSON requires. */
void rt_buf_json_str(RtBuf *b, const char *s);

#endif
