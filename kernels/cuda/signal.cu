// Spin-kernel fallback for cuStreamWaitValue32 / cuStreamWriteValue32 on devices
// without stream memory operations. One thread each; the wait is bounded.
#include "streamcomm_device.h"

__device__ __forceinline__ sc_u64 sc_globaltimer() {
  sc_u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ bool sc_wait_done(sc_u32 word, sc_u32 value, sc_u32 cond) {
  switch (cond) {
    case SC_WAIT_EQ: return word == value;
    case SC_WAIT_AND: return (word & value) != 0u;
    case SC_WAIT_NOR: return ~(word | value) != 0u;
    default: return (int)(word - value) >= 0;  // GEQ, wrap-around safe like the driver's
  }
}

extern "C" __global__ void sc_spin_wait(struct sc_spin_wait_args a) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const sc_u64 start = sc_globaltimer();
  while (!sc_wait_done(*a.addr, a.value, a.cond)) {
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
