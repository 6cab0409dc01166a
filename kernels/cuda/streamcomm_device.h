// Layouts shared by the CUDA kernels and the host (kernels/src/cuda.rs mirrors
// every struct here with #[repr(C)] and asserts its size and offsets).
// Self-contained: NVRTC compiles it without any CUDA header.
#pragma once

typedef signed char sc_i8;
typedef unsigned char sc_u8;
typedef int sc_i32;
typedef unsigned int sc_u32;
typedef long long sc_i64;
typedef unsigned long long sc_u64;

#define SC_MAX_SRCS 8
#define SC_MAX_DSTS 8

// One doorbell: a 32-bit word alone on a 128-byte line (no false sharing between
// the words a host thread and a device thread poll).
#define SC_DOORBELL_STRIDE 128

// Arguments of every sc_reduce_copy_<dtype>_<op> kernel (passed by value):
// dsts[d][i] = finalise(op(srcs[0][i], ..., srcs[nsrcs-1][i])) for i < count.
// With nsrcs == 1 it is a copy to ndsts destinations (NCCL's recvCopySend);
// with 2 sources and 2 destinations it is recvReduceCopySend.
struct sc_reduce_args {
  const void* srcs[SC_MAX_SRCS];  // offset 0
  void* dsts[SC_MAX_DSTS];        // offset 64
  sc_u64 count;                   // offset 128, elements
  sc_u32 nsrcs;                   // offset 136, 1..=SC_MAX_SRCS
  sc_u32 ndsts;                   // offset 140, 1..=SC_MAX_DSTS
  sc_u32 avg_divisor;             // offset 144, avg kernels divide by it (>= 1)
  sc_u32 reserved;                // offset 148, 0
  // abort: a 32-bit word the kernel reads first (null: none); non-zero means
  // the communicator failed, and the kernel returns without touching any
  // buffer (a dead peer's memory may be gone).
  const volatile sc_u32* abort;   // offset 152
};                                // size 160

// Conditions of sc_spin_wait (the values of CU_STREAM_WAIT_VALUE_*).
#define SC_WAIT_GEQ 0u
#define SC_WAIT_EQ 1u
#define SC_WAIT_AND 2u
#define SC_WAIT_NOR 3u

// Arguments of sc_spin_wait: wait until the word at addr (32 bits, or 64
// with wide = 1) satisfies cond against value, or until timeout_ns passes,
// then write 1 to *status.
struct sc_spin_wait_args {
  const volatile void* addr;    // offset 0
  volatile sc_u32* status;      // offset 8, set to 1 on timeout
  sc_u64 timeout_ns;            // offset 16
  sc_u64 value;                 // offset 24
  sc_u32 cond;                  // offset 32
  sc_u32 wide;                  // offset 36, 1: a 64-bit word
};                              // size 40

// Arguments of sc_spin_write: *addr = value after all earlier work of the
// stream is visible to the system (like cuStreamWriteValue32's default).
struct sc_spin_write_args {
  volatile sc_u32* addr;  // offset 0
  sc_u32 value;           // offset 8
  sc_u32 reserved;        // offset 12
};                        // size 16
