//! The values of the extension keys (`ConfigKey` with `KeyOrigin::Extension`): each parsed
//! strictly, the whole trimmed value or nothing (see the parent module's docs).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{lossy, ConfigDiagnostic, ConfigKey, Parser, PEER_AUTH_WINDOW_MAX};
use crate::cidr::{parse_cidr_list_naming, Cidr, CidrError};

impl Parser {
    pub(super) fn extension(&mut self, line: usize, key: ConfigKey, value: &[u8]) {
        let text = lossy(value);
        let invalid = |expected| ConfigDiagnostic::InvalidValue {
            line,
            key,
            value: text.clone(),
            expected,
        };
        match key {
            ConfigKey::PeerPort => {
                const EXPECTED: &str = "a port number";
                if !value.iter().all(u8::is_ascii_digit) {
                    self.diags.push(invalid(EXPECTED));
                    return;
                }
                match text.parse::<u64>().ok().and_then(|n| u16::try_from(n).ok()) {
                    Some(port) if port != 0 => self.config.extra.peer_port = Some(port),
                    _ => {
                        self.diags.push(ConfigDiagnostic::ValueOutOfRange {
                            line,
                            key,
                            value: text.clone(),
                            min: 1,
                            max: i64::from(u16::MAX),
                        });
                        return;
                    }
                }
            }
            ConfigKey::PeerBindV4 => match text.parse::<Ipv4Addr>() {
                Ok(a) => self.config.extra.peer_bind_v4 = Some(a),
                Err(_) => {
                    self.diags.push(invalid("an IPv4 address"));
                    return;
                }
            },
            ConfigKey::PeerBindV6 => match text.parse::<Ipv6Addr>() {
                Ok(a) => self.config.extra.peer_bind_v6 = Some(a),
                Err(_) => {
                    self.diags.push(invalid("an IPv6 address"));
                    return;
                }
            },
            ConfigKey::PeerAllow => {
                let bad = |entry, reason| ConfigDiagnostic::BadPeerAllowEntry {
                    line,
                    entry,
                    reason,
                };
                if let Err(d) = add_networks(&mut self.config.extra.peer_allow, &text, bad) {
                    self.diags.push(d);
                }
                return;
            }
            ConfigKey::MaxMappings
            | ConfigKey::MaxExchanges
            | ConfigKey::MaxPeerExchanges
            | ConfigKey::PeerSourceQuota
            | ConfigKey::RemoteInfoBudget
            | ConfigKey::RemoteInfoSourceBurst
            | ConfigKey::RemoteInfoSourceRate => {
                // A budget of 0 means "always wait for the ACK"; a limit of 0 would refuse
                // everything, so the limits start at 1. A number outside the range is said as
                // such (with the range), not as "not a number".
                let min: u32 = match key {
                    ConfigKey::RemoteInfoBudget
                    | ConfigKey::RemoteInfoSourceBurst
                    | ConfigKey::RemoteInfoSourceRate => 0,
                    _ => 1,
                };
                if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
                    self.diags.push(invalid("a whole number"));
                    return;
                }
                let Some(n) = text.parse::<u32>().ok().filter(|n| *n >= min) else {
                    self.diags.push(ConfigDiagnostic::ValueOutOfRange {
                        line,
                        key,
                        value: text.clone(),
                        min: i64::from(min),
                        max: i64::from(u32::MAX),
                    });
                    return;
                };
                let extra = &mut self.config.extra;
                let slot = match key {
                    ConfigKey::MaxMappings => &mut extra.max_mappings,
                    ConfigKey::MaxExchanges => &mut extra.max_exchanges,
                    ConfigKey::MaxPeerExchanges => &mut extra.max_peer_exchanges,
                    ConfigKey::PeerSourceQuota => &mut extra.peer_source_quota,
                    ConfigKey::RemoteInfoSourceBurst => &mut extra.remote_info_source_burst,
                    ConfigKey::RemoteInfoSourceRate => &mut extra.remote_info_source_rate,
                    _ => &mut extra.remote_info_budget,
                };
                *slot = Some(n);
            }
            ConfigKey::PeerKeyFile => {
                if text.starts_with('/') && !text.contains('\u{fffd}') {
                    self.config.extra.peer_key_file = Some(text.clone().into());
                } else {
                    self.diags
                        .push(ConfigDiagnostic::BadPeerKeyFile { line, value: text });
                    return;
                }
            }
            ConfigKey::PeerAuthRequired => {
                let bad = |entry, reason| ConfigDiagnostic::BadPeerAuthEntry {
                    line,
                    entry,
                    reason,
                };
                let list = &mut self.config.extra.peer_auth_required;
                if let Err(d) = add_networks(list, &text, bad) {
                    self.diags.push(d);
                }
                return;
            }
            ConfigKey::PeerAuthWindow => {
                let n = value
                    .iter()
                    .all(u8::is_ascii_digit)
                    .then(|| text.parse::<u64>().ok())
                    .flatten();
                let Some(n) = n else {
                    self.diags.push(invalid("a whole number of seconds"));
                    return;
                };
                match u32::try_from(n) {
                    Ok(secs @ 1..=PEER_AUTH_WINDOW_MAX) => {
                        self.config.extra.peer_auth_window = Some(secs);
                    }
                    _ => {
                        self.diags.push(ConfigDiagnostic::ValueOutOfRange {
                            line,
                            key,
                            value: text.clone(),
                            min: 1,
                            max: i64::from(PEER_AUTH_WINDOW_MAX),
                        });
                        return;
                    }
                }
            }
            ConfigKey::StateFile => {
                if text == "none" {
                    self.config.extra.state_file = Some(None);
                } else if text.starts_with('/') && !text.contains('\u{fffd}') {
                    self.config.extra.state_file = Some(Some(text.clone().into()));
                } else {
                    self.diags.push(invalid("an absolute path or `none`"));
                    return;
                }
            }
            // C keys never come here.
            ConfigKey::NlSockRbufSize => return,
        }
        self.mark_set(line, key);
    }
}

/// Adds the networks of a list line to `list`. Every line adds to the list (a long list
/// need not fit C's 127-byte line), so no "overridden" diagnostic; a bad entry is `bad`'s
/// diagnostic and adds nothing.
fn add_networks(
    list: &mut Option<Vec<Cidr>>,
    text: &str,
    bad: impl FnOnce(String, CidrError) -> ConfigDiagnostic,
) -> Result<(), ConfigDiagnostic> {
    let nets = parse_cidr_list_naming(text).map_err(|(entry, reason)| bad(entry, reason))?;
    list.get_or_insert_with(Vec::new).extend(nets);
    Ok(())
}
