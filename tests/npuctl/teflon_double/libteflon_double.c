/* A stand-in for Mesa's Teflon TensorFlow Lite delegate on machines without an RK3588.
 * Like Teflon it looks for the rocket device and says only on stderr why it cannot use it;
 * the delegate it returns claims no operation, so the interpreter runs the whole model on
 * the CPU and the "NPU" output equals the reference.
 * TEFLON_DOUBLE_DEVICE: the device node to open (default /dev/accel/accel0). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* TfLiteDelegate of TensorFlow Lite's c/common.h, as external delegates return it. */
typedef struct TfLiteDelegate {
	void *data_;
	int (*Prepare)(void *context, struct TfLiteDelegate *delegate);
	void *CopyFromBufferHandle;
	void *CopyToBufferHandle;
	void *FreeBufferHandle;
	int64_t flags;
	void *opaque_delegate_builder;
} TfLiteDelegate;

static const char banner[] = "Teflon delegate double";

static int prepare_nothing(void *context, TfLiteDelegate *delegate)
{
	(void)context;
	(void)delegate;
	return 0; /* kTfLiteOk: no node is taken over */
}

TfLiteDelegate *tflite_plugin_create_delegate(char **keys, char **values, size_t count,
					      void (*report_error)(const char *))
{
	(void)keys;
	(void)values;
	(void)count;
	(void)report_error;
	const char *device = getenv("TEFLON_DOUBLE_DEVICE");
	int fd = open(device ? device : "/dev/accel/accel0", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "Couldn't open kernel device\n");
		return NULL;
	}
	close(fd);
	fprintf(stderr, "%s: loaded rocket driver\n", banner);
	TfLiteDelegate *delegate = calloc(1, sizeof(*delegate));
	if (delegate)
		delegate->Prepare = prepare_nothing;
	return delegate;
}

void tflite_plugin_destroy_delegate(TfLiteDelegate *delegate)
{
	free(delegate);
}
