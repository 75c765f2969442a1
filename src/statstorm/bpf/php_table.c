// SPDX-License-Identifier: GPL-2.0
/* PHP's included-files table for the loader (php_table.h): the binary's symbols and build id. */
#define _GNU_SOURCE  /* memmem */
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "php_table.h"

/* the value of symbol `name` in the ELF file `bin` (its dynamic or full symbol table), or 0 */
static unsigned long long elf_symbol(const char *bin, const char *name)
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

long long table_delta(const char *bin)
{
#ifdef PHP_EG_INCLUDED
	unsigned long long eg, exec;
	if (!file_has(bin, PHP_BUILD_ID) || !elf_symbol(bin, "php_stream_open_for_zend_ex") ||
	    !elf_symbol(bin, "zend_deactivate") || !(eg = elf_symbol(bin, "executor_globals")) ||
	    !(exec = elf_symbol(bin, "php_execute_script")))
		return 0;
	return (long long)(eg + PHP_EG_INCLUDED) - (long long)exec;
#else
	(void)bin;
	(void)elf_symbol;
	(void)file_has;
	return 0;
#endif
}
