// SPDX-License-Identifier: GPL-2.0
/* statstorm's full-event tracer, kernel side (libbpf CO-RE; built by scripts/setup.sh).
 *
 * The same events as the bpftrace program of adapters/tracing/bpftrace.py, as compact binary
 * records in one ring buffer (see struct rec; adapters/tracing/libbpf_trace.py decodes them):
 *   S syscall exit   A accept returned   U/V request__startup (script, URI)
 *   X php_execute_script   Q php_request_shutdown returned   O/P/R a PHP function entered
 *   (its second string) and returned   F fork   E exit   K a request counted, not recorded
 *   T an entry of PHP's included-files table (the O and R of a zend_stream_open in one)
 *   I such an entry whose path a T record carried before (OPcache's interned strings)
 * Records are submitted without waking the reader, which drains the buffer on its own clock:
 * no wake-up, no formatting and no parsing per event while PHP runs.
 *
 * Sampling (sample_n > 1): a request is recorded in full when its process is armed (the
 * `armed` map) as it starts; the others leave one K record of per-call counters at their
 * end. The loader (window.c) arms one worker at a time, with the PHP function probes
 * attached to that worker alone, so that about one request in sample_n is recorded and the
 * others never trap into a uprobe.
 *
 * Includes from PHP's included-files table (inc_ardata set, the loader knowing its layout):
 * an include that opens nothing (OPcache's cached *_once scripts: about 1,000 a MediaWiki
 * request) is not probed. Each event of a recorded request first reads how many entries the
 * executor's included-files table holds; the entries added since the thread's last event
 * become T records with their path, before that event: the zend_stream_open entry and return
 * that its probe would have recorded. The real opens are probed at
 * php_stream_open_for_zend_ex. A T record reads as a zend_stream_open entry with the number 1
 * (adapters/tracing/libbpf_trace.py); the entry of a file that a real open of the request
 * opened is that open's own (model/attribution.py). The primary script's entry that
 * php_execute_script adds itself (a script PHP opened before, as the CLI does) is not
 * recorded.
 *
 * Counting only (counts_only: `statstorm exporter`, `statstorm trace --counts`): every request
 * leaves its K record and its script's U record, nothing else is recorded. A process is counted
 * from its first call on; what it does after its last request leaves a K record of its own
 * (start 0) when it exits. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/usdt.bpf.h>
#include <asm/unistd.h>  /* the syscalls' numbers (__NR_*): only macros */

char LICENSE[] SEC("license") = "GPL";

#define STRMAX 256   /* longest string recorded, with its NUL: longer ones are cut */
#define NCOUNT 16    /* K counters: 2 x the call types of adapters/bpftrace.COUNT_CALLS */
#define COUNT_SHIFT 40

enum tag { T_S = 'S', T_A = 'A', T_U = 'U', T_V = 'V', T_X = 'X', T_Q = 'Q', T_O = 'O',
           T_P = 'P', T_R = 'R', T_F = 'F', T_E = 'E', T_K = 'K', T_T = 'T', T_I = 'I' };
/* The functions operations come from (adapters/bpftrace.UPROBES, in that order). */
enum fn { F_RESOLVE, F_COMPILE, F_SOPEN, F_STAT, F_UINI, F_REALPATH, F_CLEAR, F_EXPAND, F_INI };

struct rec {
	__u16 len;     /* bytes of this record */
	__u8 tag;
	__u8 kind;     /* S: syscall index; O/R: function index */
	__u32 pid;
	__u64 ts;
	__u64 a;       /* S: latency; O: numeric argument; F: child pid */
	__s64 b;       /* S: flags */
	__s64 c;       /* S: dirfd */
	__s64 d;       /* S: return value */
	char s[STRMAX];
};
#define HDR 16
#define BODY 48

struct small_rec {
	__u16 len; __u8 tag; __u8 kind; __u32 pid; __u64 ts;
	__u64 a;
};

struct count_rec {
	__u16 len; __u8 tag; __u8 kind; __u32 pid; __u64 ts;
	__u64 start;
	__u64 c[NCOUNT];
};

struct inflight {
	__u64 ts;
	__u64 path;
	__s64 flags;
	__s64 dfd;
	__u32 call;
	__u32 kind;    /* the call's counter slot (sampling) */
};

/* a thread's own state, in task storage: no hash lookup per event */
struct tstate {
	struct inflight f;  /* the traced syscall in flight */
	__u64 so_sp;        /* zend_stream_open entered and not seen to return: its stack
	                     * pointer at the entry (where its return address is), else 0 */
	__u64 so_ret;       /* that return address */
	__u64 so_last;      /* the end of the last event seen inside it */
	__u64 inc;          /* while the thread's process runs a recorded script: the address of
	                     * its included-files table, else 0 */
	__u32 inc_seen;     /* the table's entries recorded or claimed so far */
	__u32 inc_claim;    /* 1 + the index of the primary script's entry, else 0 */
	__u8 target;        /* the thread's process is traced */
	__u8 busy;          /* f holds a call whose exit has not come yet */
	__u8 pad[6];
};

struct pstate {
	__u64 start;
	__u32 pad2;
	__u8 on;       /* this request is recorded in full */
	__u8 ended;    /* php_request_shutdown returned since it started */
	__u8 seen;
	__u8 pad;
	__u64 c[NCOUNT];
};

const volatile __u32 sample_n = 1;
const volatile __u8 counts_only = 0;
/* the included-files table's layout (php_layout.h, by the loader); inc_ardata 0: not known */
const volatile __u32 inc_ardata = 0, inc_numused = 0, inc_bucket = 32, inc_key = 24;
const volatile __u32 zstr_val = 24;
/* a zend_string's hash and length, its type_info, and the flags of OPcache's interned strings
 * (IS_STR_INTERNED | IS_STR_PERMANENT; 0: every table entry sent in full) */
const volatile __u32 zstr_h = 8, zstr_len = 16, gc_info = 4, str_keep = 0;
/* zend_file_handle: its filename, opened_path and type (0: a name, not opened yet) */
const volatile __u32 fh_filename = 40, fh_opened = 48, fh_type = 56;
/* PHP before 8.1: file names passed as C strings (php_stat's type third, compile_filename's
 * name a zval, zend_stream_open's name first); the SAPI's request script and URI (0: not known) */
const volatile __u8 old_args = 0;
const volatile __u32 sg_path = 0, sg_uri = 0;
volatile __u32 stopped = 0;  /* set by the loader when it stops: nothing more is recorded */
__u64 unrecorded_hits = 0;   /* PHP function probes run in requests not recorded */

struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 64 << 20); } rb SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 65536);
         __type(key, __u32); __type(value, __u8); } targets SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_TASK_STORAGE); __uint(map_flags, BPF_F_NO_PREALLOC);
         __type(key, int); __type(value, struct tstate); } threads SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 65536);
         __type(key, __u32); __type(value, struct pstate); } procs SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 4096);
         __type(key, __u32); __type(value, __u8); } armed SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __uint(max_entries, 1);
         __type(key, __u32); __type(value, __u64); } lost SEC(".maps");
/* OPcache's interned strings whose path a T record has carried, one slot per address: an
 * array (no hashing, looked up in place); a string whose slot another one took is sent again */
#define ISLOTS 65536
struct ikey { __u64 ptr, h, len; };
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, ISLOTS);
         __type(key, __u32); __type(value, struct ikey); } interned SEC(".maps");

static __always_inline __u32 tgid(void) { return bpf_get_current_pid_tgid() >> 32; }
static __always_inline __u32 tid(void) { return (__u32)bpf_get_current_pid_tgid(); }

static __always_inline void count_lost(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&lost, &zero);
	if (n)
		(*n)++;
}

/* The current thread's state if its process is traced, else NULL. A thread's first event
 * looks its process up in `targets` (where the loader and fork tracking put them) and keeps
 * the answer in the thread, traced or not: one hash lookup per thread, not per event. */
static __always_inline struct tstate *traced(void)
{
	if (stopped)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct tstate *s = bpf_task_storage_get(&threads, task, 0, 0);
	if (!s) {
		__u32 pid = tgid();
		__u8 *t = bpf_map_lookup_elem(&targets, &pid);
		struct tstate init = {};
		init.target = t && *t == 1;
		s = bpf_task_storage_get(&threads, task, &init, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!s) {
			if (init.target)
				count_lost();
			return 0;
		}
	}
	return s->target ? s : 0;
}

/* A record with room for a string, reserved in the ring buffer itself (no copy): the
 * reader writes out its first `len` bytes only. */
static __always_inline struct rec *new_rec(void)
{
	struct rec *r = bpf_ringbuf_reserve(&rb, sizeof(struct rec), 0);
	if (!r)
		count_lost();
	return r;
}

/* a record with no string: tag, pid, time, one number */
static __always_inline void emit_small(__u8 tag, __u8 kind, __u32 pid, __u64 ts, __u64 a)
{
	struct small_rec *r = bpf_ringbuf_reserve(&rb, sizeof(*r), 0);
	if (!r) {
		count_lost();
		return;
	}
	r->len = sizeof(*r); r->tag = tag; r->kind = kind; r->pid = pid; r->ts = ts; r->a = a;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

/* submit a record with the string read from user memory at `ptr` (0: empty) */
static __always_inline void emit_str(struct rec *r, __u64 ptr)
{
	long n = 0;
	if (ptr)
		n = bpf_probe_read_user_str(r->s, STRMAX, (const void *)ptr);
	if (n < 1)
		n = 1;          /* the NUL only */
	r->len = BODY + (__u16)((n - 1) & (STRMAX - 1));
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

static __always_inline struct pstate *pstate_of(__u32 pid)
{
	return bpf_map_lookup_elem(&procs, &pid);
}

/* is this process's current request recorded in full? */
static __always_inline int recording(__u32 pid)
{
	if (counts_only)
		return 0;
	if (sample_n <= 1)
		return 1;
	struct pstate *st = pstate_of(pid);
	return !st || st->on;
}

/* -- zend_stream_open's return, seen without a return probe --------------------------------
 * MediaWiki opens about 1,000 scripts a request with require_once, each through
 * zend_stream_open: a return probe there is 1,000 more traps a request. Its return is seen
 * instead at the thread's next event that is not inside it. Inside zend_stream_open PHP
 * resolves the name along include_path, takes realpaths, checks open_basedir and opens the
 * file (lstat walk, open, fstat); any other probed function, a request's boundary or another
 * process event is outside it. For the events that may be inside (syscalls,
 * php_resolve_path, tsrm_realpath, expand_filepath_with_mode and their returns) the thread's
 * user stack tells: an event is inside while the stack is deeper than at the entry and the
 * return address the call pushed is still in its place (a call made after the return, from
 * the same frame, writes its own there). The R record carries the end of the last event seen
 * inside it (or its entry's time), not the return's own time. */

/* the user stack pointer of the current thread (at its syscall or trap) */
static __always_inline __u64 user_sp(void)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	return PT_REGS_SP_CORE(regs);
}

/* zend_stream_open has returned: its R record */
static __always_inline void sopen_close(struct tstate *s, __u32 pid)
{
	if (!s->so_sp)
		return;
	s->so_sp = 0;
	emit_small(T_R, F_SOPEN, pid, s->so_last, 0);
}

/* -- PHP's included-files table -------------------------------------------------------------- */
static __always_inline __u32 inc_used(struct tstate *s)
{
	__u32 n = 0;
	bpf_probe_read_user(&n, sizeof(n), (const void *)(s->inc + inc_numused));
	return n;
}

struct drain {
	__u64 data;    /* the table's buckets */
	__u64 ts;
	__u32 pid;
	__u32 seen;
	__u32 claim;
};

/* A table entry's key is, for a script OPcache has cached, one of its interned strings: in
 * its shared memory, at the same address in every worker until OPcache restarts. Such a path
 * is sent once in full (a T record with the string's address, hash and length in b, c, d),
 * then as those three numbers only (I): the 989 entries of a MediaWiki request would
 * otherwise copy their paths every request. Another string put at the same address after a
 * restart has another hash and length, unless it is the same path. */
static __always_inline int interned_key(__u64 key, struct ikey *k)
{
	__u64 head[4] = {};
	if (!str_keep || bpf_probe_read_user(head, sizeof(head), (const void *)key))
		return 0;
	__u32 info = (__u32)(head[(gc_info >> 3) & 3] >> ((gc_info & 7) * 8));
	if ((info & str_keep) != str_keep)
		return 0;
	k->ptr = key;
	k->h = head[(zstr_h >> 3) & 3];
	k->len = head[(zstr_len >> 3) & 3];
	return 1;
}

static long drain_one(__u64 i, void *arg)
{
	struct drain *d = arg;
	__u32 j = d->seen++;
	if (d->claim == j + 1) {  /* the primary script's entry */
		d->claim = 0;
		return 0;
	}
	__u64 key = 0;
	if (bpf_probe_read_user(&key, sizeof(key),
	                        (const void *)(d->data + (__u64)j * inc_bucket + inc_key)) || !key)
		return 0;
	struct ikey k = {};
	int keep = interned_key(key, &k);
	__u32 slot = (__u32)(key >> 3) & (ISLOTS - 1);
	struct ikey *sent = keep ? bpf_map_lookup_elem(&interned, &slot) : 0;
	struct rec *r = new_rec();
	if (!r)
		return 1;
	r->tag = T_T; r->kind = F_SOPEN; r->pid = d->pid; r->ts = d->ts; r->a = 1;
	r->b = (__s64)k.ptr; r->c = (__s64)k.h; r->d = (__s64)k.len;
	if (sent && sent->ptr == k.ptr && sent->h == k.h && sent->len == k.len) {
		r->tag = T_I;
		r->len = BODY;
		bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
		return 0;
	}
	/* known to others once reserved: this record precedes their I records */
	if (sent)
		*sent = k;
	emit_str(r, key + zstr_val);
	return 0;
}

/* the entries the table gained since the thread's last event, recorded as includes */
static __always_inline void inc_drain(struct tstate *s, __u32 pid, __u64 now)
{
	if (!s->inc)
		return;
	__u32 n = inc_used(s);
	if (n <= s->inc_seen) {
		s->inc_seen = n;  /* (a table emptied: not in a running script) */
		return;
	}
	struct drain d = {.ts = now, .pid = pid, .seen = s->inc_seen, .claim = s->inc_claim};
	if (bpf_probe_read_user(&d.data, sizeof(d.data), (const void *)(s->inc + inc_ardata)) ||
	    !d.data) {
		s->inc_seen = n;
		return;
	}
	bpf_loop(n - s->inc_seen, drain_one, &d, 0);
	s->inc_seen = n;
	s->inc_claim = d.claim;
}

/* an event that may be inside zend_stream_open, at user stack pointer `sp`, ending at `end`:
 * keep the frame if it is inside, else close it */
static __always_inline void sopen_check(struct tstate *s, __u32 pid, __u64 sp, __u64 end)
{
	if (!s->so_sp)
		return;
	if (sp < s->so_sp) {
		__u64 ret = 0;
		if (!bpf_probe_read_user(&ret, sizeof(ret), (const void *)s->so_sp) &&
		    ret == s->so_ret) {
			s->so_last = end;
			return;
		}
	}
	sopen_close(s, pid);
}

static __always_inline void emit_counts(__u32 pid, struct pstate *st, __u64 now)
{
	struct count_rec *k = bpf_ringbuf_reserve(&rb, sizeof(*k), 0);
	if (!k) {
		count_lost();
		return;
	}
	k->len = sizeof(*k); k->tag = T_K; k->kind = 0; k->pid = pid; k->ts = now;
	k->start = st->start;
	for (int i = 0; i < NCOUNT; i++) {
		k->c[i] = st->c[i];
		st->c[i] = 0;
	}
	bpf_ringbuf_submit(k, BPF_RB_NO_WAKEUP);
}

/* Counting only: a process's counters from its first call on, before any request starts
 * (a traced command's start-up, or a worker mid-request when the trace began: start 0). */
static __always_inline struct pstate *counting(__u32 pid)
{
	struct pstate init = {};
	bpf_map_update_elem(&procs, &pid, &init, BPF_NOEXIST);
	return pstate_of(pid);
}

/* a request starts (accept returned, or a keep-alive request's startup): sample it or not */
static __always_inline void new_request(__u32 pid, __u64 now)
{
	if (sample_n <= 1)
		return;
	struct pstate *st = pstate_of(pid);
	if (!st) {
		struct pstate init = {};
		bpf_map_update_elem(&procs, &pid, &init, BPF_NOEXIST);
		st = pstate_of(pid);
		if (!st)
			return;
	}
	if (st->seen && !st->on && !st->ended)
		emit_counts(pid, st, now);  /* an unrecorded request that never shut down */
	__u8 *a = bpf_map_lookup_elem(&armed, &pid);
	st->on = a && *a == 1;
	st->seen = 1;
	st->ended = 0;
	st->start = now;
}

/* -- syscalls ----------------------------------------------------------------------------- */
enum call { C_NEWFSTATAT, C_STATX, C_STAT, C_LSTAT, C_FSTAT, C_ACCESS, C_FACCESSAT,
            C_FACCESSAT2, C_OPEN, C_OPENAT, C_READLINK, C_READLINKAT, C_GETCWD, C_CHDIR,
            C_FCHDIR };

/* the counter slot of a call (COUNT_CALLS: lstat stat fstat access open readlink getcwd
 * chdir); fstatat-like calls by their flags (AT_EMPTY_PATH: fstat, NOFOLLOW: lstat) */
static __always_inline __u32 count_kind(__u32 call, __s64 flags)
{
	switch (call) {
	case C_NEWFSTATAT: case C_STATX:
		return flags & 0x1000 ? 2 : (flags & 0x100 ? 0 : 1);
	case C_LSTAT: return 0;
	case C_STAT: return 1;
	case C_FSTAT: return 2;
	case C_ACCESS: case C_FACCESSAT: case C_FACCESSAT2: return 3;
	case C_OPEN: case C_OPENAT: return 4;
	case C_READLINK: case C_READLINKAT: return 5;
	case C_GETCWD: return 6;
	default: return 7;
	}
}

/* Full events: the syscalls are seen at the raw sys_enter and sys_exit tracepoints (two BPF
 * links), not at each syscall's own tracepoints. Each of those is a perf event, and the kernel
 * takes a grace period under one global lock to detach each (about 40 ms: seconds for the 38
 * of them), while raw tracepoints detach at once. The price is paid by every syscall of the
 * machine while tracing: a switch on its number, untraced ones leaving at once, about 0.1 µs
 * more per syscall of another kind than the syscalls' own tracepoints cost (docs/trace.md
 * says how it was measured), a little less per metadata call. Counting only (the
 * exporter, `trace --counts`: long runs at production load) keeps those, each syscall's own:
 * a slow detach, the least cost on the rest of the machine. */
#if defined(__TARGET_ARCH_x86)
#define SYSCALL_NR(regs) ((long)(regs)->orig_ax)  /* a BTF pointer: read directly */
#elif defined(__TARGET_ARCH_arm64)
#define SYSCALL_NR(regs) ((long)(regs)->syscallno)
#endif

/* the i-th argument of the syscall whose registers are `regs` */
static __always_inline __u64 arg(struct pt_regs *regs, int i)
{
	switch (i) {
	case 0: return PT_REGS_PARM1_CORE_SYSCALL(regs);
	case 1: return PT_REGS_PARM2_CORE_SYSCALL(regs);
	case 2: return PT_REGS_PARM3_CORE_SYSCALL(regs);
	case 3: return PT_REGS_PARM4_CORE_SYSCALL(regs);
	default: return 0;
	}
}

/* a traced syscall: its call, and which arguments are its path, flags and dirfd (-1: none);
 * 0 for any other syscall. x86_64's stat, lstat and fstat are the kernel's newstat,
 * newlstat and newfstat (glibc before 2.33 calls them: Debian 11's PHP 7.4); arm64 has only
 * the *at calls. */
struct sysargs { int call, path_i, flags_i, dfd_i; };

static __always_inline int traced_call(long nr, struct sysargs *a)
{
#define CALL(nr_, call_, p_, f_, d_) \
	case nr_: a->call = call_; a->path_i = p_; a->flags_i = f_; a->dfd_i = d_; return 1;
	switch (nr) {
	CALL(__NR_newfstatat, C_NEWFSTATAT, 1, 3, 0)
	CALL(__NR_statx, C_STATX, 1, 2, 0)
	CALL(__NR_faccessat, C_FACCESSAT, 1, -1, 0)
#ifdef __NR_faccessat2
	CALL(__NR_faccessat2, C_FACCESSAT2, 1, 3, 0)
#endif
	CALL(__NR_openat, C_OPENAT, 1, 2, 0)
	CALL(__NR_readlinkat, C_READLINKAT, 1, -1, 0)
	CALL(__NR_getcwd, C_GETCWD, 0, -1, -1)
	CALL(__NR_chdir, C_CHDIR, 0, -1, -1)
	CALL(__NR_fchdir, C_FCHDIR, -1, -1, 0)
	CALL(__NR_fstat, C_FSTAT, -1, -1, 0)
#ifdef __NR_stat
	CALL(__NR_stat, C_STAT, 0, -1, -1)
	CALL(__NR_lstat, C_LSTAT, 0, -1, -1)
	CALL(__NR_access, C_ACCESS, 0, -1, -1)
	CALL(__NR_open, C_OPEN, 0, 1, -1)
	CALL(__NR_readlink, C_READLINK, 0, -1, -1)
#endif
	default: return 0;
	}
#undef CALL
}

static __always_inline int on_enter(__u32 call, __u64 path, __s64 flags, __s64 dfd)
{
	struct tstate *s = traced();
	if (!s)
		return 0;
	struct inflight *f = &s->f;
	f->ts = bpf_ktime_get_ns();
	f->call = call;
	f->path = path;
	f->flags = flags;
	f->dfd = dfd;
	f->kind = count_kind(call, flags);
	s->busy = 1;
	return 0;
}

static __always_inline int on_exit(__s64 ret)
{
	struct tstate *s = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
	if (!s || !s->busy)
		return 0;
	s->busy = 0;
	struct inflight *f = &s->f;
	__u64 now = bpf_ktime_get_ns();
	__u32 pid = tgid();
	if (sample_n > 1) {
		struct pstate *st = pstate_of(pid);
		if (!st && counts_only)
			st = counting(pid);
		if (st && !st->on) {  /* a request counted, not recorded */
			__u32 slot = ((f->kind & 7) << 1) | (ret < 0 ? 1 : 0);
			st->c[slot & (NCOUNT - 1)] += (1ULL << COUNT_SHIFT) + (now - f->ts);
			return 0;
		}
	}
	if (counts_only)
		return 0;
	if (s->so_sp)
		sopen_check(s, pid, user_sp(), now);
	inc_drain(s, pid, f->ts);
	struct rec *r = new_rec();
	if (r) {
		r->tag = T_S; r->kind = f->call; r->pid = pid; r->ts = f->ts;
		r->a = now - f->ts; r->b = f->flags; r->c = f->dfd; r->d = ret;
		__u64 path = f->path;
		if (f->call == C_GETCWD && ret <= 0)
			path = 0;  /* the buffer holds the path only when the call succeeded */
		emit_str(r, path);
	}
	return 0;
}

static __always_inline int on_accept(__s64 ret)
{
	struct tstate *s;
	if (ret < 0 || !(s = traced()))
		return 0;
	__u32 pid = tgid();
	__u64 now = bpf_ktime_get_ns();
	sopen_close(s, pid);
	s->inc = 0;
	new_request(pid, now);
	if (recording(pid))
		emit_small(T_A, 0, pid, now, 0);
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long nr)
{
	struct sysargs a;
	if (!traced_call(nr, &a))
		return 0;
	return on_enter(a.call, a.path_i >= 0 ? arg(regs, a.path_i) : 0,
	                a.flags_i >= 0 ? (__s64)arg(regs, a.flags_i) : 0,
	                a.dfd_i >= 0 ? (__s64)(int)arg(regs, a.dfd_i) : -100);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
	long nr = SYSCALL_NR(regs);
	struct sysargs a;
#ifdef __NR_accept
	if (nr == __NR_accept)
		return on_accept(ret);
#endif
	if (nr == __NR_accept4)
		return on_accept(ret);
	if (!traced_call(nr, &a))
		return 0;
	return on_exit(ret);
}

/* Counting only: each syscall's own tracepoints (the loader loads one set or the other). The
 * context's arguments are read at fixed offsets only: the indices are constants. */
#define TP_ARG(ctx, i) ((i) == 0 ? (ctx)->args[0] : (i) == 1 ? (ctx)->args[1] : \
                        (i) == 2 ? (ctx)->args[2] : (ctx)->args[3])
#define SYSCALL(name, call, path_i, flags_i, dfd_i)                                      \
	SEC("tp/syscalls/sys_enter_" #name)                                                 \
	int enter_##name(struct trace_event_raw_sys_enter *ctx)                            \
	{                                                                                   \
		return on_enter(call, path_i >= 0 ? TP_ARG(ctx, path_i) : 0,                    \
		                flags_i >= 0 ? (__s64)TP_ARG(ctx, flags_i) : 0,                 \
		                dfd_i >= 0 ? (__s64)(int)TP_ARG(ctx, dfd_i) : -100);            \
	}                                                                                   \
	SEC("tp/syscalls/sys_exit_" #name)                                                  \
	int exit_##name(struct trace_event_raw_sys_exit *ctx) { return on_exit(ctx->ret); }

SYSCALL(newfstatat, C_NEWFSTATAT, 1, 3, 0)
SYSCALL(statx, C_STATX, 1, 2, 0)
SYSCALL(stat, C_STAT, 0, -1, -1)
SYSCALL(lstat, C_LSTAT, 0, -1, -1)
SYSCALL(fstat, C_FSTAT, -1, -1, 0)
SYSCALL(access, C_ACCESS, 0, -1, -1)
SYSCALL(faccessat, C_FACCESSAT, 1, -1, 0)
SYSCALL(faccessat2, C_FACCESSAT2, 1, 3, 0)
SYSCALL(open, C_OPEN, 0, 1, -1)
SYSCALL(openat, C_OPENAT, 1, 2, 0)
SYSCALL(readlink, C_READLINK, 0, -1, -1)
SYSCALL(readlinkat, C_READLINKAT, 1, -1, 0)
SYSCALL(getcwd, C_GETCWD, 0, -1, -1)
SYSCALL(chdir, C_CHDIR, 0, -1, -1)
SYSCALL(fchdir, C_FCHDIR, -1, -1, 0)
/* x86_64's stat, lstat and fstat are these (glibc before 2.33 calls them: Debian 11's PHP 7.4) */
SYSCALL(newstat, C_STAT, 0, -1, -1)
SYSCALL(newlstat, C_LSTAT, 0, -1, -1)
SYSCALL(newfstat, C_FSTAT, -1, -1, 0)

SEC("tp/syscalls/sys_exit_accept")
int exit_accept(struct trace_event_raw_sys_exit *ctx) { return on_accept(ctx->ret); }
SEC("tp/syscalls/sys_exit_accept4")
int exit_accept4(struct trace_event_raw_sys_exit *ctx) { return on_accept(ctx->ret); }

/* -- processes ---------------------------------------------------------------------------- */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent_task, struct task_struct *child_task)
{
	__u32 parent = parent_task->pid, child = child_task->pid;
	__u8 *t = bpf_map_lookup_elem(&targets, &parent);
	if (!t)
		return 0;
	__u8 one = 1;
	bpf_map_update_elem(&targets, &child, &one, BPF_ANY);
	emit_small(T_F, 0, parent, bpf_ktime_get_ns(), child);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int on_process_exit(__u64 *ctx)
{
	__u32 pid = tgid();
	if (pid != tid() || !bpf_map_lookup_elem(&targets, &pid))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct pstate *st = pstate_of(pid);
	if (st) {
		if (st->seen && !st->on && !st->ended) {
			emit_counts(pid, st, now);
		} else if (counts_only && !st->on) {
			/* what it did after its last request (a command's shut-down): not a request */
			int any = 0;
			for (int i = 0; i < NCOUNT; i++)
				any |= st->c[i] != 0;
			if (any) {
				st->start = 0;
				emit_counts(pid, st, now);
			}
		}
		bpf_map_delete_elem(&procs, &pid);
	}
	bpf_map_delete_elem(&targets, &pid);
	emit_small(T_E, 0, pid, now, 0);
	return 0;
}

/* -- PHP ---------------------------------------------------------------------------------- */
/* a request starts: its script and URI ("-" for none, as PHP's USDT probe says) */
static __always_inline void dash_or_str(struct rec *r, __u64 ptr)
{
	if (ptr) {
		emit_str(r, ptr);
		return;
	}
	r->s[0] = '-'; r->s[1] = 0;
	r->len = BODY + 1;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

static __always_inline int startup(__u64 file, __u64 uri)
{
	__u32 pid = tgid();
	struct tstate *s = traced();
	if (!s)
		return 0;
	sopen_close(s, pid);
	s->inc = 0;
	__u64 now = bpf_ktime_get_ns();
	struct pstate *st = sample_n > 1 ? pstate_of(pid) : 0;
	if (sample_n > 1 && (!st || st->ended || !st->seen))
		new_request(pid, now);  /* a keep-alive request (no accept() before it), or a
		                         * command's, counted since its start */
	if (!counts_only && !recording(pid))
		return 0;
	struct rec *r = new_rec();
	if (!r)
		return 0;
	r->tag = T_U; r->kind = 0; r->pid = pid; r->ts = now; r->a = 0;
	dash_or_str(r, file);
	if (counts_only)
		return 0;  /* the script only: the exporter leaves its own queries out */
	r = new_rec();
	if (!r)
		return 0;
	r->tag = T_V; r->pid = pid; r->ts = now;
	dash_or_str(r, uri);
	return 0;
}

SEC("usdt")
int BPF_USDT(request_startup, void *file, void *uri)
{ return startup((__u64)file, (__u64)uri); }

/* php_request_startup, for a PHP built without USDT probes (PHP 8.4 in Debian 13): where its
 * USDT probe would fire. The attach cookie: from the function to the SAPI's globals (the
 * loader, from the binary's symbols), 0 when not known (the script and URI are then "-") */
SEC("uprobe")
int BPF_KPROBE(request_startup_fn)
{
	__s64 delta = (__s64)bpf_get_attach_cookie(ctx);
	__u64 file = 0, uri = 0;
	if (delta && sg_uri) {
		__u64 sg = bpf_get_func_ip(ctx) + delta;
		bpf_probe_read_user(&file, sizeof(file), (const void *)(sg + sg_path));
		bpf_probe_read_user(&uri, sizeof(uri), (const void *)(sg + sg_uri));
	}
	return startup(file, uri);
}

SEC("uprobe")
int BPF_KPROBE(execute_script, void *primary)
{
	__u32 pid = tgid();
	struct tstate *s = traced();
	if (s && recording(pid)) {
		sopen_close(s, pid);
		/* the attach cookie: from php_execute_script to the included-files table, in this
		 * binary (the loader, from its symbols and php_layout.h), or 0 */
		__s64 delta = (__s64)bpf_get_attach_cookie(ctx);
		s->inc = 0;
		if (delta && inc_ardata) {
			s->inc = bpf_get_func_ip(ctx) + delta;
			s->inc_seen = inc_used(s);
			s->inc_claim = 0;
			/* a primary script opened already (not by name): php_execute_script adds its
			 * entry itself, the next one */
			__u64 fname = 0, opened = 1;
			__u8 type = 0;
			if (primary && !bpf_probe_read_user(&fname, sizeof(fname), primary + fh_filename) &&
			    !bpf_probe_read_user(&opened, sizeof(opened), primary + fh_opened) &&
			    !bpf_probe_read_user(&type, sizeof(type), primary + fh_type) &&
			    fname && !opened && type != 0)
				s->inc_claim = s->inc_seen + 1;
		}
		emit_small(T_X, 0, pid, bpf_ktime_get_ns(), 0);
	}
	return 0;
}

/* zend_deactivate: the script, its shutdown functions and destructors have run; the table's
 * last entries, before the executor lets it go */
SEC("uprobe")
int BPF_KPROBE(deactivate)
{
	__u32 pid = tgid();
	struct tstate *s = traced();
	if (s && s->inc && recording(pid)) {
		__u64 now = bpf_ktime_get_ns();
		sopen_close(s, pid);
		inc_drain(s, pid, now);
	}
	if (s)
		s->inc = 0;
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(request_shutdown)
{
	__u32 pid = tgid();
	struct tstate *s = traced();
	if (!s)
		return 0;
	sopen_close(s, pid);
	s->inc = 0;
	__u64 now = bpf_ktime_get_ns();
	if (sample_n > 1) {
		struct pstate *st = pstate_of(pid);
		if (st && !st->ended) {
			st->ended = 1;
			if (!st->on) {
				emit_counts(pid, st, now);
				return 0;
			}
		}
		if (st && !st->on)
			return 0;
	}
	if (counts_only)
		return 0;  /* nothing counted since the trace began: nothing to say */
	emit_small(T_Q, 0, pid, now, 0);
	return 0;
}

/* the functions that may run inside zend_stream_open (and zend_stream_open itself, which
 * does not) */
static __always_inline int in_sopen(__u8 fn)
{
	return fn == F_RESOLVE || fn == F_REALPATH || fn == F_EXPAND || fn == F_SOPEN;
}

/* zend_stream_open's return if this probe of `fn` at user stack pointer `sp` shows it */
static __always_inline void sopen_seen(struct tstate *s, __u32 pid, __u8 fn, __u64 sp,
                                       __u64 now)
{
	if (!s->so_sp)
		return;
	if (in_sopen(fn))
		sopen_check(s, pid, sp, now);
	else
		sopen_close(s, pid);
}

/* has2: the function has a second string (printed even when NULL, as the bpftrace program does) */
static __always_inline int op_enter(struct pt_regs *ctx, __u8 fn, __s64 num, __u64 s1,
                                    int has2, __u64 s2)
{
	__u32 pid = tgid();
	struct tstate *s = traced();
	if (!s)
		return 0;
	if (!recording(pid)) {
		__sync_fetch_and_add(&unrecorded_hits, 1);
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	__u64 sp = PT_REGS_SP(ctx);
	sopen_seen(s, pid, fn, sp, now);
	inc_drain(s, pid, now);
	struct rec *r = new_rec();
	if (!r)
		return 0;
	r->tag = T_O; r->kind = fn; r->pid = pid; r->ts = now; r->a = (__u64)num;
	emit_str(r, s1);
	if (fn == F_SOPEN) {
		/* its return address is at the stack pointer; one opened inside another one's
		 * frame (not seen in PHP 8.2) returns at once */
		__u64 ret = 0;
		if (!s->so_sp && !bpf_probe_read_user(&ret, sizeof(ret), (const void *)sp)) {
			s->so_sp = sp; s->so_ret = ret; s->so_last = now;
		} else {
			emit_small(T_R, F_SOPEN, pid, now, 0);
		}
	}
	if (has2) {
		r = new_rec();
		if (!r)
			return 0;
		r->tag = T_P; r->kind = fn; r->pid = pid; r->ts = now;
		emit_str(r, s2);
	}
	return 0;
}

static __always_inline int op_return(struct pt_regs *ctx, __u8 fn)
{
	__u32 pid = tgid();
	struct tstate *s = traced();
	if (s && recording(pid)) {
		__u64 now = bpf_ktime_get_ns();
		sopen_seen(s, pid, fn, PT_REGS_SP(ctx), now);
		inc_drain(s, pid, now);
		emit_small(T_R, fn, pid, now, 0);
	}
	return 0;
}

/* a zend_string's characters: 24 bytes into it */
#define ZSTR(p) ((p) ? (__u64)(p) + 24 : 0)

SEC("uprobe")
int BPF_KPROBE(resolve_path, void *name, long len, void *include_path)
{ return op_enter(ctx, F_RESOLVE, len, (__u64)name, 1, (__u64)include_path); }

SEC("uprobe")
int BPF_KPROBE(compile_filename, long type, void *name)
{
	__u64 str = (__u64)name;
	if (old_args && (!name || bpf_probe_read_user(&str, sizeof(str), name)))
		str = 0;  /* a zval: its string */
	return op_enter(ctx, F_COMPILE, type, ZSTR(str), 0, 0);
}

SEC("uprobe")
int BPF_KPROBE(stream_open, void *handle)
{
	__u64 name = 0;
	if (old_args)  /* (const char *filename, zend_file_handle *handle) */
		return op_enter(ctx, F_SOPEN, 0, (__u64)handle, 0, 0);
	if (handle)
		bpf_probe_read_user(&name, sizeof(name), handle + fh_filename);
	return op_enter(ctx, F_SOPEN, 0, ZSTR(name), 0, 0);
}

SEC("uprobe")
int BPF_KPROBE(php_stat, void *name, long type, long type_old)
{
	if (old_args)  /* (const char *filename, size_t len, int type, zval *return_value) */
		return op_enter(ctx, F_STAT, type_old, (__u64)name, 0, 0);
	return op_enter(ctx, F_STAT, type, ZSTR(name), 0, 0);
}

SEC("uprobe")
int BPF_KPROBE(user_ini, void *dir, void *filename)
{ return op_enter(ctx, F_UINI, 0, (__u64)dir, 1, (__u64)filename); }

SEC("uprobe")
int BPF_KPROBE(tsrm_realpath, void *path)
{ return op_enter(ctx, F_REALPATH, 0, (__u64)path, 0, 0); }

SEC("uprobe")
int BPF_KPROBE(clear_stat_cache, long clear_realpath, void *filename)
{ return op_enter(ctx, F_CLEAR, clear_realpath, (__u64)filename, 0, 0); }

SEC("uprobe")
int BPF_KPROBE(expand_filepath, void *path, void *real, void *a2, long a3, long mode)
{ return op_enter(ctx, F_EXPAND, mode, (__u64)path, 0, 0); }

/* include_path changed (set_include_path(), ini_set(), its restore at the request's end):
 * the handler of string settings that must not be empty, called with the ini entry (its
 * name first) and the stage. Not zend_alter_ini_entry_ex, which every ini_set() and
 * ignore_user_abort() goes through. */
#if defined(__TARGET_ARCH_x86)
#define PARM6(ctx) ((ctx)->r9)
#elif defined(__TARGET_ARCH_arm64)
#define PARM6(ctx) ((ctx)->regs[5])
#endif
SEC("uprobe")
int BPF_KPROBE(alter_ini, void **entry)
{
	long stage = (long)PARM6(ctx);
	__u64 name = 0;
	if (entry)
		bpf_probe_read_user(&name, sizeof(name), entry);
	return op_enter(ctx, F_INI, stage, ZSTR(name), 0, 0);
}

#define RET(name, fn) SEC("uretprobe") int BPF_KRETPROBE(name##_ret) { return op_return(ctx, fn); }
RET(resolve_path, F_RESOLVE)
RET(compile_filename, F_COMPILE)
RET(php_stat, F_STAT)
RET(user_ini, F_UINI)
RET(tsrm_realpath, F_REALPATH)
RET(clear_stat_cache, F_CLEAR)
RET(expand_filepath, F_EXPAND)
RET(alter_ini, F_INI)
