//! Warnings when a bounded resource passes 80 % use (and a note when it falls back under
//! 70 %), so an operator hears about a limit before anything is refused.

/// The bounded resources an operator can raise in `iwpmd.conf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resource {
    Mappings,
    LocalExchanges,
    PeerExchanges,
    RemoteInfoBudget,
}

impl Resource {
    const ALL: [Resource; 4] = [
        Resource::Mappings,
        Resource::LocalExchanges,
        Resource::PeerExchanges,
        Resource::RemoteInfoBudget,
    ];

    fn key(self) -> &'static str {
        match self {
            Resource::Mappings => "max_mappings",
            Resource::LocalExchanges => "max_exchanges",
            Resource::PeerExchanges => "max_peer_exchanges",
            Resource::RemoteInfoBudget => "remote_info_budget",
        }
    }
}

/// Which resources are above the warning level now.
#[derive(Clone, Debug, Default)]
pub(crate) struct Usage {
    high: [bool; 4],
}

/// A level change worth a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UsageChange {
    High {
        key: &'static str,
        used: u64,
        max: u64,
    },
    Normal {
        key: &'static str,
    },
}

impl Usage {
    /// Whether some resource is at its limit (above 80 %, not yet back under 70 %).
    pub(crate) fn any_high(&self) -> bool {
        self.high.contains(&true)
    }

    /// Whether `used` of `max` is at the warning level (80 %); never for `max` 0 (no
    /// limit).
    pub(crate) fn is_high(used: u64, max: u64) -> bool {
        max > 0 && used * 10 >= max * 8
    }

    /// Compares `levels(resource) = (used, max)` with the thresholds; returns changes.
    pub(crate) fn update(&mut self, levels: impl Fn(Resource) -> (u64, u64)) -> Vec<UsageChange> {
        let mut changes = Vec::new();
        for (i, r) in Resource::ALL.into_iter().enumerate() {
            let (used, max) = levels(r);
            if max == 0 {
                continue;
            }
            let high = self.high.get_mut(i);
            let Some(high) = high else { continue };
            if !*high && Usage::is_high(used, max) {
                *high = true;
                changes.push(UsageChange::High {
                    key: r.key(),
                    used,
                    max,
                });
            } else if *high && used * 10 < max * 7 {
                *high = false;
                changes.push(UsageChange::Normal { key: r.key() });
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_once_above_80_and_rearms_under_70() {
        let mut u = Usage::default();
        let at = |n: u64| {
            move |r: Resource| {
                if r == Resource::Mappings {
                    (n, 100)
                } else {
                    (0, 10)
                }
            }
        };
        assert!(u.update(at(79)).is_empty());
        assert_eq!(
            u.update(at(80)),
            vec![UsageChange::High {
                key: "max_mappings",
                used: 80,
                max: 100
            }]
        );
        assert!(u.update(at(95)).is_empty(), "once");
        assert!(u.update(at(70)).is_empty(), "hysteresis");
        assert_eq!(
            u.update(at(69)),
            vec![UsageChange::Normal {
                key: "max_mappings"
            }]
        );
    }
}
