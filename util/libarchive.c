/*
 * libarchive.c — the one symbol table of libarchive (libarchive.h).
 */
#include "libarchive.h"

static const char *const sonames[] = { "libarchive.so.13", "libarchive.so", NULL };
/* In the order of struct lr_libarchive's fields. */
static const char *const names[] = {
	"archive_read_new",
	"archive_read_support_format_tar",
	"archive_read_support_filter_gzip",
	"archive_read_open_filename",
	"archive_read_open_memory",
	"archive_read_next_header",
	"archive_read_data",
	"archive_read_free",
	"archive_error_string",
	"archive_read_open",
	"archive_filter_bytes",
	"archive_entry_pathname",
	"archive_entry_filetype",
	"archive_entry_perm",
	"archive_entry_size",
	"archive_entry_size_is_set",
	"archive_entry_symlink",
	"archive_entry_hardlink",
	"archive_write_new",
	"archive_write_set_format_gnutar",
	"archive_write_open_filename",
	"archive_write_header",
	"archive_write_data",
	"archive_write_close",
	"archive_write_free",
	"archive_write_add_filter_gzip",
	"archive_write_set_format_pax_restricted",
	"archive_write_set_filter_option",
	"archive_write_set_bytes_in_last_block",
	"archive_write_open",
	"archive_entry_new",
	"archive_entry_free",
	"archive_entry_clear",
	"archive_entry_set_pathname",
	"archive_entry_set_filetype",
	"archive_entry_set_perm",
	"archive_entry_set_size",
	"archive_entry_set_symlink",
	"archive_entry_set_mtime",
	"archive_entry_set_hardlink",
	NULL
};

struct lr_libarchive lr_la;

static struct lr_lazy lib = { .sonames = sonames, .names = names, .slots = (void **)&lr_la };

int lr_libarchive_open(struct lr_err *e)
{
	int rc = lr_lazy_open(&lib);
	if (rc)
		lr_err_set(e, "%s", lib.err.msg);
	return rc;
}
