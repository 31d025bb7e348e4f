/* arena.h - region allocation for the compiler.
 *
 * The compiler allocates AST and IR from an Arena that is freed in one call
 * at the end; scratch memory comes from a second arena that a pass may
 * reset (arena_free, then reuse).  Nothing allocated from an arena is freed
 * on its own.  Allocations are 16-byte aligned; one larger than a block
 * gets a block of its own, so big tables cost no copy.
 */
#ifndef DTM_SUPPORT_ARENA_H
#define DTM_SUPPORT_ARENA_H

#include <stddef.h>

typedef struct ArenaBlock ArenaBlock;
typedef struct Arena {
	ArenaBlock *head;
	size_t used; /* bytes handed out, for limits and reports */
	size_t limit; /* 0 = unlimited; arena_alloc returns NULL past it */
} Arena;

void arena_init(Arena *a);
void arena_free(Arena *a); /* frees every block; the arena can be reused */
/* Zeroed, 16-byte aligned.  Returns NULL only when a->limit is exceeded or
 * the system is out of memory. */
void *arena_alloc(Arena *a, size_t n);
/* As arena_alloc, but the bytes are not zeroed: for memory the caller
 * overwrites in full at once (copies, strings), where the memset is waste. */
void *arena_alloc_raw(Arena *a, size_t n);
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
