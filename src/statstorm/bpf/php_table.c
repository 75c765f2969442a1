// SPDX-License-Identifier: GPL-2.0
/* PHP's included-files table for the loader (php_table.h): its layout, the binary's symbols
 * and build id. */
#define _GNU_SOURCE  /* memmem */
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "php_table.h"

unsigned long long elf_symbol(const char *bin, const char *name)
{
	unsigned long long value = 0;
	int fd = open(bin, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || elf_version(EV_CURRENT) == EV_NONE) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	Elf *e = elf_begin(fd, ELF_C_READ, NULL);
	Elf_Scn *scn = NULL;
	while (e && !value && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB) ||
		    !sh.sh_entsize)
			continue;
		Elf_Data *data = elf_getdata(scn, NULL);
		for (size_t i = 0; data && i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *n;
			if (gelf_getsym(data, (int)i, &sym) && sym.st_value &&
			    (n = elf_strptr(e, sh.sh_link, sym.st_name)) && !strcmp(n, name)) {
				value = sym.st_value;
				break;
			}
		}
	}
	if (e)
		elf_end(e);
	close(fd);
	return value;
}

/* does the file `bin` contain the string `what`? */
static int file_has(const char *bin, const char *what)
{
	int fd = open(bin, O_RDONLY | O_CLOEXEC), found = 0;
	struct stat st;
	if (fd < 0)
		return 0;
	if (!fstat(fd, &st) && st.st_size > 0) {
		void *m = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m != MAP_FAILED) {
			found = memmem(m, st.st_size, what, strlen(what)) != NULL;
			munmap(m, st.st_size);
		}
	}
	close(fd);
	return found;
}

void layout_builtin(struct php_layout *l)
{
	memset(l, 0, sizeof(*l));
#ifdef PHP_EG_INCLUDED
	l->known = 1;
	snprintf(l->build_id, sizeof(l->build_id), "%s", PHP_BUILD_ID);
	l->eg_included = PHP_EG_INCLUDED; l->ht_ardata = PHP_HT_ARDATA;
	l->ht_numused = PHP_HT_NUMUSED; l->bucket_size = PHP_BUCKET_SIZE;
	l->bucket_key = PHP_BUCKET_KEY; l->zstr_val = PHP_ZSTR_VAL; l->zstr_h = PHP_ZSTR_H;
	l->zstr_len = PHP_ZSTR_LEN; l->gc_info = PHP_GC_INFO; l->str_keep = PHP_STR_KEEP;
	l->fh_filename = PHP_FH_FILENAME; l->fh_opened = PHP_FH_OPENED; l->fh_type = PHP_FH_TYPE;
#ifdef PHP_VERSION_NUM
	l->version = PHP_VERSION_NUM; l->sg_path = PHP_SG_PATH; l->sg_uri = PHP_SG_URI;
#endif
#endif
}

int layout_parse(const char *arg, struct php_layout *l)
{
	static const struct { const char *name; size_t off; } names[] = {
#define F(n, f) {n, offsetof(struct php_layout, f)}
		F("EG_INCLUDED", eg_included), F("HT_ARDATA", ht_ardata), F("HT_NUMUSED", ht_numused),
		F("BUCKET_SIZE", bucket_size), F("BUCKET_KEY", bucket_key), F("ZSTR_VAL", zstr_val),
		F("ZSTR_H", zstr_h), F("ZSTR_LEN", zstr_len), F("GC_INFO", gc_info),
		F("STR_KEEP", str_keep), F("FH_FILENAME", fh_filename), F("FH_OPENED", fh_opened),
		F("FH_TYPE", fh_type), F("VERSION_NUM", version), F("SG_PATH", sg_path),
		F("SG_URI", sg_uri),
#undef F
	};
	const size_t nnames = sizeof(names) / sizeof(names[0]);
	char buf[1024];
	int seen = 0;
	memset(l, 0, sizeof(*l));
	if (snprintf(buf, sizeof(buf), "%s", arg) >= (int)sizeof(buf))
		return -1;
	for (char *save = NULL, *kv = strtok_r(buf, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq)
			return -1;
		*eq = 0;
		if (!strcmp(kv, "BUILD_ID")) {
			snprintf(l->build_id, sizeof(l->build_id), "%s", eq + 1);
			continue;
		}
		size_t i = 0;
		while (i < nnames && strcmp(kv, names[i].name))
			i++;
		if (i == nnames)
			return -1;
		*(long long *)((char *)l + names[i].off) = strtoll(eq + 1, NULL, 0);
		seen++;
	}
	if (!l->build_id[0] || seen != (int)nnames)
		return -1;
	l->known = 1;
	return 0;
}

int layout_fits(const char *bin, const struct php_layout *l)
{
	return l->known && file_has(bin, l->build_id);
}

long long table_delta(const char *bin, const struct php_layout *l)
{
	unsigned long long eg, exec;
	if (!layout_fits(bin, l) ||
	    !elf_symbol(bin, "php_stream_open_for_zend_ex") || !elf_symbol(bin, "zend_deactivate") ||
	    !(eg = elf_symbol(bin, "executor_globals")) ||
	    !(exec = elf_symbol(bin, "php_execute_script")))
		return 0;
	return (long long)(eg + l->eg_included) - (long long)exec;
}

long long sapi_delta(const char *bin)
{
	unsigned long long sg = elf_symbol(bin, "sapi_globals"),
	                   fn = elf_symbol(bin, "php_request_startup");
	return sg && fn ? (long long)sg - (long long)fn : 0;
}
