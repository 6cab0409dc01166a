//! Transports by name: the one a connection uses ([`Transport`]) and the one
//! the configuration asks for ([`TransportChoice`], `STREAMCOMM_TRANSPORT`).
//!
//! Both live in the configuration, the bottom layer, so that the choice can
//! name a transport: `TransportChoice::Only(Transport::Tcp)` is
//! `STREAMCOMM_TRANSPORT=tcp`. The transports themselves are in
//! `crate::transport`, above.

use std::fmt;
use std::str::FromStr;

use super::vars;
use crate::{Error, Result};

/// A transport that connects two ranks, as reported by
/// [`Communicator::transport_to`](crate::Communicator::transport_to).
///
/// `Display` and [`Transport::as_str`] give the name `STREAMCOMM_TRANSPORT`
/// takes (`shm`, `tcp`, `verbs`); `FromStr` reads it back (case and
/// surrounding spaces ignored).
///
/// # Examples
/// ```
/// use streamcomm::Transport;
///
/// assert_eq!(Transport::Tcp.to_string(), "tcp");
/// assert_eq!("Shm".parse::<Transport>()?, Transport::Shm);
/// let err = "infiniband".parse::<Transport>().unwrap_err().to_string();
/// assert!(err.contains("expected one of: shm, tcp, verbs"), "{err}");
/// # Ok::<(), streamcomm::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transport {
    /// Shared memory between ranks of one host.
    Shm,
    /// tcp sockets.
    Tcp,
    /// InfiniBand/RoCE verbs (RDMA); needs the `verbs` cargo feature.
    Verbs,
}

impl Transport {
    /// Every transport, in the order error messages list them.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::Transport;
    /// let names: Vec<&str> = Transport::ALL.iter().map(|t| t.as_str()).collect();
    /// assert_eq!(names, ["shm", "tcp", "verbs"]);
    /// ```
    pub const ALL: &'static [Transport] = &[Transport::Shm, Transport::Tcp, Transport::Verbs];

    /// The transport's name: `"shm"`, `"tcp"` or `"verbs"`.
    ///
    /// # Examples
    /// ```
    /// assert_eq!(streamcomm::Transport::Verbs.as_str(), "verbs");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Transport::Shm => "shm",
            Transport::Tcp => "tcp",
            Transport::Verbs => "verbs",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Transport {
    type Err = Error;

    fn from_str(text: &str) -> Result<Transport> {
        let t = text.trim();
        Transport::ALL
            .iter()
            .copied()
            .find(|k| t.eq_ignore_ascii_case(k.as_str()))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{} is not a transport; expected one of: shm, tcp, verbs",
                    vars::shown(text)
                ))
            })
    }
}

/// Which transport connects ranks (`STREAMCOMM_TRANSPORT`): chosen per pair
/// of ranks, or one transport for every pair.
///
/// `Display` writes what `STREAMCOMM_TRANSPORT` takes (`auto`, `shm`, `tcp`,
/// `verbs`) and `FromStr` reads it back (empty is `auto`). A [`Transport`]
/// converts into `Only` of itself.
///
/// # Examples
/// ```
/// use streamcomm::config::TransportChoice;
/// use streamcomm::{Config, Transport};
///
/// let mut config = Config::default();
/// config.transport = Transport::Tcp.into();
/// assert_eq!(config.transport, TransportChoice::Only(Transport::Tcp));
/// assert_eq!(config.transport.to_string(), "tcp");
/// assert_eq!("auto".parse::<TransportChoice>()?, TransportChoice::Auto);
/// assert_eq!(TransportChoice::Auto.only(), None);
/// # Ok::<(), streamcomm::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TransportChoice {
    /// Shared memory between ranks of one host; between hosts verbs where
    /// both have an active RDMA port (and the `verbs` feature), else tcp.
    #[default]
    Auto,
    /// This transport between every pair of ranks, even on one host
    /// (`Only(Transport::Shm)`: ranks on other hosts are an error;
    /// `Only(Transport::Verbs)` needs the `verbs` feature and an active
    /// RDMA port).
    Only(Transport),
}

impl TransportChoice {
    /// The one transport forced, if any.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::{config::TransportChoice, Transport};
    /// assert_eq!(TransportChoice::Only(Transport::Shm).only(), Some(Transport::Shm));
    /// assert_eq!(TransportChoice::Auto.only(), None);
    /// ```
    pub const fn only(self) -> Option<Transport> {
        match self {
            TransportChoice::Auto => None,
            TransportChoice::Only(t) => Some(t),
        }
    }
}

impl From<Transport> for TransportChoice {
    fn from(t: Transport) -> TransportChoice {
        TransportChoice::Only(t)
    }
}

impl fmt::Display for TransportChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportChoice::Auto => f.write_str("auto"),
            TransportChoice::Only(t) => t.fmt(f),
        }
    }
}

impl FromStr for TransportChoice {
    type Err = Error;

    /// `auto` (or empty), or a transport's name.
    fn from_str(text: &str) -> Result<TransportChoice> {
        let t = text.trim();
        if t.is_empty() || t.eq_ignore_ascii_case("auto") {
            return Ok(TransportChoice::Auto);
        }
        t.parse()
            .map(TransportChoice::Only)
            .map_err(|_| vars::invalid(vars::TRANSPORT, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &t in Transport::ALL {
            assert_eq!(t.to_string().parse::<Transport>().unwrap(), t);
            let choice = TransportChoice::from(t);
            assert_eq!(
                choice.to_string().parse::<TransportChoice>().unwrap(),
                choice
            );
            assert_eq!(choice.only(), Some(t));
        }
        assert_eq!(
            " ".parse::<TransportChoice>().unwrap(),
            TransportChoice::Auto
        );
        assert_eq!(
            " TCP ".parse::<TransportChoice>().unwrap(),
            Transport::Tcp.into()
        );
    }

    #[test]
    fn a_bad_choice_lists_the_choices() {
        let e = "ib".parse::<TransportChoice>().unwrap_err().to_string();
        assert!(e.contains("STREAMCOMM_TRANSPORT=ib"), "{e}");
        assert!(e.contains("auto, shm, tcp, verbs"), "{e}");
    }
}
