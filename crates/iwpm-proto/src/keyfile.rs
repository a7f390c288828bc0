//! The fleet key file (`peer_key_file` in `iwpmd.conf`, or the systemd credential
//! `iwpmd-peer-keys`): its text form and its parser. The key set it yields is
//! [`crate::fleet_key::FleetKeys`]; reading the file (owner and mode checks, the credential)
//! is the daemon's business.
//!
//! # Format
//!
//! The file is UTF-8 text, one key per line:
//!
//! ```text
//! <id> <hex key> [accept-only]
//! ```
//!
//! * Words are separated by spaces or tabs; leading and trailing blanks are ignored, and
//!   so is a carriage return before the newline.
//! * A blank line is ignored. A word starting with `#` starts a comment that runs to the
//!   end of the line, so `# text` is a comment line and `1 <key> # since May` a key line
//!   with a comment.
//! * `id` is a decimal number from 1 to 4294967295 (digits only, no sign). It is carried in
//!   every datagram the key signs, so every host of the fleet must give a key the same id.
//!   Each id appears once.
//! * `hex key` is the key's bytes in hexadecimal, two digits a byte, upper or lower case:
//!   32 to 128 digits ([`MIN_KEY_LEN`] to [`MAX_KEY_LEN`] bytes). Make one with
//!   `openssl rand -hex 32` or `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'`.
//! * The optional third word `accept-only` marks a key that is accepted from peers but never
//!   used to sign. No other word may follow the key.
//! * The file holds at least one key, and at least one key is not `accept-only`. The
//!   *signing key* is the one with the highest id among those not marked `accept-only`;
//!   datagrams signed with any key of the file are accepted.
//! * The file is at most [`MAX_KEY_FILE_LEN`] bytes.
//!
//! # Rotation
//!
//! Every step leaves each host able to verify what every other host signs, whichever step
//! it is at, so no exchange fails during a rotation from key 1 to key 2:
//!
//! 1. add `2 <new key> accept-only` on every host (each still signs with 1, accepts 2);
//! 2. once all hosts have it, remove the word `accept-only` on every host (each signs with
//!    2, the highest id, and still accepts 1);
//! 3. once all hosts sign with 2, remove the line of key 1.
//!
//! # Errors
//!
//! [`KeyFileError`] names the line and what is wrong with it. No message ever contains key
//! material: a word of the file is quoted only when it is short and holds no run of 8 hex
//! digits (a mistyped `accept-only`, `-1`), never when it could be part of a key.
//!
//! ```
//! use iwpm_proto::keyfile::{parse_key_file, KeyFileError};
//!
//! let keys = parse_key_file(
//!     "# fleet keys\n\
//!      1 000102030405060708090a0b0c0d0e0f\n\
//!      2 101112131415161718191a1b1c1d1e1f accept-only\n",
//! )
//! .unwrap();
//! assert_eq!(keys.signing().id(), 1);
//! assert!(keys.get(2).is_some_and(|k| k.accept_only()));
//!
//! let e = parse_key_file("1 0001020304\n").unwrap_err();
//! assert!(matches!(e, KeyFileError::TooShort { line: 1, id: 1, bytes: 5 }));
//! assert_eq!(
//!     e.to_string(),
//!     "line 1: key 1 is 5 bytes (10 hex digits); a key has 16 to 64 bytes (32 to 128 hex digits)"
//! );
//! ```

use std::fmt;

use crate::fleet_key::{FleetKey, FleetKeys, FleetKeysError, MAX_KEY_LEN, MIN_KEY_LEN};

/// Largest key file read, in bytes: far more than any real fleet needs (a key line is at
/// most about 150 bytes), small enough that a wrong path (a log, a device) is refused
/// rather than read whole.
pub const MAX_KEY_FILE_LEN: usize = 64 * 1024;

/// The word that marks a key as accepted but never used to sign.
pub const ACCEPT_ONLY: &str = "accept-only";

/// Longest word of the file an error message may quote: long enough for a mistyped
/// `accept-only`, too short for a key.
const QUOTABLE_LEN: usize = 24;
/// A quoted word holds no run of this many hex digits.
const QUOTABLE_HEX_RUN: usize = 8;

/// Why a key file cannot be used. Line numbers count from 1. No variant holds key bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyFileError {
    /// No key line at all (an empty file, or only comments and blank lines).
    #[error(
        "no key in the file (one line per key: `<id> <hex key> [accept-only]`; \
         `openssl rand -hex 32` makes a key)"
    )]
    Empty,
    /// Longer than [`MAX_KEY_FILE_LEN`].
    #[error("{len} bytes long; a key file has at most {MAX_KEY_FILE_LEN} bytes")]
    TooLarge {
        /// The file's length.
        len: usize,
    },
    /// A line is not UTF-8 text.
    #[error("line {line}: not UTF-8 text")]
    NotText {
        /// Line number.
        line: usize,
    },
    /// The first word of a key line is not an id from 1 to 4294967295.
    #[error(
        "line {line}: the key id {} is not a whole number from 1 to 4294967295 \
         (a line reads `<id> <hex key> [accept-only]`)",
        quoted(.word)
    )]
    BadId {
        /// Line number.
        line: usize,
        /// The word, when it is safe to show (module docs, "Errors").
        word: Option<String>,
    },
    /// An id with no key after it.
    #[error("line {line}: key {id} has no key after its id")]
    MissingKey {
        /// Line number.
        line: usize,
        /// The key's id.
        id: u32,
    },
    /// The key holds a character that is not a hex digit.
    #[error(
        "line {line}: key {id}: character {position} of the key is not a hex digit (0-9, a-f)"
    )]
    BadHex {
        /// Line number.
        line: usize,
        /// The key's id.
        id: u32,
        /// 1-based position of the first bad character within the key.
        position: usize,
    },
    /// An odd number of hex digits (two make a byte).
    #[error("line {line}: key {id} has an odd number of hex digits ({digits}); two make a byte")]
    OddHex {
        /// Line number.
        line: usize,
        /// The key's id.
        id: u32,
        /// How many.
        digits: usize,
    },
    /// Fewer than [`MIN_KEY_LEN`] bytes.
    #[error(
        "line {line}: key {id} is {bytes} bytes ({} hex digits); a key has {MIN_KEY_LEN} to \
         {MAX_KEY_LEN} bytes ({} to {} hex digits)",
        2 * .bytes, 2 * MIN_KEY_LEN, 2 * MAX_KEY_LEN
    )]
    TooShort {
        /// Line number.
        line: usize,
        /// The key's id.
        id: u32,
        /// The key's length.
        bytes: usize,
    },
    /// More than [`MAX_KEY_LEN`] bytes.
    #[error(
        "line {line}: key {id} is {bytes} bytes ({} hex digits); a key has {MIN_KEY_LEN} to \
         {MAX_KEY_LEN} bytes ({} to {} hex digits)",
        2 * .bytes, 2 * MIN_KEY_LEN, 2 * MAX_KEY_LEN
    )]
    TooLong {
        /// Line number.
        line: usize,
        /// The key's id.
        id: u32,
        /// The key's length.
        bytes: usize,
    },
    /// A word after the key other than one `accept-only`.
    #[error(
        "line {line}: key {id}: unknown word {} after the key (only `{ACCEPT_ONLY}` may \
         follow it; a key has no spaces)",
        quoted(.word)
    )]
    UnknownWord {
        /// Line number.
        line: usize,
        /// The key's id.
        id: u32,
        /// The word, when it is safe to show (module docs, "Errors").
        word: Option<String>,
    },
    /// Two lines give the same id.
    #[error("line {line}: key id {id} is already given on line {first_line}")]
    DuplicateId {
        /// Line number of the second.
        line: usize,
        /// The id.
        id: u32,
        /// Line number of the first.
        first_line: usize,
    },
    /// Every key is `accept-only`, so none would sign.
    #[error(
        "every key is marked `{ACCEPT_ONLY}`: one must sign (the highest id not marked \
         `{ACCEPT_ONLY}` does)"
    )]
    NoSigningKey,
}

impl KeyFileError {
    /// The line the error is about, when it is about one.
    pub fn line(&self) -> Option<usize> {
        match self {
            KeyFileError::Empty | KeyFileError::TooLarge { .. } | KeyFileError::NoSigningKey => {
                None
            }
            KeyFileError::NotText { line }
            | KeyFileError::BadId { line, .. }
            | KeyFileError::MissingKey { line, .. }
            | KeyFileError::BadHex { line, .. }
            | KeyFileError::OddHex { line, .. }
            | KeyFileError::TooShort { line, .. }
            | KeyFileError::TooLong { line, .. }
            | KeyFileError::UnknownWord { line, .. }
            | KeyFileError::DuplicateId { line, .. } => Some(*line),
        }
    }
}

/// `"word"`, or a description of a word that is not shown.
fn quoted(word: &Option<String>) -> Quoted<'_> {
    Quoted(word.as_deref())
}

struct Quoted<'a>(Option<&'a str>);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(w) => write!(f, "{w:?}"),
            None => f.write_str("(not shown: it could be key material)"),
        }
    }
}

/// The word, if an error message may show it: short, and without a run of hex digits long
/// enough to be a useful piece of a key.
fn quotable(word: &str) -> Option<String> {
    let longest_hex_run = word
        .split(|c: char| !c.is_ascii_hexdigit())
        .map(str::len)
        .max()
        .unwrap_or(0);
    (word.chars().count() <= QUOTABLE_LEN && longest_hex_run < QUOTABLE_HEX_RUN)
        .then(|| word.to_owned())
}

/// Parses the key file's text into the key set (see the module docs for the format).
pub fn parse_key_file(text: &str) -> Result<FleetKeys, KeyFileError> {
    parse_key_file_bytes(text.as_bytes())
}

/// [`parse_key_file`] on the file's bytes: a line that is not UTF-8 is
/// [`KeyFileError::NotText`].
pub fn parse_key_file_bytes(bytes: &[u8]) -> Result<FleetKeys, KeyFileError> {
    if bytes.len() > MAX_KEY_FILE_LEN {
        return Err(KeyFileError::TooLarge { len: bytes.len() });
    }
    let mut keys: Vec<FleetKey> = Vec::new();
    // (id, line) of each key so far, for DuplicateId.
    let mut seen: Vec<(u32, usize)> = Vec::new();
    for (idx, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = idx + 1;
        let text = std::str::from_utf8(raw).map_err(|_| KeyFileError::NotText { line })?;
        let mut words = text
            .split([' ', '\t', '\r'])
            .filter(|w| !w.is_empty())
            .take_while(|w| !w.starts_with('#'));
        let Some(id_word) = words.next() else {
            continue;
        };
        let id = parse_id(id_word).ok_or_else(|| KeyFileError::BadId {
            line,
            word: quotable(id_word),
        })?;
        let hex = words.next().ok_or(KeyFileError::MissingKey { line, id })?;
        let secret = decode_hex(line, id, hex)?;
        let accept_only = match words.next() {
            None => false,
            Some(ACCEPT_ONLY) => true,
            Some(other) => {
                return Err(KeyFileError::UnknownWord {
                    line,
                    id,
                    word: quotable(other),
                })
            }
        };
        if let Some(extra) = words.next() {
            return Err(KeyFileError::UnknownWord {
                line,
                id,
                word: quotable(extra),
            });
        }
        if let Some(&(_, first_line)) = seen.iter().find(|(seen_id, _)| *seen_id == id) {
            return Err(KeyFileError::DuplicateId {
                line,
                id,
                first_line,
            });
        }
        let bytes = secret.len();
        let key = FleetKey::new(id, secret, accept_only).ok_or(if bytes < MIN_KEY_LEN {
            KeyFileError::TooShort { line, id, bytes }
        } else {
            KeyFileError::TooLong { line, id, bytes }
        })?;
        seen.push((id, line));
        keys.push(key);
    }
    FleetKeys::new(keys).map_err(|e| match e {
        FleetKeysError::Empty => KeyFileError::Empty,
        FleetKeysError::NoSigningKey => KeyFileError::NoSigningKey,
        // Found above with its lines; kept for completeness.
        FleetKeysError::DuplicateId { id } => {
            let first_line = seen.iter().find(|(i, _)| *i == id).map_or(0, |(_, l)| *l);
            KeyFileError::DuplicateId {
                line: first_line,
                id,
                first_line,
            }
        }
    })
}

/// An id: decimal digits only, 1..=u32::MAX.
fn parse_id(word: &str) -> Option<u32> {
    if !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse::<u32>().ok().filter(|id| *id != 0)
}

/// The key's bytes from its hex digits, checked for characters, parity and length (the
/// length before decoding, so an over-long line is refused without decoding it).
fn decode_hex(line: usize, id: u32, hex: &str) -> Result<Vec<u8>, KeyFileError> {
    if let Some(pos) = hex.chars().position(|c| !c.is_ascii_hexdigit()) {
        return Err(KeyFileError::BadHex {
            line,
            id,
            position: pos + 1,
        });
    }
    let digits = hex.len();
    if digits % 2 != 0 {
        return Err(KeyFileError::OddHex { line, id, digits });
    }
    let bytes = digits / 2;
    if bytes < MIN_KEY_LEN {
        return Err(KeyFileError::TooShort { line, id, bytes });
    }
    if bytes > MAX_KEY_LEN {
        return Err(KeyFileError::TooLong { line, id, bytes });
    }
    let nibble = |b: u8| match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    };
    Ok(hex
        .as_bytes()
        .chunks_exact(2)
        .map(|pair| (nibble(pair[0]) << 4) | nibble(pair[1]))
        .collect())
}

/// One line about a key set for logs and messages, without key bytes:
/// `3 keys (1, 2, 3 accept-only), signing with key 2`.
pub fn summary(keys: &FleetKeys) -> String {
    let ids: Vec<String> = keys
        .iter()
        .map(|k| {
            if k.accept_only() {
                format!("{} {ACCEPT_ONLY}", k.id())
            } else {
                k.id().to_string()
            }
        })
        .collect();
    let n = keys.len();
    format!(
        "{n} key{} ({}), signing with key {}",
        if n == 1 { "" } else { "s" },
        ids.join(", "),
        keys.signing().id()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key of `bytes` bytes whose hex form is recognisable: every byte is `fill`.
    fn hex(fill: u8, bytes: usize) -> String {
        format!("{fill:02x}").repeat(bytes)
    }

    fn err(text: &str) -> KeyFileError {
        parse_key_file(text).unwrap_err()
    }

    #[test]
    fn accepts_comments_blank_lines_case_tabs_and_crlf() {
        let text = format!(
            "# fleet keys of cluster A\n\n   \n1 {}\r\n\t7\t{} {ACCEPT_ONLY}  # new, step 1\n3 {} # the current one\n",
            hex(0xab, 16).to_uppercase(),
            hex(0x07, 64),
            hex(0x03, 32)
        );
        let keys = parse_key_file(&text).unwrap();
        let ids: Vec<(u32, bool, usize)> = keys
            .iter()
            .map(|k| (k.id(), k.accept_only(), k.secret().len()))
            .collect();
        assert_eq!(ids, [(1, false, 16), (3, false, 32), (7, true, 64)]);
        assert_eq!(keys.signing().id(), 3, "highest id not accept-only");
        assert_eq!(keys.get(1).unwrap().secret(), &[0xab; 16][..]);
        assert_eq!(
            summary(&keys),
            "3 keys (1, 3, 7 accept-only), signing with key 3"
        );
        let one = parse_key_file(&format!("4294967295 {}", hex(1, 16))).unwrap();
        assert_eq!(
            one.signing().id(),
            u32::MAX,
            "no newline at the end is fine"
        );
        assert_eq!(
            summary(&one),
            "1 key (4294967295), signing with key 4294967295"
        );
    }

    #[test]
    fn an_empty_file_or_one_without_keys_is_refused() {
        for text in ["", "\n", "# only a comment\n\n  \t\n", "#1 0011\n"] {
            assert_eq!(err(text), KeyFileError::Empty, "{text:?}");
        }
        assert_eq!(KeyFileError::Empty.line(), None);
    }

    #[test]
    fn bad_ids_are_refused() {
        let key = hex(1, 16);
        for (id, shown) in [
            ("0", Some("0")),
            ("4294967296", None),
            ("99999999999999999999x", None),
            ("-1", Some("-1")),
            ("+1", Some("+1")),
            ("0x10", Some("0x10")),
            ("key1", Some("key1")),
        ] {
            let e = err(&format!("# c\n{id} {key}\n"));
            assert_eq!(
                e,
                KeyFileError::BadId {
                    line: 2,
                    word: shown.map(str::to_owned)
                },
                "{id}"
            );
            assert_eq!(e.line(), Some(2));
        }
        // A key with its id forgotten: the key is the first word and is never shown.
        let e = err(&format!("{key}\n"));
        assert_eq!(
            e,
            KeyFileError::BadId {
                line: 1,
                word: None
            }
        );
        assert!(!e.to_string().contains("0101"), "{e}");
    }

    #[test]
    fn bad_hex_is_refused_without_showing_the_key() {
        let mut key = hex(0x5a, 16);
        key.replace_range(9..10, "g");
        let e = err(&format!("2 {key}\n"));
        assert_eq!(
            e,
            KeyFileError::BadHex {
                line: 1,
                id: 2,
                position: 10
            }
        );
        assert_eq!(
            e.to_string(),
            "line 1: key 2: character 10 of the key is not a hex digit (0-9, a-f)"
        );
        assert_eq!(
            err(&format!("2 {}f\n", hex(0x5a, 16))),
            KeyFileError::OddHex {
                line: 1,
                id: 2,
                digits: 33
            }
        );
        assert_eq!(err("5\n"), KeyFileError::MissingKey { line: 1, id: 5 });
        assert_eq!(
            err("5 # the key is missing\n"),
            KeyFileError::MissingKey { line: 1, id: 5 }
        );
    }

    #[test]
    fn keys_too_short_or_too_long_are_refused() {
        assert_eq!(
            err(&format!("1 {}\n", hex(1, MIN_KEY_LEN - 1))),
            KeyFileError::TooShort {
                line: 1,
                id: 1,
                bytes: 15
            }
        );
        let e = err(&format!("\n9 {}\n", hex(1, MAX_KEY_LEN + 1)));
        assert_eq!(
            e,
            KeyFileError::TooLong {
                line: 2,
                id: 9,
                bytes: 65
            }
        );
        assert_eq!(
            e.to_string(),
            "line 2: key 9 is 65 bytes (130 hex digits); a key has 16 to 64 bytes (32 to 128 hex digits)"
        );
        // The bounds themselves are fine.
        parse_key_file(&format!("1 {}\n2 {}\n", hex(1, 16), hex(2, 64))).unwrap();
    }

    #[test]
    fn unknown_words_are_refused_and_only_safe_ones_are_shown() {
        let key = hex(3, 16);
        let e = err(&format!("1 {key} accept_only\n"));
        assert_eq!(
            e,
            KeyFileError::UnknownWord {
                line: 1,
                id: 1,
                word: Some("accept_only".into())
            }
        );
        assert!(e.to_string().contains("\"accept_only\""), "{e}");
        // A key split by a space: the second half is never shown.
        let e = err(&format!("1 {} {}\n", &key[..16], &key[16..]));
        assert!(
            matches!(e, KeyFileError::TooShort { .. }),
            "the first half is too short: {e}"
        );
        let e = err(&format!("1 {key} {key}\n"));
        assert_eq!(
            e,
            KeyFileError::UnknownWord {
                line: 1,
                id: 1,
                word: None
            }
        );
        assert!(!e.to_string().contains("0303"), "{e}");
        assert!(matches!(
            err(&format!("1 {key} {ACCEPT_ONLY} {ACCEPT_ONLY}\n")),
            KeyFileError::UnknownWord { line: 1, .. }
        ));
    }

    #[test]
    fn duplicate_ids_and_sets_without_a_signing_key_are_refused() {
        let e = err(&format!(
            "1 {}\n\n1 {} {ACCEPT_ONLY}\n",
            hex(1, 16),
            hex(2, 16)
        ));
        assert_eq!(
            e,
            KeyFileError::DuplicateId {
                line: 3,
                id: 1,
                first_line: 1
            }
        );
        assert_eq!(e.to_string(), "line 3: key id 1 is already given on line 1");
        let e = err(&format!(
            "1 {} {ACCEPT_ONLY}\n2 {} {ACCEPT_ONLY}\n",
            hex(1, 16),
            hex(2, 16)
        ));
        assert_eq!(e, KeyFileError::NoSigningKey);
        assert_eq!(e.line(), None);
    }

    #[test]
    fn non_text_and_oversized_files_are_refused() {
        let mut bytes = format!("1 {}\n", hex(1, 16)).into_bytes();
        bytes.extend_from_slice(b"# \xff\n");
        assert_eq!(
            parse_key_file_bytes(&bytes).unwrap_err(),
            KeyFileError::NotText { line: 2 }
        );
        let big = vec![b'#'; MAX_KEY_FILE_LEN + 1];
        assert_eq!(
            parse_key_file_bytes(&big).unwrap_err(),
            KeyFileError::TooLarge {
                len: MAX_KEY_FILE_LEN + 1
            }
        );
    }

    /// No message shows key material, whatever the mistake next to it.
    #[test]
    fn no_message_contains_key_hex() {
        let key = "c0ffee".repeat(6);
        let cases = [
            format!("{key}\n"),
            format!("1 {key}g\n"),
            format!("1 {key}0\n"),
            format!("1 {}\n", &key[..20]),
            format!("1 {key}{key}{key}{key}\n"),
            format!("1 {key} {key}\n"),
            format!("1 {key} {}\n", &key[..8]),
            format!("1 {key}\n1 {key}\n"),
            format!("1 {key} {ACCEPT_ONLY}\n"),
        ];
        for text in &cases {
            let e = err(text);
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains("c0ff"), "{text:?}: {shown}");
        }
    }

    /// The documented rotation from key 1 to key 2: at every step the signing key moves as
    /// described, and hosts one step apart verify each other's datagrams.
    #[test]
    fn rotation_sequence() {
        let (k1, k2) = (hex(0x11, 32), hex(0x22, 32));
        let steps = [
            format!("1 {k1}\n"),
            format!("1 {k1}\n2 {k2} {ACCEPT_ONLY}\n"),
            format!("1 {k1}\n2 {k2}\n"),
            format!("2 {k2}\n"),
        ];
        let sets: Vec<FleetKeys> = steps.iter().map(|t| parse_key_file(t).unwrap()).collect();
        let signing: Vec<u32> = sets.iter().map(|s| s.signing().id()).collect();
        assert_eq!(signing, [1, 1, 2, 2]);
        for pair in sets.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            for (signer, verifier) in [(a, b), (b, a)] {
                let used = signer.signing();
                let held = verifier.get(used.id()).expect("the verifier holds the key");
                assert_eq!(held.secret(), used.secret());
            }
        }
        // Skipping step 2 breaks it: a host at step 3 signs with a key a host at step 1
        // does not hold.
        assert!(sets[0].get(sets[2].signing().id()).is_none());
    }
}
