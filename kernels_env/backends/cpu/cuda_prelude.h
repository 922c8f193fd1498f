// CUDA device-code API on the host CPU, for the LEAP-JAX `cpu` backend.
//
// A submission's device code is translated (translate.py) and compiled together with this header
// into one shared object. Qualifiers become plain C++, built-in index variables are per-fiber
// globals set by the scheduler (cpu_runtime.h), and the CUDA math / conversion / atomic / fp16 /
// warp intrinsics are implemented here. Only cooperative scheduling exists (one OS thread), so
// atomics are plain read-modify-write operations.
#pragma once
#ifndef LEAP_CPU_PRELUDE_H
#define LEAP_CPU_PRELUDE_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <stdio.h>
#include <cmath>
#include <math.h>
#include <stdlib.h>
#include <float.h>
#include <limits.h>
#include <type_traits>
#include <utility>

// ---- qualifiers --------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __shared__ static
#define __constant__
#define __grid_constant__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __CUDACC__ 1
#define __CUDACC_RTC__ 1
#define __CUDA_ARCH__ 900
#define LEAP_CPU_BACKEND 1

// ---- vector types ------------------------------------------------------------------------------
#define LEAP_VEC1(T, N, A) struct __attribute__((aligned(A))) N##1 { T x; }; \
  static inline N##1 make_##N##1(T x) { N##1 v; v.x = x; return v; }
#define LEAP_VEC2(T, N, A) struct __attribute__((aligned(A))) N##2 { T x, y; }; \
  static inline N##2 make_##N##2(T x, T y) { N##2 v; v.x = x; v.y = y; return v; }
#define LEAP_VEC3(T, N) struct N##3 { T x, y, z; }; \
  static inline N##3 make_##N##3(T x, T y, T z) { N##3 v; v.x = x; v.y = y; v.z = z; return v; }
#define LEAP_VEC4(T, N, A) struct __attribute__((aligned(A))) N##4 { T x, y, z, w; }; \
  static inline N##4 make_##N##4(T x, T y, T z, T w) { N##4 v; v.x = x; v.y = y; v.z = z; v.w = w; return v; }
#define LEAP_VECS(T, N, A1, A2, A4) LEAP_VEC1(T, N, A1) LEAP_VEC2(T, N, A2) LEAP_VEC3(T, N) LEAP_VEC4(T, N, A4)
LEAP_VECS(signed char, char, 1, 2, 4)
LEAP_VECS(unsigned char, uchar, 1, 2, 4)
LEAP_VECS(short, short, 2, 4, 8)
LEAP_VECS(unsigned short, ushort, 2, 4, 8)
LEAP_VECS(int, int, 4, 8, 16)
LEAP_VECS(unsigned int, uint, 4, 8, 16)
LEAP_VECS(long long, longlong, 8, 16, 16)
LEAP_VECS(unsigned long long, ulonglong, 8, 16, 16)
LEAP_VECS(float, float, 4, 8, 16)
LEAP_VECS(double, double, 8, 16, 16)
LEAP_VECS(long, long, 8, 16, 16)
LEAP_VECS(unsigned long, ulong, 8, 16, 16)

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

// Built-in variables: one OS thread runs every CUDA thread in turn; the scheduler sets these.
// Hidden (not static) so the compiler never assumes a fiber switch leaves them unchanged.
#define LEAP_HIDDEN __attribute__((visibility("hidden")))
LEAP_HIDDEN uint3 threadIdx;
LEAP_HIDDEN uint3 blockIdx;
LEAP_HIDDEN dim3 blockDim;
LEAP_HIDDEN dim3 gridDim;
static const int warpSize = 32;
LEAP_HIDDEN unsigned char* __cpu_dyn_smem;  // `extern __shared__` arrays point here (translate.py)

// ---- runtime hooks implemented in cpu_runtime.h ------------------------------------------------
namespace __cpu {
enum WarpOp { W_EXCHANGE = 0, W_REDUCE_ADD = 1, W_REDUCE_MIN = 2, W_REDUCE_MAX = 3, W_REDUCE_AND = 4,
              W_REDUCE_OR = 5, W_REDUCE_XOR = 6, W_REDUCE_UMIN = 7, W_REDUCE_UMAX = 8 };
struct WarpOut { unsigned long long value; unsigned ballot; unsigned participants; };
static WarpOut warp_sync(unsigned mask, unsigned long long value, int src_lane, int pred, int op);
static int block_sync(int pred);  // returns the number of threads with pred != 0
static int block_alive();
static unsigned active_mask();
[[noreturn]] static void trap(const char* why);
static unsigned long long clock_tick();
static inline int linear_tid() {
  return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}
static inline int lane_id() { return linear_tid() & 31; }
}  // namespace __cpu

// ---- synchronisation, warp and vote intrinsics -------------------------------------------------
static inline void __syncthreads() { __cpu::block_sync(0); }
static inline int __syncthreads_count(int p) { return __cpu::block_sync(p != 0); }
static inline int __syncthreads_and(int p) { return __cpu::block_sync(p != 0) == __cpu::block_alive(); }
static inline int __syncthreads_or(int p) { return __cpu::block_sync(p != 0) != 0; }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { __cpu::warp_sync(mask, 0, -1, 0, __cpu::W_EXCHANGE); }
static inline void __threadfence() {}
static inline void __threadfence_block() {}
static inline void __threadfence_system() {}
static inline unsigned __activemask() { return __cpu::active_mask(); }
static inline void __nanosleep(unsigned) {}
static inline long long clock64() { return (long long)__cpu::clock_tick(); }
[[noreturn]] static inline void __trap() { __cpu::trap("__trap() called in device code"); }
static inline void __brkpt() { __cpu::trap("__brkpt() called in device code"); }
[[noreturn]] static inline void __cpu_assert_fail(const char* e, const char* file, int line) {
  static char buf[256];
  snprintf(buf, sizeof buf, "device-side assertion `%s` failed (%s:%d)", e, file, line);
  __cpu::trap(buf);
}
#undef assert
#define assert(e) ((e) ? (void)0 : __cpu_assert_fail(#e, __FILE__, __LINE__))

namespace __cpu {
template <class T> static inline unsigned long long to_bits(T v) {
  static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
  unsigned long long b = 0; memcpy(&b, &v, sizeof(T)); return b;
}
template <class T> static inline T from_bits(unsigned long long b) { T v; memcpy(&v, &b, sizeof(T)); return v; }
}  // namespace __cpu

template <class T> static inline T __shfl_sync(unsigned mask, T var, int src, int width = 32) {
  int lane = __cpu::lane_id(); int seg = lane & ~(width - 1);
  int s = seg + (src & (width - 1));
  return __cpu::from_bits<T>(__cpu::warp_sync(mask, __cpu::to_bits(var), s, 0, __cpu::W_EXCHANGE).value);
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  int lane = __cpu::lane_id(); int s = ((lane & (width - 1)) >= (int)delta) ? lane - (int)delta : lane;
  return __cpu::from_bits<T>(__cpu::warp_sync(mask, __cpu::to_bits(var), s, 0, __cpu::W_EXCHANGE).value);
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  int lane = __cpu::lane_id(); int s = ((lane & (width - 1)) + (int)delta < width) ? lane + (int)delta : lane;
  return __cpu::from_bits<T>(__cpu::warp_sync(mask, __cpu::to_bits(var), s, 0, __cpu::W_EXCHANGE).value);
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  int lane = __cpu::lane_id(); int s = lane ^ lane_mask;
  if ((s & ~(width - 1)) != (lane & ~(width - 1))) s = lane;
  return __cpu::from_bits<T>(__cpu::warp_sync(mask, __cpu::to_bits(var), s, 0, __cpu::W_EXCHANGE).value);
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
  return __cpu::warp_sync(mask, 0, -1, pred != 0, __cpu::W_EXCHANGE).ballot;
}
static inline int __any_sync(unsigned mask, int pred) {
  return __cpu::warp_sync(mask, 0, -1, pred != 0, __cpu::W_EXCHANGE).ballot != 0;
}
static inline int __all_sync(unsigned mask, int pred) {
  __cpu::WarpOut o = __cpu::warp_sync(mask, 0, -1, pred != 0, __cpu::W_EXCHANGE);
  return o.ballot == o.participants;
}
static inline int __reduce_add_sync(unsigned m, int v) { return (int)__cpu::warp_sync(m, (unsigned)v, -1, 0, __cpu::W_REDUCE_ADD).value; }
static inline unsigned __reduce_add_sync(unsigned m, unsigned v) { return (unsigned)__cpu::warp_sync(m, v, -1, 0, __cpu::W_REDUCE_ADD).value; }
static inline int __reduce_min_sync(unsigned m, int v) { return (int)__cpu::warp_sync(m, (unsigned)v, -1, 0, __cpu::W_REDUCE_MIN).value; }
static inline int __reduce_max_sync(unsigned m, int v) { return (int)__cpu::warp_sync(m, (unsigned)v, -1, 0, __cpu::W_REDUCE_MAX).value; }
static inline unsigned __reduce_min_sync(unsigned m, unsigned v) { return (unsigned)__cpu::warp_sync(m, v, -1, 0, __cpu::W_REDUCE_UMIN).value; }
static inline unsigned __reduce_max_sync(unsigned m, unsigned v) { return (unsigned)__cpu::warp_sync(m, v, -1, 0, __cpu::W_REDUCE_UMAX).value; }
static inline unsigned __reduce_and_sync(unsigned m, unsigned v) { return (unsigned)__cpu::warp_sync(m, v, -1, 0, __cpu::W_REDUCE_AND).value; }
static inline unsigned __reduce_or_sync(unsigned m, unsigned v) { return (unsigned)__cpu::warp_sync(m, v, -1, 0, __cpu::W_REDUCE_OR).value; }
static inline unsigned __reduce_xor_sync(unsigned m, unsigned v) { return (unsigned)__cpu::warp_sync(m, v, -1, 0, __cpu::W_REDUCE_XOR).value; }

// ---- min / max overloads (usual arithmetic conversions, as CUDA's mixed overloads do) -----------
template <class A, class B, class = typename std::enable_if<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>::type>
static inline typename std::common_type<A, B>::type min(A a, B b) {
  typedef typename std::common_type<A, B>::type C; return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B, class = typename std::enable_if<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>::type>
static inline typename std::common_type<A, B>::type max(A a, B b) {
  typedef typename std::common_type<A, B>::type C; return (C)a < (C)b ? (C)b : (C)a;
}
static inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long llmin(long long a, long long b) { return a < b ? a : b; }
static inline long long llmax(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// ---- math functions and intrinsics -------------------------------------------------------------
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
static inline double rcbrt(double x) { return 1.0 / cbrt(x); }
static inline float __cpu_expf(float x) { return expf(x); }
static inline float __cpu_exp10f(float x) { return powf(10.0f, x); }
static inline float __cpu_logf(float x) { return logf(x); }
static inline float __cpu_log2f(float x) { return log2f(x); }
static inline float __cpu_log10f(float x) { return log10f(x); }
static inline float __cpu_sinf(float x) { return sinf(x); }
static inline float __cpu_cosf(float x) { return cosf(x); }
static inline float __cpu_tanf(float x) { return tanf(x); }
static inline void __cpu_sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
static inline float __cpu_powf(float x, float y) { return powf(x, y); }
// glibc declares these names itself: map them to ours
#define __expf __cpu_expf
#define __exp10f __cpu_exp10f
#define __logf __cpu_logf
#define __log2f __cpu_log2f
#define __log10f __cpu_log10f
#define __sinf __cpu_sinf
#define __cosf __cpu_cosf
#define __tanf __cpu_tanf
#define __sincosf __cpu_sincosf
#define __powf __cpu_powf
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __fdiv_rn(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fadd_rz(float a, float b) { return a + b; }
static inline float __fmul_rz(float a, float b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline float __saturatef(float x) { return x != x ? 0.0f : (x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x)); }
static inline float sinpif(float x) { return sinf((float)M_PI * x); }
static inline float cospif(float x) { return cosf((float)M_PI * x); }
static inline double sinpi(double x) { return sin(M_PI * x); }
static inline double cospi(double x) { return cos(M_PI * x); }
static inline void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
static inline float normcdff(float x) { return 0.5f * erfcf(-x * (float)M_SQRT1_2); }
static inline double normcdf(double x) { return 0.5 * erfc(-x * M_SQRT1_2); }
static inline double erfinv(double y) {
  if (y <= -1.0) return y == -1.0 ? -INFINITY : NAN;
  if (y >= 1.0) return y == 1.0 ? INFINITY : NAN;
  double w = -log((1.0 - y) * (1.0 + y)), x;  // Giles' approximation refined by Newton steps
  if (w < 5.0) { w -= 2.5; x = 2.81022636e-08; x = 3.43273939e-07 + x * w; x = -3.5233877e-06 + x * w;
    x = -4.39150654e-06 + x * w; x = 0.00021858087 + x * w; x = -0.00125372503 + x * w;
    x = -0.00417768164 + x * w; x = 0.246640727 + x * w; x = 1.50140941 + x * w; }
  else { w = sqrt(w) - 3.0; x = -0.000200214257; x = 0.000100950558 + x * w; x = 0.00134934322 + x * w;
    x = -0.00367342844 + x * w; x = 0.00573950773 + x * w; x = -0.0076224613 + x * w;
    x = 0.00943887047 + x * w; x = 1.00167406 + x * w; x = 2.83297682 + x * w; }
  x *= y;
  for (int i = 0; i < 2; ++i) x -= (erf(x) - y) / (2.0 / sqrt(M_PI) * exp(-x * x));
  return x;
}
static inline float erfinvf(float y) { return (float)erfinv((double)y); }
static inline double erfcinv(double y) { return erfinv(1.0 - y); }
static inline float erfcinvf(float y) { return (float)erfinv(1.0 - (double)y); }
static inline float normcdfinvf(float y) { return (float)(-M_SQRT2 * erfinv(1.0 - 2.0 * (double)y) * -1.0); }

static inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
static inline int __float_as_int(float f) { int x; memcpy(&x, &f, 4); return x; }
static inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned x; memcpy(&x, &f, 4); return x; }
static inline double __longlong_as_double(long long x) { double f; memcpy(&f, &x, 8); return f; }
static inline long long __double_as_longlong(double f) { long long x; memcpy(&x, &f, 8); return x; }
static inline int __double2hiint(double d) { return (int)(__double_as_longlong(d) >> 32); }
static inline int __double2loint(double d) { return (int)(__double_as_longlong(d) & 0xffffffff); }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1); x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4); x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}
static inline int __mul24(int a, int b) { return (int)(((long long)(a << 8 >> 8)) * (b << 8 >> 8)); }
static inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffff) * (b & 0xffffff); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline unsigned __sad(int a, int b, unsigned c) { return c + (unsigned)(a > b ? a - b : b - a); }
static inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return c + (a > b ? a - b : b - a); }
static inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
static inline int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
static inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
  return c;
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  unsigned long long v = ((unsigned long long)y << 32) | x; unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
  s &= 31; return s ? (hi << s) | (lo >> (32 - s)) : hi;
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  s &= 31; return s ? (lo >> s) | (hi << (32 - s)) : lo;
}
// float <-> int conversions with explicit rounding (current mode is round-to-nearest-even)
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
static inline unsigned __float2uint_rz(float x) { return (unsigned)x; }
static inline long long __float2ll_rn(float x) { return (long long)nearbyintf(x); }
static inline long long __float2ll_rz(float x) { return (long long)x; }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned x) { return (float)x; }
static inline float __ll2float_rn(long long x) { return (float)x; }
static inline int __double2int_rn(double x) { return (int)nearbyint(x); }
static inline int __double2int_rz(double x) { return (int)x; }
static inline float __double2float_rn(double x) { return (float)x; }
static inline double __int2double_rn(int x) { return (double)x; }

// cached / streaming loads and stores: plain memory accesses here
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldca(const T* p) { return *p; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline T __ldlu(const T* p) { return *p; }
template <class T> static inline T __ldcv(const T* p) { return *p; }
template <class T> static inline void __stwb(T* p, T v) { *p = v; }
template <class T> static inline void __stcg(T* p, T v) { *p = v; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
template <class T> static inline void __stwt(T* p, T v) { *p = v; }

// ---- atomics (cooperative scheduling: a read-modify-write is never interleaved) -----------------
#define LEAP_ATOMIC_ARITH(T) \
  static inline T atomicAdd(T* a, T v) { T o = *a; *a = o + v; return o; } \
  static inline T atomicSub(T* a, T v) { T o = *a; *a = o - v; return o; } \
  static inline T atomicExch(T* a, T v) { T o = *a; *a = v; return o; } \
  static inline T atomicMin(T* a, T v) { T o = *a; *a = v < o ? v : o; return o; } \
  static inline T atomicMax(T* a, T v) { T o = *a; *a = v > o ? v : o; return o; }
#define LEAP_ATOMIC_INT(T) LEAP_ATOMIC_ARITH(T) \
  static inline T atomicAnd(T* a, T v) { T o = *a; *a = o & v; return o; } \
  static inline T atomicOr(T* a, T v) { T o = *a; *a = o | v; return o; } \
  static inline T atomicXor(T* a, T v) { T o = *a; *a = o ^ v; return o; } \
  static inline T atomicCAS(T* a, T cmp, T v) { T o = *a; if (o == cmp) *a = v; return o; }
LEAP_ATOMIC_INT(int)
LEAP_ATOMIC_INT(unsigned int)
LEAP_ATOMIC_INT(unsigned long long)
LEAP_ATOMIC_INT(long long)
LEAP_ATOMIC_ARITH(float)
LEAP_ATOMIC_ARITH(double)
static inline unsigned short atomicCAS(unsigned short* a, unsigned short cmp, unsigned short v) {
  unsigned short o = *a; if (o == cmp) *a = v; return o;
}
static inline unsigned atomicInc(unsigned* a, unsigned v) { unsigned o = *a; *a = (o >= v) ? 0 : o + 1; return o; }
static inline unsigned atomicDec(unsigned* a, unsigned v) { unsigned o = *a; *a = (o == 0 || o > v) ? v : o - 1; return o; }
#define LEAP_ATOMIC_SCOPED(op) \
  template <class P, class... R> static inline auto op##_block(P p, R... r) -> decltype(op(p, r...)) { return op(p, r...); } \
  template <class P, class... R> static inline auto op##_system(P p, R... r) -> decltype(op(p, r...)) { return op(p, r...); }
LEAP_ATOMIC_SCOPED(atomicAdd) LEAP_ATOMIC_SCOPED(atomicSub) LEAP_ATOMIC_SCOPED(atomicExch)
LEAP_ATOMIC_SCOPED(atomicMin) LEAP_ATOMIC_SCOPED(atomicMax) LEAP_ATOMIC_SCOPED(atomicCAS)
LEAP_ATOMIC_SCOPED(atomicAnd) LEAP_ATOMIC_SCOPED(atomicOr) LEAP_ATOMIC_SCOPED(atomicXor)

// ---- __half and __nv_bfloat16 ------------------------------------------------------------------
namespace __cpu {
static inline unsigned short f2h(float f) {
  uint32_t x; memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // rounds to infinity
  if (ax < 0x38800000u) {  // below 2^-14: a subnormal half (or zero), unit 2^-24
    float a; memcpy(&a, &ax, 4);
    return (unsigned short)(sign | (uint32_t)nearbyintf(a * 16777216.0f));
  }
  uint32_t mant = ax & 0x7fffffu, h = ((((ax >> 23) - 127 + 15)) << 10) | (mant >> 13), rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (unsigned short)(sign | h);
}
static inline unsigned short f2h_rz(float f) {
  uint32_t x; memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x47800000u) return (unsigned short)(sign | 0x7bffu);
  if (ax < 0x38800000u) { float a; memcpy(&a, &ax, 4); return (unsigned short)(sign | (uint32_t)(a * 16777216.0f)); }
  return (unsigned short)(sign | ((((ax >> 23) - 127 + 15)) << 10) | ((ax & 0x7fffffu) >> 13));
}
static inline float h2f(unsigned short h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
  if (e == 0) { float v = (float)m * 5.9604644775390625e-08f; return sign ? -v : v; }
  bits = (e == 31) ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e - 15 + 127) << 23) | (m << 13));
  float f; memcpy(&f, &bits, 4); return f;
}
static inline unsigned short f2bf(float f) {
  uint32_t x; memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
static inline float bf2f(unsigned short b) { uint32_t x = (uint32_t)b << 16; float f; memcpy(&f, &x, 4); return f; }
}  // namespace __cpu

struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };

#define LEAP_HALF_TYPE(H, TO, FROM)                                                                     \
  struct H {                                                                                            \
    unsigned short __x;                                                                                 \
    H() = default;                                                                                      \
    H(const H##_raw& r) : __x(r.x) {}                                                                  \
    H(float f) : __x(__cpu::TO(f)) {}                                                                   \
    H(double d) : __x(__cpu::TO((float)d)) {}                                                           \
    H(int i) : __x(__cpu::TO((float)i)) {}                                                              \
    H(unsigned int i) : __x(__cpu::TO((float)i)) {}                                                     \
    H(long long i) : __x(__cpu::TO((float)i)) {}                                                        \
    H(unsigned long long i) : __x(__cpu::TO((float)i)) {}                                               \
    H(short i) : __x(__cpu::TO((float)i)) {}                                                            \
    H(unsigned short i) : __x(__cpu::TO((float)i)) {}                                                   \
    operator float() const { return __cpu::FROM(__x); }                                                 \
    operator H##_raw() const { H##_raw r; r.x = __x; return r; }                                        \
    H& operator=(float f) { __x = __cpu::TO(f); return *this; }                                         \
    H& operator=(double d) { __x = __cpu::TO((float)d); return *this; }                                 \
    H& operator=(const H##_raw& r) { __x = r.x; return *this; }                                         \
    H& operator+=(const H& o) { *this = H((float)*this + (float)o); return *this; }                     \
    H& operator-=(const H& o) { *this = H((float)*this - (float)o); return *this; }                     \
    H& operator*=(const H& o) { *this = H((float)*this * (float)o); return *this; }                     \
    H& operator/=(const H& o) { *this = H((float)*this / (float)o); return *this; }                     \
    H& operator++() { *this = H((float)*this + 1.0f); return *this; }                                   \
    H& operator--() { *this = H((float)*this - 1.0f); return *this; }                                   \
    H operator++(int) { H o = *this; ++*this; return o; }                                               \
    H operator--(int) { H o = *this; --*this; return o; }                                               \
  };                                                                                                    \
  static inline H operator+(const H& a, const H& b) { return H((float)a + (float)b); }                 \
  static inline H operator-(const H& a, const H& b) { return H((float)a - (float)b); }                 \
  static inline H operator*(const H& a, const H& b) { return H((float)a * (float)b); }                 \
  static inline H operator/(const H& a, const H& b) { return H((float)a / (float)b); }                 \
  static inline H operator-(const H& a) { H r; r.__x = a.__x ^ 0x8000u; return r; }                    \
  static inline H operator+(const H& a) { return a; }                                                  \
  static inline bool operator==(const H& a, const H& b) { return (float)a == (float)b; }               \
  static inline bool operator!=(const H& a, const H& b) { return (float)a != (float)b; }               \
  static inline bool operator<(const H& a, const H& b) { return (float)a < (float)b; }                 \
  static inline bool operator>(const H& a, const H& b) { return (float)a > (float)b; }                 \
  static inline bool operator<=(const H& a, const H& b) { return (float)a <= (float)b; }               \
  static inline bool operator>=(const H& a, const H& b) { return (float)a >= (float)b; }               \
  static inline H __hadd(H a, H b) { return a + b; }                                                    \
  static inline H __hsub(H a, H b) { return a - b; }                                                    \
  static inline H __hmul(H a, H b) { return a * b; }                                                    \
  static inline H __hdiv(H a, H b) { return a / b; }                                                    \
  static inline H __hadd_rn(H a, H b) { return a + b; }                                                 \
  static inline H __hsub_rn(H a, H b) { return a - b; }                                                 \
  static inline H __hmul_rn(H a, H b) { return a * b; }                                                 \
  static inline H __hfma(H a, H b, H c) { return H(fmaf((float)a, (float)b, (float)c)); }              \
  static inline H __hneg(H a) { return -a; }                                                            \
  static inline H __habs(H a) { H r; r.__x = a.__x & 0x7fffu; return r; }                              \
  static inline H __hmax(H a, H b) { return (float)a != (float)a ? b : ((float)b != (float)b ? a : (a < b ? b : a)); } \
  static inline H __hmin(H a, H b) { return (float)a != (float)a ? b : ((float)b != (float)b ? a : (b < a ? b : a)); } \
  static inline bool __heq(H a, H b) { return a == b; }                                                 \
  static inline bool __hne(H a, H b) { return a != b; }                                                 \
  static inline bool __hlt(H a, H b) { return a < b; }                                                  \
  static inline bool __hgt(H a, H b) { return a > b; }                                                  \
  static inline bool __hle(H a, H b) { return a <= b; }                                                 \
  static inline bool __hge(H a, H b) { return a >= b; }                                                 \
  static inline bool __hisnan(H a) { return (float)a != (float)a; }                                     \
  static inline int __hisinf(H a) { float f = a; return std::isinf(f) ? (f < 0 ? -1 : 1) : 0; }         \
  static inline H hexp(H a) { return H(expf((float)a)); }                                               \
  static inline H hexp2(H a) { return H(exp2f((float)a)); }                                             \
  static inline H hexp10(H a) { return H(powf(10.0f, (float)a)); }                                      \
  static inline H hlog(H a) { return H(logf((float)a)); }                                               \
  static inline H hlog2(H a) { return H(log2f((float)a)); }                                             \
  static inline H hlog10(H a) { return H(log10f((float)a)); }                                           \
  static inline H hsqrt(H a) { return H(sqrtf((float)a)); }                                             \
  static inline H hrsqrt(H a) { return H(1.0f / sqrtf((float)a)); }                                     \
  static inline H hrcp(H a) { return H(1.0f / (float)a); }                                              \
  static inline H hsin(H a) { return H(sinf((float)a)); }                                               \
  static inline H hcos(H a) { return H(cosf((float)a)); }                                               \
  static inline H htanh(H a) { return H(tanhf((float)a)); }                                             \
  static inline H hceil(H a) { return H(ceilf((float)a)); }                                             \
  static inline H hfloor(H a) { return H(floorf((float)a)); }                                           \
  static inline H htrunc(H a) { return H(truncf((float)a)); }                                           \
  static inline H hrint(H a) { return H(nearbyintf((float)a)); }

LEAP_HALF_TYPE(__half, f2h, h2f)
LEAP_HALF_TYPE(__nv_bfloat16, f2bf, bf2f)
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;

#define LEAP_HALF2_TYPE(H2, H)                                                                          \
  struct __attribute__((aligned(4))) H2 {                                                               \
    H x, y;                                                                                             \
    H2() = default;                                                                                     \
    H2(H a, H b) : x(a), y(b) {}                                                                        \
  };                                                                                                    \
  static inline H2 operator+(const H2& a, const H2& b) { return H2(a.x + b.x, a.y + b.y); }            \
  static inline H2 operator-(const H2& a, const H2& b) { return H2(a.x - b.x, a.y - b.y); }            \
  static inline H2 operator*(const H2& a, const H2& b) { return H2(a.x * b.x, a.y * b.y); }            \
  static inline H2 operator/(const H2& a, const H2& b) { return H2(a.x / b.x, a.y / b.y); }            \
  static inline H2 __hadd2(H2 a, H2 b) { return a + b; }                                                \
  static inline H2 __hsub2(H2 a, H2 b) { return a - b; }                                                \
  static inline H2 __hmul2(H2 a, H2 b) { return a * b; }                                                \
  static inline H2 __h2div(H2 a, H2 b) { return a / b; }                                                \
  static inline H2 __hfma2(H2 a, H2 b, H2 c) { return H2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); } \
  static inline H2 __hneg2(H2 a) { return H2(-a.x, -a.y); }                                             \
  static inline H2 __habs2(H2 a) { return H2(__habs(a.x), __habs(a.y)); }                               \
  static inline H2 __hmax2(H2 a, H2 b) { return H2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }               \
  static inline H2 __hmin2(H2 a, H2 b) { return H2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }               \
  static inline H2 h2exp(H2 a) { return H2(hexp(a.x), hexp(a.y)); }                                     \
  static inline H2 h2sqrt(H2 a) { return H2(hsqrt(a.x), hsqrt(a.y)); }                                  \
  static inline float __low2float(H2 a) { return (float)a.x; }                                          \
  static inline float __high2float(H2 a) { return (float)a.y; }

LEAP_HALF2_TYPE(__half2, __half)
LEAP_HALF2_TYPE(__nv_bfloat162, __nv_bfloat16)
typedef __half2 half2;
typedef __nv_bfloat162 nv_bfloat162;

static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline __half __float2half_rz(float f) { __half h; h.__x = __cpu::f2h_rz(f); return h; }
static inline __half __double2half(double d) { return __half((float)d); }
static inline float __half2float(__half h) { return (float)h; }
static inline __half __int2half_rn(int i) { return __half((float)i); }
static inline __half __uint2half_rn(unsigned i) { return __half((float)i); }
static inline __half __ll2half_rn(long long i) { return __half((float)i); }
static inline int __half2int_rn(__half h) { return (int)nearbyintf((float)h); }
static inline int __half2int_rz(__half h) { return (int)(float)h; }
static inline int __half2int_rd(__half h) { return (int)floorf((float)h); }
static inline int __half2int_ru(__half h) { return (int)ceilf((float)h); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline short __half_as_short(__half h) { return (short)h.__x; }
static inline __half __ushort_as_half(unsigned short x) { __half h; h.__x = x; return h; }
static inline __half __short_as_half(short x) { __half h; h.__x = (unsigned short)x; return h; }
static inline __half2 __float2half2_rn(float f) { return __half2(__half(f), __half(f)); }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2(__half(a), __half(b)); }
static inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
static inline __half2 __half2half2(__half a) { return __half2(a, a); }
static inline float2 __half22float2(__half2 h) { return make_float2((float)h.x, (float)h.y); }
static inline __half2 __float22half2_rn(float2 f) { return __half2(__half(f.x), __half(f.y)); }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline __half2 __lowhigh2highlow(__half2 h) { return __half2(h.y, h.x); }
static inline __half2 __low2half2(__half2 h) { return __half2(h.x, h.x); }
static inline __half2 __high2half2(__half2 h) { return __half2(h.y, h.y); }
static inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2(a.x, b.x); }
static inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2(a.y, b.y); }
static inline __half atomicAdd(__half* a, __half v) { __half o = *a; *a = o + v; return o; }
static inline __half2 atomicAdd(__half2* a, __half2 v) { __half2 o = *a; *a = o + v; return o; }

static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rz(float f) {
  uint32_t x; memcpy(&x, &f, 4); __nv_bfloat16 b; b.__x = (unsigned short)(x >> 16); return b;
}
static inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16((float)d); }
static inline float __bfloat162float(__nv_bfloat16 b) { return (float)b; }
static inline __nv_bfloat16 __int2bfloat16_rn(int i) { return __nv_bfloat16((float)i); }
static inline int __bfloat162int_rn(__nv_bfloat16 b) { return (int)nearbyintf((float)b); }
static inline int __bfloat162int_rz(__nv_bfloat16 b) { return (int)(float)b; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { __nv_bfloat16 b; b.__x = x; return b; }
static inline __nv_bfloat162 __float2bfloat162_rn(float f) { return __nv_bfloat162(__nv_bfloat16(f), __nv_bfloat16(f)); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(b)); }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
static inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162(a, a); }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return make_float2((float)h.x, (float)h.y); }
static inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __nv_bfloat162(__nv_bfloat16(f.x), __nv_bfloat16(f.y)); }
static inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
static inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
static inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, __nv_bfloat16 v) { __nv_bfloat16 o = *a; *a = o + v; return o; }

// math-constant macros from math_constants.h
#define CUDART_INF_F INFINITY
#define CUDART_NAN_F NAN
#define CUDART_INF ((double)INFINITY)
#define CUDART_NAN ((double)NAN)
#define CUDART_PI_F 3.141592654f
#define CUDART_PI 3.1415926535897931e+0
#define CUDART_SQRT_HALF_F 0.707106781f
#define CUDART_SQRT_2PI_F 2.506628275f
#define CUDART_L2E_F 1.442695041f
#define CUDART_LN2_F 0.693147181f
#define CUDART_MAX_NORMAL_F FLT_MAX
#define CUDART_MIN_DENORM_F 1.40129846e-45f
#define CUDART_TWO_TO_126_F 8.507059173e37f
#define CUDART_ZERO_F 0.0f
#define CUDART_ONE_F 1.0f

// Device-side malloc/free draw from a bounded heap, as on a GPU (cudaLimitMallocHeapSize, 8 MiB by
// default): past it malloc returns NULL instead of exhausting the host. translate.py #undefs these
// two macros before the runtime, which uses the real ones.
// (glibc's __libc_malloc/__libc_free: `malloc` and `free` themselves are then symbols the user's code
// may not link against, so `(malloc)(n)`, which no macro replaces, is refused by build.py's check.)
extern "C" void* __libc_malloc(size_t);
extern "C" void __libc_free(void*);
namespace __cpu {
static const size_t kDeviceHeapBytes = (size_t)8 << 20;
static size_t device_heap_used = 0;
static inline void* device_malloc(size_t n) {
  if (n > kDeviceHeapBytes - device_heap_used) return nullptr;
  size_t* p = (size_t*)__libc_malloc(n + 16);
  if (p == nullptr) return nullptr;
  p[0] = n;
  device_heap_used += n;
  return (char*)p + 16;
}
static inline void device_free(void* q) {
  if (q == nullptr) return;
  size_t* p = (size_t*)((char*)q - 16);
  device_heap_used -= p[0];
  __libc_free(p);
}
}  // namespace __cpu
#define malloc(n) __cpu::device_malloc(n)
#define free(p) __cpu::device_free(p)

#endif  // LEAP_CPU_PRELUDE_H
