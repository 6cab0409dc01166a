//! Segments left in /dev/shm by a dead process are removed when a
//! communicator creates its own; a live process's segment is left alone.
//!
//! The leftovers are real: child processes (this test binary) create a
//! segment with the library's own code; one then SIGKILLs itself before it
//! could unlink it, the other stays alive until told to finish.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use streamcomm::bootstrap::UniqueId;
use streamcomm::testing::transport::RingShape;
use streamcomm::testing::transport::Segment;
use streamcomm::{Communicator, Config};

const CHILD: &str = "STREAMCOMM_TEST_SEGMENT_CHILD";

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    let Ok(mode) = std::env::var(CHILD) else {
        return;
    };
    let shape = RingShape {
        nsteps: 2,
        slot_bytes: 64,
    };
    let seg = Segment::create(2, shape).unwrap();
    println!("SEGMENT {}", seg.name());
    std::io::stdout().flush().unwrap();
    match mode.as_str() {
        // SAFETY: raising SIGKILL on ourselves, as a crash would.
        "die" => unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        },
        _ => {
            // Live until the parent closes our stdin, then clean up normally.
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            drop(seg);
        }
    }
}

/// Starts a child in `mode`; returns it and the path of its segment.
fn spawn(mode: &str) -> (std::process::Child, PathBuf) {
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args(streamcomm_testkit::child_args!("child"))
        .env(CHILD, mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Read (and keep draining) its output on a thread, so that it never
    // writes into a closed pipe.
    let out = c.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(name) = line.strip_prefix("SEGMENT /") {
                let _ = tx.send(name.to_string());
            }
        }
    });
    let name = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("child printed no segment name");
    (c, PathBuf::from("/dev/shm").join(name))
}

#[test]
fn leftovers_of_dead_processes_are_swept() {
    // The live one first: creating a segment sweeps, so the dead one must
    // come after it.
    let (mut live, live_path) = spawn("live");
    let (mut dead, dead_path) = spawn("die");
    assert_eq!(dead.wait().unwrap().signal(), Some(libc::SIGKILL));
    assert!(dead_path.exists(), "the killed child left {dead_path:?}");
    assert!(live_path.exists());

    let id = UniqueId::new().unwrap();
    let comm = Communicator::builder()
        .unique_id(&id)
        .rank(0)
        .size(1)
        .config(Config::default())
        .build()
        .unwrap();
    assert!(!dead_path.exists(), "{dead_path:?} was not swept");
    assert!(
        live_path.exists(),
        "{live_path:?} of a live process was removed"
    );
    drop(comm);

    drop(live.stdin.take());
    assert!(live.wait().unwrap().success());
    assert!(
        !live_path.exists(),
        "the live child unlinks its own segment"
    );
}
