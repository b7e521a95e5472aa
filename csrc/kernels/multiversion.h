/* How the host kernels compile for the CPU they run on: each function marked
 * MULTIVERSION is cloned for AVX-512 and AVX2 where glibc has ifuncs (GCC on
 * x86-64), and helpers marked INLINE are forced inline, since only then are
 * they compiled for each clone's ISA. The build adds -O3 (-O2 leaves loops of
 * unknown trip count scalar) and -ffp-contract=fast (ISO C mode forms no fused
 * multiply-adds) for the files that use it. */
#ifndef TPU_KERNELS_MULTIVERSION_H_
#define TPU_KERNELS_MULTIVERSION_H_

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MULTIVERSION
#endif
#if defined(__GNUC__)
#define INLINE inline __attribute__((always_inline))
#else
#define INLINE inline
#endif

#endif  // TPU_KERNELS_MULTIVERSION_H_
