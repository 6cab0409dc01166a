/*
 * streamcomm.h: the C API of streamcomm (library: libstreamcomm_ffi.so / .a).
 *
 * Stream-ordered collectives, point-to-point and barriers, shaped like NCCL:
 * a call such as streamcomm_all_reduce() appends the operation to a stream
 * and returns at once; the operation runs when the stream reaches it, in
 * order with the stream's other work. Synchronize the stream (or an event
 * recorded after the operation) before reading results.
 *
 * RESULTS AND ERRORS
 *   Every function returns a streamcomm_result_t (except the two that return
 *   strings). On failure, streamcomm_last_error() gives a message naming the
 *   function and what was wrong. No call crashes on a bad argument: NULL
 *   pointers, unknown enum values, misaligned buffers, too-small output
 *   buffers, negative ranks and destroyed handles are all reported. (A
 *   non-NULL pointer to memory that is not what the call says, e.g. a buffer
 *   shorter than its count, cannot be detected: that is the caller's part.)
 *
 * HANDLES
 *   streamcomm_comm_t, streamcomm_stream_t and streamcomm_event_t are opaque
 *   handles (never dereference them). A destroyed handle, a handle of another
 *   kind, or any other value returns STREAMCOMM_INVALID_HANDLE; destroying
 *   a handle twice is reported the same way.
 *
 * STREAMS
 *   Host streams (streamcomm_stream_t): CPU streams created by
 *   streamcomm_stream_create(), with CUDA stream semantics (in order, events,
 *   callbacks), for host buffers. CUDA streams (cudaStream_t / CUstream,
 *   passed as void*) for device buffers, through the streamcomm_cuda_*
 *   functions at the end of this header. Passing a cudaStream_t where a
 *   streamcomm_stream_t is expected returns STREAMCOMM_INVALID_HANDLE.
 *
 * BUFFERS
 *   Buffers are host memory passed as pointer + element count + data type,
 *   as with NCCL. A buffer must be aligned to its element size, and may be
 *   NULL only when its count is 0 (or where a function says it is unused).
 *   The library does not copy it: it must stay valid, and the program must
 *   neither read nor write it, until the operation has completed on its
 *   stream. Send and receive buffers must not overlap, except in NCCL's
 *   in-place layouts (given with each collective), which run in place.
 *
 * THREADS
 *   All functions may be called from any thread. A communicator's operations
 *   run in the order they were issued, whatever their stream; every rank must
 *   issue them in the same order. The last error and group state are per
 *   thread.
 *
 * TIMEOUTS
 *   Every wait is bounded by STREAMCOMM_TIMEOUT (seconds); a failed or
 *   aborted peer fails the operations waiting on it instead of hanging them.
 */
#ifndef STREAMCOMM_H
#define STREAMCOMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Result codes                                                              */
/* ------------------------------------------------------------------------ */

/* What every function returns. Values are stable: new codes are appended. */
typedef enum {
  /* The call succeeded. */
  STREAMCOMM_SUCCESS = 0,
  /* An argument was NULL, out of range (negative rank, root or peer out of
   * range), an unknown enum value, a misaligned buffer, overlapping send and
   * receive buffers, or an output buffer too small. */
  STREAMCOMM_INVALID_ARGUMENT = 1,
  /* Not allowed now: a collective, barrier, split or shrink inside a group,
   * streamcomm_group_end() without streamcomm_group_start(), a blocking call
   * (synchronize, destroy a stream, host barrier, split, shrink) from a
   * stream callback, a shrink by a rank on its own exclusion list. */
  STREAMCOMM_INVALID_USAGE = 2,
  /* A facility this build or machine lacks (e.g. a transport to a peer). */
  STREAMCOMM_UNAVAILABLE = 3,
  /* A wait exceeded STREAMCOMM_TIMEOUT. */
  STREAMCOMM_TIMEOUT = 4,
  /* The communicator was aborted (streamcomm_comm_abort() or an earlier
   * error). */
  STREAMCOMM_ABORTED = 5,
  /* A peer rank failed, disconnected, or issued a mismatched operation. */
  STREAMCOMM_REMOTE_FAILED = 6,
  /* The shared-memory or tcp transport failed. */
  STREAMCOMM_TRANSPORT_ERROR = 7,
  /* The ranks could not meet (bad unique id, unreachable root, timeout). */
  STREAMCOMM_BOOTSTRAP_ERROR = 8,
  /* An operating-system call failed. */
  STREAMCOMM_SYSTEM_ERROR = 9,
  /* A callback enqueued with streamcomm_stream_enqueue_callback() returned
   * non-zero (the stream keeps this error). */
  STREAMCOMM_USER_CALLBACK_ERROR = 10,
  /* A handle was NULL, of another kind, or already destroyed. */
  STREAMCOMM_INVALID_HANDLE = 11,
  /* A bug in streamcomm (e.g. a caught panic); the last error says more. */
  STREAMCOMM_INTERNAL_ERROR = 12
} streamcomm_result_t;

/* A static description of a result code (never NULL; "unknown result code"
 * for other values). */
const char *streamcomm_error_string(streamcomm_result_t result);

/* The message of this thread's last failed call, naming the function and the
 * cause (never NULL; "" if nothing has failed yet on this thread). Valid
 * until this thread's next failing call; successful calls leave it alone. */
const char *streamcomm_last_error(void);

/* ------------------------------------------------------------------------ */
/* Data types and reduction operators                                        */
/* ------------------------------------------------------------------------ */

/* Element types (the values of streamcomm_kernels::DataType). */
typedef enum {
  STREAMCOMM_FLOAT32 = 0,  /* float */
  STREAMCOMM_FLOAT64 = 1,  /* double */
  STREAMCOMM_FLOAT16 = 2,  /* IEEE binary16, as uint16_t bits */
  STREAMCOMM_BFLOAT16 = 3, /* bfloat16, as uint16_t bits */
  STREAMCOMM_INT8 = 4,     /* int8_t */
  STREAMCOMM_UINT8 = 5,    /* uint8_t */
  STREAMCOMM_INT32 = 6,    /* int32_t */
  STREAMCOMM_UINT32 = 7,   /* uint32_t */
  STREAMCOMM_INT64 = 8,    /* int64_t */
  STREAMCOMM_UINT64 = 9    /* uint64_t */
} streamcomm_data_type_t;

/* Reduction operators (the values of streamcomm_kernels::ReduceOp). Integer
 * sums and products wrap; STREAMCOMM_AVG divides the sum by the number of
 * ranks once (truncating for integers). */
typedef enum {
  STREAMCOMM_SUM = 0,
  STREAMCOMM_PROD = 1,
  STREAMCOMM_MIN = 2,
  STREAMCOMM_MAX = 3,
  STREAMCOMM_AVG = 4
} streamcomm_reduce_op_t;

/* ------------------------------------------------------------------------ */
/* Handles                                                                   */
/* ------------------------------------------------------------------------ */

/* A communicator: nranks processes (or threads) that communicate. */
typedef struct streamcomm_comm *streamcomm_comm_t;
/* A host stream: an in-order queue of work run by a CPU thread. */
typedef struct streamcomm_stream *streamcomm_stream_t;
/* A marker in a stream that other streams and the host can wait for. */
typedef struct streamcomm_event *streamcomm_event_t;

/* ------------------------------------------------------------------------ */
/* Unique id                                                                 */
/* ------------------------------------------------------------------------ */

/* Size of streamcomm_unique_id_t. */
#define STREAMCOMM_UNIQUE_ID_BYTES 44
/* Always enough for streamcomm_unique_id_to_string(), NUL included. */
#define STREAMCOMM_UNIQUE_ID_STRING_BYTES 128

/* Names a communicator-to-be: the bootstrap root's address and a secret.
 * Plain bytes: copy it to every rank any way you like (MPI_Bcast, a file,
 * a socket); it is validated when used. Treat it as a secret. */
typedef struct {
  unsigned char internal[STREAMCOMM_UNIQUE_ID_BYTES];
} streamcomm_unique_id_t;

/* Creates a unique id in *out and starts its bootstrap root in this process
 * (a background thread that lives until the process exits). Call it on one
 * rank, then give the id to all.
 * Errors: INVALID_ARGUMENT (out NULL), SYSTEM_ERROR (no port). */
streamcomm_result_t streamcomm_get_unique_id(streamcomm_unique_id_t *out);

/* Writes the id's text form "ADDR:PORT/SECRET" (the format of the
 * STREAMCOMM_UNIQUE_ID variable), NUL-terminated, into buf of len bytes.
 * Errors: INVALID_ARGUMENT (id or buf NULL, id not valid, len too small). */
streamcomm_result_t streamcomm_unique_id_to_string(const streamcomm_unique_id_t *id, char *buf,
                                                   size_t len);

/* Parses the text form into *out.
 * Errors: INVALID_ARGUMENT (NULL argument, malformed text; the message never
 * repeats the secret). */
streamcomm_result_t streamcomm_unique_id_from_string(const char *text,
                                                     streamcomm_unique_id_t *out);

/* ------------------------------------------------------------------------ */
/* Communicators                                                             */
/* ------------------------------------------------------------------------ */

/* Joins the communicator named by *id as rank of nranks, with the
 * configuration from STREAMCOMM_* variables. Collective: every rank calls it
 * and it returns once all have joined. *comm is NULL on failure.
 * Errors: INVALID_ARGUMENT (comm or id NULL, invalid id, nranks < 1, rank
 * negative or >= nranks), BOOTSTRAP_ERROR, TIMEOUT, UNAVAILABLE,
 * SYSTEM_ERROR. */
streamcomm_result_t streamcomm_comm_init_rank(streamcomm_comm_t *comm, int nranks,
                                              const streamcomm_unique_id_t *id, int rank);

/* Joins the communicator a launcher describes in the environment:
 * streamcomm-run, torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
 * Slurm, Open MPI or PMI. *comm is NULL on failure.
 * Errors: INVALID_ARGUMENT (comm NULL, a variable missing or malformed: the
 * message names it), then as streamcomm_comm_init_rank(). */
streamcomm_result_t streamcomm_comm_init_from_env(streamcomm_comm_t *comm);

/* The color of a rank that joins no new communicator in
 * streamcomm_comm_split() (NCCL_SPLIT_NOCOLOR, MPI_UNDEFINED). */
#define STREAMCOMM_SPLIT_NOCOLOR (-1)

/* Splits comm into groups, as MPI_Comm_split and ncclCommSplit: the ranks
 * that pass the same color (>= 0) form one new communicator, stored in
 * *newcomm, in which they are ranked by key, then by their rank in comm. A
 * rank passing STREAMCOMM_SPLIT_NOCOLOR joins none and gets *newcomm = NULL.
 * Collective over comm: every rank calls it, at the same place in its order
 * of operations on comm, and it returns once this rank's new communicator
 * is ready. The new communicator is a full one, with comm's configuration
 * and connections of its own: it may be used at the same time as comm and
 * its siblings, and may outlive comm; destroy each with
 * streamcomm_comm_destroy(). *newcomm is NULL on failure.
 * Errors: INVALID_HANDLE, INVALID_ARGUMENT (newcomm NULL or misaligned, color
 * negative other than STREAMCOMM_SPLIT_NOCOLOR), INVALID_USAGE (inside a
 * group or a stream callback), comm's stored error, TIMEOUT (a rank did not
 * call it: the message names it), REMOTE_FAILED (a rank made another call
 * instead), then as streamcomm_comm_init_rank(). */
streamcomm_result_t streamcomm_comm_split(streamcomm_comm_t comm, int color, int key,
                                          streamcomm_comm_t *newcomm);

/* The ranks of comm still alive, less the nexclude ranks listed in exclude,
 * as a new communicator in *newcomm, ranked in comm's order (as ULFM's
 * MPIX_Comm_shrink and ncclCommShrink). Called after a failure
 * (REMOTE_FAILED, TRANSPORT_ERROR, TIMEOUT) by every survivor that is not
 * excluded, or on a healthy communicator by every rank that is not; all
 * pass the same list (exclude may be NULL when nexclude is 0; duplicates
 * are allowed). Excluded ranks do not call it. The survivors find the dead
 * themselves: a rank whose process is gone, or that does not take part
 * within STREAMCOMM_TIMEOUT, is left out. Every caller gets the same
 * membership, or every caller an error. comm stays as it was (a failed one
 * stays failed); destroy it as usual. *newcomm is NULL on failure.
 * Errors: INVALID_HANDLE, INVALID_ARGUMENT (newcomm NULL or misaligned;
 * exclude NULL or misaligned with nexclude > 0; an entry negative or not a
 * rank of comm), INVALID_USAGE (this rank is on the list; inside a group or
 * a stream callback), TIMEOUT or BOOTSTRAP_ERROR (the survivors could not
 * agree), then as streamcomm_comm_init_rank(). */
streamcomm_result_t streamcomm_comm_shrink(streamcomm_comm_t comm, const int *exclude,
                                           size_t nexclude, streamcomm_comm_t *newcomm);

/* Releases the communicator. Operations already enqueued keep what they need
 * and still complete; synchronize their streams to see them finish.
 * Errors: INVALID_HANDLE. */
streamcomm_result_t streamcomm_comm_destroy(streamcomm_comm_t comm);

/* Fails the communicator from any thread, then releases it: this rank's
 * pending operations end with STREAMCOMM_ABORTED, peers waiting on it with
 * STREAMCOMM_REMOTE_FAILED, instead of waiting for their timeout.
 * Errors: INVALID_HANDLE. */
streamcomm_result_t streamcomm_comm_abort(streamcomm_comm_t comm);

/* Stores in *result the code of the error that failed the communicator, or
 * STREAMCOMM_SUCCESS; never blocks. When there is one, its message becomes
 * this thread's last error.
 * Errors: INVALID_HANDLE, INVALID_ARGUMENT (result NULL or misaligned). */
streamcomm_result_t streamcomm_comm_get_async_error(streamcomm_comm_t comm,
                                                    streamcomm_result_t *result);

/* Stores this process's rank in *rank.
 * Errors: INVALID_HANDLE, INVALID_ARGUMENT (rank NULL or misaligned). */
streamcomm_result_t streamcomm_comm_rank(streamcomm_comm_t comm, int *rank);

/* Stores the number of ranks in *size.
 * Errors: INVALID_HANDLE, INVALID_ARGUMENT (size NULL or misaligned). */
streamcomm_result_t streamcomm_comm_size(streamcomm_comm_t comm, int *size);

/* ------------------------------------------------------------------------ */
/* Streams and events                                                        */
/* ------------------------------------------------------------------------ */

/* Creates a host stream in *stream.
 * Errors: INVALID_ARGUMENT (stream NULL or misaligned), SYSTEM_ERROR. */
streamcomm_result_t streamcomm_stream_create(streamcomm_stream_t *stream);

/* Waits for the stream's enqueued work (bounded by its timeouts), then
 * destroys it; returns the stream's error, if any of its work failed (the
 * stream is destroyed then too: only INVALID_HANDLE and INVALID_USAGE leave
 * it alive).
 * Errors: INVALID_HANDLE, INVALID_USAGE (from a stream callback), or the
 * code of the failed work. */
streamcomm_result_t streamcomm_stream_destroy(streamcomm_stream_t stream);

/* Blocks until everything enqueued on the stream so far has finished. Errors
 * are sticky, as with CUDA: once an operation fails, later work on the
 * stream is skipped and every synchronize returns that error.
 * Errors: INVALID_HANDLE, INVALID_USAGE (from a stream callback), or the
 * code of the failed work (TIMEOUT, REMOTE_FAILED, ABORTED, ...). */
streamcomm_result_t streamcomm_stream_synchronize(streamcomm_stream_t stream);

/* A function run on a stream; return 0 on success. Any other value fails the
 * stream with STREAMCOMM_USER_CALLBACK_ERROR. */
typedef int (*streamcomm_callback_t)(void *user_data);

/* Enqueues callback(user_data), the host backend's kernel launch. It runs on
 * another thread (the stream's worker, or a thread synchronizing the stream),
 * after the stream's earlier work and before its later work. user_data must
 * stay valid until it has run. It must not call blocking streamcomm functions
 * (they return STREAMCOMM_INVALID_USAGE there) and must not unwind (longjmp,
 * C++ exceptions) out of the call.
 * Errors: INVALID_HANDLE, INVALID_ARGUMENT (callback NULL). */
streamcomm_result_t streamcomm_stream_enqueue_callback(streamcomm_stream_t stream,
                                                       streamcomm_callback_t callback,
                                                       void *user_data);

/* Makes the stream's later work wait until the event's last record has
 * completed (a wait longer than the stream's timeout fails the stream with
 * STREAMCOMM_TIMEOUT). Errors: INVALID_HANDLE. */
streamcomm_result_t streamcomm_stream_wait_event(streamcomm_stream_t stream,
                                                 streamcomm_event_t event);

/* Creates an event in *event; a never-recorded event is complete.
 * Errors: INVALID_ARGUMENT (event NULL or misaligned). */
streamcomm_result_t streamcomm_event_create(streamcomm_event_t *event);

/* Destroys the event; streams already waiting on it are unaffected.
 * Errors: INVALID_HANDLE. */
streamcomm_result_t streamcomm_event_destroy(streamcomm_event_t event);

/* Records the event at the current end of the stream.
 * Errors: INVALID_HANDLE. */
streamcomm_result_t streamcomm_event_record(streamcomm_event_t event,
                                            streamcomm_stream_t stream);

/* Blocks until the event's last record has completed (at most the default
 * timeout, 300 s). Errors: INVALID_HANDLE, INVALID_USAGE (from a stream
 * callback), TIMEOUT. */
streamcomm_result_t streamcomm_event_synchronize(streamcomm_event_t event);

/* Stores 1 in *done when the event's last record has completed, else 0;
 * never blocks. Errors: INVALID_HANDLE, INVALID_ARGUMENT (done NULL or
 * misaligned). */
streamcomm_result_t streamcomm_event_query(streamcomm_event_t event, int *done);

/* ------------------------------------------------------------------------ */
/* Collectives                                                               */
/* ------------------------------------------------------------------------ */
/*
 * Common to all collectives: enqueued on the stream, not complete on return.
 * Errors at the call: INVALID_ARGUMENT (unknown datatype or op, negative or
 * out-of-range root, a needed buffer NULL with a count above 0, a buffer not
 * aligned to its element size, send and receive buffers overlapping outside
 * the in-place layout, a size that overflows), INVALID_HANDLE (comm or
 * stream), INVALID_USAGE (inside a group), or the communicator's stored
 * error (ABORTED, REMOTE_FAILED, TIMEOUT, ...) once it has failed. Errors
 * while the operation runs (a peer failing, a mismatched call on another
 * rank, a timeout) are returned by streamcomm_stream_synchronize().
 */

/* Element-wise reduction of every rank's sendbuff (count elements) into
 * every rank's recvbuff. In place when sendbuff == recvbuff. */
streamcomm_result_t streamcomm_all_reduce(const void *sendbuff, void *recvbuff, size_t count,
                                          streamcomm_data_type_t datatype,
                                          streamcomm_reduce_op_t op, streamcomm_comm_t comm,
                                          streamcomm_stream_t stream);

/* Copies root's sendbuff (count elements) into every rank's recvbuff.
 * sendbuff is read on the root only (elsewhere it may be NULL). In place when
 * sendbuff == recvbuff. */
streamcomm_result_t streamcomm_broadcast(const void *sendbuff, void *recvbuff, size_t count,
                                         streamcomm_data_type_t datatype, int root,
                                         streamcomm_comm_t comm, streamcomm_stream_t stream);

/* Reduces every rank's sendbuff (count elements) into root's recvbuff.
 * recvbuff is written on the root only (elsewhere it may be NULL). In place
 * when sendbuff == recvbuff. */
streamcomm_result_t streamcomm_reduce(const void *sendbuff, void *recvbuff, size_t count,
                                      streamcomm_data_type_t datatype, streamcomm_reduce_op_t op,
                                      int root, streamcomm_comm_t comm,
                                      streamcomm_stream_t stream);

/* Concatenates every rank's sendbuff (sendcount elements), in rank order,
 * into every rank's recvbuff (nranks * sendcount elements). In place when
 * sendbuff == recvbuff + rank * sendcount. */
streamcomm_result_t streamcomm_all_gather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                          streamcomm_data_type_t datatype, streamcomm_comm_t comm,
                                          streamcomm_stream_t stream);

/* Reduces every rank's sendbuff (nranks * recvcount elements) and leaves
 * block rank of the result in recvbuff (recvcount elements). In place when
 * recvbuff == sendbuff + rank * recvcount. */
streamcomm_result_t streamcomm_reduce_scatter(const void *sendbuff, void *recvbuff,
                                              size_t recvcount, streamcomm_data_type_t datatype,
                                              streamcomm_reduce_op_t op, streamcomm_comm_t comm,
                                              streamcomm_stream_t stream);

/* Sends block j (count elements) of sendbuff to rank j, which stores it as
 * block rank of its recvbuff; both hold nranks * count elements. Never in
 * place: the buffers must not overlap. */
streamcomm_result_t streamcomm_all_to_all(const void *sendbuff, void *recvbuff, size_t count,
                                          streamcomm_data_type_t datatype, streamcomm_comm_t comm,
                                          streamcomm_stream_t stream);

/* Gathers every rank's sendbuff (count elements) into root's recvbuff
 * (nranks * count elements, block j from rank j). recvbuff is used on the
 * root only (elsewhere it may be NULL). Not in place: the buffers must not
 * overlap. */
streamcomm_result_t streamcomm_gather(const void *sendbuff, void *recvbuff, size_t count,
                                      streamcomm_data_type_t datatype, int root,
                                      streamcomm_comm_t comm, streamcomm_stream_t stream);

/* Sends block j (count elements) of root's sendbuff (nranks * count
 * elements) to rank j's recvbuff (count elements). sendbuff is used on the
 * root only (elsewhere it may be NULL). Not in place: the buffers must not
 * overlap. */
streamcomm_result_t streamcomm_scatter(const void *sendbuff, void *recvbuff, size_t count,
                                       streamcomm_data_type_t datatype, int root,
                                       streamcomm_comm_t comm, streamcomm_stream_t stream);

/* All-to-all with per-rank counts and displacements, in elements, as
 * MPI_Alltoallv: sendcounts[j] elements at sendbuff + sdispls[j] go to rank
 * j, which stores them at recvbuff + rdispls[rank]; recvcounts[j] must be at
 * least what rank j sends here. Each of the four arrays holds nranks entries
 * (read during the call); counts may be 0. Not in place: the buffers must
 * not overlap. Extra errors: INVALID_ARGUMENT for a NULL or misaligned
 * array, overlapping receive regions, a displacement + count that
 * overflows. */
streamcomm_result_t streamcomm_all_to_allv(const void *sendbuff, const size_t *sendcounts,
                                           const size_t *sdispls, void *recvbuff,
                                           const size_t *recvcounts, const size_t *rdispls,
                                           streamcomm_data_type_t datatype,
                                           streamcomm_comm_t comm, streamcomm_stream_t stream);

/* All-gather with a count per rank, in elements, as MPI_Allgatherv: this
 * rank's sendcount elements (sendcount must be recvcounts[rank]) and every
 * other rank's go to recvbuff + rdispls[j] on every rank. Both arrays hold
 * nranks entries (read during the call); counts may be 0. Not in place: the
 * buffers must not overlap. Posted as one group of sends and receives.
 * Extra errors: INVALID_ARGUMENT for a NULL or misaligned array, a
 * sendcount other than recvcounts[rank], overlapping receive regions, a
 * displacement + count that overflows. */
streamcomm_result_t streamcomm_all_gatherv(const void *sendbuff, size_t sendcount, void *recvbuff,
                                           const size_t *recvcounts, const size_t *rdispls,
                                           streamcomm_data_type_t datatype,
                                           streamcomm_comm_t comm, streamcomm_stream_t stream);

/* ------------------------------------------------------------------------ */
/* Point-to-point and groups                                                 */
/* ------------------------------------------------------------------------ */

/* Sends count elements to peer, which posts a matching streamcomm_recv().
 * Messages between two ranks arrive in posting order. As with NCCL, a send
 * outside a group may wait for its receiver (a large one cannot complete
 * before the receiver posts), so two ranks that both send first must use a
 * group. A rank may send to itself only inside a group, paired with a
 * receive from itself.
 * Errors: as the collectives, plus INVALID_ARGUMENT for a peer out of range
 * (or equal to this rank outside a group). Inside a group the operation is
 * checked now and enqueued by the group's end. */
streamcomm_result_t streamcomm_send(const void *sendbuff, size_t count,
                                    streamcomm_data_type_t datatype, int peer,
                                    streamcomm_comm_t comm, streamcomm_stream_t stream);

/* Receives a message of at most count elements from peer into the front of
 * recvbuff (the rest is left untouched). A larger message, or one of another
 * type, fails the stream with STREAMCOMM_REMOTE_FAILED naming both sides.
 * Errors: as streamcomm_send(). */
streamcomm_result_t streamcomm_recv(void *recvbuff, size_t count, streamcomm_data_type_t datatype,
                                    int peer, streamcomm_comm_t comm, streamcomm_stream_t stream);

/* Starts a group on this thread: until the matching streamcomm_group_end(),
 * streamcomm_send() and streamcomm_recv() are checked and collected, then
 * enqueued as one unit that progresses them all together, so sends and
 * receives between ranks may be posted in any order without deadlock
 * (e.g. every rank sending right, then receiving left). Groups nest; only
 * the outermost end enqueues. All operations of a group must use one
 * communicator and one stream, and a receive buffer must not overlap any
 * other buffer of its group (INVALID_USAGE and INVALID_ARGUMENT at the call
 * that breaks the rule). Collectives and barriers inside a group return
 * INVALID_USAGE. Errors: none. */
streamcomm_result_t streamcomm_group_start(void);

/* Ends a group; the outermost end enqueues its operations on their stream
 * (enqueued, not complete, on return). If it fails, nothing of the group is
 * enqueued.
 * Errors: INVALID_USAGE (no group started), INVALID_HANDLE (the group's
 * communicator or stream was destroyed meanwhile), INVALID_ARGUMENT (the
 * group is invalid as a whole, e.g. a send to this rank without a matching
 * receive from it), the communicator's stored error. */
streamcomm_result_t streamcomm_group_end(void);

/* ------------------------------------------------------------------------ */
/* Barriers                                                                  */
/* ------------------------------------------------------------------------ */

/* Enqueues a barrier: the stream's later work starts after every rank's
 * stream has reached its barrier. Errors: INVALID_HANDLE, INVALID_USAGE
 * (inside a group), the communicator's stored error. */
streamcomm_result_t streamcomm_barrier(streamcomm_comm_t comm, streamcomm_stream_t stream);

/* Blocks the calling thread until every rank has called
 * streamcomm_barrier_host() (in issue order with the communicator's stream
 * operations). Errors: INVALID_HANDLE, INVALID_USAGE (inside a group or a
 * stream callback), TIMEOUT, REMOTE_FAILED, ABORTED. */
streamcomm_result_t streamcomm_barrier_host(streamcomm_comm_t comm);

/* ------------------------------------------------------------------------ */
/* CUDA streams                                                              */
/* ------------------------------------------------------------------------ */
/*
 * A streamcomm_cuda_comm_t binds a communicator to one CUDA device. Its
 * functions take device buffers (cudaMalloc'ed memory, or anything the
 * device can access) and a CUDA stream of that device's primary context
 * (what the runtime API and PyTorch use; NULL is the legacy default stream),
 * passed as void* so that this header needs no CUDA header. Each call is
 * enqueued on the stream, in order with the program's kernels, and is
 * capturable in a CUDA graph (every replay is a fresh operation). The same
 * rules as the host functions apply to counts, data types, roots, NULL
 * buffers, overlap and the in-place layouts; device buffers must stay valid
 * until the operation has completed on its stream. Errors while an
 * operation runs never block the stream: they are reported by
 * streamcomm_cuda_comm_get_async_error() and by the next call.
 *
 * How it runs: one of two paths, chosen when the handle is created, alike
 * on every rank. Direct (between ranks of one host, the default there):
 * device work only; each rank owns a window of device memory that the other
 * ranks map (CUDA IPC between processes), and a call enqueues copies, stream
 * memory operations and a reduce kernel, with no host thread taking part.
 * Staged (between hosts, with STREAMCOMM_CUDA_WINDOW=0, where a window
 * cannot be mapped, for reductions over more than 8 ranks, and for
 * streamcomm_cuda_sendrecv): the data is copied through pinned host memory
 * and the host backend's algorithms, driven by a host function on the
 * stream. See docs/guide/cuda.md ("Two paths"). Not yet run on a GPU by the
 * project's tests; they run on a CPU stand-in for the CUDA driver.
 */

/* A communicator bound to one CUDA device (opaque handle). */
typedef struct streamcomm_cuda_comm *streamcomm_cuda_comm_t;

/* Binds comm to CUDA device `device` (an ordinal) and stores the handle in
 * *cuda_comm (NULL on failure). Errors: UNAVAILABLE (no usable CUDA driver
 * or device; never a crash), INVALID_ARGUMENT (cuda_comm NULL, device
 * negative), INVALID_HANDLE (comm). */
streamcomm_result_t streamcomm_cuda_comm_create(streamcomm_comm_t comm, int device,
                                                streamcomm_cuda_comm_t *cuda_comm);

/* Releases the handle. Synchronize its streams first: resources of
 * operations still in flight are then leaked, never freed under the device.
 * Errors: INVALID_HANDLE. */
streamcomm_result_t streamcomm_cuda_comm_destroy(streamcomm_cuda_comm_t cuda_comm);

/* Stores in *result the first error of the CUDA communicator or of one of
 * its operations, STREAMCOMM_SUCCESS when none. Errors: INVALID_HANDLE,
 * INVALID_ARGUMENT (result NULL). */
streamcomm_result_t streamcomm_cuda_comm_get_async_error(streamcomm_cuda_comm_t cuda_comm,
                                                         streamcomm_result_t *result);

/* As streamcomm_all_reduce(), on device buffers and a CUDA stream. */
streamcomm_result_t streamcomm_cuda_all_reduce(const void *sendbuff, void *recvbuff, size_t count,
                                               streamcomm_data_type_t datatype,
                                               streamcomm_reduce_op_t op,
                                               streamcomm_cuda_comm_t cuda_comm,
                                               void *cuda_stream);

/* As streamcomm_broadcast(), on device buffers and a CUDA stream. */
streamcomm_result_t streamcomm_cuda_broadcast(const void *sendbuff, void *recvbuff, size_t count,
                                              streamcomm_data_type_t datatype, int root,
                                              streamcomm_cuda_comm_t cuda_comm, void *cuda_stream);

/* As streamcomm_reduce(), on device buffers and a CUDA stream. */
streamcomm_result_t streamcomm_cuda_reduce(const void *sendbuff, void *recvbuff, size_t count,
                                           streamcomm_data_type_t datatype,
                                           streamcomm_reduce_op_t op, int root,
                                           streamcomm_cuda_comm_t cuda_comm, void *cuda_stream);

/* As streamcomm_all_gather(), on device buffers and a CUDA stream. */
streamcomm_result_t streamcomm_cuda_all_gather(const void *sendbuff, void *recvbuff,
                                               size_t sendcount, streamcomm_data_type_t datatype,
                                               streamcomm_cuda_comm_t cuda_comm,
                                               void *cuda_stream);

/* As streamcomm_reduce_scatter(), on device buffers and a CUDA stream. */
streamcomm_result_t streamcomm_cuda_reduce_scatter(const void *sendbuff, void *recvbuff,
                                                   size_t recvcount,
                                                   streamcomm_data_type_t datatype,
                                                   streamcomm_reduce_op_t op,
                                                   streamcomm_cuda_comm_t cuda_comm,
                                                   void *cuda_stream);

/* As streamcomm_all_to_all(), on device buffers and a CUDA stream. */
streamcomm_result_t streamcomm_cuda_all_to_all(const void *sendbuff, void *recvbuff, size_t count,
                                               streamcomm_data_type_t datatype,
                                               streamcomm_cuda_comm_t cuda_comm,
                                               void *cuda_stream);

/* As streamcomm_barrier(), on a CUDA stream. */
streamcomm_result_t streamcomm_cuda_barrier(streamcomm_cuda_comm_t cuda_comm, void *cuda_stream);

/* Sends sendcount elements to rank dest and receives up to recvcount from
 * rank source, as one group (so every rank may call it at once, e.g. in a
 * ring), on a CUDA stream. A side with count 0 and a NULL buffer is skipped.
 * A message larger than recvcount fails the operation (reported as an
 * asynchronous error). Errors at the call: as the collectives, plus dest or
 * source out of range. */
streamcomm_result_t streamcomm_cuda_sendrecv(const void *sendbuff, size_t sendcount, int dest,
                                             void *recvbuff, size_t recvcount, int source,
                                             streamcomm_data_type_t datatype,
                                             streamcomm_cuda_comm_t cuda_comm, void *cuda_stream);

#ifdef __cplusplus
}
#endif

#endif /* STREAMCOMM_H */
