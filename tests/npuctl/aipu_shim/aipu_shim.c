/* LD_PRELOAD shim standing in for the aipu kernel driver's version ioctl: a path ending in
 * /dev/aipu opens (as /dev/null), and AIPU_IOCTL_GET_DRIVER_VERSION on it copies
 * $AIPU_SHIM_KMD with its NUL, as the driver copies sizeof(KMD_VERSION). Without
 * AIPU_SHIM_KMD the ioctl fails with ENOTTY, as on a node of another driver. Everything else
 * passes through. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/types.h>

/* _IOR('A', 18, char *) of armchina_aipu.h */
#define AIPU_IOCTL_GET_DRIVER_VERSION _IOR('A', 18, char *)
#define SUFFIX "/dev/aipu"

static int fake_fd = -1;

static int is_node(const char *path)
{
	size_t length = strlen(path), suffix = strlen(SUFFIX);

	return length >= suffix && strcmp(path + length - suffix, SUFFIX) == 0;
}

static int fake_open(int flags)
{
	int (*real_open)(const char *, int, ...) = dlsym(RTLD_NEXT, "open");

	fake_fd = real_open("/dev/null", flags & ~(O_CREAT | O_SYNC));
	return fake_fd;
}

#define OPEN_LIKE(name)                                                        \
	int name(const char *path, int flags, ...)                             \
	{                                                                      \
		int (*real)(const char *, int, ...) = dlsym(RTLD_NEXT, #name); \
		va_list arguments;                                             \
		mode_t mode;                                                   \
		if (is_node(path))                                             \
			return fake_open(flags);                               \
		va_start(arguments, flags);                                    \
		mode = va_arg(arguments, mode_t);                              \
		va_end(arguments);                                             \
		return real(path, flags, mode);                                \
	}

OPEN_LIKE(open)
OPEN_LIKE(open64)

#define OPENAT_LIKE(name)                                                           \
	int name(int directory, const char *path, int flags, ...)                   \
	{                                                                           \
		int (*real)(int, const char *, int, ...) = dlsym(RTLD_NEXT, #name); \
		va_list arguments;                                                  \
		mode_t mode;                                                        \
		if (is_node(path))                                                  \
			return fake_open(flags);                                    \
		va_start(arguments, flags);                                         \
		mode = va_arg(arguments, mode_t);                                   \
		va_end(arguments);                                                  \
		return real(directory, path, flags, mode);                          \
	}

OPENAT_LIKE(openat)
OPENAT_LIKE(openat64)

int ioctl(int fd, unsigned long request, ...)
{
	int (*real_ioctl)(int, unsigned long, ...) = dlsym(RTLD_NEXT, "ioctl");
	const char *version = getenv("AIPU_SHIM_KMD");
	va_list arguments;
	void *argument;

	va_start(arguments, request);
	argument = va_arg(arguments, void *);
	va_end(arguments);
	if (fd != fake_fd || fake_fd < 0)
		return real_ioctl(fd, request, argument);
	if (request != AIPU_IOCTL_GET_DRIVER_VERSION || !version) {
		errno = ENOTTY;
		return -1;
	}
	memcpy(argument, version, strlen(version) + 1);
	return 0;
}
