// Reduce and reduce-copy kernels for every dtype and op of the host backend:
// dsts[*][i] = finalise(op(srcs[0][i], ..., srcs[nsrcs-1][i])).
// Integer sum/prod wrap; float min/max are IEEE minNum/maxNum (fminf/fmaxf, as
// f32::min/max on the host); f16/bf16 are widened to f32, reduced over all
// sources and rounded to nearest-even once; avg is a sum divided by avg_divisor
// (truncating for integers). Loads and stores are 16 bytes wide when every
// pointer is 16-byte aligned, element-wise otherwise and for the tail.
#include "streamcomm_device.h"

struct __align__(16) sc_v16 { sc_u32 x, y, z, w; };
struct sc_f16 { unsigned short bits; };
struct sc_bf16 { unsigned short bits; };

// Storage type -> accumulation type, widening and narrowing.
template <typename T> struct sc_type {
  typedef T acc;
  static __device__ __forceinline__ acc widen(T v) { return v; }
  static __device__ __forceinline__ T narrow(acc v) { return v; }
};
template <> struct sc_type<sc_f16> {
  typedef float acc;
  static __device__ __forceinline__ float widen(sc_f16 v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
  }
  static __device__ __forceinline__ sc_f16 narrow(float f) {
    sc_f16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(f));
    return r;
  }
};
template <> struct sc_type<sc_bf16> {
  typedef float acc;
  static __device__ __forceinline__ float widen(sc_bf16 v) {
    return __uint_as_float(((sc_u32)v.bits) << 16);
  }
  static __device__ __forceinline__ sc_bf16 narrow(float f) {
    sc_u32 u = __float_as_uint(f);
    sc_bf16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      r.bits = (unsigned short)((u >> 16) | 0x40u);  // NaN stays a quiet NaN
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
      r.bits = (unsigned short)(u >> 16);
    }
    return r;
  }
};

// Wrapping integer arithmetic goes through the unsigned type (no signed overflow).
#define SC_INT_ARITH(T, U)                                                        \
  __device__ __forceinline__ T sc_add(T a, T b) { return (T)(U)((U)a + (U)b); }  \
  __device__ __forceinline__ T sc_mul(T a, T b) { return (T)(U)((U)a * (U)b); }  \
  __device__ __forceinline__ T sc_min(T a, T b) { return b < a ? b : a; }         \
  __device__ __forceinline__ T sc_max(T a, T b) { return a < b ? b : a; }
SC_INT_ARITH(sc_i8, sc_u8)
SC_INT_ARITH(sc_u8, sc_u8)
SC_INT_ARITH(sc_i32, sc_u32)
SC_INT_ARITH(sc_u32, sc_u32)
SC_INT_ARITH(sc_i64, sc_u64)
SC_INT_ARITH(sc_u64, sc_u64)

__device__ __forceinline__ float sc_add(float a, float b) { return a + b; }
__device__ __forceinline__ float sc_mul(float a, float b) { return a * b; }
__device__ __forceinline__ float sc_min(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ float sc_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double sc_add(double a, double b) { return a + b; }
__device__ __forceinline__ double sc_mul(double a, double b) { return a * b; }
__device__ __forceinline__ double sc_min(double a, double b) { return fmin(a, b); }
__device__ __forceinline__ double sc_max(double a, double b) { return fmax(a, b); }

// Avg finalisation: floats divide in their accumulation precision, integers
// truncate (computed wide, so any divisor >= 1 is exact).
__device__ __forceinline__ float sc_div(float a, sc_u32 d) { return a / (float)d; }
__device__ __forceinline__ double sc_div(double a, sc_u32 d) { return a / (double)d; }
__device__ __forceinline__ sc_i8 sc_div(sc_i8 a, sc_u32 d) { return (sc_i8)((sc_i64)a / (sc_i64)d); }
__device__ __forceinline__ sc_u8 sc_div(sc_u8 a, sc_u32 d) { return (sc_u8)((sc_u64)a / d); }
__device__ __forceinline__ sc_i32 sc_div(sc_i32 a, sc_u32 d) { return (sc_i32)((sc_i64)a / (sc_i64)d); }
__device__ __forceinline__ sc_u32 sc_div(sc_u32 a, sc_u32 d) { return (sc_u32)((sc_u64)a / d); }
__device__ __forceinline__ sc_i64 sc_div(sc_i64 a, sc_u32 d) { return a / (sc_i64)d; }
__device__ __forceinline__ sc_u64 sc_div(sc_u64 a, sc_u32 d) { return a / (sc_u64)d; }

struct sc_op_sum { template <typename A> static __device__ __forceinline__ A apply(A a, A b) { return sc_add(a, b); } };
struct sc_op_prod { template <typename A> static __device__ __forceinline__ A apply(A a, A b) { return sc_mul(a, b); } };
struct sc_op_min { template <typename A> static __device__ __forceinline__ A apply(A a, A b) { return sc_min(a, b); } };
struct sc_op_max { template <typename A> static __device__ __forceinline__ A apply(A a, A b) { return sc_max(a, b); } };

template <typename T, typename Op, bool kAvg>
__device__ __forceinline__ typename sc_type<T>::acc sc_element(const sc_reduce_args& a, sc_u64 i) {
  typedef sc_type<T> Ty;
  typename Ty::acc acc = Ty::widen(((const T*)a.srcs[0])[i]);
  for (sc_u32 s = 1; s < a.nsrcs; ++s) acc = Op::apply(acc, Ty::widen(((const T*)a.srcs[s])[i]));
  return kAvg ? sc_div(acc, a.avg_divisor) : acc;
}

template <typename T, typename Op, bool kAvg>
__device__ __forceinline__ void sc_reduce_copy(const sc_reduce_args& a) {
  typedef sc_type<T> Ty;
  typedef typename Ty::acc A;
  const int P = 16 / (int)sizeof(T);
  union Pack { sc_v16 v; T e[16 / sizeof(T)]; };

  sc_u64 bits = 0;
  for (sc_u32 s = 0; s < a.nsrcs; ++s) bits |= (sc_u64)a.srcs[s];
  for (sc_u32 d = 0; d < a.ndsts; ++d) bits |= (sc_u64)a.dsts[d];
  const sc_u64 npacks = (bits & 15u) == 0 ? a.count / P : 0;
  const sc_u64 tid = (sc_u64)blockIdx.x * blockDim.x + threadIdx.x;
  const sc_u64 nthreads = (sc_u64)gridDim.x * blockDim.x;

  for (sc_u64 p = tid; p < npacks; p += nthreads) {
    Pack in;
    in.v = ((const sc_v16*)a.srcs[0])[p];
    A acc[16 / sizeof(T)];
#pragma unroll
    for (int i = 0; i < P; ++i) acc[i] = Ty::widen(in.e[i]);
    for (sc_u32 s = 1; s < a.nsrcs; ++s) {
      in.v = ((const sc_v16*)a.srcs[s])[p];
#pragma unroll
      for (int i = 0; i < P; ++i) acc[i] = Op::apply(acc[i], Ty::widen(in.e[i]));
    }
    Pack out;
#pragma unroll
    for (int i = 0; i < P; ++i) out.e[i] = Ty::narrow(kAvg ? sc_div(acc[i], a.avg_divisor) : acc[i]);
    for (sc_u32 d = 0; d < a.ndsts; ++d) ((sc_v16*)a.dsts[d])[p] = out.v;
  }
  for (sc_u64 i = npacks * P + tid; i < a.count; i += nthreads) {
    const T out = Ty::narrow(sc_element<T, Op, kAvg>(a, i));
    for (sc_u32 d = 0; d < a.ndsts; ++d) ((T*)a.dsts[d])[i] = out;
  }
}

// The abort word lives in host memory: one thread per block reads it (one
// PCIe read per block, not one per thread) and the block returns as one.
// The kernels never wait, so there is no loop that would need to re-read it.
__device__ __forceinline__ bool sc_aborted(const volatile sc_u32* abort) {
  __shared__ sc_u32 seen;
  if (threadIdx.x == 0) seen = abort != 0 ? *abort : 0u;
  __syncthreads();
  return seen != 0u;
}

#define SC_KERNEL(NAME, T, OP, AVG)                                                        \
  extern "C" __global__ void __launch_bounds__(512) sc_reduce_copy_##NAME(struct sc_reduce_args a) { \
    if (sc_aborted(a.abort)) return;                                                        \
    sc_reduce_copy<T, OP, AVG>(a);                                                          \
  }
#define SC_KERNELS(NAME, T)                    \
  SC_KERNEL(NAME##_sum, T, sc_op_sum, false)   \
  SC_KERNEL(NAME##_prod, T, sc_op_prod, false) \
  SC_KERNEL(NAME##_min, T, sc_op_min, false)   \
  SC_KERNEL(NAME##_max, T, sc_op_max, false)   \
  SC_KERNEL(NAME##_avg, T, sc_op_sum, true)

SC_KERNELS(f32, float)
SC_KERNELS(f64, double)
SC_KERNELS(f16, sc_f16)
SC_KERNELS(bf16, sc_bf16)
SC_KERNELS(i8, sc_i8)
SC_KERNELS(u8, sc_u8)
SC_KERNELS(i32, sc_i32)
SC_KERNELS(u32, sc_u32)
SC_KERNELS(i64, sc_i64)
SC_KERNELS(u64, sc_u64)
