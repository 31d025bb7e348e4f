/* arena.c - region allocation (see arena.h). */
#include "support/arena.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_BLOCK (64 * 1024)

struct ArenaBlock {
	ArenaBlock *next;
	size_t size, used;
	_Alignas(16) unsigned char data[];
};

void arena_init(Arena *a)
{
	a->head = NULL;
	a->used = 0;
	a->limit = 0;
}

void arena_free(Arena *a)
{
	ArenaBlock *b = a->head;
	while (b) {
		ArenaBlock *next = b->next;
		free(b);
		b = next;
	}
	a->head = NULL;
	a->used = 0;
}

void *arena_alloc_raw(Arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (n == 0)
		n = 16;
	if (a->limit && a->used + n > a->limit)
		return NULL;
	ArenaBlock *b = a->head;
	if (!b || b->size - b->used < n) {
		size_t sz = n > ARENA_BLOCK ? n : ARENA_BLOCK;
		b = malloc(sizeof(ArenaBlock) + sz);
		if (!b)
			return NULL;
		b->size = sz;
		b->used = 0;
		/* a big allocation gets its own block behind the current one, so
		 * the current block's free space is not wasted */
		if (a->head && n > ARENA_BLOCK) {
			b->next = a->head->next;
			a->head->next = b;
		} else {
			b->next = a->head;
			a->head = b;
		}
	}
	void *p = b->data + b->used;
	b->used += n;
	a->used += n;
	return p;
}

void *arena_alloc(Arena *a, size_t n)
{
	void *p = arena_alloc_raw(a, n);
	size_t z = (n + 15) & ~(size_t)15;
	if (p)
		memset(p, 0, z ? z : 16);
	return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n)
{
	char *p = arena_alloc_raw(a, n + 1);
	if (!p)
		return NULL;
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

char *arena_strdup(Arena *a, const char *s)
{
	return arena_strndup(a, s, strlen(s));
}

char *arena_printf(Arena *a, const char *fmt, ...)
{
	va_list ap, ap2;
	va_start(ap, fmt);
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	char *p = n >= 0 ? arena_alloc_raw(a, (size_t)n + 1) : NULL;
	if (p)
		vsnprintf(p, (size_t)n + 1, fmt, ap2);
	va_end(ap2);
	return p;
}
