/* testlib_attr.h - the kernel tests' tables give an op's attributes as the
 * generic kernels read them (codegen/emit_common.h, CgKernelAttrs): ints,
 * f[0] and a flag.  test_set_attrs stores them on a node as its op's named
 * fields (the inverse of cg_kernel_attrs for the ops the tables use);
 * test_kernel_args fills a DtmkArgs' attributes from a node. */
#ifndef DTM_TESTLIB_ATTR_H
#define DTM_TESTLIB_ATTR_H

#include "ir/ir.h"

#include <string.h>

static inline void test_set_attrs(IrModule *m, IrNode *n, int nints, const int64_t *ints,
                                  double f0, bool flag)
{
	IrAttrKind k = ir_op_attr_kind(n->op);
	if (k == IR_ATTR_NONE)
		return;
	IrAttr *a = ir_attr_mut(m, n, k);
	int64_t v[IR_MAX_INTS] = {0};
	for (int i = 0; i < nints && i < IR_MAX_INTS; i++)
		v[i] = ints[i];
	switch (k) {
	case IR_ATTR_INIT:
		a->init.arg[0] = f0;
		break;
	case IR_ATTR_SCALAR:
		a->scalar.value = f0;
		break;
	case IR_ATTR_AXES:
		a->axes.n = nints;
		memcpy(a->axes.axes, v, sizeof v);
		a->axes.keepdims = flag;
		break;
	case IR_ATTR_AXIS:
		a->axis.axis = v[0];
		break;
	case IR_ATTR_EPS:
		a->eps.eps = f0;
		break;
	case IR_ATTR_PERM:
		a->perm.n = nints;
		memcpy(a->perm.perm, v, sizeof v);
		break;
	case IR_ATTR_SLICE:
		a->slice = (IrAttrSlice){v[0], v[1], v[2]};
		break;
	case IR_ATTR_ATTN:
		a->attn = (IrAttrAttn){.heads = v[0], .causal = v[1]};
		break;
	case IR_ATTR_DROPOUT:
		a->dropout = (IrAttrDropout){.rate = f0, .salt = v[0], .has_mb = nints >= 5,
		                             .mbs = v[1], .mb = v[2], .bdim = v[3], .binner = v[4]};
		break;
	case IR_ATTR_COLL:
		a->coll.n = nints;
		memcpy(a->coll.args, v, sizeof v);
		break;
	case IR_ATTR_ROPE:
		a->rope = (IrAttrRope){.heads = v[0], .theta = f0, .inverse = v[1] != 0};
		break;
	case IR_ATTR_ROUTE:
		a->route = (IrAttrRoute){.k = v[0], .n = v[1], .capacity = v[2]};
		break;
	case IR_ATTR_OPTIM:
	case IR_ATTR_NONE:
	case IR_ATTR_KIND_COUNT:
		break;
	}
}

#endif
