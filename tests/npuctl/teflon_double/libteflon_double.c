/* A stand-in for Mesa's Teflon TensorFlow Lite delegate on machines without an RK3588.
 * Like Teflon it looks for the rocket device and says only on stderr why it cannot use it;
 * the delegate it returns claims no operation, so the interpreter runs the whole model on
 * the CPU and the "NPU" output equals the reference.
 * TEFLON_DOUBLE_DEVICE: the device node to open (default /dev/accel/accel0).
 * TEFLON_DOUBLE_INFER_MS: claim every builtin operation instead (custom ones, like SSD's
 * post-processing, stay on the CPU as with Teflon) and answer each job after this many
 * milliseconds with zeroed outputs: the model's NPU time, for benchmarks of the host's cost.
 * TEFLON_DOUBLE_CORES: jobs that may run at once in one process (default 3, the RK3588's
 * cores); more wait for a core.
 * TEFLON_DOUBLE_HANG_FILE=path (with TEFLON_DOUBLE_INFER_MS): every job from the moment that
 * file exists never returns (an NPU that hangs while a server runs). */
#include <errno.h>
#include <pthread.h>
#include <time.h>
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

/* The parts of TensorFlow Lite's c/common.h this double reads, in their ABI order. */
typedef struct {
	int size;
	int data[];
} IntArray;

typedef struct {
	IntArray *inputs;
	IntArray *outputs;
} Node; /* the first members of TfLiteNode */

typedef struct {
	void *(*init)(void *context, const char *buffer, size_t length);
	void (*free)(void *context, void *buffer);
	int (*prepare)(void *context, Node *node);
	int (*invoke)(void *context, Node *node);
	const char *(*profiling_string)(const void *context, const Node *node);
	int32_t builtin_code;
	const char *custom_name;
	int version;
	void *registration_external;
	void *async_kernel;
	uint64_t inplace_operator;
} Registration; /* TfLiteRegistration, passed by value */

typedef struct {
	size_t tensors_size;
	int (*GetExecutionPlan)(void *context, IntArray **plan);
	char *tensors; /* TfLiteTensor[tensors_size] */
	void *impl_;
	void *ResizeTensor;
	void *ReportError;
	void *AddTensors;
	int (*GetNodeAndRegistration)(void *context, int index, Node **node, Registration **reg);
	int (*ReplaceNodeSubsetsWithDelegateKernels)(void *context, Registration registration,
						     const IntArray *nodes, TfLiteDelegate *delegate);
} Context; /* the first members of TfLiteContext */

enum { TENSOR_SIZE = 112, TENSOR_DATA = 8, TENSOR_BYTES = 40, BUILTIN_CUSTOM = 32,
       BUILTIN_DELEGATE = 51 };

static long infer_ms;
static int cores = 3, busy;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t freed = PTHREAD_COND_INITIALIZER;

static int prepare_nothing(void *context, TfLiteDelegate *delegate)
{
	(void)context;
	(void)delegate;
	return 0; /* kTfLiteOk: no node is taken over */
}

static int kernel_prepare(void *context, Node *node)
{
	(void)context;
	(void)node;
	return 0;
}

static int kernel_invoke(void *context, Node *node)
{
	Context *c = context;
	struct timespec pause_for = { infer_ms / 1000, (infer_ms % 1000) * 1000000L };

	pthread_mutex_lock(&lock);
	while (busy >= cores)
		pthread_cond_wait(&freed, &lock);
	busy++;
	pthread_mutex_unlock(&lock);
	if (getenv("TEFLON_DOUBLE_HANG_FILE") && access(getenv("TEFLON_DOUBLE_HANG_FILE"), F_OK) == 0)
		for (;;)
			pause(); /* an NPU that stops answering once the test says so */
	while (nanosleep(&pause_for, &pause_for) && errno == EINTR)
		;
	for (int i = 0; i < node->outputs->size; i++) {
		char *tensor = c->tensors + (size_t)node->outputs->data[i] * TENSOR_SIZE;
		void *data = *(void **)(tensor + TENSOR_DATA);
		size_t bytes = *(size_t *)(tensor + TENSOR_BYTES);

		if (data)
			memset(data, 0, bytes);
	}
	pthread_mutex_lock(&lock);
	busy--;
	pthread_cond_signal(&freed);
	pthread_mutex_unlock(&lock);
	return 0;
}

static int prepare_claiming(void *context, TfLiteDelegate *delegate)
{
	Context *c = context;
	IntArray *plan;
	Registration kernel = { 0 };

	if (c->GetExecutionPlan(context, &plan))
		return 1;
	IntArray *claimed = calloc(1, sizeof(IntArray) + sizeof(int) * (size_t)plan->size);
	if (!claimed)
		return 1;
	for (int i = 0; i < plan->size; i++) {
		Node *node;
		Registration *reg;

		if (c->GetNodeAndRegistration(context, plan->data[i], &node, &reg))
			continue;
		if (reg->builtin_code != BUILTIN_CUSTOM)
			claimed->data[claimed->size++] = plan->data[i];
	}
	kernel.prepare = kernel_prepare;
	kernel.invoke = kernel_invoke;
	kernel.builtin_code = BUILTIN_DELEGATE;
	kernel.custom_name = "TeflonDouble";
	kernel.version = 1;
	int status = c->ReplaceNodeSubsetsWithDelegateKernels(context, kernel, claimed, delegate);
	free(claimed);
	return status;
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
	const char *ms = getenv("TEFLON_DOUBLE_INFER_MS");
	const char *cores_env = getenv("TEFLON_DOUBLE_CORES");

	infer_ms = ms ? strtol(ms, NULL, 10) : 0;
	if (cores_env && atoi(cores_env) > 0)
		cores = atoi(cores_env);
	if (delegate)
		delegate->Prepare = ms ? prepare_claiming : prepare_nothing;
	return delegate;
}

void tflite_plugin_destroy_delegate(TfLiteDelegate *delegate)
{
	free(delegate);
}
