//! The rules a peer record's addresses must follow (`set_peer_addrs`). Pure: no accounts, no
//! clock. The Python client applies the same rules, in the same order, before it sends
//! (`psyche.solana.peer_record.check_peer_addrs`).
//!
//! The program does not parse whole multiaddrs: it bounds what a record may hold (count,
//! length), keeps out bytes that could confuse a reader (whitespace, control characters,
//! non-ASCII), and refuses targets every reader would be sent to in vain or to its own harm
//! (`/ip4/…`, `/ip6/…` and `/dns…/…` anywhere in the address, a relay's included):
//! - in every run, an IP no peer can be at: unspecified, link-local such as the cloud metadata
//!   address 169.254.169.254, broadcast, multicast, reserved, or not an IP at all;
//! - unless the run is local (`CoordinatorInstance::local_run`, fixed by its creator), also
//!   loopback, private (RFC 1918, CGNAT 100.64.0.0/10, IPv6 unique-local fc00::/7 and the old
//!   site-local fec0::/10) and DNS names: in a public run they would make every reader dial
//!   its own machine or network. A local run (one machine, a LAN, the testnets) has its peers
//!   exactly there.
//!
//! Readers apply the same rules with the same flag, and still parse every address they take
//! from a record and drop those they cannot use.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::constants::{MAX_PEER_ADDRS, MAX_PEER_ADDR_LEN};

/// The first rule an address list breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerAddrsError {
    /// More than `MAX_PEER_ADDRS` addresses.
    TooMany,
    /// An address is empty or longer than `MAX_PEER_ADDR_LEN` bytes.
    BadLength,
    /// An address holds a byte outside printable ASCII without the space (`0x21..=0x7e`).
    NotPrintable,
    /// An address does not start with `/` (a multiaddr's first protocol).
    NoLeadingSlash,
    /// An `/ip4/` or `/ip6/` value is not an IP, or one no peer can be at (unspecified,
    /// link-local, broadcast, multicast, reserved), or the run is not local and the address
    /// names a loopback, private or DNS target.
    Unroutable,
}

/// Checks `addrs` in order: the count, then each address (length, bytes, leading `/`,
/// targets). Zero addresses are valid ("no address right now"). `local_run`: the run's
/// `CoordinatorInstance::local_run`.
pub fn check_peer_addrs<S: AsRef<str>>(addrs: &[S], local_run: bool) -> Result<(), PeerAddrsError> {
    if addrs.len() > usize::from(MAX_PEER_ADDRS) {
        return Err(PeerAddrsError::TooMany);
    }
    for addr in addrs {
        check_peer_addr(addr.as_ref().as_bytes(), local_run)?;
    }
    Ok(())
}

fn check_peer_addr(addr: &[u8], local_run: bool) -> Result<(), PeerAddrsError> {
    if addr.is_empty() || addr.len() > usize::from(MAX_PEER_ADDR_LEN) {
        return Err(PeerAddrsError::BadLength);
    }
    if !addr.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err(PeerAddrsError::NotPrintable);
    }
    if addr[0] != b'/' {
        return Err(PeerAddrsError::NoLeadingSlash);
    }
    // Printable ASCII, so valid UTF-8.
    let text = core::str::from_utf8(addr).map_err(|_| PeerAddrsError::NotPrintable)?;
    let mut parts = text.split('/');
    while let Some(protocol) = parts.next() {
        let ok = match protocol {
            "ip4" => parts
                .next()
                .and_then(|v| v.parse().ok())
                .is_some_and(|ip| ipv4_can_be_a_peer(ip) && (local_run || !ipv4_is_local(ip))),
            "ip6" => parts
                .next()
                .and_then(|v| v.parse().ok())
                .is_some_and(|ip| ipv6_can_be_a_peer(ip) && (local_run || !ipv6_is_local(ip))),
            "dns" | "dns4" | "dns6" | "dnsaddr" => local_run,
            _ => true,
        };
        if !ok {
            return Err(PeerAddrsError::Unroutable);
        }
    }
    Ok(())
}

/// Whether a peer could listen at `ip` in some run: not unspecified ("this network",
/// 0.0.0.0/8), link-local (169.254.0.0/16), broadcast, multicast (224.0.0.0/4) or reserved
/// (240.0.0.0/4).
fn ipv4_can_be_a_peer(ip: Ipv4Addr) -> bool {
    let first = ip.octets()[0];
    !(first == 0 || ip.is_link_local() || ip.is_broadcast() || ip.is_multicast() || first >= 240)
}

/// As `ipv4_can_be_a_peer` for IPv6: not unspecified, link-local (fe80::/10) or multicast;
/// an IPv4-mapped address (`::ffff:a.b.c.d`) by the IPv4 rules.
fn ipv6_can_be_a_peer(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return ipv4_can_be_a_peer(v4);
    }
    let link_local = (ip.segments()[0] & 0xffc0) == 0xfe80;
    !(ip.is_unspecified() || link_local || ip.is_multicast())
}

/// Loopback (127.0.0.0/8), private (10/8, 172.16/12, 192.168/16) or CGNAT (100.64.0.0/10):
/// a target on the reader's own machine or network.
fn ipv4_is_local(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback() || ip.is_private() || (a == 100 && (b & 0xc0) == 64)
}

/// As `ipv4_is_local` for IPv6: loopback (::1), unique-local (fc00::/7), site-local
/// (fec0::/10); an IPv4-mapped address by the IPv4 rules.
fn ipv6_is_local(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return ipv4_is_local(v4);
    }
    let first = ip.segments()[0];
    ip.is_loopback() || (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfec0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules in a public run (the default).
    fn check(addrs: &[&str]) -> Result<(), PeerAddrsError> {
        check_peer_addrs(addrs, false)
    }

    fn check_local(addrs: &[&str]) -> Result<(), PeerAddrsError> {
        check_peer_addrs(addrs, true)
    }

    #[test]
    fn accepts_zero_to_max_addresses() {
        assert_eq!(check(&[]), Ok(()));
        let addr =
            "/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN";
        for n in 1..=usize::from(MAX_PEER_ADDRS) {
            assert_eq!(check(&vec![addr; n]), Ok(()), "{n} addresses");
        }
        assert_eq!(check(&["/"]), Ok(()));
        assert_eq!(check_local(&["/"]), Ok(()));
    }

    #[test]
    fn too_many_addresses() {
        let n = usize::from(MAX_PEER_ADDRS) + 1;
        assert_eq!(check(&vec!["/ip4/1.2.3.4/tcp/1"; n]), Err(PeerAddrsError::TooMany));
        // The count is checked before any address.
        assert_eq!(check(&vec![""; n]), Err(PeerAddrsError::TooMany));
    }

    #[test]
    fn length_bounds() {
        let max = usize::from(MAX_PEER_ADDR_LEN);
        let longest = format!("/{}", "a".repeat(max - 1));
        assert_eq!(check(&[longest.as_str()]), Ok(()));
        let over = format!("/{}", "a".repeat(max));
        assert_eq!(check(&[over.as_str()]), Err(PeerAddrsError::BadLength));
        assert_eq!(check(&[""]), Err(PeerAddrsError::BadLength));
        // Bytes, not characters: 64 two-byte characters are 128 bytes, one more is too long.
        let wide = format!("/{}", "é".repeat(64));
        assert_eq!(check(&[wide.as_str()]), Err(PeerAddrsError::BadLength));
    }

    #[test]
    fn printable_ascii_only() {
        for bad in ["/ip4/1.2.3.4 /tcp/1", "/a\tb", "/a\nb", "/a\0b", "/a\x7fb", "/é"] {
            assert_eq!(check(&[bad]), Err(PeerAddrsError::NotPrintable), "{bad:?}");
        }
        assert_eq!(check(&["/!~"]), Ok(()));
    }

    #[test]
    fn leading_slash() {
        for bad in ["ip4/1.2.3.4/tcp/1", "a", "~/x"] {
            assert_eq!(check(&[bad]), Err(PeerAddrsError::NoLeadingSlash), "{bad:?}");
        }
        // A byte error comes before the slash rule.
        assert_eq!(check(&["a b"]), Err(PeerAddrsError::NotPrintable));
    }

    #[test]
    fn targets_no_peer_can_be_at() {
        for bad in [
            "/ip4/169.254.169.254/tcp/80",
            "/ip4/255.255.255.255/udp/9",
            "/ip4/0.0.0.0/tcp/1",
            "/ip4/0.1.2.3/tcp/1",
            "/ip4/224.0.0.1/udp/1",
            "/ip4/240.0.0.1/tcp/1",
            "/ip4/localhost/tcp/1",
            "/ip4/1.2.3/tcp/1",
            "/ip4",
            "/ip6/::/tcp/1",
            "/ip6/fe80::1/tcp/1",
            "/ip6/ff02::1/udp/1",
            "/ip6/::ffff:169.254.169.254/tcp/1",
            "/ip6/nope/tcp/1",
            // A circuit through such a relay.
            "/ip4/169.254.169.254/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit",
        ] {
            // Refused in every run, local ones included.
            assert_eq!(check(&[bad]), Err(PeerAddrsError::Unroutable), "{bad:?}");
            assert_eq!(check_local(&[bad]), Err(PeerAddrsError::Unroutable), "{bad:?}");
        }
    }

    /// Loopback, private, CGNAT, unique-local and DNS targets, directly or as a relay: refused
    /// in a public run, accepted in a local one (issue 26, finding 5).
    #[test]
    fn local_targets_only_in_a_local_run() {
        for local in [
            "/ip4/127.0.0.1/tcp/1",
            "/ip4/127.8.9.10/tcp/1",
            "/ip4/10.77.3.11/udp/4001/quic-v1",
            "/ip4/172.16.0.1/tcp/1",
            "/ip4/172.31.255.254/tcp/1",
            "/ip4/192.168.1.2/tcp/1",
            "/ip4/100.64.0.1/tcp/1",
            "/ip4/100.127.255.254/tcp/1",
            "/ip6/::1/tcp/1",
            "/ip6/fc00::1/tcp/1",
            "/ip6/fd12:3456::1/tcp/1",
            "/ip6/fec0::1/tcp/1",
            "/ip6/::ffff:10.0.0.1/tcp/1",
            "/ip6/::ffff:127.0.0.1/tcp/1",
            "/dns/relay.example.com/tcp/4001",
            "/dns4/relay.example.com/tcp/4001",
            "/dns6/relay.example.com/tcp/4001",
            "/dnsaddr/bootstrap.example.com",
            "/ip4/10.0.0.1/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit",
            "/dns4/relay.example.com/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit",
        ] {
            assert_eq!(check(&[local]), Err(PeerAddrsError::Unroutable), "{local:?}");
            assert_eq!(check_local(&[local]), Ok(()), "{local:?}");
        }
        // Public targets, just outside each local range, are fine in both.
        for public in [
            "/ip4/203.0.113.7/tcp/4001",
            "/ip4/11.0.0.1/tcp/1",
            "/ip4/172.32.0.1/tcp/1",
            "/ip4/172.15.255.255/tcp/1",
            "/ip4/192.169.0.1/tcp/1",
            "/ip4/100.63.255.255/tcp/1",
            "/ip4/100.128.0.1/tcp/1",
            "/ip4/126.255.255.255/tcp/1",
            "/ip4/128.0.0.1/tcp/1",
            "/ip6/2001:db8::1/tcp/1",
            "/ip6/fe00::1/tcp/1",
            "/ip6/::ffff:203.0.113.7/tcp/1",
            "/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit",
        ] {
            assert_eq!(check(&[public]), Ok(()), "{public:?}");
            assert_eq!(check_local(&[public]), Ok(()), "{public:?}");
        }
        // One local address among public ones refuses the whole list in a public run.
        assert_eq!(
            check(&["/ip4/203.0.113.7/tcp/1", "/ip4/192.168.0.1/tcp/1"]),
            Err(PeerAddrsError::Unroutable)
        );
    }

    #[test]
    fn the_first_bad_address_decides() {
        let long = format!("/{}", "a".repeat(usize::from(MAX_PEER_ADDR_LEN)));
        assert_eq!(check(&["/ok", "x", long.as_str()]), Err(PeerAddrsError::NoLeadingSlash));
        assert_eq!(check(&["/ok", long.as_str(), "x"]), Err(PeerAddrsError::BadLength));
    }
}
