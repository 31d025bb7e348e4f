/* sweep_opts.c - `dtmc sweep`'s command line: its help text and the
 * options into a SweepOpts (with the hardware profile loaded), for
 * sweep_main (tools/sweep.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/sweep_impl.h"

const char sweep_help[] =
        "usage: dtmc sweep FILE --devices N [--hw NAME|FILE] [--nodes K]\n"
        "                  [--mem-limit BYTES] [--top K] [--json|--csv] [--plot FILE.svg]\n"
        "                  [--measure K [--measure-pick best|spread]] [-D name=value]...\n"
        "                  [--train key=value]...\n"
        "\n"
        "Compiles every parallel layout of the model on N devices in-process to the\n"
        "plan `dtmc build` would emit, costs each with the hardware profile, and\n"
        "prints the fastest (top K) and the Pareto front of peak memory per rank\n"
        "against step time.  The candidates: every factorization of N over the\n"
        "model's mesh axes; ZeRO stage 0-3 (when its axes have more than one rank);\n"
        "micro-batch counts dividing the batch (each micro-batch still split evenly\n"
        "over the batch's axes, or, with uneven_shards, unevenly: float inputs at\n"
        "any count, token ids unmicro-batched; a mesh left with no count is named\n"
        "as not tried); with pp > 1 the schedules gpipe, 1f1b and\n"
        "interleaved(2) where valid; sequence parallelism on/off (tp > 1); the\n"
        "context_parallel mode where the inputs' sequence is split over more than\n"
        "one rank and the model has attention (none, which is Ulysses where the\n"
        "heads divide and else gathers the sequence, and ring; ulysses and ring\n"
        "when the file names a mode); recompute on/off (models with blocks); every\n"
        "choose() option.  A setting fixed with --train (zero, microbatches,\n"
        "schedule, sequence_parallel, context_parallel, recompute) is not swept.\n"
        "Candidates that do not compile are dropped with the compiler's reason, as\n"
        "are those whose peak is over the memory limit.\n"
        "\n"
        "options:\n"
        "  --devices N            ranks to spread the model over (required)\n"
        "  --hw NAME|FILE         hardware profile: h100, h200, a100, b200, cpu, or a\n"
        "                         file of overrides (see tools/hw.h; it starts from\n"
        "                         h100 unless it says base = NAME).  Default: this\n"
        "                         machine's profile from `dtmc calibrate` when there\n"
        "                         is one ($DTM_HW_PROFILE, else\n"
        "                         ~/.config/dtm/hw-HOST.txt), else h100; the report\n"
        "                         says which it used\n"
        "  --nodes K              spread the ranks over K nodes (default: the\n"
        "                         profile's devices per node)\n"
        "  --mem-limit BYTES      drop candidates whose peak per rank is above it:\n"
        "                         80G, 80GiB, 1.5e9 (default: the profile's memory;\n"
        "                         0 = no limit)\n"
        "  --top K                rows of the ranking (default 10)\n"
        "  --json, --csv          machine-readable output: JSON (ranking, front and\n"
        "                         every dropped candidate with its reason) or CSV\n"
        "                         (one row per candidate)\n"
        "  --plot FILE.svg        draw memory vs step time, the front highlighted\n"
        "  --measure K            build the best K with `dtmc build`, run each a few\n"
        "                         steps on the local backend (ranks as threads) and\n"
        "                         print predicted (the profile's, every rank on this\n"
        "                         host) vs measured step time and peak memory, and the\n"
        "                         rank correlation (Spearman) of the two step times;\n"
        "                         with --json: \"measured\" (predicted_ms, measured_ms\n"
        "                         per candidate) and \"spearman\"\n"
        "  --measure-pick P       best (default): the best K; spread: K spread evenly\n"
        "                         over the ranking, first to last\n"
        "  --measure-steps S      steps per measured run (default 6; the first is\n"
        "                         not timed)\n"
        "  --measure-rounds R     run the K binaries R times, in turn (default 1);\n"
        "                         each one's time is its fastest run's median step,\n"
        "                         so a slow spell of a shared machine hits one run,\n"
        "                         not one candidate\n"
        "  --jobs J               compile on J threads (default: the online CPUs)\n"
        "  --verify               run the IR verifier after every pass (slower)\n"
        "  --profile              print where the compile time went, by pass\n"
        "  -q, --quiet            no progress bar\n"
        "  -D name=value          override a `let` constant (repeatable)\n"
        "  --train key=value      set a train setting for every candidate (repeatable)\n";

/* ---- options ---- */

static void opt_error(const char *fmt, const char *arg)
{
	fputs("dtmc: error: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs(" (see dtmc help sweep)\n", stderr);
}

/* A positive integer at most max, all of s. */
static bool parse_count(const char *s, int64_t max, int64_t *out)
{
	if (!s || !*s)
		return false;
	errno = 0;
	char *end;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || v < 1 || v > max)
		return false;
	*out = v;
	return true;
}

/* `--opt V` or `--opt=V`: the value, advancing *i; NULL when argv[*i] is
 * not this option; *missing when it is but has no value. */
static const char *value_of(int argc, char **argv, int *i, const char *name, bool *missing)
{
	size_t n = strlen(name);
	const char *a = argv[*i];
	if (strncmp(a, name, n) != 0)
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n])
		return NULL;
	if (*i + 1 >= argc) {
		*missing = true;
		return NULL;
	}
	return argv[++*i];
}

/* --hw, else this machine's calibrated profile (hw_default_path), else
 * h100. */
static bool load_hw(SweepOpts *o)
{
	return hw_resolve(o->hw_arg, "h100", &o->hw, o->hw_used, sizeof o->hw_used, stderr);
}

int sweep_parse_opts(int argc, char **argv, SweepOpts *o)
{
	o->top = 10;
	o->measure_steps = 6;
	o->measure_rounds = 1;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	o->jobs = ncpu > 0 ? (int)(ncpu < 64 ? ncpu : 64) : 1;
	const char *devices = NULL, *mem = NULL;
	for (int i = 1; i < argc; i++) {
		char *a = argv[i];
		const char *v;
		bool miss = false;
		int64_t n;
		if (a[0] != '-' || !a[1]) {
			if (o->file) {
				fprintf(stderr,
				        "dtmc: error: more than one input file ('%s' and '%s')\n",
				        o->file, a);
				return 1;
			}
			o->file = a;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(sweep_help, stdout);
			return 2;
		} else if ((v = value_of(argc, argv, &i, "--devices", &miss)) || miss) {
			if (miss) {
				opt_error("option '%s' needs a number of devices", "--devices");
				return 1;
			}
			devices = v;
		} else if ((v = value_of(argc, argv, &i, "--hw", &miss)) || miss) {
			if (miss) {
				opt_error("option '%s' needs a profile name or file", "--hw");
				return 1;
			}
			o->hw_arg = v;
		} else if ((v = value_of(argc, argv, &i, "--nodes", &miss)) || miss) {
			if (miss || !parse_count(v, 1 << 20, &n)) {
				opt_error("--nodes needs a positive integer, got '%s'",
				          miss ? "" : v);
				return 1;
			}
			o->nodes = (int)n;
		} else if ((v = value_of(argc, argv, &i, "--mem-limit", &miss)) || miss) {
			if (miss) {
				opt_error("option '%s' needs a size in bytes (80G, 80GiB)",
				          "--mem-limit");
				return 1;
			}
			mem = v;
		} else if ((v = value_of(argc, argv, &i, "--top", &miss)) || miss) {
			if (miss || !parse_count(v, 1 << 30, &n)) {
				opt_error("--top needs a positive integer, got '%s'",
				          miss ? "" : v);
				return 1;
			}
			o->top = (int)n;
		} else if ((v = value_of(argc, argv, &i, "--measure-steps", &miss)) || miss) {
			if (miss || !parse_count(v, 100000, &n) || n < 2) {
				opt_error("--measure-steps needs an integer >= 2, got '%s'",
				          miss ? "" : v);
				return 1;
			}
			o->measure_steps = (int)n;
		} else if ((v = value_of(argc, argv, &i, "--measure-rounds", &miss)) || miss) {
			if (miss || !parse_count(v, 1000, &n)) {
				opt_error("--measure-rounds needs a positive integer, got '%s'",
				          miss ? "" : v);
				return 1;
			}
			o->measure_rounds = (int)n;
		} else if ((v = value_of(argc, argv, &i, "--measure-pick", &miss)) || miss) {
			if (miss || (strcmp(v, "best") && strcmp(v, "spread"))) {
				opt_error("--measure-pick needs best or spread, got '%s'",
				          miss ? "" : v);
				return 1;
			}
			o->measure_spread = !strcmp(v, "spread");
		} else if ((v = value_of(argc, argv, &i, "--measure", &miss)) || miss) {
			if (miss || !parse_count(v, 1000, &n)) {
				opt_error("--measure needs a positive integer, got '%s'",
				          miss ? "" : v);
				return 1;
			}
			o->measure = (int)n;
		} else if ((v = value_of(argc, argv, &i, "--jobs", &miss)) || miss) {
			if (miss || !parse_count(v, 256, &n)) {
				opt_error("--jobs needs a positive integer, got '%s'",
				          miss ? "" : v);
				return 1;
			}
			o->jobs = (int)n;
		} else if ((v = value_of(argc, argv, &i, "--plot", &miss)) || miss) {
			if (miss || !*v) {
				opt_error("option '%s' needs a file name", "--plot");
				return 1;
			}
			o->plot = v;
		} else if (!strcmp(a, "--json")) {
			o->json = true;
		} else if (!strcmp(a, "--csv")) {
			o->csv = true;
		} else if (!strcmp(a, "--verify")) {
			o->verify = true;
		} else if (!strcmp(a, "--profile")) {
			o->profile = true;
		} else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
			o->quiet = true;
		} else if (!strncmp(a, "-D", 2)) {
			char *def = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
			char *eq = def ? strchr(def, '=') : NULL;
			if (!eq || eq == def || !eq[1]) {
				opt_error("expected -D name=value, got '%s'", def ? def : "");
				return 1;
			}
			if (o->lower.ndefines >= LOWER_MAX_DEFINES) {
				opt_error("too many -D options%s", "");
				return 1;
			}
			*eq = 0;
			o->lower.define_names[o->lower.ndefines] = def;
			o->lower.define_values[o->lower.ndefines++] = eq + 1;
		} else if ((v = value_of(argc, argv, &i, "--train", &miss)) || miss) {
			if (miss || !*v) {
				opt_error("option '%s' needs key=value", "--train");
				return 1;
			}
			/* room for the sweep's own six overrides after these */
			if (o->lower.ntrain >= LOWER_MAX_TRAIN - 6) {
				opt_error("too many --train options%s", "");
				return 1;
			}
			o->lower.train[o->lower.ntrain++] = v;
		} else {
			opt_error("unknown option '%s'", a);
			return 1;
		}
	}
	if (!o->file) {
		opt_error("no input file%s", "");
		return 1;
	}
	if (!devices) {
		opt_error("give the number of devices: --devices N%s", "");
		return 1;
	}
	if (!parse_count(devices, (int64_t)1 << 24, &o->devices)) {
		opt_error("--devices needs a positive integer (at most 16777216), got '%s'",
		          devices);
		return 1;
	}
	if (o->json && o->csv) {
		opt_error("--json and --csv exclude each other%s", "");
		return 1;
	}
	if (!load_hw(o))
		return 1;
	o->mem_limit = o->hw.mem_bytes;
	if (mem) {
		if (!sweep_parse_bytes(mem, &o->mem_limit)) {
			opt_error("--mem-limit needs a size in bytes (80G, 80GiB, 1.5e9), got '%s'",
			          mem);
			return 1;
		}
		o->mem_limit_set = true;
	}
	return 0;
}
