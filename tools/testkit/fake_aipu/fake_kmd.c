/*
 * A fake Zhouyi kernel driver for a user-mode driver run under qemu-aarch64: preloaded, it
 * answers open("/dev/aipu"), ioctl, mmap and poll on that device as a KMD of one line would,
 * and records every ioctl the user space issues.
 *
 * Built with -include <the line's armchina_aipu.h>, so the numbers it knows, and the layout of
 * what it answers, are that line's. A number the header does not define is answered as a real
 * KMD answers it, with ENOTTY. The NPU it describes is the Orange Pi 6 Plus's: one partition,
 * one cluster of three cores; FAKE_ISA_VERSION is the ISA version its partition reports.
 * FAKE_KMD_VERSION is what AIPU_IOCTL_GET_DRIVER_VERSION returns. Each ioctl is one line on the file FAKE_AIPU_LOG
 * names: "ioctl nr=<n> size=<bytes> number=<hex> result=<0|errno name>".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#if !defined(FAKE_KMD_VERSION) || !defined(FAKE_ISA_VERSION)
#error "define FAKE_KMD_VERSION and FAKE_ISA_VERSION"
#endif

static int fake_fd = -1;
static unsigned long long next_offset = 0x10000000ULL;

static void record(const char *format, ...)
{
	const char *path = getenv("FAKE_AIPU_LOG");
	FILE *log;
	va_list arguments;

	if (!path)
		return;
	log = fopen(path, "a");
	if (!log)
		return;
	va_start(arguments, format);
	vfprintf(log, format, arguments);
	va_end(arguments);
	fputc('\n', log);
	fclose(log);
}

static int open_fake(const char *path)
{
	int (*real_open)(const char *, int, ...) = dlsym(RTLD_NEXT, "open");

	if (fake_fd < 0)
		fake_fd = real_open("/dev/null", O_RDWR);
	record("open %s", path);
	return fake_fd;
}

#define OPEN_WRAPPER(name, ...)                                                      \
	int name(__VA_ARGS__ const char *path, int flags, ...)                           \
	{                                                                                \
		va_list arguments;                                                       \
		mode_t mode = 0;                                                         \
		int (*real)(__VA_ARGS__ const char *, int, ...) = dlsym(RTLD_NEXT, #name); \
		if (strcmp(path, "/dev/aipu") == 0)                                     \
			return open_fake(path);                                          \
		va_start(arguments, flags);                                              \
		if (flags & (O_CREAT | O_TMPFILE))                                       \
			mode = va_arg(arguments, mode_t);                                \
		va_end(arguments);                                                       \
		return real(OPEN_ARGS_##name path, flags, mode);                         \
	}
#define OPEN_ARGS_open
#define OPEN_ARGS_open64
#define OPEN_ARGS_openat dirfd,
#define OPEN_ARGS_openat64 dirfd,
OPEN_WRAPPER(open)
OPEN_WRAPPER(open64)
OPEN_WRAPPER(openat, int dirfd,)
OPEN_WRAPPER(openat64, int dirfd,)

static void describe_partition(struct aipu_partition_cap *partition)
{
	memset(partition, 0, sizeof(*partition));
	partition->arch = 0;    /* AIPU_ARCH_ZHOUYI */
	partition->version = FAKE_ISA_VERSION;
	partition->cluster_cnt = 1;
	partition->clusters[0].core_cnt = 3;
	partition->clusters[0].en_core_cnt = 3;
	partition->clusters[0].tec_cnt = 4;
}

static int answer(unsigned long request, void *argument)
{
	switch (request) {
	case AIPU_IOCTL_QUERY_CAP: {
		struct aipu_cap *cap = argument;

		memset(cap, 0, sizeof(*cap));
		cap->partition_cnt = 1;
		cap->asid_cnt = 4;
		cap->is_homogeneous = 1;
		/*
		 * A KMD reports the GM (global memory) regions its hardware register gives, at
		 * least 512 KiB; a UMD uses GM on a V3 core and fails its init without them.
		 */
		cap->gm0_size = 2 << 20;
		cap->gm1_size = 2 << 20;
		describe_partition(&cap->partition_cap);
		return 0;
	}
	case AIPU_IOCTL_QUERY_PARTITION_CAP:
		describe_partition(argument);
		return 0;
	case AIPU_IOCTL_GET_DRIVER_VERSION:
		strcpy(argument, FAKE_KMD_VERSION);
		return 0;
	case AIPU_IOCTL_REQ_BUF: {
		struct aipu_buf_request *buffer = argument;
		unsigned long long bytes = (buffer->bytes + 4095) & ~4095ULL;

		buffer->desc.pa = next_offset;
		buffer->desc.dev_offset = next_offset;
		buffer->desc.bytes = bytes;
		next_offset += bytes;
		return 0;
	}
	}
	/* Every other number the header defines: accepted, and what the caller reads is zero. */
	if ((_IOC_DIR(request) & _IOC_READ) && argument)
		memset(argument, 0, _IOC_SIZE(request));
	return 0;
}

static int known(unsigned long request)
{
	switch (request) {
#define KNOWN(name) case name:
#include "known_ioctls.h"
#undef KNOWN
		return 1;
	}
	return 0;
}

int ioctl(int fd, unsigned long request, ...)
{
	va_list arguments;
	void *argument;
	int (*real_ioctl)(int, unsigned long, void *) = dlsym(RTLD_NEXT, "ioctl");
	int result;

	va_start(arguments, request);
	argument = va_arg(arguments, void *);
	va_end(arguments);
	if (fd != fake_fd || fake_fd < 0)
		return real_ioctl(fd, request, argument);
	if (known(request)) {
		result = answer(request, argument);
	} else {
		errno = ENOTTY;
		result = -1;
	}
	record("ioctl nr=%u size=%u number=%#lx result=%s", _IOC_NR(request), _IOC_SIZE(request),
	       request, result == 0 ? "0" : strerrorname_np(errno));
	return result;
}

void *mmap(void *address, size_t length, int protection, int flags, int fd, off_t offset)
{
	void *(*real_mmap)(void *, size_t, int, int, int, off_t) = dlsym(RTLD_NEXT, "mmap");

	if (fd >= 0 && fd == fake_fd) {
		record("mmap offset=%#llx bytes=%zu", (unsigned long long)offset, length);
		return real_mmap(address, length, protection, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	}
	return real_mmap(address, length, protection, flags, fd, offset);
}

void *mmap64(void *address, size_t length, int protection, int flags, int fd, off_t offset)
	__attribute__((alias("mmap")));

int poll(struct pollfd *fds, nfds_t count, int timeout)
{
	int (*real_poll)(struct pollfd *, nfds_t, int) = dlsym(RTLD_NEXT, "poll");

	for (nfds_t index = 0; index < count; index++) {
		if (fds[index].fd == fake_fd) {
			record("poll");
			fds[index].revents = POLLIN;
			return 1;
		}
	}
	return real_poll(fds, count, timeout);
}
