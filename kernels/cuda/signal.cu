// Spin-kernel fallback for cuStreamWaitValue32/64 / cuStreamWriteValue32 on devices
// without stream memory operations. One thread each; the wait is bounded.
#include "streamcomm_device.h"

__device__ __forceinline__ sc_u64 sc_globaltimer() {
  sc_u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The driver's conditions, on 32- or 64-bit words alike.
__device__ __forceinline__ bool sc_wait_done(sc_u64 word, sc_u64 value, sc_u32 cond, bool wide) {
  switch (cond) {
    case SC_WAIT_EQ: return word == value;
    case SC_WAIT_AND: return (word & value) != 0ull;
    case SC_WAIT_NOR: return (wide ? ~(word | value) : ~(sc_u32)(word | value)) != 0ull;
    default:  // GEQ, wrap-around safe like the driver's
      return wide ? (sc_i64)(word - value) >= 0 : (sc_i32)((sc_u32)word - (sc_u32)value) >= 0;
  }
}

__device__ __forceinline__ sc_u64 sc_read_word(const volatile void* addr, bool wide) {
  return wide ? *(const volatile sc_u64*)addr : (sc_u64) * (const volatile sc_u32*)addr;
}

extern "C" __global__ void sc_spin_wait(struct sc_spin_wait_args a) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const bool wide = a.wide != 0u;
  const sc_u64 value = wide ? a.value : (sc_u64)(sc_u32)a.value;
  const sc_u64 start = sc_globaltimer();
  while (!sc_wait_done(sc_read_word(a.addr, wide), value, a.cond, wide)) {
    if (sc_globaltimer() - start > a.timeout_ns) {
      *a.status = 1u;
      __threadfence_system();
      return;
    }
    __nanosleep(100);
  }
  __threadfence_system();  // later work of the stream sees what the writer published
}

extern "C" __global__ void sc_spin_write(struct sc_spin_write_args a) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  __threadfence_system();
  *a.addr = a.value;
  __threadfence_system();
}
