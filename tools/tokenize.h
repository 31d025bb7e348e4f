/* tokenize.h - `dtmc tokenize`: text to an llm.c token file (tokenize.c).
 *
 * Every byte of the input becomes one token (vocab 256) in an llm.c file
 * (runtime/tokfile.h), written to a temporary name, fsynced and renamed.
 * Status codes are the data layer's (DTM_DATA_OK, DTM_DATA_EOPEN, ...).
 */
#ifndef DTM_TOOLS_TOKENIZE_H
#define DTM_TOOLS_TOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#define TOKENIZE_VOCAB 256

/* Writes in_path's bytes as tokens to out_path; *ntokens (if not NULL) gets
 * their count.  DTM_DATA_OK, or a DtmDataStatus with a message in err. */
int tokenize_text(const char *in_path, const char *out_path, uint64_t *ntokens, char *err,
                  size_t errlen);
/* `dtmc tokenize IN.txt OUT.bin`: argv[0] is the subcommand name, argv[1]
 * and argv[2] the paths.  Messages go to stdout/stderr; returns 0 on
 * success, 1 on an error, 2 on a usage error. */
int tokenize_main(int argc, char **argv);

#endif
