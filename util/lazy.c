/*
 * lazy.c — dlopen a heavy library on first use.
 *
 * Linking libcurl alone makes every start-up pay ~35 shared objects of
 * relocations (about 6 ms measured here against 1 ms for lua5.4 itself), so
 * the binary links only what every run needs and opens the rest on demand.
 */
#include "util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/*
 * Any thread may call lr_lazy_open: the first caller opens the library
 * under one process-wide lock (dlopen, dlerror and the slots are not
 * written twice), and publishes state with release order after the slots,
 * so a caller that sees state 1 without the lock sees every slot.
 */
static pthread_mutex_t lazy_mu = PTHREAD_MUTEX_INITIALIZER;

static int lazy_open_locked(struct lr_lazy *lz);

int lr_lazy_open(struct lr_lazy *lz)
{
	int st = __atomic_load_n(&lz->state, __ATOMIC_ACQUIRE);
	if (st == 0) {
		pthread_mutex_lock(&lazy_mu);
		st = lazy_open_locked(lz);
		pthread_mutex_unlock(&lazy_mu);
	}
	return st == 1 ? 0 : LR_EUNAVAILABLE;
}

/* The outcome as a state: 1 loaded, -1 failed (err says why). */
static int lazy_open_locked(struct lr_lazy *lz)
{
	if (lz->state != 0)
		return lz->state;
	void *h = NULL;
	const char *const *so;
	for (so = lz->sonames; *so; so++) {
		h = dlopen(*so, RTLD_NOW | RTLD_LOCAL);
		if (h)
			break;
	}
	if (!h) {
		lr_err_set(&lz->err, "cannot load '%s': %s",
			 lz->sonames[0], dlerror());
		__atomic_store_n(&lz->state, -1, __ATOMIC_RELEASE);
		return -1;
	}
	for (size_t i = 0; lz->names[i]; i++) {
		lz->slots[i] = dlsym(h, lz->names[i]);
		if (!lz->slots[i]) {
			lr_err_set(&lz->err, "'%s' lacks symbol '%s'",
				 *so, lz->names[i]);
			__atomic_store_n(&lz->state, -1, __ATOMIC_RELEASE);
			return -1;
		}
	}
	/* The handle stays open for the life of the process. */
	__atomic_store_n(&lz->state, 1, __ATOMIC_RELEASE);
	return 1;
}
