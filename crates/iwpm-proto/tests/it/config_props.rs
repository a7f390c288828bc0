//! Property tests of the config parser: no input panics, diagnostics point at real lines,
//! and well-formed settings always round-trip.

use iwpm_proto::config::{parse_config, parse_config_bytes, ConfigDiagnostic, ConfigKey};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..600)) {
        let (config, diags) = parse_config_bytes(&b);
        let lines = b.split_inclusive(|&x| x == b'\n').count();
        for d in &diags {
            prop_assert!(d.line() >= 1 && d.line() <= lines, "{}", d);
            let prefix = format!("line {}: ", d.line());
            prop_assert!(d.to_string().starts_with(&prefix));
        }
        if let Some(v) = config.nl_sock_rbuf_size {
            prop_assert!(v >= 1 && v <= i32::MAX as u32);
        }
        prop_assert_ne!(config.extra.peer_port, Some(0));
    }

    #[test]
    fn arbitrary_text_matches_bytes(s in "[ -~\t\r\n=#]{0,300}") {
        prop_assert_eq!(parse_config(&s), parse_config_bytes(s.as_bytes()));
    }

    #[test]
    fn every_c_int_is_applied_iff_positive(
        v in any::<i32>(),
        sp in "[ ]{0,3}",     // a tab before '=' would join the key
        ws in "[ \t\r]{0,3}",
    ) {
        let (c, d) = parse_config(&format!("nl_sock_rbuf_size{sp}={ws}{v}{ws}\n"));
        if v > 0 {
            prop_assert_eq!(c.nl_sock_rbuf_size, Some(v as u32));
            prop_assert!(d.is_empty());
        } else {
            prop_assert_eq!(c.nl_sock_rbuf_size, None);
            prop_assert_eq!(d, vec![ConfigDiagnostic::NonPositiveValue {
                line: 1, key: ConfigKey::NlSockRbufSize, value: v,
            }]);
        }
    }

    #[test]
    fn numbers_beyond_c_int_are_out_of_range(v in any::<i64>()) {
        prop_assume!(v > i64::from(i32::MAX) || v < i64::from(i32::MIN));
        let (c, d) = parse_config(&format!("nl_sock_rbuf_size={v}"));
        prop_assert_eq!(c.nl_sock_rbuf_size, None);
        prop_assert_eq!(d, vec![ConfigDiagnostic::ValueOutOfRange {
            line: 1, key: ConfigKey::NlSockRbufSize, value: v.to_string(), min: 1, max: i64::from(i32::MAX),
        }]);
    }

    #[test]
    fn every_port_and_address_is_applied(
        port in 1u16..,
        v4 in any::<[u8; 4]>(),
        v6 in any::<[u8; 16]>(),
    ) {
        let v4 = std::net::Ipv4Addr::from(v4);
        let v6 = std::net::Ipv6Addr::from(v6);
        let (c, d) = parse_config(&format!(
            "peer_port={port}\npeer_bind_v4={v4}\npeer_bind_v6={v6}\n"
        ));
        prop_assert!(d.is_empty());
        prop_assert_eq!(c.peer_port(), port);
        prop_assert_eq!(c.peer_bind_v4(), v4);
        prop_assert_eq!(c.peer_bind_v6(), v6);
    }
}
