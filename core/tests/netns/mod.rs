//! Pretend hosts for tests: network namespaces on one bridge, and multi-node
//! `streamcomm-run` jobs across them.
//!
//! A multi-node launch is only really tested when the nodes cannot reach
//! each other through loopback, so [`Netns::up`] makes a small network with
//! `scripts/netns.sh` (host `i` is namespace `<name>-h<i>` at
//! [`host_addr(i)`](host_addr), all on one bridge) and removes it on drop, and
//! [`Netns::run_job`] runs one launcher per pretend host, like a user running
//! `streamcomm-run` on each machine. The namespaces share the file system,
//! `/dev/shm` and the host name, but a communicator's host identity includes
//! the network namespace, so ranks in different namespaces are on different
//! hosts to it and talk over the network.
//!
//! Namespaces need root and iproute2. A test calls [`ready_or_skip`] first:
//! where they cannot be made it prints why and skips, except under `CI=true`,
//! where that fails the test (CI must exercise them).
//!
//! [`run_all`] (several launchers with one deadline) is also useful without
//! namespaces. Use from a test file with `mod netns;`.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The setup script, `scripts/netns.sh` of the workspace (found from the
/// crate that includes this module, whichever folder it is in).
pub(crate) fn script_path() -> std::path::PathBuf {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .map(|dir| dir.join("scripts/netns.sh"))
        .find(|p| p.exists())
        .unwrap_or_else(|| crate_dir.join("../scripts/netns.sh"))
}
/// The launcher binary under test (crate `streamcomm-run`, built beside
/// the tests or on first use).
pub(crate) fn launcher() -> String {
    let path = streamcomm_testkit::launcher_binary();
    path.to_str().expect("UTF-8 launcher path").to_string()
}
/// Longest the setup script may take.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the other launchers may go on after one has failed.
const FAILURE_GRACE: Duration = Duration::from_secs(5);
/// Between `SIGTERM` and `SIGKILL` when stopping launchers.
const KILL_GRACE: Duration = Duration::from_secs(3);
/// How long output may still arrive after the commands have ended.
const DRAIN: Duration = Duration::from_secs(5);

/// Networks made by this process so far (part of each one's name).
static NETWORKS: AtomicUsize = AtomicUsize::new(0);

/// The address of pretend host `i`: `10.233.0.<i+1>`.
pub(crate) fn host_addr(i: usize) -> IpAddr {
    let last = u8::try_from(i + 1).expect("at most 253 hosts");
    IpAddr::V4(Ipv4Addr::new(10, 233, 0, last))
}

/// Whether namespaces can be made here: root, `ip` present, the script
/// present, and a namespace can really be created (containers often forbid
/// it). Checked once per process.
///
/// # Errors
///
/// The reason they cannot.
pub(crate) fn available() -> Result<(), String> {
    static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
    AVAILABLE.get_or_init(probe).clone()
}

fn probe() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(out) if out.status.success() => {}
        _ => return Err("'ip' (iproute2) is missing: apt-get install -y iproute2".into()),
    }
    if !script_path().exists() {
        return Err(format!("{} is missing", script_path().display()));
    }
    let probe = format!("sc{}probe", std::process::id() % 100_000);
    let made = Command::new("ip").args(["netns", "add", &probe]).output();
    match made {
        Ok(out) if out.status.success() => {
            let _ = Command::new("ip")
                .args(["netns", "delete", &probe])
                .output();
            Ok(())
        }
        Ok(out) => Err(format!(
            "cannot create a network namespace: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run ip: {e}")),
    }
}

/// `true` when namespaces are [`available`]; otherwise prints
/// `SKIPPED: <test>: <reason>` and returns `false`, or panics when the
/// environment variable `CI` is `true`.
pub(crate) fn ready_or_skip(test: &str) -> bool {
    match available() {
        Ok(()) => true,
        Err(reason) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{test}: network namespaces are required under CI=true: {reason}")
        }
        Err(reason) => {
            streamcomm_testkit::skip(test, &reason);
            false
        }
    }
}

/// A network of pretend hosts, removed when dropped.
#[derive(Debug)]
pub(crate) struct Netns {
    name: String,
    nhosts: usize,
    jobs: AtomicU16,
}

impl Netns {
    /// Makes `nhosts` (1..=253) host namespaces on one bridge, with a name
    /// unique to this process and call (`sc<pid % 100000>n<k>`).
    ///
    /// # Errors
    ///
    /// The script's output when it fails or takes over 30 s.
    pub(crate) fn up(nhosts: usize) -> Result<Netns, String> {
        let k = NETWORKS.fetch_add(1, Ordering::SeqCst);
        let name = format!("sc{}n{k}", std::process::id() % 100_000);
        // A crashed process with the same pid may have left these behind.
        let _ = script(&["down", &name]);
        let out = script(&["up", &name, &nhosts.to_string()])?;
        if !out.status.success() {
            let _ = script(&["down", &name]);
            return Err(format!(
                "netns.sh up {name} {nhosts} failed ({}):\n{}{}",
                out.status,
                text(&out.stdout),
                text(&out.stderr)
            ));
        }
        Ok(Netns {
            name,
            nhosts,
            jobs: AtomicU16::new(0),
        })
    }

    /// The network's name (namespaces are `<name>-h<i>` and `<name>-sw`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Number of pretend hosts.
    pub(crate) fn nhosts(&self) -> usize {
        self.nhosts
    }

    /// The namespace of pretend host `i`.
    pub(crate) fn host(&self, i: usize) -> String {
        assert!(i < self.nhosts, "host {i} of {}", self.nhosts);
        format!("{}-h{i}", self.name)
    }

    /// A command that runs `program` on pretend host `i`.
    pub(crate) fn command_on(&self, i: usize, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.host(i), program]);
        cmd
    }

    /// Runs a job of `nodes * ranks_per_node` ranks of `program`: on each
    /// host `i < nodes`, `streamcomm-run --nnodes <nodes> --node-rank i
    /// --master-addr 10.233.0.1 --master-port <port> -n <ranks_per_node> --
    /// program args...`, with `env` added. Each job on this network gets a
    /// port of its own.
    ///
    /// # Errors
    ///
    /// As for [`run_all`].
    pub(crate) fn run_job(
        &self,
        nodes: usize,
        ranks_per_node: usize,
        program: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<Output, String> {
        let port = 29500 + self.jobs.fetch_add(1, Ordering::SeqCst);
        let program = program.to_str().ok_or("program path is not UTF-8")?;
        self.run_launchers(
            nodes,
            &|i| {
                let mut words: Vec<String> = [
                    "--nnodes",
                    &nodes.to_string(),
                    "--node-rank",
                    &i.to_string(),
                    "--master-addr",
                    &host_addr(0).to_string(),
                    "--master-port",
                    &port.to_string(),
                    "-n",
                    &ranks_per_node.to_string(),
                    "--",
                    program,
                ]
                .map(String::from)
                .to_vec();
                words.extend(args.iter().map(|a| a.to_string()));
                words
            },
            env,
            timeout,
        )
    }

    /// Runs `streamcomm-run <launcher_args(i)>` on each host `i < nodes`,
    /// with `env` added, as one job ([`run_all`]).
    ///
    /// # Errors
    ///
    /// As for [`run_all`].
    pub(crate) fn run_launchers(
        &self,
        nodes: usize,
        launcher_args: &dyn Fn(usize) -> Vec<String>,
        env: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<Output, String> {
        if nodes > self.nhosts {
            return Err(format!("{nodes} nodes on {} hosts", self.nhosts));
        }
        let commands = (0..nodes)
            .map(|i| {
                let mut cmd = self.command_on(i, &launcher());
                cmd.args(launcher_args(i)).envs(env.iter().copied());
                cmd
            })
            .collect();
        run_all(commands, timeout)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        match script(&["down", &self.name]) {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "netns.sh down {} failed: {}{}",
                self.name,
                text(&out.stdout),
                text(&out.stderr)
            ),
            Err(e) => eprintln!("netns.sh down {}: {e}", self.name),
        }
    }
}

fn script(args: &[&str]) -> Result<Output, String> {
    let mut cmd = Command::new("bash");
    cmd.arg(script_path()).args(args);
    run_all(vec![cmd], SCRIPT_TIMEOUT)
}

/// Lossy UTF-8.
pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A started command and the threads collecting its output.
struct Running {
    child: Child,
    stdout: JoinHandle<Vec<u8>>,
    stderr: JoinHandle<Vec<u8>>,
    status: Option<ExitStatus>,
}

/// Runs `commands` concurrently (stdin null, output collected) as one job
/// with one deadline, e.g. one launcher per node.
///
/// The result's `stdout` is the commands' stdout concatenated in order;
/// its `stderr` is theirs, each after a line `== command <i>: <status> ==`;
/// its `status` is the first failed command's, or success when all
/// succeeded. Once one command has failed, the others get 5 s to end
/// before they are stopped like those that overrun the deadline: `SIGTERM`
/// (which a launcher passes on to its ranks), then `SIGKILL` after 3 s.
///
/// # Errors
///
/// When a command cannot be started (the others are stopped), or the job
/// does not end within `timeout`: the message holds the output so far.
pub(crate) fn run_all(commands: Vec<Command>, timeout: Duration) -> Result<Output, String> {
    let start = Instant::now();
    let mut running = Vec::with_capacity(commands.len());
    for (i, mut cmd) in commands.into_iter().enumerate() {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match cmd.spawn() {
            Ok(mut child) => {
                let stdout = collect(child.stdout.take());
                let stderr = collect(child.stderr.take());
                running.push(Running {
                    child,
                    stdout,
                    stderr,
                    status: None,
                });
            }
            Err(e) => {
                stop(&mut running);
                return Err(format!("cannot start command {i} ({cmd:?}): {e}"));
            }
        }
    }
    let mut failed_at: Option<Instant> = None;
    let mut overran = None;
    loop {
        for r in running.iter_mut().filter(|r| r.status.is_none()) {
            if let Ok(Some(status)) = r.child.try_wait() {
                r.status = Some(status);
                if !status.success() && failed_at.is_none() {
                    failed_at = Some(Instant::now());
                }
            }
        }
        if running.iter().all(|r| r.status.is_some()) {
            break;
        }
        if start.elapsed() > timeout {
            overran = Some(format!("the job did not end within {timeout:?}"));
        } else if failed_at.is_some_and(|t| t.elapsed() > FAILURE_GRACE) {
            overran = Some(format!(
                "stopped after one command failed and the others went on for {FAILURE_GRACE:?}"
            ));
        }
        if overran.is_some() {
            stop(&mut running);
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let mut out = Output {
        status: ExitStatus::default(),
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    let mut first_failure = None;
    let drained = Instant::now() + DRAIN;
    for (i, r) in running.into_iter().enumerate() {
        let status = r.status.unwrap_or_default();
        out.stdout.extend(join_by(r.stdout, drained));
        out.stderr
            .extend(format!("== command {i}: {status} ==\n").into_bytes());
        out.stderr.extend(join_by(r.stderr, drained));
        if !status.success() && first_failure.is_none() {
            first_failure = Some(status);
        }
    }
    out.status = first_failure.unwrap_or(out.status);
    match overran {
        None => Ok(out),
        Some(why) => Err(format!(
            "{why}\nstdout:\n{}\nstderr:\n{}",
            text(&out.stdout),
            text(&out.stderr)
        )),
    }
}

/// The output a collector thread read, or a note if the pipe is still open
/// at `deadline` (something the command started still holds it).
fn join_by(collector: JoinHandle<Vec<u8>>, deadline: Instant) -> Vec<u8> {
    while !collector.is_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    if collector.is_finished() {
        collector.join().unwrap_or_default()
    } else {
        b"<output still open after the command ended; not waiting>\n".to_vec()
    }
}

/// Reads a pipe to its end on a thread.
fn collect(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut buf);
        }
        buf
    })
}

/// `SIGTERM` to every command still running, `SIGKILL` after a grace
/// period, and reaps them all.
fn stop(running: &mut [Running]) {
    signal(running, libc::SIGTERM);
    let deadline = Instant::now() + KILL_GRACE;
    while Instant::now() < deadline && running.iter().any(|r| r.status.is_none()) {
        for r in running.iter_mut().filter(|r| r.status.is_none()) {
            r.status = r.child.try_wait().ok().flatten();
        }
        thread::sleep(Duration::from_millis(20));
    }
    signal(running, libc::SIGKILL);
    for r in running.iter_mut().filter(|r| r.status.is_none()) {
        r.status = r.child.wait().ok();
    }
}

fn signal(running: &[Running], signal: i32) {
    for r in running.iter().filter(|r| r.status.is_none()) {
        if let Ok(pid) = libc::pid_t::try_from(r.child.id()) {
            // SAFETY: kill has no memory-safety preconditions; the pid is
            // our own child, not yet reaped, so it cannot have been reused.
            unsafe { libc::kill(pid, signal) };
        }
    }
}
