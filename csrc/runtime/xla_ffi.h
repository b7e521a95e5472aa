/* torchtpu's own declarations of the XLA FFI C API subset its kernels use
 * (xla/ffi/api/c_api.h, API 0.2, what the 0.81 CPU plugin speaks): the call
 * frame XLA hands a typed FFI handler, and the API table it carries (errors,
 * the host thread pool). The ABI is append-only and every struct carries its
 * size: a field is read only where the plugin's struct_size covers it.
 * tests/c/test_ffi_layout.c checks these layouts (against jaxlib's header
 * when it is installed). Handlers are registered through the PJRT FFI
 * extension (tpu_runtime_register_ffi). */
#ifndef TPU_RUNTIME_XLA_FFI_H_
#define TPU_RUNTIME_XLA_FFI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct XLA_FFI_Error XLA_FFI_Error;
typedef struct XLA_FFI_ExecutionContext XLA_FFI_ExecutionContext;

enum { XLA_FFI_Extension_Metadata = 1 };

typedef struct XLA_FFI_Extension_Base {
  size_t struct_size;
  int type;
  struct XLA_FFI_Extension_Base *next;
} XLA_FFI_Extension_Base;

typedef struct XLA_FFI_Api_Version {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  int major_version;
  int minor_version;
} XLA_FFI_Api_Version;

enum { XLA_FFI_Error_Code_INVALID_ARGUMENT = 3, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED = 8 };

typedef struct XLA_FFI_Error_Create_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  const char *message;
  int errc;
} XLA_FFI_Error_Create_Args;

enum { XLA_FFI_DataType_S32 = 4, XLA_FFI_DataType_F32 = 11, XLA_FFI_DataType_BF16 = 16 }; /* xla::PrimitiveType numbering */

typedef struct XLA_FFI_Buffer {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  int dtype;
  void *data;
  int64_t rank;
  int64_t *dims;
} XLA_FFI_Buffer;

enum { XLA_FFI_AttrType_SCALAR = 3 };
enum { XLA_FFI_ExecutionStage_EXECUTE = 3 };

typedef struct XLA_FFI_ByteSpan {
  const char *ptr;
  size_t len;
} XLA_FFI_ByteSpan;

typedef struct XLA_FFI_Scalar {
  int dtype;
  void *value;
} XLA_FFI_Scalar;

typedef struct XLA_FFI_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  int64_t size;
  int *types;
  void **args; /* XLA_FFI_Buffer* each */
} XLA_FFI_Args;

typedef struct XLA_FFI_Rets {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  int64_t size;
  int *types;
  void **rets; /* XLA_FFI_Buffer* each */
} XLA_FFI_Rets;

/* Sorted by name. */
typedef struct XLA_FFI_Attrs {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  int64_t size;
  int *types;
  XLA_FFI_ByteSpan **names;
  void **attrs; /* XLA_FFI_Scalar* for SCALAR */
} XLA_FFI_Attrs;

typedef struct XLA_FFI_Api XLA_FFI_Api;

typedef struct XLA_FFI_CallFrame {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  const XLA_FFI_Api *api;
  XLA_FFI_ExecutionContext *ctx;
  int stage;
  XLA_FFI_Args args;
  XLA_FFI_Rets rets;
  XLA_FFI_Attrs attrs;
  void *future; /* out */
} XLA_FFI_CallFrame;

typedef XLA_FFI_Error *XLA_FFI_Handler(XLA_FFI_CallFrame *frame);

/* XLA asks a handler for its metadata (once, at registration) by calling it
 * with this extension first in the frame's chain. */
typedef struct XLA_FFI_Metadata {
  size_t struct_size;
  XLA_FFI_Api_Version api_version;
  uint32_t traits;
} XLA_FFI_Metadata;

typedef struct XLA_FFI_Metadata_Extension {
  XLA_FFI_Extension_Base extension_base;
  XLA_FFI_Metadata *metadata;
} XLA_FFI_Metadata_Extension;

typedef void XLA_FFI_Task(void *data);

typedef struct XLA_FFI_ThreadPool_Schedule_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  XLA_FFI_ExecutionContext *ctx;
  XLA_FFI_Task *task;
  void *data;
} XLA_FFI_ThreadPool_Schedule_Args;

typedef struct XLA_FFI_ThreadPool_NumThreads_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  XLA_FFI_ExecutionContext *ctx;
  int64_t *num_threads; /* out */
} XLA_FFI_ThreadPool_NumThreads_Args;

typedef void *tpu_xla_ffi_fn;
struct XLA_FFI_Api {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  XLA_FFI_Api_Version api_version;
  const void *internal_api;
  XLA_FFI_Error *(*XLA_FFI_Error_Create)(XLA_FFI_Error_Create_Args *args);
  tpu_xla_ffi_fn XLA_FFI_Error_GetMessage;
  tpu_xla_ffi_fn XLA_FFI_Error_Destroy;
  tpu_xla_ffi_fn XLA_FFI_Handler_Register;
  tpu_xla_ffi_fn XLA_FFI_Stream_Get;
  tpu_xla_ffi_fn XLA_FFI_Type_Register;
  tpu_xla_ffi_fn XLA_FFI_ExecutionContext_Get;
  tpu_xla_ffi_fn XLA_FFI_State_Set;
  tpu_xla_ffi_fn XLA_FFI_State_Get;
  tpu_xla_ffi_fn XLA_FFI_DeviceMemory_Allocate;
  tpu_xla_ffi_fn XLA_FFI_DeviceMemory_Free;
  XLA_FFI_Error *(*XLA_FFI_ThreadPool_Schedule)(XLA_FFI_ThreadPool_Schedule_Args *args);
  XLA_FFI_Error *(*XLA_FFI_ThreadPool_NumThreads)(XLA_FFI_ThreadPool_NumThreads_Args *args);
};

#define TPU_FFI_SIZE(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))
/* True when the plugin's API table covers |slot| and fills it. */
#define TPU_FFI_HAS(api, slot) \
  ((api)->struct_size >= TPU_FFI_SIZE(XLA_FFI_Api, slot) && (api)->slot != NULL)

#ifdef __cplusplus
}
#endif

#endif /* TPU_RUNTIME_XLA_FFI_H_ */
