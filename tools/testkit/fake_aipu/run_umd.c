/*
 * What an application of a Zhouyi user-mode driver does first: open a context, ask the NPU's
 * topology and target, close it. The UMD's functions carry its prefix (libnoe's noe_, libaipudrv's aipu_;
 * the same API otherwise) and are looked up by name in the library given, which is
 * dlopen()ed, so no link-time copy of it is needed. Prints one line per call:
 * "<function> <status>" and, for the counts, the count.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

typedef int (*init_t)(void **);
typedef int (*deinit_t)(void *);
typedef int (*count_t)(void *, uint32_t *);
typedef int (*cluster_count_t)(void *, uint32_t, uint32_t *);
typedef int (*core_count_t)(void *, uint32_t, uint32_t, uint32_t *);
typedef int (*target_t)(void *, char *);

static void *library;
static const char *prefix;

static void *function(const char *name, char *full, size_t size)
{
	void *found;

	snprintf(full, size, "%s_%s", prefix, name);
	found = dlsym(library, full);
	if (!found) {
		fprintf(stderr, "%s: no such function\n", full);
		return NULL;
	}
	return found;
}

int main(int argc, char **argv)
{
	void *context = NULL, *found;
	uint32_t partitions = 0, clusters = 0, cores = 0;
	char name[64];
	int status;

	if (argc != 3) {
		fprintf(stderr, "usage: %s LIBRARY PREFIX\n", argv[0]);
		return 2;
	}
	prefix = argv[2];
	library = dlopen(argv[1], RTLD_NOW);
	if (!library) {
		fprintf(stderr, "%s\n", dlerror());
		return 2;
	}
	if (!(found = function("init_context", name, sizeof(name))))
		return 2;
	status = ((init_t)found)(&context);
	printf("%s %d\n", name, status);
	if (status != 0 || !context)
		return 1;
	if ((found = function("get_partition_count", name, sizeof(name)))) {
		status = ((count_t)found)(context, &partitions);
		printf("%s %d %u\n", name, status, partitions);
	}
	if ((found = function("get_cluster_count", name, sizeof(name)))) {
		status = ((cluster_count_t)found)(context, 0, &clusters);
		printf("%s %d %u\n", name, status, clusters);
	}
	if ((found = function("get_core_count", name, sizeof(name)))) {
		status = ((core_count_t)found)(context, 0, 0, &cores);
		printf("%s %d %u\n", name, status, cores);
	}
	if ((found = function("get_target", name, sizeof(name)))) {
		char target[64] = { 0 }; /* the libraries write no NUL */

		status = ((target_t)found)(context, target);
		printf("%s %d %.63s\n", name, status, target);
	}
	if (!(found = function("deinit_context", name, sizeof(name))))
		return 2;
	status = ((deinit_t)found)(context);
	printf("%s %d\n", name, status);
	return 0;
}
