//! One place for configuration (mscclpp's `env.hpp`).
//!
//! [`Config`] has one field per `STREAMCOMM_*` environment variable, with one
//! doc line each. [`Config::from_env`] is the only code in the library that
//! reads these variables; everything else receives a `Config`.

pub(crate) mod algo_override;
pub(crate) mod cost_params;
pub(crate) mod fault_spec;
mod transport;
pub(crate) mod vars;

use std::time::Duration;

use crate::barrier::BarrierAlgo;
pub use algo_override::AlgoOverride;
pub(crate) use cost_params::{CostParams, LinkCost};
pub(crate) use fault_spec::FaultPlan;
pub use transport::{Transport, TransportChoice};
use vars::Var;

use crate::{Error, Result};

/// Default slot-ring size per connection (`docs/design/architecture.md`): 4 MiB.
pub const DEFAULT_BUFFSIZE: usize = 4 << 20;
/// Default of `STREAMCOMM_SHM_BUDGET`: 28 MiB, full-size rings from up to
/// 7 local peers (8 ranks on a host, a GPU node's count); with more, each
/// rank's rings both ways stay under 64 MB even once all are used.
pub const DEFAULT_SHM_BUDGET: usize = 28 << 20;
/// Default number of slots per connection.
pub const DEFAULT_NSTEPS: usize = 8;
/// Most slots a ring may have (`STREAMCOMM_NSTEPS`).
pub const MAX_NSTEPS: usize = 1024;
/// Largest slot ring (`STREAMCOMM_BUFFSIZE`): 1 GiB.
const MAX_BUFFSIZE: usize = 1 << 30;
/// Most sockets per tcp peer (`STREAMCOMM_NCHANNELS`).
const MAX_NCHANNELS: usize = 64;
/// Default eager limit for point-to-point messages (`docs/design/p2p.md`):
/// messages up to this many bytes go through the slot ring, larger ones use
/// the rendezvous protocol where the transport has one. It is where the
/// eager and rendezvous latency curves cross on a 2-core host: eager was
/// faster up to 256 KiB, rendezvous from 512 KiB
/// (`benches/scripts/p2p-crossover.sh -b 4K -e 4M -f 2`, shared memory;
/// `docs/measurements/host-shm.md`).
pub const DEFAULT_P2P_EAGER_LIMIT: usize = 256 << 10;
/// Default data bytes of a CUDA direct-path window (32 MiB: at H200 copy
/// speeds a chunk then takes ~30 µs, well above its two flag rounds).
pub const DEFAULT_CUDA_WINDOW: usize = 32 << 20;
/// Smallest non-zero `STREAMCOMM_CUDA_WINDOW`.
pub const MIN_CUDA_WINDOW: usize = 1 << 10;
/// Default timeout for every wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Where the barrier's algorithm is driven from on the host backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The thread that runs the stream (or calls `barrier_host`) drives the
    /// direct transport itself: no thread hand-off on the critical path.
    Inline,
    /// The stream hands the barrier to the communicator's progress engine and
    /// waits on a doorbell, as the CUDA backend does.
    Proxy,
}

/// Communicator settings. `Config::default()` gives the documented defaults;
/// [`Config::from_env`] applies `STREAMCOMM_*` variables on top.
///
/// One field per variable; the reference table of every variable is
/// `docs/guide/configuration.md`, checked against these doc comments by
/// `scripts/check-config-doc.sh`.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use streamcomm::{bootstrap::UniqueId, Communicator, Config, Transport};
///
/// let mut config = Config::from_env()?; // defaults + STREAMCOMM_* variables
/// config.timeout = Duration::from_secs(60); // then code
/// config.transport = Transport::Shm.into(); // TransportChoice::Only(Transport::Shm)
/// let comm = Communicator::builder().unique_id(&UniqueId::new()?).rank(0).size(1).config(config).build()?;
/// assert_eq!(comm.config().timeout, Duration::from_secs(60));
/// # Ok::<(), streamcomm::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// `STREAMCOMM_BUFFSIZE`: bytes of slot ring per directed connection (default 4 MiB).
    pub buffsize: usize,
    /// `STREAMCOMM_NSTEPS`: slots per ring (default 8); slot size is `buffsize / nsteps`.
    pub nsteps: usize,
    /// `STREAMCOMM_SHM_BUDGET`: most bytes one rank's inbound rings from
    /// the ranks of its host may take (default 28 MiB; shared memory, or
    /// the rank's own where tcp or verbs carry them):
    /// where `buffsize` rings from every local peer would not fit, every
    /// communicator's slots shrink alike (to no less than 4 KiB) until
    /// they do. The communicator's [`Config`] shows the `buffsize` it runs.
    pub shm_budget: usize,
    /// `STREAMCOMM_TIMEOUT`: seconds any single wait may take before the
    /// communicator fails with [`Error::Timeout`] (default 300; fractions allowed).
    pub timeout: Duration,
    /// `STREAMCOMM_PROGRESS`: `inline` (default) or `proxy`: who drives host-backend barriers.
    pub progress: Progress,
    /// `STREAMCOMM_SPIN`: busy-poll iterations before a waiter yields (default
    /// 200, none when more ranks than cores share this host). 200 spins take
    /// ~5 µs on the development machines, about what waking a thread costs:
    /// spinning longer only pays off when nothing else wants the core, and
    /// there 2000 spins (~50 µs) made each hop of a 2-rank all-reduce cost
    /// the whole spin while the peer waited for the core (8 B: 130 -> 37 µs
    /// with a loaded machine).
    pub spin: u32,
    /// `STREAMCOMM_BARRIER_ALGO`: barrier algorithm (`central_counter`,
    /// `central_flags`, `chain`, `tree[:K]`, `dissemination`, `kway[:K]`,
    /// `hierarchical[:dissemination|:tree[:K]]`); `None` picks by the default
    /// rule (`barrier::default_algo`).
    pub barrier_algo: Option<BarrierAlgo>,
    /// `STREAMCOMM_HOSTS_OVERRIDE`: pretend ranks live on these hosts (for
    /// topology only: tree and hierarchical barriers). Either one label per
    /// rank, comma-separated (`a,a,b,b`), or a number K meaning K consecutive
    /// ranks per host.
    pub hosts_override: Option<HostsOverride>,
    /// `STREAMCOMM_TRANSPORT`: `auto` (default), `shm`, `tcp` or `verbs`
    /// ([`TransportChoice::Auto`] or [`TransportChoice::Only`] a [`Transport`]).
    pub transport: TransportChoice,
    /// `STREAMCOMM_NCHANNELS`: sockets per tcp peer, carrying alternate slots (default 2).
    pub nchannels: usize,
    /// `STREAMCOMM_SOCKET_IFNAME`: interface whose address tcp listens on
    /// (default: the address that reaches the bootstrap root).
    pub socket_ifname: Option<String>,
    /// `STREAMCOMM_IB_HCA`: RDMA device the verbs transport uses (default:
    /// the first device with an active port).
    pub ib_hca: Option<String>,
    /// `STREAMCOMM_IB_GID_INDEX`: GID index the verbs transport uses (default:
    /// a RoCE v2 GID chosen automatically, else index 0).
    pub ib_gid_index: Option<u32>,
    /// `STREAMCOMM_P2P_EAGER_LIMIT`: largest point-to-point message (bytes)
    /// sent eagerly through the slot ring (default 256 KiB); larger messages
    /// use rendezvous (see `docs/design/p2p.md`).
    pub p2p_eager_limit: usize,
    /// `STREAMCOMM_P2P_DIRECT`: `1` (default) lets rendezvous write straight
    /// into a receiver's buffer on the same host (cross-memory attach); `0`
    /// streams it through the slot ring instead.
    pub p2p_direct: bool,
    /// `STREAMCOMM_CUDA_WINDOW`: data bytes of each rank's window on the CUDA
    /// backend's direct path between ranks of one host (default 32 MiB; `0`
    /// turns the direct path off, leaving the staged path; set it alike on
    /// every rank). See [`crate::cuda`].
    pub cuda_window: usize,
    /// `STREAMCOMM_GPUDIRECT`: `1` (default) lets the CUDA backend's sends
    /// and receives with peers over verbs move straight from and into
    /// device memory where GPUDirect RDMA works (probed: dma-buf, then
    /// nvidia-peermem); `0` stages them through pinned host memory. See
    /// `device::gpudirect_probe`.
    pub gpudirect: bool,
    /// `STREAMCOMM_BIND`: `1` (default) binds the host-stream threads that
    /// run this communicator's work to one core per local rank, where the
    /// host's ranks fit on the CPUs this process may use; `0` leaves them to
    /// the scheduler. See `comm::affinity`.
    pub bind: bool,
    /// `STREAMCOMM_DEBUG`: a `tracing` filter the examples and benchmark install
    /// (the library itself never installs a subscriber).
    pub debug: Option<String>,
    /// `STREAMCOMM_ALGO`: force collective algorithms, one name (`tree`) or
    /// `collective=name,...` (`all_reduce=ring,broadcast=binomial`); the
    /// cost model chooses the others.
    pub algo: AlgoOverride,
    /// `STREAMCOMM_TUNING_FILE`: cost-model parameters read from this file
    /// (written by `streamcomm-bench calibrate`); `None`: built-in defaults.
    pub(crate) tuning: Option<CostParams>,
    /// `STREAMCOMM_FAULTS`: fault-injection rules such as
    /// `send:peer=1:nth=5:drop` (`config/fault_spec.rs`); applied
    /// only by builds with the `fault-injection` feature (default: none).
    pub(crate) faults: FaultPlan,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            buffsize: DEFAULT_BUFFSIZE,
            nsteps: DEFAULT_NSTEPS,
            shm_budget: DEFAULT_SHM_BUDGET,
            timeout: DEFAULT_TIMEOUT,
            progress: Progress::Inline,
            spin: 200,
            barrier_algo: None,
            hosts_override: None,
            transport: TransportChoice::Auto,
            nchannels: 2,
            socket_ifname: None,
            ib_hca: None,
            ib_gid_index: None,
            p2p_eager_limit: DEFAULT_P2P_EAGER_LIMIT,
            p2p_direct: true,
            cuda_window: DEFAULT_CUDA_WINDOW,
            gpudirect: true,
            bind: true,
            debug: None,
            algo: AlgoOverride::default(),
            tuning: None,
            faults: FaultPlan::default(),
        }
    }
}

impl Config {
    /// Defaults overridden by the process environment.
    ///
    /// A variable whose name starts `STREAMCOMM_` but that no part of
    /// streamcomm reads (a typo such as `STREAMCOMM_TIMOUT`) is warned
    /// about, once per process and name: through `tracing` at warn level,
    /// and on stderr while no `tracing` subscriber is installed, with the
    /// nearest known name ("did you mean STREAMCOMM_TIMEOUT?").
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::Config;
    /// let config = Config::from_env()?; // the defaults, with STREAMCOMM_* variables applied
    /// assert!(config.slot_bytes() >= 64);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a variable does not parse or is out
    /// of range, naming the variable and its value and saying what it
    /// accepts (`STREAMCOMM_TRANSPORT=infiniband is not a transport;
    /// expected one of: auto, shm, tcp, verbs`).
    pub fn from_env() -> Result<Config> {
        vars::warn_unknown_in_process_env();
        Config::default().with_vars(|name| std::env::var(name).ok())
    }

    /// Applies variables from any getter (the testable core of [`Config::from_env`]).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::Config;
    /// use std::collections::HashMap;
    /// let vars = HashMap::from([("STREAMCOMM_NSTEPS", "4"), ("STREAMCOMM_TIMEOUT", "2.5")]);
    /// let config = Config::default().with_vars(|name| vars.get(name).map(|v| v.to_string()))?;
    /// assert_eq!(config.nsteps, 4);
    /// assert_eq!(config.timeout.as_millis(), 2500);
    /// let bad = Config::default().with_vars(|name| (name == "STREAMCOMM_NSTEPS").then(|| "many".into()));
    /// let msg = bad.unwrap_err().to_string();
    /// assert!(msg.contains("STREAMCOMM_NSTEPS=many is not a slot count; expected an integer"), "{msg}");
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// The getter is asked only for the variables of `Config`, so unknown
    /// names are not checked here (that is [`Config::from_env`]'s job).
    ///
    /// # Errors
    /// As [`Config::from_env`].
    pub fn with_vars(mut self, get: impl Fn(&str) -> Option<String>) -> Result<Config> {
        use vars::*;
        let get = |v: Var| get(v.name);
        if let Some(v) = get(BUFFSIZE) {
            self.buffsize = parse_size(BUFFSIZE, &v)?;
            if self.buffsize > MAX_BUFFSIZE {
                return Err(invalid_because(BUFFSIZE, &v, "over 1G"));
            }
        }
        if let Some(v) = get(SHM_BUDGET) {
            self.shm_budget = parse_size(SHM_BUDGET, &v)?;
            if !(64 << 10..=MAX_BUFFSIZE << 6).contains(&self.shm_budget) {
                return Err(invalid_because(SHM_BUDGET, &v, "not between 64K and 64G"));
            }
        }
        if let Some(v) = get(NSTEPS) {
            self.nsteps = parse_num(NSTEPS, &v)?;
            if self.nsteps == 0 || self.nsteps > MAX_NSTEPS {
                return Err(invalid(NSTEPS, &v));
            }
        }
        if let Some(v) = get(TIMEOUT) {
            let secs: f64 = v.trim().parse().map_err(|_| invalid(TIMEOUT, &v))?;
            if !(secs > 0.0 && secs.is_finite()) {
                return Err(invalid(TIMEOUT, &v));
            }
            self.timeout = Duration::try_from_secs_f64(secs)
                .map_err(|_| invalid_because(TIMEOUT, &v, "too long"))?;
        }
        if let Some(v) = get(PROGRESS) {
            self.progress = match v.trim().to_ascii_lowercase().as_str() {
                "inline" => Progress::Inline,
                "proxy" => Progress::Proxy,
                _ => return Err(invalid(PROGRESS, &v)),
            };
        }
        if let Some(v) = get(SPIN) {
            self.spin = v.trim().parse().map_err(|_| invalid(SPIN, &v))?;
        }
        if let Some(v) = get(BARRIER_ALGO) {
            let t = v.trim();
            if !t.is_empty() && !t.eq_ignore_ascii_case("auto") {
                let algo = BarrierAlgo::parse_reason(t)
                    .map_err(|why| invalid_because(BARRIER_ALGO, &v, &why))?;
                self.barrier_algo = Some(algo);
            }
        }
        if let Some(v) = get(HOSTS_OVERRIDE) {
            self.hosts_override = Some(HostsOverride::parse(&v)?);
        }
        if let Some(v) = get(TRANSPORT) {
            self.transport = v.parse()?;
        }
        if let Some(v) = get(NCHANNELS) {
            self.nchannels = parse_num(NCHANNELS, &v)?;
            if self.nchannels == 0 || self.nchannels > MAX_NCHANNELS {
                return Err(invalid(NCHANNELS, &v));
            }
        }
        if let Some(v) = get(SOCKET_IFNAME) {
            let v = v.trim();
            if !v.is_empty() {
                self.socket_ifname = Some(v.to_string());
            }
        }
        if let Some(v) = get(IB_HCA) {
            let t = v.trim();
            if !t.is_empty() {
                if !t
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
                {
                    return Err(invalid(IB_HCA, &v));
                }
                self.ib_hca = Some(t.to_string());
            }
        }
        if let Some(v) = get(IB_GID_INDEX) {
            let t = v.trim();
            if !t.is_empty() {
                // Strict: decimal digits only, and a GID table has at most
                // 256 entries per port in practice (u8 in the address vector).
                let n: u32 = t
                    .chars()
                    .all(|c| c.is_ascii_digit())
                    .then(|| t.parse().ok())
                    .flatten()
                    .filter(|&n| n <= 255)
                    .ok_or_else(|| invalid(IB_GID_INDEX, &v))?;
                self.ib_gid_index = Some(n);
            }
        }
        if let Some(v) = get(P2P_EAGER_LIMIT) {
            self.p2p_eager_limit = parse_size(P2P_EAGER_LIMIT, &v)?;
        }
        for (var, flag) in [
            (P2P_DIRECT, &mut self.p2p_direct),
            (GPUDIRECT, &mut self.gpudirect),
            (BIND, &mut self.bind),
        ] {
            if let Some(v) = get(var) {
                *flag = match v.trim().to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" | "on" => true,
                    "0" | "false" | "no" | "off" => false,
                    _ => return Err(invalid(var, &v)),
                };
            }
        }
        if let Some(v) = get(CUDA_WINDOW) {
            let bytes = parse_size(CUDA_WINDOW, &v)?;
            if bytes != 0 && bytes < MIN_CUDA_WINDOW {
                return Err(invalid_because(CUDA_WINDOW, &v, "under 1K"));
            }
            self.cuda_window = bytes;
        }
        if let Some(v) = get(DEBUG) {
            self.debug = Some(v);
        }
        if let Some(v) = get(ALGO) {
            self.algo = AlgoOverride::parse(&v)?;
        }
        if let Some(v) = get(TUNING_FILE) {
            let path = v.trim();
            if !path.is_empty() {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    invalid_because(TUNING_FILE, &v, &format!("cannot read it: {e}"))
                })?;
                let params = CostParams::parse(&text)
                    .map_err(|why| invalid_because(TUNING_FILE, &v, &why))?;
                self.tuning = Some(params);
            }
        }
        if let Some(v) = get(FAULTS) {
            self.faults = FaultPlan::parse(&v)?;
        }
        self.validate()?;
        Ok(self)
    }

    /// Bytes per slot (`buffsize / nsteps`, rounded down to 64 bytes).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::Config;
    /// assert_eq!(Config::default().slot_bytes(), 512 << 10); // 4 MiB / 8 slots
    /// let mut config = Config::default();
    /// (config.buffsize, config.nsteps) = (1 << 20, 4);
    /// assert_eq!(config.slot_bytes(), 256 << 10);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn slot_bytes(&self) -> usize {
        (self.buffsize / self.nsteps.max(1)) & !63
    }

    /// Checks the settings are usable.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::Config;
    /// assert!(Config::default().validate().is_ok());
    /// let mut config = Config::default();
    /// config.nsteps = 0;
    /// assert!(config.validate().is_err());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the field and its variable and
    /// saying what is accepted.
    pub fn validate(&self) -> Result<()> {
        if self.nsteps == 0 || self.nsteps > MAX_NSTEPS {
            return Err(Error::invalid(format!(
                "nsteps (STREAMCOMM_NSTEPS) must be in 1..={MAX_NSTEPS}, got {}",
                self.nsteps
            )));
        }
        if self.slot_bytes() < 64 {
            return Err(Error::invalid(format!(
                "buffsize {} / nsteps {} leaves slots under 64 bytes: STREAMCOMM_BUFFSIZE must \
                 be at least 64 times STREAMCOMM_NSTEPS",
                self.buffsize, self.nsteps
            )));
        }
        if self.buffsize > MAX_BUFFSIZE {
            return Err(Error::invalid(format!(
                "buffsize (STREAMCOMM_BUFFSIZE) {} exceeds 1 GiB",
                self.buffsize
            )));
        }
        if self.nchannels == 0 || self.nchannels > MAX_NCHANNELS {
            return Err(Error::invalid(format!(
                "nchannels (STREAMCOMM_NCHANNELS) must be in 1..={MAX_NCHANNELS}, got {}",
                self.nchannels
            )));
        }
        if self.timeout.is_zero() {
            return Err(Error::invalid(
                "timeout (STREAMCOMM_TIMEOUT) must be positive",
            ));
        }
        if !self.faults.is_empty() && !cfg!(feature = "fault-injection") {
            return Err(Error::invalid(
                "STREAMCOMM_FAULTS is set, but this build of streamcomm has no fault injection \
                 (build with the `fault-injection` feature)",
            ));
        }
        Ok(())
    }
}

/// A pretend placement of ranks on hosts (see [`Config::hosts_override`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostsOverride {
    /// One host label per rank.
    Labels(Vec<String>),
    /// This many consecutive ranks per host.
    RanksPerHost(usize),
}

impl HostsOverride {
    /// Parses `a,a,b,b` or `K`.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::config::HostsOverride;
    /// assert_eq!(HostsOverride::parse("2")?, HostsOverride::RanksPerHost(2));
    /// assert_eq!(HostsOverride::parse("a,a,b")?.labels(3)?, ["a", "a", "b"]);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `0` or a list with an empty label,
    /// saying what is accepted.
    pub fn parse(text: &str) -> Result<HostsOverride> {
        let t = text.trim();
        if let Ok(k) = t.parse::<usize>() {
            if k == 0 {
                return Err(vars::invalid(vars::HOSTS_OVERRIDE, text));
            }
            return Ok(HostsOverride::RanksPerHost(k));
        }
        let labels: Vec<String> = t.split(',').map(|s| s.trim().to_string()).collect();
        if labels.iter().any(|l| l.is_empty()) {
            return Err(vars::invalid_because(
                vars::HOSTS_OVERRIDE,
                text,
                "an empty label",
            ));
        }
        Ok(HostsOverride::Labels(labels))
    }

    /// The host label of each of `size` ranks.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::config::HostsOverride;
    /// assert_eq!(HostsOverride::RanksPerHost(2).labels(3)?, ["host0", "host0", "host1"]);
    /// assert!(HostsOverride::parse("a,b")?.labels(3).is_err());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a label list does not have `size` entries.
    pub fn labels(&self, size: usize) -> Result<Vec<String>> {
        match self {
            HostsOverride::RanksPerHost(k) => {
                Ok((0..size).map(|r| format!("host{}", r / k)).collect())
            }
            HostsOverride::Labels(l) if l.len() == size => Ok(l.clone()),
            HostsOverride::Labels(l) => Err(Error::invalid(format!(
                "STREAMCOMM_HOSTS_OVERRIDE names {} hosts for {size} ranks; expected one \
                 label per rank, or a number K of consecutive ranks per host",
                l.len()
            ))),
        }
    }
}

fn parse_num(var: Var, value: &str) -> Result<usize> {
    value.trim().parse().map_err(|_| vars::invalid(var, value))
}

/// Parses `4194304`, `4M`, `512K`, `1G` (binary multiples).
fn parse_size(var: Var, value: &str) -> Result<usize> {
    let v = value.trim();
    let (digits, shift) = match v.chars().last() {
        Some('k' | 'K') => (&v[..v.len() - 1], 10),
        Some('m' | 'M') => (&v[..v.len() - 1], 20),
        Some('g' | 'G') => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    let n: usize = digits.parse().map_err(|_| vars::invalid(var, value))?;
    n.checked_mul(1usize << shift)
        .ok_or_else(|| vars::invalid_because(var, value, "too large"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::default().with_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_and_overrides() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.slot_bytes(), 512 << 10);
        let c = cfg(&[
            ("STREAMCOMM_BUFFSIZE", "1M"),
            ("STREAMCOMM_NSTEPS", "4"),
            ("STREAMCOMM_TIMEOUT", "2.5"),
            ("STREAMCOMM_PROGRESS", "proxy"),
        ])
        .unwrap();
        assert_eq!(c.slot_bytes(), 256 << 10);
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert_eq!(c.progress, Progress::Proxy);
        let c = cfg(&[
            ("STREAMCOMM_BARRIER_ALGO", "tree:3"),
            ("STREAMCOMM_HOSTS_OVERRIDE", "2"),
        ])
        .unwrap();
        assert_eq!(c.barrier_algo, Some(BarrierAlgo::Tree { fanout: 3 }));
        assert_eq!(
            c.hosts_override.unwrap().labels(3).unwrap(),
            ["host0", "host0", "host1"]
        );
        let o = HostsOverride::parse("x, y").unwrap();
        assert!(o.labels(3).is_err());
    }

    #[test]
    fn algorithm_override_and_tuning_file() {
        let c = cfg(&[("STREAMCOMM_ALGO", "all_gather=bruck")]).unwrap();
        assert_eq!(c.algo.to_string(), "all_gather=bruck");
        let path = std::env::temp_dir().join(format!("sc-tuning-{}.txt", std::process::id()));
        let params = CostParams {
            cores: 5,
            ..CostParams::default()
        };
        std::fs::write(&path, params.to_file(&[])).unwrap();
        let c = cfg(&[("STREAMCOMM_TUNING_FILE", path.to_str().unwrap())]).unwrap();
        assert_eq!(c.tuning.map(|t| t.cores), Some(5));
        std::fs::write(&path, "cores = 5\n").unwrap();
        let e = cfg(&[("STREAMCOMM_TUNING_FILE", path.to_str().unwrap())]).unwrap_err();
        assert!(e.to_string().contains("missing key"), "{e}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn gpudirect_switch() {
        assert!(cfg(&[]).unwrap().gpudirect);
        assert!(!cfg(&[("STREAMCOMM_GPUDIRECT", "0")]).unwrap().gpudirect);
        assert!(cfg(&[("STREAMCOMM_GPUDIRECT", "on")]).unwrap().gpudirect);
    }

    #[test]
    fn cuda_window_sizes() {
        assert_eq!(cfg(&[]).unwrap().cuda_window, DEFAULT_CUDA_WINDOW);
        let w = |v| cfg(&[("STREAMCOMM_CUDA_WINDOW", v)]).unwrap().cuda_window;
        assert_eq!(w("0"), 0);
        assert_eq!(w("4K"), 4 << 10);
        assert_eq!(w("64M"), 64 << 20);
    }

    #[test]
    fn verbs_settings() {
        let c = cfg(&[
            ("STREAMCOMM_TRANSPORT", "Verbs"),
            ("STREAMCOMM_IB_HCA", " rxe0 "),
            ("STREAMCOMM_IB_GID_INDEX", "3"),
        ])
        .unwrap();
        assert_eq!(c.transport, TransportChoice::Only(Transport::Verbs));
        assert_eq!(c.ib_hca.as_deref(), Some("rxe0"));
        assert_eq!(c.ib_gid_index, Some(3));
        let c = cfg(&[("STREAMCOMM_IB_HCA", ""), ("STREAMCOMM_IB_GID_INDEX", " ")]).unwrap();
        assert_eq!((c.ib_hca, c.ib_gid_index), (None, None));
    }
}
