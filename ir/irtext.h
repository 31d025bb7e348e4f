/* irtext.h - private to print.c and parse.c: what the two sides of the
 * textual IR must agree on (the train keys, names of collective integer
 * attributes, number and string spelling); validate.c reads the settings
 * by the same kinds.  Not part of the IR interface.
 */
#ifndef DTM_IRTEXT_H
#define DTM_IRTEXT_H

#include "ir/ir.h"

typedef enum IrTextFieldKind {
	TF_STR,   /* const char *, NULL prints as none */
	TF_F64,   /* double */
	TF_I64,   /* int64_t */
	TF_INT,   /* int */
	TF_BOOL,  /* bool */
	TF_AXES,  /* uint32_t mesh-axis mask, printed as (dp, tp) */
	TF_DTYPE, /* IrDtype */
	TF_ENUM,  /* a word setting's enum (IrOptimizer, ...), printed as its
	           * word in quotes (ir_train_word), 0 as none */
} IrTextFieldKind;

/* One IrTrain field: its key, kind, offset and which `train` line of the
 * printed form it goes on (lines group related settings). */
typedef struct IrTextField {
	const char *name;
	IrTextFieldKind kind;
	size_t off;
	int line;
} IrTextField;

extern const IrTextField irtext_train_fields[];
extern const int irtext_ntrain_fields;

/* The names the printer gives attrs.ints of a collective (dim, split and
 * concat, root, shift); *n gets how many.  Other counts print as ints. */
const char *const *irtext_coll_names(IrOp op, int *n);

/* The shortest of %.15g / %.16g / %.17g that reads back as v, so values
 * round-trip and 0.9 stays 0.9. */
void irtext_double(char *buf, size_t cap, double v);
bool irtext_is_ident(const char *s);
void irtext_string(FILE *out, const char *s);

#endif
