/* One (name, number) pair of the PJRT layout test. */
#ifndef TPU_TESTS_PJRT_LAYOUT_H_
#define TPU_TESTS_PJRT_LAYOUT_H_
typedef struct tpu_layout_entry {
  const char *name;
  long value;
} tpu_layout_entry;
#endif
