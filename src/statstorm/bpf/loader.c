// SPDX-License-Identifier: GPL-2.0
/* statstorm-trace: loads trace.bpf.c, attaches it to the traced processes and PHP binaries,
 * and copies its ring buffer's records to a file until SIGINT or SIGTERM. With --sample N
 * the PHP function probes follow one worker at a time (window.c).
 *
 *   statstorm-trace --out FILE [--pid N]... [--parent N]... [--binary PATH]... [--sample N]
 *                   [--counts 1] [--own 1] [--layout NAME=VALUE;...] [--ops 0]
 *
 * --own 1: the uprobes are attached to the --pid processes only (at most OWN_MAX), not to every
 * process that maps the binaries: other processes running the same PHP take no trap (their
 * children and later workers are not probed: for php-fpm workers given by PID).
 *
 * --counts 1: every request counted in the kernel (K records, with its script's U record),
 * nothing recorded, no PHP function probe attached; the records are flushed to FILE (a pipe:
 * statstorm exporter) as they come.
 *
 * --layout: the PHP layout of the --binary PHP (php_layout.c's names without PHP_, BUILD_ID
 * among them), from its own version's headers, instead of the one compiled in (the host's).
 * --ops 0: no PHP function probe (a PHP whose layout or signatures are not known): requests
 * and their syscalls only.
 *
 * stdout, one line each: READY (attached), then once a second and at the end
 *   STAT records syscalls requests lost hits windows
 *        (syscalls: S records; requests: request ends seen, recorded or counted; hits: PHP
 *        function probes run in requests not recorded; windows: workers armed so far)
 *   DONE records syscalls requests lost hits windows
 * An error is one line on stderr and exit status 1. Built by scripts/setup.sh. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include <bpf/bpf.h>
#include "trace.skel.h"
#include "probes.h"
#include "window.h"
#include "php_table.h"

#define MAX_PIDS 4096
#define MAX_BINS 8
#define MAX_LINKS 4096
#define OWN_MAX 64

static volatile sig_atomic_t stopping;
static FILE *out;
static unsigned long long records, syscalls, recorded, counted;
static int write_failed;
static struct sampler *sampler;  /* when sampling: see window.h */

static void on_signal(int sig) { (void)sig; stopping = 1; }

static int on_record(void *ctx, void *data, size_t size)
{
	(void)ctx;
	const unsigned char *r = data;
	size_t len = r[0] | (size_t)r[1] << 8;  /* the record's own length: its used part */
	if (len < 16 || len > size)
		len = size;
	records++;
	if (r[2] == 'S')
		syscalls++;
	else if (r[2] == 'Q')
		recorded++;
	else if (r[2] == 'K' && len >= 24 && *(const unsigned long long *)(r + 16) != 0)
		counted++;  /* a request (start 0: a process's calls outside any request) */
	if (sampler && len >= 8)
		sampler_record(sampler, r[2], r[4] | r[5] << 8 | r[6] << 16 | (unsigned int)r[7] << 24);
	if (fwrite(data, 1, len, out) != len)
		write_failed = 1;
	return 0;
}

static int quiet(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level != LIBBPF_WARN || getenv("STATSTORM_BPF_DEBUG") == NULL)
		return 0;
	return vfprintf(stderr, fmt, args);
}

static int tracepoint_exists(const char *sec)
{
	/* "tp/syscalls/sys_enter_x" -> <tracefs>/events/syscalls/sys_enter_x */
	const char *roots[] = {"/sys/kernel/tracing/events/", "/sys/kernel/debug/tracing/events/"};
	char path[512];
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s%s", roots[i], sec + 3);
		if (access(path, F_OK) == 0)
			return 1;
	}
	return 0;
}

static unsigned long long lost_events(struct trace_bpf *skel)
{
	int ncpu = libbpf_num_possible_cpus();
	unsigned long long total = 0;
	if (ncpu <= 0)
		return 0;
	unsigned long long *vals = calloc(ncpu, sizeof(*vals));
	unsigned int zero = 0;
	if (vals && bpf_map__lookup_elem(skel->maps.lost, &zero, sizeof(zero), vals,
	                                 ncpu * sizeof(*vals), 0) == 0)
		for (int i = 0; i < ncpu; i++)
			total += vals[i];
	free(vals);
	return total;
}

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "statstorm-trace: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	exit(1);
}

static struct ulink links[MAX_LINKS];
static int nlinks;

static void keep_link(struct bpf_link *l)
{
	if (nlinks < MAX_LINKS)
		links[nlinks++] = (struct ulink){l, -1};
}

/* a uprobe in `bin` for the process `pid` (-1: every process that maps it) */
static void attach_uprobe(const struct probe *p, const char *bin, int pid, long long cookie)
{
	struct ulink l;
	if (uprobe_attach(&l, p->prog, bin, p->func, p->ret, pid, (unsigned long long)cookie)) {
		char what[512];
		snprintf(what, sizeof(what), "%s in %s", p->func, bin);
		die("could not attach a uprobe to", what);
	}
	if (nlinks < MAX_LINKS)
		links[nlinks++] = l;
}

int main(int argc, char **argv)
{
	int pids[MAX_PIDS], parents[MAX_PIDS], npids = 0, nparents = 0, nbins = 0;
	const char *bins[MAX_BINS], *outpath = NULL;
	unsigned int sample = 1;
	int counts = 0, own = 0, ops = 1;
	struct php_layout lay;
	layout_builtin(&lay);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			die("missing value after", a);
		if (!strcmp(a, "--out"))
			outpath = v;
		else if (!strcmp(a, "--pid") && npids < MAX_PIDS)
			pids[npids++] = atoi(v);
		else if (!strcmp(a, "--parent") && nparents < MAX_PIDS)
			parents[nparents++] = atoi(v);
		else if (!strcmp(a, "--binary") && nbins < MAX_BINS)
			bins[nbins++] = v;
		else if (!strcmp(a, "--sample"))
			sample = (unsigned int)atoi(v);
		else if (!strcmp(a, "--counts"))
			counts = atoi(v) != 0;
		else if (!strcmp(a, "--own"))
			own = atoi(v) != 0;
		else if (!strcmp(a, "--ops"))
			ops = atoi(v) != 0;
		else if (!strcmp(a, "--layout")) {
			if (layout_parse(v, &lay) != 0)
				die("a --layout that does not give every field", v);
		}
		else
			die("unknown argument", a);
		i++;
	}
	if (!outpath)
		die("usage: statstorm-trace --out FILE [--pid N]... [--parent N]... [--binary PATH]... "
		    "[--sample N] [--counts 1] [--own 1] [--layout NAME=VALUE;...] [--ops 0]", NULL);
	if (own && (npids == 0 || npids > OWN_MAX || nparents > 0))
		die("--own needs 1 to 64 --pid and no --parent", NULL);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	libbpf_set_print(quiet);
	struct rlimit inf = {RLIM_INFINITY, RLIM_INFINITY};
	setrlimit(RLIMIT_MEMLOCK, &inf);

	struct trace_bpf *skel = trace_bpf__open();
	if (!skel)
		die("could not open the BPF program", strerror(errno));
	skel->rodata->sample_n = counts ? 0xffffffffu : (sample ? sample : 1);
	skel->rodata->counts_only = counts;
	/* Includes from PHP's included-files table when its layout is known for every binary
	 * (else every include's zend_stream_open is probed) */
	long long delta[MAX_BINS];
	int fits = lay.known && nbins > 0;  /* the layout is every binary's */
	for (int b = 0; b < nbins; b++)
		fits &= layout_fits(bins[b], &lay);
	int tables = !counts && fits;
	for (int b = 0; b < nbins; b++)
		tables &= (delta[b] = table_delta(bins[b], &lay)) != 0;
	if (tables) {
		skel->rodata->inc_ardata = lay.ht_ardata;
		skel->rodata->inc_numused = lay.ht_numused;
		skel->rodata->inc_bucket = lay.bucket_size;
		skel->rodata->inc_key = lay.bucket_key;
		skel->rodata->zstr_val = lay.zstr_val;
		skel->rodata->zstr_h = lay.zstr_h;
		skel->rodata->zstr_len = lay.zstr_len;
		skel->rodata->gc_info = lay.gc_info;
		skel->rodata->str_keep = lay.str_keep;
	}
	if (fits) {
		skel->rodata->fh_filename = lay.fh_filename;
		skel->rodata->fh_opened = lay.fh_opened;
		skel->rodata->fh_type = lay.fh_type;
	}
	if (fits && lay.version) {
		skel->rodata->old_args = lay.version < 80100;
		skel->rodata->sg_path = lay.sg_path;
		skel->rodata->sg_uri = lay.sg_uri;
	}
	if (counts)
		sample = 1;  /* no windows: nothing is ever armed */
	/* the syscalls: at the raw tracepoints (full events), or each at its own (counting
	 * only: trace.bpf.c says why) */
	struct bpf_program *prog;
	bpf_object__for_each_program(prog, skel->obj) {
		const char *sec = bpf_program__section_name(prog);
		if (!strncmp(sec, "tp/syscalls/", 12) ? !counts || !tracepoint_exists(sec)
		    : !strncmp(sec, "tp_btf/sys_e", 12) && counts)
			bpf_program__set_autoload(prog, false);
	}
	uprobes_prepare(skel->obj);
	int err = trace_bpf__load(skel);
	if (err)
		die("the kernel refused the BPF program", strerror(-err));
	unsigned char one = 1, two = 2;
	for (int i = 0; i < npids; i++)
		bpf_map__update_elem(skel->maps.targets, &pids[i], sizeof(int), &one, 1, BPF_ANY);
	for (int i = 0; i < nparents; i++)
		bpf_map__update_elem(skel->maps.targets, &parents[i], sizeof(int), &two, 1, BPF_ANY);

	bpf_object__for_each_program(prog, skel->obj) {
		const char *sec = bpf_program__section_name(prog);
		if ((strncmp(sec, "tp/", 3) && strncmp(sec, "tp_btf/", 7)) ||
		    !bpf_program__autoload(prog))
			continue;
		struct bpf_link *l = bpf_program__attach(prog);
		if (!l)
			die("could not attach to the tracepoint", strchr(sec, '/') + 1);
		keep_link(l);
	}
	/* once per request, attached for every process (--own: the --pid ones): request
	 * boundaries and counts */
	const struct probe every[] = {
		{skel->progs.execute_script, "php_execute_script", 0},
		{skel->progs.request_shutdown, "php_request_shutdown", 1},
		{skel->progs.deactivate, "zend_deactivate", 0},  /* with the table only */
	};
	/* the PHP functions operations come from: for every process, or when sampling for
	 * the armed worker only (window.c). zend_stream_open has no return probe: its
	 * return is seen at the thread's next event (trace.bpf.c); with the included-files
	 * table, only the opens that open a file are probed (php_stream_open_for_zend_ex) */
	static struct probe probes[] = {
		{NULL, "php_resolve_path", 0},
		{NULL, "php_resolve_path", 1},
		{NULL, "compile_filename", 0},
		{NULL, "compile_filename", 1},
		{NULL, "zend_stream_open", 0},
		{NULL, "php_stat", 0},
		{NULL, "php_stat", 1},
		{NULL, "php_parse_user_ini_file", 0},
		{NULL, "php_parse_user_ini_file", 1},
		{NULL, "tsrm_realpath", 0},
		{NULL, "tsrm_realpath", 1},
		{NULL, "php_clear_stat_cache", 0},
		{NULL, "php_clear_stat_cache", 1},
		{NULL, "expand_filepath_with_mode", 0},
		{NULL, "expand_filepath_with_mode", 1},
		{NULL, "OnUpdateStringUnempty", 0},
		{NULL, "OnUpdateStringUnempty", 1},
	};
	struct bpf_program *progs[] = {
		skel->progs.resolve_path, skel->progs.resolve_path_ret,
		skel->progs.compile_filename, skel->progs.compile_filename_ret,
		skel->progs.stream_open,
		skel->progs.php_stat, skel->progs.php_stat_ret,
		skel->progs.user_ini, skel->progs.user_ini_ret,
		skel->progs.tsrm_realpath, skel->progs.tsrm_realpath_ret,
		skel->progs.clear_stat_cache, skel->progs.clear_stat_cache_ret,
		skel->progs.expand_filepath, skel->progs.expand_filepath_ret,
		skel->progs.alter_ini, skel->progs.alter_ini_ret,
	};
	const int nprobes = sizeof(probes) / sizeof(probes[0]);
	for (int i = 0; i < nprobes; i++) {
		probes[i].prog = progs[i];
		if (tables && probes[i].prog == skel->progs.stream_open)
			probes[i].func = "php_stream_open_for_zend_ex";
	}
	const int nevery = sizeof(every) / sizeof(every[0]) - !tables;
	for (int b = 0; b < nbins; b++) {
		for (int k = 0; k < (own ? npids : 1); k++) {
			int pid = own ? pids[k] : -1;
			for (int i = 0; i < nevery; i++)
				attach_uprobe(&every[i], bins[b], pid, tables && i == 0 ? delta[b] : 0);
			for (int i = 0; i < nprobes && sample <= 1 && !counts && ops; i++)
				attach_uprobe(&probes[i], bins[b], pid, 0);
			struct bpf_link *l = bpf_program__attach_usdt(
				skel->progs.request_startup, pid, bins[b], "php", "request__startup", NULL);
			if (!l) {  /* built without USDT probes: the function they are in */
				struct probe start = {skel->progs.request_startup_fn, "php_request_startup", 0};
				attach_uprobe(&start, bins[b], pid, sapi_delta(bins[b]));
			} else {
				keep_link(l);
			}
		}
	}
	if (sample > 1) {
		sampler = sampler_new(probes, ops ? nprobes : 0, bins, nbins, bpf_map__fd(skel->maps.targets),
		                      bpf_map__fd(skel->maps.armed), sample);
		if (!sampler)
			die("out of memory", NULL);
	}

	out = fopen(outpath, "wb");
	if (!out)
		die("cannot write", outpath);
	setvbuf(out, NULL, _IOFBF, 1 << 20);
	struct ring_buffer *rb = ring_buffer__new(bpf_map__fd(skel->maps.rb), on_record, NULL, NULL);
	if (!rb)
		die("could not open the ring buffer", strerror(errno));
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	printf("READY\n");
	fflush(stdout);

	struct timespec tick = {0, 20 * 1000 * 1000}, last, now;
	clock_gettime(CLOCK_MONOTONIC, &last);
	while (!stopping) {
		ring_buffer__consume(rb);
		if (counts && fflush(out) != 0)
			die("writing the records failed", outpath);
		if (sampler)
			sampler_tick(sampler, recorded, counted);
		nanosleep(&tick, NULL);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > last.tv_sec) {
			last = now;
			printf("STAT %llu %llu %llu %llu %llu %llu\n", records, syscalls,
			       recorded + counted, lost_events(skel), skel->bss->unrecorded_hits,
			       sampler ? sampler_windows(sampler) : 0);
			fflush(stdout);
		}
	}
	/* Stop recording, let the probes running now finish, and drain: the file is then
	 * complete (DONE). The probes are detached after, all at once (destroy_links). */
	skel->bss->stopped = 1;
	struct timespec settle = {0, 50 * 1000 * 1000};
	nanosleep(&settle, NULL);
	ring_buffer__consume(rb);
	unsigned long long lost = lost_events(skel);
	if (fflush(out) != 0 || write_failed)
		die("writing the records failed", outpath);
	fclose(out);
	printf("DONE %llu %llu %llu %llu %llu %llu\n", records, syscalls, recorded + counted, lost,
	       skel->bss->unrecorded_hits, sampler ? sampler_windows(sampler) : 0);
	fflush(stdout);
	if (sampler)
		sampler_stop(sampler);
	destroy_links(links, nlinks);
	ring_buffer__free(rb);
	trace_bpf__destroy(skel);
	return 0;
}
