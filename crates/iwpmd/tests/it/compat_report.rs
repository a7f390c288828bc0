//! `scripts/compat-report` on a sandbox of its own (a copy of the script beside a made-up
//! checklist, cargo log, rig summary and committed report): the storage section of the
//! committed report is kept as it stands when no storage run is there (CI's case), made anew
//! from the storage runs when there are some (`--storage-only` leaving the rest alone), and
//! `--check` passes on a current report and fails with 3 on a stale one without writing it;
//! of the storage section it judges each pairing's status and check count, not the figures.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use iwpm_testkit::fs::{scratch_dir, ScratchDir};
use iwpm_testkit::host::say_skipped;
use iwpm_testkit::workspace::workspace_root;

const STORAGE_HEAD: &str = "## Kernel consumers: NVMe over Fabrics and NFS over RDMA";

/// A throw-away tree laid out as the repository is, as far as the script looks.
struct Sandbox {
    root: ScratchDir,
}

impl Sandbox {
    fn new(tag: &str) -> Sandbox {
        let root = scratch_dir(&format!("compat-{tag}"));
        let script = root.join("scripts/compat-report");
        std::fs::create_dir_all(script.parent().unwrap()).unwrap();
        std::fs::copy(workspace_root().join("scripts/compat-report"), &script).unwrap();
        let sb = Sandbox { root };
        sb.write("crates/demo/src/lib.rs", "");
        sb.write("docs/guide.md", "the demo feature is documented\n");
        sb.write(
            "docs/compat/checklist.tsv",
            &[
                "# a made-up checklist",
                "source\tid\tfeature\tevidence\tintended\tnote\tport-mapped",
                "C\t1\tDemo feature\tcargo:demo:lib:tests::demo_works ; file:docs/guide.md:^the demo feature",
                "K\t1a\tDemo on the real kernel\trig:single-ours:start",
            ]
            .join("\n"),
        );
        sb.write(
            "target/compat/cargo.log",
            "     Running unittests src/lib.rs (target/debug/deps/demo-0123456789abcdef)\n\
             test tests::demo_works ... ok\n\
             test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n",
        );
        for k in ["6.1", "6.12"] {
            sb.write(
                &format!("target/rig/{k}/summary.txt"),
                "rig: Linux test\n\n== single-ours: 1 passed, 0 failed (10s, at 10s)\n   PASS start: daemon up\n",
            );
        }
        sb
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_default()
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("python3")
            .arg(self.path("scripts/compat-report"))
            .args(args)
            .current_dir(&self.root)
            .output()
            .unwrap()
    }

    /// Runs the report from the made-up cargo log; returns its exit status.
    fn report(&self, extra: &[&str]) -> (i32, String) {
        let log = self.path("target/compat/cargo.log");
        let mut args = vec!["--cargo-log", log.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = self.run(&args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code().unwrap_or(-1), text)
    }

    /// One storage boot's summary lines and figures, as run-all.sh leaves them.
    fn storage_run(&self, kernel: &str, mode: &str, failed: bool) {
        let mut summary = self.read(&format!("target/rig/{kernel}/summary.txt"));
        for (side, checks) in [
            (
                "A",
                vec!["ours-ours-nfs-dump-v6", "ours-ours-nfs-restart-both"],
            ),
            ("B", vec!["ours-ours-v6-connect", "ours-ours-nfs6-remount"]),
        ] {
            let bad = failed && side == "B";
            summary.push_str(&format!(
                "\n== storage-pm{mode}-{side}: {} passed, {} failed (300s, at 300s)\n",
                checks.len() - usize::from(bad),
                usize::from(bad)
            ));
            for (i, c) in checks.iter().enumerate() {
                let status = if bad && i == 1 { "FAIL" } else { "PASS" };
                summary.push_str(&format!("   {status} {c}: made up\n"));
            }
            summary
                .push_str("   INFO c-c-nfs6-mount (reference): IPv6 mount: DOES NOT HOLD: rc 32\n");
        }
        self.write(&format!("target/rig/{kernel}/summary.txt"), &summary);
        self.write(
            &format!("target/rig/{kernel}/share/out/storage-pm{mode}-B/storage-figures.txt"),
            "ours-ours-connect-s 0.61\nours-ours-reset-s 0.9\nours-ours-v6-connect-s 0.7\n",
        );
    }
}

/// Whether python3 runs here; if not, TEST is reported skipped, as it needs python3 for WHAT.
pub(crate) fn python3(test: &str, what: &str) -> bool {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        say_skipped(test, &format!("no python3 to run {what}"));
    }
    ok
}

/// The storage section of a report, heading to the next `## ` heading.
fn storage_section(report: &str) -> &str {
    let at = report.find(STORAGE_HEAD).expect("a storage section");
    let end = report[at + STORAGE_HEAD.len()..]
        .find("\n## ")
        .map_or(report.len(), |e| at + STORAGE_HEAD.len() + e + 1);
    &report[at..end]
}

fn committed_report_with(sandbox: &Sandbox, storage: &str) {
    // The first run writes the report; its storage section is then replaced by `storage`,
    // as if committed from an earlier storage run.
    let (rc, out) = sandbox.report(&[]);
    assert_eq!(rc, 0, "{out}");
    let report = sandbox.read("docs/compat/REPORT.md");
    let old = storage_section(&report).to_owned();
    sandbox.write("docs/compat/REPORT.md", &report.replacen(&old, storage, 1));
}

#[test]
fn without_storage_runs_the_committed_storage_section_is_kept_and_check_passes() {
    if !python3(
        "without_storage_runs_the_committed_storage_section_is_kept_and_check_passes",
        "scripts/compat-report",
    ) {
        return;
    }
    let sb = Sandbox::new("reuse");
    let kept = format!(
        "{STORAGE_HEAD}\n\nFrom the storage runs of an earlier day: KEPT AS IT STANDS.\n\n"
    );
    committed_report_with(&sb, &kept);
    let before = sb.read("docs/compat/REPORT.md");
    assert!(before.contains("KEPT AS IT STANDS"));

    let (rc, out) = sb.report(&["--check"]);
    assert_eq!(rc, 0, "a current report passes --check: {out}");
    assert!(out.contains("up to date"), "{out}");

    let (rc, out) = sb.report(&[]);
    assert_eq!(rc, 0, "{out}");
    let after = sb.read("docs/compat/REPORT.md");
    assert_eq!(
        storage_section(&after),
        kept,
        "the committed section, verbatim"
    );
    assert!(after.contains("Demo feature"), "{after}");
    assert!(
        !Path::new(&sb.path("target/compat/REPORT.fresh.md")).exists(),
        "nothing stale written"
    );
}

#[test]
fn check_fails_with_3_on_a_stale_report_and_writes_the_fresh_one_aside() {
    if !python3(
        "check_fails_with_3_on_a_stale_report_and_writes_the_fresh_one_aside",
        "scripts/compat-report",
    ) {
        return;
    }
    let sb = Sandbox::new("stale");
    let (rc, out) = sb.report(&[]);
    assert_eq!(rc, 0, "{out}");
    let committed = sb.read("docs/compat/REPORT.md");
    // A new checklist row the committed report does not count yet.
    let mut checklist = sb.read("docs/compat/checklist.tsv");
    checklist.push_str("\nC\t2\tAnother feature\tfile:docs/guide.md:documented\n");
    sb.write("docs/compat/checklist.tsv", &checklist);
    let (rc, out) = sb.report(&["--check"]);
    assert_eq!(rc, 3, "stale: {out}");
    assert!(out.contains("is stale"), "{out}");
    assert_eq!(
        sb.read("docs/compat/REPORT.md"),
        committed,
        "--check writes no report"
    );
    assert!(sb
        .read("target/compat/REPORT.fresh.md")
        .contains("Another feature"));
    // A failing evidence item fails the run (exit 1) and names the row.
    sb.write("docs/guide.md", "nothing here\n");
    let (rc, out) = sb.report(&[]);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("FAIL: C 1"), "{out}");
}

#[test]
fn storage_runs_make_the_section_anew_and_storage_only_leaves_the_rest() {
    if !python3(
        "storage_runs_make_the_section_anew_and_storage_only_leaves_the_rest",
        "scripts/compat-report",
    ) {
        return;
    }
    let sb = Sandbox::new("storage");
    committed_report_with(&sb, &format!("{STORAGE_HEAD}\n\nOLD SECTION\n\n"));
    sb.storage_run("6.1", "1", false);
    sb.storage_run("6.12", "1", true);
    let before = sb.read("docs/compat/REPORT.md");

    let out = sb.run(&["--storage-only"]);
    assert!(out.status.success(), "{out:?}");
    let after = sb.read("docs/compat/REPORT.md");
    let section = storage_section(&after);
    assert!(!section.contains("OLD SECTION"), "{section}");
    let row = section
        .lines()
        .find(|l| l.starts_with("| port-mapped | ours-ours |"))
        .unwrap_or_else(|| panic!("no ours-ours row: {section}"));
    assert!(
        row.contains("**PASS** 4/4"),
        "6.1 passed every check: {row}"
    );
    assert!(
        row.contains("**FAIL** 1 of 4 (ours-ours-nfs6-remount)"),
        "6.12 names its failed check: {row}"
    );
    assert!(row.contains("connect 0.61 s"), "{row}");
    assert!(row.contains("IPv6: NVMe connect 0.7 s"), "{row}");
    assert!(
        section.contains("`c-c-nfs6-mount` (reference): IPv6 mount: DOES NOT HOLD: rc 32"),
        "C's reported lines that do not hold are listed: {section}"
    );
    assert!(
        !section.contains("| plain |"),
        "a mode that did not run has no rows: {section}"
    );
    // Everything outside the section is as it was.
    let old = storage_section(&before);
    assert_eq!(after.replacen(section, "", 1), before.replacen(old, "", 1));

    // With storage runs present, the full report uses them too, and --check compares them.
    let (rc, out) = sb.report(&["--check"]);
    assert_eq!(rc, 0, "the section just written is current: {out}");

    // The next run's figures and C's reported lines differ (as in every CI run): --check
    // compares the judged part only, so the report stays current.
    sb.write(
        "target/rig/6.1/share/out/storage-pm1-B/storage-figures.txt",
        "ours-ours-connect-s 1.93\nours-ours-reset-s 1.2\nours-ours-v6-connect-s 0.4\n",
    );
    let summary = sb.read("target/rig/6.1/summary.txt");
    sb.write(
        "target/rig/6.1/summary.txt",
        &summary.replace("DOES NOT HOLD: rc 32", "holds: rc 0"),
    );
    let (rc, out) = sb.report(&["--check"]);
    assert_eq!(rc, 0, "figures alone do not make the report stale: {out}");

    // A judged check that now fails does.
    sb.write(
        "target/rig/6.1/summary.txt",
        &sb.read("target/rig/6.1/summary.txt").replacen(
            "PASS ours-ours-nfs-dump-v6",
            "FAIL ours-ours-nfs-dump-v6",
            1,
        ),
    );
    let (rc, out) = sb.report(&["--check"]);
    assert_eq!(rc, 3, "a storage check's status is judged: {out}");
}
