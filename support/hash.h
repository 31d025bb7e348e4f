/* hash.h - the hash functions dtm shares (header-only: generated programs
 * and the runtime include it too).
 *
 * FNV-1a keys things that must hash the same everywhere: a tensor name's
 * 64-bit hash keys its initial values (support/philox.h), so the compiler's
 * interpreter and every rank of the runtime draw the same numbers; the
 * 32-bit one indexes the front end's scopes and the passes' name tables.
 * hash_mix64 / hash_fin64 build the passes' interning and memo keys word by
 * word (a multiply per word, then a murmur3-style finish); tables over them
 * compare keys in full, so only speed depends on them.
 */
#ifndef DTM_SUPPORT_HASH_H
#define DTM_SUPPORT_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_FNV1A32_INIT 2166136261u
#define HASH_FNV1A64_INIT 0xcbf29ce484222325ull

/* FNV-1a 32 of a NUL-terminated string. */
static inline uint32_t hash_fnv1a32(const char *s)
{
	uint32_t h = HASH_FNV1A32_INIT;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

/* FNV-1a 64 of n bytes, continuing from h (HASH_FNV1A64_INIT to start). */
static inline uint64_t hash_fnv1a64_bytes(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* FNV-1a 64 of a NUL-terminated string: a tensor name's init stream. */
static inline uint64_t hash_fnv1a64(const char *s)
{
	uint64_t h = HASH_FNV1A64_INIT;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}

/* One word into a running key hash. */
static inline uint64_t hash_mix64(uint64_t h, uint64_t w)
{
	return (h ^ w) * 0xff51afd7ed558ccdull;
}

/* The finish of a key hash: spreads the high bits into the low ones that
 * index a power-of-two table. */
static inline uint64_t hash_fin64(uint64_t h)
{
	h ^= h >> 32;
	h *= 0xc4ceb9fe1a85ec53ull;
	return h ^ h >> 29;
}

#endif
