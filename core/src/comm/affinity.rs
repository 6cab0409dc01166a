//! One core per local rank for the threads that run a communicator's
//! stream work, as MPI launchers bind ranks (`--bind-to core`) and NCCL
//! binds its threads.
//!
//! Unbound, the scheduler may put two ranks' stream threads on one core
//! for a while; each then waits for the other through a yield or a futex
//! instead of spinning a microsecond. Measured here (2 virtual cores, a
//! 2-rank ring all-reduce of 8 B–4 KiB, 50 back-to-back calls, 6 launches
//! of 4 sizes): unbound, most points took 30–57 µs a call and some 1.5 µs;
//! bound, 1–20 µs.
//!
//! The rule (`STREAMCOMM_BIND=1`, the default): where the ranks on this
//! host are no more than the CPUs this process may use, the `i`-th of them
//! takes the `i`-th allowed CPU. Only host-stream worker threads are bound
//! (when they run this communicator's work, once per thread), never the
//! application's own threads. Elsewhere, or with `STREAMCOMM_BIND=0`,
//! nothing is bound.

use std::cell::Cell;

thread_local! {
    /// The CPU this thread was bound to, if any.
    static BOUND: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Where this rank's stream threads run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CoreBinding {
    cpu: Option<usize>,
}

impl CoreBinding {
    /// The binding of local rank `local_index` of `local_ranks`, among
    /// `allowed` CPUs (ascending), when `enabled`.
    pub(crate) fn choose(
        enabled: bool,
        local_index: usize,
        local_ranks: usize,
        allowed: &[usize],
    ) -> Self {
        let fits = !allowed.is_empty() && local_ranks <= allowed.len();
        CoreBinding {
            cpu: (enabled && fits).then(|| allowed[local_index % allowed.len()]),
        }
    }

    /// The CPU, if bound.
    pub(crate) fn cpu(&self) -> Option<usize> {
        self.cpu
    }

    /// Binds the calling thread (a host-stream worker) to the chosen CPU,
    /// unless it is already; a refusal (a cpuset that changed) is ignored:
    /// the thread then runs where the scheduler puts it.
    pub(crate) fn apply_here(&self) {
        let Some(cpu) = self.cpu else { return };
        if BOUND.get() == Some(cpu) {
            return;
        }
        BOUND.set(Some(cpu));
        // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET stays in
        // bounds for cpu < CPU_SETSIZE (checked); sched_setaffinity(0, ..)
        // reads the set and changes only the calling thread.
        unsafe {
            if cpu >= libc::CPU_SETSIZE as usize {
                return;
            }
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                tracing::debug!(cpu, error = %std::io::Error::last_os_error(), "could not bind a stream thread");
            }
        }
    }
}

/// The CPUs the calling thread may run on, ascending.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid out-buffer of the size passed;
    // CPU_ISSET reads it in bounds.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cpu_per_local_rank_only_where_they_fit() {
        let cpus = [2, 5, 7];
        let pick = |i, n| CoreBinding::choose(true, i, n, &cpus).cpu();
        assert_eq!(pick(0, 3), Some(2));
        assert_eq!(pick(2, 3), Some(7));
        assert_eq!(pick(1, 2), Some(5));
        assert_eq!(pick(0, 4), None, "more ranks than CPUs: nothing bound");
        assert_eq!(CoreBinding::choose(false, 0, 1, &cpus).cpu(), None);
        assert_eq!(CoreBinding::choose(true, 0, 1, &[]).cpu(), None);
    }

    #[test]
    fn binding_moves_only_the_calling_thread() {
        let before = allowed_cpus();
        let last = *before.last().expect("some CPU");
        let b = CoreBinding::choose(true, before.len() - 1, before.len(), &before);
        std::thread::spawn(move || {
            b.apply_here();
            assert_eq!(allowed_cpus(), vec![last]);
        })
        .join()
        .unwrap();
        assert_eq!(
            allowed_cpus(),
            before,
            "the test's own thread stays unbound"
        );
    }
}
