/* test_runtime_io.c - the runtime's deterministic RNG, data sources and
 * checkpoints (support/philox.h, data.h, ckpt.h, fsio.h; the tokenizer
 * that writes token files is dtmc's, test_tokenize.c):
 * safetensors with per-tensor CRC32C, the checkpoint index and its
 * validation, crash-safe writes.
 * Files go to a fresh directory under /tmp that is removed at the end. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include "check.h"
#include "testlib_rt.h"
#include "runtime/ckpt.h"
#include "runtime/data.h"
#include "runtime/fsio.h"
#include "support/json.h"
#include "support/philox.h"


/* ---- philox ---- */

static void test_philox_kat(void)
{
	/* Random123 kat_vectors, philox4x32_10 */
	static const struct {
		uint32_t ctr[4], key[2], out[4];
	} kat[] = {
	        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
	        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
	         {0xffffffff, 0xffffffff},
	         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
	        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
	         {0xa4093822, 0x299f31d0},
	         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	};
	for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
		uint32_t o[4];
		philox4x32_10(kat[i].ctr, kat[i].key, o);
		for (int w = 0; w < 4; w++)
			CHECK_EQ_INT(o[w], kat[i].out[w]);
	}
	/* the block layout: seed -> key, (a, b) -> counter */
	uint32_t o[4];
	philox_block(0xa4093822ull | 0x299f31d0ull << 32, 0, 0x85a308d3243f6a88ull,
	                 0x0370734413198a2eull, o);
	CHECK_EQ_INT(o[0], 0xd16cfe09);
	/* FNV-1a 64 reference values */
	CHECK(hash_fnv1a64("") == 0xcbf29ce484222325ull);
	CHECK(hash_fnv1a64("a") == 0xaf63dc4c8601ec8cull);
	CHECK(hash_fnv1a64("foobar") == 0x85944171f73967e8ull);
}

static void test_init_stats(void)
{
	const int n = 1000000;
	uint64_t h = hash_fnv1a64("layer.0.wqkv");
	double s = 0, s2 = 0, us = 0;
	float umin = 1e9f, umax = -1e9f;
	int keep = 0;
	for (int i = 0; i < n; i++) {
		double x = philox_init_normal(42, h, (uint64_t)i, 0.0f, 1.0f);
		s += x;
		s2 += x * x;
		float u = philox_init_uniform(42, h, (uint64_t)i, -0.5f, 0.25f);
		us += u;
		umin = u < umin ? u : umin;
		umax = u > umax ? u : umax;
		keep += philox_dropout_keep(42, 7, 3, (uint64_t)i, 0.1f);
	}
	double mean = s / n, var = s2 / n - mean * mean;
	/* standard error of the mean is 1e-3 and of the std ~7e-4 */
	CHECK_NEAR(mean, 0.0, 0.005);
	CHECK_NEAR(sqrt(var), 1.0, 0.005);
	CHECK_NEAR(us / n, -0.125, 0.002);
	CHECK(umin >= -0.5f && umax < 0.25f);
	CHECK_NEAR((double)keep / n, 0.9, 0.002);
	/* mean and std are applied, and f32 rounding of mean + std*z is all
	 * that separates N(m, s) from m + s*N(0, 1) */
	float z = philox_init_normal(42, h, 123, 0.0f, 1.0f);
	CHECK_NEAR(philox_init_normal(42, h, 123, 1.0f, 0.02f), 1.0 + 0.02 * z, 1e-6);
	float r = philox_rand_f32(1, 2, 3);
	CHECK(r >= 0.0f && r < 1.0f);
	CHECK(philox_unit(0xffffffffu) < 1.0f);
}

/* "Initialise" params in a given order into a global buffer; a rank with a
 * shard computes the same elements from their global indices. */
static void init_params(const char *const *names, int n, const int *order, float out[][64])
{
	for (int k = 0; k < n; k++) {
		int p = order[k];
		uint64_t h = hash_fnv1a64(names[p]);
		for (int i = 0; i < 64; i++)
			out[p][i] = philox_init_normal(7, h, (uint64_t)i, 0.0f, 0.02f);
	}
}

static void test_init_order_and_shards(void)
{
	const char *names[3] = {"wte", "layer.0.wqkv", "layer.1.wqkv"};
	int fwd[3] = {0, 1, 2}, rev[3] = {2, 0, 1};
	float a[3][64], b[3][64];
	init_params(names, 3, fwd, a);
	init_params(names, 3, rev, b);
	CHECK(memcmp(a, b, sizeof a) == 0);
	CHECK(memcmp(a[1], a[2], sizeof a[1]) != 0); /* names give distinct streams */
	/* a [8, 8] tensor split in column halves over tp=2: rank r holds
	 * columns 4r..4r+3 and computes them from global indices */
	int same = 1;
	uint64_t h = hash_fnv1a64(names[1]);
	for (int r = 0; r < 2; r++)
		for (int row = 0; row < 8; row++)
			for (int c = 0; c < 4; c++) {
				uint64_t g = (uint64_t)row * 8 + (uint64_t)(4 * r + c);
				same &= philox_init_normal(7, h, g, 0.0f, 0.02f) == a[1][g];
			}
	CHECK(same);
	CHECK(philox_init_normal(8, h, 0, 0, 1) != philox_init_normal(7, h, 0, 0, 1));
}

/* ---- synthetic data ---- */

static void test_markov(void)
{
	enum { V = 64, N = 257, S = 2000 };
	int32_t a[N], b[N];
	CHECK_EQ_INT(dtm_data_synth_tokens(5, V, 17, N, a), DTM_DATA_OK);
	CHECK_EQ_INT(dtm_data_synth_tokens(5, V, 17, N, b), DTM_DATA_OK);
	CHECK(memcmp(a, b, sizeof a) == 0);
	CHECK_EQ_INT(dtm_data_synth_tokens(5, V, 18, N, b), DTM_DATA_OK);
	CHECK(memcmp(a, b, sizeof a) != 0);
	/* a prefix of a longer sample is the shorter sample: T does not
	 * change the data */
	CHECK_EQ_INT(dtm_data_synth_tokens(5, V, 17, 33, b), DTM_DATA_OK);
	CHECK(memcmp(a, b, 33 * sizeof *a) == 0);
	CHECK_EQ_INT(dtm_data_synth_tokens(5, 3, 0, 4, b), DTM_DATA_EARG);

	int32_t succ[DTM_MARKOV_K];
	int distinct = 1;
	for (int t = 0; t < V; t++) {
		dtm_markov_successors(5, V, t, succ);
		for (int i = 0; i < DTM_MARKOV_K; i++)
			for (int j = 0; j < i; j++)
				distinct &= succ[i] != succ[j];
	}
	CHECK(distinct);
	/* tiny vocabularies still terminate with distinct successors */
	CHECK_EQ_INT(dtm_markov_successors(1, 4, 3, succ), DTM_DATA_OK);
	CHECK(succ[0] + succ[1] + succ[2] + succ[3] == 6);

	/* empirical conditional entropy H(next | prev) */
	static unsigned cnt[V][V];
	memset(cnt, 0, sizeof cnt);
	int inrange = 1;
	for (int s = 0; s < S; s++) {
		dtm_data_synth_tokens(99, V, (uint64_t)s, N, a);
		for (int p = 0; p < N; p++)
			inrange &= a[p] >= 0 && a[p] < V;
		for (int p = 1; p < N; p++)
			cnt[a[p - 1]][a[p]]++;
	}
	CHECK(inrange);
	double h = 0, total = (double)S * (N - 1);
	for (int i = 0; i < V; i++) {
		double row = 0;
		for (int j = 0; j < V; j++)
			row += cnt[i][j];
		for (int j = 0; j < V; j++)
			if (cnt[i][j])
				h -= cnt[i][j] / total * log(cnt[i][j] / row);
	}
	double want = dtm_markov_entropy(V);
	CHECK(want < 0.5 * log((double)V));
	CHECK_NEAR(h, want, 0.05);
	CHECK(dtm_markov_entropy(256) < 2.0 && dtm_markov_entropy(256) > 1.9);
}

static void test_regression(void)
{
	DtmRegression r;
	char err[256];
	CHECK_EQ_INT(dtm_regression_init(&r, 3, 16, 4, err, sizeof err), DTM_DATA_OK);
	float x[16], y[4], x2[16], y2[4];
	double s = 0, s2 = 0;
	int bounded = 1;
	for (int i = 0; i < 2000; i++) {
		dtm_regression_sample(&r, (uint64_t)i, x, y);
		for (int j = 0; j < 16; j++) {
			s += x[j];
			s2 += x[j] * x[j];
		}
		for (int k = 0; k < 4; k++)
			bounded &= y[k] > -1.0f && y[k] < 1.0f;
	}
	CHECK(bounded);
	CHECK_NEAR(s / 32000, 0.0, 0.03);
	CHECK_NEAR(s2 / 32000, 1.0, 0.05);
	dtm_regression_sample(&r, 5, x, y);
	dtm_regression_sample(&r, 5, x2, y2);
	CHECK(!memcmp(x, x2, sizeof x) && !memcmp(y, y2, sizeof y));
	dtm_regression_sample(&r, 6, x2, y2);
	CHECK(memcmp(x, x2, sizeof x) != 0);
	/* the input half alone (the feed's x) is the sample's x */
	dtm_regression_input(&r, 5, x2);
	CHECK(!memcmp(x, x2, sizeof x));
	dtm_regression_free(&r);
	CHECK_EQ_INT(dtm_regression_init(&r, 3, 0, 4, err, sizeof err), DTM_DATA_EARG);
}

/* ---- llm.c token files ---- */

static void test_token_files(void)
{
	uint16_t tok[100];
	for (int i = 0; i < 100; i++)
		tok[i] = (uint16_t)i;
	char err[512];
	DtmTokenFile tf;
	int32_t out[11];

	write_tokfile(tpath("good.bin"), 20240520, 1, 100, tok, 100);
	CHECK_EQ_INT(dtm_tokens_open(&tf, tpath("good.bin"), err, sizeof err), DTM_DATA_OK);
	CHECK_EQ_INT(tf.ntokens, 100);
	/* T = 10: sample i starts at (10 i) mod 90 */
	CHECK_EQ_INT(dtm_tokens_sample(&tf, 3, 10, 256, out, err, sizeof err), DTM_DATA_OK);
	CHECK_EQ_INT(out[0], 30);
	CHECK_EQ_INT(out[10], 40);
	CHECK_EQ_INT(dtm_tokens_sample(&tf, 9, 10, 256, out, err, sizeof err), DTM_DATA_OK);
	CHECK_EQ_INT(out[0], 0); /* wrapped */
	CHECK_EQ_INT(dtm_tokens_sample(&tf, 8, 10, 256, out, err, sizeof err), DTM_DATA_OK);
	CHECK_EQ_INT(out[10], 90);
	/* huge sample indices do not overflow */
	CHECK_EQ_INT(dtm_tokens_sample(&tf, UINT64_MAX, 10, 256, out, err, sizeof err),
	             DTM_DATA_OK);
	CHECK(out[0] >= 0 && out[10] <= 99);
	CHECK_EQ_INT(dtm_tokens_sample(&tf, 5, 10, 50, out, err, sizeof err), DTM_DATA_ETOKEN);
	CHECK(strstr(err, "token 50") && strstr(err, ">= vocab 50"));
	CHECK_EQ_INT(dtm_tokens_sample(&tf, 0, 100, 256, out, err, sizeof err), DTM_DATA_ETOOFEW);
	dtm_tokens_close(&tf);

	write_tokfile(tpath("magic.bin"), 12345, 1, 100, tok, 100);
	CHECK_EQ_INT(dtm_tokens_open(&tf, tpath("magic.bin"), err, sizeof err), DTM_DATA_EMAGIC);
	CHECK(strstr(err, "not an llm.c token file: magic 12345, expected 20240520") != NULL);
	write_tokfile(tpath("version.bin"), 20240520, 2, 100, tok, 100);
	CHECK_EQ_INT(dtm_tokens_open(&tf, tpath("version.bin"), err, sizeof err),
	             DTM_DATA_EVERSION);
	CHECK(strstr(err, "version 2") != NULL);
	write_tokfile(tpath("trunc.bin"), 20240520, 1, 1000, tok, 100);
	CHECK_EQ_INT(dtm_tokens_open(&tf, tpath("trunc.bin"), err, sizeof err), DTM_DATA_ETRUNC);
	CHECK(strstr(err, "header says 1000 tokens, file holds 100") != NULL);
	write_bytes(tpath("short.bin"), tok, 100);
	CHECK_EQ_INT(dtm_tokens_open(&tf, tpath("short.bin"), err, sizeof err), DTM_DATA_ESHORT);
	CHECK(strstr(err, "shorter than the 1024-byte header") != NULL);
	write_bytes(tpath("empty.bin"), tok, 0);
	CHECK_EQ_INT(dtm_tokens_open(&tf, tpath("empty.bin"), err, sizeof err), DTM_DATA_ESHORT);
	CHECK_EQ_INT(dtm_tokens_open(&tf, tpath("missing.bin"), err, sizeof err), DTM_DATA_EOPEN);
	CHECK(strstr(err, "missing.bin") && strstr(err, "No such file"));
	CHECK_EQ_INT(dtm_tokens_open(&tf, tmpdir, err, sizeof err), DTM_DATA_EOPEN);

	/* --data FILE and --data synthetic through one interface; two ranks
	 * reading halves of a global batch see exactly the whole batch */
	const char *specs[2] = {tpath("good.bin"), "synthetic"};
	for (int k = 0; k < 2; k++) {
		DtmData d;
		CHECK_EQ_INT(dtm_data_open(&d, specs[k], 11, 128, err, sizeof err), DTM_DATA_OK);
		int32_t x[8 * 10], y[8 * 10], x2[8 * 10], y2[8 * 10];
		CHECK_EQ_INT(dtm_data_batch(&d, 16, 8, 10, x, y, err, sizeof err), DTM_DATA_OK);
		CHECK_EQ_INT(dtm_data_batch(&d, 16, 4, 10, x2, y2, err, sizeof err), DTM_DATA_OK);
		CHECK_EQ_INT(dtm_data_batch(&d, 20, 4, 10, x2 + 40, y2 + 40, err, sizeof err),
		             DTM_DATA_OK);
		CHECK(!memcmp(x, x2, sizeof x) && !memcmp(y, y2, sizeof y));
		CHECK(!memcmp(x + 1, y, 9 * sizeof *x)); /* targets are inputs shifted */
		dtm_data_close(&d);
	}
	DtmData d;
	CHECK_EQ_INT(dtm_data_open(&d, tpath("magic.bin"), 1, 128, err, sizeof err),
	             DTM_DATA_EMAGIC);
	CHECK_EQ_INT(dtm_data_open(&d, "synthetic", 1, 2, err, sizeof err), DTM_DATA_EARG);
}

/* ---- several token files as one stream (--data, --val-data) ---- */

/* The llm.c convention: train shards 1..3, val shard 0.  Train shard k
 * holds len[k] tokens 100(k+1) + j, so the stream is known token by token;
 * the shards are written out of order, and the glob must sort them. */
static const int shard_len[3] = {7, 5, 9};

static void write_shard(const char *name, int base, int n)
{
	uint16_t tok[16];
	for (int j = 0; j < n; j++)
		tok[j] = (uint16_t)(base + j);
	write_tokfile(tpath(name), 20240520, 1, n, tok, n);
}

static void test_token_shards(void)
{
	CHECK_EQ_INT(mkdir(tpath("sh"), 0755), 0);
	write_shard("sh/tiny_train_000003.bin", 300, shard_len[2]);
	write_shard("sh/tiny_train_000001.bin", 100, shard_len[0]);
	write_shard("sh/tiny_train_000002.bin", 200, shard_len[1]);
	write_shard("sh/tiny_val_000000.bin", 900, 12);
	int32_t stream[21];
	int n = 0;
	for (int k = 0; k < 3; k++)
		for (int j = 0; j < shard_len[k]; j++)
			stream[n++] = 100 * (k + 1) + j;

	char err[512], glob[256], list[1024], desc[96];
	DtmTokenShards s;
	int32_t out[5];
	snprintf(glob, sizeof glob, "%s", tpath("sh/tiny_train_*.bin"));
	CHECK_EQ_INT(dtm_shards_open(&s, glob, 1000, err, sizeof err), DTM_DATA_OK);
	CHECK_EQ_INT(s.nfiles, 3);
	CHECK_EQ_INT(s.ntokens, 21);
	CHECK(s.nfiles == 3 && strstr(s.files[0].path, "000001") &&
	      strstr(s.files[1].path, "000002") && strstr(s.files[2].path, "000003"));
	CHECK(s.first && s.first[0] == 0 && s.first[1] == 7 && s.first[2] == 12 &&
	      s.first[3] == 21);
	/* T = 4: sample i is stream[(4 i) mod 17 ...] for 5 tokens, running
	 * across shard boundaries (sample 1: 104 105 106 | 200 201) and
	 * wrapping after sample 4 */
	int ok = 1;
	for (uint64_t i = 0; i < 40; i++) {
		CHECK_EQ_INT(dtm_shards_sample(&s, i, 4, 1000, out, err, sizeof err), DTM_DATA_OK);
		int pos = (int)((4 * i) % 17);
		for (int t = 0; t < 5; t++)
			ok &= out[t] == stream[pos + t];
	}
	CHECK(ok);
	CHECK_EQ_INT(dtm_shards_sample(&s, 1, 4, 1000, out, err, sizeof err), DTM_DATA_OK);
	CHECK(out[0] == 104 && out[2] == 106 && out[3] == 200 && out[4] == 201);
	/* T = 14 runs through the whole of shard 2: 100 ... 106 | 200 ...
	 * 204 | 300 301 302 */
	int32_t o15[15];
	CHECK_EQ_INT(dtm_shards_sample(&s, 0, 14, 1000, o15, err, sizeof err), DTM_DATA_OK);
	CHECK(o15[6] == 106 && o15[7] == 200 && o15[11] == 204 && o15[12] == 300 &&
	      o15[14] == 302);
	CHECK_EQ_INT(dtm_shards_sample(&s, 0, 21, 1000, o15, err, sizeof err), DTM_DATA_ETOOFEW);
	CHECK(strstr(err, "3 files hold 21 tokens") != NULL);
	/* the header's checks did not read the tokens; sampling checks them */
	CHECK_EQ_INT(dtm_shards_sample(&s, 1, 4, 201, out, err, sizeof err), DTM_DATA_ETOKEN);
	CHECK(strstr(err, "tiny_train_000002.bin: token 201 at position 1 is >= vocab 201"));
	dtm_shards_describe(&s, desc, sizeof desc);
	CHECK(strncmp(desc, "3 files, 21 tokens, id ", 23) == 0 && strlen(desc) == 23 + 16);
	uint64_t id = s.id;
	dtm_shards_close(&s);
	CHECK(s.files == NULL && s.nfiles == 0);

	/* a comma-separated list in the same order: the same stream; a list
	 * can mix paths and patterns */
	snprintf(list, sizeof list, "%s,%s,%s", tpath("sh/tiny_train_000001.bin"),
	         tpath("sh/tiny_train_000002.bin"), tpath("sh/tiny_train_000003.bin"));
	CHECK_EQ_INT(dtm_shards_open(&s, list, 1000, err, sizeof err), DTM_DATA_OK);
	CHECK(s.id == id && s.ntokens == 21);
	dtm_shards_close(&s);
	snprintf(list, sizeof list, "%s,%s", tpath("sh/tiny_train_000001.bin"),
	         tpath("sh/tiny_train_00000[23].bin"));
	CHECK_EQ_INT(dtm_shards_open(&s, list, 1000, err, sizeof err), DTM_DATA_OK);
	CHECK(s.id == id && s.nfiles == 3);
	dtm_shards_close(&s);
	/* the list's order is the stream's order */
	snprintf(list, sizeof list, "%s,%s,%s", tpath("sh/tiny_train_000002.bin"),
	         tpath("sh/tiny_train_000001.bin"), tpath("sh/tiny_train_000003.bin"));
	CHECK_EQ_INT(dtm_shards_open(&s, list, 1000, err, sizeof err), DTM_DATA_OK);
	CHECK(s.id != id);
	CHECK_EQ_INT(dtm_shards_sample(&s, 0, 4, 1000, out, err, sizeof err), DTM_DATA_OK);
	CHECK(out[0] == 200 && out[4] == 204);
	dtm_shards_close(&s);
	/* an empty shard in the middle changes nothing but the id */
	write_shard("sh/empty.bin", 0, 0);
	snprintf(list, sizeof list, "%s,%s,%s", tpath("sh/tiny_train_000001.bin"),
	         tpath("sh/empty.bin"), tpath("sh/tiny_train_00000[23].bin"));
	CHECK_EQ_INT(dtm_shards_open(&s, list, 1000, err, sizeof err), DTM_DATA_OK);
	ok = s.nfiles == 4 && s.ntokens == 21;
	for (uint64_t i = 0; i < 17 && ok; i++) {
		ok &= dtm_shards_sample(&s, i, 4, 1000, out, err, sizeof err) == DTM_DATA_OK;
		for (int t = 0; t < 5; t++)
			ok &= out[t] == stream[(4 * i) % 17 + (uint64_t)t];
	}
	CHECK(ok);
	dtm_shards_close(&s);

	/* one file reads exactly as dtm_tokens_sample reads it */
	DtmTokenFile tf;
	CHECK_EQ_INT(dtm_tokens_open(&tf, tpath("sh/tiny_val_000000.bin"), err, sizeof err), 0);
	CHECK_EQ_INT(dtm_shards_open(&s, tpath("sh/tiny_val_000000.bin"), 1000, err, sizeof err),
	             DTM_DATA_OK);
	ok = 1;
	for (uint64_t i = 0; i < 30; i++) {
		int32_t a[5], b[5];
		ok &= dtm_tokens_sample(&tf, i, 4, 1000, a, err, sizeof err) == DTM_DATA_OK;
		ok &= dtm_shards_sample(&s, i, 4, 1000, b, err, sizeof err) == DTM_DATA_OK;
		ok &= !memcmp(a, b, sizeof a);
	}
	CHECK(ok);
	dtm_shards_close(&s);
	dtm_tokens_close(&tf);

	/* each bad shard: an error naming the file and what is wrong with it,
	 * after good shards in the list, and nothing left open */
	uint16_t tok[8] = {1, 2, 3, 1000, 5, 6, 7, 8};
	write_tokfile(tpath("sh/bad_magic.bin"), 12345, 1, 8, tok, 8);
	write_tokfile(tpath("sh/bad_version.bin"), 20240520, 2, 8, tok, 8);
	write_tokfile(tpath("sh/bad_trunc.bin"), 20240520, 1, 9, tok, 8);
	write_tokfile(tpath("sh/bad_trail.bin"), 20240520, 1, 7, tok, 8);
	write_tokfile(tpath("sh/bad_token.bin"), 20240520, 1, 8, tok, 8);
	write_bytes(tpath("sh/bad_short.bin"), tok, 16);
	static const struct {
		const char *file;
		int code;
		const char *says;
	} bad[] = {
		{"bad_magic.bin", DTM_DATA_EMAGIC,
		 "bad_magic.bin: not an llm.c token file: magic 12345, expected 20240520"},
		{"bad_version.bin", DTM_DATA_EVERSION,
		 "bad_version.bin: unsupported llm.c token file version 2, expected 1"},
		{"bad_trunc.bin", DTM_DATA_ETRUNC,
		 "bad_trunc.bin: truncated: header says 9 tokens, file holds 8"},
		{"bad_trail.bin", DTM_DATA_ETRAIL,
		 "bad_trail.bin: 1040 bytes, expected 1038 for the header's 7 tokens"},
		{"bad_token.bin", DTM_DATA_ETOKEN,
		 "bad_token.bin: token 1000 at position 3 is >= vocab 1000"},
		{"bad_short.bin", DTM_DATA_ESHORT,
		 "bad_short.bin: not an llm.c token file: 16 bytes"},
		{"missing.bin", DTM_DATA_EOPEN, "missing.bin: cannot open: No such file"},
		{"nothing_*.bin", DTM_DATA_ENOMATCH, "nothing_*.bin: no file matches the pattern"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char name[64];
		snprintf(name, sizeof name, "sh/%s", bad[i].file);
		snprintf(list, sizeof list, "%s,%s", glob, tpath(name));
		err[0] = 0;
		int rc = dtm_shards_open(&s, list, 1000, err, sizeof err);
		if (rc != bad[i].code || !strstr(err, bad[i].says))
			fprintf(stderr, "shard case %s: code %d, '%s'\n", bad[i].file, rc, err);
		CHECK_EQ_INT(rc, bad[i].code);
		CHECK(strstr(err, bad[i].says) != NULL);
		CHECK(strstr(err, tpath(name)) != NULL); /* the path as given */
		CHECK(s.files == NULL && s.first == NULL && s.nfiles == 0);
	}
	/* the token check is skipped without a vocabulary (the tokenizer's
	 * files, say) */
	CHECK_EQ_INT(dtm_shards_open(&s, tpath("sh/bad_token.bin"), 0, err, sizeof err),
	             DTM_DATA_OK);
	dtm_shards_close(&s);
	snprintf(list, sizeof list, "%s,,%s", glob, glob);
	CHECK_EQ_INT(dtm_shards_open(&s, list, 1000, err, sizeof err), DTM_DATA_ESPEC);
	CHECK(strstr(err, "empty item") != NULL);
	CHECK_EQ_INT(dtm_shards_open(&s, "", 1000, err, sizeof err), DTM_DATA_ESPEC);
	/* a file whose name holds a comma is still that file */
	write_shard("sh/a,b.bin", 100, 7);
	CHECK_EQ_INT(dtm_shards_open(&s, tpath("sh/a,b.bin"), 1000, err, sizeof err),
	             DTM_DATA_OK);
	CHECK_EQ_INT(s.nfiles, 1);
	dtm_shards_close(&s);
	/* DtmData reads the same stream */
	DtmData d;
	CHECK_EQ_INT(dtm_data_open(&d, glob, 1, 1000, err, sizeof err), DTM_DATA_OK);
	int32_t x[2 * 4], y[2 * 4];
	CHECK_EQ_INT(dtm_data_batch(&d, 1, 2, 4, x, y, err, sizeof err), DTM_DATA_OK);
	CHECK(x[0] == 104 && x[3] == 200 && y[3] == 201 && x[4] == 201 && y[7] == 300);
	dtm_data_close(&d);
}

/* ---- safetensors ---- */

static void test_f16_bf16(void)
{
	CHECK_EQ_INT(f16_from_f32(1.0f), 0x3c00);
	CHECK_EQ_INT(f16_from_f32(-2.0f), 0xc000);
	CHECK_EQ_INT(f16_from_f32(65504.0f), 0x7bff);
	CHECK_EQ_INT(f16_from_f32(65520.0f), 0x7c00);               /* rounds to inf */
	CHECK_EQ_INT(f16_from_f32(5.960464477539063e-08f), 0x0001); /* smallest subnormal */
	CHECK_EQ_INT(f16_from_f32(1.0f + 1.0f / 2048), 0x3c00);     /* tie to even */
	CHECK(f16_to_f32(0x0001) == 5.960464477539063e-08f);
	CHECK(f16_to_f32(0x3555) == 0.333251953125f);
	int ok = 1;
	for (uint32_t h = 0; h < 0x7c00; h++)
		ok &= f16_from_f32(f16_to_f32((uint16_t)h)) == h;
	CHECK(ok);
	CHECK_EQ_INT(bf16_from_f32(1.0f), 0x3f80);
	CHECK_EQ_INT(bf16_from_f32(1.00390625f), 0x3f80); /* tie to even */
	CHECK(bf16_to_f32(0x3fc0) == 1.5f);
	CHECK(bf16_to_f32(bf16_from_f32(NAN)) != bf16_to_f32(bf16_from_f32(NAN)));
	/* bf16_from_f32 (branch-free) against the rule written out: ties to
	 * even, NaN made quiet keeping its sign, past the largest finite
	 * value to infinity; every 61st bit pattern and the edges */
	static const uint32_t edge[] = {0x00000000, 0x80000000, 0x00008000, 0x00018000, 0x3f818000,
					0x3f808000, 0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0x7f800000,
					0xff800000, 0x7f800001, 0xff800001, 0x7fc00000, 0x7fffffff,
					0xffffffff, 0x007fffff, 0x00000001};
	int bad = 0;
	for (uint64_t i = 0; i < (1ull << 32) / 61 + 18; i++) {
		uint32_t u = i < 18 ? edge[i] : (uint32_t)((i - 18) * 61), want;
		if ((u & 0x7fffffffu) > 0x7f800000u)
			want = (u >> 16) | 0x40;
		else if ((u & 0xffff) != 0x8000)
			want = (u >> 16) + ((u & 0xffff) > 0x8000);
		else
			want = (u >> 16) + ((u >> 16) & 1);
		float f;
		memcpy(&f, &u, 4);
		if (bf16_from_f32(f) != (uint16_t)want && bad++ < 5)
			fprintf(stderr, "bf16_from_f32(0x%08x) = 0x%04x, want 0x%04x\n", u,
				bf16_from_f32(f), want & 0xffff);
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(bf16_from_f32(3.4028235e38f), 0x7f80); /* largest f32 rounds to inf */
}

static void test_safetensors_roundtrip(void)
{
	float f32[6] = {1, -2.5f, 3.25f, 0, 1e-8f, 1e30f};
	uint16_t bf[4], f16[4];
	float src4[4] = {0.5f, -1.0f, 3.0f, 100.0f};
	for (int i = 0; i < 4; i++) {
		bf[i] = bf16_from_f32(src4[i]);
		f16[i] = f16_from_f32(src4[i]);
	}
	int32_t i32[3] = {-1, 0, 2147483647};
	int64_t i64[2] = {-5, INT64_MAX};
	uint8_t u8[5] = {0, 1, 2, 254, 255};
	double f64[1] = {3.141592653589793};
	float scalar = 7.0f;
	DtmTensorDesc t[] = {
	        {"layer.0.w", DTM_DT_F32, 2, {2, 3}, f32},
	        {"bf", DTM_DT_BF16, 1, {4}, bf},
	        {"opt.m.\"quoted\"\\name", DTM_DT_F16, 2, {2, 2}, f16},
	        {"ids", DTM_DT_I32, 1, {3}, i32},
	        {"step64", DTM_DT_I64, 1, {2}, i64},
	        {"bytes", DTM_DT_U8, 1, {5}, u8},
	        {"pi", DTM_DT_F64, 1, {1}, f64},
	        {"scalar", DTM_DT_F32, 0, {0}, &scalar},
	        {"empty", DTM_DT_F32, 2, {0, 4}, NULL},
	};
	int nt = (int)(sizeof t / sizeof t[0]);
	DtmMetaKV meta[] = {{"step", "10"}, {"model", "gpt \"small\""}};
	char err[512];
	CHECK_EQ_INT(dtm_st_write(tpath("a.safetensors"), t, nt, meta, 2, err, sizeof err), 0);

	size_t len;
	unsigned char *raw = read_bytes(tpath("a.safetensors"), &len);
	CHECK(raw != NULL);
	if (!raw)
		return;
	uint64_t hlen = 0;
	for (int k = 0; k < 8; k++)
		hlen |= (uint64_t)raw[k] << (8 * k);
	CHECK_EQ_INT(hlen % 8, 0);
	CHECK(raw[8] == '{');
	CHECK(len == 8 + hlen + 24 + 8 + 8 + 12 + 16 + 5 + 8 + 4);

	DtmSafetensors *st;
	CHECK_EQ_INT(dtm_st_open(&st, tpath("a.safetensors"), err, sizeof err), 0);
	if (!st) {
		free(raw);
		return;
	}
	CHECK_EQ_INT(dtm_st_count(st), nt);
	for (int i = 0; i < nt; i++) {
		const DtmStTensor *r = dtm_st_at(st, i);
		CHECK_EQ_STR(r->name, t[i].name); /* file order is write order */
		CHECK(dtm_st_find(st, t[i].name) == r);
		CHECK_EQ_INT(r->dtype, t[i].dtype);
		CHECK_EQ_INT(r->ndim, t[i].ndim);
		for (int d = 0; d < t[i].ndim; d++)
			CHECK_EQ_INT(r->shape[d], t[i].shape[d]);
		if (r->nbytes)
			CHECK(memcmp(r->data, t[i].data, r->nbytes) == 0);
	}
	CHECK(dtm_st_find(st, "nope") == NULL);
	CHECK_EQ_STR(dtm_st_meta(st, "step"), "10");
	CHECK_EQ_STR(dtm_st_meta(st, "model"), "gpt \"small\"");
	CHECK(dtm_st_meta(st, "absent") == NULL);
	CHECK_EQ_INT(dtm_st_find(st, "empty")->numel, 0);
	CHECK_EQ_INT(dtm_st_find(st, "scalar")->numel, 1);
	float conv[4];
	CHECK_EQ_INT(dtm_st_read_f32(dtm_st_find(st, "bf"), conv), 0);
	CHECK(!memcmp(conv, src4, sizeof conv)); /* exactly representable */
	CHECK_EQ_INT(dtm_st_read_f32(dtm_st_find(st, "opt.m.\"quoted\"\\name"), conv), 0);
	CHECK(!memcmp(conv, src4, sizeof conv));
	CHECK_EQ_INT(dtm_st_read_f32(dtm_st_find(st, "pi"), conv), 0);
	CHECK(conv[0] == (float)3.141592653589793);
	CHECK_EQ_INT(dtm_st_read_f32(dtm_st_find(st, "ids"), conv), -1);
	dtm_st_close(st);

	/* the same bytes parse from memory */
	CHECK_EQ_INT(dtm_st_open_memory(&st, raw, len, "mem", err, sizeof err), 0);
	if (st)
		dtm_st_close(st);

	/* writer refuses bad input without creating the file */
	DtmTensorDesc dup[2] = {t[0], t[0]};
	CHECK_EQ_INT(dtm_st_write(tpath("dup.safetensors"), dup, 2, NULL, 0, err, sizeof err), -1);
	CHECK(strstr(err, "duplicate tensor name layer.0.w") != NULL);
	CHECK(access(tpath("dup.safetensors"), F_OK) != 0);
	DtmTensorDesc neg = {"n", DTM_DT_F32, 1, {-1}, f32};
	CHECK_EQ_INT(dtm_st_write(tpath("neg.safetensors"), &neg, 1, NULL, 0, err, sizeof err), -1);
	CHECK_EQ_INT(dtm_st_write(tpath("none.safetensors"), NULL, 0, NULL, 0, err, sizeof err), 0);
	CHECK_EQ_INT(dtm_st_open(&st, tpath("none.safetensors"), err, sizeof err), 0);
	if (st) {
		CHECK_EQ_INT(dtm_st_count(st), 0);
		dtm_st_close(st);
	}
	free(raw);
}

/* Builds a file from a header string and n data bytes. */
static int open_crafted(const char *hdr, size_t ndata, char *err, size_t errlen)
{
	size_t hl = strlen(hdr);
	unsigned char *buf = calloc(1, 8 + hl + ndata + 1);
	for (int k = 0; k < 8; k++)
		buf[k] = (unsigned char)((uint64_t)hl >> (8 * k));
	memcpy(buf + 8, hdr, hl);
	DtmSafetensors *st;
	int rc = dtm_st_open_memory(&st, buf, 8 + hl + ndata, "crafted", err, errlen);
	if (!rc)
		dtm_st_close(st);
	free(buf);
	return rc;
}

static void test_safetensors_corrupt(void)
{
	char err[512];
	size_t len;
	unsigned char *raw = read_bytes(tpath("a.safetensors"), &len);
	CHECK(raw != NULL);
	if (!raw)
		return;
	/* every truncation is an error, never a crash */
	int all_fail = 1;
	for (size_t n = 0; n < len; n++) {
		DtmSafetensors *st;
		int rc = dtm_st_open_memory(&st, raw, n, "trunc", err, sizeof err);
		all_fail &= rc == -1 && st == NULL;
		if (!rc)
			dtm_st_close(st);
	}
	CHECK(all_fail);
	/* random byte flips in the header: errors or (rarely, e.g. a digit in
	 * a shape changing consistently) success, but never a crash or an
	 * out-of-bounds tensor */
	uint32_t rs = 12345;
	uint64_t hlen = 0;
	for (int k = 0; k < 8; k++)
		hlen |= (uint64_t)raw[k] << (8 * k);
	unsigned char *mut = malloc(len);
	int bounded = 1;
	for (int it = 0; it < 20000; it++) {
		memcpy(mut, raw, len);
		for (int f = 0; f < 1 + it % 3; f++) {
			rs = rs * 1664525u + 1013904223u;
			size_t pos = (rs >> 8) % (8 + hlen);
			rs = rs * 1664525u + 1013904223u;
			mut[pos] = (unsigned char)(rs >> 24);
		}
		DtmSafetensors *st;
		if (dtm_st_open_memory(&st, mut, len, "mut", err, sizeof err) == 0) {
			for (int i = 0; i < dtm_st_count(st); i++)
				bounded &= dtm_st_at(st, i)->nbytes <= len;
			dtm_st_close(st);
		}
	}
	CHECK(bounded);
	free(mut);
	free(raw);

	static const struct {
		const char *hdr;
		size_t ndata;
		const char *msg;
	} bad[] = {
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "outside"},
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
	         "needs 12 bytes"},
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
	         8, "overlap"},
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap"},
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
	         "after the last"},
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
	         8, "duplicate"},
	        {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
	         "unsupported dtype"},
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
	         "shape[0]"},
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
	         "shape[0]"},
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
	         "\"data_offsets\":[0,4]}}",
	         4, "too large"},
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, "outside"},
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
	         "unknown field"},
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets"},
	        {"{\"a\":[1,2]}", 0, "not an object"},
	        {"{\"__metadata__\":{\"k\":1}}", 0, "not a string"},
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, "bad JSON"},
	        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4,
	         "bad JSON"},
	        {"{\"a\\u0000\":{}}", 0, "bad JSON"},
	        {"[]", 0, "not a JSON object"},
	        {"{} x", 0, "trailing"},
	        {"{\"a\":\"\\ud800\"}", 0, "surrogate"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		int rc = open_crafted(bad[i].hdr, bad[i].ndata, err, sizeof err);
		CHECK_EQ_INT(rc, -1);
		if (!strstr(err, bad[i].msg)) {
			fprintf(stderr, "case %zu: expected \"%s\" in \"%s\"\n", i, bad[i].msg,
			        err);
			CHECK(0);
		}
	}
	/* deep nesting is bounded, not a stack overflow */
	char deep[4200];
	strcpy(deep, "{\"a\":");
	memset(deep + 5, '[', 4000);
	deep[4005] = '\0';
	CHECK_EQ_INT(open_crafted(deep, 0, err, sizeof err), -1);
	CHECK(strstr(err, "nesting too deep") != NULL);
	/* a header size beyond the file, or absurdly large */
	unsigned char hdr16[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
	DtmSafetensors *st;
	CHECK_EQ_INT(dtm_st_open_memory(&st, hdr16, 16, "big", err, sizeof err), -1);
	CHECK(strstr(err, "exceeds") != NULL);
	hdr16[0] = 100;
	memset(hdr16 + 1, 0, 7);
	CHECK_EQ_INT(dtm_st_open_memory(&st, hdr16, 16, "past", err, sizeof err), -1);
	CHECK(strstr(err, "past the end") != NULL);
	CHECK_EQ_INT(dtm_st_open(&st, tpath("no.safetensors"), err, sizeof err), -1);
	CHECK(strstr(err, "no.safetensors") && strstr(err, "No such file"));
}

/* ---- checksums ---- */

static uint32_t crc_bitwise(const unsigned char *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
	}
	return ~c;
}

static void test_crc32c(void)
{
	/* the check value of the CRC catalogue, and RFC 3720's B.4 vectors */
	CHECK(dtm_crc32c(0, "123456789", 9) == 0xe3069283u);
	CHECK(dtm_crc32c(0, NULL, 0) == 0);
	unsigned char buf[1100];
	memset(buf, 0, 32);
	CHECK(dtm_crc32c(0, buf, 32) == 0x8a9136aau);
	memset(buf, 0xff, 32);
	CHECK(dtm_crc32c(0, buf, 32) == 0x62a8ab43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)i;
	CHECK(dtm_crc32c(0, buf, 32) == 0x46dd794eu);
	/* the 8-byte path against the bitwise definition, at every length
	 * and alignment, and continued in two pieces */
	uint32_t rs = 99;
	for (size_t i = 0; i < sizeof buf; i++) {
		rs = rs * 1664525u + 1013904223u;
		buf[i] = (unsigned char)(rs >> 24);
	}
	int same = 1;
	for (size_t off = 0; off < 8; off++)
		for (size_t n = 0; n < 80; n++) {
			same &= dtm_crc32c(0, buf + off, n) == crc_bitwise(buf + off, n);
			same &= dtm_crc32c(dtm_crc32c(0, buf + off, n / 3), buf + off + n / 3,
			                   n - n / 3) == crc_bitwise(buf + off, n);
		}
	CHECK(same);
	CHECK(dtm_crc32c(0, buf, sizeof buf) == crc_bitwise(buf, sizeof buf));
}

static void test_safetensors_checksums(void)
{
	char err[512];
	size_t len;
	unsigned char *raw = read_bytes(tpath("a.safetensors"), &len);
	DtmSafetensors *st = NULL;
	CHECK(raw != NULL);
	if (!raw || dtm_st_open_memory(&st, raw, len, "a", err, sizeof err)) {
		CHECK(0);
		free(raw);
		return;
	}
	/* each tensor's checksum is in the metadata, as a string, and
	 * checked; the tensors tile the data section from 0, so the lowest
	 * data pointer is its start */
	uint64_t hlen = 0;
	for (int k = 0; k < 8; k++)
		hlen |= (uint64_t)raw[k] << (8 * k);
	int n = dtm_st_count(st);
	int64_t begin[16], end[16];
	const char *names[16];
	const unsigned char *base = NULL;
	for (int i = 0; i < n && i < 16; i++) {
		const DtmStTensor *t = dtm_st_at(st, i);
		char key[300], want[16];
		snprintf(key, sizeof key, "crc32c:%s", t->name);
		snprintf(want, sizeof want, "%08x", (unsigned)dtm_crc32c(0, t->data, t->nbytes));
		CHECK_EQ_STR(dtm_st_meta(st, key), want);
		CHECK(t->has_crc32c && t->crc32c == dtm_crc32c(0, t->data, t->nbytes));
		if (!base || (const unsigned char *)t->data < base)
			base = t->data;
	}
	for (int i = 0; i < n && i < 16; i++) {
		const DtmStTensor *t = dtm_st_at(st, i);
		names[i] = t->name;
		begin[i] = (const unsigned char *)t->data - base;
		end[i] = begin[i] + (int64_t)t->nbytes;
	}
	char owned_names[16][64];
	for (int i = 0; i < n && i < 16; i++) {
		snprintf(owned_names[i], sizeof owned_names[i], "%s", names[i]);
		names[i] = owned_names[i];
	}
	dtm_st_close(st);
	/* every single flipped data byte is caught, naming file and tensor */
	unsigned char *mut = malloc(len);
	int caught = 1;
	size_t ndata = len - 8 - (size_t)hlen;
	for (size_t b = 0; b < ndata && mut; b++) {
		memcpy(mut, raw, len);
		mut[8 + hlen + b] ^= 0x10;
		const char *owner = NULL;
		for (int i = 0; i < n && i < 16; i++)
			if ((int64_t)b >= begin[i] && (int64_t)b < end[i])
				owner = names[i];
		err[0] = '\0';
		int rc = dtm_st_open_memory(&st, mut, len, "flip.safetensors", err, sizeof err);
		char want[300];
		snprintf(want, sizeof want,
		         "flip.safetensors: tensor %s: data does not match its "
		         "checksum",
		         owner ? owner : "?");
		if (rc != -1 || !strstr(err, want)) {
			fprintf(stderr, "byte %zu: \"%s\"\n", b, err);
			caught = 0;
		}
		if (!rc)
			dtm_st_close(st);
	}
	CHECK(caught);
	free(mut);

	/* checksums that name no tensor, repeat, or are not 8 hex digits */
	static const struct {
		const char *hdr;
		const char *msg;
	} bad[] = {
	        {"{\"__metadata__\":{\"crc32c:b\":\"00000000\"},"
	         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	         "checksum \"crc32c:b\" names no tensor"},
	        {"{\"__metadata__\":{\"crc32c:a\":\"527d5351\",\"crc32c:a\":\"527d5351\"},"
	         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	         "tensor a: repeated checksum"},
	        {"{\"__metadata__\":{\"crc32c:a\":\"527d535\"},"
	         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	         "tensor a: bad checksum \"527d535\""},
	        {"{\"__metadata__\":{\"crc32c:a\":\"527d5351 \"},"
	         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	         "tensor a: bad checksum"},
	        {"{\"__metadata__\":{\"crc32c:a\":\"527d535g\"},"
	         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	         "tensor a: bad checksum"},
	        {"{\"__metadata__\":{\"crc32c:a\":\"00000000\"},"
	         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	         "tensor a: data does not match its checksum (crc32c 00000000 stored, "
	         "527d5351 computed)"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		CHECK_EQ_INT(open_crafted(bad[i].hdr, 1, err, sizeof err), -1);
		if (!strstr(err, bad[i].msg)) {
			fprintf(stderr, "case %zu: expected \"%s\" in \"%s\"\n", i, bad[i].msg,
			        err);
			CHECK(0);
		}
	}
	/* a checksum that matches (one zero byte), upper case too; and a file
	 * with none (written elsewhere) still opens, unchecked */
	CHECK_EQ_INT(open_crafted("{\"__metadata__\":{\"crc32c:a\":\"527D5351\"},"
	                          "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
	                          1, err, sizeof err),
	             0);
	const char *plain = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
	unsigned char pbuf[128] = {0};
	size_t pl = strlen(plain);
	pbuf[0] = (unsigned char)pl;
	memcpy(pbuf + 8, plain, pl);
	CHECK_EQ_INT(dtm_st_open_memory(&st, pbuf, 8 + pl + 1, "plain", err, sizeof err), 0);
	if (st) {
		CHECK(!dtm_st_find(st, "a")->has_crc32c);
		dtm_st_close(st);
	}

	/* the writer keeps the prefix to itself */
	uint8_t one = 0;
	DtmTensorDesc t1 = {"a", DTM_DT_U8, 1, {1}, &one};
	DtmMetaKV forged = {"crc32c:a", "00000000"};
	CHECK_EQ_INT(dtm_st_write(tpath("forged.safetensors"), &t1, 1, &forged, 1, err, sizeof err),
	             -1);
	CHECK(strstr(err, "\"crc32c:a\" is reserved") != NULL);
	CHECK(access(tpath("forged.safetensors"), F_OK) != 0);
	free(raw);
}

/* ---- checkpoints ---- */

static int fail_after_100(const char *tmp, uint64_t off, size_t n, void *ctx)
{
	(void)tmp;
	(void)ctx;
	return off + n > 100;
}

static int crash_after_100(const char *tmp, uint64_t off, size_t n, void *ctx)
{
	(void)tmp;
	(void)ctx;
	if (off + n > 100)
		_exit(3); /* a crash: no cleanup, the temporary file stays */
	return 0;
}

static float load_first(const char *dir, uint64_t *step)
{
	char sd[1024], path[1200], err[512];
	if (dtm_ckpt_find_latest(dir, step, sd, sizeof sd, err, sizeof err) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/rank00000.safetensors", sd);
	DtmSafetensors *st;
	if (dtm_st_open(&st, path, err, sizeof err))
		return -1;
	static float v[1024];
	v[0] = -1;
	const DtmStTensor *t = dtm_st_find(st, "w");
	if (t && t->numel == 1024)
		dtm_st_read_f32(t, v);
	dtm_st_close(st);
	return v[0];
}

static void test_checkpoints(void)
{
	char err[512], sd[1024];
	const char *dir = tpath("ckpt/run1");
	uint64_t step = 99;
	CHECK_EQ_INT(dtm_ckpt_find_latest(dir, &step, sd, sizeof sd, err, sizeof err),
	             DTM_CKPT_NONE);

	float w[1024];
	for (int i = 0; i < 1024; i++)
		w[i] = 10.0f;
	DtmTensorDesc t = {"w", DTM_DT_F32, 1, {1024}, w};
	DtmMetaKV meta = {"step", "10"};
	CHECK_EQ_INT(dtm_ckpt_save_single(dir, 10, 1234, &t, 1, &meta, 1, err, sizeof err), 0);
	CHECK(load_first(dir, &step) == 10.0f);
	CHECK_EQ_INT(step, 10);

	/* a disk error mid-write: the save fails naming the file, the
	 * temporary is gone, and latest still selects step 10 */
	for (int i = 0; i < 1024; i++)
		w[i] = 20.0f;
	rt_set_fault_hook(fail_after_100, NULL);
	int rc = dtm_ckpt_save_single(dir, 20, 1234, &t, 1, &meta, 1, err, sizeof err);
	rt_set_fault_hook(NULL, NULL);
	CHECK_EQ_INT(rc, -1);
	CHECK(strstr(err, "step_000020/rank00000.safetensors.tmp.") &&
	      strstr(err, "Input/output error"));
	CHECK_EQ_INT(count_entries(tpath("ckpt/run1/step_000020"), ".tmp."), 0);
	CHECK_EQ_INT(count_entries(tpath("ckpt/run1/step_000020"), "rank"), 0);
	CHECK(load_first(dir, &step) == 10.0f);
	CHECK_EQ_INT(step, 10);

	/* a crash (process killed mid-write, no cleanup at all) */
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		rt_set_fault_hook(crash_after_100, NULL);
		dtm_ckpt_save_single(dir, 20, 1234, &t, 1, &meta, 1, err, sizeof err);
		_exit(0);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3);
	CHECK_EQ_INT(count_entries(tpath("ckpt/run1/step_000020"), ".tmp."), 1);
	CHECK(access(tpath("ckpt/run1/step_000020/rank00000.safetensors"), F_OK) != 0);
	CHECK(load_first(dir, &step) == 10.0f);
	CHECK_EQ_INT(step, 10);

	/* the next save of that step succeeds over the debris */
	CHECK_EQ_INT(dtm_ckpt_save_single(dir, 20, 1234, &t, 1, &meta, 1, err, sizeof err), 0);
	CHECK(load_first(dir, &step) == 20.0f);
	CHECK_EQ_INT(step, 20);
	DtmCkptIndex ix;
	CHECK_EQ_INT(dtm_ckpt_index_read(tpath("ckpt/run1/step_000020/index.json"), &ix, err,
	                                 sizeof err),
	             0);
	CHECK_EQ_INT(ix.step, 20);
	CHECK(ix.seed == 1234);
	CHECK_EQ_INT(ix.nfiles, 1);
	CHECK_EQ_INT(ix.ntensors, 1);
	if (ix.nfiles == 1 && ix.ntensors == 1) {
		CHECK_EQ_STR(ix.files[0], "rank00000.safetensors");
		CHECK_EQ_STR(ix.tensors[0].name, "w");
		CHECK_EQ_STR(ix.tensors[0].dtype, "F32");
		CHECK_EQ_INT(ix.tensors[0].shape[0], 1024);
	}
	dtm_ckpt_index_free(&ix);

	/* latest naming a step without an index is an error, not a silent
	 * fresh start */
	CHECK_EQ_INT(rt_write_file_atomic(tpath("ckpt/run1/latest"), "step_000030\n", 12, err,
	                                  sizeof err),
	             0);
	CHECK_EQ_INT(dtm_ckpt_find_latest(dir, &step, sd, sizeof sd, err, sizeof err), -1);
	CHECK(strstr(err, "index.json is missing") != NULL);
	CHECK_EQ_INT(rt_write_file_atomic(tpath("ckpt/run1/latest"), "garbage", 7, err, sizeof err),
	             0);
	CHECK_EQ_INT(dtm_ckpt_find_latest(dir, &step, sd, sizeof sd, err, sizeof err), -1);

	/* an atomic write into a directory that is gone fails cleanly */
	CHECK_EQ_INT(rt_write_file_atomic(tpath("gone/x"), "x", 1, err, sizeof err), -1);
	CHECK(strstr(err, "gone/x") && strstr(err, "No such file"));
}

static void test_index(void)
{
	char err[512];
	const char *files[4] = {"rank00000.safetensors", "rank00001.safetensors",
	                        "rank00002.safetensors", "rank00003.safetensors"};
	DtmIndexTensor ts[2] = {
	        {"layer.3.wqkv", "BF16", 2, {768, 2304}, "[_, tp]"},
	        {"opt.m.layer.3.wqkv", "F32", 2, {768, 2304}, NULL},
	};
	DtmCkptIndex ix = {.step = 500,
	                   .seed = UINT64_MAX,
	                   .naxes = 2,
	                   .axes = {"dp", "tp"},
	                   .sizes = {2, 2},
	                   .nfiles = 4,
	                   .files = files,
	                   .checksum = DTM_CKPT_CHECKSUM,
	                   .ntensors = 2,
	                   .tensors = ts};
	CHECK_EQ_INT(dtm_ckpt_index_write(tpath("index.json"), &ix, err, sizeof err), 0);
	DtmCkptIndex r;
	CHECK_EQ_INT(dtm_ckpt_index_read(tpath("index.json"), &r, err, sizeof err), 0);
	CHECK_EQ_INT(r.step, 500);
	CHECK(r.seed == UINT64_MAX);
	CHECK_EQ_INT(r.naxes, 2);
	CHECK_EQ_INT(r.nfiles, 4);
	CHECK_EQ_INT(r.ntensors, 2);
	if (r.naxes == 2 && r.nfiles == 4 && r.ntensors == 2) {
		CHECK_EQ_STR(r.axes[1], "tp");
		CHECK_EQ_INT(r.sizes[1], 2);
		CHECK_EQ_STR(r.files[3], "rank00003.safetensors");
		CHECK_EQ_STR(r.tensors[0].placement, "[_, tp]");
		CHECK_EQ_STR(r.tensors[0].dtype, "BF16");
		CHECK_EQ_INT(r.tensors[0].shape[1], 2304);
		CHECK(r.tensors[1].placement == NULL);
		CHECK_EQ_STR(r.tensors[1].dtype, "F32");
		CHECK_EQ_STR(r.checksum, "crc32c");
	}
	dtm_ckpt_index_free(&r);
	/* the writer wants a dtype */
	ts[1].dtype = NULL;
	CHECK_EQ_INT(dtm_ckpt_index_write(tpath("index2.json"), &ix, err, sizeof err), -1);

	/* every field the loader uses, checked: each variant of a valid
	 * index is refused with a message naming the file and the fault */
	static const char base[] = "{\"format\":\"dtm-1\",\"step\":1,\"seed\":\"7\","
	                           "\"mesh\":{\"axes\":[\"dp\",\"tp\"],\"sizes\":[2,2]},"
	                           "\"files\":[\"rank00000.safetensors\",\"rank00001.safetensors\","
	                           "\"rank00002.safetensors\",\"rank00003.safetensors\"],"
	                           "\"checksum\":\"crc32c\","
	                           "\"tensors\":{\"w\":{\"dtype\":\"F32\",\"shape\":[4,6],"
	                           "\"placement\":\"[(dp, tp), _]\"}}}";
	static const struct {
		const char *from, *to, *msg; /* base with `from` replaced by `to` */
	} cases[] = {
	        {"\"dtm-1\"", "\"dtm-2\"", "not a dtm checkpoint index"},
	        {"\"step\":1", "\"step\":-1", "bad \"step\""},
	        {"\"step\":1", "\"step\":1.5", "bad \"step\""},
	        {"\"step\":1,", "", "bad \"step\""},
	        {"\"seed\":\"7\"", "\"seed\":7", "bad \"seed\""},
	        {"\"seed\":\"7\"", "\"seed\":\"-7\"", "bad \"seed\""},
	        {"\"seed\":\"7\"", "\"seed\":\"99999999999999999999\"", "bad \"seed\""},
	        {"\"seed\":\"7\"", "\"seed\":\"7x\"", "bad \"seed\""},
	        {"\"sizes\":[2,2]", "\"sizes\":[2]", "bad \"mesh\""},
	        {"\"mesh\":{", "\"mesh\":{\"order\":1,", "mesh: unknown field \"order\""},
	        {"\"mesh\":{\"axes\":[\"dp\",\"tp\"],\"sizes\":[2,2]}", "\"mesh\":[]",
	         "bad \"mesh\""},
	        {"[\"dp\",\"tp\"]", "[\"dp\",\"dp\"]", "mesh axis \"dp\" appears twice"},
	        {"[\"dp\",\"tp\"]", "[\"dp\",\"t p\"]", "mesh axis 1 is not a name"},
	        {"[\"dp\",\"tp\"]", "[\"dp\",3]", "mesh axis 1 is not a name"},
	        {"[2,2]", "[2,0]", "mesh axis tp: size is not an integer"},
	        {"[2,2]", "[2,\"2\"]", "mesh axis tp: size is not an integer"},
	        {"[2,2]", "[65536,65536]", "more than 65536 ranks"},
	        {",\"rank00003.safetensors\"", "", "3 files for a mesh of 4 ranks"},
	        {"\"rank00000.safetensors\",", "\"../../etc/passwd\",",
	         "files[0] is not \"rank00000.safetensors\""},
	        {"\"rank00000.safetensors\",\"rank00001.safetensors\"",
	         "\"rank00001.safetensors\",\"rank00000.safetensors\"",
	         "files[0] is not \"rank00000.safetensors\""},
	        {"\"files\":[", "\"files\":{", "bad JSON"},
	        {"\"step\":1,", "\"step\":1,\"extra\":1,", "index: unknown field \"extra\""},
	        {"\"step\":1,", "\"step\":1,\"step\":1,", "index: repeated field \"step\""},
	        {"\"crc32c\"", "\"md5\"", "unsupported \"checksum\""},
	        {"\"tensors\":{", "\"tensors\":[", "bad JSON"},
	        {"\"tensors\":{\"w\":{\"dtype\":\"F32\",\"shape\":[4,6],"
	         "\"placement\":\"[(dp, tp), _]\"}}",
	         "\"tensors\":1", "missing or bad \"tensors\""},
	        {"\"dtype\":\"F32\",", "", "tensor w: missing or unknown \"dtype\""},
	        {"\"F32\"", "\"Q4\"", "tensor w: missing or unknown \"dtype\""},
	        {"[4,6]", "[\"x\",6]", "tensor w: shape[0] is not a non-negative integer"},
	        {"[4,6]", "[4,-6]", "tensor w: shape[1] is not a non-negative integer"},
	        {"[4,6]", "[1,1,1,1,1,1,1,1,1]", "at most 8 dims"},
	        {"[4,6]", "[4294967296,4294967296,4294967296]", "tensor w: shape too large"},
	        {"\"shape\":[4,6],", "", "tensor w: missing or bad \"shape\""},
	        {"[(dp, tp), _]", "[pp, _]", "names an axis the mesh does not have"},
	        {"[(dp, tp), _]", "[tp]", "another number of dims than the shape"},
	        {"[(dp, tp), _]", "[tp, tp]", "splits by the same axis twice"},
	        {"[(dp, tp), _]", "[(dp, dp), _]", "splits by the same axis twice"},
	        {"[(dp, tp), _]", "[tp, _", "expected ']'"},
	        {"[(dp, tp), _]", "(tp, _)", "does not start with '['"},
	        {"[(dp, tp), _]", "[(dp tp), _]", "expected ',' or ')'"},
	        {"[(dp, tp), _]", "[tp _]", "expected ',' or ']'"},
	        {"[(dp, tp), _]", "[, _]", "expected '_' or a mesh axis"},
	        {"[(dp, tp), _]", "[tp, _] partial(xx)", "partial(...) names an axis"},
	        {"[(dp, tp), _]", "[tp, _] partial(dp", "expected ',' or ')' in partial"},
	        {"[(dp, tp), _]", "[tp, _] junk", "has text after the placement"},
	        {"\"[(dp, tp), _]\"", "5", "placement \"\" is not a string"},
	        {"\"placement\"", "\"layout\"", "tensor w: unknown field \"layout\""},
	        {"{\"dtype\":\"F32\",\"shape\":[4,6],\"placement\":\"[(dp, tp), _]\"}", "[]",
	         "tensor w: entry is not an object"},
	        {"\"tensors\":{", "\"tensors\":{\"w\":{\"dtype\":\"F32\",\"shape\":[1]},",
	         "tensor w listed twice"},
	        {"\"tensors\":{", "\"tensors\":{\"\":{\"dtype\":\"F32\",\"shape\":[1]},",
	         "a tensor with an empty name"},
	        {"}}}", "}}", "bad JSON"},
	        /* valid variants */
	        {"[(dp, tp), _]", "[tp, _] partial(dp, avg)", NULL},
	        {"[(dp, tp), _]", "[ _ , tp ]", NULL},
	        {"\"[(dp, tp), _]\"", "\"?\"", NULL},
	        {",\"placement\":\"[(dp, tp), _]\"", "", NULL},
	        {"\"checksum\":\"crc32c\",", "", NULL},
	        {"", "", NULL},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char text[1024];
		const char *at = strstr(base, cases[i].from);
		CHECK(at != NULL);
		if (!at)
			continue;
		snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, cases[i].to,
		         at + strlen(cases[i].from));
		write_bytes(tpath("bad_index.json"), text, strlen(text));
		err[0] = '\0';
		int rc = dtm_ckpt_index_read(tpath("bad_index.json"), &r, err, sizeof err);
		/* the same text parsed from memory: the same verdict, the
		 * label in place of the file name (what fuzz_ckpt drives) */
		char merr[512] = "";
		DtmCkptIndex m;
		int mrc = dtm_ckpt_index_parse(text, strlen(text), "mem.json", &m, merr, sizeof merr);
		CHECK_EQ_INT(mrc, rc);
		if (mrc == 0) {
			CHECK_EQ_INT(m.ntensors, rc == 0 ? r.ntensors : -1);
			dtm_ckpt_index_free(&m);
		} else if (!strstr(merr, "mem.json") ||
		           (cases[i].msg && !strstr(merr, cases[i].msg))) {
			fprintf(stderr, "index case %zu from memory: \"%s\"\n", i, merr);
			CHECK(0);
		}
		if (!cases[i].msg) {
			if (rc)
				fprintf(stderr, "index case %zu: %s\n", i, err);
			CHECK_EQ_INT(rc, 0);
			dtm_ckpt_index_free(&r);
			continue;
		}
		CHECK_EQ_INT(rc, -1);
		CHECK(r.priv == NULL);
		if (!strstr(err, cases[i].msg) || !strstr(err, "bad_index.json")) {
			fprintf(stderr, "index case %zu: expected \"%s\" in \"%s\"\n", i,
			        cases[i].msg, err);
			CHECK(0);
		}
	}
	/* one rank: no axes, one file of whole tensors */
	const char *one = "{\"format\":\"dtm-1\",\"step\":0,\"seed\":\"0\",\"mesh\":{\"axes\":[],"
	                  "\"sizes\":[]},\"files\":[\"rank00000.safetensors\"],\"tensors\":{}}";
	write_bytes(tpath("bad_index.json"), one, strlen(one));
	CHECK_EQ_INT(dtm_ckpt_index_read(tpath("bad_index.json"), &r, err, sizeof err), 0);
	CHECK(r.checksum == NULL && r.nfiles == 1 && r.naxes == 0);
	dtm_ckpt_index_free(&r);
}

static void test_json(void)
{
	JsonDoc doc;
	char err[256];
	const char *s =
	        " {\"a\": [1, -2.5e3, true, false, null], \"b\": \"x\\u00e9\\ud83d\\ude00\\n\"} ";
	CHECK_EQ_INT(json_parse(&doc, s, strlen(s), err, sizeof err), 0);
	const Json *a = json_get(doc.root, "a"), *b = json_get(doc.root, "b");
	CHECK(a && a->kind == JSON_ARR && a->n == 5);
	if (a && a->n == 5) {
		CHECK(a->kids[0].is_int && a->kids[0].i == 1);
		CHECK(!a->kids[1].is_int && a->kids[1].d == -2500.0);
		CHECK(a->kids[2].b && !a->kids[3].b && a->kids[4].kind == JSON_NULL);
	}
	CHECK(b && strcmp(b->s, "x\xc3\xa9\xf0\x9f\x98\x80\n") == 0);
	json_free(&doc);
	static const char *bad[] = {"",    "{",     "[1,]",     "01",        "1.",
	                            "-",   "\"abc", "tru",      "{\"a\" 1}", "[1] [2]",
	                            "NaN", "0x10",  "\"\x01\"", "{\"a\":1,}"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK_EQ_INT(json_parse(&doc, bad[i], strlen(bad[i]), err, sizeof err), -1);
	/* the escaper and the parser agree */
	JsonBuf buf = {0};
	json_buf_str(&buf, "q\"b\\s\x01\tz");
	CHECK_EQ_INT(json_parse(&doc, buf.p, buf.len, err, sizeof err), 0);
	CHECK_EQ_STR(doc.root->s, "q\"b\\s\x01\tz");
	json_free(&doc);
	json_buf_free(&buf);
}

/* Shard geometry and the resharding copy (runtime/ckpt.h) against brute
 * force: a 7 x 5 tensor of values = global index, saved on a (2, 3) mesh
 * as [(a, b), _] (dim 0 over 6 parts of torch.chunk's sizes 2,2,2,1,0,0)
 * and reassembled into every shard of [_, b] on a (b=3) mesh and of a
 * padded [a, _] shard; bf16 to f32 and f32 to bf16 conversions exact for
 * small integers; no overlap copies nothing. */
static void test_reshard_geometry(void)
{
	static const char *const axes[] = {"a", "b"};
	DtmCkptIndex ix = {.naxes = 2, .sizes = {2, 3}};
	ix.axes[0] = axes[0];
	ix.axes[1] = axes[1];
	DtmIndexTensor t = {.name = "x", .dtype = "F32", .ndim = 2, .shape = {7, 5},
	                    .placement = "[(a, b), _]"};
	DtmShardLayout l;
	char err[256];
	CHECK_EQ_INT(dtm_ckpt_layout(&ix, &t, &l, err, sizeof err), 0);
	CHECK(l.nsplit[0] == 2 && l.split[0][0] == 0 && l.split[0][1] == 1 && l.nsplit[1] == 0);
	static const int64_t want_len[6] = {2, 2, 2, 1, 0, 0};
	float src[6][2 * 5];
	int64_t sstart[6][2], slen[6][2];
	for (int64_t k = 0; k < 6; k++) {
		int64_t c[2];
		dtm_ckpt_rank_coords(&ix, k, c);
		CHECK(c[0] == k / 3 && c[1] == k % 3);
		CHECK(dtm_ckpt_first_copy(&l, 2, c, -1));
		dtm_ckpt_shard_box(&l, ix.sizes, c, sstart[k], slen[k]);
		CHECK(slen[k][0] == want_len[k] && slen[k][1] == 5);
		CHECK(sstart[k][0] == (k * 2 < 7 ? k * 2 : 7));
		for (int64_t i = 0; i < slen[k][0] * 5; i++)
			src[k][i] = (float)((sstart[k][0] + i / 5) * 5 + i % 5);
	}
	/* [_, b] on b=3: columns 2, 2, 1 */
	DtmIndexTensor t2 = {.name = "x", .dtype = "F32", .ndim = 2, .shape = {7, 5},
	                     .placement = "[_, b]"};
	DtmCkptIndex ix2 = {.naxes = 1, .sizes = {3}};
	ix2.axes[0] = axes[1];
	DtmShardLayout l2;
	CHECK_EQ_INT(dtm_ckpt_layout(&ix2, &t2, &l2, err, sizeof err), 0);
	for (int64_t q = 0; q < 3; q++) {
		int64_t dstart[2], dlen[2], dshape[2] = {7, 2}, got = 0;
		dtm_ckpt_shard_box(&l2, ix2.sizes, &q, dstart, dlen);
		CHECK(dlen[1] == (q < 2 ? 2 : 1));
		float dst[7 * 2];
		for (int i = 0; i < 14; i++)
			dst[i] = -1;
		for (int k = 0; k < 6; k++)
			got += dtm_ckpt_copy_overlap(2, src[k], DTM_DT_F32, sstart[k], slen[k], dst,
			                             DTM_DT_F32, dshape, dstart, dlen);
		CHECK(got == 7 * dlen[1]);
		for (int r = 0; r < 7; r++)
			for (int c = 0; c < 2; c++)
				CHECK(dst[r * 2 + c] == (c < dlen[1] ? (float)(r * 5 + dstart[1] + c) : -1));
	}
	/* f32 -> bf16 into a padded shard: [a, _] over a=2 of 7 rows, 4 + 3,
	 * the second shard's 4th row padding (untouched) */
	int64_t dstart[2] = {4, 0}, dlen[2] = {3, 5}, dshape[2] = {4, 5};
	uint16_t bf[4 * 5];
	memset(bf, 0, sizeof bf);
	int64_t got = 0;
	for (int k = 0; k < 6; k++)
		got += dtm_ckpt_copy_overlap(2, src[k], DTM_DT_F32, sstart[k], slen[k], bf,
		                             DTM_DT_BF16, dshape, dstart, dlen);
	CHECK(got == 15);
	for (int i = 0; i < 15; i++)
		CHECK(bf16_to_f32(bf[i]) == (float)(20 + i));
	for (int i = 15; i < 20; i++)
		CHECK(bf[i] == 0);
	/* and back: bf16 -> f32, exact */
	float back[15];
	int64_t bstart[2] = {4, 0}, blen[2] = {3, 5}, bshape[2] = {3, 5};
	CHECK(dtm_ckpt_copy_overlap(2, bf, DTM_DT_BF16, dstart, dlen, back, DTM_DT_F32, bshape,
	                            bstart, blen) == 15);
	for (int i = 0; i < 15; i++)
		CHECK(back[i] == (float)(20 + i));
	/* no overlap; integers do not become floats */
	int64_t far[2] = {0, 0}, one[2] = {1, 5};
	CHECK(dtm_ckpt_copy_overlap(2, src[0], DTM_DT_F32, sstart[3], slen[3], back, DTM_DT_F32,
	                            bshape, far, one) == 0);
	CHECK(dtm_ckpt_copy_overlap(2, src[0], DTM_DT_I32, sstart[0], slen[0], back, DTM_DT_F32,
	                            bshape, sstart[0], slen[0]) == -1);
	/* a replica's first copy: 0 on the axes that split nothing */
	int64_t c[2] = {1, 0};
	CHECK(dtm_ckpt_first_copy(&l2, 1, (int64_t[]){0}, -1));
	DtmIndexTensor t3 = {.name = "x", .dtype = "F32", .ndim = 2, .shape = {7, 5},
	                     .placement = "[b, _]"};
	DtmShardLayout l3;
	CHECK_EQ_INT(dtm_ckpt_layout(&ix, &t3, &l3, err, sizeof err), 0);
	CHECK(!dtm_ckpt_first_copy(&l3, 2, c, -1));
	CHECK(dtm_ckpt_first_copy(&l3, 2, c, 0));
	/* pp (2) x dp (2): file 0's shard has its copy on stage 1 in file 2 */
	static const char *const ppdp[] = {"pp", "dp"};
	DtmCkptIndex ixp = {.naxes = 2, .sizes = {2, 2}, .nfiles = 4};
	ixp.axes[0] = ppdp[0];
	ixp.axes[1] = ppdp[1];
	CHECK_EQ_INT(dtm_ckpt_pp_axis(&ixp), 0);
	CHECK_EQ_INT(dtm_ckpt_pp_axis(&ix), -1);
	bool done[4] = {false, false, false, false};
	dtm_ckpt_mark_copies(&ixp, 0, 0, done);
	CHECK(!done[0] && !done[1] && done[2] && !done[3]);
	dtm_ckpt_mark_copies(&ixp, -1, 1, done);
	CHECK(!done[3]);
	t3.placement = "[_, _] partial(a)";
	CHECK_EQ_INT(dtm_ckpt_layout(&ix, &t3, &l3, err, sizeof err), -1);
}

int main(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/dtm_test_io.XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_philox_kat();
	test_init_stats();
	test_init_order_and_shards();
	test_markov();
	test_regression();
	test_token_files();
	test_token_shards();
	test_f16_bf16();
	test_json();
	test_safetensors_roundtrip();
	test_safetensors_corrupt();
	test_crc32c();
	test_safetensors_checksums();
	test_checkpoints();
	test_index();
	test_reshard_geometry();
	rm_tree(tmpdir);
	return check_report();
}
