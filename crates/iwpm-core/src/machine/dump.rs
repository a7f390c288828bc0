//! The SIGUSR1 dump: the C daemon's lines, byte for byte, plus our extra details on lines of
//! their own (none contains "Mapping #", so scripts counting mappings keep working).

use std::net::IpAddr;
use std::time::Instant;

use iwpm_proto::sockaddr::Endpoint;

use super::Core;

/// `Local address IPV4 10.0.0.1:4000(0x0FA0)` as C prints it.
fn address_line(label: &str, ep: &Endpoint) -> String {
    let fam = match ep.ip {
        IpAddr::V4(_) => "IPV4",
        IpAddr::V6(_) => "IPV6",
    };
    format!(
        "{label} address {fam} {}:{}(0x{:04X})",
        ep.ip, ep.port, ep.port
    )
}

impl Core {
    /// The SIGUSR1 dump, one log line per element, newest mapping first (as C).
    pub fn dump_lines(&self) -> Vec<String> {
        self.dump_lines_at(self.last_now)
    }

    /// [`Core::dump_lines`] with ages computed at `now`.
    pub fn dump_lines_at(&self, now: Instant) -> Vec<String> {
        let mut out = vec!["print_iwpm_mapped_ports:".to_owned()];
        for (i, (_, m)) in self.table.iter().enumerate() {
            out.push(format!("Mapping #{i}"));
            out.push(address_line("Local", &m.local_ep()));
            out.push(address_line("Mapped", &m.mapped_ep()));
            out.push(format!(
                "    refcount {} owner client {} wildcard {} no_port_map {} age {}s",
                m.refcount,
                m.owner,
                if m.local_ep().is_wildcard() {
                    "yes"
                } else {
                    "no"
                },
                if m.no_port_map { "yes" } else { "no" },
                now.saturating_duration_since(m.created_at).as_secs(),
            ));
        }
        // What follows is about the daemon, not the last mapping: not indented like a
        // mapping's detail line.
        let (active, passive) = (self.exchanges.active_len(), self.exchanges.passive_len());
        for client in 0..=u8::MAX {
            let Some(info) = self.clients.info(client) else {
                continue;
            };
            out.push(format!(
                "kernel client {client} registered: device {} interface {}",
                info.ibdev_name.to_string_lossy(),
                info.if_name.to_string_lossy(),
            ));
        }
        out.push(format!(
            "peer exchanges in flight: {active} connecting, {passive} accepting; iwpm ABI {}",
            self.abi.0
        ));
        out
    }
}
