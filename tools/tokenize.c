/* tokenize.c - the byte-level tokenizer behind `dtmc tokenize`: any text
 * (or binary) file becomes an llm.c token file with vocab 256.  A byte
 * vocabulary needs no merges table, so the model file and the data agree
 * without shipping a tokenizer, and the output round-trips exactly.  The
 * runtime reads these files (runtime/data.c); this writer is dtmc's, and
 * shares with the reader only the format (runtime/tokfile.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tools/tokenize.h"

#include "runtime/fsio.h"
#include "runtime/tokfile.h"

static void put_le32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

int tokenize_text(const char *in_path, const char *out_path, uint64_t *ntokens, char *err,
                  size_t errlen)
{
	if (ntokens)
		*ntokens = 0;
	FILE *in = fopen(in_path, "rb");
	if (!in) {
		if (err && errlen)
			snprintf(err, errlen, "%s: cannot open: %s", in_path, strerror(errno));
		return DTM_DATA_EOPEN;
	}
	/* the header holds the count, which a stream does not know up front:
	 * write a placeholder header, stream the tokens, then seek back */
	RtAtomicFile af;
	if (rt_afile_open(&af, out_path, err, errlen)) {
		fclose(in);
		return DTM_DATA_EIO;
	}
	unsigned char hdr[DTM_TOKENS_HEADER_INTS * 4];
	memset(hdr, 0, sizeof hdr);
	put_le32(hdr, DTM_TOKENS_MAGIC);
	put_le32(hdr + 4, DTM_TOKENS_VERSION);
	int rc = DTM_DATA_OK;
	if (rt_afile_write(&af, hdr, sizeof hdr, err, errlen))
		rc = DTM_DATA_EIO;
	uint64_t n = 0;
	unsigned char buf[65536];
	unsigned char out[2 * sizeof buf];
	while (rc == DTM_DATA_OK) {
		size_t got = fread(buf, 1, sizeof buf, in);
		if (got == 0) {
			if (ferror(in)) {
				if (err && errlen)
					snprintf(err, errlen, "%s: read error", in_path);
				rc = DTM_DATA_EIO;
			}
			break;
		}
		for (size_t i = 0; i < got; i++) {
			out[2 * i] = buf[i];
			out[2 * i + 1] = 0;
		}
		n += got;
		if (n > 0x7fffffff) {
			/* header[2] is an int32 in the llm.c format */
			if (err && errlen)
				snprintf(err, errlen,
				         "%s: more than 2^31-1 bytes; the llm.c format cannot "
				         "count them",
				         in_path);
			rc = DTM_DATA_EARG;
			break;
		}
		if (rt_afile_write(&af, out, 2 * got, err, errlen))
			rc = DTM_DATA_EIO;
	}
	fclose(in);
	if (rc == DTM_DATA_OK) {
		put_le32(hdr + 8, (uint32_t)n);
		if (fflush(af.f) != 0 || fseek(af.f, 8, SEEK_SET) != 0 ||
		    fwrite(hdr + 8, 1, 4, af.f) != 4) {
			if (err && errlen)
				snprintf(err, errlen, "%s: cannot write header: %s", af.tmp_path,
				         strerror(errno));
			rc = DTM_DATA_EIO;
		}
	}
	if (rc != DTM_DATA_OK) {
		rt_afile_abort(&af);
		return rc;
	}
	if (rt_afile_commit(&af, err, errlen))
		return DTM_DATA_EIO;
	if (ntokens)
		*ntokens = n;
	return DTM_DATA_OK;
}

int tokenize_main(int argc, char **argv)
{
	const char *cmd = argc > 0 && argv[0] ? argv[0] : "tokenize";
	if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		printf("usage: dtmc %s IN.txt OUT.bin\n"
		       "Writes an llm.c token file (vocab 256): each byte of IN is one token.\n",
		       cmd);
		return 0;
	}
	if (argc != 3) {
		fprintf(stderr, "usage: dtmc %s IN.txt OUT.bin\n", cmd);
		return 2;
	}
	char err[512];
	uint64_t n;
	if (tokenize_text(argv[1], argv[2], &n, err, sizeof err) != DTM_DATA_OK) {
		fprintf(stderr, "dtmc %s: error: %s\n", cmd, err);
		return 1;
	}
	printf("dtmc %s: wrote %llu tokens (vocab %d) to %s\n", cmd, (unsigned long long)n,
	       TOKENIZE_VOCAB, argv[2]);
	return 0;
}
