//! Which algorithm a call will use, and what the cost model predicts for it.
//!
//! The choice is made per call ([`crate::tuning`]): forced by
//! `STREAMCOMM_ALGO`, else the model's cheapest candidate. These queries let
//! a program (or the benchmark) see the choice and the prediction without
//! running anything.

use crate::DataType;
use crate::comm::Communicator;
use crate::plan::{Algorithm, Collective};

impl Communicator {
    /// The algorithm a call of `collective` on `count` elements of `dtype`
    /// would run (`count` as in [`crate::plan::build`]); `None` for
    /// operations with a single schedule (point-to-point, barrier).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # let comm = Communicator::init(&UniqueId::new()?, 0, 1)?;
    /// # let stream = HostStream::new()?;
    /// use streamcomm::{Collective, DataType};
    /// if let Some(algo) = comm.algorithm(Collective::AllReduce, DataType::F32, 1 << 20) {
    ///     println!("a 4 MiB all-reduce runs {}", algo.name());
    /// }
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn algorithm(
        &self,
        collective: Collective,
        dtype: DataType,
        count: usize,
    ) -> Option<Algorithm> {
        self.inner
            .core
            .selector()
            .choose(collective, count, dtype.size())
    }

    /// The cost model's predicted time, in seconds, of such a call run by
    /// `algo` on this communicator's ranks and hosts; `None` when `algo`
    /// does not implement `collective`.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # let comm = Communicator::init(&UniqueId::new()?, 0, 1)?;
    /// # let stream = HostStream::new()?;
    /// use streamcomm::{Collective, DataType};
    /// let c = Collective::AllReduce;
    /// if let Some(algo) = comm.algorithm(c, DataType::F32, 1 << 20) {
    ///     let seconds = comm.predict(c, algo, DataType::F32, 1 << 20);
    ///     println!("{}: {:?} s predicted", algo.name(), seconds);
    /// }
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn predict(
        &self,
        collective: Collective,
        algo: Algorithm,
        dtype: DataType,
        count: usize,
    ) -> Option<f64> {
        self.inner
            .core
            .selector()
            .predict(collective, algo, count, dtype.size())
    }
}
