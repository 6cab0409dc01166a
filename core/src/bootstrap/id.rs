//! [`UniqueId`]: the token every rank of a communicator must be given.
//!
//! Like `ncclUniqueId`, it names the bootstrap root (a socket address) and
//! carries a random shared secret, so that only processes that were handed the
//! id can join. It has to travel between processes: as a single text token
//! (`127.0.0.1:41234/<32 hex digits>`, fit for an environment variable such as
//! `STREAMCOMM_UNIQUE_ID`) and as a fixed-size, versioned byte string (for MPI
//! broadcasts and the C ABI). This module is only the value and its encodings;
//! starting the root server is in [`super::root`].

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::str::FromStr;

use crate::{Error, Result};

/// Magic bytes opening [`UniqueId::to_bytes`].
const ID_MAGIC: [u8; 4] = *b"SCID";
/// Version of the byte encoding.
const ID_VERSION: u8 = 1;

/// The address of a bootstrap root and the secret that admits ranks to it.
///
/// Every rank of one communicator must use the same id. Create it on one
/// process with [`UniqueId::new`] (which also starts the root server), then
/// hand it to the others as text (`Display` / `FromStr`) or bytes
/// ([`to_bytes`](UniqueId::to_bytes) / [`from_bytes`](UniqueId::from_bytes)).
///
/// The text and byte forms contain the secret: treat them like a password.
/// `Debug` leaves the secret out, so logging an id with `{:?}` is safe.
///
/// # Examples
///
/// ```
/// use streamcomm::bootstrap::UniqueId;
///
/// let id = UniqueId::from_parts("127.0.0.1:41234".parse().unwrap(), [0xab; 16]);
/// let text = id.to_string();
/// assert_eq!(text, format!("127.0.0.1:41234/{}", "ab".repeat(16)));
/// assert_eq!(text.parse::<UniqueId>().unwrap(), id);
/// assert_eq!(UniqueId::from_bytes(&id.to_bytes()).unwrap(), id);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId {
    addr: SocketAddr,
    secret: [u8; 16],
}

impl UniqueId {
    /// Length of [`to_bytes`](UniqueId::to_bytes): magic, version, address
    /// family, port, 16 address bytes, IPv6 scope id, secret.
    pub const BYTES: usize = 44;

    /// Builds an id from its parts without starting any server (for ranks
    /// that join a root someone else serves).
    ///
    /// # Examples
    /// ```
    /// use streamcomm::bootstrap::UniqueId;
    /// let served = UniqueId::new()?; // this process serves the root
    /// let joined = UniqueId::from_parts(served.addr(), *served.secret()); // another rank's view
    /// assert_eq!(joined, served);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn from_parts(addr: SocketAddr, secret: [u8; 16]) -> UniqueId {
        UniqueId { addr, secret }
    }

    /// The bootstrap root's socket address.
    ///
    /// # Examples
    /// ```
    /// let id = streamcomm::bootstrap::UniqueId::new()?;
    /// assert!(id.addr().ip().is_loopback()); // `new` serves on 127.0.0.1
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The shared secret ranks present to the root.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::bootstrap::UniqueId;
    /// let (a, b) = (UniqueId::new()?, UniqueId::new()?);
    /// assert_ne!(a.secret(), b.secret()); // fresh random secrets
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn secret(&self) -> &[u8; 16] {
        &self.secret
    }

    /// The fixed-size, versioned binary form.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::bootstrap::UniqueId;
    /// let id = UniqueId::new()?;
    /// let bytes = id.to_bytes(); // e.g. broadcast with MPI, then `from_bytes`
    /// assert_eq!(bytes.len(), UniqueId::BYTES);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0..4].copy_from_slice(&ID_MAGIC);
        out[4] = ID_VERSION;
        out[6..8].copy_from_slice(&self.addr.port().to_le_bytes());
        match self.addr {
            SocketAddr::V4(a) => {
                out[5] = 4;
                out[8..12].copy_from_slice(&a.ip().octets());
            }
            SocketAddr::V6(a) => {
                out[5] = 6;
                out[8..24].copy_from_slice(&a.ip().octets());
                out[24..28].copy_from_slice(&a.scope_id().to_le_bytes());
            }
        }
        out[28..44].copy_from_slice(&self.secret);
        out
    }

    /// Decodes the binary form made by [`to_bytes`](UniqueId::to_bytes).
    ///
    /// # Examples
    /// ```
    /// use streamcomm::bootstrap::UniqueId;
    /// let id = UniqueId::new()?;
    /// assert_eq!(UniqueId::from_bytes(&id.to_bytes())?, id);
    /// assert!(UniqueId::from_bytes(&[0u8; 3]).is_err());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if the length, magic, version or address
    /// family is wrong.
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId> {
        if bytes.len() != Self::BYTES {
            return Err(Error::invalid(format!(
                "unique id must be {} bytes, got {}",
                Self::BYTES,
                bytes.len()
            )));
        }
        if bytes[0..4] != ID_MAGIC {
            return Err(Error::invalid("not a streamcomm unique id (bad magic)"));
        }
        if bytes[4] != ID_VERSION {
            return Err(Error::invalid(format!(
                "unique id version {} is not supported (expected {ID_VERSION})",
                bytes[4]
            )));
        }
        let port = u16::from_le_bytes([bytes[6], bytes[7]]);
        let addr = match bytes[5] {
            4 => {
                let ip = Ipv4Addr::new(bytes[8], bytes[9], bytes[10], bytes[11]);
                SocketAddr::V4(SocketAddrV4::new(ip, port))
            }
            6 => {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&bytes[8..24]);
                let scope = u32::from_le_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]);
                SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(octets), port, 0, scope))
            }
            family => {
                return Err(Error::invalid(format!(
                    "unique id has unknown address family {family}"
                )));
            }
        };
        let mut secret = [0u8; 16];
        secret.copy_from_slice(&bytes[28..44]);
        Ok(UniqueId { addr, secret })
    }

    /// Draws a fresh random secret from the operating system.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::bootstrap::UniqueId;
    /// let secret = UniqueId::random_secret()?; // e.g. for STREAMCOMM_SECRET on every host
    /// assert_ne!(secret, UniqueId::random_secret()?);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] if the OS random source fails.
    pub fn random_secret() -> Result<[u8; 16]> {
        use rand::RngCore;
        let mut secret = [0u8; 16];
        rand::rngs::OsRng
            .try_fill_bytes(&mut secret)
            .map_err(|e| Error::Unavailable(format!("OS random source: {e}")))?;
        Ok(secret)
    }

    /// The IP address of the root (shorthand for `addr().ip()`).
    ///
    /// # Examples
    /// ```
    /// let id = streamcomm::bootstrap::UniqueId::new()?;
    /// assert_eq!(id.ip(), id.addr().ip());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn ip(&self) -> IpAddr {
        self.addr.ip()
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UniqueId")
            .field("addr", &self.addr)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// The text token `ADDR/SECRET`: `127.0.0.1:41234/<32 hex digits>`, or
/// `[::1]:41234/...` for IPv6. Contains the secret.
impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.addr)?;
        for b in &self.secret {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Parses the `Display` form. Error messages never repeat the secret part.
impl FromStr for UniqueId {
    type Err = Error;

    fn from_str(s: &str) -> Result<UniqueId> {
        let s = s.trim();
        let (addr, secret) = s.rsplit_once('/').ok_or_else(|| {
            Error::invalid("malformed unique id: expected ADDRESS:PORT/SECRET (no '/')")
        })?;
        let addr: SocketAddr = addr.parse().map_err(|_| {
            Error::invalid(
                "malformed unique id: the part before the last '/' is not an IP address with a port",
            )
        })?;
        let secret = parse_secret(secret)
            .map_err(|what| Error::invalid(format!("malformed unique id: the secret {what}")))?;
        Ok(UniqueId { addr, secret })
    }
}

/// Parses 32 hex digits into a secret; the error says what is wrong without
/// echoing the input.
pub(crate) fn parse_secret(hex: &str) -> std::result::Result<[u8; 16], &'static str> {
    let hex = hex.as_bytes();
    if hex.len() != 32 {
        return Err("has the wrong length");
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks_exact(2).enumerate() {
        let hi = hex_digit(pair[0]).ok_or("contains a character that is not a hex digit")?;
        let lo = hex_digit(pair[1]).ok_or("contains a character that is not a hex digit")?;
        out[i] = (hi << 4) | lo;
    }
    Ok(out)
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_round_trips() {
        let addr: SocketAddr = "[::1]:9000".parse().expect("addr");
        let id = UniqueId::from_parts(addr, [1; 16]);
        let text = id.to_string();
        assert!(text.starts_with("[::1]:9000/"));
        assert_eq!(text.parse::<UniqueId>().expect("parse"), id);
        assert_eq!(UniqueId::from_bytes(&id.to_bytes()).expect("bytes"), id);
        let scoped = UniqueId::from_parts(
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 1, 0, 7)),
            [2; 16],
        );
        assert_eq!(
            UniqueId::from_bytes(&scoped.to_bytes()).expect("bytes"),
            scoped
        );
    }

    #[test]
    fn debug_hides_the_secret() {
        let id = UniqueId::from_parts("127.0.0.1:1".parse().expect("addr"), [0xcd; 16]);
        let dbg = format!("{id:?}");
        assert!(!dbg.contains("cd"), "{dbg}");
        assert!(dbg.contains("127.0.0.1:1"));
    }

    #[test]
    fn parse_errors_do_not_echo_the_secret() {
        let bad = format!("127.0.0.1:1/{}zz", "a".repeat(30));
        let msg = bad.parse::<UniqueId>().expect_err("bad hex").to_string();
        assert!(!msg.contains("aaaa"), "{msg}");
    }

    #[test]
    fn random_secrets_differ() {
        let a = UniqueId::random_secret().expect("rng");
        let b = UniqueId::random_secret().expect("rng");
        assert_ne!(a, b);
    }
}
