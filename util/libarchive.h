/*
 * libarchive.h — libarchive, opened on first use (lazy.c), for the two
 * folders that read and write archives: storage/tar.c (snapshot export and
 * import) and host/bundle.c (bundles). One symbol table for both.
 *
 * Includes libarchive's headers (for the types only: nothing links it).
 */
#ifndef LR_LIBARCHIVE_H
#define LR_LIBARCHIVE_H

#include <archive.h>
#include <archive_entry.h>

#include "util.h"

/* The functions, valid after lr_libarchive_open succeeded. */
struct lr_libarchive {
	__typeof__(archive_read_new) *read_new;
	__typeof__(archive_read_support_format_tar) *read_tar;
	__typeof__(archive_read_support_filter_gzip) *read_gzip;
	__typeof__(archive_read_open_filename) *read_open_filename;
	__typeof__(archive_read_open_memory) *read_open_memory;
	__typeof__(archive_read_next_header) *next_header;
	__typeof__(archive_read_data) *read_data;
	__typeof__(archive_read_free) *read_free;
	__typeof__(archive_error_string) *error_string;
	__typeof__(archive_read_open) *read_open;
	__typeof__(archive_filter_bytes) *filter_bytes;
	__typeof__(archive_entry_pathname) *e_pathname;
	__typeof__(archive_entry_filetype) *e_filetype;
	__typeof__(archive_entry_perm) *e_perm;
	__typeof__(archive_entry_size) *e_size;
	__typeof__(archive_entry_size_is_set) *e_size_is_set;
	__typeof__(archive_entry_symlink) *e_symlink;
	__typeof__(archive_entry_hardlink) *e_hardlink;
	__typeof__(archive_write_new) *write_new;
	__typeof__(archive_write_set_format_gnutar) *write_gnutar;
	__typeof__(archive_write_open_filename) *write_open_filename;
	__typeof__(archive_write_header) *write_header;
	__typeof__(archive_write_data) *write_data;
	__typeof__(archive_write_close) *write_close;
	__typeof__(archive_write_free) *write_free;
	__typeof__(archive_write_add_filter_gzip) *write_gzip;
	__typeof__(archive_write_set_format_pax_restricted) *write_pax;
	__typeof__(archive_write_set_filter_option) *write_filter_option;
	__typeof__(archive_write_set_bytes_in_last_block) *write_last_block;
	__typeof__(archive_write_open) *write_open;
	__typeof__(archive_entry_new) *e_new;
	__typeof__(archive_entry_free) *e_free;
	__typeof__(archive_entry_clear) *e_clear;
	__typeof__(archive_entry_set_pathname) *e_set_pathname;
	__typeof__(archive_entry_set_filetype) *e_set_filetype;
	__typeof__(archive_entry_set_perm) *e_set_perm;
	__typeof__(archive_entry_set_size) *e_set_size;
	__typeof__(archive_entry_set_symlink) *e_set_symlink;
	__typeof__(archive_entry_set_mtime) *e_set_mtime;
	__typeof__(archive_entry_set_hardlink) *e_set_hardlink;
};
extern struct lr_libarchive lr_la;

/*
 * Opens libarchive once per process (any thread; later calls return the
 * first outcome). 0, or LR_EUNAVAILABLE with e saying which library or
 * symbol is missing ("cannot load 'libarchive.so.13': ...").
 */
int lr_libarchive_open(struct lr_err *e);

#endif
