// SPDX-License-Identifier: GPL-2.0
/* statstorm-trace's probes (probes.h): uprobe_multi links made by the bpf syscall itself
 * (libbpf 1.1, Debian 12's, predates them), a function's file offset from the binary's
 * symbols, and links destroyed in parallel. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include "php_table.h"
#include "probes.h"

/* the kernel's numbers (uapi/linux/bpf.h of Linux 6.6), absent from older headers */
#define CMD_LINK_CREATE 28
#define ATTACH_UPROBE_MULTI 48
#define UPROBE_MULTI_RETURN 1u

/* bpf_attr's link_create with its uprobe_multi member, as the kernel lays it out */
struct link_create_uprobe_multi {
	__u32 prog_fd, target_fd, attach_type, flags;
	__u64 path, offsets, ref_ctr_offsets, cookies;
	__u32 cnt, multi_flags, pid;
	__u32 pad;
};

static int use_multi;

static int link_create_multi(int prog_fd, const char *path, unsigned long long offset,
                             unsigned long long cookie, int ret, int pid)
{
	struct link_create_uprobe_multi a;
	memset(&a, 0, sizeof(a));
	a.prog_fd = (__u32)prog_fd;
	a.attach_type = ATTACH_UPROBE_MULTI;
	a.path = (__u64)(unsigned long)path;
	a.offsets = (__u64)(unsigned long)&offset;
	a.cookies = (__u64)(unsigned long)&cookie;
	a.cnt = 1;
	a.multi_flags = ret ? UPROBE_MULTI_RETURN : 0;
	a.pid = pid > 0 ? (__u32)pid : 0;
	return (int)syscall(__NR_bpf, CMD_LINK_CREATE, &a, sizeof(a));
}

/* a kernel with uprobe_multi links takes a program loaded for them and fails a link on "/"
 * (not a regular file) with EBADF; one without refuses the program or the attach type */
static int multi_supported(void)
{
	struct bpf_insn ret0[] = {
		{.code = 0xb7, .dst_reg = 0, .imm = 0},  /* r0 = 0 */
		{.code = 0x95},                           /* exit */
	};
	LIBBPF_OPTS(bpf_prog_load_opts, o, .expected_attach_type = ATTACH_UPROBE_MULTI);
	int prog = bpf_prog_load(BPF_PROG_TYPE_KPROBE, NULL, "GPL", ret0, 2, &o);
	if (prog < 0)
		return 0;
	int fd = link_create_multi(prog, "/", 0, 0, 0, -1);
	int err = errno;
	if (fd >= 0)
		close(fd);
	close(prog);
	return fd < 0 && err == EBADF;
}

int uprobes_prepare(struct bpf_object *obj)
{
	const char *env = getenv("STATSTORM_BPF_UPROBE_MULTI");
	use_multi = !(env && !strcmp(env, "0")) && multi_supported();
	struct bpf_program *prog;
	bpf_object__for_each_program(prog, obj) {
		const char *sec = bpf_program__section_name(prog);
		if (use_multi && (!strncmp(sec, "uprobe", 6) || !strncmp(sec, "uretprobe", 9)))
			bpf_program__set_expected_attach_type(prog, ATTACH_UPROBE_MULTI);
	}
	return use_multi;
}

/* the file offset of the function `name` in the ELF file `bin` (its symbol's address in the
 * executable segment holding it), or 0 */
static unsigned long long func_offset(const char *bin, const char *name)
{
	unsigned long long addr = elf_symbol(bin, name), off = 0;
	int fd = addr ? open(bin, O_RDONLY | O_CLOEXEC) : -1;
	if (fd < 0)
		return 0;
	Elf *e = elf_version(EV_CURRENT) != EV_NONE ? elf_begin(fd, ELF_C_READ, NULL) : NULL;
	size_t nph = 0;
	if (e && elf_getphdrnum(e, &nph) == 0)
		for (size_t i = 0; i < nph; i++) {
			GElf_Phdr ph;
			if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD &&
			    (ph.p_flags & PF_X) && addr >= ph.p_vaddr && addr < ph.p_vaddr + ph.p_memsz) {
				off = addr - ph.p_vaddr + ph.p_offset;
				break;
			}
		}
	if (e)
		elf_end(e);
	close(fd);
	return off;
}

int uprobe_attach(struct ulink *out, struct bpf_program *prog, const char *bin,
                  const char *func, int ret, int pid, unsigned long long cookie)
{
	out->link = NULL;
	out->fd = -1;
	if (!use_multi) {
		LIBBPF_OPTS(bpf_uprobe_opts, uo, .func_name = func, .retprobe = ret != 0,
		            .bpf_cookie = cookie);
		out->link = bpf_program__attach_uprobe_opts(prog, pid, bin, 0, &uo);
		return out->link ? 0 : -1;
	}
	unsigned long long off = func_offset(bin, func);
	if (!off) {
		errno = ENOENT;
		return -1;
	}
	out->fd = link_create_multi(bpf_program__fd(prog), bin, off, cookie, ret, pid);
	return out->fd >= 0 ? 0 : -1;
}

static void destroy_one(struct ulink *l)
{
	if (l->link)
		bpf_link__destroy(l->link);
	else if (l->fd >= 0)
		close(l->fd);
	l->link = NULL;
	l->fd = -1;
}

#define DETACH_THREADS 256

struct stripe { struct ulink *links; int from, n, step; };

static void *destroy_stripe(void *arg)
{
	struct stripe *st = arg;
	for (int i = st->from; i < st->n; i += st->step)
		destroy_one(&st->links[i]);
	return NULL;
}

void destroy_links(struct ulink *links, int n)
{
	/* each thread destroys every step-th link from its own; a thread that cannot be
	 * started leaves its stripe to this one */
	int step = n < DETACH_THREADS ? n : DETACH_THREADS;
	pthread_t t[DETACH_THREADS];
	struct stripe st[DETACH_THREADS];
	int ok[DETACH_THREADS];
	for (int k = 0; k < step; k++) {
		st[k] = (struct stripe){links, k, n, step};
		ok[k] = step > 1 && pthread_create(&t[k], NULL, destroy_stripe, &st[k]) == 0;
	}
	for (int k = 0; k < step; k++)
		if (!ok[k])
			destroy_stripe(&st[k]);
	for (int k = 0; k < step; k++)
		if (ok[k])
			pthread_join(t[k], NULL);
}
