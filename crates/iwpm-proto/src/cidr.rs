//! IP networks in CIDR notation (`10.0.0.0/8`, `fd00::/64`, or a bare address for one host),
//! as written in the `peer_allow` key of `iwpmd.conf`.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// One IP network: an address and a prefix length. Host bits are cleared on parse, so
/// `10.1.2.3/8` and `10.0.0.0/8` are the same network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a CIDR string did not parse.
#[derive(Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum CidrError {
    /// The part before `/` is not an IPv4 or IPv6 address.
    #[error("{0:?} is not an IP address")]
    Address(String),
    /// The prefix length is not a number, or exceeds 32 (IPv4) / 128 (IPv6).
    #[error("prefix length {0:?} is not valid for this address family")]
    Prefix(String),
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((bits & m).into())
        }
    }
}

impl Cidr {
    /// The network of `ip` with `prefix` leading bits; `None` if `prefix` is too long.
    pub fn new(ip: IpAddr, prefix: u8) -> Option<Cidr> {
        let max = if ip.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then(|| Cidr {
            network: mask(ip, prefix),
            prefix,
        })
    }

    /// True if `ip` lies in this network (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        ip.is_ipv4() == self.network.is_ipv4() && mask(ip, self.prefix) == self.network
    }

    /// The network address (host bits zero).
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| CidrError::Address(addr.to_string()))?;
        let full = if ip.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => full,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|n| *n <= full)
                .ok_or_else(|| CidrError::Prefix(p.to_string()))?,
        };
        Cidr::new(ip, prefix).ok_or_else(|| CidrError::Prefix(prefix.to_string()))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Parses a list separated by commas and/or whitespace; an empty list is an error.
pub fn parse_cidr_list(s: &str) -> Result<Vec<Cidr>, CidrError> {
    parse_cidr_list_naming(s).map_err(|(_, e)| e)
}

/// [`parse_cidr_list`], but a failure names the entry that did not parse (`""` for an
/// empty list), so an operator can find it on the line.
pub fn parse_cidr_list_naming(s: &str) -> Result<Vec<Cidr>, (String, CidrError)> {
    let items: Vec<&str> = s
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .collect();
    if items.is_empty() {
        return Err((String::new(), CidrError::Address(String::new())));
    }
    items
        .into_iter()
        .map(|t| t.parse().map_err(|e| (t.to_owned(), e)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_networks_and_hosts() {
        let n: Cidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(n.to_string(), "10.0.0.0/8");
        assert!(n.contains("10.200.0.1".parse().unwrap()));
        assert!(!n.contains("11.0.0.1".parse().unwrap()));
        assert!(n.contains("::ffff:10.9.9.9".parse().unwrap()), "v4-mapped");
        let h: Cidr = "192.168.0.7".parse().unwrap();
        assert_eq!(h.prefix(), 32);
        assert!(!h.contains("192.168.0.8".parse().unwrap()));
        let v6: Cidr = "fd00:1:2:3::/64".parse().unwrap();
        assert!(v6.contains("fd00:1:2:3:ffff::1".parse().unwrap()));
        assert!(!v6.contains("fd00:1:2:4::1".parse().unwrap()));
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(
            "10.0.0.0/33".parse::<Cidr>(),
            Err(CidrError::Prefix(_))
        ));
        assert!(matches!(
            "10.0.0/8".parse::<Cidr>(),
            Err(CidrError::Address(_))
        ));
        assert!(matches!(
            "::/129".parse::<Cidr>(),
            Err(CidrError::Prefix(_))
        ));
        assert!(matches!(
            "10.0.0.0/x".parse::<Cidr>(),
            Err(CidrError::Prefix(_))
        ));
        assert!(parse_cidr_list(" , ").is_err());
        assert_eq!(
            parse_cidr_list("10.0.0.0/8, fd00::/8 192.168.1.1")
                .unwrap()
                .len(),
            3
        );
    }
}
