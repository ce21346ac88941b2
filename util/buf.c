/*
 * buf.c — bounded growable buffers.
 */
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lr_buf_init(struct lr_buf *b, size_t cap)
{
	b->data = NULL;
	b->len = 0;
	b->alloc = 0;
	b->cap = cap;
}

void lr_buf_release(struct lr_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->alloc = 0;
}

void lr_buf_reset(struct lr_buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

/* Makes room for n more bytes plus the terminating NUL. */
static int buf_grow(struct lr_buf *b, size_t n)
{
	if (n > b->cap || b->len > b->cap - n)
		return LR_ETOOBIG;
	size_t need = b->len + n + 1;
	if (need <= b->alloc)
		return 0;
	size_t a = b->alloc ? b->alloc : 64;
	while (a < need)
		a = a > SIZE_MAX / 2 ? need : a * 2;
	char *p = realloc(b->data, a);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->alloc = a;
	return 0;
}

int lr_buf_reserve(struct lr_buf *b, size_t n)
{
	return buf_grow(b, n);
}

int lr_buf_add(struct lr_buf *b, const void *p, size_t n)
{
	int rc = buf_grow(b, n);
	if (rc)
		return rc;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int lr_buf_addstr(struct lr_buf *b, const char *s)
{
	return lr_buf_add(b, s, strlen(s));
}

int lr_buf_printf(struct lr_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	int rc = buf_grow(b, (size_t)n);
	if (rc)
		return rc;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void lr_buf_consume(struct lr_buf *b, size_t n)
{
	if (n >= b->len) {
		lr_buf_reset(b);
		return;
	}
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
	b->data[b->len] = '\0';
}

char *lr_buf_take(struct lr_buf *b, size_t *len)
{
	char *p = b->data;
	if (len)
		*len = b->len;
	if (!p)
		p = calloc(1, 1);
	b->data = NULL;
	b->len = b->alloc = 0;
	return p;
}
