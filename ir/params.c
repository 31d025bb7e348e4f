/* params.c - finding params by name.
 *
 * Passes pair a gradient "grad.NAME" with its param NAME (optim, propagate,
 * bucket).  A scan of the module per gradient is quadratic, which GPT-2's
 * 150 params times thousands of nodes makes the largest cost of those
 * passes in `dtmc sweep`; a sorted index answers each in O(log P).
 */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

static int cmp_param(const IrModule *m, int a, int b)
{
	int c = strcmp(m->nodes[a]->name, m->nodes[b]->name);
	return c ? c : (a > b) - (a < b);
}

/* qsort has no context argument, and a static one would race between
 * `dtmc sweep`'s threads: a merge sort over the ids. */
static void msort(const IrModule *m, int *v, int *tmp, int n)
{
	if (n < 2)
		return;
	int h = n / 2;
	msort(m, v, tmp, h);
	msort(m, v + h, tmp, n - h);
	int i = 0, j = h, k = 0;
	while (i < h && j < n)
		tmp[k++] = cmp_param(m, v[i], v[j]) <= 0 ? v[i++] : v[j++];
	while (i < h)
		tmp[k++] = v[i++];
	while (j < n)
		tmp[k++] = v[j++];
	memcpy(v, tmp, sizeof *v * (size_t)n);
}

int ir_params_by_name(const IrModule *m, int *out)
{
	int n = 0;
	for (int i = 0; i < m->nnodes; i++)
		if (m->nodes[i]->op == IR_OP_PARAM && m->nodes[i]->name)
			out[n++] = i;
	int *tmp = malloc(sizeof *tmp * (size_t)(n ? n : 1));
	if (!tmp)
		return -1;
	msort(m, out, tmp, n);
	free(tmp);
	return n;
}

int ir_param_lookup(const IrModule *m, const int *sorted, int n, const char *name)
{
	int lo = 0, hi = n; /* the first entry whose name is >= name */
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (strcmp(m->nodes[sorted[mid]]->name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && !strcmp(m->nodes[sorted[lo]]->name, name) ? lo : -1;
}
