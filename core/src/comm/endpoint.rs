//! What each rank tells the others at bootstrap, and how it is encoded.
//!
//! The endpoint is a small versioned record: the host identity (to decide who
//! shares memory), the process id, the shared-memory segment name and the ring
//! geometry (every rank must agree on it). Decoding checks every length before
//! using it: these bytes come from the network.

use std::net::SocketAddr;

use crate::framed::FrameReader;
use crate::transport::ring::RingShape;
use crate::{Error, Result};

const VERSION: u8 = 6;
const MAX_STRING: usize = 256;

/// One rank's bootstrap record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Identity of the machine (hostname and boot id), or an override.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Name of the rank's shared-memory segment.
    pub shm_name: String,
    /// Ring geometry the rank was configured with.
    pub shape: RingShape,
    /// The shared-memory budget it was configured with
    /// (`STREAMCOMM_SHM_BUDGET`: every rank must agree on it, since the
    /// rings' slots follow from it).
    pub shm_budget: u64,
    /// Where the rank accepts tcp connections, if it may use tcp.
    pub tcp: Option<SocketAddr>,
    /// The rank's verbs stance: `VERBS_NONE`, `VERBS_AVAILABLE` or
    /// `VERBS_FORCED` (this module's constants).
    pub verbs: u8,
    /// Whether the rank's RDMA device executes atomics (the central-counter
    /// barrier over verbs needs every rank's).
    pub verbs_atomics: bool,
    /// Where the rank accepts the survivors' connections when its
    /// communicator shrinks (see `comm::recovery`), if it has peers.
    pub recovery: Option<SocketAddr>,
    /// Where the rank answers its verbs peers' handshakes (a pair's queue
    /// pairs are made at its first use), if it has an RDMA device.
    pub verbs_shake: Option<SocketAddr>,
}

/// No active RDMA device, or verbs not allowed (tcp or shm forced, or a
/// build without the `verbs` feature).
pub(super) const VERBS_NONE: u8 = 0;
/// An active RDMA port, used for peers on other hosts.
pub(super) const VERBS_AVAILABLE: u8 = 1;
/// `STREAMCOMM_TRANSPORT=verbs`: used for every peer.
pub(super) const VERBS_FORCED: u8 = 2;

/// Whether the pair of ranks `a`, `b` talks over verbs: both can, and one
/// forces it or they are on different hosts. Symmetric, so both ends agree.
pub(super) fn pair_uses_verbs(a: &Endpoint, b: &Endpoint) -> bool {
    a.verbs != VERBS_NONE
        && b.verbs != VERBS_NONE
        && (a.verbs == VERBS_FORCED || b.verbs == VERBS_FORCED || a.host != b.host)
}

impl Endpoint {
    /// Serialises the record.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![VERSION];
        put_str(&mut out, &self.host);
        out.extend_from_slice(&self.pid.to_le_bytes());
        put_str(&mut out, &self.shm_name);
        out.extend_from_slice(&(self.shape.nsteps as u64).to_le_bytes());
        out.extend_from_slice(&(self.shape.slot_bytes as u64).to_le_bytes());
        out.extend_from_slice(&self.shm_budget.to_le_bytes());
        put_str(
            &mut out,
            &self.tcp.map(|a| a.to_string()).unwrap_or_default(),
        );
        out.push(self.verbs);
        out.push(u8::from(self.verbs_atomics));
        for addr in [self.recovery, self.verbs_shake] {
            put_str(&mut out, &addr.map(|a| a.to_string()).unwrap_or_default());
        }
        out
    }

    /// Parses a record, rejecting anything malformed.
    ///
    /// # Errors
    /// [`Error::Bootstrap`] naming what was wrong.
    pub fn decode(bytes: &[u8]) -> Result<Endpoint> {
        let mut r = Reader(FrameReader::over(bytes));
        let version = r.u8()?;
        if version != VERSION {
            return Err(Error::Bootstrap(format!(
                "endpoint version {version}, expected {VERSION}"
            )));
        }
        let host = r.string()?;
        let pid = u32::from_le_bytes(r.take(4)?.try_into().unwrap_or_default());
        let shm_name = r.string()?;
        let nsteps = r.u64()? as usize;
        let slot_bytes = r.u64()? as usize;
        let shm_budget = r.u64()?;
        let tcp = r.addr("tcp")?;
        let verbs = r.u8()?;
        if verbs > VERBS_FORCED {
            return Err(Error::Bootstrap(format!("endpoint verbs stance {verbs}")));
        }
        let verbs_atomics = match r.u8()? {
            0 => false,
            1 => true,
            a => return Err(Error::Bootstrap(format!("endpoint verbs atomics {a}"))),
        };
        let recovery = r.addr("recovery")?;
        let verbs_shake = r.addr("verbs handshake")?;
        if r.0.left() > 0 {
            return Err(Error::Bootstrap(format!(
                "endpoint has {} trailing bytes",
                r.0.left()
            )));
        }
        Ok(Endpoint {
            host,
            pid,
            shm_name,
            shape: RingShape { nsteps, slot_bytes },
            shm_budget,
            tcp,
            verbs,
            verbs_atomics,
            recovery,
            verbs_shake,
        })
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Cut at a character boundary, so the bytes stay valid UTF-8.
    let mut end = s.len().min(MAX_STRING);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let b = &s.as_bytes()[..end];
    out.extend_from_slice(&(b.len() as u16).to_le_bytes());
    out.extend_from_slice(b);
}

/// An endpoint's fields, read in order ([`FrameReader`] with this
/// record's errors).
struct Reader<'a>(FrameReader<'a>);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        self.0
            .bytes(n)
            .map_err(|e| Error::Bootstrap(format!("endpoint truncated: {e}")))
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64> {
        self.0
            .u64()
            .map_err(|e| Error::Bootstrap(format!("endpoint truncated: {e}")))
    }

    /// An optional socket address (empty: none); `what` names it in an error.
    fn addr(&mut self, what: &str) -> Result<Option<SocketAddr>> {
        match self.string()? {
            t if t.is_empty() => Ok(None),
            t => t
                .parse()
                .map(Some)
                .map_err(|_| Error::Bootstrap(format!("endpoint {what} address {t:?}"))),
        }
    }

    fn string(&mut self) -> Result<String> {
        let mut b = [0u8; 2];
        b.copy_from_slice(self.take(2)?);
        let n = u16::from_le_bytes(b) as usize;
        if n > MAX_STRING {
            return Err(Error::Bootstrap(format!("endpoint string of {n} bytes")));
        }
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| Error::Bootstrap("endpoint string is not UTF-8".into()))
    }
}

/// This machine's identity: hostname, kernel boot id and network namespace.
///
/// Ranks with equal identities share memory. The network namespace is part
/// of it so that ranks in different namespaces (our multi-host tests, or
/// containers) talk over the network, as ranks on different hosts would.
pub(crate) fn local_host_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_else(|_| "unknown-host".into());
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{}/{}/{}", host.trim(), boot.trim(), netns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects_garbage() {
        let e = Endpoint {
            host: local_host_id(),
            pid: 42,
            shm_name: "/streamcomm-1-abc".into(),
            shape: RingShape {
                nsteps: 8,
                slot_bytes: 4096,
            },
            shm_budget: 64 << 20,
            tcp: Some("10.1.2.3:4567".parse().unwrap()),
            verbs: VERBS_AVAILABLE,
            verbs_atomics: true,
            recovery: Some("10.1.2.3:4568".parse().unwrap()),
            verbs_shake: Some("10.1.2.3:4569".parse().unwrap()),
        };
        let bytes = e.encode();
        assert_eq!(Endpoint::decode(&bytes).unwrap(), e);
        for cut in 0..bytes.len() {
            assert!(Endpoint::decode(&bytes[..cut]).is_err());
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(Endpoint::decode(&long).is_err());
        let mut bad = bytes;
        bad[0] = 9;
        assert!(Endpoint::decode(&bad).is_err());
        let mut bad = e.encode();
        let addrs =
            e.recovery.unwrap().to_string().len() + e.verbs_shake.unwrap().to_string().len();
        let at = bad.len() - addrs - 5;
        bad[at] = 7; // the verbs atomics flag
        assert!(Endpoint::decode(&bad).is_err());
    }

    #[test]
    fn verbs_pairing_is_symmetric() {
        let ep = |host: &str, verbs| Endpoint {
            host: host.into(),
            pid: 1,
            shm_name: String::new(),
            shape: RingShape {
                nsteps: 1,
                slot_bytes: 64,
            },
            shm_budget: 1 << 20,
            tcp: None,
            verbs,
            verbs_atomics: false,
            recovery: None,
            verbs_shake: None,
        };
        for a in 0..=VERBS_FORCED {
            for b in 0..=VERBS_FORCED {
                for (ha, hb) in [("x", "x"), ("x", "y")] {
                    let (ea, eb) = (ep(ha, a), ep(hb, b));
                    let want = a != 0 && b != 0 && (a == 2 || b == 2 || ha != hb);
                    assert_eq!(pair_uses_verbs(&ea, &eb), want);
                    assert_eq!(pair_uses_verbs(&eb, &ea), want);
                }
            }
        }
    }
}
