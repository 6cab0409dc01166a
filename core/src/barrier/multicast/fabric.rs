//! An in-memory multicast group for the protocol's tests: every datagram
//! sent reaches every member's queue (the sender's too, as multicast loops
//! back); loss and duplication come from the fault dice, as on verbs.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::Datagrams;
use crate::Error;

/// The group.
#[derive(Default)]
pub(super) struct Fabric {
    queues: Vec<(Mutex<VecDeque<Vec<u8>>>, Condvar)>,
}

impl Fabric {
    /// A group of `size` members.
    pub(super) fn new(size: usize) -> Arc<Fabric> {
        Arc::new(Fabric {
            queues: (0..size).map(|_| Default::default()).collect(),
        })
    }

    /// Member `rank`'s end.
    pub(super) fn member(self: &Arc<Fabric>, rank: usize) -> Box<dyn Datagrams> {
        Box::new(Member {
            fabric: self.clone(),
            rank,
        })
    }
}

struct Member {
    fabric: Arc<Fabric>,
    rank: usize,
}

impl Datagrams for Member {
    fn send(&mut self, bytes: &[u8]) -> Result<(), Error> {
        for (q, cv) in &self.fabric.queues {
            q.lock().unwrap().push_back(bytes.to_vec());
            cv.notify_all();
        }
        Ok(())
    }

    fn recv(&mut self, each: &mut dyn FnMut(&[u8])) -> Result<(), Error> {
        let got: Vec<Vec<u8>> = self.fabric.queues[self.rank]
            .0
            .lock()
            .unwrap()
            .drain(..)
            .collect();
        for d in got {
            each(&d);
        }
        Ok(())
    }

    fn sleep(&mut self, timeout: Duration) -> Result<(), Error> {
        let (q, cv) = &self.fabric.queues[self.rank];
        let q = q.lock().unwrap();
        if q.is_empty() {
            drop(cv.wait_timeout(q, timeout).unwrap());
        }
        Ok(())
    }

    fn wake_fd(&self) -> Option<i32> {
        None
    }

    fn arm(&mut self) -> Result<bool, Error> {
        Ok(!self.fabric.queues[self.rank].0.lock().unwrap().is_empty())
    }
}
