// SPDX-License-Identifier: GPL-2.0
/* statstorm-trace's sampler: about one request in N recorded in full, by windows.
 *
 * A uprobe traps every process that maps the probed binary, recorded request or not, and a
 * trap is the largest part of full tracing's cost. So, when sampling, the PHP function probes
 * are not attached to the binary for every process: they are attached to one worker at a
 * time (a uprobe with a PID is installed in that process alone), that worker is armed (the
 * kernel side records the requests it starts while armed, whole), and once the recorded
 * requests are about one in N of all requests seen, it is disarmed and its probes detached.
 * The syscall tracepoints and the once-per-request probes stay attached to all: every
 * request is counted. */
#ifndef STATSTORM_WINDOW_H
#define STATSTORM_WINDOW_H

#include <bpf/libbpf.h>

struct probe { struct bpf_program *prog; const char *func; int ret; };
struct sampler;

struct sampler *sampler_new(const struct probe *probes, int nprobes, const char *const *bins,
                            int nbins, int targets_fd, int armed_fd, unsigned int one_in);
/* a record the loader read: follows the armed worker's recorded request */
void sampler_record(struct sampler *s, unsigned char tag, unsigned int pid);
/* once per loop: recorded = requests recorded so far, counted = requests counted so far */
void sampler_tick(struct sampler *s, unsigned long long recorded, unsigned long long counted);
/* disarm and detach everything (waits for the kernel) */
void sampler_stop(struct sampler *s);
unsigned long long sampler_windows(const struct sampler *s);

#endif
