/*
 * bundle_test.c — the bundle reader on in-memory archives built with
 * lr_bundle_archive: what verifies, what is refused and with which message.
 */
#include "../../host/host.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

#define MAIN "print(require('lib.util').x)\n"
#define UTIL "return { x = 1 }\n"

/* A manifest for files (path, data pairs, NULL-terminated), with extra top-level JSON. */
static char *manifest(const char *const *files, const char *extra)
{
	struct lr_buf b;
	lr_buf_init(&b, 1 << 20);
	lr_buf_printf(&b, "{\"format\":1,\"name\":\"t\",\"version\":\"1.0.0\",%s\"luarig\":\"0.1.0\",\"files\":[",
		      extra ? extra : "\"entry\":\"main\",");
	for (size_t i = 0; files[i]; i += 2) {
		char hex[65];
		lr_sha256_hex(files[i + 1], strlen(files[i + 1]), hex);
		lr_buf_printf(&b, "%s{\"path\":\"%s\",\"size\":%zu,\"sha256\":\"%s\"}", i ? "," : "",
			      files[i], strlen(files[i + 1]), hex);
	}
	lr_buf_addstr(&b, "]}");
	size_t n;
	return lr_buf_take(&b, &n);
}

/* Archives rig.json (unless man is NULL), then the files, then the extra entries. */
static void archive(struct lr_buf *out, const char *man, const char *const *files,
		    const struct lr_bundle_entry *extra, size_t nextra)
{
	struct lr_bundle_entry e[32];
	size_t n = 0;
	if (man)
		e[n++] = (struct lr_bundle_entry){ .path = "rig.json", .data = man, .size = strlen(man) };
	for (size_t i = 0; files[i]; i += 2)
		e[n++] = (struct lr_bundle_entry){ .path = files[i], .data = files[i + 1],
						   .size = strlen(files[i + 1]) };
	for (size_t i = 0; i < nextra; i++)
		e[n++] = extra[i];
	struct lr_err err;
	lr_buf_init(out, 64 << 20);
	int rc = lr_bundle_archive(e, n, out, &err);
	CHECK_EQ_INT(rc, 0);
}

static const char *const app[] = { "lib/util.lua", UTIL, "main.lua", MAIN, NULL };

/* Reads buf with lim (NULL: defaults); returns rc and copies the message. */
static int read_it(struct lr_buf *buf, const struct lr_bundle_limits *lim, struct lr_err *err)
{
	struct lr_bundle_limits l;
	if (!lim) {
		lr_bundle_limits_default(&l);
		l.version = "0.1.0";
		lim = &l;
	}
	struct lr_bundle *b = NULL;
	lr_err_clear(err);
	int rc = lr_bundle_read(buf->data, buf->len, lim, &b, err);
	CHECK(rc == 0 ? b != NULL : b == NULL);
	lr_bundle_free(b);
	return rc;
}

static void expect_refused(const char *const *files, const char *extra_json,
			   const struct lr_bundle_entry *extra, size_t nextra, const char *msg)
{
	char *man = manifest(files, extra_json);
	struct lr_buf buf;
	archive(&buf, man, app, extra, nextra);
	struct lr_err err;
	CHECK_EQ_INT(read_it(&buf, NULL, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, msg);
	lr_buf_release(&buf);
	free(man);
}

TEST(reads_a_good_bundle)
{
	char *man = manifest(app, NULL);
	struct lr_buf buf;
	archive(&buf, man, app, NULL, 0);
	struct lr_bundle_limits lim;
	lr_bundle_limits_default(&lim);
	lim.version = "0.1.0";
	struct lr_bundle *b;
	struct lr_err err;
	CHECK_EQ_INT(lr_bundle_read(buf.data, buf.len, &lim, &b, &err), 0);
	CHECK_EQ_STR(b->name, "t");
	CHECK_EQ_STR(b->entry, "main");
	CHECK_EQ_INT(b->nfiles, 2);
	const struct lr_bundle_file *f = lr_bundle_module(b, "lib.util");
	CHECK(f && f->size == strlen(UTIL) && memcmp(f->data, UTIL, f->size) == 0);
	CHECK(lr_bundle_module(b, "main") != NULL);
	CHECK(lr_bundle_module(b, "nothere") == NULL);
	CHECK(lr_bundle_find(b, "main.lua") != NULL);
	lr_bundle_free(b);
	lr_buf_release(&buf);
	free(man);
}

TEST(refuses_unsafe_names)
{
	struct lr_bundle_entry e = { .path = "../evil.lua", .data = "x", .size = 1 };
	expect_refused(app, NULL, &e, 1, "entry '../evil.lua' escapes the bundle");
	e.path = "/abs.lua";
	expect_refused(app, NULL, &e, 1, "entry '/abs.lua' escapes the bundle");
	e.path = "a/../../b.lua";
	expect_refused(app, NULL, &e, 1, "entry 'a/../../b.lua' escapes the bundle");
	e.path = "a/./b.lua";
	expect_refused(app, NULL, &e, 1, "entry 'a/./b.lua' has an invalid path");
	e.path = "a\\b.lua";
	expect_refused(app, NULL, &e, 1, "entry 'a\\b.lua' has an invalid path");
	e.path = "a\tb.lua";
	expect_refused(app, NULL, &e, 1, "entry 'a\\x09b.lua' has an invalid path");
}

TEST(refuses_links_and_devices)
{
	struct lr_bundle_entry e = { .path = "l.lua", .type = LR_BUNDLE_SYMLINK, .link = "/etc/passwd" };
	expect_refused(app, NULL, &e, 1, "entry 'l.lua' is a symbolic link");
	e.type = LR_BUNDLE_HARDLINK;
	e.link = "main.lua";
	expect_refused(app, NULL, &e, 1, "entry 'l.lua' is a hard link");
	e.type = LR_BUNDLE_CHR;
	expect_refused(app, NULL, &e, 1, "entry 'l.lua' is a device");
	e.type = LR_BUNDLE_FIFO;
	expect_refused(app, NULL, &e, 1, "entry 'l.lua' is a fifo");
}

TEST(directories_are_ignored)
{
	char *man = manifest(app, NULL);
	struct lr_bundle_entry d = { .path = "lib/", .type = LR_BUNDLE_DIR };
	struct lr_buf buf;
	archive(&buf, man, app, &d, 1);
	struct lr_err err;
	CHECK_EQ_INT(read_it(&buf, NULL, &err), 0);
	lr_buf_release(&buf);
	free(man);
}

TEST(matches_the_manifest)
{
	struct lr_bundle_entry e = { .path = "main.lua", .data = MAIN, .size = strlen(MAIN) };
	expect_refused(app, NULL, &e, 1, "entry 'main.lua' appears twice");
	e.path = "other.lua";
	expect_refused(app, NULL, &e, 1, "entry 'other.lua' is not in the manifest");
	e.path = "rig.json";
	expect_refused(app, NULL, &e, 1, "entry 'rig.json' appears twice");
	const char *const more[] = { "lib/util.lua", UTIL, "main.lua", MAIN, "z.lua", "x", NULL };
	expect_refused(more, NULL, NULL, 0,
		       "entry 'z.lua' is in the manifest but missing from the archive");
	const char *const other[] = { "lib/util.lua", "return { x = 2 }\n", "main.lua", MAIN, NULL };
	expect_refused(other, NULL, NULL, 0, "entry 'lib/util.lua' fails its SHA-256 check");
	const char *const longer[] = { "lib/util.lua", UTIL " ", "main.lua", MAIN, NULL };
	expect_refused(longer, NULL, NULL, 0, "entry 'lib/util.lua' is 17 bytes, the manifest says 18");
}

TEST(checks_the_manifest)
{
	expect_refused(app, "\"entry\":\"nope\",", NULL, 0, "entry module 'nope' is not in the bundle");
	expect_refused(app, "", NULL, 0, "manifest 'rig.json' lacks the field 'entry'");
	expect_refused(app, "\"entry\":\"main\",\"extra\":1,", NULL, 0,
		       "manifest 'rig.json' has an unknown field 'extra'");
	expect_refused(app, "\"entry\":7,", NULL, 0, "manifest 'rig.json': field 'entry' must be a string");

	struct lr_buf buf;
	archive(&buf, "{\"format\":2}", app, NULL, 0);
	struct lr_err err;
	CHECK_EQ_INT(read_it(&buf, NULL, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "manifest 'rig.json' has format 2, this luarig reads format 1");
	lr_buf_release(&buf);

	archive(&buf, "{\"format\":1,", app, NULL, 0);
	CHECK_EQ_INT(read_it(&buf, NULL, &err), LR_EREFUSED);
	CHECK(strncmp(err.msg, "manifest 'rig.json' is not valid JSON", 37) == 0);
	lr_buf_release(&buf);

	archive(&buf, NULL, app, NULL, 0);
	CHECK_EQ_INT(read_it(&buf, NULL, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "entry 'lib/util.lua' comes before the manifest 'rig.json'");
	lr_buf_release(&buf);

	const char *const none[] = { NULL };
	archive(&buf, NULL, none, NULL, 0);
	CHECK_EQ_INT(read_it(&buf, NULL, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "the archive has no manifest 'rig.json'");
	lr_buf_release(&buf);

	char *man = manifest(app, NULL);
	char *p = strstr(man, "0.1.0");
	memcpy(p, "0.2.0", 5);
	archive(&buf, man, app, NULL, 0);
	CHECK_EQ_INT(read_it(&buf, NULL, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "manifest 'rig.json' needs luarig 0.2.0 or newer, this is 0.1.0");
	lr_buf_release(&buf);
	free(man);
}

TEST(refuses_bytecode)
{
	const char *const bc[] = { "lib/util.lua", "\x1bLuaT junk", "main.lua", MAIN, NULL };
	char *man = manifest(bc, NULL);
	struct lr_buf buf;
	archive(&buf, man, bc, NULL, 0);
	struct lr_err err;
	CHECK_EQ_INT(read_it(&buf, NULL, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "entry 'lib/util.lua' is precompiled Lua bytecode");
	lr_buf_release(&buf);
	free(man);
}

TEST(enforces_caps_and_ratio)
{
	/* 600 KiB of one letter: a ratio far over 100:1 past the 64 KiB threshold. */
	size_t n = 600 << 10;
	char *big = malloc(n + 1);
	memset(big, 'a', n);
	big[n] = '\0';
	const char *const files[] = { "big.txt", big, "lib/util.lua", UTIL, "main.lua", MAIN, NULL };
	char *man = manifest(files, NULL);
	struct lr_buf buf;
	archive(&buf, man, files, NULL, 0);
	struct lr_bundle_limits lim;
	lr_bundle_limits_default(&lim);
	struct lr_err err;
	CHECK_EQ_INT(read_it(&buf, &lim, &err), 0); /* under the 1 MiB threshold */
	lim.ratio_after = 64 << 10;
	CHECK_EQ_INT(read_it(&buf, &lim, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "entry 'big.txt' is a compression-ratio bomb (over 100:1)");
	lr_bundle_limits_default(&lim);
	lim.max_entry = 512 << 10;
	CHECK_EQ_INT(read_it(&buf, &lim, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "entry 'big.txt' in the manifest is over the 512 KiB entry cap");
	lr_bundle_limits_default(&lim);
	lim.max_total = 600 << 10;
	CHECK_EQ_INT(read_it(&buf, &lim, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "entry 'big.txt' takes the bundle over the 600 KiB total cap"); /* rig.json counts too */
	lr_bundle_limits_default(&lim);
	lim.max_entries = 3;
	CHECK_EQ_INT(read_it(&buf, &lim, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "manifest 'rig.json' lists 3 files, over the 3 entry cap");
	lr_buf_release(&buf);
	free(man);
	free(big);
}

TEST(refuses_garbage)
{
	struct lr_buf buf;
	lr_buf_init(&buf, 1024);
	lr_buf_addstr(&buf, "definitely not a tar archive, not gzip either......................");
	struct lr_err err;
	CHECK_EQ_INT(read_it(&buf, NULL, &err), LR_EREFUSED);
	CHECK(strncmp(err.msg, "not a bundle (gzip tar)", 23) == 0);
	lr_buf_reset(&buf);
	CHECK_EQ_INT(read_it(&buf, NULL, &err), LR_EREFUSED);
	lr_buf_release(&buf);

	/* A truncated good bundle. */
	char *man = manifest(app, NULL);
	archive(&buf, man, app, NULL, 0);
	buf.len /= 2;
	CHECK_EQ_INT(read_it(&buf, NULL, &err), LR_EREFUSED);
	lr_buf_release(&buf);
	free(man);
}

TEST(compares_versions)
{
	int ok;
	CHECK_EQ_INT(lr_bundle_vercmp("0.1.0", "0.1.0", &ok), 0);
	CHECK(ok);
	CHECK_EQ_INT(lr_bundle_vercmp("0.2.0", "0.10.0", &ok), -1);
	CHECK_EQ_INT(lr_bundle_vercmp("1.0.0", "0.99.99", &ok), 1);
	CHECK_EQ_INT(lr_bundle_vercmp("1.0.0-rc.1", "1.0.0", &ok), -1);
	CHECK_EQ_INT(lr_bundle_vercmp("1.0.0+build", "1.0.0", &ok), 0);
	lr_bundle_vercmp("1.0", "1.0.0", &ok);
	CHECK(!ok);
	lr_bundle_vercmp("01.0.0", "1.0.0", &ok);
	CHECK(!ok);
	lr_bundle_vercmp("1.0.0-", "1.0.0", &ok);
	CHECK(!ok);
}

int main(void)
{
	RUN(reads_a_good_bundle);
	RUN(refuses_unsafe_names);
	RUN(refuses_links_and_devices);
	RUN(directories_are_ignored);
	RUN(matches_the_manifest);
	RUN(checks_the_manifest);
	RUN(refuses_bytecode);
	RUN(enforces_caps_and_ratio);
	RUN(refuses_garbage);
	RUN(compares_versions);
	return test_summary();
}
