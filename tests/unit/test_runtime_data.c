/* test_runtime_data.c - the training binary's --data and --val-data end to
 * end: llm.c token shards (train x3, val x1, the llm.c naming) read through
 * dtm_main exactly as a generated binary reads them, on a hand-written
 * token Plan whose "loss" is not a loss but a fingerprint of the batch:
 *
 *     loss = 1000 * tokens[0][0] + targets[1][T-1]
 *
 * (the first token of the batch's first sample and the last target of its
 * second), so the log says which samples each step and each evaluation
 * read.  Checked: batches in order across shard boundaries (also token by
 * token with --dump-batches), a glob and a comma-separated list, eval on
 * the val file only, the note when there is no val file, every bad-shard
 * error (naming the file, exit 1, nothing written), and resume keeping
 * the data position across shards or refusing other shards. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "testlib_rt.h"
#include "testlib.h"
#include "runtime/ckpt.h"
#include "runtime/rt.h"

/* ---- the plan: B = 2 samples of T = 4 tokens, vocab 1000 ---- */

enum { B_W, B_TOK, B_TGT, B_LOSS, NBUF };
#define BATCH 2
#define SEQ 4
#define VOCAB 1000

static void k_probe(const DtmCtx *ctx, void *const *a)
{
	(void)ctx;
	const int32_t *tok = a[0], *tgt = a[1];
	const float *w = a[2];
	*(float *)a[3] = (float)(1000 * tok[0] + tgt[BATCH * SEQ - 1]) + w[0];
}

static const DtmKernelFn kernels[] = { k_probe };
static const char *const kernel_names[] = { "probe" };

#define BUF(nm, role_, dt, r, s0, s1, ar, off, by, in)                                   \
	{ .name = nm, .role = role_, .dtype = dt, .rank = r, .shape = { s0, s1 },         \
	  .global_shape = { s0, s1 }, .arena = ar, .offset = off, .bytes = by, .init = in }

static DtmBuffer buffers[NBUF] = {
	[B_W] = BUF("w", DTM_ROLE_PARAM, DTM_F32, 1, 1, 0, DTM_ARENA_PARAM, 0, 4, DTM_INIT_ZEROS),
	[B_TOK] = BUF("tokens", DTM_ROLE_INPUT, DTM_I32, 2, BATCH, SEQ, DTM_ARENA_INPUT, 0, 32,
		      DTM_INIT_NONE),
	[B_TGT] = BUF("targets", DTM_ROLE_INPUT, DTM_I32, 2, BATCH, SEQ, DTM_ARENA_INPUT, 32, 32,
		      DTM_INIT_NONE),
	[B_LOSS] = BUF("loss", DTM_ROLE_LOSS, DTM_F32, 0, 0, 0, DTM_ARENA_ACT, 0, 4,
		       DTM_INIT_NONE),
};

static const DtmAction actions[] = {
	{ .kind = DTM_ACT_KERNEL, .phase = DTM_PHASE_FORWARD, .node = 1, .label = "probe",
	  .nargs = 4, .args = { B_TOK, B_TGT, B_W, B_LOSS }, .kernel = 0 },
};

static DtmStage stage = { .nactions = 1, .actions = actions };

static DtmPlan make_plan(void)
{
	DtmPlan p = {
		.version = DTM_PLAN_VERSION,
		.model = "probe",
		.nbuffers = NBUF,
		.buffers = buffers,
		.arena_bytes = { [DTM_ARENA_PARAM] = 4, [DTM_ARENA_ACT] = 4,
				 [DTM_ARENA_INPUT] = 64 },
		.nstages = 1,
		.stages = &stage,
		.nkernels = 1,
		.kernels = kernels,
		.kernel_names = kernel_names,
		.ninputs = 2,
		.inputs = { B_TOK, B_TGT },
		.loss = B_LOSS,
		.grad_norm = -1,
		.train = { .optimizer = DTM_OPTIMIZER_SGD, .lr = 0.1f, .lr_schedule = DTM_LR_CONSTANT, .steps = 6,
			   .data = "synthetic", .seed = 1, .tokens_per_step = BATCH * SEQ,
			   .batch = BATCH, .vocab = VOCAB, .data_kind = DTM_DATA_TOKENS,
			   .microbatches = 1, .precision = DTM_F32 },
	};
	return p;
}

/* ---- helpers ---- */


static int count_lines(const char *s)
{
	int n = 0;
	for (; s && *s; s++)
		n += *s == '\n';
	return n;
}

static bool exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* The "loss" (key = "loss") or "eval_loss" values of a log, in order, as
 * integers (the probe's values are whole numbers); their steps in step. */
static int log_values(const char *path, const char *key, long *val, long *step, int max)
{
	char *log = slurp(path), pat[32];
	snprintf(pat, sizeof pat, "\"%s\":", key);
	int n = 0;
	for (char *l = log; l && *l && n < max;) {
		char *e = strchr(l, '\n'), *k = strstr(l, pat);
		if (k && (!e || k < e)) {
			val[n] = strtol(k + strlen(pat), NULL, 10);
			step[n] = strtol(l + strlen("{\"step\":"), NULL, 10);
			n++;
		}
		l = e ? e + 1 : NULL;
	}
	free(log);
	return n;
}

/* Shard of n tokens base, base+1, ... */
static void write_shard(const char *path, int base, int n)
{
	uint16_t tok[64];
	for (int j = 0; j < n; j++)
		tok[j] = (uint16_t)(base + j);
	write_tokfile(path, 20240520, 1, n, tok, n);
}

/* ---- the data ----
 * train shards 1..3 of 7, 5 and 9 tokens (100+j, 200+j, 300+j): 21 tokens,
 * 17 sample starts for T = 4, so samples run across both boundaries and
 * step 5 wraps around; val shard 0 of 12 tokens 900+j. */

static const int shard_len[3] = { 7, 5, 9 };
static int32_t stream[21];
#define NSTREAM 21

static void make_shards(const char *dir)
{
	char path[256];
	CHECK_EQ_INT(mkdir(tpath(dir), 0755), 0);
	/* written out of order: the glob must sort them */
	for (int k = 2; k >= 0; k--) {
		snprintf(path, sizeof path, "%s/tiny_train_%06d.bin", tpath(dir), k + 1);
		write_shard(path, 100 * (k + 1), shard_len[k]);
	}
	snprintf(path, sizeof path, "%s/tiny_val_000000.bin", tpath(dir));
	write_shard(path, 900, 12);
}

/* Stream position of training sample i. */
static int pos_of(long i)
{
	return (int)((SEQ * i) % (NSTREAM - SEQ));
}

/* The probe's value for step s (samples 2(s-1) and 2(s-1)+1). */
static long want_step(long s)
{
	long a = BATCH * (s - 1);
	return 1000L * stream[pos_of(a)] + stream[pos_of(a + 1) + SEQ];
}

/* The probe's value for the val file's first batch: samples 0 and 1 start
 * at 0 and 4, so 1000 * 900 + val[8]. */
#define WANT_EVAL 900908L

/* ---- tests ---- */

/* Batches in order across shard boundaries, by the log and by the dumped
 * batches token by token; a comma-separated list in the same order is the
 * same stream. */
static void test_order(const DtmPlan *p, const char *glob)
{
	CHECK_EQ_INT(run(p, "--data", glob, "--steps", "6", "--log", tpath("order.jsonl"),
			 "--dump-batches", tpath("dump"), "-q", NULL), 0);
	long val[16], step[16];
	int n = log_values(tpath("order.jsonl"), "loss", val, step, 16);
	CHECK_EQ_INT(n, 6);
	for (int i = 0; i < n; i++) {
		CHECK_EQ_INT(step[i], i + 1);
		CHECK_EQ_INT(val[i], want_step(i + 1));
	}
	/* step 1 reads 100..104 and 104 105 106 | 200 201 */
	CHECK_EQ_INT(want_step(1), 100201);
	for (int s = 1; s <= 6; s++) {
		char path[256], err[RT_ERR_LEN];
		snprintf(path, sizeof path, "%s/step_%06d.safetensors", tpath("dump"), s);
		DtmSafetensors *st = NULL;
		CHECK_EQ_INT(dtm_st_open(&st, path, err, sizeof err), 0);
		if (!st)
			continue;
		const DtmStTensor *x = dtm_st_find(st, "tokens"), *y = dtm_st_find(st, "targets");
		CHECK(x && y && x->dtype == DTM_DT_I32 && x->numel == BATCH * SEQ &&
		      y->numel == BATCH * SEQ);
		if (x && y) {
			const int32_t *xt = (const int32_t *)x->data;
			const int32_t *yt = (const int32_t *)y->data;
			int ok = 1;
			for (int b = 0; b < BATCH; b++) {
				int pos = pos_of(BATCH * (s - 1) + b);
				for (int t = 0; t < SEQ; t++) {
					ok &= xt[b * SEQ + t] == stream[pos + t];
					ok &= yt[b * SEQ + t] == stream[pos + t + 1];
				}
			}
			if (!ok)
				fprintf(stderr, "step %d: dumped batch is not the stream's\n", s);
			CHECK(ok);
		}
		dtm_st_close(st);
	}
	char list[1024];
	snprintf(list, sizeof list, "%s/tiny_train_000001.bin,%s/tiny_train_000002.bin,"
		 "%s/tiny_train_000003.bin", tpath("sh"), tpath("sh"), tpath("sh"));
	CHECK_EQ_INT(run(p, "--data", list, "--steps", "6", "--log", tpath("list.jsonl"), "-q",
			 NULL), 0);
	long va[16], sa[16], vb[16], sb[16];
	int na = log_values(tpath("order.jsonl"), "loss", va, sa, 16);
	int nb = log_values(tpath("list.jsonl"), "loss", vb, sb, 16);
	CHECK(na == 6 && nb == 6 && !memcmp(va, vb, sizeof(long) * 6));
}

/* --eval-every reads the val file (its first batch, every time), and
 * nothing of the training stream; training is the same with and without. */
static void test_eval(const DtmPlan *p, const char *glob)
{
	CHECK_EQ_INT(run(p, "--data", glob, "--val-data", tpath("sh/tiny_val_000000.bin"),
			 "--eval-every", "2", "--steps", "6", "--log", tpath("eval.jsonl"), "-q",
			 NULL), 0);
	long val[16], step[16];
	int n = log_values(tpath("eval.jsonl"), "eval_loss", val, step, 16);
	CHECK_EQ_INT(n, 3);
	for (int i = 0; i < n; i++) {
		CHECK_EQ_INT(step[i], 2 * (i + 1));
		CHECK_EQ_INT(val[i], WANT_EVAL);
	}
	n = log_values(tpath("eval.jsonl"), "loss", val, step, 16);
	CHECK_EQ_INT(n, 6);
	for (int i = 0; i < n; i++)
		CHECK_EQ_INT(val[i], want_step(i + 1));
	/* a glob for the val data too */
	char vglob[256];
	snprintf(vglob, sizeof vglob, "%s/tiny_val_*.bin", tpath("sh"));
	CHECK_EQ_INT(run(p, "--data", glob, "--val-data", vglob, "--eval-every", "3", "--steps",
			 "3", "--log", tpath("eval2.jsonl"), "-q", NULL), 0);
	n = log_values(tpath("eval2.jsonl"), "eval_loss", val, step, 16);
	CHECK(n == 1 && val[0] == WANT_EVAL);

	/* token files without --val-data: no evaluation, and a note saying
	 * so, once (also with -q) */
	CHECK_EQ_INT(run(p, "--data", glob, "--eval-every", "2", "--steps", "6", "--log",
			 tpath("noval.jsonl"), "-q", NULL), 0);
	char *e = read_stderr();
	CHECK(e && strstr(e, "note: --eval-every 2: no evaluation, --data's files hold no "
			     "held-out tokens (pass --val-data FILES"));
	CHECK_EQ_INT(count_lines(e), 1);
	free(e);
	n = log_values(tpath("noval.jsonl"), "eval_loss", val, step, 16);
	CHECK_EQ_INT(n, 0);
	/* the same for one file (which evaluated its own training tokens) */
	CHECK_EQ_INT(run(p, "--data", tpath("sh/tiny_train_000001.bin"), "--eval-every", "1",
			 "--steps", "2", "--log", tpath("noval1.jsonl"), NULL), 0);
	e = read_stderr();
	CHECK(e && strstr(e, "note: --eval-every 1: no evaluation"));
	free(e);
	n = log_values(tpath("noval1.jsonl"), "eval_loss", val, step, 16);
	CHECK_EQ_INT(n, 0);

	/* synthetic data keeps its held-out samples: an eval line, no note */
	CHECK_EQ_INT(run(p, "--eval-every", "2", "--steps", "2", "--log", tpath("syn.jsonl"),
			 "-q", NULL), 0);
	e = read_stderr();
	CHECK(e && !strstr(e, "note"));
	free(e);
	n = log_values(tpath("syn.jsonl"), "eval_loss", val, step, 16);
	CHECK_EQ_INT(n, 1);
	/* and accepts a val file */
	CHECK_EQ_INT(run(p, "--val-data", tpath("sh/tiny_val_000000.bin"), "--eval-every", "1",
			 "--steps", "1", "--log", tpath("syn2.jsonl"), "-q", NULL), 0);
	n = log_values(tpath("syn2.jsonl"), "eval_loss", val, step, 16);
	CHECK(n == 1 && val[0] == WANT_EVAL);
}

/* Each bad shard, in --data and in --val-data: exit status 1, one line
 * naming the file and what is wrong, no log, no checkpoint. */
static void test_bad_shards(const DtmPlan *p, const char *glob)
{
	uint16_t tok[8] = { 1, 2, 3, 1000, 5, 6, 7, 8 };
	CHECK_EQ_INT(mkdir(tpath("bad"), 0755), 0);
	write_tokfile(tpath("bad/tiny_train_magic.bin"), 12345, 1, 8, tok, 8);
	write_tokfile(tpath("bad/tiny_train_version.bin"), 20240520, 2, 8, tok, 8);
	write_tokfile(tpath("bad/tiny_train_trunc.bin"), 20240520, 1, 9, tok, 8);
	write_tokfile(tpath("bad/tiny_train_trail.bin"), 20240520, 1, 7, tok, 8);
	write_tokfile(tpath("bad/tiny_train_token.bin"), 20240520, 1, 8, tok, 8);
	write_shard(tpath("bad/tiny_train_short.bin"), 1, 3);
	static const struct {
		const char *file, *says;
	} bad[] = {
		{ "tiny_train_magic.bin",
		  "not an llm.c token file: magic 12345, expected 20240520" },
		{ "tiny_train_version.bin", "unsupported llm.c token file version 2, expected 1" },
		{ "tiny_train_trunc.bin", "truncated: header says 9 tokens, file holds 8" },
		{ "tiny_train_trail.bin", "1040 bytes, expected 1038 for the header's 7 tokens "
					  "(bytes after the last token)" },
		{ "tiny_train_token.bin", "token 1000 at position 3 is >= vocab 1000" },
		{ "tiny_train_short.bin", "3 tokens, need at least T+1 = 5 for one sample" },
		{ "tiny_none_*.bin", "no file matches the pattern" },
	};
	for (int flag = 0; flag < 2; flag++) {
		for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
			char path[256], spec[600], want[2048];
			snprintf(path, sizeof path, "%s/%s", tpath("bad"), bad[i].file);
			/* --data: after the good shards (the one bad file must
			 * be named, not the list; a short file is fine there);
			 * --val-data: the file alone */
			if (flag == 0 && !strstr(bad[i].file, "short"))
				snprintf(spec, sizeof spec, "%s,%s", glob, path);
			else
				snprintf(spec, sizeof spec, "%s", path);
			int rc = run(p, "--data", flag ? glob : spec, "--val-data",
				     flag ? spec : tpath("sh/tiny_val_000000.bin"), "--eval-every",
				     "1", "--steps", "2", "--save", tpath("badck"), "--log",
				     tpath("bad.jsonl"), NULL);
			char *e = read_stderr();
			/* the spec, then the file (once if it is the spec) */
			if (!strcmp(spec, path))
				snprintf(want, sizeof want, "error: %s %s: %s\n",
					 flag ? "--val-data" : "--data", path, bad[i].says);
			else
				snprintf(want, sizeof want, "error: %s %s: %s: %s\n",
					 flag ? "--val-data" : "--data", spec, path, bad[i].says);
			if (rc != 1 || !e || strcmp(e, want) != 0)
				fprintf(stderr, "bad shard %s (%s): rc %d, stderr '%s', "
					"want '%s'\n", bad[i].file, flag ? "--val-data" : "--data",
					rc, e ? e : "(none)", want);
			CHECK_EQ_INT(rc, 1);
			CHECK_EQ_STR(e, want);
			free(e);
			CHECK(!exists(tpath("badck")) && !exists(tpath("bad.jsonl")));
		}
	}
	/* an unquoted pattern the shell expanded */
	char a[256], b[256];
	snprintf(a, sizeof a, "%s/tiny_train_000001.bin", tpath("sh"));
	snprintf(b, sizeof b, "%s/tiny_train_000002.bin", tpath("sh"));
	CHECK_EQ_INT(run(p, "--data", a, b, "--steps", "1", NULL), 1);
	char *e = read_stderr();
	CHECK(e && strstr(e, "unexpected argument '") && strstr(e, "000002.bin' (quote a --data"));
	free(e);
	/* --val-data synthetic says what it wants */
	CHECK_EQ_INT(run(p, "--val-data", "synthetic", "--steps", "1", NULL), 1);
	e = read_stderr();
	CHECK(e && strstr(e, "error: --val-data wants llm.c token files"));
	free(e);
}

/* Steps 1..3 + resume to 6 read the batches of steps 1..6 (the position is
 * samples consumed, in the one stream across shards); the checkpoint
 * records the stream, and a resume on other shards is refused, on the
 * same shards in another folder accepted. */
static void test_resume(const DtmPlan *p, const char *glob)
{
	CHECK_EQ_INT(run(p, "--data", glob, "--steps", "3", "--save", tpath("ck"), "--log",
			 tpath("r1.jsonl"), "-q", NULL), 0);
	CHECK_EQ_INT(run(p, "--data", glob, "--steps", "6", "--resume", tpath("ck"), "--log",
			 tpath("r2.jsonl"), "-q", NULL), 0);
	long v1[16], s1[16], v2[16], s2[16];
	int n1 = log_values(tpath("r1.jsonl"), "loss", v1, s1, 16);
	int n2 = log_values(tpath("r2.jsonl"), "loss", v2, s2, 16);
	CHECK(n1 == 3 && n2 == 3);
	for (int i = 0; i < n1; i++)
		CHECK_EQ_INT(v1[i], want_step(i + 1));
	for (int i = 0; i < n2; i++) {
		CHECK_EQ_INT(s2[i], i + 4);
		CHECK_EQ_INT(v2[i], want_step(i + 4));
	}
	/* the resumed steps start on shard 2's first token, go on in shard 3
	 * and wrap around to shard 1 */
	CHECK(want_step(4) / 1000 == 200 && want_step(5) / 1000 == 303 &&
	      want_step(6) / 1000 == 106);

	char path[256], err[RT_ERR_LEN];
	snprintf(path, sizeof path, "%s/step_000003/rank00000.safetensors", tpath("ck"));
	DtmSafetensors *st = NULL;
	CHECK_EQ_INT(dtm_st_open(&st, path, err, sizeof err), 0);
	if (st) {
		const char *d = dtm_st_meta(st, "data");
		CHECK(d && strncmp(d, "3 files, 21 tokens, id ", 23) == 0);
		dtm_st_close(st);
	}

	/* two of the three shards: refused, saying both streams */
	char two[1024];
	snprintf(two, sizeof two, "%s/tiny_train_00000[12].bin", tpath("sh"));
	CHECK_EQ_INT(run(p, "--data", two, "--steps", "6", "--resume", tpath("ck"), "--log",
			 tpath("r3.jsonl"), "-q", NULL), 1);
	char *e = read_stderr();
	CHECK(e && strstr(e, "error: --resume ") &&
	      strstr(e, ": its data position is in other data: saved training on 3 files, 21 "
			"tokens, id ") &&
	      strstr(e, " is 2 files, 12 tokens, id ") &&
	      strstr(e, "(resume with the same files in the same order)"));
	CHECK_EQ_INT(count_lines(e), 1);
	free(e);
	/* synthetic data on a checkpoint of files: refused too */
	CHECK_EQ_INT(run(p, "--steps", "6", "--resume", tpath("ck"), "-q", NULL), 1);
	e = read_stderr();
	CHECK(e && strstr(e, "its data position is in other data") &&
	      strstr(e, "--data synthetic is synthetic"));
	free(e);

	/* the same shards moved to another folder: the same stream */
	CHECK_EQ_INT(mkdir(tpath("moved"), 0755), 0);
	for (int k = 0; k < 3; k++) {
		char src[256], dst[256];
		snprintf(src, sizeof src, "%s/tiny_train_%06d.bin", tpath("sh"), k + 1);
		snprintf(dst, sizeof dst, "%s/tiny_train_%06d.bin", tpath("moved"), k + 1);
		CHECK_EQ_INT(link(src, dst), 0);
	}
	char moved[256];
	snprintf(moved, sizeof moved, "%s/tiny_train_*.bin", tpath("moved"));
	CHECK_EQ_INT(run(p, "--data", moved, "--steps", "6", "--resume", tpath("ck"), "--log",
			 tpath("r4.jsonl"), "-q", NULL), 0);
	long v4[16], s4[16];
	int n4 = log_values(tpath("r4.jsonl"), "loss", v4, s4, 16);
	CHECK(n4 == 3 && !memcmp(v4, v2, sizeof(long) * 3));
}

int main(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/dtm_test_data.XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	int n = 0;
	for (int k = 0; k < 3; k++)
		for (int j = 0; j < shard_len[k]; j++)
			stream[n++] = 100 * (k + 1) + j;
	make_shards("sh");
	char glob[256];
	snprintf(glob, sizeof glob, "%s/tiny_train_*.bin", tpath("sh"));
	DtmPlan p = make_plan();
	test_order(&p, glob);
	test_eval(&p, glob);
	test_bad_shards(&p, glob);
	test_resume(&p, glob);
	rm_tree(tmpdir);
	return check_report();
}
