// MOEKIT_HD marks small inline functions (scalar codecs, index math) shared by the CPU reference
// and CUDA kernels, so that both compute the same bits from one source. No CUDA header needed.
#pragma once

#if defined(__CUDACC__)
#define MOEKIT_HD __host__ __device__ __forceinline__
#else
#define MOEKIT_HD inline
#endif
