//! `/etc/iwpmd.conf` parsing: every accept/skip/reject rule of the C parser, our extension
//! keys, and the exact diagnostic each case produces.

use std::net::{Ipv4Addr, Ipv6Addr};

use iwpm_proto::config::{
    parse_config, parse_config_bytes, Config, ConfigDiagnostic as D, ConfigKey, KeyOrigin,
    Severity, UnparsableReason as R, CONFIG_CHUNK_LEN, CONFIG_KEY_MAX_LEN, IWPM_CONFIG_FILE,
};

const NL: ConfigKey = ConfigKey::NlSockRbufSize;

/// Parses and returns the rbuf setting and the diagnostics.
fn rbuf(text: &str) -> (Option<u32>, Vec<D>) {
    let (c, d) = parse_config(text);
    (c.nl_sock_rbuf_size, d)
}

fn unparsable(line: usize, reason: R, text: &str) -> D {
    D::UnparsableLine {
        line,
        reason,
        text: text.to_string(),
    }
}

/// An unknown key with an integer value.
fn unknown(line: usize, key: &str) -> D {
    D::UnknownKey {
        line,
        key: key.to_string(),
        value_is_integer: true,
    }
}

fn out_of_range_c(line: usize, value: &str) -> D {
    D::ValueOutOfRange {
        line,
        key: NL,
        value: value.to_string(),
        min: 1,
        max: 2_147_483_647,
    }
}

// ---------------------------------------------------------------- skipped lines

#[test]
fn empty_file_gives_defaults() {
    assert_eq!(parse_config(""), (Config::default(), vec![]));
    assert_eq!(IWPM_CONFIG_FILE, "/etc/iwpmd.conf");
}

#[test]
fn comments_and_empty_lines_are_skipped() {
    let text = "# iwpmd configuration\n\n#nl_sock_rbuf_size=5\n\n";
    assert_eq!(parse_config(text), (Config::default(), vec![]));
}

#[test]
fn hash_only_counts_as_first_byte() {
    assert_eq!(
        rbuf(" # indented comment\n"),
        (None, vec![unparsable(1, R::NoName, " # indented comment")])
    );
    assert_eq!(
        rbuf("nl_sock_rbuf_size=5 # five\n"),
        (
            Some(5),
            vec![D::TrailingTextIgnored {
                line: 1,
                key: NL,
                value: 5,
                trailing: "# five".into()
            }]
        )
    );
}

#[test]
fn crlf_blank_line_is_not_empty() {
    // Only "\n" is an empty line to C; "\r" becomes a key with no '='.
    assert_eq!(rbuf("\r\n"), (None, vec![unparsable(1, R::NoEquals, "\r")]));
}

// ---------------------------------------------------------------- accepted forms

#[test]
fn shipped_value_is_accepted() {
    assert_eq!(
        rbuf("# receive buffer\nnl_sock_rbuf_size=419430400\n"),
        (Some(419_430_400), vec![])
    );
}

#[test]
fn accepted_spellings() {
    for text in [
        "nl_sock_rbuf_size=7",
        "nl_sock_rbuf_size=7\n",
        "nl_sock_rbuf_size=7\r\n",
        "nl_sock_rbuf_size =7",
        "nl_sock_rbuf_size \t =7",
        "nl_sock_rbuf_size= 7",
        "nl_sock_rbuf_size=\t7 \t\r\n",
        "nl_sock_rbuf_size==7",
        "nl_sock_rbuf_size ===   7",
        "nl_sock_rbuf_size=+7",
        "nl_sock_rbuf_size=0007",
    ] {
        assert_eq!(rbuf(text), (Some(7), vec![]), "{text:?}");
    }
}

#[test]
fn trailing_text_is_ignored_as_in_c_but_reported() {
    assert_eq!(
        rbuf("nl_sock_rbuf_size=400M\n"),
        (
            Some(400),
            vec![D::TrailingTextIgnored {
                line: 1,
                key: NL,
                value: 400,
                trailing: "M".into()
            }]
        )
    );
    assert_eq!(
        rbuf("nl_sock_rbuf_size=12 34\n"),
        (
            Some(12),
            vec![D::TrailingTextIgnored {
                line: 1,
                key: NL,
                value: 12,
                trailing: "34".into()
            }]
        )
    );
}

#[test]
fn later_line_overrides() {
    assert_eq!(
        rbuf("nl_sock_rbuf_size=1\nnl_sock_rbuf_size=2\n\nnl_sock_rbuf_size=3\n"),
        (
            Some(3),
            vec![
                D::Overridden {
                    line: 2,
                    key: NL,
                    previous_line: 1
                },
                D::Overridden {
                    line: 4,
                    key: NL,
                    previous_line: 2
                },
            ]
        )
    );
}

// ---------------------------------------------------------------- values

#[test]
fn non_positive_values_are_ignored_at_debug_level() {
    for (text, value) in [
        ("nl_sock_rbuf_size=0", 0),
        ("nl_sock_rbuf_size=-0", 0),
        ("nl_sock_rbuf_size=-5", -5),
        ("nl_sock_rbuf_size=-2147483648", i32::MIN),
        ("nl_sock_rbuf_size=0x100", 0),
    ] {
        let (v, d) = rbuf(text);
        assert_eq!(v, None, "{text}");
        assert_eq!(
            d,
            vec![D::NonPositiveValue {
                line: 1,
                key: NL,
                value
            }],
            "{text}"
        );
        // Said without -v (C says nothing): the line has no effect.
        assert_eq!(d[0].severity(), Severity::Warning);
    }
    // And they do not undo an earlier value.
    assert_eq!(
        rbuf("nl_sock_rbuf_size=9\nnl_sock_rbuf_size=0\n").0,
        Some(9)
    );
}

#[test]
fn values_beyond_c_int_are_out_of_range() {
    assert_eq!(
        rbuf("nl_sock_rbuf_size=2147483647"),
        (Some(i32::MAX as u32), vec![])
    );
    for value in [
        "2147483648",
        "4294967297", // glibc would wrap this to 1
        "-2147483649",
        "+99999999999999999999999999999999999999999",
        "-99999999999999999999999999999999999999999",
    ] {
        assert_eq!(
            rbuf(&format!("nl_sock_rbuf_size={value}xyz")),
            (None, vec![out_of_range_c(1, value)]),
            "{value}"
        );
    }
}

#[test]
fn missing_integer_is_unparsable() {
    for text in [
        "nl_sock_rbuf_size=",
        "nl_sock_rbuf_size=\n",
        "nl_sock_rbuf_size=abc",
        "nl_sock_rbuf_size=-",
        "nl_sock_rbuf_size=+ 5",
        "nl_sock_rbuf_size= = 5",
        "nl_sock_rbuf_size=.5",
    ] {
        let line = text.trim_end_matches('\n');
        assert_eq!(
            rbuf(text),
            (None, vec![unparsable(1, R::NoInteger, line)]),
            "{text:?}"
        );
    }
}

// ---------------------------------------------------------------- keys

#[test]
fn leading_space_or_equals_is_unparsable() {
    assert_eq!(
        rbuf(" nl_sock_rbuf_size=5\n"),
        (None, vec![unparsable(1, R::NoName, " nl_sock_rbuf_size=5")])
    );
    assert_eq!(rbuf("=5\n"), (None, vec![unparsable(1, R::NoName, "=5")]));
}

#[test]
fn leading_tab_becomes_part_of_the_key() {
    // C's %[^= ] stops only at '=' and space.
    assert_eq!(
        rbuf("\tnl_sock_rbuf_size=5\n"),
        (None, vec![unknown(1, "\tnl_sock_rbuf_size")])
    );
    assert_eq!(
        rbuf("nl_sock_rbuf_size\t=5\n"),
        (None, vec![unknown(1, "nl_sock_rbuf_size\t")])
    );
}

#[test]
fn missing_equals_is_unparsable() {
    for text in [
        "nl_sock_rbuf_size 5\n",
        "nl_sock_rbuf_size\n",
        "nl_sock_rbuf_size",
        "nl_sock_rbuf_size :5",
    ] {
        let line = text.trim_end_matches('\n');
        assert_eq!(
            rbuf(text),
            (None, vec![unparsable(1, R::NoEquals, line)]),
            "{text:?}"
        );
    }
}

#[test]
fn unknown_keys() {
    assert_eq!(rbuf("foo=1\n"), (None, vec![unknown(1, "foo")]));
    assert_eq!(
        rbuf("NL_SOCK_RBUF_SIZE=1\n"),
        (None, vec![unknown(1, "NL_SOCK_RBUF_SIZE")])
    );
    assert_eq!(
        rbuf("nl_sock_rbuf_size_x=1\n"),
        (None, vec![unknown(1, "nl_sock_rbuf_size_x")])
    );
    // Unknown wins over a non-positive value (C looks the key up first there)...
    assert_eq!(rbuf("foo=0\n"), (None, vec![unknown(1, "foo")]));
    // ...and over a value that is no integer (C skips that line as unparsable, since it
    // reads the value first; the name is what an operator got wrong).
    let no_integer = D::UnknownKey {
        line: 1,
        key: "foo".into(),
        value_is_integer: false,
    };
    assert_eq!(rbuf("foo=bar\n"), (None, vec![no_integer]));
    let (_, diags) = rbuf("foo=bar\n");
    assert_eq!(diags[0].to_string(), "line 1: unknown key \"foo\"");
}

#[test]
fn key_length_limit() {
    let k63 = "k".repeat(63);
    let k64 = "k".repeat(CONFIG_KEY_MAX_LEN);
    let k65 = "k".repeat(65);
    assert_eq!(rbuf(&format!("{k63}=1")), (None, vec![unknown(1, &k63)]));
    assert_eq!(rbuf(&format!("{k64}=1")), (None, vec![unknown(1, &k64)]));
    assert_eq!(
        rbuf(&format!("{k65}=1")),
        (
            None,
            vec![unparsable(1, R::NameTooLong, &format!("{k65}=1"))]
        )
    );
    // 64 key bytes then whitespace: C's width stops the key, the space directive skips the
    // tab, and the line parses.
    assert_eq!(rbuf(&format!("{k64}\t=1")), (None, vec![unknown(1, &k64)]));
}

// ---------------------------------------------------------------- chunking

#[test]
fn long_comment_tail_is_parsed_as_a_line() {
    // fgets with a 128-byte buffer: bytes 127.. form a new line, which C parses.
    let text = format!(
        "#{}nl_sock_rbuf_size=77\n",
        "x".repeat(CONFIG_CHUNK_LEN - 1)
    );
    assert_eq!(
        rbuf(&text),
        (
            Some(77),
            vec![D::LongLineSplit {
                line: 1,
                len: text.len() - 1
            }]
        )
    );
}

#[test]
fn value_cut_by_the_chunk_boundary() {
    let head = "nl_sock_rbuf_size=";
    let pad = " ".repeat(CONFIG_CHUNK_LEN - head.len() - 2);
    let text = format!("# first line\n{head}{pad}123456\n");
    assert_eq!(
        rbuf(&text),
        (
            Some(12),
            vec![
                D::LongLineSplit {
                    line: 2,
                    len: CONFIG_CHUNK_LEN + 4
                },
                unparsable(2, R::NoEquals, "3456"),
            ]
        )
    );
}

#[test]
fn line_of_exactly_127_bytes_is_whole() {
    let head = "nl_sock_rbuf_size=5";
    let text = format!("{head}{}\n", " ".repeat(CONFIG_CHUNK_LEN - head.len()));
    assert_eq!(text.len(), CONFIG_CHUNK_LEN + 1);
    assert_eq!(rbuf(&text), (Some(5), vec![]));
}

#[test]
fn very_long_line_gives_one_split_notice_and_a_result_per_chunk() {
    let text = format!("a{}\n", "b".repeat(3 * CONFIG_CHUNK_LEN));
    let (_, d) = rbuf(&text);
    assert_eq!(d.len(), 1 + 4);
    assert_eq!(
        d[0],
        D::LongLineSplit {
            line: 1,
            len: 3 * CONFIG_CHUNK_LEN + 1
        }
    );
    assert!(d[1..].iter().all(|x| matches!(
        x,
        D::UnparsableLine {
            line: 1,
            reason: R::NameTooLong | R::NoEquals,
            ..
        }
    )));
}

#[test]
fn line_numbers_are_physical() {
    let text = "# c\n\nfoo=1\n bad\nnl_sock_rbuf_size=3\nnl_sock_rbuf_size=x\n";
    assert_eq!(
        rbuf(text),
        (
            Some(3),
            vec![
                unknown(3, "foo"),
                unparsable(4, R::NoName, " bad"),
                unparsable(6, R::NoInteger, "nl_sock_rbuf_size=x"),
            ]
        )
    );
}

#[test]
fn nul_byte_ends_the_line_for_the_scanner() {
    assert_eq!(
        parse_config_bytes(b"nl_sock_rbuf_size=5\0junk\n")
            .0
            .nl_sock_rbuf_size,
        Some(5)
    );
    assert_eq!(parse_config_bytes(b"nl_sock_rbuf_size=5\0junk\n").1, vec![]);
    assert_eq!(
        parse_config_bytes(b"\0nl_sock_rbuf_size=5\n").1,
        vec![unparsable(1, R::NoName, "\0nl_sock_rbuf_size=5")]
    );
    assert_eq!(
        parse_config_bytes(b"nl_sock_rbuf_size=\0 5\n").1,
        vec![unparsable(1, R::NoInteger, "nl_sock_rbuf_size=\0 5")]
    );
}

#[test]
fn non_utf8_bytes_are_reported_lossily() {
    let (c, d) = parse_config_bytes(b"k\xff=1\nnl_sock_rbuf_size=2\n");
    assert_eq!(c.nl_sock_rbuf_size, Some(2));
    assert_eq!(d, vec![unknown(1, "k\u{fffd}")]);
}

// ---------------------------------------------------------------- extension keys

#[test]
fn extension_keys_accept_valid_values() {
    let (c, d) = parse_config(
        "peer_port=4791\npeer_bind_v4 = 127.0.0.1\npeer_bind_v6=\t::1 \r\nnl_sock_rbuf_size=1\n",
    );
    assert_eq!(d, vec![]);
    assert_eq!(c.extra.peer_port, Some(4791));
    assert_eq!(c.extra.peer_bind_v4, Some(Ipv4Addr::LOCALHOST));
    assert_eq!(c.extra.peer_bind_v6, Some(Ipv6Addr::LOCALHOST));
    assert_eq!(c.peer_port(), 4791);
    assert_eq!(c.peer_bind_v4(), Ipv4Addr::LOCALHOST);
    assert_eq!(c.peer_bind_v6(), Ipv6Addr::LOCALHOST);
    assert_eq!(c.nl_sock_rbuf_size, Some(1));
}

#[test]
fn extension_defaults() {
    let c = Config::default();
    assert_eq!(c.peer_port(), 3935);
    assert_eq!(c.peer_bind_v4(), Ipv4Addr::UNSPECIFIED);
    assert_eq!(c.peer_bind_v6(), Ipv6Addr::UNSPECIFIED);
}

#[test]
fn peer_port_validation() {
    let port_range = |value: &str| D::ValueOutOfRange {
        line: 1,
        key: ConfigKey::PeerPort,
        value: value.into(),
        min: 1,
        max: 65535,
    };
    let invalid = |value: &str| D::InvalidValue {
        line: 1,
        key: ConfigKey::PeerPort,
        value: value.into(),
        expected: "a port number",
    };
    let cases: Vec<(&str, D)> = vec![
        ("peer_port=0", port_range("0")),
        ("peer_port=65536", port_range("65536")),
        (
            "peer_port=99999999999999999999999",
            port_range("99999999999999999999999"),
        ),
        ("peer_port=abc", invalid("abc")),
        ("peer_port=+5", invalid("+5")),
        ("peer_port=-5", invalid("-5")),
        ("peer_port=5 # five", invalid("5 # five")),
        ("peer_port=40 00", invalid("40 00")),
        ("peer_port=", unparsable(1, R::NoValue, "peer_port=")),
        (
            "peer_port=  \r\n",
            unparsable(1, R::NoValue, "peer_port=  \r"),
        ),
    ];
    for (text, want) in cases {
        let (c, d) = parse_config(text);
        assert_eq!(c.extra.peer_port, None, "{text:?}");
        assert_eq!(d, vec![want], "{text:?}");
    }
    assert_eq!(parse_config("peer_port=65535").0.peer_port(), 65535);
    assert_eq!(parse_config("peer_port=00080").0.peer_port(), 80);
}

#[test]
fn bind_address_validation() {
    for (text, key, value, expected) in [
        (
            "peer_bind_v4=::1",
            ConfigKey::PeerBindV4,
            "::1",
            "an IPv4 address",
        ),
        (
            "peer_bind_v4=10.0.0",
            ConfigKey::PeerBindV4,
            "10.0.0",
            "an IPv4 address",
        ),
        (
            "peer_bind_v4=localhost",
            ConfigKey::PeerBindV4,
            "localhost",
            "an IPv4 address",
        ),
        (
            "peer_bind_v6=127.0.0.1",
            ConfigKey::PeerBindV6,
            "127.0.0.1",
            "an IPv6 address",
        ),
        (
            "peer_bind_v6=[::1]",
            ConfigKey::PeerBindV6,
            "[::1]",
            "an IPv6 address",
        ),
        (
            "peer_bind_v6=fe80::1%eth0",
            ConfigKey::PeerBindV6,
            "fe80::1%eth0",
            "an IPv6 address",
        ),
    ] {
        let (c, d) = parse_config(text);
        assert_eq!(c.extra, Default::default(), "{text}");
        assert_eq!(
            d,
            vec![D::InvalidValue {
                line: 1,
                key,
                value: value.into(),
                expected
            }],
            "{text}"
        );
    }
}

#[test]
fn extension_keys_override_and_keep_last_good_value() {
    let (c, d) = parse_config("peer_port=1000\npeer_port=x\npeer_port=2000\n");
    assert_eq!(c.peer_port(), 2000);
    assert_eq!(
        d,
        vec![
            D::InvalidValue {
                line: 2,
                key: ConfigKey::PeerPort,
                value: "x".into(),
                expected: "a port number"
            },
            D::Overridden {
                line: 3,
                key: ConfigKey::PeerPort,
                previous_line: 1
            },
        ]
    );
}

#[test]
fn extension_key_lexing_is_shared_with_c() {
    assert_eq!(
        parse_config(" peer_port=1").1,
        vec![unparsable(1, R::NoName, " peer_port=1")]
    );
    assert_eq!(
        parse_config("peer_port 1").1,
        vec![unparsable(1, R::NoEquals, "peer_port 1")]
    );
    assert_eq!(parse_config("peer_port == 1").0.peer_port(), 1);
}

#[test]
fn peer_allow_lines_accumulate_and_bad_entries_are_errors_naming_them() {
    let (c, d) = parse_config(
        "peer_allow=10.0.0.0/8, 192.168.1.7\npeer_allow = fd00::/64\npeer_allow=10.0.0.0/33\n",
    );
    let nets: Vec<String> = c
        .extra
        .peer_allow
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(nets, ["10.0.0.0/8", "192.168.1.7/32", "fd00::/64"]);
    assert!(
        matches!(
            &d[..],
            [D::BadPeerAllowEntry { line: 3, entry, .. }] if entry == "10.0.0.0/33"
        ),
        "{d:?}"
    );
    assert_eq!(d[0].severity(), Severity::Error);
    assert!(d[0].to_string().contains("\"10.0.0.0/33\""), "{}", d[0]);
    // The bad entry is named even among good ones, and an empty list is an error too.
    let (_, d) = parse_config("peer_allow=10.0.0.0/8, 10.0.0.300\npeer_allow= ,\n");
    assert!(
        matches!(
            &d[..],
            [
                D::BadPeerAllowEntry { line: 1, entry: a, .. },
                D::BadPeerAllowEntry { line: 2, entry: b, .. },
            ] if a == "10.0.0.300" && b.is_empty()
        ),
        "{d:?}"
    );
}

/// The fleet key keys: a key file path, a network list that adds up like `peer_allow`, and
/// a window in seconds; the two that would fail open when skipped are errors.
#[test]
fn fleet_key_keys() {
    let (c, d) = parse_config(
        "peer_key_file = /etc/iwpmd/peer-keys\npeer_auth_required=10.0.0.0/8 192.0.2.7\n\
         peer_auth_required = fd00::/64\npeer_auth_window=300\n",
    );
    assert!(d.is_empty(), "{d:?}");
    assert_eq!(
        c.extra.peer_key_file.as_deref(),
        Some(std::path::Path::new("/etc/iwpmd/peer-keys"))
    );
    let nets: Vec<String> = c
        .extra
        .peer_auth_required
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(nets, ["10.0.0.0/8", "192.0.2.7/32", "fd00::/64"]);
    assert_eq!(c.extra.peer_auth_window, Some(300));

    // Defaults: no key file, nothing required, 60 s.
    let (c, _) = parse_config("");
    assert_eq!(c.extra.peer_key_file, None);
    assert_eq!(c.extra.peer_auth_required, None);
    assert_eq!(c.peer_auth_window(), 60);

    // A relative path and a bad network refuse the file; a bad window is skipped.
    let (c, d) = parse_config(
        "peer_key_file=peer-keys\npeer_auth_required=10.0.0.0/8, 10.0.0.0/40\n\
         peer_auth_window=0\npeer_auth_window=3601\npeer_auth_window=1m\npeer_auth_window=3600\n",
    );
    assert_eq!(c.extra.peer_key_file, None);
    assert_eq!(c.extra.peer_auth_required, None);
    assert_eq!(
        c.extra.peer_auth_window,
        Some(3600),
        "the bound itself is fine"
    );
    let key = ConfigKey::PeerAuthWindow;
    assert_eq!(
        d,
        vec![
            D::BadPeerKeyFile {
                line: 1,
                value: "peer-keys".into()
            },
            D::BadPeerAuthEntry {
                line: 2,
                entry: "10.0.0.0/40".into(),
                reason: iwpm_proto::cidr::CidrError::Prefix("40".into()),
            },
            D::ValueOutOfRange {
                line: 3,
                key,
                value: "0".into(),
                min: 1,
                max: 3600
            },
            D::ValueOutOfRange {
                line: 4,
                key,
                value: "3601".into(),
                min: 1,
                max: 3600
            },
            D::InvalidValue {
                line: 5,
                key,
                value: "1m".into(),
                expected: "a whole number of seconds"
            },
        ]
    );
    let severities: Vec<Severity> = d.iter().map(D::severity).collect();
    assert_eq!(
        severities,
        [
            Severity::Error,
            Severity::Error,
            Severity::Warning,
            Severity::Warning,
            Severity::Warning
        ]
    );
    assert_eq!(
        d[0].to_string(),
        "line 1: peer_key_file = \"peer-keys\" is not an absolute path"
    );
    assert!(
        d[1].to_string()
            .starts_with("line 2: peer_auth_required entry \"10.0.0.0/40\" is not an IP network"),
        "{}",
        d[1]
    );
}

#[test]
fn limits_are_positive_whole_numbers() {
    let (c, d) = parse_config(
        "max_mappings=200000\nmax_exchanges=0\nmax_peer_exchanges=12x\npeer_source_quota=64\nremote_info_budget=0\n",
    );
    assert_eq!(c.extra.max_mappings, Some(200_000));
    assert_eq!(c.extra.max_exchanges, None, "0 refused");
    assert_eq!(c.extra.max_peer_exchanges, None);
    assert_eq!(c.extra.peer_source_quota, Some(64));
    assert_eq!(
        c.extra.remote_info_budget,
        Some(0),
        "0 = always wait for the ACK"
    );
    assert_eq!(d.len(), 2, "{d:?}");
    // A 0 is said to be out of range (with the range), not "not a whole number".
    assert_eq!(
        d[0].to_string(),
        "line 2: max_exchanges = 0 out of range (1..=4294967295), ignored"
    );
    assert_eq!(
        d[1].to_string(),
        "line 3: max_peer_exchanges = \"12x\" is not a whole number, ignored"
    );
    let (_, d) = parse_config("max_mappings=0\nmax_mappings=4294967296\n");
    assert_eq!(
        d.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "line 1: max_mappings = 0 out of range (1..=4294967295), ignored",
            "line 2: max_mappings = 4294967296 out of range (1..=4294967295), ignored",
        ]
    );
}

// ---------------------------------------------------------------- table, display, severity

#[test]
fn key_table() {
    let names: Vec<&str> = ConfigKey::ALL.iter().map(|k| k.name()).collect();
    assert_eq!(
        names,
        [
            "nl_sock_rbuf_size",
            "peer_port",
            "peer_bind_v4",
            "peer_bind_v6",
            "peer_allow",
            "max_mappings",
            "max_exchanges",
            "max_peer_exchanges",
            "peer_source_quota",
            "remote_info_budget",
            "remote_info_source_burst",
            "remote_info_source_rate",
            "state_file",
            "peer_key_file",
            "peer_auth_required",
            "peer_auth_window"
        ]
    );
    for k in ConfigKey::ALL {
        assert_eq!(ConfigKey::from_name(k.name().as_bytes()), Some(k));
        assert_eq!(k.to_string(), k.name());
    }
    assert_eq!(ConfigKey::NlSockRbufSize.origin(), KeyOrigin::CDaemon);
    assert_eq!(ConfigKey::PeerPort.origin(), KeyOrigin::Extension);
    assert_eq!(ConfigKey::PeerBindV4.origin(), KeyOrigin::Extension);
    assert_eq!(ConfigKey::PeerBindV6.origin(), KeyOrigin::Extension);
    assert_eq!(ConfigKey::from_name(b"Peer_Port"), None);
}

#[test]
fn state_file_key() {
    let (c, d) = parse_config_bytes(b"state_file=/run/x/state\n");
    assert!(d.is_empty(), "{d:?}");
    assert_eq!(c.extra.state_file, Some(Some("/run/x/state".into())));
    let (c, _) = parse_config_bytes(b"state_file = none\n");
    assert_eq!(c.extra.state_file, Some(None));
    let (c, d) = parse_config_bytes(b"state_file=relative/state\n");
    assert_eq!(c.extra.state_file, None);
    assert_eq!(d.len(), 1, "{d:?}");
}

#[test]
fn display_messages() {
    let cases: Vec<(D, &str)> = vec![
        (
            unparsable(2, R::NoName, " x=1"),
            "line 2: cannot parse \" x=1\": no key at the start of the line",
        ),
        (
            unparsable(3, R::NameTooLong, "k"),
            "line 3: cannot parse \"k\": key longer than 64 bytes",
        ),
        (
            unparsable(4, R::NoEquals, "k 1"),
            "line 4: cannot parse \"k 1\": no '=' after the key",
        ),
        (
            unparsable(5, R::NoInteger, "k=x"),
            "line 5: cannot parse \"k=x\": no decimal integer after '='",
        ),
        (
            unparsable(6, R::NoValue, "peer_port="),
            "line 6: cannot parse \"peer_port=\": no value after '='",
        ),
        (unknown(7, "\tfoo"), "line 7: unknown key \"\\tfoo\""),
        (
            D::NonPositiveValue {
                line: 8,
                key: NL,
                value: -3,
            },
            "line 8: nl_sock_rbuf_size = -3 ignored (not positive)",
        ),
        (
            out_of_range_c(9, "2147483648"),
            "line 9: nl_sock_rbuf_size = 2147483648 out of range (1..=2147483647), ignored",
        ),
        (
            D::InvalidValue {
                line: 10,
                key: ConfigKey::PeerBindV4,
                value: "x".into(),
                expected: "an IPv4 address",
            },
            "line 10: peer_bind_v4 = \"x\" is not an IPv4 address, ignored",
        ),
        (
            D::TrailingTextIgnored {
                line: 11,
                key: NL,
                value: 400,
                trailing: "M".into(),
            },
            "line 11: nl_sock_rbuf_size = 400: text \"M\" after the number ignored",
        ),
        (
            D::LongLineSplit { line: 12, len: 300 },
            "line 12: 300 bytes long; parsed as 127-byte pieces",
        ),
        (
            D::Overridden {
                line: 13,
                key: ConfigKey::PeerPort,
                previous_line: 1,
            },
            "line 13: peer_port overrides the value set on line 1",
        ),
    ];
    for (d, want) in cases {
        assert_eq!(d.to_string(), want);
    }
}

#[test]
fn severities_and_line_accessor() {
    assert_eq!(
        D::NonPositiveValue {
            line: 1,
            key: NL,
            value: 0
        }
        .severity(),
        Severity::Warning
    );
    assert_eq!(
        D::Overridden {
            line: 2,
            key: NL,
            previous_line: 1
        }
        .severity(),
        Severity::Info
    );
    for d in [
        unparsable(3, R::NoName, ""),
        unknown(3, "x"),
        out_of_range_c(3, "9999999999"),
        D::LongLineSplit { line: 3, len: 200 },
        D::TrailingTextIgnored {
            line: 3,
            key: NL,
            value: 1,
            trailing: "x".into(),
        },
        D::InvalidValue {
            line: 3,
            key: ConfigKey::PeerPort,
            value: "x".into(),
            expected: "a port number",
        },
    ] {
        assert_eq!(d.severity(), Severity::Warning, "{d}");
        assert_eq!(d.line(), 3);
    }
    assert!(Severity::Debug < Severity::Info && Severity::Info < Severity::Warning);
    assert!(Severity::Warning < Severity::Error);
}

// ---------------------------------------------------------------- the documented key lists

/// The keys of the `.SH KEYS` section of `iwpmd.conf(5)` (`.BI name= VALUE` lines).
fn man_page_keys(page: &str) -> Vec<String> {
    let keys = page
        .split("\n.SH ")
        .find(|s| s.starts_with("KEYS\n"))
        .expect("a KEYS section");
    keys.lines()
        .filter_map(|l| l.strip_prefix(".BI "))
        .filter_map(|l| l.split_once("= ").map(|(key, _)| key.to_owned()))
        .collect()
}

/// The keys of the `# Keys` table of the module docs (``//! | `name` | origin | ...``).
fn module_doc_keys(source: &str) -> Vec<(String, String)> {
    source
        .lines()
        .filter_map(|l| l.strip_prefix("//! | `"))
        .filter_map(|l| {
            let (key, rest) = l.split_once("` | ")?;
            let (origin, _) = rest.split_once(" | ")?;
            Some((key.to_owned(), origin.to_owned()))
        })
        .collect()
}

#[test]
fn the_documented_keys_are_the_parsers() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let names: Vec<String> = ConfigKey::ALL.iter().map(|k| k.name().to_owned()).collect();
    assert_eq!(
        man_page_keys(&read("../../packaging/iwpmd.conf.5")),
        names,
        "packaging/iwpmd.conf.5 lists the keys of ConfigKey::ALL, in its order"
    );
    let origins: Vec<(String, String)> = ConfigKey::ALL
        .iter()
        .map(|k| {
            let origin = match k.origin() {
                KeyOrigin::CDaemon => "C daemon",
                KeyOrigin::Extension => "extension",
            };
            (k.name().to_owned(), origin.to_owned())
        })
        .collect();
    assert_eq!(
        module_doc_keys(&read("src/config.rs")),
        origins,
        "the `# Keys` table of src/config.rs lists ConfigKey::ALL with its origins"
    );
}
