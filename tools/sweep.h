/* sweep.h - `dtmc sweep`: rank many parallel layouts of one model.
 *
 *   dtmc sweep MODEL --devices N [--hw NAME|FILE] [--nodes K] [--mem-limit BYTES]
 *              [--top K] [--json|--csv] [--plot FILE.svg] [--measure K]
 *              [-D name=value]... [--train key=value]... [--jobs J]
 *
 * The candidates are every factorization of N over the model's mesh axes
 * times the ZeRO stage, the micro-batch count, the pipeline schedule,
 * sequence parallelism, the context_parallel mode (where the sequence is
 * split), activation recompute and every choose() point;
 * each is compiled in-process to the Plan `dtmc build` would emit and
 * costed with tools/cost.h (tools/sweep.c).
 *
 * The arithmetic below (factorizations, divisors, the Pareto front, byte
 * sizes) is pure and lives in tools/sweep_space.c, the SVG in
 * tools/sweep_svg.c, both part of the dtm_tools library, so
 * tests/unit/test_sweep.c checks them directly.
 */
#ifndef DTM_SWEEP_H
#define DTM_SWEEP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The driver (tools/sweep.c): argv[0] is "sweep".  Returns the exit
 * status: 0, or 1 after printing the error. */
int sweep_main(int argc, char **argv);
/* `dtmc help sweep`. */
extern const char sweep_help[];

/* Every way of writing n as an ordered product of naxes factors >= 1:
 * tuples of naxes values, in lexicographic order (the first factor varies
 * slowest), the first cap of them written to out (cap * naxes values;
 * out may be NULL).  Returns how many there are, or -1 when n < 1 or
 * naxes < 0.  naxes == 0 has one (empty) factorization when n == 1. */
int64_t sweep_factorizations(int64_t n, int naxes, int64_t *out, int64_t cap);

/* The divisors of n >= 1 in ascending order, the first cap to out;
 * returns how many there are (0 when n < 1). */
int sweep_divisors(int64_t n, int64_t *out, int cap);

/* The Pareto front of n points (mem[i], time[i]), both to minimise: the
 * points no other point dominates (no worse in both, better in one).
 * Writes their indices to front in ascending mem (so descending time)
 * order and returns how many.  Of equal points only the lowest index is
 * on the front; NaN points never are.  front needs room for n. */
int sweep_pareto(int n, const double *mem, const double *time, int *front);

/* Parses a byte count: a decimal number with an optional SI prefix (k M G
 * T P: powers of 1000; Ki Mi Gi Ti Pi: powers of 1024) and an optional
 * trailing B, e.g. "80G", "80 GiB", "1.5e9", "512MiB".  False on anything
 * else or a negative value. */
bool sweep_parse_bytes(const char *s, double *out);

/* Formats bytes as "1.23 GiB" / "512 MiB" / "100 B" into buf. */
void sweep_format_bytes(char *buf, size_t cap, double bytes);

/* Writes an SVG scatter plot of n points (x = peak memory per rank in
 * bytes, linear; y = step time in seconds, log scale with ticks at 1, 2
 * and 5 times powers of ten): every point grey, the points with front[i]
 * set in red joined by the front's staircase, axes with ticks and labels,
 * the title on top.  label[i] (may be NULL) becomes each point's tooltip;
 * tag[i] (tag may be NULL) is written beside each front point as a <text>
 * (class "front-labels"), placed to overlap no other label or front point
 * where there is room, with a leader line when moved away from it.
 * Returns false when writing failed. */
bool sweep_svg(FILE *out, int n, const double *mem, const double *time, const bool *front,
               const char *const *label, const char *const *tag, const char *title);

#endif
