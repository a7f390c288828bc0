//! Finding the `iwpmd` binary to spawn. A binary crate cannot depend on another package's
//! binary, so the lab looks for it where cargo puts it and builds it when it is missing or
//! older than the daemon's sources.
//!
//! Order: `$IWPMD_BIN`; else `iwpmd` in the cargo profile directory the running executable
//! lives in (`target/<profile>/`, also for test executables in `target/<profile>/deps/`),
//! built or rebuilt with `cargo build -p iwpmd` for that profile when it is missing or
//! stale and the workspace is at hand; else `iwpmd` on `$PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::SystemTime;

/// Why no daemon binary could be found.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    /// `$IWPMD_BIN` names nothing executable.
    #[error("IWPMD_BIN={0} does not exist")]
    EnvMissing(PathBuf),
    /// Building it failed.
    #[error("`cargo build -p iwpmd` failed ({0}); build it by hand or set IWPMD_BIN")]
    BuildFailed(String),
    /// Nothing found anywhere.
    #[error("no iwpmd binary found: build it (`cargo build -p iwpmd`) or set IWPMD_BIN")]
    NotFound,
}

/// The workspace root this crate was compiled in.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Crates whose sources make up the daemon binary.
const DAEMON_CRATES: [&str; 3] = ["iwpmd", "iwpm-core", "iwpm-proto"];

static FOUND: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The daemon binary, located (and built if needed) once per process. `announce` is called
/// with a message before a build starts.
pub fn daemon_binary(announce: impl Fn(&str)) -> Result<PathBuf, LocateError> {
    let mut found = FOUND
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(p) = found.as_ref() {
        return Ok(p.clone());
    }
    let path = locate(&announce)?;
    *found = Some(path.clone());
    Ok(path)
}

fn locate(announce: &dyn Fn(&str)) -> Result<PathBuf, LocateError> {
    if let Some(p) = std::env::var_os("IWPMD_BIN") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(LocateError::EnvMissing(p))
        };
    }
    if let Some((dir, profile)) = profile_dir() {
        let candidate = dir.join("iwpmd");
        let root = workspace_root();
        let have_workspace = root.join("crates/iwpmd/Cargo.toml").is_file();
        let stale = match modified(&candidate) {
            None => true,
            Some(t) => have_workspace && newest_source(&root).is_some_and(|s| s > t),
        };
        if !stale {
            return Ok(candidate);
        }
        if have_workspace {
            let why = if candidate.exists() {
                "older than its sources"
            } else {
                "missing"
            };
            announce(&format!(
                "iwpm-lab: {} is {why}; running `cargo build{} -p iwpmd`",
                candidate.display(),
                profile_flag(&profile)
            ));
            build(&root, &profile, &dir)?;
            if candidate.is_file() {
                return Ok(candidate);
            }
        } else if candidate.is_file() {
            return Ok(candidate);
        }
    }
    which("iwpmd").ok_or(LocateError::NotFound)
}

/// `target/<profile>` and the profile name, from the running executable's location.
fn profile_dir() -> Option<(PathBuf, String)> {
    let exe = std::env::current_exe().ok()?;
    let mut dir = exe.parent()?.to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir = dir.parent()?.to_path_buf();
    }
    let profile = dir.file_name()?.to_string_lossy().into_owned();
    Some((dir, profile))
}

fn profile_flag(profile: &str) -> String {
    match profile {
        "debug" => String::new(),
        "release" => " --release".into(),
        other => format!(" --profile {other}"),
    }
}

/// Builds the daemon into the profile directory `dir` (`target/<profile>`). The build
/// uses that target directory so the result lands next to the lab.
fn build(root: &Path, profile: &str, dir: &Path) -> Result<(), LocateError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "-p", "iwpmd", "--bin", "iwpmd"]);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    if let Some(target) = dir.parent() {
        cmd.arg("--target-dir").arg(target);
    }
    let status = cmd
        .status()
        .map_err(|e| LocateError::BuildFailed(e.to_string()))?;
    if status.success() {
        Ok(())
    } else {
        Err(LocateError::BuildFailed(status.to_string()))
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

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}
