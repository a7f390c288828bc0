//! Finding the binaries the lab runs: `iwpmd` (the daemons) and, for `--hold`, `iwpmctl`
//! (the line it prints to paste). A binary crate cannot depend on another package's
//! binary, so the lab looks for each where cargo puts it and builds it when it is missing
//! or older than its sources.
//!
//! Order: `$IWPMD_BIN` (`$IWPMCTL_BIN`); else the binary in the cargo profile directory the
//! running executable lives in (`target/<profile>/`, also for test executables in
//! `target/<profile>/deps/`), built or rebuilt for that profile when it is missing or stale
//! and the workspace is at hand; else the binary on `$PATH`.
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

/// A workspace binary the lab runs, and where its sources are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tool {
    /// The binary's name.
    pub name: &'static str,
    /// Its package (`crates/<package>`).
    pub package: &'static str,
    /// The variable that names it, bypassing the search.
    pub env: &'static str,
    /// What it is for, in the build announcement.
    pub role: &'static str,
    /// Crates whose sources make up the binary (a newer file means a rebuild).
    pub crates: &'static [&'static str],
}

/// The daemon.
pub const IWPMD: Tool = Tool {
    name: "iwpmd",
    package: "iwpmd",
    env: "IWPMD_BIN",
    role: "the daemon the lab runs",
    crates: &["iwpmd", "iwpm-core", "iwpm-proto", "iwpm-control"],
};

/// The control tool `--hold` tells the user to run.
pub const IWPMCTL: Tool = Tool {
    name: "iwpmctl",
    package: "iwpm-control",
    env: "IWPMCTL_BIN",
    role: "the control tool --hold prints a line for",
    crates: &["iwpm-control", "iwpm-core", "iwpm-proto"],
};

/// Why a binary could not be found.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    /// `$IWPMD_BIN` (or the tool's variable) names nothing executable.
    #[error("{var}={path} does not exist")]
    EnvMissing {
        /// The variable.
        var: &'static str,
        /// Its value.
        path: PathBuf,
    },
    /// Building it failed.
    #[error("`{command}` failed ({why}); build it by hand or set {var}")]
    BuildFailed {
        /// The command line.
        command: String,
        /// Its exit status or spawn error.
        why: String,
        /// The variable that would name a binary instead.
        var: &'static str,
    },
    /// Nothing found anywhere.
    #[error(
        "no {name} binary found: build it (`cargo build --release -p {package}`) or set {var}"
    )]
    NotFound {
        /// The binary.
        name: &'static str,
        /// Its package.
        package: &'static str,
        /// The variable that would name it.
        var: &'static str,
    },
}

/// The workspace root this crate was compiled in.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Binaries found so far in this process, by name.
static FOUND: Mutex<Vec<(&'static str, PathBuf)>> = Mutex::new(Vec::new());

/// The daemon binary, located (and built if needed) once per process. `announce` is called
/// with a line before a build starts and once it has finished.
pub fn daemon_binary(announce: impl Fn(&str)) -> Result<PathBuf, LocateError> {
    binary(IWPMD, announce)
}

/// `tool`'s binary, located (and built if needed) once per process, as an absolute path
/// (`--hold` prints it for pasting anywhere). `announce` as for [`daemon_binary`].
pub fn binary(tool: Tool, announce: impl Fn(&str)) -> Result<PathBuf, LocateError> {
    let mut found = FOUND
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, p)) = found.iter().find(|(name, _)| *name == tool.name) {
        return Ok(p.clone());
    }
    let path = locate(tool, &Env::from_process(tool), &announce)?;
    let path = std::path::absolute(&path).unwrap_or(path);
    found.push((tool.name, path.clone()));
    Ok(path)
}

/// Everything [`locate`] looks at, gathered from the process (or made up by tests).
#[derive(Clone, Debug)]
struct Env {
    /// `$IWPMD_BIN` (the tool's variable).
    bin: Option<PathBuf>,
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
    fn from_process(tool: Tool) -> Env {
        let root = workspace_root();
        Env {
            bin: std::env::var_os(tool.env).map(PathBuf::from),
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

fn locate(tool: Tool, env: &Env, announce: &dyn Fn(&str)) -> Result<PathBuf, LocateError> {
    if let Some(p) = &env.bin {
        return if p.is_file() {
            Ok(p.clone())
        } else {
            Err(LocateError::EnvMissing {
                var: tool.env,
                path: p.clone(),
            })
        };
    }
    if let Some((dir, profile)) = &env.profile_dir {
        let candidate = dir.join(tool.name);
        let manifest = format!("crates/{}/Cargo.toml", tool.package);
        let have_workspace = env.root.join(manifest).is_file();
        let stale = match modified(&candidate) {
            None => true,
            Some(t) => have_workspace && newest_source(&env.root, tool).is_some_and(|s| s > t),
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
            let cmd = build_command(tool, env, profile, dir);
            let line = command_line(&cmd);
            announce(&format!(
                "iwpm-lab: building {} ({profile}), {}: {} {why}; running `{line}` (what \
                 the lab's own build compiled is reused; only its own crates are compiled \
                 and linked)…",
                tool.name,
                tool.role,
                candidate.display()
            ));
            let t0 = Instant::now();
            run_build(cmd, &line, tool)?;
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
                .map(|p| p.join(tool.name))
                .find(|p| p.is_file())
        })
        .ok_or(LocateError::NotFound {
            name: tool.name,
            package: tool.package,
            var: tool.env,
        })
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

/// `cargo build [--release | --profile P] --workspace --bin NAME --target-dir TARGET`,
/// run in the workspace: the binary lands next to the running executable, built with the
/// dependencies' features resolved as for `cargo run --bin iwpm-lab` (module docs).
fn build_command(tool: Tool, env: &Env, profile: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(&env.cargo);
    cmd.current_dir(&env.root)
        .arg("build")
        .args(cargo_profile_flags(profile));
    cmd.args(["--workspace", "--bin", tool.name]);
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

fn run_build(mut cmd: Command, line: &str, tool: Tool) -> Result<(), LocateError> {
    let failed = |why: String| LocateError::BuildFailed {
        command: line.to_owned(),
        why,
        var: tool.env,
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

/// The newest modification time of the tool's sources and manifests.
fn newest_source(root: &Path, tool: Tool) -> Option<SystemTime> {
    let mut newest = None;
    for krate in tool.crates {
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
        _one_at_a_time: std::sync::MutexGuard<'static, ()>,
    }

    /// One fixture at a time: a fake cargo being written while another test forks would be
    /// open for writing in the child until it execs, and running it then fails with ETXTBSY.
    static SERIAL: Mutex<()> = Mutex::new(());

    impl Fixture {
        fn new(tag: &str, profile: &str) -> Fixture {
            let serial = SERIAL
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let dir =
                std::env::temp_dir().join(format!("iwpm-lab-locate-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let ws = dir.join("ws");
            for krate in ["iwpmd", "iwpm-control"] {
                let src = ws.join("crates").join(krate).join("src");
                std::fs::create_dir_all(&src).unwrap();
                std::fs::write(src.join("../Cargo.toml"), "").unwrap();
                std::fs::write(src.join("main.rs"), "").unwrap();
            }
            let profile_dir = ws.join("target").join(profile);
            std::fs::create_dir_all(&profile_dir).unwrap();
            let cargo = dir.join("fake-cargo");
            std::fs::write(
                &cargo,
                format!(
                    "#!/bin/sh\necho \"$@\" >> {log}\nwhile [ $# -gt 0 ]; do\n  \
                     [ \"$1\" = --target-dir ] && t=$2\n  [ \"$1\" = --bin ] && b=$2\n  \
                     shift\ndone\ntouch \"$t/{profile}/$b\"\n",
                    log = dir.join("cargo.log").display()
                ),
            )
            .unwrap();
            std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
            let env = Env {
                bin: None,
                profile_dir: Some((profile_dir, profile.to_owned())),
                root: ws,
                cargo: cargo.into(),
                path: None,
            };
            Fixture {
                dir,
                env,
                _one_at_a_time: serial,
            }
        }

        fn cargo_calls(&self) -> Vec<String> {
            std::fs::read_to_string(self.dir.join("cargo.log"))
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect()
        }

        fn locate(&self) -> (Result<PathBuf, LocateError>, Vec<String>) {
            self.locate_tool(IWPMD)
        }

        fn locate_tool(&self, tool: Tool) -> (Result<PathBuf, LocateError>, Vec<String>) {
            let said = RefCell::new(Vec::new());
            let r = locate(tool, &self.env, &|m: &str| {
                said.borrow_mut().push(m.to_owned())
            });
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
        f.env.bin = Some(f.dir.join("fake-cargo"));
        assert_eq!(f.locate().0.unwrap(), f.dir.join("fake-cargo"));
        f.env.bin = Some(f.dir.join("nothing"));
        let err = f.locate().0.unwrap_err();
        assert!(matches!(err, LocateError::EnvMissing { .. }));
        assert!(err.to_string().starts_with("IWPMD_BIN="), "{err}");
        assert!(f.cargo_calls().is_empty());
    }

    /// `--hold` prints a line with `iwpmctl`: a missing one is built like the daemon (its own
    /// `--bin`), announced, and found by its absolute path.
    #[test]
    fn a_missing_iwpmctl_is_built_and_announced() {
        let f = Fixture::new("ctl", "release");
        let (found, said) = f.locate_tool(IWPMCTL);
        let bin = f.env.root.join("target/release/iwpmctl");
        assert_eq!(found.unwrap(), bin);
        let target = f.env.root.join("target");
        assert_eq!(
            f.cargo_calls(),
            [format!(
                "build --release --workspace --bin iwpmctl --target-dir {}",
                target.display()
            )]
        );
        assert!(
            said[0].starts_with(
                "iwpm-lab: building iwpmctl (release), the control tool --hold prints a line for"
            ),
            "{said:?}"
        );
        assert!(said[1].starts_with("iwpm-lab: built "), "{said:?}");
        drop(f);
        let mut none = Fixture::new("ctl-none", "release");
        none.env.profile_dir = None;
        let err = none.locate_tool(IWPMCTL).0.unwrap_err();
        assert_eq!(
            err.to_string(),
            "no iwpmctl binary found: build it (`cargo build --release -p iwpm-control`) or \
             set IWPMCTL_BIN"
        );
    }
}
