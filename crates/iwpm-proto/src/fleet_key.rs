//! Fleet keys: the shared secrets our daemons authenticate their peer datagrams with
//! (`docs/protocol.md` §6.14). This module holds the key set as the daemon uses it; the
//! text form of the key file and its parser are in [`crate::keyfile`].
//!
//! A set holds one or more keys, each with an id. The daemon signs with the *signing* key
//! (the highest id not marked accept-only) and accepts a datagram signed with any key of
//! the set, so a fleet rotates without a failing connect: add the new key everywhere as
//! accept-only, then make it the signing key everywhere, then remove the old one.
//!
//! Key bytes are never printed: [`FleetKey`]'s `Debug` shows the id and length only, and
//! the bytes are wiped when the key is dropped.

use std::fmt;

use zeroize::Zeroizing;

/// Fewest bytes a key may have (128 bits).
pub const MIN_KEY_LEN: usize = 16;
/// Most bytes a key may have (one HMAC-SHA256 block).
pub const MAX_KEY_LEN: usize = 64;

/// One key of the fleet.
#[derive(Clone)]
pub struct FleetKey {
    id: u32,
    secret: Zeroizing<Vec<u8>>,
    accept_only: bool,
}

impl FleetKey {
    /// A key; `None` when `id` is 0 (reserved: "no key") or `secret` is shorter than
    /// [`MIN_KEY_LEN`] or longer than [`MAX_KEY_LEN`].
    pub fn new(id: u32, secret: Vec<u8>, accept_only: bool) -> Option<Self> {
        let secret = Zeroizing::new(secret);
        if id == 0 || !(MIN_KEY_LEN..=MAX_KEY_LEN).contains(&secret.len()) {
            return None;
        }
        Some(FleetKey {
            id,
            secret,
            accept_only,
        })
    }

    /// The key's id, as carried in every datagram it signs.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The key's bytes.
    pub fn secret(&self) -> &[u8] {
        &self.secret
    }

    /// True when the key is only accepted, never used to sign (a rotation's first step).
    pub fn accept_only(&self) -> bool {
        self.accept_only
    }
}

impl fmt::Debug for FleetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetKey")
            .field("id", &self.id)
            .field("len", &self.secret.len())
            .field("accept_only", &self.accept_only)
            .finish()
    }
}

/// Why a set of keys cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FleetKeysError {
    /// No key at all.
    #[error("no key")]
    Empty,
    /// Two keys with one id.
    #[error("key id {id} is listed twice")]
    DuplicateId {
        /// The id.
        id: u32,
    },
    /// Every key is accept-only, so none signs.
    #[error("every key is accept-only: one must sign")]
    NoSigningKey,
}

/// The keys a daemon signs and verifies with, sorted by id.
#[derive(Clone, Debug)]
pub struct FleetKeys {
    keys: Vec<FleetKey>,
    /// Index of the signing key in `keys`.
    signing: usize,
}

impl FleetKeys {
    /// The set of `keys`: at least one, ids unique, at least one that signs.
    pub fn new(mut keys: Vec<FleetKey>) -> Result<Self, FleetKeysError> {
        keys.sort_by_key(|k| k.id);
        if let Some(w) = keys.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(FleetKeysError::DuplicateId { id: w[0].id });
        }
        if keys.is_empty() {
            return Err(FleetKeysError::Empty);
        }
        let signing = keys
            .iter()
            .rposition(|k| !k.accept_only)
            .ok_or(FleetKeysError::NoSigningKey)?;
        Ok(FleetKeys { keys, signing })
    }

    /// The key new datagrams are signed with: the highest id not marked accept-only.
    pub fn signing(&self) -> &FleetKey {
        &self.keys[self.signing]
    }

    /// The key with id `id`, if listed.
    pub fn get(&self, id: u32) -> Option<&FleetKey> {
        self.keys
            .binary_search_by_key(&id, |k| k.id)
            .ok()
            .map(|i| &self.keys[i])
    }

    /// Every key, by id.
    pub fn iter(&self) -> impl Iterator<Item = &FleetKey> {
        self.keys.iter()
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Never true (a set has at least one key); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u32, accept_only: bool) -> FleetKey {
        FleetKey::new(id, vec![id as u8; 32], accept_only).unwrap()
    }

    #[test]
    fn signs_with_the_highest_id_that_is_not_accept_only() {
        let set = FleetKeys::new(vec![key(2, true), key(1, false)]).unwrap();
        assert_eq!(set.signing().id(), 1);
        assert_eq!(set.get(2).map(FleetKey::id), Some(2));
        let set = FleetKeys::new(vec![key(2, false), key(1, false)]).unwrap();
        assert_eq!(set.signing().id(), 2);
    }

    #[test]
    fn refuses_bad_sets_and_keys() {
        assert_eq!(FleetKeys::new(vec![]).unwrap_err(), FleetKeysError::Empty);
        assert_eq!(
            FleetKeys::new(vec![key(1, false), key(1, true)]).unwrap_err(),
            FleetKeysError::DuplicateId { id: 1 }
        );
        assert_eq!(
            FleetKeys::new(vec![key(1, true)]).unwrap_err(),
            FleetKeysError::NoSigningKey
        );
        assert!(FleetKey::new(0, vec![0; 32], false).is_none());
        assert!(FleetKey::new(1, vec![0; MIN_KEY_LEN - 1], false).is_none());
        assert!(FleetKey::new(1, vec![0; MAX_KEY_LEN + 1], false).is_none());
    }

    #[test]
    fn debug_never_shows_key_bytes() {
        let k = FleetKey::new(7, b"0123456789abcdef-secret".to_vec(), false).unwrap();
        let shown = format!("{k:?} {:?}", FleetKeys::new(vec![k.clone()]).unwrap());
        assert!(
            !shown.contains("secret") && !shown.contains("48"),
            "{shown}"
        );
    }
}
