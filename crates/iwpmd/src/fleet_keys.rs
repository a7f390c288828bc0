//! Fleet keys in the shell: where the key file is read from, the checks it must pass, and
//! reading it again on SIGHUP. The format is `iwpm_proto::keyfile`'s; what the keys do is
//! the core's (`Host::set_fleet_keys`).
//!
//! At start-up, before privileges are dropped, the keys come from:
//!
//! 1. the systemd credential [`CREDENTIAL`] (`$CREDENTIALS_DIRECTORY/iwpmd-peer-keys`), when
//!    the service manager passes one that holds a key line. The packaged unit copies
//!    `/etc/iwpmd/peer-keys` there (`LoadCredential=`), and when that file is missing it
//!    passes a comment instead (`SetCredential=`, systemd's fallback), which counts as no
//!    credential. The copy is private to the service, so it gets no owner or mode check;
//! 2. otherwise the file `peer_key_file` names, which must be owned by root (or by the user
//!    the daemon was started as, for a daemon started without root) and grant nothing to
//!    group or others.
//!
//! Keys are used only when `peer_key_file` is set: a credential without it is reported and
//! left alone. A missing, unreadable, empty or malformed file stops the start, with a
//! message naming the file, the line and the fix.
//!
//! On SIGHUP the shell reads `peer_key_file` itself, with the same checks: a credential is
//! immutable while the service runs (systemd copies it only when the service starts), so
//! reading it again would never see an edit. The packaged unit runs the daemon as root
//! without `--user`, and root may read its own 0600 file without any capability, so the
//! reload works there. A daemon that switched to another user cannot read a root-only file
//! any more: the reload then fails, says to restart (`systemctl restart iwpmd` keeps every
//! mapping) and keeps the keys in use. Any failed reload keeps them.
//!
//! The key bytes live in buffers wiped after parsing and in `FleetKey`s wiped on drop; no
//! message, log line or `Debug` output shows them.

use std::fmt;
use std::io::{self, Read as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use iwpm_control::KeysReport;
use iwpm_core::Core;
use iwpm_proto::fleet_key::FleetKeys;
use iwpm_proto::keyfile::{parse_key_file_bytes, summary, KeyFileError, MAX_KEY_FILE_LEN};
use zeroize::Zeroizing;

/// The systemd credential the packaged unit passes (`LoadCredential=iwpmd-peer-keys:...`).
pub(crate) const CREDENTIAL: &str = "iwpmd-peer-keys";
/// Where the packaged unit loads the credential from.
pub(crate) const PACKAGED_KEY_FILE: &str = "/etc/iwpmd/peer-keys";

/// Where a key set was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The systemd credential, at this path.
    Credential(PathBuf),
    /// The key file itself.
    File(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Credential(p) => write!(f, "systemd credential {CREDENTIAL} ({})", p.display()),
            Origin::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Why a key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyLoadError {
    /// It cannot be opened or read.
    #[error("cannot read the fleet key file {path} (peer_key_file): {}{}", describe_io(.error), .hint)]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        error: io::Error,
        /// What to do about it, when there is more to say (starts with "; ").
        hint: String,
    },
    /// A directory, a device, a socket...
    #[error("the fleet key file {path} (peer_key_file) is not a regular file")]
    NotAFile {
        /// The file.
        path: PathBuf,
    },
    /// Someone other than root (or the daemon's own user) owns it, or group or others may
    /// read or write it.
    #[error(
        "the fleet key file {path} (peer_key_file) must be owned by {owner} and readable by \
         its owner only, but {problem}; fix it with: {fix}"
    )]
    Unprotected {
        /// The file.
        path: PathBuf,
        /// Who may own it: `root`, or `root or uid N` for a daemon started without root.
        owner: String,
        /// What is wrong.
        problem: String,
        /// The commands that fix it.
        fix: String,
    },
    /// Its text is not a valid key file.
    #[error("{origin}: {error}")]
    Invalid {
        /// Where it was read.
        origin: Origin,
        /// The parser's verdict (with the line).
        error: KeyFileError,
    },
}

fn describe_io(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => "there is no such file".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => error.to_string(),
    }
}

/// A key set and where it came from.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// The keys.
    pub(crate) keys: FleetKeys,
    /// Where they were read.
    pub(crate) origin: Origin,
}

impl Loaded {
    /// One line for the log: `3 keys (1, 2, 3 accept-only), signing with key 2, from PATH`.
    pub(crate) fn describe(&self) -> String {
        format!("{}, from {}", summary(&self.keys), self.origin)
    }
}

/// Where the daemon reads its keys, fixed at start-up.
#[derive(Clone, Debug)]
pub(crate) struct KeySource {
    /// `peer_key_file`.
    path: PathBuf,
    /// `$CREDENTIALS_DIRECTORY` at start-up.
    credentials_dir: Option<PathBuf>,
    /// The effective uid at start-up: besides root, the only owner a key file may have.
    own_uid: u32,
}

impl KeySource {
    /// The key file `path` (`peer_key_file`), and the credential directory from the
    /// environment.
    pub(crate) fn new(path: PathBuf) -> Self {
        KeySource {
            path,
            credentials_dir: std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from),
            own_uid: rustix::process::geteuid().as_raw(),
        }
    }

    /// The start-up read: the credential if it holds keys, else the file.
    pub(crate) fn load_at_start(&self) -> Result<Loaded, KeyLoadError> {
        if let Some(loaded) = self.credential()? {
            return Ok(loaded);
        }
        self.load_file()
    }

    /// The credential's keys; `None` when there is no credential or it holds no key line
    /// (the packaged unit's placeholder).
    fn credential(&self) -> Result<Option<Loaded>, KeyLoadError> {
        let Some(path) = credential_path(self.credentials_dir.as_deref()) else {
            return Ok(None);
        };
        let bytes = match read_limited(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => {
                return Err(KeyLoadError::Unreadable {
                    path,
                    error,
                    hint: String::new(),
                })
            }
        };
        let origin = Origin::Credential(path);
        match parse_key_file_bytes(&bytes) {
            Ok(keys) => Ok(Some(Loaded { keys, origin })),
            Err(KeyFileError::Empty) => {
                tracing::debug!(
                    "the service manager's credential {CREDENTIAL} holds no key (the unit's \
                     placeholder: {PACKAGED_KEY_FILE} was missing when the service started); \
                     reading {}",
                    self.path.display()
                );
                Ok(None)
            }
            Err(error) => Err(KeyLoadError::Invalid { origin, error }),
        }
    }

    /// The file `peer_key_file` names, checked (owner, mode, regular file) and parsed.
    pub(crate) fn load_file(&self) -> Result<Loaded, KeyLoadError> {
        let path = &self.path;
        let unreadable = |error: io::Error| {
            let hint = if error.kind() == io::ErrorKind::PermissionDenied
                && rustix::process::geteuid().as_raw() != self.own_uid
            {
                format!(
                    "; the daemon runs as uid {} since start-up and cannot read it any more: \
                     restart the daemon to load new keys (`systemctl restart iwpmd` keeps \
                     every mapping)",
                    rustix::process::geteuid().as_raw()
                )
            } else {
                String::new()
            };
            KeyLoadError::Unreadable {
                path: path.clone(),
                error,
                hint,
            }
        };
        let mut file = std::fs::File::open(path).map_err(unreadable)?;
        let meta = file.metadata().map_err(unreadable)?;
        if !meta.is_file() {
            return Err(KeyLoadError::NotAFile { path: path.clone() });
        }
        self.check_protection(&meta)?;
        let bytes = read_to_limit(&mut file).map_err(unreadable)?;
        let origin = Origin::File(path.clone());
        parse_key_file_bytes(&bytes)
            .map(|keys| Loaded {
                keys,
                origin: origin.clone(),
            })
            .map_err(|error| KeyLoadError::Invalid { origin, error })
    }

    /// Owner root (or our own uid at start-up), nothing for group and others.
    fn check_protection(&self, meta: &std::fs::Metadata) -> Result<(), KeyLoadError> {
        let (uid, mode) = (meta.uid(), meta.mode() & 0o7777);
        let owner_ok = uid == 0 || uid == self.own_uid;
        let mode_ok = mode & 0o077 == 0;
        if owner_ok && mode_ok {
            return Ok(());
        }
        let (owner, chown) = if self.own_uid == 0 {
            ("root".to_owned(), "root:root".to_owned())
        } else {
            (
                format!("root or uid {}", self.own_uid),
                self.own_uid.to_string(),
            )
        };
        let path = self.path.display();
        let mut problems = Vec::new();
        if !owner_ok {
            problems.push(format!("it is owned by uid {uid}"));
        }
        if !mode_ok {
            problems.push(format!(
                "its mode {mode:04o} lets group or others {}",
                if mode & 0o022 != 0 {
                    "change it"
                } else {
                    "read it"
                }
            ));
        }
        Err(KeyLoadError::Unprotected {
            path: self.path.clone(),
            owner,
            problem: problems.join(" and "),
            fix: format!("chown {chown} {path} && chmod 600 {path}"),
        })
    }
}

/// `$CREDENTIALS_DIRECTORY/iwpmd-peer-keys`, if the directory is set.
fn credential_path(dir: Option<&Path>) -> Option<PathBuf> {
    dir.filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(CREDENTIAL))
}

/// The file's bytes, at most [`MAX_KEY_FILE_LEN`] + 1 (the parser refuses more), in a
/// buffer wiped on drop.
fn read_limited(path: &Path) -> io::Result<Zeroizing<Vec<u8>>> {
    let mut file = std::fs::File::open(path)?;
    read_to_limit(&mut file)
}

fn read_to_limit(file: &mut std::fs::File) -> io::Result<Zeroizing<Vec<u8>>> {
    // Room for the whole of an accepted file: the buffer never grows (a grown buffer would
    // leave a copy of the key text behind, unwiped).
    let mut buf = Zeroizing::new(Vec::with_capacity(MAX_KEY_FILE_LEN + 1));
    file.take(MAX_KEY_FILE_LEN as u64 + 1)
        .read_to_end(&mut buf)?;
    Ok(buf)
}

/// The service manager passes a credential [`CREDENTIAL`] that holds keys although no
/// `peer_key_file` is set: said once at start-up, since the keys are then not used.
pub(crate) fn warn_unused_credential() {
    let Some(path) = credential_path(
        std::env::var_os("CREDENTIALS_DIRECTORY")
            .map(PathBuf::from)
            .as_deref(),
    ) else {
        return;
    };
    let holds_keys = read_limited(&path)
        .ok()
        .is_some_and(|b| parse_key_file_bytes(&b).is_ok());
    if holds_keys {
        tracing::warn!(
            "the service manager passes fleet keys ({CREDENTIAL}, {}) but the configuration \
             sets no peer_key_file: peer datagrams are not authenticated; add \
             peer_key_file={PACKAGED_KEY_FILE} to iwpmd.conf to use them",
            path.display()
        );
    }
}

/// The shell's fleet key state, for SIGHUP and `iwpmctl keys`.
#[derive(Debug)]
pub(crate) struct FleetKeyState {
    /// Where to read again.
    pub(crate) source: KeySource,
    /// Where the keys in use came from.
    pub(crate) origin: Origin,
    /// When they were loaded.
    pub(crate) loaded_at: Instant,
    /// Why the last reload failed, if it did (cleared by a successful one).
    pub(crate) reload_error: Option<String>,
}

impl FleetKeyState {
    /// The start-up keys' state: where they came from, for SIGHUP and `iwpmctl keys`.
    pub(crate) fn new(now: Instant, source: KeySource, loaded: &Loaded) -> Self {
        FleetKeyState {
            source,
            origin: loaded.origin.clone(),
            loaded_at: now,
            reload_error: None,
        }
    }
}

/// `iwpmctl keys`: the keys' ids and counts from the core, where they came from, and why
/// the last reload was refused, if it was (`state` is `None` without a key file).
pub(crate) fn keys_report(state: Option<&FleetKeyState>, core: &Core, now: Instant) -> KeysReport {
    let Some(state) = state else {
        return KeysReport {
            source: None,
            loaded_ago_ms: None,
            reload_error: None,
            keys: Vec::new(),
        };
    };
    let ago = now.saturating_duration_since(state.loaded_at);
    KeysReport {
        source: Some(state.origin.to_string()),
        loaded_ago_ms: Some(u64::try_from(ago.as_millis()).unwrap_or(u64::MAX)),
        reload_error: state.reload_error.clone(),
        keys: core.fleet_key_report(),
    }
}

/// SIGHUP: reads `peer_key_file` again. The new keys, or `None` when the file was refused
/// (logged, and kept for `iwpmctl keys`): the keys in use then stay.
pub(crate) fn reload(state: &mut FleetKeyState, now: Instant) -> Option<FleetKeys> {
    match state.source.load_file() {
        Ok(loaded) => {
            tracing::warn!("fleet keys reloaded: {}", loaded.describe());
            state.origin = loaded.origin;
            state.loaded_at = now;
            state.reload_error = None;
            Some(loaded.keys)
        }
        Err(e) => {
            tracing::error!("fleet keys not reloaded, the keys in use stay: {e}");
            state.reload_error = Some(e.to_string());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    const KEY1: &str = "1 000102030405060708090a0b0c0d0e0f\n";

    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Self {
            let d = std::env::temp_dir().join(format!("iwpmd-keys-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Dir(d)
        }

        fn file(&self, name: &str, text: &str, mode: u32) -> PathBuf {
            let p = self.0.join(name);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn source(path: PathBuf, creds: Option<&Path>) -> KeySource {
        KeySource {
            path,
            credentials_dir: creds.map(Path::to_path_buf),
            own_uid: rustix::process::geteuid().as_raw(),
        }
    }

    #[test]
    fn a_protected_file_loads_and_an_open_one_is_refused_naming_the_fix() {
        let d = Dir::new("mode");
        let good = d.file("keys", KEY1, 0o600);
        let loaded = source(good.clone(), None).load_at_start().unwrap();
        assert_eq!(loaded.origin, Origin::File(good));
        assert_eq!(loaded.keys.signing().id(), 1);
        for (mode, what) in [(0o644, "read it"), (0o620, "change it"), (0o604, "read it")] {
            let p = d.file("open", KEY1, mode);
            let e = source(p.clone(), None).load_at_start().unwrap_err();
            let text = e.to_string();
            assert!(matches!(e, KeyLoadError::Unprotected { .. }), "{text}");
            assert!(text.contains(&format!("mode {mode:04o}")), "{text}");
            assert!(text.contains(what), "{text}");
            assert!(
                text.contains(&format!("chmod 600 {}", p.display())),
                "{text}"
            );
        }
        // 0400 is fine too.
        let p = d.file("ro", KEY1, 0o400);
        source(p, None).load_at_start().unwrap();
    }

    #[test]
    #[cfg_attr(not_root, ignore = "needs root (chown)")]
    fn a_file_owned_by_someone_else_is_refused() {
        if rustix::process::geteuid().as_raw() != 0 {
            iwpm_testkit::host::say_skipped(
                "a_file_owned_by_someone_else_is_refused",
                "chown needs root",
            );
            return;
        }
        let d = Dir::new("owner");
        let p = d.file("keys", KEY1, 0o600);
        std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
        let e = source(p.clone(), None).load_at_start().unwrap_err();
        let text = e.to_string();
        assert!(text.contains("owned by uid 65534"), "{text}");
        assert!(
            text.contains(&format!("chown root:root {} && chmod 600", p.display())),
            "{text}"
        );
    }

    #[test]
    fn missing_malformed_and_short_files_name_the_file_and_line() {
        let d = Dir::new("bad");
        let missing = d.0.join("none");
        let e = source(missing.clone(), None).load_at_start().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot read the fleet key file {} (peer_key_file): there is no such file",
                missing.display()
            )
        );
        let p = d.file("short", "# keys\n1 0011223344\n", 0o600);
        let e = source(p.clone(), None).load_at_start().unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("{}: line 2: key 1 is 5 bytes", p.display())),
            "{text}"
        );
        assert!(!text.contains("0011223344"), "no key bytes: {text}");
        let p = d.file("empty", "", 0o600);
        let e = source(p.clone(), None).load_at_start().unwrap_err();
        assert!(matches!(
            e,
            KeyLoadError::Invalid {
                error: KeyFileError::Empty,
                ..
            }
        ));
        let e = source(d.0.clone(), None).load_at_start().unwrap_err();
        assert!(matches!(e, KeyLoadError::NotAFile { .. }), "{e}");
    }

    #[test]
    fn the_credential_wins_at_start_unless_it_holds_no_key() {
        let d = Dir::new("cred");
        let creds = Dir::new("cred-dir");
        // The file itself would be refused (mode 0644): the credential is read instead.
        let file = d.file("keys", "7 000102030405060708090a0b0c0d0e0f\n", 0o644);
        let cred = creds.file(CREDENTIAL, KEY1, 0o400);
        let src = source(file.clone(), Some(&creds.0));
        let loaded = src.load_at_start().unwrap();
        assert_eq!(loaded.origin, Origin::Credential(cred.clone()));
        assert_eq!(loaded.keys.signing().id(), 1);
        assert!(loaded
            .describe()
            .contains("systemd credential iwpmd-peer-keys"));
        // SIGHUP reads the file, with its checks.
        assert!(matches!(
            src.load_file(),
            Err(KeyLoadError::Unprotected { .. })
        ));
        // The unit's placeholder counts as no credential: the file is read.
        creds.file(
            CREDENTIAL,
            "# no /etc/iwpmd/peer-keys when the service started",
            0o400,
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let loaded = src.load_at_start().unwrap();
        assert_eq!(loaded.origin, Origin::File(file));
        assert_eq!(loaded.keys.signing().id(), 7);
        // A broken credential is an error naming it.
        creds.file(CREDENTIAL, "1 00\n", 0o400);
        let e = src.load_at_start().unwrap_err().to_string();
        assert!(
            e.starts_with("systemd credential iwpmd-peer-keys (") && e.contains("line 1"),
            "{e}"
        );
        // No credential file in the directory: the file.
        std::fs::remove_file(cred).unwrap();
        assert_eq!(src.load_at_start().unwrap().keys.signing().id(), 7);
    }

    #[test]
    fn a_failed_reload_keeps_the_state_and_a_good_one_replaces_it() {
        let d = Dir::new("reload");
        let p = d.file("keys", KEY1, 0o600);
        let src = source(p.clone(), None);
        let start = Instant::now();
        let mut state = FleetKeyState {
            source: src,
            origin: Origin::File(p.clone()),
            loaded_at: start,
            reload_error: None,
        };
        d.file("keys", "1 00\n", 0o600);
        assert!(reload(&mut state, start).is_none());
        let error = state.reload_error.clone().unwrap();
        assert!(error.contains("line 1"), "{error}");
        assert_eq!(state.loaded_at, start);
        d.file(
            "keys",
            "1 000102030405060708090a0b0c0d0e0f\n2 101112131415161718191a1b1c1d1e1f\n",
            0o600,
        );
        let later = start + std::time::Duration::from_secs(1);
        let keys = reload(&mut state, later).unwrap();
        assert_eq!(keys.signing().id(), 2);
        assert_eq!(state.reload_error, None);
        assert_eq!(state.loaded_at, later);
    }

    #[test]
    fn credential_path_needs_a_directory() {
        assert_eq!(credential_path(None), None);
        assert_eq!(credential_path(Some(Path::new(""))), None);
        assert_eq!(
            credential_path(Some(Path::new("/run/credentials/iwpmd.service"))),
            Some(PathBuf::from(
                "/run/credentials/iwpmd.service/iwpmd-peer-keys"
            ))
        );
    }
}
