//! Finding the `iwpmd` binary to spawn. A binary crate cannot depend on another package's
//! binary, so the lab looks for it where cargo puts it and builds it when it is missing or
//! older than the daemon's sources.
//!
//! Order: `$IWPMD_BIN`; else `iwpmd` in the cargo profile directory the running executable
//! lives in (`target/<profile>/`, also for test executables in `target/<profile>/deps/`),
//! built or rebuilt for that profile when it is missing or stale and the workspace is at
//! hand; else `iwpmd` on `$PATH`.
//!
//! The build says so before it starts (`building iwpmd (release) …`) and how long it took.
//! It is `cargo build --workspace --bin iwpmd`: cargo resolves every dependency's
//! features over the packages a build selects, and `cargo run --bin iwpm-lab` (or
//! `iwpm-bench`) in this virtual workspace, without `-p`, selects the whole workspace. So
//! the daemon's build resolves each shared dependency as the lab's own build did and
//! reuses it; only the daemon's own crates are compiled. (`cargo build -p iwpmd` would
//! resolve rustix and nix with fewer features and compile them, and all above them,
//! again.) The same holds the other way round: after `cargo build --release --workspace
//! --bin iwpmd --bin iwpm-lab` (both binaries in one build), `cargo run --release --bin
//! iwpm-lab` compiles nothing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

/// Why no daemon binary could be found.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    /// `$IWPMD_BIN` names nothing executable.
    #[error("IWPMD_BIN={0} does not exist")]
    EnvMissing(PathBuf),
    /// Building it failed.
    #[error("`{command}` failed ({why}); build it by hand or set IWPMD_BIN")]
    BuildFailed {
        /// The command line.
        command: String,
        /// Its exit status or spawn error.
        why: String,
    },
    /// Nothing found anywhere.
    #[error("no iwpmd binary found: build it (`cargo build --release -p iwpmd`) or set IWPMD_BIN")]
    NotFound,
}

/// The workspace root this crate was compiled in.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Crates whose sources make up the daemon binary.
const DAEMON_CRATES: [&str; 4] = ["iwpmd", "iwpm-core", "iwpm-proto", "iwpm-control"];

static FOUND: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The daemon binary, located (and built if needed) once per process. `announce` is called
/// with a line before a build starts and once it has finished.
pub fn daemon_binary(announce: impl Fn(&str)) -> Result<PathBuf, LocateError> {
    let mut found = FOUND
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(p) = found.as_ref() {
        return Ok(p.clone());
    }
    let path = locate(&Env::from_process(), &announce)?;
    *found = Some(path.clone());
    Ok(path)
}

/// Everything [`locate`] looks at, gathered from the process (or made up by tests).
#[derive(Clone, Debug)]
struct Env {
    /// `$IWPMD_BIN`.
    iwpmd_bin: Option<PathBuf>,
    /// `target/<profile>` of the running executable, and the profile's name.
    profile_dir: Option<(PathBuf, String)>,
    /// The workspace to build in.
    root: PathBuf,
    /// `$CARGO`, else `cargo`.
    cargo: OsString,
    /// `$PATH`.
    path: Option<OsString>,
}

impl Env {
    fn from_process() -> Env {
        let root = workspace_root();
        Env {
            iwpmd_bin: std::env::var_os("IWPMD_BIN").map(PathBuf::from),
            profile_dir: std::env::current_exe()
                .ok()
                .as_deref()
                .and_then(profile_dir),
            root,
            cargo: std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
            path: std::env::var_os("PATH"),
        }
    }
}

fn locate(env: &Env, announce: &dyn Fn(&str)) -> Result<PathBuf, LocateError> {
    if let Some(p) = &env.iwpmd_bin {
        return if p.is_file() {
            Ok(p.clone())
        } else {
            Err(LocateError::EnvMissing(p.clone()))
        };
    }
    if let Some((dir, profile)) = &env.profile_dir {
        let candidate = dir.join("iwpmd");
        let have_workspace = env.root.join("crates/iwpmd/Cargo.toml").is_file();
        let stale = match modified(&candidate) {
            None => true,
            Some(t) => have_workspace && newest_source(&env.root).is_some_and(|s| s > t),
        };
        if !stale {
            return Ok(candidate);
        }
        if have_workspace {
            let why = if candidate.exists() {
                "is older than its sources"
            } else {
                "is not built yet"
            };
            let cmd = build_command(env, profile, dir);
            let line = command_line(&cmd);
            announce(&format!(
                "iwpm-lab: building iwpmd ({profile}), the daemon the lab runs: {} {why}; \
                 running `{line}` (what the lab's own build compiled is reused; the \
                 daemon's own crates are compiled and linked)…",
                candidate.display()
            ));
            let t0 = Instant::now();
            run_build(cmd, &line)?;
            if candidate.is_file() {
                announce(&format!(
                    "iwpm-lab: built {} in {:.1} s",
                    candidate.display(),
                    t0.elapsed().as_secs_f64()
                ));
                return Ok(candidate);
            }
        } else if candidate.is_file() {
            return Ok(candidate);
        }
    }
    env.path
        .as_ref()
        .and_then(|paths| {
            std::env::split_paths(paths)
                .map(|p| p.join("iwpmd"))
                .find(|p| p.is_file())
        })
        .ok_or(LocateError::NotFound)
}

/// `target/<profile>` and the profile name, from an executable's location.
fn profile_dir(exe: &Path) -> Option<(PathBuf, String)> {
    let mut dir = exe.parent()?.to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir = dir.parent()?.to_path_buf();
    }
    let profile = dir.file_name()?.to_string_lossy().into_owned();
    Some((dir, profile))
}

/// What selects cargo profile `profile` on a cargo command line: nothing for `debug`,
/// `--release`, else `--profile NAME`.
pub fn cargo_profile_flags(profile: &str) -> Vec<&str> {
    match profile {
        "debug" => vec![],
        "release" => vec!["--release"],
        other => vec!["--profile", other],
    }
}

/// `cargo build [--release | --profile P] --workspace --bin iwpmd --target-dir TARGET`,
/// run in the workspace: the daemon lands next to the running executable, built with the
/// dependencies' features resolved as for `cargo run --bin iwpm-lab` (module docs).
fn build_command(env: &Env, profile: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(&env.cargo);
    cmd.current_dir(&env.root)
        .arg("build")
        .args(cargo_profile_flags(profile));
    cmd.args(["--workspace", "--bin", "iwpmd"]);
    if let Some(target) = dir.parent() {
        cmd.arg("--target-dir").arg(target);
    }
    cmd
}

/// The command as one would type it (for messages).
fn command_line(cmd: &Command) -> String {
    let mut words = vec!["cargo".to_owned()];
    words.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    words.join(" ")
}

fn run_build(mut cmd: Command, line: &str) -> Result<(), LocateError> {
    let failed = |why: String| LocateError::BuildFailed {
        command: line.to_owned(),
        why,
    };
    let status = cmd.status().map_err(|e| failed(e.to_string()))?;
    if status.success() {
        Ok(())
    } else {
        Err(failed(status.to_string()))
    }
}

fn modified(p: &Path) -> Option<SystemTime> {
    p.metadata().ok()?.modified().ok()
}

/// The newest modification time of the daemon's sources and manifests.
fn newest_source(root: &Path) -> Option<SystemTime> {
    let mut newest = None;
    for krate in DAEMON_CRATES {
        let dir = root.join("crates").join(krate);
        newest = newest.max(modified(&dir.join("Cargo.toml")));
        newest = newest.max(newest_in(&dir.join("src")));
    }
    newest
}

fn newest_in(dir: &Path) -> Option<SystemTime> {
    let mut newest = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let t = if path.is_dir() {
            newest_in(&path)
        } else {
            modified(&path)
        };
        newest = newest.max(t);
    }
    newest
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::os::unix::fs::PermissionsExt;

    /// A made-up workspace with `crates/iwpmd`, a `target/<profile>` and a fake cargo that
    /// records its arguments and "builds" `iwpmd` into the target directory it is given.
    struct Fixture {
        dir: PathBuf,
        env: Env,
    }

    impl Fixture {
        fn new(tag: &str, profile: &str) -> Fixture {
            let dir =
                std::env::temp_dir().join(format!("iwpm-lab-locate-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let ws = dir.join("ws");
            std::fs::create_dir_all(ws.join("crates/iwpmd/src")).unwrap();
            std::fs::write(ws.join("crates/iwpmd/Cargo.toml"), "").unwrap();
            std::fs::write(ws.join("crates/iwpmd/src/main.rs"), "").unwrap();
            let profile_dir = ws.join("target").join(profile);
            std::fs::create_dir_all(&profile_dir).unwrap();
            let cargo = dir.join("fake-cargo");
            std::fs::write(
                &cargo,
                format!(
                    "#!/bin/sh\necho \"$@\" >> {log}\nwhile [ $# -gt 0 ]; do\n  \
                     [ \"$1\" = --target-dir ] && t=$2\n  shift\ndone\n\
                     touch \"$t/{profile}/iwpmd\"\n",
                    log = dir.join("cargo.log").display()
                ),
            )
            .unwrap();
            std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
            let env = Env {
                iwpmd_bin: None,
                profile_dir: Some((profile_dir, profile.to_owned())),
                root: ws,
                cargo: cargo.into(),
                path: None,
            };
            Fixture { dir, env }
        }

        fn cargo_calls(&self) -> Vec<String> {
            std::fs::read_to_string(self.dir.join("cargo.log"))
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect()
        }

        fn locate(&self) -> (Result<PathBuf, LocateError>, Vec<String>) {
            let said = RefCell::new(Vec::new());
            let r = locate(&self.env, &|m: &str| said.borrow_mut().push(m.to_owned()));
            (r, said.into_inner())
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    #[test]
    fn a_missing_daemon_is_built_for_the_workspace_and_announced() {
        let f = Fixture::new("missing", "release");
        let (found, said) = f.locate();
        let bin = f.env.root.join("target/release/iwpmd");
        assert_eq!(found.unwrap(), bin);
        let target = f.env.root.join("target");
        assert_eq!(
            f.cargo_calls(),
            [format!(
                "build --release --workspace --bin iwpmd --target-dir {}",
                target.display()
            )]
        );
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].starts_with("iwpm-lab: building iwpmd (release)"),
            "{said:?}"
        );
        assert!(said[0].contains("is not built yet"), "{said:?}");
        assert!(said[1].starts_with("iwpm-lab: built "), "{said:?}");

        // Fresh now: found without a build or a word.
        let (again, said) = f.locate();
        assert_eq!(again.unwrap(), bin);
        assert!(said.is_empty(), "{said:?}");
        assert_eq!(f.cargo_calls().len(), 1);
    }

    #[test]
    fn a_daemon_older_than_its_sources_is_rebuilt() {
        let f = Fixture::new("stale", "debug");
        let bin = f.env.root.join("target/debug/iwpmd");
        std::fs::write(&bin, "").unwrap();
        let old = SystemTime::now() - std::time::Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&bin)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let (found, said) = f.locate();
        assert_eq!(found.unwrap(), bin);
        let calls = f.cargo_calls();
        assert_eq!(calls.len(), 1);
        assert!(
            calls[0].starts_with("build --workspace --bin iwpmd --target-dir "),
            "{calls:?}"
        );
        assert!(said[0].contains("building iwpmd (debug)"), "{said:?}");
        assert!(said[0].contains("is older than its sources"), "{said:?}");
    }

    #[test]
    fn iwpmd_bin_wins_and_must_exist() {
        let mut f = Fixture::new("env", "release");
        f.env.iwpmd_bin = Some(f.dir.join("fake-cargo"));
        assert_eq!(f.locate().0.unwrap(), f.dir.join("fake-cargo"));
        f.env.iwpmd_bin = Some(f.dir.join("nothing"));
        assert!(matches!(f.locate().0, Err(LocateError::EnvMissing(_))));
        assert!(f.cargo_calls().is_empty());
    }
}
