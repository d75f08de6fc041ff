//! The rules a peer record's addresses must follow (`set_peer_addrs`). Pure: no accounts, no
//! clock. The Python client applies the same rules, in the same order, before it sends
//! (`psyche.backends.solana.peer_record.check_peer_addrs`).
//!
//! The program does not parse multiaddrs: it only bounds what a record may hold (count, length)
//! and keeps out bytes that could confuse a reader (whitespace, control characters, non-ASCII).
//! A reader still parses every address it takes from a record and drops those it cannot use.

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
    Ok(())
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
    fn the_first_bad_address_decides() {
        let long = format!("/{}", "a".repeat(usize::from(MAX_PEER_ADDR_LEN)));
        assert_eq!(check(&["/ok", "x", long.as_str()]), Err(PeerAddrsError::NoLeadingSlash));
        assert_eq!(check(&["/ok", long.as_str(), "x"]), Err(PeerAddrsError::BadLength));
    }
}
