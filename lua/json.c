/*
 * json.c — the codec behind rig.json: JSON text straight into Lua values
 * (no intermediate tree) and Lua values back into deterministic text.
 *
 * Decoding is strict RFC 8259: no comments, trailing commas, NaN, leading
 * zeros, unescaped control characters or invalid UTF-8; numbers that
 * overflow a double are refused (they could not be encoded again).
 * Integers that fit int64 become Lua integers, other numbers floats.
 * Arrays come back marked with the array metatable, null as json.null (the
 * NULL light userdata, the same value as cjson.null).
 *
 * Encoding sorts object keys bytewise, so the same value always gives the
 * same text (golden files, cassettes). Integral floats keep a ".0" (3.0 ->
 * "3.0", 1e20 -> "1e+20") so math.type survives a round trip; other floats
 * print with the fewest of 15, 16 or 17 digits that read back equal.
 *
 * Every function gets three upvalues: 1 = the array metatable (registry
 * "rig.json.array"), 2 = the raw-text metatable ("rig.json.raw"), 3 = the
 * decoder's string cache (see push_string), 4 = the encoder's buffer.
 */
#include "internal.h"

#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_MT "rig.json.array"
#define RAW_MT "rig.json.raw"
#define SHARED_KEY "rig.json.shared" /* the registry's reference to the shared encode buffer */
#define DECODE_MAX_DEPTH 512
#define ENCODE_MAX_DEPTH 200
#define INDENT_MAX 16
/* Elements kept on the stack until the container closes, so its table is
 * created at its final size; longer containers switch to direct inserts. */
#define PENDING_PAIRS 32
#define PENDING_ITEMS 64

/* ------------------------------------------------------------------ */
/* shared                                                               */

/*
 * Length of the valid UTF-8 sequence at p (2..4), or 0. Reads at most up to
 * the first byte that is not a continuation byte, so the NUL that ends
 * every Lua string stops it.
 */
static inline int utf8_len(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	unsigned c = p[0];
	if (c < 0xC2)
		return 0;
	if (c < 0xE0)
		return (p[1] & 0xC0) == 0x80 ? 2 : 0;
	if (c < 0xF0) {
		unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
		if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80)
			return 0;
		return 3;
	}
	if (c < 0xF5) {
		unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
		if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
			return 0;
		return 4;
	}
	return 0;
}

/* A byte that may appear in a JSON string as itself (ASCII, not " or \): 0x20-0x7f less 0x22 and 0x5c. */
static const unsigned char PLAIN[256] = {
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

static inline int plain(unsigned char c)
{
	return PLAIN[c];
}

/*
 * Eight bytes at once: the high bit of each byte of the result is set for
 * a byte that is '"', '\\', a control character or non-ASCII. Borrows only
 * add false positives above a true one, so the lowest set bit is exact.
 */
static inline uint64_t special8(const char *p)
{
	const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
	uint64_t x;
	memcpy(&x, p, 8);
	uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
	return (((q - ones) & ~q) | ((b - ones) & ~b) | (x - ones * 0x20) | x) & high;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
#define FIRST_SPECIAL(m) ((size_t)__builtin_ctzll(m) >> 3)
#else
#define FIRST_SPECIAL(m) ((size_t)0)
#endif

/* ------------------------------------------------------------------ */
/* decoding                                                             */

struct dec {
	lua_State *L;
	const char *s, *end; /* the input; *end is the NUL of a Lua string */
	const char *p;       /* the cursor */
	const char *err;     /* what went wrong; NULL while fine */
	const char *at;      /* where */
	int depth;
	int mt;    /* stack index of the array metatable */
	int cache; /* stack index of the string cache, or 0 */
	int skip;  /* stack index of a set of top-level keys to leave out, or 0 */
};

static const char UNEXPECTED[] = "unexpected";

static int dec_value(struct dec *d);

static int dec_fail(struct dec *d, const char *at, const char *what)
{
	d->err = what;
	d->at = at;
	return -1;
}

static inline const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
		p++;
	return p;
}

/* Four hex digits at p into *out; stops at the first non-hex byte. */
static int hex4(const char *p, unsigned *out)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		unsigned c = (unsigned char)p[i];
		if (c >= '0' && c <= '9')
			c -= '0';
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			c = (c | 0x20) - 'a' + 10;
		else
			return -1;
		v = v << 4 | c;
	}
	*out = v;
	return 0;
}

static void add_utf8(luaL_Buffer *b, unsigned cp)
{
	char u[4];
	size_t n;
	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xC0 | cp >> 6);
		u[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xE0 | cp >> 12);
		u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		u[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		u[0] = (char)(0xF0 | cp >> 18);
		u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
		u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
		u[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	luaL_addlstring(b, u, n);
}

/* Why a string stopped at the byte p (neither plain, '"', '\\' nor UTF-8). */
static int string_fail(struct dec *d, const char *p)
{
	unsigned char c = (unsigned char)*p;
	if (p == d->end)
		return dec_fail(d, p, "unterminated string");
	if (c < 0x20)
		return dec_fail(d, p, "unescaped control character in a string");
	return dec_fail(d, p, "invalid UTF-8 in a string");
}

/*
 * The slow path of a string: escapes are decoded into a luaL_Buffer (it is
 * the top of the stack throughout). Kept apart so that the buffer's stack
 * frame does not weigh on the recursion.
 */
static int dec_string_escaped(struct dec *d, const char *start, const char *p)
{
	luaL_Buffer b;
	luaL_buffinit(d->L, &b);
	luaL_addlstring(&b, start, (size_t)(p - start));
	for (;;) {
		const char *run = p;
		for (;;) {
			if (plain((unsigned char)*p)) {
				p++;
			} else if ((unsigned char)*p >= 0x80) {
				int n = utf8_len(p);
				if (!n)
					return string_fail(d, p);
				p += n;
			} else {
				break;
			}
		}
		if (p > run)
			luaL_addlstring(&b, run, (size_t)(p - run));
		if (*p == '"')
			break;
		if (*p != '\\')
			return string_fail(d, p);
		char c;
		switch (p[1]) {
		case '"': c = '"'; break;
		case '\\': c = '\\'; break;
		case '/': c = '/'; break;
		case 'b': c = '\b'; break;
		case 'f': c = '\f'; break;
		case 'n': c = '\n'; break;
		case 'r': c = '\r'; break;
		case 't': c = '\t'; break;
		case 'u': {
			unsigned cp, lo;
			if (hex4(p + 2, &cp))
				return dec_fail(d, p, "invalid \\u escape in a string");
			p += 6;
			if (cp >= 0xD800 && cp <= 0xDBFF) {
				if (p[0] == '\\' && p[1] == 'u' && !hex4(p + 2, &lo) && lo >= 0xDC00 &&
				    lo <= 0xDFFF) {
					cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					p += 6;
				} else {
					cp = 0xFFFD; /* a lone high surrogate */
				}
			} else if (cp >= 0xDC00 && cp <= 0xDFFF) {
				cp = 0xFFFD; /* a lone low surrogate */
			}
			add_utf8(&b, cp);
			continue;
		}
		default:
			return dec_fail(d, p, "invalid escape in a string");
		}
		luaL_addchar(&b, c);
		p += 2;
	}
	luaL_pushresult(&b);
	d->p = p + 1;
	return 0;
}

/*
 * Pushes a string of the input. Lua 5.4 hashes every byte of a short
 * string to intern it, which was a fifth of decoding a streamed chunk; the
 * keys and most values (ids, model names, types) repeat from chunk to
 * chunk, so a 256-slot cache indexed by a hash of the first and last eight
 * bytes finds the interned string with one memcmp instead.
 */
static void push_string(struct dec *d, const char *s, size_t len)
{
	lua_State *L = d->L;
	if (len > 40 || !d->cache) { /* long strings are not interned */
		lua_pushlstring(L, s, len);
		return;
	}
	uint64_t a = 0, b = 0;
	if (len >= 8) {
		memcpy(&a, s, 8);
		memcpy(&b, s + len - 8, 8);
	} else if (d->end - s >= 8) {
		memcpy(&a, s, 8); /* the closing quote and more follow: mask them off */
		a &= len ? ~0ULL >> (64 - 8 * len) : 0;
	} else {
		for (size_t i = 0; i < len; i++)
			a = a << 8 | (unsigned char)s[i];
	}
	uint64_t h = (a ^ (b * 0xC2B2AE3D27D4EB4FULL) ^ len) * 0x9E3779B97F4A7C15ULL;
	lua_Integer slot = (lua_Integer)(h >> 56) + 1;
	if (lua_rawgeti(L, d->cache, slot) == LUA_TSTRING) {
		size_t n;
		const char *c = lua_tolstring(L, -1, &n);
		if (n == len && memcmp(c, s, len) == 0)
			return;
	}
	lua_pop(L, 1);
	lua_pushlstring(L, s, len);
	lua_pushvalue(L, -1);
	lua_rawseti(L, d->cache, slot);
}

/* A string at d->p ('"'): unescaped strings go straight from the input. */
static int dec_string(struct dec *d)
{
	const char *start = d->p + 1, *p = start;
	for (;;) {
		while (d->end - p >= 8) {
			uint64_t m = special8(p);
			if (m) {
				p += FIRST_SPECIAL(m);
				break;
			}
			p += 8;
		}
		unsigned char c = (unsigned char)*p;
		if (plain(c)) {
			p++;
		} else if (c == '"') {
			push_string(d, start, (size_t)(p - start));
			d->p = p + 1;
			return 0;
		} else if (c == '\\') {
			return dec_string_escaped(d, start, p);
		} else if (c >= 0x80) {
			int n = utf8_len(p);
			if (!n)
				return string_fail(d, p);
			p += n;
		} else {
			return string_fail(d, p);
		}
	}
}

static const double pow10_exact[] = {
	1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/*
 * Reads the number span [start, end) with strtod. The span is valid JSON,
 * so strtod stops exactly at its end unless the locale's decimal point is
 * not '.'; then a copy with the locale's point is read instead.
 */
static double read_double(lua_State *L, const char *start, const char *end)
{
	char *stop;
	double v = strtod(start, &stop);
	if (stop == end)
		return v;
	const char *dot = localeconv()->decimal_point;
	luaL_Buffer b;
	luaL_buffinit(L, &b);
	for (const char *p = start; p < end; p++) {
		if (*p == '.')
			luaL_addstring(&b, dot);
		else
			luaL_addchar(&b, *p);
	}
	luaL_addchar(&b, '\0');
	luaL_pushresult(&b);
	v = strtod(lua_tostring(L, -1), NULL);
	lua_pop(L, 1);
	return v;
}

#define IS_DIGIT(c) ((unsigned)((c) - '0') < 10)

/*
 * -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?  Integers are exact; a
 * float with at most 19 significant digits (mantissa <= 2^53) and a power
 * of ten within 10^±22 is one correctly rounded operation (Clinger's fast
 * path); anything else goes through strtod.
 */
static int dec_number(struct dec *d)
{
	const char *start = d->p, *p = start;
	int neg = 0, isfloat = 0, truncated = 0;
	uint64_t m = 0;
	int exp10 = 0;
	if (*p == '-') {
		neg = 1;
		p++;
	}
	if (*p == '0') {
		p++;
		if (IS_DIGIT(*p))
			return dec_fail(d, p - 1, "leading zero in a number");
	} else if (IS_DIGIT(*p)) {
		do {
			if (m <= (UINT64_MAX - 9) / 10)
				m = m * 10 + (uint64_t)(*p - '0');
			else
				truncated = 1;
			p++;
		} while (IS_DIGIT(*p));
	} else {
		return dec_fail(d, start, "invalid number");
	}
	if (*p == '.') {
		p++;
		if (!IS_DIGIT(*p))
			return dec_fail(d, p, "invalid number");
		isfloat = 1;
		do {
			if (m <= (UINT64_MAX - 9) / 10) {
				m = m * 10 + (uint64_t)(*p - '0');
				exp10--;
			} else {
				truncated = 1;
			}
			p++;
		} while (IS_DIGIT(*p));
	}
	if (*p == 'e' || *p == 'E') {
		p++;
		int eneg = 0, e = 0;
		if (*p == '+' || *p == '-')
			eneg = *p++ == '-';
		if (!IS_DIGIT(*p))
			return dec_fail(d, p, "invalid number");
		isfloat = 1;
		do {
			if (e < 100000)
				e = e * 10 + (*p - '0');
			p++;
		} while (IS_DIGIT(*p));
		exp10 += eneg ? -e : e;
	}
	d->p = p;
	if (!isfloat && !truncated) {
		if (!neg && m <= (uint64_t)LUA_MAXINTEGER) {
			lua_pushinteger(d->L, (lua_Integer)m);
			return 0;
		}
		if (neg && m <= (uint64_t)LUA_MAXINTEGER + 1) {
			lua_pushinteger(d->L, m == (uint64_t)LUA_MAXINTEGER + 1 ? LUA_MININTEGER
										 : -(lua_Integer)m);
			return 0;
		}
	}
	double v;
	if (!truncated && m <= (UINT64_C(1) << 53) && exp10 >= -22 && exp10 <= 22) {
		v = (double)m;
		v = exp10 < 0 ? v / pow10_exact[-exp10] : v * pow10_exact[exp10];
		if (neg)
			v = -v;
	} else {
		v = read_double(d->L, start, p);
		if (isinf(v))
			return dec_fail(d, start, "number out of range");
	}
	lua_pushnumber(d->L, v);
	return 0;
}

/* The pending items base+1..base+n into a new table of their size; the table replaces them. */
static void flush_array(lua_State *L, int base, int n, int extra)
{
	lua_createtable(L, n + extra, 0);
	for (int i = 1; i <= n; i++) {
		lua_pushvalue(L, base + i);
		lua_rawseti(L, -2, i);
	}
	if (n > 0) {
		lua_replace(L, base + 1);
		lua_settop(L, base + 1);
	}
}

static void flush_object(lua_State *L, int base, int n, int extra)
{
	lua_createtable(L, 0, n + extra);
	for (int i = 0; i < n; i++) {
		lua_pushvalue(L, base + 1 + 2 * i);
		lua_pushvalue(L, base + 2 + 2 * i);
		lua_rawset(L, -3);
	}
	if (n > 0) {
		lua_replace(L, base + 1);
		lua_settop(L, base + 1);
	}
}

static int dec_array(struct dec *d)
{
	lua_State *L = d->L;
	if (++d->depth > DECODE_MAX_DEPTH)
		return dec_fail(d, d->p, "nesting deeper than 512");
	if (!lua_checkstack(L, PENDING_ITEMS + 8))
		return dec_fail(d, d->p, "out of stack space");
	const char *p = skip_ws(d->p + 1);
	int base = lua_gettop(L), n = 0, direct = 0;
	if (*p != ']') {
		for (;;) {
			d->p = p;
			if (dec_value(d))
				return -1;
			n++;
			if (direct) {
				lua_rawseti(L, base + 1, n);
			} else if (n == PENDING_ITEMS) {
				flush_array(L, base, n, n);
				direct = 1;
			}
			p = skip_ws(d->p);
			if (*p == ',') {
				p = skip_ws(p + 1);
				continue;
			}
			if (*p == ']')
				break;
			return dec_fail(d, p, *p ? "expected ',' or ']' in an array" : UNEXPECTED);
		}
	}
	if (!direct)
		flush_array(L, base, n, 0);
	lua_pushvalue(L, d->mt);
	lua_setmetatable(L, -2);
	d->p = p + 1;
	d->depth--;
	return 0;
}

static int dec_object(struct dec *d)
{
	lua_State *L = d->L;
	if (++d->depth > DECODE_MAX_DEPTH)
		return dec_fail(d, d->p, "nesting deeper than 512");
	if (!lua_checkstack(L, 2 * PENDING_PAIRS + 8))
		return dec_fail(d, d->p, "out of stack space");
	const char *p = skip_ws(d->p + 1);
	int base = lua_gettop(L), n = 0, direct = 0;
	if (*p != '}') {
		for (;;) {
			if (*p != '"')
				return dec_fail(d, p, *p ? "expected a string key in an object" : UNEXPECTED);
			d->p = p;
			if (dec_string(d))
				return -1;
			p = skip_ws(d->p);
			if (*p != ':')
				return dec_fail(d, p, *p ? "expected ':' after an object key" : UNEXPECTED);
			d->p = skip_ws(p + 1);
			if (d->skip && d->depth == 1) {
				/* a key the caller does not want: parse (and check) its value, keep nothing */
				lua_pushvalue(L, -1);
				int drop = lua_rawget(L, d->skip) != LUA_TNIL;
				lua_pop(L, 1);
				if (drop) {
					if (dec_value(d))
						return -1;
					lua_pop(L, 2);
					p = skip_ws(d->p);
					if (*p == ',') {
						p = skip_ws(p + 1);
						continue;
					}
					if (*p == '}')
						break;
					return dec_fail(d, p, *p ? "expected ',' or '}' in an object" : UNEXPECTED);
				}
			}
			if (dec_value(d))
				return -1;
			n++;
			if (direct) {
				lua_rawset(L, base + 1);
			} else if (n == PENDING_PAIRS) {
				flush_object(L, base, n, n);
				direct = 1;
			}
			p = skip_ws(d->p);
			if (*p == ',') {
				p = skip_ws(p + 1);
				continue;
			}
			if (*p == '}')
				break;
			return dec_fail(d, p, *p ? "expected ',' or '}' in an object" : UNEXPECTED);
		}
	}
	if (!direct)
		flush_object(L, base, n, 0);
	d->p = p + 1;
	d->depth--;
	return 0;
}

static int dec_literal(struct dec *d, const char *word, size_t n)
{
	if ((size_t)(d->end - d->p) < n || memcmp(d->p, word, n) != 0)
		return dec_fail(d, d->p, "invalid literal");
	d->p += n;
	return 0;
}

/* One value at d->p (not whitespace); pushes it and moves d->p past it. */
static int dec_value(struct dec *d)
{
	switch (*d->p) {
	case '"':
		return dec_string(d);
	case '{':
		return dec_object(d);
	case '[':
		return dec_array(d);
	case 't':
		if (dec_literal(d, "true", 4))
			return -1;
		lua_pushboolean(d->L, 1);
		return 0;
	case 'f':
		if (dec_literal(d, "false", 5))
			return -1;
		lua_pushboolean(d->L, 0);
		return 0;
	case 'n':
		if (dec_literal(d, "null", 4))
			return -1;
		lua_pushlightuserdata(d->L, NULL);
		return 0;
	case '-':
	case '0': case '1': case '2': case '3': case '4':
	case '5': case '6': case '7': case '8': case '9':
		return dec_number(d);
	default:
		return dec_fail(d, d->p, UNEXPECTED);
	}
}

/*
 * Decodes the Lua string s (len bytes, NUL-terminated as every Lua string
 * is) and pushes the value; on failure returns -1 with d->err set and the
 * stack above its entry level left dirty (the caller resets it).
 */
static int decode_text(lua_State *L, const char *s, size_t len, int mt, int cache, int skip,
		       struct dec *d)
{
	d->cache = cache;
	d->skip = skip;
	d->L = L;
	d->s = s;
	d->end = s + len;
	d->err = NULL;
	d->at = s;
	d->depth = 0;
	d->mt = mt;
	d->p = skip_ws(s);
	if (dec_value(d))
		return -1;
	const char *p = skip_ws(d->p);
	if (p != d->end)
		return dec_fail(d, p, "unexpected data after the value");
	return 0;
}

/* "json: <what> at byte N" (N counts from 1) onto the stack. */
static void push_dec_error(lua_State *L, const struct dec *d)
{
	char what[64];
	const char *w = d->err;
	unsigned char c = (unsigned char)*d->at;
	if (w == UNEXPECTED) {
		if (d->at == d->end)
			w = "unexpected end of input";
		else if (c > 0x20 && c < 0x7F)
			snprintf(what, sizeof what, "unexpected character '%c'", c), w = what;
		else
			snprintf(what, sizeof what, "unexpected byte 0x%02x", c), w = what;
	}
	lua_pushfstring(L, "json: %s at byte %I", w, (lua_Integer)(d->at - d->s + 1));
}

/*
 * rig.core.json_decode(s [, skip]) -> value | nil, message, "parse"
 * skip: a set of keys left out of a top-level object (still checked), for
 * decoders that read a few fields of many small documents; with it, the
 * text must hold an object (anything else is a parse error).
 */
static int json_decode(lua_State *L)
{
	size_t len;
	if (lua_type(L, 1) != LUA_TSTRING)
		luaL_typeerror(L, 1, "string");
	int t = lua_type(L, 2);
	if (t != LUA_TNONE && t != LUA_TNIL && t != LUA_TTABLE)
		luaL_typeerror(L, 2, "table of keys to skip");
	const char *s = lua_tolstring(L, 1, &len);
	lua_settop(L, 2);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_pushvalue(L, lua_upvalueindex(3)); /* stack: s skip mt cache */
	struct dec d;
	int skip = lua_istable(L, 2) ? 2 : 0;
	if (skip && *skip_ws(s) != '{') {
		/* keys to leave out only make sense for an object: callers rely on getting one */
		lua_settop(L, 1);
		luaL_pushfail(L);
		lua_pushfstring(L, "json: expected an object at byte %I",
				(lua_Integer)(skip_ws(s) - s + 1));
		lua_pushstring(L, lr_errcode(LR_EPARSE));
		return 3;
	}
	if (decode_text(L, s, len, 3, 4, skip, &d) == 0)
		return 1;
	lua_settop(L, 1);
	luaL_pushfail(L);
	push_dec_error(L, &d);
	lua_pushstring(L, lr_errcode(LR_EPARSE));
	return 3;
}

/* ------------------------------------------------------------------ */
/* encoding                                                             */

struct key {
	const char *s; /* borrowed from the table being encoded, which anchors it */
	size_t len;
	int vidx; /* stack index of the value, or 0: look it up by the key */
};

/* Output and key scratch: a userdata whose __gc frees both (an error may longjmp). */
struct ebuf {
	char *data;
	size_t len, cap;
	struct key *keys;
	size_t nkeys, keycap;
	lua_Alloc alloc;
	void *ud;
	int busy; /* the shared buffer is in use (a finalizer may encode meanwhile) */
};

struct frame {
	const void *table;
	const char *key; /* the member being encoded, or NULL */
	size_t keylen;
	lua_Integer index; /* the element being encoded (from 1), or 0 */
};

struct enc {
	lua_State *L;
	struct ebuf *b;
	int amt, rmt; /* where the array and raw metatables are (stack or upvalue indexes) */
	int indent;
	int depth;
	int failed;
	char msg[400];
	struct frame path[ENCODE_MAX_DEPTH];
};

static void ebuf_free(struct ebuf *b)
{
	if (b->data)
		b->alloc(b->ud, b->data, b->cap, 0);
	if (b->keys)
		b->alloc(b->ud, b->keys, b->keycap * sizeof *b->keys, 0);
	b->data = NULL;
	b->keys = NULL;
	b->cap = b->keycap = 0;
}

static int ebuf_gc(lua_State *L)
{
	ebuf_free(lua_touserdata(L, 1));
	return 0;
}

static void *grow(lua_State *L, struct ebuf *b, void *p, size_t osize, size_t nsize)
{
	void *q = b->alloc(b->ud, p, osize, nsize);
	if (!q)
		luaL_error(L, "not enough memory");
	return q;
}

/* Room for n more bytes of output. */
static inline void reserve(struct enc *e, size_t n)
{
	struct ebuf *b = e->b;
	if (b->cap - b->len >= n)
		return;
	size_t cap = b->cap ? b->cap : 256;
	while (cap - b->len < n)
		cap *= 2;
	b->data = grow(e->L, b, b->data, b->cap, cap);
	b->cap = cap;
}

static inline void put(struct enc *e, const char *s, size_t n)
{
	reserve(e, n);
	memcpy(e->b->data + e->b->len, s, n);
	e->b->len += n;
}

static inline void putc1(struct enc *e, char c)
{
	reserve(e, 1);
	e->b->data[e->b->len++] = c;
}

static void newline(struct enc *e, int level)
{
	size_t n = (size_t)level * (size_t)e->indent;
	reserve(e, n + 1);
	char *o = e->b->data + e->b->len;
	o[0] = '\n';
	memset(o + 1, ' ', n);
	e->b->len += n + 1;
}

static void path_text(const struct enc *e, char *out, size_t cap)
{
	size_t n = 0;
	n += (size_t)snprintf(out, cap, "$");
	for (int i = 0; i < e->depth && n < cap; i++) {
		const struct frame *f = &e->path[i];
		if (f->index) {
			n += (size_t)snprintf(out + n, cap - n, "[%lld]", (long long)f->index);
			continue;
		}
		if (!f->key)
			break;
		int ident = f->keylen > 0 && !IS_DIGIT(f->key[0]);
		for (size_t j = 0; j < f->keylen && ident; j++) {
			unsigned char c = (unsigned char)f->key[j];
			ident = c == '_' || IS_DIGIT(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
		}
		int show = f->keylen > 48 ? 48 : (int)f->keylen;
		if (ident) {
			n += (size_t)snprintf(out + n, cap - n, ".%.*s%s", show, f->key,
					      show < (int)f->keylen ? "..." : "");
			continue;
		}
		n += (size_t)snprintf(out + n, cap - n, "[\"");
		for (int j = 0; j < show && n + 8 < cap; j++) {
			unsigned char c = (unsigned char)f->key[j];
			if (c == '"' || c == '\\')
				n += (size_t)snprintf(out + n, cap - n, "\\%c", c);
			else if (c < 0x20 || c == 0x7F)
				n += (size_t)snprintf(out + n, cap - n, "\\x%02x", c);
			else
				out[n++] = (char)c;
		}
		if (n < cap)
			n += (size_t)snprintf(out + n, cap - n, "%s\"]", show < (int)f->keylen ? "..." : "");
	}
	if (n >= cap)
		n = cap - 1;
	out[n] = '\0';
}

/* "json: <what> at <path>" into e->msg; returns -1. */
static int enc_fail(struct enc *e, const char *fmt, ...)
{
	char what[160], path[224];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	path_text(e, path, sizeof path);
	snprintf(e->msg, sizeof e->msg, "json: %s at %s", what, path);
	e->failed = 1;
	return -1;
}

/* The string s as a JSON string; -1 (nothing reported) on invalid UTF-8. */
static int enc_string(struct enc *e, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const char *p = s, *end = s + len;
	reserve(e, len + 2);
	e->b->data[e->b->len++] = '"';
	while (p < end) {
		const char *run = p;
		while (end - p >= 8) {
			uint64_t m = special8(p);
			if (m) {
				p += FIRST_SPECIAL(m);
				break;
			}
			p += 8;
		}
		while (p < end && plain((unsigned char)*p))
			p++;
		if (p > run)
			put(e, run, (size_t)(p - run));
		if (p == end)
			break;
		unsigned char c = (unsigned char)*p;
		if (c >= 0x80) {
			int n = utf8_len(p);
			if (!n || n > end - p)
				return -1;
			put(e, p, (size_t)n);
			p += n;
			continue;
		}
		char esc[6] = { '\\', 0, '0', '0', 0, 0 };
		size_t n = 2;
		switch (c) {
		case '"': esc[1] = '"'; break;
		case '\\': esc[1] = '\\'; break;
		case '\b': esc[1] = 'b'; break;
		case '\f': esc[1] = 'f'; break;
		case '\n': esc[1] = 'n'; break;
		case '\r': esc[1] = 'r'; break;
		case '\t': esc[1] = 't'; break;
		default:
			esc[1] = 'u';
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			n = 6;
		}
		put(e, esc, n);
		p++;
	}
	putc1(e, '"');
	return 0;
}

static void enc_integer(struct enc *e, lua_Integer v)
{
	char tmp[24];
	int i = (int)sizeof tmp;
	lua_Unsigned u = v < 0 ? 0u - (lua_Unsigned)v : (lua_Unsigned)v;
	do {
		tmp[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		tmp[--i] = '-';
	put(e, tmp + i, sizeof tmp - (size_t)i);
}

/*
 * The text the loop of enc_float below gives, without printf and strtod,
 * for a non-integral |v| in [1, 1e14) (timestamps, durations in seconds):
 * v = m / 2^k exactly, so for P = 15, 16, 17 significant digits the
 * rounded decimal q / 10^d (d = P - 1 - X, X the exponent of v) is exact
 * integer arithmetic, and whether it reads back as v is whether it lies
 * strictly inside v's rounding interval. The cases that arithmetic does not
 * settle alone (an exact tie, v at a power of two, a rounding that carries
 * into a new digit) return -1: the caller takes the printf path. The
 * digits are the same as printf's (tests/lua/json_spec.lua checks them
 * against string.format on many values). Returns the length, or -1.
 */
static int enc_float_fast(char out[40], double v)
{
#ifdef __SIZEOF_INT128__
	__extension__ typedef unsigned __int128 u128;
	double a = fabs(v);
	if (!(a >= 1.0 && a < 1e14) || a == floor(a))
		return -1;
	int ex;
	double f = frexp(a, &ex); /* a = f * 2^ex, f in [0.5, 1) */
	uint64_t m = (uint64_t)ldexp(f, 53);
	int k = 53 - ex; /* a = m / 2^k; 6 <= k <= 52 */
	if (m == (uint64_t)1 << 52)
		return -1; /* the interval below v is half as wide */
	uint64_t ip = (uint64_t)a;
	int x = 0;
	for (uint64_t t = ip; t >= 10; t /= 10)
		x++;
	u128 one = 1, mask = (one << k) - 1, half = one << (k - 1);
	for (int p = 15; p <= 17; p++) {
		int d = p - 1 - x; /* 1..16 */
		u128 p10 = 1;
		for (int i = 0; i < d; i++)
			p10 *= 10;
		u128 num = (u128)m * p10;
		u128 q = num >> k, r = num & mask;
		if (r == half)
			return -1; /* an exact tie: printf's rounding decides */
		if (r > half)
			q++;
		u128 lim = 1;
		for (int i = 0; i < p; i++)
			lim *= 10;
		if (q >= lim)
			return -1; /* carried into a new digit */
		if (p < 17) {
			u128 qk = q << k;
			u128 diff = qk > num ? qk - num : num - qk;
			if (2 * diff == p10)
				return -1; /* on the interval's edge: strtod's tie */
			if (2 * diff > p10)
				continue; /* does not read back: more digits */
		}
		char dig[20];
		int nd = 0;
		for (uint64_t t = (uint64_t)q; nd < p; t /= 10)
			dig[nd++] = (char)('0' + t % 10); /* reversed, p digits */
		int n = 0;
		if (v < 0)
			out[n++] = '-';
		for (int i = 0; i <= x; i++)
			out[n++] = dig[p - 1 - i];
		int last = 0; /* the fraction without its trailing zeros */
		for (int i = 0; i < d; i++)
			if (dig[d - 1 - i] != '0')
				last = i + 1;
		if (last) {
			out[n++] = '.';
			for (int i = 0; i < last; i++)
				out[n++] = dig[d - 1 - i];
		}
		return n;
	}
	return -1;
#else
	(void)out;
	(void)v;
	return -1;
#endif
}

static int enc_float(struct enc *e, double v)
{
	if (isnan(v))
		return enc_fail(e, "cannot encode NaN");
	if (isinf(v))
		return enc_fail(e, "cannot encode %s", v > 0 ? "inf" : "-inf");
	char out[40];
	int n = enc_float_fast(out, v);
	for (int prec = 15; n < 0 && prec <= 17; prec++) {
		int k = snprintf(out, sizeof out - 2, "%.*g", prec, v);
		if (strtod(out, NULL) == v || prec == 17)
			n = k;
	}
	int plainint = 1;
	for (int i = 0; i < n; i++) {
		if (out[i] == ',')
			out[i] = '.'; /* a locale's decimal point */
		if (!IS_DIGIT(out[i]) && out[i] != '-')
			plainint = 0;
	}
	if (plainint) {
		out[n++] = '.';
		out[n++] = '0';
	}
	put(e, out, (size_t)n);
	return 0;
}

static int enc_value(struct enc *e, int idx);

static int key_less(const struct key *a, const struct key *b)
{
	/* Most keys differ in their first byte: those need no memcmp call. */
	if (a->len && b->len && a->s[0] != b->s[0])
		return (unsigned char)a->s[0] < (unsigned char)b->s[0];
	size_t n = a->len < b->len ? a->len : b->len;
	int c = memcmp(a->s, b->s, n);
	return c < 0 || (c == 0 && a->len < b->len);
}

static int key_cmp(const void *a, const void *b)
{
	return key_less(a, b) ? -1 : key_less(b, a) ? 1 : 0;
}

static void sort_keys(struct key *k, size_t n)
{
	if (n > 16) {
		qsort(k, n, sizeof *k, key_cmp);
		return;
	}
	for (size_t i = 1; i < n; i++) {
		struct key t = k[i];
		size_t j = i;
		for (; j > 0 && key_less(&t, &k[j - 1]); j--)
			k[j] = k[j - 1];
		k[j] = t;
	}
}

enum shape { SHAPE_EMPTY, SHAPE_ARRAY, SHAPE_OBJECT, SHAPE_SPARSE, SHAPE_MIXED, SHAPE_BADKEY };

/*
 * What the table at idx is: an array (keys exactly 1..n), an object (only
 * string keys, collected into b->keys when b is given), empty, or not
 * encodable. *n receives the array length; for SHAPE_BADKEY, *badtype the
 * type of the offending key.
 */
static enum shape table_shape(lua_State *L, int idx, struct ebuf *b, lua_Unsigned *n, int *badtype)
{
	lua_Unsigned len = lua_rawlen(L, idx), ints = 0;
	size_t nstr = 0;
	int badint = 0, room = 0;
	lua_pushnil(L);
	while (lua_next(L, idx)) { /* stack: ... key value */
		int t = lua_type(L, -2);
		if (t == LUA_TSTRING) {
			if (b) {
				if (b->nkeys == b->keycap) {
					size_t cap = b->keycap ? b->keycap * 2 : 32;
					b->keys = grow(L, b, b->keys, b->keycap * sizeof *b->keys, cap * sizeof *b->keys);
					b->keycap = cap;
				}
				struct key *k = &b->keys[b->nkeys++];
				k->s = lua_tolstring(L, -2, &k->len);
				k->vidx = 0;
				/* Keep the value below the key: no second lookup (and hash) later. */
				if (room == 0 && lua_checkstack(L, 32))
					room = 30;
				if (room > 0) {
					room--;
					lua_insert(L, -2); /* stack: ... value key */
					k->vidx = lua_gettop(L) - 1;
					nstr++;
					continue;
				}
				room = -1; /* the stack is full: look the rest up by key */
			}
			nstr++;
		} else if (t == LUA_TNUMBER && lua_isinteger(L, -2)) {
			lua_Integer k = lua_tointeger(L, -2);
			if (k >= 1 && (lua_Unsigned)k <= len)
				ints++;
			else
				badint = 1;
		} else {
			lua_pop(L, 2);
			*badtype = t;
			return SHAPE_BADKEY;
		}
		lua_pop(L, 1); /* stack: ... key */
	}
	*n = len;
	if (nstr == 0) {
		if (!badint && ints == len)
			return len ? SHAPE_ARRAY : SHAPE_EMPTY;
		return SHAPE_SPARSE;
	}
	return ints || badint ? SHAPE_MIXED : SHAPE_OBJECT;
}

static int enc_table(struct enc *e, int idx)
{
	lua_State *L = e->L;
	struct ebuf *b = e->b;
	if (e->depth >= ENCODE_MAX_DEPTH)
		return enc_fail(e, "nesting deeper than %d", ENCODE_MAX_DEPTH);
	const void *self = lua_topointer(L, idx);
	for (int i = 0; i < e->depth; i++)
		if (e->path[i].table == self)
			return enc_fail(e, "cannot encode a reference cycle");
	luaL_checkstack(L, 8, "json: nesting");
	int marked = 0;
	if (lua_getmetatable(L, idx)) {
		marked = lua_rawequal(L, -1, e->amt);
		lua_pop(L, 1);
	}
	size_t kbase = b->nkeys;
	int vbase = lua_gettop(L);
	lua_Unsigned n = 0;
	int badtype = 0;
	enum shape shape = table_shape(L, idx, b, &n, &badtype);
	switch (shape) {
	case SHAPE_BADKEY:
		b->nkeys = kbase;
		return enc_fail(e, "cannot encode a table key of type %s", lua_typename(L, badtype));
	case SHAPE_SPARSE:
		return enc_fail(e, "cannot encode a sparse array");
	case SHAPE_MIXED:
		b->nkeys = kbase;
		return enc_fail(e, "cannot encode a table with both string and integer keys");
	case SHAPE_OBJECT:
		if (marked) {
			b->nkeys = kbase;
			return enc_fail(e, "cannot encode an array with string keys");
		}
		break;
	case SHAPE_EMPTY:
		put(e, marked ? "[]" : "{}", 2);
		return 0;
	case SHAPE_ARRAY:
		break;
	}

	struct frame *f = &e->path[e->depth++];
	f->table = self;
	f->key = NULL;
	f->keylen = 0;
	f->index = 0;
	if (shape == SHAPE_ARRAY) {
		putc1(e, '[');
		for (lua_Unsigned i = 1; i <= n; i++) {
			if (i > 1)
				putc1(e, ',');
			if (e->indent)
				newline(e, e->depth);
			f->index = (lua_Integer)i;
			lua_rawgeti(L, idx, (lua_Integer)i);
			if (enc_value(e, lua_gettop(L)))
				return -1;
			lua_pop(L, 1);
		}
		if (e->indent)
			newline(e, e->depth - 1);
		putc1(e, ']');
	} else {
		size_t nkeys = b->nkeys - kbase;
		sort_keys(b->keys + kbase, nkeys);
		putc1(e, '{');
		for (size_t i = 0; i < nkeys; i++) {
			struct key k = b->keys[kbase + i]; /* b->keys moves as inner tables add theirs */
			if (i > 0)
				putc1(e, ',');
			if (e->indent)
				newline(e, e->depth);
			f->key = NULL;
			if (enc_string(e, k.s, k.len))
				return enc_fail(e, "invalid UTF-8 in a key");
			if (e->indent)
				put(e, ": ", 2);
			else
				putc1(e, ':');
			f->key = k.s;
			f->keylen = k.len;
			if (k.vidx) {
				if (enc_value(e, k.vidx))
					return -1;
				continue;
			}
			lua_pushlstring(L, k.s, k.len);
			lua_rawget(L, idx);
			if (enc_value(e, lua_gettop(L)))
				return -1;
			lua_pop(L, 1);
		}
		lua_settop(L, vbase);
		if (e->indent)
			newline(e, e->depth - 1);
		putc1(e, '}');
		b->nkeys = kbase;
	}
	e->depth--;
	return 0;
}

static int enc_value(struct enc *e, int idx)
{
	lua_State *L = e->L;
	switch (lua_type(L, idx)) {
	case LUA_TNIL:
		put(e, "null", 4);
		return 0;
	case LUA_TBOOLEAN:
		if (lua_toboolean(L, idx))
			put(e, "true", 4);
		else
			put(e, "false", 5);
		return 0;
	case LUA_TNUMBER:
		if (lua_isinteger(L, idx)) {
			enc_integer(e, lua_tointeger(L, idx));
			return 0;
		}
		return enc_float(e, lua_tonumber(L, idx));
	case LUA_TSTRING: {
		size_t len;
		const char *s = lua_tolstring(L, idx, &len);
		if (enc_string(e, s, len))
			return enc_fail(e, "invalid UTF-8 in a string");
		return 0;
	}
	case LUA_TTABLE:
		return enc_table(e, idx);
	case LUA_TLIGHTUSERDATA:
		if (lua_touserdata(L, idx) == NULL) {
			put(e, "null", 4);
			return 0;
		}
		return enc_fail(e, "cannot encode a light userdata");
	case LUA_TUSERDATA: {
		if (lua_getmetatable(L, idx)) {
			int raw = lua_rawequal(L, -1, e->rmt);
			lua_pop(L, 1);
			if (raw) {
				size_t len;
				lua_getiuservalue(L, idx, 1);
				const char *s = lua_tolstring(L, -1, &len);
				put(e, s, len);
				lua_pop(L, 1);
				return 0;
			}
		}
		const char *name = NULL;
		if (luaL_getmetafield(L, idx, "__name") == LUA_TSTRING)
			name = lua_tostring(L, -1);
		/* the name stays on the stack until the caller resets it */
		if (name)
			return enc_fail(e, "cannot encode a userdata (%.64s)", name);
		return enc_fail(e, "cannot encode a userdata");
	}
	default:
		return enc_fail(e, "cannot encode a %s", luaL_typename(L, idx));
	}
}

static int check_encode_opts(lua_State *L)
{
	int indent = 0;
	if (lua_isnoneornil(L, 2))
		return 0;
	luaL_checktype(L, 2, LUA_TTABLE);
	lua_pushnil(L);
	while (lua_next(L, 2)) {
		if (lua_type(L, -2) != LUA_TSTRING || strcmp(lua_tostring(L, -2), "indent") != 0)
			luaL_error(L, "rig.json.encode: unknown option '%s'", luaL_tolstring(L, -2, NULL));
		if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0 || lua_tointeger(L, -1) > INDENT_MAX)
			luaL_error(L, "rig.json.encode: option 'indent' must be an integer from 0 to %d",
				   INDENT_MAX);
		indent = (int)lua_tointeger(L, -1);
		lua_pop(L, 1);
	}
	return indent;
}

static struct ebuf *ebuf_new(lua_State *L)
{
	struct ebuf *b = lua_newuserdatauv(L, sizeof *b, 0);
	memset(b, 0, sizeof *b);
	b->alloc = lua_getallocf(L, &b->ud);
	luaL_setmetatable(L, "rig.json.buffer");
	return b;
}

/*
 * rig.core.json_encode(v [, {indent = n}]) -> text | nil, message, "encode"
 * Output goes to one shared buffer (upvalue 4, and the registry's SHARED_KEY) kept between calls; a call
 * that finds it busy (an encode from a finalizer run by the collector, or
 * after an out-of-memory raise left it marked) uses a buffer of its own.
 */
static int json_encode(lua_State *L)
{
	int indent = check_encode_opts(L);
	lua_settop(L, 1);
	struct ebuf *b = lua_touserdata(L, lua_upvalueindex(4));
	if (b->busy)
		b = ebuf_new(L);
	b->busy = 1;
	b->len = 0;
	b->nkeys = 0;
	struct enc e; /* about 7 KiB: the path has one frame per level */
	e.L = L;
	e.b = b;
	e.amt = lua_upvalueindex(1);
	e.rmt = lua_upvalueindex(2);
	e.indent = indent;
	e.depth = 0;
	e.failed = 0;
	int rc = enc_value(&e, 1);
	lua_settop(L, 1);
	if (rc) {
		luaL_pushfail(L);
		lua_pushstring(L, e.msg);
		lua_pushliteral(L, "encode");
	} else {
		lua_pushlstring(L, b->data ? b->data : "", b->len);
	}
	if (b->cap > 65536)
		ebuf_free(b); /* do not hold on to a large document's memory */
	b->busy = 0;
	return rc ? 3 : 1;
}

/*
 * For a C caller that copies the text at once (lua/session.c's
 * emit_event): json_encode's encoding, without making the text a Lua
 * string. The shared buffer is marked busy until lr__json_encode_end, so a
 * finalizer that encodes meanwhile takes a buffer of its own.
 */
int lr__json_encode_begin(lua_State *L, int idx, struct lr__json_text *out)
{
	idx = lua_absindex(L, idx);
	out->buf = NULL;
	lua_getfield(L, LUA_REGISTRYINDEX, SHARED_KEY);
	struct ebuf *b = lua_touserdata(L, -1);
	if (!b || b->busy) {
		lua_pop(L, 1);
		b = ebuf_new(L);
	}
	int top = lua_gettop(L); /* stack: ... buffer (anchored until the caller returns) */
	b->busy = 1;
	b->len = 0;
	b->nkeys = 0;
	out->buf = b;
	luaL_getmetatable(L, ARRAY_MT);
	luaL_getmetatable(L, RAW_MT);
	struct enc e;
	e.L = L;
	e.b = b;
	e.amt = top + 1;
	e.rmt = top + 2;
	e.indent = 0;
	e.depth = 0;
	e.failed = 0;
	int rc = enc_value(&e, idx);
	lua_settop(L, top);
	if (rc) {
		lr__json_encode_end(out);
		lua_pushstring(L, e.msg);
		return -1;
	}
	out->text = b->data ? b->data : "";
	out->len = b->len;
	return 0;
}

void lr__json_encode_end(struct lr__json_text *t)
{
	struct ebuf *b = t->buf;
	if (!b)
		return;
	if (b->cap > 65536)
		ebuf_free(b); /* do not hold on to a large document's memory */
	b->busy = 0;
	t->buf = NULL;
}

/* ------------------------------------------------------------------ */
/* markers                                                              */

/* rig.core.json_raw(s) -> a marker that encodes as s verbatim; raises unless s is one JSON value */
static int json_raw(lua_State *L)
{
	size_t len;
	const char *s = luaL_checklstring(L, 1, &len);
	lua_settop(L, 1);
	lua_pushvalue(L, lua_upvalueindex(1));
	struct dec d;
	if (decode_text(L, s, len, 2, 0, 0, &d) != 0) {
		push_dec_error(L, &d);
		return luaL_error(L, "rig.json.raw: the text is not one JSON value (%s)", lua_tostring(L, -1));
	}
	lua_settop(L, 1);
	lua_newuserdatauv(L, 0, 1);
	lua_pushvalue(L, lua_upvalueindex(2));
	lua_setmetatable(L, -2);
	lua_pushvalue(L, 1);
	lua_setiuservalue(L, -2, 1);
	return 1;
}

static int raw_tostring(lua_State *L)
{
	luaL_checkudata(L, 1, RAW_MT);
	lua_getiuservalue(L, 1, 1);
	return 1;
}

/* rig.core.json_array(t) -> t, marked as an array */
static int json_array(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_settop(L, 1);
	if (lua_getmetatable(L, 1)) {
		if (!lua_rawequal(L, -1, lua_upvalueindex(1)))
			return luaL_error(L, "rig.json.array: the table already has a metatable");
		lua_pop(L, 1);
		return 1;
	}
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_setmetatable(L, 1);
	return 1;
}

/* rig.core.json_is_array(v) -> true when marked, or a table whose keys are exactly 1..n (n > 0) */
static int json_is_array(lua_State *L)
{
	if (lua_type(L, 1) != LUA_TTABLE) {
		lua_pushboolean(L, 0);
		return 1;
	}
	lua_settop(L, 1);
	if (lua_getmetatable(L, 1) && lua_rawequal(L, -1, lua_upvalueindex(1))) {
		lua_pushboolean(L, 1);
		return 1;
	}
	lua_settop(L, 1);
	lua_Unsigned n;
	int badtype;
	lua_pushboolean(L, table_shape(L, 1, NULL, &n, &badtype) == SHAPE_ARRAY);
	return 1;
}

void lr__json_open(lua_State *L)
{
	/* stack: core */
	luaL_newmetatable(L, "rig.json.buffer");
	lua_pushcfunction(L, ebuf_gc);
	lua_setfield(L, -2, "__gc");
	lua_pop(L, 1);

	static const luaL_Reg funcs[] = {
		{ "json_encode", json_encode }, { "json_decode", json_decode },
		{ "json_raw", json_raw },       { "json_array", json_array },
		{ "json_is_array", json_is_array }, { NULL, NULL },
	};
	luaL_newmetatable(L, ARRAY_MT);
	luaL_newmetatable(L, RAW_MT); /* stack: core amt rmt */
	lua_pushcfunction(L, raw_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_rotate(L, -3, 2);     /* stack: amt rmt core */
	lua_pushvalue(L, -3);
	lua_pushvalue(L, -3);
	lua_createtable(L, 256, 0);
	ebuf_new(L); /* stack: amt rmt core amt rmt cache buf */
	lua_pushvalue(L, -1);
	lua_setfield(L, LUA_REGISTRYINDEX, SHARED_KEY); /* for lr__json_encode_begin */
	luaL_setfuncs(L, funcs, 4);
	lua_pushlightuserdata(L, NULL);
	lua_setfield(L, -2, "json_null");
	lua_rotate(L, -3, 1);     /* stack: core amt rmt */
	lua_pop(L, 2);
}
