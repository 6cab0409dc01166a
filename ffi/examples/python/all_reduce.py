"""All-reduce of numpy arrays through streamcomm's C API with ctypes.

Run as ranks by a launcher, e.g.:

    streamcomm-run -n 2 -- python3 ffi/examples/python/all_reduce.py

The library is found through STREAMCOMM_FFI_LIBRARY (a path to
libstreamcomm_ffi.so), else by the dynamic loader's usual search. Each rank
all-reduces fresh random float64 and int32 arrays (one in place) on a host
stream, checks every element against a reference computed with numpy, and
prints "rank R/N: all_reduce OK".
"""

import ctypes
import os
import sys

import numpy as np

# streamcomm.h, the parts this example uses.
SUCCESS = 0
FLOAT64, INT32 = 1, 6
SUM, MAX = 0, 3
DTYPES = {np.dtype(np.float64): FLOAT64, np.dtype(np.int32): INT32}


def load(path):
    lib = ctypes.CDLL(path)
    handle, handle_p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "streamcomm_comm_init_from_env": [handle_p],
        "streamcomm_comm_rank": [handle, ctypes.POINTER(ctypes.c_int)],
        "streamcomm_comm_size": [handle, ctypes.POINTER(ctypes.c_int)],
        "streamcomm_comm_destroy": [handle],
        "streamcomm_stream_create": [handle_p],
        "streamcomm_stream_synchronize": [handle],
        "streamcomm_stream_destroy": [handle],
        "streamcomm_all_reduce": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.c_int, ctypes.c_int, handle, handle],
        "streamcomm_broadcast": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_int, ctypes.c_int, handle, handle],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    lib.streamcomm_error_string.argtypes = [ctypes.c_int]
    lib.streamcomm_error_string.restype = ctypes.c_char_p
    lib.streamcomm_last_error.argtypes = []
    lib.streamcomm_last_error.restype = ctypes.c_char_p
    return lib


class Api:
    """Calls that raise on failure, with the library's message."""

    def __init__(self, lib):
        self.lib = lib

    def __getattr__(self, name):
        fn = getattr(self.lib, "streamcomm_" + name)

        def call(*args):
            rc = fn(*args)
            if rc != SUCCESS:
                raise RuntimeError("streamcomm_%s: %s (%d): %s" % (
                    name, self.lib.streamcomm_error_string(rc).decode(), rc,
                    self.lib.streamcomm_last_error().decode()))
        return call


def all_reduce(api, send, recv, op, comm, stream):
    assert send.dtype == recv.dtype and send.size == recv.size
    assert send.flags.c_contiguous and recv.flags.c_contiguous
    api.all_reduce(send.ctypes.data, recv.ctypes.data, send.size, DTYPES[send.dtype], op,
                   comm, stream)


def main():
    api = Api(load(os.environ.get("STREAMCOMM_FFI_LIBRARY", "libstreamcomm_ffi.so")))
    comm, stream = ctypes.c_void_p(), ctypes.c_void_p()
    api.comm_init_from_env(ctypes.byref(comm))
    rank, size = ctypes.c_int(), ctypes.c_int()
    api.comm_rank(comm, ctypes.byref(rank))
    api.comm_size(comm, ctypes.byref(size))
    rank, size = rank.value, size.value
    api.stream_create(ctypes.byref(stream))

    # Rank 0 draws a fresh seed and broadcasts it; every rank can then
    # generate every rank's input and compute the reference itself.
    seed = np.zeros(1, dtype=np.int32)
    if rank == 0:
        seed[0] = np.random.SeedSequence().generate_state(1)[0] % (2**31 - 1)
    api.broadcast(seed.ctypes.data, seed.ctypes.data, 1, INT32, 0, comm, stream)
    api.stream_synchronize(stream)

    def inputs(r, n):
        g = np.random.default_rng([int(seed[0]), r])
        return g.uniform(-1, 1, n), g.integers(-1000, 1000, n, dtype=np.int32)

    n = 100_003  # several slots: the pipelined path
    floats, ints = inputs(rank, n)
    out = np.full(n, np.nan)
    all_reduce(api, floats, out, SUM, comm, stream)
    ints_in_place = ints.copy()
    all_reduce(api, ints_in_place, ints_in_place, MAX, comm, stream)
    # Enqueued only: the arrays must stay alive until the stream is synchronized.
    api.stream_synchronize(stream)

    want_f = np.zeros(n)
    want_i = np.full(n, np.iinfo(np.int32).min, dtype=np.int32)
    for r in range(size):
        f, i = inputs(r, n)
        want_f += f
        want_i = np.maximum(want_i, i)
    if not np.allclose(out, want_f, rtol=0, atol=1e-12 * size):
        bad = np.flatnonzero(~np.isclose(out, want_f, rtol=0, atol=1e-12 * size))
        sys.exit("rank %d: float64 sum differs at %d elements, first [%d]: %r vs %r"
                 % (rank, bad.size, bad[0], out[bad[0]], want_f[bad[0]]))
    if not np.array_equal(ints_in_place, want_i):
        bad = np.flatnonzero(ints_in_place != want_i)
        sys.exit("rank %d: int32 max (in place) differs at %d elements" % (rank, bad.size))

    api.stream_destroy(stream)
    api.comm_destroy(comm)
    print("rank %d/%d: all_reduce OK" % (rank, size))


if __name__ == "__main__":
    main()
