/* tokfile.h - llm.c token files: the format, and the status codes of the
 * functions that read and write them.  A public runtime header: the
 * runtime reads these files (data.h), `dtmc tokenize` writes them
 * (tools/tokenize.c), and this is all the two share.
 *
 * A file is a 256-int32 header (header[0] = 20240520, header[1] = 1,
 * header[2] = the number of tokens), then exactly that many uint16
 * tokens, little-endian (a file of another size is refused, as llm.c's
 * loader refuses it).
 */
#ifndef DTM_RT_TOKFILE_H
#define DTM_RT_TOKFILE_H

#define DTM_TOKENS_MAGIC 20240520
#define DTM_TOKENS_VERSION 1
#define DTM_TOKENS_HEADER_INTS 256

typedef enum DtmDataStatus {
	DTM_DATA_OK = 0,
	DTM_DATA_EARG,     /* bad argument (vocab, T, NULL pointer) */
	DTM_DATA_EOPEN,    /* cannot open, stat or map the file */
	DTM_DATA_ESHORT,   /* shorter than the 1024-byte header */
	DTM_DATA_EMAGIC,   /* header[0] != 20240520 */
	DTM_DATA_EVERSION, /* header[1] != 1 */
	DTM_DATA_ETRUNC,   /* header promises more tokens than the file holds */
	DTM_DATA_ETRAIL,   /* bytes after the header's count of tokens */
	DTM_DATA_ETOOFEW,  /* fewer than T+1 tokens: not even one sample */
	DTM_DATA_ETOKEN,   /* a token >= vocab (in a file checked, or a sample read) */
	DTM_DATA_ESPEC,    /* a shard list with an empty item */
	DTM_DATA_ENOMATCH, /* a glob pattern that matches no file */
	DTM_DATA_EIO,      /* read or write error (tokenizer) */
	DTM_DATA_ENOMEM,
} DtmDataStatus;

#endif
