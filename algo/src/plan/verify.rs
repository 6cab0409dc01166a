//! The one check of a plan's steps, made when the plan is built.
//!
//! A step's shape never depends on the buffers a call binds: its regions'
//! counts, whether it has an input, which buffer it writes and whether its
//! regions fit the plan's buffer sizes are properties of the plan. They are
//! checked here once per plan (plans are cached per call shape), so the
//! interpreter ([`Interpreter`](super::Interpreter)) checks per step only what
//! arrives at run time: a peer's slot length. The buffers are checked
//! against the plan once per call, when the call is enqueued
//! (`Binding::check`, or the host-blocking forms' length checks).

use super::step::{BufId, DataStep, Plan, Region};
use crate::Error;

impl Plan {
    /// Checks every step: its regions hold exactly the step's count of
    /// elements, a step without an input moves nothing, no step writes the
    /// (read-only) send buffer, every region lies inside its buffer as the
    /// plan sizes it (`send_count`; the larger of `recv_count` and
    /// `work_count`), and no step's byte count overflows.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the step and what is wrong; an
    /// invalid plan is a bug in the algorithm that built it.
    pub fn verify(&self) -> Result<(), Error> {
        let name = self.collective.name();
        let bad = |i: usize, step: &DataStep, what: String| {
            Error::InvalidArgument(format!("{name}: step {i} {step:?}: {what}"))
        };
        let recv_len = self.recv_count.max(self.work_count);
        for (i, step) in self.steps.iter().enumerate() {
            if step.count.checked_mul(self.dtype.size()).is_none() {
                return Err(bad(i, step, "its byte count overflows".into()));
            }
            for (what, region) in [("src", step.src), ("dst", step.dst)] {
                let Some(r) = region else { continue };
                if r.count != step.count {
                    return Err(bad(
                        i,
                        step,
                        format!(
                            "{what} region has {} elements, the step moves {}",
                            r.count, step.count
                        ),
                    ));
                }
                let (len, buffer) = match r.buf {
                    BufId::Send => (self.send_count, "send"),
                    BufId::Recv => (recv_len, "recv"),
                };
                if !fits(r, len) {
                    return Err(bad(
                        i,
                        step,
                        format!("{what} region lies outside the {buffer} buffer of {len} elements"),
                    ));
                }
            }
            if step.recv_from.is_none() && step.src.is_none() && step.count != 0 {
                return Err(bad(i, step, "it has no input but moves elements".into()));
            }
            if step.dst.is_some_and(|d| d.buf == BufId::Send) {
                return Err(bad(
                    i,
                    step,
                    "it writes the send buffer, which is read-only".into(),
                ));
            }
        }
        Ok(())
    }
}

/// True when `r` lies inside a buffer of `len` elements.
fn fits(r: Region, len: usize) -> bool {
    r.offset.checked_add(r.count).is_some_and(|end| end <= len)
}

#[cfg(test)]
mod tests {
    use streamcomm_kernels::{DataType, ReduceOp};

    use super::*;
    use crate::plan::data_collectives;
    use crate::plan::{Algorithm, Collective, PlanParams, build_with};

    fn plan(steps: Vec<DataStep>) -> Plan {
        Plan {
            collective: Collective::AllReduce,
            dtype: DataType::F32,
            op: ReduceOp::Sum,
            rank: 0,
            nranks: 2,
            send_count: 4,
            recv_count: 4,
            work_count: 0,
            signature: 0,
            steps,
        }
    }

    fn refused(step: DataStep) -> String {
        match plan(vec![step]).verify() {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{step:?} was not refused: {other:?}"),
        }
    }

    #[test]
    fn a_region_outside_its_buffer_is_refused_naming_the_buffer() {
        let m = refused(DataStep::copy(Region::send(3, 2), Region::recv(0, 2)));
        assert!(m.contains("outside the send buffer of 4 elements"), "{m}");
        let m = refused(DataStep::copy(
            Region::send(0, 2),
            Region::recv(usize::MAX, 2),
        ));
        assert!(m.contains("outside the recv buffer"), "{m}");
    }

    #[test]
    fn a_step_writing_the_send_buffer_is_refused() {
        let m = refused(DataStep::copy(Region::recv(0, 1), Region::send(0, 1)));
        assert!(m.contains("read-only"), "{m}");
    }

    #[test]
    fn a_count_that_disagrees_with_its_region_is_refused() {
        let mut bad = DataStep::send(1, Region::send(0, 2));
        bad.count = 3;
        assert!(refused(bad).contains("src region has 2 elements, the step moves 3"));
    }

    #[test]
    fn a_step_without_input_moves_nothing() {
        let mut bad = DataStep::send(1, Region::send(0, 2));
        bad.src = None;
        assert!(refused(bad).contains("no input"));
    }

    #[test]
    fn the_work_buffer_counts_as_the_receive_buffer() {
        let mut p = plan(vec![DataStep::copy(Region::send(0, 4), Region::recv(2, 4))]);
        assert!(p.verify().is_err());
        p.work_count = 6;
        assert!(p.verify().is_ok());
    }

    #[test]
    fn every_built_plan_verifies() {
        for c in data_collectives(1, 2) {
            for &algo in Algorithm::candidates(c) {
                for nranks in [1, 2, 3, 5, 8] {
                    for rank in 0..nranks {
                        let params = PlanParams {
                            rank,
                            nranks,
                            slot_bytes: 16,
                            nsteps: 2,
                        };
                        let root = match c {
                            Collective::Broadcast { root } | Collective::Reduce { root } => root,
                            _ => 0,
                        };
                        if root >= nranks {
                            continue;
                        }
                        // `build_with` verifies what it builds.
                        build_with(c, DataType::F32, ReduceOp::Sum, 13, &params, Some(algo))
                            .unwrap_or_else(|e| panic!("{c:?} {algo} {rank}/{nranks}: {e}"));
                    }
                }
            }
        }
    }
}
