/*
 * vec.c — growing an array by doubling, and NULL-terminated string vectors.
 */
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lr_grow(void **arr, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 8;
	while (nc <= n)
		nc *= 2;
	if (nc > SIZE_MAX / size)
		return -ENOMEM;
	void *p = realloc(*arr, nc * size);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = nc;
	return 0;
}

int lr_strv_add(struct lr_strv *sv, char *owned)
{
	if (!owned)
		return -ENOMEM;
	/* n + 1 entries and the NULL after them */
	if (lr_grow((void **)&sv->v, &sv->cap, sv->n + 1, sizeof *sv->v) < 0) {
		free(owned);
		return -ENOMEM;
	}
	sv->v[sv->n++] = owned;
	sv->v[sv->n] = NULL;
	return 0;
}

void lr_strv_release(struct lr_strv *sv)
{
	for (size_t i = 0; i < sv->n; i++)
		free(sv->v[i]);
	free(sv->v);
	memset(sv, 0, sizeof *sv);
}

char *lr_asprintf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}
