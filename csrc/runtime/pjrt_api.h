/* torchtpu's own declarations of the PJRT C API subset it uses.
 *
 * No dependable package ships pjrt_c_api.h, so these declarations are ours,
 * written from the documented ABI (API 0.81, the floor we support). The ABI is
 * append-only: a plugin's PJRT_Api may be shorter than ours (older plugin) or
 * longer (newer plugin). Every slot is therefore read through
 * TPU_PJRT_HAS(api, slot), which checks the plugin's struct_size, and every
 * args struct is passed with the struct_size of the fields we declare.
 * tests/c/test_pjrt_layout.c checks sizes and offsets against a real header
 * when one is installed. Only the runtime sources include this file. */
#ifndef TPU_RUNTIME_PJRT_API_H_
#define TPU_RUNTIME_PJRT_API_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_PJRT_SIZE(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))

typedef struct PJRT_Error PJRT_Error;
typedef struct PJRT_Client PJRT_Client;
typedef struct PJRT_Device PJRT_Device;
typedef struct PJRT_DeviceDescription PJRT_DeviceDescription;
typedef struct PJRT_Memory PJRT_Memory;
typedef struct PJRT_Buffer PJRT_Buffer;
typedef struct PJRT_Event PJRT_Event;
typedef struct PJRT_Executable PJRT_Executable;
typedef struct PJRT_LoadedExecutable PJRT_LoadedExecutable;
typedef struct PJRT_SerializedExecutable PJRT_SerializedExecutable;
typedef struct PJRT_ExecuteContext PJRT_ExecuteContext;

typedef struct PJRT_Extension_Base {
  size_t struct_size;
  int type;
  struct PJRT_Extension_Base *next;
} PJRT_Extension_Base;

/* PJRT_Extension_Type values we look for. */
enum { TPU_PJRT_EXTENSION_PROFILER = 1, TPU_PJRT_EXTENSION_FFI = 5 };

/* The FFI extension (pjrt_c_api_ffi_extension.h). Its registration args lost
 * the |api_version| field before 0.81: this is the layout of 0.81 and later
 * plugins (typed FFI handlers only). */
typedef struct {
  size_t struct_size;
  const char *target_name;
  size_t target_name_size;
  void *handler; /* XLA_FFI_Handler* */
  const char *platform_name;
  size_t platform_name_size;
  int traits;
} PJRT_FFI_Register_Handler_Args;

typedef struct {
  PJRT_Extension_Base base;
  void *type_id_register;
  void *user_data_add;
  PJRT_Error *(*register_handler)(PJRT_FFI_Register_Handler_Args *args);
} PJRT_FFI_Extension;

typedef struct PJRT_Api_Version {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  int major_version;
  int minor_version;
} PJRT_Api_Version;

/* --- errors ------------------------------------------------------------- */
typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Error *error;
} PJRT_Error_Destroy_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const PJRT_Error *error;
  const char *message; /* out */
  size_t message_size; /* out */
} PJRT_Error_Message_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const PJRT_Error *error;
  int code; /* out: absl status code */
} PJRT_Error_GetCode_Args;

enum {
  TPU_PJRT_CODE_INVALID_ARGUMENT = 3,
  TPU_PJRT_CODE_NOT_FOUND = 5,
  TPU_PJRT_CODE_RESOURCE_EXHAUSTED = 8,
  TPU_PJRT_CODE_UNIMPLEMENTED = 12,
};

/* --- plugin ------------------------------------------------------------- */
typedef enum {
  PJRT_NamedValue_kString = 0,
  PJRT_NamedValue_kInt64,
  PJRT_NamedValue_kInt64List,
  PJRT_NamedValue_kFloat,
  PJRT_NamedValue_kBool,
} PJRT_NamedValue_Type;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const char *name;
  size_t name_size;
  PJRT_NamedValue_Type type;
  union {
    const char *string_value;
    int64_t int64_value;
    const int64_t *int64_array_value;
    float float_value;
    bool bool_value;
  };
  size_t value_size;
} PJRT_NamedValue;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
} PJRT_Plugin_Initialize_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const PJRT_NamedValue *attributes; /* out */
  size_t num_attributes;             /* out */
} PJRT_Plugin_Attributes_Args;

/* --- events ------------------------------------------------------------- */
typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Event *event;
} PJRT_Event_Destroy_Args;

typedef PJRT_Event_Destroy_Args PJRT_Event_Await_Args;
typedef PJRT_Event_Destroy_Args PJRT_Event_Error_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Event *event;
  bool is_ready; /* out */
} PJRT_Event_IsReady_Args;

/* Runs when the event is ready, on a plugin thread or inline; it owns
 * |error| (NULL when the work succeeded). */
typedef void (*PJRT_Event_OnReadyCallback)(PJRT_Error *error, void *user_arg);

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Event *event;
  PJRT_Event_OnReadyCallback callback;
  void *user_arg;
} PJRT_Event_OnReady_Args;

/* --- client ------------------------------------------------------------- */
typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const PJRT_NamedValue *create_options;
  size_t num_options;
  void *kv_get_callback;
  void *kv_get_user_arg;
  void *kv_put_callback;
  void *kv_put_user_arg;
  PJRT_Client *client; /* out */
  void *kv_try_get_callback;
  void *kv_try_get_user_arg;
} PJRT_Client_Create_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
} PJRT_Client_Destroy_Args;

/* PlatformName and PlatformVersion share this shape. */
typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
  const char *value;  /* out */
  size_t value_size;  /* out */
} PJRT_Client_String_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
  PJRT_Device *const *addressable_devices; /* out */
  size_t num_addressable_devices;          /* out */
} PJRT_Client_AddressableDevices_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  char *code;
  size_t code_size;
  const char *format;
  size_t format_size;
} PJRT_Program;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
  const PJRT_Program *program;
  const char *compile_options;
  size_t compile_options_size;
  PJRT_LoadedExecutable *executable; /* out */
} PJRT_Client_Compile_Args;

typedef enum {
  PJRT_HostBufferSemantics_kImmutableOnlyDuringCall = 0,
  PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes = 1,
  PJRT_HostBufferSemantics_kImmutableZeroCopy = 2,
  PJRT_HostBufferSemantics_kMutableZeroCopy = 3,
} PJRT_HostBufferSemantics;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
  const void *data;
  int type; /* PJRT_Buffer_Type == tpu_dtype_t */
  const int64_t *dims;
  size_t num_dims;
  const int64_t *byte_strides;
  size_t num_byte_strides;
  PJRT_HostBufferSemantics host_buffer_semantics;
  PJRT_Device *device;
  PJRT_Memory *memory;
  void *device_layout;
  PJRT_Event *done_with_host_buffer; /* out */
  PJRT_Buffer *buffer;               /* out */
} PJRT_Client_BufferFromHostBuffer_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
  const int64_t *shape_dims;
  size_t shape_num_dims;
  int shape_element_type;
  void *shape_layout;
  PJRT_Device *device;
  PJRT_Memory *memory;
  PJRT_Buffer *buffer; /* out */
} PJRT_Client_CreateUninitializedBuffer_Args;

/* --- devices ------------------------------------------------------------ */
typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Device *device;
  PJRT_DeviceDescription *device_description; /* out */
} PJRT_Device_GetDescription_Args;

/* DeviceDescription_Kind and _ToString share this shape. */
typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_DeviceDescription *device_description;
  const char *value; /* out */
  size_t value_size; /* out */
} PJRT_DeviceDescription_String_Args;

/* The device's allocator statistics; each optional field comes with its
 * _is_set flag. */
typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Device *device;
  int64_t bytes_in_use; /* out */
  int64_t peak_bytes_in_use;
  bool peak_bytes_in_use_is_set;
  int64_t num_allocs;
  bool num_allocs_is_set;
  int64_t largest_alloc_size;
  bool largest_alloc_size_is_set;
  int64_t bytes_limit; /* out: the memory a program may allocate */
  bool bytes_limit_is_set;
  int64_t bytes_reserved;
  bool bytes_reserved_is_set;
  int64_t peak_bytes_reserved;
  bool peak_bytes_reserved_is_set;
  int64_t bytes_reservable_limit;
  bool bytes_reservable_limit_is_set;
  int64_t largest_free_block_bytes;
  bool largest_free_block_bytes_is_set;
  int64_t pool_bytes;
  bool pool_bytes_is_set;
  int64_t peak_pool_bytes;
  bool peak_pool_bytes_is_set;
} PJRT_Device_MemoryStats_Args;

/* --- executables -------------------------------------------------------- */
typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Executable *executable;
} PJRT_Executable_Destroy_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Executable *executable;
  size_t num_outputs; /* out */
} PJRT_Executable_NumOutputs_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const PJRT_Executable *executable;
  const char *serialized_bytes;                                          /* out */
  size_t serialized_bytes_size;                                          /* out */
  PJRT_SerializedExecutable *serialized_executable;                      /* out */
  void (*serialized_executable_deleter)(PJRT_SerializedExecutable *exec); /* out */
} PJRT_Executable_Serialize_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_LoadedExecutable *executable;
} PJRT_LoadedExecutable_Destroy_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_LoadedExecutable *loaded_executable;
  PJRT_Executable *executable; /* out */
} PJRT_LoadedExecutable_GetExecutable_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  void **send_callbacks;
  void **recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t *non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  PJRT_ExecuteContext *context;
  const char *call_location;
  size_t num_tasks;
  int *task_ids;
  int64_t *incarnation_ids;
} PJRT_ExecuteOptions;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_LoadedExecutable *executable;
  PJRT_ExecuteOptions *options;
  PJRT_Buffer *const *const *argument_lists;
  size_t num_devices;
  size_t num_args;
  PJRT_Buffer **const *output_lists;
  PJRT_Event **device_complete_events;
  PJRT_Device *execute_device;
} PJRT_LoadedExecutable_Execute_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
  const char *serialized_executable;
  size_t serialized_executable_size;
  PJRT_LoadedExecutable *loaded_executable; /* out */
  const char *overridden_serialized_compile_options;
  size_t overridden_serialized_compile_options_size;
} PJRT_Executable_DeserializeAndLoad_Args;

/* --- buffers ------------------------------------------------------------ */
typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Buffer *buffer;
} PJRT_Buffer_Destroy_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Buffer *src;
  void *host_layout;
  void *dst;
  size_t dst_size;
  PJRT_Event *event; /* out */
} PJRT_Buffer_ToHostBuffer_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Buffer *buffer;
  PJRT_Event *event; /* out */
} PJRT_Buffer_ReadyEvent_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Buffer *buffer;
  uintptr_t buffer_pointer; /* out */
} PJRT_Buffer_UnsafePointer_Args;

typedef struct {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Buffer *buffer;
  size_t on_device_size_in_bytes; /* out */
} PJRT_Buffer_OnDeviceSizeInBytes_Args;

/* --- the function table ---------------------------------------------------
 * Slots we call have their types; the others are placeholders that keep the
 * order of the 0.81 table. Read a slot only through TPU_PJRT_HAS. */
typedef PJRT_Error *(*tpu_pjrt_fn)(void *args);
typedef void (*tpu_pjrt_error_destroy_fn)(PJRT_Error_Destroy_Args *);
typedef void (*tpu_pjrt_error_message_fn)(PJRT_Error_Message_Args *);
typedef PJRT_Error *(*tpu_pjrt_error_getcode_fn)(PJRT_Error_GetCode_Args *);

typedef struct PJRT_Api {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Api_Version pjrt_api_version;

  tpu_pjrt_error_destroy_fn PJRT_Error_Destroy;
  tpu_pjrt_error_message_fn PJRT_Error_Message;
  tpu_pjrt_error_getcode_fn PJRT_Error_GetCode;

  tpu_pjrt_fn PJRT_Plugin_Initialize;
  tpu_pjrt_fn PJRT_Plugin_Attributes;

  tpu_pjrt_fn PJRT_Event_Destroy;
  tpu_pjrt_fn PJRT_Event_IsReady;
  tpu_pjrt_fn PJRT_Event_Error;
  tpu_pjrt_fn PJRT_Event_Await;
  tpu_pjrt_fn PJRT_Event_OnReady;

  tpu_pjrt_fn PJRT_Client_Create;
  tpu_pjrt_fn PJRT_Client_Destroy;
  tpu_pjrt_fn PJRT_Client_PlatformName;
  tpu_pjrt_fn PJRT_Client_ProcessIndex;
  tpu_pjrt_fn PJRT_Client_PlatformVersion;
  tpu_pjrt_fn PJRT_Client_Devices;
  tpu_pjrt_fn PJRT_Client_AddressableDevices;
  tpu_pjrt_fn PJRT_Client_LookupDevice;
  tpu_pjrt_fn PJRT_Client_LookupAddressableDevice;
  tpu_pjrt_fn PJRT_Client_AddressableMemories;
  tpu_pjrt_fn PJRT_Client_Compile;
  tpu_pjrt_fn PJRT_Client_DefaultDeviceAssignment;
  tpu_pjrt_fn PJRT_Client_BufferFromHostBuffer;

  tpu_pjrt_fn PJRT_DeviceDescription_Id;
  tpu_pjrt_fn PJRT_DeviceDescription_ProcessIndex;
  tpu_pjrt_fn PJRT_DeviceDescription_Attributes;
  tpu_pjrt_fn PJRT_DeviceDescription_Kind;
  tpu_pjrt_fn PJRT_DeviceDescription_DebugString;
  tpu_pjrt_fn PJRT_DeviceDescription_ToString;

  tpu_pjrt_fn PJRT_Device_GetDescription;
  tpu_pjrt_fn PJRT_Device_IsAddressable;
  tpu_pjrt_fn PJRT_Device_LocalHardwareId;
  tpu_pjrt_fn PJRT_Device_AddressableMemories;
  tpu_pjrt_fn PJRT_Device_DefaultMemory;
  tpu_pjrt_fn PJRT_Device_MemoryStats;

  tpu_pjrt_fn PJRT_Memory_Id;
  tpu_pjrt_fn PJRT_Memory_Kind;
  tpu_pjrt_fn PJRT_Memory_DebugString;
  tpu_pjrt_fn PJRT_Memory_ToString;
  tpu_pjrt_fn PJRT_Memory_AddressableByDevices;

  tpu_pjrt_fn PJRT_Executable_Destroy;
  tpu_pjrt_fn PJRT_Executable_Name;
  tpu_pjrt_fn PJRT_Executable_NumReplicas;
  tpu_pjrt_fn PJRT_Executable_NumPartitions;
  tpu_pjrt_fn PJRT_Executable_NumOutputs;
  tpu_pjrt_fn PJRT_Executable_SizeOfGeneratedCodeInBytes;
  tpu_pjrt_fn PJRT_Executable_GetCostAnalysis;
  tpu_pjrt_fn PJRT_Executable_OutputMemoryKinds;
  tpu_pjrt_fn PJRT_Executable_OptimizedProgram;
  tpu_pjrt_fn PJRT_Executable_Serialize;

  tpu_pjrt_fn PJRT_LoadedExecutable_Destroy;
  tpu_pjrt_fn PJRT_LoadedExecutable_GetExecutable;
  tpu_pjrt_fn PJRT_LoadedExecutable_AddressableDevices;
  tpu_pjrt_fn PJRT_LoadedExecutable_Delete;
  tpu_pjrt_fn PJRT_LoadedExecutable_IsDeleted;
  tpu_pjrt_fn PJRT_LoadedExecutable_Execute;
  tpu_pjrt_fn PJRT_Executable_DeserializeAndLoad;
  tpu_pjrt_fn PJRT_LoadedExecutable_Fingerprint;

  tpu_pjrt_fn PJRT_Buffer_Destroy;
  tpu_pjrt_fn PJRT_Buffer_ElementType;
  tpu_pjrt_fn PJRT_Buffer_Dimensions;
  tpu_pjrt_fn PJRT_Buffer_UnpaddedDimensions;
  tpu_pjrt_fn PJRT_Buffer_DynamicDimensionIndices;
  tpu_pjrt_fn PJRT_Buffer_GetMemoryLayout;
  tpu_pjrt_fn PJRT_Buffer_OnDeviceSizeInBytes;
  tpu_pjrt_fn PJRT_Buffer_Device;
  tpu_pjrt_fn PJRT_Buffer_Memory;
  tpu_pjrt_fn PJRT_Buffer_Delete;
  tpu_pjrt_fn PJRT_Buffer_IsDeleted;
  tpu_pjrt_fn PJRT_Buffer_CopyToDevice;
  tpu_pjrt_fn PJRT_Buffer_ToHostBuffer;
  tpu_pjrt_fn PJRT_Buffer_IsOnCpu;
  tpu_pjrt_fn PJRT_Buffer_ReadyEvent;
  tpu_pjrt_fn PJRT_Buffer_UnsafePointer;
  tpu_pjrt_fn PJRT_Buffer_IncreaseExternalReferenceCount;
  tpu_pjrt_fn PJRT_Buffer_DecreaseExternalReferenceCount;
  tpu_pjrt_fn PJRT_Buffer_OpaqueDeviceMemoryDataPointer;

  tpu_pjrt_fn PJRT_CopyToDeviceStream_Destroy;
  tpu_pjrt_fn PJRT_CopyToDeviceStream_AddChunk;
  tpu_pjrt_fn PJRT_CopyToDeviceStream_TotalBytes;
  tpu_pjrt_fn PJRT_CopyToDeviceStream_GranuleSize;
  tpu_pjrt_fn PJRT_CopyToDeviceStream_CurrentBytes;

  tpu_pjrt_fn PJRT_TopologyDescription_Create;
  tpu_pjrt_fn PJRT_TopologyDescription_Destroy;
  tpu_pjrt_fn PJRT_TopologyDescription_PlatformName;
  tpu_pjrt_fn PJRT_TopologyDescription_PlatformVersion;
  tpu_pjrt_fn PJRT_TopologyDescription_GetDeviceDescriptions;
  tpu_pjrt_fn PJRT_TopologyDescription_Serialize;
  tpu_pjrt_fn PJRT_TopologyDescription_Attributes;

  tpu_pjrt_fn PJRT_Compile;

  tpu_pjrt_fn PJRT_Executable_OutputElementTypes;
  tpu_pjrt_fn PJRT_Executable_OutputDimensions;
  tpu_pjrt_fn PJRT_Buffer_CopyToMemory;
  tpu_pjrt_fn PJRT_Client_CreateViewOfDeviceBuffer;
  tpu_pjrt_fn PJRT_Executable_Fingerprint;
  tpu_pjrt_fn PJRT_Client_TopologyDescription;
  tpu_pjrt_fn PJRT_Executable_GetCompiledMemoryStats;
  tpu_pjrt_fn PJRT_Memory_Kind_Id;
  tpu_pjrt_fn PJRT_ExecuteContext_Create;
  tpu_pjrt_fn PJRT_ExecuteContext_Destroy;
  tpu_pjrt_fn PJRT_Buffer_CopyRawToHost;
  tpu_pjrt_fn PJRT_AsyncHostToDeviceTransferManager_Destroy;
  tpu_pjrt_fn PJRT_AsyncHostToDeviceTransferManager_TransferData;
  tpu_pjrt_fn PJRT_Client_CreateBuffersForAsyncHostToDevice;
  tpu_pjrt_fn PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer;
  tpu_pjrt_fn PJRT_AsyncHostToDeviceTransferManager_Device;
  tpu_pjrt_fn PJRT_AsyncHostToDeviceTransferManager_BufferCount;
  tpu_pjrt_fn PJRT_AsyncHostToDeviceTransferManager_BufferSize;
  tpu_pjrt_fn PJRT_AsyncHostToDeviceTransferManager_SetBufferError;
  tpu_pjrt_fn PJRT_AsyncHostToDeviceTransferManager_AddMetadata;
  tpu_pjrt_fn PJRT_Client_DmaMap;
  tpu_pjrt_fn PJRT_Client_DmaUnmap;
  tpu_pjrt_fn PJRT_Client_CreateUninitializedBuffer;
} PJRT_Api;

/* True when the plugin's table covers |slot| and fills it. */
#define TPU_PJRT_HAS(api, slot)                                             \
  ((api)->struct_size >= offsetof(PJRT_Api, slot) + sizeof((api)->slot) && \
   (api)->slot != NULL)

#ifdef __cplusplus
}
#endif

#endif /* TPU_RUNTIME_PJRT_API_H_ */
