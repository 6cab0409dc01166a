//! Process tests whose one `child` entry runs a scenario named in the
//! environment, and what their ranks read of themselves from `/proc`.

use std::time::Duration;

use streamcomm::host::HostStream;
use streamcomm::{Communicator, ReduceOp};

/// The variable that names the scenario a rank process runs.
pub(crate) const SCENARIO: &str = "STREAMCOMM_TEST_SCENARIO";

/// Runs the ignored test `child` of `module` (pass `module_path!()`) as `n`
/// rank processes with `SCENARIO=scenario`, this test's seed and `extra`;
/// fails unless every rank ran it to the end within `limit`.
pub(crate) fn launch_scenario(
    module: &str,
    n: usize,
    scenario: &str,
    extra: &[(&str, &str)],
    limit: Duration,
) {
    let mut env = vec![
        (SCENARIO, scenario.to_string()),
        (
            "STREAMCOMM_TEST_SEED",
            streamcomm_testkit::seed().to_string(),
        ),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    super::launch_children(
        n,
        &streamcomm_testkit::test_path(module, "child"),
        &env,
        limit,
        &format!("{scenario} on {n} ranks"),
    );
}

/// What a rank process of a scenario test starts from: the scenario it
/// runs, the test's seed, its communicator (from the launcher's
/// environment) and a stream.
pub(crate) type Child = (String, u64, Communicator, HostStream);

/// In a rank process started to run the scenario named in `var` (with
/// the test's seed in `STREAMCOMM_TEST_SEED`): its [`Child`]; `None` when
/// the ignored `child` test runs on its own (it then does nothing).
pub(crate) fn child(var: &str) -> Option<Child> {
    let scenario = std::env::var(var).ok()?;
    let seed = std::env::var("STREAMCOMM_TEST_SEED").expect("the test's seed");
    let comm = Communicator::from_env().expect("from_env");
    let stream = HostStream::new().expect("a stream");
    Some((scenario, seed.parse().expect("a seed"), comm, stream))
}

/// A scenario of a rank process: its name, and what it runs on the
/// communicator, a stream and the test's seed.
pub(crate) type Scenario = (&'static str, fn(&Communicator, &HostStream, u64));

/// In a rank process started to run one of `scenarios` (named in `var`):
/// runs it, then says the child ran; nothing when the ignored `child` test
/// runs on its own. Panics on a name no scenario has.
pub(crate) fn run_child(var: &str, scenarios: &[Scenario]) {
    let Some((name, seed, comm, stream)) = child(var) else {
        return;
    };
    let (_, run) = scenarios
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("unknown scenario {name}"));
    run(&comm, &stream, seed);
    eprintln!("rank {}: {name} done", comm.rank());
    streamcomm_testkit::child_ran();
}

/// `field` of this process's `/proc/self/status`, in kB.
pub(crate) fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// An all-reduce of `count` elements, every element checked (integers, so
/// the sum is exact in f32).
pub(crate) fn checked_all_reduce(comm: &Communicator, count: usize) {
    let (rank, n) = (comm.rank(), comm.size());
    let send: Vec<f32> = (0..count).map(|i| ((i * 7 + rank) % 13) as f32).collect();
    let mut recv = vec![f32::NAN; count];
    comm.all_reduce_host(&send, &mut recv, ReduceOp::Sum)
        .unwrap();
    for (i, &got) in recv.iter().enumerate() {
        let want: usize = (0..n).map(|r| (i * 7 + r) % 13).sum();
        assert_eq!(got, want as f32, "rank {rank}: element {i}");
    }
}
