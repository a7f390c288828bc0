//! Where the repository is and what the running build made: tests read the repository's
//! files from here and start other packages' binaries from the directory cargo built
//! them into, so that no test runs cargo itself.

use std::path::{Path, PathBuf};

/// The workspace root (the repository's top directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `target/<profile>`: where cargo put the binaries of the running build, the directory
/// of this test executable (`deps/` left out).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe()
        .unwrap_or_else(|e| panic!("cannot tell the test executable's path: {e}"));
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    dir
}

/// Binary `name` of workspace package `package` as the running build made it, in
/// [`profile_dir`] (`cargo test --workspace` builds every package's binaries there).
/// Panics, naming the command that builds it, when it is not there.
pub fn built_binary(name: &str, package: &str) -> PathBuf {
    let dir = profile_dir();
    let path = dir.join(name);
    if !path.is_file() {
        let profile = match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => String::new(),
            Some("release") => " --release".to_owned(),
            Some(other) => format!(" --profile {other}"),
            None => String::new(),
        };
        panic!(
            "{} is not built: run `cargo build{profile} -p {package}` first (`cargo test \
             --workspace` builds it)",
            path.display()
        );
    }
    path
}
