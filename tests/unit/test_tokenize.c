/* test_tokenize.c - `dtmc tokenize` (tools/tokenize.c): the token file it
 * writes reads back through the runtime's reader (runtime/data.h) token
 * for token, crash-safely (no temporary left), with its errors and its
 * command line.  Files go to a fresh directory under /tmp that is removed
 * at the end. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "testlib_rt.h"
#include "runtime/data.h"
#include "tools/tokenize.h"


static void test_tokenizer(void)
{
	static const char text[] = "hello, world\n\tbytes: \x01\xff\x80 end";
	size_t n = sizeof text - 1;
	write_bytes(tpath("in.txt"), text, n);
	char err[512];
	uint64_t ntok = 0;
	CHECK_EQ_INT(tokenize_text(tpath("in.txt"), tpath("out.bin"), &ntok, err, sizeof err),
	             DTM_DATA_OK);
	CHECK_EQ_INT(ntok, n);
	DtmTokenFile tf;
	CHECK_EQ_INT(dtm_tokens_open(&tf, tpath("out.bin"), err, sizeof err), DTM_DATA_OK);
	CHECK_EQ_INT(tf.ntokens, n);
	int32_t out[64];
	CHECK_EQ_INT(dtm_tokens_sample(&tf, 0, (int)n - 1, TOKENIZE_VOCAB, out, err, sizeof err),
	             DTM_DATA_OK);
	int same = 1;
	for (size_t i = 0; i < n; i++)
		same &= out[i] == (unsigned char)text[i];
	CHECK(same);
	dtm_tokens_close(&tf);
	CHECK_EQ_INT(count_entries(tmpdir, ".tmp."), 0);

	/* an empty input is a valid, empty token file */
	write_bytes(tpath("empty.txt"), text, 0);
	CHECK_EQ_INT(tokenize_text(tpath("empty.txt"), tpath("e.bin"), &ntok, err, sizeof err),
	             DTM_DATA_OK);
	CHECK_EQ_INT(ntok, 0);
	CHECK_EQ_INT(tokenize_text(tpath("nope.txt"), tpath("x.bin"), NULL, err, sizeof err),
	             DTM_DATA_EOPEN);
	CHECK_EQ_INT(
	        tokenize_text(tpath("in.txt"), tpath("nodir/x.bin"), NULL, err, sizeof err),
	        DTM_DATA_EIO);
	CHECK(strstr(err, "nodir/x.bin") && strstr(err, "No such file"));

	/* the CLI entry point; silence its messages */
	fflush(stdout);
	fflush(stderr);
	int so = dup(1), se = dup(2);
	FILE *devnull = fopen("/dev/null", "w");
	dup2(fileno(devnull), 1);
	dup2(fileno(devnull), 2);
	char a0[] = "tokenize", a1[256], a2[256];
	snprintf(a1, sizeof a1, "%s", tpath("in.txt"));
	snprintf(a2, sizeof a2, "%s", tpath("cli.bin"));
	char *argv_ok[] = {a0, a1, a2, NULL};
	char *argv_bad[] = {a0, a1, NULL};
	int rc_ok = tokenize_main(3, argv_ok);
	int rc_usage = tokenize_main(2, argv_bad);
	fflush(stdout);
	fflush(stderr);
	dup2(so, 1);
	dup2(se, 2);
	close(so);
	close(se);
	fclose(devnull);
	CHECK_EQ_INT(rc_ok, 0);
	CHECK_EQ_INT(rc_usage, 2);
	CHECK(access(tpath("cli.bin"), F_OK) == 0);
}

int main(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/dtm_test_tok.XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_tokenizer();
	rm_tree(tmpdir);
	return check_report();
}
