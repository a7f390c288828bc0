//! A test that must not share its process with tests that start children. A child holds
//! a copy of every descriptor of the process from its fork to its exec, and keeps the
//! inheritable ones: so a test that makes a descriptor inheritable for a spawn of its
//! own, or that binds a port it has just found free, runs alone in a process of its own,
//! a fresh run of the same test executable.

use std::process::{Command, Stdio};

/// Set in the child process to the name of the test it runs alone.
const ALONE: &str = "IWPM_TEST_ALONE";

/// Runs test `name` (its path in the test executable: `module::test`) alone in a fresh
/// process of this test executable. Called first thing in that test: in the harness's
/// process it runs the child, panics (with the child's output) unless the test ran there
/// and passed, and returns `true` (the caller returns); in the child it returns `false`,
/// and the caller goes on with the test's body.
pub fn in_own_process(name: &str) -> bool {
    if std::env::var_os(ALONE).is_some_and(|v| v == name) {
        return false;
    }
    let exe = std::env::current_exe()
        .unwrap_or_else(|e| panic!("cannot tell the test executable's path: {e}"));
    let out = Command::new(&exe)
        .args([name, "--exact", "--test-threads", "1", "--nocapture"])
        .env(ALONE, name)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    // (its output only with a failure: the harness's summary lines would count twice)
    assert!(
        out.status.success(),
        "{name}, alone in a process of its own: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "{name} did not run in its own process (no such test?):\n{stdout}"
    );
    true
}
