//! The collectives that are plans, described once.
//!
//! [`for_each_collective!`] hands every entry of the table to a face's
//! macro, which writes that face's typed methods from it: the host stream
//! face (`comm/collectives.rs`, methods of [`Communicator`]) and the CUDA
//! face (`cuda/collectives.rs`, methods of `CudaComm`). An entry says the
//! method's name and arguments beyond the buffers and the stream, the
//! [`Collective`] it builds (the arguments name its fields), the reduction
//! it uses, what it does, what it adds to the face's errors, its in-place
//! form where it has one, and one example a face.
//!
//! Adding a collective that is a plan means an entry here, its plan (in
//! `streamcomm-algo`) and its tests; each face gets its methods from the
//! entry. The faces differ in their buffers (host [`AsBufView`]s or cudarc
//! device buffers) and the errors a backend adds, and in nothing else.
//!
//! The host-blocking slice forms (`*_host`) are not generated: each checks
//! exact lengths and runs on the caller's thread, as `comm::blocking` says.
//! The C API and the NCCL-compatible library are written in C's terms and
//! lay out their calls by NCCL's rules ([`RawBuffers::nccl_layout`](crate::RawBuffers::nccl_layout)).
//!
//! [`Communicator`]: crate::Communicator
//! [`Collective`]: crate::plan::Collective
//! [`AsBufView`]: crate::AsBufView

/// Calls `$face!(@separate ...)` and, where there is one, `$face!(@in_place
/// ...)` for every collective that is a plan, inside the face's `impl`
/// block. The entries below have the form
///
/// ```text
/// /// What it does.
/// name(arg: Type, ...) = Collective::..., op_expression;
/// errors: "what it adds to the face's errors, or empty";
/// in_place: name_in_place, "what the one buffer is", host: "example", cuda: "example";
/// host: "example"; cuda: "example";
/// ```
///
/// The examples are the bodies of the face's doc examples (the face adds
/// what every example shares: the communicator, the stream, the `Ok`).
/// `in_place:` is absent where the collective has no in-place form.
macro_rules! for_each_collective {
    ($face:ident) => {
        $crate::comm::table::for_each_collective! { @entries $face;
            /// Element-wise reduction of every rank's `send` into every rank's
            /// `recv` (`count = send.len()`; `recv` must hold at least as many).
            all_reduce(op: ReduceOp) = $crate::plan::Collective::AllReduce, op;
            errors: "";
            in_place: all_reduce_in_place, "with one buffer as input and output",
                host: "let mut buf = HostBuffer::from_slice(&[comm.rank() as i64; 3]);\n\
                       comm.all_reduce_in_place(&mut buf, ReduceOp::Max, &stream)?;\n\
                       stream.synchronize()?;\n\
                       assert_eq!(buf.to_vec(), vec![1; 3]);",
                cuda: "let mut grads = stream.clone_htod(&[0.5f32; 1024]).expect(\"copy\");\n\
                       cuda.all_reduce_in_place(&mut grads, ReduceOp::Avg, &stream)?;";
            host: "let send = HostBuffer::from_slice(&[comm.rank() as f32 + 1.0; 4]);\n\
                   let mut recv = HostBuffer::<f32>::zeroed(4);\n\
                   comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?; // returns at once\n\
                   stream.synchronize()?;\n\
                   assert_eq!(recv.to_vec(), vec![3.0; 4]); // 1 + 2";
            cuda: "let send = stream.clone_htod(&[1.0f32; 1024]).expect(\"copy\");\n\
                   let mut recv = stream.alloc_zeros::<f32>(1024).expect(\"alloc\");\n\
                   cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?; // enqueued, returns at once\n\
                   let sum = stream.clone_dtoh(&recv).expect(\"copy\"); // waits: every element is comm.size()";

            /// Copies `root`'s `send` into every rank's `recv` (`count = recv.len()`;
            /// `send` is read on the root only, and may be any buffer elsewhere).
            broadcast(root: usize) = $crate::plan::Collective::Broadcast { root }, ReduceOp::Sum;
            errors: "a root out of range";
            in_place: broadcast_in_place, "in one buffer (the root's is the source)",
                host: "let mut weights = HostBuffer::<f64>::zeroed(4);\n\
                       if comm.rank() == 0 {\n    weights.copy_from(&[0.5; 4])?;\n}\n\
                       comm.broadcast_in_place(&mut weights, 0, &stream)?;\n\
                       stream.synchronize()?;\n\
                       assert_eq!(weights.to_vec(), vec![0.5; 4]);",
                cuda: "let mut weights = stream.clone_htod(&[comm.rank() as f32; 8]).expect(\"copy\");\n\
                       cuda.broadcast_in_place(&mut weights, 0, &stream)?; // rank 0's weights everywhere";
            host: "let send = HostBuffer::from_slice(&[7u8, 8, 9]); // read on the root only\n\
                   let mut recv = HostBuffer::<u8>::zeroed(3);\n\
                   comm.broadcast(&send, &mut recv, 0, &stream)?;\n\
                   stream.synchronize()?;\n\
                   assert_eq!(recv.to_vec(), vec![7, 8, 9]);";
            cuda: "let send = stream.clone_htod(&[comm.rank() as u32; 8]).expect(\"copy\"); // read at the root\n\
                   let mut recv = stream.alloc_zeros::<u32>(8).expect(\"alloc\");\n\
                   cuda.broadcast(&send, &mut recv, 0, &stream)?; // every rank: [0; 8]";

            /// Reduces every rank's `send` into `root`'s `recv` (`count = send.len()`;
            /// `recv` is written on the root only).
            reduce(op: ReduceOp, root: usize) = $crate::plan::Collective::Reduce { root }, op;
            errors: "a root out of range";
            in_place: reduce_in_place, "in one buffer (the root's holds the result)",
                host: "let mut buf = HostBuffer::from_slice(&[comm.rank() as u32 + 1; 2]);\n\
                       comm.reduce_in_place(&mut buf, ReduceOp::Sum, 0, &stream)?;\n\
                       stream.synchronize()?;\n\
                       if comm.rank() == 0 {\n    assert_eq!(buf.to_vec(), vec![3, 3]);\n}",
                cuda: "let mut buf = stream.clone_htod(&[1.0f64; 16]).expect(\"copy\");\n\
                       cuda.reduce_in_place(&mut buf, ReduceOp::Sum, 0, &stream)?; // the root's buf: the sums";
            host: "let send = HostBuffer::from_slice(&[comm.rank() as f32 + 1.0; 2]);\n\
                   let mut recv = HostBuffer::<f32>::zeroed(2); // written on the root only\n\
                   comm.reduce(&send, &mut recv, ReduceOp::Prod, 1, &stream)?;\n\
                   stream.synchronize()?;\n\
                   if comm.rank() == 1 {\n    assert_eq!(recv.to_vec(), vec![2.0; 2]);\n}";
            cuda: "let send = stream.clone_htod(&[2i32; 16]).expect(\"copy\");\n\
                   let mut recv = stream.alloc_zeros::<i32>(16).expect(\"alloc\"); // written at the root only\n\
                   cuda.reduce(&send, &mut recv, ReduceOp::Max, 0, &stream)?;";

            /// Concatenates every rank's `send` (in rank order) into every rank's
            /// `recv` (`count = send.len()`; `recv` holds at least `size * count`).
            all_gather() = $crate::plan::Collective::AllGather, ReduceOp::Sum;
            errors: "an in-place buffer whose length is not divisible by the size";
            in_place: all_gather_in_place,
                "in one buffer of `size * count` elements, this rank's input at \
                 `rank * count` (NCCL's in-place layout)",
                host: "let mut buf = HostBuffer::<i32>::zeroed(2 * comm.size());\n\
                       buf.with_mut(|s| s[comm.rank() * 2..][..2].fill(comm.rank() as i32 + 5));\n\
                       comm.all_gather_in_place(&mut buf, &stream)?;\n\
                       stream.synchronize()?;\n\
                       assert_eq!(buf.to_vec(), vec![5, 5, 6, 6]);",
                cuda: "let mut buf = stream.alloc_zeros::<f32>(4 * comm.size()).expect(\"alloc\");\n\
                       let mine = [comm.rank() as f32; 4];\n\
                       let mut slot = buf.slice_mut(4 * comm.rank()..4 * comm.rank() + 4);\n\
                       stream.memcpy_htod(&mine, &mut slot).expect(\"copy\"); // this rank's input at rank * count\n\
                       cuda.all_gather_in_place(&mut buf, &stream)?;";
            host: "let send = HostBuffer::from_slice(&[comm.rank() as i32; 2]);\n\
                   let mut recv = HostBuffer::<i32>::zeroed(2 * comm.size());\n\
                   comm.all_gather(&send, &mut recv, &stream)?;\n\
                   stream.synchronize()?;\n\
                   assert_eq!(recv.to_vec(), vec![0, 0, 1, 1]);";
            cuda: "let send = stream.clone_htod(&[comm.rank() as f32; 4]).expect(\"copy\");\n\
                   let mut recv = stream.alloc_zeros::<f32>(4 * comm.size()).expect(\"alloc\");\n\
                   cuda.all_gather(&send, &mut recv, &stream)?; // [0,0,0,0, 1,1,1,1, …]";

            /// Reduces every rank's `send` (`size * count` elements) and leaves block
            /// `rank` of the result in `recv` (`count = recv.len()`).
            reduce_scatter(op: ReduceOp) = $crate::plan::Collective::ReduceScatter, op;
            errors: "an in-place buffer whose length is not divisible by the size, \
                     or a `send` shorter than `size` times `recv`";
            in_place: reduce_scatter_in_place,
                "in one buffer of `size * count` elements; the result lands at `rank * count`",
                host: "let mut buf = HostBuffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0]);\n\
                       comm.reduce_scatter_in_place(&mut buf, ReduceOp::Sum, &stream)?;\n\
                       stream.synchronize()?;\n\
                       let mine = buf.to_vec()[comm.rank() * 2..][..2].to_vec();\n\
                       assert_eq!(mine, if comm.rank() == 0 { [2.0, 4.0] } else { [6.0, 8.0] });",
                cuda: "let mut buf = stream.clone_htod(&vec![1.0f32; 4 * comm.size()]).expect(\"copy\");\n\
                       cuda.reduce_scatter_in_place(&mut buf, ReduceOp::Sum, &stream)?; // result at 4 * rank";
            host: "let send = HostBuffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0]); // size * count\n\
                   let mut recv = HostBuffer::<f32>::zeroed(2); // count\n\
                   comm.reduce_scatter(&send, &mut recv, ReduceOp::Sum, &stream)?;\n\
                   stream.synchronize()?;\n\
                   let want = if comm.rank() == 0 { [2.0, 4.0] } else { [6.0, 8.0] };\n\
                   assert_eq!(recv.to_vec(), want);";
            cuda: "let send = stream.clone_htod(&vec![1.0f32; 4 * comm.size()]).expect(\"copy\");\n\
                   let mut recv = stream.alloc_zeros::<f32>(4).expect(\"alloc\");\n\
                   cuda.reduce_scatter(&send, &mut recv, ReduceOp::Sum, &stream)?; // block `rank` of the sums";

            /// Sends block `j` of `send` to rank `j`, which stores it as block `rank`
            /// of its `recv` (`count = send.len() / size` per block).
            all_to_all() = $crate::plan::Collective::AllToAll, ReduceOp::Sum;
            errors: "a length not divisible by the size";
            host: "let r = comm.rank() as u32;\n\
                   let send = HostBuffer::from_slice(&[10 * r, 10 * r + 1]); // block j goes to rank j\n\
                   let mut recv = HostBuffer::<u32>::zeroed(2);\n\
                   comm.all_to_all(&send, &mut recv, &stream)?;\n\
                   stream.synchronize()?;\n\
                   assert_eq!(recv.to_vec(), vec![r, 10 + r]); // block `rank` of every rank";
            cuda: "let send = stream.clone_htod(&vec![comm.rank() as f32; 4 * comm.size()]).expect(\"copy\");\n\
                   let mut recv = stream.alloc_zeros::<f32>(4 * comm.size()).expect(\"alloc\");\n\
                   cuda.all_to_all(&send, &mut recv, &stream)?; // block j of recv came from rank j";
        }
    };
    (@entries $face:ident; $(
        $(#[$doc:meta])*
        $name:ident $args:tt = $collective:expr, $op:expr;
        errors: $errors:literal;
        $(in_place: $in_place:ident, $in_place_doc:literal,
            host: $in_place_host:literal, cuda: $in_place_cuda:literal;)?
        host: $host:literal;
        cuda: $cuda:literal;
    )*) => {
        $(
            $face!(@separate [$(#[$doc])*] $name $args, $collective, $op, $errors, $host, $cuda);
            $($face!(@in_place $name $in_place $args, $collective, $op, $errors,
                $in_place_doc, $in_place_host, $in_place_cuda);)?
        )*
    };
}

/// The doc of a generated method after its summary: the face's sections
/// before the example (may be empty), the example (the face's fence, its
/// opening lines, the entry's body, its closing lines), the face's errors,
/// and what the entry adds to them (empty: nothing).
macro_rules! method_doc {
    // A host stream face's method: its stream sections, its example run
    // on two ranks as threads.
    (host, errors: $errors:literal, $body:literal, $extra:literal) => {
        $crate::comm::table::method_doc!(
            sections: "# Stream semantics\n\
                Enqueued on `stream`, not complete, on return\n\
                ([what that means](Communicator#stream-semantics)).\n\n\
                # Graph capture\n\
                Capturable ([what replays](Communicator#graph-capture)).\n",
            example: [
                "",
                "# use streamcomm::ReduceOp;\n\
                 # use streamcomm::host::HostBuffer;\n\
                 # streamcomm::testing::on_two_ranks(|comm, stream| {\n\
                 // On each of two ranks (`comm.rank()` is 0 or 1):\n",
                "# Ok(())\n# })?;\n# Ok::<(), streamcomm::Error>(())\n"
            ],
            errors: $errors,
            $body, $extra
        )
    };
    // A CUDA face's method: its example compiled, not run (it needs a GPU).
    (cuda, errors: $errors:literal, $body:literal, $extra:literal) => {
        $crate::comm::table::method_doc!(
            sections: "",
            example: [
                "no_run",
                "# use streamcomm::ReduceOp;\n\
                 # let comm = streamcomm::Communicator::from_env()?;\n\
                 # let cuda = streamcomm::cuda::CudaComm::on_device(&comm, 0)?;\n\
                 let stream = cuda.context().new_stream().expect(\"stream\");\n",
                "# Ok::<(), streamcomm::Error>(())\n"
            ],
            errors: $errors,
            $body, $extra
        )
    };
    (
        sections: $sections:literal,
        example: [$fence:literal, $open:literal, $close:literal],
        errors: $errors:literal,
        $body:literal, ""
    ) => {
        concat!(
            "\n", $sections, "\n# Examples\n```", $fence, "\n", $open, $body, "\n", $close,
            "```\n\n# Errors\n", $errors
        )
    };
    (
        sections: $sections:literal,
        example: [$fence:literal, $open:literal, $close:literal],
        errors: $errors:literal,
        $body:literal, $extra:literal
    ) => {
        concat!(
            $crate::comm::table::method_doc!(
                sections: $sections,
                example: [$fence, $open, $close],
                errors: $errors,
                $body, ""
            ),
            "\nThe same error for ", $extra, "."
        )
    };
}

pub(crate) use {for_each_collective, method_doc};
