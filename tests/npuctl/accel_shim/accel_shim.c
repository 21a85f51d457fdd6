/* LD_PRELOAD shim for Mesa's real Teflon under qemu-user: /dev/accel/accel0 opens (as
 * /dev/null) and answers DRM_IOCTL_VERSION with the driver name "rocket", so Teflon finds a
 * rocket device where there is no NPU. Everything else passes through. No job can run on it:
 * the shim proves the delegate's device discovery, not inference. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define FAKE_NODE "/dev/accel/accel0"
#define DRIVER "rocket"

/* struct drm_version of the kernel's uapi/drm/drm.h */
struct drm_version {
	int version_major;
	int version_minor;
	int version_patchlevel;
	size_t name_len;
	char *name;
	size_t date_len;
	char *date;
	size_t desc_len;
	char *desc;
};

#define DRM_IOCTL_VERSION _IOWR('d', 0x00, struct drm_version)

static int fake_fd = -1;

static int fake_open(int flags)
{
	int (*real_open)(const char *, int, ...) = dlsym(RTLD_NEXT, "open");
	fake_fd = real_open("/dev/null", flags & ~O_CREAT);
	return fake_fd;
}

int open(const char *path, int flags, ...)
{
	int (*real_open)(const char *, int, ...) = dlsym(RTLD_NEXT, "open");
	va_list arguments;
	mode_t mode;

	if (strcmp(path, FAKE_NODE) == 0)
		return fake_open(flags);
	va_start(arguments, flags);
	mode = va_arg(arguments, mode_t);
	va_end(arguments);
	return real_open(path, flags, mode);
}

int open64(const char *path, int flags, ...) __attribute__((alias("open")));

int openat(int directory, const char *path, int flags, ...)
{
	int (*real_openat)(int, const char *, int, ...) = dlsym(RTLD_NEXT, "openat");
	va_list arguments;
	mode_t mode;

	if (strcmp(path, FAKE_NODE) == 0)
		return fake_open(flags);
	va_start(arguments, flags);
	mode = va_arg(arguments, mode_t);
	va_end(arguments);
	return real_openat(directory, path, flags, mode);
}

int openat64(int directory, const char *path, int flags, ...) __attribute__((alias("openat")));

static void fill(char *target, size_t *length, const char *text)
{
	size_t size = strlen(text);

	if (target && *length)
		memcpy(target, text, size < *length ? size : *length);
	*length = size;
}

int ioctl(int fd, unsigned long request, ...)
{
	int (*real_ioctl)(int, unsigned long, ...) = dlsym(RTLD_NEXT, "ioctl");
	va_list arguments;
	void *argument;

	va_start(arguments, request);
	argument = va_arg(arguments, void *);
	va_end(arguments);
	if (fd >= 0 && fd == fake_fd) {
		if (request == DRM_IOCTL_VERSION) {
			struct drm_version *version = argument;

			version->version_major = 0;
			version->version_minor = 0;
			version->version_patchlevel = 0;
			fill(version->name, &version->name_len, DRIVER);
			fill(version->date, &version->date_len, "20240101");
			fill(version->desc, &version->desc_len, "accel shim");
			return 0;
		}
		errno = ENOTTY;
		return -1;
	}
	return real_ioctl(fd, request, argument);
}
