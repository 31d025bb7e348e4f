/* data.h - training data for the runtime: deterministic synthetic data and
 * llm.c token files (`dtmc tokenize`, tools/tokenize.c, writes them).
 *
 * Every source is addressed by GLOBAL sample index, never by rank: rank r of
 * a data-parallel group of size D with global batch B reads samples
 * step*B + r*(B/D) ... step*B + (r+1)*(B/D) - 1, so every mesh trains on
 * the same global batch and a run resumed on another mesh sees the same
 * data.  Nothing here keeps a cursor; a sample is a pure function of
 * (seed or file, sample index, T).
 *
 * Errors: functions return DTM_DATA_OK (0) or a DtmDataStatus and write a
 * one-line message to err (when err is not NULL).  Nothing here exits.
 */
#ifndef DTM_DATA_H
#define DTM_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/tokfile.h"


/* ---- synthetic tokens: a fixed random first-order Markov chain ----
 *
 * Each token t has DTM_MARKOV_K distinct likely successors (derived from
 * the seed with Philox) holding 45/25/12/8 % of the mass; the other 10 % is
 * spread uniformly over the vocabulary.  A model that learns the chain
 * reaches dtm_markov_entropy(vocab) nats per token (about 1.95 for vocab
 * 256, against log(256) = 5.55 for guessing), so a falling loss is visible
 * within a few hundred steps. */
#define DTM_MARKOV_K 4

/* The successors of token (0 <= token < vocab), most likely first. */
int dtm_markov_successors(uint64_t seed, int vocab, int token, int32_t succ[DTM_MARKOV_K]);
/* The chain's conditional entropy in nats: the lowest achievable loss. */
double dtm_markov_entropy(int vocab);
/* n tokens of sample sample_index (n = T+1: inputs are out[0..T), targets
 * out[1..T]).  vocab >= DTM_MARKOV_K. */
int dtm_data_synth_tokens(uint64_t seed, int vocab, uint64_t sample_index, int n, int32_t *out);

/* ---- synthetic regression for the MLP model ----
 * x ~ N(0, 1) per (seed, sample, element); y = tanh(W x) with W a fixed
 * random in_dim -> out_dim map (entries N(0, 1/in_dim), so W x ~ N(0, 1)).
 * W is kept in the handle because recomputing it per sample would cost
 * in_dim*out_dim Philox blocks. */
typedef struct DtmRegression {
	uint64_t seed;
	int in_dim, out_dim;
	float *w;  /* [out_dim][in_dim] */
	float *wt; /* the same, [in_dim][out_dim]: the product's loads contiguous */
} DtmRegression;

int dtm_regression_init(DtmRegression *r, uint64_t seed, int in_dim, int out_dim, char *err,
                        size_t errlen);
/* x: in_dim floats, y: out_dim floats. */
void dtm_regression_sample(const DtmRegression *r, uint64_t sample_index, float *x, float *y);
/* The input half of a sample alone (x as dtm_regression_sample gives it,
 * without the out_dim x in_dim product of the target). */
void dtm_regression_input(const DtmRegression *r, uint64_t sample_index, float *x);
/* The target half: y = tanh(W x) from the sample's x (dtm_regression_input's);
 * input then target is dtm_regression_sample, bit for bit. */
void dtm_regression_target(const DtmRegression *r, const float *x, float *y);
void dtm_regression_free(DtmRegression *r);

/* ---- llm.c token files (the format: runtime/tokfile.h) ----
 * Mapped read-only, so opening a multi-GB file costs nothing and ranks
 * share the page cache. */

typedef struct DtmTokenFile {
	const uint16_t *tokens;
	uint64_t ntokens;
	void *map;
	size_t map_len;
	char path[4096];
} DtmTokenFile;

int dtm_tokens_open(DtmTokenFile *tf, const char *path, char *err, size_t errlen);
/* Sample sample_index: the T+1 tokens starting at (sample_index * T) mod
 * (ntokens - T), so consecutive samples tile the file and wrap around.
 * Fails with DTM_DATA_ETOKEN if a token is >= vocab (vocab <= 0: no check). */
int dtm_tokens_sample(const DtmTokenFile *tf, uint64_t sample_index, int T, int vocab, int32_t *out,
                      char *err, size_t errlen);
/* Every token of the file < vocab, else DTM_DATA_ETOKEN naming the file,
 * the first bad token and its position.  Reads the whole file. */
int dtm_tokens_check(const DtmTokenFile *tf, int vocab, char *err, size_t errlen);
void dtm_tokens_close(DtmTokenFile *tf);

/* ---- several token files read as one stream (--data, --val-data) ----
 * spec is one item or a comma-separated list of them, each a path or a
 * glob(3) pattern (an item holding * ? or [), a pattern standing for the
 * files it matches in sorted order; a spec that names an existing file is
 * that one file, commas and all.  llm.c's shards, e.g.
 * 'fineweb_train_*.bin', so read in their numbered order.
 *
 * The files, in that order, are one stream of ntokens tokens.  Sample i is
 * the T+1 tokens from stream position (i * T) mod (ntokens - T), running
 * on into the next file where it meets a file's end; so samples tile the
 * stream, wrap around at its end, and one file reads exactly as
 * dtm_tokens_sample reads it.
 *
 * Every file is checked when the stream is opened: its header (magic,
 * version), its size (the header's count of tokens, no more, no less)
 * and, when vocab > 0, every token < vocab (which reads the whole file).
 * An error names the file and what is wrong with it; nothing stays open. */
typedef struct DtmTokenShards {
	DtmTokenFile *files;
	int nfiles;
	uint64_t *first; /* [nfiles + 1]: stream position of each file's token 0 */
	uint64_t ntokens;
	/* FNV-1a over each file's base name and token count, in order: what
	 * a checkpoint records to know the stream its data position is in
	 * (base names, so moving the shards to another folder keeps it) */
	uint64_t id;
} DtmTokenShards;

int dtm_shards_open(DtmTokenShards *s, const char *spec, int vocab, char *err, size_t errlen);
/* Sample sample_index of the stream as above; DTM_DATA_ETOOFEW when the
 * stream holds fewer than T+1 tokens, DTM_DATA_ETOKEN for a token >= vocab
 * (vocab <= 0: no check). */
int dtm_shards_sample(const DtmTokenShards *s, uint64_t sample_index, int T, int vocab,
                      int32_t *out, char *err, size_t errlen);
/* "3 files, 3000 tokens, id 0123456789abcdef" (at most 64 bytes). */
void dtm_shards_describe(const DtmTokenShards *s, char *out, size_t n);
void dtm_shards_close(DtmTokenShards *s);

/* ---- one interface for --data synthetic|SHARDS ---- */
typedef struct DtmData {
	int is_file;
	uint64_t seed;
	int vocab;
	DtmTokenShards shards;
} DtmData;

/* spec "synthetic" selects the Markov chain; anything else is a list of
 * token files (dtm_shards_open, checked against vocab). */
int dtm_data_open(DtmData *d, const char *spec, uint64_t seed, int vocab, char *err, size_t errlen);
/* count samples starting at global sample first_sample, each split into
 * inputs[b*T + t] = tok[t] and targets[b*T + t] = tok[t+1]. */
int dtm_data_batch(const DtmData *d, uint64_t first_sample, int count, int T, int32_t *inputs,
                   int32_t *targets, char *err, size_t errlen);
void dtm_data_close(DtmData *d);

#endif
