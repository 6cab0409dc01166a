//! A misspelt `STREAMCOMM_*` variable is warned about, for real: a child
//! process started with `STREAMCOMM_TIMOUT=5` in its environment reads its
//! configuration several times; its stderr must hold the warning, with the
//! near miss, exactly once. With a `tracing` subscriber installed, the
//! warning goes to it (at warn level) and not to stderr.

use std::process::Command;
use std::sync::Mutex;

use streamcomm::Config;

const CHILD: &str = "STREAMCOMM_TEST_UNKNOWN_VARS_CHILD";
const TYPO_WARNING: &str = "STREAMCOMM_TIMOUT is set, but streamcomm reads no such variable \
                            (ignored); did you mean STREAMCOMM_TIMEOUT?";
const FAR_WARNING: &str = "STREAMCOMM_ZZQX_UNHEARD_OF is set, but streamcomm reads no such \
                           variable (ignored); the variables are listed in \
                           docs/guide/configuration.md";

/// Runs the child in `scenario` and returns its stderr.
fn run_child(scenario: &str) -> String {
    let proof = streamcomm_testkit::ChildProof::new(scenario);
    let out = Command::new(std::env::current_exe().unwrap())
        .args(streamcomm_testkit::child_args!("child"))
        .env(CHILD, scenario)
        .env("STREAMCOMM_TIMOUT", "5")
        .env("STREAMCOMM_ZZQX_UNHEARD_OF", "1")
        .env("STREAMCOMM_NSTEPS", "4")
        .envs([proof.env()])
        .output()
        .expect("start the child");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{scenario}: the child failed: {:?}\nstdout:\n{}\nstderr:\n{stderr}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    proof.assert_ran(1);
    stderr
}

#[test]
fn a_misspelt_variable_is_warned_about_once_on_stderr() {
    let stderr = run_child("stderr");
    let lines: Vec<&str> = stderr.lines().collect();
    let count = |text: &str| lines.iter().filter(|l| l.contains(text)).count();
    assert_eq!(
        count(&format!("streamcomm: warning: {TYPO_WARNING}")),
        1,
        "stderr:\n{stderr}"
    );
    assert_eq!(
        count(&format!("streamcomm: warning: {FAR_WARNING}")),
        1,
        "stderr:\n{stderr}"
    );
    assert_eq!(count("STREAMCOMM_NSTEPS"), 0, "stderr:\n{stderr}");
    assert_eq!(count("streamcomm: warning:"), 2, "stderr:\n{stderr}");
}

#[test]
fn with_a_subscriber_the_warning_goes_to_tracing_only() {
    let stderr = run_child("tracing");
    assert!(
        !stderr.contains("STREAMCOMM_TIMOUT"),
        "warned on stderr although a subscriber is installed:\n{stderr}"
    );
}

/// Warn-level events of target `streamcomm::config` seen by [`Capture`].
static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// A `tracing` subscriber that keeps the message of each warning.
struct Capture;

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let meta = event.metadata();
        if *meta.level() == tracing::Level::WARN && meta.target() == "streamcomm::config" {
            let mut m = Message(String::new());
            event.record(&mut m);
            WARNINGS.lock().unwrap().push(m.0);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    let Ok(scenario) = std::env::var(CHILD) else {
        return;
    };
    if scenario == "tracing" {
        tracing::subscriber::set_global_default(Capture).expect("install the subscriber");
    }
    for _ in 0..3 {
        let config = Config::from_env().expect("the typo does not stop the configuration");
        assert_eq!(config.nsteps, 4);
    }
    // The launcher's reader checks the same names, and warns no more.
    let _ = streamcomm::launch::detect_from_process_env();
    if scenario == "tracing" {
        let mut warnings = WARNINGS.lock().unwrap().clone();
        warnings.sort();
        assert_eq!(
            warnings,
            [TYPO_WARNING.to_string(), FAR_WARNING.to_string()],
            "one warn-level event per unknown name"
        );
    }
    streamcomm_testkit::child_ran();
}
