// SPDX-License-Identifier: GPL-2.0
/* The sampler of window.h. States: idle (no worker armed; probes of the last window may
 * still be detaching) → armed (one worker's probes attached, its new requests recorded) →
 * draining (disarmed; its recorded request in flight, if any, ends) → idle, its probes
 * detached in the background (probes.h: all at once). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <bpf/bpf.h>
#include "probes.h"
#include "window.h"

#define WLINKS 64
#define MAX_WORKERS 4096
#define MIN_WINDOW_S 1.0   /* a window stays open at least this long once it recorded */
#define IDLE_WINDOW_S 2.0  /* a worker that started no request in this long is passed over */
#define DRAIN_MAX_S 30.0   /* a recorded request is waited for at most this long */

enum { W_IDLE, W_ARMED, W_DRAIN };

struct sampler {
	const struct probe *probes;
	int nprobes;
	const char *const *bins;
	int nbins;
	int targets_fd, armed_fd;
	unsigned int one_in;
	int state;
	unsigned int pid, last_pid;
	struct ulink links[WLINKS];
	int nlinks;
	double since;
	unsigned long long recorded_in_window, windows, seen_at_arm;
	int inflight, started;
	pthread_t detacher;
	int detaching, detached;
	struct ulink dlinks[WLINKS];
	int ndlinks;
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

struct sampler *sampler_new(const struct probe *probes, int nprobes, const char *const *bins,
                            int nbins, int targets_fd, int armed_fd, unsigned int one_in)
{
	struct sampler *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->probes = probes; s->nprobes = nprobes; s->bins = bins; s->nbins = nbins;
	s->targets_fd = targets_fd; s->armed_fd = armed_fd; s->one_in = one_in;
	return s;
}

unsigned long long sampler_windows(const struct sampler *s) { return s->windows; }

void sampler_record(struct sampler *s, unsigned char tag, unsigned int pid)
{
	if (s->state == W_IDLE || pid != s->pid)
		return;
	if (tag == 'A' || tag == 'U') {
		s->inflight = 1;  /* a recorded request started */
		s->started = 1;
	} else if (tag == 'Q' || tag == 'E') {
		if (tag == 'Q' && s->inflight)
			s->recorded_in_window++;
		s->inflight = 0;
	}
}

static void *detach_all(void *arg)
{
	struct sampler *s = arg;
	destroy_links(s->dlinks, s->ndlinks);
	s->ndlinks = 0;
	__atomic_store_n(&s->detached, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* hand the window's links to a detaching thread (or detach them here when `wait`) */
static void detach(struct sampler *s, int wait)
{
	memcpy(s->dlinks, s->links, sizeof(s->links[0]) * s->nlinks);
	s->ndlinks = s->nlinks;
	s->nlinks = 0;
	s->detached = 0;
	if (wait || pthread_create(&s->detacher, NULL, detach_all, s) != 0) {
		detach_all(s);
		return;
	}
	s->detaching = 1;
}

static int detach_done(struct sampler *s, int wait)
{
	if (!s->detaching)
		return 1;
	if (!wait && !__atomic_load_n(&s->detached, __ATOMIC_ACQUIRE))
		return 0;
	pthread_join(s->detacher, NULL);
	s->detaching = 0;
	return 1;
}

/* the traced worker after `last` (workers: the targets map's entries of value 1) */
static unsigned int next_worker(struct sampler *s, unsigned int last)
{
	unsigned int key, next, best = 0, first = 0;
	unsigned char v;
	int more = bpf_map_get_next_key(s->targets_fd, NULL, &key) == 0;
	for (int n = 0; more && n < MAX_WORKERS; n++) {
		if (bpf_map_lookup_elem(s->targets_fd, &key, &v) == 0 && v == 1 &&
		    kill((pid_t)key, 0) == 0) {
			if (!first || key < first)
				first = key;
			if (key > last && (!best || key < best))
				best = key;
		}
		more = bpf_map_get_next_key(s->targets_fd, &key, &next) == 0;
		key = next;
	}
	return best ? best : first;
}

static int arm(struct sampler *s, unsigned int pid, unsigned long long seen)
{
	for (int b = 0; b < s->nbins; b++)
		for (int i = 0; i < s->nprobes && s->nlinks < WLINKS; i++) {
			struct ulink l;
			if (uprobe_attach(&l, s->probes[i].prog, s->bins[b], s->probes[i].func,
			                  s->probes[i].ret, (int)pid, 0)) {
				detach(s, 0);  /* the worker is gone: try another one next time */
				return -1;
			}
			s->links[s->nlinks++] = l;
		}
	unsigned char one = 1;
	if (bpf_map_update_elem(s->armed_fd, &pid, &one, BPF_ANY)) {
		detach(s, 0);
		return -1;
	}
	s->pid = pid;
	s->state = W_ARMED;
	s->since = now_s();
	s->recorded_in_window = 0;
	s->seen_at_arm = seen;
	s->inflight = s->started = 0;
	s->windows++;
	return 0;
}

static void disarm(struct sampler *s)
{
	bpf_map_delete_elem(s->armed_fd, &s->pid);
	s->state = W_DRAIN;
	s->since = now_s();
}

void sampler_tick(struct sampler *s, unsigned long long recorded, unsigned long long counted)
{
	unsigned long long seen = recorded + counted;
	double open = now_s() - s->since;
	switch (s->state) {
	case W_IDLE:
		if (!detach_done(s, 0))
			return;
		if (s->windows > 0 && recorded * s->one_in >= seen)
			return;  /* on or ahead of one in N: wait for more requests */
		unsigned int pid = next_worker(s, s->last_pid);
		if (!pid)
			return;
		s->last_pid = pid;
		arm(s, pid, seen);
		return;
	case W_ARMED:
		/* caught up with one in N (a request in flight ends while draining), or a
		 * worker that gets no request while others do, or one that is gone */
		if ((open >= MIN_WINDOW_S && s->recorded_in_window > 0 &&
		     recorded * s->one_in >= seen) ||
		    (open >= IDLE_WINDOW_S && !s->started && seen > s->seen_at_arm) ||
		    kill((pid_t)s->pid, 0) != 0)
			disarm(s);
		return;
	case W_DRAIN:
		if (!s->inflight || open >= DRAIN_MAX_S || kill((pid_t)s->pid, 0) != 0) {
			detach(s, 0);
			s->state = W_IDLE;
		}
		return;
	}
}

void sampler_stop(struct sampler *s)
{
	if (s->state != W_IDLE)
		bpf_map_delete_elem(s->armed_fd, &s->pid);
	detach_done(s, 1);
	if (s->nlinks)
		detach(s, 1);
	s->state = W_IDLE;
}
