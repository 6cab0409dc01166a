//! The collectives that are groups of sends and receives (gather, scatter,
//! all-to-all-v, all-gather-v), described once.
//!
//! [`for_each_exchange!`] hands every entry to a face's macro, which writes
//! that face's typed method from it: the host stream face
//! (`comm/p2p/collectives.rs`, methods of [`Communicator`]) and the CUDA
//! face (`cuda/grouped.rs`, methods of `CudaComm`). An entry says the
//! method's name, its arguments after `send`, after `recv` and after both,
//! how it describes itself as an [`Exchange`] from the two buffers'
//! lengths, what it does, what it adds to the face's errors, and one
//! example a face. The description's lowering holds every rule of the call
//! (`exchange.rs`); which buffer a rank does not touch follows
//! from it too ([`Exchange::uses`]).
//!
//! Adding such a collective means an [`Exchange`] variant with its
//! lowering and tests, and an entry here; the typed faces get their
//! methods from the entry. The C API (written in C's terms), the
//! host-blocking `all_gatherv_host` (exact lengths, on the caller's
//! thread) and the direct path's layouts (`cuda/grouped.rs`) are not
//! generated.
//!
//! [`Communicator`]: crate::Communicator
//! [`Exchange`]: crate::comm::p2p::exchange::Exchange
//! [`Exchange::uses`]: crate::comm::p2p::exchange::Exchange::uses

/// Calls `$face!(...)` for every collective that is a group of sends and
/// receives, inside the face's `impl` block. The entries have the form
///
/// ```text
/// /// What it does.
/// name [args after send] [args after recv] (args after both)
///     = |send_len, recv_len| Exchange::...;
/// errors: "what it adds to the face's errors";
/// host: "example"; cuda: "example";
/// ```
macro_rules! for_each_exchange {
    ($face:ident) => {
        $crate::comm::p2p::exchange_table::for_each_exchange! { @entries $face;
            /// All-to-all with per-peer counts and displacements (MPI_Alltoallv):
            /// elements `send_displs[j]..+send_counts[j]` of `send` go to rank `j`,
            /// which stores them at `recv_displs[rank]..+recv_counts[rank]` of its
            /// `recv`. Counts may be zero; `recv_counts[j]` must be at least what
            /// rank `j` sends here (elements past a shorter message keep their
            /// contents).
            all_to_allv [send_counts: &[usize], send_displs: &[usize]]
                [recv_counts: &[usize], recv_displs: &[usize]] ()
                = |_, _| $crate::comm::p2p::exchange::Exchange::AllToAllv {
                    send_counts, send_displs, recv_counts, recv_displs,
                };
            errors: "a count or displacement list that is not one entry per rank, a region \
                outside its buffer, or receive regions that overlap";
            host: "// Rank 0 sends 1 element to itself and 2 to rank 1; rank 1 sends 3 and 1.\n\
                   let r = comm.rank();\n\
                   let (send_counts, recv_counts) = if r == 0 { ([1, 2], [1, 3]) } else { ([3, 1], [2, 1]) };\n\
                   let send_displs = [0, send_counts[0]];\n\
                   let recv_displs = [0, recv_counts[0]];\n\
                   let send = HostBuffer::from_slice(&vec![r as f32; 3 + r]);\n\
                   let mut recv = HostBuffer::<f32>::zeroed(recv_counts.iter().sum());\n\
                   comm.all_to_allv(&send, &send_counts, &send_displs, &mut recv, &recv_counts, &recv_displs, &stream)?;\n\
                   stream.synchronize()?;\n\
                   let want = if r == 0 { vec![0.0, 1.0, 1.0, 1.0] } else { vec![0.0, 0.0, 1.0] };\n\
                   assert_eq!(recv.to_vec(), want);";
            cuda: "// Rank r sends r + 1 elements to every rank.\n\
                   let (r, n) = (comm.rank(), comm.size());\n\
                   let send_counts = vec![r + 1; n];\n\
                   let send_displs: Vec<usize> = (0..n).map(|j| j * (r + 1)).collect();\n\
                   let recv_counts: Vec<usize> = (0..n).map(|j| j + 1).collect();\n\
                   let recv_displs: Vec<usize> = (0..n).map(|j| j * (j + 1) / 2).collect();\n\
                   let send = stream.clone_htod(&vec![r as f32; n * (r + 1)]).expect(\"copy\");\n\
                   let mut recv = stream.alloc_zeros::<f32>(n * (n + 1) / 2).expect(\"alloc\");\n\
                   cuda.all_to_allv(\n    &send, &send_counts, &send_displs, &mut recv, &recv_counts, &recv_displs, &stream,\n)?;";

            /// Gathers `send` from every rank into `recv` at `root`, block `j` from
            /// rank `j` (`count = send.len()`; `recv` at the root holds at least
            /// `size * count`, and is neither read nor written on other ranks,
            /// where any buffer will do, an empty one too).
            gather [] [] (root: usize)
                = |send_len, _| $crate::comm::p2p::exchange::Exchange::Gather {
                    root, count: send_len,
                };
            errors: "a root out of range, or the root's `recv` shorter than `size * count`";
            host: "let send = HostBuffer::from_slice(&[comm.rank() as u32 * 10; 2]);\n\
                   let mut recv = HostBuffer::<u32>::zeroed(if comm.rank() == 0 { 4 } else { 0 });\n\
                   comm.gather(&send, &mut recv, 0, &stream)?;\n\
                   stream.synchronize()?;\n\
                   if comm.rank() == 0 {\n    assert_eq!(recv.to_vec(), vec![0, 0, 10, 10]);\n}";
            cuda: "let send = stream.clone_htod(&[comm.rank() as f32; 4]).expect(\"copy\");\n\
                   let mut recv = stream.alloc_zeros::<f32>(4 * comm.size()).expect(\"alloc\");\n\
                   cuda.gather(&send, &mut recv, 0, &stream)?;\n\
                   let all = stream.clone_dtoh(&recv).expect(\"copy\"); // rank 0: [0,0,0,0, 1,1,1,1, …]";

            /// Scatters block `j` of `send` at `root` to rank `j`'s `recv` (`count
            /// = recv.len()`; `send` at the root holds at least `size * count`,
            /// and is not read on other ranks, where any buffer will do, an
            /// empty one too).
            scatter [] [] (root: usize)
                = |_, recv_len| $crate::comm::p2p::exchange::Exchange::Scatter {
                    root, count: recv_len,
                };
            errors: "a root out of range, or the root's `send` shorter than `size * count`";
            host: "let send = HostBuffer::from_slice(&[1u32, 2, 3, 4]); // read on the root only\n\
                   let mut recv = HostBuffer::<u32>::zeroed(2);\n\
                   comm.scatter(&send, &mut recv, 0, &stream)?;\n\
                   stream.synchronize()?;\n\
                   assert_eq!(recv.to_vec(), if comm.rank() == 0 { [1, 2] } else { [3, 4] });";
            cuda: "let blocks: Vec<f32> = (0..4 * comm.size()).map(|i| i as f32).collect();\n\
                   let send = stream.clone_htod(&blocks).expect(\"copy\"); // read at the root only\n\
                   let mut recv = stream.alloc_zeros::<f32>(4).expect(\"alloc\");\n\
                   cuda.scatter(&send, &mut recv, 0, &stream)?;\n\
                   let mine = stream.clone_dtoh(&recv).expect(\"copy\"); // blocks[4 * rank..][..4]";

            /// Every rank's `send` into every rank's `recv`, rank `j`'s elements at
            /// `displs[j]..+counts[j]` (`MPI_Allgatherv`): all-gather with a count
            /// of its own for each rank, such as uneven shares of a tensor. This
            /// rank's `send` holds `counts[rank]` elements; counts may be zero, and
            /// the regions of `recv` must not overlap. Posted as one group of sends
            /// and receives (each rank sends its block to every other rank).
            all_gatherv [] [] (counts: &[usize], displs: &[usize])
                = |_, _| $crate::comm::p2p::exchange::Exchange::AllGatherv { counts, displs };
            errors: "`counts` or `displs` that is not one entry per rank, a `send` that does \
                not hold `counts[rank]` elements, a region outside `recv`, or regions that \
                overlap";
            host: "// Rank 0 gives one element, rank 1 three.\n\
                   let (counts, displs) = ([1, 3], [0, 1]);\n\
                   let r = comm.rank();\n\
                   let send = HostBuffer::from_slice(&vec![r as i32 + 7; counts[r]]);\n\
                   let mut recv = HostBuffer::<i32>::zeroed(4);\n\
                   comm.all_gatherv(&send, &mut recv, &counts, &displs, &stream)?;\n\
                   stream.synchronize()?;\n\
                   assert_eq!(recv.to_vec(), vec![7, 8, 8, 8]);";
            cuda: "// Rank r contributes r + 1 elements.\n\
                   let (r, n) = (comm.rank(), comm.size());\n\
                   let counts: Vec<usize> = (0..n).map(|j| j + 1).collect();\n\
                   let displs: Vec<usize> = (0..n).map(|j| j * (j + 1) / 2).collect();\n\
                   let send = stream.clone_htod(&vec![r as f32; r + 1]).expect(\"copy\");\n\
                   let mut recv = stream.alloc_zeros::<f32>(n * (n + 1) / 2).expect(\"alloc\");\n\
                   cuda.all_gatherv(&send, &mut recv, &counts, &displs, &stream)?;";
        }
    };
    (@entries $face:ident; $(
        $(#[$doc:meta])*
        $name:ident [$($sa:ident: $st:ty),*] [$($ra:ident: $rt:ty),*] ($($arg:ident: $ty:ty),*)
            = $x:expr;
        errors: $errors:literal;
        host: $host:literal;
        cuda: $cuda:literal;
    )*) => {
        $(
            $face! {
                [$(#[$doc])*] $name [$($sa: $st),*] [$($ra: $rt),*] ($($arg: $ty),*) = $x;
                $errors, $host, $cuda
            }
        )*
    };
}

pub(crate) use for_each_exchange;
