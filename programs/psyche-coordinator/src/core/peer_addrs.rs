//! The rules a peer record's addresses must follow (`set_peer_addrs`). Pure: no accounts, no
//! clock. The Python client applies the same rules, in the same order, before it sends
//! (`psyche.backends.solana.peer_record.check_peer_addrs`).
//!
//! The program does not parse whole multiaddrs: it bounds what a record may hold (count,
//! length), keeps out bytes that could confuse a reader (whitespace, control characters,
//! non-ASCII), and refuses IP targets that no peer can be at in any run (`/ip4/…` or `/ip6/…`
//! anywhere in the address, a relay's included: unspecified, link-local such as the cloud
//! metadata address 169.254.169.254, broadcast, multicast, reserved, or not an IP at all).
//! Loopback, private and DNS targets are left to readers, which refuse them unless the run is a
//! local one (docs/solana.md, "Peer records"): the chain cannot tell a LAN or a test machine
//! from the internet. A reader still parses every address it takes from a record and drops
//! those it cannot use.

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
    /// link-local, broadcast, multicast, reserved).
    Unroutable,
}

/// Checks `addrs` in order: the count, then each address (length, bytes, leading `/`). Zero
/// addresses are valid ("no address right now").
pub fn check_peer_addrs<S: AsRef<str>>(addrs: &[S]) -> Result<(), PeerAddrsError> {
    if addrs.len() > usize::from(MAX_PEER_ADDRS) {
        return Err(PeerAddrsError::TooMany);
    }
    for addr in addrs {
        check_peer_addr(addr.as_ref().as_bytes())?;
    }
    Ok(())
}

fn check_peer_addr(addr: &[u8]) -> Result<(), PeerAddrsError> {
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
            "ip4" => parts.next().and_then(|v| v.parse().ok()).is_some_and(ipv4_can_be_a_peer),
            "ip6" => parts.next().and_then(|v| v.parse().ok()).is_some_and(ipv6_can_be_a_peer),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn check(addrs: &[&str]) -> Result<(), PeerAddrsError> {
        check_peer_addrs(addrs)
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
            assert_eq!(check(&[bad]), Err(PeerAddrsError::Unroutable), "{bad:?}");
        }
        // Loopback, private, DNS and public targets are for readers to judge.
        for ok in [
            "/ip4/127.0.0.1/tcp/1",
            "/ip4/10.77.3.11/udp/4001/quic-v1",
            "/ip4/192.168.1.2/tcp/1",
            "/ip4/203.0.113.7/tcp/4001",
            "/ip6/::1/tcp/1",
            "/ip6/2001:db8::1/tcp/1",
            "/dns4/relay.example.com/tcp/4001",
            "/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit",
        ] {
            assert_eq!(check(&[ok]), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn the_first_bad_address_decides() {
        let long = format!("/{}", "a".repeat(usize::from(MAX_PEER_ADDR_LEN)));
        assert_eq!(check(&["/ok", "x", long.as_str()]), Err(PeerAddrsError::NoLeadingSlash));
        assert_eq!(check(&["/ok", long.as_str(), "x"]), Err(PeerAddrsError::BadLength));
    }
}
