//! Property tests of the fleet key file parser: lines built from the format's own words
//! (ids, keys of every length, `accept-only`, comments, blanks, stray words) go through the
//! fuzz oracle (`iwpm_proto::fuzzing::key_file`), and a file of valid lines always parses
//! to the keys it lists.

use iwpm_proto::keyfile::parse_key_file;
use proptest::prelude::*;

/// One line of a key file, often valid, sometimes not in one way or another.
fn line() -> impl Strategy<Value = String> {
    let id = prop_oneof![
        (1u32..6).prop_map(|i| i.to_string()),
        Just("0".to_owned()),
        Just("4294967296".to_owned()),
        "[-+x0-9a-z]{1,4}",
    ];
    let key = prop_oneof![
        4 => (16usize..=64).prop_flat_map(|n| proptest::string::string_regex(&format!("[0-9a-fA-F]{{{}}}", 2 * n)).unwrap()),
        1 => "[0-9a-fA-F]{0,140}",
        1 => "[0-9a-gx]{30,40}",
    ];
    let tail = prop_oneof![
        4 => Just(String::new()),
        2 => Just(" accept-only".to_owned()),
        1 => Just(" # a comment".to_owned()),
        1 => "[ \t][a-z_-]{1,12}",
    ];
    prop_oneof![
        6 => (id, "[ \t]{1,2}", key, tail).prop_map(|(i, sp, k, t)| format!("{i}{sp}{k}{t}")),
        1 => Just(String::new()),
        1 => "#[ -~]{0,40}",
        1 => "[ \t\r]{0,3}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn any_file_of_format_words_satisfies_the_oracle(
        lines in proptest::collection::vec(line(), 0..8),
        crlf in any::<bool>(),
    ) {
        let nl = if crlf { "\r\n" } else { "\n" };
        let text = lines.join(nl);
        iwpm_proto::fuzzing::key_file(text.as_bytes());
    }

    #[test]
    fn valid_lines_parse_to_the_keys_they_list(
        keys in proptest::collection::btree_map(1u32.., (16usize..=64, any::<bool>(), any::<u8>()), 1..6),
    ) {
        let mut keys = keys;
        // One key must sign.
        if keys.values().all(|(_, accept_only, _)| *accept_only) {
            keys.values_mut().next().unwrap().1 = false;
        }
        let text: String = keys
            .iter()
            .map(|(id, (len, accept_only, fill))| {
                let flag = if *accept_only { " accept-only" } else { "" };
                format!("{id} {}{flag}\n", format!("{fill:02x}").repeat(*len))
            })
            .collect();
        let set = parse_key_file(&text).unwrap();
        prop_assert_eq!(set.len(), keys.len());
        for (k, (id, (len, accept_only, fill))) in set.iter().zip(&keys) {
            prop_assert_eq!(k.id(), *id);
            prop_assert_eq!(k.accept_only(), *accept_only);
            prop_assert_eq!(k.secret(), &vec![*fill; *len][..]);
        }
        let signing = keys.iter().rev().find(|(_, (_, a, _))| !a).map(|(id, _)| *id);
        prop_assert_eq!(Some(set.signing().id()), signing);
    }
}
