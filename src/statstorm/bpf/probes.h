// SPDX-License-Identifier: GPL-2.0
/* statstorm-trace's probes: attached as links and detached all at once.
 *
 * Detaching a uprobe made as a perf event costs the kernel a grace period under one global
 * lock (about 0.1 s each, one after the other: seconds for a trace's probes). Where the
 * kernel has uprobe_multi links (Linux 6.6), the loader's uprobes are made as those
 * instead, which detach without that lock, so a trace's links all detach in about one grace
 * period (destroy_links); elsewhere they are perf events as libbpf makes them. */
#ifndef STATSTORM_PROBES_H
#define STATSTORM_PROBES_H

#include <bpf/libbpf.h>

/* a link: libbpf's, or the file descriptor of a uprobe_multi link (link NULL) */
struct ulink { struct bpf_link *link; int fd; };

/* Before the programs are loaded: find out once whether uprobe_multi links can be made
 * (unless STATSTORM_BPF_UPROBE_MULTI=0), and if so load every uprobe program of `obj`
 * (sections uprobe/ and uretprobe/; usdt ones stay perf events) for them. Returns 1 if so. */
int uprobes_prepare(struct bpf_object *obj);
/* `prog` at the entry (or return: `ret`) of `func` in `bin`, for the process `pid` (-1:
 * every process mapping it), with `cookie`; 0, or -1 with errno set */
int uprobe_attach(struct ulink *out, struct bpf_program *prog, const char *bin,
                  const char *func, int ret, int pid, unsigned long long cookie);
/* destroy `n` links at once: by one thread each (at most 256 threads), so that the kernel's
 * grace periods overlap; returns when all are gone */
void destroy_links(struct ulink *links, int n);

#endif
