//! Starting and supervising the ranks of a job on this host (`streamcomm-run`),
//! whether they are the whole job or one node's share of it.
//!
//! torchrun's local agent in Rust: the launcher creates the communicator's
//! [`UniqueId`] itself, so it hosts the bootstrap root and no rank has to race
//! for a port (as a node of a multi-node job it is handed the id of the root
//! node 0's launcher serves, see [`nodes`](crate::nodes)), then starts one
//! child per rank with the torchrun variables set (plus `STREAMCOMM_UNIQUE_ID`), tags each output line with its rank, and
//! treats the job as one unit: when a rank fails, the others are stopped
//! (signal, grace period, `SIGKILL`) instead of waiting forever in a
//! collective with a dead peer. It lives in the crate's library, not only its
//! binary, so benchmarks and tests can start ranks the same way.
//!
//! Each child runs in its own process group, so that stopping a rank also
//! stops what it started (`sh -c '...'` and its commands); on Linux a child
//! also gets `SIGKILL` if the launcher dies. Because children are not in the
//! terminal's process group, Ctrl-C reaches only the launcher: call
//! [`install_termination_handler`] so that it is passed on to the ranks.

use std::ffi::OsString;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use streamcomm::bootstrap::{MAX_RANKS, UniqueId};
use streamcomm::{Error, Result};

/// Longest output line forwarded in one piece; longer ones are split.
const MAX_LINE: usize = 64 << 10;
/// How often children are checked at first, and while stopping them.
const POLL: Duration = Duration::from_millis(10);
/// Longest pause between checks of running children: the pause doubles
/// from [`POLL`] up to this while they run, so a long job's launcher wakes
/// 10 times a second, not 100 (in the 2-vCPU Soft-RoCE guest each wake-up
/// took a vCPU from a spinning rank), and a failed rank or a signal is
/// acted on within 100 ms.
const MAX_POLL: Duration = Duration::from_millis(100);
/// How long output forwarding may lag behind the end of the children.
const DRAIN: Duration = Duration::from_secs(2);

/// Signal number received by the handler of [`install_termination_handler`], or 0.
static TERMINATION: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_termination(signal: libc::c_int) {
    TERMINATION.store(signal, Ordering::SeqCst);
}

/// Makes `SIGINT`, `SIGTERM` and `SIGHUP` stop the ranks of a running
/// [`LocalLauncher::run`] (the signal is passed on to each rank, then
/// `SIGKILL` after the grace period) instead of killing the launcher alone.
///
/// Meant for a launcher's `main`; it replaces the process's handlers.
///
/// # Errors
///
/// [`Error::Os`] if a handler cannot be installed.
pub fn install_termination_handler() -> Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let handler = on_termination as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; `signal` has no other preconditions.
        let previous = unsafe { libc::signal(signal, handler) };
        if previous == libc::SIG_ERR {
            return Err(Error::os(
                format!("signal({signal})"),
                io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

/// How a local job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every rank exited with status 0.
    Success,
    /// This rank failed first (non-zero status or killed by a signal); the
    /// others were stopped (with [`LocalLauncher::keep_going`], they ran to
    /// their end instead).
    RankFailed {
        /// The rank (global, in a multi-node job).
        rank: usize,
        /// Its exit status.
        status: ExitStatus,
        /// The rank the ranks' errors name as the cause, when they name one
        /// (streamcomm's mismatch errors end with `[culprit: rank N, ...]`;
        /// the rank most ranks name, read from the output the launcher
        /// forwards, so `None` without [`LocalLauncher::prefix_output`]). It
        /// is listed first in the summary: the rank that exited first is
        /// often only the first to notice.
        cause: Option<usize>,
    },
    /// The launcher received this signal and stopped the ranks.
    Interrupted {
        /// The signal number.
        signal: i32,
    },
}

impl Outcome {
    /// The exit code a launcher should end with: 0 on success, the failed
    /// rank's code (or 128 + its signal), 128 + the signal when interrupted.
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Success => 0,
            Outcome::RankFailed { status, .. } => match (status.code(), status.signal()) {
                (Some(code), _) if code != 0 => code,
                (_, Some(signal)) => 128 + signal,
                _ => 1,
            },
            Outcome::Interrupted { signal } => 128 + signal,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Success => f.write_str("all ranks exited successfully"),
            Outcome::RankFailed {
                rank,
                status,
                cause,
            } => {
                match cause {
                    Some(c) if c == rank => write!(
                        f,
                        "rank {c} caused the failure (the ranks' errors name it): "
                    )?,
                    Some(c) => write!(
                        f,
                        "rank {c} caused the failure (the ranks' errors name it); first to fail: "
                    )?,
                    None => {}
                }
                match (status.code(), status.signal()) {
                    (Some(code), _) => write!(f, "rank {rank} exited with status {code}"),
                    (_, Some(signal)) => write!(f, "rank {rank} was killed by signal {signal}"),
                    _ => write!(f, "rank {rank} failed ({status})"),
                }
            }
            Outcome::Interrupted { signal } => write!(f, "interrupted by signal {signal}"),
        }
    }
}

/// Starts `nproc` copies of a program as the ranks of one job and supervises them.
///
/// Each rank gets `STREAMCOMM_UNIQUE_ID`, `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
/// `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` and
/// `STREAMCOMM_LAUNCHER=streamcomm-run`, so that
/// `streamcomm::launch::detect_from_process_env` finds it. The launcher hosts the bootstrap
/// root for one communicator, on `127.0.0.1` unless
/// [`root_ip`](LocalLauncher::root_ip) says otherwise, or joins the root of
/// [`unique_id`](LocalLauncher::unique_id).
///
/// As one node of a multi-node job ([`node`](LocalLauncher::node)), its
/// ranks are the node's slice of the global ranks, and they also get
/// `GROUP_RANK`, `NODE_RANK` and `GROUP_WORLD_SIZE` (see
/// [`nodes`](crate::nodes), which sets this up).
///
/// # Examples
///
/// ```no_run
/// use streamcomm_run::local::{LocalLauncher, Outcome};
///
/// let outcome = LocalLauncher::new(4, "./my-program").arg("--steps=10").run()?;
/// assert_eq!(outcome, Outcome::Success);
/// # Ok::<(), streamcomm::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct LocalLauncher {
    nproc: usize,
    program: OsString,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    prefix_output: bool,
    kill_grace: Duration,
    keep_going: bool,
    root_ip: IpAddr,
    id: Option<UniqueId>,
    node: Option<Node>,
    master_addr: Option<String>,
}

/// This launcher's place in a multi-node job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Node {
    rank: usize,
    count: usize,
}

impl LocalLauncher {
    /// A job of `nproc` ranks running `program`.
    pub fn new(nproc: usize, program: impl Into<OsString>) -> LocalLauncher {
        LocalLauncher {
            nproc,
            program: program.into(),
            args: Vec::new(),
            envs: Vec::new(),
            prefix_output: true,
            kill_grace: Duration::from_secs(2),
            keep_going: false,
            root_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            id: None,
            node: None,
            master_addr: None,
        }
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds arguments.
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an extra environment variable for every rank.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// With `true` (the default) each line a rank writes is forwarded with a
    /// `[rank i] ` prefix (stdout to stdout, stderr to stderr); with `false`
    /// the ranks inherit the launcher's stdout and stderr.
    pub fn prefix_output(mut self, prefix: bool) -> Self {
        self.prefix_output = prefix;
        self
    }

    /// How long stopped ranks get between the first signal and `SIGKILL`
    /// (default 2 s).
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// With `true`, a rank that fails does not stop the others: the
    /// survivors run on (e.g. to shrink their communicator, see
    /// `Communicator::shrink`), the launcher waits for every rank, and the
    /// outcome still names the first rank that failed. With `false` (the
    /// default) the first failure stops the job.
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm_run::local::LocalLauncher;
    /// // What `streamcomm-run --keep-going -n 4 -- ./elastic-train` does.
    /// let outcome = LocalLauncher::new(4, "./elastic-train").keep_going(true).run()?;
    /// std::process::exit(outcome.exit_code()); // non-zero if a rank died
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn keep_going(mut self, keep_going: bool) -> Self {
        self.keep_going = keep_going;
        self
    }

    /// The address the bootstrap root listens on (default `127.0.0.1`).
    pub fn root_ip(mut self, ip: IpAddr) -> Self {
        self.root_ip = ip;
        self
    }

    /// Makes the ranks join the bootstrap root of `id`, which someone else
    /// serves (e.g. node 0's launcher), instead of starting a root.
    pub fn unique_id(mut self, id: UniqueId) -> Self {
        self.id = Some(id);
        self
    }

    /// Runs the ranks as node `node_rank` of `nnodes` nodes that each run
    /// `nproc` ranks: rank `i` here is global rank `node_rank * nproc + i` of
    /// `nnodes * nproc`. Combine with [`unique_id`](LocalLauncher::unique_id)
    /// so that all nodes' ranks meet at one root.
    pub fn node(mut self, node_rank: usize, nnodes: usize) -> Self {
        self.node = Some(Node {
            rank: node_rank,
            count: nnodes,
        });
        self
    }

    /// The `MASTER_ADDR` the ranks are given (default: the root's IP).
    pub fn master_addr(mut self, addr: impl Into<String>) -> Self {
        self.master_addr = Some(addr.into());
        self
    }

    /// The global rank of this launcher's first rank, and the world size.
    fn placement(&self) -> Result<(usize, usize)> {
        let node = self.node.unwrap_or(Node { rank: 0, count: 1 });
        if node.rank >= node.count {
            return Err(Error::invalid(format!(
                "node rank {} is out of range for {} nodes",
                node.rank, node.count
            )));
        }
        match node.count.checked_mul(self.nproc) {
            Some(world) if world <= MAX_RANKS => Ok((node.rank * self.nproc, world)),
            _ => Err(Error::invalid(format!(
                "{} nodes of {} ranks is more than {} ranks",
                node.count, self.nproc, MAX_RANKS
            ))),
        }
    }

    /// Runs the job to its end.
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm_run::local::{LocalLauncher, Outcome};
    ///
    /// // What `streamcomm-run -n 4 -- ./train --epochs 3` does.
    /// let outcome = LocalLauncher::new(4, "./train").args(["--epochs", "3"]).run()?;
    /// if let Outcome::RankFailed { rank, .. } = &outcome {
    ///     eprintln!("rank {rank} failed");
    /// }
    /// std::process::exit(outcome.exit_code());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `nproc` is 0 or the node placement is
    /// impossible; [`Error::Os`] if the bootstrap root or a rank cannot be
    /// started (ranks already started are stopped first). A rank that fails
    /// is an [`Outcome`] (naming its global rank), not an error.
    pub fn run(&self) -> Result<Outcome> {
        if self.nproc == 0 {
            return Err(Error::invalid("the number of ranks must be at least 1"));
        }
        let (first, world) = self.placement()?;
        let id = match self.id {
            Some(id) => id,
            None => UniqueId::new_on(self.root_ip)?,
        };
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let blames = Blames::default();
        let mut children: Vec<Child> = Vec::with_capacity(self.nproc);
        for local in 0..self.nproc {
            let rank = first + local;
            match self.spawn(local, rank, world, &id) {
                Ok(mut child) => {
                    if self.prefix_output {
                        forward_output(&mut child, rank, &done_tx, &blames);
                    }
                    children.push(child);
                }
                Err(e) => {
                    let mut exited = vec![None; children.len()];
                    stop(&mut children, &mut exited, libc::SIGTERM, self.kill_grace);
                    let program = self.program.to_string_lossy();
                    return Err(Error::os(format!("start rank {rank} ({program})"), e));
                }
            }
        }
        drop(done_tx);
        let outcome = supervise(&mut children, self.kill_grace, self.keep_going);
        // Output may still be in the pipes; wait for it, within reason (a
        // grandchild that outlives its rank may hold a pipe open).
        if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(DRAIN) {
            tracing::warn!("output of some ranks is still open after they exited; not waiting");
        }
        Ok(match outcome {
            Outcome::RankFailed { rank, status, .. } => Outcome::RankFailed {
                rank: first + rank,
                status,
                cause: blames.named(),
            },
            outcome => outcome,
        })
    }

    fn spawn(&self, local: usize, rank: usize, world: usize, id: &UniqueId) -> io::Result<Child> {
        let master = match &self.master_addr {
            Some(addr) => addr.clone(),
            None => id.addr().ip().to_string(),
        };
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .env("STREAMCOMM_UNIQUE_ID", id.to_string())
            .env("STREAMCOMM_LAUNCHER", "streamcomm-run")
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("LOCAL_RANK", local.to_string())
            .env("LOCAL_WORLD_SIZE", self.nproc.to_string())
            .env("MASTER_ADDR", master)
            .env("MASTER_PORT", id.addr().port().to_string())
            .stdin(Stdio::null())
            .process_group(0);
        if let Some(node) = self.node {
            cmd.env("GROUP_RANK", node.rank.to_string())
                .env("NODE_RANK", node.rank.to_string())
                .env("GROUP_WORLD_SIZE", node.count.to_string());
        }
        if self.prefix_output {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        #[cfg(target_os = "linux")]
        {
            let parent = std::process::id() as libc::pid_t;
            // SAFETY: the closure runs in the child between fork and exec and
            // makes only async-signal-safe calls (prctl, getppid, _exit); it
            // allocates nothing.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // The launcher may have died before prctl took effect.
                    if libc::getppid() != parent {
                        libc::_exit(1);
                    }
                    Ok(())
                });
            }
        }
        cmd.spawn()
    }
}

/// Waits for all children, stopping the rest when one fails (unless
/// `keep_going`: then the first failure is reported once all have exited)
/// or a termination signal arrives.
fn supervise(children: &mut [Child], grace: Duration, keep_going: bool) -> Outcome {
    let mut exited: Vec<Option<ExitStatus>> = vec![None; children.len()];
    let mut pause = POLL;
    let mut failure = None;
    loop {
        for (rank, child) in children.iter_mut().enumerate() {
            if exited[rank].is_some() {
                continue;
            }
            match child.try_wait() {
                Ok(Some(status)) => {
                    exited[rank] = Some(status);
                    if !status.success() && failure.is_none() {
                        failure = Some(Outcome::RankFailed {
                            rank,
                            status,
                            cause: None,
                        });
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(rank, "waiting for rank failed: {e}"),
            }
        }
        if let Some(outcome) = failure.filter(|_| !keep_going) {
            stop(children, &mut exited, libc::SIGTERM, grace);
            return outcome;
        }
        if exited.iter().all(Option::is_some) {
            return failure.unwrap_or(Outcome::Success);
        }
        let signal = TERMINATION.load(Ordering::SeqCst);
        if signal != 0 {
            stop(children, &mut exited, signal, grace);
            return Outcome::Interrupted { signal };
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_POLL);
    }
}

/// Sends `signal` to the process group of every child still running, waits
/// up to `grace`, then `SIGKILL`s the rest and reaps them.
fn stop(children: &mut [Child], exited: &mut [Option<ExitStatus>], signal: i32, grace: Duration) {
    signal_running(children, exited, signal);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        reap(children, exited);
        if exited.iter().all(Option::is_some) {
            return;
        }
        std::thread::sleep(POLL);
    }
    signal_running(children, exited, libc::SIGKILL);
    for (child, status) in children.iter_mut().zip(exited.iter_mut()) {
        if status.is_none() {
            *status = child.wait().ok();
        }
    }
}

fn reap(children: &mut [Child], exited: &mut [Option<ExitStatus>]) {
    for (child, status) in children.iter_mut().zip(exited.iter_mut()) {
        if status.is_none()
            && let Ok(Some(s)) = child.try_wait()
        {
            *status = Some(s);
        }
    }
}

/// Signals the process group of each child not yet reaped (its id cannot
/// have been reused while the child is unreaped).
fn signal_running(children: &[Child], exited: &[Option<ExitStatus>], signal: i32) {
    for (child, status) in children.iter().zip(exited) {
        if status.is_none() {
            let Ok(pid) = libc::pid_t::try_from(child.id()) else {
                continue;
            };
            // SAFETY: kill has no memory-safety preconditions; the group id
            // is that of our own unreaped child.
            unsafe { libc::kill(-pid, signal) };
        }
    }
}

/// The culprit each rank's output named first (`[culprit: rank N`, the end
/// of streamcomm's mismatch errors), by rank.
#[derive(Clone, Default)]
struct Blames(Arc<Mutex<Vec<(usize, usize)>>>);

/// What a rank's error line says in front of the culprit's rank.
const CULPRIT_MARK: &str = "[culprit: rank ";

impl Blames {
    /// Notes the culprit `line` (of `rank`'s output) names, if it is the
    /// first that rank names.
    fn scan(&self, rank: usize, line: &[u8]) {
        let Some(at) = line
            .windows(CULPRIT_MARK.len())
            .position(|w| w == CULPRIT_MARK.as_bytes())
        else {
            return;
        };
        let digits: String = line[at + CULPRIT_MARK.len()..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .map(|&b| char::from(b))
            .collect();
        let Ok(culprit) = digits.parse::<usize>() else {
            return;
        };
        let mut named = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !named.iter().any(|&(r, _)| r == rank) {
            named.push((rank, culprit));
        }
    }

    /// The rank most ranks named (the lowest of a tie), if any did.
    fn named(&self) -> Option<usize> {
        let named = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let votes = |c: usize| named.iter().filter(|&&(_, n)| n == c).count();
        named
            .iter()
            .map(|&(_, c)| c)
            .max_by(|&a, &b| votes(a).cmp(&votes(b)).then(b.cmp(&a)))
    }
}

/// Starts threads that copy the child's stdout and stderr, line by line, to
/// ours with a `[rank i] ` prefix, noting the culprits the lines name in
/// `blames`. Each holds a clone of `done` until its pipe closes.
fn forward_output(child: &mut Child, rank: usize, done: &mpsc::Sender<()>, blames: &Blames) {
    let prefix = format!("[rank {rank}] ");
    if let Some(out) = child.stdout.take() {
        spawn_forwarder(
            out,
            rank,
            prefix.clone(),
            false,
            done.clone(),
            blames.clone(),
        );
    }
    if let Some(err) = child.stderr.take() {
        spawn_forwarder(err, rank, prefix, true, done.clone(), blames.clone());
    }
}

fn spawn_forwarder(
    pipe: impl Read + Send + 'static,
    rank: usize,
    prefix: String,
    to_stderr: bool,
    done: mpsc::Sender<()>,
    blames: Blames,
) {
    let name = format!("streamcomm-run {}", prefix.trim());
    let spawned = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            forward_lines(pipe, &prefix, to_stderr, &|line| blames.scan(rank, line));
            drop(done);
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the output thread {name}: {e}");
    }
}

/// Copies `pipe` to stdout or stderr one prefixed line at a time (each line
/// written whole, so lines of different ranks never mix), showing each line
/// to `seen` first. Keeps draining the pipe even when writing fails, so the
/// rank never blocks on a full pipe.
fn forward_lines(pipe: impl Read, prefix: &str, to_stderr: bool, seen: &dyn Fn(&[u8])) {
    let mut reader = BufReader::with_capacity(MAX_LINE, pipe);
    let mut line = prefix.as_bytes().to_vec();
    loop {
        let (used, end_of_line) = match reader.fill_buf() {
            Ok([]) => break,
            Ok(buf) => match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    line.extend_from_slice(&buf[..=i]);
                    (i + 1, true)
                }
                None => {
                    line.extend_from_slice(buf);
                    (buf.len(), line.len() - prefix.len() >= MAX_LINE)
                }
            },
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        reader.consume(used);
        if end_of_line {
            seen(&line[prefix.len()..]);
            emit(&mut line, prefix.len(), to_stderr);
        }
    }
    if line.len() > prefix.len() {
        seen(&line[prefix.len()..]);
        emit(&mut line, prefix.len(), to_stderr);
    }
}

/// Writes a prefixed line (adding the newline if missing) and resets it to
/// the prefix.
fn emit(line: &mut Vec<u8>, prefix_len: usize, to_stderr: bool) {
    if !line.ends_with(b"\n") {
        line.push(b'\n');
    }
    let _ = if to_stderr {
        io::stderr().lock().write_all(line)
    } else {
        let mut out = io::stdout().lock();
        out.write_all(line).and_then(|()| out.flush())
    };
    line.truncate(prefix_len);
}

#[cfg(test)]
#[path = "local_tests.rs"]
mod tests;
