//! Differential test against glibc: a small C program runs the C daemon's parsing loop
//! (`fgets` into a 128-byte buffer, `#`/`\n` skip, `sscanf("%64[^= ] %*[=]%d")`) on
//! thousands of generated files, and our parser must agree on every outcome: unparsable
//! lines, unknown keys (in order), ignored non-positive values and the final value.
//! Skipped when no C compiler is installed (CI installs gcc).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use iwpm_proto::config::{parse_config_bytes, ConfigDiagnostic};

/// The C side. The key buffer has 65 bytes so that a 64-byte key (one byte too many for
/// the daemon's 64-byte buffer) is well defined here. Input: records `<len>\n<bytes>`;
/// output per record: `U` per unparsable chunk, `K <hex key> <value>` per scanned
/// key/value, then `E`.
const HARNESS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    size_t len;
    while (scanf("%zu", &len) == 1) {
        getchar();
        char *doc = malloc(len + 1);
        if (fread(doc, 1, len, stdin) != len) return 2;
        FILE *f = fmemopen(doc, len, "r");
        char line[128];
        while (len && fgets(line, 128, f)) {
            if (line[0] == '#' || line[0] == '\n') continue;
            char key[65];
            int val = 0;
            int n = sscanf(line, "%64[^= ] %*[=]%d", key, &val);
            if (n != 2) { printf("U\n"); continue; }
            printf("K ");
            for (char *p = key; *p; p++) printf("%02x", (unsigned char)*p);
            printf(" %d\n", val);
        }
        if (len) fclose(f);
        free(doc);
        printf("E\n");
    }
    return 0;
}
"#;

fn build_harness() -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("iwpm-config-diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let src = dir.join("harness.c");
    let bin = dir.join("harness");
    std::fs::write(&src, HARNESS).ok()?;
    let status = Command::new("cc")
        .arg("-O1")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .status()
        .ok()?;
    status.success().then_some(bin)
}

/// Deterministic generator of config-like files from tricky fragments.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn doc(&mut self) -> Vec<u8> {
        const FRAGMENTS: &[&[u8]] = &[
            b"nl_sock_rbuf_size",
            b"nl_sock_rbuf_size=",
            b"nl_sock_rbuf_size = ",
            b"=",
            b"==",
            b" ",
            b"\t",
            b"\r",
            b"\x0b",
            b"#",
            b"-",
            b"+",
            b"0",
            b"7",
            b"4096",
            b"419430400",
            b"x",
            b"foo",
            b"k",
            b"M",
            b"\n",
            b"\n",
            b"\n",
            b"\0",
        ];
        let mut doc = Vec::new();
        let lines = 1 + self.below(6);
        for _ in 0..lines {
            if self.below(8) == 0 {
                // A long line, to exercise the 127-byte chunks.
                let pad = 100 + self.below(200);
                doc.extend(std::iter::repeat_n(
                    if self.below(2) == 0 { b'#' } else { b'k' },
                    pad,
                ));
            }
            for _ in 0..self.below(8) {
                doc.extend_from_slice(FRAGMENTS[self.below(FRAGMENTS.len())]);
            }
            if self.below(5) != 0 {
                doc.push(b'\n');
            }
        }
        doc
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Outcome {
    unparsable: usize,
    unknown: Vec<Vec<u8>>,
    non_positive: usize,
    value: Option<u32>,
}

fn from_c(events: &[&str]) -> Outcome {
    let mut o = Outcome::default();
    for e in events {
        if *e == "U" {
            o.unparsable += 1;
            continue;
        }
        let mut parts = e.split(' ');
        assert_eq!(parts.next(), Some("K"));
        let hex = parts.next().unwrap();
        let key: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let val: i32 = parts.next().unwrap().parse().unwrap();
        if key != b"nl_sock_rbuf_size" {
            o.unknown.push(key);
        } else if val > 0 {
            o.value = Some(val as u32);
        } else {
            o.non_positive += 1;
        }
    }
    o
}

fn from_rust(doc: &[u8]) -> Outcome {
    let (config, diags) = parse_config_bytes(doc);
    let mut o = Outcome {
        value: config.nl_sock_rbuf_size,
        ..Outcome::default()
    };
    for d in diags {
        match d {
            ConfigDiagnostic::UnparsableLine { .. } => o.unparsable += 1,
            // C reads the value before the key: an unknown key with no integer is an
            // unparsable line there.
            ConfigDiagnostic::UnknownKey {
                value_is_integer: false,
                ..
            } => o.unparsable += 1,
            ConfigDiagnostic::UnknownKey { key, .. } => o.unknown.push(key.into_bytes()),
            ConfigDiagnostic::NonPositiveValue { .. } => o.non_positive += 1,
            ConfigDiagnostic::ValueOutOfRange { .. } => panic!("generator made a huge number"),
            _ => {}
        }
    }
    o
}

fn has_long_digit_run(doc: &[u8]) -> bool {
    doc.split(|b| !b.is_ascii_digit()).any(|run| run.len() > 9)
}

#[test]
fn agrees_with_glibc_sscanf() {
    let Some(harness) = build_harness() else {
        eprintln!("skipping: no working C compiler");
        assert!(
            std::env::var_os("CI").is_none(),
            "a C compiler (gcc) must be installed in CI (.ci/run installs it)"
        );
        return;
    };
    let mut gen = Gen(0x1d87_2b41_c9a0_77f3);
    let docs: Vec<Vec<u8>> = std::iter::repeat_with(|| gen.doc())
        .filter(|d| !has_long_digit_run(d))
        .take(4000)
        .collect();
    let mut input = Vec::new();
    for d in &docs {
        writeln!(input, "{}", d.len()).unwrap();
        input.extend_from_slice(d);
    }
    let mut child = Command::new(&harness)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    let _ = std::fs::remove_dir_all(harness.parent().unwrap());

    let text = String::from_utf8(out.stdout).unwrap();
    let mut records = text.split_terminator("E\n");
    let mut interesting = 0;
    for doc in &docs {
        let events: Vec<&str> = records
            .next()
            .expect("one record per doc")
            .lines()
            .collect();
        let c = from_c(&events);
        let ours = from_rust(doc);
        assert_eq!(ours, c, "doc {:?}", String::from_utf8_lossy(doc));
        interesting += usize::from(c.value.is_some() || !c.unknown.is_empty());
    }
    assert_eq!(records.next(), None);
    // The generator must reach the accepting paths, not only the error ones.
    assert!(
        interesting > 500,
        "only {interesting} documents set or named a key"
    );
}
